/* attrib.h — attribution methods that go past raw attention weights, on one input.
 *
 * What it does (attr_compute in include/attnscope/analysis.h runs the model, the
 * functions below are the formulas on given tensors; docs/attribution.md has the costs):
 *   rollout     Abnar & Zuidema 2020, "Quantifying Attention Flow in Transformers", sec. 3:
 *               Â_l = renorm_rows(0.5 mean_h A_l + 0.5 I), R = Â_L ... Â_1 (T, T).
 *   flow        same paper, sec. 3: the DAG with nodes (layer l = 0..L, token), an edge
 *               (l - 1, j) -> (l, i) of capacity Â_l[i, j]; F[i, j] = max-flow from (0, j) to
 *               (L, i) (Dinic's algorithm), each row divided by its sum as the authors'
 *               code (samiraabnar/attention_flow, compute_flows) does.
 *   norm        Kobayashi et al. 2020, "Attention is Not Only a Weight", eq. 6: N[l, h, i, j]
 *               = ||A_lh[i, j] f_lh(x_j)|| = A_lh[i, j] ||v_lh[j] W_o^h||, v with its bias, W_o^h
 *               head h's rows of the output projection (its bias and any norm after it,
 *               e.g. Gemma's post-attention norm, are outside f).
 *   grad        Chefer et al. 2021, "Generic Attention-model Explainability", eq. 5-6 (self-
 *               attention rule): Ā_l = mean_h (dy/dA_lh ⊙ A_lh)^+, R_0 = I, R_l = R_{l-1} +
 *               Ā_l R_{l-1}; R = R_L (T, T).
 *   importance  Michel et al. 2019, "Are Sixteen Heads Really Better than One?", eq. 2 for one
 *               input: I[l, h] = |dy/dξ_lh| at ξ = 1 for a gate ξ on head h's context ξ A V,
 *               = |sum_ij A_lh[i, j] dy/dA_lh[i, j]| (L, H).
 *   norm2       Kobayashi et al. 2021, "Incorporating Residual and Normalization Layers into
 *               Analysis of Masked Language Models", EMNLP, sec. 3 ("ATB"): N2[l, i, j] =
 *               ||T_i(x_j)||_2 with x̃_i = sum_j T_i(x_j) + bias the output of layer l's
 *               attention block with its residual and the norm after it (attrib_mix.c
 *               gives T for post-LN, pre-norm and post-attention-norm blocks) (L, T, T).
 *   alti        Ferrando, Gállego, Costa-jussà 2022, "Measuring the Mixing of Contextual
 *               Information in the Transformer", EMNLP, eq. 9-10 and sec. 3.2: C_l[i, j] =
 *               max(0, ||x̃_i||_1 − ||x̃_i − T_i(x_j)||_1) / sum over j of the same;
 *               R_1 = C_1, R_l = C_l R_{l-1} (L, T, T).
 * dy/dA is model_backward's d_attn (attention probabilities as used in P V, masked entries
 * included); y a single logit (analysis.h, attr_opts).
 * What it does not: average over a corpus (importance is one input's), keep the run.
 * Ownership: every output array is the caller's; inputs are only read.
 */
#ifndef AS_ATTRIB_H
#define AS_ATTRIB_H

#include "attnscope/analysis.h" /* attr_compute and its types */

/* R (T, T) = attention rollout of A (L, H, T, T). Errors: AS_ERR_INTERNAL out of memory. */
as_status attr_rollout(const float *A, int L, int H, int T, float *R, as_error *err);
/* R (L, T, T): layer l's the rollout of A's layers 0..l (the last = attr_rollout's). */
as_status attr_rollout_layers(const float *A, int L, int H, int T, float *R, as_error *err);
/* attr_flow: include/attnscope/analysis.h */
/* F (L, T, T): layer l's the row-normalised flow from input token j (layer 0) to token i
 * at layer l's output, through the graph of A's layers 0..l alone (the last = attr_flow's):
 * L flows of 1..L layers, about (L + 1) / 2 times attr_flow's cost. Errors as attr_flow. */
as_status attr_flow_layers(const float *A, int L, int H, int T, int threads, float *F, as_error *err);
/* The raw max-flow value from input token j to output token i (not normalised) of A
 * (L, H, T, T); for tests. Returns a negative value when out of memory. */
double attr_flow_value(const float *A, int L, int H, int T, int j, int i);
/* R (T, T) = gradient-weighted attention rollout of A and dA = dy/dA, both (L, H, T, T).
 * Errors: AS_ERR_INTERNAL out of memory. */
as_status attr_grad_weighted(const float *A, const float *dA, int L, int H, int T, float *R, as_error *err);
/* R (L, T, T): layer l's the propagation R_l = R_{l-1} + Ā_l R_{l-1} through A's layers
 * 0..l with the same dA (the gradient of the one logit; the last = attr_grad_weighted's). */
as_status attr_grad_weighted_layers(const float *A, const float *dA, int L, int H, int T, float *R, as_error *err);
/* imp (L, H) = head importance from A and dA (L, H, T, T). */
void attr_head_importance(const float *A, const float *dA, int L, int H, int T, float *imp);
/* N (L, H, T, T) = A[l, h, i, j] * fnorm[l, h, j] with fnorm (L, H, T) = ||f_lh(x_j)||. */
void attr_norm_apply(const float *A, const float *fnorm, int L, int H, int T, float *N);

/* norm2 N2 (L, T, T) and the per-layer ALTI contributions C (L, T, T) (either may be NULL)
 * of run r of m, which holds every layer's attention, values and hidden states
 * (attrib_mix.c). threads: 0 or 1 = the calling thread only. Errors: AS_ERR_INPUT when r
 * lacks them; AS_ERR_INTERNAL out of memory. */
as_status attr_mixing(const as_model *m, const as_run *r, int threads, float *N2, float *C, as_error *err);
/* Per head h of every layer l of run r (which holds every layer's attention, values and
 * hidden states): fnorm (L, H, T) = ||f_lh(x_j)|| (Kobayashi et al. 2020, eq. 6) and share
 * (L, H, T): head h's ALTI share of token i's block output (attrib_mix.c: Ferrando et al.
 * 2022, eq. 9, with the H head outputs o_h,i = sum_j A_h[i, j] f_h(x_j) and the residual x_i
 * as the components instead of the input tokens). Either may be NULL. threads: 0 or 1 =
 * the calling thread only. Errors: AS_ERR_INPUT when r lacks them; AS_ERR_INTERNAL out of
 * memory. */
as_status attr_head_mixing(const as_model *m, const as_run *r, int threads, float *fnorm, float *share,
                           as_error *err);
/* C (L, T, T) per-layer contributions -> in place the ALTI rollout R_l = C_l ... C_1.
 * Errors: AS_ERR_INTERNAL out of memory. */
as_status attr_alti_aggregate(float *C, int L, int T, as_error *err);

#endif
