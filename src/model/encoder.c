/* encoder.c — the one forward pass of every architecture: the transformer layer
 * (post-LN for the BERT family; pre-norm for GPT-2 and the LLaMA family, read from the
 * block description in as_config), multi-head / grouped-query attention with selective
 * capture, and the task heads; optionally saving what backward.c needs (a model_tape).
 * Encoder-decoder models (bart.c) run their two stacks through the same layer, the decoder's
 * with a cross-attention sub-layer (as_forward_seq2seq).
 * Architecture-specific weight binding and embeddings live in bert.c, distilbert.c,
 * gpt2.c, llama.c and bart.c; the pooled linear maps, norms and activations in par_ops.c.
 *
 * Threads: one pool (core/pool.h, passive waiting): linear maps split their output
 * columns, the attention runs one head per task, norms and activations split their rows;
 * OpenBLAS runs single-threaded inside the pass (model_par_begin).
 */
#include "model/model.h"
#include "model/ops.h"
#include "core/fastmath.h"
#include "core/gemm_bf16.h"
#include "core/pool.h"

#include <cblas.h>
#include <float.h>
#include <math.h>
#include <string.h>

/* The attention rows' elementwise loops (mask, soft cap, softmax) get AVX-512 and AVX2+FMA
 * clones, the widest the CPU runs chosen at load time (GCC function multi-versioning);
 * SSE2 otherwise. */
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define AS_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define AS_SIMD_CLONES
#endif

/* Per-forward scratch, one allocation. Qw = H Dh (query width), Kw = Hkv Dh. */
typedef struct {
    float *x;    /* (T, D) residual stream */
    float *h;    /* (T, max(D, De)) normalised input (pre-norm) / sub-layer output */
    float *q;    /* (T, Qw) */
    float *k, *v; /* (T, Kw) */
    float *ctx;  /* (T, Qw) */
    float *ff;   /* (T, F) */
    float *up;   /* (T, F) gated MLP's up projection; NULL otherwise */
    float *s;    /* (nthreads, ATTN_ROW_BLOCK, T) scores scratch when not captured */
    float *p;    /* (nthreads, ATTN_ROW_BLOCK, T) probabilities scratch when not captured */
    float *keep; /* (T) 1 for real tokens, 0 for padding (attention mask as float) */
    float *rope; /* (2, T, R) cos/sin tables of the global and the local layers; NULL without RoPE */
    float *conv; /* (nthreads, conv_per_thread) linear maps' scratch (lin_scratch) */
    size_t conv_per_thread;
    uint16_t *xb; /* (T, max n_in) BF16 input of a product at precision bf16, else NULL */
    const tape_layer *tl; /* what the current layer saves for the backward, or NULL */
    const as_intervention *iv; /* the spec's intervention (self-attention only), or NULL */
    int32_t *bucket;      /* (T, T) T5: the current stack's relative position buckets, else NULL */
    /* encoder-decoder forwards: the encoder's output the decoder's cross-attention reads */
    const float *mem;      /* (Tm, D) or NULL */
    const float *keep_mem; /* (Tm) 1 for real source tokens, 0 for padding */
    int Tm;
    as_run *xr;            /* the run capturing the cross-attention */
    /* a generation step (model_forward_step): the rows are positions kv->n .. kv->n + T - 1,
       their keys and values join kv, and attention reads all kv->n + T of kv's */
    model_kv *kv;
    float *rows;           /* (H, kv->n + T) the current layer's attention rows of the last position, or NULL */
    /* a beam step (model_forward_beams): row b is beam b's token at position beams[b].n,
       its key and value join beams[b], its attention reads beams[b]'s */
    model_kv *beams;
    /* an encoder-decoder generation step (model_s2s_step): every decoder layer's cross
       keys and values, (L, Tm, Kw), instead of projecting mem; the last row's
       cross-attention probabilities of every layer and head into xrows (L, H, Tm), or NULL */
    const float *ck, *cv;
    float *xrows;
    float *block;
} fwd_ws;

/* Query rows of attention computed together; a forward's scores and probabilities scratch
 * is (threads, ATTN_ROW_BLOCK, T) per buffer. */
#define ATTN_ROW_BLOCK 64

/* Which keys query i may see: j < n_hi (causal: i + 1) and j >= lo (sliding window:
 * i - W + 1), padding keys never. */
typedef struct {
    int causal, window; /* window 0 = none */
    float scale, softcap;
    const int32_t *bucket; /* (T, Tk) T5's relative position bucket of each (query, key), or NULL */
    const float *rel;      /* the bias of bucket b is rel[b * rel_stride] (one head's column of the
                              (n_buckets, H) table) */
    int rel_stride;
} attn_rule;

/* Heads up to this wide take the AVX-512 F32 kernel for their scores (the keys' blocks
 * packed on the stack, 64 KiB); wider ones sgemm. */
#define ATTN_PACK_DH 256

/* S (nr, nk; rows lds apart) = scale * Qh Kh^T: core/gemm_bf16.c's F32 kernel (each score
 * summed in order along the head, then scaled, as sgemm's alpha does) where the CPU has
 * AVX-512F, else sgemm. */
static void attn_scores(int nr, int nk, int Dh, float scale, const float *qh, int ldq, const float *kh, int ldk,
                        float *S, int lds) {
    if (Dh <= ATTN_PACK_DH && as_gemm_f32_packed_native()) {
        float pack[64 * ATTN_PACK_DH]; /* >= as_gemm_f32_xwt_scratch(Dh) */
        as_gemm_f32_xwt(nr, nk, Dh, qh, (size_t)ldq, kh, (size_t)ldk, 0, NULL, S, (size_t)lds, pack);
        if (scale != 1.0f)
            for (int r = 0; r < nr; r++)
                for (int j = 0; j < nk; j++) S[(size_t)r * lds + j] *= scale;
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nk, Dh, scale, qh, ldq, kh, ldk, 0.0f, S, lds);
}

/* The attention probabilities of scaled dot-product attention (Vaswani et al. 2017,
 * eq. 1) of one query head reading one key/value head, for query rows [i0, i1), as one
 * block: S = Qh Kh^T * scale by one product (attn_scores; then c tanh(S / c) with a soft cap c), with
 * disallowed keys set to AS_MASK_VALUE (Hugging Face adds finfo.min: padding keys, keys
 * after the query for causal models, keys before its window), P = softmax(S) by row.
 * The forward (attend_rows) and the recomputation of rows from captured q and k
 * (as_run_attention_rows) both use it. keep: (T) 1 for real keys, 0 for padding. qh: row
 * i0 of (T, ldq); kh: (T, ldk); S, P: (i1 - i0, T). */
AS_SIMD_CLONES
static void attn_probs_rows(const float *keep, const attn_rule *ru, int T, int Dh, int i0, int i1, const float *qh,
                            int ldq, const float *kh, int ldk, float *S, float *P) {
    int nr = i1 - i0;
    /* a causal block's rows see keys < i1 only: the scores of the later keys are not
       computed (they are set to the mask below), half of a long causal input's products */
    int nk = ru->causal && i1 < T ? i1 : T;
    attn_scores(nr, nk, Dh, ru->scale, qh, ldq, kh, ldk, S, T);
    if (ru->bucket) /* T5 (Raffel et al. 2020, sec. 2.1): + the learned bias of the relative position's bucket */
        for (int r = 0; r < nr; r++) {
            const int32_t *b = ru->bucket + (size_t)(i0 + r) * T;
            float *si = S + (size_t)r * T;
            for (int j = 0; j < nk; j++) si[j] += ru->rel[(size_t)b[j] * ru->rel_stride];
        }
    float cap = ru->softcap, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
    for (int r = 0; r < nr; r++) {
        int i = i0 + r;
        float *si = S + (size_t)r * T, *pi = P + (size_t)r * T;
        int n = ru->causal ? i + 1 : T; /* keys j < n may be allowed */
        int lo = ru->window > 0 && i - ru->window + 1 > 0 ? i - ru->window + 1 : 0;
        float mx = AS_MASK_VALUE;
        for (int j = 0; j < lo; j++) si[j] = AS_MASK_VALUE;
        if (cap > 0.0f)
            for (int j = lo; j < n; j++) si[j] = cap * as_fast_tanhf(si[j] * inv_cap);
#pragma omp simd reduction(max : mx)
        for (int j = lo; j < n; j++) {
            si[j] = keep[j] != 0.0f ? si[j] : AS_MASK_VALUE;
            mx = si[j] > mx ? si[j] : mx;
        }
        for (int j = n; j < T; j++) si[j] = AS_MASK_VALUE;
        memset(pi, 0, (size_t)T * sizeof(float));
        if (mx == AS_MASK_VALUE) continue; /* every key masked (all padding): no attention at all */
        float sum = 0.0f; /* in vector-wide partial sums (the row's order is not kept) */
#pragma omp simd reduction(+ : sum)
        for (int j = lo; j < n; j++) {
            float e = as_fast_expf(si[j] - mx) * keep[j];
            pi[j] = e;
            sum += e;
        }
        float inv = 1.0f / sum;
        for (int j = lo; j < n; j++) pi[j] *= inv;
    }
}

/* Scaled dot-product attention of one query head for query rows [i0, i1):
 * attn_probs_rows, then ctx_h = P Vh, or with dropout (dm non-NULL: its mask rows)
 * ctx_h = (P * dm) Vh through the scratch Pd. ctx: row i0 of (T, ldq); vh: (T, ldk);
 * dm, Pd: (i1 - i0, T); the rest as attn_probs_rows. */
static void attend_rows(const float *keep, const attn_rule *ru, int T, int Dh, int i0, int i1, const float *qh,
                        int ldq, const float *kh, const float *vh, int ldk, float *S, float *P, const float *dm,
                        float *Pd, float *ctx) {
    int nr = i1 - i0;
    attn_probs_rows(keep, ru, T, Dh, i0, i1, qh, ldq, kh, ldk, S, P);
    const float *Pv = P; /* what multiplies V: P, or with dropout P * dm */
    if (dm) {
        for (size_t i = 0; i < (size_t)nr * T; i++) Pd[i] = P[i] * dm[i];
        Pv = Pd;
    }
    /* keys no row of the block may see have P = 0 for every row: a causal block's keys from
       i1 on, a sliding window's keys before its first row's window */
    int k1 = ru->causal && i1 < T ? i1 : T;
    int k0 = ru->window > 0 && i0 - ru->window + 1 > 0 ? i0 - ru->window + 1 : 0;
    if (as_gemm_f32_packed_native()) /* V read where it lies: [keys, Dh] is the kernel's [in, out] */
        as_gemm_f32_xwt(nr, Dh, k1 - k0, Pv + k0, T, vh + (size_t)k0 * ldk, ldk, 1, NULL, ctx, ldq, NULL);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, Dh, k1 - k0, 1.0f, Pv + k0, T,
                    vh + (size_t)k0 * ldk, ldk, 0.0f, ctx, ldq);
}

/* The CAP_STATS statistics of one head's attention, accumulated over its real query rows
 * (keep[i] != 0) block by block: rows [i0, i1) of P into acc (sums in double) and n
 * (rows counted for all, previous, next); head_stats_out divides. */
typedef struct {
    double acc[AS_HEAD_N_STATS];
    int n, n_prev, n_next;
} head_stats_acc;

static void head_stats_rows(const float *P, const float *keep, int T, int i0, int i1, head_stats_acc *a) {
    for (int i = i0; i < i1; i++) {
        if (keep[i] == 0.0f) continue;
        const float *p = P + (size_t)(i - i0) * T;
        double ent = 0.0, d = 0.0, mx = 0.0;
        for (int j = 0; j < T; j++) {
            double v = p[j];
            if (v > 0.0) ent -= v * (0.69314718055994531 * as_fast_log2f(p[j])); /* ln v */
            d += v * abs(i - j);
            mx = v > mx ? v : mx;
        }
        double var = 0.0;
        for (int j = 0; j < T; j++) {
            double e = abs(i - j) - d;
            var += p[j] * e * e;
        }
        a->acc[AS_HEAD_STAT_ENTROPY] += ent;
        a->acc[AS_HEAD_STAT_SINK] += p[0];
        a->acc[AS_HEAD_STAT_SELF] += p[i];
        if (i >= 1) a->acc[AS_HEAD_STAT_PREV] += p[i - 1], a->n_prev++;
        if (i + 1 < T) a->acc[AS_HEAD_STAT_NEXT] += p[i + 1], a->n_next++;
        a->acc[AS_HEAD_STAT_DIST] += d;
        a->acc[AS_HEAD_STAT_SPREAD] += sqrt(var);
        a->acc[AS_HEAD_STAT_MAX] += mx;
        a->n++;
    }
}

static void head_stats_out(const head_stats_acc *a, float *out) {
    for (int k = 0; k < AS_HEAD_N_STATS; k++) {
        int c = k == AS_HEAD_STAT_PREV ? a->n_prev : k == AS_HEAD_STAT_NEXT ? a->n_next : a->n;
        out[k] = c ? (float)(a->acc[k] / c) : 0.0f;
    }
}

/* The CAP_THUMBS thumbnail of one head (AS_THUMB_SIDE in attnscope.h): its (T, T)
 * attention pooled onto (S, S) blocks, accumulated as the forward's row blocks go by, so
 * no T x T is kept. cmax and csum hold the current block row's largest weight and sum per
 * column block; when the block row's last row is in, they go to the head's (S, S) max and
 * mean. Costs one pass over each row's allowed keys. */
typedef struct {
    int S, T, b;                 /* side, tokens, current block row */
    int start[AS_THUMB_SIDE + 1]; /* (S + 1) first token of each block; start[S] = T */
    float cmax[AS_THUMB_SIDE];   /* (S) */
    double csum[AS_THUMB_SIDE];  /* (S) */
    float *mx, *mean;            /* (S, S) this head's thumbnails */
} thumb_acc;

/* An empty accumulator of side S over T tokens writing into mx and mean (S, S). */
static void thumb_init(thumb_acc *a, int S, int T, float *mx, float *mean) {
    memset(a, 0, sizeof *a);
    a->S = S;
    a->T = T;
    a->mx = mx;
    a->mean = mean;
    for (int b = 0; b <= S; b++) a->start[b] = (int)((int64_t)b * T / S);
}

/* Rows [i0, i1) of P (i1 - i0, T) into a; ru says which keys a row may see (the others
 * are 0 in P, so they are skipped). */
static void thumb_rows(const float *P, const attn_rule *ru, int i0, int i1, thumb_acc *a) {
    int T = a->T, S = a->S;
    const int *st = a->start;
    for (int i = i0; i < i1; i++) {
        const float *p = P + (size_t)(i - i0) * T;
        int hi = ru->causal ? i + 1 : T;
        int lo = ru->window > 0 && i - ru->window + 1 > 0 ? i - ru->window + 1 : 0;
        for (int c = 0; c < S; c++) {
            int k0 = st[c], k1 = st[c + 1];
            if (k1 <= lo) continue;
            if (k0 >= hi) break;
            if (k0 < lo) k0 = lo;
            if (k1 > hi) k1 = hi;
            float m = a->cmax[c], sum = 0.0f;
            for (int j = k0; j < k1; j++) {
                sum += p[j];
                m = p[j] > m ? p[j] : m;
            }
            a->cmax[c] = m;
            a->csum[c] += sum;
        }
        int r0 = st[a->b], r1 = st[a->b + 1];
        if (i + 1 < r1) continue;
        for (int c = 0; c < S; c++) { /* the block row's last row: out, and reset */
            double cells = (double)(st[c + 1] - st[c]) * (double)(r1 - r0);
            a->mx[(size_t)a->b * S + c] = a->cmax[c];
            a->mean[(size_t)a->b * S + c] = (float)(a->csum[c] / cells);
            a->cmax[c] = 0.0f;
            a->csum[c] = 0.0;
        }
        a->b++;
    }
}

void as_thumbs_pool(const float *P, int T, float *mx, float *mean) {
    thumb_acc a;
    attn_rule every = {0}; /* every key of every row: masked weights are 0 in P */
    thumb_init(&a, T < AS_THUMB_SIDE ? T : AS_THUMB_SIDE, T, mx, mean);
    thumb_rows(P, &every, 0, T, &a);
}

/* dst (T, Dh) = columns [h Dh, (h + 1) Dh) of src (T rows, stride ld). */
static void copy_head(float *dst, const float *src, int T, int ld, int Dh, int h) {
    for (int t = 0; t < T; t++)
        memcpy(dst + (size_t)t * Dh, src + (size_t)t * ld + (size_t)h * Dh, (size_t)Dh * sizeof(float));
}

typedef struct {
    fwd_ws *ws;
    as_run *r;
    unsigned what;
    int l, T, Dh, H, Hkv;
    attn_rule rule;
    int Tk;              /* keys: 0 = T (self-attention), else the encoder output's rows or,
                            in a generation step, the cache's */
    const float *keep;   /* (Tk) keys' mask; NULL = ws->keep */
    int q0;              /* position of the first query row (a generation step's kv->n) */
    const float *kc, *vc; /* (Tk, Hkv Dh) keys and values to read instead of ws->k, ws->v */
    float *rows;         /* (H, Tk) the last query row's probabilities of every head, or NULL */
} attn_job;

/* Attention knockout (as_intervention) of layer l, query head h in the probabilities P
 * (i1 - i0, T) of query rows [i0, i1): the listed edges set to 0, with renorm each changed
 * row divided by its new sum (left at 0 when nothing is left), and the changed rows of
 * ctx (row i0 of (T, ldq)) recomputed as P V from vh (T, ldk). */
static void knockout_rows(const as_intervention *iv, int l, int h, int T, int Dh, int i0, int i1, float *P,
                          const float *vh, int ldk, float *ctx, int ldq) {
    for (int pass = 0; pass < 2; pass++)
        for (int e = 0; e < iv->n_edges; e++) {
            const as_edge *x = &iv->edges[e];
            if (x->layer != l || (x->head != -1 && x->head != h) || x->query < i0 || x->query >= i1) continue;
            float *p = P + (size_t)(x->query - i0) * T, *c = ctx + (size_t)(x->query - i0) * ldq;
            if (pass == 0) {
                p[x->key] = 0.0f;
                continue;
            }
            double s = 0.0;
            for (int j = 0; j < T; j++) s += p[j];
            if (iv->renorm && s > 0.0 && s != 1.0)
                for (int j = 0; j < T; j++) p[j] = (float)(p[j] / s);
            cblas_sgemv(CblasRowMajor, CblasTrans, T, Dh, 1.0f, vh, ldk, p, 1, 0.0f, c, 1);
        }
}

/* Head ablation (as_intervention) of layer l in ctx (T, H Dh): each listed head's columns
 * set to 0, or to their mean over the real positions (keep[i] != 0). */
static void ablate_heads(const as_intervention *iv, int l, int T, int H, int Dh, const float *keep, float *ctx) {
    const size_t ld = (size_t)H * Dh;
    for (int e = 0; e < iv->n_heads; e++) {
        if (iv->heads[e].layer != l) continue;
        float *c = ctx + (size_t)iv->heads[e].head * Dh;
        for (int d = 0; d < Dh; d++) {
            double s = 0.0;
            int n = 0;
            for (int i = 0; i < T; i++)
                if (keep[i] != 0.0f) s += c[i * ld + d], n++;
            float v = iv->head_mode == AS_HEAD_MEAN && n ? (float)(s / n) : 0.0f;
            for (int i = 0; i < T; i++) c[i * ld + d] = v;
        }
    }
}

static int captured(const as_run *r, int l, int h) {
    return l >= r->layer_lo && l < r->layer_lo + r->n_lay && h >= r->head_lo && h < r->head_lo + r->n_hd;
}

static size_t cap_slot(const as_run *r, int l, int h) {
    return (size_t)(l - r->layer_lo) * r->n_hd + (size_t)(h - r->head_lo);
}

/* Query head h of layer j->l, on thread tid, in blocks of ATTN_ROW_BLOCK query rows:
 * scores and probabilities go straight into the captured (or saved) T x T tensors when
 * there are some, else through the thread's (ATTN_ROW_BLOCK, T) scratch, so a forward that
 * keeps no T x T tensor needs memory linear in T. */
static void attn_task(void *ctx, int h, int tid) {
    const attn_job *j = ctx;
    as_run *r = j->r;
    fwd_ws *ws = j->ws;
    const tape_layer *tl = ws->tl;
    int T = j->T, Dh = j->Dh, l = j->l, g = h / (j->H / j->Hkv), ldq = j->H * Dh, ldk = j->Hkv * Dh;
    attn_rule ru = j->rule;
    if (ru.rel) ru.rel += h; /* this head's column of the relative position bias */
    int Tk = j->Tk > 0 ? j->Tk : T; /* query rows T, key rows Tk */
    const float *keep = j->keep ? j->keep : ws->keep;
    size_t TT = (size_t)T * Tk, TD = (size_t)T * Dh, TKD = (size_t)Tk * Dh, RT = (size_t)ATTN_ROW_BLOCK * Tk;
    int cap = captured(r, l, h);
    size_t slot = cap ? cap_slot(r, l, h) : 0;
    float *cS = (cap && (j->what & CAP_SCORES)) ? r->scores + slot * TT : NULL;
    float *cP = (cap && (j->what & CAP_ATTN)) ? r->attn + slot * TT : NULL;
    float *Sf = tl && tl->S ? tl->S + (size_t)h * TT : cS; /* the backward reads P (and soft-capped S) */
    float *Pf = tl ? tl->P + (size_t)h * TT : cP;
    head_stats_acc st = {{0}, 0, 0, 0};
    thumb_acc th;
    int thumbs = cap && r->thumb_max && Tk == T; /* self-attention only */
    if (thumbs) {
        size_t SS = (size_t)r->thumb * r->thumb;
        thumb_init(&th, r->thumb, T, r->thumb_max + slot * SS, r->thumb_mean + slot * SS);
    }
    const float *kh = (j->kc ? j->kc : ws->k) + (size_t)g * Dh, *vh = (j->vc ? j->vc : ws->v) + (size_t)g * Dh;
    for (int i0 = 0; i0 < T; i0 += ATTN_ROW_BLOCK) { /* rows of the buffers; positions q0 + i */
        int i1 = i0 + ATTN_ROW_BLOCK < T ? i0 + ATTN_ROW_BLOCK : T;
        float *S = Sf ? Sf + (size_t)i0 * Tk : ws->s + (size_t)tid * RT;
        float *P = Pf ? Pf + (size_t)i0 * Tk : ws->p + (size_t)tid * RT;
        /* with dropout P is the tape's, so the probabilities scratch holds P * mask */
        const float *dm = tl && tl->m_attn ? tl->m_attn + (size_t)h * TT + (size_t)i0 * T : NULL;
        attend_rows(keep, &ru, Tk, Dh, j->q0 + i0, j->q0 + i1, ws->q + (size_t)i0 * ldq + (size_t)h * Dh, ldq, kh,
                    vh, ldk, S, P, dm, ws->p + (size_t)tid * RT, ws->ctx + (size_t)i0 * ldq + (size_t)h * Dh);
        if (ws->iv && j->Tk <= 0)
            knockout_rows(ws->iv, l, h, T, Dh, i0, i1, P, ws->v + (size_t)g * Dh, ldk,
                          ws->ctx + (size_t)i0 * ldq + (size_t)h * Dh, ldq);
        if (cap && (j->what & CAP_STATS)) head_stats_rows(P, ws->keep, T, i0, i1, &st);
        if (thumbs) thumb_rows(P, &ru, i0, i1, &th);
        if (j->rows && i1 == T) /* the block holding the last query row */
            memcpy(j->rows + (size_t)h * Tk, P + (size_t)(T - 1 - i0) * Tk, (size_t)Tk * sizeof(float));
    }
    if (cap && (j->what & CAP_STATS)) head_stats_out(&st, r->head_stats + slot * AS_HEAD_N_STATS);
    if (cP && Pf != cP) memcpy(cP, Pf, TT * sizeof(float));
    if (cS && Sf != cS) memcpy(cS, Sf, TT * sizeof(float));
    if (cap && (j->what & CAP_QKV)) {
        copy_head(r->q + slot * TD, ws->q, T, ldq, Dh, h);
        copy_head(r->k + slot * TKD, ws->k, Tk, ldk, Dh, g);
        copy_head(r->v + slot * TKD, ws->v, Tk, ldk, Dh, g);
    }
}

void model_norm_rows(const as_model *m, const ln_t *ln, float *x, int T) {
    if (!ln->g) return;
    if (m->cfg.rms_norm) op_rmsnorm(ln, m->cfg.ln_eps, m->cfg.norm_add_one, x, T);
    else op_layernorm(ln, m->cfg.ln_eps, x, T);
}

/* The rotary table of layer l's T rows: the local one on Gemma 3's sliding layers. */
static const float *rope_of(const as_model *m, const fwd_ws *ws, int l, int T) {
    int local = m->cfg.rope_local_theta > 0 && m->cfg.layer_sliding[l];
    return ws->rope + (local ? (size_t)T * m->cfg.rope_dim : 0);
}

/* Queries / keys of the captured heads before RoPE: q of query head h, k of its group. */
static void capture_pre_rope(const as_run *r, const fwd_ws *ws, int l, int T, int H, int Hkv, int Dh) {
    size_t TD = (size_t)T * Dh;
    for (int h = 0; h < H; h++) {
        if (!captured(r, l, h)) continue;
        size_t slot = cap_slot(r, l, h);
        copy_head(r->q_pre + slot * TD, ws->q, T, H * Dh, Dh, h);
        copy_head(r->k_pre + slot * TD, ws->k, T, Hkv * Dh, Dh, h / (H / Hkv));
    }
}

/* Query head h of beam b (idx = b H + h) in a beam step: row b of the queries against
 * the n + 1 keys of beam b's cache, the row at position n. */
static void attn_beam_task(void *ctx, int idx, int tid) {
    const attn_job *j = ctx;
    fwd_ws *ws = j->ws;
    int b = idx / j->H, h = idx % j->H, Dh = j->Dh, g = h / (j->H / j->Hkv), ldq = j->H * Dh, ldk = j->Hkv * Dh;
    const model_kv *kv = &ws->beams[b];
    int n = kv->n, Tk = n + 1;
    size_t layer = (size_t)j->l * kv->cap * kv->Kw, RT = (size_t)ATTN_ROW_BLOCK * Tk;
    attn_rule ru = j->rule;
    if (ru.rel) ru.rel += h; /* this head's column of the relative position bias */
    attend_rows(ws->keep, &ru, Tk, Dh, n, n + 1, ws->q + (size_t)b * ldq + (size_t)h * Dh, ldq,
                kv->k + layer + (size_t)g * Dh, kv->v + layer + (size_t)g * Dh, ldk, ws->s + (size_t)tid * RT,
                ws->p + (size_t)tid * RT, NULL, NULL, ws->ctx + (size_t)b * ldq + (size_t)h * Dh);
}

/* A beam step's attention of layer j->l: row b's key and value into beams[b] at its
 * position n, then every (beam, head) pair. */
static void beams_attend(attn_job *j, int nthreads) {
    fwd_ws *ws = j->ws;
    for (int b = 0; b < j->T; b++) {
        model_kv *kv = &ws->beams[b];
        size_t at = ((size_t)j->l * kv->cap + (size_t)kv->n) * kv->Kw;
        memcpy(kv->k + at, ws->k + (size_t)b * kv->Kw, kv->Kw * sizeof(float));
        memcpy(kv->v + at, ws->v + (size_t)b * kv->Kw, kv->Kw * sizeof(float));
    }
    as_parallel_for(j->H * j->T, nthreads, attn_beam_task, j);
}

static void attention(const as_model *m, const layer_w *lw, int l, int T, const float *in, fwd_ws *ws, as_run *r,
                      unsigned what, int nthreads) {
    const as_config *c = &m->cfg;
    int H = c->n_head, Hkv = c->n_kv_head, Dh = c->d_head;
    const lin_t *qkv[3] = {&lw->q, &lw->k, &lw->v};
    float *qkv_out[3] = {ws->q, ws->k, ws->v};
    op_linear_n(qkv, 3, in, T, qkv_out);
    const tape_layer *tl = ws->tl;
    if (tl && tl->qn_in) {
        memcpy(tl->qn_in, ws->q, (size_t)T * H * Dh * sizeof(float));
        memcpy(tl->kn_in, ws->k, (size_t)T * Hkv * Dh * sizeof(float));
    }
    if (lw->q_norm.g) { /* each head's (Dh) vector: rows of Dh in the (T, H Dh) buffers */
        op_rmsnorm(&lw->q_norm, c->ln_eps, c->norm_add_one, ws->q, T * H);
        op_rmsnorm(&lw->k_norm, c->ln_eps, c->norm_add_one, ws->k, T * Hkv);
    }
    if (c->rope_dim > 0) {
        if ((what & CAP_QKV) && r->q_pre) capture_pre_rope(r, ws, l, T, H, Hkv, Dh);
        const float *cs = rope_of(m, ws, l, T);
        op_rope_fwd(ws->q, T, (size_t)H * Dh, H, Dh, c->rope_dim, cs);
        op_rope_fwd(ws->k, T, (size_t)Hkv * Dh, Hkv, Dh, c->rope_dim, cs);
    }
    if (tl) {
        memcpy(tl->q, ws->q, (size_t)T * H * Dh * sizeof(float));
        memcpy(tl->k, ws->k, (size_t)T * Hkv * Dh * sizeof(float));
        memcpy(tl->v, ws->v, (size_t)T * Hkv * Dh * sizeof(float));
    }
    attn_job j = {ws, r, what, l, T, Dh, H, Hkv,
                  {c->causal, c->layer_sliding[l] ? c->sliding_window : 0, as_attn_scale(c, l), c->attn_softcap,
                   ws->bucket, m->rel_bias, H},
                  0,  NULL, 0, NULL, NULL, NULL};
    if (ws->kv) { /* a generation step: the rows' keys and values join the layer's cache */
        model_kv *kv = ws->kv;
        size_t Kw = (size_t)Hkv * Dh, layer = (size_t)l * kv->cap * Kw;
        memcpy(kv->k + layer + (size_t)kv->n * Kw, ws->k, (size_t)T * Kw * sizeof(float));
        memcpy(kv->v + layer + (size_t)kv->n * Kw, ws->v, (size_t)T * Kw * sizeof(float));
        j.q0 = kv->n;
        j.Tk = kv->n + T;
        j.kc = kv->k + layer;
        j.vc = kv->v + layer;
        j.rows = ws->rows;
    }
    if (ws->beams) beams_attend(&j, nthreads);
    else as_parallel_for(H, nthreads, attn_task, &j);
    if (ws->iv) ablate_heads(ws->iv, l, T, H, Dh, ws->keep, ws->ctx);
    if (tl) memcpy(tl->ctx, ws->ctx, (size_t)T * H * Dh * sizeof(float));
}

/* The cross-attention sub-layer of an encoder-decoder model's decoder layer (Vaswani et al.
 * 2017, sec. 3.2.3: queries from the decoder's stream, keys and values from the encoder's
 * output ws->mem, whose padding is masked), on ws->x (T, D): post-LN (BART, Marian)
 * x = LN_c(x + CrossAttn(x)); pre-norm (mBART) x = x + CrossAttn(LN_c(x)). Captured into
 * ws->xr (no statistics). Nothing for layers without one. */
static void cross_sublayer(const as_model *m, const layer_w *lw, int l, int T, fwd_ws *ws, unsigned what,
                           int nthreads) {
    if (!lin_has(&lw->cq)) return;
    const as_config *c = &m->cfg;
    size_t TD = (size_t)T * c->d_model;
    const float *in = ws->x;
    if (m->pre_ln) {
        memcpy(ws->h, ws->x, TD * sizeof(float));
        model_norm_rows(m, &lw->ln_c, ws->h, T);
        in = ws->h;
    }
    op_linear(&lw->cq, in, T, ws->q);
    attn_job j = {ws,     ws->xr,      what & (CAP_ATTN | CAP_SCORES | CAP_QKV),
                  l,      T,           c->d_head,
                  c->n_head, c->n_kv_head, {0, 0, as_attn_scale(c, l), 0.0f, NULL, NULL, 0},
                  ws->Tm, ws->keep_mem, 0, NULL, NULL, NULL};
    if (ws->ck) { /* a generation step: the keys and values made once from the encoder's output */
        size_t at = (size_t)l * ws->Tm * c->n_kv_head * c->d_head;
        j.kc = ws->ck + at;
        j.vc = ws->cv + at;
        j.rows = ws->xrows ? ws->xrows + (size_t)l * c->n_head * ws->Tm : NULL;
    } else {
        const lin_t *kv[2] = {&lw->ck, &lw->cv};
        float *kv_out[2] = {ws->k, ws->v};
        op_linear_n(kv, 2, ws->mem, ws->Tm, kv_out);
    }
    as_parallel_for(c->n_head, nthreads, attn_task, &j);
    op_linear(&lw->co, ws->ctx, T, ws->h);
    op_add(ws->x, ws->h, TD);
    if (!m->pre_ln) model_norm_rows(m, &lw->ln_c, ws->x, T);
}

/* The feed-forward sub-layer on in (T, D) into out (T, D): ff2(act(ff1(in))) or, gated,
 * ff2(act(ff1(in)) * up(in)). */
static void mlp(const as_model *m, const layer_w *lw, int T, const float *in, fwd_ws *ws, float *out) {
    size_t TF = (size_t)T * m->cfg.d_ff;
    int gated = m->cfg.gated_mlp;
    const lin_t *in_maps[2] = {&lw->ff1, &lw->up};
    float *in_out[2] = {ws->ff, ws->up};
    op_linear_n(in_maps, gated ? 2 : 1, in, T, in_out);
    if (ws->tl) memcpy(ws->tl->ff_pre, ws->ff, TF * sizeof(float));
    if (gated && ws->tl) memcpy(ws->tl->up, ws->up, TF * sizeof(float));
    op_act_linear(m->cfg.act, ws->ff, gated ? ws->up : NULL, &lw->ff2, T, out);
}

/* One transformer layer on ws->x (T, D). Post-LN (BERT, Devlin et al. 2019):
 * x = LN1(x + Attn(x)); x = LN2(x + FF(x)). Pre-norm (GPT-2, Radford et al. 2019; the
 * LLaMA family): x = x + [N_pa](Attn(N1(x))); x = x + [N_pf](FF(N2(x))), with the
 * bracketed output norms only in Gemma 2/3. Training-mode dropout (the tape's masks)
 * multiplies each sub-layer's output just before its residual add. */
static void save(float *dst, const float *src, size_t n) {
    if (dst) memcpy(dst, src, n * sizeof(float));
}

static void layer_forward(const as_model *m, int l, int T, fwd_ws *ws, as_run *r, unsigned what, int nthreads) {
    const layer_w *lw = &m->layers[l];
    const tape_layer *tl = ws->tl;
    size_t TD = (size_t)T * m->cfg.d_model;
    if (tl) save(tl->x_in, ws->x, TD);
    if (m->pre_ln) {
        memcpy(ws->h, ws->x, TD * sizeof(float));
        model_norm_rows(m, &lw->ln1, ws->h, T);
        attention(m, lw, l, T, ws->h, ws, r, what, nthreads);
        op_linear(&lw->o, ws->ctx, T, ws->h);
        if (tl && lw->post_attn.g) save(tl->o_out, ws->h, TD);
        model_norm_rows(m, &lw->post_attn, ws->h, T);
        if (tl && tl->m_ao) op_mul(ws->h, tl->m_ao, TD);
        op_add(ws->x, ws->h, TD);
        if (tl) save(tl->mid, ws->x, TD);
        cross_sublayer(m, lw, l, T, ws, what, nthreads);
        memcpy(ws->h, ws->x, TD * sizeof(float));
        model_norm_rows(m, &lw->ln2, ws->h, T);
        mlp(m, lw, T, ws->h, ws, ws->h);
        if (tl && lw->post_ff.g) save(tl->r2, ws->h, TD);
        model_norm_rows(m, &lw->post_ff, ws->h, T);
        if (tl && tl->m_ff) op_mul(ws->h, tl->m_ff, TD);
        op_add(ws->x, ws->h, TD);
    } else {
        attention(m, lw, l, T, ws->x, ws, r, what, nthreads);
        op_linear(&lw->o, ws->ctx, T, ws->h);
        if (tl && tl->m_ao) op_mul(ws->h, tl->m_ao, TD);
        op_add(ws->x, ws->h, TD);
        if (tl) save(tl->mid, ws->x, TD);
        model_norm_rows(m, &lw->ln1, ws->x, T);
        cross_sublayer(m, lw, l, T, ws, what, nthreads);
        mlp(m, lw, T, ws->x, ws, ws->h);
        if (tl && tl->m_ff) op_mul(ws->h, tl->m_ff, TD);
        op_add(ws->x, ws->h, TD);
        if (tl) save(tl->r2, ws->x, TD);
        model_norm_rows(m, &lw->ln2, ws->x, T);
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
 * Dropout (cls_mask non-NULL) on the pooled vector (HF's classifier dropout).
 * MLM: dense + activation + LayerNorm, then the (tied) decoder + bias -> (T, V);
 * GPT-2 LM: x (already through ln_f) times wte^T -> (T, V). work: (T, D). */

void model_head_logits(const as_model *m, const as_encoding *enc, const float *x, const float *cls_mask,
                       float *logits, float *work) {
    int T = enc->n, D = m->cfg.d_model;
    if (m->heads & HEAD_CLASSIFIER) {
        int t = 0;
        if (m->cls_last_token) {
            for (int i = 0; i < T; i++)
                if (enc->mask[i] && (m->cfg.pad_token_id < 0 || enc->ids[i] != m->cfg.pad_token_id)) t = i;
        }
        const float *h0 = x + (size_t)t * D;
        if (lin_has(&m->cls_pre)) {
            op_linear(&m->cls_pre, h0, 1, work);
            cls_act(m->cls_pre_act, work, m->cls_pre.n_out);
            if (cls_mask) op_mul(work, cls_mask, (size_t)m->cls_pre.n_out);
            h0 = work;
        }
        op_linear(&m->cls_out, h0, 1, logits);
        return;
    }
    model_vocab_logits(m, x, T, logits, work);
}

void model_vocab_logits(const as_model *m, const float *x, int T, float *logits, float *work) {
    int D = m->cfg.d_model, V = m->cfg.vocab_size;
    const float *in = x;
    if (m->cfg.head_in_scale > 0) { /* T5 with a tied head: sequence_output * d_model^-0.5 */
        for (size_t i = 0; i < (size_t)T * D; i++) work[i] = x[i] * m->cfg.head_in_scale;
        in = work;
    }
    if (lin_has(&m->mlm_dense)) {
        op_linear(&m->mlm_dense, x, T, work);
        op_act(m->mlm_act, work, (size_t)T * D);
        op_layernorm(&m->mlm_ln, m->cfg.ln_eps, work, T);
        in = work;
    }
    lin_t dec = {.w = m->mlm_decoder, .b = m->mlm_bias, .n_in = D, .n_out = V, .ldw = D, .in_out = 0};
    op_linear(lin_has(&m->lm_head) ? &m->lm_head : &dec, in, T, logits);
    float cap = m->cfg.final_softcap;
    if (cap > 0.0f) /* Gemma 2: logits = c tanh(logits / c) */
        for (size_t i = 0; i < (size_t)T * V; i++) logits[i] = cap * tanhf(logits[i] / cap);
}

/* An intervention's heads and edges within the model and the T tokens. */
static as_status check_intervention(const as_model *m, int T, const as_intervention *iv, as_error *err) {
    const as_config *c = &m->cfg;
    if (m->dec) return as_err_set(err, AS_ERR_INPUT, "interventions apply to encoder-only and decoder-only models");
    if (iv->n_heads < 0 || iv->n_heads > AS_MAX_INTERVENTION_ITEMS || iv->n_edges < 0 ||
        iv->n_edges > AS_MAX_INTERVENTION_ITEMS || (iv->n_heads && !iv->heads) || (iv->n_edges && !iv->edges))
        return as_err_set(err, AS_ERR_INPUT, "intervention: %d heads and %d edges, at most %d of each", iv->n_heads,
                          iv->n_edges, AS_MAX_INTERVENTION_ITEMS);
    if (iv->head_mode != AS_HEAD_ZERO && iv->head_mode != AS_HEAD_MEAN)
        return as_err_set(err, AS_ERR_INPUT, "intervention: unknown head mode %d", iv->head_mode);
    for (int e = 0; e < iv->n_heads; e++) {
        const as_head_ref *x = &iv->heads[e];
        if (x->layer < 0 || x->layer >= c->n_layer || x->head < 0 || x->head >= c->n_head)
            return as_err_set(err, AS_ERR_INPUT, "ablated head %d:%d is outside layers 0..%d, heads 0..%d", x->layer,
                              x->head, c->n_layer - 1, c->n_head - 1);
    }
    for (int e = 0; e < iv->n_edges; e++) {
        const as_edge *x = &iv->edges[e];
        if (x->layer < 0 || x->layer >= c->n_layer || x->head < -1 || x->head >= c->n_head)
            return as_err_set(err, AS_ERR_INPUT, "knocked-out edge at %d:%d is outside layers 0..%d, heads 0..%d",
                              x->layer, x->head, c->n_layer - 1, c->n_head - 1);
        if (x->query < 0 || x->query >= T || x->key < 0 || x->key >= T)
            return as_err_set(err, AS_ERR_INPUT, "knocked-out edge %d>%d is outside the %d tokens", x->query, x->key,
                              T);
    }
    return AS_OK;
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
    return spec->intervene ? check_intervention(m, enc->n, spec->intervene, err) : AS_OK;
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
    return model_forward(m, enc, spec, NULL, NULL, out, err);
}

/* The run of a forward: sizes, the captured selection and one block holding every
 * captured tensor (exactly what spec asks for). Tk: the keys of each attention row (T, or
 * the source's tokens for a cross-attention run). Errors: out of memory. */
static as_status run_alloc(const as_model *m, const as_encoding *enc, const as_capture_spec *spec, unsigned what,
                           int n_run, int want_logits, int Tk, as_run **out, as_error *err) {
    const as_config *c = &m->cfg;
    int T = enc->n, D = c->d_model, L = c->n_layer, H = c->n_head, Dh = c->d_head;
    as_run *r = as_calloc(1, sizeof *r);
    if (!r) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    r->T = T;
    r->L = L;
    r->H = H;
    r->D = D;
    r->Dh = Dh;
    r->Hkv = c->n_kv_head;
    r->n_run = n_run;
    r->layer_lo = spec->layer >= 0 ? spec->layer : 0;
    r->n_lay = spec->layer >= 0 ? 1 : L;
    r->head_lo = spec->head >= 0 ? spec->head : 0;
    r->n_hd = spec->head >= 0 ? 1 : H;
    r->Tk = Tk;
    size_t nlh = (size_t)r->n_lay * r->n_hd, TT = (size_t)T * Tk;
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
            r->k = cap_take(base, &off, &r->bytes, nlh, (size_t)Tk, (size_t)Dh, &fail);
            r->v = cap_take(base, &off, &r->bytes, nlh, (size_t)Tk, (size_t)Dh, &fail);
            if (c->rope_dim > 0) {
                r->q_pre = cap_take(base, &off, &r->bytes, nlh, (size_t)T, (size_t)Dh, &fail);
                r->k_pre = cap_take(base, &off, &r->bytes, nlh, (size_t)T, (size_t)Dh, &fail);
            }
        }
        float *mk = cap_take(base, &off, &r->bytes, (size_t)T, 1, 1, &fail); /* int32 mask */
        r->attention_mask = (int32_t *)mk;
        if (what & CAP_STATS)
            r->head_stats = cap_take(base, &off, &r->bytes, nlh, AS_HEAD_N_STATS, 1, &fail);
        if ((what & CAP_THUMBS) && Tk == T) {
            r->thumb = T < AS_THUMB_SIDE ? T : AS_THUMB_SIDE;
            size_t SS = (size_t)r->thumb * r->thumb;
            r->thumb_max = cap_take(base, &off, &r->bytes, nlh, SS, 1, &fail);
            r->thumb_mean = cap_take(base, &off, &r->bytes, nlh, SS, 1, &fail);
        }
        if (what & CAP_HIDDEN)
            r->hidden = cap_take(base, &off, &r->bytes, (size_t)n_run + 1, (size_t)T, (size_t)D, &fail);
        if (want_logits)
            r->logits = cap_take(base, &off, &r->bytes, (size_t)r->logits_rows, (size_t)r->logits_cols, 1, &fail);
        if (!pass && !fail && off && !(r->block_ = as_large_get(off, &r->block_cap_))) fail = 1;
    }
    if (fail) {
        as_err_set(err, AS_ERR_INTERNAL, "out of memory for the captured tensors (%zu bytes)", r->bytes);
        as_run_free(r);
        return err->code;
    }
    *out = r;
    return AS_OK;
}

/* The embeddings of the model's family: x (T, D); tmp (T, max(D, De)) scratch. */
static void stack_embed(const as_model *m, const emb_in *ein, float *x, float *tmp) {
    switch (m->cfg.arch) {
    case ARCH_BERT:
    case ARCH_ROBERTA: bert_embed(m, ein, x, tmp); break;
    case ARCH_DISTILBERT: distilbert_embed(m, ein, x); break;
    case ARCH_GPT2: gpt2_embed(m, ein, x); break;
    case ARCH_LLAMA: llama_embed(m, ein, x); break;
    case ARCH_BART: bart_embed(m, ein, x); break;
    case ARCH_T5: llama_embed(m, ein, x); break; /* the shared table's rows, no positions */
    }
}

/* The forward's workspace (fwd_ws) for T = enc->n rows on nthreads threads whose attention
 * rows read Tk keys (T; a generation step's cached positions + T; a beam step's n + 1),
 * and the rotary tables of the rows' positions: Tk - T .. Tk - 1, or with beams every row
 * at Tk - 1 (all 0 when positions are ablated). keep: enc->mask, or 1 for every key of a
 * step. */
static as_status ws_alloc(const as_model *m, const as_encoding *enc, const as_capture_spec *spec, int nthreads,
                          int Tk, int beams, fwd_ws *out, size_t *cap, as_error *err) {
    const as_config *c = &m->cfg;
    int T = enc->n, D = c->d_model, H = c->n_head, Dh = c->d_head;
    fwd_ws ws = {0};
    as_status s = AS_OK;
    {
        size_t W = (size_t)(c->d_embed > D ? c->d_embed : D), Qw = (size_t)H * Dh, Kw = (size_t)c->n_kv_head * Dh;
        size_t TF = (size_t)T * c->d_ff, R = (size_t)c->rope_dim;
        size_t max_in = W > Qw ? W : Qw;
        if ((size_t)c->d_ff > max_in) max_in = (size_t)c->d_ff;
        /* linear maps' scratch (per thread): BF16 rows widened, or the BF16 fallback's blocks */
        size_t conv = as_gemm_bf16_scratch((int)max_in);
        size_t xb = m->precision == AS_PRECISION_BF16 ? ((size_t)T * max_in + 1) / 2 : 0; /* in floats */
        size_t n = (size_t)T * (2 * W + 2 * Qw + 2 * Kw) + TF * (c->gated_mlp ? 2 : 1) +
                   2 * (size_t)nthreads * ATTN_ROW_BLOCK * Tk + (size_t)Tk + 2 * (size_t)T * R +
                   (size_t)nthreads * conv + xb;
        ws.block = n <= SIZE_MAX / sizeof(float) ? as_large_get(n * sizeof(float), cap) : NULL;
        if (!ws.block) {
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory for the forward workspace");
        }
        ws.x = ws.block;
        ws.h = ws.x + (size_t)T * W;
        ws.q = ws.h + (size_t)T * W;
        ws.k = ws.q + (size_t)T * Qw;
        ws.v = ws.k + (size_t)T * Kw;
        ws.ctx = ws.v + (size_t)T * Kw;
        ws.ff = ws.ctx + (size_t)T * Qw;
        ws.up = c->gated_mlp ? ws.ff + TF : NULL;
        ws.s = ws.ff + TF * (c->gated_mlp ? 2 : 1);
        ws.p = ws.s + (size_t)nthreads * ATTN_ROW_BLOCK * Tk;
        ws.keep = ws.p + (size_t)nthreads * ATTN_ROW_BLOCK * Tk;
        ws.rope = R ? ws.keep + Tk : NULL;
        ws.conv = ws.keep + Tk + 2 * (size_t)T * R;
        ws.conv_per_thread = conv;
        ws.xb = xb ? (uint16_t *)(ws.conv + (size_t)nthreads * conv) : NULL;
        for (int i = 0; i < Tk; i++) ws.keep[i] = Tk != T || enc->mask[i] ? 1.0f : 0.0f;
        /* positions Tk-T..Tk-1, or every row at Tk - 1 for beams (all 0 when positions are
           ablated: no rotation) */
        if (R && llama_rope_tables(m, beams ? Tk - 1 : Tk - T, beams ? 0 : 1, T, (spec->ablate & ABLATE_POSITION) != 0,
                                   ws.rope)) {
            as_large_put(ws.block, *cap);
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory for the forward workspace");
        }
    }
    *out = ws;
    return s;
}

/* Draws the dropout masks of a forward on tp from (tp->drop_seed, site). */
static void tape_masks(const as_model *m, const model_tape *tp) {
    const as_config *c = &m->cfg;
    size_t TD = (size_t)tp->T * c->d_model, HTT = (size_t)c->n_head * tp->T * tp->T;
    float p = tp->p_drop;
    op_drop_mask(tp->m_emb, 0, TD, op_drop_key(tp->drop_seed, 0), p);
    if (tp->m_cls) op_drop_mask(tp->m_cls, 0, (size_t)m->cls_pre.n_out, op_drop_key(tp->drop_seed, 1), p);
    for (int l = 0; l < c->n_layer; l++) {
        const tape_layer *tl = &tp->lay[l];
        uint32_t site = 4u * (uint32_t)(l + 1);
        op_drop_mask(tl->m_attn, 0, HTT, op_drop_key(tp->drop_seed, site), p);
        op_drop_mask(tl->m_ao, 0, TD, op_drop_key(tp->drop_seed, site + 1), p);
        op_drop_mask(tl->m_ff, 0, TD, op_drop_key(tp->drop_seed, site + 2), p);
    }
}

as_status model_forward(const as_model *m, const as_encoding *enc, const as_capture_spec *spec, const float *word,
                        model_tape *tape, as_run **out, as_error *err) {
    as_status s;
    *out = NULL;
    if (m->dec)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s is an encoder-decoder model (%s): it needs a target (attnscope run --target or "
                          "--target-ids)",
                          m->dir, m->cfg.model_type);
    if ((s = check_input(m, enc, spec, err))) return s;
    if (tape && (tape->T != enc->n || spec->ablate || spec->intervene))
        return as_err_set(err, AS_ERR_INTERNAL, "model_forward: the tape needs no ablation and T = %d", tape->T);
    emb_in ein = {enc, spec->ablate, word, 0, 0};
    const as_config *c = &m->cfg;
    int T = enc->n, D = c->d_model, L = c->n_layer;
    unsigned what = spec->what & (CAP_ALL | CAP_STATS | CAP_THUMBS);
    int nthreads = spec->threads > 0 ? spec->threads : as_n_cores();
    int want_logits = (what & CAP_LOGITS) && m->heads;
    int per_layer = what & (CAP_ATTN | CAP_SCORES | CAP_QKV | CAP_HIDDEN | CAP_STATS | CAP_THUMBS);
    int n_run = L;
    if (!want_logits && spec->layer >= 0) n_run = spec->layer + 1;
    if (!want_logits && !per_layer) n_run = 0;
    if (tape) n_run = L; /* the backward starts after the last layer */
    fwd_ws ws = {0};
    size_t ws_cap = 0;
    as_run *r = NULL;
    if ((s = run_alloc(m, enc, spec, what, n_run, want_logits, enc->n, &r, err))) return s;
    if ((s = ws_alloc(m, enc, spec, nthreads, enc->n, 0, &ws, &ws_cap, err))) goto cleanup;
    ws.iv = spec->intervene;
    par_state saved;
    model_par_begin(nthreads, ws.conv, ws.conv_per_thread, ws.xb, &saved); /* OpenBLAS to 1 thread */
    stack_embed(m, &ein, ws.x, ws.h);
    size_t TD = (size_t)T * D;
    if (tape && tape->m_emb) {
        tape_masks(m, tape);
        op_mul(ws.x, tape->m_emb, TD);
    }
    if (r->hidden) memcpy(r->hidden, ws.x, TD * sizeof(float));
    memcpy(r->attention_mask, enc->mask, (size_t)T * sizeof(int32_t));
    for (int l = 0; l < n_run; l++) {
        ws.tl = tape ? &tape->lay[l] : NULL;
        layer_forward(m, l, T, &ws, r, what, nthreads);
        if (tape && l == L - 1) memcpy(tape->x_last, ws.x, TD * sizeof(float));
        if (m->pre_ln && l == L - 1) model_norm_rows(m, &m->ln_f, ws.x, T);
        if (r->hidden) memcpy(r->hidden + (size_t)(l + 1) * TD, ws.x, TD * sizeof(float));
    }
    if (want_logits) model_head_logits(m, enc, ws.x, tape ? tape->m_cls : NULL, r->logits, ws.h);
    model_par_end(&saved);
    *out = r;
    r = NULL;
    s = AS_OK;
cleanup:
    as_large_put(ws.block, ws_cap);
    as_run_free(r);
    return s;
}

int model_kv_supported(const as_model *m) {
    const as_config *c = &m->cfg;
    return !m->dec && c->causal && (m->heads & HEAD_LM) && (c->arch == ARCH_GPT2 || c->arch == ARCH_LLAMA) &&
           c->rope_scaling != ROPE_SCALE_DYNAMIC && c->rope_scaling != ROPE_SCALE_LONGROPE;
}

as_status model_kv_init(const as_model *m, int cap, model_kv *kv, as_error *err) {
    const as_config *c = &m->cfg;
    memset(kv, 0, sizeof *kv);
    if (cap < 1 || cap > as_model_max_tokens(m))
        return as_err_set(err, AS_ERR_INPUT, "a key/value cache of %d positions: the model takes 1 to %d", cap,
                          as_model_max_tokens(m));
    kv->cap = cap;
    kv->layers = c->n_layer;
    kv->Kw = (size_t)c->n_kv_head * c->d_head;
    size_t n = as_mul_size(as_mul_size((size_t)c->n_layer, (size_t)cap), kv->Kw);
    if (n > SIZE_MAX / (2 * sizeof(float)) || !(kv->k = as_large_get(2 * n * sizeof(float), &kv->bytes_)))
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for the key/value cache of %d positions", cap);
    kv->v = kv->k + n;
    return AS_OK;
}

void model_kv_free(model_kv *kv) {
    if (kv->k) as_large_put(kv->k, kv->bytes_);
    memset(kv, 0, sizeof *kv);
}

void model_kv_copy(model_kv *dst, const model_kv *src) {
    AS_ASSERT(dst->cap == src->cap && dst->layers == src->layers && dst->Kw == src->Kw);
    size_t layer = (size_t)src->cap * src->Kw, used = (size_t)src->n * src->Kw * sizeof(float);
    for (int l = 0; l < src->layers; l++) {
        memcpy(dst->k + (size_t)l * layer, src->k + (size_t)l * layer, used);
        memcpy(dst->v + (size_t)l * layer, src->v + (size_t)l * layer, used);
    }
    dst->n = src->n;
}

static void t5_buckets(const as_config *c, int T, int bidirectional, int32_t *out);

/* The generation steps' forward on caches: n ids at positions self->n .. self->n + n - 1
 * of one sequence (beams NULL; logits of the last row), or one id of each of n beams at
 * position beams[0].n, row b on beams[b] (self NULL; logits of every row). x NULL: m is a
 * decoder-only model, rows (L, H, Tk) its self-attention rows of the last position; else
 * m's decoder runs, its cross-attention on x's encoder keys and values, rows (Ld, H, Ts)
 * the cross-attention's. Callers check that m is served. */
static as_status step_forward(const as_model *m, const model_s2s_kv *x, model_kv *self, model_kv *beams,
                              const int32_t *ids, int n, int threads, float *logits, float *rows, as_error *err) {
    const as_model *d = x ? m->dec : m;
    const as_config *c = &d->cfg;
    model_kv *first = beams ? beams : self;
    int n0 = first->n, last_rows = beams ? n : 1; /* rows whose logits are asked for: the last last_rows */
    for (int b = 1; beams && b < n; b++)
        if (beams[b].n != n0)
            return as_err_set(err, AS_ERR_INPUT, "beam %d's cache holds %d positions, beam 0's %d", b, beams[b].n, n0);
    int Tk = beams ? n0 + 1 : n0 + n;
    if (n < 1 || Tk > first->cap)
        return as_err_set(err, AS_ERR_INPUT, "%d tokens after %d cached: over the cache's %d positions", beams ? 1 : n,
                          n0, first->cap);
    as_encoding enc = {0};
    as_status s = as_encoding_from_ids(m, ids, NULL, n, &enc, err);
    if (s) return s;
    as_capture_spec spec = {.what = 0, .layer = -1, .head = -1, .threads = threads};
    int nthreads = threads > 0 ? threads : as_n_cores(), L = c->n_layer, H = c->n_head, D = c->d_model;
    fwd_ws ws = {0};
    size_t ws_cap = 0;
    as_run r0 = {0}; /* captures nothing: no layer selected */
    /* scratch rows as wide as the longer of the self- and the cross-attention's keys */
    int wide = x && x->Ts > Tk ? x->Ts : Tk;
    if ((s = ws_alloc(d, &enc, &spec, nthreads, wide, beams != NULL, &ws, &ws_cap, err))) goto cleanup;
    if (d->rel_bias && !(ws.bucket = as_malloc_array((size_t)Tk * Tk, sizeof(int32_t)))) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory for the position buckets");
        goto cleanup;
    }
    if (ws.bucket) t5_buckets(c, Tk, !c->causal, ws.bucket); /* rows: every position so far */
    ws.kv = self;
    ws.beams = beams;
    if (x) {
        ws.ck = x->ck, ws.cv = x->cv, ws.xrows = rows;
        ws.Tm = x->Ts, ws.keep_mem = x->keep_mem, ws.xr = &r0;
    }
    par_state saved;
    model_par_begin(nthreads, ws.conv, ws.conv_per_thread, ws.xb, &saved);
    emb_in ein = {&enc, 0, NULL, n0, beams != NULL};
    stack_embed(d, &ein, ws.x, ws.h);
    for (int l = 0; l < L; l++) {
        ws.rows = rows && !x ? rows + (size_t)l * H * Tk : NULL;
        layer_forward(d, l, n, &ws, &r0, 0, nthreads);
    }
    float *xl = ws.x + (size_t)(n - last_rows) * D;
    if (d->pre_ln) model_norm_rows(d, &d->ln_f, xl, last_rows);
    model_vocab_logits(d, xl, last_rows, logits, ws.h);
    model_par_end(&saved);
    if (self) self->n = Tk;
    for (int b = 0; beams && b < n; b++) beams[b].n = Tk;
cleanup:
    free(ws.bucket);
    as_large_put(ws.block, ws_cap);
    as_encoding_free(&enc);
    return s;
}

/* AS_ERR_INPUT unless model_kv_supported(m). */
static as_status kv_served(const as_model *m, as_error *err) {
    if (model_kv_supported(m)) return AS_OK;
    return as_err_set(err, AS_ERR_INPUT, "%s: generation with a key/value cache needs a decoder-only model "
                      "whose RoPE does not depend on the length", m->dir);
}

as_status model_forward_step(const as_model *m, model_kv *kv, const int32_t *ids, int n, int threads,
                             float *logits, float *rows, as_error *err) {
    as_status s = kv_served(m, err);
    return s ? s : step_forward(m, NULL, kv, NULL, ids, n, threads, logits, rows, err);
}

as_status model_forward_beams(const as_model *m, model_kv *kv, int nb, const int32_t *ids, int threads,
                              float *logits, as_error *err) {
    as_status s = kv_served(m, err);
    return s ? s : step_forward(m, NULL, NULL, kv, ids, nb, threads, logits, NULL, err);
}

as_status as_run_attention_rows(const as_model *m, const as_run *r, int l, int h, int i0, int i1, float *out,
                                as_error *err) {
    const as_config *c = &m->cfg;
    if (!r->q || !r->k || !captured(r, l, h))
        return as_err_set(err, AS_ERR_INPUT, "layer %d head %d: queries and keys were not captured (capture qkv)", l,
                          h);
    if (r->H != c->n_head || r->Dh != c->d_head || r->L != c->n_layer)
        return as_err_set(err, AS_ERR_INPUT, "the run was not computed by this model");
    int T = r->T, Dh = r->Dh;
    if (i0 < 0 || i1 > T || i0 >= i1)
        return as_err_set(err, AS_ERR_INPUT, "rows [%d, %d) are outside [0, %d)", i0, i1, T);
    size_t slot = cap_slot(r, l, h), TD = (size_t)T * Dh;
    const float *q = r->q + slot * TD, *k = r->k + slot * TD;
    if (c->rel_buckets > 0 || (r->Tk > 0 && r->Tk != r->T))
        return as_err_set(err, AS_ERR_INPUT,
                          "rows are recomputed only for self-attention without a relative position bias");
    attn_rule ru = {c->causal, c->layer_sliding[l] ? c->sliding_window : 0, as_attn_scale(c, l), c->attn_softcap,
                    NULL, NULL, 0};
    /* the forward's own blocks: ATTN_ROW_BLOCK query rows against every key by one sgemm,
       then the masked softmax of each row (attn_probs_rows) */
    int B = i1 - i0 < ATTN_ROW_BLOCK ? i1 - i0 : ATTN_ROW_BLOCK;
    float *keep = as_malloc_array((size_t)T, sizeof(float));
    float *S = as_malloc_array(as_mul_size((size_t)B, (size_t)T), sizeof(float)); /* (B, T) scores */
    if (!keep || !S) {
        free(keep);
        free(S);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    for (int j = 0; j < T; j++) keep[j] = r->attention_mask[j] ? 1.0f : 0.0f;
    for (int b0 = i0; b0 < i1; b0 += B) {
        int b1 = b0 + B < i1 ? b0 + B : i1;
        attn_probs_rows(keep, &ru, T, Dh, b0, b1, q + (size_t)b0 * Dh, Dh, k, Dh, S, out + (size_t)(b0 - i0) * T);
    }
    free(keep);
    free(S);
    return AS_OK;
}

as_status as_run_logit_lens(const as_model *m, const as_run *r, int l, int threads, float *logits, as_error *err) {
    const as_config *c = &m->cfg;
    if (!(m->heads & (HEAD_MLM | HEAD_LM)))
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no language-model head to read the layers through",
                          m->dir);
    if (!r->hidden || r->D != c->d_model || r->L != c->n_layer)
        return as_err_set(err, AS_ERR_INPUT, "the run has no hidden states of this model (capture hidden)");
    if (l < 0 || l > r->n_run)
        return as_err_set(err, AS_ERR_INPUT, "layer %d is outside the hidden states 0..%d", l, r->n_run);
    int T = r->T, D = c->d_model;
    size_t TD = (size_t)T * D;
    float *x = as_malloc_array(2 * TD, sizeof(float));
    size_t conv = as_gemm_bf16_scratch(D > c->d_ff ? D : c->d_ff);
    int nt = threads > 0 ? threads : as_n_cores();
    float *scratch = as_malloc_array((size_t)nt * conv, sizeof(float));
    if (!x || !scratch) {
        free(x);
        free(scratch);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    memcpy(x, r->hidden + (size_t)l * TD, TD * sizeof(float));
    par_state saved;
    model_par_begin(nt, scratch, conv, NULL, &saved);
    /* the last layer's hidden state already went through the final norm (as HF returns it) */
    if (m->pre_ln && l < c->n_layer) model_norm_rows(m, &m->ln_f, x, T);
    model_vocab_logits(m, x, T, logits, x + TD);
    model_par_end(&saved);
    free(x);
    free(scratch);
    return AS_OK;
}

/* T5's relative position buckets (transformers T5Attention._relative_position_bucket) of
 * (query i, key j), relative position j - i: bidirectional (encoder) halves the buckets
 * between keys before and after the query; positions below half the buckets get their own,
 * larger ones share log-spaced buckets up to max_distance, the last bucket beyond.
 * The log in float32, as torch computes it. out: (T, T). */
static void t5_buckets(const as_config *c, int T, int bidirectional, int32_t *out) {
    int nb0 = c->rel_buckets, maxd = c->rel_max_distance;
    int nb = bidirectional ? nb0 / 2 : nb0, max_exact = nb / 2;
    float denom = (float)log((double)maxd / max_exact);
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
            int rel = j - i, b = 0;
            if (bidirectional) {
                b = rel > 0 ? nb : 0;
                rel = rel < 0 ? -rel : rel;
            } else {
                rel = rel < 0 ? -rel : 0;
            }
            if (rel >= max_exact) {
                float v = logf((float)rel / (float)max_exact) / denom * (float)(nb - max_exact);
                /* v is NaN or infinite only when max_distance <= max_exact: the last bucket */
                int large = v >= 0.0f && v < (float)nb ? max_exact + (int)v : nb - 1;
                rel = large < nb - 1 ? large : nb - 1;
            }
            out[(size_t)i * T + j] = b + rel;
        }
}

/* One stack of an encoder-decoder forward on enc: embeddings, every layer (captured into r,
 * which may capture nothing and hold no attention_mask; the decoder's cross-attention into
 * ws->xr), the final norm of pre-norm stacks; the output stays in ws->x (T, D). */
static void seq2seq_stack(const as_model *m, const as_encoding *enc, unsigned ablate, fwd_ws *ws, as_run *r,
                          unsigned what, int nthreads) {
    int T = enc->n, L = m->cfg.n_layer;
    size_t TD = (size_t)T * m->cfg.d_model;
    emb_in ein = {enc, ablate, NULL, 0, 0};
    for (int i = 0; i < T; i++) ws->keep[i] = enc->mask[i] ? 1.0f : 0.0f;
    if (ws->bucket) t5_buckets(&m->cfg, T, !m->cfg.causal, ws->bucket);
    stack_embed(m, &ein, ws->x, ws->h);
    if (r->hidden) memcpy(r->hidden, ws->x, TD * sizeof(float));
    if (r->attention_mask) memcpy(r->attention_mask, enc->mask, (size_t)T * sizeof(int32_t));
    for (int l = 0; l < L; l++) {
        layer_forward(m, l, T, ws, r, what, nthreads);
        if (m->pre_ln && l == L - 1) model_norm_rows(m, &m->ln_f, ws->x, T);
        if (r->hidden) memcpy(r->hidden + (size_t)(l + 1) * TD, ws->x, TD * sizeof(float));
    }
}

as_status as_forward_seq2seq(const as_model *m, const as_encoding *src, const as_encoding *tgt,
                             const as_capture_spec *spec, as_run **out, as_error *err) {
    as_status s;
    *out = NULL;
    if (!m->dec)
        return as_err_set(err, AS_ERR_INPUT, "%s is not an encoder-decoder model (%s): it takes no target", m->dir,
                          m->cfg.model_type);
    const as_model *d = m->dec;
    if ((s = check_input(m, src, spec, err))) return as_err_prefix(err, "source");
    if ((s = check_input(d, tgt, spec, err))) return as_err_prefix(err, "target");
    unsigned what = spec->what & (CAP_ALL | CAP_STATS);
    int nthreads = spec->threads > 0 ? spec->threads : as_n_cores();
    int Ts = src->n, Tt = tgt->n, D = m->cfg.d_model;
    fwd_ws ws = {0};
    size_t ws_cap = 0;
    as_run *r = NULL;
    float *mem = NULL;
    /* both stacks run every layer: the decoder needs the whole encoder */
    if ((s = run_alloc(m, src, spec, what & ~(unsigned)CAP_LOGITS, m->cfg.n_layer, 0, Ts, &r, err))) return s;
    if ((s = run_alloc(d, tgt, spec, what, d->cfg.n_layer, (what & CAP_LOGITS) != 0, Tt, &r->dec, err)) ||
        (s = run_alloc(d, tgt, spec, what & (CAP_ATTN | CAP_SCORES | CAP_QKV), d->cfg.n_layer, 0, Ts, &r->cross,
                       err)) ||
        (s = ws_alloc(m, Ts >= Tt ? src : tgt, spec, nthreads, Ts >= Tt ? Ts : Tt, 0, &ws, &ws_cap, err)))
        goto cleanup;
    int Tmax = Ts >= Tt ? Ts : Tt;
    if (!(mem = as_malloc_array((size_t)Ts, (size_t)(D + 1) * sizeof(float))) ||
        (m->rel_bias && !(ws.bucket = as_malloc_array((size_t)Tmax * Tmax, sizeof(int32_t))))) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory for the encoder output");
        goto cleanup;
    }
    par_state saved;
    model_par_begin(nthreads, ws.conv, ws.conv_per_thread, ws.xb, &saved);
    seq2seq_stack(m, src, spec->ablate, &ws, r, what, nthreads);
    memcpy(mem, ws.x, (size_t)Ts * D * sizeof(float));
    for (int i = 0; i < Ts; i++) mem[(size_t)Ts * D + i] = src->mask[i] ? 1.0f : 0.0f;
    ws.mem = mem;
    ws.keep_mem = mem + (size_t)Ts * D;
    ws.Tm = Ts;
    ws.xr = r->cross;
    memcpy(r->cross->attention_mask, tgt->mask, (size_t)Tt * sizeof(int32_t));
    seq2seq_stack(d, tgt, spec->ablate, &ws, r->dec, what, nthreads);
    if (r->dec->logits) model_vocab_logits(d, ws.x, Tt, r->dec->logits, ws.h);
    model_par_end(&saved);
    *out = r;
    r = NULL;
    s = AS_OK;
cleanup:
    free(mem);
    free(ws.bucket);
    as_large_put(ws.block, ws_cap);
    as_run_free(r);
    return s;
}

int model_s2s_kv_supported(const as_model *m) {
    return m->dec != NULL && (m->heads & HEAD_LM);
}

void model_s2s_kv_free(model_s2s_kv *kv) {
    model_kv_free(&kv->self);
    if (kv->ck) as_large_put(kv->ck, kv->bytes_);
    memset(kv, 0, sizeof *kv);
}

as_status model_s2s_kv_init(const as_model *m, const as_encoding *src, int cap, int threads, model_s2s_kv *kv,
                            as_error *err) {
    memset(kv, 0, sizeof *kv);
    if (!model_s2s_kv_supported(m))
        return as_err_set(err, AS_ERR_INPUT, "%s: not an encoder-decoder model with an LM head", m->dir);
    as_capture_spec spec = {.what = 0, .layer = -1, .head = -1, .threads = threads};
    as_status s = check_input(m, src, &spec, err);
    if (s) return as_err_prefix(err, "source");
    const as_model *d = m->dec;
    int Ts = src->n, Ld = d->cfg.n_layer, nthreads = threads > 0 ? threads : as_n_cores();
    size_t Kw = (size_t)d->cfg.n_kv_head * d->cfg.d_head, n = as_mul_size(as_mul_size((size_t)Ld, (size_t)Ts), Kw);
    fwd_ws ws = {0};
    size_t ws_cap = 0;
    as_run r0 = {0}; /* captures nothing */
    if ((s = model_kv_init(d, cap, &kv->self, err))) return s;
    kv->Ts = Ts;
    if (n > (SIZE_MAX / sizeof(float) - (size_t)Ts) / 2 ||
        !(kv->ck = as_large_get((2 * n + (size_t)Ts) * sizeof(float), &kv->bytes_)) ||
        (s = ws_alloc(m, src, &spec, nthreads, Ts, 0, &ws, &ws_cap, err)) ||
        (m->rel_bias && !(ws.bucket = as_malloc_array((size_t)Ts * Ts, sizeof(int32_t))))) {
        if (!s) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory for the encoder's keys and values");
        goto cleanup;
    }
    kv->cv = kv->ck + n;
    kv->keep_mem = kv->cv + n;
    par_state saved;
    model_par_begin(nthreads, ws.conv, ws.conv_per_thread, ws.xb, &saved);
    seq2seq_stack(m, src, 0, &ws, &r0, 0, nthreads); /* the encoder's output in ws.x */
    for (int l = 0; l < Ld; l++) { /* (Ts, Kw) of each layer */
        const layer_w *lw = &d->layers[l];
        if (!lin_has(&lw->ck)) continue;
        const lin_t *maps[2] = {&lw->ck, &lw->cv};
        float *out[2] = {kv->ck + (size_t)l * Ts * Kw, kv->cv + (size_t)l * Ts * Kw};
        op_linear_n(maps, 2, ws.x, Ts, out);
    }
    model_par_end(&saved);
    for (int i = 0; i < Ts; i++) kv->keep_mem[i] = src->mask[i] ? 1.0f : 0.0f;
cleanup:
    free(ws.bucket);
    as_large_put(ws.block, ws_cap);
    if (s) model_s2s_kv_free(kv);
    return s;
}

/* AS_ERR_INPUT unless m is served and kv holds a source's state. */
static as_status s2s_served(const as_model *m, const model_s2s_kv *kv, as_error *err) {
    if (model_s2s_kv_supported(m) && kv->ck) return AS_OK;
    return as_err_set(err, AS_ERR_INPUT, "%s: no encoder-decoder generation state", m->dir);
}

as_status model_s2s_step(const as_model *m, model_s2s_kv *kv, const int32_t *ids, int n, int threads,
                         float *logits, float *rows, as_error *err) {
    as_status s = s2s_served(m, kv, err);
    return s ? s : step_forward(m, kv, &kv->self, NULL, ids, n, threads, logits, rows, err);
}

as_status model_s2s_beams(const as_model *m, model_s2s_kv *kv, model_kv *beams, int nb, const int32_t *ids,
                          int threads, float *logits, as_error *err) {
    as_status s = s2s_served(m, kv, err);
    return s ? s : step_forward(m, kv, NULL, beams, ids, nb, threads, logits, NULL, err);
}

as_status model_s2s_beam_cache(const as_model *m, int cap, model_kv *kv, as_error *err) {
    if (!model_s2s_kv_supported(m)) {
        memset(kv, 0, sizeof *kv);
        return as_err_set(err, AS_ERR_INPUT, "%s: not an encoder-decoder model with an LM head", m->dir);
    }
    return model_kv_init(m->dec, cap, kv, err);
}

as_status model_vocab_rows(const as_model *m, const float *x, int n, int threads, float *logits, as_error *err) {
    const as_config *c = &m->cfg;
    int D = c->d_model, nt = threads > 0 ? threads : as_n_cores();
    size_t conv = as_gemm_bf16_scratch(D > c->d_ff ? D : c->d_ff);
    float *work = as_malloc_array((size_t)(n > 0 ? n : 1) * D + (size_t)nt * conv, sizeof(float));
    if (!work) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (n > 0) {
        par_state saved;
        model_par_begin(nt, work + (size_t)n * D, conv, NULL, &saved);
        model_par_fixed_blocks(); /* the same logits at any thread count (training's loss) */
        model_vocab_logits(m, x, n, logits, work);
        model_par_end(&saved);
    }
    free(work);
    return AS_OK;
}
