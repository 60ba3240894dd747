/* ops.h — the element-wise and row operations of every pass through a model: the
 * inference forward with capture (encoder.c), saliency and training (src/train). Each
 * forward sits next to its backward: LayerNorm, RMSNorm, activations (GELU in its erf
 * and tanh forms, ReLU, SiLU), the gated MLP product act(gate) * up, masked softmax and
 * rotary position embedding.
 * Every function is single-threaded and works on the rows or elements it is given;
 * callers split the rows over the thread pool (core/pool.h). Reductions over a row run
 * in a fixed order, so results do not depend on the thread count.
 * Not here: matrix products (core/gemm_small.c, train/train_ops.c, OpenBLAS), attention
 * (encoder.c composes it from these), anything that knows about layers or models.
 *
 * Shapes: N rows, C columns (the normalised width), n elements, Dh head width,
 * R rotated dimensions of a head (even, <= Dh).
 */
#ifndef AS_MODEL_OPS_H
#define AS_MODEL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* LayerNorm (Ba et al. 2016), biased variance as torch: y = (x - mean) * rstd * g + b,
 * rstd = 1 / sqrt(var + eps). x, y (N, C) may alias; mean, rstd (N) saved when non-NULL. */
void op_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *g, const float *b, int N,
                      int C, float eps);
/* Backward to the input (llm.c layernorm_backward): with xhat = (x - mean) * rstd and
 * dn = dy * g, dx = rstd * (dn - mean(dn) - xhat * mean(dn * xhat)), overwritten (N, C). */
void op_layernorm_dx(float *dx, const float *dy, const float *x, const float *mean, const float *rstd,
                     const float *g, int N, int C);
/* Parameter gradients for columns [c0, c1): dg += sum_n dy * xhat, db += sum_n dy
 * (either may be NULL), over all N rows in order. */
void op_layernorm_dparams(float *dg, float *db, const float *dy, const float *x, const float *mean,
                          const float *rstd, int N, int C, int c0, int c1);

/* RMSNorm (Zhang & Sennrich 2019) as Llama / Gemma compute it, in float32:
 * y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps), w = g (add_one 0) or 1 + g
 * (Gemma). x, y (N, C) may alias; rstd (N) saved when non-NULL. */
void op_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *g, int N, int C, float eps, int add_one);
/* Backward to the input: with xhat = x * rstd and dn = dy * w,
 * dx = rstd * (dn - xhat * mean(dn * xhat)), overwritten (N, C). */
void op_rmsnorm_dx(float *dx, const float *dy, const float *x, const float *rstd, const float *g, int N, int C,
                   int add_one);
/* dg[c] += sum_n dy * xhat for columns [c0, c1), rows in order. */
void op_rmsnorm_dg(float *dg, const float *dy, const float *x, const float *rstd, int N, int C, int c0, int c1);

/* y = act(x) elementwise (x, y may alias). gelu: x Phi(x) with erf; gelu_new: the tanh
 * approximation; relu; silu: x sigmoid(x). */
void op_act_fwd(as_act a, float *y, const float *x, size_t n);
/* d (in place) *= act'(x), x the activation's input. */
void op_act_bwd(as_act a, float *d, const float *x, size_t n);
/* y = act(x) and dd = act'(x) (n) each, x distinct from both: for gelu one exp per
 * element serves both (a backward that recomputes the activation). */
void op_act_fwd_deriv(as_act a, float *y, float *dd, const float *x, size_t n);
/* Gated MLP product (Shazeer 2020, GLU variants): y = act(gate) * up, (n) each; y may
 * alias gate or up. */
void op_glu_fwd(as_act a, float *y, const float *gate, const float *up, size_t n);
/* Its backward: dgate = dy * up * act'(gate), dup = dy * act(gate), overwritten. */
void op_glu_bwd(as_act a, float *dgate, float *dup, const float *dy, const float *gate, const float *up, size_t n);

/* Softmax of each row of s (N, C) in place over the columns with keep[c] != 0
 * (keep NULL = all); other columns, and rows with no kept column, become 0. */
void op_softmax_rows(float *s, const int32_t *keep, int N, int C);

/* Inverted dropout (Srivastava et al. 2014) as data: element i of a site keeps with
 * probability 1 - p, decided by a counter-based hash (the splitmix64 finaliser, Steele
 * et al. 2014) of (seed, site, i), so masks do not depend on threads or call order.
 * op_drop_key hoists the per-(seed, site) part; op_drop_keep is the decision;
 * op_drop_mask writes mask[i] = keep(i0 + i) ? 1 / (1 - p) : 0 for i < n. */
uint64_t op_drop_key(uint64_t seed, uint32_t site);
int op_drop_keep(uint64_t key, uint64_t idx, float p);
void op_drop_mask(float *mask, size_t i0, size_t n, uint64_t key, float p);
/* y[i] *= m[i] for i < n. */
void op_mul(float *y, const float *m, size_t n);

/* Rotary position embedding (Su et al. 2021) in the "rotate_half" layout of Hugging Face
 * Llama: dimensions i and i + R/2 of a head (i < R/2) form a pair rotated by the angle
 * pos * inv_freq[i]; dimensions R..Dh-1 pass unchanged (partial rotary).
 * cs: (T, R) per row t, R/2 cosines then R/2 sines of its angles (times an attention
 * factor when the scaling has one), computed by op_rope_table for row t at position
 * p0 + dp t (dp 1: a sequence; 0: rows at one position, a beam step's), or all 0 when
 * `still` (position ablation: no rotation).
 * op_rope_fwd rotates x in place: rows t of (T, ld), heads h < nh at columns h * Dh. */
void op_rope_table(float *cs, int p0, int dp, int T, int still, const float *inv_freq, int R, float mscale);
void op_rope_fwd(float *x, int T, size_t ld, int nh, int Dh, int R, const float *cs);
/* Backward (the inverse rotation, scaled by the same factor) of dy in place. */
void op_rope_bwd(float *dx, int T, size_t ld, int nh, int Dh, int R, const float *cs);

#endif
