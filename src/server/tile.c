/* tile.c — pooled blocks of one head's attention, dense or recomputed (see tile.h). */
#include "tile.h"
#include "maxpool.h" /* srv_maxpool_start: the same block boundaries as the thumbnails */

#include <math.h>
#include <pthread.h>
#include <stdio.h> /* AS_ASSERT */
#include <stdlib.h>
#include <string.h>

int srv_tile_rows(const srv_tile_req *q) { return srv_maxpool_size(q->i1 - q->i0, q->n); }
int srv_tile_cols(const srv_tile_req *q) { return srv_maxpool_size(q->j1 - q->j0, q->n); }

typedef struct {
    const as_model *m;
    const as_run *r;
    const srv_tile_req *q;
    const float *dense; /* (T, T) the captured attention, or NULL: recompute */
    int causal;         /* the model's rows are 0 after their own key */
    int Pr, Pc, b0, b1; /* this job's row blocks [b0, b1) */
    float *mx, *mean;   /* (Pr, Pc) shared; each job writes its own rows */
    as_status st;
    as_error err;
} tile_job;

/* Renormalises row p (T) over the keys not in q's exclude list; excluded keys get 0. */
static void renormalise(float *p, int T, const srv_tile_req *q) {
    for (int e = 0; e < q->n_exclude; e++) p[q->exclude[e]] = 0.0f;
    double kept = 0.0; /* summed directly, not 1 - sum(excluded): exact when the sink holds ~all */
    for (int j = 0; j < T; j++) kept += (double)p[j];
    for (int j = 0; j < T; j++) p[j] = kept > 0.0 ? (float)((double)p[j] / kept) : 0.0f;
}

/* Resets a row block's column-wise max and sum over the W columns. The max starts at 0,
 * not -inf: every weight is >= 0, so a column left out (a causal row's later keys, all 0)
 * counts as its weight 0. */
static void acc_reset(float *cmax, double *csum, int W) {
    for (int j = 0; j < W; j++) {
        cmax[j] = 0.0f;
        csum[j] = 0.0;
    }
}

/* Row block b (rows [r0, r1)) done: each column block's max and mean into the job's row b. */
static void block_out(tile_job *jb, int b, int r0, int r1, const float *cmax, const double *csum, int W) {
    for (int bj = 0; bj < jb->Pc; bj++) {
        int k0 = srv_maxpool_start(bj, W, jb->Pc), k1 = srv_maxpool_start(bj + 1, W, jb->Pc);
        float m = -INFINITY;
        double sum = 0.0;
        for (int j = k0; j < k1; j++) {
            m = cmax[j] > m ? cmax[j] : m;
            sum += csum[j];
        }
        jb->mx[(size_t)b * (size_t)jb->Pc + (size_t)bj] = m;
        jb->mean[(size_t)b * (size_t)jb->Pc + (size_t)bj] = (float)(sum / ((double)(k1 - k0) * (double)(r1 - r0)));
    }
}

/* Row blocks [b0, b1) of the tile: their rows SRV_TILE_ROWS at a time, whatever the block
 * boundaries (so small blocks share one recomputation), each row added to its block's
 * column-wise max and sum over [j0, j1); a block is pooled over the columns when its last
 * row is in. */
static void *tile_job_run(void *arg) {
    tile_job *jb = arg;
    const srv_tile_req *q = jb->q;
    int T = jb->r->T, W = q->j1 - q->j0, R = q->i1 - q->i0;
    float *rows = malloc(sizeof(float) * (size_t)SRV_TILE_ROWS * (size_t)T), *cmax = malloc(sizeof(float) * (size_t)W);
    double *csum = malloc(sizeof(double) * (size_t)W);
    if (!rows || !cmax || !csum) {
        jb->st = as_err_set(&jb->err, AS_ERR_INTERNAL, "out of memory for a tile");
        goto cleanup;
    }
    int lo = q->i0 + srv_maxpool_start(jb->b0, R, jb->Pr), hi = q->i0 + srv_maxpool_start(jb->b1, R, jb->Pr);
    int b = jb->b0, b_start = lo, b_end = q->i0 + srv_maxpool_start(b + 1, R, jb->Pr);
    acc_reset(cmax, csum, W);
    for (int c0 = lo; c0 < hi; c0 += SRV_TILE_ROWS) {
        int c1 = c0 + SRV_TILE_ROWS < hi ? c0 + SRV_TILE_ROWS : hi;
        if (jb->dense) memcpy(rows, jb->dense + (size_t)c0 * (size_t)T, sizeof(float) * (size_t)(c1 - c0) * (size_t)T);
        else if ((jb->st = as_run_attention_rows(jb->m, jb->r, q->layer, q->head, c0, c1, rows, &jb->err)))
            goto cleanup;
        for (int i = c0; i < c1; i++) {
            float *p = rows + (size_t)(i - c0) * (size_t)T;
            if (q->n_exclude) renormalise(p, T, q);
            /* a causal row's weights after its own key are 0: left out of the max and sum */
            int w_end = jb->causal && i + 1 - q->j0 < W ? i + 1 - q->j0 : W;
            for (int j = 0; j < w_end; j++) {
                float v = p[q->j0 + j];
                cmax[j] = v > cmax[j] ? v : cmax[j];
                csum[j] += (double)v;
            }
            if (i + 1 == b_end) { /* the block's last row */
                block_out(jb, b, b_start, b_end, cmax, csum, W);
                acc_reset(cmax, csum, W);
                b++;
                b_start = b_end;
                b_end = q->i0 + srv_maxpool_start(b + 1, R, jb->Pr);
            }
        }
    }
cleanup:
    free(rows);
    free(cmax);
    free(csum);
    return NULL;
}

as_status srv_tile_compute(const as_model *m, const as_run *r, const srv_tile_req *q, int threads, float *mx,
                           float *mean, as_error *err) {
    AS_ASSERT(q->i0 >= 0 && q->i0 < q->i1 && q->i1 <= r->T && q->j0 >= 0 && q->j0 < q->j1 && q->j1 <= r->T);
    AS_ASSERT(q->n >= 1 && q->n <= SRV_TILE_MAX && q->n_exclude >= 0 && q->n_exclude <= SRV_TILE_MAX_EXCLUDE);
    const float *dense = as_run_attn(r, q->layer, q->head);
    if (!dense && (!as_run_q(r, q->layer, q->head) || !as_run_k(r, q->layer, q->head)))
        return as_err_set(err, AS_ERR_INPUT, "layer %d head %d: neither attention nor q and k were captured",
                          q->layer, q->head);
    int Pr = srv_tile_rows(q), Pc = srv_tile_cols(q);
    if (threads < 1) threads = 1;
    if (threads > Pr) threads = Pr;
    if (threads > 64) threads = 64;
    tile_job jobs[64];
    pthread_t tid[64];
    int started[64] = {0};
    for (int t = 0; t < threads; t++)
        jobs[t] = (tile_job){.m = m, .r = r, .q = q, .dense = dense, .causal = as_model_config(m)->causal, .Pr = Pr,
                             .Pc = Pc, .b0 = Pr * t / threads, .b1 = Pr * (t + 1) / threads, .mx = mx, .mean = mean};
    for (int t = 1; t < threads; t++) started[t] = !pthread_create(&tid[t], NULL, tile_job_run, &jobs[t]);
    tile_job_run(&jobs[0]);
    for (int t = 1; t < threads; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        else tile_job_run(&jobs[t]); /* no thread: run it here */
    }
    for (int t = 0; t < threads; t++)
        if (jobs[t].st) {
            *err = jobs[t].err;
            return jobs[t].st;
        }
    return AS_OK;
}
