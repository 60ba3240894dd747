// grid.ts — the model view: every (layer, head) as a thumbnail on one canvas, as
// lines (each query block's strongest key block) or as a heat map, drawn from the
// server's max-pooled (n, n) thumbnails (docs/server.md, `pool`), and which cell is
// under the pointer. The large heat map of one head is lib/heatmap.ts. Drawing goes
// through a Painter. Blocks where every cell is masked (causal, sliding window) are
// grey, not weight 0; grouped-query models get a "kv g" label over each group's columns
// and the selected head's group mates outlined. Thumbnails may be rectangular
// (cross-attention: n query blocks of T decoder tokens × nk key blocks of K source tokens).
// With a fill (a head statistic) each thumbnail is one colour instead.
import { headColor } from './colors';
import type { Painter } from './painter';

export type GridMode = 'lines' | 'matrix';

export interface GridLayout {
  cell: number;
  gap: number;
  left: number;
  top: number;
  width: number;
  height: number;
}

export function gridLayout(nLayers: number, nHeads: number, cell: number, grouped = false): GridLayout {
  const gap = 6;
  const left = 56;
  const top = grouped ? 36 : 22;
  return { cell, gap, left, top, width: left + nHeads * (cell + gap), height: top + nLayers * (cell + gap) };
}

/** The side of the thumbnails the model view asks the server for (pool=N). */
export const THUMB_POOL = 64;

export interface GridOptions {
  layers: number[]; // rows shown (absolute layer indices)
  heads: number[]; // columns shown
  cell: number;
  mode: GridMode;
  T: number; // tokens
  /** side of each thumbnail (n <= T): block i covers tokens [floor(i*T/n), floor((i+1)*T/n)) */
  n: number;
  /** keys per row and the key blocks of each thumbnail (cross-attention); T and n when absent */
  K?: number;
  nk?: number;
  /** (n, nk) max-pooled attention of a head, rows = query blocks, or null while it loads */
  thumb: (layer: number, head: number) => Float32Array | null;
  heat: (v: number) => [number, number, number];
  selected: { layer: number; head: number } | null;
  /** each head's key/value head (grouped-query attention), or null */
  kvGroup?: number[] | null;
  /** whether every cell of queries [q0, q1] × keys [k0, k1] of layer l is masked, or null (no mask) */
  masked?: ((l: number, q0: number, q1: number, k0: number, k1: number) => boolean) | null;
  /** a value in [0, 1] per head (a statistic, lib/thumbstat.ts) that fills its whole
   *  thumbnail on the heat scale instead of the attention; null: the attention */
  fill?: ((layer: number, head: number) => number) | null;
}

/** Colour of a masked cell: grey, distinct from weight 0 (near white on the heat scale). */
export const MASKED_RGB: [number, number, number] = [200, 200, 200];

/** heat, with NaN (a masked cell) drawn grey. */
export function maskedHeat(heat: (v: number) => [number, number, number]): (v: number) => [number, number, number] {
  return (v) => (Number.isNaN(v) ? MASKED_RGB : heat(v));
}

/** Block i of n over T tokens: [floor(i*T/n), floor((i+1)*T/n) - 1]. */
function blockRange(i: number, n: number, T: number): [number, number] {
  return [Math.floor((i * T) / n), Math.floor(((i + 1) * T) / n) - 1];
}

/** The blocks of an (n, n) thumbnail of layer l whose cells are all masked: a (n, n) 0/1
 *  array, or null when none is. */
export function maskedBlocks(o: Pick<GridOptions, 'masked' | 'n' | 'T' | 'K' | 'nk'>, l: number): Uint8Array | null {
  if (!o.masked) return null;
  const nk = o.nk ?? o.n;
  const m = new Uint8Array(o.n * nk);
  let any = false;
  for (let i = 0; i < o.n; i++) {
    const [q0, q1] = blockRange(i, o.n, o.T);
    for (let j = 0; j < nk; j++) {
      const [k0, k1] = blockRange(j, nk, o.K ?? o.T);
      if (o.masked(l, q0, q1, k0, k1)) {
        m[i * nk + j] = 1;
        any = true;
      }
    }
  }
  return any ? m : null;
}

/** The centre of block i of n over T tokens, as a fraction of T (the server's blocks). */
function blockCentre(i: number, n: number, T: number): number {
  return (Math.floor((i * T) / n) + Math.floor(((i + 1) * T) / n)) / (2 * T);
}

/** Each query block's strongest key block: (n, nk) thumbnail a over T queries and K keys. */
function drawThumbLines(p: Painter, a: Float32Array, n: number, nk: number, T: number, K: number, x: number, y: number, s: number, color: string): void {
  const seg = new Float32Array(4 * n);
  const buckets = 4;
  for (let b = 0; b < buckets; b++) {
    let k = 0;
    for (let i = 0; i < n; i++) {
      let best = 0;
      let bw = -1;
      const row = i * nk;
      for (let j = 0; j < nk; j++)
        if (a[row + j] > bw) {
          bw = a[row + j];
          best = j;
        }
      if (Math.min(buckets - 1, Math.floor(bw * buckets)) !== b) continue;
      seg[4 * k] = x + 3;
      seg[4 * k + 1] = y + blockCentre(i, n, T) * s;
      seg[4 * k + 2] = x + s - 3;
      seg[4 * k + 3] = y + blockCentre(best, nk, K) * s;
      k++;
    }
    p.lines(seg, k, color, (b + 0.5) / buckets, 1);
  }
}

/** The "kv g" labels over each run of columns reading the same key/value head. */
function drawGroupLabels(p: Painter, o: GridOptions, G: GridLayout): void {
  const kv = o.kvGroup;
  if (!kv) return;
  let c0 = 0;
  for (let c = 1; c <= o.heads.length; c++) {
    if (c < o.heads.length && kv[o.heads[c]] === kv[o.heads[c0]]) continue;
    const x0 = G.left + c0 * (G.cell + G.gap);
    const x1 = G.left + (c - 1) * (G.cell + G.gap) + G.cell;
    p.line(x0, 15, x1, 15, '#888', 1, 1);
    p.line(x0, 15, x0, 19, '#888', 1, 1);
    p.line(x1, 15, x1, 19, '#888', 1, 1);
    p.text((x0 + x1) / 2, 7, `kv${kv[o.heads[c0]]}`, { align: 'center', size: 10, color: '#666' });
    c0 = c;
  }
}

export function drawGrid(p: Painter, o: GridOptions): void {
  const grouped = !!o.kvGroup;
  const G = gridLayout(o.layers.length, o.heads.length, o.cell, grouped);
  drawGroupLabels(p, o, G);
  o.heads.forEach((h, c) => p.text(G.left + c * (G.cell + G.gap) + G.cell / 2, G.top - 12, `H${h}`, { align: 'center', size: 11, color: '#555' }));
  const sel = o.selected;
  const mateGroup = sel && o.kvGroup ? o.kvGroup[sel.head] : -1;
  const heat = maskedHeat(o.heat);
  o.layers.forEach((l, r) => {
    const y = G.top + r * (G.cell + G.gap);
    p.text(G.left - 8, y + G.cell / 2, `L${l}`, { align: 'right', size: 11, color: '#555' });
    const mask = maskedBlocks(o, l);
    /* lines mode: the masked blocks as a grey image under the lines (one per layer) */
    const maskImage = mask ? Float32Array.from(mask, (m) => (m ? NaN : -1)) : null;
    o.heads.forEach((h, c) => {
      const x = G.left + c * (G.cell + G.gap);
      p.rect(x, y, G.cell, G.cell, '#f6f6f6');
      const a = o.fill ? null : o.thumb(l, h);
      if (o.fill) p.matrix(x, y, G.cell, G.cell, { cols: 1, rows: 1, values: Float32Array.of(o.fill(l, h)), color: o.heat });
      else if (a) {
        if (o.mode === 'matrix') {
          const v = mask ? Float32Array.from(a, (w, k) => (mask[k] ? NaN : w)) : a;
          p.matrix(x, y, G.cell, G.cell, { cols: o.nk ?? o.n, rows: o.n, values: v, color: heat });
        } else {
          if (maskImage) p.matrix(x, y, G.cell, G.cell, { cols: o.nk ?? o.n, rows: o.n, values: maskImage, color: (v) => (Number.isNaN(v) ? MASKED_RGB : [246, 246, 246]) });
          drawThumbLines(p, a, o.n, o.nk ?? o.n, o.T, o.K ?? o.T, x, y, G.cell, headColor(h));
        }
      }
      const isSel = sel && sel.layer === l && sel.head === h;
      const mate = !isSel && sel && sel.layer === l && o.kvGroup && o.kvGroup[h] === mateGroup;
      p.strokeRect(x, y, G.cell, G.cell, isSel ? '#d62728' : mate ? '#ff7f0e' : '#ccc', isSel || mate ? 2 : 1);
    });
  });
}

export function hitGrid(o: GridOptions, x: number, y: number): { layer: number; head: number } | null {
  const G = gridLayout(o.layers.length, o.heads.length, o.cell, !!o.kvGroup);
  const c = Math.floor((x - G.left) / (G.cell + G.gap));
  const r = Math.floor((y - G.top) / (G.cell + G.gap));
  if (c < 0 || r < 0 || c >= o.heads.length || r >= o.layers.length) return null;
  if (x - G.left - c * (G.cell + G.gap) > G.cell || y - G.top - r * (G.cell + G.gap) > G.cell) return null;
  return { layer: o.layers[r], head: o.heads[c] };
}

/** A thumbnail cell: layer, head, the query and key token ranges its block covers, and its
 *  (max-pooled) weight. */
export interface ThumbCell {
  layer: number;
  head: number;
  q0: number;
  q1: number; // inclusive
  k0: number;
  k1: number; // inclusive
  w: number;
  /** every cell of the block is masked */
  masked: boolean;
}

/** The thumbnail cell under (x, y), or null (outside a thumbnail, or while it loads). */
export function hitThumbCell(o: GridOptions, x: number, y: number): ThumbCell | null {
  const hit = hitGrid(o, x, y);
  if (!hit) return null;
  const a = o.thumb(hit.layer, hit.head);
  if (!a) return null;
  const G = gridLayout(o.layers.length, o.heads.length, o.cell, !!o.kvGroup);
  const cx = x - G.left - o.heads.indexOf(hit.head) * (G.cell + G.gap);
  const cy = y - G.top - o.layers.indexOf(hit.layer) * (G.cell + G.gap);
  const nk = o.nk ?? o.n;
  const K = o.K ?? o.T;
  const bi = Math.min(o.n - 1, Math.floor((cy / G.cell) * o.n));
  const bj = Math.min(nk - 1, Math.floor((cx / G.cell) * nk));
  const lo = (b: number, n: number, T: number): number => Math.floor((b * T) / n);
  const hi = (b: number, n: number, T: number): number => Math.floor(((b + 1) * T) / n) - 1;
  const c = { layer: hit.layer, head: hit.head, q0: lo(bi, o.n, o.T), q1: hi(bi, o.n, o.T), k0: lo(bj, nk, K), k1: hi(bj, nk, K), w: a[bi * nk + bj] };
  return { ...c, masked: !!o.masked?.(c.layer, c.q0, c.q1, c.k0, c.k1) };
}
