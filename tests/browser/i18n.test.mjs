// i18n.test.mjs — browser test of the explorer's language switch (English / Simplified
// Chinese, lib/i18n.ts): the zh-CN dictionary has every key of en (read from the page's
// test hook); a zh-CN browser locale opens every view (head, model, neuron, and with --db
// the overview, instances, dependency, graph, pattern and comparison) in Chinese, with
// none of a list of English UI labels left in the visible text and Chinese in the drawn
// (exported SVG) text; the switch changes the
// language and the URL's lang without a history entry, and Back and reload keep it; a lang
// in the URL wins over the browser's; an en locale gets English. Drives the real
// `attnscope serve` with the database of tests/ref/make_analysis_db.sh. Screenshots go to
// tests/browser/artifacts/i18n-*.png.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { CHROMIUM, startServer as startServerAt, stopServer } from './harness.mjs';

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = join(HERE, '..', '..');
const BIN = process.env.ATTNSCOPE_BIN;
const ART = join(HERE, 'artifacts');
const TEXT = 'the film was good .';

let server, base, browser, tmp;

const startServer = (args) => startServerAt(BIN, args);

before(async () => {
  assert.ok(BIN, 'set ATTNSCOPE_BIN to the attnscope binary');
  mkdirSync(ART, { recursive: true });
  tmp = mkdtempSync(join(tmpdir(), 'attnscope-i18n-'));
  execFileSync('bash', [join(ROOT, 'tests', 'ref', 'make_analysis_db.sh'), BIN, tmp], { stdio: 'inherit' });
  const s = await startServer(['--model', join(tmp, 'bert-sst'), '--model', join(tmp, 'distil-sst'), '--db', join(tmp, 'analysis.sqlite')]);
  server = s.p;
  base = s.url;
  browser = await chromium.launch({
    ...CHROMIUM,
  });
});

after(async () => {
  await browser?.close();
  if (server) assert.equal(await stopServer(server), 0, 'server exits 0 on SIGTERM');
  if (tmp) rmSync(tmp, { recursive: true, force: true });
});

/** A page in a fresh browser context with the given locale (navigator.languages, Accept-Language). */
async function openPage(locale) {
  const ctx = await browser.newContext({ locale, viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1, acceptDownloads: true });
  const page = await ctx.newPage();
  page.setDefaultTimeout(60_000);
  page.on('pageerror', (e) => console.log('pageerror:', e.message));
  page.on('console', (m) => m.type() === 'error' && console.log('console error:', m.text()));
  return page;
}

/** English labels of the explorer's chrome (none of them is token text, a model name or data here). */
const EN_COMMON = ['attention explorer', 'Model', 'Sentence A', 'Sentence B', 'Run', 'Head view', 'Model view', 'Neuron view', 'Export:', 'tokens', 'Corpus analysis', 'Head overview', 'Instances', 'Compare models'];
const EN_VIEW = {
  head: ['Layer', 'Heads:', 'Threshold', 'Links', 'Left: queries', 'drawn in', 'Hover a token'],
  model: ['Mode', 'Layers', 'layers ×', 'Click a thumbnail', 'Lines mode', 'loaded and drawn'],
  neuron: ['Layer', 'Head', 'Query', 'sort dims', 'Score =', 'Numbers', 'recomputed', 'softmax over keys'],
  overview: ['Sort heads by', 'Pattern', 'Dim below', 'Zoom', 'Click a head', 'sentences', 'drawn in'],
  instances: ['sentences', 'prev', 'next', 'corpus', 'sentence', 'gold', 'relations', 'all corpora'],
  dependency: ['Layer', 'on sentence', 'correct', 'wrong', 'word', 'relation', 'gold parent', 'Relations:', 'best heads', 'baseline', 'direction', 'Best accuracy by layer'],
  graph: ['Layer', 'Layout', 'Threshold', 'Saliency of class', 'edges', 'layout + draw', 'tokens'],
  pattern: ['confidence', 'driven by', 'embedding', 'Open in neuron view', 'importance', 'semantic', 'syntactic', 'entropy', 'nats'],
  compare: ['pattern', 'A heads', 'B heads', 'A head', 'B head', 'distance'],
};
/** Chinese labels each view must show. */
const ZH_VIEW = {
  head: ['注意力探索器', '头视图', '模型视图', '神经元视图', '层', '阈值', '连线', '个词元', '绘制用时'],
  model: ['模式', '热力图', '单击缩略图'],
  neuron: ['查询', '按贡献对维度排序', '数值（引擎捕获的值）', '重新计算'],
  overview: ['语料分析', '头概览', '头的排序依据', '淡化低于', '单击某个头可将其选中'],
  instances: ['全部语料', '标准标签', '置信度', '个句子'],
  dependency: ['第 0 层，第 0 个头', '个正确', '依存关系：最佳头与偏移基线对比', '各层最佳准确率'],
  graph: ['布局', '阈值', '条边', '布局 + 绘制'],
  pattern: ['置信度', '在神经元视图中打开', '重要性', '奈特'],
  compare: ['模式', 'A 的头数', '距离'],
};
/** What each corpus view waits for, and a text its exported SVG draws. */
const CORPUS_VIEWS = {
  dependency: ['[data-testid=dep-summary]', '上方为标准依存弧'],
  graph: ['[data-testid=graph-edges]', '箭头：查询'],
  pattern: ['[data-testid=pattern-neuron]', '模式统计量'],
  compare: ['[data-testid=cmp-count]', '句法'],
};

const visibleText = (page) => page.evaluate(() => document.body.innerText);
const escape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
/** The labels of `list` found as whole words in `text`. */
const englishLeft = (text, list) => list.filter((w) => new RegExp(`(^|[^A-Za-z])${escape(w)}($|[^A-Za-z])`).test(text));
const param = (page, k) => new URL(page.url()).searchParams.get(k);

async function checkChinese(page, view) {
  const text = await visibleText(page);
  for (const w of ZH_VIEW[view]) assert.ok(text.includes(w), `${view} view shows "${w}":\n${text}`);
  const left = englishLeft(text, [...EN_COMMON, ...EN_VIEW[view]]);
  assert.deepEqual(left, [], `${view} view: English UI labels left: ${left.join(', ')}\n${text}`);
  await page.screenshot({ path: join(ART, `i18n-zh-${view}.png`), fullPage: true });
}

/** The text of the SVG the view's export button saves. */
async function exportedSvg(page) {
  const [dl] = await Promise.all([page.waitForEvent('download'), page.click('[data-testid=export-svg]')]);
  return readFileSync(await dl.path(), 'utf8');
}

test('the zh-CN dictionary has every key of en, each translated', async () => {
  const page = await openPage('en-US');
  await page.goto(`${base}/?view=head`);
  await page.waitForFunction(() => window.__attnscope?.i18n);
  const r = await page.evaluate(() => {
    const { dicts, missing, detectLang } = window.__attnscope.i18n;
    const en = Object.keys(dicts.en);
    const zh = Object.keys(dicts['zh-CN']);
    const str = (m) => (typeof m === 'string' ? m : m.other);
    const same = en.filter((k) => str(dicts.en[k]) === str(dicts['zh-CN'][k] ?? ''));
    const notation = ['analysis.run', 'neuron.qRow', 'common.period']; /* only parameters and full-width punctuation */
    const noHan = zh.filter((k) => !notation.includes(k) && !/[\u4e00-\u9fff]/.test(str(dicts['zh-CN'][k])));
    const params = en.filter((k) => {
      const names = (s) => [...s.matchAll(/\{(\w+)\}/g)].map((m) => m[1]).sort().join(',');
      return names(str(dicts.en[k])) !== names(str(dicts['zh-CN'][k] ?? '')); /* the same named parameters */
    });
    const tags = ['zh', 'zh-CN', 'zh-Hans', 'zh-SG', 'zh-Hans-CN', 'zh-TW', 'zh-Hant', 'en-US', 'en', 'fr', 'ja'];
    return { en: en.length, zh: zh.length, missing, extra: zh.filter((k) => !en.includes(k)), same, noHan, params,
      detect: Object.fromEntries(tags.map((t) => [t, detectLang([t])])), pref: detectLang(['en-US', 'zh-CN']), none: detectLang([]) };
  });
  assert.ok(r.en > 150, `${r.en} keys`);
  assert.deepEqual(r.missing, [], 'zh-CN lacks no key of en');
  assert.deepEqual(r.extra, [], 'zh-CN has no key en lacks');
  assert.equal(r.zh, r.en);
  assert.deepEqual(r.same, [], 'every message is translated');
  assert.deepEqual(r.noHan, [], 'every zh-CN message has Chinese characters');
  assert.deepEqual(r.params, [], 'zh-CN messages take the same named parameters');
  assert.deepEqual(r.detect, { zh: 'zh-CN', 'zh-CN': 'zh-CN', 'zh-Hans': 'zh-CN', 'zh-SG': 'zh-CN', 'zh-Hans-CN': 'zh-CN', 'zh-TW': 'en', 'zh-Hant': 'en', 'en-US': 'en', en: 'en', fr: 'en', ja: 'en' });
  assert.equal(r.pref, 'en', 'the first preferred language decides');
  assert.equal(r.none, 'en');
  await page.context().close();
});

test('a zh-CN browser opens every main view in Chinese', async () => {
  const page = await openPage('zh-CN');
  assert.deepEqual(await page.evaluate(() => navigator.languages), ['zh-CN']);
  await page.goto(`${base}/?model=bert-sst&text=${encodeURIComponent(TEXT)}`);
  await page.waitForSelector('[data-testid=head-canvas]');
  await page.waitForFunction(() => /个词元/.test(document.querySelector('[data-testid=status]')?.textContent ?? ''));
  await page.waitForFunction(() => document.body.innerText.includes('绘制用时'));
  assert.equal(await page.evaluate(() => document.documentElement.lang), 'zh-CN');
  assert.equal(param(page, 'lang'), 'zh-CN', 'the language is in the URL');
  assert.equal(await page.title(), 'attnscope 注意力探索器');
  await checkChinese(page, 'head');
  const headSvg = await exportedSvg(page);
  assert.ok(headSvg.includes('第 0 层 · 查询'), 'the head view draws its column titles in Chinese');
  assert.ok((await page.getAttribute('[data-testid=head-focus]', 'aria-label')).includes('方向键'), 'keyboard labels in Chinese');

  await page.click('[data-testid=tab-model]');
  await page.waitForSelector('[data-testid=grid-canvas]');
  await page.waitForFunction(() => document.querySelector('[data-testid=grid-info]')?.textContent.includes('加载并绘制用时'));
  await checkChinese(page, 'model');

  await page.click('[data-testid=tab-neuron]');
  await page.waitForSelector('[data-testid=neuron-table]');
  await checkChinese(page, 'neuron');
  assert.ok((await exportedSvg(page)).includes('q 与 k 的取值'), 'the neuron view draws its legends in Chinese');

  await page.click('[data-testid=tab-overview]');
  await page.waitForSelector('[data-testid=overview-canvas]');
  await page.waitForFunction(() => document.querySelector('[data-testid=overview-ms]')?.textContent.includes('绘制用时'));
  await checkChinese(page, 'overview');
  assert.ok((await exportedSvg(page)).includes('色相：哪个得分更高'), 'the overview legend is drawn in Chinese');

  await page.click('[data-testid=tab-instances]');
  await page.waitForSelector('[data-testid=inst-table]');
  await checkChinese(page, 'instances');
  await page.context().close();
});

test('a zh-CN browser shows the other corpus views in Chinese', async () => {
  const page = await openPage('zh-CN');
  for (const [view, [ready, drawn]] of Object.entries(CORPUS_VIEWS)) {
    await page.goto(`${base}/?model=bert-sst&text=${encodeURIComponent('The film was good.')}&view=${view}&sent=9`);
    await page.waitForSelector(ready);
    await page.waitForFunction(() => document.querySelector('[data-testid=status]')?.textContent.includes('个词元'));
    await checkChinese(page, view);
    assert.ok((await exportedSvg(page)).includes(drawn), `${view}: the drawing says "${drawn}"`);
  }
  await page.context().close();
});

test('the switch changes the language and the URL; Back and reload keep it', async () => {
  const page = await openPage('zh-CN');
  await page.goto(`${base}/?model=bert-sst&text=${encodeURIComponent(TEXT)}`);
  await page.waitForSelector('[data-testid=head-canvas]');
  await page.waitForFunction(() => document.body.innerText.includes('绘制用时'));
  /* a step in Chinese, then the switch: Back goes to an entry written in Chinese */
  await page.click('[data-testid=tab-model]');
  await page.waitForFunction(() => new URLSearchParams(location.search).get('view') === 'model');
  const entries = await page.evaluate(() => history.length);
  await page.click('[data-testid=lang-en]');
  await page.waitForFunction(() => document.documentElement.lang === 'en');
  assert.equal(param(page, 'lang'), 'en');
  assert.equal(await page.evaluate(() => history.length), entries, 'switching adds no history entry');
  await page.waitForFunction(() => document.body.innerText.includes('loaded and drawn in'));
  const text = await visibleText(page);
  for (const w of ['Head view', 'Model view', 'Mode', 'Click a thumbnail']) assert.ok(text.includes(w), `English after the switch: ${w}`);
  assert.ok(!/[\u4e00-\u9fff]/.test(text.replace('中文', '')), `no Chinese left:\n${text}`);
  assert.match(await page.textContent('[data-testid=status]'), /^\d+ tokens/);

  await page.goBack();
  await page.waitForFunction(() => new URLSearchParams(location.search).get('view') === 'head');
  assert.equal(param(page, 'lang'), 'en', 'Back keeps the language');
  await page.waitForFunction(() => document.body.innerText.includes('Left: queries'));
  assert.equal(await page.evaluate(() => document.documentElement.lang), 'en');

  await page.reload();
  await page.waitForSelector('[data-testid=head-canvas]');
  await page.waitForFunction(() => document.body.innerText.includes('drawn in'));
  assert.equal(await page.evaluate(() => document.documentElement.lang), 'en', 'reload keeps the language (the URL wins over the browser)');
  assert.equal(param(page, 'lang'), 'en');
  await page.goForward();
  await page.waitForFunction(() => new URLSearchParams(location.search).get('view') === 'model');
  assert.equal(param(page, 'lang'), 'en', 'Forward keeps the language');
  await page.waitForFunction(() => document.body.innerText.includes('Click a thumbnail'));
  await page.goBack();
  await page.waitForFunction(() => new URLSearchParams(location.search).get('view') === 'head');

  await page.click('[data-testid=lang-zh-CN]');
  await page.waitForFunction(() => document.documentElement.lang === 'zh-CN');
  assert.equal(param(page, 'lang'), 'zh-CN');
  await page.waitForFunction(() => document.body.innerText.includes('左侧：查询'));
  await page.reload();
  await page.waitForFunction(() => document.body.innerText.includes('绘制用时'));
  assert.equal(param(page, 'lang'), 'zh-CN');
  await page.screenshot({ path: join(ART, 'i18n-switch.png'), fullPage: true });
  await page.context().close();
});

test('an en browser gets English; lang in the URL wins over the browser', async () => {
  const page = await openPage('en-US');
  await page.goto(`${base}/?model=bert-sst&text=${encodeURIComponent(TEXT)}`);
  await page.waitForSelector('[data-testid=head-canvas]');
  await page.waitForFunction(() => document.body.innerText.includes('drawn in'));
  assert.equal(await page.evaluate(() => document.documentElement.lang), 'en');
  assert.equal(param(page, 'lang'), 'en');
  const text = await visibleText(page);
  for (const w of ['attention explorer', 'Head view', 'Model view', 'Neuron view', 'Threshold', 'Corpus analysis']) assert.ok(text.includes(w), w);
  assert.ok(!/[\u4e00-\u9fff]/.test(text.replace('中文', '')), `no Chinese in the English UI:\n${text}`);

  await page.goto(`${base}/?model=bert-sst&text=${encodeURIComponent(TEXT)}&view=model&lang=zh-CN`);
  await page.waitForSelector('[data-testid=grid-canvas]');
  await page.waitForFunction(() => document.documentElement.lang === 'zh-CN');
  assert.ok((await visibleText(page)).includes('模型视图'));
  await page.context().close();
});
