/* test_intervene.c — interventions on the attention inside the one forward (head ablation,
 * attention knockout: as_intervention, model/encoder.c) and the output comparison
 * (iv_compare, analysis/intervene.c) against tests/ref/gen_intervene.py: the fixtures' own
 * PyTorch forwards in float64 with the same edits of the attention probabilities, on bert
 * (classifier), gpt2 (LM, Conv1D) and llama_bf16 (LM, grouped-query attention, BF16). The
 * log-probabilities without and with each intervention within 1e-5.
 * Also: the captured attention holds the knockouts (0 at the edge; renormalised rows sum
 * to 1, others do not); an empty intervention changes nothing; the text form's parser;
 * refusals (head, edge or position out of range, a classifier's position).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "attnscope/analysis.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif
#define MODELS AS_SOURCE_DIR "/tests/ref/fixtures/models/"
#define REF AS_SOURCE_DIR "/tests/ref/fixtures/attrib/intervene.safetensors"

/* gen_intervene.py's CASES; query / key -1 = the last token */
typedef struct {
    const char *name;
    as_head_ref heads[2];
    int n_heads, mode;
    as_edge edges[3];
    int n_edges, renorm;
} iv_case;

static const iv_case CASES[] = {
    {"zero", {{0, 1}, {1, 2}}, 2, AS_HEAD_ZERO, {{0}}, 0, 0},
    {"mean_knock", {{1, 0}}, 1, AS_HEAD_MEAN, {{0, -1, -1, 0}, {1, 2, 3, 1}}, 2, 1},
    {"knock", {{0}}, 0, AS_HEAD_ZERO, {{0, 1, 2, 2}, {1, -1, -1, -1}, {1, 3, 5, 0}}, 3, 0},
};

typedef struct {
    as_model *m;
    st_file *exp;
    as_encoding enc;
} fx;

static void load(fx *f, const char *name) {
    memset(f, 0, sizeof *f);
    char path[512];
    as_error err = {0};
    snprintf(path, sizeof path, MODELS "%s", name);
    if (as_model_load(path, &f->m, &err)) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, MODELS "%s/expected.safetensors", name);
    if (st_file_open(path, &f->exp, &err)) fail_msg("%s", err.msg);
    const st_tensor *ids = st_file_find(f->exp, "single.input_ids"), *tt = st_file_find(f->exp, "single.token_type_ids");
    assert_non_null(ids);
    const int32_t *types = as_model_config(f->m)->type_vocab > 1 ? tt->data : NULL;
    if (as_encoding_from_ids(f->m, ids->data, types, (int)ids->n_elems, &f->enc, &err)) fail_msg("%s", err.msg);
}

static void unload(fx *f) {
    as_encoding_free(&f->enc);
    st_file_free(f->exp);
    as_model_free(f->m);
}

/* The case with -1 positions resolved for T tokens (edges into e). */
static as_intervention make(const iv_case *c, int T, as_edge *e) {
    for (int k = 0; k < c->n_edges; k++) {
        e[k] = c->edges[k];
        if (e[k].query < 0) e[k].query += T;
        if (e[k].key < 0) e[k].key += T;
    }
    return (as_intervention){c->n_heads, c->heads, c->mode, c->n_edges, e, c->renorm};
}

static double max_diff(const float *a, const float *b, int n) {
    double d = 0.0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void against_reference(const char *name) {
    fx f;
    load(&f, name);
    as_error err = {0};
    st_file *ref = NULL;
    if (st_file_open(REF, &ref, &err)) fail_msg("%s", err.msg);
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        as_edge e[3];
        as_intervention iv = make(&CASES[c], f.enc.n, e);
        iv_opts o = {.position = -1, .threads = 2};
        iv_result r;
        if (iv_compare(f.m, &f.enc, &iv, &o, &r, &err)) fail_msg("%s %s: %s", name, CASES[c].name, err.msg);
        char key[96];
        snprintf(key, sizeof key, "%s.%s.base", name, CASES[c].name);
        const st_tensor *b = st_file_find(ref, key);
        snprintf(key, sizeof key, "%s.%s.after", name, CASES[c].name);
        const st_tensor *a = st_file_find(ref, key);
        assert_non_null(b);
        assert_non_null(a);
        assert_int_equal(b->n_elems, (size_t)r.cols);
        double db = max_diff(r.base, b->data, r.cols), da = max_diff(r.after, a->data, r.cols);
        double moved = max_diff(r.base, r.after, r.cols);
        printf("  %-10s %-10s position %d: base %.1e, after %.1e (the intervention moves log p by up to %.4f)\n", name,
               CASES[c].name, r.position, db, da, moved);
        assert_true(db <= 1e-5);
        assert_true(da <= 1e-5);
        assert_true(moved > 5e-5);
        iv_result_free(&r);
    }
    st_file_free(ref);
    unload(&f);
}

static void test_bert(void **state) { (void)state; against_reference("bert"); }
static void test_gpt2(void **state) { (void)state; against_reference("gpt2"); }
static void test_llama_bf16(void **state) { (void)state; against_reference("llama_bf16"); }

/* The captured attention holds the knockouts; an empty intervention changes nothing. */
static void test_captured(void **state) {
    (void)state;
    fx f;
    load(&f, "gpt2");
    const int T = f.enc.n, H = as_model_config(f.m)->n_head;
    as_error err = {0};
    as_run *r0 = NULL, *r1 = NULL;
    as_capture_spec spec = {.what = CAP_ATTN | CAP_LOGITS, .layer = -1, .head = -1, .threads = 1};
    if (as_forward(f.m, &f.enc, &spec, &r0, &err)) fail_msg("%s", err.msg);
    as_edge e[2] = {{1, 2, 6, 0}, {2, -1, 7, 7}};
    as_intervention iv = {0, NULL, AS_HEAD_ZERO, 2, e, 1};
    spec.intervene = &iv;
    if (as_forward(f.m, &f.enc, &spec, &r1, &err)) fail_msg("%s", err.msg);
    const float *a = as_run_attn(r1, 1, 2) + 6 * T, *a0 = as_run_attn(r0, 1, 2) + 6 * T;
    double s = 0.0;
    for (int j = 0; j < T; j++) s += a[j];
    assert_true(a[0] == 0.0f && a0[0] > 0.0f);
    assert_true(fabs(s - 1.0) < 1e-6);
    for (int j = 1; j <= 6; j++) assert_true(fabs(a[j] - a0[j] / (1.0 - a0[0])) < 1e-6);
    for (int h = 0; h < H; h++) assert_true(as_run_attn(r1, 2, h)[7 * T + 7] == 0.0f);
    assert_memory_equal(as_run_attn(r1, 0, 0), as_run_attn(r0, 0, 0), (size_t)T * T * sizeof(float));
    as_run_free(r1);
    /* without renormalising the row sums to 1 - the edge */
    iv.renorm = 0;
    if (as_forward(f.m, &f.enc, &spec, &r1, &err)) fail_msg("%s", err.msg);
    a = as_run_attn(r1, 1, 2) + 6 * T;
    s = 0.0;
    for (int j = 0; j < T; j++) s += a[j];
    assert_true(fabs(s - (1.0 - a0[0])) < 1e-6);
    as_run_free(r1);
    /* empty: the same bits */
    as_intervention none = {0, NULL, AS_HEAD_ZERO, 0, NULL, 0};
    spec.intervene = &none;
    if (as_forward(f.m, &f.enc, &spec, &r1, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(r1->logits, r0->logits, (size_t)r0->logits_rows * r0->logits_cols * sizeof(float));
    as_run_free(r1);
    as_run_free(r0);
    unload(&f);
}

static void test_parse(void **state) {
    (void)state;
    char msg[256];
    as_head_ref *h = NULL;
    as_edge *e = NULL;
    int n = 0;
    assert_int_equal(iv_parse_heads("0:1,11:3", &h, &n, msg, sizeof msg), 0);
    assert_int_equal(n, 2);
    assert_true(h[1].layer == 11 && h[1].head == 3);
    free(h);
    assert_int_equal(iv_parse_edges("2:5>0,3:1:4>4,0:*:1>0", &e, &n, msg, sizeof msg), 0);
    assert_int_equal(n, 3);
    assert_true(e[0].layer == 2 && e[0].head == -1 && e[0].query == 5 && e[0].key == 0);
    assert_true(e[1].layer == 3 && e[1].head == 1 && e[1].query == 4 && e[1].key == 4);
    assert_true(e[2].head == -1 && e[2].query == 1);
    free(e);
    const char *bad_heads[] = {"", "1", "1:", "1:2,", "a:1", "1:2x", "-1:2"};
    for (size_t k = 0; k < sizeof bad_heads / sizeof *bad_heads; k++) {
        assert_int_equal(iv_parse_heads(bad_heads[k], &h, &n, msg, sizeof msg), -1);
        assert_null(h);
        assert_null(strchr(msg, '\n'));
    }
    const char *bad_edges[] = {"1:2", "1:2>", "1:>2", "1:2:3", "x:1>2", "1:1:2>3:", "1:*2>3"};
    for (size_t k = 0; k < sizeof bad_edges / sizeof *bad_edges; k++) {
        assert_int_equal(iv_parse_edges(bad_edges[k], &e, &n, msg, sizeof msg), -1);
        printf("  refused: %s\n", msg);
        assert_null(e);
    }
}

static void refused(const fx *f, const as_intervention *iv, int position, const char *needle) {
    as_error err = {0};
    iv_opts o = {.position = position, .threads = 1};
    iv_result r;
    assert_int_equal(iv_compare(f->m, &f->enc, iv, &o, &r, &err), AS_ERR_INPUT);
    printf("  refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, needle));
    assert_null(r.base);
}

static void test_refusals(void **state) {
    (void)state;
    fx f;
    load(&f, "bert");
    as_head_ref h = {2, 0};
    as_intervention iv = {1, &h, AS_HEAD_ZERO, 0, NULL, 0};
    refused(&f, &iv, -1, "ablated head 2:0 is outside layers 0..1");
    h = (as_head_ref){1, 4};
    refused(&f, &iv, -1, "heads 0..3");
    as_edge e = {0, -1, 10, 0};
    iv = (as_intervention){0, NULL, AS_HEAD_ZERO, 1, &e, 0};
    refused(&f, &iv, -1, "edge 10>0 is outside the 10 tokens");
    e = (as_edge){0, -2, 1, 0};
    refused(&f, &iv, -1, "outside layers");
    iv = (as_intervention){0, NULL, 7, 0, NULL, 0};
    refused(&f, &iv, -1, "unknown head mode 7");
    iv = (as_intervention){0, NULL, AS_HEAD_ZERO, 0, NULL, 0};
    refused(&f, &iv, 2, "position applies to LM");
    unload(&f);
    load(&f, "gpt2");
    refused(&f, &iv, 9, "position 9 out of range [0, 9)");
    unload(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert),  cmocka_unit_test(test_gpt2),  cmocka_unit_test(test_llama_bf16),
        cmocka_unit_test(test_captured), cmocka_unit_test(test_parse), cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
