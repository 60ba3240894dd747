// readability.test.mjs — browser tests of the explorer's readability (Playwright-core +
// Debian Chromium against the real `attnscope serve`, ATTNSCOPE_BIN):
//   - head colours: WCAG contrast >= 3:1 on the page for every head of a 32-head model, in
//     the head toggles and in the strokes of the exported head view and model view;
//   - the opened head's heat map: thinned and rotated labels at 512 tokens, all labels once
//     zoomed, zoom (buttons, wheel) and pan (drag), a tooltip with the exact weight, a legend;
//   - numbers on hover: a head-view link, a per-head bar, a model-view thumbnail cell;
//   - the head view's "all links" mode at 512 tokens x 12 heads: hover, layer and mode
//     switch timings (printed and written to artifacts/readability-bench.json);
//   - the overview legend, head labels free of glyphs, model colours in the comparison,
//     id2label class names;
//   - masked-token predictions separated, the over-length message, the neuron view's
//     default query and its fit at 600 px, dependency labels that do not overlap, and no
//     request for the analysis database when the server has none.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer as startServerAt } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const DEMO = join(ROOT, 'models', 'demo-bert');
const MLM = join(ROOT, 'models', 'attnscope-mlm');

let plain, withDb, browser, page, tmp;
const bench = {};

const startServer = (args) => startServerAt(BIN, args);

/** A CoNLL-U sentence of `n` two-letter words, each attached to the next one with a long
 *  relation name: adjacent arcs of the same height, whose labels overlap where they are drawn
 *  at the arcs' apexes. */
function denseConllu(n) {
  const words = ['it', 'is', 'a', 'so', 'no', 'at', 'by', 'to', 'on', 'as', 'an', 'be'];
  let s = `# text = ${Array.from({ length: n }, (_, i) => words[i % words.length]).join(' ')}\n`;
  for (let i = 1; i <= n; i++) {
    const rel = i === n ? 'root' : ['compound:prt', 'nmod:poss', 'obl:tmod', 'acl:relcl'][i % 4];
    s += `${i}\t${words[(i - 1) % words.length]}\t_\tX\t_\t_\t${i === n ? 0 : i + 1}\t${rel}\t_\t_\n`;
  }
  return s + '\n';
}

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-readability-'));
  const mk = (dir, lhd, qk) =>
    execFileSync(process.execPath, [join(HERE, 'make_long_model.mjs'), join(tmp, dir)], { env: { ...process.env, ATTNSCOPE_LONG_LHD: lhd, ATTNSCOPE_LONG_QK: qk } });
  mk('long12', '2,12,96', '0.05'); // diffuse: all 512 x 512 weights of each head are links
  mk('wide32', '1,32,64', '0.6');
  execFileSync('bash', [join(ROOT, 'tests', 'ref', 'make_analysis_db.sh'), BIN, join(tmp, 'db')], { stdio: 'inherit' });
  const db = join(tmp, 'db', 'analysis.sqlite');
  writeFileSync(join(tmp, 'dense.conllu'), denseConllu(14));
  execFileSync(BIN, ['analyze', '--model', join(tmp, 'db', 'bert-sst'), '--conllu', join(tmp, 'dense.conllu'), '--db', db, '--min-rel', '1', '--quiet']);
  plain = await startServer(['--model', DEMO, '--model', MLM, '--model', join(tmp, 'long12'), '--model', join(tmp, 'wide32')]);
  withDb = await startServer(['--model', join(tmp, 'db', 'bert-sst'), '--model', join(tmp, 'db', 'distil-sst'), '--db', db]);
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { acceptDownloads: true }));
});

after(async () => {
  writeFileSync(join(ART, 'readability-bench.json'), JSON.stringify(bench, null, 2) + '\n');
  await browser?.close();
  for (const s of [plain, withDb]) {
    if (!s) continue;
    const done = new Promise((r) => s.p.on('exit', (code) => r(code)));
    s.p.kill('SIGTERM');
    assert.equal(await done, 0, 'server exits 0 on SIGTERM');
  }
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// ---- helpers ----------------------------------------------------------------

const hook = (k) => page.evaluate((k) => window.__attnscope?.[k] ?? null, k);

async function openUrl(base, query) {
  await page.goto(`${base}/?${query}`);
}

async function runText(model, a) {
  await page.selectOption('[data-testid=model]', model);
  await page.fill('[data-testid=text]', a);
  await page.fill('[data-testid=text-b]', '');
  await page.click('[data-testid=run]');
}

async function waitStatus(re) {
  await page.waitForFunction((s) => new RegExp(s).test(document.querySelector('[data-testid=status]')?.textContent ?? ''), re.source, { timeout: 60_000 });
}

async function download(testid) {
  const [d] = await Promise.all([page.waitForEvent('download'), page.click(`[data-testid=${testid}]`)]);
  return readFileSync(await d.path()).toString('utf8');
}

/** The SVG export button of the view on screen. */
const svgOf = () => download('export-svg');

/** WCAG 2.1 contrast of two '#rrggbb' / 'rgb(r, g, b)' colours. */
function contrast(a, b) {
  const rgb = (s) => {
    const m = /rgba?\((\d+),\s*(\d+),\s*(\d+)/.exec(s);
    if (m) return [+m[1], +m[2], +m[3]];
    const h = /^#([0-9a-f]{6})$/i.exec(s);
    assert.ok(h, `colour ${s}`);
    const v = parseInt(h[1], 16);
    return [(v >> 16) & 255, (v >> 8) & 255, v & 255];
  };
  const lum = (c) =>
    c.map((v) => v / 255).map((v) => (v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4)).reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const [x, y] = [lum(rgb(a)), lum(rgb(b))];
  return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05);
}

/** Pixels of a canvas region: ink (not near white), and those of a saturated hue in [h0, h1). */
async function pixels(testid, x, y, w, h, hue = null) {
  return page.evaluate(
    ({ testid, x, y, w, h, hue }) => {
      const c = document.querySelector(`[data-testid="${testid}"]`);
      const d = c.getContext('2d').getImageData(x, y, w, h).data;
      let ink = 0, sat = 0, inHue = 0;
      for (let i = 0; i < d.length; i += 4) {
        const [r, g, b] = [d[i], d[i + 1], d[i + 2]];
        if (r + g + b > 735) continue;
        ink++;
        const mx = Math.max(r, g, b), mn = Math.min(r, g, b);
        if (mx - mn < 40) continue;
        sat++;
        let hh = mx === r ? ((g - b) / (mx - mn)) * 60 : mx === g ? (2 + (b - r) / (mx - mn)) * 60 : (4 + (r - g) / (mx - mn)) * 60;
        hh = (hh + 360) % 360;
        if (hue && hue.some(([a, z]) => hh >= a && hh < z)) inHue++;
      }
      return { ink, sat, inHue };
    },
    { testid, x, y, w, h, hue },
  );
}

async function canvasBox(testid) {
  return page.locator(`[data-testid=${testid}]`).boundingBox();
}

const words = 'the king is dead long live the king and all his men'.split(' ');
const LONG = Array.from({ length: 510 }, (_, i) => words[i % words.length]).join(' ');

// ---- tests ------------------------------------------------------------------

test('head colours keep 3:1 contrast on the page for all 32 heads', async () => {
  await openUrl(plain.url, '');
  await page.waitForSelector('[data-testid=model] option', { state: 'attached' });
  await runText('wide32', 'the king is dead long live the king');
  await waitStatus(/^\d+ tokens/);
  await page.waitForSelector('[data-testid=head-31]');
  const pageBg = await page.evaluate(() => {
    const c = getComputedStyle(document.body).backgroundColor;
    return c === 'rgba(0, 0, 0, 0)' ? 'rgb(255, 255, 255)' : c;
  });
  const toggles = await page.$$eval('[data-testid^=head-]', (bs) =>
    bs.filter((b) => /^head-\d+$/.test(b.dataset.testid)).map((b) => ({ h: +b.dataset.testid.slice(5), bg: getComputedStyle(b).backgroundColor, fg: getComputedStyle(b).color })),
  );
  assert.equal(toggles.length, 32);
  for (const t of toggles) {
    assert.ok(contrast(t.bg, pageBg) >= 3, `head ${t.h} toggle ${t.bg}: contrast ${contrast(t.bg, pageBg).toFixed(2)} on the page`);
    assert.ok(contrast(t.bg, t.fg) >= 3, `head ${t.h} label ${t.fg} on ${t.bg}: ${contrast(t.bg, t.fg).toFixed(2)}`);
  }
  assert.equal(new Set(toggles.map((t) => t.bg)).size, 32, '32 distinct head colours');
  // the colours actually drawn: strokes of the exported head view and model view (lines mode)
  await page.waitForFunction(() => window.__attnscope?.headDraw?.links > 0);
  const strokes = (svg) => new Set([...svg.matchAll(/<path [^>]*stroke="(#[0-9a-f]{6})"/g)].map((m) => m[1]));
  const head = strokes(await svgOf());
  assert.ok(head.size >= 32, `the head view draws 32 head colours (${head.size})`);
  await page.click('[data-testid=tab-model]');
  await page.selectOption('[data-testid=grid-mode]', 'lines');
  await page.waitForFunction(() => /loaded and drawn/.test(document.querySelector('[data-testid=grid-info]').textContent));
  const grid = strokes(await svgOf());
  assert.ok(grid.size >= 32, `the model view draws 32 head colours (${grid.size})`);
  for (const c of new Set([...head, ...grid])) assert.ok(contrast(c, pageBg) >= 3, `drawn head colour ${c}: ${contrast(c, pageBg).toFixed(2)}`);
  await page.screenshot({ path: join(ART, 'readability-32-heads.png') });
});

test("the opened head's heat map: labels at every size, tooltip, legend, zoom and pan", async () => {
  await openUrl(plain.url, `model=long12&text=${encodeURIComponent(LONG)}&view=model`);
  await waitStatus(/512 tokens/);
  await page.waitForFunction(() => /loaded and drawn/.test(document.querySelector('[data-testid=grid-info]')?.textContent ?? ''));
  const H = 12, cell = Math.max(48, Math.min(110, Math.floor(1100 / H) - 6));
  await page.click('[data-testid=grid-canvas]', { position: { x: 56 + 3 * (cell + 6) + cell / 2, y: 22 + 1 * (cell + 6) + cell / 2 } });
  await page.waitForFunction(() => window.__attnscope?.modelView?.matrix?.head === 3 && window.__attnscope?.heatmap?.win?.n === 512);
  let hm = await hook('heatmap');
  const size = 720, left = 116, top = 116;
  assert.ok(hm.rows.length > 20 && hm.rows.length < 512, `labels thinned at 512 tokens (${hm.rows.length} rows labelled)`);
  assert.ok((hm.rows[1] - hm.rows[0]) * hm.cell >= 12, 'thinned labels are at least 12 px apart');
  assert.deepEqual(hm.rows, hm.cols);
  // rotated column labels: above the first labelled column, a 6 px wide strip holds a label
  // taller than a line of text ([CLS] written upwards)
  const cx = left + (hm.cols[0] - hm.win.c0 + 0.5) * hm.cell;
  let inkRows = 0;
  for (let yy = 40; yy < top - 2; yy++) inkRows += (await pixels('matrix-canvas', Math.round(cx) - 3, yy, 6, 1)).ink > 0 ? 1 : 0;
  assert.ok(inkRows >= 18, `column labels rotated: ${inkRows} rows of ink above column ${hm.cols[0]}`);
  const rowInk = await pixels('matrix-canvas', 0, top, left - 4, size);
  assert.ok(rowInk.ink > 500, `row labels drawn (${rowInk.ink} px)`);
  // legend: a colour bar right of the matrix, dark (1) at the top, light (0) at the bottom
  const lgTop = await pixels('matrix-canvas', left + size + 18, top + 2, 10, 10);
  const lgBot = await pixels('matrix-canvas', left + size + 18, top + 186, 10, 10);
  assert.ok(lgTop.sat > 50 && lgBot.ink < lgTop.ink + 1 && lgBot.sat < lgTop.sat, `legend bar: ${JSON.stringify({ lgTop, lgBot })}`);
  // tooltip: the exact weight under the pointer, with its query and key
  await page.locator('[data-testid=matrix-canvas]').scrollIntoViewIfNeeded();
  let box = await canvasBox('matrix-canvas');
  const q = 100, k = 37, c = size / 512;
  await page.mouse.move(box.x + left + (k + 0.5) * c, box.y + top + (q + 0.5) * c);
  await page.waitForSelector('[data-testid=heat-tip]');
  const tip = await page.textContent('[data-testid=heat-tip]');
  const w = +(await page.getAttribute('[data-testid=heat-tip] [data-w]', 'data-w'));
  const named = /\((\d+)\)[^(]*\((\d+)\)/.exec(tip);
  assert.ok(named, tip);
  const [tq, tk] = [+named[1], +named[2]];
  assert.ok(Math.abs(tq - q) <= 1 && Math.abs(tk - k) <= 1, `the tooltip names the cell under the pointer (${tq}, ${tk})`);
  const vals = await page.evaluate(([q, k]) => window.__attnscope.modelView.matrix.values[q * 512 + k], [tq, tk]);
  assert.equal(w, vals, 'tooltip weight is the matrix value');
  assert.ok(tip.includes(w.toFixed(4)), tip);
  // zoom with the buttons until every label shows
  for (let i = 0; i < 4; i++) await page.click('[data-testid=heat-zoom-in]');
  hm = await hook('heatmap');
  assert.equal(hm.win.n, 32, 'four zoom steps show 32 x 32 tokens');
  assert.equal(hm.rows.length, 32, 'zoomed in, every row is labelled');
  assert.equal(hm.cols.length, 32, 'zoomed in, every column is labelled');
  assert.ok(hm.font >= 9);
  await page.screenshot({ path: join(ART, 'readability-heatmap-zoomed.png'), fullPage: true });
  // pan by dragging
  const before_ = hm.win;
  await page.locator('[data-testid=matrix-canvas]').scrollIntoViewIfNeeded();
  box = await canvasBox('matrix-canvas');
  await page.mouse.move(box.x + left + 400, box.y + top + 400);
  await page.mouse.down();
  await page.mouse.move(box.x + left + 200, box.y + top + 250, { steps: 5 });
  await page.mouse.up();
  hm = await hook('heatmap');
  assert.ok(hm.win.c0 > before_.c0 && hm.win.r0 > before_.r0, `dragging pans (${JSON.stringify(before_)} -> ${JSON.stringify(hm.win)})`);
  // zoom out with the button, zoom in with the wheel
  await page.click('[data-testid=heat-zoom-reset]');
  assert.equal((await hook('heatmap')).win.n, 512);
  await page.mouse.move(box.x + left + size / 2, box.y + top + size / 2);
  await page.mouse.wheel(0, -200);
  await page.waitForFunction(() => window.__attnscope.heatmap.win.n < 512);
  assert.ok((await hook('heatmap')).win.n < 512, 'the wheel zooms in');
  await page.screenshot({ path: join(ART, 'readability-heatmap.png'), fullPage: true });
});

test('hovering shows the weight: a head-view link, a per-head bar, a model-view cell', async () => {
  const text = 'the quick brown fox jumps over the lazy dog';
  await openUrl(plain.url, `model=demo-bert&text=${encodeURIComponent(text)}&view=head&layer=1`);
  await page.waitForFunction(() => window.__attnscope?.headDraw?.links > 0 && window.__attnscope.headDraw.layer === 1);
  const run = await (await fetch(`${plain.url}/api/v1/run`, { method: 'POST', body: JSON.stringify({ model: 'demo-bert', text }) })).json();
  const T = run.sizes.tokens, H = run.sizes.heads;
  const att = await page.evaluate(async (id) => {
    const b = new Uint8Array(await (await fetch(`/api/v1/runs/${id}/attention?layers=1&heads=0-3&dtype=f32`)).arrayBuffer());
    const dv = new DataView(b.buffer);
    const n = dv.getUint32(4, true);
    const hdr = JSON.parse(new TextDecoder().decode(b.subarray(8, 8 + n)));
    const t = hdr.tensors.find((x) => x.name === 'attention');
    return Array.from(new Float32Array(b.slice(8 + n + t.offset).buffer, 0, t.shape.reduce((x, y) => x * y, 1)));
  }, run.id);
  // the strongest link of head 2 from query 3: hover the middle of its line
  const hl = await page.evaluate(() => window.__attnscope.headLinks.map((h) => ({ head: h.head, i: Array.from(h.i), j: Array.from(h.j), w: Array.from(h.w) })));
  const h2 = hl.find((h) => h.head === 2);
  let best = -1;
  for (let m = 0; m < h2.i.length; m++) if (h2.i[m] === 3 && (best < 0 || h2.w[m] > h2.w[best])) best = m;
  const leftX = H * 14 + 8 + 120 + 8, x1 = leftX + 6, x2 = x1 + 260, rowH = 20, top = 28;
  const cy = (i) => top + i * rowH + rowH / 2;
  const t = 0.5;
  const box = await canvasBox('head-canvas');
  await page.mouse.move(box.x + x1 + t * (x2 - x1), box.y + cy(h2.i[best]) + t * (cy(h2.j[best]) - cy(h2.i[best])));
  await page.waitForSelector('[data-testid=head-tip]');
  const tip = await page.textContent('[data-testid=head-tip]');
  const m = /head (\d+).*\((\d+)\).*\((\d+)\)\s*([\d.]+)/s.exec(tip);
  assert.ok(m, tip);
  const [hh, qq, kk, ww] = [+m[1], +m[2], +m[3], +m[4]];
  assert.ok(Math.abs(ww - att[hh * T * T + qq * T + kk]) < 1e-3, `link tooltip ${tip} = API weight ${att[hh * T * T + qq * T + kk]}`);
  const yLink = cy(qq) + t * (cy(kk) - cy(qq));
  assert.ok(Math.abs(yLink - cy(h2.i[best]) - t * (cy(h2.j[best]) - cy(h2.i[best]))) <= 4, 'the named link passes under the pointer');
  // pin query 3, then hover head 2's bar next to key 5: that head's weight from 3 to 5
  await page.mouse.click(box.x + leftX - 20, box.y + cy(3));
  const barsX = x2 + 6 + 120 + 4;
  await page.mouse.move(box.x + barsX + 2 * 14 + 6, box.y + cy(5) + 4);
  await page.waitForFunction(() => /head 2/.test(document.querySelector('[data-testid=head-tip]')?.textContent ?? ''));
  const bw = +(await page.getAttribute('[data-testid=head-tip] [data-w]', 'data-w'));
  assert.ok(Math.abs(bw - att[2 * T * T + 3 * T + 5]) < 1e-3, `bar tooltip ${bw} = API weight ${att[2 * T * T + 3 * T + 5]}`);
  // head numbers above the bars
  const lab = await pixels('head-canvas', barsX, 16, H * 14, 12);
  assert.ok(lab.ink > 20, 'head numbers drawn above the bars');
  await page.screenshot({ path: join(ART, 'readability-head-tip.png') });
  // model view: a thumbnail cell (T <= 64: one token pair per cell)
  await page.click('[data-testid=tab-model]');
  await page.selectOption('[data-testid=grid-mode]', 'matrix');
  await page.waitForFunction(() => /loaded and drawn/.test(document.querySelector('[data-testid=grid-info]').textContent));
  const cell = Math.max(48, Math.min(110, Math.floor(1100 / H) - 6));
  const gb = await canvasBox('grid-canvas');
  const [gq, gk] = [4, 6];
  await page.mouse.move(gb.x + 56 + 2 * (cell + 6) + (gk + 0.5) * (cell / T), gb.y + 22 + 1 * (cell + 6) + (gq + 0.5) * (cell / T));
  await page.waitForSelector('[data-testid=grid-tip]');
  const gt = await page.textContent('[data-testid=grid-tip]');
  const gw = +(await page.getAttribute('[data-testid=grid-tip] [data-w]', 'data-w'));
  assert.match(gt, /L1 H2/);
  assert.match(gt, new RegExp(`\\(${gq}\\).*\\(${gk}\\)`, 's'));
  assert.ok(Math.abs(gw - att[2 * T * T + gq * T + gk]) < 2e-3, `cell tooltip ${gw} = API weight ${att[2 * T * T + gq * T + gk]} (f16)`);
  await page.selectOption('[data-testid=grid-mode]', 'lines');
  assert.match(await page.textContent('[data-testid=lines-note]'), /strongest link/);
});

test('"all links" at 512 tokens x 12 heads: hover, layer and mode switch stay fast', async () => {
  await openUrl(plain.url, `model=long12&text=${encodeURIComponent(LONG)}&view=head&layer=0`);
  await waitStatus(/512 tokens/);
  await page.waitForFunction(() => window.__attnscope?.headDraw?.mode === 'topk');
  let t0 = Date.now();
  await page.selectOption('[data-testid=link-mode]', 'all');
  await page.waitForFunction(() => window.__attnscope.headDraw.mode === 'all');
  const modeMs = Date.now() - t0;
  const d = await hook('headDraw');
  assert.ok(d.links > 12 * 512 * 500, `all links drawn (${d.links})`);
  const hover = await page.evaluate(async () => {
    const c = document.querySelector('[data-testid=head-canvas]');
    const r = c.getBoundingClientRect();
    const x = 12 * 14 + 8 + 120 + 8 - 20;
    const out = [];
    for (let i = 0; i < 12; i++) {
      const side = i % 2 ? x + 312 : x; // alternate query and key columns (headLayout: rightX = leftX + 272)
      const t = performance.now();
      c.dispatchEvent(new MouseEvent('mousemove', { clientX: r.left + side, clientY: r.top + 28 + (3 + i * 3) * 14 + 7, bubbles: true }));
      await new Promise((res) => requestAnimationFrame(() => requestAnimationFrame(res)));
      out.push(performance.now() - t);
    }
    return out;
  });
  const hd = await hook('headDraw');
  assert.ok(hd.hover, 'a token is hovered');
  await page.screenshot({ path: join(ART, 'readability-all-links-512.png') });
  t0 = Date.now();
  await page.selectOption('[data-testid=layer]', '1');
  await page.waitForFunction(() => window.__attnscope.headDraw.layer === 1);
  const layerMs = Date.now() - t0;
  t0 = Date.now();
  await page.selectOption('[data-testid=layer]', '0');
  await page.waitForFunction(() => window.__attnscope.headDraw.layer === 0);
  const layerCachedMs = Date.now() - t0;
  const sorted = [...hover].sort((a, b) => a - b);
  Object.assign(bench, {
    all_links_512x12: {
      links: d.links,
      hover_ms: hover.map((v) => +v.toFixed(1)), // query, key, query, key, ... columns in turn
      hover_ms_median: +sorted[sorted.length >> 1].toFixed(1),
      hover_ms_max: +sorted[sorted.length - 1].toFixed(1),
      mode_switch_ms: modeMs,
      layer_switch_ms: layerMs,
      layer_switch_cached_ms: layerCachedMs,
    },
  });
  console.log('all links, 512 tokens x 12 heads:', JSON.stringify(bench.all_links_512x12));
  // generous bounds (a loaded 2-core CI machine rasterises in software): the typical hover
  // well under a second, and no single one near the old 5.9 s redraws
  assert.ok(sorted[sorted.length >> 1] < 1000, `hover -> frame median ${sorted[sorted.length >> 1]} ms`);
  assert.ok(sorted[sorted.length - 1] < 5000, `hover -> frame max ${sorted[sorted.length - 1]} ms`);
  assert.ok(layerMs < 10_000 && modeMs < 10_000, `layer switch ${layerMs} ms, mode switch ${modeMs} ms`);
});

test('overview: legend, labels free of glyphs; comparison colours; id2label class names', async () => {
  await openUrl(withDb.url, 'view=overview&dbrun=1');
  await page.waitForSelector('[data-testid=overview-canvas]');
  await page.waitForFunction(() => {
    const c = document.querySelector('[data-testid=overview-canvas]');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 700) n++;
    return n > 3000;
  });
  // cells of 64 px (4 heads): each head label sits in the bottom 11 px strip, with no glyph colour in it
  const cell = 64;
  for (let l = 0; l < 2; l++)
    for (let h = 0; h < 4; h++) {
      const strip = await pixels('overview-canvas', 44 + h * cell + 8, 26 + l * cell + cell - 10, cell - 16, 9);
      assert.ok(strip.ink > 5, `head label L${l}H${h} drawn`);
      assert.equal(strip.sat, 0, `no glyph colour over the label of L${l}H${h}`);
    }
  const svg = await svgOf();
  for (const s of ['semantic', 'syntactic', 'darker', 'radius:', 'importance', 'weak', 'strong']) assert.ok(svg.includes(`>${s}`), `legend says "${s}"`);
  // comparison: the models' colours are neither the glyphs' red nor their blue
  await page.click('[data-testid=tab-compare]');
  await page.waitForSelector('[data-testid=cmp-hist]');
  await page.waitForTimeout(300);
  const hb = await canvasBox('cmp-hist');
  const hist = await pixels('cmp-hist', 0, 0, Math.floor(hb.width), Math.floor(hb.height), [[0, 20], [340, 360], [195, 250]]);
  assert.ok(hist.sat > 100, `histograms drawn in colour (${hist.sat})`);
  assert.equal(hist.inHue, 0, 'no histogram pixel in the glyph hues (red semantic, blue syntactic)');
  await page.screenshot({ path: join(ART, 'readability-compare.png'), fullPage: true });
  // class names from config.json's id2label
  const info = await (await fetch(`${withDb.url}/api/v1/models`)).json();
  assert.equal(info.db, true);
  const names = info.models.find((m) => m.name === 'bert-sst').labels;
  assert.deepEqual(names, ['negative', 'neutral', 'positive']);
  await page.click('[data-testid=tab-instances]');
  await page.waitForSelector('[data-testid=inst-total]');
  await page.selectOption('[data-testid=inst-corpus]', 'sst2');
  await page.waitForFunction(() => /\b9 sentences/.test(document.querySelector('[data-testid=inst-total]').textContent));
  const cells = await page.$$eval('table tbody tr', (trs) => trs.map((tr) => [tr.children[3].textContent, tr.children[4].textContent]));
  assert.ok(cells.length > 0);
  for (const [gold, pred] of cells) {
    assert.ok(names.includes(gold), `gold label "${gold}" is a class name`);
    assert.ok(names.includes(pred), `prediction "${pred}" is a class name`);
  }
  await page.click('table tbody tr');
  await page.click('[data-testid=tab-graph]');
  await page.waitForSelector('[data-testid=graph-class] option', { state: 'attached' });
  const opts = await page.$$eval('[data-testid=graph-class] option', (os) => os.map((o) => o.textContent));
  for (const o of opts) assert.ok(names.includes(o), `graph class option "${o}"`);
});

test('dependency labels of a dense sentence do not overlap', async () => {
  const runs = await (await fetch(`${withDb.url}/api/v1/db/runs`)).json();
  const dense = runs.runs.filter((r) => r.status === 'done').at(-1);
  const sents = await (await fetch(`${withDb.url}/api/v1/db/runs/${dense.id}/sentences?corpus=conllu`)).json();
  const s = sents.sentences[0];
  await openUrl(withDb.url, `view=dependency&dbrun=${dense.id}&sent=${s.idx}`);
  await page.waitForFunction(() => (window.__attnscope?.depLabels?.length ?? 0) >= 13);
  const labels = await hook('depLabels');
  const widths = await page.evaluate((ts) => {
    const c = document.createElement('canvas').getContext('2d');
    c.font = `normal 10px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif`;
    return ts.map((t) => c.measureText(t).width);
  }, labels.map((l) => l.text));
  labels.forEach((l, k) => assert.ok(widths[k] <= l.w, `label "${l.text}" box ${l.w} px holds its ${widths[k].toFixed(1)} px text`));
  for (let a = 0; a < labels.length; a++)
    for (let b = a + 1; b < labels.length; b++) {
      const [p, q] = [labels[a], labels[b]];
      const overlap = Math.abs(p.x - q.x) * 2 < p.w + q.w && Math.abs(p.y - q.y) * 2 < p.h + q.h;
      assert.ok(!overlap, `labels "${p.text}" (word ${p.word}) and "${q.text}" (word ${q.word}) do not overlap`);
    }
  await page.screenshot({ path: join(ART, 'readability-dependency.png'), fullPage: true });
});

test('small things: mask predictions, over-length message, neuron query and width, no db request', async () => {
  // no --db: nothing under /api/v1/db is requested, and the console stays clean
  const bad = [];
  const onResp = (r) => {
    // (the page names /favicon.svg; a browser's own /favicon.ico probe is not the page's request)
    if ((r.status() >= 400 && !r.url().endsWith('/favicon.ico')) || r.url().includes('/api/v1/db')) bad.push(`${r.status()} ${r.url()}`);
  };
  const onConsole = (m) => {
    if (m.type() === 'error') bad.push(`console: ${m.text()}`);
  };
  page.on('response', onResp);
  page.on('console', onConsole);
  await openUrl(plain.url, '');
  await page.waitForSelector('[data-testid=model] option', { state: 'attached' });
  await page.waitForTimeout(500);
  page.off('response', onResp);
  page.off('console', onConsole);
  assert.deepEqual(bad, [], 'no failed request and no console error without a database');
  assert.equal((await (await fetch(`${plain.url}/api/v1/models`)).json()).db, false);
  // masked-token predictions: each candidate set apart
  await runText('attnscope-mlm', 'the movie was [MASK] .');
  await waitStatus(/^\d+ tokens/);
  await page.click('[data-testid=mlm-run]');
  await page.waitForSelector('[data-testid=mlm-cand]');
  const pred = await page.textContent('[data-testid=mlm-pred]');
  assert.doesNotMatch(pred, /%[^\s,]/, `predictions are separated: ${pred}`);
  assert.ok((await page.$$('[data-testid=mlm-cand]')).length >= 2);
  // over-length input: the message names the fields this page has
  await runText('demo-bert', LONG);
  await page.waitForFunction(() => document.querySelector('[data-testid=status]').classList.contains('error'));
  const msg = await page.textContent('[data-testid=status]');
  assert.match(msg, /Sentence A/, msg);
  assert.doesNotMatch(msg, /truncation/, msg);
  // neuron view: the first non-special token is the default query
  await runText('demo-bert', 'the quick brown fox');
  await waitStatus(/^\d+ tokens/);
  await page.click('[data-testid=tab-neuron]');
  await page.waitForSelector('[data-testid=neuron-canvas]');
  const sel = await page.$eval('[data-testid=n-token]', (s) => ({ value: s.value, text: s.selectedOptions[0]?.textContent ?? '' }));
  assert.equal(sel.value, '1', 'query defaults to token 1, the first after [CLS]');
  assert.match(sel.text, /the/);
  // at 600 px the page does not scroll sideways: the figure scrolls in its own box
  await page.setViewportSize({ width: 600, height: 900 });
  await page.waitForTimeout(200);
  const fit = await page.evaluate(() => ({
    page: document.documentElement.scrollWidth,
    fig: document.querySelector('[data-testid=neuron-fig]').scrollWidth,
    figBox: document.querySelector('[data-testid=neuron-fig]').clientWidth,
  }));
  await page.screenshot({ path: join(ART, 'readability-neuron-600.png'), fullPage: true });
  await page.setViewportSize({ width: 1400, height: 1000 });
  assert.ok(fit.page <= 600, `page width ${fit.page} px at a 600 px window`);
  assert.ok(fit.fig > fit.figBox, `the figure scrolls inside its box (${fit.fig} > ${fit.figBox})`);
});
