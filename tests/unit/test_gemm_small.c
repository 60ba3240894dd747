/* test_gemm_small.c — core/gemm_small.c (y = x W^T and y = x W without packing) against
 * a double reference on every edge of its tiles (3 x 4 and 4 x 4 for x W^T, 6 rows x 64
 * columns for x W) and of its 8- and 16-wide k loops: M = 1..7, N = 1..9, K in
 * {0, 1, 7, 8, 9, 15, 16, 17, 33, 768}, wider shapes across the 64-column and 256-row
 * blocks, leading dimensions larger than the operands, overwrite and accumulate, at each
 * level the CPU has (AVX-512, AVX2, the scalar loops: as_gemm_small_force). Tolerance:
 * 1e-5 relative to sum |x||w| (float rounding of a K-term sum in a different order).
 * Widths ending inside each 16-column vector, W aligned to 64 bytes and 1, 5, 15 floats
 * past it. Also: a column block's values are bit-identical to the same columns of a wider call
 * (callers split the columns between threads).
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

/* w[n, k] of the form under test: xw = 0: W (N, K) row-major, 1: W (K, N). */
static size_t widx(int xw, int n, int k, size_t ldw) { return xw ? (size_t)k * ldw + n : (size_t)n * ldw + k; }

static void run(int xw, int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, float *y,
                size_t ldy, int accumulate) {
    if (xw)
        as_gemm_small_xw(M, N, K, x, ldx, w, ldw, y, ldy, accumulate);
    else
        as_gemm_small_xwt(M, N, K, x, ldx, w, ldw, y, ldy, accumulate);
}

/* woff < 0: W's rows ldw = the operand's width + 5 floats apart; woff >= 0: a multiple of
 * 16 floats apart (so every row has the same alignment) with W woff floats past a 64-byte
 * boundary (the kernels then align their loads to W's lines). */
static void check_at(int xw, int M, int N, int K, int accumulate, int woff) {
    size_t ldx = (size_t)K + 3, ldw = xw ? (size_t)N + 5 : (size_t)K + 5, ldy = (size_t)N + 2;
    if (woff >= 0) ldw = (ldw + 15) & ~(size_t)15;
    size_t nw = xw ? (size_t)(K > 0 ? K : 1) * ldw : (size_t)N * ldw;
    float *x = malloc(sizeof(float) * (size_t)M * ldx), *wbuf = aligned_alloc(64, (sizeof(float) * (nw + 32) + 63) & ~(size_t)63);
    float *w = wbuf + (woff > 0 ? woff : 0);
    float *y = malloc(sizeof(float) * (size_t)M * ldy);
    assert_non_null(x);
    assert_non_null(wbuf);
    assert_non_null(y);
    unsigned s = (unsigned)(M * 1000 + N * 10 + K + xw);
    for (size_t i = 0; i < (size_t)M * ldx; i++) x[i] = frand(&s);
    for (size_t i = 0; i < nw; i++) w[i] = frand(&s);
    for (size_t i = 0; i < (size_t)M * ldy; i++) y[i] = frand(&s);
    float *y0 = malloc(sizeof(float) * (size_t)M * ldy);
    assert_non_null(y0);
    for (size_t i = 0; i < (size_t)M * ldy; i++) y0[i] = y[i];
    run(xw, M, N, K, x, ldx, w, ldw, y, ldy, accumulate);
    for (int m = 0; m < M; m++) {
        for (int n = 0; n < N; n++) {
            double ref = accumulate ? y0[(size_t)m * ldy + n] : 0.0, mag = fabs(ref);
            for (int k = 0; k < K; k++) {
                ref += (double)x[(size_t)m * ldx + k] * w[widx(xw, n, k, ldw)];
                mag += fabs((double)x[(size_t)m * ldx + k] * w[widx(xw, n, k, ldw)]);
            }
            double got = y[(size_t)m * ldy + n];
            if (fabs(got - ref) > 1e-5 * (mag + 1e-30)) {
                fprintf(stderr, "%s M=%d N=%d K=%d acc=%d: y[%d,%d] = %.9g, want %.9g\n", xw ? "xw" : "xwt", M, N, K,
                        accumulate, m, n, got, ref);
                fail();
            }
        }
        for (size_t n = (size_t)N; n < ldy; n++) /* padding columns untouched */
            assert_true(y[(size_t)m * ldy + n] == y0[(size_t)m * ldy + n]);
    }
    if (N > 1) { /* columns [n0, N) on their own: the same bits as in the full call */
        int n0 = N / 2 + 1 < N ? N / 2 + 1 : N - 1;
        float *yb = malloc(sizeof(float) * (size_t)M * ldy);
        assert_non_null(yb);
        for (size_t i = 0; i < (size_t)M * ldy; i++) yb[i] = y0[i];
        run(xw, M, N - n0, K, x, ldx, xw ? w + n0 : w + (size_t)n0 * ldw, ldw, yb + n0, ldy, accumulate);
        for (int m = 0; m < M; m++)
            assert_memory_equal(yb + (size_t)m * ldy + n0, y + (size_t)m * ldy + n0, (size_t)(N - n0) * sizeof(float));
        free(yb);
    }
    free(x);
    free(wbuf);
    free(y);
    free(y0);
}

static void check(int xw, int M, int N, int K, int accumulate) { check_at(xw, M, N, K, accumulate, -1); }

static const char *level_name[] = {"best", "AVX2 at most", "scalar"};

static void test_edges(void **state) {
    (void)state;
    static const int Ks[] = {0, 1, 7, 8, 9, 15, 16, 17, 33, 768};
    for (int level = 0; level < 3; level++) {
        as_gemm_small_force(level);
        for (int xw = 0; xw < 2; xw++)
            for (int M = 1; M <= 7; M++)
                for (int N = 1; N <= 9; N++)
                    for (size_t ki = 0; ki < sizeof Ks / sizeof *Ks; ki++)
                        for (int acc = 0; acc < 2; acc++) check(xw, M, N, Ks[ki], acc);
    }
    as_gemm_small_force(0);
}

/* Widths that end inside each 16-column vector of the x W tile, W aligned and not. */
static void test_widths(void **state) {
    (void)state;
    static const int Ns[] = {15, 16, 17, 31, 33, 47, 49, 63, 64, 65, 100, 129};
    static const int offs[] = {-1, 0, 1, 5, 15};
    for (int xw = 0; xw < 2; xw++)
        for (size_t ni = 0; ni < sizeof Ns / sizeof *Ns; ni++)
            for (size_t oi = 0; oi < sizeof offs / sizeof *offs; oi++)
                for (int M = 1; M <= 7; M += 3) {
                    check_at(xw, M, Ns[ni], 37, 0, offs[oi]);
                    check_at(xw, M, Ns[ni], 300, 1, offs[oi]);
                }
}

static void test_layer_sizes(void **state) {
    (void)state;
    for (int level = 0; level < 3; level++) {
        as_gemm_small_force(level);
        printf("level %s: x W^T kernel %s, x W kernel %s\n", level_name[level], as_gemm_small_ok() ? "yes" : "no",
               as_gemm_small_xw_ok() ? "yes" : "no");
        for (int xw = 0; xw < 2; xw++) {
            check(xw, 25, 768, 768, 1);  /* a BERT-base projection on a 25-token sentence, bias preloaded */
            check(xw, 32, 3072, 768, 0); /* the feed-forward up-projection */
            check(xw, 13, 130, 96, 0);
            check(xw, 64, 200, 600, 1);  /* x W: 4 column blocks (the last partial), 3 row blocks of W */
            check(xw, 11, 77, 3072, 0);
        }
    }
    as_gemm_small_force(0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_widths),
        cmocka_unit_test(test_layer_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
