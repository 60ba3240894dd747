/* fastmath.h — branch-free float exp, erf, log2 and tanh that the compiler can vectorize
 * (glibc's expf/erff are scalar calls). Accuracy (measured in tests/unit/test_core.c):
 * exp ~2 ulp on [-87.3, 88.37], +inf above (expf: from 88.72), exactly 0 below -87.3;
 * erf max abs error 1.5e-7 in exact arithmetic, 5.5e-7 in float (Abramowitz & Stegun
 * 7.1.26, the same approximation PyTorch's vectorized CPU erf uses); tanh via exp, abs
 * error < 1e-6; NaN in gives NaN out. Used by the inference forward's softmax and GELU
 * and by the training kernels (src/train/train_ops.c: GELU and its derivative, softmax,
 * cross-entropy) and the head-pair JSD of the analysis (log2, relative error ~1e-7);
 * not for reference code that must match libm bit for bit.
 */
#ifndef AS_FASTMATH_H
#define AS_FASTMATH_H

#include <stdint.h>
#include <string.h>

/* exp(x) by range reduction x = n ln2 + r, |r| <= ln2/2, and the Cephes expf
 * polynomial for exp(r); 2^n assembled in the exponent bits. */
static inline float as_fast_expf(float x) {
    float keep = x >= -87.3f ? 1.0f : 0.0f;
    x = x < -87.3f ? -87.3f : x;
    x = x > 88.7f ? 88.7f : x;
    const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float t = x * 1.44269504088896341f + magic;
    float n = t - magic;
    float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t ti, mi;
    memcpy(&ti, &t, 4);
    memcpy(&mi, &magic, 4);
    /* unsigned: a NaN x (which the clamps let through) gives any bits here, and the
       result is NaN through p, without undefined behaviour */
    uint32_t bits = (ti - mi + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, 4);
    return p * scale * keep;
}

/* erf(x), Abramowitz & Stegun (1964) formula 7.1.26, given e = as_fast_expf(-x * x)
 * already computed by the caller: the GELU derivative Phi(x) + x phi(x) at x = sqrt(2) u
 * needs exp(-u^2) for both terms (src/train/train_ops.c). */
static inline float as_fast_erff_e(float x, float e) {
    float s = x < 0.0f ? -1.0f : 1.0f;
    float a = x * s;
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float y = 1.061405429f;
    y = y * t - 1.453152027f;
    y = y * t + 1.421413741f;
    y = y * t - 0.284496736f;
    y = y * t + 0.254829592f;
    y = 1.0f - y * t * e;
    return s * y;
}

/* erf(x), Abramowitz & Stegun (1964) formula 7.1.26. */
static inline float as_fast_erff(float x) { return as_fast_erff_e(x, as_fast_expf(-x * x)); }

/* Vectorisable log2 for normal positive floats: x = 2^e m with m in [sqrt(1/2), sqrt(2)),
 * ln m by the Cephes logf polynomial (Moshier 1992; relative error ~1e-7). */
static inline float as_fast_log2f(float x) {
    int32_t u;
    memcpy(&u, &x, 4);
    float e = (float)(((u >> 23) & 0xff) - 126); /* x = 2^e * m, m in [0.5, 1) */
    u = (u & (int32_t)0x807fffff) | 0x3f000000;
    float m;
    memcpy(&m, &u, 4);
    float lo = m < 0.70710678f ? 1.0f : 0.0f; /* m < sqrt(1/2): use 2m, e - 1 */
    e -= lo;
    float f = m * (1.0f + lo) - 1.0f;
    float z = f * f;
    float y = 7.0376836292e-2f;
    y = y * f - 1.1514610310e-1f;
    y = y * f + 1.1676998740e-1f;
    y = y * f - 1.2420140846e-1f;
    y = y * f + 1.4249322787e-1f;
    y = y * f - 1.6668057665e-1f;
    y = y * f + 2.0000714765e-1f;
    y = y * f - 2.4999993993e-1f;
    y = y * f + 3.3333331174e-1f;
    y = y * f * z - 0.5f * z;
    return (f + y) * 1.44269504088896341f + e;
}

/* tanh(x) = 1 - 2 / (exp(2x) + 1), with x clamped to [-9, 9] where tanh is +-1 in float. */
static inline float as_fast_tanhf(float x) {
    x = x > 9.0f ? 9.0f : x < -9.0f ? -9.0f : x;
    return 1.0f - 2.0f / (as_fast_expf(2.0f * x) + 1.0f);
}


/* Copies of a hot kernel from one C body: baseline ISA, AVX2 + FMA, and AVX-512 (a * b + c
 * contracted to fused multiply-adds in both SIMD copies), the widest the CPU runs chosen
 * at run time (x86-64, GCC); elsewhere only the baseline copy exists. Usage:
 *   AS_KERNEL_BODY void k_body(args...) { ... }
 *   AS_KERNEL_SIMD(k, (float *y, int n), (y, n))   defines k_avx2 and k_avx512 when dispatching
 *   AS_KERNEL_RUN(k, y, n);                           calls the right copy
 * Results of the copies differ in the last bits, never between runs on one machine. */
#define AS_KERNEL_BODY static inline __attribute__((always_inline))
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX2__)
#define AS_KERNEL_DISPATCH 1
/* 2: AVX-512 (F, DQ, BW, VL), 1: AVX2 + FMA, 0: neither. */
static inline int as_cpu_simd_level(void) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return 0;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")
               ? 2
               : 1;
}
#define AS_KERNEL_SIMD(name, params, args)                                                              \
    __attribute__((target("avx2,fma"), optimize("fp-contract=fast"))) static void name##_avx2 params { \
        name##_body args;                                                                             \
    }                                                                                                 \
    __attribute__((target("avx2,fma,avx512f,avx512dq,avx512bw,avx512vl,prefer-vector-width=512"),    \
                   optimize("fp-contract=fast"))) static void name##_avx512 params {                  \
        name##_body args;                                                                             \
    }
#define AS_KERNEL_RUN(name, ...)                                                                        \
    do {                                                                                              \
        int as_level_ = as_cpu_simd_level();                                                          \
        if (as_level_ == 2) name##_avx512(__VA_ARGS__);                                               \
        else if (as_level_ == 1) name##_avx2(__VA_ARGS__);                                            \
        else name##_body(__VA_ARGS__);                                                                \
    } while (0)
#else
#define AS_KERNEL_SIMD(name, params, args)
#define AS_KERNEL_RUN(name, ...) name##_body(__VA_ARGS__)
#endif

#endif
