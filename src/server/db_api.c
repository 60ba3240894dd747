/* db_api.c — the /api/v1/db routes (see db_api.h and docs/views.md): runs, heads,
 * head pairs (binary), relations, sentences (paginated, searchable), one sentence, a
 * head's predicted parents on a sentence, and one stored top-k attention row (runs
 * analyzed with --topk). The database is opened read-only with a serialized connection; each request prepares its own statements and binds every
 * parameter (no request text is ever pasted into SQL). Attention is not stored in the
 * database, so per-sentence attention is recomputed with the served model whose folder
 * name matches the run's model (and whose tokens match the stored ones); the run then
 * lands in the server's run cache, so the head and neuron views reuse it.
 * Imported runs (`attnscope import`) have no model: their attention is read from the
 * import folder given with --import-dir (server/imports.h) when one matches the run;
 * .../sentences/{idx}/run makes such a sentence a run of the explorer's views
 * (server/npz_runs.h, as `serve --attention`), kept in the run cache.
 * It does not write the database, and does not compute any score itself except the
 * word-level argmax of one head on one sentence (analysis/heads.c, as the analysis did).
 */
#include "db_api.h"
#include "npz_runs.h"
#include "reply.h"

#include "attnscope/analysis.h"
#include "attnscope/npy.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <sqlite3.h>
#include <string.h>


struct srv_db {
    sqlite3 *db;
    char path[1024];
    char name[256];
};

as_status srv_db_open(const char *path, srv_db **out, as_error *err) {
    *out = NULL;
    srv_db *d = calloc(1, sizeof *d);
    if (!d) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    snprintf(d->path, sizeof d->path, "%s", path);
    const char *b = strrchr(path, '/');
    snprintf(d->name, sizeof d->name, "%s", b ? b + 1 : path);
    if (an_db_path_check(path, err)) goto fail;
    if (sqlite3_open_v2(path, &d->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        as_err_set(err, AS_ERR_INPUT, "--db %s: cannot open: %s", path, d->db ? sqlite3_errmsg(d->db) : "out of memory");
        goto fail;
    }
    sqlite3_busy_timeout(d->db, 5000);
    /* schema version and every table, so that a damaged file is refused here (exit 2)
       rather than answered with 500s later; damaged pages still surface per request */
    if (store_check(d->db, path, err)) {
        as_err_prefix(err, "--db");
        goto fail;
    }
    *out = d;
    return AS_OK;
fail:
    srv_db_free(d);
    return AS_ERR_INPUT;
}

void srv_db_free(srv_db *d) {
    if (!d) return;
    if (d->db) sqlite3_close(d->db);
    free(d);
}

const char *srv_db_name(const srv_db *d) { return d->name; }

/* ---- helpers ------------------------------------------------------------------------ */

/* One request: the statements it prepared are finalized by req_done. */
typedef struct {
    srv_state *s;
    srv_db *d;
    const srv_request *rq;
    srv_response *rs;
    sqlite3_stmt *st[8];
    int n_st;
} req;

static sqlite3_stmt *prep(req *r, const char *sql) {
    AS_ASSERT(r->n_st < (int)(sizeof r->st / sizeof r->st[0]));
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->d->db, sql, -1, &st, NULL) != SQLITE_OK) {
        reply_error(r->rs, 500, "database %s: %s", r->d->name, sqlite3_errmsg(r->d->db));
        return NULL;
    }
    r->st[r->n_st++] = st;
    return st;
}

static void req_done(req *r) {
    for (int i = 0; i < r->n_st; i++) sqlite3_finalize(r->st[i]);
    r->n_st = 0;
}

static void db_fail(req *r) { reply_error(r->rs, 500, "database %s: %s", r->d->name, sqlite3_errmsg(r->d->db)); }

/* Column i as JSON (store_column_json: null, integer, finite real or UTF-8 string). */
static json_t *col(sqlite3_stmt *st, int i) { return store_column_json(st, i); }

/* Parses a decimal integer in [lo, hi]; NULL gives dflt. Returns -1 when malformed. */
static int parse_long(const char *v, long lo, long hi, long dflt, long *out) {
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (*v < '0' || *v > '9' || strlen(v) > 18) return -1;
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

/* A path segment of digits (at most 18) into *out; advances *p past it. */
static int path_int(const char **p, int64_t *out) {
    const char *s = *p;
    size_t n = strspn(s, "0123456789");
    if (!n || n > 18) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) v = v * 10 + (s[i] - '0');
    *out = v;
    *p = s + n;
    return 0;
}

/* ---- runs ----------------------------------------------------------------------------- */

typedef struct {
    int64_t id;
    int L, H, Dh;
    int n_total;
    char model_name[1024];
    int is_import; /* runs.source is STORE_SOURCE_IMPORT */
    int served; /* index of the served model that can recompute its attention, -1 none */
    int import; /* index of the --import-dir folder holding its attention (imported runs), -1 none */
} run_info;

/* Base name of a run's model ("models/x/" -> "x"; the default name "import:DIR" of an
 * imported run, is_import, -> base of DIR). */
static void model_base(const char *name, int is_import, char *out, size_t cap) {
    if (is_import && !strncmp(name, "import:", 7)) name += 7;
    size_t n = strlen(name);
    while (n > 1 && name[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && name[b - 1] != '/') b--;
    snprintf(out, cap, "%.*s", (int)(n - b), name + b);
}

/* The served model for a run: same folder base name (the server's "-2" suffixes
 * ignored), same layers and heads, a tokenizer; -1 when none (always for imported runs). */
static int served_model(const srv_state *s, int is_import, const char *model_name, int L, int H) {
    if (is_import) return -1;
    char base[256];
    model_base(model_name, 0, base, sizeof base);
    for (int i = 0; i < s->n_models; i++) {
        const as_config *c = as_model_config(s->models[i].m);
        if (c->n_layer != L || c->n_head != H || !as_model_has_tokenizer(s->models[i].m)) continue;
        const char *n = s->models[i].name;
        size_t bl = strlen(base);
        if (!strcmp(n, base) || (!strncmp(n, base, bl) && n[bl] == '-' && strspn(n + bl + 1, "0123456789") == strlen(n + bl + 1)))
            return i;
    }
    return -1;
}

static const char *RUN_COLS = "SELECT id, model_name, arch, n_layer, n_head, d_head, corpus, params, version, n_total, "
                              "n_done, status, created, finished, "
                              "(SELECT count(*) FROM sentences WHERE run = runs.id), "
                              "(SELECT count(*) FROM rel_totals WHERE run = runs.id), "
                              "(SELECT max(n_semantic) FROM head_scores WHERE run = runs.id), corpus_digest, source FROM runs";

/* The --import-dir folder serving an imported run (explicit RUN=DIR, else the corpus digest); -1 none. */
static int import_dir_of(const srv_state *s, int64_t id, int is_import, const char *corpus_digest) {
    if (!is_import) return -1;
    return srv_imports_find(&s->imports, id, corpus_digest);
}

static json_t *parse_json_col(sqlite3_stmt *st, int i) {
    const char *t = (const char *)sqlite3_column_text(st, i);
    json_t *j = t ? json_loads(t, JSON_REJECT_DUPLICATES, NULL) : NULL;
    return j ? j : col(st, i);
}

/* 1 when runs.source src marks an imported run. */
static int source_is_import(const unsigned char *src) {
    return src && !strcmp((const char *)src, STORE_SOURCE_IMPORT);
}

/* 1 when the run of RUN_COLS row st was imported (runs.source). */
static int row_is_import(sqlite3_stmt *st) { return source_is_import(sqlite3_column_text(st, 18)); }

static json_t *run_row_json(const srv_state *s, sqlite3_stmt *st) {
    const char *mn = (const char *)sqlite3_column_text(st, 1);
    char base[256];
    int L = sqlite3_column_int(st, 3), H = sqlite3_column_int(st, 4), is_import = row_is_import(st);
    model_base(mn ? mn : "", is_import, base, sizeof base);
    int sm = served_model(s, is_import, mn ? mn : "", L, H);
    int im = import_dir_of(s, sqlite3_column_int64(st, 0), is_import, (const char *)sqlite3_column_text(st, 17));
    json_t *params = parse_json_col(st, 7);
    json_t *o = json_pack("{s:I, s:o, s:o, s:o, s:i, s:i, s:i, s:o, s:o, s:o, s:i, s:i, s:o, s:o, s:o, s:i, s:b, s:b, s:o, s:o}",
                          "id", (json_int_t)sqlite3_column_int64(st, 0), "model_name", col(st, 1), "name",
                          as_json_string_utf8(base), "arch", col(st, 2), "layers", L, "heads", H, "d_head",
                          sqlite3_column_int(st, 5), "corpus", parse_json_col(st, 6), "params", params, "version",
                          col(st, 8), "n_total", sqlite3_column_int(st, 9), "n_done", sqlite3_column_int(st, 10),
                          "status", col(st, 11), "created", col(st, 12), "finished", col(st, 13), "n_sentences",
                          sqlite3_column_int(st, 14), "has_syntactic", sqlite3_column_int(st, 15) > 0,
                          "has_semantic", sqlite3_column_int(st, 16) > 0, "source", col(st, 18), "model",
                          sm >= 0 ? json_string(s->models[sm].name) : json_null());
    /* where per-sentence attention comes from: recomputed by a served model, read from an import folder, or nowhere */
    json_object_set_new(o, "attention", sm >= 0 ? json_string("model") : im >= 0 ? json_string("import") : json_null());
    json_object_set_new(o, "import_dir", im >= 0 ? as_json_string_utf8(s->imports.dirs[im].dir) : json_null());
    return o;
}

static void route_runs_list(req *r) {
    char sql[1024];
    snprintf(sql, sizeof sql, "%s ORDER BY id", RUN_COLS);
    sqlite3_stmt *st = prep(r, sql);
    if (!st) return;
    json_t *arr = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) json_array_append_new(arr, run_row_json(r->s, st));
    if (rc != SQLITE_DONE) {
        json_decref(arr);
        db_fail(r);
        return;
    }
    reply_json(r->rs, 200, json_pack("{s:s, s:i, s:o}", "db", r->d->name, "schema_version", STORE_SCHEMA_VERSION,
                                         "runs", arr));
}

/* Loads run id into *ri; sets a 404 and returns -1 when it does not exist. */
static int load_run(req *r, int64_t id, run_info *ri, json_t **row) {
    char sql[1024];
    snprintf(sql, sizeof sql, "%s WHERE id = ?1", RUN_COLS);
    sqlite3_stmt *st = prep(r, sql);
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        if (rc == SQLITE_DONE) reply_error(r->rs, 404, "run %lld not found in %s (GET /api/v1/db/runs lists them)", (long long)id, r->d->name);
        else db_fail(r);
        return -1;
    }
    memset(ri, 0, sizeof *ri);
    ri->id = id;
    ri->L = sqlite3_column_int(st, 3);
    ri->H = sqlite3_column_int(st, 4);
    ri->Dh = sqlite3_column_int(st, 5);
    ri->n_total = sqlite3_column_int(st, 9);
    const char *mn = (const char *)sqlite3_column_text(st, 1);
    snprintf(ri->model_name, sizeof ri->model_name, "%s", mn ? mn : "");
    ri->is_import = row_is_import(st);
    ri->served = served_model(r->s, ri->is_import, ri->model_name, ri->L, ri->H);
    ri->import = import_dir_of(r->s, id, ri->is_import, (const char *)sqlite3_column_text(st, 17));
    if (!store_run_shape_ok(ri->L, ri->H)) {
        reply_error(r->rs, 500, "database %s: run %lld has %d layers x %d heads", r->d->name, (long long)id, ri->L, ri->H);
        return -1;
    }
    if (row) *row = run_row_json(r->s, st);
    return 0;
}

/* ---- heads: columnar JSON, index = layer * H + head ---------------------------------- */

/* The per-head results as the store writes them for `export` too (store_heads_json);
 * rows with a layer or head outside the run are skipped. An encoder-decoder run adds its
 * three attention kinds' heads (store_encdec_heads_json) as "encdec_heads". */
static void route_heads(req *r, const run_info *ri) {
    json_t *hj = NULL, *ed = NULL;
    as_error err = {0};
    if (store_heads_json(r->d->db, r->d->name, ri->id, ri->L, ri->H, 0, &hj, &err)) {
        reply_error(r->rs, 500, "database %s", err.msg);
        return;
    }
    if (store_encdec_heads_json(r->d->db, r->d->name, ri->id, ri->H, &ed, &err)) {
        json_decref(hj);
        reply_error(r->rs, err.code == AS_ERR_INPUT ? 409 : 500, "database %s", err.msg);
        return;
    }
    if (ed) json_object_set_new(hj, "encdec_heads", ed);
    reply_json(r->rs, 200, hj);
}

/* Head-pair Jensen-Shannon divergence (Clark et al. 2019 sec. 6) as one float32 tensor
 * "jsd" of shape (L*H, L*H), symmetric, diagonal 0. */
static void route_pairs(req *r, const run_info *ri) {
    sqlite3_stmt *st = prep(r, "SELECT a_layer, a_head, b_layer, b_head, jsd FROM head_pairs WHERE run = ?1");
    if (!st) return;
    sqlite3_bind_int64(st, 1, ri->id);
    const size_t LH = (size_t)ri->L * (size_t)ri->H;
    float *m = calloc(LH * LH, sizeof *m);
    if (!m) {
        reply_error(r->rs, 500, "out of memory");
        return;
    }
    int rc, n = 0;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int al = sqlite3_column_int(st, 0), ah = sqlite3_column_int(st, 1), bl = sqlite3_column_int(st, 2),
            bh = sqlite3_column_int(st, 3);
        if (al < 0 || al >= ri->L || bl < 0 || bl >= ri->L || ah < 0 || ah >= ri->H || bh < 0 || bh >= ri->H) continue;
        size_t a = (size_t)al * (size_t)ri->H + (size_t)ah, b = (size_t)bl * (size_t)ri->H + (size_t)bh;
        m[a * LH + b] = m[b * LH + a] = (float)sqlite3_column_double(st, 4);
        n++;
    }
    if (rc != SQLITE_DONE) {
        free(m);
        db_fail(r);
        return;
    }
    const float *parts[1] = {m};
    srv_tb_tensor t = {.name = "jsd", .dtype = TB_F32, .ndim = 2, .shape = {(int64_t)LH, (int64_t)LH},
                       .parts = parts, .n_parts = 1, .part_len = LH * LH};
    reply_tensors(r->rs, &t, 1, json_pack("{s:I, s:i, s:i, s:i}", "run", (json_int_t)ri->id, "layers", ri->L,
                                              "heads", ri->H, "pairs", n));
    free(m);
}

/* ---- relations: best heads vs the offset baseline, accuracy by layer -------------------- */

static void route_relations(req *r, const run_info *ri) {
    long top;
    if (parse_long(reply_query(r->rq, "top"), 1, SRV_DB_MAX_BEST, 3, &top)) {
        reply_error(r->rs, 400, "query 'top': expected an integer in [1, %d]", SRV_DB_MAX_BEST);
        return;
    }
    sqlite3_stmt *st = prep(r, "SELECT a.relation, a.dir, a.layer, a.head, a.n, a.correct, a.accuracy, a.baseline, "
                               "a.baseline_offset, a.counted FROM rel_accuracy a WHERE a.run = ?1 "
                               "ORDER BY a.n DESC, a.relation, a.dir, a.accuracy DESC, a.layer, a.head");
    if (!st) return;
    sqlite3_bind_int64(st, 1, ri->id);
    json_t *rels = json_array(), *cur = NULL, *dirs[2] = {NULL, NULL};
    char cur_rel[256] = "";
    double *by_layer = calloc((size_t)ri->L * 2, sizeof *by_layer);
    if (!by_layer) {
        json_decref(rels);
        reply_error(r->rs, 500, "out of memory");
        return;
    }
    int rc;
    /* finish the layer maxima of the current relation's directions */
    #define FLUSH_LAYERS()                                                                              \
        for (int d_ = 0; d_ < 2 && cur; d_++) {                                                         \
            if (!dirs[d_]) continue;                                                                    \
            json_t *bl_ = json_array();                                                                 \
            for (int l_ = 0; l_ < ri->L; l_++) json_array_append_new(bl_, json_real(by_layer[d_ * ri->L + l_])); \
            json_object_set_new(dirs[d_], "by_layer", bl_);                                            \
        }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *rel = (const char *)sqlite3_column_text(st, 0);
        int dir = sqlite3_column_int(st, 1), l = sqlite3_column_int(st, 2), h = sqlite3_column_int(st, 3);
        if (!rel || dir < 0 || dir > 1 || l < 0 || l >= ri->L || h < 0 || h >= ri->H) continue;
        if (!cur || strcmp(rel, cur_rel)) {
            FLUSH_LAYERS();
            snprintf(cur_rel, sizeof cur_rel, "%s", rel);
            cur = json_pack("{s:o, s:i, s:[]}", "relation", as_json_string_utf8(rel), "n", sqlite3_column_int(st, 4), "dirs");
            json_array_append_new(rels, cur);
            dirs[0] = dirs[1] = NULL;
            for (int i = 0; i < 2 * ri->L; i++) by_layer[i] = 0.0;
        }
        if (!dirs[dir]) {
            dirs[dir] = json_pack("{s:i, s:f, s:i, s:[]}", "dir", dir, "baseline", sqlite3_column_double(st, 7),
                                  "baseline_offset", sqlite3_column_int(st, 8), "best");
            json_array_append_new(json_object_get(cur, "dirs"), dirs[dir]);
        }
        double acc = sqlite3_column_double(st, 6);
        if (acc > by_layer[dir * ri->L + l]) by_layer[dir * ri->L + l] = acc;
        json_t *best = json_object_get(dirs[dir], "best");
        if ((long)json_array_size(best) < top)
            json_array_append_new(best, json_pack("{s:i, s:i, s:i, s:f, s:b}", "layer", l, "head", h, "correct",
                                                  sqlite3_column_int(st, 5), "accuracy", acc, "counted",
                                                  sqlite3_column_int(st, 9) != 0));
    }
    FLUSH_LAYERS();
    #undef FLUSH_LAYERS
    free(by_layer);
    if (rc != SQLITE_DONE) {
        json_decref(rels);
        db_fail(r);
        return;
    }
    reply_json(r->rs, 200, json_pack("{s:I, s:i, s:i, s:o}", "run", (json_int_t)ri->id, "layers", ri->L, "heads",
                                         ri->H, "relations", rels));
}

/* ---- recomputing a sentence's attention with the served model ---------------------------- */

/* A stored sentence's attention: a forward (a cache entry e, or an uncached run/enc
 * for sentences the analysis truncated, which POST /run would refuse), or, for an
 * imported run, the array read from its import folder (imp). */
typedef struct {
    srv_entry *e;
    as_run *run;
    as_encoding enc;
    const as_run *r;           /* e->run or run; NULL for imported attention */
    const as_encoding *encp;   /* &e->enc or &enc; NULL for imported attention */
    npy_array imp;             /* imported attention (L, H, T, T), rows = queries */
    int T, H;                  /* tokens, heads */
} sent_fwd;

static void sent_fwd_free(srv_state *s, sent_fwd *f) {
    srv_cache_release(&s->cache, f->e);
    as_run_free(f->run);
    as_encoding_free(&f->enc);
    npy_array_free(&f->imp);
    memset(f, 0, sizeof *f);
}

/* Attention of layer l, head h: (T, T), rows = queries. Borrowed from f. */
static const float *fwd_attn(const sent_fwd *f, int l, int h) {
    if (f->imp.data) return f->imp.data + ((size_t)l * (size_t)f->H + (size_t)h) * (size_t)f->T * (size_t)f->T;
    return as_run_attn(f->r, l, h);
}

/* The "model" / "source" fields of a response on a stored sentence. */
static void fwd_source_json(const srv_state *s, const run_info *ri, const sent_fwd *f, json_t *o) {
    json_object_set_new(o, "model", ri->served >= 0 && !f->imp.data ? json_string(s->models[ri->served].name) : json_null());
    json_object_set_new(o, "source", json_string(f->imp.data ? "import" : "model"));
    json_object_set_new(o, "run_id", f->e ? json_string(f->e->id) : json_null());
}

/* Encodes text as the analysis did (model's specials, truncation at the model's
 * maximum), then reuses or computes the run (CAP_ATTN | CAP_SCORES | CAP_QKV, as
 * POST /run does, plus CAP_LOGITS for the prediction's confidence). Checks the tokens
 * against the stored ones when tok (n_tok texts) is given. An imported run's attention
 * is read instead from its --import-dir folder (file named by the stored source, n_tok
 * tokens). Returns 0, or sets rs. */
static int sent_forward(req *r, const run_info *ri, const char *text, const char *source, char **tok, int n_tok,
                        sent_fwd *f) {
    srv_state *s = r->s;
    memset(f, 0, sizeof *f);
    f->H = ri->H;
    if (ri->served < 0 && ri->import >= 0) {
        as_error err = {0};
        if (srv_imports_read(&s->imports.dirs[ri->import], source, ri->L, ri->H, n_tok, &f->imp, &err)) {
            reply_error(r->rs, 409, "run %lld: %s", (long long)ri->id, err.msg);
            return -1;
        }
        f->T = n_tok;
        return 0;
    }
    if (ri->served < 0) {
        reply_error(r->rs, 409, "run %lld (%s): no served model to recompute its attention; start the server with "
                              "--model for that folder, or --import-dir for the folder of an imported run",
                  (long long)ri->id, ri->model_name);
        return -1;
    }
    const srv_model *sm = &s->models[ri->served];
    as_error err = {0};
    as_encode_opts eo = {.max_len = 0, .truncate = 1};
    if (as_encode(sm->m, text, NULL, &eo, &f->enc, &err)) {
        reply_error(r->rs, 409, "sentence text: %s", err.msg);
        return -1;
    }
    if (tok) {
        int same = f->enc.n == n_tok;
        for (int t = 0; same && t < n_tok; t++) {
            char *x = as_model_token_text(sm->m, f->enc.ids[t]);
            same = x && tok[t] && !strcmp(x, tok[t]);
            free(x);
        }
        if (!same) {
            reply_error(r->rs, 409, "model '%s' tokenizes this sentence differently from the analysed run %lld "
                                  "(%d tokens, stored %d): it is not the analysed model", sm->name, (long long)ri->id, f->enc.n, n_tok);
            sent_fwd_free(s, f);
            return -1;
        }
    }
    const unsigned what = CAP_ATTN | CAP_SCORES | CAP_QKV | CAP_LOGITS;
    int cacheable = f->enc.n_warnings == 0;
    if (cacheable && (f->e = srv_cache_find(&s->cache, ri->served, text, NULL)) && (f->e->run->logits || !(as_model_heads(sm->m) & HEAD_CLASSIFIER))) {
        as_encoding_free(&f->enc);
        f->r = f->e->run;
        f->encp = &f->e->enc;
        f->T = f->r->T;
        return 0;
    }
    srv_cache_release(&s->cache, f->e);
    f->e = NULL;
    if (!api_admit(s, r->rs)) {
        sent_fwd_free(s, f);
        return -1;
    }
    as_status st = api_forward(s, sm->m, &f->enc, what, &f->run, &err);
    api_leave(s);
    if (st) {
        reply_error(r->rs, st == AS_ERR_INPUT ? 400 : 500, "run: %s", err.msg);
        sent_fwd_free(s, f);
        return -1;
    }
    if (cacheable) {
        srv_entry *ne = calloc(1, sizeof *ne);
        char *t = as_strdup(text);
        if (!ne || !t) {
            free(ne);
            free(t);
            reply_error(r->rs, 500, "out of memory");
            sent_fwd_free(s, f);
            return -1;
        }
        ne->model = ri->served;
        ne->text = t;
        ne->enc = f->enc;
        ne->run = f->run;
        memset(&f->enc, 0, sizeof f->enc);
        f->run = NULL;
        f->e = srv_cache_put(&s->cache, ne);
        f->r = f->e->run;
        f->encp = &f->e->enc;
    } else {
        f->r = f->run;
        f->encp = &f->enc;
    }
    f->T = f->r->T;
    return 0;
}

/* Softmax probabilities of a sequence classifier's logits, or null. */
static json_t *probs_json(const as_run *run) {
    if (!run || !run->logits || run->logits_head != HEAD_CLASSIFIER || run->logits_rows != 1) return json_null();
    int C = run->logits_cols;
    double mx = -INFINITY, z = 0;
    for (int c = 0; c < C; c++) mx = run->logits[c] > mx ? run->logits[c] : mx;
    for (int c = 0; c < C; c++) z += exp(run->logits[c] - mx);
    json_t *a = json_array();
    for (int c = 0; c < C; c++) json_array_append_new(a, json_real(exp(run->logits[c] - mx) / z));
    return a;
}

/* ---- sentences -------------------------------------------------------------------------- */

#define SENT_WHERE                                                                                           \
    " FROM sentences s WHERE s.run = ?1 AND (?2 IS NULL OR instr(lower(s.text), lower(?2)) > 0)"            \
    " AND (?3 IS NULL OR s.corpus = ?3)"                                                                    \
    " AND (?4 IS NULL OR EXISTS(SELECT 1 FROM words w WHERE w.run = s.run AND w.sent = s.idx AND w.deprel = ?4))" \
    " AND (?5 IS NULL OR (s.predicted IS NOT NULL AND s.label IS NOT NULL AND (s.predicted = s.label) = ?5))"

static void bind_filters(sqlite3_stmt *st, int64_t run, const char *q, const char *corpus, const char *rel, long correct) {
    sqlite3_bind_int64(st, 1, run);
    if (q && *q) sqlite3_bind_text(st, 2, q, -1, SQLITE_TRANSIENT);
    if (corpus && *corpus) sqlite3_bind_text(st, 3, corpus, -1, SQLITE_TRANSIENT);
    if (rel && *rel) sqlite3_bind_text(st, 4, rel, -1, SQLITE_TRANSIENT);
    if (correct >= 0) sqlite3_bind_int(st, 5, (int)correct);
}

static void route_sentences(req *r, const run_info *ri) {
    const srv_request *rq = r->rq;
    long offset, limit, conf, correct;
    const char *q = reply_query(rq, "q"), *corpus = reply_query(rq, "corpus"), *rel = reply_query(rq, "relation"),
               *cs = reply_query(rq, "correct");
    if (parse_long(reply_query(rq, "offset"), 0, SRV_DB_MAX_OFFSET, 0, &offset)) {
        reply_error(r->rs, 400, "query 'offset': expected an integer in [0, %ld]", SRV_DB_MAX_OFFSET);
        return;
    }
    if (parse_long(reply_query(rq, "limit"), 1, SRV_DB_MAX_PAGE, SRV_DB_DEFAULT_PAGE, &limit)) {
        reply_error(r->rs, 400, "query 'limit': expected an integer in [1, %d]", SRV_DB_MAX_PAGE);
        return;
    }
    if (parse_long(reply_query(rq, "confidence"), 0, 1, 0, &conf)) {
        reply_error(r->rs, 400, "query 'confidence': expected 0 or 1");
        return;
    }
    if (parse_long(cs, 0, 1, -1, &correct)) {
        reply_error(r->rs, 400, "query 'correct': expected 0 or 1");
        return;
    }
    const char *vals[3] = {q, corpus, rel}, *names[3] = {"q", "corpus", "relation"};
    for (int i = 0; i < 3; i++) {
        if (!vals[i]) continue;
        json_t *chk = json_string(vals[i]); /* rejects invalid UTF-8 */
        json_decref(chk);
        if (strlen(vals[i]) > SRV_DB_MAX_QUERY_BYTES || !chk) {
            reply_error(r->rs, 400, "query '%s': expected UTF-8 text of at most %d bytes", names[i], SRV_DB_MAX_QUERY_BYTES);
            return;
        }
    }
    if (conf && limit > SRV_DB_MAX_CONF_ROWS) {
        reply_error(r->rs, 400, "query 'limit': at most %d rows with confidence=1", SRV_DB_MAX_CONF_ROWS);
        return;
    }
    sqlite3_stmt *cnt = prep(r, "SELECT count(*)" SENT_WHERE);
    sqlite3_stmt *st = prep(r, "SELECT s.idx, s.corpus, s.source, s.text, s.label, s.predicted, s.n_tokens, s.n_words, "
                               "s.truncated, s.explained, (SELECT group_concat(deprel, ' ') FROM (SELECT DISTINCT w.deprel "
                               "FROM words w WHERE w.run = s.run AND w.sent = s.idx AND w.deprel IS NOT NULL "
                               "ORDER BY w.deprel))" SENT_WHERE " ORDER BY s.idx LIMIT ?6 OFFSET ?7");
    if (!cnt || !st) return;
    bind_filters(cnt, ri->id, q, corpus, rel, correct);
    bind_filters(st, ri->id, q, corpus, rel, correct);
    sqlite3_bind_int64(st, 6, limit);
    sqlite3_bind_int64(st, 7, offset);
    if (sqlite3_step(cnt) != SQLITE_ROW) {
        db_fail(r);
        return;
    }
    long total = (long)sqlite3_column_int64(cnt, 0);
    const int can_conf = conf && ri->served >= 0 && (as_model_heads(r->s->models[ri->served].m) & HEAD_CLASSIFIER);
    json_t *arr = json_array();
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        json_t *rels = json_array();
        const char *rl = (const char *)sqlite3_column_text(st, 10);
        for (const char *p = rl; p && *p;) {
            size_t n = strcspn(p, " ");
            char buf[128];
            snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf ? n : sizeof buf - 1), p);
            json_array_append_new(rels, as_json_string_utf8(buf));
            p += n;
            p += *p == ' ';
        }
        json_t *confidence = json_null();
        if (can_conf && sqlite3_column_type(st, 5) == SQLITE_INTEGER) {
            /* a CAP_LOGITS forward only, not cached (the cache is for inspected runs) */
            const srv_model *sm = &r->s->models[ri->served];
            as_encoding enc = {0};
            as_run *run = NULL;
            as_error err = {0};
            as_encode_opts eo = {.max_len = 0, .truncate = 1};
            if (!as_encode(sm->m, (const char *)sqlite3_column_text(st, 3), NULL, &eo, &enc, &err)) {
                if (!api_admit(r->s, r->rs)) {
                    as_encoding_free(&enc);
                    json_decref(rels);
                    json_decref(arr);
                    return;
                }
                as_status fs = api_forward(r->s, sm->m, &enc, CAP_LOGITS, &run, &err);
                api_leave(r->s);
                json_t *p = fs ? json_null() : probs_json(run);
                int pc = sqlite3_column_int(st, 5);
                if (json_is_array(p) && pc >= 0 && pc < (int)json_array_size(p)) confidence = json_copy(json_array_get(p, (size_t)pc));
                json_decref(p);
            }
            as_run_free(run);
            as_encoding_free(&enc);
        }
        json_array_append_new(
            arr, json_pack("{s:i, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:i, s:b, s:b, s:o}", "idx", sqlite3_column_int(st, 0),
                           "corpus", col(st, 1), "source", col(st, 2), "text", col(st, 3), "label", col(st, 4),
                           "predicted", col(st, 5), "confidence", confidence, "n_tokens", sqlite3_column_int(st, 6),
                           "n_words", sqlite3_column_int(st, 7), "truncated", sqlite3_column_int(st, 8) != 0,
                           "explained", sqlite3_column_int(st, 9) != 0, "relations", rels));
    }
    if (rc != SQLITE_DONE) {
        json_decref(arr);
        db_fail(r);
        return;
    }
    reply_json(r->rs, 200, json_pack("{s:I, s:I, s:I, s:I, s:o}", "run", (json_int_t)ri->id, "total", (json_int_t)total,
                                         "offset", (json_int_t)offset, "limit", (json_int_t)limit, "sentences", arr));
}

/* A stored sentence: row, tokens and words. */
typedef struct {
    int idx, T, W, truncated, predicted; /* predicted -1 when NULL */
    char *text;
    char *source; /* stored source (import: the NNNN.json file name), or NULL */
    char **tok;   /* (T) readable token texts */
    int *word;    /* (T) word index, -1 none */
    int *parent;  /* (W) parent word, -1 root, -2 none (NULL head) */
    char **rel;   /* (W) relation or NULL */
    json_t *row, *tokens, *words;
} sent_data;

static void sent_data_free(sent_data *d) {
    for (int t = 0; d->tok && t < d->T; t++) free(d->tok[t]);
    for (int w = 0; d->rel && w < d->W; w++) free(d->rel[w]);
    free(d->tok);
    free(d->word);
    free(d->parent);
    free(d->rel);
    free(d->text);
    free(d->source);
    json_decref(d->row);
    json_decref(d->tokens);
    json_decref(d->words);
    memset(d, 0, sizeof *d);
}

static int load_sentence(req *r, const run_info *ri, int64_t idx, sent_data *d) {
    memset(d, 0, sizeof *d);
    sqlite3_stmt *st = prep(r, "SELECT idx, corpus, source, text, label, predicted, n_tokens, n_words, truncated, "
                               "explained FROM sentences WHERE run = ?1 AND idx = ?2");
    sqlite3_stmt *tq = prep(r, "SELECT pos, text, start, end, kind, word FROM tokens WHERE run = ?1 AND sent = ?2 ORDER BY pos");
    sqlite3_stmt *wq = prep(r, "SELECT idx, form, head, deprel FROM words WHERE run = ?1 AND sent = ?2 ORDER BY idx");
    if (!st || !tq || !wq) return -1;
    sqlite3_bind_int64(st, 1, ri->id);
    sqlite3_bind_int64(st, 2, idx);
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        if (rc == SQLITE_DONE) reply_error(r->rs, 404, "run %lld has no sentence %lld", (long long)ri->id, (long long)idx);
        else db_fail(r);
        return -1;
    }
    d->idx = (int)idx;
    d->T = sqlite3_column_int(st, 6);
    d->W = sqlite3_column_int(st, 7);
    d->truncated = sqlite3_column_int(st, 8);
    d->predicted = sqlite3_column_type(st, 5) == SQLITE_INTEGER ? sqlite3_column_int(st, 5) : -1;
    const char *text = (const char *)sqlite3_column_text(st, 3);
    d->text = as_strdup(text ? text : "");
    const char *src = (const char *)sqlite3_column_text(st, 2);
    d->source = src ? as_strdup(src) : NULL;
    if (d->T < 0 || d->T > AS_MAX_POSITIONS || d->W < 0 || d->W > AS_MAX_POSITIONS) {
        reply_error(r->rs, 500, "database %s: sentence %lld has %d tokens, %d words", r->d->name, (long long)idx, d->T, d->W);
        return -1;
    }
    d->row = json_pack("{s:i, s:o, s:o, s:o, s:o, s:o, s:i, s:i, s:b, s:b}", "idx", d->idx, "corpus", col(st, 1),
                       "source", col(st, 2), "text", col(st, 3), "label", col(st, 4), "predicted", col(st, 5),
                       "n_tokens", d->T, "n_words", d->W, "truncated", d->truncated != 0, "explained",
                       sqlite3_column_int(st, 9) != 0);
    d->tok = calloc((size_t)d->T + 1, sizeof *d->tok);
    d->word = calloc((size_t)d->T + 1, sizeof *d->word);
    d->parent = calloc((size_t)d->W + 1, sizeof *d->parent);
    d->rel = calloc((size_t)d->W + 1, sizeof *d->rel);
    d->tokens = json_array();
    d->words = json_array();
    if (!d->text || !d->tok || !d->word || !d->parent || !d->rel) {
        reply_error(r->rs, 500, "out of memory");
        return -1;
    }
    for (int t = 0; t < d->T; t++) d->word[t] = -1;
    for (int w = 0; w < d->W; w++) d->parent[w] = -2;
    sqlite3_bind_int64(tq, 1, ri->id);
    sqlite3_bind_int64(tq, 2, idx);
    int nt = 0;
    while ((rc = sqlite3_step(tq)) == SQLITE_ROW) {
        int pos = sqlite3_column_int(tq, 0);
        if (pos != nt || pos >= d->T) break;
        const char *tx = (const char *)sqlite3_column_text(tq, 1);
        d->tok[pos] = as_strdup(tx ? tx : "");
        int w = sqlite3_column_type(tq, 5) == SQLITE_INTEGER ? sqlite3_column_int(tq, 5) : -1;
        d->word[pos] = w >= 0 && w < d->W ? w : -1;
        json_array_append_new(d->tokens, json_pack("{s:o, s:o, s:o, s:o, s:o}", "text", col(tq, 1), "start", col(tq, 2),
                                                   "end", col(tq, 3), "kind", col(tq, 4), "word",
                                                   d->word[pos] >= 0 ? json_integer(d->word[pos]) : json_null()));
        nt++;
    }
    if (nt != d->T) {
        reply_error(r->rs, 500, "database %s: sentence %lld: %d token rows for %d tokens", r->d->name, (long long)idx, nt, d->T);
        return -1;
    }
    sqlite3_bind_int64(wq, 1, ri->id);
    sqlite3_bind_int64(wq, 2, idx);
    int nw = 0;
    while ((rc = sqlite3_step(wq)) == SQLITE_ROW) {
        int w = sqlite3_column_int(wq, 0);
        if (w != nw || w >= d->W) break;
        int hd = sqlite3_column_type(wq, 2) == SQLITE_INTEGER ? sqlite3_column_int(wq, 2) : -2;
        d->parent[w] = hd >= -1 && hd < d->W ? hd : -2;
        const char *rl = (const char *)sqlite3_column_text(wq, 3);
        d->rel[w] = rl ? as_strdup(rl) : NULL;
        json_array_append_new(d->words, json_pack("{s:o, s:o, s:o}", "form", col(wq, 1), "head", col(wq, 2), "deprel",
                                                  col(wq, 3)));
        nw++;
    }
    if (nw != d->W) {
        reply_error(r->rs, 500, "database %s: sentence %lld: %d word rows for %d words", r->d->name, (long long)idx, nw, d->W);
        return -1;
    }
    return 0;
}

static void route_sentence(req *r, const run_info *ri, int64_t idx) {
    sent_data d;
    if (load_sentence(r, ri, idx, &d)) {
        sent_data_free(&d);
        return;
    }
    sqlite3_stmt *sq = prep(r, "SELECT class, pos, value FROM saliency WHERE run = ?1 AND sent = ?2 ORDER BY class, pos");
    if (!sq) {
        sent_data_free(&d);
        return;
    }
    sqlite3_bind_int64(sq, 1, ri->id);
    sqlite3_bind_int64(sq, 2, idx);
    json_t *sal = json_array(), *cur = NULL;
    int cur_cls = -1, rc;
    while ((rc = sqlite3_step(sq)) == SQLITE_ROW) {
        int c = sqlite3_column_int(sq, 0), pos = sqlite3_column_int(sq, 1);
        if (!cur || c != cur_cls) {
            cur_cls = c;
            cur = json_array();
            for (int t = 0; t < d.T; t++) json_array_append_new(cur, json_real(0.0));
            json_array_append_new(sal, json_pack("{s:i, s:o}", "class", c, "values", cur));
        }
        if (pos >= 0 && pos < d.T) json_array_set_new(cur, (size_t)pos, json_real(sqlite3_column_double(sq, 2)));
    }
    if (rc != SQLITE_DONE) {
        json_decref(sal);
        sent_data_free(&d);
        db_fail(r);
        return;
    }
    json_t *o = d.row;
    d.row = NULL;
    json_object_set_new(o, "run", json_integer((json_int_t)ri->id));
    json_object_set(o, "tokens", d.tokens);
    json_object_set(o, "words", d.words);
    json_object_set_new(o, "saliency", sal);
    json_object_set_new(o, "model", ri->served >= 0 ? json_string(r->s->models[ri->served].name) : json_null());
    json_object_set_new(o, "attention", ri->served >= 0 ? json_string("model") : ri->import >= 0 ? json_string("import") : json_null());
    sent_data_free(&d);
    reply_json(r->rs, 200, o);
}

/* GET .../sentences/{idx}/parents?layer=L&head=H: the head's predicted word for every
 * word (Clark et al. 2019 sec. 4.1: word-level attention, argmax over other words with
 * pieces, as analysis/records.c counts it) and every scored arc marked correct or wrong
 * in both directions; "run_id" names the cached run (POST /run's id) when cacheable. */
static void route_parents(req *r, const run_info *ri, int64_t idx) {
    int l0, l1, h0, h1;
    const char *ls = reply_query(r->rq, "layer"), *hs = reply_query(r->rq, "head");
    if (!ls || reply_parse_range(ls, ri->L, &l0, &l1) || l0 != l1) {
        reply_error(r->rs, 400, "query 'layer': expected an integer in [0, %d)", ri->L);
        return;
    }
    if (!hs || reply_parse_range(hs, ri->H, &h0, &h1) || h0 != h1) {
        reply_error(r->rs, 400, "query 'head': expected an integer in [0, %d)", ri->H);
        return;
    }
    sent_data d;
    sent_fwd f = {0};
    float *Wm = NULL;
    int *pred = NULL;
    uint8_t *has = NULL;
    if (load_sentence(r, ri, idx, &d)) goto cleanup;
    if (sent_forward(r, ri, d.text, d.source, d.tok, d.T, &f)) goto cleanup;
    const int T = d.T, W = d.W;
    const float *A = fwd_attn(&f, l0, h0);
    if (!A) {
        reply_error(r->rs, 500, "layer %d head %d was not captured", l0, h0);
        goto cleanup;
    }
    Wm = calloc((size_t)W * (size_t)W + 1, sizeof *Wm);
    pred = calloc((size_t)W + 1, sizeof *pred);
    has = calloc((size_t)W + 1, 1);
    if (!Wm || !pred || !has) {
        reply_error(r->rs, 500, "out of memory");
        goto cleanup;
    }
    for (int t = 0; t < T; t++)
        if (d.word[t] >= 0) has[d.word[t]] = 1;
    json_t *jp = json_array(), *arcs = json_array();
    if (W > 0) {
        hd_word_attention(A, T, d.word, W, Wm);
        for (int w = 0; w < W; w++) pred[w] = has[w] ? hd_word_argmax(Wm, W, w, has) : -1;
    }
    for (int w = 0; w < W; w++) json_array_append_new(jp, json_integer(pred[w]));
    for (int w = 0; w < W; w++) {
        int p = d.parent[w];
        const char *rel = d.rel[w] ? d.rel[w] : "";
        int excluded = !strcmp(rel, "root") || !strcmp(rel, "punct") || !strncmp(rel, "punct:", 6) || !strncmp(rel, "root:", 5);
        int scored = p >= 0 && has[w] && has[p] && !excluded;
        json_array_append_new(arcs, json_pack("{s:i, s:i, s:o, s:b, s:o, s:o}", "dep", w, "parent", p, "relation",
                                              as_json_string_utf8(rel), "scored", scored, "dep_correct",
                                              scored ? json_boolean(pred[w] == p) : json_null(), "parent_correct",
                                              scored ? json_boolean(pred[p] == w) : json_null()));
    }
    json_t *o = json_pack("{s:I, s:i, s:i, s:i, s:o, s:o, s:o}", "run", (json_int_t)ri->id, "sent", d.idx, "layer", l0,
                          "head", h0, "probs", probs_json(f.r), "pred", jp, "arcs", arcs);
    fwd_source_json(r->s, ri, &f, o);
    reply_json(r->rs, 200, o);
cleanup:
    free(Wm);
    free(pred);
    free(has);
    sent_fwd_free(r->s, &f);
    sent_data_free(&d);
}

/* GET .../sentences/{idx}/attention?layers=a-b&heads=c-d&dtype=f16: the recomputed
 * attention of a stored sentence, as GET /api/v1/runs/{id}/attention sends it (one
 * tensor "attention" of shape [layers, heads, T, T], rows = queries). */
static void route_sent_attention(req *r, const run_info *ri, int64_t idx) {
    int l0, l1, h0, h1;
    if (reply_query_layers_heads(r->rq, ri->L, ri->H, &l0, &l1, &h0, &h1, r->rs)) return;
    int dt = srv_tb_dtype_parse(reply_query(r->rq, "dtype"));
    if (dt < 0) {
        reply_error(r->rs, 400, "query 'dtype': expected f16, u8 or f32");
        return;
    }
    sent_data d;
    sent_fwd f = {0};
    const float **parts = NULL;
    if (load_sentence(r, ri, idx, &d) || sent_forward(r, ri, d.text, d.source, d.tok, d.T, &f)) goto cleanup;
    int nl = l1 - l0 + 1, nh = h1 - h0 + 1, T = f.T;
    parts = malloc(sizeof *parts * (size_t)nl * (size_t)nh);
    if (!parts) {
        reply_error(r->rs, 500, "out of memory");
        goto cleanup;
    }
    for (int l = 0; l < nl; l++)
        for (int h = 0; h < nh; h++) parts[l * nh + h] = fwd_attn(&f, l0 + l, h0 + h);
    srv_tb_tensor t = {.name = "attention", .dtype = (srv_tb_dtype)dt, .ndim = 4, .shape = {nl, nh, T, T},
                       .parts = parts, .n_parts = nl * nh, .part_len = (size_t)T * (size_t)T};
    json_t *meta = json_pack("{s:I, s:i, s:[i,i], s:[i,i], s:i}", "run", (json_int_t)ri->id, "sent", d.idx, "layers", l0,
                             l1, "heads", h0, h1, "tokens", T);
    fwd_source_json(r->s, ri, &f, meta);
    reply_tensors(r->rs, &t, 1, meta);
cleanup:
    free(parts);
    sent_fwd_free(r->s, &f);
    sent_data_free(&d);
}

/* The run cache's key text of an imported sentence: not UTF-8 (as SRV_IDS_KEY), so no
 * posted text equals it; names the database, run and sentence. */
static void import_key(const req *r, const run_info *ri, int idx, char *out, size_t cap) {
    snprintf(out, cap, "\xff" "import:%s:%lld:%d", r->d->name, (long long)ri->id, idx);
}

static void free_npz(struct srv_npz_run *npz) { srv_npz_run_free(npz); }

/* GET .../sentences/{idx}/run: an imported run's sentence as a run of the explorer (its
 * attention read from the --import-dir folder, no model: server/npz_runs.h), put in the
 * run cache; answers its RunResponse, whose id the head, model and neuron views read
 * through /api/v1/runs/{id}/attention and /qk like an --attention file's run. 409 for a
 * run that was not imported (POST /run its text on the served model) or has no folder. */
static void route_sent_run(req *r, const run_info *ri, int64_t idx) {
    srv_state *s = r->s;
    sent_data d;
    sent_fwd f = {0};
    srv_entry *e = NULL;
    char key[400];
    if (!ri->is_import) {
        reply_error(r->rs, 409, "run %lld was not imported: its sentences run on the served model (POST /api/v1/run "
                    "with the sentence text)", (long long)ri->id);
        return;
    }
    if (load_sentence(r, ri, idx, &d)) goto cleanup;
    import_key(r, ri, d.idx, key, sizeof key);
    if ((e = srv_cache_find(&s->cache, -1, key, NULL))) {
        reply_json(r->rs, 200, srv_npz_run_json(e->npz, e->id));
        goto cleanup;
    }
    if (sent_forward(r, ri, d.text, d.source, d.tok, d.T, &f)) goto cleanup;
    char name[128];
    snprintf(name, sizeof name, "%.100s", d.source ? d.source : "sentence");
    char *dot = strrchr(name, '.');
    if (dot && !strcmp(dot, ".json")) snprintf(dot, sizeof name - (size_t)(dot - name), ".attention.npy");
    as_error err = {0};
    srv_npz_run *npz = srv_npz_run_sentence(name, ri->id, d.idx, f.imp.data, ri->L, ri->H, f.T,
                                            (const char *const *)d.tok, &err);
    if (!npz) {
        reply_error(r->rs, err.code == AS_ERR_INPUT ? 409 : 500, "run %lld sentence %d: %s", (long long)ri->id, d.idx,
                    err.msg);
        goto cleanup;
    }
    srv_entry *ne = calloc(1, sizeof *ne);
    if (!ne || !(ne->text = as_strdup(key))) {
        free(ne);
        srv_npz_run_free(npz);
        reply_error(r->rs, 500, "out of memory");
        goto cleanup;
    }
    ne->model = -1;
    ne->run = npz->a.run;
    ne->npz = npz;
    ne->npz_free = free_npz;
    e = srv_cache_put(&s->cache, ne); /* owns ne; the entry already there when another request made it first */
    reply_json(r->rs, 200, srv_npz_run_json(e->npz, e->id));
cleanup:
    srv_cache_release(&s->cache, e);
    sent_fwd_free(s, &f);
    sent_data_free(&d);
}

/* The attention kind of a top-k route (query 'kind': absent, "encoder" or "self": the
 * stored self-attention, table topk; "cross": an encoder-decoder run's cross-attention,
 * table topk_cross) and its layers (cross: the decoder's, params.decoder_layers); -1 after
 * a 400 (a bad kind, or cross on a run whose model has no cross-attention). */
static int topk_kind(req *r, const run_info *ri, an_topk_kind *kind, int *L) {
    const char *k = reply_query(r->rq, "kind");
    *kind = AN_TOPK_SELF;
    *L = ri->L;
    if (!k || !strcmp(k, "encoder") || !strcmp(k, "self")) return 0;
    if (strcmp(k, "cross")) {
        reply_error(r->rs, 400, "query 'kind': expected encoder or cross (top-k is stored of self-attention and of "
                    "an encoder-decoder run's cross-attention)");
        return -1;
    }
    sqlite3_stmt *st = prep(r, "SELECT json_extract(params, '$.decoder_layers') FROM runs WHERE id = ?1 AND "
                               "json_valid(params) AND json_extract(params, '$.kind') = 'encdec'");
    if (!st) return -1;
    sqlite3_bind_int64(st, 1, ri->id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_DONE) {
        reply_error(r->rs, 400, "run %lld (%s) is not an encoder-decoder run: its model has no cross-attention "
                    "(kind=cross)", (long long)ri->id, ri->model_name);
        return -1;
    }
    if (rc != SQLITE_ROW) {
        db_fail(r);
        return -1;
    }
    *kind = AN_TOPK_CROSS;
    *L = sqlite3_column_int(st, 0);
    if (!store_run_shape_ok(*L, ri->H)) {
        reply_error(r->rs, 500, "database %s: run %lld has %d decoder layers", r->d->name, (long long)ri->id, *L);
        return -1;
    }
    return 0;
}

/* GET .../sentences/{idx}/topk?layer=L&head=H&query=i[&kind=cross]: one stored top-k row of a run
 * analyzed with --topk (store_topk_row; kind=cross: of an encoder-decoder run's cross-attention,
 * sentence = pair, query = target token, keys = source tokens): {"run", "sent", "kind", "layer",
 * "head", "query", "k", "tokens", "keys", "index": [k], "weight": [k], "rest"}; 404 when the run
 * stored none for it. */
static void route_sent_topk(req *r, const run_info *ri, int64_t idx) {
    int l0, l1, h0, h1, L;
    long qi;
    an_topk_kind kind;
    if (topk_kind(r, ri, &kind, &L)) return;
    if (reply_parse_range(reply_query(r->rq, "layer"), L, &l0, &l1) || !reply_query(r->rq, "layer") || l0 != l1) {
        reply_error(r->rs, 400, "query 'layer': expected an integer in [0, %d)", L);
        return;
    }
    if (reply_parse_range(reply_query(r->rq, "head"), ri->H, &h0, &h1) || !reply_query(r->rq, "head") || h0 != h1) {
        reply_error(r->rs, 400, "query 'head': expected an integer in [0, %d)", ri->H);
        return;
    }
    const char *qs = reply_query(r->rq, "query");
    if (!qs || parse_long(qs, 0, AS_MAX_POSITIONS - 1, 0, &qi)) {
        reply_error(r->rs, 400, "query 'query': expected a token position in [0, %d)", AS_MAX_POSITIONS);
        return;
    }
    an_topk_row row;
    as_error err = {0};
    as_status rc = store_topk_row(r->d->db, r->d->name, kind, ri->id, idx, l0, h0, (int)qi, &row, &err);
    if (rc) {
        reply_error(r->rs, rc == AS_ERR_INPUT ? 404 : 500, "%s", err.msg);
        return;
    }
    json_t *ix = json_array(), *w = json_array();
    for (int j = 0; j < row.k; j++) {
        json_array_append_new(ix, json_integer(row.index[j]));
        json_array_append_new(w, json_real(row.weight[j]));
    }
    reply_json(r->rs, 200, json_pack("{s:I, s:I, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:o, s:o, s:f}", "run",
                                     (json_int_t)ri->id, "sent", (json_int_t)idx, "kind",
                                     kind == AN_TOPK_CROSS ? "cross" : "encoder", "layer", l0, "head", h0, "query",
                                     row.query, "k", row.k, "tokens", row.n_query, "keys", row.n_key, "index", ix,
                                     "weight", w, "rest", (double)row.rest));
}

/* GET .../sentences/{idx}/topk-all[?kind=cross]: every stored top-k row of the sentence
 * (store_topk_sentence) as tensors index and weight (L, H, T, k; index as float32, exact,
 * -1 for unused slots) and rest (L, H, T), meta {"run", "sent", "kind", "layers", "heads",
 * "tokens", "keys", "k", "kept"}: kept[l] the mean over layer l's heads and queries of the
 * kept mass (the sum of the k weights). kind=cross: an encoder-decoder run's cross-attention
 * (L the decoder's layers, T target tokens, index into the keys source tokens). 404 when the
 * run stored none for it, 413 over SRV_DB_TOPK_MAX_ENTRIES. */
static void route_sent_topk_all(req *r, const run_info *ri, int64_t idx) {
    an_topk_row first;
    an_topk_sentence ts = {0};
    as_error err = {0};
    float *ix = NULL;
    double *kept = NULL;
    an_topk_kind kind;
    int L;
    if (topk_kind(r, ri, &kind, &L)) return;
    as_status rc = store_topk_row(r->d->db, r->d->name, kind, ri->id, idx, 0, 0, 0, &first, &err);
    if (rc) {
        reply_error(r->rs, rc == AS_ERR_INPUT ? 404 : 500, "%s", err.msg);
        goto cleanup;
    }
    double entries = (double)L * ri->H * first.n_query * first.k;
    if (entries > SRV_DB_TOPK_MAX_ENTRIES) {
        reply_error(r->rs, 413, "top-k: %d layers x %d heads x %d queries x k = %d are %.0f entries, over the %u of one "
                    "reply (SRV_DB_TOPK_MAX_ENTRIES): read single rows with .../topk", L, ri->H, first.n_query,
                    first.k, entries, SRV_DB_TOPK_MAX_ENTRIES);
        goto cleanup;
    }
    if ((rc = store_topk_sentence(r->d->db, r->d->name, kind, ri->id, idx, L, ri->H, SRV_DB_TOPK_MAX_ENTRIES, &ts,
                                  &err))) {
        reply_error(r->rs, rc == AS_ERR_INPUT ? 404 : 500, "%s", err.msg);
        goto cleanup;
    }
    size_t rows = (size_t)ts.L * ts.H * ts.n_query, n = rows * (size_t)ts.k;
    ix = malloc(n * sizeof *ix);
    kept = calloc((size_t)ts.L, sizeof *kept);
    if (!ix || !kept) {
        reply_error(r->rs, 500, "out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) ix[i] = (float)ts.index[i];
    for (size_t i = 0; i < rows; i++)
        for (int j = 0; j < ts.k; j++) kept[i / ((size_t)ts.H * ts.n_query)] += ts.weight[i * ts.k + j];
    json_t *jk = json_array();
    for (int l = 0; l < ts.L; l++) json_array_append_new(jk, json_real(kept[l] / ((double)ts.H * ts.n_query)));
    const float *parts[3] = {ix, ts.weight, ts.rest};
    srv_tb_tensor t[3] = {
        {.name = "index", .dtype = TB_F32, .ndim = 4, .shape = {ts.L, ts.H, ts.n_query, ts.k}, .parts = &parts[0],
         .n_parts = 1, .part_len = n},
        {.name = "weight", .dtype = TB_F32, .ndim = 4, .shape = {ts.L, ts.H, ts.n_query, ts.k}, .parts = &parts[1],
         .n_parts = 1, .part_len = n},
        {.name = "rest", .dtype = TB_F32, .ndim = 3, .shape = {ts.L, ts.H, ts.n_query}, .parts = &parts[2],
         .n_parts = 1, .part_len = rows}};
    reply_tensors(r->rs, t, 3, json_pack("{s:I, s:I, s:s, s:i, s:i, s:i, s:i, s:i, s:o}", "run", (json_int_t)ri->id,
                                         "sent", (json_int_t)idx, "kind", kind == AN_TOPK_CROSS ? "cross" : "encoder",
                                         "layers", ts.L, "heads", ts.H, "tokens", ts.n_query, "keys", ts.n_key, "k",
                                         ts.k, "kept", jk));
cleanup:
    free(ix);
    free(kept);
    an_topk_sentence_free(&ts);
}

/* ---- --import-dir folders at startup ----------------------------------------------------- */

void db_api_print_imports(srv_state *s, FILE *out) {
    if (!s->db || !s->imports.n) return;
    sqlite3_stmt *st = NULL;
    int *served = calloc((size_t)s->imports.n, sizeof *served);
    if (!served || sqlite3_prepare_v2(s->db->db, "SELECT id, source, corpus_digest FROM runs ORDER BY id", -1, &st,
                                      NULL) != SQLITE_OK) {
        fprintf(stderr, "attnscope: warning: cannot list the runs of %s to match --import-dir\n", s->db->name);
        goto cleanup;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(st, 0);
        int i = import_dir_of(s, id, source_is_import(sqlite3_column_text(st, 1)), (const char *)sqlite3_column_text(st, 2));
        if (i < 0) continue;
        served[i]++;
        fprintf(out, "attnscope serve: import folder %s serves the attention of run %lld\n", s->imports.dirs[i].dir,
                (long long)id);
    }
    for (int i = 0; i < s->imports.n; i++)
        if (!served[i])
            fprintf(stderr, "attnscope: warning: --import-dir %s matches no imported run of %s (corpus digest %.12s…)\n",
                    s->imports.dirs[i].dir, s->db->name, s->imports.dirs[i].digest);
cleanup:
    sqlite3_finalize(st);
    free(served);
}

/* ---- router ---------------------------------------------------------------------------- */

void db_api_handle(srv_state *s, const srv_request *rq, const char *rest, srv_response *rs) {
    if (!s->db) {
        reply_error(rs, 404, "no analysis database: start the server with --db FILE.sqlite");
        return;
    }
    if (strcmp(rq->method, "GET") && strcmp(rq->method, "HEAD")) {
        reply_error(rs, 405, "method not allowed (allowed: GET, HEAD)");
        rs->allow = "GET, HEAD";
        return;
    }
    req r = {.s = s, .d = s->db, .rq = rq, .rs = rs};
    const char *p = rest;
    run_info ri;
    int64_t id, idx;
    if (!strcmp(p, "/runs") || !strcmp(p, "/runs/")) {
        route_runs_list(&r);
        goto done;
    }
    if (strncmp(p, "/runs/", 6)) goto not_found;
    p += 6;
    if (path_int(&p, &id)) {
        reply_error(rs, 404, "run id: expected an integer (GET /api/v1/db/runs lists them)");
        goto done;
    }
    if (*p && *p != '/') goto not_found;
    if (!*p) {
        json_t *row = NULL;
        if (!load_run(&r, id, &ri, &row)) reply_json(rs, 200, row);
        goto done;
    }
    if (!strcmp(p, "/heads") || !strcmp(p, "/pairs") || !strcmp(p, "/relations") || !strcmp(p, "/sentences")) {
        if (load_run(&r, id, &ri, NULL)) goto done;
        if (!strcmp(p, "/heads")) route_heads(&r, &ri);
        else if (!strcmp(p, "/pairs")) route_pairs(&r, &ri);
        else if (!strcmp(p, "/relations")) route_relations(&r, &ri);
        else route_sentences(&r, &ri);
        goto done;
    }
    if (strncmp(p, "/sentences/", 11)) goto not_found;
    p += 11;
    if (path_int(&p, &idx)) {
        reply_error(rs, 404, "sentence index: expected an integer");
        goto done;
    }
    if (*p && strcmp(p, "/parents") && strcmp(p, "/attention") && strcmp(p, "/topk") && strcmp(p, "/run") &&
        strcmp(p, "/topk-all"))
        goto not_found;
    if (load_run(&r, id, &ri, NULL)) goto done;
    if (!*p) route_sentence(&r, &ri, idx);
    else if (!strcmp(p, "/run")) route_sent_run(&r, &ri, idx);
    else if (!strcmp(p, "/parents")) route_parents(&r, &ri, idx);
    else if (!strcmp(p, "/topk")) route_sent_topk(&r, &ri, idx);
    else if (!strcmp(p, "/topk-all")) route_sent_topk_all(&r, &ri, idx);
    else route_sent_attention(&r, &ri, idx);
    goto done;
not_found:
    reply_error(rs, 404, "no such route");
done:
    req_done(&r);
}
