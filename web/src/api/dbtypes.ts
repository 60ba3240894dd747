// dbtypes.ts — GENERATED from docs/api/db.schema.json by web/scripts/gen-api-types.mjs
// (npm run build runs it). Do not edit: change the schema, which the server is tested
// against (tests/api/contract.test.mjs).
// Every JSON body of the /api/v1/db routes (src/server/db_api.c, docs/views.md): the
// analysis database served by `attnscope serve --db`, and the meta of its binary tensors.
// Index of a head in every per-head array: layer * heads + head. web/src/api/dbtypes.ts is
// generated from this file (web/scripts/gen-api-types.mjs) and tests/api/contract.test.mjs
// checks every route's response against it. Errors are api.schema.json's ErrorResponse.

import type { IndexRange } from './types';

/**
 * GET /api/v1/db/runs/{run}/sentences/{idx}/topk?layer=L&head=H&query=Q[&kind=cross]: one stored top-k
 * row of a run analysed with --topk (docs/analysis.md, Top-k attention): the k strongest keys of query
 * Q, strongest first (index -1, weight 0 for unused slots), and the mass of the others. kind=cross: an
 * encoder-decoder run's cross-attention (sentence = pair, query = target token, keys = source tokens);
 * a run without cross-attention is a 400
 */
export interface TopkRow {
  run: number;
  sent: number;
  kind: TopkKind;
  layer: number;
  head: number;
  query: number;
  k: number;
  /** the sentence's tokens (queries; the target's in cross-attention) */
  tokens: number;
  /** keys per row: tokens, or the source's tokens in cross-attention */
  keys: number;
  /** (k) key positions */
  index: number[];
  /** (k) their attention weights */
  weight: number[];
  /** the summed weight of every key not listed */
  rest: number;
}

/**
 * meta of GET /api/v1/db/runs/{run}/sentences/{idx}/topk-all[?kind=cross]: every stored top-k row of
 * the sentence (a run analysed with --topk): tensors index and weight (layers, heads, tokens, k),
 * index as float32 (exact; -1 for unused slots), strongest first, and rest (layers, heads, tokens),
 * the mass of the keys not listed; kind=cross: an encoder-decoder run's cross-attention (the decoder's
 * layers, target tokens over source keys; 400 for a run without cross-attention); 404 when the run
 * stored none, 413 over SRV_DB_TOPK_MAX_ENTRIES (4 Mi entries)
 */
export interface TopkAllMeta {
  run: number;
  sent: number;
  kind: TopkKind;
  layers: number;
  heads: number;
  /** the sentence's tokens (queries; the target's in cross-attention) */
  tokens: number;
  /** keys per row: tokens, or the source's tokens in cross-attention */
  keys: number;
  k: number;
  /**
   * (layers) the sentence's kept mass per layer: the mean over the layer's heads and queries of the
   * sum of the k stored weights
   */
  kept: number[];
}

/**
 * which attention a stored top-k is of: the run's self-attention (query kind absent, encoder or self)
 * or an encoder-decoder run's cross-attention (kind=cross)
 */
export type TopkKind = 'encoder' | 'cross';

/**
 * where per-sentence attention comes from: recomputed by the served model, or read from the run's
 * --import-dir folder (imported runs)
 */
export type AttentionSource = 'model' | 'import';

/**
 * runs.source, what wrote the run: `attnscope analyze`, or `attnscope import` (params.source tells
 * --dir, "import", from single files, "import-files")
 */
export type RunSource = 'analyze' | 'import';

/** GET /api/v1/db/runs -> runs[i], and GET /api/v1/db/runs/{id} */
export interface DbRun {
  id: number;
  /** the model folder as given to analyze, or import:DIR */
  model_name: string;
  /** base name of the model folder (or of the import folder) */
  name: string;
  /** bert, roberta, distilbert, gpt2, or imported */
  arch: string;
  layers: number;
  heads: number;
  /** 0 for imports */
  d_head: number;
  /** the corpus files (a JSON object), or the stored text when it is not JSON */
  corpus: Record<string, unknown> | string;
  /** the analysis parameters (a JSON object), or the stored text when it is not JSON */
  params: Record<string, unknown> | string;
  version: string;
  n_total: number;
  n_done: number;
  status: 'running' | 'done' | string;
  created: string;
  finished: string | null;
  n_sentences: number;
  has_syntactic: boolean;
  has_semantic: boolean;
  source: RunSource | null;
  /** the served model that can recompute attention for this run, or null */
  model: string | null;
  /** where per-sentence attention comes from, or null when nowhere */
  attention: AttentionSource | null;
  /** the --import-dir folder serving an imported run's attention, or null */
  import_dir: string | null;
}

/** GET /api/v1/db/runs */
export interface DbRunsResponse {
  /** the database file's base name */
  db: string;
  schema_version: number;
  runs: DbRun[];
}

export type PatternLabel = 'next-word' | 'previous-word' | 'self' | 'delimiter-focused' | 'broad' | 'other' | 'induction' | 'sink';

/** the embedding component a head's pattern depends on (found by ablation) */
export type Component = 'token' | 'position' | 'segment';

/**
 * GET /api/v1/db/runs/{id}/heads -> columns: every array has layers * heads entries, null where the
 * value does not apply
 */
export interface HeadColumns {
  importance: (number | null)[];
  semantic: (number | null)[];
  syntactic: (number | null)[];
  syntactic_relation: (string | null)[];
  /** 0 = dependent -> parent, 1 = parent -> dependent */
  syntactic_dir: (0 | 1 | null)[];
  cls: (number | null)[];
  sep: (number | null)[];
  punct: (number | null)[];
  self: (number | null)[];
  prev: (number | null)[];
  next: (number | null)[];
  entropy: (number | null)[];
  entropy_norm: (number | null)[];
  n_sentences: (number | null)[];
  n_semantic: (number | null)[];
  /** mean attention on the first token (BOS / [CLS]) over the query rows after it: the sink mass */
  first: (number | null)[];
  /**
   * induction probe score (repeated random tokens, Olsson et al. 2022) of a causal model; null for
   * encoders and imports
   */
  induction: (number | null)[];
  /**
   * gradient head importance (Michel et al. 2019): mean over the SST-2 sentences of |dy/dξ| for a gate
   * ξ on the head's output, y the predicted class's logit, from the saliency's backward; null without
   * a classifier head (decoders), imports and older runs
   */
  head_importance: (number | null)[];
  /**
   * head_importance divided by the l2 norm of its layer's head_importance values (Michel et al. 2019,
   * sec. 4.2)
   */
  head_importance_norm: (number | null)[];
  /**
   * norm-weighted sink mass over raw sink mass (Kobayashi et al. 2020): sink = first token, [CLS],
   * [SEP]; below 1 when the head's sink attention moves little; null for imports and older runs
   */
  norm_sink_ratio: (number | null)[];
  /**
   * mean ALTI share (Ferrando et al. 2022) of the head's output in its attention block's output, over
   * query tokens and sentences; null for imports and older runs
   */
  alti_contribution: (number | null)[];
  pattern: (PatternLabel | null)[];
  confidence: (number | null)[];
  /** median number of head dimensions carrying 90% of q.k of the dominant links */
  concentration: (number | null)[];
  n_links: (number | null)[];
  abl_token: (number | null)[];
  abl_position: (number | null)[];
  abl_segment: (number | null)[];
  depends_on: (Component | null)[];
}

/** GET /api/v1/db/runs/{id}/heads */
export interface HeadsResponse {
  run: number;
  layers: number;
  heads: number;
  /** heads with a row of scores */
  n_scored: number;
  columns: HeadColumns;
  encdec_heads?: EncdecHeads;
}

/**
 * an encoder-decoder run (analyze --source/--target): table encdec_heads per attention kind; absent
 * for other runs
 */
export interface EncdecHeads {
  encoder: EncdecKind;
  decoder: EncdecKind;
  cross: EncdecKind;
}

/**
 * per-head columns of one attention kind, index layer * heads + head, null where absent (self / prev /
 * next / dist / spread of cross-attention; aer and its counts without gold alignments, and for the
 * encoder and decoder kinds)
 */
export interface EncdecKind {
  layers: number;
  heads: number;
  columns: {
    entropy: (number | null)[];
    sink: (number | null)[];
    self: (number | null)[];
    prev: (number | null)[];
    next: (number | null)[];
    dist: (number | null)[];
    spread: (number | null)[];
    max: (number | null)[];
    aer: (number | null)[];
    links: (number | null)[];
    sure: (number | null)[];
    hit_sure: (number | null)[];
    hit_possible: (number | null)[];
  };
}

/** meta of GET /api/v1/db/runs/{id}/pairs: one f32 tensor jsd (L*H, L*H), symmetric, diagonal 0 */
export interface PairsMeta {
  run: number;
  layers: number;
  heads: number;
  /** stored head pairs */
  pairs: number;
}

export interface RelationBest {
  layer: number;
  head: number;
  correct: number;
  accuracy: number;
  counted: boolean;
}

export interface RelationDir {
  /** 0 = dependent -> parent, 1 = parent -> dependent */
  dir: 0 | 1;
  baseline: number;
  baseline_offset: number;
  best: RelationBest[];
  /** best accuracy in each layer */
  by_layer: number[];
}

export interface Relation {
  relation: string;
  n: number;
  dirs: RelationDir[];
}

/** GET /api/v1/db/runs/{id}/relations */
export interface RelationsResponse {
  run: number;
  layers: number;
  heads: number;
  relations: Relation[];
}

/** GET /api/v1/db/runs/{id}/sentences -> sentences[i] */
export interface SentenceRow {
  idx: number;
  corpus: 'sst2' | 'conllu' | 'import' | string;
  source: string;
  text: string;
  label: number | null;
  predicted: number | null;
  /** softmax probability of the prediction (only with confidence=1 and a served classifier) */
  confidence: number | null;
  n_tokens: number;
  n_words: number;
  truncated: boolean;
  explained: boolean;
  relations: string[];
}

/** GET /api/v1/db/runs/{id}/sentences */
export interface SentencesResponse {
  run: number;
  total: number;
  offset: number;
  limit: number;
  sentences: SentenceRow[];
}

/** Query parameters of GET /api/v1/db/runs/{id}/sentences (not a JSON body). */
export interface SentenceQuery {
  offset?: number;
  limit?: number;
  q?: string;
  corpus?: string;
  relation?: string;
  correct?: 0 | 1;
  confidence?: 0 | 1;
}

export interface DbToken {
  text: string;
  start: number | null;
  end: number | null;
  kind: 'word' | 'cls' | 'sep' | 'punct' | 'pad';
  /** the word the token belongs to, or null */
  word: number | null;
}

export interface DbWord {
  form: string;
  /** parent word, -1 = root, null = none */
  head: number | null;
  deprel: string | null;
}

export interface Saliency {
  class: number;
  /** (T) saliency of each token */
  values: number[];
}

/** GET /api/v1/db/runs/{id}/sentences/{idx} */
export interface SentenceDetail {
  idx: number;
  corpus: 'sst2' | 'conllu' | 'import' | string;
  source: string;
  text: string;
  label: number | null;
  predicted: number | null;
  n_tokens: number;
  n_words: number;
  truncated: boolean;
  explained: boolean;
  run: number;
  tokens: DbToken[];
  words: DbWord[];
  /** per class */
  saliency: Saliency[];
  model: string | null;
  attention: AttentionSource | null;
}

export interface Arc {
  dep: number;
  /** -1 root, -2 none */
  parent: number;
  relation: string;
  /** counted by the syntactic score (not root/punct, both words have pieces) */
  scored: boolean;
  dep_correct: boolean | null;
  parent_correct: boolean | null;
}

/** GET /api/v1/db/runs/{id}/sentences/{idx}/parents?layer&head */
export interface ParentsResponse {
  run: number;
  sent: number;
  layer: number;
  head: number;
  /** the served model that recomputed the attention; null when read from an import folder */
  model: string | null;
  source: AttentionSource;
  /** the cached run (POST /api/v1/run's id), or null */
  run_id: string | null;
  /** the classifier's class probabilities, or null */
  probs: number[] | null;
  /** predicted word of each word (-1 none) */
  pred: number[];
  arcs: Arc[];
}

/**
 * meta of GET /api/v1/db/runs/{id}/sentences/{idx}/attention: one tensor attention [layers, heads, T,
 * T]
 */
export interface SentenceAttentionMeta {
  run: number;
  sent: number;
  layers: IndexRange;
  heads: IndexRange;
  tokens: number;
  model: string | null;
  source: AttentionSource;
  run_id: string | null;
}
