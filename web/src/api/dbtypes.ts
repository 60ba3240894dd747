// dbtypes.ts — mirrors the JSON of the /api/v1/db routes (src/server/db_api.c,
// docs/views.md): the analysis database served by `attnscope serve --db`.
// Index of a head in every per-head array: layer * heads + head.

/** GET /api/v1/db/runs -> runs[i] (and GET /api/v1/db/runs/{id}) */
export interface DbRun {
  id: number;
  model_name: string;
  /** base name of the model folder (or of the import folder) */
  name: string;
  arch: string;
  layers: number;
  heads: number;
  d_head: number; // 0 for imports
  corpus: Record<string, string> | string;
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
  source: 'analyze' | 'import' | null;
  /** the served model that can recompute attention for this run, or null */
  model: string | null;
  /** where per-sentence attention comes from: recomputed by the served model, read from
   *  the run's --import-dir folder (imported runs), or nowhere (null) */
  attention: AttentionSource | null;
  /** the --import-dir folder serving an imported run's attention, or null */
  import_dir: string | null;
}

export type AttentionSource = 'model' | 'import';

export interface DbRunsResponse {
  db: string;
  schema_version: number;
  runs: DbRun[];
}

export type PatternLabel = 'next-word' | 'previous-word' | 'self' | 'delimiter-focused' | 'broad' | 'other';
export type Component = 'token' | 'position' | 'segment';

/** GET /api/v1/db/runs/{id}/heads: columnar, every array has layers * heads entries. */
export interface HeadColumns {
  importance: (number | null)[];
  semantic: (number | null)[];
  syntactic: (number | null)[];
  syntactic_relation: (string | null)[];
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

export interface HeadsResponse {
  run: number;
  layers: number;
  heads: number;
  n_scored: number;
  columns: HeadColumns;
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

export interface SentencesResponse {
  run: number;
  total: number;
  offset: number;
  limit: number;
  sentences: SentenceRow[];
}

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
  word: number | null;
}

export interface DbWord {
  form: string;
  /** parent word, -1 = root, null = none */
  head: number | null;
  deprel: string | null;
}

/** GET /api/v1/db/runs/{id}/sentences/{idx} */
export interface SentenceDetail extends Omit<SentenceRow, 'confidence' | 'relations'> {
  run: number;
  tokens: DbToken[];
  words: DbWord[];
  /** per class: (T) saliency of each token */
  saliency: { class: number; values: number[] }[];
  model: string | null;
  attention: AttentionSource | null;
}

export interface Arc {
  dep: number;
  parent: number; // -1 root, -2 none
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
  run_id: string | null;
  probs: number[] | null;
  /** predicted word of each word (-1 none) */
  pred: number[];
  arcs: Arc[];
}

/** meta of GET /api/v1/db/runs/{id}/sentences/{idx}/attention */
export interface SentenceAttentionMeta {
  run: number;
  sent: number;
  layers: [number, number];
  heads: [number, number];
  tokens: number;
  model: string | null;
  source: AttentionSource;
  run_id: string | null;
}
