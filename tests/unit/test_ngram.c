/* test_ngram.c — the interpolated modified Kneser-Ney baseline (src/train/ngram.c)
 * against an independent Python implementation of the same formula
 * (tests/ref/gen_ngram.py -> tests/ref/fixtures/ngram/ngram.json): for orders 1 to 5, the
 * discounts, the summed test log-likelihood and the perplexity (1e-9 relative) and single
 * probabilities; the probabilities of the whole vocabulary sum to 1 in seen, unseen and
 * empty contexts; bad input is refused with a message.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attnscope/ngram.h"

#define FIXTURE AS_SOURCE_DIR "/tests/ref/fixtures/ngram/ngram.json"

static json_t *fx;

static int32_t *ids_of(const json_t *a, size_t *n) {
    *n = json_array_size(a);
    int32_t *v = malloc(*n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(a, i));
    return v;
}

static double rel(double a, double b) { return fabs(a - b) / fmax(fabs(b), 1e-300); }

static void test_against_python(void **state) {
    (void)state;
    size_t n_train, n_test;
    int V = (int)json_integer_value(json_object_get(fx, "vocab"));
    int32_t *train = ids_of(json_object_get(fx, "train"), &n_train);
    int32_t *test = ids_of(json_object_get(fx, "test"), &n_test);
    double worst_ppl = 0, worst_p = 0, worst_d = 0;
    for (int order = 1; order <= 5; order++) {
        char key[4];
        snprintf(key, sizeof key, "%d", order);
        const json_t *want = json_object_get(json_object_get(fx, "orders"), key);
        assert_non_null(want);
        ngram_lm *lm = NULL;
        as_error err = {0};
        if (ngram_train(train, n_train, order, V, &lm, &err)) fail_msg("%s", err.msg);
        for (int k = 1; k <= order; k++) {
            double d[3];
            ngram_discounts(lm, k, d);
            const json_t *dw = json_array_get(json_object_get(want, "discounts"), (size_t)k - 1);
            for (int j = 0; j < 3; j++) worst_d = fmax(worst_d, rel(d[j], json_real_value(json_array_get(dw, (size_t)j))));
        }
        double nll;
        size_t n_pred;
        if (ngram_nll(lm, test, n_test, &nll, &n_pred, &err)) fail_msg("%s", err.msg);
        assert_int_equal(n_pred, n_test - 1);
        double ppl = exp(nll / (double)n_pred), ppl_py = json_real_value(json_object_get(want, "perplexity"));
        double r = rel(ppl, ppl_py);
        worst_ppl = fmax(worst_ppl, fmax(r, rel(nll, json_real_value(json_object_get(want, "nll_sum")))));
        printf("order %d: perplexity %.9f (python %.9f, rel diff %.2e)\n", order, ppl, ppl_py, r);
        const json_t *probs = json_object_get(fx, "probs"), *e;
        size_t i;
        json_array_foreach(probs, i, e) {
            if (json_integer_value(json_object_get(e, "order")) != order) continue;
            size_t nc;
            int32_t *ctx = ids_of(json_object_get(e, "ctx"), &nc);
            double p = ngram_prob(lm, ctx, (int)nc, (int32_t)json_integer_value(json_object_get(e, "w")));
            worst_p = fmax(worst_p, rel(p, json_real_value(json_object_get(e, "p"))));
            free(ctx);
        }
        ngram_free(lm);
    }
    printf("max rel diff: perplexity/nll %.2e, probabilities %.2e, discounts %.2e\n", worst_ppl, worst_p, worst_d);
    assert_true(worst_ppl < 1e-9);
    assert_true(worst_p < 1e-9);
    assert_true(worst_d < 1e-12);
    free(train);
    free(test);
}

/* sum over the vocabulary of p(w | ctx) for contexts seen in training, unseen, and empty */
static void test_sums_to_one(void **state) {
    (void)state;
    size_t n_train, n_test;
    int V = (int)json_integer_value(json_object_get(fx, "vocab"));
    int32_t *train = ids_of(json_object_get(fx, "train"), &n_train);
    int32_t *test = ids_of(json_object_get(fx, "test"), &n_test);
    const int32_t unseen[4] = {39, 38, 37, 36};
    for (int order = 1; order <= 5; order++) {
        ngram_lm *lm = NULL;
        as_error err = {0};
        if (ngram_train(train, n_train, order, V, &lm, &err)) fail_msg("%s", err.msg);
        const int32_t *ctxs[4] = {train + 100, train + 1234, test + 17, unseen};
        for (int c = 0; c < 5; c++) {
            const int32_t *ctx = c < 4 ? ctxs[c] : NULL;
            int nc = c < 4 ? 4 : 0;
            double s = 0, mn = 1;
            for (int w = 0; w < V; w++) {
                double p = ngram_prob(lm, ctx, nc, w);
                s += p;
                mn = fmin(mn, p);
            }
            if (fabs(s - 1.0) > 1e-12 || mn <= 0) fail_msg("order %d context %d: sum %.17g, min %g", order, c, s, mn);
        }
        ngram_free(lm);
    }
    free(train);
    free(test);
}

static void test_errors(void **state) {
    (void)state;
    const int32_t ids[6] = {0, 1, 2, 1, 2, 3};
    const int32_t bad[3] = {0, 9, 1};
    ngram_lm *lm = NULL;
    as_error err = {0};
    assert_int_equal(ngram_train(ids, 6, 0, 4, &lm, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "order 0"));
    assert_int_equal(ngram_train(ids, 6, NGRAM_MAX_ORDER + 1, 4, &lm, &err), AS_ERR_INPUT);
    assert_int_equal(ngram_train(ids, 2, 3, 4, &lm, &err), AS_ERR_INPUT);
    assert_int_equal(ngram_train(bad, 3, 2, 4, &lm, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
    assert_null(lm);
    assert_int_equal(ngram_train(ids, 6, 3, 4, &lm, &err), AS_OK);
    double nll;
    size_t n;
    assert_int_equal(ngram_nll(lm, bad, 3, &nll, &n, &err), AS_ERR_INPUT);
    assert_int_equal(ngram_nll(lm, ids, 1, &nll, &n, &err), AS_ERR_INPUT);
    assert_int_equal(ngram_nll(lm, ids, 6, &nll, &n, &err), AS_OK);
    assert_true(n == 5 && nll > 0 && isfinite(nll));
    ngram_free(lm);
    ngram_free(NULL);
}

int main(void) {
    json_error_t je;
    fx = json_load_file(FIXTURE, 0, &je);
    if (!fx) {
        fprintf(stderr, "%s: %s\n", FIXTURE, je.text);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_python),
        cmocka_unit_test(test_sums_to_one),
        cmocka_unit_test(test_errors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    json_decref(fx);
    return rc;
}
