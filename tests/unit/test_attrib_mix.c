/* test_attrib_mix.c — the block-level mixing methods (src/analysis/attrib_mix.c): norm2
 * (Kobayashi et al. 2021) and ALTI (Ferrando et al. 2022) against tests/ref/gen_mixing.py's
 * float64 references on five fixtures that cover every block the decomposition knows:
 * bert and distilbert (post-LN), gpt2 (pre-LN, Conv1D, biases), llama_bf16 (pre-RMSNorm,
 * grouped-query attention, BF16 weights) and gemma2 (pre-RMSNorm plus a post-attention
 * RMSNorm scaled by 1 + w).
 *
 * End to end (attr_compute: the engine's forward, then the decomposition): norm2 within
 * 1e-4 of its largest value, ALTI (per layer through attr_mixing, and aggregated) within
 * 1e-5 absolute; ALTI's rows sum to 1; 1 and 3 threads give the same bits; a run that
 * holds the hidden states (attr_compute_run) gives attr_compute's values, and one that
 * does not (the server's cached runs) falls back to a forward. Refusals: target and
 * position, which norm2 and alti do not explain.
 * Per head (attr_head_mixing, the analysis's norm_sink_ratio and alti_contribution):
 * ||f_h(x_j)|| within 1e-4 of its largest value and each head's ALTI share of the block
 * output within 1e-5, on the same five blocks; 1 and 3 threads give the same bits.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>

#define FX_REF_SUFFIX "_mix"
#define FX_WHAT_WIDTH 12
#include "attrib_fixture.h"

/* Reference tensor name of n floats. */
static const float *ref_n(const fx *f, const char *name, size_t n) {
    const st_tensor *t = st_file_find(f->ref, name);
    if (!t) fail_msg("no tensor '%s'", name);
    assert_int_equal(t->dtype, DTYPE_F32);
    assert_int_equal(t->n_elems, n);
    return t->data;
}

static const float *ref(const fx *f, const char *name) { return ref_n(f, name, (size_t)f->L * f->T * f->T); }

/* attr_head_mixing on a run of f's input: value norms and head shares against the reference. */
static void per_head(const fx *f) {
    as_error err = {0};
    as_run *run = NULL;
    as_capture_spec spec = {.what = CAP_ATTN | CAP_QKV | CAP_HIDDEN, .layer = -1, .head = -1, .threads = 1};
    if (as_forward(f->m, &f->enc, &spec, &run, &err)) fail_msg("%s", err.msg);
    const size_t n = (size_t)f->L * f->H * f->T;
    float *fn = malloc(n * sizeof(float)), *sh = malloc(n * sizeof(float)), *sh3 = malloc(n * sizeof(float));
    assert_true(fn && sh && sh3);
    assert_int_equal(attr_head_mixing(f->m, run, 1, fn, sh, &err), AS_OK);
    compare("fnorm", fn, ref_n(f, "fnorm", n), n, 1e-4, 1);
    compare("head_share", sh, ref_n(f, "head_share", n), n, 1e-5, 0);
    assert_int_equal(attr_head_mixing(f->m, run, 3, NULL, sh3, &err), AS_OK);
    assert_memory_equal(sh, sh3, n * sizeof(float));
    free(fn);
    free(sh);
    free(sh3);
    as_run_free(run);
}

static void compute(const fx *f, attr_method method, int threads, attr_result *r) {
    as_error err = {0};
    attr_opts o = {.method = method, .target = -1, .position = -1, .threads = threads};
    if (attr_compute(f->m, &f->enc, &o, r, &err)) fail_msg("%s %s: %s", f->name, attr_method_name(method), err.msg);
    assert_int_equal(r->method, method);
    assert_int_equal(r->ndim, 3);
    assert_int_equal(r->shape[0], f->L);
    assert_int_equal(r->shape[1], f->T);
    assert_int_equal(r->shape[2], f->T);
}

static void end_to_end(const char *name) {
    fx f;
    load(&f, name);
    printf("%s (L = %d, T = %d):\n", name, f.L, f.T);
    const size_t n = (size_t)f.L * f.T * f.T;
    attr_result r, r3;
    compute(&f, ATTR_NORM2, 1, &r);
    compare("norm2", r.data, ref(&f, "norm2"), n, 1e-4, 1);
    compute(&f, ATTR_NORM2, 3, &r3);
    assert_memory_equal(r.data, r3.data, n * sizeof(float));
    attr_result_free(&r);
    attr_result_free(&r3);

    compute(&f, ATTR_ALTI, 1, &r);
    compare("alti", r.data, ref(&f, "alti"), n, 1e-5, 0);
    for (size_t row = 0; row < (size_t)f.L * f.T; row++) {
        double s = 0.0;
        for (int j = 0; j < f.T; j++) s += r.data[row * f.T + j];
        assert_true(fabs(s - 1.0) < 1e-5);
    }
    compute(&f, ATTR_ALTI, 3, &r3);
    assert_memory_equal(r.data, r3.data, n * sizeof(float));
    attr_result_free(&r3);

    /* the per-layer contributions and the same from a captured run */
    as_error err = {0};
    as_run *run = NULL;
    as_capture_spec spec = {.what = CAP_ATTN | CAP_QKV | CAP_HIDDEN, .layer = -1, .head = -1, .threads = 1};
    if (as_forward(f.m, &f.enc, &spec, &run, &err)) fail_msg("%s", err.msg);
    float *C = malloc(n * sizeof(float));
    assert_non_null(C);
    assert_int_equal(attr_mixing(f.m, run, 2, NULL, C, &err), AS_OK);
    compare("alti_layer", C, ref(&f, "alti_layer"), n, 1e-5, 0);
    free(C);
    attr_opts o = {.method = ATTR_ALTI, .target = -1, .position = -1, .threads = 1};
    assert_int_equal(attr_compute_run(f.m, &f.enc, run, &o, &r3, &err), AS_OK);
    assert_memory_equal(r.data, r3.data, n * sizeof(float));
    attr_result_free(&r3);
    as_run_free(run);
    /* a run without hidden states (the server's): a forward of its own */
    spec.what = CAP_ATTN | CAP_QKV;
    if (as_forward(f.m, &f.enc, &spec, &run, &err)) fail_msg("%s", err.msg);
    assert_int_equal(attr_compute_run(f.m, &f.enc, run, &o, &r3, &err), AS_OK);
    assert_memory_equal(r.data, r3.data, n * sizeof(float));
    attr_result_free(&r3);
    as_run_free(run);
    attr_result_free(&r);
    per_head(&f);
    unload(&f);
}

static void test_bert(void **state) { (void)state; end_to_end("bert"); }
static void test_distilbert(void **state) { (void)state; end_to_end("distilbert"); }
static void test_gpt2(void **state) { (void)state; end_to_end("gpt2"); }
static void test_llama_bf16(void **state) { (void)state; end_to_end("llama_bf16"); }
static void test_gemma2(void **state) { (void)state; end_to_end("gemma2"); }

static void test_refusals(void **state) {
    (void)state;
    fx f;
    load(&f, "bert");
    as_error err = {0};
    attr_result r;
    attr_opts o = {.method = ATTR_ALTI, .target = 1, .position = -1, .threads = 1};
    assert_int_equal(attr_compute(f.m, &f.enc, &o, &r, &err), AS_ERR_INPUT);
    printf("  refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "alti explains no prediction"));
    o = (attr_opts){.method = ATTR_NORM2, .target = -1, .position = 0, .threads = 1};
    assert_int_equal(attr_compute(f.m, &f.enc, &o, &r, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "norm2 explains no prediction"));
    /* a run without every layer */
    as_run *run = NULL;
    as_capture_spec spec = {.what = CAP_ATTN | CAP_QKV | CAP_HIDDEN, .layer = 1, .head = -1, .threads = 1};
    if (as_forward(f.m, &f.enc, &spec, &run, &err)) fail_msg("%s", err.msg);
    float C[1];
    assert_int_equal(attr_mixing(f.m, run, 1, NULL, C, &err), AS_ERR_INPUT);
    printf("  refused: %s\n", err.msg);
    assert_int_equal(attr_head_mixing(f.m, run, 1, NULL, C, &err), AS_ERR_INPUT);
    printf("  refused: %s\n", err.msg);
    as_run_free(run);
    unload(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert),   cmocka_unit_test(test_distilbert), cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama_bf16), cmocka_unit_test(test_gemma2), cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
