/* ngram.c — interpolated modified Kneser-Ney n-gram model over token ids
 * (include/attnscope/ngram.h has the formula and its sources). Counts live in
 * open-addressing hash tables (linear probing, load <= 1/2, grown by doubling), one per
 * order for the n-grams and one per order for their contexts (count sums and the
 * numbers of continuations seen once, twice, three times or more), all entries together
 * capped at NGRAM_MAX_ENTRIES.
 * What it does not: smoothing other than modified KN, pruning, ARPA files, threads.
 */
#include "attnscope/ngram.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int k;           /* key length in tokens (0: the one empty context) */
    size_t cap, used;
    int32_t *keys;   /* (cap, k) */
    uint32_t *count; /* (cap) 0 = empty slot */
    uint64_t *total; /* (cap) context tables only: sum of the counts after the context */
    uint32_t *nj;    /* (cap, 3) context tables only: continuations with count 1, 2, >= 3 */
} ng_table;

struct ngram_lm {
    int order, vocab;
    size_t entries;                      /* in all tables */
    ng_table gram[NGRAM_MAX_ORDER + 1];  /* [k]: k-grams (raw counts at order, else continuation) */
    ng_table ctx[NGRAM_MAX_ORDER + 1];   /* [k]: the (k - 1)-token contexts of the k-grams */
    double disc[NGRAM_MAX_ORDER + 1][3]; /* [k]: D_k1, D_k2, D_k3+ */
};

static uint64_t ng_hash(const int32_t *w, int k) {
    uint64_t h = 0x9E3779B97F4A7C15ull * (uint64_t)(k + 1);
    for (int i = 0; i < k; i++) {
        h ^= (uint32_t)w[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    return h;
}

static void ng_table_free(ng_table *t) {
    free(t->keys);
    free(t->count);
    free(t->total);
    free(t->nj);
    memset(t, 0, sizeof *t);
}

/* Empty table of cap slots (a power of two); -1 when out of memory. */
static int ng_table_alloc(ng_table *t, int k, size_t cap, int with_ctx) {
    memset(t, 0, sizeof *t);
    t->k = k;
    t->cap = cap;
    t->keys = as_malloc_array(cap * (size_t)(k ? k : 1), sizeof(int32_t));
    t->count = as_calloc(cap, sizeof(uint32_t));
    if (with_ctx) {
        t->total = as_calloc(cap, sizeof(uint64_t));
        t->nj = as_calloc(cap * 3, sizeof(uint32_t));
    }
    if (!t->keys || !t->count || (with_ctx && (!t->total || !t->nj))) {
        ng_table_free(t);
        return -1;
    }
    return 0;
}

/* Slot of key w: its entry, or the empty slot where it would go. */
static size_t ng_slot(const ng_table *t, const int32_t *w) {
    size_t mask = t->cap - 1, i = (size_t)ng_hash(w, t->k) & mask;
    while (t->count[i] && memcmp(t->keys + i * (size_t)t->k, w, (size_t)t->k * sizeof(int32_t)))
        i = (i + 1) & mask;
    return i;
}

/* Index of key w or (size_t)-1 when absent. */
static size_t ng_find(const ng_table *t, const int32_t *w) {
    if (!t->cap) return (size_t)-1;
    size_t i = ng_slot(t, w);
    return t->count[i] ? i : (size_t)-1;
}

static as_status ng_grow(ng_table *t, as_error *err) {
    ng_table g;
    if (ng_table_alloc(&g, t->k, t->cap ? 2 * t->cap : 1024, t->total != NULL))
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for the n-gram tables");
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->count[i]) continue;
        size_t j = ng_slot(&g, t->keys + i * (size_t)t->k);
        memcpy(g.keys + j * (size_t)t->k, t->keys + i * (size_t)t->k, (size_t)t->k * sizeof(int32_t));
        g.count[j] = t->count[i];
        if (t->total) {
            g.total[j] = t->total[i];
            memcpy(g.nj + 3 * j, t->nj + 3 * i, 3 * sizeof(uint32_t));
        }
    }
    g.used = t->used;
    ng_table_free(t);
    *t = g;
    return AS_OK;
}

/* The entry of key w, inserted (count 0 -> marked 1 for contexts, left to the caller for
 * n-grams) when absent: *slot. */
static as_status ng_insert(ngram_lm *lm, ng_table *t, const int32_t *w, int is_ctx, size_t *slot, as_error *err) {
    as_status s;
    if (2 * (t->used + 1) > t->cap && (s = ng_grow(t, err))) return s;
    size_t i = ng_slot(t, w);
    if (!t->count[i]) {
        if (lm->entries >= NGRAM_MAX_ENTRIES)
            return as_err_set(err, AS_ERR_INPUT, "the training tokens hold more than %u distinct n-grams and contexts",
                              NGRAM_MAX_ENTRIES);
        memcpy(t->keys + i * (size_t)t->k, w, (size_t)t->k * sizeof(int32_t));
        t->used++;
        lm->entries++;
        if (is_ctx) t->count[i] = 1;
    }
    *slot = i;
    return AS_OK;
}

/* Modified KN discounts of one order from its counts of counts n[0..3] = n1..n4
 * (Chen & Goodman 1998, eq. 26); one absolute discount (Ney et al. 1994) when n3 or n4 is
 * 0, 0.5 when n1 or n2 is; each clamped to [NGRAM_MIN_DISCOUNT, j]. */
static void ng_discounts(const uint64_t n[4], double d[3]) {
    double raw[3] = {0.5, 0.5, 0.5};
    if (n[0] && n[1] && n[2] && n[3]) {
        double y = (double)n[0] / ((double)n[0] + 2.0 * (double)n[1]);
        for (int j = 0; j < 3; j++) raw[j] = (j + 1) - (j + 2) * y * (double)n[j + 1] / (double)n[j];
    } else if (n[0] && n[1]) {
        raw[0] = raw[1] = raw[2] = (double)n[0] / ((double)n[0] + 2.0 * (double)n[1]);
    }
    for (int j = 0; j < 3; j++) d[j] = raw[j] < NGRAM_MIN_DISCOUNT ? NGRAM_MIN_DISCOUNT : raw[j] > j + 1 ? j + 1 : raw[j];
}

/* Continuation counts of orders below the top, then every order's contexts and discounts. */
static as_status ng_estimate(ngram_lm *lm, as_error *err) {
    as_status s;
    size_t slot;
    for (int k = lm->order; k >= 2; k--) {
        ng_table *hi = &lm->gram[k];
        for (size_t i = 0; i < hi->cap; i++) {
            if (!hi->count[i]) continue;
            if ((s = ng_insert(lm, &lm->gram[k - 1], hi->keys + i * (size_t)k + 1, 0, &slot, err))) return s;
            lm->gram[k - 1].count[slot]++;
        }
    }
    for (int k = 1; k <= lm->order; k++) {
        ng_table *g = &lm->gram[k];
        uint64_t cc[4] = {0, 0, 0, 0};
        for (size_t i = 0; i < g->cap; i++) {
            uint32_t c = g->count[i];
            if (!c) continue;
            if (c <= 4) cc[c - 1]++;
            if ((s = ng_insert(lm, &lm->ctx[k], g->keys + i * (size_t)k, 1, &slot, err))) return s;
            lm->ctx[k].total[slot] += c;
            lm->ctx[k].nj[3 * slot + (c < 3 ? c - 1 : 2)]++;
        }
        ng_discounts(cc, lm->disc[k]);
    }
    return AS_OK;
}

as_status ngram_train(const int32_t *ids, size_t n, int order, int vocab, ngram_lm **out, as_error *err) {
    *out = NULL;
    if (order < 1 || order > NGRAM_MAX_ORDER)
        return as_err_set(err, AS_ERR_INPUT, "n-gram order %d: it must be in [1, %d]", order, NGRAM_MAX_ORDER);
    if (vocab < 1 || vocab > AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "n-gram vocabulary of %d: it must be in [1, %d]", vocab, AS_MAX_VOCAB);
    if (n < (size_t)order)
        return as_err_set(err, AS_ERR_INPUT, "%zu training tokens: an order-%d model needs at least %d", n, order,
                          order);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return as_err_set(err, AS_ERR_INPUT, "training token %zu is id %d, outside the vocabulary [0, %d)", i,
                              (int)ids[i], vocab);
    ngram_lm *lm = as_calloc(1, sizeof *lm);
    if (!lm) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    lm->order = order;
    lm->vocab = vocab;
    for (int k = 1; k <= order; k++) lm->gram[k].k = k; /* allocated on the first insert */
    as_status s = AS_OK;
    for (int k = 1; k <= order && !s; k++)
        if (ng_table_alloc(&lm->ctx[k], k - 1, 16, 1)) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (size_t i = (size_t)order - 1; i < n && !s; i++) {
        size_t slot;
        if (!(s = ng_insert(lm, &lm->gram[order], ids + i + 1 - order, 0, &slot, err))) {
            if (lm->gram[order].count[slot] == UINT32_MAX)
                s = as_err_set(err, AS_ERR_INPUT, "an n-gram occurs over %u times", UINT32_MAX);
            else lm->gram[order].count[slot]++;
        }
    }
    if (!s) s = ng_estimate(lm, err);
    if (s) {
        ngram_free(lm);
        return s;
    }
    *out = lm;
    return AS_OK;
}

void ngram_free(ngram_lm *lm) {
    if (!lm) return;
    for (int k = 0; k <= NGRAM_MAX_ORDER; k++) {
        ng_table_free(&lm->gram[k]);
        ng_table_free(&lm->ctx[k]);
    }
    free(lm);
}

int ngram_order(const ngram_lm *lm) { return lm->order; }

void ngram_discounts(const ngram_lm *lm, int k, double d[3]) {
    for (int j = 0; j < 3; j++) d[j] = k >= 1 && k <= lm->order ? lm->disc[k][j] : 0.0;
}

double ngram_prob(const ngram_lm *lm, const int32_t *ctx, int n_ctx, int32_t w) {
    int K = n_ctx < lm->order - 1 ? n_ctx : lm->order - 1;
    int32_t key[NGRAM_MAX_ORDER];
    double p = 1.0 / lm->vocab;
    for (int k = 1; k <= K + 1; k++) { /* p_k from p_{k-1}: h = the last k - 1 tokens */
        if (k > 1) memcpy(key, ctx + n_ctx - (k - 1), (size_t)(k - 1) * sizeof(int32_t));
        key[k - 1] = w;
        const ng_table *ct = &lm->ctx[k];
        size_t ci = ng_find(ct, key);
        if (ci == (size_t)-1 || !ct->total[ci]) continue;
        size_t gi = ng_find(&lm->gram[k], key);
        uint32_t c = gi == (size_t)-1 ? 0 : lm->gram[k].count[gi];
        const double *d = lm->disc[k];
        const uint32_t *nj = ct->nj + 3 * ci;
        double head = c ? (double)c - d[c < 3 ? c - 1 : 2] : 0.0;
        double gamma = d[0] * nj[0] + d[1] * nj[1] + d[2] * nj[2];
        p = ((head > 0 ? head : 0.0) + gamma * p) / (double)ct->total[ci];
    }
    return p;
}

as_status ngram_nll(const ngram_lm *lm, const int32_t *ids, size_t n, double *nll_sum, size_t *n_pred,
                    as_error *err) {
    *nll_sum = 0.0;
    *n_pred = 0;
    if (n < 2) return as_err_set(err, AS_ERR_INPUT, "%zu tokens to score: at least 2 are needed", n);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lm->vocab)
            return as_err_set(err, AS_ERR_INPUT, "token %zu is id %d, outside the n-gram vocabulary [0, %d)", i,
                              (int)ids[i], lm->vocab);
    double sum = 0.0;
    for (size_t i = 1; i < n; i++) {
        size_t from = i >= (size_t)lm->order - 1 ? i - ((size_t)lm->order - 1) : 0;
        sum -= log(ngram_prob(lm, ids + from, (int)(i - from), ids[i]));
    }
    *nll_sum = sum;
    *n_pred = n - 1;
    return AS_OK;
}
