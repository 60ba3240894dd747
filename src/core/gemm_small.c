/* gemm_small.c — products for few rows of x without packing the weights (see
 * gemm_small.h): y (+)= x W^T (the "dot" form: W (N, K), K contiguous) and y (+)= x W
 * (the "axpy" form: W (K, N), N contiguous).
 *
 * Why: OpenBLAS packs both operands of every sgemm. For a linear layer on a short
 * sentence (T ~ 25 tokens, BERT-base W 768 x 768) packing W costs as much as the
 * product itself (perf: sgemm_itcopy ~ sgemm_kernel in `attnscope analyze`). Here the
 * kernels read W where it lies:
 *  - dot form, AVX-512: a 4 x 6 tile of dot products (24 zmm accumulators, 10 loads per
 *    24 FMAs) runs over K 16 floats at a time (the tail masked); the sums are reduced 4 at
 *    a time by a transposing add tree. 6 rows of W stay in L1 while the rows of x stream
 *    past from L2; the first tile of rows prefetches the next 6 rows of W.
 *    AVX2 + FMA: a 3 x 4 tile of 8-wide dot products.
 *  - axpy form, AVX-512: a 6-row x 64-column tile (24 zmm accumulators) adds
 *    x[m, k] W[k, n0 : n0 + 64] for k in order, over blocks of GS_KC rows of W (the block's
 *    strip of W, GS_KC x 256 bytes, stays in L2 for every tile of rows); the first tile
 *    of rows prefetches W's rows GS_PF_ROWS ahead. Tiles start on W's 64-byte lines (the
 *    first one's leading lanes masked; safetensors data is rarely aligned, and loads
 *    split across two lines made the product 1.6x slower) and the last tile runs only
 *    the 16-column vectors it needs.
 * Every output element goes through the same instructions wherever it lies in a tile
 * (edge rows reuse a valid row and are not stored, edge columns are masked, the K tail
 * is masked), so a result does not depend on how callers split the columns. The axpy
 * form sums k in order starting from y (accumulate) or 0, so its K blocks do not change
 * the sums either.
 * What it does not: threading (callers split the columns), the axpy form without
 * AVX-512 (as_gemm_small_xw_ok() = 0: callers use sgemm; the function then runs a
 * scalar loop), the dot form without AVX2 + FMA (likewise, as_gemm_small_ok()).
 */
#include "core/gemm_small.h"

#include <stdint.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define GS_X86 1
#endif

/* 0: as the CPU allows; 1: AVX2 at most; 2: scalar (as_gemm_small_force). */
static int gs_force;

void as_gemm_small_force(int level) { gs_force = level; }

static int gs_avx512(void) {
#ifdef GS_X86
    return gs_force == 0 && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

static int gs_avx2(void) {
#ifdef GS_X86
    return gs_force <= 1 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

int as_gemm_small_ok(void) { return gs_avx512() || gs_avx2(); }

int as_gemm_small_xw_ok(void) { return gs_avx512(); }

#ifdef GS_X86
#define GS_TARGET __attribute__((target("avx2,fma")))
#define GS_TARGET512 __attribute__((target("avx512f")))

/* ---- dot form, AVX2 + FMA ----------------------------------------------------------- */

GS_TARGET static inline float gs_hsum(__m256 v) {
    __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
    __m128 s = _mm_add_ps(lo, hi);
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* The 3 x 4 tile: rows xr[0..2] of x against rows wr[0..3] of W; out[r][c]. */
GS_TARGET static void gs_tile_3x4(const float *const xr[3], const float *const wr[4], int K, float out[3][4]) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c02 = c00, c03 = c00;
    __m256 c10 = c00, c11 = c00, c12 = c00, c13 = c00;
    __m256 c20 = c00, c21 = c00, c22 = c00, c23 = c00;
    const float *x0 = xr[0], *x1 = xr[1], *x2 = xr[2];
    const float *w0 = wr[0], *w1 = wr[1], *w2 = wr[2], *w3 = wr[3];
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
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) {
            float s = gs_hsum(acc[r][c]);
            for (int kk = k; kk < K; kk++) s += xr[r][kk] * wr[c][kk];
            out[r][c] = s;
        }
}

GS_TARGET static void gs_xwt_avx2(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw,
                                  float *y, size_t ldy, int accumulate) {
    for (int n = 0; n < N; n += 4) {
        const int nc = N - n < 4 ? N - n : 4;
        const float *wr[4];
        for (int c = 0; c < 4; c++) wr[c] = w + (size_t)(n + (c < nc ? c : nc - 1)) * ldw;
        for (int m = 0; m < M; m += 3) {
            const int mr = M - m < 3 ? M - m : 3;
            const float *xr[3];
            for (int r = 0; r < 3; r++) xr[r] = x + (size_t)(m + (r < mr ? r : mr - 1)) * ldx;
            float t[3][4];
            gs_tile_3x4(xr, wr, K, t);
            for (int r = 0; r < mr; r++) {
                float *yr = y + (size_t)(m + r) * ldy + n;
                for (int c = 0; c < nc; c++) yr[c] = accumulate ? yr[c] + t[r][c] : t[r][c];
            }
        }
    }
}

/* ---- dot form, AVX-512 -------------------------------------------------------------- */

/* The four lane sums of a, b, c, d as one 4-float vector. */
GS_TARGET512 static inline __m128 gs_sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)); /* per 128: a02 b02 a13 b13 */
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    __m512 s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2))); /* per 128: a b c d */
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

#define GS_FMA_COL(c, ptr)                          \
    b = _mm512_maskz_loadu_ps(mk, (ptr) + k);       \
    c0##c = _mm512_fmadd_ps(a0, b, c0##c);          \
    c1##c = _mm512_fmadd_ps(a1, b, c1##c);          \
    c2##c = _mm512_fmadd_ps(a2, b, c2##c);          \
    c3##c = _mm512_fmadd_ps(a3, b, c3##c)

/* out[r][0..5] = the 6 dot products of row xr[r] with rows wr[0..5], r < 4 (24 zmm
 * accumulators: each 16-float step loads 4 rows of x and 6 of W for 24 FMAs, so x, which
 * streams from L2, costs one load per 6 FMAs). pf: 6 rows of W to prefetch alongside
 * (the next columns' rows), or NULL. */
GS_TARGET512 static void gs_tile_4x6_512(const float *const xr[4], const float *const wr[6], const float *const *pf,
                                         int K, float out[4][8]) {
    __m512 c00 = _mm512_setzero_ps(), c01 = c00, c02 = c00, c03 = c00, c04 = c00, c05 = c00;
    __m512 c10 = c00, c11 = c00, c12 = c00, c13 = c00, c14 = c00, c15 = c00;
    __m512 c20 = c00, c21 = c00, c22 = c00, c23 = c00, c24 = c00, c25 = c00;
    __m512 c30 = c00, c31 = c00, c32 = c00, c33 = c00, c34 = c00, c35 = c00;
    __mmask16 mk = 0xffff;
    for (int k = 0; k < K; k += 16) {
        if (K - k < 16) mk = (__mmask16)((1u << (K - k)) - 1u);
        if (pf)
            for (int c = 0; c < 6; c++) _mm_prefetch((const char *)(pf[c] + k), _MM_HINT_T0);
        __m512 a0 = _mm512_maskz_loadu_ps(mk, xr[0] + k), a1 = _mm512_maskz_loadu_ps(mk, xr[1] + k);
        __m512 a2 = _mm512_maskz_loadu_ps(mk, xr[2] + k), a3 = _mm512_maskz_loadu_ps(mk, xr[3] + k), b;
        GS_FMA_COL(0, wr[0]);
        GS_FMA_COL(1, wr[1]);
        GS_FMA_COL(2, wr[2]);
        GS_FMA_COL(3, wr[3]);
        GS_FMA_COL(4, wr[4]);
        GS_FMA_COL(5, wr[5]);
    }
    _mm_storeu_ps(out[0], gs_sum4(c00, c01, c02, c03));
    _mm_storeu_ps(out[1], gs_sum4(c10, c11, c12, c13));
    _mm_storeu_ps(out[2], gs_sum4(c20, c21, c22, c23));
    _mm_storeu_ps(out[3], gs_sum4(c30, c31, c32, c33));
    _mm_storeu_ps(out[0] + 4, gs_sum4(c04, c05, c14, c15)); /* rows 0 and 1, columns 4 and 5 */
    _mm_storeu_ps(out[2] + 4, gs_sum4(c24, c25, c34, c35));
    out[1][4] = out[0][6];
    out[1][5] = out[0][7];
    out[3][4] = out[2][6];
    out[3][5] = out[2][7];
}

GS_TARGET512 static void gs_xwt_512(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw,
                                    float *y, size_t ldy, int accumulate) {
    for (int n = 0; n < N; n += 6) {
        const int nc = N - n < 6 ? N - n : 6;
        const float *wr[6], *pf[6];
        for (int c = 0; c < 6; c++) {
            wr[c] = w + (size_t)(n + (c < nc ? c : nc - 1)) * ldw;
            pf[c] = w + (size_t)(n + 6 + c < N ? n + 6 + c : N - 1) * ldw;
        }
        for (int m = 0; m < M; m += 4) {
            const int mr = M - m < 4 ? M - m : 4;
            const float *xr[4];
            for (int r = 0; r < 4; r++) xr[r] = x + (size_t)(m + (r < mr ? r : mr - 1)) * ldx;
            float t[4][8];
            gs_tile_4x6_512(xr, wr, m == 0 ? pf : NULL, K, t); /* W's next rows, from memory */
            for (int r = 0; r < mr; r++) {
                float *yr = y + (size_t)(m + r) * ldy + n;
                for (int c = 0; c < nc; c++) yr[c] = accumulate ? yr[c] + t[r][c] : t[r][c];
            }
        }
    }
}

/* ---- axpy form, AVX-512 ------------------------------------------------------------- */

/* Rows of W per block of the axpy form: the block's 64-column strip is GS_KC x 256 bytes. */
#define GS_KC 256

#define GS_AXPY_ROW(r)                                           \
    a = _mm512_set1_ps(xr[r][k]);                                \
    c##r##0 = _mm512_fmadd_ps(a, b0, c##r##0);                   \
    if (nv > 1) c##r##1 = _mm512_fmadd_ps(a, b1, c##r##1);       \
    if (nv > 2) c##r##2 = _mm512_fmadd_ps(a, b2, c##r##2);       \
    if (nv > 3) c##r##3 = _mm512_fmadd_ps(a, b3, c##r##3)

#define GS_LOAD_ROW(r)                                                                   \
    c##r##0 = init ? _mm512_maskz_loadu_ps(m0, yr[r]) : _mm512_setzero_ps();             \
    c##r##1 = init && nv > 1 ? _mm512_maskz_loadu_ps(m1, yr[r] + 16) : _mm512_setzero_ps(); \
    c##r##2 = init && nv > 2 ? _mm512_maskz_loadu_ps(m2, yr[r] + 32) : _mm512_setzero_ps(); \
    c##r##3 = init && nv > 3 ? _mm512_maskz_loadu_ps(m3, yr[r] + 48) : _mm512_setzero_ps()

#define GS_STORE_ROW(r)                                              \
    if (r < mr) {                                                    \
        _mm512_mask_storeu_ps(yr[r], m0, c##r##0);                   \
        if (nv > 1) _mm512_mask_storeu_ps(yr[r] + 16, m1, c##r##1);  \
        if (nv > 2) _mm512_mask_storeu_ps(yr[r] + 32, m2, c##r##2);  \
        if (nv > 3) _mm512_mask_storeu_ps(yr[r] + 48, m3, c##r##3);  \
    }

/* Rows of W ahead of the current one that the first tile of rows prefetches: W's rows lie
 * ldw floats apart, too far for the hardware prefetchers to follow. */
#define GS_PF_ROWS 32

/* Lanes [lo, hi) of a 16-lane vector (clamped to 0..16). */
static __mmask16 gs_lanes(int lo, int hi) {
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    return hi <= lo ? 0 : (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* y rows yr[0..mr) columns [lo, hi) (0 <= lo < 16, lo < hi <= 16 nv) (+)= sum_{k0 <= k < k1}
 * xr[r][k] w[k, :], nv vectors of 16 columns (a constant where it is inlined); columns
 * outside [lo, hi) are neither read nor written. init: start from y's values, else from 0.
 * Rows r >= mr repeat a valid row, not stored. pf_end > 0: prefetch row k + GS_PF_ROWS of
 * W while below pf_end. */
GS_TARGET512 static inline __attribute__((always_inline)) void
gs_tile_6xnv(const float *const xr[6], float *const yr[6], int mr, const float *w, size_t ldw, int k0, int k1, int lo,
             int hi, int init, int pf_end, const int nv) {
    const __mmask16 m0 = gs_lanes(lo, hi), m1 = gs_lanes(lo - 16, hi - 16), m2 = gs_lanes(lo - 32, hi - 32),
                    m3 = gs_lanes(lo - 48, hi - 48);
    __m512 c00, c01, c02, c03, c10, c11, c12, c13, c20, c21, c22, c23;
    __m512 c30, c31, c32, c33, c40, c41, c42, c43, c50, c51, c52, c53;
    GS_LOAD_ROW(0);
    GS_LOAD_ROW(1);
    GS_LOAD_ROW(2);
    GS_LOAD_ROW(3);
    GS_LOAD_ROW(4);
    GS_LOAD_ROW(5);
    for (int k = k0; k < k1; k++) {
        const float *wk = w + (size_t)k * ldw;
        if (k + GS_PF_ROWS < pf_end) {
            const char *p = (const char *)(wk + GS_PF_ROWS * ldw);
            for (int v = 0; v < nv; v++) _mm_prefetch(p + 64 * v, _MM_HINT_T0);
        }
        __m512 b0 = _mm512_maskz_loadu_ps(m0, wk);
        __m512 b1 = nv > 1 ? _mm512_maskz_loadu_ps(m1, wk + 16) : b0;
        __m512 b2 = nv > 2 ? _mm512_maskz_loadu_ps(m2, wk + 32) : b0;
        __m512 b3 = nv > 3 ? _mm512_maskz_loadu_ps(m3, wk + 48) : b0;
        __m512 a;
        GS_AXPY_ROW(0);
        GS_AXPY_ROW(1);
        GS_AXPY_ROW(2);
        GS_AXPY_ROW(3);
        GS_AXPY_ROW(4);
        GS_AXPY_ROW(5);
    }
    GS_STORE_ROW(0);
    GS_STORE_ROW(1);
    GS_STORE_ROW(2);
    GS_STORE_ROW(3);
    GS_STORE_ROW(4);
    GS_STORE_ROW(5);
}

#define GS_TILE_NV(nv)                                                                                                  \
    GS_TARGET512 static void gs_tile_6x##nv(const float *const xr[6], float *const yr[6], int mr, const float *w,     \
                                            size_t ldw, int k0, int k1, int lo, int hi, int init, int pf_end) {      \
        gs_tile_6xnv(xr, yr, mr, w, ldw, k0, k1, lo, hi, init, pf_end, nv);                                             \
    }
GS_TILE_NV(1)
GS_TILE_NV(2)
GS_TILE_NV(3)
GS_TILE_NV(4)

/* p + c floats, c possibly negative: the base of a tile whose first lanes are masked off. */
static inline const float *gs_at(const float *p, long c) { return (const float *)((uintptr_t)p + (uintptr_t)(c * 4)); }

GS_TARGET512 static void gs_xw_512(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw,
                                   float *y, size_t ldy, int accumulate) {
    /* Tiles start on W's 64-byte lines when every row of W lies alike (ldw a multiple of 16
       floats): the first tile begins `shift` columns before column 0, those lanes masked.
       A W row of 64 floats then spans 4 lines, not 5, and no load splits across two. */
    const int shift = ldw % 16 == 0 ? (int)(((uintptr_t)w / sizeof(float)) % 16) : 0;
    for (long c = -shift; c < N; c += 64) {
        const int lo = c < 0 ? (int)-c : 0, hi = N - c < 64 ? (int)(N - c) : 64;
        int k0 = 0;
        do { /* at least once: K = 0 still writes y (0 or as it was) */
            const int k1 = K - k0 < GS_KC ? K : k0 + GS_KC;
            for (int m = 0; m < M; m += 6) {
                const int mr = M - m < 6 ? M - m : 6;
                const float *xr[6];
                float *yr[6];
                for (int r = 0; r < 6; r++) {
                    int rr = m + (r < mr ? r : mr - 1);
                    xr[r] = x + (size_t)rr * ldx;
                    yr[r] = (float *)gs_at(y + (size_t)rr * ldy, c);
                }
                const float *wc = gs_at(w, c);
                const int init = k0 > 0 || accumulate, pf = m == 0 ? K : 0;
                switch ((hi + 15) / 16) { /* vectors the tile needs */
                case 1: gs_tile_6x1(xr, yr, mr, wc, ldw, k0, k1, lo, hi, init, pf); break;
                case 2: gs_tile_6x2(xr, yr, mr, wc, ldw, k0, k1, lo, hi, init, pf); break;
                case 3: gs_tile_6x3(xr, yr, mr, wc, ldw, k0, k1, lo, hi, init, pf); break;
                default: gs_tile_6x4(xr, yr, mr, wc, ldw, k0, k1, lo, hi, init, pf); break;
                }
            }
        } while ((k0 += GS_KC) < K);
    }
}
#endif

/* The scalar loops: y[m, n] (+)= sum_k x[m, k] w[n sn + k sk], k in order. */
static void gs_scalar(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t sn, size_t sk, float *y,
                      size_t ldy, int accumulate) {
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            float *yc = y + (size_t)m * ldy + n, s = accumulate ? *yc : 0.0f;
            for (int k = 0; k < K; k++) s += x[(size_t)m * ldx + k] * w[(size_t)n * sn + (size_t)k * sk];
            *yc = s;
        }
}

void as_gemm_small_xwt(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                       size_t ldy, int accumulate) {
#ifdef GS_X86
    if (gs_avx512()) {
        gs_xwt_512(M, N, K, x, ldx, w, ldw, y, ldy, accumulate);
        return;
    }
    if (gs_avx2()) {
        gs_xwt_avx2(M, N, K, x, ldx, w, ldw, y, ldy, accumulate);
        return;
    }
#endif
    gs_scalar(M, N, K, x, ldx, w, ldw, 1, y, ldy, accumulate);
}

void as_gemm_small_xw(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                      size_t ldy, int accumulate) {
#ifdef GS_X86
    if (gs_avx512()) {
        gs_xw_512(M, N, K, x, ldx, w, ldw, y, ldy, accumulate);
        return;
    }
#endif
    gs_scalar(M, N, K, x, ldx, w, 1, ldw, y, ldy, accumulate);
}
