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
 * What it does not: attention-based scores (analysis/heads), MLM / LM heads.
 *
 * The types, sal_compute and sal_result_free are declared in include/attnscope/analysis.h
 * (the tools' API). Ownership: sal_result arrays are owned by the result
 * (sal_result_free). Each call runs the model's one forward (with a tape) and its
 * backward on the loaded weights in place: grad / gxi one forward and one backward,
 * integrated gradients 2 + steps forwards and steps backwards.
 */
#ifndef AS_SALIENCY_H
#define AS_SALIENCY_H

#include "attnscope/analysis.h" /* sal_compute and its types */

/* What a caller of the corpus runner takes from the same forward and backward as the
 * saliency (SAL_GRAD / SAL_GXI only; ignored by SAL_IG). Every field may be 0 / NULL. */
typedef struct {
    unsigned capture; /* extra as_capture_what flags of the forward (CAP_QKV, CAP_HIDDEN) */
    float *d_attn;    /* caller-owned (L, H, T, T): dy / d(attention probabilities) of the
                         target logit y, from the saliency's own backward (model_backward) */
    as_run **run;     /* receives the forward's run (attention, logits and `capture`);
                         the caller frees it (as_run_free) */
} sal_extra;

/* sal_compute, also filling what x asks for (x NULL: sal_compute). Errors as sal_compute. */
as_status sal_compute_extra(const as_model *m, const as_encoding *enc, const sal_opts *o, const sal_extra *x,
                            sal_result *out, as_error *err);

#endif
