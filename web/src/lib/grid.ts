// grid.ts — the model view: every (layer, head) as a thumbnail on one canvas, as
// lines (each query block's strongest key block) or as a heat map, drawn from the
// server's max-pooled (n, n) thumbnails (docs/server.md, `pool`), and which cell is
// under the pointer. The large heat map of one head is lib/heatmap.ts. Drawing goes
// through a Painter.
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
}

/** The thumbnail cell under (x, y), or null (outside a thumbnail, or while it loads). */
export function hitThumbCell(o: GridOptions, x: number, y: number): ThumbCell | null {
  const hit = hitGrid(o, x, y);
  if (!hit) return null;
  const a = o.thumb(hit.layer, hit.head);
  if (!a) return null;
  const G = gridLayout(o.layers.length, o.heads.length, o.cell);
  const cx = x - G.left - o.heads.indexOf(hit.head) * (G.cell + G.gap);
  const cy = y - G.top - o.layers.indexOf(hit.layer) * (G.cell + G.gap);
  const bi = Math.min(o.n - 1, Math.floor((cy / G.cell) * o.n));
  const bj = Math.min(o.n - 1, Math.floor((cx / G.cell) * o.n));
  const lo = (b: number): number => Math.floor((b * o.T) / o.n);
  const hi = (b: number): number => Math.floor(((b + 1) * o.T) / o.n) - 1;
  return { layer: hit.layer, head: hit.head, q0: lo(bi), q1: hi(bi), k0: lo(bj), k1: hi(bj), w: a[bi * o.n + bj] };
}
