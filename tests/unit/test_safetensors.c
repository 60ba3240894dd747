/* test_safetensors.c — unit tests for src/io/safetensors.c: write/read round trips for
 * every dtype, sharded folders, one test per kind of corrupt header (checking the
 * status and a word of the message), and a fuzz loop of random header truncations and
 * byte flips that must never crash (run it under ASan).
 * It does not load real models (the model tests do).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/safetensors.h"

static char g_dir[64];

static void tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", g_dir, name);
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Writes a file with the given header text (length prefix = strlen(json) unless
 * hlen_override != 0) followed by data_len bytes of data. */
static void write_raw(const char *path, const char *json, uint64_t hlen_override, size_t data_len) {
    size_t jl = strlen(json);
    size_t total = 8 + jl + data_len;
    uint8_t *buf = calloc(1, total);
    assert_non_null(buf);
    uint64_t h = hlen_override ? hlen_override : jl;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(h >> (8 * i));
    memcpy(buf + 8, json, jl);
    for (size_t i = 0; i < data_len; i++) buf[8 + jl + i] = (uint8_t)i;
    write_bytes(path, buf, total);
    free(buf);
}

/* Opens path expecting AS_ERR_INPUT with word in the message. */
static void expect_input_error(const char *path, const char *word) {
    st_file *f = NULL;
    as_error err = {0};
    as_status rc = st_file_open(path, &f, &err);
    if (rc != AS_ERR_INPUT || !strstr(err.msg, word))
        print_error("expected '%s' in: %s (rc %d)\n", word, err.msg, (int)rc);
    assert_int_equal(rc, AS_ERR_INPUT);
    assert_null(f);
    assert_non_null(strstr(err.msg, word));
    assert_non_null(strstr(err.msg, path)); /* names the file */
    assert_null(strchr(err.msg, '\n'));
}

static void expect_header_error(const char *json, size_t data_len, const char *word) {
    char path[128];
    tmp_path(path, sizeof path, "bad.safetensors");
    write_raw(path, json, 0, data_len);
    expect_input_error(path, word);
}

/* ---- round trips ----------------------------------------------------------------- */

static void test_roundtrip_all_dtypes(void **state) {
    (void)state;
    float f32[6] = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, -7.0f};
    float halves[4] = {1.5f, -2.25f, 0.0f, 65504.0f};
    uint16_t f16[4], bf16[4];
    for (int i = 0; i < 4; i++) {
        f16[i] = as_f32_to_f16(halves[i]);
        bf16[i] = as_f32_to_bf16(halves[i]);
    }
    int64_t i64[3] = {-1, 0, (int64_t)1 << 40};
    int32_t i32[2] = {-123456, 789};
    uint8_t u8[5] = {0, 1, 2, 254, 255};
    double f64[2] = {3.141592653589793, -1e300};
    uint8_t boolv[3] = {1, 0, 1};
    uint8_t f8[2] = {0x38, 0xc0};
    float scalar = 42.0f;
    st_tensor ts[10];
    memset(ts, 0, sizeof ts);
    ts[0] = (st_tensor){.name = "enc.w", .dtype = DTYPE_F32, .ndim = 2, .shape = {2, 3}, .data = f32};
    ts[1] = (st_tensor){.name = "h.f16", .dtype = DTYPE_F16, .ndim = 1, .shape = {4}, .data = f16};
    ts[2] = (st_tensor){.name = "h.bf16", .dtype = DTYPE_BF16, .ndim = 2, .shape = {2, 2}, .data = bf16};
    ts[3] = (st_tensor){.name = "ids", .dtype = DTYPE_I64, .ndim = 1, .shape = {3}, .data = i64};
    ts[4] = (st_tensor){.name = "i32", .dtype = DTYPE_I32, .ndim = 2, .shape = {1, 2}, .data = i32};
    ts[5] = (st_tensor){.name = "u8", .dtype = DTYPE_OTHER, .dtype_name = "U8", .ndim = 1, .shape = {5}, .data = u8};
    ts[6] = (st_tensor){.name = "f64", .dtype = DTYPE_OTHER, .dtype_name = "F64", .ndim = 1, .shape = {2}, .data = f64};
    ts[7] = (st_tensor){.name = "mask", .dtype = DTYPE_OTHER, .dtype_name = "BOOL", .ndim = 1, .shape = {3}, .data = boolv};
    ts[8] = (st_tensor){.name = "f8", .dtype = DTYPE_OTHER, .dtype_name = "F8_E4M3", .ndim = 1, .shape = {2}, .data = f8};
    ts[9] = (st_tensor){.name = "scalar", .dtype = DTYPE_F32, .ndim = 0, .data = &scalar};
    size_t sizes[10] = {24, 8, 8, 24, 8, 5, 16, 3, 2, 4};
    const char *names[10] = {"F32", "F16", "BF16", "I64", "I32", "U8", "F64", "BOOL", "F8_E4M3", "F32"};
    as_dtype dts[10] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16, DTYPE_I64, DTYPE_I32,
                        DTYPE_OTHER, DTYPE_OTHER, DTYPE_OTHER, DTYPE_OTHER, DTYPE_F32};

    char path[128];
    tmp_path(path, sizeof path, "all.safetensors");
    as_error err = {0};
    assert_int_equal(st_write(path, ts, 10, &err), AS_OK);

    /* header length is a multiple of 8 and the data follows contiguously */
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t len8[8];
    assert_int_equal(fread(len8, 1, 8, fp), 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
    assert_int_equal(hlen % 8, 0);
    fseek(fp, 0, SEEK_END);
    long fsize = ftell(fp);
    fclose(fp);
    size_t total = 0;
    for (int i = 0; i < 10; i++) total += sizes[i];
    assert_int_equal((uint64_t)fsize, 8 + hlen + total);

    st_file *f = NULL;
    assert_int_equal(st_file_open(path, &f, &err), AS_OK);
    assert_int_equal(st_file_count(f), 10);
    for (int i = 0; i < 10; i++) {
        const st_tensor *t = st_file_find(f, ts[i].name);
        assert_non_null(t);
        assert_string_equal(t->name, ts[i].name);
        assert_int_equal(t->dtype, dts[i]);
        assert_string_equal(t->dtype_name, names[i]);
        assert_int_equal(t->ndim, ts[i].ndim);
        size_t ne = 1;
        for (int d = 0; d < t->ndim; d++) {
            assert_int_equal(t->shape[d], ts[i].shape[d]);
            ne *= (size_t)ts[i].shape[d];
        }
        assert_int_equal(t->n_elems, ne);
        assert_int_equal(t->nbytes, sizes[i]);
        assert_memory_equal(t->data, ts[i].data, sizes[i]);
    }
    assert_null(st_file_find(f, "nope"));
    assert_null(st_file_find(f, ""));
    assert_null(st_file_tensor(f, 10));
    assert_null(st_file_metadata(f, "format"));
    /* tensors are listed in name order */
    for (int i = 1; i < 10; i++)
        assert_true(strcmp(st_file_tensor(f, i - 1)->name, st_file_tensor(f, i)->name) < 0);

    /* half-precision values survive bit for bit and decode to the originals */
    const st_tensor *h = st_file_find(f, "h.f16"), *b = st_file_find(f, "h.bf16");
    for (int i = 0; i < 4; i++) {
        uint16_t hv, bv;
        memcpy(&hv, (const uint8_t *)h->data + 2 * i, 2);
        memcpy(&bv, (const uint8_t *)b->data + 2 * i, 2);
        assert_int_equal(hv, f16[i]);
        assert_int_equal(bv, bf16[i]);
        assert_true(as_f16_to_f32(hv) == halves[i]);
        if (i < 3) assert_true(as_bf16_to_f32(bv) == halves[i]);
    }
    const float *w = st_file_find(f, "enc.w")->data;
    assert_true(w[2] == 3.25f && w[5] == -7.0f);
    /* written after odd-sized tensors, the scalar is not 4-byte aligned: copy it */
    float sv;
    memcpy(&sv, st_file_find(f, "scalar")->data, 4);
    assert_true(sv == 42.0f);
    assert_false(st_tensor_aligned(st_file_find(f, "scalar")));
    assert_true(st_tensor_aligned(st_file_find(f, "enc.w")));
    st_file_free(f);
    st_file_free(NULL);
}

static void test_zero_size_and_empty(void **state) {
    (void)state;
    char path[128];
    as_error err = {0};
    st_file *f = NULL;
    tmp_path(path, sizeof path, "empty.safetensors");
    write_raw(path, "{}", 0, 0);
    assert_int_equal(st_file_open(path, &f, &err), AS_OK);
    assert_int_equal(st_file_count(f), 0);
    assert_null(st_file_find(f, "x"));
    st_file_free(f);

    /* zero-element tensors next to a real one at the same offset */
    float one = 1.0f;
    st_tensor ts[3] = {
        {.name = "a", .dtype = DTYPE_F32, .ndim = 2, .shape = {0, 4}},
        {.name = "b", .dtype = DTYPE_F32, .ndim = 1, .shape = {1}, .data = &one},
        {.name = "c", .dtype = DTYPE_F16, .ndim = 1, .shape = {0}},
    };
    tmp_path(path, sizeof path, "zero.safetensors");
    assert_int_equal(st_write(path, ts, 3, &err), AS_OK);
    assert_int_equal(st_file_open(path, &f, &err), AS_OK);
    assert_int_equal(st_file_count(f), 3);
    assert_int_equal(st_file_find(f, "a")->nbytes, 0);
    assert_int_equal(st_file_find(f, "a")->n_elems, 0);
    assert_true(*(const float *)st_file_find(f, "b")->data == 1.0f);
    st_file_free(f);
}

static void test_metadata(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "meta.safetensors");
    write_raw(path,
              "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"},"
              "\"w\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
              0, 8);
    st_file *f = NULL;
    as_error err = {0};
    assert_int_equal(st_file_open(path, &f, &err), AS_OK);
    assert_int_equal(st_file_count(f), 1);
    assert_string_equal(st_file_metadata(f, "format"), "pt");
    assert_string_equal(st_file_metadata(f, "k"), "v");
    assert_null(st_file_metadata(f, "x"));
    const st_tensor *t = st_file_find(f, "w");
    int32_t d[2];
    memcpy(d, t->data, 8); /* this hand-made header leaves the data unaligned */
    assert_int_equal(d[0], 0x03020100);
    assert_int_equal(d[1], 0x07060504);
    assert_false(st_tensor_aligned(t));
    st_file_free(f);
    expect_header_error("{\"__metadata__\":{\"format\":1}}", 0, "__metadata__");
}

static void test_write_rejects_bad_input(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "w.safetensors");
    float v = 1.0f;
    as_error err = {0};
    st_tensor dup[2] = {{.name = "x", .dtype = DTYPE_F32, .ndim = 1, .shape = {1}, .data = &v},
                        {.name = "x", .dtype = DTYPE_F32, .ndim = 1, .shape = {1}, .data = &v}};
    assert_int_equal(st_write(path, dup, 2, &err), AS_ERR_INPUT);
    st_tensor unk = {.name = "y", .dtype = DTYPE_OTHER, .dtype_name = "Q4", .ndim = 1, .shape = {1}, .data = &v};
    assert_int_equal(st_write(path, &unk, 1, &err), AS_ERR_INPUT);
    assert_int_equal(st_write("/nonexistent-dir/x.safetensors", dup, 1, &err), AS_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.safetensors"));
}

/* ---- corrupt files ------------------------------------------------------------------ */

static void test_missing_file(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "does-not-exist.safetensors");
    expect_input_error(path, "cannot open");
}

static void test_short_file(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "short.safetensors");
    write_bytes(path, "\x02\x00\x00", 3);
    expect_input_error(path, "header");
    write_bytes(path, "", 0);
    expect_input_error(path, "too short");
}

static void test_header_past_end(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "past.safetensors");
    write_raw(path, "{}", 3, 0); /* claims 3 header bytes, has 2 */
    expect_input_error(path, "header length");
    write_raw(path, "{}", (uint64_t)ST_MAX_HEADER_BYTES + 1, 0);
    expect_input_error(path, "limit");
    write_raw(path, "{}", UINT64_MAX, 0);
    expect_input_error(path, "header");
}

/* Writes a header of n well-formed zero-size tensor entries ("t0".."t{n-1}"). */
static void write_many_tensors(const char *path, int n) {
    size_t cap = (size_t)n * 64 + 16, k = 0;
    char *json = malloc(cap);
    assert_non_null(json);
    json[k++] = '{';
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(json + k, cap - k,
                              "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                              i ? "," : "", i);
    json[k++] = '}';
    json[k] = 0;
    write_raw(path, json, 0, 0);
    free(json);
}

/* Growth of the peak resident memory (KiB) of a child process while it opens path;
 * the child exits 0 when the open fails with AS_ERR_INPUT and "more than" in the
 * message (the count found before parsing). */
static long child_open_peak_kib(const char *path) {
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rusage before, after;
        getrusage(RUSAGE_SELF, &before);
        st_file *f = NULL;
        as_error err = {0};
        as_status rc = st_file_open(path, &f, &err);
        getrusage(RUSAGE_SELF, &after);
        long grow = after.ru_maxrss - before.ru_maxrss;
        _exit(write(fds[1], &grow, sizeof grow) == (ssize_t)sizeof grow && rc == AS_ERR_INPUT &&
                      strstr(err.msg, "more than")
                  ? 0
                  : 1);
    }
    close(fds[1]);
    long grow = -1;
    assert_int_equal(read(fds[0], &grow, sizeof grow), (ssize_t)sizeof grow);
    close(fds[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    return grow;
}

/* A header over the tensor limit is refused by counting its keys before jansson parses
 * it (about 1.2 KB per entry: ~160 MB here), so the peak stays near the mapped bytes;
 * exactly at the limit it loads. */
static void test_tensor_count_limit(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "many.safetensors");
    write_many_tensors(path, ST_MAX_FILE_TENSORS + 2);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size < ST_MAX_HEADER_BYTES); /* the count, not the length, refuses it */
    long peak = child_open_peak_kib(path);
    print_message("header of %d tensors (%lld bytes): refused, peak grew %ld KiB\n",
                  ST_MAX_FILE_TENSORS + 2, (long long)sb.st_size, peak);
    assert_true(peak < 48 * 1024);
    expect_input_error(path, "more than 131072 tensors");

    write_many_tensors(path, ST_MAX_FILE_TENSORS);
    st_file *f = NULL;
    as_error err = {0};
    assert_int_equal(st_file_open(path, &f, &err), AS_OK);
    assert_int_equal(st_file_count(f), ST_MAX_FILE_TENSORS);
    assert_non_null(st_file_find(f, "t131071"));
    st_file_free(f);
    unlink(path);
}

/* Braces, colons and escaped quotes inside names and metadata are not counted as keys. */
static void test_key_count_skips_strings(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "strings.safetensors");
    write_raw(path,
              "{\"__metadata__\":{\"a:b\":\"{:}[\\\":\"},"
              "\"x:{\\\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
              0, 4);
    st_file *f = NULL;
    as_error err = {0};
    assert_int_equal(st_file_open(path, &f, &err), AS_OK);
    assert_int_equal(st_file_count(f), 1);
    assert_non_null(st_file_find(f, "x:{\"y"));
    assert_string_equal(st_file_metadata(f, "a:b"), "{:}[\":");
    st_file_free(f);
}

/* A FIFO (no writer) and a directory are refused at once, not waited on or mapped. */
static void test_not_regular(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "fifo.safetensors");
    assert_int_equal(mkfifo(path, 0600), 0);
    expect_input_error(path, "not a regular file");
    unlink(path);
    expect_input_error(g_dir, "not a regular file");
}

static void test_invalid_json(void **state) {
    (void)state;
    expect_header_error("{\"a\": {\"dtype\": \"F32\",", 0, "JSON");
    expect_header_error("[1, 2]", 0, "not a JSON object");
    /* duplicated tensor names are rejected by the parser */
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                        8, "JSON");
}

static void test_bad_fields(void **state) {
    (void)state;
    expect_header_error("{\"a\": 3}", 0, "not an object");
    expect_header_error("{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 4, "shape");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "data_offsets");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4,
                        "shape");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 4,
                        "data_offsets");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0.0,4]}}", 4,
                        "data_offsets");
}

static void test_unknown_dtype(void **state) {
    (void)state;
    expect_header_error("{\"w\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4,
                        "dtype");
    expect_header_error("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "dtype");
}

static void test_size_mismatch(void **state) {
    (void)state;
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,20]}}", 24,
                        "shape");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[-2,3],\"data_offsets\":[0,24]}}", 24,
                        "negative");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                        "\"data_offsets\":[0,4]}}",
                        4, "dims");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4],"
                        "\"data_offsets\":[0,4]}}",
                        4, "overflow");
}

static void test_offsets_out_of_range(void **state) {
    (void)state;
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8,
                        "offset");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8,
                        "offset");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[-4,0]}}", 8,
                        "offset");
    expect_header_error("{\"w\":{\"dtype\":\"F32\",\"shape\":[1],"
                        "\"data_offsets\":[9223372036854775803,9223372036854775807]}}",
                        8, "offset");
}

static void test_overlap(void **state) {
    (void)state;
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                        12, "overlap");
    expect_header_error("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]},"
                        "\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                        12, "overlap");
}

/* ---- folders ------------------------------------------------------------------------- */

static void make_subdir(char *dir, size_t cap, const char *name) {
    snprintf(dir, cap, "%s/%s", g_dir, name);
    char cmd[1024];
    assert_true(snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir) < (int)sizeof cmd);
    assert_int_equal(system(cmd), 0);
}

static void write_in(const char *dir, const char *name, const char *text) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    write_bytes(p, text, strlen(text));
}

static const float g_wa[4] = {1, 2, 3, 4};
static const float g_wb[2] = {-1, -2};
static const int32_t g_wc[3] = {7, 8, 9};

/* Two shards: s1 = {a.w, a.b}, s2 = {c.ids}. */
static void write_two_shards(const char *dir) {
    char p[256];
    as_error err = {0};
    st_tensor s1[2] = {{.name = "a.w", .dtype = DTYPE_F32, .ndim = 2, .shape = {2, 2}, .data = g_wa},
                       {.name = "a.b", .dtype = DTYPE_F32, .ndim = 1, .shape = {2}, .data = g_wb}};
    st_tensor s2[1] = {{.name = "c.ids", .dtype = DTYPE_I32, .ndim = 1, .shape = {3}, .data = g_wc}};
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    assert_int_equal(st_write(p, s1, 2, &err), AS_OK);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    assert_int_equal(st_write(p, s2, 1, &err), AS_OK);
}

static void test_single_file_dir(void **state) {
    (void)state;
    char dir[128], p[256];
    make_subdir(dir, sizeof dir, "single");
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    st_tensor t = {.name = "x", .dtype = DTYPE_F32, .ndim = 1, .shape = {4}, .data = g_wa};
    as_error err = {0};
    assert_int_equal(st_write(p, &t, 1, &err), AS_OK);
    st_set *s = NULL;
    assert_int_equal(st_set_open_dir(dir, &s, &err), AS_OK);
    assert_int_equal(st_set_count(s), 1);
    const st_tensor *x = st_set_find(s, "x");
    assert_non_null(x);
    assert_memory_equal(x->data, g_wa, 16);
    assert_ptr_equal(st_set_tensor(s, 0), x);
    assert_null(st_set_find(s, "y"));
    st_set_free(s);
    st_set_free(NULL);
}

static void test_sharded_dir(void **state) {
    (void)state;
    char dir[128];
    make_subdir(dir, sizeof dir, "sharded");
    write_two_shards(dir);
    write_in(dir, "model.safetensors.index.json",
             "{\"metadata\":{\"total_size\":36},\"weight_map\":{"
             "\"a.w\":\"model-00001-of-00002.safetensors\","
             "\"a.b\":\"model-00001-of-00002.safetensors\","
             "\"c.ids\":\"model-00002-of-00002.safetensors\"}}");
    st_set *s = NULL;
    as_error err = {0};
    assert_int_equal(st_set_open_dir(dir, &s, &err), AS_OK);
    assert_int_equal(st_set_count(s), 3);
    const st_tensor *a = st_set_find(s, "a.w"), *b = st_set_find(s, "a.b"), *c = st_set_find(s, "c.ids");
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_int_equal(a->shape[1], 2);
    assert_memory_equal(a->data, g_wa, sizeof g_wa);
    assert_memory_equal(b->data, g_wb, sizeof g_wb);
    assert_memory_equal(c->data, g_wc, sizeof g_wc);
    assert_int_equal(c->dtype, DTYPE_I32);
    assert_string_equal(st_set_tensor(s, 0)->name, "a.b");
    assert_string_equal(st_set_tensor(s, 2)->name, "c.ids");
    assert_null(st_set_find(s, "missing"));
    st_set_free(s);
}

/* st_set_pages counts the mapped file's pages once they are touched, and no more. */
static void test_set_pages(void **state) {
    (void)state;
    char dir[128], p[256];
    make_subdir(dir, sizeof dir, "pages");
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    enum { N = 3 << 18 }; /* 3 MiB of F32 */
    float *v = calloc(N, sizeof(float));
    assert_non_null(v);
    for (int i = 0; i < N; i++) v[i] = (float)i;
    st_tensor t = {.name = "w", .dtype = DTYPE_F32, .ndim = 1, .shape = {N}, .data = v};
    as_error err = {0};
    assert_int_equal(st_write(p, &t, 1, &err), AS_OK);
    st_set *s = NULL;
    assert_int_equal(st_set_open_dir(dir, &s, &err), AS_OK);
    size_t res = 0, huge = 0;
    st_set_pages(s, &res, &huge);
    assert_true(res < (size_t)N * sizeof(float) / 2); /* only the header's pages so far */
    const st_tensor *w = st_set_find(s, "w");
    assert_non_null(w);
    volatile float sum = 0.0f;
    for (size_t i = 0; i < w->n_elems; i += 1024) sum += ((const float *)w->data)[i];
    (void)sum;
    st_set_pages(s, &res, &huge);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_true(res >= (size_t)N * sizeof(float));
    assert_true(res <= ((size_t)st.st_size + 4095) / 4096 * 4096); /* the file's pages, no more */
    assert_true(huge <= res);
    st_set_free(s);
    free(v);
}

static void expect_dir_error(const char *dir, const char *word) {
    st_set *s = NULL;
    as_error err = {0};
    as_status rc = st_set_open_dir(dir, &s, &err);
    if (rc != AS_ERR_INPUT || !strstr(err.msg, word))
        print_error("expected '%s' in: %s (rc %d)\n", word, err.msg, (int)rc);
    assert_int_equal(rc, AS_ERR_INPUT);
    assert_null(s);
    assert_non_null(strstr(err.msg, word));
}

static void test_sharded_errors(void **state) {
    (void)state;
    char dir[128];
    make_subdir(dir, sizeof dir, "nothing");
    expect_dir_error(dir, "no model.safetensors or model.safetensors.index.json");
    make_subdir(dir, sizeof dir, "pickle"); /* weights in a format that is not read are named */
    write_in(dir, "pytorch_model.bin", "PK");
    expect_dir_error(dir, "pytorch_model.bin is not read");

    make_subdir(dir, sizeof dir, "escape");
    write_two_shards(dir);
    write_in(dir, "model.safetensors.index.json",
             "{\"weight_map\":{\"a.w\":\"../model-00001-of-00002.safetensors\"}}");
    expect_dir_error(dir, "shard");
    write_in(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a.w\":\"\"}}");
    expect_dir_error(dir, "shard");
    write_in(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a.w\":\"..\"}}");
    expect_dir_error(dir, "shard");
    write_in(dir, "model.safetensors.index.json", "{\"weight_map\":{\"a.w\":3}}");
    expect_dir_error(dir, "a.w");
    write_in(dir, "model.safetensors.index.json", "{\"weights\":{}}");
    expect_dir_error(dir, "weight_map");
    write_in(dir, "model.safetensors.index.json", "{\"weight_map\":");
    expect_dir_error(dir, "JSON");

    /* listed tensor absent from its shard */
    write_in(dir, "model.safetensors.index.json",
             "{\"weight_map\":{\"a.w\":\"model-00001-of-00002.safetensors\","
             "\"c.ids\":\"model-00001-of-00002.safetensors\"}}");
    expect_dir_error(dir, "'c.ids'");
    /* shard missing on disk */
    write_in(dir, "model.safetensors.index.json",
             "{\"weight_map\":{\"a.w\":\"model-00003-of-00003.safetensors\"}}");
    expect_dir_error(dir, "model-00003-of-00003.safetensors");

    /* the same tensor name in two shards */
    make_subdir(dir, sizeof dir, "dup");
    char p[256];
    as_error err = {0};
    st_tensor t[2] = {{.name = "a.w", .dtype = DTYPE_F32, .ndim = 1, .shape = {4}, .data = g_wa},
                      {.name = "z", .dtype = DTYPE_F32, .ndim = 1, .shape = {2}, .data = g_wb}};
    snprintf(p, sizeof p, "%s/s1.safetensors", dir);
    assert_int_equal(st_write(p, t, 1, &err), AS_OK);
    snprintf(p, sizeof p, "%s/s2.safetensors", dir);
    assert_int_equal(st_write(p, t, 2, &err), AS_OK);
    write_in(dir, "model.safetensors.index.json",
             "{\"weight_map\":{\"a.w\":\"s1.safetensors\",\"z\":\"s2.safetensors\"}}");
    expect_dir_error(dir, "appears in shards");

    /* an index listing more weight_map entries than ST_MAX_TENSORS is refused by its
     * key count, before the JSON is parsed */
    make_subdir(dir, sizeof dir, "bigindex");
    int n = ST_MAX_TENSORS + 1025;
    size_t cap = (size_t)n * 16 + 64, k = 0;
    char *json = malloc(cap);
    assert_non_null(json);
    k += (size_t)snprintf(json, cap, "{\"weight_map\":{");
    for (int i = 0; i < n; i++) k += (size_t)snprintf(json + k, cap - k, "%s\"%x\":\"s\"", i ? "," : "", i);
    snprintf(json + k, cap - k, "}}");
    write_in(dir, "model.safetensors.index.json", json);
    free(json);
    expect_dir_error(dir, "more than 1000000 tensors");
}

/* ---- fuzz ------------------------------------------------------------------------------ */

static void test_fuzz_header(void **state) {
    (void)state;
    char path[128], fpath[128];
    tmp_path(path, sizeof path, "fuzz-src.safetensors");
    tmp_path(fpath, sizeof fpath, "fuzz.safetensors");
    float v[6] = {1, 2, 3, 4, 5, 6};
    uint16_t h[3] = {1, 2, 3};
    st_tensor ts[3] = {{.name = "a", .dtype = DTYPE_F32, .ndim = 2, .shape = {2, 2}, .data = v},
                       {.name = "bb", .dtype = DTYPE_BF16, .ndim = 1, .shape = {3}, .data = h},
                       {.name = "c", .dtype = DTYPE_I32, .ndim = 1, .shape = {2}, .data = v + 4}};
    as_error err = {0};
    assert_int_equal(st_write(path, ts, 3, &err), AS_OK);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t src[4096];
    size_t n = fread(src, 1, sizeof src, fp);
    fclose(fp);
    assert_true(n > 8 && n < sizeof src);
    size_t hend = 8 + (size_t)src[0] + ((size_t)src[1] << 8);
    assert_true(hend <= n);
    const char *tokens = "{}[]\":,0123456789-e. FIBU";

    srand(12345);
    int n_ok = 0, n_bad = 0;
    uint8_t buf[4096];
    for (int it = 0; it < 2000; it++) {
        memcpy(buf, src, n);
        size_t len = n;
        int kind = rand() % 4;
        if (kind == 0) {
            len = (size_t)rand() % (n + 1);
        } else {
            int flips = 1 + rand() % (kind == 3 ? 8 : 2);
            for (int k = 0; k < flips; k++) {
                size_t at = (size_t)rand() % hend;
                buf[at] = kind == 1 ? (uint8_t)(rand() & 0xff)
                                    : (uint8_t)tokens[rand() % (int)strlen(tokens)];
            }
        }
        write_bytes(fpath, buf, len);
        st_file *f = NULL;
        as_error e2 = {0};
        as_status rc = st_file_open(fpath, &f, &e2);
        assert_true(rc == AS_OK || rc == AS_ERR_INPUT);
        if (rc == AS_OK) {
            n_ok++;
            for (int i = 0; i < st_file_count(f); i++) {
                const st_tensor *t = st_file_tensor(f, i);
                /* every accepted tensor lies inside the file: touch its bytes */
                unsigned sum = 0;
                for (size_t b = 0; b < t->nbytes; b++) sum += ((const uint8_t *)t->data)[b];
                (void)sum;
                assert_ptr_equal(st_file_find(f, t->name), t);
            }
            st_file_free(f);
        } else {
            n_bad++;
            assert_null(f);
            assert_true(strlen(e2.msg) > 0);
        }
    }
    print_message("fuzz: %d accepted, %d rejected\n", n_ok, n_bad);
    assert_true(n_bad > 1000);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/as_test_st_XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_dtypes),
        cmocka_unit_test(test_zero_size_and_empty),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_write_rejects_bad_input),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_short_file),
        cmocka_unit_test(test_header_past_end),
        cmocka_unit_test(test_tensor_count_limit),
        cmocka_unit_test(test_key_count_skips_strings),
        cmocka_unit_test(test_not_regular),
        cmocka_unit_test(test_invalid_json),
        cmocka_unit_test(test_bad_fields),
        cmocka_unit_test(test_unknown_dtype),
        cmocka_unit_test(test_size_mismatch),
        cmocka_unit_test(test_offsets_out_of_range),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_single_file_dir),
        cmocka_unit_test(test_sharded_dir),
        cmocka_unit_test(test_sharded_errors),
        cmocka_unit_test(test_set_pages),
        cmocka_unit_test(test_fuzz_header),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
