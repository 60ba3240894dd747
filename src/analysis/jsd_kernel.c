/* jsd_kernel.c — the inner loop of the head-pair Jensen-Shannon divergence (Clark et al.
 * 2019 sec. 6): the entropy of the mixture of two attention rows, vectorised, with an
 * AVX2 + FMA build chosen at run time.
 * What it does not: the rows' own entropies or the pairing of heads (records.c).
 */
#include "analysis/runner_internal.h"

#include "core/fastmath.h"

static inline float jsd_mix_term(float a, float b) {
    float m = 0.5f * (a + b);
    float keep = m > 1e-30f ? 1.0f : 0.0f; /* arithmetic selects keep the loop vectorisable */
    float safe = m > 1e-30f ? m : 1.0f;
    return keep * m * as_fast_log2f(safe);
}

/* Entropy in bits of the mixture m = (x + y) / 2 of two attention rows: -sum m log2 m
 * over entries m > 1e-30 (smaller ones, including denormals and non-positive values,
 * contribute less than 1e-27 each and are skipped). Float terms summed in 8 lanes, so
 * it differs from hd_jsd's double sum by ~1e-6 at most (T = 500); Clark et al.'s head
 * distances are reported to 3 digits. */
#define JSD_MIX_BODY                                                                  \
    float acc[8] = {0};                                                               \
    int j = 0;                                                                        \
    for (; j + 8 <= T; j += 8)                                                        \
        for (int l = 0; l < 8; l++) acc[l] -= jsd_mix_term(x[j + l], y[j + l]);       \
    double h = 0.0;                                                                   \
    for (int l = 0; l < 8; l++) h += acc[l];                                          \
    for (; j < T; j++) h -= jsd_mix_term(x[j], y[j]);                                 \
    return h;

static double jsd_mix_entropy_base(const float *x, const float *y, int T) { JSD_MIX_BODY }

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
/* An AVX2 + FMA build of the same loop, chosen at run time (GCC's target_clones did not
 * vectorise it at 256 bits). */
__attribute__((target("avx2,fma"))) static double jsd_mix_entropy_avx2(const float *x, const float *y, int T) {
    JSD_MIX_BODY
}
double an_jsd_mix_entropy(const float *x, const float *y, int T) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? jsd_mix_entropy_avx2(x, y, T) : jsd_mix_entropy_base(x, y, T);
}
#else
double an_jsd_mix_entropy(const float *x, const float *y, int T) { return jsd_mix_entropy_base(x, y, T); }
#endif
