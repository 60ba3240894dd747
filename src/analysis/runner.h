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
 * The options and entry points the tools call are declared in
 * include/attnscope/analysis.h; this header adds what the analysis modules share. The
 * runner's own files (one per concern) share analysis/runner_internal.h.
 */
#ifndef AS_RUNNER_H
#define AS_RUNNER_H

#include "attnscope/analysis.h" /* an_opts, an_analyze, an_import_dir, an_import_files */
#include "analysis/heads.h"
#include "analysis/store.h"

/* Computes the aggregate tables of run `run` from its stored rows and marks it done.
 * induction: (L * H) each head's induction probe score (stored in head_scores.induction
 * and used by the pattern labels), or NULL for a run that was not probed (encoders,
 * imports). Borrowed. */
as_status an_finalize(store *s, int64_t run, const double *induction, as_error *err);

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
    const float *head_imp;     /* (L, H) |dy/dξ_lh| of the saliency's backward (Michel et al. 2019), or NULL */
    const float *fnorm;        /* (L, H, T) ||f_lh(x_j)|| (Kobayashi et al. 2020), or NULL */
    const float *alti_share;   /* (L, H, T) each head's ALTI share of the block output per query, or NULL */
    int topk_k;                /* k of the stored top-k, 0 = none */
    const uint8_t *topk;       /* (L, H, T, AN_TOPK_ROW_BYTES(topk_k)) bytes, or NULL */
} an_sent;

#endif
