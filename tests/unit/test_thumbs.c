/* test_thumbs.c — the model view's thumbnails pooled by the forward (CAP_THUMBS) and the
 * route that serves them:
 *  1. as_forward's thumbnails (max and mean of each block of AS_THUMB_SIDE x AS_THUMB_SIDE,
 *     accumulated row block by row block without T x T) equal the dense capture of the same
 *     forward pooled here in double (<= 1e-6), with and without the dense capture kept, on
 *     the llama fixture (grouped-query attention, causal), mistral_swa and gemma2 (sliding
 *     window; gemma2's soft cap), gpt2 and bert (bidirectional, the last tokens padding), at
 *     T below, at and above the side, multiples of it and not (130, 200).
 *  2. the real server: GET /api/v1/runs/{id}/thumbs of a stats,qkv run equals the forward's
 *     thumbnails pooled here from a dense forward (<= 1e-6), the tile route's whole-head
 *     tiles at n = 64 of every head, and the stats route; a dense run's max equals the
 *     attention route's pool=64; layers / heads select a block; op=max leaves mean out; bad
 *     dtype, op, layers, heads are one-line 400s.
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

/* the harness's helpers this test does not call */
__attribute__((unused)) static void harness_unused(void) { (void)tb_tensor, (void)header_has, (void)binary_missing; }

/* ---- 1. the forward's thumbnails against the dense capture -------------------------- */

/* The thumbnails of the (T, T) attention a pooled in double: mx, mean (S, S), S = min(T, 64). */
static void ref_thumb(const float *a, int T, double *mx, double *mean) {
    int S = T < AS_THUMB_SIDE ? T : AS_THUMB_SIDE;
    for (int bi = 0; bi < S; bi++)
        for (int bj = 0; bj < S; bj++) {
            int i0 = (int)((long long)bi * T / S), i1 = (int)((long long)(bi + 1) * T / S);
            int j0 = (int)((long long)bj * T / S), j1 = (int)((long long)(bj + 1) * T / S);
            double m = 0, s = 0;
            for (int i = i0; i < i1; i++)
                for (int j = j0; j < j1; j++) {
                    double v = a[(size_t)i * T + j];
                    m = v > m ? v : m;
                    s += v;
                }
            mx[bi * S + bj] = m;
            mean[bi * S + bj] = s / ((double)(i1 - i0) * (j1 - j0));
        }
}

/* ids (i * 7 + 3) % 50 of T tokens on model m, the last n_pad of them padding. */
static void make_enc(const as_model *m, int T, int n_pad, as_encoding *enc) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)T);
    assert_non_null(ids);
    for (int i = 0; i < T; i++) ids[i] = (i * 7 + 3) % 50;
    as_error err = {0};
    assert_int_equal(as_encoding_from_ids(m, ids, NULL, T, enc, &err), AS_OK);
    for (int i = T - n_pad; i < T; i++) enc->mask[i] = 0;
    free(ids);
}

/* The largest difference between r's thumbnails and dense's attention pooled here. */
static double thumbs_diff(const as_run *r, const as_run *dense) {
    int T = r->T, S = T < AS_THUMB_SIDE ? T : AS_THUMB_SIDE;
    assert_int_equal(r->thumb, S);
    assert_non_null(r->thumb_max);
    assert_non_null(r->thumb_mean);
    double *mx = malloc(sizeof(double) * (size_t)S * S), *mean = malloc(sizeof(double) * (size_t)S * S), d = 0;
    for (int l = 0; l < r->L; l++)
        for (int h = 0; h < r->H; h++) {
            ref_thumb(as_run_attn(dense, l, h), T, mx, mean);
            const float *tm = r->thumb_max + ((size_t)l * r->H + h) * S * S, *ta = r->thumb_mean + ((size_t)l * r->H + h) * S * S;
            for (int k = 0; k < S * S; k++) d = fmax(d, fmax(fabs(tm[k] - mx[k]), fabs(ta[k] - mean[k])));
        }
    free(mx);
    free(mean);
    return d;
}

static void check_model(const char *dir, const int *Ts, int nT, int n_pad) {
    as_model *m = NULL;
    as_error err = {0};
    if (as_model_load(dir, &m, &err)) fail_msg("%s: %s", dir, err.msg);
    for (int t = 0; t < nT; t++) {
        as_encoding enc = {0};
        make_enc(m, Ts[t], n_pad, &enc);
        as_capture_spec dense = {.what = CAP_ATTN | CAP_THUMBS, .layer = -1, .head = -1, .threads = 2};
        as_capture_spec lean = {.what = CAP_QKV | CAP_STATS | CAP_THUMBS, .layer = -1, .head = -1, .threads = 2};
        as_run *rd = NULL, *rl = NULL;
        assert_int_equal(as_forward(m, &enc, &dense, &rd, &err), AS_OK);
        assert_int_equal(as_forward(m, &enc, &lean, &rl, &err), AS_OK);
        double d1 = thumbs_diff(rd, rd), d2 = thumbs_diff(rl, rd);
        printf("%s T=%d (pad %d): thumbnails vs pooled dense capture %.2e (with it), %.2e (without)\n", dir, Ts[t], n_pad,
               d1, d2);
        assert_true(d1 <= 1e-6);
        assert_true(d2 <= 1e-6);
        /* a run that does not ask for them has none */
        assert_null(rl->attn);
        as_run_free(rd);
        as_run_free(rl);
        as_encoding_free(&enc);
    }
    as_model_free(m);
}

static void test_forward_thumbs(void **state) {
    (void)state;
    const int longT[] = {5, 64, 130, 200}, shortT[] = {7, 37, 64};
    check_model(FIX "llama", longT, 4, 0);       /* GQA (4 query heads, 2 kv), causal */
    check_model(FIX "mistral_swa", longT, 4, 0); /* sliding window 5 */
    check_model(FIX "gemma2", longT, 4, 0);      /* window and soft cap */
    check_model(FIX "gpt2", shortT, 3, 0);
    check_model(FIX "bert", shortT, 3, 3); /* bidirectional, 3 padding tokens */
    /* without CAP_THUMBS: nothing kept */
    as_model *m = NULL;
    as_error err = {0};
    assert_int_equal(as_model_load(FIX "llama", &m, &err), AS_OK);
    as_encoding enc = {0};
    make_enc(m, 20, 0, &enc);
    as_capture_spec spec = {.what = CAP_STATS, .layer = -1, .head = -1, .threads = 1};
    as_run *r = NULL;
    assert_int_equal(as_forward(m, &enc, &spec, &r, &err), AS_OK);
    assert_null(r->thumb_max);
    assert_int_equal(r->thumb, 0);
    as_run_free(r);
    as_encoding_free(&enc);
    as_model_free(m);
}

/* ---- 2. the thumbs route ----------------------------------------------------------- */

static server S;

/* POST /run of T ids ((i * 7 + 3) % 50) on model with capture; the run's id into id. */
static void run_ids(const char *model, int T, const char *capture, char id[32]) {
    size_t n = 0, sz = 96 + (size_t)T * 4;
    char *body = malloc(sz);
    assert_non_null(body);
    n += (size_t)snprintf(body, sz, "{\"model\":\"%s\",\"capture\":\"%s\",\"ids\":[", model, capture);
    for (int i = 0; i < T; i++) n += (size_t)snprintf(body + n, sz - n, i ? ",%d" : "%d", (i * 7 + 3) % 50);
    snprintf(body + n, sz - n, "]}");
    resp r;
    post(S.port, "/api/v1/run", body, &r);
    free(body);
    if (r.status != 200) fprintf(stderr, "run %s: %d %s\n", model, r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    snprintf(id, 32, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    resp_free(&r);
}

/* A tensor of a 200 reply: its floats (malloc'd, n of them); NULL when absent. */
typedef struct {
    float *v;
    size_t n;
    int shape[4], ndim;
} tensor_f;

static tensor_f take(const tb *t, const char *name) {
    tensor_f out = {0};
    json_t *ts = json_object_get(t->hdr, "tensors"), *x, *found = NULL;
    size_t i;
    json_array_foreach(ts, i, x) if (!strcmp(json_string_value(json_object_get(x, "name")), name)) found = x;
    if (!found) return out;
    json_t *shape = json_object_get(found, "shape");
    out.ndim = (int)json_array_size(shape);
    out.n = 1;
    for (int k = 0; k < out.ndim; k++) out.n *= (size_t)(out.shape[k] = (int)json_integer_value(json_array_get(shape, k)));
    out.v = malloc(out.n * sizeof(float));
    assert_non_null(out.v);
    for (size_t k = 0; k < out.n; k++) out.v[k] = tb_at(t, found, k);
    return out;
}

/* GET path, asserting 200; tensors max, mean, head_stats (or attention, n = 0 when absent) and meta. */
static void get_thumbs(const char *path, tensor_f *mx, tensor_f *mean, tensor_f *st, json_t **meta) {
    resp r;
    get(S.port, path, &r);
    if (r.status != 200) fprintf(stderr, "%s: %d %s\n", path, r.status, r.body);
    assert_int_equal(r.status, 200);
    tb t;
    tb_parse(&r, &t);
    *mx = take(&t, "max");
    if (!mx->v) *mx = take(&t, "attention");
    if (mean) *mean = take(&t, "mean");
    if (st) *st = take(&t, "head_stats");
    if (meta) *meta = json_incref(json_object_get(t.hdr, "meta"));
    json_decref(t.hdr);
    resp_free(&r);
}

static double max_diff(const float *a, const float *b, size_t n) {
    double d = 0;
    for (size_t k = 0; k < n; k++) d = fmax(d, fabs((double)a[k] - b[k]));
    return d;
}

static void test_route(void **state) {
    (void)state;
    const int T = 130, L = 2, H = 4, P = 64;
    char id[32], dense_id[32], path[256];
    run_ids("llama", T, "stats,qkv", id);
    run_ids("llama", T, "dense", dense_id);
    /* the reference: a dense forward in this process, pooled here */
    as_model *m = NULL;
    as_error err = {0};
    assert_int_equal(as_model_load(FIX "llama", &m, &err), AS_OK);
    as_encoding enc = {0};
    make_enc(m, T, 0, &enc);
    as_capture_spec spec = {.what = CAP_ATTN | CAP_STATS, .layer = -1, .head = -1, .threads = 2};
    as_run *rd = NULL;
    assert_int_equal(as_forward(m, &enc, &spec, &rd, &err), AS_OK);
    double *rmx = malloc(sizeof(double) * P * P), *rmean = malloc(sizeof(double) * P * P), d = 0, dt = 0;

    tensor_f mx, mean, st;
    json_t *meta;
    snprintf(path, sizeof path, "/api/v1/runs/%s/thumbs", id);
    get_thumbs(path, &mx, &mean, &st, &meta);
    assert_int_equal(json_integer_value(json_object_get(meta, "pool")), P);
    assert_int_equal(json_integer_value(json_object_get(meta, "tokens")), T);
    assert_int_equal(json_array_size(json_object_get(meta, "stats")), AS_HEAD_N_STATS);
    json_decref(meta);
    assert_int_equal(mx.ndim, 4);
    assert_int_equal(mx.shape[0], L);
    assert_int_equal(mx.shape[1], H);
    assert_int_equal(mx.shape[2], P);
    assert_int_equal(mx.shape[3], P);
    assert_int_equal(mean.n, mx.n);
    assert_int_equal(st.n, (size_t)L * H * AS_HEAD_N_STATS);
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            size_t off = ((size_t)l * H + h) * P * P;
            ref_thumb(as_run_attn(rd, l, h), T, rmx, rmean);
            for (int k = 0; k < P * P; k++)
                d = fmax(d, fmax(fabs(mx.v[off + k] - rmx[k]), fabs(mean.v[off + k] - rmean[k])));
        }
    /* the tile route's whole-head tiles at n = 64, every head in one request */
    tensor_f tmx, tmean;
    snprintf(path, sizeof path, "/api/v1/runs/%s/tile?layers=0-%d&heads=0-%d&n=%d", id, L - 1, H - 1, P);
    get_thumbs(path, &tmx, &tmean, NULL, NULL);
    assert_int_equal(tmx.n, mx.n);
    dt = fmax(max_diff(tmx.v, mx.v, mx.n), max_diff(tmean.v, mean.v, mx.n));
    /* the stats route */
    tensor_f st2, none;
    snprintf(path, sizeof path, "/api/v1/runs/%s/stats", id);
    resp r;
    get(S.port, path, &r);
    tb t;
    tb_parse(&r, &t);
    st2 = take(&t, "head_stats");
    json_decref(t.hdr);
    resp_free(&r);
    assert_int_equal(st2.n, st.n);
    assert_true(max_diff(st.v, st2.v, st.n) == 0);
    /* a dense run: max equals the attention route's pool */
    tensor_f dmx, dmean, pooled;
    snprintf(path, sizeof path, "/api/v1/runs/%s/thumbs", dense_id);
    get_thumbs(path, &dmx, &dmean, NULL, NULL);
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?pool=%d&dtype=f32", dense_id, P);
    get_thumbs(path, &pooled, NULL, NULL, NULL);
    assert_int_equal(pooled.n, dmx.n);
    double dp = max_diff(pooled.v, dmx.v, dmx.n), dd = max_diff(dmx.v, mx.v, mx.n);
    printf("thumbs route: vs pooled dense %.2e, vs tile route %.2e, dense run vs attention?pool %.2e, dense vs long "
           "run %.2e\n", d, dt, dp, dd);
    assert_true(d <= 1e-6);
    assert_true(dt <= 1e-6);
    assert_true(dp <= 1e-6);
    assert_true(dd <= 1e-6);
    /* a block of heads, max only */
    tensor_f bmx, bmean;
    snprintf(path, sizeof path, "/api/v1/runs/%s/thumbs?layers=1&heads=2-3&op=max&dtype=f16", id);
    get_thumbs(path, &bmx, &bmean, &none, &meta);
    assert_null(bmean.v);
    assert_int_equal(bmx.shape[0], 1);
    assert_int_equal(bmx.shape[1], 2);
    assert_int_equal(none.shape[1], 2);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(meta, "heads"), 0)), 2);
    json_decref(meta);
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < P * P; k++)
            assert_true(fabs(bmx.v[(size_t)h * P * P + k] - mx.v[((size_t)1 * H + 2 + h) * P * P + k]) <= 1e-3);
    for (int k = 0; k < 2 * AS_HEAD_N_STATS; k++)
        assert_true(fabs(none.v[k] - st.v[(size_t)(1 * H + 2) * AS_HEAD_N_STATS + k]) <= 2e-3 * fmax(1, fabs(st.v[k])));
    /* bad parameters: one-line 400s */
    const char *bad[] = {"dtype=f64", "op=min", "layers=2", "layers=1-0", "heads=4", "heads=x"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(path, sizeof path, "/api/v1/runs/%s/thumbs?%s", id, bad[i]);
        get(S.port, path, &r);
        expect_error(&r, 400);
        resp_free(&r);
    }
    get(S.port, "/api/v1/runs/0123456789abcdef/thumbs", &r);
    assert_true(r.status == 404);
    resp_free(&r);
    float *fs[] = {mx.v, mean.v, st.v, tmx.v, tmean.v, st2.v, dmx.v, dmean.v, pooled.v, bmx.v, none.v};
    for (size_t i = 0; i < sizeof fs / sizeof *fs; i++) free(fs[i]);
    free(rmx);
    free(rmean);
    as_run_free(rd);
    as_encoding_free(&enc);
    as_model_free(m);
}

static int setup(void **state) {
    (void)state;
    const char *args[] = {"--model", FIX "llama", NULL};
    return server_start_or_report(&S, args);
}

static int teardown(void **state) {
    (void)state;
    return server_stop_report(&S) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_thumbs),
        cmocka_unit_test_setup_teardown(test_route, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
