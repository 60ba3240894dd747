/* gemm_small.h — y = x W^T (or y += x W^T) for a few rows of x, with x (M, K) and
 * W (N, K) both row-major (K contiguous: Hugging Face's [out, in] linear weights),
 * computed directly from the operands without OpenBLAS's packing copies. Faster than
 * sgemm when M is small (short sentences); see gemm_small.c.
 * What it does not: threads, transposed layouts, CPUs without AVX2 + FMA (where
 * as_gemm_small_ok() is 0: use sgemm; as_gemm_small_xwt then runs a slow scalar loop).
 */
#ifndef AS_GEMM_SMALL_H
#define AS_GEMM_SMALL_H

#include <stddef.h>

/* 1 when this CPU runs the AVX2 + FMA kernel. */
int as_gemm_small_ok(void);

/* y[m, n] = (accumulate ? y[m, n] : 0) + sum_k x[m, k] w[n, k], m < M, n < N, k < K.
 * Leading dimensions in floats. Summation order differs from sgemm's (8 lanes over k). */
void as_gemm_small_xwt(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                       size_t ldy, int accumulate);

#endif
