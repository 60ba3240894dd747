// headview.ts — draws the head view (bertviz style): query tokens on the left, key
// tokens on the right, one line per kept link coloured by head with opacity ~ weight.
// Hovering a token keeps only its links and shows per-head weight bars on the other
// side. Rows outside [scrollTop, scrollTop + viewHeight) are skipped (virtualised
// columns), so long inputs stay cheap. Drawing goes through a Painter. The key column
// may differ from the query column (cross-attention: decoder tokens on the left, the
// source's on the right; K keys per row).
import type { Token } from '../api/types';
import { headColor } from './colors';
import { t } from './i18n';
import { LINK_LEVELS, linkAlpha, linkLevel, linksByKey, type HeadLinks } from './links';
import type { Painter } from './painter';

export interface HeadHover {
  side: 'left' | 'right';
  token: number;
}

export interface HeadLayout {
  rowH: number;
  top: number;
  labelW: number;
  leftX: number; // right edge of left labels
  lineX1: number;
  lineX2: number;
  rightX: number; // left edge of right labels
  barsX: number;
  width: number;
  height: number; // full height of all rows
}

/** The layout of T query rows and K key rows (K = T unless cross-attention). */
export function headLayout(T: number, nHeads: number, K = T): HeadLayout {
  T = Math.max(T, K);
  const rowH = T > 160 ? 14 : 20;
  const labelW = 120;
  const top = 28;
  const leftX = nHeads * 14 + 8 + labelW + 8; // room for per-head bars on the left
  const lineX1 = leftX + 6;
  const lineX2 = lineX1 + 260;
  const rightX = lineX2 + 6;
  const barsX = rightX + labelW + 4;
  return { rowH, top, labelW, leftX, lineX1, lineX2, rightX, barsX, width: barsX + nHeads * 14 + 8, height: top + T * rowH + 8 };
}

export interface HeadViewOptions {
  tokens: Token[];
  T: number;
  /** keys per row and their tokens (cross-attention: the source's); T and tokens when absent */
  K?: number;
  keyTokens?: Token[];
  att: Float32Array; // (H, T, K) of the layer
  links: HeadLinks[]; // of the visible heads
  /** the weight of (head, query, key) when att does not hold the layer: a long run's rows,
   *  fetched by window (lib/longhead.ts); att is then unused */
  weight?: (h: number, q: number, k: number) => number;
  nHeads: number; // all heads of the layer (fixes the layout, so toggling heads does not move it)
  hover: HeadHover | null;
  selected: number; // pinned query token or -1
  layer: number;
  scrollTop: number;
  viewHeight: number;
}

export function label(t: Token): string {
  return shortLabel(t.special ? t.piece : t.text || t.piece);
}

/** A token's text cut to 18 characters for a label. */
export function shortLabel(s: string): string {
  return s.length > 18 ? `${s.slice(0, 17)}…` : s;
}

const BAR_W = 12; // width of one head's weight bar

/** The token whose links alone are drawn: the hovered one, else the pinned query. */
function focusOf(o: Pick<HeadViewOptions, 'hover' | 'selected'>): HeadHover | null {
  return o.hover ?? (o.selected >= 0 ? { side: 'left', token: o.selected } : null);
}

/** Indices of the links of one head that are drawn: the focus token's (through the query
 *  or key index), or null for all of them. */
function focusLinks(hl: HeadLinks, T: number, f: HeadHover | null): Int32Array | null {
  if (!f) return null;
  if (f.side === 'left') {
    const out = new Int32Array(hl.rowStart[f.token + 1] - hl.rowStart[f.token]);
    for (let m = 0; m < out.length; m++) out[m] = hl.rowStart[f.token] + m;
    return out;
  }
  const k = linksByKey(hl, T);
  return k.keyIdx.subarray(k.keyStart[f.token], k.keyStart[f.token + 1]);
}

/** The lowest opacity a link is drawn with, so that weak links still show (bertviz-like). */
const FAINT = 1 / 32;

/** One path per head and opacity level (alpha ~ weight, lib/links.ts); links with both ends
 *  above or both below the visible rows are skipped. Links under 1/256 (level 0) are drawn
 *  only for the hovered or pinned token: for the whole layer they would not show at their
 *  opacity, and at 512 tokens they can be most of the layer's 3 million links. */
function drawLinks(p: Painter, o: HeadViewOptions, L: HeadLayout, cy: (i: number) => number): void {
  const seg = new Float32Array(4 * 4096);
  const f = focusOf(o);
  for (const hl of o.links) {
    const color = headColor(hl.head);
    const only = focusLinks(hl, o.K ?? o.T, f);
    for (let lv = only ? 0 : 1; lv < LINK_LEVELS; lv++) {
      let n = 0;
      const alpha = Math.max(FAINT, linkAlpha(lv));
      const a = only ? 0 : hl.levelStart[lv];
      const b = only ? only.length : hl.levelStart[lv + 1];
      for (let q = a; q < b; q++) {
        const k = only ? only[q] : hl.levelIdx[q];
        if (only && linkLevel(hl.w[k]) !== lv) continue;
        const ya = cy(hl.i[k]);
        const yb = cy(hl.j[k]);
        if ((ya < 0 && yb < 0) || (ya > o.viewHeight && yb > o.viewHeight)) continue;
        seg[4 * n] = L.lineX1;
        seg[4 * n + 1] = ya;
        seg[4 * n + 2] = L.lineX2;
        seg[4 * n + 3] = yb;
        if (++n === 4096) {
          p.lines(seg, n, color, alpha, 2);
          n = 0;
        }
      }
      p.lines(seg, n, color, alpha, 2);
    }
  }
}

/** A link or a weight bar under the pointer, with its weight. */
export interface LinkHit {
  head: number;
  query: number;
  key: number;
  w: number;
}

/** The drawn link nearest to (x, y) within 4 px (vertically), the strongest on ties; null
 *  outside the links' band or when more than maxLinks links would have to be checked. */
export function hitLink(o: HeadViewOptions, x: number, y: number, maxLinks = 300_000): LinkHit | null {
  const L = headLayout(o.T, o.nHeads, o.K);
  if (x < L.lineX1 || x > L.lineX2) return null;
  const t = (x - L.lineX1) / (L.lineX2 - L.lineX1);
  const cy = (i: number): number => L.top + i * L.rowH + L.rowH / 2 - o.scrollTop;
  const f = focusOf(o);
  /* the drawn links: the focus token's, else those of level 1 and up */
  const sets = o.links.map((hl) => ({ hl, only: focusLinks(hl, o.K ?? o.T, f) ?? hl.levelIdx.subarray(hl.levelStart[1]) }));
  if (sets.reduce((s, e) => s + e.only.length, 0) > maxLinks) return null;
  let best: LinkHit | null = null;
  let bd = 4;
  for (const { hl, only } of sets) {
    for (let q = 0; q < only.length; q++) {
      const k = only[q];
      const ya = cy(hl.i[k]);
      const d = Math.abs(ya + (cy(hl.j[k]) - ya) * t - y);
      if (d < bd || (d === bd && best && hl.w[k] > best.w)) {
        bd = d;
        best = { head: hl.head, query: hl.i[k], key: hl.j[k], w: hl.w[k] };
      }
    }
  }
  return best;
}

/** The per-head weight bar under (x, y), when a token is focused (hovered or pinned). */
export function hitBar(o: HeadViewOptions, x: number, y: number): LinkHit | null {
  const f = focusOf(o);
  if (!f) return null;
  const L = headLayout(o.T, o.nHeads, o.K);
  const K = o.K ?? o.T;
  const i = Math.floor((y + o.scrollTop - L.top) / L.rowH);
  if (i < 0 || i >= (f.side === 'left' ? K : o.T)) return null;
  const x0 = f.side === 'left' ? L.barsX : 4;
  const h = Math.floor((x - x0) / (BAR_W + 2));
  if (h < 0 || h >= o.nHeads || x - x0 - h * (BAR_W + 2) > BAR_W || !o.links.some((hl) => hl.head === h)) return null;
  const query = f.side === 'left' ? f.token : i;
  const key = f.side === 'left' ? i : f.token;
  return { head: h, query, key, w: o.weight ? o.weight(h, query, key) : o.att[h * o.T * K + query * K + key] };
}

export function drawHeadView(p: Painter, o: HeadViewOptions): void {
  const L = headLayout(o.T, o.nHeads, o.K);
  const K = o.K ?? o.T;
  const keyTokens = o.keyTokens ?? o.tokens;
  const y0 = o.scrollTop;
  const y1 = o.scrollTop + o.viewHeight;
  const cy = (i: number): number => L.top + i * L.rowH + L.rowH / 2 - y0;
  p.text(L.leftX, 12 - y0, t('head.drawQueries', { layer: o.layer }), { align: 'right', size: 11, color: '#666' });
  p.text(L.rightX, 12 - y0, t('head.drawKeys'), { size: 11, color: '#666' });
  const first = Math.max(0, Math.floor((y0 - L.top) / L.rowH));
  const last = Math.min(Math.max(o.T, K) - 1, Math.ceil((y1 - L.top) / L.rowH));
  const hov = o.hover;
  const focusLeft = hov?.side === 'left' ? hov.token : o.selected;
  const fs = L.rowH > 16 ? 13 : 10;
  const color = (t: Token): string => (t.segment === 1 ? '#7a3d9a' : '#222');
  for (let i = first; i <= last; i++) {
    const y = cy(i);
    const hl = (hov?.side === 'right' && hov.token === i) || false;
    if (i < o.T) {
      const t = o.tokens[i];
      if (focusLeft === i) p.rect(L.leftX - L.labelW, y - L.rowH / 2, L.labelW + 2, L.rowH, '#fde68a', 0.8);
      p.text(L.leftX, y, label(t), { align: 'right', size: fs, color: color(t), weight: focusLeft === i ? 'bold' : 'normal' });
    }
    if (i < K) {
      const t = keyTokens[i];
      if (hl) p.rect(L.rightX - 2, y - L.rowH / 2, L.labelW + 4, L.rowH, '#fde68a', 0.8);
      p.text(L.rightX, y, label(t), { size: fs, color: color(t), weight: hl ? 'bold' : 'normal' });
    }
  }
  drawLinks(p, o, L, cy);
  // Per-head weights on the other side of the hovered (or pinned) token.
  const focus = focusOf(o);
  if (!focus) return;
  const T = o.T;
  const bw = BAR_W;
  for (const hl of o.links) {
    const x = focus.side === 'left' ? L.barsX + hl.head * (bw + 2) : 4 + hl.head * (bw + 2);
    p.text(x + bw / 2, 22 - y0, `${hl.head}`, { align: 'center', size: 9, color: headColor(hl.head) });
  }
  for (let i = first; i <= Math.min(last, (focus.side === 'left' ? K : T) - 1); i++) {
    const y = cy(i);
    o.links.forEach((hl) => {
      const h = hl.head;
      const k = h;
      const w = o.weight
        ? o.weight(h, focus.side === 'left' ? focus.token : i, focus.side === 'left' ? i : focus.token)
        : focus.side === 'left'
          ? o.att[h * T * K + focus.token * K + i] : o.att[h * T * K + i * K + focus.token];
      const x = focus.side === 'left' ? L.barsX + k * (bw + 2) : 4 + k * (bw + 2);
      const bh = Math.max(0, Math.min(1, w)) * (L.rowH - 4);
      p.rect(x, y + L.rowH / 2 - 2 - bh, bw, bh, headColor(h), 0.9);
    });
  }
}

/** Which token (and side) is under (x, y) in canvas coordinates; K keys (T when absent). */
export function hitHeadView(T: number, nHeads: number, scrollTop: number, x: number, y: number, K = T): HeadHover | null {
  const L = headLayout(T, nHeads, K);
  const i = Math.floor((y + scrollTop - L.top) / L.rowH);
  if (i < 0) return null;
  if (i < T && x >= L.leftX - L.labelW && x <= L.leftX + 4) return { side: 'left', token: i };
  if (i < K && x >= L.rightX - 4 && x <= L.rightX + L.labelW) return { side: 'right', token: i };
  return null;
}
