/* test_attn_npz.c — attention computed elsewhere read from .npz files
 * (src/io/attn_npz.c, as_attn_npz_read) on the fixtures of tests/ref/gen_npz_attention.py:
 * the layout of `attnscope run --format npz` (float32 weights, queries, keys and
 * PyTorch's scores, tokens, token_text, ids) read bit-exactly (compared with the float32
 * reader of the same archive), bertviz-style float16 arrays [L, 1, H, T, T] converted
 * exactly (compared with NumPy's float32 conversion stored in the file), unicode tokens
 * to UTF-8, sentence_b_start to segments, causality detected; and every bad file
 * (seventeen) refused with AS_ERR_INPUT and one line naming the file and the defect;
 * as_attn_npz_from_attention on the same weights.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "attnscope/attn_npz.h"
#include "io/npz_read.h"

#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/npz_attention/"

/* Asserts that n floats of got equal array name of the fixture file, bit for bit. */
static void expect_array(const char *file, const char *name, const float *got, size_t n) {
    npy_array a;
    as_error err = {0};
    assert_int_equal(npz_read_f32(file, name, &a, &err), AS_OK);
    assert_int_equal(a.n, n);
    assert_memory_equal(a.data, got, n * sizeof(float));
    npy_array_free(&a);
}

static void test_run_layout(void **state) {
    (void)state;
    as_attn_npz a;
    as_error err = {0};
    assert_int_equal(as_attn_npz_read(FIX "run_like.npz", &a, &err), AS_OK);
    const as_run *r = a.run;
    assert_int_equal(r->L, 2);
    assert_int_equal(r->H, 3);
    assert_int_equal(r->T, 6);
    assert_int_equal(r->Dh, 4);
    assert_int_equal(r->Hkv, 3);
    assert_int_equal(a.neuron, 1);
    assert_int_equal(a.causal, 0);
    assert_int_equal(a.bertviz, 0);
    expect_array(FIX "run_like.npz", "attentions", r->attn, 2 * 3 * 6 * 6);
    expect_array(FIX "run_like.npz", "attention_scores", r->scores, 2 * 3 * 6 * 6);
    expect_array(FIX "run_like.npz", "queries", r->q, 2 * 3 * 6 * 4);
    expect_array(FIX "run_like.npz", "keys", r->k, 2 * 3 * 6 * 4);
    assert_ptr_equal(as_run_attn(r, 1, 2), r->attn + (1 * 3 + 2) * 36);
    const char *pieces[6] = {"[CLS]", "the", "cat", "sat", "##s", "[SEP]"};
    const int32_t ids[6] = {101, 1996, 4937, 2938, 2015, 102};
    for (int i = 0; i < 6; i++) {
        assert_string_equal(a.tokens[i], pieces[i]);
        assert_int_equal(a.input_ids[i], ids[i]);
        assert_int_equal(a.type_ids[i], 0);
    }
    assert_string_equal(a.token_text[4], "s");
    for (int l = 0; l < 2; l++) assert_float_equal(a.scale[l], 0.5f, 0);
    for (int h = 0; h < 3; h++) assert_int_equal(a.kv_group[h], h);
    as_attn_npz_free(&a);
}

static void test_bertviz_f16(void **state) {
    (void)state;
    as_attn_npz a;
    as_error err = {0};
    assert_int_equal(as_attn_npz_read(FIX "bertviz_f16.npz", &a, &err), AS_OK);
    const as_run *r = a.run;
    assert_int_equal(r->L, 2);
    assert_int_equal(r->H, 2);
    assert_int_equal(r->T, 5);
    assert_int_equal(r->Dh, 0);
    assert_null(r->q);
    assert_int_equal(a.neuron, 0);
    assert_int_equal(a.causal, 1);
    assert_int_equal(a.bertviz, 1);
    expect_array(FIX "bertviz_f16.npz", "expected_f32", r->attn, 2 * 2 * 5 * 5);
    assert_string_equal(a.tokens[1], "\xc4\xa0" "caf\xc3\xa9"); /* U+0120 "caf" U+00E9 */
    assert_null(a.token_text);
    assert_null(a.input_ids);
    const int seg[5] = {0, 0, 0, 1, 1}; /* sentence_b_start = 3 */
    for (int i = 0; i < 5; i++) assert_int_equal(a.type_ids[i], seg[i]);
    assert_float_equal(a.scale[0], 1.0f, 0);
    as_attn_npz_free(&a);
}

static void test_bad_files(void **state) {
    (void)state;
    static const struct {
        const char *file, *needle;
    } cases[] = {
        {"bad_negative.npz", "'attentions' entry 202 is negative or not finite"},
        {"bad_nan.npz", "'attentions' entry 48 is negative or not finite"},
        {"bad_tokens_count.npz", "'tokens' must be 6 strings"},
        {"bad_no_tokens.npz", "no 'tokens' array"},
        {"bad_shape.npz", "must be [layers, heads, T, T]"},
        {"bad_int_weights.npz", "must hold floats"},
        {"bad_queries_shape.npz", "'queries' must be [2, 3, 6, d_head], not [2, 3, 5, 4]"},
        {"bad_object_tokens.npz", "dtype '|O' is not read"},
        {"bad_no_attention.npz", "no 'attentions' array"},
        {"bad_not_npz.npz", "not an .npz archive"},
        {"bad_too_many_layers.npz", "over the limits of 256 layers (AS_NPZ_MAX_LAYERS)"},
        {"bad_kv_group.npz", "'kv_group' entry 2 is outside [0, 2]"},
        {"bad_sentence_b.npz", "'sentence_b_start' must be one integer in [0, 6]"},
        {"bad_surrogate.npz", "'tokens' string 2 holds U+D800"},
        {"bad_layers.npz", "'layers' must be 2 integers, not '<i4' of [3]"},
        {"bad_scores_nan.npz", "'attention_scores' entry 0 is NaN"},
        {"missing.npz", "missing.npz"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[512];
        snprintf(path, sizeof path, FIX "%s", cases[i].file);
        as_attn_npz a;
        as_error err = {0};
        as_status st = as_attn_npz_read(path, &a, &err);
        if (st != AS_ERR_INPUT || !strstr(err.msg, cases[i].needle) || !strstr(err.msg, cases[i].file))
            fail_msg("%s: status %d, message '%s' (expected '%s')", cases[i].file, (int)st, err.msg, cases[i].needle);
        assert_null(strchr(err.msg, '\n'));
        as_attn_npz_free(&a);
    }
}

/* as_attn_npz_from_attention (an analysis database's imported sentence): the run_like
 * fixture's weights copied bit for bit, the tokens as pieces and text, scale 1, no q/k;
 * its lower triangle alone detected causal; a negative weight and sizes over the limits
 * refused with one line. */
static void test_from_attention(void **state) {
    (void)state;
    npy_array w;
    as_error err = {0};
    assert_int_equal(npz_read_f32(FIX "run_like.npz", "attentions", &w, &err), AS_OK);
    const char *tok[6] = {"[CLS]", "the", "cat", "sat", "s", "[SEP]"};
    as_attn_npz a;
    assert_int_equal(as_attn_npz_from_attention(w.data, 2, 3, 6, tok, &a, &err), AS_OK);
    assert_memory_equal(a.run->attn, w.data, w.n * sizeof(float));
    assert_int_equal(a.run->L * a.run->H * a.run->T, 36);
    assert_int_equal(a.run->Dh, 0);
    assert_int_equal(a.neuron, 0);
    assert_int_equal(a.causal, 0);
    assert_null(a.run->q);
    for (int i = 0; i < 6; i++) {
        assert_string_equal(a.tokens[i], tok[i]);
        assert_string_equal(a.token_text[i], tok[i]);
        assert_int_equal(a.type_ids[i], 0);
    }
    for (int l = 0; l < 2; l++) assert_float_equal(a.scale[l], 1.0f, 0);
    for (int h = 0; h < 3; h++) assert_int_equal(a.kv_group[h], h);
    as_attn_npz_free(&a);
    for (size_t m = 0; m < 6; m++) /* the upper triangles zeroed: causal */
        for (int i = 0; i < 6; i++)
            for (int j = i + 1; j < 6; j++) w.data[(m * 6 + i) * 6 + j] = 0.0f;
    assert_int_equal(as_attn_npz_from_attention(w.data, 2, 3, 6, tok, &a, &err), AS_OK);
    assert_int_equal(a.causal, 1);
    as_attn_npz_free(&a);
    w.data[40] = -0.5f;
    assert_int_equal(as_attn_npz_from_attention(w.data, 2, 3, 6, tok, &a, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "entry 40 is negative"));
    as_attn_npz_free(&a);
    assert_int_equal(as_attn_npz_from_attention(w.data, AS_NPZ_MAX_LAYERS + 1, 3, 6, tok, &a, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "outside the limits"));
    assert_null(strchr(err.msg, '\n'));
    as_attn_npz_free(&a);
    npy_array_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_layout),
        cmocka_unit_test(test_bertviz_f16),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_from_attention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
