/* attnscope/faith.h — how faithful each per-token attribution of a sequence classifier's
 * prediction is: the input's tokens are removed in the order a method ranks them and the
 * predicted class's probability is read after every step (formulas, sources and the
 * choices: docs/attribution.md, "Faithfulness"; src/analysis/faith.c).
 *   deletion curve   del[k] = p_c(x without its k most relevant tokens), k = 0 .. n
 *   insertion curve  ins[k] = p_c(x with only its k most relevant tokens), k = 0 .. n
 *   AOPC             deletion: 1/(n+1) sum_k (del[0] - del[k]) (Samek et al. 2017, eq. 12);
 *                    insertion: 1/(n+1) sum_k (ins[k] - ins[0])
 *   ERASER           comprehensiveness 1/|B| sum_{b in B} (p_c(x) - del[n_b]), sufficiency
 *                    1/|B| sum_b (p_c(x) - ins[n_b]), B = {1, 5, 10, 20, 50} % and n_b =
 *                    ceil(b n / 100) tokens (DeYoung et al. 2020, sec. 4.2; its metrics.py)
 * c is the class predicted on x, n the input's removable tokens (every token but the
 * model's special ones: [CLS], [SEP], <s>, </s>, padding), p_c a softmax probability.
 * Part of the tools' API (see attnscope.h): `attnscope faithfulness` and the server's
 * faithfulness route are built on it.
 * What it does not: attribute (saliency and attribution do), models without a
 * sequence-classifier head, the rationale (plausibility) metrics of ERASER.
 */
#ifndef ATTNSCOPE_FAITH_H
#define ATTNSCOPE_FAITH_H

#include "attnscope.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The per-token methods, each explaining the predicted class:
 *   grad, gxi, ig   saliency (sal_compute): the score of each token
 *   rollout, flow,  attribution (attr_compute): the row of the token the classifier reads
 *   grad-attn       ([CLS], or the last real token of a GPT-2 / LLaMA-family score head)
 *   norm            the last layer's norm-based attention summed over heads, that row
 *   norm2           the last layer's, that row
 *   alti            the whole model's (the last layer of the aggregation), that row
 *   random          a uniformly random order (the baseline) */
typedef enum {
    FAITH_GRAD = 0,
    FAITH_GXI,
    FAITH_IG,
    FAITH_ROLLOUT,
    FAITH_FLOW,
    FAITH_NORM,
    FAITH_NORM2,
    FAITH_ALTI,
    FAITH_GRAD_ATTN,
    FAITH_RANDOM,
    FAITH_N_METHODS
} faith_method;
#define FAITH_ALL_METHODS ((1u << FAITH_N_METHODS) - 1u)

/* How a token is removed: FAITH_DELETE takes it out of the input (the tokens after it move
 * one position up, as ERASER does); FAITH_MASK replaces its id by the tokenizer's [MASK]
 * (or, without one, [UNK]) and keeps every position. */
typedef enum { FAITH_DELETE = 0, FAITH_MASK } faith_removal;

/* ERASER's bins B, in percent of the removable tokens. */
#define FAITH_N_BINS 5
extern const int faith_bins_pct[FAITH_N_BINS]; /* {1, 5, 10, 20, 50} */

typedef struct {
    unsigned methods;      /* bit set of 1u << faith_method; 0 = every method */
    faith_removal removal;
    int steps;             /* integrated-gradient steps; 0 = SAL_DEFAULT_STEPS */
    uint64_t seed;         /* the random order's seed (splitmix64 stream) */
    int threads;           /* 0 = the cores: the attributions' threads, and the perturbed
                              inputs' forwards run in parallel, one thread each */
} faith_opts;

typedef struct {
    faith_method method;
    float *relevance; /* (T) the method's score of each token (random: n - rank for the
                         removable tokens, 0 for the others), owned */
    int *order;       /* (n) removable token positions, most relevant first; ties to the
                         earlier position, a NaN score last; owned */
    double *del;      /* (n + 1) deletion curve, owned */
    double *ins;      /* (n + 1) insertion curve, owned */
    double aopc_del, aopc_ins, comp, suff; /* as in the file comment */
    double comp_bin[FAITH_N_BINS], suff_bin[FAITH_N_BINS]; /* per ERASER bin */
} faith_curve;

typedef struct {
    int T, C;      /* tokens, classes */
    int n;         /* removable tokens */
    int predicted; /* c */
    double *probs; /* (C) softmax on the whole input, owned */
    double empty;  /* p_c with every removable token removed (del[n] = ins[0]) */
    int n_curves;
    faith_curve *curves; /* (n_curves) the methods asked, in faith_method order, owned */
} faith_result;

/* The curves and scores of every method of o->methods on enc under m, for the class m
 * predicts on enc. *out is filled (faith_result_free). Errors: AS_ERR_INPUT for a model
 * without a sequence-classifier head, an empty encoding, an input without a removable
 * token, a method the input is too long for (flow), FAITH_MASK on a tokenizer with neither
 * [MASK] nor [UNK]; AS_ERR_INTERNAL out of memory. Only reads m and enc. */
as_status faith_compute(const as_model *m, const as_encoding *enc, const faith_opts *o, faith_result *out,
                        as_error *err);
void faith_result_free(faith_result *r); /* NULL or zeroed: no-op */

/* The means over the sentences of an SST-2 TSV file. */
typedef struct {
    int n_sent;     /* sentences scored */
    int n_skipped;  /* sentences without a removable token */
    double accuracy;    /* of the predictions against the file's labels */
    double mean_p;      /* mean p_c(x) */
    double mean_empty;  /* mean p_c with every removable token removed */
    double mean_tokens; /* mean removable tokens n */
    int n_methods;
    faith_method methods[FAITH_N_METHODS];
    double aopc_del[FAITH_N_METHODS], aopc_ins[FAITH_N_METHODS], comp[FAITH_N_METHODS], suff[FAITH_N_METHODS];
    double comp_bin[FAITH_N_METHODS][FAITH_N_BINS], suff_bin[FAITH_N_METHODS][FAITH_N_BINS];
} faith_summary;

/* faith_compute on each of the first limit (0 = all) sentences of the SST-2 TSV file at
 * path (text truncated to the model's positions), sentence i's random order from seed
 * o->seed + i, averaged into *out. progress: a progress line on stderr. Errors: as
 * faith_compute (naming the file's line) and the TSV's. */
as_status faith_corpus_sst2(const as_model *m, const char *path, int limit, const faith_opts *o, int progress,
                            faith_summary *out, as_error *err);

/* r as JSON (new reference, NULL when out of memory): {"predicted", "label", "probs",
 * "tokens": n removable, "empty", "removal", "bins", "methods": [{"method", "aopc_deletion",
 * "aopc_insertion", "comprehensiveness", "sufficiency", "comprehensiveness_bins",
 * "sufficiency_bins", "order", "relevance", "deletion", "insertion"}]}. */
struct json_t *faith_result_json(const as_model *m, const faith_result *r, faith_removal removal);

/* ---- the metrics on given curves (for tools and tests) ---- */

/* The removable positions of rel (T) (removable[t] != 0) into order, highest score first,
 * ties to the earlier position, NaN last; returns n. */
int faith_rank(const float *rel, const uint8_t *removable, int T, int *order);
/* ceil(pct n / 100): the tokens of bin pct out of n. */
int faith_bin_tokens(int n, int pct);
/* AOPC, comprehensiveness and sufficiency of c from c->del and c->ins (n + 1 each). */
void faith_score(faith_curve *c, int n);

const char *faith_method_name(faith_method m);            /* "grad", ..., "grad-attn", "random" */
int faith_method_parse(const char *s, faith_method *out); /* 0 ok, -1 unknown */
/* "grad,ig,random" -> bit set; 0 ok, -1 with the unknown name in bad (cap bytes). */
int faith_methods_parse(const char *s, unsigned *out, char *bad, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
