// tensors.mjs — the pieces the test-model generators share: a seeded list of F32
// tensors and a safetensors writer (u64 LE header length, JSON header padded with
// spaces to a multiple of 8, then the data in order). Test support only.
import { writeFileSync } from 'node:fs';

// A tensor list with seeded normal fills. add(name, shape, fill) where fill(i) gives
// element i; rnd(std), one and zero are the usual fills.
export function tensorList(seed) {
  const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
  const normal = () => Math.sqrt(-2 * Math.log(rand() + 1e-12)) * Math.cos(2 * Math.PI * rand());
  const tensors = [];
  const add = (name, shape, fill) => {
    const n = shape.reduce((a, b) => a * b, 1);
    const a = new Float32Array(n);
    for (let i = 0; i < n; i++) a[i] = fill(i);
    tensors.push({ name, shape, a });
  };
  return { tensors, add, rnd: (s) => () => normal() * s, one: () => 1, zero: () => 0 };
}

// Writes tensors [{name, shape, a: Float32Array}] as an F32 safetensors file.
export function writeSafetensors(path, tensors) {
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
  writeFileSync(path, buf);
}

// Adds the tensors of a random GPT2LMHeadModel (transformer.wte/wpe/h.N.{ln_1,
// attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}/ln_f; Conv1D weights stored
// [in, out]; lm_head tied to wte, so not stored) to the list of tensorList(seed).
// qkv: standard deviation of the attention input projection (larger = peakier).
export function addGpt2({ add, rnd, one, zero }, { L, D, V, P, qkv = 0.4 }) {
  const F = 4 * D;
  add('transformer.wte.weight', [V, D], rnd(0.5));
  add('transformer.wpe.weight', [P, D], rnd(0.3));
  for (let l = 0; l < L; l++) {
    const p = `transformer.h.${l}.`;
    add(`${p}ln_1.weight`, [D], one);
    add(`${p}ln_1.bias`, [D], zero);
    add(`${p}attn.c_attn.weight`, [D, 3 * D], rnd(qkv)); // Conv1D: [in, out] = [D, q|k|v]
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
}
