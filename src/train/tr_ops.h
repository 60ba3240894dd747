/* tr_ops.h — forward and backward kernels of the training pass: linear maps
 * (OpenBLAS sgemm), LayerNorm, activations, cross-entropy, dropout masks. Each
 * backward kernel names what it overwrites and what it accumulates into.
 * It does not know about layers, models or batches (tr_forward.c composes them).
 *
 * Shapes: N rows, Ni inputs, No outputs, C columns.
 */
#ifndef AS_TR_OPS_H
#define AS_TR_OPS_H

#include "train/train.h"

/* y (N, No) = x (N, Ni) W^T + b; W (No, Ni) as nn.Linear, b (No) or NULL. */
void tro_linear_fwd(float *y, const float *x, const float *w, const float *b, int N, int Ni, int No);
/* Backward of tro_linear_fwd (dy (N, No)):
 *   dx (N, Ni) = dy W        overwritten (accum 0) or added (accum 1); skipped when dx NULL
 *   dw (No, Ni) += dy^T x    skipped when dw NULL
 *   db (No) += sum_n dy      skipped when db NULL; ones (N) all 1.0f */
void tro_linear_bwd(float *dx, int accum, float *dw, float *db, const float *dy, const float *x,
                    const float *w, const float *ones, int N, int Ni, int No);

/* LayerNorm (Ba et al. 2016), biased variance as torch: y = (x - mean) * rstd * g + b,
 * rstd = 1 / sqrt(var + eps). x, y (N, C) may alias; mean, rstd (N) saved. */
void tro_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *g,
                       const float *b, int N, int C, float eps);
/* LayerNorm backward (llm.c layernorm_backward): with xhat = (x - mean) * rstd and
 * dn = dy * g, dx = rstd * (dn - mean(dn) - xhat * mean(dn * xhat)) overwritten;
 * dg += sum_n dy * xhat, db += sum_n dy (skipped when NULL). */
void tro_layernorm_bwd(float *dx, float *dg, float *db, const float *dy, const float *x,
                       const float *mean, const float *rstd, const float *g, int N, int C);

/* y = act(x) elementwise (gelu: erf form, gelu_new: tanh form, relu). */
void tro_act_fwd(as_act a, float *y, const float *x, size_t n);
/* d (in place) *= act'(x) with x the activation's input. */
void tro_act_bwd(as_act a, float *d, const float *x, size_t n);

/* Softmax cross-entropy per row: logits (N, C), targets (N); dlogits (N, C) =
 * scale * (softmax - onehot); returns the sum over rows of -log softmax[target]
 * (double accumulation). */
double tro_xent(float *dlogits, const float *logits, const int32_t *targets, int N, int C,
                float scale);

/* Inverted dropout (Srivastava et al. 2014): x *= keep / (1 - p) with keep drawn by
 * tr_dropout_keep(seed, site, i) for i in [0, n). Used forward and backward alike. */
void tro_dropout(float *x, size_t n, float p, uint64_t seed, uint32_t site);
/* The same keep decision with the per-(seed, site) key hoisted out of a loop:
 * tr_dropout_keep(seed, site, i, p) == tro_drop_keep_k(tro_drop_key(seed, site), i, p). */
uint64_t tro_drop_key(uint64_t seed, uint32_t site);
int tro_drop_keep_k(uint64_t key, uint64_t idx, float p);

#endif
