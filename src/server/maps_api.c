/* maps_api.c — the maps and lens routes of a cached run (see maps_api.h). maps: an
 * attribution method's result (attr_compute_run under the server's forward lock, kept
 * with the run in srv_entry.maps) sliced and, on request, max-pooled into the attention
 * route's (layers, heads, S, S) layout and written by the tensor writer (reply_tensors);
 * rollout and grad are asked for every layer's map, cumulative through it
 * (attr_opts.layers); flow's layer maps are computed as requests ask for them (layer l
 * costs T^2 max-flows on l + 1 layers; a request's own layers at most
 * SRV_MAPS_FLOW_MAX_WORK) and kept with the result.
 * lens: one forward keeping the hidden states (lens_json), not kept.
 * What it does not: compute the methods (src/analysis/attrib*.c), or serve raw attention
 * (the attention route does).
 */
#include "maps_api.h"
#include "attnscope/analysis.h"
#include "maxpool.h"
#include "reply.h"
#include "tensor.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

/* One computed result of a run; the list is most recently used first. */
typedef struct srv_maps {
    attr_method method;
    int target, position; /* as asked (-1 = the default) */
    attr_result r;        /* owned */
    unsigned char *done;  /* flow: (L) 1 for each layer whose map r holds; NULL otherwise */
    struct srv_maps *next;
} srv_maps;

/* Frees a list of results (srv_entry.maps_free); NULL is a no-op. */
static void maps_free(srv_maps *m) {
    while (m) {
        srv_maps *nx = m->next;
        attr_result_free(&m->r);
        free(m->done);
        free(m);
        m = nx;
    }
}

static void maps_free_list(void *m) { maps_free(m); }

/* A decimal integer in [lo, hi] (digits only); -1 otherwise. */
static int parse_int(const char *s, int lo, int hi, int *out) {
    if (!s || !*s || strlen(s) > 9 || strspn(s, "0123456789") != strlen(s)) return -1;
    long v = strtol(s, NULL, 10);
    if (v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* What a method's result holds per map: 'h' (L, H, T, T), 'l' (L, T, T: norm2 each layer's
 * own; alti, and rollout, flow and grad asked for every layer's, cumulative through it); 0
 * for a method that has no token-to-token maps (importance). */
static char method_per(attr_method m) {
    return m == ATTR_NORM ? 'h' : m == ATTR_IMPORTANCE ? 0 : 'l';
}

/* 1 for the methods whose whole-model (T, T) map the route asks for per layer (attr_opts.layers). */
static int method_cumulative(attr_method m) { return m == ATTR_ROLLOUT || m == ATTR_FLOW || m == ATTR_GRAD; }

/* An empty flow result for every layer of e's run: (L, T, T) maps, none computed yet. */
static as_status flow_result_init(const srv_entry *e, srv_maps *m, as_error *err) {
    const as_run *r = e->run;
    const int L = r->L, H = r->H, T = e->enc.n;
    if (T > ATTR_FLOW_MAX_T)
        return as_err_set(err, AS_ERR_INPUT, "attention flow takes at most %d tokens, the input has %d", ATTR_FLOW_MAX_T,
                          T);
    m->r = (attr_result){.method = ATTR_FLOW, .T = T, .L = L, .H = H, .ndim = 3, .shape = {L, T, T},
                         .target = -1, .position = -1};
    m->r.data = as_calloc((size_t)L * T * T, sizeof(float));
    m->done = as_calloc((size_t)L, 1);
    if (!m->r.data || !m->done) {
        attr_result_free(&m->r);
        free(m->done);
        m->done = NULL;
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    return AS_OK;
}

/* Computes the flow maps of layers [l0, l1] that m does not hold yet (layer l: the flow from
 * the input to layer l's output on the run's first l + 1 layers); *fresh = 1 if any was. */
static as_status flow_fill(const srv_state *s, const srv_entry *e, srv_maps *m, int l0, int l1, int *fresh,
                           as_error *err) {
    const size_t TT = (size_t)m->r.T * m->r.T;
    for (int l = l0; l <= l1; l++) {
        if (m->done[l]) continue;
        as_status st = attr_flow(e->run->attn, l + 1, m->r.H, m->r.T, s->threads, m->r.data + (size_t)l * TT, err);
        if (st) return st;
        m->done[l] = 1;
        *fresh = 1;
    }
    return AS_OK;
}

/* The cached result of (method, target, position) on e, moved to the front (*hit = 1), or one
 * computed and inserted (*hit = 0; the oldest beyond SRV_MAPS_PER_RUN freed); flow's layers
 * [l0, l1] computed if it lacks them (*hit = 0 then). Caller holds s->fwd_mu, which guards
 * e->maps. NULL with err set when the method fails. */
static srv_maps *maps_get(srv_state *s, srv_entry *e, const attr_opts *o, int l0, int l1, int *hit, as_error *err) {
    srv_maps *head = e->maps, **pp = &head, *m;
    for (; (m = *pp); pp = &m->next)
        if (m->method == o->method && m->target == o->target && m->position == o->position) {
            int fresh = 0;
            if (m->done && flow_fill(s, e, m, l0, l1, &fresh, err)) return NULL;
            *pp = m->next;
            m->next = head;
            e->maps = m;
            *hit = !fresh;
            return m;
        }
    *hit = 0;
    m = calloc(1, sizeof *m);
    if (!m) {
        as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    *m = (srv_maps){.method = o->method, .target = o->target, .position = o->position, .next = head};
    int fresh = 0;
    if (o->method == ATTR_FLOW ? flow_result_init(e, m, err) || flow_fill(s, e, m, l0, l1, &fresh, err)
                               : attr_compute_run(s->models[e->model].m, &e->enc, e->run, o, &m->r, err)) {
        attr_result_free(&m->r);
        free(m->done);
        free(m);
        return NULL;
    }
    pp = &m->next;
    for (int n = 1; *pp && n < SRV_MAPS_PER_RUN; n++) pp = &(*pp)->next;
    maps_free(*pp);
    *pp = NULL;
    e->maps = m;
    e->maps_free = maps_free_list;
    return m;
}

typedef struct {
    attr_opts o;
    int l0, l1, h0, h1, pool, dt;
} maps_query;

/* 0 when the method is not flow or the flow of the asked layers [l0, l1] fits
 * SRV_MAPS_FLOW_MAX_WORK; -1 after setting a 400 naming the most tokens those layers may take.
 * The work counted is T^2 max-flows on l + 1 layers for each asked layer l: T^2 sum (l + 1)
 * layer-graphs (the layers an earlier request computed are counted too: a bound, not a
 * promise). */
static int check_flow_work(const srv_entry *e, const maps_query *q, srv_response *rs) {
    if (q->o.method != ATTR_FLOW || e->enc.n > ATTR_FLOW_MAX_T) return 0; /* over the library's limit: its 400 */
    double per_pair = 0;
    for (int l = q->l0; l <= q->l1; l++) per_pair += l + 1;
    double work = (double)e->enc.n * e->enc.n * per_pair;
    if (work <= (double)SRV_MAPS_FLOW_MAX_WORK) return 0;
    int most = (int)sqrt((double)SRV_MAPS_FLOW_MAX_WORK / per_pair);
    reply_error(rs, 400,
                "attention flow for layers %d-%d of this %d-layer model takes at most %d tokens here, the input has %d",
                q->l0, q->l1, e->run->L, most, e->enc.n);
    return -1;
}

/* The query of a maps request; 0, or -1 after setting a 400. */
static int parse_query(const srv_state *s, const srv_entry *e, const srv_request *rq, maps_query *q, srv_response *rs) {
    const as_run *r = e->run;
    const char *m = reply_query(rq, "method"), *t = reply_query(rq, "target"), *p = reply_query(rq, "position");
    const char *pl = reply_query(rq, "pool"), *d = reply_query(rq, "dtype");
    *q = (maps_query){.o = {.target = -1, .position = -1, .threads = s->threads}, .dt = TB_F32};
    if (!m || attr_method_parse(m, &q->o.method) || !method_per(q->o.method)) {
        reply_error(rs, 400, "query 'method': expected norm, norm2, alti, rollout, flow or grad");
        return -1;
    }
    q->o.layers = method_cumulative(q->o.method); /* every layer's map, cumulative through it (flow: maps_get) */
    if ((t || p) && q->o.method != ATTR_GRAD) {
        reply_error(rs, 400, "query 'target' and 'position' apply to method grad only");
        return -1;
    }
    if (t && parse_int(t, 0, AS_MAX_VOCAB, &q->o.target)) {
        reply_error(rs, 400, "query 'target': expected a class index or token id");
        return -1;
    }
    if (p && parse_int(p, 0, e->enc.n - 1, &q->o.position)) {
        reply_error(rs, 400, "query 'position': expected an integer in [0, %d)", e->enc.n);
        return -1;
    }
    if (reply_query_layers_heads(rq, r->L, r->H, &q->l0, &q->l1, &q->h0, &q->h1, rs)) return -1;
    if (pl && parse_int(pl, SRV_POOL_MIN, SRV_POOL_MAX, &q->pool)) {
        reply_error(rs, 400, "query 'pool': expected an integer in [%d, %d]", SRV_POOL_MIN, SRV_POOL_MAX);
        return -1;
    }
    if (d && (q->dt = srv_tb_dtype_parse(d)) < 0) {
        reply_error(rs, 400, "query 'dtype': expected f32, f16 or u8");
        return -1;
    }
    if (!r->attn) {
        reply_error(rs, 400, "run %s is a long run (capture stats,qkv: no T x T kept); maps need its attention", e->id);
        return -1;
    }
    return check_flow_work(e, q, rs);
}

/* The reply of result m cut to q: (nl, nh, S, S) maps (nh = 1 for a per-layer method), pooled
 * when q->pool; hit: m was kept from an earlier request (meta.cached). */
static void reply_maps(srv_response *rs, const srv_entry *e, const maps_query *q, const srv_maps *m, int hit) {
    const attr_result *r = &m->r;
    char per = method_per(r->method);
    int T = r->T, H = e->run->H;
    int l0 = q->l0, l1 = q->l1;
    int h0 = per == 'h' ? q->h0 : 0, h1 = per == 'h' ? q->h1 : 0;
    int nl = l1 - l0 + 1, nh = h1 - h0 + 1, S = q->pool ? srv_maxpool_size(T, q->pool) : T;
    size_t TT = (size_t)T * T, SS = (size_t)S * S;
    const float **parts = malloc(sizeof *parts * (size_t)nl * nh);
    float *pooled = q->pool ? as_malloc_array((size_t)nl * nh, SS * sizeof(float)) : NULL;
    float *scratch = q->pool ? as_malloc_array((size_t)T, sizeof(float)) : NULL;
    if (!parts || (q->pool && (!pooled || !scratch))) {
        reply_error(rs, 500, "out of memory");
        goto cleanup;
    }
    for (int l = 0; l < nl; l++)
        for (int h = 0; h < nh; h++) {
            size_t k = (size_t)l * nh + h;
            const float *src = r->data + (per == 'h' ? ((size_t)(l0 + l) * H + h0 + h) * TT : (size_t)(l0 + l) * TT);
            if (q->pool) srv_maxpool(src, T, S, pooled + k * SS, scratch);
            parts[k] = q->pool ? pooled + k * SS : src;
        }
    srv_tb_tensor t = {.name = "maps", .dtype = (srv_tb_dtype)q->dt, .ndim = 4, .shape = {nl, nh, S, S},
                       .parts = parts, .n_parts = nl * nh, .part_len = SS};
    json_t *meta = json_pack("{s:s, s:s, s:s, s:[i,i], s:[i,i], s:i, s:b}", "run", e->id, "method",
                             attr_method_name(r->method), "per", per == 'h' ? "head" : "layer",
                             "layers", l0, l1, "heads", h0, h1, "tokens", T, "cached", hit);
    if (meta && q->pool) {
        json_object_set_new(meta, "pool", json_integer(S));
        json_object_set_new(meta, "pool_op", json_string("max"));
    }
    if (meta && r->method == ATTR_GRAD) {
        json_object_set_new(meta, "target", json_integer(r->target));
        json_object_set_new(meta, "position", json_integer(r->position));
        json_object_set_new(meta, "logit", json_real(r->logit));
    }
    reply_tensors(rs, &t, 1, meta); /* meta stolen */
cleanup:
    free(parts);
    free(pooled);
    free(scratch);
}

/* 1 after setting a 409 when e is an encoder-decoder run (the methods and the lens read one stack). */
static int refuse_encdec(const srv_entry *e, const char *route, srv_response *rs) {
    if (!e->run || !e->run->dec) return 0;
    reply_error(rs, 409, "run %s is encoder-decoder: %s runs single-stack models only", e->id, route);
    return 1;
}

void maps_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    maps_query q;
    if (refuse_encdec(e, "maps", rs)) return;
    if (parse_query(s, e, rq, &q, rs)) return;
    if (!api_admit(s, rs)) return;
    as_error err = {0};
    int hit = 0;
    pthread_mutex_lock(&s->fwd_mu);
    srv_maps *m = maps_get(s, e, &q.o, q.l0, q.l1, &hit, &err);
    if (m) reply_maps(rs, e, &q, m, hit); /* under the lock: another request may drop m after it */
    pthread_mutex_unlock(&s->fwd_mu);
    api_leave(s);
    if (!m) reply_error(rs, err.code == AS_ERR_INPUT ? 400 : 500, "maps: %s", err.msg);
}

void lens_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    const char *p = reply_query(rq, "position"), *t = reply_query(rq, "top");
    int pos = -1, top = 5;
    if (refuse_encdec(e, "lens", rs)) return;
    if (p && parse_int(p, 0, e->enc.n - 1, &pos)) {
        reply_error(rs, 400, "query 'position': expected an integer in [0, %d)", e->enc.n);
        return;
    }
    if (t && parse_int(t, 1, SRV_LENS_MAX_TOP, &top)) {
        reply_error(rs, 400, "query 'top': expected an integer in [1, %d]", SRV_LENS_MAX_TOP);
        return;
    }
    if (!api_admit(s, rs)) return;
    as_error err = {0};
    json_t *j = NULL;
    pthread_mutex_lock(&s->fwd_mu);
    as_status st = lens_json(s->models[e->model].m, &e->enc, pos, top, s->threads, &j, &err);
    pthread_mutex_unlock(&s->fwd_mu);
    api_leave(s);
    if (st) {
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "lens: %s", err.msg);
        return;
    }
    json_object_set_new(j, "run", json_string(e->id));
    reply_json(rs, 200, j);
}
