// dbclient.ts — typed calls to the /api/v1/db routes (the analysis database), with
// small caches so switching views does not refetch. No drawing here.
import { check } from './client';
import { apiFetch } from './fetch';
import type {
  DbRun,
  DbRunsResponse,
  HeadsResponse,
  ParentsResponse,
  RelationsResponse,
  SentenceAttentionMeta,
  SentenceDetail,
  SentenceQuery,
  SentencesResponse,
  TopkAllMeta,
  TopkKind,
} from './dbtypes';
import { decodeTensors } from './tensor';
import type { RunResponse } from './types';

const BASE = '/api/v1/db';

async function fetchOk(url: string): Promise<Response> {
  return check(await apiFetch(url));
}

async function json<T>(url: string): Promise<T> {
  return (await (await fetchOk(url)).json()) as T;
}

const memo = new Map<string, Promise<unknown>>();
function cached<T>(key: string, f: () => Promise<T>): Promise<T> {
  let p = memo.get(key) as Promise<T> | undefined;
  if (!p) {
    p = f();
    p.catch(() => memo.delete(key));
    memo.set(key, p);
  }
  return p;
}

/** null when the server has no --db. */
export async function getDbRuns(): Promise<DbRunsResponse | null> {
  const r = await apiFetch(`${BASE}/runs`);
  if (r.status === 404) return null;
  if (!r.ok) await fetchOk(`${BASE}/runs`);
  return (await r.json()) as DbRunsResponse;
}

export function getHeads(run: number): Promise<HeadsResponse> {
  return cached(`heads/${run}`, () => json<HeadsResponse>(`${BASE}/runs/${run}/heads`));
}

export function getRelations(run: number, top = 3): Promise<RelationsResponse> {
  return cached(`rel/${run}/${top}`, () => json<RelationsResponse>(`${BASE}/runs/${run}/relations?top=${top}`));
}

export function getSentences(run: number, q: SentenceQuery): Promise<SentencesResponse> {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== '') p.set(k, String(v));
  return json<SentencesResponse>(`${BASE}/runs/${run}/sentences?${p.toString()}`);
}

/** An imported run's sentence as a run of the explorer's views (its attention read from
 *  the --import-dir folder; no model): GET .../sentences/{idx}/run. */
export function getSentenceRun(run: number, idx: number): Promise<RunResponse> {
  return json<RunResponse>(`${BASE}/runs/${run}/sentences/${idx}/run`);
}

export function getSentence(run: number, idx: number): Promise<SentenceDetail> {
  return cached(`sent/${run}/${idx}`, () => json<SentenceDetail>(`${BASE}/runs/${run}/sentences/${idx}`));
}

export function getParents(run: number, idx: number, layer: number, head: number): Promise<ParentsResponse> {
  return cached(`par/${run}/${idx}/${layer}/${head}`, () =>
    json<ParentsResponse>(`${BASE}/runs/${run}/sentences/${idx}/parents?layer=${layer}&head=${head}`),
  );
}

/** Attention of a stored sentence, every layer and head: data (L, H, T, T), rows = queries. */
export interface SentenceAttention {
  L: number;
  H: number;
  T: number;
  data: Float32Array;
  meta: SentenceAttentionMeta;
}

export function getSentenceAttention(run: number, idx: number): Promise<SentenceAttention> {
  return cached(`att/${run}/${idx}`, async () => {
    const buf = await (await fetchOk(`${BASE}/runs/${run}/sentences/${idx}/attention?dtype=f16`)).arrayBuffer();
    const d = decodeTensors<SentenceAttentionMeta>(buf);
    const t = d.tensors.get('attention');
    if (!t) throw new Error('sentence attention response without an attention tensor');
    return { L: t.shape[0], H: t.shape[1], T: t.shape[2], data: t.data, meta: d.header.meta };
  });
}

/** The (T, T) slice of one head. */
export function headSlice(a: SentenceAttention, layer: number, head: number): Float32Array {
  const TT = a.T * a.T;
  const o = (layer * a.H + head) * TT;
  return a.data.subarray(o, o + TT);
}

/** Every stored top-k row of a sentence (a run analysed with --topk): index and weight
 *  (L, H, T, k), strongest first, index -1 for unused slots; rest (L, H, T) the mass of
 *  the keys not listed; meta.kept the kept mass per layer. */
export interface SentenceTopk {
  L: number;
  H: number;
  T: number;
  k: number;
  index: Float32Array;
  weight: Float32Array;
  rest: Float32Array;
  meta: TopkAllMeta;
}

export function getSentenceTopk(run: number, idx: number, kind: TopkKind = 'encoder'): Promise<SentenceTopk> {
  return cached(`topk/${run}/${idx}/${kind}`, async () => {
    const q = kind === 'cross' ? '?kind=cross' : '';
    const d = decodeTensors<TopkAllMeta>(await (await fetchOk(`${BASE}/runs/${run}/sentences/${idx}/topk-all${q}`)).arrayBuffer());
    const ix = d.tensors.get('index'), w = d.tensors.get('weight'), r = d.tensors.get('rest');
    if (!ix || !w || !r) throw new Error('top-k response without index, weight and rest');
    const [L, H, T, k] = ix.shape;
    return { L, H, T, k, index: ix.data, weight: w.data, rest: r.data, meta: d.header.meta };
  });
}

/** A run's name in the views: its model's, and "(bf16)" when it was analysed at
 * --precision bf16 (params.precision), so the F32 and BF16 runs of one model differ. */
export function runName(run: Pick<DbRun, 'name' | 'params'>): string {
  const p = run.params;
  return typeof p === 'object' && p.precision === 'bf16' ? `${run.name} (bf16)` : run.name;
}

/** Whether run was analysed with --topk (its params name k). */
export function hasTopk(params: Record<string, unknown> | string): boolean {
  return typeof params === 'object' && typeof params.topk === 'number' && params.topk > 0;
}
