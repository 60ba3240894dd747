// gen_unigram_fixtures.mjs — writes the SentencePiece Unigram fixtures that
// tests/unit/test_unigram.c checks: the tokenizer.json variants of unigram_tokenizers.py
// (T5, XLM-R, ALBERT, recent-SpmConverter, byte_fallback and NFKC+Lowercase styles, and
// the T5 converter's file for the spiece.model folders, over
// one SentencePiece Unigram model with the real nmt_nfkc precompiled_charsmap, committed
// as fixtures/unigram/tokenizer.json) run through Hugging Face `tokenizers` (Rust, via its
// npm package) over a hostile text list: accents and combining marks, CJK, emoji,
// full-width and compatibility characters that the charsmap rewrites, space runs, tabs and
// newlines, digits, characters outside the vocabulary, literal special tokens, long
// inputs, random mixtures, pairs and truncation. Each record: text_a, text_b (or null),
// max_len (0 = none), ids, type_ids, tokens, seq and BYTE offsets [start, end) ([-1, -1]
// for the template's specials), as gen_spm_fixtures.mjs writes them.
// It does not: test anything itself.
//
// Run (dev only):  cd tests/ref && npm ci && node gen_unigram_fixtures.mjs
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const tk = require('tokenizers');
const HERE = path.dirname(fileURLToPath(import.meta.url));
const FIX = path.join(HERE, 'fixtures');
const HF_VERSION = JSON.parse(fs.readFileSync(require.resolve('tokenizers/package.json'), 'utf8')).version;
export const VARIANTS = ['t5', 'xlmr', 'albert', 'new_spm', 'byte_fallback', 'nfkc_lower', 'spiece', 'spiece_first'];

function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

const HAND = [
  'Hello world', 'Hello, world!', 'The quick brown fox jumps over the lazy dog.', ' Hello', '  two leading',
  'trailing ', 'trailing   ', ' ', '   ', '\t', '\n', '\r\n', 'a  b   c    d', 'line1\nline2\n\nline3\n',
  'tab\tseparated\tvalues', 'mixed \t \n \r\n  spaces', 'x   \n\n   y', "I'll don't won't", '``quoted\'\' text',
  '12345678', '3.14159 -2.5e10 0x1F 1,000,000', '٣٤٥ ١٢', 'café naïve résumé', 'e\u0301 composed vs é',
  'Ångström Å', 'ﬁ ﬂ ﬃ ligatures', 'İstanbul ıi', 'ǅemal Ǆ ǆ', 'ß ẞ', 'ΣΑΣ σας', 'ＡＢＣ ｆｕｌｌ　ｗｉｄｔｈ　１２３',
  'ｶﾀｶﾅ ﾊﾟﾊﾞ ｶﾞ', '① ② ⑩ ⅻ Ⅻ', '㍻ ㌔ ㎏ ㎞', '™ ℃ ℉ № ½ ¼', 'x² y³ H₂O', '…‥', '“quotes” ‘single’ „low“',
  '«guillemets»', '—dash–en‐hyphen', '\u00a0nbsp\u00a0', 'em\u2003space\u2009thin', 'ideo\u3000space', 'zw\u200bsp',
  'bom\ufeffhere', 'ls\u2028ps\u2029', 'soft\u00adhyphen', 'control\u0001\u0002chars', 'del\u007fchar', 'nul\u0000inside',
  '日本語のテキストです。', '中文分词测试，包括标点。', '한국어 텍스트입니다', 'ภาษาไทย', 'Tiếng Việt có dấu',
  'مرحبا بالعالم', 'नमस्ते दुनिया', 'Привет, мир!', 'Γειά σου Κόσμε', 'שלום עולם', 'ሰላም', 'ᚠᚢᚦ runes',
  '😀 😃 😄', '👩‍👩‍👧‍👦 family', '🏳️‍🌈 flag', '👍🏽 thumbs', '🇩🇪🇫🇷', 'a😀b😀c', '🤖🤖🤖🤖',
  'private\ue000use', 'astral \u{10ffff} \u{1d11e} \u{20000}', 'replacement \ufffd char', '\u{e0001}\u{e007f} tags',
  '\u{20000}\u{20001}\u{20002}', 'x\u{10ffff}\u{10fffe}y', '日\u{2B820}\t\t', 'Ω Ω Å K',
  '<s>', '</s>', '<unk>', '<pad>', '<mask>', '[CLS] [SEP] [MASK]', '<s>Hi</s> there', 'x <mask> y', 'a<mask>b',
  '<extra_id_0> filled <extra_id_1>', '<0x41>', '▁', '▁▁', 'a▁b', '▁leading meta', '▁ ▁ ▁',
  'supercalifragilisticexpialidocious', 'a'.repeat(300), 'ab'.repeat(250), 'x'.repeat(1000) + 'y',
  '日本'.repeat(100), '😀'.repeat(60), ' '.repeat(40) + 'x', '\n'.repeat(30), '!'.repeat(100),
  '1234567890'.repeat(10), 'int main(void) {\n    return 0;\n}\n', 'https://example.com/path?q=1&r=2#frag',
  '$100 €50 £30 ¥1000', 'snake_case camelCase', '¿Qué? ¡Sí!', 'Ab', 'a', '.', '0', 'Ā', 'ÿ',
];

function randomTexts(n, seed) {
  const pool = [
    'a', 'b', 'Z', 'the', ' the', ' ', '  ', '   ', '\n', '\t', '\r', '1', '23', "'", '.', ',', '!', '-', '_',
    'é', 'ü', 'e\u0301', 'ß', '日', '本', 'の', '한', 'ก', 'я', 'α', 'ا', 'न', '्', '😀', '👩', '\u200d', '🏽',
    '\u00a0', '\u3000', '\u200b', '\ufeff', '\u0001', '\u007f', '\ue000', '\u{10ffff}', '\u{20000}', 'ﬁ', 'Ａ', 'ｶ',
    'ﾞ', '①', '㍻', '½', '▁', '<s>', '</s>', '<unk>', '<mask>', '[CLS]', 'hello', 'world', 'café', 'İ',
  ];
  const rnd = mulberry32(seed);
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(rnd() * 30);
    let s = '';
    for (let k = 0; k < len; k++) s += pool[Math.floor(rnd() * pool.length)];
    out.push(s);
  }
  return out;
}

const SINGLES = [...HAND, ...randomTexts(150, 777)];
const PAIRS = [
  ['Is this a question?', 'Yes, it is.'], [' leading', ' space'], ['日本語', '😀 emoji'], ['<s>', '</s>'],
  ['a  b', '  c'], ['x', '\n'], ['ＡＢＣ', 'ﬁ'], ['one two three', 'four five six seven'],
];
const TRUNCS = [
  ['The quick brown fox jumps over the lazy dog.', null, 5], ['日本語のテキストです。', null, 4],
  ['one two three four five six', 'a b', 7], ['a b', 'one two three four five six', 7],
  ['one two three four', 'five six seven eight', 9],
];

function byteStarts(text) {
  const cps = Array.from(text);
  const starts = new Array(cps.length + 1);
  let b = 0;
  for (let i = 0; i < cps.length; i++) {
    starts[i] = b;
    b += Buffer.byteLength(cps[i], 'utf8');
  }
  starts[cps.length] = b;
  return starts;
}

async function record(tok, a, b, maxLen) {
  const e = await tok.encode(a, b);
  const seqs = e.getSequenceIds();
  const sa = byteStarts(a), sb = b === null ? null : byteStarts(b);
  const offsets = e.getOffsets().map(([s, t], i) => {
    if (seqs[i] === null || seqs[i] === undefined) return [-1, -1];
    const m = seqs[i] === 0 ? sa : sb;
    return [m[s], m[t]];
  });
  return {
    text_a: a, text_b: b, max_len: maxLen, ids: e.getIds(), type_ids: e.getTypeIds(), tokens: e.getTokens(),
    offsets, seq: seqs.map((q) => (q === null || q === undefined ? -1 : q)),
  };
}

async function main() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'unigram-gen-'));
  execFileSync('/usr/bin/python3', [path.join(HERE, 'unigram_tokenizers.py'), '--variants',
    path.join(FIX, 'unigram', 'tokenizer.json'), tmp]);
  for (const name of VARIANTS) {
    // a spiece.model folder is compared with what transformers' converter makes of it
    const file = path.join(tmp, name.startsWith('spiece') ? `${name}_json` : name, 'tokenizer.json');
    const tok = tk.Tokenizer.fromFile(file);
    const recs = [];
    for (const s of SINGLES) recs.push(await record(tok, s, null, 0));
    for (const [a, b] of PAIRS) recs.push(await record(tok, a, b, 0));
    for (const [a, b, m] of TRUNCS) {
      const tt = tk.Tokenizer.fromFile(file);
      tt.setTruncation(m);
      recs.push(await record(tt, a, b, m));
    }
    const doc = { generator: 'tests/ref/gen_unigram_fixtures.mjs', tokenizers_version: HF_VERSION,
      tokenizer: `unigram_tokenizers.py --variants: ${name}`, n_records: recs.length, records: recs };
    const body = JSON.stringify(doc).replace(/,\{"text_a"/g, ',\n{"text_a"');
    fs.writeFileSync(path.join(FIX, `unigram_${name}.json`), body + '\n');
    console.log(`unigram_${name}.json: ${recs.length} records, tokenizers ${HF_VERSION}`);
  }
  fs.rmSync(tmp, { recursive: true, force: true });
}

await main();
