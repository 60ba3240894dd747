/* test_core.c — core/core.c allocation helpers: overflow checks of as_mul_size and
 * as_malloc_array; as_malloc_large (small requests from malloc, large ones aligned
 * to 2 MiB, fully writable, released with free; overflow gives NULL); the
 * large-buffer reuse of as_large_get/as_large_put (a released buffer comes back for a
 * request between half and all of its capacity, not for a smaller or larger one; the
 * cache keeps at most AS_LARGE_CACHE_N buffers; ASan builds never reuse); the fast
 * math of core/fastmath.h against libm over a dense grid (exp: relative error <= 4e-7
 * on [-87, 88], 0 below -87.3; erf: absolute error <= 1e-6; tanh <= 1e-6; log2:
 * relative <= 3e-7 on normal floats) and on NaN and infinities (NaN in, NaN out;
 * without undefined behaviour, which the UBSan build checks); error messages keep no
 * control character (as_err_set, as_err_prefix). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/fastmath.h"

#include <math.h>

static void test_mul_size(void **state) {
    (void)state;
    assert_int_equal(as_mul_size(3, 7), 21);
    assert_int_equal(as_mul_size(SIZE_MAX / 2 + 1, 2), 0);
    assert_int_equal(as_mul_size(SIZE_MAX, 1), SIZE_MAX);
    assert_null(as_malloc_array(SIZE_MAX / 4 + 1, 4));
}

static void test_malloc_large(void **state) {
    (void)state;
    /* below the threshold: plain malloc, any alignment */
    unsigned char *s = as_malloc_large(1000, sizeof(float));
    assert_non_null(s);
    memset(s, 0x5a, 4000);
    assert_int_equal(s[3999], 0x5a);
    free(s);
    /* 6 MiB + a bit: 2 MiB aligned, every byte writable (first and last page) */
    size_t n = ((size_t)6 << 20) / sizeof(float) + 3;
    float *p = as_malloc_large(n, sizeof(float));
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % ((uintptr_t)2 << 20), 0);
    for (size_t i = 0; i < n; i += 1024) p[i] = (float)i;
    p[n - 1] = -1.0f;
    assert_true(p[1024] == 1024.0f);
    assert_true(p[n - 1] == -1.0f);
    free(p);
    /* overflowing element counts */
    assert_null(as_malloc_large(SIZE_MAX / 2, 4));
}

static void test_large_reuse(void **state) {
    (void)state;
    size_t cap = 0, cap2 = 0;
    char *a = as_large_get((size_t)5 << 20, &cap);
    assert_non_null(a);
    assert_true(cap >= (size_t)5 << 20);
    a[0] = 1;
    a[cap - 1] = 2;
    as_large_put(a, cap);
    /* 4 MiB fits a 5 MiB buffer (at most twice the request): reused */
    char *b = as_large_get((size_t)4 << 20, &cap2);
    assert_non_null(b);
    if (as_large_reuses()) {
        assert_ptr_equal(b, a);
        assert_int_equal(cap2, cap);
    }
    as_large_put(b, cap2);
    /* 1 MiB would waste more than half of it: a new buffer */
    size_t cap3 = 0;
    char *c = as_large_get((size_t)1 << 20, &cap3);
    assert_non_null(c);
    assert_ptr_not_equal(c, b);
    assert_true(cap3 >= (size_t)1 << 20 && cap3 < cap2);
    /* larger than any cached one: a new buffer */
    size_t cap4 = 0;
    char *d = as_large_get((size_t)6 << 20, &cap4);
    assert_non_null(d);
    assert_ptr_not_equal(d, b);
    memset(d, 7, cap4);
    as_large_put(c, cap3);
    as_large_put(d, cap4);
    /* more releases than slots: the surplus is freed (ASan/LSan would report a leak) */
    char *e[AS_LARGE_CACHE_N + 2];
    size_t ce[AS_LARGE_CACHE_N + 2];
    for (int i = 0; i < AS_LARGE_CACHE_N + 2; i++) {
        e[i] = as_large_get((size_t)(i + 1) << 16, &ce[i]);
        assert_non_null(e[i]);
    }
    for (int i = 0; i < AS_LARGE_CACHE_N + 2; i++) as_large_put(e[i], ce[i]);
    as_large_put(NULL, 0); /* no-op */
    /* a buffer over the whole cache budget (a long dense capture) is still reused, alone:
     * only its first page is touched, so the test does not commit the memory */
    size_t big_n = AS_LARGE_CACHE_BYTES + ((size_t)8 << 20), cb = 0, cb2 = 0;
    char *big = as_large_get(big_n, &cb);
    assert_non_null(big);
    big[0] = 3;
    as_large_put(big, cb);
    char *big2 = as_large_get(big_n, &cb2);
    assert_non_null(big2);
    if (as_large_reuses()) {
        assert_ptr_equal(big2, big);
        assert_int_equal(cb2, cb);
    }
    as_large_put(big2, cb2);
    /* a small release afterwards evicts it (the budget holds again) and is kept */
    size_t cs = 0, cs2 = 0;
    char *sm = as_large_get((size_t)4 << 20, &cs);
    assert_non_null(sm);
    as_large_put(sm, cs);
    char *sm2 = as_large_get((size_t)4 << 20, &cs2);
    if (as_large_reuses()) assert_ptr_equal(sm2, sm);
    as_large_put(sm2, cs2);
}

/* as_utf8_clean: well-formed text unchanged; each maximal subpart of an ill-formed
 * sequence becomes one U+FFFD (the expected strings are Python's
 * bytes.decode("utf-8", "replace") of the same bytes). */
static void test_utf8_clean(void **state) {
    (void)state;
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"plain ascii", "plain ascii"},
        {"\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x8e\x89", "\xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x8e\x89"},
        {" \xf0\x9f", " \xef\xbf\xbd"},                              /* emoji cut after 2 bytes */
        {"\x8e", "\xef\xbf\xbd"},                                      /* lone continuation */
        {"\xe4\xbd", "\xef\xbf\xbd"},                                  /* CJK cut after 2 bytes */
        {"a\xe4\xbd" "b", "a\xef\xbf\xbd" "b"},
        {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},                      /* overlong: 2 subparts */
        {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},     /* surrogate */
        {"\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* > U+10FFFF */
        {"\xff\xfe", "\xef\xbf\xbd\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = as_utf8_clean(cases[i].in);
        assert_non_null(got);
        assert_string_equal(got, cases[i].want);
        free(got);
    }
    assert_null(as_utf8_clean(NULL));
    assert_int_equal(as_utf8_seq_len((const unsigned char *)"\xe4\xbd\xa0", 3), 3);
    assert_int_equal(as_utf8_seq_len((const unsigned char *)"\xe4\xbd\xa0", 2), 0); /* cut by n */
}

/* as_json_null_big_ints: integers beyond int64 outside strings become null (same
 * length); strings, floats and in-range integers are untouched. */
static void test_json_big_ints(void **state) {
    (void)state;
    char buf[] = "{\"model_max_length\": 1000000000000000019884624838656, \"a\": 9223372036854775807,"
                 " \"b\": -9223372036854775808, \"c\": 9223372036854775808, \"s\": \"12345678901234567890\\\"\","
                 " \"f\": 1e400, \"g\": 123456789012345678901.5, \"h\": [-99999999999999999999]}";
    size_t n = strlen(buf);
    assert_int_equal(as_json_null_big_ints(buf, n), 3);
    assert_int_equal(strlen(buf), n);
    assert_non_null(strstr(buf, "\"model_max_length\": null                           ,"));
    assert_non_null(strstr(buf, "\"a\": 9223372036854775807,"));
    assert_non_null(strstr(buf, "\"b\": -9223372036854775808,"));
    assert_non_null(strstr(buf, "\"c\": null               ,"));
    assert_non_null(strstr(buf, "\"12345678901234567890\\\"\""));
    assert_non_null(strstr(buf, "1e400"));
    assert_non_null(strstr(buf, "123456789012345678901.5"));
    assert_non_null(strstr(buf, "[null                 ]"));
}

static void test_fastmath(void **state) {
    (void)state;
    double e_exp = 0, e_erf = 0, e_tanh = 0, e_log = 0;
    for (int i = 0; i <= 400000; i++) {
        float x = -87.0f + 175.0f * (float)i / 400000.0f;
        double r = fabs((double)as_fast_expf(x) - exp((double)x)) / exp((double)x);
        if (r > e_exp) e_exp = r;
        float u = -6.0f + 12.0f * (float)i / 400000.0f;
        double a = fabs((double)as_fast_erff(u) - erf((double)u));
        if (a > e_erf) e_erf = a;
        a = fabs((double)as_fast_tanhf(u * 3) - tanh((double)u * 3));
        if (a > e_tanh) e_tanh = a;
        float p = ldexpf(1.0f + (float)(i % 1000) / 1000.0f, i / 1000 - 120); /* 2^-120 .. 2^280 */
        if (isfinite(p)) {
            double l = log2((double)p);
            r = fabs((double)as_fast_log2f(p) - l) / (fabs(l) > 1 ? fabs(l) : 1);
            if (r > e_log) e_log = r;
        }
    }
    print_message("max error: exp %.2e erf %.2e tanh %.2e log2 %.2e\n", e_exp, e_erf, e_tanh, e_log);
    assert_true(e_exp <= 4e-7);
    assert_true(e_erf <= 1e-6);
    assert_true(e_tanh <= 1e-6);
    assert_true(e_log <= 3e-7);
    assert_true(as_fast_expf(-87.4f) == 0.0f && as_fast_expf(-1e30f) == 0.0f && as_fast_expf(-INFINITY) == 0.0f);
    assert_true(fabs(as_fast_expf(88.3f) / exp((double)88.3f) - 1) < 4e-7);
    assert_true(as_fast_expf(INFINITY) == INFINITY); /* 2^128 overflows from 88.37 on */
    assert_true(as_fast_expf(0.0f) == 1.0f);
    volatile float nan = NAN; /* volatile: computed at run time, as in a forward on NaN weights */
    assert_true(isnan(as_fast_expf(nan)));
    assert_true(isnan(as_fast_expf(-nan)));
    assert_true(isnan(as_fast_erff(nan)));
    assert_true(isnan(as_fast_tanhf(nan)));
    assert_true(fabsf(as_fast_tanhf(INFINITY) - 1.0f) < 1e-6f && fabsf(as_fast_tanhf(-INFINITY) + 1.0f) < 1e-6f);
    assert_true(as_fast_erff(INFINITY) == 1.0f && as_fast_erff(-INFINITY) == -1.0f);
}

/* Messages quote hostile input: control characters never reach the one-line message. */
static void test_error_one_line(void **state) {
    (void)state;
    as_error err = {0};
    assert_int_equal(as_err_set(&err, AS_ERR_INPUT, "bad '%s'", "a\nb\rc\vd\fe\x1b[2Jf\tg\x7fh"), AS_ERR_INPUT);
    assert_string_equal(err.msg, "bad 'a b c d e [2Jf g h'");
    as_err_prefix(&err, "file\n%s", "x\vy");
    assert_string_equal(err.msg, "file x y: bad 'a b c d e [2Jf g h'");
    assert_int_equal(err.code, AS_ERR_INPUT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_one_line),
        cmocka_unit_test(test_fastmath),
        cmocka_unit_test(test_utf8_clean),
        cmocka_unit_test(test_json_big_ints),
        cmocka_unit_test(test_mul_size),
        cmocka_unit_test(test_malloc_large),
        cmocka_unit_test(test_large_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
