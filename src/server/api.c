/* api.c — the /api/v1 routes: list models, run a text (or pair) with the run cache,
 * fetch attention for layer/head ranges (whole, or max-pooled thumbnails with
 * server/maxpool.h) and q/k/scores for one head as binary tensors, streamed from the
 * cached run while they are sent (no copy; runs held by streams are bounded by the
 * cache), and masked-token predictions. A run is made from a text (or pair) or from
 * token ids (models without a tokenizer). Models and runs carry the description of the
 * attention block (block_json: key/value groups, masks, RoPE, soft-caps), and the qk
 * route of a rotary model adds q and k before the rotation. A long input (over
 * SRV_LONG_TOKENS tokens, or capture "stats,qkv") keeps no T x T: its attention is served
 * as pooled tiles recomputed from q and k, and every run's head statistics by the stats
 * route (server/tile_api.c). Every failure is a one-line
 * JSON error with a 4xx/5xx status; no request input can abort the process. Runs imported
 * from .npz files (server/npz_runs.h) have no model: the run, attention and qk routes
 * serve them, the routes that need a model answer 409, and GET /models lists them.
 * It does not speak HTTP (server.c does) and serves no files.
 */
#include "api.h"
#include "attrib_api.h"
#include "faith_api.h"
#include "db_api.h"
#include "gen_api.h"
#include "maps_api.h"
#include "maxpool.h"
#include "reply.h"
#include "tensor.h"
#include "tile_api.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

/* ---- the attention block's description ------------------------------------- */

/* Query head h's key/value head under config c (h itself without grouped-query attention). */
static int kv_group_of(const as_config *c, int h) {
    int hkv = c->n_kv_head > 0 ? c->n_kv_head : c->n_head;
    return h / (c->n_head / hkv);
}

/* Window of layer l: query i sees the keys i - w < j <= i; 0 = no window. */
static int layer_window(const as_config *c, int l) {
    return c->sliding_window > 0 && c->layer_sliding[l] ? c->sliding_window : 0;
}

/* Rotary base of layer l: Gemma 3's local base on its sliding layers, else rope_theta. */
static double layer_theta(const as_config *c, int l) {
    return c->rope_local_theta > 0 && c->layer_sliding[l] ? (double)c->rope_local_theta : (double)c->rope_theta;
}

/* What a view needs to know about the attention of n_layer layers of model c
 * (docs/api/api.schema.json, Block): key/value groups, the masks (causal, per-layer sliding
 * windows), the score's factor and soft-cap, and the rotary embedding (null without one).
 * n_layer is c->n_layer for a model's (encoder's) stack, c->n_dec_layer for an
 * encoder-decoder model's decoder and cross-attention; causal: the stack's mask. New reference. */
static json_t *block_json_of(const as_config *c, int n_layer, int causal) {
    json_t *kv = json_array(), *win = json_array(), *scale = json_array(), *rope = json_null();
    for (int h = 0; h < c->n_head; h++) json_array_append_new(kv, json_integer(kv_group_of(c, h)));
    for (int l = 0; l < n_layer; l++) {
        json_array_append_new(win, json_integer(layer_window(c, l)));
        json_array_append_new(scale, json_real((double)as_attn_scale(c, l)));
    }
    if (c->rope_dim > 0) {
        json_t *lt = json_array();
        for (int l = 0; l < n_layer; l++) json_array_append_new(lt, json_real(layer_theta(c, l)));
        rope = json_pack("{s:i, s:f, s:o, s:o, s:s, s:o}", "dim", c->rope_dim, "theta", (double)c->rope_theta,
                         "local_theta", c->rope_local_theta > 0 ? json_real((double)c->rope_local_theta) : json_null(),
                         "layer_theta", lt, "scaling", as_rope_scale_name(c->rope_scaling), "factor",
                         c->rope_scaling != ROPE_SCALE_NONE ? json_real((double)c->rope_factor) : json_null());
    }
    return json_pack("{s:i, s:o, s:b, s:o, s:o, s:f, s:f, s:o}", "n_kv_head", c->n_kv_head > 0 ? c->n_kv_head : c->n_head,
                     "kv_group", kv, "causal", causal != 0, "window", win, "scale", scale, "attn_softcap",
                     (double)c->attn_softcap, "final_softcap", (double)c->final_softcap, "rope", rope);
}

static json_t *block_json(const as_config *c) { return block_json_of(c, c->n_layer, c->causal); }

/* ---- models ---------------------------------------------------------------- */

static json_t *model_json(const srv_model *sm) {
    const as_config *c = as_model_config(sm->m);
    unsigned heads = as_model_heads(sm->m);
    json_t *hp = json_array();
    if (heads & HEAD_CLASSIFIER) json_array_append_new(hp, json_string("classifier"));
    if (heads & HEAD_MLM) json_array_append_new(hp, json_string("mlm"));
    if (heads & HEAD_LM) json_array_append_new(hp, json_string("lm"));
    json_t *labels = json_array(); /* (C) the config's id2label names; [] when it has none */
    for (int i = 0; c->id2label && i < c->num_labels; i++)
        json_array_append_new(labels, c->id2label[i] ? as_json_string_utf8(c->id2label[i]) : json_null());
    /* an encoder-decoder model's two stacks (same heads and width); null for one stack */
    json_t *stacks = c->n_dec_layer > 0
                         ? json_pack("{s:{s:i, s:i}, s:{s:i, s:i}}", "encoder", "layers", c->n_layer, "heads", c->n_head,
                                     "decoder", "layers", c->n_dec_layer, "heads", c->n_head)
                         : json_null();
    return json_pack("{s:b, s:o, s:o, s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:b, s:o, s:s, s:s, s:I, s:o}",
                     "encoder_decoder", c->n_dec_layer > 0, "stacks", stacks, "block", block_json(c), "name", sm->name, "arch", as_arch_name(c->arch), "model_type", c->model_type,
                     "layers", c->n_layer, "heads", c->n_head, "d_model", c->d_model, "d_head",
                     c->d_head, "vocab_size", c->vocab_size, "max_tokens", as_model_max_tokens(sm->m),
                     "type_vocab", c->type_vocab, "causal", c->causal != 0, "tokenizer",
                     as_model_has_tokenizer(sm->m) != 0, "heads_present", hp, "dtype",
                     as_dtype_name(as_model_dtype(sm->m)), "precision", as_precision_name(as_model_precision(sm->m)),
                     "n_params", (json_int_t)as_model_n_params(sm->m), "labels", labels);
}

static void route_models(srv_state *s, srv_response *rs) {
    json_t *arr = json_array();
    for (int i = 0; i < s->n_models; i++) json_array_append_new(arr, model_json(&s->models[i]));
    json_t *lim = json_pack("{s:i, s:i, s:i, s:I, s:i}", "max_body_bytes", (int)SRV_MAX_BODY_BYTES,
                            "max_active_runs", s->max_active, "max_cached_runs", s->cache.max_entries,
                            "max_cache_bytes", (json_int_t)s->cache.max_bytes, "max_topk", SRV_MAX_TOPK);
    json_t *imported = json_array(); /* the --attention files' runs (server/npz_runs.h) */
    for (int i = 0; i < s->npz.n; i++)
        json_array_append_new(imported, srv_npz_run_json(&s->npz.runs[i], s->npz.runs[i].entry.id));
    reply_json(rs, 200, json_pack("{s:s, s:o, s:o, s:b, s:o}", "version", AS_VERSION, "models", arr, "limits", lim,
                                  "db", s->db != NULL, "imported", imported));
}

/* ---- request bodies --------------------------------------------------------- */

typedef struct {
    json_t *root;
    int model;
    const char *text, *text_b; /* borrowed from root; text is the cache key for ids */
    int32_t *ids;              /* owned: (n_ids) token ids, or NULL for a text */
    int n_ids;
    char *key;                 /* owned: the cache key of ids (SRV_IDS_KEY, then the ids) */
    /* an encoder-decoder model's decoder input: target text (borrowed from root) or target_ids */
    const char *target;        /* the cache key of the target: its text or tgt_key; NULL for one stack */
    int32_t *tgt_ids;          /* owned: (n_tgt) decoder input ids, or NULL for a target text */
    int n_tgt;
    char *tgt_key;             /* owned: SRV_IDS_KEY, then the target ids */
} run_req;

static void run_req_free(run_req *q) {
    json_decref(q->root);
    free(q->ids);
    free(q->key);
    free(q->tgt_ids);
    free(q->tgt_key);
}

/* Parses the array ja of field `field` into *ids (n) and its cache key *key = SRV_IDS_KEY
 * "1,5,9" (both malloc'd, owned by the caller). Returns 0, or sets a 400 and returns -1. */
static int parse_id_array(const json_t *ja, const char *field, int max, int32_t **ids, int *n_out, char **key,
                          srv_response *rs) {
    size_t n = json_is_array(ja) ? json_array_size(ja) : 0;
    if (!json_is_array(ja) || n == 0 || n > (size_t)max) {
        reply_error(rs, 400, "field '%s': expected an array of 1 to %d token ids", field, max);
        return -1;
    }
    *ids = malloc(n * sizeof **ids);
    *key = malloc(n * 11 + sizeof SRV_IDS_KEY);
    if (!*ids || !*key) {
        reply_error(rs, 500, "out of memory");
        return -1;
    }
    char *k = *key + sprintf(*key, "%s", SRV_IDS_KEY);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ja, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
            reply_error(rs, 400, "field '%s': element %zu is not a token id (an integer >= 0)", field, i);
            return -1;
        }
        (*ids)[i] = (int32_t)json_integer_value(v);
        k += sprintf(k, i ? ",%d" : "%d", (int)(*ids)[i]);
    }
    *n_out = (int)n;
    return 0;
}

/* Parses the array ids into q (ids, n_ids, and text = key = SRV_IDS_KEY "1,5,9"). Returns 0,
 * or sets a 400 and returns -1. */
static int parse_ids(const json_t *ja, int max, run_req *q, srv_response *rs) {
    if (parse_id_array(ja, "ids", max, &q->ids, &q->n_ids, &q->key, rs)) return -1;
    q->text = q->key;
    return 0;
}

static int model_has_text(const srv_model *sm, const char *what, srv_response *rs) {
    if (as_model_has_tokenizer(sm->m)) return 1;
    const char *why = as_model_tokenizer_problem(sm->m);
    if (why) reply_error(rs, 400, "model '%s' cannot take %s: %s", sm->name, what, why);
    else reply_error(rs, 400, "model '%s' has no tokenizer files; it cannot take %s", sm->name, what);
    return 0;
}

/* The decoder's input of an encoder-decoder model: "target" (text, encoded and shifted right
 * as for teacher forcing) or "target_ids" (the decoder input ids as given), exactly one of
 * them; either is a 400 on a model with one stack. Returns 0, or sets a 400 and returns -1. */
static int parse_target(const srv_model *sm, run_req *q, srv_response *rs) {
    json_t *jt = json_object_get(q->root, "target"), *ji = json_object_get(q->root, "target_ids");
    int has_t = jt && !json_is_null(jt), has_i = ji && !json_is_null(ji);
    const as_config *c = as_model_config(sm->m);
    if (c->n_dec_layer <= 0) {
        if (has_t || has_i)
            reply_error(rs, 400, "field '%s': model '%s' (%s) is not encoder-decoder; target and target_ids apply to "
                        "encoder-decoder models only", has_t ? "target" : "target_ids", sm->name, c->model_type);
        return has_t || has_i ? -1 : 0;
    }
    if (has_t && has_i) {
        reply_error(rs, 400, "field 'target_ids': give either target or target_ids, not both");
        return -1;
    }
    if (!has_t && !has_i) {
        reply_error(rs, 400, "field 'target': missing: model '%s' (%s) is encoder-decoder; give the decoder's input "
                    "as target (text) or target_ids", sm->name, c->model_type);
        return -1;
    }
    if (has_i) {
        if (parse_id_array(ji, "target_ids", as_model_max_tokens(sm->m), &q->tgt_ids, &q->n_tgt, &q->tgt_key, rs))
            return -1;
        q->target = q->tgt_key;
        return 0;
    }
    if (!json_is_string(jt) || !*json_string_value(jt)) {
        reply_error(rs, 400, "field 'target': expected a non-empty string (or give target_ids)");
        return -1;
    }
    if (!model_has_text(sm, "a target text", rs)) return -1;
    q->target = json_string_value(jt);
    return 0;
}

/* Parses {model, text, text_b?} or {model, ids} into q. Returns 0, or sets a 400 and
 * returns -1; run_req_free(q) either way. */
static int parse_run_body(srv_state *s, const srv_request *rq, run_req *q, srv_response *rs) {
    memset(q, 0, sizeof *q);
    if (!rq->body || !rq->body_len) {
        reply_error(rs, 400, "request body: expected a JSON object");
        return -1;
    }
    json_error_t je;
    q->root = json_loadb(rq->body, rq->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!q->root) {
        reply_error(rs, 400, "request body: invalid JSON at byte %d: %s", je.position, je.text);
        return -1;
    }
    if (!json_is_object(q->root)) {
        reply_error(rs, 400, "request body: expected a JSON object");
        return -1;
    }
    json_t *jm = json_object_get(q->root, "model"), *jt = json_object_get(q->root, "text"),
           *jb = json_object_get(q->root, "text_b"), *ji = json_object_get(q->root, "ids");
    if (!jm) {
        reply_error(rs, 400, "field 'model': missing");
        return -1;
    }
    if (!json_is_string(jm)) {
        reply_error(rs, 400, "field 'model': expected a string");
        return -1;
    }
    q->model = -1;
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(s->models[i].name, json_string_value(jm))) q->model = i;
    if (q->model < 0) {
        json_t *n = as_json_string_utf8(json_string_value(jm));
        reply_error(rs, 400, "field 'model': unknown model '%.100s' (GET /api/v1/models lists them)",
                  json_string_value(n) ? json_string_value(n) : "");
        json_decref(n);
        return -1;
    }
    if (ji && !json_is_null(ji)) { /* token ids: any model, with or without a tokenizer */
        if ((jt && !json_is_null(jt)) || (jb && !json_is_null(jb))) {
            reply_error(rs, 400, "field 'ids': give either ids or text (and text_b), not both");
            return -1;
        }
        return parse_ids(ji, as_model_max_tokens(s->models[q->model].m), q, rs) ||
               parse_target(&s->models[q->model], q, rs);
    }
    if (!jt || !json_is_string(jt)) {
        reply_error(rs, 400, "field 'text': %s", jt ? "expected a string" : "missing (or give ids)");
        return -1;
    }
    q->text = json_string_value(jt);
    if (jb && !json_is_null(jb)) {
        if (!json_is_string(jb)) {
            reply_error(rs, 400, "field 'text_b': expected a string or null");
            return -1;
        }
        q->text_b = json_string_value(jb);
        if (!*q->text_b) q->text_b = NULL; /* "" means no second sentence */
    }
    if (!model_has_text(&s->models[q->model], "text", rs)) return -1;
    return parse_target(&s->models[q->model], q, rs);
}

/* ---- admission: at most max_active runs at once --------------------------- */

int api_admit(srv_state *s, srv_response *rs) {
    pthread_mutex_lock(&s->admit_mu);
    int ok = s->active < s->max_active;
    if (ok) s->active++;
    pthread_mutex_unlock(&s->admit_mu);
    if (!ok) {
        reply_error(rs, 503, "too many concurrent runs (limit %d); retry shortly", s->max_active);
        rs->retry_after = 1;
    }
    return ok;
}

void api_leave(srv_state *s) {
    pthread_mutex_lock(&s->admit_mu);
    s->active--;
    pthread_mutex_unlock(&s->admit_mu);
}

as_status api_forward(srv_state *s, const as_model *m, const as_encoding *enc, unsigned what,
                      as_run **out, as_error *err) {
    as_capture_spec spec = {.what = what, .layer = -1, .head = -1, .threads = s->threads};
    pthread_mutex_lock(&s->fwd_mu);
    if (s->test_delay_ms > 0) {
        struct timespec ts = {s->test_delay_ms / 1000, (long)(s->test_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    as_status st = as_forward(m, enc, &spec, out, err);
    pthread_mutex_unlock(&s->fwd_mu);
    return st;
}

/* api_forward for an encoder-decoder model: the encoder on enc, the decoder on dec. */
static as_status api_forward_seq2seq(srv_state *s, const as_model *m, const as_encoding *enc,
                                     const as_encoding *dec, unsigned what, as_run **out, as_error *err) {
    as_capture_spec spec = {.what = what, .layer = -1, .head = -1, .threads = s->threads};
    pthread_mutex_lock(&s->fwd_mu);
    as_status st = as_forward_seq2seq(m, enc, dec, &spec, out, err);
    pthread_mutex_unlock(&s->fwd_mu);
    return st;
}

/* Encodes the text without truncation (longer than the model's positions is a 400), or
 * takes the ids as they are (an id outside the vocabulary is a 400). */
static int encode(const srv_model *sm, const run_req *q, as_encoding *enc, srv_response *rs) {
    as_error err = {0};
    as_encode_opts eo = {.max_len = 0, .truncate = 0};
    as_status st = q->ids ? as_encoding_from_ids(sm->m, q->ids, NULL, q->n_ids, enc, &err)
                          : as_encode(sm->m, q->text, q->text_b, &eo, enc, &err);
    if (st == AS_OK) return 0;
    reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "%s: %s", q->ids ? "ids" : "text", err.msg);
    return -1;
}

/* The decoder input of q's target: the text encoded as a target (the model's special
 * tokens; Marian's target.spm) and shifted right, or the target ids as they are. */
static int encode_target(const srv_model *sm, const run_req *q, as_encoding *dec, srv_response *rs) {
    as_error err = {0};
    as_encode_opts eo = {.max_len = 0, .truncate = 0};
    as_encoding labels = {0};
    as_status st = q->tgt_ids ? as_encoding_from_ids(sm->m, q->tgt_ids, NULL, q->n_tgt, dec, &err)
                              : as_encode_target(sm->m, q->target, &eo, &labels, &err);
    if (st == AS_OK && !q->tgt_ids) st = as_seq2seq_shift_target(sm->m, &labels, dec, &err);
    as_encoding_free(&labels);
    if (st == AS_OK) return 0;
    reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "%s: %s", q->tgt_ids ? "target_ids" : "target", err.msg);
    return -1;
}

/* ---- runs -------------------------------------------------------------------- */

static json_t *run_json(const srv_state *s, const srv_entry *e, int cached) {
    if (e->npz) return srv_npz_run_json(e->npz, e->id);
    const srv_model *sm = &s->models[e->model];
    const as_config *c = as_model_config(sm->m);
    const as_run *r = e->run;
    int from_ids = srv_entry_from_ids(e);
    json_t *sizes = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "tokens", r->T, "layers", r->L, "heads", r->H,
                              "kv_heads", r->Hkv, "d_model", r->D, "d_head", r->Dh);
    json_t *ids = json_null(), *block = block_json(c), *kv = json_array();
    if (from_ids) {
        ids = json_array();
        for (int i = 0; i < e->enc.n; i++) json_array_append_new(ids, json_integer(e->enc.ids[i]));
    }
    for (int h = 0; h < r->H; h++) json_array_append_new(kv, json_integer(as_run_kv_group(r, h)));
    json_object_set_new(block, "kv_group", kv); /* the run's own record of the groups */
    json_t *decoder = json_null();
    if (r->dec && r->cross) { /* encoder-decoder: the decoder's input and both blocks */
        json_t *dids = json_array();
        for (int i = 0; i < e->dec.n; i++) json_array_append_new(dids, json_integer(e->dec.ids[i]));
        int tgt_ids = e->target && !strncmp(e->target, SRV_IDS_KEY, sizeof SRV_IDS_KEY - 1);
        decoder = json_pack("{s:o, s:o, s:o, s:i, s:o, s:o}", "target",
                            tgt_ids || !e->target ? json_null() : as_json_string_utf8(e->target), "input_ids", dids,
                            "tokens", as_tokens_json_value(sm->m, &e->dec), "layers", r->dec->L, "block", block_json_of(c, r->dec->L, 1), "cross_block",
                            block_json_of(c, r->dec->L, 0));
    }
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:o, s:o, s:o, s:b, s:o, s:o, s:o, s:o, s:b, s:o}", "capture",
                     r->attn ? "dense" : "stats,qkv", "id", e->id, "model",
                     sm->name, "arch", as_arch_name(c->arch), "model_type", c->model_type, "cached", cached, "text",
                     from_ids ? json_string("") : as_json_string_utf8(e->text), "text_b",
                     as_json_string_utf8(e->text_b), "ids", ids, "causal", c->causal != 0, "sizes", sizes, "block",
                     block, "tokens", as_tokens_json_value(sm->m, &e->enc), "warning",
                     e->enc.n_warnings ? as_json_string_utf8(e->enc.warning) : json_null(), "encoder_decoder",
                     r->dec && r->cross, "decoder", decoder);
}

/* The body's "capture" (absent or "auto", "dense", "stats,qkv") as SRV_CAPTURE_*; -1
 * after setting a 400. */
static int parse_capture(const run_req *q, srv_response *rs) {
    json_t *jc = json_object_get(q->root, "capture");
    const char *c = jc ? json_string_value(jc) : "auto";
    if (c && !strcmp(c, "auto")) return SRV_CAPTURE_AUTO;
    if (c && !strcmp(c, "dense")) return SRV_CAPTURE_DENSE;
    if (c && !strcmp(c, "stats,qkv")) return SRV_CAPTURE_STATS;
    reply_error(rs, 400, "field 'capture': expected \"auto\", \"dense\" or \"stats,qkv\"");
    return -1;
}

/* What a run of T tokens captures: dense attention, scores, q/k/v and statistics (the
 * thumbs route pools the dense attention when asked), or for a long input (auto over
 * SRV_LONG_TOKENS) only q/k/v, statistics and the forward's thumbnails, O(T) per head. */
static unsigned capture_what(int capture, int T) {
    int dense = capture == SRV_CAPTURE_DENSE || (capture == SRV_CAPTURE_AUTO && T <= SRV_LONG_TOKENS);
    return dense ? CAP_ATTN | CAP_SCORES | CAP_QKV | CAP_STATS : CAP_QKV | CAP_STATS | CAP_THUMBS;
}

static void route_run(srv_state *s, const srv_request *rq, srv_response *rs) {
    run_req q;
    as_encoding enc = {0}, dec = {0};
    srv_entry *e = NULL;
    int capture;
    if (parse_run_body(s, rq, &q, rs) || (capture = parse_capture(&q, rs)) < 0) goto cleanup;
    if (q.target && capture == SRV_CAPTURE_STATS) {
        reply_error(rs, 400, "field 'capture': an encoder-decoder run keeps its dense attention (\"auto\" or "
                    "\"dense\"), not \"stats,qkv\"");
        goto cleanup;
    }
    e = srv_cache_find_target(&s->cache, q.model, q.text, q.text_b, q.target, capture);
    if (e) {
        reply_json(rs, 200, run_json(s, e, 1));
        goto cleanup;
    }
    const srv_model *sm = &s->models[q.model];
    if (encode(sm, &q, &enc, rs) || (q.target && encode_target(sm, &q, &dec, rs))) goto cleanup;
    if (q.target && (enc.n > SRV_LONG_TOKENS || dec.n > SRV_LONG_TOKENS)) {
        reply_error(rs, 400, "%s: %d tokens; an encoder-decoder run keeps every attention matrix and takes at most %d "
                    "source and %d target tokens", enc.n > SRV_LONG_TOKENS ? "text" : "target",
                    enc.n > SRV_LONG_TOKENS ? enc.n : dec.n, SRV_LONG_TOKENS, SRV_LONG_TOKENS);
        goto cleanup;
    }
    if (!api_admit(s, rs)) goto cleanup;
    as_error err = {0};
    as_run *run = NULL;
    as_status st = q.target ? api_forward_seq2seq(s, sm->m, &enc, &dec, capture_what(SRV_CAPTURE_DENSE, enc.n), &run,
                                                  &err)
                            : api_forward(s, sm->m, &enc, capture_what(capture, enc.n), &run, &err);
    api_leave(s);
    if (st) {
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "run: %s", err.msg);
        goto cleanup;
    }
    srv_entry *ne = calloc(1, sizeof *ne);
    char *t = as_strdup(q.text), *tb = q.text_b ? as_strdup(q.text_b) : NULL,
         *tg = q.target ? as_strdup(q.target) : NULL;
    if (!ne || !t || (q.text_b && !tb) || (q.target && !tg)) {
        free(ne);
        free(t);
        free(tb);
        free(tg);
        as_run_free(run);
        reply_error(rs, 500, "out of memory");
        goto cleanup;
    }
    ne->model = q.model;
    ne->capture = capture;
    ne->text = t;
    ne->text_b = tb;
    ne->target = tg;
    ne->enc = enc;
    ne->dec = dec;
    memset(&enc, 0, sizeof enc);
    memset(&dec, 0, sizeof dec);
    ne->run = run;
    e = srv_cache_put(&s->cache, ne);
    reply_json(rs, 200, run_json(s, e, 0));
cleanup:
    srv_cache_release(&s->cache, e);
    as_encoding_free(&enc);
    as_encoding_free(&dec);
    run_req_free(&q);
}

/* ---- tensors for a cached run ------------------------------------------------ */

/* Keys per attention row of run r: the source's tokens in cross-attention, else T. */
static int run_keys(const as_run *r) { return r->Tk > 0 ? r->Tk : r->T; }

/* The run that query "kind" names (encoder, the default: the run itself; decoder;
 * cross) of entry e, its name in *kind; NULL after a 400 for an unknown kind, or decoder /
 * cross on a run that is not encoder-decoder. */
static const as_run *run_of_kind(const srv_entry *e, const srv_request *rq, const char **kind, srv_response *rs) {
    const char *k = reply_query(rq, "kind");
    const as_run *r = e->run;
    *kind = k ? k : "encoder";
    if (!k || !strcmp(k, "encoder")) return r;
    if (strcmp(k, "decoder") && strcmp(k, "cross")) {
        reply_error(rs, 400, "query 'kind': expected encoder, decoder or cross");
        return NULL;
    }
    if (!r->dec || !r->cross) {
        reply_error(rs, 400, "query 'kind': run %s is not encoder-decoder; only kind=encoder (the default) applies",
                    e->id);
        return NULL;
    }
    return !strcmp(k, "decoder") ? r->dec : r->cross;
}

/* A binary tensor response encoded from a cached run while it is sent, block by
 * block, so no copy of the tensors is made. It holds a stream reference on its
 * cache entry (srv_cache_stream_begin): the run stays in memory until the response
 * ends, even if it is evicted meanwhile. */
typedef struct {
    srv_cache *cache;
    srv_entry *e;                        /* stream reference, or NULL */
    srv_tb_tensor t[SRV_TB_MAX_TENSORS]; /* (n) */
    int n;
    const float *one[SRV_TB_MAX_TENSORS]; /* single-part sources, t[i].parts = &one[i] */
    const float **parts;                 /* owned: (layers x heads) pointers into the run */
    srv_tb_plan plan;
    const as_run *run;                   /* pooled attention: one head's thumbnail at a time */
    int l0, h0, nh, P, Pc, cur;          /* P rows and Pc columns of a thumbnail */
    float *pool_buf, *scratch;           /* owned: (P, Pc) and (Tk) */
} tensor_stream;

static void stream_free(void *ctx) {
    tensor_stream *ts = ctx;
    srv_tb_plan_free(&ts->plan);
    if (ts->e) srv_cache_stream_end(ts->cache, ts->e);
    free(ts->parts);
    free(ts->pool_buf);
    free(ts->scratch);
    free(ts);
}

static ssize_t stream_read(void *ctx, uint64_t pos, char *buf, size_t max) {
    tensor_stream *ts = ctx;
    size_t n = pos < ts->plan.total ? srv_tb_plan_read(&ts->plan, (size_t)pos, (unsigned char *)buf, max) : 0;
    return n ? (ssize_t)n : SRV_STREAM_ERROR;
}

/* Part p of a pooled tensor: head p of the requested block, max-pooled on demand. */
static const float *stream_pooled_part(void *ctx, int p) {
    tensor_stream *ts = ctx;
    if (p != ts->cur) {
        srv_maxpool_rect(as_run_attn(ts->run, ts->l0 + p / ts->nh, ts->h0 + p % ts->nh), ts->run->T,
                         run_keys(ts->run), ts->P, ts->Pc, ts->pool_buf, ts->scratch);
        ts->cur = p;
    }
    return ts->pool_buf;
}

/* A stream on e for the caller to fill (t, n, parts), or NULL with rs set: 500 when
 * out of memory, 503 with Retry-After when the runs held by streamed responses are
 * at the cache's byte bound. */
static tensor_stream *stream_new(srv_state *s, srv_entry *e, srv_response *rs) {
    tensor_stream *ts = calloc(1, sizeof *ts);
    if (!ts) {
        reply_error(rs, 500, "out of memory");
        return NULL;
    }
    ts->cache = &s->cache;
    ts->cur = -1;
    if (!srv_cache_stream_begin(&s->cache, e)) {
        free(ts);
        reply_error(rs, 503, "responses in progress already hold %zu MiB of runs (the cache bound, --cache-mb); "
                  "retry shortly", s->cache.max_bytes >> 20);
        rs->retry_after = 1;
        return NULL;
    }
    ts->e = e;
    return ts;
}

/* Sets rs to the streamed container of ts's tensors (ts and meta stolen). */
static void reply_stream(srv_response *rs, tensor_stream *ts, json_t *meta) {
    as_error err = {0};
    as_status st = srv_tb_plan_init(&ts->plan, ts->t, ts->n, meta, &err);
    json_decref(meta);
    if (st) {
        stream_free(ts);
        reply_error(rs, 500, "%s", err.msg);
        return;
    }
    reply_reset(rs);
    rs->status = 200;
    rs->mime = REPLY_TENSOR_MIME;
    rs->stream = (srv_stream){.size = ts->plan.total, .read = stream_read, .free = stream_free, .ctx = ts};
}

/* Parses a decimal integer in [lo, hi] (digits only, no sign or spaces); -1 otherwise. */
static int parse_int_in(const char *s, int lo, int hi, int *out) {
    if (!s || !*s || strlen(s) > 9 || strspn(s, "0123456789") != strlen(s)) return -1;
    long v = strtol(s, NULL, 10);
    if (v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

/* attention?layers=a-b&heads=c-d&dtype=f16|u8|f32[&pool=N]: the attention of a
 * layer/head range, whole (T, T) per head or, with pool, max-pooled to (P, P),
 * P = min(N, T), SRV_POOL_MIN <= N <= SRV_POOL_MAX. Reads the cached run only. */
static void route_attention(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    const char *kind;
    const as_run *r = run_of_kind(e, rq, &kind, rs);
    if (!r) return;
    int l0, l1, h0, h1, pool = 0, Tk = run_keys(r);
    if (reply_query_layers_heads(rq, r->L, r->H, &l0, &l1, &h0, &h1, rs)) return;
    int dt = srv_tb_dtype_parse(reply_query(rq, "dtype"));
    if (dt < 0) {
        reply_error(rs, 400, "query 'dtype': expected f16, u8 or f32");
        return;
    }
    const char *qp = reply_query(rq, "pool");
    if (qp && parse_int_in(qp, SRV_POOL_MIN, SRV_POOL_MAX, &pool)) {
        reply_error(rs, 400, "query 'pool': expected an integer in [%d, %d]", SRV_POOL_MIN, SRV_POOL_MAX);
        return;
    }
    int nl = l1 - l0 + 1, nh = h1 - h0 + 1;
    if (!r->attn) {
        reply_error(rs, 400, "run %s is a long run (capture stats,qkv: no T x T kept); use .../tile", e->id);
        return;
    }
    for (int l = l0; l <= l1; l++)
        for (int h = h0; h <= h1; h++)
            if (!as_run_attn(r, l, h)) {
                reply_error(rs, 500, "run %s: layer %d head %d was not captured", e->id, l, h);
                return;
            }
    int side = pool ? srv_maxpool_size(r->T, pool) : r->T, cols = pool ? srv_maxpool_size(Tk, pool) : Tk;
    size_t per = (size_t)side * (size_t)cols;
    tensor_stream *ts = stream_new(s, e, rs);
    if (!ts) return;
    srv_tb_tensor *t = &ts->t[0];
    *t = (srv_tb_tensor){.name = "attention", .dtype = (srv_tb_dtype)dt, .ndim = 4, .shape = {nl, nh, side, cols},
                         .n_parts = nl * nh, .part_len = per};
    ts->n = 1;
    if (pool) {
        ts->run = r;
        ts->l0 = l0;
        ts->h0 = h0;
        ts->nh = nh;
        ts->P = side;
        ts->Pc = cols;
        ts->pool_buf = as_malloc_array(per, sizeof(float));
        ts->scratch = as_malloc_array((size_t)Tk, sizeof(float));
        t->part_fn = stream_pooled_part;
        t->part_ctx = ts;
    } else {
        ts->parts = malloc(sizeof *ts->parts * (size_t)nl * (size_t)nh);
        if (ts->parts)
            for (int l = 0; l < nl; l++)
                for (int h = 0; h < nh; h++) ts->parts[l * nh + h] = as_run_attn(r, l0 + l, h0 + h);
        t->parts = ts->parts;
    }
    if (pool ? !ts->pool_buf || !ts->scratch : !ts->parts) {
        stream_free(ts);
        reply_error(rs, 500, "out of memory");
        return;
    }
    json_t *meta = json_pack("{s:s, s:[i,i], s:[i,i], s:i}", "run", e->id, "layers", l0, l1, "heads", h0, h1,
                             "tokens", r->T);
    if (meta) { /* the kind, and the keys per row (the source's tokens in cross-attention) */
        json_object_set_new(meta, "kind", json_string(kind));
        json_object_set_new(meta, "keys", json_integer(Tk));
    }
    if (meta && pool) {
        json_object_set_new(meta, "pool", json_integer(side));
        if (cols != side) json_object_set_new(meta, "pool_keys", json_integer(cols));
        json_object_set_new(meta, "pool_op", json_string("max"));
    }
    reply_stream(rs, ts, meta);
}

static int parse_index(const char *s, int n, int *out) {
    int lo, hi;
    if (!s || reply_parse_range(s, n, &lo, &hi) || lo != hi) return -1;
    *out = lo;
    return 0;
}

static void route_qk(srv_state *s, srv_entry *e, const srv_request *rq, srv_response *rs) {
    const char *kind;
    const as_run *r = run_of_kind(e, rq, &kind, rs);
    if (!r) return;
    int l, h, Tk = run_keys(r);
    if (parse_index(reply_query(rq, "layer"), r->L, &l)) {
        reply_error(rs, 400, "query 'layer': expected an integer in [0, %d)", r->L);
        return;
    }
    if (parse_index(reply_query(rq, "head"), r->H, &h)) {
        reply_error(rs, 400, "query 'head': expected an integer in [0, %d)", r->H);
        return;
    }
    const float *q = as_run_q(r, l, h), *k = as_run_k(r, l, h), *sc = as_run_scores(r, l, h),
                *at = as_run_attn(r, l, h);
    if (!r->attn) {
        reply_error(rs, 400, "run %s is a long run (capture stats,qkv: no T x T kept); use .../tile", e->id);
        return;
    }
    if (e->npz && !e->npz->a.neuron) {
        reply_error(rs, 409, "run %s is attention imported from %s, which has no queries, keys and attention_scores: "
                    "the neuron view needs them", e->id, e->npz->name);
        return;
    }
    if (!q || !k || !sc || !at) {
        reply_error(rs, 500, "run %s: layer %d head %d was not captured", e->id, l, h);
        return;
    }
    size_t T = (size_t)r->T, Dh = (size_t)r->Dh, K = (size_t)Tk;
    /* a rotary model's q and k before the rotation, laid out as q and k (run_npz.c's
       queries_pre_rope / keys_pre_rope) */
    const float *qp = NULL, *kp = NULL;
    if (r->q_pre && r->k_pre && l >= r->layer_lo && l < r->layer_lo + r->n_lay && h >= r->head_lo &&
        h < r->head_lo + r->n_hd) {
        size_t off = ((size_t)(l - r->layer_lo) * (size_t)r->n_hd + (size_t)(h - r->head_lo)) * T * Dh;
        qp = r->q_pre + off;
        kp = r->k_pre + off;
    }
    tensor_stream *ts = stream_new(s, e, rs);
    if (!ts) return;
    const char *names[6] = {"q", "k", "scores", "attention", "q_pre_rope", "k_pre_rope"};
    const float *src[6] = {q, k, sc, at, qp, kp};
    ts->n = qp ? 6 : 4;
    for (int i = 0; i < ts->n; i++) {
        int vec = i < 2 || i >= 4; /* q: (T, Dh); k: (Tk, Dh); scores, attention: (T, Tk) */
        int rows = i == 1 ? Tk : r->T;
        ts->one[i] = src[i];
        ts->t[i] = (srv_tb_tensor){.name = names[i], .dtype = TB_F32, .ndim = 2,
                                   .shape = {rows, vec ? r->Dh : Tk}, .parts = &ts->one[i], .n_parts = 1,
                                   .part_len = vec ? (size_t)rows * Dh : T * K};
    }
    const as_config *c = e->npz ? NULL : as_model_config(s->models[e->model].m);
    json_t *meta = json_pack("{s:s, s:i, s:i, s:i, s:i, s:f, s:i, s:i, s:b, s:f}", "run", e->id, "layer", l, "head",
                             h, "tokens", r->T, "d_head", r->Dh, "scale",
                             c ? (double)as_attn_scale(c, l) : (double)e->npz->a.scale[l], "kv_group",
                             c ? as_run_kv_group(r, h) : e->npz->a.kv_group[h], "window", c ? layer_window(c, l) : 0,
                             "rope", qp != NULL, "softcap", c ? (double)c->attn_softcap : 0.0);
    if (meta) {
        json_object_set_new(meta, "kind", json_string(kind));
        json_object_set_new(meta, "keys", json_integer(Tk));
    }
    reply_stream(rs, ts, meta);
}

/* ---- masked-token predictions --------------------------------------------------- */

static int is_mask_piece(const char *p) { return p && (!strcmp(p, "[MASK]") || !strcmp(p, "<mask>")); }

static void route_mlm(srv_state *s, const srv_request *rq, srv_response *rs) {
    run_req q;
    as_encoding enc = {0};
    as_run *run = NULL;
    json_t *preds = NULL;
    if (parse_run_body(s, rq, &q, rs)) goto cleanup;
    const srv_model *sm = &s->models[q.model];
    int k = 5;
    json_t *jk = json_object_get(q.root, "k");
    if (jk) {
        if (!json_is_integer(jk) || json_integer_value(jk) < 1 || json_integer_value(jk) > SRV_MAX_TOPK) {
            reply_error(rs, 400, "field 'k': expected an integer in [1, %d]", SRV_MAX_TOPK);
            goto cleanup;
        }
        k = (int)json_integer_value(jk);
    }
    if (!(as_model_heads(sm->m) & HEAD_MLM)) {
        reply_error(rs, 400, "model '%s' has no masked-language-model head", sm->name);
        goto cleanup;
    }
    if (encode(sm, &q, &enc, rs)) goto cleanup;
    int n_mask = 0;
    for (int i = 0; i < enc.n; i++) n_mask += is_mask_piece(enc.pieces ? enc.pieces[i] : NULL);
    if (!n_mask) {
        reply_error(rs, 400, "text: no mask token ([MASK] or <mask>) found");
        goto cleanup;
    }
    if (!api_admit(s, rs)) goto cleanup;
    as_error err = {0};
    as_status st = api_forward(s, sm->m, &enc, CAP_LOGITS, &run, &err);
    api_leave(s);
    if (st) {
        reply_error(rs, st == AS_ERR_INPUT ? 400 : 500, "run: %s", err.msg);
        goto cleanup;
    }
    if (!run->logits || run->logits_head != HEAD_MLM || run->logits_rows != enc.n) {
        reply_error(rs, 400, "model '%s': its logits come from another task head, not the masked-LM head",
                  sm->name);
        goto cleanup;
    }
    int V = run->logits_cols;
    if (k > V) k = V;
    for (int i = 0; i < enc.n; i++) {
        if (!is_mask_piece(enc.pieces[i])) continue;
        const float *row = run->logits + (size_t)i * (size_t)V;
        for (int v = 0; v < V; v++)
            if (!isfinite(row[v])) {
                reply_error(rs, 500, "model '%s': the masked-LM logits at position %d are not finite "
                          "(NaN or infinity): no prediction", sm->name, i);
                goto cleanup;
            }
    }
    preds = json_array();
    for (int i = 0; i < enc.n; i++) {
        if (!is_mask_piece(enc.pieces[i])) continue;
        const float *row = run->logits + (size_t)i * (size_t)V;
        float mx = -INFINITY;
        for (int v = 0; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        double z = 0;
        for (int v = 0; v < V; v++) z += exp((double)(row[v] - mx));
        int best[SRV_MAX_TOPK];
        int nb = 0;
        for (int v = 0; v < V; v++) { /* insertion into a k-sorted list */
            if (nb == k && row[v] <= row[best[k - 1]]) continue;
            int j = nb < k ? nb++ : k - 1;
            while (j > 0 && row[best[j - 1]] < row[v]) {
                best[j] = best[j - 1];
                j--;
            }
            best[j] = v;
        }
        json_t *top = json_array();
        for (int j = 0; j < nb; j++) {
            char *txt = as_model_token_text(sm->m, best[j]);
            json_array_append_new(top, json_pack("{s:i, s:o, s:f, s:f}", "id", best[j], "text",
                                                 as_json_string_utf8(txt ? txt : ""), "prob",
                                                 exp((double)(row[best[j]] - mx)) / z, "logit",
                                                 (double)row[best[j]]));
            free(txt);
        }
        json_array_append_new(preds, json_pack("{s:i, s:o}", "position", i, "top", top));
    }
    reply_json(rs, 200, json_pack("{s:s, s:o, s:o}", "model", sm->name, "tokens", as_tokens_json_value(sm->m, &enc),
                                  "predictions", preds));
    preds = NULL;
cleanup:
    json_decref(preds);
    as_run_free(run);
    as_encoding_free(&enc);
    run_req_free(&q);
}

/* ---- router -------------------------------------------------------------------- */

static int method_is(const srv_request *rq, const char *m) { return !strcmp(rq->method, m); }
static int is_get(const srv_request *rq) { return method_is(rq, "GET") || method_is(rq, "HEAD"); }

static void wrong_method(srv_response *rs, const char *allow) {
    reply_error(rs, 405, "method not allowed (allowed: %s)", allow);
    rs->allow = allow;
}

/* /api/v1/runs/{id}[/attention|/qk|/attribution|/faithfulness|/intervene|/maps|/lens|/tile|/stats|/thumbs]; rest is
 * the part after "runs/". */
static void route_runs(srv_state *s, const srv_request *rq, const char *rest, srv_response *rs) {
    const char *slash = strchr(rest, '/');
    size_t idn = slash ? (size_t)(slash - rest) : strlen(rest);
    const char *sub = slash ? slash + 1 : "";
    if (strcmp(sub, "") && strcmp(sub, "attention") && strcmp(sub, "qk") && strcmp(sub, "attribution") &&
        strcmp(sub, "faithfulness") &&
        strcmp(sub, "tile") && strcmp(sub, "stats") && strcmp(sub, "thumbs") && strcmp(sub, "intervene") &&
        strcmp(sub, "maps") &&
        strcmp(sub, "lens")) {
        reply_error(rs, 404, "no such route");
        return;
    }
    if (!is_get(rq)) {
        wrong_method(rs, "GET, HEAD");
        return;
    }
    char id[SRV_RUN_ID_LEN + 1];
    if (idn != SRV_RUN_ID_LEN || strspn(rest, "0123456789abcdef") < idn) {
        reply_error(rs, 404, "run not found (ids are %d hex digits)", SRV_RUN_ID_LEN);
        return;
    }
    memcpy(id, rest, idn);
    id[idn] = 0;
    srv_entry *imp = srv_npz_find(&s->npz, id); /* held by the server, not the cache */
    srv_entry *e = imp ? imp : srv_cache_get(&s->cache, id);
    if (!e) {
        reply_error(rs, 404, "run %s not found (evicted or never made); POST /api/v1/run again", id);
        return;
    }
    const char *kind = reply_query(rq, "kind");
    if (!*sub) reply_json(rs, 200, run_json(s, e, 1));
    else if (!strcmp(sub, "attention")) route_attention(s, e, rq, rs);
    else if (!strcmp(sub, "qk")) route_qk(s, e, rq, rs);
    else if (kind && strcmp(kind, "encoder"))
        reply_error(rs, 400,
                    "query 'kind': the %s route serves kind=encoder only (the encoder's or the single stack's "
                    "attention); kind=decoder and kind=cross are served by the attention and qk routes",
                    sub);
    else if (e->run && e->run->dec && (!strcmp(sub, "attribution") || !strcmp(sub, "intervene") ||
                                   !strcmp(sub, "faithfulness")))
        reply_error(rs, 409, "run %s is encoder-decoder: %s runs single-stack models only", id, sub);
    else if (e->npz) /* an --attention file's run or an analysis database's imported sentence */
        reply_error(rs, 409, "run %s is attention imported from %s: %s needs a model (serve --model DIR and run the "
                    "text)", id, e->npz->name, !strcmp(sub, "attribution") || !strcmp(sub, "faithfulness") ||
                    !strcmp(sub, "maps") || !strcmp(sub, "lens") ? sub
                    : !strcmp(sub, "tile")
                    ? "the tile route (attention recomputed from q and k)"
                    : !strcmp(sub, "thumbs") ? "the thumbs route (thumbnails pooled by the forward)"
                                             : "the head statistics");
    else if (!strcmp(sub, "attribution")) attrib_api_route(s, e, rq, rs); /* server/attrib_api.c */
    else if (!strcmp(sub, "intervene")) intervene_api_route(s, e, rq, rs);
    else if (!strcmp(sub, "maps")) maps_api_route(s, e, rq, rs); /* server/maps_api.c */
    else if (!strcmp(sub, "lens")) lens_api_route(s, e, rq, rs);
    else if (!strcmp(sub, "faithfulness")) faith_api_route(s, e, rq, rs); /* server/faith_api.c */
    else if (!strcmp(sub, "tile")) tile_api_route(s, e, rq, rs);          /* server/tile_api.c */
    else if (!strcmp(sub, "thumbs")) tile_api_thumbs(s, e, rq, rs);
    else tile_api_stats(s, e, rq, rs);
    if (!imp) srv_cache_release(&s->cache, e);
}

void api_handle(srv_state *s, const srv_request *rq, srv_response *rs) {
    const char *p = rq->path, *pre = "/api/v1/runs/";
    if (!strcmp(p, "/api/v1/models")) {
        if (is_get(rq)) route_models(s, rs);
        else wrong_method(rs, "GET, HEAD");
    } else if (!strcmp(p, "/api/v1/run")) {
        if (method_is(rq, "POST")) route_run(s, rq, rs);
        else wrong_method(rs, "POST");
    } else if (!strcmp(p, "/api/v1/mlm")) {
        if (method_is(rq, "POST")) route_mlm(s, rq, rs);
        else wrong_method(rs, "POST");
    } else if (!strcmp(p, "/api/v1/generate")) { /* server/gen_api.c */
        if (method_is(rq, "POST")) gen_api_route(s, rq, rs);
        else wrong_method(rs, "POST");
    } else if (!strncmp(p, pre, strlen(pre))) {
        route_runs(s, rq, p + strlen(pre), rs);
    } else if (!strcmp(p, "/api/v1/db") || !strncmp(p, "/api/v1/db/", 11)) { /* server/db_api.c */
        db_api_handle(s, rq, p + 10, rs);
    } else {
        reply_error(rs, 404, "no such route");
    }
}
