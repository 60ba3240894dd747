// llama.test.mjs — the explorer on LLaMA-family models (ctest browser_llama): the
// fixtures tests/ref/fixtures/models/{llama,mistral_swa} (grouped-query, RoPE, Mistral's
// sliding window of 5; no tokenizer, so they run from token ids, given in the URL and in
// the run form) and a random 32-layer × 32-head model with 8 key/value heads written by
// make_llama_model.mjs. Checks, against the server's own tensors (and `attnscope run
// --format json` of the same ids):
//   - the head view boxes the head toggles by kv group as GET /models says, and
//     selecting a head outlines the heads sharing its keys and values;
//   - the model view and its opened heat map draw masked cells grey (hatched in the heat
//     map) exactly where the server's scores are masked: a key outside the window;
//   - the neuron view's RoPE toggle switches the q drawn between q (after) and q_pre_rope
//     (before), and the decomposition table's s_pre, s and Δ equal q_pre·k_pre·scale,
//     q·k·scale and their difference computed here from the served tensors;
//   - the model view of the 32 × 32 model is one canvas, drawn from one pooled request.
// Screenshots go to tests/browser/artifacts/llama-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
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
const IDS = [1, 5, 9, 17, 33, 2, 40, 7, 11];

let server, base, browser, page, tmp;

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-llama-'));
  execFileSync(process.execPath, [join(HERE, 'make_llama_model.mjs'), join(tmp, 'llama-32x32')]);
  const s = await startServer(BIN, ['--model', join(FIX, 'llama'), '--model', join(FIX, 'mistral_swa'), '--model', join(tmp, 'llama-32x32')]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile')));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// ---- helpers ----------------------------------------------------------------

/** The tensors of a binary response ("ASTB", u32 header length, JSON header, data). */
function decode(buf) {
  const n = buf.readUInt32LE(4);
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const out = { meta: header.meta };
  for (const t of header.tensors) {
    assert.equal(t.dtype, 'f32');
    const b = buf.subarray(8 + n + t.offset, 8 + n + t.offset + t.nbytes);
    out[t.name] = { shape: t.shape, data: new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength)) };
  }
  return out;
}

async function api(path, body) {
  const init = body ? { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) } : undefined;
  /* a kept-alive connection idle past the server's --request-timeout (10 s) is closed by
     the server; the request is then sent again on a new one */
  const r = await fetch(base + path, init).catch(() => fetch(base + path, init));
  assert.equal(r.status, 200, path);
  return r.headers.get('content-type').startsWith('application/json') ? r.json() : decode(Buffer.from(await r.arrayBuffer()));
}

/** The rgb of one canvas pixel (CSS px; deviceScaleFactor is 1). */
function pixel(testid, x, y) {
  return page.evaluate(({ testid, x, y }) => {
    const c = document.querySelector(`[data-testid="${testid}"]`);
    return Array.from(c.getContext('2d').getImageData(Math.floor(x), Math.floor(y), 1, 1).data.slice(0, 3));
  }, { testid, x, y });
}

const isGrey = ([r, g, b]) => Math.abs(r - 200) <= 3 && Math.abs(g - 200) <= 3 && Math.abs(b - 200) <= 3;
const hook = (name) => page.evaluate((n) => window.__attnscope?.[n] ?? null, name);
async function waitHook(name, pred) {
  for (let i = 0; i < 200; i++) {
    const v = await hook(name);
    if (v && pred(v)) return v;
    await page.waitForTimeout(50);
  }
  throw new Error(`window.__attnscope.${name} never satisfied the test`);
}
const dot = (a, i, b, j, Dh) => {
  let s = 0;
  for (let x = 0; x < Dh; x++) s += a[i * Dh + x] * b[j * Dh + x];
  return s;
};

// ---- tests ------------------------------------------------------------------

test('head view: ids from the URL, head toggles boxed by kv group, the selected head\'s group outlined', async () => {
  const models = (await api('/api/v1/models')).models;
  const kv = models.find((m) => m.name === 'llama').block.kv_group;
  assert.deepEqual(kv, [0, 0, 1, 1]);
  await page.goto(`${base}/?model=llama&ids=${IDS.join(',')}&view=head`);
  await page.waitForSelector('[data-testid="kv-group-1"]');
  await page.waitForFunction(() => /9 tokens/.test(document.querySelector('[data-testid="status"]')?.textContent ?? ''));
  const groups = await page.$$eval('[data-testid^="kv-group-"]', (els) => els.map((e) => [e.dataset.testid, e.dataset.heads, e.textContent.trim().slice(0, 3)]));
  assert.deepEqual(groups, [['kv-group-0', '0,1', 'kv0'], ['kv-group-1', '2,3', 'kv1']]);
  for (let h = 0; h < 4; h++) assert.equal(await page.getAttribute(`[data-testid="head-${h}"]`, 'data-kv'), String(kv[h]));
  assert.equal(await page.inputValue('[data-testid="text"]'), IDS.join(','));
  await page.dblclick('[data-testid="head-3"]');
  await page.waitForFunction(() => /[?&]head=3/.test(location.search));
  assert.ok(await page.$eval('[data-testid="kv-group-1"]', (e) => e.classList.contains('sel')));
  assert.ok(!(await page.$eval('[data-testid="kv-group-0"]', (e) => e.classList.contains('sel'))));
  const mates = await page.$$eval('button.head.mate', (els) => els.map((e) => e.dataset.testid));
  assert.deepEqual(mates, ['head-2', 'head-3']);
  assert.match(await page.textContent('[data-testid="kv-note"]'), /Head 3 shares its keys and values with H2 \(outlined\)/);
  await page.screenshot({ path: join(ART, 'llama-head.png') });
});

test('run form: token ids typed for a model without a tokenizer', async () => {
  await page.goto(`${base}/?model=llama&view=head`);
  await page.waitForSelector('[data-testid="input-hint"]');
  await page.selectOption('[data-testid="model"]', 'mistral_swa');
  assert.match(await page.textContent('form.input'), /Token ids/);
  assert.equal(await page.$('[data-testid="text-b"]'), null, 'no sentence B for ids');
  await page.fill('[data-testid="text"]', '3, 8 13,21');
  await page.click('[data-testid="run"]');
  await page.waitForFunction(() => /4 tokens/.test(document.querySelector('[data-testid="status"]')?.textContent ?? ''));
  assert.match(await page.evaluate(() => location.search), /text=3%2C8%2C13%2C21/);
  /* the window note appears only once T exceeds the window (5) */
  assert.equal(await page.$('[data-testid="window-note"]'), null);
});

test('model view: cells outside the sliding window are drawn masked where the server\'s scores are', async () => {
  const ids = [3, 8, 13, 21, 34, 4, 7, 11, 50];
  const run = await api('/api/v1/run', { model: 'mistral_swa', ids });
  assert.deepEqual(run.block.window, [5, 5]);
  const T = ids.length;
  await page.goto(`${base}/?model=mistral_swa&ids=${ids.join(',')}&view=model&mode=matrix&layer=1&head=0`);
  await page.waitForSelector('[data-testid="grid-mask-note"]');
  assert.match(await page.textContent('[data-testid="grid-mask-note"]'), /Sliding window of 5 on layers 0–1/);
  const mv = await waitHook('modelView', (v) => v.pool === T);
  assert.deepEqual(mv.kvGroup, [0, 0, 1, 1]);
  const qk = await api(`/api/v1/runs/${run.id}/qk?layer=1&head=0`);
  const masked = (i, j) => qk.scores.data[i * T + j] < -1e30;
  assert.ok(masked(8, 0) && masked(8, 3) && !masked(8, 4), 'the window: query 8 sees keys 4..8');
  /* the thumbnail L1 H0: one block per token here (T <= 64) */
  const g = mv.grid;
  await page.waitForTimeout(200);
  let nMasked = 0;
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      const px = await pixel('grid-canvas', g.left + ((j + 0.5) * g.cell) / T, g.top + g.cell + g.gap + ((i + 0.5) * g.cell) / T);
      assert.equal(isGrey(px), masked(i, j), `thumbnail cell (${i}, ${j}): ${px}, masked ${masked(i, j)}`);
      nMasked += masked(i, j);
    }
  assert.ok(nMasked > T * (T - 1) / 2, 'causal and window cells');
  /* the tooltip of a masked block */
  const box = await page.$eval('[data-testid="grid-canvas"]', (c) => c.getBoundingClientRect().toJSON());
  await page.mouse.move(box.x + g.left + (0.5 * g.cell) / T, box.y + g.top + g.cell + g.gap + (8.5 * g.cell) / T);
  await page.waitForSelector('[data-testid="grid-tip-masked"]');
  /* open L1 H0: the heat map draws masked cells grey and hatched, allowed cells in blues */
  await page.mouse.click(box.x + g.left + g.cell / 2, box.y + g.top + g.cell + g.gap + g.cell / 2);
  const hm = await waitHook('heatmap', (h) => h.layer === 1 && h.head === 0 && h.win.n === T);
  await page.waitForSelector('[data-testid="heat-window-note"]');
  await page.waitForTimeout(200);
  await page.screenshot({ path: join(ART, 'llama-model-window.png'), fullPage: true });
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      const x = hm.left + j * hm.cell;
      const y = hm.top + i * hm.cell;
      const off = await pixel('matrix-canvas', x + 0.25 * hm.cell, y + 0.25 * hm.cell);
      assert.equal(isGrey(off), masked(i, j), `heat map cell (${i}, ${j}): ${off}`);
      if (masked(i, j)) {
        /* the hatch line runs corner to corner through the centre (anti-aliased: darker near it) */
        let dark = 255;
        for (const dx of [-1, 0, 1])
          for (const dy of [-1, 0, 1]) dark = Math.min(dark, (await pixel('matrix-canvas', x + 0.5 * hm.cell + dx, y + 0.5 * hm.cell + dy))[0]);
        assert.ok(dark < 195, `cell (${i}, ${j}) is hatched: ${dark}`);
      } else assert.ok(off[2] > off[0], `cell (${i}, ${j}) is on the blue scale: ${off}`);
    }
  const mbox = await page.$eval('[data-testid="matrix-canvas"]', (c) => {
    c.scrollIntoView();
    return c.getBoundingClientRect().toJSON();
  });
  await page.mouse.move(mbox.x + hm.left + 0.5 * hm.cell, mbox.y + hm.top + 8.5 * hm.cell);
  await page.waitForSelector('[data-testid="heat-tip"] [data-masked="1"]');
  await page.screenshot({ path: join(ART, 'llama-model-window.png'), fullPage: true });
});

test('neuron view: q/k before and after RoPE, and each score split into content and position', async () => {
  const run = await api('/api/v1/run', { model: 'llama', ids: IDS });
  const T = IDS.length, l = 1, h = 2, i = 5;
  const qk = await api(`/api/v1/runs/${run.id}/qk?layer=${l}&head=${h}`);
  assert.equal(qk.meta.rope, true);
  const Dh = qk.meta.d_head, scale = qk.meta.scale;
  /* the served tensors are the CLI's */
  const cli = JSON.parse(execFileSync(BIN, ['run', '--model', join(FIX, 'llama'), '--ids', IDS.join(','), '--format', 'json'], { maxBuffer: 1 << 26 }).toString());
  const flat = (a) => a.flat(Infinity);
  for (const [name, key] of [['q_pre_rope', 'queries_pre_rope'], ['k_pre_rope', 'keys_pre_rope'], ['q', 'queries'], ['k', 'keys']]) {
    const want = flat(cli[key][l][h]);
    const got = qk[name].data;
    assert.equal(got.length, want.length, name);
    let d = 0;
    for (let x = 0; x < got.length; x++) d = Math.max(d, Math.abs(got[x] - want[x]));
    assert.ok(d < 1e-6, `${name}: max |server - CLI| ${d}`);
  }
  const row = (t) => Array.from(t.data.subarray(i * Dh, (i + 1) * Dh));
  const close = (a, b, tol = 1e-6) => a.length === b.length && a.every((v, x) => Math.abs(v - b[x]) <= tol);

  await page.goto(`${base}/?model=llama&ids=${IDS.join(',')}&view=neuron&layer=${l}&head=${h}&token=${i}`);
  await page.waitForSelector('[data-testid="rope-table"]');
  let n = await waitHook('neuron', (v) => v.rope === 'post' && v.layer === l && v.head === h);
  assert.ok(close(n.q, row(qk.q)), 'after RoPE: the q drawn is the served q');
  assert.ok(!close(n.q, row(qk.q_pre_rope)), 'RoPE changes q at position 5');
  assert.match(await page.textContent('[data-testid="n-kv-note"]'), /Head 2 reads key\/value head 1, shared by query heads 2, 3/);
  const before = await page.$eval('[data-testid="neuron-canvas"]', (c) => c.toDataURL());
  await page.selectOption('[data-testid="n-rope"]', 'pre');
  n = await waitHook('neuron', (v) => v.rope === 'pre');
  assert.ok(close(n.q, row(qk.q_pre_rope)), 'before RoPE: the q drawn is q_pre_rope');
  await page.waitForFunction(() => /[?&]rope=pre/.test(location.search));
  assert.notEqual(await page.$eval('[data-testid="neuron-canvas"]', (c) => c.toDataURL()), before, 'the figure changed');

  /* the decomposition, recomputed here from the served tensors */
  const rows = await page.$$eval('[data-testid="rope-table"] tr[data-key]', (trs) =>
    trs.map((tr) => ({ j: +tr.dataset.key, sPre: +tr.dataset.sPre, s: +tr.dataset.s, delta: +tr.dataset.delta, masked: tr.dataset.masked === '1' })));
  assert.equal(rows.length, T);
  let content = 0, position = 0;
  for (const r of rows) {
    const sPre = dot(qk.q_pre_rope.data, i, qk.k_pre_rope.data, r.j, Dh) * scale;
    const s = dot(qk.q.data, i, qk.k.data, r.j, Dh) * scale;
    assert.ok(Math.abs(r.sPre - sPre) < 1e-5, `key ${r.j}: s_pre ${r.sPre} vs ${sPre}`);
    assert.ok(Math.abs(r.s - s) < 1e-5, `key ${r.j}: s ${r.s} vs ${s}`);
    assert.ok(Math.abs(r.delta - (s - sPre)) < 1e-5, `key ${r.j}: delta`);
    assert.equal(r.masked, r.j > i, `key ${r.j}: masked iff later`);
    if (!r.masked) {
      assert.ok(Math.abs(s - qk.scores.data[i * T + r.j]) < 1e-4, `key ${r.j}: s is the engine's score`);
      content += Math.abs(sPre);
      position += Math.abs(s - sPre);
    }
  }
  const share = +(await page.getAttribute('[data-testid="rope-share"]', 'data-share'));
  assert.ok(Math.abs(share - position / (content + position)) < 1e-9, `share ${share}`);
  assert.ok(share > 0 && share < 1);
  await page.screenshot({ path: join(ART, 'llama-neuron-rope.png'), fullPage: true });
});

test('model view at 32 layers x 32 heads (8 kv heads): one canvas from one pooled request', async () => {
  const ids = Array.from({ length: 100 }, (_, k) => (k * 7 + 3) % 64);
  const pooled = [];
  page.on('request', (r) => {
    if (/\/attention\?/.test(r.url())) pooled.push(r.url());
  });
  const t0 = Date.now();
  await page.goto(`${base}/?model=llama-32x32&ids=${ids.join(',')}&view=model`);
  const mv = await waitHook('modelView', (v) => v.pool === 64 && v.renderMs > 0);
  const ms = Date.now() - t0;
  console.log(`32 x 32 model view (100 tokens): ${ms} ms to drawn, renderMs ${mv.renderMs.toFixed(0)}`);
  assert.equal(pooled.filter((u) => /pool=64/.test(u)).length, 1, 'one pooled request');
  assert.equal(mv.kvGroup.length, 32);
  assert.deepEqual([...new Set(mv.kvGroup)], [0, 1, 2, 3, 4, 5, 6, 7]);
  assert.ok(mv.grid.cell >= 24 && mv.grid.width <= 1400, `thumbnails fit the page: ${JSON.stringify(mv.grid)}`);
  assert.equal(await page.$$eval('main canvas', (c) => c.length), 1, 'one canvas');
  /* no DOM per matrix cell: at most one keyboard button per thumbnail */
  assert.ok((await page.$$eval('main *', (e) => e.length)) < 32 * 32 + 200);
  /* every thumbnail was drawn: its centre column has ink */
  const inked = await page.evaluate(({ g }) => {
    const ctx = document.querySelector('[data-testid="grid-canvas"]').getContext('2d');
    let n = 0;
    for (let r = 0; r < 32; r++)
      for (let c = 0; c < 32; c++) {
        const d = ctx.getImageData(g.left + c * (g.cell + g.gap) + 2, g.top + r * (g.cell + g.gap) + 2, g.cell - 4, g.cell - 4).data;
        let ink = 0;
        for (let k = 0; k < d.length; k += 4) if (d[k] + d[k + 1] + d[k + 2] < 600) ink++;
        if (ink > 0) n++;
      }
    return n;
  }, { g: mv.grid });
  assert.equal(inked, 1024, 'every thumbnail has ink');
  assert.ok(ms < 20_000, `drawn in ${ms} ms`);
  await page.screenshot({ path: join(ART, 'llama-model-32x32.png'), fullPage: true });
});
