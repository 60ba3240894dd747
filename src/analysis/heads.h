/* heads.h — per-sentence head scores: the pure arithmetic behind `attnscope analyze`.
 *
 * What it does: given one head's attention matrix A (rows = query token i, columns =
 * key token j, each real row sums to 1) and what is known about the sentence's tokens,
 * computes
 *   - importance (Dodrio, Wang et al. 2021, "Dodrio: Exploring Transformer Models with
 *     Interactive Visualization", sec. 3.2): max_{i,j} A[i,j];
 *   - semantic score (Dodrio sec. 3.2): cos(s, r) with s the predicted class's
 *     gradient-L1 saliency per token and r_j = sum_i A[i,j];
 *   - word-level attention and the predicted parent of a word (Clark et al. 2019,
 *     "What Does BERT Look At?", sec. 4.1 and appendix: keys summed over a word's
 *     pieces, queries averaged; [CLS]/[SEP] and self ignored);
 *   - Clark et al. sec. 3 statistics: attention to [CLS], [SEP], punctuation, self,
 *     previous and next token, row entropy; and the mass on the first token (the
 *     attention sink of causal models, Xiao et al. 2024);
 *   - the Jensen-Shannon divergence between two attention rows (Clark sec. 6);
 *   - concentration: how many of the Dh terms q_d k_d carry 90% of q.k;
 *   - head pattern labels from the pooled statistics.
 * What it does not: run models, read corpora, aggregate over sentences or store
 * anything (the corpus runner, analysis/runner_internal.h, and analysis/store.c do).
 * The word-level functions the server uses are declared in include/attnscope/analysis.h.
 *
 * Dimension letters: T tokens, W words, Dh head width, L layers, H heads.
 */
#ifndef AS_HEADS_H
#define AS_HEADS_H

#include "attnscope/analysis.h" /* hd_word_attention, hd_word_argmax */
#include "core/core.h"

/* Kind of a token for the Clark statistics. */
typedef enum {
    HK_WORD = 0,  /* an ordinary piece */
    HK_CLS = 1,   /* first special token: [CLS], <s> */
    HK_SEP = 2,   /* any other special token: [SEP], </s> */
    HK_PUNCT = 3, /* a piece made only of Unicode punctuation (categories P*) */
    HK_PAD = 4    /* padding: neither a query row nor a key */
} hd_kind;

/* Fixed-offset baselines of the syntactic score (Clark et al. 2019 sec. 4.2):
 * offsets -3..+2 without 0 (offset 0 is the word itself, never its parent). */
#define HD_N_OFFSETS 5
extern const int HD_OFFSETS[HD_N_OFFSETS];

/* Clark et al. statistics of one head on one sentence, each a mean over query rows. */
typedef struct {
    double cls, sep, punct; /* mean_i sum_{j of that kind} A[i,j] */
    double self;            /* mean_i A[i,i] */
    double prev, next;      /* mean over rows with a previous / next real token of A[i,i-1] / A[i,i+1] */
    double first;           /* mean over rows with a previous real token of A[i,0] (row 0, which in a
                               causal model can only attend to itself, left out) */
    double entropy;         /* mean_i -sum_j A[i,j] ln A[i,j]   (nats) */
    double entropy_norm;    /* mean_i of the entropy divided by ln(n), n real tokens; 0 when n < 2 */
    int n_rows;             /* real (non-pad) rows n */
} hd_stats;

/* Returns max_{i,j} A[i,j] over real rows and columns (kind != HK_PAD; kind may be NULL).
 * A: (T, T). Dodrio's "importance/confidence" of a head on a sentence. */
double hd_importance(const float *A, int T, const uint8_t *kind);

/* Cosine similarity of sal (T) and r_j = sum_i A[i,j] (all real rows and columns,
 * [CLS]/[SEP] included). Returns 0 when either vector is all zero. */
double hd_semantic(const float *A, int T, const uint8_t *kind, const float *sal);

/* Fills *out. kind: (T) hd_kind values. */
void hd_stats_compute(const float *A, int T, const uint8_t *kind, hd_stats *out);

/* Jensen-Shannon divergence between distributions p and q (n entries), base 2 so that
 * it lies in [0, 1]: JSD = H((p+q)/2) - (H(p) + H(q))/2. Entries <= 0 contribute 0. */
double hd_jsd(const float *p, const float *q, int n);

/* Concentration of one q.k product (Dh terms c_d = q_d k_d): sorts the terms by |c_d|
 * descending and returns the smallest n such that the signed sum of the first n terms
 * reaches 0.9 * q.k. Returns 0 when q.k <= 0 (undefined). */
int hd_concentration(const float *q, const float *k, int Dh);

/* Head pattern labels. */
typedef enum {
    HP_NEXT = 0, HP_PREV, HP_SELF, HP_DELIM, HP_BROAD, HP_OTHER, HP_INDUCTION, HP_SINK, HP_N
} hd_pattern;
const char *hd_pattern_name(hd_pattern p); /* "next-word", "previous-word", ..., "induction", "sink" */

/* Thresholds (docs/analysis.md, "Head patterns"). */
#define HD_PAT_POS_MIN 0.5   /* next / previous / self: pooled mean attention >= this */
#define HD_PAT_DELIM_MIN 0.5 /* [CLS] + [SEP] + punctuation >= this */
#define HD_PAT_BROAD_MIN 0.5 /* normalized entropy x (1 - delimiter share) >= this */
#define HD_PAT_INDUCTION_MIN 0.5  /* induction probe score >= this (causal models) */
#define HD_PAT_SINK_MIN 0.5       /* mass on the first token >= this (causal models) */
#define HD_PAT_SINK_MIN_LAYER 1   /* ... in a layer >= this (layer 0 cannot carry a learnt sink) */

/* Labels a head of layer `layer` from its pooled statistics. induction: the head's
 * induction probe score (an_induction_probe), or NAN for a model that was not probed
 * (encoders, imported attention): only then are the labels the encoder's (next /
 * previous / self / delimiter / broad / other). A probed (causal) model's head is
 * "induction" when its score reaches HD_PAT_INDUCTION_MIN; else "sink" (score: s->first,
 * from layer HD_PAT_SINK_MIN_LAYER) competes with next / previous / self / delimiter,
 * whose delimiter share then leaves out the first token (the BOS is the sink, not a
 * separator). *confidence in [0, 1]: the winning score for a label; for "other", 1 -
 * the largest score divided by its threshold (how far the head is from every label). */
hd_pattern hd_label(const hd_stats *s, int layer, double induction, double *confidence);

/* 1 when the UTF-8 text (a token's readable form, "##"/leading spaces stripped by the
 * call) is non-empty and made only of Unicode punctuation. */
int hd_is_punct(const char *text);

#endif
