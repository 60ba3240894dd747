/* gemm_small.c — y (+)= x W^T for few rows of x, without packing W (see gemm_small.h).
 *
 * Why: OpenBLAS packs both operands of every sgemm. For a linear layer on a short
 * sentence (T ~ 25 tokens, BERT-base W 768 x 768) packing W costs as much as the
 * product itself (perf: sgemm_incopy ~ sgemm_kernel in `attnscope analyze`). Here
 * both x and W are row-major with K contiguous, so every output is a dot product of
 * two contiguous rows: a 3 x 4 register tile of such dot products (12 AVX2
 * accumulators, 7 loads per 12 FMAs) runs over K with no copy at all; 4 rows of W
 * (4 K floats) stay in L1 while all rows of x stream past them from L2.
 * What it does not: other layouts (GPT-2's Conv1D [in, out] weights go to sgemm),
 * threading (callers split the columns), CPUs without AVX2 + FMA (the caller asks
 * as_gemm_small_ok() and falls back to sgemm).
 */
#include "core/gemm_small.h"

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define GS_X86 1
#endif

#ifdef GS_X86
#define GS_TARGET __attribute__((target("avx2,fma")))

GS_TARGET static inline float gs_hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* One output: dot(x[0:K], w[0:K]). */
GS_TARGET static float gs_dot(const float *x, const float *w, int K) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int k = 0;
    for (; k + 16 <= K; k += 16) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(w + k), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8), _mm256_loadu_ps(w + k + 8), a1);
    }
    for (; k + 8 <= K; k += 8) a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(w + k), a0);
    float s = gs_hsum(_mm256_add_ps(a0, a1));
    for (; k < K; k++) s += x[k] * w[k];
    return s;
}

/* The 3 x 4 tile: rows x0..x2 of x against rows w0..w3 of W; out[r][c]. */
GS_TARGET static void gs_tile_3x4(const float *x, size_t ldx, const float *w, size_t ldw, int K, float out[3][4]) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
    __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
    __m256 c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx;
    const float *w0 = w, *w1 = w + ldw, *w2 = w + 2 * ldw, *w3 = w + 3 * ldw;
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 a0 = _mm256_loadu_ps(x0 + k), a1 = _mm256_loadu_ps(x1 + k), a2 = _mm256_loadu_ps(x2 + k);
        __m256 b = _mm256_loadu_ps(w0 + k);
        c00 = _mm256_fmadd_ps(a0, b, c00);
        c10 = _mm256_fmadd_ps(a1, b, c10);
        c20 = _mm256_fmadd_ps(a2, b, c20);
        b = _mm256_loadu_ps(w1 + k);
        c01 = _mm256_fmadd_ps(a0, b, c01);
        c11 = _mm256_fmadd_ps(a1, b, c11);
        c21 = _mm256_fmadd_ps(a2, b, c21);
        b = _mm256_loadu_ps(w2 + k);
        c02 = _mm256_fmadd_ps(a0, b, c02);
        c12 = _mm256_fmadd_ps(a1, b, c12);
        c22 = _mm256_fmadd_ps(a2, b, c22);
        b = _mm256_loadu_ps(w3 + k);
        c03 = _mm256_fmadd_ps(a0, b, c03);
        c13 = _mm256_fmadd_ps(a1, b, c13);
        c23 = _mm256_fmadd_ps(a2, b, c23);
    }
    __m256 acc[3][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}, {c20, c21, c22, c23}};
    const float *xr[3] = {x0, x1, x2}, *wr[4] = {w0, w1, w2, w3};
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) {
            float s = gs_hsum(acc[r][c]);
            for (int kk = k; kk < K; kk++) s += xr[r][kk] * wr[c][kk];
            out[r][c] = s;
        }
}

GS_TARGET static void gs_run(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                             size_t ldy, int accumulate) {
    int n = 0;
    for (; n + 4 <= N; n += 4) {
        const float *wn = w + (size_t)n * ldw;
        int m = 0;
        for (; m + 3 <= M; m += 3) {
            float t[3][4];
            gs_tile_3x4(x + (size_t)m * ldx, ldx, wn, ldw, K, t);
            for (int r = 0; r < 3; r++) {
                float *yr = y + (size_t)(m + r) * ldy + n;
                for (int c = 0; c < 4; c++) yr[c] = accumulate ? yr[c] + t[r][c] : t[r][c];
            }
        }
        for (; m < M; m++)
            for (int c = 0; c < 4; c++) {
                float s = gs_dot(x + (size_t)m * ldx, wn + (size_t)c * ldw, K);
                float *yc = y + (size_t)m * ldy + n + c;
                *yc = accumulate ? *yc + s : s;
            }
    }
    for (; n < N; n++)
        for (int m = 0; m < M; m++) {
            float s = gs_dot(x + (size_t)m * ldx, w + (size_t)n * ldw, K);
            float *yc = y + (size_t)m * ldy + n;
            *yc = accumulate ? *yc + s : s;
        }
}
#endif

int as_gemm_small_ok(void) {
#ifdef GS_X86
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

void as_gemm_small_xwt(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                       size_t ldy, int accumulate) {
#ifdef GS_X86
    gs_run(M, N, K, x, ldx, w, ldw, y, ldy, accumulate);
#else
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float s = 0.0f;
            for (int k = 0; k < K; k++) s += x[(size_t)m * ldx + k] * w[(size_t)n * ldw + k];
            float *yc = y + (size_t)m * ldy + n;
            *yc = accumulate ? *yc + s : s;
        }
#endif
}
