/* par_ops.c — the operations of a pass through a model that run on the thread pool
 * (core/pool.h): linear maps (y = x W^T + b, and the input gradient dx = dy W), norms,
 * activations and adds over rows or elements. A pass (the forward in encoder.c, the
 * backward in backward.c) brackets its work with model_par_begin / model_par_end, which
 * set the thread count and the linear maps' scratch for the calling thread and OpenBLAS
 * to one thread (so no second pool competes for the cores).
 *
 * Linear maps split their output columns into blocks, each a single-threaded product on
 * its slice of the weights: OpenBLAS sgemm, core/gemm_small.c for a few rows, a BF16
 * checkpoint's weights packed for the AVX-512 F32 kernel (core/gemm_bf16.c) or widened
 * block by block from the mapping, or at precision bf16 the AVX-512 BF16
 * kernels (core/gemm_bf16.c: on the packed weights in the forward), in the backward too
 * (dx = dy W, and dW when training at precision bf16). Maps reading one input run as one
 * product (op_linear_n). Element-wise work is split into ranges.
 */
#include "model/model.h"
#include "model/ops.h"
#include "core/gemm_bf16.h"
#include "core/gemm_small.h"
#include "core/pool.h"

#include <cblas.h>
#include <string.h>

/* Threads of the pass running on this thread (model_par_begin); t_fixed: products split
 * into blocks that do not depend on the thread count (model_par_fixed_blocks). */
static _Thread_local int t_threads = 1, t_fixed;

/* Up to this many rows (tokens), F32 weights multiply without packing
 * (core/gemm_small.c): y = x W^T up to AS_GEMM_SMALL_MAX_ROWS, y = x W up to
 * AS_GEMM_SMALL_XW_MAX_ROWS (measured against sgemm with W cold and unaligned, one thread,
 * bench/gemm_small_bench.c: the x W kernel is 1.3-2.4x sgemm at 25 rows and ahead to 64);
 * longer inputs amortise sgemm's packing of W. */
#ifndef AS_GEMM_SMALL_MAX_ROWS
#define AS_GEMM_SMALL_MAX_ROWS 32
#endif
#ifndef AS_GEMM_SMALL_XW_MAX_ROWS
#define AS_GEMM_SMALL_XW_MAX_ROWS 64
#endif

/* Scratch of the linear maps during a pass on this thread (model_par_begin):
 * conv, per pool thread, rows of a BF16 weight widened to F32 (lin_conv_rows; or the
 * BF16 fallback's blocks); xb, the BF16 copy of a product's input at precision bf16
 * (set when the model computes in BF16, else NULL). */
typedef struct {
    float *conv;
    size_t conv_per_thread; /* floats */
    uint16_t *xb;           /* (T, max n_in) */
    uint16_t *dyb;          /* backward at precision bf16: dyb_cap values for a product's BF16 dy */
    size_t dyb_cap;
    uint16_t *dwb;          /* weight gradients at precision bf16: dwb_cap values for both BF16 operands */
    size_t dwb_cap;
} lin_scratch;
static _Thread_local lin_scratch t_lin;

/* How many rows of `width` floats of a BF16 weight are widened at a time: as many as the
 * thread's conv scratch holds (as_gemm_bf16_scratch of the pass's widest input: 128 rows of
 * the widest, more of narrower ones), at most LIN_CONV_MAX_ROWS. Each block is one sgemm,
 * which packs the other operand (the T rows of x or dy) anew: 64-row blocks spent 18% of a
 * 2048-token Llama prefill in that packing. The count depends on the shapes only, so a
 * product's sums do not change with the thread count. */
#define LIN_CONV_MAX_ROWS 512
static int lin_conv_rows(const lin_scratch *sc, int width) {
    size_t r = width > 0 ? sc->conv_per_thread / (size_t)width : 1;
    return r < 1 ? 1 : r > LIN_CONV_MAX_ROWS ? LIN_CONV_MAX_ROWS : (int)r;
}

/* Pool thread tid's scratch when it holds `need` floats (or 32-bit words), else NULL. */
static float *lin_thread_scratch(const lin_scratch *sc, int tid, size_t need) {
    return sc->conv && need <= sc->conv_per_thread ? sc->conv + (size_t)tid * sc->conv_per_thread : NULL;
}

/* y[:, j0:j1] = x W[j0:j1]^T (+ b[j0:j1]) with F32 weights w: past the small kernels' rows,
 * the AVX-512 F32 kernel (core/gemm_bf16.c: 8-20% ahead of sgemm with W cold,
 * bench/gemm_bf16_bench.c) when given its scratch `pack`, else sgemm. */
static void linear_cols_f32(const lin_t *l, const float *w, size_t ldw, const float *x, int T, float *y,
                            int j0, int j1, float *pack) {
    int small = T <= (l->in_out ? AS_GEMM_SMALL_XW_MAX_ROWS : AS_GEMM_SMALL_MAX_ROWS);
    if (pack && !small && as_gemm_f32_packed_native()) {
        as_gemm_f32_xwt(T, j1 - j0, l->n_in, x, (size_t)l->n_in, w, ldw, l->in_out, l->b ? l->b + j0 : NULL, y + j0,
                        (size_t)l->n_out, pack);
        return;
    }
    float beta = 0.0f;
    if (l->b) {
        for (int t = 0; t < T; t++)
            memcpy(y + (size_t)t * l->n_out + j0, l->b + j0, (size_t)(j1 - j0) * sizeof(float));
        beta = 1.0f;
    }
    if (!l->in_out && T <= AS_GEMM_SMALL_MAX_ROWS && as_gemm_small_ok()) {
        as_gemm_small_xwt(T, j1 - j0, l->n_in, x, (size_t)l->n_in, w, ldw, y + j0, (size_t)l->n_out, l->b != NULL);
        return;
    }
    if (l->in_out && T <= AS_GEMM_SMALL_XW_MAX_ROWS && as_gemm_small_xw_ok()) {
        as_gemm_small_xw(T, j1 - j0, l->n_in, x, (size_t)l->n_in, w, ldw, y + j0, (size_t)l->n_out, l->b != NULL);
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, l->in_out ? CblasNoTrans : CblasTrans, T, j1 - j0, l->n_in, 1.0f, x,
                l->n_in, w, (int)ldw, beta, y + j0, l->n_out);
}

/* One product for output columns [j0, j1) on pool thread tid: F32 weights; BF16 weights
 * in the mapping times F32 x, on AVX-512F past AS_GEMM_SMALL_MAX_ROWS rows by the F32
 * kernel of core/gemm_bf16.c (packed whole at precision bf16, else block by block per
 * call: the same sums), else widened to F32 lin_conv_rows rows at a time (the same
 * products as an F32 copy, without the copy); or, at precision bf16, BF16 input x BF16
 * weights (packed where the CPU has the AVX-512 BF16 kernel). */
static void linear_cols(const lin_t *l, const float *x, const uint16_t *xb, int T, float *y, int j0, int j1,
                        const lin_scratch *sc, int tid) {
    if (l->wpk && xb && as_gemm_bf16_native()) {
        as_gemm_bf16_xwt_packed(T, j0, j1, l->n_in, xb, (size_t)l->n_in, l->wpk, l->b, y, (size_t)l->n_out);
        return;
    }
    float *pk = !xb && !l->w ? lin_thread_scratch(sc, tid, as_gemm_f32_xwt_bf16_scratch(l->n_in)) : NULL;
    if (pk && T > AS_GEMM_SMALL_MAX_ROWS && as_gemm_f32_packed_native()) {
        /* BF16 weights in F32 arithmetic, the same sums whether packed whole or per call */
        if (l->wpk)
            as_gemm_f32_xwt_packed(T, j0, j1, l->n_in, x, (size_t)l->n_in, l->wpk, l->b, y, (size_t)l->n_out);
        else
            as_gemm_f32_xwt_bf16(T, j1 - j0, l->n_in, x, (size_t)l->n_in, l->wbf + (size_t)j0 * l->n_in,
                                 (size_t)l->n_in, l->b ? l->b + j0 : NULL, y + j0, (size_t)l->n_out, (uint32_t *)pk);
        return;
    }
    if (l->wbf && xb) {
        as_gemm_bf16_xwt(T, j1 - j0, l->n_in, xb, (size_t)l->n_in, l->wbf + (size_t)j0 * l->n_in, (size_t)l->n_in,
                         l->b ? l->b + j0 : NULL, y + j0, (size_t)l->n_out, sc->conv + (size_t)tid * sc->conv_per_thread);
        return;
    }
    if (l->w) {
        linear_cols_f32(l, l->in_out ? l->w + j0 : l->w + (size_t)j0 * l->ldw, (size_t)l->ldw, x, T, y, j0, j1,
                        lin_thread_scratch(sc, tid, as_gemm_f32_xwt_scratch(l->n_in)));
        return;
    }
    float *wf = sc->conv + (size_t)tid * sc->conv_per_thread; /* (rows, n_in) */
    int rows = lin_conv_rows(sc, l->n_in);
    for (int r0 = j0; r0 < j1; r0 += rows) {
        int r1 = r0 + rows < j1 ? r0 + rows : j1;
        for (int r = r0; r < r1; r++)
            as_bf16_to_f32_n(wf + (size_t)(r - r0) * l->n_in, l->wbf + (size_t)r * l->n_in, (size_t)l->n_in);
        linear_cols_f32(l, wf, (size_t)l->n_in, x, T, y, r0, r1, NULL);
    }
}

/* Runs fn(job, c0, c1, tid) over the columns [0, n) of a product of `work` multiply-adds:
 * on the calling thread when small, else in blocks of a multiple of 16 columns, 2 per
 * thread, handed out dynamically (a thread the OS preempts delays only its block). With
 * t_fixed, at most FIXED_BLOCKS blocks whose bounds depend on n only (sgemm's sums over a
 * block of columns can change in the last bit with the block's width), each a multiple
 * of 64 columns but the last (the x W kernel's tile: 96-column blocks made it 1.4x
 * slower). */
#define FIXED_BLOCKS 8
typedef void (*cols_fn)(const void *job, int c0, int c1, int tid);
typedef struct {
    cols_fn fn;
    const void *job;
    int n, chunk;
} cols_run;

static void cols_task(void *ctx, int b, int tid) {
    const cols_run *c = ctx;
    int c0 = b * c->chunk, c1 = c0 + c->chunk < c->n ? c0 + c->chunk : c->n;
    c->fn(c->job, c0, c1, tid);
}

static void run_cols(cols_fn fn, const void *job, int n, double work) {
    int nt = t_threads;
    if (t_fixed) {
        int chunk = ((n + FIXED_BLOCKS - 1) / FIXED_BLOCKS + 63) & ~63, nb = (n + chunk - 1) / chunk;
        cols_run c = {fn, job, n, chunk};
        if (nt <= 1)
            for (int b = 0; b < nb; b++) cols_task(&c, b, 0);
        else
            as_parallel_for(nb, nt, cols_task, &c);
        return;
    }
    if (nt <= 1 || work < 2.0e6 || n < 32 * nt) {
        fn(job, 0, n, 0);
        return;
    }
    int nb = 2 * nt, chunk = ((n + nb - 1) / nb + 15) & ~15;
    cols_run c = {fn, job, n, chunk};
    as_parallel_for((n + chunk - 1) / chunk, nt, cols_task, &c);
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

/* Values per block of a parallel rounding to BF16 (a few microseconds each). */
#define ROUND_MIN_VALUES 16384

/* dst[i] = BF16 of src[i], i < n, split between the pass's threads (a product's input is
 * rounded once and read by every thread). */
typedef struct {
    uint16_t *dst;
    const float *src;
} round_job;

static void round_range(void *ctx, size_t lo, size_t hi) {
    const round_job *r = ctx;
    as_f32_to_bf16_n(r->dst + lo, r->src + lo, hi - lo);
}

static void round_bf16_par(uint16_t *dst, const float *src, size_t n) {
    round_job r = {dst, src};
    parallel_range(n, ROUND_MIN_VALUES, round_range, &r);
}

/* A product of a pass: the map, its operands and the caller's scratch (t_lin is
 * thread-local, so the pool threads get it here). */
typedef struct {
    const lin_t *l;
    const float *x, *dy; /* forward input (T, n_in); output gradient (T, n_out) */
    const uint16_t *xb;  /* the BF16 input (forward) or dy (backward) at precision bf16, else NULL;
                            for dW, the transposed left operand (rows of dW, T) */
    const uint16_t *bb;  /* dW at precision bf16: the right operand (T, columns of dW) */
    float *y;            /* forward output (T, n_out), dx (T, n_in) or dW */
    float *db;
    int T, accumulate;
    lin_scratch sc;
} lin_job;

static void linear_fn(const void *job, int c0, int c1, int tid) {
    const lin_job *j = job;
    linear_cols(j->l, j->x, j->xb, j->T, j->y, c0, c1, &j->sc, tid);
}

/* Up to LIN_N_MAX maps reading one input, their output columns laid end to end. */
#define LIN_N_MAX 4
typedef struct {
    lin_job j[LIN_N_MAX];
    int n, first[LIN_N_MAX + 1]; /* map i has the columns [first[i], first[i + 1]) */
} lin_multi;

static void linear_multi_fn(const void *job, int c0, int c1, int tid) {
    const lin_multi *mj = job;
    for (int i = 0; i < mj->n; i++) {
        int a = c0 > mj->first[i] ? c0 : mj->first[i], b = c1 < mj->first[i + 1] ? c1 : mj->first[i + 1];
        if (a < b) linear_fn(&mj->j[i], a - mj->first[i], b - mj->first[i], tid);
    }
}

/* The BF16 input of maps reading x (T, n_in) at precision bf16 (the pass's scratch, rounded
 * here once for all of them), or NULL when none of them computes in BF16. */
static const uint16_t *linear_input_bf16(const lin_t *const *ls, int n, const float *x, int T) {
    int bf = 0;
    for (int i = 0; i < n; i++) bf |= ls[i]->wbf != NULL;
    if (!t_lin.xb || !bf) return NULL;
    round_bf16_par(t_lin.xb, x, (size_t)T * ls[0]->n_in);
    return t_lin.xb;
}

/* ys[i] = x ls[i]^T + b_i for n maps of one input (xb: its BF16 rounding or NULL), their
 * columns one set of blocks for the threads. */
static void linear_run(const lin_t *const *ls, int n, const float *x, const uint16_t *xb, int T, float *const *ys) {
    lin_multi mj = {.n = n};
    double work = 0.0;
    for (int i = 0; i < n; i++) {
        mj.j[i] = (lin_job){.l = ls[i], .x = x, .xb = xb, .y = ys[i], .T = T, .sc = t_lin};
        mj.first[i + 1] = mj.first[i] + ls[i]->n_out;
        work += (double)T * ls[i]->n_out * ls[i]->n_in;
    }
    if (n == 1) run_cols(linear_fn, &mj.j[0], ls[0]->n_out, work);
    else run_cols(linear_multi_fn, &mj, mj.first[n], work);
}

/* y (T, n_out) = x (T, n_in) W^T + b. Threads split the output columns, each
 * running a single-threaded product on its slice of W, so every weight is read once. */
void op_linear(const lin_t *l, const float *x, int T, float *y) {
    const lin_t *ls[1] = {l};
    float *ys[1] = {y};
    linear_run(ls, 1, x, linear_input_bf16(ls, 1, x, T), T, ys);
}

void op_linear_n(const lin_t *const *ls, int n, const float *x, int T, float *const *ys) {
    AS_ASSERT(n >= 1 && n <= LIN_N_MAX);
    for (int i = 1; i < n; i++) AS_ASSERT(ls[i]->n_in == ls[0]->n_in);
    linear_run(ls, n, x, linear_input_bf16(ls, n, x, T), T, ys);
}

typedef struct {
    const ln_t *ln;
    float eps;
    int add_one;
    float *x;
} ln_job;

static void layernorm_rows(void *ctx, size_t lo, size_t hi) {
    const ln_job *j = ctx;
    float *r = j->x + lo * (size_t)j->ln->n;
    op_layernorm_fwd(r, NULL, NULL, r, j->ln->g, j->ln->b, (int)(hi - lo), j->ln->n, j->eps);
}

void op_layernorm(const ln_t *ln, float eps, float *x, int T) {
    ln_job j = {ln, eps, 0, x};
    parallel_range((size_t)T, 8, layernorm_rows, &j);
}

static void rmsnorm_rows(void *ctx, size_t lo, size_t hi) {
    const ln_job *j = ctx;
    float *r = j->x + lo * (size_t)j->ln->n;
    op_rmsnorm_fwd(r, NULL, r, j->ln->g, (int)(hi - lo), j->ln->n, j->eps, j->add_one);
}

void op_rmsnorm(const ln_t *ln, float eps, int add_one, float *x, int T) {
    ln_job j = {ln, eps, add_one, x};
    parallel_range((size_t)T, 8, rmsnorm_rows, &j);
}

typedef struct {
    as_act a;
    float *x;
    const float *src;
    uint16_t *xb; /* act / glu: also round the result to BF16 here, or NULL */
} elem_job;

/* Values an activation pass rounds to BF16 right after computing them (in L1). */
#define ACT_ROUND_STEP 4096

/* x[lo, hi) = act(x) (src NULL) or act(x) * src, then xb[lo, hi) its BF16 rounding when
 * asked for, ACT_ROUND_STEP values at a time. */
static void act_or_glu_range(void *ctx, size_t lo, size_t hi) {
    const elem_job *j = ctx;
    for (size_t a = lo; a < hi; a += ACT_ROUND_STEP) {
        size_t b = a + ACT_ROUND_STEP < hi ? a + ACT_ROUND_STEP : hi;
        if (j->src) op_glu_fwd(j->a, j->x + a, j->x + a, j->src + a, b - a);
        else op_act_fwd(j->a, j->x + a, j->x + a, b - a);
        if (j->xb) as_f32_to_bf16_n(j->xb + a, j->x + a, b - a);
    }
}

void op_act(as_act a, float *x, size_t n) {
    elem_job j = {a, x, NULL, NULL};
    parallel_range(n, 16384, act_or_glu_range, &j);
}

void op_glu(as_act a, float *gate, const float *up, size_t n) {
    elem_job j = {a, gate, up, NULL};
    parallel_range(n, 16384, act_or_glu_range, &j);
}

void op_act_linear(as_act a, float *x, const float *up, const lin_t *l, int T, float *y) {
    size_t n = (size_t)T * l->n_in;
    uint16_t *xb = t_lin.xb && l->wbf ? t_lin.xb : NULL; /* the product's BF16 input, rounded by the pass */
    elem_job j = {a, x, up, xb};
    parallel_range(n, 16384, act_or_glu_range, &j);
    const lin_t *ls[1] = {l};
    float *ys[1] = {y};
    linear_run(ls, 1, x, xb, T, ys);
}

static void add_range(void *ctx, size_t lo, size_t hi) { /* elem_job: x += src */
    const elem_job *j = ctx;
    for (size_t i = lo; i < hi; i++) j->x[i] += j->src[i];
}

void op_add(float *y, const float *x, size_t n) {
    elem_job j = {ACT_RELU, y, x, NULL};
    parallel_range(n, 16384, add_range, &j);
}


void model_par_begin(int nthreads, float *conv, size_t conv_per_thread, uint16_t *xb, par_state *saved) {
    saved->threads = t_threads;
    saved->fixed = t_fixed;
    saved->blas_threads = openblas_get_num_threads();
    saved->conv = t_lin.conv;
    saved->conv_per_thread = t_lin.conv_per_thread;
    saved->xb = t_lin.xb;
    saved->dyb = t_lin.dyb;
    saved->dyb_cap = t_lin.dyb_cap;
    saved->dwb = t_lin.dwb;
    saved->dwb_cap = t_lin.dwb_cap;
    t_threads = nthreads;
    t_fixed = 0;
    t_lin = (lin_scratch){conv, conv_per_thread, xb, NULL, 0, NULL, 0};
    openblas_set_num_threads(1);
}

void model_par_bf16_dx(uint16_t *dyb, size_t cap) {
    t_lin.dyb = dyb;
    t_lin.dyb_cap = dyb ? cap : 0;
}

void model_par_bf16_dw(uint16_t *dwb, size_t cap) {
    t_lin.dwb = dwb;
    t_lin.dwb_cap = dwb ? cap : 0;
}

void model_par_fixed_blocks(void) { t_fixed = 1; }

void model_par_end(const par_state *saved) {
    t_threads = saved->threads;
    t_fixed = saved->fixed;
    t_lin = (lin_scratch){saved->conv,    saved->conv_per_thread, saved->xb, saved->dyb,
                          saved->dyb_cap, saved->dwb,             saved->dwb_cap};
    openblas_set_num_threads(saved->blas_threads);
}

int model_par_threads(void) { return t_threads; }

/* dx[:, i0:i1] (+)= dy W[:, i0:i1] on pool thread tid. At precision bf16 (dyb: dy in
 * BF16): BF16 dy x BF16 W, F32 sums (core/gemm_bf16.c). F32 weights: for few rows the
 * unpacked kernels (core/gemm_small.c), else one sgemm (GPT-2's Conv1D [in, out] layout:
 * rows i0..i1 of W, transposed). BF16 weights in the mapping:
 * lin_conv_rows rows of W[:, i0:i1] widened at a time, each a rank-rows update. */
static void linear_dx_cols(const lin_t *l, const float *dy, const uint16_t *dyb, int T, float *dx, int accumulate,
                           int i0, int i1, const lin_scratch *sc, int tid) {
    int n = i1 - i0, No = l->n_out;
    float beta = accumulate ? 1.0f : 0.0f;
    if (dyb) {
        as_gemm_bf16_xw(T, n, No, dyb, (size_t)No, l->wbf + i0, (size_t)l->n_in, dx + i0, (size_t)l->n_in, accumulate,
                        sc->conv + (size_t)tid * sc->conv_per_thread);
        return;
    }
    if (l->w && l->in_out && T <= AS_GEMM_SMALL_MAX_ROWS && as_gemm_small_ok()) { /* dy (T, No) W[i0:i1]^T */
        as_gemm_small_xwt(T, n, No, dy, (size_t)No, l->w + (size_t)i0 * l->ldw, (size_t)l->ldw, dx + i0,
                          (size_t)l->n_in, accumulate);
        return;
    }
    if (l->w && !l->in_out && T <= AS_GEMM_SMALL_XW_MAX_ROWS && as_gemm_small_xw_ok()) { /* dy (T, No) W[:, i0:i1] */
        as_gemm_small_xw(T, n, No, dy, (size_t)No, l->w + i0, (size_t)l->ldw, dx + i0, (size_t)l->n_in, accumulate);
        return;
    }
    if (l->w && l->in_out) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, n, No, 1.0f, dy, No, l->w + (size_t)i0 * l->ldw,
                    l->ldw, beta, dx + i0, l->n_in);
        return;
    }
    if (l->w) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, n, No, 1.0f, dy, No, l->w + i0, l->ldw, beta,
                    dx + i0, l->n_in);
        return;
    }
    float *wf = sc->conv + (size_t)tid * sc->conv_per_thread; /* (rows, n) */
    int rows = lin_conv_rows(sc, n);
    for (int r0 = 0; r0 < No; r0 += rows) {
        int r1 = r0 + rows < No ? r0 + rows : No;
        for (int r = r0; r < r1; r++)
            as_bf16_to_f32_n(wf + (size_t)(r - r0) * n, l->wbf + (size_t)r * l->n_in + i0, (size_t)n);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, n, r1 - r0, 1.0f, dy + r0, No, wf, n,
                    r0 || accumulate ? 1.0f : 0.0f, dx + i0, l->n_in);
    }
}

static void linear_dx_fn(const void *job, int c0, int c1, int tid) {
    const lin_job *j = job;
    linear_dx_cols(j->l, j->dy, j->xb, j->T, j->y, j->accumulate, c0, c1, &j->sc, tid);
}

void op_linear_dx(const lin_t *l, const float *dy, int T, float *dx, int accumulate) {
    const uint16_t *dyb = NULL;
    if (t_lin.dyb && l->wbf && (size_t)T * l->n_out <= t_lin.dyb_cap) { /* wbf: (n_out, n_in) in either layout */
        round_bf16_par(t_lin.dyb, dy, (size_t)T * l->n_out); /* rounded once, shared by the threads */
        dyb = t_lin.dyb;
    }
    lin_job j = {.l = l, .dy = dy, .xb = dyb, .y = dx, .T = T, .accumulate = accumulate, .sc = t_lin};
    run_cols(linear_dx_fn, &j, l->n_in, (double)T * l->n_out * l->n_in);
}

/* dW (+)= the weight gradient of y = x W^T (+ b): nn.Linear dW (n_out, n_in) += dy^T x,
 * Conv1D dW (n_in, n_out) += x^T dy, each thread a block of dW's rows (sums over the T
 * rows in one product per block, so no result depends on the thread count); db (n_out)
 * += the column sums of dy, rows in order. At precision bf16 (t_lin.dwb set and the map
 * has BF16 weights) both operands are rounded to BF16 once, the left one transposed to
 * (rows of dW, T), and multiplied with F32 sums (core/gemm_bf16.c), as torch.autocast's
 * BF16 weight gradients; else F32 sgemm. */
static void linear_dw_fn(const void *job, int r0, int r1, int tid) {
    const lin_job *j = job;
    const lin_t *l = j->l;
    int N = l->in_out ? l->n_out : l->n_in;
    if (j->bb) {
        as_gemm_bf16_xw(r1 - r0, N, j->T, j->xb + (size_t)r0 * j->T, (size_t)j->T, j->bb, (size_t)N,
                        j->y + (size_t)r0 * N, (size_t)N, 1, j->sc.conv + (size_t)tid * j->sc.conv_per_thread);
        return;
    }
    if (l->in_out)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, l->n_out, j->T, 1.0f, j->x + r0, l->n_in, j->dy,
                    l->n_out, 1.0f, j->y + (size_t)r0 * l->n_out, l->n_out);
    else
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1 - r0, l->n_in, j->T, 1.0f, j->dy + r0, l->n_out, j->x,
                    l->n_in, 1.0f, j->y + (size_t)r0 * l->n_in, l->n_in);
}

void op_linear_dw(const lin_t *l, const float *x, const float *dy, int T, float *dw, float *db) {
    if (db)
        for (int t = 0; t < T; t++)
            for (int j = 0; j < l->n_out; j++) db[j] += dy[(size_t)t * l->n_out + j];
    if (!dw || (t_lin.dwb && model_dw_stage_put(l, x, dy, T, dw))) return;
    int rows = l->in_out ? l->n_in : l->n_out, cols = l->in_out ? l->n_out : l->n_in;
    lin_job j = {.l = l, .x = x, .dy = dy, .y = dw, .T = T, .sc = t_lin};
    if (t_lin.dwb && l->wbf && (size_t)T * (rows + cols) <= t_lin.dwb_cap &&
        as_gemm_bf16_xw_scratch(cols) <= t_lin.conv_per_thread) {
        uint16_t *at = t_lin.dwb, *bb = t_lin.dwb + (size_t)rows * T; /* (rows, T), (T, cols) */
        const float *left = l->in_out ? x : dy, *right = l->in_out ? dy : x;
        as_f32_to_bf16_t(at, (size_t)T, left, (size_t)rows, T, rows);
        as_f32_to_bf16_n(bb, right, (size_t)T * cols);
        j.xb = at;
        j.bb = bb;
    }
    run_cols(linear_dw_fn, &j, rows, (double)T * l->n_out * l->n_in);
}
