// make_screenshots.mjs — regenerates the README's screenshots of the explorer (docs/img/*.png).
//
//   node docs/img/make_screenshots.mjs BIN DB [OUTDIR]
//
// BIN is the attnscope binary, DB an analysis database of models/attnscope-sst2 (run 1) and
// models/attnscope-sst2-student (run 2), as `make demo` writes it (build/analysis/demo.sqlite),
// or a smaller one:
//
//   for m in models/attnscope-sst2 models/attnscope-sst2-student; do
//     build/attnscope analyze --model $m --sst2 ../shared/data/sst2/dev.tsv \
//       --conllu ../shared/data/ud/en_ewt-ud-dev.conllu --limit 60 --min-rel 20 --db /tmp/demo.sqlite
//   done
//
// It starts the real `attnscope serve` on a free loopback port, drives Debian's Chromium
// (headless, 1400 × 900) with the playwright-core that tests/browser installs
// (`bash tests/browser/run.sh BIN` or `npm ci` in tests/browser), opens each view through its
// URL state (docs/views.md, docs/server.md) and saves a PNG cropped to the view. OUTDIR
// defaults to docs/img. Not part of `make test`.
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, startServer } from '../../tests/browser/harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const [BIN, DB, OUT = HERE] = process.argv.slice(2).map((p) => resolve(p));
if (!BIN || !DB) {
  console.error('usage: node docs/img/make_screenshots.mjs path/to/attnscope analysis.sqlite [outdir]');
  process.exit(2);
}
for (const f of [BIN, DB, '/usr/bin/chromium']) {
  if (!existsSync(f)) {
    console.error(`make_screenshots: ${f} not found`);
    process.exit(2);
  }
}
const require = createRequire(join(ROOT, 'tests', 'browser', 'package.json'));
let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch {
  console.error('make_screenshots: playwright-core is missing; run `npm ci` in tests/browser (or tests/browser/run.sh) first');
  process.exit(2);
}

const MODEL = 'attnscope-sst2';
const TEXT_A = 'the movie was surprisingly good .';
const TEXT_B = 'i would watch it again .';
// sentences of the analysis (looked up by text, so any --limit of at least 60 works)
const DEP_TEXT = ['conllu', 'The US troops fired into the hostile crowd']; // UD EWT dev
const GRAPH_TEXT = ['sst2', 'the mesmerizing performances of the leads']; // SST-2 dev


const { p: server, url: base } = await startServer(BIN, ['--model', join(ROOT, 'models', 'attnscope-sst2'),
  '--model', join(ROOT, 'models', 'attnscope-sst2-student'), '--db', DB,
  '--model', join(ROOT, 'tests', 'ref', 'fixtures', 'models', 'mistral_swa')]);
const browser = await chromium.launch(CHROMIUM);
const page = await browser.newPage({ viewport: { width: 1400, height: 900 }, deviceScaleFactor: 1, locale: 'en-US' }); /* English UI */
page.on('pageerror', (e) => console.log('pageerror:', e.message));
mkdirSync(OUT, { recursive: true });
const sizes = [];

/** A URL of the explorer with this state (lib/urlstate.ts). */
function url(state) {
  return `${base}/?${new URLSearchParams(Object.entries(state).map(([k, v]) => [k, String(v)]))}`;
}

async function open(state) {
  await page.goto(url(state));
}

const waitText = (sel, re) =>
  page.waitForFunction(([s, r]) => new RegExp(r).test(document.querySelector(s)?.innerText ?? ''), [sel, re.source], { timeout: 60_000 });

/** Waits until the canvas has at least n non-white pixels. */
const waitInk = (testid, n) =>
  page.waitForFunction(([id, n]) => {
    const c = document.querySelector(`[data-testid="${id}"]`);
    if (!c) return false;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let ink = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 735) ink++;
    return ink >= n;
  }, [testid, n], { timeout: 60_000 });

/** Saves OUT/name.png: the page cropped to the box around the elements (CSS selectors), at most maxH tall. */
async function shot(name, selectors, { maxH = 900, pad = 8, padBottom = pad, maxW = 1400, keepMouse = false } = {}) {
  if (!keepMouse) await page.mouse.move(0, 0);
  await page.evaluate(() => document.activeElement?.blur()); // no focus ring on the control last used
  await page.waitForTimeout(300);
  const box = await page.evaluate((sels) => {
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const s of sels) {
      for (const e of document.querySelectorAll(s)) {
        const r = e.getBoundingClientRect();
        if (!r.width || !r.height) continue;
        x0 = Math.min(x0, r.left + scrollX);
        y0 = Math.min(y0, r.top + scrollY);
        x1 = Math.max(x1, r.right + scrollX);
        y1 = Math.max(y1, r.bottom + scrollY);
      }
    }
    return { x0, y0, x1, y1 };
  }, selectors);
  if (!Number.isFinite(box.x0)) throw new Error(`${name}: nothing matches ${selectors.join(', ')}`);
  const x = Math.max(0, Math.floor(box.x0 - pad));
  const y = Math.max(0, Math.floor(box.y0 - pad));
  const clip = { x, y, width: Math.min(maxW, Math.ceil(box.x1 + pad) - x), height: Math.min(maxH, Math.ceil(box.y1 + padBottom) - y) };
  const path = join(OUT, `${name}.png`);
  await page.screenshot({ path, clip, fullPage: true });
  const kb = statSync(path).size / 1024;
  sizes.push([name, kb]);
  console.log(`${path}: ${clip.width} × ${clip.height}, ${kb.toFixed(0)} KB`);
}

/** Mouse over a canvas point given in canvas coordinates. */
async function hover(testid, x, y) {
  const b = await page.locator(`[data-testid=${testid}]`).boundingBox();
  await page.mouse.move(b.x + x, b.y + y);
}

try {
  // token indices of the pair, for the neuron view's query
  const run = await (await fetch(`${base}/api/v1/run`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ model: MODEL, text: TEXT_A, text_b: TEXT_B }),
  })).json();
  const good = run.tokens.findIndex((t) => t.text === 'good');
  const pair = { model: MODEL, text: TEXT_A, text_b: TEXT_B };
  const sentence = async ([corpus, q]) => {
    const r = await (await fetch(`${base}/api/v1/db/runs/1/sentences?${new URLSearchParams({ corpus, q, limit: 1 })}`)).json();
    if (!r.sentences?.length) throw new Error(`the database has no ${corpus} sentence "${q}..." (analyze with --limit 60 or more)`);
    return r.sentences[0].idx;
  };
  const DEP_SENT = await sentence(DEP_TEXT);
  const GRAPH_SENT = await sentence(GRAPH_TEXT);

  // head view: three heads of layer 1, the faintest links hidden by the threshold slider
  await open({ ...pair, view: 'head', layer: 1, head: 0, heads: '0,1,3' });
  await waitText('main', /drawn in/);
  await waitInk('head-canvas', 2000);
  await page.fill('[data-testid=threshold]', '0.08');
  await shot('head-view', ['header', 'nav:not(.analysis)', 'main'], { maxH: 700 });

  // model view: every head as thumbnails (lines), one opened large as a heat map (click its thumbnail)
  await open({ ...pair, view: 'model', layer: 1, head: 2 });
  await waitText('[data-testid=grid-info]', /loaded and drawn/);
  const H = run.sizes.heads; // lib/grid.ts gridLayout: cell size, gap and margins
  const cell = Math.max(48, Math.min(110, Math.floor(1100 / H) - 6)), gap = 6, left = 56, top = 22;
  await page.click('[data-testid=grid-canvas]', { position: { x: left + 2 * (cell + gap) + cell / 2, y: top + 1 * (cell + gap) + cell / 2 } });
  await page.waitForSelector('[data-testid=matrix-canvas]');
  await waitInk('matrix-canvas', 2000);
  await shot('model-view', ['nav:not(.analysis)', 'main'], { maxH: 1000 });

  // neuron view: layer 2, head 1, query "good", dims sorted by contribution
  await open({ ...pair, view: 'neuron', layer: 2, head: 1, token: good });
  await page.waitForSelector('[data-testid=neuron-table]', { timeout: 60_000 });
  await waitInk('neuron-canvas', 2000);
  await page.check('[data-testid=n-sort]');
  await shot('neuron-view', ['nav:not(.analysis)', 'main > .controls', 'main > .hint', '[data-testid=neuron-canvas]'], { maxH: 760, padBottom: 2 });

  // LLaMA family: the mistral_swa fixture (grouped-query heads, a sliding window of 5; no
  // tokenizer, so token ids): the model view's kv groups and masked cells with L1 H0 opened,
  // then the neuron view's q/k before RoPE and each score split into content and position
  const LLAMA = { model: 'mistral_swa', text: '3,8,13,21,34,4,7,11,50' };
  await open({ ...LLAMA, view: 'model', layer: 1, head: 0, mode: 'matrix' });
  await waitText('[data-testid=grid-info]', /loaded and drawn/);
  const g = await page.evaluate(() => window.__attnscope.modelView.grid);
  await page.click('[data-testid=grid-canvas]', { position: { x: g.left + g.cell / 2, y: g.top + g.cell + g.gap + g.cell / 2 } });
  await page.waitForSelector('[data-testid=matrix-canvas]');
  await waitInk('matrix-canvas', 2000);
  await shot('llama-model-view', ['nav:not(.analysis)', 'main'], { maxH: 1000 });
  await open({ ...LLAMA, view: 'neuron', layer: 1, head: 2, token: 7, rope: 'pre' });
  await page.waitForSelector('[data-testid=rope-table]', { timeout: 60_000 });
  await waitInk('neuron-canvas', 2000);
  await shot('llama-neuron-view', ['nav:not(.analysis)', 'main > .controls', 'main > .hint', '[data-testid=neuron-canvas]', '[data-testid=rope-panel]'], { maxH: 1100 });

  // Dodrio head overview: zoomed in with a sentence selected (mini attention in each glyph), one tooltip
  await open({ view: 'overview', dbrun: 1, sent: GRAPH_SENT, layer: 1, head: 0 });
  await waitInk('overview-canvas', 3000);
  const zoom = 90;
  await page.fill('[data-testid=ov-zoom]', String(zoom));
  await page.waitForTimeout(1500); // the mini drawings recompute the sentence's attention
  await hover('overview-canvas', 44 + 3 * zoom + zoom / 2, 26 + 2 * zoom + zoom / 2); // glyph L2H3 (lib/glyphs.ts layout)
  await page.waitForSelector('[data-testid=ov-tip]');
  await shot('overview', ['[data-testid=analysis-nav]', 'main.analysis-main', '[data-testid=ov-tip]'], { maxH: 640, keepMouse: true });

  // instance table: search and filters over the analysed sentences
  await open({ view: 'instances', dbrun: 1 });
  await page.waitForSelector('[data-testid=inst-row]', { timeout: 60_000 });
  await page.fill('[data-testid=inst-search]', 'people');
  await page.waitForFunction(() => /\d\.\d\d/.test(document.querySelector('[data-testid=inst-row] td:nth-child(6)')?.innerText ?? ''), null, { timeout: 60_000 });
  await shot('instances', ['main.analysis-main > .controls', '[data-testid=inst-table] thead', 'tr[data-testid=inst-row]:nth-child(-n+6)'], { padBottom: 1 });

  // dependency view: a treebank sentence, gold arcs above, the head's predicted parents below
  await open({ view: 'dependency', dbrun: 1, sent: DEP_SENT, layer: 1, head: 2 });
  await page.waitForSelector('[data-testid=dep-mark]', { timeout: 60_000 });
  await waitInk('dep-canvas', 2000);
  await shot('dependency', ['main.analysis-main > .controls', '[data-testid=dep-canvas]'], { maxH: 460, maxW: 760 });

  // attention graph of an SST-2 sentence: saliency-coloured nodes, force layout
  await open({ view: 'graph', dbrun: 1, sent: GRAPH_SENT, layer: 1, head: 0 });
  await waitText('main.analysis-main', /fetched and drawn in \d+/);
  await page.fill('[data-testid=graph-threshold]', '0.05');
  await page.waitForTimeout(1500); // force layout
  await waitInk('graph-canvas', 2000);
  await shot('graph', ['main.analysis-main'], { maxH: 700 });

  // pattern explanation of one head
  await open({ ...pair, view: 'pattern', dbrun: 1, layer: 1, head: 2 });
  await waitInk('pattern-canvas', 2000);
  await shot('pattern', ['main.analysis-main'], { maxH: 640 });

  // model comparison: the classifier against its distilled student
  await open({ view: 'compare', dbrun: 1, cmp: 2 });
  await waitInk('cmp-canvas-a', 2000);
  await waitInk('cmp-canvas-b', 2000);
  await waitInk('cmp-hist', 1000);
  await shot('compare', ['main.analysis-main > .controls', '[data-testid=cmp-side-a]', '[data-testid=cmp-side-b]', '[data-testid=cmp-hist]',
    '[data-testid=cmp-count]', 'tr[data-testid=cmp-match]:nth-child(-n+6)'], { padBottom: 1 });
} catch (e) {
  const path = join(tmpdir(), 'make_screenshots-error.png');
  await page.screenshot({ path, fullPage: true }).catch(() => {});
  console.error(`make_screenshots: ${e.message.split('\n')[0]} (page at ${page.url()}; full page in ${path})`);
  process.exitCode = 1;
} finally {
  await browser.close();
  const done = new Promise((r) => server.on('exit', r));
  server.kill('SIGTERM');
  await done;
}
const total = sizes.reduce((s, [, kb]) => s + kb, 0);
console.log(`${sizes.length} screenshots, ${total.toFixed(0)} KB in all`);
