/* test_core.c — core/core.c allocation helpers: overflow checks of as_mul_size and
 * as_malloc_array; as_malloc_large (small requests from malloc, large ones aligned
 * to 2 MiB, fully writable, released with free; overflow gives NULL); the
 * large-buffer reuse of as_large_get/as_large_put (a released buffer comes back for a
 * request between half and all of its capacity, not for a smaller or larger one; the
 * cache keeps at most AS_LARGE_CACHE_N buffers; ASan builds never reuse). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "core/core.h"

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
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mul_size),
        cmocka_unit_test(test_malloc_large),
        cmocka_unit_test(test_large_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
