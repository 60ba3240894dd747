/* gemm_bf16.c — BF16 products (see gemm_bf16.h).
 *
 * Native kernel (x86-64 with AVX-512 BF16): every output y[m, n] is a dot product of
 * row m of x with row n of W, both contiguous along K, so no operand is packed. A tile
 * of 6 rows x 4 columns keeps 24 accumulators of 16 F32 lanes (edge rows: the same tile
 * with 1-5 rows); each step over 32 values of K loads 4 + 6 vectors and issues 24
 * vdpbf16ps (each 32 products summed pairwise into 16 lanes); the lanes of 4 accumulators are summed together at the end of a K block
 * (gb_sum4). Blocks: 64 columns of W x GB_KB values of K (256 KiB of BF16) stay in L2
 * while every 6-row tile of x passes over them, and the tiles fetch the next block into
 * L2 meanwhile (core/prefetch.h); K tails use masked loads; edge columns (N
 * not a multiple of 4) are single dot products. Summation order: lanes, then K blocks in
 * order.
 * Fallback: blocks of x and W widened to F32 and one sgemm per block (exact products of
 * the same BF16 inputs, F32 sums in sgemm's order).
 *
 * y (+)= x W with W (K, N) row-major (as_gemm_bf16_xw): W is read along N, so a block of
 * 64 columns x GX_KB rows is packed as pairs of rows interleaved (word p*64 + j holds
 * W[2p][j] and W[2p+1][j], the layout vdpbf16ps multiplies pairwise; 32 KiB, in L1);
 * the next block's rows are fetched into L2 while this one is multiplied (core/prefetch.h);
 * a tile of 6 rows x 64 columns keeps 24 accumulators, and each pair step broadcasts
 * x[m][2p..2p+1] and issues 24 vdpbf16ps into the outputs' own lanes (no final
 * reduction). Each output sums its pairs in order along K.
 *
 * y = x W^T from W packed once (as_gemm_bf16_pack, as_gemm_bf16_xwt_packed): the same
 * interleaved pairs, laid out once for the whole of W in panels of 64 rows of W (outputs),
 * so the x W tile above runs on them with nothing packed per call and no sum across lanes
 * (the dot-product kernel's gb_sum4 and edge tiles were 15% of its time at K = 768); blocks
 * of GP_KB values of K per panel, the next block fetched into L2 meanwhile. Packing is a
 * transposition of 16 x 16 words at a time (gb_transpose16).
 *
 * F32 products on AVX-512F (precision f32), the same 6 x 64 tiles with one FMA per product
 * in order along K: F32 x times that packed BF16 layout, each pair's weights widened in
 * the tile by a shift (even K) or a mask (odd K) (as_gemm_f32_xwt_packed; on W as stored,
 * blocks of 64 rows x GP_KB values packed per call: as_gemm_f32_xwt_bf16), and F32 x times
 * F32 weights laid out [k][64] (as_gemm_f32_xwt: nn.Linear's rows transposed per call in
 * blocks of GW_KB values, Conv1D's [in, out] rows read as they lie). Full tiles use plain
 * loads (masked loads in the inner loop cost 10%).
 */
#include "core/gemm_bf16.h"
#include "core/core.h"
#include "core/prefetch.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#include <immintrin.h>
#define GB_X86 1
#endif

static int gb_force_fallback; /* as_gemm_bf16_force_fallback */

#define GB_NB 64   /* columns (rows of W) per block */
#define GB_KB 2048 /* values of K per block */
#define GP_KB 1024 /* values of K per block of packed W (the F32 x kernels' blocks too) */

#ifdef GB_X86
#define GB_TARGET __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")))
#define GB_TARGET_F __attribute__((target("avx512f")))

/* 16 values at a time, the integer rounding of as_f32_to_bf16 (bit-identical, NaN
 * included, denormals kept; vcvtneps2bf16 would flush them). */
GB_TARGET_F static size_t gb_f32_to_bf16_avx512(uint16_t *dst, const float *src, size_t n) {
    const __m512i absm = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i bias = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), qnan = _mm512_set1_epi32(0x40);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_loadu_si512(src + i);
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, absm), inf);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
        __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(bias, lsb)), 16);
        r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(x, 16), qnan);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
    }
    return i;
}

/* 16 values at a time: each BF16 value shifted into the high half of an F32. */
GB_TARGET_F static size_t gb_bf16_to_f32_avx512(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(h, 16));
    }
    return i;
}
#endif

void as_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
    size_t i = 0;
#ifdef GB_X86
    if (__builtin_cpu_supports("avx512f")) i = gb_f32_to_bf16_avx512(dst, src, n);
#endif
    for (; i < n; i++) dst[i] = as_f32_to_bf16(src[i]);
}

/* Blocks of 32 x 32 values: each source row of a block rounded at once (as_f32_to_bf16_n),
 * then the block's BF16 values transposed; both stay in L1. */
#define GB_TB 32
void as_f32_to_bf16_t(uint16_t *dst, size_t ldd, const float *src, size_t lds, int rows, int cols) {
    uint16_t blk[GB_TB * GB_TB]; /* (rows of the block, GB_TB) */
    for (int r0 = 0; r0 < rows; r0 += GB_TB) {
        int r1 = r0 + GB_TB < rows ? r0 + GB_TB : rows;
        for (int c0 = 0; c0 < cols; c0 += GB_TB) {
            int c1 = c0 + GB_TB < cols ? c0 + GB_TB : cols;
            for (int r = r0; r < r1; r++)
                as_f32_to_bf16_n(blk + (size_t)(r - r0) * GB_TB, src + (size_t)r * lds + c0, (size_t)(c1 - c0));
            for (int c = c0; c < c1; c++)
                for (int r = r0; r < r1; r++) dst[(size_t)c * ldd + r] = blk[(size_t)(r - r0) * GB_TB + (c - c0)];
        }
    }
}

void as_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
#ifdef GB_X86
    if (__builtin_cpu_supports("avx512f")) i = gb_bf16_to_f32_avx512(dst, src, n);
#endif
    for (; i < n; i++) {
        uint32_t u = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &u, 4);
    }
}

#ifdef GB_X86

/* Sums of the 16 lanes of each of a, b, c, d, as one vector {sum a, sum b, sum c, sum d}. */
GB_TARGET static inline __m128 gb_sum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b)); /* a0 b0 a1 b1 per 128 */
    __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    __m512 s = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))),
                             _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(ab), _mm512_castps_pd(cd))));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* A tile of R rows (1..6, a constant where inlined) x 4 columns over K values [k0, k1):
 * out[r] = {y[r][0..3]} partial sums. */
GB_TARGET static inline __attribute__((always_inline)) void gb_tile_rx4(const int R, const uint16_t *const *xr,
                                                                        const uint16_t *const *wc, int k0, int k1,
                                                                        __m128 *out) {
    __m512 acc[6][4];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < 4; c++) acc[r][c] = _mm512_setzero_ps();
    int k = k0;
    for (; k + 32 <= k1; k += 32) {
        __m512i b0 = _mm512_loadu_si512(wc[0] + k), b1 = _mm512_loadu_si512(wc[1] + k);
        __m512i b2 = _mm512_loadu_si512(wc[2] + k), b3 = _mm512_loadu_si512(wc[3] + k);
        for (int r = 0; r < R; r++) {
            __m512i a = _mm512_loadu_si512(xr[r] + k);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)a, (__m512bh)b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)a, (__m512bh)b1);
            acc[r][2] = _mm512_dpbf16_ps(acc[r][2], (__m512bh)a, (__m512bh)b2);
            acc[r][3] = _mm512_dpbf16_ps(acc[r][3], (__m512bh)a, (__m512bh)b3);
        }
    }
    if (k < k1) { /* K tail: masked loads (zeros contribute nothing) */
        __mmask32 mk = (__mmask32)((1ull << (k1 - k)) - 1u);
        __m512i b0 = _mm512_maskz_loadu_epi16(mk, wc[0] + k), b1 = _mm512_maskz_loadu_epi16(mk, wc[1] + k);
        __m512i b2 = _mm512_maskz_loadu_epi16(mk, wc[2] + k), b3 = _mm512_maskz_loadu_epi16(mk, wc[3] + k);
        for (int r = 0; r < R; r++) {
            __m512i a = _mm512_maskz_loadu_epi16(mk, xr[r] + k);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)a, (__m512bh)b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)a, (__m512bh)b1);
            acc[r][2] = _mm512_dpbf16_ps(acc[r][2], (__m512bh)a, (__m512bh)b2);
            acc[r][3] = _mm512_dpbf16_ps(acc[r][3], (__m512bh)a, (__m512bh)b3);
        }
    }
    for (int r = 0; r < R; r++) out[r] = gb_sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
}

/* The R x 4 tile for R = 1..5 (edge rows), each with its own unrolled body. */
GB_TARGET static void gb_tile(int R, const uint16_t *const *xr, const uint16_t *const *wc, int k0, int k1,
                              __m128 *out) {
    switch (R) {
    case 5: gb_tile_rx4(5, xr, wc, k0, k1, out); break;
    case 4: gb_tile_rx4(4, xr, wc, k0, k1, out); break;
    case 3: gb_tile_rx4(3, xr, wc, k0, k1, out); break;
    case 2: gb_tile_rx4(2, xr, wc, k0, k1, out); break;
    default: gb_tile_rx4(1, xr, wc, k0, k1, out); break;
    }
}

/* One output y[m, n] over K values [k0, k1) (edge rows and columns). */
GB_TARGET static float gb_dot(const uint16_t *x, const uint16_t *w, int k0, int k1) {
    __m512 acc = _mm512_setzero_ps();
    for (int k = k0; k < k1; k += 32) {
        __mmask32 mk = k1 - k >= 32 ? 0xffffffffu : (__mmask32)((1ull << (k1 - k)) - 1u);
        acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_maskz_loadu_epi16(mk, x + k),
                               (__m512bh)_mm512_maskz_loadu_epi16(mk, w + k));
    }
    return _mm512_reduce_add_ps(acc);
}

/* y += (or =, first K block) partial sum t of element (m, n), with the bias on the first. */
static inline void gb_put(float *y, float t, int first, const float *bias, int n) {
    *y = (first ? (bias ? bias[n] : 0.0f) : *y) + t;
}

/* While a block of W is multiplied, the tiles fetch the next one into L2 (core/prefetch.h):
 * BERT-base's products at 128 tokens ran 3-25% faster, one thread, W cold
 * (bench/gemm_bf16_bench.c). Products of fewer than GB_AHEAD_MIN_ROWS rows have too little
 * work per block to spread the fetches over; they are left to the hardware. In x W^T the
 * tiles re-read their rows of x from L2 for every block: when those rows pass
 * GB_AHEAD_MAX_X_BYTES (512 tokens of a 2048-wide input: 2 MiB), the next block would
 * evict the current one, and the fetch ran 3-5% slower, so it is left out there. */
#define GB_AHEAD_MIN_ROWS 12
#define GB_AHEAD_MAX_X_BYTES ((size_t)256 << 10)

/* The next block to fetch: rows [r0, r1) of W, values [ka, kb) of each, over `calls` steps
 * of a block of M rows (M = 0: no fetching). */
static void gb_ahead_init(as_ahead *a, const uint16_t *w, size_t ldw, int r0, int r1, int ka, int kb, size_t calls,
                          int M) {
    size_t rows = M >= GB_AHEAD_MIN_ROWS && r1 > r0 && kb > ka ? (size_t)(r1 - r0) : 0;
    as_ahead_init(a, w + (size_t)r0 * ldw + ka, ldw * sizeof(uint16_t), rows,
                  rows ? (size_t)(kb - ka) * sizeof(uint16_t) : 0, calls);
}

GB_TARGET static void gb_native(int M, int N, int K, const uint16_t *x, size_t ldx, const uint16_t *w, size_t ldw,
                                const float *bias, float *y, size_t ldy) {
    for (int n0 = 0; n0 < N; n0 += GB_NB) {
        int n1 = n0 + GB_NB < N ? n0 + GB_NB : N;
        for (int k0 = 0; k0 < K; k0 += GB_KB) {
            int k1 = k0 + GB_KB < K ? k0 + GB_KB : K, first = k0 == 0;
            as_ahead ahead; /* the next block: the next values of these rows, or the next rows' first */
            size_t calls = (size_t)((M + 5) / 6) * (size_t)((n1 - n0 + 3) / 4);
            int fm = (size_t)M * (size_t)(k1 - k0) * sizeof(uint16_t) <= GB_AHEAD_MAX_X_BYTES ? M : 0;
            int nn = n1 + GB_NB < N ? n1 + GB_NB : N, kn = k1 + GB_KB < K ? k1 + GB_KB : K;
            if (k1 < K) gb_ahead_init(&ahead, w, ldw, n0, n1, k1, kn, calls, fm);
            else gb_ahead_init(&ahead, w, ldw, n1, nn, 0, GB_KB < K ? GB_KB : K, calls, fm);
            for (int m = 0; m < M; m += 6) {
                int mr = M - m < 6 ? M - m : 6;
                for (int n = n0; n < n1; n += 4) {
                    int nc = n1 - n < 4 ? n1 - n : 4;
                    as_ahead_step(&ahead);
                    if (nc == 4) {
                        const uint16_t *xr[6], *wc[4];
                        for (int r = 0; r < mr; r++) xr[r] = x + (size_t)(m + r) * ldx;
                        for (int c = 0; c < 4; c++) wc[c] = w + (size_t)(n + c) * ldw;
                        __m128 t[6];
                        if (mr == 6) gb_tile_rx4(6, xr, wc, k0, k1, t); /* inlined: the common case */
                        else gb_tile(mr, xr, wc, k0, k1, t);
                        __m128 b4 = bias ? _mm_loadu_ps(bias + n) : _mm_setzero_ps();
                        for (int r = 0; r < mr; r++) { /* as gb_put, 4 columns at once */
                            float *yr = y + (size_t)(m + r) * ldy + n;
                            _mm_storeu_ps(yr, _mm_add_ps(first ? b4 : _mm_loadu_ps(yr), t[r]));
                        }
                        continue;
                    }
                    for (int r = 0; r < mr; r++)
                        for (int c = 0; c < nc; c++)
                            gb_put(y + (size_t)(m + r) * ldy + n + c,
                                   gb_dot(x + (size_t)(m + r) * ldx, w + (size_t)(n + c) * ldw, k0, k1), first, bias,
                                   n + c);
                }
            }
        }
    }
}
#endif

#define GX_NB 64  /* columns of W and y per packed block: 4 vectors of 16 */
#define GX_KB 256 /* rows of W (values of K) per packed block: 128 pairs */

#ifdef GB_X86
/* (permutex2var indices) the words {a[i], b[i]} for i = 0..15 and for i = 16..31 */
static const uint16_t gx_lo_idx[32] = {0,  32, 1,  33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                       8,  40, 9,  41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
static const uint16_t gx_hi_idx[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                       24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};

/* pk[p * 64 + j] = W[k0 + 2p][n0 + j] | W[k0 + 2p + 1][n0 + j] << 16 for the rows
 * [k0, k1) and the nc <= 64 columns from n0; columns past nc and a row past k1 are 0. */
GB_TARGET static void gx_pack(const uint16_t *w, size_t ldw, int n0, int nc, int k0, int k1, uint32_t *pk) {
    const __m512i lo = _mm512_loadu_si512(gx_lo_idx), hi = _mm512_loadu_si512(gx_hi_idx);
    __mmask32 mh[2];
    mh[0] = nc >= 32 ? 0xffffffffu : (__mmask32)((1ull << nc) - 1u);
    mh[1] = nc <= 32 ? 0u : nc >= 64 ? 0xffffffffu : (__mmask32)((1ull << (nc - 32)) - 1u);
    for (int k = k0; k < k1; k += 2, pk += GX_NB) {
        const uint16_t *r0 = w + (size_t)k * ldw + n0, *r1 = r0 + ldw;
        for (int h = 0; h < 2; h++) { /* 32 columns each: two vectors of 16 pairs */
            __m512i a = _mm512_maskz_loadu_epi16(mh[h], r0 + 32 * h);
            __m512i b = k + 1 < k1 ? _mm512_maskz_loadu_epi16(mh[h], r1 + 32 * h) : _mm512_setzero_si512();
            _mm512_storeu_si512(pk + 32 * h, _mm512_permutex2var_epi16(a, lo, b));
            _mm512_storeu_si512(pk + 32 * h + 16, _mm512_permutex2var_epi16(a, hi, b));
        }
    }
}

/* Lanes [lo, hi) of a 16-lane vector (clamped to 0..16). */
static inline __mmask16 gx_lanes(int lo, int hi) {
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    return hi <= lo ? (__mmask16)0 : (__mmask16)(((1u << hi) - 1u) & ~((1u << lo) - 1u));
}

/* The accumulators of rows m..m+R-1 of y[:, n0 + lo : n0 + hi) (0 <= lo < hi <= 64):
 * from y (add = 1), from bias[n0 + j] (bias given), or 0. */
GB_TARGET_F static inline __attribute__((always_inline)) void gt_acc_init(const int R, __m512 acc[6][4], const float *y,
                                                                          size_t ldy, int m, int n0, int lo, int hi,
                                                                          const float *bias, int add) {
    for (int c = 0; c < 4; c++) {
        __mmask16 mk = gx_lanes(lo - 16 * c, hi - 16 * c);
        __m512 b = bias ? _mm512_maskz_loadu_ps(mk, bias + n0 + 16 * c) : _mm512_setzero_ps();
        for (int r = 0; r < R; r++)
            acc[r][c] = add ? _mm512_maskz_loadu_ps(mk, y + (size_t)(m + r) * ldy + n0 + 16 * c) : b;
    }
}

/* The accumulators stored back into the same columns of y. */
GB_TARGET_F static inline __attribute__((always_inline)) void gt_acc_store(const int R, __m512 acc[6][4], float *y,
                                                                           size_t ldy, int m, int n0, int lo, int hi) {
    for (int c = 0; c < 4; c++) {
        __mmask16 mk = gx_lanes(lo - 16 * c, hi - 16 * c);
        if (!mk) continue;
        for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + (size_t)(m + r) * ldy + n0 + 16 * c, mk, acc[r][c]);
    }
}

/* Rows m..m+R-1 (R 1..6, a constant where inlined) of y[:, n0 + lo : n0 + hi) (+)=
 * x[:, k0:k1] times the packed block pk (64 columns from n0; 0 <= lo < hi <= 64): the
 * sums start from y (add = 1), from bias[n0 + j] (bias given), or from 0, and go on
 * along K in order. */
GB_TARGET static inline __attribute__((always_inline)) void gx_tile(const int R, const uint16_t *x, size_t ldx,
                                                                    int m, int k0, int k1, const uint32_t *pk,
                                                                    float *y, size_t ldy, int n0, int lo, int hi,
                                                                    const float *bias, int add) {
    __m512 acc[6][4];
    gt_acc_init(R, acc, y, ldy, m, n0, lo, hi, bias, add);
    const uint16_t *xr[6];
    for (int r = 0; r < R; r++) xr[r] = x + (size_t)(m + r) * ldx + k0;
    int full = (k1 - k0) / 2, np = (k1 - k0 + 1) / 2;
    for (int p = 0; p < np; p++) {
        const uint32_t *b = pk + (size_t)p * GX_NB;
        __m512i b0 = _mm512_loadu_si512(b), b1 = _mm512_loadu_si512(b + 16);
        __m512i b2 = _mm512_loadu_si512(b + 32), b3 = _mm512_loadu_si512(b + 48);
        for (int r = 0; r < R; r++) {
            uint32_t v;
            if (p < full) memcpy(&v, xr[r] + 2 * p, sizeof v);
            else v = xr[r][2 * p]; /* an odd K: the last value paired with 0 */
            __m512i a = _mm512_set1_epi32((int)v);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)a, (__m512bh)b0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)a, (__m512bh)b1);
            acc[r][2] = _mm512_dpbf16_ps(acc[r][2], (__m512bh)a, (__m512bh)b2);
            acc[r][3] = _mm512_dpbf16_ps(acc[r][3], (__m512bh)a, (__m512bh)b3);
        }
    }
    gt_acc_store(R, acc, y, ldy, m, n0, lo, hi);
}

/* TILE(r, ...) with the row count R (1..6) as a constant, so each count gets its own
 * inlined copy of the tile with its accumulators in registers. */
#define GB_ROWS(R, TILE, ...)                                                                                           \
    switch (R) {                                                                                                       \
    case 6: TILE(6, __VA_ARGS__); break;                                                                               \
    case 5: TILE(5, __VA_ARGS__); break;                                                                               \
    case 4: TILE(4, __VA_ARGS__); break;                                                                               \
    case 3: TILE(3, __VA_ARGS__); break;                                                                               \
    case 2: TILE(2, __VA_ARGS__); break;                                                                               \
    default: TILE(1, __VA_ARGS__); break;                                                                              \
    }

/* gx_tile for R rows (1..6; x untyped: BF16 values), each count its own inlined copy. */
GB_TARGET static void gx_tile_rows(int R, const void *x, size_t ldx, int m, int k0, int k1, const uint32_t *pk,
                                   float *y, size_t ldy, int n0, int lo, int hi, const float *bias, int add) {
    GB_ROWS(R, gx_tile, x, ldx, m, k0, k1, pk, y, ldy, n0, lo, hi, bias, add)
}

GB_TARGET static void gx_native(int M, int N, int K, const uint16_t *x, size_t ldx, const uint16_t *w, size_t ldw,
                                float *y, size_t ldy, int accumulate, uint32_t *pk) {
    for (int n0 = 0; n0 < N; n0 += GX_NB) {
        int nc = N - n0 < GX_NB ? N - n0 : GX_NB;
        for (int k0 = 0; k0 < K; k0 += GX_KB) {
            int k1 = k0 + GX_KB < K ? k0 + GX_KB : K, add = accumulate || k0 > 0;
            gx_pack(w, ldw, n0, nc, k0, k1, pk);
            as_ahead ahead; /* the next block to pack: the next rows of these columns, or the next columns' first */
            size_t calls = (size_t)(M + 5) / 6;
            if (k1 < K) {
                gb_ahead_init(&ahead, w, ldw, k1, k1 + GX_KB < K ? k1 + GX_KB : K, n0, n0 + nc, calls, M);
            } else {
                int na = n0 + GX_NB, nb = na + GX_NB < N ? na + GX_NB : N;
                gb_ahead_init(&ahead, w, ldw, 0, GX_KB < K ? GX_KB : K, na, nb, calls, M);
            }
            int m = 0;
            for (; m + 6 <= M; m += 6) {
                as_ahead_step(&ahead);
                gx_tile(6, x, ldx, m, k0, k1, pk, y, ldy, n0, 0, nc, NULL, add);
            }
            if (m < M) {
                as_ahead_step(&ahead);
                gx_tile_rows(M - m, x, ldx, m, k0, k1, pk, y, ldy, n0, 0, nc, NULL, add);
            }
        }
    }
}
#endif

#ifdef GB_X86
/* Rows m..m+R-1 (R 1..6) of a packed product's tile (gx_tile's arguments, x untyped). */
typedef void (*gp_tile_fn)(int R, const void *x, size_t ldx, int m, int k0, int k1, const uint32_t *blk, float *y,
                           size_t ldy, int n0, int lo, int hi, const float *bias, int add);

/* One pair step of the F32 tile: x[r][k] times the pair's low (even k) halves widened
 * to F32, then, when both, x[r][k + 1] times the high (odd k) halves: each lane's sum
 * goes on in order along K. */
GB_TARGET_F static inline __attribute__((always_inline)) void gf_pair(const int R, const int both, __m512 acc[6][4],
                                                                      const uint32_t *b, const float *xr[6],
                                                                      size_t k) {
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    for (int c = 0; c < 4; c++) {
        __m512i w = _mm512_loadu_si512(b + 16 * c);
        __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
        for (int r = 0; r < R; r++) acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(xr[r][k]), we, acc[r][c]);
        if (!both) continue;
        __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(w, high));
        for (int r = 0; r < R; r++) acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(xr[r][k + 1]), wo, acc[r][c]);
    }
}

/* gx_tile with F32 x: every product an F32 FMA of x by a BF16 weight widened exactly. */
GB_TARGET_F static inline __attribute__((always_inline)) void gf_tile(const int R, const float *x, size_t ldx, int m,
                                                                      int k0, int k1, const uint32_t *pk, float *y,
                                                                      size_t ldy, int n0, int lo, int hi,
                                                                      const float *bias, int add) {
    __m512 acc[6][4];
    gt_acc_init(R, acc, y, ldy, m, n0, lo, hi, bias, add);
    const float *xr[6];
    for (int r = 0; r < R; r++) xr[r] = x + (size_t)(m + r) * ldx + k0;
    int full = (k1 - k0) / 2;
    for (int p = 0; p < full; p++) gf_pair(R, 1, acc, pk + (size_t)p * GX_NB, xr, 2 * (size_t)p);
    if ((k1 - k0) & 1) gf_pair(R, 0, acc, pk + (size_t)full * GX_NB, xr, 2 * (size_t)full);
    gt_acc_store(R, acc, y, ldy, m, n0, lo, hi);
}

GB_TARGET_F static void gf_tile_rows(int R, const void *x, size_t ldx, int m, int k0, int k1, const uint32_t *blk,
                                     float *y, size_t ldy, int n0, int lo, int hi, const float *bias, int add) {
    GB_ROWS(R, gf_tile, x, ldx, m, k0, k1, blk, y, ldy, n0, lo, hi, bias, add)
}

/* Rows 0..R-1 of y[:, n0 : n0 + hi) (+)= x[:, 0:kc] times F32 weights laid out
 * [k][64 columns from n0], ldp floats from one k to the next (columns past hi not read):
 * the sums start as gx_tile's and go on along K in order, one FMA per product. */
GB_TARGET_F static inline __attribute__((always_inline)) void gw_tile(const int R, const float *x, size_t ldx, int kc,
                                                                      const float *pw, size_t ldp, float *y,
                                                                      size_t ldy, int n0, int hi, const float *bias,
                                                                      int add) {
    __m512 acc[6][4];
    gt_acc_init(R, acc, y, ldy, 0, n0, 0, hi, bias, add);
    const float *xr[6];
    for (int r = 0; r < R; r++) xr[r] = x + (size_t)r * ldx;
    __mmask16 mk[4];
    for (int c = 0; c < 4; c++) mk[c] = gx_lanes(0, hi - 16 * c);
    for (int k = 0; k < kc; k++) {
        const float *b = pw + (size_t)k * ldp;
        for (int c = 0; c < 4; c++) {
            __m512 w = hi == GB_NB ? _mm512_loadu_ps(b + 16 * c) : _mm512_maskz_loadu_ps(mk[c], b + 16 * c);
            for (int r = 0; r < R; r++) acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(xr[r][k]), w, acc[r][c]);
        }
    }
    gt_acc_store(R, acc, y, ldy, 0, n0, 0, hi);
}

GB_TARGET_F static void gw_tile_rows(int R, const float *x, size_t ldx, int kc, const float *pw, size_t ldp, float *y,
                                     size_t ldy, int n0, int hi, const float *bias, int add) {
    if (R == 6 && hi == GB_NB) { /* the common tile: every column, plain loads */
        gw_tile(6, x, ldx, kc, pw, ldp, y, ldy, n0, GB_NB, bias, add);
        return;
    }
    GB_ROWS(R, gw_tile, x, ldx, kc, pw, ldp, y, ldy, n0, hi, bias, add)
}

/* y[:, c0:c1) = x W^T + bias from W packed by as_gemm_bf16_pack, x of xsize bytes per
 * value: for each panel of 64 outputs that [c0, c1) meets, blocks of GP_KB values of K
 * (the panel's pairs for them lie together), every 6-row tile of x over each block (tile:
 * BF16 or F32 x); the next block is fetched into L2 meanwhile (core/prefetch.h). Each
 * output sums its products in order along K. */
static void gp_native(int M, int c0, int c1, int K, const void *x, size_t xsize, size_t ldx, const uint32_t *pk,
                      const float *bias, float *y, size_t ldy, gp_tile_fn tile) {
    size_t P = (size_t)(K + 1) / 2; /* pairs per panel column */
    for (int n0 = c0 / GB_NB * GB_NB; n0 < c1; n0 += GB_NB) {
        int lo = c0 > n0 ? c0 - n0 : 0, hi = c1 - n0 < GB_NB ? c1 - n0 : GB_NB;
        const uint32_t *panel = pk + (size_t)(n0 / GB_NB) * P * GB_NB;
        for (int k0 = 0; k0 < K; k0 += GP_KB) {
            int k1 = k0 + GP_KB < K ? k0 + GP_KB : K;
            const uint32_t *blk = panel + (size_t)(k0 / 2) * GB_NB;
            /* the next block: the rest of this panel, or the next panel's first */
            const uint32_t *next = k1 < K ? blk + (size_t)(GP_KB / 2) * GB_NB : panel + P * GB_NB;
            size_t next_pairs = k1 < K ? (size_t)(K - k1 + 1) / 2 : (n0 + GB_NB < c1 ? P : 0);
            if (next_pairs > GP_KB / 2) next_pairs = GP_KB / 2;
            as_ahead ahead;
            as_ahead_init(&ahead, next, 0, M >= GB_AHEAD_MIN_ROWS ? 1 : 0, next_pairs * GB_NB * sizeof(uint32_t),
                          (size_t)(M + 5) / 6);
            const float *b = k0 == 0 ? bias : NULL;
            int add = k0 > 0, m = 0;
            for (; m < M; m += 6) {
                as_ahead_step(&ahead);
                tile(M - m < 6 ? M - m : 6, (const char *)x + (size_t)m * ldx * xsize, ldx, 0, k0, k1, blk, y + (size_t)m * ldy,
                     ldy, n0, lo, hi, b, add);
            }
        }
    }
}
#endif

size_t as_gemm_bf16_packed_words(int N, int K) {
    return N <= 0 || K <= 0 ? 0 : (size_t)(N + GB_NB - 1) / GB_NB * GB_NB * (((size_t)K + 1) / 2);
}

#ifdef GB_X86
/* The 16 x 16 words r[i][j] transposed in place (r[j][i]): pairs of rows interleaved
 * (32-bit, then 64-bit), then the 128-bit lanes gathered. */
GB_TARGET_F static inline void gb_transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) { /* u[i + c], lane L: rows i..i+3 of column 4 L + c */
        r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i p0 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), p1 = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd);
        __m512i q0 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88), q1 = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
        t[c] = _mm512_shuffle_i32x4(p0, q0, 0x88);
        t[8 + c] = _mm512_shuffle_i32x4(p0, q0, 0xdd);
        t[4 + c] = _mm512_shuffle_i32x4(p1, q1, 0x88);
        t[12 + c] = _mm512_shuffle_i32x4(p1, q1, 0xdd);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* as_gemm_bf16_pack for rows [0, N16) (N16 a multiple of 16) and pairs [0, P16) (a
 * multiple of 16, all within K): blocks of 16 rows x 16 pairs transposed. */
GB_TARGET_F static void gb_pack16(const uint16_t *w, size_t ldw, int N16, size_t P, size_t P16, uint32_t *pk) {
    for (int n0 = 0; n0 < N16; n0 += 16) {
        uint32_t *col = pk + (size_t)(n0 / GB_NB) * P * GB_NB + (size_t)(n0 % GB_NB);
        for (size_t p0 = 0; p0 < P16; p0 += 16) {
            __m512i r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(w + (size_t)(n0 + i) * ldw + 2 * p0);
            gb_transpose16(r);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512(col + (p0 + (size_t)i) * GB_NB, r[i]);
        }
    }
}
/* pw[k * 64 + j] = w[j][k0 + k] for j < nc (<= 64), k < kc; columns past nc are 0. */
GB_TARGET_F static void gw_pack(const float *w, size_t ldw, int nc, int kc, float *pw) {
    if (nc < GB_NB) memset(pw, 0, sizeof(float) * (size_t)kc * GB_NB);
    int n16 = nc & ~15, k16 = kc & ~15;
    for (int n0 = 0; n0 < n16; n0 += 16)
        for (int k0 = 0; k0 < k16; k0 += 16) {
            __m512i r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512(w + (size_t)(n0 + i) * ldw + k0);
            gb_transpose16(r);
            for (int i = 0; i < 16; i++) _mm512_storeu_si512(pw + (size_t)(k0 + i) * GB_NB + n0, r[i]);
        }
    for (int n = 0; n < nc; n++)
        for (int k = n < n16 ? k16 : 0; k < kc; k++) pw[(size_t)k * GB_NB + n] = w[(size_t)n * ldw + k];
}

#endif

void as_gemm_bf16_pack(const uint16_t *w, size_t ldw, int N, int K, uint32_t *pk) {
    size_t P = ((size_t)K + 1) / 2, words = as_gemm_bf16_packed_words(N, K);
    if (!words) return;
    memset(pk, 0, words * sizeof(uint32_t));
    int N16 = 0;
    size_t P16 = 0; /* the block [0, N16) x [0, P16) done by the vector loop */
#ifdef GB_X86
    if (__builtin_cpu_supports("avx512f")) {
        N16 = N & ~15;
        P16 = ((size_t)K / 2) & ~(size_t)15;
        gb_pack16(w, ldw, N16, P, P16, pk);
    }
#endif
    for (int n = 0; n < N; n++) {
        const uint16_t *row = w + (size_t)n * ldw;
        uint32_t *col = pk + (size_t)(n / GB_NB) * P * GB_NB + (size_t)(n % GB_NB);
        for (size_t p = n < N16 ? P16 : 0; p < P; p++) {
            uint32_t hi = 2 * p + 1 < (size_t)K ? row[2 * p + 1] : 0;
            col[p * GB_NB] = (uint32_t)row[2 * p] | hi << 16;
        }
    }
}

/* y[m, n] = bias[n] or 0 for n in [c0, c1): a product over K = 0 values. */
static int gb_empty_k(int K, int M, int c0, int c1, const float *bias, float *y, size_t ldy) {
    if (K > 0) return 0;
    for (int m = 0; m < M; m++)
        for (int n = c0; n < c1; n++) y[(size_t)m * ldy + n] = bias ? bias[n] : 0.0f;
    return 1;
}

void as_gemm_bf16_xwt_packed(int M, int c0, int c1, int K, const uint16_t *x, size_t ldx, const uint32_t *pk,
                             const float *bias, float *y, size_t ldy) {
    if (M <= 0 || c1 <= c0 || gb_empty_k(K, M, c0, c1, bias, y, ldy)) return;
#ifdef GB_X86
    if (as_gemm_bf16_native()) {
        gp_native(M, c0, c1, K, x, sizeof *x, ldx, pk, bias, y, ldy, gx_tile_rows);
        return;
    }
#endif
    /* scalar loops: each pair's two products (exact in F32) added as vdpbf16ps adds them,
       the odd one first */
    size_t P = ((size_t)K + 1) / 2;
    for (int m = 0; m < M; m++)
        for (int n = c0; n < c1; n++) {
            const uint32_t *col = pk + (size_t)(n / GB_NB) * P * GB_NB + (size_t)(n % GB_NB);
            const uint16_t *xr = x + (size_t)m * ldx;
            float acc = bias ? bias[n] : 0.0f;
            for (size_t p = 0; p < P; p++) {
                uint32_t wp = col[p * GB_NB], x_hi = 2 * p + 1 < (size_t)K ? xr[2 * p + 1] : 0;
                acc += as_bf16_to_f32((uint16_t)x_hi) * as_bf16_to_f32((uint16_t)(wp >> 16));
                acc += as_bf16_to_f32(xr[2 * p]) * as_bf16_to_f32((uint16_t)wp);
            }
            y[(size_t)m * ldy + n] = acc;
        }
}

int as_gemm_f32_packed_native(void) {
#ifdef GB_X86
    return !gb_force_fallback && __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

void as_gemm_f32_xwt_packed(int M, int c0, int c1, int K, const float *x, size_t ldx, const uint32_t *pk,
                            const float *bias, float *y, size_t ldy) {
    if (M <= 0 || c1 <= c0 || gb_empty_k(K, M, c0, c1, bias, y, ldy)) return;
#ifdef GB_X86
    if (as_gemm_f32_packed_native()) {
        gp_native(M, c0, c1, K, x, sizeof *x, ldx, pk, bias, y, ldy, gf_tile_rows);
        return;
    }
#endif
    /* scalar loops: the native kernel's fused multiply-adds in its order */
    size_t P = ((size_t)K + 1) / 2;
    for (int m = 0; m < M; m++)
        for (int n = c0; n < c1; n++) {
            const uint32_t *col = pk + (size_t)(n / GB_NB) * P * GB_NB + (size_t)(n % GB_NB);
            const float *xr = x + (size_t)m * ldx;
            float acc = bias ? bias[n] : 0.0f;
            for (size_t p = 0; p < P; p++) {
                uint32_t wp = col[p * GB_NB];
                acc = fmaf(xr[2 * p], as_bf16_to_f32((uint16_t)wp), acc);
                if (2 * p + 1 < (size_t)K) acc = fmaf(xr[2 * p + 1], as_bf16_to_f32((uint16_t)(wp >> 16)), acc);
            }
            y[(size_t)m * ldy + n] = acc;
        }
}

size_t as_gemm_f32_xwt_bf16_scratch(int K) {
    return K <= 0 ? 0 : (size_t)GB_NB * (size_t)(((K < GP_KB ? K : GP_KB) + 1) / 2);
}

void as_gemm_f32_xwt_bf16(int M, int N, int K, const float *x, size_t ldx, const uint16_t *w, size_t ldw,
                          const float *bias, float *y, size_t ldy, uint32_t *scratch) {
    if (M <= 0 || N <= 0 || gb_empty_k(K, M, 0, N, bias, y, ldy)) return;
#ifdef GB_X86
    if (as_gemm_f32_packed_native()) {
        /* blocks of 64 rows of W x GP_KB values of K packed as as_gemm_bf16_pack lays a
           panel out (a panel of its own: the block's pairs), every 6-row tile of x over
           each; the sums go on along K in order, as on W packed whole */
        for (int n0 = 0; n0 < N; n0 += GB_NB) {
            int nc = N - n0 < GB_NB ? N - n0 : GB_NB;
            for (int k0 = 0; k0 < K; k0 += GP_KB) {
                int k1 = k0 + GP_KB < K ? k0 + GP_KB : K;
                as_gemm_bf16_pack(w + (size_t)n0 * ldw + k0, ldw, nc, k1 - k0, scratch);
                const float *b = k0 == 0 ? bias : NULL;
                for (int m = 0; m < M; m += 6)
                    gf_tile_rows(M - m < 6 ? M - m : 6, x + (size_t)m * ldx + k0, ldx, 0, 0, k1 - k0, scratch,
                                 y + (size_t)m * ldy, ldy, n0, 0, nc, b, k0 > 0);
            }
        }
        return;
    }
#endif
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)m * ldx;
            const uint16_t *wr = w + (size_t)n * ldw;
            float acc = bias ? bias[n] : 0.0f;
            for (int k = 0; k < K; k++) acc = fmaf(xr[k], as_bf16_to_f32(wr[k]), acc);
            y[(size_t)m * ldy + n] = acc;
        }
}

#define GW_KB 512 /* values of K per block of F32 weights (128 KiB: in L2) */

size_t as_gemm_f32_xwt_scratch(int K) { return K <= 0 ? 0 : (size_t)GB_NB * (size_t)(K < GW_KB ? K : GW_KB); }

void as_gemm_f32_xwt(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, int in_out,
                     const float *bias, float *y, size_t ldy, float *scratch) {
    if (M <= 0 || N <= 0 || gb_empty_k(K, M, 0, N, bias, y, ldy)) return;
#ifdef GB_X86
    if (as_gemm_f32_packed_native()) {
        /* blocks of 64 outputs x GW_KB values of K: nn.Linear's rows packed as [k][64]
           (gw_pack), Conv1D's read as they lie; every 6-row tile of x over each */
        for (int n0 = 0; n0 < N; n0 += GB_NB) {
            int nc = N - n0 < GB_NB ? N - n0 : GB_NB;
            for (int k0 = 0; k0 < K; k0 += GW_KB) {
                int kc = K - k0 < GW_KB ? K - k0 : GW_KB;
                const float *pw = w + (size_t)k0 * ldw + n0;
                size_t ldp = ldw;
                if (!in_out) {
                    gw_pack(w + (size_t)n0 * ldw + k0, ldw, nc, kc, scratch);
                    pw = scratch, ldp = GB_NB;
                }
                /* the next block (the next values of these outputs, or the next outputs'
                   first) fetched into L2 while this one is multiplied */
                int kn = k0 + kc < K ? k0 + kc : 0, nn = k0 + kc < K ? n0 : n0 + GB_NB;
                int ncn = N - nn < GB_NB ? N - nn : GB_NB, kcn = K - kn < GW_KB ? K - kn : GW_KB;
                size_t rows = M >= GB_AHEAD_MIN_ROWS && nn < N ? (size_t)(in_out ? kcn : ncn) : 0;
                as_ahead ahead;
                as_ahead_init(&ahead, in_out ? w + (size_t)kn * ldw + nn : w + (size_t)nn * ldw + kn,
                              ldw * sizeof(float), rows, (size_t)(in_out ? ncn : kcn) * sizeof(float),
                              (size_t)(M + 5) / 6);
                const float *b = k0 == 0 ? bias : NULL;
                for (int m = 0; m < M; m += 6) {
                    as_ahead_step(&ahead);
                    gw_tile_rows(M - m < 6 ? M - m : 6, x + (size_t)m * ldx + k0, ldx, kc, pw, ldp,
                                 y + (size_t)m * ldy, ldy, n0, nc, b, k0 > 0);
                }
            }
        }
        return;
    }
#endif
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const float *xr = x + (size_t)m * ldx;
            float acc = bias ? bias[n] : 0.0f;
            for (int k = 0; k < K; k++)
                acc = fmaf(xr[k], in_out ? w[(size_t)k * ldw + n] : w[(size_t)n * ldw + k], acc);
            y[(size_t)m * ldy + n] = acc;
        }
}

#define GX_FB 64 /* the fallback's blocks: 64 rows of x by 64 values of K */

size_t as_gemm_bf16_xw_scratch(int N) {
    size_t packed = (size_t)GX_KB / 2 * GX_NB, fb = (size_t)GX_FB * GX_FB + (size_t)GX_FB * (N > 0 ? N : 0);
    return packed > fb ? packed : fb;
}

void as_gemm_bf16_force_fallback(int on) { gb_force_fallback = on; }

int as_gemm_bf16_native(void) {
#ifdef GB_X86
    return !gb_force_fallback && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

size_t as_gemm_bf16_scratch(int K) { return 2 * (size_t)GB_NB * (size_t)K; }

void as_gemm_bf16_xwt(int M, int N, int K, const uint16_t *x, size_t ldx, const uint16_t *w, size_t ldw,
                      const float *bias, float *y, size_t ldy, float *scratch) {
    if (M <= 0 || N <= 0 || gb_empty_k(K, M, 0, N, bias, y, ldy)) return;
#ifdef GB_X86
    if (as_gemm_bf16_native()) {
        gb_native(M, N, K, x, ldx, w, ldw, bias, y, ldy);
        return;
    }
#endif
    float *xf = scratch, *wf = scratch + (size_t)GB_NB * K; /* blocks of x and W, (GB_NB, K) each */
    for (int m0 = 0; m0 < M; m0 += GB_NB) {
        int mb = M - m0 < GB_NB ? M - m0 : GB_NB;
        for (int m = 0; m < mb; m++) as_bf16_to_f32_n(xf + (size_t)m * K, x + (size_t)(m0 + m) * ldx, (size_t)K);
        for (int n0 = 0; n0 < N; n0 += GB_NB) {
            int nb = N - n0 < GB_NB ? N - n0 : GB_NB;
            for (int r = 0; r < nb; r++) as_bf16_to_f32_n(wf + (size_t)r * K, w + (size_t)(n0 + r) * ldw, (size_t)K);
            float *yb = y + (size_t)m0 * ldy + n0;
            float beta = 0.0f;
            if (bias) {
                for (int m = 0; m < mb; m++) memcpy(yb + (size_t)m * ldy, bias + n0, (size_t)nb * sizeof(float));
                beta = 1.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, mb, nb, K, 1.0f, xf, K, wf, K, beta, yb, (int)ldy);
        }
    }
}

void as_gemm_bf16_xw(int M, int N, int K, const uint16_t *x, size_t ldx, const uint16_t *w, size_t ldw, float *y,
                     size_t ldy, int accumulate, float *scratch) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (!accumulate)
            for (int m = 0; m < M; m++) memset(y + (size_t)m * ldy, 0, (size_t)N * sizeof(float));
        return;
    }
#ifdef GB_X86
    if (as_gemm_bf16_native()) {
        gx_native(M, N, K, x, ldx, w, ldw, y, ldy, accumulate, (uint32_t *)scratch);
        return;
    }
#endif
    float *xf = scratch, *wf = scratch + (size_t)GX_FB * GX_FB; /* x block (64, 64), W rows (64, N) */
    for (int k0 = 0; k0 < K; k0 += GX_FB) {
        int kb = K - k0 < GX_FB ? K - k0 : GX_FB;
        for (int k = 0; k < kb; k++) as_bf16_to_f32_n(wf + (size_t)k * N, w + (size_t)(k0 + k) * ldw, (size_t)N);
        for (int m0 = 0; m0 < M; m0 += GX_FB) {
            int mb = M - m0 < GX_FB ? M - m0 : GX_FB;
            for (int m = 0; m < mb; m++) as_bf16_to_f32_n(xf + (size_t)m * kb, x + (size_t)(m0 + m) * ldx + k0, (size_t)kb);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, mb, N, kb, 1.0f, xf, kb, wf, N,
                        accumulate || k0 > 0 ? 1.0f : 0.0f, y + (size_t)m0 * ldy, (int)ldy);
        }
    }
}
