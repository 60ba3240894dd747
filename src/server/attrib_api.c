/* attrib_api.c — the attribution route of a cached run (see attrib_api.h): parses the
 * query, computes the method with the run's model and encoding under the server's forward
 * lock (the gradient methods run a forward and a backward; rollout, flow and norm read the
 * cached run's attention and values, attr_compute_run; norm2 and alti run a forward that
 * keeps the hidden states, which cached runs do not), and
 * replies one tensor named attribution (rollout, flow, grad: (T, T); norm:
 * (L, H, T, T); importance: (L, H); norm2, alti: (L, T, T)) with meta {run, method, tokens[, target, position,
 * logit]}. It does not cache results: every request computes. Also the intervention
 * route (intervene_api_route): two forwards of the run's input, the output of each.
 */
#include "attrib_api.h"
#include "attnscope/analysis.h"
#include "reply.h"
#include "tensor.h"

#include <string.h>

/* A decimal integer in [0, hi] (digits only); -1 otherwise. */
static int parse_nonneg(const char *s, int hi, int *out) {
    if (!s || !*s || strlen(s) > 9 || strspn(s, "0123456789") != strlen(s)) return -1;
    long v = strtol(s, NULL, 10);
    if (v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* attr_opts from the query; 0, or -1 after setting a 400. */
static int parse_query(const srv_state *s, const srv_entry *e, const srv_request *rq, attr_opts *o, int *dt,
                       srv_response *rs) {
    const char *m = reply_query(rq, "method"), *t = reply_query(rq, "target"), *p = reply_query(rq, "position");
    *o = (attr_opts){.target = -1, .position = -1, .threads = s->threads};
    if (!m || attr_method_parse(m, &o->method)) {
        reply_error(rs, 400, "query 'method': expected rollout, flow, norm, norm2, alti, grad or importance");
        return -1;
    }
    if (t && parse_nonneg(t, AS_MAX_VOCAB, &o->target)) {
        reply_error(rs, 400, "query 'target': expected a class index or token id");
        return -1;
    }
    if (p && parse_nonneg(p, e->enc.n - 1, &o->position)) {
        reply_error(rs, 400, "query 'position': expected an integer in [0, %d)", e->enc.n);
        return -1;
    }
    const char *d = reply_query(rq, "dtype");
    *dt = d ? srv_tb_dtype_parse(d) : TB_F32;
    if (*dt < 0) {
        reply_error(rs, 400, "query 'dtype': expected f32, f16 or u8");
        return -1;
    }
    return 0;
}

void attrib_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    attr_opts o;
    int dt;
    if (parse_query(s, e, rq, &o, &dt, rs)) return;
    if (!api_admit(s, rs)) return;
    as_error err = {0};
    attr_result r = {0};
    pthread_mutex_lock(&s->fwd_mu);
    as_status st = attr_compute_run(s->models[e->model].m, &e->enc, e->run, &o, &r, &err);
    pthread_mutex_unlock(&s->fwd_mu);
    api_leave(s);
    if (st) {
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "attribution: %s", err.msg);
        return;
    }
    size_t n = 1;
    for (int d = 0; d < r.ndim; d++) n *= (size_t)r.shape[d];
    const float *part = r.data;
    srv_tb_tensor t = {.name = "attribution", .dtype = (srv_tb_dtype)dt, .ndim = r.ndim,
                       .parts = &part, .n_parts = 1, .part_len = n};
    memcpy(t.shape, r.shape, sizeof r.shape);
    json_t *meta = json_pack("{s:s, s:s, s:i}", "run", e->id, "method", attr_method_name(r.method), "tokens", r.T);
    if (meta && (r.method == ATTR_GRAD || r.method == ATTR_IMPORTANCE)) {
        json_object_set_new(meta, "target", json_integer(r.target));
        json_object_set_new(meta, "position", json_integer(r.position));
        json_object_set_new(meta, "logit", json_real(r.logit));
    }
    reply_tensors(rs, &t, 1, meta);
    attr_result_free(&r);
}

/* as_intervention and iv_opts from the query (heads, edges: owned by the caller); 0, or -1
 * after setting a 400. */
static int parse_intervention(const srv_entry *e, const srv_request *rq, as_intervention *iv, as_head_ref **heads,
                              as_edge **edges, iv_opts *o, int *top, int *target, srv_response *rs) {
    const char *h = reply_query(rq, "heads"), *k = reply_query(rq, "knockout"), *m = reply_query(rq, "mode");
    const char *rn = reply_query(rq, "renorm"), *p = reply_query(rq, "position"), *t = reply_query(rq, "top");
    const char *tg = reply_query(rq, "target");
    char msg[256];
    if (!h && !k) {
        reply_error(rs, 400, "query: give heads=L:H,... and / or knockout=L:Q>K,...");
        return -1;
    }
    if (h && iv_parse_heads(h, heads, &iv->n_heads, msg, sizeof msg)) {
        reply_error(rs, 400, "query 'heads': %s", msg);
        return -1;
    }
    if (k && iv_parse_edges(k, edges, &iv->n_edges, msg, sizeof msg)) {
        reply_error(rs, 400, "query 'knockout': %s", msg);
        return -1;
    }
    iv->heads = *heads, iv->edges = *edges;
    if (m && strcmp(m, "zero") && strcmp(m, "mean")) {
        reply_error(rs, 400, "query 'mode': expected zero or mean");
        return -1;
    }
    iv->head_mode = m && !strcmp(m, "mean") ? AS_HEAD_MEAN : AS_HEAD_ZERO;
    if (rn && strcmp(rn, "0") && strcmp(rn, "1")) {
        reply_error(rs, 400, "query 'renorm': expected 0 or 1");
        return -1;
    }
    iv->renorm = rn && !strcmp(rn, "1");
    if (p && parse_nonneg(p, e->enc.n - 1, &o->position)) {
        reply_error(rs, 400, "query 'position': expected an integer in [0, %d)", e->enc.n);
        return -1;
    }
    if (t && (parse_nonneg(t, IV_MAX_TOP, top) || *top < 1)) {
        reply_error(rs, 400, "query 'top': expected an integer in [1, %d]", IV_MAX_TOP);
        return -1;
    }
    if (tg && parse_nonneg(tg, AS_MAX_VOCAB, target)) {
        reply_error(rs, 400, "query 'target': expected a token id");
        return -1;
    }
    return 0;
}

void intervene_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    as_intervention iv = {0};
    as_head_ref *heads = NULL;
    as_edge *edges = NULL;
    iv_opts o = {.position = -1, .threads = s->threads};
    int top = 5, target = -1;
    if (parse_intervention(e, rq, &iv, &heads, &edges, &o, &top, &target, rs)) goto cleanup;
    if (!api_admit(s, rs)) goto cleanup;
    as_error err = {0};
    iv_result r = {0};
    const as_model *m = s->models[e->model].m;
    pthread_mutex_lock(&s->fwd_mu);
    as_status st = iv_compare(m, &e->enc, &iv, &o, &r, &err);
    pthread_mutex_unlock(&s->fwd_mu);
    api_leave(s);
    if (st) {
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "intervene: %s", err.msg);
        goto cleanup;
    }
    if (!r.classifier && target >= r.cols) {
        reply_error(rs, 400, "query 'target': %d is outside the vocabulary [0, %d)", target, r.cols);
    } else {
        json_t *j = iv_result_json(m, &r, top, target);
        if (j) json_object_set_new(j, "run", json_string(e->id));
        reply_json(rs, 200, j);
    }
    iv_result_free(&r);
cleanup:
    free(heads);
    free(edges);
}
