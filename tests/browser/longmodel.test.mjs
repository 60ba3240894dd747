// longmodel.test.mjs — the model view of a long run (ctest browser_longmodel) on a
// 1100-token input (not a multiple of the 64-block side) of a random Llama
// (make_llama_model.mjs: 3 layers × 4 heads sharing 2 kv heads, 1100 positions, no
// window), which the server runs as a long run (capture stats,qkv: no T × T kept).
// Checks:
//   - the model view opens for it, from one GET .../thumbs (no tile, attention or stats
//     request), one thumbnail (a focus button) per head, 64 × 64 blocks;
//   - in heat-map mode the hovered block's weight is the route's (max of the block, f16),
//     and the block with the head's largest weight is drawn darker than its lightest one;
//   - "Colour by" sink mass fills each thumbnail with one colour, its tooltip the route's
//     head_stats value, the head with the most sink mass darker than the one with the least;
//     entropy's range is the route's;
//   - a click on a thumbnail opens that head in the long map.
// Screenshots go to tests/browser/artifacts/longmodel-*.png.
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
const T = 1100, L = 3, H = 4, P = 64;
const IDS = Array.from({ length: T }, (_, i) => (i * 37 + 11) % 64);

let server, base, browser, page, tmp;
const requests = [];

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-longmodel-'));
  execFileSync(process.execPath, [join(HERE, 'make_llama_model.mjs'), join(tmp, 'llama-long'), String(L), String(H), '2', String(T), '0']);
  ({ p: server, url: base } = await startServer(BIN, ['--model', join(tmp, 'llama-long')]));
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { height: 1000 }));
  page.on('request', (r) => {
    if (r.url().includes('/api/v1/runs/')) requests.push(new URL(r.url()));
  });
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

async function api(path) {
  const r = await fetch(base + path);
  assert.equal(r.status, 200, path);
  return replyBody(r);
}

const hook = () => page.evaluate(() => window.__attnscope?.modelView ?? null);

/** The canvas point at the centre of block (bi, bj) of the thumbnail of (l, h). */
async function blockPoint(mv, l, h, bi, bj) {
  const box = await page.getByTestId('grid-canvas').boundingBox();
  const g = mv.grid;
  return { x: box.x + g.left + h * (g.cell + g.gap) + ((bj + 0.5) * g.cell) / P, y: box.y + g.top + l * (g.cell + g.gap) + ((bi + 0.5) * g.cell) / P };
}

/** The RGB of the canvas pixel under the page point (x, y). */
async function pixel(x, y) {
  const box = await page.getByTestId('grid-canvas').boundingBox();
  return page.evaluate(({ x, y }) => {
    const c = document.querySelector('[data-testid=grid-canvas]');
    const d = c.getContext('2d').getImageData(Math.round(x), Math.round(y), 1, 1).data;
    return [d[0], d[1], d[2]];
  }, { x: x - box.x, y: y - box.y });
}

/** Hovers (x, y) and returns the tooltip's value. */
async function hoverValue(x, y) {
  await page.mouse.move(x, y);
  const w = page.getByTestId('grid-tip').locator('.w');
  await w.waitFor();
  return Number(await w.getAttribute('data-w'));
}

const sum = (rgb) => rgb[0] + rgb[1] + rgb[2];
let runId, route;

test('a long run opens the model view from one thumbs request', async () => {
  await page.goto(`${base}/?model=llama-long&text=${IDS.join(',')}&view=model`);
  await page.waitForFunction(() => window.__attnscope?.modelView?.pool > 0 && window.__attnscope.modelView.long);
  const mv = await hook();
  assert.equal(mv.pool, P);
  assert.equal(mv.tokens, T);
  const thumbs = requests.filter((u) => u.pathname.endsWith('/thumbs'));
  assert.equal(thumbs.length, 1, 'one thumbs request');
  assert.equal(thumbs[0].searchParams.get('op'), 'max');
  assert.deepEqual(requests.filter((u) => /\/(tile|attention|stats|maps)$/.test(u.pathname)).map(String), [], 'nothing else asked for');
  runId = thumbs[0].pathname.split('/')[4];
  const run = await api(`/api/v1/runs/${runId}`);
  assert.equal(run.capture, 'stats,qkv');
  assert.equal(await page.getByTestId('grid-focus').locator('button').count(), L * H, 'one thumbnail per head');
  await page.getByTestId('grid-long-note').waitFor();
  route = await api(`/api/v1/runs/${runId}/thumbs?dtype=f32`);
  assert.deepEqual([route.meta.pool, route.max.length, route.head_stats.length], [P, L * H * P * P, L * H * 8]);
});

test('heat map mode: a hovered block is the route max, darker where larger', async () => {
  await page.getByTestId('grid-mode').selectOption('matrix');
  const mv = await hook();
  const l = 1, h = 2, off = (l * H + h) * P * P;
  const a = route.max.subarray(off, off + P * P);
  let hi = 0, lo = 0;
  for (let k = 0; k < P * P; k++) {
    if (a[k] > a[hi]) hi = k;
    if (a[k] < a[lo]) lo = k;
  }
  const pHi = await blockPoint(mv, l, h, Math.floor(hi / P), hi % P), pLo = await blockPoint(mv, l, h, Math.floor(lo / P), lo % P);
  const w = await hoverValue(pHi.x, pHi.y);
  assert.ok(Math.abs(w - a[hi]) <= 1e-3 * Math.max(1, a[hi]), `block ${hi}: tooltip ${w}, route ${a[hi]}`);
  await page.mouse.move(0, 0);
  const [cHi, cLo] = [await pixel(pHi.x, pHi.y), await pixel(pLo.x, pLo.y)];
  assert.ok(sum(cHi) < sum(cLo), `largest weight ${a[hi]} (${cHi}) darker than smallest ${a[lo]} (${cLo})`);
  await page.screenshot({ path: join(ART, 'longmodel-attention.png') });
});

test('colour by sink mass and entropy: the route statistics', async () => {
  await page.getByTestId('grid-colour').selectOption('sink');
  await page.waitForFunction(() => window.__attnscope?.modelView?.stat?.name === 'sink');
  await page.getByTestId('grid-stat-note').waitFor();
  const mv = await hook();
  const sink = Array.from({ length: L * H }, (_, k) => route.head_stats[k * 8 + 1]);
  const kHi = sink.indexOf(Math.max(...sink)), kLo = sink.indexOf(Math.min(...sink));
  assert.ok(Math.abs(mv.stat.hi - sink[kHi]) <= 1e-3 && Math.abs(mv.stat.lo - sink[kLo]) <= 1e-3, `range ${mv.stat.lo}-${mv.stat.hi}`);
  const at = (k, bi, bj) => blockPoint(mv, Math.floor(k / H), k % H, bi, bj);
  const pHi = await at(kHi, 32, 32), pLo = await at(kLo, 32, 32);
  const w = await hoverValue(pHi.x, pHi.y);
  assert.ok(Math.abs(w - sink[kHi]) <= 1e-3, `tooltip ${w}, route ${sink[kHi]}`);
  await page.mouse.move(0, 0);
  const [cHi, cLo] = [await pixel(pHi.x, pHi.y), await pixel(pLo.x, pLo.y)];
  assert.ok(sum(cHi) < sum(cLo), `most sink mass ${sink[kHi]} (${cHi}) darker than least ${sink[kLo]} (${cLo})`);
  const corner = await at(kHi, 2, 60);
  assert.deepEqual(await pixel(corner.x, corner.y), cHi, 'one colour per thumbnail');
  await page.screenshot({ path: join(ART, 'longmodel-sink.png') });
  await page.getByTestId('grid-colour').selectOption('entropy');
  await page.waitForFunction(() => window.__attnscope?.modelView?.stat?.name === 'entropy');
  const ent = Array.from({ length: L * H }, (_, k) => route.head_stats[k * 8]);
  const e = (await hook()).stat;
  assert.ok(Math.abs(e.hi - Math.max(...ent)) <= 1e-2 && Math.abs(e.lo - Math.min(...ent)) <= 1e-2, `entropy ${e.lo}-${e.hi}`);
  assert.equal(requests.filter((u) => u.pathname.endsWith('/thumbs')).length, 1, 'the statistics came with the thumbnails');
});

test('a click opens the head in the long map', async () => {
  const mv = await hook();
  const p = await blockPoint(mv, 2, 3, 10, 10);
  await page.mouse.click(p.x, p.y);
  await page.waitForFunction(() => window.__attnscope?.longview?.layer === 2 && window.__attnscope.longview.head === 3);
  assert.match(page.url(), /view=long/);
  await page.getByTestId('long-canvas').waitFor();
});
