// long.test.mjs — the long map (ctest browser_long) on a 2048-token input of a random
// Llama (make_llama_model.mjs: 2 layers × 4 heads sharing 2 kv heads, 2048 positions, no
// window), which the server runs as a long run (capture stats,qkv: no T × T kept). Checks:
//   - the explorer opens the long map for it, the dense views' tabs are disabled, and the
//     first tile asked for is the whole head pooled to 256 × 256;
//   - zooming with + and with the wheel asks for smaller windows, down to full resolution
//     (the tile's cells are the weights) and token labels once a cell is 12 px wide;
//   - the weight in the tooltip of a hovered cell equals the server's one-cell tile and the
//     dense attention of the same ids (a run with capture "dense"), and zoomed out the
//     tooltip's exact weight (a one-cell tile) too;
//   - the sink toggle asks for tiles with exclude=0, whose hovered weight equals the dense
//     row renormalised here without its first key; the log scale changes the colours;
//     both are in the URL;
//   - zoomed out, the tooltip's exact weight is asked for at once as the query's row segment
//     (one row, the map's exclude list), equals the server's one-cell tile and the dense
//     weight (renormalised without the sink when it is left out), and a cell of a row
//     segment already fetched asks for nothing;
//   - a token typed in "Token" opens the 64 tokens around its row (URL key token);
//   - the statistics table shows the served head_stats, and a cell opens its head.
// Screenshots go to tests/browser/artifacts/long-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, replyBody, startServer, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const T = 2048;
const IDS = Array.from({ length: T }, (_, i) => (i * 37 + 11) % 64);
const LAYER = 1, HEAD = 2;

let server, base, browser, page, tmp;
const tileRequests = [];

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-long-'));
  execFileSync(process.execPath, [join(HERE, 'make_llama_model.mjs'), join(tmp, 'llama-long'), '2', '4', '2', String(T), '0']);
  ({ p: server, url: base } = await startServer(BIN, ['--model', join(tmp, 'llama-long')]));
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { height: 1100 }));
  page.on('request', (r) => {
    if (r.url().includes('/tile?')) tileRequests.push(new URL(r.url()));
  });
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// ---- helpers ----------------------------------------------------------------

async function api(path, body) {
  const init = body ? { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) } : undefined;
  const r = await fetch(base + path, init).catch(() => fetch(base + path, init));
  assert.equal(r.status, 200, path);
  return replyBody(r);
}

const hook = () => page.evaluate(() => window.__attnscope?.longmap ?? null);

/** Waits until the drawn tile covers n tokens a side and nothing is loading; returns the hook. */
async function settled(n) {
  await page.waitForFunction((n) => {
    const h = window.__attnscope?.longmap;
    return h && !h.loading && h.tile && h.tile.r1 - h.tile.r0 === n && h.win.n === n;
  }, n);
  return hook();
}

/** Hovers the tile cell (bi, bj) at its centre; returns the tooltip's exact weight and the cell's tokens. */
async function hoverCell(h, bi, bj) {
  const box = await page.getByTestId('long-canvas').boundingBox();
  const cw = h.size / h.tile.pc, ch = h.size / h.tile.pr;
  await page.mouse.move(box.x + h.left + (bj + 0.5) * cw, box.y + h.top + (bi + 0.5) * ch);
  const el = page.getByTestId('long-exact');
  await el.waitFor();
  const span = h.tile.r1 - h.tile.r0;
  return {
    w: Number(await el.getAttribute('data-w')),
    query: h.tile.r0 + Math.floor(((bi + 0.5) / h.tile.pr) * span),
    key: h.tile.c0 + Math.floor(((bj + 0.5) / h.tile.pc) * span),
  };
}

/** The server's exact weight of (query, key): a one-cell tile. */
async function serverCell(query, key, exclude) {
  const t = await api(`/api/v1/runs/${runId}/tile?layer=${LAYER}&head=${HEAD}&rows=${query}&cols=${key}&n=1${exclude ? '&exclude=0' : ''}`);
  return t.max[0];
}

let runId, dense;

// ---- tests --------------------------------------------------------------------

test('a 2048-token input opens the long map, drawn from one pooled tile', async () => {
  await page.goto(`${base}/?model=llama-long&text=${IDS.join(',')}&view=head&layer=${LAYER}&head=${HEAD}`);
  await page.getByTestId('long-canvas').waitFor();
  const h = await settled(T);
  assert.deepEqual([h.tile.pr, h.tile.pc], [256, 256], 'the whole head pooled to 256 × 256');
  assert.ok((await page.getByTestId('tab-long').getAttribute('class')).split(' ').includes('active'));
  assert.ok(await page.getByTestId('tab-neuron').isDisabled(), 'the dense views are disabled');
  assert.ok(!(await page.getByTestId('tab-model').isDisabled()), 'but the model view, from pooled thumbnails (longmodel.test.mjs)');
  assert.ok(!(await page.getByTestId('tab-head').isDisabled()), 'but the head view, windowed (longhead.test.mjs)');
  assert.match(page.url(), /view=long/);
  const first = tileRequests[0];
  assert.equal(first.searchParams.get('n'), '256');
  assert.equal(first.searchParams.get('rows'), `0-${T - 1}`);
  runId = first.pathname.split('/')[4];
  const run = await api(`/api/v1/runs/${runId}`);
  assert.equal(run.capture, 'stats,qkv');
  assert.equal(run.sizes.tokens, T);
  await page.getByTestId('long-stats').waitFor();
  /* the same ids kept dense, to check the weights against */
  const d = await api('/api/v1/run', { model: 'llama-long', ids: IDS, capture: 'dense' });
  assert.equal(d.capture, 'dense');
  dense = (await api(`/api/v1/runs/${d.id}/attention?layers=${LAYER}&heads=${HEAD}&dtype=f32`)).attention;
  assert.equal(dense.length, T * T);
  /* zoomed out, the tooltip's exact weight is a one-cell tile */
  const c = await hoverCell(h, 200, 100);
  assert.ok(Math.abs(c.w - dense[c.query * T + c.key]) <= 1e-6, `zoomed out (${c.query}, ${c.key}): ${c.w} vs ${dense[c.query * T + c.key]}`);
  await page.screenshot({ path: join(ART, 'long-whole.png') });
});

test('zooming in reaches single cells whose weight is the server\'s', async () => {
  const before = tileRequests.length;
  for (let k = 0; k < 3; k++) await page.getByTestId('long-zoom-in').click();
  let h = await settled(256);
  assert.deepEqual([h.tile.pr, h.tile.pc], [256, 256], 'a 256-token window at full resolution');
  assert.equal(h.labels, false);
  for (let k = 0; k < 3; k++) await page.getByTestId('long-zoom-in').click();
  h = await settled(32);
  assert.equal(h.labels, true, 'token labels once a cell is 20 px wide');
  assert.ok(tileRequests.length > before, 'zooming asked for tiles');
  const last = tileRequests.at(-1);
  assert.equal(last.searchParams.get('n'), '32');
  /* the window's strongest cell (a weight large enough for 1e-6 to mean something) */
  let [ki, kj] = [0, 0];
  const at = (i, j) => dense[(h.tile.r0 + i) * T + h.tile.c0 + j];
  for (let i = 0; i < 32; i++) for (let j = 0; j < 32; j++) if (at(i, j) > at(ki, kj)) [ki, kj] = [i, j];
  const c = await hoverCell(h, ki, kj);
  assert.ok(c.key <= c.query, 'a key the query sees');
  assert.ok(c.w > 1e-3, `a weight of some size (${c.w})`);
  const served = await serverCell(c.query, c.key, false);
  console.log(`cell (${c.query}, ${c.key}): tooltip ${c.w}, one-cell tile ${served}, dense ${dense[c.query * T + c.key]}`);
  assert.ok(Math.abs(c.w - served) <= 1e-7, 'tooltip = the server\'s exact value');
  assert.ok(Math.abs(c.w - dense[c.query * T + c.key]) <= 1e-6, 'tooltip = the dense capture');
  await page.screenshot({ path: join(ART, 'long-cells.png') });

  /* the wheel zooms out around the pointer */
  const box = await page.getByTestId('long-canvas').boundingBox();
  await page.mouse.move(box.x + h.left + h.size / 2, box.y + h.top + h.size / 2);
  await page.mouse.wheel(0, 120);
  await page.waitForFunction(() => window.__attnscope.longmap.win.n === 40);
  await settled(40);
});

test('a zoom step is drawn at once from the tile on screen, before its own tile', async () => {
  await settled(40);
  /* one click and the next animation frame, in the page: the window's tile is at least the
     map's 60 ms rest away, so the frame shows the 40-token tile resampled onto 80 tokens */
  const r = await page.evaluate(async () => {
    document.querySelector('[data-testid="long-zoom-out"]').click();
    await new Promise((res) => requestAnimationFrame(res));
    const h = window.__attnscope.longmap;
    const c = document.querySelector('[data-testid="long-canvas"]');
    const px = (x, y) => Array.from(c.getContext('2d').getImageData(h.left + x, h.top + y, 1, 1).data.slice(0, 3));
    return { frame: h.frame, win: h.win, tile: h.tile, corner: px(2, 2), size: h.size };
  });
  assert.deepEqual(r.frame, r.win, 'the frame drawn is the new window');
  assert.equal(r.win.n, 80);
  if (r.tile.r1 - r.tile.r0 === 40) {
    /* the new window's top-left corner lies outside the 40-token tile: drawn masked grey */
    assert.deepEqual(r.corner, [200, 200, 200], `corner pixel ${r.corner} is the masked colour`);
  } else console.log('SKIPPED the pixel check: the 80-token tile arrived within the frame');
  const h = await settled(80);
  assert.deepEqual(h.frame, h.win);
});

test('the sink toggle renormalises without the first key; the log scale recolours', async () => {
  const pixel = async (h, bi, bj) => page.evaluate(({ x, y }) => {
    const c = document.querySelector('[data-testid="long-canvas"]');
    return Array.from(c.getContext('2d').getImageData(Math.floor(x), Math.floor(y), 1, 1).data.slice(0, 3));
  }, { x: h.left + (bj + 0.5) * (h.size / h.tile.pc), y: h.top + (bi + 0.5) * (h.size / h.tile.pr) });
  await page.getByTestId('long-zoom-reset').click();
  let h = await settled(T);
  await page.getByTestId('long-zoom-in').click();
  await page.getByTestId('long-zoom-in').click();
  await page.getByTestId('long-zoom-in').click();
  await page.getByTestId('long-zoom-in').click();
  h = await settled(128);
  /* a small weight of row 100 (pale on the linear scale) */
  const bj = Array.from({ length: 100 }, (_, j) => j).find((j) => {
    const w = dense[(h.tile.r0 + 100) * T + h.tile.c0 + j];
    return w > 1e-6 && w < 0.02;
  });
  assert.ok(bj !== undefined, 'a small weight in row 100');
  const linear = await pixel(h, 100, bj);
  await page.getByTestId('long-scale').selectOption('log');
  await page.waitForFunction(() => window.__attnscope.longview.scale === 'log');
  await page.waitForTimeout(100);
  const log = await pixel(h, 100, bj);
  assert.notDeepEqual(log, linear, 'the log scale changes the colour of a small weight');

  await page.getByTestId('long-sink').check();
  await page.waitForFunction(() => window.__attnscope.longmap.tile?.exclude?.[0] === 0 && !window.__attnscope.longmap.loading);
  h = await hook();
  assert.equal(tileRequests.at(-1).searchParams.get('exclude'), '0');
  /* the window's row with the most mass on the first token, at its strongest visible key */
  const rowOf = (bi) => dense.subarray((h.tile.r0 + bi) * T, (h.tile.r0 + bi + 1) * T);
  let si = 0;
  for (let i = 1; i < 128; i++) if (rowOf(i)[0] > rowOf(si)[0]) si = i;
  let sj = 0;
  for (let j = 1; j <= Math.min(127, h.tile.r0 + si - h.tile.c0); j++) if (rowOf(si)[h.tile.c0 + j] > rowOf(si)[h.tile.c0 + sj]) sj = j;
  const c = await hoverCell(h, si, sj);
  const row = rowOf(si);
  let kept = 0;
  for (let j = 1; j < T; j++) kept += row[j];
  const want = row[c.key] / kept;
  console.log(`sink excluded (${c.query}, ${c.key}): tooltip ${c.w}, dense renormalised ${want}, with the sink ${row[c.key]} (sink ${row[0]})`);
  assert.ok(Math.abs(c.w - want) <= 1e-5 * want, 'the renormalised weight (relative 1e-5)');
  assert.ok(Math.abs(row[c.key] - want) > 1e-3 * want, 'the renormalisation changed the weight');
  assert.ok(Math.abs(c.w - (await serverCell(c.query, c.key, true))) <= 1e-7);
  assert.match(page.url(), /scale=log/);
  assert.match(page.url(), /sink=0/);
  await page.screenshot({ path: join(ART, 'long-sink-log.png') });
});

test('zoomed out, the exact weight under the pointer comes at once from its row, sink toggle honoured', async () => {
  await page.getByTestId('long-zoom-reset').click();
  let h = await settled(T);
  assert.deepEqual(h.tile.exclude, [0], 'the sink is still left out (previous test)');
  await page.getByTestId('long-canvas').scrollIntoViewIfNeeded();
  let box = await page.getByTestId('long-canvas').boundingBox();
  await page.evaluate(() => {
    window.__hv = { move: 0 };
    addEventListener('mousemove', () => (window.__hv.move = performance.now()), true);
  });
  /* hovers cell (bi, bj) of the whole-head tile; the (query, key) under the pointer and the
     tooltip's exact weight once it is shown for that cell (another cell than the last one),
     with the time from the mousemove to it, read in the page at each animation frame */
  let last = { q: -1, k: -1 };
  const hover = async (bi, bj) => {
    const cw = h.size / h.tile.pc, ch = h.size / h.tile.pr;
    await page.mouse.move(box.x + h.left + (bj + 0.5) * cw, box.y + h.top + (bi + 0.5) * ch);
    const r = await page.evaluate(([lq, lk]) => new Promise((res, rej) => {
      const tick = () => {
        const e = window.__attnscope.longmap.exact, el = document.querySelector('[data-testid=long-exact]');
        if (e && el && (e.query !== lq || e.key !== lk) && Number(el.getAttribute('data-w')) === e.w)
          return res({ q: e.query, k: e.key, w: Number(el.getAttribute('data-w')), ms: performance.now() - window.__hv.move });
        if (performance.now() - window.__hv.move > 20_000)
          return rej(new Error(`no exact weight in the tooltip: ${JSON.stringify({ e, last: [lq, lk], tip: document.querySelector('[data-testid=long-tip]')?.textContent })}`));
        requestAnimationFrame(tick);
      };
      tick();
    }), [last.q, last.k]);
    last = r;
    const inBlock = (x, b, n) => Math.floor((b * T) / n) <= x && x < Math.floor(((b + 1) * T) / n);
    assert.ok(inBlock(r.q, bi, h.tile.pr) && inBlock(r.k, bj, h.tile.pc), `the tooltip's cell (${r.q}, ${r.k}) lies in the hovered block (${bi}, ${bj})`);
    return r;
  };
  const renormed = (q, k) => {
    let kept = 0;
    for (let j = 1; j < T; j++) kept += dense[q * T + j];
    return k === 0 ? 0 : dense[q * T + k] / kept;
  };
  const times = [];
  for (const [bi, bj] of [[150, 30], [120, 100], [90, 60], [140, 139]]) {
    const c = await hover(bi, bj);
    times.push(c.ms);
    const served = await serverCell(c.q, c.k, true);
    assert.ok(Math.abs(c.w - served) <= 1e-7, `sink out (${c.q}, ${c.k}): tooltip ${c.w} = the server's one-cell tile ${served}`);
    assert.ok(Math.abs(c.w - renormed(c.q, c.k)) <= 1e-6, `sink out (${c.q}, ${c.k}): tooltip ${c.w} = dense renormalised ${renormed(c.q, c.k)}`);
    const asked = tileRequests.at(-1);
    assert.equal(asked.searchParams.get('rows'), `${c.q}-${c.q}`, 'one row asked for');
    assert.equal(asked.searchParams.get('exclude'), '0');
  }
  /* the next cell along the same row segment: answered from the kept row, no request */
  const before = tileRequests.length, c0 = last;
  const c1 = await hover(140, 138);
  if (Math.floor(c1.k / 256) === Math.floor(c0.k / 256)) assert.equal(tileRequests.length, before, 'a kept row segment asks for nothing');
  else console.log('SKIPPED the kept-row check: the two keys lie in different segments');
  assert.ok(Math.abs(c1.w - renormed(c1.q, c1.k)) <= 1e-6);

  await page.getByTestId('long-sink').uncheck();
  await page.waitForFunction(() => window.__attnscope.longmap.tile?.exclude?.length === 0 && !window.__attnscope.longmap.loading);
  h = await settled(T);
  await page.getByTestId('long-canvas').scrollIntoViewIfNeeded();
  box = await page.getByTestId('long-canvas').boundingBox(); /* the page may have moved */
  for (const [bi, bj] of [[150, 30], [130, 129]]) {
    const c = await hover(bi, bj);
    times.push(c.ms);
    assert.ok(Math.abs(c.w - (await serverCell(c.q, c.k, false))) <= 1e-7, `(${c.q}, ${c.k}): tooltip = the server's one-cell tile`);
    assert.ok(Math.abs(c.w - dense[c.q * T + c.k]) <= 1e-6, `(${c.q}, ${c.k}): tooltip ${c.w} = dense ${dense[c.q * T + c.k]}`);
    assert.equal(tileRequests.at(-1).searchParams.get('exclude'), null);
  }
  console.log(`zoomed out (${T} tokens): mousemove to the exact weight shown ${times.map((t) => t.toFixed(0)).join(', ')} ms`);
});

test('a typed token opens the 64 tokens around its row', async () => {
  await page.getByTestId('long-goto').fill('1500');
  await page.getByTestId('long-goto-go').click();
  const h = await settled(64);
  assert.ok(h.tile.r0 <= 1500 && 1500 < h.tile.r1, `row 1500 in [${h.tile.r0}, ${h.tile.r1})`);
  assert.equal(h.tile.r0, 1500 - 32);
  assert.match(page.url(), /token=1500/);
});

test('the head statistics table selects a head', async () => {
  const table = page.getByTestId('long-stats-table');
  await table.waitFor();
  const stats = await api(`/api/v1/runs/${runId}/stats`);
  const v = Number(await table.locator('td[data-l="0"][data-h="3"]').getAttribute('data-v'));
  assert.ok(Math.abs(v - stats.head_stats[(0 * 4 + 3) * 8 + 1]) <= 1e-6, 'the sink mass of layer 0 head 3');
  const before = tileRequests.length;
  await table.locator('td[data-l="0"][data-h="3"] button').click();
  await page.waitForFunction(() => window.__attnscope.longview.layer === 0 && window.__attnscope.longview.head === 3);
  await settled(T);
  const last = tileRequests.at(-1);
  assert.ok(tileRequests.length > before);
  assert.equal(last.searchParams.get('layer'), '0');
  assert.equal(last.searchParams.get('head'), '3');
  assert.match(page.url(), /layer=0&head=3/);
  await page.screenshot({ path: join(ART, 'long-stats.png') });
});
