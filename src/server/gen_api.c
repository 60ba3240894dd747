/* gen_api.c — POST /api/v1/generate (see gen_api.h): parses the body, encodes the prompt
 * (text with the model's tokenizer, or ids), runs gen_generate under the forward lock
 * (admitted as one run: SRV_MAX_ACTIVE_RUNS), and replies the rows as one tensor named
 * attention (steps, L, H, T) with the tokens in the header's meta. Every failure is a
 * one-line JSON error: 400 for a bad field, 413 when the rows would pass
 * SRV_GEN_MAX_ROW_BYTES. It keeps nothing between requests.
 */
#include "gen_api.h"
#include "attnscope/generate.h"
#include "reply.h"
#include "tensor.h"

#include <math.h>
#include <string.h>

typedef struct {
    int model;
    const char *text; /* borrowed from the body, or NULL for ids */
    int32_t *ids;     /* owned: (n_ids), or NULL for a text */
    int n_ids;
    gen_opts o;
    int dtype; /* TB_F32 or TB_F16 */
} gen_req;

static const char *const GEN_FIELDS[] = {"model", "text", "ids", "max_new", "temperature", "top_k", "seed",
                                         "stop_at_eos", "dtype"};

/* An integer field in [lo, hi], *out unchanged when absent; 0, or -1 after a 400. */
static int get_int(json_t *root, const char *key, long long lo, long long hi, long long *out, srv_response *rs) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        reply_error(rs, 400, "field '%s': expected an integer in [%lld, %lld]", key, lo, hi);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

/* The model named by the body's "model": a causal LM without an encoder; -1 after a 400. */
static int parse_model(const srv_state *s, json_t *root, srv_response *rs) {
    json_t *jm = json_object_get(root, "model");
    if (!json_is_string(jm)) {
        reply_error(rs, 400, "field 'model': %s", jm ? "expected a string" : "missing");
        return -1;
    }
    for (int i = 0; i < s->n_models; i++) {
        if (strcmp(s->models[i].name, json_string_value(jm))) continue;
        const as_model *m = s->models[i].m;
        if (!(as_model_heads(m) & HEAD_LM) || as_model_config(m)->n_dec_layer) {
            reply_error(rs, 400, "model '%s': generation needs a causal LM (a decoder-only model with an LM head)",
                        s->models[i].name);
            return -1;
        }
        return i;
    }
    json_t *n = as_json_string_utf8(json_string_value(jm));
    reply_error(rs, 400, "field 'model': unknown model '%.100s' (GET /api/v1/models lists them)",
                json_string_value(n) ? json_string_value(n) : "");
    json_decref(n);
    return -1;
}

/* The prompt: "text" (a string) or "ids" (1 to max token ids), exactly one; -1 after a 400. */
static int parse_prompt(const srv_state *s, json_t *root, gen_req *q, srv_response *rs) {
    json_t *jt = json_object_get(root, "text"), *ji = json_object_get(root, "ids");
    const as_model *m = s->models[q->model].m;
    if ((jt && !json_is_null(jt)) == (ji && !json_is_null(ji))) {
        reply_error(rs, 400, "request body: give exactly one of 'text' or 'ids'");
        return -1;
    }
    if (jt && !json_is_null(jt)) {
        if (!json_is_string(jt) || !*json_string_value(jt)) {
            reply_error(rs, 400, "field 'text': expected a non-empty string");
            return -1;
        }
        if (!as_model_has_tokenizer(m)) {
            reply_error(rs, 400, "model '%s' has no tokenizer; give the prompt as ids", s->models[q->model].name);
            return -1;
        }
        q->text = json_string_value(jt);
        return 0;
    }
    size_t n = json_is_array(ji) ? json_array_size(ji) : 0, max = (size_t)as_model_max_tokens(m);
    if (n == 0 || n > max) {
        reply_error(rs, 400, "field 'ids': expected an array of 1 to %zu token ids", max);
        return -1;
    }
    if (!(q->ids = malloc(n * sizeof *q->ids))) {
        reply_error(rs, 500, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ji, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            reply_error(rs, 400, "field 'ids': element %zu is not a token id (an integer >= 0)", i);
            return -1;
        }
        q->ids[i] = (int32_t)json_integer_value(v);
    }
    q->n_ids = (int)n;
    return 0;
}

/* The sampling options and dtype; -1 after a 400. */
static int parse_sampling(json_t *root, gen_req *q, srv_response *rs) {
    long long max_new = 20, top_k = 0, seed = 0;
    json_t *jt = json_object_get(root, "temperature"), *je = json_object_get(root, "stop_at_eos"),
           *jd = json_object_get(root, "dtype");
    if (get_int(root, "max_new", 1, SRV_GEN_MAX_NEW, &max_new, rs) ||
        get_int(root, "top_k", 1, AS_MAX_VOCAB, &top_k, rs) || get_int(root, "seed", 0, INT32_MAX, &seed, rs))
        return -1;
    double temp = top_k ? 1.0 : 0.0;
    if (jt && !json_is_null(jt)) {
        temp = json_is_number(jt) ? json_number_value(jt) : -1.0;
        if (!(temp >= 0.0 && temp <= 100.0)) {
            reply_error(rs, 400, "field 'temperature': expected a number in [0, 100]");
            return -1;
        }
    }
    if (top_k && temp == 0.0) {
        reply_error(rs, 400, "field 'top_k': sampling from the top k needs a temperature above 0");
        return -1;
    }
    if (je && !json_is_null(je) && !json_is_boolean(je)) {
        reply_error(rs, 400, "field 'stop_at_eos': expected true or false");
        return -1;
    }
    const char *d = jd && !json_is_null(jd) ? json_string_value(jd) : "f32";
    if (!d || (strcmp(d, "f32") && strcmp(d, "f16"))) {
        reply_error(rs, 400, "field 'dtype': expected \"f32\" or \"f16\"");
        return -1;
    }
    q->dtype = srv_tb_dtype_parse(d);
    q->o = (gen_opts){.max_new = (int)max_new, .temperature = temp, .top_k = (int)top_k, .seed = (uint64_t)seed,
                      .stop_eos = json_is_true(je), .rows = 1};
    return 0;
}

/* Parses the body into q (q->ids owned); 0, or -1 after a 4xx. */
static int parse_body(const srv_state *s, const srv_request *rq, json_t **root, gen_req *q, srv_response *rs) {
    json_error_t je;
    memset(q, 0, sizeof *q);
    if (!rq->body || !rq->body_len || !(*root = json_loadb(rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &je)) ||
        !json_is_object(*root)) {
        reply_error(rs, 400, "request body: expected a JSON object");
        return -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach(*root, key, v) {
        size_t i = 0;
        while (i < sizeof GEN_FIELDS / sizeof *GEN_FIELDS && strcmp(key, GEN_FIELDS[i])) i++;
        if (i == sizeof GEN_FIELDS / sizeof *GEN_FIELDS) {
            json_t *n = as_json_string_utf8(key);
            reply_error(rs, 400, "request body: unknown field '%.60s'",
                        json_string_value(n) ? json_string_value(n) : "");
            json_decref(n);
            return -1;
        }
    }
    if ((q->model = parse_model(s, *root, rs)) < 0 || parse_prompt(s, *root, q, rs)) return -1;
    return parse_sampling(*root, q, rs);
}

/* The reply: tensor attention (steps, L, H, T) and the tokens in meta. */
static void reply_generation(const srv_state *s, const gen_req *q, const gen_result *g, srv_response *rs) {
    const as_model *m = s->models[q->model].m;
    as_encoding fin = {0};
    as_error err = {0};
    if (as_encoding_from_ids(m, g->ids, NULL, g->T, &fin, &err)) {
        reply_error(rs, 500, "generate: %s", err.msg);
        return;
    }
    json_t *ids = json_array(), *gen = json_array();
    for (int i = 0; i < g->T; i++) json_array_append_new(ids, json_integer(g->ids[i]));
    for (int i = 0; i < g->steps; i++) json_array_append_new(gen, json_integer(g->gen[i]));
    json_t *meta = json_pack("{s:s, s:i, s:i, s:i, s:i, s:o, s:o, s:o, s:f, s:i, s:I, s:b}", "model",
                             s->models[q->model].name, "prompt_length", g->prompt_len, "steps", g->steps, "layers",
                             g->L, "heads", g->H, "ids", ids, "generated_ids", gen, "tokens",
                             as_tokens_json_value(m, &fin), "temperature", q->o.temperature, "top_k", q->o.top_k,
                             "seed", (json_int_t)q->o.seed, "stop_at_eos", q->o.stop_eos);
    const float *part = g->rows;
    srv_tb_tensor t = {.name = "attention", .dtype = (srv_tb_dtype)q->dtype, .ndim = 4,
                       .shape = {g->steps, g->L, g->H, g->T}, .parts = &part, .n_parts = 1,
                       .part_len = (size_t)g->steps * g->L * g->H * g->T};
    reply_tensors(rs, &t, 1, meta);
    as_encoding_free(&fin);
}

void gen_api_route(srv_state *s, const srv_request *rq, srv_response *rs) {
    json_t *root = NULL;
    gen_req q;
    as_encoding enc = {0};
    gen_result g = {0};
    as_error err = {0};
    if (parse_body(s, rq, &root, &q, rs)) goto cleanup;
    const srv_model *sm = &s->models[q.model];
    as_encode_opts eo = {.max_len = 0, .truncate = 0};
    as_status st = q.ids ? as_encoding_from_ids(sm->m, q.ids, NULL, q.n_ids, &enc, &err)
                         : as_encode(sm->m, q.text, NULL, &eo, &enc, &err);
    if (st) {
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "%s: %s", q.ids ? "ids" : "text", err.msg);
        goto cleanup;
    }
    const as_config *c = as_model_config(sm->m);
    int max = as_model_max_tokens(sm->m), steps = q.o.max_new < max - enc.n ? q.o.max_new : max - enc.n;
    if (steps < 1) {
        reply_error(rs, 400, "the prompt has %d tokens: no room left in the model's %d positions", enc.n, max);
        goto cleanup;
    }
    double bytes = 4.0 * steps * c->n_layer * c->n_head * (enc.n + steps);
    if (bytes > SRV_GEN_MAX_ROW_BYTES) {
        reply_error(rs, 413, "generate: %d steps of %d layers x %d heads x %d keys are %.0f bytes of rows, over the "
                    "%u of one reply (SRV_GEN_MAX_ROW_BYTES): ask for fewer tokens", steps, c->n_layer, c->n_head,
                    enc.n + steps, bytes, SRV_GEN_MAX_ROW_BYTES);
        goto cleanup;
    }
    if (!api_admit(s, rs)) goto cleanup;
    q.o.threads = s->threads;
    pthread_mutex_lock(&s->fwd_mu);
    st = gen_generate(sm->m, NULL, enc.ids, enc.n, &q.o, &g, &err);
    pthread_mutex_unlock(&s->fwd_mu);
    api_leave(s);
    if (st) reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "generate: %s", err.msg);
    else reply_generation(s, &q, &g, rs);
cleanup:
    gen_result_free(&g);
    as_encoding_free(&enc);
    free(q.ids);
    json_decref(root);
}
