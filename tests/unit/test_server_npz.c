/* test_server_npz.c — `attnscope serve --attention FILE.npz` through the real server over
 * HTTP: the imported runs listed by GET /models, their attention (f32 and f16, whole and
 * max-pooled) equal to the files' weights, the qk route equal to the file's queries, keys
 * and scores, 409 from the routes that need a model (attribution, tile, stats, and qk
 * without queries), a model served alongside, and bad files refused at startup with one
 * line on stderr and exit status 2 (fixtures: tests/ref/gen_npz_attention.py).
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
#include "io/npz_read.h"
#include "server_harness.h"

#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/npz_attention/"

static server S;
static char RUN_ID[32], BV_ID[32];

static int setup(void **state) {
    (void)state;
    const char *args[] = {"--model", DEMO, "--attention", FIX "run_like.npz", "--attention", FIX "bertviz_f16.npz", NULL};
    return server_start_or_report(&S, args);
}

static int teardown(void **state) {
    (void)state;
    return server_stop_report(&S) ? -1 : 0;
}

/* The fixture's float32 array name (n values) into a new buffer. */
static float *fixture(const char *file, const char *name, size_t n) {
    npy_array a;
    as_error err = {0};
    assert_int_equal(npz_read_f32(file, name, &a, &err), AS_OK);
    assert_int_equal(a.n, n);
    return a.data;
}

static void test_models_list(void **state) {
    (void)state;
    resp r;
    get(S.port, "/api/v1/models", &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r), *imp = json_object_get(j, "imported");
    assert_int_equal(json_array_size(json_object_get(j, "models")), 1);
    assert_int_equal(json_array_size(imp), 2);
    json_t *a = json_array_get(imp, 0), *b = json_array_get(imp, 1);
    assert_string_equal(json_string_value(json_object_get(a, "model")), "run_like.npz");
    assert_string_equal(json_string_value(json_object_get(a, "arch")), "npz");
    assert_true(json_is_true(json_object_get(json_object_get(a, "source"), "neuron")));
    assert_false(json_is_true(json_object_get(json_object_get(b, "source"), "neuron")));
    assert_string_equal(json_string_value(json_object_get(json_object_get(b, "source"), "layout")), "bertviz");
    assert_true(json_is_true(json_object_get(b, "causal")));
    json_t *sz = json_object_get(a, "sizes");
    assert_int_equal(json_integer_value(json_object_get(sz, "layers")), 2);
    assert_int_equal(json_integer_value(json_object_get(sz, "heads")), 3);
    assert_int_equal(json_integer_value(json_object_get(sz, "tokens")), 6);
    assert_int_equal(json_integer_value(json_object_get(sz, "d_head")), 4);
    json_t *tok = json_array_get(json_object_get(b, "tokens"), 1);
    assert_string_equal(json_string_value(json_object_get(tok, "piece")), "\xc4\xa0" "caf\xc3\xa9");
    assert_string_equal(json_string_value(json_object_get(tok, "text")), " caf\xc3\xa9"); /* prettified */
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(b, "tokens"), 3), "segment")), 1);
    snprintf(RUN_ID, sizeof RUN_ID, "%s", json_string_value(json_object_get(a, "id")));
    snprintf(BV_ID, sizeof BV_ID, "%s", json_string_value(json_object_get(b, "id")));
    assert_int_equal(strlen(RUN_ID), 16);
    json_decref(j);
    resp_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/api/v1/runs/%s", BV_ID); /* the run route answers as for a model's run */
    get(S.port, path, &r);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "id")), BV_ID);
    json_decref(j);
    resp_free(&r);
}

/* GET the attention of run id (all layers and heads) in dtype and compare with want. */
static void check_attention(const char *id, const char *dtype, int L, int H, int T, const float *want) {
    char path[256];
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=0-%d&heads=0-%d&dtype=%s", id, L - 1, H - 1, dtype);
    resp r;
    get(S.port, path, &r);
    assert_int_equal(r.status, 200);
    assert_true(header_has(&r, "application/octet-stream"));
    tb t;
    tb_parse(&r, &t);
    json_t *x = tb_tensor(&t, "attention");
    size_t n = (size_t)L * H * T * T;
    double worst = 0;
    for (size_t k = 0; k < n; k++) worst = fmax(worst, fabs((double)tb_at(&t, x, k) - want[k]));
    /* f32: the file's bytes; f16: rounded once (half an ulp of 1 is 2^-11) */
    assert_true(!strcmp(dtype, "f32") ? worst == 0 : worst <= 1.0 / 2048);
    json_decref(t.hdr);
    resp_free(&r);
}

static void test_attention_bytes(void **state) {
    (void)state;
    float *a = fixture(FIX "run_like.npz", "attentions", 2 * 3 * 6 * 6);
    float *b = fixture(FIX "bertviz_f16.npz", "expected_f32", 2 * 2 * 5 * 5);
    check_attention(RUN_ID, "f32", 2, 3, 6, a);
    check_attention(RUN_ID, "f16", 2, 3, 6, a);
    check_attention(BV_ID, "f32", 2, 2, 5, b); /* float16 in the file: exact as float32 */
    /* the model view's thumbnails: pool 8 >= T keeps every weight */
    char path[256];
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?pool=8&dtype=f32", RUN_ID);
    resp r;
    get(S.port, path, &r);
    assert_int_equal(r.status, 200);
    tb t;
    tb_parse(&r, &t);
    json_t *x = tb_tensor(&t, "attention");
    for (size_t k = 0; k < 2 * 3 * 6 * 6; k++) assert_true(tb_at(&t, x, k) == a[k]);
    json_decref(t.hdr);
    resp_free(&r);
    free(a);
    free(b);
}

static void test_qk(void **state) {
    (void)state;
    float *q = fixture(FIX "run_like.npz", "queries", 2 * 3 * 6 * 4);
    float *s = fixture(FIX "run_like.npz", "attention_scores", 2 * 3 * 6 * 6);
    char path[256];
    snprintf(path, sizeof path, "/api/v1/runs/%s/qk?layer=1&head=2", RUN_ID);
    resp r;
    get(S.port, path, &r);
    assert_int_equal(r.status, 200);
    tb t;
    tb_parse(&r, &t);
    json_t *xq = tb_tensor(&t, "q"), *xs = tb_tensor(&t, "scores");
    for (size_t k = 0; k < 6 * 4; k++) assert_true(tb_at(&t, xq, k) == q[(1 * 3 + 2) * 24 + k]);
    for (size_t k = 0; k < 6 * 6; k++) assert_true(tb_at(&t, xs, k) == s[(1 * 3 + 2) * 36 + k]);
    json_t *meta = json_object_get(t.hdr, "meta");
    assert_float_equal(json_number_value(json_object_get(meta, "scale")), 0.5, 1e-7);
    json_decref(t.hdr);
    resp_free(&r);
    free(q);
    free(s);
}

static void test_model_only_routes(void **state) {
    (void)state;
    const char *subs[] = {"attribution?method=rollout", "tile?layer=0&head=0", "stats"};
    char path[256];
    resp r;
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "/api/v1/runs/%s/%s", RUN_ID, subs[i]);
        get(S.port, path, &r);
        expect_error(&r, 409);
        assert_non_null(strstr((const char *)r.body, "needs a model"));
        resp_free(&r);
    }
    snprintf(path, sizeof path, "/api/v1/runs/%s/qk?layer=0&head=0", BV_ID);
    get(S.port, path, &r);
    expect_error(&r, 409);
    assert_non_null(strstr((const char *)r.body, "no queries, keys and attention_scores"));
    resp_free(&r);
    /* an imported run is no model: POST /run with its name is refused */
    post(S.port, "/api/v1/run", "{\"model\": \"run_like.npz\", \"text\": \"the cat\"}", &r);
    expect_error(&r, 400);
    resp_free(&r);
    /* the model is served alongside */
    post(S.port, "/api/v1/run", "{\"model\": \"demo-bert\", \"text\": \"the cat sat\"}", &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

/* Runs serve with args; returns the exit status, its stderr in err (cap bytes). */
static int serve_fails(const char *file, char *err, size_t cap) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s serve --port 0 --attention %s 2>/tmp/attnscope_npz_%d.err </dev/null", AS_BINARY,
             file, (int)getpid());
    int st = system(cmd);
    snprintf(cmd, sizeof cmd, "/tmp/attnscope_npz_%d.err", (int)getpid());
    char *e = slurp(cmd);
    snprintf(err, cap, "%s", e);
    free(e);
    unlink(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_bad_files_at_startup(void **state) {
    (void)state;
    const char *files[] = {"bad_negative.npz", "bad_nan.npz", "bad_tokens_count.npz", "bad_object_tokens.npz",
                           "bad_not_npz.npz", "bad_shape.npz"};
    for (int i = 0; i < 6; i++) {
        char err[2048];
        char path[512];
        snprintf(path, sizeof path, FIX "%s", files[i]);
        int st = serve_fails(path, err, sizeof err);
        if (st != 2 || !strstr(err, files[i])) fail_msg("%s: exit %d, stderr '%s'", files[i], st, err);
        char *nl = strchr(err, '\n');
        assert_true(nl && nl[1] == 0); /* one line */
    }
}

int main(void) {
    if (binary_missing("test_server_npz")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models_list),
        cmocka_unit_test(test_attention_bytes),
        cmocka_unit_test(test_qk),
        cmocka_unit_test(test_model_only_routes),
        cmocka_unit_test(test_bad_files_at_startup),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
