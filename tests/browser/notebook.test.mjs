// notebook.test.mjs — the Python package's standalone views (attnscope.head_view(r,
// html_action="return"), neuron_view, python/attnscope/views.py) in headless Chromium with
// every network request blocked: the page holds the web bundle and the run and needs
// nothing else. Checks the head view's token labels against the run's tokens, its links'
// weights against the run's float16 attention (computed in Python), the model view's
// thumbnails and the neuron view's scores; the notebook cell's output (an iframe srcdoc,
// the run's elements beside it, read again by a reloaded frame)
// runs the view inside its frame, which grows to the content; no request, no page error.
// Last, server=: the cell's iframe shows the real `attnscope serve` (harness.mjs, with
// --frame-ancestors naming the notebook's origin) on the same input, the only origin the
// page may reach.
// The generation view of a beam search on BART (attnscope.generation_view): every hypothesis,
// and the self- and cross-attention rows shown at chosen steps, layers and heads equal to the
// Generation's (float32), offline.
// The head overview of an analysis database (attnscope.overview) offline: a glyph per head,
// each head's tooltip scores and pattern equal to the database's rows. bertviz's
// encoder-decoder arguments: the Encoder / Decoder / Cross selector and each part's weights.
// The example notebook python/examples/views.ipynb executed by nbclient and converted by
// nbconvert: its four views paint inside the converted page, hover works, SVG and PNG
// export from inside the frame, nothing is fetched but the template's local scripts.
// Screenshots: artifacts/notebook-head.png, artifacts/notebook-overview.png,
// artifacts/notebook-cross.png.
// Needs /usr/bin/python3 with numpy, ATTNSCOPE_LIB (libattnscope.so) and the built web
// front end (ATTNSCOPE_WEB or <build>/web-dist next to the library); CTest sets both.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createServer } from 'node:http';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const ART = join(HERE, 'artifacts');
let tmp, browser, page;

// Writes the pages and what the checks compare with (tokens, float16 attention of the
// layer shown, the neuron view's scores) from Python.
const PY = String.raw`
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import attnscope
out = sys.argv[2]
m = attnscope.load(os.path.join(sys.argv[1], "models", "attnscope-sst2"))
r = m.run("the movie was surprisingly good .", text_b="i would watch it again .")
attnscope.head_view(r, layer=2).save(os.path.join(out, "head.html"))
attnscope.head_view(r, layer=2, dtype="u8").save(os.path.join(out, "head_u8.html"))
attnscope.neuron_view(r, layer=1, head=3, token=4).save(os.path.join(out, "neuron.html"))
# what a notebook does with the cell's output: its HTML (an iframe srcdoc) inside the page
open(os.path.join(out, "cell.html"), "w").write(
    "<!doctype html><html><body><h1>notebook</h1><div class=output>%s</div></body></html>"
    % attnscope.model_view(r, layer=2, head=1)._repr_html_())
labels = [t["piece"] if t["special"] else (t["text"] or t["piece"]) for t in r.tokens]
json.dump({"labels": labels, "L": int(r.attentions.shape[0]), "H": int(r.attentions.shape[1]),
           "att2": r.attentions[2].astype(np.float16).astype(np.float32).tolist(),
           "att2u8": np.float32((1 / 255) * np.rint(np.clip(r.attentions[2], 0, 1) * 255).astype(np.float64)).tolist(),
           "scores13": r.attention_scores[1, 3, 4].tolist()}, open(os.path.join(out, "expect.json"), "w"))
# the head overview of an analysis database (the committed import fixture), and the
# database's own rows, read here with sqlite3, for the checks
import sqlite3
db = os.path.join(out, "analysis.sqlite")
attnscope.import_dir(os.path.join(sys.argv[1], "tests", "ref", "fixtures", "analysis", "import"), db)
attnscope.overview(db, layer=1, head=0).save(os.path.join(out, "overview.html"))
con = sqlite3.connect(db)
L, H = con.execute("SELECT n_layer, n_head FROM runs").fetchone()
rows = {"%d,%d" % (l, h): {"importance": i, "semantic": se, "syntactic": sy}
        for l, h, i, se, sy in con.execute("SELECT layer, head, importance, semantic, syntactic FROM head_scores")}
pats = {"%d,%d" % (l, h): p for l, h, p in con.execute("SELECT layer, head, label FROM patterns")}
json.dump({"L": L, "H": H, "scores": rows, "patterns": pats}, open(os.path.join(out, "overview.json"), "w"))
# bertviz's encoder-decoder arguments (shaped as a T5's outputs: per layer [1, H, T, T], cross [1, H, T_dec, T_enc])
from attnscope.bertviz import head_view as bv_head_view
rng = np.random.default_rng(0)
def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)).astype(np.float32)
Te, Td, EL, EH = 7, 5, 3, 4
enc = tuple(softmax(rng.normal(size=(1, EH, Te, Te)) * 2) for _ in range(EL))
dec = tuple(softmax(rng.normal(size=(1, EH, Td, Td)) * 2 + np.triu(np.full((Td, Td), -np.inf), 1)) for _ in range(EL))
cross = tuple(softmax(rng.normal(size=(1, EH, Td, Te)) * 2) for _ in range(EL))
et = ["▁the", "▁cat", "▁sat", "▁on", "▁the", "▁mat", "</s>"]
dt = ["<pad>", "▁le", "▁chat", "▁assis", "</s>"]
open(os.path.join(out, "encdec.html"), "w").write(bv_head_view(
    encoder_attention=enc, decoder_attention=dec, cross_attention=cross, encoder_tokens=et, decoder_tokens=dt,
    layer=1, html_action="return"))
f16 = lambda a: a[0].astype(np.float16).astype(np.float32).tolist()
json.dump({"Te": Te, "Td": Td, "H": EH, "enc": f16(enc[1]), "dec": f16(dec[1]), "cross": f16(cross[1])},
          open(os.path.join(out, "encdec.json"), "w"))
# the generation view of a beam search on an encoder-decoder model (the committed bart_tiny)
b = attnscope.load(os.path.join(sys.argv[1], "tests", "ref", "fixtures", "models", "bart_tiny"))
g = b.generate(ids=[0, 17, 45, 9, 88, 23, 2], max_new=6, beams=3, num_return=3)
attnscope.generation_view(g, layer=1, head=2).save(os.path.join(out, "generation.html"))
json.dump({"hyps": [h.ids.tolist() for h in g.hypotheses], "scores": [h.score for h in g.hypotheses],
           "self": [h.attentions.tolist() for h in g.hypotheses], "cross": [h.cross_attentions.tolist() for h in g.hypotheses],
           "P": g.prompt_length}, open(os.path.join(out, "generation.json"), "w"))
# the example notebook executed by nbclient (a kernel of Debian's /usr/bin/python3) and
# converted to HTML by nbconvert (Debian's jupyter-nbconvert, lab template), as a user shares it
import tempfile
import nbformat
from nbclient import NotebookClient
from nbconvert import HTMLExporter
nb = nbformat.read(os.path.join(sys.argv[1], "python", "examples", "views.ipynb"), as_version=4)
with tempfile.TemporaryDirectory() as d:
    spec = os.path.join(d, "kernels", "attnscope-test")
    os.makedirs(spec)
    json.dump({"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
               "display_name": "attnscope test", "language": "python"}, open(os.path.join(spec, "kernel.json"), "w"))
    os.environ.update(JUPYTER_PATH=d, PYDEVD_DISABLE_FILE_VALIDATION="1")
    NotebookClient(nb, timeout=300, kernel_name="attnscope-test",
                   resources={"metadata": {"path": os.path.join(sys.argv[1], "python", "examples")}}).execute()
open(os.path.join(out, "notebook.html"), "w").write(HTMLExporter(template_name="lab").from_notebook_node(nb)[0])
`;

/** Opens a standalone page with every request refused; returns the requests it tried. */
async function open(file) {
  const requests = [];
  const errors = [];
  page.removeAllListeners('request');
  page.on('request', (r) => requests.push(r.url()));
  page.on('pageerror', (e) => errors.push(e.message));
  await page.setContent(readFileSync(join(tmp, file), 'utf8'), { waitUntil: 'load' });
  return { requests, errors };
}

async function ink(testid) {
  return page.evaluate((testid) => {
    const c = document.querySelector(`[data-testid="${testid}"]`);
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 735 && d[i + 3] > 0) n++;
    return n;
  }, testid);
}

before(async () => {
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-nb-'));
  const p = spawnSync('/usr/bin/python3', ['-c', PY, ROOT, tmp], { encoding: 'utf8', timeout: 300_000 });
  assert.equal(p.status, 0, `python: ${p.stderr}`);
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { height: 1000, offline: true }));
  await browser.route('**/*', (route) => route.abort()); // nothing may come from the network
});

after(async () => {
  await browser?.close();
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('standalone head view: drawn offline with the run\'s tokens and weights', async () => {
  const exp = JSON.parse(readFileSync(join(tmp, 'expect.json'), 'utf8'));
  const { requests, errors } = await open('head.html');
  await page.waitForFunction(() => window.__attnscope?.headDraw?.links > 0, null, { timeout: 30_000 });
  assert.equal(await page.inputValue('[data-testid=layer]'), '2', 'the layer asked for');
  // the query and key buttons laid over the canvas, one per token, with the token labels
  const labels = await page.$$eval('[data-testid=head-focus] button', (bs) => bs.map((b) => b.getAttribute('aria-label')));
  const T = exp.labels.length;
  assert.equal(labels.length, 2 * T);
  exp.labels.forEach((tok, i) => assert.equal(labels[2 * i], `query ${i}: ${tok}`));
  assert.ok(exp.labels.includes('surprisingly') && exp.labels.includes('[SEP]'));
  // every drawn link's weight is the run's float16 attention of layer 2, exactly
  const links = await page.evaluate(() => window.__attnscope.headLinks.map((h) => ({ head: h.head, i: Array.from(h.i), j: Array.from(h.j), w: Array.from(h.w) })));
  assert.equal(links.length, exp.H);
  let n = 0;
  for (const h of links)
    h.i.forEach((q, k) => {
      assert.equal(h.w[k], exp.att2[h.head][q][h.j[k]], `L2 H${h.head} ${q}->${h.j[k]}`);
      n++;
    });
  assert.ok(n > T, `links drawn (${n})`);
  assert.ok((await ink('head-canvas')) > 2000, 'the head view is drawn');
  assert.match(await page.textContent('[data-testid=embed-title]'), new RegExp(`attnscope-sst2 · ${T} tokens`));
  mkdirSync(ART, { recursive: true });
  await page.screenshot({ path: join(ART, 'notebook-head.png') });
  // the model view from the same page: thumbnails max-pooled in the page
  await page.click('[data-testid=tab-model]');
  await page.waitForFunction(() => window.__attnscope?.modelView?.pool > 0);
  assert.equal(await page.evaluate(() => window.__attnscope.modelView.pool), Math.min(64, T));
  assert.deepEqual(requests, [], 'no request left the page');
  assert.deepEqual(errors, []);
});

test('standalone head view with u8 attention: weights are the bytes / 255', async () => {
  const exp = JSON.parse(readFileSync(join(tmp, 'expect.json'), 'utf8'));
  const { requests, errors } = await open('head_u8.html');
  await page.waitForFunction(() => window.__attnscope?.headDraw?.links > 0, null, { timeout: 30_000 });
  const links = await page.evaluate(() => window.__attnscope.headLinks.map((h) => ({ head: h.head, i: Array.from(h.i), j: Array.from(h.j), w: Array.from(h.w) })));
  for (const h of links) h.i.forEach((q, k) => assert.equal(h.w[k], exp.att2u8[h.head][q][h.j[k]], `L2 H${h.head} ${q}->${h.j[k]}`));
  assert.deepEqual(requests, []);
  assert.deepEqual(errors, []);
});

test('standalone neuron view: the run\'s scores of the pinned query', async () => {
  const exp = JSON.parse(readFileSync(join(tmp, 'expect.json'), 'utf8'));
  const { requests, errors } = await open('neuron.html');
  await page.waitForSelector('[data-testid=neuron-canvas]');
  assert.equal(await page.inputValue('[data-testid=n-token]'), '4');
  await page.waitForSelector('[data-testid=neuron-table] tr[data-key]');
  // the numbers table: each listed key's score is the run's attention_scores[1, 3, 4, key], exactly
  const rows = await page.$$eval('[data-testid=neuron-table] tr[data-key]', (trs) =>
    trs.map((tr) => ({ j: +tr.dataset.key, score: Number(tr.querySelector('[data-score]').dataset.score) })));
  assert.ok(rows.length > 0);
  for (const r of rows) assert.equal(r.score, exp.scores13[r.j], `score of key ${r.j}`);
  assert.ok((await ink('neuron-canvas')) > 1000);
  assert.deepEqual(requests, []);
  assert.deepEqual(errors, []);
});

test('a notebook cell\'s output: the view runs inside its srcdoc frame, which fits the content', async () => {
  const { requests, errors } = await open('cell.html');
  const frame = page.frameLocator('iframe');
  await frame.locator('[data-testid=tab-model].active').waitFor();
  const f = page.frames().find((x) => x !== page.mainFrame());
  await f.waitForFunction(() => window.__attnscope?.modelView?.pool > 0);
  assert.deepEqual(await f.evaluate(() => ({ pool: window.__attnscope.modelView.pool, tokens: window.__attnscope.modelView.tokens })), { pool: 15, tokens: 15 });
  // the page's own styles stay in the frame; the frame follows its content's height
  assert.equal(await page.evaluate(() => getComputedStyle(document.body).marginLeft), '8px');
  await page.waitForFunction(() => {
    const el = document.querySelector('iframe');
    return Math.abs(el.getBoundingClientRect().height - el.contentDocument.documentElement.scrollHeight) <= 8;
  });
  // the run's elements are beside the frame, in the notebook's document: a reloaded frame
  // (a notebook re-attaching the cell) reads them again, every layer included
  assert.equal(await page.$$eval('.attnscope-cell > div[hidden] script.attnscope-layer', (e) => e.length), 4);
  await page.evaluate(() => {
    const el = document.querySelector('iframe');
    el.srcdoc = el.getAttribute('srcdoc');
  });
  await page.waitForFunction(() => document.querySelector('iframe').contentWindow.__attnscope?.modelView?.pool > 0);
  assert.equal(await page.evaluate(() => document.querySelector('iframe').contentWindow.__attnscope.loadedLayers), 4);
  assert.deepEqual(requests, []);
  assert.deepEqual(errors, []);
});

test('standalone head overview: every head drawn offline, tooltips give the database\'s scores', async () => {
  const exp = JSON.parse(readFileSync(join(tmp, 'overview.json'), 'utf8'));
  const { requests, errors } = await open('overview.html');
  await page.waitForSelector('[data-testid=overview-canvas]');
  await page.waitForFunction(() => {
    const c = document.querySelector('[data-testid=overview-canvas]');
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    let n = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 735 && d[i + 3] > 0) n++;
    return n > 1000;
  }, null, { timeout: 30_000 });
  assert.match(await page.textContent('[data-testid=embed-title]'), /analysis\.sqlite · import · 8 sentences · L1H0/);
  // one keyboard button per head, in index order
  const focus = await page.$$eval('[data-testid=overview-focus] button', (bs) => bs.map((b) => b.getAttribute('aria-label')));
  assert.equal(focus.length, exp.L * exp.H, 'a glyph per head');
  const box = await page.locator('[data-testid=overview-canvas]').boundingBox();
  const fmt = (v) => (v === null ? '—' : v.toFixed(3));
  let checked = 0;
  for (let l = 0; l < exp.L; l++)
    for (let h = 0; h < exp.H; h++) {
      const db = exp.scores[`${l},${h}`];
      assert.ok(focus[l * exp.H + h].startsWith(`layer ${l} head ${h}:`), focus[l * exp.H + h]);
      // glyph (l, h): sorted by index, 64 px cells for <= 14 heads (tests/browser/dodrio.test.mjs)
      await page.mouse.move(box.x + 44 + h * 64 + 32, box.y + 26 + l * 64 + 32);
      await page.waitForFunction((s) => document.querySelector('[data-testid=ov-tip]')?.textContent.includes(s), `L${l}H${h}`);
      const tip = await page.textContent('[data-testid=ov-tip]');
      if (!db) continue; // a head without a row of scores
      assert.ok(tip.includes(`importance ${fmt(db.importance)} · semantic ${fmt(db.semantic)} · syntactic ${fmt(db.syntactic)}`), tip);
      if (exp.patterns[`${l},${h}`]) assert.ok(tip.includes(exp.patterns[`${l},${h}`]), tip);
      checked++;
    }
  assert.ok(checked >= 4, `heads checked against the database (${checked})`);
  // clicking a glyph selects its head
  await page.mouse.click(box.x + 44 + 2 * 64 + 32, box.y + 26 + 0 * 64 + 32);
  await page.waitForFunction(() => document.querySelector('[data-testid=embed-selected]').textContent === 'L0H2');
  mkdirSync(ART, { recursive: true });
  await page.screenshot({ path: join(ART, 'notebook-overview.png') });
  assert.deepEqual(requests, [], 'no request left the page');
  assert.deepEqual(errors, []);
});

test('standalone generation view: a beam search\'s hypotheses and every row offline', async () => {
  const want = JSON.parse(readFileSync(join(tmp, 'generation.json'), 'utf8'));
  const { requests, errors } = await open('generation.html');
  await page.waitForFunction(() => window.__attnscope?.generation);
  assert.equal(await page.locator('[data-testid=gen-hyp]').count(), want.hyps.length);
  for (const [r, [s, l, h]] of [[0, [0, 1, 2]], [2, [3, 0, 1]]]) {
    await page.click(`[data-testid=gen-hyp][data-k="${r}"]`);
    await page.selectOption('[data-testid=gen-layer]', String(l));
    await page.selectOption('[data-testid=gen-head]', String(h));
    await page.$eval('[data-testid=gen-step]', (e, v) => {
      e.value = String(v);
      e.dispatchEvent(new Event('input', { bubbles: true }));
    }, s);
    await page.waitForFunction(([r, s, l, h]) => {
      const g = window.__attnscope.generation;
      return g.hyp === r && g.step === s && g.layer === l && g.head === h;
    }, [r, s, l, h]);
    const g = await page.evaluate(() => window.__attnscope.generation);
    assert.deepEqual(g.ids, want.hyps[r]);
    const self = want.self[r][s][l][h].slice(0, want.P + s), cross = want.cross[r][s][l][h];
    assert.deepEqual(g.row.map(Math.fround), self.map(Math.fround), `hypothesis ${r} step ${s} L${l}H${h}: self row`);
    assert.deepEqual(g.cross.map(Math.fround), cross.map(Math.fround), `hypothesis ${r} step ${s} L${l}H${h}: cross row`);
    assert.ok((await page.getAttribute(`[data-testid=gen-hyp][data-k="${r}"]`, 'title')).includes(want.scores[r].toFixed(4)));
  }
  assert.ok(await ink('gen-grid') > 50, 'the grid is drawn');
  await page.screenshot({ path: join(ART, 'notebook-generation.png'), fullPage: true });
  assert.deepEqual(requests, [], 'no request left the page');
  assert.deepEqual(errors, []);
});

test('bertviz encoder-decoder arguments: an Encoder / Decoder / Cross selector, each part\'s weights', async () => {
  const exp = JSON.parse(readFileSync(join(tmp, 'encdec.json'), 'utf8'));
  const { requests, errors } = await open('encdec.html');
  const opts = await page.$$eval('[data-testid=embed-part] option', (os) => os.map((o) => o.textContent));
  assert.deepEqual(opts, ['Encoder', 'Decoder', 'Cross']);
  const links = () => page.evaluate(() => window.__attnscope.headLinks.map((h) => ({ head: h.head, i: Array.from(h.i), j: Array.from(h.j), w: Array.from(h.w) })));
  const parts = [
    ['0', exp.Te, (h, q, k) => exp.enc[h][q][k]],
    ['1', exp.Td, (h, q, k) => { assert.ok(k <= q, `decoder link ${q}->${k} is causal`); return exp.dec[h][q][k]; }],
    // cross: the encoder's tokens (0..Te-1) then the decoder's; links go from decoder queries to encoder keys
    ['2', exp.Te + exp.Td, (h, q, k) => { assert.ok(q >= exp.Te && k < exp.Te, `cross link ${q}->${k}`); return exp.cross[h][q - exp.Te][k]; }],
  ];
  for (const [part, T, want] of parts) {
    if (part !== '0') {
      await page.evaluate(() => { window.__attnscope.headDraw = null; });
      await page.selectOption('[data-testid=embed-part]', part);
    }
    await page.waitForFunction((T) => window.__attnscope?.headDraw?.links > 0 && document.querySelectorAll('[data-testid=head-focus] button').length === 2 * T, T, { timeout: 30_000 });
    assert.equal(await page.inputValue('[data-testid=layer]'), '1', `part ${part}: the layer asked for`);
    const ls = await links();
    assert.equal(ls.length, exp.H);
    let n = 0;
    for (const h of ls) h.i.forEach((q, k) => { assert.equal(h.w[k], want(h.head, q, h.j[k]), `part ${part} H${h.head} ${q}->${h.j[k]}`); n++; });
    assert.ok(n >= T, `part ${part}: links drawn (${n})`);
    assert.ok((await ink('head-canvas')) > 1000, `part ${part}: drawn`);
  }
  const labels = await page.$$eval('[data-testid=head-focus] button', (bs) => bs.filter((_, i) => i % 2 === 0).map((b) => b.getAttribute('aria-label')));
  assert.equal(labels[1], 'query 1:  cat'); // prettify_tokens: '▁' is a space, as in bertviz
  assert.equal(labels[exp.Te + 2], `query ${exp.Te + 2}:  chat`);
  mkdirSync(ART, { recursive: true });
  await page.screenshot({ path: join(ART, 'notebook-cross.png') });
  assert.deepEqual(requests, []);
  assert.deepEqual(errors, []);
});

test('the example notebook, executed and converted by nbconvert: every view paints offline, hover and export work', async () => {
  const { requests, errors } = await open('notebook.html');
  await page.waitForFunction(() => document.querySelectorAll('iframe').length === 4);
  const frames = page.frames().filter((f) => f !== page.mainFrame());
  assert.equal(frames.length, 4, 'head, model, neuron and the bertviz drop-in\'s head view');
  for (const f of frames) {
    // every canvas of the view, pixels not white
    await f.waitForFunction(() => {
      let n = 0;
      for (const c of document.querySelectorAll('canvas')) {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        for (let i = 0; i < d.length; i += 4) if (d[i] + d[i + 1] + d[i + 2] < 735 && d[i + 3] > 0) n++;
      }
      return n > 1000;
    }, null, { timeout: 60_000 });
  }
  // hover: the head view keeps only the links of the token under the pointer
  const head = frames[0];
  await head.waitForFunction(() => window.__attnscope?.headDraw?.links > 0);
  const all = await head.evaluate(() => window.__attnscope.headDraw.links);
  const b = await head.locator('[data-testid=head-focus] button').nth(2 * 3).boundingBox(); // query token 3
  await page.mouse.move(b.x + b.width / 2, b.y + b.height / 2);
  await head.waitForFunction(() => window.__attnscope.headDraw.hover?.token === 3 && window.__attnscope.headDraw.hover.side === 'left');
  assert.ok(await head.evaluate((n) => window.__attnscope.headDraw.links <= n, all));
  mkdirSync(ART, { recursive: true });
  await page.screenshot({ path: join(ART, 'notebook-nbconvert.png') });
  // SVG and PNG export from inside the notebook's frame
  const saved = async (testid) => {
    const [d] = await Promise.all([page.waitForEvent('download'), head.click(`[data-testid=${testid}]`)]);
    return { name: d.suggestedFilename(), bytes: readFileSync(await d.path()) };
  };
  const svg = await saved('export-svg');
  assert.match(svg.name, /^attnscope-head-L1\.svg$/);
  assert.ok(svg.bytes.toString('utf8').includes('<svg') && svg.bytes.toString('utf8').includes('was'), 'the SVG has the tokens');
  const png = await saved('export-png');
  assert.equal(png.name, 'attnscope-head-L1.png');
  assert.deepEqual([...png.bytes.subarray(0, 8)], [137, 80, 78, 71, 13, 10, 26, 10]);
  assert.ok(png.bytes.length > 2000);
  // nothing from the network: the only requests are the lab template's own local scripts (Debian's requirejs, MathJax)
  assert.deepEqual(requests.filter((u) => !u.startsWith('file:///usr/share/javascript/')), [], 'no request but the template\'s local scripts');
  assert.deepEqual(errors.filter((e) => !/require|MathJax/i.test(e)), []);
});

test('server=: the cell is an iframe on a running attnscope serve, showing the same run', async () => {
  const bin = process.env.ATTNSCOPE_BIN;
  assert.ok(bin, 'ATTNSCOPE_BIN (tests/browser/run.sh sets it)');
  // the notebook's page, served on loopback by a server of this test (as Jupyter serves its
  // notebooks on localhost; Chromium lets only local pages frame a loopback server)
  let cell = '';
  const nbServer = createServer((req, res) => res.writeHead(200, { 'Content-Type': 'text/html' }).end(cell));
  await new Promise((r) => nbServer.listen(0, '127.0.0.1', r));
  const NB = `http://127.0.0.1:${nbServer.address().port}`;
  const { p, url } = await startServer(bin, ['--model', join(ROOT, 'models', 'attnscope-sst2'), '--frame-ancestors', NB]);
  try {
    // the pages may be framed by NB only; without the option by nothing
    const csp = (await fetch(`${url}/`)).headers.get('content-security-policy');
    assert.ok(csp.endsWith(`; frame-ancestors ${NB}`), csp);
    const py = `
import os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "python"))
import attnscope
r = attnscope.load(os.path.join(sys.argv[1], "models", "attnscope-sst2")).run("the movie was good .")
print(attnscope.model_view(r, layer=1, server=sys.argv[2])._repr_html_())
`;
    const q = spawnSync('/usr/bin/python3', ['-c', py, ROOT, url], { encoding: 'utf8', timeout: 120_000 });
    assert.equal(q.status, 0, q.stderr);
    assert.match(q.stdout, /^<iframe src="http:\/\/127\.0\.0\.1:\d+\/\?model=attnscope-sst2&amp;text=the\+movie/);
    await browser.unroute('**/*');
    await browser.setOffline(false);
    const other = [];
    cell = `<!doctype html><html><body>${q.stdout}</body></html>`;
    await browser.route('**/*', (route) => {
      const u = route.request().url();
      if (u.startsWith(url) || u.startsWith(NB)) return route.continue();
      other.push(u);
      return route.abort();
    });
    await page.goto(`${NB}/cell.html`);
    const f = await (await page.waitForSelector('iframe')).contentFrame(); // another origin: evaluated inside it
    await f.waitForFunction(() => window.__attnscope?.modelView?.pool > 0, null, { timeout: 60_000 });
    assert.equal(await f.evaluate(() => window.__attnscope.modelView.tokens), 7);
    assert.equal(new URL(f.url()).searchParams.get('view'), 'model');
    assert.deepEqual(other, [], 'only the server was asked');
  } finally {
    await stopServer(p);
    nbServer.close();
  }
});
