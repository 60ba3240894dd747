/* test_server_llama.c — `attnscope serve` on the LLaMA-family fixtures
 * (tests/ref/fixtures/models/{llama,mistral_swa,gemma2,gemma3}: small random models
 * without a tokenizer): runs made from token ids, the block description in GET /models
 * and in the run (kv groups, causal, per-layer sliding windows, RoPE, soft-caps) checked
 * against the fixtures' config.json, and the qk route's q, k, scores and their pre-RoPE
 * q_pre_rope / k_pre_rope equal to what as_forward captures for the same ids in this
 * process; masked cells of a sliding window located in the scores; bad ids refused with
 * one-line 400s. Starts the real binary (server_harness.h).
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

#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/models/"

#include "server_harness.h"

static server S;

static int setup(void **state) {
    const char *args[] = {"--model", FIX "llama", "--model", FIX "mistral_swa", "--model", FIX "gemma2",
                          "--model", FIX "gemma3", NULL};
    return server_start_or_report(&S, args);
}

static int teardown(void **state) { return server_stop_report(&S) == 0 ? 0 : -1; }

static const int IDS[] = {1, 5, 9, 17, 33, 2, 40, 7, 11, 23};
#define N_IDS ((int)(sizeof IDS / sizeof IDS[0]))

/* POST /run of IDS on model; returns the response JSON (caller decrefs). */
static json_t *run_ids(const char *model) {
    char body[512];
    int n = snprintf(body, sizeof body, "{\"model\":\"%s\",\"ids\":[", model);
    for (int i = 0; i < N_IDS; i++) n += snprintf(body + n, sizeof body - (size_t)n, i ? ",%d" : "%d", IDS[i]);
    snprintf(body + n, sizeof body - (size_t)n, "]}");
    resp r;
    post(S.port, "/api/v1/run", body, &r);
    if (r.status != 200) fprintf(stderr, "run %s: %d %s\n", model, r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    resp_free(&r);
    return j;
}

static json_t *model_info(json_t *models, const char *name) {
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(models, "models"), i, m) if (!strcmp(json_string_value(json_object_get(m, "name")), name)) return m;
    fail_msg("model %s not listed", name);
    return NULL;
}

static int int_at(json_t *arr, size_t i) { return (int)json_integer_value(json_array_get(arr, i)); }

/* The block description of GET /models equals the fixtures' config.json. */
static void test_models_block(void **state) {
    resp r;
    get(S.port, "/api/v1/models", &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    resp_free(&r);

    json_t *m = model_info(j, "llama"), *b = json_object_get(m, "block");
    assert_string_equal(json_string_value(json_object_get(m, "arch")), "llama");
    assert_string_equal(json_string_value(json_object_get(m, "model_type")), "llama");
    assert_false(json_is_true(json_object_get(m, "tokenizer")));
    assert_int_equal(json_integer_value(json_object_get(b, "n_kv_head")), 2);
    int want_kv[4] = {0, 0, 1, 1};
    for (int h = 0; h < 4; h++) assert_int_equal(int_at(json_object_get(b, "kv_group"), (size_t)h), want_kv[h]);
    assert_true(json_is_true(json_object_get(b, "causal")));
    assert_int_equal(int_at(json_object_get(b, "window"), 0), 0);
    json_t *rope = json_object_get(b, "rope");
    assert_int_equal(json_integer_value(json_object_get(rope, "dim")), 8);
    assert_true(fabs(json_number_value(json_object_get(rope, "theta")) - 10000.0) < 1e-3);
    assert_string_equal(json_string_value(json_object_get(rope, "scaling")), "none");
    assert_true(json_is_null(json_object_get(rope, "factor")));
    assert_true(fabs(json_number_value(json_array_get(json_object_get(b, "scale"), 1)) - 1.0 / sqrt(8.0)) < 1e-6);

    b = json_object_get(model_info(j, "mistral_swa"), "block"); /* sliding_window 5 on every layer */
    assert_int_equal(int_at(json_object_get(b, "window"), 0), 5);
    assert_int_equal(int_at(json_object_get(b, "window"), 1), 5);

    b = json_object_get(model_info(j, "gemma2"), "block"); /* soft-caps */
    assert_true(json_number_value(json_object_get(b, "attn_softcap")) > 0);
    assert_true(json_number_value(json_object_get(b, "final_softcap")) > 0);

    b = json_object_get(model_info(j, "gemma3"), "block"); /* local base on its sliding layers */
    rope = json_object_get(b, "rope");
    assert_false(json_is_null(json_object_get(rope, "local_theta")));
    json_t *win = json_object_get(b, "window"), *lt = json_object_get(rope, "layer_theta");
    for (size_t l = 0; l < json_array_size(win); l++) {
        double want = int_at(win, l) > 0 ? json_number_value(json_object_get(rope, "local_theta"))
                                         : json_number_value(json_object_get(rope, "theta"));
        assert_true(fabs(json_number_value(json_array_get(lt, l)) - want) < 1e-3);
    }
    json_decref(j);
}

/* A run from ids: its fields, then q, k, scores and q/k before RoPE of every head of the
 * last layer equal to as_forward's capture of the same ids. */
static void check_run(const char *model, int window) {
    json_t *run = run_ids(model);
    assert_string_equal(json_string_value(json_object_get(run, "arch")), "llama");
    assert_string_equal(json_string_value(json_object_get(run, "text")), "");
    json_t *ids = json_object_get(run, "ids"), *sizes = json_object_get(run, "sizes");
    assert_int_equal((int)json_array_size(ids), N_IDS);
    for (int i = 0; i < N_IDS; i++) assert_int_equal(int_at(ids, (size_t)i), IDS[i]);
    assert_int_equal(json_integer_value(json_object_get(sizes, "tokens")), N_IDS);
    assert_int_equal(json_integer_value(json_object_get(sizes, "kv_heads")), 2);
    char id[64];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(run, "id")));
    json_t *kvg = json_object_get(json_object_get(run, "block"), "kv_group");

    /* the same ids through the library */
    char dir[512];
    snprintf(dir, sizeof dir, FIX "%s", model);
    as_error err = {0};
    as_model *m = NULL;
    assert_int_equal(as_model_load(dir, &m, &err), AS_OK);
    int32_t ids32[N_IDS];
    for (int i = 0; i < N_IDS; i++) ids32[i] = IDS[i];
    as_encoding enc = {0};
    assert_int_equal(as_encoding_from_ids(m, ids32, NULL, N_IDS, &enc, &err), AS_OK);
    as_capture_spec spec = {.what = CAP_ATTN | CAP_SCORES | CAP_QKV, .layer = -1, .head = -1, .threads = 1};
    as_run *ar = NULL;
    assert_int_equal(as_forward(m, &enc, &spec, &ar, &err), AS_OK);
    assert_non_null(ar->q_pre);
    const int T = N_IDS, Dh = ar->Dh, l = ar->L - 1;
    for (int h = 0; h < ar->H; h++) {
        assert_int_equal(int_at(kvg, (size_t)h), as_run_kv_group(ar, h));
        char path[256];
        snprintf(path, sizeof path, "/api/v1/runs/%s/qk?layer=%d&head=%d", id, l, h);
        resp r;
        get(S.port, path, &r);
        assert_int_equal(r.status, 200);
        assert_true(header_has(&r, "application/octet-stream"));
        tb t;
        tb_parse(&r, &t);
        json_t *meta = json_object_get(t.hdr, "meta");
        assert_true(json_is_true(json_object_get(meta, "rope")));
        assert_int_equal(json_integer_value(json_object_get(meta, "kv_group")), as_run_kv_group(ar, h));
        assert_int_equal(json_integer_value(json_object_get(meta, "window")), window);
        size_t off = ((size_t)l * (size_t)ar->H + (size_t)h) * (size_t)T * (size_t)Dh;
        const float *want[4] = {ar->q_pre + off, ar->k_pre + off, as_run_q(ar, l, h), as_run_k(ar, l, h)};
        const char *names[4] = {"q_pre_rope", "k_pre_rope", "q", "k"};
        double maxd = 0, rot = 0;
        for (int n = 0; n < 4; n++) {
            json_t *x = tb_tensor(&t, names[n]);
            assert_int_equal(int_at(json_object_get(x, "shape"), 0), T);
            assert_int_equal(int_at(json_object_get(x, "shape"), 1), Dh);
            for (int k = 0; k < T * Dh; k++) maxd = fmax(maxd, fabs((double)tb_at(&t, x, (size_t)k) - want[n][k]));
        }
        /* the rotation changes q (position 0 aside) */
        json_t *qp = tb_tensor(&t, "q_pre_rope"), *q = tb_tensor(&t, "q");
        for (int k = Dh; k < T * Dh; k++) rot = fmax(rot, fabs((double)tb_at(&t, qp, (size_t)k) - tb_at(&t, q, (size_t)k)));
        /* masked cells: later keys, and keys outside the window */
        json_t *sc = tb_tensor(&t, "scores");
        const float *ws = as_run_scores(ar, l, h);
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) {
                int masked = j > i || (window > 0 && j <= i - window);
                float s = tb_at(&t, sc, (size_t)i * T + j);
                assert_int_equal(s < -1e30f, masked);
                maxd = fmax(maxd, fabs((double)s - ws[i * T + j]) * !masked);
            }
        printf("%s L%d H%d: max |served - as_forward| %g (q, k, scores, q/k before RoPE); max |q - q_pre| %g\n", model,
               l, h, maxd, rot);
        assert_true(maxd == 0.0);
        assert_true(rot > 1e-4);
        json_decref(t.hdr);
        resp_free(&r);
    }
    as_run_free(ar);
    as_encoding_free(&enc);
    as_model_free(m);

    /* the same ids again: a cache hit, and GET /runs/{id} answers the same ids */
    json_t *again = run_ids(model);
    assert_true(json_is_true(json_object_get(again, "cached")));
    assert_string_equal(json_string_value(json_object_get(again, "id")), id);
    json_decref(again);
    json_decref(run);
}

static void test_llama_run(void **state) { check_run("llama", 0); }
static void test_mistral_window(void **state) { check_run("mistral_swa", 5); }

/* --precision bf16: the models say so, and a run's logits move by BF16 rounding only. */
static void test_precision(void **state) {
    (void)state;
    resp r;
    get(S.port, "/api/v1/models", &r);
    json_t *j = body_json(&r);
    resp_free(&r);
    assert_string_equal(json_string_value(json_object_get(model_info(j, "llama"), "precision")), "f32");
    json_decref(j);
    server B;
    const char *args[] = {"--model", FIX "llama", "--precision", "bf16", NULL};
    assert_int_equal(server_start_or_report(&B, args), 0);
    get(B.port, "/api/v1/models", &r);
    j = body_json(&r);
    resp_free(&r);
    assert_string_equal(json_string_value(json_object_get(model_info(j, "llama"), "precision")), "bf16");
    json_decref(j);
    const char *body = "{\"model\":\"llama\",\"ids\":[1,5,9,17,33,2,40,7,11,23]}";
    resp ra, rb;
    post(S.port, "/api/v1/run", body, &ra);
    post(B.port, "/api/v1/run", body, &rb);
    assert_int_equal(ra.status, 200);
    assert_int_equal(rb.status, 200);
    json_t *ja = body_json(&ra), *jb = body_json(&rb);
    resp_free(&ra);
    resp_free(&rb);
    /* the same run's attention (f32) on both servers: close, not equal */
    char path[200];
    resp aa, ab;
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?dtype=f32",
             json_string_value(json_object_get(ja, "id")));
    get(S.port, path, &aa);
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?dtype=f32",
             json_string_value(json_object_get(jb, "id")));
    get(B.port, path, &ab);
    assert_int_equal(aa.status, 200);
    assert_int_equal(ab.status, 200);
    tb ta, tbb;
    tb_parse(&aa, &ta);
    tb_parse(&ab, &tbb);
    json_t *xa = tb_tensor(&ta, "attention"), *xb = tb_tensor(&tbb, "attention");
    size_t n = (size_t)json_integer_value(json_object_get(xa, "nbytes")) / 4;
    double d = 0.0;
    for (size_t k = 0; k < n; k++) d = fmax(d, fabs((double)tb_at(&ta, xa, k) - tb_at(&tbb, xb, k)));
    printf("attention f32 vs bf16 server: max|diff| %.2e\n", d);
    assert_true(d > 0.0 && d < 0.05);
    json_decref(ta.hdr);
    json_decref(tbb.hdr);
    resp_free(&aa);
    resp_free(&ab);
    json_decref(ja);
    json_decref(jb);
    assert_int_equal(server_stop_report(&B), 0);
}

static void test_bad_ids(void **state) {
    const char *bad[] = {
        "{\"model\":\"llama\",\"ids\":[]}",           "{\"model\":\"llama\",\"ids\":[1,-1]}",
        "{\"model\":\"llama\",\"ids\":[1,2.5]}",       "{\"model\":\"llama\",\"ids\":\"1,2\"}",
        "{\"model\":\"llama\",\"ids\":[1,53]}",        "{\"model\":\"llama\",\"ids\":[1,4294967297]}",
        "{\"model\":\"llama\",\"ids\":[1],\"text\":\"x\"}", "{\"model\":\"llama\",\"text\":\"no tokenizer\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        resp r;
        post(S.port, "/api/v1/run", bad[i], &r);
        expect_error(&r, 400);
        resp_free(&r);
    }
    /* more ids than positions (max_position_embeddings 256) */
    char body[4096];
    int n = snprintf(body, sizeof body, "{\"model\":\"llama\",\"ids\":[");
    for (int i = 0; i < 300; i++) n += snprintf(body + n, sizeof body - (size_t)n, i ? ",1" : "1");
    snprintf(body + n, sizeof body - (size_t)n, "]}");
    resp r;
    post(S.port, "/api/v1/run", body, &r);
    expect_error(&r, 400);
    resp_free(&r);
}

int main(void) {
    if (binary_missing("test_server_llama")) return 1;
    struct stat st;
    if (stat(FIX "llama/model.safetensors", &st)) {
        fprintf(stderr, "test_server_llama: the LLaMA fixtures are missing (tests/ref/gen_llama.py writes them)\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models_block),
        cmocka_unit_test(test_precision),
        cmocka_unit_test(test_llama_run),
        cmocka_unit_test(test_mistral_window),
        cmocka_unit_test(test_bad_ids),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
