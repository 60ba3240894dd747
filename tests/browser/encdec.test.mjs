// encdec.test.mjs — the explorer on encoder-decoder models (ctest browser_encdec): bart_tiny
// of tests/ref/gen_encdec.py with a ten-token byte-level BPE tokenizer written here (as
// tests/cli/test_encdec.sh does; text source and target typed in the input bar) and
// t5_tiny (no tokenizer: source and target ids from the URL). Against the CLI's own npz
// (`attnscope run --target ... --format npz`) of the same input, it checks:
//   - the input bar shows a Target field for the encoder-decoder model, and the run has
//     the decoder's tokens;
//   - the Encoder / Decoder / Cross selector switches the head view's columns: cross draws
//     the decoder's tokens on the left (queries) and the source's on the right (keys),
//     decoder self-attention is causal (no link to a later token), and every link drawn
//     has the npz's weight of its kind (encoder_/decoder_/cross_attentions);
//   - the weight shown when hovering a per-head bar of a pinned decoder token is the npz's
//     cross_attentions value of that head, query and key;
//   - the model view's cross thumbnails are decoder rows × source columns, a hovered cell's
//     weight equal to the npz's; its decoder thumbnails note the causal mask, cross's none;
//   - the neuron view of cross-attention paints, lists the source's tokens as keys and
//     gives the npz's cross_attention_scores and cross_attentions for the decoder query;
//   - T5 from ids: the cross view's columns and links against its npz.
// Screenshots go to tests/browser/artifacts/encdec-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { inflateRawSync } from 'node:zlib';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';
import { writeBart } from './make_bart_model.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const FIX = join(ROOT, 'tests', 'ref', 'fixtures', 'models');
const F16 = 1e-3; /* the views fetch f16 attention: |f16(w) - w| < 5e-4 for w in [0, 1] */

let server, base, browser, page, tmp, bart;

/** The arrays of an .npz (zip of .npy; stored or deflated): name -> {shape, data}. */
function readNpz(path) {
  const z = readFileSync(path);
  let eocd = z.length - 22;
  while (eocd >= 0 && z.readUInt32LE(eocd) !== 0x06054b50) eocd--;
  assert.ok(eocd >= 0, `${path}: no zip directory`);
  const n = z.readUInt16LE(eocd + 10);
  let p = z.readUInt32LE(eocd + 16);
  const out = {};
  for (let e = 0; e < n; e++) {
    const method = z.readUInt16LE(p + 10), csize = z.readUInt32LE(p + 20), nlen = z.readUInt16LE(p + 28);
    const xlen = z.readUInt16LE(p + 30), clen = z.readUInt16LE(p + 32), off = z.readUInt32LE(p + 42);
    const name = z.subarray(p + 46, p + 46 + nlen).toString('utf8').replace(/\.npy$/, '');
    p += 46 + nlen + xlen + clen;
    const start = off + 30 + z.readUInt16LE(off + 26) + z.readUInt16LE(off + 28);
    const raw = z.subarray(start, start + csize);
    const npy = method === 8 ? inflateRawSync(raw) : raw;
    const major = npy[6];
    const hlen = major === 1 ? npy.readUInt16LE(8) : npy.readUInt32LE(8);
    const h0 = major === 1 ? 10 : 12;
    const head = npy.subarray(h0, h0 + hlen).toString('latin1');
    const descr = /'descr':\s*'([^']+)'/.exec(head)[1];
    const shape = /'shape':\s*\(([^)]*)\)/.exec(head)[1].split(',').filter((x) => x.trim()).map(Number);
    const body = npy.subarray(h0 + hlen);
    if (descr === '<f4') out[name] = { shape, data: new Float32Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.length)) };
    else if (descr === '<i4') out[name] = { shape, data: new Int32Array(body.buffer.slice(body.byteOffset, body.byteOffset + body.length)) };
  }
  return out;
}

/** Element [l][h][i][j] of a 4-d npz array. */
function at4(a, l, h, i, j) {
  const [, H, R, C] = a.shape;
  return a.data[((l * H + h) * R + i) * C + j];
}

function cliNpz(model, args) {
  const out = join(tmp, `run-${Math.random().toString(36).slice(2)}.npz`);
  execFileSync(BIN, ['run', '--model', model, ...args, '--format', 'npz', '--out', out, '--quiet']);
  return readNpz(out);
}

async function shot(name) {
  await page.screenshot({ path: join(ART, `encdec-${name}.png`), fullPage: true });
}

const hook = (k) => page.evaluate((key) => window.__attnscope?.[key], k);

/** Waits for the head view's columns of kind and returns them. */
async function sides(kind) {
  await page.waitForFunction((k) => window.__attnscope?.headSides?.kind === k && window.__attnscope.headLinks?.length > 0, kind);
  return hook('headSides');
}

/** Every link the head view draws of layer l against npz array a: the largest difference. */
async function linksAgainst(a, l) {
  const links = await page.evaluate(() => window.__attnscope.headLinks.map((h) => ({ head: h.head, i: Array.from(h.i), j: Array.from(h.j), w: Array.from(h.w) })));
  let worst = 0, n = 0;
  for (const hl of links)
    for (let k = 0; k < hl.i.length; k++, n++) worst = Math.max(worst, Math.abs(hl.w[k] - at4(a, l, hl.head, hl.i[k], hl.j[k])));
  return { worst, n, links };
}

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-encdec-'));
  bart = writeBart(join(tmp, 'bart'));
  const s = await startServer(BIN, ['--model', bart, '--model', join(FIX, 't5_tiny')]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile')));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('BART: target field, kind selector, cross columns and weights, hover, model and neuron views', async () => {
  const z = cliNpz(bart, ['--text', 'ab ba', '--target', 'ba ab']);
  const enc = ['<s>', 'ab', '\u0120b', 'a', '</s>'], dec = ['</s>', '<s>', 'b', 'a', '\u0120', 'ab'];
  await page.goto(`${base}/?model=bart&view=head&layer=1`);
  await page.waitForSelector('[data-testid=target]');
  await page.fill('[data-testid=text]', 'ab ba');
  await page.fill('[data-testid=target]', 'ba ab');
  await page.click('[data-testid=run]');
  await page.waitForSelector('[data-testid=kind-cross]');
  assert.deepEqual((await sides('encoder')).left, enc);
  const e = await linksAgainst(z.encoder_attentions, 1);
  assert.ok(e.n > 0 && e.worst < F16, `encoder links (${e.n}) = npz encoder_attentions, max diff ${e.worst}`);

  // cross: decoder tokens on the left (queries), the source's on the right (keys)
  await page.click('[data-testid=kind-cross]');
  const s = await sides('cross');
  assert.deepEqual(s.left, dec, 'cross: decoder tokens on the left');
  assert.deepEqual(s.right, enc, 'cross: source tokens on the right');
  await page.selectOption('[data-testid=layer]', '2'); /* the decoder has 3 layers, the encoder 2 */
  await page.waitForFunction(() => window.__attnscope.headDraw?.layer === 2);
  const c = await linksAgainst(z.cross_attentions, 2);
  assert.ok(c.n > 0 && c.worst < F16, `cross links (${c.n}) = npz cross_attentions, max diff ${c.worst}`);
  assert.ok(c.links.every((h) => h.i.every((q) => q < dec.length) && h.j.every((k) => k < enc.length)), 'links go from decoder rows to source keys');
  assert.ok(await page.isVisible('[data-testid=cross-note]'));
  await shot('cross-head');

  // pin decoder token 3 ("a"), hover head 1's bar of source key 1 ("ab"): the npz's weight
  const L = { leftX: 3 * 14 + 8 + 120 + 8, top: 28, rowH: 20 };
  const barsX = L.leftX + 6 + 260 + 6 + 120 + 4;
  await page.click('[data-testid=head-canvas]', { position: { x: L.leftX - 20, y: L.top + 3 * L.rowH + L.rowH / 2 } });
  await page.mouse.move(5, 5);
  const box = await (await page.$('[data-testid=head-canvas]')).boundingBox();
  await page.mouse.move(box.x + barsX + 1 * 14 + 6, box.y + L.top + 1 * L.rowH + L.rowH - 3);
  await page.waitForSelector('[data-testid=head-tip]');
  const w = Number(await page.getAttribute('[data-testid=head-tip] .w', 'data-w'));
  const want = at4(z.cross_attentions, 2, 1, 3, 1);
  assert.ok(Math.abs(w - want) < F16, `hovered cross weight ${w} = npz ${want}`);
  await shot('cross-hover');

  // decoder: causal, the decoder's tokens on both sides
  await page.mouse.move(5, 5);
  await page.click('[data-testid=kind-decoder]');
  const d = await sides('decoder');
  assert.deepEqual([d.left, d.right], [dec, dec]);
  await page.waitForFunction(() => window.__attnscope.headDraw?.layer === 2);
  const dl = await linksAgainst(z.decoder_attentions, 2);
  assert.ok(dl.n > 0 && dl.worst < F16, `decoder links = npz decoder_attentions, max diff ${dl.worst}`);
  assert.ok(dl.links.every((h) => h.i.every((q, k) => h.j[k] <= q)), 'decoder self-attention: no link to a later token');
  assert.ok(await page.isVisible('[data-testid=causal-note]'));

  // model view, cross: thumbnails of decoder rows x source columns; a hovered cell's weight
  await page.click('[data-testid=kind-cross]');
  await page.click('[data-testid=tab-model]');
  await page.waitForFunction(() => window.__attnscope?.modelView?.pool > 0 && window.__attnscope.modelView.tokens === 6);
  const mv = await hook('modelView');
  const gbox = await (await page.$('[data-testid=grid-canvas]')).boundingBox();
  const [li, hi, qi, kj] = [1, 2, 4, 3];
  const cx = mv.grid.left + hi * (mv.grid.cell + mv.grid.gap) + ((kj + 0.5) / enc.length) * mv.grid.cell;
  const cy = mv.grid.top + li * (mv.grid.cell + mv.grid.gap) + ((qi + 0.5) / dec.length) * mv.grid.cell;
  await page.mouse.move(gbox.x + cx, gbox.y + cy);
  await page.waitForSelector('[data-testid=grid-tip]');
  const gw = Number(await page.getAttribute('[data-testid=grid-tip] .w', 'data-w'));
  const gwant = at4(z.cross_attentions, li, hi, qi, kj);
  assert.ok(Math.abs(gw - gwant) < F16, `model view cross cell L${li} H${hi} (${qi}, ${kj}) ${gw} = npz ${gwant}`);
  await shot('cross-model');
  // model view, decoder: causal, the masked blocks noted (and drawn grey)
  await page.mouse.move(5, 5);
  await page.click('[data-testid=kind-decoder]');
  await page.waitForSelector('[data-testid=grid-mask-note]');
  await page.click('[data-testid=kind-cross]');
  await page.waitForFunction(() => window.__attnscope?.modelView?.tokens === 6 && !document.querySelector('[data-testid=grid-mask-note]'));

  // neuron view, cross: queries from the decoder, keys from the source
  await page.mouse.move(5, 5);
  await page.click('[data-testid=tab-neuron]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=neuron-table] tbody tr').length === 5);
  await page.selectOption('[data-testid=n-layer]', '2');
  await page.selectOption('[data-testid=n-head]', '1');
  await page.selectOption('[data-testid=n-token]', '3');
  await page.waitForFunction(() => window.__attnscope.neuron?.layer === 2 && window.__attnscope.neuron?.head === 1 && window.__attnscope.neuron?.query === 3);
  const rows = await page.$$eval('[data-testid=neuron-table] tbody tr', (trs) =>
    trs.map((tr) => ({ key: +tr.dataset.key, tok: tr.children[1].textContent, score: +tr.children[2].dataset.score, p: +tr.children[3].dataset.softmax })));
  assert.deepEqual(rows.map((r) => r.key), [0, 1, 2, 3, 4]);
  assert.deepEqual(rows.map((r) => r.tok), ['<s>', 'ab', ' b', 'a', '</s>'], 'keys: the source tokens');
  let worst = 0;
  for (const r of rows) worst = Math.max(worst, Math.abs(r.score - at4(z.cross_attention_scores, 2, 1, 3, r.key)), Math.abs(r.p - at4(z.cross_attentions, 2, 1, 3, r.key)));
  assert.ok(worst < 1e-6, `neuron view cross scores and softmax = npz, max diff ${worst}`);
  const ink = await page.$eval('[data-testid=neuron-canvas] canvas, canvas[data-testid=neuron-canvas]', (cv) => {
    const g = cv.getContext('2d').getImageData(0, 0, cv.width, cv.height).data;
    let n = 0;
    for (let k = 0; k < g.length; k += 4) if (g[k + 3] > 0 && (g[k] < 240 || g[k + 1] < 240 || g[k + 2] < 240)) n++;
    return n;
  });
  assert.ok(ink > 500, `the cross neuron view paints (${ink} pixels)`);
  await shot('cross-neuron');
});

test('T5 from ids: the cross view from the URL (kind=cross, target ids) against the npz', async () => {
  const src = [0, 17, 45, 9, 88, 23, 2], tgt = [0, 31, 64, 7];
  const z = cliNpz(join(FIX, 't5_tiny'), ['--ids', src.join(','), '--target-ids', tgt.join(',')]);
  await page.goto(`${base}/?model=t5_tiny&text=${src.join(',')}&target=${tgt.join(',')}&view=head&layer=2&kind=cross`);
  const s = await sides('cross');
  assert.equal(s.left.length, tgt.length, 'decoder tokens on the left');
  assert.equal(s.right.length, src.length, 'source tokens on the right');
  await page.waitForFunction(() => window.__attnscope.headDraw?.layer === 2);
  const c = await linksAgainst(z.cross_attentions, 2);
  assert.ok(c.n > 0 && c.worst < F16, `T5 cross links (${c.n}) = npz, max diff ${c.worst}`);
  assert.equal(await page.inputValue('[data-testid=target]'), tgt.join(','));
  await shot('t5-cross');
});
