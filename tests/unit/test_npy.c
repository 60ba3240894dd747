/* test_npy.c — the validating float32 .npy reader (src/io/npy.c): round trip with the
 * project's npy writer, a version 2.0 header, a 0-d array, and rejection (AS_ERR_INPUT
 * naming the file) of a bad magic, an unsupported version, another dtype, Fortran
 * order, a missing / unknown / repeated key, a data size that does not match the shape
 * (short and long), a header longer than the file, and a header without its newline.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io/npy.h"
#include "io/npz.h"

/* Builds a v1.0 .npy image with header dict `dict` and nbytes of data into buf. */
static size_t image(uint8_t *buf, const char *dict, size_t nbytes, int version) {
    size_t dl = strlen(dict), off = version == 1 ? 10 : 12;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)version;
    buf[7] = 0;
    size_t hl = dl + 1;
    buf[8] = (uint8_t)hl;
    buf[9] = (uint8_t)(hl >> 8);
    if (version != 1) buf[10] = buf[11] = 0;
    memcpy(buf + off, dict, dl);
    buf[off + dl] = '\n';
    for (size_t i = 0; i < nbytes; i++) buf[off + hl + i] = (uint8_t)(i * 7);
    return off + hl + nbytes;
}

static void test_roundtrip(void **state) {
    (void)state;
    char path[] = "/tmp/as_test_npy_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    float d[2 * 3] = {0.5f, -1, 2, 3.25f, 1e-8f, 7};
    int64_t shape[2] = {2, 3};
    as_error err = {0};
    assert_int_equal(npy_write(path, NPY_F32, d, 2, shape, &err), AS_OK);
    npy_array a;
    assert_int_equal(npy_read_f32(path, &a, &err), AS_OK);
    assert_int_equal(a.ndim, 2);
    assert_int_equal(a.shape[0], 2);
    assert_int_equal(a.shape[1], 3);
    assert_int_equal(a.n, 6);
    assert_memory_equal(a.data, d, sizeof d);
    npy_array_free(&a);
    unlink(path);
    uint8_t buf[512];
    size_t n = image(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, 2);
    assert_int_equal(npy_parse_f32("v2.npy", buf, n, &a, &err), AS_OK);
    assert_int_equal(a.n, 2);
    npy_array_free(&a);
    n = image(buf, "{\"shape\": (), \"descr\": \"<f4\", \"fortran_order\": False}", 4, 1);
    assert_int_equal(npy_parse_f32("0d.npy", buf, n, &a, &err), AS_OK);
    assert_int_equal(a.ndim, 0);
    assert_int_equal(a.n, 1);
    npy_array_free(&a);
}

static void bad(const uint8_t *buf, size_t n, const char *pat) {
    npy_array a;
    as_error err = {0};
    assert_int_equal(npy_parse_f32("x.npy", buf, n, &a, &err), AS_ERR_INPUT);
    npy_array_free(&a);
    if (!strstr(err.msg, pat) || strncmp(err.msg, "x.npy: ", 7)) {
        fprintf(stderr, "'%s' lacks '%s'\n", err.msg, pat);
        fail();
    }
}

static void test_rejects(void **state) {
    (void)state;
    uint8_t buf[512];
    size_t n = image(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 16, 1);
    buf[1] = 'X';
    bad(buf, n, "bad magic");
    n = image(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 16, 4);
    bad(buf, n, "version 4.0");
    n = image(buf, "{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", 16, 1);
    bad(buf, n, "dtype '<f8'");
    n = image(buf, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", 8, 1);
    bad(buf, n, "dtype '>f4'");
    n = image(buf, "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", 8, 1);
    bad(buf, n, "Fortran");
    n = image(buf, "{'descr': '<f4', 'shape': (2,), }", 8, 1);
    bad(buf, n, "lacks 'fortran_order'");
    n = image(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", 8, 1);
    bad(buf, n, "unexpected key 'x'");
    n = image(buf, "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8, 1);
    bad(buf, n, "repeated key 'descr'");
    n = image(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, 1);
    bad(buf, n, "needs 24");
    n = image(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28, 1);
    bad(buf, n, "needs 24");
    n = image(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999, 99999999, 99999999), }", 0, 1);
    bad(buf, n, "more than");
    n = image(buf, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 8, 1);
    bad(buf, 40, "past the end");
    buf[10 + (size_t)buf[8] - 1] = ' ';
    bad(buf, n, "newline");
    bad(buf, 5, "bad magic");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
