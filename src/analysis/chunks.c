/* chunks.c — the corpus runner's context and its transactions: the row inserts, the
 * chunk accumulators and per-relation counts of the open chunk, committing a chunk
 * (one transaction with n_done), and finding, creating or truncating a run.
 * What it does not: score sentences (records.c) or aggregate a run (finalize.c).
 */
#include "analysis/runner_internal.h"

#include <string.h>
#include <time.h>

void an_ctx_free(an_ctx *c) {
    free(c->acc);
    for (int r = 0; r < c->nrel; r++) free(c->rel[r]);
    free(c->rel);
    free(c->rel_total);
    free(c->rel_correct);
    free(c->rel_base);
    sqlite3_finalize(c->ins_sent);
    sqlite3_finalize(c->ins_tok);
    sqlite3_finalize(c->ins_word);
    sqlite3_finalize(c->ins_sal);
    sqlite3_finalize(c->ins_sh);
    sqlite3_finalize(c->ins_topk);
    free(c->Wm);
    free(c->pred);
    free(c->has_piece);
    an_rb_free(&c->rb);
}

as_status an_ctx_init(an_ctx *c, store *st, int64_t run, int L, int H, int Dh, as_error *err) {
    c->st = st;
    c->run = run;
    c->L = L;
    c->H = H;
    c->Dh = Dh;
    c->LH = L * H;
    c->npairs = (size_t)c->LH * (size_t)(c->LH - 1) / 2;
    c->nacc = 1 + c->npairs + (size_t)c->LH * (size_t)(Dh + 1);
    c->acc = as_calloc(c->nacc, sizeof *c->acc);
    c->size = 1;
    if (!c->acc) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (!st) return AS_OK; /* an MPI worker: builds records, writes nothing */
    as_status s;
    if ((s = store_prepare_insert(st, "sentences", NULL, &c->ins_sent, err)) ||
        (s = store_prepare_insert(st, "tokens", NULL, &c->ins_tok, err)) ||
        (s = store_prepare_insert(st, "words", NULL, &c->ins_word, err)) ||
        (s = store_prepare_insert(st, "saliency", NULL, &c->ins_sal, err)) ||
        (s = store_prepare_insert(st, "sentence_heads", NULL, &c->ins_sh, err)) ||
        (s = store_prepare_insert(st, "topk", NULL, &c->ins_topk, err)))
        return s;
    return AS_OK;
}

int an_rel_id(an_ctx *c, const char *name) {
    for (int r = 0; r < c->nrel; r++)
        if (!strcmp(c->rel[r], name)) return r;
    if (c->nrel == c->caprel) {
        int nc = c->caprel ? c->caprel * 2 : 32;
        char **nr = realloc(c->rel, (size_t)nc * sizeof *nr);
        if (!nr) return -1;
        c->rel = nr;
        int64_t *t = realloc(c->rel_total, (size_t)nc * sizeof *t);
        if (!t) return -1;
        c->rel_total = t;
        int64_t *k = realloc(c->rel_correct, (size_t)nc * 2 * c->LH * sizeof *k);
        if (!k) return -1;
        c->rel_correct = k;
        int64_t *b = realloc(c->rel_base, (size_t)nc * 2 * HD_N_OFFSETS * sizeof *b);
        if (!b) return -1;
        c->rel_base = b;
        c->caprel = nc;
    }
    int r = c->nrel;
    if (!(c->rel[r] = as_strdup(name))) return -1;
    c->rel_total[r] = 0;
    memset(c->rel_correct + (size_t)r * 2 * c->LH, 0, (size_t)2 * c->LH * sizeof *c->rel_correct);
    memset(c->rel_base + (size_t)r * 2 * HD_N_OFFSETS, 0, 2 * HD_N_OFFSETS * sizeof *c->rel_base);
    c->nrel++;
    return r;
}

as_status an_chunk_commit(an_ctx *c, as_error *err) {
    store *st = c->st;
    as_status rc = AS_OK;
    sqlite3_stmt *qt = NULL, *qc = NULL, *qb = NULL, *qk = NULL, *qr = NULL;
    if ((rc = store_prepare_insert(st, "rel_totals", "ON CONFLICT(run, relation) DO UPDATE SET n = n + excluded.n", &qt, err)) ||
        (rc = store_prepare_insert(st, "rel_counts", "ON CONFLICT(run, relation, dir, layer, head) DO UPDATE SET correct = correct + excluded.correct", &qc, err)) ||
        (rc = store_prepare_insert(st, "baseline_counts", "ON CONFLICT(run, relation, dir, offset) DO UPDATE SET correct = correct + excluded.correct", &qb, err)) ||
        (rc = store_prepare_insert(st, "chunks", NULL, &qk, err)) ||
        (rc = store_prepare(st, "UPDATE runs SET n_done = ? WHERE id = ?", &qr, err)))
        goto cleanup;
    for (int r = 0; r < c->nrel; r++) {
        store_set_int(qt, "run", c->run);
        store_set_text(qt, "relation", c->rel[r]);
        store_set_int(qt, "n", c->rel_total[r]);
        if ((rc = store_step_done(st, qt, err))) goto cleanup;
        for (int d = 0; d < 2; d++) {
            for (int lh = 0; lh < c->LH; lh++) {
                int64_t v = c->rel_correct[((size_t)r * 2 + d) * c->LH + lh];
                if (!v) continue;
                store_set_int(qc, "run", c->run);
                store_set_text(qc, "relation", c->rel[r]);
                store_set_int(qc, "dir", d);
                store_set_int(qc, "layer", lh / c->H);
                store_set_int(qc, "head", lh % c->H);
                store_set_int(qc, "correct", v);
                if ((rc = store_step_done(st, qc, err))) goto cleanup;
            }
            for (int o = 0; o < HD_N_OFFSETS; o++) {
                store_set_int(qb, "run", c->run);
                store_set_text(qb, "relation", c->rel[r]);
                store_set_int(qb, "dir", d);
                store_set_int(qb, "offset", HD_OFFSETS[o]);
                store_set_int(qb, "correct", c->rel_base[((size_t)r * 2 + d) * HD_N_OFFSETS + o]);
                if ((rc = store_step_done(st, qb, err))) goto cleanup;
            }
        }
    }
    store_set_int(qk, "run", c->run);
    store_set_int(qk, "idx", c->chunk_first / c->chunk);
    store_set_int(qk, "first_sent", c->chunk_first);
    store_set_int(qk, "n_sent", c->chunk_n);
    store_set_blob(qk, "acc", c->acc, c->nacc * sizeof *c->acc);
    if ((rc = store_step_done(st, qk, err))) goto cleanup;
    sqlite3_bind_int(qr, 1, c->chunk_first + c->chunk_n);
    sqlite3_bind_int64(qr, 2, c->run);
    if ((rc = store_step_done(st, qr, err))) goto cleanup;
    rc = store_exec(st, "COMMIT", err);
    /* reset the accumulators for the next chunk */
    memset(c->acc, 0, c->nacc * sizeof *c->acc);
    for (int r = 0; r < c->nrel; r++) free(c->rel[r]);
    c->nrel = 0;
cleanup:
    sqlite3_finalize(qt);
    sqlite3_finalize(qc);
    sqlite3_finalize(qb);
    sqlite3_finalize(qk);
    sqlite3_finalize(qr);
    return rc;
}

/* Finds or creates the run; *n_done and *done tell where it stands. */
as_status an_run_begin(store *st, const run_key *k, int64_t *run, int *n_done, int *done, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare(st, "SELECT id, n_done, status, n_total FROM runs WHERE model_digest=? AND corpus_digest=? AND params=?", &q, err);
    if (rc) return rc;
    sqlite3_bind_text(q, 1, k->model_digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, k->corpus_digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, k->params, -1, SQLITE_STATIC);
    int r = sqlite3_step(q);
    if (r == SQLITE_ROW) {
        *run = sqlite3_column_int64(q, 0);
        *n_done = sqlite3_column_int(q, 1);
        *done = !strcmp((const char *)sqlite3_column_text(q, 2), "done");
        int nt = sqlite3_column_int(q, 3);
        sqlite3_finalize(q);
        if (nt != k->n_total)
            return as_err_set(err, AS_ERR_INPUT, "%s: run %lld expects %d sentences but the corpus now has %d", st->path,
                              (long long)*run, nt, k->n_total);
        return AS_OK;
    }
    sqlite3_finalize(q);
    if (r != SQLITE_DONE) return store_fail(st, "read runs", err);
    if ((rc = store_prepare_insert(st, "runs", NULL, &q, err))) return rc;
    char created[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(created, sizeof created, "%Y-%m-%d %H:%M:%S", gmtime_r(&now, &tm)); /* as SQLite's datetime('now') */
    store_set_text(q, "model_name", k->model_name);
    store_set_text(q, "model_digest", k->model_digest);
    store_set_text(q, "arch", k->arch);
    store_set_int(q, "n_layer", k->L);
    store_set_int(q, "n_head", k->H);
    store_set_int(q, "d_head", k->Dh);
    store_set_text(q, "corpus", k->corpus);
    store_set_text(q, "corpus_digest", k->corpus_digest);
    store_set_text(q, "params", k->params);
    store_set_text(q, "version", AS_VERSION);
    store_set_int(q, "n_total", k->n_total);
    store_set_int(q, "n_done", 0);
    store_set_text(q, "status", "running");
    store_set_text(q, "created", created);
    store_set_text(q, "source", k->source);
    rc = store_step_done(st, q, err);
    sqlite3_finalize(q);
    if (rc) return rc;
    *run = sqlite3_last_insert_rowid(st->db);
    *n_done = 0;
    *done = 0;
    return AS_OK;
}

/* Removes rows of sentences >= from (none exist after a clean kill: a chunk's rows and
 * n_done commit together; this keeps a hand-edited database consistent too). */
as_status an_run_truncate(store *st, int64_t run, int from, as_error *err) {
    static const char *tables[] = {"sentences", "tokens", "words", "saliency", "sentence_heads", "topk"};
    char sql[256];
    for (size_t i = 0; i < sizeof tables / sizeof *tables; i++) {
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE run=%lld AND %s >= %d", tables[i], (long long)run,
                 i == 0 ? "idx" : "sent", from);
        as_status rc = store_exec(st, sql, err);
        if (rc) return rc;
    }
    snprintf(sql, sizeof sql, "DELETE FROM chunks WHERE run=%lld AND first_sent >= %d", (long long)run, from);
    return store_exec(st, sql, err);
}
