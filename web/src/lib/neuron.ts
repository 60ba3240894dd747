// neuron.ts — the neuron view's numbers and drawing: for a query token i of one
// head, each key j's vector k_j, the element-wise product q_i × k_j, the score
// q_i · k_j / √d (Vaswani et al. 2017, eq. 1; the engine's captured value, with the
// mask added) and the softmax over keys (the engine's captured attention). Dimensions
// can be ordered by their contribution q_i[d]·k_j[d] to a chosen key's score. For a
// rotary model, two more columns give each score's content s_pre and position Δ
// (lib/rope.ts), so an exported figure carries the decomposition too. Cross-attention's
// keys are another sequence's (K source tokens, keyTokens) than its queries'.
import type { Token } from '../api/types';
import { diverging, type DivergingScale } from './colors';
import { label } from './headview';
import { signed } from './rope';
import { t } from './i18n';
import type { Painter } from './painter';

export const MASKED = -1e30; // scores below this are masked positions

export interface NeuronInput {
  T: number;
  /** keys (cross-attention: the source's tokens); T when absent */
  K?: number;
  Dh: number;
  q: Float32Array; // (T, Dh)
  k: Float32Array; // (K, Dh)
  scores: Float32Array; // (T, K) engine's q.k * scale + mask
  attention: Float32Array; // (T, K) engine's softmax
  scale: number; // the model's factor on q.k: 1/sqrt(Dh), or e.g. 1/(sqrt(Dh)(layer+1)) for Mistral's GPT-2
}

/** How the score is formed, for labels: "q·k / √d = q·k / 2.828", or the model's own
 *  factor when it is not 1/√d (GPT-2 with scale_attn_weights false or
 *  scale_attn_by_inverse_layer_idx). */
export function scoreFormula(Dh: number, scale: number): string {
  const sq = Math.sqrt(Dh);
  if (Math.abs(scale * sq - 1) < 1e-5) return `q·k / √d = q·k / ${sq.toFixed(3)}`;
  return t('neuron.ownScale', { s: scale.toPrecision(4), r: (1 / sq).toPrecision(4) });
}

export interface NeuronRows {
  query: number;
  keys: number[]; // key rows shown, in display order
  order: number[]; // dimension order (length Dh)
  top: Set<number>; // dimensions highlighted for the focus key
  focusKey: number;
  nTop: number;
  qk: Float32Array; // (K) q.k * scale recomputed here (check against scores)
}

/** Dimensions sorted by contribution q[d]·k_j[d] to key j's score, largest first. */
export function contributionOrder(d: NeuronInput, i: number, j: number): number[] {
  const order = Array.from({ length: d.Dh }, (_, x) => x);
  const c = (x: number): number => d.q[i * d.Dh + x] * d.k[j * d.Dh + x];
  return order.sort((a, b) => c(b) - c(a));
}

/** The fewest dimensions whose positive contributions reach half of the positive total. */
export function topDims(d: NeuronInput, i: number, j: number): Set<number> {
  const order = contributionOrder(d, i, j);
  let pos = 0;
  for (const x of order) pos += Math.max(0, d.q[i * d.Dh + x] * d.k[j * d.Dh + x]);
  const out = new Set<number>();
  let acc = 0;
  for (const x of order) {
    const v = d.q[i * d.Dh + x] * d.k[j * d.Dh + x];
    if (v <= 0 || acc >= pos / 2) break;
    acc += v;
    out.add(x);
  }
  return out;
}

/** The dimensions of q_i·k_j taken by decreasing |q_d k_d| until their signed sum first
 *  reaches 90% of q·k: the set whose size is the analysis's concentration count
 *  (docs/analysis.md "Why: concentration"; analysis/heads.c hd_concentration). When
 *  q·k <= 0 (the count is undefined there), the fewest dims holding half the positive part. */
export function concentrationDims(d: NeuronInput, i: number, j: number): number[] {
  const c = (x: number): number => d.q[i * d.Dh + x] * d.k[j * d.Dh + x];
  let tot = 0;
  for (let x = 0; x < d.Dh; x++) tot += c(x);
  if (!(tot > 0)) return [...topDims(d, i, j)];
  const order = Array.from({ length: d.Dh }, (_, x) => x).sort((a, b) => Math.abs(c(b)) - Math.abs(c(a)));
  const out: number[] = [];
  let part = 0;
  for (const x of order) {
    part += c(x);
    out.push(x);
    if (part >= 0.9 * tot) break;
  }
  return out;
}

/** The head's dominant link on this input: the (query, key) pair of the largest attention weight. */
export function dominantLink(d: NeuronInput): { query: number; key: number; weight: number } {
  let best = { query: 0, key: 0, weight: -1 };
  const K = d.K ?? d.T;
  for (let i = 0; i < d.T; i++)
    for (let j = 0; j < K; j++) {
      const w = d.attention[i * K + j];
      if (w > best.weight) best = { query: i, key: j, weight: w };
    }
  return best;
}

export function neuronRows(d: NeuronInput, query: number, focusKey: number, sortDims: boolean, maxKeys: number): NeuronRows {
  const { Dh } = d;
  const T = d.K ?? d.T; /* keys */
  const qk = new Float32Array(T);
  for (let j = 0; j < T; j++) {
    let s = 0;
    for (let x = 0; x < Dh; x++) s += d.q[query * Dh + x] * d.k[j * Dh + x];
    qk[j] = s * d.scale;
  }
  let keys = Array.from({ length: T }, (_, j) => j);
  if (maxKeys > 0 && T > maxKeys) {
    keys = keys
      .sort((a, b) => d.attention[query * T + b] - d.attention[query * T + a])
      .slice(0, maxKeys)
      .sort((a, b) => a - b);
  }
  const fk = focusKey >= 0 && focusKey < T ? focusKey : keys.reduce((a, b) => (d.attention[query * T + b] > d.attention[query * T + a] ? b : a), keys[0]);
  const order = sortDims ? contributionOrder(d, query, fk) : Array.from({ length: Dh }, (_, x) => x);
  const top = topDims(d, query, fk);
  return { query, keys, order, top, focusKey: fk, nTop: top.size, qk };
}

export interface NeuronLayout {
  rowH: number;
  cw: number;
  labelW: number;
  kX: number;
  pX: number;
  sX: number;
  aX: number;
  top: number;
  width: number;
  height: number;
}

export function neuronLayout(Dh: number, nKeys: number, rope = false): NeuronLayout {
  const rowH = 18;
  const cw = Math.max(3, Math.min(14, Math.floor(360 / Dh)));
  const labelW = 110;
  const kX = labelW + 10;
  const colW = Math.max(Dh * cw, 170); /* at least a legend's width (small heads, e.g. Dh = 8) */
  const pX = kX + colW + 24;
  const sX = pX + colW + 24;
  const aX = sX + 110;
  const top = 112;
  return { rowH, cw, labelW, kX, pX, sX, aX, top, width: aX + 120 + (rope ? 250 : 0), height: top + (nKeys + 1) * rowH + 10 };
}

export interface NeuronDrawOptions {
  d: NeuronInput;
  rows: NeuronRows;
  tokens: Token[]; // the queries' (the row drawn)
  /** the keys' tokens (cross-attention: the source's); tokens when absent */
  keyTokens?: Token[];
  layer: number;
  head: number;
  /** dimensions to mark (e.g. a head's dominant dims from the pattern view), or null */
  marked?: ReadonlySet<number> | null;
  /** a rotary model's decomposition of the query's scores (lib/rope.ts), or null */
  rope?: { sPre: ArrayLike<number>; delta: ArrayLike<number>; masked: (j: number) => boolean } | null;
}

export const MARK_COLOR = '#9333ea'; // marked dimensions: purple, distinct from the blue/orange scale

export function fmt(v: number): string {
  if (v <= MASKED) return 'masked';
  return v.toFixed(4);
}

function legend(p: Painter, x: number, y: number, s: DivergingScale, title: string): void {
  p.text(x, y - 10, title, { size: 11, color: '#444' });
  const w = 160;
  for (let k = 0; k < w; k++) p.rect(x + k, y, 1.2, 10, s.color(((k / (w - 1)) * 2 - 1) * s.max));
  p.text(x, y + 20, `−${s.max.toPrecision(3)}`, { size: 10, color: '#444' });
  p.text(x + w / 2, y + 20, '0', { size: 10, color: '#444', align: 'center' });
  p.text(x + w, y + 20, `+${s.max.toPrecision(3)}`, { size: 10, color: '#444', align: 'right' });
}

export function drawNeuron(p: Painter, o: NeuronDrawOptions): void {
  const { d, rows } = o;
  const { Dh } = d;
  const T = d.K ?? d.T; /* keys per row */
  const keyTokens = o.keyTokens ?? o.tokens;
  const L = neuronLayout(Dh, rows.keys.length, !!o.rope);
  const i = rows.query;
  const rX = L.aX + 120;
  let vmax = 0;
  let pmax = 0;
  for (let x = 0; x < Dh; x++) vmax = Math.max(vmax, Math.abs(d.q[i * Dh + x]));
  for (const j of rows.keys)
    for (let x = 0; x < Dh; x++) {
      vmax = Math.max(vmax, Math.abs(d.k[j * Dh + x]));
      pmax = Math.max(pmax, Math.abs(d.q[i * Dh + x] * d.k[j * Dh + x]));
    }
  const vs = diverging(vmax);
  const ps = diverging(pmax);
  p.text(4, 12, t('neuron.title', { layer: o.layer, head: o.head, tok: label(o.tokens[i]), i, d: Dh }), { size: 13, weight: 'bold' });
  p.text(4, 30, t('neuron.subtitle', { formula: scoreFormula(Dh, d.scale) }), { size: 11, color: '#444' });
  legend(p, L.kX, 58, vs, t('neuron.legendQk'));
  legend(p, L.pX, 58, ps, t('neuron.legendProduct'));
  // header row: q vector above the k column, its dims in display order
  const hy = L.top;
  p.text(L.kX - 6, hy + L.rowH / 2, t('neuron.qRow', { tok: label(o.tokens[i]) }), { align: 'right', size: 12, weight: 'bold' });
  rows.order.forEach((x, c) => p.rect(L.kX + c * L.cw, hy + 2, L.cw - 1, L.rowH - 4, vs.color(d.q[i * Dh + x])));
  p.text(L.pX, hy - 10, t('neuron.halfDims', { n: rows.nTop, Dh, tok: label(keyTokens[rows.focusKey]) }), { size: 10, color: '#444' });
  p.text(L.sX, hy + L.rowH / 2, 'q·k/√d', { size: 11, weight: 'bold' });
  p.text(L.aX, hy + L.rowH / 2, 'softmax', { size: 11, weight: 'bold' });
  if (o.rope) {
    p.text(rX, hy + L.rowH / 2, 's_pre', { size: 11, weight: 'bold' });
    p.text(rX + 80, hy + L.rowH / 2, 'Δ pos', { size: 11, weight: 'bold' });
    p.text(rX, hy - 10, t('neuron.ropeColumns'), { size: 10, color: '#444' });
  }
  if (o.marked?.size) {
    // marked dims: a bar above q's column and below q × k's, and an outline around the q cell
    p.text(L.kX, hy - 22, t('neuron.markedDraw', { dims: [...o.marked].sort((a, b) => a - b).join(', ') }), { size: 10, color: MARK_COLOR });
    rows.order.forEach((x, c) => {
      if (!o.marked?.has(x)) return;
      p.rect(L.kX + c * L.cw, hy - 8, L.cw - 1, 6, MARK_COLOR);
      p.rect(L.pX + c * L.cw, L.top + (rows.keys.length + 1) * L.rowH + 2, L.cw - 1, 6, MARK_COLOR);
      p.strokeRect(L.kX + c * L.cw, hy + 1, L.cw - 1, L.rowH - 2, MARK_COLOR, 2);
    });
  }
  rows.keys.forEach((j, r) => {
    const y = L.top + (r + 1) * L.rowH;
    const focus = j === rows.focusKey;
    if (focus) p.rect(0, y, L.width, L.rowH, '#fde68a', 0.5);
    p.text(L.kX - 6, y + L.rowH / 2, label(keyTokens[j]), { align: 'right', size: 12, weight: focus ? 'bold' : 'normal' });
    rows.order.forEach((x, c) => {
      const kv = d.k[j * Dh + x];
      p.rect(L.kX + c * L.cw, y + 2, L.cw - 1, L.rowH - 4, vs.color(kv));
      p.rect(L.pX + c * L.cw, y + 2, L.cw - 1, L.rowH - 4, ps.color(d.q[i * Dh + x] * kv));
      if (focus && rows.top.has(x)) p.strokeRect(L.pX + c * L.cw, y + 1, L.cw - 1, L.rowH - 2, '#111', 1);
    });
    const s = d.scores[i * T + j];
    const a = d.attention[i * T + j];
    p.text(L.sX, y + L.rowH / 2, fmt(s), { size: 11, font: 'ui-monospace, monospace', color: s < 0 ? '#b35806' : '#1f4e79' });
    p.rect(L.aX, y + 3, Math.max(0, a) * 60, L.rowH - 6, '#1f77b4', 0.7);
    p.text(L.aX + 64, y + L.rowH / 2, a.toFixed(4), { size: 11, font: 'ui-monospace, monospace' });
    if (o.rope) {
      const m = o.rope.masked(j);
      const sp = o.rope.sPre[j];
      const dl = o.rope.delta[j];
      p.text(rX, y + L.rowH / 2, m ? '—' : sp.toFixed(3), { size: 11, font: 'ui-monospace, monospace', color: sp < 0 ? '#b35806' : '#1f4e79' });
      p.text(rX + 80, y + L.rowH / 2, m ? '—' : signed(dl, 3), { size: 11, font: 'ui-monospace, monospace', color: '#7e22ce' });
    }
  });
}

/** Key row under canvas y, or -1. */
export function hitNeuronRow(rows: NeuronRows, Dh: number, y: number): number {
  const L = neuronLayout(Dh, rows.keys.length); /* rows do not depend on the extra columns */
  const r = Math.floor((y - L.top) / L.rowH) - 1;
  return r >= 0 && r < rows.keys.length ? rows.keys[r] : -1;
}
