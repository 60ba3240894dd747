// urlstate.ts — the explorer's shareable state, kept in the page URL's query string
// (?model=..&text=..&text_b=..&view=head&layer=0&head=0&token=3&heads=0,2) so a
// view reloads as it was.

export type ViewName = 'head' | 'model' | 'neuron';

export interface UrlState {
  model: string;
  text: string;
  text_b: string;
  view: ViewName;
  layer: number;
  head: number;
  token: number; // -1 = none
  heads: number[] | null; // heads shown in the head view; null = all
  mode: 'lines' | 'matrix';
}

export const DEFAULT_STATE: UrlState = {
  model: '',
  text: '',
  text_b: '',
  view: 'head',
  layer: 0,
  head: 0,
  token: -1,
  heads: null,
  mode: 'lines',
};

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
    text: p.get('text') ?? '',
    text_b: p.get('text_b') ?? '',
    view: view === 'model' || view === 'neuron' ? view : 'head',
    layer: Math.max(0, int(p.get('layer'), 0)),
    head: Math.max(0, int(p.get('head'), 0)),
    token: Math.max(-1, int(p.get('token'), -1)),
    heads:
      heads === null
        ? null
        : heads
            .split(',')
            .filter((s) => /^\d+$/.test(s))
            .map(Number),
    mode: p.get('mode') === 'matrix' ? 'matrix' : 'lines',
  };
}

export function writeUrlState(s: UrlState): string {
  const p = new URLSearchParams();
  if (s.model) p.set('model', s.model);
  if (s.text) p.set('text', s.text);
  if (s.text_b) p.set('text_b', s.text_b);
  p.set('view', s.view);
  p.set('layer', String(s.layer));
  p.set('head', String(s.head));
  if (s.token >= 0) p.set('token', String(s.token));
  if (s.heads) p.set('heads', s.heads.join(','));
  if (s.mode !== 'lines') p.set('mode', s.mode);
  return `?${p.toString()}`;
}
