/* gen_api.c — POST /api/v1/generate (see gen_api.h): parses the body, encodes the prompt
 * (text with the model's tokenizer, or ids; an encoder-decoder model's source, its decoder
 * starting at target_ids or decoder_start_token_id), runs gen_generate or, with beams above
 * 1, gen_beam_search under the forward lock (admitted as one run: SRV_MAX_ACTIVE_RUNS), and
 * replies the rows as binary tensors: attention (steps, L, H, T), an encoder-decoder
 * model's cross_attention (steps, L, H, Ts), and with several beam hypotheses
 * beam_attention / beam_cross_attention of every one; the tokens and hypotheses in the
 * header's meta. Rows the generation did not keep (beam search, an encoder-decoder's
 * decoder self-attention) come from one forward over the sequence (gen_sequence_rows): a
 * causal decoder sees at each position what the step that chose the next token saw. Every failure is a
 * one-line JSON error: 400 for a bad field, 413 when the rows would pass
 * SRV_GEN_MAX_ROW_BYTES. It keeps nothing between requests.
 */
#include "gen_api.h"
#include "attnscope/beam.h"
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
    int32_t *start;   /* owned: an encoder-decoder model's target_ids (n_start), or NULL */
    int n_start;
    gen_opts o;
    gen_beam_opts bo; /* bo.beams 1: no beam search */
    int dtype;        /* TB_F32 or TB_F16 */
} gen_req;

static const char *const GEN_FIELDS[] = {"model", "text", "ids", "target_ids", "max_new", "temperature", "top_k",
                                         "seed", "stop_at_eos", "dtype", "beams", "num_return", "length_penalty",
                                         "early_stopping", "top"};

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

static int has(json_t *root, const char *key) {
    json_t *v = json_object_get(root, key);
    return v && !json_is_null(v);
}

/* The model named by the body's "model": one with a language-model head (a causal LM, or
 * an encoder-decoder model); -1 after a 400. */
static int parse_model(const srv_state *s, json_t *root, srv_response *rs) {
    json_t *jm = json_object_get(root, "model");
    if (!json_is_string(jm)) {
        reply_error(rs, 400, "field 'model': %s", jm ? "expected a string" : "missing");
        return -1;
    }
    for (int i = 0; i < s->n_models; i++) {
        if (strcmp(s->models[i].name, json_string_value(jm))) continue;
        if (!(as_model_heads(s->models[i].m) & HEAD_LM)) {
            reply_error(rs, 400, "model '%s': generation needs a language-model head (a causal LM or an "
                        "encoder-decoder model)", s->models[i].name);
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

/* Array field key of 1 to max token ids into *out (owned); -1 after a 400. */
static int parse_ids(json_t *ja, const char *key, size_t max, int32_t **out, int *n_out, srv_response *rs) {
    size_t n = json_is_array(ja) ? json_array_size(ja) : 0;
    if (n == 0 || n > max) {
        reply_error(rs, 400, "field '%s': expected an array of 1 to %zu token ids", key, max);
        return -1;
    }
    if (!(*out = malloc(n * sizeof **out))) {
        reply_error(rs, 500, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ja, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            reply_error(rs, 400, "field '%s': element %zu is not a token id (an integer >= 0)", key, i);
            return -1;
        }
        (*out)[i] = (int32_t)json_integer_value(v);
    }
    *n_out = (int)n;
    return 0;
}

/* The prompt: "text" (a string) or "ids" (1 to max token ids), exactly one; an
 * encoder-decoder model's optional "target_ids" (the decoder's first ids); -1 after a 400. */
static int parse_prompt(const srv_state *s, json_t *root, gen_req *q, srv_response *rs) {
    json_t *jt = json_object_get(root, "text");
    const as_model *m = s->models[q->model].m;
    const as_config *c = as_model_config(m);
    if (has(root, "target_ids")) {
        if (!c->n_dec_layer) {
            reply_error(rs, 400, "field 'target_ids': model '%s' (%s) is not encoder-decoder; its prompt is text or "
                        "ids", s->models[q->model].name, c->model_type);
            return -1;
        }
        int max = as_model_max_tokens(m); /* the decoder's start leaves room for a generated token */
        if (parse_ids(json_object_get(root, "target_ids"), "target_ids", max > 1 ? (size_t)max - 1 : 1, &q->start,
                      &q->n_start, rs))
            return -1;
    } else if (c->n_dec_layer && c->decoder_start_token_id < 0) {
        reply_error(rs, 400, "model '%s' has no decoder_start_token_id: give the decoder's first ids as target_ids "
                    "(mBART: the target language code)", s->models[q->model].name);
        return -1;
    }
    if (has(root, "text") == has(root, "ids")) {
        reply_error(rs, 400, "request body: give exactly one of 'text' or 'ids'");
        return -1;
    }
    if (has(root, "ids"))
        return parse_ids(json_object_get(root, "ids"), "ids", (size_t)as_model_max_tokens(m), &q->ids, &q->n_ids,
                         rs);
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

/* Beam search's options (beams, num_return, length_penalty, early_stopping) into q->bo;
 * the last three, and sampling, refused unless beams is above 1; -1 after a 400. */
static int parse_beams(json_t *root, gen_req *q, srv_response *rs) {
    long long beams = 1, num_return = 1;
    json_t *jl = json_object_get(root, "length_penalty"), *je = json_object_get(root, "early_stopping");
    if (get_int(root, "beams", 1, GEN_MAX_BEAMS, &beams, rs) ||
        get_int(root, "num_return", 1, GEN_MAX_BEAMS, &num_return, rs))
        return -1;
    static const char *const beam_only[] = {"num_return", "length_penalty", "early_stopping"};
    static const char *const sampling[] = {"temperature", "top_k", "seed", "stop_at_eos", "top"};
    for (int i = 0; i < 3; i++)
        if (beams == 1 && has(root, beam_only[i])) {
            reply_error(rs, 400, "field '%s': applies to beam search only (beams 2 or more)", beam_only[i]);
            return -1;
        }
    for (int i = 0; i < 5; i++)
        if (beams > 1 && has(root, sampling[i])) {
            reply_error(rs, 400, "field '%s': applies to greedy and sampled generation; beam search does not "
                        "sample and always ends a hypothesis at an end-of-sequence id (leave it out with beams "
                        "above 1)", sampling[i]);
            return -1;
        }
    if (num_return > beams) {
        reply_error(rs, 400, "field 'num_return': %lld is more than the beams (%lld)", num_return, beams);
        return -1;
    }
    double lp = 1.0;
    if (jl && !json_is_null(jl)) {
        lp = json_is_number(jl) ? json_number_value(jl) : NAN;
        if (!(lp >= -10.0 && lp <= 10.0)) {
            reply_error(rs, 400, "field 'length_penalty': expected a number in [-10, 10]");
            return -1;
        }
    }
    if (je && !json_is_null(je) && !json_is_boolean(je)) {
        reply_error(rs, 400, "field 'early_stopping': expected true or false");
        return -1;
    }
    q->bo = (gen_beam_opts){.beams = (int)beams, .num_return = (int)num_return, .early_stopping = json_is_true(je),
                            .length_penalty = lp};
    return 0;
}

/* The sampling options and dtype; -1 after a 400. */
static int parse_sampling(json_t *root, gen_req *q, srv_response *rs) {
    long long max_new = 20, top_k = 0, seed = 0, top = 0;
    json_t *jt = json_object_get(root, "temperature"), *je = json_object_get(root, "stop_at_eos"),
           *jd = json_object_get(root, "dtype");
    if (get_int(root, "max_new", 1, SRV_GEN_MAX_NEW, &max_new, rs) ||
        get_int(root, "top_k", 1, AS_MAX_VOCAB, &top_k, rs) || get_int(root, "seed", 0, INT32_MAX, &seed, rs) ||
        get_int(root, "top", 0, GEN_MAX_TOP, &top, rs))
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
                      .stop_eos = json_is_true(je), .rows = 1, .probs = 1, .top = (int)top};
    return 0;
}

/* Parses the body into q (q->ids, q->start owned); 0, or -1 after a 4xx. */
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
    if ((q->model = parse_model(s, *root, rs)) < 0 || parse_prompt(s, *root, q, rs) || parse_beams(*root, q, rs))
        return -1;
    return parse_sampling(*root, q, rs);
}

/* Greedy or sampled generation: the result (kept in *gr for each step's probabilities) and
 * its one sequence with its rows (gen_result_rows). */
static as_status run_sample(const as_model *m, const as_encoding *src, const as_encoding *seq, gen_opts o,
                            gen_result *gr, gen_beam_rows *out, as_error *err) {
    as_status s = gen_generate(m, src, seq->ids, seq->n, &o, gr, err);
    return s ? s : gen_result_rows(m, src, gr, o.threads, out, err);
}

/* Beam search up to max_len ids: every returned hypothesis with its rows (one forward
 * over each). */
static as_status run_beams(const as_model *m, const as_encoding *src, const as_encoding *seq, int max_len,
                           const gen_beam_opts *bo, gen_beam_rows *out, as_error *err) {
    gen_beam_result br = {0};
    as_status s = gen_beam_search(m, src, seq->ids, seq->n, max_len, bo, &br, err);
    if (!s) s = gen_beam_rows_init(m, src, &br, seq->n, bo->threads, 1, out, err);
    gen_beam_result_free(&br);
    return s;
}

/* {ids, generated_ids, tokens} of sequence r; NULL when out of memory. */
static json_t *seq_json(const as_model *m, const gen_beam_rows *g, int r) {
    as_encoding fin = {0};
    as_error err = {0};
    const int32_t *ids = g->seqs + (size_t)r * g->Tmax;
    if (as_encoding_from_ids(m, ids, NULL, g->lens[r], &fin, &err)) return NULL;
    json_t *ji = json_array(), *jg = json_array();
    for (int i = 0; i < g->lens[r]; i++) {
        json_array_append_new(ji, json_integer(ids[i]));
        if (i >= g->pl) json_array_append_new(jg, json_integer(ids[i]));
    }
    json_t *o = json_pack("{s:o, s:o, s:o}", "ids", ji, "generated_ids", jg, "tokens", as_tokens_json_value(m, &fin));
    as_encoding_free(&fin);
    return o;
}

/* meta's "probs" (each step's chosen id's probability) and, with top, "candidates" (each
 * step's most probable ids: id, text, prob) of a greedy or sampled generation gr. */
static void meta_probs(const as_model *m, const gen_result *gr, json_t *meta) {
    json_t *p = json_array(), *cands = gr->top ? json_array() : NULL;
    for (int st = 0; st < gr->steps; st++) {
        json_array_append_new(p, json_real(gr->probs[st]));
        json_t *row = cands ? json_array() : NULL;
        for (int i = 0; row && i < gr->top; i++) {
            int id = gr->top_ids[(size_t)st * gr->top + i];
            if (id < 0) break; /* past a vocabulary smaller than top */
            char *text = as_model_token_text(m, id), *clean = text ? as_utf8_clean(text) : NULL;
            json_array_append_new(row, json_pack("{s:i, s:s, s:f}", "id", id, "text", clean ? clean : "", "prob",
                                                 (double)gr->top_probs[(size_t)st * gr->top + i]));
            free(text);
            free(clean);
        }
        if (row) json_array_append_new(cands, row);
    }
    json_object_set_new(meta, "probs", p);
    if (cands) json_object_set_new(meta, "candidates", cands);
}

/* The reply: tensors attention and cross_attention of sequence 0 (and beam_attention /
 * beam_cross_attention of every hypothesis when there are several), the tokens and, for a
 * greedy or sampled generation gr (else NULL), each step's probabilities in meta. */
static void reply_generation(const srv_state *s, const gen_req *q, const as_encoding *src, const gen_beam_rows *g,
                             const gen_result *gr, srv_response *rs) {
    const as_model *m = s->models[q->model].m;
    int S0 = g->lens[0] - g->pl, T0 = g->lens[0];
    json_t *meta = seq_json(m, g, 0);
    if (!meta) {
        reply_error(rs, 500, "generate: out of memory");
        return;
    }
    json_object_update_new(meta, json_pack("{s:s, s:i, s:i, s:i, s:i, s:f, s:i, s:I, s:b, s:b, s:i}", "model",
                                           s->models[q->model].name, "prompt_length", g->pl, "steps", S0, "layers",
                                           g->L, "heads", g->H, "temperature", q->o.temperature, "top_k",
                                           q->o.top_k, "seed", (json_int_t)q->o.seed, "stop_at_eos",
                                           q->o.stop_eos || q->bo.beams > 1, "encoder_decoder", src != NULL,
                                           "beams", q->bo.beams));
    if (src) {
        json_t *sid = json_array();
        for (int i = 0; i < src->n; i++) json_array_append_new(sid, json_integer(src->ids[i]));
        json_object_set_new(meta, "source_ids", sid);
        json_object_set_new(meta, "source_tokens", as_tokens_json_value(m, src));
    }
    if (gr) meta_probs(m, gr, meta);
    if (q->bo.beams > 1) {
        json_t *hyps = json_array();
        for (int r = 0; r < g->R; r++) {
            json_t *h = seq_json(m, g, r);
            if (h) json_object_update_new(h, json_pack("{s:f, s:f}", "score", (double)g->scores[r], "sum_logprobs",
                                                          (double)g->sums[r]));
            json_array_append_new(hyps, h);
        }
        json_object_set_new(meta, "hypotheses", hyps);
        json_object_set_new(meta, "length_penalty", json_real(q->bo.length_penalty));
        json_object_set_new(meta, "early_stopping", json_boolean(q->bo.early_stopping));
    }
    const float *parts[4] = {g->best, g->xbest, g->rows, g->xrows};
    size_t step_heads = (size_t)S0 * g->L * g->H, all = (size_t)g->R * g->Smax * g->L * g->H;
    srv_tb_tensor t[4] = {
        {.name = "attention", .ndim = 4, .shape = {S0, g->L, g->H, T0}, .part_len = step_heads * T0},
        {.name = "cross_attention", .ndim = 4, .shape = {S0, g->L, g->H, g->Ts}, .part_len = step_heads * g->Ts},
        {.name = "beam_attention", .ndim = 5, .shape = {g->R, g->Smax, g->L, g->H, g->Tmax}, .part_len = all * g->Tmax},
        {.name = "beam_cross_attention", .ndim = 5, .shape = {g->R, g->Smax, g->L, g->H, g->Ts},
         .part_len = all * g->Ts}};
    srv_tb_tensor out[4];
    int n = 0;
    for (int i = 0; i < 4; i++) {
        if ((i & 1) && !src) continue;  /* cross-attention: encoder-decoder models only */
        if (i >= 2 && g->R < 2) continue; /* every hypothesis: beam search returning several */
        out[n] = t[i];
        out[n].dtype = (srv_tb_dtype)q->dtype;
        out[n].parts = &parts[i];
        out[n++].n_parts = 1;
    }
    reply_tensors(rs, out, n, meta);
}

/* The bytes of the rows a request may reply at f32: every step of max_new (bounded by the
 * model's positions), over the longest sequence and the source, once more per hypothesis
 * when beam search returns several. */
static double reply_bytes(const gen_req *q, const as_config *c, int n, int Ts, int steps) {
    int L = c->n_dec_layer ? c->n_dec_layer : c->n_layer, R = q->bo.num_return;
    return 4.0 * steps * L * c->n_head * (n + steps + Ts) * (R > 1 ? 1 + R : 1);
}

void gen_api_route(srv_state *s, const srv_request *rq, srv_response *rs) {
    json_t *root = NULL;
    gen_req q;
    as_encoding enc = {0}, dec = {0};
    gen_beam_rows g = {0};
    gen_result gr = {0};
    as_error err = {0};
    if (parse_body(s, rq, &root, &q, rs)) goto cleanup;
    const srv_model *sm = &s->models[q.model];
    const as_config *c = as_model_config(sm->m);
    as_encode_opts eo = {.max_len = 0, .truncate = 0};
    as_status st = q.ids ? as_encoding_from_ids(sm->m, q.ids, NULL, q.n_ids, &enc, &err)
                         : as_encode(sm->m, q.text, NULL, &eo, &enc, &err);
    if (st) {
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "%s: %s", q.ids ? "ids" : "text", err.msg);
        goto cleanup;
    }
    if (c->n_dec_layer) { /* the decoder's start: target_ids, or decoder_start_token_id */
        int32_t start = c->decoder_start_token_id;
        st = as_encoding_from_ids(sm->m, q.start ? q.start : &start, NULL, q.start ? q.n_start : 1, &dec, &err);
        if (st) {
            reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "target_ids: %s", err.msg);
            goto cleanup;
        }
    }
    const as_encoding *src = c->n_dec_layer ? &enc : NULL, *seq = c->n_dec_layer ? &dec : &enc;
    int max = as_model_max_tokens(sm->m), steps = q.o.max_new < max - seq->n ? q.o.max_new : max - seq->n;
    if (steps < 1) {
        reply_error(rs, 400, "the %s has %d tokens: no room left in the model's %d positions",
                    src ? "decoder's start" : "prompt", seq->n, max);
        goto cleanup;
    }
    double bytes = reply_bytes(&q, c, seq->n, src ? src->n : 0, steps);
    if (bytes > SRV_GEN_MAX_ROW_BYTES) {
        reply_error(rs, 413, "generate: up to %d steps of %d layers x %d heads over %d keys%s are %.0f bytes of rows, "
                    "over the %u of one reply (SRV_GEN_MAX_ROW_BYTES): ask for fewer tokens%s", steps,
                    c->n_dec_layer ? c->n_dec_layer : c->n_layer, c->n_head, seq->n + steps,
                    src ? " and the source" : "", bytes, SRV_GEN_MAX_ROW_BYTES,
                    q.bo.num_return > 1 ? " or hypotheses" : "");
        goto cleanup;
    }
    if (!api_admit(s, rs)) goto cleanup;
    q.o.threads = q.bo.threads = s->threads;
    pthread_mutex_lock(&s->fwd_mu);
    st = q.bo.beams > 1 ? run_beams(sm->m, src, seq, seq->n + steps, &q.bo, &g, &err)
                        : run_sample(sm->m, src, seq, q.o, &gr, &g, &err);
    pthread_mutex_unlock(&s->fwd_mu);
    api_leave(s);
    if (st) reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "generate: %s", err.msg);
    else reply_generation(s, &q, src, &g, q.bo.beams > 1 ? NULL : &gr, rs);
cleanup:
    gen_beam_rows_free(&g);
    gen_result_free(&gr);
    as_encoding_free(&dec);
    as_encoding_free(&enc);
    free(q.ids);
    free(q.start);
    json_decref(root);
}
