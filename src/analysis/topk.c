/* topk.c — sparse top-k attention for corpus analysis of long inputs: per layer, head and
 * query, the k strongest keys (index, weight) and the mass of every other key, computed
 * from rows recomputed from a run's captured queries and keys (as_run_attention_rows,
 * AN_TOPK_BLOCK rows at a time, so no T x T of a head is ever held), encoded as one BLOB
 * per (sentence, layer, head) of table topk (store.c; an encoder-decoder run's cross-attention:
 * table topk_cross, from its dense rows, an_topk_dense), and read back one query row at a
 * time, a whole sentence at once (the server's topk-all route) or pooled into the mean kept
 * mass per layer (`attnscope report`).
 * Row encoding (little-endian, AN_TOPK_ROW_BYTES(k) bytes per query, queries in order):
 * k int32 key indices, strongest first (ties: lower index first), k float32 weights,
 * then one float32 remaining mass (sum of the weights of the keys not listed). Keys of
 * weight 0 (masked: later keys of a causal model, padding, outside a window) are never
 * listed; unused slots hold index -1 and weight 0.
 * What it does not: run the forward (analyze.c) or write rows (records.c, chunks.c).
 */
#include "analysis/store.h"

#include <string.h>

/* Query rows recomputed per call of as_run_attention_rows: (AN_TOPK_BLOCK, T) floats. */
#define AN_TOPK_BLOCK 64

void an_topk_select(const float *row, int n, int k, int32_t *idx, float *w, float *rest) {
    int m = 0; /* slots filled, kept sorted by weight descending, index ascending */
    for (int j = 0; j < n; j++) {
        float x = row[j];
        if (!(x > 0.0f)) continue;
        if (m == k && x <= w[k - 1]) continue; /* equal weight: the earlier index stays */
        int p = m < k ? m++ : k - 1;
        while (p > 0 && w[p - 1] < x) {
            w[p] = w[p - 1];
            idx[p] = idx[p - 1];
            p--;
        }
        w[p] = x;
        idx[p] = j;
    }
    double kept = 0.0, all = 0.0;
    for (int s = 0; s < m; s++) kept += w[s];
    for (int j = 0; j < n; j++) all += row[j] > 0.0f ? row[j] : 0.0f;
    for (int s = m; s < k; s++) {
        idx[s] = -1;
        w[s] = 0.0f;
    }
    double r = all - kept;
    *rest = r > 0.0 ? (float)r : 0.0f;
}

/* Encodes one query row's selection at out (AN_TOPK_ROW_BYTES(k) bytes). */
static void row_encode(uint8_t *out, int k, const int32_t *idx, const float *w, float rest) {
    memcpy(out, idx, (size_t)k * 4);
    memcpy(out + (size_t)k * 4, w, (size_t)k * 4);
    memcpy(out + (size_t)k * 8, &rest, 4);
}

void an_topk_dense(const float *rows, int n_rows, int n_keys, int k, uint8_t *out) {
    int32_t idx[AN_TOPK_MAX];
    float w[AN_TOPK_MAX], rest;
    for (int i = 0; i < n_rows; i++) {
        an_topk_select(rows + (size_t)i * (size_t)n_keys, n_keys, k, idx, w, &rest);
        row_encode(out + (size_t)i * AN_TOPK_ROW_BYTES(k), k, idx, w, rest);
    }
}

as_status an_topk_head(const as_model *m, const as_run *r, int l, int h, int k, uint8_t *out, as_error *err) {
    if (k < 1 || k > AN_TOPK_MAX)
        return as_err_set(err, AS_ERR_INPUT, "top-k: k = %d, expected 1..%d", k, AN_TOPK_MAX);
    const int T = r->T;
    int B = T < AN_TOPK_BLOCK ? T : AN_TOPK_BLOCK;
    float *rows = as_malloc_array(as_mul_size((size_t)B, (size_t)T), sizeof *rows); /* (B, T) */
    int32_t idx[AN_TOPK_MAX];
    float w[AN_TOPK_MAX];
    if (!rows) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    as_status rc = AS_OK;
    for (int i0 = 0; i0 < T && !rc; i0 += B) {
        int i1 = i0 + B < T ? i0 + B : T;
        if ((rc = as_run_attention_rows(m, r, l, h, i0, i1, rows, err))) break;
        for (int i = i0; i < i1; i++) {
            float rest;
            an_topk_select(rows + (size_t)(i - i0) * T, T, k, idx, w, &rest);
            row_encode(out + (size_t)i * AN_TOPK_ROW_BYTES(k), k, idx, w, rest);
        }
    }
    free(rows);
    return rc;
}

/* ---- reading ------------------------------------------------------------------------- */

/* The table of kind's rows, its keys-per-row column, and what stores them. */
static const char *topk_table(an_topk_kind kind) { return kind == AN_TOPK_CROSS ? "topk_cross" : "topk"; }
static const char *topk_keys_col(an_topk_kind kind) { return kind == AN_TOPK_CROSS ? "n_key" : "n_query"; }
static const char *topk_how(an_topk_kind kind) {
    return kind == AN_TOPK_CROSS ? "analyze it with --source, --target and --topk" : "analyze it with --topk";
}

/* Checks a stored head's k, n_query and BLOB size; code (naming the row) when damaged. */
static as_status check_blob(as_status code, const char *path, int64_t run, int64_t sent, int l, int h, int64_t k,
                            int64_t nq, int64_t nk, int bytes, as_error *err) {
    if (k < 1 || k > AN_TOPK_MAX || nq < 1 || nq > AS_MAX_POSITIONS || nk < 1 || nk > AS_MAX_POSITIONS || bytes < 0 ||
        (int64_t)bytes != nq * (int64_t)AN_TOPK_ROW_BYTES(k))
        return as_err_set(err, code,
                          "%s: run %lld sentence %lld layer %d head %d: top-k row of k = %lld, %lld queries and %d bytes "
                          "(damaged database?)",
                          path, (long long)run, (long long)sent, l, h, (long long)k, (long long)nq, bytes);
    return AS_OK;
}

as_status store_topk_row(sqlite3 *db, const char *path, an_topk_kind kind, int64_t run, int64_t sent, int layer,
                         int head, int query, an_topk_row *out, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = AS_OK;
    char sql[160];
    memset(out, 0, sizeof *out);
    snprintf(sql, sizeof sql, "SELECT k, n_query, %s, rows FROM %s WHERE run=?1 AND sent=?2 AND layer=?3 AND head=?4",
             topk_keys_col(kind), topk_table(kind));
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
        goto cleanup;
    }
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_int64(q, 2, sent);
    sqlite3_bind_int(q, 3, layer);
    sqlite3_bind_int(q, 4, head);
    int s = sqlite3_step(q);
    if (s == SQLITE_DONE) {
        rc = as_err_set(err, AS_ERR_INPUT, "run %lld has no %stop-k row for sentence %lld layer %d head %d (%s)",
                        (long long)run, kind == AN_TOPK_CROSS ? "cross-attention " : "", (long long)sent, layer, head,
                        topk_how(kind));
        goto cleanup;
    }
    if (s != SQLITE_ROW) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
        goto cleanup;
    }
    int64_t k = sqlite3_column_int64(q, 0), nq = sqlite3_column_int64(q, 1), nk = sqlite3_column_int64(q, 2);
    const uint8_t *b = sqlite3_column_blob(q, 3);
    int bytes = sqlite3_column_bytes(q, 3);
    if ((rc = check_blob(AS_ERR_INTERNAL, path, run, sent, layer, head, k, nq, nk, b ? bytes : -1, err))) goto cleanup;
    if (query < 0 || query >= nq) {
        rc = as_err_set(err, AS_ERR_INPUT, "query %d is outside the sentence's %lld tokens", query, (long long)nq);
        goto cleanup;
    }
    out->k = (int)k;
    out->n_query = (int)nq;
    out->n_key = (int)nk;
    out->query = query;
    const uint8_t *p = b + (size_t)query * AN_TOPK_ROW_BYTES(k);
    memcpy(out->index, p, (size_t)k * 4);
    memcpy(out->weight, p + (size_t)k * 4, (size_t)k * 4);
    memcpy(&out->rest, p + (size_t)k * 8, 4);
    for (int s2 = 0; s2 < k; s2++)
        if (out->index[s2] < -1 || out->index[s2] >= nk) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "%s: run %lld sentence %lld layer %d head %d: key index %d out of range "
                            "(damaged database?)", path, (long long)run, (long long)sent, layer, head, out->index[s2]);
            goto cleanup;
        }
cleanup:
    sqlite3_finalize(q);
    return rc;
}

as_status store_topk_mass(sqlite3 *db, const char *path, int64_t run, int n_layer, int n_head, int *k_out,
                          double *mass, int64_t *n_rows, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = AS_OK;
    int K = 0, s;
    *k_out = 0;
    memset(mass, 0, sizeof *mass * (size_t)n_layer * AN_TOPK_MAX);
    memset(n_rows, 0, sizeof *n_rows * (size_t)n_layer);
    if (sqlite3_prepare_v2(db, "SELECT sent, layer, head, k, n_query, rows FROM topk WHERE run=?1", -1, &q, NULL) !=
        SQLITE_OK) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
        goto cleanup;
    }
    sqlite3_bind_int64(q, 1, run);
    while ((s = sqlite3_step(q)) == SQLITE_ROW) {
        int l = store_column_index(q, 1, n_layer), h = store_column_index(q, 2, n_head);
        int64_t k = sqlite3_column_int64(q, 3), nq = sqlite3_column_int64(q, 4);
        const uint8_t *b = sqlite3_column_blob(q, 5);
        int bytes = sqlite3_column_bytes(q, 5);
        if (l < 0 || h < 0 || (K && k != K)) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: run %lld: a top-k row has a layer, head or k outside the run "
                            "(damaged database?)", path, (long long)run);
            goto cleanup;
        }
        if ((rc = check_blob(AS_ERR_INPUT, path, run, sqlite3_column_int64(q, 0), l, h, k, nq, nq, b ? bytes : -1, err)))
            goto cleanup;
        K = (int)k;
        for (int64_t i = 0; i < nq; i++) {
            const uint8_t *p = b + (size_t)i * AN_TOPK_ROW_BYTES(K) + (size_t)K * 4;
            double cum = 0.0;
            for (int j = 0; j < K; j++) {
                float w;
                memcpy(&w, p + (size_t)j * 4, 4);
                cum += w;
                mass[(size_t)l * AN_TOPK_MAX + j] += cum;
            }
        }
        n_rows[l] += nq;
    }
    if (s != SQLITE_DONE) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
        goto cleanup;
    }
    for (int l = 0; l < n_layer; l++)
        for (int j = 0; j < K; j++)
            if (n_rows[l]) mass[(size_t)l * AN_TOPK_MAX + j] /= (double)n_rows[l];
    *k_out = K;
cleanup:
    sqlite3_finalize(q);
    return rc;
}

/* Decodes one stored head (nq rows of k) into s at (l, h), checking its key indices. */
static as_status topk_decode_head(an_topk_sentence *s, int l, int h, const uint8_t *b, const char *path, int64_t run,
                                  int64_t sent, as_error *err) {
    int k = s->k, nq = s->n_query;
    size_t base = ((size_t)l * s->H + h) * (size_t)nq;
    for (int i = 0; i < nq; i++) {
        const uint8_t *p = b + (size_t)i * AN_TOPK_ROW_BYTES(k);
        int32_t *ix = s->index + (base + i) * k;
        memcpy(ix, p, (size_t)k * 4);
        memcpy(s->weight + (base + i) * k, p + (size_t)k * 4, (size_t)k * 4);
        memcpy(s->rest + base + i, p + (size_t)k * 8, 4);
        for (int j = 0; j < k; j++)
            if (ix[j] < -1 || ix[j] >= s->n_key)
                return as_err_set(err, AS_ERR_INTERNAL, "%s: run %lld sentence %lld layer %d head %d: key index %d out "
                                  "of range (damaged database?)", path, (long long)run, (long long)sent, l, h, ix[j]);
    }
    return AS_OK;
}

as_status store_topk_sentence(sqlite3 *db, const char *path, an_topk_kind kind, int64_t run, int64_t sent,
                              int n_layer, int n_head, size_t max_entries, an_topk_sentence *out, as_error *err) {
    sqlite3_stmt *q = NULL;
    as_status rc = AS_OK;
    int s, n = 0;
    char sql[160];
    memset(out, 0, sizeof *out);
    out->L = n_layer;
    out->H = n_head;
    snprintf(sql, sizeof sql, "SELECT layer, head, k, n_query, %s, rows FROM %s WHERE run=?1 AND sent=?2",
             topk_keys_col(kind), topk_table(kind));
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
        goto cleanup;
    }
    sqlite3_bind_int64(q, 1, run);
    sqlite3_bind_int64(q, 2, sent);
    while ((s = sqlite3_step(q)) == SQLITE_ROW) {
        int l = store_column_index(q, 0, n_layer), h = store_column_index(q, 1, n_head);
        int64_t k = sqlite3_column_int64(q, 2), nq = sqlite3_column_int64(q, 3), nk = sqlite3_column_int64(q, 4);
        const uint8_t *b = sqlite3_column_blob(q, 5);
        if ((rc = check_blob(AS_ERR_INTERNAL, path, run, sent, l, h, k, nq, nk, b ? sqlite3_column_bytes(q, 5) : -1,
                             err)))
            goto cleanup;
        if (l < 0 || h < 0 || (n && (k != out->k || nq != out->n_query || nk != out->n_key))) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "%s: run %lld sentence %lld: a top-k row has a layer, head, k or "
                            "token count outside the run's (damaged database?)", path, (long long)run, (long long)sent);
            goto cleanup;
        }
        if (!n++) {
            out->k = (int)k;
            out->n_query = (int)nq;
            out->n_key = (int)nk;
            size_t rows = as_mul_size(as_mul_size((size_t)n_layer, (size_t)n_head), (size_t)nq);
            if (as_mul_size(rows, (size_t)k) > max_entries) {
                rc = as_err_set(err, AS_ERR_INPUT, "run %lld sentence %lld: %d layers x %d heads x %lld queries x k = "
                                "%lld top-k entries, over the %zu of one read", (long long)run, (long long)sent, n_layer,
                                n_head, (long long)nq, (long long)k, max_entries);
                goto cleanup;
            }
            out->index = as_malloc_array(rows * (size_t)k, sizeof *out->index);
            out->weight = as_calloc(rows * (size_t)k, sizeof *out->weight);
            out->rest = as_calloc(rows, sizeof *out->rest);
            if (!out->index || !out->weight || !out->rest) {
                rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
                goto cleanup;
            }
        }
        if ((rc = topk_decode_head(out, l, h, b, path, run, sent, err))) goto cleanup;
    }
    if (s != SQLITE_DONE) rc = as_err_set(err, AS_ERR_INTERNAL, "%s: %s", path, sqlite3_errmsg(db));
    else if (!n)
        rc = as_err_set(err, AS_ERR_INPUT, "run %lld has no %stop-k rows for sentence %lld (%s)", (long long)run,
                        kind == AN_TOPK_CROSS ? "cross-attention " : "", (long long)sent, topk_how(kind));
    else if (n != n_layer * n_head)
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: run %lld sentence %lld: %d top-k heads stored of %d (damaged "
                        "database?)", path, (long long)run, (long long)sent, n, n_layer * n_head);
cleanup:
    sqlite3_finalize(q);
    if (rc) an_topk_sentence_free(out);
    return rc;
}

void an_topk_sentence_free(an_topk_sentence *s) {
    if (!s) return;
    free(s->index);
    free(s->weight);
    free(s->rest);
    memset(s, 0, sizeof *s);
}
