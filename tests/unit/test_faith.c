/* test_faith.c — the faithfulness metrics (src/analysis/faith.c, faith_model.c):
 *  1. faith_score on fixed probability tables against tests/ref/gen_faith.py's NumPy
 *     reference: AOPC deletion / insertion, ERASER comprehensiveness / sufficiency, per bin
 *     and averaged, within 1e-6; the bins' token counts exactly;
 *  2. faith_rank on relevances with ties and NaN: the reference order exactly;
 *  3. a constructed classifier p = sigmoid(b + w . keep): faith_curves of the leave-one-out
 *     order against the reference curves (1e-12) and scores (1e-6), on 1 and 3 threads;
 *     the random order (faith_random_order) is a permutation of the removable tokens, its
 *     mean AOPC over 400 seeds is near the reference's expectation over 20000
 *     permutations, and the leave-one-out order beats it (AOPC deletion, comprehensiveness);
 *  4. the shipped models/attnscope-sst2 end to end: del[0] is the prediction's probability,
 *     the ends of the curves agree across methods, no special token is ever removed, the
 *     curves are the same on 1 and 2 threads, a point of the deletion curve equals a
 *     forward on the deleted ids built here, rollout's relevance is attr_compute's [CLS]
 *     row, mask removal keeps the length; refusals of an LM and of an input of specials.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "analysis/faith.h"
#include "attnscope/analysis.h"

#define FIXTURE AS_SOURCE_DIR "/tests/ref/fixtures/faith/expected.json"
#define SST_MODEL AS_SOURCE_DIR "/models/attnscope-sst2"

static json_t *g_ref;

static int setup(void **state) {
    (void)state;
    json_error_t je;
    g_ref = json_load_file(FIXTURE, 0, &je);
    if (!g_ref) fprintf(stderr, "%s: %s\n", FIXTURE, je.text);
    return g_ref ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    json_decref(g_ref);
    return 0;
}

static double *doubles(json_t *a, int *n) {
    *n = (int)json_array_size(a);
    double *x = calloc((size_t)*n + 1, sizeof(double));
    for (int i = 0; i < *n; i++) x[i] = json_is_null(json_array_get(a, i)) ? NAN : json_number_value(json_array_get(a, i));
    return x;
}

static void near(double got, double want, double tol, const char *what) {
    if (!(fabs(got - want) <= tol)) fail_msg("%s: %.12g, expected %.12g", what, got, want);
}

static void check_scores(const faith_curve *c, json_t *s) {
    near(c->aopc_del, json_number_value(json_object_get(s, "aopc_del")), 1e-6, "aopc_del");
    near(c->aopc_ins, json_number_value(json_object_get(s, "aopc_ins")), 1e-6, "aopc_ins");
    near(c->comp, json_number_value(json_object_get(s, "comp")), 1e-6, "comp");
    near(c->suff, json_number_value(json_object_get(s, "suff")), 1e-6, "suff");
    for (int b = 0; b < FAITH_N_BINS; b++) {
        near(c->comp_bin[b], json_number_value(json_array_get(json_object_get(s, "comp_bins"), b)), 1e-6, "comp bin");
        near(c->suff_bin[b], json_number_value(json_array_get(json_object_get(s, "suff_bins"), b)), 1e-6, "suff bin");
    }
}

static void test_tables(void **state) {
    (void)state;
    json_t *tables = json_object_get(g_ref, "tables");
    assert_true(json_array_size(tables) >= 5);
    for (size_t i = 0; i < json_array_size(tables); i++) {
        json_t *t = json_array_get(tables, i);
        int n = (int)json_integer_value(json_object_get(t, "n")), nd, ni;
        faith_curve c = {0};
        c.del = doubles(json_object_get(t, "del"), &nd);
        c.ins = doubles(json_object_get(t, "ins"), &ni);
        assert_int_equal(nd, n + 1);
        assert_int_equal(ni, n + 1);
        faith_score(&c, n);
        check_scores(&c, json_object_get(t, "scores"));
        for (int b = 0; b < FAITH_N_BINS; b++)
            assert_int_equal(faith_bin_tokens(n, faith_bins_pct[b]),
                             json_integer_value(json_array_get(json_object_get(t, "bin_tokens"), b)));
        free(c.del);
        free(c.ins);
    }
}

static void test_rank(void **state) {
    (void)state;
    json_t *ranks = json_object_get(g_ref, "ranks");
    for (size_t i = 0; i < json_array_size(ranks); i++) {
        json_t *r = json_array_get(ranks, i);
        int T, nrm, no;
        double *rel = doubles(json_object_get(r, "rel"), &T), *rm = doubles(json_object_get(r, "removable"), &nrm),
               *want = doubles(json_object_get(r, "order"), &no);
        float relf[64];
        uint8_t removable[64];
        int order[64];
        for (int t = 0; t < T; t++) relf[t] = (float)rel[t], removable[t] = rm[t] != 0.0;
        int n = faith_rank(relf, removable, T, order);
        assert_int_equal(n, no);
        for (int k = 0; k < n; k++) assert_int_equal(order[k], (int)want[k]);
        free(rel);
        free(rm);
        free(want);
    }
}

/* ---- the constructed classifier ---- */

typedef struct {
    int T;
    double w[64], b;
} additive;

static as_status additive_prob(void *ctx, const uint8_t *keep, double *p, as_error *err) {
    (void)err;
    const additive *a = ctx;
    double z = a->b;
    for (int t = 0; t < a->T; t++) z += keep[t] ? a->w[t] : 0.0;
    *p = 1.0 / (1.0 + exp(-z));
    return AS_OK;
}

static void test_additive(void **state) {
    (void)state;
    json_t *c = json_object_get(g_ref, "additive");
    additive a = {0};
    int T, n_ref, nw, nl, nr;
    a.T = T = (int)json_integer_value(json_object_get(c, "T"));
    assert_true(T > 2 && T <= 64);
    a.b = json_number_value(json_object_get(c, "b"));
    double *w = doubles(json_object_get(c, "w"), &nw), *loo = doubles(json_object_get(c, "loo"), &nl),
           *rm = doubles(json_object_get(c, "removable"), &nr), *want = doubles(json_object_get(c, "order"), &n_ref);
    int nd, ni;
    double *del_ref = doubles(json_object_get(c, "del"), &nd), *ins_ref = doubles(json_object_get(c, "ins"), &ni);
    uint8_t removable[64], keep[64];
    float rel[64];
    for (int t = 0; t < T; t++) a.w[t] = w[t], removable[t] = rm[t] != 0.0;
    /* the leave-one-out relevance computed here, through the same probability function */
    double full;
    for (int t = 0; t < T; t++) keep[t] = 1;
    additive_prob(&a, keep, &full, NULL);
    for (int t = 0; t < T; t++) {
        double p;
        keep[t] = 0;
        additive_prob(&a, keep, &p, NULL);
        keep[t] = 1;
        rel[t] = (float)(full - p);
        near(full - p, removable[t] ? loo[t] : full - p, 1e-12, "leave-one-out");
    }
    int order[64];
    const int n = faith_rank(rel, removable, T, order);
    assert_int_equal(n, n_ref);
    for (int k = 0; k < n; k++) assert_int_equal(order[k], (int)want[k]);
    faith_curve fc = {0};
    double d1[65], i1[65], d3[65], i3[65];
    fc.del = d1, fc.ins = i1;
    as_error err = {0};
    assert_int_equal(faith_curves(T, removable, order, n, additive_prob, &a, 1, d1, i1, &err), AS_OK);
    assert_int_equal(faith_curves(T, removable, order, n, additive_prob, &a, 3, d3, i3, &err), AS_OK);
    for (int k = 0; k <= n; k++) {
        near(d1[k], del_ref[k], 1e-12, "deletion curve");
        near(i1[k], ins_ref[k], 1e-12, "insertion curve");
        assert_true(d1[k] == d3[k] && i1[k] == i3[k]);
    }
    faith_score(&fc, n);
    check_scores(&fc, json_object_get(c, "scores"));
    /* the random baseline: permutations of the removable tokens, worse than leave-one-out */
    double mean_del = 0.0, mean_comp = 0.0;
    const int seeds = 400;
    for (int s = 0; s < seeds; s++) {
        int ro[64], seen[64] = {0};
        int m = faith_random_order(removable, T, (uint64_t)s, ro);
        assert_int_equal(m, n);
        for (int k = 0; k < m; k++) {
            assert_true(removable[ro[k]]);
            assert_int_equal(seen[ro[k]]++, 0);
        }
        faith_curve rc = {0};
        double rd[65], ri[65];
        rc.del = rd, rc.ins = ri;
        assert_int_equal(faith_curves(T, removable, ro, n, additive_prob, &a, 1, rd, ri, &err), AS_OK);
        faith_score(&rc, n);
        mean_del += rc.aopc_del / seeds;
        mean_comp += rc.comp / seeds;
    }
    const double rnd_del = json_number_value(json_object_get(c, "random_aopc_del"));
    const double rnd_comp = json_number_value(json_object_get(c, "random_comp"));
    printf("additive: leave-one-out aopc_del %.4f comp %.4f; random %.4f %.4f (reference %.4f %.4f)\n",
           fc.aopc_del, fc.comp, mean_del, mean_comp, rnd_del, rnd_comp);
    near(mean_del, rnd_del, 0.03, "random AOPC deletion against the reference expectation");
    near(mean_comp, rnd_comp, 0.03, "random comprehensiveness against the reference expectation");
    assert_true(fc.aopc_del > mean_del + 0.1);
    assert_true(fc.comp > mean_comp + 0.1);
    free(w), free(loo), free(rm), free(want), free(del_ref), free(ins_ref);
}

/* ---- the real model ---- */

static double forward_p(const as_model *m, const int32_t *ids, int n, int cls) {
    as_encoding e = {0};
    as_error err = {0};
    as_run *r = NULL;
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 1};
    if (as_encoding_from_ids(m, ids, NULL, n, &e, &err) || as_forward(m, &e, &spec, &r, &err))
        fail_msg("%s", err.msg);
    double mx = r->logits[0], z = 0.0;
    for (int i = 1; i < r->logits_cols; i++) mx = r->logits[i] > mx ? r->logits[i] : mx;
    for (int i = 0; i < r->logits_cols; i++) z += exp((double)r->logits[i] - mx);
    double p = exp((double)r->logits[cls] - mx) / z;
    as_run_free(r);
    as_encoding_free(&e);
    return p;
}

static void test_model(void **state) {
    (void)state;
    as_model *m = NULL;
    as_error err = {0};
    if (as_model_load(SST_MODEL, &m, &err)) fail_msg("%s", err.msg);
    as_encoding enc = {0};
    if (as_encode(m, "a gripping , funny and quite unforgettable film .", NULL, NULL, &enc, &err)) fail_msg("%s", err.msg);
    const int T = enc.n;
    faith_opts o = {.methods = 0, .steps = 8, .seed = 3, .threads = 1};
    faith_result r1 = {0}, r2 = {0};
    if (faith_compute(m, &enc, &o, &r1, &err)) fail_msg("%s", err.msg);
    o.threads = 2;
    if (faith_compute(m, &enc, &o, &r2, &err)) fail_msg("%s", err.msg);
    assert_int_equal(r1.n_curves, FAITH_N_METHODS);
    assert_int_equal(r1.n, T - 2); /* every token but [CLS] and [SEP] */
    const int n = r1.n;
    for (int i = 0; i < r1.n_curves; i++) {
        const faith_curve *c = &r1.curves[i], *c2 = &r2.curves[i];
        assert_true(c->del[0] == r1.probs[r1.predicted]);
        assert_true(c->ins[n] == c->del[0] && c->ins[0] == c->del[n] && c->del[n] == r1.empty);
        int seen[128] = {0};
        for (int k = 0; k < n; k++) {
            assert_true(c->order[k] > 0 && c->order[k] < T - 1);
            assert_int_equal(seen[c->order[k]]++, 0);
        }
        for (int k = 0; k <= n; k++) assert_true(c->del[k] == c2->del[k] && c->ins[k] == c2->ins[k]);
    }
    /* deletion point k = 3 of rollout, recomputed from ids built here */
    const faith_curve *ro = &r1.curves[FAITH_ROLLOUT];
    assert_int_equal(ro->method, FAITH_ROLLOUT);
    int32_t ids[128];
    int q = 0;
    for (int t = 0; t < T; t++) {
        int gone = 0;
        for (int k = 0; k < 3; k++) gone |= ro->order[k] == t;
        if (!gone) ids[q++] = enc.ids[t];
    }
    assert_true(forward_p(m, ids, q, r1.predicted) == ro->del[3]);
    /* rollout's relevance is attr_compute's row of [CLS] */
    attr_opts ao = {.method = ATTR_ROLLOUT, .target = -1, .position = -1, .threads = 1};
    attr_result ar = {0};
    if (attr_compute(m, &enc, &ao, &ar, &err)) fail_msg("%s", err.msg);
    for (int j = 0; j < T; j++) near(ro->relevance[j], ar.data[j], 1e-6, "rollout row 0");
    attr_result_free(&ar);
    /* mask removal: positions kept, so the curve differs from deletion */
    faith_result rm = {0};
    faith_opts om = {.methods = 1u << FAITH_GRAD, .removal = FAITH_MASK, .threads = 1};
    if (faith_compute(m, &enc, &om, &rm, &err)) fail_msg("%s", err.msg);
    assert_true(rm.curves[0].del[0] == r1.probs[r1.predicted]);
    assert_true(rm.curves[0].del[n] != r1.empty);
    faith_result_free(&rm);
    faith_result_free(&r1);
    faith_result_free(&r2);
    as_encoding_free(&enc);
    /* an input of special tokens only */
    as_encoding sp = {0}; /* [CLS] x [SEP] made [CLS] [SEP] */
    if (as_encode(m, "x", NULL, NULL, &sp, &err)) fail_msg("%s", err.msg);
    assert_int_equal(sp.n, 3);
    sp.n = 2, sp.ids[1] = sp.ids[2], sp.seq[1] = -1;
    assert_int_equal(faith_compute(m, &sp, &o, &r1, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "no token to remove"));
    sp.n = 3;
    as_encoding_free(&sp);
    as_model_free(m);
    /* a model without a classifier head */
    if (as_model_load(AS_SOURCE_DIR "/tests/ref/fixtures/models/gpt2", &m, &err)) fail_msg("%s", err.msg);
    const int32_t lm_ids[3] = {1, 2, 3};
    if (as_encoding_from_ids(m, lm_ids, NULL, 3, &enc, &err)) fail_msg("%s", err.msg);
    assert_int_equal(faith_compute(m, &enc, &o, &r1, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "sequence-classifier head"));
    as_encoding_free(&enc);
    as_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tables),
        cmocka_unit_test(test_rank),
        cmocka_unit_test(test_additive),
        cmocka_unit_test(test_model),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
