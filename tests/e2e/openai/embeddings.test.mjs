// The official `openai` npm client (pinned in package.json) against a real `mmserve serve`: what a user of
// the OpenAI SDK meets. Embeddings of a string, an array of texts, data-URL images and a mixed array must
// equal the HF goldens of tests/fixtures/clip-tiny-quickgelu-f32 (golden.safetensors, in golden.json's order)
// within 1e-4; both encodings (float, and base64 which the SDK also uses by default) must decode to them; the
// SDK's error classes must come out for 404 (unknown model), 401 (wrong key) and 400 (broken image).
//
// Run by tests/e2e/client_test.sh openai (ctest e2e_client_openai), which starts the server with
// --api-key and sets MMSERVE_URL, MMSERVE_API_KEY, MMSERVE_MODEL, MMSERVE_FIXTURE_DIR, MMSERVE_IMAGE_DIR.
// Needs `npm ci --prefix tests/e2e/openai` once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import OpenAI from 'openai';

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run through tests/e2e/client_test.sh openai)`);
  return v;
};
const baseURL = `${env('MMSERVE_URL')}/v1`;
const apiKey = env('MMSERVE_API_KEY');
const model = env('MMSERVE_MODEL');
const fixtureDir = env('MMSERVE_FIXTURE_DIR');
const imageDir = env('MMSERVE_IMAGE_DIR');
const TOLERANCE = 1e-4;

// safetensors: 8-byte little-endian header length, JSON header, then raw little-endian tensor data.
// Returns the named F32 [rows, cols] tensors as arrays of rows.
function readSafetensors(path, names) {
  const bytes = readFileSync(path);
  const headerLength = Number(bytes.readBigUInt64LE(0));
  const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8'));
  const tensors = {};
  for (const name of names) {
    const info = header[name];
    assert.ok(info, `${path} has no tensor ${name}`);
    assert.equal(info.dtype, 'F32', `${name} is ${info.dtype}`);
    const [begin, end] = info.data_offsets;
    const data = bytes.subarray(8 + headerLength + begin, 8 + headerLength + end);
    const values = new Float32Array(data.length / 4);
    for (let i = 0; i < values.length; i++) values[i] = data.readFloatLE(i * 4);
    const [rows, cols] = info.shape;
    tensors[name] = Array.from({ length: rows }, (_, r) => Array.from(values.subarray(r * cols, (r + 1) * cols)));
  }
  return tensors;
}

const golden = JSON.parse(readFileSync(join(fixtureDir, 'golden.json'), 'utf8'));
const goldenTensors = readSafetensors(join(fixtureDir, 'golden.safetensors'), ['text_embeds', 'image_embeds']);
const textEmbeds = goldenTensors.text_embeds;
const imageEmbeds = goldenTensors.image_embeds;
const MEDIA_TYPES = { png: 'image/png', jpg: 'image/jpeg', jpeg: 'image/jpeg', webp: 'image/webp' };
const imageUrls = golden.images.map((name) => {
  const type = MEDIA_TYPES[name.split('.').pop().toLowerCase()];
  return `data:${type};base64,${readFileSync(join(imageDir, name)).toString('base64')}`;
});

const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

function assertClose(actual, expected, what) {
  assert.equal(actual.length, expected.length, `${what}: length`);
  let worst = 0;
  for (let i = 0; i < expected.length; i++) worst = Math.max(worst, Math.abs(actual[i] - expected[i]));
  assert.ok(worst <= TOLERANCE, `${what}: max |diff| ${worst} > ${TOLERANCE}`);
}

function decodeBase64Floats(text) {
  const bytes = Buffer.from(text, 'base64');
  assert.equal(bytes.length % 4, 0, 'base64 embedding is not a whole number of float32');
  return Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(i * 4));
}

test('golden fixture is the expected [8, 10] pair', () => {
  assert.equal(textEmbeds.length, golden.texts.length);
  assert.equal(imageEmbeds.length, golden.images.length);
  assert.equal(textEmbeds[0].length, 10);
});

test('models.list names the served model', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.ok(ids.includes(model), `models: ${ids}`);
});

test('a string (SDK default encoding, base64 on the wire) equals the golden', async () => {
  const res = await client.embeddings.create({ model, input: golden.texts[0] });
  assert.equal(res.object, 'list');
  assert.equal(res.model, model);
  assert.equal(res.data.length, 1);
  assert.equal(res.data[0].index, 0);
  assert.equal(res.data[0].object, 'embedding');
  assertClose(res.data[0].embedding, textEmbeds[0], 'text 0');
  assert.ok(res.usage.prompt_tokens > 0 && res.usage.total_tokens >= res.usage.prompt_tokens, 'usage');
});

test('an array of every golden text, encoding_format float', async () => {
  const res = await client.embeddings.create({ model, input: golden.texts, encoding_format: 'float' });
  assert.equal(res.data.length, golden.texts.length);
  res.data.forEach((d, i) => {
    assert.equal(d.index, i);
    assert.ok(Array.isArray(d.embedding), 'float encoding gives arrays');
    assertClose(d.embedding, textEmbeds[i], `text ${i} (${JSON.stringify(golden.texts[i]).slice(0, 30)})`);
  });
});

test('data-URL images equal the golden image embeddings', async () => {
  const res = await client.embeddings.create({ model, input: imageUrls, encoding_format: 'float' });
  assert.equal(res.data.length, imageUrls.length);
  res.data.forEach((d, i) => assertClose(d.embedding, imageEmbeds[i], `image ${i} (${golden.images[i]})`));
});

test('encoding_format base64 returns little-endian float32 equal to the golden', async () => {
  const input = [golden.texts[2], imageUrls[1], golden.texts[3], imageUrls[0]];
  const res = await client.embeddings.create({ model, input, encoding_format: 'base64' });
  assert.equal(res.data.length, 4);
  for (const d of res.data) assert.equal(typeof d.embedding, 'string', 'base64 encoding gives strings');
  const expected = [textEmbeds[2], imageEmbeds[1], textEmbeds[3], imageEmbeds[0]];
  res.data.forEach((d, i) => {
    assert.equal(d.index, i);
    assertClose(decodeBase64Floats(d.embedding), expected[i], `mixed item ${i}`);
  });
});

test('an unknown model is the SDK NotFoundError with status 404', async () => {
  await assert.rejects(client.embeddings.create({ model: 'no-such-model', input: 'x' }), (err) => {
    assert.ok(err instanceof OpenAI.NotFoundError, `got ${err?.constructor?.name}: ${err?.message}`);
    assert.ok(err instanceof OpenAI.APIError);
    assert.equal(err.status, 404);
    assert.ok(err.message.length > 0);
    return true;
  });
});

test('a wrong API key is the SDK AuthenticationError with status 401', async () => {
  const wrong = new OpenAI({ baseURL, apiKey: 'not-the-key', maxRetries: 0 });
  await assert.rejects(wrong.embeddings.create({ model, input: 'x' }), (err) => {
    assert.ok(err instanceof OpenAI.AuthenticationError, `got ${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, 401);
    return true;
  });
});

test('an undecodable image is the SDK BadRequestError with status 400', async () => {
  const broken = `data:image/png;base64,${Buffer.from('not a png at all').toString('base64')}`;
  await assert.rejects(client.embeddings.create({ model, input: [broken] }), (err) => {
    assert.ok(err instanceof OpenAI.BadRequestError, `got ${err?.constructor?.name}: ${err?.message}`);
    assert.equal(err.status, 400);
    return true;
  });
});
