// showas.ts — what the head and model views draw: raw attention, or an attribution
// method's maps (GET .../maps, docs/attribution.md) in the same (layer, head, T, T) layout.
// Per-head methods (norm) keep every head; per-layer ones have one map per layer (head axis
// of 1): norm2 each layer's own, ALTI, rollout, flow and grad cumulative (layer l's map is the
// method through layers 0..l, the last layer's the whole model's). Values above 1 (norm-based
// and gradient-weighted ones) are divided by the method's largest value
// for drawing (`scale`); the views show value / scale, the method's own numbers. grad explains
// the logit of a Target (default: the prediction). No drawing.
import type { LayerAttention, PooledAttention, RunData, Target } from '../api/client';
import type { MapsMethod } from '../api/types';

export type ShowAs = 'attention' | MapsMethod;
export const SHOW_AS: readonly ShowAs[] = ['attention', 'norm', 'norm2', 'alti', 'rollout', 'flow', 'grad'];
export type Per = 'head' | 'layer';

/** What one map of s covers. */
export function perOf(s: ShowAs): Per {
  return s === 'attention' || s === 'norm' ? 'head' : 'layer';
}

/** Whether layer l's map of s is the method through layers 0..l (the last layer's: the whole model's). */
export function cumulative(s: ShowAs): boolean {
  return s === 'alti' || s === 'rollout' || s === 'flow' || s === 'grad';
}

/** Layers and heads of s's maps on a model of L layers and H heads. */
export function mapCounts(s: ShowAs, L: number, H: number): { layers: number; heads: number } {
  return { layers: L, heads: perOf(s) === 'head' ? H : 1 };
}

/** The factor that brings s's maps into [0, 1] for drawing: 1 / the largest value when it is
 *  above 1, else 1 (from the max-pooled maps: max pooling keeps the largest value). Raw
 *  attention, ALTI, rollout and flow have rows summing to 1 (at most): 1 without a request, so
 *  the first request of every layer's flow is the only one waiting for it. */
export async function mapScale(data: RunData, s: ShowAs, tg?: Target): Promise<number> {
  if (s === 'attention' || s === 'alti' || s === 'rollout' || s === 'flow') return 1;
  const p = await data.maps(s, { pool: 8, dtype: 'f32', tg: targetOf(s, tg) });
  const largest = p.data.reduce((a, v) => Math.max(a, v), 0);
  return largest > 1 ? 1 / largest : 1;
}

/** The target the maps route takes: grad's only. */
const targetOf = (s: ShowAs, tg?: Target): Target | undefined => (s === 'grad' ? tg : undefined);

const scaled = (x: Float32Array, k: number): Float32Array => (k === 1 ? x : x.map((v) => v * k));

/** Layer l of s (all its maps), scaled for drawing, and the scale. */
export async function showLayer(data: RunData, s: ShowAs, l: number, tg?: Target): Promise<LayerAttention & { scale: number }> {
  if (s === 'attention') return { ...(await data.layer(l)), scale: 1 };
  const [m, k] = await Promise.all([data.maps(s, { layers: String(l), tg: targetOf(s, tg) }), mapScale(data, s, tg)]);
  const out = { layer: l, heads: m.shape[1], T: m.shape[2], K: m.shape[3], data: scaled(m.data, k), scale: k }; /* K: keys per row, T here */
  return out;
}

/** Every map of s max-pooled to at most n × n, scaled for drawing, and the scale. A long
 *  run's attention: the thumbnails its forward pooled (64 × 64 at most, whatever n). */
export async function showPooled(data: RunData, s: ShowAs, n: number, tg?: Target): Promise<PooledAttention & { scale: number }> {
  if (s === 'attention' && data.isLong) return { ...(await data.thumbs()), scale: 1 };
  if (s === 'attention') return { ...(await data.pooled(n)), scale: 1 };
  const [m, k] = await Promise.all([data.maps(s, { pool: n, dtype: 'f16', tg: targetOf(s, tg) }), mapScale(data, s, tg)]);
  const out = { pool: m.shape[2], poolKeys: m.shape[3], layers: m.shape[0], heads: m.shape[1], T: m.meta.tokens, K: m.meta.tokens, data: scaled(m.data, k), scale: k };
  return out;
}

/** The (T, T) map of layer l, head h of s, scaled for drawing. */
export async function showHead(data: RunData, s: ShowAs, l: number, h: number, tg?: Target): Promise<Float32Array> {
  if (s === 'attention') return data.head(l, h);
  const one = perOf(s) === 'head' ? String(h) : '0';
  const [m, k] = await Promise.all([data.maps(s, { layers: String(l), heads: one, tg: targetOf(s, tg) }), mapScale(data, s, tg)]);
  return scaled(m.data, k);
}
