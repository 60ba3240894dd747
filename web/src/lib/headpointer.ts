// headpointer.ts — what the head view (views/HeadView.svelte) and the long run's head view
// (views/LongHeadView.svelte) share besides the drawing (lib/headview.ts): their props, and
// the pointer's wiring: hovering a token keeps only its links, hovering a link or a weight
// bar shows its tooltip, clicking a query (or activating its keyboard button) pins it or,
// when it is the pinned one, unpins it; the tooltip's head label. It neither draws nor
// fetches, and holds no state of its own: the views keep a HeadPointerState.
import type { RunData } from '../api/client';
import { isGrouped } from './block';
import type { Block } from '../api/types';
import { hitBar, hitHeadView, hitLink, type HeadHover, type HeadViewOptions, type LinkHit } from './headview';
import { t } from './i18n';

/** The props both head views take (HeadView adds the attention kind and the loaded layers). */
export interface HeadViewProps {
  data: RunData;
  layer: number;
  /** the selected head (neuron view, corpus views): set by isolating a head */
  head: number;
  /** the heads drawn; null: all of them */
  heads: number[] | null;
  /** the pinned query (the neuron view's query); -1: none */
  token: number;
  onerror: (msg: string) => void;
}

/** What the pointer does on a head view's canvas (CanvasView's PointerKind). */
export type HeadPointerKind = 'move' | 'click' | 'dblclick' | 'leave';

/** The token under the pointer and the link or bar whose tooltip is shown (content coordinates). */
export interface HeadPointerState {
  hover: HeadHover | null;
  tip: { x: number; y: number; hit: LinkHit } | null;
}

/** The geometry the hit tests need: queries, heads drawn, keys (T when absent), scroll. */
export interface HeadGeometry {
  T: number;
  H: number;
  K?: number;
  scrollTop: number;
}

/** The pinned query once query q is clicked: q, or none (-1) when q was the pinned one. */
export function togglePin(token: number, q: number): number {
  return token === q ? -1 : q;
}

/** A pointer event at (x, y) on the canvas: updates s's hover and tooltip (opts: the options
 *  drawn, for the link and bar hit tests) and returns the pinned query (changed by a click
 *  on a query, token otherwise). */
export function headPointer(s: HeadPointerState, token: number, x: number, y: number, kind: HeadPointerKind, g: HeadGeometry, opts: () => HeadViewOptions): number {
  const hit = kind === 'leave' ? null : hitHeadView(g.T, g.H, g.scrollTop, x, y, g.K ?? g.T);
  if (kind === 'click') return hit && hit.side === 'left' ? togglePin(token, hit.token) : token;
  if (kind === 'move' || kind === 'leave') {
    if (hit?.side !== s.hover?.side || hit?.token !== s.hover?.token) s.hover = hit;
    let h: LinkHit | null = null;
    if (kind !== 'leave' && !hit) {
      const o = opts();
      h = hitBar(o, x, y) ?? hitLink(o, x, y);
    }
    s.tip = h ? { x, y, hit: h } : null;
  }
  return token;
}

/** The pinned query once a token's keyboard button f is activated: queries toggle as a click does. */
export function focusPin(token: number, f: HeadHover): number {
  return f.side === 'left' ? togglePin(token, f.token) : token;
}

/** The tooltip's name of head h: its key/value group too for a grouped-query model. */
export function tipHead(block: Block, h: number): string {
  return isGrouped(block) ? t('heads.ariaKv', { h, g: block.kv_group[h] }) : t('head.tipHead', { h });
}
