/* store.h — the SQLite database of `attnscope analyze` / `import` (schema: docs/analysis.md).
 *
 * What it does: owns the schema — one table of tables and columns (store.c) from which
 * the CREATE statements, the named INSERTs and the schema check are generated; opens or
 * creates the database (WAL journal, so a process killed at any moment leaves only
 * committed transactions) for one writer at a time (an exclusive flock on the database
 * file); upgrades a database of the previous schema version in place; opens existing
 * databases for the readers (`report`, `export`); binds and reads columns by name; and
 * wraps the few sqlite3 calls every writer and reader needs with one-line errors naming
 * the database file.
 * What it does not: compute anything (analysis/runner.h), format reports
 * (analysis/report.h) or write the per-head JSON (analysis/store_heads.c). What the server needs to read a database (the schema version,
 * runs.source values, store_check, store_run_shape_ok, store_heads_json) is declared in
 * include/attnscope/analysis.h.
 */
#ifndef AS_STORE_H
#define AS_STORE_H

#include "attnscope/analysis.h" /* STORE_SCHEMA_VERSION, STORE_SOURCE_*, store_check, store_run_shape_ok */
#include "core/core.h"

#include <sqlite3.h>

typedef struct {
    sqlite3 *db;
    char path[1024];
    int locked;  /* 1 when lock_fd holds the writer lock (store_open) */
    int lock_fd; /* descriptor of the database file holding the lock; closed after db */
} store;

/* Opens (creating when create != 0) path for writing and ensures the schema. One
 * writer at a time: the writer holds an exclusive flock(2) on the database file until
 * store_close (released by the kernel when the process dies, so a killed analysis can
 * be resumed at once); the readers (report, export, serve) take no lock and read
 * committed transactions of the WAL. A database of an earlier schema version is
 * upgraded (version 2: runs.source added, 'import' for the runs named "import:...";
 * version 3: the first-token and induction columns, NULL for older runs; version 4:
 * table topk, empty for older runs; version 5: the head importance, sink-ratio and ALTI
 * columns, NULL for older runs). Errors: AS_ERR_INPUT when the file
 * cannot be opened, another process holds the writer lock ("another attnscope process
 * is writing ..."), or the file is not a database or has another schema version. */
as_status store_open(const char *path, int create, store *out, as_error *err);
/* Opens an existing database for the readers (`report`, `export`): no schema is created
 * and nothing is written, except that a database of an earlier version is first upgraded in place
 * (under the writer lock, as store_open does). Errors: AS_ERR_INPUT when it cannot be
 * opened, is not a database, has another schema version or lacks a table or column of
 * the schema (named). */
as_status store_open_existing(const char *path, store *out, as_error *err);
void store_close(store *s);
/* Runs sql (no results). */
as_status store_exec(store *s, const char *sql, as_error *err);
/* Prepares sql into *out. */
as_status store_prepare(store *s, const char *sql, sqlite3_stmt **out, as_error *err);
/* Steps a statement that returns no row, then resets it and clears its bindings. */
as_status store_step_done(store *s, sqlite3_stmt *st, as_error *err);
/* Error for the database's last failure, prefixed by what. Returns AS_ERR_INTERNAL. */
as_status store_fail(store *s, const char *what, as_error *err);

/* ---- writing rows by column name ----------------------------------------------------- */

/* Prepares "INSERT INTO table(c, ...) VALUES(:c, ...) tail" over every column of the
 * schema's table (tail: an ON CONFLICT clause, or NULL). Bind with store_set_*; an
 * unbound column is NULL (store_step_done clears the bindings). ASSERTs that table is
 * in the schema. */
as_status store_prepare_insert(store *s, const char *table, const char *tail, sqlite3_stmt **out, as_error *err);
/* Binds column col of an INSERT from store_prepare_insert (ASSERTs that it exists).
 * store_set_real binds NULL for NaN; store_set_text binds NULL for NULL and does not
 * copy v (it must stay valid until the statement is stepped). */
void store_set_int(sqlite3_stmt *st, const char *col, int64_t v);
void store_set_real(sqlite3_stmt *st, const char *col, double v);
void store_set_text(sqlite3_stmt *st, const char *col, const char *v);
void store_set_blob(sqlite3_stmt *st, const char *col, const void *p, size_t n);

/* ---- reading rows by column name ------------------------------------------------------ */

/* The result column of st named name (as the SELECT names it, without table prefix);
 * ASSERTs that it exists. */
int store_col(sqlite3_stmt *st, const char *name);
int64_t store_get_int(sqlite3_stmt *st, const char *name);
/* Column col of st as an index in [0, n), or -1 when it is not an integer in that range.
 * Indices read from a database are checked before any arithmetic on them:
 * sqlite3_column_int would truncate 2^32 to 0, and layer * H can overflow int. */
int store_column_index(sqlite3_stmt *st, int col, int64_t n);
/* The name of column c (0-based) of the schema's table, or NULL past its last column;
 * ASSERTs that table is in the schema. */
const char *store_column_name(const char *table, int c);
/* Borrowed until the next step or finalize; NULL for NULL. */
const char *store_get_text(sqlite3_stmt *st, const char *name);

/* ---- runs ---------------------------------------------------------------------------- */

/* Integer key of a run's params JSON (runs.params), or dflt when params is NULL, not a
 * JSON object, or has no integer key. */
int store_params_int(const char *params, const char *key, int dflt);

#endif
