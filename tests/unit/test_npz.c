/* test_npz.c — unit tests for src/io/npz.c: writes .npz archives (plain and with
 * forced ZIP64 fields) and .npy files, then reads them back in C (ZIP local headers,
 * CRC-32 with an independent bitwise implementation, central directory, end records,
 * .npy header text and values) and, when Debian's python3 with numpy is present, with
 * numpy.load. It does not test archives over 4 GiB (ZIP64 is forced instead).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/npz.h"

#define PY "/usr/bin/python3"

static char g_dir[64];

/* ---- reading helpers ------------------------------------------------------------- */

static uint32_t crc32_bitwise(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

/* Checks a .npy image: magic, version 1.0, 64-byte aligned header equal to
 * "dict" + spaces + '\n', then data equal to expect (nbytes). */
static void check_npy(const uint8_t *p, size_t len, const char *dict, const void *expect,
                      size_t nbytes) {
    assert_true(len >= 10);
    assert_memory_equal(p, "\x93NUMPY\x01\x00", 8);
    size_t hl = rd16(p + 8);
    assert_int_equal((10 + hl) % 64, 0);
    assert_true(10 + hl + nbytes == len);
    size_t dl = strlen(dict);
    assert_memory_equal(p + 10, dict, dl);
    for (size_t i = 10 + dl; i < 10 + hl - 1; i++) assert_int_equal(p[i], ' ');
    assert_int_equal(p[10 + hl - 1], '\n');
    if (nbytes) assert_memory_equal(p + 10 + hl, expect, nbytes);
}

typedef struct {
    const char *name; /* entry name, with .npy */
    const char *dict;
    const void *data;
    size_t nbytes;
} expect_entry;

/* Parses the whole archive: local entries in order, central directory, end records. */
static void check_zip(const char *path, const expect_entry *ex, int n, int zip64) {
    size_t len;
    uint8_t *b = slurp(path, &len);
    size_t pos = 0;
    uint64_t offsets[16];
    uint32_t crcs[16];
    for (int i = 0; i < n; i++) {
        const uint8_t *h = b + pos;
        offsets[i] = pos;
        assert_true(pos + 30 <= len);
        assert_int_equal(rd32(h), 0x04034b50);
        assert_int_equal(rd16(h + 4), zip64 ? 45 : 20);
        assert_int_equal(rd16(h + 8), 0); /* stored */
        uint32_t crc = rd32(h + 14);
        uint64_t csize = rd32(h + 18), usize = rd32(h + 22);
        size_t nl = rd16(h + 26), xl = rd16(h + 28);
        assert_int_equal(nl, strlen(ex[i].name));
        assert_memory_equal(h + 30, ex[i].name, nl);
        if (zip64) {
            assert_int_equal(csize, 0xFFFFFFFFu);
            assert_int_equal(usize, 0xFFFFFFFFu);
            assert_int_equal(xl, 20);
            assert_int_equal(rd16(h + 30 + nl), 1);
            assert_int_equal(rd16(h + 32 + nl), 16);
            usize = rd64(h + 34 + nl);
            csize = rd64(h + 42 + nl);
        } else {
            assert_int_equal(xl, 0);
        }
        assert_int_equal(csize, usize);
        const uint8_t *data = h + 30 + nl + xl;
        assert_true(data + csize <= b + len);
        assert_int_equal(crc32_bitwise(data, (size_t)csize), crc);
        crcs[i] = crc;
        check_npy(data, (size_t)csize, ex[i].dict, ex[i].data, ex[i].nbytes);
        pos = (size_t)(data - b) + (size_t)csize;
    }
    /* end of central directory record, then the directory itself */
    const uint8_t *e = b + len - 22;
    assert_int_equal(rd32(e), 0x06054b50);
    assert_int_equal(rd16(e + 8), (uint32_t)n);
    assert_int_equal(rd16(e + 10), (uint32_t)n);
    uint64_t cd_size = rd32(e + 12), cd_off = rd32(e + 16);
    if (zip64) {
        assert_int_equal(cd_size, 0xFFFFFFFFu);
        assert_int_equal(cd_off, 0xFFFFFFFFu);
        const uint8_t *loc = e - 20;
        assert_int_equal(rd32(loc), 0x07064b50);
        uint64_t z = rd64(loc + 8);
        assert_int_equal(z, (uint64_t)(loc - 56 - b));
        const uint8_t *r = b + z;
        assert_int_equal(rd32(r), 0x06064b50);
        assert_int_equal(rd64(r + 4), 44);
        assert_int_equal(rd64(r + 24), (uint64_t)n);
        assert_int_equal(rd64(r + 32), (uint64_t)n);
        cd_size = rd64(r + 40);
        cd_off = rd64(r + 48);
        assert_int_equal(cd_off + cd_size, z);
    } else {
        assert_int_equal(cd_off + cd_size, len - 22);
    }
    assert_int_equal(cd_off, pos);
    const uint8_t *c = b + cd_off;
    for (int i = 0; i < n; i++) {
        assert_int_equal(rd32(c), 0x02014b50);
        assert_int_equal(rd32(c + 16), crcs[i]);
        size_t nl = rd16(c + 28), xl = rd16(c + 30), cl = rd16(c + 32);
        assert_memory_equal(c + 46, ex[i].name, nl);
        uint64_t off = rd32(c + 42);
        if (zip64) {
            assert_int_equal(xl, 28);
            assert_int_equal(off, 0xFFFFFFFFu);
            off = rd64(c + 46 + nl + 4 + 16);
        }
        assert_int_equal(off, offsets[i]);
        c += 46 + nl + xl + cl;
    }
    assert_int_equal((uint64_t)(c - b), cd_off + cd_size);
    free(b);
}

static int have_numpy(void) {
    if (access(PY, X_OK) != 0) return 0;
    int rc = system(PY " -c 'import numpy' >/dev/null 2>&1");
    return rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0;
}

/* Runs python code (single-quote free) with numpy; asserts exit status 0. */
static void run_python(const char *code) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, PY " -c '%s'", code);
    int rc = system(cmd);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) print_error("python failed: %s\n", code);
    assert_true(rc != -1 && WIFEXITED(rc));
    assert_int_equal(WEXITSTATUS(rc), 0);
}

/* ---- fixtures ------------------------------------------------------------------------ */

static const float g_f32[6] = {0.5f, -1.25f, 3.0f, 1e-7f, -0.0f, 123456.0f};
static const int32_t g_i32[4] = {-2147483647 - 1, -1, 0, 2147483647};
static uint16_t g_f16[1];
static const float g_scalar = 2.5f;
static float *g_big; /* (1000, 37) */

#define BIG_N 37000

static as_status write_archive(const char *path, int zip64, as_error *err) {
    npz_writer *w = NULL;
    as_status rc = npz_open(path, &w, err);
    if (rc != AS_OK) return rc;
    npz_force_zip64(w, zip64);
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s1[1] = {1}, sb[2] = {1000, 37};
    if ((rc = npz_add(w, "scores", NPY_F32, g_f32, 2, s23, err)) ||
        (rc = npz_add(w, "ids", NPY_I32, g_i32, 1, s4, err)) ||
        (rc = npz_add(w, "h", NPY_F16, g_f16, 1, s1, err)) ||
        (rc = npz_add(w, "s", NPY_F32, &g_scalar, 0, NULL, err)) ||
        (rc = npz_add(w, "big", NPY_F32, g_big, 2, sb, err))) {
        npz_abort(w);
        return rc;
    }
    return npz_close(w, err);
}

static void check_archive(const char *path, int zip64) {
    expect_entry ex[5] = {
        {"scores.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", g_f32, 24},
        {"ids.npy", "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", g_i32, 16},
        {"h.npy", "{'descr': '<f2', 'fortran_order': False, 'shape': (1,), }", g_f16, 2},
        {"s.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", &g_scalar, 4},
        {"big.npy", "{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 37), }", g_big,
         BIG_N * 4},
    };
    check_zip(path, ex, 5, zip64);
}

static void python_check_archive(const char *path) {
    if (!have_numpy()) /* make deps installs python3-numpy; tests/check_deps.py checks it */
        fail_msg("numpy.load check: " PY " with numpy not available (make deps installs python3-numpy)");
    char code[3000];
    snprintf(code, sizeof code,
             "import numpy as np\n"
             "d = np.load(\"%s\")\n"
             "assert sorted(d.files) == [\"big\", \"h\", \"ids\", \"s\", \"scores\"], d.files\n"
             "s = d[\"scores\"]\n"
             "assert s.dtype == np.float32 and s.shape == (2, 3)\n"
             "exp = np.array([[0.5, -1.25, 3.0], [1e-7, -0.0, 123456.0]], np.float32)\n"
             "assert (s == exp).all() and np.signbit(s[1, 1])\n"
             "i = d[\"ids\"]\n"
             "assert i.dtype == np.int32 and i.tolist() == [-2147483648, -1, 0, 2147483647]\n"
             "h = d[\"h\"]\n"
             "assert h.dtype == np.float16 and h.shape == (1,) and h[0] == np.float16(-3.5)\n"
             "assert d[\"s\"].shape == () and d[\"s\"] == 2.5\n"
             "b = d[\"big\"]\n"
             "assert b.shape == (1000, 37)\n"
             "assert (b.ravel() == (np.arange(37000, dtype=np.float32) * np.float32(0.25) - "
             "np.float32(100))).all()\n",
             path);
    run_python(code);
}

/* ---- tests --------------------------------------------------------------------------- */

static void test_npz_roundtrip(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/a.npz", g_dir);
    as_error err = {0};
    assert_int_equal(write_archive(path, 0, &err), AS_OK);
    check_archive(path, 0);
    python_check_archive(path);
}

static void test_npz_zip64(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/z64.npz", g_dir);
    as_error err = {0};
    assert_int_equal(write_archive(path, 1, &err), AS_OK);
    check_archive(path, 1);
    python_check_archive(path);
}

static void test_npy_write(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/one.npy", g_dir);
    as_error err = {0};
    int64_t shape[3] = {1, 2, 3};
    assert_int_equal(npy_write(path, NPY_F32, g_f32, 3, shape, &err), AS_OK);
    size_t len;
    uint8_t *b = slurp(path, &len);
    check_npy(b, len, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 3), }", g_f32, 24);
    free(b);
    int64_t empty[2] = {0, 5};
    snprintf(path, sizeof path, "%s/empty.npy", g_dir);
    assert_int_equal(npy_write(path, NPY_I32, NULL, 2, empty, &err), AS_OK);
    b = slurp(path, &len);
    check_npy(b, len, "{'descr': '<i4', 'fortran_order': False, 'shape': (0, 5), }", NULL, 0);
    free(b);
    if (have_numpy()) {
        char code[1024];
        snprintf(code, sizeof code,
                 "import numpy as np\n"
                 "a = np.load(\"%s/one.npy\")\n"
                 "assert a.shape == (1, 2, 3) and a.dtype == np.float32 and a[0, 1, 2] == 123456.0\n"
                 "e = np.load(\"%s/empty.npy\")\n"
                 "assert e.shape == (0, 5) and e.dtype == np.int32\n",
                 g_dir, g_dir);
        run_python(code);
    } else {
        fail_msg("numpy.load check: " PY " with numpy not available (make deps installs python3-numpy)");
    }
    assert_int_equal(npy_write("/nonexistent-dir/x.npy", NPY_F32, g_f32, 1, shape, &err),
                     AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.npy"));
    int64_t neg[1] = {-1};
    assert_int_equal(npy_write(path, NPY_F32, g_f32, 1, neg, &err), AS_ERR_INPUT);
}

/* Unicode string arrays: '<U{max code points}', UTF-32LE, invalid UTF-8 -> U+FFFD. */
static void test_npz_strings(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/str.npz", g_dir);
    as_error err = {0};
    npz_writer *w = NULL;
    assert_int_equal(npz_open(path, &w, &err), AS_OK);
    const char *strs[4] = {"[CLS]", "caf\xc3\xa9", NULL, "a\xff" "b"};
    assert_int_equal(npz_add_strings(w, "tokens", strs, 4, &err), AS_OK);
    assert_int_equal(npz_close(w, &err), AS_OK);
    /* 4 strings of width 5 (the longest, "[CLS]"): 4 * 5 * 4 bytes of UTF-32 */
    static const uint32_t want[20] = {'[', 'C', 'L', 'S', ']', 'c', 'a', 'f', 0xe9, 0, 0, 0, 0, 0, 0,
                                      'a', 0xfffd, 'b', 0, 0};
    expect_entry ex[1] = {
        {"tokens.npy", "{'descr': '<U5', 'fortran_order': False, 'shape': (4,), }", want, sizeof want}};
    check_zip(path, ex, 1, 0);
    if (have_numpy()) {
        char code[600];
        snprintf(code, sizeof code,
                 "import numpy as np\n"
                 "t = np.load(\"%s\")[\"tokens\"]\n"
                 "assert t.tolist() == [\"[CLS]\", \"caf\\u00e9\", \"\", \"a\\ufffdb\"], t.tolist()\n",
                 path);
        run_python(code);
    }
}

static void test_npz_name_errors(void **state) {
    (void)state;
    char path[128], longname[202];
    snprintf(path, sizeof path, "%s/names.npz", g_dir);
    memset(longname, 'x', 201);
    longname[201] = 0;
    npz_writer *w = NULL;
    as_error err = {0};
    int64_t s1[1] = {1};
    assert_int_equal(npz_open(path, &w, &err), AS_OK);
    assert_int_equal(npz_add(w, "", NPY_F32, g_f32, 1, s1, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "name"));
    assert_int_equal(npz_add(w, "a/b", NPY_F32, g_f32, 1, s1, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "a/b"));
    assert_int_equal(npz_add(w, longname, NPY_F32, g_f32, 1, s1, &err), AS_ERR_INPUT);
    longname[200] = 0; /* exactly 200 is allowed */
    assert_int_equal(npz_add(w, longname, NPY_F32, g_f32, 1, s1, &err), AS_OK);
    assert_int_equal(npz_add(w, longname, NPY_F32, g_f32, 1, s1, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "repeated"));
    for (int i = 1; i < NPZ_MAX_ARRAYS; i++) {
        char nm[16];
        snprintf(nm, sizeof nm, "a%d", i);
        assert_int_equal(npz_add(w, nm, NPY_F32, g_f32, 1, s1, &err), AS_OK);
    }
    assert_int_equal(npz_add(w, "one_too_many", NPY_F32, g_f32, 1, s1, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "arrays"));
    assert_int_equal(npz_close(w, &err), AS_OK);
    if (have_numpy()) {
        char code[512];
        snprintf(code, sizeof code,
                 "import numpy as np\n"
                 "d = np.load(\"%s\")\n"
                 "assert len(d.files) == %d and d[\"a63\"][0] == 0.5\n",
                 path, NPZ_MAX_ARRAYS);
        run_python(code);
    }
    assert_int_equal(npz_open("/nonexistent-dir/x.npz", &w, &err), AS_ERR_INPUT);
    assert_null(w);
    npz_abort(NULL);
}

static int setup(void **state) {
    (void)state;
    g_f16[0] = as_f32_to_f16(-3.5f);
    g_big = malloc(BIG_N * sizeof(float));
    if (!g_big) return -1;
    for (int i = 0; i < BIG_N; i++) g_big[i] = (float)i * 0.25f - 100.0f;
    snprintf(g_dir, sizeof g_dir, "/tmp/as_test_npz_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    free(g_big);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_npz_roundtrip),
        cmocka_unit_test(test_npz_zip64),
        cmocka_unit_test(test_npy_write),
        cmocka_unit_test(test_npz_name_errors),
        cmocka_unit_test(test_npz_strings),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
