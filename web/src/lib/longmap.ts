// longmap.ts — the long-input heat map of one head's attention (views/LongView.svelte):
// a square window of the T × T matrix drawn from one server tile (GET .../tile: the window
// pooled to at most TILE_CELLS cells a side, each the block's max or mean; at full
// resolution the weights themselves), token labels once a cell is wide enough for one,
// token positions as ticks otherwise, a colour legend on a linear or log scale, blocks that
// are entirely masked (causal, sliding window) grey. A window whose tile has not arrived
// (a zoom or pan) is drawn at once from the tile on screen, resampled (previewValues). It computes which tile a window needs
// and what is under the pointer; the component keeps the window and fetches. Drawing goes
// through a Painter (on screen and export alike). The window itself is heatmap.ts's.
import type { Tile, TileQuery } from '../api/client';
import type { Block, Token } from '../api/types';
import { blockMasked } from './block';
import { MASKED_RGB, maskedHeat } from './grid';
import type { HeatWindow } from './heatmap';
import { label } from './headview';
import { t } from './i18n';
import type { Painter } from './painter';

/** Cells per side of a tile: a window of at most this many tokens is fetched at full resolution. */
export const TILE_CELLS = 256;
/** The log scale's lowest weight: smaller weights (and 0) get its colour. */
export const LOG_MIN = 1e-8;
/** Smallest spacing (px) between two drawn labels. */
const LABEL_PX = 12;
const LEGEND_W = 84;

export type LongScale = 'lin' | 'log';
export type PoolOp = 'max' | 'mean';

export interface LongMapOptions {
  tokens: Token[];
  T: number;
  layer: number;
  head: number;
  /** the tile drawn (its own window), or null while the first one loads */
  tile: Tile | null;
  op: PoolOp;
  scale: LongScale;
  heat: (v: number) => [number, number, number];
  size: number; // side of the matrix in px
  /** the model's masks, or null: nothing masked */
  block: Block | null;
  /** the tile cell under the pointer, outlined, or null */
  cursor: LongHit | null;
  /** the window on screen: while it differs from the tile's (a zoom or pan whose tile is
   *  not there yet) the tile is resampled onto it (previewValues); absent: the tile's own */
  win?: HeatWindow;
}

export interface LongLayout {
  left: number;
  top: number;
  width: number;
  height: number;
}

export function longLayout(size: number): LongLayout {
  return { left: 116, top: 116, width: 116 + size + 24 + LEGEND_W, height: 116 + size + 10 };
}

/** The tile a window needs: its rows and keys, at most TILE_CELLS cells a side. */
export function tileQuery(win: HeatWindow, layer: number, head: number, exclude: number[]): TileQuery {
  return { layer, head, r0: win.r0, r1: win.r0 + win.n, c0: win.c0, c1: win.c0 + win.n, n: Math.min(win.n, TILE_CELLS), exclude };
}

/** Whether each cell of tile is one weight (max = mean = the weight). */
export function fullResolution(tile: Tile): boolean {
  return tile.pr === tile.r1 - tile.r0 && tile.pc === tile.c1 - tile.c0;
}

/** First token of block b of n over [lo, hi) (the server's split: floor(b·(hi-lo)/n)). */
export function blockStart(b: number, n: number, lo: number, hi: number): number {
  return lo + Math.floor((b * (hi - lo)) / n);
}

/** Weight -> [0, 1] for the colours: itself, or its log10 between LOG_MIN and 1. */
export function scaled(v: number, scale: LongScale): number {
  if (Number.isNaN(v)) return v;
  if (scale === 'lin') return v;
  const lo = Math.log10(LOG_MIN);
  return (Math.log10(Math.max(v, LOG_MIN)) - lo) / -lo;
}

/** What is under the pointer: the tile cell (bi, bj), the tokens it covers ([q0, q1) × [k0, k1)),
 *  and the query and key at the pointer itself. */
export interface LongHit {
  bi: number;
  bj: number;
  q0: number;
  q1: number;
  k0: number;
  k1: number;
  query: number;
  key: number;
}

export function hitLong(o: Pick<LongMapOptions, 'tile' | 'size'>, x: number, y: number): LongHit | null {
  const L = longLayout(o.size), tl = o.tile;
  if (!tl) return null;
  const fx = (x - L.left) / o.size, fy = (y - L.top) / o.size;
  if (fx < 0 || fy < 0 || fx >= 1 || fy >= 1) return null;
  const bi = Math.floor(fy * tl.pr), bj = Math.floor(fx * tl.pc);
  return {
    bi,
    bj,
    q0: blockStart(bi, tl.pr, tl.r0, tl.r1),
    q1: blockStart(bi + 1, tl.pr, tl.r0, tl.r1),
    k0: blockStart(bj, tl.pc, tl.c0, tl.c1),
    k1: blockStart(bj + 1, tl.pc, tl.c0, tl.c1),
    query: tl.r0 + Math.floor(fy * (tl.r1 - tl.r0)),
    key: tl.c0 + Math.floor(fx * (tl.c1 - tl.c0)),
  };
}

/** The tile's values as drawn: the op's, scaled, NaN where the whole block is masked or excluded. */
function cellValues(o: LongMapOptions, tl: Tile): Float32Array {
  const src = o.op === 'max' ? tl.max : tl.mean;
  const out = new Float32Array(tl.pr * tl.pc);
  for (let bi = 0; bi < tl.pr; bi++) {
    const q0 = blockStart(bi, tl.pr, tl.r0, tl.r1), q1 = blockStart(bi + 1, tl.pr, tl.r0, tl.r1) - 1;
    for (let bj = 0; bj < tl.pc; bj++) {
      const k0 = blockStart(bj, tl.pc, tl.c0, tl.c1), k1 = blockStart(bj + 1, tl.pc, tl.c0, tl.c1) - 1;
      const excluded = k0 === k1 && tl.exclude.includes(k0);
      const masked = o.block !== null && blockMasked(o.block, o.layer, q0, q1, k0, k1);
      out[bi * tl.pc + bj] = masked || excluded ? NaN : scaled(src[bi * tl.pc + bj], o.scale);
    }
  }
  return out;
}

/** Whether tile is the window's own tile (the same rows and keys). */
export function tileFits(tile: Tile, win: HeatWindow): boolean {
  return tile.r0 === win.r0 && tile.c0 === win.c0 && tile.r1 - tile.r0 === win.n && tile.c1 - tile.c0 === win.n;
}

/** Block of n over [lo, hi) (blockStart's split) holding token x, or -1 outside [lo, hi). */
function blockOfToken(x: number, n: number, lo: number, hi: number): number {
  if (x < lo || x >= hi) return -1;
  let b = Math.min(n - 1, Math.floor(((x - lo) * n) / (hi - lo)));
  while (b + 1 < n && blockStart(b + 1, n, lo, hi) <= x) b++;
  while (b > 0 && blockStart(b, n, lo, hi) > x) b--;
  return b;
}

/** values (the tile's cells as drawn, pr × pc) resampled onto win: m × m cells, m = min(win.n,
 *  TILE_CELLS), each the value of the tile cell holding its middle token, NaN outside the tile
 *  (drawn as masked). A frame drawn at once on a zoom or pan, before the window's own tile. */
export function previewValues(values: Float32Array, tl: Tile, win: HeatWindow): { m: number; values: Float32Array } {
  const m = Math.min(win.n, TILE_CELLS), step = win.n / m;
  const col = new Int32Array(m);
  for (let j = 0; j < m; j++) col[j] = blockOfToken(Math.floor(win.c0 + (j + 0.5) * step), tl.pc, tl.c0, tl.c1);
  const out = new Float32Array(m * m);
  for (let i = 0; i < m; i++) {
    const bi = blockOfToken(Math.floor(win.r0 + (i + 0.5) * step), tl.pr, tl.r0, tl.r1);
    for (let j = 0; j < m; j++) out[i * m + j] = bi < 0 || col[j] < 0 ? NaN : values[bi * tl.pc + col[j]];
  }
  return { m, values: out };
}

/** Whether token labels fit: a cell is one token and at least LABEL_PX wide. */
export function labelsFit(tile: Tile, size: number): boolean {
  return fullResolution(tile) && size / (tile.r1 - tile.r0) >= LABEL_PX;
}

/** Axis labels: every token once a cell holds one and is LABEL_PX wide, else token positions as ticks. */
function drawAxes(p: Painter, o: LongMapOptions, tl: Tile, L: LongLayout): void {
  const span = tl.r1 - tl.r0, px = o.size / span;
  if (labelsFit(tl, o.size)) {
    const font = Math.max(9, Math.min(12, Math.floor(px) - 1));
    for (let i = tl.r0; i < tl.r1; i++)
      p.text(L.left - 4, L.top + (i - tl.r0 + 0.5) * px, `${label(o.tokens[i])} ${i}`, { align: 'right', size: font, color: '#222' });
    for (let j = tl.c0; j < tl.c1; j++)
      p.text(L.left + (j - tl.c0 + 0.5) * px, L.top - 4, `${label(o.tokens[j])} ${j}`, { align: 'left', size: font, color: '#444', rotate: -90 });
    return;
  }
  const raw = span / 8, mag = 10 ** Math.floor(Math.log10(Math.max(1, raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  for (let v = Math.ceil(tl.r0 / step) * step; v < tl.r1; v += step) {
    const y = L.top + (v - tl.r0) * px;
    p.line(L.left - 5, y, L.left, y, '#666', 1, 1);
    p.text(L.left - 8, y, String(v), { align: 'right', size: 10, color: '#444' });
  }
  for (let v = Math.ceil(tl.c0 / step) * step; v < tl.c1; v += step) {
    const x = L.left + (v - tl.c0) * px;
    p.line(x, L.top - 5, x, L.top, '#666', 1, 1);
    p.text(x, L.top - 8, String(v), { align: 'left', size: 10, color: '#444', rotate: -90 });
  }
}

export function drawLongMap(p: Painter, o: LongMapOptions): void {
  const L = longLayout(o.size), tl = o.tile;
  p.text(4, 12, t('long.title', { layer: o.layer, head: o.head, T: o.T }), { size: 12, color: '#333' });
  if (!tl) {
    p.strokeRect(L.left, L.top, o.size, o.size, '#999', 1);
    return;
  }
  const w = o.win;
  if (w && !tileFits(tl, w)) {
    /* the window's own tile is on its way: the tile drawn resampled onto the window */
    const pv = previewValues(cellValues(o, tl), tl, w);
    const at = { ...tl, r0: w.r0, r1: w.r0 + w.n, c0: w.c0, c1: w.c0 + w.n, pr: pv.m, pc: pv.m };
    p.text(4, 28, t('heat.window', { r0: at.r0, r1: at.r1 - 1, c0: at.c0, c1: at.c1 - 1, T: o.T }) + ' · …', { size: 11, color: '#666' });
    p.matrix(L.left, L.top, o.size, o.size, { cols: pv.m, rows: pv.m, values: pv.values, color: maskedHeat(o.heat) });
    p.strokeRect(L.left, L.top, o.size, o.size, '#999', 1);
    drawAxes(p, o, at, L);
    drawLongLegend(p, L.left + o.size + 24, L.top, Math.min(o.size, 220), o.heat, o.scale);
    return;
  }
  const what = fullResolution(tl) ? t('long.cells') : t(o.op === 'max' ? 'long.pooledMax' : 'long.pooledMean', { b: Math.ceil((tl.r1 - tl.r0) / tl.pr) });
  p.text(4, 28, t('heat.window', { r0: tl.r0, r1: tl.r1 - 1, c0: tl.c0, c1: tl.c1 - 1, T: o.T }) + ` · ${what}`, { size: 11, color: '#666' });
  p.matrix(L.left, L.top, o.size, o.size, { cols: tl.pc, rows: tl.pr, values: cellValues(o, tl), color: maskedHeat(o.heat) });
  p.strokeRect(L.left, L.top, o.size, o.size, '#999', 1);
  drawAxes(p, o, tl, L);
  if (o.cursor) {
    const cw = o.size / tl.pc, ch = o.size / tl.pr;
    p.strokeRect(L.left + o.cursor.bj * cw, L.top + o.cursor.bi * ch, Math.max(2, cw), Math.max(2, ch), '#d62728', 1.5);
  }
  drawLongLegend(p, L.left + o.size + 24, L.top, Math.min(o.size, 220), o.heat, o.scale);
  if (o.block) {
    const y = L.top + Math.min(o.size, 220) + 24;
    const [r, g, b] = MASKED_RGB;
    p.rect(L.left + o.size + 24, y, 14, 14, `rgb(${r},${g},${b})`);
    p.text(L.left + o.size + 42, y + 7, t('heat.masked'), { size: 10, color: '#444' });
  }
}

/** A vertical colour bar from weight 1 (top) down to 0 (linear) or LOG_MIN (log), with ticks. */
function drawLongLegend(p: Painter, x: number, y: number, h: number, heat: (v: number) => [number, number, number], scale: LongScale): void {
  const steps = 64;
  const bar = new Float32Array(steps);
  for (let k = 0; k < steps; k++) bar[k] = 1 - k / (steps - 1);
  p.text(x, y - 10, t(scale === 'log' ? 'long.weightLog' : 'heat.weight'), { size: 11, color: '#333' });
  p.matrix(x, y, 14, h, { cols: 1, rows: steps, values: bar, color: heat });
  p.strokeRect(x, y, 14, h, '#999', 1);
  const ticks = scale === 'lin' ? [0, 0.25, 0.5, 0.75, 1] : [1e-8, 1e-6, 1e-4, 1e-2, 1];
  for (const v of ticks) {
    const ty = y + (1 - scaled(v, scale)) * h;
    p.line(x + 14, ty, x + 18, ty, '#666', 1, 1);
    p.text(x + 21, ty, scale === 'lin' ? v.toFixed(2) : v === 1 ? '1' : v.toExponential(0), { size: 10, color: '#444' });
  }
}
