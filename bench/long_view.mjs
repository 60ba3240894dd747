// bench/long_view.mjs — the long map (docs/views.md) timed in headless Chromium on one long
// input: the page with T random ids in its URL (the run and the whole head drawn), each
// zoom step by 2 down to 32 tokens, another head, and the sink left out. Measures; asserts
// nothing. Needs tests/browser's playwright-core and /usr/bin/chromium (make node-deps).
//   node bench/long_view.mjs BUILD/attnscope MODEL_DIR [T]
// MODEL_DIR: e.g. bench/make_llama_checkpoint.py DIR --layers 4 --width 256 --heads 8
//   --kv-heads 2 --ff 512 --vocab 1000 --positions 8192 --dtype f32
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { chromium } from '../tests/browser/node_modules/playwright-core/index.mjs';
import { openBrowser, startServer, stopServer } from '../tests/browser/harness.mjs';

const [bin, model, tArg] = process.argv.slice(2);
if (!bin || !model) throw new Error('usage: node bench/long_view.mjs BUILD/attnscope MODEL_DIR [T]');
const T = +(tArg ?? 8192);
const V = JSON.parse(readFileSync(join(model, 'config.json'), 'utf8')).vocab_size;
const ids = Array.from({ length: T }, (_, i) => (i * 7919 + 13) % V);
const name = basename(model.replace(/\/$/, ''));
const tmp = mkdtempSync(join(tmpdir(), 'attnscope-long-view-'));
const { p, url } = await startServer(bin, ['--model', model]);
const { browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { height: 1100 });
const settled = (n) => page.waitForFunction((n) => {
  const h = window.__attnscope?.longmap;
  return h && !h.loading && h.tile && h.tile.r1 - h.tile.r0 === n;
}, n, { timeout: 600_000 });
try {
  let t = Date.now();
  await page.goto(`${url}/?model=${name}&text=${ids.join(',')}&layer=0&head=0`);
  await settled(T);
  console.log(`page, run and the whole head drawn: ${Date.now() - t} ms`);
  for (let n = T / 2; n >= 32; n /= 2) {
    t = Date.now();
    await page.getByTestId('long-zoom-in').click();
    await settled(n);
    console.log(`zoom in to ${n} tokens: ${Date.now() - t} ms`);
  }
  await page.getByTestId('long-zoom-reset').click();
  await settled(T);
  t = Date.now();
  await page.getByTestId('long-head').selectOption('1');
  await page.waitForFunction(() => window.__attnscope.longmap.tile?.pr && !window.__attnscope.longmap.loading && window.__attnscope.longview.head === 1);
  await settled(T);
  console.log(`another head, whole: ${Date.now() - t} ms`);
  t = Date.now();
  await page.getByTestId('long-sink').check();
  await page.waitForFunction(() => window.__attnscope.longmap.tile?.exclude?.[0] === 0 && !window.__attnscope.longmap.loading, null, { timeout: 600_000 });
  console.log(`the sink left out, whole head: ${Date.now() - t} ms`);
} finally {
  await browser.close();
  await stopServer(p);
  rmSync(tmp, { recursive: true, force: true });
}
