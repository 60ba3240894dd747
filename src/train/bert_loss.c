/* bert_loss.c — the BERT family's training objectives on the one forward (see
 * bert_loss.h). The batch runs in chunks of sequences whose tapes fit TAPE_BUDGET: per
 * sequence one forward with a tape (training-mode dropout drawn from (seed, b)), the
 * classifier's logits from the forward's head; then the masked-LM head once on the
 * chunk's predicted rows of the final hidden states (model_vocab_rows: Hugging Face's loss
 * only reads those rows, and the decoder is read once per chunk, not per sequence); the
 * distillation terms compare with the teacher's forward on the same tokens; then per
 * sequence one backward (model_backward_top) from the classifier's logit gradient and the
 * gradient at the final hidden states. Every mean is over the whole batch (its B sequences, its M
 * predicted rows, its real tokens), so the batch's gradient is the sum of its sequences'.
 *
 * Threads: whole sequences. A chunk's forwards run one sequence per task, each
 * single-threaded with its own tape; the masked-LM head runs on the pool; the backwards run
 * in fixed groups of sequences (grad_groups.h), each group's gradient in a buffer of its
 * own (kept across calls with opts.keep), added in group order, so every result is the
 * same at any thread count.
 *
 *   loss_cls = mean_b CE(z_b, y_b)                         (Devlin et al. 2019, sec. 4.1)
 *   loss_mlm = mean over predicted rows CE(z_r, target_r)  (sec. 3.1)
 *   loss_kl  = mean_r KL(softmax(zt_r / T) || softmax(zs_r / T)), weighted T^2
 *   loss_cos = mean over real tokens (1 - cos(h_s, h_t))   (Sanh et al. 2019, sec. 3)
 * dL/dz_s of the KL term = alpha_kl * T * (softmax(z_s / T) - softmax(z_t / T)) / M;
 * dL/dh_s of the cosine term = -alpha_cos / N * (h_t / (|h_s||h_t|) - cos * h_s / |h_s|^2).
 */
#include "train/bert_loss.h"
#include "core/pool.h"
#include "train/grad_groups.h"
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

/* One sequence of a chunk between its forward and its backward. */
typedef struct {
    as_encoding enc;
    model_tape tp;
    as_run *r;
    float *d_top;  /* (T, D) the gradient at the final hidden states */
    float *dcls;   /* (C) the classifier logits' gradient, or unused */
    int has_dcls;
    int r0;        /* its first row in the chunk's rows_buf */
    double loss_cls, loss_cos; /* its terms of the batch's means */
    as_status st;  /* of its forward or backward */
    as_error err;
} seq_slot;

/* A chunk's masked-LM rows, gathered from its sequences. */
typedef struct {
    int cap;          /* rows */
    float *xm, *xt;   /* (cap, D) student and teacher final hidden states of the predicted rows */
    float *dxm;       /* (cap, D) their gradients */
    float *zs, *zt, *dz; /* (cap, V) student and teacher logits, the gradient */
    int32_t *seq, *row, *tgt; /* (cap) slot, position and target of each row */
    double *row_loss; /* (cap) */
} rows_buf;

static void rows_free(rows_buf *b) {
    free(b->xm), free(b->xt), free(b->dxm), free(b->zs), free(b->zt), free(b->dz);
    free(b->seq), free(b->row), free(b->tgt), free(b->row_loss);
}

static as_status rows_init(rows_buf *b, int cap, int D, int V, as_error *err) {
    memset(b, 0, sizeof *b);
    size_t n = (size_t)(cap > 0 ? cap : 1);
    b->cap = cap;
    b->xm = as_malloc_array(n * D, sizeof(float)), b->xt = as_malloc_array(n * D, sizeof(float));
    b->dxm = as_malloc_array(n * D, sizeof(float));
    b->zs = as_malloc_array(n * V, sizeof(float)), b->zt = as_malloc_array(n * V, sizeof(float));
    b->dz = as_malloc_array(n * V, sizeof(float));
    b->seq = as_malloc_array(n, sizeof(int32_t)), b->row = as_malloc_array(n, sizeof(int32_t));
    b->tgt = as_malloc_array(n, sizeof(int32_t)), b->row_loss = as_malloc_array(n, sizeof(double));
    if (!b->xm || !b->xt || !b->dxm || !b->zs || !b->zt || !b->dz || !b->seq || !b->row || !b->tgt || !b->row_loss) {
        rows_free(b);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for %d masked-LM rows", cap);
    }
    return AS_OK;
}

static void slot_free(seq_slot *sl) {
    as_run_free(sl->r);
    model_tape_free(&sl->tp);
    as_encoding_free(&sl->enc);
    free(sl->d_top);
    free(sl->dcls);
    memset(sl, 0, sizeof *sl);
}

static int argmax(const float *z, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (z[i] > z[best]) best = i;
    return best;
}

/* Sequence s of the batch into slot k, single-threaded: its forward (with a tape), the
 * classifier's loss, its predicted rows written to rb from row sl->r0 on, and with a
 * teacher the teacher's rows and the cosine term (into the slot's d_top). Means are over
 * the batch's counts M and N; the loss terms go to the slot. */
static as_status seq_forward(const as_model *m, const bert_batch *b, const bert_loss_opts *o, int s, int k, int N,
                             seq_slot *sl, rows_buf *rb, bert_loss_out *out, as_error *err) {
    const as_config *c = as_model_config(m);
    int D = c->d_model, C = c->num_labels, T = b->T;
    const int32_t *mask = b->mask ? b->mask + (size_t)s * T : NULL;
    int n = T; /* up to the last real token */
    if (mask)
        while (n > 1 && !mask[n - 1]) n--;
    as_run *rt = NULL;
    as_status st = as_encoding_from_ids(m, b->ids + (size_t)s * T, b->type_ids ? b->type_ids + (size_t)s * T : NULL,
                                        n, &sl->enc, err);
    if (st) return as_err_prefix(err, "sequence %d", s);
    for (int t = 0; mask && t < n; t++) sl->enc.mask[t] = mask[t] != 0;
    sl->d_top = as_calloc((size_t)n * D, sizeof(float));
    sl->dcls = as_malloc_array((size_t)(C > 0 ? C : 1), sizeof(float));
    if (!sl->d_top || !sl->dcls) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if ((st = model_tape_init(m, n, &sl->tp, err)) || (st = model_tape_dropout(m, &sl->tp, o->dropout, err)))
        return st;
    train_rng dr = train_rng_seeded(o->seed, (uint64_t)s);
    sl->tp.drop_seed = train_rng_next(&dr);
    int cls = (as_model_heads(m) & HEAD_CLASSIFIER) != 0;
    as_capture_spec spec = {.what = cls ? CAP_LOGITS : 0, .layer = -1, .head = -1, .threads = 1};
    if ((st = model_forward(m, &sl->enc, &spec, NULL, &sl->tp, &sl->r, err))) return st;
    if (cls && out->cls_logits) memcpy(out->cls_logits + (size_t)s * C, sl->r->logits, (size_t)C * sizeof(float));
    if (cls && b->cls_labels) {
        double rl;
        trainop_xent(sl->dcls, &rl, sl->r->logits, b->cls_labels + s, 1, C, 1.0f / (float)b->B);
        sl->loss_cls = rl / b->B;
        sl->has_dcls = 1;
    }
    int r0 = sl->r0, nr = r0;
    for (int t = 0; b->mlm_labels && t < n; t++) {
        int32_t y = b->mlm_labels[(size_t)s * T + t];
        if (y == TRAIN_IGNORE) continue;
        rb->seq[nr] = k, rb->row[nr] = t, rb->tgt[nr] = y;
        memcpy(rb->xm + (size_t)nr * D, sl->tp.x_last + (size_t)t * D, (size_t)D * sizeof(float));
        nr++;
    }
    if (o->teacher) { /* its final hidden states on the same tokens: the predicted rows, the cosine */
        as_capture_spec ts = {.what = CAP_HIDDEN, .layer = -1, .head = -1, .threads = 1};
        if ((st = model_forward(o->teacher, &sl->enc, &ts, NULL, NULL, &rt, err))) return st;
        const float *ht = rt->hidden + (size_t)rt->n_run * n * D;
        for (int i = r0; i < nr; i++)
            memcpy(rb->xt + (size_t)i * D, ht + (size_t)rb->row[i] * D, (size_t)D * sizeof(float));
        int real = 0;
        for (int t = 0; t < n; t++) real += sl->enc.mask[t] != 0;
        double cs = distill_cos_grad(sl->tp.x_last, ht, sl->enc.mask, sl->d_top, n, D,
                                     o->alpha_cos * (float)real / (float)N);
        sl->loss_cos = cs * real / N;
        as_run_free(rt);
    }
    return AS_OK;
}

/* The masked-LM head on a chunk's nr rows at once (the decoder read once per chunk): the
 * cross-entropy (and KL against the teacher's rows), and with g the head's gradients and
 * the rows' gradients added into their slots' d_top. */
static as_status rows_loss(const as_model *m, const bert_loss_opts *o, int M, rows_buf *rb, int nr, seq_slot *slots,
                           model_grads *g, bert_loss_out *out, as_error *err) {
    const as_config *c = as_model_config(m);
    int D = c->d_model, V = c->vocab_size;
    as_status st;
    if (!nr) return AS_OK;
    float a_mlm = o->teacher ? o->alpha_mlm : 1.0f;
    if ((st = model_vocab_rows(m, rb->xm, nr, o->threads, rb->zs, err))) return st;
    trainop_xent(rb->dz, rb->row_loss, rb->zs, rb->tgt, nr, V, a_mlm / (float)M);
    if (out->mlm_logits) memcpy(out->mlm_logits + (size_t)out->n_mlm * V, rb->zs, (size_t)nr * V * sizeof(float));
    out->n_mlm += nr;
    for (int i = 0; i < nr; i++) {
        out->loss_mlm += rb->row_loss[i] / M;
        out->mlm_correct += argmax(rb->zs + (size_t)i * V, V) == rb->tgt[i];
    }
    if (o->teacher) {
        if ((st = model_vocab_rows(o->teacher, rb->xt, nr, o->threads, rb->zt, err))) return st;
        double kl = distill_kl_grad(rb->zs, rb->zt, rb->dz, nr, V, o->temperature, o->alpha_kl * (float)nr / (float)M);
        out->loss_kl += kl * nr / M;
    }
    if (!g) return AS_OK;
    if ((st = model_vocab_rows_backward(m, rb->xm, nr, rb->dz, o->threads, rb->dxm, g, err))) return st;
    for (int i = 0; i < nr; i++) {
        float *d = slots[rb->seq[i]].d_top + (size_t)rb->row[i] * D;
        const float *e = rb->dxm + (size_t)i * D;
        for (int k = 0; k < D; k++) d[k] += e[k];
    }
    return AS_OK;
}

/* A chunk of sequences s0.. on the pool: forwards one sequence per task, backwards
 * one group of sequences per task (grad_groups_run). */
typedef struct {
    const as_model *m;
    const bert_batch *b;
    const bert_loss_opts *o;
    int s0, N;
    seq_slot *slots;
    rows_buf *rb;
    bert_loss_out *out;
    int k1, G;             /* sequences of the chunk, their groups */
    model_dw_stage *stage; /* NULL, or the chunk's staged weight gradients */
} chunk_job;

static void fwd_task(void *ctx, int k, int tid) {
    (void)tid;
    const chunk_job *c = ctx;
    seq_slot *sl = &c->slots[k];
    sl->st = seq_forward(c->m, c->b, c->o, c->s0 + k, k, c->N, sl, c->rb, c->out, &sl->err);
}

static int bwd_group(void *ctx, int j, model_grads *buf) {
    const chunk_job *c = ctx;
    int lo, hi;
    grad_groups_range(c->k1, c->G, j, &lo, &hi);
    for (int k = lo; k < hi; k++) {
        seq_slot *sl = &c->slots[k];
        model_dw_stage_seq(c->stage, k, buf);
        sl->st = model_backward_top(c->m, &sl->enc, &sl->tp, sl->r, sl->has_dcls ? sl->dcls : NULL, sl->d_top, 1, buf,
                                    &sl->err);
        model_dw_stage_seq(NULL, 0, NULL);
        if (sl->st) return 1;
    }
    return 0;
}

/* Sequences per chunk: their tapes together within about TAPE_BUDGET bytes. Every chunk's
 * backward adds its groups' gradient buffers (the parameter count in floats each) into the
 * batch's, so fewer, larger chunks move less memory: a BERT-base batch of 8 x 128 tokens
 * (tapes of about 94 MB a sequence) runs as one chunk. */
#define TAPE_BUDGET ((size_t)1024 << 20)

static int chunk_seqs(const as_model *m, int B, int T) {
    const as_config *c = as_model_config(m);
    double per = 4.0 * c->n_layer * T * (8.0 * c->d_model + 2.0 * c->n_head * T + 2.0 * c->d_ff);
    double k = (double)TAPE_BUDGET / (per > 1 ? per : 1);
    return k < 1 ? 1 : k > B ? B : (int)k;
}

as_status bert_batch_loss(const as_model *m, const bert_batch *b, const bert_loss_opts *o, model_grads *g,
                          bert_loss_out *out, as_error *err) {
    float *keep_cls = out->cls_logits, *keep_mlm = out->mlm_logits;
    memset(out, 0, sizeof *out);
    out->cls_logits = keep_cls, out->mlm_logits = keep_mlm;
    int M = 0, N = 0;
    as_status s = batch_check(m, b, o, &M, &N, err);
    if (s) return s;
    int K = chunk_seqs(m, b->B, b->T), cap = 0;
    for (int s0 = 0; s0 < b->B; s0 += K) { /* the most predicted rows of a chunk */
        int r = 0;
        for (size_t i = (size_t)s0 * b->T; b->mlm_labels && i < (size_t)(s0 + K < b->B ? s0 + K : b->B) * b->T; i++)
            r += b->mlm_labels[i] != TRAIN_IGNORE;
        cap = r > cap ? r : cap;
    }
    rows_buf rb;
    seq_slot *slots = as_calloc((size_t)K, sizeof *slots);
    if (!slots) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if ((s = rows_init(&rb, cap, as_model_config(m)->d_model, as_model_config(m)->vocab_size, err))) {
        free(slots);
        return s;
    }
    int nt = o->threads > 0 ? o->threads : as_n_cores();
    grad_groups own = {0}, *gg = o->keep ? o->keep : &own; /* zeroed buffers, kept across calls or not */
    if (g) {
        int G = grad_groups_count(K), need = nt < G ? nt : G;
        if (gg->n != need || (gg->n && gg->buf[0].n != g->n)) { /* another thread count or model */
            grad_groups_free(gg);
            s = grad_groups_init(m, need, gg, err);
        }
        if (!s) s = grad_groups_stage(gg, m, K, b->T, err);
    }
    par_state saved;
    model_par_begin(1, NULL, 0, NULL, &saved); /* OpenBLAS single-threaded under the pool's tasks */
    for (int s0 = 0; s0 < b->B && !s; s0 += K) {
        int k1 = s0 + K < b->B ? K : b->B - s0, nr = 0;
        for (int k = 0; k < k1; k++) { /* each sequence's first row in rb */
            slots[k].r0 = nr;
            for (int t = 0; b->mlm_labels && t < b->T; t++) nr += b->mlm_labels[(size_t)(s0 + k) * b->T + t] != TRAIN_IGNORE;
        }
        chunk_job cj = {.m = m, .b = b, .o = o, .s0 = s0, .N = N, .slots = slots, .rb = &rb, .out = out};
        as_parallel_for(k1, nt, fwd_task, &cj);
        for (int k = 0; k < k1 && !s; k++) /* in sequence order: the same sums at any thread count */
            if (slots[k].st) {
                *err = slots[k].err;
                s = slots[k].st;
            } else {
                out->loss_cls += slots[k].loss_cls;
                out->loss_cos += slots[k].loss_cos;
            }
        if (!s) s = rows_loss(m, o, M, &rb, nr, slots, g, out, err);
        if (!s && g) {
            cj.k1 = k1;
            cj.G = grad_groups_count(k1);
            cj.stage = gg->stage;
            if (grad_groups_run(gg, cj.G, g, bwd_group, &cj))
                for (int k = 0; k < k1 && !s; k++)
                    if (slots[k].st) *err = slots[k].err, s = slots[k].st;
        }
        for (int k = 0; k < k1; k++) slot_free(&slots[k]);
    }
    model_par_end(&saved);
    if (s || gg == &own) grad_groups_free(gg); /* a failed group leaves its buffer unzeroed */
    rows_free(&rb);
    free(slots);
    double a_mlm = o->teacher ? o->alpha_mlm : 1.0;
    out->loss = out->loss_cls + a_mlm * out->loss_mlm;
    if (o->teacher) /* the KL term weighted T^2 (Hinton et al. 2015, sec. 2) */
        out->loss += o->alpha_kl * o->temperature * o->temperature * out->loss_kl + o->alpha_cos * out->loss_cos;
    return s;
}
