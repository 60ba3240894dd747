/* test_server_encdec.c — `attnscope serve` on encoder-decoder models (bart_tiny and
 * t5_tiny of tests/ref/gen_encdec.py, without a tokenizer) next to a single-stack model
 * (llama): GET /models names the two stacks; POST /run with ids and target_ids gives the
 * decoder's input ids, tokens and both blocks (decoder causal, cross not); the attention
 * route of each kind (encoder, decoder, cross) and the qk route of cross-attention (q from
 * the decoder, k from the encoder) equal the PyTorch reference's expected.safetensors
 * (case c0) within 1e-5; the pooled cross-attention thumbnail is the block maximum of the
 * served dense matrix; the cache keys the target; and the errors are one-line 4xx: no
 * target, both target fields, a target on the single-stack model, target ids out of the
 * vocabulary, capture stats,qkv, an unknown kind, decoder / cross on a single-stack run,
 * attribution of an encoder-decoder run. Starts the real binary (server_harness.h). What
 * it does not: text targets (tests/browser/encdec.test.mjs, with a tokenizer).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "attnscope.h"
#include "io/safetensors.h"

#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/models/"
#define TOL 1e-5

#include "server_harness.h"

static server S;

static int setup(void **state) {
    const char *args[] = {"--model", FIX "bart_tiny", "--model", FIX "t5_tiny", "--model", FIX "llama", NULL};
    return server_start_or_report(&S, args);
}

static int teardown(void **state) { return server_stop_report(&S) == 0 ? 0 : -1; }

static int int_at(json_t *arr, size_t i) { return (int)json_integer_value(json_array_get(arr, i)); }

/* The reference of fixture fx: expected.safetensors (caller frees). */
static st_file *expected(const char *fx) {
    char path[512];
    snprintf(path, sizeof path, FIX "%s/expected.safetensors", fx);
    st_file *f = NULL;
    as_error err = {0};
    if (st_file_open(path, &f, &err)) fail_msg("%s", err.msg);
    return f;
}

static const st_tensor *want(const st_file *f, const char *what) {
    char name[128];
    snprintf(name, sizeof name, "c0.%s", what);
    const st_tensor *t = st_file_find(f, name);
    if (!t) fail_msg("expected.safetensors has no %s", name);
    return t;
}

/* element k of an F32 or I32 reference tensor */
static double ref_at(const st_tensor *t, size_t k) {
    if (t->dtype == DTYPE_I32) {
        int32_t v;
        memcpy(&v, (const char *)t->data + k * 4, 4);
        return v;
    }
    float v;
    memcpy(&v, (const char *)t->data + k * 4, 4);
    return v;
}

/* "[a,b,c]" of an I32 reference tensor into buf */
static void ids_json(const st_tensor *t, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (size_t i = 0; i < t->n_elems; i++) n += (size_t)snprintf(buf + n, cap - n, i ? ",%d" : "%d", (int)ref_at(t, i));
    snprintf(buf + n, cap - n, "]");
}

static json_t *post_json(const char *body, int status) {
    resp r;
    post(S.port, "/api/v1/run", body, &r);
    if (r.status != status) fprintf(stderr, "POST /run %s: %d %s\n", body, r.status, r.body);
    assert_int_equal(r.status, status);
    json_t *j = status == 200 ? body_json(&r) : NULL;
    if (status != 200) expect_error(&r, status);
    resp_free(&r);
    return j;
}

/* POST /run of case c0 of fx; returns the run (caller decrefs). */
static json_t *run_c0(const char *fx, const st_file *ex) {
    char src[512], tgt[512], body[1200];
    ids_json(want(ex, "src_ids"), src, sizeof src);
    ids_json(want(ex, "tgt_ids"), tgt, sizeof tgt);
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"ids\":%s,\"target_ids\":%s}", fx, src, tgt);
    return post_json(body, 200);
}

/* GET path, a binary tensor response; parsed into t (caller decrefs t->hdr and frees r). */
static void get_tb(const char *path, resp *r, tb *t) {
    get(S.port, path, r);
    if (r->status != 200) fprintf(stderr, "GET %s: %d %s\n", path, r->status, r->body);
    assert_int_equal(r->status, 200);
    assert_true(header_has(r, "application/octet-stream"));
    tb_parse(r, t);
}

/* max |served - reference| over tensor x of t and the reference tensor of the same size */
static double max_diff(const tb *t, json_t *x, const st_tensor *ref) {
    double m = 0;
    size_t n = 1;
    json_t *sh = json_object_get(x, "shape");
    for (size_t i = 0; i < json_array_size(sh); i++) n *= (size_t)int_at(sh, i);
    assert_int_equal(n, ref->n_elems);
    for (size_t k = 0; k < n; k++) m = fmax(m, fabs((double)tb_at(t, x, k) - ref_at(ref, k)));
    return m;
}

static void test_models(void **state) {
    resp r;
    get(S.port, "/api/v1/models", &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r), *m;
    resp_free(&r);
    size_t i;
    int seen = 0;
    json_array_foreach(json_object_get(j, "models"), i, m) {
        const char *name = json_string_value(json_object_get(m, "name"));
        json_t *st = json_object_get(m, "stacks");
        if (!strcmp(name, "llama")) {
            assert_false(json_is_true(json_object_get(m, "encoder_decoder")));
            assert_true(json_is_null(st));
            seen++;
            continue;
        }
        assert_true(json_is_true(json_object_get(m, "encoder_decoder")));
        assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "encoder"), "layers")), 2);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "decoder"), "layers")), 3);
        assert_int_equal(json_integer_value(json_object_get(json_object_get(st, "decoder"), "heads")), 3);
        seen++;
    }
    assert_int_equal(seen, 3);
    json_decref(j);
}

/* Every kind's attention and the cross qk of fx against the torch reference. */
static void check_fixture(const char *fx, int dh) {
    st_file *ex = expected(fx);
    json_t *run = run_c0(fx, ex);
    const st_tensor *tt = want(ex, "tgt_ids"), *ts = want(ex, "src_ids");
    int Tt = (int)tt->n_elems, Ts = (int)ts->n_elems;
    assert_true(json_is_true(json_object_get(run, "encoder_decoder")));
    json_t *dec = json_object_get(run, "decoder");
    assert_int_equal(json_integer_value(json_object_get(dec, "layers")), 3);
    assert_true(json_is_null(json_object_get(dec, "target")));
    json_t *dids = json_object_get(dec, "input_ids");
    assert_int_equal((int)json_array_size(dids), Tt);
    for (int i = 0; i < Tt; i++) assert_int_equal(int_at(dids, (size_t)i), (int)ref_at(tt, (size_t)i));
    assert_int_equal((int)json_array_size(json_object_get(dec, "tokens")), Tt);
    assert_int_equal((int)json_array_size(json_object_get(run, "tokens")), Ts);
    assert_true(json_is_true(json_object_get(json_object_get(dec, "block"), "causal")));
    assert_false(json_is_true(json_object_get(json_object_get(dec, "cross_block"), "causal")));
    assert_int_equal((int)json_array_size(json_object_get(json_object_get(dec, "block"), "window")), 3);
    char id[64], path[256];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(run, "id")));

    const char *kinds[3] = {"encoder", "decoder", "cross"}, *names[3] = {"encoder_attentions", "decoder_attentions",
                                                                         "cross_attentions"};
    int rows[3] = {Ts, Tt, Tt}, keys[3] = {Ts, Tt, Ts}, layers[3] = {2, 3, 3};
    for (int k = 0; k < 3; k++) {
        snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=0-%d&heads=0-2&dtype=f32%s%s", id, layers[k] - 1,
                 k ? "&kind=" : "", k ? kinds[k] : "");
        resp r;
        tb t;
        get_tb(path, &r, &t);
        json_t *meta = json_object_get(t.hdr, "meta"), *x = tb_tensor(&t, "attention"),
               *sh = json_object_get(x, "shape");
        assert_string_equal(json_string_value(json_object_get(meta, "kind")), kinds[k]);
        assert_int_equal(json_integer_value(json_object_get(meta, "tokens")), rows[k]);
        assert_int_equal(json_integer_value(json_object_get(meta, "keys")), keys[k]);
        assert_int_equal(int_at(sh, 0), layers[k]);
        assert_int_equal(int_at(sh, 2), rows[k]);
        assert_int_equal(int_at(sh, 3), keys[k]);
        double d = max_diff(&t, x, want(ex, names[k]));
        printf("%s %s: max |served - torch| %.2e\n", fx, names[k], d);
        assert_true(d <= TOL);
        json_decref(t.hdr);
        resp_free(&r);
    }
    /* cross qk of the last layer, head 1: q (Tt, Dh) from the decoder, k (Ts, Dh) from the encoder */
    snprintf(path, sizeof path, "/api/v1/runs/%s/qk?layer=2&head=1&kind=cross", id);
    resp r;
    tb t;
    get_tb(path, &r, &t);
    json_t *q = tb_tensor(&t, "q"), *kk = tb_tensor(&t, "k"), *at = tb_tensor(&t, "attention");
    assert_int_equal(int_at(json_object_get(q, "shape"), 0), Tt);
    assert_int_equal(int_at(json_object_get(q, "shape"), 1), dh);
    assert_int_equal(int_at(json_object_get(kk, "shape"), 0), Ts);
    assert_int_equal(int_at(json_object_get(at, "shape"), 1), Ts);
    const st_tensor *cq = want(ex, "cross_queries"), *ck = want(ex, "cross_keys"), *ca = want(ex, "cross_attentions");
    double dq = 0, dk = 0, da = 0;
    size_t oq = ((size_t)2 * 3 + 1) * (size_t)Tt * (size_t)dh, ok = ((size_t)2 * 3 + 1) * (size_t)Ts * (size_t)dh,
           oa = ((size_t)2 * 3 + 1) * (size_t)Tt * (size_t)Ts;
    for (size_t i = 0; i < (size_t)Tt * (size_t)dh; i++) dq = fmax(dq, fabs(tb_at(&t, q, i) - ref_at(cq, oq + i)));
    for (size_t i = 0; i < (size_t)Ts * (size_t)dh; i++) dk = fmax(dk, fabs(tb_at(&t, kk, i) - ref_at(ck, ok + i)));
    for (size_t i = 0; i < (size_t)Tt * (size_t)Ts; i++) da = fmax(da, fabs(tb_at(&t, at, i) - ref_at(ca, oa + i)));
    printf("%s cross qk L2 H1: max |served - torch| q %.2e k %.2e attention %.2e\n", fx, dq, dk, da);
    assert_true(dq <= 1e-4 && dk <= 1e-4 && da <= TOL);
    json_decref(t.hdr);
    resp_free(&r);
    json_decref(run);
    st_file_free(ex);
}

static void test_bart(void **state) { check_fixture("bart_tiny", 8); }
static void test_t5(void **state) { check_fixture("t5_tiny", 10); }

/* A longer input (20 source, 12 decoder tokens): the cross thumbnail pooled to 8 x 8 is the
 * block maximum of the dense (12, 20) matrix served for the same run. */
static void test_pooled_cross(void **state) {
    json_t *run = post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,2],"
                            "\"target_ids\":[2,0,31,64,7,8,9,10,11,12,13,14]}", 200);
    char path[256];
    const char *id = json_string_value(json_object_get(run, "id"));
    resp rd, rp;
    tb td, tp;
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=0-2&heads=0-2&dtype=f32&kind=cross", id);
    get_tb(path, &rd, &td);
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?pool=8&dtype=f32&kind=cross", id);
    get_tb(path, &rp, &tp);
    json_t *xd = tb_tensor(&td, "attention"), *xp = tb_tensor(&tp, "attention"), *meta = json_object_get(tp.hdr, "meta");
    assert_int_equal(int_at(json_object_get(xp, "shape"), 2), 8);
    assert_int_equal(int_at(json_object_get(xp, "shape"), 3), 8);
    assert_int_equal(json_integer_value(json_object_get(meta, "pool")), 8);
    const int R = 12, C = 20, P = 8;
    double worst = 0;
    for (int lh = 0; lh < 9; lh++)
        for (int bi = 0; bi < P; bi++)
            for (int bj = 0; bj < P; bj++) {
                float m = -INFINITY;
                for (int i = bi * R / P; i < (bi + 1) * R / P; i++)
                    for (int j = bj * C / P; j < (bj + 1) * C / P; j++)
                        m = fmaxf(m, tb_at(&td, xd, ((size_t)lh * R + (size_t)i) * C + (size_t)j));
                worst = fmax(worst, fabs(m - tb_at(&tp, xp, ((size_t)lh * P + (size_t)bi) * P + (size_t)bj)));
            }
    printf("pooled cross 8x8 of (12, 20): max |pooled - block max| %g\n", worst);
    assert_true(worst == 0.0);
    json_decref(td.hdr);
    json_decref(tp.hdr);
    resp_free(&rd);
    resp_free(&rp);
    json_decref(run);
}

/* The same source with another target is another run; the same target a cache hit. */
static void test_cache_key(void **state) {
    json_t *a = post_json("{\"model\":\"t5_tiny\",\"ids\":[4,5,6,1],\"target_ids\":[0,7]}", 200),
           *b = post_json("{\"model\":\"t5_tiny\",\"ids\":[4,5,6,1],\"target_ids\":[0,8]}", 200),
           *c = post_json("{\"model\":\"t5_tiny\",\"ids\":[4,5,6,1],\"target_ids\":[0,7]}", 200);
    const char *ia = json_string_value(json_object_get(a, "id")), *ib = json_string_value(json_object_get(b, "id")),
               *ic = json_string_value(json_object_get(c, "id"));
    assert_string_not_equal(ia, ib);
    assert_string_equal(ia, ic);
    assert_true(json_is_true(json_object_get(c, "cached")));
    assert_int_equal(int_at(json_object_get(json_object_get(b, "decoder"), "input_ids"), 1), 8);
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

static void expect_get(const char *path, int status) {
    resp r;
    get(S.port, path, &r);
    if (r.status != status) fprintf(stderr, "GET %s: %d %s\n", path, r.status, r.body);
    expect_error(&r, status);
    resp_free(&r);
}

static void test_errors(void **state) {
    post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,2]}", 400);                                  /* no target */
    post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target_ids\":[2],\"target\":\"a\"}", 400); /* both */
    post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target_ids\":[2,500]}", 400);           /* vocabulary */
    post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target_ids\":[]}", 400);
    post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target_ids\":\"2,0\"}", 400);
    post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target\":7}", 400);
    post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target\":\"ab\"}", 400); /* no tokenizer */
    post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target_ids\":[2],\"capture\":\"stats,qkv\"}", 400);
    post_json("{\"model\":\"llama\",\"ids\":[1,5],\"target_ids\":[2]}", 400); /* one stack */
    json_t *one = post_json("{\"model\":\"llama\",\"ids\":[1,5,9]}", 200),
           *two = post_json("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target_ids\":[2,0]}", 200);
    char path[256];
    const char *i1 = json_string_value(json_object_get(one, "id")), *i2 = json_string_value(json_object_get(two, "id"));
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=0&heads=0&dtype=f32&kind=cross", i1);
    expect_get(path, 400);
    snprintf(path, sizeof path, "/api/v1/runs/%s/qk?layer=0&head=0&kind=decoder", i1);
    expect_get(path, 400);
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=0&heads=0&dtype=f32&kind=both", i2);
    expect_get(path, 400);
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=2&heads=0&dtype=f32", i2); /* encoder: 2 layers */
    expect_get(path, 400);
    snprintf(path, sizeof path, "/api/v1/runs/%s/attribution?method=raw&dtype=f32", i2);
    expect_get(path, 409);
    snprintf(path, sizeof path, "/api/v1/runs/%s/stats?kind=cross", i2);
    expect_get(path, 400);
    /* the single-stack run keeps its default: kind=encoder is its one stack */
    resp r;
    tb t;
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=0&heads=0&dtype=f32&kind=encoder", i1);
    get_tb(path, &r, &t);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(t.hdr, "meta"), "keys")), 3);
    json_decref(t.hdr);
    resp_free(&r);
    json_decref(one);
    json_decref(two);
}

int main(void) {
    if (binary_missing("test_server_encdec")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models),     cmocka_unit_test(test_bart),      cmocka_unit_test(test_t5),
        cmocka_unit_test(test_pooled_cross), cmocka_unit_test(test_cache_key), cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
