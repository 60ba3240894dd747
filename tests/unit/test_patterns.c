/* test_patterns.c — head pattern labels and the concentration measure of
 * src/analysis/heads.c: each label at and around its documented threshold, label
 * competition (highest score wins; broad only when no positional / delimiter label
 * holds), the "other" confidence, the labels of probed causal models (induction first,
 * except against a higher sink score; sink from layer 1 competing with the others; BOS not a delimiter), and hand-computed concentration counts (signed
 * cumulative sums over terms sorted by |q_d k_d|; undefined when q.k <= 0).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "analysis/heads.h"

static hd_pattern label(double next, double prev, double self, double cls, double sep, double punct, double entn,
                        double *conf) {
    hd_stats s;
    memset(&s, 0, sizeof s);
    s.next = next;
    s.prev = prev;
    s.self = self;
    s.cls = cls;
    s.sep = sep;
    s.punct = punct;
    s.entropy_norm = entn;
    return hd_label(&s, 0, NAN, conf);
}

/* A probed (causal) model's head of layer `layer` with induction score ind, first-token
 * mass first, previous-token mass prev and BOS ([CLS]-kind) mass cls. */
static hd_pattern label_causal(int layer, double ind, double first, double prev, double cls, double sep,
                               double entn, double *conf) {
    hd_stats s;
    memset(&s, 0, sizeof s);
    s.first = first;
    s.prev = prev;
    s.cls = cls;
    s.sep = sep;
    s.entropy_norm = entn;
    return hd_label(&s, layer, ind, conf);
}

static void test_causal_labels(void **state) {
    (void)state;
    double c;
    /* induction at its threshold (inclusive) wins over a strong previous-token score */
    assert_int_equal(label_causal(2, 0.5, 0.1, 0.9, 0.1, 0, 0.2, &c), HP_INDUCTION);
    assert_float_equal(c, 0.5, 1e-12);
    assert_int_equal(label_causal(2, 0.49, 0.1, 0.9, 0.1, 0, 0.2, &c), HP_PREV);
    /* a sink from layer 1 on; the BOS mass is not a delimiter share in a causal model */
    assert_int_equal(label_causal(1, 0.01, 0.8, 0.1, 0.8, 0, 0.1, &c), HP_SINK);
    assert_float_equal(c, 0.8, 1e-12);
    assert_int_equal(label_causal(0, 0.01, 0.8, 0.1, 0.8, 0, 0.1, &c), HP_OTHER);
    assert_float_equal(c, 1 - 0.1 / 0.5, 1e-12); /* the closest label: previous (0.1) */
    /* an induction head that is also a sink on text: the higher score wins */
    assert_int_equal(label_causal(2, 0.63, 0.83, 0.04, 0.83, 0, 0.1, &c), HP_SINK);
    assert_float_equal(c, 0.83, 1e-12);
    assert_int_equal(label_causal(3, 0.94, 0.80, 0.05, 0.80, 0, 0.1, &c), HP_INDUCTION);
    assert_int_equal(label_causal(0, 0.63, 0.83, 0.04, 0.83, 0, 0.1, &c), HP_INDUCTION); /* no sink in layer 0 */
    /* sink and previous compete on their scores */
    assert_int_equal(label_causal(3, 0.0, 0.55, 0.6, 0.55, 0, 0.1, &c), HP_PREV);
    assert_int_equal(label_causal(3, 0.0, 0.65, 0.6, 0.65, 0, 0.1, &c), HP_SINK);
    /* other: how far from the nearest label, the induction score included */
    assert_int_equal(label_causal(3, 0.45, 0.2, 0.1, 0.2, 0, 0.1, &c), HP_OTHER);
    assert_float_equal(c, 1 - 0.45 / 0.5, 1e-12);
    /* without a probe (NAN) the same statistics keep the encoder's labels: BOS mass is a delimiter */
    hd_stats s;
    memset(&s, 0, sizeof s);
    s.first = s.cls = 0.8;
    assert_int_equal(hd_label(&s, 3, NAN, &c), HP_DELIM);
    assert_string_equal(hd_pattern_name(HP_INDUCTION), "induction");
    assert_string_equal(hd_pattern_name(HP_SINK), "sink");
}

static void test_labels(void **state) {
    (void)state;
    double c;
    assert_int_equal(label(0.8, 0.1, 0.05, 0, 0, 0, 0.2, &c), HP_NEXT);
    assert_float_equal(c, 0.8, 1e-12);
    assert_int_equal(label(0.1, 0.5, 0.0, 0, 0, 0, 0.2, &c), HP_PREV); /* threshold is inclusive */
    assert_int_equal(label(0.1, 0.49, 0.0, 0, 0, 0, 0.2, &c), HP_OTHER);
    assert_float_equal(c, 1 - 0.49 / 0.5, 1e-12);
    assert_int_equal(label(0.0, 0.0, 0.7, 0.1, 0, 0, 0.2, &c), HP_SELF);
    /* delimiter share 0.2 + 0.3 + 0.1 = 0.6 beats next = 0.55 */
    assert_int_equal(label(0.55, 0, 0, 0.2, 0.3, 0.1, 0.1, &c), HP_DELIM);
    assert_float_equal(c, 0.6, 1e-12);
    assert_int_equal(label(0.7, 0, 0, 0.2, 0.3, 0.1, 0.1, &c), HP_NEXT);
    /* broad: 0.9 x (1 - 0.2) = 0.72 */
    assert_int_equal(label(0.1, 0.1, 0.1, 0.1, 0.1, 0.0, 0.9, &c), HP_BROAD);
    assert_float_equal(c, 0.72, 1e-12);
    /* 0.6 x (1 - 0.2) = 0.48 < 0.5: other; the closest label is broad (0.96 of its threshold) */
    assert_int_equal(label(0.1, 0.1, 0.1, 0.1, 0.1, 0.0, 0.6, &c), HP_OTHER);
    assert_float_equal(c, 1 - 0.48 / 0.5, 1e-12);
    assert_string_equal(hd_pattern_name(HP_DELIM), "delimiter-focused");
    assert_string_equal(hd_pattern_name(HP_PREV), "previous-word");
}

static void test_concentration(void **state) {
    (void)state;
    /* c = (3, 1, -1, 1), q.k = 4: 3 < 3.6, 3 + 1 >= 3.6 -> 2 */
    const float q1[4] = {3, 1, -1, 0.5f}, k1[4] = {1, 1, 1, 2};
    assert_int_equal(hd_concentration(q1, k1, 4), 2);
    /* c = (5, -4, 2, 1), q.k = 4: the largest term alone reaches 3.6 -> 1 */
    const float q2[4] = {5, -4, 2, 1}, k2[4] = {1, 1, 1, 1};
    assert_int_equal(hd_concentration(q2, k2, 4), 1);
    /* c = (-4, 3, 3, 2.5), q.k = 4.5: -4, -1, 2, 4.5 -> all 4 */
    const float q3[4] = {-4, 3, 3, 2.5f};
    assert_int_equal(hd_concentration(q3, k2, 4), 4);
    /* q.k <= 0: undefined */
    const float q4[4] = {-1, 0.5f, 0, 0};
    assert_int_equal(hd_concentration(q4, k2, 4), 0);
    /* spread evenly over 8 dimensions: 0.9 x 8 needs 8 terms of 1 */
    const float q5[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    assert_int_equal(hd_concentration(q5, q5, 8), 8);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_labels),
        cmocka_unit_test(test_causal_labels),
        cmocka_unit_test(test_concentration),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
