/* attrib_mix.c — token-to-token mixing through a whole attention block: the residual-
 * and norm-aware norm-based attention (Kobayashi et al. 2021) and ALTI (Ferrando et al.
 * 2022) with its aggregation across layers (formulas in attrib.h, docs/attribution.md).
 *
 * Both read one decomposition of the attention half of layer l. With x (T, D) the layer's
 * input (the residual stream), f_h(x_j) = v_h[j] W_o^h (D) head h's transformed value of
 * token j (the values as captured, bias included) and s_ij = sum_h A_h[i, j] f_h(x_j):
 *   post-LN (BERT family)      T_i(x_j) = γ ⊙ (z_ij − mean(z_ij)) / σ(u_i),
 *                              z_ij = s_ij + δ_ij x_i, u_i = sum_j z_ij + b_o,
 *                              σ(u) = sqrt(var(u) + eps);  x̃_i = LN1(u_i)
 *   pre-norm (GPT-2, LLaMA)    T_i(x_j) = s_ij + δ_ij x_i;  x̃_i = x_i + sum_j s_ij + b_o
 *   pre-norm with a norm on    T_i(x_j) = g ⊙ s_ij / rms(a_i) + δ_ij x_i, a_i = sum_j s_ij + b_o;
 *   the attention output       x̃_i = x_i + g ⊙ a_i / rms(a_i)   (g = γ, or 1 + γ for Gemma)
 *   (Gemma 2 / 3)
 * so that x̃_i = sum_j T_i(x_j) + (the bias terms: b_o and β through the norm), exactly.
 * norm2[l, i, j] = ||T_i(x_j)||_2; ALTI c_ij = max(0, ||x̃_i||_1 − ||x̃_i − T_i(x_j)||_1),
 * each row divided by its sum (a zero row stays zero).
 * Row i needs T_i(x_j) for every j: a block of B <= 8 rows is (B, T, D) per thread (at
 * most 16 MB), never the (T, T, D) of a layer.
 * attr_head_mixing splits the same block output by head instead of by input token: the
 * components are head h's output o_h,i = sum_j A_h[i, j] f_h(x_j) and the residual x_i,
 * each through the same T_i (the norm's linear map at row i), scored by the same ALTI c;
 * o_h = (A_h V_h) W_o^h, two products per head instead of the sum over j.
 * What it does not: follow the feed-forward half (it mixes no tokens), or run the forward.
 */
#include "analysis/attrib.h"
#include "core/fastmath.h"
#include "core/pool.h"
#include "model/head_out.h"
#include "model/model.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

typedef enum { MIX_POST_LN = 0, MIX_PRE, MIX_PRE_POSTNORM } mix_kind;

typedef struct {
    mix_kind kind;
    int T, D, H;
    const float *A;  /* (H, T, T) the layer's attention */
    const float *Fh; /* (H, T, D) f_h(x_j) */
    const float *x;  /* (T, D) the layer's input */
    const float *bo; /* (D) or NULL */
    const float *g, *beta; /* (D) the norm's gain (and LayerNorm bias, post-LN); NULL: none */
    float eps;
    int add_one;     /* RMSNorm scales by 1 + g */
    int B;           /* rows per task (a block) */
    float *S;        /* (threads, B, T, D) scratch: s_ij of a block's rows */
    double *work;    /* (threads, 2 D + T) scratch: x̃_i, T_i(x_j), the row's contributions */
    float *N2;       /* (T, T) or NULL */
    float *C;        /* (T, T) or NULL */
} mix_job;

/* The norm after a layer's attention as the decomposition reads it. */
typedef struct {
    mix_kind kind;
    int D;
    const float *g, *beta; /* (D) the norm's gain (and LayerNorm bias, post-LN); NULL: none */
    float eps;
    int add_one;           /* RMSNorm scales by 1 + g */
} mix_norm;

/* tl (D) = a_i = sum_j s_ij + b_o on entry, the block output x̃_i of row i (xi (D) its
 * residual) on return: LN1(a_i + x_i) post-LN, x_i + g ⊙ a_i / rms(a_i) with a norm on the
 * attention output, x_i + a_i without. Returns the norm's scale that T_i applies to every
 * part: 1 / σ(u_i) post-LN, 1 / rms(a_i) with a post-attention norm, else 1. */
static double mix_block_output(const mix_norm *nm, const float *xi, double *tl) {
    const int D = nm->D;
    double sc = 1.0;
    if (nm->kind == MIX_POST_LN) {
        double mu = 0.0, var = 0.0;
        for (int d = 0; d < D; d++) mu += tl[d] += xi[d];
        mu /= D;
        for (int d = 0; d < D; d++) var += (tl[d] - mu) * (tl[d] - mu);
        sc = 1.0 / sqrt(var / D + nm->eps);
        for (int d = 0; d < D; d++)
            tl[d] = (tl[d] - mu) * sc * (nm->g ? nm->g[d] : 1.0) + (nm->beta ? nm->beta[d] : 0.0);
    } else if (nm->kind == MIX_PRE_POSTNORM) {
        double ms = 0.0;
        for (int d = 0; d < D; d++) ms += tl[d] * tl[d];
        sc = 1.0 / sqrt(ms / D + nm->eps);
        for (int d = 0; d < D; d++) tl[d] = tl[d] * sc * ((nm->add_one ? 1.0 : 0.0) + nm->g[d]) + xi[d];
    } else {
        for (int d = 0; d < D; d++) tl[d] += xi[d];
    }
    return sc;
}

/* y = T_i(x_j) from z = s_ij (+ x_i when j == i, added by the caller for post-LN). */
static double mix_vec(const mix_job *jb, const float *s, int self, const float *xi, double sc, double *y) {
    const int D = jb->D;
    double n2 = 0.0;
    if (jb->kind == MIX_POST_LN) { /* γ ⊙ (z − mean z) / σ(u_i), σ given as sc = 1 / σ */
        double mu = 0.0;
        for (int d = 0; d < D; d++) mu += (double)s[d] + (self ? xi[d] : 0.0);
        mu /= D;
        for (int d = 0; d < D; d++) {
            double v = ((double)s[d] + (self ? xi[d] : 0.0) - mu) * sc * (jb->g ? jb->g[d] : 1.0);
            y[d] = v;
            n2 += v * v;
        }
    } else {
        for (int d = 0; d < D; d++) {
            double gd = jb->kind == MIX_PRE_POSTNORM ? (jb->add_one ? 1.0 : 0.0) + jb->g[d] : 1.0;
            double v = (double)s[d] * gd * sc + (self ? xi[d] : 0.0);
            y[d] = v;
            n2 += v * v;
        }
    }
    return sqrt(n2);
}

/* Row i of N2 and C from S (T, D) = s_ij of row i. */
static void mix_row(mix_job *jb, int i, const float *S, int tid) {
    const int T = jb->T, D = jb->D;
    double *tl = jb->work + (size_t)tid * (2 * D + T), *t = tl + D, *y = t + D;
    const float *xi = jb->x + (size_t)i * D;
    /* a_i = sum_j s_ij + b_o, then x̃_i and the scale of the norm */
    for (int d = 0; d < D; d++) tl[d] = jb->bo ? jb->bo[d] : 0.0;
    for (int j = 0; j < T; j++)
        for (int d = 0; d < D; d++) tl[d] += S[(size_t)j * D + d];
    const mix_norm nm = {jb->kind, D, jb->g, jb->beta, jb->eps, jb->add_one};
    const double sc = mix_block_output(&nm, xi, tl);
    double l1 = 0.0, z = 0.0;
    for (int d = 0; d < D; d++) l1 += fabs(tl[d]);
    float *n2 = jb->N2 ? jb->N2 + (size_t)i * T : NULL, *c = jb->C ? jb->C + (size_t)i * T : NULL;
    for (int j = 0; j < T; j++) {
        double nj = mix_vec(jb, S + (size_t)j * D, j == i, xi, sc, t);
        if (n2) n2[j] = (float)nj;
        if (!c) continue;
        double dist = 0.0; /* ||x̃_i − T_i(x_j)||_1 (Ferrando et al. 2022, eq. 9) */
        for (int d = 0; d < D; d++) dist += fabs(tl[d] - t[d]);
        double cij = l1 - dist > 0.0 ? l1 - dist : 0.0;
        y[j] = cij;
        z += cij;
    }
    if (c)
        for (int j = 0; j < T; j++) c[j] = z > 0.0 ? (float)(y[j] / z) : 0.0f;
}

/* Task k: rows k B .. k B + B - 1 of N2 and C. s_ij = sum_h A_h[i, j] f_h(x_j) for the
 * block's rows together, j by j, so each f_h(x_j) is read once per block (the (B, T, D)
 * scratch of a block, never the (T, T, D) of the layer); each s_ij sums h in order. */
static void mix_block(void *ctx, int k, int tid) {
    mix_job *jb = ctx;
    const int T = jb->T, D = jb->D, H = jb->H, i0 = k * jb->B, n = T - i0 < jb->B ? T - i0 : jb->B;
    const size_t TT = (size_t)T * T;
    float *S = jb->S + (size_t)tid * jb->B * T * D;
    memset(S, 0, (size_t)n * T * D * sizeof(float));
    for (int j = 0; j < T; j++)
        for (int h = 0; h < H; h++) {
            const float *f = jb->Fh + ((size_t)h * T + j) * D, *a = jb->A + h * TT + (size_t)i0 * T + j;
            for (int b = 0; b < n; b++) {
                const float ab = a[(size_t)b * T];
                if (ab == 0.0f) continue;
                float *sj = S + ((size_t)b * T + j) * D;
                for (int d = 0; d < D; d++) sj[d] += ab * f[d];
            }
        }
    for (int b = 0; b < n; b++) mix_row(jb, i0 + b, S + (size_t)b * T * D, tid);
}

/* Rows per block: up to MIX_ROWS, with a block's scratch (B, T, D) at most MIX_SCRATCH floats. */
#define MIX_ROWS 8
#define MIX_SCRATCH ((size_t)4 << 20)
static int mix_rows(int T, int D) {
    size_t b = MIX_SCRATCH / ((size_t)T * D);
    return b < 1 ? 1 : b > MIX_ROWS ? MIX_ROWS : (int)b;
}

/* The norm after layer l's attention that the decomposition goes through, and the kind. */
static mix_kind mix_layer_kind(const as_model *m, int l, const ln_t **ln) {
    const layer_w *w = &m->layers[l];
    if (!m->pre_ln) {
        *ln = &w->ln1;
        return MIX_POST_LN;
    }
    *ln = &w->post_attn;
    return w->post_attn.g ? MIX_PRE_POSTNORM : MIX_PRE;
}

/* Task h: f_h(x_j) = v_h[j] W_o^h (Kobayashi et al. 2020, eq. 5) of layer l for every j. */
typedef struct {
    const as_model *m;
    const as_run *r;
    int l;
    float *Fh; /* (H, T, D) */
    float *wo; /* per thread (Dh, D) */
} mix_fh_job;

static void mix_fh(void *ctx, int h, int tid) {
    const mix_fh_job *j = ctx;
    const int T = j->r->T, D = j->r->D, Dh = j->r->Dh;
    model_head_out_mul(j->m, j->l, h, as_run_v(j->r, j->l, h), T, (size_t)Dh, j->Fh + (size_t)h * T * D, (size_t)D,
                       j->wo + (size_t)tid * Dh * D);
}

as_status attr_mixing(const as_model *m, const as_run *r, int threads, float *N2, float *C, as_error *err) {
    const as_config *c = as_model_config(m);
    const int L = r->L, H = r->H, T = r->T, D = r->D, Dh = r->Dh;
    const size_t TT = (size_t)T * T;
    if (!r->attn || !r->v || !r->hidden || r->layer_lo || r->n_lay != L || r->head_lo || r->n_hd != H ||
        r->n_run < L || D != c->d_model || L != c->n_layer)
        return as_err_set(err, AS_ERR_INPUT, "mixing needs a run with every layer's attention, values and hidden states");
    if (threads < 1) threads = 1;
    const int B = mix_rows(T, D), n_blocks = (T + B - 1) / B;
    if (threads > n_blocks) threads = n_blocks;
    float *Fh = as_malloc_array(as_mul_size((size_t)H * T, (size_t)D), sizeof(float));
    float *wo = as_malloc_array(as_mul_size((size_t)threads * Dh, (size_t)D), sizeof(float));
    float *S = as_malloc_array(as_mul_size((size_t)threads * B * T, (size_t)D), sizeof(float));
    double *work = as_malloc_array((size_t)threads * (2 * D + T), sizeof(double));
    as_status s = AS_OK;
    if (!Fh || !wo || !S || !work) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    par_state saved; /* OpenBLAS on one thread: the pool runs the heads' products side by side */
    model_par_begin(threads, NULL, 0, NULL, &saved);
    for (int l = 0; l < L; l++) {
        mix_fh_job fj = {m, r, l, Fh, wo};
        as_parallel_for(H, threads < H ? threads : H, mix_fh, &fj);
        const ln_t *ln = NULL;
        mix_job jb = {.kind = mix_layer_kind(m, l, &ln), .T = T, .D = D, .H = H, .A = r->attn + (size_t)l * H * TT,
                      .Fh = Fh, .x = r->hidden + (size_t)l * T * D, .bo = m->layers[l].o.b, .g = ln->g,
                      .beta = ln->b, .eps = c->ln_eps, .add_one = c->norm_add_one, .B = B, .S = S, .work = work,
                      .N2 = N2 ? N2 + l * TT : NULL, .C = C ? C + l * TT : NULL};
        as_parallel_for(n_blocks, threads, mix_block, &jb);
    }
    model_par_end(&saved);
cleanup:
    free(Fh);
    free(wo);
    free(S);
    free(work);
    return s;
}

as_status attr_alti_aggregate(float *C, int L, int T, as_error *err) {
    const size_t TT = (size_t)T * T;
    double *R = as_malloc_array(3 * TT, sizeof(double));
    if (!R) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    double *M = R + TT, *tmp = M + TT;
    for (size_t e = 0; e < TT; e++) R[e] = C[e];
    for (int l = 1; l < L; l++) { /* R_l = C_l R_{l-1} (Ferrando et al. 2022, sec. 3.2) */
        float *Cl = C + l * TT;
        for (size_t e = 0; e < TT; e++) M[e] = Cl[e];
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, T, T, 1.0, M, T, R, T, 0.0, tmp, T);
        memcpy(R, tmp, TT * sizeof(double));
        for (size_t e = 0; e < TT; e++) Cl[e] = (float)R[e];
    }
    free(R);
    return AS_OK;
}

/* ---- per head: value norms and ALTI shares of the block output ---------------------- */

typedef struct {
    mix_kind kind;
    int T, D, H;
    const float *O;        /* (H, T, D) o_h,i, head h's output at row i */
    const float *x;        /* (T, D) the layer's input */
    const float *bo;       /* (D) or NULL */
    const float *g, *beta; /* (D) the norm's gain and bias; NULL: none */
    float eps;
    int add_one;
    double *work;          /* (threads, 2 D + H + 1) scratch: the map, x̃_i, the contributions */
    float *share;          /* (H, T) of the layer */
} hmix_job;

/* ||x̃_i − T_i(z)||_1 for one component z (D, float): T_i(z) = (z − center · mean z) ⊙ w,
 * w the norm's linear map at row i (post-LN: γ / σ(u_i), centred; a post-attention norm:
 * g / rms(a_i)); w NULL: T_i(z) = z. Reductions in the vector lanes of the copy that runs. */
AS_KERNEL_BODY void hmix_dist_body(const float *z, const double *tl, const double *w, int D, int center, double *out) {
    double mu = 0.0, dist = 0.0;
    if (center) {
#pragma omp simd reduction(+ : mu)
        for (int d = 0; d < D; d++) mu += z[d];
        mu /= D;
    }
    if (w) {
#pragma omp simd reduction(+ : dist)
        for (int d = 0; d < D; d++) dist += fabs(tl[d] - ((double)z[d] - mu) * w[d]);
    } else {
#pragma omp simd reduction(+ : dist)
        for (int d = 0; d < D; d++) dist += fabs(tl[d] - (double)z[d]);
    }
    *out = dist;
}
AS_KERNEL_SIMD(hmix_dist, (const float *z, const double *tl, const double *w, int D, int center, double *out),
               (z, tl, w, D, center, out))

/* Task i: head shares of row i. Components: o_h,i (h < H) and the residual x_i;
 * c = max(0, ||x̃_i||_1 − ||x̃_i − T_i(component)||_1) (Ferrando et al. 2022, eq. 9),
 * share_h = c_h / sum of all H + 1 (0 when the sum is 0). A post-attention norm does not
 * scale the residual; post-LN maps it like the heads' outputs. */
static void hmix_row(void *ctx, int i, int tid) {
    hmix_job *jb = ctx;
    const int T = jb->T, D = jb->D, H = jb->H;
    double *w = jb->work + (size_t)tid * ((size_t)2 * D + H + 1);
    double *tl = w + D, *c = tl + D;
    const float *xi = jb->x + (size_t)i * D;
    for (int d = 0; d < D; d++) tl[d] = jb->bo ? jb->bo[d] : 0.0;
    for (int h = 0; h < H; h++) {
        const float *o = jb->O + ((size_t)h * T + i) * D;
        for (int d = 0; d < D; d++) tl[d] += o[d];
    }
    const mix_norm nm = {jb->kind, D, jb->g, jb->beta, jb->eps, jb->add_one};
    const double sc = mix_block_output(&nm, xi, tl); /* x̃_i and the norm's scale, as mix_row */
    const int center = jb->kind == MIX_POST_LN, mapped = jb->kind != MIX_PRE;
    for (int d = 0; mapped && d < D; d++)
        w[d] = center ? sc * (jb->g ? jb->g[d] : 1.0) : sc * ((jb->add_one ? 1.0 : 0.0) + jb->g[d]);
    double l1 = 0.0, sum = 0.0;
    for (int d = 0; d < D; d++) l1 += fabs(tl[d]);
    for (int k = 0; k <= H; k++) {
        const float *z = k < H ? jb->O + ((size_t)k * T + i) * D : xi;
        double dist;
        AS_KERNEL_RUN(hmix_dist, z, tl, mapped && (k < H || center) ? w : NULL, D, center, &dist);
        c[k] = l1 - dist > 0.0 ? l1 - dist : 0.0;
        sum += c[k];
    }
    for (int h = 0; h < H; h++) jb->share[(size_t)h * T + i] = sum > 0.0 ? (float)(c[h] / sum) : 0.0f;
}

/* Layer l's value norms ||f_h(x_j)|| into fnorm (H, T) and each head's output
 * O_h = (A_h V_h) W_o^h (T, D) (the same as sum_j A_h[i, j] f_h(x_j), without the (T, T, D)
 * of the sum), a task per head. Both products by W_o^h run as one: [V_h; ctx_h] (2T, Dh)
 * W_o^h, whether or not fnorm is wanted (so O's bits do not depend on it). */
typedef struct {
    const as_model *m;
    const as_run *r;
    int l;
    float *fnorm;  /* (H, T) of the layer, or NULL */
    float *O;      /* (H, T, D), or NULL */
    float *VC, *F, *wo; /* per thread: (2T, Dh), (2T, D), (Dh, D) */
} hmix_heads_job;

static void hmix_head(void *ctx, int h, int tid) {
    const hmix_heads_job *j = ctx;
    const as_run *r = j->r;
    const int H = r->H, T = r->T, D = r->D, Dh = r->Dh;
    float *VC = j->VC + (size_t)tid * 2 * T * Dh, *F = j->F + (size_t)tid * 2 * T * D, *wo = j->wo + (size_t)tid * Dh * D;
    const float *V = as_run_v(r, j->l, h); /* (T, Dh) */
    memcpy(VC, V, (size_t)T * Dh * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, Dh, T, 1.0f, r->attn + ((size_t)j->l * H + h) * T * T,
                T, V, Dh, 0.0f, VC + (size_t)T * Dh, Dh);
    model_head_out_mul(j->m, j->l, h, VC, 2 * T, (size_t)Dh, F, (size_t)D, wo);
    if (j->fnorm) /* f_h(x_j) = v_h[j] W_o^h (Kobayashi et al. 2020, eq. 5) */
        for (int t = 0; t < T; t++) {
            double n2 = 0.0;
            for (int d = 0; d < D; d++) n2 += (double)F[(size_t)t * D + d] * F[(size_t)t * D + d];
            j->fnorm[(size_t)h * T + t] = (float)sqrt(n2);
        }
    if (j->O) memcpy(j->O + (size_t)h * T * D, F + (size_t)T * D, (size_t)T * D * sizeof(float));
}

as_status attr_head_mixing(const as_model *m, const as_run *r, int threads, float *fnorm, float *share,
                           as_error *err) {
    const as_config *c = as_model_config(m);
    const int L = r->L, H = r->H, T = r->T, D = r->D, Dh = r->Dh;
    if (!r->attn || !r->v || !r->hidden || r->layer_lo || r->n_lay != L || r->head_lo || r->n_hd != H ||
        r->n_run < L || D != c->d_model || L != c->n_layer)
        return as_err_set(err, AS_ERR_INPUT, "head mixing needs a run with every layer's attention, values and hidden states");
    if (threads < 1) threads = 1;
    if (threads > T) threads = T;
    const int ht = threads < H ? threads : H; /* threads of the per-head products */
    float *O = share ? as_malloc_array(as_mul_size((size_t)H * T, (size_t)D), sizeof(float)) : NULL;
    float *F = as_malloc_array(as_mul_size((size_t)ht * 2 * T, (size_t)D), sizeof(float));
    float *VC = as_malloc_array(as_mul_size((size_t)ht * 2 * T, (size_t)Dh), sizeof(float));
    float *wo = as_malloc_array(as_mul_size((size_t)ht * Dh, (size_t)D), sizeof(float));
    double *work = as_malloc_array(as_mul_size((size_t)threads, (size_t)2 * D + H + 1), sizeof(double));
    as_status s = AS_OK;
    if ((share && !O) || !F || !VC || !wo || !work) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    par_state saved; /* OpenBLAS on one thread: the pool runs the heads' products side by side */
    model_par_begin(threads, NULL, 0, NULL, &saved);
    for (int l = 0; l < L; l++) {
        hmix_heads_job hj = {m, r, l, fnorm ? fnorm + (size_t)l * H * T : NULL, O, VC, F, wo};
        as_parallel_for(H, ht, hmix_head, &hj);
        if (!share) continue;
        const ln_t *ln = NULL;
        hmix_job jb = {.kind = mix_layer_kind(m, l, &ln), .T = T, .D = D, .H = H, .O = O,
                       .x = r->hidden + (size_t)l * T * D, .bo = m->layers[l].o.b, .g = ln->g, .beta = ln->b,
                       .eps = c->ln_eps, .add_one = c->norm_add_one, .work = work,
                       .share = share + (size_t)l * H * T};
        as_parallel_for(T, threads, hmix_row, &jb);
    }
    model_par_end(&saved);
cleanup:
    free(O);
    free(F);
    free(VC);
    free(wo);
    free(work);
    return s;
}
