/* runner.h — corpus-scale head analysis: runs (or imports) every sentence once, scores
 * every head (analysis/heads.h) and stores per-sentence rows and aggregates in SQLite
 * (analysis/store.h), resumably.
 *
 * What it does: `an_analyze` loads the SST-2 TSV and/or the CoNLL-U corpus, runs the
 * model's forward pass with attention capture on each sentence (plus gradient saliency
 * on SST-2 sentences when the model has a trainable classifier head; plus q/k capture
 * and three embedding-ablated forwards on the first `explain` sentences), and writes
 * K = `chunk` sentences per transaction. The run is identified by (model digest, corpus
 * digest, parameters): a second call resumes after the last committed chunk, or does
 * nothing when the run is finished. Chunks start at multiples of K, so the per-chunk
 * accumulators (head-pair JS sums, concentration histograms, syntactic counts) and the
 * final aggregates are identical whether or not the run was interrupted.
 * `an_import_dir` does the same for precomputed attention (NNNN.attention.npy +
 * NNNN.json, the layout of Dodrio's data). `an_finalize` turns the stored rows into
 * head_scores, rel_accuracy, head_pairs and patterns (one transaction).
 * What it does not: batching several sentences into one forward, sentence pairs.
 */
#ifndef AS_RUNNER_H
#define AS_RUNNER_H

#include "analysis/heads.h"
#include "analysis/store.h"

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
} an_opts;

/* Analyzes o->model_dir on the corpora into the database at db_path (created when
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

/* Computes the aggregate tables of run `run` from its stored rows and marks it done. */
as_status an_finalize(store *s, int64_t run, as_error *err);

/* One sentence as the scorer sees it (built by the analyze and import loops). */
typedef struct {
    const char *corpus;        /* "sst2", "conllu" or "import" */
    const char *source;        /* "file:line" */
    const char *text;
    int label, predicted;      /* -1 when unknown */
    int truncated;
    int T;
    char *const *tok_text;     /* (T) readable token text */
    const int32_t *start, *end;/* (T) byte offsets in text, -1 for specials; may be NULL */
    const uint8_t *kind;       /* (T) hd_kind */
    const float *attn;         /* (L, H, T, T) */
    const float *q, *k;        /* (L, H, T, Dh) or NULL */
    const float *abl[3];       /* (L, H, T, T) attention with token / position / segment ablated, or NULL */
    const float *sal;          /* (T) predicted-class gradient-L1 saliency, or NULL */
    int n_sal_cls;             /* classes stored in sal_all */
    int sal_first_class;       /* class id of sal_all's first row (rows are consecutive classes) */
    const float *sal_all;      /* (n_sal_cls, T) every class's saliency (stored), or NULL */
    int W;                     /* words of the parse, 0 = none */
    const int *word;           /* (T) word of each token, -1 none */
    char *const *word_form;    /* (W) */
    const int *parent;         /* (W) parent word, -1 root, -2 none */
    char *const *rel;          /* (W) relation names */
} an_sent;

/* The corpus digest `attnscope import --dir` stores for folder dir: SHA-256 over
 * (name, NUL, bytes) of its *.json files in name order. hex: 64 hex digits + NUL.
 * Errors: AS_ERR_INPUT when the folder or a file cannot be read. */
as_status runner_import_digest(const char *dir, char hex[65], as_error *err);

#endif
