// bench/notebook_view.mjs — times the pages of bench/notebook_bench.py in headless Chromium
// with every network request refused (as a notebook without internet): for each
// attnscope head view page, from navigation (file://) to the first drawn head view
// (window.__attnscope.headDraw.links > 0, the browser tests' hook), and on to every layer
// taken in (window.__attnscope.allLayersMs set: the page's later layer elements arrive
// while the view is shown, python/attnscope/views.py); for each bertviz JSON
// page, from navigation to the end of parsing its params literal (bertviz's drawing needs
// its CDN scripts, so this is a lower bound of its render). A page that does not finish
// within LIMIT_S seconds (default 300) or crashes the tab is reported as such. Measures;
// asserts nothing. Needs tests/browser's playwright-core and /usr/bin/chromium.
// ONLY=REGEX times only the pages whose file name matches. A notebook cell's page
// (cell*.html) is timed inside its srcdoc frame; its page clock is the frame's.
//   node bench/notebook_view.mjs OUT_DIR [ROUNDS]
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from '../tests/browser/node_modules/playwright-core/index.mjs';
import { openBrowser } from '../tests/browser/harness.mjs';

const [dirArg, roundsArg] = process.argv.slice(2);
if (!dirArg) throw new Error('usage: node bench/notebook_view.mjs OUT_DIR [ROUNDS]');
const dir = resolve(dirArg);
const rounds = +(roundsArg ?? 3);
const limit = 1000 * +(process.env.LIMIT_S ?? 300);
const only = process.env.ONLY ? new RegExp(process.env.ONLY) : null;
const rows = JSON.parse(readFileSync(join(dir, 'sizes.json'), 'utf8')).filter((r) => !only || only.test(r.file));
const tmp = mkdtempSync(join(tmpdir(), 'attnscope-nb-view-'));
const results = [];
try {
  for (const row of rows) {
    const times = [];
    /** the page's own clock at the first draw: from its navigation's start, without starting the browser */
    const pageMs = [];
    const all = [];
    let note = '';
    for (let k = 0; k < rounds && !note; k++) {
      const { browser, page } = await openBrowser(chromium, join(tmp, `profile-${k}`), { height: 1000 });
      await browser.route('**/*', (r) => (r.request().url().startsWith('file://') ? r.continue() : r.abort()));
      const bertviz = row.file.startsWith('bertviz');
      const t0 = Date.now();
      try {
        await page.goto(`file://${join(dir, row.file)}`, { waitUntil: 'commit', timeout: limit });
        /* a notebook cell's page: the view runs in its srcdoc frame */
        let view = page.mainFrame();
        while (row.file.startsWith('cell') && view === page.mainFrame()) {
          view = page.frames().find((f) => f.url() === 'about:srcdoc') ?? view;
          if (view === page.mainFrame()) await new Promise((r) => setTimeout(r, 20));
        }
        await view.waitForFunction(
          (bv) => (bv ? window.__parsed !== undefined : window.__attnscope?.headDraw?.links > 0),
          bertviz, { timeout: limit, polling: 20 });
        times.push(Date.now() - t0);
        pageMs.push(Math.round(await view.evaluate(() => performance.now())));
        if (!bertviz) {
          await view.waitForFunction(() => window.__attnscope?.allLayersMs !== undefined, null, { timeout: limit, polling: 20 });
          all.push(Date.now() - t0);
        }
      } catch (e) {
        note = `did not finish: ${String(e.message).split('\n')[0].slice(0, 120)}`;
      }
      await browser.close();
    }
    times.sort((a, b) => a - b);
    all.sort((a, b) => a - b);
    pageMs.sort((a, b) => a - b);
    const med = (xs) => (xs.length ? xs[xs.length >> 1] : null);
    const r = { T: row.T, what: row.what, mb: +(statSync(join(dir, row.file)).size / 1e6).toFixed(1), ms: times, median_ms: med(times), page_ms: pageMs, median_page_ms: med(pageMs), all_layers_ms: all, median_all_layers_ms: med(all), note };
    results.push(r);
    const rest = (pageMs.length ? ` (page clock ${r.median_page_ms} ms: ${pageMs.join(', ')})` : '') + (all.length ? `; all layers in ${r.median_all_layers_ms} ms (rounds: ${all.join(', ')})` : '');
    console.log(`T=${r.T} ${r.what.padEnd(32)} ${String(r.mb).padStart(7)} MB  ${r.median_ms === null ? note : `drawn/parsed in ${r.median_ms} ms (rounds: ${times.join(', ')})${rest}`}`);
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
writeFileSync(join(dir, 'view_times.json'), JSON.stringify(results, null, 1));
