// types.ts — GENERATED from docs/api/api.schema.json by web/scripts/gen-api-types.mjs
// (npm run build runs it). Do not edit: change the schema, which the server is tested
// against (tests/api/contract.test.mjs).
// Every JSON body the server sends (src/server/api.c) and reads, and the JSON header of
// its binary tensor container (src/server/tensor.c); docs/server.md explains them.
// web/src/api/types.ts is generated from this file (web/scripts/gen-api-types.mjs) and
// tests/api/contract.test.mjs checks every route's response against it.

/** A task head found in the checkpoint. */
export type TaskHead = 'classifier' | 'mlm' | 'lm';

/** GET /api/v1/models -> models[i] */
export interface ModelInfo {
  /** the folder's base name (a second folder of the same name gets -2, and so on) */
  name: string;
  /** the architecture family that runs it */
  arch: 'bert' | 'roberta' | 'distilbert' | 'gpt2';
  /** as in config.json: bert, electra, roberta, distilbert, gpt2, ... */
  model_type: string;
  layers: number;
  heads: number;
  d_model: number;
  d_head: number;
  vocab_size: number;
  /** the longest input, special tokens included (RoBERTa: max_position_embeddings - 2) */
  max_tokens: number;
  /** segment types; 0 when the model has no segment embeddings */
  type_vocab: number;
  causal: boolean;
  /** whether the folder's tokenizer is loaded (else the model takes ids only) */
  tokenizer: boolean;
  heads_present: TaskHead[];
  /** dtype of the stored weights */
  dtype: 'F32' | 'F16' | 'BF16';
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

/** GET /api/v1/models */
export interface ModelsResponse {
  version: string;
  models: ModelInfo[];
  limits: Limits;
  /** whether the server serves an analysis database (--db) under /api/v1/db */
  db: boolean;
}

/**
 * One token of an input, in the one format of the server's runs and of `attnscope run --format json`:
 * one writer, as_tokens_json (include/attnscope.h).
 */
export interface Token {
  /** position in the input */
  i: number;
  /** vocabulary id */
  id: number;
  /** the vocabulary string (##ing, Ġthe); invalid UTF-8 replaced by U+FFFD */
  piece: string;
  /** readable text (byte-level BPE decoded); U+FFFD for the bytes of a partial UTF-8 character */
  text: string;
  /** the exact bytes of text as lowercase hex, so the pieces of a split character join back */
  bytes: string;
  /** byte offset into the token's own sentence (text or text_b); -1 for specials */
  start: number;
  /** exclusive end byte offset; -1 for specials */
  end: number;
  /** token type id given to the model (0 for models without segment embeddings) */
  type_id: number;
  /** 0 = sentence A, 1 = sentence B (specials belong to the sentence before them) */
  segment: 0 | 1;
  /** added by the model's template ([CLS], [SEP], <s>, </s>), not from the text */
  special: boolean;
}

export interface RunSizes {
  /** T */
  tokens: number;
  /** L */
  layers: number;
  /** H */
  heads: number;
  /** D */
  d_model: number;
  /** Dh */
  d_head: number;
}

/** POST /api/v1/run and GET /api/v1/runs/{id} */
export interface RunResponse {
  /** the cached run's id: 16 hex digits */
  id: string;
  model: string;
  /** true when the same (model, text, text_b) was already in the cache */
  cached: boolean;
  text: string;
  text_b: string | null;
  causal: boolean;
  sizes: RunSizes;
  tokens: Token[];
  /** the tokenizer's last warning (invalid UTF-8 replaced, ...), or null */
  warning: string | null;
}

/** Body of POST /api/v1/run. Unknown fields are ignored. */
export interface RunRequest {
  model: string;
  text: string;
  /** null or "" means a single sentence */
  text_b?: string | null;
}

/** Body of POST /api/v1/mlm. */
export interface MlmRequest {
  model: string;
  text: string;
  text_b?: string | null;
  /** candidates per mask token, 1 to limits.max_topk (default 5) */
  k?: number;
}

export interface MlmCandidate {
  id: number;
  text: string;
  /** softmax over the vocabulary */
  prob: number;
  logit: number;
}

export interface MlmPrediction {
  /** index of the mask token */
  position: number;
  /** the k most probable tokens, most probable first */
  top: MlmCandidate[];
}

/** POST /api/v1/mlm */
export interface MlmResponse {
  model: string;
  tokens: Token[];
  /** one entry per [MASK] or <mask> token */
  predictions: MlmPrediction[];
}

/** Every 4xx/5xx body: one line that names the field or the problem. */
export interface ErrorResponse {
  error: string;
}

/** f32: IEEE float32; f16: IEEE binary16; u8: value = zero + scale * byte */
export type TensorDtype = 'f32' | 'f16' | 'u8';

/**
 * One tensor of the binary container. Its bytes start at 8 + N + offset (8-aligned), little-endian,
 * row-major.
 */
export interface TensorEntry {
  name: string;
  dtype: TensorDtype;
  shape: number[];
  offset: number;
  nbytes: number;
  /** u8 only: value = zero + scale * byte */
  scale?: number;
  /** u8 only */
  zero?: number;
}

/**
 * The JSON header of the binary tensor container: bytes 0..3 "ASTB"; bytes 4..7 uint32 LE header
 * length N; N bytes of this JSON, space-padded so that 8 + N is a multiple of 8; then the data. meta
 * is the route's (AttentionMeta, QkMeta, ...).
 */
export interface TensorHeader {
  version: 1;
  meta: Record<string, unknown>;
  tensors: TensorEntry[];
}

/**
 * meta of GET /api/v1/runs/{id}/attention: one tensor attention [layers, heads, T, T] (or [layers,
 * heads, P, P] with pool)
 */
export interface AttentionMeta {
  run: string;
  /** inclusive range */
  layers: IndexRange;
  /** inclusive range */
  heads: IndexRange;
  /** T */
  tokens: number;
  /**
   * with ?pool=N: the side P = min(N, T) of each max-pooled head; block i covers tokens [floor(i*T/P),
   * floor((i+1)*T/P))
   */
  pool?: number;
  pool_op?: 'max';
}

/** [first, last], inclusive */
export type IndexRange = [number, number];

/** meta of GET /api/v1/runs/{id}/qk: tensors q, k (T, Dh), scores, attention (T, T), all f32 */
export interface QkMeta {
  run: string;
  layer: number;
  head: number;
  tokens: number;
  d_head: number;
  /**
   * the factor the model applies to q.k in this layer: scores = q . k * scale (+ mask). 1/sqrt(d_head)
   * unless the config says otherwise (GPT-2 scale_attn_weights false: 1;
   * scale_attn_by_inverse_layer_idx: also / (layer + 1))
   */
  scale: number;
}
