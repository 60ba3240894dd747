/* finalize.c — an_finalize: the aggregate tables of a run (head_scores, rel_accuracy,
 * head_pairs, patterns) computed from its stored rows in a fixed order, in one
 * transaction that also marks the run done; one function per table. Formulas and
 * sources: heads.h / heads.c and docs/analysis.md.
 * What it does not: read corpora or models, or touch the per-sentence rows.
 */
#include "analysis/runner_internal.h"

#include <math.h>
#include <string.h>

/* One head's sums over the run's sentences. */
typedef struct {
    double imp, sem, w, wpn, cls, sep, punct, self, prev, next, ent, entn, ablw, abl[3];
    double wfirst, first; /* rows with a previous token of the sentences that have a first-token mass */
    double gimp;          /* sum of the per-sentence gradient head importance */
    double wsink, sraw, snorm, walti, alti; /* row-weighted sums of the sink masses and ALTI shares */
    int n, nsem, ngimp;
} head_acc;

/* What an_finalize reads and computes for one run. */
typedef struct {
    store *st;
    int64_t run;
    int L, H, Dh, LH, min_rel;
    const double *induction; /* (LH) or NULL: the run was not probed */
    size_t npairs, nacc;
    head_acc *ha;         /* (LH) */
    double *acc;          /* (nacc) the chunk accumulators summed in chunk order */
    int nrel;             /* relations; index nrel is "all" */
    char **rels;          /* (nrel + 1) */
    int64_t *tot;         /* (nrel + 1) instances */
    int64_t *cor;         /* (nrel + 1, 2, LH) correct */
    int64_t *base;        /* (nrel + 1, 2, HD_N_OFFSETS) baseline correct */
    double *synt;         /* (LH) syntactic score */
    const char **synrel;  /* (LH) its relation (borrowed from rels), or NULL */
    int *syndir;          /* (LH) its direction */
} fin;

static void fin_free(fin *f) {
    for (int i = 0; f->rels && i <= f->nrel; i++) free(f->rels[i]);
    free(f->rels);
    free(f->tot);
    free(f->cor);
    free(f->base);
    free(f->ha);
    free(f->acc);
    free(f->synt);
    free(f->synrel);
    free(f->syndir);
}

/* The run's shape and min_rel (from its params JSON). */
static as_status fin_load_run(fin *f, as_error *err) {
    store *st = f->st;
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare(st, "SELECT n_layer, n_head, d_head, params FROM runs WHERE id=?", &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, f->run);
    if (sqlite3_step(q) != SQLITE_ROW) {
        sqlite3_finalize(q);
        return as_err_set(err, AS_ERR_INPUT, "%s: no run %lld", st->path, (long long)f->run);
    }
    f->L = (int)store_get_int(q, "n_layer");
    f->H = (int)store_get_int(q, "n_head");
    f->Dh = (int)store_get_int(q, "d_head");
    f->min_rel = store_params_int(store_get_text(q, "params"), "min_rel", AN_DEFAULT_MIN_REL);
    sqlite3_finalize(q);
    if (!store_run_shape_ok(f->L, f->H) || f->Dh < 0 || f->Dh > AS_MAX_DMODEL)
        return as_err_set(err, AS_ERR_INPUT, "%s: run %lld has %d layers x %d heads of %d dims (0: imported), out of range",
                          st->path, (long long)f->run, f->L, f->H, f->Dh);
    f->LH = f->L * f->H;
    f->npairs = (size_t)f->LH * (size_t)(f->LH - 1) / 2;
    f->nacc = 1 + f->npairs + (size_t)f->LH * (size_t)(f->Dh + 1);
    f->ha = as_calloc((size_t)f->LH, sizeof *f->ha);
    f->acc = as_calloc(f->nacc, sizeof *f->acc);
    f->synt = as_calloc((size_t)f->LH, sizeof *f->synt);
    f->synrel = as_calloc((size_t)f->LH, sizeof *f->synrel);
    f->syndir = as_calloc((size_t)f->LH, sizeof *f->syndir);
    if (!f->ha || !f->acc || !f->synt || !f->synrel || !f->syndir) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    return AS_OK;
}

/* Per-head sums over sentences, in sentence order (deterministic sums). */
static as_status fin_read_heads(fin *f, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare(f->st,
                                 "SELECT h.layer, h.head, h.importance, h.semantic, h.cls, h.sep, h.punct, h.self, h.prev,"
                                 " h.next, h.entropy, h.entropy_norm, h.abl_token, h.abl_position, h.abl_segment, s.n_tokens, h.first,"
                                 " h.head_importance, h.sink_raw, h.sink_norm, h.alti"
                                 " FROM sentence_heads h JOIN sentences s ON s.run = h.run AND s.idx = h.sent"
                                 " WHERE h.run = ? ORDER BY h.sent, h.layer, h.head",
                                 &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, f->run);
    int r;
    while ((r = sqlite3_step(q)) == SQLITE_ROW) {
        int l = sqlite3_column_int(q, 0), h = sqlite3_column_int(q, 1);
        if (l < 0 || l >= f->L || h < 0 || h >= f->H) continue;
        head_acc *a = &f->ha[l * f->H + h];
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
        if (sqlite3_column_type(q, 16) != SQLITE_NULL) { /* NULL in the rows of schema version 2 */
            a->wfirst += npn;
            a->first += npn * sqlite3_column_double(q, 16);
        }
        if (sqlite3_column_type(q, 17) != SQLITE_NULL) { /* NULL: no backward, or schema version < 5 */
            a->gimp += sqlite3_column_double(q, 17);
            a->ngimp++;
        }
        if (sqlite3_column_type(q, 18) != SQLITE_NULL && sqlite3_column_type(q, 19) != SQLITE_NULL) {
            a->wsink += n;
            a->sraw += n * sqlite3_column_double(q, 18);
            a->snorm += n * sqlite3_column_double(q, 19);
        }
        if (sqlite3_column_type(q, 20) != SQLITE_NULL) {
            a->walti += n;
            a->alti += n * sqlite3_column_double(q, 20);
        }
        if (sqlite3_column_type(q, 12) != SQLITE_NULL) {
            a->ablw += n;
            for (int k = 0; k < 3; k++)
                a->abl[k] += sqlite3_column_type(q, 12 + k) == SQLITE_NULL ? NAN : n * sqlite3_column_double(q, 12 + k);
        }
    }
    sqlite3_finalize(q);
    if (r != SQLITE_DONE) return store_fail(f->st, "read sentence_heads", err);
    return AS_OK;
}

/* The chunk accumulators, summed in chunk order. */
static as_status fin_read_chunks(fin *f, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare(f->st, "SELECT acc FROM chunks WHERE run = ? ORDER BY idx", &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, f->run);
    while (sqlite3_step(q) == SQLITE_ROW) {
        const double *b = sqlite3_column_blob(q, 0);
        if ((size_t)sqlite3_column_bytes(q, 0) != f->nacc * sizeof(double)) {
            sqlite3_finalize(q);
            return as_err_set(err, AS_ERR_INPUT, "%s: run %lld has a chunk of the wrong size", f->st->path,
                              (long long)f->run);
        }
        for (size_t i = 0; i < f->nacc; i++) f->acc[i] += b[i];
    }
    sqlite3_finalize(q);
    return AS_OK;
}

/* Index of relation name among f's relations, or -1. */
static int fin_rel(const fin *f, const char *name) {
    int ri = -1;
    for (int i = 0; name && i < f->nrel; i++)
        if (!strcmp(f->rels[i], name)) ri = i;
    return ri;
}

/* Relations and their totals (in name order), then "all": every relation pooled (root
 * and punct are never counted). */
static as_status fin_read_totals(fin *f, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare(f->st, "SELECT relation, n FROM rel_totals WHERE run = ? ORDER BY relation", &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, f->run);
    int caprel = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        if (f->nrel + 1 >= caprel) {
            caprel = caprel ? caprel * 2 : 64;
            char **nr = realloc(f->rels, (size_t)caprel * sizeof *nr);
            if (nr) {
                f->rels = nr;
                for (int i = f->nrel; i < caprel; i++) nr[i] = NULL;
            }
            int64_t *nt = realloc(f->tot, (size_t)caprel * sizeof *nt);
            if (nt) f->tot = nt;
            if (!nr || !nt) {
                sqlite3_finalize(q);
                return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            }
        }
        f->rels[f->nrel] = as_strdup((const char *)sqlite3_column_text(q, 0));
        f->tot[f->nrel] = sqlite3_column_int64(q, 1);
        f->nrel++;
    }
    sqlite3_finalize(q);
    if (!f->rels) f->rels = as_calloc(1, sizeof *f->rels), f->tot = as_calloc(1, sizeof *f->tot);
    if (!f->rels || !f->tot) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    f->rels[f->nrel] = as_strdup("all");
    f->tot[f->nrel] = 0;
    for (int i = 0; i < f->nrel; i++) f->tot[f->nrel] += f->tot[i];
    return AS_OK;
}

/* The heads' correct counts and the baselines' per relation, direction (and "all"). */
static as_status fin_read_counts(fin *f, as_error *err) {
    const int NR = f->nrel + 1, LH = f->LH, nrel = f->nrel;
    f->cor = as_calloc((size_t)NR * 2 * LH, sizeof *f->cor);
    f->base = as_calloc((size_t)NR * 2 * HD_N_OFFSETS, sizeof *f->base);
    if (!f->cor || !f->base) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare(f->st, "SELECT relation, dir, layer, head, correct FROM rel_counts WHERE run = ?", &q, err);
    if (rc) return rc;
    sqlite3_bind_int64(q, 1, f->run);
    while (sqlite3_step(q) == SQLITE_ROW) {
        int ri = fin_rel(f, (const char *)sqlite3_column_text(q, 0));
        int d = sqlite3_column_int(q, 1), l = sqlite3_column_int(q, 2), h = sqlite3_column_int(q, 3);
        if (ri < 0 || d < 0 || d > 1 || l < 0 || l >= f->L || h < 0 || h >= f->H) continue;
        int64_t v = sqlite3_column_int64(q, 4);
        f->cor[((size_t)ri * 2 + d) * LH + l * f->H + h] += v;
        f->cor[((size_t)nrel * 2 + d) * LH + l * f->H + h] += v;
    }
    sqlite3_finalize(q);
    if ((rc = store_prepare(f->st, "SELECT relation, dir, offset, correct FROM baseline_counts WHERE run = ?", &q, err)))
        return rc;
    sqlite3_bind_int64(q, 1, f->run);
    while (sqlite3_step(q) == SQLITE_ROW) {
        int ri = fin_rel(f, (const char *)sqlite3_column_text(q, 0));
        int d = sqlite3_column_int(q, 1), off = sqlite3_column_int(q, 2), oi = -1;
        for (int o = 0; o < HD_N_OFFSETS; o++)
            if (HD_OFFSETS[o] == off) oi = o;
        if (ri < 0 || oi < 0 || d < 0 || d > 1) continue;
        int64_t v = sqlite3_column_int64(q, 3);
        f->base[((size_t)ri * 2 + d) * HD_N_OFFSETS + oi] += v;
        f->base[((size_t)nrel * 2 + d) * HD_N_OFFSETS + oi] += v;
    }
    sqlite3_finalize(q);
    return AS_OK;
}

/* rel_accuracy, and the syntactic score (Clark et al. 2019 sec. 4.2; Dodrio sec. 3.2): a
 * head's accuracy for (relation, direction) counts only when the relation has at least
 * min_rel instances and the accuracy beats the best fixed-offset baseline. */
static as_status fin_write_rel_accuracy(fin *f, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare_insert(f->st, "rel_accuracy", NULL, &q, err);
    if (rc) return rc;
    for (int ri = 0; ri <= f->nrel; ri++) {
        if (f->tot[ri] == 0) continue;
        for (int d = 0; d < 2; d++) {
            const int64_t *b = f->base + ((size_t)ri * 2 + d) * HD_N_OFFSETS;
            int bo = 0;
            for (int o = 1; o < HD_N_OFFSETS; o++)
                if (b[o] > b[bo]) bo = o;
            double bacc = (double)b[bo] / (double)f->tot[ri];
            for (int lh = 0; lh < f->LH; lh++) {
                int64_t k = f->cor[((size_t)ri * 2 + d) * f->LH + lh];
                double a = (double)k / (double)f->tot[ri];
                int counted = f->tot[ri] >= f->min_rel && a > bacc;
                if (counted && a > f->synt[lh]) {
                    f->synt[lh] = a;
                    f->synrel[lh] = f->rels[ri];
                    f->syndir[lh] = d;
                }
                store_set_int(q, "run", f->run);
                store_set_text(q, "relation", f->rels[ri]);
                store_set_int(q, "dir", d);
                store_set_int(q, "layer", lh / f->H);
                store_set_int(q, "head", lh % f->H);
                store_set_int(q, "n", f->tot[ri]);
                store_set_int(q, "correct", k);
                store_set_real(q, "accuracy", a);
                store_set_real(q, "baseline", bacc);
                store_set_int(q, "baseline_offset", HD_OFFSETS[bo]);
                store_set_int(q, "counted", counted);
                if ((rc = store_step_done(f->st, q, err))) goto done;
            }
        }
    }
done:
    sqlite3_finalize(q);
    return rc;
}

/* The pooled Clark statistics of one head. */
static void fin_stats(const head_acc *a, hd_stats *hs) {
    double w = a->w > 0 ? a->w : 1, wpn = a->wpn > 0 ? a->wpn : 1;
    memset(hs, 0, sizeof *hs);
    hs->cls = a->cls / w;
    hs->sep = a->sep / w;
    hs->punct = a->punct / w;
    hs->self = a->self / w;
    hs->prev = a->prev / wpn;
    hs->next = a->next / wpn;
    hs->entropy = a->ent / w;
    hs->entropy_norm = a->entn / w;
    hs->first = a->wfirst > 0 ? a->first / a->wfirst : 0.0;
}

/* Michel et al. 2019, sec. 4.2 (their code: head_importance / its l2 norm over each
 * layer's heads): gimp (LH) mean importance per head -> gnorm (LH) divided by the l2 norm
 * of its layer's; NaN where the importance is NaN or the layer's norm is 0. */
static void fin_layer_norm(const fin *f, const double *gimp, double *gnorm) {
    for (int l = 0; l < f->L; l++) {
        double s = 0.0;
        for (int h = 0; h < f->H; h++) s += gimp[l * f->H + h] * gimp[l * f->H + h];
        for (int h = 0; h < f->H; h++) gnorm[l * f->H + h] = s > 0.0 && !isnan(s) ? gimp[l * f->H + h] / sqrt(s) : NAN;
    }
}

static as_status fin_write_head_scores(fin *f, as_error *err) {
    static const char *names[] = {"cls", "sep", "punct", "self", "prev", "next", "entropy", "entropy_norm"};
    sqlite3_stmt *q = NULL;
    double *gimp = as_malloc_array((size_t)f->LH * 2, sizeof *gimp), *gnorm = gimp + f->LH;
    if (!gimp) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int lh = 0; lh < f->LH; lh++) gimp[lh] = f->ha[lh].ngimp ? f->ha[lh].gimp / f->ha[lh].ngimp : NAN;
    fin_layer_norm(f, gimp, gnorm);
    as_status rc = store_prepare_insert(f->st, "head_scores", NULL, &q, err);
    if (rc) {
        free(gimp);
        return rc;
    }
    for (int lh = 0; lh < f->LH; lh++) {
        const head_acc *a = &f->ha[lh];
        hd_stats hs;
        fin_stats(a, &hs);
        store_set_int(q, "run", f->run);
        store_set_int(q, "layer", lh / f->H);
        store_set_int(q, "head", lh % f->H);
        store_set_real(q, "importance", a->n ? a->imp / a->n : NAN);
        store_set_real(q, "semantic", a->nsem ? a->sem / a->nsem : NAN);
        store_set_real(q, "syntactic", f->synt[lh]);
        if (f->synrel[lh]) {
            store_set_text(q, "syntactic_relation", f->synrel[lh]);
            store_set_int(q, "syntactic_dir", f->syndir[lh]);
        }
        double v[] = {hs.cls, hs.sep, hs.punct, hs.self, hs.prev, hs.next, hs.entropy, hs.entropy_norm};
        for (int k = 0; k < 8; k++) store_set_real(q, names[k], a->n ? v[k] : NAN);
        store_set_int(q, "n_sentences", a->n);
        store_set_int(q, "n_semantic", a->nsem);
        store_set_real(q, "first", a->n && a->wfirst > 0 ? hs.first : NAN);
        store_set_real(q, "induction", f->induction ? f->induction[lh] : NAN);
        store_set_real(q, "head_importance", gimp[lh]);
        store_set_real(q, "head_importance_norm", gnorm[lh]);
        store_set_real(q, "norm_sink_ratio", a->wsink > 0 && a->sraw > 0 ? a->snorm / a->sraw : NAN);
        store_set_real(q, "alti_contribution", a->walti > 0 ? a->alti / a->walti : NAN);
        if ((rc = store_step_done(f->st, q, err))) break;
    }
    sqlite3_finalize(q);
    free(gimp);
    return rc;
}

/* patterns: the label of the pooled statistics, the concentration (lower median over
 * the defined links of the histogram) and the ablation changes. */
static as_status fin_write_patterns(fin *f, as_error *err) {
    static const char *comp[] = {"token", "position", "segment"};
    static const char *cols[] = {"abl_token", "abl_position", "abl_segment"};
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare_insert(f->st, "patterns", NULL, &q, err);
    if (rc) return rc;
    for (int lh = 0; lh < f->LH; lh++) {
        const head_acc *a = &f->ha[lh];
        hd_stats hs;
        fin_stats(a, &hs);
        double conf;
        hd_pattern p = hd_label(&hs, lh / f->H, f->induction ? f->induction[lh] : NAN, &conf);
        const double *hist = f->acc + 1 + f->npairs + (size_t)lh * (size_t)(f->Dh + 1);
        double nl = 0;
        for (int k = 1; k <= f->Dh; k++) nl += hist[k];
        int med = 0;
        double cum = 0;
        for (int k = 1; k <= f->Dh && nl > 0; k++) {
            cum += hist[k];
            if (cum >= (nl + 1) / 2) {
                med = k;
                break;
            }
        }
        store_set_int(q, "run", f->run);
        store_set_int(q, "layer", lh / f->H);
        store_set_int(q, "head", lh % f->H);
        store_set_text(q, "label", hd_pattern_name(p));
        store_set_real(q, "confidence", conf);
        if (med) store_set_int(q, "concentration", med);
        store_set_int(q, "n_links", (int64_t)nl);
        int best = -1;
        for (int k = 0; k < 3; k++) {
            double m = a->ablw > 0 ? a->abl[k] / a->ablw : NAN;
            store_set_real(q, cols[k], m);
            if (!isnan(m) && (best < 0 || m > a->abl[best] / a->ablw)) best = k;
        }
        if (best >= 0) store_set_text(q, "depends_on", comp[best]);
        if ((rc = store_step_done(f->st, q, err))) break;
    }
    sqlite3_finalize(q);
    return rc;
}

/* head_pairs: mean JSD per query row (Clark et al. 2019 sec. 6: their sum over tokens
 * divided by the number of rows). */
static as_status fin_write_head_pairs(fin *f, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = store_prepare_insert(f->st, "head_pairs", NULL, &q, err);
    if (rc) return rc;
    size_t p = 0;
    for (int a = 0; a < f->LH && !rc; a++)
        for (int b = a + 1; b < f->LH; b++, p++) {
            store_set_int(q, "run", f->run);
            store_set_int(q, "a_layer", a / f->H);
            store_set_int(q, "a_head", a % f->H);
            store_set_int(q, "b_layer", b / f->H);
            store_set_int(q, "b_head", b % f->H);
            store_set_real(q, "jsd", f->acc[0] > 0 ? f->acc[1 + p] / f->acc[0] : 0.0);
            if ((rc = store_step_done(f->st, q, err))) break;
        }
    sqlite3_finalize(q);
    return rc;
}

as_status an_finalize(store *st, int64_t run, const double *induction, as_error *err) {
    fin f;
    memset(&f, 0, sizeof f);
    f.st = st;
    f.run = run;
    f.induction = induction;
    as_status rc = fin_load_run(&f, err);
    if (rc) goto cleanup;
    if ((rc = store_exec(st, "BEGIN IMMEDIATE", err))) goto cleanup;
    char sql[512];
    static const char *res_tables[] = {"head_scores", "rel_accuracy", "head_pairs", "patterns"};
    for (int i = 0; i < 4 && !rc; i++) {
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE run=%lld", res_tables[i], (long long)run);
        rc = store_exec(st, sql, err);
    }
    if (!rc) rc = fin_read_heads(&f, err);
    if (!rc) rc = fin_read_chunks(&f, err);
    if (!rc) rc = fin_read_totals(&f, err);
    if (!rc) rc = fin_read_counts(&f, err);
    if (!rc) rc = fin_write_rel_accuracy(&f, err);
    if (!rc) rc = fin_write_head_scores(&f, err);
    if (!rc) rc = fin_write_patterns(&f, err);
    if (!rc) rc = fin_write_head_pairs(&f, err);
    if (!rc) {
        snprintf(sql, sizeof sql, "UPDATE runs SET status='done', finished=datetime('now') WHERE id=%lld", (long long)run);
        rc = store_exec(st, sql, err);
    }
    if (!rc) rc = store_exec(st, "COMMIT", err);
    if (rc) {
        as_error e2;
        store_exec(st, "ROLLBACK", &e2);
    }
cleanup:
    fin_free(&f);
    return rc;
}
