// block.ts — what the views need to know about a model's attention block, from the
// server's description (RunResponse.block, docs/api/api.schema.json "Block"): which
// key/value head each query head reads (grouped-query attention), which (query, key)
// cells are masked (causal, sliding windows) and the rotary embedding. Pure functions,
// no drawing.
import type { Block, RunResponse } from '../api/types';

/** The run's block; a run without one (an embedded page written before it existed) gets
 *  one query head per key/value head, no window and no rotation. */
export function blockOf(run: RunResponse): Block {
  const b = (run as Partial<RunResponse>).block;
  if (b) return b;
  const { heads: H, layers: L } = run.sizes;
  return {
    n_kv_head: H,
    kv_group: Array.from({ length: H }, (_, h) => h),
    causal: run.causal,
    window: new Array<number>(L).fill(0),
    scale: new Array<number>(L).fill(1 / Math.sqrt(run.sizes.d_head)),
    attn_softcap: 0,
    final_softcap: 0,
    rope: null,
  };
}

/** Grouped-query attention: fewer key/value heads than query heads. */
export function isGrouped(b: Block): boolean {
  return b.n_kv_head < b.kv_group.length;
}

/** The query heads that read the same keys and values as head h (h included), in order. */
export function groupMates(b: Block, h: number): number[] {
  const g = b.kv_group[h];
  return b.kv_group.flatMap((x, i) => (x === g ? [i] : []));
}

/** The query heads of each key/value head: groups[g] lists the heads reading kv head g. */
export function kvGroups(b: Block): number[][] {
  const out: number[][] = Array.from({ length: b.n_kv_head }, () => []);
  b.kv_group.forEach((g, h) => out[g]?.push(h));
  return out;
}

/** Sliding window of layer l (query i sees keys j > i - w), 0 = none. */
export function windowOf(b: Block, l: number): number {
  return b.window[l] ?? 0;
}

/** Whether query i cannot see key j in layer l: a later key of a causal model, or a key
 *  outside the layer's sliding window. The server's scores hold the mask value there and
 *  the softmax is exactly 0 (docs/views.md, "Masks"). */
export function isMasked(b: Block, l: number, i: number, j: number): boolean {
  if (b.causal && j > i) return true;
  const w = windowOf(b, l);
  return w > 0 && j <= i - w;
}

/** Whether every cell of the block of queries [q0, q1] × keys [k0, k1] is masked (a
 *  thumbnail cell of the model view): then the block's pooled weight is 0 because nothing
 *  may be attended there, not because attention is small. */
export function blockMasked(b: Block, l: number, q0: number, q1: number, k0: number, k1: number): boolean {
  if (b.causal && k0 > q1) return true;
  const w = windowOf(b, l);
  return w > 0 && k1 <= q0 - w;
}

/** Indices as ranges: [0, 1, 2, 5] -> "0–2, 5". */
export function ranges(xs: number[]): string {
  const out: string[] = [];
  for (let k = 0; k < xs.length; ) {
    let e = k;
    while (e + 1 < xs.length && xs[e + 1] === xs[e] + 1) e++;
    out.push(e > k ? `${xs[k]}–${xs[e]}` : String(xs[k]));
    k = e + 1;
  }
  return out.join(', ');
}

/** Whether layer l masks any cell of a T-token input. */
export function hasMask(b: Block, l: number, T: number): boolean {
  const w = windowOf(b, l);
  return (b.causal && T > 1) || (w > 0 && T > w);
}
