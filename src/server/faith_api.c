/* faith_api.c — the faithfulness route of a cached run (see faith_api.h): parses the
 * query, runs faith_compute on the run's model and encoding under the server's forward lock
 * (each method's attribution, then 2 n forwards of perturbed inputs on the server's
 * threads) and replies faith_result_json with "run". It does not cache results: every
 * request computes, and it does not read the cached run's tensors.
 */
#include "faith_api.h"
#include "attnscope/analysis.h"
#include "attnscope/faith.h"
#include "reply.h"

#include <string.h>

/* faith_opts from the query; 0, or -1 after setting a 400. */
static int parse_query(const srv_state *s, const srv_entry *e, const srv_request *rq, faith_opts *o,
                       srv_response *rs) {
    const char *m = reply_query(rq, "methods"), *r = reply_query(rq, "removal"), *st = reply_query(rq, "steps");
    const char *sd = reply_query(rq, "seed");
    char bad[64];
    *o = (faith_opts){.seed = 1, .threads = s->threads};
    if (m && faith_methods_parse(m, &o->methods, bad, sizeof bad)) {
        reply_error(rs, 400, "query 'methods': unknown method '%s' (grad, gxi, ig, rollout, flow, norm, norm2, "
                    "alti, grad-attn, random)", bad);
        return -1;
    }
    if (!m) {
        o->methods = FAITH_ALL_METHODS;
        if (e->enc.n > ATTR_FLOW_MAX_T) o->methods &= ~(1u << FAITH_FLOW);
    }
    if (r && strcmp(r, "delete") && strcmp(r, "mask")) {
        reply_error(rs, 400, "query 'removal': expected delete or mask");
        return -1;
    }
    o->removal = r && !strcmp(r, "mask") ? FAITH_MASK : FAITH_DELETE;
    char *end = NULL;
    long v;
    if (st) {
        v = strtol(st, &end, 10);
        if (!*st || *end || v < 1 || v > SAL_MAX_STEPS) {
            reply_error(rs, 400, "query 'steps': expected an integer in [1, %d]", SAL_MAX_STEPS);
            return -1;
        }
        o->steps = (int)v;
    }
    if (sd) {
        v = strtol(sd, &end, 10);
        if (!*sd || *end || v < 0 || v > 2147483647L) {
            reply_error(rs, 400, "query 'seed': expected a non-negative integer");
            return -1;
        }
        o->seed = (uint64_t)v;
    }
    int n = 0;
    for (int t = 0; t < e->enc.n; t++) n += !e->enc.seq || e->enc.seq[t] >= 0;
    if (n > FAITH_API_MAX_TOKENS) {
        reply_error(rs, 400, "faithfulness: the input has %d tokens to remove, the server scores at most %d "
                    "(attnscope faithfulness has no limit)", n, FAITH_API_MAX_TOKENS);
        return -1;
    }
    return 0;
}

void faith_api_route(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    faith_opts o;
    if (parse_query(s, e, rq, &o, rs)) return;
    if (!api_admit(s, rs)) return;
    as_error err = {0};
    faith_result r = {0};
    const as_model *m = s->models[e->model].m;
    pthread_mutex_lock(&s->fwd_mu);
    as_status st = faith_compute(m, &e->enc, &o, &r, &err);
    pthread_mutex_unlock(&s->fwd_mu);
    api_leave(s);
    if (st) {
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "faithfulness: %s", err.msg);
        return;
    }
    json_t *j = faith_result_json(m, &r, o.removal);
    if (j) json_object_set_new(j, "run", json_string(e->id));
    reply_json(rs, 200, j);
    faith_result_free(&r);
}
