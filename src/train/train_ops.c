/* train_ops.c — kernels only the training pass uses (see train_ops.h): sgemm-based
 * linear maps and their gradients, register-blocked products on packed right-hand sides,
 * cross-entropy and dropout masks. All single-threaded. The element-wise operations
 * shared with inference (norms, activations, softmax) are in model/ops.c.
 *
 * Vectorisation: the products use GCC vector types; the products and the cross-entropy
 * are compiled for the baseline ISA and for AVX2 + FMA (core/fastmath.h AS_KERNEL_*).
 */
#include "train/train_ops.h"

#include "core/fastmath.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

/* ---- linear maps (sgemm) ---- */

void trainop_linear_fwd(float *y, const float *x, const float *w, const float *b, int N, int Ni, int No) {
    float beta = 0.0f;
    if (b) {
        for (int n = 0; n < N; n++) memcpy(y + (size_t)n * No, b, (size_t)No * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, No, Ni, 1.0f, x, Ni, w, Ni, beta, y, No);
}

void trainop_linear_dx(float *dx, int accum, const float *dy, const float *w, int N, int Ni, int No) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, Ni, No, 1.0f, dy, No, w, Ni, accum ? 1.0f : 0.0f,
                dx, Ni);
}

void trainop_linear_dw(float *dw, const float *dy, const float *x, int N, int Ni, int No, int o0, int o1, int i0,
                   int i1) {
    if (o1 <= o0 || i1 <= i0) return;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, o1 - o0, i1 - i0, N, 1.0f, dy + o0, No, x + i0, Ni, 1.0f,
                dw + (size_t)o0 * Ni + i0, Ni);
}

void trainop_colsum(float *db, const float *x, int N, int C, int ld) {
    for (int n = 0; n < N; n++) {
        const float *r = x + (size_t)n * ld;
        for (int c = 0; c < C; c++) db[c] += r[c];
    }
}

/* ---- products: 6 x 16 register blocks (12 accumulators of 8 floats) ---- */

typedef float trainop_v8 __attribute__((vector_size(32)));
#define V8_LOAD(v, p) memcpy(&(v), (p), sizeof(trainop_v8))
#define V8_STORE(p, v) memcpy((p), &(v), sizeof(trainop_v8))
#define TRAINOP_MR 6
#define TRAINOP_KB 256 /* rows of a panel per pass over C: a (256, 16) panel block is 16 KiB */

void trainop_pack_b(float *bp, const float *b, ptrdiff_t sk, ptrdiff_t sn, int K, int N, int p0, int p1) {
    for (int p = p0; p < p1; p++) {
        float *d = bp + (size_t)p * K * TRAINOP_NR;
        int j0 = p * TRAINOP_NR, nc = N - j0 < TRAINOP_NR ? N - j0 : TRAINOP_NR;
        if (nc < TRAINOP_NR) memset(d, 0, (size_t)K * TRAINOP_NR * sizeof(float));
        if (sn == 1 && nc == TRAINOP_NR) {
            for (int k = 0; k < K; k++) memcpy(d + (size_t)k * TRAINOP_NR, b + k * sk + j0, TRAINOP_NR * sizeof(float));
        } else if (sn == 1) {
            for (int k = 0; k < K; k++) memcpy(d + (size_t)k * TRAINOP_NR, b + k * sk + j0, (size_t)nc * sizeof(float));
        } else {
            /* a transposed source: read its rows (columns j) sequentially */
            for (int j = 0; j < nc; j++) {
                const float *src = b + (j0 + j) * sn;
                for (int k = 0; k < K; k++) d[(size_t)k * TRAINOP_NR + j] = src[k * sk];
            }
        }
    }
}

void trainop_pack_heads(float *dst, const float *src, int ld, int T, int H, int Dh, int trans) {
    size_t a = trainop_packed_size(T, Dh), b = trainop_packed_size(Dh, T), hs = a > b ? a : b;
    for (int h = 0; h < H; h++) {
        const float *x = src + (size_t)h * Dh;
        float *d = dst + (size_t)h * hs;
        if (trans) { /* B (k = e, j = t): panel t / 16 holds rows e of 16 tokens */
            for (int t0 = 0; t0 < T; t0 += TRAINOP_NR) {
                int n = T - t0 < TRAINOP_NR ? T - t0 : TRAINOP_NR;
                float *o = d + (size_t)t0 * Dh;
                for (int e = 0; e < Dh; e++, o += TRAINOP_NR) {
                    int j = 0;
                    for (; j < n; j++) o[j] = x[(size_t)(t0 + j) * ld + e];
                    for (; j < TRAINOP_NR; j++) o[j] = 0.0f;
                }
            }
        } else { /* B (k = t, j = e): panel e / 16 holds 16 columns of every row t */
            for (int e0 = 0; e0 < Dh; e0 += TRAINOP_NR) {
                int n = Dh - e0 < TRAINOP_NR ? Dh - e0 : TRAINOP_NR;
                float *o = d + (size_t)e0 * T;
                for (int t = 0; t < T; t++, o += TRAINOP_NR) {
                    const float *r = x + (size_t)t * ld + e0;
                    if (n == TRAINOP_NR) {
                        memcpy(o, r, TRAINOP_NR * sizeof(float));
                    } else {
                        memcpy(o, r, (size_t)n * sizeof(float));
                        memset(o + n, 0, (size_t)(TRAINOP_NR - n) * sizeof(float));
                    }
                }
            }
        }
    }
}

/* c[0, nc) = alpha * (lo, hi) + cin[0, nc) (cin NULL: 0) + bias[0, nc) (NULL: 0) */
AS_KERNEL_BODY void store16(float *c, const trainop_v8 *lo, const trainop_v8 *hi, int nc, float alpha, const float *cin,
                      const float *bias) {
    if (nc == TRAINOP_NR) {
        trainop_v8 o0 = alpha * *lo, o1 = alpha * *hi, t0, t1;
        if (cin) {
            V8_LOAD(t0, cin);
            V8_LOAD(t1, cin + 8);
            o0 += t0;
            o1 += t1;
        }
        if (bias) {
            V8_LOAD(t0, bias);
            V8_LOAD(t1, bias + 8);
            o0 += t0;
            o1 += t1;
        }
        V8_STORE(c, o0);
        V8_STORE(c + 8, o1);
        return;
    }
    float t[TRAINOP_NR];
    V8_STORE(t, *lo);
    V8_STORE(t + 8, *hi);
    for (int j = 0; j < nc; j++) c[j] = alpha * t[j] + (cin ? cin[j] : 0.0f) + (bias ? bias[j] : 0.0f);
}

/* Rows [0, mr) (mr <= 6) of C against kc rows of a packed panel (bk): a block of
 * fewer than 6 rows repeats its last row in the unused accumulators. */
AS_KERNEL_BODY void gemm_6x16(float *c, int ldc, const float *a, ptrdiff_t sai, ptrdiff_t sak, const float *bk, int mr,
                        int kc, int nc, float alpha, const float *cin, int ldcin, const float *bias) {
    const float *a0 = a, *a1 = mr > 1 ? a0 + sai : a0, *a2 = mr > 2 ? a1 + sai : a1, *a3 = mr > 3 ? a2 + sai : a2,
                *a4 = mr > 4 ? a3 + sai : a3, *a5 = mr > 5 ? a4 + sai : a4;
    trainop_v8 s00 = {0}, s01 = {0}, s10 = {0}, s11 = {0}, s20 = {0}, s21 = {0};
    trainop_v8 s30 = {0}, s31 = {0}, s40 = {0}, s41 = {0}, s50 = {0}, s51 = {0};
    for (int k = 0; k < kc; k++, bk += TRAINOP_NR) {
        trainop_v8 b0, b1;
        V8_LOAD(b0, bk);
        V8_LOAD(b1, bk + 8);
        ptrdiff_t ko = k * sak;
        float x0 = a0[ko], x1 = a1[ko], x2 = a2[ko], x3 = a3[ko], x4 = a4[ko], x5 = a5[ko];
        s00 += x0 * b0;
        s01 += x0 * b1;
        s10 += x1 * b0;
        s11 += x1 * b1;
        s20 += x2 * b0;
        s21 += x2 * b1;
        s30 += x3 * b0;
        s31 += x3 * b1;
        s40 += x4 * b0;
        s41 += x4 * b1;
        s50 += x5 * b0;
        s51 += x5 * b1;
    }
    trainop_v8 *acc[TRAINOP_MR][2] = {{&s00, &s01}, {&s10, &s11}, {&s20, &s21}, {&s30, &s31}, {&s40, &s41}, {&s50, &s51}};
    for (int r = 0; r < mr; r++)
        store16(c + (size_t)r * ldc, acc[r][0], acc[r][1], nc, alpha, cin ? cin + (size_t)r * ldcin : NULL, bias);
}

/* For each block of TRAINOP_KB rows of B: when that block of all panels fits in L2
 * (TRAINOP_L2_B bytes), 6 rows of A at a time against every panel (the rows of A stay in
 * L1, B streams from L2); otherwise (the decoder, V = 8192 columns) panel by panel,
 * each panel block staying in L1 for all rows of A. */
#define TRAINOP_L2_B (256 * 1024)
AS_KERNEL_BODY void gemm_body(float *c, int ldc, const float *a, ptrdiff_t sai, ptrdiff_t sak, const float *bp, int M,
                        int N, int K, float alpha, const float *cin, int ldcin, const float *bias) {
    int np = (N + TRAINOP_NR - 1) / TRAINOP_NR;
    for (int k0 = 0; k0 < K; k0 += TRAINOP_KB) {
        int kc = K - k0 < TRAINOP_KB ? K - k0 : TRAINOP_KB;
        /* later row blocks of B add to what the earlier ones stored */
        const float *ci = k0 == 0 ? cin : c, *bi = k0 == 0 ? bias : NULL;
        int ldci = k0 == 0 ? ldcin : ldc;
        int rows_outer = (size_t)kc * np * TRAINOP_NR * sizeof(float) <= TRAINOP_L2_B, nr = (M + TRAINOP_MR - 1) / TRAINOP_MR;
        int n_outer = rows_outer ? nr : np, n_inner = rows_outer ? np : nr;
        for (int u = 0; u < n_outer; u++)
            for (int v = 0; v < n_inner; v++) {
                int p = rows_outer ? v : u, i = (rows_outer ? u : v) * TRAINOP_MR;
                int j0 = p * TRAINOP_NR, nc = N - j0 < TRAINOP_NR ? N - j0 : TRAINOP_NR;
                gemm_6x16(c + (size_t)i * ldc + j0, ldc, a + i * sai + k0 * sak, sai, sak,
                          bp + ((size_t)p * K + k0) * TRAINOP_NR, M - i < TRAINOP_MR ? M - i : TRAINOP_MR, kc, nc, alpha,
                          ci ? ci + (size_t)i * ldci + j0 : NULL, ldci, bi ? bi + j0 : NULL);
            }
    }
}

/* ---- cross-entropy ---- */

/* log-softmax in one pass over exp: max, then e = exp(l - max) kept in dlogits and
 * summed, lse = max + log(sum); dlogits = e * scale / sum - scale onehot. */
AS_KERNEL_BODY void xent_body(float *dlogits, double *row_loss, const float *logits, const int32_t *targets, int N,
                        int C, float scale) {
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * C;
        float *d = dlogits + (size_t)n * C;
        float mx = -FLT_MAX;
#pragma omp simd reduction(max : mx)
        for (int c = 0; c < C; c++) mx = l[c] > mx ? l[c] : mx;
        double sum = 0.0; /* float sums of 64 columns (vectorised), added in double */
        for (int c0 = 0; c0 < C; c0 += 64) {
            int c1 = C - c0 < 64 ? C : c0 + 64;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (int c = c0; c < c1; c++) {
                float e = as_fast_expf(l[c] - mx);
                d[c] = e;
                s += e;
            }
            sum += s;
        }
        row_loss[n] = log(sum) + (double)mx - (double)l[targets[n]];
        float f = (float)((double)scale / sum);
        for (int c = 0; c < C; c++) d[c] *= f;
        d[targets[n]] -= scale;
    }
}

/* ---- the two copies (fastmath.h AS_KERNEL_*) ---- */

AS_KERNEL_AVX2(gemm,
               (float *c, int ldc, const float *a, ptrdiff_t sai, ptrdiff_t sak, const float *bp, int M, int N, int K,
                float alpha, const float *cin, int ldcin, const float *bias),
               (c, ldc, a, sai, sak, bp, M, N, K, alpha, cin, ldcin, bias))
AS_KERNEL_AVX2(xent,
               (float *dlogits, double *row_loss, const float *logits, const int32_t *targets, int N, int C,
                float scale),
               (dlogits, row_loss, logits, targets, N, C, scale))

void trainop_gemm(float *c, int ldc, const float *a, ptrdiff_t sai, ptrdiff_t sak, const float *bp, int M, int N, int K,
              float alpha, const float *cin, int ldcin, const float *bias) {
    AS_KERNEL_RUN(gemm, c, ldc, a, sai, sak, bp, M, N, K, alpha, cin, ldcin, bias);
}

void trainop_xent(float *dlogits, double *row_loss, const float *logits, const int32_t *targets, int N, int C,
              float scale) {
    AS_KERNEL_RUN(xent, dlogits, row_loss, logits, targets, N, C, scale);
}

/* ---- dropout ---- */

int train_dropout_keep(uint64_t seed, uint32_t site, uint64_t idx, float p) {
    return op_drop_keep(op_drop_key(seed, site), idx, p);
}

void trainop_dropout(float *x, size_t i0, size_t n, float p, uint64_t seed, uint32_t site) {
    if (p <= 0.0f) return;
    float s = 1.0f / (1.0f - p);
    uint64_t key = op_drop_key(seed, site);
    for (size_t i = 0; i < n; i++) x[i] = op_drop_keep(key, (uint64_t)(i0 + i), p) ? x[i] * s : 0.0f;
}
