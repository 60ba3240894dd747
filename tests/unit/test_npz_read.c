/* test_npz_read.c — the validating .npz reader (src/io/npz_read.c) on archives written
 * by NumPy (tests/ref/gen_npz.py: numpy.savez STORED entries, numpy.savez_compressed
 * DEFLATED entries, a single unnamed array, a float64 array) and by the project's own
 * writer with ZIP64 fields forced; and rejection, with one line naming the file, of
 * truncated archives, bad CRCs, bad signatures and headers, impossible sizes and
 * offsets, unsupported methods, encryption, duplicate names, wrong dtype, a missing
 * array name, and a .npy dispatch by magic (npyz_read_f32).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "io/npz.h"
#include "io/npz_read.h"

#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/npz/"

static void test_numpy_stored(void **state) {
    (void)state;
    npy_array a;
    as_error err = {0};
    assert_int_equal(npz_read_f32(FIX "stored.npz", NULL, &a, &err), AS_OK);
    assert_int_equal(a.ndim, 4);
    assert_int_equal(a.shape[0], 1);
    assert_int_equal(a.shape[1], 2);
    assert_int_equal(a.shape[2], 3);
    assert_int_equal(a.shape[3], 4);
    for (size_t i = 0; i < 24; i++) assert_true(a.data[i] == (float)i / 8.0f - 1.0f);
    npy_array_free(&a);
    assert_int_equal(npz_read_f32(FIX "stored.npz", "other", &a, &err), AS_OK);
    assert_int_equal(a.n, 3);
    assert_true(a.data[0] == 1.0f && a.data[1] == 2.0f && a.data[2] == 3.0f);
    npy_array_free(&a);
    assert_int_equal(npz_read_f32(FIX "stored.npz", "missing", &a, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "stored.npz: no array named 'missing'"));
}

static void test_numpy_deflated(void **state) {
    (void)state;
    npy_array a;
    as_error err = {0};
    assert_int_equal(npyz_read_f32(FIX "deflated.npz", NULL, &a, &err), AS_OK);
    assert_int_equal(a.ndim, 4);
    assert_int_equal(a.n, 9600);
    assert_int_equal(a.shape[3], 40);
    for (size_t i = 0; i < a.n; i++) assert_true(a.data[i] == (float)((double)((i * 37) % 101) / 64.0));
    npy_array_free(&a);
    assert_int_equal(npz_read_f32(FIX "single.npz", NULL, &a, &err), AS_OK);
    assert_int_equal(a.n, 4);
    assert_true(a.data[3] == 0.5f);
    npy_array_free(&a);
    assert_int_equal(npz_read_f32(FIX "f64.npz", NULL, &a, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "f64.npz: attentions.npy: dtype '<f8' is not supported"));
}

/* the project's writer with ZIP64 sizes and offsets forced in every header */
static void test_zip64_and_npy_dispatch(void **state) {
    (void)state;
    char path[] = "/tmp/as_test_npzr_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    float d[6] = {1, 2, 3, 4, 5, 6};
    int64_t shape[2] = {2, 3};
    as_error err = {0};
    npz_writer *w;
    assert_int_equal(npz_open(path, &w, &err), AS_OK);
    npz_force_zip64(w, 1);
    assert_int_equal(npz_add(w, "first", NPY_F32, d, 2, shape, &err), AS_OK);
    assert_int_equal(npz_add(w, "attentions", NPY_F32, d + 3, 1, shape + 1, &err), AS_OK);
    assert_int_equal(npz_close(w, &err), AS_OK);
    npy_array a;
    assert_int_equal(npz_read_f32(path, NULL, &a, &err), AS_OK);
    assert_int_equal(a.n, 3);
    assert_true(a.data[0] == 4 && a.data[2] == 6);
    npy_array_free(&a);
    assert_int_equal(npz_read_f32(path, "first", &a, &err), AS_OK);
    assert_int_equal(a.n, 6);
    npy_array_free(&a);
    assert_int_equal(npy_write(path, NPY_F32, d, 2, shape, &err), AS_OK);
    assert_int_equal(npyz_read_f32(path, NULL, &a, &err), AS_OK);
    assert_int_equal(a.n, 6);
    npy_array_free(&a);
    unlink(path);
}

/* ---- malformed archives ------------------------------------------------------------- */

static uint8_t *load(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static uint8_t buf[65536];
    *n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    uint8_t *b = malloc(*n);
    assert_non_null(b);
    memcpy(b, buf, *n);
    return b;
}

static size_t find_sig(const uint8_t *b, size_t n, uint32_t sig, int nth) {
    for (size_t i = 0; i + 4 <= n; i++)
        if ((uint32_t)(b[i] | b[i + 1] << 8 | b[i + 2] << 16 | (uint32_t)b[i + 3] << 24) == sig && nth-- == 0) return i;
    fail();
    return 0;
}

static void put16(uint8_t *p, unsigned v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v) {
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}

/* Writes b[0..n) to a file and expects npz_read_f32 to fail with one line that names
 * the file and contains pat. */
static void expect_bad(const uint8_t *b, size_t n, const char *name, const char *pat) {
    char path[] = "/tmp/as_test_npzbad_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_true(write(fd, b, n) == (ssize_t)n);
    close(fd);
    npy_array a;
    as_error err = {0};
    as_status rc = npz_read_f32(path, name, &a, &err);
    npy_array_free(&a);
    unlink(path);
    char want[64];
    snprintf(want, sizeof want, "%s: ", path);
    if (rc != AS_ERR_INPUT || strncmp(err.msg, want, strlen(want)) || !strstr(err.msg, pat) || strchr(err.msg, '\n')) {
        fprintf(stderr, "rc %d, '%s' lacks '%s'\n", rc, err.msg, pat);
        fail();
    }
}

static void test_rejects(void **state) {
    (void)state;
    size_t n, m;
    uint8_t *s = load(FIX "stored.npz", &n), *c = load(FIX "deflated.npz", &m);
    uint8_t *b = malloc(n > m ? n : m);
    assert_non_null(b);
    size_t cen = find_sig(s, n, 0x02014b50u, 0), eocd = find_sig(s, n, 0x06054b50u, 0);
    /* truncations */
    expect_bad(s, 10, NULL, "too short for a ZIP end record");
    expect_bad(s, n / 2, NULL, "no ZIP end-of-central-directory record");
    expect_bad(s, n - 1, NULL, "truncated?");
    expect_bad(s + 1, n - 1, NULL, "runs past its end record");
    /* deflate stream cut short inside an otherwise consistent archive: drop the last bytes of the data */
    memcpy(b, c, m);
    size_t dcen = find_sig(c, m, 0x02014b50u, 0);
    b[dcen - 20] ^= 0xff;
    b[dcen - 21] ^= 0xff;
    expect_bad(b, m, NULL, "attentions.npy");
    /* CRC mismatch: one data byte of a stored entry flipped */
    memcpy(b, s, n);
    b[200] ^= 0x01;
    expect_bad(b, n, NULL, "CRC-32 mismatch");
    /* CRC field edited in both headers */
    memcpy(b, s, n);
    b[14] ^= 1;
    b[cen + 16] ^= 1;
    expect_bad(b, n, NULL, "CRC-32 mismatch");
    /* local and central CRC disagree */
    memcpy(b, s, n);
    b[cen + 16] ^= 1;
    expect_bad(b, n, NULL, "local header sizes or CRC differ");
    /* bad signatures */
    memcpy(b, s, n);
    b[0] = 'X';
    expect_bad(b, n, NULL, "bad local header signature");
    memcpy(b, s, n);
    b[cen] = 'X';
    expect_bad(b, n, NULL, "bad central directory signature");
    /* end record: comment length not matching the file end */
    memcpy(b, s, n);
    put16(b + eocd + 20, 5);
    expect_bad(b, n, NULL, "no ZIP end-of-central-directory record");
    /* central directory offset beyond the end record */
    memcpy(b, s, n);
    put32(b + eocd + 16, (uint32_t)n);
    expect_bad(b, n, NULL, "central directory");
    /* entry count larger than the directory holds */
    memcpy(b, s, n);
    put16(b + eocd + 8, 40);
    put16(b + eocd + 10, 40);
    expect_bad(b, n, NULL, "too small for 40 entries");
    /* multi-disk */
    memcpy(b, s, n);
    put16(b + eocd + 4, 1);
    expect_bad(b, n, NULL, "multi-disk");
    /* name length: zero, and running past the directory */
    memcpy(b, s, n);
    put16(b + cen + 28, 0);
    expect_bad(b, n, NULL, "name of 0 bytes");
    memcpy(b, s, n);
    put16(b + cen + 28, 900);
    expect_bad(b, n, NULL, "runs past the directory");
    /* local header names another file */
    memcpy(b, s, n);
    b[30] = 'X';
    expect_bad(b, n, NULL, "local header names another file");
    /* local header offset pointing into the directory */
    memcpy(b, s, n);
    put32(b + cen + 42, (uint32_t)cen);
    expect_bad(b, n, NULL, "local header outside the data area");
    /* stored entry whose sizes disagree, unknown method, encryption */
    memcpy(b, s, n);
    put32(b + cen + 20, 100);
    expect_bad(b, n, NULL, "compressed size 100");
    memcpy(b, s, n);
    put16(b + cen + 10, 12);
    expect_bad(b, n, NULL, "compression method 12");
    memcpy(b, s, n);
    put16(b + cen + 8, 1);
    expect_bad(b, n, NULL, "is encrypted");
    /* sizes larger than the data area (data would run into the directory) */
    memcpy(b, s, n);
    put32(b + cen + 20, 100000);
    put32(b + cen + 24, 100000);
    put32(b + 18, 100000);
    put32(b + 22, 100000);
    expect_bad(b, n, NULL, "run past the end of the data area");
    /* first entry renamed to the second's name ("other.npy", 5 bytes shorter: the rest
     * of the old name becomes a well-formed unknown extra block): duplicate */
    memcpy(b, s, n);
    memcpy(b + cen + 46, "other.npy\xfe\xca\x01\x00\x00", 14);
    put16(b + cen + 28, 9);
    put16(b + cen + 30, b[cen + 30] + 5);
    expect_bad(b, n, NULL, "appears twice");
    /* an array name the archive lacks (a bad .npy inside a valid archive is the f64
     * case above and tests/cli/test_import.sh's bad magic) */
    expect_bad(s, n, "nothere", "no array named 'nothere'");
    /* deflated: declared size smaller than the stream inflates to */
    memcpy(b, c, m);
    put32(b + dcen + 24, 100);
    put32(b + 22, 100);
    expect_bad(b, m, NULL, "inflates to more than its declared 100 bytes");
    free(b);
    free(s);
    free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numpy_stored),
        cmocka_unit_test(test_numpy_deflated),
        cmocka_unit_test(test_zip64_and_npy_dispatch),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
