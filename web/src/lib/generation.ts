// generation.ts — drawing for the generation view: the layer × head grid of thumbnails,
// each the current step's attention row as bars, one per key: over the context (self-
// attention; the prompt / generated boundary as a line) or over an encoder-decoder model's
// source (cross-attention); the selected head boxed. Pure functions of a typed options
// object through a Painter; hit testing of the grid.
import { crossRow, stepRow, type Generation } from '../api/generate';
import { t } from './i18n';
import type { Painter } from './painter';

export interface GenGridLayout {
  cellW: number;
  cellH: number;
  left: number; // width of the layer labels
  top: number; // height of the head labels
  width: number;
  height: number;
}

export function genGridLayout(layers: number, heads: number): GenGridLayout {
  const cellW = heads > 12 ? 64 : 96;
  const cellH = 40;
  const left = 40;
  const top = 18;
  return { cellW, cellH, left, top, width: left + heads * cellW + 4, height: top + layers * cellH + 4 };
}

export interface GenGridOptions {
  gen: Generation;
  step: number;
  layer: number; // selected
  head: number;
  cross: boolean; // the cross-attention rows over the source instead of the context's
}

/** The grid: cell (l, h) shows row (step, l, h) as bars scaled to the row's largest weight. */
export function drawGenGrid(p: Painter, o: GenGridOptions): void {
  const { gen, step } = o;
  const L = genGridLayout(gen.layers, gen.heads);
  const cross = o.cross && !!gen.cross;
  const K = cross ? gen.Ts : gen.meta.prompt_length + step;
  const P = cross ? K : gen.meta.prompt_length; // keys before P blue, the rest orange
  for (let h = 0; h < gen.heads; h++) p.text(L.left + h * L.cellW + L.cellW / 2, 9, `H${h}`, { align: 'center', size: 10, color: '#666' });
  for (let l = 0; l < gen.layers; l++) {
    const y0 = L.top + l * L.cellH;
    p.text(L.left - 6, y0 + L.cellH / 2, t('gen.layerShort', { l }), { align: 'right', size: 10, color: '#666' });
    for (let h = 0; h < gen.heads; h++) {
      const x0 = L.left + h * L.cellW;
      const row = cross ? crossRow(gen, step, l, h) : stepRow(gen, step, l, h);
      let mx = 0;
      for (let k = 0; k < K; k++) mx = Math.max(mx, row[k]);
      p.rect(x0 + 1, y0 + 1, L.cellW - 2, L.cellH - 2, '#f4f4f4');
      const bw = (L.cellW - 6) / K;
      for (let k = 0; k < K; k++) {
        const bh = mx > 0 ? (row[k] / mx) * (L.cellH - 8) : 0;
        p.rect(x0 + 3 + k * bw, y0 + L.cellH - 4 - bh, Math.max(0.5, bw - (bw > 3 ? 1 : 0)), bh, k < P ? '#2563eb' : '#c2410c');
      }
      const bx = x0 + 3 + P * bw;
      if (step > 0 && !cross) p.rect(bx - 0.5, y0 + 3, 1, L.cellH - 6, '#111', 0.6);
      if (l === o.layer && h === o.head) {
        p.rect(x0, y0, L.cellW, 2, '#111');
        p.rect(x0, y0 + L.cellH - 2, L.cellW, 2, '#111');
        p.rect(x0, y0, 2, L.cellH, '#111');
        p.rect(x0 + L.cellW - 2, y0, 2, L.cellH, '#111');
      }
    }
  }
}

/** The grid cell under (x, y), or null. */
export function hitGenGrid(layers: number, heads: number, x: number, y: number): { layer: number; head: number } | null {
  const L = genGridLayout(layers, heads);
  const h = Math.floor((x - L.left) / L.cellW);
  const l = Math.floor((y - L.top) / L.cellH);
  return h >= 0 && h < heads && l >= 0 && l < layers ? { layer: l, head: h } : null;
}

/** The background of a context token shown with weight w of a row whose largest is mx:
 *  blue with opacity w / mx (so the strongest key is full colour). */
export function weightBackground(w: number, mx: number): string {
  const a = mx > 0 ? Math.max(0, Math.min(1, w / mx)) : 0;
  return `rgba(37, 99, 235, ${a.toFixed(3)})`;
}
