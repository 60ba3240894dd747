/* dw_stage.c — the layers' weight gradients of a chunk of sequences at precision bf16 in
 * one product per linear map. A backward of one sequence computes dW += dy^T x with
 * K = its T tokens: each dW (for BERT-base up to 9 MB) is read and written once per
 * sequence for few products per element, so at BF16's product rate the weight gradients
 * are bound by memory. Staged, each sequence's backward only rounds its two operands to
 * BF16 into its own columns of the map's stage (dy^T: (rows of dW, n_seq T); x: (n_seq T,
 * columns of dW)); model_dw_stage_flush then adds one product per map with K = n_seq T
 * into the batch's gradient, split by rows of dW over the threads. Each element's sum runs
 * over the sequences in order, whatever the thread count or the groups the sequences ran
 * in, so results stay the same at any thread count.
 * Staged maps: the layers' q, k, v, o, ff1, up and ff2 with BF16 weights and a gradient
 * slot; the heads' products (other row counts) run at once. A map a sequence did not stage
 * contributes nothing for that sequence (its columns are zeroed at the flush).
 * What it does not: F32 weight gradients, sequences of different lengths in one stage.
 */
#include "model/model.h"
#include "core/gemm_bf16.h"
#include "core/pool.h"

#include <string.h>

/* Stage memory for one chunk at most; a larger chunk runs its products per sequence. */
#define DW_STAGE_BUDGET ((size_t)1536 << 20)
/* Rows of dW per task of the flush. */
#define DW_ROWS 256

typedef struct {
    const lin_t *l;
    int rows, cols;  /* of dW: (n_out, n_in), Conv1D (n_in, n_out) */
    size_t off;      /* dW's offset in a model_grads block of the layout */
    uint16_t *a, *b; /* (rows, K) and (K, cols), K = n_seq T; sequence s: columns / rows [s T, s T + T) */
    uint8_t *done;   /* (n_seq) 1 where sequence s staged its operands */
} dw_map;

struct model_dw_stage {
    const as_model *m;
    int n_seq, T, n_map, threads;
    size_t n_grad;  /* floats of the layout the offsets refer to */
    dw_map *map;    /* (n_map) */
    float *block;   /* owns the flush's scratch ((threads, per_thread) floats first), the
                       tasks and every map's a, b and done; cap bytes (as_large_get) */
    size_t per_thread, cap;
    int *task_map, *task_row; /* the flush's tasks: a map and its first row of dW */
};

/* The staged sequence of the calling thread (model_dw_stage_seq). */
static _Thread_local struct {
    model_dw_stage *s;
    int seq;
    const float *base;
} t_seq;

/* The count of m's stageable maps (BF16 weights and a gradient slot in layout g); with
 * out non-NULL, each described into out. */
static int maps_visit(const as_model *m, const model_grads *g, dw_map *out) {
    int n = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const layer_w *w = &m->layers[l];
        const layer_grad *lg = &g->layers[l];
        const lin_t *ls[7] = {&w->q, &w->k, &w->v, &w->o, &w->ff1, &w->up, &w->ff2};
        float *const gs[7] = {lg->q.w, lg->k.w, lg->v.w, lg->o.w, lg->ff1.w, lg->up.w, lg->ff2.w};
        for (int i = 0; i < 7; i++) {
            if (!ls[i]->wbf || !gs[i]) continue;
            if (out)
                out[n] = (dw_map){.l = ls[i],
                                  .rows = ls[i]->in_out ? ls[i]->n_in : ls[i]->n_out,
                                  .cols = ls[i]->in_out ? ls[i]->n_out : ls[i]->n_in,
                                  .off = (size_t)(gs[i] - g->block)};
            n++;
        }
    }
    return n;
}

as_status model_dw_stage_init(const as_model *m, const model_grads *layout, int n_seq, int T, int threads,
                              model_dw_stage **out, as_error *err) {
    *out = NULL;
    if (m->precision != AS_PRECISION_BF16 || n_seq < 2 || T < 1) return AS_OK;
    int nm = maps_visit(m, layout, NULL), nt = threads > 0 ? threads : 1;
    if (!nm) return AS_OK;
    as_status st = AS_OK;
    model_dw_stage *s = as_calloc(1, sizeof *s);
    dw_map *map = as_calloc((size_t)nm, sizeof *map);
    if (!s || !map) {
        st = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    maps_visit(m, layout, map);
    size_t K = (size_t)n_seq * T, vals = 0, widest = 0, tasks = 0;
    for (int i = 0; i < nm; i++) {
        vals += K * ((size_t)map[i].rows + map[i].cols);
        if ((size_t)map[i].cols > widest) widest = (size_t)map[i].cols;
        tasks += (size_t)(map[i].rows + DW_ROWS - 1) / DW_ROWS;
    }
    size_t per = as_gemm_bf16_xw_scratch((int)widest), cap = 0;
    size_t bytes = (size_t)nt * per * sizeof(float) + 2 * tasks * sizeof(int) + vals * sizeof(uint16_t) +
                   (size_t)nm * n_seq;
    if (bytes > DW_STAGE_BUDGET) goto cleanup; /* per-sequence products instead */
    float *block = as_large_get(bytes, &cap); /* scratch floats, task ints, BF16 values, done bytes */
    if (!block) {
        st = as_err_set(err, AS_ERR_INTERNAL, "out of memory for the staged weight gradients (%zu MB)", bytes >> 20);
        goto cleanup;
    }
    int *task = (int *)(block + (size_t)nt * per);
    uint16_t *p = (uint16_t *)(task + 2 * tasks);
    for (int i = 0; i < nm; i++) {
        map[i].a = p, p += K * (size_t)map[i].rows;
        map[i].b = p, p += K * (size_t)map[i].cols;
    }
    uint8_t *d = (uint8_t *)p;
    memset(d, 0, (size_t)nm * n_seq);
    for (int i = 0; i < nm; i++) map[i].done = d + (size_t)i * n_seq;
    *s = (model_dw_stage){.m = m, .n_seq = n_seq, .T = T, .n_map = nm, .threads = nt, .n_grad = layout->n,
                          .map = map, .block = block, .per_thread = per, .cap = cap,
                          .task_map = task, .task_row = task + tasks};
    *out = s;
    return AS_OK;
cleanup: /* an error, or nothing staged */
    free(s);
    free(map);
    return st;
}

void model_dw_stage_free(model_dw_stage *s) {
    if (!s) return;
    as_large_put(s->block, s->cap);
    free(s->map);
    free(s);
}

int model_dw_stage_fits(const model_dw_stage *s, const as_model *m, const model_grads *layout, int n_seq, int T,
                        int threads) {
    return s && s->m == m && m->precision == AS_PRECISION_BF16 && s->n_grad == layout->n && s->n_seq == n_seq &&
           s->T == T && s->threads >= threads;
}

void model_dw_stage_seq(model_dw_stage *s, int seq, const model_grads *buf) {
    t_seq.s = s && buf && seq >= 0 && seq < s->n_seq && buf->n == s->n_grad ? s : NULL;
    t_seq.seq = seq;
    t_seq.base = buf ? buf->block : NULL;
}

int model_dw_stage_put(const lin_t *l, const float *x, const float *dy, int T, const float *dw) {
    model_dw_stage *s = t_seq.s;
    if (!s || T != s->T || !dw) return 0;
    dw_map *e = NULL;
    for (int i = 0; i < s->n_map && !e; i++)
        if (s->map[i].l == l) e = &s->map[i];
    if (!e || dw != t_seq.base + e->off) return 0;
    size_t K = (size_t)s->n_seq * T, k0 = (size_t)t_seq.seq * T;
    const float *left = l->in_out ? x : dy, *right = l->in_out ? dy : x;
    as_f32_to_bf16_t(e->a + k0, K, left, (size_t)e->rows, T, e->rows);
    as_f32_to_bf16_n(e->b + k0 * e->cols, right, (size_t)T * e->cols);
    e->done[t_seq.seq] = 1;
    return 1;
}

typedef struct {
    const model_dw_stage *s;
    float *g;
} flush_job;

static void flush_task(void *ctx, int i, int tid) {
    const flush_job *j = ctx;
    const model_dw_stage *s = j->s;
    const dw_map *e = &s->map[s->task_map[i]];
    int r0 = s->task_row[i], r1 = r0 + DW_ROWS < e->rows ? r0 + DW_ROWS : e->rows, K = s->n_seq * s->T;
    as_gemm_bf16_xw(r1 - r0, e->cols, K, e->a + (size_t)r0 * K, (size_t)K, e->b, (size_t)e->cols,
                    j->g + e->off + (size_t)r0 * e->cols, (size_t)e->cols, 1,
                    s->block + (size_t)tid * s->per_thread);
}

void model_dw_stage_flush(model_dw_stage *s, model_grads *g, int threads) {
    if (!s) return;
    if (!g || g->n != s->n_grad) { /* discard */
        for (int i = 0; i < s->n_map; i++) memset(s->map[i].done, 0, (size_t)s->n_seq);
        return;
    }
    size_t K = (size_t)s->n_seq * s->T;
    int n_task = 0;
    for (int i = 0; i < s->n_map; i++) {
        dw_map *e = &s->map[i];
        int any = 0;
        for (int q = 0; q < s->n_seq; q++) any |= e->done[q];
        for (int q = 0; any && q < s->n_seq; q++) /* a sequence that did not stage this map adds nothing */
            if (!e->done[q]) {
                for (int r = 0; r < e->rows; r++) memset(e->a + r * K + (size_t)q * s->T, 0, (size_t)s->T * 2);
                memset(e->b + (size_t)q * s->T * e->cols, 0, (size_t)s->T * e->cols * 2);
            }
        for (int r = 0; any && r < e->rows; r += DW_ROWS) s->task_map[n_task] = i, s->task_row[n_task++] = r;
        memset(e->done, 0, (size_t)s->n_seq);
    }
    flush_job j = {s, g->block};
    int nt = threads > 0 ? threads : 1;
    as_parallel_for(n_task, nt < s->threads ? nt : s->threads, flush_task, &j);
}
