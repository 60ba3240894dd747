/* test_core.c — core/core.c allocation helpers: overflow checks of as_mul_size and
 * as_malloc_array, and as_malloc_large (small requests from malloc, large ones aligned
 * to 2 MiB, fully writable, released with free; overflow gives NULL). */
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mul_size),
        cmocka_unit_test(test_malloc_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
