// align.ts — word alignment from an encoder-decoder run's cross-attention, the browser's
// copy of src/analysis/align.c (docs/analysis.md, "Word alignment"): tokens to their
// whitespace-separated words by byte offsets, each target word's rows averaged and each
// source word's columns summed over their pieces (special tokens left out), the argmax
// source word of every target word per head and per layer's head mean, Pharaoh gold lines
// (i-j sure, i?j / ipj possible) and the alignment error rate
// AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|) (Och & Ney 2003). tests/browser/align.test.mjs
// checks its numbers against `attnscope align`. Rows: the decoder position that predicts
// each target token (align's default, --rows predict).
import type { Token } from '../api/types';

/** Word index of each token (-1: a special token), from its byte span in text. */
export function tokenWords(tokens: Token[], text: string): { word: number[]; n: number } {
  const bytes = new TextEncoder().encode(text);
  const blank = (c: number): boolean => c === 32 || c === 9;
  const bw = new Int32Array(bytes.length);
  let w = -1;
  let inWord = false;
  for (let i = 0; i < bytes.length; i++) {
    if (blank(bytes[i])) {
      bw[i] = -1;
      inWord = false;
    } else {
      if (!inWord) w++;
      inWord = true;
      bw[i] = w;
    }
  }
  const word = tokens.map((t) => {
    if (t.special || t.start < 0 || t.start >= bytes.length) return -1;
    const e = t.end < t.start || t.end > bytes.length ? bytes.length : t.end;
    let i = t.start;
    while (i < e && bw[i] < 0) i++;
    if (i === e) while (i < bytes.length && bw[i] < 0) i++; // spaces only: the next word
    return i < bytes.length ? bw[i] : -1;
  });
  return { word, n: w + 1 };
}

/** The target word of each decoder row: row i predicts the decoder's token i + 1 (the
 *  target's token i), so it gets that token's word; the last row's token is not an input. */
export function predictRows(decoderWord: number[]): number[] {
  return decoderWord.map((_, i) => (i + 1 < decoderWord.length ? decoderWord[i + 1] : -1));
}

/** W[b * Ws + a]: mean over the rows of target word b of the sum over the columns of
 *  source word a of A (Tt, Ts). */
export function wordMatrix(A: ArrayLike<number>, Tt: number, Ts: number, rowWord: number[], Wt: number, srcWord: number[], Ws: number): Float64Array {
  const W = new Float64Array(Wt * Ws);
  const rows = new Int32Array(Wt);
  for (let i = 0; i < Tt; i++) {
    const b = rowWord[i];
    if (b < 0 || b >= Wt) continue;
    rows[b]++;
    for (let j = 0; j < Ts; j++) {
      const a = srcWord[j];
      if (a >= 0 && a < Ws) W[b * Ws + a] += A[i * Ts + j];
    }
  }
  for (let b = 0; b < Wt; b++) if (rows[b] > 1) for (let a = 0; a < Ws; a++) W[b * Ws + a] /= rows[b];
  return W;
}

/** For each target word with rows, the source word (with pieces) of largest weight, the
 *  lowest index on ties; -1 otherwise. */
export function wordArgmax(W: Float64Array, Wt: number, Ws: number, rowWord: number[], srcWord: number[]): number[] {
  const hasRow = new Set(rowWord.filter((b) => b >= 0));
  const srcs = [...new Set(srcWord.filter((a) => a >= 0 && a < Ws))].sort((x, y) => x - y);
  const best: number[] = [];
  for (let b = 0; b < Wt; b++) {
    let k = -1;
    if (hasRow.has(b)) for (const a of srcs) if (k < 0 || W[b * Ws + a] > W[b * Ws + k]) k = a;
    best.push(k);
  }
  return best;
}

/** A gold link: source word src, target word tgt, sure or possible. */
export interface GoldLink {
  src: number;
  tgt: number;
  sure: boolean;
}

/** Why a Pharaoh line was refused: the 1-based pair, its text, and what is wrong. */
export class PharaohError extends Error {
  constructor(
    public pair: number,
    public text: string,
    public kind: 'syntax' | 'source' | 'target',
    public index = 0,
    public words = 0,
  ) {
    super(`pair ${pair} '${text}': ${kind}`);
  }
}

/** Parses "0-0 1?2 2p1" (sure i-j, possible i?j or ipj; source i, target j) against the
 *  sentences' word counts; a pair given twice is kept once, sure if either is. */
export function parsePharaoh(line: string, nSrc: number, nTgt: number): GoldLink[] {
  const links = new Map<string, GoldLink>();
  line
    .split(/[ \t]+/)
    .filter((p) => p.length)
    .forEach((p, k) => {
      const m = /^(\d{1,9})([-?p])(\d{1,9})$/.exec(p);
      if (!m) throw new PharaohError(k + 1, p, 'syntax');
      const src = +m[1];
      const tgt = +m[3];
      if (src >= nSrc) throw new PharaohError(k + 1, p, 'source', src, nSrc);
      if (tgt >= nTgt) throw new PharaohError(k + 1, p, 'target', tgt, nTgt);
      const key = `${src},${tgt}`;
      const sure = m[2] === '-' || (links.get(key)?.sure ?? false);
      links.set(key, { src, tgt, sure });
    });
  return [...links.values()];
}

/** |A|, |S|, |A∩S|, |A∩P|. */
export interface AerCounts {
  a: number;
  s: number;
  as: number;
  ap: number;
}

export function countAer(best: number[], gold: GoldLink[]): AerCounts {
  const g = new Map(gold.map((l) => [`${l.src},${l.tgt}`, l.sure]));
  const c: AerCounts = { a: 0, s: gold.filter((l) => l.sure).length, as: 0, ap: 0 };
  best.forEach((a, b) => {
    if (a < 0) return;
    c.a++;
    const sure = g.get(`${a},${b}`);
    if (sure !== undefined) c.ap++;
    if (sure) c.as++;
  });
  return c;
}

/** AER, or NaN when |A| + |S| = 0. */
export function aer(c: AerCounts): number {
  return c.a + c.s ? 1 - (c.as + c.ap) / (c.a + c.s) : NaN;
}

/** One layer's cross-attention: H heads of (Tt, Ts), head-major. */
export interface CrossLayer {
  heads: number;
  T: number;
  K: number;
  data: ArrayLike<number>;
}

/** The attention of head h of a layer (Tt × Ts), or the layer's head mean for h = -1. */
export function headMatrix(x: CrossLayer, h: number): Float64Array {
  const n = x.T * x.K;
  const out = new Float64Array(n);
  if (h >= 0) {
    for (let i = 0; i < n; i++) out[i] = x.data[h * n + i];
    return out;
  }
  for (let k = 0; k < x.heads; k++) for (let i = 0; i < n; i++) out[i] += x.data[k * n + i] / x.heads;
  return out;
}

/** Word alignment of one head (h = -1: the head mean) of a layer. */
export function alignHead(x: CrossLayer, h: number, rowWord: number[], Wt: number, srcWord: number[], Ws: number): number[] {
  const W = wordMatrix(headMatrix(x, h), x.T, x.K, rowWord, Wt, srcWord, Ws);
  return wordArgmax(W, Wt, Ws, rowWord, srcWord);
}

/** The AER of every head (aer[l][h]) and head mean (mean[l]) of the layers, and the best
 *  single head (the lowest AER; the first in layer, head order on ties). */
export function aerTable(layers: CrossLayer[], rowWord: number[], Wt: number, srcWord: number[], Ws: number, gold: GoldLink[]): { aer: number[][]; mean: number[]; best: { layer: number; head: number } } {
  const table = layers.map((x) => Array.from({ length: x.heads }, (_, h) => aer(countAer(alignHead(x, h, rowWord, Wt, srcWord, Ws), gold))));
  const mean = layers.map((x) => aer(countAer(alignHead(x, -1, rowWord, Wt, srcWord, Ws), gold)));
  let best = { layer: 0, head: 0 };
  table.forEach((row, l) => row.forEach((v, h) => {
    if (v < table[best.layer][best.head]) best = { layer: l, head: h };
  }));
  return { aer: table, mean, best };
}

/** best as a Pharaoh line "a-b ..." in target order. */
export function formatPharaoh(best: number[]): string {
  return best.flatMap((a, b) => (a >= 0 ? [`${a}-${b}`] : [])).join(' ');
}

/** The argmax source token of each row of A (Tt, Ts) over the columns of non-special tokens; -1 for none. */
export function rowArgmax(A: ArrayLike<number>, Tt: number, Ts: number, keyOk: boolean[]): number[] {
  const out: number[] = [];
  for (let i = 0; i < Tt; i++) {
    let k = -1;
    for (let j = 0; j < Ts; j++) if (keyOk[j] && (k < 0 || A[i * Ts + j] > A[i * Ts + k])) k = j;
    out.push(k);
  }
  return out;
}
