/* tr_forward.c — the training forward pass with saved activations and its backward
 * pass for the post-LN encoder family (see train.h). Row r = b * T + t throughout.
 *
 * Forward (Devlin et al. 2019, sec. 3; Vaswani et al. 2017, sec. 3.2):
 *   e   = wte[id] + wpe[pos] + wtt[type]                       (BT, D)
 *   x0  = dropout(LN_e(e))                                     (BT, D)
 *   per layer: qkv = x Wqkv^T + bqkv                           (BT, 3D)
 *     P_bh = softmax(Q_bh K_bh^T / sqrt(Dh) + mask)            (T, T) per sequence b, head h
 *     ctx_bh = dropout(P_bh) V_bh                              (T, Dh)
 *     h1 = LN1(x + dropout(ctx Wo^T + bo))                     (BT, D)
 *     x' = LN2(h1 + dropout(act(h1 W1^T + b1) W2^T + b2))      (BT, D)
 *   classifier: logits = dropout(act(x'[b, 0] Wp^T + bp)) Wc^T + bc   (B, C)
 *   MLM (rows with label != -100): logits = LN(act(x' Wm^T + bm)) wte^T + bias  (M, V)
 * Masked keys get P = 0, as Hugging Face's additive finfo.min mask gives.
 * Dropout sites follow BertModel; RoBERTa's extra dropout before classifier.dense and
 * DistilBERT's missing dropout after out_lin are not modelled (equal at p = 0).
 *
 * Threads: large products use OpenBLAS's threads; the per-(sequence, head)
 * attention loop runs one task per OpenMP thread with OpenBLAS set to one thread.
 */
#include "train/tr_ops.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <omp.h>
#include <string.h>

/* dropout site ids: embeddings / pooler, then 3 per layer */
enum { SITE_EMB = 0, SITE_POOL = 1 };
static uint32_t site_of(int l, int k) { return (uint32_t)(l + 1) * 4u + (uint32_t)k; }
enum { K_ATT = 0, K_ATTOUT = 1, K_FFOUT = 2 };

/* ---- activations ---- */

as_status tr_acts_init(const tr_model *m, int B, int T, int max_mlm, tr_acts **out, as_error *err) {
    *out = NULL;
    const tr_config *c = &m->cfg;
    if (B <= 0 || T <= 0 || T > c->max_pos - c->pos_offset || max_mlm < 0)
        return as_err_set(err, AS_ERR_INPUT, "batch %d x %d does not fit the model (at most %d tokens)", B, T,
                          c->max_pos - c->pos_offset);
    size_t L = (size_t)c->n_layer, D = (size_t)c->d_model, F = (size_t)c->d_ff, H = (size_t)c->n_head;
    size_t V = (size_t)c->vocab_size, C = (size_t)c->num_labels;
    size_t BT = (size_t)B * (size_t)T, TT = (size_t)T * (size_t)T;
    size_t M = max_mlm > 0 ? (size_t)max_mlm : BT;
    if (!c->mlm) M = 0;
    int nthr = omp_get_max_threads();
    if (nthr < 1) nthr = 1;
    size_t MB = M > (size_t)B ? M : (size_t)B;
    size_t ON = BT > M ? BT : M;
    /* element counts, in the order carved below */
    size_t n[] = {
        BT * D, BT, BT, (L + 1) * BT * D,                 /* emb_sum, emb_mean, emb_rstd, resid */
        L * BT * 3 * D, L * (size_t)B * H * TT, L * BT * D, L * BT * D, L * BT, L * BT, L * BT * D,
        L * BT * F, L * BT * F, L * BT * D, L * BT, L * BT, /* qkv .. rstd2 */
        (size_t)B * D, (size_t)B * D, (size_t)B * D, (size_t)B * C, (size_t)B * C, /* cls */
        M * D, M * D, M * D, M * D, M, M, M * V, M * V,     /* mlm */
        BT * D, BT * D, BT * D,                             /* d_out, d_emb_out, d_emb_sum */
        BT * D, BT * D, BT * D, BT * D, BT * D, BT * D,     /* d_x d_y d_h d_t d_h1 d_ctx */
        BT * F, BT * 3 * D, MB * D, MB * D, (size_t)nthr * 2 * TT, ON};
    size_t total = 0;
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) {
        if (n[i] > ((size_t)1 << 40) || total + n[i] < total)
            return as_err_set(err, AS_ERR_INPUT, "batch %d x %d is too large for activations", B, T);
        total += n[i];
    }
    tr_acts *a = as_calloc(1, sizeof *a);
    if (!a) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    a->block = as_calloc(total, sizeof(float));
    a->iblock = as_malloc_array(BT + 2 * (M ? M : 1), sizeof(int32_t));
    if (!a->block || !a->iblock) {
        tr_acts_free(a);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for activations (%zu MB)",
                          total * sizeof(float) >> 20);
    }
    a->B = B;
    a->T = T;
    a->M_max = (int)M;
    a->nthr = nthr;
    a->n_floats = total;
    float **dst[] = {&a->emb_sum, &a->emb_mean, &a->emb_rstd, &a->resid, &a->qkv, &a->att, &a->ctx,
                     &a->res1, &a->mean1, &a->rstd1, &a->h1, &a->fpre, &a->fact, &a->res2, &a->mean2,
                     &a->rstd2, &a->cls_h0, &a->cls_pool, &a->cls_poold, &a->cls_logits, &a->d_cls_logits,
                     &a->mlm_h, &a->mlm_t1, &a->mlm_t2, &a->mlm_t3, &a->mlm_mean, &a->mlm_rstd,
                     &a->mlm_logits, &a->d_mlm_logits, &a->d_out, &a->d_emb_out, &a->d_emb_sum, &a->d_x,
                     &a->d_y, &a->d_h, &a->d_t, &a->d_h1, &a->d_ctx, &a->d_ff, &a->d_qkv, &a->d_m1,
                     &a->d_m2, &a->scr, &a->ones};
    ASSERT(sizeof dst / sizeof dst[0] == sizeof n / sizeof n[0]);
    float *p = a->block;
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) {
        *dst[i] = n[i] ? p : NULL;
        p += n[i];
    }
    for (size_t i = 0; i < ON; i++) a->ones[i] = 1.0f;
    a->pos = a->iblock;
    a->mlm_rows = a->pos + BT;
    a->mlm_tgt = a->mlm_rows + (M ? M : 1);
    *out = a;
    return AS_OK;
}

void tr_acts_free(tr_acts *a) {
    if (!a) return;
    free(a->block);
    free(a->iblock);
    free(a);
}

size_t tr_acts_bytes(const tr_acts *a) { return a ? a->n_floats * sizeof(float) : 0; }

/* ---- input checks ---- */

static as_status check_batch(const tr_model *m, const tr_acts *a, const tr_batch *b, as_error *err) {
    const tr_config *c = &m->cfg;
    if (!b->ids || b->B <= 0 || b->T <= 0 || b->B > a->B || b->T > a->T)
        return as_err_set(err, AS_ERR_INPUT, "batch %d x %d does not fit the activations (%d x %d)", b->B, b->T,
                          a->B, a->T);
    if (!(a->p_hidden >= 0.0f && a->p_hidden < 1.0f && a->p_attn >= 0.0f && a->p_attn < 1.0f))
        return as_err_set(err, AS_ERR_INPUT, "dropout %g / %g is outside [0, 1)", a->p_hidden, a->p_attn);
    int ntypes = c->type_vocab > 0 ? c->type_vocab : 1;
    size_t BT = (size_t)b->B * b->T;
    for (size_t r = 0; r < BT; r++) {
        int bb = (int)(r / (size_t)b->T), t = (int)(r % (size_t)b->T);
        if (b->ids[r] < 0 || b->ids[r] >= c->vocab_size)
            return as_err_set(err, AS_ERR_INPUT, "sequence %d position %d: token id %d is outside [0, %d)", bb, t,
                              (int)b->ids[r], c->vocab_size);
        if (b->type_ids && (b->type_ids[r] < 0 || b->type_ids[r] >= ntypes))
            return as_err_set(err, AS_ERR_INPUT, "sequence %d position %d: token type %d is outside [0, %d)", bb,
                              t, (int)b->type_ids[r], ntypes);
        if (b->mask && b->mask[r] != 0 && b->mask[r] != 1)
            return as_err_set(err, AS_ERR_INPUT, "sequence %d position %d: attention mask %d is not 0 or 1", bb, t,
                              (int)b->mask[r]);
        if (b->mlm_labels && b->mlm_labels[r] != TR_IGNORE &&
            (b->mlm_labels[r] < 0 || b->mlm_labels[r] >= c->vocab_size))
            return as_err_set(err, AS_ERR_INPUT, "sequence %d position %d: MLM label %d is outside [0, %d)", bb, t,
                              (int)b->mlm_labels[r], c->vocab_size);
    }
    if (b->cls_labels) {
        if (c->num_labels <= 0)
            return as_err_set(err, AS_ERR_INPUT, "class labels given but the model has no classifier");
        for (int i = 0; i < b->B; i++)
            if (b->cls_labels[i] < 0 || b->cls_labels[i] >= c->num_labels)
                return as_err_set(err, AS_ERR_INPUT, "sequence %d: class label %d is outside [0, %d)", i,
                                  (int)b->cls_labels[i], c->num_labels);
    }
    if (b->mlm_labels && !c->mlm)
        return as_err_set(err, AS_ERR_INPUT, "MLM labels given but the model has no MLM head");
    return AS_OK;
}

/* Position ids: t (BERT, DistilBERT); RoBERTa: Hugging Face's
 * create_position_ids_from_input_ids, padding_idx + running count of non-pad
 * tokens, pads at padding_idx. */
static void positions(const tr_config *c, const tr_batch *b, int32_t *pos) {
    for (int bb = 0; bb < b->B; bb++) {
        int count = 0;
        for (int t = 0; t < b->T; t++) {
            size_t r = (size_t)bb * b->T + t;
            if (c->arch == ARCH_ROBERTA) {
                int is_pad = b->ids[r] == c->pad_token_id;
                if (!is_pad) count++;
                pos[r] = is_pad ? c->pad_token_id : c->pad_token_id + count;
            } else {
                pos[r] = t;
            }
        }
    }
}

/* ---- attention for one (sequence, head) ---- */

typedef struct {
    int T, D, Dh, H;
    float scale, p;
    uint64_t seed;
    uint32_t site;
} att_dims;

static int key_ok(const tr_batch *b, int bb, int j) { return !b->mask || b->mask[(size_t)bb * b->T + j]; }

/* P (T, T) = softmax_rows(scale * Q K^T + mask) saved; ctx (T, Dh) = dropout(P) V.
 * qkv: the sequence's (T, 3D) block; ctx: its (T, D) block; scr (T, T). */
static void att_fwd(const att_dims *d, const tr_batch *b, int bb, int h, const float *qkv, float *P,
                    float *ctx, float *scr) {
    int T = d->T, D3 = 3 * d->D;
    const float *q = qkv + (size_t)h * d->Dh, *k = q + d->D, *v = q + 2 * d->D;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, d->Dh, d->scale, q, D3, k, D3, 0.0f, P, T);
    for (int i = 0; i < T; i++) {
        float *pi = P + (size_t)i * T;
        float mx = -FLT_MAX;
        int any = 0;
        for (int j = 0; j < T; j++)
            if (key_ok(b, bb, j)) {
                mx = pi[j] > mx ? pi[j] : mx;
                any = 1;
            }
        float sum = 0.0f;
        for (int j = 0; j < T; j++) {
            float e = (any && key_ok(b, bb, j)) ? expf(pi[j] - mx) : 0.0f;
            pi[j] = e;
            sum += e;
        }
        float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int j = 0; j < T; j++) pi[j] *= inv;
    }
    const float *Pd = P;
    if (d->p > 0.0f) {
        size_t base = ((size_t)bb * d->H + h) * (size_t)T * T;
        float s = 1.0f / (1.0f - d->p);
        uint64_t key = tro_drop_key(d->seed, d->site);
        for (size_t i = 0; i < (size_t)T * T; i++) scr[i] = tro_drop_keep_k(key, base + i, d->p) ? P[i] * s : 0.0f;
        Pd = scr;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, d->Dh, T, 1.0f, Pd, T, v, D3, 0.0f,
                ctx + (size_t)h * d->Dh, d->D);
}

/* Backward of att_fwd: dctx (T, D) block in; the head's slices of dqkv (T, 3D)
 * overwritten. dV = dropout(P)^T dctx; dP = dropout'(dctx V^T); softmax backward
 * dS = P * (dP - rowsum(dP * P)); dQ = scale dS K, dK = scale dS^T Q. scr (2, T, T). */
static void att_bwd(const att_dims *d, int bb, int h, const float *qkv, const float *P, const float *dctx,
                    float *dqkv, float *scr) {
    int T = d->T, D3 = 3 * d->D, Dh = d->Dh;
    size_t TT = (size_t)T * T;
    const float *q = qkv + (size_t)h * Dh, *k = q + d->D, *v = q + 2 * d->D;
    float *dq = dqkv + (size_t)h * Dh, *dk = dq + d->D, *dv = dq + 2 * d->D;
    const float *dc = dctx + (size_t)h * Dh;
    float *Pd = scr, *dP = scr + TT;
    size_t base = ((size_t)bb * d->H + h) * TT;
    int drop = d->p > 0.0f;
    float s = drop ? 1.0f / (1.0f - d->p) : 1.0f;
    uint64_t key = tro_drop_key(d->seed, d->site);
    if (drop)
        for (size_t i = 0; i < TT; i++) Pd[i] = tro_drop_keep_k(key, base + i, d->p) ? P[i] * s : 0.0f;
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, Dh, T, 1.0f, drop ? Pd : P, T, dc, d->D, 0.0f, dv, D3);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, Dh, 1.0f, dc, d->D, v, D3, 0.0f, dP, T);
    if (drop)
        for (size_t i = 0; i < TT; i++) dP[i] = Pd[i] != 0.0f || tro_drop_keep_k(key, base + i, d->p) ? dP[i] * s : 0.0f;
    for (int i = 0; i < T; i++) {
        const float *pi = P + (size_t)i * T;
        float *gi = dP + (size_t)i * T;
        float dot = 0.0f;
        for (int j = 0; j < T; j++) dot += gi[j] * pi[j];
        for (int j = 0; j < T; j++) gi[j] = pi[j] * (gi[j] - dot);
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, Dh, T, d->scale, dP, T, k, D3, 0.0f, dq, D3);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, Dh, T, d->scale, dP, T, q, D3, 0.0f, dk, D3);
}

/* ---- layer slices ---- */

/* One layer's parameters (or gradients) inside the arena. */
typedef struct {
    float *qkv_w, *qkv_b, *o_w, *o_b, *ln1_g, *ln1_b, *f1_w, *f1_b, *f2_w, *f2_b, *ln2_g, *ln2_b;
} layer_p;

static layer_p layer_slice(const tr_params *p, const tr_config *c, int l) {
    size_t D = (size_t)c->d_model, F = (size_t)c->d_ff, L = (size_t)l;
    layer_p r = {p->qkv_w + L * 3 * D * D, p->qkv_b + L * 3 * D, p->o_w + L * D * D, p->o_b + L * D,
                 p->ln1_g + L * D,         p->ln1_b + L * D,     p->f1_w + L * F * D, p->f1_b + L * F,
                 p->f2_w + L * D * F,      p->f2_b + L * D,      p->ln2_g + L * D,    p->ln2_b + L * D};
    return r;
}

/* Saved activations of layer l (strides from the capacity, so smaller batches fit). */
typedef struct {
    float *x, *y, *qkv, *att, *ctx, *res1, *mean1, *rstd1, *h1, *fpre, *fact, *res2, *mean2, *rstd2;
} layer_a;

static layer_a layer_acts(const tr_acts *a, const tr_config *c, int l) {
    size_t D = (size_t)c->d_model, F = (size_t)c->d_ff, H = (size_t)c->n_head, L = (size_t)l;
    size_t BT = (size_t)a->B * a->T, BHTT = (size_t)a->B * H * a->T * a->T;
    layer_a r = {a->resid + L * BT * D, a->resid + (L + 1) * BT * D, a->qkv + L * BT * 3 * D, a->att + L * BHTT,
                 a->ctx + L * BT * D,   a->res1 + L * BT * D,         a->mean1 + L * BT,      a->rstd1 + L * BT,
                 a->h1 + L * BT * D,    a->fpre + L * BT * F,         a->fact + L * BT * F,   a->res2 + L * BT * D,
                 a->mean2 + L * BT,     a->rstd2 + L * BT};
    return r;
}

static att_dims att_dims_of(const tr_config *c, const tr_acts *a, int T, int l) {
    int Dh = c->d_model / c->n_head;
    att_dims d = {T, c->d_model, Dh, c->n_head, 1.0f / sqrtf((float)Dh), a->p_attn, a->seed, site_of(l, K_ATT)};
    return d;
}

static void layer_fwd(const tr_model *m, tr_acts *a, const tr_batch *b, int l) {
    const tr_config *c = &m->cfg;
    int B = b->B, T = b->T, N = B * T, D = c->d_model, F = c->d_ff, H = c->n_head;
    size_t ND = (size_t)N * D;
    layer_p w = layer_slice(&m->params, c, l);
    layer_a s = layer_acts(a, c, l);
    tro_linear_fwd(s.qkv, s.x, w.qkv_w, w.qkv_b, N, D, 3 * D);
    att_dims d = att_dims_of(c, a, T, l);
    size_t TT = (size_t)T * T;
    int nblas = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel for num_threads(a->nthr) schedule(dynamic, 1)
    for (int task = 0; task < B * H; task++) {
        int bb = task / H, h = task % H, tid = omp_get_thread_num();
        att_fwd(&d, b, bb, h, s.qkv + (size_t)bb * T * 3 * D, s.att + (size_t)task * TT,
                s.ctx + (size_t)bb * T * D, a->scr + (size_t)tid * 2 * TT);
    }
    openblas_set_num_threads(nblas);
    /* res1 = x + dropout(ctx Wo^T + bo); h1 = LN1(res1) */
    tro_linear_fwd(s.res1, s.ctx, w.o_w, w.o_b, N, D, D);
    tro_dropout(s.res1, ND, a->p_hidden, a->seed, site_of(l, K_ATTOUT));
    for (size_t i = 0; i < ND; i++) s.res1[i] += s.x[i];
    tro_layernorm_fwd(s.h1, s.mean1, s.rstd1, s.res1, w.ln1_g, w.ln1_b, N, D, c->ln_eps);
    /* res2 = h1 + dropout(act(h1 W1^T + b1) W2^T + b2); y = LN2(res2) */
    tro_linear_fwd(s.fpre, s.h1, w.f1_w, w.f1_b, N, D, F);
    tro_act_fwd(c->act, s.fact, s.fpre, (size_t)N * F);
    tro_linear_fwd(s.res2, s.fact, w.f2_w, w.f2_b, N, F, D);
    tro_dropout(s.res2, ND, a->p_hidden, a->seed, site_of(l, K_FFOUT));
    for (size_t i = 0; i < ND; i++) s.res2[i] += s.h1[i];
    tro_layernorm_fwd(s.y, s.mean2, s.rstd2, s.res2, w.ln2_g, w.ln2_b, N, D, c->ln_eps);
}

static float cls_act_fwd(tr_cls_act k, float x) { return k == TR_CLS_TANH ? tanhf(x) : (x > 0.0f ? x : 0.0f); }
/* derivative from the activation's output y: tanh' = 1 - y^2, relu' = [y > 0] */
static float cls_act_grad(tr_cls_act k, float y) {
    return k == TR_CLS_TANH ? 1.0f - y * y : (y > 0.0f ? 1.0f : 0.0f);
}

as_status tr_forward(const tr_model *m, tr_acts *a, const tr_batch *b, as_error *err) {
    as_status s;
    if ((s = check_batch(m, a, b, err))) return s;
    const tr_config *c = &m->cfg;
    const tr_params *p = &m->params;
    int B = b->B, T = b->T, N = B * T, D = c->d_model, L = c->n_layer, C = c->num_labels, V = c->vocab_size;
    size_t ND = (size_t)N * D, BTcap = (size_t)a->B * a->T;
    /* MLM rows */
    a->n_mlm = 0;
    if (b->mlm_labels) {
        for (int r = 0; r < N; r++)
            if (b->mlm_labels[r] != TR_IGNORE) {
                if (a->n_mlm == a->M_max)
                    return as_err_set(err, AS_ERR_INPUT, "batch has more than %d masked-LM targets (the capacity)",
                                      a->M_max);
                a->mlm_rows[a->n_mlm] = r;
                a->mlm_tgt[a->n_mlm++] = b->mlm_labels[r];
            }
    }
    positions(c, b, a->pos);
    /* embeddings */
    for (int r = 0; r < N; r++) {
        const float *w = b->word_embeds ? b->word_embeds + (size_t)r * D : p->wte + (size_t)b->ids[r] * D;
        const float *pe = p->wpe + (size_t)a->pos[r] * D;
        const float *te = p->wtt ? p->wtt + (size_t)(b->type_ids ? b->type_ids[r] : 0) * D : NULL;
        float *e = a->emb_sum + (size_t)r * D;
        for (int i = 0; i < D; i++) e[i] = (te ? w[i] + te[i] : w[i]) + pe[i];
    }
    tro_layernorm_fwd(a->resid, a->emb_mean, a->emb_rstd, a->emb_sum, p->ln_e_g, p->ln_e_b, N, D, c->ln_eps);
    tro_dropout(a->resid, ND, a->p_hidden, a->seed, SITE_EMB);
    for (int l = 0; l < L; l++) layer_fwd(m, a, b, l);
    const float *out = a->resid + (size_t)L * BTcap * D;
    memset(a->d_out, 0, ND * sizeof(float));
    a->loss_cls = a->loss_mlm = a->loss = 0.0f;
    /* classifier on the first token of each sequence */
    if (C > 0) {
        for (int bb = 0; bb < B; bb++)
            memcpy(a->cls_h0 + (size_t)bb * D, out + (size_t)bb * T * D, (size_t)D * sizeof(float));
        tro_linear_fwd(a->cls_pool, a->cls_h0, p->pool_w, p->pool_b, B, D, D);
        for (size_t i = 0; i < (size_t)B * D; i++) a->cls_pool[i] = cls_act_fwd(c->cls_act, a->cls_pool[i]);
        memcpy(a->cls_poold, a->cls_pool, (size_t)B * D * sizeof(float));
        tro_dropout(a->cls_poold, (size_t)B * D, a->p_hidden, a->seed, SITE_POOL);
        tro_linear_fwd(a->cls_logits, a->cls_poold, p->cls_w, p->cls_b, B, D, C);
        memset(a->d_cls_logits, 0, (size_t)B * C * sizeof(float));
        if (b->cls_labels)
            a->loss_cls = (float)(tro_xent(a->d_cls_logits, a->cls_logits, b->cls_labels, B, C, 1.0f / B) / B);
    }
    /* masked-LM head on the labelled rows */
    int M = a->n_mlm;
    if (c->mlm && M > 0) {
        for (int i = 0; i < M; i++)
            memcpy(a->mlm_h + (size_t)i * D, out + (size_t)a->mlm_rows[i] * D, (size_t)D * sizeof(float));
        tro_linear_fwd(a->mlm_t1, a->mlm_h, p->mlm_w, p->mlm_b, M, D, D);
        tro_act_fwd(c->mlm_act, a->mlm_t2, a->mlm_t1, (size_t)M * D);
        tro_layernorm_fwd(a->mlm_t3, a->mlm_mean, a->mlm_rstd, a->mlm_t2, p->mlm_ln_g, p->mlm_ln_b, M, D, c->ln_eps);
        tro_linear_fwd(a->mlm_logits, a->mlm_t3, p->wte, p->mlm_bias, M, D, V);
        a->loss_mlm = (float)(tro_xent(a->d_mlm_logits, a->mlm_logits, a->mlm_tgt, M, V, 1.0f / M) / M);
    }
    a->loss = a->loss_cls + a->loss_mlm;
    return AS_OK;
}

/* ---- backward ---- */

/* dy: dLoss/d layer output (BT, D); dx: dLoss/d layer input, overwritten. */
static void layer_bwd(tr_model *m, tr_acts *a, const tr_batch *b, int l, const float *dy, float *dx, int pg) {
    const tr_config *c = &m->cfg;
    int B = b->B, T = b->T, N = B * T, D = c->d_model, F = c->d_ff, H = c->n_head;
    size_t ND = (size_t)N * D;
    layer_p w = layer_slice(&m->params, c, l);
    layer_p g = {0};
    if (pg) g = layer_slice(&m->grads, c, l);
    layer_a s = layer_acts(a, c, l);
    /* y = LN2(res2) */
    tro_layernorm_bwd(a->d_h, g.ln2_g, g.ln2_b, dy, s.res2, s.mean2, s.rstd2, w.ln2_g, N, D);
    /* res2 = h1 + dropout(ff2(act(ff1(h1)))) */
    const float *dff2 = a->d_h;
    if (a->p_hidden > 0.0f) {
        memcpy(a->d_t, a->d_h, ND * sizeof(float));
        tro_dropout(a->d_t, ND, a->p_hidden, a->seed, site_of(l, K_FFOUT));
        dff2 = a->d_t;
    }
    tro_linear_bwd(a->d_ff, 0, g.f2_w, g.f2_b, dff2, s.fact, w.f2_w, a->ones, N, F, D);
    tro_act_bwd(c->act, a->d_ff, s.fpre, (size_t)N * F);
    memcpy(a->d_h1, a->d_h, ND * sizeof(float));
    tro_linear_bwd(a->d_h1, 1, g.f1_w, g.f1_b, a->d_ff, s.h1, w.f1_w, a->ones, N, D, F);
    /* h1 = LN1(res1); res1 = x + dropout(ctx Wo^T + bo) */
    tro_layernorm_bwd(dx, g.ln1_g, g.ln1_b, a->d_h1, s.res1, s.mean1, s.rstd1, w.ln1_g, N, D);
    const float *dao = dx;
    if (a->p_hidden > 0.0f) {
        memcpy(a->d_t, dx, ND * sizeof(float));
        tro_dropout(a->d_t, ND, a->p_hidden, a->seed, site_of(l, K_ATTOUT));
        dao = a->d_t;
    }
    tro_linear_bwd(a->d_ctx, 0, g.o_w, g.o_b, dao, s.ctx, w.o_w, a->ones, N, D, D);
    att_dims d = att_dims_of(c, a, T, l);
    size_t TT = (size_t)T * T;
    int nblas = openblas_get_num_threads();
    openblas_set_num_threads(1);
#pragma omp parallel for num_threads(a->nthr) schedule(dynamic, 1)
    for (int task = 0; task < B * H; task++) {
        int bb = task / H, h = task % H, tid = omp_get_thread_num();
        att_bwd(&d, bb, h, s.qkv + (size_t)bb * T * 3 * D, s.att + (size_t)task * TT, a->d_ctx + (size_t)bb * T * D,
                a->d_qkv + (size_t)bb * T * 3 * D, a->scr + (size_t)tid * 2 * TT);
    }
    openblas_set_num_threads(nblas);
    /* qkv = x Wqkv^T + bqkv; dx (the residual path) += dqkv Wqkv */
    tro_linear_bwd(dx, 1, g.qkv_w, g.qkv_b, a->d_qkv, s.x, w.qkv_w, a->ones, N, D, 3 * D);
}

void tr_backward(tr_model *m, tr_acts *a, const tr_batch *b, int param_grads) {
    const tr_config *c = &m->cfg;
    const tr_params *p = &m->params;
    int pg = param_grads != 0;
    ASSERT(!pg || m->grads_mem);
    tr_params gz = {0};
    const tr_params *g = pg ? &m->grads : &gz;
    int B = b->B, T = b->T, N = B * T, D = c->d_model, L = c->n_layer, C = c->num_labels, V = c->vocab_size;
    size_t ND = (size_t)N * D;
    float *dy = a->d_x, *dx = a->d_y;
    memcpy(dy, a->d_out, ND * sizeof(float));
    /* classifier: logits = poold Wc^T + bc; poold = dropout(act(h0 Wp^T + bp)) */
    if (C > 0) {
        float *dpool = a->d_m1, *dh0 = a->d_m2;
        tro_linear_bwd(dpool, 0, g->cls_w, g->cls_b, a->d_cls_logits, a->cls_poold, p->cls_w, a->ones, B, D, C);
        tro_dropout(dpool, (size_t)B * D, a->p_hidden, a->seed, SITE_POOL);
        for (size_t i = 0; i < (size_t)B * D; i++) dpool[i] *= cls_act_grad(c->cls_act, a->cls_pool[i]);
        tro_linear_bwd(dh0, 0, g->pool_w, g->pool_b, dpool, a->cls_h0, p->pool_w, a->ones, B, D, D);
        for (int bb = 0; bb < B; bb++) {
            float *r = dy + (size_t)bb * T * D;
            for (int i = 0; i < D; i++) r[i] += dh0[(size_t)bb * D + i];
        }
    }
    /* MLM: logits = t3 wte^T + bias; t3 = LN(act(h Wm^T + bm)) */
    int M = a->n_mlm;
    if (c->mlm && M > 0) {
        float *d3 = a->d_m1, *d2 = a->d_m2;
        tro_linear_bwd(d3, 0, g->wte, g->mlm_bias, a->d_mlm_logits, a->mlm_t3, p->wte, a->ones, M, D, V);
        tro_layernorm_bwd(d2, g->mlm_ln_g, g->mlm_ln_b, d3, a->mlm_t2, a->mlm_mean, a->mlm_rstd, p->mlm_ln_g, M, D);
        tro_act_bwd(c->mlm_act, d2, a->mlm_t1, (size_t)M * D);
        tro_linear_bwd(d3, 0, g->mlm_w, g->mlm_b, d2, a->mlm_h, p->mlm_w, a->ones, M, D, D);
        for (int i = 0; i < M; i++) {
            float *r = dy + (size_t)a->mlm_rows[i] * D;
            for (int j = 0; j < D; j++) r[j] += d3[(size_t)i * D + j];
        }
    }
    for (int l = L - 1; l >= 0; l--) {
        layer_bwd(m, a, b, l, dy, dx, pg);
        float *t = dy;
        dy = dx;
        dx = t;
    }
    /* embeddings: x0 = dropout(LN_e(e)), e = wte[id] + wpe[pos] + wtt[type] */
    memcpy(a->d_emb_out, dy, ND * sizeof(float));
    tro_dropout(dy, ND, a->p_hidden, a->seed, SITE_EMB);
    tro_layernorm_bwd(a->d_emb_sum, g->ln_e_g, g->ln_e_b, dy, a->emb_sum, a->emb_mean, a->emb_rstd, p->ln_e_g, N, D);
    if (!pg) return;
    for (int r = 0; r < N; r++) {
        const float *d = a->d_emb_sum + (size_t)r * D;
        float *gw = b->word_embeds ? NULL : g->wte + (size_t)b->ids[r] * D;
        float *gp = g->wpe + (size_t)a->pos[r] * D;
        float *gt = g->wtt ? g->wtt + (size_t)(b->type_ids ? b->type_ids[r] : 0) * D : NULL;
        for (int i = 0; i < D; i++) {
            if (gw) gw[i] += d[i];
            gp[i] += d[i];
            if (gt) gt[i] += d[i];
        }
    }
}
