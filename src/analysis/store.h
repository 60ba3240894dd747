/* store.h — the SQLite database of `attnscope analyze` / `import` (schema: docs/analysis.md).
 *
 * What it does: opens or creates the database (WAL journal, so a process killed at
 * any moment leaves only committed transactions) for one writer at a time (an
 * exclusive flock on the database file), creates the schema, opens existing
 * databases without writing for the readers (`report`, `export`), and wraps the
 * few sqlite3 calls every writer and reader needs with one-line errors naming the
 * database file.
 * What it does not: compute anything (analysis/runner.c) or format reports
 * (analysis/report.c). What the server needs to read a database (the schema version,
 * store_check, store_run_shape_ok) is declared in include/attnscope/analysis.h.
 */
#ifndef AS_STORE_H
#define AS_STORE_H

#include "attnscope/analysis.h" /* STORE_SCHEMA_VERSION, store_check, store_run_shape_ok */
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
 * committed transactions of the WAL. Errors: AS_ERR_INPUT when the file cannot be
 * opened, another process holds the writer lock ("another attnscope process is
 * writing ..."), or the file is not a database or has another schema version. */
as_status store_open(const char *path, int create, store *out, as_error *err);
/* Opens an existing database for the readers (`report`, `export`): no schema is created
 * and nothing is written. Errors: AS_ERR_INPUT when it cannot be opened, is not a
 * database, has another schema version or lacks a table of the schema (named). */
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
/* Binds a double, or NULL when v is NaN. */
void store_bind_real(sqlite3_stmt *st, int i, double v);

#endif
