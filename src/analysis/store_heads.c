/* store_heads.c — the per-head results of a run as JSON (store_heads_json, declared in
 * include/attnscope/analysis.h): the one writer of GET /api/v1/db/runs/{id}/heads and of
 * each model's "heads" in `export` (docs/api/db.schema.json, HeadsResponse).
 * A head's row is its row of each table of HEAD_ROW, joined on (run, layer, head); the
 * columns after those three keys (store.c's schema) are its fields, in schema order,
 * named by the column (patterns.label: "pattern"). A column added to one of these tables
 * is a new field of both; add it to HeadColumns in docs/api/db.schema.json.
 * What it does not: open databases or know what the columns mean (store.c), or write
 * the rest of the export (report.c).
 */
#include "analysis/store.h"

#include <jansson.h>
#include <string.h>

static const struct {
    const char *table, *alias;
    const char *column, *field; /* a column whose field has another name, or NULL */
} HEAD_ROW[] = {{"head_scores", "h", NULL, NULL}, {"patterns", "p", "label", "pattern"}};
#define N_HEAD_ROW ((int)(sizeof HEAD_ROW / sizeof HEAD_ROW[0]))
#define HEAD_MAX_FIELDS 64

/* The SELECT of a run's head rows (layer, head, then every field) into sql[cap], and the
 * names of the fields into names[*n]. */
static void heads_sql(char *sql, size_t cap, const char **names, int *n) {
    size_t k = (size_t)snprintf(sql, cap, "SELECT h.layer, h.head");
    *n = 0;
    for (int t = 0; t < N_HEAD_ROW; t++) {
        const char *tb = HEAD_ROW[t].table, *col;
        ASSERT(!strcmp(store_column_name(tb, 0), "run") && !strcmp(store_column_name(tb, 1), "layer") &&
               !strcmp(store_column_name(tb, 2), "head"));
        for (int c = 3; (col = store_column_name(tb, c)); c++) {
            ASSERT(*n < HEAD_MAX_FIELDS && k < cap);
            names[(*n)++] = HEAD_ROW[t].column && !strcmp(col, HEAD_ROW[t].column) ? HEAD_ROW[t].field : col;
            k += (size_t)snprintf(sql + k, cap - k, ", %s.%s", HEAD_ROW[t].alias, col);
        }
    }
    k += (size_t)snprintf(sql + k, cap - k, " FROM head_scores h");
    for (int t = 1; t < N_HEAD_ROW; t++) {
        const char *a = HEAD_ROW[t].alias;
        ASSERT(k < cap);
        k += (size_t)snprintf(sql + k, cap - k,
                              " LEFT JOIN %s %s ON %s.run = h.run AND %s.layer = h.layer AND %s.head = h.head",
                              HEAD_ROW[t].table, a, a, a, a);
    }
    ASSERT(k < cap);
    k += (size_t)snprintf(sql + k, cap - k, " WHERE h.run = ?1 ORDER BY h.layer, h.head");
    ASSERT(k < cap);
}

/* Writes the head row q (heads_sql: layer, head, then the n fields) into entry i of each
 * field's array cols[0..n). */
static void head_row_json(sqlite3_stmt *q, json_t *const *cols, int n, size_t i) {
    for (int c = 0; c < n; c++) json_array_set_new(cols[c], i, store_column_json(q, 2 + c));
}

as_status store_heads_json(sqlite3 *db, const char *path, int64_t run, int n_layer, int n_head, int strict,
                           json_t **out, as_error *err) {
    ASSERT(store_run_shape_ok(n_layer, n_head));
    const int L = n_layer, H = n_head;
    const char *names[HEAD_MAX_FIELDS];
    json_t *arr[HEAD_MAX_FIELDS], *cols = NULL;
    int n, r, scored = 0;
    as_status rc = AS_OK;
    sqlite3_stmt *q = NULL;
    *out = NULL;
    char sql[4096];
    heads_sql(sql, sizeof sql, names, &n);
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
        goto cleanup;
    }
    sqlite3_bind_int64(q, 1, run);
    cols = json_object();
    for (int c = 0; c < n; c++) {
        arr[c] = json_array();
        for (int i = 0; i < L * H; i++) json_array_append_new(arr[c], json_null());
        json_object_set_new(cols, names[c], arr[c]);
    }
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        int l = store_column_index(q, 0, L), h = store_column_index(q, 1, H);
        if (l < 0 || h < 0) {
            if (!strict) continue;
            rc = as_err_set(err, AS_ERR_INPUT,
                            "%s: run %lld: a row of table head_scores has a layer, head or direction outside the run's "
                            "%d layers x %d heads (damaged database?)",
                            path, (long long)run, L, H);
            goto cleanup;
        }
        head_row_json(q, arr, n, (size_t)(l * H + h));
        scored++;
    }
    if (r != SQLITE_DONE) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
        goto cleanup;
    }
    *out = json_pack("{s:I, s:i, s:i, s:i, s:O}", "run", (json_int_t)run, "layers", L, "heads", H, "n_scored", scored,
                     "columns", cols);
    if (!*out) rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
cleanup:
    sqlite3_finalize(q);
    json_decref(cols);
    return rc;
}
