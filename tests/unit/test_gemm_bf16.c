/* test_gemm_bf16.c — core/gemm_bf16.c: y = x W^T on BF16 operands with F32 sums, against
 * a double reference on the same BF16 values, on every edge of the 6 x 4 tiles (edge tiles
 * of 1-5 rows), the 32-wide K steps and the 64-column / 1024-K blocks: M = 1..9, N = 1..9
 * and 63..66, K in {1, 2, 31, 32, 33, 64, 1023, 1025, 2100}, leading dimensions larger
 * than the operands, with and without bias. Tolerance 2e-6 relative to sum |x||w| (the products
 * of BF16 values are exact in F32; only the order of the F32 sums differs). The same
 * checks run the widening fallback, as on a CPU without AVX-512 BF16, by calling it
 * through as_gemm_bf16_xwt with the native kernel forced off. y (+)= x W with W (K, N)
 * (as_gemm_bf16_xw) the same way, native and fallback: M = 1..9 and 13, N across the
 * 16-column vectors and 64-column blocks (1, 2, 15-17, 31-33, 63-65, 130), K odd and even
 * across the 256-row blocks (1, 2, 3, 31, 255-257, 513), overwriting and accumulating,
 * same tolerance. y = x W^T from W packed (as_gemm_bf16_pack, as_gemm_bf16_xwt_packed), native
 * and the scalar loops: M = 1..9 and 13, N across the 64-row panels (1, 5, 63-65, 130), K odd
 * and even across the pairs and the 1024-value blocks (1, 2, 3, 31, 64, 1023-1025, 2100),
 * every column or a range cutting panels (the rest of y untouched), with and without bias,
 * same tolerance; the two paths agree within 1e-6 of the sum of |x||w|. The same shapes for
 * F32 x (any F32 values) times the packed BF16 W (as_gemm_f32_xwt_packed), same tolerance,
 * native and scalar bit for bit, and on W as stored (as_gemm_f32_xwt_bf16, blocks packed per
 * call) bit for bit with it. F32 x times F32 W (as_gemm_f32_xwt), [out, in] packed per call
 * and [in, out] read in place: M 1..7 and 13, N across the 16-column vectors and 64-column
 * blocks, K across the 16 x 16 transposes and the 512-value blocks (1..1100), against a
 * double reference (same tolerance), a split of the columns and the scalar loops bit for bit. Also the F32 -> BF16
 * rounding: nearest even, exact for BF16 values, NaN kept; and the 16-wide conversions
 * of as_f32_to_bf16_n / as_bf16_to_f32_n bit for bit against the scalar
 * as_f32_to_bf16 / as_bf16_to_f32 on ties, carries, denormals, infinities and NaNs at
 * every offset of a 16-value block and a tail.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/gemm_bf16.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void check(int M, int N, int K, int with_bias) {
    size_t ldx = (size_t)K + 3, ldw = (size_t)K + 5, ldy = (size_t)N + 2;
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)M * ldx), *w = malloc(sizeof(uint16_t) * (size_t)N * ldw);
    float *y = malloc(sizeof(float) * (size_t)M * ldy), *bias = malloc(sizeof(float) * (size_t)N);
    float *scratch = malloc(sizeof(float) * as_gemm_bf16_scratch(K));
    assert_true(x && w && y && bias && scratch);
    unsigned s = (unsigned)(M * 1000 + N * 10 + K);
    for (size_t i = 0; i < (size_t)M * ldx; i++) x[i] = as_f32_to_bf16(frand(&s));
    for (size_t i = 0; i < (size_t)N * ldw; i++) w[i] = as_f32_to_bf16(frand(&s));
    for (int n = 0; n < N; n++) bias[n] = frand(&s);
    for (size_t i = 0; i < (size_t)M * ldy; i++) y[i] = 1234.0f; /* outside the columns: untouched */
    as_gemm_bf16_xwt(M, N, K, x, ldx, w, ldw, with_bias ? bias : NULL, y, ldy, scratch);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double ref = with_bias ? bias[n] : 0.0, mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                double p = (double)as_bf16_to_f32(x[(size_t)m * ldx + k]) * as_bf16_to_f32(w[(size_t)n * ldw + k]);
                ref += p;
                mag += fabs(p);
            }
            double got = y[(size_t)m * ldy + n];
            if (fabs(got - ref) > 2e-6 * (mag + 1e-30))
                fail_msg("M=%d N=%d K=%d bias=%d: y[%d,%d] = %.9g, reference %.9g", M, N, K, with_bias, m, n, got, ref);
        }
        for (size_t n = (size_t)N; n < ldy; n++) assert_true(y[(size_t)m * ldy + n] == 1234.0f);
    }
    free(x);
    free(w);
    free(y);
    free(bias);
    free(scratch);
}

static void run_shapes(void) {
    static const int Ks[] = {1, 2, 31, 32, 33, 64, 1023, 1025, 2100};
    static const int Ns[] = {1, 2, 3, 4, 5, 8, 9, 63, 64, 65, 66};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
            for (int M = 1; M <= 9; M++) check(M, Ns[ni], Ks[ki], (M + Ns[ni]) & 1);
}

/* y (+)= x W with W (K, N) row-major (as_gemm_bf16_xw), accumulating onto y0 or not. */
static void check_xw(int M, int N, int K, int accumulate) {
    size_t ldx = (size_t)K + 3, ldw = (size_t)N + 5, ldy = (size_t)N + 2;
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)M * ldx), *w = malloc(sizeof(uint16_t) * (size_t)K * ldw);
    float *y = malloc(sizeof(float) * (size_t)M * ldy), *y0 = malloc(sizeof(float) * (size_t)M * ldy);
    float *scratch = malloc(sizeof(float) * as_gemm_bf16_xw_scratch(N));
    assert_true(x && w && y && y0 && scratch);
    unsigned s = (unsigned)(M * 7919 + N * 31 + K);
    for (size_t i = 0; i < (size_t)M * ldx; i++) x[i] = as_f32_to_bf16(frand(&s));
    for (size_t i = 0; i < (size_t)K * ldw; i++) w[i] = as_f32_to_bf16(frand(&s));
    for (size_t i = 0; i < (size_t)M * ldy; i++) y[i] = y0[i] = (i % ldy) < (size_t)N ? frand(&s) : 1234.0f;
    as_gemm_bf16_xw(M, N, K, x, ldx, w, ldw, y, ldy, accumulate, scratch);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double ref = accumulate ? y0[(size_t)m * ldy + n] : 0.0, mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                double p = (double)as_bf16_to_f32(x[(size_t)m * ldx + k]) * as_bf16_to_f32(w[(size_t)k * ldw + n]);
                ref += p;
                mag += fabs(p);
            }
            double got = y[(size_t)m * ldy + n];
            if (fabs(got - ref) > 2e-6 * (mag + 1e-30))
                fail_msg("xw M=%d N=%d K=%d accumulate=%d: y[%d,%d] = %.9g, reference %.9g", M, N, K, accumulate, m,
                         n, got, ref);
        }
        for (size_t n = (size_t)N; n < ldy; n++) assert_true(y[(size_t)m * ldy + n] == 1234.0f);
    }
    free(x);
    free(w);
    free(y);
    free(y0);
    free(scratch);
}

/* The 6-row tiles (edge tiles of 1-5 rows), the 16-column vectors and 64-column packed
 * blocks (masked edges), odd K (the last value paired with 0) and 256-row K blocks. */
static void run_shapes_xw(void) {
    static const int Ks[] = {1, 2, 3, 31, 255, 256, 257, 513};
    static const int Ns[] = {1, 2, 15, 16, 17, 31, 32, 33, 63, 64, 65, 130};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
            for (int M = 1; M <= 13; M += M < 9 ? 1 : 4) check_xw(M, Ns[ni], Ks[ki], (M + (int)ki) & 1);
}

/* y[:, c0:c1) = x W^T (+ bias) from the packed W; the other columns untouched. f32: x
 * any F32 values (as_gemm_f32_xwt_packed), else BF16 (as_gemm_bf16_xwt_packed). */
static void check_packed(int M, int N, int K, int c0, int c1, int with_bias, int f32) {
    size_t ldx = (size_t)K + 3, ldy = (size_t)N + 2;
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)M * ldx), *w = malloc(sizeof(uint16_t) * (size_t)N * K);
    float *xf = malloc(sizeof(float) * (size_t)M * ldx);
    uint32_t *pk = malloc(sizeof(uint32_t) * as_gemm_bf16_packed_words(N, K));
    float *y = malloc(sizeof(float) * (size_t)M * ldy), *bias = malloc(sizeof(float) * (size_t)N);
    assert_true(x && xf && w && pk && y && bias);
    unsigned s = (unsigned)(M * 131 + N * 17 + K + c0);
    for (size_t i = 0; i < (size_t)M * ldx; i++) {
        xf[i] = frand(&s) * (1.0f + 1e-3f * frand(&s)); /* not BF16 values */
        x[i] = as_f32_to_bf16(xf[i]);
        if (!f32) xf[i] = as_bf16_to_f32(x[i]);
    }
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = as_f32_to_bf16(frand(&s));
    for (int n = 0; n < N; n++) bias[n] = frand(&s);
    for (size_t i = 0; i < (size_t)M * ldy; i++) y[i] = 1234.0f;
    as_gemm_bf16_pack(w, (size_t)K, N, K, pk);
    if (f32) as_gemm_f32_xwt_packed(M, c0, c1, K, xf, ldx, pk, with_bias ? bias : NULL, y, ldy);
    else as_gemm_bf16_xwt_packed(M, c0, c1, K, x, ldx, pk, with_bias ? bias : NULL, y, ldy);
    for (int m = 0; m < M; m++)
        for (size_t n = 0; n < ldy; n++) {
            double got = y[(size_t)m * ldy + n];
            if ((int)n < c0 || (int)n >= c1) {
                if (got != 1234.0f)
                    fail_msg("packed%s M=%d N=%d K=%d [%d, %d): y[%d,%zu] written", f32 ? " f32" : "", M, N, K, c0,
                             c1, m, n);
                continue;
            }
            double ref = with_bias ? bias[n] : 0.0, mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                double p = (double)xf[(size_t)m * ldx + k] * as_bf16_to_f32(w[n * (size_t)K + k]);
                ref += p;
                mag += fabs(p);
            }
            if (fabs(got - ref) > 2e-6 * (mag + 1e-30))
                fail_msg("packed%s M=%d N=%d K=%d [%d, %d) bias=%d: y[%d,%zu] = %.9g, reference %.9g",
                         f32 ? " f32" : "", M, N, K, c0, c1, with_bias, m, n, got, ref);
        }
    if (f32) { /* W as stored, packed block by block per call: the same values bit for bit */
        float *y2 = malloc(sizeof(float) * (size_t)M * ldy);
        uint32_t *sc = malloc(sizeof(uint32_t) * as_gemm_f32_xwt_bf16_scratch(K));
        assert_true(y2 && sc);
        memcpy(y2, y, sizeof(float) * (size_t)M * ldy);
        as_gemm_f32_xwt_bf16(M, c1 - c0, K, xf, ldx, w + (size_t)c0 * K, (size_t)K, with_bias ? bias + c0 : NULL,
                             y2 + c0, ldy, sc);
        if (memcmp(y, y2, sizeof(float) * (size_t)M * ldy) != 0)
            fail_msg("f32 per-call packing M=%d N=%d K=%d [%d, %d): differs from W packed whole", M, N, K, c0, c1);
        free(y2);
        free(sc);
    }
    free(x);
    free(xf);
    free(w);
    free(pk);
    free(y);
    free(bias);
}

static void run_shapes_packed(void) {
    static const int Ks[] = {1, 2, 3, 31, 64, 1023, 1024, 1025, 2100};
    static const int Ns[] = {1, 5, 63, 64, 65, 130};
    for (int f32 = 0; f32 < 2; f32++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
                for (int M = 1; M <= 13; M += M < 9 ? 1 : 4) {
                    int N = Ns[ni], bias = (M + (int)ki) & 1;
                    check_packed(M, N, Ks[ki], 0, N, bias, f32);
                    if (N > 4) check_packed(M, N, Ks[ki], N / 3, N - N / 4, !bias, f32); /* cuts panels */
                }
}

/* The native kernels and the scalar loops on the same packed operands: BF16 x within
 * 1e-6 of the sum of |x||w| (the two add each pair's products in different orders), F32
 * x bit for bit (the same fused multiply-adds in the same order), odd K, with bias. */
static void test_packed_paths_agree(void **state) {
    (void)state;
    const int M = 13, N = 130, K = 2101;
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)M * K), *w = malloc(sizeof(uint16_t) * (size_t)N * K);
    float *xf = malloc(sizeof(float) * (size_t)M * K), *bias = malloc(sizeof(float) * (size_t)N);
    uint32_t *pk = malloc(sizeof(uint32_t) * as_gemm_bf16_packed_words(N, K));
    float *y1 = malloc(sizeof(float) * (size_t)M * N), *y2 = malloc(sizeof(float) * (size_t)M * N);
    float *y3 = malloc(sizeof(float) * (size_t)M * N), *y4 = malloc(sizeof(float) * (size_t)M * N);
    assert_true(x && xf && bias && w && pk && y1 && y2 && y3 && y4);
    unsigned s = 99;
    for (size_t i = 0; i < (size_t)M * K; i++) {
        xf[i] = frand(&s) * (1.0f + 1e-3f * frand(&s));
        x[i] = as_f32_to_bf16(xf[i]);
    }
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = as_f32_to_bf16(frand(&s));
    for (int n = 0; n < N; n++) bias[n] = frand(&s);
    as_gemm_bf16_pack(w, (size_t)K, N, K, pk);
    as_gemm_bf16_xwt_packed(M, 0, N, K, x, K, pk, bias, y1, N);
    as_gemm_f32_xwt_packed(M, 0, N, K, xf, K, pk, bias, y3, N);
    as_gemm_bf16_force_fallback(1);
    as_gemm_bf16_xwt_packed(M, 0, N, K, x, K, pk, bias, y2, N);
    as_gemm_f32_xwt_packed(M, 0, N, K, xf, K, pk, bias, y4, N);
    as_gemm_bf16_force_fallback(0);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double mag = fabs(bias[n]);
            for (int k = 0; k < K; k++)
                mag += fabs((double)as_bf16_to_f32(x[(size_t)m * K + k]) * as_bf16_to_f32(w[(size_t)n * K + k]));
            size_t i = (size_t)m * N + n;
            if (fabs((double)y1[i] - y2[i]) > 1e-6 * mag)
                fail_msg("y[%d,%d]: native %.9g, scalar %.9g", m, n, y1[i], y2[i]);
            if (y3[i] != y4[i]) fail_msg("f32 y[%d,%d]: native %.9g, scalar %.9g", m, n, y3[i], y4[i]);
        }
    free(x);
    free(xf);
    free(bias);
    free(w);
    free(pk);
    free(y1);
    free(y2);
    free(y3);
    free(y4);
}

/* y = x W^T from F32 weights (as_gemm_f32_xwt), W [out, in] (packed per call) or [in, out]
 * read in place, leading dimensions past the operands: against a double reference; the
 * columns [c0, N) computed alone give the same values bit for bit; the scalar loops too. */
static void check_f32w(int M, int N, int K, int in_out, int with_bias) {
    size_t ldx = (size_t)K + 3, ldw = (in_out ? (size_t)N : (size_t)K) + 5, ldy = (size_t)N + 2;
    size_t nw = (in_out ? (size_t)K : (size_t)N) * ldw;
    float *x = malloc(sizeof(float) * (size_t)M * ldx), *w = malloc(sizeof(float) * nw);
    float *y = malloc(sizeof(float) * (size_t)M * ldy), *y2 = malloc(sizeof(float) * (size_t)M * ldy);
    float *bias = malloc(sizeof(float) * (size_t)N), *sc = malloc(sizeof(float) * as_gemm_f32_xwt_scratch(K));
    assert_true(x && w && y && y2 && bias && sc);
    unsigned s = (unsigned)(M * 7 + N * 131 + K * 3 + in_out);
    for (size_t i = 0; i < (size_t)M * ldx; i++) x[i] = frand(&s) * (1.0f + 1e-3f * frand(&s));
    for (size_t i = 0; i < nw; i++) w[i] = frand(&s) * (1.0f + 1e-3f * frand(&s));
    for (int n = 0; n < N; n++) bias[n] = frand(&s);
    for (size_t i = 0; i < (size_t)M * ldy; i++) y[i] = y2[i] = 1234.0f;
    const float *b = with_bias ? bias : NULL;
    as_gemm_f32_xwt(M, N, K, x, ldx, w, ldw, in_out, b, y, ldy, sc);
    for (int m = 0; m < M; m++)
        for (size_t n = 0; n < ldy; n++) {
            double got = y[(size_t)m * ldy + n];
            if ((int)n >= N) {
                if (got != 1234.0f) fail_msg("f32w M=%d N=%d K=%d: y[%d,%zu] written", M, N, K, m, n);
                continue;
            }
            double ref = with_bias ? bias[n] : 0.0, mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                double p = (double)x[(size_t)m * ldx + k] * (in_out ? w[(size_t)k * ldw + n] : w[n * ldw + k]);
                ref += p;
                mag += fabs(p);
            }
            if (fabs(got - ref) > 2e-6 * (mag + 1e-30))
                fail_msg("f32w M=%d N=%d K=%d in_out=%d bias=%d: y[%d,%zu] = %.9g, reference %.9g", M, N, K, in_out,
                         with_bias, m, n, got, ref);
        }
    int c0 = N / 3; /* the columns [c0, N) alone */
    as_gemm_f32_xwt(M, c0, K, x, ldx, w, ldw, in_out, b, y2, ldy, sc);
    as_gemm_f32_xwt(M, N - c0, K, x, ldx, in_out ? w + c0 : w + (size_t)c0 * ldw, ldw, in_out, b ? b + c0 : NULL,
                    y2 + c0, ldy, sc);
    if (memcmp(y, y2, sizeof(float) * (size_t)M * ldy) != 0)
        fail_msg("f32w M=%d N=%d K=%d in_out=%d: split at column %d differs", M, N, K, in_out, c0);
    int native = as_gemm_f32_packed_native();
    as_gemm_bf16_force_fallback(1);
    as_gemm_f32_xwt(M, N, K, x, ldx, w, ldw, in_out, b, y2, ldy, sc);
    as_gemm_bf16_force_fallback(0);
    if (native && memcmp(y, y2, sizeof(float) * (size_t)M * ldy) != 0)
        fail_msg("f32w M=%d N=%d K=%d in_out=%d: native and scalar differ", M, N, K, in_out);
    free(x);
    free(w);
    free(y);
    free(y2);
    free(bias);
    free(sc);
}

static void test_f32_weights(void **state) {
    (void)state;
    static const int Ks[] = {1, 2, 15, 16, 17, 33, 511, 512, 513, 1100};
    static const int Ns[] = {1, 5, 16, 17, 63, 64, 65, 130};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++)
            for (int M = 1; M <= 13; M += M < 7 ? 1 : 6)
                for (int in_out = 0; in_out < 2; in_out++) check_f32w(M, Ns[ni], Ks[ki], in_out, (M + in_out) & 1);
}

/* K = 0: every product gives the bias (or 0), native or scalar. */
static void test_empty_k(void **state) {
    (void)state;
    float bias[5] = {1, 2, 3, 4, 5}, y[3 * 5], x[1] = {0}, sc[64];
    uint16_t xb[1] = {0}, w[1] = {0};
    uint32_t pk[64] = {0};
    for (int fb = 0; fb < 2; fb++) {
        as_gemm_bf16_force_fallback(fb);
        for (int f = 0; f < 5; f++) {
            for (int i = 0; i < 15; i++) y[i] = -7.0f;
            const float *b = f & 1 ? NULL : bias;
            switch (f) {
            case 0: as_gemm_f32_xwt(3, 5, 0, x, 1, (const float *)x, 1, 0, b, y, 5, sc); break;
            case 1: as_gemm_f32_xwt_bf16(3, 5, 0, x, 1, w, 1, b, y, 5, pk); break;
            case 2: as_gemm_f32_xwt_packed(3, 0, 5, 0, x, 1, pk, b, y, 5); break;
            case 3: as_gemm_bf16_xwt_packed(3, 0, 5, 0, xb, 1, pk, b, y, 5); break;
            default: as_gemm_bf16_xwt(3, 5, 0, xb, 1, w, 1, b, y, 5, sc); break;
            }
            for (int i = 0; i < 15; i++)
                if (y[i] != (b ? bias[i % 5] : 0.0f)) fail_msg("K = 0, product %d (scalar %d): y[%d] = %g", f, fb, i, y[i]);
        }
    }
    as_gemm_bf16_force_fallback(0);
}

static void test_native_or_fallback(void **state) {
    (void)state;
    printf("    kernel: %s\n", as_gemm_bf16_native() ? "AVX-512 BF16" : "widening fallback");
    run_shapes();
    run_shapes_xw();
    run_shapes_packed();
}

static void test_fallback(void **state) {
    (void)state;
    as_gemm_bf16_force_fallback(1);
    run_shapes();
    run_shapes_xw();
    run_shapes_packed();
    as_gemm_bf16_force_fallback(0);
}

static void test_rounding(void **state) {
    (void)state;
    float v[] = {1.0f, -2.5f, 3.0e-40f, 1.00390625f /* 1 + 2^-8: halfway, ties to even -> 1 */,
                 1.01171875f /* 1 + 3 * 2^-8: halfway -> 1 + 2^-6 (even) */, 65504.0f, NAN};
    uint16_t b[7];
    as_f32_to_bf16_n(b, v, 7);
    assert_int_equal(b[0], 0x3f80);
    assert_int_equal(b[1], 0xc020);
    assert_int_equal(b[3], 0x3f80);
    assert_int_equal(b[4], 0x3f82);
    assert_true(isnan(as_bf16_to_f32(b[6])));
    float back[7];
    as_bf16_to_f32_n(back, b, 7);
    assert_true(back[0] == 1.0f && back[1] == -2.5f && back[5] == 65536.0f);
}

/* as_f32_to_bf16_t: every value rounded as as_f32_to_bf16 and transposed, on shapes across
 * its 32 x 32 blocks, with leading dimensions wider than the rows; the padding untouched. */
static void test_rounding_transposed(void **state) {
    (void)state;
    static const int shapes[][2] = {{1, 1}, {7, 45}, {33, 32}, {64, 70}, {130, 3}};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        int R = shapes[k][0], C = shapes[k][1];
        size_t lds = (size_t)C + 3, ldd = (size_t)R + 5;
        float *src = malloc(sizeof(float) * R * lds);
        uint16_t *dst = malloc(sizeof(uint16_t) * C * ldd);
        assert_true(src && dst);
        unsigned st = 11u + (unsigned)k;
        for (size_t i = 0; i < (size_t)R * lds; i++) {
            st = st * 1664525u + 1013904223u;
            memcpy(&src[i], &st, 4);
        }
        memset(dst, 0xab, sizeof(uint16_t) * C * ldd);
        as_f32_to_bf16_t(dst, ldd, src, lds, R, C);
        for (int c = 0; c < C; c++) {
            for (int r = 0; r < R; r++) assert_int_equal(dst[(size_t)c * ldd + r], as_f32_to_bf16(src[(size_t)r * lds + c]));
            for (size_t r = (size_t)R; r < ldd; r++) assert_int_equal(dst[(size_t)c * ldd + r], 0xabab);
        }
        free(src);
        free(dst);
    }
}

static void test_rounding_blocks(void **state) {
    (void)state;
    enum { n = 16 * 40 + 7 };
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x00008000u,
                                       0x00018000u, 0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x7f7fffffu,
                                       0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fc00000u,
                                       0xffffffffu, 0x7fbf0000u, 0xbf7fffffu};
    size_t ns = sizeof special / sizeof special[0];
    float *v = malloc(n * sizeof(float)), *back = malloc(n * sizeof(float));
    uint16_t *b = malloc(n * sizeof(uint16_t));
    assert_non_null(v);
    assert_non_null(b);
    assert_non_null(back);
    unsigned s = 7u;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        uint32_t u = i % 3 == 0 ? special[(i / 3) % ns] : s;
        memcpy(&v[i], &u, 4);
    }
    as_f32_to_bf16_n(b, v, n);
    as_bf16_to_f32_n(back, b, n);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(b[i], as_f32_to_bf16(v[i]));
        float w = as_bf16_to_f32(b[i]);
        assert_memory_equal(&back[i], &w, 4);
    }
    free(v);
    free(b);
    free(back);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rounding_blocks),
        cmocka_unit_test(test_rounding_transposed),
        cmocka_unit_test(test_native_or_fallback),
        cmocka_unit_test(test_fallback),
        cmocka_unit_test(test_packed_paths_agree),
        cmocka_unit_test(test_f32_weights),
        cmocka_unit_test(test_empty_k),
        cmocka_unit_test(test_rounding),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
