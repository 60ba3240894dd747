// make_gpt2_model.mjs — writes a small random causal GPT-2 (GPT2LMHeadModel names:
// transformer.wte/wpe/h.N.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}/ln_f,
// Conv1D weights stored [in, out]; lm_head tied to wte, so not stored) with the
// committed GPT-2-style byte-level BPE of tests/ref/fixtures/bpe_gpt2 (2000 tokens,
// <|endoftext|> = 1999) into a folder, for the causal-model tests of the server
// (tests/unit/test_server.c) and the browser (explorer.test.mjs). 2 layers, 4 heads,
// width 32, 128 positions. Deterministic (seeded). Nothing here is committed as a binary.
// Usage: node make_gpt2_model.mjs OUT_DIR
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const TOK = join(ROOT, 'tests', 'ref', 'fixtures', 'bpe_gpt2');
const out = process.argv[2];
if (!out) throw new Error('usage: node make_gpt2_model.mjs OUT_DIR');
const L = 2, H = 4, D = 32, F = 4 * D, P = 128, V = 2000, EOT = 1999;

let seed = 2024;
const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
const normal = () => Math.sqrt(-2 * Math.log(rand() + 1e-12)) * Math.cos(2 * Math.PI * rand());

const tensors = [];
const add = (name, shape, fill) => {
  const n = shape.reduce((a, b) => a * b, 1);
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = fill(i);
  tensors.push({ name, shape, a });
};
const rnd = (s) => () => normal() * s;
const one = () => 1;
const zero = () => 0;

add('transformer.wte.weight', [V, D], rnd(0.5));
add('transformer.wpe.weight', [P, D], rnd(0.3));
for (let l = 0; l < L; l++) {
  const p = `transformer.h.${l}.`;
  add(`${p}ln_1.weight`, [D], one);
  add(`${p}ln_1.bias`, [D], zero);
  add(`${p}attn.c_attn.weight`, [D, 3 * D], rnd(0.4)); // Conv1D: [in, out] = [D, q|k|v]
  add(`${p}attn.c_attn.bias`, [3 * D], rnd(0.1));
  add(`${p}attn.c_proj.weight`, [D, D], rnd(0.2));
  add(`${p}attn.c_proj.bias`, [D], zero);
  add(`${p}ln_2.weight`, [D], one);
  add(`${p}ln_2.bias`, [D], zero);
  add(`${p}mlp.c_fc.weight`, [D, F], rnd(0.2));
  add(`${p}mlp.c_fc.bias`, [F], zero);
  add(`${p}mlp.c_proj.weight`, [F, D], rnd(0.2));
  add(`${p}mlp.c_proj.bias`, [D], zero);
}
add('transformer.ln_f.weight', [D], one);
add('transformer.ln_f.bias', [D], zero);

const header = {};
let off = 0;
for (const t of tensors) {
  header[t.name] = { dtype: 'F32', shape: t.shape, data_offsets: [off, off + t.a.byteLength] };
  off += t.a.byteLength;
}
let h = JSON.stringify(header);
while ((8 + h.length) % 8) h += ' ';
const buf = Buffer.alloc(8 + h.length + off);
buf.writeBigUInt64LE(BigInt(h.length), 0);
buf.write(h, 8, 'latin1');
let pos = 8 + h.length;
for (const t of tensors) {
  Buffer.from(t.a.buffer).copy(buf, pos);
  pos += t.a.byteLength;
}
mkdirSync(out, { recursive: true });
writeFileSync(join(out, 'model.safetensors'), buf);
writeFileSync(
  join(out, 'config.json'),
  JSON.stringify({
    architectures: ['GPT2LMHeadModel'], model_type: 'gpt2', activation_function: 'gelu_new',
    n_embd: D, n_head: H, n_layer: L, n_inner: null, n_positions: P, n_ctx: P, vocab_size: V,
    layer_norm_epsilon: 1e-5, bos_token_id: EOT, eos_token_id: EOT, scale_attn_weights: true,
  }, null, 2),
);
for (const f of ['vocab.json', 'merges.txt', 'tokenizer.json']) copyFileSync(join(TOK, f), join(out, f));
