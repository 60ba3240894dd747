/* gemm_small.h — products for a few rows of x computed directly from the operands,
 * without OpenBLAS's packing copies: y = x W^T with W (N, K) row-major (Hugging Face's
 * [out, in] linear weights: the forward of nn.Linear, the input gradient of Conv1D) and
 * y = x W with W (K, N) row-major (the input gradient of nn.Linear, the forward of
 * Conv1D). Faster than sgemm when M is small (short sentences); see gemm_small.c.
 * What it does not: threads, other layouts; the kernels need AVX-512 (either form) or
 * AVX2 + FMA (y = x W^T only): ask the _ok functions and use sgemm where they say 0
 * (the functions then run slow scalar loops, for tests).
 */
#ifndef AS_GEMM_SMALL_H
#define AS_GEMM_SMALL_H

#include <stddef.h>

/* 1 when this CPU runs a kernel for as_gemm_small_xwt. */
int as_gemm_small_ok(void);

/* 1 when this CPU runs a kernel for as_gemm_small_xw. */
int as_gemm_small_xw_ok(void);

/* y[m, n] = (accumulate ? y[m, n] : 0) + sum_k x[m, k] w[n, k], m < M, n < N, k < K.
 * Leading dimensions in floats. Summation order differs from sgemm's (16 or 8 lanes
 * over k); an element's value does not depend on M, N or its position. */
void as_gemm_small_xwt(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                       size_t ldy, int accumulate);

/* y[m, n] = (accumulate ? y[m, n] : 0) + sum_k x[m, k] w[k, n], summed in k order.
 * Leading dimensions in floats. */
void as_gemm_small_xw(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                      size_t ldy, int accumulate);

/* Tests: 0 runs the best kernel the CPU has, 1 at most the AVX2 one, 2 the scalar loops. */
void as_gemm_small_force(int level);

#endif
