// gen_tokenizer_fixtures.mjs — writes fixtures/tok_bert_base_uncased.json, the WordPiece
// parity fixture that tests/unit/test_tokenizer.c checks: varied single texts and
// sentence pairs run through the real Hugging Face `tokenizers` library (Rust, via its
// npm package) with ../shared/data/bert-base-uncased/tokenizer.json, special tokens
// included. Each record: text_a, text_b (or null), max_len (0 = no truncation, else
// HF longest_first truncation to that length), ids, type_ids, tokens, seq (0 = from
// text_a, 1 = from text_b, -1 = template special) and BYTE offsets [start, end) into
// text_a / text_b (the npm binding reports offsets in code points; they are converted
// here), with [-1, -1] for the template's special tokens.
// Also writes fixtures/tok_roberta_small.json (+ the folder tok_roberta_small/): the same
// kind of records for a small RoBERTa-style byte-level BPE built from fixtures/bpe_gpt2,
// to check the loader's BPE dispatch, RobertaProcessing template, trim_offsets and the
// lstrip <mask>. Run gen_bpe_fixtures.mjs first when fixtures/bpe_gpt2 changes.
// It does not: test anything itself, or check raw BPE merges (gen_bpe_fixtures.mjs does).
//
// Run (dev only; needs ../shared data):  cd tests/ref && npm ci && node gen_tokenizer_fixtures.mjs
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const tk = require('tokenizers');
const HERE = path.dirname(fileURLToPath(import.meta.url));
const SHARED = path.join(HERE, '..', '..', '..', 'shared', 'data');
const BERT = path.join(SHARED, 'bert-base-uncased', 'tokenizer.json');
const OUT = path.join(HERE, 'fixtures', 'tok_bert_base_uncased.json');
const HF_VERSION = JSON.parse(fs.readFileSync(require.resolve('tokenizers/package.json'), 'utf8')).version;

// ---- deterministic PRNG (mulberry32) --------------------------------------------
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20240917);
const pick = (arr) => arr[Math.floor(rand() * arr.length)];

// ---- inputs ------------------------------------------------------------------------
const plain = [
  'The cat sat on the mat.',
  'Hello, world!',
  'I love natural language processing.',
  "It's a beautiful day, isn't it?",
  'Transformers use self-attention to model long-range dependencies.',
  'The quick brown fox jumps over the lazy dog.',
  'She sells sea shells by the sea shore.',
  'Attention is all you need.',
  'unaffable misunderstanding antidisestablishmentarianism',
  'playing played player plays',
  'A man, a plan, a canal: Panama.',
  'e.g. i.e. etc. vs. Mr. Mrs. Dr.',
  "don't won't can't shouldn't y'all",
  'The year 2024 had 366 days; 1,000,000 people came.',
  'Pi is about 3.14159 and e is 2.71828.',
  'Call me at +1 (555) 123-4567 or email foo.bar@example.com',
  'Visit https://huggingface.co/docs/tokenizers?x=1&y=2#section now',
  'path/to/some_file.tar.gz and C:\\Windows\\System32',
  'snake_case camelCase PascalCase kebab-case SCREAMING_CASE',
  'Tab\tseparated\tvalues\tand\nnew\nlines\r\nwith CRLF',
  '   leading and trailing spaces   ',
  'multiple     spaces     between     words',
  'THE QUICK BROWN FOX SHOUTS LOUDLY',
  'MiXeD CaSe WoRdS ArE fUn',
  'Hyphenated-words and em—dashes and en–dashes',
  '“Smart quotes” and ‘single ones’ and «guillemets»',
  'Ellipsis… and bullets • and middle dots ·',
  'Prices: $5.00, €10, £20, ¥300, ₹50, 50¢',
  'Math: 2+2=4, 3×3=9, 10÷2=5, x² + y² = z², √2 ≈ 1.414, ∞',
  'Temperatures of -40°C and 100°F',
  '#hashtag @mention &amp; <html> </tag> {json: [1, 2]}',
  'a',
  'I',
  '.',
  '[CLS]',
  'the [MASK] sat on the mat',
  'first [SEP] second',
  '[MASK][MASK] [mask] [ MASK ] [MASK',
  'paris is the [MASK] of france.',
  'an [UNK] token and a [PAD] token and [CLS] too',
  'no space before[MASK]after',
];
const accents = [
  'café', 'naïve', 'Ångström', 'façade', 'résumé', 'coöperate', 'jalapeño', 'Zürich',
  'São Paulo', 'Kraków', 'Dvořák', 'Ærøskøbing', 'smörgåsbord', 'crème brûlée', 'piñata',
  'Ça va? Où êtes-vous?', 'İstanbul and ıstanbul', 'Straße STRASSE ẞ', 'ΟΔΟΣ οδος Σίσυφος',
  'ǅemal ǈubljana ǋ', 'ﬁ ligature ﬂ and ﬀ', 'Ⅻ roman numeral Ⅷ', '①②③ circled',
  'ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３', 'e\u0301 decomposed e + acute',
  'a\u0316\u0301 marks out of canonical order', 'o\u0308\u0304 stacked marks',
  'cafe\u0301 au lait', 'n\u0303 vs ñ', 'Z\u0351\u0302\u0303\u0304\u0305\u0306\u0307 zalgo-ish',
];
const cjk = [
  '中文字符', '日本語のテキスト', '한국어', '我爱北京天安门。', '東京都は日本の首都です。',
  'カタカナとひらがな', '안녕하세요 세계', 'mixed 中文 and English', '漢字かな混じり文',
  '𠀀𠀁 extension B', '\u{2B820}\u{2B900} extension E start', '\u{2B920}\u{2CEAF} extension E/F',
  '\u{30000} extension G', '\uF900\uFAFF compatibility ideographs', '\u{2F800} compat supplement',
  '〇 ideographic zero and 々 iteration mark', '（全角括弧）「かぎ括弧」',
];
const emoji = [
  '😀', 'I ❤️ NLP 🤖', '👨‍👩‍👧‍👦 family', '👍🏽 thumbs', '🇺🇸🇫🇷 flags',
  '🏳️‍🌈 rainbow flag', 'keycap 1️⃣ #️⃣', 'text ☺ and emoji ☺️', '🧑‍💻 coding at 3am ☕',
];
const controls = [
  'null\u0000byte', 'bell\u0007char', 'tab\there', 'windows\r\nline', 'zero\u200bwidth space',
  '\ufeffBOM at start', 'soft\u00adhyphen', 'escape\u001b[0m sequence', 'del\u007fchar',
  'nbsp\u00a0here', 'ideographic\u3000space', 'line\u2028separator', 'para\u2029separator',
  'rtl \u202emark\u202c', 'word\u2060joiner', 'c1\u0085next line', 'vtab\u000bform\u000cfeed',
  'private\ue000use\uf8ff', 'replacement \ufffd char', 'arabic\u0600number sign',
  'new Cf \u0890\u0891 and \u08e2', 'egyptian \u{13430}\u{13438}\u{13439} format', 'ogham\u1680space',
  'tagalog \u1734 mark', 'interlinear \ufff9a\ufffab\ufffb', 'mongolian \u180e vowel separator',
];
const longWords = [
  'a'.repeat(100), 'a'.repeat(101), 'b'.repeat(99) + ' ok', 'x'.repeat(250),
  'supercalifragilisticexpialidocious'.repeat(3), 'supercalifragilisticexpialidocious'.repeat(2),
  'é'.repeat(100), 'é'.repeat(101), '中'.repeat(150), 'ab'.repeat(50) + ' tail',
  'pneumonoultramicroscopicsilicovolcanoconiosis',
];
const punct = [
  '!!!???...', '--', '$5.00', '...', '?!', '((()))', '"quoted"', "'single'", '@#$%^&*',
  '~`|\\', 'a-b_c.d,e;f:g', '¡Hola! ¿Qué tal?', '。、！？', '«»‹›', '‼ ⁉ ‽', '§ ¶ † ‡',
  '… ‥ ‧', '⸮ reversed question', '、。〃〈〉《》',
];
const numbers = [
  '0', '42', '3.14', '1,234,567.89', '1e10', '0x1F', '2024-09-17', '12:34:56', '50%',
  '١٢٣ arabic-indic digits', '१२३ devanagari digits', '½ ¼ ¾', '²³¹ superscripts',
];
const urls = [
  'https://www.example.com/path/to/page.html?query=value&other=123#anchor',
  'ftp://files.example.org/pub/file.zip', 'mailto:someone@example.com',
  'www.google.com', 'http://localhost:8080/api/v1/users/42',
];
const scripts = [
  'مرحبا بالعالم', 'Привет, мир!', 'Γειά σου Κόσμε', 'नमस्ते दुनिया', 'שלום עולם',
  'สวัสดีชาวโลก', 'Բարեւ աշխարհ', 'გამარჯობა მსოფლიო', 'ሰላም ዓለም', 'வணக்கம் உலகம்',
  'Hello Привет مرحبا नमस्ते 你好', 'Tiếng Việt có dấu', 'ພາສາລາວ', 'ᚠᛇᚻ runes',
  'ক্ষ bengali conjunct', 'ஸ்ரீ tamil', 'ÀÉÎÕÜ àéîõü', 'ŁĄĆĘŃÓŚŹŻ łąćęńóśźż',
];

function sst2(n) {
  const lines = fs.readFileSync(path.join(SHARED, 'sst2', 'dev.tsv'), 'utf8').split('\n').slice(1)
    .filter((l) => l.trim()).map((l) => l.split('\t')[0].trim());
  const out = [];
  const step = Math.floor(lines.length / n);
  for (let i = 0; i < n; i++) out.push(lines[i * step]);
  return out;
}

function ud(file, n) {
  const lines = fs.readFileSync(path.join(SHARED, 'ud', file), 'utf8').split('\n')
    .filter((l) => l.startsWith('# text = ')).map((l) => l.slice(9));
  const out = [];
  const step = Math.floor(lines.length / n);
  for (let i = 0; i < n; i++) out.push(lines[i * step + 3]);
  return out;
}

// Random strings from pools that stress the character classes.
function fuzz(n) {
  const pools = [
    'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789',
    ' \t\n\r\u00a0\u3000\u2003',
    '.,;:!?-_()[]{}<>/\\\'"`~@#$%^&*+=|',
    'éèêëàâäôöûüçñÅØÆœßÉÈÊÔÛ',
    '\u0301\u0300\u0308\u0327\u0316\u034f\u0489',
    '中文字符日本語한국어カタ',
    '😀👍🏽❤️‍🔥\u200d\ufe0f',
    '\u0000\u0007\u001b\u007f\u0085\u200b\ufeff\u00ad\ufffd\ue000',
    'Привет Γειά مرحبا नमस्ते',
    '\u0130\u0131\u03a3\u03c2\u1e9e\ua7cb\u1c89\u0890\u1734',
  ];
  const out = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(rand() * 40);
    let s = '';
    for (let k = 0; k < len; k++) s += pick(Array.from(pick(pools)));
    if (!s.trim() || /^[\s]*$/u.test(s)) s = 'x' + s;
    out.push(s);
  }
  return out;
}

const singles = [
  ...plain, ...accents, ...cjk, ...emoji, ...controls, ...longWords, ...punct, ...numbers, ...urls,
  ...scripts, ...sst2(50), ...ud('en_ewt-ud-dev.conllu', 40), ...ud('en_pud-ud-test.conllu', 20),
  ...fuzz(40),
];
const sstPairs = sst2(60);
const udPairs = ud('en_ewt-ud-test.conllu', 60);
const pairs = [];
for (let i = 0; i < 40; i++) pairs.push([sstPairs[i], udPairs[i]]);
for (let i = 0; i < 10; i++) pairs.push([pick(accents), pick(cjk)]);
for (let i = 0; i < 10; i++) pairs.push([pick(controls), pick(scripts)]);
pairs.push(['the [MASK] sat', 'on the [MASK].']);
pairs.push(['a'.repeat(101), 'short']);
pairs.push(['Is this a question?', 'Yes, it is.']);
pairs.push(['😀', '中文']);
// truncation: [text_a, text_b|null, max_len]
const truncs = [];
for (let i = 0; i < 8; i++) truncs.push([udPairs[40 + i], null, 5 + 3 * i]);
for (let i = 0; i < 12; i++) truncs.push([sstPairs[40 + i], udPairs[48 + (i % 12)], 6 + 2 * i]);
truncs.push(['one two three four five six', 'a b', 7]);
truncs.push(['a b', 'one two three four five six', 7]);
truncs.push(['one two three four', 'five six seven eight', 8]);
truncs.push(['one two three four', 'five six seven eight', 9]);
truncs.push(['one two', 'three', 3]);
// pairs cut inside a multi-piece word: HF finishes that word before balancing the pair
const sstMore = sst2(120);
for (let i = 0; i < 30; i++) truncs.push([sstMore[60 + i], sstMore[119 - i], i % 2 ? 12 : 17]);

// ---- run HF --------------------------------------------------------------------------
function byteStarts(text) {
  // byte offset of each code point index, plus the total at the end
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
  const offs = e.getOffsets();
  const sa = byteStarts(a), sb = b === null ? null : byteStarts(b);
  const offsets = offs.map(([s, t], i) => {
    if (seqs[i] === null || seqs[i] === undefined) return [-1, -1];
    const m = seqs[i] === 0 ? sa : sb;
    return [m[s], m[t]];
  });
  return {
    text_a: a, text_b: b, max_len: maxLen, ids: e.getIds(), type_ids: e.getTypeIds(),
    tokens: e.getTokens(), offsets, seq: seqs.map((q) => (q === null || q === undefined ? -1 : q)),
  };
}

const tok = tk.Tokenizer.fromFile(BERT);
const records = [];
for (const s of singles) records.push(await record(tok, s, null, 0));
for (const [a, b] of pairs) records.push(await record(tok, a, b, 0));
for (const [a, b, m] of truncs) {
  const tt = tk.Tokenizer.fromFile(BERT);
  tt.setTruncation(m);
  records.push(await record(tt, a, b, m));
}
function writeDoc(out, tokenizer, recs) {
  const nPairs = recs.filter((r) => r.text_b !== null).length;
  const doc = {
    generator: 'tests/ref/gen_tokenizer_fixtures.mjs',
    tokenizers_version: HF_VERSION,
    tokenizer,
    n_records: recs.length,
    n_pairs: nPairs,
    records: recs,
  };
  fs.mkdirSync(path.dirname(out), { recursive: true });
  fs.writeFileSync(out, JSON.stringify(doc) + '\n');
  console.log(`wrote ${out}: ${recs.length} records (${nPairs} pairs), tokenizers ${HF_VERSION}`);
}
writeDoc(OUT, 'shared/data/bert-base-uncased/tokenizer.json', records);

// ---- RoBERTa-style byte-level BPE: template, trim_offsets, <mask> lstrip ------------------
// The small GPT-2-style BPE of gen_bpe_fixtures.mjs (fixtures/bpe_gpt2) plus RoBERTa's
// specials and post-processor, written as tokenizer.json and as the legacy
// vocab.json + merges.txt that RobertaTokenizerFast would convert to the same thing.
const RDIR = path.join(HERE, 'fixtures', 'tok_roberta_small');
const base = JSON.parse(fs.readFileSync(path.join(HERE, 'fixtures', 'bpe_gpt2', 'tokenizer.json'), 'utf8'));
const specials = [['<s>', 2000], ['<pad>', 2001], ['</s>', 2002], ['<unk>', 2003], ['<mask>', 2004]];
const rvocab = { ...base.model.vocab };
for (const [c, id] of specials) rvocab[c] = id;
const rob = {
  ...base,
  added_tokens: [
    ...base.added_tokens,
    ...specials.map(([c, id]) => ({
      id, content: c, single_word: false, lstrip: c === '<mask>', rstrip: false,
      normalized: c !== '<mask>', special: true,
    })),
  ],
  pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
  post_processor: {
    type: 'RobertaProcessing', sep: ['</s>', 2002], cls: ['<s>', 2000], trim_offsets: true,
    add_prefix_space: false,
  },
  model: { ...base.model, vocab: rvocab },
};
fs.mkdirSync(RDIR, { recursive: true });
fs.writeFileSync(path.join(RDIR, 'tokenizer.json'), JSON.stringify(rob));
fs.writeFileSync(path.join(RDIR, 'vocab.json'), JSON.stringify(rvocab));
fs.copyFileSync(path.join(HERE, 'fixtures', 'bpe_gpt2', 'merges.txt'), path.join(RDIR, 'merges.txt'));
const rtok = tk.Tokenizer.fromFile(path.join(RDIR, 'tokenizer.json'));
const rsingles = [
  ...plain.filter((s) => !s.includes('[')), ...accents, ...cjk.slice(0, 8), ...emoji, ...controls,
  ...punct, ...numbers, ...urls, ...scripts, ...sst2(20), ...fuzz(30),
  'Hello <mask>!', 'a<mask>b', 'The capital of France is<mask>.', '<s>inside</s> text', '  <mask>  ',
  ' leading space', 'trailing space ', 'two  spaces', '\n\nnewlines\n', 'tab\tand\ttabs',
  '<|endoftext|>', 'end<|endoftext|>start', 'don\'t you\'ll we\'re', '   ',
];
const rrecords = [];
for (const s of rsingles) {
  if (!s.trim()) continue;
  rrecords.push(await record(rtok, s, null, 0));
}
for (let i = 0; i < 25; i++) rrecords.push(await record(rtok, sstPairs[i], udPairs[i], 0));
rrecords.push(await record(rtok, 'Hello <mask>', ' world <mask>', 0));
for (const [a, b, m] of truncs.slice(0, 12)) {
  const tt = tk.Tokenizer.fromFile(path.join(RDIR, 'tokenizer.json'));
  tt.setTruncation(m + 1); // RoBERTa pairs add 4 specials
  rrecords.push(await record(tt, a, b, m + 1));
}
writeDoc(path.join(HERE, 'fixtures', 'tok_roberta_small.json'), 'tests/ref/fixtures/tok_roberta_small/tokenizer.json', rrecords);
