/* pretrain.c — the masked-LM pretraining loop (BERT, Devlin et al. 2019, sec. 3.1,
 * without the next-sentence loss, as RoBERTa found it unnecessary; the pairs still
 * teach position and segment embeddings): batches from data.c, the loss and its
 * gradient on the one forward (bert_loss.c), AdamW from optim.c, checkpoints from
 * checkpoint.c and bert_ckpt.c; a progress line on
 * stderr and a TSV log of the curve. Step s draws its batch, masks and dropout from
 * (seed, s) only, so a resumed run equals an uninterrupted one.
 * What it does not: distributed training, gradient accumulation.
 */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

void pretrain_opts_default(pretrain_opts *o) {
    memset(o, 0, sizeof *o);
    o->layers = 4;
    o->width = 256;
    o->heads = 4;
    o->ff = 1024;
    o->max_len = 128;
    o->steps = 1000;
    o->batch = 32;
    o->warmup = -1;
    o->save_every = 500;
    o->log_every = 10;
    o->threads = 0;
    o->lr = 5e-4f;
    o->wd = 0.01f;
    o->dropout = 0.1f;
    o->clip = 1.0f;
    o->seed = 1234;
    o->dtype = DTYPE_F16;
}

static as_status make_dir(const char *d, as_error *err) {
    if (mkdir(d, 0755) && errno != EEXIST) return as_err_set(err, AS_ERR_INPUT, "%s: cannot create: %s", d, strerror(errno));
    return AS_OK;
}

static as_status save_checkpoint(const pretrain_opts *o, const char *ck, const train_config *cfg, const as_model *m,
                                 const trainop_adamw *opt, as_error *err) {
    as_status rc;
    bert_ckpt_opts so = {.src = m, .dtype = DTYPE_F32};
    if ((rc = bert_ckpt_write(ck, cfg, &so, err))) return rc;
    if ((rc = vocab_train_write_tokenizer(o->vocab, ck, o->max_len, err))) return rc;
    return checkpoint_state_save(ck, opt, o->seed, err);
}

static void fmt_eta(double s, char *b, size_t n) {
    if (s < 0 || s > 1e7) s = 0;
    int h = (int)(s / 3600), m = (int)(fmod(s, 3600) / 60), sec = (int)fmod(s, 60);
    if (h) snprintf(b, n, "%dh%02dm", h, m);
    else snprintf(b, n, "%dm%02ds", m, sec);
}

static uint64_t mix(uint64_t a, uint64_t b) {
    train_rng r = train_rng_seeded(a, b);
    return train_rng_next(&r);
}

as_status pretrain_run(const pretrain_opts *o, as_error *err) {
    as_status rc = AS_OK;
    data_tok *tk = NULL;
    data_text txt = {0};
    data_corpus cor = {0};
    trainable t = {0};
    trainop_adamw opt = {0};
    data_mlm_batch mb = {0};
    FILE *log = NULL;
    char ck[4096], logp[4096];
    if (o->steps < 1 || o->batch < 1 || o->max_len < 16 || !(o->lr > 0.0f) || o->save_every < 1 ||
        !(o->dropout >= 0.0f && o->dropout < 1.0f) || o->log_every < 1)
        return as_err_set(err, AS_ERR_INPUT,
                          "bad training options: need steps >= 1, batch >= 1, max-len >= 16, lr > 0, "
                          "dropout in [0, 1), save-every >= 1");
    if (o->max_len > 4000) return as_err_set(err, AS_ERR_INPUT, "max-len %d is above 4000", o->max_len);
    train_set_threads(o->threads);
    if ((rc = make_dir(o->out, err))) return rc;
    if ((rc = as_path_join(ck, sizeof ck, o->out, "checkpoint", err))) return rc;
    if (o->resume) {
        char sp[4200];
        snprintf(sp, sizeof sp, "%s/trainer_state.bin", ck);
        if (!as_file_exists(sp))
            return as_err_set(err, AS_ERR_INPUT, "--resume: no checkpoint to resume from (%s is missing)", sp);
    }
    if ((rc = data_tok_load(o->vocab, &tk, err))) goto cleanup;
    int V = data_tok_vocab(tk);
    train_config cfg = {ARCH_BERT, o->layers, o->heads, o->width, o->ff, V, o->max_len, 2, 0, 1, 1e-12f,
                     ACT_GELU,  ACT_GELU,  TRAIN_CLS_TANH, VOCAB_TRAIN_PAD, 0, 0.0f};
    cfg.init_range = o->init_range;
    if ((rc = train_config_check(&cfg, err))) goto cleanup;
    int dropped = 0;
    double t0 = as_now();
    if ((rc = data_read_corpus(o->corpus, o->n_corpus, o->exclude, o->n_exclude, &txt, &dropped, err))) goto cleanup;
    if ((rc = data_tokenize(tk, &txt, &cor, err))) goto cleanup;
    if (!o->quiet)
        fprintf(stderr, "pretrain: %d sentences, %zu tokens (%d held-out sentences dropped) in %.1fs\n", cor.n_sent,
            cor.n_tok, dropped, as_now() - t0);
    data_text_free(&txt);
    if (!o->resume) { /* Hugging Face's initialisation from the seed, written as the first checkpoint */
        bert_ckpt_opts io = {.seed = o->seed, .sinusoidal = o->pos_sinusoidal, .dtype = DTYPE_F32};
        if ((rc = bert_ckpt_write(ck, &cfg, &io, err))) goto cleanup;
    }
    if ((rc = trainable_load(ck, &t, err))) {
        if (o->resume) as_err_prefix(err, "--resume");
        goto cleanup;
    }
    if ((rc = bert_ckpt_config(t.m, &cfg, err)) || (rc = as_model_set_precision(t.m, o->precision, err))) goto cleanup;
    cfg.init_range = o->init_range; /* as config.json states it */
    if (!cfg.mlm || cfg.num_labels || cfg.vocab_size != V) {
        rc = as_err_set(err, AS_ERR_INPUT, "--resume: %s has %d tokens%s, the vocabulary %d", ck, cfg.vocab_size,
                        cfg.mlm && !cfg.num_labels ? "" : " and not only a masked-LM head", V);
        goto cleanup;
    }
    int T = o->seq_len > 0 ? o->seq_len : o->max_len;
    if (T > cfg.max_pos) T = cfg.max_pos;
    float mask_prob = o->mask_prob > 0 ? o->mask_prob : DATA_MASK_PROB;
    if ((rc = data_mlm_batch_init(&mb, o->batch, T, err))) goto cleanup;
    mb.mask_prob = mask_prob;
    if ((rc = trainop_adamw_init(&opt, t.p.n, err))) goto cleanup;
    opt.lr = o->lr;
    opt.beta1 = 0.9f;
    opt.beta2 = 0.999f;
    opt.eps = 1e-6f;
    opt.wd = o->wd;
    opt.clip = o->clip;
    opt.total = o->steps;
    opt.warmup = o->warmup >= 0 ? o->warmup : o->steps / 20;
    if (o->resume) {
        uint64_t seed = 0;
        if ((rc = checkpoint_state_load(ck, &opt, &seed, err))) goto cleanup;
        if (seed != o->seed) {
            rc = as_err_set(err, AS_ERR_INPUT, "--resume: the checkpoint was trained with --seed %llu, not %llu",
                            (unsigned long long)seed, (unsigned long long)o->seed);
            goto cleanup;
        }
        if (!o->quiet) fprintf(stderr, "pretrain: resuming %s at step %lld\n", ck, (long long)opt.step);
    }
    if (o->log_path) snprintf(logp, sizeof logp, "%s", o->log_path);
    else if ((rc = as_path_join(logp, sizeof logp, o->out, "train_log.tsv", err))) goto cleanup;
    log = fopen(logp, o->resume ? "a" : "w");
    if (!log) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: cannot write: %s", logp, strerror(errno));
        goto cleanup;
    }
    if (!o->resume) fprintf(log, "step\tloss\tmlm_acc\tlr\tgrad_norm\ttokens_per_s\telapsed_s\n");
    if (!o->quiet)
        fprintf(stderr, "pretrain: L=%d D=%d H=%d F=%d V=%d T=%d, %zu parameters, batch %d, %d steps\n", cfg.n_layer,
            cfg.d_model, cfg.n_head, cfg.d_ff, V, T, t.p.n, o->batch, o->steps);
    double start = as_now(), tick = start, loss_acc = 0.0;
    double ntok_tick = 0, ncorrect = 0, npred = 0;
    int nacc = 0;
    int64_t first = opt.step;
    while (opt.step < o->steps) {
        int64_t step = opt.step;
        train_rng rng = train_rng_seeded(o->seed, (uint64_t)step);
        data_mlm_batch_make(&mb, &cor, o->batch, V, &rng);
        bert_batch b = {.B = mb.b, .T = mb.t, .ids = mb.ids, .type_ids = mb.type_ids, .mask = mb.mask,
                        .mlm_labels = mb.labels};
        bert_loss_opts lo = {.dropout = o->dropout, .seed = mix(o->seed ^ 0xD0D0D0D0ull, (uint64_t)step),
                             .threads = train_threads(), .keep = &t.gg};
        bert_loss_out out = {0};
        model_grads_zero(&t.g);
        if ((rc = bert_batch_loss(t.m, &b, &lo, &t.g, &out, err))) goto cleanup;
        float lr = trainop_adamw_lr(&opt, step);
        float gn = trainop_adamw_step(&opt, t.p.block, t.g.block, t.decay);
        if ((rc = model_params_round_bf16(t.m, train_threads(), err))) goto cleanup;
        if (!isfinite(out.loss) || !isfinite(gn)) {
            rc = as_err_set(err, AS_ERR_INPUT, "step %lld: loss is not finite (lower --lr)", (long long)step);
            goto cleanup;
        }
        loss_acc += out.loss;
        nacc++;
        ncorrect += out.mlm_correct;
        npred += out.n_mlm;
        for (size_t i = 0; i < (size_t)mb.b * mb.t; i++) ntok_tick += mb.mask[i];
        if (opt.step % o->log_every == 0 || opt.step == o->steps) {
            double now = as_now(), tps = ntok_tick / (now - tick + 1e-9);
            double per_step = (now - start) / (double)(opt.step - first);
            char eta[32];
            fmt_eta(per_step * (double)(o->steps - opt.step), eta, sizeof eta);
            float acc = npred > 0 ? (float)(ncorrect / npred) : 0.0f;
            if (!o->quiet)
                fprintf(stderr, "step %lld/%d  loss %.4f  mlm_acc %.3f  lr %.2e  |g| %.2f  %.0f tok/s  eta %s\n",
                    (long long)opt.step, o->steps, loss_acc / nacc, (double)acc, (double)lr, (double)gn, tps, eta);
            fprintf(log, "%lld\t%.5f\t%.4f\t%.3e\t%.4f\t%.0f\t%.1f\n", (long long)opt.step, loss_acc / nacc,
                    (double)acc, (double)lr, (double)gn, tps, now - start);
            fflush(log);
            loss_acc = 0.0;
            nacc = 0;
            ncorrect = npred = 0;
            ntok_tick = 0;
            tick = now;
        }
        if (opt.step % o->save_every == 0 && opt.step < o->steps)
            if ((rc = save_checkpoint(o, ck, &cfg, t.m, &opt, err))) goto cleanup;
        if (o->stop_after > 0 && opt.step == o->stop_after) goto cleanup;
    }
    if ((rc = save_checkpoint(o, ck, &cfg, t.m, &opt, err))) goto cleanup;
    bert_ckpt_opts so = {.src = t.m, .dtype = o->dtype};
    if ((rc = bert_ckpt_write(o->out, &cfg, &so, err))) goto cleanup;
    if ((rc = vocab_train_write_tokenizer(o->vocab, o->out, cfg.max_pos, err))) goto cleanup;
    if (!o->quiet) fprintf(stderr, "pretrain: done in %.1fs; model in %s\n", as_now() - start, o->out);
cleanup:
    if (log) fclose(log);
    trainop_adamw_free(&opt);
    data_mlm_batch_free(&mb);
    trainable_free(&t);
    data_corpus_free(&cor);
    data_text_free(&txt);
    data_tok_free(tk);
    return rc;
}
