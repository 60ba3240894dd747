/* train_ops.c — the softmax cross-entropy of the training losses (see train_ops.h), compiled
 * for the baseline ISA and for AVX2 + FMA (core/fastmath.h AS_KERNEL_*). Single-threaded.
 */
#include "train/train_ops.h"

#include "core/fastmath.h"

#include <float.h>
#include <math.h>

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

AS_KERNEL_SIMD(xent,
               (float *dlogits, double *row_loss, const float *logits, const int32_t *targets, int N, int C,
                float scale),
               (dlogits, row_loss, logits, targets, N, C, scale))

void trainop_xent(float *dlogits, double *row_loss, const float *logits, const int32_t *targets, int N, int C,
              float scale) {
    AS_KERNEL_RUN(xent, dlogits, row_loss, logits, targets, N, C, scale);
}
