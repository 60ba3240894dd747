// links.ts — which attention links a view draws: per head, the (query, key, weight)
// triples at or above a threshold, optionally only each query's top k keys, and
// the sentence-pair filter. Pure functions over the (H, T, T) attention of a layer.
import type { Token } from '../api/types';

export type PairFilter = 'all' | 'aa' | 'bb' | 'ab' | 'ba';

/** Opacity levels of the head view, on a square-root scale: link k is in level
 *  floor(sqrt(w) * LINK_LEVELS) (clamped), drawn with the opacity linkAlpha(level) ~ w.
 *  Level 0 holds the links under 1/256. */
export const LINK_LEVELS = 16;

/** The opacity a level is drawn with: its middle weight, ((v + 0.5) / LINK_LEVELS)^2. */
export function linkAlpha(v: number): number {
  return ((v + 0.5) / LINK_LEVELS) ** 2;
}

/** Links of one head: parallel arrays, grouped by query (top-k lists by weight, descending),
 *  with indexes so a view can draw one query's links, or one level's, without a full scan. */
export interface HeadLinks {
  head: number;
  n: number;
  i: Int32Array; // (n) query token (left column)
  j: Int32Array; // (n) key token (right column)
  w: Float32Array; // (n) attention weight
  /** (T + 1) the links of query q are rowStart[q] .. rowStart[q + 1] - 1 */
  rowStart: Int32Array;
  /** (n) link indices ordered by opacity level; level v is levelIdx[levelStart[v] .. levelStart[v + 1]) */
  levelIdx: Int32Array;
  levelStart: Int32Array; // (LINK_LEVELS + 1)
}

export interface LinkOptions {
  data: Float32Array; // (H, T, K) rows = queries
  T: number;
  /** keys per row (cross-attention: the source's tokens); T when absent */
  K?: number;
  /** the keys' tokens (cross-attention); tokens when absent */
  keyTokens?: Token[];
  head: number;
  threshold: number; // keep w >= threshold
  topk: number; // per query; 0 = no limit
  tokens: Token[];
  filter: PairFilter;
}

function allowed(f: PairFilter, a: 0 | 1, b: 0 | 1): boolean {
  switch (f) {
    case 'all':
      return true;
    case 'aa':
      return a === 0 && b === 0;
    case 'bb':
      return a === 1 && b === 1;
    case 'ab':
      return a === 0 && b === 1;
    case 'ba':
      return a === 1 && b === 0;
  }
}

export const linkLevel = (w: number): number => Math.min(LINK_LEVELS - 1, Math.floor(Math.sqrt(w) * LINK_LEVELS));
const level = linkLevel;

export function selectLinks(o: LinkOptions): HeadLinks {
  const { data, T, head, threshold, topk, tokens, filter } = o;
  const K = o.K ?? T;
  const keyTokens = o.keyTokens ?? tokens;
  const k = topk > 0 ? Math.min(topk, K) : 0;
  const cap = k ? T * k : T * K;
  const I = new Int32Array(cap);
  const J = new Int32Array(cap);
  const W = new Float32Array(cap);
  const rowStart = new Int32Array(T + 1);
  let n = 0;
  const base = head * T * K;
  const best = new Int32Array(Math.max(1, k));
  for (let i = 0; i < T; i++) {
    const row = base + i * K;
    rowStart[i] = n;
    let nb = 0;
    const si = tokens[i].segment;
    for (let j = 0; j < K; j++) {
      const w = data[row + j];
      if (!(w >= threshold && w > 0) || (filter !== 'all' && !allowed(filter, si, keyTokens[j].segment))) continue;
      if (!k) {
        I[n] = i;
        J[n] = j;
        W[n++] = w;
        continue;
      }
      if (nb === k && w <= data[row + best[k - 1]]) continue;
      let p = nb < k ? nb++ : k - 1; // insertion into the sorted top-k list
      while (p > 0 && data[row + best[p - 1]] < w) {
        best[p] = best[p - 1];
        p--;
      }
      best[p] = j;
    }
    for (let q = 0; q < nb; q++) {
      I[n] = i;
      J[n] = best[q];
      W[n++] = data[row + best[q]];
    }
  }
  rowStart[T] = n;
  const levelStart = new Int32Array(LINK_LEVELS + 1);
  for (let m = 0; m < n; m++) levelStart[level(W[m]) + 1]++;
  for (let v = 0; v < LINK_LEVELS; v++) levelStart[v + 1] += levelStart[v];
  const fill = levelStart.slice(0, LINK_LEVELS);
  const levelIdx = new Int32Array(n);
  for (let m = 0; m < n; m++) levelIdx[fill[level(W[m])]++] = m;
  return { head, n, i: I.slice(0, n), j: J.slice(0, n), w: W.slice(0, n), rowStart, levelIdx, levelStart };
}

const byKeyCache = new WeakMap<HeadLinks, { keyStart: Int32Array; keyIdx: Int32Array }>();

/** The links of each key: keyIdx[keyStart[j] .. keyStart[j + 1]) are the indices of the
 *  links into key j (computed once per HeadLinks and kept with it); T: the number of keys. */
export function linksByKey(hl: HeadLinks, T: number): { keyStart: Int32Array; keyIdx: Int32Array } {
  let r = byKeyCache.get(hl);
  if (!r) {
    const keyStart = new Int32Array(T + 1);
    for (let m = 0; m < hl.n; m++) keyStart[hl.j[m] + 1]++;
    for (let j = 0; j < T; j++) keyStart[j + 1] += keyStart[j];
    const fill = keyStart.slice(0, T);
    const keyIdx = new Int32Array(hl.n);
    for (let m = 0; m < hl.n; m++) keyIdx[fill[hl.j[m]]++] = m;
    r = { keyStart, keyIdx };
    byKeyCache.set(hl, r);
  }
  return r;
}
