// topkview.test.mjs — the stored top-k attention in the instance view's sentence panel
// (ctest browser_topkview): `attnscope analyze --topk 4` of models/attnscope-sst2 on a
// five-sentence CoNLL-U corpus (as tests/cli/test_analyze_topk.sh makes it), served with
// --db. Checks, against the SQLite rows themselves (read with the sqlite3 CLI and decoded
// here: k int32 indices, k float32 weights, one float32 rest per query):
//   - selecting a sentence shows, for the selected head, every query's listed keys and
//     weights and its remaining mass, equal to the stored row (float32, exactly);
//   - choosing another layer and head in the panel shows that head's rows;
//   - the kept mass per layer equals the mean over the layer's heads and the sentence's
//     queries of the stored weights' sum (1e-9);
//   - a run analysed without --topk shows no top-k panel.
// Screenshots go to tests/browser/artifacts/topkview-*.png.
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
const MODEL = join(ROOT, 'models', 'attnscope-sst2');
const K = 4;

let server, base, browser, page, tmp, db;

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-topkview-'));
  const cu = join(tmp, 'ud.conllu');
  let text = '';
  for (let i = 1; i <= 5; i++)
    text += `# text = The cat sat ${i}.\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n` +
      `3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_\n4\t${i}\t${i}\tNUM\tCD\t_\t3\tobj\t_\tSpaceAfter=No\n5\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n\n`;
  writeFileSync(cu, text);
  db = join(tmp, 't.db');
  const a = ['analyze', '--model', MODEL, '--conllu', cu, '--threads', '1', '--min-rel', '1', '--quiet', '--db', db];
  execFileSync(BIN, [...a, '--topk', String(K)]);
  execFileSync(BIN, a); /* run 2: no top-k */
  ({ p: server, url: base } = await startServer(BIN, ['--model', MODEL, '--db', db]));
  ({ browser, page } = await openBrowser(chromium, join(tmp, 'profile')));
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** The stored top-k of (sent, layer, head) of run 1, decoded from SQLite: per query {index, weight, rest}. */
function stored(sent, layer, head) {
  const out = execFileSync('sqlite3', [db, `SELECT k, n_query, hex(rows) FROM topk WHERE run = 1 AND sent = ${sent} AND layer = ${layer} AND head = ${head}`]).toString().trim();
  const [k, nq, hex] = out.split('|');
  assert.equal(Number(k), K);
  const b = Buffer.from(hex, 'hex');
  const rows = [];
  for (let q = 0; q < Number(nq); q++) {
    const o = q * (K * 8 + 4);
    rows.push({
      index: Array.from({ length: K }, (_, j) => b.readInt32LE(o + 4 * j)),
      weight: Array.from({ length: K }, (_, j) => b.readFloatLE(o + 4 * K + 4 * j)),
      rest: b.readFloatLE(o + 8 * K),
    });
  }
  return rows;
}

/** The panel's rows as shown: per query the keys (index, weight) and the rest. */
const shown = () => page.$$eval('[data-testid=topk-row]', (rs) => rs.map((r) => ({
  q: Number(r.dataset.q),
  keys: Array.from(r.querySelectorAll('[data-testid=topk-key]'), (e) => [Number(e.dataset.k), Number(e.dataset.w)]),
  rest: Number(r.querySelector('[data-testid=topk-rest]').dataset.w),
})));

async function expectHead(sent, layer, head) {
  const want = stored(sent, layer, head);
  await page.waitForFunction(({ layer, head }) => document.querySelector('[data-testid=topk-layer]')?.value === String(layer) &&
    document.querySelector('[data-testid=topk-head]')?.value === String(head), { layer, head });
  const got = await shown();
  assert.equal(got.length, want.length, 'a row per query');
  got.forEach((r, q) => {
    const keys = want[q].index.map((ix, j) => [ix, want[q].weight[j]]).filter(([ix]) => ix >= 0);
    assert.equal(r.q, q);
    assert.deepEqual(r.keys.map(([ix, w]) => [ix, Math.fround(w)]), keys, `L${layer}H${head} query ${q}: keys`);
    assert.equal(Math.fround(r.rest), want[q].rest, `L${layer}H${head} query ${q}: rest`);
  });
}

test('the sentence panel shows the stored top-k rows and the kept mass per layer', async () => {
  await page.goto(`${base}/?view=instances&dbrun=1&sent=2&layer=1&head=3`);
  await page.waitForSelector('[data-testid=topk-row]');
  await expectHead(2, 1, 3);
  await page.selectOption('[data-testid=topk-layer]', '3');
  await page.selectOption('[data-testid=topk-head]', '0');
  await expectHead(2, 3, 0);
  // the kept mass per layer: mean over heads and queries of the stored weights' sum
  const kept = await page.$$eval('[data-testid=topk-kept]', (es) => es.map((e) => [Number(e.dataset.l), Number(e.dataset.v)]));
  const L = kept.length;
  assert.equal(L, 4);
  for (const [l, v] of kept) {
    let s = 0, n = 0;
    for (let h = 0; h < 4; h++) for (const r of stored(2, l, h)) { s += r.weight.reduce((a, b) => a + b, 0); n++; }
    assert.ok(Math.abs(v - s / n) < 1e-9, `layer ${l}: kept ${v} vs ${s / n} from SQLite`);
    assert.ok(v > 0 && v <= 1 + 1e-6);
  }
  await page.screenshot({ path: join(ART, 'topkview-panel.png'), fullPage: true });
});

test('a run without --topk shows no top-k panel', async () => {
  await page.goto(`${base}/?view=instances&dbrun=2&sent=2`);
  await page.waitForSelector('[data-testid=sent-tokens]');
  assert.equal(await page.$$eval('[data-testid=topk-panel]', (e) => e.length), 0);
});
