// The official `openai` npm client (pinned in package.json) against a real `mmserve serve` serving the tiny
// Whisper fixture (random weights: the text is gibberish, never hard-coded): audio.transcriptions.create with the
// real tests/fixtures/audio/jfk.wav in every response_format, audio.translations.create, stream: true as the
// SDK's transcript.text.delta / transcript.text.done events, and the SDK's error classes for a non-audio file,
// word timestamps, an unknown model, a CLIP model and audio above the model's audio_seconds_max (413).
// Every format must describe the same transcript (verbose_json's segments); when the build has
// `mmserve transcribe` (the CLI over the same executor), verbose_json must equal its output.
//
// Run by tests/e2e/client_test.sh openai-audio (ctest e2e_client_openai-audio), which sets MMSERVE_URL,
// MMSERVE_API_KEY, MMSERVE_WHISPER (model name), MMSERVE_WHISPER_SHORT (audio_seconds_max 5), MMSERVE_MODEL (a
// CLIP model), MMSERVE_WHISPER_DIR, MMSERVE_AUDIO (jfk.wav) and MMSERVE_BINARY.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import OpenAI, { toFile } from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run through tests/e2e/client_test.sh openai-audio)`);
  return v;
};
const client = new OpenAI({ baseURL: `${env('MMSERVE_URL')}/v1`, apiKey: env('MMSERVE_API_KEY'), maxRetries: 0,
                            timeout: 300_000 });
const model = env('MMSERVE_WHISPER');
const wav = readFileSync(env('MMSERVE_AUDIO'));
const audio = () => toFile(wav, 'jfk.wav', { type: 'audio/wav' });

// The reference: verbose_json, whose segments every other format is checked against.
let reference;
async function verbose() {
  reference ??= await client.audio.transcriptions.create({ file: await audio(), model,
                                                           response_format: 'verbose_json' });
  return reference;
}

test('verbose_json has OpenAI\'s shape and equals `mmserve transcribe`', async () => {
  const r = await verbose();
  assert.equal(r.task, 'transcribe');
  assert.equal(typeof r.language, 'string');
  assert.ok(Math.abs(r.duration - 11.0) < 1e-6, `duration ${r.duration}`);
  assert.ok(Array.isArray(r.segments) && r.segments.length > 0, 'no segments');
  for (const s of r.segments) {
    for (const key of ['id', 'seek', 'start', 'end', 'text', 'tokens', 'temperature', 'avg_logprob',
                       'compression_ratio', 'no_speech_prob']) {
      assert.ok(key in s, `segment lacks ${key}`);
    }
    assert.ok(0 <= s.start && s.start <= s.end, `segment times ${s.start}..${s.end}`);
  }
  assert.equal(r.text, r.segments.map((s) => s.text).join(''));
  // Asynchronously: a blocked event loop would keep the SDK from retiring its idle keep-alive connection
  // before the server closes it (5 s), and the next request would meet a closed socket.
  const { stdout } = await promisify(execFile)(env('MMSERVE_BINARY'), ['transcribe', '--model', env('MMSERVE_WHISPER_DIR'),
                                                                     env('MMSERVE_AUDIO'), '--format', 'verbose_json']);
  const cli = JSON.parse(stdout);
  assert.deepEqual(JSON.parse(JSON.stringify(r)), cli);
});

test('json, text, srt and vtt describe the same transcript', async () => {
  const ref = await verbose();
  const json = await client.audio.transcriptions.create({ file: await audio(), model });
  assert.equal(json.text, ref.text);
  const text = await client.audio.transcriptions.create({ file: await audio(), model, response_format: 'text' });
  assert.equal(typeof text, 'string');
  assert.equal(text.trim(), ref.text.trim());
  const srt = await client.audio.transcriptions.create({ file: await audio(), model, response_format: 'srt' });
  assert.equal((srt.match(/ --> /g) || []).length, ref.segments.length, srt);
  assert.match(srt, /^1\r?\n\d\d:\d\d:\d\d,\d\d\d --> \d\d:\d\d:\d\d,\d\d\d/);
  const vtt = await client.audio.transcriptions.create({ file: await audio(), model, response_format: 'vtt' });
  assert.match(vtt, /^WEBVTT/);
  assert.equal((vtt.match(/ --> /g) || []).length, ref.segments.length, vtt);
  for (const s of ref.segments) {
    assert.ok(srt.includes(s.text.trim()), `srt lacks segment ${s.id}`);
    assert.ok(vtt.includes(s.text.trim()), `vtt lacks segment ${s.id}`);
  }
  // segment granularity is what Whisper gives: accepted.
  const seg = await client.audio.transcriptions.create({ file: await audio(), model, response_format: 'verbose_json',
                                                         timestamp_granularities: ['segment'] });
  assert.deepEqual(seg.segments.map((s) => s.tokens), ref.segments.map((s) => s.tokens));
});

test('stream: one delta per segment, then done', async () => {
  const ref = await verbose();
  const stream = await client.audio.transcriptions.create({ file: await audio(), model, stream: true });
  const events = [];
  for await (const event of stream) events.push(event);
  const deltas = events.filter((e) => e.type === 'transcript.text.delta');
  assert.equal(deltas.length, ref.segments.length);
  assert.deepEqual(deltas.map((e) => e.delta), ref.segments.map((s) => s.text));
  const done = events.at(-1);
  assert.equal(done.type, 'transcript.text.done');
  assert.equal(done.text, ref.text);
  assert.equal(events.length, deltas.length + 1);
});

test('translations.create runs the translate task', async () => {
  const r = await client.audio.translations.create({ file: await audio(), model, response_format: 'verbose_json' });
  assert.equal(r.task, 'translate');
  assert.equal(r.text, r.segments.map((s) => s.text).join(''));
  const json = await client.audio.translations.create({ file: await audio(), model });
  assert.equal(json.text, r.text);
});

test('errors come out as the SDK\'s error classes', async () => {
  const notAudio = await toFile(Buffer.from('just some text, not audio'), 'notes.wav', { type: 'audio/wav' });
  await assert.rejects(client.audio.transcriptions.create({ file: notAudio, model }), OpenAI.BadRequestError);
  await assert.rejects(client.audio.transcriptions.create({ file: await audio(), model,
                                                            timestamp_granularities: ['word'] }),
                       (e) => e instanceof OpenAI.BadRequestError && /word/.test(e.message));
  await assert.rejects(client.audio.transcriptions.create({ file: await audio(), model: 'no-such-model' }),
                       OpenAI.NotFoundError);
  await assert.rejects(client.audio.transcriptions.create({ file: await audio(), model: env('MMSERVE_MODEL') }),
                       (e) => e instanceof OpenAI.BadRequestError && /CLIP/.test(e.message));
  await assert.rejects(client.audio.transcriptions.create({ file: await audio(), model: env('MMSERVE_WHISPER_SHORT') }),
                       (e) => e instanceof OpenAI.APIError && e.status === 413);
  await assert.rejects(client.audio.transcriptions.create({ file: await audio(), model,
                                                            response_format: 'mp3' }), OpenAI.BadRequestError);
});
