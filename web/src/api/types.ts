// types.ts — mirrors the JSON schema and the binary tensor container of the
// attnscope server (src/server/api.c, src/server/tensor.h, docs/server.md).
// Keep in step with the C side: these are the only shapes the UI relies on.

export type TaskHead = 'classifier' | 'mlm' | 'lm';

/** GET /api/v1/models -> models[i] */
export interface ModelInfo {
  name: string;
  arch: 'bert' | 'roberta' | 'distilbert' | 'gpt2' | string;
  model_type: string;
  layers: number;
  heads: number;
  d_model: number;
  d_head: number;
  vocab_size: number;
  max_tokens: number;
  type_vocab: number;
  causal: boolean;
  tokenizer: boolean;
  heads_present: TaskHead[];
  dtype: string;
  n_params: number;
  /** the classifier's id2label names by class index; [] when the config has none */
  labels: (string | null)[];
}

export interface Limits {
  max_body_bytes: number;
  max_active_runs: number;
  max_cached_runs: number;
  max_cache_bytes: number;
  max_topk: number;
}

export interface ModelsResponse {
  version: string;
  models: ModelInfo[];
  limits: Limits;
  /** whether the server serves an analysis database (--db) under /api/v1/db */
  db: boolean;
}

/** One token of a run; start/end are byte offsets into its sentence (-1 for specials). */
export interface Token {
  i: number;
  id: number;
  piece: string;
  text: string;
  start: number;
  end: number;
  type_id: number;
  /** 0 = sentence A, 1 = sentence B (specials belong to the sentence before them) */
  segment: 0 | 1;
  special: boolean;
}

export interface RunSizes {
  tokens: number; // T
  layers: number; // L
  heads: number; // H
  d_model: number; // D
  d_head: number; // Dh
}

/** POST /api/v1/run and GET /api/v1/runs/{id} */
export interface RunResponse {
  id: string;
  model: string;
  cached: boolean;
  text: string;
  text_b: string | null;
  causal: boolean;
  sizes: RunSizes;
  tokens: Token[];
  warning: string | null;
}

export interface RunRequest {
  model: string;
  text: string;
  text_b?: string | null;
}

export interface MlmRequest extends RunRequest {
  k?: number;
}

export interface MlmCandidate {
  id: number;
  text: string;
  prob: number;
  logit: number;
}

export interface MlmResponse {
  model: string;
  tokens: Token[];
  predictions: { position: number; top: MlmCandidate[] }[];
}

/** Every 4xx/5xx body. */
export interface ErrorResponse {
  error: string;
}

// ---- binary tensor container ---------------------------------------------
// bytes 0..3 "ASTB"; bytes 4..7 uint32 LE header length N; N bytes of JSON
// (TensorHeader, space-padded so 8 + N is a multiple of 8); then the data.
// Each tensor's bytes start at 8 + N + offset (8-aligned), little-endian.

export const TENSOR_MAGIC = 'ASTB';
export type TensorDtype = 'f32' | 'f16' | 'u8';

export interface TensorEntry {
  name: string;
  dtype: TensorDtype;
  shape: number[];
  offset: number;
  nbytes: number;
  /** u8 only: value = zero + scale * byte */
  scale?: number;
  zero?: number;
}

export interface AttentionMeta {
  run: string;
  layers: [number, number]; // inclusive
  heads: [number, number]; // inclusive
  tokens: number;
  /** with ?pool=N: the side P = min(N, T) of each max-pooled head; block i covers
   *  tokens [floor(i*T/P), floor((i+1)*T/P)) */
  pool?: number;
  pool_op?: 'max';
}

export interface QkMeta {
  run: string;
  layer: number;
  head: number;
  tokens: number;
  d_head: number;
  /** 1 / sqrt(d_head): scores = q . k * scale (+ mask) */
  scale: number;
}

export interface TensorHeader<M = Record<string, unknown>> {
  version: 1;
  meta: M;
  tensors: TensorEntry[];
}

/** A decoded tensor: values widened to float32, row-major. */
export interface Tensor {
  name: string;
  shape: number[];
  data: Float32Array;
}
