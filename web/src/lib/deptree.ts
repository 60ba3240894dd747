// deptree.ts — the dependency view: a sentence's words on a line, the gold arcs
// (CoNLL-U or imported parse) above it with their relation, and one head's predicted
// parents below it (Clark et al. 2019 sec. 4.1: each word's most-attended other word),
// green where the prediction is the gold parent and red where it is not; arcs the
// syntactic score does not count (root, punct) are grey. Relation labels that would
// overlap are moved apart (depLabels). Drawing goes through a Painter.
import { t } from './i18n';
import type { Painter } from './painter';
import { quadPoints, shapes } from './shapes';

export const CORRECT = '#2a9d3c';
export const WRONG = '#d62728';
const GOLD = '#555';
const UNSCORED = '#bbb';

export interface DepOptions {
  words: string[];
  /** gold parent of each word: -1 root, -2 none */
  parents: number[];
  rels: (string | null)[];
  /** the head's predicted word for each word (-1 none), or null while loading */
  pred: number[] | null;
  /** per word: true / false when the arc is scored, null when not */
  correct: (boolean | null)[] | null;
  title?: string;
}

export interface DepLayout {
  x: number[]; // centre of each word
  width: number;
  height: number;
  baseY: number;
}

export function depLayout(o: Pick<DepOptions, 'words' | 'parents' | 'pred'>): DepLayout {
  const x: number[] = [];
  let cur = 20;
  for (const w of o.words) {
    const wd = Math.max(34, w.length * 7.5 + 14);
    x.push(cur + wd / 2);
    cur += wd;
  }
  let span = 1;
  o.parents.forEach((p, d) => {
    if (p >= 0) span = Math.max(span, Math.abs(p - d));
  });
  (o.pred ?? []).forEach((p, d) => {
    if (p >= 0) span = Math.max(span, Math.abs(p - d));
  });
  const up = Math.min(220, 30 + span * 22);
  return { x, width: cur + 20, height: 24 + up * 2 + 60, baseY: 24 + up + 14 };
}

function arc(p: Painter, x1: number, x2: number, y: number, dirY: number, color: string, width: number, h: number): void {
  const cx = (x1 + x2) / 2;
  const pts = quadPoints(x1, y, cx, y + dirY * h * 2, x2, y, 24);
  shapes(p).polyline(pts, color, 0.9, width);
  // arrowhead at the parent end (x2)
  const ax = pts[pts.length - 4];
  const ay = pts[pts.length - 3];
  const ang = Math.atan2(y - ay, x2 - ax);
  const a1 = ang + Math.PI * 0.85;
  const a2 = ang - Math.PI * 0.85;
  const seg = new Float32Array([x2, y, x2 + 7 * Math.cos(a1), y + 7 * Math.sin(a1), x2, y, x2 + 7 * Math.cos(a2), y + 7 * Math.sin(a2)]);
  p.lines(seg, 2, color, 0.9, width);
}

/** Where a gold arc's relation label is drawn: its centre and box (10 px text). */
export interface DepLabel {
  word: number; // the dependent
  text: string;
  x: number;
  y: number;
  w: number;
  h: number;
}

const arcHeight = (G: DepLayout, d: number, q: number): number => Math.min(G.baseY - 40, 14 + Math.abs(q - d) * 20);

/** The relation labels of the gold arcs, each at its arc's apex when that is free, else
 *  moved by whole label heights (up first, then down) to the nearest place that overlaps
 *  no label placed before it. Shorter arcs are placed first, so they keep their apex. */
export function depLabels(o: Pick<DepOptions, 'words' | 'parents' | 'rels' | 'pred'>): DepLabel[] {
  const G = depLayout(o);
  const arcs = o.parents.map((par, d) => ({ d, par })).filter((a) => a.par >= 0 && (o.rels[a.d] ?? '') !== '');
  arcs.sort((a, b) => Math.abs(a.par - a.d) - Math.abs(b.par - b.d) || a.d - b.d);
  const out: DepLabel[] = [];
  const hits = (l: DepLabel): boolean =>
    out.some((m) => Math.abs(m.x - l.x) * 2 < m.w + l.w && Math.abs(m.y - l.y) * 2 < m.h + l.h);
  for (const { d, par } of arcs) {
    const text = o.rels[d] ?? '';
    const y0 = G.baseY - 12 - arcHeight(G, d, par) - 6;
    const l: DepLabel = { word: d, text, x: (G.x[d] + G.x[par]) / 2, y: y0, w: text.length * 6 + 6, h: 12 };
    for (let k = 1; hits(l) && k <= 16; k++) {
      const dy = Math.ceil(k / 2) * l.h * (k % 2 ? -1 : 1);
      l.y = Math.max(8, Math.min(G.baseY - 20, y0 + dy));
    }
    out.push(l);
  }
  return out;
}

export function drawDep(p: Painter, o: DepOptions): void {
  const G = depLayout(o);
  if (o.title) p.text(10, 10, o.title, { size: 12, weight: 'bold' });
  const y = G.baseY;
  const h = (d: number, q: number): number => arcHeight(G, d, q);
  o.parents.forEach((par, d) => {
    if (par < 0) {
      if (par === -1) {
        p.line(G.x[d], y - 12, G.x[d], 28, GOLD, 0.8, 1);
        p.text(G.x[d], 22, t('common.root'), { align: 'center', size: 10, color: GOLD });
      }
      return;
    }
    arc(p, G.x[d], G.x[par], y - 12, -1, GOLD, 1.2, h(d, par));
  });
  for (const l of depLabels(o)) {
    p.rect(l.x - l.w / 2, l.y - l.h / 2, l.w, l.h, '#ffffff', 0.85);
    p.text(l.x, l.y, l.text, { align: 'center', size: 10, color: '#333' });
  }
  o.words.forEach((w, i) => p.text(G.x[i], y, w, { align: 'center', size: 13, weight: 'bold' }));
  if (!o.pred) return;
  o.pred.forEach((q, d) => {
    if (q < 0) return;
    const c = o.correct ? o.correct[d] : null;
    const color = c === null ? UNSCORED : c ? CORRECT : WRONG;
    arc(p, G.x[d], G.x[q], y + 12, 1, color, c === null ? 1 : 2, h(d, q));
    if (c !== null) p.text(G.x[d], y + 24, c ? '✓' : '✗', { align: 'center', size: 12, color, weight: 'bold' });
  });
}
