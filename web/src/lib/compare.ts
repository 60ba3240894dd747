// compare.ts — model comparison (Dodrio-style, two models side by side): heads of model
// A matched to heads of model B with the same pattern label, nearest by their Clark et
// al. (2019) statistics profile (Euclidean over [CLS], [SEP], punct, self, prev, next,
// normalized entropy). No drawing, no D3.
import type { HeadColumns, HeadsResponse } from '../api/dbtypes';

export interface HeadMatch {
  a: { layer: number; head: number };
  b: { layer: number; head: number };
  pattern: string;
  distance: number;
}

const STATS: (keyof HeadColumns)[] = ['cls', 'sep', 'punct', 'self', 'prev', 'next', 'entropy_norm'];

function profile(c: HeadColumns, i: number): number[] {
  return STATS.map((k) => Number((c[k] as (number | null)[])[i] ?? 0));
}

export function matchHeads(A: HeadsResponse, B: HeadsResponse): HeadMatch[] {
  const out: HeadMatch[] = [];
  const nA = A.layers * A.heads;
  const nB = B.layers * B.heads;
  for (let i = 0; i < nA; i++) {
    const pat = A.columns.pattern[i];
    if (!pat) continue;
    const pa = profile(A.columns, i);
    let best = -1;
    let bd = Infinity;
    for (let j = 0; j < nB; j++) {
      if (B.columns.pattern[j] !== pat) continue;
      const pb = profile(B.columns, j);
      const d = Math.sqrt(pa.reduce((s, v, k) => s + (v - pb[k]) ** 2, 0));
      if (d < bd) {
        bd = d;
        best = j;
      }
    }
    if (best >= 0)
      out.push({
        a: { layer: Math.floor(i / A.heads), head: i % A.heads },
        b: { layer: Math.floor(best / B.heads), head: best % B.heads },
        pattern: pat,
        distance: bd,
      });
  }
  return out.sort((x, y) => x.distance - y.distance);
}

/** Heads per pattern label in each model. */
export function patternCounts(A: HeadsResponse, B: HeadsResponse): { pattern: string; a: number; b: number }[] {
  const m = new Map<string, { a: number; b: number }>();
  for (const p of A.columns.pattern) if (p) m.set(p, { a: (m.get(p)?.a ?? 0) + 1, b: m.get(p)?.b ?? 0 });
  for (const p of B.columns.pattern) if (p) m.set(p, { a: m.get(p)?.a ?? 0, b: (m.get(p)?.b ?? 0) + 1 });
  return [...m.entries()].map(([pattern, v]) => ({ pattern, ...v })).sort((x, y) => y.a + y.b - x.a - x.b);
}

export function scoreValues(h: HeadsResponse, k: 'importance' | 'semantic' | 'syntactic'): number[] {
  return h.columns[k].filter((v): v is number => v !== null);
}

/** The attribution columns compared: the column and its row label key. */
export const ATTR_COLUMNS = ['head_importance', 'head_importance_norm', 'norm_sink_ratio', 'alti_contribution'] as const;
export type AttrColumn = (typeof ATTR_COLUMNS)[number];

/** One attribution column of both models: its mean over the heads that have it (null
 *  when none does), B - A, and for the sink ratio the heads below 1 (sink attention that
 *  moves little, Kobayashi et al. 2020). */
export interface AttrDiff {
  column: AttrColumn;
  a: number | null;
  b: number | null;
  diff: number | null;
  below1: [number, number] | null;
}

function mean(v: (number | null)[]): number | null {
  const x = v.filter((y): y is number => y !== null);
  return x.length ? x.reduce((s, y) => s + y, 0) / x.length : null;
}

export function attrDiffs(A: HeadsResponse, B: HeadsResponse): AttrDiff[] {
  return ATTR_COLUMNS.map((column) => {
    const a = mean(A.columns[column]);
    const b = mean(B.columns[column]);
    const below = (h: HeadsResponse): number => h.columns[column].filter((v) => v !== null && v < 1).length;
    return { column, a, b, diff: a !== null && b !== null ? b - a : null,
      below1: column === 'norm_sink_ratio' ? [below(A), below(B)] : null };
  });
}
