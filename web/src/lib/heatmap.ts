// heatmap.ts — the model view's large heat map of one head's (T, T) attention: a square
// window of it (zoom and pan), row labels (queries) on the left and column labels (keys)
// rotated above, thinned to every k-th token when cells are smaller than a label, a
// colour legend, and the cell under the pointer outlined. Masked cells (a later key of a
// causal model, a key outside a sliding window) are grey and hatched, so they never read
// as weight 0. Drawing goes through a Painter; the view keeps the window and the pointer.
import type { Token } from '../api/types';
import { label } from './headview';
import { t } from './i18n';
import { MASKED_RGB, maskedHeat } from './grid';
import type { Painter } from './painter';

/** The visible window: rows r0 .. r0 + n - 1 (queries) and columns c0 .. c0 + n - 1 (keys). */
export interface HeatWindow {
  r0: number;
  c0: number;
  n: number;
}

export interface HeatMapOptions {
  tokens: Token[];
  T: number;
  att: Float32Array; // (T, T) of this head, rows = queries
  layer: number;
  head: number;
  heat: (v: number) => [number, number, number];
  size: number; // side of the matrix in px
  win: HeatWindow;
  /** the cell under the pointer (query, key), outlined, or null */
  cursor: { query: number; key: number } | null;
  /** whether query i cannot see key j (lib/block.ts isMasked), or null: nothing masked */
  masked?: ((i: number, j: number) => boolean) | null;
  /** the line above the matrix; default: the head's (heat.title) */
  title?: string;
}

/** Cells at least this wide (px) get a hatch line besides the grey. */
const HATCH_PX = 5;

/** Smallest spacing (px) between two drawn labels. */
const LABEL_PX = 12;
const LEGEND_W = 64;

export interface HeatLayout {
  left: number;
  top: number;
  cell: number; // px per token in the window
  /** labels are drawn for every step-th token of the window */
  step: number;
  font: number;
  width: number;
  height: number;
}

export function heatLayout(o: Pick<HeatMapOptions, 'size' | 'win'>): HeatLayout {
  const left = 116;
  const top = 116;
  const cell = o.size / o.win.n;
  const step = Math.max(1, Math.ceil(LABEL_PX / cell));
  const font = step === 1 ? Math.max(9, Math.min(12, Math.floor(cell) - 1)) : 10;
  return { left, top, cell, step, font, width: left + o.size + 16 + LEGEND_W, height: top + o.size + 10 };
}

/** The whole matrix, or the window clamped into [0, T). */
export function clampWindow(w: HeatWindow, T: number): HeatWindow {
  const n = Math.max(Math.min(T, 4), Math.min(T, Math.round(w.n)));
  const clamp = (v: number): number => Math.max(0, Math.min(T - n, Math.round(v)));
  return { r0: clamp(w.r0), c0: clamp(w.c0), n };
}

/** The window zoomed by factor f (> 1 zooms in) keeping the token at (fx, fy) — fractions
 *  of the window, 0.5 = centre — under the same point. */
export function zoomWindow(w: HeatWindow, T: number, f: number, fx = 0.5, fy = 0.5): HeatWindow {
  const n = Math.max(Math.min(T, 4), Math.min(T, Math.round(w.n / f)));
  return clampWindow({ r0: w.r0 + fy * w.n - fy * n, c0: w.c0 + fx * w.n - fx * n, n }, T);
}

/** Tokens whose labels are drawn on one axis of the window (every step-th, from a multiple of step). */
export function labelledTokens(start: number, n: number, step: number): number[] {
  const out: number[] = [];
  for (let i = Math.ceil(start / step) * step; i < start + n; i += step) out.push(i);
  return out;
}

/** The (query, key) cell under (x, y), or null outside the matrix. */
export function hitHeat(o: Pick<HeatMapOptions, 'size' | 'win'>, x: number, y: number): { query: number; key: number } | null {
  const L = heatLayout(o);
  const c = Math.floor((x - L.left) / L.cell);
  const r = Math.floor((y - L.top) / L.cell);
  if (c < 0 || r < 0 || c >= o.win.n || r >= o.win.n) return null;
  return { query: o.win.r0 + r, key: o.win.c0 + c };
}

export function drawHeatMap(p: Painter, o: HeatMapOptions): void {
  const L = heatLayout(o);
  const { r0, c0, n } = o.win;
  const T = o.T;
  const zoomed = n < T;
  p.text(4, 12, o.title ?? t('heat.title', { layer: o.layer, head: o.head }), { size: 12, color: '#333' });
  if (zoomed) p.text(4, 28, t('heat.window', { r0, r1: r0 + n - 1, c0, c1: c0 + n - 1, T }), { size: 11, color: '#666' });
  const sub = new Float32Array(n * n);
  for (let r = 0; r < n; r++) sub.set(o.att.subarray((r0 + r) * T + c0, (r0 + r) * T + c0 + n), r * n);
  const hatch: number[] = [];
  if (o.masked)
    for (let r = 0; r < n; r++)
      for (let c = 0; c < n; c++) {
        if (!o.masked(r0 + r, c0 + c)) continue;
        sub[r * n + c] = NaN;
        if (L.cell >= HATCH_PX) {
          const x = L.left + c * L.cell;
          const y = L.top + r * L.cell;
          hatch.push(x, y + L.cell, x + L.cell, y);
        }
      }
  p.matrix(L.left, L.top, o.size, o.size, { cols: n, rows: n, values: sub, color: maskedHeat(o.heat) });
  if (hatch.length) p.lines(hatch, hatch.length / 4, '#8a8a8a', 1, 1);
  p.strokeRect(L.left, L.top, o.size, o.size, '#999', 1);
  for (const i of labelledTokens(r0, n, L.step))
    p.text(L.left - 4, L.top + (i - r0 + 0.5) * L.cell, label(o.tokens[i]), { align: 'right', size: L.font, color: '#222' });
  for (const j of labelledTokens(c0, n, L.step))
    p.text(L.left + (j - c0 + 0.5) * L.cell, L.top - 4, label(o.tokens[j]), { align: 'left', size: L.font, color: '#444', rotate: -90 });
  if (o.cursor) {
    const { query, key } = o.cursor;
    if (query >= r0 && query < r0 + n && key >= c0 && key < c0 + n)
      p.strokeRect(L.left + (key - c0) * L.cell, L.top + (query - r0) * L.cell, Math.max(2, L.cell), Math.max(2, L.cell), '#d62728', 1.5);
  }
  drawHeatLegend(p, L.left + o.size + 16, L.top, Math.min(o.size, 200), o.heat);
  if (o.masked) {
    const y = L.top + Math.min(o.size, 200) + 24;
    const [r, g, b] = MASKED_RGB;
    p.rect(L.left + o.size + 16, y, 14, 14, `rgb(${r},${g},${b})`);
    p.line(L.left + o.size + 16, y + 14, L.left + o.size + 30, y, '#8a8a8a', 1, 1);
    p.text(L.left + o.size + 34, y + 7, t('heat.masked'), { size: 10, color: '#444' });
  }
}

/** A vertical colour bar from weight 1 (top) to 0 (bottom) with ticks. */
function drawHeatLegend(p: Painter, x: number, y: number, h: number, heat: (v: number) => [number, number, number]): void {
  const steps = 64;
  const bar = new Float32Array(steps);
  for (let k = 0; k < steps; k++) bar[k] = 1 - k / (steps - 1);
  p.text(x, y - 10, t('heat.weight'), { size: 11, color: '#333' });
  p.matrix(x, y, 14, h, { cols: 1, rows: steps, values: bar, color: heat });
  p.strokeRect(x, y, 14, h, '#999', 1);
  for (const v of [0, 0.25, 0.5, 0.75, 1]) {
    const ty = y + (1 - v) * h;
    p.line(x + 14, ty, x + 18, ty, '#666', 1, 1);
    p.text(x + 21, ty, v.toFixed(2), { size: 10, color: '#444' });
  }
}
