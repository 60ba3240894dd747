// generate_seq2seq.test.mjs — the generation view on an encoder-decoder model with beam
// search (ctest browser_generate_seq2seq): bart_tiny with a byte-level BPE tokenizer
// (make_bart_model.mjs), the source typed as text, against `attnscope generate --beams 3
// --num-return 3` run here with the same source (its JSON: beam_sequences, beam_scores,
// beam_attentions, beam_cross_attentions). Checks:
//   - the Generation tab is offered for the encoder-decoder model, and opening it with no
//     target typed asks for no run (a hint, not the server's error);
//   - beam search from the view returns the CLI's hypotheses, in order, with its scores;
//   - for the best and for a later hypothesis (clicked in the list), stepping through the
//     tokens and choosing layer and head, the source's weights shown equal the CLI's
//     cross-attention row and the output's weights its decoder self-attention row (exactly:
//     both f32), and the source strip lists the source's tokens;
//   - the grid switches between cross- and self-attention;
//   - greedy decoding of the same source gives the CLI's greedy ids and cross-attention
//     rows (exactly: both the cached steps').
// Screenshots go to tests/browser/artifacts/generate-seq2seq-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';
import { writeBart } from './make_bart_model.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const SRC = 'ab a b ab';
const STEPS = 6;

let server, base, browser, page, tmp, beams, greedy;

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-gen-seq2seq-'));
  const m = writeBart(join(tmp, 'bart'));
  const gen = (extra, out) => {
    execFileSync(BIN, ['generate', '--model', m, '--text', SRC, '--max-new', String(STEPS), ...extra, '--out', join(tmp, out), '--quiet']);
    return JSON.parse(readFileSync(join(tmp, out), 'utf8'));
  };
  beams = gen(['--beams', '3', '--num-return', '3'], 'b.json');
  greedy = gen([], 'g.json');
  ({ p: server, url: base } = await startServer(BIN, ['--model', m]));
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile')));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const weights = (id) => page.$$eval(`[data-testid=${id}]`, (es) => es.map((e) => [Number(e.dataset.k), Number(e.dataset.w)]));

/** Asserts the shown source and output weights are hypothesis r's CLI rows at (step, layer, head). */
async function expectRows(r, step, layer, head) {
  await page.waitForFunction(([h, s, l, hd]) => {
    const g = window.__attnscope?.generation;
    return g?.hyp === h && g.step === s && g.layer === l && g.head === hd;
  }, [r, step, layer, head]);
  const P = beams.prompt_length;
  const cross = beams.beam_cross_attentions[r][step][layer][head];
  const self = beams.beam_attentions[r][step][layer][head].slice(0, P + step);
  for (const [id, want] of [['gen-src', cross], ['gen-key', self]]) {
    const got = await weights(id);
    assert.equal(got.length, want.length, `${id}: ${want.length} keys`);
    got.forEach(([k, w], i) => {
      assert.equal(k, i);
      assert.equal(Math.fround(w), Math.fround(want[i]), `hyp ${r} step ${step} L${layer}H${head} ${id} ${i}: ${w} vs ${want[i]}`);
    });
  }
}

test('beam search in the generation view gives the CLI\'s hypotheses and their cross- and self-attention rows', async () => {
  await page.goto(`${base}/?model=bart&text=${encodeURIComponent(SRC)}&view=generate`);
  await page.waitForSelector('[data-testid=tab-generate].active');
  /* no target typed: no run is asked for, so no error, only the hint that one is needed */
  await page.waitForFunction(() => /target/.test(document.querySelector('[data-testid=status]')?.textContent ?? ''));
  assert.doesNotMatch(await page.textContent('[data-testid=status]'), /field|expected/);
  await page.fill('[data-testid=gen-max]', String(STEPS));
  await page.selectOption('[data-testid=gen-sampling]', 'beam');
  await page.fill('[data-testid=gen-beams]', '3');
  await page.fill('[data-testid=gen-return]', '3');
  await page.click('[data-testid=gen-run]');
  await page.waitForSelector('[data-testid=gen-source]');
  assert.equal(await page.locator('[data-testid=gen-hyp]').count(), 3);
  const R = beams.beam_sequences.length;
  for (let r = 0; r < R; r++) {
    await page.click(`[data-testid=gen-hyp][data-k="${r}"]`);
    await page.waitForFunction((h) => window.__attnscope.generation.hyp === h, r);
    const ids = await page.evaluate(() => window.__attnscope.generation.ids);
    assert.deepEqual(ids, beams.beam_sequences[r].slice(0, beams.beam_lengths[r]), `hypothesis ${r}: the CLI's ids`);
    const title = await page.getAttribute(`[data-testid=gen-hyp][data-k="${r}"]`, 'title');
    assert.ok(title.includes(beams.beam_scores[r].toFixed(4)), `hypothesis ${r}: score ${beams.beam_scores[r]} in "${title}"`);
  }
  const srcTokens = await page.$$eval('[data-testid=gen-src]', (es) => es.map((e) => e.textContent));
  assert.equal(srcTokens.length, beams.input_ids.length, 'the source strip lists the source tokens');

  await page.click('[data-testid=gen-hyp][data-k="0"]');
  await expectRows(0, 0, 0, 0);
  await page.click('[data-testid=gen-next]');
  await page.click('[data-testid=gen-next]');
  await expectRows(0, 2, 0, 0);
  await page.selectOption('[data-testid=gen-layer]', '2');
  await page.selectOption('[data-testid=gen-head]', '1');
  await expectRows(0, 2, 2, 1);
  await page.click('[data-testid=gen-hyp][data-k="2"]');
  await expectRows(2, 2, 2, 1);
  await page.$eval('[data-testid=gen-step]', (e) => {
    e.value = '4';
    e.dispatchEvent(new Event('input', { bubbles: true }));
  });
  await expectRows(2, 4, 2, 1);
  // the grid: cross-attention first, then self-attention
  assert.equal(await page.evaluate(() => window.__attnscope.generation.kind), 'cross');
  await page.screenshot({ path: join(ART, 'generate-seq2seq-cross.png'), fullPage: true });
  await page.selectOption('[data-testid=gen-kind]', 'self');
  await page.waitForFunction(() => window.__attnscope.generation.kind === 'self');
  await page.screenshot({ path: join(ART, 'generate-seq2seq-self.png'), fullPage: true });
});

test('greedy decoding of the source gives the CLI\'s greedy ids, without hypotheses', async () => {
  await page.selectOption('[data-testid=gen-sampling]', 'greedy');
  await page.click('[data-testid=gen-run]');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid=gen-hyp]').length === 0);
  const ids = await page.evaluate(() => window.__attnscope.generation.ids);
  assert.deepEqual(ids.slice(greedy.prompt_length), greedy.generated_ids);
  const P = greedy.prompt_length;
  await page.waitForFunction(() => window.__attnscope.generation.step === 0);
  const got = await weights('gen-src');
  const l = await page.evaluate(() => window.__attnscope.generation.layer), h = await page.evaluate(() => window.__attnscope.generation.head);
  const want = greedy.generation_cross_attentions[0][l][h];
  assert.equal(got.length, want.length);
  got.forEach(([, w], i) => assert.equal(Math.fround(w), Math.fround(want[i]), `greedy cross key ${i}: ${w} vs ${want[i]}`));
  assert.equal(P, 1);
});
