/* test_scores.c — the per-sentence head scores of src/analysis/heads.c on hand-computed
 * examples: importance (max entry), semantic score (cosine of saliency and column sums),
 * Clark et al. statistics (attention to [CLS] / [SEP] / punctuation / self / previous /
 * next, row entropy and its normalized form), word-level attention with a two-piece
 * word (keys summed, queries averaged, [CLS]/[SEP] dropped), the predicted parent
 * (self excluded, words without pieces skipped), Jensen-Shannon divergence, the
 * vectorised mixture entropies of the corpus head pairs against double sums, and the
 * punctuation test. The NumPy cross-check of the aggregates is test_store.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>

#include "analysis/heads.h"
#include "analysis/runner_internal.h"

#define EPS 1e-6

static const float A4[16] = {0.5f, 0.25f, 0.25f, 0.0f,  /* [CLS] */
                             0.1f, 0.2f,  0.3f,  0.4f,  /* word  */
                             0.0f, 0.0f,  0.0f,  1.0f,  /* ","   */
                             0.25f, 0.25f, 0.25f, 0.25f}; /* [SEP] */
static const uint8_t K4[4] = {HK_CLS, HK_WORD, HK_PUNCT, HK_SEP};

static void test_importance_semantic(void **state) {
    (void)state;
    assert_float_equal(hd_importance(A4, 4, K4), 1.0, EPS);
    /* r = (0.85, 0.7, 0.8, 1.65), s = (1, 0, 0, 1): 2.5 / (sqrt(4.575) sqrt(2)) */
    const float sal[4] = {1, 0, 0, 1};
    assert_float_equal(hd_semantic(A4, 4, K4, sal), 0.8264745061341079, EPS);
    const float zero[4] = {0};
    assert_float_equal(hd_semantic(A4, 4, K4, zero), 0.0, EPS);
    /* a padded last token is neither a row nor a column */
    const uint8_t Kp[4] = {HK_CLS, HK_WORD, HK_SEP, HK_PAD};
    assert_float_equal(hd_importance(A4, 4, Kp), 0.5, EPS);
}

static void test_stats(void **state) {
    (void)state;
    hd_stats s;
    hd_stats_compute(A4, 4, K4, &s);
    assert_int_equal(s.n_rows, 4);
    assert_float_equal(s.cls, (0.5 + 0.1 + 0 + 0.25) / 4, EPS);
    assert_float_equal(s.sep, (0 + 0.4 + 1 + 0.25) / 4, EPS);
    assert_float_equal(s.punct, (0.25 + 0.3 + 0 + 0.25) / 4, EPS);
    assert_float_equal(s.self, (0.5 + 0.2 + 0 + 0.25) / 4, EPS);
    assert_float_equal(s.prev, (0.1 + 0 + 0.25) / 3, EPS);
    assert_float_equal(s.next, (0.25 + 0.3 + 1) / 3, EPS);
    assert_float_equal(s.entropy, 0.9264673394483691, EPS);
    assert_float_equal(s.entropy_norm, 0.6683049180838769, EPS);
}

static void test_word_attention(void **state) {
    (void)state;
    /* [CLS] a ##b c [SEP]: word 0 = pieces 1, 2; word 1 = piece 3 */
    const float A[25] = {0.2f, 0.2f, 0.2f, 0.2f, 0.2f,
                         0.2f, 0.1f, 0.3f, 0.4f, 0.0f,
                         0.0f, 0.5f, 0.1f, 0.2f, 0.2f,
                         0.1f, 0.3f, 0.3f, 0.1f, 0.2f,
                         0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
    const int word[5] = {-1, 0, 0, 1, -1};
    float Wm[4];
    hd_word_attention(A, 5, word, 2, Wm);
    assert_float_equal(Wm[0], ((0.1 + 0.3) + (0.5 + 0.1)) / 2, EPS); /* mean over query pieces of key sums */
    assert_float_equal(Wm[1], (0.4 + 0.2) / 2, EPS);
    assert_float_equal(Wm[2], 0.3 + 0.3, EPS);
    assert_float_equal(Wm[3], 0.1, EPS);
    const uint8_t has[2] = {1, 1};
    assert_int_equal(hd_word_argmax(Wm, 2, 0, has), 1); /* self (0.5) ignored */
    assert_int_equal(hd_word_argmax(Wm, 2, 1, has), 0);
    /* three words, the middle one has no pieces: never predicted */
    const float W3[9] = {0.1f, 0.9f, 0.3f, 0.2f, 0.2f, 0.2f, 0.5f, 0.5f, 0.4f};
    const uint8_t has3[3] = {1, 0, 1};
    assert_int_equal(hd_word_argmax(W3, 3, 0, has3), 2);
    assert_int_equal(hd_word_argmax(W3, 3, 2, has3), 0);
    const uint8_t none[3] = {1, 0, 0};
    assert_int_equal(hd_word_argmax(W3, 3, 0, none), -1);
}

static void test_jsd_punct(void **state) {
    (void)state;
    const float p[2] = {1, 0}, q[2] = {0, 1}, h[2] = {0.5f, 0.5f};
    assert_float_equal(hd_jsd(p, q, 2), 1.0, EPS);
    assert_float_equal(hd_jsd(p, p, 2), 0.0, EPS);
    /* H(.75,.25) - (H(.5,.5) + 0) / 2 = 0.811278 - 0.5 */
    assert_float_equal(hd_jsd(h, p, 2), 0.8112781244591328 - 0.5, EPS);
    assert_float_equal(hd_jsd(h, p, 2), hd_jsd(p, h, 2), 1e-12);
    assert_true(hd_is_punct("."));
    assert_true(hd_is_punct("##,"));
    assert_true(hd_is_punct(" ,"));
    assert_true(hd_is_punct("\xe2\x80\x94")); /* em dash, Pd */
    assert_true(hd_is_punct("..."));
    assert_false(hd_is_punct("a."));
    assert_false(hd_is_punct(""));
    assert_false(hd_is_punct("$")); /* Sc, a symbol */
    assert_false(hd_is_punct("[SEP]"));
}

/* an_jsd_mix_rows: for LH = 37 heads (two 16-head vectors and a tail of 5) and T = 150
 * keys (nine 16-key float runs and a part), rows with exact zeros, tiny weights and peaks, every
 * pair's mixture entropy within 1e-6 of the double sum -sum m log2 m; the JSD it gives
 * (minus the rows' own mean entropy) within 1e-6 of hd_jsd. */
static void test_jsd_mix_rows(void **state) {
    (void)state;
    enum { LH = 37, T = 150, LD = AN_JSD_LD(LH) };
    float *rows = calloc((size_t)LH * T, sizeof(float)), *at = calloc((size_t)T * LD, sizeof(float));
    double *hm = calloc(LD, sizeof(double));
    assert_true(rows && at && hm);
    unsigned u = 12345;
    for (int h = 0; h < LH; h++) {
        double sum = 0;
        for (int j = 0; j < T; j++) {
            u = u * 1103515245u + 12345u;
            double r = (u >> 8) / 16777216.0;
            float v = h % 5 == 0 && j % 3 ? 0.0f : h % 7 == 1 ? (float)(r * 1e-12) : (float)(r * r * r);
            if (h % 11 == 2 && j == h) v = 50.0f; /* a peaked row */
            rows[(size_t)h * T + j] = v;
            sum += v;
        }
        for (int j = 0; j < T; j++) rows[(size_t)h * T + j] = (float)(rows[(size_t)h * T + j] / sum);
        for (int j = 0; j < T; j++) at[(size_t)j * LD + h] = rows[(size_t)h * T + j];
    }
    double worst = 0, worst_jsd = 0;
    for (int a = 0; a < LH; a++) {
        an_jsd_mix_rows(at, T, LD, a, LH, hm);
        for (int b = a + 1; b < LH; b++) {
            const float *x = rows + (size_t)a * T, *y = rows + (size_t)b * T;
            double want = 0, hx = 0, hy = 0;
            for (int j = 0; j < T; j++) {
                double m = 0.5 * ((double)x[j] + (double)y[j]);
                if (m > 0) want -= m * log2(m);
                if (x[j] > 0) hx -= x[j] * log2((double)x[j]);
                if (y[j] > 0) hy -= y[j] * log2((double)y[j]);
            }
            worst = fmax(worst, fabs(hm[b] - want));
            worst_jsd = fmax(worst_jsd, fabs((hm[b] - 0.5 * (hx + hy)) - hd_jsd(x, y, T)));
        }
    }
    print_message("mixture entropies: max |diff| %.2e; JSD %.2e\n", worst, worst_jsd);
    assert_true(worst < 1e-6);
    assert_true(worst_jsd < 1e-6);
    free(rows);
    free(at);
    free(hm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_importance_semantic),
        cmocka_unit_test(test_stats),
        cmocka_unit_test(test_word_attention),
        cmocka_unit_test(test_jsd_punct),
        cmocka_unit_test(test_jsd_mix_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
