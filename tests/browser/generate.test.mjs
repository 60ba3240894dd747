// generate.test.mjs — the generation view (ctest browser_generate) on a small random GPT-2
// (make_gpt2_model.mjs, 2 layers × 4 heads, byte-level BPE) against `attnscope generate`
// run here with the same prompt and sampling options (top-k 5, temperature 1.5, seed 7).
// Checks:
//   - the Generation tab is offered for the causal LM and opens from the URL (view=generate);
//   - the generated ids equal the CLI's generated_ids;
//   - stepping with ▶, ← / → and the slider, and choosing the layer and head with the
//     selects or a click on the layer × head grid, the weights shown for every key of the
//     context equal the CLI's generation_attentions row (steps, L, H, T) of that step,
//     layer and head (exactly: both f32), over prompt_length + step keys;
//   - the prompt / generated boundary is marked after the prompt's last token;
//   - each step's most probable next tokens and the chosen token's probability are the
//     CLI's (--top 8: generation_top_ids, generation_top_probs, generation_probs), the
//     chosen one outlined;
//   - a bad parameter (0 new tokens) shows the server's one-line error;
//   - a model without a causal-LM head (models/attnscope-sst2) has no Generation tab, and
//     view=generate opens its head view.
// Screenshots go to tests/browser/artifacts/generate-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const PROMPT = ' the cat sat on the';
const STEPS = 6;

let server, base, browser, page, tmp, cli;

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-generate-'));
  const m = join(tmp, 'gpt2');
  execFileSync(process.execPath, [join(HERE, 'make_gpt2_model.mjs'), m]);
  execFileSync(BIN, ['generate', '--model', m, '--text', PROMPT, '--max-new', String(STEPS), '--top-k', '5',
    '--temperature', '1.5', '--seed', '7', '--top', '8', '--out', join(tmp, 'g.json'), '--quiet']);
  cli = JSON.parse(readFileSync(join(tmp, 'g.json'), 'utf8'));
  ({ p: server, url: base } = await startServer(BIN, ['--model', m, '--model', join(HERE, '..', '..', 'models', 'attnscope-sst2')]));
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile')));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The weights shown for the context's keys, in key order. */
const shown = () => page.$$eval('[data-testid=gen-key]', (es) => es.map((e) => [Number(e.dataset.k), Number(e.dataset.w)]));

/** Asserts the keys shown are the CLI's row of (step, layer, head). */
async function expectRow(step, layer, head) {
  await page.waitForFunction((s) => window.__attnscope?.generation?.step === s, step);
  const P = cli.prompt_length;
  const want = cli.generation_attentions[step][layer][head].slice(0, P + step);
  const got = await shown();
  assert.equal(got.length, P + step, `step ${step}: ${P + step} keys shown`);
  got.forEach(([k, w], i) => {
    assert.equal(k, i);
    assert.equal(Math.fround(w), Math.fround(want[i]), `step ${step} L${layer}H${head} key ${i}: ${w} vs ${want[i]}`);
  });
  assert.ok(Math.abs(want.reduce((a, b) => a + b, 0) - 1) < 1e-4, 'a row sums to 1');
  assert.match(await page.textContent('[data-testid=gen-status]'), new RegExp(`token ${step + 1} of ${STEPS}`));
  // the step's most probable next tokens: the CLI's generation_top_ids / top_probs, the chosen one outlined
  const cands = await page.$$eval('[data-testid=gen-cand]', (es) => es.map((e) => [Number(e.dataset.id), Number(e.dataset.p), e.classList.contains('chosen')]));
  assert.deepEqual(cands.map((c) => c[0]), cli.generation_top_ids[step]);
  cands.forEach(([id, p, chosen], i) => {
    assert.equal(Math.fround(p), Math.fround(cli.generation_top_probs[step][i]), `step ${step} candidate ${id}`);
    assert.equal(chosen, id === cli.generated_ids[step]);
  });
  const g = await page.evaluate(() => window.__attnscope.generation);
  assert.equal(Math.fround(g.prob), Math.fround(cli.generation_probs[step]), `step ${step}: the chosen token's probability`);
}

test('the generation view shows the rows attnscope generate records for the same seed', async () => {
  await page.goto(`${base}/?model=gpt2&text=${encodeURIComponent(PROMPT)}&view=generate`);
  await page.waitForSelector('[data-testid=tab-generate].active');
  await page.fill('[data-testid=gen-max]', String(STEPS));
  await page.selectOption('[data-testid=gen-sampling]', 'sample');
  await page.fill('[data-testid=gen-topk]', '5');
  await page.fill('[data-testid=gen-temp]', '1.5');
  await page.fill('[data-testid=gen-seed]', '7');
  await page.click('[data-testid=gen-run]');
  await page.waitForSelector('[data-testid=gen-context]');
  const ids = await page.evaluate(() => window.__attnscope.generation.ids);
  assert.deepEqual(ids.slice(cli.prompt_length), cli.generated_ids, 'the same tokens as the CLI');
  assert.equal(ids.length, cli.prompt_length + STEPS);

  await expectRow(0, 0, 0);
  // the boundary follows the prompt's last key at step 0 ...
  assert.equal(await page.$$eval('[data-testid=gen-boundary]', (es) => es.length), 1);
  await page.click('[data-testid=gen-next]');
  await expectRow(1, 0, 0);
  // ... and sits between key P - 1 and key P afterwards
  const before = await page.$eval('[data-testid=gen-boundary]', (e) => e.previousElementSibling.dataset.k);
  assert.equal(Number(before), cli.prompt_length - 1);
  await page.selectOption('[data-testid=gen-layer]', '1');
  await page.selectOption('[data-testid=gen-head]', '2');
  await expectRow(1, 1, 2);
  await page.locator('[data-testid=gen-status]').click(); /* focus out of the selects: the arrows step */
  await page.keyboard.press('ArrowRight');
  await page.keyboard.press('ArrowRight');
  await expectRow(3, 1, 2);
  await page.keyboard.press('ArrowLeft');
  await expectRow(2, 1, 2);
  await page.$eval('[data-testid=gen-step]', (e) => {
    e.value = '5';
    e.dispatchEvent(new Event('input', { bubbles: true }));
  });
  await expectRow(5, 1, 2);
  // a click on the grid's cell (layer 0, head 3) shows that head
  const g = await page.locator('[data-testid=gen-grid]').boundingBox();
  await page.mouse.click(g.x + 40 + 3 * 96 + 48, g.y + 18 + 0 * 40 + 20);
  await page.waitForFunction(() => window.__attnscope.generation.head === 3 && window.__attnscope.generation.layer === 0);
  await expectRow(5, 0, 3);
  assert.equal(await page.$eval('[data-testid=gen-head]', (e) => e.value), '3');
  await page.screenshot({ path: join(ART, 'generate-view.png'), fullPage: true });
});

test('a bad parameter shows the server\'s one-line error', async () => {
  await page.fill('[data-testid=gen-max]', '0');
  await page.click('[data-testid=gen-run]');
  await page.waitForFunction(() => /max_new/.test(document.querySelector('[data-testid=status]').textContent));
  assert.match(await page.textContent('[data-testid=status]'), /field 'max_new': expected an integer in \[1, 128\]/);
});

test('a model without a causal-LM head has no Generation tab', async () => {
  await page.goto(`${base}/?model=attnscope-sst2&text=${encodeURIComponent('a fine film .')}&view=generate`);
  await page.waitForSelector('[data-testid=tab-head].active');
  assert.equal(await page.locator('[data-testid=tab-generate]').count(), 0);
  assert.match(page.url(), /view=head|^(?!.*view=)/);
});
