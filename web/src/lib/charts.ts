// charts.ts — small charts of the Dodrio views, drawn through a Painter with D3 scales:
// accuracy by layer for one relation (both directions, with their baselines), bar
// charts (pattern statistics, ablation), and overlaid histograms of a score for two
// models (model comparison).
import { scaleLinear } from 'd3-scale';
import type { Relation } from '../api/dbtypes';
import { t } from './i18n';
import type { Painter } from './painter';
import { shapes } from './shapes';

export const DIR_COLORS = ['#1f77b4', '#ff7f0e'];

export function layerChartSize(L: number): { width: number; height: number } {
  return { width: Math.max(260, 60 + L * 28), height: 190 };
}

function axes(p: Painter, x0: number, y0: number, x1: number, y1: number, ticks: number[], y: (v: number) => number): void {
  p.line(x0, y0, x0, y1, '#999', 1, 1);
  p.line(x0, y0, x1, y0, '#999', 1, 1);
  for (const t of ticks) p.text(x0 - 4, y(t), t.toFixed(1), { align: 'right', size: 10, color: '#666' });
}

export function drawLayerChart(p: Painter, o: { rel: Relation; L: number }): void {
  const { width, height } = layerChartSize(o.L);
  const x = scaleLinear().domain([0, Math.max(1, o.L - 1)]).range([44, width - 14]);
  const y = scaleLinear().domain([0, 1]).range([height - 40, 14]);
  axes(p, 44, height - 40, width - 14, 14, [0, 0.5, 1], y);
  for (let l = 0; l < o.L; l++) p.text(x(l), height - 30, `${l}`, { align: 'center', size: 10, color: '#666' });
  p.text((width + 44) / 2, height - 14, t('chart.layer'), { align: 'center', size: 10, color: '#666' });
  const sp = shapes(p);
  o.rel.dirs.forEach((d) => {
    const c = DIR_COLORS[d.dir];
    const bl = y(d.baseline);
    for (let xx = 44; xx < width - 14; xx += 8) p.line(xx, bl, Math.min(xx + 4, width - 14), bl, '#999', 0.9, 1);
    const pts: number[] = [];
    d.by_layer.forEach((v, l) => pts.push(x(l), y(v)));
    sp.polyline(pts, c, 1, 2);
    d.by_layer.forEach((v, l) => sp.circle(x(l), y(v), 3, c));
    p.text(width - 14, 10 + 12 * d.dir, t(d.dir === 0 ? 'common.depToParent' : 'common.parentToDep'), { align: 'right', size: 10, color: c });
  });
}

export interface Bar {
  label: string;
  value: number | null;
  /** a reference mark (e.g. a pattern threshold), or undefined */
  mark?: number;
  highlight?: boolean;
}

export function barsSize(n: number): { width: number; height: number } {
  return { width: 340, height: 14 + n * 20 };
}

/** Horizontal bars in [0, max]. */
export function drawBars(p: Painter, bars: Bar[], max = 1, x0 = 0, y0 = 0): void {
  const { width } = barsSize(bars.length);
  const x = scaleLinear().domain([0, max]).range([110, width - 50]).clamp(true);
  bars.forEach((b, i) => {
    const yy = y0 + 8 + i * 20;
    p.text(x0 + 104, yy + 7, b.label, { align: 'right', size: 11, color: '#333' });
    p.rect(x0 + 110, yy, x(max) - 110, 14, '#f1f1f1');
    if (b.value !== null) {
      p.rect(x0 + 110, yy, x(b.value) - 110, 14, b.highlight ? '#d62728' : '#6b8fc7');
      p.text(x0 + x(max) + 6, yy + 7, b.value.toFixed(3), { size: 10, color: '#333' });
    } else p.text(x0 + x(max) + 6, yy + 7, t('common.notApplicable'), { size: 10, color: '#999' });
    if (b.mark !== undefined) p.line(x0 + x(b.mark), yy - 2, x0 + x(b.mark), yy + 16, '#222', 1, 1.5);
  });
}

export interface HistSeries {
  name: string;
  color: string;
  values: number[];
}

export const HIST_W = 300;
export const HIST_H = 150;

/** Overlaid histograms (10 bins over [0, 1]) of one score for several models. */
export function drawHist(p: Painter, title: string, series: HistSeries[], x0 = 0, y0 = 0): void {
  const bins = 10;
  const counts = series.map((s) => {
    const c = new Array<number>(bins).fill(0);
    for (const v of s.values) c[Math.max(0, Math.min(bins - 1, Math.floor(v * bins)))]++;
    return c.map((n) => (s.values.length ? n / s.values.length : 0));
  });
  const top = Math.max(0.05, ...counts.flat());
  const x = scaleLinear().domain([0, 1]).range([x0 + 40, x0 + HIST_W - 10]);
  const y = scaleLinear().domain([0, top]).range([y0 + HIST_H - 26, y0 + 20]);
  p.text(x0 + 40, y0 + 8, title, { size: 11, weight: 'bold' });
  axes(p, x0 + 40, y0 + HIST_H - 26, x0 + HIST_W - 10, y0 + 20, [0, top], y);
  for (const t of [0, 0.5, 1]) p.text(x(t), y0 + HIST_H - 14, t.toFixed(1), { align: 'center', size: 10, color: '#666' });
  const bw = (x(1) - x(0)) / bins / series.length;
  counts.forEach((c, k) => {
    c.forEach((v, b) => {
      const xx = x(b / bins) + k * bw;
      p.rect(xx, y(v), bw - 1, y(0) - y(v), series[k].color, 0.8);
    });
    p.text(x0 + HIST_W - 10, y0 + 8 + 12 * k, series[k].name, { align: 'right', size: 10, color: series[k].color });
  });
}
