/* npz_runs.c — the runs of `attnscope serve --attention FILE.npz` (see npz_runs.h):
 * each file read once with as_attn_npz_read, its tokens and attention block described in
 * the JSON of a model's run, so the views read it through the same routes.
 * What it does not: reread the files, or hold anything but what the routes serve.
 */
#include "npz_runs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 1 for a piece the tokenizer's template adds: "[CLS]", "<s>", "</s>", "<|endoftext|>". */
static int is_special(const char *p) {
    size_t n = strlen(p);
    return n >= 3 && ((p[0] == '[' && p[n - 1] == ']') || (p[0] == '<' && p[n - 1] == '>'));
}

/* The readable text of a piece without token_text, as bertviz's prettify_tokens: a
 * word-start mark (byte-level BPE's "Ġ" U+0120, SentencePiece's "▁" U+2581) becomes a
 * space and WordPiece's "##" is dropped. */
static const char *pretty(const char *p, char *buf, size_t cap) {
    if (!strncmp(p, "\xc4\xa0", 2) || !strncmp(p, "\xe2\x96\x81", 3))
        snprintf(buf, cap, " %s", p + (p[0] == '\xc4' ? 2 : 3));
    else snprintf(buf, cap, "%s", !strncmp(p, "##", 2) && p[2] ? p + 2 : p);
    return buf;
}

/* Token i as the API's Token object (docs/api/api.schema.json). New reference. */
static json_t *token_json(const as_attn_npz *a, int i) {
    char buf[4 * AS_NPZ_MAX_TOKEN_CHARS + 2];
    json_t *piece = as_json_string_utf8(a->tokens[i]);
    json_t *text = as_json_string_utf8(a->token_text ? a->token_text[i] : pretty(a->tokens[i], buf, sizeof buf));
    const char *t = json_string_value(text) ? json_string_value(text) : "";
    size_t n = strlen(t);
    char *hex = malloc(2 * n + 1);
    for (size_t k = 0; hex && k < n; k++) {
        hex[2 * k] = "0123456789abcdef"[(unsigned char)t[k] >> 4];
        hex[2 * k + 1] = "0123456789abcdef"[(unsigned char)t[k] & 15];
    }
    if (hex) hex[2 * n] = 0;
    json_t *o = json_pack("{s:i, s:i, s:o, s:o, s:s, s:i, s:i, s:i, s:i, s:b}", "i", i, "id",
                          a->input_ids ? a->input_ids[i] : 0, "piece", piece, "text", text, "bytes", hex ? hex : "",
                          "start", -1, "end", -1, "type_id", a->type_ids[i], "segment", a->type_ids[i] != 0, "special",
                          is_special(a->tokens[i]));
    free(hex);
    return o;
}

/* A name for file path unique among the first i runs: its base name, else NAME-2, ... */
static void run_name(srv_npz_runs *r, int i, const char *path) {
    const char *base = strrchr(path, '/');
    base = base && base[1] ? base + 1 : path;
    snprintf(r->runs[i].name, sizeof r->runs[i].name, "%s", base);
    for (int k = 2;; k++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= !strcmp(r->runs[j].name, r->runs[i].name);
        if (!dup) return;
        snprintf(r->runs[i].name, sizeof r->runs[i].name, "%.100s-%d", base, k);
    }
}

/* Token objects of a's tokens. Returns 0, or -1 out of memory. */
static int tokens_json(srv_npz_run *r) {
    if (!(r->tokens = json_array())) return -1;
    for (int t = 0; t < r->a.run->T; t++)
        if (json_array_append_new(r->tokens, token_json(&r->a, t))) return -1;
    return 0;
}

as_status srv_npz_runs_init(const char *const *paths, int n, srv_npz_runs *out, as_error *err) {
    memset(out, 0, sizeof *out);
    if (n <= 0) return AS_OK;
    if (n > SRV_MAX_NPZ_FILES)
        return as_err_set(err, AS_ERR_INPUT, "serve: at most %d --attention files", SRV_MAX_NPZ_FILES);
    if (!(out->runs = calloc((size_t)n, sizeof *out->runs))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int i = 0; i < n; i++) {
        srv_npz_run *r = &out->runs[i];
        as_status rc = as_attn_npz_read(paths[i], &r->a, err);
        out->n++;
        if (rc) return rc;
        run_name(out, i, paths[i]);
        if (tokens_json(r)) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        /* "ff" and 14 hex digits of an FNV-1a hash of the position and name (cache ids
           start with a counter: "ff" is reached after 16 million runs) */
        uint64_t h = 1469598103934665603ull ^ (uint64_t)i;
        for (const char *c = r->name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
        snprintf(r->entry.id, sizeof r->entry.id, "ff%014llx", (unsigned long long)(h & 0xffffffffffffffull));
        for (int j = 0; j < i; j++)
            if (!strcmp(out->runs[j].entry.id, r->entry.id)) r->entry.id[2] ^= 1; /* distinct names, same hash */
        r->entry.model = -1;
        r->entry.run = r->a.run;
        r->entry.refs = 1; /* the server's own: released only by srv_npz_runs_free */
        r->entry.npz = r;
    }
    return AS_OK;
}

srv_npz_run *srv_npz_run_sentence(const char *name, int64_t db_run, int sent, const float *att, int L, int H, int T,
                                  const char *const *tok, as_error *err) {
    srv_npz_run *r = calloc(1, sizeof *r);
    if (!r) {
        as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        return NULL;
    }
    snprintf(r->name, sizeof r->name, "%s", name);
    r->db_run = db_run;
    r->sent = sent;
    if (as_attn_npz_from_attention(att, L, H, T, tok, &r->a, err)) {
        as_err_prefix(err, "%s", name);
        srv_npz_run_free(r);
        return NULL;
    }
    if (tokens_json(r)) {
        as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        srv_npz_run_free(r);
        return NULL;
    }
    return r;
}

void srv_npz_run_free(srv_npz_run *r) {
    if (!r) return;
    json_decref(r->tokens);
    as_attn_npz_free(&r->a);
    free(r);
}

void srv_npz_runs_free(srv_npz_runs *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        json_decref(r->runs[i].tokens);
        as_attn_npz_free(&r->runs[i].a);
    }
    free(r->runs);
    memset(r, 0, sizeof *r);
}

srv_entry *srv_npz_find(const srv_npz_runs *r, const char *id) {
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->runs[i].entry.id, id)) return &r->runs[i].entry;
    return NULL;
}

/* The attention block's description (docs/api/api.schema.json, Block) of an imported run:
 * the file's key/value groups and scales, no windows, soft-caps or rotary embedding. */
static json_t *block_json(const srv_npz_run *r) {
    const as_run *run = r->a.run;
    json_t *kv = json_array(), *win = json_array(), *scale = json_array();
    for (int h = 0; h < run->H; h++) json_array_append_new(kv, json_integer(r->a.kv_group[h]));
    for (int l = 0; l < run->L; l++) {
        json_array_append_new(win, json_integer(0));
        json_array_append_new(scale, json_real((double)r->a.scale[l]));
    }
    return json_pack("{s:i, s:o, s:b, s:o, s:o, s:f, s:f, s:n}", "n_kv_head", run->Hkv, "kv_group", kv, "causal",
                     r->a.causal, "window", win, "scale", scale, "attn_softcap", 0.0, "final_softcap", 0.0, "rope");
}

json_t *srv_npz_run_json(const srv_npz_run *r, const char *id) {
    const as_run *run = r->a.run;
    size_t len = 0;
    for (int i = 0; i < run->T; i++) len += strlen(r->a.tokens[i]) + 1;
    char *text = malloc(len + 1), *p = text;
    if (text) {
        for (int i = 0; i < run->T; i++) p += sprintf(p, i ? " %s" : "%s", r->a.tokens[i]);
        *p = 0;
    }
    json_t *sizes = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i}", "tokens", run->T, "layers", run->L, "heads", run->H,
                              "kv_heads", run->Hkv, "d_model", run->H * run->Dh, "d_head", run->Dh);
    json_t *src = json_pack("{s:s, s:s, s:s, s:b}", "kind", "npz", "layout",
                            r->db_run ? "import" : r->a.bertviz ? "bertviz" : "attnscope", "file", r->name, "neuron",
                            r->a.neuron);
    if (r->db_run) {
        json_object_set_new(src, "db_run", json_integer(r->db_run));
        json_object_set_new(src, "sent", json_integer(r->sent));
    }
    json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:o, s:n, s:n, s:b, s:o, s:o, s:O, s:n, s:o}", "capture",
                          "dense", "id", id, "model", r->name, "arch", "npz", "model_type", "npz", "cached", 1,
                          "text", as_json_string_utf8(text ? text : ""), "text_b", "ids", "causal", r->a.causal, "sizes",
                          sizes, "block", block_json(r), "tokens", r->tokens, "warning", "source", src);
    free(text);
    return o;
}
