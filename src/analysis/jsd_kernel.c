/* jsd_kernel.c — the inner loop of the head-pair Jensen-Shannon divergence (Clark et al.
 * 2019 sec. 6): the entropies of the mixtures of one head's attention row with those of
 * every later head, for one query row, 16 heads per vector (AVX-512, AVX2 + FMA or plain
 * copies of one body, the widest the CPU runs chosen at run time).
 * What it does not: the rows' own entropies, the transposition or the pairing sums
 * (records.c).
 */
#include "analysis/runner_internal.h"

#include "core/fastmath.h"

static inline float jsd_mix_term(float a, float b) {
    float m = 0.5f * (a + b);
    float keep = m > 1e-30f ? 1.0f : 0.0f; /* arithmetic selects keep the loop vectorisable */
    float safe = m > 1e-30f ? m : 1.0f;
    return keep * m * as_fast_log2f(safe);
}

/* Keys summed in float before the partial sum moves to double: the float sum's error
 * stays that of 16 terms at any length. */
#define JSD_FLOAT_RUN 16

/* For b = a + 1 .. LH - 1, 16 heads at a time: -sum_j m log2 m over m = (x_j + y_j) / 2 >
 * 1e-30, x = head a's row and y = head b's, reading each key's weights of all heads at
 * at + j * ld (lanes past LH read zeros and are dropped). */
AS_KERNEL_BODY void jsd_rows_body(const float *at, int T, int ld, int a, int LH, double *hm) {
    for (int b = a + 1; b < LH; b += 16) {
        double dacc[16] = {0};
        float acc[16] = {0};
        for (int j = 0; j < T; j++) {
            const float x = at[(size_t)j * ld + a];
            const float *y = at + (size_t)j * ld + b;
            for (int l = 0; l < 16; l++) acc[l] -= jsd_mix_term(x, y[l]);
            if (j % JSD_FLOAT_RUN == JSD_FLOAT_RUN - 1)
                for (int l = 0; l < 16; l++) {
                    dacc[l] += acc[l];
                    acc[l] = 0.0f;
                }
        }
        int nb = LH - b < 16 ? LH - b : 16;
        for (int l = 0; l < nb; l++) hm[b + l] = dacc[l] + acc[l];
    }
}
AS_KERNEL_SIMD(jsd_rows, (const float *at, int T, int ld, int a, int LH, double *hm), (at, T, ld, a, LH, hm))

void an_jsd_mix_rows(const float *at, int T, int ld, int a, int LH, double *hm) {
    AS_KERNEL_RUN(jsd_rows, at, T, ld, a, LH, hm);
}
