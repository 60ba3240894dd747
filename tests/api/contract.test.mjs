// contract.test.mjs — the server's API against its schema (docs/api/*.schema.json, from
// which web/src/api/types.ts and dbtypes.ts are generated). Starts the real
// `attnscope serve` (ATTNSCOPE_BIN) on an ephemeral loopback port with seven models (two
// tiny SST-2 classifiers analysed into a real database by tests/ref/make_analysis_db.sh,
// the shipped MLM and SST-2 models, a random causal GPT-2 written by
// tests/browser/make_gpt2_model.mjs, and two tokenizer-less LLaMA-family fixtures, run
// from token ids: grouped-query Llama and Mistral with a sliding window, and two encoder-decoder
// fixtures, BART and T5, run from ids with target_ids) and the database with an imported run served by
// --import-dir, then calls every route of the schemas' x-routes and validates each JSON
// body, each binary tensor header and its meta, and the errors (400, 404, 405) against
// the schema: types, required fields, enums, and no unknown field at any depth. Also
// checks that `attnscope run --format json` writes its tokens in the server's format
// (the same objects for the same input), and that the committed TypeScript types are
// what the schemas generate. A second server without --db answers db: false and a 404.
// `attnscope export` of the same database is validated against export.schema.json, and
// each model's heads equal the server's GET /api/v1/db/runs/{id}/heads (one writer). An
// encoder-decoder analysis (analyze --source --target --gold of tests/cli/align_model.py's
// BART, its own database and server) answers the heads route with encdec_heads: a valid
// HeadsResponse whose three kinds hold the SQLite rows of table encdec_heads, the same
// object as its export's.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startServer, stopServer } from '../browser/harness.mjs';
import { SchemaSet, tensorHeader } from './schema.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const API = 'api.schema.json';
const DB = 'db.schema.json';
const EXPORT = 'export.schema.json';
const LLAMA_FIXTURES = join(ROOT, 'tests', 'ref', 'fixtures', 'models');
const schemas = new SchemaSet(join(ROOT, 'docs', 'api'), [API, DB, EXPORT]);

let tmp, server, base, bare, bareBase;
/** x-routes entries ("METHOD path") that a validated response covered */
const covered = new Set();

/** Validates v against file#/$defs/name; fails the test with every error. */
function conforms(file, name, v, what) {
  const errs = schemas.validate(file, name, v);
  assert.deepEqual(errs, [], `${what}: not a ${name}:\n  ${errs.slice(0, 20).join('\n  ')}`);
}

async function getJson(url, init) {
  const r = await fetch(url, init);
  const body = await r.text();
  assert.match(r.headers.get('content-type') ?? '', /^application\/json/, `${url}: content type`);
  return { status: r.status, json: JSON.parse(body) };
}

/** x-routes entries by "METHOD path" */
const routes = new Map([API, DB].flatMap((f) => schemas.files.get(f)['x-routes'].map((r) => [`${r.method} ${r.path}`, r])));

/** GET/POST a route expected to answer 200 with JSON of the given definition; a body
 *  sent must be the route's request definition. */
async function call(file, route, name, path, body) {
  assert.ok(routes.has(route), `${route} is not in x-routes`);
  assert.equal(routes.get(route).response, name, `${route} answers ${routes.get(route).response}`);
  if (body !== undefined) conforms(file, routes.get(route).request, body, `${route} request`);
  const init = body === undefined ? undefined : { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) };
  const { status, json } = await getJson(base + path, init);
  assert.equal(status, 200, `${path}: ${JSON.stringify(json)}`);
  conforms(file, name, json, path);
  covered.add(route);
  return json;
}

/** GET a binary tensor route; validates the header, its meta and the tensors' layout.
 *  names: the tensors expected, those of x-routes in order, the route's `optional` ones
 *  left out or not. */
async function binary(file, route, metaName, names, path, init) {
  assert.equal(routes.get(route)?.binary, metaName, `${route} in x-routes`);
  const optional = routes.get(route).optional ?? [];
  assert.deepEqual(routes.get(route).tensors.filter((n) => names.includes(n) || !optional.includes(n)), names, `${route}: x-routes tensors`);
  if (init?.body !== undefined) conforms(file, routes.get(route).request, JSON.parse(init.body), `${route} request`);
  const r = await fetch(base + path, init);
  assert.equal(r.status, 200, path);
  assert.equal(r.headers.get('content-type'), 'application/octet-stream', `${path}: content type`);
  const { header, dataBytes } = tensorHeader(await r.arrayBuffer());
  conforms(API, 'TensorHeader', header, `${path} header`);
  conforms(file, metaName, header.meta, `${path} meta`);
  assert.deepEqual(header.tensors.map((t) => t.name), names, `${path}: tensor names`);
  let end = 0;
  for (const t of header.tensors) {
    const n = t.shape.reduce((a, b) => a * b, 1);
    assert.equal(t.nbytes, n * { f32: 4, f16: 2, u8: 1 }[t.dtype], `${path} ${t.name}: nbytes`);
    assert.equal(t.offset % 8, 0, `${path} ${t.name}: offset alignment`);
    assert.equal(t.scale !== undefined && t.zero !== undefined, t.dtype === 'u8', `${path} ${t.name}: scale/zero only for u8`);
    end = Math.max(end, t.offset + t.nbytes);
  }
  assert.ok(end <= dataBytes, `${path}: data runs past the body`);
  covered.add(route);
  return header;
}

/** A request expected to fail with status; its body must be an ErrorResponse. */
async function error(status, path, init) {
  const { status: got, json } = await getJson(base + path, init);
  assert.equal(got, status, `${path}: ${JSON.stringify(json)}`);
  conforms(API, 'ErrorResponse', json, `${path} (${status})`);
  covered.add('* /api/v1/*');
  return json;
}

const post = (body) => ({ method: 'POST', headers: { 'Content-Type': 'application/json' }, body });

/** The meta and the tensor `name` (f32) of a binary route's reply from url: {meta, data}. */
async function f32Reply(url, name) {
  const buf = Buffer.from(await (await fetch(url)).arrayBuffer());
  const n = buf.readUInt32LE(4);
  const header = JSON.parse(buf.toString('utf8', 8, 8 + n));
  const t = header.tensors.find((x) => x.name === name);
  assert.equal(t.dtype, 'f32', `${url}: f32`);
  const at = 8 + n + t.offset;
  return { meta: header.meta, data: new Float32Array(buf.buffer.slice(buf.byteOffset + at, buf.byteOffset + at + t.nbytes)) };
}

/** The tensor `name` of a binary route's f32 reply on the main server, as a Float32Array. */
async function mapsData(path, name = 'maps') {
  return (await f32Reply(base + path, name)).data;
}

/** `attnscope attribute --format npz` of model on ids: {name: {shape, data}}, read by numpy. */
function cliAttribute(model, ids, method) {
  const out = join(tmp, `attribute-${method}.npz`);
  execFileSync(BIN, ['attribute', '--model', model, '--ids', ids, '--method', method, '--format', 'npz', '--out', out]);
  const py = 'import json, sys, numpy as np\nd = np.load(sys.argv[1])\nprint(json.dumps({k: {"shape": list(d[k].shape), "data": d[k].ravel().tolist()} for k in d.files if d[k].dtype.kind in "fi"}))';
  return JSON.parse(execFileSync('/usr/bin/python3', ['-c', py, out], { encoding: 'utf8' }));
}

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-contract-'));
  execFileSync('bash', [join(ROOT, 'tests', 'ref', 'make_analysis_db.sh'), BIN, tmp], { stdio: 'inherit' });
  const imp = join(tmp, 'synthetic');
  execFileSync(process.execPath, [join(ROOT, 'tests', 'browser', 'make_synthetic_import.mjs'), imp]);
  execFileSync(BIN, ['import', '--dir', imp, '--db', join(tmp, 'analysis.sqlite'), '--min-rel', '1', '--quiet']);
  execFileSync(process.execPath, [join(ROOT, 'tests', 'browser', 'make_gpt2_model.mjs'), join(tmp, 'gpt2-tiny')]);
  execFileSync(process.execPath, [join(ROOT, 'tests', 'browser', 'make_gpt2_model.mjs'), join(tmp, 'gpt2-deep'), '16']);
  const models = [join(tmp, 'bert-sst'), join(tmp, 'distil-sst'), join(ROOT, 'models', 'attnscope-mlm'),
    join(ROOT, 'models', 'attnscope-sst2'), join(tmp, 'gpt2-tiny'), join(LLAMA_FIXTURES, 'llama'),
    join(LLAMA_FIXTURES, 'mistral_swa'), join(LLAMA_FIXTURES, 'bart_tiny'), join(LLAMA_FIXTURES, 't5_tiny')]
    .flatMap((m) => ['--model', m]);
  ({ p: server, url: base } = await startServer(BIN, [...models, '--db', join(tmp, 'analysis.sqlite'), '--import-dir', imp]));
  const npz = join(ROOT, 'tests', 'ref', 'fixtures', 'npz_attention');
  ({ p: bare, url: bareBase } = await startServer(BIN, ['--model', join(ROOT, 'models', 'attnscope-mlm'), '--model', join(tmp, 'gpt2-deep'),
    '--attention', join(npz, 'run_like.npz'), '--attention', join(npz, 'bertviz_f16.npz')]));
});

after(async () => {
  for (const p of [server, bare]) {
    if (!p || p.exitCode !== null || p.signalCode !== null) continue;
    const done = new Promise((r) => p.on('exit', r));
    p.kill('SIGTERM');
    await done;
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('every object schema is closed, and the committed TypeScript types are what the schemas generate', () => {
  assert.deepEqual(schemas.openObjects(), [], 'object schemas without additionalProperties: false');
  execFileSync(process.execPath, [join(ROOT, 'web', 'scripts', 'gen-api-types.mjs'), '--check'], { stdio: 'inherit' });
});

test('GET /api/v1/models', async () => {
  const m = await call(API, 'GET /api/v1/models', 'ModelsResponse', '/api/v1/models');
  assert.equal(m.db, true);
  assert.deepEqual(m.models.map((x) => x.name), ['bert-sst', 'distil-sst', 'attnscope-mlm', 'attnscope-sst2', 'gpt2-tiny', 'llama', 'mistral_swa',
    'bart_tiny', 't5_tiny']);
  assert.deepEqual(m.models.find((x) => x.name === 'bart_tiny').stacks, { encoder: { layers: 2, heads: 3 }, decoder: { layers: 3, heads: 3 } });
  assert.equal(m.models.find((x) => x.name === 'llama').stacks, null);
  const llama = m.models.find((x) => x.name === 'llama');
  assert.equal(llama.arch, 'llama');
  assert.equal(llama.tokenizer, false);
  assert.deepEqual(llama.block.kv_group, [0, 0, 1, 1]);
  assert.equal(llama.block.rope.scaling, 'none');
  assert.deepEqual(m.models.find((x) => x.name === 'mistral_swa').block.window, [5, 5]);
  assert.equal(m.models.find((x) => x.name === 'bert-sst').block.rope, null);
  assert.ok(m.models.some((x) => x.labels.length > 0), 'a model with class names');
  assert.ok(m.models.some((x) => x.heads_present.includes('mlm')), 'an MLM model');
  const b = await (await fetch(`${bareBase}/api/v1/models`)).json();
  conforms(API, 'ModelsResponse', b, 'models without --db');
  assert.equal(b.db, false);
  const e = await (await fetch(`${bareBase}/api/v1/db/runs`)).json();
  conforms(API, 'ErrorResponse', e, 'db route without --db');
});

test('imported attention (--attention FILE.npz): RunResponse with source, attention, qk, 409s', async () => {
  const m = await (await fetch(`${bareBase}/api/v1/models`)).json();
  conforms(API, 'ModelsResponse', m, 'models with --attention');
  assert.deepEqual(m.imported.map((r) => [r.model, r.arch, r.source.layout, r.source.neuron]),
    [['run_like.npz', 'npz', 'attnscope', true], ['bertviz_f16.npz', 'npz', 'bertviz', false]]);
  for (const run of m.imported) {
    const again = await (await fetch(`${bareBase}/api/v1/runs/${run.id}`)).json();
    conforms(API, 'RunResponse', again, 'GET an imported run');
    assert.deepEqual(again, run);
    const r = await fetch(`${bareBase}/api/v1/runs/${run.id}/attention?pool=8&dtype=f16`);
    const { header } = tensorHeader(await r.arrayBuffer());
    conforms(API, 'AttentionMeta', header.meta, 'imported attention meta');
    const qk = await fetch(`${bareBase}/api/v1/runs/${run.id}/qk?layer=0&head=0`);
    if (run.source.neuron) conforms(API, 'QkMeta', tensorHeader(await qk.arrayBuffer()).header.meta, 'imported qk meta');
    else conforms(API, 'ErrorResponse', await qk.json(), 'qk of a file without queries');
    assert.equal(qk.status, run.source.neuron ? 200 : 409);
    const at = await fetch(`${bareBase}/api/v1/runs/${run.id}/attribution?method=rollout`);
    assert.equal(at.status, 409);
    conforms(API, 'ErrorResponse', await at.json(), 'attribution of an imported run');
    for (const sub of ['maps?method=rollout', 'lens']) {
      const r = await fetch(`${bareBase}/api/v1/runs/${run.id}/${sub}`);
      assert.equal(r.status, 409);
      const body = await r.json();
      conforms(API, 'ErrorResponse', body, `${sub} of an imported run`);
      assert.match(body.error, new RegExp(`: ${sub.split('?')[0]} needs a model`));
    }
  }
});

test('POST /api/v1/run, GET /api/v1/runs/{id}, attention and qk', async () => {
  const inputs = [
    { model: 'bert-sst', text: 'it is a good film .', text_b: 'the story was not funny .' },
    { model: 'distil-sst', text: 'a very funny movie .' },
    { model: 'attnscope-sst2', text: 'the movie was surprisingly good .', text_b: null },
    { model: 'gpt2-tiny', text: '  Héllo wörld, 日本 café', text_b: ' and more' },
    { model: 'llama', ids: [1, 5, 9, 17, 33, 2, 40] },
    { model: 'mistral_swa', ids: [3, 8, 13, 21, 34, 4, 7, 11, 50] },
  ];
  for (const q of inputs) {
    const run = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', q);
    assert.equal(run.tokens.length, run.sizes.tokens);
    run.tokens.forEach((t, i) => assert.equal(t.i, i));
    const again = await call(API, 'GET /api/v1/runs/{id}', 'RunResponse', `/api/v1/runs/${run.id}`);
    assert.equal(again.cached, true);
    assert.deepEqual(again.tokens, run.tokens);
    const { layers: L, heads: H } = run.sizes;
    for (const dtype of ['f32', 'f16', 'u8']) {
      const h = await binary(API, 'GET /api/v1/runs/{id}/attention', 'AttentionMeta', ['attention'],
        `/api/v1/runs/${run.id}/attention?layers=0-${L - 1}&heads=0-${H - 1}&dtype=${dtype}`);
      assert.equal(h.tensors[0].dtype, dtype);
      assert.equal(h.meta.pool, undefined);
    }
    const p = await binary(API, 'GET /api/v1/runs/{id}/attention', 'AttentionMeta', ['attention'], `/api/v1/runs/${run.id}/attention?pool=8`);
    assert.equal(p.meta.pool_op, 'max');
    const rotary = run.block.rope !== null;
    const names = ['q', 'k', 'scores', 'attention', ...(rotary ? ['q_pre_rope', 'k_pre_rope'] : [])];
    const qk = await binary(API, 'GET /api/v1/runs/{id}/qk', 'QkMeta', names, `/api/v1/runs/${run.id}/qk?layer=${L - 1}&head=${H - 1}`);
    assert.equal(qk.meta.d_head, run.sizes.d_head);
    assert.equal(qk.meta.rope, rotary);
    assert.equal(qk.meta.kv_group, run.block.kv_group[H - 1]);
    assert.equal(qk.meta.window, run.block.window[L - 1]);
    if (q.ids) {
      assert.deepEqual(run.ids, q.ids);
      assert.deepEqual(run.tokens.map((t) => t.id), q.ids);
      assert.equal(run.text, '');
      assert.equal(run.sizes.kv_heads, 2);
    } else assert.equal(run.ids, null);
  }
});

test('GET /api/v1/runs/{id}/attribution', async () => {
  const route = 'GET /api/v1/runs/{id}/attribution';
  const inputs = [
    { model: 'bert-sst', text: 'it is a good film .' },
    { model: 'gpt2-tiny', text: ' a short text' },
    { model: 'llama', ids: [1, 5, 9, 17, 33, 2, 40] },
  ];
  for (const q of inputs) {
    const run = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', q);
    const { layers: L, heads: H, tokens: T } = run.sizes;
    const shapes = { rollout: [T, T], flow: [T, T], grad: [T, T], norm: [L, H, T, T], importance: [L, H], norm2: [L, T, T], alti: [L, T, T] };
    for (const [method, shape] of Object.entries(shapes)) {
      const h = await binary(API, route, 'AttributionMeta', ['attribution'], `/api/v1/runs/${run.id}/attribution?method=${method}`);
      assert.deepEqual(h.tensors[0].shape, shape, `${q.model} ${method}: shape`);
      assert.equal(h.tensors[0].dtype, 'f32');
      assert.equal(h.meta.method, method);
      assert.equal(h.meta.tokens, T);
      const grad = method === 'grad' || method === 'importance';
      assert.equal(h.meta.target !== undefined && h.meta.position !== undefined && h.meta.logit !== undefined, grad, `${method}: target`);
    }
  }
  const lm = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', inputs[2]);
  const h = await binary(API, route, 'AttributionMeta', ['attribution'], `/api/v1/runs/${lm.id}/attribution?method=grad&target=4&position=3&dtype=f16`);
  assert.equal(h.meta.target, 4);
  assert.equal(h.meta.position, 3);
  assert.equal(h.tensors[0].dtype, 'f16');
  const cls = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', inputs[0]);
  const bad = [[cls, ''], [cls, '?method=attention'], [cls, '?method=rollout&target=1'], [cls, '?method=alti&target=1'], [cls, '?method=grad&position=1'],
    [cls, '?method=grad&target=99'], [cls, '?method=grad&target=-1'], [cls, '?method=flow&dtype=f64'],
    [lm, `?method=importance&position=${lm.sizes.tokens}`], [lm, '?method=grad&target=99999']];
  for (const [r, query] of bad) await error(400, `/api/v1/runs/${r.id}/attribution${query}`);
});

test('GET /api/v1/runs/{id}/intervene', async () => {
  const route = 'GET /api/v1/runs/{id}/intervene';
  const cls = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'bert-sst', text: 'it is a good film .' });
  const c = await call(API, route, 'InterveneResponse', `/api/v1/runs/${cls.id}/intervene?heads=0:0,1:1&mode=mean`);
  assert.equal(c.kind, 'classifier');
  assert.equal(c.run, cls.id);
  assert.ok(Math.abs(c.classes.reduce((a, x) => a + x.after, 0) - 1) < 1e-5);
  const lm = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'gpt2-tiny', text: ' a short text' });
  const T = lm.sizes.tokens;
  const g = await call(API, route, 'InterveneResponse', `/api/v1/runs/${lm.id}/intervene?knockout=${encodeURIComponent(`0:${T - 1}>0`)}&renorm=1&top=3&target=5`);
  assert.equal(g.kind, 'lm');
  assert.equal(g.position, T - 1);
  assert.equal(g.top_before.length, 3);
  assert.equal(g.target.id, 5);
  const bad = [[cls, ''], [cls, '?heads=1'], [cls, '?heads=0:0&mode=half'], [cls, '?heads=9:0'], [cls, '?knockout=0:1%3E99'],
    [cls, '?heads=0:0&position=1'], [cls, '?heads=0:0&renorm=2'], [lm, '?heads=0:0&top=0'], [lm, '?heads=0:0&target=999999']];
  for (const [r, query] of bad) await error(400, `/api/v1/runs/${r.id}/intervene${query}`);
});

test('GET /api/v1/runs/{id}/faithfulness', async () => {
  const route = 'GET /api/v1/runs/{id}/faithfulness';
  const cls = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'attnscope-sst2', text: 'it is a good film .' });
  const f = await call(API, route, 'FaithfulnessResponse', `/api/v1/runs/${cls.id}/faithfulness?steps=4`);
  assert.equal(f.run, cls.id);
  assert.equal(f.tokens, cls.sizes.tokens - 2);
  assert.deepEqual(f.methods.map((m) => m.method), ['grad', 'gxi', 'ig', 'rollout', 'flow', 'norm', 'norm2', 'alti', 'grad-attn', 'random']);
  for (const m of f.methods) {
    assert.equal(m.deletion.length, f.tokens + 1);
    assert.ok(Math.abs(m.deletion[0] - f.probs[f.predicted]) < 1e-9);
  }
  const g = await call(API, route, 'FaithfulnessResponse', `/api/v1/runs/${cls.id}/faithfulness?methods=grad,random&removal=mask&seed=3`);
  assert.deepEqual(g.methods.map((m) => m.method), ['grad', 'random']);
  assert.equal(g.removal, 'mask');
  const lm = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'gpt2-tiny', text: ' a short text' });
  const bad = [[cls, '?methods=attention'], [cls, '?removal=zero'], [cls, '?steps=0'], [cls, '?seed=-1'], [lm, '']];
  for (const [r, query] of bad) await error(400, `/api/v1/runs/${r.id}/faithfulness${query}`);
});

test('GET /api/v1/runs/{id}/maps', async () => {
  const route = 'GET /api/v1/runs/{id}/maps';
  const lm = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'gpt2-tiny', text: ' a short text' });
  const { layers: L, heads: H, tokens: T } = lm.sizes;
  const shapes = { norm: [L, H, T, T], norm2: [L, 1, T, T], alti: [L, 1, T, T], rollout: [L, 1, T, T], flow: [L, 1, T, T], grad: [L, 1, T, T] };
  const per = { norm: 'head', norm2: 'layer', alti: 'layer', rollout: 'layer', flow: 'layer', grad: 'layer' };
  for (const [method, shape] of Object.entries(shapes)) {
    const h = await binary(API, route, 'MapsMeta', ['maps'], `/api/v1/runs/${lm.id}/maps?method=${method}`);
    assert.deepEqual(h.tensors[0].shape, shape, `${method}: shape`);
    assert.equal(h.meta.per, per[method]);
    assert.equal(h.meta.logit !== undefined, method === 'grad');
    assert.equal(h.meta.cached, false, `${method}: computed by this request`);
  }
  /* flow and grad per layer: layer l is the CLI's flow_layers[l] / grad-attn_layers[l] of the same
     ids (attnscope attribute --format npz), the last layer the attribution route's whole-model map */
  const ids = lm.tokens.map((t) => t.id).join(',');
  for (const [method, cli] of [['flow', 'flow'], ['grad', 'grad-attn']]) {
    const got = await mapsData(`/api/v1/runs/${lm.id}/maps?method=${method}`);
    const ref = cliAttribute(join(tmp, 'gpt2-tiny'), ids, cli);
    assert.deepEqual(ref[`${cli}_layers`].shape, [L, T, T]);
    let d = 0;
    for (let i = 0; i < L * T * T; i++) d = Math.max(d, Math.abs(got[i] - ref[`${cli}_layers`].data[i]) / Math.max(1, Math.abs(ref[`${cli}_layers`].data[i])));
    assert.ok(d <= 1e-6, `${method}: every layer as the CLI's ${cli}_layers within ${d}`);
    console.log(`  maps?method=${method}: [${L}, 1, ${T}, ${T}], largest relative difference from the CLI's ${cli}_layers ${d}`);
    const whole = await mapsData(`/api/v1/runs/${lm.id}/attribution?method=${method}`, 'attribution');
    assert.deepEqual(got.subarray((L - 1) * T * T), whole, `${method}: the last layer is the whole model's map`);
    let moved = 0;
    for (let i = 0; i < T * T; i++) moved = Math.max(moved, Math.abs(got[i] - whole[i]));
    assert.ok(moved > 1e-3, `${method}: layer 0's map is not the whole model's (${moved})`);
  }
  for (const method of ['flow', 'grad']) assert.equal((await binary(API, route, 'MapsMeta', ['maps'], `/api/v1/runs/${lm.id}/maps?method=${method}&layers=1`)).meta.cached, true);
  /* kept with the run: the 4 most recently used results (alti, rollout, flow, grad here) */
  assert.equal((await binary(API, route, 'MapsMeta', ['maps'], `/api/v1/runs/${lm.id}/maps?method=alti&layers=1`)).meta.cached, true);
  const one = await binary(API, route, 'MapsMeta', ['maps'], `/api/v1/runs/${lm.id}/maps?method=norm&layers=1&heads=0-1&pool=8&dtype=f16`);
  assert.deepEqual(one.tensors[0].shape, [1, 2, Math.min(8, T), Math.min(8, T)]);
  assert.deepEqual(one.meta.layers, [1, 1]);
  assert.equal(one.meta.cached, false, 'norm was dropped as the least recently used');
  const g = await binary(API, route, 'MapsMeta', ['maps'], `/api/v1/runs/${lm.id}/maps?method=grad&target=5&position=1`);
  assert.equal(g.meta.target, 5);
  assert.equal(g.meta.position, 1);
  assert.equal(g.meta.cached, false, 'another target, another result');
  assert.equal((await binary(API, route, 'MapsMeta', ['maps'], `/api/v1/runs/${lm.id}/maps?method=grad`)).meta.cached, true);
  assert.equal((await binary(API, route, 'MapsMeta', ['maps'], `/api/v1/runs/${lm.id}/maps?method=rollout`)).meta.cached, false);
  /* flow over ATTR_FLOW_MAX_T (128) tokens: a 400 naming the limit */
  const long = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'llama', ids: Array.from({ length: 140 }, (_, i) => 3 + (i % 50)) });
  assert.ok(long.sizes.tokens > 128);
  assert.match((await error(400, `/api/v1/runs/${long.id}/maps?method=flow`)).error, /128/);
  /* every layer's flow of 16 layers: T^2 L (L + 1) / 2 bounded by a 12-layer model's at 128
     tokens (SRV_MAPS_FLOW_MAX_WORK), so at most floor(sqrt(128^2 * 78 / 136)) = 96 tokens */
  const deep = await (await fetch(`${bareBase}/api/v1/run`, post(JSON.stringify({ model: 'gpt2-deep', ids: Array.from({ length: 100 }, (_, i) => 3 + i) })))).json();
  assert.equal(deep.sizes?.tokens, 100, JSON.stringify(deep).slice(0, 200));
  const refused = await fetch(`${bareBase}/api/v1/runs/${deep.id}/maps?method=flow`);
  assert.equal(refused.status, 400);
  assert.match((await refused.json()).error, /layers 0-15 of this 16-layer model takes at most 96 tokens here, the input has 100/);
  /* one layer's flow costs T^2 (l + 1) max-flows: the last layer alone is the whole model's flow,
     computed on its own and kept; another layer is computed when asked for */
  const deepMaps = `${bareBase}/api/v1/runs/${deep.id}/maps?method=flow&layers=`;
  const lastFlow = await f32Reply(deepMaps + '15', 'maps');
  const deepWhole = await f32Reply(`${bareBase}/api/v1/runs/${deep.id}/attribution?method=flow`, 'attribution');
  assert.deepEqual(lastFlow.data, deepWhole.data, 'layer 15 alone is the attribution route\'s whole-model flow');
  assert.equal(lastFlow.meta.cached, false);
  assert.equal((await f32Reply(deepMaps + '15', 'maps')).meta.cached, true, 'a layer already computed is kept');
  const other = await f32Reply(deepMaps + '3', 'maps');
  assert.equal(other.meta.cached, false, 'a layer not yet computed is computed');
  assert.equal((await fetch(`${bareBase}/api/v1/runs/${deep.id}/maps?method=rollout&layers=15`)).status, 200, 'the other methods are not bounded');
  const bad = [[lm, ''], [lm, '?method=attention'], [lm, '?method=importance'], [lm, '?method=rollout&target=1'], [lm, `?method=norm&layers=${L}`],
    [lm, '?method=norm&pool=2'], [lm, '?method=alti&dtype=f64'], [lm, `?method=grad&position=${T}`]];
  for (const [r, query] of bad) await error(400, `/api/v1/runs/${r.id}/maps${query}`);
});

test('GET /api/v1/runs/{id}/lens', async () => {
  const route = 'GET /api/v1/runs/{id}/lens';
  const lm = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'gpt2-tiny', text: ' a short text' });
  const r = await call(API, route, 'LensResponse', `/api/v1/runs/${lm.id}/lens?position=1&top=3`);
  assert.equal(r.run, lm.id);
  assert.equal(r.position, 1);
  assert.equal(r.layers.length, lm.sizes.layers + 1);
  for (const l of r.layers) assert.equal(l.top.length, 3);
  const last = await call(API, route, 'LensResponse', `/api/v1/runs/${lm.id}/lens`);
  assert.equal(last.position, lm.sizes.tokens - 1);
  const cls = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'attnscope-sst2', text: 'a good film .' });
  for (const [x, query] of [[lm, '?top=0'], [lm, '?top=51'], [lm, `?position=${lm.sizes.tokens}`], [cls, '']])
    await error(400, `/api/v1/runs/${x.id}/lens${query}`);
});

test('encoder-decoder runs: target_ids, decoder, attention and qk of each kind, errors', async () => {
  const src = [0, 17, 45, 9, 88, 23, 2], tgt = [2, 0, 31, 64, 7];
  for (const model of ['bart_tiny', 't5_tiny']) {
    const run = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model, ids: src, target_ids: tgt });
    assert.equal(run.encoder_decoder, true);
    assert.deepEqual(run.decoder.input_ids, tgt);
    assert.equal(run.decoder.tokens.length, tgt.length);
    assert.equal(run.decoder.block.causal, true);
    assert.equal(run.decoder.cross_block.causal, false);
    assert.equal(run.tokens.length, src.length);
    const again = await call(API, 'GET /api/v1/runs/{id}', 'RunResponse', `/api/v1/runs/${run.id}`);
    assert.deepEqual(again.decoder, run.decoder);
    const shapes = { encoder: [2, 3, 7, 7], decoder: [3, 3, 5, 5], cross: [3, 3, 5, 7] };
    for (const [kind, shape] of Object.entries(shapes)) {
      const a = await binary(API, 'GET /api/v1/runs/{id}/attention', 'AttentionMeta', ['attention'],
        `/api/v1/runs/${run.id}/attention?kind=${kind}&dtype=f32`);
      assert.deepEqual(a.tensors[0].shape, shape, `${model} ${kind}`);
      assert.equal(a.meta.kind, kind);
      assert.equal(a.meta.keys, shape[3]);
      const p = await binary(API, 'GET /api/v1/runs/{id}/attention', 'AttentionMeta', ['attention'],
        `/api/v1/runs/${run.id}/attention?kind=${kind}&pool=8`);
      assert.deepEqual(p.tensors[0].shape, shape);
      const qk = await binary(API, 'GET /api/v1/runs/{id}/qk', 'QkMeta', ['q', 'k', 'scores', 'attention'],
        `/api/v1/runs/${run.id}/qk?kind=${kind}&layer=1&head=2`);
      assert.deepEqual(qk.tensors.map((t) => t.shape[0]), [shape[2], shape[3], shape[2], shape[2]]);
      assert.equal(qk.meta.kind, kind);
    }
    for (const q of ['attention?kind=crosss', 'attention?kind=decoder&layers=3', 'attention?kind=encoder&layers=2', 'stats?kind=cross'])
      await error(400, `/api/v1/runs/${run.id}/${q}`);
    for (const q of ['stats?kind=cross', 'tile?kind=decoder&layer=0&head=0']) // the refusal names the kinds served
      assert.match((await error(400, `/api/v1/runs/${run.id}/${q}`)).error, /serves kind=encoder only .*kind=decoder and kind=cross are served by the attention and qk routes/);
    await error(409, `/api/v1/runs/${run.id}/attribution?method=raw`);
  }
  const bad = [{ model: 'bart_tiny', ids: src }, { model: 'bart_tiny', ids: src, target_ids: [] },
    { model: 'bart_tiny', ids: src, target_ids: [2, 101] }, { model: 'bart_tiny', ids: src, target: 'ab' },
    { model: 'bart_tiny', ids: src, target_ids: tgt, target: 'x' }, { model: 'bart_tiny', ids: src, target_ids: tgt, capture: 'stats,qkv' },
    { model: 'llama', ids: [1, 5, 9], target_ids: tgt }];
  for (const b of bad) await error(400, '/api/v1/run', post(JSON.stringify(b)));
  const one = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'llama', ids: [1, 5, 9] });
  assert.equal(one.encoder_decoder, false);
  assert.equal(one.decoder, null);
  await error(400, `/api/v1/runs/${one.id}/attention?kind=cross`);
  await error(400, `/api/v1/runs/${one.id}/qk?kind=decoder&layer=0&head=0`);
});

test('generate: a causal LM\'s tokens and per-step attention rows', async () => {
  const route = 'POST /api/v1/generate';
  const body = { model: 'gpt2-tiny', text: ' a short text', max_new: 5, top_k: 4, temperature: 1.5, seed: 3 };
  const h = await binary(API, route, 'GenerateMeta', ['attention'], '/api/v1/generate', post(JSON.stringify(body)));
  const m = h.meta;
  assert.equal(m.steps, 5);
  assert.equal(m.ids.length, m.prompt_length + 5);
  assert.deepEqual(m.ids.slice(m.prompt_length), m.generated_ids);
  assert.equal(m.tokens.length, m.ids.length);
  assert.deepEqual(h.tensors[0].shape, [5, m.layers, m.heads, m.ids.length]);
  assert.equal(h.tensors[0].dtype, 'f32');
  const f16 = await binary(API, route, 'GenerateMeta', ['attention'], '/api/v1/generate', post(JSON.stringify({ ...body, dtype: 'f16' })));
  assert.deepEqual(f16.meta.generated_ids, m.generated_ids, 'the same seed gives the same tokens');
  assert.equal(f16.tensors[0].dtype, 'f16');
  for (const [bad, what] of [[{ model: 'gpt2-tiny' }, /exactly one of/], [{ model: 'gpt2-tiny', text: 'a', max_new: 129 }, /max_new/],
    [{ model: 'gpt2-tiny', text: 'a', top_k: 2, temperature: 0 }, /temperature above 0/], [{ model: 'bert-sst', text: 'a' }, /causal LM/],
    [{ model: 'gpt2-tiny', text: 'a', seed: -1 }, /seed/], [{ model: 'gpt2-tiny', text: 'a', extra: 1 }, /unknown field 'extra'/]])
    assert.match((await error(400, '/api/v1/generate', post(JSON.stringify(bad)))).error, what);
  await error(405, '/api/v1/generate');
});

test('generate: encoder-decoder models and beam search', async () => {
  const route = 'POST /api/v1/generate';
  const src = [0, 17, 45, 9, 88, 23, 2];
  const cases = [
    [{ model: 'bart_tiny', ids: src, max_new: 4 }, ['attention', 'cross_attention']],
    [{ model: 'bart_tiny', ids: src, max_new: 5, beams: 3, num_return: 2, length_penalty: 0.5 }, ['attention', 'cross_attention', 'beam_attention', 'beam_cross_attention']],
    [{ model: 'llama', ids: [1, 5, 9], max_new: 4, beams: 2, num_return: 2, early_stopping: true }, ['attention', 'beam_attention']],
    [{ model: 'llama', ids: [1, 5, 9], max_new: 4, beams: 2 }, ['attention']],
    [{ model: 'llama', ids: [1, 5, 9], max_new: 3, top: 4 }, ['attention']],
  ];
  for (const [body, names] of cases) {
    const h = await binary(API, route, 'GenerateMeta', names, '/api/v1/generate', post(JSON.stringify(body)));
    const m = h.meta;
    assert.equal(m.encoder_decoder, body.model === 'bart_tiny');
    assert.equal(m.beams, body.beams ?? 1);
    assert.equal(m.hypotheses?.length, body.beams ? body.num_return ?? 1 : undefined);
    assert.deepEqual(h.tensors[0].shape, [m.steps, m.layers, m.heads, m.ids.length]);
    if (m.encoder_decoder) {
      assert.deepEqual(m.source_ids, src);
      assert.deepEqual(h.tensors[1].shape, [m.steps, m.layers, m.heads, src.length]);
    }
    if (!body.beams) {
      assert.equal(m.probs.length, m.steps);
      assert.equal(m.candidates?.length, body.top ? m.steps : undefined);
      if (body.top) // greedy: the chosen id is the first candidate, with its probability
        m.candidates.forEach((c, s) => assert.deepEqual([c.length, c[0].id, c[0].prob], [body.top, m.generated_ids[s], m.probs[s]]));
    } else assert.equal(m.probs, undefined);
    if (m.hypotheses?.length > 1) {
      const Tmax = Math.max(...m.hypotheses.map((x) => x.ids.length));
      const beam = h.tensors.find((x) => x.name === 'beam_attention');
      assert.deepEqual(beam.shape, [m.hypotheses.length, Tmax - m.prompt_length, m.layers, m.heads, Tmax]);
      assert.ok(m.hypotheses[0].score >= m.hypotheses[1].score, 'best first');
    }
  }
  for (const [bad, what] of [[{ model: 'llama', ids: [1, 5], beams: 2, top_k: 3 }, /beam search does not sample/],
    [{ model: 'llama', ids: [1, 5], num_return: 2 }, /beam search only/], [{ model: 'llama', ids: [1, 5], target_ids: [2] }, /not encoder-decoder/],
    [{ model: 'llama', ids: [1, 5], beams: 2, top: 3 }, /'top': applies to greedy and sampled/], [{ model: 'llama', ids: [1, 5], top: 21 }, /'top'/]])
    assert.match((await error(400, '/api/v1/generate', post(JSON.stringify(bad)))).error, what);
});

test('long runs: capture, tile and stats', async () => {
  const ids = [3, 8, 13, 21, 34, 4, 7, 11, 50, 1, 2];
  const runs = {};
  for (const capture of ['dense', 'stats,qkv']) {
    const run = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'mistral_swa', ids, capture });
    assert.equal(run.capture, capture);
    runs[capture] = run;
    for (const [query, shape] of [['layer=1&head=3', [11, 11]], ['layer=0&head=0&rows=2-9&cols=0-10&n=4&exclude=0&dtype=f16', [4, 4]]]) {
      const h = await binary(API, 'GET /api/v1/runs/{id}/tile', 'TileMeta', ['max', 'mean'], `/api/v1/runs/${run.id}/tile?${query}`);
      assert.deepEqual(h.tensors[0].shape, shape);
      assert.equal(h.meta.source, capture === 'dense' ? 'dense' : 'recomputed');
    }
    const st = await binary(API, 'GET /api/v1/runs/{id}/stats', 'StatsMeta', ['head_stats'], `/api/v1/runs/${run.id}/stats`);
    assert.deepEqual(st.tensors[0].shape, [2, 4, 8]);
    const th = await binary(API, 'GET /api/v1/runs/{id}/thumbs', 'ThumbsMeta', ['max', 'mean', 'head_stats'], `/api/v1/runs/${run.id}/thumbs`);
    assert.deepEqual(th.tensors.map((t) => t.shape), [[2, 4, 11, 11], [2, 4, 11, 11], [2, 4, 8]]);
    const one = await binary(API, 'GET /api/v1/runs/{id}/thumbs', 'ThumbsMeta', ['mean', 'head_stats'], `/api/v1/runs/${run.id}/thumbs?layers=1&heads=2-3&op=mean&dtype=f16`);
    assert.deepEqual(one.tensors.map((t) => t.name), ['mean', 'head_stats']);
  }
  assert.equal((await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'llama', ids: [1, 2, 3] })).capture, 'dense');
  const long = runs['stats,qkv'];
  await error(400, `/api/v1/runs/${long.id}/attention`);
  await error(400, `/api/v1/runs/${long.id}/qk?layer=0&head=0`);
  for (const q of ['', '?layer=0', '?layer=0&head=9', '?layer=0&head=0&rows=3-1', '?layer=0&head=0&n=0', '?layer=0&head=0&exclude=99', '?layer=0&head=0&dtype=x'])
    await error(400, `/api/v1/runs/${long.id}/tile${q}`);
  await error(400, `/api/v1/runs/${long.id}/stats?dtype=x`);
  for (const q of ['?op=x', '?layers=5', '?heads=1-0', '?dtype=x']) await error(400, `/api/v1/runs/${long.id}/thumbs${q}`);
  await error(400, '/api/v1/run', post('{"model": "llama", "ids": [1, 2], "capture": "full"}'));
});

test('POST /api/v1/mlm', async () => {
  const r = await call(API, 'POST /api/v1/mlm', 'MlmResponse', '/api/v1/mlm', { model: 'attnscope-mlm', text: 'the [MASK] was good .', k: 3 });
  assert.equal(r.predictions.length, 1);
  assert.equal(r.predictions[0].top.length, 3);
  assert.equal(r.tokens[r.predictions[0].position].piece, '[MASK]');
});

test('errors are ErrorResponse bodies', async () => {
  await error(404, '/api/v1/nope');
  await error(405, '/api/v1/run');
  await error(400, '/api/v1/run', post('{"model": '));
  await error(400, '/api/v1/run', post('{"model": "bert-sst"}'));
  await error(400, '/api/v1/run', post('{"model": "llama", "text": "no tokenizer"}'));
  await error(400, '/api/v1/run', post('{"model": "llama", "ids": [1, 99999]}'));
  await error(400, '/api/v1/run', post('{"model": "llama", "ids": []}'));
  await error(400, '/api/v1/run', post('{"model": "llama", "ids": [1, -2]}'));
  await error(400, '/api/v1/run', post('{"model": "llama", "ids": [1, 2], "text": "both"}'));
  await error(400, '/api/v1/mlm', post('{"model": "bert-sst", "text": "no mask here"}'));
  await error(404, '/api/v1/runs/0123456789abcdef');
  const run = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: 'bert-sst', text: 'it is good .' });
  await error(400, `/api/v1/runs/${run.id}/attention?layers=5-1`);
  await error(400, `/api/v1/runs/${run.id}/attention?pool=7`);
  await error(400, `/api/v1/runs/${run.id}/qk?layer=0`);
  await error(404, '/api/v1/db/runs/99');
  await error(400, '/api/v1/db/runs/1/sentences?limit=0');
  await error(404, '/api/v1/db/runs/1/sentences/9999');
  await error(405, '/api/v1/db/runs', post('{}'));
});

test('the /api/v1/db routes', async () => {
  const runs = await call(DB, 'GET /api/v1/db/runs', 'DbRunsResponse', '/api/v1/db/runs');
  assert.equal(runs.runs.length, 3, 'two analysed runs and one import');
  assert.deepEqual(runs.runs.map((r) => r.attention), ['model', 'model', 'import']);
  for (const r of runs.runs) {
    const one = await call(DB, 'GET /api/v1/db/runs/{run}', 'DbRun', `/api/v1/db/runs/${r.id}`);
    assert.deepEqual(one, r);
    const heads = await call(DB, 'GET /api/v1/db/runs/{run}/heads', 'HeadsResponse', `/api/v1/db/runs/${r.id}/heads`);
    for (const [k, col] of Object.entries(heads.columns)) assert.equal(col.length, r.layers * r.heads, `heads column ${k}`);
    assert.equal(heads.encdec_heads, undefined, 'no encdec_heads but for an encoder-decoder analysis');
    await binary(DB, 'GET /api/v1/db/runs/{run}/pairs', 'PairsMeta', ['jsd'], `/api/v1/db/runs/${r.id}/pairs`);
    await call(DB, 'GET /api/v1/db/runs/{run}/relations', 'RelationsResponse', `/api/v1/db/runs/${r.id}/relations?top=3`);
    const conf = r.attention === 'model' ? '&confidence=1' : '';
    const page = await call(DB, 'GET /api/v1/db/runs/{run}/sentences', 'SentencesResponse', `/api/v1/db/runs/${r.id}/sentences?limit=50${conf}`);
    assert.ok(page.sentences.length > 0);
    await call(DB, 'GET /api/v1/db/runs/{run}/sentences', 'SentencesResponse', `/api/v1/db/runs/${r.id}/sentences?q=film&correct=1`);
    // a sentence of each corpus (and the truncated one), with its parents and attention
    const picks = new Map();
    for (const s of page.sentences) {
      const key = s.truncated ? 'truncated' : s.corpus;
      if (!picks.has(key)) picks.set(key, s);
    }
    for (const s of picks.values()) {
      const d = await call(DB, 'GET /api/v1/db/runs/{run}/sentences/{idx}', 'SentenceDetail', `/api/v1/db/runs/${r.id}/sentences/${s.idx}`);
      assert.equal(d.tokens.length, d.n_tokens);
      const par = await call(DB, 'GET /api/v1/db/runs/{run}/sentences/{idx}/parents', 'ParentsResponse',
        `/api/v1/db/runs/${r.id}/sentences/${s.idx}/parents?layer=0&head=1`);
      assert.equal(par.source, r.attention);
      const h = await binary(DB, 'GET /api/v1/db/runs/{run}/sentences/{idx}/attention', 'SentenceAttentionMeta', ['attention'],
        `/api/v1/db/runs/${r.id}/sentences/${s.idx}/attention?dtype=f16`);
      assert.equal(h.meta.tokens, d.n_tokens);
      if (r.attention === 'import') { // an imported sentence as a run of the explorer (api.schema.json's RunResponse)
        const run = await call(API, 'GET /api/v1/db/runs/{run}/sentences/{idx}/run', 'RunResponse',
          `/api/v1/db/runs/${r.id}/sentences/${s.idx}/run`);
        assert.deepEqual([run.source.layout, run.source.db_run, run.source.sent, run.sizes.tokens], ['import', r.id, s.idx, d.n_tokens]);
      }
      if (r.params.topk) { // the distil-sst run is analysed with --topk 4
        const t = await call(DB, 'GET /api/v1/db/runs/{run}/sentences/{idx}/topk', 'TopkRow',
          `/api/v1/db/runs/${r.id}/sentences/${s.idx}/topk?layer=0&head=1&query=1`);
        assert.equal(t.k, r.params.topk);
        assert.equal(t.tokens, d.n_tokens);
        assert.equal(t.index.length, t.k);
        assert.ok(Math.abs(t.weight.reduce((a, b) => a + b, 0) + t.rest - 1) < 1e-5, 'kept + rest = 1');
        const all = await binary(DB, 'GET /api/v1/db/runs/{run}/sentences/{idx}/topk-all', 'TopkAllMeta', ['index', 'weight', 'rest'],
          `/api/v1/db/runs/${r.id}/sentences/${s.idx}/topk-all`);
        assert.equal(all.meta.k, t.k);
        assert.deepEqual(all.tensors.map((x) => x.shape), [[all.meta.layers, all.meta.heads, d.n_tokens, t.k],
          [all.meta.layers, all.meta.heads, d.n_tokens, t.k], [all.meta.layers, all.meta.heads, d.n_tokens]]);
        assert.equal(all.meta.kept.length, all.meta.layers);
      }
    }
  }
});

test('attnscope run --format json writes tokens in the server format', async () => {
  const cases = [
    { model: join(tmp, 'gpt2-tiny'), name: 'gpt2-tiny', text: '  Héllo wörld, 日本 café', text_b: ' and more' },
    { model: join(tmp, 'bert-sst'), name: 'bert-sst', text: 'it is a good film .', text_b: 'the story was not funny .' },
    { model: join(tmp, 'distil-sst'), name: 'distil-sst', text: 'a very funny movie .', text_b: 'no love .' },
  ];
  for (const c of cases) {
    const out = JSON.parse(execFileSync(BIN, ['run', '--model', c.model, '--text', c.text, '--text-b', c.text_b,
      '--capture', 'attn', '--layer', '0', '--head', '0', '--format', 'json', '--threads', '1', '--quiet'],
    { maxBuffer: 1 << 26 }).toString());
    out.tokens.forEach((t, i) => conforms(API, 'Token', t, `run --format json tokens[${i}]`));
    const run = await call(API, 'POST /api/v1/run', 'RunResponse', '/api/v1/run', { model: c.name, text: c.text, text_b: c.text_b });
    assert.deepEqual(out.tokens, run.tokens, `${c.name}: CLI and server tokens`);
    for (const t of out.tokens) assert.equal(Buffer.from(t.bytes, 'hex').toString('utf8'), t.text, 'text is bytes decoded, U+FFFD for partial characters');
  }
});

test('attnscope export: an Export document whose heads are the server\'s GET .../heads', async () => {
  const out = join(tmp, 'heads.json');
  execFileSync(BIN, ['export', '--db', join(tmp, 'analysis.sqlite'), '--out', out]);
  const doc = JSON.parse(readFileSync(out, 'utf8'));
  conforms(EXPORT, 'Export', doc, 'export');
  assert.equal(doc.models.length, 3, 'two analysed runs and one import');
  for (const m of doc.models) {
    const api = (await getJson(`${base}/api/v1/db/runs/${m.run}/heads`)).json;
    const { columns: ec, ...eh } = m.heads;
    const { columns: ac, ...ah } = api;
    assert.deepEqual(eh, ah, `run ${m.run}: heads`);
    assert.deepEqual(Object.keys(ec), Object.keys(ac), `run ${m.run}: fields`);
    assert.ok(m.heads.n_scored > 0 && m.heads.n_scored === m.n_layer * m.n_head, `run ${m.run}: every head scored`);
    for (const [k, col] of Object.entries(ac)) {
      col.forEach((v, i) => {
        const e = ec[k][i]; // the file rounds reals to 9 significant digits
        if (typeof v === 'number' && !Number.isInteger(v)) assert.ok(Math.abs(e - v) <= 1e-8 * Math.max(1, Math.abs(v)), `run ${m.run} ${k}[${i}]: ${e} vs ${v}`);
        else assert.equal(e, v, `run ${m.run} ${k}[${i}]`);
      });
    }
    for (const [rel, r] of Object.entries(m.relations))
      for (const d of ['dependent_to_parent', 'parent_to_dependent'])
        if (r[d]) assert.equal(r[d].accuracy.length, m.n_layer * m.n_head, `run ${m.run} ${rel} ${d}: accuracy per head`);
  }
});

test('every route of the schemas was called and validated', () => {
  for (const key of routes.keys()) assert.ok(covered.has(key), `route not covered: ${key}`);
});

test('an encoder-decoder analysis: GET .../heads has encdec_heads, the SQLite rows, as export writes them', async () => {
  const dir = join(tmp, 'encdec');
  mkdirSync(dir);
  const model = join(dir, 'bartbytes'), db = join(dir, 'ed.sqlite');
  execFileSync('/usr/bin/python3', [join(ROOT, 'tests', 'cli', 'align_model.py'), model]);
  writeFileSync(join(dir, 's.en'), 'she does not like coffee .\nthe house is small .\n');
  writeFileSync(join(dir, 's.de'), 'sie mag keinen Kaffee .\ndas Haus ist klein .\n');
  writeFileSync(join(dir, 's.align'), '0-0 1?1 2-2 3-1 4-3 5-4\n0-0 1-1 2-2 3-3 4-4\n');
  execFileSync(BIN, ['analyze', '--model', model, '--source', join(dir, 's.en'), '--target', join(dir, 's.de'),
    '--gold', join(dir, 's.align'), '--db', db, '--quiet']);
  const rows = JSON.parse(execFileSync('sqlite3', ['-json', db, 'SELECT * FROM encdec_heads ORDER BY kind, layer, head']).toString());
  execFileSync(BIN, ['export', '--db', db, '--out', join(dir, 'e.json')]);
  const doc = JSON.parse(readFileSync(join(dir, 'e.json'), 'utf8'));
  const { p, url } = await startServer(BIN, ['--model', model, '--db', db]);
  try {
    const runs = (await getJson(`${url}/api/v1/db/runs`)).json;
    conforms(DB, 'DbRunsResponse', runs, 'encoder-decoder runs');
    assert.equal(runs.runs.length, 1);
    const { status, json } = await getJson(`${url}/api/v1/db/runs/${runs.runs[0].id}/heads`);
    assert.equal(status, 200, JSON.stringify(json));
    conforms(DB, 'HeadsResponse', json, 'encoder-decoder heads');
    const ed = json.encdec_heads;
    assert.deepEqual(Object.keys(ed), ['encoder', 'decoder', 'cross']);
    assert.deepEqual([ed.encoder.layers, ed.decoder.layers, ed.cross.layers, ed.cross.heads], [2, 3, 3, 3]);
    assert.equal(rows.length, 2 * 3 + 3 * 3 + 3 * 3, 'every head of the three kinds stored');
    for (const row of rows) {
      const part = ed[row.kind], i = row.layer * part.heads + row.head;
      for (const [c, col] of Object.entries(part.columns)) assert.equal(col[i], row[c] ?? null, `${row.kind} L${row.layer}H${row.head} ${c}`);
    }
    assert.ok(ed.cross.columns.aer.every((v) => typeof v === 'number'), 'cross heads have an AER with gold');
    assert.ok(ed.encoder.columns.aer.every((v) => v === null), 'encoder heads have none');
    const ex = doc.models[0].encdec_heads;
    for (const k of ['encoder', 'decoder', 'cross']) {
      assert.deepEqual(Object.keys(ex[k].columns), Object.keys(ed[k].columns), `${k}: the export's fields`);
      for (const [c, col] of Object.entries(ed[k].columns)) col.forEach((v, i) => {
        const e = ex[k].columns[c][i]; // the file rounds reals to 9 significant digits
        if (typeof v === 'number') assert.ok(Math.abs(e - v) <= 1e-8 * Math.max(1, Math.abs(v)), `${k} ${c}[${i}]: ${e} vs ${v}`);
        else assert.equal(e, v);
      });
    }
  } finally {
    assert.equal(await stopServer(p), 0, 'server exits 0 on SIGTERM');
  }
});
