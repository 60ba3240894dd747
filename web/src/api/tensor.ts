// tensor.ts — decodes the server's binary tensor container into Float32Arrays:
// bytes 0..3 "ASTB"; bytes 4..7 uint32 LE header length N; N bytes of JSON
// (TensorHeader, space-padded so 8 + N is a multiple of 8); then the data. Each tensor's
// bytes start at 8 + N + offset (8-aligned), little-endian. No network here.
import type { TensorEntry, TensorHeader } from './types';

export const TENSOR_MAGIC = 'ASTB';

/** A container header whose meta is the route's (AttentionMeta, QkMeta, ...). */
export type TypedTensorHeader<M> = Omit<TensorHeader, 'meta'> & { meta: M };

/** A decoded tensor: values widened to float32, row-major. */
export interface Tensor {
  name: string;
  shape: number[];
  data: Float32Array;
}

/** IEEE binary16 -> number. */
export function f16ToF32(h: number): number {
  const s = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

/** Decodes one tensor entry whose bytes start at base + t.offset (the embedded data source
 * decodes one layer at a time through it). */
export function decodeOne(buf: ArrayBuffer, base: number, t: TensorEntry): Float32Array {
  const n = t.shape.reduce((a, b) => a * b, 1);
  const start = base + t.offset;
  if (start + t.nbytes > buf.byteLength) throw new Error(`tensor ${t.name}: data runs past the response`);
  const view = new DataView(buf, start, t.nbytes);
  const out = new Float32Array(n);
  if (t.dtype === 'f32') {
    if (t.nbytes !== 4 * n) throw new Error(`tensor ${t.name}: ${t.nbytes} bytes for ${n} f32`);
    for (let i = 0; i < n; i++) out[i] = view.getFloat32(4 * i, true);
  } else if (t.dtype === 'f16') {
    if (t.nbytes !== 2 * n) throw new Error(`tensor ${t.name}: ${t.nbytes} bytes for ${n} f16`);
    const lut = F16_LUT ?? buildLut();
    for (let i = 0; i < n; i++) out[i] = lut[view.getUint16(2 * i, true)];
  } else if (t.dtype === 'u8') {
    if (t.nbytes !== n) throw new Error(`tensor ${t.name}: ${t.nbytes} bytes for ${n} u8`);
    const bytes = new Uint8Array(buf, start, n);
    const scale = t.scale ?? 1 / 255;
    const zero = t.zero ?? 0;
    for (let i = 0; i < n; i++) out[i] = zero + scale * bytes[i];
  } else {
    throw new Error(`tensor ${String((t as TensorEntry).name)}: unknown dtype`);
  }
  return out;
}

let F16_LUT: Float32Array | null = null;
function buildLut(): Float32Array {
  const lut = new Float32Array(65536);
  for (let i = 0; i < 65536; i++) lut[i] = f16ToF32(i);
  F16_LUT = lut;
  return lut;
}

export interface DecodedTensors<M> {
  header: TypedTensorHeader<M>;
  tensors: Map<string, Tensor>;
}

/** Parses a whole response body. Throws with a one-line message on a malformed body. */
export function decodeTensors<M>(buf: ArrayBuffer): DecodedTensors<M> {
  if (buf.byteLength < 8) throw new Error('tensor response: too short');
  const magic = new TextDecoder().decode(new Uint8Array(buf, 0, 4));
  if (magic !== TENSOR_MAGIC) throw new Error(`tensor response: bad magic ${JSON.stringify(magic)}`);
  const n = new DataView(buf).getUint32(4, true);
  if (8 + n > buf.byteLength) throw new Error('tensor response: header runs past the body');
  const header = JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n))) as TypedTensorHeader<M>;
  const tensors = new Map<string, Tensor>();
  for (const t of header.tensors) {
    tensors.set(t.name, { name: t.name, shape: t.shape, data: decodeOne(buf, 8 + n, t) });
  }
  return { header, tensors };
}
