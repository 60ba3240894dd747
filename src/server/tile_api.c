/* tile_api.c — the tile, stats and thumbs routes of a cached run (see tile_api.h): parses the
 * query, admits the request (SRV_TILE_MAX_ACTIVE computing at once, one-row requests
 * SRV_TILE_MAX_ROW_ACTIVE apart from them, at most
 * SRV_TILE_MAX_PER_REQUEST tiles and SRV_TILE_MAX_RESPONSE_BYTES of cells: server/tile.h),
 * computes the tiles (server/tile.c) one head after another on the server's forward
 * threads without the forward lock (a tile only reads the run), and replies them whole.
 * It keeps nothing between requests but the count of requests computing. The stats and
 * thumbs routes only read what the forward kept.
 */
#include "tile_api.h"
#include "reply.h"
#include "tensor.h"
#include "tile.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Tile requests computing now, in this process (admission: SRV_TILE_MAX_ACTIVE), and
 * one-row requests of one head, counted apart (SRV_TILE_MAX_ROW_ACTIVE). */
static atomic_int g_tiles_active, g_rows_active;

/* A decimal integer in [lo, hi] (digits only); -1 otherwise. */
static int parse_int(const char *s, int lo, int hi, int *out) {
    if (!s || !*s || strlen(s) > 9 || strspn(s, "0123456789") != strlen(s)) return -1;
    long v = strtol(s, NULL, 10);
    if (v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* "k1,k2,..." (at most SRV_TILE_MAX_EXCLUDE keys in [0, T)) into q; -1 when malformed. */
static int parse_exclude(const char *s, int T, srv_tile_req *q) {
    char buf[16];
    q->n_exclude = 0;
    while (1) {
        size_t n = strcspn(s, ",");
        if (n == 0 || n >= sizeof buf || q->n_exclude == SRV_TILE_MAX_EXCLUDE) return -1;
        memcpy(buf, s, n);
        buf[n] = 0;
        if (parse_int(buf, 0, T - 1, &q->exclude[q->n_exclude++])) return -1;
        if (!s[n]) return 0;
        s += n + 1;
    }
}

/* The heads a tile request asks for: layer=L&head=H (one tile, *multi = 0), or
 * layers=a-b&heads=c-d (every head of the block, *multi = 1); 0, or -1 after a 400. */
static int parse_heads(const as_run *r, const srv_request *rq, int hl[2], int hh[2], int *multi, srv_response *rs) {
    const char *l = reply_query(rq, "layer"), *h = reply_query(rq, "head"), *ls = reply_query(rq, "layers"),
               *hs = reply_query(rq, "heads");
    *multi = ls || hs;
    if (*multi && (l || h)) {
        reply_error(rs, 400, "query: give layer and head (one tile) or layers and heads (a block of heads), not both");
        return -1;
    }
    if (*multi) {
        if (!ls || reply_parse_range(ls, r->L, &hl[0], &hl[1])) {
            reply_error(rs, 400, "query 'layers': expected a or a-b with 0 <= a <= b < %d", r->L);
            return -1;
        }
        if (!hs || reply_parse_range(hs, r->H, &hh[0], &hh[1])) {
            reply_error(rs, 400, "query 'heads': expected a or a-b with 0 <= a <= b < %d", r->H);
            return -1;
        }
        return 0;
    }
    if (parse_int(l, 0, r->L - 1, &hl[0])) {
        reply_error(rs, 400, "query 'layer': expected an integer in [0, %d)", r->L);
        return -1;
    }
    if (parse_int(h, 0, r->H - 1, &hh[0])) {
        reply_error(rs, 400, "query 'head': expected an integer in [0, %d)", r->H);
        return -1;
    }
    hl[1] = hl[0];
    hh[1] = hh[0];
    return 0;
}

/* The tile request of rq's query for run r (q's layer and head are set by the caller);
 * 0, or -1 after setting a 400. */
static int parse_tile(const as_run *r, const srv_request *rq, srv_tile_req *q, int *dt, srv_response *rs) {
    int lo, hi;
    memset(q, 0, sizeof *q);
    const char *n = reply_query(rq, "n"), *x = reply_query(rq, "exclude"), *d = reply_query(rq, "dtype");
    if (reply_parse_range(reply_query(rq, "rows"), r->T, &lo, &hi)) {
        reply_error(rs, 400, "query 'rows': expected a or a-b with 0 <= a <= b < %d", r->T);
        return -1;
    }
    q->i0 = lo;
    q->i1 = hi + 1;
    if (reply_parse_range(reply_query(rq, "cols"), r->T, &lo, &hi)) {
        reply_error(rs, 400, "query 'cols': expected a or a-b with 0 <= a <= b < %d", r->T);
        return -1;
    }
    q->j0 = lo;
    q->j1 = hi + 1;
    q->n = 128;
    if (n && parse_int(n, 1, SRV_TILE_MAX, &q->n)) {
        reply_error(rs, 400, "query 'n': expected an integer in [1, %d]", SRV_TILE_MAX);
        return -1;
    }
    if (x && parse_exclude(x, r->T, q)) {
        reply_error(rs, 400, "query 'exclude': expected 1 to %d comma-separated keys in [0, %d)",
                    SRV_TILE_MAX_EXCLUDE, r->T);
        return -1;
    }
    *dt = d ? srv_tb_dtype_parse(d) : TB_F32;
    if (*dt < 0) {
        reply_error(rs, 400, "query 'dtype': expected f32, f16 or u8");
        return -1;
    }
    return 0;
}

/* Computes the tiles q of heads [hl] x [hh] into buf: max (nt, cells), then mean
 * (nt, cells), nt tiles in layer-major order. */
static as_status compute_tiles(srv_state *s, srv_entry *e, srv_tile_req *q, const int hl[2], const int hh[2],
                               size_t cells, float *buf, as_error *err) {
    size_t nt = (size_t)(hl[1] - hl[0] + 1) * (size_t)(hh[1] - hh[0] + 1), t = 0;
    for (int l = hl[0]; l <= hl[1]; l++)
        for (int h = hh[0]; h <= hh[1]; h++, t++) {
            q->layer = l;
            q->head = h;
            as_status st = srv_tile_compute(s->models[e->model].m, e->run, q, s->threads, buf + t * cells,
                                            buf + (nt + t) * cells, err);
            if (st) return st;
        }
    return AS_OK;
}

void tile_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    const as_run *r = e->run;
    srv_tile_req q;
    int dt, hl[2], hh[2], multi;
    if (parse_heads(r, rq, hl, hh, &multi, rs) || parse_tile(r, rq, &q, &dt, rs)) return;
    int Pr = srv_tile_rows(&q), Pc = srv_tile_cols(&q), nl = hl[1] - hl[0] + 1, nh = hh[1] - hh[0] + 1;
    size_t cells = (size_t)Pr * (size_t)Pc, nt = (size_t)nl * (size_t)nh, bytes = 2 * nt * cells * sizeof(float);
    if (nt > SRV_TILE_MAX_PER_REQUEST) {
        reply_error(rs, 413, "tile: %zu tiles asked for, at most %d per request (SRV_TILE_MAX_PER_REQUEST)", nt,
                    SRV_TILE_MAX_PER_REQUEST);
        return;
    }
    if (bytes > SRV_TILE_MAX_RESPONSE_BYTES) {
        reply_error(rs, 413, "tile: %zu tiles of %d x %d cells are %zu bytes, over the %u of one response "
                    "(SRV_TILE_MAX_RESPONSE_BYTES): ask for fewer heads or a smaller n", nt, Pr, Pc, bytes,
                    SRV_TILE_MAX_RESPONSE_BYTES);
        return;
    }
    /* one row of one head (the long map's exact weight under the pointer) costs one softmax
       row, so whole-head tiles computing never make it wait */
    int one_row = nt == 1 && q.i1 - q.i0 == 1, limit = one_row ? SRV_TILE_MAX_ROW_ACTIVE : SRV_TILE_MAX_ACTIVE;
    atomic_int *active = one_row ? &g_rows_active : &g_tiles_active;
    if (atomic_fetch_add(active, 1) >= limit) {
        atomic_fetch_sub(active, 1);
        reply_error(rs, 429, "tile: %d %s are computing (%s); retry shortly", limit,
                    one_row ? "one-row tile requests" : "tile requests",
                    one_row ? "SRV_TILE_MAX_ROW_ACTIVE" : "SRV_TILE_MAX_ACTIVE");
        rs->retry_after = 1;
        return;
    }
    float *buf = malloc(bytes);
    as_error err = {0};
    as_status st = buf ? compute_tiles(s, e, &q, hl, hh, cells, buf, &err)
                       : as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
    atomic_fetch_sub(active, 1);
    if (st) {
        free(buf);
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "tile: %s", err.msg);
        return;
    }
    const float *parts[2] = {buf, buf + nt * cells};
    srv_tb_tensor t[2];
    const char *names[2] = {"max", "mean"};
    for (int i = 0; i < 2; i++)
        t[i] = multi ? (srv_tb_tensor){.name = names[i], .dtype = (srv_tb_dtype)dt, .ndim = 4, .shape = {nl, nh, Pr, Pc},
                                       .parts = &parts[i], .n_parts = 1, .part_len = nt * cells}
                     : (srv_tb_tensor){.name = names[i], .dtype = (srv_tb_dtype)dt, .ndim = 2, .shape = {Pr, Pc},
                                       .parts = &parts[i], .n_parts = 1, .part_len = cells};
    json_t *ex = json_array();
    for (int i = 0; i < q.n_exclude; i++) json_array_append_new(ex, json_integer(q.exclude[i]));
    /* layer and head: the tile's head, or the block's first one (then layers and heads) */
    json_t *meta = json_pack("{s:s, s:i, s:i, s:i, s:[i,i], s:[i,i], s:[i,i], s:o, s:s}", "run", e->id, "layer", hl[0],
                             "head", hh[0], "tokens", r->T, "rows", q.i0, q.i1 - 1, "cols", q.j0, q.j1 - 1, "pool", Pr,
                             Pc, "exclude", ex, "source", as_run_attn(r, hl[0], hh[0]) ? "dense" : "recomputed");
    if (meta && multi) {
        json_object_set_new(meta, "layers", json_pack("[i,i]", hl[0], hl[1]));
        json_object_set_new(meta, "heads", json_pack("[i,i]", hh[0], hh[1]));
    }
    reply_tensors(rs, t, 2, meta);
    free(buf);
}

static const char *const STAT_NAMES[AS_HEAD_N_STATS] = {"entropy", "sink", "self", "prev",
                                                        "next",    "dist", "spread", "max"};

void tile_api_stats(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    (void)s;
    const as_run *r = e->run;
    const char *d = reply_query(rq, "dtype");
    int dt = d ? srv_tb_dtype_parse(d) : TB_F32;
    if (dt < 0) {
        reply_error(rs, 400, "query 'dtype': expected f32, f16 or u8");
        return;
    }
    if (!r->head_stats || r->n_lay != r->L || r->n_hd != r->H) {
        reply_error(rs, 500, "run %s: head statistics were not captured", e->id);
        return;
    }
    const float *part = r->head_stats;
    srv_tb_tensor t = {.name = "head_stats", .dtype = (srv_tb_dtype)dt, .ndim = 3,
                       .shape = {r->L, r->H, AS_HEAD_N_STATS}, .parts = &part, .n_parts = 1,
                       .part_len = (size_t)r->L * (size_t)r->H * AS_HEAD_N_STATS};
    json_t *names = json_array();
    for (int i = 0; i < AS_HEAD_N_STATS; i++) json_array_append_new(names, json_string(STAT_NAMES[i]));
    reply_tensors(rs, &t, 1, json_pack("{s:s, s:i, s:o}", "run", e->id, "tokens", r->T, "stats", names));
}

/* The thumbnails of heads [h0, h1] of layers [l0, l1] pooled from run r's dense attention
 * (as_thumbs_pool, the forward's pooling) into mx and mean (L, H, S, S; the other heads
 * untouched). */
static void thumbs_from_dense(const as_run *r, int S, int l0, int l1, int h0, int h1, float *mx, float *mean) {
    for (int l = l0; l <= l1; l++)
        for (int h = h0; h <= h1; h++) {
            size_t slot = ((size_t)l * r->H + h) * S * S;
            as_thumbs_pool(as_run_attn(r, l, h), r->T, mx + slot, mean + slot);
        }
}

void tile_api_thumbs(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    (void)s;
    const as_run *r = e->run;
    float *pooled = NULL; /* a dense run's thumbnails, (2, L, H, S, S), pooled for this request */
    const char *d = reply_query(rq, "dtype"), *op = reply_query(rq, "op");
    int dt = d ? srv_tb_dtype_parse(d) : TB_F32, l0, l1, h0, h1;
    if (dt < 0) {
        reply_error(rs, 400, "query 'dtype': expected f32, f16 or u8");
        return;
    }
    if (op && strcmp(op, "max") && strcmp(op, "mean") && strcmp(op, "both")) {
        reply_error(rs, 400, "query 'op': expected max, mean or both");
        return;
    }
    if (reply_query_layers_heads(rq, r->L, r->H, &l0, &l1, &h0, &h1, rs)) return;
    if ((!r->thumb_max && (!r->attn || r->dec)) || !r->head_stats || r->n_lay != r->L || r->n_hd != r->H) {
        reply_error(rs, 409, "run %s kept no thumbnails (an encoder-decoder run): use the attention route's pool",
                    e->id);
        return;
    }
    int nl = l1 - l0 + 1, nh = h1 - h0 + 1, S = r->thumb_max ? r->thumb : r->T < AS_THUMB_SIDE ? r->T : AS_THUMB_SIDE;
    size_t SS = (size_t)S * (size_t)S, LHSS = (size_t)r->L * r->H * SS;
    const float *tmax = r->thumb_max, *tmean = r->thumb_mean;
    if (!tmax) { /* a dense run: its attention pooled onto the forward's blocks */
        if (!(pooled = as_malloc_array(2 * LHSS, sizeof(float)))) {
            reply_error(rs, 500, "out of memory");
            return;
        }
        thumbs_from_dense(r, S, l0, l1, h0, h1, pooled, pooled + LHSS);
        tmax = pooled, tmean = pooled + LHSS;
    }
    /* one part per layer: its heads [h0, h1] are contiguous in the run */
    const float **parts = malloc(sizeof *parts * 3 * (size_t)nl);
    if (!parts) {
        free(pooled);
        reply_error(rs, 500, "out of memory");
        return;
    }
    for (int l = 0; l < nl; l++) {
        size_t slot = (size_t)(l0 + l) * (size_t)r->H + (size_t)h0;
        parts[l] = tmax + slot * SS;
        parts[nl + l] = tmean + slot * SS;
        parts[2 * nl + l] = r->head_stats + slot * AS_HEAD_N_STATS;
    }
    srv_tb_tensor t[3];
    int n = 0;
    for (int k = 0; k < 2; k++) {
        if (op && strcmp(op, "both") && strcmp(op, k ? "mean" : "max")) continue;
        t[n++] = (srv_tb_tensor){.name = k ? "mean" : "max", .dtype = (srv_tb_dtype)dt, .ndim = 4,
                                 .shape = {nl, nh, S, S}, .parts = parts + (size_t)k * nl, .n_parts = nl,
                                 .part_len = (size_t)nh * SS};
    }
    t[n++] = (srv_tb_tensor){.name = "head_stats", .dtype = (srv_tb_dtype)dt, .ndim = 3,
                             .shape = {nl, nh, AS_HEAD_N_STATS}, .parts = parts + 2 * (size_t)nl, .n_parts = nl,
                             .part_len = (size_t)nh * AS_HEAD_N_STATS};
    json_t *names = json_array();
    for (int i = 0; i < AS_HEAD_N_STATS; i++) json_array_append_new(names, json_string(STAT_NAMES[i]));
    reply_tensors(rs, t, n, json_pack("{s:s, s:i, s:i, s:[i,i], s:[i,i], s:o}", "run", e->id, "tokens", r->T, "pool", S,
                                      "layers", l0, l1, "heads", h0, h1, "stats", names));
    free(parts);
    free(pooled);
}
