// dodrio.test.mjs — browser tests of the Dodrio views: Playwright-core drives
// Debian's Chromium against the real `attnscope serve --db` (ATTNSCOPE_BIN) on an
// ephemeral loopback port. The database is real: tests/ref/make_analysis_db.sh analyses
// two tiny SST-2 classifiers (runs 1, 2) with `attnscope analyze`, then the real BERT-base
// attention of ../shared/data/bert-base-sst2-attention (or, when absent, a synthetic
// 12 x 12 folder) is added with `attnscope import` (run 3).
// Checks: each view renders (canvas pixels); the overview tooltip shows the API's numbers;
// coloured by sink ratio or head importance, a glyph's pixel is its SQLite value's colour,
// its tooltip the SQLite row, sorted by ALTI share each layer starts with its largest;
// the comparison's attribution means and differences equal SQLite's;
// clicking a head updates the selection of the dependency, graph, pattern and neuron
// views; selecting a sentence runs it in the explorer; the dependency view's correct /
// wrong marks summed over the treebank sentences equal the database's relation counts
// (sqlite3 CLI); graph layouts and threshold; the comparison shows both models; SVG/PNG
// export of every new view; the instance table's CSV export; the pattern view's link
// marks the head's dominant dims in the neuron view (URL key dims, checked against q and
// k from the API); an imported run served with --import-dir gets predicted parents
// (marks equal to the database's counts) and graph edges. Measures the overview of 144 heads and the graph of a
// 64-token sentence (printed and written to tests/browser/artifacts/dodrio-bench.json;
// the target is < 1 s, reported, not asserted, as bench/RESULTS.md asks).
// Screenshots go to tests/browser/artifacts/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer as startServerAt, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const SHARED = join(ROOT, '..', 'shared', 'data', 'bert-base-sst2-attention');

let server, base, browser, page, tmp, db, bigSource, importDir;
const bench = {};

const startServer = (args) => startServerAt(BIN, args);

const sql = (q) => execFileSync('sqlite3', [db, q], { encoding: 'utf8' }).trim();

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-dodrio-'));
  execFileSync('bash', [join(ROOT, 'tests', 'ref', 'make_analysis_db.sh'), BIN, tmp], { stdio: 'inherit' });
  db = join(tmp, 'analysis.sqlite');
  let dir = SHARED;
  bigSource = 'BERT-base (../shared/data/bert-base-sst2-attention)';
  if (!existsSync(SHARED)) {
    dir = join(tmp, 'synthetic');
    execFileSync(process.execPath, [join(HERE, 'make_synthetic_import.mjs'), dir]);
    bigSource = 'synthetic 12x12 import';
  }
  execFileSync(BIN, ['import', '--dir', dir, '--db', db, '--min-rel', '20', '--quiet']);
  importDir = dir;
  const s = await startServer(['--model', join(tmp, 'bert-sst'), '--model', join(tmp, 'distil-sst'), '--db', db, '--import-dir', dir]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { acceptDownloads: true }));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (Object.keys(bench).length) writeFileSync(join(ART, 'dodrio-bench.json'), JSON.stringify(bench, null, 2) + '\n');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// ---- helpers ----------------------------------------------------------------

async function pixels(testid, region) {
  return page.evaluate(
    ({ testid, region }) => {
      const c = document.querySelector(`[data-testid="${testid}"]`);
      if (!c) return { ink: 0, green: 0, red: 0, bluish: 0, reddish: 0, hash: 0 };
      const [x, y, w, h] = region ?? [0, 0, c.width, c.height];
      const d = c.getContext('2d').getImageData(x, y, w, h).data;
      let ink = 0, green = 0, red = 0, bluish = 0, reddish = 0, hash = 0;
      for (let i = 0; i < d.length; i += 4) {
        const [r, g, b] = [d[i], d[i + 1], d[i + 2]];
        hash = (hash * 31 + r + 7 * g + 13 * b) >>> 0;
        if (r + g + b > 735) continue;
        ink++;
        if (g > r + 40 && g > b + 20) green++;
        if (r > g + 80 && r > b + 80) red++;
        if (b > r + 20) bluish++;
        if (r > b + 20) reddish++;
      }
      return { ink, green, red, bluish, reddish, hash };
    },
    { testid, region },
  );
}

async function waitPixels(testid, pred, region) {
  let p;
  for (let i = 0; i < 150; i++) {
    p = await pixels(testid, region);
    if (pred(p)) break;
    await page.waitForTimeout(100);
  }
  return p;
}

const shot = (name) => page.screenshot({ path: join(ART, `${name}.png`), fullPage: true });
const text = (testid) => page.locator(`[data-testid=${testid}]`).first().innerText();
const waitText = (t) => page.waitForFunction((s) => document.body.innerText.includes(s), t, { timeout: 30_000 });

async function open(query) {
  await page.goto(`${base}/?${query}`);
  await page.waitForSelector('[data-testid=analysis-nav]', { timeout: 30_000 });
}

async function download(testid) {
  const [d] = await Promise.all([page.waitForEvent('download'), page.click(`[data-testid=${testid}]`)]);
  return { name: d.suggestedFilename(), bytes: readFileSync(await d.path()) };
}

async function checkExport(name, svgMust) {
  const svg = await download('export-svg');
  assert.equal(svg.name, `${name}.svg`);
  const s = svg.bytes.toString('utf8');
  assert.ok(s.startsWith('<?xml') && s.includes('<svg') && s.trimEnd().endsWith('</svg>'), `${name}.svg is SVG`);
  for (const m of svgMust) assert.ok(s.includes(m), `${name}.svg contains ${m}`);
  const png = await download('export-png');
  assert.equal(png.name, `${name}.png`);
  assert.deepEqual([...png.bytes.subarray(0, 8)], [137, 80, 78, 71, 13, 10, 26, 10], `${name}.png is PNG`);
  assert.ok(png.bytes.length > 2000);
}

/** Centre of glyph (layer, head) in the overview (sort by index; cell 64 px for <= 14 heads). */
const glyph = (l, h, cell = 64) => ({ x: 44 + h * cell + cell / 2, y: 26 + l * cell + cell / 2 });

// ---- tests ------------------------------------------------------------------

test('head overview renders, tooltip shows the API numbers, sort and filter change it', async () => {
  await open('view=overview&dbrun=1');
  const p = await waitPixels('overview-canvas', (q) => q.ink > 3000);
  assert.ok(p.ink > 3000, `overview has ink (${p.ink})`);
  assert.ok(p.reddish + p.bluish > 500, 'glyphs are coloured');
  const api = await page.evaluate(async () => (await fetch('/api/v1/db/runs/1/heads')).json());
  const g = glyph(1, 2);
  await page.mouse.move(...Object.values(await canvasPoint('overview-canvas', g)));
  await page.waitForSelector('[data-testid=ov-tip]');
  const tip = await text('ov-tip');
  const i = 1 * 4 + 2;
  assert.ok(tip.includes('L1H2'), tip);
  assert.ok(tip.includes(`importance ${api.columns.importance[i].toFixed(3)}`), tip);
  assert.ok(tip.includes(`semantic ${api.columns.semantic[i].toFixed(3)}`), tip);
  assert.ok(tip.includes(api.columns.pattern[i]), tip);
  await shot('dodrio-overview');
  const before = p.hash;
  await page.selectOption('[data-testid=ov-sort]', 'semantic');
  const sorted = await waitPixels('overview-canvas', (q) => q.hash !== before);
  assert.notEqual(sorted.hash, before, 'sorting redraws');
  await page.selectOption('[data-testid=ov-sort]', 'index');
  await page.fill('[data-testid=ov-min]', '0.9');
  const dim = await waitPixels('overview-canvas', (q) => q.reddish + q.bluish < p.reddish + p.bluish);
  assert.ok(dim.reddish + dim.bluish < p.reddish + p.bluish, 'filtered heads are dimmed');
  await checkExport('attnscope-overview', ['<circle']);
});

/** A canvas-relative point as page coordinates. */
async function canvasPoint(testid, { x, y }) {
  const b = await page.locator(`[data-testid=${testid}]`).boundingBox();
  return { x: b.x + x, y: b.y + y };
}

test('instance selector: search, filters, selecting a sentence runs it in the explorer', async () => {
  await open('view=instances&dbrun=1');
  await waitText('15 sentences');
  await page.fill('[data-testid=inst-search]', 'film');
  await waitText('6 sentences');
  await page.selectOption('[data-testid=inst-corpus]', 'conllu');
  await waitText('2 sentences');
  await page.click('[data-testid=inst-row][data-idx="9"]');
  await page.waitForFunction(() => document.querySelector('[data-testid=analysis-selection]').innerText.includes('sentence 9'));
  await page.waitForFunction(() => document.querySelector('[data-testid=status]').innerText.includes('7 tokens'), null, { timeout: 30_000 });
  assert.ok(page.url().includes('sent=9'));
  assert.ok(page.url().includes('text=The+film+was+good.'));
  await page.fill('[data-testid=inst-search]', '');
  await page.selectOption('[data-testid=inst-corpus]', 'sst2');
  await waitText('9 sentences');
  const conf = await page.locator('[data-testid=inst-row] td:nth-child(6)').first().innerText({ timeout: 10_000 });
  await page.waitForFunction(() => /\d\.\d\d/.test(document.querySelector('[data-testid=inst-row] td:nth-child(6)').innerText), null, { timeout: 30_000 });
  assert.ok(conf !== undefined);
  await shot('dodrio-instances');
  // CSV export: every matching sentence (all pages), RFC 4180 quoting
  const csv = await download('inst-csv');
  assert.equal(csv.name, 'attnscope-instances-run1.csv');
  const rows = parseCsv(csv.bytes.toString('utf8'));
  assert.deepEqual(rows[0], ['idx', 'corpus', 'source', 'text', 'label', 'predicted', 'confidence', 'n_tokens', 'n_words', 'truncated', 'relations']);
  const want = await page.evaluate(async () => (await fetch('/api/v1/db/runs/1/sentences?corpus=sst2&limit=200')).json());
  assert.equal(rows.length - 1, want.total, 'one row per matching sentence');
  want.sentences.forEach((s, k) => {
    const r = rows[k + 1];
    assert.equal(r[0], String(s.idx));
    assert.equal(r[1], 'sst2');
    assert.equal(r[3], s.text, 'text survives quoting');
    assert.equal(r[4], s.label === null ? '' : String(s.label));
    assert.equal(r[5], s.predicted === null ? '' : String(s.predicted));
    assert.ok(r[6] === '' || (Number(r[6]) > 0 && Number(r[6]) <= 1), 'confidence is a probability');
    assert.equal(r[7], String(s.n_tokens));
  });
});

/** RFC 4180 CSV (quoted cells, doubled quotes, CRLF) into rows of strings. */
function parseCsv(text) {
  const rows = [];
  let row = [], cell = '', q = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (q) {
      if (c === '"' && text[i + 1] === '"') (cell += '"'), i++;
      else if (c === '"') q = false;
      else cell += c;
    } else if (c === '"') q = true;
    else if (c === ',') row.push(cell), (cell = '');
    else if (c === '\r' && text[i + 1] === '\n') row.push(cell), rows.push(row), (row = []), (cell = ''), i++;
    else cell += c;
  }
  return rows;
}

test('clicking a head in the overview updates the dependency, graph, pattern and neuron views', async () => {
  await open('view=instances&dbrun=1');
  await page.click('[data-testid=inst-row][data-idx="9"]');
  await page.waitForFunction(() => document.querySelector('[data-testid=status]').innerText.includes('7 tokens'), null, { timeout: 30_000 });
  await page.click('[data-testid=tab-overview]');
  const plain = await waitPixels('overview-canvas', (q) => q.ink > 3000);
  // zoomed in with a sentence selected: each glyph holds a mini drawing of its attention
  await page.fill('[data-testid=ov-zoom]', '96');
  const zoomed = await waitPixels('overview-canvas', (q) => q.hash !== plain.hash && q.ink > plain.ink);
  assert.ok(zoomed.ink > plain.ink, 'zoomed glyphs with mini attention drawings');
  await shot('dodrio-overview-zoom');
  await page.fill('[data-testid=ov-zoom]', '0');
  await waitPixels('overview-canvas', (q) => q.hash === plain.hash);
  const pt = await canvasPoint('overview-canvas', glyph(1, 3));
  await page.mouse.click(pt.x, pt.y);
  await page.waitForFunction(() => document.querySelector('[data-testid=analysis-selection]').innerText.startsWith('L1H3'));
  assert.ok(page.url().includes('layer=1') && page.url().includes('head=3'));
  await page.click('[data-testid=tab-dependency]');
  await waitText('Layer 1, head 3');
  await page.click('[data-testid=tab-graph]');
  await waitText('Layer 1, head 3');
  await page.click('[data-testid=tab-pattern]');
  const api = await page.evaluate(async () => (await fetch('/api/v1/db/runs/1/heads')).json());
  await page.waitForFunction(() => document.querySelector('[data-testid=pattern-label]')?.innerText.startsWith('L1H3'));
  assert.ok((await text('pattern-label')).includes(api.columns.pattern[7]));
  // the link marks the head's dominant dims: recompute them from the API's q and k
  await page.waitForSelector('[data-testid=pattern-dims]');
  const want = await page.evaluate(async () => {
    const run = await (await fetch('/api/v1/run', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: 'bert-sst', text: 'The film was good.' }) })).json();
    const b = await (await fetch(`/api/v1/runs/${run.id}/qk?layer=1&head=3`)).arrayBuffer();
    const n = new DataView(b).getUint32(4, true);
    const hdr = JSON.parse(new TextDecoder().decode(new Uint8Array(b, 8, n)));
    const t = Object.fromEntries(hdr.tensors.map((x) => [x.name, new Float32Array(b.slice(8 + n + x.offset, 8 + n + x.offset + x.nbytes))]));
    const T = hdr.meta.tokens, Dh = hdr.meta.d_head;
    let bi = 0, bj = 0;
    for (let i = 0; i < T; i++) for (let j = 0; j < T; j++) if (t.attention[i * T + j] > t.attention[bi * T + bj]) (bi = i), (bj = j);
    const c = Array.from({ length: Dh }, (_, d) => t.q[bi * Dh + d] * t.k[bj * Dh + d]);
    const tot = c.reduce((a, x) => a + x, 0);
    const order = c.map((_, d) => d).sort((a, b2) => Math.abs(c[b2]) - Math.abs(c[a]));
    const dims = [];
    let part = 0;
    for (const d of order) {
      part += c[d];
      dims.push(d);
      if (part >= 0.9 * tot) break;
    }
    return { query: bi, dims: dims.sort((a, b2) => a - b2), positive: tot > 0 };
  });
  await page.click('[data-testid=pattern-neuron]');
  await page.waitForSelector('[data-testid=n-layer]');
  assert.equal(await page.inputValue('[data-testid=n-layer]'), '1');
  assert.equal(await page.inputValue('[data-testid=n-head]'), '3');
  const url = new URL(page.url()).searchParams;
  assert.equal(url.get('token'), String(want.query), 'the neuron view opens on the dominant link\'s query');
  if (want.positive) assert.equal(url.get('dims'), want.dims.join(','), 'dims = the dominant link\'s 90% dims');
  assert.ok(url.get('dims').length > 0);
  assert.ok((await text('n-dims')).includes(url.get('dims').split(',').join(', ')));
  const purple = await page.evaluate(() => {
    const c = document.querySelector('[data-testid=neuron-canvas]');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (Math.abs(d[i] - 0x93) < 12 && Math.abs(d[i + 1] - 0x33) < 12 && Math.abs(d[i + 2] - 0xea) < 12) n++;
    return n;
  });
  assert.ok(purple > 30, `marked dims drawn in purple (${purple} px)`);
  await shot('dodrio-neuron-dims');
  // reloading keeps the marks (URL state); changing the head clears them
  await page.reload();
  await page.waitForSelector('[data-testid=n-dims]', { timeout: 30_000 });
  await page.selectOption('[data-testid=n-head]', '2');
  await page.waitForFunction(() => !new URLSearchParams(location.search).has('dims'));
  await page.click('[data-testid=tab-head]');
  await page.waitForSelector('[data-testid=layer]');
  assert.equal(await page.inputValue('[data-testid=layer]'), '1');
});

test('dependency view: correct / wrong marks agree with the database', async () => {
  const L = 0, H = 2;
  const counts = {};
  for (let sent = 9; sent < 15; sent++) {
    await open(`view=dependency&dbrun=1&sent=${sent}&layer=${L}&head=${H}`);
    await page.waitForSelector('[data-testid=dep-mark]', { timeout: 30_000 });
    const marks = await page.$$eval('[data-testid=dep-mark]', (rows) =>
      rows.map((r) => ({ rel: r.dataset.rel, scored: r.dataset.scored, c: r.dataset.correct, pc: r.dataset.pcorrect })),
    );
    assert.equal(marks.length, 5);
    for (const m of marks) {
      if (m.scored !== 'true') continue;
      counts[m.rel] ??= [0, 0];
      counts[m.rel][0] += m.c === 'true';
      counts[m.rel][1] += m.pc === 'true';
    }
    if (sent === 9) {
      const p = await waitPixels('dep-canvas', (q) => q.green + q.red > 20);
      assert.ok(p.green + p.red > 20, 'correct / wrong arcs are drawn in green / red');
      const summary = await text('dep-summary');
      const nOk = marks.filter((m) => m.c === 'true').length;
      assert.ok(summary.includes(`${nOk} correct`), summary);
      await shot('dodrio-dependency');
      await checkExport('attnscope-dependency', ['<polyline', 'det']);
    }
  }
  for (const rel of ['det', 'nsubj', 'cop'])
    for (const dir of [0, 1]) {
      const want = Number(sql(`SELECT correct FROM rel_accuracy WHERE run=1 AND relation='${rel}' AND dir=${dir} AND layer=${L} AND head=${H}`));
      assert.equal(counts[rel][dir], want, `${rel} dir ${dir}: marks ${counts[rel][dir]} vs database ${want}`);
    }
  assert.ok((await page.locator('[data-testid=rel-table]').innerText()).includes('nsubj'));
  await waitPixels('rel-chart', (q) => q.ink > 300);
});

test('attention graph of a 64-token sentence: layouts, threshold, timing', async () => {
  const t0 = Date.now();
  await open('view=graph&dbrun=1&sent=8&layer=0&head=1');
  await page.waitForFunction(() => /fetched and drawn in \d+/.test(document.querySelector('[data-testid=graph-ms]')?.innerText ?? ''), null, { timeout: 30_000 });
  const wall = Date.now() - t0;
  const msText = await text('graph-ms');
  assert.ok((await page.locator('body').innerText()).includes('64 tokens'));
  const drawMs = Number(/layout \+ draw ([\d.]+) ms/.exec(msText)[1]);
  const totalMs = Number(/fetched and drawn in (\d+) ms/.exec(msText)[1]);
  const force = await pixels('graph-canvas');
  assert.ok(force.ink > 2000, 'graph drawn');
  const edges = Number(/(\d+) edges/.exec(await text('graph-edges'))[1]);
  assert.ok(edges > 0);
  await shot('dodrio-graph-force');
  bench.graph_64_tokens = { layout_draw_ms: drawMs, fetch_layout_draw_ms: totalMs, page_load_wall_ms: wall };
  console.log(`graph, 64-token sentence: layout + draw ${drawMs.toFixed(1)} ms; fetch + layout + draw ${totalMs} ms (page load to drawn ${wall} ms)`);
  if (totalMs >= 1000) console.log(`note: over the 1 s target (${totalMs} ms); timings are reported, not asserted (bench/RESULTS.md)`);
  await page.selectOption('[data-testid=graph-layout]', 'radial');
  const radial = await waitPixels('graph-canvas', (q) => q.hash !== force.hash);
  assert.notEqual(radial.hash, force.hash);
  await shot('dodrio-graph-radial');
  await page.selectOption('[data-testid=graph-layout]', 'grid');
  const grid = await waitPixels('graph-canvas', (q) => q.hash !== radial.hash);
  assert.notEqual(grid.hash, radial.hash);
  await page.fill('[data-testid=graph-threshold]', '0.9');
  await page.waitForFunction((n) => Number(/(\d+) edges/.exec(document.querySelector('[data-testid=graph-edges]').innerText)[1]) < n, edges);
  await page.selectOption('[data-testid=graph-layout]', 'force');
  await page.fill('[data-testid=graph-threshold]', '0.05');
  await checkExport('attnscope-graph', ['<circle', '<path']);
});

test('pattern explanation renders', async () => {
  await open('view=pattern&dbrun=1&layer=0&head=0');
  await page.waitForSelector('[data-testid=pattern-label]');
  const p = await waitPixels('pattern-canvas', (q) => q.ink > 2000);
  assert.ok(p.ink > 2000);
  assert.ok((await text('pattern-depends')).includes('embedding'));
  await shot('dodrio-pattern');
  await checkExport('attnscope-pattern', ['Concentration', 'Ablation']);
});

/** The RGB of a CSS hsl() colour (h in degrees, s and l in percent). */
function hslRgb(h, s, l) {
  s /= 100, l /= 100;
  const k = (n) => (n + h / 30) % 12;
  const a = s * Math.min(l, 1 - l);
  return [0, 8, 4].map((n) => Math.round(255 * (l - a * Math.max(-1, Math.min(k(n) - 3, 9 - k(n), 1)))));
}
/** glyphs.ts's ramps: scoreColor (0..1) and ratioColor (log2 around 1). */
const scoreRgb = (v) => hslRgb(175, 65, 92 - 62 * Math.max(0, Math.min(1, v)));
const ratioRgb = (v) => {
  const t = Math.max(-1, Math.min(1, Math.log2(v)));
  return hslRgb(t < 0 ? 28 : 212, 75, 94 - 52 * Math.abs(t));
};
/** The canvas pixel (RGB) at CSS point (x, y) of a canvas. */
const pixelAt = (testid, x, y) => page.evaluate(({ testid, x, y }) => {
  const c = document.querySelector(`[data-testid="${testid}"]`);
  const r = c.width / c.clientWidth;
  return [...c.getContext('2d').getImageData(Math.round(x * r), Math.round(y * r), 1, 1).data].slice(0, 3);
}, { testid, x, y });

test('overview colours, sorts and explains heads by head importance, sink ratio and ALTI share (SQLite values)', async () => {
  await open('view=overview&dbrun=1');
  const plain = await waitPixels('overview-canvas', (q) => q.ink > 3000);
  const [l, h] = [1, 2];
  const row = sql(`SELECT head_importance, head_importance_norm, norm_sink_ratio, alti_contribution FROM head_scores WHERE run = 1 AND layer = ${l} AND head = ${h}`).split('|').map(Number);
  const [imp, impNorm, ratio, alti] = row;
  assert.ok(row.every((v) => Number.isFinite(v) && v > 0), `SQLite row ${row}`);
  /* the glyph's fill at its centre (cell 64, label strip 11 px under it) */
  const cx = 44 + h * 64 + 32, cy = 26 + l * 64 + (64 - 11) / 2;
  const near = (got, want, what) => assert.ok(got.every((v, k) => Math.abs(v - want[k]) <= 3), `${what}: pixel ${got}, want ${want}`);
  await page.selectOption('[data-testid=ov-color]', 'sinkRatio');
  const byRatio = await waitPixels('overview-canvas', (q) => q.hash !== plain.hash);
  near(await pixelAt('overview-canvas', cx, cy), ratioRgb(ratio), `L${l}H${h} sink ratio ${ratio}`);
  await page.selectOption('[data-testid=ov-color]', 'headImp');
  await waitPixels('overview-canvas', (q) => q.hash !== byRatio.hash);
  near(await pixelAt('overview-canvas', cx, cy), scoreRgb(impNorm), `L${l}H${h} head importance ${impNorm}`);
  await shot('dodrio-overview-headimp');
  await page.mouse.move(...Object.values(await canvasPoint('overview-canvas', { x: cx, y: cy })));
  await page.waitForSelector('[data-testid=ov-tip-attr]');
  const tip = await text('ov-tip-attr');
  for (const s of [imp.toFixed(4), impNorm.toFixed(3), ratio.toFixed(3), alti.toFixed(4)]) assert.ok(tip.includes(s), `tooltip '${tip}' has ${s}`);
  /* sorted by ALTI share: the first glyph of each layer is its largest */
  await page.selectOption('[data-testid=ov-sort]', 'alti');
  await waitPixels('overview-canvas', (q) => q.hash !== byRatio.hash);
  for (let layer = 0; layer < 2; layer++) {
    const best = sql(`SELECT head FROM head_scores WHERE run = 1 AND layer = ${layer} ORDER BY alti_contribution DESC LIMIT 1`);
    await page.mouse.move(0, 0);
    await page.mouse.move(...Object.values(await canvasPoint('overview-canvas', { x: 44 + 32, y: 26 + layer * 64 + 26 })));
    await page.waitForFunction((s) => document.querySelector('[data-testid=ov-tip]')?.innerText.includes(s), `L${layer}H${best}`);
  }
  await page.selectOption('[data-testid=ov-sort]', 'index');
  await page.selectOption('[data-testid=ov-color]', 'scores');
});

test('model comparison shows both models', async () => {
  await open('view=compare&dbrun=1&cmp=2');
  const a = await waitPixels('cmp-canvas-a', (q) => q.ink > 2000);
  const b = await waitPixels('cmp-canvas-b', (q) => q.ink > 2000);
  assert.ok(a.ink > 2000 && b.ink > 2000, 'both overviews drawn');
  assert.notEqual(a.hash, b.hash, 'the two models differ');
  assert.ok((await page.locator('body').innerText()).includes('A: bert-sst'.slice(3)));
  assert.ok((await page.locator('[data-testid=cmp-match]').count()) > 0, 'heads matched by pattern');
  const rows = await page.$$eval('[data-testid=cmp-count]', (r) => r.map((x) => x.innerText.split('\t').map((s) => s.trim())));
  assert.equal(rows.reduce((s, r) => s + Number(r[1]), 0), 8);
  assert.equal(rows.reduce((s, r) => s + Number(r[2]), 0), 8);
  assert.ok((await pixels('cmp-hist')).ink > 1000, 'score distributions drawn');
  /* the attribution columns: each run's mean over its heads and B - A, as in SQLite */
  for (const col of ['head_importance', 'norm_sink_ratio', 'alti_contribution']) {
    const [ma, mb] = [1, 2].map((r) => Number(sql(`SELECT avg(${col}) FROM head_scores WHERE run = ${r}`)));
    const cells = (await page.locator(`[data-testid=cmp-attr-row][data-column=${col}]`).innerText()).split('\t').map((x) => x.trim());
    assert.equal(cells[1], ma.toFixed(4), `${col} mean A`);
    assert.equal(cells[2], mb.toFixed(4), `${col} mean B`);
    assert.ok(Math.abs(Number(cells[3]) - (mb - ma)) <= 1e-4, `${col} B - A: ${cells[3]} vs ${mb - ma}`);
  }
  await shot('dodrio-compare');
  await checkExport('attnscope-compare', ['A: bert-sst', 'B: distil-sst', '<circle']);
});

test('overview of 144 heads renders (timed)', async () => {
  const runs = await page.evaluate(async () => (await fetch('/api/v1/db/runs')).json());
  const big = runs.runs.find((r) => r.layers === 12 && r.heads === 12);
  assert.ok(big, 'the 12 x 12 import is in the database');
  await open('view=overview&dbrun=1');
  await waitPixels('overview-canvas', (q) => q.ink > 3000);
  const t0 = await page.evaluate(() => performance.now());
  await page.selectOption('[data-testid=db-run]', String(big.id));
  await page.waitForFunction(() => document.body.innerText.includes('12 layers × 12 heads'), null, { timeout: 30_000 });
  const p = await waitPixels('overview-canvas', (q) => q.ink > 30000);
  const t1 = await page.evaluate(() => performance.now());
  const drawMs = Number(/drawn in ([\d.]+) ms/.exec(await text('overview-ms'))[1]);
  assert.ok(p.ink > 30000, `144 glyphs drawn (${p.ink} px of ink)`);
  bench.overview_144_heads = { source: bigSource, draw_ms: drawMs, select_to_drawn_ms: Math.round(t1 - t0) };
  console.log(`overview, 144 heads (${bigSource}): draw ${drawMs.toFixed(1)} ms; run selected to drawn ${Math.round(t1 - t0)} ms`);
  if (t1 - t0 >= 1000) console.log(`note: over the 1 s target (${Math.round(t1 - t0)} ms); timings are reported, not asserted`);
  await shot('dodrio-overview-144');
});

test('an imported run served with --import-dir: predicted parents and graph from its .npy files', async () => {
  const runs = await page.evaluate(async () => (await fetch('/api/v1/db/runs')).json());
  const big = runs.runs.find((r) => r.layers === 12 && r.heads === 12);
  assert.equal(big.attention, 'import');
  assert.equal(big.import_dir, importDir);
  const L = 7, H = 10;
  const counts = {};
  for (let sent = 0; sent < big.n_sentences; sent++) {
    await open(`view=dependency&dbrun=${big.id}&sent=${sent}&layer=${L}&head=${H}`);
    await page.waitForSelector('[data-testid=dep-mark]', { timeout: 30_000 });
    if (sent === 0) {
      assert.ok((await text('dep-source')).includes(importDir));
      const p = await waitPixels('dep-canvas', (q) => q.green + q.red > 20);
      assert.ok(p.green + p.red > 20, 'predicted parents drawn for the imported run');
      await shot('dodrio-dependency-import');
    }
    const marks = await page.$$eval('[data-testid=dep-mark]', (rows) => rows.map((r) => ({ rel: r.dataset.rel, scored: r.dataset.scored, c: r.dataset.correct, pc: r.dataset.pcorrect })));
    for (const m of marks) {
      if (m.scored !== 'true') continue;
      for (const rel of [m.rel, 'all']) {
        counts[rel] ??= [0, 0];
        counts[rel][0] += m.c === 'true';
        counts[rel][1] += m.pc === 'true';
      }
    }
  }
  const rows = sql(`SELECT relation, dir, correct FROM rel_accuracy WHERE run=${big.id} AND layer=${L} AND head=${H}`).split('\n');
  assert.ok(rows.length >= 2);
  for (const line of rows) {
    const [rel, dir, correct] = line.split('|');
    assert.equal(counts[rel]?.[+dir] ?? 0, Number(correct), `imported run, ${rel} dir ${dir}: marks vs database`);
  }
  await open(`view=graph&dbrun=${big.id}&sent=0&layer=${L}&head=${H}`);
  await page.waitForFunction(() => Number(/(\d+) edges/.exec(document.querySelector('[data-testid=graph-edges]')?.innerText ?? '')?.[1] ?? 0) > 0, null, { timeout: 30_000 });
  assert.ok((await pixels('graph-canvas')).ink > 1000, 'graph of the imported run drawn');
  await shot('dodrio-graph-import');
});

test('a BF16 analysis beside the F32 one is named by its precision', async () => {
  execFileSync(BIN, ['analyze', '--model', join(tmp, 'bert-sst'), '--sst2', join(tmp, 'sst.tsv'), '--conllu', join(tmp, 'ud.conllu'),
    '--db', db, '--chunk', '4', '--explain', '4', '--min-rel', '2', '--threads', '1', '--quiet', '--precision', 'bf16']);
  const id = Number(sql(`SELECT id FROM runs WHERE params LIKE '%"precision":"bf16"%'`));
  assert.ok(id > 2, 'the bf16 run is a run of its own');
  await open(`view=overview&dbrun=${id}`);
  const opts = await page.$$eval('[data-testid=db-run] option', (o) => o.map((x) => x.textContent));
  assert.ok(opts.some((x) => x.startsWith(`${id}: bert-sst (bf16) (2×4`)), opts.join(' | '));
  assert.ok(opts.some((x) => x.startsWith('1: bert-sst (2×4')), opts.join(' | '));
  await page.waitForFunction(() => document.body.innerText.includes('bert-sst (bf16)'), null, { timeout: 30_000 });
  await open(`view=compare&dbrun=1&cmp=${id}`);
  await page.waitForFunction((want) => {
    const b = document.querySelector('[data-testid=cmp-b]');
    return b && b.options[b.selectedIndex]?.textContent === want;
  }, `${id}: bert-sst (bf16)`, { timeout: 30_000 });
  const a = await page.$eval('[data-testid=cmp-a]', (s) => s.options[s.selectedIndex].textContent);
  assert.equal(a, '1: bert-sst');
});
