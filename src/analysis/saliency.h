/* saliency.h — per-token gradient saliency of a sequence classifier's prediction.
 *
 * What it does: for an as_model with a classifier head, an encoding (text or pair)
 * and a target class (default: the predicted one), computes one score per token by
 *   SAL_GRAD  vanilla gradient (Simonyan et al. 2013): || d logit_c / d w_t ||_1, the
 *             L1 norm of the gradient of the target logit w.r.t. the token's word-
 *             embedding vector w_t = wte[id_t] (before position / segment embeddings
 *             and the embedding LayerNorm). This is the quantity Dodrio shows: it
 *             hooks the output of `embeddings.word_embeddings`. Non-negative.
 *   SAL_GXI   gradient x input (Shrikumar et al. 2016; Kindermans et al. 2016):
 *             sum_d (d logit_c / d w_t)_d * (w_t)_d, signed (the L1 variant would hide
 *             whether a token raises or lowers the logit; |gxi| is one fabsf away).
 *   SAL_IG    integrated gradients (Sundararajan et al. 2017, eq. 1 with the Riemann
 *             midpoint rule): sum_d (w_t - w'_t)_d * (1/m) sum_k dF/dw_t(w' + a_k (w - w'))_d,
 *             a_k = (k + 1/2) / m, baseline w' = 0 for every token (all-zero word
 *             vectors; position and segment embeddings stay, so the baseline is
 *             "no word identity" rather than a [PAD] sequence). Signed. Completeness
 *             (sum_t attr_t = F(w) - F(w')) holds as m grows; the gap is reported.
 * plus the logits and softmax probabilities. Runs with dropout off (eval mode).
 * What it does not: attention-based scores (analysis/heads), MLM heads, GPT-2.
 *
 * Ownership: sal_result arrays are owned by the result (sal_result_free).
 * Each call copies the model's weights into a training arena (src/train); a
 * caller running many inputs on one model can keep a tr_model and call
 * sal_compute_tr.
 */
#ifndef AS_SALIENCY_H
#define AS_SALIENCY_H

#include "train/train.h"

typedef enum { SAL_GRAD = 0, SAL_GXI, SAL_IG } sal_method;

#define SAL_DEFAULT_STEPS 32
#define SAL_MAX_STEPS 4096

typedef struct {
    sal_method method;
    int target; /* class to explain; -1 = the predicted class */
    int steps;  /* SAL_IG steps m, 1..SAL_MAX_STEPS; 0 = SAL_DEFAULT_STEPS */
    float *attn_out; /* optional, caller-owned (L, H, T, T): the attention probabilities of the
                        forward on the input itself (so a caller needs no second forward) */
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
/* Same on an already-built trainable model (no gradient arena needed). */
as_status sal_compute_tr(const tr_model *tm, const as_encoding *enc, const sal_opts *o, sal_result *out,
                         as_error *err);
void sal_result_free(sal_result *r);

const char *sal_method_name(sal_method m);            /* "grad", "gxi", "ig" */
int sal_method_parse(const char *s, sal_method *out); /* 0 ok, -1 unknown */

#endif
