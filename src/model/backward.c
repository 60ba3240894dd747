/* backward.c — the backward of the one forward (encoder.c) for every family, to the
 * input word vectors and the attention probabilities: the gradient of y = sum(dlogits *
 * logits) through the task head, every layer (post-LN and pre-norm; LayerNorm / RMSNorm,
 * (gated) MLP, grouped-query attention with soft-caps, q/k norms and RoPE) and the
 * embeddings. It reads the weights where the forward does (mmap'd, in place; BF16
 * widened block by block, or at precision bf16 multiplied as BF16 in the input gradients
 * dx = dy W, as the forward's products are) and what the forward saved in a model_tape;
 * norm statistics and the head's small intermediates are recomputed. Threads: the pool (par_ops.c:
 * linear maps split columns; attention one head per task).
 * With a model_grads it also accumulates every parameter's gradient (the inputs of the
 * linear maps and norms recomputed from the tape). What it does not: ablated forwards.
 *
 * Per head h reading key/value head g, with P (T, T), S the scores after soft-capping:
 *   dP = dctx_h V_g^T,  dV_g += P^T dctx_h,  dS = P * (dP - rowsum(dP * P)),
 *   soft-cap c: dS *= 1 - (S / c)^2,  dQ_h = scale dS K_g,  dK_g += scale dS^T Q_h.
 */
#include "model/model.h"
#include "model/ops.h"
#include "core/gemm_bf16.h"
#include "core/pool.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* ---- the tape ---- */

/* Floats of one layer's tape, and the pointers into p when p is non-NULL. */
static size_t tape_layer_take(const as_model *m, int T, float *p, tape_layer *tl) {
    const as_config *c = &m->cfg;
    size_t TD = (size_t)T * c->d_model, TQ = (size_t)T * c->n_head * c->d_head;
    size_t TK = (size_t)T * c->n_kv_head * c->d_head, TF = (size_t)T * c->d_ff;
    size_t HTT = (size_t)c->n_head * T * T, off = 0;
    int post = m->layers[0].post_attn.g != NULL, qkn = m->layers[0].q_norm.g != NULL;
    struct { float **dst; size_t n; int on; } f[] = {
        {&tl->x_in, TD, 1}, {&tl->mid, TD, 1}, {&tl->r2, TD, !m->pre_ln || post}, {&tl->o_out, TD, post},
        {&tl->qn_in, TQ, qkn}, {&tl->kn_in, TK, qkn}, {&tl->q, TQ, 1}, {&tl->k, TK, 1}, {&tl->v, TK, 1},
        {&tl->P, HTT, 1}, {&tl->S, HTT, c->attn_softcap > 0}, {&tl->ff_pre, TF, 1}, {&tl->up, TF, c->gated_mlp},
        {&tl->ctx, TQ, 1}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (p) *f[i].dst = f[i].on ? p + off : NULL;
        if (f[i].on) off += f[i].n;
    }
    return off;
}

as_status model_tape_init(const as_model *m, int T, model_tape *tp, as_error *err) {
    memset(tp, 0, sizeof *tp);
    tape_layer probe;
    size_t per = tape_layer_take(m, T, NULL, &probe), L = (size_t)m->cfg.n_layer;
    size_t n = per * L + (size_t)T * m->cfg.d_model;
    tp->lay = as_calloc(L, sizeof *tp->lay);
    tp->block = n <= SIZE_MAX / sizeof(float) ? as_large_get(n * sizeof(float), &tp->cap) : NULL;
    if (!tp->lay || !tp->block) {
        model_tape_free(tp);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for the backward's saved activations (%zu MB)",
                          n * sizeof(float) >> 20);
    }
    for (size_t l = 0; l < L; l++) tape_layer_take(m, T, tp->block + l * per, &tp->lay[l]);
    tp->x_last = tp->block + L * per;
    tp->T = T;
    return AS_OK;
}

void model_tape_free(model_tape *tp) {
    if (!tp) return;
    free(tp->lay);
    as_large_put(tp->block, tp->cap);
    free(tp->drop_block);
    memset(tp, 0, sizeof *tp);
}

as_status model_tape_dropout(const as_model *m, model_tape *tp, float p, as_error *err) {
    if (!(p >= 0.0f && p < 1.0f)) return as_err_set(err, AS_ERR_INPUT, "dropout %g is outside [0, 1)", (double)p);
    const as_config *c = &m->cfg;
    size_t TD = (size_t)tp->T * c->d_model, HTT = (size_t)c->n_head * tp->T * tp->T, L = (size_t)c->n_layer;
    size_t ncls = lin_has(&m->cls_pre) ? (size_t)m->cls_pre.n_out : 0;
    size_t n = TD + ncls + L * (HTT + 2 * TD);
    if (p > 0.0f && !tp->drop_block) {
        tp->drop_block = n <= SIZE_MAX / sizeof(float) ? as_malloc_array(n, sizeof(float)) : NULL;
        if (!tp->drop_block)
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory for the dropout masks (%zu MB)",
                              n * sizeof(float) >> 20);
    }
    float *q = p > 0.0f ? tp->drop_block : NULL;
#define TAKE(k) (q ? (q += (k)) - (k) : NULL)
    tp->m_emb = TAKE(TD);
    tp->m_cls = ncls ? TAKE(ncls) : NULL;
    for (size_t l = 0; l < L; l++) {
        tp->lay[l].m_attn = TAKE(HTT);
        tp->lay[l].m_ao = TAKE(TD);
        tp->lay[l].m_ff = TAKE(TD);
    }
#undef TAKE
    tp->p_drop = p;
    return AS_OK;
}

/* ---- parameter gradients ---- */

/* Floats for every gradient buffer of m; with base non-NULL, the pointers into it. */
static size_t grads_take(const as_model *m, float *base, model_grads *g) {
    const as_config *c = &m->cfg;
    size_t off = 0;
#define TAKE(dst, n, on)                                  \
    do {                                                  \
        size_t n_ = (on) ? (size_t)(n) : 0;               \
        if (base) (dst) = n_ ? base + off : NULL;         \
        off += n_;                                        \
    } while (0)
#define TAKE_LIN(lg, l)                                                                  \
    do {                                                                                 \
        TAKE((lg).w, (size_t)(l).n_out * (l).n_in, lin_has(&(l)));                       \
        TAKE((lg).b, (l).n_out, (l).b != NULL);                                         \
    } while (0)
#define TAKE_LN(lg, ln)                       \
    do {                                      \
        TAKE((lg).g, (ln).n, (ln).g != NULL); \
        TAKE((lg).b, (ln).n, (ln).b != NULL); \
    } while (0)
    int De = c->d_embed;
    TAKE(g->wte, (size_t)c->vocab_size * De, m->wte || m->wte_bf);
    TAKE(g->wpe, (size_t)c->max_pos * De, m->wpe != NULL);
    TAKE(g->wtt, (size_t)c->type_vocab * De, m->wtt != NULL);
    TAKE(g->mlm_decoder, (size_t)c->vocab_size * c->d_model, m->mlm_decoder && m->mlm_decoder != m->wte);
    TAKE(g->mlm_bias, c->vocab_size, m->mlm_bias != NULL);
    TAKE_LN(g->ln_emb, m->ln_emb);
    TAKE_LN(g->ln_f, m->ln_f);
    TAKE_LN(g->mlm_ln, m->mlm_ln);
    TAKE_LIN(g->emb_proj, m->emb_proj);
    TAKE_LIN(g->cls_pre, m->cls_pre);
    TAKE_LIN(g->cls_out, m->cls_out);
    TAKE_LIN(g->mlm_dense, m->mlm_dense);
    /* the LM head's own gradient; none when it is tied to wte (BF16 in place) or is the
       masked-LM decoder seen as a linear map (precision bf16: its gradient is wte's or
       mlm_decoder's), so the layout does not change with the precision */
    if (!(m->lm_head.wbf && m->lm_head.wbf == m->wte_bf) && !model_lm_head_is_decoder(m))
        TAKE_LIN(g->lm_head, m->lm_head);
    for (int l = 0; l < c->n_layer; l++) {
        const layer_w *w = &m->layers[l];
        layer_grad *lg = base ? &g->layers[l] : &(layer_grad){0};
        TAKE_LIN(lg->q, w->q);
        TAKE_LIN(lg->k, w->k);
        TAKE_LIN(lg->v, w->v);
        TAKE_LIN(lg->o, w->o);
        TAKE_LIN(lg->ff1, w->ff1);
        TAKE_LIN(lg->up, w->up);
        TAKE_LIN(lg->ff2, w->ff2);
        TAKE_LN(lg->ln1, w->ln1);
        TAKE_LN(lg->ln2, w->ln2);
        TAKE_LN(lg->post_attn, w->post_attn);
        TAKE_LN(lg->post_ff, w->post_ff);
        TAKE_LN(lg->q_norm, w->q_norm);
        TAKE_LN(lg->k_norm, w->k_norm);
    }
#undef TAKE_LN
#undef TAKE_LIN
#undef TAKE
    return off;
}

as_status model_grads_init(const as_model *m, model_grads *g, as_error *err) {
    memset(g, 0, sizeof *g);
    model_grads probe = {0};
    size_t n = grads_take(m, NULL, &probe);
    g->layers = as_calloc((size_t)m->cfg.n_layer, sizeof *g->layers);
    g->block = as_calloc_large(n ? n : 1, sizeof(float));
    if (!g->layers || !g->block) {
        model_grads_free(g);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for the parameter gradients (%zu MB)",
                          n * sizeof(float) >> 20);
    }
    g->n = n;
    grads_take(m, g->block, g);
    return AS_OK;
}

void model_grads_zero(model_grads *g) {
    if (g->block) memset(g->block, 0, g->n * sizeof(float));
}

void model_grads_free(model_grads *g) {
    if (!g) return;
    free(g->layers);
    free(g->block);
    memset(g, 0, sizeof *g);
}

/* ---- pieces ---- */

/* Workspace of one backward (floats); Qw = H Dh, Kw = Hkv Dh, W = max(D, De). */
typedef struct {
    float *dx, *dmid, *g, *dh;  /* (T, W) */
    float *tmp;                 /* (T, W) recomputed activations */
    float *dctx, *dq;           /* (T, Qw) */
    float *dk, *dv;             /* (T, Kw) */
    float *dkh, *dvh;           /* (H, T, Dh) per query head, summed into their group */
    float *da, *dup;            /* (T, F) */
    float *dP;                  /* (nthreads, T, T) */
    float *pd;                  /* (nthreads, T, T) P * dropout mask; NULL without dropout */
    float *stat;                /* (2, T H) mean, rstd (the q norm's rows are T H) */
    float *rope;                /* (2, T, R) */
    float *conv;                /* linear maps' scratch (par_ops.c) */
    size_t conv_per_thread;
    float *hn;                  /* (T, max(W, F)) a linear map's recomputed input */
    float *cls;                 /* (4, W) the classifier's intermediates */
    model_grads *pg;            /* parameter gradients, or NULL */
} bwd_ws;

/* dx (T, n) = the gradient through the norm ln of width n (RMSNorm when rms, (1 + w) when add_one,
 * else LayerNorm) applied to x (T, n), given dy; statistics recomputed from x. No norm
 * (g NULL): dx = dy. dx may alias dy. stat: (2, T) scratch. lg, when non-NULL, accumulates
 * the gain (and bias) gradients. */
static void norm_dx_as(const ln_t *ln, int rms, int add_one, float eps, const float *dy, const float *x, int T,
                       int n, float *dx, float *stat, ln_grad *lg) {
    if (!ln->g) {
        if (dx != dy) memcpy(dx, dy, (size_t)T * n * sizeof(float));
        return;
    }
    float *mean = stat, *rstd = stat + T;
    for (int t = 0; t < T; t++) { /* the forward's statistics, recomputed */
        const float *r = x + (size_t)t * n;
        if (rms) {
            float ss = 0.0f;
            for (int i = 0; i < n; i++) ss += r[i] * r[i];
            rstd[t] = 1.0f / sqrtf(ss / (float)n + eps);
        } else {
            float mu = 0.0f, v = 0.0f;
            for (int i = 0; i < n; i++) mu += r[i];
            mu /= (float)n;
            for (int i = 0; i < n; i++) v += (r[i] - mu) * (r[i] - mu);
            v /= (float)n;
            mean[t] = mu;
            rstd[t] = (float)(1.0 / sqrt((double)v + (double)eps));
        }
    }
    if (lg && lg->g) { /* before dx, which may overwrite dy */
        if (rms) op_rmsnorm_dg(lg->g, dy, x, rstd, T, n, 0, n);
        else op_layernorm_dparams(lg->g, lg->b, dy, x, mean, rstd, T, n, 0, n);
    }
    if (rms) op_rmsnorm_dx(dx, dy, x, rstd, ln->g, T, n, add_one);
    else op_layernorm_dx(dx, dy, x, mean, rstd, ln->g, T, n);
}

/* norm_dx_as with the model's own norm (the layers' and the final one). */
static void norm_dx(const as_model *m, const ln_t *ln, const float *dy, const float *x, int T, int n, float *dx,
                    float *stat, ln_grad *lg) {
    norm_dx_as(ln, m->cfg.rms_norm, m->cfg.norm_add_one, m->cfg.ln_eps, dy, x, T, n, dx, stat, lg);
}

/* A layer's gradients, or NULL when not accumulating. */
#define LG(w, l) ((w)->pg ? &(w)->pg->layers[l] : NULL)

/* The weight (and bias) gradient of map l from its input x and output gradient dy. */
static void lin_dw(const lin_t *l, lin_grad *lg, const float *x, const float *dy, int T) {
    if (lg) op_linear_dw(l, x, dy, T, lg->w, lg->b);
}

/* LN(x) with a LayerNorm ln (the embeddings' of the BERT family) into out (T, ln->n). */
static const float *normed_ln(const as_model *m, const ln_t *ln, const float *x, int T, float *out) {
    memcpy(out, x, (size_t)T * ln->n * sizeof(float));
    op_layernorm(ln, m->cfg.ln_eps, out, T);
    return out;
}

/* x (T, n) copied into out and normalised as the forward did (the input of the map after a norm). */
static const float *normed(const as_model *m, const ln_t *ln, const float *x, int T, int n, float *out) {
    memcpy(out, x, (size_t)T * n * sizeof(float));
    model_norm_rows(m, ln, out, T);
    return out;
}

typedef struct {
    const tape_layer *tl;
    bwd_ws *w;
    float *d_attn; /* (H, T, T) of this layer or NULL */
    int T, H, Hkv, Dh;
    float scale, softcap;
} attn_bwd_job;

static void attn_bwd_task(void *ctx, int h, int tid) {
    const attn_bwd_job *j = ctx;
    const tape_layer *tl = j->tl;
    bwd_ws *w = j->w;
    int T = j->T, Dh = j->Dh, g = h / (j->H / j->Hkv), ldq = j->H * Dh, ldk = j->Hkv * Dh;
    size_t TT = (size_t)T * T;
    const float *P = tl->P + (size_t)h * TT, *dctx = w->dctx + (size_t)h * Dh;
    float *dP = w->dP + (size_t)tid * TT;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, Dh, 1.0f, dctx, ldq, tl->v + (size_t)g * Dh, ldk,
                0.0f, dP, T);
    if (j->d_attn) memcpy(j->d_attn + (size_t)h * TT, dP, TT * sizeof(float));
    const float *Pv = P; /* what multiplied V */
    if (tl->m_attn) { /* dropout: ctx = (P * M) V, so dP = (dctx V^T) * M and dV = (P * M)^T dctx */
        const float *dm = tl->m_attn + (size_t)h * TT;
        float *pd = w->pd + (size_t)tid * TT;
        for (size_t i = 0; i < TT; i++) pd[i] = P[i] * dm[i], dP[i] *= dm[i];
        Pv = pd;
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, Dh, T, 1.0f, Pv, T, dctx, ldq, 0.0f,
                w->dvh + (size_t)h * T * Dh, Dh);
    for (int i = 0; i < T; i++) { /* softmax backward, then the soft-cap's */
        float *d = dP + (size_t)i * T;
        const float *p = P + (size_t)i * T;
        float dot = 0.0f;
        for (int k = 0; k < T; k++) dot += d[k] * p[k];
        for (int k = 0; k < T; k++) d[k] = p[k] * (d[k] - dot);
        if (j->softcap > 0.0f) {
            const float *s = tl->S + (size_t)h * TT + (size_t)i * T;
            for (int k = 0; k < T; k++) {
                float th = p[k] > 0.0f ? s[k] / j->softcap : 0.0f;
                d[k] *= 1.0f - th * th;
            }
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, Dh, T, j->scale, dP, T, tl->k + (size_t)g * Dh, ldk,
                0.0f, w->dq + (size_t)h * Dh, ldq);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, Dh, T, j->scale, dP, T, tl->q + (size_t)h * Dh, ldq,
                0.0f, w->dkh + (size_t)h * T * Dh, Dh);
}

/* From w->dctx (T, Qw), the gradient of the attention's input into `out` (T, D). */
static void attention_bwd(const as_model *m, const layer_w *lw, const tape_layer *tl, int l, int T, bwd_ws *w,
                          float *d_attn, int nthreads, float *out) {
    const as_config *c = &m->cfg;
    int H = c->n_head, Hkv = c->n_kv_head, Dh = c->d_head, Kw = Hkv * Dh;
    attn_bwd_job j = {tl, w, d_attn, T, H, Hkv, Dh, as_attn_scale(c, l), c->attn_softcap};
    as_parallel_for(H, nthreads, attn_bwd_task, &j);
    memset(w->dk, 0, (size_t)T * Kw * sizeof(float));
    memset(w->dv, 0, (size_t)T * Kw * sizeof(float));
    for (int h = 0; h < H; h++) { /* each query head's dK, dV into its group's */
        int g = h / (H / Hkv);
        const float *dk = w->dkh + (size_t)h * T * Dh, *dv = w->dvh + (size_t)h * T * Dh;
        for (int t = 0; t < T; t++)
            for (int i = 0; i < Dh; i++) {
                w->dk[(size_t)t * Kw + (size_t)g * Dh + i] += dk[(size_t)t * Dh + i];
                w->dv[(size_t)t * Kw + (size_t)g * Dh + i] += dv[(size_t)t * Dh + i];
            }
    }
    if (c->rope_dim > 0) {
        int local = c->rope_local_theta > 0 && c->layer_sliding[l];
        const float *cs = w->rope + (local ? (size_t)T * c->rope_dim : 0);
        op_rope_bwd(w->dq, T, (size_t)H * Dh, H, Dh, c->rope_dim, cs);
        op_rope_bwd(w->dk, T, (size_t)Kw, Hkv, Dh, c->rope_dim, cs);
    }
    layer_grad *lg = LG(w, l);
    if (lw->q_norm.g) { /* rows of Dh */
        norm_dx(m, &lw->q_norm, w->dq, tl->qn_in, T * H, Dh, w->dq, w->stat, lg ? &lg->q_norm : NULL);
        norm_dx(m, &lw->k_norm, w->dk, tl->kn_in, T * Hkv, Dh, w->dk, w->stat, lg ? &lg->k_norm : NULL);
    }
    if (lg) { /* the maps' input: the layer input, normalised for pre-norm models */
        const float *x = m->pre_ln ? normed(m, &lw->ln1, tl->x_in, T, c->d_model, w->hn) : tl->x_in;
        lin_dw(&lw->q, &lg->q, x, w->dq, T);
        lin_dw(&lw->k, &lg->k, x, w->dk, T);
        lin_dw(&lw->v, &lg->v, x, w->dv, T);
    }
    op_linear_dx(&lw->q, w->dq, T, out, 0);
    op_linear_dx(&lw->k, w->dk, T, out, 1);
    op_linear_dx(&lw->v, w->dv, T, out, 1);
}

/* The MLP's input gradient into out (T, D) from dy (T, D); x: its input (T, D), read
 * for the weight gradients only. */
static void mlp_bwd(const as_model *m, const layer_w *lw, const tape_layer *tl, int T, const float *dy,
                    const float *x, bwd_ws *w, layer_grad *lg, float *out) {
    size_t TF = (size_t)T * m->cfg.d_ff;
    if (lg) { /* ff2's input: act(gate) (* up), recomputed; ungated, act' (into dup) with it */
        if (m->cfg.gated_mlp) op_glu_fwd(m->cfg.act, w->hn, tl->ff_pre, tl->up, TF);
        else op_act_fwd_deriv(m->cfg.act, w->hn, w->dup, tl->ff_pre, TF);
        lin_dw(&lw->ff2, &lg->ff2, w->hn, dy, T);
    }
    op_linear_dx(&lw->ff2, dy, T, w->da, 0);
    if (m->cfg.gated_mlp) {
        op_glu_bwd(m->cfg.act, w->da, w->dup, w->da, tl->ff_pre, tl->up, TF);
        if (lg) {
            lin_dw(&lw->ff1, &lg->ff1, x, w->da, T);
            lin_dw(&lw->up, &lg->up, x, w->dup, T);
        }
        op_linear_dx(&lw->ff1, w->da, T, out, 0);
        op_linear_dx(&lw->up, w->dup, T, out, 1);
    } else {
        if (lg) op_mul(w->da, w->dup, TF);
        else op_act_bwd(m->cfg.act, w->da, tl->ff_pre, TF);
        if (lg) lin_dw(&lw->ff1, &lg->ff1, x, w->da, T);
        op_linear_dx(&lw->ff1, w->da, T, out, 0);
    }
}

static void add_to(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

/* w->dx (T, D): the gradient of layer l's output, replaced by that of its input. */
static void layer_bwd(const as_model *m, int l, const tape_layer *tl, int T, bwd_ws *w, float *d_attn,
                      int nthreads) {
    const layer_w *lw = &m->layers[l];
    layer_grad *lg = LG(w, l);
    int D = m->cfg.d_model;
    size_t TD = (size_t)T * D;
    if (m->pre_ln) { /* x_out = mid + N_pf(MLP(N2(mid))), mid = x_in + N_pa(O(Attn(N1(x_in)))) */
        memcpy(w->dmid, w->dx, TD * sizeof(float));
        const float *dy = w->dx; /* dropout after the output norm: its output's gradient is masked */
        if (tl->m_ff) {
            for (size_t i = 0; i < TD; i++) w->g[i] = w->dx[i] * tl->m_ff[i];
            dy = w->g;
        }
        norm_dx(m, &lw->post_ff, dy, tl->r2, T, D, w->g, w->stat, lg ? &lg->post_ff : NULL);
        const float *h2 = lg ? normed(m, &lw->ln2, tl->mid, T, D, w->tmp) : NULL;
        mlp_bwd(m, lw, tl, T, w->g, h2, w, lg, w->dh);
        norm_dx(m, &lw->ln2, w->dh, tl->mid, T, D, w->dh, w->stat, lg ? &lg->ln2 : NULL);
        add_to(w->dmid, w->dh, TD);
        dy = w->dmid;
        if (tl->m_ao) {
            for (size_t i = 0; i < TD; i++) w->g[i] = w->dmid[i] * tl->m_ao[i];
            dy = w->g;
        }
        norm_dx(m, &lw->post_attn, dy, tl->o_out, T, D, w->g, w->stat, lg ? &lg->post_attn : NULL);
        if (lg) lin_dw(&lw->o, &lg->o, tl->ctx, w->g, T);
        op_linear_dx(&lw->o, w->g, T, w->dctx, 0);
        attention_bwd(m, lw, tl, l, T, w, d_attn, nthreads, w->dh);
        norm_dx(m, &lw->ln1, w->dh, tl->x_in, T, D, w->dh, w->stat, lg ? &lg->ln1 : NULL);
        for (size_t i = 0; i < TD; i++) w->dx[i] = w->dmid[i] + w->dh[i];
    } else { /* x_out = LN2(r2), r2 = h1 + FF(h1), h1 = LN1(mid), mid = x_in + O(Attn(x_in)) */
        norm_dx(m, &lw->ln2, w->dx, tl->r2, T, D, w->g, w->stat, lg ? &lg->ln2 : NULL);
        const float *h1 = lg ? normed(m, &lw->ln1, tl->mid, T, D, w->tmp) : NULL;
        const float *dy = w->g; /* the sub-layers' output gradients, masked by their dropout */
        if (tl->m_ff) {
            for (size_t i = 0; i < TD; i++) w->dmid[i] = w->g[i] * tl->m_ff[i];
            dy = w->dmid;
        }
        mlp_bwd(m, lw, tl, T, dy, h1, w, lg, w->dh);
        add_to(w->dh, w->g, TD);
        norm_dx(m, &lw->ln1, w->dh, tl->mid, T, D, w->dh, w->stat, lg ? &lg->ln1 : NULL);
        dy = w->dh;
        if (tl->m_ao) {
            for (size_t i = 0; i < TD; i++) w->g[i] = w->dh[i] * tl->m_ao[i];
            dy = w->g;
        }
        if (lg) lin_dw(&lw->o, &lg->o, tl->ctx, dy, T);
        op_linear_dx(&lw->o, dy, T, w->dctx, 0);
        attention_bwd(m, lw, tl, l, T, w, d_attn, nthreads, w->dx);
        add_to(w->dx, w->dh, TD);
    }
}

/* ---- the task head ---- */

/* The head's input row of a classifier (as model_head_logits picks it). */
static int cls_row(const as_model *m, const as_encoding *enc) {
    int t = 0;
    if (m->cls_last_token)
        for (int i = 0; i < enc->n; i++)
            if (enc->mask[i] && (m->cfg.pad_token_id < 0 || enc->ids[i] != m->cfg.pad_token_id)) t = i;
    return t;
}

static void vocab_bwd(const as_model *m, const float *x, int T, const float *dl, bwd_ws *w);

/* w->dx (T, D) = dy / d(the head's input: the last layer's output, after a final norm
 * for pre-norm models) for y = sum(dlogits * logits) (dlogits NULL: 0), and the head's
 * parameter gradients when accumulating. x: that input (T, D). */
static void head_bwd(const as_model *m, const as_encoding *enc, const as_run *r, const float *x,
                     const float *dlogits, const float *cls_mask, bwd_ws *w) {
    const as_config *c = &m->cfg;
    model_grads *pg = w->pg;
    int T = enc->n, D = c->d_model, V = c->vocab_size;
    memset(w->dx, 0, (size_t)T * D * sizeof(float));
    if (!dlogits) return;
    if (r->logits_head == HEAD_CLASSIFIER) {
        int t = cls_row(m, enc);
        const float *x0 = x + (size_t)t * D;
        float *dh0 = w->dx + (size_t)t * D;
        if (!lin_has(&m->cls_pre)) {
            if (pg) lin_dw(&m->cls_out, &pg->cls_out, x0, dlogits, 1);
            op_linear_dx(&m->cls_out, dlogits, 1, dh0, 0);
            return;
        }
        int n = m->cls_pre.n_out;
        float *z = w->cls, *dz = w->cls + n, *a = w->cls + 2 * (size_t)n; /* (1, n) each */
        op_linear(&m->cls_pre, x0, 1, z);
        for (int i = 0; i < n; i++) /* the forward's activation (cls_act in encoder.c) */
            a[i] = m->cls_pre_act == CLS_ACT_TANH ? tanhf(z[i]) : m->cls_pre_act == CLS_ACT_RELU ? (z[i] > 0 ? z[i] : 0)
                                                                                                  : z[i];
        if (m->cls_pre_act == CLS_ACT_GELU) op_act_fwd(ACT_GELU, a, z, (size_t)n);
        const float *ad = a; /* cls_out's input: a, or with dropout a * mask */
        if (cls_mask) {
            float *t = w->cls + 3 * (size_t)n;
            for (int i = 0; i < n; i++) t[i] = a[i] * cls_mask[i];
            ad = t;
        }
        if (pg) lin_dw(&m->cls_out, &pg->cls_out, ad, dlogits, 1);
        op_linear_dx(&m->cls_out, dlogits, 1, dz, 0);
        if (cls_mask) op_mul(dz, cls_mask, (size_t)n);
        for (int i = 0; i < n; i++) {
            switch (m->cls_pre_act) {
            case CLS_ACT_TANH: dz[i] *= 1.0f - a[i] * a[i]; break;
            case CLS_ACT_RELU: dz[i] = z[i] > 0.0f ? dz[i] : 0.0f; break;
            default: break;
            }
        }
        if (m->cls_pre_act == CLS_ACT_GELU) op_act_bwd(ACT_GELU, dz, z, (size_t)n);
        if (pg) lin_dw(&m->cls_pre, &pg->cls_pre, x0, dz, 1);
        op_linear_dx(&m->cls_pre, dz, 1, dh0, 0);
        return;
    }
    float *dl = w->da; /* (T, V) fits: da is (T, max(F, V)) */
    memcpy(dl, dlogits, (size_t)T * V * sizeof(float));
    if (c->final_softcap > 0.0f)
        for (size_t i = 0; i < (size_t)T * V; i++) {
            float th = r->logits[i] / c->final_softcap;
            dl[i] *= 1.0f - th * th;
        }
    vocab_bwd(m, x, T, dl, w);
}

/* w->dx (n, D) = the gradient through the vocabulary head (masked-LM transform + decoder,
 * or the LM head) on rows x (n, D), from dl (n, V); the head's parameter gradients when
 * accumulating. Scratch: w->tmp, dh, hn, g (n, D), stat (2, n). */
static void vocab_bwd(const as_model *m, const float *x, int T, const float *dl, bwd_ws *w) {
    const as_config *c = &m->cfg;
    model_grads *pg = w->pg;
    int D = c->d_model, V = c->vocab_size;
    lin_t dec = {.w = m->mlm_decoder, .b = m->mlm_bias, .n_in = D, .n_out = V, .ldw = D};
    int own = lin_has(&m->lm_head);
    const lin_t *out = own ? &m->lm_head : &dec;
    /* the decoder's weight gradient: its own buffer, or the tied word embeddings' */
    lin_grad dg = {NULL, NULL};
    if (pg) {
        if (!own || model_lm_head_is_decoder(m)) { /* the decoder (a linear map over it at bf16) */
            dg.w = m->mlm_decoder == m->wte ? pg->wte : pg->mlm_decoder;
            dg.b = pg->mlm_bias;
        } else if (m->lm_head.wbf == m->wte_bf && m->wte_bf) dg.w = pg->wte; /* tied, BF16 in place */
        else dg = pg->lm_head;
    }
    if (!lin_has(&m->mlm_dense)) {
        if (pg) op_linear_dw(out, x, dl, T, dg.w, dg.b);
        op_linear_dx(out, dl, T, w->dx, 0);
        return;
    }
    /* masked-LM transform: u = LN(act(dense(x))), logits = u W_dec^T + b */
    float *z = w->tmp, *a = w->dh; /* dense output, its activation (T, D) */
    op_linear(&m->mlm_dense, x, T, z);
    memcpy(a, z, (size_t)T * D * sizeof(float));
    op_act(m->mlm_act, a, (size_t)T * D);
    if (pg) { /* the decoder's input: u = LN(a) */
        memcpy(w->hn, a, (size_t)T * D * sizeof(float));
        op_layernorm(&m->mlm_ln, c->ln_eps, w->hn, T);
        op_linear_dw(out, w->hn, dl, T, dg.w, dg.b);
    }
    op_linear_dx(out, dl, T, w->g, 0);
    norm_dx_as(&m->mlm_ln, 0, 0, c->ln_eps, w->g, a, T, D, w->g, w->stat, pg ? &pg->mlm_ln : NULL); /* a LayerNorm */
    op_act_bwd(m->mlm_act, w->g, z, (size_t)T * D);
    if (pg) lin_dw(&m->mlm_dense, &pg->mlm_dense, x, w->g, T);
    op_linear_dx(&m->mlm_dense, w->g, T, w->dx, 0);
}

/* ---- the driver ---- */

/* row += s * g over n values */
static void add_row(float *row, const float *g, int n, float s) {
    for (int i = 0; i < n; i++) row[i] += s * g[i];
}

/* The embedding tables' gradients from de (T, De), the gradient of the embedding sum:
 * the rows each token looked up (its word unless the word vectors were given, its
 * position, its segment; GPT-2's wte[type id] when type ids were given). */
static void table_grads(const as_model *m, const as_encoding *enc, const float *word, const float *de, float sc,
                        model_grads *pg) {
    const as_config *c = &m->cfg;
    int T = enc->n, De = c->d_embed, count = 0;
    for (int t = 0; t < T; t++) {
        const float *g = de + (size_t)t * De;
        if (!word && pg->wte) add_row(pg->wte + (size_t)enc->ids[t] * De, g, De, sc);
        if (pg->wpe) add_row(pg->wpe + (size_t)bert_position(m, enc, t, &count) * De, g, De, 1.0f);
        if (pg->wtt) add_row(pg->wtt + (size_t)(enc->type_ids ? enc->type_ids[t] : 0) * De, g, De, 1.0f);
        if (c->arch == ARCH_GPT2 && enc->type_ids_given && enc->type_ids && pg->wte)
            add_row(pg->wte + (size_t)enc->type_ids[t] * De, g, De, 1.0f);
    }
}

/* From w->dx = d(embedding output) to d_word (T, De; may be NULL) and the embeddings'
 * parameter gradients. */
static void embed_bwd(const as_model *m, const as_encoding *enc, const float *word, bwd_ws *w, float *d_word) {
    const as_config *c = &m->cfg;
    model_grads *pg = w->pg;
    int T = enc->n, D = c->d_model;
    emb_in in = {enc, 0, word, 0, 0};
    float *de = w->dh; /* (T, De) the gradient of the embedding sum */
    float sc = 1.0f;
    switch (c->arch) {
    case ARCH_BERT:
    case ARCH_ROBERTA:
    case ARCH_DISTILBERT: {
        const float *g = w->dx;
        if (c->arch == ARCH_DISTILBERT) distilbert_embed_sum(m, &in, w->tmp);
        else bert_embed_sum(m, &in, w->tmp);
        if (lin_has(&m->emb_proj)) { /* ELECTRA: x0 = proj(LN(e)) */
            if (pg) lin_dw(&m->emb_proj, &pg->emb_proj, normed_ln(m, &m->ln_emb, w->tmp, T, w->hn), w->dx, T);
            op_linear_dx(&m->emb_proj, w->dx, T, w->g, 0);
            g = w->g;
        }
        norm_dx_as(&m->ln_emb, 0, 0, c->ln_eps, g, w->tmp, T, c->d_embed, de, w->stat, pg ? &pg->ln_emb : NULL);
        break;
    }
    case ARCH_GPT2: memcpy(de, w->dx, (size_t)T * D * sizeof(float)); break;
    case ARCH_LLAMA: {
        sc = c->emb_scale > 0 ? c->emb_scale : 1.0f;
        memcpy(de, w->dx, (size_t)T * D * sizeof(float));
        break;
    }
    case ARCH_BART:
    case ARCH_T5: break; /* never reached: model_forward keeps no tape of an encoder-decoder model */
    }
    if (d_word)
        for (size_t i = 0; i < (size_t)T * c->d_embed; i++) d_word[i] = de[i] * sc;
    if (pg) table_grads(m, enc, word, de, sc, pg);
}

static as_status backward_run(const as_model *m, const as_encoding *enc, const float *word, const model_tape *tp,
                              const as_run *r, const float *dlogits, const float *d_top, int threads,
                              float *d_word, float *d_attn, model_grads *pg, as_error *err);

as_status model_backward(const as_model *m, const as_encoding *enc, const float *word, const model_tape *tp,
                         const as_run *r, const float *dlogits, int threads, float *d_word, float *d_attn,
                         as_error *err) {
    return model_backward_params(m, enc, word, tp, r, dlogits, threads, d_word, d_attn, NULL, err);
}

as_status model_backward_params(const as_model *m, const as_encoding *enc, const float *word,
                                const model_tape *tp, const as_run *r, const float *dlogits, int threads,
                                float *d_word, float *d_attn, model_grads *pg, as_error *err) {
    return backward_run(m, enc, word, tp, r, dlogits, NULL, threads, d_word, d_attn, pg, err);
}

as_status model_backward_top(const as_model *m, const as_encoding *enc, const model_tape *tp, const as_run *r,
                             const float *dlogits, const float *d_top, int threads, model_grads *pg,
                             as_error *err) {
    return backward_run(m, enc, NULL, tp, r, dlogits, d_top, threads, NULL, NULL, pg, err);
}

static as_status backward_run(const as_model *m, const as_encoding *enc, const float *word, const model_tape *tp,
                              const as_run *r, const float *dlogits, const float *d_top, int threads,
                              float *d_word, float *d_attn, model_grads *pg, as_error *err) {
    const as_config *c = &m->cfg;
    int T = enc->n, L = c->n_layer, H = c->n_head, Dh = c->d_head, nt = threads > 0 ? threads : as_n_cores();
    if (!tp || tp->T != T || !r || (dlogits && !r->logits) || r->n_run != L)
        return as_err_set(err, AS_ERR_INTERNAL, "model_backward: the forward did not save what backward needs");
    size_t W = (size_t)(c->d_embed > c->d_model ? c->d_embed : c->d_model), Qw = (size_t)H * Dh;
    size_t Kw = (size_t)c->n_kv_head * Dh, TT = (size_t)T * T, R = (size_t)c->rope_dim;
    size_t FV = (size_t)(c->d_ff > c->vocab_size ? c->d_ff : c->vocab_size);
    size_t max_in = W > Qw ? W : Qw;
    if ((size_t)c->d_ff > max_in) max_in = (size_t)c->d_ff;
    size_t conv = as_gemm_bf16_scratch((int)max_in), conv_xw = as_gemm_bf16_xw_scratch((int)max_in);
    if (conv_xw > conv) conv = conv_xw;
    size_t WF = W > (size_t)c->d_ff ? W : (size_t)c->d_ff;
    /* precision bf16: the layers' dy in BF16, (T, widest output) (the vocabulary's stays F32) */
    size_t dyb = m->precision == AS_PRECISION_BF16 ? (size_t)T * (max_in > WF ? max_in : WF) : 0;
    /* precision bf16 with parameter gradients: both operands of a dW, (rows + columns, T),
       the vocabulary head's included */
    size_t dwb = m->precision == AS_PRECISION_BF16 && pg ? (size_t)T * (FV + max_in + WF) : 0;
    /* precision bf16: the BF16 input of the products the backward recomputes (the head's),
       rounded as the forward's were, (T, widest input) */
    size_t xb = m->precision == AS_PRECISION_BF16 ? (size_t)T * max_in : 0;
    size_t n = (size_t)T * (5 * W + WF + 2 * Qw + 2 * Kw + 2 * (size_t)H * Dh) + (size_t)T * (FV + c->d_ff) +
               (size_t)nt * TT * (tp->p_drop > 0.0f ? 2 : 1) + 2 * (size_t)T * H + 2 * (size_t)T * R +
               (size_t)nt * conv + 4 * W + (dyb + 1) / 2 + (dwb + 1) / 2 + (xb + 1) / 2;
    size_t cap = 0;
    float *blk = n <= SIZE_MAX / sizeof(float) ? as_large_get(n * sizeof(float), &cap) : NULL;
    if (!blk) return as_err_set(err, AS_ERR_INTERNAL, "out of memory for the backward workspace");
    bwd_ws w;
    float *p = blk;
#define TAKE(f, k) (w.f = p, p += (k))
    TAKE(dx, T * W); TAKE(dmid, T * W); TAKE(g, T * W); TAKE(dh, T * W); TAKE(tmp, T * W);
    TAKE(dctx, T * Qw); TAKE(dq, T * Qw); TAKE(dk, T * Kw); TAKE(dv, T * Kw);
    TAKE(dkh, (size_t)T * H * Dh); TAKE(dvh, (size_t)T * H * Dh);
    TAKE(da, T * FV); TAKE(dup, (size_t)T * c->d_ff); TAKE(dP, nt * TT); TAKE(stat, 2 * (size_t)T * H);
    TAKE(rope, 2 * (size_t)T * R); TAKE(conv, nt * conv); TAKE(hn, T * WF); TAKE(cls, 4 * W);
    w.pd = NULL;
    if (tp->p_drop > 0.0f) TAKE(pd, nt * TT);
#undef TAKE
    uint16_t *dyb_buf = dyb ? (uint16_t *)p : NULL; /* (dyb + 1) / 2 floats, (dwb + 1) / 2, (xb + 1) / 2 */
    uint16_t *dwb_buf = dwb ? (uint16_t *)(p + (dyb + 1) / 2) : NULL;
    uint16_t *xb_buf = xb ? (uint16_t *)(p + (dyb + 1) / 2 + (dwb + 1) / 2) : NULL;
    w.conv_per_thread = conv;
    w.pg = pg;
    as_status rs = R ? llama_rope_tables(m, 0, 1, T, 0, w.rope) : AS_OK;
    ASSERT(rs == AS_OK); /* R / 2 floats of frequencies */
    par_state saved;
    model_par_begin(nt, w.conv, w.conv_per_thread, xb_buf, &saved);
    model_par_bf16_dx(dyb_buf, dyb); /* precision bf16: BF16 products for dx = dy W, else F32 */
    model_par_bf16_dw(dwb_buf, dwb); /* and for the weight gradients */
    /* the head's input: the last layer's output, through the final norm of pre-norm models */
    const float *x_head = tp->x_last;
    if (m->pre_ln) {
        memcpy(w.dmid, tp->x_last, (size_t)T * c->d_model * sizeof(float));
        model_norm_rows(m, &m->ln_f, w.dmid, T);
        x_head = w.dmid;
    }
    head_bwd(m, enc, r, x_head, dlogits, tp->m_cls, &w);
    if (d_top) add_to(w.dx, d_top, (size_t)T * c->d_model);
    if (m->pre_ln) norm_dx(m, &m->ln_f, w.dx, tp->x_last, T, c->d_model, w.dx, w.stat, pg ? &pg->ln_f : NULL);
    for (int l = L - 1; l >= 0; l--)
        layer_bwd(m, l, &tp->lay[l], T, &w, d_attn ? d_attn + (size_t)l * H * TT : NULL, nt);
    if (tp->m_emb) op_mul(w.dx, tp->m_emb, (size_t)T * c->d_model);
    embed_bwd(m, enc, word, &w, d_word);
    model_par_end(&saved);
    as_large_put(blk, cap);
    return AS_OK;
}

as_status model_vocab_rows_backward(const as_model *m, const float *x, int n, const float *dlogits, int threads,
                                    float *dx, model_grads *pg, as_error *err) {
    const as_config *c = &m->cfg;
    int D = c->d_model, nt = threads > 0 ? threads : as_n_cores();
    if (n <= 0) return AS_OK;
    size_t conv = as_gemm_bf16_scratch(D > c->d_ff ? D : c->d_ff), ND = (size_t)n * D;
    float *blk = as_malloc_array(4 * ND + 2 * (size_t)n + (size_t)nt * conv, sizeof(float));
    if (!blk) return as_err_set(err, AS_ERR_INTERNAL, "out of memory for the vocabulary head's backward");
    bwd_ws w = {0};
    w.dx = dx, w.tmp = blk, w.dh = blk + ND, w.hn = blk + 2 * ND, w.g = blk + 3 * ND, w.stat = blk + 4 * ND;
    w.conv = w.stat + 2 * (size_t)n, w.conv_per_thread = conv, w.pg = pg;
    par_state saved;
    model_par_begin(nt, w.conv, conv, NULL, &saved);
    model_par_fixed_blocks(); /* the same gradients at any thread count */
    vocab_bwd(m, x, n, dlogits, &w);
    model_par_end(&saved);
    free(blk);
    return AS_OK;
}
