/* runner.c — the corpus loop of `attnscope analyze` / `import`: per-sentence scoring,
 * chunked transactions, resume, and the final aggregation (see runner.h; formulas and
 * their sources in heads.h / heads.c and docs/analysis.md).
 */
#include "analysis/runner.h"

#include "analysis/saliency.h"
#include "analysis/sha256.h"
#include "io/conllu.h"
#include "io/npy.h"
#include "io/tsv.h"

#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

/* ---- context ----------------------------------------------------------------------- */

typedef struct {
    store *st;
    int64_t run;
    int L, H, Dh, LH;
    size_t npairs;
    int chunk, explain, min_rel, progress;
    double t0;
    int n_total, n_start;
    /* chunk accumulators: acc = [rows | jsd sums (npairs) | concentration histogram (LH, Dh + 1)] */
    double *acc;
    size_t nacc;
    int chunk_first, chunk_n;
    /* relations seen in the current chunk */
    int nrel, caprel;
    char **rel;
    int64_t *rel_total;   /* (nrel) */
    int64_t *rel_correct; /* (nrel, 2, LH) */
    int64_t *rel_base;    /* (nrel, 2, HD_N_OFFSETS) */
    sqlite3_stmt *ins_sent, *ins_tok, *ins_word, *ins_sal, *ins_sh;
    float *Wm;            /* (W, W) scratch */
    int capW;
    int *pred;            /* (W) scratch */
    uint8_t *has_piece;   /* (W) scratch */
} an_ctx;

static void ctx_free(an_ctx *c) {
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
    free(c->Wm);
    free(c->pred);
    free(c->has_piece);
}

static as_status ctx_init(an_ctx *c, store *st, int64_t run, int L, int H, int Dh, as_error *err) {
    c->st = st;
    c->run = run;
    c->L = L;
    c->H = H;
    c->Dh = Dh;
    c->LH = L * H;
    c->npairs = (size_t)c->LH * (size_t)(c->LH - 1) / 2;
    c->nacc = 1 + c->npairs + (size_t)c->LH * (size_t)(Dh + 1);
    c->acc = as_calloc(c->nacc, sizeof *c->acc);
    if (!c->acc) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    as_status s;
    if ((s = store_prepare(st, "INSERT INTO sentences VALUES(?,?,?,?,?,?,?,?,?,?,?)", &c->ins_sent, err)) ||
        (s = store_prepare(st, "INSERT INTO tokens VALUES(?,?,?,?,?,?,?,?)", &c->ins_tok, err)) ||
        (s = store_prepare(st, "INSERT INTO words VALUES(?,?,?,?,?,?)", &c->ins_word, err)) ||
        (s = store_prepare(st, "INSERT INTO saliency VALUES(?,?,?,?,?)", &c->ins_sal, err)) ||
        (s = store_prepare(st, "INSERT INTO sentence_heads VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", &c->ins_sh, err)))
        return s;
    return AS_OK;
}

static int rel_id(an_ctx *c, const char *name) {
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

/* Relations left out of the syntactic score (Clark et al. 2019 sec. 4.2; the issue). */
static int rel_excluded(const char *r) {
    return !strcmp(r, "root") || !strcmp(r, "punct") || !strncmp(r, "punct:", 6) || !strncmp(r, "root:", 5);
}

static const char *kind_name(int k) {
    static const char *n[] = {"word", "cls", "sep", "punct", "pad"};
    return k >= 0 && k <= HK_PAD ? n[k] : "?";
}

/* ---- one sentence ---------------------------------------------------------------- */

static as_status ensure_words(an_ctx *c, int W, as_error *err) {
    if (W <= c->capW) return AS_OK;
    free(c->Wm);
    free(c->pred);
    free(c->has_piece);
    c->Wm = as_malloc_array(as_mul_size((size_t)W, (size_t)W), sizeof *c->Wm);
    c->pred = as_malloc_array((size_t)W, sizeof *c->pred);
    c->has_piece = as_malloc((size_t)W);
    c->capW = W;
    if (!c->Wm || !c->pred || !c->has_piece) {
        c->capW = 0;
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    return AS_OK;
}

static as_status process_sentence(an_ctx *c, int idx, const an_sent *s, as_error *err) {
    store *st = c->st;
    const int T = s->T, LH = c->LH;
    const size_t TT = (size_t)T * T;
    as_status rc;
    /* sentence, tokens, words, saliency rows */
    sqlite3_stmt *q = c->ins_sent;
    sqlite3_bind_int64(q, 1, c->run);
    sqlite3_bind_int(q, 2, idx);
    sqlite3_bind_text(q, 3, s->corpus, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, s->source, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 5, s->text, -1, SQLITE_STATIC);
    if (s->label >= 0) sqlite3_bind_int(q, 6, s->label);
    if (s->predicted >= 0) sqlite3_bind_int(q, 7, s->predicted);
    sqlite3_bind_int(q, 8, T);
    sqlite3_bind_int(q, 9, s->W);
    sqlite3_bind_int(q, 10, s->truncated);
    sqlite3_bind_int(q, 11, s->abl[0] || s->q ? 1 : 0);
    if ((rc = store_step_done(st, q, err))) return rc;
    for (int t = 0; t < T; t++) {
        q = c->ins_tok;
        sqlite3_bind_int64(q, 1, c->run);
        sqlite3_bind_int(q, 2, idx);
        sqlite3_bind_int(q, 3, t);
        sqlite3_bind_text(q, 4, s->tok_text[t] ? s->tok_text[t] : "", -1, SQLITE_STATIC);
        if (s->start && s->start[t] >= 0) {
            sqlite3_bind_int(q, 5, s->start[t]);
            sqlite3_bind_int(q, 6, s->end[t]);
        }
        sqlite3_bind_text(q, 7, kind_name(s->kind[t]), -1, SQLITE_STATIC);
        if (s->W && s->word[t] >= 0) sqlite3_bind_int(q, 8, s->word[t]);
        if ((rc = store_step_done(st, q, err))) return rc;
    }
    for (int w = 0; w < s->W; w++) {
        q = c->ins_word;
        sqlite3_bind_int64(q, 1, c->run);
        sqlite3_bind_int(q, 2, idx);
        sqlite3_bind_int(q, 3, w);
        sqlite3_bind_text(q, 4, s->word_form[w], -1, SQLITE_STATIC);
        if (s->parent[w] >= -1) {
            sqlite3_bind_int(q, 5, s->parent[w]);
            sqlite3_bind_text(q, 6, s->rel[w], -1, SQLITE_STATIC);
        }
        if ((rc = store_step_done(st, q, err))) return rc;
    }
    for (int k = 0; s->sal_all && k < s->n_sal_cls; k++)
        for (int t = 0; t < T; t++) {
            q = c->ins_sal;
            sqlite3_bind_int64(q, 1, c->run);
            sqlite3_bind_int(q, 2, idx);
            sqlite3_bind_int(q, 3, s->sal_first_class + k);
            sqlite3_bind_int(q, 4, t);
            sqlite3_bind_double(q, 5, s->sal_all[(size_t)k * T + t]);
            if ((rc = store_step_done(st, q, err))) return rc;
        }
    /* per head: importance, semantic, Clark statistics, ablation change */
    for (int lh = 0; lh < LH; lh++) {
        const float *A = s->attn + (size_t)lh * TT;
        hd_stats hs;
        hd_stats_compute(A, T, s->kind, &hs);
        double abl[3];
        for (int a = 0; a < 3; a++) {
            abl[a] = NAN;
            if (!s->abl[a]) continue;
            /* ablation change: mean over query rows of JSD(normal row, ablated row) */
            const float *B = s->abl[a] + (size_t)lh * TT;
            double sum = 0.0;
            int n = 0;
            for (int i = 0; i < T; i++) {
                if (s->kind[i] == HK_PAD) continue;
                sum += hd_jsd(A + (size_t)i * T, B + (size_t)i * T, T);
                n++;
            }
            abl[a] = n ? sum / n : 0.0;
        }
        q = c->ins_sh;
        sqlite3_bind_int64(q, 1, c->run);
        sqlite3_bind_int(q, 2, idx);
        sqlite3_bind_int(q, 3, lh / c->H);
        sqlite3_bind_int(q, 4, lh % c->H);
        sqlite3_bind_double(q, 5, hd_importance(A, T, s->kind));
        store_bind_real(q, 6, s->sal ? hd_semantic(A, T, s->kind, s->sal) : NAN);
        double v[] = {hs.cls, hs.sep, hs.punct, hs.self, hs.prev, hs.next, hs.entropy, hs.entropy_norm,
                      abl[0], abl[1], abl[2]};
        for (int k = 0; k < 11; k++) store_bind_real(q, 7 + k, v[k]);
        if ((rc = store_step_done(st, q, err))) return rc;
    }
    /* head-pair Jensen-Shannon divergence per query row (Clark et al. 2019 sec. 6) */
    double *js = c->acc + 1;
    for (int i = 0; i < T; i++) {
        if (s->kind[i] == HK_PAD) continue;
        c->acc[0] += 1.0;
        size_t p = 0;
        for (int a = 0; a < LH; a++)
            for (int b = a + 1; b < LH; b++, p++)
                js[p] += hd_jsd(s->attn + (size_t)a * TT + (size_t)i * T, s->attn + (size_t)b * TT + (size_t)i * T, T);
    }
    /* concentration of each row's dominant link (argmax key) */
    if (s->q && s->k && c->Dh > 0) {
        double *hist = c->acc + 1 + c->npairs;
        for (int lh = 0; lh < LH; lh++) {
            const float *A = s->attn + (size_t)lh * TT;
            const float *Q = s->q + (size_t)lh * T * c->Dh, *K = s->k + (size_t)lh * T * c->Dh;
            for (int i = 0; i < T; i++) {
                if (s->kind[i] == HK_PAD) continue;
                int jb = 0;
                for (int j = 1; j < T; j++)
                    if (A[(size_t)i * T + j] > A[(size_t)i * T + jb]) jb = j;
                int n = hd_concentration(Q + (size_t)i * c->Dh, K + (size_t)jb * c->Dh, c->Dh);
                hist[(size_t)lh * (c->Dh + 1) + n] += 1.0;
            }
        }
    }
    /* syntactic counts (Clark et al. 2019 sec. 4.2, both directions) and baselines */
    if (s->W > 0) {
        const int W = s->W;
        if ((rc = ensure_words(c, W, err))) return rc;
        memset(c->has_piece, 0, (size_t)W);
        for (int t = 0; t < T; t++)
            if (s->word[t] >= 0) c->has_piece[s->word[t]] = 1;
        int *rid = as_malloc_array((size_t)W, sizeof *rid);
        if (!rid) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        for (int d = 0; d < W; d++) {
            int p = s->parent[d];
            rid[d] = -1;
            if (p < 0 || !c->has_piece[d] || !c->has_piece[p] || rel_excluded(s->rel[d])) continue;
            if ((rid[d] = rel_id(c, s->rel[d])) < 0) {
                free(rid);
                return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            }
            int r = rid[d];
            c->rel_total[r]++;
            for (int o = 0; o < HD_N_OFFSETS; o++) {
                c->rel_base[((size_t)r * 2 + 0) * HD_N_OFFSETS + o] += d + HD_OFFSETS[o] == p;
                c->rel_base[((size_t)r * 2 + 1) * HD_N_OFFSETS + o] += p + HD_OFFSETS[o] == d;
            }
        }
        for (int lh = 0; lh < LH; lh++) {
            hd_word_attention(s->attn + (size_t)lh * TT, T, s->word, W, c->Wm);
            for (int w = 0; w < W; w++) c->pred[w] = c->has_piece[w] ? hd_word_argmax(c->Wm, W, w, c->has_piece) : -1;
            for (int d = 0; d < W; d++) {
                int r = rid[d], p = s->parent[d];
                if (r < 0) continue;
                c->rel_correct[((size_t)r * 2 + 0) * LH + lh] += c->pred[d] == p;
                c->rel_correct[((size_t)r * 2 + 1) * LH + lh] += c->pred[p] == d;
            }
        }
        free(rid);
    }
    return AS_OK;
}

/* ---- chunks, runs ------------------------------------------------------------------ */

static as_status chunk_commit(an_ctx *c, as_error *err) {
    store *st = c->st;
    as_status rc = AS_OK;
    sqlite3_stmt *qt = NULL, *qc = NULL, *qb = NULL, *qk = NULL, *qr = NULL;
    if ((rc = store_prepare(st, "INSERT INTO rel_totals VALUES(?,?,?) ON CONFLICT(run, relation) DO UPDATE SET n = n + excluded.n", &qt, err)) ||
        (rc = store_prepare(st, "INSERT INTO rel_counts VALUES(?,?,?,?,?,?) ON CONFLICT(run, relation, dir, layer, head) DO UPDATE SET correct = correct + excluded.correct", &qc, err)) ||
        (rc = store_prepare(st, "INSERT INTO baseline_counts VALUES(?,?,?,?,?) ON CONFLICT(run, relation, dir, offset) DO UPDATE SET correct = correct + excluded.correct", &qb, err)) ||
        (rc = store_prepare(st, "INSERT INTO chunks VALUES(?,?,?,?,?)", &qk, err)) ||
        (rc = store_prepare(st, "UPDATE runs SET n_done = ? WHERE id = ?", &qr, err)))
        goto cleanup;
    for (int r = 0; r < c->nrel; r++) {
        sqlite3_bind_int64(qt, 1, c->run);
        sqlite3_bind_text(qt, 2, c->rel[r], -1, SQLITE_STATIC);
        sqlite3_bind_int64(qt, 3, c->rel_total[r]);
        if ((rc = store_step_done(st, qt, err))) goto cleanup;
        for (int d = 0; d < 2; d++) {
            for (int lh = 0; lh < c->LH; lh++) {
                int64_t v = c->rel_correct[((size_t)r * 2 + d) * c->LH + lh];
                if (!v) continue;
                sqlite3_bind_int64(qc, 1, c->run);
                sqlite3_bind_text(qc, 2, c->rel[r], -1, SQLITE_STATIC);
                sqlite3_bind_int(qc, 3, d);
                sqlite3_bind_int(qc, 4, lh / c->H);
                sqlite3_bind_int(qc, 5, lh % c->H);
                sqlite3_bind_int64(qc, 6, v);
                if ((rc = store_step_done(st, qc, err))) goto cleanup;
            }
            for (int o = 0; o < HD_N_OFFSETS; o++) {
                sqlite3_bind_int64(qb, 1, c->run);
                sqlite3_bind_text(qb, 2, c->rel[r], -1, SQLITE_STATIC);
                sqlite3_bind_int(qb, 3, d);
                sqlite3_bind_int(qb, 4, HD_OFFSETS[o]);
                sqlite3_bind_int64(qb, 5, c->rel_base[((size_t)r * 2 + d) * HD_N_OFFSETS + o]);
                if ((rc = store_step_done(st, qb, err))) goto cleanup;
            }
        }
    }
    sqlite3_bind_int64(qk, 1, c->run);
    sqlite3_bind_int(qk, 2, c->chunk_first / c->chunk);
    sqlite3_bind_int(qk, 3, c->chunk_first);
    sqlite3_bind_int(qk, 4, c->chunk_n);
    sqlite3_bind_blob(qk, 5, c->acc, (int)(c->nacc * sizeof *c->acc), SQLITE_STATIC);
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

typedef struct {
    const char *model_name, *model_digest, *arch, *corpus, *corpus_digest, *params;
    int L, H, Dh, n_total;
} run_key;

/* Finds or creates the run; *n_done and *done tell where it stands. */
static as_status run_begin(store *st, const run_key *k, int64_t *run, int *n_done, int *done, as_error *err) {
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
    if ((rc = store_prepare(st, "INSERT INTO runs(model_name, model_digest, arch, n_layer, n_head, d_head, corpus, corpus_digest, params, version, n_total, n_done, status, created) VALUES(?,?,?,?,?,?,?,?,?,?,?,0,'running',datetime('now'))", &q, err)))
        return rc;
    sqlite3_bind_text(q, 1, k->model_name, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, k->model_digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, k->arch, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 4, k->L);
    sqlite3_bind_int(q, 5, k->H);
    sqlite3_bind_int(q, 6, k->Dh);
    sqlite3_bind_text(q, 7, k->corpus, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 8, k->corpus_digest, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 9, k->params, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 10, AS_VERSION, -1, SQLITE_STATIC);
    sqlite3_bind_int(q, 11, k->n_total);
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
static as_status run_truncate(store *st, int64_t run, int from, as_error *err) {
    static const char *tables[] = {"sentences", "tokens", "words", "saliency", "sentence_heads"};
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

static void progress(an_ctx *c, int done) {
    if (!c->progress) return;
    double el = as_now() - c->t0, rate = (done - c->n_start) / (el > 1e-9 ? el : 1e-9);
    double eta = rate > 0 ? (c->n_total - done) / rate : 0;
    fprintf(stderr, "\rattnscope: %d/%d sentences  %.1f/s  ETA %dm%02ds   ", done, c->n_total, rate, (int)eta / 60,
            (int)eta % 60);
    if (done == c->n_total) fputc('\n', stderr);
    fflush(stderr);
}

/* Produces sentence idx into *s (and whatever it owns in user); cleanup releases it. */
typedef as_status (*produce_fn)(void *user, int idx, int explain, an_sent *s, as_error *err);
typedef void (*release_fn)(void *user);

/* The resumable loop: from n_done to n_total, K sentences per transaction. */
static as_status drive(an_ctx *c, int n_done, produce_fn produce, release_fn release, void *user, as_error *err) {
    as_status rc = AS_OK;
    c->n_start = n_done;
    c->t0 = as_now();
    int open = 0;
    for (int idx = n_done; idx < c->n_total; idx++) {
        if (!open) {
            if ((rc = store_exec(c->st, "BEGIN IMMEDIATE", err))) return rc;
            open = 1;
            c->chunk_first = idx;
            c->chunk_n = 0;
        }
        an_sent s;
        memset(&s, 0, sizeof s);
        rc = produce(user, idx, idx < c->explain, &s, err);
        if (!rc) rc = process_sentence(c, idx, &s, err);
        release(user);
        if (rc) break;
        c->chunk_n++;
        if ((idx + 1) % c->chunk == 0 || idx + 1 == c->n_total) {
            if ((rc = chunk_commit(c, err))) break;
            open = 0;
        }
        progress(c, idx + 1);
    }
    if (rc && open) {
        as_error e2;
        store_exec(c->st, "ROLLBACK", &e2);
        if (c->progress) fputc('\n', stderr);
    }
    return rc;
}

/* ---- finalize ---------------------------------------------------------------------- */

typedef struct {
    double imp, sem, w, wpn, cls, sep, punct, self, prev, next, ent, entn, ablw, abl[3];
    int n, nsem;
} head_acc;

as_status an_finalize(store *st, int64_t run, as_error *err) {
    as_status rc = AS_OK;
    sqlite3_stmt *q = NULL;
    head_acc *ha = NULL;
    double *acc = NULL, *synt = NULL;
    char **synrel = NULL;
    int *syndir = NULL;
    char **rels = NULL;
    int64_t *tot = NULL, *cor = NULL, *base = NULL;
    int nrel = 0;
    int L = 0, H = 0, Dh = 0, min_rel = AN_DEFAULT_MIN_REL;
    if ((rc = store_prepare(st, "SELECT n_layer, n_head, d_head, params FROM runs WHERE id=?", &q, err))) return rc;
    sqlite3_bind_int64(q, 1, run);
    if (sqlite3_step(q) != SQLITE_ROW) {
        sqlite3_finalize(q);
        return as_err_set(err, AS_ERR_INPUT, "%s: no run %lld", st->path, (long long)run);
    }
    L = sqlite3_column_int(q, 0);
    H = sqlite3_column_int(q, 1);
    Dh = sqlite3_column_int(q, 2);
    const char *pj = (const char *)sqlite3_column_text(q, 3);
    const char *mr = pj ? strstr(pj, "\"min_rel\":") : NULL;
    if (mr) min_rel = atoi(mr + 10);
    sqlite3_finalize(q);
    q = NULL;
    const int LH = L * H;
    const size_t npairs = (size_t)LH * (size_t)(LH - 1) / 2, nacc = 1 + npairs + (size_t)LH * (size_t)(Dh + 1);
    ha = as_calloc((size_t)LH, sizeof *ha);
    acc = as_calloc(nacc, sizeof *acc);
    synt = as_calloc((size_t)LH, sizeof *synt);
    synrel = as_calloc((size_t)LH, sizeof *synrel);
    syndir = as_calloc((size_t)LH, sizeof *syndir);
    if (!ha || !acc || !synt || !synrel || !syndir) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if ((rc = store_exec(st, "BEGIN IMMEDIATE", err))) goto cleanup;
    char sql[512];
    static const char *res_tables[] = {"head_scores", "rel_accuracy", "head_pairs", "patterns"};
    for (int i = 0; i < 4; i++) {
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE run=%lld", res_tables[i], (long long)run);
        if ((rc = store_exec(st, sql, err))) goto rollback;
    }
    /* per-head means over sentences, in sentence order (deterministic sums) */
    if ((rc = store_prepare(st,
                            "SELECT h.layer, h.head, h.importance, h.semantic, h.cls, h.sep, h.punct, h.self, h.prev, h.next,"
                            " h.entropy, h.entropy_norm, h.abl_token, h.abl_position, h.abl_segment, s.n_tokens"
                            " FROM sentence_heads h JOIN sentences s ON s.run = h.run AND s.idx = h.sent"
                            " WHERE h.run = ? ORDER BY h.sent, h.layer, h.head",
                            &q, err)))
        goto rollback;
    sqlite3_bind_int64(q, 1, run);
    int r;
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        int l = sqlite3_column_int(q, 0), h = sqlite3_column_int(q, 1);
        if (l < 0 || l >= L || h < 0 || h >= H) continue;
        head_acc *a = &ha[l * H + h];
        double n = sqlite3_column_int(q, 15), npn = n > 1 ? n - 1 : 0;
        a->n++;
        a->imp += sqlite3_column_double(q, 2);
        if (sqlite3_column_type(q, 3) != SQLITE_NULL) {
            a->sem += sqlite3_column_double(q, 3);
            a->nsem++;
        }
        /* Clark statistics pooled over query rows: each sentence weighs its row count */
        a->w += n;
        a->wpn += npn;
        a->cls += n * sqlite3_column_double(q, 4);
        a->sep += n * sqlite3_column_double(q, 5);
        a->punct += n * sqlite3_column_double(q, 6);
        a->self += n * sqlite3_column_double(q, 7);
        a->prev += npn * sqlite3_column_double(q, 8);
        a->next += npn * sqlite3_column_double(q, 9);
        a->ent += n * sqlite3_column_double(q, 10);
        a->entn += n * sqlite3_column_double(q, 11);
        if (sqlite3_column_type(q, 12) != SQLITE_NULL) {
            a->ablw += n;
            for (int k = 0; k < 3; k++)
                a->abl[k] += sqlite3_column_type(q, 12 + k) == SQLITE_NULL ? NAN : n * sqlite3_column_double(q, 12 + k);
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    if (r != SQLITE_DONE) {
        rc = store_fail(st, "read sentence_heads", err);
        goto rollback;
    }
    /* chunk accumulators, in chunk order */
    if ((rc = store_prepare(st, "SELECT acc FROM chunks WHERE run = ? ORDER BY idx", &q, err))) goto rollback;
    sqlite3_bind_int64(q, 1, run);
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        const double *b = sqlite3_column_blob(q, 0);
        if ((size_t)sqlite3_column_bytes(q, 0) != nacc * sizeof(double)) {
            sqlite3_finalize(q);
            q = NULL;
            rc = as_err_set(err, AS_ERR_INPUT, "%s: run %lld has a chunk of the wrong size", st->path, (long long)run);
            goto rollback;
        }
        for (size_t i = 0; i < nacc; i++) acc[i] += b[i];
    }
    sqlite3_finalize(q);
    q = NULL;
    /* relations, totals and baselines */
    if ((rc = store_prepare(st, "SELECT relation, n FROM rel_totals WHERE run = ? ORDER BY relation", &q, err))) goto rollback;
    sqlite3_bind_int64(q, 1, run);
    int caprel = 0;
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        if (nrel + 1 >= caprel) {
            caprel = caprel ? caprel * 2 : 64;
            char **nr = realloc(rels, (size_t)caprel * sizeof *nr);
            int64_t *nt = realloc(tot, (size_t)caprel * sizeof *nt);
            if (nr) rels = nr;
            if (nt) tot = nt;
            if (!nr || !nt) {
                rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
                goto rollback;
            }
        }
        rels[nrel] = as_strdup((const char *)sqlite3_column_text(q, 0));
        tot[nrel] = sqlite3_column_int64(q, 1);
        nrel++;
    }
    sqlite3_finalize(q);
    q = NULL;
    /* relation index nrel = "all": every relation pooled (root and punct never counted) */
    if (!rels) rels = as_calloc(1, sizeof *rels), tot = as_calloc(1, sizeof *tot);
    if (!rels || !tot) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto rollback;
    }
    rels[nrel] = as_strdup("all");
    tot[nrel] = 0;
    for (int i = 0; i < nrel; i++) tot[nrel] += tot[i];
    const int NR = nrel + 1;
    cor = as_calloc((size_t)NR * 2 * LH, sizeof *cor);
    base = as_calloc((size_t)NR * 2 * HD_N_OFFSETS, sizeof *base);
    if (!cor || !base) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto rollback;
    }
    if ((rc = store_prepare(st, "SELECT relation, dir, layer, head, correct FROM rel_counts WHERE run = ?", &q, err))) goto rollback;
    sqlite3_bind_int64(q, 1, run);
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 0);
        int d = sqlite3_column_int(q, 1), l = sqlite3_column_int(q, 2), h = sqlite3_column_int(q, 3);
        int ri = -1;
        for (int i = 0; i < nrel; i++)
            if (!strcmp(rels[i], name)) ri = i;
        if (ri < 0 || d < 0 || d > 1 || l < 0 || l >= L || h < 0 || h >= H) continue;
        int64_t v = sqlite3_column_int64(q, 4);
        cor[((size_t)ri * 2 + d) * LH + l * H + h] += v;
        cor[((size_t)nrel * 2 + d) * LH + l * H + h] += v;
    }
    sqlite3_finalize(q);
    q = NULL;
    if ((rc = store_prepare(st, "SELECT relation, dir, offset, correct FROM baseline_counts WHERE run = ?", &q, err))) goto rollback;
    sqlite3_bind_int64(q, 1, run);
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(q, 0);
        int d = sqlite3_column_int(q, 1), off = sqlite3_column_int(q, 2), oi = -1, ri = -1;
        for (int o = 0; o < HD_N_OFFSETS; o++)
            if (HD_OFFSETS[o] == off) oi = o;
        for (int i = 0; i < nrel; i++)
            if (!strcmp(rels[i], name)) ri = i;
        if (ri < 0 || oi < 0 || d < 0 || d > 1) continue;
        int64_t v = sqlite3_column_int64(q, 3);
        base[((size_t)ri * 2 + d) * HD_N_OFFSETS + oi] += v;
        base[((size_t)nrel * 2 + d) * HD_N_OFFSETS + oi] += v;
    }
    sqlite3_finalize(q);
    q = NULL;
    /* rel_accuracy + syntactic score (Clark et al. 2019 sec. 4.2; Dodrio sec. 3.2):
     * a head's accuracy for (relation, direction) counts only when the relation has at
     * least min_rel instances and the accuracy beats the best fixed-offset baseline. */
    if ((rc = store_prepare(st, "INSERT INTO rel_accuracy VALUES(?,?,?,?,?,?,?,?,?,?,?)", &q, err))) goto rollback;
    for (int ri = 0; ri < NR; ri++) {
        if (tot[ri] == 0) continue;
        for (int d = 0; d < 2; d++) {
            int bo = 0;
            for (int o = 1; o < HD_N_OFFSETS; o++)
                if (base[((size_t)ri * 2 + d) * HD_N_OFFSETS + o] > base[((size_t)ri * 2 + d) * HD_N_OFFSETS + bo]) bo = o;
            double bacc = (double)base[((size_t)ri * 2 + d) * HD_N_OFFSETS + bo] / (double)tot[ri];
            for (int lh = 0; lh < LH; lh++) {
                int64_t k = cor[((size_t)ri * 2 + d) * LH + lh];
                double a = (double)k / (double)tot[ri];
                int counted = tot[ri] >= min_rel && a > bacc;
                if (counted && a > synt[lh]) {
                    synt[lh] = a;
                    synrel[lh] = rels[ri];
                    syndir[lh] = d;
                }
                sqlite3_bind_int64(q, 1, run);
                sqlite3_bind_text(q, 2, rels[ri], -1, SQLITE_STATIC);
                sqlite3_bind_int(q, 3, d);
                sqlite3_bind_int(q, 4, lh / H);
                sqlite3_bind_int(q, 5, lh % H);
                sqlite3_bind_int64(q, 6, tot[ri]);
                sqlite3_bind_int64(q, 7, k);
                sqlite3_bind_double(q, 8, a);
                sqlite3_bind_double(q, 9, bacc);
                sqlite3_bind_int(q, 10, HD_OFFSETS[bo]);
                sqlite3_bind_int(q, 11, counted);
                if ((rc = store_step_done(st, q, err))) goto rollback;
            }
        }
    }
    sqlite3_finalize(q);
    q = NULL;
    /* head_scores + patterns */
    sqlite3_stmt *qp = NULL;
    if ((rc = store_prepare(st, "INSERT INTO head_scores VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", &q, err)) ||
        (rc = store_prepare(st, "INSERT INTO patterns VALUES(?,?,?,?,?,?,?,?,?,?,?)", &qp, err))) {
        sqlite3_finalize(qp);
        goto rollback;
    }
    for (int lh = 0; lh < LH; lh++) {
        head_acc *a = &ha[lh];
        hd_stats hs = {0};
        double w = a->w > 0 ? a->w : 1, wpn = a->wpn > 0 ? a->wpn : 1;
        hs.cls = a->cls / w;
        hs.sep = a->sep / w;
        hs.punct = a->punct / w;
        hs.self = a->self / w;
        hs.prev = a->prev / wpn;
        hs.next = a->next / wpn;
        hs.entropy = a->ent / w;
        hs.entropy_norm = a->entn / w;
        sqlite3_bind_int64(q, 1, run);
        sqlite3_bind_int(q, 2, lh / H);
        sqlite3_bind_int(q, 3, lh % H);
        store_bind_real(q, 4, a->n ? a->imp / a->n : NAN);
        store_bind_real(q, 5, a->nsem ? a->sem / a->nsem : NAN);
        sqlite3_bind_double(q, 6, synt[lh]);
        if (synrel[lh]) {
            sqlite3_bind_text(q, 7, synrel[lh], -1, SQLITE_STATIC);
            sqlite3_bind_int(q, 8, syndir[lh]);
        }
        double v[] = {hs.cls, hs.sep, hs.punct, hs.self, hs.prev, hs.next, hs.entropy, hs.entropy_norm};
        for (int k = 0; k < 8; k++) store_bind_real(q, 9 + k, a->n ? v[k] : NAN);
        sqlite3_bind_int(q, 17, a->n);
        sqlite3_bind_int(q, 18, a->nsem);
        if ((rc = store_step_done(st, q, err))) {
            sqlite3_finalize(qp);
            goto rollback;
        }
        double conf;
        hd_pattern p = hd_label(&hs, &conf);
        /* concentration: median over defined links (lower median) of the histogram */
        const double *hist = acc + 1 + npairs + (size_t)lh * (size_t)(Dh + 1);
        double nl = 0;
        for (int k = 1; k <= Dh; k++) nl += hist[k];
        int med = 0;
        double cum = 0;
        for (int k = 1; k <= Dh && nl > 0; k++) {
            cum += hist[k];
            if (cum >= (nl + 1) / 2) {
                med = k;
                break;
            }
        }
        sqlite3_bind_int64(qp, 1, run);
        sqlite3_bind_int(qp, 2, lh / H);
        sqlite3_bind_int(qp, 3, lh % H);
        sqlite3_bind_text(qp, 4, hd_pattern_name(p), -1, SQLITE_STATIC);
        sqlite3_bind_double(qp, 5, conf);
        if (med) sqlite3_bind_int(qp, 6, med);
        sqlite3_bind_int64(qp, 7, (int64_t)nl);
        static const char *comp[] = {"token", "position", "segment"};
        int best = -1;
        for (int k = 0; k < 3; k++) {
            double m = a->ablw > 0 ? a->abl[k] / a->ablw : NAN;
            store_bind_real(qp, 8 + k, m);
            if (!isnan(m) && (best < 0 || m > a->abl[best] / a->ablw)) best = k;
        }
        if (best >= 0) sqlite3_bind_text(qp, 11, comp[best], -1, SQLITE_STATIC);
        if ((rc = store_step_done(st, qp, err))) {
            sqlite3_finalize(qp);
            goto rollback;
        }
    }
    sqlite3_finalize(qp);
    sqlite3_finalize(q);
    q = NULL;
    /* head pairs: mean JSD per query row (Clark's sum over tokens / number of rows) */
    if ((rc = store_prepare(st, "INSERT INTO head_pairs VALUES(?,?,?,?,?,?)", &q, err))) goto rollback;
    size_t p = 0;
    for (int a = 0; a < LH; a++)
        for (int b = a + 1; b < LH; b++, p++) {
            sqlite3_bind_int64(q, 1, run);
            sqlite3_bind_int(q, 2, a / H);
            sqlite3_bind_int(q, 3, a % H);
            sqlite3_bind_int(q, 4, b / H);
            sqlite3_bind_int(q, 5, b % H);
            sqlite3_bind_double(q, 6, acc[0] > 0 ? acc[1 + p] / acc[0] : 0.0);
            if ((rc = store_step_done(st, q, err))) goto rollback;
        }
    sqlite3_finalize(q);
    q = NULL;
    snprintf(sql, sizeof sql, "UPDATE runs SET status='done', finished=datetime('now') WHERE id=%lld", (long long)run);
    if ((rc = store_exec(st, sql, err))) goto rollback;
    rc = store_exec(st, "COMMIT", err);
    goto cleanup;
rollback:
    sqlite3_finalize(q);
    q = NULL;
    {
        as_error e2;
        store_exec(st, "ROLLBACK", &e2);
    }
cleanup:
    sqlite3_finalize(q);
    for (int i = 0; rels && i <= nrel; i++) free(rels[i]);
    free(rels);
    free(tot);
    free(cor);
    free(base);
    free(ha);
    free(acc);
    free(synt);
    free(synrel);
    free(syndir);
    return rc;
}

/* ---- digests ----------------------------------------------------------------------- */

static int digest_file_wanted(const struct dirent *d) {
    const char *n = d->d_name;
    size_t l = strlen(n);
    if (n[0] == '.') return 0;
    if (l > 12 && !strcmp(n + l - 12, ".safetensors")) return 1;
    return !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") || !strcmp(n, "vocab.txt") ||
           !strcmp(n, "tokenizer.json") || !strcmp(n, "vocab.json") || !strcmp(n, "merges.txt") ||
           !strcmp(n, "tokenizer_config.json") || !strcmp(n, "special_tokens_map.json");
}

/* sha256 over (name, NUL, bytes) of the files of dir that filter accepts, in name order. */
static as_status digest_dir(const char *dir, int (*filter)(const struct dirent *), char hex[65], as_error *err) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, filter, alphasort);
    if (n < 0) return as_err_set(err, AS_ERR_INPUT, "%s: cannot list the folder", dir);
    sha256_ctx c;
    sha256_init(&c);
    as_status rc = AS_OK;
    for (int i = 0; i < n; i++) {
        char path[4096];
        if (!rc) rc = as_path_join(path, sizeof path, dir, list[i]->d_name, err);
        if (!rc) {
            sha256_update(&c, list[i]->d_name, strlen(list[i]->d_name) + 1);
            rc = sha256_file(&c, path, err);
        }
        free(list[i]);
    }
    free(list);
    if (!rc) sha256_final_hex(&c, hex);
    return rc;
}

static void json_escape_path(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (; s && *s && o + 3 < cap; s++) {
        if (*s == '"' || *s == '\\') out[o++] = '\\';
        out[o++] = (unsigned char)*s < 0x20 ? '?' : *s;
    }
    out[o] = 0;
}

/* ---- analyze ----------------------------------------------------------------------- */

typedef struct {
    as_model *m;
    tr_model *tm;
    int threads, L, H, Dh, has_types;
    tsv_corpus tsv;
    cu_corpus cu;
    const char *sst_path, *cu_path;
    /* owned by the current sentence */
    as_encoding enc;
    as_run *run, *abl[3];
    sal_result sal;
    int have_sal;
    char **tok_text;
    uint8_t *kind;
    int *word;
    int *parent;
    char **rel, **form;
    char src[1200];
} az_user;

static void az_release(void *u_) {
    az_user *u = u_;
    for (int t = 0; u->tok_text && t < u->enc.n; t++) free(u->tok_text[t]);
    free(u->tok_text);
    u->tok_text = NULL;
    free(u->kind);
    u->kind = NULL;
    free(u->word);
    u->word = NULL;
    free(u->parent);
    u->parent = NULL;
    free(u->rel);
    u->rel = NULL;
    free(u->form);
    u->form = NULL;
    as_run_free(u->run);
    u->run = NULL;
    for (int a = 0; a < 3; a++) {
        as_run_free(u->abl[a]);
        u->abl[a] = NULL;
    }
    if (u->have_sal) sal_result_free(&u->sal);
    u->have_sal = 0;
    as_encoding_free(&u->enc);
    memset(&u->enc, 0, sizeof u->enc);
}

static as_status az_produce(void *u_, int idx, int explain, an_sent *s, as_error *err) {
    az_user *u = u_;
    int is_sst = idx < u->tsv.n;
    const cu_sentence *cs = is_sst ? NULL : &u->cu.s[idx - u->tsv.n];
    const char *text = is_sst ? u->tsv.rows[idx].text : cs->text;
    snprintf(u->src, sizeof u->src, "%s:%d", is_sst ? u->sst_path : u->cu_path, is_sst ? u->tsv.rows[idx].line : cs->line);
    as_encode_opts eo = {.max_len = 0, .truncate = 1};
    as_status rc = as_encode(u->m, text, NULL, &eo, &u->enc, err);
    if (rc) return as_err_prefix(err, "%s", u->src);
    const int T = u->enc.n;
    as_capture_spec spec = {.what = CAP_ATTN | (explain ? CAP_QKV : 0), .layer = -1, .head = -1, .threads = u->threads};
    if ((rc = as_forward(u->m, &u->enc, &spec, &u->run, err))) return as_err_prefix(err, "%s", u->src);
    u->tok_text = as_calloc((size_t)T, sizeof *u->tok_text);
    u->kind = as_malloc((size_t)T);
    if (!u->tok_text || !u->kind) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int t = 0; t < T; t++) {
        u->tok_text[t] = as_model_token_text(u->m, u->enc.ids[t]);
        if (!u->tok_text[t] && !(u->tok_text[t] = as_strdup("?"))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        if (!u->enc.mask[t]) u->kind[t] = HK_PAD;
        else if (u->enc.seq[t] < 0) u->kind[t] = t == 0 ? HK_CLS : HK_SEP;
        else u->kind[t] = hd_is_punct(u->tok_text[t]) ? HK_PUNCT : HK_WORD;
    }
    if (explain) {
        static const unsigned comp[3] = {ABLATE_TOKEN, ABLATE_POSITION, ABLATE_SEGMENT};
        for (int a = 0; a < 3; a++) {
            if (comp[a] == ABLATE_SEGMENT && !u->has_types) continue;
            as_capture_spec sa = {.what = CAP_ATTN, .layer = -1, .head = -1, .threads = u->threads, .ablate = comp[a]};
            if ((rc = as_forward(u->m, &u->enc, &sa, &u->abl[a], err))) return as_err_prefix(err, "%s", u->src);
            s->abl[a] = u->abl[a]->attn;
        }
        s->q = u->run->q;
        s->k = u->run->k;
    }
    if (is_sst && u->tm) {
        sal_opts so = {.method = SAL_GRAD, .target = -1, .steps = 0};
        if ((rc = sal_compute_tr(u->tm, &u->enc, &so, &u->sal, err))) return as_err_prefix(err, "%s", u->src);
        u->have_sal = 1;
        s->sal = u->sal.scores;
        s->sal_all = u->sal.scores;
        s->n_sal_cls = 1;
        s->sal_first_class = u->sal.predicted;
        s->predicted = u->sal.predicted;
    } else {
        s->predicted = -1;
    }
    if (cs) {
        const int W = cs->n_words;
        u->word = as_malloc_array((size_t)T, sizeof *u->word);
        u->parent = as_malloc_array((size_t)W, sizeof *u->parent);
        u->rel = as_malloc_array((size_t)W, sizeof *u->rel);
        u->form = as_malloc_array((size_t)W, sizeof *u->form);
        int32_t *st = as_malloc_array((size_t)T, sizeof *st);
        if (!u->word || !u->parent || !u->rel || !u->form || !st) {
            free(st);
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        }
        /* a byte-level BPE piece may start with the space before its word: skip it */
        for (int t = 0; t < T; t++) {
            st[t] = u->enc.start[t];
            while (st[t] >= 0 && st[t] < u->enc.end[t] && (text[st[t]] == ' ' || text[st[t]] == '\t')) st[t]++;
        }
        cu_token_words(cs, st, T, u->word);
        free(st);
        for (int w = 0; w < W; w++) {
            u->parent[w] = cs->words[w].head;
            u->rel[w] = cs->words[w].deprel;
            u->form[w] = cs->words[w].form;
        }
        s->W = W;
        s->word = u->word;
        s->parent = u->parent;
        s->rel = u->rel;
        s->word_form = u->form;
    }
    s->corpus = is_sst ? "sst2" : "conllu";
    s->source = u->src;
    s->text = text;
    s->label = is_sst ? u->tsv.rows[idx].label : -1;
    s->truncated = u->enc.n_warnings > 0;
    s->T = T;
    s->tok_text = u->tok_text;
    s->start = u->enc.start;
    s->end = u->enc.end;
    s->kind = u->kind;
    s->attn = u->run->attn;
    return AS_OK;
}

static as_status finish_run(an_ctx *c, store *st, int n_done, int done, produce_fn pf, release_fn rf, void *user,
                            const an_opts *o, const char *what, as_error *err) {
    as_status rc = AS_OK;
    if (done) {
        if (!o->quiet) printf("%s: run %lld is complete (%d sentences); nothing to do\n", what, (long long)c->run, c->n_total);
        return AS_OK;
    }
    if ((rc = run_truncate(st, c->run, n_done, err))) return rc;
    if (n_done < c->n_total && (rc = drive(c, n_done, pf, rf, user, err))) return rc;
    if ((rc = an_finalize(st, c->run, err))) return rc;
    if (!o->quiet)
        printf("%s: run %lld done: %d sentences (%d this time)\n", what, (long long)c->run, c->n_total, c->n_total - n_done);
    return AS_OK;
}

as_status an_analyze(const char *db_path, const an_opts *o, as_error *err) {
    as_status rc = AS_OK;
    az_user u;
    memset(&u, 0, sizeof u);
    store st = {0};
    an_ctx c;
    memset(&c, 0, sizeof c);
    if (!o->sst2 && !o->conllu) return as_err_set(err, AS_ERR_INPUT, "give --sst2 FILE and/or --conllu FILE");
    u.sst_path = o->sst2;
    u.cu_path = o->conllu;
    u.threads = o->threads;
    if (o->sst2 && (rc = tsv_read_sst2(o->sst2, o->limit, &u.tsv, err))) goto cleanup;
    if (o->conllu && (rc = cu_read(o->conllu, o->limit, &u.cu, err))) goto cleanup;
    if ((rc = as_model_load(o->model_dir, &u.m, err))) goto cleanup;
    const as_config *cfg = as_model_config(u.m);
    if (!as_model_has_tokenizer(u.m)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: no tokenizer files (vocab.txt / tokenizer.json): analyze tokenizes text",
                        o->model_dir);
        goto cleanup;
    }
    u.L = cfg->n_layer;
    u.H = cfg->n_head;
    u.Dh = cfg->d_head;
    u.has_types = cfg->type_vocab > 0;
    if (u.tsv.n && (as_model_heads(u.m) & HEAD_CLASSIFIER) && cfg->arch != ARCH_GPT2) {
        tr_from_as_opts fo = TR_FROM_AS_DEFAULTS;
        fo.mlm = 0;
        as_error e2 = {0};
        if (tr_model_from_as(u.m, &fo, &u.tm, &e2)) {
            as_warn("%s: no saliency, so no semantic score: %s", o->model_dir, e2.msg);
            u.tm = NULL;
        }
    }
    /* identity of the run */
    char mdig[65], cdig[65], corpus[2600], params[256], p1[1200], p2[1200];
    if ((rc = digest_dir(o->model_dir, digest_file_wanted, mdig, err))) goto cleanup;
    sha256_ctx hc;
    sha256_init(&hc);
    if (o->sst2) {
        sha256_update(&hc, "sst2", 5);
        if ((rc = sha256_file(&hc, o->sst2, err))) goto cleanup;
    }
    if (o->conllu) {
        sha256_update(&hc, "conllu", 7);
        if ((rc = sha256_file(&hc, o->conllu, err))) goto cleanup;
    }
    sha256_final_hex(&hc, cdig);
    json_escape_path(p1, sizeof p1, o->sst2);
    json_escape_path(p2, sizeof p2, o->conllu);
    snprintf(corpus, sizeof corpus, "{\"sst2\":\"%s\",\"conllu\":\"%s\"}", p1, p2);
    int chunk = o->chunk > 0 ? o->chunk : AN_DEFAULT_CHUNK;
    int explain = o->explain >= 0 ? o->explain : AN_DEFAULT_EXPLAIN;
    int min_rel = o->min_rel > 0 ? o->min_rel : AN_DEFAULT_MIN_REL;
    snprintf(params, sizeof params,
             "{\"chunk\":%d,\"explain\":%d,\"limit\":%d,\"min_rel\":%d,\"saliency\":\"grad\",\"source\":\"analyze\"}", chunk,
             explain, o->limit, min_rel);
    run_key k = {.model_name = o->model_dir, .model_digest = mdig, .arch = as_arch_name(cfg->arch), .corpus = corpus,
                 .corpus_digest = cdig, .params = params, .L = u.L, .H = u.H, .Dh = u.Dh,
                 .n_total = u.tsv.n + u.cu.n};
    if (k.n_total == 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "the corpora hold no sentences");
        goto cleanup;
    }
    if ((rc = store_open(db_path, 1, &st, err))) goto cleanup;
    int64_t run;
    int n_done, done;
    if ((rc = run_begin(&st, &k, &run, &n_done, &done, err))) goto cleanup;
    if ((rc = ctx_init(&c, &st, run, u.L, u.H, u.Dh, err))) goto cleanup;
    c.chunk = chunk;
    c.explain = explain;
    c.min_rel = min_rel;
    c.progress = o->progress;
    c.n_total = k.n_total;
    rc = finish_run(&c, &st, n_done, done, az_produce, az_release, &u, o, "analyze", err);
cleanup:
    az_release(&u);
    ctx_free(&c);
    store_close(&st);
    tr_model_free(u.tm);
    as_model_free(u.m);
    tsv_corpus_free(&u.tsv);
    cu_corpus_free(&u.cu);
    return rc;
}

/* ---- import ------------------------------------------------------------------------ */

static int import_json_wanted(const struct dirent *d) {
    size_t l = strlen(d->d_name);
    return d->d_name[0] != '.' && l > 5 && !strcmp(d->d_name + l - 5, ".json");
}

static int import_npy_wanted(const struct dirent *d) {
    size_t l = strlen(d->d_name);
    return d->d_name[0] != '.' && l > 14 && !strcmp(d->d_name + l - 14, ".attention.npy");
}

typedef struct {
    const char *dir;
    char **names; /* (n) json file names */
    int n;
    int L, H;
    /* owned by the current sentence */
    json_t *j;
    npy_array a;
    char **tok_text;
    uint8_t *kind;
    float *sal_all;
    int *word, *parent;
    char **rel, **form;
    char src[1200];
} im_user;

static void im_release(void *u_) {
    im_user *u = u_;
    free(u->tok_text);
    u->tok_text = NULL;
    free(u->kind);
    u->kind = NULL;
    free(u->sal_all);
    u->sal_all = NULL;
    free(u->word);
    u->word = NULL;
    free(u->parent);
    u->parent = NULL;
    free(u->rel);
    u->rel = NULL;
    free(u->form);
    u->form = NULL;
    npy_array_free(&u->a);
    json_decref(u->j);
    u->j = NULL;
}

/* Aligns WordPiece tokens to parse words by consuming the words' characters (ASCII
 * case-folded): a token belongs to the word holding its first character; [UNK] takes
 * the rest of the current word. Returns -1 when the texts do not match. */
static int align_pieces(char *const *tok, const uint8_t *kind, int T, char *const *words, int W, int *word) {
    int w = 0;
    size_t c = 0;
    for (int t = 0; t < T; t++) {
        word[t] = -1;
        if (kind[t] == HK_CLS || kind[t] == HK_SEP || kind[t] == HK_PAD) continue;
        const char *p = tok[t];
        if (p[0] == '#' && p[1] == '#' && p[2]) p += 2;
        while (w < W && words[w][c] == 0) w++, c = 0;
        if (w >= W) return -1;
        word[t] = w;
        if (!strcmp(p, "[UNK]")) {
            c = strlen(words[w]);
            continue;
        }
        for (; *p; p++) {
            while (w < W && words[w][c] == 0) w++, c = 0;
            if (w >= W) return -1;
            unsigned char a = (unsigned char)*p, b = (unsigned char)words[w][c];
            if (a < 128 && b < 128 ? tolower(a) != tolower(b) : a != b) return -1;
            c++;
        }
    }
    return 0;
}

#define IM_FAIL(...) do { rc = as_err_set(err, AS_ERR_INPUT, __VA_ARGS__); goto fail; } while (0)

static as_status im_produce(void *u_, int idx, int explain, an_sent *s, as_error *err) {
    im_user *u = u_;
    as_status rc;
    char jpath[4096], npath[4096], base[1024];
    const char *jn = u->names[idx];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(jn) - 5), jn);
    if ((rc = as_path_join(jpath, sizeof jpath, u->dir, jn, err))) return rc;
    char nn[1100];
    snprintf(nn, sizeof nn, "%s.attention.npy", base);
    if ((rc = as_path_join(npath, sizeof npath, u->dir, nn, err))) return rc;
    snprintf(u->src, sizeof u->src, "%s", jn);
    json_error_t je;
    u->j = json_load_file(jpath, 0, &je);
    if (!u->j) return as_err_set(err, AS_ERR_INPUT, "%s:%d: invalid JSON: %s", jpath, je.line, je.text);
    if ((rc = npy_read_f32(npath, &u->a, err))) return rc;
    json_t *j = u->j;
    const char *sentence = json_string_value(json_object_get(j, "sentence"));
    json_t *toks = json_object_get(j, "tokens"), *sal = json_object_get(j, "saliency");
    json_t *lab = json_object_get(j, "label"), *pred = json_object_get(j, "predicted_label");
    if (!json_is_object(j)) IM_FAIL("%s: expected a JSON object", jpath);
    if (!sentence) IM_FAIL("%s: field 'sentence' missing or not a string", jpath);
    if (!json_is_array(toks) || json_array_size(toks) == 0) IM_FAIL("%s: field 'tokens' missing or not a non-empty array", jpath);
    const int T = (int)json_array_size(toks);
    if (T > AS_MAX_POSITIONS) IM_FAIL("%s: %d tokens exceed %d", jpath, T, AS_MAX_POSITIONS);
    if (u->a.ndim != 4 || u->a.shape[0] != u->L || u->a.shape[1] != u->H || u->a.shape[2] != T || u->a.shape[3] != T)
        IM_FAIL("%s: attention shape must be [%d, %d, %d, %d] (layers, heads, tokens, tokens)", npath, u->L, u->H, T, T);
    for (size_t i = 0; i < u->a.n; i++)
        if (!isfinite(u->a.data[i]) || u->a.data[i] < 0.0f) IM_FAIL("%s: attention entry %zu is negative or not finite", npath, i);
    u->tok_text = as_calloc((size_t)T, sizeof *u->tok_text);
    u->kind = as_malloc((size_t)T);
    if (!u->tok_text || !u->kind) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int t = 0; t < T; t++) {
        const char *p = json_string_value(json_array_get(toks, (size_t)t));
        if (!p) IM_FAIL("%s: tokens[%d] is not a string", jpath, t);
        u->tok_text[t] = (char *)p;
        int special = !strcmp(p, "[CLS]") || !strcmp(p, "[SEP]") || !strcmp(p, "<s>") || !strcmp(p, "</s>");
        int first = !strcmp(p, "[CLS]") || !strcmp(p, "<s>");
        u->kind[t] = special ? (first ? HK_CLS : HK_SEP) : hd_is_punct(p) ? HK_PUNCT : HK_WORD;
        if (!strcmp(p, "[PAD]") || !strcmp(p, "<pad>")) u->kind[t] = HK_PAD;
    }
    s->label = json_is_integer(lab) ? (int)json_integer_value(lab) : -1;
    s->predicted = json_is_integer(pred) ? (int)json_integer_value(pred) : -1;
    if (sal) {
        /* per-class saliency: saliency[t] = {"token": ..., "<class>": value, ...} in class order */
        if (!json_is_array(sal) || (int)json_array_size(sal) != T) IM_FAIL("%s: 'saliency' must be an array of %d objects", jpath, T);
        int C = 0;
        const char *key;
        json_t *v;
        json_object_foreach(json_array_get(sal, 0), key, v) C += strcmp(key, "token") != 0;
        if (C < 1 || C > AS_MAX_LABELS) IM_FAIL("%s: saliency[0] has no class values", jpath);
        if (!(u->sal_all = as_malloc_array(as_mul_size((size_t)C, (size_t)T), sizeof *u->sal_all)))
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        for (int t = 0; t < T; t++) {
            json_t *o = json_array_get(sal, (size_t)t);
            if (!json_is_object(o)) IM_FAIL("%s: saliency[%d] is not an object", jpath, t);
            int k = 0;
            json_object_foreach(o, key, v) {
                if (!strcmp(key, "token")) continue;
                if (k >= C || !json_is_number(v)) IM_FAIL("%s: saliency[%d].%s is not a number or classes differ", jpath, t, key);
                u->sal_all[(size_t)k * T + t] = (float)json_number_value(v);
                k++;
            }
            if (k != C) IM_FAIL("%s: saliency[%d] has %d classes, saliency[0] has %d", jpath, t, k, C);
        }
        s->sal_all = u->sal_all;
        s->n_sal_cls = C;
        s->sal_first_class = 0;
        if (s->predicted >= C) IM_FAIL("%s: predicted_label %d but saliency has %d classes", jpath, s->predicted, C);
        if (s->predicted >= 0) s->sal = u->sal_all + (size_t)s->predicted * T;
    }
    json_t *deps = json_object_get(j, "dependencies");
    if (deps) {
        json_t *lst = json_object_get(deps, "list"), *words = json_object_get(deps, "words");
        if (!json_is_array(lst) || !json_is_array(words)) IM_FAIL("%s: 'dependencies' needs arrays 'list' and 'words'", jpath);
        int W = (int)json_array_size(words);
        if (W > T) IM_FAIL("%s: %d parse words but only %d tokens", jpath, W, T);
        u->word = as_malloc_array((size_t)T, sizeof *u->word);
        u->parent = as_malloc_array((size_t)(W ? W : 1), sizeof *u->parent);
        u->rel = as_calloc((size_t)(W ? W : 1), sizeof *u->rel);
        u->form = as_calloc((size_t)(W ? W : 1), sizeof *u->form);
        if (!u->word || !u->parent || !u->rel || !u->form) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        for (int w = 0; w < W; w++) {
            if (!(u->form[w] = (char *)json_string_value(json_array_get(words, (size_t)w))))
                IM_FAIL("%s: dependencies.words[%d] is not a string", jpath, w);
            u->parent[w] = -2;
            u->rel[w] = (char *)"";
        }
        for (size_t i = 0; i < json_array_size(lst); i++) {
            json_t *e = json_array_get(lst, i), *ch = json_object_get(e, "child"), *pa = json_object_get(e, "parent");
            const char *rl = json_string_value(json_object_get(e, "relation"));
            if (!json_is_integer(ch) || json_integer_value(ch) < 0 || json_integer_value(ch) >= W || !rl ||
                !(json_is_null(pa) || (json_is_integer(pa) && json_integer_value(pa) >= 0 && json_integer_value(pa) < W)))
                IM_FAIL("%s: dependencies.list[%zu] needs child and parent in [0, %d) (parent may be null) and a relation",
                        jpath, i, W);
            int c = (int)json_integer_value(ch);
            u->parent[c] = json_is_null(pa) ? -1 : (int)json_integer_value(pa);
            u->rel[c] = (char *)rl;
        }
        if (align_pieces(u->tok_text, u->kind, T, u->form, W, u->word) == 0) {
            s->W = W;
            s->word = u->word;
            s->parent = u->parent;
            s->rel = u->rel;
            s->word_form = u->form;
        } else {
            as_warn("%s: tokens do not spell the parse's words; no syntactic counts for this sentence", jpath);
        }
    }
    s->corpus = "import";
    s->source = u->src;
    s->text = sentence;
    s->T = T;
    s->tok_text = u->tok_text;
    s->kind = u->kind;
    s->attn = u->a.data;
    (void)explain;
    return AS_OK;
fail:
    return rc;
}

as_status an_import_dir(const char *db_path, const char *dir, const an_opts *o, as_error *err) {
    as_status rc = AS_OK;
    im_user u;
    memset(&u, 0, sizeof u);
    u.dir = dir;
    store st = {0};
    an_ctx c;
    memset(&c, 0, sizeof c);
    struct dirent **list = NULL;
    int n = scandir(dir, &list, import_json_wanted, alphasort);
    if (n < 0) return as_err_set(err, AS_ERR_INPUT, "%s: cannot list the folder", dir);
    u.names = as_calloc((size_t)(n ? n : 1), sizeof *u.names);
    for (int i = 0; i < n; i++) {
        if (u.names && (o->limit <= 0 || u.n < o->limit)) {
            char npath[4096], nn[1100];
            snprintf(nn, sizeof nn, "%.*s.attention.npy", (int)(strlen(list[i]->d_name) - 5), list[i]->d_name);
            as_error e2;
            if (!as_path_join(npath, sizeof npath, dir, nn, &e2) && as_file_exists(npath))
                u.names[u.n++] = as_strdup(list[i]->d_name);
        }
        free(list[i]);
    }
    free(list);
    if (!u.names) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (u.n == 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: no NNNN.json + NNNN.attention.npy pairs", dir);
        goto cleanup;
    }
    {
        /* sizes from the first attention file */
        char npath[4096], nn[1100];
        snprintf(nn, sizeof nn, "%.*s.attention.npy", (int)(strlen(u.names[0]) - 5), u.names[0]);
        if ((rc = as_path_join(npath, sizeof npath, dir, nn, err))) goto cleanup;
        npy_array a;
        if ((rc = npy_read_f32(npath, &a, err))) goto cleanup;
        int ok = a.ndim == 4 && a.shape[0] >= 1 && a.shape[0] <= AS_MAX_LAYERS && a.shape[1] >= 1 &&
                 a.shape[1] <= AS_MAX_HEADS && a.shape[2] == a.shape[3];
        u.L = (int)a.shape[0];
        u.H = (int)a.shape[1];
        npy_array_free(&a);
        if (!ok) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: attention must have shape [layers, heads, tokens, tokens]", npath);
            goto cleanup;
        }
    }
    char mdig[65], cdig[65], corpus[1200], params[256], name[1200], pd[1100];
    if ((rc = digest_dir(dir, import_npy_wanted, mdig, err)) || (rc = digest_dir(dir, import_json_wanted, cdig, err)))
        goto cleanup;
    json_escape_path(pd, sizeof pd, dir);
    snprintf(corpus, sizeof corpus, "{\"import\":\"%s\"}", pd);
    snprintf(name, sizeof name, "import:%s", dir);
    int chunk = o->chunk > 0 ? o->chunk : AN_DEFAULT_CHUNK;
    int min_rel = o->min_rel > 0 ? o->min_rel : AN_DEFAULT_MIN_REL;
    snprintf(params, sizeof params, "{\"chunk\":%d,\"limit\":%d,\"min_rel\":%d,\"source\":\"import\"}", chunk, o->limit,
             min_rel);
    run_key k = {.model_name = name, .model_digest = mdig, .arch = "imported", .corpus = corpus, .corpus_digest = cdig,
                 .params = params, .L = u.L, .H = u.H, .Dh = 0, .n_total = u.n};
    if ((rc = store_open(db_path, 1, &st, err))) goto cleanup;
    int64_t run;
    int n_done, done;
    if ((rc = run_begin(&st, &k, &run, &n_done, &done, err))) goto cleanup;
    if ((rc = ctx_init(&c, &st, run, u.L, u.H, 0, err))) goto cleanup;
    c.chunk = chunk;
    c.explain = 0;
    c.min_rel = min_rel;
    c.progress = o->progress;
    c.n_total = k.n_total;
    rc = finish_run(&c, &st, n_done, done, im_produce, im_release, &u, o, "import", err);
cleanup:
    im_release(&u);
    ctx_free(&c);
    store_close(&st);
    for (int i = 0; i < u.n; i++) free(u.names[i]);
    free(u.names);
    return rc;
}
