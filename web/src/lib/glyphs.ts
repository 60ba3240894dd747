// glyphs.ts — the head overview (Dodrio, Wang et al. 2021, sec. 3.2 "attention head
// overview"): every layer x head as one glyph. Hue from syntactic - semantic (semantic
// red, syntactic blue), lightness from the larger of the two, radius from importance;
// heads can be sorted within each layer and filtered (dimmed). When the glyphs are
// large, a mini drawing of the head's attention on the selected sentence (each query's
// strongest key) is drawn inside. The glyphs can instead be coloured by pattern label or
// by one of the decoder scores (induction probe, previous token, first-token sink mass),
// or by one of the attribution columns (gradient head importance, normalised per layer;
// norm-weighted over raw sink mass, diverging around 1; ALTI share, relative to the
// run's largest), and sorted by those. Drawing goes through a Painter; D3 only for scales.
import { scaleSqrt } from 'd3-scale';
import type { HeadColumns, PatternLabel } from '../api/dbtypes';
import { t, tName } from './i18n';
import type { Painter } from './painter';
import { shapes } from './shapes';

export type SortKey = 'index' | 'importance' | 'semantic' | 'syntactic' | 'pattern' | ScoreKey | AttrKey;
/** Per-head scores that read as "how much of this head is the pattern" (0..1). */
export type ScoreKey = 'induction' | 'prev' | 'sink';
/** The attribution columns (docs/analysis.md): head_importance, norm_sink_ratio,
 *  alti_contribution; null where the run has none. */
export type AttrKey = 'headImp' | 'sinkRatio' | 'alti';
/** What the glyph colour shows: Dodrio's semantic / syntactic hue, the pattern label, or one score. */
export type ColorKey = 'scores' | 'pattern' | ScoreKey | AttrKey;

/** Fill of a head without the value shown (null in the database). */
export const NO_VALUE_COLOR = '#e0e0e0';

/** A ratio around 1 as a diverging ramp in log2: orange below 1 (the norm-weighted sink
 *  mass is smaller: the sink attention moves little), blue above, white at 1; 1/2 and 2 saturate. */
export function ratioColor(v: number): string {
  const t = Math.max(-1, Math.min(1, Math.log2(Math.max(v, 1e-9))));
  return `hsl(${t < 0 ? 28 : 212}, 75%, ${(94 - 52 * Math.abs(t)).toFixed(1)}%)`;
}

/** One colour per pattern label (categorical; the legend names them). */
export const PATTERN_COLORS: Record<PatternLabel, string> = {
  induction: '#d62728', sink: '#7f3fbf', 'previous-word': '#1f77b4', 'next-word': '#17becf', self: '#8c564b',
  'delimiter-focused': '#e377c2', broad: '#bcbd22', other: '#c7c7c7',
};

/** A score in [0, 1] as a teal ramp, light (0) to dark (1). */
export function scoreColor(v: number): string {
  return `hsl(175, 65%, ${(92 - 62 * Math.max(0, Math.min(1, v))).toFixed(1)}%)`;
}

/** The glyph colour of a head: hue from d = syntactic - semantic in [-1, 1], going from
 * red (semantic) through purple to blue (syntactic); lightness from max(semantic, syntactic). */
export function glyphColor(semantic: number, syntactic: number): string {
  return hueLight(syntactic - semantic, Math.max(semantic, syntactic));
}

/** d = syntactic - semantic in [-1, 1]; strength in [0, 1] (darker = stronger). */
function hueLight(d: number, strength: number): string {
  const t = (Math.max(-1, Math.min(1, d)) + 1) / 2; // 0 = semantic, 1 = syntactic
  const hue = (360 - 145 * t) % 360; // 360 (red) -> 287 (purple) -> 215 (blue)
  const light = 90 - 55 * Math.max(0, Math.min(1, strength));
  return `hsl(${hue.toFixed(1)}, 75%, ${light.toFixed(1)}%)`;
}

export interface HeadRecord {
  layer: number;
  head: number;
  importance: number;
  semantic: number; // 0 when unknown
  syntactic: number;
  pattern: PatternLabel | null;
  /** induction probe score (causal models; 0 when not probed) */
  induction: number;
  /** mean attention to the previous token */
  prev: number;
  /** mean attention to the first token (the sink mass; 0 when unknown) */
  sink: number;
  /** gradient head importance (Michel et al. 2019), raw */
  headImp: number | null;
  /** the same divided by the l2 norm of its layer's: the colour */
  headImpNorm: number | null;
  /** norm-weighted over raw sink mass (Kobayashi et al. 2020) */
  sinkRatio: number | null;
  /** ALTI share of the head in its block's output (Ferrando et al. 2022) */
  alti: number | null;
  /** alti over the run's largest alti: the colour */
  altiRel: number | null;
}

export function headRecords(c: HeadColumns, L: number, H: number): HeadRecord[] {
  const out: HeadRecord[] = [];
  const altiMax = Math.max(0, ...c.alti_contribution.map((v) => v ?? 0));
  for (let l = 0; l < L; l++)
    for (let h = 0; h < H; h++) {
      const i = l * H + h;
      out.push({
        layer: l,
        head: h,
        importance: c.importance[i] ?? 0,
        semantic: c.semantic[i] ?? 0,
        syntactic: c.syntactic[i] ?? 0,
        pattern: c.pattern[i],
        induction: c.induction[i] ?? 0,
        prev: c.prev[i] ?? 0,
        sink: c.first[i] ?? 0,
        headImp: c.head_importance[i],
        headImpNorm: c.head_importance_norm[i],
        sinkRatio: c.norm_sink_ratio[i],
        alti: c.alti_contribution[i],
        altiRel: c.alti_contribution[i] === null ? null : altiMax > 0 ? c.alti_contribution[i]! / altiMax : 0,
      });
    }
  return out;
}

export interface OverviewFilter {
  pattern: PatternLabel | 'all';
  /** heads whose sort score is below this are dimmed (0 = none) */
  minScore: number;
  score: 'importance' | 'semantic' | 'syntactic';
}

export interface OverviewOptions {
  heads: HeadRecord[];
  L: number;
  H: number;
  cell: number;
  sort: SortKey;
  filter: OverviewFilter;
  selected: { layer: number; head: number } | null;
  /** the glyph colour (default 'scores': Dodrio's hue) */
  color?: ColorKey;
  /** (T, T) attention of a head on the selected sentence, or null (drawn when cell >= 48) */
  mini: ((layer: number, head: number) => Float32Array | null) | null;
  T: number;
  title?: string;
  /** the title's colour (the comparison view's model colour) */
  titleColor?: string;
}

export interface OverviewLayout {
  left: number;
  top: number;
  cell: number;
  width: number;
  height: number;
}

export function overviewLayout(o: { L: number; H: number; cell: number; title?: string }): OverviewLayout {
  const left = 44;
  const top = o.title ? 40 : 26;
  /* wide enough for the title too (bold 12 px sans: < 7.5 px per character) */
  const titleW = o.title ? left + Math.ceil(o.title.length * 7.5) : 0;
  return { left, top, cell: o.cell, width: Math.max(left + o.H * o.cell + 10, titleW + 10), height: top + o.L * o.cell + 10 };
}

const PATTERN_ORDER: Record<string, number> = {
  induction: 0, sink: 1, 'delimiter-focused': 2, broad: 3, 'next-word': 4, 'previous-word': 5, self: 6, other: 7,
};

/** The fill of head r's glyph under colour key k. */
export function headColor(r: HeadRecord, k: ColorKey = 'scores'): string {
  if (k === 'scores') return glyphColor(r.semantic, r.syntactic);
  if (k === 'pattern') return PATTERN_COLORS[r.pattern ?? 'other'];
  if (k === 'headImp') return r.headImpNorm === null ? NO_VALUE_COLOR : scoreColor(r.headImpNorm);
  if (k === 'sinkRatio') return r.sinkRatio === null ? NO_VALUE_COLOR : ratioColor(r.sinkRatio);
  if (k === 'alti') return r.altiRel === null ? NO_VALUE_COLOR : scoreColor(r.altiRel);
  return scoreColor(r[k]);
}

/** Heads of each layer in display order (columns). */
export function arrange(o: Pick<OverviewOptions, 'heads' | 'L' | 'H' | 'sort'>): HeadRecord[][] {
  const rows: HeadRecord[][] = [];
  for (let l = 0; l < o.L; l++) {
    const row = o.heads.filter((r) => r.layer === l);
    if (o.sort === 'pattern')
      row.sort((a, b) => (PATTERN_ORDER[a.pattern ?? 'other'] ?? 9) - (PATTERN_ORDER[b.pattern ?? 'other'] ?? 9) || a.head - b.head);
    else if (o.sort !== 'index') {
      const k = o.sort;
      row.sort((a, b) => (b[k] ?? -Infinity) - (a[k] ?? -Infinity) || a.head - b.head);
    }
    rows.push(row);
  }
  return rows;
}

export function passes(r: HeadRecord, f: OverviewFilter): boolean {
  if (f.pattern !== 'all' && r.pattern !== f.pattern) return false;
  return r[f.score] >= f.minScore;
}

function miniLinks(p: Painter, a: Float32Array, T: number, x: number, y: number, s: number): void {
  const seg = new Float32Array(4 * T);
  let n = 0;
  for (let i = 0; i < T; i++) {
    let best = 0;
    for (let j = 1; j < T; j++) if (a[i * T + j] > a[i * T + best]) best = j;
    seg[4 * n] = x + s * 0.2;
    seg[4 * n + 1] = y + s * (0.15 + (0.7 * (i + 0.5)) / T);
    seg[4 * n + 2] = x + s * 0.8;
    seg[4 * n + 3] = y + s * (0.15 + (0.7 * (best + 0.5)) / T);
    n++;
  }
  p.lines(seg, n, '#222', 0.55, 1);
}

/** Colours of the two compared models (A, B): green and amber, away from the glyph hues
 *  (red semantic, purple, blue syntactic), so that a colour means one thing everywhere. */
export const MODEL_COLORS: readonly [string, string] = ['#1b7837', '#9c6500'];

/** Height of the strip under each glyph that holds its head label (0 when no label). */
function labelStrip(o: Pick<OverviewOptions, 'sort' | 'cell'>): number {
  return o.sort !== 'index' || o.cell >= 40 ? 11 : 0;
}

/** The glyph radius range for a cell: it stays above the label strip. */
export function radiusRange(o: Pick<OverviewOptions, 'sort' | 'cell'>): [number, number] {
  const free = (o.cell - labelStrip(o)) / 2 - 1;
  return [Math.min(o.cell * 0.14, free * 0.5), Math.min(o.cell * 0.46, free)];
}

export function drawOverview(p: Painter, o: OverviewOptions): void {
  const G = overviewLayout(o);
  const sp = shapes(p);
  const imps = o.heads.map((r) => r.importance);
  const lo = Math.min(...imps, 1);
  const hi = Math.max(...imps, 0);
  const lab = labelStrip(o);
  const radius = scaleSqrt()
    .domain([lo, hi > lo ? hi : lo + 1e-9])
    .range(radiusRange(o))
    .clamp(true);
  if (o.title) p.text(G.left, 9, o.title, { size: 12, weight: 'bold', color: o.titleColor });
  const rows = arrange(o);
  rows.forEach((row, l) => {
    const y = G.top + l * o.cell;
    p.text(G.left - 8, y + o.cell / 2, `L${l}`, { align: 'right', size: 11, color: '#555' });
    row.forEach((r, c) => {
      const x = G.left + c * o.cell;
      const ok = passes(r, o.filter);
      const sel = o.selected && o.selected.layer === r.layer && o.selected.head === r.head;
      sp.circle(x + o.cell / 2, y + (o.cell - lab) / 2, radius(r.importance), ok ? headColor(r, o.color) : '#ccc', ok ? 1 : 0.35, ok ? '#666' : undefined);
      const a = o.mini && o.cell >= 48 ? o.mini(r.layer, r.head) : null;
      if (a && ok) miniLinks(p, a, o.T, x + lab / 2, y, o.cell - lab);
      if (lab)
        p.text(x + o.cell / 2, y + o.cell - 5, `${r.head}`, { align: 'center', size: 9, color: ok ? '#333' : '#aaa' });
      if (sel) p.strokeRect(x + 1, y + 1, o.cell - 2, o.cell - 2, '#111', 2);
    });
  });
  if (o.sort === 'index') for (let h = 0; h < o.H; h++) p.text(G.left + (h + 0.5) * o.cell, G.top - 8, `H${h}`, { align: 'center', size: 10, color: '#555' });
}

export function hitOverview(o: OverviewOptions, x: number, y: number): HeadRecord | null {
  const G = overviewLayout(o);
  const c = Math.floor((x - G.left) / o.cell);
  const l = Math.floor((y - G.top) / o.cell);
  if (c < 0 || l < 0 || c >= o.H || l >= o.L) return null;
  return arrange(o)[l][c] ?? null;
}

/** Size of the legend drawn by drawLegend. */
export const LEGEND_W = 150;
export const LEGEND_H = 150;

/** The legend of the colour key: Dodrio's hue x lightness ('scores'), the pattern
 *  labels present, or a score ramp; then the radius (importance) at the smallest and
 *  largest size drawn for this cell. */
export function drawLegend(p: Painter, x: number, y: number, o: Pick<OverviewOptions, 'sort' | 'cell' | 'color' | 'heads'> = { sort: 'index', cell: 40, heads: [] }): void {
  const k = o.color ?? 'scores';
  if (k === 'scores') drawHueLegend(p, x, y);
  else if (k === 'pattern') drawPatternLegend(p, x, y, [...new Set(o.heads.map((r) => r.pattern ?? 'other'))]);
  else if (k === 'sinkRatio') drawRatioLegend(p, x, y);
  else if (k === 'headImp' || k === 'alti') drawAttrLegend(p, x, y, k, o.heads);
  else drawScoreLegend(p, x, y, k);
  const [r0, r1] = radiusRange(o);
  const R = Math.min(r1, 18);
  const cy = y + 84 + R;
  const sp = shapes(p);
  sp.circle(x + r0 + 1, cy, r0, '#bbb', 1, '#666');
  sp.circle(x + 2 * r0 + 12 + R, cy, R, '#bbb', 1, '#666');
  p.text(x + 2 * r0 + 2 * R + 18, cy - 6, t('legend.radius'), { size: 10, color: '#333' });
  p.text(x + 2 * r0 + 2 * R + 18, cy + 6, t('common.importance'), { size: 10, color: '#333' });
}

function drawHueLegend(p: Painter, x: number, y: number): void {
  const steps = 9;
  const cw = 10;
  const rows = [0.15, 0.5, 0.85];
  p.text(x, y + 4, t('legend.hue'), { size: 10, color: '#333' });
  rows.forEach((str, k) => {
    for (let i = 0; i < steps; i++) p.rect(x + i * cw, y + 12 + k * 11, cw, 11, hueLight(-1 + (2 * i) / (steps - 1), str));
  });
  p.text(x + steps * cw + 4, y + 17, t('legend.weak'), { size: 10, color: '#555' });
  p.text(x + steps * cw + 4, y + 39, t('legend.strong'), { size: 10, color: '#555' });
  p.text(x, y + 54, t('common.semantic'), { size: 10, color: '#b22' });
  p.text(x + steps * cw, y + 54, t('common.syntactic'), { size: 10, color: '#225', align: 'right' });
  p.text(x, y + 70, t('legend.darker'), { size: 10, color: '#333' });
}

/** Swatches of the labels present, in the pattern sort order (two columns, at most 8). */
function drawPatternLegend(p: Painter, x: number, y: number, labels: PatternLabel[]): void {
  labels.sort((a, b) => (PATTERN_ORDER[a] ?? 9) - (PATTERN_ORDER[b] ?? 9));
  labels.slice(0, 8).forEach((lab, i) => {
    const cx = x + (i % 2) * 75;
    const cy = y + Math.floor(i / 2) * 16;
    p.rect(cx, cy, 10, 10, PATTERN_COLORS[lab]);
    p.text(cx + 14, cy + 5, tName('pattern', lab), { size: 10, color: '#333' });
  });
}

function drawScoreLegend(p: Painter, x: number, y: number, k: ScoreKey): void {
  const steps = 9;
  const cw = 12;
  p.text(x, y + 4, t(SCORE_MESSAGES[k]), { size: 10, color: '#333' });
  for (let i = 0; i < steps; i++) p.rect(x + i * cw, y + 12, cw, 12, scoreColor(i / (steps - 1)));
  p.text(x, y + 34, '0', { size: 10, color: '#555' });
  p.text(x + steps * cw, y + 34, '1', { size: 10, color: '#555', align: 'right' });
}

/** The ramp of head importance (per-layer normalised, 0..1) or ALTI share (0 .. the run's largest). */
function drawAttrLegend(p: Painter, x: number, y: number, k: 'headImp' | 'alti', heads: HeadRecord[]): void {
  const steps = 9;
  const cw = 12;
  const hi = k === 'alti' ? Math.max(0, ...heads.map((r) => r.alti ?? 0)) : 1;
  p.text(x, y + 4, t(ATTR_MESSAGES[k]), { size: 10, color: '#333' });
  for (let i = 0; i < steps; i++) p.rect(x + i * cw, y + 12, cw, 12, scoreColor(i / (steps - 1)));
  p.text(x, y + 34, '0', { size: 10, color: '#555' });
  p.text(x + steps * cw, y + 34, hi.toFixed(k === 'alti' ? 3 : 0), { size: 10, color: '#555', align: 'right' });
  p.text(x, y + 50, t(k === 'alti' ? 'legend.alti' : 'legend.headImp'), { size: 10, color: '#333' });
  p.rect(x, y + 60, 10, 10, NO_VALUE_COLOR);
  p.text(x + 14, y + 65, t('legend.noValue'), { size: 10, color: '#555' });
}

/** The diverging ramp of the sink ratio: 1/2, 1, 2. */
function drawRatioLegend(p: Painter, x: number, y: number): void {
  const steps = 9;
  const cw = 12;
  p.text(x, y + 4, t(ATTR_MESSAGES.sinkRatio), { size: 10, color: '#333' });
  for (let i = 0; i < steps; i++) p.rect(x + i * cw, y + 12, cw, 12, ratioColor(2 ** (-1 + (2 * i) / (steps - 1))));
  p.text(x, y + 34, '½', { size: 10, color: '#555' });
  p.text(x + (steps * cw) / 2, y + 34, '1', { size: 10, color: '#555', align: 'center' });
  p.text(x + steps * cw, y + 34, '2', { size: 10, color: '#555', align: 'right' });
  p.text(x, y + 50, t('legend.sinkRatio'), { size: 10, color: '#333' });
  p.rect(x, y + 60, 10, 10, NO_VALUE_COLOR);
  p.text(x + 14, y + 65, t('legend.noValue'), { size: 10, color: '#555' });
}

/** The message naming each score (sort and colour menus, legend). */
export const SCORE_MESSAGES = { induction: 'common.induction', prev: 'common.prevToken', sink: 'common.sink' } as const;
/** The message naming each attribution column (sort and colour menus, legend, comparison). */
export const ATTR_MESSAGES = { headImp: 'common.headImportance', sinkRatio: 'common.sinkRatio', alti: 'common.altiShare' } as const;
