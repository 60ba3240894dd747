/* test_attrib.c — the attribution methods (src/analysis/attrib.c) against
 * tests/ref/gen_attrib.py's float64 references on four fixtures: bert (sequence
 * classifier), gpt2 (LM, Conv1D weights), llama_bf16 (LM, grouped-query attention, BF16
 * weights read in place), bert_noprefix_mlm (masked-LM head).
 *
 * End to end (attr_compute: the engine's forward and backward): rollout and flow within
 * 1e-5 absolute (the attention itself matches PyTorch to about 1e-6); norm-based, grad-
 * weighted and head importance within 1e-4 of the largest magnitude (measured: below 1e-6,
 * the BF16 model's included), the explained logit (target,
 * position, value) as PyTorch's. bert with target 1 against grads.safetensors' d_attentions
 * (tests/ref/gen_grads.py). The formulas alone, on the reference attention and gradients:
 * every raw max-flow value against networkx.maximum_flow_value (1e-6: stored as F32), rollout, grad-
 * weighted, importance (1e-6 relative); the max-flows of random sparse attention that need
 * several Dinic phases against networkx. Flow on 1 and 3 threads is identical; the methods
 * from a captured run (attr_compute_run) equal attr_compute's. Every layer's cumulative map
 * (attr_opts.layers; gen_attrib.py's <name>_layers references): rollout and grad-weighted
 * (torch.autograd's dy/dA) per layer on the reference tensors (1e-6 relative), every raw
 * max-flow value from layer 0 to layer l's output against networkx (1e-6) and the
 * normalised flows, end to end within the tolerances above, the last layer bit for bit
 * the whole model's map. Refusals:
 * flow beyond ATTR_FLOW_MAX_T tokens, target / position where they do not apply or are out
 * of range.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#define FX_REF_SUFFIX ""
#define FX_WHAT_WIDTH 22
#include "attrib_fixture.h"

static const float *ref(const fx *f, const char *name) { return tensor(f->ref, name, DTYPE_F32)->data; }
static int ref_int(const fx *f, const char *name) { return *(const int32_t *)tensor(f->ref, name, DTYPE_I32)->data; }

static void compute(const fx *f, attr_method method, int target, int position, attr_result *r) {
    as_error err = {0};
    attr_opts o = {.method = method, .target = target, .position = position, .threads = 1};
    if (attr_compute(f->m, &f->enc, &o, r, &err)) fail_msg("%s %s: %s", f->name, attr_method_name(method), err.msg);
    assert_int_equal(r->method, method);
}

static void end_to_end(const char *name, double tol) {
    fx f;
    load(&f, name);
    printf("%s (T = %d, L = %d, H = %d):\n", name, f.T, f.L, f.H);
    const size_t TT = (size_t)f.T * f.T, LH = (size_t)f.L * f.H;
    attr_result r;
    compute(&f, ATTR_ROLLOUT, -1, -1, &r);
    assert_int_equal(r.ndim, 2);
    assert_int_equal(r.shape[0], f.T);
    assert_int_equal(r.target, -1);
    compare("rollout", r.data, ref(&f, "rollout"), TT, 1e-5, 0);
    attr_result_free(&r);
    compute(&f, ATTR_FLOW, -1, -1, &r);
    compare("flow", r.data, ref(&f, "flow"), TT, 1e-5, 0);
    attr_result_free(&r);
    compute(&f, ATTR_NORM, -1, -1, &r);
    assert_int_equal(r.ndim, 4);
    assert_int_equal(r.shape[1], f.H);
    compare("norm", r.data, ref(&f, "norm"), LH * TT, tol, 1);
    attr_result_free(&r);
    compute(&f, ATTR_GRAD, -1, -1, &r);
    assert_int_equal(r.target, ref_int(&f, "target"));
    assert_int_equal(r.position, ref_int(&f, "position"));
    assert_true(fabsf(r.logit - ref(&f, "logit")[0]) <= tol * fmax(1.0, fabs(ref(&f, "logit")[0])));
    compare("grad", r.data, ref(&f, "grad"), TT, tol, 1);
    attr_result_free(&r);
    compute(&f, ATTR_IMPORTANCE, -1, -1, &r);
    assert_int_equal(r.shape[0], f.L);
    assert_int_equal(r.shape[1], f.H);
    compare("importance", r.data, ref(&f, "importance"), LH, tol, 1);
    attr_result_free(&r);
    unload(&f);
}

/* tests/ref/fixtures/attrib/NAME_layers.safetensors (every layer's cumulative map). */
static st_file *open_layers(const char *name) {
    char path[512];
    as_error err = {0};
    st_file *g = NULL;
    snprintf(path, sizeof path, REFS "%s_layers.safetensors", name);
    if (st_file_open(path, &g, &err)) fail_msg("%s", err.msg);
    return g;
}

/* attr_opts.layers end to end: rollout, flow and grad (L, T, T) against every layer's
 * reference, the last layer bit for bit the whole model's (layers = 0). */
static void end_to_end_layers(const char *name, double tol) {
    fx f;
    load(&f, name);
    st_file *g = open_layers(name);
    printf("%s, every layer:\n", name);
    const attr_method ms[] = {ATTR_ROLLOUT, ATTR_FLOW, ATTR_GRAD};
    const char *refs[] = {"rollout_layers", "flow_layers", "grad_layers"};
    const size_t TT = (size_t)f.T * f.T;
    as_error err = {0};
    for (int k = 0; k < 3; k++) {
        attr_opts o = {.method = ms[k], .target = -1, .position = -1, .threads = 2, .layers = 1};
        attr_result r, w;
        if (attr_compute(f.m, &f.enc, &o, &r, &err)) fail_msg("%s", err.msg);
        assert_int_equal(r.ndim, 3);
        assert_int_equal(r.shape[0], f.L);
        assert_int_equal(r.shape[2], f.T);
        compare(refs[k], r.data, tensor(g, refs[k], DTYPE_F32)->data, f.L * TT, ms[k] == ATTR_GRAD ? tol : 1e-5,
                ms[k] == ATTR_GRAD);
        compute(&f, ms[k], -1, -1, &w);
        assert_memory_equal(r.data + (f.L - 1) * TT, w.data, TT * sizeof(float));
        attr_result_free(&r);
        attr_result_free(&w);
    }
    st_file_free(g);
    unload(&f);
}

static void test_layers(void **state) {
    (void)state;
    end_to_end_layers("bert", 1e-4);
    end_to_end_layers("gpt2", 1e-4);
    end_to_end_layers("llama_bf16", 1e-4);
    end_to_end_layers("bert_noprefix_mlm", 1e-4);
}

static void test_bert(void **state) {
    (void)state;
    end_to_end("bert", 1e-4);
    /* class 1: grads.safetensors' objective (tests/ref/gen_grads.py) */
    fx f;
    load(&f, "bert");
    attr_result r;
    compute(&f, ATTR_GRAD, 1, -1, &r);
    assert_int_equal(r.target, 1);
    assert_int_equal(r.position, 0);
    compare("grad, class 1", r.data, ref(&f, "grad_objective"), (size_t)f.T * f.T, 1e-4, 1);
    attr_result_free(&r);
    compute(&f, ATTR_IMPORTANCE, 1, -1, &r);
    compare("importance, class 1", r.data, ref(&f, "importance_objective"), (size_t)f.L * f.H, 1e-4, 1);
    attr_result_free(&r);
    unload(&f);
}

static void test_gpt2(void **state) {
    (void)state;
    end_to_end("gpt2", 1e-4);
}

static void test_llama_bf16(void **state) {
    (void)state;
    end_to_end("llama_bf16", 1e-4);
}

static void test_mlm(void **state) {
    (void)state;
    end_to_end("bert_noprefix_mlm", 1e-4);
}

/* The formulas on the reference attention and gradients. */
static void formulas(const char *name) {
    fx f;
    load(&f, name);
    printf("%s formulas:\n", name);
    const float *A = tensor(f.exp, "single.attentions", DTYPE_F32)->data;
    const size_t TT = (size_t)f.T * f.T, LH = (size_t)f.L * f.H;
    float *R = malloc(TT * sizeof(float)), *I = malloc(LH * sizeof(float));
    assert_non_null(R);
    assert_non_null(I);
    as_error err = {0};
    assert_int_equal(attr_rollout(A, f.L, f.H, f.T, R, &err), AS_OK);
    compare("rollout", R, ref(&f, "rollout"), TT, 1e-6, 1);
    /* every layer's rollout: layer l is the rollout of layers 0..l, the last the model's */
    float *RL = malloc((size_t)f.L * TT * sizeof(float));
    assert_non_null(RL);
    assert_int_equal(attr_rollout_layers(A, f.L, f.H, f.T, RL, &err), AS_OK);
    compare("rollout, last of every layer's", RL + (size_t)(f.L - 1) * TT, ref(&f, "rollout"), TT, 1e-6, 1);
    for (int l = 0; l < f.L; l++) {
        assert_int_equal(attr_rollout(A, l + 1, f.H, f.T, R, &err), AS_OK);
        assert_memory_equal(RL + (size_t)l * TT, R, TT * sizeof(float));
    }
    st_file *lf = open_layers(name);
    compare("rollout, every layer", RL, tensor(lf, "rollout_layers", DTYPE_F32)->data, f.L * TT, 1e-6, 1);
    /* every layer's grad: the propagation through layers 0..l with the same dy/dA */
    assert_int_equal(attr_grad_weighted_layers(A, ref(&f, "d_attentions"), f.L, f.H, f.T, RL, &err), AS_OK);
    compare("grad, every layer", RL, tensor(lf, "grad_layers", DTYPE_F32)->data, f.L * TT, 1e-6, 1);
    /* every layer's flow: the raw max-flow values of layers 0..l against networkx, then
     * the normalised rows; the last is attr_flow's */
    const float *raw_l = tensor(lf, "flow_raw_layers", DTYPE_F32)->data;
    double mdl = 0.0;
    for (int l = 0; l < f.L; l++)
        for (int i = 0; i < f.T; i++)
            for (int j = 0; j < f.T; j++)
                mdl = fmax(mdl, fabs(attr_flow_value(A, l + 1, f.H, f.T, j, i) - raw_l[(l * TT) + (size_t)i * f.T + j]));
    printf("  %-22s max abs diff %.2e\n", "max-flow, every layer", mdl);
    assert_true(mdl <= 1e-6);
    assert_int_equal(attr_flow_layers(A, f.L, f.H, f.T, 2, RL, &err), AS_OK);
    compare("flow, every layer", RL, tensor(lf, "flow_layers", DTYPE_F32)->data, f.L * TT, 1e-6, 0);
    assert_int_equal(attr_flow(A, f.L, f.H, f.T, 1, R, &err), AS_OK);
    assert_memory_equal(RL + (size_t)(f.L - 1) * TT, R, TT * sizeof(float));
    st_file_free(lf);
    free(RL);
    assert_int_equal(attr_grad_weighted(A, ref(&f, "d_attentions"), f.L, f.H, f.T, R, &err), AS_OK);
    compare("grad", R, ref(&f, "grad"), TT, 1e-6, 1);
    char path[512];
    snprintf(path, sizeof path, MODELS "%s/grads.safetensors", name);
    st_file *g = NULL;
    if (st_file_open(path, &g, &err)) fail_msg("%s", err.msg);
    const float *dA = tensor(g, "single.d_attentions", DTYPE_F32)->data;
    assert_int_equal(attr_grad_weighted(A, dA, f.L, f.H, f.T, R, &err), AS_OK);
    compare("grad (gen_grads)", R, ref(&f, "grad_objective"), TT, 1e-6, 1);
    attr_head_importance(A, dA, f.L, f.H, f.T, I);
    compare("importance (gen_grads)", I, ref(&f, "importance_objective"), LH, 1e-6, 1);
    st_file_free(g);
    /* every raw max-flow value against networkx */
    const float *raw = ref(&f, "flow_raw");
    double md = 0.0;
    for (int i = 0; i < f.T; i++)
        for (int j = 0; j < f.T; j++) {
            double v = attr_flow_value(A, f.L, f.H, f.T, j, i);
            assert_true(v >= 0.0);
            md = fmax(md, fabs(v - raw[(size_t)i * f.T + j]));
        }
    printf("  %-22s max abs diff %.2e\n", "max-flow vs networkx", md);
    assert_true(md <= 1e-6); /* the stored reference is F32 */
    /* 1 and 3 threads: the same numbers */
    float *F1 = malloc(TT * sizeof(float)), *F3 = malloc(TT * sizeof(float));
    assert_non_null(F1);
    assert_non_null(F3);
    assert_int_equal(attr_flow(A, f.L, f.H, f.T, 1, F1, &err), AS_OK);
    assert_int_equal(attr_flow(A, f.L, f.H, f.T, 3, F3, &err), AS_OK);
    assert_memory_equal(F1, F3, TT * sizeof(float));
    compare("flow", F1, ref(&f, "flow"), TT, 1e-6, 0);
    free(F1);
    free(F3);
    free(R);
    free(I);
    unload(&f);
}

static void test_formulas(void **state) {
    (void)state;
    formulas("bert");
    formulas("gpt2");
    formulas("llama_bf16");
}

/* attr_compute_run on a run that captured everything equals attr_compute; a run without
 * every layer (or without values, for norm) is refused. */
static void test_from_run(void **state) {
    (void)state;
    fx f;
    load(&f, "gpt2");
    as_error err = {0};
    as_capture_spec all = {.what = CAP_ATTN | CAP_QKV, .layer = -1, .head = -1, .threads = 1};
    as_capture_spec attn = {.what = CAP_ATTN, .layer = -1, .head = -1, .threads = 1};
    as_capture_spec one = {.what = CAP_ATTN | CAP_QKV, .layer = 1, .head = -1, .threads = 1};
    as_run *r = NULL, *ra = NULL, *r1 = NULL;
    if (as_forward(f.m, &f.enc, &all, &r, &err) || as_forward(f.m, &f.enc, &attn, &ra, &err) ||
        as_forward(f.m, &f.enc, &one, &r1, &err))
        fail_msg("%s", err.msg);
    const attr_method ms[] = {ATTR_ROLLOUT, ATTR_FLOW, ATTR_NORM, ATTR_GRAD};
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
        attr_opts o = {.method = ms[k], .target = -1, .position = -1, .threads = 1};
        attr_result a, b;
        if (attr_compute(f.m, &f.enc, &o, &a, &err) || attr_compute_run(f.m, &f.enc, r, &o, &b, &err))
            fail_msg("%s", err.msg);
        assert_int_equal(a.ndim, b.ndim);
        size_t n = 1;
        for (int d = 0; d < a.ndim; d++) n *= (size_t)a.shape[d];
        assert_memory_equal(a.data, b.data, n * sizeof(float));
        printf("  %s from the run: the same %zu values\n", attr_method_name(ms[k]), n);
        attr_result_free(&a);
        attr_result_free(&b);
    }
    attr_opts o = {.method = ATTR_NORM, .target = -1, .position = -1, .threads = 1};
    attr_result x;
    assert_int_equal(attr_compute_run(f.m, &f.enc, ra, &o, &x, &err), AS_ERR_INPUT);
    printf("  refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "and values"));
    o.method = ATTR_ROLLOUT;
    assert_int_equal(attr_compute_run(f.m, &f.enc, r1, &o, &x, &err), AS_ERR_INPUT);
    printf("  refused: %s\n", err.msg);
    assert_null(x.data);
    as_run_free(r);
    as_run_free(ra);
    as_run_free(r1);
    unload(&f);
}

/* Random sparse attention whose flows need several Dinic phases (reverse arcs): every raw
 * max-flow value and the normalised rows against networkx. */
static void test_random_flow(void **state) {
    (void)state;
    as_error err = {0};
    st_file *f = NULL;
    if (st_file_open(REFS "random_flow.safetensors", &f, &err)) fail_msg("%s", err.msg);
    const st_tensor *a = tensor(f, "attentions", DTYPE_F32);
    const int L = (int)a->shape[0], H = (int)a->shape[1], T = (int)a->shape[2];
    const float *raw = tensor(f, "flow_raw", DTYPE_F32)->data, *norm = tensor(f, "flow", DTYPE_F32)->data;
    double md = 0.0;
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) md = fmax(md, fabs(attr_flow_value(a->data, L, H, T, j, i) - raw[i * T + j]));
    printf("random sparse (L = %d, H = %d, T = %d): max-flow vs networkx max abs diff %.2e\n", L, H, T, md);
    assert_true(md <= 1e-6);
    float *F = malloc((size_t)T * T * sizeof(float));
    assert_non_null(F);
    assert_int_equal(attr_flow(a->data, L, H, T, 2, F, &err), AS_OK);
    compare("flow", F, norm, (size_t)T * T, 1e-6, 0);
    free(F);
    /* every layer's: from layer 0 to layer l's output on layers 0..l alone */
    st_file *g = open_layers("random_flow");
    const float *raw_l = tensor(g, "flow_raw_layers", DTYPE_F32)->data;
    md = 0.0;
    for (int l = 0; l < L; l++)
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++)
                md = fmax(md, fabs(attr_flow_value(a->data, l + 1, H, T, j, i) - raw_l[(l * T + i) * T + j]));
    printf("  every layer's max-flow vs networkx max abs diff %.2e\n", md);
    assert_true(md <= 1e-6);
    float *FL = malloc((size_t)L * T * T * sizeof(float));
    assert_non_null(FL);
    assert_int_equal(attr_flow_layers(a->data, L, H, T, 3, FL, &err), AS_OK);
    compare("flow, every layer", FL, tensor(g, "flow_layers", DTYPE_F32)->data, (size_t)L * T * T, 1e-6, 0);
    free(FL);
    st_file_free(g);
    st_file_free(f);
}

static void refused(const fx *f, attr_method method, int target, int position, const char *needle) {
    as_error err = {0};
    attr_opts o = {.method = method, .target = target, .position = position, .threads = 1};
    attr_result r;
    assert_int_equal(attr_compute(f->m, &f->enc, &o, &r, &err), AS_ERR_INPUT);
    printf("  refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, needle));
    assert_null(strchr(err.msg, '\n'));
    assert_null(r.data);
}

static void test_refusals(void **state) {
    (void)state;
    fx f;
    load(&f, "bert");
    refused(&f, ATTR_GRAD, 3, -1, "target 3 out of range [0, 3)");
    refused(&f, ATTR_GRAD, -1, 2, "position applies to LM");
    refused(&f, ATTR_ROLLOUT, 1, -1, "do not apply");
    refused(&f, ATTR_FLOW, -1, 0, "do not apply");
    refused(&f, ATTR_IMPORTANCE, -2, -1, "expected -1 or an index");
    unload(&f);
    load(&f, "gpt2");
    refused(&f, ATTR_GRAD, 116, -1, "target 116 out of range [0, 116) (vocabulary)");
    refused(&f, ATTR_IMPORTANCE, -1, 9, "position 9 out of range [0, 9)");
    /* a position inside: the row and the logit explained follow it */
    attr_result r;
    compute(&f, ATTR_GRAD, 5, 3, &r);
    assert_int_equal(r.target, 5);
    assert_int_equal(r.position, 3);
    attr_result_free(&r);
    unload(&f);
    /* flow: at most ATTR_FLOW_MAX_T tokens */
    as_model *m = NULL;
    as_error err = {0};
    if (as_model_load(MODELS "gpt2", &m, &err)) fail_msg("%s", err.msg);
    int32_t ids[ATTR_FLOW_MAX_T + 1];
    for (int i = 0; i <= ATTR_FLOW_MAX_T; i++) ids[i] = i % 100;
    as_encoding enc = {0};
    if (as_encoding_from_ids(m, ids, NULL, ATTR_FLOW_MAX_T + 1, &enc, &err)) {
        /* the fixture's positions are fewer: the flow limit is checked on the formula */
        float dummy = 0.0f;
        assert_int_equal(attr_flow(&dummy, 1, 1, ATTR_FLOW_MAX_T + 1, 1, &dummy, &err), AS_ERR_INPUT);
        printf("  refused: %s\n", err.msg);
    } else {
        attr_opts o = {.method = ATTR_FLOW, .target = -1, .position = -1, .threads = 1};
        attr_result r2;
        assert_int_equal(attr_compute(m, &enc, &o, &r2, &err), AS_ERR_INPUT);
        printf("  refused: %s\n", err.msg);
    }
    assert_non_null(strstr(err.msg, "at most"));
    as_encoding_free(&enc);
    /* every layer's result is an option of rollout, flow and grad; with it, rollout is (L, T, T) */
    int32_t few[5] = {1, 5, 7, 9, 11};
    if (as_encoding_from_ids(m, few, NULL, 5, &enc, &err)) fail_msg("%s", err.msg);
    attr_opts o = {.method = ATTR_NORM, .target = -1, .position = -1, .threads = 1, .layers = 1};
    attr_result r3 = {0};
    assert_int_equal(attr_compute(m, &enc, &o, &r3, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "an option of rollout, flow and grad"));
    o.method = ATTR_ROLLOUT;
    assert_int_equal(attr_compute(m, &enc, &o, &r3, &err), AS_OK);
    assert_int_equal(r3.ndim, 3);
    assert_int_equal(r3.shape[0], as_model_config(m)->n_layer);
    assert_int_equal(r3.shape[1], 5);
    attr_result_free(&r3);
    as_encoding_free(&enc);
    as_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert),      cmocka_unit_test(test_gpt2),    cmocka_unit_test(test_llama_bf16), cmocka_unit_test(test_mlm),
        cmocka_unit_test(test_formulas), cmocka_unit_test(test_layers), cmocka_unit_test(test_random_flow), cmocka_unit_test(test_from_run), cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
