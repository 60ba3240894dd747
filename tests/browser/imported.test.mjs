// imported.test.mjs — attention computed elsewhere (`attnscope serve --attention FILE.npz`,
// no model) in the explorer, in Debian's Chromium: the first imported run opens by itself
// in the head view, the run picker lists both files, a drawn weight (the per-head bar's
// tooltip) equals the file's value read by NumPy, the model view draws its grid, the
// model-only controls are hidden or disabled (text input, attribution, long map; the
// neuron view for a file without queries and keys), and the neuron view shows the file's
// scores and weights for the file that has queries and keys; the URL keeps the run shown
// (reload, Back). Fixtures: tests/ref/gen_npz_attention.py.
// An analysis database's imported sentence (`serve --db --import-dir`, a second server
// on make_synthetic_import.mjs's folder; the served model is not the imported one): the sentence panel's head view
// button opens it, a drawn weight equals the folder's .npy value read by NumPy, the
// model view draws it, and the neuron view is off with the reason.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const FIX = join(HERE, '..', 'ref', 'fixtures', 'npz_attention');
const ART = join(HERE, 'artifacts');
const BIN = process.env.ATTNSCOPE_BIN;

let server, base, browser, page, tmp;

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-imported-'));
  const s = await startServer(BIN, ['--attention', join(FIX, 'run_like.npz'), '--attention', join(FIX, 'bertviz_f16.npz')]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile')));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The file's array `name`, element [l][h][i][j], as NumPy reads it (float64 of its float32). */
function fileWeight(file, name, l, h, i, j) {
  const py = `import numpy as np; print(repr(float(np.load(${JSON.stringify(join(FIX, file))})[${JSON.stringify(name)}][${l}, ${h}, ${i}, ${j}])))`;
  return +execFileSync('/usr/bin/python3', ['-c', py]).toString().trim();
}

const tabDisabled = (id) => page.$eval(`[data-testid=tab-${id}]`, (b) => b.disabled);

test('an imported run in the head view: a drawn weight equals the file', async () => {
  await page.goto(`${base}/`);
  // no model: the first imported file opens by itself
  await page.waitForFunction(() => window.__attnscope?.headDraw?.links > 0);
  assert.equal(await page.locator('[data-testid=model]').count(), 0, 'no model selector without a model');
  assert.equal(await page.locator('[data-testid=text]').count(), 0, 'no text input without a model');
  const options = await page.$$eval('[data-testid=imported] option', (o) => o.map((x) => x.textContent));
  assert.equal(options.length, 3, `the picker: none and the two files (${options})`);
  assert.match(options[1], /run_like\.npz \(2×3, 6 tokens\)/);
  assert.match(await page.textContent('[data-testid=status]'), /run_like\.npz: attention imported/);
  assert.ok(await tabDisabled('attribution'), 'attribution needs a model');
  assert.ok(await tabDisabled('long'), 'the long map needs a model');
  assert.ok(!(await tabDisabled('neuron')), 'the neuron view opens: the file has queries and keys');

  // pin query 3, hover head 2's bar next to key 5 (the head view's layout: readability.test.mjs)
  const H = 3, rowH = 20, top = 28;
  const leftX = H * 14 + 8 + 120 + 8, x2 = leftX + 6 + 260, barsX = x2 + 6 + 120 + 4;
  const cy = (i) => top + i * rowH + rowH / 2;
  const box = await page.locator('[data-testid=head-canvas]').boundingBox();
  await page.mouse.click(box.x + leftX - 20, box.y + cy(3));
  await page.mouse.move(box.x + barsX + 2 * 14 + 6, box.y + cy(5) + 4);
  await page.waitForFunction(() => /head 2/.test(document.querySelector('[data-testid=head-tip]')?.textContent ?? ''));
  const shown = +(await page.getAttribute('[data-testid=head-tip] [data-w]', 'data-w'));
  const want = fileWeight('run_like.npz', 'attentions', 0, 2, 3, 5);
  // the views fetch float16: within its rounding of a weight below 1
  assert.ok(Math.abs(shown - want) < 5e-4, `drawn weight ${shown} = the file's ${want}`);
  await page.screenshot({ path: join(ART, 'imported-head.png') });

  // the model view's grid and the neuron view work from the file alone
  await page.click('[data-testid=tab-model]');
  await page.waitForFunction(() => [...document.querySelectorAll('canvas')].some((c) => c.width > 0 && c.height > 0));
  await page.click('[data-testid=tab-neuron]');
  await page.waitForSelector('[data-testid=tab-neuron].active');
  await page.waitForTimeout(1000);
  assert.equal(await page.$eval('[data-testid=status]', (e) => e.classList.contains('error')), false,
    `no error in the neuron view: ${await page.textContent('[data-testid=status]')}`);
  // the numbers table: query 3's softmax over key 5 ([SEP]) is the file's weight (4 decimals)
  const rows = await page.$$eval('table tr', (r) => r.map((x) => [...x.querySelectorAll('td')].map((c) => c.textContent.trim())));
  const sep = rows.find((r) => r[0] === '5' && r[1] === '[SEP]');
  assert.ok(sep, `a numbers row for key 5: ${JSON.stringify(rows)}`);
  assert.ok(Math.abs(+sep[3] - fileWeight('run_like.npz', 'attentions', 0, 0, 3, 5)) <= 5e-5, `softmax ${sep[3]}`);
  assert.ok(Math.abs(+sep[2] - fileWeight('run_like.npz', 'attention_scores', 0, 0, 3, 5)) <= 5e-5, `score ${sep[2]}`);
  await page.screenshot({ path: join(ART, 'imported-neuron.png') });
});

test('the picker switches to a bertviz-style float16 file without queries and keys', async () => {
  await page.click('[data-testid=tab-head]');
  const id = await page.$eval('[data-testid=imported]', (s) => s.options[2].value);
  await page.selectOption('[data-testid=imported]', id);
  await page.waitForFunction(() => /bertviz_f16\.npz/.test(document.querySelector('[data-testid=status]')?.textContent ?? ''));
  await page.waitForFunction(() => window.__attnscope?.headDraw?.links > 0);
  assert.ok(await tabDisabled('neuron'), 'no queries and keys in the file: the neuron view is off');
  assert.match(await page.getAttribute('[data-testid=tab-neuron]', 'title'), /no queries, keys/);
  assert.ok(await tabDisabled('attribution'));
  // a causal file: no drawn link goes to a later token
  const links = await page.evaluate(() => window.__attnscope.headLinks.map((h) => ({ i: Array.from(h.i), j: Array.from(h.j) })));
  assert.ok(links.length > 0);
  for (const h of links) for (let m = 0; m < h.i.length; m++) assert.ok(h.j[m] <= h.i[m], 'causal: key <= query');
  await page.screenshot({ path: join(ART, 'imported-bertviz.png') });
  // the URL keeps the imported run (imp=FILE): a reload shows it again, Back the previous one
  assert.match(page.url(), /imp=bertviz_f16\.npz/);
  await page.reload();
  await page.waitForFunction(() => /bertviz_f16\.npz/.test(document.querySelector('[data-testid=status]')?.textContent ?? ''));
  assert.equal(await page.$eval('[data-testid=imported]', (s) => s.value), id);
  await page.goBack();
  await page.waitForFunction(() => /run_like\.npz/.test(document.querySelector('[data-testid=status]')?.textContent ?? ''));
  assert.match(page.url(), /imp=run_like\.npz/);
});

test('an imported sentence of an analysis database in the head and model views', async () => {
  const dir = join(tmp, 'import');
  const db = join(tmp, 'import.sqlite');
  execFileSync(process.execPath, [join(HERE, 'make_synthetic_import.mjs'), dir]);
  execFileSync(BIN, ['import', '--dir', dir, '--db', db, '--quiet']);
  const s = await startServer(BIN, ['--model', join(HERE, '..', '..', 'models', 'attnscope-sst2'), '--db', db, '--import-dir', dir]);
  try {
    await page.goto(`${s.url}/?view=instances&dbrun=1&sent=1`);
    await page.click('[data-testid=sent-panel] [data-testid=sent-head]');
    await page.waitForFunction(() => window.__attnscope?.headDraw?.links > 0);
    assert.match(await page.textContent('[data-testid=status]'), /0001\.attention\.npy: sentence 1 of imported run 1/);
    // pin query 3, hover head 2's bar next to key 5 (12 heads: the layout of the first test)
    const H = 12, rowH = 20, top = 28;
    const leftX = H * 14 + 8 + 120 + 8, x2 = leftX + 6 + 260, barsX = x2 + 6 + 120 + 4;
    const cy = (i) => top + i * rowH + rowH / 2;
    const box = await page.locator('[data-testid=head-canvas]').boundingBox();
    await page.mouse.click(box.x + leftX - 20, box.y + cy(3));
    await page.mouse.move(box.x + barsX + 2 * 14 + 6, box.y + cy(5) + 4);
    await page.waitForFunction(() => /head 2/.test(document.querySelector('[data-testid=head-tip]')?.textContent ?? ''));
    const shown = +(await page.getAttribute('[data-testid=head-tip] [data-w]', 'data-w'));
    const py = `import numpy as np; print(repr(float(np.load(${JSON.stringify(join(dir, '0001.attention.npy'))})[0, 2, 3, 5])))`;
    const want = +execFileSync('/usr/bin/python3', ['-c', py]).toString().trim();
    assert.ok(want > 0, `the weight read (${want})`);
    assert.ok(Math.abs(shown - want) < 5e-4, `drawn weight ${shown} = the folder's ${want} (float16)`);
    await page.screenshot({ path: join(ART, 'imported-sentence-head.png') });
    // no q and k were imported: the neuron view is off and says why; the model view draws
    assert.ok(await tabDisabled('neuron'));
    assert.match(await page.getAttribute('[data-testid=tab-neuron]', 'title'), /attnscope import keeps attention only/);
    assert.ok(await tabDisabled('attribution'));
    await page.click('[data-testid=tab-model]');
    await page.waitForFunction(() => [...document.querySelectorAll('canvas')].some((c) => c.width > 0 && c.height > 0));
    // the route: a run of the explorer, 404 for a sentence the run lacks
    const r = await (await fetch(`${s.url}/api/v1/db/runs/1/sentences/1/run`)).json();
    assert.deepEqual(r.source, { kind: 'npz', layout: 'import', file: '0001.attention.npy', neuron: false, db_run: 1, sent: 1 });
    assert.equal((await fetch(`${s.url}/api/v1/db/runs/1/sentences/99/run`)).status, 404);
    assert.equal((await fetch(`${s.url}/api/v1/runs/${r.id}/qk?layer=0&head=0`)).status, 409);
  } finally {
    assert.equal(await stopServer(s.p), 0);
  }
});
