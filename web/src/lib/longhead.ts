// longhead.ts — the data of the head view of a long run (capture stats,qkv: no T × T kept,
// views/LongHeadView.svelte): the attention rows of the queries on screen, fetched in
// blocks of ROW_BLOCK queries × all keys for every head of a layer through the tile route
// at full resolution (each cell one weight, recomputed by the server from q and k), and
// each loaded query's strongest keys per head as the HeadLinks that lib/headview.ts draws.
// Nothing outside the blocks asked for is fetched or kept (at most MAX_BLOCKS). A run the
// server evicted (404) is run again (the same input: the same weights) and asked again.
import { check, postRun, runInput, type RunData } from '../api/client';
import { apiFetch } from '../api/fetch';
import { decodeTensors } from '../api/tensor';
import type { TileMeta } from '../api/types';
import { LINK_LEVELS, linkLevel, type HeadLinks } from './links';

/** Queries per fetched block. */
export const ROW_BLOCK = 64;
/** Keys per tile request: the tile route's largest full-resolution side (SRV_TILE_MAX). */
export const COL_CHUNK = 256;
/** Blocks kept (the least recently used go first). */
export const MAX_BLOCKS = 24;

/** The blocks holding queries first..last, and the pinned query's (-1: none), ascending. */
export function blocksFor(first: number, last: number, pinned: number, T: number): number[] {
  const out = new Set<number>();
  for (let b = Math.floor(Math.max(0, first) / ROW_BLOCK); b <= Math.floor(Math.min(T - 1, last) / ROW_BLOCK); b++) out.add(b);
  if (pinned >= 0 && pinned < T) out.add(Math.floor(pinned / ROW_BLOCK));
  return [...out].sort((a, b) => a - b);
}

/** Rows of one run's layers, fetched by block; requests go one at a time (the tile route
 *  admits two computing at once per server). */
export class RowStore {
  private blocks = new Map<string, Float32Array>(); // `${layer}/${block}` -> (H, R, T)
  private pending = new Map<string, Promise<void>>();
  private queue: Promise<unknown> = Promise.resolve();
  /** tile requests sent (for the tests: only the blocks on screen are fetched) */
  requests: string[] = [];

  constructor(
    private data: RunData,
    private T: number,
    private H: number,
  ) {}

  has(layer: number, b: number): boolean {
    return this.blocks.has(`${layer}/${b}`);
  }

  /** Fetches block b of layer (no-op when kept or on its way); resolves once it is kept. */
  load(layer: number, b: number): Promise<void> {
    const key = `${layer}/${b}`;
    if (this.blocks.has(key)) {
      const v = this.blocks.get(key)!;
      this.blocks.delete(key); /* most recent last */
      this.blocks.set(key, v);
      return Promise.resolve();
    }
    let p = this.pending.get(key);
    if (!p) {
      p = (this.queue = this.queue.then(() => this.fetchBlock(layer, b), () => this.fetchBlock(layer, b))).then((rows) => {
        this.blocks.set(key, rows as Float32Array);
        while (this.blocks.size > MAX_BLOCKS) this.blocks.delete(this.blocks.keys().next().value as string);
      });
      p.finally(() => this.pending.delete(key)).catch(() => {});
      this.pending.set(key, p);
    }
    return p;
  }

  private async fetchBlock(layer: number, b: number): Promise<Float32Array> {
    const { T, H } = this;
    const r0 = b * ROW_BLOCK, r1 = Math.min(T, r0 + ROW_BLOCK), R = r1 - r0;
    const out = new Float32Array(H * R * T);
    for (let c0 = 0; c0 < T; c0 += COL_CHUNK) {
      const c1 = Math.min(T, c0 + COL_CHUNK), C = c1 - c0;
      const q = `layers=${layer}&heads=0-${H - 1}&rows=${r0}-${r1 - 1}&cols=${c0}-${c1 - 1}&n=${COL_CHUNK}&dtype=f32`;
      this.requests.push(q);
      let r = await apiFetch(`/api/v1/runs/${this.data.run.id}/tile?${q}`);
      if (r.status === 404) {
        this.data.run = await postRun(runInput(this.data.run));
        r = await apiFetch(`/api/v1/runs/${this.data.run.id}/tile?${q}`);
      }
      await check(r);
      const d = decodeTensors<TileMeta>(await r.arrayBuffer());
      const mx = d.tensors.get('max');
      if (!mx || mx.shape.join() !== `1,${H},${R},${C}`) throw new Error('tile response: unexpected shape');
      for (let h = 0; h < H; h++)
        for (let i = 0; i < R; i++) out.set(mx.data.subarray((h * R + i) * C, (h * R + i + 1) * C), (h * R + i) * T + c0);
    }
    return out;
  }

  /** Query q's row of head h in layer (T weights), or null when not loaded. */
  row(layer: number, h: number, q: number): Float32Array | null {
    const b = Math.floor(q / ROW_BLOCK);
    const blk = this.blocks.get(`${layer}/${b}`);
    if (!blk) return null;
    const R = Math.min(this.T, (b + 1) * ROW_BLOCK) - b * ROW_BLOCK;
    const off = (h * R + (q - b * ROW_BLOCK)) * this.T;
    return blk.subarray(off, off + this.T);
  }

  /** The weight of (h, q, k) in layer; 0 when q's row is not loaded. */
  weight(layer: number, h: number, q: number, k: number): number {
    return this.row(layer, h, q)?.[k] ?? 0;
  }

  /** Queries whose rows of layer are loaded, ascending. */
  loadedQueries(layer: number): number[] {
    const out: number[] = [];
    for (const key of this.blocks.keys()) {
      const [l, b] = key.split('/').map(Number);
      if (l !== layer) continue;
      for (let q = b * ROW_BLOCK; q < Math.min(this.T, (b + 1) * ROW_BLOCK); q++) out.push(q);
    }
    return out.sort((a, b) => a - b);
  }
}

export interface RowLinkOptions {
  store: RowStore;
  layer: number;
  head: number;
  T: number;
  queries: number[]; // loaded queries, ascending
  topk: number; // keys kept per query, >= 1
  threshold: number; // keep w >= threshold
}

/** The links of one head from the loaded queries: each query's topk strongest keys at or
 *  above the threshold, by weight descending (as lib/links.ts selectLinks's top-k mode). */
export function rowLinks(o: RowLinkOptions): HeadLinks {
  const { store, layer, head, T, queries, threshold } = o;
  const k = Math.max(1, Math.min(o.topk, T));
  const cap = queries.length * k;
  const I = new Int32Array(cap), J = new Int32Array(cap), W = new Float32Array(cap);
  const rowStart = new Int32Array(T + 1);
  const best = new Int32Array(k);
  let n = 0, qi = 0;
  for (let i = 0; i < T; i++) {
    rowStart[i] = n;
    if (queries[qi] !== i) continue;
    qi++;
    const row = store.row(layer, head, i);
    if (!row) continue;
    let nb = 0;
    for (let j = 0; j < T; j++) {
      const w = row[j];
      if (!(w >= threshold && w > 0) || (nb === k && w <= row[best[k - 1]])) continue;
      let p = nb < k ? nb++ : k - 1;
      while (p > 0 && row[best[p - 1]] < w) {
        best[p] = best[p - 1];
        p--;
      }
      best[p] = j;
    }
    for (let m = 0; m < nb; m++) {
      I[n] = i;
      J[n] = best[m];
      W[n++] = row[best[m]];
    }
  }
  rowStart[T] = n;
  const levelStart = new Int32Array(LINK_LEVELS + 1);
  for (let m = 0; m < n; m++) levelStart[linkLevel(W[m]) + 1]++;
  for (let v = 0; v < LINK_LEVELS; v++) levelStart[v + 1] += levelStart[v];
  const fill = levelStart.slice(0, LINK_LEVELS);
  const levelIdx = new Int32Array(n);
  for (let m = 0; m < n; m++) levelIdx[fill[linkLevel(W[m])]++] = m;
  return { head, n, i: I.slice(0, n), j: J.slice(0, n), w: W.slice(0, n), rowStart, levelIdx, levelStart };
}
