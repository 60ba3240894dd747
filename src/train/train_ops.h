/* train_ops.h — forward and backward kernels of the training pass: linear maps
 * (OpenBLAS sgemm), register-blocked products on packed right-hand sides (the
 * layers' weights, the decoder, attention), cross-entropy, dropout masks (norms,
 * activations and softmax, shared with inference, are in model/ops.h). Each backward kernel names what it
 * overwrites and what it accumulates into.
 * Every kernel here is single-threaded and works on the rows (or the column range)
 * it is given; train_forward.c splits the work into tasks (blocks of sequences, or
 * column blocks and heads of one block) on the thread pool (core/pool.h), with OpenBLAS
 * set to one thread. A reduction over rows always runs
 * over all rows in row order, so results do not depend on the thread count.
 * It does not know about layers, models or batches (train_forward.c composes them).
 *
 * Shapes: N rows, Ni inputs, No outputs, C columns.
 */
#ifndef AS_TR_OPS_H
#define AS_TR_OPS_H

#include <stddef.h>

#include "model/ops.h"
#include "train/train.h"

/* y (N, No) = x (N, Ni) W^T + b; W (No, Ni) as nn.Linear, b (No) or NULL. */
void trainop_linear_fwd(float *y, const float *x, const float *w, const float *b, int N, int Ni, int No);
/* dx (N, Ni) = dy (N, No) W: overwritten (accum 0) or added (accum 1). */
void trainop_linear_dx(float *dx, int accum, const float *dy, const float *w, int N, int Ni, int No);
/* Block [o0, o1) x [i0, i1) of dW (No, Ni) += dy^T x, dy (N, No), x (N, Ni). */
void trainop_linear_dw(float *dw, const float *dy, const float *x, int N, int Ni, int No, int o0, int o1, int i0,
                   int i1);
/* db[c] += sum_n x[n * ld + c] for c in [0, C), rows in order. */
void trainop_colsum(float *db, const float *x, int N, int C, int ld);

/* Products with register blocking (6 x 16), for the shapes of these models where
 * sgemm would repack the same weights for every block of rows.
 * The right-hand side B (K, N) is packed: ceil(N / 16) panels of (K, 16), each
 * contiguous, the last padded with zeros (trainop_packed_size floats). */
#define TRAINOP_NR 16
static inline size_t trainop_packed_size(int K, int N) { return (size_t)K * (size_t)((N + TRAINOP_NR - 1) / TRAINOP_NR * TRAINOP_NR); }
/* Packs panels [p0, p1) of B, element (k, j) at b[k * sk + j * sn] (sn = 1: B row-major;
 * sk = 1: B^T row-major), into bp. */
void trainop_pack_b(float *bp, const float *b, ptrdiff_t sk, ptrdiff_t sn, int K, int N, int p0, int p1);
/* Packs, for each head h < H, the (T, Dh) slice of columns [h Dh, (h + 1) Dh) of src
 * (T rows, row stride ld) as B (trans 0: K = T, N = Dh) or B^T (trans 1: K = Dh,
 * N = T), head h at dst + h * max(trainop_packed_size(T, Dh), trainop_packed_size(Dh, T)).
 * The per-head products of attention read their right-hand sides from here. */
void trainop_pack_heads(float *dst, const float *src, int ld, int T, int H, int Dh, int trans);
/* C (M, N) = alpha * A B + Cin + bias: element (i, k) of A at a[i * sai + k * sak] (A or
 * A^T of a row-major matrix); bp: B packed; C with row stride ldc; Cin (row stride
 * ldcin) and bias (N) are added when non-NULL, and Cin may be C itself (accumulate). */
void trainop_gemm(float *c, int ldc, const float *a, ptrdiff_t sai, ptrdiff_t sak, const float *bp, int M, int N, int K,
              float alpha, const float *cin, int ldcin, const float *bias);
/* Softmax cross-entropy per row: logits (N, C), targets (N); dlogits (N, C) =
 * scale * (softmax - onehot); row_loss[n] = -log softmax[target] (double). */
void trainop_xent(float *dlogits, double *row_loss, const float *logits, const int32_t *targets, int N, int C,
              float scale);

/* Inverted dropout (Srivastava et al. 2014): x[i] *= keep / (1 - p) with keep drawn by
 * train_dropout_keep(seed, site, i0 + i) for i in [0, n): element i of the slice x is
 * element i0 + i of the site (model/ops.h op_drop_keep). Used forward and backward alike. */
void trainop_dropout(float *x, size_t i0, size_t n, float p, uint64_t seed, uint32_t site);
#endif
