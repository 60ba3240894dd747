// generate.ts — the client of POST /api/v1/generate: a causal LM's continuation of a prompt
// with every generated token's attention rows (docs/server.md, "Generation"), decoded from
// the binary reply into one Float32Array.
import { check } from './client';
import { apiFetch } from './fetch';
import { decodeTensors } from './tensor';
import type { GenerateMeta, GenerateRequest } from './types';

/** A generation: rows is (steps, L, H, T), T = meta.ids.length; at step s the row of the
 *  position prompt_length - 1 + s (the one that chose token prompt_length + s), keys after
 *  it 0. */
export interface Generation {
  meta: GenerateMeta;
  steps: number;
  layers: number;
  heads: number;
  T: number;
  rows: Float32Array;
}

export async function postGenerate(req: GenerateRequest): Promise<Generation> {
  const r = await apiFetch('/api/v1/generate', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(req),
  });
  const d = decodeTensors<GenerateMeta>(await (await check(r)).arrayBuffer());
  const t = d.tensors.get('attention');
  if (!t || t.shape.length !== 4) throw new Error('generate response without an attention tensor');
  return { meta: d.header.meta, steps: t.shape[0], layers: t.shape[1], heads: t.shape[2], T: t.shape[3], rows: t.data };
}

/** The row of step s, layer l, head h over the keys 0 .. prompt_length + s - 1 (the context
 *  the chosen token saw: the prompt and the tokens generated before it). */
export function stepRow(g: Generation, s: number, l: number, h: number): Float32Array {
  const off = ((s * g.layers + l) * g.heads + h) * g.T;
  return g.rows.subarray(off, off + g.meta.prompt_length + s);
}
