// align.test.mjs — the alignment view of an encoder-decoder run (ctest browser_align):
// tests/cli/align_model.py writes a random BART with a byte-level tokenizer (every byte a
// piece); `attnscope serve` runs a sentence pair of data/align with its gold line. Checks:
// the Alignment tab is offered for the encoder-decoder run; the AER of every layer and head
// and of each layer's head mean, and the best head, equal `attnscope align --format json`'s
// on the same pair (the view's lib/align.ts against the C library); the word alignment of
// a head chosen in the AER table equals `align --layer L --head H`'s; every target token
// that stands for a word has its strongest source token marked, never a special token; a
// bad gold pair gives one line naming the pair; leaving the tab gives the other views back
// the attention kind they had (the tab itself shows cross-attention); the tab and the
// view's labels in Chinese.
// Screenshot: tests/browser/artifacts/align.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const SRC = 'she does not like coffee .';
const TGT = 'sie mag keinen Kaffee .';
const GOLD = '0-0 1?1 2-2 3-1 4-3 5-4';

let server, base, browser, page, tmp, model, cli;

/** `attnscope align --format json` on the one pair, with extra arguments. */
function align(...extra) {
  const out = execFileSync(BIN, ['align', '--model', model, '--source', join(tmp, 's.en'), '--target', join(tmp, 's.de'),
    '--gold', join(tmp, 's.align'), '--format', 'json', ...extra]);
  return JSON.parse(out.toString());
}

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-align-'));
  model = join(tmp, 'bartbytes');
  execFileSync('/usr/bin/python3', [join(ROOT, 'tests', 'cli', 'align_model.py'), model]);
  writeFileSync(join(tmp, 's.en'), `${SRC}\n`);
  writeFileSync(join(tmp, 's.de'), `${TGT}\n`);
  writeFileSync(join(tmp, 's.align'), `${GOLD}\n`);
  cli = align();
  const s = await startServer(BIN, ['--model', model]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { height: 1400 }));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const hook = () => page.evaluate(() => window.__attnscope?.align ?? null);
const url = (extra = '') =>
  `${base}/?model=bartbytes&text=${encodeURIComponent(SRC)}&target=${encodeURIComponent(TGT)}&view=align${extra}`;

test('the AER table and the best head equal attnscope align', async () => {
  await page.goto(url(`&gold=${encodeURIComponent(GOLD)}`));
  await page.waitForSelector('[data-testid=tab-align]');
  await page.waitForSelector('[data-testid=align-aer]');
  const h = await hook();
  assert.equal(h.aer.length, 3, 'three decoder layers');
  for (let l = 0; l < 3; l++) {
    for (let k = 0; k < 3; k++) assert.ok(Math.abs(h.aer[l][k] - cli.aer[l][k]) < 1e-9, `L${l}H${k}: ${h.aer[l][k]} vs ${cli.aer[l][k]}`);
    assert.ok(Math.abs(h.mean[l] - cli.aer_mean[l]) < 1e-9, `layer ${l} mean: ${h.mean[l]} vs ${cli.aer_mean[l]}`);
    const cell = (await page.textContent(`[data-testid=aer-${l}-0]`)).trim();
    assert.equal(cell, cli.aer[l][0].toFixed(3), 'the table shows the value');
  }
  assert.deepEqual(h.best, { layer: cli.best.layer, head: cli.best.head });
  assert.match(await page.textContent('[data-testid=align-best]'), new RegExp(`layer ${cli.best.layer}, head ${cli.best.head}, AER ${cli.best.aer.toFixed(3)}`));
  await page.screenshot({ path: join(ART, 'align.png'), fullPage: true });
});

test("a head chosen in the table shows align's word alignment; argmax marks skip specials", async () => {
  for (const [l, hd] of [[2, 1], [0, 2], [1, 'mean']]) {
    await page.click(`[data-testid=aer-${l}-${hd === 'mean' ? 'mean' : hd}] button`);
    await page.waitForFunction(({ l, hd }) => window.__attnscope?.align?.layer === l && window.__attnscope.align.head === hd, { l, hd });
    const h = await hook();
    const ref = align('--layer', String(l), '--head', String(hd)).sentences[0].alignment;
    assert.equal(h.alignment, ref, `layer ${l} head ${hd}`);
    assert.equal(await page.textContent('[data-testid=align-pharaoh]'), ref);
    const run = await page.evaluate(async ({ text, target }) => {
      const r = await fetch('/api/v1/run', { method: 'POST', body: JSON.stringify({ model: 'bartbytes', text, target }) });
      return r.json();
    }, { text: SRC, target: TGT });
    const dec = run.decoder.tokens;
    assert.equal(h.marks.length, dec.length, 'one mark per decoder row');
    h.marks.forEach((j, i) => {
      const next = dec[i + 1];
      if (next && !next.special) assert.ok(j >= 0 && !run.tokens[j].special, `row ${i} marks a source token (${j})`);
      else assert.equal(j, -1, `row ${i} stands for no word`);
    });
  }
  assert.ok(await page.isVisible('[data-testid=align-canvas]'));
});

test('a bad gold pair is one line naming it; the view in Chinese', async () => {
  await page.fill('[data-testid=align-gold]', '0-0 9-1');
  await page.waitForSelector('[data-testid=align-gold-error]');
  assert.equal((await page.textContent('[data-testid=align-gold-error]')).trim(), "Gold pair 2 '9-1': source word 9 is outside the 6 source words");
  assert.equal(await page.isVisible('[data-testid=align-aer]'), false, 'no table for a refused line');
  await page.goto(url(`&gold=${encodeURIComponent(GOLD)}&lang=zh-CN`));
  await page.waitForSelector('[data-testid=align-aer]');
  assert.equal((await page.textContent('[data-testid=tab-align]')).trim(), '对齐');
  assert.match(await page.textContent('[data-testid=align-best]'), /^最佳的头：第 \d 层，头 \d，AER 0\.\d{3}$/);
});

test('leaving the Alignment tab gives the other views back the attention kind they had', async () => {
  const checked = (k) => page.getAttribute(`[data-testid=kind-${k}]`, 'aria-checked');
  for (const [kind, next] of [['decoder', 'head'], ['encoder', 'model']]) {
    await page.goto(url(kind === 'encoder' ? '' : `&kind=${kind}`).replace('view=align', 'view=head'));
    await page.waitForSelector(`[data-testid=kind-${kind}][aria-checked=true]`);
    await page.click('[data-testid=tab-align]');
    await page.waitForSelector('[data-testid=align-canvas]');
    assert.match(page.url(), /kind=cross/, 'the Alignment tab shows cross-attention');
    await page.click(`[data-testid=tab-${next}]`);
    await page.waitForSelector('[data-testid=kind]');
    assert.equal(await checked(kind), 'true', `${next} view after the Alignment tab: ${kind}`);
    assert.equal(await checked('cross'), 'false');
    assert.doesNotMatch(page.url(), /kind=cross/);
  }
});
