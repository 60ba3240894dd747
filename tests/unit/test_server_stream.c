/* test_server_stream.c — the building blocks of the server's streamed tensor
 * responses, compiled in from src/server (they are not part of the library):
 * srv_tb_plan_read returns exactly srv_tb_write's bytes when the container is read
 * in chunks of any size and from any position (elements split across chunks, the
 * header, padding, f32/f16/u8, sources given as parts or produced by part_fn), and
 * the run cache's accounting of runs held by streams: an evicted run still being
 * streamed counts against the byte bound until released, and a stream that would
 * push the held runs over the bound is refused (one run is always admitted).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/cache.c"
#include "server/tensor.c"

/* ---- srv_tb_plan ---------------------------------------------------------------------- */

static float half_to_float(uint16_t h) {
    int sg = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? INFINITY : ldexpf(1.0f + (float)m / 1024.0f, e - 15);
    return sg ? -v : v;
}

/* Decodes tensor i of the container buf and checks it against src (n floats). */
static void check_decoded(const unsigned char *buf, size_t len, int i, const float *src, size_t n) {
    uint32_t hl = (uint32_t)buf[4] | (uint32_t)buf[5] << 8 | (uint32_t)buf[6] << 16 | (uint32_t)buf[7] << 24;
    json_error_t je;
    json_t *h = json_loadb((const char *)buf + 8, hl, 0, &je);
    assert_non_null(h);
    json_t *x = json_array_get(json_object_get(h, "tensors"), (size_t)i);
    const char *dt = json_string_value(json_object_get(x, "dtype"));
    size_t off = 8 + hl + (size_t)json_integer_value(json_object_get(x, "offset"));
    size_t es = !strcmp(dt, "f32") ? 4 : !strcmp(dt, "f16") ? 2 : 1;
    assert_int_equal(json_integer_value(json_object_get(x, "nbytes")), (json_int_t)(n * es));
    assert_true(off + n * es <= len);
    double zero = json_number_value(json_object_get(x, "zero")), scale = json_number_value(json_object_get(x, "scale"));
    for (size_t k = 0; k < n; k++) {
        const unsigned char *p = buf + off + k * es;
        float want = src[k], got;
        if (es == 4) {
            memcpy(&got, p, 4);
            assert_memory_equal(&got, &want, 4);
        } else if (es == 2) {
            got = half_to_float((uint16_t)(p[0] | p[1] << 8));
            assert_true(fabsf(got - want) <= 1e-3f * fmaxf(1.0f, fabsf(want)));
        } else if (isfinite(want)) {
            got = (float)(zero + scale * p[0]);
            assert_true(fabs((double)got - (double)want) <= scale / 2 + 1e-6);
        } else {
            assert_int_equal(p[0], 0);
        }
    }
    json_decref(h);
}

typedef struct {
    const float *base; /* (n_parts, part_len) */
    size_t part_len;
    int calls;
} gen_ctx;

static const float *gen_part(void *ctx, int p) {
    gen_ctx *g = ctx;
    g->calls++;
    return g->base + (size_t)p * g->part_len;
}

static void test_plan_reads_match_write(void **state) {
    enum { P = 5, N = 37 }; /* odd part length: tensors end off the 8-byte grid */
    float a[P * N], b[3 * 11], c[P * N];
    srand(7);
    for (int i = 0; i < P * N; i++) a[i] = (float)rand() / RAND_MAX * 2.0f - 1.0f;
    for (int i = 0; i < 3 * 11; i++) b[i] = (float)rand() / RAND_MAX;
    for (int i = 0; i < P * N; i++) c[i] = (float)(i % 17) * 0.25f;
    b[4] = NAN;
    b[5] = INFINITY;
    const float *ap[P], *bp[3];
    for (int i = 0; i < P; i++) ap[i] = a + i * N;
    for (int i = 0; i < 3; i++) bp[i] = b + i * 11;
    gen_ctx g = {.base = c, .part_len = N};
    for (int dt = 0; dt < 3; dt++) {
        srv_tb_tensor t[3] = {
            {.name = "a", .dtype = (srv_tb_dtype)dt, .ndim = 2, .shape = {P, N}, .parts = ap, .n_parts = P, .part_len = N},
            {.name = "b", .dtype = TB_U8, .ndim = 2, .shape = {3, 11}, .parts = bp, .n_parts = 3, .part_len = 11},
            {.name = "c", .dtype = (srv_tb_dtype)((dt + 1) % 3), .ndim = 2, .shape = {P, N}, .n_parts = P,
             .part_len = N, .part_fn = gen_part, .part_ctx = &g},
        };
        json_t *meta = json_pack("{s:s}", "run", "x");
        as_error err = {0};
        unsigned char *whole;
        size_t len;
        assert_int_equal(srv_tb_write(t, 3, meta, &whole, &len, &err), AS_OK);
        assert_memory_equal(whole, "ASTB", 4);
        check_decoded(whole, len, 0, a, P * N);
        check_decoded(whole, len, 1, b, 3 * 11);
        check_decoded(whole, len, 2, c, P * N);
        srv_tb_plan p;
        assert_int_equal(srv_tb_plan_init(&p, t, 3, meta, &err), AS_OK);
        assert_int_equal(p.total, len);
        assert_int_equal(p.total % 8, 0);
        unsigned char *got = malloc(len);
        const size_t chunks[] = {1, 2, 3, 5, 7, 8, 13, 4096, len};
        for (size_t k = 0; k < sizeof chunks / sizeof *chunks; k++) { /* sequential reads of one size */
            memset(got, 0xAA, len);
            size_t pos = 0;
            while (pos < len) {
                size_t n = srv_tb_plan_read(&p, pos, got + pos, chunks[k] < len - pos ? chunks[k] : len - pos);
                assert_true(n > 0);
                pos += n;
            }
            assert_memory_equal(got, whole, len);
        }
        for (int k = 0; k < 2000; k++) { /* random positions and sizes */
            size_t pos = (size_t)rand() % len, max = 1 + (size_t)rand() % 40;
            unsigned char buf[40];
            size_t n = srv_tb_plan_read(&p, pos, buf, max);
            assert_int_equal(n, max < len - pos ? max : len - pos);
            assert_memory_equal(buf, whole + pos, n);
        }
        unsigned char one;
        assert_int_equal(srv_tb_plan_read(&p, len, &one, 1), 0);
        assert_int_equal(srv_tb_plan_read(&p, len + 5, &one, 1), 0);
        free(got);
        free(whole);
        srv_tb_plan_free(&p);
        srv_tb_plan_free(&p); /* a freed plan is zeroed: freeing it again is a no-op */
        json_decref(meta);
    }
    assert_true(g.calls > 0);
    printf("plan reads equal srv_tb_write for f32/f16/u8, chunk sizes 1..4096 and 6000 random ranges\n");
}

/* ---- the cache's accounting of streamed runs ------------------------------------------- */

/* A cache entry whose run holds bytes (no tensors). */
static srv_entry *fake_entry(int model, const char *text, size_t bytes) {
    srv_entry *e = calloc(1, sizeof *e);
    e->model = model;
    e->text = strdup(text);
    e->run = calloc(1, sizeof *e->run);
    e->run->bytes = bytes;
    return e;
}

static void test_cache_stream_accounting(void **state) {
    srv_cache c;
    srv_cache_init(&c, 16, 100);
    srv_entry *a = srv_cache_put(&c, fake_entry(0, "a", 60)); /* the caller's reference */
    assert_int_equal(c.bytes, 60);
    assert_int_equal(srv_cache_stream_begin(&c, a), 1); /* the first stream is always admitted */
    assert_int_equal(srv_cache_stream_begin(&c, a), 1); /* a second one on the same run adds nothing */
    assert_int_equal(c.stream_bytes, 60);
    srv_cache_release(&c, a);
    /* b evicts a (60 + 50 > 100), which stays in memory for its streams */
    srv_entry *b = srv_cache_put(&c, fake_entry(0, "b", 50));
    assert_int_equal(c.n, 1);
    assert_int_equal(c.bytes, 50);
    assert_int_equal(c.held_bytes, 60);
    assert_null(srv_cache_get(&c, a->id));
    /* streaming b too would hold 110 > 100 bytes: refused */
    assert_int_equal(srv_cache_stream_begin(&c, b), 0);
    assert_int_equal(c.stream_bytes, 60);
    /* a smaller run fits beside a's streams; c then evicts b (50 + 30 + 60 held > 100) */
    srv_cache_release(&c, b);
    srv_entry *e3 = srv_cache_put(&c, fake_entry(0, "c", 30));
    assert_int_equal(srv_cache_stream_begin(&c, e3), 1);
    assert_int_equal(c.stream_bytes, 90);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.bytes, 30);
    assert_int_equal(c.held_bytes, 60);
    /* the streams end: a is freed and no longer counted */
    srv_cache_stream_end(&c, a);
    assert_int_equal(c.held_bytes, 60);
    srv_cache_stream_end(&c, a);
    assert_int_equal(c.held_bytes, 0);
    assert_int_equal(c.stream_bytes, 30);
    char e3_id[sizeof e3->id];
    memcpy(e3_id, e3->id, sizeof e3_id);
    srv_cache_stream_end(&c, e3);
    srv_cache_release(&c, e3);
    assert_int_equal(c.stream_bytes, 0);
    /* one run larger than the bound is still admitted alone, and blocks a second */
    srv_entry *big = srv_cache_put(&c, fake_entry(0, "big", 150));
    assert_int_equal(srv_cache_stream_begin(&c, big), 1);
    assert_null(srv_cache_get(&c, e3_id)); /* c was evicted by big */
    srv_entry *d = srv_cache_put(&c, fake_entry(0, "d", 1));
    assert_int_equal(srv_cache_stream_begin(&c, d), 0);
    srv_cache_stream_end(&c, big);
    assert_int_equal(srv_cache_stream_begin(&c, d), 1);
    srv_cache_stream_end(&c, d);
    srv_cache_release(&c, d);
    srv_cache_release(&c, big);
    srv_cache_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_reads_match_write),
        cmocka_unit_test(test_cache_stream_accounting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
