// bench/long_targets.mjs — the browser side of bench/long_targets.py: Debian's Chromium
// (playwright-core) against the real `attnscope serve`. On a long input (the long map):
// opening a head's whole map, the tooltip under the pointer (and its exact weight) on the
// whole map and after the zoom steps, a zoom step and a drag's first redraw; on a 32 × 32-head model, the model view's 1,024
// thumbnails from its one pooled request. Times are the page's performance.now()
// (event to the state drawn, read at the next animation frame: an upper bound) and
// include the server's tile; a zoom, drag or hover is timed from its event in the page.
// Measures; asserts nothing.
//   node bench/long_targets.mjs BUILD/attnscope LONG_MODEL T VIEW_MODEL VIEW_T [REPEAT]
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { chromium } from '../tests/browser/node_modules/playwright-core/index.mjs';
import { openBrowser, startServer, stopServer } from '../tests/browser/harness.mjs';

const [bin, model, tArg, viewModel, vtArg, repArg] = process.argv.slice(2);
if (!bin || !model || !viewModel) throw new Error('usage: node bench/long_targets.mjs BIN LONG_MODEL T VIEW_MODEL VIEW_T [REPEAT]');
const T = +(tArg ?? 8192), VT = +(vtArg ?? 512), REPEAT = +(repArg ?? 2);
const cfg = (m) => JSON.parse(readFileSync(join(m, 'config.json'), 'utf8'));
const ids = (m, n) => Array.from({ length: n }, (_, i) => (i * 7919 + 13) % cfg(m).vocab_size);
const nameOf = (m) => basename(m.replace(/\/$/, ''));
const tmp = mkdtempSync(join(tmpdir(), 'attnscope-long-targets-'));
const LONG = 1_800_000;
const ms = (v) => `${v.toFixed(0)} ms`;
const hwm = (pid) => (+/VmHWM:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))[1] / 1000).toFixed(0);
let srvPid = 0;

/* the long map's state once its tile is the window's (drawn), in the page */
const settledNow = () => {
  const h = window.__attnscope?.longmap;
  return !!(h && !h.loading && h.tile && h.tile.r0 === h.win.r0 && h.tile.c0 === h.win.c0 && h.tile.r1 - h.tile.r0 === h.win.n);
};

/* performance.now() at the first animation frame where pred() holds, polled each frame */
async function frameWhen(page, t0name, pred, timeout = 120_000) {
  return page.evaluate(async ([t0name, src, timeout]) => {
    const f = new Function(`return (${src})()`);
    const t0 = window.__lt[t0name];
    return new Promise((res, rej) => {
      const tick = () => {
        if (f()) return res(performance.now() - t0);
        if (performance.now() - t0 > timeout) return rej(new Error('timeout'));
        requestAnimationFrame(tick);
      };
      tick();
    });
  }, [t0name, pred.toString(), timeout]);
}

async function longMap(browser, page, url) {
  const H = cfg(model).num_attention_heads, L = cfg(model).num_hidden_layers;
  let runId = '';
  page.on('request', (r) => {
    const m = /\/runs\/([^/]+)\/tile/.exec(r.url());
    if (m) runId = m[1];
  });
  let t = Date.now();
  await page.goto(`${url}/?model=${nameOf(model)}&text=${ids(model, T).join(',')}&layer=0&head=0`);
  await page.waitForFunction(settledNow, null, { timeout: LONG });
  console.log(`page, run (${T} tokens, stats,qkv) and head 0 drawn: ${Date.now() - t} ms; server peak RSS ${hwm(srvPid)} MB`);
  /* the server alone: the whole-head tile the map asks for (n=256), a 64 x 64 block, one cell */
  const runs = [runId].filter(Boolean);
  if (runs.length) {
    const c = T / 2;
    for (const [what, q] of [['whole head L0 H2, 256 x 256', 'layer=0&head=2&n=256'], [`whole head L${L - 1} H${H - 2}, 256 x 256`, `layer=${L - 1}&head=${H - 2}&n=256`],
      ['64 x 64 block at full resolution', `layer=0&head=2&rows=${c}-${c + 63}&cols=${c - 64}-${c - 1}&n=64`], ['one cell', `layer=0&head=2&rows=${c}-${c}&cols=0-0&n=1`],
      [`every head of layer 0, 16 x 16 (${H} heads)`, `layers=0-0&heads=0-${H - 1}&n=16`]]) {
      const t0 = performance.now();
      const r = await fetch(`${url}/api/v1/runs/${runs.at(-1)}/tile?${q}`);
      const n = (await r.arrayBuffer()).byteLength;
      console.log(`  server tile ${what}: ${ms(performance.now() - t0)} (HTTP ${r.status}, ${n} bytes)`);
    }
  }
  await page.evaluate(() => {
    window.__lt = { move: 0, tip: 0, last: '' };
    addEventListener('mousemove', () => (window.__lt.move = performance.now()), true);
    addEventListener('change', () => (window.__lt.sel = performance.now()), true);
    addEventListener('wheel', () => (window.__lt.wheel = performance.now()), { capture: true, passive: true });
    new MutationObserver(() => {
      const el = document.querySelector('[data-testid=long-tip]');
      const s = el ? el.textContent : '';
      if (s && s !== window.__lt.last) { window.__lt.last = s; window.__lt.tip = performance.now(); }
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  const heads = [[0, 1], [L - 1, H - 1], [Math.floor(L / 2), 7 % H], [1, 3 % H]].slice(0, 2 * REPEAT);
  for (const [l, h] of heads) {
    await page.getByTestId('long-layer').selectOption(String(l));
    await page.getByTestId('long-head').selectOption(String(h)); /* __lt.sel: the head's change event */
    const dt = await frameWhen(page, 'sel', `() => { const h = window.__attnscope.longmap; return h.layer === ${l} && h.head === ${h} && (${settledNow})(); }`);
    console.log(`open layer ${l} head ${h}, whole ${T} x ${T} map drawn: ${ms(dt)} (from the head's change event; 60 ms of it the map's rest before asking)`);
  }
  const canvas = page.getByTestId('long-canvas');
  await canvas.scrollIntoViewIfNeeded();
  const box = await canvas.boundingBox();
  const lm = await page.evaluate(() => window.__attnscope.longmap);
  const cx = box.x + lm.left + lm.size / 2, cy = box.y + lm.top + lm.size / 2;
  await hovers(page, cx, cy, -1, `the whole ${T} x ${T} map (zoomed fully out)`); /* below the diagonal: keys a causal query sees */
  for (let i = 0; i < 2 * REPEAT; i++) {
    await page.mouse.move(cx, cy);
    await page.mouse.wheel(0, -100); /* __lt.wheel: the event's time in the page */
    const frame = await frameWhen(page, 'wheel', () => {
      const h = window.__attnscope.longmap;
      return h.frame && h.frame.n === h.win.n && h.win.n < (window.__lt.lastN ?? Infinity);
    }, 5000).catch(() => NaN);
    const full = await frameWhen(page, 'wheel', settledNow);
    const n = await page.evaluate(() => (window.__lt.lastN = window.__attnscope.longmap.win.n));
    console.log(`zoom (wheel) to a ${n}-token window: first frame of the new window ${Number.isNaN(frame) ? 'n/a (the map redraws only with the new tile)' : ms(frame)}, its own tile drawn ${ms(full)}`);
  }
  for (let i = 0; i < REPEAT; i++) {
    await page.mouse.move(cx, cy);
    await page.mouse.down();
    const before = await page.evaluate(() => ({ ...window.__attnscope.longmap.win }));
    await page.mouse.move(cx + 40, cy + 40);
    const frame = await frameWhen(page, 'move', `() => { const f = window.__attnscope.longmap.frame; return f && f.r0 !== ${before.r0}; }`, 5000).catch(() => NaN);
    const full = await frameWhen(page, 'move', settledNow);
    await page.mouse.up();
    console.log(`pan (drag by 40 px): first frame ${Number.isNaN(frame) ? 'n/a (the map redraws only with the new tile)' : ms(frame)}, the window's tile drawn ${ms(full)}`);
  }
  await hovers(page, cx, cy, 1, `a ${(await page.evaluate(() => window.__attnscope.longmap.win.n))}-token window`);
}

/* 2 x REPEAT hovers around (cx, cy), each on another query row (dir 1: up and right, -1: down
   and left): the tooltip (block max / mean) and its exact weight */
async function hovers(page, cx, cy, dir, where) {
  for (let i = 0; i < 2 * REPEAT; i++) {
    await page.waitForFunction(settledNow);
    await page.mouse.move(cx + dir * 17 * (i + 1), cy - dir * 11 * (i + 1));
    await page.waitForFunction(() => window.__lt.tip > window.__lt.move);
    const tip = await page.evaluate(() => window.__lt.tip - window.__lt.move);
    await page.evaluate(() => (window.__lt.hov = window.__lt.move));
    const exact = await frameWhen(page, 'hov', () => !!document.querySelector('[data-testid=long-exact]'));
    console.log(`hover on ${where}: tooltip (block max / mean) ${ms(tip)}, exact weight shown ${ms(exact)} (a segment of the query's row asked for at once, unless at full resolution)`);
  }
}

async function modelView(browser, page, url) {
  const c = cfg(viewModel);
  for (let i = 0; i < REPEAT; i++) {
    const t = Date.now();
    await page.goto(`${url}/?model=${nameOf(viewModel)}&text=${ids(viewModel, VT).join(',')}&view=model`);
    await page.waitForFunction(() => window.__attnscope?.modelView?.renderMs > 0, null, { timeout: LONG });
    const mv = await page.evaluate(() => window.__attnscope.modelView);
    console.log(`model view ${c.num_hidden_layers} x ${c.num_attention_heads} = ${c.num_hidden_layers * c.num_attention_heads} thumbnails, T = ${VT} (dense run), pool ${mv.pool}: ` +
      `pooled request to drawn ${ms(mv.renderMs)}; page load with the run ${Date.now() - t} ms${i ? ' (run cached)' : ''}`);
  }
}

let srv;
let br;
try {
  srv = await startServer(bin, ['--model', model]);
  srvPid = srv.p.pid;
  br = await openBrowser(chromium, join(tmp, 'profile'), { height: 1100 });
  await longMap(br.browser, br.page, srv.url);
  console.log(`server peak RSS at the end: ${hwm(srvPid)} MB`);
  await br.browser.close();
  await stopServer(srv.p);
  console.log('');
  srv = await startServer(bin, ['--model', viewModel]);
  br = await openBrowser(chromium, join(tmp, 'profile2'), { height: 1100 });
  await modelView(br.browser, br.page, srv.url);
} finally {
  await br?.browser.close();
  await stopServer(srv.p);
  rmSync(tmp, { recursive: true, force: true });
}
