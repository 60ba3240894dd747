/* test_topk.c — sparse top-k attention rows (src/analysis/topk.c) end to end:
 *  1. an_topk_head, which recomputes the attention from captured q and k a block of rows
 *     at a time, against the PyTorch reference of tests/ref/gen_topk.py (Hugging Face's
 *     eager attention of the gpt2, bert (padded), llama (RoPE, GQA) and mistral_swa
 *     (sliding window) fixtures: exact indices, weights and remaining mass within 1e-5,
 *     the attention tolerance of the parity tests: F32 sums in another order, e.g. another
 *     OpenBLAS kernel for the CPU, move GPT-2's weights by up to 1.1e-6), and against the
 *     top-k of the same run's dense capture (CAP_ATTN) selected here (within 1e-6).
 *  2. the store round trip: `an_analyze --topk 4` of models/attnscope-sst2 on a small
 *     CoNLL-U corpus; every stored row read back by store_topk_row equals an_topk_head on
 *     a fresh forward of the same sentence (bit for bit), and so does every row of
 *     store_topk_sentence (a whole sentence; over its max_entries AS_ERR_INPUT);
 *     store_topk_mass equals the mean computed here; a missing row / query out of range is AS_ERR_INPUT, a damaged row
 *     AS_ERR_INTERNAL for the row reader (the server's 500) and AS_ERR_INPUT for the
 *     pooled mass (report's exit 2); k outside 1..AN_TOPK_MAX is refused.
 *  3. the real server: GET /api/v1/db/runs/{id}/sentences/{i}/topk serves the same row;
 *     bad layer / head / query are 400s with one-line JSON errors, a run without top-k a 404.
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
#include <sqlite3.h>
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
#include "attnscope/analysis.h"
#include "fixture_files.h"
#include "server_harness.h"

#define SST_MODEL AS_SOURCE_DIR "/models/attnscope-sst2"

static char g_dir[128];

/* the harness's helpers this test does not call */
__attribute__((unused)) static void harness_unused(void) {
    (void)tb_at, (void)tb_tensor, (void)tb_parse, (void)header_has, (void)post;
}

/* ---- helpers ------------------------------------------------------------------------ */

/* Decodes row i of a head's top-k bytes. */
static void row_at(const uint8_t *b, int k, int i, int32_t *idx, float *w, float *rest) {
    const uint8_t *p = b + (size_t)i * AN_TOPK_ROW_BYTES(k);
    memcpy(idx, p, (size_t)k * 4);
    memcpy(w, p + (size_t)k * 4, (size_t)k * 4);
    memcpy(rest, p + (size_t)k * 8, 4);
}

/* The top-k of row a (n keys) by repeated argmax: the strongest unpicked positive key,
 * the lower index on ties; rest summed in double. Independent of an_topk_select. */
static void ref_topk(const float *a, int n, int k, int32_t *idx, float *w, double *rest) {
    char *used = calloc((size_t)n, 1);
    assert_non_null(used);
    double all = 0.0, kept = 0.0;
    for (int j = 0; j < n; j++) all += a[j] > 0 ? a[j] : 0;
    for (int s = 0; s < k; s++) {
        int best = -1;
        for (int j = 0; j < n; j++)
            if (!used[j] && a[j] > 0 && (best < 0 || a[j] > a[best])) best = j;
        idx[s] = best;
        w[s] = best >= 0 ? a[best] : 0.0f;
        if (best >= 0) {
            used[best] = 1;
            kept += a[best];
        }
    }
    *rest = all - kept;
    free(used);
}

static const st_tensor *want(const st_file *ex, const char *c, const char *what) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", c, what);
    const st_tensor *t = st_file_find(ex, name);
    if (!t) fail_msg("missing tensor %s", name);
    return t;
}

/* ---- 1. against PyTorch and the dense capture --------------------------------------- */

static void test_parity(void **state) {
    (void)state;
    json_error_t je;
    json_t *fx = json_load_file(AS_SOURCE_DIR "/tests/ref/fixtures/topk/expected.json", 0, &je);
    assert_non_null(fx);
    const int K = (int)json_integer_value(json_object_get(fx, "k"));
    size_t ci;
    json_t *c;
    json_array_foreach(json_object_get(fx, "cases"), ci, c) {
        const char *model = json_string_value(json_object_get(c, "model"));
        const char *cs = json_string_value(json_object_get(c, "case"));
        fx_files f;
        fx_open(model, 0, 0, &f);
        const st_tensor *ti = want(f.ex, cs, "input_ids"), *tt = want(f.ex, cs, "token_type_ids"),
                        *tm = want(f.ex, cs, "attention_mask");
        const int T = (int)ti->shape[0];
        int32_t *ids = malloc(4 * (size_t)T), *types = malloc(4 * (size_t)T), *mask = malloc(4 * (size_t)T);
        memcpy(ids, ti->data, 4 * (size_t)T);
        memcpy(types, tt->data, 4 * (size_t)T);
        memcpy(mask, tm->data, 4 * (size_t)T);
        as_encoding enc;
        as_error err = {0};
        /* GPT-2's reference passed no type ids (its wte would add them) */
        int pass = as_model_config(f.m)->arch != ARCH_GPT2;
        if (as_encoding_from_ids(f.m, ids, pass ? types : NULL, T, &enc, &err)) fail_msg("%s", err.msg);
        for (int t = 0; t < T; t++) enc.mask[t] = mask[t];
        as_capture_spec spec = {.what = CAP_ATTN | CAP_QKV, .layer = -1, .head = -1, .threads = 1};
        as_run *r = NULL;
        if (as_forward(f.m, &enc, &spec, &r, &err)) fail_msg("%s", err.msg);
        const int L = r->L, H = r->H;
        assert_int_equal(L, json_integer_value(json_object_get(c, "layers")));
        assert_int_equal(H, json_integer_value(json_object_get(c, "heads")));
        assert_int_equal(T, json_integer_value(json_object_get(c, "tokens")));
        json_t *jx = json_object_get(c, "index"), *jw = json_object_get(c, "weight"), *jr = json_object_get(c, "rest");
        uint8_t *b = malloc((size_t)T * AN_TOPK_ROW_BYTES(K));
        double dw = 0, dr = 0, dwd = 0, drd = 0;
        int bad_idx = 0, bad_dense = 0, short_rows = 0;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                if (an_topk_head(f.m, r, l, h, K, b, &err)) fail_msg("%s", err.msg);
                for (int i = 0; i < T; i++) {
                    int32_t idx[AN_TOPK_MAX], ridx[AN_TOPK_MAX];
                    float w[AN_TOPK_MAX], rw[AN_TOPK_MAX], rest;
                    double rrest;
                    row_at(b, K, i, idx, w, &rest);
                    size_t base = (((size_t)l * H + h) * T + i) * K;
                    for (int s = 0; s < K; s++) {
                        if (idx[s] != json_integer_value(json_array_get(jx, base + s))) bad_idx++;
                        dw = fmax(dw, fabs(w[s] - json_number_value(json_array_get(jw, base + s))));
                    }
                    dr = fmax(dr, fabs(rest - json_number_value(json_array_get(jr, base / K))));
                    ref_topk(as_run_attn(r, l, h) + (size_t)i * T, T, K, ridx, rw, &rrest);
                    for (int s = 0; s < K; s++) {
                        if (idx[s] != ridx[s]) bad_dense++;
                        dwd = fmax(dwd, fabs(w[s] - rw[s]));
                    }
                    drd = fmax(drd, fabs(rest - rrest));
                    short_rows += idx[K - 1] < 0;
                }
            }
        printf("%s/%s k=%d: vs PyTorch: %d index mismatches, max|dw| %.2e, max|drest| %.2e; vs dense capture: %d, "
               "%.2e, %.2e; rows with fewer than k keys: %d\n",
               model, cs, K, bad_idx, dw, dr, bad_dense, dwd, drd, short_rows);
        assert_int_equal(bad_idx, 0);
        assert_int_equal(bad_dense, 0);
        assert_true(dw <= 1e-5 && dr <= 1e-5 && dwd <= 1e-6 && drd <= 1e-6);
        if (!strcmp(model, "gpt2")) assert_true(short_rows > 0); /* causal rows 0..K-2 */
        free(b);
        as_run_free(r);
        as_encoding_free(&enc);
        free(ids);
        free(types);
        free(mask);
        fx_close(&f);
    }
    /* k outside 1..AN_TOPK_MAX */
    fx_files f;
    fx_open("gpt2", 0, 0, &f);
    int32_t ids[4] = {1, 2, 3, 4};
    as_encoding enc;
    as_error err = {0};
    assert_int_equal(as_encoding_from_ids(f.m, ids, NULL, 4, &enc, &err), AS_OK);
    as_capture_spec spec = {.what = CAP_QKV, .layer = -1, .head = -1, .threads = 1};
    as_run *r = NULL;
    assert_int_equal(as_forward(f.m, &enc, &spec, &r, &err), AS_OK);
    uint8_t b[4 * (AN_TOPK_MAX * 8 + 4)];
    assert_int_equal(an_topk_head(f.m, r, 0, 0, 0, b, &err), AS_ERR_INPUT);
    assert_int_equal(an_topk_head(f.m, r, 0, 0, AN_TOPK_MAX + 1, b, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "k = 65"));
    as_run_free(r);
    as_encoding_free(&enc);
    fx_close(&f);
    json_decref(fx);
}

/* ---- 2. the store round trip --------------------------------------------------------- */

static const char *const SENTS[] = {"The cat sat on the mat.", "It was not a good film at all, was it?",
                                    "Dogs bark."};
#define N_SENTS 3
#define RT_K 4

static void write_conllu(const char *path) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int s = 0; s < N_SENTS; s++) {
        fprintf(f, "# text = %s\n", SENTS[s]);
        /* one word per whitespace-separated piece, a flat tree under the first word */
        char buf[256];
        snprintf(buf, sizeof buf, "%s", SENTS[s]);
        int w = 0;
        for (char *t = strtok(buf, " "); t; t = strtok(NULL, " ")) {
            w++;
            fprintf(f, "%d\t%s\t%s\tX\tX\t_\t%d\t%s\t_\t_\n", w, t, t, w == 1 ? 0 : 1, w == 1 ? "root" : "dep");
        }
        fprintf(f, "\n");
    }
    fclose(f);
}

static void test_store_roundtrip(void **state) {
    (void)state;
    char corpus[256], db[256];
    snprintf(corpus, sizeof corpus, "%s/ud.conllu", g_dir);
    snprintf(db, sizeof db, "%s/topk.sqlite", g_dir);
    write_conllu(corpus);
    as_error err = {0};
    an_opts o = {.model_dir = SST_MODEL, .conllu = corpus, .threads = 1, .quiet = 1, .explain = 1, .min_rel = 1,
                 .topk = AN_TOPK_MAX + 1};
    assert_int_equal(an_analyze(db, &o, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "top-k"));
    o.topk = RT_K;
    if (an_analyze(db, &o, &err)) fail_msg("%s", err.msg);
    sqlite3 *d;
    assert_int_equal(sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(store_check(d, db, &err), AS_OK);
    as_model *m;
    if (as_model_load(SST_MODEL, &m, &err)) fail_msg("%s", err.msg);
    const int L = as_model_config(m)->n_layer, H = as_model_config(m)->n_head;
    double mass[64 * AN_TOPK_MAX] = {0}, want[64 * AN_TOPK_MAX] = {0};
    int64_t rows[64] = {0}, nrow[64] = {0};
    assert_true(L <= 64);
    int checked = 0;
    for (int s = 0; s < N_SENTS; s++) {
        as_encoding enc;
        as_encode_opts eo = {.max_len = 0, .truncate = 1};
        if (as_encode(m, SENTS[s], NULL, &eo, &enc, &err)) fail_msg("%s", err.msg);
        as_capture_spec spec = {.what = CAP_QKV, .layer = -1, .head = -1, .threads = 1};
        as_run *r = NULL;
        if (as_forward(m, &enc, &spec, &r, &err)) fail_msg("%s", err.msg);
        const int T = enc.n;
        uint8_t *b = malloc((size_t)T * AN_TOPK_ROW_BYTES(RT_K));
        an_topk_sentence ts; /* the whole sentence at once: the same rows */
        if (store_topk_sentence(d, db, AN_TOPK_SELF, 1, s, L, H, SIZE_MAX, &ts, &err)) fail_msg("%s", err.msg);
        assert_int_equal(ts.k, RT_K);
        assert_int_equal(ts.n_query, T);
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                assert_int_equal(an_topk_head(m, r, l, h, RT_K, b, &err), AS_OK);
                for (int i = 0; i < T; i++) {
                    int32_t idx[AN_TOPK_MAX];
                    float w[AN_TOPK_MAX], rest;
                    row_at(b, RT_K, i, idx, w, &rest);
                    an_topk_row got;
                    if (store_topk_row(d, db, AN_TOPK_SELF, 1, s, l, h, i, &got, &err)) fail_msg("%s", err.msg);
                    assert_int_equal(got.k, RT_K);
                    assert_int_equal(got.n_query, T);
                    assert_memory_equal(got.index, idx, RT_K * 4);
                    assert_memory_equal(got.weight, w, RT_K * 4);
                    assert_memory_equal(&got.rest, &rest, 4);
                    size_t o = ((size_t)l * H + h) * T + i;
                    assert_memory_equal(ts.index + o * RT_K, idx, RT_K * 4);
                    assert_memory_equal(ts.weight + o * RT_K, w, RT_K * 4);
                    assert_memory_equal(ts.rest + o, &rest, 4);
                    double cum = 0;
                    for (int j = 0; j < RT_K; j++) want[l * AN_TOPK_MAX + j] += (cum += w[j]);
                    nrow[l]++;
                    checked++;
                }
            }
        an_topk_sentence_free(&ts);
        free(b);
        as_run_free(r);
        as_encoding_free(&enc);
    }
    printf("store round trip: %d rows equal to the recomputed top-%d\n", checked, RT_K);
    int K = 0;
    assert_int_equal(store_topk_mass(d, db, 1, L, H, &K, mass, rows, &err), AS_OK);
    assert_int_equal(K, RT_K);
    for (int l = 0; l < L; l++) {
        assert_int_equal(rows[l], nrow[l]);
        for (int j = 0; j < RT_K; j++) assert_true(fabs(mass[l * AN_TOPK_MAX + j] - want[l * AN_TOPK_MAX + j] / nrow[l]) < 1e-12);
        assert_true(mass[l * AN_TOPK_MAX] <= mass[l * AN_TOPK_MAX + RT_K - 1]);
    }
    an_topk_row got;
    assert_int_equal(store_topk_row(d, db, AN_TOPK_SELF, 1, N_SENTS, 0, 0, 0, &got, &err), AS_ERR_INPUT); /* no such sentence */
    assert_non_null(strstr(err.msg, "no top-k row"));
    assert_int_equal(store_topk_row(d, db, AN_TOPK_SELF, 1, 0, 0, 0, 1000, &got, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "query 1000"));
    an_topk_sentence ts;
    assert_int_equal(store_topk_sentence(d, db, AN_TOPK_SELF, 1, N_SENTS, L, H, SIZE_MAX, &ts, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "no top-k rows"));
    assert_int_equal(store_topk_sentence(d, db, AN_TOPK_SELF, 1, 0, L, H, 10, &ts, &err), AS_ERR_INPUT); /* over max_entries */
    assert_non_null(strstr(err.msg, "over the 10"));
    assert_null(ts.index);
    sqlite3_close(d);
    as_model_free(m);
    /* a damaged row: the wrong size for its k and n_query */
    assert_int_equal(sqlite3_open(db, &d), SQLITE_OK);
    assert_int_equal(sqlite3_exec(d, "UPDATE topk SET rows = x'0011' WHERE sent = 2 AND layer = 0 AND head = 0", NULL,
                                  NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(store_topk_row(d, db, AN_TOPK_SELF, 1, 2, 0, 0, 0, &got, &err), AS_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "damaged"));
    assert_int_equal(store_topk_sentence(d, db, AN_TOPK_SELF, 1, 2, L, H, SIZE_MAX, &ts, &err), AS_ERR_INTERNAL);
    assert_non_null(strstr(err.msg, "damaged"));
    assert_int_equal(store_topk_mass(d, db, 1, L, H, &K, mass, rows, &err), AS_ERR_INPUT);
    sqlite3_close(d);
}

/* ---- 3. the server's route ----------------------------------------------------------- */

static void test_server_route(void **state) {
    (void)state;
    char db[256], corpus[256], url[256];
    snprintf(db, sizeof db, "%s/serve.sqlite", g_dir);
    snprintf(corpus, sizeof corpus, "%s/ud.conllu", g_dir);
    write_conllu(corpus);
    as_error err = {0};
    an_opts o = {.model_dir = SST_MODEL, .conllu = corpus, .threads = 1, .quiet = 1, .explain = 0, .min_rel = 1,
                 .topk = AN_TOPK_DEFAULT};
    if (an_analyze(db, &o, &err)) fail_msg("%s", err.msg);
    o.topk = 0; /* a second run of the same corpus, without top-k */
    if (an_analyze(db, &o, &err)) fail_msg("%s", err.msg);
    sqlite3 *d;
    assert_int_equal(sqlite3_open_v2(db, &d, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    an_topk_row want;
    if (store_topk_row(d, db, AN_TOPK_SELF, 1, 1, 2, 3, 5, &want, &err)) fail_msg("%s", err.msg);
    sqlite3_close(d);
    server S;
    const char *args[] = {"--model", SST_MODEL, "--db", db, NULL};
    assert_int_equal(server_start_or_report(&S, args), 0);
    resp r;
    get(S.port, "/api/v1/db/runs/1/sentences/1/topk?layer=2&head=3&query=5", &r);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    assert_int_equal(json_integer_value(json_object_get(j, "k")), AN_TOPK_DEFAULT);
    assert_int_equal(json_integer_value(json_object_get(j, "query")), 5);
    for (int s = 0; s < want.k; s++) {
        assert_int_equal(json_integer_value(json_array_get(json_object_get(j, "index"), s)), want.index[s]);
        assert_true(fabs(json_number_value(json_array_get(json_object_get(j, "weight"), s)) - want.weight[s]) < 1e-7);
    }
    assert_true(fabs(json_number_value(json_object_get(j, "rest")) - want.rest) < 1e-7);
    json_decref(j);
    resp_free(&r);
    static const char *const bad[] = {"/api/v1/db/runs/1/sentences/1/topk?layer=9&head=0&query=0",
                                      "/api/v1/db/runs/1/sentences/1/topk?head=0&query=0",
                                      "/api/v1/db/runs/1/sentences/1/topk?layer=0&head=x&query=0",
                                      "/api/v1/db/runs/1/sentences/1/topk?layer=0&head=0",
                                      "/api/v1/db/runs/1/sentences/1/topk?layer=0&head=0&query=-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        get(S.port, bad[i], &r);
        expect_error(&r, 400);
        resp_free(&r);
    }
    get(S.port, "/api/v1/db/runs/1/sentences/1/topk?layer=0&head=0&query=999", &r);
    expect_error(&r, 404);
    resp_free(&r);
    snprintf(url, sizeof url, "/api/v1/db/runs/2/sentences/1/topk?layer=0&head=0&query=0");
    get(S.port, url, &r);
    expect_error(&r, 404);
    resp_free(&r);
    assert_int_equal(server_stop_report(&S), 0);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/as_topk_XXXXXX");
    if (!mkdtemp(g_dir)) return 1;
    if (binary_missing("test_topk")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_store_roundtrip),
        cmocka_unit_test(test_server_route),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) rc = rc ? rc : 1;
    return rc;
}
