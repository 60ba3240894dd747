/* records.c — per-sentence records of the corpus runner: a sentence is scored into a
 * self-contained record (an_rec_build: rows for sentences, tokens, words, saliency and
 * sentence_heads, the sentence's share of the chunk accumulators and its syntactic
 * counts), which an_rec_apply then writes and adds to the chunk. A single process does
 * both in turn; under MPI each rank builds the records of its sentences and rank 0
 * applies all of them in sentence order, so the two produce the same database bit for
 * bit (same values, same summation order). Formulas and sources: heads.h / heads.c.
 * What it does not: transactions and chunk rows (chunks.c), the loop (drive.c).
 */
#include "analysis/runner_internal.h"
#include "core/pool.h"

#include <math.h>
#include <string.h>

#define REC_NHEAD 18 /* per-head values: importance, semantic, 8 statistics, 3 ablations, first-token mass,
                        gradient head importance, raw and norm-weighted sink mass, ALTI share */

/* The sentence_heads columns of the REC_NHEAD per-head values, in record order. */
static const char *const REC_HEAD_COLS[REC_NHEAD] = {"importance", "semantic", "cls", "sep", "punct",
                                                     "self", "prev", "next", "entropy", "entropy_norm",
                                                     "abl_token", "abl_position", "abl_segment", "first",
                                                     "head_importance", "sink_raw", "sink_norm", "alti"};

/* ---- the byte buffer ------------------------------------------------------------------ */

void an_rb_reset(rec_buf *r) {
    r->n = 0;
    r->oom = 0;
}

void an_rb_free(rec_buf *r) {
    free(r->b);
    memset(r, 0, sizeof *r);
}

int an_rb_reserve(rec_buf *r, size_t need) {
    if (r->oom) return 0;
    if (need <= r->cap) return 1;
    size_t nc = r->cap ? r->cap : 4096;
    while (nc < need) nc *= 2;
    uint8_t *nb = realloc(r->b, nc);
    if (!nb) {
        r->oom = 1;
        return 0;
    }
    r->b = nb;
    r->cap = nc;
    return 1;
}

static void rb_put(rec_buf *r, const void *p, size_t n) {
    if (!an_rb_reserve(r, r->n + n)) return;
    if (n) memcpy(r->b + r->n, p, n);
    r->n += n;
}

/* Arrays of 8-byte values start at multiples of 8 (the buffer itself is malloc'd). */
static void rb_align8(rec_buf *r) {
    static const uint8_t zero[8] = {0};
    rb_put(r, zero, (8 - r->n % 8) % 8);
}

static void rb_i32(rec_buf *r, int32_t v) { rb_put(r, &v, sizeof v); }

static void rb_str(rec_buf *r, const char *s) {
    int32_t l = s ? (int32_t)strlen(s) : -1;
    rb_i32(r, l);
    if (s) rb_put(r, s, (size_t)l + 1);
}

typedef struct {
    const uint8_t *p, *e, *base;
    int bad;
} rec_rd;

static const void *rr_take(rec_rd *r, size_t n) {
    if (r->bad || (size_t)(r->e - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    const void *q = r->p;
    r->p += n;
    return q;
}

static int32_t rr_i32(rec_rd *r) {
    int32_t v = 0;
    const void *q = rr_take(r, sizeof v);
    if (q) memcpy(&v, q, sizeof v);
    return v;
}

static const char *rr_str(rec_rd *r) {
    int32_t l = rr_i32(r);
    if (l < 0) return NULL;
    const char *s = rr_take(r, (size_t)l + 1);
    if (s && s[l] != 0) r->bad = 1;
    return r->bad ? "" : s;
}

static const void *rr_arr8(rec_rd *r, size_t n) {
    rr_take(r, (size_t)((8 - (size_t)(r->p - r->base) % 8) % 8));
    return rr_take(r, n * 8);
}

void an_rec_error(rec_buf *r, int idx, as_status code, const char *msg) {
    an_rb_reset(r);
    rb_i32(r, AN_REC_MAGIC);
    rb_i32(r, (int32_t)code);
    rb_i32(r, idx);
    rb_str(r, msg);
}

/* ---- scoring a sentence into a record ---------------------------------------------- */

/* Relations left out of the syntactic score (Clark et al. 2019 sec. 4.2). */
static int rel_excluded(const char *r) {
    return !strcmp(r, "root") || !strcmp(r, "punct") || !strncmp(r, "punct:", 6) || !strncmp(r, "root:", 5);
}

static const char *kind_name(int k) {
    static const char *n[] = {"word", "cls", "sep", "punct", "pad"};
    return k >= 0 && k <= HK_PAD ? n[k] : "?";
}

/* Grows c's word scratch to W words. */
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

/* Header, text, token, word and saliency rows. hdr: see an_rec_build. */
static void rec_put_rows(const an_sent *s, const int32_t *hdr, size_t nhdr, rec_buf *r) {
    const int T = s->T, W = s->W;
    for (size_t i = 0; i < nhdr; i++) rb_i32(r, hdr[i]);
    rb_str(r, s->corpus);
    rb_str(r, s->source);
    rb_str(r, s->text);
    for (int t = 0; t < T; t++) {
        rb_str(r, s->tok_text[t] ? s->tok_text[t] : "");
        int has = s->start && s->start[t] >= 0;
        rb_i32(r, has ? s->start[t] : -1);
        rb_i32(r, has ? s->end[t] : -1);
        rb_i32(r, s->kind[t]);
        rb_i32(r, W && s->word[t] >= 0 ? s->word[t] : -1);
    }
    for (int w = 0; w < W; w++) {
        rb_str(r, s->word_form[w]);
        rb_i32(r, s->parent[w]);
        rb_str(r, s->parent[w] >= -1 ? s->rel[w] : NULL);
    }
    if (s->sal_all) {
        size_t n = (size_t)s->n_sal_cls * T;
        rb_align8(r);
        for (size_t i = 0; i < n; i++) {
            double v = s->sal_all[i];
            rb_put(r, &v, sizeof v);
        }
    }
}

/* Sink mass of one head on one sentence (docs/analysis.md, "Head importance, sink ratio
 * and ALTI share"): the mean over real query rows i of the attention on the sink keys S =
 * {the first token, [CLS], [SEP] / </s>} (raw: A[i,j]; norm-weighted: A[i,j] ||f(x_j)||
 * renormalised over the row's real keys, Kobayashi et al. 2020, sec. 4). fnorm: (T)
 * ||f(x_j)||, or NULL (then *norm is NaN). */
static void sink_mass(const float *A, const float *fnorm, int T, const uint8_t *kind, double *raw, double *norm) {
    double sr = 0.0, sn = 0.0;
    int n = 0;
    for (int i = 0; i < T; i++) {
        if (kind[i] == HK_PAD) continue;
        const float *row = A + (size_t)i * T;
        double r = 0.0, num = 0.0, den = 0.0;
        for (int j = 0; j < T; j++) {
            if (kind[j] == HK_PAD) continue;
            const int sink = j == 0 || kind[j] == HK_CLS || kind[j] == HK_SEP;
            if (sink) r += row[j];
            if (!fnorm) continue;
            double w = (double)row[j] * fnorm[j];
            den += w;
            if (sink) num += w;
        }
        sr += r;
        if (den > 0.0) sn += num / den;
        n++;
    }
    *raw = n ? sr / n : NAN;
    *norm = fnorm && n ? sn / n : NAN;
}

/* Mean over real query rows of share (T), or NaN when share is NULL. */
static double row_mean(const float *share, int T, const uint8_t *kind) {
    if (!share) return NAN;
    double s = 0.0;
    int n = 0;
    for (int i = 0; i < T; i++)
        if (kind[i] != HK_PAD) s += share[i], n++;
    return n ? s / n : NAN;
}

/* Per head: importance, semantic, Clark statistics, ablation change, first-token mass,
 * gradient head importance, sink masses and ALTI share (REC_NHEAD values). */
static void rec_put_heads(const an_ctx *c, const an_sent *s, rec_buf *r) {
    const int T = s->T;
    const size_t TT = (size_t)T * T;
    rb_align8(r);
    for (int lh = 0; lh < c->LH; lh++) {
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
        double sraw, snorm;
        sink_mass(A, s->fnorm ? s->fnorm + (size_t)lh * T : NULL, T, s->kind, &sraw, &snorm);
        double v[REC_NHEAD] = {hd_importance(A, T, s->kind), s->sal ? hd_semantic(A, T, s->kind, s->sal) : NAN,
                               hs.cls, hs.sep, hs.punct, hs.self, hs.prev, hs.next, hs.entropy, hs.entropy_norm,
                               abl[0], abl[1], abl[2], hs.first, s->head_imp ? s->head_imp[lh] : NAN,
                               s->fnorm ? sraw : NAN, snorm,
                               row_mean(s->alti_share ? s->alti_share + (size_t)lh * T : NULL, T, s->kind)};
        rb_put(r, v, sizeof v);
    }
}

/* Bytes of one block of query rows' transposed attention (rows of T x AN_JSD_LD(LH)
 * floats); a block holds at least one row. */
#define PAIRS_BLOCK_BYTES (8u << 20)

typedef struct {
    const an_ctx *c;
    const an_sent *s;
    const double *hrow; /* (LH, T) each row's own entropy */
    double *js;
    const float *at;    /* (n, T, ld) the block's rows transposed */
    int i0, n, ld;
    double *hm;         /* (threads, ld) per-thread mixture entropies */
} pairs_job;

/* The pairs (a, b > a) of head a over the block's query rows, in row order. */
static void pairs_task(void *ctx, int a, int tid) {
    const pairs_job *j = ctx;
    const an_sent *s = j->s;
    const int T = s->T, LH = j->c->LH, ld = j->ld;
    size_t p0 = (size_t)a * (size_t)(2 * LH - a - 1) / 2; /* pairs (a', b) with a' < a come first */
    double *hm = j->hm + (size_t)tid * ld;
    for (int r = 0; r < j->n; r++) {
        const int i = j->i0 + r;
        if (s->kind[i] == HK_PAD) continue;
        an_jsd_mix_rows(j->at + (size_t)r * T * ld, T, ld, a, LH, hm);
        const double ha = j->hrow[(size_t)a * T + i];
        for (int b = a + 1; b < LH; b++) {
            double d = hm[b] - 0.5 * (ha + j->hrow[(size_t)b * T + i]);
            j->js[1 + p0 + (size_t)(b - a - 1)] += d < 0.0 ? 0.0 : d;
        }
    }
}

/* Query rows and the head-pair Jensen-Shannon divergence summed over query rows (Clark
 * et al. 2019 sec. 6) into js (1 + npairs), zeroed by the caller. Each row's own
 * entropy once (double, as hd_jsd), then per pair only the entropy of the mixture
 * (an_jsd_mix_rows, on the rows transposed so that the heads lie side by side), blocks
 * of query rows in order, heads as tasks of the thread pool (c->threads): each pair's
 * sum is in row order whatever the thread count. */
static as_status rec_pairs(const an_ctx *c, const an_sent *s, double *js, as_error *err) {
    const int T = s->T, LH = c->LH, ld = AN_JSD_LD(LH);
    const int threads = c->threads > 0 ? c->threads : as_n_cores();
    const size_t TT = (size_t)T * T, row = (size_t)T * ld;
    for (int i = 0; i < T; i++) js[0] += s->kind[i] != HK_PAD;
    size_t fit = PAIRS_BLOCK_BYTES / (row * sizeof(float));
    int nb = fit < 1 ? 1 : fit > (size_t)T ? T : (int)fit;
    double *hrow = as_malloc_array(as_mul_size((size_t)LH, (size_t)T), sizeof *hrow);
    float *at = as_calloc(as_mul_size((size_t)nb, row), sizeof *at); /* columns LH .. ld - 1 stay 0 */
    double *hm = as_malloc_array(as_mul_size((size_t)threads, (size_t)ld), sizeof *hm);
    if (!hrow || !at || !hm) {
        free(hrow);
        free(at);
        free(hm);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    for (int lh = 0; lh < LH; lh++)
        for (int i = 0; i < T; i++) {
            const float *x = s->attn + (size_t)lh * TT + (size_t)i * T;
            double h = 0.0;
            for (int j = 0; j < T; j++) {
                double v = x[j] > 0.0f ? x[j] : 0.0;
                if (v > 0.0) h -= v * log2(v);
            }
            hrow[(size_t)lh * T + i] = h;
        }
    for (int i0 = 0; i0 < T; i0 += nb) {
        int n = T - i0 < nb ? T - i0 : nb;
        for (int r = 0; r < n; r++)
            for (int lh = 0; lh < LH; lh++) {
                const float *x = s->attn + (size_t)lh * TT + (size_t)(i0 + r) * T;
                float *dst = at + (size_t)r * row + lh;
                for (int j = 0; j < T; j++) dst[(size_t)j * ld] = x[j];
            }
        pairs_job job = {c, s, hrow, js, at, i0, n, ld, hm};
        as_parallel_for(LH, threads, pairs_task, &job);
    }
    free(hrow);
    free(at);
    free(hm);
    return AS_OK;
}

/* Concentration of each row's dominant link (argmax key) into hist (LH, Dh + 1), zeroed
 * by the caller. */
static void rec_hist(const an_ctx *c, const an_sent *s, double *hist) {
    const int T = s->T;
    const size_t TT = (size_t)T * T;
    for (int lh = 0; lh < c->LH; lh++) {
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

/* Syntactic counts (Clark et al. 2019 sec. 4.2, both directions) and baselines, per
 * relation in order of first appearance: int32 count, then per relation its name and
 * (1 + 2 * HD_N_OFFSETS + 2 * LH) int64: total, baselines, correct. */
static as_status rec_put_syntax(an_ctx *c, const an_sent *s, rec_buf *r, as_error *err) {
    const int T = s->T, LH = c->LH, W = s->W;
    const size_t TT = (size_t)T * T;
    as_status rc = AS_OK;
    int nr = 0, *rid = NULL;
    const char **rn = NULL;
    int64_t *cnt = NULL; /* (nr, per) */
    const size_t per = 1 + 2 * HD_N_OFFSETS + 2 * (size_t)LH;
    if (W > 0) {
        if ((rc = ensure_words(c, W, err))) return rc;
        memset(c->has_piece, 0, (size_t)W);
        for (int t = 0; t < T; t++)
            if (s->word[t] >= 0) c->has_piece[s->word[t]] = 1;
        rid = as_malloc_array((size_t)W, sizeof *rid);
        rn = as_malloc_array((size_t)W, sizeof *rn);
        if (!rid || !rn) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        for (int d = 0; d < W; d++) {
            int p = s->parent[d];
            rid[d] = -1;
            if (p < 0 || !c->has_piece[d] || !c->has_piece[p] || rel_excluded(s->rel[d])) continue;
            for (int k = 0; k < nr && rid[d] < 0; k++)
                if (!strcmp(rn[k], s->rel[d])) rid[d] = k;
            if (rid[d] < 0) rn[rid[d] = nr++] = s->rel[d];
        }
        if (nr && !(cnt = as_calloc(as_mul_size((size_t)nr, per), sizeof *cnt))) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        for (int d = 0; d < W; d++) {
            int k = rid[d], p = s->parent[d];
            if (k < 0) continue;
            int64_t *e = cnt + (size_t)k * per;
            e[0]++;
            for (int o = 0; o < HD_N_OFFSETS; o++) {
                e[1 + o] += d + HD_OFFSETS[o] == p;
                e[1 + HD_N_OFFSETS + o] += p + HD_OFFSETS[o] == d;
            }
        }
        for (int lh = 0; nr && lh < LH; lh++) {
            hd_word_attention(s->attn + (size_t)lh * TT, T, s->word, W, c->Wm);
            for (int w = 0; w < W; w++) c->pred[w] = c->has_piece[w] ? hd_word_argmax(c->Wm, W, w, c->has_piece) : -1;
            for (int d = 0; d < W; d++) {
                int k = rid[d], p = s->parent[d];
                if (k < 0) continue;
                int64_t *e = cnt + (size_t)k * per + 1 + 2 * HD_N_OFFSETS;
                e[lh] += c->pred[d] == p;
                e[LH + lh] += c->pred[p] == d;
            }
        }
    }
    rb_i32(r, nr);
    for (int k = 0; k < nr; k++) {
        rb_str(r, rn[k]);
        rb_align8(r);
        rb_put(r, cnt + (size_t)k * per, per * sizeof *cnt);
    }
cleanup:
    free(rid);
    free(rn);
    free(cnt);
    return rc;
}

as_status an_rec_build(an_ctx *c, int idx, const an_sent *s, rec_buf *r, as_error *err) {
    an_rb_reset(r);
    rb_i32(r, AN_REC_MAGIC);
    rb_i32(r, 0);
    rb_i32(r, idx);
    int32_t hdr[] = {s->T, s->W, s->label, s->predicted, s->truncated, s->abl[0] || s->q ? 1 : 0,
                     s->sal_all ? s->n_sal_cls : 0, s->sal_first_class, s->q && s->k && c->Dh > 0};
    rec_put_rows(s, hdr, sizeof hdr / sizeof *hdr, r);
    rec_put_heads(c, s, r);
    /* the chunk accumulators: [rows | pair JSD sums | concentration histogram] */
    size_t npre = 1 + c->npairs, nhist = hdr[8] ? (size_t)c->LH * (size_t)(c->Dh + 1) : 0;
    if (!an_rb_reserve(r, r->n + 8 * (npre + nhist))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    double *acc = (double *)(void *)(r->b + r->n);
    memset(acc, 0, 8 * (npre + nhist));
    r->n += 8 * (npre + nhist);
    as_status rc = rec_pairs(c, s, acc, err);
    if (rc) return rc;
    if (nhist) rec_hist(c, s, acc + npre);
    if ((rc = rec_put_syntax(c, s, r, err))) return rc;
    /* the top-k rows: k, then (L, H, T) rows of AN_TOPK_ROW_BYTES(k) bytes */
    rb_i32(r, s->topk ? s->topk_k : 0);
    if (s->topk) rb_put(r, s->topk, (size_t)c->LH * (size_t)s->T * AN_TOPK_ROW_BYTES(s->topk_k));
    if (r->oom) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    return AS_OK;
}

/* ---- applying a record -------------------------------------------------------------- */

/* The record's fixed header (after magic, status and index). */
typedef struct {
    int idx, T, W, label, predicted, truncated, explained, ncls, first_cls, has_hist;
    const char *corpus, *source, *text;
} rec_head;

/* Writes the sentences, tokens, words and saliency rows of the record read by r. */
static as_status apply_rows(an_ctx *c, const rec_head *h, rec_rd *r, as_error *err) {
    store *st = c->st;
    const int idx = h->idx, T = h->T;
    as_status rc;
    sqlite3_stmt *q = c->ins_sent;
    store_set_int(q, "run", c->run);
    store_set_int(q, "idx", idx);
    store_set_text(q, "corpus", h->corpus);
    store_set_text(q, "source", h->source);
    store_set_text(q, "text", h->text);
    if (h->label >= 0) store_set_int(q, "label", h->label);
    if (h->predicted >= 0) store_set_int(q, "predicted", h->predicted);
    store_set_int(q, "n_tokens", T);
    store_set_int(q, "n_words", h->W);
    store_set_int(q, "truncated", h->truncated);
    store_set_int(q, "explained", h->explained);
    if ((rc = store_step_done(st, q, err))) return rc;
    for (int t = 0; t < T; t++) {
        const char *tx = rr_str(r);
        int start = rr_i32(r), end = rr_i32(r), kind = rr_i32(r), word = rr_i32(r);
        q = c->ins_tok;
        store_set_int(q, "run", c->run);
        store_set_int(q, "sent", idx);
        store_set_int(q, "pos", t);
        store_set_text(q, "text", tx);
        if (start >= 0) {
            store_set_int(q, "start", start);
            store_set_int(q, "end", end);
        }
        store_set_text(q, "kind", kind_name(kind));
        if (word >= 0) store_set_int(q, "word", word);
        if ((rc = store_step_done(st, q, err))) return rc;
    }
    for (int w = 0; w < h->W; w++) {
        const char *form = rr_str(r);
        int parent = rr_i32(r);
        const char *rel = rr_str(r);
        q = c->ins_word;
        store_set_int(q, "run", c->run);
        store_set_int(q, "sent", idx);
        store_set_int(q, "idx", w);
        store_set_text(q, "form", form);
        if (rel) {
            store_set_int(q, "head", parent);
            store_set_text(q, "deprel", rel);
        }
        if ((rc = store_step_done(st, q, err))) return rc;
    }
    if (h->ncls) {
        const double *sal = rr_arr8(r, (size_t)h->ncls * T);
        for (int k = 0; sal && k < h->ncls; k++)
            for (int t = 0; t < T; t++) {
                q = c->ins_sal;
                store_set_int(q, "run", c->run);
                store_set_int(q, "sent", idx);
                store_set_int(q, "class", h->first_cls + k);
                store_set_int(q, "pos", t);
                store_set_real(q, "value", sal[(size_t)k * T + t]);
                if ((rc = store_step_done(st, q, err))) return rc;
            }
    }
    return AS_OK;
}

/* Writes the sentence_heads rows and adds the accumulators and syntactic counts of the
 * record read by r to the open chunk. */
static as_status apply_heads_counts(an_ctx *c, const rec_head *h, rec_rd *r, as_error *err) {
    const int LH = c->LH;
    as_status rc;
    const double *hv = rr_arr8(r, (size_t)LH * REC_NHEAD);
    for (int lh = 0; hv && lh < LH; lh++) {
        const double *v = hv + (size_t)lh * REC_NHEAD;
        sqlite3_stmt *q = c->ins_sh;
        store_set_int(q, "run", c->run);
        store_set_int(q, "sent", h->idx);
        store_set_int(q, "layer", lh / c->H);
        store_set_int(q, "head", lh % c->H);
        for (int k = 0; k < REC_NHEAD; k++) store_set_real(q, REC_HEAD_COLS[k], v[k]);
        if ((rc = store_step_done(c->st, q, err))) return rc;
    }
    const size_t npre = 1 + c->npairs, nhist = (size_t)LH * (size_t)(c->Dh + 1);
    const double *js = rr_arr8(r, npre);
    for (size_t i = 0; js && i < npre; i++) c->acc[i] += js[i];
    if (h->has_hist) {
        const double *hist = rr_arr8(r, nhist);
        for (size_t i = 0; hist && i < nhist; i++) c->acc[npre + i] += hist[i];
    }
    int nr = rr_i32(r);
    const size_t per = 1 + 2 * HD_N_OFFSETS + 2 * (size_t)LH;
    for (int k = 0; k < nr && !r->bad; k++) {
        const char *name = rr_str(r);
        const int64_t *e = rr_arr8(r, per);
        if (!e) break;
        int g = an_rel_id(c, name);
        if (g < 0) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        c->rel_total[g] += e[0];
        for (int d = 0; d < 2; d++) {
            for (int o = 0; o < HD_N_OFFSETS; o++)
                c->rel_base[((size_t)g * 2 + d) * HD_N_OFFSETS + o] += e[1 + d * HD_N_OFFSETS + o];
            for (int lh = 0; lh < LH; lh++)
                c->rel_correct[((size_t)g * 2 + d) * LH + lh] += e[1 + 2 * HD_N_OFFSETS + (size_t)d * LH + lh];
        }
    }
    return AS_OK;
}

/* Writes the record's top-k rows (table topk), one per layer and head, when it has them. */
static as_status apply_topk(an_ctx *c, const rec_head *h, rec_rd *r, as_error *err) {
    int k = rr_i32(r);
    if (!k || r->bad) return AS_OK;
    if (k < 1 || k > AN_TOPK_MAX) return as_err_set(err, AS_ERR_INTERNAL, "corrupt sentence record %d", h->idx);
    const size_t per = (size_t)h->T * AN_TOPK_ROW_BYTES(k);
    for (int lh = 0; lh < c->LH; lh++) {
        const void *b = rr_take(r, per);
        if (!b) return as_err_set(err, AS_ERR_INTERNAL, "corrupt sentence record %d", h->idx);
        sqlite3_stmt *q = c->ins_topk;
        store_set_int(q, "run", c->run);
        store_set_int(q, "sent", h->idx);
        store_set_int(q, "layer", lh / c->H);
        store_set_int(q, "head", lh % c->H);
        store_set_int(q, "k", k);
        store_set_int(q, "n_query", h->T);
        store_set_blob(q, "rows", b, per);
        as_status rc = store_step_done(c->st, q, err);
        if (rc) return rc;
    }
    return AS_OK;
}

as_status an_rec_apply(an_ctx *c, const rec_buf *rbuf, as_error *err) {
    rec_rd r = {rbuf->b, rbuf->b + rbuf->n, rbuf->b, 0};
    if (rr_i32(&r) != AN_REC_MAGIC) return as_err_set(err, AS_ERR_INTERNAL, "corrupt sentence record");
    int status = rr_i32(&r);
    rec_head h = {.idx = rr_i32(&r)};
    if (status) {
        const char *msg = rr_str(&r);
        return as_err_set(err, status == AS_ERR_INPUT ? AS_ERR_INPUT : AS_ERR_INTERNAL, "%s",
                          msg && *msg ? msg : "a rank failed");
    }
    h.T = rr_i32(&r);
    h.W = rr_i32(&r);
    h.label = rr_i32(&r);
    h.predicted = rr_i32(&r);
    h.truncated = rr_i32(&r);
    h.explained = rr_i32(&r);
    h.ncls = rr_i32(&r);
    h.first_cls = rr_i32(&r);
    h.has_hist = rr_i32(&r);
    h.corpus = rr_str(&r);
    h.source = rr_str(&r);
    h.text = rr_str(&r);
    if (r.bad || h.T < 0 || h.W < 0 || h.ncls < 0)
        return as_err_set(err, AS_ERR_INTERNAL, "corrupt sentence record %d", h.idx);
    as_status rc;
    if ((rc = apply_rows(c, &h, &r, err)) || (rc = apply_heads_counts(c, &h, &r, err)) ||
        (rc = apply_topk(c, &h, &r, err)))
        return rc;
    if (r.bad || r.p != r.e) return as_err_set(err, AS_ERR_INTERNAL, "corrupt sentence record %d", h.idx);
    return AS_OK;
}
