/* test_gemm_small.c — core/gemm_small.c (y = x W^T without packing) against a double
 * reference on every edge of its 3 x 4 tiles and 8-wide k loop: M = 1..7, N = 1..9,
 * K in {1, 7, 8, 9, 16, 17, 33, 768}, leading dimensions larger than the operands,
 * overwrite and accumulate. Tolerance: 1e-5 relative to sum |x||w| (float rounding of
 * a K-term sum in a different order). Runs the scalar fallback when the CPU has no
 * AVX2 (as_gemm_small_ok() = 0), which must give the same values.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/gemm_small.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void check(int M, int N, int K, int accumulate) {
    size_t ldx = (size_t)K + 3, ldw = (size_t)K + 5, ldy = (size_t)N + 2;
    float *x = malloc(sizeof(float) * (size_t)M * ldx), *w = malloc(sizeof(float) * (size_t)N * ldw);
    float *y = malloc(sizeof(float) * (size_t)M * ldy);
    assert_non_null(x);
    assert_non_null(w);
    assert_non_null(y);
    unsigned s = (unsigned)(M * 1000 + N * 10 + K);
    for (size_t i = 0; i < (size_t)M * ldx; i++) x[i] = frand(&s);
    for (size_t i = 0; i < (size_t)N * ldw; i++) w[i] = frand(&s);
    for (size_t i = 0; i < (size_t)M * ldy; i++) y[i] = frand(&s);
    float *y0 = malloc(sizeof(float) * (size_t)M * ldy);
    assert_non_null(y0);
    for (size_t i = 0; i < (size_t)M * ldy; i++) y0[i] = y[i];
    as_gemm_small_xwt(M, N, K, x, ldx, w, ldw, y, ldy, accumulate);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double ref = accumulate ? y0[(size_t)m * ldy + n] : 0.0, mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                ref += (double)x[(size_t)m * ldx + k] * w[(size_t)n * ldw + k];
                mag += fabs((double)x[(size_t)m * ldx + k] * w[(size_t)n * ldw + k]);
            }
            double got = y[(size_t)m * ldy + n];
            if (fabs(got - ref) > 1e-5 * (mag + 1e-30)) {
                fprintf(stderr, "M=%d N=%d K=%d acc=%d: y[%d,%d] = %.9g, want %.9g\n", M, N, K, accumulate, m, n, got,
                        ref);
                fail();
            }
        }
        for (size_t n = (size_t)N; n < ldy; n++) /* padding columns untouched */
            assert_true(y[(size_t)m * ldy + n] == y0[(size_t)m * ldy + n]);
    }
    free(x);
    free(w);
    free(y);
    free(y0);
}

static void test_edges(void **state) {
    (void)state;
    static const int Ks[] = {1, 7, 8, 9, 16, 17, 33, 768};
    for (int M = 1; M <= 7; M++)
        for (int N = 1; N <= 9; N++)
            for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
                for (int acc = 0; acc < 2; acc++) check(M, N, Ks[ki], acc);
}

static void test_layer_sizes(void **state) {
    (void)state;
    check(25, 768, 768, 1);  /* a BERT-base projection on a 25-token sentence, bias preloaded */
    check(32, 3072, 768, 0); /* the feed-forward up-projection at the size limit used */
    check(13, 130, 96, 0);
    printf("AVX2 + FMA kernel: %s\n", as_gemm_small_ok() ? "yes" : "no (scalar fallback)");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_layer_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
