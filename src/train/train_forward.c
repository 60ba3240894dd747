/* train_forward.c — the training forward pass with saved activations and its backward
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
 * Threads: the one pool of core/pool.h (passive waiting), OpenBLAS single-threaded
 * inside a pass. The batch is cut into blocks of whole sequences (about BLOCK_ROWS
 * rows; sequences never interact). Two ways to run a pass, chosen by the shapes only:
 *   - several blocks ("block pass", training batches): the weights are packed once
 *     (pack tasks), then one task per block runs the embeddings, every layer and the
 *     MLM head (and its cross-entropy) on the block's rows, products on trainop_gemm.
 *     Backward: per layer l, from the top, one job with a task per block (the layer's
 *     input gradients, the MLM head's before the top layer, the embeddings' after
 *     layer 0) and the weight gradients of layer l + 1 (sgemm tasks summed over all
 *     rows; the decoder's with the top layer), which read the per-row gradients of
 *     layer l + 1 from the other of two scratch sets; last, layer 0's weight gradients
 *     and the embeddings'.
 *   - one block ("split pass": short batches, long single sequences): every step
 *     runs on all threads: the products' output columns cut into fixed blocks, each an
 *     sgemm (gemm_small for few rows) reading the weights in place, unpacked (they may
 *     be the mmap'd checkpoint: train_from_as_opts.borrow); attention one task per
 *     (sequence, head); norms and dropout by fixed blocks of rows.
 * Tasks are handed out dynamically (a busy machine does not stall a static half). Bias
 * and LayerNorm gradients are summed per block while its rows are in cache, then over
 * the blocks in block order. No result depends on the thread count: blocks of rows and
 * columns are fixed by the shapes and every sum has a fixed order.
 */
#include "train/train_ops.h"
#include "core/gemm_small.h"
#include "core/pool.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* dropout site ids: embeddings / pooler, then 3 per layer */
enum { SITE_EMB = 0, SITE_POOL = 1 };
static uint32_t site_of(int l, int k) { return (uint32_t)(l + 1) * 4u + (uint32_t)k; }
enum { K_ATT = 0, K_ATTOUT = 1, K_FFOUT = 2 };

/* Rows per encoder block (whole sequences, at least one), and the most multiply-adds
 * per weight-gradient task (one sgemm call packs its operands once: a weight of this
 * model is one task). */
#define BLOCK_ROWS 256
#define GRAD_TASK_MACS ((size_t)1 << 28)
/* Split passes: rows per task of the row-wise steps; products y = x W^T on at most this
 * many rows multiply the unpacked [out, in] weights with core/gemm_small.c (sgemm's
 * packing of W costs more than the product on a short sentence: 84 vs 110 ms of CPU
 * for BERT-base's forward at 32 tokens). The backward's dx = dy W stays on sgemm,
 * whose small-matrix kernels (no packing) were faster there than a 6 x 16 AVX2 tile
 * walking down W (93 vs 111 ms). */
#define SPLIT_ROWS 16
#define SPLIT_SMALL_ROWS 32

/* ---- threads ---- */

static int g_threads; /* 0 = the cores */

void train_set_threads(int threads) {
    g_threads = threads > 0 ? (threads < TRAIN_MAX_THREADS ? threads : TRAIN_MAX_THREADS) : 0;
    openblas_set_num_threads(threads > 0 ? threads : as_n_cores());
}

int train_threads(void) {
    int n = g_threads > 0 ? g_threads : as_n_cores();
    return n < 1 ? 1 : n < TRAIN_MAX_THREADS ? n : TRAIN_MAX_THREADS;
}

/* ---- activations ---- */

/* Packed right-hand sides of one head (trainop_pack_heads), (T, Dh) or (Dh, T). */
static size_t head_pack_size(int T, int Dh) {
    size_t a = trainop_packed_size(T, Dh), b = trainop_packed_size(Dh, T);
    return a > b ? a : b;
}

/* floats of attention scratch per thread: P after dropout, dP (T, T), and four packed
 * right-hand sides of one head */
static size_t scr_floats(int T, int D, int H) {
    return 2 * (size_t)T * T + 4 * head_pack_size(T, D / H);
}

/* The packed weights of a block pass (trainop_pack_b layout), in arena order. Forward
 * (fwd 1): the right-hand sides W^T (Ni, No) of y = x W^T of each layer (query, key and
 * value separately), then wte^T (D, V); backward: those of dx = dy W, W (No, Ni), then
 * wte (V, D). Packed copies keep the rows of a panel contiguous: read in place, rows of
 * W 512 B to 2 KiB apart would fall into a few L1 sets. */
typedef struct {
    float *q, *k, *v, *o, *f1, *f2;
} layer_pk;

static size_t layer_pk_size(const train_config *c, int fwd) {
    int D = c->d_model, F = c->d_ff;
    return 4 * trainop_packed_size(D, D) + (fwd ? trainop_packed_size(D, F) + trainop_packed_size(F, D)
                                                : trainop_packed_size(F, D) + trainop_packed_size(D, F));
}

static layer_pk layer_pack_of(const train_acts *a, const train_config *c, int l, int fwd) {
    int D = c->d_model, F = c->d_ff;
    size_t dd = trainop_packed_size(D, D);
    layer_pk r;
    r.q = a->wpack + (size_t)l * layer_pk_size(c, fwd);
    r.k = r.q + dd;
    r.v = r.k + dd;
    r.o = r.v + dd;
    r.f1 = r.o + dd;
    r.f2 = r.f1 + (fwd ? trainop_packed_size(D, F) : trainop_packed_size(F, D));
    return r;
}

static float *wte_pack_of(const train_acts *a, const train_config *c, int fwd) {
    return a->wpack + (size_t)c->n_layer * layer_pk_size(c, fwd);
}

static size_t wpack_floats(const train_config *c) {
    size_t f = (size_t)c->n_layer * layer_pk_size(c, 1), b = (size_t)c->n_layer * layer_pk_size(c, 0);
    if (c->mlm) {
        f += trainop_packed_size(c->d_model, c->vocab_size);
        b += trainop_packed_size(c->vocab_size, c->d_model);
    }
    return f > b ? f : b;
}

/* sequences per encoder block */
static int block_seqs(int T) { return T >= BLOCK_ROWS ? 1 : BLOCK_ROWS / T; }

/* Per-block partial sums of the bias and LayerNorm gradients, summed over the blocks
 * in block order by a reduce task. Layer l's (in the set l % 2, pl_size floats a
 * block): the biases of ff2, ff1, the attention output and qkv, then LN2's and LN1's
 * gain and bias. */
enum { PL_B2, PL_B1, PL_BO, PL_BQKV, PL_G2, PL_BL2, PL_G1, PL_BL1, PL_N };
static size_t pl_off(const train_config *c, int k) {
    size_t D = (size_t)c->d_model, F = (size_t)c->d_ff;
    static const int nd[PL_N] = {0, 1, 1, 2, 5, 6, 7, 8}; /* D-sized pieces before piece k (F after PL_B1) */
    return (size_t)nd[k] * D + (k > PL_B1 ? F : 0);
}
static size_t pl_size(const train_config *c) { return 9 * (size_t)c->d_model + (size_t)c->d_ff; }
/* then the MLM head's dense bias, LayerNorm gain and bias (3 D a block) and the
 * embedding LayerNorm's gain and bias (2 D a block) */
static float *part_layer(const train_acts *a, const train_config *c, int l, int blk) {
    return a->part + ((size_t)(l & 1) * a->nblk + blk) * pl_size(c);
}
static float *part_mlm(const train_acts *a, const train_config *c, int blk) {
    return a->part + (2 * (size_t)a->nblk * pl_size(c)) + (size_t)blk * 3 * c->d_model;
}
static float *part_emb(const train_acts *a, const train_config *c, int blk) {
    return a->part + (2 * (size_t)a->nblk * pl_size(c)) + (size_t)a->nblk * 3 * c->d_model +
           (size_t)blk * 2 * c->d_model;
}

as_status train_acts_init(const train_model *m, int B, int T, int max_mlm, train_acts **out, as_error *err) {
    *out = NULL;
    const train_config *c = &m->cfg;
    if (B <= 0 || T <= 0 || T > c->max_pos - c->pos_offset || max_mlm < 0)
        return as_err_set(err, AS_ERR_INPUT, "batch %d x %d does not fit the model (at most %d tokens)", B, T,
                          c->max_pos - c->pos_offset);
    size_t L = (size_t)c->n_layer, D = (size_t)c->d_model, F = (size_t)c->d_ff, H = (size_t)c->n_head;
    size_t V = (size_t)c->vocab_size, C = (size_t)c->num_labels;
    size_t BT = (size_t)B * (size_t)T, TT = (size_t)T * (size_t)T;
    size_t M = max_mlm > 0 ? (size_t)max_mlm : BT;
    if (!c->mlm) M = 0;
    int nthr = as_n_cores() < TRAIN_MAX_THREADS ? as_n_cores() : TRAIN_MAX_THREADS;
    if (nthr < 1) nthr = 1;
    size_t MB = M > (size_t)B ? M : (size_t)B;
    int sb = block_seqs(T), nblk = (B + sb - 1) / sb;
    /* element counts, in the order carved below */
    size_t n[] = {
        BT * D, BT, BT, (L + 1) * BT * D,                 /* emb_sum, emb_mean, emb_rstd, resid */
        L * BT * 3 * D, L * (size_t)B * H * TT, L * BT * D, L * BT * D, L * BT, L * BT, L * BT * D,
        L * BT * F, L * BT * F, L * BT * D, L * BT, L * BT, /* qkv .. rstd2 */
        (size_t)B * D, (size_t)B * D, (size_t)B * D, (size_t)B * C, (size_t)B * C, /* cls */
        M * D, M * D, M * D, M * D, M, M, M * V, M * V,     /* mlm */
        BT * D, BT * D, BT * D,                             /* d_out, d_emb_out, d_emb_sum */
        BT * D, BT * D, 2 * BT * D, 2 * BT * D, BT * D, BT * D, /* d_x d_y d_h d_t d_h1 d_ctx */
        2 * BT * D, 2 * BT * D,                             /* d_r1 d_ao */
        2 * BT * F, 2 * BT * 3 * D, MB * D, MB * D, MB * D, (size_t)nthr * scr_floats(T, c->d_model, c->n_head),
        nblk > 1 ? wpack_floats(c) : 0, (size_t)nblk * (2 * pl_size(c) + 5 * D)};
    size_t total = 0;
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) {
        if (n[i] > ((size_t)1 << 40) || total + n[i] < total)
            return as_err_set(err, AS_ERR_INPUT, "batch %d x %d is too large for activations", B, T);
        total += n[i];
    }
    train_acts *a = as_calloc(1, sizeof *a);
    if (!a) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    /* a reused block (a caller building activations per input reuses them): no page faults, no
       zeroing; nothing is read before the pass that writes it */
    a->block = as_large_get(total * sizeof(float), &a->block_cap);
    a->iblock = as_malloc_array(BT + 2 * (M ? M : 1) + (size_t)nblk + 1, sizeof(int32_t));
    a->row_loss = as_calloc(MB, sizeof(double));
    if (!a->block || !a->iblock || !a->row_loss) {
        train_acts_free(a);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for activations (%zu MB)",
                          total * sizeof(float) >> 20);
    }
    a->B = B;
    a->T = T;
    a->M_max = (int)M;
    a->nthr = nthr;
    a->threads = train_threads();
    a->nblk = nblk;
    a->n_floats = total;
    float **dst[] = {&a->emb_sum, &a->emb_mean, &a->emb_rstd, &a->resid, &a->qkv, &a->att, &a->ctx,
                     &a->res1, &a->mean1, &a->rstd1, &a->h1, &a->fpre, &a->fact, &a->res2, &a->mean2,
                     &a->rstd2, &a->cls_h0, &a->cls_pool, &a->cls_poold, &a->cls_logits, &a->d_cls_logits,
                     &a->mlm_h, &a->mlm_t1, &a->mlm_t2, &a->mlm_t3, &a->mlm_mean, &a->mlm_rstd,
                     &a->mlm_logits, &a->d_mlm_logits, &a->d_out, &a->d_emb_out, &a->d_emb_sum, &a->d_x,
                     &a->d_y, &a->d_h, &a->d_t, &a->d_h1, &a->d_ctx, &a->d_r1, &a->d_ao, &a->d_ff, &a->d_qkv,
                     &a->d_m1, &a->d_m2, &a->d_m3, &a->scr, &a->wpack, &a->part};
    ASSERT(sizeof dst / sizeof dst[0] == sizeof n / sizeof n[0]);
    float *p = a->block;
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++) {
        *dst[i] = n[i] ? p : NULL;
        p += n[i];
    }
    a->pos = a->iblock;
    a->mlm_rows = a->pos + BT;
    a->mlm_tgt = a->mlm_rows + (M ? M : 1);
    a->blk_mlm = a->mlm_tgt + (M ? M : 1);
    *out = a;
    return AS_OK;
}

void train_acts_free(train_acts *a) {
    if (!a) return;
    as_large_put(a->block, a->block_cap);
    free(a->iblock);
    free(a->row_loss);
    free(a);
}

size_t train_acts_bytes(const train_acts *a) { return a ? a->n_floats * sizeof(float) : 0; }

/* ---- input checks ---- */

static as_status check_batch(const train_model *m, const train_acts *a, const train_batch *b, as_error *err) {
    const train_config *c = &m->cfg;
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
        if (b->mlm_labels && b->mlm_labels[r] != TRAIN_IGNORE &&
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
static void positions(const train_config *c, const train_batch *b, int32_t *pos) {
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

/* ---- threads and blocks ---- */

/* Threads of a pass: at most the scratch slots allocated */
static int pass_threads(const train_acts *a) {
    int n = a->threads;
    return n < 1 ? 1 : n < a->nthr ? n : a->nthr;
}

static float *thread_scr(const train_acts *a, const train_config *c, int tid) {
    ASSERT(tid >= 0 && tid < a->nthr);
    return a->scr + (size_t)tid * scr_floats(a->T, c->d_model, c->n_head);
}

/* OpenBLAS runs single-threaded inside a pass (the pool is the parallelism). */
typedef struct {
    int blas_threads;
} pass_state;

static pass_state pass_begin(void) {
    pass_state s = {openblas_get_num_threads()};
    openblas_set_num_threads(1);
    return s;
}

static void pass_end(pass_state s) { openblas_set_num_threads(s.blas_threads); }

/* ---- products with the weights ---- */

/* One product of a step: y (N, n) = res + b + sum over terms t < nt of x_t op(W_t), with
 * op(W) = W^T for PR_XWT (W (n, K), [out, in] as nn.Linear) and W for PR_DYW (W (K, n));
 * then, on the same columns, act_out = act(y) (act_out non-NULL) or y *= act'(act_in)
 * (act_in non-NULL), both with row stride ldy. res may be y itself (accumulate).
 * A split pass cuts the columns into fixed blocks run on the pool, each term an sgemm
 * (gemm_small for at most SPLIT_SMALL_ROWS rows of PR_XWT) on the unpacked w; a block
 * pass runs one trainop_gemm per term on the packed wp (trainop_pack_b of op(W)). */
typedef enum { PR_XWT, PR_DYW } pr_kind;
typedef struct {
    pr_kind kind;
    int N, n, K, nt;
    float *y;
    int ldy;
    const float *x[3];
    int ldx;
    const float *w[3], *wp[3];
    const float *b, *res;
    int ldres;
    as_act act;
    float *act_out;
    const float *act_in;
} prod;

/* Columns per task of a split product: 4 blocks (fewer for widths under 512),
 * multiples of 16. Each sgemm packs its operand x again: with 12 blocks that copying
 * cost 5% more CPU time than with 4 on BERT-base at 128 tokens; 4 tasks (12 for the
 * query, key and value together) still keep 2 or 4 threads evenly busy. */
static int col_block(int n) {
    int w = ((n + 3) / 4 + 15) & ~15;
    return w < 128 ? 128 : w;
}

/* Columns [j0, j1) of product p on the unpacked weights. */
static void prod_cols(const prod *p, int j0, int j1) {
    int nj = j1 - j0, N = p->N;
    float *y = p->y + j0;
    float beta = p->res == p->y ? 1.0f : 0.0f;
    if (p->b || (p->res && p->res != p->y)) {
        for (int r = 0; r < N; r++) {
            float *yr = y + (size_t)r * p->ldy;
            const float *rr = p->res && p->res != p->y ? p->res + (size_t)r * p->ldres + j0 : NULL;
            if (p->res == p->y) {
                for (int j = 0; j < nj; j++) yr[j] += p->b[j0 + j];
            } else {
                for (int j = 0; j < nj; j++) yr[j] = (p->b ? p->b[j0 + j] : 0.0f) + (rr ? rr[j] : 0.0f);
            }
        }
        beta = 1.0f;
    }
    int small = p->kind == PR_XWT && N <= SPLIT_SMALL_ROWS && as_gemm_small_ok();
    for (int t = 0; t < p->nt; t++) {
        float bt = t ? 1.0f : beta;
        if (small)
            as_gemm_small_xwt(N, nj, p->K, p->x[t], (size_t)p->ldx, p->w[t] + (size_t)j0 * p->K, (size_t)p->K, y,
                              (size_t)p->ldy, bt != 0.0f);
        else if (p->kind == PR_XWT)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, nj, p->K, 1.0f, p->x[t], p->ldx,
                        p->w[t] + (size_t)j0 * p->K, p->K, bt, y, p->ldy);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, nj, p->K, 1.0f, p->x[t], p->ldx, p->w[t] + j0,
                        p->n, bt, y, p->ldy);
    }
    for (int r = 0; r < N && (p->act_out || p->act_in); r++) {
        float *yr = y + (size_t)r * p->ldy;
        if (p->act_out) op_act_fwd(p->act, p->act_out + (size_t)r * p->ldy + j0, yr, (size_t)nj);
        else op_act_bwd(p->act, yr, p->act_in + (size_t)r * p->ldy + j0, (size_t)nj);
    }
}

/* Product p whole, on the packed weights (a block pass). */
static void prod_packed(const prod *p) {
    for (int t = 0; t < p->nt; t++)
        trainop_gemm(p->y, p->ldy, p->x[t], p->ldx, 1, p->wp[t], p->N, p->n, p->K, 1.0f, t ? p->y : p->res,
                     t ? p->ldy : p->ldres, t ? NULL : p->b);
    for (int r = 0; r < p->N && (p->act_out || p->act_in); r++) {
        float *yr = p->y + (size_t)r * p->ldy;
        if (p->act_out) op_act_fwd(p->act, p->act_out + (size_t)r * p->ldy, yr, (size_t)p->n);
        else op_act_bwd(p->act, yr, p->act_in + (size_t)r * p->ldy, (size_t)p->n);
    }
}

#define MAX_PRODS 3
typedef struct {
    const prod *p;
    int np, w[MAX_PRODS], first[MAX_PRODS + 1];
} prod_job;

static void prod_task(void *ctx, int i, int tid) {
    const prod_job *j = ctx;
    int k = 0;
    while (i >= j->first[k + 1]) k++;
    int j0 = (i - j->first[k]) * j->w[k], n = j->p[k].n;
    prod_cols(&j->p[k], j0, j0 + j->w[k] < n ? j0 + j->w[k] : n);
}

/* Runs the products p[0, np) (independent of each other): in a split pass as one job
 * of column blocks, in a block pass one after the other on this thread. */
static void run_prods(const train_acts *a, const prod *p, int np) {
    ASSERT(np <= MAX_PRODS);
    if (!a->split) {
        for (int k = 0; k < np; k++) prod_packed(&p[k]);
        return;
    }
    prod_job j = {p, np, {0}, {0}};
    for (int k = 0; k < np; k++) {
        j.w[k] = col_block(p[k].n);
        j.first[k + 1] = j.first[k] + (p[k].n + j.w[k] - 1) / j.w[k];
    }
    as_parallel_for(j.first[np], pass_threads(a), prod_task, &j);
}

/* ---- row-wise steps ---- */

/* What a row-wise step reads and writes; each step function uses some of the fields. */
typedef struct {
    const train_model *m;
    train_acts *a;
    const train_batch *b;
    float *y;
    const float *x, *res, *g, *bb, *mean_in, *rstd_in;
    float *mean, *rstd;
    int C;
    uint32_t site;
    void (*fn)(void *ctx, int r0, int r1);
} row_job;

typedef struct {
    row_job *j;
    int r0, r1;
} rows_span;

static void rows_span_task(void *ctx, int i, int tid) {
    const rows_span *s = ctx;
    int r0 = s->r0 + i * SPLIT_ROWS, r1 = r0 + SPLIT_ROWS < s->r1 ? r0 + SPLIT_ROWS : s->r1;
    (void)tid;
    s->j->fn(s->j, r0, r1);
}

/* Runs j->fn(j, r0, r1) over rows [r0, r0 + nr): a split pass in fixed blocks of
 * SPLIT_ROWS on the pool, a block pass at once on this thread. */
static void run_rows(const train_acts *a, row_job *j, int r0, int nr) {
    if (!a->split || nr <= SPLIT_ROWS) {
        j->fn(j, r0, r0 + nr);
        return;
    }
    rows_span s = {j, r0, r0 + nr};
    as_parallel_for((nr + SPLIT_ROWS - 1) / SPLIT_ROWS, pass_threads(a), rows_span_task, &s);
}

/* y = LN(x) with saved mean, rstd */
static void rows_ln_fwd(void *ctx, int r0, int r1) {
    row_job *j = ctx;
    size_t o = (size_t)r0 * j->C;
    op_layernorm_fwd(j->y + o, j->mean + r0, j->rstd + r0, j->x + o, j->g, j->bb, r1 - r0, j->C, j->m->cfg.ln_eps);
}

/* y = dLoss/d LN input from x = dLoss/d LN output; res: the saved LN input */
static void rows_ln_dx(void *ctx, int r0, int r1) {
    row_job *j = ctx;
    size_t o = (size_t)r0 * j->C;
    op_layernorm_dx(j->y + o, j->x + o, j->res + o, j->mean_in + r0, j->rstd_in + r0, j->g, r1 - r0, j->C);
}

/* y = dropout(y) + res (elements r * C of the site) */
static void rows_drop_res(void *ctx, int r0, int r1) {
    row_job *j = ctx;
    size_t o = (size_t)r0 * j->C, n = (size_t)(r1 - r0) * j->C;
    trainop_dropout(j->y + o, o, n, j->a->p_hidden, j->a->seed, j->site);
    for (size_t i = 0; i < n; i++) j->y[o + i] += j->res[o + i];
}

/* y = dropout(x) */
static void rows_drop_copy(void *ctx, int r0, int r1) {
    row_job *j = ctx;
    size_t o = (size_t)r0 * j->C, n = (size_t)(r1 - r0) * j->C;
    memcpy(j->y + o, j->x + o, n * sizeof(float));
    trainop_dropout(j->y + o, o, n, j->a->p_hidden, j->a->seed, j->site);
}

/* ---- attention of one head ---- */

typedef struct {
    int T, D, Dh, H;
    float scale, p;
    uint64_t seed;
    uint32_t site;
} att_dims;

static float *hp(const att_dims *d, float *scr, int slot) {
    return scr + 2 * (size_t)d->T * d->T + (size_t)slot * head_pack_size(d->T, d->Dh);
}

/* Head h of sequence bb: P_h (T, T) = softmax_rows(scale * Q_h K_h^T + mask) saved;
 * ctx_h (T, Dh) = dropout(P_h) V_h. qkv: the sequence's (T, 3D) block; att: its
 * (H, T, T) probabilities; ctx: its (T, D) block; scr: scr_floats. */
static void att_fwd_head(const att_dims *d, const train_batch *b, int bb, int h, const float *qkv, float *att,
                         float *ctx, float *scr) {
    int T = d->T, D3 = 3 * d->D, Dh = d->Dh;
    size_t TT = (size_t)T * T;
    trainop_pack_heads(hp(d, scr, 0), qkv + d->D + (size_t)h * Dh, D3, T, 1, Dh, 1);     /* K_h^T */
    trainop_pack_heads(hp(d, scr, 1), qkv + 2 * d->D + (size_t)h * Dh, D3, T, 1, Dh, 0); /* V_h */
    float *P = att + (size_t)h * TT;
    trainop_gemm(P, T, qkv + (size_t)h * Dh, D3, 1, hp(d, scr, 0), T, T, Dh, d->scale, NULL, 0, NULL);
    op_softmax_rows(P, b->mask ? b->mask + (size_t)bb * b->T : NULL, T, T);
    const float *Pd = P;
    if (d->p > 0.0f) {
        size_t base = ((size_t)bb * d->H + h) * TT;
        float s = 1.0f / (1.0f - d->p);
        uint64_t key = op_drop_key(d->seed, d->site);
        for (size_t i = 0; i < TT; i++) scr[i] = op_drop_keep(key, base + i, d->p) ? P[i] * s : 0.0f;
        Pd = scr;
    }
    trainop_gemm(ctx + (size_t)h * Dh, d->D, Pd, T, 1, hp(d, scr, 1), T, Dh, T, 1.0f, NULL, 0, NULL);
}

/* Backward of att_fwd_head for head h of sequence bb: dctx (T, D) block in; the head's
 * columns of dqkv (T, 3D) block overwritten. dV = dropout(P)^T dctx; dP =
 * dropout'(dctx V^T); softmax backward dS = P * (dP - rowsum(dP * P)); dQ = scale dS K,
 * dK = scale dS^T Q. */
static void att_bwd_head(const att_dims *d, int bb, int h, const float *qkv, const float *att, const float *dctx,
                         float *dqkv, float *scr) {
    int T = d->T, D3 = 3 * d->D, Dh = d->Dh;
    size_t TT = (size_t)T * T, ho = (size_t)h * Dh;
    float *Pd = scr, *dP = scr + TT;
    int drop = d->p > 0.0f;
    float s = drop ? 1.0f / (1.0f - d->p) : 1.0f;
    uint64_t key = op_drop_key(d->seed, d->site);
    trainop_pack_heads(hp(d, scr, 0), dctx + ho, d->D, T, 1, Dh, 0);          /* dctx_h */
    trainop_pack_heads(hp(d, scr, 1), qkv + 2 * d->D + ho, D3, T, 1, Dh, 1);  /* V_h^T */
    trainop_pack_heads(hp(d, scr, 2), qkv + d->D + ho, D3, T, 1, Dh, 0);      /* K_h */
    trainop_pack_heads(hp(d, scr, 3), qkv + ho, D3, T, 1, Dh, 0);             /* Q_h */
    const float *P = att + (size_t)h * TT;
    float *dq = dqkv + ho, *dk = dq + d->D, *dv = dq + 2 * d->D;
    size_t base = ((size_t)bb * d->H + h) * TT;
    if (drop)
        for (size_t i = 0; i < TT; i++) Pd[i] = op_drop_keep(key, base + i, d->p) ? P[i] * s : 0.0f;
    trainop_gemm(dv, D3, drop ? Pd : P, 1, T, hp(d, scr, 0), T, Dh, T, 1.0f, NULL, 0, NULL);
    trainop_gemm(dP, T, dctx + ho, d->D, 1, hp(d, scr, 1), T, T, Dh, 1.0f, NULL, 0, NULL);
    if (drop)
        for (size_t i = 0; i < TT; i++)
            dP[i] = Pd[i] != 0.0f || op_drop_keep(key, base + i, d->p) ? dP[i] * s : 0.0f;
    for (int i = 0; i < T; i++) {
        const float *pi = P + (size_t)i * T;
        float *gi = dP + (size_t)i * T;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int j = 0; j < T; j++) dot += gi[j] * pi[j];
        for (int j = 0; j < T; j++) gi[j] = pi[j] * (gi[j] - dot);
    }
    trainop_gemm(dq, D3, dP, T, 1, hp(d, scr, 2), T, Dh, T, d->scale, NULL, 0, NULL);
    trainop_gemm(dk, D3, dP, 1, T, hp(d, scr, 3), T, Dh, T, d->scale, NULL, 0, NULL);
}

/* Attention of sequences [b0, b0 + nb) of one layer, forward (dctx NULL: qkv, att -> ctx)
 * or backward (qkv, att, dctx -> dqkv); whole-batch (BT-row) arrays. */
typedef struct {
    const train_acts *a;
    const train_config *c;
    const att_dims *d;
    const train_batch *b;
    const float *qkv, *dctx;
    float *att, *ctx, *dqkv;
    int b0;
} att_job;

static void att_one(const att_job *j, int bb, int h, float *scr) {
    int T = j->d->T, D = j->d->D, H = j->d->H;
    size_t r = (size_t)bb * T, HTT = (size_t)H * T * T;
    if (!j->dctx) att_fwd_head(j->d, j->b, bb, h, j->qkv + r * 3 * D, j->att + bb * HTT, j->ctx + r * D, scr);
    else att_bwd_head(j->d, bb, h, j->qkv + r * 3 * D, j->att + bb * HTT, j->dctx + r * D, j->dqkv + r * 3 * D, scr);
}

static void att_task(void *ctx, int i, int tid) {
    const att_job *j = ctx;
    att_one(j, j->b0 + i / j->d->H, i % j->d->H, thread_scr(j->a, j->c, tid));
}

/* A split pass: one task per (sequence, head) on the pool; a block pass: in order here. */
static void run_att(const att_job *j, int nb, float *scr) {
    if (j->a->split) {
        as_parallel_for(nb * j->d->H, pass_threads(j->a), att_task, (void *)j);
        return;
    }
    for (int bb = j->b0; bb < j->b0 + nb; bb++)
        for (int h = 0; h < j->d->H; h++) att_one(j, bb, h, scr);
}

/* ---- layer slices ---- */

/* One layer's parameters: the matrices from the views m->lw, the rest from the arena. */
typedef struct {
    train_layer_w w;
    const float *qkv_b, *o_b, *ln1_g, *ln1_b, *f1_b, *f2_b, *ln2_g, *ln2_b;
} layer_p;

static layer_p layer_params(const train_model *m, int l) {
    const train_params *p = &m->params;
    size_t D = (size_t)m->cfg.d_model, F = (size_t)m->cfg.d_ff, L = (size_t)l;
    layer_p r = {m->lw[l],         p->qkv_b + L * 3 * D, p->o_b + L * D,  p->ln1_g + L * D, p->ln1_b + L * D,
                 p->f1_b + L * F,  p->f2_b + L * D,      p->ln2_g + L * D, p->ln2_b + L * D};
    return r;
}

/* One layer's gradients inside the gradient arena. */
typedef struct {
    float *qkv_w, *qkv_b, *o_w, *o_b, *ln1_g, *ln1_b, *f1_w, *f1_b, *f2_w, *f2_b, *ln2_g, *ln2_b;
} layer_g;

static layer_g layer_grads(const train_params *p, const train_config *c, int l) {
    size_t D = (size_t)c->d_model, F = (size_t)c->d_ff, L = (size_t)l;
    layer_g r = {p->qkv_w + L * 3 * D * D, p->qkv_b + L * 3 * D, p->o_w + L * D * D, p->o_b + L * D,
                 p->ln1_g + L * D,         p->ln1_b + L * D,     p->f1_w + L * F * D, p->f1_b + L * F,
                 p->f2_w + L * D * F,      p->f2_b + L * D,      p->ln2_g + L * D,    p->ln2_b + L * D};
    return r;
}

/* Saved activations of layer l (strides from the capacity, so smaller batches fit). */
typedef struct {
    float *x, *y, *qkv, *att, *ctx, *res1, *mean1, *rstd1, *h1, *fpre, *fact, *res2, *mean2, *rstd2;
} layer_a;

static layer_a layer_acts(const train_acts *a, const train_config *c, int l) {
    size_t D = (size_t)c->d_model, F = (size_t)c->d_ff, H = (size_t)c->n_head, L = (size_t)l;
    size_t BT = (size_t)a->B * a->T, BHTT = (size_t)a->B * H * a->T * a->T;
    layer_a r = {a->resid + L * BT * D, a->resid + (L + 1) * BT * D, a->qkv + L * BT * 3 * D, a->att + L * BHTT,
                 a->ctx + L * BT * D,   a->res1 + L * BT * D,         a->mean1 + L * BT,      a->rstd1 + L * BT,
                 a->h1 + L * BT * D,    a->fpre + L * BT * F,         a->fact + L * BT * F,   a->res2 + L * BT * D,
                 a->mean2 + L * BT,     a->rstd2 + L * BT};
    return r;
}

static att_dims att_dims_of(const train_config *c, const train_acts *a, int T, int l) {
    int Dh = c->d_model / c->n_head;
    att_dims d = {T, c->d_model, Dh, c->n_head, 1.0f / sqrtf((float)Dh), a->p_attn, a->seed, site_of(l, K_ATT)};
    return d;
}

/* ---- packing the weights of a block pass ---- */

typedef struct {
    float *dst;
    const float *src;
    ptrdiff_t sk, sn;
    int K, N, p0, p1;
} pack_job;

typedef struct {
    pack_job *j;
    int n, cap;
} pack_jobs;

#define PACK_TASK_PANELS 32

static int panels(int N) { return (N + TRAINOP_NR - 1) / TRAINOP_NR; }

/* queues B (K, N), element (k, j) at src[k * sk + j * sn], in tasks of panels */
static void pj_add(pack_jobs *q, float *dst, const float *src, ptrdiff_t sk, ptrdiff_t sn, int K, int N) {
    for (int p = 0; p < panels(N); p += PACK_TASK_PANELS) {
        ASSERT(q->n < q->cap);
        pack_job j = {dst, src, sk, sn, K, N, p, p + PACK_TASK_PANELS < panels(N) ? p + PACK_TASK_PANELS : panels(N)};
        q->j[q->n++] = j;
    }
}

static void pack_task(void *ctx, int i, int tid) {
    const pack_job *j = &((const pack_jobs *)ctx)->j[i];
    (void)tid;
    trainop_pack_b(j->dst, j->src, j->sk, j->sn, j->K, j->N, j->p0, j->p1);
}

/* Packs the right-hand sides of the products with the weights into a->wpack:
 * forward (fwd 1): W^T of y = x W^T, and wte^T; backward: W of dx = dy W, and wte
 * (the decoder only when with_wte). */
static void pack_weights(const train_model *m, train_acts *a, int fwd, int with_wte, int nt) {
    const train_config *c = &m->cfg;
    int D = c->d_model, F = c->d_ff, V = c->vocab_size;
    pack_jobs q = {NULL, 0, 6 * c->n_layer * (panels(F > D ? F : D) / PACK_TASK_PANELS + 1) +
                                panels(V) / PACK_TASK_PANELS + 1};
    q.j = as_malloc_array((size_t)q.cap, sizeof *q.j);
    ASSERT(q.j);
    for (int l = 0; l < c->n_layer; l++) {
        const train_layer_w *w = &m->lw[l];
        layer_pk k = layer_pack_of(a, c, l, fwd);
        /* W (No, Ni): forward B(k, j) = W[j][k] (K = Ni, N = No); backward B = W (K = No, N = Ni) */
        if (fwd) {
            pj_add(&q, k.q, w->q, 1, D, D, D);
            pj_add(&q, k.k, w->k, 1, D, D, D);
            pj_add(&q, k.v, w->v, 1, D, D, D);
            pj_add(&q, k.o, w->o, 1, D, D, D);
            pj_add(&q, k.f1, w->f1, 1, D, D, F);
            pj_add(&q, k.f2, w->f2, 1, F, F, D);
        } else {
            pj_add(&q, k.q, w->q, D, 1, D, D);
            pj_add(&q, k.k, w->k, D, 1, D, D);
            pj_add(&q, k.v, w->v, D, 1, D, D);
            pj_add(&q, k.o, w->o, D, 1, D, D);
            pj_add(&q, k.f1, w->f1, D, 1, F, D);
            pj_add(&q, k.f2, w->f2, F, 1, D, F);
        }
    }
    if (c->mlm && with_wte) {
        if (fwd) pj_add(&q, wte_pack_of(a, c, 1), m->params.wte, 1, D, D, V);
        else pj_add(&q, wte_pack_of(a, c, 0), m->params.wte, D, 1, V, D);
    }
    as_parallel_for(q.n, nt, pack_task, &q);
    free(q.j);
}

/* ---- forward ---- */

/* Embedding output of rows [r0, r1) (a row job: m, a, b). */
static void rows_embed(void *ctx, int r0, int r1) {
    row_job *j = ctx;
    const train_config *c = &j->m->cfg;
    const train_params *p = &j->m->params;
    const train_batch *b = j->b;
    train_acts *a = j->a;
    int D = c->d_model, nr = r1 - r0;
    for (int r = r0; r < r1; r++) {
        const float *w = b->word_embeds ? b->word_embeds + (size_t)r * D : p->wte + (size_t)b->ids[r] * D;
        const float *pe = p->wpe + (size_t)a->pos[r] * D;
        const float *te = p->wtt ? p->wtt + (size_t)(b->type_ids ? b->type_ids[r] : 0) * D : NULL;
        float *e = a->emb_sum + (size_t)r * D;
        for (int i = 0; i < D; i++) e[i] = (te ? w[i] + te[i] : w[i]) + pe[i];
    }
    size_t o = (size_t)r0 * D;
    op_layernorm_fwd(a->resid + o, a->emb_mean + r0, a->emb_rstd + r0, a->emb_sum + o, p->ln_e_g, p->ln_e_b, nr,
                     D, c->ln_eps);
    trainop_dropout(a->resid + o, o, (size_t)nr * D, a->p_hidden, a->seed, SITE_EMB);
}

/* y (N, No) = res + dropout(x W^T + b) on rows [r0, r0 + N): without dropout the
 * residual is added by the product itself. */
static void lin_drop_res(const train_model *m, train_acts *a, prod *p, const float *res, int r0, uint32_t site) {
    if (a->p_hidden <= 0.0f) {
        p->res = res;
        p->ldres = p->n;
        run_prods(a, p, 1);
        return;
    }
    run_prods(a, p, 1);
    row_job j = {.m = m, .a = a, .y = p->y - (size_t)r0 * p->n, .res = res - (size_t)r0 * p->n, .C = p->n,
                 .site = site, .fn = rows_drop_res};
    run_rows(a, &j, r0, p->N);
}

/* Layer l on sequences [b0, b0 + nb); scr: this thread's scratch (a block pass). */
static void layer_fwd_block(const train_model *m, train_acts *a, const train_batch *b, int l, int b0, int nb,
                            float *scr) {
    const train_config *c = &m->cfg;
    int T = b->T, D = c->d_model, F = c->d_ff, r0 = b0 * T, nr = nb * T;
    size_t o = (size_t)r0 * D, of = (size_t)r0 * F;
    layer_p w = layer_params(m, l);
    layer_a s = layer_acts(a, c, l);
    layer_pk k = a->split ? (layer_pk){0} : layer_pack_of(a, c, l, 1);
    /* qkv = x Wqkv^T + bqkv: query, key and value columns */
    prod pq[3];
    const float *wq[3] = {w.w.q, w.w.k, w.w.v}, *kq[3] = {k.q, k.k, k.v};
    for (int i = 0; i < 3; i++)
        pq[i] = (prod){.kind = PR_XWT, .N = nr, .n = D, .K = D, .nt = 1, .y = s.qkv + o * 3 + (size_t)i * D,
                       .ldy = 3 * D, .x = {s.x + o}, .ldx = D, .w = {wq[i]}, .wp = {kq[i]},
                       .b = w.qkv_b + (size_t)i * D};
    run_prods(a, pq, 3);
    att_dims d = att_dims_of(c, a, T, l);
    att_job aj = {a, c, &d, b, s.qkv, NULL, s.att, s.ctx, NULL, b0};
    run_att(&aj, nb, scr);
    /* res1 = x + dropout(ctx Wo^T + bo); h1 = LN1(res1) */
    prod po = {.kind = PR_XWT, .N = nr, .n = D, .K = D, .nt = 1, .y = s.res1 + o, .ldy = D, .x = {s.ctx + o},
               .ldx = D, .w = {w.w.o}, .wp = {k.o}, .b = w.o_b};
    lin_drop_res(m, a, &po, s.x + o, r0, site_of(l, K_ATTOUT));
    row_job j1 = {.m = m, .a = a, .y = s.h1, .x = s.res1, .g = w.ln1_g, .bb = w.ln1_b, .mean = s.mean1,
                  .rstd = s.rstd1, .C = D, .fn = rows_ln_fwd};
    run_rows(a, &j1, r0, nr);
    /* res2 = h1 + dropout(act(h1 W1^T + b1) W2^T + b2); y = LN2(res2) */
    prod p1 = {.kind = PR_XWT, .N = nr, .n = F, .K = D, .nt = 1, .y = s.fpre + of, .ldy = F, .x = {s.h1 + o},
               .ldx = D, .w = {w.w.f1}, .wp = {k.f1}, .b = w.f1_b, .act = c->act, .act_out = s.fact + of};
    run_prods(a, &p1, 1);
    prod p2 = {.kind = PR_XWT, .N = nr, .n = D, .K = F, .nt = 1, .y = s.res2 + o, .ldy = D, .x = {s.fact + of},
               .ldx = F, .w = {w.w.f2}, .wp = {k.f2}, .b = w.f2_b};
    lin_drop_res(m, a, &p2, s.h1 + o, r0, site_of(l, K_FFOUT));
    row_job j2 = {.m = m, .a = a, .y = s.y, .x = s.res2, .g = w.ln2_g, .bb = w.ln2_b, .mean = s.mean2,
                  .rstd = s.rstd2, .C = D, .fn = rows_ln_fwd};
    run_rows(a, &j2, r0, nr);
}

/* cross-entropy of MLM rows [r0, r1) (scale 1 / n_mlm) */
static void rows_mlm_xent(void *ctx, int r0, int r1) {
    row_job *j = ctx;
    train_acts *a = j->a;
    size_t V = (size_t)j->C;
    trainop_xent(a->d_mlm_logits + r0 * V, a->row_loss + r0, a->mlm_logits + r0 * V, a->mlm_tgt + r0, r1 - r0,
                 j->C, 1.0f / a->n_mlm);
}

/* The masked-LM head on MLM rows [i0, i0 + ni) (gathered from the final states out):
 * logits, dLoss/dlogits (scale 1 / n_mlm) and the rows' cross-entropies. */
static void mlm_fwd_rows(const train_model *m, train_acts *a, const float *out, int i0, int ni) {
    const train_config *c = &m->cfg;
    const train_params *p = &m->params;
    int D = c->d_model, V = c->vocab_size;
    size_t o = (size_t)i0 * D, ov = (size_t)i0 * V;
    for (int i = i0; i < i0 + ni; i++)
        memcpy(a->mlm_h + (size_t)i * D, out + (size_t)a->mlm_rows[i] * D, (size_t)D * sizeof(float));
    trainop_linear_fwd(a->mlm_t1 + o, a->mlm_h + o, p->mlm_w, p->mlm_b, ni, D, D);
    op_act_fwd(c->mlm_act, a->mlm_t2 + o, a->mlm_t1 + o, (size_t)ni * D);
    op_layernorm_fwd(a->mlm_t3 + o, a->mlm_mean + i0, a->mlm_rstd + i0, a->mlm_t2 + o, p->mlm_ln_g, p->mlm_ln_b,
                     ni, D, c->ln_eps);
    prod pd = {.kind = PR_XWT, .N = ni, .n = V, .K = D, .nt = 1, .y = a->mlm_logits + ov, .ldy = V,
               .x = {a->mlm_t3 + o}, .ldx = D, .w = {p->wte}, .wp = {a->split ? NULL : wte_pack_of(a, c, 1)},
               .b = p->mlm_bias};
    run_prods(a, &pd, 1);
    row_job j = {.m = m, .a = a, .C = V, .fn = rows_mlm_xent};
    run_rows(a, &j, i0, ni);
}

/* One block of sequences through the embeddings, every layer and the MLM head. */
static void fwd_block(const train_model *m, train_acts *a, const train_batch *b, int blk, int sb, float *scr) {
    const train_config *c = &m->cfg;
    int T = b->T, D = c->d_model, b0 = blk * sb, nb = b->B - b0 < sb ? b->B - b0 : sb;
    size_t BTcap = (size_t)a->B * a->T;
    row_job je = {.m = m, .a = a, .b = b, .C = D, .fn = rows_embed};
    run_rows(a, &je, b0 * T, nb * T);
    for (int l = 0; l < c->n_layer; l++) layer_fwd_block(m, a, b, l, b0, nb, scr);
    memset(a->d_out + (size_t)b0 * T * D, 0, (size_t)nb * T * D * sizeof(float));
    int m0 = a->blk_mlm[blk], m1 = a->blk_mlm[blk + 1];
    if (c->mlm && m1 > m0) mlm_fwd_rows(m, a, a->resid + (size_t)c->n_layer * BTcap * D, m0, m1 - m0);
}

typedef struct {
    const train_model *m;
    train_acts *a;
    const train_batch *b;
    int sb;
} fwd_job;

static void fwd_task(void *ctx, int blk, int tid) {
    const fwd_job *j = ctx;
    fwd_block(j->m, j->a, j->b, blk, j->sb, thread_scr(j->a, &j->m->cfg, tid));
}

static float cls_act_fwd(train_cls_act k, float x) { return k == TRAIN_CLS_TANH ? tanhf(x) : (x > 0.0f ? x : 0.0f); }
/* derivative from the activation's output y: tanh' = 1 - y^2, relu' = [y > 0] */
static float cls_act_grad(train_cls_act k, float y) {
    return k == TRAIN_CLS_TANH ? 1.0f - y * y : (y > 0.0f ? 1.0f : 0.0f);
}

static double sum_rows(const double *v, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += v[i];
    return s;
}

as_status train_forward(const train_model *m, train_acts *a, const train_batch *b, as_error *err) {
    as_status s;
    if ((s = check_batch(m, a, b, err))) return s;
    const train_config *c = &m->cfg;
    const train_params *p = &m->params;
    int B = b->B, T = b->T, N = B * T, D = c->d_model, L = c->n_layer, C = c->num_labels;
    size_t BTcap = (size_t)a->B * a->T;
    /* MLM rows, in row order, and the first of each block */
    a->n_mlm = 0;
    if (b->mlm_labels) {
        for (int r = 0; r < N; r++)
            if (b->mlm_labels[r] != TRAIN_IGNORE) {
                if (a->n_mlm == a->M_max)
                    return as_err_set(err, AS_ERR_INPUT, "batch has more than %d masked-LM targets (the capacity)",
                                      a->M_max);
                a->mlm_rows[a->n_mlm] = r;
                a->mlm_tgt[a->n_mlm++] = b->mlm_labels[r];
            }
    }
    int sb = block_seqs(T), nblk = (B + sb - 1) / sb;
    for (int blk = 0, i = 0; blk <= nblk; blk++) {
        while (i < a->n_mlm && a->mlm_rows[i] < blk * sb * T) i++;
        a->blk_mlm[blk] = i;
    }
    positions(c, b, a->pos);
    pass_state ps = pass_begin();
    int nt = pass_threads(a);
    a->split = nblk == 1;
    if (a->split) {
        fwd_block(m, a, b, 0, sb, thread_scr(a, c, 0));
    } else {
        pack_weights(m, a, 1, c->mlm && a->n_mlm > 0, nt);
        fwd_job j = {m, a, b, sb};
        as_parallel_for(nblk, nt, fwd_task, &j);
    }
    const float *out = a->resid + (size_t)L * BTcap * D;
    a->loss_cls = a->loss_mlm = a->loss = 0.0f;
    if (c->mlm && a->n_mlm > 0) a->loss_mlm = (float)(sum_rows(a->row_loss, a->n_mlm) / a->n_mlm);
    /* classifier on the first token of each sequence */
    if (C > 0) {
        for (int bb = 0; bb < B; bb++)
            memcpy(a->cls_h0 + (size_t)bb * D, out + (size_t)bb * T * D, (size_t)D * sizeof(float));
        trainop_linear_fwd(a->cls_pool, a->cls_h0, p->pool_w, p->pool_b, B, D, D);
        for (size_t i = 0; i < (size_t)B * D; i++) a->cls_pool[i] = cls_act_fwd(c->cls_act, a->cls_pool[i]);
        memcpy(a->cls_poold, a->cls_pool, (size_t)B * D * sizeof(float));
        trainop_dropout(a->cls_poold, 0, (size_t)B * D, a->p_hidden, a->seed, SITE_POOL);
        trainop_linear_fwd(a->cls_logits, a->cls_poold, p->cls_w, p->cls_b, B, D, C);
        memset(a->d_cls_logits, 0, (size_t)B * C * sizeof(float));
        if (b->cls_labels) {
            trainop_xent(a->d_cls_logits, a->row_loss, a->cls_logits, b->cls_labels, B, C, 1.0f / B);
            a->loss_cls = (float)(sum_rows(a->row_loss, B) / B);
        }
    }
    a->loss = a->loss_cls + a->loss_mlm;
    pass_end(ps);
    return AS_OK;
}

/* ---- backward ---- */

/* The per-row gradients of layer l that its weight gradients read, in the set l % 2
 * (layer l - 1 fills the other set while layer l's weight gradients run). */
typedef struct {
    float *h, *t, *ff, *r1, *ao, *qkv;
} grad_set;

static grad_set grad_set_of(const train_acts *a, const train_config *c, int l) {
    size_t BT = (size_t)a->B * a->T, D = (size_t)c->d_model, F = (size_t)c->d_ff, k = (size_t)(l & 1);
    grad_set g = {a->d_h + k * BT * D, a->d_t + k * BT * D, a->d_ff + k * BT * F,
                  a->d_r1 + k * BT * D, a->d_ao + k * BT * D, a->d_qkv + k * BT * 3 * D};
    return g;
}

/* A task besides the blocks: a block of a weight gradient, or a reduction. */
typedef enum { GT_DW, GT_RED_LAYER, GT_RED_MLM, GT_RED_EMB, GT_EMB } gt_kind;
typedef struct {
    gt_kind kind;
    /* GT_DW: block [o0, o1) x [i0, i1) of dW (No, Ni) += dy^T x over all N rows, and
     * db[o0, o1) += column sums of dy when db != NULL (the decoder bias) */
    float *dw, *db;
    const float *dy, *x;
    int N, Ni, No, o0, o1, i0, i1;
    int l; /* GT_RED_LAYER: the layer; GT_EMB: columns [o0, o1) */
} grad_task;

#define MAX_GRAD_TASKS 4096

typedef struct {
    grad_task t[MAX_GRAD_TASKS];
    int n;
} grad_tasks;

static void gt_push(grad_tasks *g, grad_task t) {
    ASSERT(g->n < MAX_GRAD_TASKS);
    g->t[g->n++] = t;
}

/* dW (No, Ni) += dy^T x (db += colsum(dy) when db): blocks of rows of dW (columns when
 * No < Ni) of about GRAD_TASK_MACS each. */
static void gt_linear(grad_tasks *g, float *dw, float *db, const float *dy, const float *x, int N, int Ni, int No) {
    int by_rows = No >= Ni, len = by_rows ? No : Ni, other = by_rows ? Ni : No;
    size_t per = GRAD_TASK_MACS / ((size_t)(N > 0 ? N : 1) * other);
    int step = per < 16 ? 16 : (int)(per < (size_t)len ? per / 16 * 16 : (size_t)len);
    if (step < (len + 511) / 512) step = (len + 511) / 512; /* at most 512 tasks per weight */
    for (int s = 0; s < len; s += step) {
        int e = len - s < step ? len : s + step;
        grad_task t = {GT_DW, dw, NULL, dy, x, N, Ni, No, 0, No, 0, Ni, 0};
        if (by_rows) {
            t.o0 = s;
            t.o1 = e;
            t.db = db;
        } else {
            t.i0 = s;
            t.i1 = e;
            t.db = s == 0 ? db : NULL;
        }
        gt_push(g, t);
    }
}

static void gt_simple(grad_tasks *g, gt_kind k, int l, int o0, int o1) {
    grad_task t = {k, NULL, NULL, NULL, NULL, 0, 0, 0, o0, o1, 0, 0, l};
    gt_push(g, t);
}

/* dst[c] += sum over blocks b of part(b)[c], c in [0, n), blocks in order */
static void reduce_blocks(float *dst, const float *part, size_t stride, int nblk, int n) {
    if (!dst) return;
    for (int b = 0; b < nblk; b++)
        for (int c = 0; c < n; c++) dst[c] += part[(size_t)b * stride + c];
}

static void gt_one(train_model *m, const train_acts *a, const train_batch *b, int nblk, const grad_task *t) {
    const train_config *c = &m->cfg;
    const train_params *g = &m->grads;
    int D = c->d_model, F = c->d_ff;
    switch (t->kind) {
    case GT_DW:
        trainop_linear_dw(t->dw, t->dy, t->x, t->N, t->Ni, t->No, t->o0, t->o1, t->i0, t->i1);
        if (t->db) trainop_colsum(t->db + t->o0, t->dy + t->o0, t->N, t->o1 - t->o0, t->No);
        break;
    case GT_RED_LAYER: {
        layer_g gr = layer_grads(g, c, t->l);
        float *dst[PL_N] = {gr.f2_b, gr.f1_b, gr.o_b, gr.qkv_b, gr.ln2_g, gr.ln2_b, gr.ln1_g, gr.ln1_b};
        int n[PL_N] = {D, F, D, 3 * D, D, D, D, D};
        for (int k = 0; k < PL_N; k++)
            reduce_blocks(dst[k], part_layer(a, c, t->l, 0) + pl_off(c, k), pl_size(c), nblk, n[k]);
        break;
    }
    case GT_RED_MLM:
        reduce_blocks(g->mlm_b, part_mlm(a, c, 0), 3 * (size_t)D, nblk, D);
        reduce_blocks(g->mlm_ln_g, part_mlm(a, c, 0) + D, 3 * (size_t)D, nblk, D);
        reduce_blocks(g->mlm_ln_b, part_mlm(a, c, 0) + 2 * D, 3 * (size_t)D, nblk, D);
        break;
    case GT_RED_EMB:
        reduce_blocks(g->ln_e_g, part_emb(a, c, 0), 2 * (size_t)D, nblk, D);
        reduce_blocks(g->ln_e_b, part_emb(a, c, 0) + D, 2 * (size_t)D, nblk, D);
        break;
    case GT_EMB: /* the lookups' gradients, columns [o0, o1), rows in order */
        for (int r = 0; r < b->B * b->T; r++) {
            const float *d = a->d_emb_sum + (size_t)r * D;
            float *gw = b->word_embeds ? NULL : g->wte + (size_t)b->ids[r] * D;
            float *gp = g->wpe + (size_t)a->pos[r] * D;
            float *gt = g->wtt ? g->wtt + (size_t)(b->type_ids ? b->type_ids[r] : 0) * D : NULL;
            for (int i = t->o0; i < t->o1; i++) {
                if (gw) gw[i] += d[i];
                gp[i] += d[i];
                if (gt) gt[i] += d[i];
            }
        }
        break;
    }
}

/* Weight gradients of layer l from its grad_set, and the reduction of its partials. */
static void gt_layer(grad_tasks *g, train_model *m, const train_acts *a, const train_batch *b, int l) {
    const train_config *c = &m->cfg;
    int N = b->B * b->T, D = c->d_model, F = c->d_ff;
    layer_g gr = layer_grads(&m->grads, c, l);
    layer_a s = layer_acts(a, c, l);
    grad_set q = grad_set_of(a, c, l);
    int drop = a->p_hidden > 0.0f;
    gt_linear(g, gr.f2_w, NULL, drop ? q.t : q.h, s.fact, N, F, D);
    gt_linear(g, gr.f1_w, NULL, q.ff, s.h1, N, D, F);
    gt_linear(g, gr.o_w, NULL, drop ? q.ao : q.r1, s.ctx, N, D, D);
    gt_linear(g, gr.qkv_w, NULL, q.qkv, s.x, N, D, 3 * D);
    gt_simple(g, GT_RED_LAYER, l, 0, 0);
}

/* Serial linear backward for the classifier: dx (N, Ni) = dy W (accum 0/1; skipped
 * when NULL), dw += dy^T x, db += colsum(dy) (each skipped when NULL). */
static void linear_bwd(float *dx, int accum, float *dw, float *db, const float *dy, const float *x, const float *w,
                       int N, int Ni, int No) {
    if (dx) trainop_linear_dx(dx, accum, dy, w, N, Ni, No);
    if (dw) trainop_linear_dw(dw, dy, x, N, Ni, No, 0, No, 0, Ni);
    if (db) trainop_colsum(db, dy, N, No, No);
}

/* Masked-LM head backward on MLM rows [i0, i0 + ni): dLoss/d final states added into
 * their rows of dy; part (3 D, or NULL): partial sums of the dense bias and LayerNorm
 * gradients. */
static void mlm_bwd_rows(train_model *m, train_acts *a, float *dy, int i0, int ni, float *part) {
    const train_config *c = &m->cfg;
    const train_params *p = &m->params;
    int D = c->d_model, V = c->vocab_size;
    size_t o = (size_t)i0 * D;
    float *d3 = a->d_m1 + o, *d2 = a->d_m2 + o, *dh = a->d_m3 + o;
    /* logits = t3 wte^T + bias; t3 = LN(act(h Wm^T + bm)) */
    prod pd = {.kind = PR_DYW, .N = ni, .n = D, .K = V, .nt = 1, .y = d3, .ldy = D,
               .x = {a->d_mlm_logits + (size_t)i0 * V}, .ldx = V, .w = {p->wte},
               .wp = {a->split ? NULL : wte_pack_of(a, c, 0)}};
    run_prods(a, &pd, 1);
    op_layernorm_dx(d2, d3, a->mlm_t2 + o, a->mlm_mean + i0, a->mlm_rstd + i0, p->mlm_ln_g, ni, D);
    op_act_bwd(c->mlm_act, d2, a->mlm_t1 + o, (size_t)ni * D);
    trainop_linear_dx(dh, 0, d2, p->mlm_w, ni, D, D);
    for (int i = 0; i < ni; i++) {
        float *y = dy + (size_t)a->mlm_rows[i0 + i] * D;
        for (int j = 0; j < D; j++) y[j] += dh[(size_t)i * D + j];
    }
    if (!part) return;
    memset(part, 0, 3 * (size_t)D * sizeof(float));
    trainop_colsum(part, d2, ni, D, D);
    op_layernorm_dparams(part + D, part + 2 * D, d3, a->mlm_t2 + o, a->mlm_mean + i0, a->mlm_rstd + i0, ni, D, 0,
                          D);
}

/* Input gradients of layer l on sequences [b0, b0 + nb): dy: dLoss/d layer output;
 * dx: dLoss/d layer input, overwritten. Leaves the per-row gradients its weight
 * gradients need in grad_set_of(l) and, when part (pl_size) is non-NULL, the block's
 * partial sums of the bias and LayerNorm gradients. scr: this thread's scratch (a block
 * pass). */
static void layer_bwd_block(train_model *m, train_acts *a, const train_batch *b, int l, const float *dy, float *dx,
                            int b0, int nb, float *scr, float *part) {
    const train_config *c = &m->cfg;
    int T = b->T, D = c->d_model, F = c->d_ff, r0 = b0 * T, nr = nb * T;
    size_t o = (size_t)r0 * D, of = (size_t)r0 * F;
    layer_p w = layer_params(m, l);
    layer_a s = layer_acts(a, c, l);
    layer_pk k = a->split ? (layer_pk){0} : layer_pack_of(a, c, l, 0);
    grad_set q = grad_set_of(a, c, l);
    int drop = a->p_hidden > 0.0f;
    /* y = LN2(res2) */
    row_job j2 = {.m = m, .a = a, .y = q.h, .x = dy, .res = s.res2, .mean_in = s.mean2, .rstd_in = s.rstd2,
                  .g = w.ln2_g, .C = D, .fn = rows_ln_dx};
    run_rows(a, &j2, r0, nr);
    /* res2 = h1 + dropout(ff2(act(ff1(h1)))) */
    const float *dff2 = q.h;
    if (drop) {
        row_job jd = {.m = m, .a = a, .y = q.t, .x = q.h, .C = D, .site = site_of(l, K_FFOUT), .fn = rows_drop_copy};
        run_rows(a, &jd, r0, nr);
        dff2 = q.t;
    }
    prod p2 = {.kind = PR_DYW, .N = nr, .n = F, .K = D, .nt = 1, .y = q.ff + of, .ldy = F, .x = {dff2 + o},
               .ldx = D, .w = {w.w.f2}, .wp = {k.f2}, .act = c->act, .act_in = s.fpre + of};
    run_prods(a, &p2, 1);
    prod p1 = {.kind = PR_DYW, .N = nr, .n = D, .K = F, .nt = 1, .y = a->d_h1 + o, .ldy = D, .x = {q.ff + of},
               .ldx = F, .w = {w.w.f1}, .wp = {k.f1}, .res = q.h + o, .ldres = D};
    run_prods(a, &p1, 1);
    /* h1 = LN1(res1); res1 = x + dropout(ctx Wo^T + bo) */
    row_job j1 = {.m = m, .a = a, .y = q.r1, .x = a->d_h1, .res = s.res1, .mean_in = s.mean1, .rstd_in = s.rstd1,
                  .g = w.ln1_g, .C = D, .fn = rows_ln_dx};
    run_rows(a, &j1, r0, nr);
    const float *dao = q.r1;
    if (drop) {
        row_job jd = {.m = m, .a = a, .y = q.ao, .x = q.r1, .C = D, .site = site_of(l, K_ATTOUT), .fn = rows_drop_copy};
        run_rows(a, &jd, r0, nr);
        dao = q.ao;
    }
    prod po = {.kind = PR_DYW, .N = nr, .n = D, .K = D, .nt = 1, .y = a->d_ctx + o, .ldy = D, .x = {dao + o},
               .ldx = D, .w = {w.w.o}, .wp = {k.o}};
    run_prods(a, &po, 1);
    att_dims d = att_dims_of(c, a, T, l);
    att_job aj = {a, c, &d, b, s.qkv, a->d_ctx, s.att, NULL, q.qkv, b0};
    run_att(&aj, nb, scr);
    /* qkv = x Wqkv^T + bqkv; dx = d res1 (the residual path) + dq Wq + dk Wk + dv Wv */
    prod pq = {.kind = PR_DYW, .N = nr, .n = D, .K = D, .nt = 3, .y = dx + o, .ldy = D,
               .x = {q.qkv + o * 3, q.qkv + o * 3 + D, q.qkv + o * 3 + 2 * (size_t)D}, .ldx = 3 * D,
               .w = {w.w.q, w.w.k, w.w.v}, .wp = {k.q, k.k, k.v}, .res = q.r1 + o, .ldres = D};
    run_prods(a, &pq, 1);
    if (!part) return;
    memset(part, 0, pl_size(c) * sizeof(float));
    op_layernorm_dparams(part + pl_off(c, PL_G2), part + pl_off(c, PL_BL2), dy + o, s.res2 + o, s.mean2 + r0,
                         s.rstd2 + r0, nr, D, 0, D);
    trainop_colsum(part + pl_off(c, PL_B2), dff2 + o, nr, D, D);
    trainop_colsum(part + pl_off(c, PL_B1), q.ff + of, nr, F, F);
    trainop_colsum(part + pl_off(c, PL_BO), dao + o, nr, D, D);
    trainop_colsum(part + pl_off(c, PL_BQKV), q.qkv + o * 3, nr, 3 * D, 3 * D);
    op_layernorm_dparams(part + pl_off(c, PL_G1), part + pl_off(c, PL_BL1), a->d_h1 + o, s.res1 + o, s.mean1 + r0,
                         s.rstd1 + r0, nr, D, 0, D);
}

/* Embeddings backward on rows [r0, r1) (a row job: m, a; y = dy): x0 = dropout(LN_e(e))
 * with dy = dLoss/dx0 (dropped out in place). */
static void rows_emb_bwd(void *ctx, int r0, int r1) {
    row_job *j = ctx;
    train_acts *a = j->a;
    int D = j->C, nr = r1 - r0;
    size_t o = (size_t)r0 * D, nd = (size_t)nr * D;
    memcpy(a->d_emb_out + o, j->y + o, nd * sizeof(float));
    trainop_dropout(j->y + o, o, nd, a->p_hidden, a->seed, SITE_EMB);
    op_layernorm_dx(a->d_emb_sum + o, j->y + o, a->emb_sum + o, a->emb_mean + r0, a->emb_rstd + r0,
                    j->m->params.ln_e_g, nr, D);
}

/* The embeddings' backward on rows [r0, r0 + nr) of dy; part (2 D, or NULL): the block's
 * LayerNorm partial sums. */
static void emb_bwd_rows(train_model *m, train_acts *a, float *dy, int r0, int nr, float *part) {
    int D = m->cfg.d_model;
    row_job j = {.m = m, .a = a, .y = dy, .C = D, .fn = rows_emb_bwd};
    run_rows(a, &j, r0, nr);
    if (!part) return;
    size_t o = (size_t)r0 * D;
    memset(part, 0, 2 * (size_t)D * sizeof(float));
    op_layernorm_dparams(part, part + D, dy + o, a->emb_sum + o, a->emb_mean + r0, a->emb_rstd + r0, nr, D, 0, D);
}

/* Block blk at layer l: the MLM rows' backward first (top layer), then the layer,
 * then the embeddings (layer 0). */
static void bwd_block(train_model *m, train_acts *a, const train_batch *b, int l, int blk, int sb, float *dy, float *dx,
                      int pg, float *scr) {
    const train_config *c = &m->cfg;
    int T = b->T, b0 = blk * sb, nb = b->B - b0 < sb ? b->B - b0 : sb;
    int m0 = a->blk_mlm[blk], m1 = a->blk_mlm[blk + 1];
    if (l == c->n_layer - 1 && c->mlm && a->n_mlm > 0) {
        if (m1 > m0) mlm_bwd_rows(m, a, dy, m0, m1 - m0, pg ? part_mlm(a, c, blk) : NULL);
        else if (pg) memset(part_mlm(a, c, blk), 0, 3 * (size_t)c->d_model * sizeof(float));
    }
    layer_bwd_block(m, a, b, l, dy, dx, b0, nb, scr, pg ? part_layer(a, c, l, blk) : NULL);
    if (l == 0) emb_bwd_rows(m, a, dx, b0 * T, nb * T, pg ? part_emb(a, c, blk) : NULL);
}

typedef struct {
    train_model *m;
    train_acts *a;
    const train_batch *b;
    int l, nblk, sb, pg;
    float *dy, *dx;
    const grad_tasks *g;
} region_job;

static void region_task(void *ctx, int i, int tid) {
    const region_job *j = ctx;
    if (i < j->g->n) gt_one(j->m, j->a, j->b, j->nblk, &j->g->t[i]);
    else bwd_block(j->m, j->a, j->b, j->l, i - j->g->n, j->sb, j->dy, j->dx, j->pg, thread_scr(j->a, &j->m->cfg, tid));
}

/* Layer l's blocks and the tasks in g as one job, handed out in order: the tasks of g
 * (the larger ones), then the blocks. l < 0: the tasks only. A split pass runs its one
 * block first (each step on all threads), then the tasks. */
static void run_region(train_model *m, train_acts *a, const train_batch *b, int l, int nblk, int sb, float *dy,
                       float *dx, int pg, const grad_tasks *g, int nt) {
    region_job j = {m, a, b, l, nblk, sb, pg, dy, dx, g};
    if (a->split) {
        if (l >= 0) bwd_block(m, a, b, l, 0, sb, dy, dx, pg, thread_scr(a, &m->cfg, 0));
        as_parallel_for(g->n, nt, region_task, &j);
        return;
    }
    as_parallel_for(g->n + (l >= 0 ? nblk : 0), nt, region_task, &j);
}

/* Regions: layer L-1's blocks (with the MLM rows) + the decoder's weight gradient;
 * layer l's blocks + layer l+1's weight gradients (+ the MLM head's, after the top
 * layer); last, layer 0's weight gradients + the embeddings'. */
void train_backward(train_model *m, train_acts *a, const train_batch *b, int param_grads) {
    const train_config *c = &m->cfg;
    const train_params *p = &m->params;
    int pg = param_grads != 0;
    ASSERT(!pg || m->grads_mem);
    train_params gz = {0};
    const train_params *g = pg ? &m->grads : &gz;
    int B = b->B, T = b->T, N = B * T, D = c->d_model, L = c->n_layer, C = c->num_labels, V = c->vocab_size;
    int M = a->n_mlm, mlm = c->mlm && M > 0;
    grad_tasks *gts = as_malloc_array(1, sizeof *gts);
    ASSERT(gts);
    gts->n = 0;
    pass_state ps = pass_begin();
    int nt = pass_threads(a), sb = block_seqs(T), nblk = (B + sb - 1) / sb;
    a->split = nblk == 1;
    if (!a->split) pack_weights(m, a, 0, mlm, nt);
    float *dy = a->d_x, *dx = a->d_y;
    memcpy(dy, a->d_out, (size_t)N * D * sizeof(float));
    /* classifier: logits = poold Wc^T + bc; poold = dropout(act(h0 Wp^T + bp)) */
    if (C > 0) {
        float *dpool = a->d_m1, *dh0 = a->d_m2;
        linear_bwd(dpool, 0, g->cls_w, g->cls_b, a->d_cls_logits, a->cls_poold, p->cls_w, B, D, C);
        trainop_dropout(dpool, 0, (size_t)B * D, a->p_hidden, a->seed, SITE_POOL);
        for (size_t i = 0; i < (size_t)B * D; i++) dpool[i] *= cls_act_grad(c->cls_act, a->cls_pool[i]);
        linear_bwd(dh0, 0, g->pool_w, g->pool_b, dpool, a->cls_h0, p->pool_w, B, D, D);
        for (int bb = 0; bb < B; bb++) {
            float *r = dy + (size_t)bb * T * D;
            for (int i = 0; i < D; i++) r[i] += dh0[(size_t)bb * D + i];
        }
    }
    /* the tied decoder: dwte += dlogits^T t3, dbias += colsum(dlogits) */
    if (pg && mlm) gt_linear(gts, g->wte, g->mlm_bias, a->d_mlm_logits, a->mlm_t3, M, D, V);
    for (int l = L - 1; l >= 0; l--) {
        run_region(m, a, b, l, nblk, sb, dy, dx, pg, gts, nt);
        gts->n = 0;
        if (pg) {
            gt_layer(gts, m, a, b, l);
            if (l == L - 1 && mlm) {
                gt_linear(gts, g->mlm_w, NULL, a->d_m2, a->mlm_h, M, D, D);
                gt_simple(gts, GT_RED_MLM, 0, 0, 0);
            }
        }
        float *t = dy;
        dy = dx;
        dx = t;
    }
    if (pg) {
        /* the lookups' gradients by columns, and the embedding LayerNorm's */
        for (int i0 = 0; i0 < D; i0 += 32) gt_simple(gts, GT_EMB, 0, i0, D - i0 < 32 ? D : i0 + 32);
        gt_simple(gts, GT_RED_EMB, 0, 0, 0);
        run_region(m, a, b, -1, nblk, sb, dy, dx, pg, gts, nt);
    }
    pass_end(ps);
    free(gts);
}
