/* test_lm_train.c — causal-LM training on the one forward (src/train/lm_train.c,
 * src/model/params.c): the batch loss's parameter gradients against central finite
 * differences of the loss itself; AdamW on a fixed batch lowers the loss; owning the
 * weights does not change the forward; a trained model saved and loaded again computes
 * the same forward (fused GPT-2 c_attn and Phi-3 qkv_proj / gate_up_proj reassembled,
 * tied tables); the decay mask covers exactly the matrices and tables; the loss and every
 * gradient are bit-identical at 1, 2 and 3 threads; training at precision bf16 follows
 * F32's loss curve and keeps its BF16 weights (and their packing) current; the repeated-span curriculum copies
 * a span right after itself, from the window's own tokens or from random ids.
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

#include "core/gemm_bf16.h"
#include "train/lm_train.h"

#define FIXTURE_ROOT AS_SOURCE_DIR "/tests/ref/fixtures/models"

static as_model *load(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURE_ROOT, name);
    as_model *m = NULL;
    as_error err = {0};
    if (as_model_load(dir, &m, &err)) fail_msg("%s: %s", name, err.msg);
    return m;
}

/* B windows of T ids in [3, V) from a fixed recipe. */
static void windows(int32_t *ids, int B, int T, int V) {
    for (int i = 0; i < B * T; i++) ids[i] = 3 + (i * 7 + i / T * 5) % (V - 3);
}

static double loss_of(const as_model *m, const int32_t *ids, int B, int T, model_grads *g) {
    as_error err = {0};
    double loss;
    if (lm_batch_loss(m, ids, B, T, 2, g, &loss, &err)) fail_msg("%s", err.msg);
    return loss;
}

static void test_gradient_fd(void **state) {
    (void)state;
    static const char *const names[] = {"llama", "gemma2", "phi3", "gpt2", "qwen3"};
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++) {
        as_model *m = load(names[fi]);
        model_grads p, g, scratch;
        as_error err = {0};
        if (model_params_own(m, &p, &err) || model_grads_init(m, &g, &err) || model_grads_init(m, &scratch, &err))
            fail_msg("%s", err.msg);
        int B = 2, T = 9, V = as_model_config(m)->vocab_size;
        int32_t ids[18];
        windows(ids, B, T, V);
        loss_of(m, ids, B, T, &g);
        /* the 12 largest-gradient entries spread over the block, plus 4 at random */
        double worst = 0.0;
        unsigned seed = 99;
        for (int k = 0; k < 16; k++) {
            size_t i;
            if (k < 12) {
                size_t lo = p.n * (size_t)k / 12, hi = p.n * (size_t)(k + 1) / 12;
                i = lo;
                for (size_t j = lo; j < hi; j++)
                    if (fabsf(g.block[j]) > fabsf(g.block[i])) i = j;
            } else {
                seed = seed * 1664525u + 1013904223u;
                i = (seed >> 4) % p.n;
            }
            float keep = p.block[i], h = 1e-2f * fmaxf(1.0f, fabsf(keep));
            p.block[i] = keep + h;
            double lp = loss_of(m, ids, B, T, &scratch);
            p.block[i] = keep - h;
            double lm = loss_of(m, ids, B, T, &scratch);
            p.block[i] = keep;
            double fd = (lp - lm) / (2.0 * h), an = g.block[i];
            double rel = fabs(fd - an) / fmax(fabs(an), 1e-3);
            worst = fmax(worst, rel);
            if (rel > 3e-2) printf("  %s: parameter %zu: finite difference %.6g, gradient %.6g\n", names[fi], i, fd, an);
        }
        printf("%s: %zu parameters, gradient vs finite differences worst relative error %.2e\n", names[fi], p.n,
               worst);
        assert_true(worst <= 3e-2);
        as_model_free(m);
        model_grads_free(&p);
        model_grads_free(&g);
        model_grads_free(&scratch);
    }
}

/* 40 AdamW steps on one batch at precision prec (model_params_round_bf16 after each);
 * the loss of each step into loss (40). */
static void train_steps(const char *name, as_precision prec, double *loss) {
    as_model *m = load(name);
    model_grads p, g;
    as_error err = {0};
    if (model_params_own(m, &p, &err) || as_model_set_precision(m, prec, &err) || model_grads_init(m, &g, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(g.n, p.n); /* one layout at either precision */
    float *mo = calloc(p.n, sizeof(float)), *vo = calloc(p.n, sizeof(float));
    uint8_t *decay = malloc(p.n);
    assert_true(mo && vo && decay);
    model_params_decay_mask(m, &p, decay);
    lm_opts o;
    lm_opts_default(&o);
    int32_t ids[2 * 12];
    windows(ids, 2, 12, as_model_config(m)->vocab_size);
    for (int step = 0; step < 40; step++) {
        model_grads_zero(&g);
        loss[step] = loss_of(m, ids, 2, 12, &g);
        lm_adamw_step(p.block, g.block, mo, vo, decay, p.n, step, &o, 1e-2f, 1.0f);
        if (model_params_round_bf16(m, 2, &err)) fail_msg("%s", err.msg);
    }
    /* the BF16 copies are the rounded F32 weights of the last step */
    size_t checked = 0;
    for (int l = 0; l < as_model_config(m)->n_layer; l++) {
        const layer_w *w = &m->layers[l];
        const lin_t *ls[] = {&w->q, &w->k, &w->v, &w->o, &w->ff1, &w->up, &w->ff2};
        for (int k = 0; k < 7; k++) {
            const lin_t *li = ls[k];
            if (!li->w || !li->wbf) continue;
            assert_int_equal(prec, AS_PRECISION_BF16);
            for (int j = 0; j < li->n_out; j++)
                for (int i = 0; i < li->n_in; i++, checked++) {
                    float v = li->in_out ? li->w[(size_t)i * li->ldw + j] : li->w[(size_t)j * li->ldw + i];
                    if (li->wbf[(size_t)j * li->n_in + i] != as_f32_to_bf16(v))
                        fail_msg("%s layer %d: a BF16 copy is not the rounded trained weight", name, l);
                }
            if (!li->wpk) continue; /* the packed copy the forward reads: the packing of wbf's values */
            size_t words = as_gemm_bf16_packed_words(li->n_out, li->n_in);
            uint32_t *pk = malloc(words * sizeof(uint32_t));
            assert_non_null(pk);
            as_gemm_bf16_pack(li->wbf, (size_t)li->n_in, li->n_out, li->n_in, pk);
            if (memcmp(pk, li->wpk, words * sizeof(uint32_t)) != 0)
                fail_msg("%s layer %d: the packed weights are not those of the trained BF16 copy", name, l);
            free(pk);
        }
    }
    if (prec == AS_PRECISION_BF16) assert_true(checked > 0);
    free(mo);
    free(vo);
    free(decay);
    as_model_free(m);
    model_grads_free(&p);
    model_grads_free(&g);
}

static void test_adamw_lowers_loss(void **state) {
    (void)state;
    double loss[40];
    train_steps("llama", AS_PRECISION_F32, loss);
    printf("llama: loss %.4f -> %.4f after 40 AdamW steps on one batch\n", loss[0], loss[39]);
    assert_true(loss[39] < 0.5 * loss[0]);
}

/* Training at precision bf16 (BF16 products in the forward and both gradients, F32
 * master weights): its loss curve follows F32's on the same batch, within 2% of the first
 * loss at every step (measured: at most 0.3%), and still halves the loss; the BF16 copies
 * follow the trained weights. GPT-2 (Conv1D [in, out] weights, tied head) and Llama. */
static void test_bf16_training(void **state) {
    (void)state;
    static const char *const names[] = {"gpt2", "llama"};
    for (int n = 0; n < 2; n++) {
        double l32[40], l16[40], worst = 0.0;
        train_steps(names[n], AS_PRECISION_F32, l32);
        train_steps(names[n], AS_PRECISION_BF16, l16);
        for (int i = 0; i < 40; i++) worst = fmax(worst, fabs(l16[i] - l32[i]));
        printf("%s: loss %.4f -> %.4f (F32 %.4f -> %.4f), largest gap %.2e = %.2f%% of the first loss\n", names[n],
               l16[0], l16[39], l32[0], l32[39], worst, 100.0 * worst / l32[0]);
        assert_true(l16[0] != l32[0]); /* the products did run in BF16 */
        assert_true(worst <= 0.02 * l32[0]);
        assert_true(l16[39] < 0.5 * l16[0]);
    }
}

static as_run *fwd(const as_model *m, const int32_t *ids, int T) {
    as_encoding enc = {0};
    as_error err = {0};
    as_run *r = NULL;
    if (as_encoding_from_ids(m, ids, NULL, T, &enc, &err)) fail_msg("%s", err.msg);
    as_capture_spec spec = {.what = CAP_ATTN | CAP_LOGITS, .layer = -1, .head = -1, .threads = 2};
    if (as_forward(m, &enc, &spec, &r, &err)) fail_msg("%s", err.msg);
    as_encoding_free(&enc);
    return r;
}

static double diff(const as_run *a, const as_run *b) {
    double d = 0.0;
    for (size_t i = 0; i < (size_t)a->logits_rows * a->logits_cols; i++)
        d = fmax(d, fabs((double)a->logits[i] - b->logits[i]));
    for (size_t i = 0; i < (size_t)a->n_lay * a->n_hd * a->T * a->T; i++)
        d = fmax(d, fabs((double)a->attn[i] - b->attn[i]));
    return d;
}

static void test_own_and_save(void **state) {
    (void)state;
    static const char *const names[] = {"llama", "llama3_scaled", "llama_bf16", "phi3", "gpt2", "gemma2"};
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++) {
        as_model *m = load(names[fi]);
        int T = 10, V = as_model_config(m)->vocab_size;
        int32_t ids[10];
        windows(ids, 1, T, V);
        as_run *r0 = fwd(m, ids, T);
        model_grads p, g;
        as_error err = {0};
        if (model_params_own(m, &p, &err) || model_grads_init(m, &g, &err)) fail_msg("%s", err.msg);
        as_run *r1 = fwd(m, ids, T);
        double d_own = diff(r0, r1);
        /* every matrix and table decays, nothing else */
        uint8_t *decay = malloc(p.n);
        assert_non_null(decay);
        model_params_decay_mask(m, &p, decay);
        size_t nd = 0;
        for (size_t i = 0; i < p.n; i++) nd += decay[i];
        assert_true(nd > 0 && nd < p.n);
        /* one step moves the weights; the saved folder computes what the model now does */
        loss_of(m, ids, 1, T, &g);
        lm_opts o;
        lm_opts_default(&o);
        float *mo = calloc(p.n, sizeof(float)), *vo = calloc(p.n, sizeof(float));
        assert_true(mo && vo);
        lm_adamw_step(p.block, g.block, mo, vo, decay, p.n, 0, &o, 1e-2f, 1.0f);
        as_run *r2 = fwd(m, ids, T);
        char src[512], out[64] = "/tmp/as_lm_save_XXXXXX";
        snprintf(src, sizeof src, "%s/%s", FIXTURE_ROOT, names[fi]);
        assert_non_null(mkdtemp(out));
        if (model_params_save(m, src, out, &err)) fail_msg("%s", err.msg);
        as_model *back = NULL;
        if (as_model_load(out, &back, &err)) fail_msg("%s: %s", out, err.msg);
        as_run *r3 = fwd(back, ids, T);
        double d_moved = diff(r0, r2), d_saved = diff(r2, r3);
        printf("%s: owning changes the forward by %.2e, one step by %.2e, saving and loading by %.2e\n", names[fi],
               d_own, d_moved, d_saved);
        assert_true(d_own == 0.0 && d_moved > 1e-4 && d_saved <= 1e-6);
        char f[600];
        static const char *const files[] = {"model.safetensors", "config.json"};
        for (int k = 0; k < 2; k++) {
            snprintf(f, sizeof f, "%s/%s", out, files[k]);
            unlink(f);
        }
        rmdir(out);
        free(mo);
        free(vo);
        free(decay);
        as_run_free(r0);
        as_run_free(r1);
        as_run_free(r2);
        as_run_free(r3);
        as_model_free(back);
        as_model_free(m);
        model_grads_free(&p);
        model_grads_free(&g);
    }
}

static void test_threads(void **state) {
    (void)state;
    as_model *m = load("gpt2");
    model_grads p, g1, gn;
    as_error err = {0};
    if (model_params_own(m, &p, &err) || model_grads_init(m, &g1, &err) || model_grads_init(m, &gn, &err))
        fail_msg("%s", err.msg);
    int B = 7, T = 9, V = as_model_config(m)->vocab_size;
    int32_t ids[63];
    windows(ids, B, T, V);
    double l1, ln;
    if (lm_batch_loss(m, ids, B, T, 1, &g1, &l1, &err)) fail_msg("%s", err.msg);
    for (int nt = 2; nt <= 3; nt++) {
        model_grads_zero(&gn);
        if (lm_batch_loss(m, ids, B, T, nt, &gn, &ln, &err)) fail_msg("%s", err.msg);
        assert_true(l1 == ln);
        assert_int_equal(memcmp(g1.block, gn.block, g1.n * sizeof(float)), 0);
    }
    printf("threads: loss %.6f and %zu gradient floats bit-identical at 1, 2 and 3 threads\n", l1, g1.n);
    model_grads_free(&gn);
    model_grads_free(&g1);
    as_model_free(m);
    model_grads_free(&p);
}

/* Finds the repeated span of w (length m >= T/16 with w[s+m, s+2m) = w[s, s+m)) by
 * trying every start and length; returns m (0 if none). */
static int repeated_span(const int32_t *w, int T, int *start) {
    for (int m = T / 2; m >= T / 16; m--)
        for (int s = 0; s + 2 * m <= T; s++)
            if (!memcmp(w + s, w + s + m, (size_t)m * sizeof *w)) {
                *start = s;
                return m;
            }
    return 0;
}

static void test_repeat_span(void **state) {
    (void)state;
    enum { T = 128, V = 500, NIDS = 5 };
    int32_t w[T], orig[T];
    int n_random = 0, n_text = 0, n_small = 0;
    for (int trial = 0; trial < 300; trial++) {
        for (int i = 0; i < T; i++) orig[i] = w[i] = 20 + (i * 37 + trial) % 400; /* no repeat of length >= 8 */
        train_rng r = train_rng_seeded(7, (uint64_t)trial);
        /* 0-99: the window's own tokens; 100-199: half random over [16, V); 200-299: all
           random over the NIDS ids from 16 (--repeat-ids) */
        lm_repeat_span(w, T, trial < 100 ? 0.0f : trial < 200 ? 0.5f : 1.0f, V, trial < 200 ? 0 : NIDS, &r);
        int s = -1, m = repeated_span(w, T, &s);
        assert_true(m >= T / 16 && m <= T / 2);
        int copied = !memcmp(w + s, orig + s, (size_t)m * sizeof *w);
        for (int i = 0; i < T; i++) /* outside the second copy, the window holds its own tokens or random ids */
            if (i < s || i >= s + 2 * m) assert_int_equal(w[i], orig[i]);
        if (!copied) {
            assert_true(trial >= 100); /* random spans only when asked for */
            int hi = trial < 200 ? V : 16 + NIDS;
            for (int i = s; i < s + m; i++) assert_true(w[i] >= 16 && w[i] < hi);
            if (trial < 200) n_random++;
            else n_small++;
        } else n_text++;
    }
    assert_true(n_random > 25 && n_random < 75); /* half of the 100 trials at 0.5 */
    assert_int_equal(n_small, 100);              /* every span at 1.0, from the small alphabet */
    printf("repeat span: 300 windows, %d spans of random ids, %d from %d ids, %d of the window's own tokens\n",
           n_random, n_small, NIDS, n_text);
}

static void test_window_start(void **state) {
    (void)state;
    enum { BOS = 1 };
    int32_t stream[30]; /* documents start at 0, 10 and 25 */
    for (int i = 0; i < 30; i++) stream[i] = i == 0 || i == 10 || i == 25 ? BOS : 7;
    const size_t at[] = {0, 9, 10, 24, 25, 29}, want[] = {0, 0, 10, 10, 25, 25};
    for (int i = 0; i < 6; i++) assert_int_equal(lm_window_start(stream, at[i], BOS), want[i]);
    int32_t late[8] = {7, 7, 7, 7, 7, BOS, 7, 7}; /* the first document start at 5 */
    assert_int_equal(lm_window_start(late, 3, BOS), 3); /* before it: unchanged */
    assert_int_equal(lm_window_start(late, 7, BOS), 5);
    assert_int_equal(lm_window_start(late, 0, BOS), 0);
}

/* lm_fill_window: plain windows are the stream at the drawn offset (the draws of a run
 * without the BOS options); --bos-prefix puts BOS first and keeps the rest of the window
 * (a repeated span stays after it); --bos-start moves windows to their document's BOS. */
static void test_fill_window(void **state) {
    (void)state;
    enum { N = 400, T = 32, BOS = 1, V = 500 };
    int32_t stream[N], w[T];
    for (int i = 0; i < N; i++) stream[i] = i % 50 == 0 ? BOS : 20 + (i * 37) % 400; /* documents every 50 */
    lm_opts o;
    lm_opts_default(&o);
    o.seq = T;
    int n_prefixed = 0;
    for (int trial = 0; trial < 200; trial++) {
        train_rng r1 = train_rng_seeded(3, (uint64_t)trial), r2 = r1, rep = train_rng_seeded(4, (uint64_t)trial),
                  bos = train_rng_seeded(5, (uint64_t)trial);
        size_t at = (size_t)(train_rng_uniform(&r2) * (double)(N - T)); /* the offset a plain run draws */
        o.bos_prefix = 0.0f;
        o.bos_start = 0.0f;
        o.repeat_frac = 0.0f;
        lm_fill_window(w, stream, N, &o, 0, BOS, V, &r1, &rep, &bos);
        assert_memory_equal(w, stream + at, sizeof w);
        r1 = train_rng_seeded(3, (uint64_t)trial);
        o.bos_start = 1.0f;
        lm_fill_window(w, stream, N, &o, 0, BOS, V, &r1, &rep, &bos);
        assert_memory_equal(w, stream + at / 50 * 50, sizeof w);
        r1 = train_rng_seeded(3, (uint64_t)trial);
        o.bos_start = 0.0f;
        o.bos_prefix = trial < 100 ? 1.0f : 0.5f;
        o.repeat_frac = trial < 100 ? 0.0f : 1.0f;
        lm_fill_window(w, stream, N, &o, 0, BOS, V, &r1, &rep, &bos);
        if (trial < 100) { /* BOS, then the stream after the offset's first token */
            assert_int_equal(w[0], BOS);
            assert_memory_equal(w + 1, stream + at + 1, sizeof w - sizeof w[0]);
        } else if (w[0] == BOS && stream[at] != BOS) {
            n_prefixed++;
            int s = -1, m = repeated_span(w + 1, T - 1, &s); /* the repeat among the tokens after BOS */
            assert_true(m >= (T - 1) / 16 && s >= 0);
        } else assert_int_equal(w[0], stream[at]); /* not prefixed: the repeat left w[0] alone */
    }
    assert_true(n_prefixed > 25 && n_prefixed < 75); /* half of the 100 windows at 0.5 */
    printf("fill window: plain, document-start and BOS-prefixed windows as drawn; %d of 100 prefixed at 0.5\n",
           n_prefixed);
}

static void test_errors(void **state) {
    (void)state;
    as_model *m = load("bert"); /* a classifier and a masked-LM head, no causal-LM head */
    model_grads g;
    as_error err = {0};
    if (model_grads_init(m, &g, &err)) fail_msg("%s", err.msg);
    int32_t ids[4] = {5, 6, 7, 8};
    double loss;
    assert_int_equal(lm_batch_loss(m, ids, 1, 4, 1, &g, &loss, &err), AS_ERR_INPUT);
    printf("error: %s\n", err.msg);
    assert_int_equal(lm_batch_loss(m, ids, 1, 1, 1, &g, &loss, &err), AS_ERR_INPUT);
    model_grads_free(&g);
    as_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradient_fd),
        cmocka_unit_test(test_adamw_lowers_loss),
        cmocka_unit_test(test_own_and_save),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_bf16_training),
        cmocka_unit_test(test_repeat_span),
        cmocka_unit_test(test_window_start),
        cmocka_unit_test(test_fill_window),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
