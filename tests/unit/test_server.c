/* test_server.c — HTTP tests of `attnscope serve`: starts the real binary
 * (AS_BINARY) on 127.0.0.1 with an ephemeral port (--port 0, the bound port read
 * from its stdout), calls every route over plain sockets and checks status codes,
 * JSON fields, the binary tensor container against `attnscope run --format json`
 * of the same text, pooled thumbnails (?pool=N) against the full matrices, every named limit, hostile input (bad JSON, invalid UTF-8,
 * deep nesting, huge bodies, path traversal, bad ranges) and a clean exit 0 on
 * SIGTERM/SIGINT (under ASan this also catches leaks at shutdown).
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


#define MLM_FIXTURE AS_SOURCE_DIR "/tests/ref/fixtures/models/bert_noprefix_mlm"

#include "server_harness.h"

/* ---- fixtures ------------------------------------------------------------------- */

static server S;            /* demo-bert (+ an MLM model with a vocabulary, when the fixture exists) */
static char mlm_dir[256];   /* temp model folder: fixture weights + a generated vocab.txt */
static int have_mlm;

static int make_mlm_model(void) {
    struct stat st;
    if (stat(MLM_FIXTURE "/model.safetensors", &st)) return -1;
    snprintf(mlm_dir, sizeof mlm_dir, "/tmp/attnscope_mlm_%d/mlm-bert", (int)getpid());
    char parent[256];
    snprintf(parent, sizeof parent, "/tmp/attnscope_mlm_%d", (int)getpid());
    mkdir(parent, 0700);
    mkdir(mlm_dir, 0700);
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", mlm_dir);
    symlink(MLM_FIXTURE "/config.json", p);
    snprintf(p, sizeof p, "%s/model.safetensors", mlm_dir);
    symlink(MLM_FIXTURE "/model.safetensors", p);
    snprintf(p, sizeof p, "%s/vocab.txt", mlm_dir);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    /* 112 entries = the fixture's vocab_size: specials at the fixture's ids. */
    const char *words[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog", "ran", "a", "."};
    int n = 0;
    for (size_t i = 0; i < sizeof words / sizeof *words; i++, n++) fprintf(f, "%s\n", words[i]);
    for (char c = 'a'; c <= 'z'; c++, n++) fprintf(f, "%c%c\n", c, c);
    for (char c = 'a'; c <= 'z'; c++, n++) fprintf(f, "##%c\n", c);
    while (n < 112) fprintf(f, "w%d\n", n++);
    fclose(f);
    return 0;
}

static void cleanup_mlm(void) {
    char p[512];
    const char *names[] = {"config.json", "model.safetensors", "vocab.txt"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", mlm_dir, names[i]);
        unlink(p);
    }
    rmdir(mlm_dir);
    snprintf(p, sizeof p, "/tmp/attnscope_mlm_%d", (int)getpid());
    rmdir(p);
}

static int setup(void **state) {
    have_mlm = make_mlm_model() == 0;
    const char *args[] = {"--model", DEMO, "--model", mlm_dir, NULL};
    if (!have_mlm) args[2] = NULL;
    return server_start_or_report(&S, args);
}

static int teardown(void **state) {
    int rc = server_stop_report(&S);
    if (have_mlm) cleanup_mlm();
    return rc == 0 ? 0 : -1;
}

/* POST /run and return the id (static buffer). */
static const char *run_id(const char *json, json_t **out) {
    static char id[64];
    resp r;
    post(S.port, "/api/v1/run", json, &r);
    if (r.status != 200) fprintf(stderr, "run: %d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
    if (out) *out = j;
    else json_decref(j);
    resp_free(&r);
    return id;
}

/* ---- tests ------------------------------------------------------------------------ */

static void test_models(void **state) {
    resp r;
    get(S.port, "/api/v1/models", &r);
    assert_int_equal(r.status, 200);
    assert_true(header_has(&r, "application/json"));
    json_t *j = body_json(&r), *m = json_array_get(json_object_get(j, "models"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "name")), "demo-bert");
    assert_string_equal(json_string_value(json_object_get(m, "arch")), "bert");
    assert_int_equal(json_integer_value(json_object_get(m, "layers")), 2);
    assert_int_equal(json_integer_value(json_object_get(m, "heads")), 4);
    assert_int_equal(json_integer_value(json_object_get(m, "d_model")), 64);
    assert_int_equal(json_integer_value(json_object_get(m, "max_tokens")), 128);
    assert_true(json_is_array(json_object_get(m, "heads_present")));
    json_t *lim = json_object_get(j, "limits");
    assert_int_equal(json_integer_value(json_object_get(lim, "max_body_bytes")), 65536);
    assert_int_equal(json_integer_value(json_object_get(lim, "max_active_runs")), 2);
    if (have_mlm) {
        json_t *m2 = json_array_get(json_object_get(j, "models"), 1);
        assert_string_equal(json_string_value(json_object_get(m2, "name")), "mlm-bert");
        assert_string_equal(json_string_value(json_array_get(json_object_get(m2, "heads_present"), 0)), "mlm");
    }
    json_decref(j);
    resp_free(&r);
}

static void test_run_and_cache(void **state) {
    json_t *j;
    const char *body = "{\"model\":\"demo-bert\",\"text\":\"the king is dead\",\"text_b\":\"long live the king\"}";
    char id[64];
    snprintf(id, sizeof id, "%s", run_id(body, &j));
    assert_int_equal(strlen(id), 16);
    assert_false(json_is_true(json_object_get(j, "cached")));
    json_t *sizes = json_object_get(j, "sizes"), *toks = json_object_get(j, "tokens");
    int T = (int)json_integer_value(json_object_get(sizes, "tokens"));
    assert_int_equal((int)json_array_size(toks), T);
    assert_int_equal(json_integer_value(json_object_get(sizes, "layers")), 2);
    assert_int_equal(json_integer_value(json_object_get(sizes, "heads")), 4);
    assert_int_equal(json_integer_value(json_object_get(sizes, "d_head")), 16);
    json_t *t0 = json_array_get(toks, 0), *t1 = json_array_get(toks, 1), *tl = json_array_get(toks, (size_t)T - 1);
    assert_string_equal(json_string_value(json_object_get(t0, "piece")), "[CLS]");
    assert_true(json_is_true(json_object_get(t0, "special")));
    assert_int_equal(json_integer_value(json_object_get(t0, "start")), -1);
    assert_string_equal(json_string_value(json_object_get(t1, "piece")), "the");
    assert_int_equal(json_integer_value(json_object_get(t1, "start")), 0);
    assert_int_equal(json_integer_value(json_object_get(t1, "end")), 3);
    assert_int_equal(json_integer_value(json_object_get(t1, "segment")), 0);
    assert_int_equal(json_integer_value(json_object_get(tl, "segment")), 1);
    assert_int_equal(json_integer_value(json_object_get(tl, "type_id")), 1);
    json_decref(j);
    /* same key -> same run, from the cache */
    run_id(body, &j);
    assert_true(json_is_true(json_object_get(j, "cached")));
    assert_string_equal(json_string_value(json_object_get(j, "id")), id);
    json_decref(j);
    /* text_b "" or null is the single-sentence key */
    char a[64], b[64];
    snprintf(a, sizeof a, "%s", run_id("{\"model\":\"demo-bert\",\"text\":\"hello\",\"text_b\":null}", NULL));
    snprintf(b, sizeof b, "%s", run_id("{\"model\":\"demo-bert\",\"text\":\"hello\",\"text_b\":\"\"}", NULL));
    assert_string_equal(a, b);
    /* GET /runs/{id} returns the run */
    char path[128];
    snprintf(path, sizeof path, "/api/v1/runs/%s", id);
    resp r;
    get(S.port, path, &r);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    assert_string_equal(json_string_value(json_object_get(j, "text_b")), "long live the king");
    json_decref(j);
    resp_free(&r);
}

/* Runs the CLI on the same text and returns its JSON (attn + qkv + scores, one layer/head). */
static json_t *cli_json(const char *text, const char *text_b, int layer, int head) {
    char out[256], cmd[2048];
    snprintf(out, sizeof out, "/tmp/attnscope_test_server_cli_%d.json", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "'%s' run --model '%s' --text '%s' --text-b '%s' --layer %d --head %d --capture attn,scores,qkv "
             "--format json --out '%s' --threads 2 --quiet",
             AS_BINARY, DEMO, text, text_b, layer, head, out);
    assert_int_equal(system(cmd), 0);
    json_error_t e;
    json_t *j = json_load_file(out, 0, &e);
    unlink(out);
    assert_non_null(j);
    return j;
}

static float nested(json_t *a, int i, int j) { /* a[0][0][i][j] */
    return (float)json_number_value(json_array_get(json_array_get(json_array_get(json_array_get(a, 0), 0), (size_t)i), (size_t)j));
}

static void test_attention_matches_cli(void **state) {
    const char *ta = "the quick brown fox jumps", *tb_ = "it was not amused";
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"demo-bert\",\"text\":\"%s\",\"text_b\":\"%s\"}", ta, tb_);
    json_t *run;
    char id[64];
    snprintf(id, sizeof id, "%s", run_id(body, &run));
    int T = (int)json_integer_value(json_object_get(json_object_get(run, "sizes"), "tokens"));
    json_t *cli = cli_json(ta, tb_, 1, 2);
    json_t *ref = json_object_get(cli, "attentions"), *ids = json_object_get(cli, "input_ids");
    assert_int_equal((int)json_array_size(ids), T);
    for (int i = 0; i < T; i++)
        assert_int_equal(json_integer_value(json_array_get(ids, (size_t)i)),
                         json_integer_value(json_object_get(json_array_get(json_object_get(run, "tokens"), (size_t)i), "id")));
    const char *dtypes[] = {"f32", "f16", "u8"};
    for (int d = 0; d < 3; d++) {
        char path[256];
        snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=1&heads=1-3&dtype=%s", id, dtypes[d]);
        resp r;
        get(S.port, path, &r);
        assert_int_equal(r.status, 200);
        assert_true(header_has(&r, "application/octet-stream"));
        tb t;
        tb_parse(&r, &t);
        json_t *meta = json_object_get(t.hdr, "meta");
        assert_int_equal(json_integer_value(json_array_get(json_object_get(meta, "layers"), 0)), 1);
        assert_int_equal(json_integer_value(json_array_get(json_object_get(meta, "heads"), 1)), 3);
        json_t *x = tb_tensor(&t, "attention");
        assert_string_equal(json_string_value(json_object_get(x, "dtype")), dtypes[d]);
        json_t *shape = json_object_get(x, "shape");
        assert_int_equal(json_integer_value(json_array_get(shape, 0)), 1);
        assert_int_equal(json_integer_value(json_array_get(shape, 1)), 3);
        assert_int_equal(json_integer_value(json_array_get(shape, 2)), T);
        assert_int_equal(json_integer_value(json_array_get(shape, 3)), T);
        /* head 2 is the second captured head (heads 1-3) */
        double tol = d == 0 ? 1e-6 : d == 1 ? 1e-3 : json_number_value(json_object_get(x, "scale")) * 0.51 + 1e-6;
        double maxd = 0;
        for (int i = 0; i < T; i++) {
            double rowsum = 0;
            for (int k = 0; k < T; k++) {
                float v = tb_at(&t, x, (size_t)T * T + (size_t)i * T + (size_t)k);
                rowsum += v;
                double diff = fabs(v - nested(ref, i, k));
                maxd = diff > maxd ? diff : maxd;
            }
            if (d == 0) assert_true(fabs(rowsum - 1.0) < 1e-4);
        }
        printf("attention %s vs CLI: max |diff| %.3g (tol %.3g)\n", dtypes[d], maxd, tol);
        assert_true(maxd <= tol);
        json_decref(t.hdr);
        resp_free(&r);
    }
    /* q / k / scores for the neuron view */
    char path[256];
    snprintf(path, sizeof path, "/api/v1/runs/%s/qk?layer=1&head=2", id);
    resp r;
    get(S.port, path, &r);
    assert_int_equal(r.status, 200);
    tb t;
    tb_parse(&r, &t);
    json_t *q = tb_tensor(&t, "q"), *k = tb_tensor(&t, "k"), *sc = tb_tensor(&t, "scores"), *at = tb_tensor(&t, "attention");
    json_t *meta = json_object_get(t.hdr, "meta");
    int Dh = (int)json_integer_value(json_object_get(meta, "d_head"));
    assert_int_equal(Dh, 16);
    assert_true(fabs(json_number_value(json_object_get(meta, "scale")) - 0.25) < 1e-9);
    json_t *rq = json_object_get(cli, "queries"), *rk = json_object_get(cli, "keys"), *rs = json_object_get(cli, "attention_scores");
    double maxd = 0;
    for (int i = 0; i < T; i++) {
        for (int x = 0; x < Dh; x++) {
            maxd = fmax(maxd, fabs(tb_at(&t, q, (size_t)i * Dh + x) - nested(rq, i, x)));
            maxd = fmax(maxd, fabs(tb_at(&t, k, (size_t)i * Dh + x) - nested(rk, i, x)));
        }
        for (int j = 0; j < T; j++) {
            double dot = 0;
            for (int x = 0; x < Dh; x++) dot += (double)tb_at(&t, q, (size_t)i * Dh + x) * tb_at(&t, k, (size_t)j * Dh + x);
            assert_true(fabs(dot * 0.25 - tb_at(&t, sc, (size_t)i * T + j)) < 1e-4);
            maxd = fmax(maxd, fabs(tb_at(&t, sc, (size_t)i * T + j) - nested(rs, i, j)));
            maxd = fmax(maxd, fabs(tb_at(&t, at, (size_t)i * T + j) - nested(ref, i, j)));
        }
    }
    printf("qk vs CLI: max |diff| %.3g\n", maxd);
    assert_true(maxd < 1e-5);
    json_decref(t.hdr);
    resp_free(&r);
    json_decref(cli);
    json_decref(run);
}

static void test_bad_requests(void **state) {
    struct {
        const char *body;
        int status;
    } cases[] = {
        {"", 400},
        {"{", 400},
        {"[1,2,3]", 400},
        {"\"text\"", 400},
        {"{}", 400},
        {"{\"text\":\"hi\"}", 400},
        {"{\"model\":3,\"text\":\"hi\"}", 400},
        {"{\"model\":\"nope\",\"text\":\"hi\"}", 400},
        {"{\"model\":\"demo-bert\"}", 400},
        {"{\"model\":\"demo-bert\",\"text\":42}", 400},
        {"{\"model\":\"demo-bert\",\"text\":\"hi\",\"text_b\":[1]}", 400},
        {"{\"model\":\"demo-bert\",\"text\":\"\"}", 400},
        {"{\"model\":\"demo-bert\",\"text\":\"\\udc00\"}", 400},        /* lone surrogate */
        {"{\"model\":\"demo-bert\",\"text\":\"a\\u0000b\"}", 400},      /* NUL in a string */
        {"{\"model\":\"demo-bert\",\"model\":\"demo-bert\",\"text\":\"a\"}", 400}, /* duplicate key */
        {"{\"model\":\"demo-bert\",\"text\":\"\xff\xfe bad utf8\"}", 400},
        {"{\"model\":\"\xc3\x28\",\"text\":\"x\"}", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        resp r;
        post(S.port, "/api/v1/run", cases[i].body, &r);
        expect_error(&r, cases[i].status);
        resp_free(&r);
    }
    /* deep nesting */
    size_t n = 20000;
    char *deep = malloc(2 * n + 1);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = 0;
    resp r;
    post(S.port, "/api/v1/run", deep, &r);
    expect_error(&r, 400);
    resp_free(&r);
    free(deep);
    /* too many tokens for the model's positions (128) */
    char *longt = malloc(64 * 1024);
    int k = sprintf(longt, "{\"model\":\"demo-bert\",\"text\":\"");
    for (int i = 0; i < 300; i++) k += sprintf(longt + k, "the ");
    sprintf(longt + k, "\"}");
    post(S.port, "/api/v1/run", longt, &r);
    expect_error(&r, 400);
    printf("too long: %s\n", r.body);
    resp_free(&r);
    free(longt);
}

static void test_body_limits(void **state) {
    size_t n = 100 * 1024;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    big[0] = '{';
    big[n - 1] = '}';
    big[n] = 0;
    resp r;
    post(S.port, "/api/v1/run", big, &r); /* Content-Length over the limit */
    expect_error(&r, 413);
    resp_free(&r);
    /* chunked body without a length, over the limit */
    int fd = connect_port(S.port);
    char head[256];
    int hl = snprintf(head, sizeof head, "POST /api/v1/run HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                                         "Transfer-Encoding: chunked\r\n\r\n");
    send_all(fd, head, (size_t)hl);
    for (int c = 0; c < 10; c++) {
        char ch[32];
        int cl = snprintf(ch, sizeof ch, "%zx\r\n", (size_t)10000);
        send_all(fd, ch, (size_t)cl);
        send_all(fd, big, 10000);
        send_all(fd, "\r\n", 2);
    }
    send_all(fd, "0\r\n\r\n", 5);
    read_resp(fd, &r);
    close(fd);
    expect_error(&r, 413);
    resp_free(&r);
    /* a body of exactly the limit is accepted */
    char *at = malloc(65536 + 1);
    memset(at, ' ', 65536);
    memcpy(at, "{\"model\":\"demo-bert\",\"text\":\"hi\"", 32);
    at[65535] = '}';
    at[65536] = 0;
    post(S.port, "/api/v1/run", at, &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    free(at);
    free(big);
}

static void test_ranges(void **state) {
    char id[64], path[256];
    snprintf(id, sizeof id, "%s", run_id("{\"model\":\"demo-bert\",\"text\":\"a b c\"}", NULL));
    const char *bad[] = {"attention?layers=-1",   "attention?layers=2",     "attention?layers=1-0",
                         "attention?layers=abc",  "attention?layers=0-",    "attention?layers=99999999999999999999",
                         "attention?heads=0-4",   "attention?heads=%2d1",   "attention?dtype=f64",
                         "attention?layers=0x1",  "attention?layers=+1",    "attention?layers=0-1-2",
                         "qk",                    "qk?layer=0",             "qk?layer=0&head=4",
                         "qk?layer=0-1&head=0",   "qk?layer=-5&head=0",     "qk?layer=0&head=99999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(path, sizeof path, "/api/v1/runs/%s/%s", id, bad[i]);
        resp r;
        get(S.port, path, &r);
        expect_error(&r, 400);
        resp_free(&r);
    }
    resp r;
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention", id); /* defaults: everything, f16 */
    get(S.port, path, &r);
    assert_int_equal(r.status, 200);
    tb t;
    tb_parse(&r, &t);
    json_t *x = tb_tensor(&t, "attention");
    assert_string_equal(json_string_value(json_object_get(x, "dtype")), "f16");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(x, "shape"), 0)), 2);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(x, "shape"), 1)), 4);
    json_decref(t.hdr);
    resp_free(&r);
    const char *missing[] = {"/api/v1/runs/0000000000000000/attention", "/api/v1/runs/xyz/attention",
                             "/api/v1/runs/../../etc/passwd", "/api/v1/runs/", "/api/v1/runs/0123456789abcdefg/qk"};
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++) {
        get(S.port, missing[i], &r);
        expect_error(&r, 404);
        resp_free(&r);
    }
}

/* ---- pooled thumbnails: attention?pool=N ------------------------------------------- */

/* Fetches path (under /api/v1/runs/id/) and parses the tensor response; asserts 200. */
static void get_tensors(const char *id, const char *q, resp *r, tb *t) {
    char path[256];
    snprintf(path, sizeof path, "/api/v1/runs/%s/%s", id, q);
    get(S.port, path, r);
    if (r->status != 200) fprintf(stderr, "%s: %d %s\n", path, r->status, r->body ? (char *)r->body : "");
    assert_int_equal(r->status, 200);
    tb_parse(r, t);
}

static int64_t dim(json_t *x, size_t d) { return json_integer_value(json_array_get(json_object_get(x, "shape"), d)); }

/* The max over block (bi, bj) of P x P blocks of head k of the full (., T, T) tensor x,
 * with the blocks docs/server.md documents: block i = [floor(i*T/P), floor((i+1)*T/P)). */
static float block_max(const tb *t, json_t *x, size_t k, int T, int P, int bi, int bj) {
    float m = -INFINITY;
    for (int i = bi * T / P; i < (bi + 1) * T / P; i++)
        for (int j = bj * T / P; j < (bj + 1) * T / P; j++)
            m = fmaxf(m, tb_at(t, x, k * (size_t)T * T + (size_t)i * T + (size_t)j));
    return m;
}

/* Checks the pooled response q of layers [l0, l0+nl) x heads [h0, h0+nh) against the
 * full f32 attention fx: the shape, the meta, and every value within dtype's rounding. */
static void check_pooled(const char *id, const char *q, const tb *full, json_t *fx, int H, int T, int N, int l0,
                           int nl, int h0, int nh, const char *dtype) {
    resp r;
    tb t;
    get_tensors(id, q, &r, &t);
    int P = N < T ? N : T;
    json_t *meta = json_object_get(t.hdr, "meta"), *x = tb_tensor(&t, "attention");
    assert_int_equal(json_integer_value(json_object_get(meta, "pool")), P);
    assert_string_equal(json_string_value(json_object_get(meta, "pool_op")), "max");
    assert_int_equal(json_integer_value(json_object_get(meta, "tokens")), T);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(meta, "layers"), 0)), l0);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(meta, "heads"), 1)), h0 + nh - 1);
    assert_string_equal(json_string_value(json_object_get(x, "dtype")), dtype);
    assert_int_equal(dim(x, 0), nl);
    assert_int_equal(dim(x, 1), nh);
    assert_int_equal(dim(x, 2), P);
    assert_int_equal(dim(x, 3), P);
    size_t esz = !strcmp(dtype, "f32") ? 4 : !strcmp(dtype, "f16") ? 2 : 1;
    assert_int_equal(json_integer_value(json_object_get(x, "nbytes")), (json_int_t)((size_t)nl * nh * P * P * esz));
    double scale = !strcmp(dtype, "u8") ? json_number_value(json_object_get(x, "scale")) : 0;
    if (scale) assert_true(scale <= 1.0 / 255.0 + 1e-7); /* attention lies in [0, 1] */
    double tol = !strcmp(dtype, "f32") ? 0 : !strcmp(dtype, "f16") ? 5e-4 : scale / 2 + 1e-6;
    double maxd = 0;
    for (int l = 0; l < nl; l++)
        for (int h = 0; h < nh; h++)
            for (int bi = 0; bi < P; bi++)
                for (int bj = 0; bj < P; bj++) {
                    float want = block_max(full, fx, (size_t)(l0 + l) * H + (size_t)(h0 + h), T, P, bi, bj);
                    float got = tb_at(&t, x, (((size_t)l * nh + h) * P + bi) * P + bj);
                    maxd = fmax(maxd, fabs((double)got - want));
                }
    printf("pool=%d %s (T=%d, P=%d): max |diff| vs block max %.3g (tol %.3g)\n", N, dtype, T, P, maxd, tol);
    assert_true(maxd <= tol);
    json_decref(t.hdr);
    resp_free(&r);
}

static void test_pool(void **state) {
    json_t *run;
    char id[64], q[160];
    snprintf(id, sizeof id, "%s",
             run_id("{\"model\":\"demo-bert\",\"text\":\"the quick brown fox jumps over the lazy dog near the river bank\","
                    "\"text_b\":\"it was not amused by the noise at all\"}", &run));
    json_t *sizes = json_object_get(run, "sizes");
    int T = (int)json_integer_value(json_object_get(sizes, "tokens")), L = (int)json_integer_value(json_object_get(sizes, "layers")),
        H = (int)json_integer_value(json_object_get(sizes, "heads"));
    json_decref(run);
    /* blocks of uneven size: T is not a multiple of 8 or 16 */
    if (T % 8 == 0 || T <= 16) fail_msg("pick a text whose token count (%d) is > 16 and not a multiple of 8", T);
    resp fr;
    tb full;
    get_tensors(id, "attention?dtype=f32", &fr, &full);
    json_t *fx = tb_tensor(&full, "attention");
    /* every layer and head in one request: f32 exactly the block max, f16 and u8 within their rounding */
    const char *dtypes[] = {"f32", "f16", "u8"};
    for (int d = 0; d < 3; d++) {
        snprintf(q, sizeof q, "attention?pool=8&dtype=%s", dtypes[d]);
        check_pooled(id, q, &full, fx, H, T, 8, 0, L, 0, H, dtypes[d]);
    }
    /* a layer/head subset; the default dtype stays f16 */
    check_pooled(id, "attention?layers=1&heads=2-3&pool=16&dtype=f32", &full, fx, H, T, 16, 1, 1, 2, 2, "f32");
    check_pooled(id, "attention?heads=1&pool=16", &full, fx, H, T, 16, 0, L, 1, 1, "f16");
    /* N >= T: P = T, the matrix itself */
    check_pooled(id, "attention?pool=128&dtype=f32", &full, fx, H, T, 128, 0, L, 0, H, "f32");
    snprintf(q, sizeof q, "attention?pool=%d&dtype=u8", T);
    check_pooled(id, q, &full, fx, H, T, T, 0, L, 0, H, "u8");
    json_decref(full.hdr);
    resp_free(&fr);
    /* bad values: one-line 400s; the server keeps serving */
    const char *bad[] = {"pool=",      "pool=7",        "pool=129",   "pool=0",      "pool=-8",
                         "pool=abc",   "pool=64x",      "pool=%2064", "pool=6%204",  "pool=1e2",
                         "pool=+64",   "pool=64.0",     "pool=0x40",  "pool=%00",    "pool=99999999999999999999",
                         "pool=8&layers=9", "pool=8&dtype=f64", "pool=4294967360"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char path[256];
        snprintf(path, sizeof path, "/api/v1/runs/%s/attention?%s", id, bad[i]);
        resp r;
        get(S.port, path, &r);
        expect_error(&r, 400);
        resp_free(&r);
    }
    resp r;
    get(S.port, "/api/v1/runs/0000000000000000/attention?pool=64", &r); /* pooling never runs a model */
    expect_error(&r, 404);
    resp_free(&r);
}

static void test_routes_and_methods(void **state) {
    resp r;
    const char *notfound[] = {"/api/v1/nope", "/api/v2/models", "/api", "/api/", "/nope.html", "/../etc/passwd",
                              "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2fetc%2fpasswd", "//etc/passwd",
                              "/assets/../index.html", "/index.html/", "/etc/passwd", "/%00", "/index.html%00.js",
                              "/assets/", "/assets"};
    for (size_t i = 0; i < sizeof notfound / sizeof *notfound; i++) {
        get(S.port, notfound[i], &r);
        if (r.status != 404) fprintf(stderr, "%s -> %d\n", notfound[i], r.status);
        assert_int_equal(r.status, 404);
        assert_false(strstr((const char *)r.body, "root:") != NULL);
        resp_free(&r);
    }
    /* absolute-form and asterisk request targets never reach a file */
    http(S.port, "GET", "http://127.0.0.1/etc/passwd", NULL, NULL, 0, &r);
    assert_true(r.status == 404 || r.status == 400);
    resp_free(&r);
    http(S.port, "POST", "/api/v1/models", NULL, "{}", 2, &r);
    expect_error(&r, 405);
    assert_true(header_has(&r, "Allow: GET, HEAD"));
    resp_free(&r);
    http(S.port, "GET", "/api/v1/run", NULL, NULL, 0, &r);
    expect_error(&r, 405);
    assert_true(header_has(&r, "Allow: POST"));
    resp_free(&r);
    http(S.port, "DELETE", "/api/v1/mlm", NULL, NULL, 0, &r);
    expect_error(&r, 405);
    resp_free(&r);
    http(S.port, "PUT", "/index.html", NULL, "x", 1, &r);
    expect_error(&r, 405);
    resp_free(&r);
    /* the front end */
    get(S.port, "/", &r);
    assert_int_equal(r.status, 200);
    assert_true(header_has(&r, "Content-Type: text/html"));
    assert_true(header_has(&r, "Content-Security-Policy"));
    assert_true(header_has(&r, "frame-ancestors 'none'")); /* no framing without --frame-ancestors */
    assert_non_null(strstr((const char *)r.body, "<html") ? strstr((const char *)r.body, "<html") : strstr((const char *)r.body, "<!doctype"));
    /* every script/stylesheet the page names is served with its MIME type */
    const char *p = (const char *)r.body;
    int n_assets = 0;
    while ((p = strstr(p, "/assets/"))) {
        const char *e = strchr(p, '"');
        if (!e) break;
        char path[256];
        snprintf(path, sizeof path, "%.*s", (int)(e - p), p);
        resp a;
        get(S.port, path, &a);
        assert_int_equal(a.status, 200);
        if (strstr(path, ".js")) assert_true(header_has(&a, "Content-Type: text/javascript"));
        if (strstr(path, ".css")) assert_true(header_has(&a, "Content-Type: text/css"));
        assert_true(header_has(&a, "immutable"));
        resp_free(&a);
        n_assets++;
        p = e;
    }
    printf("front end: %d embedded assets referenced by index.html\n", n_assets);
    resp_free(&r);
    http(S.port, "HEAD", "/index.html", NULL, NULL, 0, &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* DNS-rebinding guard: a foreign Host header is refused on a loopback server */
    int fd = connect_port(S.port);
    const char *req = "GET /api/v1/models HTTP/1.1\r\nHost: evil.example:80\r\nConnection: close\r\n\r\n";
    send_all(fd, req, strlen(req));
    read_resp(fd, &r);
    close(fd);
    expect_error(&r, 403);
    resp_free(&r);
    /* garbage on the wire does not take the server down */
    fd = connect_port(S.port);
    unsigned char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)(i * 7919u + 13u);
    send_all(fd, junk, sizeof junk);
    shutdown(fd, SHUT_WR);
    read_resp(fd, &r);
    close(fd);
    resp_free(&r);
    get(S.port, "/api/v1/models", &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

static void test_mlm(void **state) {
    resp r;
    post(S.port, "/api/v1/mlm", "{\"model\":\"demo-bert\",\"text\":\"the [MASK] sat\"}", &r);
    expect_error(&r, 400); /* demo-bert has no MLM head */
    assert_non_null(strstr((const char *)r.body, "masked"));
    resp_free(&r);
    if (!have_mlm) {
        printf("skipping MLM predictions: %s is missing\n", MLM_FIXTURE);
        return;
    }
    post(S.port, "/api/v1/mlm", "{\"model\":\"mlm-bert\",\"text\":\"the cat sat\"}", &r);
    expect_error(&r, 400); /* no mask token */
    resp_free(&r);
    post(S.port, "/api/v1/mlm", "{\"model\":\"mlm-bert\",\"text\":\"the [MASK] sat\",\"k\":0}", &r);
    expect_error(&r, 400);
    resp_free(&r);
    post(S.port, "/api/v1/mlm", "{\"model\":\"mlm-bert\",\"text\":\"the [MASK] sat\",\"k\":3}", &r);
    if (r.status != 200) fprintf(stderr, "mlm: %d %s\n", r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r), *p = json_array_get(json_object_get(j, "predictions"), 0);
    assert_int_equal(json_integer_value(json_object_get(p, "position")), 2);
    json_t *top = json_object_get(p, "top");
    assert_int_equal(json_array_size(top), 3);
    double p0 = json_number_value(json_object_get(json_array_get(top, 0), "prob"));
    double p1 = json_number_value(json_object_get(json_array_get(top, 1), "prob"));
    assert_true(p0 >= p1 && p0 > 0 && p0 <= 1);
    json_decref(j);
    resp_free(&r);
}

/* A second server: one run at a time, slow runs, two cached runs. */
static void test_limits(void **state) {
    server s2;
    const char *args[] = {"--model", DEMO, "--max-runs", "1", "--cache-runs", "2", "--test-delay-ms", "1500", NULL};
    assert_int_equal(server_start(&s2, args), 0);
    /* two runs at once: the second gets 503 with Retry-After */
    int a = connect_port(s2.port);
    char req[512];
    const char *b1 = "{\"model\":\"demo-bert\",\"text\":\"one\"}";
    int n = snprintf(req, sizeof req, "POST /api/v1/run HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s", strlen(b1), b1);
    send_all(a, req, (size_t)n);
    sleep_ms(400);
    resp r;
    post(s2.port, "/api/v1/run", "{\"model\":\"demo-bert\",\"text\":\"two\"}", &r);
    expect_error(&r, 503);
    assert_true(header_has(&r, "Retry-After: 1"));
    resp_free(&r);
    read_resp(a, &r);
    close(a);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    char first[64];
    snprintf(first, sizeof first, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    resp_free(&r);
    /* LRU bound of 2: after two more runs the first is evicted */
    post(s2.port, "/api/v1/run", "{\"model\":\"demo-bert\",\"text\":\"two\"}", &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    post(s2.port, "/api/v1/run", "{\"model\":\"demo-bert\",\"text\":\"three\"}", &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention", first);
    get(s2.port, path, &r);
    expect_error(&r, 404);
    resp_free(&r);
    assert_int_equal(server_stop(&s2, SIGINT), 0); /* SIGINT: clean exit too */
    unlink(s2.err_path);
}

static void test_cli_errors(void **state) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' serve >/dev/null 2>&1", AS_BINARY);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2); /* --model required */
    snprintf(cmd, sizeof cmd, "'%s' serve --model /nonexistent --port 0 >/dev/null 2>&1", AS_BINARY);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof cmd, "'%s' serve --model '%s' --port 70000 >/dev/null 2>&1", AS_BINARY, DEMO);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof cmd, "'%s' serve --model '%s' --host no.such.host.invalid --port 0 >/dev/null 2>&1", AS_BINARY, DEMO);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof cmd, "'%s' serve --help | grep -q -- --host", AS_BINARY);
    assert_int_equal(WEXITSTATUS(system(cmd)), 0);
    /* a non-loopback --host prints a warning (and SIGTERM still exits 0) */
    server w;
    const char *args[] = {"--model", DEMO, "--host", "0.0.0.0", NULL};
    assert_int_equal(server_start(&w, args), 0);
    char *e = slurp(w.err_path);
    assert_non_null(strstr(e, "warning"));
    assert_non_null(strstr(e, "not a loopback"));
    free(e);
    assert_int_equal(server_stop(&w, SIGTERM), 0);
    unlink(w.err_path);
    /* a port in use is an error, not a hang */
    snprintf(cmd, sizeof cmd, "'%s' serve --model '%s' --port %d >/dev/null 2>&1", AS_BINARY, DEMO, S.port);
    assert_int_equal(WEXITSTATUS(system(cmd)), 1);
}

/* ---- a causal (GPT-2) model ------------------------------------------------
 * A small random GPT-2 (make_gpt2_model.mjs: HF names, Conv1D [in, out], the committed
 * byte-level BPE of tests/ref/fixtures/bpe_gpt2, vocab 2000) built at test time. */
static void test_causal_gpt2(void **state) {
    char dir[256], cmd[1024];
    snprintf(dir, sizeof dir, "/tmp/attnscope_gpt2_%d/gpt2-tiny", (int)getpid());
    snprintf(cmd, sizeof cmd, "node '%s/tests/browser/make_gpt2_model.mjs' '%s' 2>&1", AS_SOURCE_DIR, dir);
    if (system(cmd) != 0) {
        printf("test_causal_gpt2: skipped: node could not write the GPT-2 model (is Node.js installed?)\n");
        skip();
    }
    /* the engine loads it */
    char out[300];
    snprintf(out, sizeof out, "%s.info", dir);
    snprintf(cmd, sizeof cmd, "'%s' info --model '%s' > '%s' 2>&1", AS_BINARY, dir, out);
    assert_int_equal(system(cmd), 0);
    char *info = slurp(out);
    unlink(out);
    assert_non_null(strstr(info, "gpt2 (model_type gpt2), causal"));
    assert_non_null(strstr(info, "vocabulary:   2000"));
    assert_non_null(strstr(info, "tokenizer:    yes"));
    free(info);

    server g;
    const char *args[] = {"--model", dir, NULL};
    assert_int_equal(server_start(&g, args), 0);
    resp r;
    get(g.port, "/api/v1/models", &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r), *m = json_array_get(json_object_get(j, "models"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "arch")), "gpt2");
    assert_true(json_is_true(json_object_get(m, "causal")));
    assert_int_equal(json_integer_value(json_object_get(m, "vocab_size")), 2000);
    assert_int_equal(json_integer_value(json_object_get(m, "max_tokens")), 128);
    json_decref(j);
    resp_free(&r);

    /* leading spaces and multi-byte characters (2- and 3-byte UTF-8) in A, a pair B:
     * byte offsets into each token's own sentence; bytes of a split character get the
     * character's span; GPT-2 adds no specials (no [SEP]) and B is segment 1 */
    const char *A = "  H\xc3\xa9llo w\xc3\xb6rld, \xe6\x97\xa5\xe6\x9c\xac caf\xc3\xa9", *B = " and more";
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"gpt2-tiny\",\"text\":\"%s\",\"text_b\":\"%s\"}", A, B);
    post(g.port, "/api/v1/run", body, &r);
    assert_int_equal(r.status, 200);
    j = body_json(&r);
    resp_free(&r);
    assert_true(json_is_true(json_object_get(j, "causal")));
    json_t *toks = json_object_get(j, "tokens");
    const int T = (int)json_array_size(toks);
    static const struct { const char *text; int start, end, seg; } want[] = {
        {" ", 0, 1, 0}, {" H", 1, 3, 0}, {"\xef\xbf\xbd", 3, 5, 0}, {"\xef\xbf\xbd", 3, 5, 0}, {"ll", 5, 7, 0},
        {"o", 7, 8, 0}, {" w", 8, 10, 0}, {"\xef\xbf\xbd", 10, 12, 0}, {"\xef\xbf\xbd", 10, 12, 0}, {"r", 12, 13, 0},
        {"ld", 13, 15, 0}, {",", 15, 16, 0}, {" ", 16, 17, 0}, {"\xef\xbf\xbd", 17, 20, 0},
        {"\xef\xbf\xbd", 17, 20, 0}, {"\xef\xbf\xbd", 17, 20, 0}, {"\xef\xbf\xbd", 20, 23, 0},
        {"\xef\xbf\xbd", 20, 23, 0}, {"\xef\xbf\xbd", 20, 23, 0}, {" c", 23, 25, 0}, {"a", 25, 26, 0},
        {"f", 26, 27, 0}, {"\xef\xbf\xbd", 27, 29, 0}, {"\xef\xbf\xbd", 27, 29, 0}, {" and", 0, 4, 1},
        {" more", 4, 9, 1}};
    const int NW = (int)(sizeof want / sizeof want[0]);
    if (T != NW) fprintf(stderr, "gpt2 tokens: %d, expected %d\n", T, NW);
    assert_int_equal(T, NW);
    for (int i = 0; i < T; i++) {
        json_t *t = json_array_get(toks, (size_t)i);
        int s0 = (int)json_integer_value(json_object_get(t, "start")), s1 = (int)json_integer_value(json_object_get(t, "end"));
        if (s0 != want[i].start || s1 != want[i].end) fprintf(stderr, "token %d: [%d, %d), expected [%d, %d)\n", i, s0, s1, want[i].start, want[i].end);
        assert_int_equal(s0, want[i].start);
        assert_int_equal(s1, want[i].end);
        assert_string_equal(json_string_value(json_object_get(t, "text")), want[i].text);
        assert_int_equal(json_integer_value(json_object_get(t, "segment")), want[i].seg);
        assert_false(json_is_true(json_object_get(t, "special")));
        assert_true(json_integer_value(json_object_get(t, "id")) < 1999); /* never <|endoftext|> or [SEP] */
    }
    char id[64], path[256];
    snprintf(id, sizeof id, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);

    /* attention: exactly zero above the diagonal (every dtype), rows sum to 1 */
    const char *dtypes[] = {"f32", "f16", "u8"};
    for (int d = 0; d < 3; d++) {
        snprintf(path, sizeof path, "/api/v1/runs/%s/attention?dtype=%s", id, dtypes[d]);
        get(g.port, path, &r);
        assert_int_equal(r.status, 200);
        tb t;
        tb_parse(&r, &t);
        json_t *x = tb_tensor(&t, "attention");
        double above = 0, sumerr = 0;
        for (int lh = 0; lh < 2 * 4; lh++)
            for (int i = 0; i < T; i++) {
                double s = 0;
                for (int k = 0; k < T; k++) {
                    float v = tb_at(&t, x, ((size_t)lh * T + (size_t)i) * T + (size_t)k);
                    s += v;
                    if (k > i) above = fmax(above, fabs(v));
                }
                sumerr = fmax(sumerr, fabs(s - 1.0));
            }
        printf("gpt2 attention %s: max |above diagonal| %g, max |row sum - 1| %.3g\n", dtypes[d], above, sumerr);
        assert_true(above == 0.0);
        assert_true(sumerr < (d == 0 ? 1e-5 : d == 1 ? 2e-3 : 0.03));
        json_decref(t.hdr);
        resp_free(&r);
    }
    /* qk: future keys are masked in the scores and 0 in the softmax; allowed scores =
       q.k / (sqrt(8) x 2): the model sets scale_attn_by_inverse_layer_idx, this is layer 1 */
    snprintf(path, sizeof path, "/api/v1/runs/%s/qk?layer=1&head=3", id);
    get(g.port, path, &r);
    assert_int_equal(r.status, 200);
    tb t;
    tb_parse(&r, &t);
    json_t *q = tb_tensor(&t, "q"), *k = tb_tensor(&t, "k"), *sc = tb_tensor(&t, "scores"), *at = tb_tensor(&t, "attention");
    double scale = json_number_value(json_object_get(json_object_get(t.hdr, "meta"), "scale"));
    assert_true(fabs(scale - 1.0 / (sqrt(8.0) * 2.0)) < 1e-7);
    for (int i = 0; i < T; i++)
        for (int jj = 0; jj < T; jj++) {
            float s = tb_at(&t, sc, (size_t)i * T + jj), a = tb_at(&t, at, (size_t)i * T + jj);
            if (jj > i) {
                assert_true(s < -1e30f);
                assert_true(a == 0.0f);
            } else {
                double dot = 0;
                for (int x = 0; x < 8; x++) dot += (double)tb_at(&t, q, (size_t)i * 8 + x) * tb_at(&t, k, (size_t)jj * 8 + x);
                assert_true(fabs(dot * scale - s) < 1e-4);
            }
        }
    json_decref(t.hdr);
    resp_free(&r);
    assert_int_equal(server_stop(&g, SIGTERM), 0);
    unlink(g.err_path);
    snprintf(cmd, sizeof cmd, "rm -rf '/tmp/attnscope_gpt2_%d'", (int)getpid());
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    if (binary_missing("test_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_models),          cmocka_unit_test(test_run_and_cache),
        cmocka_unit_test(test_attention_matches_cli), cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_body_limits),     cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_routes_and_methods), cmocka_unit_test(test_mlm),
        cmocka_unit_test(test_limits),          cmocka_unit_test(test_cli_errors),
        cmocka_unit_test(test_causal_gpt2),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
