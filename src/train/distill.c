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
 * What it does not: distil a classifier directly (fine-tune the student afterwards),
 * students of another width.
 */
#include "train/trainer.h"
#include "train/bert_loss.h"

#include <math.h>
#include <string.h>

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

/* Student arena from the teacher: all non-layer tensors copied, layer l <- teacher 2l. */
static void init_student(train_model *s, const train_model *t) {
    size_t so = 0, to = 0;
    int Ls = s->cfg.n_layer, Lt = t->cfg.n_layer;
    for (int k = 0; k < TRAIN_N_TENSORS; k++) {
        int per_layer = k >= 5 && k <= 16;
        if (!per_layer) {
            ASSERT(s->sizes[k] == t->sizes[k]);
            memcpy(s->params_mem + so, t->params_mem + to, s->sizes[k] * sizeof(float));
        } else {
            size_t one = s->sizes[k] / (size_t)Ls;
            ASSERT(one * (size_t)Lt == t->sizes[k]);
            for (int l = 0; l < Ls; l++)
                memcpy(s->params_mem + so + (size_t)l * one, t->params_mem + to + (size_t)(2 * l) * one,
                       one * sizeof(float));
        }
        so += s->sizes[k];
        to += t->sizes[k];
    }
}

as_status distill_run(const distill_opts *o, as_error *err) {
    as_status rc = AS_OK;
    train_model *tm = NULL, *sm = NULL;
    train_acts *ta = NULL, *sa = NULL;
    trainop_adamw opt = {0};
    data_tok *tk = NULL;
    data_text txt = {0};
    data_corpus cor = {0};
    data_mlm_batch mb = {0};
    char vp[4096];
    if (o->steps < 1 || o->batch < 1 || o->max_len < 16 || !(o->lr > 0.0f) || !(o->temperature > 0.0f) ||
        !(o->dropout >= 0.0f && o->dropout < 1.0f))
        return as_err_set(err, AS_ERR_INPUT, "bad distillation options: need steps >= 1, batch >= 1, max-len >= 16, "
                                             "lr > 0, temperature > 0, dropout in [0, 1)");
    train_set_threads(o->threads);
    train_from_as_opts fo = TRAIN_FROM_AS_DEFAULTS;
    fo.num_labels = 0;
    if ((rc = checkpoint_model_load(o->teacher, &fo, &tm, err))) return rc;
    if (!tm->cfg.mlm || tm->cfg.arch != ARCH_BERT || tm->cfg.n_layer < 2) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: the teacher must be a BERT masked-LM model with >= 2 layers", o->teacher);
        goto cleanup;
    }
    train_config sc = tm->cfg;
    sc.n_layer = tm->cfg.n_layer / 2;
    if ((rc = train_model_init(&sc, o->seed, 1, &sm, err))) goto cleanup;
    init_student(sm, tm);
    if ((rc = as_path_join(vp, sizeof vp, o->teacher, "vocab.txt", err))) goto cleanup;
    if ((rc = data_tok_load(vp, &tk, err))) goto cleanup;
    int V = tm->cfg.vocab_size, D = tm->cfg.d_model, drop = 0;
    if (data_tok_vocab(tk) != V) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: %d tokens, the teacher has %d", vp, data_tok_vocab(tk), V);
        goto cleanup;
    }
    if ((rc = data_read_corpus(o->corpus, o->n_corpus, o->exclude, o->n_exclude, &txt, &drop, err))) goto cleanup;
    if ((rc = data_tokenize(tk, &txt, &cor, err))) goto cleanup;
    data_text_free(&txt);
    int T = o->max_len < tm->cfg.max_pos ? o->max_len : tm->cfg.max_pos;
    int max_mlm = data_max_predictions(o->batch, T, DATA_MASK_PROB);
    if ((rc = train_acts_init(tm, o->batch, T, max_mlm, &ta, err))) goto cleanup;
    if ((rc = train_acts_init(sm, o->batch, T, max_mlm, &sa, err))) goto cleanup;
    if ((rc = data_mlm_batch_init(&mb, o->batch, T, err))) goto cleanup;
    if ((rc = trainop_adamw_init(&opt, sm->n_params, err))) goto cleanup;
    opt.lr = o->lr;
    opt.beta1 = 0.9f;
    opt.beta2 = 0.999f;
    opt.eps = 1e-6f;
    opt.wd = o->wd;
    opt.clip = o->clip;
    opt.total = o->steps;
    opt.warmup = o->steps / 20;
    fprintf(stderr, "distill: teacher %d layers -> student %d layers (%zu parameters), %d sentences\n",
            tm->cfg.n_layer, sc.n_layer, sm->n_params, cor.n_sent);
    double start = as_now(), s_kl = 0, s_ce = 0, s_cos = 0, ok = 0, np = 0;
    int cnt = 0;
    size_t BTcap = (size_t)o->batch * T;
    while (opt.step < o->steps) {
        train_rng rng = train_rng_seeded(o->seed, (uint64_t)opt.step);
        data_mlm_batch_make(&mb, &cor, o->batch, V, &rng);
        train_batch b = {.B = mb.b, .T = mb.t, .ids = mb.ids, .type_ids = mb.type_ids, .mask = mb.mask,
                      .mlm_labels = mb.labels};
        if ((rc = train_forward(tm, ta, &b, err))) goto cleanup;
        sa->p_hidden = sa->p_attn = o->dropout;
        train_rng dr = train_rng_seeded(o->seed ^ 0xD15711ull, (uint64_t)opt.step);
        sa->seed = train_rng_next(&dr);
        train_zero_grad(sm);
        if ((rc = train_forward(sm, sa, &b, err))) goto cleanup;
        int M = sa->n_mlm;
        for (size_t i = 0; i < (size_t)M * V; i++) sa->d_mlm_logits[i] *= o->alpha_mlm;
        double kl = distill_kl_grad(sa->mlm_logits, ta->mlm_logits, sa->d_mlm_logits, M, V, o->temperature, o->alpha_kl);
        const float *hs = sa->resid + (size_t)sc.n_layer * BTcap * D;
        const float *ht = ta->resid + (size_t)tm->cfg.n_layer * BTcap * D;
        double cs = distill_cos_grad(hs, ht, mb.mask, sa->d_out, mb.b * mb.t, D, o->alpha_cos);
        train_backward(sm, sa, &b, 1);
        float gn = trainop_adamw_step(&opt, sm);
        if (!isfinite(sa->loss) || !isfinite(gn) || !isfinite(kl)) {
            rc = as_err_set(err, AS_ERR_INPUT, "step %lld: loss is not finite (lower --lr)", (long long)opt.step);
            goto cleanup;
        }
        s_kl += kl;
        s_ce += sa->loss_mlm;
        s_cos += cs;
        ok += train_mlm_correct(sa, V);
        np += M;
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
    if ((rc = train_model_save(sm, o->out, o->dtype, err))) goto cleanup;
    if ((rc = train_copy_tokenizer(o->teacher, o->out, err))) goto cleanup;
    fprintf(stderr, "distill: done in %.0fs; student in %s\n", as_now() - start, o->out);
cleanup:
    trainop_adamw_free(&opt);
    data_mlm_batch_free(&mb);
    data_corpus_free(&cor);
    data_text_free(&txt);
    data_tok_free(tk);
    train_acts_free(ta);
    train_acts_free(sa);
    train_model_free(tm);
    train_model_free(sm);
    return rc;
}
