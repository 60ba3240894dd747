/* test_model_grads.c — the backward of the one forward (src/model/backward.c) against
 * PyTorch autograd in float64 (tests/ref/gen_grads.py: grads.safetensors next to each
 * fixture model): for every family and case, the gradient of the fixture's objective
 * (a classifier logit, or the sum over real positions of one LM logit each) with respect
 * to the input word vectors and to every layer's attention probabilities. Tolerances:
 * GRAD_REL of the largest |gradient| (float32 sums against a float64 reference; the
 * reference's own float32 noise is up to 7e-6 of it). Also: the gradient with given word
 * vectors equals the one with looked-up rows; the BF16-in-place model's equals the F32
 * copy's; a finite difference of the forward's objective agrees with d_word; at
 * precision bf16 (BF16 products in the forward and in dx = dy W) within BF16_GRAD_REL. The
 * parameter gradients (model_backward_params) against PyTorch's of every tensor of the
 * checkpoint (tests/ref/gen_param_grads.py), fused views (GPT-2's c_attn, Phi-3's
 * qkv_proj / gate_up_proj) as slices of their tensor, tied heads into the table.
 * Training-mode dropout (model_tape_dropout): finite differences at a fixed seed,
 * reproducibility, p = 0 equal to no dropout (test_dropout states its tolerances).
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

#include "model/model.h"
#include "model/ops.h"
#include "core/gemm_bf16.h"
#include "io/safetensors.h"
#include "fixture_files.h"

#define FIXTURE_ROOT AS_SOURCE_DIR "/tests/ref/fixtures/models"
#define GRAD_REL 2e-4

#include "param_grads.h"

static const char *const FIXTURES[] = {
    "bert", "bert_noprefix_mlm", "bert_f16", "bert_bf16", "roberta", "distilbert", "electra", "gpt2",
    "gpt2_f16", "gpt2_scaling", "llama", "llama3_scaled", "llama_bf16", "llama_cls", "mistral_swa",
    "qwen2_noprefix", "qwen3", "gemma2", "gemma3", "phi3", "yarn", "dynamic", "longrope"};

static const st_tensor *need(const st_file *f, const char *fx, const char *cs, const char *what) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", cs, what);
    const st_tensor *t = st_file_find(f, name);
    if (!t) fail_msg("%s: no tensor %s", fx, name);
    return t;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

typedef struct {
    as_encoding enc;
    float *dlogits;
    size_t n_logits;
} grad_case;

/* The encoding of case cs and dlogits of the fixture's objective for run r's head. */
static void case_init(const as_model *m, const st_file *ex, const st_file *gr, const char *fx, const char *cs,
                      grad_case *gc) {
    const st_tensor *ti = need(ex, fx, cs, "input_ids"), *tt = need(ex, fx, cs, "token_type_ids");
    const st_tensor *tm = need(ex, fx, cs, "attention_mask");
    int T = (int)ti->shape[0];
    int32_t *ids = copy_data(ti), *types = copy_data(tt), *mask = copy_data(tm);
    as_error err = {0};
    int types_given = as_model_config(m)->arch != ARCH_GPT2;
    if (as_encoding_from_ids(m, ids, types_given ? types : NULL, T, &gc->enc, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < T; i++) gc->enc.mask[i] = mask[i];
    const st_tensor *tg = need(gr, fx, cs, "targets");
    int32_t *tgt = copy_data(tg);
    const as_config *c = as_model_config(m);
    int cls = (as_model_heads(m) & HEAD_CLASSIFIER) != 0;
    gc->n_logits = cls ? (size_t)c->num_labels : (size_t)T * c->vocab_size;
    gc->dlogits = calloc(gc->n_logits, sizeof(float));
    assert_non_null(gc->dlogits);
    if (cls) {
        gc->dlogits[tgt[0]] = 1.0f;
    } else {
        for (int t = 0; t < T; t++)
            if (mask[t]) gc->dlogits[(size_t)t * c->vocab_size + tgt[t]] = 1.0f;
    }
    free(ids);
    free(types);
    free(mask);
    free(tgt);
}

static void case_free(grad_case *gc) {
    as_encoding_free(&gc->enc);
    free(gc->dlogits);
}

/* The fixture's model with its references (ff, fx_close) and its "single" case (gc). */
static as_model *open_single(const char *fx, fx_files *ff, grad_case *gc) {
    fx_open(fx, 1, 0, ff);
    case_init(ff->m, ff->ex, ff->gr, fx, "single", gc);
    return ff->m;
}

/* Forward with a tape, backward; d_word (T, De) and d_attn (L, H, T, T) allocated. */
static void run_grads(const as_model *m, const grad_case *gc, const float *word, float **d_word, float **d_attn,
                      double *objective) {
    const as_config *c = as_model_config(m);
    int T = gc->enc.n;
    model_tape tp;
    as_error err = {0};
    if (model_tape_init(m, T, &tp, &err)) fail_msg("%s", err.msg);
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 2};
    as_run *r = NULL;
    if (model_forward(m, &gc->enc, &spec, word, &tp, &r, &err)) fail_msg("%s", err.msg);
    *objective = 0;
    for (size_t i = 0; i < gc->n_logits; i++) *objective += (double)gc->dlogits[i] * r->logits[i];
    *d_word = calloc((size_t)T * c->d_embed, sizeof(float));
    *d_attn = calloc((size_t)c->n_layer * c->n_head * T * T, sizeof(float));
    assert_true(*d_word && *d_attn);
    if (model_backward(m, &gc->enc, word, &tp, r, gc->dlogits, 2, *d_word, *d_attn, &err)) fail_msg("%s", err.msg);
    as_run_free(r);
    model_tape_free(&tp);
}

static void test_fixture(void **state) {
    const char *fx = *state;
    fx_files ff;
    fx_open(fx, 1, 0, &ff);
    as_model *m = ff.m;
    st_file *ex = ff.ex, *gr = ff.gr;
    static const char *const cases[] = {"single", "padded"};
    int bad = 0;
    for (int k = 0; k < 2; k++) {
        grad_case gc = {0};
        case_init(m, ex, gr, fx, cases[k], &gc);
        float *dw, *da;
        double obj;
        run_grads(m, &gc, NULL, &dw, &da, &obj);
        const st_tensor *tw = need(gr, fx, cases[k], "d_word_embeds"), *ta = need(gr, fx, cases[k], "d_attentions");
        const st_tensor *to = need(gr, fx, cases[k], "objective");
        float *ew = copy_data(tw), *ea = copy_data(ta), *eo = copy_data(to);
        double sw = max_abs(ew, tw->n_elems), sa = max_abs(ea, ta->n_elems);
        double dwd = max_diff(dw, ew, tw->n_elems), dad = max_diff(da, ea, ta->n_elems);
        printf("%s/%s objective %.6g (ref %.6g)  d_word max|diff| %.2e of %.2e  d_attn %.2e of %.2e\n", fx, cases[k],
               obj, eo[0], dwd, sw, dad, sa);

        if (!(dwd <= GRAD_REL * sw) || !(dad <= GRAD_REL * sa) || !(fabs(obj - eo[0]) <= 1e-4 * (1 + fabs(eo[0])))) {
            printf("  FAIL\n");
            bad++;
        }
        free(ew);
        free(ea);
        free(eo);
        free(dw);
        free(da);
        case_free(&gc);
    }
    fx_close(&ff);
    if (bad) fail_msg("%s: %d case(s) out of tolerance", fx, bad);
}

/* Given word vectors (the looked-up rows, passed explicitly) give the same gradient, and a
 * central finite difference of the objective along d_word agrees with |d_word|^2. */
static void test_given_words_and_fd(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "gpt2", "llama", "gemma2", "phi3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fx_files ff;
        grad_case gc = {0};
        as_model *m = open_single(names[i], &ff, &gc);
        const as_config *c = as_model_config(m);
        int T = gc.enc.n, De = c->d_embed;
        float *word = malloc(sizeof(float) * (size_t)T * De);
        assert_non_null(word);
        emb_in in = {&gc.enc, 0, NULL, 0, 0};
        for (int t = 0; t < T; t++) memcpy(word + (size_t)t * De, model_emb_word(m, &in, t), sizeof(float) * De);
        float *dw0, *da0, *dw1, *da1;
        double o0, o1, op, om;
        run_grads(m, &gc, NULL, &dw0, &da0, &o0);
        run_grads(m, &gc, word, &dw1, &da1, &o1);
        assert_true(max_diff(dw0, dw1, (size_t)T * De) == 0.0 && o0 == o1);
        /* y(word + e u) with u = d_word / |d_word|: dy/de = |d_word| */
        double nrm = 0;
        for (size_t k = 0; k < (size_t)T * De; k++) nrm += (double)dw0[k] * dw0[k];
        nrm = sqrt(nrm);
        double eps = 1e-2;
        float *wp = malloc(sizeof(float) * (size_t)T * De);
        assert_non_null(wp);
        for (int sgn = -1; sgn <= 1; sgn += 2) {
            for (size_t k = 0; k < (size_t)T * De; k++) wp[k] = word[k] + (float)(sgn * eps * dw0[k] / nrm);
            float *a, *b;
            run_grads(m, &gc, wp, &a, &b, sgn < 0 ? &om : &op);
            free(a);
            free(b);
        }
        double fd = (op - om) / (2 * eps);
        printf("%s: finite difference %.6g, |d_word| %.6g\n", names[i], fd, nrm);
        assert_true(fabs(fd - nrm) <= 2e-2 * nrm);
        free(wp);
        free(word);
        free(dw0);
        free(da0);
        free(dw1);
        free(da1);
        case_free(&gc);
        fx_close(&ff);
    }
}

/* Precision bf16 (as_model_set_precision): the forward's products and the backward's
 * input gradients dx = dy W run on BF16 operands with F32 sums. d_word and d_attn against
 * the same float64 PyTorch reference within BF16_GRAD_REL of their largest magnitude
 * (8-bit mantissas: 2^-9 relative rounding per operand, through every layer twice), and
 * different from the F32 gradient (the BF16 products ran); back at F32 the F32 result. */
#define BF16_GRAD_REL 0.05
static void test_precision_bf16(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "gpt2", "llama", "llama_bf16", "gemma2", "phi3", "qwen3"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        fx_files ff;
        grad_case gc = {0};
        as_model *m = open_single(names[i], &ff, &gc);
        float *dw0, *da0, *dw1, *da1, *dw2, *da2;
        double o0, o1, o2;
        as_error err = {0};
        run_grads(m, &gc, NULL, &dw0, &da0, &o0);
        if (as_model_set_precision(m, AS_PRECISION_BF16, &err)) fail_msg("%s: %s", names[i], err.msg);
        run_grads(m, &gc, NULL, &dw1, &da1, &o1);
        if (as_model_set_precision(m, AS_PRECISION_F32, &err)) fail_msg("%s: %s", names[i], err.msg);
        run_grads(m, &gc, NULL, &dw2, &da2, &o2);
        const st_tensor *tw = need(ff.gr, names[i], "single", "d_word_embeds");
        const st_tensor *ta = need(ff.gr, names[i], "single", "d_attentions");
        float *ew = copy_data(tw), *ea = copy_data(ta);
        double sw = max_abs(ew, tw->n_elems), sa = max_abs(ea, ta->n_elems);
        double dw = max_diff(dw1, ew, tw->n_elems), da = max_diff(da1, ea, ta->n_elems);
        printf("%s bf16: objective %.6g (F32 %.6g), d_word max|diff| %.2e (%.2e of max), d_attn %.2e (%.2e of max)\n",
               names[i], o1, o0, dw, dw / sw, da, da / sa);
        if (!(dw <= BF16_GRAD_REL * sw) || !(da <= BF16_GRAD_REL * sa))
            fail_msg("%s: the bf16 gradient is out of tolerance", names[i]);
        if (!(max_diff(dw1, dw0, tw->n_elems) > 0.0)) fail_msg("%s: the bf16 gradient equals F32's", names[i]);
        if (max_diff(dw2, dw0, tw->n_elems) != 0.0 || max_diff(da2, da0, ta->n_elems) != 0.0 || o2 != o0)
            fail_msg("%s: back at F32 the gradient changed", names[i]);
        free(ew);
        free(ea);
        free(dw0);
        free(da0);
        free(dw1);
        free(da1);
        free(dw2);
        free(da2);
        case_free(&gc);
        fx_close(&ff);
    }
}

/* ---- parameter gradients ---------------------------------------------------- */

/* Fixture `name`'s parameter gradients at precision prec against PyTorch's within tol of
 * each tensor's largest magnitude (param_grads.h; 0: its default); the failures. */
static int param_grads_case(const char *name, as_precision prec, double tol) {
    fx_files ff;
    fx_open(name, 1, 1, &ff);
    as_model *m = ff.m;
    st_file *pr = ff.pg;
    as_error err = {0};
    grad_case gc = {0};
    case_init(m, ff.ex, ff.gr, name, "single", &gc);
    if (as_model_set_precision(m, prec, &err)) fail_msg("%s: %s", name, err.msg);
    model_tape tp;
    model_grads pg;
    if (model_tape_init(m, gc.enc.n, &tp, &err) || model_grads_init(m, &pg, &err)) fail_msg("%s", err.msg);
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 2};
    as_run *r = NULL;
    if (model_forward(m, &gc.enc, &spec, NULL, &tp, &r, &err)) fail_msg("%s", err.msg);
    if (model_backward_params(m, &gc.enc, NULL, &tp, r, gc.dlogits, 2, NULL, NULL, &pg, &err))
        fail_msg("%s", err.msg);
    pg_check pc = {.ref = pr, .tol = tol};
    for (int i = 0; i < st_file_count(pr); i++) {
        const st_tensor *t = st_file_tensor(pr, i);
        float *e = copy_data(t);
        pc.scale = fmax(pc.scale, max_abs(e, t->n_elems));
        free(e);
    }
    const as_config *c = as_model_config(m);
    const char *table = st_file_metadata(pr, "table");
    assert_non_null(table);
    cmp_block(&pc, table, pg.wte, c->vocab_size, c->d_embed, 0, 0);
    const char *pos_names[] = {"embeddings.position_embeddings.weight", "wpe.weight"};
    for (int k = 0; k < 2 && pg.wpe; k++)
        cmp_block(&pc, model_tensor_name(m, pos_names[k]), pg.wpe, c->max_pos, c->d_embed, 0, 0);
    cmp_block(&pc, model_tensor_name(m, "embeddings.token_type_embeddings.weight"), pg.wtt, c->type_vocab,
              c->d_embed, 0, 0);
    cmp_ln(&pc, &m->ln_emb, &pg.ln_emb);
    cmp_ln(&pc, &m->ln_f, &pg.ln_f);
    cmp_lin(&pc, &m->emb_proj, &pg.emb_proj);
    cmp_lin(&pc, &m->cls_pre, &pg.cls_pre);
    cmp_lin(&pc, &m->cls_out, &pg.cls_out);
    cmp_lin(&pc, &m->lm_head, &pg.lm_head);
    for (int l = 0; l < c->n_layer; l++) {
        const layer_w *w = &m->layers[l];
        layer_grad *g = &pg.layers[l];
        const lin_t *ls[] = {&w->q, &w->k, &w->v, &w->o, &w->ff1, &w->up, &w->ff2};
        const lin_grad *gs[] = {&g->q, &g->k, &g->v, &g->o, &g->ff1, &g->up, &g->ff2};
        for (int k = 0; k < 7; k++) cmp_lin(&pc, ls[k], gs[k]);
        const ln_t *ns[] = {&w->ln1, &w->ln2, &w->post_attn, &w->post_ff, &w->q_norm, &w->k_norm};
        const ln_grad *ngs[] = {&g->ln1, &g->ln2, &g->post_attn, &g->post_ff, &g->q_norm, &g->k_norm};
        for (int k = 0; k < 6; k++) cmp_ln(&pc, ns[k], ngs[k]);
    }
    /* every reference tensor with a gradient was compared (the MLM head of a model
       explained through its classifier gets none) */
    int missed = 0;
    for (int i = 0; i < st_file_count(pr); i++) {
        const st_tensor *t = st_file_tensor(pr, i);
        int seen = 0;
        for (int k = 0; k < pc.n_seen; k++) seen |= !strcmp(pc.seen[k], t->name);
        float *e = copy_data(t);
        if (!seen && max_abs(e, t->n_elems) > 1e-6 * pc.scale) {
            printf("  %s: not compared\n", t->name);
            missed++;
        }
        free(e);
    }
    printf("%s (%s): %d parameter gradients compared, %d out of tolerance, %d not compared\n", name,
           as_precision_name(prec), pc.checked, pc.bad, missed);
    as_run_free(r);
    model_tape_free(&tp);
    model_grads_free(&pg);
    case_free(&gc);
    fx_close(&ff);
    return pc.bad + missed;
}

static void test_param_grads(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "distilbert", "roberta", "gpt2", "llama", "llama3_scaled", "qwen3",
                                        "gemma2", "gemma3", "phi3", "mistral_swa", "llama_cls"};
    int failed = 0;
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++)
        failed += param_grads_case(names[fi], AS_PRECISION_F32, 0);
    if (failed) fail_msg("%d parameter gradient(s) differ from PyTorch's or were not compared", failed);
}

/* Precision bf16 (BF16 products in the forward, dx and dW): every parameter gradient
 * against the same float64 reference within BF16_GRAD_REL of its tensor's largest
 * magnitude. Not the distilbert fixture: its random model is ill-conditioned for BF16
 * (its F32 gradients move by 19% of their largest magnitude when only its layers' weights
 * are rounded to BF16, as much as at precision bf16). */
static void test_param_grads_bf16(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "roberta", "gpt2", "llama", "qwen3",
                                        "gemma2", "gemma3", "phi3", "mistral_swa", "llama_cls"};
    int failed = 0;
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++)
        failed += param_grads_case(names[fi], AS_PRECISION_BF16, BF16_GRAD_REL);
    if (failed) fail_msg("%d bf16 parameter gradient(s) out of tolerance or not compared", failed);
}

/* op_linear_dw at precision bf16 (model_par_bf16_dw) against a double-precision sum over
 * the BF16-rounded operands (within F32 summation error), for both weight layouts and
 * 1 and 2 threads; without the BF16 buffer it is the F32 product, which differs. */
static void test_linear_dw_bf16(void **state) {
    (void)state;
    enum { T = 37, NO = 70, NI = 45 };
    float *x = malloc(sizeof(float) * T * NI), *dy = malloc(sizeof(float) * T * NO);
    float *w = malloc(sizeof(float) * NO * NI), *dw = malloc(sizeof(float) * NO * NI);
    float *dw32 = malloc(sizeof(float) * NO * NI), *db = calloc(NO, sizeof(float));
    uint16_t *wbf = malloc(2 * (size_t)NO * NI), *buf = malloc(2 * (size_t)T * (NO + NI));
    size_t conv_pt = as_gemm_bf16_xw_scratch(NO > NI ? NO : NI);
    float *conv = malloc(sizeof(float) * 2 * conv_pt);
    assert_true(x && dy && w && dw && dw32 && db && wbf && buf && conv);
    uint32_t st = 12345;
    for (int i = 0; i < T * NI; i++) x[i] = (float)((st = st * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < T * NO; i++) dy[i] = (float)((st = st * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < NO * NI; i++) w[i] = 0.01f * (float)(i % 7);
    as_f32_to_bf16_n(wbf, w, (size_t)NO * NI);
    for (int in_out = 0; in_out < 2; in_out++)
        for (int nt = 1; nt <= 2; nt++) {
            lin_t l = {.w = w, .wbf = wbf, .n_in = NI, .n_out = NO, .ldw = in_out ? NO : NI, .in_out = in_out};
            int rows = in_out ? NI : NO, cols = in_out ? NO : NI;
            for (int i = 0; i < NO * NI; i++) dw[i] = dw32[i] = 0.25f;
            par_state saved;
            model_par_begin(nt, conv, conv_pt, NULL, &saved);
            model_par_bf16_dw(buf, (size_t)T * (NO + NI));
            op_linear_dw(&l, x, dy, T, dw, NULL);
            model_par_bf16_dw(NULL, 0);
            op_linear_dw(&l, x, dy, T, dw32, NULL);
            model_par_end(&saved);
            double worst = 0, diff32 = 0;
            for (int r = 0; r < rows; r++)
                for (int c = 0; c < cols; c++) {
                    double ref = 0.25, sum = 0;
                    for (int t = 0; t < T; t++) {
                        float a = in_out ? x[t * NI + r] : dy[t * NO + r], b = in_out ? dy[t * NO + c] : x[t * NI + c];
                        ref += (double)as_bf16_to_f32(as_f32_to_bf16(a)) * as_bf16_to_f32(as_f32_to_bf16(b));
                        sum += fabs((double)a * b);
                    }
                    worst = fmax(worst, fabs(dw[r * cols + c] - ref) / (sum + 0.25));
                    diff32 = fmax(diff32, fabs(dw[r * cols + c] - dw32[r * cols + c]));
                }
            printf("dW bf16 (%s, %d threads): worst |diff| / sum|products| %.2e; against F32 %.2e\n",
                   in_out ? "[in, out]" : "[out, in]", nt, worst, diff32);
            if (!(worst <= 1e-6)) fail_msg("the bf16 weight gradient is not the sum of the rounded products");
            if (!(diff32 > 0)) fail_msg("without the BF16 buffer the weight gradient should be F32's");
        }
    free(x), free(dy), free(w), free(dw), free(dw32), free(db), free(wbf), free(buf), free(conv);
}


/* Staged weight gradients (model_dw_stage): three sequences (the case's tokens with three
 * different logit gradients) backpropagated with their layers' dW staged, then one product
 * per map, equal the sum of the three per-sequence backwards within 1e-5 of each tensor's
 * largest magnitude (the same BF16 products, summed in another order); the staged maps
 * leave the sequences' buffer untouched; the stage is sized for a fourth sequence that
 * never runs (its columns add nothing); the flush on 1 and 3 threads is bit-identical. */
static void test_dw_stage(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "gpt2", "llama"};
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++) {
        fx_files ff;
        grad_case gc = {0};
        as_model *m = open_single(names[fi], &ff, &gc);
        as_error err = {0};
        if (as_model_set_precision(m, AS_PRECISION_BF16, &err)) fail_msg("%s", err.msg);
        int T = gc.enc.n;
        model_tape tp;
        model_grads ref, buf, g[2];
        if (model_tape_init(m, T, &tp, &err) || model_grads_init(m, &ref, &err) || model_grads_init(m, &buf, &err) ||
            model_grads_init(m, &g[0], &err) || model_grads_init(m, &g[1], &err))
            fail_msg("%s", err.msg);
        float *dl = malloc(gc.n_logits * sizeof(float));
        assert_non_null(dl);
        as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 2};
        model_dw_stage *st = NULL;
        if (model_dw_stage_init(m, &buf, 4, T, 3, &st, &err)) fail_msg("%s", err.msg);
        assert_non_null(st);
        for (int pass = 0; pass < 3; pass++) { /* reference; staged, flush on 1 thread; on 3 */
            model_grads_zero(&buf);
            for (int sq = 0; sq < 3; sq++) {
                for (size_t i = 0; i < gc.n_logits; i++)
                    dl[i] = gc.dlogits[i] * (float)(sq + 1) * ((int)(i % 3) == sq ? -1.0f : 1.0f);
                as_run *r = NULL;
                if (model_forward(m, &gc.enc, &spec, NULL, &tp, &r, &err)) fail_msg("%s", err.msg);
                model_dw_stage_seq(pass ? st : NULL, sq, &buf);
                if (model_backward_params(m, &gc.enc, NULL, &tp, r, dl, 2, NULL, NULL, pass ? &buf : &ref, &err))
                    fail_msg("%s", err.msg);
                model_dw_stage_seq(NULL, 0, NULL);
                as_run_free(r);
            }
            if (!pass) continue;
            model_grads *gp = &g[pass - 1];
            if (max_abs(buf.layers[0].q.w, (size_t)m->layers[0].q.n_out * m->layers[0].q.n_in) != 0.0)
                fail_msg("%s: a staged map was multiplied per sequence", names[fi]);
            model_dw_stage_flush(st, gp, pass == 1 ? 1 : 3);
            for (size_t i = 0; i < gp->n; i++) gp->block[i] += buf.block[i];
        }
        if (memcmp(g[0].block, g[1].block, g[0].n * sizeof(float)))
            fail_msg("%s: the staged gradients depend on the thread count", names[fi]);
        double worst = 0;
        for (int l = 0; l < as_model_config(m)->n_layer; l++) {
            const layer_w *w = &m->layers[l];
            const lin_t *ls[] = {&w->q, &w->k, &w->v, &w->o, &w->ff1, &w->up, &w->ff2};
            const lin_grad *rs[] = {&ref.layers[l].q, &ref.layers[l].k, &ref.layers[l].v, &ref.layers[l].o,
                                    &ref.layers[l].ff1, &ref.layers[l].up, &ref.layers[l].ff2};
            const lin_grad *gs[] = {&g[0].layers[l].q, &g[0].layers[l].k, &g[0].layers[l].v, &g[0].layers[l].o,
                                    &g[0].layers[l].ff1, &g[0].layers[l].up, &g[0].layers[l].ff2};
            for (int k = 0; k < 7; k++) {
                if (!rs[k]->w) continue;
                size_t n = (size_t)ls[k]->n_out * ls[k]->n_in;
                double d = max_diff(gs[k]->w, rs[k]->w, n) / fmax(max_abs(rs[k]->w, n), 1e-30);
                worst = d > worst ? d : worst;
            }
        }
        double all = max_diff(g[0].block, ref.block, ref.n) / max_abs(ref.block, ref.n);
        printf("%s: staged dW against per-sequence: worst %.2e of a tensor's max; every gradient %.2e; 1 = 3 threads\n",
               names[fi], worst, all);
        if (!(worst <= 1e-5) || !(all <= 1e-5)) fail_msg("%s: staged weight gradients differ", names[fi]);
        model_dw_stage_free(st);
        free(dl);
        model_grads_free(&ref), model_grads_free(&buf), model_grads_free(&g[0]), model_grads_free(&g[1]);
        model_tape_free(&tp);
        case_free(&gc);
        fx_close(&ff);
    }
}

/* ---- training-mode dropout -------------------------------------------------- */

/* The objective of gc on m with dropout tape tp (seed), its parameter gradients into pg
 * (zeroed first) when non-NULL. */
static double drop_objective(const as_model *m, const grad_case *gc, model_tape *tp, uint64_t seed,
                             model_grads *pg) {
    as_error err = {0};
    tp->drop_seed = seed;
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 2};
    as_run *r = NULL;
    if (model_forward(m, &gc->enc, &spec, NULL, tp, &r, &err)) fail_msg("%s", err.msg);
    double y = 0;
    for (size_t i = 0; i < gc->n_logits; i++) y += (double)gc->dlogits[i] * r->logits[i];
    if (pg) {
        model_grads_zero(pg);
        if (model_backward_params(m, &gc->enc, NULL, tp, r, gc->dlogits, 2, NULL, NULL, pg, &err))
            fail_msg("%s", err.msg);
    }
    as_run_free(r);
    return y;
}

/* Dropout p = 0.1 with a fixed seed is a deterministic function of the weights: central
 * finite differences (float forward, eps 1e-3) of the largest-gradient entry of each of
 * 48 equal chunks of the parameters agree with the backward, |fd - g| <= 1e-2 |g| + 1e-4;
 * the same seed gives bit-identical objective and gradients, another seed another
 * objective; p = 0 is bit-identical to no dropout; about p of a mask is dropped. */
static void test_dropout(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "roberta", "distilbert", "gpt2"};
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++) {
        fx_files ff;
        fx_open(names[fi], 1, 0, &ff);
        as_model *m = ff.m;
        as_error err = {0};
        grad_case gc = {0};
        case_init(m, ff.ex, ff.gr, names[fi], "padded", &gc);
        model_grads p, g, g2;
        model_tape tp;
        if (model_params_own(m, &p, &err) || model_grads_init(m, &g, &err) || model_grads_init(m, &g2, &err) ||
            model_tape_init(m, gc.enc.n, &tp, &err))
            fail_msg("%s", err.msg);
        double y_plain = drop_objective(m, &gc, &tp, 7, &g2);
        if (model_tape_dropout(m, &tp, 0.0f, &err)) fail_msg("%s", err.msg);
        assert_true(drop_objective(m, &gc, &tp, 7, &g) == y_plain);
        assert_memory_equal(g.block, g2.block, g.n * sizeof(float));
        if (model_tape_dropout(m, &tp, 0.1f, &err)) fail_msg("%s", err.msg);
        double y7 = drop_objective(m, &gc, &tp, 7, &g);
        assert_true(drop_objective(m, &gc, &tp, 7, &g2) == y7);
        assert_memory_equal(g.block, g2.block, g.n * sizeof(float));
        double y8 = drop_objective(m, &gc, &tp, 8, NULL);
        assert_true(y7 != y_plain && y8 != y7);
        size_t chunk = (g.n + 47) / 48;
        int checked = 0;
        double worst = 0;
        for (size_t c0 = 0; c0 < g.n; c0 += chunk) {
            size_t best = c0, c1 = c0 + chunk < g.n ? c0 + chunk : g.n;
            for (size_t k = c0; k < c1; k++)
                if (fabsf(g.block[k]) > fabsf(g.block[best])) best = k;
            float gv = g.block[best];
            if (fabsf(gv) < 1e-3f) continue; /* below what a float difference resolves */
            float old = p.block[best], eps = 1e-3f;
            p.block[best] = old + eps;
            double yp = drop_objective(m, &gc, &tp, 7, NULL);
            p.block[best] = old - eps;
            double ym = drop_objective(m, &gc, &tp, 7, NULL);
            p.block[best] = old;
            double fd = (yp - ym) / (2.0 * eps);
            worst = fmax(worst, fabs(fd - gv) / (fabs(gv) + 1e-2));
            if (fabs(fd - gv) > 1e-2 * fabs(gv) + 1e-4)
                fail_msg("%s: parameter %zu: backward %.6g, finite difference %.6g", names[fi], best, gv, fd);
            checked++;
        }
        printf("%s: dropout 0.1: objective %.6f (seed 7) %.6f (seed 8) %.6f (off); %d finite differences, worst "
               "|fd - g| / (|g| + 0.01) = %.2e\n", names[fi], y7, y8, y_plain, checked, worst);
        assert_true(checked >= 20);
        model_tape_free(&tp);
        model_grads_free(&g);
        model_grads_free(&g2);
        case_free(&gc);
        fx_close(&ff);
        model_grads_free(&p); /* after the model, whose views point into it */
    }
    float *mk = malloc(100000 * sizeof(float));
    assert_non_null(mk);
    op_drop_mask(mk, 0, 100000, op_drop_key(7, 3), 0.1f);
    int dropped = 0;
    for (int i = 0; i < 100000; i++) dropped += mk[i] == 0.0f;
    printf("dropout mask: %d of 100000 dropped at p = 0.1\n", dropped);
    assert_true(dropped > 9500 && dropped < 10500);
    free(mk);
    as_error err = {0};
    model_tape none = {0};
    assert_int_equal(model_tape_dropout(NULL, &none, 1.0f, &err), AS_ERR_INPUT);
}

int main(void) {
    struct CMUnitTest tests[sizeof FIXTURES / sizeof FIXTURES[0] + 7];
    size_t n = 0;
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        struct CMUnitTest t = cmocka_unit_test_prestate(test_fixture, (void *)FIXTURES[i]);
        t.name = FIXTURES[i];
        tests[n++] = t;
    }
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_given_words_and_fd);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_precision_bf16);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_param_grads);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_param_grads_bf16);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_linear_dw_bf16);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_dw_stage);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_dropout);
    return _cmocka_run_group_tests("model_grads", tests, n, NULL, NULL);
}
