/* beam.c — beam search (attnscope/beam.h; `attnscope generate --beams N`), with the semantics of
 * Hugging Face transformers' generate (num_beams > 1, no sampling, batch of one):
 * generation/utils.py _beam_search and generation/beam_search.py BeamSearchScorer /
 * BeamHypotheses, with the configuration's logits processors of logits_process.py
 * (NoBadWordsLogitsProcessor, ForcedBOSTokenLogitsProcessor, ForcedEOSTokenLogitsProcessor).
 *
 * Each step: every beam's last-position logits -> log_softmax -> bad_words_ids and the
 * forced-token processors -> + the beam's running score (float32 sums, as torch keeps them); the best
 * max(2, 1 + n_eos) * beams candidates over all beams, best first. A candidate that is an
 * end-of-sequence id finishes a hypothesis when it ranks among the first `beams` (score
 * sum / generated_length^length_penalty, generated_length counting the end id); the others
 * fill the next step's beams in order. The search stops once `beams` hypotheses are
 * finished and (early_stopping) at once, or (otherwise) when the best candidate's sum,
 * divided by the current generated length^length_penalty, cannot beat the worst finished
 * score; at the length limit the open beams join the finished ones. The initial beams but
 * the first start at -1e9 so the first step expands one beam. A finished hypothesis is
 * returned with the first end-of-sequence id appended (BeamSearchScorer.finalize).
 *
 * Models with a generation cache keep one key/value cache per beam: the prompt goes
 * through once (model_forward_step; an encoder-decoder model's source through the encoder
 * once and the decoder's start through model_s2s_step) and its cache is copied to every
 * beam, then each step runs every beam's new id as one batch of rows (model_forward_beams,
 * model_s2s_beams: the weights read once per step, not once per beam); the next step's
 * beams take their parents' caches, the first child of a parent its cache itself and the
 * others copies (model_kv_copy) into the caches of the parents no beam continues. Dynamic
 * NTK / LongRoPE models, and full_forward, run each beam's whole sequence again each step,
 * beams holding the same ids sharing one forward.
 *
 * What it does not: sampling beams, diverse or constrained beam search, length or
 * repetition processors (min_length, no_repeat_ngram_size, ...).
 */
#include "attnscope/beam.h"
#include "attnscope/generate.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double score;
    float sum;
    int len;      /* ids kept: prompt + generated, without the end id */
    int eos;      /* finished by an end-of-sequence id */
    int order;    /* insertion order */
    int32_t *ids; /* (cap) */
} beam_hyp;

/* BeamHypotheses: at most `beams` finished hypotheses in insertion order, and the worst
 * score among them (1e9 while empty, as transformers starts it). */
typedef struct {
    beam_hyp *h; /* (beams + 1) */
    int n, beams, added, prompt_len;
    double worst, lp;
} beam_hyps;

/* BeamHypotheses.add: keeps the hypothesis when there is room or it beats the worst; past
 * `beams` the lowest (the earliest of equal scores) leaves. */
static void hyps_add(beam_hyps *s, const int32_t *ids, int len, float sum, int gen_len, int eos) {
    double score = (double)sum / pow((double)gen_len, s->lp);
    if (!(s->n < s->beams || score > s->worst)) return;
    beam_hyp *h = &s->h[s->n++];
    memcpy(h->ids, ids, (size_t)len * sizeof(int32_t));
    h->len = len, h->sum = sum, h->score = score, h->eos = eos, h->order = s->added++;
    if (s->n > s->beams) {
        int lo = 0;
        for (int i = 1; i < s->n; i++)
            if (s->h[i].score < s->h[lo].score) lo = i;
        beam_hyp gone = s->h[lo];
        memmove(s->h + lo, s->h + lo + 1, (size_t)(s->n - lo - 1) * sizeof(beam_hyp));
        s->h[--s->n] = gone; /* the slot keeps its ids buffer */
        s->worst = s->h[0].score;
        for (int i = 1; i < s->n; i++)
            if (s->h[i].score < s->worst) s->worst = s->h[i].score;
    } else if (score < s->worst) s->worst = score;
}

/* BeamHypotheses.is_done for early_stopping True / False; cur_len counts the new token. */
static int hyps_done(const beam_hyps *s, float best_sum, int cur_len, int early) {
    if (s->n < s->beams) return 0;
    if (early) return 1;
    return s->worst >= (double)best_sum / pow((double)(cur_len - s->prompt_len), s->lp);
}

/* log_softmax of one row of V logits into out (float, from double sums). */
static void log_softmax_row(const float *x, int V, float *out) {
    double mx = x[0], z = 0.0;
    for (int v = 1; v < V; v++)
        if (x[v] > mx) mx = x[v];
    for (int v = 0; v < V; v++) z += exp((double)x[v] - mx);
    double lse = mx + log(z);
    for (int v = 0; v < V; v++) out[v] = (float)((double)x[v] - lse);
}

/* The k best of n scores into idx/val, best first (ties: lower index first). */
static void top_k(const float *x, size_t n, int k, int *idx, float *val) {
    int have = 0;
    for (size_t i = 0; i < n; i++) {
        float s = x[i];
        if (have == k && !(s > val[k - 1])) continue;
        int j = have < k ? have++ : k - 1;
        while (j > 0 && s > val[j - 1]) {
            val[j] = val[j - 1], idx[j] = idx[j - 1];
            j--;
        }
        val[j] = s, idx[j] = (int)i;
    }
}

/* The next-token log-probabilities (V) of the sequence ids[0..n). */
static as_status beam_logprobs(const as_model *m, const as_encoding *src, const int32_t *ids, int n, int threads,
                               float *out, as_error *err) {
    as_encoding enc = {0};
    as_run *r = NULL;
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = threads};
    int V = as_model_config(m)->vocab_size;
    as_status s = as_encoding_from_ids(m, ids, NULL, n, &enc, err);
    if (!s) s = src ? as_forward_seq2seq(m, src, &enc, &spec, &r, err) : as_forward(m, &enc, &spec, &r, err);
    if (!s) {
        const as_run *lr = src ? r->dec : r;
        if (!lr || !lr->logits || lr->logits_cols != V || lr->logits_rows != n)
            s = as_err_set(err, AS_ERR_INTERNAL, "beam search: the forward gave no LM logits");
        else log_softmax_row(lr->logits + (size_t)(n - 1) * V, V, out);
    }
    as_run_free(r);
    as_encoding_free(&enc);
    return s;
}

/* Every beam's next-token log-probabilities: lp (nb, V) of the sequences ids (nb, cap) of
 * cur ids each. On caches kv (nb): the first step (empty caches, every beam the prompt) runs
 * the prompt once (an encoder-decoder model's on x, the state of its source) and copies its
 * cache to every beam; later steps run every beam's last id as one batch
 * (model_forward_beams, model_s2s_beams). kv NULL: whole forwards, a beam holding the ids
 * of an earlier one taking its row. */
static as_status beams_logprobs(const as_model *m, const as_encoding *src, model_s2s_kv *x, model_kv *kv,
                                const int32_t *ids, int cap, int nb, int cur, int threads, float *lp, as_error *err) {
    int V = as_model_config(m)->vocab_size;
    as_status s = AS_OK;
    if (kv && kv[0].n > 0) {
        int32_t last[GEN_MAX_BEAMS];
        for (int b = 0; b < nb; b++) last[b] = ids[(size_t)b * cap + cur - 1];
        s = src ? model_s2s_beams(m, x, kv, nb, last, threads, lp, err)
                : model_forward_beams(m, kv, nb, last, threads, lp, err);
        for (int b = 0; !s && b < nb; b++) log_softmax_row(lp + (size_t)b * V, V, lp + (size_t)b * V);
        return s;
    }
    if (kv) { /* the first step: every beam holds the prompt, run once on one cache */
        model_kv *one = src ? &x->self : &kv[0];
        if ((s = src ? model_s2s_step(m, x, ids, cur, threads, lp, NULL, err)
                     : model_forward_step(m, one, ids, cur, threads, lp, NULL, err)))
            return s;
        log_softmax_row(lp, V, lp);
        for (int b = 0; b < nb; b++) {
            if (b) memcpy(lp + (size_t)b * V, lp, (size_t)V * sizeof(float));
            if (&kv[b] != one) model_kv_copy(&kv[b], one);
        }
        return s;
    }
    for (int b = 0; b < nb && !s; b++) {
        int same = -1;
        for (int b2 = 0; b2 < b && same < 0; b2++)
            if (!memcmp(ids + (size_t)b2 * cap, ids + (size_t)b * cap, (size_t)cur * sizeof(int32_t))) same = b2;
        if (same >= 0) memcpy(lp + (size_t)b * V, lp + (size_t)same * V, (size_t)V * sizeof(float));
        else s = beam_logprobs(m, src, ids + (size_t)b * cap, cur, threads, lp + (size_t)b * V, err);
    }
    return s;
}

/* Beam b of the next step continues beam parent[b]: kv[] reordered so. A parent's first
 * child takes its cache; every further child gets a copy in the cache of a beam no child
 * continues (as many of those as further children; they are nobody's source, so the
 * copies read caches still whole). taken (nb) and next (nb) are scratch. */
static void beam_kv_reorder(model_kv *kv, const int *parent, int nb, int *taken, model_kv *next) {
    for (int b = 0; b < nb; b++) taken[b] = -1;
    for (int b = 0; b < nb; b++)
        if (taken[parent[b]] < 0) {
            taken[parent[b]] = b;
            next[b] = kv[parent[b]];
        }
    int spare = 0;
    for (int b = 0; b < nb; b++) {
        if (taken[parent[b]] == b) continue;
        while (taken[spare] >= 0) spare++;
        taken[spare] = b;
        next[b] = kv[spare];
        model_kv_copy(&next[b], &kv[parent[b]]);
    }
    memcpy(kv, next, (size_t)nb * sizeof *kv);
}

/* The caches of a cached search: nb empty beam caches for cap positions in kv and, for an
 * encoder-decoder model, src through its encoder into x. */
static as_status beam_caches_init(const as_model *m, const as_encoding *src, int threads, int nb, int cap,
                                  model_s2s_kv *x, model_kv *kv, as_error *err) {
    as_status s = src ? model_s2s_kv_init(m, src, cap, threads, x, err) : AS_OK;
    for (int b = 0; b < nb && !s; b++)
        s = src ? model_s2s_beam_cache(m, cap, &kv[b], err) : model_kv_init(m, cap, &kv[b], err);
    return s;
}

/* Frees what beam_caches_init made (kv, NULL when the search had no caches, included). */
static void beam_caches_free(int nb, model_s2s_kv *x, model_kv *kv) {
    for (int b = 0; kv && b < nb; b++) model_kv_free(&kv[b]);
    free(kv);
    model_s2s_kv_free(x);
}

static const beam_hyp *g_sort_hyps;
/* ascending score, then insertion order (Python's stable sort of the list) */
static int hyp_cmp(const void *a, const void *b) {
    const beam_hyp *x = &g_sort_hyps[*(const int *)a], *y = &g_sort_hyps[*(const int *)b];
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return (x->order > y->order) - (x->order < y->order);
}

void gen_beam_result_free(gen_beam_result *r) {
    if (!r) return;
    free(r->ids);
    free(r->len);
    free(r->sum_logprobs);
    free(r->score);
    memset(r, 0, sizeof *r);
}

as_status gen_beam_search(const as_model *m, const as_encoding *src, const int32_t *prompt, int prompt_len,
                          int max_len, const gen_beam_opts *o, gen_beam_result *out, as_error *err) {
    const as_config *c = as_model_config(m);
    int V = c->vocab_size, nb = o->beams, cap = max_len;
    AS_ASSERT(nb >= 1 && nb <= GEN_MAX_BEAMS && o->num_return >= 1 && o->num_return <= nb);
    AS_ASSERT(prompt_len >= 1 && prompt_len < max_len);
    int keep = (c->n_eos_ids + 1 > 2 ? c->n_eos_ids + 1 : 2) * nb;
    size_t NV = (size_t)nb * (size_t)V;
    if ((size_t)keep > NV) keep = (int)NV;
    memset(out, 0, sizeof *out);
    if (c->n_bad_words < 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: config.json's bad_words_ids is not lists of ids below vocab_size "
                                             "within %d sequences of %d ids: beam search does not run with it",
                          as_model_dir(m), AS_MAX_BAD_WORDS, AS_MAX_BAD_WORD_LEN);
    as_status s = AS_OK;
    int32_t *ids = as_malloc_array(as_mul_size((size_t)nb, (size_t)cap), sizeof(int32_t));
    int32_t *nids = as_malloc_array(as_mul_size((size_t)nb, (size_t)cap), sizeof(int32_t));
    int32_t *hyp_ids = as_malloc_array(as_mul_size((size_t)nb + 1, (size_t)cap), sizeof(int32_t));
    float *lp = as_malloc_array(NV, sizeof(float));
    int *top = as_malloc_array((size_t)keep, sizeof(int)), *sel_b = as_malloc_array((size_t)nb, sizeof(int));
    float *topv = as_malloc_array((size_t)keep, sizeof(float)), *bscore = as_malloc_array((size_t)nb, sizeof(float));
    float *nscore = as_malloc_array((size_t)nb, sizeof(float));
    int32_t *sel_tok = as_malloc_array((size_t)nb, sizeof(int32_t));
    int *order = as_malloc_array((size_t)nb + 1, sizeof(int));
    int cached = !o->full_forward && (src ? model_s2s_kv_supported(m) : model_kv_supported(m));
    model_kv *kv = cached ? as_calloc((size_t)nb * 2, sizeof *kv) : NULL; /* nb caches, nb scratch */
    model_s2s_kv x = {0}; /* an encoder-decoder model's source, through the encoder once */
    beam_hyps hs = {.h = as_calloc((size_t)nb + 1, sizeof(beam_hyp)), .beams = nb, .prompt_len = prompt_len,
                    .worst = 1e9, .lp = o->length_penalty};
    if (!ids || !nids || !hyp_ids || !lp || !top || !sel_b || !topv || !bscore || !nscore || !sel_tok || !order ||
        !hs.h || (cached && !kv)) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if (cached && (s = beam_caches_init(m, src, o->threads, nb, cap, &x, kv, err))) goto cleanup;
    for (int i = 0; i <= nb; i++) hs.h[i].ids = hyp_ids + (size_t)i * cap;
    for (int b = 0; b < nb; b++) {
        memcpy(ids + (size_t)b * cap, prompt, (size_t)prompt_len * sizeof(int32_t));
        bscore[b] = b ? -1e9f : 0.0f;
    }
    int cur = prompt_len, done = 0;
    while (!done && cur < max_len) {
        if ((s = beams_logprobs(m, src, &x, kv, ids, cap, nb, cur, o->threads, lp, err))) goto cleanup;
        for (int b = 0; b < nb; b++) {
            float *row = lp + (size_t)b * V;
            gen_process_logits(c, ids + (size_t)b * cap, cur, max_len, row);
            for (int v = 0; v < V; v++) row[v] += bscore[b];
        }
        top_k(lp, NV, keep, top, topv);
        int nsel = 0;
        for (int r = 0; r < keep && nsel < nb; r++) {
            int b = top[r] / V, tok = top[r] % V;
            if (gen_is_eos(c, tok)) {
                if (r < nb) hyps_add(&hs, ids + (size_t)b * cap, cur, topv[r], cur + 1 - prompt_len, 1);
                continue;
            }
            sel_b[nsel] = b, sel_tok[nsel] = tok, nscore[nsel] = topv[r];
            nsel++;
        }
        if (nsel < nb) {
            s = as_err_set(err, AS_ERR_INPUT, "beam search: the vocabulary (%d ids) is too small for %d beams", V, nb);
            goto cleanup;
        }
        done = hyps_done(&hs, topv[0], cur + 1, o->early_stopping);
        for (int b = 0; b < nb; b++) {
            int32_t *dst = nids + (size_t)b * cap;
            memcpy(dst, ids + (size_t)sel_b[b] * cap, (size_t)cur * sizeof(int32_t));
            dst[cur] = sel_tok[b];
            bscore[b] = nscore[b];
        }
        if (cached) beam_kv_reorder(kv, sel_b, nb, order, kv + nb);
        int32_t *t = ids;
        ids = nids, nids = t;
        cur++;
    }
    if (!done)
        for (int b = 0; b < nb; b++) hyps_add(&hs, ids + (size_t)b * cap, cur, bscore[b], cur - prompt_len, 0);
    for (int i = 0; i < hs.n; i++) order[i] = i;
    g_sort_hyps = hs.h;
    qsort(order, (size_t)hs.n, sizeof(int), hyp_cmp);
    int R = o->num_return < hs.n ? o->num_return : hs.n;
    out->cap = cap;
    out->ids = as_malloc_array(as_mul_size((size_t)R, (size_t)cap), sizeof(int32_t));
    out->len = as_malloc_array((size_t)R, sizeof(int));
    out->sum_logprobs = as_malloc_array((size_t)R, sizeof(float));
    out->score = as_malloc_array((size_t)R, sizeof(double));
    if (!out->ids || !out->len || !out->sum_logprobs || !out->score) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (int r = 0; r < R; r++) {
        const beam_hyp *h = &hs.h[order[hs.n - 1 - r]];
        int32_t *dst = out->ids + (size_t)r * cap;
        memcpy(dst, h->ids, (size_t)h->len * sizeof(int32_t));
        out->len[r] = h->len;
        if (h->eos && h->len < cap) dst[out->len[r]++] = c->eos_ids[0];
        out->sum_logprobs[r] = h->sum;
        out->score[r] = h->score;
    }
    out->n = R;
cleanup:
    if (s) gen_beam_result_free(out);
    free(ids);
    free(nids);
    free(hyp_ids);
    free(lp);
    free(top);
    free(sel_b);
    free(topv);
    free(bscore);
    free(nscore);
    free(sel_tok);
    free(order);
    free(hs.h);
    beam_caches_free(nb, &x, kv);
    return s;
}

/* Room for b's arrays (b's sizes set), the row buffers zeroed when rows is set. */
static as_status beam_rows_alloc(gen_beam_rows *b, int rows, as_error *err) {
    size_t R = (size_t)b->R, per = as_mul_size((size_t)b->Smax * b->L, (size_t)b->H);
    size_t S0 = (size_t)(b->lens[0] - b->pl), T0 = (size_t)b->lens[0], Ts = (size_t)b->Ts;
    b->seqs = as_malloc_array(as_mul_size(R, (size_t)b->Tmax), sizeof(int32_t));
    b->scores = as_calloc(R, sizeof(float));
    b->sums = as_calloc(R, sizeof(float));
    if (!b->seqs || !b->scores || !b->sums) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (!rows) return AS_OK;
    /* as_mul_size gives 0 on overflow: refused like a failed allocation */
    size_t n_all = as_mul_size(as_mul_size(R, per), (size_t)b->Tmax), n_best = as_mul_size(S0 * b->L * b->H, T0);
    b->rows = n_all ? as_calloc(n_all, sizeof(float)) : NULL;
    b->best = n_best ? as_calloc(n_best, sizeof(float)) : NULL;
    if (!b->rows || !b->best) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (!Ts) return AS_OK;
    n_all = as_mul_size(as_mul_size(R, per), Ts), n_best = as_mul_size(S0 * b->L * b->H, Ts);
    b->xrows = n_all ? as_calloc(n_all, sizeof(float)) : NULL;
    b->xbest = n_best ? as_calloc(n_best, sizeof(float)) : NULL;
    return b->xrows && b->xbest ? AS_OK : as_err_set(err, AS_ERR_INTERNAL, "out of memory");
}

/* Sets b's sizes and sequences from br (prompt length pl) and allocates its arrays, the row
 * buffers zeroed when rows is set; b freed on error. */
static as_status beam_rows_prepare(const as_model *m, const as_encoding *src, const gen_beam_result *br, int pl,
                                   int rows, gen_beam_rows *b, as_error *err) {
    const as_config *c = as_model_config(m);
    AS_ASSERT(br->n >= 1);
    *b = (gen_beam_rows){.R = br->n, .pl = pl, .L = c->n_dec_layer ? c->n_dec_layer : c->n_layer, .H = c->n_head,
                         .Ts = src ? src->n : 0};
    for (int r = 0; r < br->n; r++) b->Tmax = br->len[r] > b->Tmax ? br->len[r] : b->Tmax;
    b->Smax = b->Tmax - pl;
    as_status s = (b->lens = as_malloc_array((size_t)b->R, sizeof(int32_t)))
                      ? AS_OK
                      : as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int r = 0; !s && r < b->R; r++) b->lens[r] = br->len[r];
    if (!s) s = beam_rows_alloc(b, rows, err);
    for (int r = 0; !s && r < b->R; r++) {
        int32_t *dst = b->seqs + (size_t)r * b->Tmax;
        for (int t = 0; t < b->Tmax; t++) dst[t] = t < br->len[r] ? br->ids[(size_t)r * br->cap + t] : -1;
        if (br->score) b->scores[r] = (float)br->score[r];
        if (br->sum_logprobs) b->sums[r] = br->sum_logprobs[r];
    }
    if (s) gen_beam_rows_free(b);
    return s;
}

as_status gen_beam_rows_init(const as_model *m, const as_encoding *src, const gen_beam_result *br, int pl,
                             int threads, int rows, gen_beam_rows *out, as_error *err) {
    gen_beam_rows *b = out;
    as_status s = beam_rows_prepare(m, src, br, pl, rows, b, err);
    size_t per = (size_t)b->Smax * b->L * b->H;
    for (int r = 0; !s && rows && r < b->R; r++)
        s = gen_sequence_rows(m, src, b->seqs + (size_t)r * b->Tmax, b->lens[r], pl, threads,
                              b->rows + (size_t)r * per * b->Tmax, (size_t)b->Tmax,
                              src ? b->xrows + (size_t)r * per * b->Ts : NULL, err);
    if (!s && rows) { /* sequence 0's rows again at its own length */
        size_t T0 = (size_t)b->lens[0], n = (size_t)(b->lens[0] - pl) * b->L * b->H;
        for (size_t i = 0; i < n; i++) memcpy(b->best + i * T0, b->rows + i * b->Tmax, T0 * sizeof(float));
        if (src) memcpy(b->xbest, b->xrows, n * b->Ts * sizeof(float));
    }
    if (s) gen_beam_rows_free(b);
    return s;
}

as_status gen_result_rows(const as_model *m, const as_encoding *src, const gen_result *g, int threads,
                          gen_beam_rows *out, as_error *err) {
    AS_ASSERT(g->rows);
    int T = g->T;
    gen_beam_result one = {.n = 1, .cap = T, .ids = g->ids, .len = &T};
    as_status s = beam_rows_prepare(m, src, &one, g->prompt_len, 1, out, err);
    if (!s && src) s = gen_sequence_rows(m, src, g->ids, T, g->prompt_len, threads, out->rows, (size_t)T, NULL, err);
    if (s) {
        gen_beam_rows_free(out);
        return s;
    }
    /* one sequence: Tmax = T, so the (steps, L, H, K) steps' rows are rows' (or xrows') layout */
    size_t n = (size_t)g->steps * g->L * g->H * g->K;
    memcpy(src ? out->xrows : out->rows, g->rows, n * sizeof(float));
    memcpy(src ? out->xbest : out->best, g->rows, n * sizeof(float));
    if (src) memcpy(out->best, out->rows, (size_t)g->steps * g->L * g->H * T * sizeof(float));
    return AS_OK;
}

void gen_beam_rows_free(gen_beam_rows *b) {
    if (!b) return;
    free(b->seqs);
    free(b->lens);
    free(b->scores);
    free(b->sums);
    free(b->rows);
    free(b->xrows);
    free(b->best);
    free(b->xbest);
    memset(b, 0, sizeof *b);
}
