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
  arch: Arch;
  /**
   * as in config.json: bert, electra, roberta, distilbert, gpt2, llama, mistral, qwen2, qwen3, gemma2,
   * gemma3_text, phi3, ...
   */
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
  /**
   * arithmetic of the linear maps (attnscope serve --precision): f32, or bf16 (BF16 inputs and
   * weights, F32 sums)
   */
  precision: 'f32' | 'bf16';
  n_params: number;
  /** the classifier's id2label names by class index; [] when the config has none */
  labels: (string | null)[];
  block: Block;
  /**
   * true for an encoder-decoder model (bart, mbart, marian, t5, mt5): a run needs a target (POST /run
   * target or target_ids); layers and block describe its encoder (the server always sends it)
   */
  encoder_decoder?: boolean;
  /** an encoder-decoder model's two stacks (same heads and width), else null */
  stacks?: Stacks | null;
}

/** the encoder and the decoder of an encoder-decoder model */
export interface Stacks {
  encoder: Stack;
  decoder: Stack;
}

export interface Stack {
  layers: number;
  heads: number;
}

/**
 * the architecture family that runs the model (llama: the decoder LLM family, Llama, Mistral, Qwen2/3,
 * Gemma 2/3, Phi-3)
 */
export type Arch = 'bert' | 'roberta' | 'distilbert' | 'gpt2' | 'llama' | 'bart' | 't5';

/**
 * What the views need to know about a model's attention: which key/value head each query head reads,
 * which cells are masked (causal, per-layer sliding windows), the factor and soft-cap on q.k, and the
 * rotary position embedding. Query i of layer l sees key j when (not causal or j <= i) and (window[l]
 * == 0 or j > i - window[l]).
 */
export interface Block {
  /** key/value heads (grouped-query attention when fewer than the query heads) */
  n_kv_head: number;
  /**
   * for each query head h, the key/value head it reads: h / (heads / n_kv_head); query heads of one
   * group share their k and v
   */
  kv_group: number[];
  /** query i sees only keys j <= i */
  causal: boolean;
  /** for each layer, its sliding window w (query i sees keys j > i - w), or 0 for none */
  window: number[];
  /** for each layer, the factor on q.k (1/sqrt(d_head) unless the config fixes it) */
  scale: number[];
  /** Gemma 2: scores = c tanh(scores / c) before the mask; 0 = none */
  attn_softcap: number;
  /** Gemma 2: logits = c tanh(logits / c); 0 = none */
  final_softcap: number;
  /** the rotary position embedding, or null (learned or sinusoidal positions) */
  rope: Rope | null;
}

/**
 * Rotary position embedding (Su et al. 2021, RoFormer): the first dim dimensions of each head's q and
 * k are rotated by position-dependent angles before q.k
 */
export interface Rope {
  /** rotated dimensions of each head (partial_rotary_factor * d_head) */
  dim: number;
  /** rotary base (rope_theta) */
  theta: number;
  /** Gemma 3: the base of the sliding-window layers (rope_local_base_freq), or null */
  local_theta: number | null;
  /** for each layer, the base it uses */
  layer_theta: number[];
  /**
   * rope_scaling type (none, linear, llama3, yarn, dynamic, longrope; the last two depend on the
   * input's length); Gemma 3's local layers are never scaled
   */
  scaling: 'none' | 'linear' | 'llama3' | 'yarn' | 'dynamic' | 'longrope';
  /** the scaling factor, or null without scaling */
  factor: number | null;
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
  /**
   * the runs of the --attention files (attention computed elsewhere, no model), opened by id like any
   * run; [] without them
   */
  imported?: RunResponse[];
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
  /** H (query heads) */
  heads: number;
  /** Hkv: key/value heads (H without grouped-query attention) */
  kv_heads: number;
  /** D (0 for imported attention without queries and keys) */
  d_model: number;
  /** Dh (0 for imported attention without queries and keys) */
  d_head: number;
}

/** POST /api/v1/run and GET /api/v1/runs/{id} */
export interface RunResponse {
  /** the cached run's id: 16 hex digits */
  id: string;
  model: string;
  /** the model's architecture family, or npz for attention imported from an .npz file (--attention) */
  arch: Arch | 'npz';
  /** as in config.json */
  model_type: string;
  /** true when the same (model, text, text_b) or (model, ids) was already in the cache */
  cached: boolean;
  /** the text run; "" for a run from ids */
  text: string;
  text_b: string | null;
  /** the token ids of a run made from ids, else null */
  ids: number[] | null;
  causal: boolean;
  sizes: RunSizes;
  block: Block;
  tokens: Token[];
  /** the tokenizer's last warning (invalid UTF-8 replaced, ...), or null */
  warning: string | null;
  /**
   * what the run kept (the server always sends it; optional for runs embedded in a page): dense =
   * every head's T x T attention and scores (attention, qk routes), stats,qkv = q, k, v and head
   * statistics only, O(T) per head, its attention served by the tile route
   */
  capture?: Capture;
  source?: RunSource;
  /**
   * true for an encoder-decoder run: tokens, sizes and block are the encoder's (the source), decoder
   * the decoder's input; the tensor routes take kind=encoder|decoder|cross (the server always sends
   * it)
   */
  encoder_decoder?: boolean;
  /** an encoder-decoder run's decoder input, else null */
  decoder?: DecoderInput | null;
}

/**
 * the decoder side of an encoder-decoder run: its input (the target shifted right for teacher forcing,
 * or target_ids as given), its tokens (the rows of decoder and cross attention) and the blocks of its
 * self-attention (causal) and cross-attention (queries: decoder tokens, keys: the encoder's tokens)
 */
export interface DecoderInput {
  /** the target text, or null for a run from target_ids */
  target: string | null;
  /** the decoder input ids (Tt) */
  input_ids: number[];
  /** the decoder's tokens (Tt); offsets refer to the target text */
  tokens: Token[];
  /** decoder layers Ld (decoder and cross attention) */
  layers: number;
  /** the decoder self-attention's block (causal, Ld layers) */
  block: Block;
  /** the cross-attention's block (not causal, Ld layers) */
  cross_block: Block;
}

/**
 * where an imported run's attention came from (absent for a model's run): an --attention file, or an
 * imported sentence of the analysis database (GET /api/v1/db/runs/{id}/sentences/{idx}/run). Only the
 * run, attention and qk routes serve it; the routes that need a model answer 409
 */
export interface RunSource {
  kind: 'npz';
  /**
   * attnscope: the npz of `attnscope run --format npz` (attentions); bertviz: bertviz-style arrays
   * (attention); import: a sentence's NNNN.attention.npy in the --import-dir folder of an imported
   * analysis run
   */
  layout: 'attnscope' | 'bertviz' | 'import';
  /** the file's name, also the run's model field */
  file: string;
  /**
   * the file has queries, keys and attention_scores: the neuron view (qk route) works (never for
   * layout import: attnscope import keeps attention only)
   */
  neuron: boolean;
  /** layout import: the analysis run's id */
  db_run?: number;
  /** layout import: the sentence's index in that run */
  sent?: number;
}

/**
 * a run's capture: dense (T x T attention and scores of every head, q/k/v, statistics) or stats,qkv
 * (q/k/v and statistics only; attention recomputed per tile)
 */
export type Capture = 'dense' | 'stats,qkv';

/**
 * Body of POST /api/v1/run: a text (and text_b), or token ids (any model; the only input of a model
 * without a tokenizer). Unknown fields are ignored.
 */
export interface RunRequest {
  model: string;
  /** required unless ids is given */
  text?: string;
  /** null or "" means a single sentence */
  text_b?: string | null;
  /**
   * token ids, 1 to max_tokens of them, each below vocab_size, run as they are (no special tokens
   * added); not with text
   */
  ids?: number[];
  /**
   * auto (default): dense up to 1024 tokens (SRV_LONG_TOKENS), stats,qkv above; or forced. Part of the
   * cache key. An encoder-decoder run is always dense (stats,qkv is a 400; source and target up to
   * 1024 tokens each)
   */
  capture?: 'auto' | 'dense' | 'stats,qkv';
  /**
   * encoder-decoder models: the target text, tokenized like a source and shifted right
   * (decoder_start_token_id first) as the decoder's input; exactly one of target and target_ids is
   * required for them, and either is a 400 for other models. Part of the cache key
   */
  target?: string;
  /** encoder-decoder models: the decoder input ids, used as given (BART: 2, 0, ...) */
  target_ids?: number[];
}

/**
 * Body of POST /api/v1/generate: a causal LM continues the prompt, or an encoder-decoder model (bart,
 * mbart, marian, t5, mt5) writes its decoder's sequence for the prompt as source
 * (src/server/gen_api.c, the steps of `attnscope generate`). Greedy, sampled (temperature, top_k,
 * seed) or beam search (beams 2 or more: Hugging Face generate's num_beams; sampling fields and
 * stop_at_eos are then refused, and num_return, length_penalty and early_stopping need it). Exactly
 * one of text and ids. Unknown fields are a 400.
 */
export interface GenerateRequest {
  model: string;
  /**
   * the prompt (an encoder-decoder model's source), tokenized with the model's special tokens (e.g.
   * BOS)
   */
  text?: string;
  /** the prompt as token ids (models without a tokenizer) */
  ids?: number[];
  /**
   * encoder-decoder models only: the decoder's first ids (default: [decoder_start_token_id]; mBART:
   * the target language code)
   */
  target_ids?: number[];
  /** tokens to generate, 1..128 (SRV_GEN_MAX_NEW; fewer at the model's positions); default 20 */
  max_new?: number;
  /**
   * 0: greedy (the default without top_k); above 0: sampling from softmax(logits / temperature); 1
   * when only top_k is given
   */
  temperature?: number;
  /** sample among the k most likely ids (needs a temperature above 0) */
  top_k?: number;
  /**
   * the sampling stream's seed (splitmix64): the same seed gives the same tokens as `attnscope
   * generate --seed`; default 0
   */
  seed?: number;
  /** stop after the model's end-of-sequence token */
  stop_at_eos?: boolean;
  /** the rows' dtype; default f32 (exact) */
  dtype?: 'f32' | 'f16';
  /** beam search with this many beams, 2..16 (GEN_MAX_BEAMS); default 1: no beam search */
  beams?: number;
  /** beam search: hypotheses returned, best first, 1..beams; default 1 */
  num_return?: number;
  /**
   * beam search: a hypothesis' score is its sum of log-probabilities /
   * generated_length^length_penalty, -10..10; default 1
   */
  length_penalty?: number;
  /**
   * beam search: stop once `beams` hypotheses are finished (Hugging Face's early_stopping=True);
   * default false
   */
  early_stopping?: boolean;
  /**
   * greedy and sampled generation: keep each step's top most probable next ids (meta.candidates),
   * 0..20 (GEN_MAX_TOP); default 0
   */
  top?: number;
}

/** GenerateMeta.candidates[s][i]: one of step s's most probable next ids */
export interface GenerateCandidate {
  id: number;
  /** the token's text (as_model_token_text; ill-formed UTF-8 as U+FFFD) */
  text: string;
  /** softmax of the step's logits after the configured processors, before temperature and top-k */
  prob: number;
}

/** GenerateMeta.hypotheses[i]: a sequence returned by beam search */
export interface GenerateHypothesis {
  /** the prompt (decoder's start), then the generated ids (an end-of-sequence id included) */
  ids: number[];
  generated_ids: number[];
  tokens: Token[];
  /** sum_logprobs / generated_length^length_penalty (what ranks the hypotheses) */
  score: number;
  /** sum of the generated tokens' log-probabilities */
  sum_logprobs: number;
}

/**
 * meta of POST /api/v1/generate: tensor attention (steps, L, H, T), T = prompt_length + steps; at step
 * s every head's attention row of the position that chose the new token (position prompt_length - 1 +
 * s) over the prompt and the tokens before it, keys after that position 0 (the generation_attentions
 * of `attnscope generate --out`; an encoder-decoder model's decoder self-attention). Encoder-decoder
 * models add cross_attention (steps, L, H, Ts): the same positions' rows over the Ts source tokens.
 * Beam search returning more than one hypothesis adds beam_attention (R, Smax, L, H, Tmax) and, for
 * encoder-decoder models, beam_cross_attention (R, Smax, L, H, Ts): every hypothesis' rows, zero after
 * its end; attention and cross_attention are then the best hypothesis' (the first). Rows the
 * generation keeps no copy of (beam search, the decoder of an encoder-decoder model) come from one
 * forward over the final sequence, which for a causal decoder is the row its step saw.
 */
export interface GenerateMeta {
  model: string;
  /** tokens of the prompt, special tokens included (an encoder-decoder model: of the decoder's start) */
  prompt_length: number;
  /** tokens generated */
  steps: number;
  /** layers of the rows (an encoder-decoder model's decoder) */
  layers: number;
  heads: number;
  /** (T) the final sequence: the prompt (decoder's start), then the generated ids */
  ids: number[];
  /** (steps) */
  generated_ids: number[];
  /** (T) the final sequence's tokens */
  tokens: Token[];
  /** the temperature used (0: greedy, and beam search) */
  temperature: number;
  /** 0: all ids */
  top_k: number;
  seed: number;
  /** whether generation ended at an end-of-sequence id (always with beam search) */
  stop_at_eos: boolean;
  /** true when the model is encoder-decoder: the prompt was its source */
  encoder_decoder: boolean;
  /** encoder-decoder models: (Ts) the source's ids */
  source_ids?: number[];
  /** encoder-decoder models: (Ts) the source's tokens, the keys of cross_attention */
  source_tokens?: Token[];
  /** 1, or the beams of beam search */
  beams: number;
  /** beam search: the returned hypotheses, best first (the first is ids / tokens above) */
  hypotheses?: GenerateHypothesis[];
  /** beam search: the length penalty used */
  length_penalty?: number;
  /** beam search: whether it stopped early */
  early_stopping?: boolean;
  /**
   * greedy and sampled generation: (steps) the probability the model gave each chosen id (softmax of
   * the logits after the configured processors, before temperature and top-k)
   */
  probs?: number[];
  /**
   * with request top: (steps, <= top) each step's most probable ids, most probable first (ties: lower
   * id)
   */
  candidates?: GenerateCandidate[][];
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

/** one token's log-probability before and after the intervention */
export interface InterveneToken {
  id: number;
  text: string;
  before: number;
  after: number;
}

/**
 * GET
 * /api/v1/runs/{id}/intervene?heads=L:H,...&knockout=L[:H]:Q>K,...[&mode=zero|mean][&renorm=0|1][&position=P][&top=K][&target=ID]
 * (docs/attribution.md, Interventions): the output without and with heads ablated / attention edges
 * knocked out; a classifier's class probabilities, or an LM's log-probabilities at position
 */
export interface InterveneResponse {
  run: string;
  kind: 'classifier' | 'lm';
  /** the row of logits compared: the token a classifier reads, or the LM position */
  position: number;
  /** classifier: every class's probability before and after */
  classes?: {
    index: number;
    /** id2label's name, or empty */
    label: string;
    before: number;
    after: number;
  }[];
  /** lm: the top tokens before the intervention */
  top_before?: InterveneToken[];
  /** lm: the top tokens after */
  top_after?: InterveneToken[];
  /** lm: the target token (default: the prediction before) */
  target?: InterveneToken;
}

/**
 * a per-token attribution method scored by the faithfulness route (docs/attribution.md, Faithfulness);
 * random is the baseline order
 */
export type FaithfulnessMethod = 'grad' | 'gxi' | 'ig' | 'rollout' | 'flow' | 'norm' | 'norm2' | 'alti' | 'grad-attn' | 'random';

/** one method's curves and scores on the input; n = FaithfulnessResponse.tokens */
export interface FaithfulnessMethodResult {
  method: FaithfulnessMethod;
  /** 1/(n+1) sum_k (deletion[0] - deletion[k]) (Samek et al. 2017); higher = more faithful */
  aopc_deletion: number;
  /** 1/(n+1) sum_k (insertion[k] - insertion[0]); higher = more faithful */
  aopc_insertion: number;
  /**
   * ERASER (DeYoung et al. 2020): mean over the bins of p - deletion[ceil(b n / 100)]; higher = more
   * faithful
   */
  comprehensiveness: number;
  /** ERASER: mean over the bins of p - insertion[ceil(b n / 100)]; lower = more faithful */
  sufficiency: number;
  /** per bin of FaithfulnessResponse.bins */
  comprehensiveness_bins: number[];
  /** per bin */
  sufficiency_bins: number[];
  /** the n removable token positions, most relevant first (ties to the earlier position) */
  order: number[];
  /** the method's score of each of the T tokens (random: n - rank) */
  relevance: number[];
  /** n + 1 probabilities of the predicted class with the k most relevant tokens removed, k = 0..n */
  deletion: number[];
  /** n + 1 probabilities with only the k most relevant tokens kept */
  insertion: number[];
}

/**
 * GET
 * /api/v1/runs/{id}/faithfulness[?methods=grad,...,random][&removal=delete|mask][&steps=N][&seed=S]
 * (docs/attribution.md, Faithfulness): how faithful each per-token attribution of a sequence
 * classifier's prediction is on the run's input; without methods every method (flow up to 128 tokens).
 * 400 for a model without a classifier head, an input without removable tokens or with more than 256
 */
export interface FaithfulnessResponse {
  run: string;
  /** the class predicted on the whole input, whose probability the curves read */
  predicted: number;
  /** its id2label name, or LABEL_i */
  label: string;
  /** every class's probability on the whole input */
  probs: number[];
  /** n: the removable tokens (every token but the model's special ones) */
  tokens: number;
  /** the predicted class's probability with every removable token removed */
  empty: number;
  /** delete: tokens taken out of the input; mask: replaced by [MASK] (or [UNK]) */
  removal: 'delete' | 'mask';
  /** ERASER's bins, percent of the removable tokens */
  bins: number[];
  methods: FaithfulnessMethodResult[];
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
  /**
   * ?kind=: encoder (default; a single-stack model's one stack), decoder or cross (encoder-decoder
   * runs only, else 400). Cross-attention: rows are the decoder's tokens, columns the encoder's:
   * [layers, heads, T, keys]
   */
  kind?: AttentionKind;
  /** columns per row: the encoder's tokens for cross, else T */
  keys?: number;
  /**
   * with pool on cross-attention whose keys differ in count from the rows: the pooled column count
   * min(N, keys)
   */
  pool_keys?: number;
}

/**
 * meta of GET /api/v1/runs/{id}/attribution?method=M[&target=C][&position=P][&dtype=f32|f16|u8]
 * (docs/attribution.md): one tensor attribution, (T, T) for rollout, flow and grad (rows = output
 * tokens, columns = input tokens), (layers, heads, T, T) for norm, (layers, heads) for importance,
 * (layers, T, T) for norm2 and alti; f32 unless dtype says otherwise
 */
export interface AttributionMeta {
  run: string;
  method: AttributionMethod;
  /** T */
  tokens: number;
  /**
   * grad and importance only: the class (classifier) or token id (LM / masked-LM head) whose logit is
   * explained
   */
  target?: number;
  /**
   * grad and importance only: the token whose prediction is explained (the one a classifier reads, or
   * the LM position)
   */
  position?: number;
  /** grad and importance only: the logit explained */
  logit?: number;
}

/**
 * meta of GET
 * /api/v1/runs/{id}/maps?method=M[&layers=a-b][&heads=c-d][&pool=N][&dtype=f32|f16|u8][&target=C&position=P]
 * (docs/server.md): one tensor maps, (nl, nh, S, S) in the layout of the attention route (rows =
 * output tokens, columns = input tokens; S = T, or the pooled side with pool), f32 unless dtype says
 * otherwise. per = head: norm, one map per layer and head of the ranges; layer: norm2, alti, rollout,
 * flow and grad, one map per layer (nh = 1, heads ignored), alti's, rollout's, flow's and grad's layer
 * l cumulative (the method through layers 0..l; the last layer's is the whole model's map, the
 * attribution route's). Flow is refused (400) over 128 tokens or when T^2 L (L + 1) / 2 exceeds a
 * 12-layer model's at 128 tokens. The result is computed once per run, method, target and position and
 * kept with the run
 */
export interface MapsMeta {
  run: string;
  method: MapsMethod;
  /** what one map covers: a head or a layer */
  per: 'head' | 'layer';
  /** [first, last] layer of the maps, inclusive */
  layers: number[];
  /** [first, last] head, inclusive ([0, 0] unless per = head) */
  heads: number[];
  /** T */
  tokens: number;
  /** the side S of the max-pooled maps, with pool=N only */
  pool?: number;
  pool_op?: 'max';
  /** grad only: the class or token id whose logit is explained */
  target?: number;
  /** grad only: the token whose prediction is explained */
  position?: number;
  /** grad only: the logit explained */
  logit?: number;
  /**
   * whether the method's result was already kept with the run (computed by an earlier request; at most
   * 4 are kept per run, least recently used dropped)
   */
  cached: boolean;
}

/**
 * the methods the maps route serves: attribution methods with token-to-token maps
 * (docs/attribution.md)
 */
export type MapsMethod = 'norm' | 'norm2' | 'alti' | 'rollout' | 'flow' | 'grad';

export interface LensToken {
  id: number;
  text: string;
  /** softmax probability of the layer's lens logits */
  prob: number;
  logit: number;
}

/**
 * GET /api/v1/runs/{id}/lens[?position=P][&top=K]: the logit lens (as `attnscope lens --format json`):
 * each layer's hidden state at position P (default: the last token) through the final norm and the LM
 * / masked-LM head, its top K (default 5, at most 50) tokens; layer 0 = the embeddings, the last = the
 * model's output
 */
export interface LensResponse {
  run: string;
  position: number;
  /** the token id at position */
  id: number;
  layers: {
    layer: number;
    top: LensToken[];
  }[];
}

/**
 * meta of GET
 * /api/v1/runs/{id}/tile?layer=L&head=H[&rows=a-b][&cols=c-d][&n=N][&exclude=k,...][&dtype=f32|f16|u8]:
 * tensors max and mean, (Pr, Pc) = (min(N, rows), min(N, cols)): the largest and the mean weight of
 * each block of one head's attention; block i of the rows covers a + [floor(i*R/Pr),
 * floor((i+1)*R/Pr)), R = b - a + 1 (likewise columns); at full resolution each cell is one weight
 */
export interface TileMeta {
  run: string;
  layer: number;
  head: number;
  /** T */
  tokens: number;
  /** queries, inclusive range */
  rows: IndexRange;
  /** keys, inclusive range */
  cols: IndexRange;
  /** [Pr, Pc]: blocks per side */
  pool: [number, number];
  /** keys left out, each row renormalised over the others (the attention sink); [] for none */
  exclude: number[];
  /**
   * layers=a-b&heads=c-d requests (a block of heads; tensors (layers, heads, Pr, Pc); layer and head
   * are then its first): the layers, inclusive
   */
  layers?: IndexRange;
  /** the heads of such a request, inclusive */
  heads?: IndexRange;
  /**
   * dense: pooled from the captured attention; recomputed: rows recomputed from the captured q and k
   * (a stats,qkv run)
   */
  source: 'dense' | 'recomputed';
}

/**
 * meta of GET /api/v1/runs/{id}/stats[?dtype=f32|f16|u8]: one tensor head_stats (layers, heads, 8),
 * each the mean over the query rows (docs/engine.md, Capture)
 */
export interface StatsMeta {
  run: string;
  /** T */
  tokens: number;
  /** the names of the last axis */
  stats: ['entropy', 'sink', 'self', 'prev', 'next', 'dist', 'spread', 'max'];
}

/**
 * meta of GET /api/v1/runs/{id}/thumbs[?layers=a-b][&heads=c-d][&op=max|mean|both][&dtype=f32|f16|u8]:
 * every head's thumbnail pooled by the forward (the model view of a long run in one request): tensors
 * max and / or mean (layers, heads, S, S), S = pool = min(T, 64), each the largest and the mean weight
 * of a block (block i covers [floor(i*T/S), floor((i+1)*T/S)), as the tile route's), and head_stats
 * (layers, heads, 8) as the stats route's
 */
export interface ThumbsMeta {
  run: string;
  /** T */
  tokens: number;
  /** S: blocks per side of every thumbnail */
  pool: number;
  /** the layers, inclusive */
  layers: IndexRange;
  /** the heads, inclusive */
  heads: IndexRange;
  /** the names of head_stats' last axis */
  stats: ['entropy', 'sink', 'self', 'prev', 'next', 'dist', 'spread', 'max'];
}

/**
 * rollout and flow (Abnar & Zuidema 2020), norm (Kobayashi et al. 2020), grad (Chefer et al. 2021),
 * importance (Michel et al. 2019), norm2 (Kobayashi et al. 2021), alti (Ferrando et al. 2022)
 */
export type AttributionMethod = 'rollout' | 'flow' | 'norm' | 'grad' | 'importance' | 'norm2' | 'alti';

/** [first, last], inclusive */
export type IndexRange = [number, number];

/**
 * meta of GET /api/v1/runs/{id}/qk: tensors q, k (T, Dh), scores, attention (T, T), and for a rotary
 * model (rope true) q_pre_rope, k_pre_rope (T, Dh): q and k before the rotation; all f32. The server
 * always sends kv_group, window, rope and softcap (optional for runs embedded in a page without them)
 */
export interface QkMeta {
  run: string;
  layer: number;
  head: number;
  tokens: number;
  d_head: number;
  /**
   * the factor the model applies to q.k in this layer (as_attn_scale): scores = q . k * scale,
   * soft-capped when softcap > 0, + mask. 1/sqrt(d_head) unless the config says otherwise (GPT-2
   * scale_attn_weights false: 1, scale_attn_by_inverse_layer_idx: also / (layer + 1); Gemma:
   * query_pre_attn_scalar^-1/2)
   */
  scale: number;
  /** the key/value head this query head reads (k is that head's) */
  kv_group?: number;
  /** this layer's sliding window (query i sees keys j > i - window), 0 = none */
  window?: number;
  /**
   * true when q and k are rotated (RoPE): q and k are after the rotation, q_pre_rope and k_pre_rope
   * before it
   */
  rope?: boolean;
  /** Gemma 2's soft-cap c on the scores (scores = c tanh(q.k scale / c) + mask), 0 = none */
  softcap?: number;
  /**
   * ?kind= as for the attention route; cross: q (T decoder tokens, Dh), k (keys encoder tokens, Dh),
   * scores and attention (T, keys)
   */
  kind?: AttentionKind;
  /** rows of k, columns of scores and attention */
  keys?: number;
}

/**
 * which attention of an encoder-decoder run: the encoder's self-attention, the decoder's (causal)
 * self-attention, or the cross-attention (decoder queries, encoder keys)
 */
export type AttentionKind = 'encoder' | 'decoder' | 'cross';
