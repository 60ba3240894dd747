/* attnscope/analysis.h — what attnscope computes about attention beyond one forward:
 * per-token gradient saliency, the corpus-scale head analysis into SQLite (`attnscope
 * analyze`, `import`), its text report and JSON export, and what a reader of the
 * analysis database needs. Part of the tools' API (see attnscope.h, "Library and
 * tools"): the CLI and the server are built on it.
 * Also the attribution methods past raw attention (rollout, flow, norm-based,
 * gradient-weighted attention, head importance).
 * What it does not: the per-sentence scoring, the store's writers and the runner's
 * chunks, which are internal to the library (src/analysis).
 * Formulas, their sources and the database schema: docs/analysis.md.
 */
#ifndef ATTNSCOPE_ANALYSIS_H
#define ATTNSCOPE_ANALYSIS_H

#include "attnscope.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- saliency --------------------------------------------------------------
 * One score per token of a sequence classifier's prediction (the target class, or the
 * predicted one): SAL_GRAD || d logit_c / d w_t ||_1 (Simonyan et al. 2013) on the word
 * embedding w_t, as Dodrio shows it; SAL_GXI gradient x input (Shrikumar et al. 2016),
 * signed; SAL_IG integrated gradients (Sundararajan et al. 2017, midpoint rule, zero
 * word-vector baseline), signed, with its completeness gap. Dropout off.
 * Details: src/analysis/saliency.h. */

typedef enum { SAL_GRAD = 0, SAL_GXI, SAL_IG } sal_method;

#define SAL_DEFAULT_STEPS 32
#define SAL_MAX_STEPS 4096

typedef struct {
    sal_method method;
    int target; /* class to explain; -1 = the predicted class */
    int steps;  /* SAL_IG steps m, 1..SAL_MAX_STEPS; 0 = SAL_DEFAULT_STEPS */
    float *attn_out; /* optional, caller-owned (L, H, T, T): the attention probabilities of the
                        forward on the input itself (so a caller needs no second forward) */
    int threads;     /* threads of the forward and backward; 0 = train_set_threads's count
                        (default: the cores). The scores do not depend on it */
} sal_opts;

typedef struct {
    sal_method method;
    int T, C;
    int target, predicted;
    float *scores;  /* (T) one score per token */
    float *logits;  /* (C) */
    float *probs;   /* (C) softmax of the logits */
    /* SAL_IG only (else 0) */
    int steps;
    float ig_sum;   /* sum_t scores[t] */
    float ig_delta; /* logit_target(input) - logit_target(baseline) */
    float ig_gap;   /* |ig_sum - ig_delta|: the completeness error of the step count */
} sal_result;

/* Computes saliency of enc under model m. *out is filled (sal_result_free).
 * Errors: AS_ERR_INPUT when the model has no classifier head or cannot be trained
 * (GPT-2, ELECTRA), the encoding is empty / too long / out of vocabulary, the target
 * is out of range [0, C) or steps out of range. */
as_status sal_compute(const as_model *m, const as_encoding *enc, const sal_opts *o, sal_result *out,
                      as_error *err);
void sal_result_free(sal_result *r);

const char *sal_method_name(sal_method m);            /* "grad", "gxi", "ig" */
int sal_method_parse(const char *s, sal_method *out); /* 0 ok, -1 unknown */

/* ---- attribution beyond raw attention weights ---------------------------------
 * On one input (formulas, sources and costs: docs/attribution.md, src/analysis/attrib.h):
 *   ATTR_ROLLOUT     attention rollout (Abnar & Zuidema 2020): R = Â_L ... Â_1 with
 *                    Â_l = rows-renormalised 0.5 mean_h A_l + 0.5 I; (T, T)
 *   ATTR_FLOW        attention flow (same paper): max-flow from input token j to output
 *                    token i through the layered graph with capacities Â_l, each row
 *                    normalised to sum 1 as the authors' code does; (T, T), T <= ATTR_FLOW_MAX_T
 *   ATTR_NORM        norm-based attention (Kobayashi et al. 2020): ||A_ij f_h(x_j)|| with
 *                    f_h(x_j) = v_j W_o^h; (L, H, T, T)
 *   ATTR_GRAD        gradient-weighted attention (Chefer et al. 2021): R = I, then per layer
 *                    R += mean_h (dy/dA ⊙ A)^+ R; (T, T)
 *   ATTR_IMPORTANCE  head importance (Michel et al. 2019): |sum_ij A_ij dy/dA_ij|; (L, H)
 *   ATTR_NORM2       residual- and norm-aware norm-based attention of each layer's whole
 *                    attention block (Kobayashi et al. 2021): ||T_i(x_j)||, T_i(x_j) the part
 *                    of token i's block output (attention + residual + the norm after it)
 *                    that comes from input token j; (L, T, T)
 *   ATTR_ALTI        ALTI (Ferrando et al. 2022): c_ij from the Manhattan distance of T_i(x_j)
 *                    to the block output, rows normalised, aggregated over layers
 *                    (R_l = C_l ... C_1); (L, T, T), layer l = cumulative up to l
 * y (ATTR_GRAD, ATTR_IMPORTANCE) is one logit: the target class of a sequence classifier,
 * or the target token's logit at `position` of an LM / masked-LM head. Rows of (T, T)
 * results are output tokens (queries), columns input tokens. */

typedef enum { ATTR_ROLLOUT = 0, ATTR_FLOW, ATTR_NORM, ATTR_GRAD, ATTR_IMPORTANCE, ATTR_NORM2, ATTR_ALTI } attr_method;

/* Longest input attention flow takes: T^2 max-flow problems on (L + 1) T nodes and
 * L T^2 edges each (docs/attribution.md measures it). */
#define ATTR_FLOW_MAX_T 128

typedef struct {
    attr_method method;
    int target;   /* ATTR_GRAD / ATTR_IMPORTANCE: class (classifier) or token id (LM / MLM
                     head) whose logit is explained; -1 = the predicted one. Others: -1 */
    int position; /* LM / MLM head: the position whose logits are explained; -1 = the last
                     token with attention mask 1. Must be -1 for a classifier and for the
                     methods without a gradient */
    int threads;  /* forward / backward threads; 0 = the cores */
    int layers;   /* ATTR_ROLLOUT, ATTR_FLOW, ATTR_GRAD: 1 = every layer's map, cumulative up
                     to it (the rollout of layers 0..l; the flow from layer 0 to layer l's
                     output; the gradient-weighted propagation through layers 0..l), (L, T, T),
                     the last the model's; 0 = the model's, (T, T). Others: 0 */
} attr_opts;

typedef struct {
    attr_method method;
    int T, L, H;
    int ndim;         /* 2, 3 or 4 */
    int64_t shape[4]; /* (T, T), (L, H, T, T), (L, H) or (L, T, T) */
    float *data;      /* the result, shape above, owned */
    /* ATTR_GRAD / ATTR_IMPORTANCE only (else -1 and 0) */
    int target;       /* the class or token id explained */
    int position;     /* the token whose prediction it is: the position given or found for an
                         LM / MLM head, the token the classifier reads ([CLS]: 0, or the last
                         real token of a GPT-2 / LLaMA-family score head) */
    float logit;      /* y, the logit explained */
} attr_result;

/* Computes method o->method on enc under m into *out (attr_result_free). One forward
 * (rollout, flow, norm) or one forward and one backward (grad, importance) on the loaded
 * weights. Errors: AS_ERR_INPUT for an empty encoding, flow beyond ATTR_FLOW_MAX_T
 * tokens, grad / importance on a model without a task head, target or position out of
 * range, a position given where it does not apply. */
as_status attr_compute(const as_model *m, const as_encoding *enc, const attr_opts *o, attr_result *out,
                       as_error *err);
/* The same from a run r of enc under m that captured every layer's and head's attention
 * (CAP_ATTN; and CAP_QKV for ATTR_NORM): rollout, flow and norm read r and run no forward
 * (the server's cached runs); grad and importance run attr_compute, and so do norm2 and
 * alti unless r also holds the values and hidden states (CAP_QKV | CAP_HIDDEN). r and enc are only
 * read. Errors as attr_compute, and AS_ERR_INPUT when r lacks what the method reads. */
as_status attr_compute_run(const as_model *m, const as_encoding *enc, const as_run *r, const attr_opts *o,
                           attr_result *out, as_error *err);
void attr_result_free(attr_result *r);
/* F (T, T) = row-normalised attention flow of A (L, H, T, T) (a zero row stays zero); with
 * L = l + 1 layers of a run's attention, the flow to layer l's output (the server computes
 * one layer's map at a time this way). threads: 0 or 1 = the calling thread only. Errors:
 * AS_ERR_INPUT when T > ATTR_FLOW_MAX_T; AS_ERR_INTERNAL out of memory. */
as_status attr_flow(const float *A, int L, int H, int T, int threads, float *F, as_error *err);

/* Writes r (computed on enc under m) as an .npz archive at path: input_ids (T), tokens and
 * token_text (unicode), the result under the method's name (rollout, flow, grad: (T, T);
 * norm: (L, H, T, T); importance: (L, H); norm2, alti: (L, T, T)), and for grad / importance target, position
 * (int32 (1,)) and logit (float32 (1,)). Only reads its inputs. Errors: AS_ERR_INPUT
 * when path cannot be created; AS_ERR_INTERNAL out of memory or a failed write. */
as_status attr_write_npz(const as_model *m, const as_encoding *enc, const attr_result *r, const char *path,
                         as_error *err);
/* The same with the result's array under `name` (NULL: attr_method_name) and, when rel is
 * not NULL, rel (T) as `relevance` (float32). A per-layer rollout, flow or grad result
 * (attr_opts.layers: (L, T, T)) is written as its last layer, the whole model's (T, T),
 * under `name` and whole under `name`_layers. */
as_status attr_write_npz_named(const as_model *m, const as_encoding *enc, const attr_result *r, const char *name,
                               const float *rel, const char *path, as_error *err);
/* Writes saliency r (computed on enc under m) as an .npz archive at path: input_ids,
 * tokens, token_text as attr_write_npz, the scores (T) under the method's name (grad, gxi,
 * ig) and again as `relevance`, target (int32 (1,)), logit (float32 (1,): the target's);
 * for ig also steps (int32 (1,)) and logit_delta (float32 (1,): logit - baseline logit).
 * Errors as attr_write_npz. */
as_status sal_write_npz(const as_model *m, const as_encoding *enc, const sal_result *r, const char *path,
                        as_error *err);
/* rel (T) = r's per-token relevance for the prediction it explains: the row of the token
 * whose prediction is read (r->position for grad; else the token a classifier's head reads,
 * [CLS] or the last real token of a score head, or the last real token of an LM / MLM
 * head) of the whole model's map (rollout, flow, grad, alti: the last layer's cumulative
 * one), of the last layer's (norm2), or of the last layer's summed over heads (norm).
 * The one definition `attnscope faithfulness` and `attnscope attribute` use. Errors:
 * AS_ERR_INPUT for importance (per head, not per token) or r not computed on enc. */
as_status attr_relevance(const as_model *m, const as_encoding *enc, const attr_result *r, float *rel,
                         as_error *err);
/* "rollout", "flow", "norm", "grad", "importance", "norm2", "alti" */
const char *attr_method_name(attr_method m);
/* 0 ok, -1 unknown; the names above and "grad-attn" (= ATTR_GRAD) */
int attr_method_parse(const char *s, attr_method *out);

/* ---- interventions ----------------------------------------------------------------
 * The output of the model with and without an intervention on its attention (head
 * ablation, attention knockout: as_intervention in attnscope.h, applied inside the one
 * forward), side by side (docs/attribution.md, "Interventions"). */

typedef struct {
    int position; /* LM / masked-LM head: the row of logits compared; -1 = the last token with
                     attention mask 1 (a causal LM's next-token prediction). Classifier: -1 */
    int threads;  /* 0 = the cores */
} iv_opts;

typedef struct {
    int cols;        /* C classes, or V tokens */
    int classifier;  /* 1: a sequence classifier (cols classes), 0: an LM / masked-LM head */
    int position;    /* the row compared (the classifier's: the token its head reads) */
    float *base;     /* (cols) log-probabilities (log-softmax of the logits) without the
                        intervention, owned */
    float *after;    /* (cols) with it, owned */
} iv_result;

/* Runs enc under m twice, without and with iv, and keeps the log-probabilities of one row
 * of logits (iv_result_free). Errors: AS_ERR_INPUT for a model without a task head, an
 * intervention out of range (as as_forward), a position out of range or given to a
 * classifier. */
as_status iv_compare(const as_model *m, const as_encoding *enc, const as_intervention *iv, const iv_opts *o,
                     iv_result *out, as_error *err);
void iv_result_free(iv_result *r);
/* r as JSON (new reference, NULL when out of memory): {"kind": "classifier", "position",
 * "classes": [{"index", "label", "before", "after"}]} (probabilities), or {"kind": "lm",
 * "position", "top_before": [{"id", "text", "before", "after"}] (log-probabilities of the
 * top `top` before), "top_after": [...] (the top after), "target": {...} (token target,
 * or the prediction before when target is -1 or out of range)}. */
/* Most tokens iv_result_json lists per side. */
#define IV_MAX_TOP 100
struct json_t *iv_result_json(const as_model *m, const iv_result *r, int top, int target);
/* Parses "L:H,L:H,..." (heads) into *out (n_out items, malloc'd, caller frees) and
 * "L:i>j,L:H:i>j,..." (edges, H absent or '*' = every head) likewise. 0 ok; -1 with a
 * one-line message in msg (cap bytes) naming the bad item. Ranges are checked by the forward. */
int iv_parse_heads(const char *s, as_head_ref **out, int *n_out, char *msg, size_t cap);
int iv_parse_edges(const char *s, as_edge **out, int *n_out, char *msg, size_t cap);

/* ---- the logit lens ---------------------------------------------------------------
 * One forward of enc keeping the hidden states; every layer's state at position pos (-1 =
 * the last token with attention mask 1) read through the final norm and the LM / masked-LM
 * head (as_run_logit_lens), as *out (new reference): {"position", "id", "layers": [{"layer"
 * (0 = embeddings .. L = the model's output), "top": [{"id", "text", "prob" (softmax),
 * "logit"}]}]}, top tokens per layer, highest first. Errors: AS_ERR_INPUT for a model
 * without an LM / masked-LM head, pos past the input, top outside 1..LENS_MAX_TOP;
 * AS_ERR_INTERNAL out of memory. */
#define LENS_MAX_TOP 100
as_status lens_json(const as_model *m, const as_encoding *enc, int pos, int top, int threads, struct json_t **out,
                    as_error *err);

/* ---- the induction probe ---------------------------------------------------------
 * The model runs on BOS (when it has one) + R seeded random token ids (above the special
 * ids) + the same R ids again (Olsson et al. 2022, sec. 2). On the second copy's query
 * rows i = bos + R + k, k = 1 .. R - 1, whose token first appeared at p = bos + k, every
 * head gets induction = mean A[i, p + 1], previous = mean A[i, i - 1], sink = mean A[i, 0].
 * `attnscope probe --induction` prints them; `attnscope analyze` stores the induction
 * score of causal models (AN_PROBE_LENGTH, AN_PROBE_SEED). */

#define AN_PROBE_LENGTH 50
#define AN_PROBE_SEED 1

typedef struct {
    double induction, previous, sink;
} an_probe_score;

typedef struct {
    int T, R, bos;         /* tokens = bos + 2 R; bos 1 when the model has a BOS id */
    int32_t *ids;          /* (T) the probe's token ids */
    int n_layer, n_head;
    an_probe_score *heads; /* (n_layer, n_head) */
    double loss_first;     /* mean next-token loss (nats) on the first copy's tokens 1 .. R - 1; NAN without an LM head */
    double loss_second;    /* the same on the second copy's tokens 1 .. R - 1 */
} an_probe_result;

/* Runs the probe with R random tokens from seed on m (threads: 0 = cores). *out is
 * filled (an_probe_result_free). Errors: AS_ERR_INPUT when R < 2 or 2 R (+ BOS) tokens
 * exceed the model's positions. */
as_status an_induction_probe(const as_model *m, int R, int seed, int threads, an_probe_result *out, as_error *err);
void an_probe_result_free(an_probe_result *r);

/* ---- corpus analysis and import ------------------------------------------------
 * an_analyze runs the model on every sentence of the corpora once, scores every head
 * and stores the rows and aggregates, resumably (a second call resumes after the last
 * committed chunk, or does nothing when the run is finished). */

#define AN_DEFAULT_CHUNK 16
#define AN_DEFAULT_EXPLAIN 64
#define AN_DEFAULT_MIN_REL 100

typedef struct {
    const char *model_dir; /* an_analyze: the model folder */
    const char *sst2;      /* SST-2 TSV or NULL */
    const char *conllu;    /* CoNLL-U or NULL */
    int limit;             /* sentences per corpus; 0 = all */
    int threads;           /* forward threads; 0 = cores */
    int chunk;             /* K sentences per transaction; 0 = AN_DEFAULT_CHUNK */
    int explain;           /* sentences (from the start) with concentration + ablation; -1 = default, 0 = none */
    int min_rel;           /* relations need this many instances; 0 = AN_DEFAULT_MIN_REL */
    int progress;          /* 1: progress line with ETA on stderr (callers pass isatty(2)) */
    int quiet;             /* 1: no summary line on stdout */
    int topk;              /* an_analyze: store each head's k strongest keys per query (table
                              topk); 0 = none, else 1..AN_TOPK_MAX */
    const char *source;    /* an_analyze of an encoder-decoder model: a parallel corpus, one
                              sentence per line (source and target; both or neither), and */
    const char *target;    /* optionally gold alignments (Pharaoh lines, attnscope/align.h): */
    const char *gold;      /* per-head statistics of the three attention kinds and AER (table
                              encdec_heads) instead of sst2 / conllu; NULL = not given */
    as_precision precision; /* an_analyze: the model's arithmetic (as_model_set_precision); BF16
                              is part of the run's identity (params "precision"), F32 is not */
} an_opts;

/* Analyzes o->model_dir on the corpora (o->source / o->target: the encoder-decoder
 * statistics, docs/analysis.md "Word alignment") into the database at db_path (created when
 * missing). Returns AS_OK also when the run was already complete (nothing done).
 * Errors: AS_ERR_INPUT for bad corpora / model / database naming the file and line. */
as_status an_analyze(const char *db_path, const an_opts *o, as_error *err);

/* Imports a folder of NNNN.attention.npy (float32 [L, H, T, T]) + NNNN.json files (see
 * docs/analysis.md) and scores them like an analyzed model. o: limit, chunk, min_rel,
 * progress, quiet are used. */
as_status an_import_dir(const char *db_path, const char *dir, const an_opts *o, as_error *err);

/* The files of `import --attention A --tokens T [--saliency S] [--dependencies D]`,
 * one sentence per index; saliency and dependencies are NULL or hold n paths too. */
typedef struct {
    int n;
    const char *const *attention;    /* (n) .npy or .npz, float32 [L, H, T, T] (npz: array 'attentions' or the only one) */
    const char *const *tokens;       /* (n) tokens JSON (docs/analysis.md) */
    const char *const *saliency;     /* (n) saliency JSON, or NULL */
    const char *const *dependencies; /* (n) .conllu (one sentence) or Dodrio-style JSON parse, or NULL */
    const char *model_name;          /* runs.model_name; NULL = "import:" + attention[0] */
} an_import_files_opts;

/* Imports sentences given as separate files (attention from any framework) and scores
 * them like an_import_dir. The run is identified by the files' SHA-256 and the
 * parameters, so it resumes and re-running is a no-op. o: limit, chunk, min_rel,
 * progress, quiet are used. Errors: AS_ERR_INPUT naming the file. Borrows f. */
as_status an_import_files(const char *db_path, const an_import_files_opts *f, const an_opts *o, as_error *err);

/* The corpus digest `attnscope import --dir` stores for folder dir: SHA-256 over
 * (name, NUL, bytes) of its *.json files in name order. hex: 64 hex digits + NUL.
 * Errors: AS_ERR_INPUT when the folder or a file cannot be read. */
as_status an_import_digest(const char *dir, char hex[65], as_error *err);

/* ---- reports ---------------------------------------------------------------- */

/* AS_OK when db_path does not exist yet or is a regular file; AS_ERR_INPUT ("PATH: not a
 * regular file") for a FIFO, device, socket or folder, which SQLite would block on or
 * misread. Every opener of an analysis database calls it first. */
as_status an_db_path_check(const char *db_path, as_error *err);

/* Opens the analysis database db_path read-only (it must exist) and prints every run
 * (finished or not) with its top `top` heads per score, the best head per relation and
 * direction, and the heads of each pattern, to out. Errors: AS_ERR_INPUT naming the
 * database when it cannot be opened, is not an attnscope database or is damaged. */
as_status an_report_db(const char *db_path, FILE *out, int top, as_error *err);
/* Opens db_path read-only and writes every finished run's per-head results as JSON to
 * out_path (format: docs/analysis.md). Errors as an_report_db, and for out_path. */
as_status an_export_db(const char *db_path, const char *out_path, as_error *err);

/* ---- reading the analysis database -------------------------------------------- */

/* 2: runs.source ('analyze' | 'import'); 3: sentence_heads.first, head_scores.first and
 * head_scores.induction; 4: table topk; 5: head importance, sink and ALTI columns; 6: table
 * encdec_heads; 7: table topk_cross. A database of an earlier version is upgraded in place by analyze, import,
 * report and export (docs/analysis.md, "Store"). */
#define STORE_SCHEMA_VERSION 7
/* runs.source: what wrote a run, and the only mark of an imported run (its model_name
 * and params say nothing a reader should test). An import's params.source tells
 * `import --dir` ("import") from single files ("import-files"). */
#define STORE_SOURCE_ANALYZE "analyze"
#define STORE_SOURCE_IMPORT "import"

struct sqlite3;
/* Checks an open database (the server's read-only connection too): schema version and
 * every table and column of the schema; errors name path and the first missing table
 * or column. A database of an earlier version gets a line saying how to upgrade it. */
as_status store_check(struct sqlite3 *db, const char *path, as_error *err);
/* 1 when a run's n_layer x n_head read from a database is within AS_MAX_LAYERS,
 * AS_MAX_HEADS and AS_MAX_RUN_HEADS (so that L * H and its square can be allocated). */
int store_run_shape_ok(int n_layer, int n_head);

struct json_t;
struct sqlite3_stmt;
/* Result column i of a row of q as JSON (new reference): null, integer, real (null when
 * not finite) or string (invalid UTF-8 replaced, as_json_string_utf8). */
struct json_t *store_column_json(struct sqlite3_stmt *q, int i);
/* The per-head results of run (n_layer x n_head heads; ASSERTs store_run_shape_ok) of an
 * open database, the one JSON writer of GET /api/v1/db/runs/{id}/heads and of each
 * model's "heads" in `export`: {"run", "layers", "heads", "n_scored": heads with a row,
 * "columns": {field: [n_layer * n_head values, index layer * n_head + head, null where a
 * head has no row]}} (docs/api/db.schema.json, HeadsResponse; the fields are the columns
 * of tables head_scores and patterns). A row whose layer or head is outside the run is
 * an AS_ERR_INPUT naming path when strict, else skipped. *out: new reference
 * (json_decref). Errors: AS_ERR_INTERNAL when the database cannot be read. */
as_status store_heads_json(struct sqlite3 *db, const char *path, int64_t run, int n_layer, int n_head, int strict,
                           struct json_t **out, as_error *err);
/* The per-head results of an encoder-decoder run (analyze --source/--target; table
 * encdec_heads) of an open database, the "encdec_heads" of GET /api/v1/db/runs/{id}/heads
 * and of `export`: {"encoder"|"decoder"|"cross": {"layers", "heads": n_head, "columns":
 * {col: [layers * n_head values, index layer * n_head + head, null where absent]}}}
 * (docs/api/db.schema.json, EncdecHeads). *out NULL for a run without such rows, else a
 * new reference. Errors: AS_ERR_INPUT naming path when a row's layer or head is out of
 * range; AS_ERR_INTERNAL when the database cannot be read. */
as_status store_encdec_heads_json(struct sqlite3 *db, const char *path, int64_t run, int n_head, struct json_t **out,
                                  as_error *err);

/* ---- sparse top-k attention (src/analysis/topk.c, docs/analysis.md "Top-k") -------
 * Per layer, head and query: the k strongest keys (index, weight; strongest first, ties
 * to the lower index; keys of weight 0 never listed, unused slots index -1 weight 0) and
 * the remaining mass (the sum of every other key's weight). `analyze --topk K` stores one
 * BLOB per (sentence, layer, head) in table topk: AN_TOPK_ROW_BYTES(k) bytes per query,
 * k int32 indices, k float32 weights, one float32 remaining mass, little-endian. */
#define AN_TOPK_DEFAULT 8
#define AN_TOPK_MAX 64
#define AN_TOPK_ROW_BYTES(k) ((size_t)(k) * 8 + 4)

/* Which attention a stored top-k is of: the model's self-attention (table topk: an encoder's
 * or a decoder-only model's) or an encoder-decoder run's cross-attention (table topk_cross,
 * `analyze --source --target --topk`: target rows over source keys). */
typedef enum { AN_TOPK_SELF = 0, AN_TOPK_CROSS = 1 } an_topk_kind;

/* The top-k of one attention row (n keys): idx (k), w (k), *rest. k in 1..AN_TOPK_MAX. */
void an_topk_select(const float *row, int n, int k, int32_t *idx, float *w, float *rest);
/* The top-k of n_rows dense attention rows (n_rows, n_keys) into out (n_rows,
 * AN_TOPK_ROW_BYTES(k)) bytes, encoded as stored. k in 1..AN_TOPK_MAX. */
void an_topk_dense(const float *rows, int n_rows, int n_keys, int k, uint8_t *out);
/* The top-k rows of absolute layer l, head h of run r (computed by m with CAP_QKV) into
 * out (T, AN_TOPK_ROW_BYTES(k)) bytes, recomputing the attention a block of query rows at a
 * time (as_run_attention_rows): memory O(T) per call, never T x T. Only reads m and r.
 * Errors: AS_ERR_INPUT for k outside 1..AN_TOPK_MAX or q/k not captured (as there). */
as_status an_topk_head(const as_model *m, const as_run *r, int l, int h, int k, uint8_t *out, as_error *err);

/* One stored query row. */
typedef struct {
    int k, n_query, n_key, query; /* n_key: keys per row (n_query but in cross-attention) */
    int32_t index[AN_TOPK_MAX]; /* (k) key positions, -1 for an unused slot */
    float weight[AN_TOPK_MAX];  /* (k) */
    float rest;                 /* mass of the keys not listed */
} an_topk_row;
/* Reads query `query` of the stored top-k of kind of (run, sent, layer, head) from an open
 * analysis database into *out. Errors: AS_ERR_INPUT when no such row is stored or query is
 * outside the sentence; AS_ERR_INTERNAL (naming path) when the database cannot be read or
 * the row is damaged (k, size or an index out of range). */
as_status store_topk_row(struct sqlite3 *db, const char *path, an_topk_kind kind, int64_t run, int64_t sent,
                         int layer, int head, int query, an_topk_row *out, as_error *err);
/* Every stored top-k row of one sentence. */
typedef struct {
    int L, H, k, n_query, n_key; /* n_key: keys per row (n_query but in cross-attention) */
    int32_t *index; /* (L, H, n_query, k) key positions, -1 for an unused slot */
    float *weight;  /* (L, H, n_query, k) */
    float *rest;    /* (L, H, n_query) mass of the keys not listed */
} an_topk_sentence;
/* Reads the top-k rows of kind of every layer and head of (run, sent) (n_layer x n_head:
 * the decoder's layers for cross-attention) into *out (an_topk_sentence_free; owned by the caller). Errors: AS_ERR_INPUT when the
 * run stored none for the sentence, or when L x H x n_query x k is over max_entries (the
 * caller's bound on what it holds); AS_ERR_INTERNAL (naming path) when the database cannot
 * be read or a row is damaged (k, size, an index or a head out of range, heads missing). */
as_status store_topk_sentence(struct sqlite3 *db, const char *path, an_topk_kind kind, int64_t run, int64_t sent,
                              int n_layer, int n_head, size_t max_entries, an_topk_sentence *out, as_error *err);
/* Frees what store_topk_sentence allocated and zeroes s; NULL or a zeroed s is a no-op. */
void an_topk_sentence_free(an_topk_sentence *s);
/* The mean kept mass of run's stored top-k per layer: mass (n_layer, AN_TOPK_MAX), entry
 * [l][j] = mean over layer l's heads, sentences and query rows of the sum of the j + 1
 * strongest weights (j < *k_out); n_rows (n_layer) the query rows counted. *k_out = the
 * run's k, 0 when it stored none. Errors: AS_ERR_INPUT naming path for a damaged row (a
 * damaged file: `report` exits 2), AS_ERR_INTERNAL for a failed read. */
as_status store_topk_mass(struct sqlite3 *db, const char *path, int64_t run, int n_layer, int n_head, int *k_out,
                          double *mass, int64_t *n_rows, as_error *err);

/* Word-level attention (Clark et al. 2019, sec. 4.1): Wm[a,b] = mean over the pieces i
 * of word a of sum over the pieces j of word b of A[i,j]. word: (T) word index of each
 * token, -1 for tokens outside every word ([CLS], [SEP], pads), which are dropped.
 * Wm: (W, W) written by the call. Words without pieces get all-zero rows/columns. */
void hd_word_attention(const float *A, int T, const int *word, int W, float *Wm);

/* Predicted parent of word a: argmax over b != a of Wm[a,b], restricted to words that
 * have pieces (has_piece[b] != 0); the lowest index wins ties. -1 when no candidate. */
int hd_word_argmax(const float *Wm, int W, int a, const uint8_t *has_piece);

#ifdef __cplusplus
}
#endif
#endif
