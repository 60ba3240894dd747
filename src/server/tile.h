/* tile.h — pooled blocks ("tiles") of one head's attention for the long-input heat map:
 * rows [i0, i1) x columns [j0, j1) of a head's T x T attention, pooled onto at most
 * n x n cells, each cell the max and the mean of the weights it covers. Rows come from
 * the run's dense capture when it has one, else are recomputed from the captured q and
 * k (as_run_attention_rows) a few rows at a time, so a tile never needs the T x T
 * matrix: its memory is R x T floats per thread (R = SRV_TILE_ROWS) whatever the span.
 * Optionally each row is first renormalised with some keys (the attention sink)
 * excluded. It only computes; the route (server/tile_api.c) parses the request.
 *
 * Blocks partition the span as srv_maxpool does (server/maxpool.h): row block b covers
 * rows i0 + [floor(b*(i1-i0)/Pr), floor((b+1)*(i1-i0)/Pr)), Pr = min(n, i1 - i0), and
 * likewise for columns; with n >= the span, the cells are the weights themselves.
 */
#ifndef AS_SRV_TILE_H
#define AS_SRV_TILE_H

#include "attnscope.h"

#define SRV_TILE_MAX 256       /* cells per side of one tile */
#define SRV_TILE_ROWS 32       /* attention rows computed at once, per thread */
#define SRV_TILE_MAX_EXCLUDE 16 /* keys a request may exclude */
/* Admission of the tile route (server/tile_api.c): tile requests computing at once (each
 * on --threads threads; more are answered 429 with Retry-After), tiles one request may
 * ask for (layers x heads; more: 413) and the bytes of its pooled cells, max and mean at
 * f32, which the server holds while it answers (more: 413). */
#define SRV_TILE_MAX_ACTIVE 2
/* One-row requests of one head (rows=a-a: one softmax row, O(T · Dh), the long map's exact
 * weight under the pointer) are admitted apart from the others, this many at once. */
#define SRV_TILE_MAX_ROW_ACTIVE 8
#define SRV_TILE_MAX_PER_REQUEST 1024
#define SRV_TILE_MAX_RESPONSE_BYTES (16u << 20)

typedef struct {
    int layer, head;       /* absolute */
    int i0, i1, j0, j1;    /* rows and columns, half-open, inside [0, T) */
    int n;                 /* at most n x n cells, 1 <= n <= SRV_TILE_MAX */
    int exclude[SRV_TILE_MAX_EXCLUDE]; /* (n_exclude) keys left out of each row, renormalised */
    int n_exclude;
} srv_tile_req;

/* Cells per side: rows min(n, i1 - i0), columns min(n, j1 - j0). */
int srv_tile_rows(const srv_tile_req *q);
int srv_tile_cols(const srv_tile_req *q);

/* Computes the tile q of run r (model m) into mx and mean, each (rows, cols) row-major:
 * the largest and the mean weight of each block. With keys excluded, each attention row
 * p_i is first replaced by p_ij / sum_{k not excluded} p_ik for kept keys and 0 for
 * excluded ones (a row whose kept weights sum to 0 becomes 0). threads >= 1 split the
 * row blocks. Borrows m and r (the run must stay alive), writes mx and mean.
 * Errors: AS_ERR_INPUT when the head's attention was neither captured nor
 * recomputable (no q/k); AS_ERR_INTERNAL when out of memory. The request's ranges are
 * the caller's to check (ASSERT). */
as_status srv_tile_compute(const as_model *m, const as_run *r, const srv_tile_req *q, int threads, float *mx,
                           float *mean, as_error *err);

#endif
