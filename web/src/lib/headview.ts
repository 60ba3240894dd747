// headview.ts — draws the head view (bertviz style): query tokens on the left, key
// tokens on the right, one line per kept link coloured by head with opacity = weight.
// Hovering a token keeps only its links and shows per-head weight bars on the other
// side. Rows outside [scrollTop, scrollTop + viewHeight) are skipped (virtualised
// columns), so long inputs stay cheap. Drawing goes through a Painter.
import type { Token } from '../api/types';
import { headColor } from './colors';
import type { HeadLinks } from './links';
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

export function headLayout(T: number, nHeads: number): HeadLayout {
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
  att: Float32Array; // (H, T, T) of the layer
  links: HeadLinks[]; // of the visible heads
  nHeads: number; // all heads of the layer (fixes the layout, so toggling heads does not move it)
  hover: HeadHover | null;
  selected: number; // pinned query token or -1
  layer: number;
  scrollTop: number;
  viewHeight: number;
}

export function label(t: Token): string {
  const s = t.special ? t.piece : t.text || t.piece;
  return s.length > 18 ? `${s.slice(0, 17)}…` : s;
}

const LEVELS = 16; // opacity buckets: one path per head and bucket

export function drawHeadView(p: Painter, o: HeadViewOptions): void {
  const L = headLayout(o.T, o.nHeads);
  const y0 = o.scrollTop;
  const y1 = o.scrollTop + o.viewHeight;
  const cy = (i: number): number => L.top + i * L.rowH + L.rowH / 2 - y0;
  p.text(L.leftX, 12 - y0, `layer ${o.layer} · queries`, { align: 'right', size: 11, color: '#666' });
  p.text(L.rightX, 12 - y0, 'keys', { size: 11, color: '#666' });
  const first = Math.max(0, Math.floor((y0 - L.top) / L.rowH));
  const last = Math.min(o.T - 1, Math.ceil((y1 - L.top) / L.rowH));
  const hov = o.hover;
  const focusLeft = hov?.side === 'left' ? hov.token : o.selected;
  for (let i = first; i <= last; i++) {
    const t = o.tokens[i];
    const y = cy(i);
    const color = t.segment === 1 ? '#7a3d9a' : '#222';
    const hl = (hov?.side === 'right' && hov.token === i) || false;
    if (focusLeft === i) p.rect(L.leftX - L.labelW, y - L.rowH / 2, L.labelW + 2, L.rowH, '#fde68a', 0.8);
    if (hl) p.rect(L.rightX - 2, y - L.rowH / 2, L.labelW + 4, L.rowH, '#fde68a', 0.8);
    const fs = L.rowH > 16 ? 13 : 10;
    p.text(L.leftX, y, label(t), { align: 'right', size: fs, color, weight: focusLeft === i ? 'bold' : 'normal' });
    p.text(L.rightX, y, label(t), { size: fs, color, weight: hl ? 'bold' : 'normal' });
  }
  const seg = new Float32Array(4 * 4096);
  for (const hl of o.links) {
    const color = headColor(hl.head);
    for (let lv = 0; lv < LEVELS; lv++) {
      let n = 0;
      const lo = lv / LEVELS;
      const hi = (lv + 1) / LEVELS;
      for (let k = 0; k < hl.n; k++) {
        const w = hl.w[k];
        if (w < lo || (w >= hi && lv < LEVELS - 1)) continue;
        const i = hl.i[k];
        const j = hl.j[k];
        if (hov && ((hov.side === 'left' && i !== hov.token) || (hov.side === 'right' && j !== hov.token))) continue;
        if (!hov && o.selected >= 0 && i !== o.selected) continue;
        const ya = cy(i);
        const yb = cy(j);
        if ((ya < 0 && yb < 0) || (ya > o.viewHeight && yb > o.viewHeight)) continue;
        seg[4 * n] = L.lineX1;
        seg[4 * n + 1] = ya;
        seg[4 * n + 2] = L.lineX2;
        seg[4 * n + 3] = yb;
        if (++n === 4096) {
          p.lines(seg, n, color, (lo + hi) / 2, 2);
          n = 0;
        }
      }
      p.lines(seg, n, color, (lo + hi) / 2, 2);
    }
  }
  // Per-head weights on the other side of the hovered (or pinned) token.
  const focus = hov ?? (o.selected >= 0 ? { side: 'left' as const, token: o.selected } : null);
  if (!focus) return;
  const T = o.T;
  const bw = 12;
  for (let i = first; i <= last; i++) {
    const y = cy(i);
    o.links.forEach((hl) => {
      const h = hl.head;
      const k = h;
      const w = focus.side === 'left' ? o.att[h * T * T + focus.token * T + i] : o.att[h * T * T + i * T + focus.token];
      const x = focus.side === 'left' ? L.barsX + k * (bw + 2) : 4 + k * (bw + 2);
      const bh = Math.max(0, Math.min(1, w)) * (L.rowH - 4);
      p.rect(x, y + L.rowH / 2 - 2 - bh, bw, bh, headColor(h), 0.9);
    });
  }
}

/** Which token (and side) is under (x, y) in canvas coordinates. */
export function hitHeadView(T: number, nHeads: number, scrollTop: number, x: number, y: number): HeadHover | null {
  const L = headLayout(T, nHeads);
  const i = Math.floor((y + scrollTop - L.top) / L.rowH);
  if (i < 0 || i >= T) return null;
  if (x >= L.leftX - L.labelW && x <= L.leftX + 4) return { side: 'left', token: i };
  if (x >= L.rightX - 4 && x <= L.rightX + L.labelW) return { side: 'right', token: i };
  return null;
}
