// explorer.test.mjs — browser tests of the attnscope explorer: Playwright-core
// drives Debian's Chromium against the real `attnscope serve` (ATTNSCOPE_BIN) on an
// ephemeral loopback port. Checks what is drawn (canvas pixels), that toggling a
// head, switching layer and hovering change it, that the neuron view's numbers are
// the engine's (API and `attnscope run --format json`), URL state, SVG/PNG export,
// and a 512-token input (the model view's grid from one request of pooled thumbnails,
// the opened head's full matrix); a causal GPT-2 (make_gpt2_model.mjs, built at test time): no
// link to a later token, masked future keys, a pair without [SEP]. Screenshots go to
// tests/browser/artifacts/.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer as startServerAt, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const DEMO = join(ROOT, 'models', 'demo-bert');
const TEXT_A = 'the quick brown fox jumps over the lazy dog';
const TEXT_B = 'it was not amused';

let server, base, browser, ctx, page, tmp;

const startServer = (args) => startServerAt(BIN, args);

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-browser-'));
  execFileSync(process.execPath, [join(HERE, 'make_long_model.mjs'), join(tmp, 'long-bert')]);
  execFileSync(process.execPath, [join(HERE, 'make_gpt2_model.mjs'), join(tmp, 'gpt2-tiny')]);
  const s = await startServer(['--model', DEMO, '--model', join(tmp, 'long-bert'), '--model', join(tmp, 'gpt2-tiny')]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { acceptDownloads: true }));
  ctx = browser;
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

// ---- helpers ----------------------------------------------------------------

/** Pixel statistics of a canvas region (CSS px; deviceScaleFactor is 1). */
async function pixels(testid, x, y, w, h) {
  return page.evaluate(
    ({ testid, x, y, w, h }) => {
      const c = document.querySelector(`[data-testid="${testid}"]`);
      const d = c.getContext('2d').getImageData(x, y, w, h).data;
      let ink = 0, bluish = 0, reddish = 0, hash = 0;
      for (let i = 0; i < d.length; i += 4) {
        const [r, g, b] = [d[i], d[i + 1], d[i + 2]];
        hash = (hash * 31 + r + 7 * g + 13 * b) >>> 0;
        if (r + g + b > 735) continue;
        ink++;
        if (b > r + 20) bluish++;
        if (r > b + 20) reddish++;
      }
      return { ink, bluish, reddish, hash, n: d.length / 4 };
    },
    { testid, x, y, w, h },
  );
}

/** Polls a region's pixel statistics until pred holds (or 10 s pass); returns the last. */
async function waitPixels(testid, region, pred) {
  let p;
  for (let i = 0; i < 100; i++) {
    p = await pixels(testid, ...region);
    if (pred(p)) break;
    await page.waitForTimeout(100);
  }
  return p;
}

async function shot(name) {
  await page.screenshot({ path: join(ART, `${name}.png`), fullPage: true });
}

async function waitHint(text) {
  await page.waitForFunction((t) => document.body.innerText.includes(t), text, { timeout: 30_000 });
}

async function runText(model, a, b) {
  await page.selectOption('[data-testid=model]', model);
  await page.fill('[data-testid=text]', a);
  await page.fill('[data-testid=text-b]', b);
  await page.click('[data-testid=run]');
}

async function download(testid) {
  const [d] = await Promise.all([page.waitForEvent('download'), page.click(`[data-testid=${testid}]`)]);
  return { name: d.suggestedFilename(), bytes: readFileSync(await d.path()) };
}

function checkExports(svg, png, minWidth) {
  const s = svg.bytes.toString('utf8');
  assert.ok(s.startsWith('<?xml'), 'SVG starts with an XML declaration');
  assert.match(s, /<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
  assert.ok(s.trimEnd().endsWith('</svg>'));
  assert.deepEqual([...png.bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], 'PNG signature');
  assert.equal(png.bytes.subarray(12, 16).toString('latin1'), 'IHDR');
  const w = png.bytes.readUInt32BE(16);
  assert.ok(w >= minWidth, `PNG width ${w} >= ${minWidth} (publication resolution)`);
}

async function api(path, body) {
  const r = await fetch(`${base}${path}`, body ? { method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } } : {});
  return r;
}

function decodeTensors(buf) {
  const b = Buffer.from(buf);
  assert.equal(b.subarray(0, 4).toString('latin1'), 'ASTB');
  const n = b.readUInt32LE(4);
  const hdr = JSON.parse(b.subarray(8, 8 + n).toString('utf8'));
  const out = {};
  for (const t of hdr.tensors) {
    assert.equal(t.dtype, 'f32');
    const count = t.shape.reduce((x, y) => x * y, 1);
    const a = new Float32Array(count);
    for (let i = 0; i < count; i++) a[i] = b.readFloatLE(8 + n + t.offset + 4 * i);
    out[t.name] = { shape: t.shape, data: a };
  }
  return { meta: hdr.meta, t: out };
}

/** Records the URLs of the attention requests the page makes from now on. */
function watchAttention() {
  const urls = [];
  const on = (r) => {
    if (r.url().includes('/attention')) urls.push(new URL(r.url()));
  };
  page.on('request', on);
  return { urls, stop: () => page.off('request', on) };
}

/** The model view's opened head (window.__attnscope.modelView, lib/testhook.ts) against the
 *  API's full f32 matrix of that head: same size T x T, values within f16 rounding. */
async function checkOpenedHead(model, a, b, layer, head) {
  await page.waitForFunction(([l, h]) => {
    const m = window.__attnscope?.modelView?.matrix;
    return m && m.layer === l && m.head === h;
  }, [layer, head], { timeout: 30_000 });
  const m = await page.evaluate(() => {
    const x = window.__attnscope.modelView.matrix;
    return { size: x.size, values: Array.from(x.values) };
  });
  const run = await (await api('/api/v1/run', { model, text: a, text_b: b })).json();
  const { t } = decodeTensors(await (await api(`/api/v1/runs/${run.id}/attention?layers=${layer}&heads=${head}&dtype=f32`)).arrayBuffer());
  const T = run.sizes.tokens;
  assert.equal(m.size, T, 'the opened head is the full T x T matrix');
  assert.equal(m.values.length, T * T);
  let maxd = 0;
  for (let i = 0; i < T * T; i++) maxd = Math.max(maxd, Math.abs(m.values[i] - t.attention.data[i]));
  assert.ok(maxd < 1e-3, `opened head equals the API's matrix (max |diff| ${maxd})`);
}

// Head view geometry for 4 heads (web/src/lib/headview.ts headLayout).
const LEFT_X = 4 * 14 + 8 + 120 + 8;
const LINE_X1 = LEFT_X + 6;
const LINE_X2 = LINE_X1 + 260;

// ---- tests ------------------------------------------------------------------

test('head view renders lines and tokens', async () => {
  await page.goto(`${base}/`);
  await page.waitForSelector('[data-testid=model] option', { state: 'attached' });
  await runText('demo-bert', TEXT_A, TEXT_B);
  await page.waitForSelector('[data-testid=head-canvas]');
  await waitHint('drawn in');
  const lines = await pixels('head-canvas', LINE_X1 + 10, 30, LINE_X2 - LINE_X1 - 20, 400);
  const labels = await pixels('head-canvas', LEFT_X - 100, 30, 100, 400);
  const empty = await pixels('head-canvas', LINE_X2 + 6 + 120 + 4, 30, 4 * 14, 400); // where per-head bars go: empty before hovering
  assert.ok(lines.ink > 2000, `lines drawn (${lines.ink} px)`);
  assert.ok(labels.ink > 200, `query labels drawn (${labels.ink} px)`);
  assert.equal(empty.ink, 0, 'nothing right of the key labels before hovering');
  const status = await page.textContent('[data-testid=status]');
  assert.match(status, /\d+ tokens/);
  await shot('head-view');
});

test('toggling heads, layers and hovering change what is drawn', async () => {
  const region = [LINE_X1 + 10, 30, LINE_X2 - LINE_X1 - 20, 400];
  const all = await pixels('head-canvas', ...region);
  await page.dblclick('[data-testid=head-1]'); // only head 1 (orange)
  await page.waitForFunction(() => document.querySelector('[data-testid=head-0]').getAttribute('aria-pressed') === 'false');
  const only1 = await pixels('head-canvas', ...region);
  assert.ok(only1.ink < all.ink, 'fewer lines with one head');
  assert.ok(only1.reddish > 5 * Math.max(1, only1.bluish), `head 1 is orange (${only1.reddish} vs ${only1.bluish})`);
  await page.click('[data-testid=head-0]'); // add head 0 (blue)
  await page.waitForFunction(() => document.querySelector('[data-testid=head-0]').getAttribute('aria-pressed') === 'true');
  const with0 = await pixels('head-canvas', ...region);
  assert.ok(with0.bluish > only1.bluish + 200, `head 0 adds blue lines (${only1.bluish} -> ${with0.bluish})`);
  assert.match(page.url(), /heads=0%2C1|heads=0,1/);
  await shot('head-view-heads-0-1');

  await page.selectOption('[data-testid=layer]', '1');
  await waitHint('drawn in');
  await page.waitForFunction(() => new URLSearchParams(location.search).get('layer') === '1');
  const layer1 = await waitPixels('head-canvas', region, (p) => p.hash !== with0.hash && p.ink > 1000);
  assert.notEqual(layer1.hash, with0.hash, 'layer 1 draws differently from layer 0');

  // hover the query token 2 ("quick"): only its links, plus per-head bars on the right
  const rowH = 20, top = 28;
  await page.hover('[data-testid=head-canvas]', { position: { x: LEFT_X - 20, y: top + 2 * rowH + rowH / 2 } });
  const hovered = await waitPixels('head-canvas', region, (p) => p.ink < layer1.ink / 2);
  assert.ok(hovered.ink < layer1.ink / 2, `hover keeps only one token's links (${layer1.ink} -> ${hovered.ink})`);
  const bars = await pixels('head-canvas', LINE_X2 + 6 + 120 + 4, 30, 2 * 14, 400);
  assert.ok(bars.ink > 20, 'per-head weight bars next to the keys');
  await shot('head-view-hover');
  await page.mouse.move(5, 5);
});

test('URL state reloads the same view', async () => {
  await page.click('[data-testid=tab-neuron]');
  await page.selectOption('[data-testid=n-head]', '2');
  await page.selectOption('[data-testid=n-token]', '3');
  await page.waitForSelector('[data-testid=neuron-table]');
  const url = page.url();
  const q = new URL(url).searchParams;
  assert.equal(q.get('view'), 'neuron');
  assert.equal(q.get('layer'), '1');
  assert.equal(q.get('head'), '2');
  assert.equal(q.get('token'), '3');
  assert.equal(q.get('text'), TEXT_A);
  assert.equal(q.get('text_b'), TEXT_B);
  await page.goto('about:blank');
  await page.goto(url);
  await page.waitForSelector('[data-testid=neuron-table]');
  assert.equal(await page.inputValue('[data-testid=text]'), TEXT_A);
  assert.equal(await page.inputValue('[data-testid=n-layer]'), '1');
  assert.equal(await page.inputValue('[data-testid=n-head]'), '2');
  assert.equal(await page.inputValue('[data-testid=n-token]'), '3');
});

test("neuron view shows the engine's scores and softmax", async () => {
  const rows = await page.$$eval('[data-testid=neuron-table] tbody tr', (trs) =>
    trs.map((tr) => {
      const td = tr.querySelectorAll('td');
      return { key: +td[0].textContent, score: td[2].textContent.trim(), softmax: td[3].textContent.trim(),
               rawScore: +td[2].dataset.score, rawSoftmax: +td[3].dataset.softmax };
    }),
  );
  assert.ok(rows.length > 10);
  assert.ok((await page.textContent('body')).includes('q·k / √d = q·k / 4.000'), 'the UI states the 1/√d scaling (d = 16)');
  // the API's values for the same run
  const run = await (await api('/api/v1/run', { model: 'demo-bert', text: TEXT_A, text_b: TEXT_B })).json();
  assert.equal(run.cached, true, 'the run is served from the cache');
  const { meta, t } = decodeTensors(await (await api(`/api/v1/runs/${run.id}/qk?layer=1&head=2`)).arrayBuffer());
  const T = meta.tokens;
  assert.equal(rows.length, T);
  // and the CLI's
  const cli = JSON.parse(execFileSync(BIN, ['run', '--model', DEMO, '--text', TEXT_A, '--text-b', TEXT_B, '--layer', '1', '--head', '2',
    '--capture', 'attn,scores', '--format', 'json', '--threads', '2', '--quiet'], { maxBuffer: 1 << 26 }).toString());
  let sum = 0;
  for (const r of rows) {
    const s = t.scores.data[3 * T + r.key];
    const a = t.attention.data[3 * T + r.key];
    assert.equal(r.rawScore, s, `score of key ${r.key} is the API's`);
    assert.equal(r.rawSoftmax, a, `softmax of key ${r.key} is the API's`);
    assert.equal(r.score, s.toFixed(4));
    assert.equal(r.softmax, a.toFixed(4));
    assert.ok(Math.abs(cli.attention_scores[0][0][3][r.key] - s) < 1e-5, 'score matches attnscope run');
    assert.ok(Math.abs(cli.attentions[0][0][3][r.key] - a) < 1e-6, 'softmax matches attnscope run');
    sum += a;
  }
  assert.ok(Math.abs(sum - 1) < 1e-4, 'softmax sums to 1');
  const before_ = await pixels('neuron-canvas', 100, 120, 500, 300);
  assert.ok(before_.ink > 1000, 'vectors drawn');
  assert.ok(before_.bluish > 100 && before_.reddish > 100, 'positive blue and negative orange cells');
  await page.check('[data-testid=n-sort]');
  const sorted = await waitPixels('neuron-canvas', [100, 120, 500, 300], (p) => p.hash !== before_.hash);
  assert.notEqual(sorted.hash, before_.hash, 'sorting dimensions reorders the columns');
  await shot('neuron-view');
  const svg = await download('export-svg');
  const png = await download('export-png');
  assert.match(svg.name, /^attnscope-neuron-L1H2\.svg$/);
  checkExports(svg, png, 1500);
});

test('model view: thumbnails, open one large, heat-map mode, export', async () => {
  const seen = watchAttention();
  await page.click('[data-testid=tab-model]');
  await page.waitForSelector('[data-testid=grid-canvas]');
  await waitHint('loaded and drawn');
  // the whole grid is one request of pooled thumbnails (T < 64 here: P = T)
  assert.equal(seen.urls.length, 1, `one attention request for the grid (${seen.urls.join(' ')})`);
  assert.equal(seen.urls[0].searchParams.get('pool'), '64');
  assert.equal(seen.urls[0].searchParams.get('layers'), null, 'every layer');
  const hook = await page.evaluate(() => window.__attnscope.modelView);
  assert.equal(await page.getAttribute('[data-testid=grid-info]', 'data-pool'), String(hook.pool));
  assert.equal(hook.pool, Math.min(64, hook.tokens));
  // 2 layers x 4 heads; cell size from ModelView: clamp(floor(1100/4)-6, 48, 110) = 110, gap 6, left 56, top 22
  const cell = 110, gap = 6, left = 56, top = 22;
  for (let l = 0; l < 2; l++)
    for (let h = 0; h < 4; h++) {
      const p = await pixels('grid-canvas', left + h * (cell + gap) + 4, top + l * (cell + gap) + 4, cell - 8, cell - 8);
      assert.ok(p.ink > 50, `thumbnail L${l} H${h} drawn (${p.ink} px)`);
    }
  await page.click('[data-testid=grid-canvas]', { position: { x: left + 2 * (cell + gap) + 50, y: top + 1 * (cell + gap) + 50 } });
  await page.waitForSelector('[data-testid=matrix-canvas]');
  assert.match(await page.textContent('h3'), /Layer 1, head 2/);
  await checkOpenedHead('demo-bert', TEXT_A, TEXT_B, 1, 2);
  seen.stop();
  assert.ok(seen.urls.slice(1).every((u) => u.searchParams.get('pool') === null && u.searchParams.get('heads') === '2'),
    `opening a head fetches that head alone, if anything (${seen.urls.join(' ')})`);
  const lines = await pixels('grid-canvas', left, top, 4 * (cell + gap), 2 * (cell + gap));
  await page.selectOption('[data-testid=grid-mode]', 'matrix');
  const heat = await waitPixels('grid-canvas', [left, top, 4 * (cell + gap), 2 * (cell + gap)], (p) => p.hash !== lines.hash && p.bluish > 1000);
  assert.notEqual(heat.hash, lines.hash, 'heat-map mode draws differently');
  assert.ok(heat.bluish > 1000, 'heat maps are blue');
  const big = await pixels('matrix-canvas', 110, 110, 200, 200);
  assert.ok(big.ink > 1000, 'large heat map drawn');
  await shot('model-view');
  const svg = await download('export-svg');
  const png = await download('export-png');
  checkExports(svg, png, 3 * 400);
  assert.match(svg.bytes.toString('utf8'), /<image /, 'heat maps embedded as images in the SVG');
});

test('head view export', async () => {
  await page.click('[data-testid=tab-head]');
  await waitHint('drawn in');
  const svg = await download('export-svg');
  const png = await download('export-png');
  checkExports(svg, png, 3 * 500);
  const s = svg.bytes.toString('utf8');
  assert.ok(s.includes('>quick</text>'), 'token labels in the SVG');
  assert.ok(/<path d="M/.test(s), 'links in the SVG');
});

test('a 512-token input renders and stays interactive', async () => {
  const words = 'the king is dead long live the king and all his men'.split(' ');
  const a = [], b = [];
  for (let i = 0; i < 300; i++) a.push(words[i % words.length]);
  for (let i = 0; i < 209; i++) b.push(words[(i + 3) % words.length]);
  const t0 = Date.now();
  await runText('long-bert', a.join(' '), b.join(' '));
  await page.waitForFunction(() => /512 tokens/.test(document.querySelector('[data-testid=status]').textContent), null, { timeout: 60_000 });
  await page.waitForFunction(() => /512 tokens · drawn in/.test(document.body.innerText), null, { timeout: 60_000 });
  const firstRender = Date.now() - t0;
  const lines = await pixels('head-canvas', 4 * 14 + 8 + 128 + 16, 30, 240, 600);
  assert.ok(lines.ink > 2000, `512-token head view drawn (${lines.ink} px)`);
  // hover response: time from a mouse move to the redrawn frame
  const hoverMs = await page.evaluate(async () => {
    const c = document.querySelector('[data-testid=head-canvas]');
    const r = c.getBoundingClientRect();
    const t = performance.now();
    c.dispatchEvent(new MouseEvent('mousemove', { clientX: r.left + 150, clientY: r.top + 28 + 10 * 14 + 7, bubbles: true }));
    await new Promise((res) => requestAnimationFrame(() => requestAnimationFrame(res)));
    return performance.now() - t;
  });
  const drawMs = +(/drawn in ([\d.]+) ms/.exec(await page.textContent('body'))[1]);
  console.log(`512 tokens: first render ${firstRender} ms (run + fetch + draw), head view draw ${drawMs} ms, hover -> frame ${hoverMs.toFixed(1)} ms`);
  assert.ok(drawMs < 500, `head view draw ${drawMs} ms`);
  assert.ok(hoverMs < 500, `hover response ${hoverMs} ms`);
  // scrolling the virtualised columns redraws other rows
  const before_ = await pixels('head-canvas', 0, 0, 400, 600);
  await page.$eval('[data-testid=head-scroll]', (e) => (e.scrollTop = 3000));
  const after_ = await waitPixels('head-canvas', [0, 0, 400, 600], (p) => p.hash !== before_.hash);
  assert.notEqual(after_.hash, before_.hash, 'scrolling redraws');
  await shot('head-view-512');
  // model view: one request of 64 x 64 max-pooled thumbnails for every layer and head
  const run = await (await api('/api/v1/run', { model: 'long-bert', text: a.join(' '), text_b: b.join(' ') })).json();
  const { layers: L, heads: H } = run.sizes;
  const seen = watchAttention();
  const tm = Date.now();
  await page.click('[data-testid=tab-model]');
  await waitHint('loaded and drawn');
  const gridMs = +(/loaded and drawn in ([\d.]+) ms/.exec(await page.textContent('[data-testid=grid-info]'))[1]);
  console.log(`512 tokens: model view ${L} x ${H} thumbnails loaded and drawn in ${gridMs} ms (${Date.now() - tm} ms from the click)`);
  assert.equal(seen.urls.length, 1, `one attention request for ${L} x ${H} thumbnails`);
  assert.equal(seen.urls[0].searchParams.get('pool'), '64');
  assert.equal(await page.getAttribute('[data-testid=grid-info]', 'data-pool'), '64');
  assert.match(await page.textContent('[data-testid=grid-info]'), /max-pooled to 64 × 64/);
  assert.ok(gridMs < 3000, `model view loaded and drawn in ${gridMs} ms`);
  const cell = Math.max(48, Math.min(110, Math.floor(1100 / H) - 6)), gap = 6, left = 56, top = 22;
  const grid = await pixels('grid-canvas', left, top, Math.min(H, 4) * (cell + gap), Math.min(L, 2) * (cell + gap));
  assert.ok(grid.ink > 500, `thumbnails drawn (${grid.ink} px)`);
  // open a head of a layer the head view did not fetch: its full 512 x 512 matrix comes alone
  const hvLayer = +(new URL(page.url()).searchParams.get('layer') ?? 0);
  const ol = (hvLayer + 1) % L, oh = H - 1;
  await page.click('[data-testid=grid-canvas]', { position: { x: left + oh * (cell + gap) + cell / 2, y: top + ol * (cell + gap) + cell / 2 } });
  await page.waitForSelector('[data-testid=matrix-canvas]');
  await checkOpenedHead('long-bert', a.join(' '), b.join(' '), ol, oh);
  seen.stop();
  assert.equal(seen.urls.length, 2, `the opened head is one more request (${seen.urls.join(' ')})`);
  assert.equal(seen.urls[1].searchParams.get('pool'), null);
  assert.equal(seen.urls[1].searchParams.get('layers'), String(ol));
  assert.equal(seen.urls[1].searchParams.get('heads'), String(oh));
  const bigInk = await waitPixels('matrix-canvas', [110, 110, 400, 400], (p) => p.ink > 1000);
  assert.ok(bigInk.ink > 1000, 'large heat map drawn');
  await shot('model-view-512');
  await page.click('[data-testid=tab-neuron]');
  await page.waitForSelector('[data-testid=neuron-table]');
  const n = await page.$$eval('[data-testid=neuron-table] tbody tr', (trs) => trs.length);
  assert.equal(n, 64, 'neuron view lists the 64 most attended keys at 512 tokens');
  await shot('neuron-view-512');
});

test('causal GPT-2: no link to a later token, future keys masked, a pair without [SEP]', async () => {
  const A = 'The cat sat on the mat.';
  const B = ' It was tired.';
  await page.goto(`${base}/`);
  await page.waitForSelector('[data-testid=model] option', { state: 'attached' });
  await page.selectOption('[data-testid=model]', 'gpt2-tiny');
  assert.equal(await page.isEnabled('[data-testid=text-b]'), true, 'sentence B can be given for GPT-2');
  assert.match(await page.textContent('[data-testid=input-hint]'), /no separator token/);
  await runText('gpt2-tiny', A, B);
  await waitHint('drawn in');
  const run = await (await api('/api/v1/run', { model: 'gpt2-tiny', text: A, text_b: B })).json();
  assert.equal(run.cached, true);
  assert.equal(run.causal, true);
  const T = run.sizes.tokens;
  assert.ok(run.tokens.every((t) => !t.special && !/\[SEP\]|<\|endoftext\|>/.test(t.piece)), 'no [SEP] or other special token');
  const nA = run.tokens.filter((t) => t.segment === 0).length;
  assert.ok(nA > 0 && nA < T && run.tokens.slice(nA).every((t) => t.segment === 1), 'B follows A');
  const note = await page.textContent('[data-testid=causal-note]');
  assert.match(note, /no links to later tokens/);
  assert.match(note, /A→B links cannot/);
  // the head view's computed links: every one goes to the same or an earlier token
  const links = await page.evaluate(() =>
    window.__attnscope.headLinks.map((h) => ({ head: h.head, i: Array.from(h.i), j: Array.from(h.j) })),
  );
  assert.equal(links.length, 4);
  let n = 0;
  for (const h of links)
    h.i.forEach((q, k) => {
      assert.ok(h.j[k] <= q, `head ${h.head}: link ${q} -> ${h.j[k]} goes to a later token`);
      n++;
    });
  assert.ok(n >= (4 * T * (T + 1)) / 4, `most allowed links drawn (${n})`);
  // pixels: hovering the last key keeps only links into it, which only the last query has
  const rowH = 20, top = 28, rightX = LINE_X2 + 6;
  const lastY = top + (T - 1) * rowH;
  await page.hover('[data-testid=head-canvas]', { position: { x: rightX + 20, y: lastY + rowH / 2 } });
  const above = await waitPixels('head-canvas', [LINE_X1 + 4, top, LINE_X2 - LINE_X1 - 8, lastY - top - 4], (p) => p.ink === 0);
  const row = await pixels('head-canvas', LINE_X1 + 4, lastY, LINE_X2 - LINE_X1 - 8, rowH);
  assert.equal(above.ink, 0, 'no link into the last token from an earlier query');
  assert.ok(row.ink > 50, `the last query's own link is drawn (${row.ink} px)`);
  // hovering the first key: every query attends to it, so lines fan out over all rows
  await page.hover('[data-testid=head-canvas]', { position: { x: rightX + 20, y: top + rowH / 2 } });
  const fan = await waitPixels('head-canvas', [LINE_X1 + 4, top + rowH * 2, LINE_X2 - LINE_X1 - 8, lastY - top], (p) => p.ink > 500);
  assert.ok(fan.ink > 500, `links from later queries into the first token (${fan.ink} px)`);
  await page.mouse.move(5, 5);
  await shot('gpt2-head-view');
  // pair filter: A→B is disabled (empty for a causal model); B→A links exist
  assert.equal(await page.isDisabled('[data-testid=filter] option[value=ab]'), true);
  await page.selectOption('[data-testid=filter]', 'ba');
  await page.waitForFunction((nA) => window.__attnscope.headLinks.every((h) => Array.from(h.i).every((q, k) => q >= nA && h.j[k] < nA)), nA);
  const ba = await page.evaluate(() => window.__attnscope.headLinks.reduce((s, h) => s + h.n, 0));
  assert.ok(ba > 0, `B→A links (${ba})`);
  // neuron view: the softmax column is 0 and the score "masked" for every future key
  await page.click('[data-testid=tab-neuron]');
  await page.selectOption('[data-testid=n-token]', '2');
  await page.waitForSelector('[data-testid=neuron-table]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=neuron-table] tbody tr').length > 0);
  const rows = await page.$$eval('[data-testid=neuron-table] tbody tr', (trs) =>
    trs.map((tr) => {
      const td = tr.querySelectorAll('td');
      return { key: +td[0].textContent, score: td[2].textContent.trim(), softmax: td[3].textContent.trim(), raw: +td[3].dataset.softmax };
    }),
  );
  assert.equal(rows.length, T);
  let sum = 0;
  for (const r of rows) {
    if (r.key > 2) {
      assert.equal(r.softmax, '0.0000', `future key ${r.key}: softmax 0`);
      assert.equal(r.raw, 0);
      assert.equal(r.score, 'masked', `future key ${r.key}: score masked`);
    } else {
      assert.notEqual(r.score, 'masked');
      sum += r.raw;
    }
  }
  assert.ok(Math.abs(sum - 1) < 1e-5, `softmax over keys 0..2 sums to 1 (${sum})`);
  // scale_attn_by_inverse_layer_idx: layer 1's scores are q.k / (sqrt(8) x 2), and the view says so
  await page.selectOption('[data-testid=n-layer]', '1');
  await page.waitForFunction(() => document.body.textContent.includes("this model's scaling"));
  assert.ok((await page.textContent('body')).includes(`q·k × ${(1 / (Math.sqrt(8) * 2)).toPrecision(4)}`));
  const qk1 = decodeTensors(await (await api(`/api/v1/runs/${run.id}/qk?layer=1&head=0`)).arrayBuffer());
  assert.ok(Math.abs(qk1.meta.scale - 1 / (Math.sqrt(8) * 2)) < 1e-7, `API scale ${qk1.meta.scale}`);
  const Dh = qk1.meta.d_head, q = qk1.t.q.data, k = qk1.t.k.data;
  for (let j = 0; j <= 2; j++) { // the engine's score of a visible key is q.k times that factor
    let dot = 0;
    for (let x = 0; x < Dh; x++) dot += q[2 * Dh + x] * k[j * Dh + x];
    assert.ok(Math.abs(qk1.t.scores.data[2 * T + j] - dot * qk1.meta.scale) < 1e-4, `score 2->${j}`);
  }
  await page.selectOption('[data-testid=n-layer]', '0');
  await shot('gpt2-neuron-view');
});

test('API errors are shown, not thrown', async () => {
  await page.goto(`${base}/?model=demo-bert&text=${encodeURIComponent('word '.repeat(200))}`);
  await page.waitForFunction(() => document.querySelector('[data-testid=status]')?.textContent.includes('maximum'), null, { timeout: 30_000 });
  await shot('error');
});
