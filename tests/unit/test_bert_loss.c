/* test_bert_loss.c — the BERT family's training objectives on the one forward
 * (src/train/bert_loss.c) against PyTorch autograd fixtures in float64
 * (tests/ref/gen_backward.py: a classifier and a masked-LM head on one model, a batch of
 * 2 sequences, the second right-padded) for BERT, RoBERTa and DistilBERT, and against
 * central finite differences.
 *
 * Tolerances (stated, printed with the measured values):
 *   every parameter gradient of loss_cls + loss_mlm: max |c - torch| <= 1e-4 * s, s = max
 *     |torch| over the tensor, but at least 1e-3 x the largest gradient of the model (the
 *     key biases' gradient is analytically zero, torch's is round-off);
 *   losses and logits: max-abs 1e-5 * max(1, |ref|);
 *   finite differences (float forward, central, eps 1e-3) of the largest-gradient entry of
 *     each of 48 chunks of the parameters: |fd - g| <= 1e-2 * |g| + 1e-4, for the
 *     classifier + masked-LM loss without and with dropout (p = 0.1, fixed seed) and for
 *     the distillation loss (KL at T = 2, masked-LM, hidden-state cosine; a DistilBERT
 *     teacher of the same width and vocabulary);
 *   dropout p > 0: bit-identical loss and gradients for the same seed, another loss for
 *     another seed; thread count: bit-identical gradients at 1 and 3 threads, and on a
 *     wide vocabulary (products split over threads) at 1, 2 and 3 threads in f32 and bf16;
 *   the classifier's logits equal the inference forward's (as_forward) bit for bit;
 *   bad labels are AS_ERR_INPUT;
 *   checkpoints (bert_ckpt.c): a written model reloads bit for bit in F32 (1e-3 relative
 *   in F16) with its heads and labels; a new classifier head is initialised (bias 0) while
 *   the rest is copied; a fresh model has N(0, 0.02) tables (std within 0.017..0.023), a
 *   zero padding row and a near-uniform classifier (|loss - log C| < 0.05).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "model/model.h"
#include "train/bert_ckpt.h"
#include "train/bert_loss.h"

#include "param_grads.h"

#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/backward/"
#define GRAD_TOL 1e-4
#define OUT_TOL 1e-5

typedef struct {
    as_model *m;
    st_file *exp;
    model_grads p, g; /* the model's own weights, their gradients */
    bert_batch b;
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
    memcpy(dst, want(f, name, DTYPE_I32, n)->data, n * sizeof(int32_t));
}

static void load(fixture *f, const char *arch) {
    memset(f, 0, sizeof *f);
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, FIX "%s", arch);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    as_error err = {0};
    if (as_model_load(dir, &f->m, &err) || st_file_open(path, &f->exp, &err) ||
        model_params_own(f->m, &f->p, &err) || model_grads_init(f->m, &f->g, &err))
        fail_msg("%s", err.msg);
    const st_tensor *ids = want(f, "in.ids", DTYPE_I32, 0);
    int B = (int)ids->shape[0], T = (int)ids->shape[1];
    assert_true(B * T <= 64);
    read_i32(f, "in.ids", f->ids, (size_t)B * T);
    read_i32(f, "in.type_ids", f->tt, (size_t)B * T);
    read_i32(f, "in.mask", f->mask, (size_t)B * T);
    read_i32(f, "in.cls_labels", f->cls, (size_t)B);
    read_i32(f, "in.mlm_labels", f->mlm, (size_t)B * T);
    bert_batch b = {B, T, f->ids, f->tt, f->mask, f->cls, f->mlm};
    f->b = b;
}

static void unload(fixture *f) {
    st_file_free(f->exp);
    model_grads_free(&f->g);
    as_model_free(f->m);
    model_grads_free(&f->p); /* after the model, whose views point into it */
}

/* The loss of the fixture's batch (gradients into f->g, zeroed first, when grads). */
static double loss_of(fixture *f, const bert_loss_opts *o, int grads, bert_loss_out *out) {
    as_error err = {0};
    bert_loss_out tmp = {0};
    if (!out) out = &tmp;
    if (grads) model_grads_zero(&f->g);
    if (bert_batch_loss(f->m, &f->b, o, grads ? &f->g : NULL, out, &err)) fail_msg("%s", err.msg);
    return out->loss;
}

static void check_out(const fixture *f, const char *name, const float *c, size_t n) {
    const float *ref = want(f, name, DTYPE_F32, n)->data;
    double md = 0.0;
    for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)c[i] - ref[i]) / fmax(1.0, fabs(ref[i])));
    printf("  %-22s max diff %.2e\n", name, md);
    assert_true(md <= OUT_TOL);
}

static void parity(const char *arch) {
    fixture f;
    load(&f, arch);
    printf("%s:\n", arch);
    const as_config *c = as_model_config(f.m);
    float *cl = calloc((size_t)f.b.B * c->num_labels, sizeof(float));
    float *ml = calloc((size_t)f.b.B * f.b.T * c->vocab_size, sizeof(float));
    assert_true(cl && ml);
    bert_loss_out out = {.cls_logits = cl, .mlm_logits = ml};
    bert_loss_opts o = {.threads = 2};
    loss_of(&f, &o, 1, &out);
    float lc = (float)out.loss_cls, lm = (float)out.loss_mlm;
    check_out(&f, "out.loss_cls", &lc, 1);
    check_out(&f, "out.loss_mlm", &lm, 1);
    check_out(&f, "out.cls_logits", cl, (size_t)f.b.B * c->num_labels);
    check_out(&f, "out.mlm_logits", ml, (size_t)out.n_mlm * c->vocab_size);
    pg_check pc = {.ref = f.exp, .tol = GRAD_TOL};
    for (int i = 0; i < st_file_count(f.exp); i++) {
        const st_tensor *t = st_file_tensor(f.exp, i);
        if (strncmp(t->name, "grad.", 5) || strstr(t->name, "grad.emb_")) continue;
        float *e = copy_data(t);
        pc.scale = fmax(pc.scale, max_abs(e, t->n_elems));
        free(e);
    }
    /* the reference names are "grad." + the checkpoint's: compare through a renamed view */
    model_grads *g = &f.g;
    char nm[160];
#define CMP_TABLE(key, buf, rows)                                                       \
    do {                                                                                \
        const char *tn = model_tensor_name(f.m, key);                                   \
        if (tn && buf) {                                                                \
            snprintf(nm, sizeof nm, "grad.%s", tn);                                     \
            cmp_block(&pc, nm, buf, rows, c->d_embed, 0, 0);                            \
        }                                                                               \
    } while (0)
    CMP_TABLE("embeddings.word_embeddings.weight", g->wte, c->vocab_size);
    CMP_TABLE("embeddings.position_embeddings.weight", g->wpe, c->max_pos);
    CMP_TABLE("embeddings.token_type_embeddings.weight", g->wtt, c->type_vocab);
#undef CMP_TABLE
    pc_prefix = "grad.";
    cmp_ln(&pc, &f.m->ln_emb, &g->ln_emb);
    cmp_lin(&pc, &f.m->cls_pre, &g->cls_pre);
    cmp_lin(&pc, &f.m->cls_out, &g->cls_out);
    cmp_lin(&pc, &f.m->mlm_dense, &g->mlm_dense);
    cmp_ln(&pc, &f.m->mlm_ln, &g->mlm_ln);
    const char *mb = model_tensor_name(f.m, "cls.predictions.bias") ? "cls.predictions.bias"
                     : model_tensor_name(f.m, "lm_head.bias")       ? "lm_head.bias"
                                                                    : "vocab_projector.bias";
    snprintf(nm, sizeof nm, "grad.%s", mb);
    cmp_block(&pc, nm, g->mlm_bias, c->vocab_size, 1, 0, 0);
    for (int l = 0; l < c->n_layer; l++) {
        const layer_w *w = &f.m->layers[l];
        layer_grad *lg = &g->layers[l];
        const lin_t *ls[] = {&w->q, &w->k, &w->v, &w->o, &w->ff1, &w->ff2};
        const lin_grad *gs[] = {&lg->q, &lg->k, &lg->v, &lg->o, &lg->ff1, &lg->ff2};
        for (int k = 0; k < 6; k++) cmp_lin(&pc, ls[k], gs[k]);
        cmp_ln(&pc, &w->ln1, &lg->ln1);
        cmp_ln(&pc, &w->ln2, &lg->ln2);
    }
    pc_prefix = "";
    int n_exp = 0;
    for (int i = 0; i < st_file_count(f.exp); i++) {
        const char *n = st_file_tensor(f.exp, i)->name;
        n_exp += !strncmp(n, "grad.", 5) && !strstr(n, "grad.emb_");
    }
    printf("  %d parameter gradients compared (of %d), %d out of tolerance %.0e\n", pc.n_seen, n_exp, pc.bad,
           GRAD_TOL);
    assert_int_equal(pc.n_seen, n_exp); /* every parameter gradient in the fixture is checked */
    assert_int_equal(pc.bad, 0);
    free(cl);
    free(ml);
    unload(&f);
}

static void test_parity_bert(void **state) { parity("bert"); }
static void test_parity_roberta(void **state) { parity("roberta"); }
static void test_parity_distilbert(void **state) { parity("distilbert"); }

/* Central finite differences of the loss for the largest-gradient entry of each of 48
 * chunks of the parameters. */
static void finite_diff(fixture *f, const bert_loss_opts *o, const char *what) {
    loss_of(f, o, 1, NULL);
    size_t n = f->g.n, chunk = (n + 47) / 48;
    const float eps = 1e-3f;
    double worst = 0.0;
    int checked = 0;
    for (size_t c0 = 0; c0 < n; c0 += chunk) {
        size_t best = c0, c1 = c0 + chunk < n ? c0 + chunk : n;
        for (size_t k = c0; k < c1; k++)
            if (fabsf(f->g.block[k]) > fabsf(f->g.block[best])) best = k;
        float g = f->g.block[best];
        if (fabsf(g) < 1e-3f) continue; /* below what a float difference resolves */
        float *p = f->p.block + best, old = *p;
        *p = old + eps;
        double lp = loss_of(f, o, 0, NULL);
        *p = old - eps;
        double lm = loss_of(f, o, 0, NULL);
        *p = old;
        double fd = (lp - lm) / (2.0 * eps);
        worst = fmax(worst, fabs(fd - g) / (fabs(g) + 1e-2));
        checked++;
        if (fabs(fd - g) > 1e-2 * fabs(g) + 1e-4) fail_msg("%s: parameter %zu: analytic %.6g, finite difference %.6g", what, best, g, fd);
    }
    printf("finite differences (%s): %d entries, worst |fd - g| / (|g| + 0.01) = %.2e\n", what, checked, worst);
    assert_true(checked >= 30);
}

static void test_finite_diff(void **state) {
    fixture f;
    load(&f, "bert");
    bert_loss_opts o = {.threads = 2};
    finite_diff(&f, &o, "classifier + masked LM");
    o.dropout = 0.1f;
    o.seed = 99;
    finite_diff(&f, &o, "classifier + masked LM, dropout 0.1, fixed seed");
    unload(&f);
}

/* The distillation loss of a BERT student against a DistilBERT teacher of the same width
 * and vocabulary (type ids 0: the teacher has no segments). */
static void test_distill_finite_diff(void **state) {
    fixture f;
    load(&f, "bert");
    as_model *t = NULL;
    as_error err = {0};
    if (as_model_load(FIX "distilbert", &t, &err)) fail_msg("%s", err.msg);
    f.b.type_ids = NULL;
    f.b.cls_labels = NULL;
    bert_loss_opts o = {.threads = 2, .teacher = t, .temperature = 2.0f, .alpha_kl = 5.0f, .alpha_mlm = 2.0f,
                        .alpha_cos = 1.0f};
    bert_loss_out out = {0};
    loss_of(&f, &o, 1, &out);
    printf("distillation: kl %.5f  mlm %.5f  1-cos %.5f  total %.5f\n", out.loss_kl, out.loss_mlm, out.loss_cos,
           out.loss);
    assert_true(out.loss_kl > 0 && out.loss_cos > 0);
    assert_true(fabs(out.loss - (5 * 4 * out.loss_kl + 2 * out.loss_mlm + out.loss_cos)) < 1e-9);
    finite_diff(&f, &o, "distillation");
    as_model_free(t);
    unload(&f);
}

static void test_dropout_threads(void **state) {
    fixture f;
    load(&f, "bert");
    bert_loss_opts o = {.threads = 1};
    double l0 = loss_of(&f, &o, 1, NULL);
    size_t n = f.g.n;
    float *g1 = malloc(n * sizeof(float)), *g3 = malloc(n * sizeof(float));
    assert_true(g1 && g3);
    o.dropout = 0.1f;
    o.seed = 7;
    double l1 = loss_of(&f, &o, 1, NULL);
    memcpy(g1, f.g.block, n * sizeof(float));
    assert_true(loss_of(&f, &o, 1, NULL) == l1);
    assert_memory_equal(g1, f.g.block, n * sizeof(float));
    o.threads = 3;
    assert_true(loss_of(&f, &o, 1, NULL) == l1);
    memcpy(g3, f.g.block, n * sizeof(float));
    assert_memory_equal(g1, g3, n * sizeof(float));
    o.seed = 8;
    double l2 = loss_of(&f, &o, 1, NULL);
    assert_true(l1 != l0 && l2 != l1);
    printf("dropout: loss p=0 %.6f, p=0.1 seed 7 %.6f (twice, 1 and 3 threads: bit-identical), seed 8 %.6f\n", l0,
           l1, l2);
    free(g1);
    free(g3);
    unload(&f);
}

/* Thread count at sizes where the products split over threads: a fresh model with a
 * 8192-token vocabulary, 8 sequences of 32 tokens, a third of them predicted (the masked-LM
 * head's products then run in blocks of columns; blocks sized by the thread count would
 * give other sums in the last bit): loss and gradients bit-identical at 1, 2 and 3
 * threads at precision f32 and at bf16 (there the layers' weight gradients are staged
 * and multiplied once per map: gradient buffers kept across calls, as training does);
 * the bf16 loss within 1% of F32's. */
static void test_threads_wide(void **state) {
    (void)state;
    fixture f;
    load(&f, "bert");
    as_error err = {0};
    train_config c;
    if (bert_ckpt_config(f.m, &c, &err)) fail_msg("%s", err.msg);
    c.vocab_size = 8192;
    c.max_pos = 32;
    char tmpl[] = "/tmp/as_wide_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    bert_ckpt_opts fresh = {.seed = 5, .dtype = DTYPE_F32};
    if (bert_ckpt_write(dir, &c, &fresh, &err)) fail_msg("%s", err.msg);
    enum { B = 8, T = 32 };
    int32_t ids[B * T], mlm[B * T], lab[B];
    for (int i = 0; i < B * T; i++) {
        ids[i] = 5 + (int)((i * 2654435761u) % 8000u);
        mlm[i] = i % 3 == 2 ? (int)((i * 40503u) % 8192u) : TRAIN_IGNORE;
    }
    for (int b = 0; b < B; b++) lab[b] = b % c.num_labels;
    bert_batch bt = {.B = B, .T = T, .ids = ids, .cls_labels = lab, .mlm_labels = mlm};
    double loss[2] = {0};
    for (int prec = 0; prec < 2; prec++) {
        as_model *m = NULL;
        model_grads p, g;
        if (as_model_load(dir, &m, &err) || model_params_own(m, &p, &err) || model_grads_init(m, &g, &err))
            fail_msg("%s", err.msg);
        if (prec && as_model_set_precision(m, AS_PRECISION_BF16, &err)) fail_msg("%s", err.msg);
        float *g1 = malloc(g.n * sizeof(float));
        assert_non_null(g1);
        grad_groups keep = {0};
        for (int t = 1; t <= 3; t++) {
            bert_loss_opts o = {.threads = t, .keep = &keep};
            bert_loss_out out = {0};
            model_grads_zero(&g);
            if (bert_batch_loss(m, &bt, &o, &g, &out, &err)) fail_msg("%s", err.msg);
            assert_true(out.n_mlm > 20);
            if (prec) assert_non_null(keep.stage); /* the weight gradients were staged */
            if (t == 1) {
                loss[prec] = out.loss;
                memcpy(g1, g.block, g.n * sizeof(float));
            } else {
                assert_true(out.loss == loss[prec]);
                assert_memory_equal(g1, g.block, g.n * sizeof(float));
            }
        }
        printf("wide %s: loss %.6f, %zu gradient floats bit-identical at 1, 2 and 3 threads\n", prec ? "bf16" : "f32",
               loss[prec], g.n);
        grad_groups_free(&keep);
        free(g1);
        as_model_free(m);
        model_grads_free(&p);
        model_grads_free(&g);
    }
    assert_true(fabs(loss[1] - loss[0]) <= 0.01 * loss[0]);
    bert_ckpt_remove(dir);
    unload(&f);
}

/* The classifier's logits of the training pass are the inference forward's, and bad
 * labels are errors, not crashes. */
static void test_matches_inference_and_bad_input(void **state) {
    fixture f;
    load(&f, "bert");
    as_error err = {0};
    as_encoding enc = {0};
    int T = f.b.T;
    if (as_encoding_from_ids(f.m, f.ids, f.tt, T, &enc, &err)) fail_msg("%s", err.msg);
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 1};
    as_run *run = NULL;
    if (as_forward(f.m, &enc, &spec, &run, &err)) fail_msg("%s", err.msg);
    float cl[16];
    bert_loss_out out = {.cls_logits = cl};
    bert_loss_opts o = {.threads = 1};
    loss_of(&f, &o, 0, &out);
    assert_memory_equal(run->logits, cl, (size_t)run->logits_cols * sizeof(float));
    as_run_free(run);
    as_encoding_free(&enc);
    f.cls[0] = 3; /* 3 classes */
    assert_int_equal(bert_batch_loss(f.m, &f.b, &o, &f.g, &out, &err), AS_ERR_INPUT);
    printf("bad input: %s\n", err.msg);
    f.cls[0] = 0;
    int k = 0;
    while (f.mlm[k] == TRAIN_IGNORE) k++;
    f.mlm[k] = 50;
    assert_int_equal(bert_batch_loss(f.m, &f.b, &o, &f.g, &out, &err), AS_ERR_INPUT);
    printf("bad input: %s\n", err.msg);
    f.mlm[k] = 1;
    f.ids[3] = 50;
    assert_int_equal(bert_batch_loss(f.m, &f.b, &o, &f.g, &out, &err), AS_ERR_INPUT);
    printf("bad input: %s\n", err.msg);
    unload(&f);
}

/* bert_ckpt_write of a loaded model reloads to the same weights (F32 bit for bit, F16
 * within 1e-3 relative), heads and labels. */
static void save_roundtrip(const char *arch, as_dtype dt) {
    fixture f;
    load(&f, arch);
    char tmpl[] = "/tmp/as_ckpt_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    as_error err = {0};
    train_config c;
    if (bert_ckpt_config(f.m, &c, &err)) fail_msg("%s", err.msg);
    bert_ckpt_opts o = {.src = f.m, .dtype = dt};
    if (bert_ckpt_write(dir, &c, &o, &err)) fail_msg("%s", err.msg);
    as_model *m2 = NULL;
    model_grads p2;
    if (as_model_load(dir, &m2, &err) || model_params_own(m2, &p2, &err)) fail_msg("%s", err.msg);
    assert_int_equal(as_model_heads(m2), as_model_heads(f.m));
    assert_int_equal(as_model_dtype(m2), dt);
    assert_string_equal(as_model_config(m2)->id2label[1], "class_1");
    assert_int_equal(p2.n, f.p.n);
    double md = 0.0;
    for (size_t i = 0; i < p2.n; i++)
        md = fmax(md, fabs((double)p2.block[i] - f.p.block[i]) / fmax(1e-2, fabs(f.p.block[i])));
    printf("save %s %s -> load: max rel param diff %.2e\n", arch, as_dtype_name(dt), md);
    if (dt == DTYPE_F32) assert_memory_equal(p2.block, f.p.block, p2.n * sizeof(float));
    else assert_true(md < 1e-3);
    as_model_free(m2);
    model_grads_free(&p2);
    bert_ckpt_remove(dir);
    unload(&f);
}

static void test_save_roundtrip(void **state) {
    save_roundtrip("bert", DTYPE_F32);
    save_roundtrip("roberta", DTYPE_F32);
    save_roundtrip("distilbert", DTYPE_F32);
    save_roundtrip("bert", DTYPE_F16);
}

/* A new 5-class head in place of the 3-class one (and no masked-LM head), and a fresh
 * model with Hugging Face's initialisation, train a step; bad configs are errors. */
static void test_init_and_new_heads(void **state) {
    fixture f;
    load(&f, "bert");
    as_error err = {0};
    train_config c;
    if (bert_ckpt_config(f.m, &c, &err)) fail_msg("%s", err.msg);
    c.num_labels = 5;
    c.mlm = 0;
    char tmpl[] = "/tmp/as_ckpt_XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    bert_ckpt_opts o = {.src = f.m, .seed = 3, .dtype = DTYPE_F32};
    if (bert_ckpt_write(dir, &c, &o, &err)) fail_msg("%s", err.msg);
    as_model *m5 = NULL;
    if (as_model_load(dir, &m5, &err)) fail_msg("%s", err.msg);
    assert_int_equal(as_model_config(m5)->num_labels, 5);
    assert_int_equal(as_model_heads(m5) & HEAD_MLM, 0);
    assert_true(m5->cls_out.b[0] == 0.0f && m5->cls_out.w[0] != 0.0f);
    assert_string_equal(as_model_config(m5)->id2label[4], "LABEL_4"); /* 3 names do not fit 5 classes */
    assert_memory_equal(m5->layers[1].ff2.w, f.m->layers[1].ff2.w, sizeof(float) * 16 * 32); /* copied */
    as_model_free(m5);
    /* a fresh model: N(0, 0.02) tables, the padding row 0, LayerNorm gains 1, biases 0 */
    bert_ckpt_opts fresh = {.seed = 1, .dtype = DTYPE_F32};
    if (bert_ckpt_write(dir, &c, &fresh, &err)) fail_msg("%s", err.msg);
    fixture r = f;
    if (as_model_load(dir, &r.m, &err) || model_params_own(r.m, &r.p, &err) || model_grads_init(r.m, &r.g, &err))
        fail_msg("%s", err.msg);
    double sum2 = 0.0;
    size_t n = (size_t)c.vocab_size * c.d_model;
    for (size_t i = 0; i < n; i++) sum2 += (double)r.m->wte[i] * r.m->wte[i];
    double sd = sqrt(sum2 / (double)(n - (size_t)c.d_model));
    printf("init: word embedding std %.4f (0.02 expected)\n", sd);
    assert_true(sd > 0.017 && sd < 0.023);
    for (int i = 0; i < c.d_model; i++) assert_true(r.m->wte[(size_t)c.pad_token_id * c.d_model + i] == 0.0f);
    assert_true(r.m->layers[0].ln1.g[0] == 1.0f && r.m->layers[0].q.b[0] == 0.0f);
    int32_t lab[2] = {4, 1};
    r.b.cls_labels = lab;
    r.b.mlm_labels = NULL;
    bert_loss_opts lo = {.threads = 1};
    bert_loss_out out = {0};
    if (bert_batch_loss(r.m, &r.b, &lo, &r.g, &out, &err)) fail_msg("%s", err.msg);
    printf("init: classifier loss %.4f (log 5 = %.4f)\n", out.loss_cls, log(5.0));
    assert_true(fabs(out.loss_cls - log(5.0)) < 0.05); /* near-uniform at init */
    r.b.mlm_labels = f.mlm; /* no masked-LM head */
    assert_int_equal(bert_batch_loss(r.m, &r.b, &lo, &r.g, &out, &err), AS_ERR_INPUT);
    printf("bad input: %s\n", err.msg);
    as_model_free(r.m);
    model_grads_free(&r.p);
    model_grads_free(&r.g);
    train_config bc = c;
    bc.n_head = 3;
    assert_int_equal(bert_ckpt_write(dir, &bc, &fresh, &err), AS_ERR_INPUT);
    printf("bad config: %s\n", err.msg);
    bert_ckpt_remove(dir);
    unload(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_bert),        cmocka_unit_test(test_parity_roberta),
        cmocka_unit_test(test_parity_distilbert),  cmocka_unit_test(test_finite_diff),
        cmocka_unit_test(test_distill_finite_diff), cmocka_unit_test(test_dropout_threads), cmocka_unit_test(test_threads_wide),
        cmocka_unit_test(test_matches_inference_and_bad_input), cmocka_unit_test(test_save_roundtrip),
        cmocka_unit_test(test_init_and_new_heads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
