// urlstate.ts — the explorer's shareable state, kept in the page URL's query string
// (?model=..&text=..&text_b=..&view=head&layer=0&head=0&token=3&heads=0,2&dims=3,17) so a
// view reloads as it was (and in the same UI language: lang=en|zh-CN). A model without a
// tokenizer takes token ids, kept in `text` ("1,5,9"); `ids=1,5,9` is read as that too.
// `rope=pre` shows a rotary model's q and k before the rotation in the neuron view;
// `attr=flow` picks the attribution view's method (docs/attribution.md); `scale=log` and
// `sink=0` set the long map's colour scale and leave out its first key (view=long).
// `imp=FILE.npz` shows the imported run of that `serve --attention` file instead of a text.
// `target=...` is an encoder-decoder model's target (its decoder input; ids "2,0,31" for a
// model without a tokenizer) and `kind=decoder|cross` the attention kind its views show.
// `gold=0-0 1-2 2?1` is the alignment view's gold Pharaoh line and `hmean=1` shows the
// mean of the layer's heads there (view=align).

import type { AttentionKind, AttributionMethod } from '../api/types';
import { asLang, type Lang } from './i18n';

export type ViewName = 'head' | 'model' | 'neuron' | 'attribution' | 'lens' | 'long' | 'generate' | 'align' | AnalysisView;
export const ATTRIBUTION_METHODS: readonly AttributionMethod[] = ['rollout', 'flow', 'grad', 'norm', 'norm2', 'alti', 'importance'];
/** The views of the analysis database (views/AnalysisViews.svelte). */
export type AnalysisView = 'overview' | 'instances' | 'dependency' | 'graph' | 'pattern' | 'compare';
export const ANALYSIS_VIEWS: readonly AnalysisView[] = ['overview', 'instances', 'dependency', 'graph', 'pattern', 'compare'];
export function isAnalysisView(v: string): v is AnalysisView {
  return (ANALYSIS_VIEWS as readonly string[]).includes(v);
}

export interface UrlState {
  model: string;
  text: string;
  text_b: string;
  target: string; // an encoder-decoder model's target text (or decoder input ids); '' = none
  kind: AttentionKind; // the attention kind shown of an encoder-decoder run
  view: ViewName;
  layer: number;
  head: number;
  token: number; // -1 = none
  heads: number[] | null; // heads shown in the head view; null = all
  dims: number[] | null; // head dimensions the neuron view marks (from the pattern view); null = none
  mode: 'lines' | 'matrix';
  rope: 'post' | 'pre'; // the neuron view's q and k of a rotary model: after or before RoPE
  attr: AttributionMethod; // the attribution view's method
  scale: 'lin' | 'log'; // the long map's colour scale
  sink: boolean; // the long map without the first key, rows renormalised
  dbrun: number; // analysis run id (0 = the first)
  sent: number; // analysed sentence index (-1 = none)
  cmp: number; // second run of the comparison (0 = the second)
  imp: string; // the imported run shown (serve --attention), by its file name; '' = none
  gold: string; // the alignment view's gold Pharaoh line; '' = none
  hmean: boolean; // the alignment view shows the mean of the layer's heads
  lang: Lang | null; // UI language (lib/i18n.ts); null = not in the URL: the browser's language
}

export const DEFAULT_STATE: UrlState = {
  model: '',
  text: '',
  text_b: '',
  target: '',
  kind: 'encoder',
  view: 'head',
  layer: 0,
  head: 0,
  token: -1,
  heads: null,
  dims: null,
  mode: 'lines',
  rope: 'post',
  attr: 'rollout',
  scale: 'lin',
  sink: false,
  dbrun: 0,
  sent: -1,
  cmp: 0,
  imp: '',
  gold: '',
  hmean: false,
  lang: null,
};

/** "3,17,42" -> [3, 17, 42] (non-numbers dropped); null stays null. */
function intList(v: string | null): number[] | null {
  if (v === null) return null;
  return v
    .split(',')
    .filter((s) => /^\d+$/.test(s))
    .map(Number);
}

function int(v: string | null, dflt: number): number {
  if (v === null || !/^-?\d+$/.test(v)) return dflt;
  return parseInt(v, 10);
}

export function readUrlState(search: string): UrlState {
  const p = new URLSearchParams(search);
  const view = p.get('view');
  const heads = p.get('heads');
  return {
    model: p.get('model') ?? '',
    text: p.get('text') ?? p.get('ids') ?? '',
    text_b: p.get('text_b') ?? '',
    target: p.get('target') ?? '',
    kind: p.get('kind') === 'decoder' || p.get('kind') === 'cross' ? (p.get('kind') as AttentionKind) : 'encoder',
    view: view === 'model' || view === 'neuron' || view === 'attribution' || view === 'lens' || view === 'long' || view === 'generate' || view === 'align' || (view !== null && isAnalysisView(view)) ? view : 'head',
    layer: Math.max(0, int(p.get('layer'), 0)),
    head: Math.max(0, int(p.get('head'), 0)),
    token: Math.max(-1, int(p.get('token'), -1)),
    heads: intList(heads),
    dims: intList(p.get('dims')),
    mode: p.get('mode') === 'matrix' ? 'matrix' : 'lines',
    rope: p.get('rope') === 'pre' ? 'pre' : 'post',
    attr: ATTRIBUTION_METHODS.find((m) => m === p.get('attr')) ?? 'rollout',
    scale: p.get('scale') === 'log' ? 'log' : 'lin',
    sink: p.get('sink') === '0',
    dbrun: Math.max(0, int(p.get('dbrun'), 0)),
    sent: Math.max(-1, int(p.get('sent'), -1)),
    cmp: Math.max(0, int(p.get('cmp'), 0)),
    imp: p.get('imp') ?? '',
    gold: p.get('gold') ?? '',
    hmean: p.get('hmean') === '1',
    lang: asLang(p.get('lang')),
  };
}

export function writeUrlState(s: UrlState): string {
  const p = new URLSearchParams();
  if (s.model) p.set('model', s.model);
  if (s.text) p.set('text', s.text);
  if (s.text_b) p.set('text_b', s.text_b);
  if (s.target) p.set('target', s.target);
  if (s.kind !== 'encoder') p.set('kind', s.kind);
  p.set('view', s.view);
  p.set('layer', String(s.layer));
  p.set('head', String(s.head));
  if (s.token >= 0) p.set('token', String(s.token));
  if (s.heads) p.set('heads', s.heads.join(','));
  if (s.dims?.length) p.set('dims', s.dims.join(','));
  if (s.mode !== 'lines') p.set('mode', s.mode);
  if (s.rope !== 'post') p.set('rope', s.rope);
  if (s.attr !== 'rollout') p.set('attr', s.attr);
  if (s.scale !== 'lin') p.set('scale', s.scale);
  if (s.sink) p.set('sink', '0');
  if (s.dbrun > 0) p.set('dbrun', String(s.dbrun));
  if (s.sent >= 0) p.set('sent', String(s.sent));
  if (s.cmp > 0) p.set('cmp', String(s.cmp));
  if (s.imp) p.set('imp', s.imp);
  if (s.gold) p.set('gold', s.gold);
  if (s.hmean) p.set('hmean', '1');
  if (s.lang) p.set('lang', s.lang);
  return `?${p.toString()}`;
}
