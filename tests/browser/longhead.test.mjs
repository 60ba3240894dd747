// longhead.test.mjs — the head view of a long run (ctest browser_longhead) on a 2048-token
// input of a random Llama (make_llama_model.mjs: 2 layers × 4 heads sharing 2 kv heads,
// 2048 positions, no window), which the server keeps without T × T (capture stats,qkv).
// Checks:
//   - the Head view tab is offered for the long run and draws a virtualised token list:
//     the rows fetched are those of the queries on screen only (tile requests at full
//     resolution, 64 queries × 256 keys × every head), at the top and after scrolling to
//     query ~1500, never the whole T × T;
//   - pinning a query on screen and hovering a per-head weight bar shows a weight equal to
//     the same cell of a dense run of the same ids (capture "dense": the forward's own
//     attention, not recomputed from q and k), within 1e-6;
//   - after scrolling away the pinned query's rows stay loaded: its bars at other keys
//     show their dense weights too; hovering a query token keeps only its links;
//   - once the server evicted the run (--cache-runs 2, two other runs posted), scrolling on
//     runs it again and loads the rows on screen from the new run.
// Screenshots go to tests/browser/artifacts/longhead-*.png.
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
const LAYER = 1, HEAD = 2, NH = 4;
/* lib/headview.ts headLayout(2048, 4): rows of 14 px from y = 28, weight bars from x = 588, 14 px per head */
const ROW_H = 14, TOP = 28, BARS_X = 588, LEFT_X = 192;

let server, base, browser, page, tmp, denseId;

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-longhead-'));
  execFileSync(process.execPath, [join(HERE, 'make_llama_model.mjs'), join(tmp, 'llama-long'), '2', String(NH), '2', String(T), '0']);
  ({ p: server, url: base } = await startServer(BIN, ['--model', join(tmp, 'llama-long'), '--cache-runs', '2']));
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { height: 1100 }));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

async function api(path, body) {
  const init = body ? { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) } : undefined;
  const r = await fetch(base + path, init);
  assert.equal(r.status, 200, path);
  return replyBody(r);
}

/** The dense run's weight of (query, key) in LAYER/HEAD: a one-cell tile pooled from its captured attention. */
async function denseCell(q, k) {
  const t = await api(`/api/v1/runs/${denseId}/tile?layer=${LAYER}&head=${HEAD}&rows=${q}&cols=${k}&n=1`);
  assert.equal(t.meta.source, 'dense');
  return t.max[0];
}

const hook = () => page.evaluate(() => window.__attnscope.longHead);

/** Scrolls the token list so that query row is at the top; waits until its rows are loaded. */
async function scrollTo(row) {
  await page.getByTestId('head-scroll').evaluate((e, y) => {
    e.scrollTop = y;
    e.dispatchEvent(new Event('scroll'));
  }, TOP + row * ROW_H);
  await page.waitForFunction((row) => {
    const h = window.__attnscope.longHead;
    return h.first >= row - 1 && h.first <= row + 1 && h.loaded >= h.last - h.first;
  }, row);
  await page.waitForFunction(() => !document.querySelector('[data-testid=long-head-note]').textContent.includes('loading'));
  return hook();
}

/** Canvas y (CSS px) of row i's centre at scroll position first (the canvas sticks to the list's top). */
const rowY = (i, scroll) => TOP + i * ROW_H + ROW_H / 2 - scroll;

/** The rows a tile request asked for, [a, b]. */
const rowsOf = (q) => new URLSearchParams(q).get('rows').split('-').map(Number);

test('the head view of a 2048-token long run fetches only the rows on screen', async () => {
  await page.goto(`${base}/?model=llama-long&text=${IDS.join(',')}&layer=${LAYER}&head=${HEAD}`);
  await page.getByTestId('long-canvas').waitFor(); /* a long run opens in the long map */
  assert.ok(!(await page.getByTestId('tab-head').isDisabled()), 'the head view is offered');
  assert.ok(await page.getByTestId('tab-neuron').isDisabled(), 'the other dense views are not');
  await page.getByTestId('tab-head').click();
  await page.getByTestId('head-canvas').waitFor();
  let h = await scrollTo(0);
  assert.ok(h.requests.length > 0);
  for (const q of h.requests) assert.deepEqual(rowsOf(q), [0, 63], `at the top only block 0 is fetched: ${q}`);
  assert.equal(h.requests.length, T / 256, 'every key of the block, 256 at a time');
  for (const q of h.requests) assert.equal(new URLSearchParams(q).get('n'), '256');
  h = await scrollTo(1500);
  const fetched = new Set(h.requests.map((q) => rowsOf(q).join('-')));
  for (const r of fetched) {
    const [a, b] = r.split('-').map(Number);
    assert.ok((a === 0 && b === 63) || (b >= h.first && a <= h.last), `block ${r} holds rows on screen (${h.first}-${h.last})`);
  }
  assert.ok(fetched.size <= 3, `${fetched.size} blocks of 64 fetched of ${T / 64}`);
  const run = (await page.evaluate(() => performance.getEntriesByType('resource').map((e) => e.name))).find((n) => /\/runs\/[^/]+\/tile/.test(n));
  const id = run.split('/runs/')[1].split('/')[0];
  assert.equal((await api(`/api/v1/runs/${id}`)).capture, 'stats,qkv');
  const d = await api('/api/v1/run', { model: 'llama-long', ids: IDS, capture: 'dense' });
  assert.equal(d.capture, 'dense');
  denseId = d.id;
  await page.screenshot({ path: join(ART, 'longhead-scrolled.png') });
});

test('pin and hover at long T show the dense weights', async () => {
  let h = await hook();
  const scroll = TOP + h.first * ROW_H;
  const box = await page.getByTestId('head-canvas').boundingBox();
  const q = h.first + 10;
  // hovering a query keeps only its links (the hover state of the short view)
  await page.mouse.move(box.x + LEFT_X - 20, box.y + rowY(q, scroll));
  await page.waitForFunction((q) => window.__attnscope.longHead.hover?.token === q && window.__attnscope.longHead.hover.side === 'left', q);
  await page.mouse.click(box.x + LEFT_X - 20, box.y + rowY(q, scroll));
  await page.waitForFunction((q) => new URL(location.href).searchParams.get('token') === String(q), q);
  for (const k of [h.first + 3, q, h.first + 25]) {
    await page.mouse.move(box.x + BARS_X + HEAD * 14 + 6, box.y + rowY(k, scroll));
    const tip = page.getByTestId('head-tip');
    await tip.waitFor();
    assert.match(await tip.textContent(), new RegExp(`\\(${q}\\) → .* \\(${k}\\)`));
    const w = Number(await tip.locator('.w').getAttribute('data-w'));
    const want = await denseCell(q, k);
    assert.ok(Math.abs(w - want) <= 1e-6, `(${q}, ${k}): shown ${w}, dense ${want}`);
  }
  await page.screenshot({ path: join(ART, 'longhead-pinned.png') });
  // scrolled away, the pinned query's rows stay: its bars at keys 100.. show their weights
  h = await scrollTo(100);
  const s2 = TOP + h.first * ROW_H;
  const k = h.first + 5;
  await page.mouse.move(box.x + BARS_X + HEAD * 14 + 6, box.y + rowY(k, s2));
  const tip = page.getByTestId('head-tip');
  await tip.waitFor();
  const w = Number(await tip.locator('.w').getAttribute('data-w'));
  const want = await denseCell(q, k);
  assert.ok(w > 0 || want === 0);
  assert.ok(Math.abs(w - want) <= 1e-6, `pinned (${q}, ${k}) after scrolling: shown ${w}, dense ${want}`);
  const blocks = new Set((await hook()).requests.map((x) => rowsOf(x).join('-')));
  assert.ok(blocks.size <= 6, `only the blocks on screen were fetched: ${[...blocks].join(', ')}`);
});

test('a run the server evicted is run again when the list scrolls on', async () => {
  const before = (await hook()).requests.length;
  const oldId = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => e.name).filter((n) => /\/tile\?/.test(n)).pop());
  for (const ids of [[1, 2, 3], [4, 5, 6]]) await api('/api/v1/run', { model: 'llama-long', ids }); /* the cache holds 2 runs */
  const h = await scrollTo(800);
  assert.ok(h.requests.length > before, 'the rows on screen were asked for');
  const names = await page.evaluate(() => performance.getEntriesByType('resource').map((e) => e.name).filter((n) => /\/tile\?/.test(n)));
  const id = (n) => n.split('/runs/')[1].split('/')[0];
  const newId = id(names[names.length - 1]);
  assert.notEqual(newId, id(oldId), 'the run was made again');
  assert.equal((await api(`/api/v1/runs/${newId}`)).capture, 'stats,qkv');
  assert.equal(await page.getByTestId('status').evaluate((e) => e.classList.contains('error')), false, 'no error shown');
  const box = await page.getByTestId('head-canvas').boundingBox();
  const q = h.first + 4, k = h.first + 2;
  await page.mouse.click(box.x + LEFT_X - 20, box.y + rowY(q, TOP + h.first * ROW_H));
  await page.mouse.move(box.x + BARS_X + HEAD * 14 + 6, box.y + rowY(k, TOP + h.first * ROW_H));
  const tip = page.getByTestId('head-tip');
  await tip.waitFor();
  const w = Number(await tip.locator('.w').getAttribute('data-w'));
  const t = await api(`/api/v1/runs/${newId}/tile?layer=${LAYER}&head=${HEAD}&rows=${q}&cols=${k}&n=1`);
  assert.equal(w, t.max[0], `(${q}, ${k}) after the run was made again`);
});
