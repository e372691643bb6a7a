// The official `openai` npm client (pinned in package.json) against a real `mmserve serve` serving the real
// stories260K (llama2.c's tiny Llama, converted by `mmserve convert-llama2c`, with Llama 2's chat template):
// completions.create greedy from the BOS token id equals llama2.c run.c's story, a text prompt streams the same
// text as it returns whole, stream_options.include_usage gives the usage chunk, stop strings cut the text, the
// same seed gives the same sampled text, chat.completions.create (whole and streamed) returns an assistant
// message, and the SDK's error classes for an unknown model, a CLIP model, bad sampling values and a prompt
// longer than the context; logprobs (greedy = top-1 at every step, chat's bytes and sorted alternatives) and n
// choices (seed + i, summed usage, a streamed chat with each choice's role and finish); a chat with an image
// (an image_url content part with a data URL) on a tiny LLaVA, whole and streamed, and an image sent to a
// text-only model refused as a BadRequestError.
//
// Run by tests/e2e/client_test.sh openai-completions (ctest e2e_client_openai-completions), which sets
// MMSERVE_URL, MMSERVE_API_KEY, MMSERVE_LLM (the decoder's name), MMSERVE_MODEL (a CLIP model), MMSERVE_GOLDEN,
// MMSERVE_VLM (a LLaVA) and MMSERVE_IMAGE (a PNG file).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run through tests/e2e/client_test.sh openai-completions)`);
  return v;
};
const client = new OpenAI({ baseURL: `${env('MMSERVE_URL')}/v1`, apiKey: env('MMSERVE_API_KEY'), maxRetries: 0 });
const model = env('MMSERVE_LLM');
const trim = (s) => s.replace(/\n+$/, '');

test('greedy from BOS is llama2.c run.c\'s story, with usage and finish_reason', async () => {
  const r = await client.completions.create({ model, prompt: [1], max_tokens: 256, temperature: 0,
                                              ignore_eos: true });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, model);
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(trim(r.choices[0].text), trim(readFileSync(env('MMSERVE_GOLDEN'), 'utf8')));
  assert.deepEqual(r.usage, { prompt_tokens: 1, completion_tokens: 256, total_tokens: 257 });
});

test('a streamed completion is the whole one in pieces, then the usage chunk', async () => {
  const whole = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 40, temperature: 0 });
  const stream = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 40, temperature: 0,
                                                   stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
    ++chunks;
  }
  assert.ok(chunks > 3, `only ${chunks} chunks`);
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, whole.usage);
});

test('stop strings cut the text; the same seed gives the same sample', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 60, temperature: 0,
                                              stop: ['Lily'] });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.ok(!r.choices[0].text.includes('Lily'), r.choices[0].text);
  const sample = () => client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 30,
                                                   temperature: 1.5, top_p: 0.95, seed: 42 });
  const [a, b] = [await sample(), await sample()];
  assert.equal(a.choices[0].text, b.choices[0].text);
});

test('chat completions, whole and streamed, answer as the assistant', async () => {
  const messages = [{ role: 'user', content: 'Tell me a story about a cat.' }];
  const r = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(r.usage.prompt_tokens > 10);
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 24, temperature: 0,
                                                        stream: true });
  let text = '', role = null;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta;
    if (d?.role) role = d.role;
    if (d?.content) text += d.content;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, r.choices[0].message.content);
});

test('errors are the SDK\'s classes with messages', async () => {
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'a' }), OpenAI.NotFoundError);
  await assert.rejects(client.completions.create({ model: env('MMSERVE_MODEL'), prompt: 'a' }),
                       OpenAI.BadRequestError);
  await assert.rejects(client.completions.create({ model, prompt: 'a', temperature: -1 }),
                       (e) => e instanceof OpenAI.BadRequestError && /temperature/.test(e.message));
  await assert.rejects(client.completions.create({ model, prompt: Array(600).fill(5) }),
                       (e) => e instanceof OpenAI.BadRequestError && /context length/.test(e.message));
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'a' },
                                                                          { role: 'user', content: 'b' }] }),
                       (e) => e instanceof OpenAI.BadRequestError && /alternate/.test(e.message));
});

test('logprobs: greedy picks the top token; chat gives bytes and sorted alternatives', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, temperature: 0,
                                              logprobs: 5 });
  const lp = r.choices[0].logprobs;
  assert.equal(lp.tokens.length, r.usage.completion_tokens);
  lp.tokens.forEach((token, i) => {
    const top = Object.entries(lp.top_logprobs[i]);  // insertion order: most likely first
    assert.deepEqual(top[0], [token, lp.token_logprobs[i]], `step ${i}`);
    for (let k = 1; k < top.length; ++k) assert.ok(top[k - 1][1] >= top[k][1], `step ${i} not sorted`);
  });
  assert.equal(lp.text_offset[0], 0);
  const chat = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }],
                                                     max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
  const content = chat.choices[0].logprobs.content;
  assert.equal(content.length, chat.usage.completion_tokens);
  for (const step of content) {
    assert.deepEqual(step.bytes, [...Buffer.from(step.token, 'utf8')]);
    assert.equal(step.top_logprobs.length, 2);
    assert.equal(step.top_logprobs[0].token, step.token);
    assert.equal(step.top_logprobs[0].logprob, step.logprob);
    assert.ok(step.top_logprobs[0].logprob >= step.top_logprobs[1].logprob);
  }
  await assert.rejects(client.chat.completions.create({ model, messages: [{ role: 'user', content: 'a' }],
                                                       top_logprobs: 2 }),
                       (e) => e instanceof OpenAI.BadRequestError && /logprobs/.test(e.message));
});

test('n choices: indexed, seeded per choice, summed usage; streamed with each finish and one usage chunk', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 10, temperature: 1.0,
                                              n: 3, seed: 7 });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  const second = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 10,
                                                   temperature: 1.0, seed: 8 });
  assert.equal(second.choices[0].text, r.choices[1].text);  // choice i uses seed + i
  assert.equal(r.usage.prompt_tokens, 5);
  const stream = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }],
                                                       max_tokens: 6, temperature: 0, n: 2, stream: true,
                                                       stream_options: { include_usage: true } });
  const text = ['', ''], finished = [0, 0], roles = [0, 0];
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta?.role) ++roles[c.index];
      if (c.delta?.content) text[c.index] += c.delta.content;
      if (c.finish_reason) ++finished[c.index];
    }
  }
  assert.deepEqual(finished, [1, 1]);
  assert.deepEqual(roles, [1, 1]);
  assert.equal(text[0], text[1]);
  assert.equal(usage.completion_tokens, 12);
  await assert.rejects(client.completions.create({ model, prompt: 'a', n: 17 }),
                       (e) => e instanceof OpenAI.BadRequestError && /'n'/.test(e.message));
});

test('a chat with an image: whole and streamed agree; a text-only model refuses the image', async () => {
  const url = `data:image/png;base64,${readFileSync(env('MMSERVE_IMAGE')).toString('base64')}`;
  const messages = [{ role: 'user', content: [{ type: 'image_url', image_url: { url } },
                                              { type: 'text', text: 'What is in the picture?' }] }];
  const vlm = env('MMSERVE_VLM');
  const whole = await client.chat.completions.create({ model: vlm, messages, max_tokens: 8, temperature: 0,
                                                       ignore_eos: true });
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(whole.usage.completion_tokens, 8);
  assert.ok(whole.usage.prompt_tokens > 25, `${whole.usage.prompt_tokens} prompt tokens: 25 are the image's`);
  const stream = await client.chat.completions.create({ model: vlm, messages, max_tokens: 8, temperature: 0,
                                                        ignore_eos: true, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  assert.equal(text, whole.choices[0].message.content);
  await assert.rejects(client.chat.completions.create({ model, messages, max_tokens: 4 }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.match(e.message, /takes no images/);
    return true;
  });
});
