/* test_npz_read.c — the validating .npz reader (src/io/npz_read.c) on archives written
 * by NumPy (tests/ref/gen_npz.py: numpy.savez STORED entries, numpy.savez_compressed
 * DEFLATED entries, a single unnamed array, a float64 array) and by the project's own
 * writer with ZIP64 fields forced; and rejection, with one line naming the file, of
 * truncated archives, bad CRCs, bad signatures and headers, impossible sizes and
 * offsets, unsupported methods, encryption, duplicate names, wrong dtype, a missing
 * array name, and a .npy dispatch by magic (npyz_read_f32); crafted deflated entries
 * whose declared size disagrees with the stream, the .npy header or the compression
 * ratio limit (refused before the array is allocated: peak RSS is checked); empty and
 * non-ZIP files named as such.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <zlib.h>

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
    /* deflated: declared size smaller than the stream inflates to, and too small for
     * the .npy header inside: refused from the header, before the data are inflated */
    memcpy(b, c, m);
    put32(b + dcen + 24, 100);
    put32(b + 22, 100);
    expect_bad(b, m, NULL, "attentions.npy: .npy header runs past the end of the file");
    free(b);
    free(s);
    free(c);
}

/* ---- crafted deflated archives: declared sizes against the stream ---------------- */

/* A .npy header (v1.0, padded to 128 bytes) for float32 data of the given 1-d length. */
static size_t npy_hdr(uint8_t *out, long long n) {
    char d[119];
    int k = snprintf(d, sizeof d, "{'descr': '<f4', 'fortran_order': False, 'shape': (%lld,), }", n);
    assert_true(k > 0 && k < 117);
    memset(d + k, ' ', 118 - (size_t)k);
    d[117] = '\n';
    memcpy(out, "\x93NUMPY\x01\x00\x76\x00", 10);
    memcpy(out + 10, d, 118);
    return 128;
}

/* Writes a one-entry archive "attentions.npy" whose data is payload followed by zeros
 * zero bytes, deflated (level 0 when raw, so that random bytes keep their size; the
 * zeros are fed 1 MiB at a time), and whose headers declare usize uncompressed bytes
 * with the data's CRC-32; returns the file path (static). */
static const char *write_deflated(const uint8_t *payload, size_t plen, size_t zeros, uint64_t usize, int raw) {
    static char path[64];
    static uint8_t zbuf[1 << 20];
    snprintf(path, sizeof path, "/tmp/as_test_npzdef_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(deflateInit2(&z, raw ? 0 : 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, (uLong)plen) + zeros / 100 + 4096;
    uint8_t *cd = malloc(cap);
    assert_non_null(cd);
    uint32_t crc = (uint32_t)crc32_z(0L, payload, plen);
    z.next_in = (Bytef *)payload;
    z.avail_in = (uInt)plen;
    z.next_out = cd;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, zeros ? Z_NO_FLUSH : Z_FINISH), zeros ? Z_OK : Z_STREAM_END);
    for (size_t left = zeros; left;) {
        size_t k = left < sizeof zbuf ? left : sizeof zbuf;
        crc = (uint32_t)crc32_z(crc, zbuf, k);
        z.next_in = zbuf;
        z.avail_in = (uInt)k;
        left -= k;
        assert_int_equal(deflate(&z, left ? Z_NO_FLUSH : Z_FINISH), left ? Z_OK : Z_STREAM_END);
    }
    size_t clen = cap - z.avail_out;
    deflateEnd(&z);
    const char *nm = "attentions.npy";
    uint8_t loc[30 + 14], cen[46 + 14], end[22];
    memset(loc, 0, sizeof loc);
    memset(cen, 0, sizeof cen);
    memset(end, 0, sizeof end);
    put32(loc, 0x04034b50u);
    put16(loc + 4, 20);
    put16(loc + 8, 8);
    put32(loc + 14, crc);
    put32(loc + 18, (uint32_t)clen);
    put32(loc + 22, (uint32_t)usize);
    put16(loc + 26, 14);
    memcpy(loc + 30, nm, 14);
    put32(cen, 0x02014b50u);
    put16(cen + 4, 20);
    put16(cen + 6, 20);
    put16(cen + 10, 8);
    put32(cen + 16, crc);
    put32(cen + 20, (uint32_t)clen);
    put32(cen + 24, (uint32_t)usize);
    put16(cen + 28, 14);
    memcpy(cen + 46, nm, 14);
    put32(end, 0x06054b50u);
    put16(end + 8, 1);
    put16(end + 10, 1);
    put32(end + 12, sizeof cen);
    put32(end + 16, (uint32_t)(sizeof loc + clen));
    assert_true(write(fd, loc, sizeof loc) == (ssize_t)sizeof loc);
    assert_true(write(fd, cd, clen) == (ssize_t)clen);
    assert_true(write(fd, cen, sizeof cen) == (ssize_t)sizeof cen);
    assert_true(write(fd, end, sizeof end) == (ssize_t)sizeof end);
    close(fd);
    free(cd);
    return path;
}

static long max_rss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Reads path with npz_read_f32 (or the shape only: shape_only 1, and 2 to keep the
 * file) and expects an AS_ERR_INPUT message containing pat; removes path. */
static void expect_read_fails(const char *path, int shape_only, const char *pat) {
    npy_array a;
    as_error err = {0};
    as_status rc = shape_only ? npyz_read_shape(path, NULL, &a, &err) : npz_read_f32(path, NULL, &a, &err);
    npy_array_free(&a);
    if (shape_only != 2) unlink(path);
    if (rc != AS_ERR_INPUT || !strstr(err.msg, pat) || strchr(err.msg, '\n')) {
        fprintf(stderr, "rc %d, '%s' lacks '%s'\n", rc, err.msg, pat);
        fail();
    }
}

static void test_declared_sizes(void **state) {
    (void)state;
    uint8_t *p = malloc((size_t)5 << 20);
    assert_non_null(p);
    size_t h;
    /* a consistent archive: the shape is read without the data, then the data */
    h = npy_hdr(p, 16);
    for (int i = 0; i < 16; i++) ((float *)(p + h))[i] = (float)i;
    const char *f = write_deflated(p, h + 64, 0, h + 64, 0);
    npy_array a;
    as_error err = {0};
    assert_int_equal(npyz_read_shape(f, NULL, &a, &err), AS_OK);
    assert_int_equal(a.ndim, 1);
    assert_int_equal(a.shape[0], 16);
    assert_null(a.data);
    assert_int_equal(npyz_read_f32(f, NULL, &a, &err), AS_OK);
    assert_true(a.n == 16 && a.data[15] == 15.0f);
    npy_array_free(&a);
    unlink(f);
    /* the stream holds 8 bytes more than the (consistent) declared size */
    memset(p + h + 64, 0x55, 8);
    expect_read_fails(write_deflated(p, h + 72, 0, h + 64, 0), 0, "inflates to more than its declared 192 bytes");
    /* the stream ends 4 bytes before the declared size */
    expect_read_fails(write_deflated(p, h + 60, 0, h + 64, 0), 0, "inflates to 188 bytes, not the declared 192");
    /* declared size and the header's shape disagree: refused from the header */
    expect_read_fails(write_deflated(p, h + 72, 0, h + 72, 0), 1, ".npy data is 72 bytes but the shape needs 64");
    /* 256 MiB of zeros deflated to about 256 KiB (ratio about 1000:1; level 1 would give 229:1), the .npy header
     * consistent with it: the compression ratio is refused, by the shape reader and
     * the full reader alike, before anything is inflated or allocated */
    h = npy_hdr(p, (long long)1 << 26);
    const uint64_t big = h + ((uint64_t)1 << 28);
    const char *bomb = write_deflated(p, h, (size_t)1 << 28, big, 0);
    long rss0 = max_rss_kib();
    expect_read_fails(bomb, 2, "over the compression ratio limit of 128:1");
    expect_read_fails(bomb, 0, "over the compression ratio limit of 128:1");
    h = npy_hdr(p, (long long)1 << 27);
    /* within the ratio (4 MiB of stream for 512 MiB declared) but the stream ends early:
     * the array is inflated in place, so memory grows by what the stream holds */
    for (size_t i = h; i < ((size_t)4 << 20) + 4096; i++) p[i] = (uint8_t)(i * 2654435761u >> 13);
    expect_read_fails(write_deflated(p, ((size_t)4 << 20) + 4096, 0, h + ((uint64_t)1 << 29), 1), 0,
                      "not the declared 536871040");
    long grown = max_rss_kib() - rss0;
    fprintf(stderr, "peak RSS growth over the hostile archives: %ld KiB\n", grown);
    assert_true(grown < 200 * 1024);
    free(p);
}

/* An empty file and a file of text are named as what they are, not as bad .npy files;
 * an empty ZIP archive as an archive without arrays. */
static void test_not_an_archive(void **state) {
    (void)state;
    char path[64];
    snprintf(path, sizeof path, "/tmp/as_test_npznot_%d.npz", (int)getpid());
    FILE *w = fopen(path, "wb");
    assert_non_null(w);
    fclose(w);
    npy_array a;
    as_error err = {0};
    assert_int_equal(npyz_read_f32(path, NULL, &a, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "empty file (0 bytes): not a .npz archive"));
    w = fopen(path, "wb");
    fputs("hello, this is text\n", w);
    fclose(w);
    assert_int_equal(npyz_read_f32(path, NULL, &a, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "not a .npz (ZIP) archive"));
    assert_null(strstr(err.msg, "not a .npy"));
    static const uint8_t empty_zip[22] = {0x50, 0x4b, 0x05, 0x06};
    w = fopen(path, "wb");
    fwrite(empty_zip, 1, sizeof empty_zip, w);
    fclose(w);
    assert_int_equal(npyz_read_f32(path, NULL, &a, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "the archive holds no arrays"));
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numpy_stored),
        cmocka_unit_test(test_numpy_deflated),
        cmocka_unit_test(test_zip64_and_npy_dispatch),
        cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_declared_sizes),
        cmocka_unit_test(test_not_an_archive),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
