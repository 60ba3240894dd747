/* test_server_long.c — `attnscope serve` on long runs: the capture a POST /run chooses
 * ("auto": dense up to SRV_LONG_TOKENS tokens, else stats,qkv; or forced by "capture"),
 * GET .../tile (pooled max and mean blocks of one head's attention, recomputed from q and k
 * for a stats,qkv run) equal to the same blocks pooled here from the dense attention of the
 * same input (<= 1e-6), its cells at full resolution, the sink-excluded renormalisation
 * against one computed here from the dense matrix, GET .../stats, the dense routes refused
 * for a long run, and bad parameters answered with one-line 400s. Models: the llama,
 * mistral_swa (sliding window) and gemma2 (window and soft-cap) fixtures, and the llama
 * fixture with 2048 positions (a copy of its folder with a longer config: RoPE has no
 * position table) for the automatic switch. Starts the real binary (server_harness.h).
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
static char LONG_DIR[64]; /* the llama fixture with 2048 positions, in a temporary folder */

/* Copies FIX llama into LONG_DIR with max_position_embeddings 2048; 0 or -1. */
static int make_long_model(void) {
    snprintf(LONG_DIR, sizeof LONG_DIR, "/tmp/as_long_XXXXXX");
    if (!mkdtemp(LONG_DIR)) return -1;
    json_error_t je;
    json_t *cfg = json_load_file(FIX "llama/config.json", 0, &je);
    if (!cfg) return -1;
    json_object_set_new(cfg, "max_position_embeddings", json_integer(2048));
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", LONG_DIR);
    int rc = json_dump_file(cfg, path, 0);
    json_decref(cfg);
    snprintf(path, sizeof path, "%s/model.safetensors", LONG_DIR);
    FILE *in = fopen(FIX "llama/model.safetensors", "rb"), *out = fopen(path, "wb");
    char buf[65536];
    size_t n;
    while (!rc && in && out && (n = fread(buf, 1, sizeof buf, in)) > 0) rc = fwrite(buf, 1, n, out) != n;
    rc = rc || !in || !out || ferror(in);
    if (in) fclose(in);
    if (out && fclose(out)) rc = 1;
    return rc ? -1 : 0;
}

static int setup(void **state) {
    (void)state;
    if (make_long_model()) return -1;
    const char *args[] = {"--model", FIX "llama", "--model", FIX "mistral_swa", "--model", FIX "gemma2",
                          "--model", LONG_DIR, "--threads", "2", NULL};
    return server_start_or_report(&S, args);
}

static int teardown(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/config.json", LONG_DIR);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", LONG_DIR);
    unlink(path);
    rmdir(LONG_DIR);
    return server_stop_report(&S) == 0 ? 0 : -1;
}

/* POST /run of T ids ((i * 7 + 3) % 50) on model with capture (NULL: none given); the
 * run's id into id, its capture into cap. Asserts 200. */
static void run_ids(const char *model, int T, const char *capture, char id[32], char cap[16]) {
    size_t n = 0, sz = 64 + (size_t)T * 4;
    char *body = malloc(sz);
    assert_non_null(body);
    n += (size_t)snprintf(body, sz, "{\"model\":\"%s\",", model);
    if (capture) n += (size_t)snprintf(body + n, sz - n, "\"capture\":\"%s\",", capture);
    n += (size_t)snprintf(body + n, sz - n, "\"ids\":[");
    for (int i = 0; i < T; i++) n += (size_t)snprintf(body + n, sz - n, i ? ",%d" : "%d", (i * 7 + 3) % 50);
    snprintf(body + n, sz - n, "]}");
    resp r;
    post(S.port, "/api/v1/run", body, &r);
    free(body);
    if (r.status != 200) fprintf(stderr, "run %s: %d %s\n", model, r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    snprintf(id, 32, "%s", json_string_value(json_object_get(j, "id")));
    snprintf(cap, 16, "%s", json_string_value(json_object_get(j, "capture")));
    json_decref(j);
    resp_free(&r);
}

/* GET path; asserts 200 and returns tensor name as floats (malloc'd), its shape in d0, d1. */
static float *get_tensor(const char *path, const char *name, int *d0, int *d1, json_t **meta) {
    resp r;
    get(S.port, path, &r);
    if (r.status != 200) fprintf(stderr, "%s: %d %s\n", path, r.status, r.body);
    assert_int_equal(r.status, 200);
    assert_true(header_has(&r, "application/octet-stream"));
    tb t;
    tb_parse(&r, &t);
    json_t *x = tb_tensor(&t, name), *shape = json_object_get(x, "shape");
    size_t n = 1;
    for (size_t k = 0; k < json_array_size(shape); k++) n *= (size_t)json_integer_value(json_array_get(shape, k));
    *d0 = (int)json_integer_value(json_array_get(shape, json_array_size(shape) - 2));
    *d1 = (int)json_integer_value(json_array_get(shape, json_array_size(shape) - 1));
    float *out = malloc(n * sizeof *out);
    assert_non_null(out);
    for (size_t k = 0; k < n; k++) out[k] = tb_at(&t, x, k);
    if (meta) *meta = json_incref(json_object_get(t.hdr, "meta"));
    json_decref(t.hdr);
    resp_free(&r);
    return out;
}

/* The tile of rows [i0, i1) x cols [j0, j1) pooled onto at most n x n blocks, computed here
 * from the dense (T, T) attention a: each row first renormalised without the keys of ex
 * (n_ex of them). mx, mean: (Pr, Pc). */
static void ref_tile(const float *a, int T, int i0, int i1, int j0, int j1, int n, const int *ex, int n_ex, double *mx,
                     double *mean, int *Pr, int *Pc) {
    int R = i1 - i0, C = j1 - j0;
    *Pr = R < n ? R : n;
    *Pc = C < n ? C : n;
    double *row = malloc(sizeof(double) * (size_t)T);
    assert_non_null(row);
    for (int k = 0; k < *Pr * *Pc; k++) {
        mx[k] = -INFINITY;
        mean[k] = 0;
    }
    for (int i = i0; i < i1; i++) {
        double kept = 0;
        for (int j = 0; j < T; j++) row[j] = a[(size_t)i * T + j];
        for (int e = 0; e < n_ex; e++) row[ex[e]] = 0;
        for (int j = 0; j < T; j++) kept += row[j];
        if (n_ex)
            for (int j = 0; j < T; j++) row[j] = kept > 0 ? row[j] / kept : 0;
        int bi = 0;
        while ((int)(((long long)(bi + 1) * R) / *Pr) <= i - i0) bi++;
        for (int bj = 0; bj < *Pc; bj++) {
            int k0 = (int)(((long long)bj * C) / *Pc), k1 = (int)(((long long)(bj + 1) * C) / *Pc);
            for (int j = j0 + k0; j < j0 + k1; j++) {
                mx[bi * *Pc + bj] = fmax(mx[bi * *Pc + bj], row[j]);
                mean[bi * *Pc + bj] += row[j];
            }
        }
    }
    for (int bi = 0; bi < *Pr; bi++)
        for (int bj = 0; bj < *Pc; bj++) {
            int r = (int)(((long long)(bi + 1) * R) / *Pr) - (int)(((long long)bi * R) / *Pr);
            int c = (int)(((long long)(bj + 1) * C) / *Pc) - (int)(((long long)bj * C) / *Pc);
            mean[bi * *Pc + bj] /= (double)r * c;
        }
    free(row);
}

/* One tile of run id against ref_tile of a; returns the largest difference of max and mean. */
static double check_tile(const char *id, int l, int h, const float *a, int T, int i0, int i1, int j0, int j1, int n,
                         const char *exclude, const int *ex, int n_ex, const char *source) {
    char path[256];
    snprintf(path, sizeof path, "/api/v1/runs/%s/tile?layer=%d&head=%d&rows=%d-%d&cols=%d-%d&n=%d%s%s", id, l, h, i0,
             i1 - 1, j0, j1 - 1, n, exclude ? "&exclude=" : "", exclude ? exclude : "");
    int pr, pc, pr2, pc2, Pr, Pc;
    json_t *meta;
    float *mx = get_tensor(path, "max", &pr, &pc, &meta), *mean = get_tensor(path, "mean", &pr2, &pc2, NULL);
    assert_string_equal(json_string_value(json_object_get(meta, "source")), source);
    assert_int_equal(json_array_size(json_object_get(meta, "exclude")), (size_t)n_ex);
    json_decref(meta);
    double *rmx = malloc(sizeof(double) * 256 * 256), *rmean = malloc(sizeof(double) * 256 * 256);
    ref_tile(a, T, i0, i1, j0, j1, n, ex, n_ex, rmx, rmean, &Pr, &Pc);
    assert_int_equal(pr, Pr);
    assert_int_equal(pc, Pc);
    double d = 0;
    for (int k = 0; k < Pr * Pc; k++) d = fmax(d, fmax(fabs(mx[k] - rmx[k]), fabs(mean[k] - rmean[k])));
    if (Pr == i1 - i0 && Pc == j1 - j0) /* full resolution: max and mean are the cell itself */
        for (int k = 0; k < Pr * Pc; k++) assert_true(mx[k] == mean[k]);
    free(mx);
    free(mean);
    free(rmx);
    free(rmean);
    return d;
}

/* For model at T tokens: a dense and a stats,qkv run of the same ids; every head's tiles
 * from both equal the blocks pooled here from the dense f32 attention. */
static void check_model(const char *model, int T) {
    char dense[32], rec[32], cap[16];
    run_ids(model, T, "dense", dense, cap);
    assert_string_equal(cap, "dense");
    run_ids(model, T, "stats,qkv", rec, cap);
    assert_string_equal(cap, "stats,qkv");
    assert_string_not_equal(dense, rec); /* the capture is part of the cache key */
    double worst = 0, worst_ex = 0;
    for (int l = 0; l < 2; l++)
        for (int h = 0; h < 4; h++) {
            char path[160];
            int t0, t1;
            snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=%d&heads=%d&dtype=f32", dense, l, h);
            float *a = get_tensor(path, "attention", &t0, &t1, NULL);
            assert_int_equal(t0, T);
            const int ex0[] = {0}, ex2[] = {0, 3};
            for (int s = 0; s < 2; s++) {
                const char *id = s ? rec : dense, *src = s ? "recomputed" : "dense";
                worst = fmax(worst, check_tile(id, l, h, a, T, 0, T, 0, T, 16, NULL, NULL, 0, src));
                worst = fmax(worst, check_tile(id, l, h, a, T, 7, T - 3, 3, T - 20, 10, NULL, NULL, 0, src));
                worst = fmax(worst, check_tile(id, l, h, a, T, 20, 41, 0, T, 256, NULL, NULL, 0, src));
                worst = fmax(worst, check_tile(id, l, h, a, T, 9, 10, 4, 5, 1, NULL, NULL, 0, src));
                worst_ex = fmax(worst_ex, check_tile(id, l, h, a, T, 0, T, 0, T, 256, "0", ex0, 1, src));
                worst_ex = fmax(worst_ex, check_tile(id, l, h, a, T, 5, T, 0, T, 13, "0,3", ex2, 2, src));
            }
            free(a);
        }
    printf("%s T=%d: tiles (dense and recomputed) vs pooled dense attention: max diff %.3g; sink-excluded %.3g\n",
           model, T, worst, worst_ex);
    assert_true(worst <= 1e-6);
    assert_true(worst_ex <= 1e-6);

    /* head statistics: the same in both captures */
    int d0, d1;
    char path[128];
    snprintf(path, sizeof path, "/api/v1/runs/%s/stats", dense);
    float *sa = get_tensor(path, "head_stats", &d0, &d1, NULL);
    assert_int_equal(d0, 4);
    assert_int_equal(d1, AS_HEAD_N_STATS);
    snprintf(path, sizeof path, "/api/v1/runs/%s/stats", rec);
    float *sb = get_tensor(path, "head_stats", &d0, &d1, NULL);
    for (int k = 0; k < 2 * 4 * AS_HEAD_N_STATS; k++) assert_true(fabsf(sa[k] - sb[k]) <= 1e-6f * fmaxf(1, fabsf(sa[k])));
    free(sa);
    free(sb);
}

static void test_tiles_llama(void **state) {
    (void)state;
    check_model("llama", 100);
}
static void test_tiles_window(void **state) {
    (void)state;
    check_model("mistral_swa", 77);
}
static void test_tiles_softcap(void **state) {
    (void)state;
    check_model("gemma2", 64);
}

/* Over SRV_LONG_TOKENS tokens, "auto" captures stats,qkv: no dense routes, tiles equal the
 * dense run's of the same ids. */
static void test_auto_long(void **state) {
    (void)state;
    const char *name = strrchr(LONG_DIR, '/') + 1;
    char id[32], id2[32], dense[32], cap[16];
    run_ids(name, 1000, NULL, id, cap);
    assert_string_equal(cap, "dense");
    run_ids(name, 1100, NULL, id, cap);
    assert_string_equal(cap, "stats,qkv");
    run_ids(name, 1100, "auto", id2, cap);
    assert_string_equal(id, id2); /* a cache hit */
    char path[160];
    resp r;
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=0&heads=0", id);
    get(S.port, path, &r);
    expect_error(&r, 400);
    resp_free(&r);
    snprintf(path, sizeof path, "/api/v1/runs/%s/qk?layer=0&head=0", id);
    get(S.port, path, &r);
    expect_error(&r, 400);
    resp_free(&r);
    run_ids(name, 1100, "dense", dense, cap);
    assert_string_equal(cap, "dense");
    int t0, t1;
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?layers=1&heads=2&dtype=f32", dense);
    float *a = get_tensor(path, "attention", &t0, &t1, NULL);
    const int ex0[] = {0};
    double d = check_tile(id, 1, 2, a, 1100, 0, 1100, 0, 1100, 128, NULL, NULL, 0, "recomputed");
    d = fmax(d, check_tile(id, 1, 2, a, 1100, 0, 1100, 0, 1100, 100, "0", ex0, 1, "recomputed"));
    d = fmax(d, check_tile(id, 1, 2, a, 1100, 1000, 1064, 990, 1054, 64, NULL, NULL, 0, "recomputed"));
    printf("T=1100 auto: recomputed tiles vs pooled dense attention: max diff %.3g\n", d);
    assert_true(d <= 1e-6);
    free(a);
}

static void test_bad_params(void **state) {
    (void)state;
    char id[32], cap[16];
    run_ids("llama", 40, "stats,qkv", id, cap);
    const char *bad[] = {"",          "layer=0",         "head=0",          "layer=2&head=0",  "layer=0&head=4",
                         "layer=-1&head=0", "layer=a&head=0", "layer=0&head=0&rows=5-2", "layer=0&head=0&rows=0-40",
                         "layer=0&head=0&cols=abc", "layer=0&head=0&cols=-1", "layer=0&head=0&n=0",
                         "layer=0&head=0&n=257", "layer=0&head=0&n=1e2", "layer=0&head=0&n=",
                         "layer=0&head=0&exclude=", "layer=0&head=0&exclude=a", "layer=0&head=0&exclude=0,,1",
                         "layer=0&head=0&exclude=40", "layer=0&head=0&exclude=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
                         "layer=0&head=0&exclude=0,", "layer=0&head=0&dtype=f64"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, "/api/v1/runs/%s/tile?%s", id, bad[k]);
        resp r;
        get(S.port, path, &r);
        if (r.status != 400) fprintf(stderr, "%s: %d\n", bad[k], r.status);
        expect_error(&r, 400);
        resp_free(&r);
    }
    const char *bad_runs[] = {"{\"model\":\"llama\",\"ids\":[1,2],\"capture\":\"bogus\"}",
                              "{\"model\":\"llama\",\"ids\":[1,2],\"capture\":5}",
                              "{\"model\":\"llama\",\"ids\":[1,2],\"capture\":null}",
                              "{\"model\":\"llama\",\"ids\":[1,2],\"capture\":\"stats\"}"};
    for (size_t k = 0; k < sizeof bad_runs / sizeof bad_runs[0]; k++) {
        resp r;
        post(S.port, "/api/v1/run", bad_runs[k], &r);
        expect_error(&r, 400);
        resp_free(&r);
    }
    resp r;
    get(S.port, "/api/v1/runs/0123456789abcdef/tile?layer=0&head=0", &r);
    expect_error(&r, 404);
    resp_free(&r);
    get(S.port, "/api/v1/runs/0123456789abcdef/stats", &r);
    expect_error(&r, 404);
    resp_free(&r);
    char path[128];
    snprintf(path, sizeof path, "/api/v1/runs/%s/stats?dtype=x", id);
    get(S.port, path, &r);
    expect_error(&r, 400);
    resp_free(&r);
}

int main(void) {
    if (binary_missing("test_server_long")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiles_llama),  cmocka_unit_test(test_tiles_window), cmocka_unit_test(test_tiles_softcap),
        cmocka_unit_test(test_auto_long),    cmocka_unit_test(test_bad_params),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
