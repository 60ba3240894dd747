/* gemm_small_bench.c — the few-row products of src/core/gemm_small.c against OpenBLAS
 * sgemm on one thread, as the engine meets them: BERT-base weight shapes, the weights
 * cold (48 copies, 113-453 MB, cycled so none is in cache) and 40 bytes past a 64-byte
 * line (where safetensors put bench/out/bert-base-random's tensors), M = 8 ... 128 rows.
 *   y = x W^T (nn.Linear forward): as_gemm_small_xwt at each kernel level against
 *           cblas_sgemm NoTrans x Trans;
 *   y = x W   (nn.Linear input gradient dx = dy W): as_gemm_small_xw against NoTrans x NoTrans.
 * Prints GFLOP/s (best of the 48 calls) and the largest difference from sgemm.
 * Build and run: bench/gemm_small_bench.sh BUILD_DIR.
 */
#include "core/gemm_small.h"

#include "bench_util.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define COPIES 48
#define MISALIGN 10 /* floats past a 64-byte line */

static double maxdiff(const float *a, const float *b, size_t n) {
    double d = 0.0;
    for (size_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

int main(void) {
    static const int Ms[] = {8, 25, 48, 64, 128};
    static const int shapes[][2] = {{768, 768}, {3072, 768}, {768, 3072}}; /* W (N, K) = (n_out, n_in) */
    printf("| W (out x in) | rows | x W^T AVX-512 | x W^T AVX2 | sgemm NT | x W AVX-512 | sgemm NN | max diff |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
            const int M = Ms[mi], N = shapes[si][0], K = shapes[si][1];
            const size_t nw = (size_t)N * K;
            float *wall = aligned_alloc(64, ((nw * COPIES + MISALIGN) * sizeof(float) + 63) & ~(size_t)63);
            float *x = malloc(sizeof(float) * (size_t)M * K), *dy = malloc(sizeof(float) * (size_t)M * N);
            float *y = malloc(sizeof(float) * (size_t)M * N), *y2 = malloc(sizeof(float) * (size_t)M * N);
            float *dx = malloc(sizeof(float) * (size_t)M * K), *dx2 = malloc(sizeof(float) * (size_t)M * K);
            if (!wall || !x || !dy || !y || !y2 || !dx || !dx2) return 1;
            unsigned s = 7;
            for (size_t i = 0; i < nw * COPIES + MISALIGN; i++) wall[i] = bench_frand(&s);
            for (size_t i = 0; i < (size_t)M * K; i++) x[i] = bench_frand(&s);
            for (size_t i = 0; i < (size_t)M * N; i++) dy[i] = bench_frand(&s);
            double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30}, diff = 0.0;
            for (int c = 0; c < COPIES; c++) {
                const float *w = wall + MISALIGN + (size_t)c * nw;
                double t[6];
                t[0] = bench_now();
                as_gemm_small_force(0);
                as_gemm_small_xwt(M, N, K, x, K, w, K, y, N, 0);
                t[1] = bench_now();
                as_gemm_small_force(1);
                as_gemm_small_xwt(M, N, K, x, K, w, K, y2, N, 0);
                as_gemm_small_force(0);
                t[2] = bench_now();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, x, K, w, K, 0.0f, y2, N);
                t[3] = bench_now();
                as_gemm_small_xw(M, K, N, dy, N, w, K, dx, K, 0);
                t[4] = bench_now();
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dy, N, w, K, 0.0f, dx2, K);
                t[5] = bench_now();
                for (int k = 0; k < 5; k++)
                    if (t[k + 1] - t[k] < best[k]) best[k] = t[k + 1] - t[k];
                diff = fmax(diff, fmax(maxdiff(y, y2, (size_t)M * N), maxdiff(dx, dx2, (size_t)M * K)));
            }
            const double gf = 2.0 * M * N * K * 1e-9;
            printf("| %d x %d | %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.1e |\n", N, K, M, gf / best[0], gf / best[1],
                   gf / best[2], gf / best[3], gf / best[4], diff);
            free(wall), free(x), free(dy), free(y), free(y2), free(dx), free(dx2);
        }
    return 0;
}
