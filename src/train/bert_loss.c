/* bert_loss.c — the BERT family's training objectives on the one forward (see
 * bert_loss.h). Per sequence of the batch: one forward with a tape (training-mode
 * dropout drawn from (seed, b)); the classifier's logits come from the forward's head;
 * the masked-LM head runs only on the predicted rows of the final hidden states
 * (model_vocab_rows), as Hugging Face's loss only reads those rows; the distillation
 * terms compare with the teacher's forward on the same tokens; then one backward
 * (model_backward_top) from the classifier's logit gradient and the gradient at the
 * final hidden states. Every mean is over the whole batch (its B sequences, its M
 * predicted rows, its real tokens), so the batch's gradient is the sum of its sequences'.
 *
 *   loss_cls = mean_b CE(z_b, y_b)                         (Devlin et al. 2019, sec. 4.1)
 *   loss_mlm = mean over predicted rows CE(z_r, target_r)  (sec. 3.1)
 *   loss_kl  = mean_r KL(softmax(zt_r / T) || softmax(zs_r / T)), weighted T^2
 *   loss_cos = mean over real tokens (1 - cos(h_s, h_t))   (Sanh et al. 2019, sec. 3)
 * dL/dz_s of the KL term = alpha_kl * T * (softmax(z_s / T) - softmax(z_t / T)) / M;
 * dL/dh_s of the cosine term = -alpha_cos / N * (h_t / (|h_s||h_t|) - cos * h_s / |h_s|^2).
 */
#include "train/bert_loss.h"
#include "train/train_ops.h"
#include "train/trainer.h"

#include <math.h>
#include <string.h>

double distill_kl_grad(const float *zs_all, const float *zt_all, float *d_all, int M, int V, float T, float alpha) {
    double kl = 0.0;
    for (int i = 0; i < M; i++) {
        const float *zs = zs_all + (size_t)i * V, *zt = zt_all + (size_t)i * V;
        float *d = d_all + (size_t)i * V;
        float ms = zs[0], mt = zt[0];
        for (int v = 1; v < V; v++) {
            ms = zs[v] > ms ? zs[v] : ms;
            mt = zt[v] > mt ? zt[v] : mt;
        }
        double ss = 0.0, st = 0.0;
        for (int v = 0; v < V; v++) {
            ss += exp((double)(zs[v] - ms) / T);
            st += exp((double)(zt[v] - mt) / T);
        }
        double lss = log(ss), lst = log(st);
        for (int v = 0; v < V; v++) {
            double lps = (zs[v] - ms) / T - lss, lpt = (zt[v] - mt) / T - lst;
            double pt = exp(lpt), ps = exp(lps);
            kl += pt * (lpt - lps);
            d[v] += (float)(alpha * T * (ps - pt) / M);
        }
    }
    return M ? kl / M : 0.0;
}

double distill_cos_grad(const float *hs, const float *ht, const int32_t *mask, float *d_out, int N, int D, float alpha) {
    int n = 0;
    for (int r = 0; r < N; r++) n += mask[r] != 0;
    if (!n) return 0.0;
    double tot = 0.0;
    for (int r = 0; r < N; r++) {
        if (!mask[r]) continue;
        const float *s = hs + (size_t)r * D, *t = ht + (size_t)r * D;
        double st = 0, ss = 0, tt = 0;
        for (int i = 0; i < D; i++) {
            st += (double)s[i] * t[i];
            ss += (double)s[i] * s[i];
            tt += (double)t[i] * t[i];
        }
        double ns = sqrt(ss) + 1e-12, nt = sqrt(tt) + 1e-12, c = st / (ns * nt);
        tot += 1.0 - c;
        float *d = d_out + (size_t)r * D;
        for (int i = 0; i < D; i++) d[i] += (float)(-alpha / n * (t[i] / (ns * nt) - c * s[i] / (ns * ns)));
    }
    return tot / n;
}

/* Checks the labels and sizes of b against m; counts the predicted rows (*M) and the
 * real tokens (*N) of the batch. */
static as_status batch_check(const as_model *m, const bert_batch *b, const bert_loss_opts *o, int *M, int *N,
                             as_error *err) {
    const as_config *c = as_model_config(m);
    unsigned heads = as_model_heads(m);
    if (b->B < 1 || b->T < 1) return as_err_set(err, AS_ERR_INPUT, "empty batch");
    if (m->pre_ln || c->causal)
        return as_err_set(err, AS_ERR_INPUT, "%s: these losses train the BERT family's encoders", m->dir);
    if (b->cls_labels && !(heads & HEAD_CLASSIFIER))
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no sequence-classification head", m->dir);
    if ((b->mlm_labels || o->teacher) && !(heads & HEAD_MLM))
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no masked-LM head", m->dir);
    if (o->teacher && (as_model_config(o->teacher)->d_model != c->d_model ||
                       as_model_config(o->teacher)->vocab_size != c->vocab_size || !b->mlm_labels ||
                       !(as_model_heads(o->teacher) & HEAD_MLM)))
        return as_err_set(err, AS_ERR_INPUT, "the teacher needs a masked-LM head of the student's width and vocabulary");
    *M = *N = 0;
    for (int s = 0; s < b->B; s++) {
        if (b->cls_labels && (b->cls_labels[s] < 0 || b->cls_labels[s] >= c->num_labels))
            return as_err_set(err, AS_ERR_INPUT, "sequence %d: label %d is outside the model's %d classes", s,
                              b->cls_labels[s], c->num_labels);
        for (int t = 0; t < b->T; t++) {
            size_t i = (size_t)s * b->T + t;
            int32_t y = b->mlm_labels ? b->mlm_labels[i] : TRAIN_IGNORE;
            if (y != TRAIN_IGNORE && (y < 0 || y >= c->vocab_size))
                return as_err_set(err, AS_ERR_INPUT, "sequence %d position %d: masked-LM label %d is outside [0, %d)", s,
                                  t, y, c->vocab_size);
            if (y != TRAIN_IGNORE && b->mask && !b->mask[i])
                return as_err_set(err, AS_ERR_INPUT, "sequence %d position %d: a masked-LM label on padding", s, t);
            *M += y != TRAIN_IGNORE;
            *N += !b->mask || b->mask[i];
        }
    }
    return AS_OK;
}

/* Per-sequence buffers, sized for T tokens. */
typedef struct {
    float *d_top;    /* (T, D) */
    float *xm, *dxm; /* (T, D) the predicted rows' hidden states, their gradients */
    float *zs, *zt;  /* (T, V) student and teacher logits of those rows */
    float *dz;       /* (T, V) */
    float *dcls;     /* (C) */
    int32_t *rows, *tgt; /* (T) */
    double *row_loss;    /* (T) */
} seq_buf;

static void seq_buf_free(seq_buf *s) {
    free(s->d_top), free(s->xm), free(s->dxm), free(s->zs), free(s->zt), free(s->dz), free(s->dcls);
    free(s->rows), free(s->tgt), free(s->row_loss);
}

static as_status seq_buf_init(const as_model *m, int T, seq_buf *s, as_error *err) {
    const as_config *c = as_model_config(m);
    size_t TD = (size_t)T * c->d_model, TV = (size_t)T * c->vocab_size;
    memset(s, 0, sizeof *s);
    s->d_top = as_malloc_array(TD, sizeof(float));
    s->xm = as_malloc_array(TD, sizeof(float));
    s->dxm = as_malloc_array(TD, sizeof(float));
    s->zs = as_malloc_array(TV, sizeof(float));
    s->zt = as_malloc_array(TV, sizeof(float));
    s->dz = as_malloc_array(TV, sizeof(float));
    s->dcls = as_malloc_array((size_t)(c->num_labels > 0 ? c->num_labels : 1), sizeof(float));
    s->rows = as_malloc_array((size_t)T, sizeof(int32_t));
    s->tgt = as_malloc_array((size_t)T, sizeof(int32_t));
    s->row_loss = as_malloc_array((size_t)T, sizeof(double));
    if (!s->d_top || !s->xm || !s->dxm || !s->zs || !s->zt || !s->dz || !s->dcls || !s->rows || !s->tgt ||
        !s->row_loss) {
        seq_buf_free(s);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for a batch of %d tokens", T);
    }
    return AS_OK;
}

static int argmax(const float *z, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (z[i] > z[best]) best = i;
    return best;
}

/* Sequence s of the batch: its forward, losses (added into out, weighted by the batch's
 * counts M and N) and, with g, its backward. */
static as_status seq_loss(const as_model *m, const bert_batch *b, const bert_loss_opts *o, int s, int M, int N,
                          seq_buf *sb, model_grads *g, bert_loss_out *out, as_error *err) {
    const as_config *c = as_model_config(m);
    int D = c->d_model, V = c->vocab_size, C = c->num_labels, T = b->T;
    const int32_t *mask = b->mask ? b->mask + (size_t)s * T : NULL;
    int n = T; /* up to the last real token */
    if (mask)
        while (n > 1 && !mask[n - 1]) n--;
    as_encoding enc = {0};
    model_tape tp = {0};
    as_run *r = NULL, *rt = NULL;
    as_status st = as_encoding_from_ids(m, b->ids + (size_t)s * T, b->type_ids ? b->type_ids + (size_t)s * T : NULL,
                                        n, &enc, err);
    if (st) return as_err_prefix(err, "sequence %d", s);
    for (int t = 0; mask && t < n; t++) enc.mask[t] = mask[t] != 0;
    if ((st = model_tape_init(m, n, &tp, err)) || (st = model_tape_dropout(m, &tp, o->dropout, err))) goto cleanup;
    train_rng dr = train_rng_seeded(o->seed, (uint64_t)s);
    tp.drop_seed = train_rng_next(&dr);
    int cls = (as_model_heads(m) & HEAD_CLASSIFIER) != 0;
    as_capture_spec spec = {.what = cls ? CAP_LOGITS : 0, .layer = -1, .head = -1, .threads = o->threads};
    if ((st = model_forward(m, &enc, &spec, NULL, &tp, &r, err))) goto cleanup;
    const float *dcls = NULL;
    if (cls && out->cls_logits) memcpy(out->cls_logits + (size_t)s * C, r->logits, (size_t)C * sizeof(float));
    if (cls && b->cls_labels) {
        trainop_xent(sb->dcls, sb->row_loss, r->logits, b->cls_labels + s, 1, C, 1.0f / (float)b->B);
        out->loss_cls += sb->row_loss[0] / b->B;
        dcls = sb->dcls;
    }
    size_t TD = (size_t)n * D;
    memset(sb->d_top, 0, TD * sizeof(float));
    int Ms = 0;
    for (int t = 0; b->mlm_labels && t < n; t++) {
        int32_t y = b->mlm_labels[(size_t)s * T + t];
        if (y == TRAIN_IGNORE) continue;
        sb->rows[Ms] = t, sb->tgt[Ms] = y;
        memcpy(sb->xm + (size_t)Ms * D, tp.x_last + (size_t)t * D, (size_t)D * sizeof(float));
        Ms++;
    }
    if (Ms) {
        float a_mlm = o->teacher ? o->alpha_mlm : 1.0f;
        if ((st = model_vocab_rows(m, sb->xm, Ms, o->threads, sb->zs, err))) goto cleanup;
        trainop_xent(sb->dz, sb->row_loss, sb->zs, sb->tgt, Ms, V, a_mlm / (float)M);
        if (out->mlm_logits)
            memcpy(out->mlm_logits + (size_t)out->n_mlm * V, sb->zs, (size_t)Ms * V * sizeof(float));
        out->n_mlm += Ms;
        for (int i = 0; i < Ms; i++) {
            out->loss_mlm += sb->row_loss[i] / M;
            out->mlm_correct += argmax(sb->zs + (size_t)i * V, V) == sb->tgt[i];
        }
    }
    if (o->teacher) { /* its final hidden states and masked-LM logits on the same tokens */
        as_capture_spec ts = {.what = CAP_HIDDEN, .layer = -1, .head = -1, .threads = o->threads};
        if ((st = model_forward(o->teacher, &enc, &ts, NULL, NULL, &rt, err))) goto cleanup;
        const float *ht = rt->hidden + (size_t)rt->n_run * TD;
        for (int i = 0; i < Ms; i++)
            memcpy(sb->dxm + (size_t)i * D, ht + (size_t)sb->rows[i] * D, (size_t)D * sizeof(float));
        if (Ms && (st = model_vocab_rows(o->teacher, sb->dxm, Ms, o->threads, sb->zt, err))) goto cleanup;
        double kl = distill_kl_grad(sb->zs, sb->zt, sb->dz, Ms, V, o->temperature, o->alpha_kl * (float)Ms / (float)M);
        out->loss_kl += kl * Ms / M;
        int real = 0;
        for (int t = 0; t < n; t++) real += enc.mask[t] != 0;
        double cs = distill_cos_grad(tp.x_last, ht, enc.mask, sb->d_top, n, D, o->alpha_cos * (float)real / (float)N);
        out->loss_cos += cs * real / N;
    }
    if (g) {
        if (Ms) {
            if ((st = model_vocab_rows_backward(m, sb->xm, Ms, sb->dz, o->threads, sb->dxm, g, err))) goto cleanup;
            for (int i = 0; i < Ms; i++) {
                float *d = sb->d_top + (size_t)sb->rows[i] * D;
                const float *e = sb->dxm + (size_t)i * D;
                for (int k = 0; k < D; k++) d[k] += e[k];
            }
        }
        st = model_backward_top(m, &enc, &tp, r, dcls, sb->d_top, o->threads, g, err);
    }
cleanup:
    as_run_free(r);
    as_run_free(rt);
    model_tape_free(&tp);
    as_encoding_free(&enc);
    return st;
}

as_status bert_batch_loss(const as_model *m, const bert_batch *b, const bert_loss_opts *o, model_grads *g,
                          bert_loss_out *out, as_error *err) {
    float *keep_cls = out->cls_logits, *keep_mlm = out->mlm_logits;
    memset(out, 0, sizeof *out);
    out->cls_logits = keep_cls, out->mlm_logits = keep_mlm;
    int M = 0, N = 0;
    seq_buf sb;
    as_status s = batch_check(m, b, o, &M, &N, err);
    if (s || (s = seq_buf_init(m, b->T, &sb, err))) return s;
    for (int k = 0; k < b->B && !s; k++) s = seq_loss(m, b, o, k, M, N, &sb, g, out, err);
    seq_buf_free(&sb);
    double a_mlm = o->teacher ? o->alpha_mlm : 1.0;
    out->loss = out->loss_cls + a_mlm * out->loss_mlm;
    if (o->teacher) /* the KL term weighted T^2 (Hinton et al. 2015, sec. 2) */
        out->loss += o->alpha_kl * o->temperature * o->temperature * out->loss_kl + o->alpha_cos * out->loss_cos;
    return s;
}
