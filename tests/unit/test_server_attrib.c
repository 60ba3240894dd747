/* test_server_attrib.c — GET /api/v1/runs/{id}/attribution on the real server
 * (server_harness.h) with the bert (classifier) and gpt2 (LM) fixtures: runs made from
 * the fixtures' "single" ids, every method's tensor (shape, meta, values) against
 * tests/ref/gen_attrib.py's PyTorch / networkx references (rollout and flow 1e-5 absolute,
 * the others 1e-4 of the largest value; f16 within its rounding), the explained logit's
 * target / position given in the query, and one-line 4xx errors for bad queries. Also
 * GET .../maps?method=rollout|flow|grad: every layer's map, cumulative through it
 * ([L, 1, T, T], meta.per layer), against the references' rollout_layers / flow_layers /
 * grad_layers, and its last layer equal to the attribution route's whole-model map.
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
#define REFS AS_SOURCE_DIR "/tests/ref/fixtures/attrib/"
#define ID_BUF 64

#include "server_harness.h"

static server S;

static int setup(void **state) {
    (void)state;
    const char *args[] = {"--model", FIX "bert", "--model", FIX "gpt2", NULL};
    return server_start_or_report(&S, args);
}

static int teardown(void **state) {
    (void)state;
    return server_stop_report(&S) == 0 ? 0 : -1;
}

static st_file *open_st(const char *path) {
    st_file *f = NULL;
    as_error err = {0};
    if (st_file_open(path, &f, &err)) fail_msg("%s", err.msg);
    return f;
}

static const st_tensor *find(st_file *f, const char *name) {
    const st_tensor *t = st_file_find(f, name);
    if (!t) fail_msg("no tensor %s", name);
    return t;
}

/* POST /run of the fixture's single ids; the run id into id (17 bytes). */
static void run_fixture(const char *model, char *id) {
    char path[512], body[1024];
    snprintf(path, sizeof path, FIX "%s/expected.safetensors", model);
    st_file *e = open_st(path);
    const st_tensor *ids = find(e, "single.input_ids");
    int n = snprintf(body, sizeof body, "{\"model\":\"%s\",\"ids\":[", model);
    for (size_t i = 0; i < ids->n_elems; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, i ? ",%d" : "%d", ((const int32_t *)ids->data)[i]);
    snprintf(body + n, sizeof body - (size_t)n, "]}");
    st_file_free(e);
    resp r;
    post(S.port, "/api/v1/run", body, &r);
    if (r.status != 200) fprintf(stderr, "run %s: %d %s\n", model, r.status, r.body);
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    snprintf(id, ID_BUF, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    resp_free(&r);
}

/* GET route (attribution or maps) of run id with query q; checks meta and shape, compares
 * with the reference tensor `ref` of REFS file.safetensors (abs: absolute tolerance, else
 * relative to the largest value). A maps reply (L, 1, T, T) is compared with an (L, T, T)
 * reference. Returns the response's meta (caller decrefs). */
static json_t *check_route(const char *route, const char *file, const char *id, const char *q, const char *ref,
                           double tol, int abs) {
    char path[512];
    int maps = !strcmp(route, "maps");
    snprintf(path, sizeof path, "/api/v1/runs/%s/%s?%s", id, route, q);
    resp r;
    get(S.port, path, &r);
    if (r.status != 200) fprintf(stderr, "%s: %d %s\n", path, r.status, r.body);
    assert_int_equal(r.status, 200);
    assert_true(header_has(&r, "application/octet-stream"));
    tb t;
    tb_parse(&r, &t);
    json_t *x = tb_tensor(&t, route), *meta = json_incref(json_object_get(t.hdr, "meta"));
    snprintf(path, sizeof path, REFS "%s.safetensors", file);
    st_file *f = open_st(path);
    const st_tensor *want = find(f, ref);
    json_t *shape = json_object_get(x, "shape");
    assert_int_equal((int)json_array_size(shape), want->ndim + maps);
    for (int d = 0, g = 0; d < want->ndim; d++, g++) {
        if (maps && d == 1) assert_int_equal(json_integer_value(json_array_get(shape, (size_t)g++)), 1); /* heads */
        assert_int_equal(json_integer_value(json_array_get(shape, (size_t)g)), want->shape[d]);
    }
    double md = 0.0, mr = 0.0;
    for (size_t k = 0; k < want->n_elems; k++) {
        float w = ((const float *)want->data)[k];
        md = fmax(md, fabs((double)tb_at(&t, x, k) - w));
        mr = fmax(mr, fabs(w));
    }
    double d = abs ? md : md / mr;
    printf("  %-11s %-11s %-28s %-14s max %s diff %.2e\n", route, file, q, ref, abs ? "abs" : "rel", d);
    assert_true(d <= tol);
    assert_string_equal(json_string_value(json_object_get(meta, "run")), id);
    st_file_free(f);
    json_decref(t.hdr);
    resp_free(&r);
    return meta;
}

static json_t *check(const char *model, const char *id, const char *q, const char *ref, double tol, int abs) {
    return check_route("attribution", model, id, q, ref, tol, abs);
}

/* The values of route?q of run id as a new array of *n floats (caller frees). */
static float *get_f32(const char *id, const char *route, const char *q, size_t *n) {
    char path[256];
    snprintf(path, sizeof path, "/api/v1/runs/%s/%s?%s", id, route, q);
    resp r;
    get(S.port, path, &r);
    assert_int_equal(r.status, 200);
    tb t;
    tb_parse(&r, &t);
    json_t *x = tb_tensor(&t, route);
    json_t *shape = json_object_get(x, "shape");
    *n = 1;
    for (size_t d = 0; d < json_array_size(shape); d++) *n *= (size_t)json_integer_value(json_array_get(shape, d));
    float *v = malloc(*n * sizeof *v);
    assert_non_null(v);
    for (size_t k = 0; k < *n; k++) v[k] = tb_at(&t, x, k);
    json_decref(t.hdr);
    resp_free(&r);
    return v;
}

/* maps?method=rollout|flow|grad of bert and gpt2: every layer's map, cumulative through it,
 * against gen_attrib.py's *_layers references; the last layer bit for bit the attribution
 * route's whole-model map. */
static void test_maps_layers(void **state) {
    (void)state;
    const char *models[] = {"bert", "gpt2"};
    const char *methods[] = {"rollout", "flow", "grad"}, *refs[] = {"rollout_layers", "flow_layers", "grad_layers"};
    for (int m = 0; m < 2; m++) {
        char id[ID_BUF], file[32], q[64];
        run_fixture(models[m], id);
        snprintf(file, sizeof file, "%s_layers", models[m]);
        for (int i = 0; i < 3; i++) {
            snprintf(q, sizeof q, "method=%s", methods[i]);
            json_t *meta = check_route("maps", file, id, q, refs[i], i < 2 ? 1e-5 : 1e-4, i < 2);
            assert_string_equal(json_string_value(json_object_get(meta, "per")), "layer");
            int L = (int)json_integer_value(json_array_get(json_object_get(meta, "layers"), 1)) + 1;
            json_decref(meta);
            size_t nw, nl;
            float *whole = get_f32(id, "attribution", q, &nw);
            snprintf(q, sizeof q, "method=%s&layers=%d", methods[i], L - 1);
            float *last = get_f32(id, "maps", q, &nl);
            assert_int_equal(nw, nl);
            assert_memory_equal(whole, last, nw * sizeof *whole);
            free(whole);
            free(last);
        }
    }
}

static void test_bert(void **state) {
    (void)state;
    char id[ID_BUF];
    run_fixture("bert", id);
    const char *methods[] = {"rollout", "flow", "norm", "grad", "importance"};
    for (int i = 0; i < 5; i++) {
        char q[64];
        snprintf(q, sizeof q, "method=%s", methods[i]);
        json_t *meta = check("bert", id, q, methods[i], i < 2 ? 1e-5 : 1e-4, i < 2);
        assert_string_equal(json_string_value(json_object_get(meta, "method")), methods[i]);
        assert_int_equal(json_integer_value(json_object_get(meta, "tokens")), 10);
        json_t *tg = json_object_get(meta, "target");
        if (i >= 3) {
            assert_int_equal(json_integer_value(tg), 0); /* the predicted class */
            assert_int_equal(json_integer_value(json_object_get(meta, "position")), 0);
        } else {
            assert_null(tg);
        }
        json_decref(meta);
    }
    /* class 1: grads.safetensors' objective */
    json_decref(check("bert", id, "method=grad&target=1", "grad_objective", 1e-4, 0));
    json_decref(check("bert", id, "method=importance&target=1&dtype=f16", "importance_objective", 2e-3, 0));
}

static void test_gpt2(void **state) {
    (void)state;
    char id[ID_BUF];
    run_fixture("gpt2", id);
    json_t *meta = check("gpt2", id, "method=grad", "grad", 1e-4, 0);
    assert_int_equal(json_integer_value(json_object_get(meta, "position")), 8);
    assert_int_equal(json_integer_value(json_object_get(meta, "target")), 17);
    json_decref(meta);
    json_decref(check("gpt2", id, "method=norm", "norm", 1e-4, 0));
    /* the next token after position 8 explicitly: the same numbers */
    json_decref(check("gpt2", id, "method=importance&target=17&position=8", "importance", 1e-4, 0));
}

static void expect_get_error(const char *path, int status) {
    resp r;
    get(S.port, path, &r);
    printf("  %s -> %d %s\n", path, r.status, r.body ? (const char *)r.body : "");
    expect_error(&r, status);
    resp_free(&r);
}

static void test_errors(void **state) {
    (void)state;
    char id[ID_BUF], gid[ID_BUF], path[256];
    run_fixture("bert", id);
    run_fixture("gpt2", gid);
    const char *bad[] = {"", "?method=", "?method=attention", "?method=rollout&target=1", "?method=norm&position=0",
                         "?method=grad&target=3", "?method=grad&target=x", "?method=grad&position=1",
                         "?method=flow&dtype=f64", "?method=grad&target=-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "/api/v1/runs/%s/attribution%s", id, bad[i]);
        expect_get_error(path, 400);
    }
    snprintf(path, sizeof path, "/api/v1/runs/%s/attribution?method=grad&position=9", gid);
    expect_get_error(path, 400);
    snprintf(path, sizeof path, "/api/v1/runs/%s/attribution?method=grad&target=116", gid);
    expect_get_error(path, 400);
    expect_get_error("/api/v1/runs/0123456789abcdef/attribution?method=rollout", 404);
    resp r;
    snprintf(path, sizeof path, "/api/v1/runs/%s/attribution?method=rollout", id);
    post(S.port, path, "{}", &r);
    expect_error(&r, 405);
    resp_free(&r);
}

int main(void) {
    if (binary_missing("test_server_attrib")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert),
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_maps_layers),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
