/* test_sha256.c — analysis/sha256.c (Nettle underneath) on the FIPS 180-2 appendix B
 * vectors ("abc", the 448-bit message, one million 'a') fed in uneven pieces, and on
 * 10,000 random messages of every length up to 300 bytes, which must hash the same
 * whether fed whole or one byte at a time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "analysis/sha256.h"

static void digest(const void *p, size_t n, size_t piece, char hex[65]) {
    sha256_ctx c;
    sha256_init(&c);
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i += piece) sha256_update(&c, b + i, n - i < piece ? n - i : piece);
    sha256_final_hex(&c, hex);
}

static void vectors(void) {
    char h[65];
    digest("abc", 3, 3, h);
    assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    digest(m2, strlen(m2), 7, h);
    assert_string_equal(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    static uint8_t a[1000000];
    memset(a, 'a', sizeof a);
    digest(a, sizeof a, 4093, h);
    assert_string_equal(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    digest("", 0, 1, h);
    assert_string_equal(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

static void test_fips(void **state) {
    (void)state;
    vectors();
}

static void test_pieces_agree(void **state) {
    (void)state;
    uint8_t buf[300];
    uint32_t s = 12345;
    for (int it = 0; it < 10000; it++) {
        size_t n = (size_t)(it % 301);
        for (size_t i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            buf[i] = (uint8_t)(s >> 24);
        }
        char h1[65], h2[65];
        digest(buf, n, 300, h1);
        digest(buf, n, 1, h2);
        assert_string_equal(h1, h2);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fips),
        cmocka_unit_test(test_pieces_agree),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
