/* grad_groups.c — fixed groups of a batch's sequences on the thread pool, their gradients
 * summed in group order (see grad_groups.h). */
#include "train/grad_groups.h"
#include "core/pool.h"

#include <string.h>

int grad_groups_count(int n_seq) { return n_seq < GRAD_GROUPS ? (n_seq > 0 ? n_seq : 0) : GRAD_GROUPS; }

void grad_groups_range(int n_seq, int G, int j, int *lo, int *hi) {
    *lo = (int)((long long)n_seq * j / G);
    *hi = (int)((long long)n_seq * (j + 1) / G);
}

as_status grad_groups_init(const as_model *m, int n, grad_groups *gg, as_error *err) {
    memset(gg, 0, sizeof *gg);
    gg->buf = as_calloc((size_t)(n > 0 ? n : 1), sizeof *gg->buf);
    if (!gg->buf) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (; gg->n < n; gg->n++) {
        as_status s = model_grads_init(m, &gg->buf[gg->n], err);
        if (s) {
            grad_groups_free(gg);
            return s;
        }
    }
    return AS_OK;
}

void grad_groups_free(grad_groups *gg) {
    if (!gg) return;
    for (int i = 0; i < gg->n; i++) model_grads_free(&gg->buf[i]);
    free(gg->buf);
    model_dw_stage_free(gg->stage);
    memset(gg, 0, sizeof *gg);
}

typedef struct {
    grad_group_fn fn;
    void *ctx;
    grad_groups *gg;
    model_grads *g;
    int j0, k;
    int *fail; /* (k) */
} round_job;

static void group_task(void *ctx, int i, int tid) {
    (void)tid;
    round_job *r = ctx;
    r->fail[i] = r->fn(r->ctx, r->j0 + i, &r->gg->buf[i]);
}

/* 1 when x (n) holds only +0.0 (all bits zero). */
static int all_zero_bits(const float *x, size_t n) {
    uint32_t any = 0;
    for (size_t e = 0; e < n; e++) {
        uint32_t u;
        memcpy(&u, x + e, sizeof u);
        any |= u;
    }
    return any == 0;
}

/* Elements [lo, hi) of each block: g += buf_0 + ... + buf_{k-1}, in that order; buffers
 * zeroed. Runs of ZERO_RUN floats that are all +0.0 in a buffer (most rows of the
 * embedding tables: a group looks up few tokens) are neither added nor cleared; adding
 * +0.0 would only turn a -0.0 of g into +0.0, the same at any thread count either way. */
#define ADD_BLOCK 16384
#define ZERO_RUN 64
static void add_task(void *ctx, int b, int tid) {
    (void)tid;
    round_job *r = ctx;
    size_t n = r->g->n, lo = (size_t)b * ADD_BLOCK, hi = lo + ADD_BLOCK < n ? lo + ADD_BLOCK : n;
    float *g = r->g->block;
    for (int i = 0; i < r->k; i++) {
        float *x = r->gg->buf[i].block;
        for (size_t c0 = lo; c0 < hi; c0 += ZERO_RUN) {
            size_t c1 = c0 + ZERO_RUN < hi ? c0 + ZERO_RUN : hi;
            if (all_zero_bits(x + c0, c1 - c0)) continue;
            for (size_t e = c0; e < c1; e++) g[e] += x[e];
            memset(x + c0, 0, (c1 - c0) * sizeof(float));
        }
    }
}

as_status grad_groups_stage(grad_groups *gg, const as_model *m, int n_seq, int T, as_error *err) {
    if (!gg->n || model_dw_stage_fits(gg->stage, m, &gg->buf[0], n_seq, T, gg->n)) return AS_OK;
    model_dw_stage_free(gg->stage);
    gg->stage = NULL;
    return model_dw_stage_init(m, &gg->buf[0], n_seq, T, gg->n, &gg->stage, err);
}

int grad_groups_run(grad_groups *gg, int G, model_grads *g, grad_group_fn fn, void *ctx) {
    int fail[GRAD_GROUPS];
    int nt = gg->n < 1 ? 1 : gg->n > GRAD_GROUPS ? GRAD_GROUPS : gg->n;
    for (int j0 = 0; j0 < G; j0 += nt) {
        int k = G - j0 < nt ? G - j0 : nt;
        round_job r = {fn, ctx, gg, g, j0, k, fail};
        as_parallel_for(k, k, group_task, &r);
        for (int i = 0; i < k; i++)
            if (fail[i]) {
                model_dw_stage_flush(gg->stage, NULL, 0);
                return fail[i];
            }
        as_parallel_for((int)((g->n + ADD_BLOCK - 1) / ADD_BLOCK), k, add_task, &r);
    }
    model_dw_stage_flush(gg->stage, g, nt);
    return 0;
}
