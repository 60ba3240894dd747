/* faith.c — faithfulness of the per-token attributions of a sequence classifier's
 * prediction (include/attnscope/faith.h; docs/attribution.md, "Faithfulness"): each
 * method's relevance of every token (saliency.c, attrib.c), the order it ranks the
 * removable tokens in, the deletion and insertion curves of that order on the model's one
 * forward (one perturbed input per forward, the forwards spread over the pool, one thread
 * each, so the curves do not depend on the thread count), and their AOPC and ERASER
 * scores. What it does not: batch several inputs into one forward (the forward takes one
 * sequence), print anything (faith_out.c writes the JSON, the CLI the table).
 */
#include "analysis/faith.h"
#include "attnscope/analysis.h"
#include "core/pool.h"
#include "model/model.h"
#include "tokenize/tokenizer.h"

#include <math.h>
#include <string.h>

const int faith_bins_pct[FAITH_N_BINS] = {1, 5, 10, 20, 50};

static const char *const METHOD_NAMES[FAITH_N_METHODS] = {"grad", "gxi",  "ig",   "rollout",   "flow",
                                                          "norm", "norm2", "alti", "grad-attn", "random"};

const char *faith_method_name(faith_method m) {
    return (unsigned)m < FAITH_N_METHODS ? METHOD_NAMES[m] : "?";
}

int faith_method_parse(const char *s, faith_method *out) {
    for (int i = 0; i < FAITH_N_METHODS; i++)
        if (!strcmp(s, METHOD_NAMES[i])) {
            *out = (faith_method)i;
            return 0;
        }
    return -1;
}

int faith_methods_parse(const char *s, unsigned *out, char *bad, size_t cap) {
    unsigned set = 0;
    const char *p = s;
    while (1) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char name[32];
        faith_method m;
        if (len == 0 || len >= sizeof name) {
            snprintf(bad, cap, "%.*s", (int)(len < 40 ? len : 40), p);
            return -1;
        }
        memcpy(name, p, len);
        name[len] = 0;
        if (faith_method_parse(name, &m)) {
            snprintf(bad, cap, "%s", name);
            return -1;
        }
        set |= 1u << m;
        if (!e) break;
        p = e + 1;
    }
    *out = set;
    return 0;
}

/* ---- the metrics ------------------------------------------------------------------ */

int faith_rank(const float *rel, const uint8_t *removable, int T, int *order) {
    int n = 0;
    for (int t = 0; t < T; t++) {
        if (!removable[t]) continue;
        /* insertion sort: stable, so equal scores keep the earlier position first */
        int k = n++;
        const float v = rel[t];
        while (k > 0) {
            const float u = rel[order[k - 1]];
            int after = isnan(v) ? 0 : (isnan(u) || v > u); /* v goes before u */
            if (!after) break;
            order[k] = order[k - 1];
            k--;
        }
        order[k] = t;
    }
    return n;
}

int faith_bin_tokens(int n, int pct) { return (int)(((long long)pct * n + 99) / 100); }

void faith_score(faith_curve *c, int n) {
    /* AOPC (Samek et al. 2017, eq. 12) over k = 0 .. n; ERASER (DeYoung et al. 2020, sec.
       4.2) averaged over the bins as its metrics.py does */
    double sd = 0.0, si = 0.0;
    for (int k = 0; k <= n; k++) {
        sd += c->del[0] - c->del[k];
        si += c->ins[k] - c->ins[0];
    }
    c->aopc_del = sd / (n + 1);
    c->aopc_ins = si / (n + 1);
    double comp = 0.0, suff = 0.0;
    for (int b = 0; b < FAITH_N_BINS; b++) {
        int k = faith_bin_tokens(n, faith_bins_pct[b]);
        c->comp_bin[b] = c->del[0] - c->del[k];
        c->suff_bin[b] = c->del[0] - c->ins[k];
        comp += c->comp_bin[b];
        suff += c->suff_bin[b];
    }
    c->comp = comp / FAITH_N_BINS;
    c->suff = suff / FAITH_N_BINS;
}

static uint64_t splitmix64(uint64_t *s) {
    /* Steele, Lea, Flood 2014, "Fast Splittable Pseudorandom Number Generators" */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int faith_random_order(const uint8_t *removable, int T, uint64_t seed, int *order) {
    int n = 0;
    for (int t = 0; t < T; t++)
        if (removable[t]) order[n++] = t;
    uint64_t s = seed;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(splitmix64(&s) % (uint64_t)(i + 1));
        int x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    return n;
}

/* ---- the curves -------------------------------------------------------------------- */

typedef struct {
    int T, n;
    const uint8_t *removable;
    const int *order;
    faith_prob_fn fn;
    void *ctx;
    uint8_t *keep;     /* (threads, T) scratch */
    double *del, *ins;
    as_status *st;     /* (2 n) */
    as_error *errs;    /* (2 n) */
} curve_job;

/* Task i < n + 1: del[i]; else ins[i - n] (1 .. n - 1). */
static void curve_task(void *ctx, int i, int tid) {
    curve_job *j = ctx;
    uint8_t *keep = j->keep + (size_t)tid * j->T;
    const int ins = i > j->n, k = ins ? i - j->n : i;
    for (int t = 0; t < j->T; t++) keep[t] = ins ? !j->removable[t] : 1;
    for (int r = 0; r < k; r++) keep[j->order[r]] = (uint8_t)ins;
    j->st[i] = j->fn(j->ctx, keep, ins ? &j->ins[k] : &j->del[k], &j->errs[i]);
}

as_status faith_curves(int T, const uint8_t *removable, const int *order, int n, faith_prob_fn fn, void *ctx,
                       int threads, double *del, double *ins, as_error *err) {
    if (threads < 1) threads = 1;
    const int tasks = 2 * n; /* del[0 .. n], ins[1 .. n - 1] */
    curve_job j = {T, n, removable, order, fn, ctx, NULL, del, ins, NULL, NULL};
    j.keep = as_malloc_array((size_t)threads * (T > 0 ? T : 1), 1);
    j.st = as_calloc((size_t)tasks, sizeof(as_status));
    j.errs = as_calloc((size_t)tasks, sizeof(as_error));
    as_status s = AS_OK;
    if (!j.keep || !j.st || !j.errs) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    as_parallel_for(tasks, threads, curve_task, &j);
    for (int i = 0; i < tasks; i++)
        if (j.st[i]) {
            s = j.st[i];
            if (err) *err = j.errs[i];
            goto cleanup;
        }
    ins[0] = del[n];
    ins[n] = del[0];
cleanup:
    free(j.keep);
    free(j.st);
    free(j.errs);
    return s;
}
