/* distill.c — DistilBERT-style knowledge distillation (Sanh et al. 2019,
 * "DistilBERT, a distilled version of BERT", sec. 2 and 3): a student with half the
 * teacher's layers, initialised from every other teacher layer (0, 2, 4, ...) plus the
 * teacher's embeddings and MLM head, trained on the masked-LM batches of pretraining
 * with
 *   L = alpha_kl * T^2 * KL(softmax(z_t / T) || softmax(z_s / T))   (masked rows, mean;
 *         Hinton et al. 2015, sec. 2: the T^2 keeps gradient scales comparable)
 *     + alpha_mlm * CE(z_s, target)                                  (masked rows, mean)
 *     + alpha_cos * mean_r (1 - cos(h_s[r], h_t[r]))                 (final hidden states
 *         of the real tokens, DistilBERT's cosine embedding loss)
 * dL/dz_s of the KL term = alpha_kl * T * (softmax(z_s / T) - softmax(z_t / T)) / M;
 * dL/dh_s of the cosine term = -alpha_cos / N * (h_t / (|h_s||h_t|) - cos * h_s / |h_s|^2).
 * The losses and their gradients are bert_loss.c's, on the one forward; the teacher's
 * weights are read in place from its checkpoint.
 * What it does not: distil a classifier directly (fine-tune the student afterwards),
 * students of another width.
 */
#include "train/trainer.h"
#include "train/bert_loss.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

void distill_opts_default(distill_opts *o) {
    memset(o, 0, sizeof *o);
    o->steps = 1000;
    o->batch = 32;
    o->max_len = 64;
    o->log_every = 20;
    o->lr = 5e-4f;
    o->wd = 0.01f;
    o->dropout = 0.0f;
    o->clip = 1.0f;
    o->temperature = 2.0f;
    o->alpha_kl = 5.0f;
    o->alpha_mlm = 2.0f;
    o->alpha_cos = 1.0f;
    o->seed = 99;
    o->dtype = DTYPE_F16;
}

as_status distill_run(const distill_opts *o, as_error *err) {
    as_status rc = AS_OK;
    as_model *tm = NULL;
    trainable st = {0};
    trainop_adamw opt = {0};
    data_tok *tk = NULL;
    data_text txt = {0};
    data_corpus cor = {0};
    data_mlm_batch mb = {0};
    char vp[4096], init[4200];
    int *layer_of = NULL;
    if (o->steps < 1 || o->batch < 1 || o->max_len < 16 || !(o->lr > 0.0f) || !(o->temperature > 0.0f) ||
        !(o->dropout >= 0.0f && o->dropout < 1.0f))
        return as_err_set(err, AS_ERR_INPUT, "bad distillation options: need steps >= 1, batch >= 1, max-len >= 16, "
                                             "lr > 0, temperature > 0, dropout in [0, 1)");
    train_set_threads(o->threads);
    train_config tc, sc;
    if ((rc = as_model_load(o->teacher, &tm, err))) return rc;
    if ((rc = bert_ckpt_config(tm, &tc, err))) goto cleanup;
    if (!tc.mlm || tc.arch != ARCH_BERT || tc.n_layer < 2) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: the teacher must be a BERT masked-LM model with >= 2 layers", o->teacher);
        goto cleanup;
    }
    /* the student: every other teacher layer (0, 2, 4, ...), the teacher's embeddings and
       masked-LM head, no classifier; written to out/.init and loaded trainable */
    sc = tc;
    sc.n_layer = tc.n_layer / 2;
    sc.num_labels = 0;
    layer_of = as_malloc_array((size_t)sc.n_layer, sizeof(int));
    if (!layer_of) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (int l = 0; l < sc.n_layer; l++) layer_of[l] = 2 * l;
    if (mkdir(o->out, 0755) && errno != EEXIST) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: cannot create: %s", o->out, strerror(errno));
        goto cleanup;
    }
    snprintf(init, sizeof init, "%s/.init", o->out);
    bert_ckpt_opts io = {.src = tm, .layer_of = layer_of, .seed = o->seed, .dtype = DTYPE_F32};
    if (!(rc = bert_ckpt_write(init, &sc, &io, err))) rc = trainable_load(init, &st, err);
    bert_ckpt_remove(init);
    if (rc || (rc = as_model_set_precision(st.m, o->precision, err))) goto cleanup;
    if ((rc = as_path_join(vp, sizeof vp, o->teacher, "vocab.txt", err))) goto cleanup;
    if ((rc = data_tok_load(vp, &tk, err))) goto cleanup;
    int V = tc.vocab_size, drop = 0;
    if (data_tok_vocab(tk) != V) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: %d tokens, the teacher has %d", vp, data_tok_vocab(tk), V);
        goto cleanup;
    }
    if ((rc = data_read_corpus(o->corpus, o->n_corpus, o->exclude, o->n_exclude, &txt, &drop, err))) goto cleanup;
    if ((rc = data_tokenize(tk, &txt, &cor, err))) goto cleanup;
    data_text_free(&txt);
    int T = o->max_len < tc.max_pos ? o->max_len : tc.max_pos;
    if ((rc = data_mlm_batch_init(&mb, o->batch, T, err))) goto cleanup;
    if ((rc = trainop_adamw_init(&opt, st.p.n, err))) goto cleanup;
    opt.lr = o->lr;
    opt.beta1 = 0.9f;
    opt.beta2 = 0.999f;
    opt.eps = 1e-6f;
    opt.wd = o->wd;
    opt.clip = o->clip;
    opt.total = o->steps;
    opt.warmup = o->steps / 20;
    fprintf(stderr, "distill: teacher %d layers -> student %d layers (%zu parameters), %d sentences\n", tc.n_layer,
            sc.n_layer, st.p.n, cor.n_sent);
    double start = as_now(), s_kl = 0, s_ce = 0, s_cos = 0, ok = 0, np = 0;
    int cnt = 0;
    while (opt.step < o->steps) {
        train_rng rng = train_rng_seeded(o->seed, (uint64_t)opt.step);
        data_mlm_batch_make(&mb, &cor, o->batch, V, &rng);
        bert_batch b = {.B = mb.b, .T = mb.t, .ids = mb.ids, .type_ids = mb.type_ids, .mask = mb.mask,
                        .mlm_labels = mb.labels};
        train_rng dr = train_rng_seeded(o->seed ^ 0xD15711ull, (uint64_t)opt.step);
        bert_loss_opts lo = {.dropout = o->dropout, .seed = train_rng_next(&dr), .threads = train_threads(),
                             .teacher = tm, .temperature = o->temperature, .alpha_kl = o->alpha_kl,
                             .alpha_mlm = o->alpha_mlm, .alpha_cos = o->alpha_cos, .keep = &st.gg};
        bert_loss_out out = {0};
        model_grads_zero(&st.g);
        if ((rc = bert_batch_loss(st.m, &b, &lo, &st.g, &out, err))) goto cleanup;
        float gn = trainop_adamw_step(&opt, st.p.block, st.g.block, st.decay);
        if ((rc = model_params_round_bf16(st.m, train_threads(), err))) goto cleanup;
        if (!isfinite(out.loss) || !isfinite(gn)) {
            rc = as_err_set(err, AS_ERR_INPUT, "step %lld: loss is not finite (lower --lr)", (long long)opt.step);
            goto cleanup;
        }
        s_kl += out.loss_kl;
        s_ce += out.loss_mlm;
        s_cos += out.loss_cos;
        ok += out.mlm_correct;
        np += out.n_mlm;
        cnt++;
        if (opt.step % o->log_every == 0 || opt.step == o->steps) {
            double el = as_now() - start;
            fprintf(stderr, "step %lld/%d  kl %.4f  mlm %.4f  1-cos %.4f  mlm_acc %.3f  eta %.0fs\n",
                    (long long)opt.step, o->steps, s_kl / cnt, s_ce / cnt, s_cos / cnt, np ? ok / np : 0.0,
                    el / (double)opt.step * (double)(o->steps - opt.step));
            s_kl = s_ce = s_cos = ok = np = 0;
            cnt = 0;
        }
    }
    bert_ckpt_opts so = {.src = st.m, .dtype = o->dtype};
    if ((rc = bert_ckpt_write(o->out, &sc, &so, err))) goto cleanup;
    if ((rc = train_copy_tokenizer(o->teacher, o->out, err))) goto cleanup;
    fprintf(stderr, "distill: done in %.0fs; student in %s\n", as_now() - start, o->out);
cleanup:
    free(layer_of);
    trainop_adamw_free(&opt);
    data_mlm_batch_free(&mb);
    data_corpus_free(&cor);
    data_text_free(&txt);
    data_tok_free(tk);
    trainable_free(&st);
    as_model_free(tm);
    return rc;
}
