/* test_store.c — the analysis store end to end on the NumPy reference fixture
 * (tests/ref/gen_analysis.py): imports tests/ref/fixtures/analysis/import with
 * an_import_dir into a fresh SQLite database and compares every per-head aggregate
 * (importance, semantic, syntactic, Clark statistics, pattern label and confidence),
 * every per-relation accuracy with its baseline, and every head-pair JSD with the
 * expected values (max-abs tolerance 1e-5). Also: a second import is a no-op (same row
 * counts, run still done), export writes the documented JSON (format 2: each model's
 * heads in the server's columnar shape), and malformed folders
 * (bad .npy, bad JSON, wrong shape) fail with AS_ERR_INPUT naming the file; SHA-256
 * (run digests) on the FIPS 180-4 example vectors; store_open_existing (the readers)
 * leaves the file byte for byte as it was, creates nothing, and refuses a database
 * without a table of the schema, of another schema version, or not a database at all;
 * export and report refuse damaged index and JSD cells (overflowing, truncated,
 * non-numeric, infinite) naming the table; a database of schema version 1 (written
 * here with sqlite3) is upgraded in place by the readers and the writers, or refused
 * with one line; a version 2 database gets the first-token and induction columns, NULL.
 * It does not run a model (tests/cli/test_analyze.sh does, with kill/resume).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "analysis/report.h"
#include "analysis/runner.h"
#include "analysis/sha256.h"
#include "io/npz.h"

#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/analysis"
#define TOL 1e-5

static char g_tmp[64];

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/as_test_store_XXXXXX");
    assert_non_null(mkdtemp(g_tmp));
    as_set_quiet(1);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static double q1(store *s, const char *sql) {
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(s->db, sql, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    double v = sqlite3_column_type(q, 0) == SQLITE_NULL ? NAN : sqlite3_column_double(q, 0);
    sqlite3_finalize(q);
    return v;
}

static double maxdiff = 0.0;
static void near(double got, double want, const char *what) {
    double d = fabs(got - want);
    if (d > maxdiff) maxdiff = d;
    if (!(d <= TOL)) {
        fprintf(stderr, "%s: got %.9f want %.9f\n", what, got, want);
        fail();
    }
}

static void test_import_matches_numpy(void **state) {
    (void)state;
    json_error_t je;
    json_t *ex = json_load_file(FIX "/expected.json", 0, &je);
    assert_non_null(ex);
    int min_rel = (int)json_integer_value(json_object_get(ex, "min_rel"));
    char db[128];
    snprintf(db, sizeof db, "%s/a.db", g_tmp);
    an_opts o = {.min_rel = min_rel, .quiet = 1, .chunk = 3};
    as_error err = {0};
    assert_int_equal(an_import_dir(db, FIX "/import", &o, &err), AS_OK);
    store s;
    assert_int_equal(store_open(db, 0, &s, &err), AS_OK);
    assert_int_equal((int)q1(&s, "SELECT count(*) FROM runs WHERE status='done'"), 1);
    assert_int_equal((int)q1(&s, "SELECT count(*) FROM sentences"), (int)json_integer_value(json_object_get(ex, "n_sentences")));
    assert_int_equal((int)q1(&s, "SELECT count(*) FROM chunks"), 3); /* 8 sentences, K = 3 */
    size_t i;
    json_t *h;
    char sql[512];
    json_array_foreach(json_object_get(ex, "heads"), i, h) {
        int l = (int)json_integer_value(json_object_get(h, "layer")), hd = (int)json_integer_value(json_object_get(h, "head"));
        static const char *cols[] = {"importance", "semantic", "syntactic"};
        for (int k = 0; k < 3; k++) {
            snprintf(sql, sizeof sql, "SELECT %s FROM head_scores WHERE layer=%d AND head=%d", cols[k], l, hd);
            near(q1(&s, sql), json_real_value(json_object_get(h, cols[k])), cols[k]);
        }
        const char *key;
        json_t *v;
        json_object_foreach(json_object_get(h, "statistics"), key, v) {
            snprintf(sql, sizeof sql, "SELECT %s FROM head_scores WHERE layer=%d AND head=%d", key, l, hd);
            near(q1(&s, sql), json_real_value(v), key);
        }
        snprintf(sql, sizeof sql, "SELECT label = '%s' FROM patterns WHERE layer=%d AND head=%d",
                 json_string_value(json_object_get(h, "label")), l, hd);
        assert_int_equal((int)q1(&s, sql), 1);
        snprintf(sql, sizeof sql, "SELECT confidence FROM patterns WHERE layer=%d AND head=%d", l, hd);
        near(q1(&s, sql), json_real_value(json_object_get(h, "confidence")), "confidence");
    }
    int nrel = 0, ncounted = 0;
    json_array_foreach(json_object_get(ex, "rel_accuracy"), i, h) {
        snprintf(sql, sizeof sql,
                 "SELECT accuracy, baseline, n, correct, baseline_offset, counted FROM rel_accuracy WHERE relation='%s' AND dir=%d AND layer=%d AND head=%d",
                 json_string_value(json_object_get(h, "relation")), (int)json_integer_value(json_object_get(h, "dir")),
                 (int)json_integer_value(json_object_get(h, "layer")), (int)json_integer_value(json_object_get(h, "head")));
        sqlite3_stmt *q;
        assert_int_equal(sqlite3_prepare_v2(s.db, sql, -1, &q, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        near(sqlite3_column_double(q, 0), json_real_value(json_object_get(h, "accuracy")), "accuracy");
        near(sqlite3_column_double(q, 1), json_real_value(json_object_get(h, "baseline")), "baseline");
        assert_int_equal(sqlite3_column_int(q, 2), json_integer_value(json_object_get(h, "n")));
        assert_int_equal(sqlite3_column_int(q, 3), json_integer_value(json_object_get(h, "correct")));
        assert_int_equal(sqlite3_column_int(q, 4), json_integer_value(json_object_get(h, "baseline_offset")));
        assert_int_equal(sqlite3_column_int(q, 5), json_integer_value(json_object_get(h, "counted")));
        ncounted += sqlite3_column_int(q, 5);
        sqlite3_finalize(q);
        nrel++;
    }
    assert_int_equal((int)q1(&s, "SELECT count(*) FROM rel_accuracy"), nrel);
    assert_true(ncounted > 0);
    int H = (int)json_integer_value(json_object_get(ex, "H"));
    json_array_foreach(json_object_get(ex, "pairs"), i, h) {
        int a = (int)json_integer_value(json_object_get(h, "a")), b = (int)json_integer_value(json_object_get(h, "b"));
        snprintf(sql, sizeof sql, "SELECT jsd FROM head_pairs WHERE a_layer=%d AND a_head=%d AND b_layer=%d AND b_head=%d",
                 a / H, a % H, b / H, b % H);
        near(q1(&s, sql), json_real_value(json_object_get(h, "jsd")), "jsd");
    }
    /* the fixture's planted heads: (0,1) previous-word, (1,2) delimiter-focused */
    assert_int_equal((int)q1(&s, "SELECT label='previous-word' FROM patterns WHERE layer=0 AND head=1"), 1);
    assert_int_equal((int)q1(&s, "SELECT label='delimiter-focused' FROM patterns WHERE layer=1 AND head=2"), 1);
    double rows_before = q1(&s, "SELECT (SELECT count(*) FROM sentence_heads) + (SELECT count(*) FROM tokens) + (SELECT count(*) FROM saliency)");
    store_close(&s);
    printf("import vs NumPy reference: max abs diff %.3g over every aggregate\n", maxdiff);
    /* a finished run is a no-op */
    assert_int_equal(an_import_dir(db, FIX "/import", &o, &err), AS_OK);
    assert_int_equal(store_open(db, 0, &s, &err), AS_OK);
    assert_int_equal((int)q1(&s, "SELECT count(*) FROM runs"), 1);
    near(q1(&s, "SELECT (SELECT count(*) FROM sentence_heads) + (SELECT count(*) FROM tokens) + (SELECT count(*) FROM saliency)"), rows_before, "rows");
    /* export */
    char out[128];
    snprintf(out, sizeof out, "%s/heads.json", g_tmp);
    assert_int_equal(an_export(&s, out, &err), AS_OK);
    const double acc01 = q1(&s, "SELECT accuracy FROM rel_accuracy WHERE relation='all' AND dir=0 AND layer=0 AND head=1");
    store_close(&s);
    json_t *j = json_load_file(out, 0, &je);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "format")), "attnscope-heads");
    assert_int_equal(json_integer_value(json_object_get(j, "format_version")), 2);
    json_t *m = json_array_get(json_object_get(j, "models"), 0);
    /* heads: the server's columns, 6 heads with a row; entry 1 = layer 0, head 1 */
    json_t *hd = json_object_get(m, "heads"), *cols = json_object_get(hd, "columns");
    assert_int_equal(json_integer_value(json_object_get(hd, "n_scored")), 6);
    assert_int_equal(json_integer_value(json_object_get(hd, "layers")), 2);
    assert_int_equal(json_integer_value(json_object_get(hd, "heads")), 3);
    const char *key;
    json_t *col;
    json_object_foreach(cols, key, col) assert_int_equal(json_array_size(col), 6);
    assert_string_equal(json_string_value(json_array_get(json_object_get(cols, "pattern"), 1)), "previous-word");
    json_t *all = json_object_get(json_object_get(json_object_get(m, "relations"), "all"), "dependent_to_parent");
    near(json_real_value(json_array_get(json_object_get(all, "accuracy"), 1)), acc01, "export accuracy L0H1");
    assert_true(json_is_boolean(json_array_get(json_object_get(all, "counted"), 1)));
    assert_int_equal(json_array_size(json_object_get(m, "head_jsd")), 6);
    json_decref(j);
    json_decref(ex);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void expect_import_error(const char *dir, const char *pat) {
    char db[128];
    snprintf(db, sizeof db, "%s/bad.db", g_tmp);
    an_opts o = {.quiet = 1};
    as_error err = {0};
    assert_int_equal(an_import_dir(db, dir, &o, &err), AS_ERR_INPUT);
    if (!strstr(err.msg, pat)) {
        fprintf(stderr, "error '%s' lacks '%s'\n", err.msg, pat);
        fail();
    }
    assert_null(strchr(err.msg, '\n'));
}

static void test_import_errors(void **state) {
    (void)state;
    char dir[128], p[256];
    snprintf(dir, sizeof dir, "%s/bad", g_tmp);
    assert_int_equal(mkdir(dir, 0700), 0);
    expect_import_error(dir, "no NNNN.json");
    /* wrong shape: 3 tokens in the json, attention for 2 */
    float a[2 * 2] = {1, 0, 0.5f, 0.5f};
    int64_t shape[4] = {1, 1, 2, 2};
    snprintf(p, sizeof p, "%s/0001.attention.npy", dir);
    as_error err = {0};
    assert_int_equal(npy_write(p, NPY_F32, a, 4, shape, &err), AS_OK);
    snprintf(p, sizeof p, "%s/0001.json", dir);
    write_file(p, "{\"sentence\": \"a b\", \"tokens\": [\"[CLS]\", \"a\", \"[SEP]\"]}");
    expect_import_error(dir, "0001.attention.npy: attention shape");
    /* JSON syntax error names file and line */
    write_file(p, "{\"sentence\": \"a b\",\n \"tokens\": [\"[CLS]\", \"[SEP]\"\n");
    expect_import_error(dir, "0001.json:3");
    /* a corrupt npy */
    write_file(p, "{\"sentence\": \"a\", \"tokens\": [\"[CLS]\", \"[SEP]\"]}");
    snprintf(p, sizeof p, "%s/0001.attention.npy", dir);
    write_file(p, "\x93NUMPY\x01\x00\x10\x00{'descr': '<f8'}\n");
    expect_import_error(dir, "0001.attention.npy");
}

/* export and report on a damaged database: an index that overflows layer * H or that
 * sqlite3_column_int would truncate to 0, a non-numeric or infinite JSD, a direction
 * other than 0/1: each is refused with AS_ERR_INPUT naming the table, and nothing is
 * written into a real cell. Each damage is undone before the next. */
static void test_export_damaged(void **state) {
    (void)state;
    char db[128], out[128];
    snprintf(db, sizeof db, "%s/damaged.db", g_tmp);
    snprintf(out, sizeof out, "%s/damaged.json", g_tmp);
    an_opts o = {.quiet = 1, .min_rel = 1}; /* relations counted, so that report lists them */
    as_error err = {0};
    assert_int_equal(an_import_dir(db, FIX "/import", &o, &err), AS_OK);
    store s;
    assert_int_equal(store_open(db, 0, &s, &err), AS_OK);
    assert_int_equal(an_export(&s, out, &err), AS_OK);
    struct {
        const char *damage, *undo, *pat;
        int report; /* 1: an_report fails too */
    } cases[] = {
        {"UPDATE head_pairs SET a_layer=1073741824, jsd=12345 WHERE a_layer=0 AND a_head=0 AND b_layer=0 AND b_head=1",
         "UPDATE head_pairs SET a_layer=0 WHERE a_layer=1073741824", "a row of table head_pairs", 0},
        {"UPDATE head_pairs SET a_layer=4294967296 WHERE a_layer=0 AND a_head=0 AND b_layer=0 AND b_head=1",
         "UPDATE head_pairs SET a_layer=0 WHERE a_layer=4294967296", "a row of table head_pairs", 0},
        {"UPDATE head_pairs SET jsd='abc' WHERE a_layer=0 AND a_head=0 AND b_layer=0 AND b_head=1",
         "UPDATE head_pairs SET jsd=0.5 WHERE a_layer=0 AND a_head=0 AND b_layer=0 AND b_head=1",
         "head_pairs L0H0-L0H1 has a jsd that is not a number", 0},
        {"UPDATE head_pairs SET jsd=9e999 WHERE a_layer=0 AND a_head=0 AND b_layer=0 AND b_head=1",
         "UPDATE head_pairs SET jsd=0.5 WHERE a_layer=0 AND a_head=0 AND b_layer=0 AND b_head=1",
         "head_pairs L0H0-L0H1 has jsd inf", 0},
        {"UPDATE head_scores SET layer=4294967296 WHERE layer=0 AND head=0;"
         "UPDATE patterns SET layer=4294967296 WHERE layer=0 AND head=0",
         "UPDATE head_scores SET layer=0 WHERE layer=4294967296; UPDATE patterns SET layer=0 WHERE layer=4294967296",
         "a row of table head_scores", 0},
        {"UPDATE rel_accuracy SET dir=dir+4", "UPDATE rel_accuracy SET dir=dir-4", "rel_accuracy", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(sqlite3_exec(s.db, cases[i].damage, NULL, NULL, NULL), SQLITE_OK);
        assert_true(sqlite3_changes(s.db) > 0);
        as_status rc = an_export(&s, out, &err);
        if (rc != AS_ERR_INPUT || !strstr(err.msg, cases[i].pat) || !strstr(err.msg, db)) {
            fprintf(stderr, "case %zu: rc %d '%s' lacks '%s'\n", i, rc, err.msg, cases[i].pat);
            fail();
        }
        if (cases[i].report) {
            FILE *devnull = fopen("/dev/null", "w");
            assert_non_null(devnull);
            assert_int_equal(an_report(&s, devnull, 3, &err), AS_ERR_INPUT);
            fclose(devnull);
            assert_non_null(strstr(err.msg, "direction other than 0 and 1"));
        }
        assert_int_equal(sqlite3_exec(s.db, cases[i].undo, NULL, NULL, NULL), SQLITE_OK);
    }
    /* undone: the export is whole again, and the pair keeps the value written back */
    assert_int_equal(an_export(&s, out, &err), AS_OK);
    store_close(&s);
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    assert_non_null(j);
    json_t *m = json_array_get(json_object_get(j, "models"), 0);
    json_t *jm = json_object_get(m, "head_jsd");
    assert_true(json_real_value(json_array_get(json_array_get(jm, 0), 1)) == 0.5);
    assert_true(json_real_value(json_array_get(json_array_get(jm, 1), 0)) == 0.5);
    for (size_t a = 0; a < json_array_size(jm); a++)
        for (size_t b = 0; b < json_array_size(jm); b++)
            assert_true(json_real_value(json_array_get(json_array_get(jm, a), b)) < 1.0);
    json_decref(j);
}

/* FIPS 180-4 / NIST example vectors: the digests that identify runs */
static void test_sha256(void **state) {
    (void)state;
    sha256_ctx c;
    char hex[65];
    sha256_init(&c);
    sha256_update(&c, "abc", 3);
    sha256_final_hex(&c, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sha256_init(&c);
    sha256_update(&c, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56);
    sha256_final_hex(&c, hex);
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    sha256_init(&c);
    char a[1001];
    memset(a, 'a', sizeof a);
    for (int i = 0; i < 1000; i++) sha256_update(&c, a, i % 2 ? 999 : 1001); /* uneven pieces */
    sha256_final_hex(&c, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

static char *slurp_db(const char *path, size_t *n) {
    char *buf = NULL;
    as_error err = {0};
    if (as_read_file(path, 1 << 24, &buf, n, &err)) fail_msg("%s", err.msg);
    return buf;
}

static void test_open_existing(void **state) {
    (void)state;
    char db[300], side[320], txt[300];
    snprintf(db, sizeof db, "%s/existing.sqlite", g_tmp);
    as_error err = {0};
    store s;
    assert_int_equal(store_open(db, 1, &s, &err), AS_OK);
    store_close(&s);
    size_t n0, n1;
    char *before = slurp_db(db, &n0);
    assert_int_equal(store_open_existing(db, &s, &err), AS_OK);
    assert_int_equal((int)q1(&s, "SELECT count(*) FROM runs"), 0);
    store_close(&s);
    char *after = slurp_db(db, &n1);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);
    snprintf(side, sizeof side, "%s-wal", db);
    assert_int_not_equal(access(side, F_OK), 0); /* SQLite removed its side files */
    /* a missing table is named */
    sqlite3 *raw;
    assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, "DROP TABLE patterns", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    assert_int_equal(store_open_existing(db, &s, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "table 'patterns' is missing"));
    assert_null(s.db);
    /* another schema version */
    assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, "UPDATE meta SET value='99' WHERE key='schema_version'", NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(raw);
    assert_int_equal(store_open_existing(db, &s, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "(found 99)"));
    /* not a database; absent (and not created) */
    snprintf(txt, sizeof txt, "%s/notdb.sqlite", g_tmp);
    FILE *f = fopen(txt, "w");
    assert_non_null(f);
    fputs("sentence\tlabel\nhello\t1\n", f);
    fclose(f);
    assert_int_equal(store_open_existing(txt, &s, &err), AS_ERR_INPUT);
    snprintf(txt, sizeof txt, "%s/absent.sqlite", g_tmp);
    assert_int_equal(store_open_existing(txt, &s, &err), AS_ERR_INPUT);
    assert_int_not_equal(access(txt, F_OK), 0);
}

/* The schema of version 1 (before runs.source), as that version created it. */
static const char *V1_SCHEMA =
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
    "CREATE TABLE runs(id INTEGER PRIMARY KEY, model_name TEXT NOT NULL, model_digest TEXT NOT NULL,"
    "  arch TEXT NOT NULL, n_layer INTEGER NOT NULL, n_head INTEGER NOT NULL, d_head INTEGER NOT NULL,"
    "  corpus TEXT NOT NULL, corpus_digest TEXT NOT NULL, params TEXT NOT NULL, version TEXT NOT NULL,"
    "  n_total INTEGER NOT NULL, n_done INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL,"
    "  created TEXT NOT NULL, finished TEXT, UNIQUE(model_digest, corpus_digest, params));"
    "CREATE TABLE sentences(run INTEGER NOT NULL, idx INTEGER NOT NULL, corpus TEXT NOT NULL, source TEXT NOT NULL,"
    "  text TEXT NOT NULL, label INTEGER, predicted INTEGER, n_tokens INTEGER NOT NULL,"
    "  n_words INTEGER NOT NULL, truncated INTEGER NOT NULL, explained INTEGER NOT NULL,"
    "  PRIMARY KEY(run, idx)) WITHOUT ROWID;"
    "CREATE TABLE tokens(run INTEGER NOT NULL, sent INTEGER NOT NULL, pos INTEGER NOT NULL, text TEXT NOT NULL,"
    "  start INTEGER, end INTEGER, kind TEXT NOT NULL, word INTEGER, PRIMARY KEY(run, sent, pos)) WITHOUT ROWID;"
    "CREATE TABLE words(run INTEGER NOT NULL, sent INTEGER NOT NULL, idx INTEGER NOT NULL, form TEXT NOT NULL,"
    "  head INTEGER, deprel TEXT, PRIMARY KEY(run, sent, idx)) WITHOUT ROWID;"
    "CREATE TABLE saliency(run INTEGER NOT NULL, sent INTEGER NOT NULL, class INTEGER NOT NULL, pos INTEGER NOT NULL,"
    "  value REAL NOT NULL, PRIMARY KEY(run, sent, class, pos)) WITHOUT ROWID;"
    "CREATE TABLE sentence_heads(run INTEGER NOT NULL, sent INTEGER NOT NULL, layer INTEGER NOT NULL,"
    "  head INTEGER NOT NULL, importance REAL NOT NULL, semantic REAL, cls REAL NOT NULL, sep REAL NOT NULL,"
    "  punct REAL NOT NULL, self REAL NOT NULL, prev REAL NOT NULL, next REAL NOT NULL, entropy REAL NOT NULL,"
    "  entropy_norm REAL NOT NULL, abl_token REAL, abl_position REAL, abl_segment REAL,"
    "  PRIMARY KEY(run, sent, layer, head)) WITHOUT ROWID;"
    "CREATE TABLE chunks(run INTEGER NOT NULL, idx INTEGER NOT NULL, first_sent INTEGER NOT NULL,"
    "  n_sent INTEGER NOT NULL, acc BLOB NOT NULL, PRIMARY KEY(run, idx)) WITHOUT ROWID;"
    "CREATE TABLE rel_totals(run INTEGER NOT NULL, relation TEXT NOT NULL, n INTEGER NOT NULL,"
    "  PRIMARY KEY(run, relation)) WITHOUT ROWID;"
    "CREATE TABLE rel_counts(run INTEGER NOT NULL, relation TEXT NOT NULL, dir INTEGER NOT NULL,"
    "  layer INTEGER NOT NULL, head INTEGER NOT NULL, correct INTEGER NOT NULL,"
    "  PRIMARY KEY(run, relation, dir, layer, head)) WITHOUT ROWID;"
    "CREATE TABLE baseline_counts(run INTEGER NOT NULL, relation TEXT NOT NULL, dir INTEGER NOT NULL,"
    "  offset INTEGER NOT NULL, correct INTEGER NOT NULL, PRIMARY KEY(run, relation, dir, offset)) WITHOUT ROWID;"
    "CREATE TABLE head_scores(run INTEGER NOT NULL, layer INTEGER NOT NULL, head INTEGER NOT NULL,"
    "  importance REAL, semantic REAL, syntactic REAL NOT NULL, syntactic_relation TEXT, syntactic_dir INTEGER,"
    "  cls REAL, sep REAL, punct REAL, self REAL, prev REAL, next REAL, entropy REAL, entropy_norm REAL,"
    "  n_sentences INTEGER NOT NULL, n_semantic INTEGER NOT NULL, PRIMARY KEY(run, layer, head)) WITHOUT ROWID;"
    "CREATE TABLE rel_accuracy(run INTEGER NOT NULL, relation TEXT NOT NULL, dir INTEGER NOT NULL,"
    "  layer INTEGER NOT NULL, head INTEGER NOT NULL, n INTEGER NOT NULL, correct INTEGER NOT NULL,"
    "  accuracy REAL NOT NULL, baseline REAL NOT NULL, baseline_offset INTEGER NOT NULL, counted INTEGER NOT NULL,"
    "  PRIMARY KEY(run, relation, dir, layer, head)) WITHOUT ROWID;"
    "CREATE TABLE head_pairs(run INTEGER NOT NULL, a_layer INTEGER NOT NULL, a_head INTEGER NOT NULL,"
    "  b_layer INTEGER NOT NULL, b_head INTEGER NOT NULL, jsd REAL NOT NULL,"
    "  PRIMARY KEY(run, a_layer, a_head, b_layer, b_head)) WITHOUT ROWID;"
    "CREATE TABLE patterns(run INTEGER NOT NULL, layer INTEGER NOT NULL, head INTEGER NOT NULL, label TEXT NOT NULL,"
    "  confidence REAL NOT NULL, concentration INTEGER, n_links INTEGER NOT NULL, abl_token REAL,"
    "  abl_position REAL, abl_segment REAL, depends_on TEXT, PRIMARY KEY(run, layer, head)) WITHOUT ROWID;"
    "INSERT INTO meta VALUES('schema_version', '1');"
    "INSERT INTO runs(model_name, model_digest, arch, n_layer, n_head, d_head, corpus, corpus_digest, params,"
    "  version, n_total, n_done, status, created) VALUES"
    "  ('models/m', 'a', 'bert', 1, 2, 4, '{}', 'c1', '{\"chunk\":16,\"min_rel\":100,\"source\":\"analyze\"}',"
    "   '0.1.0', 1, 1, 'done', '2026-01-01 00:00:00'),"
    "  ('import:data/x', 'b', 'imported', 1, 2, 0, '{}', 'c2', '{\"chunk\":16,\"min_rel\":100,\"source\":\"import\"}',"
    "   '0.1.0', 1, 1, 'done', '2026-01-01 00:00:00'),"
    "  ('torch-export', 'c', 'imported', 1, 2, 0, '{}', 'c3', '{\"source\":\"import-files\"}',"
    "   '0.1.0', 1, 1, 'done', '2026-01-01 00:00:00'),"
    "  ('models/n', 'd', 'bert', 1, 2, 4, '{}', 'c4', 'not json', '0.1.0', 1, 1, 'done', '2026-01-01 00:00:00');"
    "INSERT INTO head_scores VALUES(1, 0, 0, 0.5, NULL, 0, NULL, NULL, 0.1, 0.2, 0, 0, 0, 0.7, 1.0, 0.5, 3, 0),"
    "  (1, 0, 1, 0.6, NULL, 0, NULL, NULL, 0.1, 0.2, 0, 0, 0, 0.7, 1.0, 0.5, 3, 0);"
    "INSERT INTO patterns VALUES(1, 0, 0, 'next-word', 0.7, NULL, 0, NULL, NULL, NULL, NULL),"
    "  (1, 0, 1, 'next-word', 0.7, NULL, 0, NULL, NULL, NULL, NULL);";

/* Writes a database of schema version 1 at path (with sqlite3 only). */
static void write_v1(const char *path) {
    sqlite3 *raw;
    char side[320];
    unlink(path);
    snprintf(side, sizeof side, "%s-wal", path);
    unlink(side);
    snprintf(side, sizeof side, "%s-shm", path);
    unlink(side);
    assert_int_equal(sqlite3_open(path, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, V1_SCHEMA, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
}

/* A version 1 database: the server's check refuses it with one line saying how to
 * upgrade it; the readers (store_open_existing) and the writers (store_open) upgrade
 * it in place: runs.source filled from the "import:" name prefix and params.source,
 * version 2, and its results read as before. A version 1 database that cannot be
 * upgraded is refused with one line saying how to rebuild it. */
static void test_upgrade_v1(void **state) {
    (void)state;
    char db[300], out[320];
    snprintf(db, sizeof db, "%s/v1.sqlite", g_tmp);
    snprintf(out, sizeof out, "%s/v1.json", g_tmp);
    as_error err = {0};
    write_v1(db);
    sqlite3 *raw;
    assert_int_equal(sqlite3_open_v2(db, &raw, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    assert_int_equal(store_check(raw, db, &err), AS_ERR_INPUT);
    sqlite3_close(raw);
    assert_non_null(strstr(err.msg, "schema version 1"));
    assert_non_null(strstr(err.msg, "attnscope report --db"));
    assert_null(strchr(err.msg, '\n'));
    const char *want = "analyze import import analyze";
    for (int writer = 0; writer < 2; writer++) {
        store s;
        if (writer) {
            write_v1(db);
            assert_int_equal(store_open(db, 0, &s, &err), AS_OK);
        } else {
            assert_int_equal(store_open_existing(db, &s, &err), AS_OK);
        }
        assert_int_equal((int)q1(&s, "SELECT value FROM meta WHERE key='schema_version'"), STORE_SCHEMA_VERSION);
        sqlite3_stmt *q;
        assert_int_equal(sqlite3_prepare_v2(s.db, "SELECT group_concat(source, ' ') FROM (SELECT source FROM runs ORDER BY id)",
                                            -1, &q, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(q, 0), want);
        sqlite3_finalize(q);
        assert_int_equal(store_check(s.db, db, &err), AS_OK);
        assert_int_equal(an_export(&s, out, &err), AS_OK);
        store_close(&s);
    }
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    assert_non_null(j);
    json_t *m = json_array_get(json_object_get(j, "models"), 0);
    assert_string_equal(json_string_value(json_object_get(m, "source")), "analyze");
    json_t *hd = json_object_get(m, "heads");
    assert_int_equal(json_integer_value(json_object_get(hd, "n_scored")), 2);
    json_t *imp = json_object_get(json_object_get(hd, "columns"), "importance");
    assert_int_equal(json_array_size(imp), 2);
    assert_true(json_real_value(json_array_get(imp, 0)) == 0.5 && json_real_value(json_array_get(imp, 1)) == 0.6);
    json_decref(j);
    /* a second open changes nothing */
    store s;
    assert_int_equal(store_open_existing(db, &s, &err), AS_OK);
    assert_int_equal((int)q1(&s, "SELECT count(*) FROM runs WHERE source='import'"), 2);
    store_close(&s);
    /* cannot be upgraded: refused with one line */
    write_v1(db);
    assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, "ALTER TABLE runs ADD COLUMN source TEXT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    assert_int_equal(store_open_existing(db, &s, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "cannot upgrade the database from schema version 1"));
    assert_non_null(strstr(err.msg, "rebuild it"));
    assert_null(strchr(err.msg, '\n'));
    assert_null(s.db);
    assert_int_equal(store_open(db, 0, &s, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "rebuild it"));
}

/* A version 2 database (version 1 + runs.source): upgraded in place to version 3 by a
 * reader and a writer alike; the columns added (sentence_heads.first, head_scores.first,
 * head_scores.induction) are NULL for its runs, its other results read as before, and
 * the export has the new fields as null. The server's check names version 2. */
static void test_upgrade_v2(void **state) {
    (void)state;
    char db[300], out[320];
    snprintf(db, sizeof db, "%s/v2.sqlite", g_tmp);
    snprintf(out, sizeof out, "%s/v2.json", g_tmp);
    as_error err = {0};
    for (int writer = 0; writer < 2; writer++) {
        write_v1(db);
        sqlite3 *raw;
        assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
        assert_int_equal(sqlite3_exec(raw,
                                      "ALTER TABLE runs ADD COLUMN source TEXT NOT NULL DEFAULT 'analyze';"
                                      "UPDATE meta SET value='2' WHERE key='schema_version';",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        assert_int_equal(store_check(raw, db, &err), AS_ERR_INPUT);
        assert_non_null(strstr(err.msg, "schema version 2"));
        assert_non_null(strstr(err.msg, "attnscope report --db"));
        sqlite3_close(raw);
        store s;
        if (writer) assert_int_equal(store_open(db, 0, &s, &err), AS_OK);
        else assert_int_equal(store_open_existing(db, &s, &err), AS_OK);
        assert_int_equal((int)q1(&s, "SELECT value FROM meta WHERE key='schema_version'"), STORE_SCHEMA_VERSION);
        assert_int_equal((int)q1(&s, "SELECT count(*) FROM head_scores WHERE induction IS NULL AND first IS NULL"), 2);
        assert_int_equal((int)q1(&s, "SELECT count(*) FROM topk"), 0); /* created by the upgrade, empty */
        assert_int_equal((int)q1(&s, "SELECT count(*) FROM sentence_heads WHERE first IS NULL"), 0);
        assert_int_equal(store_check(s.db, db, &err), AS_OK);
        assert_int_equal(an_export(&s, out, &err), AS_OK);
        store_close(&s);
    }
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    assert_non_null(j);
    json_t *cols = json_object_get(json_object_get(json_array_get(json_object_get(j, "models"), 0), "heads"), "columns");
    assert_true(json_is_null(json_array_get(json_object_get(cols, "induction"), 0)));
    assert_true(json_is_null(json_array_get(json_object_get(cols, "first"), 1)));
    assert_true(json_real_value(json_array_get(json_object_get(cols, "importance"), 1)) == 0.6);
    json_decref(j);
}

/* A version 4 database (version 1 + runs.source, the first-token / induction columns and
 * table topk, as version 4 wrote them): upgraded in place to version 5 by a reader and a
 * writer alike; the columns added (sentence_heads.head_importance, sink_raw, sink_norm,
 * alti; head_scores.head_importance, head_importance_norm, norm_sink_ratio,
 * alti_contribution) are NULL for its runs, its other results read as before, and the
 * export has the new fields, null. The server's check names version 4. */
static void test_upgrade_v4(void **state) {
    (void)state;
    static const char *const added[] = {"head_importance", "head_importance_norm", "norm_sink_ratio", "alti_contribution"};
    char db[300], out[320];
    snprintf(db, sizeof db, "%s/v4.sqlite", g_tmp);
    snprintf(out, sizeof out, "%s/v4.json", g_tmp);
    as_error err = {0};
    for (int writer = 0; writer < 2; writer++) {
        write_v1(db);
        sqlite3 *raw;
        assert_int_equal(sqlite3_open(db, &raw), SQLITE_OK);
        assert_int_equal(sqlite3_exec(raw,
                                      "ALTER TABLE runs ADD COLUMN source TEXT NOT NULL DEFAULT 'analyze';"
                                      "ALTER TABLE sentence_heads ADD COLUMN first REAL;"
                                      "ALTER TABLE head_scores ADD COLUMN first REAL;"
                                      "ALTER TABLE head_scores ADD COLUMN induction REAL;"
                                      "UPDATE head_scores SET first = 0.25;"
                                      "CREATE TABLE topk(run INTEGER NOT NULL, sent INTEGER NOT NULL, layer INTEGER NOT NULL,"
                                      " head INTEGER NOT NULL, k INTEGER NOT NULL, n_query INTEGER NOT NULL, rows BLOB NOT NULL,"
                                      " PRIMARY KEY(run, sent, layer, head));"
                                      "UPDATE meta SET value='4' WHERE key='schema_version';",
                                      NULL, NULL, NULL),
                         SQLITE_OK);
        assert_int_equal(store_check(raw, db, &err), AS_ERR_INPUT);
        assert_non_null(strstr(err.msg, "schema version 4"));
        assert_non_null(strstr(err.msg, "attnscope report --db"));
        sqlite3_close(raw);
        store s;
        if (writer) assert_int_equal(store_open(db, 0, &s, &err), AS_OK);
        else assert_int_equal(store_open_existing(db, &s, &err), AS_OK);
        assert_int_equal((int)q1(&s, "SELECT value FROM meta WHERE key='schema_version'"), STORE_SCHEMA_VERSION);
        assert_int_equal((int)q1(&s, "SELECT count(*) FROM head_scores WHERE head_importance IS NULL AND head_importance_norm"
                                     " IS NULL AND norm_sink_ratio IS NULL AND alti_contribution IS NULL AND first = 0.25"), 2);
        assert_int_equal((int)q1(&s, "SELECT count(*) FROM pragma_table_info('sentence_heads') WHERE name IN"
                                     " ('head_importance', 'sink_raw', 'sink_norm', 'alti')"), 4);
        assert_int_equal(store_check(s.db, db, &err), AS_OK);
        assert_int_equal(an_export(&s, out, &err), AS_OK);
        store_close(&s);
    }
    json_error_t je;
    json_t *j = json_load_file(out, 0, &je);
    assert_non_null(j);
    json_t *cols = json_object_get(json_object_get(json_array_get(json_object_get(j, "models"), 0), "heads"), "columns");
    for (int k = 0; k < 4; k++) {
        json_t *a = json_object_get(cols, added[k]);
        assert_int_equal(json_array_size(a), 2);
        assert_true(json_is_null(json_array_get(a, 0)) && json_is_null(json_array_get(a, 1)));
    }
    assert_true(json_real_value(json_array_get(json_object_get(cols, "first"), 1)) == 0.25);
    assert_true(json_real_value(json_array_get(json_object_get(cols, "importance"), 1)) == 0.6);
    json_decref(j);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_existing),
        cmocka_unit_test(test_sha256),
        cmocka_unit_test(test_import_matches_numpy),
        cmocka_unit_test(test_import_errors),
        cmocka_unit_test(test_export_damaged),
        cmocka_unit_test(test_upgrade_v1),
        cmocka_unit_test(test_upgrade_v2),
        cmocka_unit_test(test_upgrade_v4),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
