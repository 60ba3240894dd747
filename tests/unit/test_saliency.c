/* test_saliency.c — gradient saliency (src/analysis/saliency.c) against torch
 * autograd on the tiny BERT fixture (tests/ref/gen_backward.py): vanilla gradient
 * (L1 of d logit / d word vectors), gradient x input and integrated gradients with
 * the fixture's step count, the prediction, and the input checks.
 *
 * Tolerances: scores max |c - torch| <= 1e-4 * max |torch| (relative to the scale of
 * the scores); logits and the IG logit difference 1e-5 absolute. 1 and 3 threads agree
 * to 1e-6 of the scores' scale (the products' columns are split differently); every family
 * with a classifier head is explained (GPT-2's and Llama's score heads: the scores equal
 * the L1 norms of the reference gradients of tests/ref/gen_grads.py), a model without
 * one is refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "analysis/saliency.h"
#include "io/safetensors.h"
#include "fixture_files.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif
#define DIR_BERT AS_SOURCE_DIR "/tests/ref/fixtures/backward/bert"

typedef struct {
    as_model *m;
    st_file *exp;
    as_encoding enc;
} fx;

static const st_tensor *want(const fx *f, const char *name, as_dtype dt) {
    const st_tensor *t = st_file_find(f->exp, name);
    if (!t) fail_msg("expected.safetensors: no tensor '%s'", name);
    assert_int_equal(t->dtype, dt);
    return t;
}

static void load(fx *f) {
    memset(f, 0, sizeof *f);
    as_error err = {0};
    if (as_model_load(DIR_BERT, &f->m, &err)) fail_msg("%s", err.msg);
    if (st_file_open(DIR_BERT "/expected.safetensors", &f->exp, &err)) fail_msg("%s", err.msg);
    const st_tensor *ids = want(f, "sal.ids", DTYPE_I32), *tt = want(f, "sal.type_ids", DTYPE_I32);
    if (as_encoding_from_ids(f->m, ids->data, tt->data, (int)ids->n_elems, &f->enc, &err)) fail_msg("%s", err.msg);
}

static void unload(fx *f) {
    as_encoding_free(&f->enc);
    st_file_free(f->exp);
    as_model_free(f->m);
}

static void compare(const char *what, const float *c, const float *ref, int n, double tol, int relative) {
    double md = 0.0, mr = 0.0;
    for (int i = 0; i < n; i++) {
        md = fmax(md, fabs((double)c[i] - ref[i]));
        mr = fmax(mr, fabs(ref[i]));
    }
    double r = relative ? md / mr : md;
    printf("  %-8s max %s diff %.2e (scale %.3g)\n", what, relative ? "rel" : "abs", r, mr);
    assert_true(r <= tol);
}

static void run(sal_method method, const char *name) {
    fx f;
    load(&f);
    as_error err = {0};
    sal_opts o = {.method = method, .target = -1, .steps = 0};
    if (method == SAL_IG) o.steps = *(const int32_t *)want(&f, "sal.ig_steps", DTYPE_I32)->data;
    sal_result r;
    if (sal_compute(f.m, &f.enc, &o, &r, &err)) fail_msg("%s", err.msg);
    printf("%s:\n", sal_method_name(method));
    int target = *(const int32_t *)want(&f, "sal.target", DTYPE_I32)->data;
    assert_int_equal(r.predicted, target);
    assert_int_equal(r.target, target);
    assert_int_equal(r.T, f.enc.n);
    compare("logits", r.logits, want(&f, "sal.logits", DTYPE_F32)->data, r.C, 1e-5, 0);
    double psum = 0.0;
    for (int i = 0; i < r.C; i++) psum += r.probs[i];
    assert_true(fabs(psum - 1.0) < 1e-5);
    compare(name + 4, r.scores, want(&f, name, DTYPE_F32)->data, r.T, 1e-4, 1);
    if (method == SAL_GRAD)
        for (int t = 0; t < r.T; t++) assert_true(r.scores[t] >= 0.0f);
    if (method == SAL_IG) {
        float base = *(const float *)want(&f, "sal.logit_base", DTYPE_F32)->data;
        float delta = r.logits[target] - base;
        printf("  IG steps %d: sum %.6f, logit difference %.6f (torch %.6f), gap %.2e\n", r.steps, r.ig_sum,
               r.ig_delta, delta, r.ig_gap);
        assert_true(fabsf(r.ig_delta - delta) < 1e-5f);
        assert_true(r.ig_gap < 0.05f * fabsf(r.ig_delta));
        /* completeness improves with the step count */
        sal_result r2;
        o.steps = 128;
        if (sal_compute(f.m, &f.enc, &o, &r2, &err)) fail_msg("%s", err.msg);
        printf("  IG steps 128: gap %.2e\n", r2.ig_gap);
        assert_true(r2.ig_gap < r.ig_gap);
        sal_result_free(&r2);
    }
    sal_result_free(&r);
    unload(&f);
}

static void test_grad(void **state) { run(SAL_GRAD, "sal.grad"); }
static void test_gxi(void **state) { run(SAL_GXI, "sal.gxi"); }
static void test_ig(void **state) { run(SAL_IG, "sal.ig"); }

/* An explicit target explains that class (other scores, same prediction); bad
 * targets, step counts, empty input and a model without a classifier are errors. */
static void test_target_and_errors(void **state) {
    fx f;
    load(&f);
    as_error err = {0};
    sal_result r0, r1;
    sal_opts o = {.method = SAL_GXI, .target = 0};
    if (sal_compute(f.m, &f.enc, &o, &r0, &err)) fail_msg("%s", err.msg);
    o.target = 1;
    if (sal_compute(f.m, &f.enc, &o, &r1, &err)) fail_msg("%s", err.msg);
    assert_int_equal(r0.target, 0);
    assert_int_equal(r1.target, 1);
    assert_int_equal(r0.predicted, r1.predicted);
    int diff = 0;
    for (int t = 0; t < r0.T; t++) diff |= r0.scores[t] != r1.scores[t];
    assert_true(diff);
    sal_result_free(&r0);
    sal_result_free(&r1);
    o.target = 3;
    assert_int_equal(sal_compute(f.m, &f.enc, &o, &r0, &err), AS_ERR_INPUT);
    printf("error: %s\n", err.msg);
    o.target = -1;
    o.method = SAL_IG;
    o.steps = -2;
    assert_int_equal(sal_compute(f.m, &f.enc, &o, &r0, &err), AS_ERR_INPUT);
    printf("error: %s\n", err.msg);
    o.steps = 0;
    as_encoding empty = {0};
    assert_int_equal(sal_compute(f.m, &empty, &o, &r0, &err), AS_ERR_INPUT);
    /* a model without a classifier (a causal-LM head) */
    as_model *lm = NULL;
    if (as_model_load(AS_SOURCE_DIR "/tests/ref/fixtures/models/gpt2", &lm, &err)) fail_msg("%s", err.msg);
    assert_int_equal(sal_compute(lm, &f.enc, &o, &r0, &err), AS_ERR_INPUT);
    printf("error: %s\n", err.msg);
    as_model_free(lm);
    /* the default step count */
    if (sal_compute(f.m, &f.enc, &o, &r0, &err)) fail_msg("%s", err.msg);
    assert_int_equal(r0.steps, SAL_DEFAULT_STEPS);
    sal_result_free(&r0);
    sal_method mm;
    assert_int_equal(sal_method_parse("ig", &mm), 0);
    assert_int_equal(mm, SAL_IG);
    assert_int_equal(sal_method_parse("lime", &mm), -1);
    unload(&f);
}

/* 1 and 3 threads, for grad and integrated gradients. */
static void test_threads(void **state) {
    (void)state;
    fx f;
    load(&f);
    as_error err = {0};
    sal_method methods[2] = {SAL_GRAD, SAL_IG};
    for (int k = 0; k < 2; k++) {
        sal_opts o = {.method = methods[k], .target = -1, .steps = 40, .threads = 1};
        sal_result r0, r1;
        if (sal_compute(f.m, &f.enc, &o, &r0, &err)) fail_msg("%s", err.msg);
        o.threads = 3;
        if (sal_compute(f.m, &f.enc, &o, &r1, &err)) fail_msg("%s", err.msg);
        double mx = 0.0, d = 0.0;
        for (int t = 0; t < r0.T; t++) {
            mx = fmax(mx, fabs(r0.scores[t]));
            d = fmax(d, fabs((double)r0.scores[t] - r1.scores[t]));
        }
        printf("%s: 1 vs 3 threads max|diff| %.2e of %.2e\n", sal_method_name(methods[k]), d, mx);
        assert_true(d <= 1e-6 * mx);
        sal_result_free(&r0);
        sal_result_free(&r1);
    }
    unload(&f);
}

/* The classifier heads of the other families: the score of token t is the L1 norm of
 * row t of the reference gradient of logit 1 (gen_grads.py's objective for them). */
static void test_families(void **state) {
    (void)state;
    static const char *const names[] = {"llama_cls", "distilbert", "roberta", "electra"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fx_files ff;
        fx_open(names[i], 1, 0, &ff);
        as_model *m = ff.m;
        st_file *ex = ff.ex, *gr = ff.gr;
        as_error err = {0};
        const st_tensor *ti = st_file_find(ex, "single.input_ids"), *tt = st_file_find(ex, "single.token_type_ids");
        const st_tensor *tg = st_file_find(gr, "single.d_word_embeds"), *tc = st_file_find(gr, "single.targets");
        assert_true(ti && tt && tg && tc);
        as_encoding enc = {0};
        int32_t ids[64], types[64], target;
        float g[64 * 64];
        int T = (int)ti->n_elems, De = (int)tg->shape[1];
        assert_true(T <= 64 && (size_t)T * De <= sizeof g / sizeof g[0]);
        memcpy(ids, ti->data, ti->nbytes);
        memcpy(types, tt->data, tt->nbytes);
        memcpy(g, tg->data, tg->nbytes);
        memcpy(&target, tc->data, sizeof target);
        if (as_encoding_from_ids(m, ids, types, T, &enc, &err)) fail_msg("%s", err.msg);
        sal_opts o = {.method = SAL_GRAD, .target = target};
        sal_result r;
        if (sal_compute(m, &enc, &o, &r, &err)) fail_msg("%s: %s", names[i], err.msg);
        double mx = 0.0, d = 0.0;
        for (int t = 0; t < T; t++) {
            double ref = 0.0;
            for (int k = 0; k < De; k++) ref += fabs(g[(size_t)t * De + k]);
            mx = fmax(mx, ref);
            d = fmax(d, fabs(ref - r.scores[t]));
        }
        printf("%s: saliency vs reference gradient norms max|diff| %.2e of %.2e\n", names[i], d, mx);
        assert_true(d <= 1e-4 * mx);
        sal_result_free(&r);
        as_encoding_free(&enc);
        fx_close(&ff);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grad),
        cmocka_unit_test(test_gxi),
        cmocka_unit_test(test_ig),
        cmocka_unit_test(test_target_and_errors),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_families),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
