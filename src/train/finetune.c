/* finetune.c — sequence-classification fine-tuning (BERT, Devlin et al. 2019,
 * sec. 4.1: the first token's final state -> pooler -> classifier, all weights
 * trained) on a labelled SST-2 TSV, with dev accuracy after each epoch and the best
 * epoch kept; classifier evaluation on a TSV; masked-token accuracy of an MLM model
 * on held-out text. Batches are padded to their longest sentence; sentences are
 * bucketed by length within windows of 50 batches (less padding) and the batch order
 * is shuffled per epoch from (seed, epoch).
 * What it does not: regression tasks (STS-B), sentence-pair tasks.
 */
#include "train/trainer.h"
#include "io/tsv.h"

#include <math.h>
#include <string.h>

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

/* Accuracy of m on s (dropout off); a sized for (B, >= longest). */
static as_status accuracy(const train_model *m, train_acts *a, const enc_set *s, int B, float *acc, as_error *err) {
    int32_t *ids = as_malloc_array((size_t)a->B * a->T, sizeof(int32_t));
    int32_t *mask = as_malloc_array((size_t)a->B * a->T, sizeof(int32_t));
    int *idx = as_malloc_array((size_t)B, sizeof(int));
    as_status rc = AS_OK;
    int ok = 0, C = m->cfg.num_labels;
    if (!ids || !mask || !idx) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    float ph = a->p_hidden, pa = a->p_attn;
    a->p_hidden = a->p_attn = 0.0f;
    for (int i0 = 0; i0 < s->n; i0 += B) {
        int b = s->n - i0 < B ? s->n - i0 : B;
        for (int i = 0; i < b; i++) idx[i] = i0 + i;
        int T = fill_batch(s, idx, b, ids, mask, NULL);
        train_batch tb = {.B = b, .T = T, .ids = ids, .mask = mask};
        if ((rc = train_forward(m, a, &tb, err))) break;
        for (int i = 0; i < b; i++) {
            const float *l = a->cls_logits + (size_t)i * C;
            int best = 0;
            for (int c = 1; c < C; c++)
                if (l[c] > l[best]) best = c;
            ok += best == s->label[i0 + i];
        }
    }
    a->p_hidden = ph;
    a->p_attn = pa;
    *acc = s->n ? (float)ok / (float)s->n : 0.0f;
cleanup:
    free(ids);
    free(mask);
    free(idx);
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

as_status finetune_run(const finetune_opts *o, float *best_acc, as_error *err) {
    as_status rc = AS_OK;
    as_model *am = NULL;
    train_model *m = NULL;
    train_acts *a = NULL;
    trainop_adamw opt = {0};
    enc_set tr = {0}, dv = {0};
    int32_t *ids = NULL, *mask = NULL, *y = NULL;
    int *order = NULL, *bperm = NULL, *idx = NULL;
    ord_t *tmp = NULL;
    float *best = NULL;
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
    train_from_as_opts fo = TRAIN_FROM_AS_DEFAULTS;
    fo.with_grads = 1;
    fo.num_labels = 2;
    fo.mlm = 0;
    fo.seed = o->seed;
    if ((rc = train_model_from_as(am, &fo, &m, err))) goto cleanup;
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
    if (!m->labels) {
        m->labels = as_calloc(2, sizeof(char *));
        if (m->labels) {
            m->labels[0] = as_strdup("NEGATIVE");
            m->labels[1] = as_strdup("POSITIVE");
        }
        if (!m->labels || !m->labels[0] || !m->labels[1]) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
    }
    int B = o->batch, Tmax = max_len_of(&tr) > max_len_of(&dv) ? max_len_of(&tr) : max_len_of(&dv);
    if ((rc = train_acts_init(m, B, Tmax, 0, &a, err))) goto cleanup;
    int nb = (tr.n + B - 1) / B;
    ids = as_malloc_array((size_t)B * Tmax, sizeof(int32_t));
    mask = as_malloc_array((size_t)B * Tmax, sizeof(int32_t));
    y = as_malloc_array((size_t)B, sizeof(int32_t));
    order = as_malloc_array((size_t)tr.n, sizeof(int));
    tmp = as_malloc_array((size_t)50 * B, sizeof(ord_t));
    bperm = as_malloc_array((size_t)nb, sizeof(int));
    best = as_malloc_array(m->n_params, sizeof(float));
    if (!ids || !mask || !y || !order || !tmp || !bperm || !best) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if ((rc = trainop_adamw_init(&opt, m->n_params, err))) goto cleanup;
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
            train_batch tb = {.B = b, .T = T, .ids = ids, .mask = mask, .cls_labels = y};
            a->p_hidden = a->p_attn = o->dropout;
            train_rng dr = train_rng_seeded(o->seed ^ 0xF17Eull, (uint64_t)opt.step);
            a->seed = train_rng_next(&dr);
            train_zero_grad(m);
            if ((rc = train_forward(m, a, &tb, err))) goto cleanup;
            train_backward(m, a, &tb, 1);
            trainop_adamw_step(&opt, m);
            if (!isfinite(a->loss)) {
                rc = as_err_set(err, AS_ERR_INPUT, "epoch %d: loss is not finite (lower --lr)", ep + 1);
                goto cleanup;
            }
            lsum += a->loss;
            lcount++;
            for (int i = 0; i < b; i++) correct += (a->cls_logits[2 * i + 1] > a->cls_logits[2 * i]) == (y[i] == 1);
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
        if ((rc = accuracy(m, a, &dv, B, &acc, err))) goto cleanup;
        int improved = acc > *best_acc;
        printf("epoch %d: dev accuracy %.4f%s (%.0fs)\n", ep + 1, (double)acc, improved ? " (best)" : "",
               as_now() - start);
        fflush(stdout);
        if (improved) {
            *best_acc = acc;
            best_epoch = ep;
            memcpy(best, m->params_mem, m->n_params * sizeof(float));
        }
    }
    memcpy(m->params_mem, best, m->n_params * sizeof(float));
    if ((rc = train_model_save(m, o->out, o->dtype, err))) goto cleanup;
    if ((rc = train_copy_tokenizer(o->model, o->out, err))) goto cleanup;
    printf("best: epoch %d, dev accuracy %.4f; saved to %s\n", best_epoch + 1, (double)*best_acc, o->out);
cleanup:
    trainop_adamw_free(&opt);
    free(ids);
    free(mask);
    free(y);
    free(order);
    free(tmp);
    free(bperm);
    free(best);
    free(idx);
    enc_free(&tr);
    enc_free(&dv);
    train_acts_free(a);
    train_model_free(m);
    as_model_free(am);
    return rc;
}

as_status finetune_eval_cls(const char *model_dir, const char *tsv, int threads, int max_len, float *acc, int *n,
                       as_error *err) {
    as_model *am = NULL;
    train_model *m = NULL;
    train_acts *a = NULL;
    enc_set s = {0};
    train_set_threads(threads);
    as_status rc = as_model_load(model_dir, &am, err);
    if (rc) return rc;
    if (!(as_model_heads(am) & HEAD_CLASSIFIER)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: the model has no sequence-classification head", model_dir);
        goto cleanup;
    }
    int maxl = max_len > 0 && max_len < as_model_max_tokens(am) ? max_len : as_model_max_tokens(am);
    if ((rc = encode_tsv(am, tsv, maxl, 0, &s, err))) goto cleanup;
    train_from_as_opts fo = TRAIN_FROM_AS_DEFAULTS;
    fo.mlm = 0;
    fo.borrow = 1; /* forward only: the loaded weights are read in place, not copied */
    if ((rc = train_model_from_as(am, &fo, &m, err))) goto cleanup;
    for (int i = 0; i < s.n; i++)
        if (s.label[i] >= m->cfg.num_labels) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: label %d but the model has %d classes", tsv, s.label[i],
                            m->cfg.num_labels);
            goto cleanup;
        }
    if ((rc = train_acts_init(m, 64, max_len_of(&s), 0, &a, err))) goto cleanup;
    rc = accuracy(m, a, &s, 64, acc, err);
    *n = s.n;
cleanup:
    enc_free(&s);
    train_acts_free(a);
    train_model_free(m);
    as_model_free(am);
    return rc;
}

as_status finetune_eval_mlm(const char *model_dir, const char *const *files, int n_files, int n_batches, int batch,
                       int max_len, uint64_t seed, float *acc, float *loss, as_error *err) {
    as_status rc;
    train_model *m = NULL;
    train_acts *a = NULL;
    data_tok *tk = NULL;
    data_text txt = {0};
    data_corpus cor = {0};
    data_mlm_batch mb = {0};
    char vp[4096];
    train_from_as_opts fo = TRAIN_FROM_AS_DEFAULTS;
    fo.num_labels = 0;
    if ((rc = checkpoint_model_load(model_dir, &fo, &m, err))) return rc;
    if (!m->cfg.mlm) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: the model has no masked-LM head", model_dir);
        goto cleanup;
    }
    if ((rc = as_path_join(vp, sizeof vp, model_dir, "vocab.txt", err))) goto cleanup;
    if ((rc = data_tok_load(vp, &tk, err))) goto cleanup;
    int drop = 0;
    if ((rc = data_read_corpus(files, n_files, NULL, 0, &txt, &drop, err))) goto cleanup;
    if ((rc = data_tokenize(tk, &txt, &cor, err))) goto cleanup;
    int T = max_len < m->cfg.max_pos ? max_len : m->cfg.max_pos;
    if ((rc = train_acts_init(m, batch, T, 0, &a, err))) goto cleanup;
    if ((rc = data_mlm_batch_init(&mb, batch, T, err))) goto cleanup;
    double ok = 0, tot = 0, ls = 0;
    for (int k = 0; k < n_batches; k++) {
        train_rng r = train_rng_seeded(seed, (uint64_t)k);
        data_mlm_batch_make(&mb, &cor, batch, m->cfg.vocab_size, &r);
        train_batch b = {.B = mb.b, .T = mb.t, .ids = mb.ids, .type_ids = mb.type_ids, .mask = mb.mask,
                      .mlm_labels = mb.labels};
        if ((rc = train_forward(m, a, &b, err))) goto cleanup;
        ok += train_mlm_correct(a, m->cfg.vocab_size);
        tot += a->n_mlm;
        ls += (double)a->loss_mlm * a->n_mlm;
    }
    *acc = tot > 0 ? (float)(ok / tot) : 0.0f;
    *loss = tot > 0 ? (float)(ls / tot) : 0.0f;
cleanup:
    data_mlm_batch_free(&mb);
    data_corpus_free(&cor);
    data_text_free(&txt);
    data_tok_free(tk);
    train_acts_free(a);
    train_model_free(m);
    return rc;
}
