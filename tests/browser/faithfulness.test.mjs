// faithfulness.test.mjs — the attribution view's faithfulness panel (ctest
// browser_faithfulness) on the shipped models/attnscope-sst2 classifier and the gpt2 LM
// fixture. Checks:
//   - ?view=attribution shows one row per method (saliency, attribution, random baseline)
//     whose comprehensiveness and sufficiency are the route's GET .../faithfulness values
//     (3 decimals, no sign on a value that rounds to zero), and whose sparkline is the route's deletion curve (its
//     points recomputed here: x evenly spread, y = 1 - p over the height);
//   - the row of the attribution method selected is marked, and follows the selector
//     (gradient-weighted attention = the grad-attn row);
//   - the values the view holds (window.__attnscope.faithfulness) equal the route's;
//   - an LM shows the server's one-line reason instead of a table.
// Screenshots go to tests/browser/artifacts/faithfulness-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const SST = join(ROOT, 'models', 'attnscope-sst2');
const GPT2 = join(ROOT, 'tests', 'ref', 'fixtures', 'models', 'gpt2');
const TEXT = 'a gripping , funny and quite unforgettable film .';

let server, base, browser, page, tmp;

/** the panel's number format: three decimals, no sign on a value that rounds to zero */
const fmt = (x) => (x.toFixed(3) === '-0.000' ? '0.000' : x.toFixed(3));

const hook = (name) => page.evaluate((n) => window.__attnscope?.[n] ?? null, name);
async function until(name, ok) {
  for (let i = 0; i < 600; i++) {
    const v = await hook(name);
    if (v && ok(v)) return v;
    await page.waitForTimeout(50);
  }
  throw new Error(`window.__attnscope.${name} never satisfied the test`);
}

async function post(path, body) {
  const r = await fetch(`${base}${path}`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  assert.equal(r.status, 200);
  return r.json();
}

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  if (!existsSync(join(SST, 'model.safetensors'))) {
    console.log('SKIPPED: models/attnscope-sst2 is not shipped');
    process.exit(77);
  }
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-faithfulness-'));
  const s = await startServer(BIN, ['--model', SST, '--model', GPT2]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile')));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

test('the panel shows the route\'s comprehensiveness, sufficiency and deletion curve of every method', async () => {
  await page.goto(`${base}/?model=attnscope-sst2&text=${encodeURIComponent(TEXT)}&view=attribution&attr=rollout`);
  await page.waitForSelector('[data-testid="faith-row"]');
  const run = await post('/api/v1/run', { model: 'attnscope-sst2', text: TEXT });
  const r = await fetch(`${base}/api/v1/runs/${run.id}/faithfulness`);
  assert.equal(r.status, 200);
  const f = await r.json();
  const held = await until('faithfulness', (v) => v.methods?.length === 10);
  assert.deepEqual({ ...held, run: f.run }, f, 'the view holds the route\'s result');
  const rows = await page.$$eval('[data-testid="faith-row"]', (trs) =>
    trs.map((tr) => ({
      method: tr.dataset.method,
      current: tr.classList.contains('current'),
      comp: tr.querySelector('[data-testid="faith-comp"]').textContent,
      suff: tr.querySelector('[data-testid="faith-suff"]').textContent,
      points: tr.querySelector('[data-testid="faith-spark"] polyline').getAttribute('points'),
      width: Number(tr.querySelector('[data-testid="faith-spark"]').getAttribute('width')),
      height: Number(tr.querySelector('[data-testid="faith-spark"]').getAttribute('height')),
    })),
  );
  assert.deepEqual(rows.map((x) => x.method), ['grad', 'gxi', 'ig', 'rollout', 'flow', 'norm', 'norm2', 'alti', 'grad-attn', 'random']);
  for (const [i, row] of rows.entries()) {
    const m = f.methods[i];
    assert.equal(row.comp, fmt(m.comprehensiveness), `${row.method} comprehensiveness`);
    assert.equal(row.suff, fmt(m.sufficiency), `${row.method} sufficiency`);
    const pts = row.points.split(' ').map((p) => p.split(',').map(Number));
    assert.equal(pts.length, f.tokens + 1, `${row.method}: one point per step of the deletion curve`);
    const w = row.width - 2, h = row.height - 2;
    for (const [k, [x, y]] of pts.entries()) {
      assert.ok(Math.abs(x - (1 + (k * w) / f.tokens)) < 0.01, `${row.method} x ${k}`);
      assert.ok(Math.abs(y - (1 + (1 - m.deletion[k]) * h)) < 0.01, `${row.method} y ${k}: ${y} for p ${m.deletion[k]}`);
    }
  }
  assert.deepEqual(rows.filter((x) => x.current).map((x) => x.method), ['rollout']);
  assert.match(await page.textContent('[data-testid="faith-predicted"]'), new RegExp(`p\\(${f.label}\\) = ${f.probs[f.predicted].toFixed(4)}`));
  await page.screenshot({ path: join(ART, 'faithfulness-sst2.png'), fullPage: true });

  await page.selectOption('[data-testid="attr-method"]', 'grad');
  await page.waitForSelector('[data-testid="faith-row"][data-method="grad-attn"].current');
  await page.selectOption('[data-testid="attr-method"]', 'importance');
  await page.waitForFunction(() => !document.querySelector('[data-testid="faith-row"].current'));
});

test('a model without a classifier head gets the server\'s reason', async () => {
  await page.goto(`${base}/?model=gpt2&ids=1,5,9,12&view=attribution&attr=rollout`);
  await page.waitForSelector('[data-testid="faith-error"]');
  assert.match(await page.textContent('[data-testid="faith-error"]'), /sequence-classifier head/);
  assert.equal(await page.$('[data-testid="faith-row"]'), null);
});
