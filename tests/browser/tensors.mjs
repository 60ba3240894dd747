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
