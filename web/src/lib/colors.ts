// colors.ts — the explorer's colour scales (D3): one distinct colour per head, a
// sequential scale for attention heat maps and a diverging blue (+) / orange (-)
// scale for the neuron view.
import { scaleLinear, scaleSequential } from 'd3-scale';
import { interpolateBlues, schemeTableau10, schemeSet3 } from 'd3-scale-chromatic';

const HEAD_COLORS: readonly string[] = [...schemeTableau10, ...schemeSet3];

/** A distinct colour for head h (cycles after 22). */
export function headColor(h: number): string {
  return HEAD_COLORS[h % HEAD_COLORS.length];
}

function parseRgb(s: string): [number, number, number] {
  const m = /rgb\((\d+),\s*(\d+),\s*(\d+)\)/.exec(s);
  if (m) return [+m[1], +m[2], +m[3]];
  const hex = /^#([0-9a-f]{6})$/i.exec(s);
  if (hex) {
    const v = parseInt(hex[1], 16);
    return [(v >> 16) & 255, (v >> 8) & 255, v & 255];
  }
  return [0, 0, 0];
}

/** Attention in [0, 1] -> rgb (white to dark blue), as a lookup over 256 steps. */
export function heatColor(): (v: number) => [number, number, number] {
  const s = scaleSequential(interpolateBlues).domain([0, 1]);
  const lut: [number, number, number][] = [];
  for (let i = 0; i < 256; i++) lut.push(parseRgb(s(i / 255)));
  return (v: number) => lut[Math.max(0, Math.min(255, Math.round(v * 255))) | 0];
}

export const POSITIVE = '#1f77b4';
export const NEGATIVE = '#ff7f0e';

export interface DivergingScale {
  max: number;
  /** value -> css colour; blue for positive, orange for negative, white at 0 */
  color: (v: number) => string;
  rgb: (v: number) => [number, number, number];
}

/** Diverging scale symmetric around 0 with |v| <= max mapped to full intensity. */
export function diverging(max: number): DivergingScale {
  const m = max > 0 ? max : 1;
  const pos = scaleLinear<string>().domain([0, m]).range(['#ffffff', POSITIVE]).clamp(true);
  const neg = scaleLinear<string>().domain([0, m]).range(['#ffffff', NEGATIVE]).clamp(true);
  const color = (v: number): string => (v >= 0 ? pos(v) : neg(-v));
  return { max: m, color, rgb: (v: number) => parseRgb(color(v)) };
}
