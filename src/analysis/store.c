/* store.c — SQLite database and schema for the corpus analysis (see store.h and the
 * "Store" section of docs/analysis.md, which documents every table and column).
 * The schema is the table TABLES below: CREATE statements, INSERTs and the schema check
 * are generated from it. What it does not: know what the columns mean.
 */
#include "analysis/store.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the schema ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    const char *decl; /* type and column constraints */
} store_column;

typedef struct {
    const char *name;
    const store_column *cols;
    int n_cols;
    const char *keys;  /* table constraints after the columns */
    int without_rowid; /* 1: WITHOUT ROWID */
} store_table;

#define COLS(a) a, (int)(sizeof a / sizeof a[0])
#define I "INTEGER"
#define IN "INTEGER NOT NULL"
#define R "REAL"
#define RN "REAL NOT NULL"
#define TX "TEXT"
#define TN "TEXT NOT NULL"

static const store_column META[] = {{"key", "TEXT PRIMARY KEY"}, {"value", TN}};
static const store_column RUNS[] = {
    {"id", "INTEGER PRIMARY KEY"}, {"model_name", TN}, {"model_digest", TN}, {"arch", TN}, {"n_layer", IN},
    {"n_head", IN}, {"d_head", IN}, {"corpus", TN}, {"corpus_digest", TN}, {"params", TN}, {"version", TN},
    {"n_total", IN}, {"n_done", IN " DEFAULT 0"}, {"status", TN}, {"created", TN}, {"finished", TX},
    {"source", TN " DEFAULT '" STORE_SOURCE_ANALYZE "'"}};
static const store_column SENTENCES[] = {
    {"run", IN}, {"idx", IN}, {"corpus", TN}, {"source", TN}, {"text", TN}, {"label", I}, {"predicted", I},
    {"n_tokens", IN}, {"n_words", IN}, {"truncated", IN}, {"explained", IN}};
static const store_column TOKENS[] = {{"run", IN}, {"sent", IN}, {"pos", IN}, {"text", TN},
                                      {"start", I},  {"end", I},   {"kind", TN}, {"word", I}};
static const store_column WORDS[] = {{"run", IN}, {"sent", IN}, {"idx", IN}, {"form", TN}, {"head", I}, {"deprel", TX}};
static const store_column SALIENCY[] = {{"run", IN}, {"sent", IN}, {"class", IN}, {"pos", IN}, {"value", RN}};
static const store_column SENTENCE_HEADS[] = {
    {"run", IN}, {"sent", IN}, {"layer", IN}, {"head", IN}, {"importance", RN}, {"semantic", R}, {"cls", RN},
    {"sep", RN}, {"punct", RN}, {"self", RN}, {"prev", RN}, {"next", RN}, {"entropy", RN}, {"entropy_norm", RN},
    {"abl_token", R}, {"abl_position", R}, {"abl_segment", R}, {"first", R}, {"head_importance", R},
    {"sink_raw", R}, {"sink_norm", R}, {"alti", R}};
static const store_column CHUNKS[] = {{"run", IN}, {"idx", IN}, {"first_sent", IN}, {"n_sent", IN}, {"acc", "BLOB NOT NULL"}};
static const store_column REL_TOTALS[] = {{"run", IN}, {"relation", TN}, {"n", IN}};
static const store_column REL_COUNTS[] = {{"run", IN}, {"relation", TN}, {"dir", IN}, {"layer", IN}, {"head", IN}, {"correct", IN}};
static const store_column BASELINE_COUNTS[] = {{"run", IN}, {"relation", TN}, {"dir", IN}, {"offset", IN}, {"correct", IN}};
static const store_column HEAD_SCORES[] = {
    {"run", IN}, {"layer", IN}, {"head", IN}, {"importance", R}, {"semantic", R}, {"syntactic", RN},
    {"syntactic_relation", TX}, {"syntactic_dir", I}, {"cls", R}, {"sep", R}, {"punct", R}, {"self", R},
    {"prev", R}, {"next", R}, {"entropy", R}, {"entropy_norm", R}, {"n_sentences", IN}, {"n_semantic", IN},
    {"first", R}, {"induction", R}, {"head_importance", R}, {"head_importance_norm", R},
    {"norm_sink_ratio", R}, {"alti_contribution", R}};
static const store_column REL_ACCURACY[] = {
    {"run", IN}, {"relation", TN}, {"dir", IN}, {"layer", IN}, {"head", IN}, {"n", IN},
    {"correct", IN}, {"accuracy", RN}, {"baseline", RN}, {"baseline_offset", IN}, {"counted", IN}};
static const store_column HEAD_PAIRS[] = {{"run", IN}, {"a_layer", IN}, {"a_head", IN}, {"b_layer", IN}, {"b_head", IN}, {"jsd", RN}};
static const store_column PATTERNS[] = {
    {"run", IN}, {"layer", IN}, {"head", IN}, {"label", TN}, {"confidence", RN}, {"concentration", I},
    {"n_links", IN}, {"abl_token", R}, {"abl_position", R}, {"abl_segment", R}, {"depends_on", TX}};

/* rows: AN_TOPK_ROW_BYTES(k) bytes per query (include/attnscope/analysis.h, topk.c) */
static const store_column TOPK[] = {{"run", IN}, {"sent", IN}, {"layer", IN}, {"head", IN},
                                    {"k", IN},   {"n_query", IN}, {"rows", "BLOB NOT NULL"}};

/* the cross-attention top-k of an encoder-decoder run (analyze_encdec.c, --topk): as topk,
 * n_query target rows over n_key source keys */
static const store_column TOPK_CROSS[] = {{"run", IN}, {"sent", IN},    {"layer", IN}, {"head", IN},
                                          {"k", IN},   {"n_query", IN}, {"n_key", IN}, {"rows", "BLOB NOT NULL"}};

/* per head of an encoder-decoder run (analyze_encdec.c): kind 'encoder' | 'decoder' | 'cross' */
static const store_column ENCDEC_HEADS[] = {
    {"run", IN},     {"kind", TN},    {"layer", IN},   {"head", IN},   {"n_sentences", IN}, {"entropy", R},
    {"sink", R},     {"self", R},     {"prev", R},     {"next", R},    {"dist", R},         {"spread", R},
    {"max", R},      {"aer", R},      {"links", I},    {"sure", I},    {"hit_sure", I},     {"hit_possible", I}};

static const store_table TABLES[] = {
    {"meta", COLS(META), NULL, 0},
    {"runs", COLS(RUNS), "UNIQUE(model_digest, corpus_digest, params)", 0},
    {"sentences", COLS(SENTENCES), "PRIMARY KEY(run, idx)", 1},
    {"tokens", COLS(TOKENS), "PRIMARY KEY(run, sent, pos)", 1},
    {"words", COLS(WORDS), "PRIMARY KEY(run, sent, idx)", 1},
    {"saliency", COLS(SALIENCY), "PRIMARY KEY(run, sent, class, pos)", 1},
    {"sentence_heads", COLS(SENTENCE_HEADS), "PRIMARY KEY(run, sent, layer, head)", 1},
    {"chunks", COLS(CHUNKS), "PRIMARY KEY(run, idx)", 1},
    {"rel_totals", COLS(REL_TOTALS), "PRIMARY KEY(run, relation)", 1},
    {"rel_counts", COLS(REL_COUNTS), "PRIMARY KEY(run, relation, dir, layer, head)", 1},
    {"baseline_counts", COLS(BASELINE_COUNTS), "PRIMARY KEY(run, relation, dir, offset)", 1},
    {"head_scores", COLS(HEAD_SCORES), "PRIMARY KEY(run, layer, head)", 1},
    {"rel_accuracy", COLS(REL_ACCURACY), "PRIMARY KEY(run, relation, dir, layer, head)", 1},
    {"head_pairs", COLS(HEAD_PAIRS), "PRIMARY KEY(run, a_layer, a_head, b_layer, b_head)", 1},
    {"patterns", COLS(PATTERNS), "PRIMARY KEY(run, layer, head)", 1},
    /* a rowid table: its rows (kilobytes) are far above the size WITHOUT ROWID suits */
    {"topk", COLS(TOPK), "PRIMARY KEY(run, sent, layer, head)", 0},
    {"encdec_heads", COLS(ENCDEC_HEADS), "PRIMARY KEY(run, kind, layer, head)", 1},
    {"topk_cross", COLS(TOPK_CROSS), "PRIMARY KEY(run, sent, layer, head)", 0},
};
#define N_TABLES ((int)(sizeof TABLES / sizeof TABLES[0]))

#undef I
#undef IN
#undef R
#undef RN
#undef TX
#undef TN

static const store_table *table_get(const char *name) {
    for (int t = 0; t < N_TABLES; t++)
        if (!strcmp(TABLES[t].name, name)) return &TABLES[t];
    return NULL;
}

const char *store_column_name(const char *table, int c) {
    const store_table *tb = table_get(table);
    ASSERT(tb && c >= 0);
    return c < tb->n_cols ? tb->cols[c].name : NULL;
}

/* A growable string for generated SQL; oom set when an append failed. */
typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sql_buf;

static void sb_add(sql_buf *b, const char *s) {
    size_t l = strlen(s);
    if (b->oom) return;
    if (b->n + l + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        while (nc < b->n + l + 1) nc *= 2;
        char *ns = realloc(b->s, nc);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->n, s, l + 1);
    b->n += l;
}

/* The CREATE statements of the whole schema (malloc'd), or NULL when out of memory. */
static char *schema_sql(void) {
    sql_buf b = {0};
    for (int t = 0; t < N_TABLES; t++) {
        const store_table *tb = &TABLES[t];
        sb_add(&b, "CREATE TABLE IF NOT EXISTS ");
        sb_add(&b, tb->name);
        sb_add(&b, "(");
        for (int c = 0; c < tb->n_cols; c++) {
            sb_add(&b, c ? ", " : "");
            sb_add(&b, tb->cols[c].name);
            sb_add(&b, " ");
            sb_add(&b, tb->cols[c].decl);
        }
        if (tb->keys) {
            sb_add(&b, ", ");
            sb_add(&b, tb->keys);
        }
        sb_add(&b, tb->without_rowid ? ") WITHOUT ROWID;" : ");");
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* ---- statements --------------------------------------------------------------------------- */

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

as_status store_prepare_insert(store *s, const char *table, const char *tail, sqlite3_stmt **out, as_error *err) {
    const store_table *tb = table_get(table);
    ASSERT(tb);
    sql_buf b = {0};
    sb_add(&b, "INSERT INTO ");
    sb_add(&b, tb->name);
    sb_add(&b, "(");
    for (int c = 0; c < tb->n_cols; c++) {
        sb_add(&b, c ? ", " : "");
        sb_add(&b, tb->cols[c].name);
    }
    sb_add(&b, ") VALUES(");
    for (int c = 0; c < tb->n_cols; c++) {
        sb_add(&b, c ? ", :" : ":");
        sb_add(&b, tb->cols[c].name);
    }
    sb_add(&b, ")");
    if (tail) {
        sb_add(&b, " ");
        sb_add(&b, tail);
    }
    if (b.oom) {
        free(b.s);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    as_status rc = store_prepare(s, b.s, out, err);
    free(b.s);
    return rc;
}

/* Parameter index of :col in st; ASSERTs that it exists (a misspelt column is a bug). */
static int param_index(sqlite3_stmt *st, const char *col) {
    char name[64];
    size_t n = strlen(col);
    ASSERT(n + 2 <= sizeof name);
    name[0] = ':';
    memcpy(name + 1, col, n + 1);
    int i = sqlite3_bind_parameter_index(st, name);
    ASSERT(i > 0);
    return i;
}

void store_set_int(sqlite3_stmt *st, const char *col, int64_t v) { sqlite3_bind_int64(st, param_index(st, col), v); }

void store_set_real(sqlite3_stmt *st, const char *col, double v) {
    int i = param_index(st, col);
    if (isnan(v)) sqlite3_bind_null(st, i);
    else sqlite3_bind_double(st, i, v);
}

void store_set_text(sqlite3_stmt *st, const char *col, const char *v) {
    int i = param_index(st, col);
    if (v) sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC);
    else sqlite3_bind_null(st, i);
}

void store_set_blob(sqlite3_stmt *st, const char *col, const void *p, size_t n) {
    ASSERT(n <= (size_t)INT32_MAX);
    sqlite3_bind_blob(st, param_index(st, col), p, (int)n, SQLITE_STATIC);
}

int store_col(sqlite3_stmt *st, const char *name) {
    int n = sqlite3_column_count(st);
    for (int i = 0; i < n; i++) {
        const char *c = sqlite3_column_name(st, i);
        if (c && !strcmp(c, name)) return i;
    }
    ASSERT(!"store_col: no such result column");
    return -1;
}

int64_t store_get_int(sqlite3_stmt *st, const char *name) { return sqlite3_column_int64(st, store_col(st, name)); }
const char *store_get_text(sqlite3_stmt *st, const char *name) {
    return (const char *)sqlite3_column_text(st, store_col(st, name));
}

int store_column_index(sqlite3_stmt *q, int col, int64_t n) {
    if (sqlite3_column_type(q, col) != SQLITE_INTEGER) return -1;
    sqlite3_int64 v = sqlite3_column_int64(q, col);
    return v >= 0 && v < n ? (int)v : -1;
}

json_t *store_column_json(sqlite3_stmt *q, int i) {
    switch (sqlite3_column_type(q, i)) {
    case SQLITE_INTEGER: return json_integer((json_int_t)sqlite3_column_int64(q, i));
    case SQLITE_FLOAT: {
        double v = sqlite3_column_double(q, i);
        return isfinite(v) ? json_real(v) : json_null();
    }
    case SQLITE_TEXT: return as_json_string_utf8((const char *)sqlite3_column_text(q, i));
    default: return json_null();
    }
}

int store_params_int(const char *params, const char *key, int dflt) {
    if (!params) return dflt;
    json_t *j = json_loads(params, 0, NULL);
    json_t *v = json_is_object(j) ? json_object_get(j, key) : NULL;
    int out = dflt;
    if (json_is_integer(v) && json_integer_value(v) >= INT32_MIN && json_integer_value(v) <= INT32_MAX)
        out = (int)json_integer_value(v);
    json_decref(j);
    return out;
}

/* ---- opening, versions, upgrade --------------------------------------------------------- */

/* *ver = the schema_version of db (-1 when absent). */
static void schema_version(sqlite3 *db, int *ver) {
    sqlite3_stmt *st = NULL;
    *ver = -1;
    if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key='schema_version'", -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        *ver = atoi((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
}

_Static_assert(STORE_SCHEMA_VERSION == 7, "upgrade writes schema version 7");

/* The statements that take a database of schema version v to v + 1 (the columns added
 * since, at the end of their tables as a new database has them). */
static const char *const UPGRADE_SQL[STORE_SCHEMA_VERSION] = {
    NULL,
    /* 1 -> 2: runs.source, 'import' for the runs that version 1 marked as imported
       (model_name "import:...", or params.source "import" / "import-files") */
    "ALTER TABLE runs ADD COLUMN source TEXT NOT NULL DEFAULT '" STORE_SOURCE_ANALYZE "';"
    "UPDATE runs SET source = '" STORE_SOURCE_IMPORT "' WHERE substr(model_name, 1, 7) = 'import:'"
    " OR (CASE WHEN json_valid(params) THEN json_extract(params, '$.source') END) IN ('import', 'import-files');"
    "UPDATE meta SET value = '2' WHERE key = 'schema_version';",
    /* 2 -> 3: the first-token mass per sentence and head, the pooled one and the
       induction probe score per head (NULL for the runs written before) */
    "ALTER TABLE sentence_heads ADD COLUMN first REAL;"
    "ALTER TABLE head_scores ADD COLUMN first REAL;"
    "ALTER TABLE head_scores ADD COLUMN induction REAL;"
    "UPDATE meta SET value = '3' WHERE key = 'schema_version';",
    /* 3 -> 4: table topk (created from the schema by upgrade(), empty for older runs) */
    "UPDATE meta SET value = '4' WHERE key = 'schema_version';",
    /* 4 -> 5: the gradient head importance, norm-weighted and raw sink mass and ALTI head
       share per sentence and head, and their aggregates per head (NULL for older runs) */
    "ALTER TABLE sentence_heads ADD COLUMN head_importance REAL;"
    "ALTER TABLE sentence_heads ADD COLUMN sink_raw REAL;"
    "ALTER TABLE sentence_heads ADD COLUMN sink_norm REAL;"
    "ALTER TABLE sentence_heads ADD COLUMN alti REAL;"
    "ALTER TABLE head_scores ADD COLUMN head_importance REAL;"
    "ALTER TABLE head_scores ADD COLUMN head_importance_norm REAL;"
    "ALTER TABLE head_scores ADD COLUMN norm_sink_ratio REAL;"
    "ALTER TABLE head_scores ADD COLUMN alti_contribution REAL;"
    "UPDATE meta SET value = '5' WHERE key = 'schema_version';",
    /* 5 -> 6: table encdec_heads (created from the schema by upgrade(), empty for older runs) */
    "UPDATE meta SET value = '6' WHERE key = 'schema_version';",
    /* 6 -> 7: table topk_cross (created from the schema by upgrade(), empty for older runs) */
    "UPDATE meta SET value = '7' WHERE key = 'schema_version';",
};

/* Upgrades a database of schema version from (1 <= from < STORE_SCHEMA_VERSION) to
 * STORE_SCHEMA_VERSION in one transaction (the caller holds the writer lock); the tables
 * added since are created from the schema. */
static as_status upgrade(store *s, int from, as_error *err) {
    char *e = NULL, *create = schema_sql();
    if (!create) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    int ok = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, &e) == SQLITE_OK;
    for (int v = from; ok && v < STORE_SCHEMA_VERSION; v++) ok = sqlite3_exec(s->db, UPGRADE_SQL[v], NULL, NULL, &e) == SQLITE_OK;
    if (ok) ok = sqlite3_exec(s->db, create, NULL, NULL, &e) == SQLITE_OK;
    free(create);
    if (ok) ok = sqlite3_exec(s->db, "COMMIT", NULL, NULL, &e) == SQLITE_OK;
    if (!ok) {
        as_err_set(err, AS_ERR_INPUT,
                   "%s: cannot upgrade the database from schema version %d to %d (%s); rebuild it: run analyze / "
                   "import again with a new --db",
                   s->path, from, STORE_SCHEMA_VERSION, e ? e : "sqlite error");
        sqlite3_free(e);
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return AS_ERR_INPUT;
    }
    return AS_OK;
}

/* 1 when a database of schema version ver is upgraded in place. */
static int upgradable(int ver) { return ver >= 1 && ver < STORE_SCHEMA_VERSION; }

as_status an_db_path_check(const char *db_path, as_error *err) {
    struct stat st;
    if (stat(db_path, &st) != 0) return AS_OK; /* absent: created, or SQLite names the error */
    if (!S_ISREG(st.st_mode)) return as_err_set(err, AS_ERR_INPUT, "%s: not a regular file", db_path);
    return AS_OK;
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

/* Creates what is missing of the schema and records the version of a new database. */
static as_status ensure_schema(store *s, as_error *err) {
    char *sql = schema_sql();
    if (!sql) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    as_status rc = store_exec(s, sql, err);
    free(sql);
    if (rc) return rc;
    char q[160];
    snprintf(q, sizeof q, "INSERT OR IGNORE INTO meta VALUES('schema_version', '%d');", STORE_SCHEMA_VERSION);
    return store_exec(s, q, err);
}

as_status store_open(const char *path, int create, store *out, as_error *err) {
    int fd = -1, locked = 0;
    memset(out, 0, sizeof *out);
    as_status rc = an_db_path_check(path, err);
    if (rc) return rc;
    rc = take_writer_lock(path, create, &fd, &locked, err);
    if (rc) return rc;
    rc = open_db(path, SQLITE_OPEN_READWRITE | (create ? SQLITE_OPEN_CREATE : 0), out, err);
    out->lock_fd = fd;
    out->locked = locked;
    if (rc) goto fail;
    char *msg = NULL;
    if (sqlite3_exec(out->db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL, &msg) != SQLITE_OK) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: not a usable SQLite database: %s", path, msg ? msg : "?");
        sqlite3_free(msg);
        goto fail;
    }
    int ver;
    schema_version(out->db, &ver);
    if (upgradable(ver) && (rc = upgrade(out, ver, err))) goto fail;
    if ((rc = ensure_schema(out, err))) goto fail;
    schema_version(out->db, &ver);
    if (ver != STORE_SCHEMA_VERSION) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: database schema version %d, this attnscope writes %d", path, ver,
                        STORE_SCHEMA_VERSION);
        goto fail;
    }
    return AS_OK;
fail:
    store_close(out);
    return rc;
}

/* The first table or column of the schema that db lacks, as an error naming path. */
static as_status check_tables(sqlite3 *db, const char *path, as_error *err) {
    for (int t = 0; t < N_TABLES; t++) {
        sqlite3_stmt *st = NULL;
        char sql[160];
        snprintf(sql, sizeof sql, "SELECT 1 FROM sqlite_master WHERE type='table' AND name='%s'", TABLES[t].name);
        int ok = sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK;
        int has = ok && sqlite3_step(st) == SQLITE_ROW;
        sqlite3_finalize(st);
        if (!ok) return as_err_set(err, AS_ERR_INPUT, "%s: cannot read the schema: %s", path, sqlite3_errmsg(db));
        if (!has)
            return as_err_set(err, AS_ERR_INPUT, "%s: table '%s' is missing: not a complete attnscope analysis database",
                              path, TABLES[t].name);
    }
    for (int t = 0; t < N_TABLES; t++)
        for (int c = 0; c < TABLES[t].n_cols; c++) {
            sqlite3_stmt *st = NULL;
            char sql[160];
            snprintf(sql, sizeof sql, "SELECT \"%s\" FROM \"%s\" LIMIT 0", TABLES[t].cols[c].name, TABLES[t].name);
            int ok = sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK;
            sqlite3_finalize(st);
            if (!ok)
                return as_err_set(err, AS_ERR_INPUT,
                                  "%s: column '%s' of table '%s' is missing: not a complete attnscope analysis database",
                                  path, TABLES[t].cols[c].name, TABLES[t].name);
        }
    return AS_OK;
}

as_status store_check(sqlite3 *db, const char *path, as_error *err) {
    int ver;
    schema_version(db, &ver);
    if (upgradable(ver))
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: analysis database of schema version %d, this attnscope reads %d: upgrade it in place "
                          "with `attnscope report --db %s` (or rebuild it with analyze / import)",
                          path, ver, STORE_SCHEMA_VERSION, path);
    if (ver != STORE_SCHEMA_VERSION)
        return as_err_set(err, AS_ERR_INPUT, "%s: not an attnscope analysis database of schema version %d (found %d)",
                          path, STORE_SCHEMA_VERSION, ver);
    return check_tables(db, path, err);
}

as_status store_open_existing(const char *path, store *out, as_error *err) {
    /* read-write without CREATE and without any statement that writes: the file is read
       only, and SQLite can still remove the -wal / -shm files it makes when it closes */
    memset(out, 0, sizeof *out);
    as_status rc = an_db_path_check(path, err);
    if (!rc) rc = open_db(path, SQLITE_OPEN_READWRITE, out, err);
    if (rc) return rc;
    int ver;
    schema_version(out->db, &ver);
    if (upgradable(ver)) {
        /* a previous schema: upgraded in place under the writer lock, held until close */
        if ((rc = take_writer_lock(path, 0, &out->lock_fd, &out->locked, err)) || (rc = upgrade(out, ver, err))) {
            store_close(out);
            return rc;
        }
    }
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
