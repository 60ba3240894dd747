// bench/long_modelview.mjs — the browser side of bench/long_modelview.py: the model view of
// a long run (all L × H thumbnails from one GET .../thumbs, pooled by the forward) in
// Debian's Chromium (playwright-core) against the real `attnscope serve` (reniced to 10), or
// against a server already running at URL (pid PID) that long_modelview.py started and ran
// the ids on. For REPEAT page loads: the page with the ids in its URL (without URL the first
// load runs the forward; later ones, and every one with URL, find the run in the server's
// cache), then the time from the thumbs request to
// the grid drawn (the view's renderMs: performance.now() from the request to the next
// animation frame after the thumbnails arrive, an upper bound), the request's own time and
// bytes (resource timing), and switching the colouring to sink mass. Measures; asserts nothing.
//   node bench/long_modelview.mjs BUILD/attnscope MODEL T [REPEAT [URL PID]]
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { chromium } from '../tests/browser/node_modules/playwright-core/index.mjs';
import { openBrowser, startServer, stopServer } from '../tests/browser/harness.mjs';

const [bin, model, tArg, repArg, urlArg, pidArg] = process.argv.slice(2);
if (!bin || !model) throw new Error('usage: node bench/long_modelview.mjs BIN MODEL T [REPEAT]');
const T = +(tArg ?? 8192), REPEAT = +(repArg ?? 2);
const cfg = JSON.parse(readFileSync(join(model, 'config.json'), 'utf8'));
const ids = Array.from({ length: T }, (_, i) => (i * 7919 + 13) % cfg.vocab_size);
const tmp = mkdtempSync(join(tmpdir(), 'attnscope-long-modelview-'));
const LONG = 3_600_000;
const hwm = (pid) => ((+/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1] * 1024) / 1e6).toFixed(0);
const load = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

let srv, br;
try {
  if (urlArg) srv = { url: urlArg, p: { pid: +pidArg }, ours: false };
  else {
    srv = { ...(await startServer(bin, ['--model', model])), ours: true };
    execFileSync('renice', ['-n', '10', '-p', String(srv.p.pid)], { stdio: 'ignore' });
  }
  br = await openBrowser(chromium, join(tmp, 'profile'), { height: 1400 });
  const page = br.page;
  page.setDefaultTimeout(LONG);
  for (let i = 0; i < REPEAT; i++) {
    const t = Date.now();
    await page.goto(`${srv.url}/?model=${basename(model.replace(/\/$/, ''))}&text=${ids.join(',')}&view=model`, { timeout: LONG });
    await page.waitForFunction(() => window.__attnscope?.modelView?.renderMs > 0 || document.querySelector('[data-testid=status].error'), null, { timeout: LONG });
    const err = await page.evaluate(() => document.querySelector('[data-testid=status].error')?.textContent ?? '');
    if (err) {
      console.log(`load ${i + 1}: the page shows an error after ${Date.now() - t} ms: ${err}`);
      continue;
    }
    const mv = await page.evaluate(() => window.__attnscope.modelView);
    const rt = await page.evaluate(() => performance.getEntriesByType('resource').filter((e) => e.name.includes('/thumbs')).map((e) => ({ ms: e.duration, bytes: e.encodedBodySize })));
    const n = await page.getByTestId('grid-focus').locator('button').count();
    console.log(`load ${i + 1}${i || urlArg ? ' (run cached)' : ' (with the forward)'}: ${n} thumbnails, T = ${mv.tokens}, pool ${mv.pool}: thumbs request to grid drawn ${mv.renderMs.toFixed(0)} ms ` +
      `(the request ${rt.map((r) => `${r.ms.toFixed(0)} ms, ${(r.bytes / 1e6).toFixed(1)} MB`).join('; ')}); page load ${Date.now() - t} ms; ` +
      `server peak RSS ${hwm(srv.p.pid)} MB; load average ${load()}`);
    const t0 = Date.now();
    await page.getByTestId('grid-colour').selectOption('sink');
    await page.waitForFunction(() => window.__attnscope?.modelView?.stat?.name === 'sink');
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r())));
    console.log(`  colour by sink mass: ${Date.now() - t0} ms (no request)`);
  }
} finally {
  await br?.browser.close();
  if (srv?.ours) await stopServer(srv.p);
  rmSync(tmp, { recursive: true, force: true });
}
