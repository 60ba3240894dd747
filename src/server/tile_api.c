/* tile_api.c — the tile and stats routes of a cached run (see tile_api.h): parses the
 * query, computes the tile (server/tile.c) on the server's forward threads without the
 * forward lock (a tile only reads the run), and replies it whole (at most 2 x 256 x 256
 * floats). It keeps nothing between requests.
 */
#include "tile_api.h"
#include "reply.h"
#include "tensor.h"
#include "tile.h"

#include <stdlib.h>
#include <string.h>

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

/* The tile request of rq's query for run r; 0, or -1 after setting a 400. */
static int parse_tile(const as_run *r, const srv_request *rq, srv_tile_req *q, int *dt, srv_response *rs) {
    int lo, hi;
    memset(q, 0, sizeof *q);
    const char *l = reply_query(rq, "layer"), *h = reply_query(rq, "head"), *n = reply_query(rq, "n"),
               *x = reply_query(rq, "exclude"), *d = reply_query(rq, "dtype");
    if (parse_int(l, 0, r->L - 1, &q->layer)) {
        reply_error(rs, 400, "query 'layer': expected an integer in [0, %d)", r->L);
        return -1;
    }
    if (parse_int(h, 0, r->H - 1, &q->head)) {
        reply_error(rs, 400, "query 'head': expected an integer in [0, %d)", r->H);
        return -1;
    }
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

void tile_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    const as_run *r = e->run;
    srv_tile_req q;
    int dt;
    if (parse_tile(r, rq, &q, &dt, rs)) return;
    int Pr = srv_tile_rows(&q), Pc = srv_tile_cols(&q);
    size_t cells = (size_t)Pr * (size_t)Pc;
    float *buf = malloc(sizeof(float) * 2 * cells);
    if (!buf) {
        reply_error(rs, 500, "out of memory");
        return;
    }
    as_error err = {0};
    as_status st = srv_tile_compute(s->models[e->model].m, r, &q, s->threads, buf, buf + cells, &err);
    if (st) {
        free(buf);
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "tile: %s", err.msg);
        return;
    }
    const float *parts[2] = {buf, buf + cells};
    srv_tb_tensor t[2];
    const char *names[2] = {"max", "mean"};
    for (int i = 0; i < 2; i++)
        t[i] = (srv_tb_tensor){.name = names[i], .dtype = (srv_tb_dtype)dt, .ndim = 2, .shape = {Pr, Pc},
                               .parts = &parts[i], .n_parts = 1, .part_len = cells};
    json_t *ex = json_array();
    for (int i = 0; i < q.n_exclude; i++) json_array_append_new(ex, json_integer(q.exclude[i]));
    json_t *meta = json_pack("{s:s, s:i, s:i, s:i, s:[i,i], s:[i,i], s:[i,i], s:o, s:s}", "run", e->id, "layer",
                             q.layer, "head", q.head, "tokens", r->T, "rows", q.i0, q.i1 - 1, "cols", q.j0, q.j1 - 1,
                             "pool", Pr, Pc, "exclude", ex, "source", as_run_attn(r, q.layer, q.head) ? "dense"
                                                                                                          : "recomputed");
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
