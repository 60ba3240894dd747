/* finetune.c — sequence-classification fine-tuning (BERT, Devlin et al. 2019,
 * sec. 4.1: the first token's final state -> pooler -> classifier, all weights
 * trained) on a labelled SST-2 TSV, with dev accuracy after each epoch and the best
 * epoch kept; classifier evaluation on a TSV; masked-token accuracy of an MLM model
 * on held-out text. The model trains on the one forward (bert_loss.c). Batches are padded to their longest sentence; sentences are
 * bucketed by length within windows of 50 batches (less padding) and the batch order
 * is shuffled per epoch from (seed, epoch).
 * What it does not: regression tasks (STS-B), sentence-pair tasks.
 */
#include "train/trainer.h"
#include "io/tsv.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

void finetune_opts_default(finetune_opts *o) {
    memset(o, 0, sizeof *o);
    o->task = "sst2";
    o->epochs = 3;
    o->batch = 32;
    o->max_len = 128;
    o->lr = 1e-4f;
    o->wd = 0.01f;
    o->dropout = 0.1f;
    o->clip = 1.0f;
    o->warmup_frac = 0.1f;
    o->seed = 42;
    o->dtype = DTYPE_F16;
}

/* Encoded labelled sentences: [CLS] ids [SEP] per row. */
typedef struct {
    int n;
    int32_t **ids; /* (n) owned */
    int *len, *label;
} enc_set;

static void enc_free(enc_set *e) {
    for (int i = 0; e->ids && i < e->n; i++) free(e->ids[i]);
    free(e->ids);
    free(e->len);
    free(e->label);
    memset(e, 0, sizeof *e);
}

static as_status encode_tsv(const as_model *am, const char *path, int max_len, int limit, enc_set *out,
                            as_error *err) {
    tsv_corpus tc = {0};
    memset(out, 0, sizeof *out);
    as_status rc = tsv_read_sst2(path, limit, &tc, err);
    if (rc) {
        tsv_corpus_free(&tc);
        return rc;
    }
    out->ids = as_calloc((size_t)tc.n + 1, sizeof *out->ids);
    out->len = as_calloc((size_t)tc.n + 1, sizeof *out->len);
    out->label = as_calloc((size_t)tc.n + 1, sizeof *out->label);
    if (!out->ids || !out->len || !out->label) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    as_set_quiet(1);
    for (int i = 0; i < tc.n; i++) {
        as_encoding e = {0};
        as_encode_opts eo = {max_len, 1};
        if ((rc = as_encode(am, tc.rows[i].text, NULL, &eo, &e, err))) {
            as_err_prefix(err, "%s:%d", path, tc.rows[i].line);
            as_encoding_free(&e);
            break;
        }
        out->ids[i] = e.ids;
        e.ids = NULL;
        out->len[i] = e.n;
        out->label[i] = tc.rows[i].label;
        out->n = i + 1;
        as_encoding_free(&e);
    }
    as_set_quiet(0);
cleanup:
    tsv_corpus_free(&tc);
    if (rc) enc_free(out);
    return rc;
}

/* Fills a padded batch from rows idx[0..b). Returns T. */
static int fill_batch(const enc_set *s, const int *idx, int b, int32_t *ids, int32_t *mask, int32_t *y) {
    int T = 1;
    for (int i = 0; i < b; i++) T = s->len[idx[i]] > T ? s->len[idx[i]] : T;
    for (int i = 0; i < b; i++) {
        int r = idx[i], n = s->len[r];
        for (int t = 0; t < T; t++) {
            ids[(size_t)i * T + t] = t < n ? s->ids[r][t] : 0;
            mask[(size_t)i * T + t] = t < n;
        }
        if (y) y[i] = s->label[r];
    }
    return T;
}

static int max_len_of(const enc_set *s) {
    int T = 1;
    for (int i = 0; i < s->n; i++) T = s->len[i] > T ? s->len[i] : T;
    return T;
}

/* Accuracy of m on s (dropout off), in batches of B. */
static as_status accuracy(const as_model *m, const enc_set *s, int B, float *acc, as_error *err) {
    int T = max_len_of(s), C = as_model_config(m)->num_labels;
    int32_t *ids = as_malloc_array((size_t)B * T, sizeof(int32_t));
    int32_t *mask = as_malloc_array((size_t)B * T, sizeof(int32_t));
    int *idx = as_malloc_array((size_t)B, sizeof(int));
    float *logits = as_malloc_array((size_t)B * (C > 0 ? C : 1), sizeof(float));
    as_status rc = AS_OK;
    int ok = 0;
    if (!ids || !mask || !idx || !logits) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    bert_loss_opts lo = {.threads = train_threads()};
    for (int i0 = 0; i0 < s->n; i0 += B) {
        int b = s->n - i0 < B ? s->n - i0 : B;
        for (int i = 0; i < b; i++) idx[i] = i0 + i;
        int Tb = fill_batch(s, idx, b, ids, mask, NULL);
        bert_batch tb = {.B = b, .T = Tb, .ids = ids, .mask = mask};
        bert_loss_out out = {.cls_logits = logits};
        if ((rc = bert_batch_loss(m, &tb, &lo, NULL, &out, err))) break;
        for (int i = 0; i < b; i++) {
            const float *l = logits + (size_t)i * C;
            int best = 0;
            for (int c = 1; c < C; c++)
                if (l[c] > l[best]) best = c;
            ok += best == s->label[i0 + i];
        }
    }
    *acc = s->n ? (float)ok / (float)s->n : 0.0f;
cleanup:
    free(ids);
    free(mask);
    free(idx);
    free(logits);
    return rc;
}

typedef struct {
    int idx, len;
    uint64_t key;
} ord_t;

static int cmp_ord(const void *a, const void *b) {
    const ord_t *x = a, *y = b;
    if (x->len != y->len) return x->len - y->len;
    return (x->key > y->key) - (x->key < y->key);
}

/* The epoch's batches: shuffled, length-bucketed in windows of 50 batches, batch order
 * shuffled. order (n) receives row indices; batch k = order[k * B ...]. */
static void epoch_order(const enc_set *s, int B, uint64_t seed, int epoch, int *order, ord_t *tmp, int *bperm) {
    train_rng r = train_rng_seeded(seed, 0x5eed0000u + (uint64_t)epoch);
    int n = s->n;
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)train_rng_below(&r, (uint32_t)(i + 1));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    int W = 50 * B;
    for (int w0 = 0; w0 < n; w0 += W) {
        int m = n - w0 < W ? n - w0 : W;
        for (int i = 0; i < m; i++) {
            tmp[i].idx = order[w0 + i];
            tmp[i].len = s->len[order[w0 + i]];
            tmp[i].key = train_rng_next(&r);
        }
        qsort(tmp, (size_t)m, sizeof *tmp, cmp_ord);
        for (int i = 0; i < m; i++) order[w0 + i] = tmp[i].idx;
    }
    int nb = (n + B - 1) / B;
    for (int i = 0; i < nb; i++) bperm[i] = i;
    for (int i = nb - 1; i > 0; i--) {
        int j = (int)train_rng_below(&r, (uint32_t)(i + 1));
        int t = bperm[i];
        bperm[i] = bperm[j];
        bperm[j] = t;
    }
}

/* The model to fine-tune: o->model with a 2-class classifier (its own when it has one,
 * else a fresh one) and no masked-LM head, written to out/.init and loaded trainable. */
static as_status finetune_model(const finetune_opts *o, const as_model *am, train_config *cfg, trainable *t,
                                as_error *err) {
    static char neg[] = "NEGATIVE", pos[] = "POSITIVE";
    static char *const sst2[2] = {neg, pos};
    as_status rc = bert_ckpt_config(am, cfg, err);
    if (rc) return rc;
    const as_config *ac = as_model_config(am);
    cfg->num_labels = 2;
    cfg->mlm = 0;
    char init[4200];
    snprintf(init, sizeof init, "%s/.init", o->out);
    if (mkdir(o->out, 0755) && errno != EEXIST)
        return as_err_set(err, AS_ERR_INPUT, "%s: cannot create: %s", o->out, strerror(errno));
    bert_ckpt_opts co = {.src = am, .seed = o->seed, .dtype = DTYPE_F32,
                         .labels = ac->id2label && ac->num_labels == 2 ? NULL : sst2};
    if (!(rc = bert_ckpt_write(init, cfg, &co, err))) rc = trainable_load(init, t, err);
    bert_ckpt_remove(init);
    if (!rc) rc = as_model_set_precision(t->m, o->precision, err);
    return rc;
}

as_status finetune_run(const finetune_opts *o, float *best_acc, as_error *err) {
    as_status rc = AS_OK;
    as_model *am = NULL;
    trainable t = {0};
    trainop_adamw opt = {0};
    enc_set tr = {0}, dv = {0};
    int32_t *ids = NULL, *mask = NULL, *y = NULL;
    int *order = NULL, *bperm = NULL;
    ord_t *tmp = NULL;
    float *best = NULL, *logits = NULL;
    train_config cfg;
    *best_acc = -1.0f;
    if (strcmp(o->task, "sst2")) return as_err_set(err, AS_ERR_INPUT, "unknown task '%s' (supported: sst2)", o->task);
    if (o->epochs < 1 || o->batch < 1 || !(o->lr > 0.0f) || !(o->dropout >= 0.0f && o->dropout < 1.0f))
        return as_err_set(err, AS_ERR_INPUT, "bad options: need epochs >= 1, batch >= 1, lr > 0, dropout in [0, 1)");
    train_set_threads(o->threads);
    if ((rc = as_model_load(o->model, &am, err))) return rc;
    if (!as_model_has_tokenizer(am)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: no tokenizer files", o->model);
        goto cleanup;
    }
    /* the model first, so that an untrainable one fails before the data is read */
    if ((rc = finetune_model(o, am, &cfg, &t, err))) goto cleanup;
    int maxl = o->max_len > 0 && o->max_len < as_model_max_tokens(am) ? o->max_len : as_model_max_tokens(am);
    double t0 = as_now();
    if ((rc = encode_tsv(am, o->train, maxl, o->max_train, &tr, err))) goto cleanup;
    if ((rc = encode_tsv(am, o->dev, maxl, 0, &dv, err))) goto cleanup;
    for (int i = 0; i < tr.n; i++)
        if (tr.label[i] > 1) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: label %d: sst2 labels are 0 or 1", o->train, tr.label[i]);
            goto cleanup;
        }
    fprintf(stderr, "finetune: %d train / %d dev sentences encoded in %.1fs\n", tr.n, dv.n, as_now() - t0);
    int B = o->batch, Tmax = max_len_of(&tr);
    int nb = (tr.n + B - 1) / B;
    ids = as_malloc_array((size_t)B * Tmax, sizeof(int32_t));
    mask = as_malloc_array((size_t)B * Tmax, sizeof(int32_t));
    y = as_malloc_array((size_t)B, sizeof(int32_t));
    logits = as_malloc_array((size_t)B * 2, sizeof(float));
    order = as_malloc_array((size_t)tr.n, sizeof(int));
    tmp = as_malloc_array((size_t)50 * B, sizeof(ord_t));
    bperm = as_malloc_array((size_t)nb, sizeof(int));
    best = as_malloc_array(t.p.n, sizeof(float));
    if (!ids || !mask || !y || !logits || !order || !tmp || !bperm || !best) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if ((rc = trainop_adamw_init(&opt, t.p.n, err))) goto cleanup;
    opt.lr = o->lr;
    opt.beta1 = 0.9f;
    opt.beta2 = 0.999f;
    opt.eps = 1e-6f;
    opt.wd = o->wd;
    opt.clip = o->clip;
    opt.total = nb * o->epochs;
    opt.warmup = (int)(o->warmup_frac * (float)opt.total);
    int best_epoch = -1;
    double start = as_now();
    for (int ep = 0; ep < o->epochs; ep++) {
        epoch_order(&tr, B, o->seed, ep, order, tmp, bperm);
        double lsum = 0.0, tick = as_now();
        int lcount = 0, correct = 0, seen = 0;
        for (int k = 0; k < nb; k++) {
            int s0 = bperm[k] * B, b = tr.n - s0 < B ? tr.n - s0 : B;
            int T = fill_batch(&tr, order + s0, b, ids, mask, y);
            bert_batch tb = {.B = b, .T = T, .ids = ids, .mask = mask, .cls_labels = y};
            train_rng dr = train_rng_seeded(o->seed ^ 0xF17Eull, (uint64_t)opt.step);
            bert_loss_opts lo = {.dropout = o->dropout, .seed = train_rng_next(&dr), .threads = train_threads(),
                                 .keep = &t.gg};
            bert_loss_out out = {.cls_logits = logits};
            model_grads_zero(&t.g);
            if ((rc = bert_batch_loss(t.m, &tb, &lo, &t.g, &out, err))) goto cleanup;
            trainop_adamw_step(&opt, t.p.block, t.g.block, t.decay);
            if ((rc = model_params_round_bf16(t.m, train_threads(), err))) goto cleanup;
            if (!isfinite(out.loss)) {
                rc = as_err_set(err, AS_ERR_INPUT, "epoch %d: loss is not finite (lower --lr)", ep + 1);
                goto cleanup;
            }
            lsum += out.loss;
            lcount++;
            for (int i = 0; i < b; i++) correct += (logits[2 * i + 1] > logits[2 * i]) == (y[i] == 1);
            seen += b;
            if ((k + 1) % 200 == 0 || k + 1 == nb) {
                double now = as_now();
                fprintf(stderr, "epoch %d  step %d/%d  loss %.4f  train_acc %.3f  %.1f steps/s\n", ep + 1, k + 1, nb,
                        lsum / lcount, (double)correct / seen, 200.0 / (now - tick + 1e-9));
                tick = now;
                lsum = 0;
                lcount = correct = seen = 0;
            }
        }
        float acc = 0.0f;
        if ((rc = accuracy(t.m, &dv, B, &acc, err))) goto cleanup;
        int improved = acc > *best_acc;
        printf("epoch %d: dev accuracy %.4f%s (%.0fs)\n", ep + 1, (double)acc, improved ? " (best)" : "",
               as_now() - start);
        fflush(stdout);
        if (improved) {
            *best_acc = acc;
            best_epoch = ep;
            memcpy(best, t.p.block, t.p.n * sizeof(float));
        }
    }
    memcpy(t.p.block, best, t.p.n * sizeof(float));
    bert_ckpt_opts so = {.src = t.m, .dtype = o->dtype};
    if ((rc = bert_ckpt_write(o->out, &cfg, &so, err))) goto cleanup;
    if ((rc = train_copy_tokenizer(o->model, o->out, err))) goto cleanup;
    printf("best: epoch %d, dev accuracy %.4f; saved to %s\n", best_epoch + 1, (double)*best_acc, o->out);
cleanup:
    trainop_adamw_free(&opt);
    free(ids);
    free(mask);
    free(y);
    free(logits);
    free(order);
    free(tmp);
    free(bperm);
    free(best);
    enc_free(&tr);
    enc_free(&dv);
    trainable_free(&t);
    as_model_free(am);
    return rc;
}

as_status finetune_eval_cls(const char *model_dir, const char *tsv, int threads, int max_len, float *acc, int *n,
                       as_error *err) {
    as_model *am = NULL;
    enc_set s = {0};
    train_set_threads(threads);
    as_status rc = as_model_load(model_dir, &am, err);
    if (rc) return rc;
    if (!(as_model_heads(am) & HEAD_CLASSIFIER)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: the model has no sequence-classification head", model_dir);
        goto cleanup;
    }
    train_config cfg;
    if ((rc = bert_ckpt_config(am, &cfg, err))) goto cleanup;
    int maxl = max_len > 0 && max_len < as_model_max_tokens(am) ? max_len : as_model_max_tokens(am);
    if ((rc = encode_tsv(am, tsv, maxl, 0, &s, err))) goto cleanup;
    for (int i = 0; i < s.n; i++)
        if (s.label[i] >= cfg.num_labels) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: label %d but the model has %d classes", tsv, s.label[i],
                            cfg.num_labels);
            goto cleanup;
        }
    rc = accuracy(am, &s, 64, acc, err); /* the loaded weights read in place */
    *n = s.n;
cleanup:
    enc_free(&s);
    as_model_free(am);
    return rc;
}

as_status finetune_eval_mlm(const char *model_dir, const char *const *files, int n_files, int n_batches, int batch,
                       int max_len, uint64_t seed, float *acc, float *loss, as_error *err) {
    as_status rc;
    as_model *m = NULL;
    data_tok *tk = NULL;
    data_text txt = {0};
    data_corpus cor = {0};
    data_mlm_batch mb = {0};
    char vp[4096];
    train_config cfg;
    if ((rc = as_model_load(model_dir, &m, err))) return rc;
    if ((rc = bert_ckpt_config(m, &cfg, err))) goto cleanup;
    if (!cfg.mlm) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: the model has no masked-LM head", model_dir);
        goto cleanup;
    }
    if ((rc = as_path_join(vp, sizeof vp, model_dir, "vocab.txt", err))) goto cleanup;
    if ((rc = data_tok_load(vp, &tk, err))) goto cleanup;
    int drop = 0;
    if ((rc = data_read_corpus(files, n_files, NULL, 0, &txt, &drop, err))) goto cleanup;
    if ((rc = data_tokenize(tk, &txt, &cor, err))) goto cleanup;
    int T = max_len < cfg.max_pos ? max_len : cfg.max_pos;
    if ((rc = data_mlm_batch_init(&mb, batch, T, err))) goto cleanup;
    double ok = 0, tot = 0, ls = 0;
    bert_loss_opts lo = {.threads = train_threads()};
    for (int k = 0; k < n_batches; k++) {
        train_rng r = train_rng_seeded(seed, (uint64_t)k);
        data_mlm_batch_make(&mb, &cor, batch, cfg.vocab_size, &r);
        bert_batch b = {.B = mb.b, .T = mb.t, .ids = mb.ids, .type_ids = mb.type_ids, .mask = mb.mask,
                        .mlm_labels = mb.labels};
        bert_loss_out out = {0};
        if ((rc = bert_batch_loss(m, &b, &lo, NULL, &out, err))) goto cleanup;
        ok += out.mlm_correct;
        tot += out.n_mlm;
        ls += out.loss_mlm * out.n_mlm;
    }
    *acc = tot > 0 ? (float)(ok / tot) : 0.0f;
    *loss = tot > 0 ? (float)(ls / tot) : 0.0f;
cleanup:
    data_mlm_batch_free(&mb);
    data_corpus_free(&cor);
    data_text_free(&txt);
    data_tok_free(tk);
    as_model_free(m);
    return rc;
}
