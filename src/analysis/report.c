/* report.c — text report and JSON export of the analysis store (see report.h). */
#include "analysis/report.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static const char *DIR_NAME[2] = {"dependent->parent", "parent->dependent"};
static const char *DIR_KEY[2] = {"dependent_to_parent", "parent_to_dependent"};

/* Column col of q as an index in [0, n), or -1 when it is not an integer in that
 * range. Indices read from a database are checked before any arithmetic on them:
 * sqlite3_column_int would truncate 2^32 to 0, and layer * H can overflow int. */
static int col_index(sqlite3_stmt *q, int col, int64_t n) {
    if (sqlite3_column_type(q, col) != SQLITE_INTEGER) return -1;
    sqlite3_int64 v = sqlite3_column_int64(q, col);
    return v >= 0 && v < n ? (int)v : -1;
}

/* The error for a row of table whose indices are outside run's L x H heads. */
static as_status damaged_row(store *s, int64_t run, const char *table, int L, int H, as_error *err) {
    return as_err_set(err, AS_ERR_INPUT,
                      "%s: run %lld: a row of table %s has a layer, head or direction outside the run's %d layers x "
                      "%d heads (damaged database?)",
                      s->path, (long long)run, table, L, H);
}

static as_status top_by(store *s, FILE *out, int64_t run, const char *col, int top, as_error *err) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT layer, head, %s FROM head_scores WHERE run=? AND %s IS NOT NULL ORDER BY %s DESC, layer, head LIMIT ?",
             col, col, col);
    sqlite3_stmt *q;
    as_status rc = store_prepare(s, sql, &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_int(q, 2, top);
    fprintf(out, "  top %-11s", col);
    int any = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        fprintf(out, "  L%dH%d %.3f", sqlite3_column_int(q, 0), sqlite3_column_int(q, 1), sqlite3_column_double(q, 2));
        any = 1;
    }
    fprintf(out, "%s\n", any ? "" : "  (none)");
    sqlite3_finalize(q);
    return AS_OK;
}

as_status an_report(store *s, FILE *out, int top, as_error *err) {
    sqlite3_stmt *runs = NULL, *q = NULL;
    as_status rc = store_prepare(s, "SELECT id, model_name, arch, n_layer, n_head, n_total, n_done, status, params FROM runs ORDER BY id", &runs, err);
    if (rc) return rc;
    int nruns = 0;
    while (sqlite3_step(runs) == SQLITE_ROW) {
        nruns++;
        int64_t run = store_get_int(runs, "id");
        const char *status = store_get_text(runs, "status");
        fprintf(out, "run %lld: %s (%s, %d layers x %d heads), %d/%d sentences, %s, %s\n", (long long)run,
                store_get_text(runs, "model_name"), store_get_text(runs, "arch"), sqlite3_column_int(runs, store_col(runs, "n_layer")),
                sqlite3_column_int(runs, store_col(runs, "n_head")), sqlite3_column_int(runs, store_col(runs, "n_done")),
                sqlite3_column_int(runs, store_col(runs, "n_total")), status, store_get_text(runs, "params"));
        if (!status || strcmp(status, "done")) {
            fprintf(out, "  (not finished: run `attnscope analyze` again with the same arguments to resume)\n\n");
            continue;
        }
        static const char *cols[] = {"importance", "semantic", "syntactic", "cls", "sep", "punct", "self", "prev", "next"};
        for (size_t i = 0; i < sizeof cols / sizeof *cols; i++)
            if ((rc = top_by(s, out, run, cols[i], top, err))) goto cleanup;
        /* best head per counted relation and direction */
        if ((rc = store_prepare(s,
                                "SELECT relation, dir, layer, head, accuracy, baseline, baseline_offset, n FROM rel_accuracy r"
                                " WHERE run=?1 AND counted=1 AND accuracy = (SELECT max(accuracy) FROM rel_accuracy r2"
                                " WHERE r2.run=?1 AND r2.relation=r.relation AND r2.dir=r.dir)"
                                " ORDER BY relation='all' DESC, n DESC, relation, dir, layer, head",
                                &q, err)))
            goto cleanup;
        sqlite3_bind_int64(q, 1, run);
        fprintf(out, "  relations (best head per relation and direction, where it beats the best fixed offset):\n");
        char last[128] = "";
        int lastdir = -1, any = 0;
        while (sqlite3_step(q) == SQLITE_ROW) {
            const char *rel = (const char *)sqlite3_column_text(q, 0);
            int d = col_index(q, 1, 2);
            if (!rel || d < 0) {
                rc = as_err_set(err, AS_ERR_INPUT, "%s: run %lld: a row of table rel_accuracy has no relation or a "
                                "direction other than 0 and 1 (damaged database?)", s->path, (long long)run);
                goto cleanup;
            }
            if (!strcmp(rel, last) && d == lastdir) continue; /* ties: first head only */
            snprintf(last, sizeof last, "%s", rel);
            lastdir = d;
            any = 1;
            fprintf(out, "    %-14s %-18s L%dH%d %.3f  (baseline %.3f at offset %+d, n=%d)\n", rel, DIR_NAME[d],
                    sqlite3_column_int(q, 2), sqlite3_column_int(q, 3), sqlite3_column_double(q, 4),
                    sqlite3_column_double(q, 5), sqlite3_column_int(q, 6), sqlite3_column_int(q, 7));
        }
        if (!any) fprintf(out, "    (no relation with enough instances where a head beats the baseline)\n");
        sqlite3_finalize(q);
        q = NULL;
        if ((rc = store_prepare(s, "SELECT label, layer, head, confidence, depends_on FROM patterns WHERE run=? ORDER BY label, confidence DESC, layer, head", &q, err)))
            goto cleanup;
        sqlite3_bind_int64(q, 1, run);
        fprintf(out, "  patterns:");
        last[0] = 0;
        while (sqlite3_step(q) == SQLITE_ROW) {
            const char *lab = (const char *)sqlite3_column_text(q, 0);
            if (strcmp(lab, last)) {
                fprintf(out, "\n    %-18s", lab);
                snprintf(last, sizeof last, "%s", lab);
            }
            const unsigned char *dep = sqlite3_column_text(q, 4);
            fprintf(out, " L%dH%d(%.2f%s%s)", sqlite3_column_int(q, 1), sqlite3_column_int(q, 2),
                    sqlite3_column_double(q, 3), dep ? "," : "", dep ? (const char *)dep : "");
        }
        fprintf(out, "\n\n");
        sqlite3_finalize(q);
        q = NULL;
    }
    if (!nruns) fprintf(out, "no runs in %s\n", s->path);
cleanup:
    sqlite3_finalize(q);
    sqlite3_finalize(runs);
    return rc;
}

/* ---- per-head results ----------------------------------------------------------------
 * One writer for the per-head results of a run: GET /api/v1/db/runs/{id}/heads sends its
 * object, and `export` puts the same object under each model's "columns" (and derives
 * its nested "heads" list from it). */

/* The fields, in order: JSON name and the column of head_scores h or patterns p. */
static const struct {
    const char *name, *sql;
} HEAD_FIELDS[] = {
    {"importance", "h.importance"}, {"semantic", "h.semantic"}, {"syntactic", "h.syntactic"},
    {"syntactic_relation", "h.syntactic_relation"}, {"syntactic_dir", "h.syntactic_dir"}, {"cls", "h.cls"},
    {"sep", "h.sep"}, {"punct", "h.punct"}, {"self", "h.self"}, {"prev", "h.prev"}, {"next", "h.next"},
    {"entropy", "h.entropy"}, {"entropy_norm", "h.entropy_norm"}, {"n_sentences", "h.n_sentences"},
    {"n_semantic", "h.n_semantic"}, {"pattern", "p.label"}, {"confidence", "p.confidence"},
    {"concentration", "p.concentration"}, {"n_links", "p.n_links"}, {"abl_token", "p.abl_token"},
    {"abl_position", "p.abl_position"}, {"abl_segment", "p.abl_segment"}, {"depends_on", "p.depends_on"},
};
#define N_HEAD_FIELDS ((int)(sizeof HEAD_FIELDS / sizeof HEAD_FIELDS[0]))

/* Column i as JSON: null, integer, finite real (else null) or string (invalid UTF-8 cleaned). */
static json_t *col_json(sqlite3_stmt *q, int i) {
    switch (sqlite3_column_type(q, i)) {
    case SQLITE_INTEGER: return json_integer((json_int_t)sqlite3_column_int64(q, i));
    case SQLITE_FLOAT: {
        double v = sqlite3_column_double(q, i);
        return isfinite(v) ? json_real(v) : json_null();
    }
    case SQLITE_TEXT: {
        return as_json_string_utf8((const char *)sqlite3_column_text(q, i)); /* not UTF-8: cleaned */
    }
    default: return json_null();
    }
}

as_status an_heads_json(sqlite3 *db, const char *path, int64_t run, int n_layer, int n_head, int strict,
                        json_t **out, as_error *err) {
    const int L = n_layer, H = n_head, LH = L * H;
    char sql[1400];
    size_t n = (size_t)snprintf(sql, sizeof sql, "SELECT h.layer, h.head");
    for (int c = 0; c < N_HEAD_FIELDS; c++) n += (size_t)snprintf(sql + n, sizeof sql - n, ", %s", HEAD_FIELDS[c].sql);
    snprintf(sql + n, sizeof sql - n, " FROM head_scores h LEFT JOIN patterns p ON p.run = h.run AND p.layer = h.layer"
             " AND p.head = h.head WHERE h.run = ?1 ORDER BY h.layer, h.head");
    ASSERT(n < sizeof sql - 200);
    *out = NULL;
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
        return as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
    sqlite3_bind_int64(q, 1, run);
    json_t *cols = json_object(), *arr[N_HEAD_FIELDS];
    for (int c = 0; c < N_HEAD_FIELDS; c++) {
        arr[c] = json_array();
        for (int i = 0; i < LH; i++) json_array_append_new(arr[c], json_null());
        json_object_set_new(cols, HEAD_FIELDS[c].name, arr[c]);
    }
    as_status rc = AS_OK;
    int r, scored = 0;
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        int l = col_index(q, 0, L), h = col_index(q, 1, H);
        if (l < 0 || h < 0) {
            if (!strict) continue;
            rc = as_err_set(err, AS_ERR_INPUT,
                            "%s: run %lld: a row of table head_scores has a layer, head or direction outside the run's "
                            "%d layers x %d heads (damaged database?)",
                            path, (long long)run, L, H);
            break;
        }
        for (int c = 0; c < N_HEAD_FIELDS; c++) json_array_set_new(arr[c], (size_t)(l * H + h), col_json(q, 2 + c));
        scored++;
    }
    if (!rc && r != SQLITE_DONE) rc = as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
    sqlite3_finalize(q);
    if (rc) {
        json_decref(cols);
        return rc;
    }
    *out = json_pack("{s:i, s:o}", "n_scored", scored, "columns", cols);
    return *out ? AS_OK : as_err_set(err, AS_ERR_INTERNAL, "out of memory");
}

/* Value of field name for head i of columns (borrowed; NULL when absent). */
static json_t *field(json_t *columns, const char *name, int i) {
    return json_array_get(json_object_get(columns, name), (size_t)i);
}

static json_t *field_copy(json_t *columns, const char *name, int i) {
    json_t *v = field(columns, name, i);
    return v ? json_incref(v) : json_null();
}

/* The nested per-head objects of `export` (docs/analysis.md, "Export"), made from the
 * columns of an_heads_json: one per head with scores and a pattern, in layer, head
 * order; hv[layer * H + head] is set to each (borrowed from the returned array). */
static json_t *heads_nested(json_t *columns, int L, int H, json_t **hv) {
    static const char *stat[] = {"cls", "sep", "punct", "self", "prev", "next", "entropy", "entropy_norm"};
    json_t *heads = json_array();
    for (int i = 0; i < L * H; i++) {
        if (json_is_null(field(columns, "n_sentences", i)) || json_is_null(field(columns, "pattern", i))) continue;
        json_t *o = json_object(), *st = json_object(), *pat = json_object(), *abl = json_object();
        json_object_set_new(o, "layer", json_integer(i / H));
        json_object_set_new(o, "head", json_integer(i % H));
        json_object_set_new(o, "importance", field_copy(columns, "importance", i));
        json_object_set_new(o, "semantic", field_copy(columns, "semantic", i));
        json_object_set_new(o, "syntactic", field_copy(columns, "syntactic", i));
        json_object_set_new(o, "syntactic_relation", field_copy(columns, "syntactic_relation", i));
        json_t *d = field(columns, "syntactic_dir", i);
        json_object_set_new(o, "syntactic_direction",
                            json_is_integer(d) ? json_string(DIR_KEY[json_integer_value(d) & 1]) : json_null());
        for (int k = 0; k < 8; k++) json_object_set_new(st, stat[k], field_copy(columns, stat[k], i));
        json_object_set_new(o, "statistics", st);
        json_object_set_new(o, "relations", json_object());
        json_object_set_new(pat, "label", field_copy(columns, "pattern", i));
        json_object_set_new(pat, "confidence", field_copy(columns, "confidence", i));
        json_object_set_new(pat, "concentration", field_copy(columns, "concentration", i));
        json_object_set_new(pat, "n_links", field_copy(columns, "n_links", i));
        json_object_set_new(abl, "token", field_copy(columns, "abl_token", i));
        json_object_set_new(abl, "position", field_copy(columns, "abl_position", i));
        json_object_set_new(abl, "segment", field_copy(columns, "abl_segment", i));
        json_object_set_new(pat, "ablation", abl);
        json_object_set_new(pat, "depends_on", field_copy(columns, "depends_on", i));
        json_object_set_new(o, "pattern", pat);
        hv[i] = o;
        json_array_append_new(heads, o);
    }
    return heads;
}

/* The head distances of run: (L*H, L*H) matrix of mean JSD per token, index = layer *
 * n_head + head, as JSON rows into *out. */
static as_status export_jsd(store *s, int64_t run, int L, int H, json_t **out, as_error *err) {
    const int LH = L * H;
    as_status rc = AS_OK;
    sqlite3_stmt *q = NULL;
    json_t *jm = json_array();
    double *dm = as_calloc(as_mul_size((size_t)LH, (size_t)LH), sizeof *dm);
    if (!dm) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if ((rc = store_prepare(s, "SELECT a_layer, a_head, b_layer, b_head, jsd FROM head_pairs WHERE run=?", &q, err)))
        goto cleanup;
    sqlite3_bind_int64(q, 1, run);
    while (sqlite3_step(q) == SQLITE_ROW) {
        int al = col_index(q, 0, L), ah = col_index(q, 1, H), bl = col_index(q, 2, L), bh = col_index(q, 3, H);
        double jsd = sqlite3_column_double(q, 4);
        if (al < 0 || ah < 0 || bl < 0 || bh < 0) {
            rc = damaged_row(s, run, "head_pairs", L, H, err);
        } else if (sqlite3_column_type(q, 4) != SQLITE_FLOAT && sqlite3_column_type(q, 4) != SQLITE_INTEGER) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: run %lld: head_pairs L%dH%d-L%dH%d has a jsd that is not a number "
                            "(damaged database?)", s->path, (long long)run, al, ah, bl, bh);
        } else if (!isfinite(jsd) || jsd < 0.0) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: run %lld: head_pairs L%dH%d-L%dH%d has jsd %g, not a finite "
                            "distance >= 0 (damaged database?)", s->path, (long long)run, al, ah, bl, bh, jsd);
        }
        if (rc) goto cleanup;
        int a = al * H + ah, b = bl * H + bh; /* < LH <= AS_MAX_RUN_HEADS (store_run_shape_ok) */
        dm[(size_t)a * LH + b] = dm[(size_t)b * LH + a] = jsd;
    }
    for (int a = 0; a < LH; a++) {
        json_t *row = json_array();
        for (int b = 0; b < LH; b++) json_array_append_new(row, json_real(dm[(size_t)a * LH + b]));
        json_array_append_new(jm, row);
    }
cleanup:
    sqlite3_finalize(q);
    free(dm);
    if (rc) json_decref(jm);
    else *out = jm;
    return rc;
}

/* Builds the JSON object of one finished run. */
static as_status export_run(store *s, sqlite3_stmt *rq, json_t **out, as_error *err) {
    int64_t run = sqlite3_column_int64(rq, 0);
    int L = sqlite3_column_int(rq, 3), H = sqlite3_column_int(rq, 4);
    if (!store_run_shape_ok(L, H))
        return as_err_set(err, AS_ERR_INPUT, "%s: run %lld has %d layers x %d heads (at most %d x %d, %d in all)", s->path,
                          (long long)run, L, H, AS_MAX_LAYERS, AS_MAX_HEADS, AS_MAX_RUN_HEADS);
    int LH = L * H;
    json_t *hj = NULL, **hv = as_calloc((size_t)LH, sizeof *hv);
    if (!hv) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    as_status rc = an_heads_json(s->db, s->path, run, L, H, 1, &hj, err);
    if (rc) {
        free(hv);
        return rc;
    }
    json_t *m = json_object(), *rels = json_object();
    json_error_t je;
    json_object_set_new(m, "run", json_integer(run));
    json_object_set_new(m, "model", json_string((const char *)sqlite3_column_text(rq, 1)));
    json_object_set_new(m, "model_digest", json_string((const char *)sqlite3_column_text(rq, 9)));
    json_object_set_new(m, "arch", json_string((const char *)sqlite3_column_text(rq, 2)));
    json_object_set_new(m, "source", json_string((const char *)sqlite3_column_text(rq, 13)));
    json_object_set_new(m, "n_layer", json_integer(L));
    json_object_set_new(m, "n_head", json_integer(H));
    json_object_set_new(m, "n_sentences", json_integer(sqlite3_column_int(rq, 5)));
    json_t *corpus = json_loads((const char *)sqlite3_column_text(rq, 10), 0, &je);
    json_object_set_new(m, "corpus", corpus ? corpus : json_null());
    json_object_set_new(m, "corpus_digest", json_string((const char *)sqlite3_column_text(rq, 11)));
    json_t *params = json_loads((const char *)sqlite3_column_text(rq, 8), 0, &je);
    json_object_set_new(m, "params", params ? params : json_null());
    json_object_set_new(m, "version", json_string((const char *)sqlite3_column_text(rq, 12)));
    json_object_set_new(m, "heads", heads_nested(json_object_get(hj, "columns"), L, H, hv));
    json_object_set_new(m, "relations", rels);
    json_object_set(m, "n_scored", json_object_get(hj, "n_scored"));
    json_object_set(m, "columns", json_object_get(hj, "columns"));
    json_decref(hj);
    sqlite3_stmt *q = NULL;
    if ((rc = store_prepare(s, "SELECT relation, dir, layer, head, accuracy, counted, n, baseline, baseline_offset FROM rel_accuracy WHERE run=? ORDER BY relation, dir, layer, head", &q, err)))
        goto cleanup;
    sqlite3_bind_int64(q, 1, run);
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *rel = (const char *)sqlite3_column_text(q, 0);
        int d = col_index(q, 1, 2), l = col_index(q, 2, L), h = col_index(q, 3, H);
        if (!rel || d < 0 || l < 0 || h < 0) {
            rc = damaged_row(s, run, "rel_accuracy", L, H, err);
            goto cleanup;
        }
        if (!hv[l * H + h]) continue; /* a head without scores: nothing to attach to */
        json_t *hr = json_object_get(hv[l * H + h], "relations"), *e = json_object_get(hr, rel);
        if (!e) {
            e = json_object();
            json_object_set_new(hr, rel, e);
        }
        json_t *a = json_object();
        json_object_set_new(a, "accuracy", json_real(sqlite3_column_double(q, 4)));
        json_object_set_new(a, "counted", json_boolean(sqlite3_column_int(q, 5)));
        json_object_set_new(e, DIR_KEY[d], a);
        json_t *r = json_object_get(rels, rel);
        if (!r) {
            r = json_object();
            json_object_set_new(r, "n", json_integer(sqlite3_column_int64(q, 6)));
            json_object_set_new(rels, rel, r);
        }
        if (!json_object_get(r, DIR_KEY[d])) {
            json_t *b = json_object();
            json_object_set_new(b, "baseline_accuracy", json_real(sqlite3_column_double(q, 7)));
            json_object_set_new(b, "baseline_offset", json_integer(sqlite3_column_int(q, 8)));
            json_object_set_new(r, DIR_KEY[d], b);
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    json_t *jm = NULL;
    if ((rc = export_jsd(s, run, L, H, &jm, err))) goto cleanup;
    json_object_set_new(m, "head_jsd", jm);
cleanup:
    sqlite3_finalize(q);
    free(hv);
    if (rc) json_decref(m);
    else *out = m;
    return rc;
}

as_status an_export(store *s, const char *path, as_error *err) {
    sqlite3_stmt *rq = NULL;
    as_status rc = store_prepare(s,
                                 "SELECT id, model_name, arch, n_layer, n_head, n_total, n_done, status, params, model_digest,"
                                 " corpus, corpus_digest, version, source FROM runs WHERE status='done' ORDER BY id",
                                 &rq, err);
    if (rc) return rc;
    json_t *root = json_object(), *models = json_array();
    json_object_set_new(root, "format", json_string("attnscope-heads"));
    json_object_set_new(root, "format_version", json_integer(1));
    json_object_set_new(root, "attnscope_version", json_string(AS_VERSION));
    json_object_set_new(root, "models", models);
    while (sqlite3_step(rq) == SQLITE_ROW) {
        json_t *m = NULL;
        if ((rc = export_run(s, rq, &m, err))) goto cleanup;
        json_array_append_new(models, m);
    }
    if (json_dump_file(root, path, JSON_INDENT(1) | JSON_REAL_PRECISION(9)) != 0)
        rc = as_err_set(err, AS_ERR_INPUT, "%s: cannot write", path);
cleanup:
    sqlite3_finalize(rq);
    json_decref(root);
    return rc;
}

as_status an_report_db(const char *db_path, FILE *out, int top, as_error *err) {
    store s;
    as_status rc = store_open_existing(db_path, &s, err);
    if (rc) return rc;
    rc = an_report(&s, out, top, err);
    store_close(&s);
    return rc;
}

as_status an_export_db(const char *db_path, const char *out_path, as_error *err) {
    store s;
    as_status rc = store_open_existing(db_path, &s, err);
    if (rc) return rc;
    rc = an_export(&s, out_path, err);
    store_close(&s);
    return rc;
}
