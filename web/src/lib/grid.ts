// grid.ts — the model view: every (layer, head) as a thumbnail on one canvas, as
// lines (each query block's strongest key block) or as a heat map, drawn from the
// server's max-pooled (n, n) thumbnails (docs/server.md, `pool`), plus the large
// heat map of one head's full (T, T) matrix with token labels. Drawing goes
// through a Painter.
import type { Token } from '../api/types';
import { headColor } from './colors';
import type { Painter } from './painter';
import { label } from './headview';

export type GridMode = 'lines' | 'matrix';

export interface GridLayout {
  cell: number;
  gap: number;
  left: number;
  top: number;
  width: number;
  height: number;
}

export function gridLayout(nLayers: number, nHeads: number, cell: number): GridLayout {
  const gap = 6;
  const left = 56;
  const top = 22;
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
  /** (n, n) max-pooled attention of a head, rows = query blocks, or null while it loads */
  thumb: (layer: number, head: number) => Float32Array | null;
  heat: (v: number) => [number, number, number];
  selected: { layer: number; head: number } | null;
}

/** The centre of block i of n over T tokens, as a fraction of T (the server's blocks). */
function blockCentre(i: number, n: number, T: number): number {
  return (Math.floor((i * T) / n) + Math.floor(((i + 1) * T) / n)) / (2 * T);
}

function drawThumbLines(p: Painter, a: Float32Array, n: number, T: number, x: number, y: number, s: number, color: string): void {
  const seg = new Float32Array(4 * n);
  const buckets = 4;
  for (let b = 0; b < buckets; b++) {
    let k = 0;
    for (let i = 0; i < n; i++) {
      let best = 0;
      let bw = -1;
      const row = i * n;
      for (let j = 0; j < n; j++)
        if (a[row + j] > bw) {
          bw = a[row + j];
          best = j;
        }
      if (Math.min(buckets - 1, Math.floor(bw * buckets)) !== b) continue;
      seg[4 * k] = x + 3;
      seg[4 * k + 1] = y + blockCentre(i, n, T) * s;
      seg[4 * k + 2] = x + s - 3;
      seg[4 * k + 3] = y + blockCentre(best, n, T) * s;
      k++;
    }
    p.lines(seg, k, color, (b + 0.5) / buckets, 1);
  }
}

export function drawGrid(p: Painter, o: GridOptions): void {
  const G = gridLayout(o.layers.length, o.heads.length, o.cell);
  o.heads.forEach((h, c) => p.text(G.left + c * (G.cell + G.gap) + G.cell / 2, 10, `H${h}`, { align: 'center', size: 11, color: '#555' }));
  o.layers.forEach((l, r) => {
    const y = G.top + r * (G.cell + G.gap);
    p.text(G.left - 8, y + G.cell / 2, `L${l}`, { align: 'right', size: 11, color: '#555' });
    o.heads.forEach((h, c) => {
      const x = G.left + c * (G.cell + G.gap);
      p.rect(x, y, G.cell, G.cell, '#f6f6f6');
      const a = o.thumb(l, h);
      if (a) {
        if (o.mode === 'matrix') p.matrix(x, y, G.cell, G.cell, { cols: o.n, rows: o.n, values: a, color: o.heat });
        else drawThumbLines(p, a, o.n, o.T, x, y, G.cell, headColor(h));
      }
      const sel = o.selected && o.selected.layer === l && o.selected.head === h;
      p.strokeRect(x, y, G.cell, G.cell, sel ? '#d62728' : '#ccc', sel ? 2 : 1);
    });
  });
}

export function hitGrid(o: GridOptions, x: number, y: number): { layer: number; head: number } | null {
  const G = gridLayout(o.layers.length, o.heads.length, o.cell);
  const c = Math.floor((x - G.left) / (G.cell + G.gap));
  const r = Math.floor((y - G.top) / (G.cell + G.gap));
  if (c < 0 || r < 0 || c >= o.heads.length || r >= o.layers.length) return null;
  if (x - G.left - c * (G.cell + G.gap) > G.cell || y - G.top - r * (G.cell + G.gap) > G.cell) return null;
  return { layer: o.layers[r], head: o.heads[c] };
}

export interface MatrixOptions {
  tokens: Token[];
  T: number;
  att: Float32Array; // (T, T) of this head
  head: number;
  layer: number;
  heat: (v: number) => [number, number, number];
  size: number; // matrix side in px
}

/** Large heat map of one head: rows = queries, columns = keys, with token labels. */
export function matrixLayout(o: { T: number; size: number }): { left: number; top: number; width: number; height: number } {
  const left = 110;
  const top = 110;
  return { left, top, width: left + o.size + 10, height: top + o.size + 10 };
}

export function drawMatrix(p: Painter, o: MatrixOptions): void {
  const M = matrixLayout(o);
  const T = o.T;
  const cs = o.size / T;
  p.text(4, 12, `layer ${o.layer} head ${o.head}: rows = queries, columns = keys`, { size: 12, color: '#333' });
  p.matrix(M.left, M.top, o.size, o.size, { cols: T, rows: T, values: o.att, color: o.heat });
  p.strokeRect(M.left, M.top, o.size, o.size, '#999', 1);
  if (cs >= 7) {
    const fs = Math.min(12, cs - 1);
    for (let i = 0; i < T; i++) {
      p.text(M.left - 4, M.top + (i + 0.5) * cs, label(o.tokens[i]), { align: 'right', size: fs });
    }
    for (let j = 0; j < T; j++) {
      // column labels written vertically are not supported by every painter: stagger instead
      p.text(M.left + (j + 0.5) * cs, M.top - 8 - (j % 6) * 15, label(o.tokens[j]), { align: 'center', size: fs, color: '#444' });
    }
  }
}
