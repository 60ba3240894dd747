// generate.ts — the client of POST /api/v1/generate: a causal LM's continuation of a prompt,
// or an encoder-decoder model's output for a source, greedy, sampled or by beam search, with
// every generated token's attention rows (docs/server.md, "Generation"), decoded from the
// binary reply into Float32Arrays; each beam hypothesis viewed as a Generation of its own.
import { check } from './client';
import { apiFetch } from './fetch';
import { decodeTensors } from './tensor';
import type { GenerateMeta, GenerateRequest } from './types';

/** A generation: rows is (steps, L, H, T), T the row stride (meta.ids.length, or the longest
 *  hypothesis' length for a beam hypothesis); at step s the row of the position
 *  prompt_length - 1 + s (the one that chose token prompt_length + s), keys after it 0.
 *  cross (steps, L, H, Ts): an encoder-decoder model's cross-attention rows over the source's
 *  Ts tokens (meta.source_tokens), else null. */
export interface Generation {
  meta: GenerateMeta;
  steps: number;
  layers: number;
  heads: number;
  T: number;
  rows: Float32Array;
  Ts: number;
  cross: Float32Array | null;
  /** which hypothesis of meta.hypotheses this is (0 without beam search) */
  hyp: number;
  /** every hypothesis' rows (R, Smax, L, H, Tmax) and cross rows, when beam search returned several */
  beams: { Smax: number; Tmax: number; rows: Float32Array; cross: Float32Array | null } | null;
}

export async function postGenerate(req: GenerateRequest): Promise<Generation> {
  const r = await apiFetch('/api/v1/generate', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(req),
  });
  return generationFromBuffer(await (await check(r)).arrayBuffer());
}

/** A generation from the generate route's binary container (or a page's embedding of one:
 *  the Python package's generation_view). Throws when a tensor the meta implies is missing. */
export function generationFromBuffer(buf: ArrayBuffer): Generation {
  const d = decodeTensors<GenerateMeta>(buf);
  const t = d.tensors.get('attention');
  if (!t || t.shape.length !== 4) throw new Error('generate response without an attention tensor');
  const x = d.tensors.get('cross_attention'), b = d.tensors.get('beam_attention'), bx = d.tensors.get('beam_cross_attention');
  const meta = d.header.meta;
  if (meta.encoder_decoder && (!x || x.shape.length !== 4)) throw new Error('generate response without a cross_attention tensor');
  if ((meta.hypotheses?.length ?? 0) > 1 && (!b || b.shape.length !== 5)) throw new Error('generate response without a beam_attention tensor');
  return {
    meta,
    steps: t.shape[0],
    layers: t.shape[1],
    heads: t.shape[2],
    T: t.shape[3],
    rows: t.data,
    Ts: x ? x.shape[3] : 0,
    cross: x ? x.data : null,
    hyp: 0,
    beams: b ? { Smax: b.shape[1], Tmax: b.shape[4], rows: b.data, cross: bx ? bx.data : null } : null,
  };
}

/** Hypothesis k of a beam search as a Generation (its ids, tokens and rows); g itself for k 0
 *  or without several hypotheses. */
export function hypothesis(g: Generation, k: number): Generation {
  const h = g.meta.hypotheses?.[k];
  if (k === 0 || !h || !g.beams) return g;
  const { Smax, Tmax } = g.beams;
  const per = Smax * g.layers * g.heads;
  const steps = h.ids.length - g.meta.prompt_length;
  return {
    ...g,
    meta: { ...g.meta, ids: h.ids, generated_ids: h.generated_ids, tokens: h.tokens, steps },
    steps,
    T: Tmax,
    rows: g.beams.rows.subarray(k * per * Tmax, (k + 1) * per * Tmax),
    cross: g.beams.cross ? g.beams.cross.subarray(k * per * g.Ts, (k + 1) * per * g.Ts) : null,
    hyp: k,
  };
}

/** The row of step s, layer l, head h over the keys 0 .. prompt_length + s - 1 (the context
 *  the chosen token saw: the prompt and the tokens generated before it). */
export function stepRow(g: Generation, s: number, l: number, h: number): Float32Array {
  const off = ((s * g.layers + l) * g.heads + h) * g.T;
  return g.rows.subarray(off, off + g.meta.prompt_length + s);
}

/** The cross-attention row of step s, layer l, head h over the source's Ts tokens (empty for
 *  a causal LM). */
export function crossRow(g: Generation, s: number, l: number, h: number): Float32Array {
  if (!g.cross) return new Float32Array(0);
  const off = ((s * g.layers + l) * g.heads + h) * g.Ts;
  return g.cross.subarray(off, off + g.Ts);
}
