/* gemm_bf16_bench.c — the BF16 products of src/core/gemm_bf16.c against OpenBLAS sgemm
 * on one thread, as a forward meets them: each thread's share of the weights of
 * BERT-base (2 threads: 384 or 1536 of the outputs) and of the 1B-shaped Llama of
 * bench/llama_bench.py, the weights cold (copies of at least 192 MB in all, cycled so
 * none is in cache when it is read) and 40 bytes past a 64-byte line (where safetensors
 * put bench/out's tensors), M = 128 and 512 rows.
 *   y = x W^T (nn.Linear forward): as_gemm_bf16_xwt against F32 cblas_sgemm NoTrans x Trans,
 *     and as_gemm_bf16_xwt_packed on W packed beforehand (as_gemm_bf16_pack); F32 x times the
 *     same packed BF16 W (as_gemm_f32_xwt_packed: precision f32 on a BF16 checkpoint) against
 *     the same sgemm NT on the F32 copy of W; F32 x times F32 W (as_gemm_f32_xwt, blocks of W
 *     packed per call) against the same sgemm NT;
 *   y = x W   (the input gradient dx = dy W): as_gemm_bf16_xw against F32 NoTrans x NoTrans.
 * Prints GFLOP/s, best call (and over all the calls), and the largest difference of the
 * BF16 products from F32 sgemm on the BF16-rounded operands, relative to the largest output.
 * Build and run: bench/gemm_bf16_bench.sh BUILD_DIR.
 */
#include "core/core.h"
#include "core/gemm_bf16.h"

#include "bench_util.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIN_BYTES ((size_t)192 << 20) /* every method's copies together, past L3 */
#define MISALIGN 20                   /* BF16 values (40 bytes) past a 64-byte line */
#define CALLS 40

/* copies of a (n)-value BF16 matrix, each MISALIGN values past a line; F32 copies beside. */
typedef struct {
    uint16_t *b;
    float *f;
    uint32_t *pk; /* packed copies (as_gemm_bf16_pack), pk_words apart */
    size_t n, copies, pk_words;
} wset;

static int wset_init(wset *w, int N, int K, unsigned *s) {
    size_t n = (size_t)N * K;
    w->pk_words = as_gemm_bf16_packed_words(N, K);
    size_t per = n * (sizeof(uint16_t) + sizeof(float)) + w->pk_words * sizeof(uint32_t);
    w->n = n;
    w->copies = MIN_BYTES / per + 2;
    w->b = aligned_alloc(64, ((n + MISALIGN + 32) * w->copies * sizeof(uint16_t) + 63) & ~(size_t)63);
    w->f = aligned_alloc(64, ((n + MISALIGN + 16) * w->copies * sizeof(float) + 63) & ~(size_t)63);
    w->pk = aligned_alloc(64, w->pk_words * w->copies * sizeof(uint32_t));
    if (!w->b || !w->f || !w->pk) return -1;
    for (size_t c = 0; c < w->copies; c++) {
        uint16_t *b = w->b + c * (n + MISALIGN + 32) + MISALIGN;
        float *f = w->f + c * (n + MISALIGN + 16) + MISALIGN / 2;
        for (size_t i = 0; i < n; i++) {
            b[i] = as_f32_to_bf16(bench_frand(s));
            uint32_t u = (uint32_t)b[i] << 16;
            memcpy(&f[i], &u, 4);
        }
        as_gemm_bf16_pack(b, (size_t)K, N, K, w->pk + c * w->pk_words);
    }
    return 0;
}
static const uint16_t *wset_b(const wset *w, size_t c) {
    return w->b + (c % w->copies) * (w->n + MISALIGN + 32) + MISALIGN;
}
static const uint32_t *wset_pk(const wset *w, size_t c) { return w->pk + (c % w->copies) * w->pk_words; }
static const float *wset_f(const wset *w, size_t c) {
    return w->f + (c % w->copies) * (w->n + MISALIGN + 16) + MISALIGN / 2;
}

static double reldiff(const float *a, const float *b, size_t n) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0.0 ? d / m : d;
}

int main(void) {
    static const int Ms[] = {128, 512};
    static const struct {
        const char *model;
        int n, k; /* W (N, K) = (outputs of one thread, n_in) */
    } shapes[] = {{"BERT-base", 384, 768},  {"BERT-base", 1536, 768}, {"BERT-base", 384, 3072},
                  {"Llama-1B", 1024, 2048}, {"Llama-1B", 4096, 2048}, {"Llama-1B", 1024, 8192}};
    printf("| model | W (out x in) | rows | x W^T BF16 best (all) | x W^T BF16 packed | sgemm NT | x W BF16 "
           "| sgemm NN | F32 x, packed BF16 W | F32 x W^T (as_gemm_f32_xwt) | max rel. diff |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
            const int M = Ms[mi], N = shapes[si].n, K = shapes[si].k;
            unsigned s = 7;
            wset w;
            if (wset_init(&w, N, K, &s) != 0) return 1;
            uint16_t *xb = malloc(sizeof(uint16_t) * (size_t)M * K), *dyb = malloc(sizeof(uint16_t) * (size_t)M * N);
            float *xf = malloc(sizeof(float) * (size_t)M * K), *dyf = malloc(sizeof(float) * (size_t)M * N);
            float *y = malloc(sizeof(float) * (size_t)M * N), *y2 = malloc(sizeof(float) * (size_t)M * N);
            float *y3 = malloc(sizeof(float) * (size_t)M * N);
            float *dx = malloc(sizeof(float) * (size_t)M * K), *dx2 = malloc(sizeof(float) * (size_t)M * K);
            float *sc = malloc(sizeof(float) * as_gemm_bf16_xw_scratch(K));
            float *sc32 = malloc(sizeof(float) * as_gemm_f32_xwt_scratch(K));
            if (!xb || !dyb || !xf || !dyf || !y || !y2 || !y3 || !dx || !dx2 || !sc || !sc32) return 1;
            for (size_t i = 0; i < (size_t)M * K; i++) xb[i] = as_f32_to_bf16(bench_frand(&s));
            for (size_t i = 0; i < (size_t)M * N; i++) dyb[i] = as_f32_to_bf16(bench_frand(&s));
            as_bf16_to_f32_n(xf, xb, (size_t)M * K);
            as_bf16_to_f32_n(dyf, dyb, (size_t)M * N);
            double best[7] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30}, sum[7] = {0}, diff = 0.0;
            /* call c reads copies 2c (BF16 x W^T, F32 x W) and 2c + 1 (F32 x W^T, BF16 x W,
               packed x W^T; F32 x packed x W^T: 2c; F32 x W^T: 2c + 1): a copy is read again only after MIN_BYTES of
               others (cold) */
            for (size_t c = 0; c < CALLS; c++) {
                double t[8];
                t[0] = bench_now();
                as_gemm_bf16_xwt(M, N, K, xb, K, wset_b(&w, 2 * c), K, NULL, y, N, NULL);
                t[1] = bench_now();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, xf, K, wset_f(&w, 2 * c + 1), K,
                            0.0f, y2, N);
                t[2] = bench_now();
                as_gemm_bf16_xw(M, K, N, dyb, N, wset_b(&w, 2 * c + 1), K, dx, K, 0, sc);
                t[3] = bench_now();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dyf, N, wset_f(&w, 2 * c), K,
                            0.0f, dx2, K);
                t[4] = bench_now();
                as_gemm_bf16_xwt_packed(M, 0, N, K, xb, K, wset_pk(&w, 2 * c + 1), NULL, y3, N);
                t[5] = bench_now();
                as_gemm_f32_xwt_packed(M, 0, N, K, xf, K, wset_pk(&w, 2 * c), NULL, y3, N);
                t[6] = bench_now();
                as_gemm_f32_xwt(M, N, K, xf, K, wset_f(&w, 2 * c + 1), K, 0, NULL, y3, N, sc32);
                t[7] = bench_now();
                for (int k = 0; k < 7; k++) {
                    if (t[k + 1] - t[k] < best[k]) best[k] = t[k + 1] - t[k];
                    sum[k] += t[k + 1] - t[k];
                }
                if (c == 0) { /* the same copies under both: compare */
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, xf, K, wset_f(&w, 0), K, 0.0f,
                                y2, N);
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dyf, N, wset_f(&w, 1), K,
                                0.0f, dx2, K);
                    diff = fmax(diff, fmax(reldiff(y, y2, (size_t)M * N), reldiff(dx, dx2, (size_t)M * K)));
                    as_gemm_bf16_xwt_packed(M, 0, N, K, xb, K, wset_pk(&w, 0), NULL, y3, N);
                    diff = fmax(diff, reldiff(y3, y2, (size_t)M * N));
                    as_gemm_f32_xwt_packed(M, 0, N, K, xf, K, wset_pk(&w, 0), NULL, y3, N);
                    diff = fmax(diff, reldiff(y3, y2, (size_t)M * N));
                    as_gemm_f32_xwt(M, N, K, xf, K, wset_f(&w, 0), K, 0, NULL, y3, N, sc32);
                    diff = fmax(diff, reldiff(y3, y2, (size_t)M * N));
                }
            }
            const double gf = 2.0 * M * N * K * 1e-9;
            printf("| %s | %d x %d | %d | %.0f (%.0f) | %.0f (%.0f) | %.0f (%.0f) | %.0f (%.0f) | %.0f (%.0f) "
                   "| %.0f (%.0f) | %.0f (%.0f) | %.1e |\n",
                   shapes[si].model, N, K, M, gf / best[0], gf * CALLS / sum[0], gf / best[4], gf * CALLS / sum[4],
                   gf / best[1], gf * CALLS / sum[1],
                   gf / best[2], gf * CALLS / sum[2], gf / best[3], gf * CALLS / sum[3], gf / best[5],
                   gf * CALLS / sum[5], gf / best[6], gf * CALLS / sum[6], diff);
            free(w.b), free(w.f), free(w.pk), free(y3), free(xb), free(dyb), free(xf), free(dyf), free(y), free(y2), free(dx), free(dx2),
                free(sc), free(sc32);
        }
    return 0;
}
