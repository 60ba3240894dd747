// navigation.test.mjs — browser tests of the explorer's navigation, the interactive
// attention graph, and keyboard / screen-reader access to the canvas views.
// Playwright-core drives Debian's Chromium against the real `attnscope serve --db` on an
// ephemeral loopback port, with the database of tests/ref/make_analysis_db.sh (runs 1
// and 2, two tiny SST-2 classifiers) plus an `attnscope import` of the synthetic 12 x 12
// folder of make_synthetic_import.mjs (run 3, served with --import-dir).
// Checks:
// - Run on the landing page (which shows the head overview) switches to the head view;
//   the "Corpus analysis" row keeps its position across tabs, inputs and models;
// - Back / Forward walk tab, layer and input changes and restore the view; a slider
//   adds no history entry;
// - double-clicking a head isolates and selects it (URL head, neuron view);
// - selecting an imported sentence shows its saliency and the head's attention;
// - the graph: no two node boxes (circle + label, label width measured here) overlap,
//   dragging moves a node, hovering colours its edges, a legend is drawn;
// - keyboard: Tab reaches each canvas view's items (head view tokens, model view
//   thumbnails, neuron view keys, overview glyphs, graph nodes), arrow keys move the
//   focus, the focused item's aria-label names it, Enter acts on it.
// Screenshots go to tests/browser/artifacts/nav-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer as startServerAt, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');

let server, base, browser, page, tmp;

const startServer = (args) => startServerAt(BIN, args);

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-nav-'));
  execFileSync('bash', [join(ROOT, 'tests', 'ref', 'make_analysis_db.sh'), BIN, tmp], { stdio: 'inherit' });
  const db = join(tmp, 'analysis.sqlite');
  const dir = join(tmp, 'synthetic');
  execFileSync(process.execPath, [join(HERE, 'make_synthetic_import.mjs'), dir]);
  execFileSync(BIN, ['import', '--dir', dir, '--db', db, '--min-rel', '20', '--quiet']);
  const s = await startServer(['--model', join(tmp, 'bert-sst'), '--model', join(tmp, 'distil-sst'), '--db', db, '--import-dir', dir]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { height: 1400 }));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// ---- helpers ----------------------------------------------------------------

const shot = (name) => page.screenshot({ path: join(ART, `nav-${name}.png`), fullPage: true });
const param = (k) => new URL(page.url()).searchParams.get(k);
const waitParam = (k, v) => page.waitForFunction(([k, v]) => new URLSearchParams(location.search).get(k) === v, [k, v]);
const navY = async () => (await page.locator('[data-testid=analysis-nav]').boundingBox()).y;
const hook = (key) => page.evaluate((k) => JSON.parse(JSON.stringify(window.__attnscope?.[k] ?? null)), key);

async function open(query) {
  await page.goto(`${base}/?${query}`);
  await page.waitForSelector('[data-testid=analysis-nav]', { timeout: 30_000 });
}

async function runText(text) {
  await page.fill('[data-testid=text]', text);
  await page.click('[data-testid=run]');
}

/** Canvas pixels counted by colour: ink (not white), orange (the graph's outgoing edges). */
async function pixels(testid, region) {
  return page.evaluate(
    ({ testid, region }) => {
      const c = document.querySelector(`[data-testid="${testid}"]`);
      if (!c) return { ink: 0, orange: 0 };
      const [x, y, w, h] = region ?? [0, 0, c.width, c.height];
      const d = c.getContext('2d').getImageData(x, y, w, h).data;
      let ink = 0, orange = 0;
      for (let i = 0; i < d.length; i += 4) {
        const [r, g, b] = [d[i], d[i + 1], d[i + 2]];
        if (r + g + b > 735) continue;
        ink++;
        if (r > 180 && r - b > 60 && g - b > 15 && r - g > 30) orange++;
      }
      return { ink, orange };
    },
    { testid, region },
  );
}

/** Presses Tab until the focus is inside the element `testid` (at most 80 times); returns the focused aria-label. */
async function tabInto(testid) {
  for (let k = 0; k < 80; k++) {
    await page.keyboard.press('Tab');
    const inside = await page.evaluate((t) => !!document.activeElement?.closest(`[data-testid="${t}"]`), testid);
    if (inside) return focused();
  }
  assert.fail(`Tab never reached ${testid}`);
}

const focused = () => page.evaluate(() => document.activeElement?.getAttribute('aria-label') ?? '');

async function key(k) {
  await page.keyboard.press(k);
  return focused();
}

// ---- navigation -------------------------------------------------------------

test('Run from the landing page shows the head view; the corpus row stays in place', async () => {
  await open('');
  await waitParam('view', 'overview');
  await page.waitForSelector('[data-testid=overview-canvas]');
  const y0 = await navY();
  const ys = { landing: y0 };
  await runText('the film was good .');
  await page.waitForSelector('[data-testid=head-canvas]');
  assert.equal(param('view'), 'head', 'Run switches from the overview to the head view');
  ys.head = await navY();
  for (const tab of ['model', 'neuron', 'instances', 'overview', 'head']) {
    await page.click(`[data-testid=tab-${tab}]`);
    await waitParam('view', tab);
    ys[tab] = await navY();
  }
  await page.fill('[data-testid=text]', 'a story about love [MASK] work .');
  ys.typed = await navY();
  await page.selectOption('[data-testid=model]', 'distil-sst');
  await runText('it is not bad at all .');
  await page.waitForFunction(() => new URLSearchParams(location.search).get('model') === 'distil-sst');
  ys.otherModel = await navY();
  for (const [k, y] of Object.entries(ys)) assert.equal(y, y0, `corpus row at y=${y0} (${k}: ${y})`);
  await shot('run-head');
});

test('Back and Forward walk tabs, layers and inputs; sliders add no entry', async () => {
  await open('');
  await waitParam('view', 'overview');
  await runText('the film was good .');
  await page.waitForSelector('[data-testid=head-canvas]');
  await page.selectOption('[data-testid=layer]', '1');
  await waitParam('layer', '1');
  await page.click('[data-testid=tab-model]');
  await page.waitForSelector('[data-testid=grid-canvas]');
  await runText('a story about love and work .');
  await page.waitForFunction(() => new URLSearchParams(location.search).get('text') === 'a story about love and work .');
  const n = await page.evaluate(() => history.length);
  await page.click('[data-testid=tab-head]');
  await page.waitForSelector('[data-testid=head-canvas]');
  await page.locator('[data-testid=threshold]').fill('0.3');
  assert.equal(await page.evaluate(() => history.length), n + 1, 'the tab adds one entry, the slider none');

  await page.goBack();
  await waitParam('view', 'model');
  await page.waitForSelector('[data-testid=grid-canvas]');
  assert.equal(param('text'), 'a story about love and work .');
  await page.goBack();
  await waitParam('text', 'the film was good .');
  await page.waitForFunction(() => document.querySelector('[data-testid=text]').value === 'the film was good .');
  await page.waitForFunction(() => /^7 tokens/.test(document.querySelector('[data-testid=status]').innerText));
  assert.equal(param('view'), 'model');
  await page.goBack();
  await waitParam('view', 'head');
  await page.waitForSelector('[data-testid=head-canvas]');
  assert.equal(await page.inputValue('[data-testid=layer]'), '1', 'the head view is back on layer 1');
  await page.goBack();
  await waitParam('layer', '0');
  assert.equal(await page.inputValue('[data-testid=layer]'), '0');
  await page.goBack();
  await waitParam('view', 'overview');
  await page.waitForSelector('[data-testid=overview-canvas]');
  await page.goForward();
  await page.goForward();
  await waitParam('layer', '1');
  assert.equal(await page.inputValue('[data-testid=layer]'), '1');
  await page.goForward();
  await waitParam('view', 'model');
  await page.waitForSelector('[data-testid=grid-canvas]');
});

test('double-clicking a head isolates it and selects it for the other views', async () => {
  await open(`text=${encodeURIComponent('the film was good .')}&model=bert-sst&view=head`);
  await page.waitForSelector('[data-testid=head-canvas]');
  await page.dblclick('[data-testid=head-2]');
  await waitParam('head', '2');
  assert.equal(param('heads'), '2');
  await page.click('[data-testid=tab-neuron]');
  assert.equal(await page.inputValue('[data-testid=n-head]'), '2');
  await page.click('[data-testid=tab-overview]');
  await page.waitForFunction(() => /H2/.test(document.querySelector('[data-testid=analysis-selection]').innerText));
});

test('an imported sentence is explained: saliency and the head attention', async () => {
  await open('view=instances&dbrun=3&layer=7&head=10');
  await page.waitForSelector('[data-testid=inst-row]');
  await page.click('[data-testid=inst-row][data-idx="0"]');
  await page.waitForSelector('[data-testid=sent-panel] [data-testid=sent-tokens]');
  const toks = await page.locator('[data-testid=sent-tokens] .tok').allInnerTexts();
  assert.deepEqual(toks, ['[CLS]', 'the', 'film', 'was', 'good', '.', '[SEP]']);
  const sal = await page.locator('[data-testid=sent-tokens] .tok').evaluateAll((els) => els.map((e) => e.getAttribute('data-sal')));
  assert.ok(sal.every((s) => s !== '' && Number.isFinite(+s)), 'every token has a saliency');
  const shades = await page.locator('[data-testid=sent-tokens] .tok').evaluateAll((els) => new Set(els.map((e) => getComputedStyle(e).backgroundColor)).size);
  assert.ok(shades > 2, `tokens shaded by saliency (${shades} shades)`);
  await page.waitForSelector('[data-testid=sent-panel] [data-testid=matrix-canvas]');
  const m = await pixels('matrix-canvas');
  assert.ok(m.ink > 2000, `attention heat map drawn (${m.ink} px)`);
  await shot('imported-sentence');
  await page.click('[data-testid=sent-graph]');
  await waitParam('view', 'graph');
  await page.waitForFunction(() => (window.__attnscope?.graph?.pos?.length ?? 0) === 14);
});

// ---- the attention graph ------------------------------------------------------

test('graph: no overlapping node labels, drag moves a node, hover highlights edges, legend', async () => {
  await open('view=graph&dbrun=1&sent=8&layer=0&head=1');
  await page.waitForFunction(() => (window.__attnscope?.graph?.edges ?? 0) > 0 && window.__attnscope.graph.pos.length > 0);
  await page.waitForTimeout(300);
  const g = await hook('graph');
  const T = g.labels.length;
  assert.ok(T >= 60, `a long sentence (${T} tokens)`);
  const measured = await page.evaluate((labels) => {
    const c = document.createElement('canvas').getContext('2d');
    c.font = `bold 11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif`;
    return labels.map((s) => c.measureText(s).width);
  }, g.labels);
  const box = (i) => {
    const [x, y, r] = [g.pos[2 * i], g.pos[2 * i + 1], g.radii[i]];
    const hh = Math.max(r, 7.5);
    return [x - r, y - hh, x + r + 3 + measured[i], y + hh];
  };
  const canvas = await page.locator('[data-testid=graph-canvas]').boundingBox();
  let overlaps = [];
  for (let a = 0; a < T; a++) {
    const A = box(a);
    assert.ok(A[0] >= 0 && A[2] <= canvas.width && A[1] >= 0, `node ${a} inside the canvas`);
    for (let b = a + 1; b < T; b++) {
      const B = box(b);
      if (Math.min(A[2], B[2]) > Math.max(A[0], B[0]) && Math.min(A[3], B[3]) > Math.max(A[1], B[1])) overlaps.push(`${a}/${b}`);
    }
  }
  assert.deepEqual(overlaps, [], 'no two node boxes (circle + label) overlap');
  const legend = await pixels('graph-canvas', [0, canvas.height - 60, 700, 58]);
  assert.ok(legend.ink > 500, `legend drawn under the graph (${legend.ink} px)`);
  await shot('graph-layout');

  // hover: the node with the most outgoing edges gets orange arrows
  const before = await pixels('graph-canvas');
  assert.equal(before.orange, 0, 'no highlighted edge before hovering');
  const outDeg = g.labels.map((_, i) => g.links.filter(([s]) => s === i).length);
  const src = outDeg.indexOf(Math.max(...outDeg));
  assert.ok(outDeg[src] > 0, 'a node with outgoing edges');
  await page.mouse.move(canvas.x + g.pos[2 * src], canvas.y + g.pos[2 * src + 1]);
  await page.waitForFunction((i) => window.__attnscope.graph.focus === i, src);
  const hovered = await pixels('graph-canvas');
  assert.ok(hovered.orange > 30, `hovering colours the node's outgoing edges (${hovered.orange} px)`);
  await shot('graph-hover');

  // drag node src by (+90, +70)
  const [x0, y0] = [g.pos[2 * src], g.pos[2 * src + 1]];
  const to = [Math.min(canvas.width - 200, x0 + 90), Math.min(canvas.height - 150, y0 + 70)];
  await page.mouse.down();
  await page.mouse.move(canvas.x + (x0 + to[0]) / 2, canvas.y + (y0 + to[1]) / 2, { steps: 5 });
  await page.mouse.move(canvas.x + to[0], canvas.y + to[1], { steps: 5 });
  await page.mouse.up();
  await page.waitForTimeout(600);
  const after = await hook('graph');
  const [x1, y1] = [after.pos[2 * src], after.pos[2 * src + 1]];
  assert.ok(Math.hypot(x1 - x0, y1 - y0) > 60, `the node moved (${x0.toFixed(0)},${y0.toFixed(0)} -> ${x1.toFixed(0)},${y1.toFixed(0)})`);
  assert.ok(Math.hypot(x1 - to[0], y1 - to[1]) < 15, `the node is where it was dropped (${to} vs ${x1.toFixed(0)},${y1.toFixed(0)})`);
  await shot('graph-dragged');
  await page.mouse.move(2, 2);
});

// ---- keyboard and screen readers ----------------------------------------------

test('keyboard: head view tokens, model view thumbnails, neuron view keys', async () => {
  await open(`text=${encodeURIComponent('the film was good .')}&model=bert-sst&view=head&layer=0`);
  await page.waitForSelector('[data-testid=head-canvas]');
  await page.focus('[data-testid=text]');
  assert.equal(await tabInto('head-focus'), 'query 0: [CLS]');
  assert.equal(await key('ArrowDown'), 'query 1: the');
  assert.equal(await key('ArrowRight'), 'key 1: the');
  assert.equal(await key('ArrowDown'), 'key 2: film');
  assert.equal(await key('ArrowLeft'), 'query 2: film');
  await page.keyboard.press('Enter');
  await waitParam('token', '2');

  await page.click('[data-testid=tab-model]');
  await page.waitForSelector('[data-testid=grid-canvas]');
  await page.focus('[data-testid=grid-heads]');
  assert.equal(await tabInto('grid-focus'), 'layer 0 head 0');
  assert.equal(await key('ArrowRight'), 'layer 0 head 1');
  assert.equal(await key('ArrowDown'), 'layer 1 head 1');
  assert.equal(await key('End'), 'layer 1 head 3');
  await page.keyboard.press('Enter');
  await page.waitForSelector('[data-testid=matrix-canvas]');
  assert.equal(param('layer'), '1');
  assert.equal(param('head'), '3');

  await page.click('[data-testid=tab-neuron]');
  await page.waitForSelector('[data-testid=neuron-table]');
  await page.focus('[data-testid=n-sort]');
  assert.match(await tabInto('neuron-focus'), /^key 0: \[CLS\], score -?[\d.]+, softmax [\d.]+$/);
  assert.match(await key('ArrowDown'), /^key 1: the, /);
  assert.match(await key('ArrowDown'), /^key 2: film, /);
  await page.keyboard.press('Enter');
  await page.waitForSelector('[data-testid=neuron-table] tr.focus[data-key="2"]');
});

test('keyboard: overview glyphs and graph nodes', async () => {
  await open('view=overview&dbrun=1&sent=0');
  await page.waitForSelector('[data-testid=overview-canvas]');
  await page.focus('[data-testid=ov-sort]');
  assert.match(await tabInto('overview-focus'), /^layer 0 head 0: /);
  await page.waitForFunction(() => /L0H0/.test(document.querySelector('[data-testid=ov-tip]')?.innerText ?? ''));
  assert.match(await key('ArrowDown'), /^layer 1 head 0: /);
  assert.match(await key('ArrowRight'), /^layer 1 head 1: /);
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelector('[data-testid=analysis-selection]').innerText.startsWith('L1H1'));
  assert.equal(param('layer'), '1');
  assert.equal(param('head'), '1');

  await page.click('[data-testid=tab-graph]');
  await page.waitForFunction(() => (window.__attnscope?.graph?.pos?.length ?? 0) > 0);
  await page.focus('[data-testid=graph-threshold]');
  assert.match(await tabInto('graph-focus'), /^token 0: \[CLS\], \d+ links out, \d+ links in/);
  assert.match(await key('ArrowRight'), /^token 1: /);
  await page.waitForFunction(() => window.__attnscope.graph.focus === 1);
  await page.keyboard.press('Enter');
  await page.focus('[data-testid=graph-threshold]');
  await page.waitForTimeout(100);
  assert.equal((await hook('graph')).focus, 1, 'Enter keeps the node highlighted after the focus leaves');
  await shot('keyboard-graph');
});
