// attribution.test.mjs — the explorer's attribution view (ctest browser_attribution) on the
// bert (classifier) and gpt2 (LM) fixtures of tests/ref/fixtures/models (no tokenizer: ids
// in the URL). Checks, against the server's own GET .../attribution tensors and the
// PyTorch references of tests/ref/gen_attrib.py (tests/ref/fixtures/attrib/*.safetensors,
// read here without torch):
//   - ?view=attribution&attr=rollout draws the (T, T) rollout in the heat map, the values
//     the view holds equal the server's and the reference (1e-5), with the method's source;
//     its SVG export holds the heat map's title;
//   - the method selector switches to gradient-weighted attention: the logit explained
//     (target, position) is shown, the matrix is divided by its largest value and says so;
//   - norm-based attention shows the selected layer and head's slice;
//   - head importance is a layers × heads table of the server's values;
//   - ALTI and norm2 (gen_mixing.py's references) show the layer selected;
//   - the Interventions panel: heads clicked in the importance table are ablated, the
//     before / after log-probabilities equal gen_intervene.py's;
//   - the method is kept in the URL (attr=...).
// Screenshots go to tests/browser/artifacts/attribution-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const FIX = join(ROOT, 'tests', 'ref', 'fixtures', 'models');
const REF = join(ROOT, 'tests', 'ref', 'fixtures', 'attrib');

let server, base, browser, page, tmp;

/** The tensors of a safetensors file (F32 / I32) as {shape, data}. */
function safetensors(path) {
  const buf = readFileSync(path);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const out = {};
  for (const [name, t] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const b = buf.subarray(8 + n + t.data_offsets[0], 8 + n + t.data_offsets[1]);
    const ab = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
    out[name] = { shape: t.shape, data: t.dtype === 'I32' ? new Int32Array(ab) : new Float32Array(ab) };
  }
  return out;
}

const ids = (model) => Array.from(safetensors(join(FIX, model, 'expected.safetensors'))['single.input_ids'].data);

/** GET .../attribution as {meta, shape, data}. */
async function served(runId, method) {
  const r = await fetch(`${base}/api/v1/runs/${runId}/attribution?method=${method}&dtype=f32`);
  assert.equal(r.status, 200);
  const buf = Buffer.from(await r.arrayBuffer());
  const n = buf.readUInt32LE(4);
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const t = header.tensors[0];
  const b = buf.subarray(8 + n + t.offset, 8 + n + t.offset + t.nbytes);
  return { meta: header.meta, shape: t.shape, data: new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)) };
}

async function runOf(model) {
  const r = await fetch(`${base}/api/v1/run`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model, ids: ids(model) }) });
  assert.equal(r.status, 200);
  return (await r.json()).id;
}

const hook = (name) => page.evaluate((n) => window.__attnscope?.[n] ?? null, name);
async function until(name, ok) {
  for (let i = 0; i < 600; i++) {
    const v = await hook(name);
    if (v && ok(v)) return v;
    await page.waitForTimeout(50);
  }
  throw new Error(`window.__attnscope.${name} never satisfied the test`);
}

function maxDiff(a, b) {
  assert.equal(a.length, b.length);
  let d = 0;
  for (let i = 0; i < a.length; i++) d = Math.max(d, Math.abs(a[i] - b[i]));
  return d;
}

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-attribution-'));
  const s = await startServer(BIN, ['--model', join(FIX, 'bert'), '--model', join(FIX, 'gpt2')]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile')));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('rollout and flow of the classifier in the heat map, as served and as PyTorch computes them', async () => {
  const ref = safetensors(join(REF, 'bert.safetensors'));
  await page.goto(`${base}/?model=bert&ids=${ids('bert').join(',')}&view=attribution&attr=rollout`);
  await page.waitForSelector('[data-testid="matrix-canvas"]');
  const a = await until('attribution', (v) => v.method === 'rollout');
  assert.deepEqual(a.shape, [10, 10]);
  assert.equal(a.scale, 1, 'rollout rows sum to 1: drawn as they are');
  const run = await runOf('bert');
  const s = await served(run, 'rollout');
  assert.equal(maxDiff(a.shown, s.data), 0, 'the view draws the served values');
  assert.ok(maxDiff(a.shown, ref.rollout.data) < 1e-5, 'rollout against PyTorch');
  assert.match(await page.textContent('[data-testid="attr-about"]'), /Abnar & Zuidema 2020/);
  await page.screenshot({ path: join(ART, 'attribution-rollout.png'), fullPage: true });
  const [d] = await Promise.all([page.waitForEvent('download'), page.click('[data-testid=export-svg]')]);
  assert.equal(d.suggestedFilename(), 'attnscope-rollout.svg');
  const svg = readFileSync(await d.path(), 'utf8');
  assert.match(svg, /<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  assert.match(svg, /attention rollout: rows = output tokens, columns = input tokens/);

  await page.selectOption('[data-testid="attr-method"]', 'flow');
  const f = await until('attribution', (v) => v.method === 'flow');
  assert.ok(maxDiff(f.shown, ref.flow.data) < 1e-5, 'flow against networkx');
  await page.waitForFunction(() => /[?&]attr=flow/.test(location.search));
});

test('gradient-weighted attention says which logit it explains and how its colours are scaled', async () => {
  const ref = safetensors(join(REF, 'gpt2.safetensors'));
  await page.goto(`${base}/?model=gpt2&ids=${ids('gpt2').join(',')}&view=attribution&attr=grad`);
  const g = await until('attribution', (v) => v.method === 'grad');
  assert.equal(g.meta.target, ref.target.data[0]);
  assert.equal(g.meta.position, 8);
  const text = await page.textContent('[data-testid="attr-explains"]');
  assert.match(text, new RegExp(`token ${ref.target.data[0]}, predicted at token 8`));
  const largest = ref.grad.data.reduce((m, v) => Math.max(m, v), 0);
  assert.ok(largest > 1);
  assert.ok(Math.abs(g.scale - 1 / largest) < 1e-5 / largest);
  assert.ok(maxDiff(g.shown, Array.from(ref.grad.data, (v) => v / largest)) < 1e-5, 'grad against PyTorch, scaled');
  await page.waitForSelector('[data-testid="attr-scaled"]');
  await page.screenshot({ path: join(ART, 'attribution-grad.png'), fullPage: true });
});

test('norm-based attention of the selected head, and head importance as a table', async () => {
  await page.goto(`${base}/?model=gpt2&ids=${ids('gpt2').join(',')}&view=attribution&attr=norm&layer=2&head=1`);
  await until('attribution', (v) => v.method === 'norm');
  const s = await served(await runOf('gpt2'), 'norm');
  assert.deepEqual(s.shape, [3, 4, 9, 9]);
  const TT = 81, at = (2 * 4 + 1) * TT;
  const v = await hook('attribution');
  const slice = Array.from(s.data.subarray(at, at + TT), (x) => x * v.scale);
  assert.ok(maxDiff(v.shown, slice) < 1e-6, 'the view shows layer 2 head 1');
  await page.selectOption('[data-testid="attr-head"]', '3');
  const v3 = await until('attribution', () => true);
  await page.waitForFunction(() => /[?&]head=3/.test(location.search));
  const at3 = (2 * 4 + 3) * TT;
  const shown3 = await page.evaluate(() => window.__attnscope.attribution.shown);
  assert.ok(maxDiff(shown3, Array.from(s.data.subarray(at3, at3 + TT), (x) => x * v3.scale)) < 1e-6, 'head 3 after selecting it');

  await page.selectOption('[data-testid="attr-method"]', 'importance');
  await until('attribution', (x) => x.method === 'importance');
  const imp = await served(await runOf('gpt2'), 'importance');
  const cells = await page.$$eval('[data-testid="attr-importance"] td', (tds) => tds.map((td) => [+td.dataset.l, +td.dataset.h, +td.textContent]));
  assert.equal(cells.length, 12);
  for (const [l, h, x] of cells) assert.ok(Math.abs(x - imp.data[l * 4 + h]) <= 5e-4, `importance ${l}/${h}`);
  await page.screenshot({ path: join(ART, 'attribution-importance.png'), fullPage: true });
});

test('ALTI and norm2 show the selected layer, against gen_mixing.py', async () => {
  await page.goto(`${base}/?model=gpt2&ids=${ids('gpt2').join(',')}&view=attribution&attr=alti&layer=1`);
  await until('attribution', (v) => v.method === 'alti');
  const ref = safetensors(join(REF, 'gpt2_mix.safetensors'));
  const s = await served(await runOf('gpt2'), 'alti');
  assert.deepEqual(s.shape, [3, 9, 9]);
  const TT = 81;
  const v = await hook('attribution');
  assert.equal(v.scale, 1, 'ALTI rows sum to 1: no rescaling');
  assert.ok(maxDiff(v.shown, Array.from(ref.alti.data.subarray(TT, 2 * TT))) < 1e-5, 'ALTI up to layer 1 against PyTorch');
  assert.ok(maxDiff(v.shown, Array.from(s.data.subarray(TT, 2 * TT))) < 1e-7, 'ALTI layer 1 as served');
  await page.selectOption('[data-testid="attr-layer"]', '2');
  await page.waitForFunction(() => /[?&]layer=2/.test(location.search));
  const shown2 = await page.evaluate(() => window.__attnscope.attribution.shown);
  assert.ok(maxDiff(shown2, Array.from(ref.alti.data.subarray(2 * TT, 3 * TT))) < 1e-5, 'the whole model after selecting layer 2');
  await page.screenshot({ path: join(ART, 'attribution-alti.png'), fullPage: true });

  await page.selectOption('[data-testid="attr-method"]', 'norm2');
  const n = await until('attribution', (x) => x.method === 'norm2');
  const slice = ref.norm2.data.subarray(2 * TT, 3 * TT);
  const largest = ref.norm2.data.reduce((a, x) => Math.max(a, x), 0);
  assert.ok(largest > 1 && Math.abs(n.scale - 1 / largest) < 1e-5 / largest, 'norm2 divided by its largest value');
  assert.ok(maxDiff(n.shown, Array.from(slice, (x) => x / largest)) < 1e-5, 'norm2 of layer 2 against PyTorch, scaled');
});

test('the Interventions panel: heads picked in the importance table, the output before and after as PyTorch computes it', async () => {
  await page.goto(`${base}/?model=gpt2&ids=${ids('gpt2').join(',')}&view=attribution&attr=importance`);
  await until('attribution', (v) => v.method === 'importance');
  await page.click('[data-testid="attr-importance"] td[data-l="0"][data-h="1"] button');
  await page.click('[data-testid="attr-importance"] td[data-l="1"][data-h="2"] button');
  assert.equal(await page.inputValue('[data-testid="iv-heads"]'), '0:1,1:2');
  await page.click('[data-testid="iv-apply"]');
  const r = await until('intervention', (v) => v.kind === 'lm');
  const ref = safetensors(join(REF, 'intervene.safetensors'));
  const before = ref['gpt2.zero.base'].data, after = ref['gpt2.zero.after'].data;
  const order = (x) => Array.from(x.keys()).sort((a, b) => x[b] - x[a]);
  assert.deepEqual(r.top_after.map((x) => x.id), order(after).slice(0, 5), 'top 5 after the ablation');
  for (const x of [...r.top_before, ...r.top_after, r.target]) {
    assert.ok(Math.abs(x.before - before[x.id]) < 1e-5 && Math.abs(x.after - after[x.id]) < 1e-5, `token ${x.id}`);
  }
  const cells = await page.$$eval('[data-testid="iv-result"] tbody tr', (trs) => trs.length);
  assert.equal(cells, 11, 'top 5 before, top 5 after, the prediction');
  await page.screenshot({ path: join(ART, 'attribution-intervene.png'), fullPage: true });
});
