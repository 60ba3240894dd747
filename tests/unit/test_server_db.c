/* test_server_db.c — HTTP tests of the /api/v1/db routes of `attnscope serve --db`
 * (src/server/db_api.c). Builds a real analysis database with the real binary
 * (tests/ref/make_analysis_db.sh: two tiny SST-2 classifiers analysed on SST-2 + CoNLL-U
 * sentences), starts AS_BINARY serve on 127.0.0.1 with an ephemeral port and checks every
 * route against the database read directly with SQLite: runs, per-head scores and
 * patterns, the binary head-pair JSD matrix, best heads per relation and accuracy by
 * layer, pagination / search / filters of the sentence list (and that SQL in a parameter
 * is only text), a sentence's tokens, words and saliency, the recomputed attention (rows
 * sum to 1, equal to the run cache's and to POST /run's), and that a head's correct /
 * wrong arcs summed over the corpus equal the stored relation counts for every head,
 * relation and direction. Errors: 4xx one-line JSON for bad ids, ranges, parameters,
 * methods, a run without a served model (409), a server without --db, bad --db files.
 * The database file is unchanged afterwards (opened read-only). SIGTERM exits 0.
 * --import-dir (test_import_dir): an imported run's attention is served from its folder's
 * .npy files (equal to them exactly) and its correct / wrong arcs summed over the
 * sentences equal the stored relation counts, for a synthetic folder and, when
 * ../shared exists, the real BERT-base folder; explicit RUN=DIR mapping, a folder that
 * matches no run, a damaged .npy (409 naming it) and bad options (exit 2); each imported
 * sentence as a run of the explorer (.../sentences/{i}/run: its attention route equal
 * to the .npy, qk 409, 404 for a missing sentence, 409 without a folder).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


#include "server_harness.h"


/* ---- fixtures --------------------------------------------------------------------- */

static server S;       /* --model bert-sst --model distil-sst --db analysis.sqlite */
static char dir[256];  /* temp folder with the models, the corpus and the database */
static char dbp[300];
static sqlite3 *DB;    /* the same database, read directly */
static char db_sum[128];

static void file_sum(const char *path, char *out, size_t cap) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "md5sum '%s'", path);
    FILE *p = popen(cmd, "r");
    out[0] = 0;
    if (p) {
        if (!fgets(out, (int)cap, p)) out[0] = 0;
        pclose(p);
    }
}

static int setup(void **state) {
    snprintf(dir, sizeof dir, "/tmp/attnscope_dbtest_%d", (int)getpid());
    snprintf(dbp, sizeof dbp, "%s/analysis.sqlite", dir);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "bash '%s/tests/ref/make_analysis_db.sh' '%s' '%s'", AS_SOURCE_DIR, AS_BINARY, dir);
    if (system(cmd)) {
        fprintf(stderr, "could not build the analysis database: %s\n", cmd);
        return -1;
    }
    if (sqlite3_open_v2(dbp, &DB, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) return -1;
    file_sum(dbp, db_sum, sizeof db_sum);
    char m1[300], m2[300];
    snprintf(m1, sizeof m1, "%s/bert-sst", dir);
    snprintf(m2, sizeof m2, "%s/distil-sst", dir);
    const char *args[] = {"--model", m1, "--model", m2, "--db", dbp, NULL};
    return server_start_or_report(&S, args);
}

static int teardown(void **state) {
    int rc = server_stop_report(&S);
    sqlite3_close(DB);
    char sum[128];
    file_sum(dbp, sum, sizeof sum);
    int same = !strcmp(sum, db_sum);
    if (!same) fprintf(stderr, "the database changed while served read-only\n");
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
    return rc == 0 && same ? 0 : -1;
}

/* GET path (printf-style), expecting 200 JSON. */
static json_t *get_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static json_t *get_json(const char *fmt, ...) {
    char path[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    resp r;
    get(S.port, path, &r);
    if (r.status != 200) fprintf(stderr, "GET %s: %d %.300s\n", path, r.status, r.body ? (char *)r.body : "");
    assert_int_equal(r.status, 200);
    assert_true(header_has(&r, "application/json"));
    json_t *j = body_json(&r);
    resp_free(&r);
    return j;
}

static double sql_double(const char *sql, int64_t a, int64_t b, int64_t c) {
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(DB, sql, -1, &st, NULL), SQLITE_OK);
    sqlite3_bind_int64(st, 1, a);
    sqlite3_bind_int64(st, 2, b);
    sqlite3_bind_int64(st, 3, c);
    double v = sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL ? sqlite3_column_double(st, 0) : NAN;
    sqlite3_finalize(st);
    return v;
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_runs(void **state) {
    json_t *j = get_json("/api/v1/db/runs");
    assert_string_equal(json_string_value(json_object_get(j, "db")), "analysis.sqlite");
    json_t *runs = json_object_get(j, "runs");
    assert_int_equal(json_array_size(runs), 2);
    const char *names[] = {"bert-sst", "distil-sst"};
    for (size_t i = 0; i < 2; i++) {
        json_t *r = json_array_get(runs, i);
        assert_int_equal(json_integer_value(json_object_get(r, "id")), (json_int_t)i + 1);
        assert_string_equal(json_string_value(json_object_get(r, "name")), names[i]);
        assert_string_equal(json_string_value(json_object_get(r, "model")), names[i]); /* served: attention available */
        assert_string_equal(json_string_value(json_object_get(r, "status")), "done");
        assert_int_equal(json_integer_value(json_object_get(r, "layers")), 2);
        assert_int_equal(json_integer_value(json_object_get(r, "heads")), 4);
        assert_int_equal(json_integer_value(json_object_get(r, "n_sentences")), 15);
        assert_true(json_is_true(json_object_get(r, "has_syntactic")));
        assert_true(json_is_true(json_object_get(r, "has_semantic")));
        assert_string_equal(json_string_value(json_object_get(json_object_get(r, "params"), "source")), "analyze");
    }
    json_decref(j);
    j = get_json("/api/v1/db/runs/2");
    assert_string_equal(json_string_value(json_object_get(j, "arch")), "distilbert");
    json_decref(j);
}

static void test_heads(void **state) {
    for (int run = 1; run <= 2; run++) {
        json_t *j = get_json("/api/v1/db/runs/%d/heads", run);
        json_t *c = json_object_get(j, "columns");
        assert_int_equal(json_integer_value(json_object_get(j, "n_scored")), 8);
        const char *num[] = {"importance", "semantic", "syntactic", "cls", "sep", "entropy_norm", "confidence", "abl_token", "abl_position"};
        for (size_t k = 0; k < sizeof num / sizeof num[0]; k++) {
            json_t *a = json_object_get(c, num[k]);
            assert_int_equal(json_array_size(a), 8);
            char sql[256];
            snprintf(sql, sizeof sql,
                     "SELECT %s FROM head_scores h JOIN patterns p USING(run, layer, head) WHERE run=?1 AND layer=?2 AND head=?3",
                     !strcmp(num[k], "confidence") || !strncmp(num[k], "abl_", 4) ? num[k] : num[k]);
            for (int lh = 0; lh < 8; lh++) {
                double want = sql_double(sql, run, lh / 4, lh % 4);
                double got = json_number_value(json_array_get(a, (size_t)lh));
                assert_false(isnan(want));
                assert_float_equal(got, want, 1e-12);
            }
        }
        json_t *pat = json_object_get(c, "pattern"), *dep = json_object_get(c, "depends_on");
        for (int lh = 0; lh < 8; lh++) {
            sqlite3_stmt *st;
            sqlite3_prepare_v2(DB, "SELECT label, depends_on FROM patterns WHERE run=?1 AND layer=?2 AND head=?3", -1, &st, NULL);
            sqlite3_bind_int(st, 1, run);
            sqlite3_bind_int(st, 2, lh / 4);
            sqlite3_bind_int(st, 3, lh % 4);
            assert_int_equal(sqlite3_step(st), SQLITE_ROW);
            assert_string_equal(json_string_value(json_array_get(pat, (size_t)lh)), (const char *)sqlite3_column_text(st, 0));
            assert_string_equal(json_string_value(json_array_get(dep, (size_t)lh)), (const char *)sqlite3_column_text(st, 1));
            sqlite3_finalize(st);
        }
        json_decref(j);
    }
}

static void test_pairs_binary(void **state) {
    resp r;
    get(S.port, "/api/v1/db/runs/1/pairs", &r);
    assert_int_equal(r.status, 200);
    assert_true(header_has(&r, "application/octet-stream"));
    tb t;
    tb_parse(&r, &t);
    json_t *x = tb_tensor(&t, "jsd");
    json_t *shape = json_object_get(x, "shape");
    assert_int_equal(json_integer_value(json_array_get(shape, 0)), 8);
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), 8);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(t.hdr, "meta"), "pairs")), 28);
    for (int a = 0; a < 8; a++) {
        assert_float_equal(tb_at(&t, x, (size_t)(a * 8 + a)), 0.0, 0.0);
        for (int b = a + 1; b < 8; b++) {
            double want = sql_double("SELECT jsd FROM head_pairs WHERE run=1 AND a_layer*4+a_head=?1 AND b_layer*4+b_head=?2 AND ?3=0", a, b, 0);
            assert_float_equal(tb_at(&t, x, (size_t)(a * 8 + b)), want, 1e-6);
            assert_float_equal(tb_at(&t, x, (size_t)(b * 8 + a)), want, 1e-6);
            assert_true(want > 0);
        }
    }
    json_decref(t.hdr);
    resp_free(&r);
}

static void test_relations(void **state) {
    json_t *j = get_json("/api/v1/db/runs/1/relations?top=2");
    json_t *rels = json_object_get(j, "relations");
    assert_int_equal(json_array_size(rels), 4); /* all, cop, det, nsubj */
    assert_string_equal(json_string_value(json_object_get(json_array_get(rels, 0), "relation")), "all");
    size_t i;
    json_t *rel;
    json_array_foreach(rels, i, rel) {
        const char *name = json_string_value(json_object_get(rel, "relation"));
        json_t *dirs = json_object_get(rel, "dirs");
        assert_int_equal(json_array_size(dirs), 2);
        for (int d = 0; d < 2; d++) {
            json_t *o = json_array_get(dirs, (size_t)d);
            assert_int_equal(json_integer_value(json_object_get(o, "dir")), d);
            json_t *best = json_object_get(o, "best");
            assert_int_equal(json_array_size(best), 2);
            sqlite3_stmt *st;
            sqlite3_prepare_v2(DB, "SELECT max(accuracy), min(baseline), max(baseline) FROM rel_accuracy WHERE run=1 AND relation=?1 AND dir=?2", -1, &st, NULL);
            sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 2, d);
            assert_int_equal(sqlite3_step(st), SQLITE_ROW);
            assert_float_equal(json_number_value(json_object_get(json_array_get(best, 0), "accuracy")), sqlite3_column_double(st, 0), 1e-12);
            assert_float_equal(json_number_value(json_object_get(o, "baseline")), sqlite3_column_double(st, 1), 1e-12);
            assert_float_equal(sqlite3_column_double(st, 1), sqlite3_column_double(st, 2), 0);
            sqlite3_finalize(st);
            assert_true(json_number_value(json_object_get(json_array_get(best, 0), "accuracy")) >=
                        json_number_value(json_object_get(json_array_get(best, 1), "accuracy")));
            json_t *bl = json_object_get(o, "by_layer");
            assert_int_equal(json_array_size(bl), 2);
            for (int l = 0; l < 2; l++) {
                sqlite3_prepare_v2(DB, "SELECT max(accuracy) FROM rel_accuracy WHERE run=1 AND relation=?1 AND dir=?2 AND layer=?3", -1, &st, NULL);
                sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
                sqlite3_bind_int(st, 2, d);
                sqlite3_bind_int(st, 3, l);
                assert_int_equal(sqlite3_step(st), SQLITE_ROW);
                assert_float_equal(json_number_value(json_array_get(bl, (size_t)l)), sqlite3_column_double(st, 0), 1e-12);
                sqlite3_finalize(st);
            }
        }
    }
    json_decref(j);
}

static void test_sentences_list(void **state) {
    /* pages of 4 cover the 15 sentences once, in order */
    int seen = 0;
    for (int off = 0; off < 16; off += 4) {
        json_t *j = get_json("/api/v1/db/runs/1/sentences?offset=%d&limit=4", off);
        assert_int_equal(json_integer_value(json_object_get(j, "total")), 15);
        json_t *a = json_object_get(j, "sentences");
        for (size_t i = 0; i < json_array_size(a); i++)
            assert_int_equal(json_integer_value(json_object_get(json_array_get(a, i), "idx")), seen++);
        json_decref(j);
    }
    assert_int_equal(seen, 15);
    /* case-insensitive search, corpus and relation filters */
    json_t *j = get_json("/api/v1/db/runs/1/sentences?q=FiLm");
    assert_int_equal(json_integer_value(json_object_get(j, "total")), 6); /* 4 SST-2 + 2 CoNLL-U */
    assert_int_equal(json_integer_value(json_object_get(j, "total")),
                     (json_int_t)sql_double("SELECT count(*) FROM sentences WHERE run=?1 AND text LIKE '%film%' AND ?2=?3", 1, 0, 0));
    json_decref(j);
    j = get_json("/api/v1/db/runs/1/sentences?q=film&corpus=conllu&relation=det");
    assert_int_equal(json_integer_value(json_object_get(j, "total")), 2);
    json_t *s0 = json_array_get(json_object_get(j, "sentences"), 0);
    assert_string_equal(json_string_value(json_object_get(s0, "text")), "The film was good.");
    assert_int_equal(json_integer_value(json_object_get(s0, "n_words")), 5);
    assert_int_equal(json_array_size(json_object_get(s0, "relations")), 5);
    assert_true(json_is_null(json_object_get(s0, "label")));
    json_decref(j);
    j = get_json("/api/v1/db/runs/1/sentences?correct=1");
    assert_int_equal(json_integer_value(json_object_get(j, "total")),
                     (json_int_t)sql_double("SELECT count(*) FROM sentences WHERE run=?1 AND predicted=label AND ?2=?3", 1, 0, 0));
    json_decref(j);
    /* SQL in a parameter is only text */
    j = get_json("/api/v1/db/runs/1/sentences?q=%%27%%20OR%%201%%3D1%%20--&relation=x%%27%%3B%%20DROP%%20TABLE%%20words%%3B--");
    assert_int_equal(json_integer_value(json_object_get(j, "total")), 0);
    json_decref(j);
    j = get_json("/api/v1/db/runs/1/sentences?q=%%25");
    assert_int_equal(json_integer_value(json_object_get(j, "total")), 0); /* '%%' is not a wildcard */
    json_decref(j);
    /* confidence = softmax probability of the stored prediction, recomputed */
    j = get_json("/api/v1/db/runs/1/sentences?limit=3&confidence=1");
    json_t *a = json_object_get(j, "sentences");
    for (size_t i = 0; i < 3; i++) {
        json_t *s = json_array_get(a, i);
        double c = json_number_value(json_object_get(s, "confidence"));
        assert_true(c > 0 && c <= 1);
        json_t *p = get_json("/api/v1/db/runs/1/sentences/%d/parents?layer=0&head=0", (int)i);
        json_t *probs = json_object_get(p, "probs");
        int pred = (int)json_integer_value(json_object_get(s, "predicted"));
        assert_float_equal(json_number_value(json_array_get(probs, (size_t)pred)), c, 1e-9);
        for (size_t k = 0; k < json_array_size(probs); k++) /* stored prediction = argmax */
            assert_true(json_number_value(json_array_get(probs, k)) <= c + 1e-12);
        json_decref(p);
    }
    json_decref(j);
}

static void test_sentence(void **state) {
    json_t *j = get_json("/api/v1/db/runs/1/sentences/0");
    assert_string_equal(json_string_value(json_object_get(j, "text")), "it is a good film .");
    json_t *toks = json_object_get(j, "tokens");
    assert_int_equal(json_array_size(toks), 8);
    assert_string_equal(json_string_value(json_object_get(json_array_get(toks, 0), "kind")), "cls");
    assert_string_equal(json_string_value(json_object_get(json_array_get(toks, 4), "text")), "good");
    json_t *sal = json_object_get(j, "saliency");
    assert_int_equal(json_array_size(sal), 1); /* analyze stores the predicted class */
    json_t *s0 = json_array_get(sal, 0);
    int cls = (int)json_integer_value(json_object_get(s0, "class"));
    assert_int_equal(cls, json_integer_value(json_object_get(j, "predicted")));
    for (int t = 0; t < 8; t++)
        assert_float_equal(json_number_value(json_array_get(json_object_get(s0, "values"), (size_t)t)),
                           sql_double("SELECT value FROM saliency WHERE run=1 AND sent=0 AND class=?1 AND pos=?2 AND ?3=0", cls, t, 0), 1e-12);
    json_decref(j);
    j = get_json("/api/v1/db/runs/1/sentences/9");
    json_t *w = json_object_get(j, "words");
    assert_int_equal(json_array_size(w), 5);
    assert_string_equal(json_string_value(json_object_get(json_array_get(w, 0), "deprel")), "det");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(w, 0), "head")), 1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(w, 3), "head")), -1);
    assert_int_equal(json_integer_value(json_object_get(json_array_get(json_object_get(j, "tokens"), 2), "word")), 1);
    assert_int_equal(json_array_size(json_object_get(j, "saliency")), 0);
    json_decref(j);
}

/* Correct/wrong arcs of every head, summed over the CoNLL-U sentences, equal the stored
 * relation counts (rel_accuracy.correct) for every relation and both directions. */
static void test_parents_match_counts(void **state) {
    for (int run = 1; run <= 2; run++)
        for (int lh = 0; lh < 8; lh++) {
            int counts[3][2] = {{0}}; /* cop, det, nsubj x dir */
            const char *rels[3] = {"cop", "det", "nsubj"};
            for (int sent = 9; sent < 15; sent++) {
                json_t *j = get_json("/api/v1/db/runs/%d/sentences/%d/parents?layer=%d&head=%d", run, sent, lh / 4, lh % 4);
                assert_int_equal(json_array_size(json_object_get(j, "pred")), 5);
                json_t *arcs = json_object_get(j, "arcs"), *a;
                size_t i;
                json_array_foreach(arcs, i, a) {
                    if (!json_is_true(json_object_get(a, "scored"))) continue;
                    const char *rel = json_string_value(json_object_get(a, "relation"));
                    for (int k = 0; k < 3; k++)
                        if (!strcmp(rel, rels[k])) {
                            counts[k][0] += json_is_true(json_object_get(a, "dep_correct"));
                            counts[k][1] += json_is_true(json_object_get(a, "parent_correct"));
                        }
                    int dep = (int)json_integer_value(json_object_get(a, "dep")), par = (int)json_integer_value(json_object_get(a, "parent"));
                    int pd = (int)json_integer_value(json_array_get(json_object_get(j, "pred"), (size_t)dep));
                    assert_int_equal(json_is_true(json_object_get(a, "dep_correct")), pd == par);
                }
                json_decref(j);
            }
            for (int k = 0; k < 3; k++)
                for (int d = 0; d < 2; d++) {
                    char sql[200];
                    snprintf(sql, sizeof sql, "SELECT correct FROM rel_accuracy WHERE run=?1 AND relation='%s' AND dir=%d AND layer*4+head=?2 AND ?3=0", rels[k], d);
                    assert_int_equal(counts[k][d], (int)sql_double(sql, run, lh, 0));
                }
        }
}

static void test_attention(void **state) {
    /* recomputed attention of sentence 9, all layers and heads, f32 */
    resp r;
    get(S.port, "/api/v1/db/runs/1/sentences/9/attention?dtype=f32", &r);
    assert_int_equal(r.status, 200);
    tb t;
    tb_parse(&r, &t);
    json_t *x = tb_tensor(&t, "attention"), *meta = json_object_get(t.hdr, "meta");
    assert_int_equal(json_integer_value(json_object_get(meta, "tokens")), 7);
    for (int lh = 0; lh < 8; lh++)
        for (int i = 0; i < 7; i++) {
            double s = 0;
            for (int k = 0; k < 7; k++) s += tb_at(&t, x, (size_t)(lh * 49 + i * 7 + k));
            assert_float_equal(s, 1.0, 1e-5);
        }
    /* the run landed in the run cache: the same tensor from /api/v1/runs/{id}/attention and POST /run */
    const char *id = json_string_value(json_object_get(meta, "run_id"));
    assert_non_null(id);
    char path[256];
    snprintf(path, sizeof path, "/api/v1/runs/%s/attention?dtype=f32", id);
    resp r2;
    get(S.port, path, &r2);
    assert_int_equal(r2.status, 200);
    assert_int_equal(r2.len, r.len - (r.len - r2.len)); /* sizes may differ only by the header */
    tb t2;
    tb_parse(&r2, &t2);
    json_t *x2 = tb_tensor(&t2, "attention");
    for (size_t k = 0; k < 8 * 49; k++) assert_float_equal(tb_at(&t, x, k), tb_at(&t2, x2, k), 0);
    resp r3;
    post(S.port, "/api/v1/run", "{\"model\":\"bert-sst\",\"text\":\"The film was good.\"}", &r3);
    json_t *pj = body_json(&r3);
    assert_true(json_is_true(json_object_get(pj, "cached")));
    assert_string_equal(json_string_value(json_object_get(pj, "id")), id);
    json_decref(pj);
    resp_free(&r3);
    json_decref(t2.hdr);
    resp_free(&r2);
    json_decref(t.hdr);
    resp_free(&r);
    /* one layer/head range, f16; the truncated 64-token sentence is recomputed too (not cached) */
    get(S.port, "/api/v1/db/runs/1/sentences/8/attention?layers=1&heads=2-3", &r);
    assert_int_equal(r.status, 200);
    tb_parse(&r, &t);
    x = tb_tensor(&t, "attention");
    json_t *shape = json_object_get(x, "shape");
    assert_int_equal(json_integer_value(json_array_get(shape, 1)), 2);
    assert_int_equal(json_integer_value(json_array_get(shape, 2)), 64);
    assert_string_equal(json_string_value(json_object_get(x, "dtype")), "f16");
    assert_true(json_is_null(json_object_get(json_object_get(t.hdr, "meta"), "run_id")));
    json_decref(t.hdr);
    resp_free(&r);
}

static void test_errors(void **state) {
    struct {
        const char *path;
        int status;
    } cases[] = {
        {"/api/v1/db/runs/99", 404},
        {"/api/v1/db/runs/abc", 404},
        {"/api/v1/db/runs/1x", 404},
        {"/api/v1/db/runs/99999999999999999999999", 404},
        {"/api/v1/db/runs/1/nothing", 404},
        {"/api/v1/db/nothing", 404},
        {"/api/v1/db/runs/1/sentences/99", 404},
        {"/api/v1/db/runs/1/sentences/-1", 404},
        {"/api/v1/db/runs/1/sentences/1/other", 404},
        {"/api/v1/db/runs/1/sentences?limit=0", 400},
        {"/api/v1/db/runs/1/sentences?limit=201", 400},
        {"/api/v1/db/runs/1/sentences?limit=100&confidence=1", 400},
        {"/api/v1/db/runs/1/sentences?offset=-1", 400},
        {"/api/v1/db/runs/1/sentences?offset=1e3", 400},
        {"/api/v1/db/runs/1/sentences?confidence=2", 400},
        {"/api/v1/db/runs/1/sentences?correct=yes", 400},
        {"/api/v1/db/runs/1/sentences?q=%ff%fe", 400},
        {"/api/v1/db/runs/1/relations?top=0", 400},
        {"/api/v1/db/runs/1/relations?top=11", 400},
        {"/api/v1/db/runs/1/sentences/9/parents", 400},
        {"/api/v1/db/runs/1/sentences/9/parents?layer=2&head=0", 400},
        {"/api/v1/db/runs/1/sentences/9/parents?layer=0&head=0-1", 400},
        {"/api/v1/db/runs/1/sentences/9/parents?layer=0&head=-1", 400},
        {"/api/v1/db/runs/1/sentences/9/attention?layers=1-0", 400},
        {"/api/v1/db/runs/1/sentences/9/attention?dtype=f64", 400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        resp r;
        get(S.port, cases[i].path, &r);
        if (r.status != cases[i].status) fprintf(stderr, "%s\n", cases[i].path);
        expect_error(&r, cases[i].status);
        resp_free(&r);
    }
    /* an offset out of range, too big or negative, is answered with the range */
    static const char *const offsets[] = {"1000000001", "99999999999999999999", "-1"};
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
        char path[128];
        snprintf(path, sizeof path, "/api/v1/db/runs/1/sentences?offset=%s", offsets[i]);
        resp r;
        get(S.port, path, &r);
        expect_error(&r, 400);
        json_t *j = body_json(&r);
        assert_string_equal(json_string_value(json_object_get(j, "error")),
                            "query 'offset': expected an integer in [0, 1000000000]");
        json_decref(j);
        resp_free(&r);
    }
    char longq[600] = "/api/v1/db/runs/1/sentences?q=";
    memset(longq + strlen(longq), 'a', 300);
    resp r;
    get(S.port, longq, &r);
    expect_error(&r, 400);
    resp_free(&r);
    post(S.port, "/api/v1/db/runs", "{}", &r);
    expect_error(&r, 405);
    assert_true(header_has(&r, "Allow: GET, HEAD"));
    resp_free(&r);
    /* the database still answers after all that */
    json_t *j = get_json("/api/v1/db/runs/1/sentences?limit=1");
    assert_int_equal(json_integer_value(json_object_get(j, "total")), 15);
    json_decref(j);
}

/* A run whose model is not served: scores work, attention is a 409; no --db: 404;
 * bad --db files: exit 2 with one line. */
static void test_other_servers(void **state) {
    server w;
    char m1[300];
    snprintf(m1, sizeof m1, "%s/bert-sst", dir);
    const char *args[] = {"--model", m1, "--db", dbp, NULL};
    assert_int_equal(server_start(&w, args), 0);
    resp r;
    get(w.port, "/api/v1/db/runs/2/heads", &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(w.port, "/api/v1/db/runs/2/sentences/9/parents?layer=0&head=0", &r);
    expect_error(&r, 409);
    resp_free(&r);
    get(w.port, "/api/v1/db/runs/2/sentences/9", &r);
    json_t *j = body_json(&r);
    assert_true(json_is_null(json_object_get(j, "model")));
    json_decref(j);
    resp_free(&r);
    assert_int_equal(server_stop(&w, SIGTERM), 0);
    unlink(w.err_path);

    const char *args2[] = {"--model", m1, NULL};
    assert_int_equal(server_start(&w, args2), 0);
    get(w.port, "/api/v1/db/runs", &r);
    expect_error(&r, 404);
    resp_free(&r);
    assert_int_equal(server_stop(&w, SIGTERM), 0);
    unlink(w.err_path);

    char cmd[4096], junk[320];
    /* a model whose tokenizer is not implemented (WordLevel) is served for what it can do,
       and text requests get a 400 naming the tokenizer */
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/ug' && cp '%s/config.json' '%s/model.safetensors' '%s/ug/' && printf '%%s' "
             "'{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"<unk>\":0},\"unk_token\":\"<unk>\"}}' > '%s/ug/tokenizer.json'",
             dir, m1, m1, dir, dir);
    assert_int_equal(system(cmd), 0);
    char m2[300];
    snprintf(m2, sizeof m2, "%s/ug", dir);
    const char *args3[] = {"--model", m2, NULL};
    assert_int_equal(server_start(&w, args3), 0);
    post(w.port, "/api/v1/run", "{\"model\":\"ug\",\"text\":\"a b\"}", &r);
    expect_error(&r, 400);
    json_t *ej = body_json(&r);
    const char *msg = json_string_value(json_object_get(ej, "error"));
    if (!strstr(msg, "cannot take text") || !strstr(msg, "WordLevel")) fail_msg("error: %s", msg);
    json_decref(ej);
    resp_free(&r);
    assert_int_equal(server_stop(&w, SIGTERM), 0);
    unlink(w.err_path);

    snprintf(cmd, sizeof cmd, "'%s' serve --model '%s' --port 0 --db '%s/none.sqlite' 2>&1 | wc -l | grep -qx 1; "
             "'%s' serve --model '%s' --port 0 --db '%s/none.sqlite' >/dev/null 2>&1",
             AS_BINARY, m1, dir, AS_BINARY, m1, dir);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    snprintf(junk, sizeof junk, "%s/sst.tsv", dir);
    snprintf(cmd, sizeof cmd, "'%s' serve --model '%s' --port 0 --db '%s' >/dev/null 2>&1", AS_BINARY, m1, junk);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    snprintf(cmd, sizeof cmd, "'%s' serve --model '%s' --db >/dev/null 2>&1", AS_BINARY, m1);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    /* a database with a table dropped is refused at start, naming the table (was: served,
       then 500s; `timeout` bounds the old behaviour) */
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/dropped.sqlite' && sqlite3 '%s/dropped.sqlite' 'DROP TABLE head_pairs' && "
             "timeout 30 '%s' serve --model '%s' --port 0 --db '%s/dropped.sqlite' 2>'%s/dropped.err'; s=$?; "
             "grep -q \"table 'head_pairs' is missing\" '%s/dropped.err' && [ $(wc -l <'%s/dropped.err') = 1 ] && exit $s",
             dbp, dir, dir, AS_BINARY, m1, dir, dir, dir, dir);
    assert_int_equal(WEXITSTATUS(system(cmd)), 2);
}

/* ---- --import-dir ------------------------------------------------------------ */

static json_t *get_json_at(int port, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static json_t *get_json_at(int port, const char *fmt, ...) {
    char path[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    resp r;
    get(port, path, &r);
    if (r.status != 200) fprintf(stderr, "GET %s: %d %.300s\n", path, r.status, r.body ? (char *)r.body : "");
    assert_int_equal(r.status, 200);
    json_t *j = body_json(&r);
    resp_free(&r);
    return j;
}

/* A float32 C-order .npy (version 1 header) read whole; returns the data, *n elements. */
static float *read_npy(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char pre[10];
    assert_int_equal(fread(pre, 1, 10, f), 10);
    assert_memory_equal(pre, "\x93NUMPY\x01", 7);
    size_t hl = (size_t)pre[8] | (size_t)pre[9] << 8;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    *n = ((size_t)sz - 10 - hl) / 4;
    float *a = malloc(*n * sizeof *a);
    fseek(f, (long)(10 + hl), SEEK_SET);
    assert_int_equal(fread(a, 4, *n, f), *n);
    fclose(f);
    return a;
}

/* Checks imported run `run` served by the server on port against folder idir and the
 * database file dbfile: each sentence's attention equals its .npy exactly; for each
 * head in heads (layer * H + head), the correct / wrong marks of /parents summed over
 * every sentence equal rel_accuracy.correct for every relation and direction. */
static void check_import(int port, const char *dbfile, int run, const char *idir, const int *heads, int n_heads) {
    json_t *rj = get_json_at(port, "/api/v1/db/runs/%d", run);
    assert_string_equal(json_string_value(json_object_get(rj, "attention")), "import");
    assert_string_equal(json_string_value(json_object_get(rj, "import_dir")), idir);
    assert_true(json_is_null(json_object_get(rj, "model")));
    const int L = (int)json_integer_value(json_object_get(rj, "layers")), H = (int)json_integer_value(json_object_get(rj, "heads"));
    const int NS = (int)json_integer_value(json_object_get(rj, "n_sentences"));
    json_decref(rj);
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(dbfile, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    /* attention == the folder's .npy, byte for byte as float32 */
    for (int sent = 0; sent < NS; sent++) {
        json_t *sj = get_json_at(port, "/api/v1/db/runs/%d/sentences/%d", run, sent);
        assert_string_equal(json_string_value(json_object_get(sj, "attention")), "import");
        const char *src = json_string_value(json_object_get(sj, "source"));
        int T = (int)json_integer_value(json_object_get(sj, "n_tokens"));
        char path[1200], url[200];
        snprintf(path, sizeof path, "%s/%.*s.attention.npy", idir, (int)strlen(src) - 5, src);
        json_decref(sj);
        size_t n;
        float *ref = read_npy(path, &n);
        assert_int_equal(n, (size_t)L * H * T * T);
        snprintf(url, sizeof url, "/api/v1/db/runs/%d/sentences/%d/attention?dtype=f32", run, sent);
        resp r;
        get(port, url, &r);
        assert_int_equal(r.status, 200);
        tb t;
        tb_parse(&r, &t);
        json_t *x = tb_tensor(&t, "attention"), *meta = json_object_get(t.hdr, "meta");
        assert_string_equal(json_string_value(json_object_get(meta, "source")), "import");
        assert_true(json_is_null(json_object_get(meta, "run_id")));
        for (size_t k = 0; k < n; k++) assert_true(tb_at(&t, x, k) == ref[k]);
        json_decref(t.hdr);
        resp_free(&r);
        free(ref);
    }
    /* marks summed over the sentences == rel_accuracy, every relation and direction */
    for (int hi = 0; hi < n_heads; hi++) {
        const int l = heads[hi] / H, h = heads[hi] % H;
        char rels[64][48];
        int cnt[64][2] = {{0}}, nr = 0, total = 0;
        for (int sent = 0; sent < NS; sent++) {
            json_t *j = get_json_at(port, "/api/v1/db/runs/%d/sentences/%d/parents?layer=%d&head=%d", run, sent, l, h);
            assert_string_equal(json_string_value(json_object_get(j, "source")), "import");
            json_t *arcs = json_object_get(j, "arcs"), *a;
            size_t i;
            json_array_foreach(arcs, i, a) {
                if (!json_is_true(json_object_get(a, "scored"))) continue;
                const char *rel = json_string_value(json_object_get(a, "relation"));
                for (int pass = 0; pass < 2; pass++) { /* the relation, then "all" */
                    const char *name = pass ? "all" : rel;
                    int k = 0;
                    while (k < nr && strcmp(rels[k], name)) k++;
                    if (k == nr) {
                        assert_true(nr < 64);
                        snprintf(rels[nr++], sizeof rels[0], "%s", name);
                    }
                    cnt[k][0] += json_is_true(json_object_get(a, "dep_correct"));
                    cnt[k][1] += json_is_true(json_object_get(a, "parent_correct"));
                }
                total++;
            }
            json_decref(j);
        }
        assert_true(total > 0);
        sqlite3_stmt *st;
        assert_int_equal(sqlite3_prepare_v2(db, "SELECT relation, dir, correct FROM rel_accuracy WHERE run=?1 AND layer=?2 AND head=?3",
                                            -1, &st, NULL), SQLITE_OK);
        sqlite3_bind_int(st, 1, run);
        sqlite3_bind_int(st, 2, l);
        sqlite3_bind_int(st, 3, h);
        int rows = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *rel = (const char *)sqlite3_column_text(st, 0);
            int dir = sqlite3_column_int(st, 1), want = sqlite3_column_int(st, 2), k = 0;
            while (k < nr && strcmp(rels[k], rel)) k++;
            int got = k < nr ? cnt[k][dir] : 0;
            if (got != want) fprintf(stderr, "run %d L%dH%d %s dir %d: marks %d, database %d\n", run, l, h, rel, dir, got, want);
            assert_int_equal(got, want);
            rows++;
        }
        sqlite3_finalize(st);
        assert_true(rows >= 2);
    }
    sqlite3_close(db);
}

/* The imported sentences of run 1 (NS of them, folder idir) as runs of the explorer:
 * GET .../sentences/{i}/run answers a RunResponse whose source names the sentence, the
 * same id again (cached), and whose /api/v1/runs/{id}/attention equals the .npy exactly;
 * its qk is a 409 (no q/k imported), a missing sentence a 404. */
static void check_import_runs(int port, const char *idir, int NS) {
    for (int sent = 0; sent < NS; sent++) {
        json_t *rj = get_json_at(port, "/api/v1/db/runs/1/sentences/%d/run", sent);
        json_t *src = json_object_get(rj, "source");
        char file[64], path[1200];
        snprintf(file, sizeof file, "%04d.attention.npy", sent);
        assert_string_equal(json_string_value(json_object_get(src, "layout")), "import");
        assert_string_equal(json_string_value(json_object_get(src, "file")), file);
        assert_string_equal(json_string_value(json_object_get(rj, "model")), file);
        assert_int_equal(json_integer_value(json_object_get(src, "db_run")), 1);
        assert_int_equal(json_integer_value(json_object_get(src, "sent")), sent);
        assert_true(json_is_false(json_object_get(src, "neuron")));
        const char *id = json_string_value(json_object_get(rj, "id"));
        json_t *again = get_json_at(port, "/api/v1/db/runs/1/sentences/%d/run", sent);
        assert_string_equal(json_string_value(json_object_get(again, "id")), id);
        json_decref(again);
        const int T = (int)json_integer_value(json_object_get(json_object_get(rj, "sizes"), "tokens"));
        snprintf(path, sizeof path, "%s/%s", idir, file);
        size_t n;
        float *ref = read_npy(path, &n);
        assert_int_equal(n, (size_t)12 * 12 * T * T);
        char url[200];
        snprintf(url, sizeof url, "/api/v1/runs/%s/attention?dtype=f32", id);
        resp r;
        get(port, url, &r);
        assert_int_equal(r.status, 200);
        tb t;
        tb_parse(&r, &t);
        json_t *x = tb_tensor(&t, "attention");
        for (size_t k = 0; k < n; k++) assert_true(tb_at(&t, x, k) == ref[k]);
        json_decref(t.hdr);
        resp_free(&r);
        free(ref);
        snprintf(url, sizeof url, "/api/v1/runs/%s/qk?layer=0&head=0", id);
        get(port, url, &r);
        expect_error(&r, 409);
        resp_free(&r);
        json_decref(rj);
    }
    resp r;
    get(port, "/api/v1/db/runs/1/sentences/99/run", &r);
    expect_error(&r, 404);
    resp_free(&r);
}

static void test_import_dir(void **state) {
    char imp[400], imp2[400], idb[400], cmd[4096], m1[300];
    snprintf(imp, sizeof imp, "%s/imp", dir);
    snprintf(imp2, sizeof imp2, "%s/imp2", dir);
    snprintf(idb, sizeof idb, "%s/import.sqlite", dir);
    snprintf(m1, sizeof m1, "%s/bert-sst", dir);
    snprintf(cmd, sizeof cmd, "node '%s/tests/browser/make_synthetic_import.mjs' '%s' && '%s' import --dir '%s' --db '%s' --min-rel 1 --quiet",
             AS_SOURCE_DIR, imp, AS_BINARY, imp, idb);
    if (system(cmd)) {
        printf("test_import_dir: skipped: could not write the synthetic import folder (is Node.js installed?)\n");
        skip();
    }
    server w;
    const char *args[] = {"--model", m1, "--db", idb, "--import-dir", imp, NULL};
    assert_int_equal(server_start(&w, args), 0);
    int all[144];
    for (int i = 0; i < 144; i++) all[i] = i;
    check_import(w.port, idb, 1, imp, all, 144);
    check_import_runs(w.port, imp, 4);
    assert_int_equal(server_stop(&w, SIGTERM), 0);
    unlink(w.err_path);

    /* a changed copy: its digest matches no run (warning, 409), unless mapped by RUN=DIR;
     * a damaged .npy is a 409 that names it */
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s' && echo ' ' >> '%s/0002.json' && truncate -s 1000 '%s/0001.attention.npy'", imp, imp2, imp2, imp2);
    assert_int_equal(system(cmd), 0);
    const char *args2[] = {"--model", m1, "--db", idb, "--import-dir", imp2, NULL};
    assert_int_equal(server_start(&w, args2), 0);
    json_t *j = get_json_at(w.port, "/api/v1/db/runs/1");
    assert_true(json_is_null(json_object_get(j, "attention")));
    json_decref(j);
    resp r;
    get(w.port, "/api/v1/db/runs/1/sentences/0/parents?layer=0&head=0", &r);
    expect_error(&r, 409);
    resp_free(&r);
    get(w.port, "/api/v1/db/runs/1/sentences/0/run", &r); /* no folder serves the run */
    expect_error(&r, 409);
    resp_free(&r);
    assert_int_equal(server_stop(&w, SIGTERM), 0);
    char *e = slurp(w.err_path);
    assert_non_null(strstr(e, "matches no imported run"));
    free(e);
    unlink(w.err_path);
    char mapped[420];
    snprintf(mapped, sizeof mapped, "1=%s", imp2);
    const char *args3[] = {"--model", m1, "--db", idb, "--import-dir", mapped, NULL};
    assert_int_equal(server_start(&w, args3), 0);
    j = get_json_at(w.port, "/api/v1/db/runs/1");
    assert_string_equal(json_string_value(json_object_get(j, "attention")), "import");
    json_decref(j);
    get(w.port, "/api/v1/db/runs/1/sentences/0/attention", &r);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    get(w.port, "/api/v1/db/runs/1/sentences/1/attention", &r);
    expect_error(&r, 409);
    assert_non_null(strstr((char *)r.body, "0001.attention.npy"));
    resp_free(&r);
    assert_int_equal(server_stop(&w, SIGTERM), 0);
    unlink(w.err_path);

    /* bad options: exit 2 */
    const char *bad[][2] = {{imp, "none"}, {"/nonexistent/folder", idb}, {"0=/tmp", idb}};
    for (int i = 0; i < 3; i++) {
        if (!strcmp(bad[i][1], "none"))
            snprintf(cmd, sizeof cmd, "'%s' serve --model '%s' --port 0 --import-dir '%s' >/dev/null 2>&1", AS_BINARY, m1, bad[i][0]);
        else
            snprintf(cmd, sizeof cmd, "'%s' serve --model '%s' --port 0 --db '%s' --import-dir '%s' >/dev/null 2>&1", AS_BINARY, m1, bad[i][1], bad[i][0]);
        assert_int_equal(WEXITSTATUS(system(cmd)), 2);
    }

    /* the real BERT-base folder (12 x 12 heads), when ../shared exists */
    const char *real = AS_SOURCE_DIR "/../shared/data/bert-base-sst2-attention";
    struct stat sb;
    if (stat(real, &sb)) {
        printf("test_import_dir: ../shared/data/bert-base-sst2-attention is absent: real-data part skipped\n");
        return;
    }
    char rdb[400];
    snprintf(rdb, sizeof rdb, "%s/real.sqlite", dir);
    snprintf(cmd, sizeof cmd, "'%s' import --dir '%s' --db '%s' --quiet", AS_BINARY, real, rdb);
    assert_int_equal(system(cmd), 0);
    const char *args4[] = {"--model", m1, "--db", rdb, "--import-dir", real, NULL};
    assert_int_equal(server_start(&w, args4), 0);
    const int some[] = {0, 7 * 12 + 10, 3 * 12 + 5, 143};
    check_import(w.port, rdb, 1, real, some, 4);
    printf("test_import_dir: real BERT-base folder served: attention equal to the .npy files, marks equal to rel_accuracy\n");
    assert_int_equal(server_stop(&w, SIGTERM), 0);
    unlink(w.err_path);
}

int main(void) {
    if (binary_missing("test_server_db")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_runs),          cmocka_unit_test(test_heads),
        cmocka_unit_test(test_pairs_binary),  cmocka_unit_test(test_relations),
        cmocka_unit_test(test_sentences_list), cmocka_unit_test(test_sentence),
        cmocka_unit_test(test_parents_match_counts), cmocka_unit_test(test_attention),
        cmocka_unit_test(test_errors),        cmocka_unit_test(test_other_servers),
        cmocka_unit_test(test_import_dir),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
