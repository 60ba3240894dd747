/* runner.c — the corpus loop of `attnscope analyze` / `import`: per-sentence scoring,
 * chunked transactions, resume, and the final aggregation (see runner.h; formulas and
 * their sources in heads.h / heads.c and docs/analysis.md).
 */
#include "analysis/runner.h"

#include "analysis/saliency.h"
#include "analysis/sha256.h"
#include "core/fastmath.h"
#include "io/conllu.h"
#include "io/npy.h"
#include "io/npz_read.h"
#include "io/tsv.h"

#include <ctype.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

#ifdef AS_MPI
#include <mpi.h>
#endif

static inline float jsd_mix_term(float a, float b) {
    float m = 0.5f * (a + b);
    float keep = m > 1e-30f ? 1.0f : 0.0f; /* arithmetic selects keep the loop vectorisable */
    float safe = m > 1e-30f ? m : 1.0f;
    return keep * m * as_fast_log2f(safe);
}

/* Entropy in bits of the mixture m = (x + y) / 2 of two attention rows: -sum m log2 m
 * over entries m > 1e-30 (smaller ones, including denormals and non-positive values,
 * contribute less than 1e-27 each and are skipped). Float terms summed in 8 lanes, so
 * it differs from hd_jsd's double sum by ~1e-6 at most (T = 500); Clark et al.'s head
 * distances are reported to 3 digits. */
#define JSD_MIX_BODY                                                                  \
    float acc[8] = {0};                                                               \
    int j = 0;                                                                        \
    for (; j + 8 <= T; j += 8)                                                        \
        for (int l = 0; l < 8; l++) acc[l] -= jsd_mix_term(x[j + l], y[j + l]);       \
    double h = 0.0;                                                                   \
    for (int l = 0; l < 8; l++) h += acc[l];                                          \
    for (; j < T; j++) h -= jsd_mix_term(x[j], y[j]);                                 \
    return h;

static double jsd_mix_entropy_base(const float *x, const float *y, int T) { JSD_MIX_BODY }

#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
/* An AVX2 + FMA build of the same loop, chosen at run time (GCC's target_clones did not
 * vectorise it at 256 bits). */
__attribute__((target("avx2,fma"))) static double jsd_mix_entropy_avx2(const float *x, const float *y, int T) {
    JSD_MIX_BODY
}
static double jsd_mix_entropy(const float *x, const float *y, int T) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? jsd_mix_entropy_avx2(x, y, T) : jsd_mix_entropy_base(x, y, T);
}
#else
static double jsd_mix_entropy(const float *x, const float *y, int T) { return jsd_mix_entropy_base(x, y, T); }
#endif

/* A growable byte buffer holding one sentence record (see "per-sentence records"). */
typedef struct {
    uint8_t *b;
    size_t n, cap;
    int oom;
} rec_buf;

static void rb_reset(rec_buf *r) {
    r->n = 0;
    r->oom = 0;
}

static void rb_free(rec_buf *r) {
    free(r->b);
    memset(r, 0, sizeof *r);
}

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
    int rank, size;       /* MPI rank and number of ranks; 0 and 1 without MPI */
    rec_buf rb;           /* the current sentence's record */
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
    rb_free(&c->rb);
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
    c->size = 1;
    if (!c->acc) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (!st) return AS_OK; /* an MPI worker: builds records, writes nothing */
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

/* ---- per-sentence records ----------------------------------------------------------------
 * A sentence is scored into a self-contained record (rec_build: rows for sentences,
 * tokens, words, saliency and sentence_heads, the sentence's share of the chunk
 * accumulators and its syntactic counts), which rec_apply then writes and adds to the
 * chunk. A single process does both in turn; under MPI each rank builds the records of
 * its sentences and rank 0 applies all of them in sentence order, so the two produce the
 * same database bit for bit (same values, same summation order). */

#define REC_MAGIC 0x31525341 /* "ASR1" */
#define REC_NHEAD 13         /* per-head values: importance, semantic, 8 statistics, 3 ablations */


static int rb_reserve(rec_buf *r, size_t need) {
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
    if (!rb_reserve(r, r->n + n)) return;
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

#ifdef AS_MPI
/* An error record (an MPI rank's failure, reported by rank 0). */
static void rec_error(rec_buf *r, int idx, as_status code, const char *msg) {
    rb_reset(r);
    rb_i32(r, REC_MAGIC);
    rb_i32(r, (int32_t)code);
    rb_i32(r, idx);
    rb_str(r, msg);
}
#endif

/* Scores sentence idx into the record r (reset first). Uses c's scratch, not its store. */
static as_status rec_build(an_ctx *c, int idx, const an_sent *s, rec_buf *r, as_error *err) {
    const int T = s->T, LH = c->LH, W = s->W;
    const size_t TT = (size_t)T * T;
    rb_reset(r);
    rb_i32(r, REC_MAGIC);
    rb_i32(r, 0);
    rb_i32(r, idx);
    int32_t hdr[] = {T, W, s->label, s->predicted, s->truncated, s->abl[0] || s->q ? 1 : 0,
                     s->sal_all ? s->n_sal_cls : 0, s->sal_first_class, s->q && s->k && c->Dh > 0};
    for (size_t i = 0; i < sizeof hdr / sizeof *hdr; i++) rb_i32(r, hdr[i]);
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
    /* per head: importance, semantic, Clark statistics, ablation change */
    rb_align8(r);
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
        double v[REC_NHEAD] = {hd_importance(A, T, s->kind), s->sal ? hd_semantic(A, T, s->kind, s->sal) : NAN,
                               hs.cls, hs.sep, hs.punct, hs.self, hs.prev, hs.next, hs.entropy, hs.entropy_norm,
                               abl[0], abl[1], abl[2]};
        rb_put(r, v, sizeof v);
    }
    /* head-pair Jensen-Shannon divergence summed over query rows (Clark et al. 2019 sec. 6) */
    size_t npre = 1 + c->npairs, nhist = (size_t)LH * (size_t)(c->Dh + 1);
    if (!rb_reserve(r, r->n + 8 * (npre + nhist))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    double *js = (double *)(void *)(r->b + r->n);
    memset(js, 0, 8 * npre);
    r->n += 8 * npre;
    for (int i = 0; i < T; i++) js[0] += s->kind[i] != HK_PAD;
    /* Each row's own entropy once (double, as hd_jsd), then per pair only the entropy of
     * the mixture, in float with a vectorised log2 (jsd_mix_entropy); heads a run in
     * parallel, each pair's sum in row order. */
    double *hrow = as_malloc_array(as_mul_size((size_t)LH, (size_t)T), sizeof *hrow);
    if (!hrow) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
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
    #pragma omp parallel for schedule(dynamic, 1)
    for (int a = 0; a < LH; a++) {
        size_t p0 = (size_t)a * (size_t)(2 * LH - a - 1) / 2; /* pairs (a', b) with a' < a come first */
        for (int i = 0; i < T; i++) {
            if (s->kind[i] == HK_PAD) continue;
            const float *x = s->attn + (size_t)a * TT + (size_t)i * T;
            for (int b = a + 1; b < LH; b++) {
                const float *y = s->attn + (size_t)b * TT + (size_t)i * T;
                double hm = jsd_mix_entropy(x, y, T);
                double d = hm - 0.5 * (hrow[(size_t)a * T + i] + hrow[(size_t)b * T + i]);
                js[1 + p0 + (size_t)(b - a - 1)] += d < 0.0 ? 0.0 : d;
            }
        }
    }
    free(hrow);
    /* concentration of each row's dominant link (argmax key) */
    if (hdr[8]) {
        double *hist = (double *)(void *)(r->b + r->n);
        memset(hist, 0, 8 * nhist);
        r->n += 8 * nhist;
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
    /* syntactic counts (Clark et al. 2019 sec. 4.2, both directions) and baselines, per
     * relation in order of first appearance */
    as_status rc = AS_OK;
    int nr = 0, *rid = NULL;
    const char **rn = NULL;
    int64_t *cnt = NULL; /* (nr, 1 + 2 * HD_N_OFFSETS + 2 * LH): total, baselines, correct */
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
    if (r->oom) rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
cleanup:
    free(rid);
    free(rn);
    free(cnt);
    return rc;
}

/* Writes the record's rows and adds its accumulators to the open chunk. */
static as_status rec_apply(an_ctx *c, const rec_buf *rbuf, as_error *err) {
    store *st = c->st;
    const int LH = c->LH;
    as_status rc;
    rec_rd r = {rbuf->b, rbuf->b + rbuf->n, rbuf->b, 0};
    if (rr_i32(&r) != REC_MAGIC) return as_err_set(err, AS_ERR_INTERNAL, "corrupt sentence record");
    int status = rr_i32(&r), idx = rr_i32(&r);
    if (status) {
        const char *msg = rr_str(&r);
        return as_err_set(err, status == AS_ERR_INPUT ? AS_ERR_INPUT : AS_ERR_INTERNAL, "%s",
                          msg && *msg ? msg : "a rank failed");
    }
    int T = rr_i32(&r), W = rr_i32(&r), label = rr_i32(&r), predicted = rr_i32(&r), truncated = rr_i32(&r);
    int explained = rr_i32(&r), ncls = rr_i32(&r), first_cls = rr_i32(&r), has_hist = rr_i32(&r);
    const char *corpus = rr_str(&r), *source = rr_str(&r), *text = rr_str(&r);
    if (r.bad || T < 0 || W < 0 || ncls < 0) return as_err_set(err, AS_ERR_INTERNAL, "corrupt sentence record %d", idx);
    sqlite3_stmt *q = c->ins_sent;
    sqlite3_bind_int64(q, 1, c->run);
    sqlite3_bind_int(q, 2, idx);
    sqlite3_bind_text(q, 3, corpus, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 4, source, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 5, text, -1, SQLITE_STATIC);
    if (label >= 0) sqlite3_bind_int(q, 6, label);
    if (predicted >= 0) sqlite3_bind_int(q, 7, predicted);
    sqlite3_bind_int(q, 8, T);
    sqlite3_bind_int(q, 9, W);
    sqlite3_bind_int(q, 10, truncated);
    sqlite3_bind_int(q, 11, explained);
    if ((rc = store_step_done(st, q, err))) return rc;
    for (int t = 0; t < T; t++) {
        const char *tx = rr_str(&r);
        int start = rr_i32(&r), end = rr_i32(&r), kind = rr_i32(&r), word = rr_i32(&r);
        q = c->ins_tok;
        sqlite3_bind_int64(q, 1, c->run);
        sqlite3_bind_int(q, 2, idx);
        sqlite3_bind_int(q, 3, t);
        sqlite3_bind_text(q, 4, tx, -1, SQLITE_STATIC);
        if (start >= 0) {
            sqlite3_bind_int(q, 5, start);
            sqlite3_bind_int(q, 6, end);
        }
        sqlite3_bind_text(q, 7, kind_name(kind), -1, SQLITE_STATIC);
        if (word >= 0) sqlite3_bind_int(q, 8, word);
        if ((rc = store_step_done(st, q, err))) return rc;
    }
    for (int w = 0; w < W; w++) {
        const char *form = rr_str(&r);
        int parent = rr_i32(&r);
        const char *rel = rr_str(&r);
        q = c->ins_word;
        sqlite3_bind_int64(q, 1, c->run);
        sqlite3_bind_int(q, 2, idx);
        sqlite3_bind_int(q, 3, w);
        sqlite3_bind_text(q, 4, form, -1, SQLITE_STATIC);
        if (rel) {
            sqlite3_bind_int(q, 5, parent);
            sqlite3_bind_text(q, 6, rel, -1, SQLITE_STATIC);
        }
        if ((rc = store_step_done(st, q, err))) return rc;
    }
    if (ncls) {
        const double *sal = rr_arr8(&r, (size_t)ncls * T);
        for (int k = 0; sal && k < ncls; k++)
            for (int t = 0; t < T; t++) {
                q = c->ins_sal;
                sqlite3_bind_int64(q, 1, c->run);
                sqlite3_bind_int(q, 2, idx);
                sqlite3_bind_int(q, 3, first_cls + k);
                sqlite3_bind_int(q, 4, t);
                sqlite3_bind_double(q, 5, sal[(size_t)k * T + t]);
                if ((rc = store_step_done(st, q, err))) return rc;
            }
    }
    const double *hv = rr_arr8(&r, (size_t)LH * REC_NHEAD);
    for (int lh = 0; hv && lh < LH; lh++) {
        const double *v = hv + (size_t)lh * REC_NHEAD;
        q = c->ins_sh;
        sqlite3_bind_int64(q, 1, c->run);
        sqlite3_bind_int(q, 2, idx);
        sqlite3_bind_int(q, 3, lh / c->H);
        sqlite3_bind_int(q, 4, lh % c->H);
        sqlite3_bind_double(q, 5, v[0]);
        for (int k = 1; k < REC_NHEAD; k++) store_bind_real(q, 5 + k, v[k]);
        if ((rc = store_step_done(st, q, err))) return rc;
    }
    const size_t npre = 1 + c->npairs, nhist = (size_t)LH * (size_t)(c->Dh + 1);
    const double *js = rr_arr8(&r, npre);
    for (size_t i = 0; js && i < npre; i++) c->acc[i] += js[i];
    if (has_hist) {
        const double *hist = rr_arr8(&r, nhist);
        for (size_t i = 0; hist && i < nhist; i++) c->acc[npre + i] += hist[i];
    }
    int nr = rr_i32(&r);
    const size_t per = 1 + 2 * HD_N_OFFSETS + 2 * (size_t)LH;
    for (int k = 0; k < nr && !r.bad; k++) {
        const char *name = rr_str(&r);
        const int64_t *e = rr_arr8(&r, per);
        if (!e) break;
        int g = rel_id(c, name);
        if (g < 0) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        c->rel_total[g] += e[0];
        for (int d = 0; d < 2; d++) {
            for (int o = 0; o < HD_N_OFFSETS; o++)
                c->rel_base[((size_t)g * 2 + d) * HD_N_OFFSETS + o] += e[1 + d * HD_N_OFFSETS + o];
            for (int lh = 0; lh < LH; lh++)
                c->rel_correct[((size_t)g * 2 + d) * LH + lh] += e[1 + 2 * HD_N_OFFSETS + (size_t)d * LH + lh];
        }
    }
    if (r.bad || r.p != r.e) return as_err_set(err, AS_ERR_INTERNAL, "corrupt sentence record %d", idx);
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

#define REC_TAG 7 /* MPI tag of sentence records */

/* Sentence idx on this rank: produced, scored into c->rb, released. Failures become an
 * error record when mpi_error != 0 (so rank 0 can report them). */
static as_status build_one(an_ctx *c, int idx, produce_fn produce, release_fn release, void *user, as_error *err) {
    an_sent s;
    memset(&s, 0, sizeof s);
    as_status rc = produce(user, idx, idx < c->explain, &s, err);
    if (!rc) rc = rec_build(c, idx, &s, &c->rb, err);
    release(user);
    return rc;
}

#ifdef AS_MPI
/* Rank 0: receives the record of sentence idx from rank `from` into c->rb. Each rank
 * sends its sentences in increasing order and MPI keeps the order of messages between
 * two ranks, so the next message from `from` is sentence idx. */
static as_status recv_one(an_ctx *c, int from, int idx, as_error *err) {
    MPI_Status ms;
    int n = 0;
    if (MPI_Probe(from, REC_TAG, MPI_COMM_WORLD, &ms) != MPI_SUCCESS || MPI_Get_count(&ms, MPI_BYTE, &n) != MPI_SUCCESS)
        return as_err_set(err, AS_ERR_INTERNAL, "MPI: cannot receive sentence %d from rank %d", idx, from);
    rb_reset(&c->rb);
    if (!rb_reserve(&c->rb, (size_t)n)) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (MPI_Recv(c->rb.b, n, MPI_BYTE, from, REC_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return as_err_set(err, AS_ERR_INTERNAL, "MPI: cannot receive sentence %d from rank %d", idx, from);
    c->rb.n = (size_t)n;
    int32_t got[3] = {0, 0, -1};
    if (n >= 12) memcpy(got, c->rb.b, 12);
    if (got[0] != REC_MAGIC || (got[1] == 0 && got[2] != idx))
        return as_err_set(err, AS_ERR_INTERNAL, "MPI: rank %d sent sentence %d, expected %d", from, got[2], idx);
    return AS_OK;
}

/* Ranks > 0: build and send the records of sentences n_done..n_total-1 that are theirs
 * (idx % size == rank), in order. A failure is sent as an error record and ends the loop. */
static as_status drive_worker(an_ctx *c, int n_done, produce_fn produce, release_fn release, void *user, as_error *err) {
    for (int idx = n_done; idx < c->n_total; idx++) {
        if (idx % c->size != c->rank) continue;
        as_status rc = build_one(c, idx, produce, release, user, err);
        if (rc) rec_error(&c->rb, idx, rc, err->msg);
        if (c->rb.oom || MPI_Send(c->rb.b, (int)c->rb.n, MPI_BYTE, 0, REC_TAG, MPI_COMM_WORLD) != MPI_SUCCESS)
            return as_err_set(err, AS_ERR_INTERNAL, "MPI: rank %d cannot send sentence %d", c->rank, idx);
        if (rc) return rc;
    }
    return AS_OK;
}
#endif

/* The resumable loop: from n_done to n_total, K sentences per transaction. Under MPI
 * (c->size > 1) this runs on rank 0, which scores its own sentences (idx % size == 0),
 * receives the others' records, and writes every record in sentence order. */
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
        int owner = c->size > 1 ? idx % c->size : 0;
        if (owner == 0) rc = build_one(c, idx, produce, release, user, err);
#ifdef AS_MPI
        else rc = recv_one(c, owner, idx, err);
#endif
        if (!rc) rc = rec_apply(c, &c->rb, err);
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
    if (!store_run_shape_ok(L, H) || Dh < 0 || Dh > AS_MAX_DMODEL)
        return as_err_set(err, AS_ERR_INPUT, "%s: run %lld has %d layers x %d heads of %d dims (0: imported), out of range",
                          st->path, (long long)run, L, H, Dh);
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
    float *sal_attn; /* (L, H, T, T) from the saliency forward, when it replaces the engine's */
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
    free(u->sal_attn);
    u->sal_attn = NULL;
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
    /* SST-2 sentences without the explanation: the saliency forward (training code, the
       same model) gives the attention, so the engine's forward is skipped */
    int reuse = is_sst && u->tm && !explain;
    if (reuse) {
        u->sal_attn = as_malloc_array(as_mul_size((size_t)u->L * u->H, (size_t)T * T), sizeof(float));
        if (!u->sal_attn) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    } else {
        as_capture_spec spec = {.what = CAP_ATTN | (explain ? CAP_QKV : 0), .layer = -1, .head = -1,
                                .threads = u->threads};
        if ((rc = as_forward(u->m, &u->enc, &spec, &u->run, err))) return as_err_prefix(err, "%s", u->src);
    }
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
        sal_opts so = {.method = SAL_GRAD, .target = -1, .steps = 0, .attn_out = reuse ? u->sal_attn : NULL};
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
    s->attn = reuse ? u->sal_attn : u->run->attn;
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
    int rank = 0, size = 1, n_done = 0, done = 0;
#ifdef AS_MPI
    int mpi_on = 0, mpi_off = 0;
    MPI_Initialized(&mpi_on);
    if (mpi_on) MPI_Finalized(&mpi_off);
    if (mpi_on && !mpi_off) {
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
#endif
    if (!o->sst2 && !o->conllu) return as_err_set(err, AS_ERR_INPUT, "give --sst2 FILE and/or --conllu FILE");
    /* Under MPI every rank reads the corpora and loads the model; rank 0 alone owns the
     * database. Setup errors are agreed on before anyone goes further. */
    u.sst_path = o->sst2;
    u.cu_path = o->conllu;
    u.threads = o->threads;
    if (o->sst2 && (rc = tsv_read_sst2(o->sst2, o->limit, &u.tsv, err))) goto agree;
    if (o->conllu && (rc = cu_read(o->conllu, o->limit, &u.cu, err))) goto agree;
    if ((rc = as_model_load(o->model_dir, &u.m, err))) goto agree;
    const as_config *cfg = as_model_config(u.m);
    if (!as_model_has_tokenizer(u.m)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: no tokenizer files (vocab.txt / tokenizer.json): analyze tokenizes text",
                        o->model_dir);
        goto agree;
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
    if (u.tsv.n + u.cu.n == 0) rc = as_err_set(err, AS_ERR_INPUT, "the corpora hold no sentences");
agree:
#ifdef AS_MPI
    if (size > 1) {
        /* every rank's setup status; rank 0 reports its own error, a worker only an error
         * rank 0 did not have (an empty message tells the caller not to print) */
        int *all = as_calloc((size_t)size, sizeof *all), mine = (int)rc, bad = -1;
        if (!all) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
        for (int r = 0; r < size && bad < 0; r++)
            if (all[r]) bad = r;
        int r0 = all[0];
        free(all);
        if (bad >= 0) {
            if (rank == 0 && !rc) rc = as_err_set(err, AS_ERR_INTERNAL, "MPI rank %d could not start (see its message)", bad);
            else if (rank > 0 && (r0 || !rc)) {
                err->msg[0] = 0;
                if (!rc) rc = AS_ERR_INTERNAL;
            }
        }
    }
#endif
    if (rc) goto cleanup;
    if (rank > 0) goto sync;
    /* identity of the run */
    char mdig[65], cdig[65], corpus[2600], params[256], p1[1200], p2[1200];
    if ((rc = digest_dir(o->model_dir, digest_file_wanted, mdig, err))) goto sync;
    sha256_ctx hc;
    sha256_init(&hc);
    if (o->sst2) {
        sha256_update(&hc, "sst2", 5);
        if ((rc = sha256_file(&hc, o->sst2, err))) goto sync;
    }
    if (o->conllu) {
        sha256_update(&hc, "conllu", 7);
        if ((rc = sha256_file(&hc, o->conllu, err))) goto sync;
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
    run_key k = {.model_name = o->model_dir, .model_digest = mdig, .arch = as_arch_name(as_model_config(u.m)->arch), .corpus = corpus,
                 .corpus_digest = cdig, .params = params, .L = u.L, .H = u.H, .Dh = u.Dh,
                 .n_total = u.tsv.n + u.cu.n};
    if ((rc = store_open(db_path, 1, &st, err))) goto sync;
    int64_t run;
    if ((rc = run_begin(&st, &k, &run, &n_done, &done, err))) goto sync;
    rc = ctx_init(&c, &st, run, u.L, u.H, u.Dh, err);
sync:
#ifdef AS_MPI
    if (size > 1) {
        /* rank 0 tells where the run stands (or that it failed) */
        int info[3] = {(int)rc, n_done, done};
        MPI_Bcast(info, 3, MPI_INT, 0, MPI_COMM_WORLD);
        if (rank > 0) {
            if (info[0]) {
                err->msg[0] = 0;
                rc = (as_status)info[0];
                goto cleanup;
            }
            n_done = info[1];
            done = info[2];
            if ((rc = ctx_init(&c, NULL, 0, u.L, u.H, u.Dh, err))) goto cleanup;
        }
    }
#endif
    if (rc) goto cleanup;
    c.rank = rank;
    c.size = size;
    c.chunk = o->chunk > 0 ? o->chunk : AN_DEFAULT_CHUNK;
    c.explain = o->explain >= 0 ? o->explain : AN_DEFAULT_EXPLAIN;
    c.n_total = u.tsv.n + u.cu.n;
#ifdef AS_MPI
    if (rank > 0) { /* score this rank's sentences and send them to rank 0 */
        if (!done) rc = drive_worker(&c, n_done, az_produce, az_release, &u, err);
        goto cleanup;
    }
#endif
    c.min_rel = o->min_rel > 0 ? o->min_rel : AN_DEFAULT_MIN_REL;
    c.progress = o->progress;
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

as_status an_import_digest(const char *dir, char hex[65], as_error *err) {
    return digest_dir(dir, import_json_wanted, hex, err);
}

typedef struct {
    const char *dir;               /* an_import_dir: the folder */
    char **names;                  /* (n) json file names (an_import_dir) */
    const an_import_files_opts *f; /* an_import_files: the file lists */
    int n;
    int L, H;
    /* owned by the current sentence */
    json_t *j, *jsal, *jdep;
    cu_corpus cu;
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
    json_decref(u->jsal);
    u->jsal = NULL;
    json_decref(u->jdep);
    u->jdep = NULL;
    cu_corpus_free(&u->cu);
    memset(&u->cu, 0, sizeof u->cu);
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
        /* byte-level BPE marks a leading space with U+0120 'Ġ', SentencePiece with U+2581 */
        if (!strncmp(p, "\xc4\xa0", 2) && p[2]) p += 2;
        else if (!strncmp(p, "\xe2\x96\x81", 3) && p[3]) p += 3;
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

/* Row sums of imported attention must be 1 within this. float32 softmax rows are within
 * 1e-6; float16 or bfloat16 attention cast to float32 also passes (bfloat16 keeps 8
 * significant bits: each entry is rounded by at most 2^-9 of itself, a row's sum by at
 * most 2^-9 = 0.002). A row summing to 0 or 2 is far outside. */
#define IM_ROW_SUM_TOL 5e-3

/* Reads the attention file path into u->a once its declared shape is (L, H, T, T): the
 * shape is read first (a .npy header, or an .npz entry's sizes and header), so a file
 * declaring more than the tokens file needs is refused before its data are read. */
static as_status im_read_attention(im_user *u, const char *path, int T, as_error *err) {
    npy_array hdr;
    as_status rc = npyz_read_shape(path, NULL, &hdr, err);
    if (rc) return rc;
    if (hdr.ndim != 4 || hdr.shape[0] != u->L || hdr.shape[1] != u->H || hdr.shape[2] != T || hdr.shape[3] != T)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: attention shape must be [%d, %d, %d, %d] (layers, heads, tokens, tokens; the tokens "
                          "file has %d tokens)",
                          path, u->L, u->H, T, T, T);
    if ((rc = npyz_read_f32(path, NULL, &u->a, err))) return rc;
    if (u->a.ndim != 4 || u->a.shape[0] != u->L || u->a.shape[1] != u->H || u->a.shape[2] != T || u->a.shape[3] != T)
        return as_err_set(err, AS_ERR_INPUT, "%s: the file changed while it was read", path);
    return AS_OK;
}

/* Checks every attention row of u->a (L, H, T, T): entries finite and in [0, 1], and the
 * row summing to 1 within IM_ROW_SUM_TOL; the row of a [PAD] query (kind[i] ==
 * HK_PAD) may also be all zeros (frameworks that zero masked queries). Errors name the
 * file, layer, head and row. */
static as_status im_check_values(const im_user *u, const char *path, int T, as_error *err) {
    for (int l = 0; l < u->L; l++)
        for (int h = 0; h < u->H; h++)
            for (int i = 0; i < T; i++) {
                const float *row = u->a.data + (((size_t)l * u->H + h) * T + i) * T;
                double sum = 0.0;
                for (int j = 0; j < T; j++) {
                    float v = row[j];
                    if (!isfinite(v) || v < 0.0f || v > 1.0f + (float)IM_ROW_SUM_TOL)
                        return as_err_set(err, AS_ERR_INPUT,
                                          "%s: layer %d, head %d, row %d (token '%s'): entry %d is %g, not a "
                                          "probability in [0, 1]",
                                          path, l, h, i, u->tok_text[i], j, (double)v);
                    sum += v;
                }
                if (fabs(sum - 1.0) <= IM_ROW_SUM_TOL || (u->kind[i] == HK_PAD && sum <= IM_ROW_SUM_TOL)) continue;
                return as_err_set(err, AS_ERR_INPUT,
                                  "%s: layer %d, head %d, row %d (token '%s'): the row sums to %.6g, not 1 (tolerance "
                                  "%g%s)",
                                  path, l, h, i, u->tok_text[i], sum, IM_ROW_SUM_TOL,
                                  u->kind[i] == HK_PAD ? "; a [PAD] row may also be all zeros" : "");
            }
    return AS_OK;
}

/* Token texts and kinds from the JSON array toks (T strings). special: optional (T)
 * array of 0/1 (Hugging Face special_tokens_mask): the first special token is [CLS],
 * the others [SEP]; without it the spelling decides ([CLS]/<s>, [SEP]/</s>, [PAD]/<pad>). */
static as_status im_tokens(im_user *u, const char *jpath, json_t *toks, json_t *special, as_error *err) {
    const int T = (int)json_array_size(toks);
    u->tok_text = as_calloc((size_t)T, sizeof *u->tok_text);
    u->kind = as_malloc((size_t)T);
    if (!u->tok_text || !u->kind) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (special && (!json_is_array(special) || (int)json_array_size(special) != T))
        return as_err_set(err, AS_ERR_INPUT, "%s: 'special_tokens_mask' must be an array of %d integers 0/1", jpath, T);
    int seen_special = 0;
    for (int t = 0; t < T; t++) {
        const char *p = json_string_value(json_array_get(toks, (size_t)t));
        if (!p) return as_err_set(err, AS_ERR_INPUT, "%s: tokens[%d] is not a string", jpath, t);
        u->tok_text[t] = (char *)p;
        int pad = !strcmp(p, "[PAD]") || !strcmp(p, "<pad>");
        if (special) {
            json_t *m = json_array_get(special, (size_t)t);
            if (!json_is_integer(m) || json_integer_value(m) < 0 || json_integer_value(m) > 1)
                return as_err_set(err, AS_ERR_INPUT, "%s: special_tokens_mask[%d] is not 0 or 1", jpath, t);
            if (json_integer_value(m)) {
                u->kind[t] = pad ? HK_PAD : seen_special++ ? HK_SEP : HK_CLS;
                continue;
            }
            u->kind[t] = hd_is_punct(p) ? HK_PUNCT : HK_WORD;
            continue;
        }
        int first = !strcmp(p, "[CLS]") || !strcmp(p, "<s>");
        int special_tok = first || !strcmp(p, "[SEP]") || !strcmp(p, "</s>");
        u->kind[t] = special_tok ? (first ? HK_CLS : HK_SEP) : hd_is_punct(p) ? HK_PUNCT : HK_WORD;
        if (pad) u->kind[t] = HK_PAD;
    }
    return AS_OK;
}

/* Saliency in one of three layouts (docs/analysis.md "Import format"): Dodrio's T
 * objects {"token": ..., "<class>": value, ...}; C arrays of T numbers (class c = row c);
 * or T numbers (the predicted class's saliency). Sets s->sal* from u->sal_all. */
static as_status im_saliency(im_user *u, const char *jpath, json_t *sal, int T, an_sent *s, as_error *err) {
    as_status rc = AS_OK;
    json_t *first = json_array_get(sal, 0);
    if (!json_is_array(sal) || json_array_size(sal) == 0) IM_FAIL("%s: 'saliency' must be a non-empty array", jpath);
    int C = 0, layout; /* 0 objects, 1 rows, 2 one vector */
    if (json_is_object(first)) {
        layout = 0;
        const char *key;
        json_t *v;
        json_object_foreach(first, key, v) C += strcmp(key, "token") != 0;
        if ((int)json_array_size(sal) != T) IM_FAIL("%s: 'saliency' must be an array of %d objects", jpath, T);
        if (C < 1 || C > AS_MAX_LABELS) IM_FAIL("%s: saliency[0] has no class values", jpath);
    } else if (json_is_array(first)) {
        layout = 1;
        C = (int)json_array_size(sal);
        if (C > AS_MAX_LABELS) IM_FAIL("%s: saliency has %d classes, over %d", jpath, C, AS_MAX_LABELS);
    } else {
        layout = 2;
        C = 1;
        if ((int)json_array_size(sal) != T) IM_FAIL("%s: 'saliency' must hold %d numbers (one per token)", jpath, T);
    }
    if (!(u->sal_all = as_malloc_array(as_mul_size((size_t)C, (size_t)T), sizeof *u->sal_all)))
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int t = 0; layout == 0 && t < T; t++) {
        json_t *o = json_array_get(sal, (size_t)t), *v;
        const char *key;
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
    for (int k = 0; layout > 0 && k < C; k++) {
        json_t *row = layout == 1 ? json_array_get(sal, (size_t)k) : sal;
        if (!json_is_array(row) || (int)json_array_size(row) != T)
            IM_FAIL("%s: saliency[%d] must hold %d numbers (one per token)", jpath, k, T);
        for (int t = 0; t < T; t++) {
            json_t *v = json_array_get(row, (size_t)t);
            if (!json_is_number(v) || !isfinite(json_number_value(v)))
                IM_FAIL("%s: saliency value %d of class %d is not a finite number", jpath, t, k);
            u->sal_all[(size_t)k * T + t] = (float)json_number_value(v);
        }
    }
    s->sal_all = u->sal_all;
    s->n_sal_cls = C;
    if (layout == 2) {
        s->sal_first_class = s->predicted >= 0 ? s->predicted : 0;
        s->sal = u->sal_all;
        return AS_OK;
    }
    s->sal_first_class = 0;
    if (s->predicted >= C) IM_FAIL("%s: predicted_label %d but saliency has %d classes", jpath, s->predicted, C);
    if (s->predicted >= 0) s->sal = u->sal_all + (size_t)s->predicted * T;
    return AS_OK;
fail:
    return rc;
}

/* Allocates the word arrays for W words (parent -2 = no arc, relation ""). */
static as_status im_words_alloc(im_user *u, int T, int W, as_error *err) {
    u->word = as_malloc_array((size_t)T, sizeof *u->word);
    u->parent = as_malloc_array((size_t)(W ? W : 1), sizeof *u->parent);
    u->rel = as_calloc((size_t)(W ? W : 1), sizeof *u->rel);
    u->form = as_calloc((size_t)(W ? W : 1), sizeof *u->form);
    if (!u->word || !u->parent || !u->rel || !u->form) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int w = 0; w < W; w++) {
        u->parent[w] = -2;
        u->rel[w] = (char *)"";
    }
    return AS_OK;
}

/* Dodrio's word-level parse {"words": [...], "list": [{"child", "parent" (null = root),
 * "relation"}]} (0-based) into u->form / parent / rel; *W_out = number of words. */
static as_status im_deps_json(im_user *u, const char *jpath, json_t *deps, int T, int *W_out, as_error *err) {
    as_status rc;
    json_t *lst = json_object_get(deps, "list"), *words = json_object_get(deps, "words");
    if (!json_is_array(lst) || !json_is_array(words)) IM_FAIL("%s: 'dependencies' needs arrays 'list' and 'words'", jpath);
    int W = (int)json_array_size(words);
    if (W > T) IM_FAIL("%s: %d parse words but only %d tokens", jpath, W, T);
    if ((rc = im_words_alloc(u, T, W, err))) return rc;
    for (int w = 0; w < W; w++)
        if (!(u->form[w] = (char *)json_string_value(json_array_get(words, (size_t)w))))
            IM_FAIL("%s: dependencies.words[%d] is not a string", jpath, w);
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
    *W_out = W;
    return AS_OK;
fail:
    return rc;
}

/* Hands the parse to s once the tokens are aligned to its W words. */
static void im_set_words(im_user *u, an_sent *s, int W) {
    s->W = W;
    s->word = u->word;
    s->parent = u->parent;
    s->rel = u->rel;
    s->word_form = u->form;
}

/* Largest JSON file of an import (tokens, saliency, dependencies of one sentence). */
#define IM_MAX_JSON_BYTES ((size_t)64 << 20)

/* Loads a JSON file (a regular file of at most IM_MAX_JSON_BYTES) into *out; syntax
 * errors as "file:line: invalid JSON: ...". */
static as_status im_load_json(const char *path, json_t **out, as_error *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    as_status rc = as_read_file(path, IM_MAX_JSON_BYTES, &text, &len, err);
    if (rc) return rc;
    json_error_t je;
    *out = json_loadb(text, len, 0, &je);
    free(text);
    if (!*out) return as_err_set(err, AS_ERR_INPUT, "%s:%d: invalid JSON: %s", path, je.line, je.text);
    return AS_OK;
}

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
    if ((rc = im_load_json(jpath, &u->j, err))) return rc;
    json_t *j = u->j;
    const char *sentence = json_string_value(json_object_get(j, "sentence"));
    json_t *toks = json_object_get(j, "tokens"), *sal = json_object_get(j, "saliency");
    json_t *lab = json_object_get(j, "label"), *pred = json_object_get(j, "predicted_label");
    if (!json_is_object(j)) IM_FAIL("%s: expected a JSON object", jpath);
    if (!sentence) IM_FAIL("%s: field 'sentence' missing or not a string", jpath);
    if (!json_is_array(toks) || json_array_size(toks) == 0) IM_FAIL("%s: field 'tokens' missing or not a non-empty array", jpath);
    const int T = (int)json_array_size(toks);
    if (T > AS_MAX_POSITIONS) IM_FAIL("%s: %d tokens exceed %d", jpath, T, AS_MAX_POSITIONS);
    if ((rc = im_tokens(u, jpath, toks, NULL, err))) return rc;
    if ((rc = im_read_attention(u, npath, T, err)) || (rc = im_check_values(u, npath, T, err))) return rc;
    s->label = json_is_integer(lab) ? (int)json_integer_value(lab) : -1;
    s->predicted = json_is_integer(pred) ? (int)json_integer_value(pred) : -1;
    if (sal && (rc = im_saliency(u, jpath, sal, T, s, err))) return rc;
    json_t *deps = json_object_get(j, "dependencies");
    if (deps) {
        int W = 0;
        if ((rc = im_deps_json(u, jpath, deps, T, &W, err))) return rc;
        if (align_pieces(u->tok_text, u->kind, T, u->form, W, u->word) == 0)
            im_set_words(u, s, W);
        else
            as_warn("%s: tokens do not spell the parse's words; no syntactic counts for this sentence", jpath);
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

/* One sentence of `import --attention A --tokens T [--saliency S] [--dependencies D]`. */
static as_status if_produce(void *u_, int idx, int explain, an_sent *s, as_error *err) {
    im_user *u = u_;
    const an_import_files_opts *f = u->f;
    const char *tpath = f->tokens[idx], *apath = f->attention[idx];
    as_status rc;
    (void)explain;
    snprintf(u->src, sizeof u->src, "%s", tpath);
    if ((rc = im_load_json(tpath, &u->j, err))) return rc;
    json_t *j = u->j;
    if (!json_is_object(j)) IM_FAIL("%s: expected a JSON object", tpath);
    json_t *toks = json_object_get(j, "tokens"), *text = json_object_get(j, "text");
    if (!text) text = json_object_get(j, "sentence");
    json_t *lab = json_object_get(j, "label"), *pred = json_object_get(j, "prediction");
    if (!pred) pred = json_object_get(j, "predicted_label");
    if (!json_is_array(toks) || json_array_size(toks) == 0) IM_FAIL("%s: field 'tokens' missing or not a non-empty array", tpath);
    const int T = (int)json_array_size(toks);
    if (T > AS_MAX_POSITIONS) IM_FAIL("%s: %d tokens exceed %d", tpath, T, AS_MAX_POSITIONS);
    if (text && !json_is_string(text)) IM_FAIL("%s: field 'text' is not a string", tpath);
    if (lab && !json_is_null(lab) && !(json_is_integer(lab) && json_integer_value(lab) >= 0 && json_integer_value(lab) < AS_MAX_LABELS))
        IM_FAIL("%s: field 'label' is not an integer in [0, %d)", tpath, AS_MAX_LABELS);
    if (pred && !json_is_null(pred) && !(json_is_integer(pred) && json_integer_value(pred) >= 0 && json_integer_value(pred) < AS_MAX_LABELS))
        IM_FAIL("%s: field 'prediction' is not an integer in [0, %d)", tpath, AS_MAX_LABELS);
    if ((rc = im_tokens(u, tpath, toks, json_object_get(j, "special_tokens_mask"), err))) return rc;
    if ((rc = im_read_attention(u, apath, T, err)) || (rc = im_check_values(u, apath, T, err))) return rc;
    s->label = json_is_integer(lab) ? (int)json_integer_value(lab) : -1;
    s->predicted = json_is_integer(pred) ? (int)json_integer_value(pred) : -1;
    if (f->saliency) {
        const char *spath = f->saliency[idx];
        if ((rc = im_load_json(spath, &u->jsal, err))) return rc;
        json_t *sal = json_is_object(u->jsal) ? json_object_get(u->jsal, "saliency") : u->jsal;
        if (!sal) IM_FAIL("%s: expected an array or an object with a 'saliency' array", spath);
        if ((rc = im_saliency(u, spath, sal, T, s, err))) return rc;
    }
    json_t *words = json_object_get(j, "words"), *wids = json_object_get(j, "word_ids");
    if (words && !json_is_array(words)) IM_FAIL("%s: field 'words' is not an array of strings", tpath);
    if (wids && (!json_is_array(wids) || (int)json_array_size(wids) != T))
        IM_FAIL("%s: field 'word_ids' must be an array of %d entries (null or a word index)", tpath, T);
    int W = -1;
    if (f->dependencies) {
        const char *dpath = f->dependencies[idx];
        size_t dl = strlen(dpath);
        if (dl > 7 && !strcmp(dpath + dl - 7, ".conllu")) {
            if ((rc = cu_read(dpath, 0, &u->cu, err))) return rc;
            if (u->cu.n != 1) IM_FAIL("%s: expected exactly one sentence, found %d", dpath, u->cu.n);
            const cu_sentence *cs = &u->cu.s[0];
            W = cs->n_words;
            if ((rc = im_words_alloc(u, T, W, err))) return rc;
            for (int w = 0; w < W; w++) {
                u->form[w] = cs->words[w].form;
                u->parent[w] = cs->words[w].head;
                u->rel[w] = cs->words[w].deprel;
            }
            if (!text) text = json_string(cs->text), json_object_set_new(j, "text", text);
        } else {
            if ((rc = im_load_json(dpath, &u->jdep, err))) return rc;
            json_t *deps = json_object_get(u->jdep, "dependencies");
            if ((rc = im_deps_json(u, dpath, deps ? deps : u->jdep, T, &W, err))) return rc;
        }
        if (words && (int)json_array_size(words) != W)
            IM_FAIL("%s: %d 'words' but the parse %s has %d", tpath, (int)json_array_size(words), dpath, W);
    } else if (words) {
        /* words without a parse: the alignment is stored, no syntactic counts */
        W = (int)json_array_size(words);
        if (W > T) IM_FAIL("%s: %d words but only %d tokens", tpath, W, T);
        if ((rc = im_words_alloc(u, T, W, err))) return rc;
        for (int w = 0; w < W; w++)
            if (!(u->form[w] = (char *)json_string_value(json_array_get(words, (size_t)w))))
                IM_FAIL("%s: words[%d] is not a string", tpath, w);
    }
    if (W >= 0) {
        if (wids) {
            for (int t = 0; t < T; t++) {
                json_t *v = json_array_get(wids, (size_t)t);
                if (json_is_null(v)) {
                    u->word[t] = -1;
                    continue;
                }
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= W)
                    IM_FAIL("%s: word_ids[%d] is not null or a word index in [0, %d)", tpath, t, W);
                u->word[t] = (int)json_integer_value(v);
            }
            im_set_words(u, s, W);
        } else if (align_pieces(u->tok_text, u->kind, T, u->form, W, u->word) == 0) {
            im_set_words(u, s, W);
        } else {
            as_warn("%s: tokens do not spell the parse's words (give 'word_ids'); no syntactic counts for this sentence",
                    tpath);
        }
    }
    s->corpus = "import";
    s->source = u->src;
    s->text = text ? json_string_value(text) : "";
    s->T = T;
    s->tok_text = u->tok_text;
    s->kind = u->kind;
    s->attn = u->a.data;
    return AS_OK;
fail:
    return rc;
}

/* Layers and heads of an import from the shape of its first attention file (npy or
 * npz; the data are not read), within AS_MAX_LAYERS, AS_MAX_HEADS, AS_MAX_RUN_HEADS
 * and AS_MAX_POSITIONS. */
static as_status im_sizes(const char *path, im_user *u, as_error *err) {
    npy_array a;
    as_status rc = npyz_read_shape(path, NULL, &a, err);
    if (rc) return rc;
    if (a.ndim != 4 || a.shape[2] != a.shape[3] || a.shape[0] < 1 || a.shape[1] < 1 || a.shape[2] < 1)
        return as_err_set(err, AS_ERR_INPUT, "%s: attention must be float32 with shape [layers, heads, tokens, tokens]",
                          path);
    if (a.shape[0] > AS_MAX_LAYERS || a.shape[1] > AS_MAX_HEADS || a.shape[0] * a.shape[1] > AS_MAX_RUN_HEADS ||
        a.shape[2] > AS_MAX_POSITIONS)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: attention shape [%lld, %lld, %lld, %lld] is over the limits (at most %d layers, %d "
                          "heads, %d heads in all, %d tokens)",
                          path, (long long)a.shape[0], (long long)a.shape[1], (long long)a.shape[2],
                          (long long)a.shape[3], AS_MAX_LAYERS, AS_MAX_HEADS, AS_MAX_RUN_HEADS, AS_MAX_POSITIONS);
    u->L = (int)a.shape[0];
    u->H = (int)a.shape[1];
    return AS_OK;
}

/* Opens the store, begins (or resumes) the import run identified by name, digests
 * and corpus description, and scores every sentence that pf produces. source goes
 * into the run's parameters ("import" or "import-files"). */
static as_status im_store_run(const char *db_path, const an_opts *o, const char *source, const char *name,
                              const char *mdig, const char *corpus, const char *cdig, im_user *u, produce_fn pf,
                              as_error *err) {
    char params[256];
    store st = {0};
    an_ctx c;
    memset(&c, 0, sizeof c);
    int chunk = o->chunk > 0 ? o->chunk : AN_DEFAULT_CHUNK;
    int min_rel = o->min_rel > 0 ? o->min_rel : AN_DEFAULT_MIN_REL;
    snprintf(params, sizeof params, "{\"chunk\":%d,\"limit\":%d,\"min_rel\":%d,\"source\":\"%s\"}", chunk,
             o->limit, min_rel, source);
    run_key k = {.model_name = name, .model_digest = mdig, .arch = "imported", .corpus = corpus, .corpus_digest = cdig,
                 .params = params, .L = u->L, .H = u->H, .Dh = 0, .n_total = u->n};
    int64_t run;
    int n_done, done;
    as_status rc;
    if ((rc = store_open(db_path, 1, &st, err))) goto cleanup;
    if ((rc = run_begin(&st, &k, &run, &n_done, &done, err))) goto cleanup;
    if ((rc = ctx_init(&c, &st, run, u->L, u->H, 0, err))) goto cleanup;
    c.chunk = chunk;
    c.explain = 0;
    c.min_rel = min_rel;
    c.progress = o->progress;
    c.n_total = k.n_total;
    rc = finish_run(&c, &st, n_done, done, pf, im_release, u, o, "import", err);
cleanup:
    ctx_free(&c);
    store_close(&st);
    return rc;
}

as_status an_import_dir(const char *db_path, const char *dir, const an_opts *o, as_error *err) {
    as_status rc = AS_OK;
    im_user u;
    memset(&u, 0, sizeof u);
    u.dir = dir;
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
        if ((rc = as_path_join(npath, sizeof npath, dir, nn, err)) || (rc = im_sizes(npath, &u, err))) goto cleanup;
    }
    char mdig[65], cdig[65], corpus[1200], name[1200], pd[1100];
    if ((rc = digest_dir(dir, import_npy_wanted, mdig, err)) || (rc = digest_dir(dir, import_json_wanted, cdig, err)))
        goto cleanup;
    json_escape_path(pd, sizeof pd, dir);
    snprintf(corpus, sizeof corpus, "{\"import\":\"%s\"}", pd);
    snprintf(name, sizeof name, "import:%s", dir);
    rc = im_store_run(db_path, o, "import", name, mdig, corpus, cdig, &u, im_produce, err);
cleanup:
    im_release(&u);
    for (int i = 0; i < u.n; i++) free(u.names[i]);
    free(u.names);
    return rc;
}

/* sha256 over (index, NUL, bytes) of n files; the lists may be NULL (skipped). */
static as_status digest_files(sha256_ctx *c, const char *tag, const char *const *paths, int n, as_error *err) {
    if (!paths) return AS_OK;
    sha256_update(c, tag, strlen(tag) + 1);
    for (int i = 0; i < n; i++) {
        char num[32];
        snprintf(num, sizeof num, "%d", i);
        sha256_update(c, num, strlen(num) + 1);
        as_status rc = sha256_file(c, paths[i], err);
        if (rc) return rc;
    }
    return AS_OK;
}

as_status an_import_files(const char *db_path, const an_import_files_opts *f, const an_opts *o, as_error *err) {
    as_status rc = AS_OK;
    im_user u;
    memset(&u, 0, sizeof u);
    u.f = f;
    u.n = o->limit > 0 && o->limit < f->n ? o->limit : f->n;
    if (u.n <= 0) return as_err_set(err, AS_ERR_INPUT, "give --attention FILE and --tokens FILE");
    if ((rc = im_sizes(f->attention[0], &u, err))) return rc;
    char mdig[65], cdig[65], corpus[2600], name[1200], p1[1100];
    sha256_ctx hc;
    sha256_init(&hc);
    if ((rc = digest_files(&hc, "attention", f->attention, u.n, err))) return rc;
    sha256_final_hex(&hc, mdig);
    sha256_init(&hc);
    if ((rc = digest_files(&hc, "tokens", f->tokens, u.n, err)) ||
        (rc = digest_files(&hc, "saliency", f->saliency, u.n, err)) ||
        (rc = digest_files(&hc, "dependencies", f->dependencies, u.n, err)))
        return rc;
    sha256_final_hex(&hc, cdig);
    json_escape_path(p1, sizeof p1, f->tokens[0]);
    snprintf(corpus, sizeof corpus, "{\"import_files\":%d,\"first_tokens\":\"%s\",\"saliency\":%s,\"dependencies\":%s}",
             u.n, p1, f->saliency ? "true" : "false", f->dependencies ? "true" : "false");
    if (f->model_name) snprintf(name, sizeof name, "%s", f->model_name);
    else snprintf(name, sizeof name, "import:%s", f->attention[0]);
    rc = im_store_run(db_path, o, "import-files", name, mdig, corpus, cdig, &u, if_produce, err);
    im_release(&u);
    return rc;
}
