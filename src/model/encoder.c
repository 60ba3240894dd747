/* encoder.c — the forward pass shared by every architecture: linear maps (OpenBLAS
 * sgemm), LayerNorm, activations, the transformer layer (post-LN for the BERT
 * family, pre-LN for GPT-2) and multi-head attention with selective capture, and
 * the task heads. Architecture-specific weight binding and embeddings live in
 * bert.c, distilbert.c and gpt2.c.
 *
 * Threads: one pool (core/pool.h, passive waiting). Linear maps split their output
 * columns into blocks, each a single-threaded OpenBLAS sgemm on its slice of the
 * weights; the attention runs one head per task; LayerNorm, activations and adds
 * split their rows/elements. OpenBLAS is set to one thread during a forward (and
 * restored after), so no second thread pool competes for the cores.
 */
#include "model/model.h"
#include "model/ops.h"
#include "core/fastmath.h"
#include "core/gemm_small.h"
#include "core/pool.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

/* The elementwise loops (softmax, GELU, LayerNorm) get an AVX2+FMA clone chosen at
 * load time on CPUs that have it (GCC function multi-versioning); SSE2 otherwise. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define AS_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define AS_SIMD_CLONES
#endif

/* Threads of the forward running on this thread (set by as_forward). */
static _Thread_local int t_threads = 1;

/* Up to this many rows (tokens), [out, in] weights multiply without packing
 * (core/gemm_small.c); longer inputs amortise sgemm's packing of W. */
#ifndef AS_GEMM_SMALL_MAX_ROWS
#define AS_GEMM_SMALL_MAX_ROWS 32
#endif

/* One product for output columns [j0, j1): y[:, j0:j1] = x W[j0:j1]^T (+ b[j0:j1]). */
static void linear_cols(const lin_t *l, const float *x, int T, float *y, int j0, int j1) {
    float beta = 0.0f;
    if (l->b) {
        for (int t = 0; t < T; t++)
            memcpy(y + (size_t)t * l->n_out + j0, l->b + j0, (size_t)(j1 - j0) * sizeof(float));
        beta = 1.0f;
    }
    const float *w = l->in_out ? l->w + j0 : l->w + (size_t)j0 * l->ldw;
    if (!l->in_out && T <= AS_GEMM_SMALL_MAX_ROWS && as_gemm_small_ok()) {
        as_gemm_small_xwt(T, j1 - j0, l->n_in, x, (size_t)l->n_in, w, (size_t)l->ldw, y + j0, (size_t)l->n_out,
                          l->b != NULL);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, l->in_out ? CblasNoTrans : CblasTrans, T, j1 - j0,
                l->n_in, 1.0f, x, l->n_in, w, l->ldw, beta, y + j0, l->n_out);
}

typedef struct {
    const lin_t *l;
    const float *x;
    float *y;
    int T, chunk;
} linear_job;

static void linear_task(void *ctx, int b, int tid) {
    const linear_job *j = ctx;
    int j0 = b * j->chunk, j1 = j0 + j->chunk < j->l->n_out ? j0 + j->chunk : j->l->n_out;
    linear_cols(j->l, j->x, j->T, j->y, j0, j1);
}

/* y (T, n_out) = x (T, n_in) W^T + b. Threads split the output columns, each
 * running a single-threaded sgemm on its slice of W, so every weight is packed once. */
void op_linear(const lin_t *l, const float *x, int T, float *y) {
    int nt = t_threads;
    double work = (double)T * l->n_out * l->n_in;
    if (nt <= 1 || work < 2.0e6 || l->n_out < 32 * nt) {
        linear_cols(l, x, T, y, 0, l->n_out);
        return;
    }
    /* 2 column blocks per thread, handed out dynamically: a thread that the OS
     * preempts delays only its block. Blocks are multiples of 16 columns. */
    int nb = 2 * nt;
    int chunk = ((l->n_out + nb - 1) / nb + 15) & ~15;
    linear_job j = {l, x, y, T, chunk};
    as_parallel_for((l->n_out + chunk - 1) / chunk, nt, linear_task, &j);
}

/* Splits n items into about 4 blocks per thread of at least `min` items and runs
 * fn(ctx, lo, hi) on each. */
typedef void (*range_fn)(void *ctx, size_t lo, size_t hi);
typedef struct {
    range_fn fn;
    void *ctx;
    size_t n, block;
} range_job;

static void range_task(void *ctx, int b, int tid) {
    const range_job *r = ctx;
    size_t lo = (size_t)b * r->block, hi = lo + r->block < r->n ? lo + r->block : r->n;
    r->fn(r->ctx, lo, hi);
}

static void parallel_range(size_t n, size_t min, range_fn fn, void *ctx) {
    int nt = t_threads;
    if (nt <= 1 || n <= min) {
        fn(ctx, 0, n);
        return;
    }
    size_t block = (n + 4 * (size_t)nt - 1) / (4 * (size_t)nt);
    if (block < min) block = min;
    range_job r = {fn, ctx, n, block};
    as_parallel_for((int)((n + block - 1) / block), nt, range_task, &r);
}

typedef struct {
    const ln_t *ln;
    float eps;
    float *x;
} ln_job;

static void layernorm_rows(void *ctx, size_t lo, size_t hi) {
    const ln_job *j = ctx;
    float *r = j->x + lo * (size_t)j->ln->n;
    op_layernorm_fwd(r, NULL, NULL, r, j->ln->g, j->ln->b, (int)(hi - lo), j->ln->n, j->eps);
}

void op_layernorm(const ln_t *ln, float eps, float *x, int T) {
    ln_job j = {ln, eps, x};
    parallel_range((size_t)T, 8, layernorm_rows, &j);
}

typedef struct {
    as_act a;
    float *x;
    const float *src;
} elem_job;

static void act_range(void *ctx, size_t lo, size_t hi) {
    const elem_job *j = ctx;
    op_act_fwd(j->a, j->x + lo, j->x + lo, hi - lo);
}

void op_act(as_act a, float *x, size_t n) {
    elem_job j = {a, x, NULL};
    parallel_range(n, 16384, act_range, &j);
}

static void add_range(void *ctx, size_t lo, size_t hi) {
    const elem_job *j = ctx;
    for (size_t i = lo; i < hi; i++) j->x[i] += j->src[i];
}

void op_add(float *y, const float *x, size_t n) {
    elem_job j = {ACT_RELU, y, x};
    parallel_range(n, 16384, add_range, &j);
}

/* Per-forward scratch, one allocation. */
typedef struct {
    float *x;    /* (T, D) residual stream */
    float *h;    /* (T, D) normalised input (pre-LN) / sub-layer output */
    float *q, *k, *v, *ctx; /* (T, D) */
    float *ff;   /* (T, F) */
    float *s;    /* (nthreads, T, T) scores scratch when not captured */
    float *p;    /* (nthreads, T, T) probabilities scratch when not captured */
    float *keep; /* (T) 1 for real tokens, 0 for padding (attention mask as float) */
    float *block;
} fwd_ws;

/* Scaled dot-product attention (Vaswani et al. 2017, eq. 1) for one head:
 * S = Qh Kh^T * scale (1/sqrt(Dh), see as_attn_scale) with disallowed keys set to
 * AS_MASK_VALUE (Hugging Face adds finfo.min: padding keys, and keys after the query
 * for causal models),
 * P = softmax(S) by row, ctx_h = P Vh. keep: (T) 1 for real keys, 0 for padding. */
AS_SIMD_CLONES
static void attend_head(const float *keep, int causal, float scale, int T, int D, int Dh, int h,
                        const float *q, const float *k, const float *v, float *S, float *P, float *ctx) {
    const float *qh = q + (size_t)h * Dh, *kh = k + (size_t)h * Dh, *vh = v + (size_t)h * Dh;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, Dh, scale, qh, D, kh, D, 0.0f, S, T);
    for (int i = 0; i < T; i++) {
        float *si = S + (size_t)i * T, *pi = P + (size_t)i * T;
        int n = causal ? i + 1 : T; /* keys j < n may be allowed */
        float mx = AS_MASK_VALUE;
        for (int j = 0; j < n; j++) {
            si[j] = keep[j] != 0.0f ? si[j] : AS_MASK_VALUE;
            mx = si[j] > mx ? si[j] : mx;
        }
        for (int j = n; j < T; j++) si[j] = AS_MASK_VALUE;
        if (mx == AS_MASK_VALUE) { /* every key masked (all padding): no attention at all */
            memset(pi, 0, (size_t)T * sizeof(float));
            continue;
        }
        float sum = 0.0f;
        for (int j = 0; j < n; j++) {
            float e = as_fast_expf(si[j] - mx) * keep[j];
            pi[j] = e;
            sum += e;
        }
        for (int j = n; j < T; j++) pi[j] = 0.0f;
        float inv = 1.0f / sum;
        for (int j = 0; j < n; j++) pi[j] *= inv;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, Dh, T, 1.0f, P, T, vh, D, 0.0f,
                ctx + (size_t)h * Dh, D);
}

static void copy_head(float *dst, const float *src, int T, int D, int Dh, int h) {
    for (int t = 0; t < T; t++)
        memcpy(dst + (size_t)t * Dh, src + (size_t)t * D + (size_t)h * Dh, (size_t)Dh * sizeof(float));
}

typedef struct {
    const as_encoding *enc;
    fwd_ws *ws;
    as_run *r;
    unsigned what;
    int l, T, D, Dh, causal;
    float scale; /* as_attn_scale of layer l */
} attn_job;

/* Head h of layer j->l, on thread tid (its scratch slot). */
static void attn_task(void *ctx, int h, int tid) {
    const attn_job *j = ctx;
    as_run *r = j->r;
    fwd_ws *ws = j->ws;
    int T = j->T, D = j->D, Dh = j->Dh, l = j->l;
    size_t TT = (size_t)T * T, TD = (size_t)T * Dh;
    int cap = l >= r->layer_lo && l < r->layer_lo + r->n_lay && h >= r->head_lo && h < r->head_lo + r->n_hd;
    size_t slot = cap ? (size_t)(l - r->layer_lo) * r->n_hd + (size_t)(h - r->head_lo) : 0;
    float *S = (cap && (j->what & CAP_SCORES)) ? r->scores + slot * TT : ws->s + (size_t)tid * TT;
    float *P = (cap && (j->what & CAP_ATTN)) ? r->attn + slot * TT : ws->p + (size_t)tid * TT;
    attend_head(ws->keep, j->causal, j->scale, T, D, Dh, h, ws->q, ws->k, ws->v, S, P, ws->ctx);
    if (cap && (j->what & CAP_QKV)) {
        copy_head(r->q + slot * TD, ws->q, T, D, Dh, h);
        copy_head(r->k + slot * TD, ws->k, T, D, Dh, h);
        copy_head(r->v + slot * TD, ws->v, T, D, Dh, h);
    }
}

static void attention(const as_model *m, const layer_w *lw, int l, const as_encoding *enc,
                      const float *in, fwd_ws *ws, as_run *r, unsigned what, int nthreads) {
    int T = enc->n, D = m->cfg.d_model, H = m->cfg.n_head, Dh = m->cfg.d_head;
    op_linear(&lw->q, in, T, ws->q);
    op_linear(&lw->k, in, T, ws->k);
    op_linear(&lw->v, in, T, ws->v);
    attn_job j = {enc, ws, r, what, l, T, D, Dh, m->cfg.causal, as_attn_scale(&m->cfg, l)};
    as_parallel_for(H, nthreads, attn_task, &j);
}

/* One transformer layer on ws->x (T, D). Post-LN (BERT, Devlin et al. 2019):
 * x = LN1(x + Attn(x)); x = LN2(x + FF(x)). Pre-LN (GPT-2, Radford et al. 2019):
 * x = x + Attn(LN1(x)); x = x + FF(LN2(x)). */
static void layer_forward(const as_model *m, int l, const as_encoding *enc, fwd_ws *ws, as_run *r,
                          unsigned what, int nthreads) {
    const layer_w *lw = &m->layers[l];
    int T = enc->n, D = m->cfg.d_model, F = m->cfg.d_ff;
    size_t TD = (size_t)T * D;
    float eps = m->cfg.ln_eps;
    if (m->pre_ln) {
        memcpy(ws->h, ws->x, TD * sizeof(float));
        op_layernorm(&lw->ln1, eps, ws->h, T);
        attention(m, lw, l, enc, ws->h, ws, r, what, nthreads);
        op_linear(&lw->o, ws->ctx, T, ws->h);
        op_add(ws->x, ws->h, TD);
        memcpy(ws->h, ws->x, TD * sizeof(float));
        op_layernorm(&lw->ln2, eps, ws->h, T);
        op_linear(&lw->ff1, ws->h, T, ws->ff);
        op_act(m->cfg.act, ws->ff, (size_t)T * F);
        op_linear(&lw->ff2, ws->ff, T, ws->h);
        op_add(ws->x, ws->h, TD);
    } else {
        attention(m, lw, l, enc, ws->x, ws, r, what, nthreads);
        op_linear(&lw->o, ws->ctx, T, ws->h);
        op_add(ws->x, ws->h, TD);
        op_layernorm(&lw->ln1, eps, ws->x, T);
        op_linear(&lw->ff1, ws->x, T, ws->ff);
        op_act(m->cfg.act, ws->ff, (size_t)T * F);
        op_linear(&lw->ff2, ws->ff, T, ws->h);
        op_add(ws->x, ws->h, TD);
        op_layernorm(&lw->ln2, eps, ws->x, T);
    }
}

static void cls_act(int a, float *x, int n) {
    for (int i = 0; i < n; i++) {
        switch (a) {
        case CLS_ACT_TANH: x[i] = tanhf(x[i]); break;
        case CLS_ACT_RELU: x[i] = x[i] > 0 ? x[i] : 0; break;
        default: break;
        }
    }
    if (a == CLS_ACT_GELU) op_act_fwd(ACT_GELU, x, x, (size_t)n);
}

/* Task heads. Classifier: the first token's state (the last non-padding token for
 * GPT-2's score head) through cls_pre + activation (BERT pooler tanh, RoBERTa
 * classifier.dense tanh, DistilBERT pre_classifier ReLU) and cls_out -> (1, C).
 * MLM: dense + activation + LayerNorm, then the (tied) decoder + bias -> (T, V);
 * GPT-2 LM: x (already through ln_f) times wte^T -> (T, V). work: (T, D). */
void model_head_logits(const as_model *m, const as_encoding *enc, const float *x, float *logits,
                       float *work) {
    int T = enc->n, D = m->cfg.d_model, V = m->cfg.vocab_size;
    if (m->heads & HEAD_CLASSIFIER) {
        int t = 0;
        if (m->cls_last_token) {
            for (int i = 0; i < T; i++)
                if (enc->mask[i] && (m->cfg.pad_token_id < 0 || enc->ids[i] != m->cfg.pad_token_id)) t = i;
        }
        const float *h0 = x + (size_t)t * D;
        if (m->cls_pre.w) {
            op_linear(&m->cls_pre, h0, 1, work);
            cls_act(m->cls_pre_act, work, m->cls_pre.n_out);
            h0 = work;
        }
        op_linear(&m->cls_out, h0, 1, logits);
        return;
    }
    const float *in = x;
    if (m->mlm_dense.w) {
        op_linear(&m->mlm_dense, x, T, work);
        op_act(m->mlm_act, work, (size_t)T * D);
        op_layernorm(&m->mlm_ln, m->cfg.ln_eps, work, T);
        in = work;
    }
    lin_t dec = {.w = m->mlm_decoder, .b = m->mlm_bias, .n_in = D, .n_out = V, .ldw = D, .in_out = 0};
    op_linear(&dec, in, T, logits);
}

static as_status check_input(const as_model *m, const as_encoding *enc, const as_capture_spec *spec,
                             as_error *err) {
    const as_config *c = &m->cfg;
    if (!enc || enc->n <= 0 || !enc->ids || !enc->mask)
        return as_err_set(err, AS_ERR_INPUT, "empty input: no tokens");
    int max = c->max_pos - m->pos_offset;
    if (enc->n > max)
        return as_err_set(err, AS_ERR_INPUT, "%d tokens, but the model takes at most %d", enc->n, max);
    for (int i = 0; i < enc->n; i++) {
        if (enc->ids[i] < 0 || enc->ids[i] >= c->vocab_size)
            return as_err_set(err, AS_ERR_INPUT, "token id %d at position %d is outside the vocabulary [0, %d)",
                              (int)enc->ids[i], i, c->vocab_size);
        int tt = enc->type_ids ? enc->type_ids[i] : 0, nt = model_type_id_limit(m, enc->type_ids_given);
        if (tt < 0 || tt >= nt)
            return as_err_set(err, AS_ERR_INPUT, "token type id %d at position %d is outside [0, %d)", tt, i, nt);
    }
    if (spec->layer < -1 || spec->layer >= c->n_layer)
        return as_err_set(err, AS_ERR_INPUT, "layer %d is out of range: the model has layers 0..%d",
                          spec->layer, c->n_layer - 1);
    if (spec->head < -1 || spec->head >= c->n_head)
        return as_err_set(err, AS_ERR_INPUT, "head %d is out of range: the model has heads 0..%d",
                          spec->head, c->n_head - 1);
    if (spec->threads < 0 || spec->threads > 1024)
        return as_err_set(err, AS_ERR_INPUT, "threads %d is out of range [0, 1024]", spec->threads);
    return AS_OK;
}

/* Captured tensors share one block (reused between forwards, core.h as_large_get);
 * each starts on a 64-byte boundary. Pass 1 (base NULL) sizes the block, pass 2
 * hands out the pointers. */
static float *cap_take(char *base, size_t *off, size_t *bytes, size_t a, size_t b, size_t c, int *fail) {
    size_t n = as_mul_size(as_mul_size(a, b), c);
    if (!n || *off > SIZE_MAX / 4 || n > (SIZE_MAX / 4 - *off) / sizeof(float)) {
        *fail = 1;
        return NULL;
    }
    float *p = base ? (float *)(base + *off) : NULL;
    *bytes += n * sizeof(float);
    *off += (n * sizeof(float) + 63) & ~(size_t)63;
    return p;
}

as_status as_forward(const as_model *m, const as_encoding *enc, const as_capture_spec *spec,
                     as_run **out, as_error *err) {
    as_status s;
    *out = NULL;
    if ((s = check_input(m, enc, spec, err))) return s;
    const as_config *c = &m->cfg;
    int T = enc->n, D = c->d_model, L = c->n_layer, H = c->n_head, Dh = c->d_head;
    unsigned what = spec->what & CAP_ALL;
    int nthreads = spec->threads > 0 ? spec->threads : as_n_cores();
    int want_logits = (what & CAP_LOGITS) && m->heads;
    int per_layer = what & (CAP_ATTN | CAP_SCORES | CAP_QKV | CAP_HIDDEN);
    int n_run = L;
    if (!want_logits && spec->layer >= 0) n_run = spec->layer + 1;
    if (!want_logits && !per_layer) n_run = 0;

    fwd_ws ws = {0};
    size_t ws_cap = 0;
    as_run *r = as_calloc(1, sizeof *r);
    if (!r) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    r->T = T;
    r->L = L;
    r->H = H;
    r->D = D;
    r->Dh = Dh;
    r->n_run = n_run;
    r->layer_lo = spec->layer >= 0 ? spec->layer : 0;
    r->n_lay = spec->layer >= 0 ? 1 : L;
    r->head_lo = spec->head >= 0 ? spec->head : 0;
    r->n_hd = spec->head >= 0 ? 1 : H;
    size_t nlh = (size_t)r->n_lay * r->n_hd, TT = (size_t)T * T;
    int fail = 0;
    if (want_logits) {
        r->logits_head = (m->heads & HEAD_CLASSIFIER) ? HEAD_CLASSIFIER : (m->heads & HEAD_MLM) ? HEAD_MLM : HEAD_LM;
        r->logits_rows = r->logits_head == HEAD_CLASSIFIER ? 1 : T;
        r->logits_cols = r->logits_head == HEAD_CLASSIFIER ? c->num_labels : c->vocab_size;
    }
    for (int pass = 0; pass < 2 && !fail; pass++) {
        char *base = pass ? r->block_ : NULL;
        size_t off = 0;
        r->bytes = 0;
        if (what & CAP_ATTN) r->attn = cap_take(base, &off, &r->bytes, nlh, TT, 1, &fail);
        if (what & CAP_SCORES) r->scores = cap_take(base, &off, &r->bytes, nlh, TT, 1, &fail);
        if (what & CAP_QKV) {
            r->q = cap_take(base, &off, &r->bytes, nlh, (size_t)T, (size_t)Dh, &fail);
            r->k = cap_take(base, &off, &r->bytes, nlh, (size_t)T, (size_t)Dh, &fail);
            r->v = cap_take(base, &off, &r->bytes, nlh, (size_t)T, (size_t)Dh, &fail);
        }
        if (what & CAP_HIDDEN)
            r->hidden = cap_take(base, &off, &r->bytes, (size_t)n_run + 1, (size_t)T, (size_t)D, &fail);
        if (want_logits)
            r->logits = cap_take(base, &off, &r->bytes, (size_t)r->logits_rows, (size_t)r->logits_cols, 1, &fail);
        if (!pass && !fail && off && !(r->block_ = as_large_get(off, &r->block_cap_))) fail = 1;
    }
    if (fail) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory for the captured tensors (%zu bytes)", r->bytes);
        goto cleanup;
    }
    {
        size_t TD = (size_t)T * (size_t)(c->d_embed > D ? c->d_embed : D);
        size_t n = 6 * TD + (size_t)T * c->d_ff + 2 * (size_t)nthreads * TT + (size_t)T;
        ws.block = n <= SIZE_MAX / sizeof(float) ? as_large_get(n * sizeof(float), &ws_cap) : NULL;
        if (!ws.block) {
            s = as_err_set(err, AS_ERR_INTERNAL, "out of memory for the forward workspace");
            goto cleanup;
        }
        ws.x = ws.block;
        ws.h = ws.x + TD;
        ws.q = ws.h + TD;
        ws.k = ws.q + TD;
        ws.v = ws.k + TD;
        ws.ctx = ws.v + TD;
        ws.ff = ws.ctx + TD;
        ws.s = ws.ff + (size_t)T * c->d_ff;
        ws.p = ws.s + (size_t)nthreads * TT;
        ws.keep = ws.p + (size_t)nthreads * TT;
        for (int i = 0; i < T; i++) ws.keep[i] = enc->mask[i] ? 1.0f : 0.0f;
    }
    int old_threads = t_threads, old_blas = openblas_get_num_threads();
    t_threads = nthreads;
    openblas_set_num_threads(1); /* parallelism comes from the pool (op_linear, heads) */
    switch (c->arch) {
    case ARCH_BERT:
    case ARCH_ROBERTA: bert_embed(m, enc, spec->ablate, ws.x, ws.h); break;
    case ARCH_DISTILBERT: distilbert_embed(m, enc, spec->ablate, ws.x); break;
    case ARCH_GPT2: gpt2_embed(m, enc, spec->ablate, ws.x); break;
    case ARCH_LLAMA: break;
    }
    size_t TD = (size_t)T * D;
    if (r->hidden) memcpy(r->hidden, ws.x, TD * sizeof(float));
    for (int l = 0; l < n_run; l++) {
        layer_forward(m, l, enc, &ws, r, what, nthreads);
        if (m->pre_ln && l == L - 1) op_layernorm(&m->ln_f, c->ln_eps, ws.x, T);
        if (r->hidden) memcpy(r->hidden + (size_t)(l + 1) * TD, ws.x, TD * sizeof(float));
    }
    if (want_logits) model_head_logits(m, enc, ws.x, r->logits, ws.h);
    t_threads = old_threads;
    openblas_set_num_threads(old_blas);
    *out = r;
    r = NULL;
    s = AS_OK;
cleanup:
    as_large_put(ws.block, ws_cap);
    as_run_free(r);
    return s;
}
