/* store.c — SQLite database and schema for the corpus analysis (see store.h and the
 * "Store" section of docs/analysis.md, which documents every table and column).
 */
#include "analysis/store.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static const char *SCHEMA =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS runs("
    "  id INTEGER PRIMARY KEY, model_name TEXT NOT NULL, model_digest TEXT NOT NULL,"
    "  arch TEXT NOT NULL, n_layer INTEGER NOT NULL, n_head INTEGER NOT NULL, d_head INTEGER NOT NULL,"
    "  corpus TEXT NOT NULL, corpus_digest TEXT NOT NULL, params TEXT NOT NULL, version TEXT NOT NULL,"
    "  n_total INTEGER NOT NULL, n_done INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL,"
    "  created TEXT NOT NULL, finished TEXT, UNIQUE(model_digest, corpus_digest, params));"
    "CREATE TABLE IF NOT EXISTS sentences("
    "  run INTEGER NOT NULL, idx INTEGER NOT NULL, corpus TEXT NOT NULL, source TEXT NOT NULL,"
    "  text TEXT NOT NULL, label INTEGER, predicted INTEGER, n_tokens INTEGER NOT NULL,"
    "  n_words INTEGER NOT NULL, truncated INTEGER NOT NULL, explained INTEGER NOT NULL,"
    "  PRIMARY KEY(run, idx)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS tokens("
    "  run INTEGER NOT NULL, sent INTEGER NOT NULL, pos INTEGER NOT NULL, text TEXT NOT NULL,"
    "  start INTEGER, end INTEGER, kind TEXT NOT NULL, word INTEGER,"
    "  PRIMARY KEY(run, sent, pos)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS words("
    "  run INTEGER NOT NULL, sent INTEGER NOT NULL, idx INTEGER NOT NULL, form TEXT NOT NULL,"
    "  head INTEGER, deprel TEXT, PRIMARY KEY(run, sent, idx)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS saliency("
    "  run INTEGER NOT NULL, sent INTEGER NOT NULL, class INTEGER NOT NULL, pos INTEGER NOT NULL,"
    "  value REAL NOT NULL, PRIMARY KEY(run, sent, class, pos)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS sentence_heads("
    "  run INTEGER NOT NULL, sent INTEGER NOT NULL, layer INTEGER NOT NULL, head INTEGER NOT NULL,"
    "  importance REAL NOT NULL, semantic REAL, cls REAL NOT NULL, sep REAL NOT NULL, punct REAL NOT NULL,"
    "  self REAL NOT NULL, prev REAL NOT NULL, next REAL NOT NULL, entropy REAL NOT NULL,"
    "  entropy_norm REAL NOT NULL, abl_token REAL, abl_position REAL, abl_segment REAL,"
    "  PRIMARY KEY(run, sent, layer, head)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS chunks("
    "  run INTEGER NOT NULL, idx INTEGER NOT NULL, first_sent INTEGER NOT NULL, n_sent INTEGER NOT NULL,"
    "  acc BLOB NOT NULL, PRIMARY KEY(run, idx)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS rel_totals("
    "  run INTEGER NOT NULL, relation TEXT NOT NULL, n INTEGER NOT NULL,"
    "  PRIMARY KEY(run, relation)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS rel_counts("
    "  run INTEGER NOT NULL, relation TEXT NOT NULL, dir INTEGER NOT NULL, layer INTEGER NOT NULL,"
    "  head INTEGER NOT NULL, correct INTEGER NOT NULL,"
    "  PRIMARY KEY(run, relation, dir, layer, head)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS baseline_counts("
    "  run INTEGER NOT NULL, relation TEXT NOT NULL, dir INTEGER NOT NULL, offset INTEGER NOT NULL,"
    "  correct INTEGER NOT NULL, PRIMARY KEY(run, relation, dir, offset)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS head_scores("
    "  run INTEGER NOT NULL, layer INTEGER NOT NULL, head INTEGER NOT NULL,"
    "  importance REAL, semantic REAL, syntactic REAL NOT NULL, syntactic_relation TEXT, syntactic_dir INTEGER,"
    "  cls REAL, sep REAL, punct REAL, self REAL, prev REAL, next REAL, entropy REAL, entropy_norm REAL,"
    "  n_sentences INTEGER NOT NULL, n_semantic INTEGER NOT NULL,"
    "  PRIMARY KEY(run, layer, head)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS rel_accuracy("
    "  run INTEGER NOT NULL, relation TEXT NOT NULL, dir INTEGER NOT NULL, layer INTEGER NOT NULL,"
    "  head INTEGER NOT NULL, n INTEGER NOT NULL, correct INTEGER NOT NULL, accuracy REAL NOT NULL,"
    "  baseline REAL NOT NULL, baseline_offset INTEGER NOT NULL, counted INTEGER NOT NULL,"
    "  PRIMARY KEY(run, relation, dir, layer, head)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS head_pairs("
    "  run INTEGER NOT NULL, a_layer INTEGER NOT NULL, a_head INTEGER NOT NULL,"
    "  b_layer INTEGER NOT NULL, b_head INTEGER NOT NULL, jsd REAL NOT NULL,"
    "  PRIMARY KEY(run, a_layer, a_head, b_layer, b_head)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS patterns("
    "  run INTEGER NOT NULL, layer INTEGER NOT NULL, head INTEGER NOT NULL, label TEXT NOT NULL,"
    "  confidence REAL NOT NULL, concentration INTEGER, n_links INTEGER NOT NULL,"
    "  abl_token REAL, abl_position REAL, abl_segment REAL, depends_on TEXT,"
    "  PRIMARY KEY(run, layer, head)) WITHOUT ROWID;";

as_status store_fail(store *s, const char *what, as_error *err) {
    return as_err_set(err, AS_ERR_INTERNAL, "%s: %s: %s", s->path, what, s->db ? sqlite3_errmsg(s->db) : "no database");
}

as_status store_exec(store *s, const char *sql, as_error *err) {
    char *msg = NULL;
    if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        as_err_set(err, AS_ERR_INTERNAL, "%s: %s", s->path, msg ? msg : "sqlite error");
        sqlite3_free(msg);
        return AS_ERR_INTERNAL;
    }
    return AS_OK;
}

as_status store_prepare(store *s, const char *sql, sqlite3_stmt **out, as_error *err) {
    if (sqlite3_prepare_v2(s->db, sql, -1, out, NULL) != SQLITE_OK) return store_fail(s, "prepare", err);
    return AS_OK;
}

as_status store_step_done(store *s, sqlite3_stmt *st, as_error *err) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE) return store_fail(s, "write", err);
    return AS_OK;
}

void store_bind_real(sqlite3_stmt *st, int i, double v) {
    if (isnan(v)) sqlite3_bind_null(st, i);
    else sqlite3_bind_double(st, i, v);
}

/* *ver = the schema_version of db (-1 when absent). */
static void schema_version(sqlite3 *db, int *ver) {
    sqlite3_stmt *st = NULL;
    *ver = -1;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema_version'", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        *ver = atoi((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
}

/* Opens path with flags into a cleared *out (busy timeout set); on failure *out is closed. */
static as_status open_db(const char *path, int flags, store *out, as_error *err) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    if (sqlite3_open_v2(path, &out->db, flags, NULL) != SQLITE_OK) {
        as_err_set(err, AS_ERR_INPUT, "%s: cannot open database: %s", path,
                   out->db ? sqlite3_errmsg(out->db) : "out of memory");
        store_close(out);
        return AS_ERR_INPUT;
    }
    sqlite3_busy_timeout(out->db, 10000);
    return AS_OK;
}

/* Takes the writer lock: an exclusive, non-blocking flock on the database file itself
 * (created empty when create is set; SQLite takes an empty file as a new database).
 * flock locks are apart from SQLite's POSIX byte-range locks on Linux, and the
 * descriptor stays open until after sqlite3_close (closing any descriptor of the file
 * would drop the process's POSIX locks). A file that cannot be opened is left to
 * SQLite to report. */
static as_status take_writer_lock(const char *path, int create, int *fd_out, int *locked, as_error *err) {
    *locked = 0;
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK | (create ? O_CREAT : 0), 0644);
    if (fd < 0) return AS_OK;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return as_err_set(err, AS_ERR_INPUT,
                              "%s: another attnscope process (analyze or import) is writing this database; wait for "
                              "it to finish, or give another --db",
                              path);
        return as_err_set(err, AS_ERR_INPUT, "%s: cannot lock the database: %s", path, strerror(e));
    }
    *fd_out = fd;
    *locked = 1;
    return AS_OK;
}

as_status store_open(const char *path, int create, store *out, as_error *err) {
    int fd = -1, locked = 0;
    memset(out, 0, sizeof *out);
    as_status rc = take_writer_lock(path, create, &fd, &locked, err);
    if (rc) return rc;
    rc = open_db(path, SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0), out, err);
    out->lock_fd = fd;
    out->locked = locked;
    if (rc) {
        store_close(out);
        return rc;
    }
    char *msg = NULL;
    if (sqlite3_exec(out->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, &msg) != SQLITE_OK) {
        as_err_set(err, AS_ERR_INPUT, "%s: not a usable SQLite database: %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        store_close(out);
        return AS_ERR_INPUT;
    }
    as_status s = store_exec(out, SCHEMA, err);
    if (s) {
        store_close(out);
        return s;
    }
    char q[160];
    snprintf(q, sizeof q, "INSERT OR IGNORE INTO meta VALUES('schema_version', '%d');", STORE_SCHEMA_VERSION);
    if ((s = store_exec(out, q, err))) {
        store_close(out);
        return s;
    }
    int ver;
    schema_version(out->db, &ver);
    if (ver != STORE_SCHEMA_VERSION) {
        as_err_set(err, AS_ERR_INPUT, "%s: database schema version %d, this attnscope writes %d", path, ver,
                   STORE_SCHEMA_VERSION);
        store_close(out);
        return AS_ERR_INPUT;
    }
    return AS_OK;
}

as_status store_check(sqlite3 *db, const char *path, as_error *err) {
    sqlite3 *ref = NULL;
    sqlite3_stmt *names = NULL, *has = NULL;
    as_status rc = AS_OK;
    int ver;
    schema_version(db, &ver);
    if (ver != STORE_SCHEMA_VERSION) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: not an attnscope analysis database of schema version %d (found %d)",
                        path, STORE_SCHEMA_VERSION, ver);
        goto cleanup;
    }
    /* the tables of SCHEMA, as an in-memory database made from it lists them */
    if (sqlite3_open_v2(":memory:", &ref, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_exec(ref, SCHEMA, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(ref, "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name", -1, &names,
                           NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", -1, &has, NULL) !=
            SQLITE_OK) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: cannot read the schema: %s", path, sqlite3_errmsg(db));
        goto cleanup;
    }
    while (sqlite3_step(names) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(names, 0);
        sqlite3_reset(has);
        sqlite3_bind_text(has, 1, t, -1, SQLITE_TRANSIENT);
        if (sqlite3_step(has) != SQLITE_ROW) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: table '%s' is missing: not a complete attnscope analysis database",
                            path, t);
            goto cleanup;
        }
    }
cleanup:
    sqlite3_finalize(names);
    sqlite3_finalize(has);
    if (ref) sqlite3_close(ref);
    return rc;
}

as_status store_open_existing(const char *path, store *out, as_error *err) {
    /* read-write without CREATE and without any statement that writes: the file is read
       only, and SQLite can still remove the -wal / -shm files it makes when it closes */
    as_status rc = open_db(path, SQLITE_OPEN_READWRITE, out, err);
    if (rc) return rc;
    rc = store_check(out->db, path, err);
    if (rc) store_close(out);
    return rc;
}

int store_run_shape_ok(int n_layer, int n_head) {
    return n_layer >= 1 && n_layer <= AS_MAX_LAYERS && n_head >= 1 && n_head <= AS_MAX_HEADS &&
           n_layer * n_head <= AS_MAX_RUN_HEADS;
}

void store_close(store *s) {
    if (!s) return;
    if (s->db) sqlite3_close(s->db);
    s->db = NULL;
    if (s->locked) close(s->lock_fd); /* after sqlite3_close: see take_writer_lock */
    s->locked = 0;
}
