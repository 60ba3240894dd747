/* test_backward.c — the training forward / backward pass (src/train) against
 * PyTorch autograd fixtures (tests/ref/gen_backward.py) for BERT, RoBERTa and
 * DistilBERT, against central finite differences, and the save -> load round trip.
 *
 * Tolerances (stated, printed with the measured values):
 *   every parameter gradient and the gradients w.r.t. the embedding output / sum:
 *     max |c - torch| <= 1e-4 * s, s = max |torch| over the tensor (its scale), but at
 *     least 1e-3 x the largest gradient of the model: the key biases' gradient is
 *     analytically zero (softmax is shift-invariant), torch's is round-off (~1e-16);
 *   losses and logits: max-abs 1e-5 * max(1, |ref|);
 *   finite differences (float forward, central, eps 1e-3): |fd - g| <= 1e-2 * |g| + 1e-4;
 *   dropout p > 0: bit-identical loss and gradients for the same seed;
 *   thread count: bit-identical gradients at 1 and 3 threads, for a batch of one block
 *   (the split pass) and of several (the block pass); the block pass of a batch of
 *   repeated sequences against the split pass of one copy (equal means): the
 *   parameter-gradient tolerance above;
 *   a model viewing the loaded weights in place (train_from_as_opts.borrow) against
 *   the copied one: bit-identical logits and input gradients, both passes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "io/safetensors.h"
#include "train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif
#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/backward/"

#define GRAD_TOL 1e-4
#define OUT_TOL 1e-5

/* A loaded fixture: model, expected tensors and the batch. */
typedef struct {
    as_model *am;
    st_file *exp;
    train_model *tm;
    train_acts *a;
    train_batch b;
    int32_t ids[64], tt[64], mask[64], cls[8], mlm[64];
} fixture;

static const st_tensor *want(const fixture *f, const char *name, as_dtype dt, size_t n) {
    const st_tensor *t = st_file_find(f->exp, name);
    if (!t) fail_msg("expected.safetensors: no tensor '%s'", name);
    assert_int_equal(t->dtype, dt);
    if (n) assert_int_equal(t->n_elems, n);
    return t;
}

static void read_i32(const fixture *f, const char *name, int32_t *dst, size_t n) {
    const st_tensor *t = want(f, name, DTYPE_I32, n);
    memcpy(dst, t->data, n * sizeof(int32_t));
}

/* Loads fixture arch, builds a train_model with gradients and a B x T batch. */
static void load(fixture *f, const char *arch) {
    memset(f, 0, sizeof *f);
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, FIX "%s", arch);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    as_error err = {0};
    if (as_model_load(dir, &f->am, &err)) fail_msg("%s", err.msg);
    if (st_file_open(path, &f->exp, &err)) fail_msg("%s", err.msg);
    train_from_as_opts o = TRAIN_FROM_AS_DEFAULTS;
    o.with_grads = 1;
    if (train_model_from_as(f->am, &o, &f->tm, &err)) fail_msg("%s", err.msg);
    const st_tensor *ids = want(f, "in.ids", DTYPE_I32, 0);
    int B = (int)ids->shape[0], T = (int)ids->shape[1];
    assert_true(B * T <= 64);
    read_i32(f, "in.ids", f->ids, (size_t)B * T);
    read_i32(f, "in.type_ids", f->tt, (size_t)B * T);
    read_i32(f, "in.mask", f->mask, (size_t)B * T);
    read_i32(f, "in.cls_labels", f->cls, (size_t)B);
    read_i32(f, "in.mlm_labels", f->mlm, (size_t)B * T);
    train_batch b = {.B = B, .T = T, .ids = f->ids, .type_ids = f->tt, .mask = f->mask, .cls_labels = f->cls,
                  .mlm_labels = f->mlm};
    f->b = b;
    if (train_acts_init(f->tm, B, T, 0, &f->a, &err)) fail_msg("%s", err.msg);
}

static void unload(fixture *f) {
    train_acts_free(f->a);
    train_model_free(f->tm);
    st_file_free(f->exp);
    as_model_free(f->am);
}

/* max |c - ref| / max(max |ref|, floor) over n values; *scale = max |ref|. */
static double rel_diff(const float *c, const float *ref, size_t n, double floor, double *scale) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)c[i] - ref[i]);
        md = d > md ? d : md;
        mr = fabs(ref[i]) > mr ? fabs(ref[i]) : mr;
    }
    *scale = mr;
    return md / fmax(mr, floor);
}

static void check_out(const fixture *f, const char *name, const float *c, size_t n) {
    const st_tensor *t = want(f, name, DTYPE_F32, n);
    const float *ref = t->data;
    double md = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)c[i] - ref[i]) / fmax(1.0, fabs(ref[i]));
        md = d > md ? d : md;
    }
    printf("  %-22s max diff %.2e\n", name, md);
    assert_true(md <= OUT_TOL);
}

static void run_fwd_bwd(fixture *f) {
    as_error err = {0};
    train_zero_grad(f->tm);
    if (train_forward(f->tm, f->a, &f->b, &err)) fail_msg("%s", err.msg);
    train_backward(f->tm, f->a, &f->b, 1);
}

static void parity(const char *arch) {
    fixture f;
    load(&f, arch);
    printf("%s:\n", arch);
    run_fwd_bwd(&f);
    const train_config *c = &f.tm->cfg;
    size_t BTD = (size_t)f.b.B * f.b.T * c->d_model;
    check_out(&f, "out.loss_cls", &f.a->loss_cls, 1);
    check_out(&f, "out.loss_mlm", &f.a->loss_mlm, 1);
    check_out(&f, "out.cls_logits", f.a->cls_logits, (size_t)f.b.B * c->num_labels);
    check_out(&f, "out.mlm_logits", f.a->mlm_logits, (size_t)f.a->n_mlm * c->vocab_size);
    double worst = 0.0, scale;
    const char *worst_name = "";
    struct { const char *name; const float *c; } acts[] = {{"grad.emb_out", f.a->d_emb_out},
                                                           {"grad.emb_sum", f.a->d_emb_sum}};
    for (int i = 0; i < 2; i++) {
        const st_tensor *t = want(&f, acts[i].name, DTYPE_F32, BTD);
        double r = rel_diff(acts[i].c, t->data, BTD, 0.0, &scale);
        printf("  %-22s max rel diff %.2e (scale %.3g)\n", acts[i].name, r, scale);
        assert_true(r <= GRAD_TOL);
    }
    train_named *nv = malloc(TRAIN_MAX_NAMED * sizeof *nv);
    assert_non_null(nv);
    int n = train_model_named(f.tm, 1, nv, TRAIN_MAX_NAMED);
    int n_exp = 0;
    for (int i = 0; i < st_file_count(f.exp); i++)
        if (!strncmp(st_file_tensor(f.exp, i)->name, "grad.", 5)) n_exp++;
    assert_int_equal(n, n_exp - 2); /* every parameter gradient in the fixture is checked */
    double gmax = 0.0;
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < nv[i].n; k++) gmax = fmax(gmax, fabs(nv[i].data[k]));
    for (int i = 0; i < n; i++) {
        char name[128];
        snprintf(name, sizeof name, "grad.%s", nv[i].name);
        const st_tensor *t = want(&f, name, DTYPE_F32, nv[i].n);
        double r = rel_diff(nv[i].data, t->data, nv[i].n, 1e-3 * gmax, &scale);
        int kb = strstr(nv[i].name, "key.bias") || strstr(nv[i].name, "k_lin.bias");
        if (kb)
            printf("  %-22s |g| <= %.2e (analytically 0; torch %.2e)\n", "key bias", rel_diff(nv[i].data, t->data,
                   nv[i].n, 1.0, &scale), scale);
        if (r > worst && !kb) {
            worst = r;
            worst_name = nv[i].name;
        }
        if (r > GRAD_TOL) fail_msg("%s: gradient of %s off by %.2e relative (scale %.3g)", arch, nv[i].name, r, scale);
    }
    printf("  %d parameter gradients: worst max rel diff %.2e (%s; key biases above)\n", n, worst, worst_name);
    /* input-only backward gives the same activation gradients */
    float *keep = malloc(BTD * sizeof(float));
    assert_non_null(keep);
    memcpy(keep, f.a->d_emb_sum, BTD * sizeof(float));
    train_backward(f.tm, f.a, &f.b, 0);
    assert_memory_equal(keep, f.a->d_emb_sum, BTD * sizeof(float));
    free(keep);
    free(nv);
    unload(&f);
}

static void test_parity_bert(void **state) { parity("bert"); }
static void test_parity_roberta(void **state) { parity("roberta"); }
static void test_parity_distilbert(void **state) { parity("distilbert"); }

/* Central finite differences of the float forward for the largest-gradient entry of
 * each parameter tensor (the tiny BERT fixture); with_dropout: p = 0.1 with a fixed
 * seed, so the masks are part of a deterministic function. */
static void finite_diff(int with_dropout) {
    fixture f;
    load(&f, "bert");
    if (with_dropout) {
        f.a->p_hidden = 0.1f;
        f.a->p_attn = 0.1f;
        f.a->seed = 99;
    }
    run_fwd_bwd(&f);
    train_named *pv = malloc(TRAIN_MAX_NAMED * sizeof *pv), *gv = malloc(TRAIN_MAX_NAMED * sizeof *gv);
    assert_true(pv && gv);
    int n = train_model_named(f.tm, 0, pv, TRAIN_MAX_NAMED);
    assert_int_equal(train_model_named(f.tm, 1, gv, TRAIN_MAX_NAMED), n);
    const float eps = 1e-3f;
    double worst = 0.0;
    int checked = 0;
    as_error err = {0};
    for (int i = 0; i < n; i++) {
        size_t best = 0;
        for (size_t k = 1; k < gv[i].n; k++)
            if (fabsf(gv[i].data[k]) > fabsf(gv[i].data[best])) best = k;
        float g = gv[i].data[best];
        if (fabsf(g) < 1e-3f) continue; /* below what a float difference resolves */
        float *p = (float *)pv[i].data + best, old = *p;
        *p = old + eps;
        if (train_forward(f.tm, f.a, &f.b, &err)) fail_msg("%s", err.msg);
        double lp = f.a->loss;
        *p = old - eps;
        if (train_forward(f.tm, f.a, &f.b, &err)) fail_msg("%s", err.msg);
        double lm = f.a->loss;
        *p = old;
        double fd = (lp - lm) / (2.0 * eps);
        double e = fabs(fd - g) / (fabs(g) + 1e-2);
        if (e > worst) worst = e;
        checked++;
        if (fabs(fd - g) > 1e-2 * fabs(g) + 1e-4)
            fail_msg("%s[%zu]: analytic %.6g, finite difference %.6g", pv[i].name, best, g, fd);
    }
    printf("finite differences%s: %d entries, worst |fd - g| / (|g| + 0.01) = %.2e\n",
           with_dropout ? " (dropout 0.1, fixed seed)" : "", checked, worst);
    assert_true(checked >= 30);
    free(pv);
    free(gv);
    unload(&f);
}

static void test_finite_diff(void **state) { finite_diff(0); }
static void test_finite_diff_dropout(void **state) { finite_diff(1); }

static void test_dropout_reproducible(void **state) {
    fixture f;
    load(&f, "bert");
    run_fwd_bwd(&f);
    float loss0 = f.a->loss;
    size_t n = f.tm->n_params;
    float *g1 = malloc(n * sizeof(float));
    assert_non_null(g1);
    f.a->p_hidden = 0.1f;
    f.a->p_attn = 0.1f;
    f.a->seed = 7;
    run_fwd_bwd(&f);
    float loss1 = f.a->loss;
    memcpy(g1, f.tm->grads_mem, n * sizeof(float));
    run_fwd_bwd(&f);
    assert_true(f.a->loss == loss1);
    assert_memory_equal(g1, f.tm->grads_mem, n * sizeof(float));
    assert_true(loss1 != loss0);
    f.a->seed = 8;
    run_fwd_bwd(&f);
    assert_true(f.a->loss != loss1);
    printf("dropout: loss p=0 %.6f, p=0.1 seed 7 %.6f (twice), seed 8 %.6f\n", loss0, loss1, f.a->loss);
    /* about 10% of the mask is dropped */
    int dropped = 0;
    for (int i = 0; i < 100000; i++) dropped += !train_dropout_keep(7, 3, (uint64_t)i, 0.1f);
    assert_true(dropped > 9500 && dropped < 10500);
    free(g1);
    unload(&f);
}

/* The training logits agree with the inference engine's (encoder.c) on an unpadded input. */
static void test_matches_inference(void **state) {
    fixture f;
    load(&f, "bert");
    as_error err = {0};
    as_encoding enc = {0};
    int T = f.b.T;
    if (as_encoding_from_ids(f.am, f.ids, f.tt, T, &enc, &err)) fail_msg("%s", err.msg);
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 1};
    as_run *run = NULL;
    if (as_forward(f.am, &enc, &spec, &run, &err)) fail_msg("%s", err.msg);
    train_batch b1 = {.B = 1, .T = T, .ids = f.ids, .type_ids = f.tt};
    if (train_forward(f.tm, f.a, &b1, &err)) fail_msg("%s", err.msg);
    for (int c = 0; c < run->logits_cols; c++) assert_true(fabsf(run->logits[c] - f.a->cls_logits[c]) < 1e-5f);
    as_run_free(run);
    as_encoding_free(&enc);
    unload(&f);
}

static void save_roundtrip(const char *arch, as_dtype dt) {
    fixture f;
    load(&f, arch);
    char tmpl[] = "/tmp/as_bwd_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    char sub[256];
    snprintf(sub, sizeof sub, "%s/model", dir);
    as_error err = {0};
    if (train_model_save(f.tm, sub, dt, &err)) fail_msg("%s", err.msg);
    as_model *m2 = NULL;
    if (as_model_load(sub, &m2, &err)) fail_msg("%s", err.msg);
    assert_int_equal(as_model_heads(m2), as_model_heads(f.am));
    assert_int_equal(as_model_dtype(m2), dt);
    assert_string_equal(as_model_config(m2)->id2label[1], "class_1");
    train_model *t2 = NULL;
    train_from_as_opts o = TRAIN_FROM_AS_DEFAULTS;
    if (train_model_from_as(m2, &o, &t2, &err)) fail_msg("%s", err.msg);
    assert_int_equal(t2->n_params, f.tm->n_params);
    double md = 0.0;
    for (size_t i = 0; i < t2->n_params; i++) {
        double d = fabs((double)t2->params_mem[i] - f.tm->params_mem[i]) / fmax(1e-2, fabs(f.tm->params_mem[i]));
        md = d > md ? d : md;
    }
    printf("save %s %s -> load: max rel param diff %.2e\n", arch, as_dtype_name(dt), md);
    if (dt == DTYPE_F32) assert_memory_equal(t2->params_mem, f.tm->params_mem, t2->n_params * sizeof(float));
    else assert_true(md < 1e-3);
    train_model_free(t2);
    as_model_free(m2);
    char p[300];
    snprintf(p, sizeof p, "%s/config.json", sub);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", sub);
    unlink(p);
    rmdir(sub);
    rmdir(dir);
    unload(&f);
}

static void test_save_roundtrip(void **state) {
    save_roundtrip("bert", DTYPE_F32);
    save_roundtrip("roberta", DTYPE_F32);
    save_roundtrip("distilbert", DTYPE_F32);
    save_roundtrip("bert", DTYPE_F16);
}

/* A freshly initialised model (HF-style init) with new heads trains one step
 * without error and saves / reloads. */
static void test_init_and_new_heads(void **state) {
    fixture f;
    load(&f, "bert");
    as_error err = {0};
    train_from_as_opts o = TRAIN_FROM_AS_DEFAULTS;
    o.with_grads = 1;
    o.num_labels = 5; /* replaces the 3-class head */
    o.mlm = 0;
    train_model *t = NULL;
    if (train_model_from_as(f.am, &o, &t, &err)) fail_msg("%s", err.msg);
    assert_int_equal(t->cfg.num_labels, 5);
    assert_int_equal(t->cfg.mlm, 0);
    assert_null(t->params.mlm_w);
    assert_true(t->params.cls_b[0] == 0.0f && t->params.cls_w[0] != 0.0f);
    assert_null(t->labels); /* 3 names do not fit 5 classes */
    train_config c = t->cfg;
    train_model *r = NULL;
    if (train_model_init(&c, 1, 1, &r, &err)) fail_msg("%s", err.msg);
    double sum2 = 0.0;
    size_t n = (size_t)c.vocab_size * c.d_model;
    for (size_t i = 0; i < n; i++) sum2 += (double)r->params.wte[i] * r->params.wte[i];
    double sd = sqrt(sum2 / (double)(n - (size_t)c.d_model));
    printf("init: word embedding std %.4f (0.02 expected)\n", sd);
    assert_true(sd > 0.017 && sd < 0.023);
    for (int i = 0; i < c.d_model; i++) assert_true(r->params.wte[(size_t)c.pad_token_id * c.d_model + i] == 0.0f);
    assert_true(r->params.ln1_g[0] == 1.0f && r->params.qkv_b[0] == 0.0f);
    train_acts *a = NULL;
    if (train_acts_init(r, 2, 7, 0, &a, &err)) fail_msg("%s", err.msg);
    int32_t lab[2] = {4, 1};
    train_batch b = f.b;
    b.cls_labels = lab;
    b.mlm_labels = NULL;
    if (train_forward(r, a, &b, &err)) fail_msg("%s", err.msg);
    assert_true(fabsf(a->loss_cls - logf(5.0f)) < 0.05f); /* near-uniform at init */
    train_backward(r, a, &b, 1);
    /* bad input is an error, not a crash */
    b.mlm_labels = f.mlm;
    assert_int_equal(train_forward(r, a, &b, &err), AS_ERR_INPUT);
    printf("bad input: %s\n", err.msg);
    b.mlm_labels = NULL;
    lab[0] = 5;
    assert_int_equal(train_forward(r, a, &b, &err), AS_ERR_INPUT);
    lab[0] = 0;
    int32_t bad[14];
    memcpy(bad, f.ids, sizeof bad);
    bad[3] = 50;
    b.ids = bad;
    assert_int_equal(train_forward(r, a, &b, &err), AS_ERR_INPUT);
    printf("bad input: %s\n", err.msg);
    b.ids = f.ids;
    b.B = 3;
    assert_int_equal(train_forward(r, a, &b, &err), AS_ERR_INPUT);
    train_config bc = c;
    bc.n_head = 3;
    train_model *none = NULL;
    assert_int_equal(train_model_init(&bc, 1, 0, &none, &err), AS_ERR_INPUT);
    assert_null(none);
    printf("bad config: %s\n", err.msg);
    train_acts_free(a);
    train_model_free(r);
    train_model_free(t);
    unload(&f);
}

/* Gradients of batch b (dropout on) at `threads` threads into g (n_params). */
static void grads_at(fixture *f, train_acts *a, const train_batch *b, int threads, float *g) {
    as_error err = {0};
    a->threads = threads;
    a->p_hidden = 0.1f;
    a->p_attn = 0.1f;
    a->seed = 11;
    train_zero_grad(f->tm);
    if (train_forward(f->tm, a, b, &err)) fail_msg("%s", err.msg);
    train_backward(f->tm, a, b, 1);
    memcpy(g, f->tm->grads_mem, f->tm->n_params * sizeof(float));
}

/* The fixture's batch repeated R times: 2 blocks of whole sequences (the block pass). */
static void test_threads_and_blocks(void **state) {
    fixture f;
    load(&f, "bert");
    as_error err = {0};
    int B = f.b.B, T = f.b.T, R = (512 / T + B - 1) / B;
    int BR = B * R;
    size_t n = f.tm->n_params, BT = (size_t)B * T;
    int32_t *big = malloc((size_t)BR * T * 4 * sizeof(int32_t)), *cls = malloc((size_t)BR * sizeof(int32_t));
    float *g1 = malloc(n * sizeof(float)), *g3 = malloc(n * sizeof(float)), *gs = malloc(n * sizeof(float));
    assert_true(big && cls && g1 && g3 && gs);
    int32_t *ids = big, *tt = big + (size_t)BR * T, *mask = tt + (size_t)BR * T, *mlm = mask + (size_t)BR * T;
    for (int r = 0; r < R; r++) {
        memcpy(ids + r * BT, f.ids, BT * sizeof(int32_t));
        memcpy(tt + r * BT, f.tt, BT * sizeof(int32_t));
        memcpy(mask + r * BT, f.mask, BT * sizeof(int32_t));
        memcpy(mlm + r * BT, f.mlm, BT * sizeof(int32_t));
        memcpy(cls + r * B, f.cls, (size_t)B * sizeof(int32_t));
    }
    train_batch bb = {.B = BR, .T = T, .ids = ids, .type_ids = tt, .mask = mask, .cls_labels = cls, .mlm_labels = mlm};
    train_acts *a = NULL;
    if (train_acts_init(f.tm, BR, T, 0, &a, &err)) fail_msg("%s", err.msg);
    assert_true(a->nblk >= 2);
    /* the split pass (the fixture's batch, one block) */
    grads_at(&f, f.a, &f.b, 1, gs);
    assert_int_equal(f.a->split, 1);
    grads_at(&f, f.a, &f.b, 3, g3);
    assert_memory_equal(gs, g3, n * sizeof(float));
    /* the block pass */
    grads_at(&f, a, &bb, 1, g1);
    assert_int_equal(a->split, 0);
    grads_at(&f, a, &bb, 3, g3);
    assert_memory_equal(g1, g3, n * sizeof(float));
    printf("threads: gradients at 1 and 3 threads bit-identical (split pass %d x %d, block pass %d x %d)\n", B, T,
           BR, T);
    /* without dropout (whose masks differ between the copies), the repeated batch has the
       mean gradients of one copy */
    f.a->p_hidden = f.a->p_attn = a->p_hidden = a->p_attn = 0.0f;
    train_zero_grad(f.tm);
    if (train_forward(f.tm, f.a, &f.b, &err)) fail_msg("%s", err.msg);
    train_backward(f.tm, f.a, &f.b, 1);
    memcpy(gs, f.tm->grads_mem, n * sizeof(float));
    train_zero_grad(f.tm);
    if (train_forward(f.tm, a, &bb, &err)) fail_msg("%s", err.msg);
    train_backward(f.tm, a, &bb, 1);
    train_named gv[TRAIN_MAX_NAMED];
    int nn = train_model_named(f.tm, 1, gv, TRAIN_MAX_NAMED);
    assert_true(nn > 0);
    double gmax = 0.0;
    for (size_t i = 0; i < n; i++) gmax = fmax(gmax, fabs(gs[i]));
    double worst = 0.0;
    for (int k = 0; k < nn; k++) {
        const float *blk = gv[k].data, *one = gs + (gv[k].data - f.tm->grads_mem);
        double scale;
        double r = rel_diff(blk, one, gv[k].n, 1e-3 * gmax, &scale);
        worst = fmax(worst, r);
        if (r > GRAD_TOL) printf("  %s: %.2e\n", gv[k].name, r);
    }
    printf("block pass of %d copies vs split pass of one: max rel diff %.2e\n", R, worst);
    assert_true(worst <= GRAD_TOL);
    train_acts_free(a);
    free(big);
    free(cls);
    free(g1);
    free(g3);
    free(gs);
    unload(&f);
}

/* Logits and d loss / d embedding sum of batch b on model t (no parameter gradients). */
static void input_grads(train_model *t, const train_batch *b, float *logits, float *demb) {
    as_error err = {0};
    train_acts *a = NULL;
    if (train_acts_init(t, b->B, b->T, 0, &a, &err)) fail_msg("%s", err.msg);
    if (train_forward(t, a, b, &err)) fail_msg("%s", err.msg);
    train_backward(t, a, b, 0);
    memcpy(logits, a->cls_logits, (size_t)b->B * t->cfg.num_labels * sizeof(float));
    memcpy(demb, a->d_emb_sum, (size_t)b->B * b->T * t->cfg.d_model * sizeof(float));
    train_acts_free(a);
}

/* The loaded weights read in place (borrow) give the copied model's results, bit for
 * bit, in a split pass (the fixture's batch) and a block pass (it repeated). */
static void test_borrowed_weights(void **state) {
    fixture f;
    load(&f, "bert");
    as_error err = {0};
    train_from_as_opts o = TRAIN_FROM_AS_DEFAULTS;
    o.mlm = 0;
    o.borrow = 1;
    o.with_grads = 1;
    train_model *bm = NULL, *cm = NULL;
    assert_int_equal(train_model_from_as(f.am, &o, &bm, &err), AS_ERR_INPUT); /* no gradients when borrowed */
    o.with_grads = 0;
    if (train_model_from_as(f.am, &o, &bm, &err)) fail_msg("%s", err.msg);
    o.borrow = 0;
    if (train_model_from_as(f.am, &o, &cm, &err)) fail_msg("%s", err.msg);
    assert_true(bm->lw[0].q != cm->lw[0].q && bm->params.wte != cm->params.wte); /* views, not the copies */
    assert_int_equal(bm->borrowed, 1);
    assert_null(bm->params.qkv_w);
    int B = f.b.B, T = f.b.T, R = (512 / T + B - 1) / B;
    size_t BT = (size_t)B * T, C = (size_t)cm->cfg.num_labels, D = (size_t)cm->cfg.d_model;
    int32_t *ids = malloc((size_t)R * BT * 3 * sizeof(int32_t));
    float *l1 = malloc((size_t)R * B * C * sizeof(float)), *l2 = malloc((size_t)R * B * C * sizeof(float));
    float *g1 = malloc((size_t)R * BT * D * sizeof(float)), *g2 = malloc((size_t)R * BT * D * sizeof(float));
    assert_true(ids && l1 && l2 && g1 && g2);
    for (int r = 0; r < R; r++) {
        memcpy(ids + r * BT, f.ids, BT * sizeof(int32_t));
        memcpy(ids + (R + r) * BT, f.tt, BT * sizeof(int32_t));
        memcpy(ids + (2 * R + r) * BT, f.mask, BT * sizeof(int32_t));
    }
    for (int k = 0; k < 2; k++) {
        int nb = k ? B * R : B;
        train_batch b = {.B = nb, .T = T, .ids = ids, .type_ids = ids + R * BT, .mask = ids + 2 * R * BT};
        input_grads(bm, &b, l1, g1);
        input_grads(cm, &b, l2, g2);
        assert_memory_equal(l1, l2, (size_t)nb * C * sizeof(float));
        assert_memory_equal(g1, g2, (size_t)nb * T * D * sizeof(float));
    }
    printf("borrowed weights = copied: logits and input gradients bit-identical (%d and %d sequences)\n", B, B * R);
    free(ids);
    free(l1);
    free(l2);
    free(g1);
    free(g2);
    train_model_free(bm);
    train_model_free(cm);
    unload(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_bert),         cmocka_unit_test(test_parity_roberta),
        cmocka_unit_test(test_parity_distilbert),   cmocka_unit_test(test_finite_diff),
        cmocka_unit_test(test_finite_diff_dropout), cmocka_unit_test(test_dropout_reproducible),
        cmocka_unit_test(test_matches_inference),   cmocka_unit_test(test_save_roundtrip),
        cmocka_unit_test(test_init_and_new_heads),  cmocka_unit_test(test_threads_and_blocks),
        cmocka_unit_test(test_borrowed_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
