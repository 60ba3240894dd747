// colors.ts — the explorer's colour scales (D3): one distinct colour per head (each with
// at least 3:1 WCAG contrast on the white page, for up to 32 heads), a
// sequential scale for attention heat maps and a diverging blue (+) / orange (-)
// scale for the neuron view.
import { scaleLinear, scaleSequential } from 'd3-scale';
import { interpolateBlues, schemeTableau10 } from 'd3-scale-chromatic';

/** WCAG 2.1 relative luminance of an sRGB colour (W3C, "relative luminance"). */
export function luminance([r, g, b]: [number, number, number]): number {
  const ch = (v: number): number => {
    const c = v / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  };
  return 0.2126 * ch(r) + 0.7152 * ch(g) + 0.0722 * ch(b);
}

/** WCAG 2.1 contrast ratio (L1 + 0.05) / (L2 + 0.05) of two colours. */
export function contrast(a: string, b: string): number {
  const la = luminance(parseRgb(a));
  const lb = luminance(parseRgb(b));
  return (Math.max(la, lb) + 0.05) / (Math.min(la, lb) + 0.05);
}

/** The page background that head colours are checked against. */
export const PAGE_BACKGROUND = '#ffffff';
/** Head colours keep at least this contrast with the page background (WCAG 1.4.11, 3:1). */
export const MIN_HEAD_CONTRAST = 3.2;

const hex = ([r, g, b]: [number, number, number]): string =>
  `#${[r, g, b].map((v) => Math.round(Math.max(0, Math.min(255, v))).toString(16).padStart(2, '0')).join('')}`;

/** hsl (h in degrees, s and l in [0, 1]) -> rgb 0..255 (CSS Color 4, "HSL to RGB"). */
function hslRgb(h: number, s: number, l: number): [number, number, number] {
  const f = (n: number): number => {
    const k = (n + h / 30) % 12;
    return 255 * (l - s * Math.min(l, 1 - l) * Math.max(-1, Math.min(k - 3, 9 - k, 1)));
  };
  return [f(0), f(8), f(4)];
}

/** Scales c towards black (keeping its hue) until it has MIN_HEAD_CONTRAST against the page. */
function legible(c: [number, number, number]): string {
  let rgb = c;
  while (contrast(hex(rgb), PAGE_BACKGROUND) < MIN_HEAD_CONTRAST) rgb = [rgb[0] * 0.95, rgb[1] * 0.95, rgb[2] * 0.95];
  return hex(rgb);
}

/** 32 head colours: Tableau 10 for heads 0-9, then hues 137.5° apart (the golden angle)
 *  at alternating lightness; every one is darkened until it reaches 3.2:1 on white. */
const HEAD_COLORS: readonly string[] = (() => {
  const out = schemeTableau10.map((c) => legible(parseRgb(c)));
  for (let i = 0; out.length < 32; i++) out.push(legible(hslRgb((20 + i * 137.508) % 360, 0.7, i % 2 ? 0.32 : 0.45)));
  return out;
})();

/** A distinct colour for head h (cycles after 32), legible on the page background. */
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
