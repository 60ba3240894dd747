/* report_encdec.c — an encoder-decoder run's table encdec_heads (analyze_encdec.c) in the
 * text report and the JSON export (report.h): per attention kind the heads of largest
 * first-token, previous, next and self mass and of lowest entropy, and for cross-attention
 * the heads of lowest alignment error rate; the columnar per-head object of the export and
 * of the server's heads route (store_encdec_heads_json).
 * What it does not: read any other table, or compute anything.
 */
#include "analysis/report.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static const char *const KINDS[3] = {"encoder", "decoder", "cross"};
static const char *const KIND_NAME[3] = {"encoder self-attention", "decoder self-attention", "cross-attention"};
static const char *const STAT_COLS[8] = {"entropy", "sink", "self", "prev", "next", "dist", "spread", "max"};

as_status an_encdec_rows(store *s, int64_t run, int *n, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare(s, "SELECT count(*) FROM encdec_heads WHERE run=?", &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, run);
    *n = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : 0;
    sqlite3_finalize(q);
    return AS_OK;
}

/* One line: the top heads of kind by col (ascending when asc). */
static as_status top_line(store *s, FILE *out, int64_t run, const char *kind, const char *col, int asc, int top,
                          as_error *err) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT layer, head, %s FROM encdec_heads WHERE run=? AND kind=? AND %s IS NOT NULL ORDER BY %s %s, layer, "
             "head LIMIT ?",
             col, col, col, asc ? "ASC" : "DESC");
    sqlite3_stmt *q;
    as_status rc = store_prepare(s, sql, &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_text(q, 2, kind, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 3, top);
    int any = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        if (!any) fprintf(out, "    %s %-8s", asc ? "lowest" : "top   ", col);
        fprintf(out, "  L%dH%d %.3f", sqlite3_column_int(q, 0), sqlite3_column_int(q, 1), sqlite3_column_double(q, 2));
        any = 1;
    }
    if (any) fprintf(out, "\n");
    sqlite3_finalize(q);
    return AS_OK;
}

as_status an_report_encdec(store *s, FILE *out, int64_t run, int top, as_error *err) {
    static const struct {
        const char *col;
        int asc;
    } LINES[] = {{"aer", 1}, {"sink", 0}, {"prev", 0}, {"next", 0}, {"self", 0}, {"entropy", 1}};
    for (int k = 0; k < 3; k++) {
        fprintf(out, "  %s:\n", KIND_NAME[k]);
        for (size_t i = 0; i < sizeof LINES / sizeof *LINES; i++) {
            if (k == 1 && !strcmp(LINES[i].col, "next")) continue; /* causal: always 0 */
            as_status rc = top_line(s, out, run, KINDS[k], LINES[i].col, LINES[i].asc, top, err);
            if (rc) return rc;
        }
    }
    fprintf(out, "\n");
    return AS_OK;
}

/* {"layers", "heads", "columns": {col: [layers * heads values, null where absent]}} of one kind. */
static as_status export_kind(store *s, int64_t run, const char *kind, int H, json_t **out, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare(s, "SELECT max(layer) + 1, min(layer), min(head), max(head) FROM encdec_heads "
                                    "WHERE run=? AND kind=?", &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_text(q, 2, kind, -1, SQLITE_STATIC);
    int L = 0, bad = 0;
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL) {
        L = sqlite3_column_int(q, 0);
        bad = sqlite3_column_int(q, 1) < 0 || sqlite3_column_int(q, 2) < 0 || sqlite3_column_int(q, 3) >= H ||
              !store_run_shape_ok(L, H);
    }
    sqlite3_finalize(q);
    if (bad)
        return as_err_set(err, AS_ERR_INPUT, "%s: run %lld: a row of table encdec_heads has a layer or head out of range "
                          "(damaged database?)", s->path, (long long)run);
    static const char *const MORE[5] = {"aer", "links", "sure", "hit_sure", "hit_possible"};
    json_t *o = json_object(), *cols = json_object();
    json_object_set_new(o, "layers", json_integer(L));
    json_object_set_new(o, "heads", json_integer(H));
    json_object_set_new(o, "columns", cols);
    const char *names[13];
    int nc = 0;
    for (int c = 0; c < 8; c++) names[nc++] = STAT_COLS[c];
    for (int c = 0; c < 5; c++) names[nc++] = MORE[c];
    for (int c = 0; c < nc; c++) {
        json_t *a = json_array();
        for (int x = 0; x < L * H; x++) json_array_append_new(a, json_null());
        json_object_set_new(cols, names[c], a);
    }
    if ((rc = store_prepare(s, "SELECT * FROM encdec_heads WHERE run=? AND kind=?", &q, err))) {
        json_decref(o);
        return rc;
    }
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_text(q, 2, kind, -1, SQLITE_STATIC);
    while (sqlite3_step(q) == SQLITE_ROW) {
        int x = (int)store_get_int(q, "layer") * H + (int)store_get_int(q, "head");
        for (int c = 0; c < nc; c++)
            json_array_set_new(json_object_get(cols, names[c]), (size_t)x, store_column_json(q, store_col(q, names[c])));
    }
    sqlite3_finalize(q);
    *out = o;
    return AS_OK;
}

as_status an_export_encdec(store *s, int64_t run, int H, json_t **out, as_error *err) {
    *out = NULL;
    int n = 0;
    as_status rc = an_encdec_rows(s, run, &n, err);
    if (rc || !n) return rc;
    json_t *o = json_object();
    for (int k = 0; k < 3; k++) {
        json_t *part = NULL;
        if ((rc = export_kind(s, run, KINDS[k], H, &part, err))) {
            json_decref(o);
            return rc;
        }
        json_object_set_new(o, KINDS[k], part);
    }
    *out = o;
    return AS_OK;
}

as_status store_encdec_heads_json(sqlite3 *db, const char *path, int64_t run, int n_head, json_t **out, as_error *err) {
    store s = {.db = db, .lock_fd = -1};
    snprintf(s.path, sizeof s.path, "%s", path);
    return an_export_encdec(&s, run, n_head, out, err);
}
