/* report.c — text report and JSON export of the analysis store (see report.h). The
 * per-head results of the export are the store's (store_heads_json), the same object
 * the server sends; this file adds the run's fields, relations and head distances. */
#include "analysis/report.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static const char *DIR_NAME[2] = {"dependent->parent", "parent->dependent"};
static const char *DIR_KEY[2] = {"dependent_to_parent", "parent_to_dependent"};

/* The error for a row of table whose indices are outside run's L x H heads. */
static as_status damaged_row(store *s, int64_t run, const char *table, int L, int H, as_error *err) {
    return as_err_set(err, AS_ERR_INPUT,
                      "%s: run %lld: a row of table %s has a layer, head or direction outside the run's %d layers x "
                      "%d heads (damaged database?)",
                      s->path, (long long)run, table, L, H);
}

/* The top heads by column col of head_scores (low: the lowest, labelled "low"); heads
 * without a value are left out. */
static as_status top_by(store *s, FILE *out, int64_t run, const char *col, int top, int low, as_error *err) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT layer, head, %s FROM head_scores WHERE run=? AND %s IS NOT NULL ORDER BY %s %s, layer, head LIMIT ?",
             col, col, col, low ? "ASC" : "DESC");
    sqlite3_stmt *q;
    as_status rc = store_prepare(s, sql, &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_int(q, 2, top);
    fprintf(out, "  %s %-11s", low ? "low" : "top", col);
    int any = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        fprintf(out, "  L%dH%d %.3f", sqlite3_column_int(q, 0), sqlite3_column_int(q, 1), sqlite3_column_double(q, 2));
        any = 1;
    }
    fprintf(out, "%s\n", any ? "" : "  (none)");
    sqlite3_finalize(q);
    return AS_OK;
}

/* The mean attention mass the run's stored top-k keeps per layer (store_topk_mass), for
 * k' = 1, 2, 4, ... up to the stored k and k itself; nothing when it stored none. */
static as_status report_topk(store *s, FILE *out, int64_t run, int L, int H, as_error *err) {
    double *mass = as_calloc((size_t)L * AN_TOPK_MAX, sizeof *mass);
    int64_t *rows = as_calloc((size_t)L, sizeof *rows);
    int K = 0;
    as_status rc = AS_OK;
    if (!mass || !rows) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if ((rc = store_topk_mass(s->db, s->path, run, L, H, &K, mass, rows, err)) || !K) goto cleanup;
    int ks[AN_TOPK_MAX], n = 0;
    for (int k = 1; k < K; k *= 2) ks[n++] = k;
    ks[n++] = K;
    fprintf(out, "  top-k kept mass (k = %d stored; mean over the layer's heads, sentences and query rows):\n    layer", K);
    for (int i = 0; i < n; i++) fprintf(out, "  k=%-4d", ks[i]);
    fprintf(out, "\n");
    for (int l = 0; l < L; l++) {
        fprintf(out, "    %-5d", l);
        for (int i = 0; i < n; i++) fprintf(out, "  %.4f", mass[(size_t)l * AN_TOPK_MAX + ks[i] - 1]);
        fprintf(out, "\n");
    }
    fprintf(out, "\n");
cleanup:
    free(mass);
    free(rows);
    return rc;
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
        int n_encdec = 0;
        if ((rc = an_encdec_rows(s, run, &n_encdec, err))) goto cleanup;
        if (n_encdec) { /* an encoder-decoder run has only table encdec_heads */
            if ((rc = an_report_encdec(s, out, run, top, err))) goto cleanup;
            continue;
        }
        static const char *cols[] = {"importance", "semantic", "syntactic", "cls", "sep",  "punct",
                                     "self",       "prev",     "next",      "first", "induction",
                                     "head_importance", "alti_contribution"};
        for (size_t i = 0; i < sizeof cols / sizeof *cols; i++)
            if ((rc = top_by(s, out, run, cols[i], top, 0, err))) goto cleanup;
        /* the lowest sink ratios: heads whose sink attention moves little (Kobayashi et al. 2020) */
        if ((rc = top_by(s, out, run, "norm_sink_ratio", top, 1, err))) goto cleanup;
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
            int d = store_column_index(q, 1, 2);
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
        int L = sqlite3_column_int(runs, store_col(runs, "n_layer")), H = sqlite3_column_int(runs, store_col(runs, "n_head"));
        if (store_run_shape_ok(L, H) && (rc = report_topk(s, out, run, L, H, err))) goto cleanup;
    }
    if (!nruns) fprintf(out, "no runs in %s\n", s->path);
cleanup:
    sqlite3_finalize(q);
    sqlite3_finalize(runs);
    return rc;
}

/* ---- export ----------------------------------------------------------------------------
 * Each model's per-head results are store_heads_json's object, the body of GET
 * /api/v1/db/runs/{id}/heads; the per-head relation accuracies follow the same
 * columnar shape (index layer * n_head + head). */

/* An array of n JSON nulls. */
static json_t *nulls(int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_null());
    return a;
}

/* The relations of run as {relation: {"n", direction: {"baseline_accuracy",
 * "baseline_offset", "accuracy": [L*H], "counted": [L*H]}}} into *out (null where a
 * head has no row). */
static as_status export_relations(store *s, int64_t run, int L, int H, json_t **out, as_error *err) {
    sqlite3_stmt *q = NULL;
    json_t *rels = json_object();
    as_status rc = store_prepare(s, "SELECT relation, dir, layer, head, accuracy, counted, n, baseline, baseline_offset"
                                    " FROM rel_accuracy WHERE run=? ORDER BY relation, dir, layer, head", &q, err);
    if (rc) goto cleanup;
    sqlite3_bind_int64(q, 1, run);
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *rel = (const char *)sqlite3_column_text(q, 0);
        int d = store_column_index(q, 1, 2), l = store_column_index(q, 2, L);
        int h = store_column_index(q, 3, H);
        if (!rel || d < 0 || l < 0 || h < 0) {
            rc = damaged_row(s, run, "rel_accuracy", L, H, err);
            goto cleanup;
        }
        json_t *r = json_object_get(rels, rel);
        if (!r) {
            r = json_pack("{s:I}", "n", (json_int_t)sqlite3_column_int64(q, 6));
            json_object_set_new(rels, rel, r);
        }
        json_t *e = json_object_get(r, DIR_KEY[d]);
        if (!e) {
            e = json_pack("{s:f, s:i, s:o, s:o}", "baseline_accuracy", sqlite3_column_double(q, 7), "baseline_offset",
                          sqlite3_column_int(q, 8), "accuracy", nulls(L * H), "counted", nulls(L * H));
            json_object_set_new(r, DIR_KEY[d], e);
        }
        json_array_set_new(json_object_get(e, "accuracy"), (size_t)(l * H + h), json_real(sqlite3_column_double(q, 4)));
        json_array_set_new(json_object_get(e, "counted"), (size_t)(l * H + h), json_boolean(sqlite3_column_int(q, 5)));
    }
cleanup:
    sqlite3_finalize(q);
    if (rc) json_decref(rels);
    else *out = rels;
    return rc;
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
        int al = store_column_index(q, 0, L), ah = store_column_index(q, 1, H);
        int bl = store_column_index(q, 2, L), bh = store_column_index(q, 3, H);
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

/* Builds the JSON object of one finished run (docs/analysis.md, "Export"). */
static as_status export_run(store *s, sqlite3_stmt *rq, json_t **out, as_error *err) {
    int64_t run = sqlite3_column_int64(rq, 0);
    int L = sqlite3_column_int(rq, 3), H = sqlite3_column_int(rq, 4);
    if (!store_run_shape_ok(L, H))
        return as_err_set(err, AS_ERR_INPUT, "%s: run %lld has %d layers x %d heads (at most %d x %d, %d in all)", s->path,
                          (long long)run, L, H, AS_MAX_LAYERS, AS_MAX_HEADS, AS_MAX_RUN_HEADS);
    json_t *m = json_object(), *part = NULL;
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
    as_status rc = store_heads_json(s->db, s->path, run, L, H, 1, &part, err);
    if (rc) goto cleanup;
    json_object_set_new(m, "heads", part);
    if ((rc = export_relations(s, run, L, H, &part, err))) goto cleanup;
    json_object_set_new(m, "relations", part);
    if ((rc = export_jsd(s, run, L, H, &part, err))) goto cleanup;
    json_object_set_new(m, "head_jsd", part);
    if ((rc = an_export_encdec(s, run, H, &part, err))) goto cleanup;
    if (part) json_object_set_new(m, "encdec_heads", part);
cleanup:
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
    json_object_set_new(root, "format_version", json_integer(2));
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
