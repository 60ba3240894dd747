/* test_align.c — word alignment from cross-attention (src/analysis/align.c):
 *  1. al_word_matrix, al_align_run (argmax per layer, head and head mean), al_count and
 *     al_aer against the NumPy reference of tests/ref/gen_align.py on a random
 *     cross-attention with special tokens, multi-piece words and words without pieces,
 *     for both row shifts (word matrices within 1e-6, alignments and counts exact);
 *  2. the same on bart_tiny's real cross-attention (as_forward_seq2seq on the torch
 *     reference's first input): word matrices within 1e-5 (the engine's attention is
 *     within 1e-5 of torch's), alignments and AER equal to the reference's;
 *     as_seq2seq_shift_target keeps each target token's byte span and special mark;
 *  3. Pharaoh lines: sure / possible ('?' and 'p'), repeated pairs merged (sure wins),
 *     order; one-line errors naming file, line and pair (syntax, an index outside the
 *     sentence, too many pairs);
 *  4. tokens to words from byte offsets (specials, padding, a token of spaces only),
 *     word counts and the limit, the line reader (CRLF, no final newline, a NUL byte),
 *     al_format.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnscope.h"
#include "attnscope/align.h"

#define FIXTURE AS_SOURCE_DIR "/tests/ref/fixtures/align/align.json"

static json_t *g_fx;

static int setup(void **state) {
    (void)state;
    json_error_t je;
    g_fx = json_load_file(FIXTURE, 0, &je);
    if (!g_fx) fprintf(stderr, "%s: %s\n", FIXTURE, je.text);
    return g_fx ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    json_decref(g_fx);
    return 0;
}

static json_t *fx_case(const char *name) {
    json_t *cs = json_object_get(g_fx, "cases"), *c;
    size_t i;
    json_array_foreach(cs, i, c) if (!strcmp(json_string_value(json_object_get(c, "name")), name)) return c;
    fail_msg("fixture case %s missing", name);
    return NULL;
}

static int fx_int(json_t *c, const char *k) { return (int)json_integer_value(json_object_get(c, k)); }

static int *fx_ints(json_t *c, const char *k, int *n) {
    json_t *a = json_object_get(c, k);
    *n = (int)json_array_size(a);
    int *v = calloc((size_t)*n + 1, sizeof *v);
    assert_non_null(v);
    for (int i = 0; i < *n; i++) v[i] = (int)json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

/* Compares al_align_run, al_word_matrix and the AER counts of a run's cross-attention
 * (L, H, Tt, Ts) with the reference case c. */
static void check_case(json_t *c, const as_run *cross, double tol) {
    const int L = fx_int(c, "L"), H = fx_int(c, "H"), Tt = fx_int(c, "Tt"), Ts = fx_int(c, "Ts");
    const int Wt = fx_int(c, "Wt"), Ws = fx_int(c, "Ws"), shift = fx_int(c, "shift");
    int n, nl;
    int *src_word = fx_ints(c, "src_word", &n);
    assert_int_equal(n, Ts);
    int *label_word = fx_ints(c, "label_word", &nl), *row_word = calloc((size_t)Tt, sizeof(int));
    assert_int_equal(nl, Tt);
    al_target_rows(label_word, Tt, shift, row_word);
    json_t *ref_rows = json_object_get(c, "row_word");
    for (int i = 0; i < Tt; i++) assert_int_equal(row_word[i], json_integer_value(json_array_get(ref_rows, (size_t)i)));
    int32_t *best = calloc((size_t)L * (H + 1) * Wt, sizeof *best);
    float *Wm = calloc((size_t)Wt * Ws, sizeof *Wm), *mean = calloc((size_t)Tt * Ts, sizeof *mean);
    assert_true(best && Wm && mean);
    as_error err = {0};
    assert_int_equal(al_align_run(cross, row_word, Wt, src_word, Ws, best, &err), AS_OK);
    al_links gold;
    assert_int_equal(al_parse_line("gold", 1, json_string_value(json_object_get(c, "gold")), Ws, Wt, &gold, &err), AS_OK);
    double maxd = 0;
    for (int l = 0; l < L; l++) {
        memset(mean, 0, (size_t)Tt * Ts * sizeof *mean);
        for (int h = 0; h <= H; h++) {
            const float *A = mean;
            if (h < H) {
                A = cross->attn + ((size_t)l * H + h) * Tt * Ts;
                for (int x = 0; x < Tt * Ts; x++) mean[x] += A[x] / (float)H;
            }
            int k = l * (H + 1) + h;
            al_word_matrix(A, Tt, Ts, row_word, Wt, src_word, Ws, Wm);
            json_t *rw = json_array_get(json_object_get(c, "Wm"), (size_t)k);
            for (int x = 0; x < Wt * Ws; x++) {
                double d = fabs(Wm[x] - json_real_value(json_array_get(rw, (size_t)x)));
                maxd = d > maxd ? d : maxd;
            }
            json_t *rb = json_array_get(json_object_get(c, "best"), (size_t)k);
            for (int b = 0; b < Wt; b++)
                if (best[(size_t)k * Wt + b] != json_integer_value(json_array_get(rb, (size_t)b)))
                    fail_msg("%s layer %d head %d word %d: %d, reference %d", json_string_value(json_object_get(c, "name")),
                             l, h, b, best[(size_t)k * Wt + b], (int)json_integer_value(json_array_get(rb, (size_t)b)));
            al_counts cnt = {0};
            al_count(best + (size_t)k * Wt, Wt, &gold, &cnt);
            json_t *rc = json_array_get(json_object_get(c, "counts"), (size_t)k);
            assert_int_equal(cnt.a, json_integer_value(json_array_get(rc, 0)));
            assert_int_equal(cnt.s, json_integer_value(json_array_get(rc, 1)));
            assert_int_equal(cnt.a_s, json_integer_value(json_array_get(rc, 2)));
            assert_int_equal(cnt.a_p, json_integer_value(json_array_get(rc, 3)));
            double aer = json_real_value(json_array_get(json_object_get(c, "aer"), (size_t)k));
            assert_true(fabs(al_aer(&cnt) - aer) < 1e-12);
        }
    }
    printf("%s: word matrices max |diff| %.2g, %d alignments equal\n", json_string_value(json_object_get(c, "name")),
           maxd, L * (H + 1));
    assert_true(maxd <= tol);
    al_links_free(&gold);
    free(best);
    free(Wm);
    free(mean);
    free(src_word);
    free(label_word);
    free(row_word);
}

static void test_random_reference(void **state) {
    (void)state;
    const char *names[2] = {"random_shift0", "random_shift1"};
    for (int k = 0; k < 2; k++) {
        json_t *c = fx_case(names[k]);
        int n;
        as_run cross = {.T = fx_int(c, "Tt"), .Tk = fx_int(c, "Ts"), .n_lay = fx_int(c, "L"), .n_hd = fx_int(c, "H"),
                        .L = fx_int(c, "L"), .H = fx_int(c, "H")};
        json_t *a = json_object_get(c, "attn");
        n = (int)json_array_size(a);
        assert_int_equal(n, cross.n_lay * cross.n_hd * cross.T * cross.Tk);
        cross.attn = calloc((size_t)n, sizeof(float));
        for (int x = 0; x < n; x++) cross.attn[x] = (float)json_real_value(json_array_get(a, (size_t)x));
        check_case(c, &cross, 1e-6);
        free(cross.attn);
    }
    /* no captured attention */
    as_run none = {.T = 2, .Tk = 2, .n_lay = 1, .n_hd = 1};
    int w[2] = {0, 0};
    int32_t best[2];
    as_error err = {0};
    assert_int_equal(al_align_run(&none, w, 1, w, 1, best, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "not captured"));
}

static void test_bart_tiny(void **state) {
    (void)state;
    json_t *c = fx_case("bart_tiny");
    as_model *m = NULL;
    as_error err = {0};
    if (as_model_load(AS_SOURCE_DIR "/tests/ref/fixtures/models/bart_tiny", &m, &err)) fail_msg("%s", err.msg);
    int ns, nt;
    int *s = fx_ints(c, "src_ids", &ns), *t = fx_ints(c, "tgt_ids", &nt);
    int32_t s32[64], t32[64];
    for (int i = 0; i < ns; i++) s32[i] = s[i];
    for (int i = 0; i < nt; i++) t32[i] = t[i];
    as_encoding src = {0}, tgt = {0};
    assert_int_equal(as_encoding_from_ids(m, s32, NULL, ns, &src, &err), AS_OK);
    assert_int_equal(as_encoding_from_ids(m, t32, NULL, nt, &tgt, &err), AS_OK);
    as_capture_spec spec = {.what = CAP_ATTN, .layer = -1, .head = -1, .threads = 1};
    as_run *r = NULL;
    if (as_forward_seq2seq(m, &src, &tgt, &spec, &r, &err)) fail_msg("%s", err.msg);
    check_case(c, r->cross, 1e-5); /* the engine's attention is within 1e-5 of torch's */
    as_run_free(r);
    /* the shifted decoder input keeps each target token's byte span and special mark */
    int32_t st[5] = {-1, 0, 3, 4, -1}, en[5] = {-1, 3, 4, 6, -1};
    int8_t sq[5] = {-1, 0, 0, 0, -1};
    memcpy(tgt.start, st, sizeof st), memcpy(tgt.end, en, sizeof en), memcpy(tgt.seq, sq, sizeof sq);
    as_encoding dec = {0};
    assert_int_equal(as_seq2seq_shift_target(m, &tgt, &dec, &err), AS_OK);
    int32_t dst[5] = {-1, -1, 0, 3, 4}, den[5] = {-1, -1, 3, 4, 6};
    int8_t dsq[5] = {-1, -1, 0, 0, 0};
    assert_int_equal(dec.n, 5);
    assert_int_equal(dec.ids[0], 2);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(dec.start[i], dst[i]), assert_int_equal(dec.end[i], den[i]), assert_int_equal(dec.seq[i], dsq[i]);
        if (i) assert_int_equal(dec.ids[i], tgt.ids[i - 1]);
    }
    as_encoding_free(&dec);
    as_encoding_free(&src);
    as_encoding_free(&tgt);
    as_model_free(m);
    free(s);
    free(t);
}

static void test_parse(void **state) {
    (void)state;
    al_links a;
    as_error err = {0};
    assert_int_equal(al_parse_line("g.align", 3, " 2-1\t0?0 1p1 2?1 2-1  ", 3, 2, &a, &err), AS_OK);
    assert_int_equal(a.n, 3);
    /* sorted by (tgt, src); 2-1 sure although also given possible */
    assert_int_equal(a.links[0].src, 0), assert_int_equal(a.links[0].tgt, 0), assert_int_equal(a.links[0].sure, 0);
    assert_int_equal(a.links[1].src, 1), assert_int_equal(a.links[1].tgt, 1), assert_int_equal(a.links[1].sure, 0);
    assert_int_equal(a.links[2].src, 2), assert_int_equal(a.links[2].tgt, 1), assert_int_equal(a.links[2].sure, 1);
    al_links_free(&a);
    assert_int_equal(al_parse_line("g.align", 4, "", 3, 2, &a, &err), AS_OK);
    assert_int_equal(a.n, 0);
    al_links_free(&a);
    struct {
        const char *line, *msg;
    } bad[] = {
        {"0-0 1-1 1x2", "g.align:7: pair 3 '1x2': expected I-J (sure) or I?J / IpJ (possible)"},
        {"0-0 -1", "pair 2 '-1': expected"},
        {"0-0 1-", "pair 2 '1-': expected"},
        {"0-0 1-1-2", "pair 2 '1-1-2': expected"},
        {"0-0 1-1,", "pair 2 '1-1,': expected"},
        {"0-0 3-1", "g.align:7: pair 2 '3-1': source index 3 is outside the source sentence's 3 words"},
        {"0-0 1-2", "pair 2 '1-2': target index 2 is outside the target sentence's 2 words"},
        {"0-9999999999", "pair 1 '0-9999999999': expected"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err.msg[0] = 0;
        assert_int_equal(al_parse_line("g.align", 7, bad[i].line, 3, 2, &a, &err), AS_ERR_INPUT);
        if (!strstr(err.msg, bad[i].msg)) fail_msg("'%s': got '%s', want '%s'", bad[i].line, err.msg, bad[i].msg);
        assert_null(strchr(err.msg, '\n'));
        assert_null(a.links);
    }
    /* unchecked ranges */
    assert_int_equal(al_parse_line("g", 1, "40-7", -1, -1, &a, &err), AS_OK);
    al_links_free(&a);
    /* too many pairs */
    size_t n = (size_t)(AL_MAX_LINKS + 1) * 4;
    char *big = malloc(n + 1);
    assert_non_null(big);
    for (size_t i = 0; i < n; i += 4) memcpy(big + i, "0-0 ", 4);
    big[n] = 0;
    assert_int_equal(al_parse_line("g", 1, big, 1, 1, &a, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "more than 65536 pairs"));
    free(big);
}

static void test_words(void **state) {
    (void)state;
    const char *text = "ab  cd\te";
    /* <s> "ab"[0,2) " c"[3,5) "d"[5,6) " "[6,7) "e"[7,8) </s> pad */
    int32_t start[8] = {-1, 0, 3, 5, 6, 7, -1, -1}, end[8] = {-1, 2, 5, 6, 7, 8, -1, -1};
    int32_t mask[8] = {1, 1, 1, 1, 1, 1, 1, 0};
    as_encoding enc = {.n = 8, .start = start, .end = end, .mask = mask};
    int word[8], W = -5;
    as_error err = {0};
    assert_int_equal(al_token_words(&enc, text, word, &W, &err), AS_OK);
    assert_int_equal(W, 3);
    int want[8] = {-1, 0, 1, 1, 2, 2, -1, -1};
    for (int t = 0; t < 8; t++) assert_int_equal(word[t], want[t]);
    assert_int_equal(al_count_words("  a b\tc  "), 3);
    assert_int_equal(al_count_words(""), 0);
    char *many = malloc(2 * (AL_MAX_WORDS + 1) + 1);
    for (int i = 0; i <= AL_MAX_WORDS; i++) memcpy(many + 2 * i, "x ", 2);
    many[2 * (AL_MAX_WORDS + 1)] = 0;
    assert_int_equal(al_count_words(many), -1);
    assert_int_equal(al_token_words(&enc, many, word, &W, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "more than 1024 words"));
    free(many);
    int32_t best[4] = {2, -1, 0, 1};
    char buf[64];
    assert_string_equal(al_format(best, 4, buf, sizeof buf), "2-0 0-2 1-3");
    assert_string_equal(al_format(best, 4, buf, 6), "2-0");
    al_counts none = {0};
    assert_true(isnan(al_aer(&none)));
}

static void test_read_lines(void **state) {
    (void)state;
    char path[] = "/tmp/test_align_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "a b\r\n\nc", 7), 7);
    close(fd);
    char **lines;
    int n;
    as_error err = {0};
    assert_int_equal(al_read_lines(path, &lines, &n, &err), AS_OK);
    assert_int_equal(n, 3);
    assert_string_equal(lines[0], "a b");
    assert_string_equal(lines[1], "");
    assert_string_equal(lines[2], "c");
    al_lines_free(lines, n);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite("a\0b\n", 1, 4, f), 4);
    fclose(f);
    assert_int_equal(al_read_lines(path, &lines, &n, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "NUL byte"));
    unlink(path);
    assert_int_equal(al_read_lines("/nonexistent/x.en", &lines, &n, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "/nonexistent/x.en"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random_reference), cmocka_unit_test(test_bart_tiny), cmocka_unit_test(test_parse),
        cmocka_unit_test(test_words), cmocka_unit_test(test_read_lines),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
