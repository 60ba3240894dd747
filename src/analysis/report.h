/* report.h — reads finished analysis runs back from the SQLite store: the text report
 * of `attnscope report` and the JSON of `attnscope export` (format: docs/analysis.md,
 * schema: docs/api/export.schema.json), whose per-head results are the store's
 * (store_heads_json, the body of the server's GET /api/v1/db/runs/{id}/heads).
 * What it does not: compute scores (the corpus runner: analysis/records.c,
 * finalize.c) or change the database.
 */
#ifndef AS_REPORT_H
#define AS_REPORT_H

#include "attnscope/analysis.h" /* an_report_db, an_export_db: the same on a database path */
#include "analysis/store.h"

/* Prints every run (finished or not) with its top `top` heads per score, the best
 * head per relation and direction, and the heads of each pattern. */
as_status an_report(store *s, FILE *out, int top, as_error *err);

/* Writes every finished run's per-head results as JSON to path. */
as_status an_export(store *s, const char *path, as_error *err);

/* An encoder-decoder run's table encdec_heads (report_encdec.c): *n its rows (0 for other
 * runs); the text report's lines (top heads per attention kind and score, lowest AER);
 * the export's object {"encoder"|"decoder"|"cross": {"layers", "heads", "columns": {col:
 * [layers * heads]}}} (*out NULL for a run without rows; new reference). */
as_status an_encdec_rows(store *s, int64_t run, int *n, as_error *err);
as_status an_report_encdec(store *s, FILE *out, int64_t run, int top, as_error *err);
struct json_t;
as_status an_export_encdec(store *s, int64_t run, int H, struct json_t **out, as_error *err);

#endif
