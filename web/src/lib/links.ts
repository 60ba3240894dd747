// links.ts — which attention links a view draws: per head, the (query, key, weight)
// triples at or above a threshold, optionally only each query's top k keys, and
// the sentence-pair filter. Pure functions over the (H, T, T) attention of a layer.
import type { Token } from '../api/types';

export type PairFilter = 'all' | 'aa' | 'bb' | 'ab' | 'ba';

/** Links of one head: parallel arrays, by query (top-k lists by weight, descending). */
export interface HeadLinks {
  head: number;
  n: number;
  i: Int32Array; // query token (left column)
  j: Int32Array; // key token (right column)
  w: Float32Array; // attention weight
}

export interface LinkOptions {
  data: Float32Array; // (H, T, T) rows = queries
  T: number;
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

export function selectLinks(o: LinkOptions): HeadLinks {
  const { data, T, head, threshold, topk, tokens, filter } = o;
  const I: number[] = [];
  const J: number[] = [];
  const W: number[] = [];
  const base = head * T * T;
  const k = topk > 0 ? topk : 0;
  const best = new Int32Array(Math.max(1, k));
  for (let i = 0; i < T; i++) {
    const row = base + i * T;
    let nb = 0;
    for (let j = 0; j < T; j++) {
      const w = data[row + j];
      if (!(w >= threshold && w > 0) || !allowed(filter, tokens[i].segment, tokens[j].segment)) continue;
      if (!k) {
        I.push(i);
        J.push(j);
        W.push(w);
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
      I.push(i);
      J.push(best[q]);
      W.push(data[row + best[q]]);
    }
  }
  return { head, n: I.length, i: Int32Array.from(I), j: Int32Array.from(J), w: Float32Array.from(W) };
}
