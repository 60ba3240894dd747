/* test_train.c — the training loop (src/train: optim.c, pretrain.c, checkpoint.c,
 * data.c, bert_loss.c, bert_ckpt.c) on tiny models:
 *   - 30 AdamW steps (warmup + linear decay, clipping, weight decay, dropout off) from
 *     the fixed initialisation of tests/ref/gen_train.py match PyTorch's loss curve:
 *     |loss_c - loss_torch| <= 1e-4 * max(1, |loss_torch|) at every step, and the final
 *     parameters: max |p_c - p_torch| <= 5e-4 (float32 against float64 over 30 steps;
 *     measured 3e-7 and 4e-5);
 *   - pretraining interrupted after a checkpoint and resumed gives bit-identical weights
 *     to an uninterrupted run (dropout on);
 *   - save -> load round trip of the trained checkpoint through as_model_load;
 *   - bad configurations and unreadable corpora fail with AS_ERR_INPUT naming the cause;
 *   - the distillation losses' gradients (KL at temperature T, hidden-state cosine)
 *     against central finite differences.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "io/safetensors.h"
#include "train/trainer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif
#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/train/"

#define LOSS_TOL 1e-4
#define PARAM_TOL 5e-4

static const st_tensor *want(st_file *f, const char *name) {
    const st_tensor *t = st_file_find(f, name);
    if (!t) fail_msg("expected.safetensors: no tensor '%s'", name);
    return t;
}

static void test_loss_curve(void **state) {
    (void)state;
    as_error err = {0};
    st_file *exp = NULL;
    trainable t = {0};
    trainop_adamw opt = {0};
    train_set_threads(1);
    if (trainable_load(FIX "tiny", &t, &err)) fail_msg("%s", err.msg);
    assert_true((as_model_heads(t.m) & HEAD_MLM) && as_model_config(t.m)->num_labels == 3);
    if (st_file_open(FIX "expected.safetensors", &exp, &err)) fail_msg("%s", err.msg);
    const st_tensor *ids = want(exp, "in.ids"), *tt = want(exp, "in.type_ids"), *mk = want(exp, "in.mask"),
                    *cl = want(exp, "in.cls_labels"), *ml = want(exp, "in.mlm_labels"), *ls = want(exp, "out.losses");
    int S = (int)ids->shape[0], B = (int)ids->shape[1], T = (int)ids->shape[2];
    assert_int_equal(S, 30);
    assert_int_equal(ls->n_elems, (size_t)S);
    if (trainop_adamw_init(&opt, t.p.n, &err)) fail_msg("%s", err.msg);
    opt.lr = 1e-2f;
    opt.beta1 = 0.9f;
    opt.beta2 = 0.999f;
    opt.eps = 1e-6f;
    opt.wd = 0.01f;
    opt.clip = 1.0f;
    opt.warmup = 3;
    opt.total = S;
    double worst = 0.0;
    const float *ref = ls->data;
    bert_loss_opts lo = {.threads = 1};
    for (int s = 0; s < S; s++) {
        size_t o = (size_t)s * B * T;
        bert_batch b = {.B = B, .T = T, .ids = (const int32_t *)ids->data + o, .type_ids = (const int32_t *)tt->data + o,
                        .mask = (const int32_t *)mk->data + o, .cls_labels = (const int32_t *)cl->data + (size_t)s * B,
                        .mlm_labels = (const int32_t *)ml->data + o};
        bert_loss_out out = {0};
        model_grads_zero(&t.g);
        if (bert_batch_loss(t.m, &b, &lo, &t.g, &out, &err)) fail_msg("%s", err.msg);
        trainop_adamw_step(&opt, t.p.block, t.g.block, t.decay);
        double d = fabs(out.loss - ref[s]) / fmax(1.0, fabs(ref[s]));
        worst = d > worst ? d : worst;
        if (d > LOSS_TOL) fail_msg("step %d: loss %.6f, torch %.6f", s, out.loss, (double)ref[s]);
    }
    printf("loss curve: %d steps, max relative loss diff %.2e (tol %.0e); loss %.4f -> %.4f\n", S, worst, LOSS_TOL,
           (double)ref[0], (double)ref[S - 1]);
    double pmax = 0.0;
    int found = 0;
    for (int i = 0; i < st_file_count(exp); i++) {
        const st_tensor *r = st_file_tensor(exp, i);
        if (strncmp(r->name, "final.", 6)) continue;
        const float *c = model_param_data(t.m, r->name + 6, r->n_elems);
        if (!c) fail_msg("final parameter %s: not a tensor of the model", r->name + 6);
        found++;
        const float *e = r->data;
        for (size_t k = 0; k < r->n_elems; k++) pmax = fmax(pmax, fabs((double)c[k] - e[k]));
    }
    printf("final parameters: %d tensors, max |diff| %.2e (tol %.0e)\n", found, pmax, PARAM_TOL);
    assert_true(found >= 20);
    assert_true(pmax <= PARAM_TOL);
    trainop_adamw_free(&opt);
    trainable_free(&t);
    st_file_free(exp);
}

/* ---- a tiny corpus + vocabulary in a temporary folder ---- */

static char tmpdir[256];

static void make_corpus(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/as_test_train_XXXXXX");
    assert_non_null(mkdtemp(tmpdir));
    char p[512];
    snprintf(p, sizeof p, "%s/corpus.txt", tmpdir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    static const char *w[] = {"the", "cat", "sat", "on", "a", "mat", "dog", "ran", "to", "house", "and", "it",
                              "was", "happy", "very", "good", "film", "movie", "bad", "story"};
    uint64_t s = 7;
    for (int d = 0; d < 30; d++) {
        for (int l = 0; l < 6; l++) {
            int n = 4 + (int)(s % 7);
            for (int k = 0; k < n; k++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                fprintf(f, "%s%s", k ? " " : "", w[(s >> 33) % 20]);
            }
            fputs(" .\n", f);
        }
        fputs("\n", f);
    }
    fclose(f);
    const char *files[1] = {p};
    char vp[512];
    snprintf(vp, sizeof vp, "%s/vocab.txt", tmpdir);
    vocab_train_opts vo = {.size = 120, .min_char_count = 1};
    int n = 0;
    as_error err = {0};
    if (vocab_train_run(files, 1, &vo, vp, &n, &err)) fail_msg("%s", err.msg);
}

static void tiny_opts(pretrain_opts *o, const char **files, const char *out, char *vp) {
    pretrain_opts_default(o);
    snprintf(vp, 512, "%s/vocab.txt", tmpdir);
    o->corpus = files;
    o->n_corpus = 1;
    o->vocab = vp;
    o->out = out;
    o->layers = 2;
    o->width = 16;
    o->heads = 2;
    o->ff = 32;
    o->max_len = 24;
    o->steps = 12;
    o->batch = 4;
    o->save_every = 5;
    o->log_every = 4;
    o->threads = 1;
    o->lr = 1e-3f;
    o->dropout = 0.1f;
    o->dtype = DTYPE_F32;
    o->quiet = 1;
}

static st_file *open_weights(const char *dir) {
    char p[700];
    assert_true(snprintf(p, sizeof p, "%s/model.safetensors", dir) < (int)sizeof p);
    st_file *f = NULL;
    as_error err = {0};
    if (st_file_open(p, &f, &err)) fail_msg("%s", err.msg);
    return f;
}

static void test_resume_identical(void **state) {
    (void)state;
    make_corpus();
    char cp[512], vp[512], outa[512], outb[512], cka[600], ckb[600];
    snprintf(cp, sizeof cp, "%s/corpus.txt", tmpdir);
    snprintf(outa, sizeof outa, "%s/a", tmpdir);
    snprintf(outb, sizeof outb, "%s/b", tmpdir);
    const char *files[1] = {cp};
    as_error err = {0};
    pretrain_opts o;
    tiny_opts(&o, files, outa, vp);
    if (pretrain_run(&o, &err)) fail_msg("uninterrupted: %s", err.msg);
    tiny_opts(&o, files, outb, vp);
    o.stop_after = 5;
    if (pretrain_run(&o, &err)) fail_msg("interrupted: %s", err.msg);
    tiny_opts(&o, files, outb, vp);
    o.resume = 1;
    if (pretrain_run(&o, &err)) fail_msg("resumed: %s", err.msg);
    snprintf(cka, sizeof cka, "%s/checkpoint", outa);
    snprintf(ckb, sizeof ckb, "%s/checkpoint", outb);
    st_file *fa = open_weights(cka), *fb = open_weights(ckb);
    assert_int_equal(st_file_count(fa), st_file_count(fb));
    int differ = 0;
    for (int i = 0; i < st_file_count(fa); i++) {
        const st_tensor *ta = st_file_tensor(fa, i), *tb = st_file_find(fb, ta->name);
        assert_non_null(tb);
        assert_int_equal(ta->nbytes, tb->nbytes);
        differ += memcmp(ta->data, tb->data, ta->nbytes) != 0;
    }
    printf("resume: %d tensors, %d differ after 5 + 7 steps vs 12 uninterrupted\n", st_file_count(fa), differ);
    assert_int_equal(differ, 0);
    st_file_free(fa);
    st_file_free(fb);

    /* save -> load round trip: the final F32 folder reloads to the same parameters */
    trainable m1 = {0}, m2 = {0};
    train_config cfg;
    if (trainable_load(cka, &m1, &err) || bert_ckpt_config(m1.m, &cfg, &err)) fail_msg("%s", err.msg);
    bert_ckpt_opts so = {.src = m1.m, .dtype = DTYPE_F32};
    if (bert_ckpt_write(outa, &cfg, &so, &err) || trainable_load(outa, &m2, &err)) fail_msg("%s", err.msg);
    assert_int_equal(m1.p.n, m2.p.n);
    assert_memory_equal(m1.p.block, m2.p.block, m1.p.n * sizeof(float));
    assert_true(as_model_heads(m2.m) & HEAD_MLM);
    trainable_free(&m1);
    trainable_free(&m2);
    as_model *am = NULL;
    if (as_model_load(outa, &am, &err)) fail_msg("%s", err.msg);
    assert_true(as_model_has_tokenizer(am));
    as_encoding enc = {0};
    as_encode_opts eo = {0, 1};
    if (as_encode(am, "the cat sat on a mat .", "it was good .", &eo, &enc, &err)) fail_msg("%s", err.msg);
    assert_int_equal(enc.ids[0], VOCAB_TRAIN_CLS);
    for (int i = 0; i < enc.n; i++) assert_int_not_equal(enc.ids[i], VOCAB_TRAIN_UNK);
    as_encoding_free(&enc);
    as_model_free(am);
}

static void test_errors(void **state) {
    (void)state;
    char cp[512], vp[512], out[512];
    snprintf(cp, sizeof cp, "%s/corpus.txt", tmpdir);
    snprintf(out, sizeof out, "%s/err", tmpdir);
    const char *missing[1] = {"/nonexistent/corpus.txt"};
    const char *files[1] = {cp};
    as_error err = {0};
    pretrain_opts o;
    tiny_opts(&o, missing, out, vp);
    assert_int_equal(pretrain_run(&o, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "/nonexistent/corpus.txt"));
    assert_null(strchr(err.msg, '\n'));
    printf("unreadable corpus: %s\n", err.msg);
    tiny_opts(&o, files, out, vp);
    o.width = 18; /* not divisible by 4 heads */
    o.heads = 4;
    assert_int_equal(pretrain_run(&o, &err), AS_ERR_INPUT);
    printf("bad config: %s\n", err.msg);
    tiny_opts(&o, files, out, vp);
    o.vocab = "/nonexistent/vocab.txt";
    assert_int_equal(pretrain_run(&o, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "vocab.txt"));
    tiny_opts(&o, files, out, vp);
    o.resume = 1; /* nothing to resume from */
    assert_int_equal(pretrain_run(&o, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "--resume: no checkpoint"));
    printf("resume without checkpoint: %s\n", err.msg);
    tiny_opts(&o, files, out, vp);
    o.dropout = 1.5f;
    assert_int_equal(pretrain_run(&o, &err), AS_ERR_INPUT);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    assert_int_equal(system(cmd), 0);
}

/* The distillation losses' gradients against central finite differences (double sums
 * of float inputs; |fd - g| <= 2e-3 * max |g| + 1e-5). */
static void test_distill_grads(void **state) {
    (void)state;
    enum { M = 3, V = 7, N = 4, D = 5 };
    float zs[M * V], zt[M * V], d[M * V], hs[N * D], ht[N * D], dh[N * D];
    int32_t mask[N] = {1, 1, 0, 1};
    uint64_t s = 3;
    for (int i = 0; i < M * V; i++) {
        s = s * 6364136223846793005ull + 1;
        zs[i] = (float)((s >> 40) % 1000) / 250.0f - 2.0f;
        zt[i] = (float)((s >> 20) % 1000) / 250.0f - 2.0f;
    }
    for (int i = 0; i < N * D; i++) {
        s = s * 6364136223846793005ull + 1;
        hs[i] = (float)((s >> 40) % 1000) / 500.0f - 1.0f;
        ht[i] = (float)((s >> 20) % 1000) / 500.0f - 1.0f;
    }
    const float T = 2.0f, a = 3.0f, eps = 1e-2f;
    memset(d, 0, sizeof d);
    distill_kl_grad(zs, zt, d, M, V, T, a);
    double worst = 0, gmax = 0;
    for (int i = 0; i < M * V; i++) gmax = fmax(gmax, fabs(d[i]));
    for (int i = 0; i < M * V; i++) {
        float keep = zs[i], scratch[M * V];
        zs[i] = keep + eps;
        double up = distill_kl_grad(zs, zt, scratch, M, V, T, 0.0f);
        zs[i] = keep - eps;
        double dn = distill_kl_grad(zs, zt, scratch, M, V, T, 0.0f);
        zs[i] = keep;
        double fd = a * T * T * (up - dn) / (2 * eps);
        worst = fmax(worst, fabs(fd - d[i]));
    }
    printf("distill KL gradient vs finite differences: max |diff| %.2e (max |g| %.2e)\n", worst, gmax);
    assert_true(worst <= 2e-3 * gmax + 1e-5);
    memset(dh, 0, sizeof dh);
    distill_cos_grad(hs, ht, mask, dh, N, D, a);
    worst = gmax = 0;
    for (int i = 0; i < N * D; i++) gmax = fmax(gmax, fabs(dh[i]));
    for (int i = 0; i < N * D; i++) {
        float keep = hs[i], scratch[N * D];
        hs[i] = keep + eps;
        double up = distill_cos_grad(hs, ht, mask, scratch, N, D, 0.0f);
        hs[i] = keep - eps;
        double dn = distill_cos_grad(hs, ht, mask, scratch, N, D, 0.0f);
        hs[i] = keep;
        double fd = a * (up - dn) / (2 * eps);
        worst = fmax(worst, fabs(fd - dh[i]));
    }
    printf("distill cosine gradient vs finite differences: max |diff| %.2e (max |g| %.2e)\n", worst, gmax);
    assert_true(worst <= 2e-3 * gmax + 1e-5);
    for (int i = 2 * D; i < 3 * D; i++) assert_true(dh[i] == 0.0f); /* masked row */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loss_curve),
        cmocka_unit_test(test_resume_identical),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_distill_grads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
