// encdec_overview.test.mjs — the head overview of an encoder-decoder analysis (ctest
// browser_encdec_overview): tests/cli/align_model.py writes a random BART with a byte-level
// tokenizer; `attnscope analyze --source --target --gold` stores two sentence pairs of
// data/align in table encdec_heads; `attnscope serve --db` shows the run. Checks: the
// overview offers the Encoder / Decoder / Cross kinds; every cell of each kind and
// statistic shows the SQLite row's value (3 decimals); cross-attention offers its AER and
// not the distances; clicking a cell selects that head; the labels in Chinese; a second run
// analysed with --topk 3 shows a chosen pair's stored cross-attention top-k for the selected
// head, each key and weight the kind=cross topk-all route's (checked against NumPy in
// tests/cli/test_align_analyze.sh).
// Screenshot: tests/browser/artifacts/encdec_overview.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { openBrowser, startServer, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');

let server, base, browser, page, tmp, rows;

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-edov-'));
  const model = join(tmp, 'bartbytes'), db = join(tmp, 'ed.sqlite');
  execFileSync('/usr/bin/python3', [join(ROOT, 'tests', 'cli', 'align_model.py'), model]);
  writeFileSync(join(tmp, 's.en'), 'she does not like coffee .\nthe house is small .\n');
  writeFileSync(join(tmp, 's.de'), 'sie mag keinen Kaffee .\ndas Haus ist klein .\n');
  writeFileSync(join(tmp, 's.align'), '0-0 1?1 2-2 3-1 4-3 5-4\n0-0 1-1 2-2 3-3 4-4\n');
  execFileSync(BIN, ['analyze', '--model', model, '--source', join(tmp, 's.en'), '--target', join(tmp, 's.de'),
    '--gold', join(tmp, 's.align'), '--db', db, '--quiet']);
  execFileSync(BIN, ['analyze', '--model', model, '--source', join(tmp, 's.en'), '--target', join(tmp, 's.de'),
    '--db', db, '--topk', '3', '--quiet']);
  rows = JSON.parse(execFileSync('sqlite3', ['-json', db, 'SELECT * FROM encdec_heads WHERE run = 1 ORDER BY kind, layer, head']).toString());
  const s = await startServer(BIN, ['--model', model, '--db', db]);
  server = s.p;
  base = s.url;
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile'), { height: 1000 }));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

const cell = async (l, h) => (await page.textContent(`[data-testid=ed-cell-${l}-${h}]`)).trim();
const options = () => page.$$eval('[data-testid=ed-stat] option', (o) => o.map((x) => x.value));

test('each kind and statistic shows the SQLite rows of encdec_heads', async () => {
  await page.goto(`${base}/?view=overview&dbrun=1`);
  await page.waitForSelector('[data-testid=ed-table]');
  assert.equal(rows.length, 2 * 3 + 3 * 3 + 3 * 3);
  for (const kind of ['encoder', 'decoder', 'cross']) {
    await page.click(`[data-testid=kind-${kind}]`);
    await page.waitForSelector(`[data-testid=kind-${kind}][aria-checked=true]`);
    const mine = rows.filter((r) => r.kind === kind);
    const L = kind === 'encoder' ? 2 : 3;
    assert.equal(await page.$$eval('[data-testid=ed-table] tbody tr', (r) => r.length), L, `${kind}: ${L} layers`);
    const stats = await options();
    if (kind === 'cross') assert.deepEqual(stats, ['entropy', 'sink', 'max', 'aer'], 'cross-attention: no distances, its AER');
    else assert.deepEqual(stats, ['entropy', 'sink', 'self', 'prev', 'next', 'dist', 'spread', 'max']);
    for (const stat of stats) {
      await page.selectOption('[data-testid=ed-stat]', stat);
      for (const r of mine) {
        const want = r[stat] === null ? '—' : r[stat].toFixed(3);
        assert.equal(await cell(r.layer, r.head), want, `${kind} ${stat} L${r.layer}H${r.head}`);
      }
    }
  }
  await page.screenshot({ path: join(ART, 'encdec_overview.png'), fullPage: true });
});

test('clicking a cell selects the head; the labels in Chinese', async () => {
  await page.click('[data-testid=ed-cell-2-1] button');
  await page.waitForFunction(() => /[?&]layer=2/.test(location.search) && /[?&]head=1/.test(location.search));
  assert.ok(await page.$eval('[data-testid=ed-cell-2-1]', (e) => e.classList.contains('sel')));
  await page.goto(`${base}/?view=overview&dbrun=1&lang=zh-CN`);
  await page.waitForSelector('[data-testid=ed-table]');
  assert.equal((await page.textContent('[data-testid=kind-cross]')).trim(), '交叉');
  assert.match(await page.textContent('[data-testid=ed-hint]'), /^交叉：3 层 × 3 个头/);
});

test('a run analysed with --topk shows a pair\'s cross-attention top-k for the selected head', async () => {
  await page.goto(`${base}/?view=overview&dbrun=2`);
  await page.waitForSelector('[data-testid=ed-table]');
  await page.click('[data-testid=ed-cell-2-1] button');
  await page.fill('[data-testid=ed-topk-pair]', '1');
  await page.waitForSelector('[data-testid=topk-panel][data-kind=cross] [data-testid=topk-row]');
  const buf = Buffer.from(await (await fetch(`${base}/api/v1/db/runs/2/sentences/1/topk-all?kind=cross`)).arrayBuffer());
  const n = buf.readUInt32LE(4), header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const t = Object.fromEntries(header.tensors.map((x) => {
    const b = buf.subarray(8 + n + x.offset, 8 + n + x.offset + x.nbytes);
    return [x.name, new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength))];
  }));
  const { layers, heads, tokens: T, keys, k, kind } = header.meta;
  assert.deepEqual([kind, layers, heads, k], ['cross', 3, 3, 3]);
  const shown = await page.$$eval('[data-testid=topk-panel][data-kind=cross] [data-testid=topk-row]', (rs) =>
    rs.map((r) => ({ q: +r.dataset.q, keys: [...r.querySelectorAll('[data-testid=topk-key]')].map((e) => [+e.dataset.k, +e.dataset.w]) })));
  assert.equal(shown.length, T, 'a row per target token');
  for (const { q, keys: ks } of shown) {
    const o = ((2 * heads + 1) * T + q) * k;
    const want = [...t.index.subarray(o, o + k)].map((x, j) => [x, t.weight[o + j]]).filter(([x]) => x >= 0);
    assert.deepEqual(ks.map(([x]) => x), want.map(([x]) => x), `row ${q}: the stored keys`);
    for (let j = 0; j < ks.length; j++) assert.ok(Math.abs(ks[j][1] - want[j][1]) <= 1e-6 && ks[j][0] < keys);
  }
});
