/* faith_model.c — faith_compute and faith_corpus_sst2 (include/attnscope/faith.h): on a
 * real sequence classifier, which tokens are removable, each method's relevance of every
 * token for the predicted class (sal_compute for grad / gxi / ig; one forward keeping the
 * attention, values and hidden states for rollout, flow, norm, norm2 and alti through
 * attr_compute_run; attr_compute for gradient-weighted attention), and the probability of
 * a perturbed input (one forward on one thread). The metrics and curves are in faith.c.
 * What it does not: write JSON (faith_out.c) or print.
 */
#include "analysis/faith.h"
#include "attnscope/analysis.h"
#include "io/tsv.h"
#include "model/model.h"
#include "tokenize/tokenizer.h"

#include <math.h>
#include <string.h>

/* ---- the input and its perturbations ------------------------------------------------ */

/* removable (T): real tokens that are not the model's special tokens. Returns n. */
static int removable_tokens(const as_model *m, const as_encoding *enc, uint8_t *removable) {
    static const tok_special SP[] = {TOK_SP_CLS, TOK_SP_SEP, TOK_SP_PAD, TOK_SP_BOS, TOK_SP_EOS};
    int n = 0;
    for (int t = 0; t < enc->n; t++) {
        int r = (!enc->mask || enc->mask[t]) && (!enc->seq || enc->seq[t] >= 0);
        for (size_t k = 0; r && m->tok && k < sizeof SP / sizeof SP[0]; k++)
            if (enc->ids[t] == tok_special_id(m->tok, SP[k])) r = 0;
        removable[t] = (uint8_t)r;
        n += r;
    }
    return n;
}

typedef struct {
    const as_model *m;
    const as_encoding *enc;
    faith_removal removal;
    int32_t mask_id; /* FAITH_MASK: the id put in a removed token's place */
    int cls;         /* the class whose probability is read */
} prob_ctx;

/* Softmax of the logits (C) in double: p[c]. */
static double softmax_at(const float *lg, int C, int c) {
    double mx = lg[0], z = 0.0;
    for (int i = 1; i < C; i++) mx = lg[i] > mx ? lg[i] : mx;
    for (int i = 0; i < C; i++) z += exp((double)lg[i] - mx);
    return exp((double)lg[c] - mx) / z;
}

/* faith_prob_fn of a real model: the perturbed encoding, one forward on one thread. */
static as_status model_prob(void *ctx, const uint8_t *keep, double *p, as_error *err) {
    const prob_ctx *c = ctx;
    const as_encoding *e = c->enc;
    const int T = e->n;
    as_encoding q = {0};
    int32_t *i32 = as_malloc_array((size_t)T * 5, sizeof(int32_t));
    int8_t *seq = as_malloc_array((size_t)T, 1);
    if (!i32 || !seq) {
        free(i32);
        free(seq);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    q.ids = i32, q.type_ids = i32 + T, q.mask = i32 + 2 * T, q.start = i32 + 3 * T, q.end = i32 + 4 * T;
    q.seq = seq;
    q.type_ids_given = e->type_ids_given;
    for (int t = 0; t < T; t++) {
        if (!keep[t] && c->removal == FAITH_DELETE) continue;
        const int k = q.n++;
        q.ids[k] = keep[t] ? e->ids[t] : c->mask_id;
        q.type_ids[k] = e->type_ids ? e->type_ids[t] : 0;
        q.mask[k] = e->mask ? e->mask[t] : 1;
        q.start[k] = e->start ? e->start[t] : -1;
        q.end[k] = e->end ? e->end[t] : -1;
        q.seq[k] = e->seq ? e->seq[t] : 0;
    }
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 1};
    as_run *r = NULL;
    as_status s = as_forward(c->m, &q, &spec, &r, err);
    if (!s) *p = softmax_at(r->logits, r->logits_cols, c->cls);
    as_run_free(r);
    free(i32);
    free(seq);
    return s;
}

/* ---- the relevances ---------------------------------------------------------------- */

/* rel (T) of a saliency method for class cls. */
static as_status saliency_rel(const as_model *m, const as_encoding *enc, sal_method method, int cls,
                              const faith_opts *o, float *rel, as_error *err) {
    sal_opts so = {.method = method, .target = cls, .steps = method == SAL_IG ? o->steps : 0, .threads = o->threads};
    sal_result r = {0};
    as_status s = sal_compute(m, enc, &so, &r, err);
    if (!s) memcpy(rel, r.scores, (size_t)enc->n * sizeof(float));
    sal_result_free(&r);
    return s;
}

static attr_method attr_of(faith_method fm) {
    switch (fm) {
    case FAITH_FLOW: return ATTR_FLOW;
    case FAITH_NORM: return ATTR_NORM;
    case FAITH_NORM2: return ATTR_NORM2;
    case FAITH_ALTI: return ATTR_ALTI;
    case FAITH_GRAD_ATTN: return ATTR_GRAD;
    default: return ATTR_ROLLOUT;
    }
}

/* rel (T) of an attribution method: attr_relevance, the row of the token the classifier
 * reads (norm: of the last layer, summed over heads; norm2: the last layer's; alti: the
 * whole model's).
 * *run: a forward keeping what rollout .. alti read, made on first use (the caller frees). */
static as_status attrib_rel(const as_model *m, const as_encoding *enc, faith_method fm, int cls,
                            const faith_opts *o, as_run **run, float *rel, as_error *err) {
    attr_opts ao = {.method = attr_of(fm), .target = fm == FAITH_GRAD_ATTN ? cls : -1, .position = -1,
                    .threads = o->threads};
    attr_result r = {0};
    as_status s;
    if (fm == FAITH_GRAD_ATTN) {
        s = attr_compute(m, enc, &ao, &r, err);
    } else {
        if (!*run) {
            as_capture_spec spec = {.what = CAP_ATTN | CAP_QKV | CAP_HIDDEN, .layer = -1, .head = -1,
                                    .threads = o->threads};
            if ((s = as_forward(m, enc, &spec, run, err))) return s;
        }
        s = attr_compute_run(m, enc, *run, &ao, &r, err);
    }
    if (!s) s = attr_relevance(m, enc, &r, rel, err);
    attr_result_free(&r);
    return s;
}

/* c->relevance and c->order of method c->method. */
static as_status rank_method(const as_model *m, const as_encoding *enc, const uint8_t *removable, int cls,
                             const faith_opts *o, as_run **run, faith_curve *c, as_error *err) {
    const int T = enc->n;
    as_status s = AS_OK;
    switch (c->method) {
    case FAITH_GRAD: s = saliency_rel(m, enc, SAL_GRAD, cls, o, c->relevance, err); break;
    case FAITH_GXI: s = saliency_rel(m, enc, SAL_GXI, cls, o, c->relevance, err); break;
    case FAITH_IG: s = saliency_rel(m, enc, SAL_IG, cls, o, c->relevance, err); break;
    case FAITH_RANDOM: {
        int n = faith_random_order(removable, T, o->seed, c->order);
        for (int t = 0; t < T; t++) c->relevance[t] = 0.0f;
        for (int k = 0; k < n; k++) c->relevance[c->order[k]] = (float)(n - k);
        return AS_OK;
    }
    default: s = attrib_rel(m, enc, c->method, cls, o, run, c->relevance, err);
    }
    if (!s) faith_rank(c->relevance, removable, T, c->order);
    return s;
}

/* ---- faith_compute ------------------------------------------------------------------ */

void faith_result_free(faith_result *r) {
    if (!r) return;
    for (int i = 0; r->curves && i < r->n_curves; i++) {
        free(r->curves[i].relevance);
        free(r->curves[i].order);
        free(r->curves[i].del);
        free(r->curves[i].ins);
    }
    free(r->curves);
    free(r->probs);
    memset(r, 0, sizeof *r);
}

/* Checks m, enc and o; *mask_id for FAITH_MASK. */
static as_status check_request(const as_model *m, const as_encoding *enc, const faith_opts *o, int32_t *mask_id,
                               as_error *err) {
    const as_config *c = as_model_config(m);
    if (!(as_model_heads(m) & HEAD_CLASSIFIER) || c->num_labels <= 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: faithfulness needs a sequence-classifier head", as_model_dir(m));
    if (!enc || enc->n <= 0 || !enc->ids) return as_err_set(err, AS_ERR_INPUT, "empty input: no tokens");
    if (o->methods & ~FAITH_ALL_METHODS) return as_err_set(err, AS_ERR_INPUT, "unknown faithfulness method");
    if ((unsigned)o->removal > FAITH_MASK) return as_err_set(err, AS_ERR_INPUT, "unknown removal %d", (int)o->removal);
    *mask_id = -1;
    if (o->removal == FAITH_MASK) {
        if (m->tok) *mask_id = tok_special_id(m->tok, TOK_SP_MASK);
        if (*mask_id < 0 && m->tok) *mask_id = tok_special_id(m->tok, TOK_SP_UNK);
        if (*mask_id < 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: removal by mask needs a [MASK] or [UNK] token in the tokenizer",
                              as_model_dir(m));
    }
    return AS_OK;
}

/* out->curves: n_curves entries with their arrays for T tokens and n removable. */
static as_status curves_alloc(unsigned methods, int T, int n, faith_result *out, as_error *err) {
    for (int i = 0; i < FAITH_N_METHODS; i++) out->n_curves += (methods >> i) & 1u;
    if (!(out->curves = as_calloc((size_t)out->n_curves, sizeof(faith_curve))))
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int i = 0, k = 0; i < FAITH_N_METHODS; i++) {
        if (!((methods >> i) & 1u)) continue;
        faith_curve *c = &out->curves[k++];
        c->method = (faith_method)i;
        c->relevance = as_calloc((size_t)T, sizeof(float));
        c->order = as_calloc((size_t)n, sizeof(int));
        c->del = as_calloc((size_t)n + 1, sizeof(double));
        c->ins = as_calloc((size_t)n + 1, sizeof(double));
        if (!c->relevance || !c->order || !c->del || !c->ins) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    return AS_OK;
}

/* out->probs, out->predicted: the whole input's forward on one thread (as del[0]). */
static as_status predict(const as_model *m, const as_encoding *enc, faith_result *out, as_error *err) {
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 1};
    as_run *r = NULL;
    as_status s = as_forward(m, enc, &spec, &r, err);
    if (s) return s;
    out->C = r->logits_cols;
    if (!(out->probs = as_calloc((size_t)out->C, sizeof(double)))) {
        as_run_free(r);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    for (int i = 0; i < out->C; i++) {
        out->probs[i] = softmax_at(r->logits, out->C, i);
        if (r->logits[i] > r->logits[out->predicted]) out->predicted = i;
    }
    as_run_free(r);
    return AS_OK;
}

as_status faith_compute(const as_model *m, const as_encoding *enc, const faith_opts *o, faith_result *out,
                        as_error *err) {
    memset(out, 0, sizeof *out);
    int32_t mask_id = -1;
    as_status s = check_request(m, enc, o, &mask_id, err);
    if (s) return s;
    const int T = enc->n, threads = o->threads > 0 ? o->threads : as_n_cores();
    const unsigned methods = o->methods ? o->methods : FAITH_ALL_METHODS;
    as_run *run = NULL;
    uint8_t *removable = as_malloc_array((size_t)T, 1);
    if (!removable) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    out->T = T;
    out->n = removable_tokens(m, enc, removable);
    if (out->n == 0) {
        s = as_err_set(err, AS_ERR_INPUT, "no token to remove: the input has only special tokens");
        goto cleanup;
    }
    if ((s = curves_alloc(methods, T, out->n, out, err)) || (s = predict(m, enc, out, err))) goto cleanup;
    prob_ctx pc = {m, enc, o->removal, mask_id, out->predicted};
    for (int i = 0; i < out->n_curves; i++) {
        faith_curve *c = &out->curves[i];
        if ((s = rank_method(m, enc, removable, out->predicted, o, &run, c, err))) {
            as_err_prefix(err, "%s", faith_method_name(c->method));
            goto cleanup;
        }
        if ((s = faith_curves(T, removable, c->order, out->n, model_prob, &pc, threads, c->del, c->ins, err)))
            goto cleanup;
        faith_score(c, out->n);
        out->empty = c->del[out->n];
    }
cleanup:
    as_run_free(run);
    free(removable);
    if (s) faith_result_free(out);
    return s;
}

/* ---- the corpus ---------------------------------------------------------------------- */

static void accumulate(faith_summary *sm, const faith_result *r, int label) {
    sm->n_sent++;
    sm->accuracy += r->predicted == label;
    sm->mean_p += r->probs[r->predicted];
    sm->mean_empty += r->empty;
    sm->mean_tokens += r->n;
    for (int i = 0; i < r->n_curves; i++) {
        const faith_curve *c = &r->curves[i];
        sm->aopc_del[i] += c->aopc_del;
        sm->aopc_ins[i] += c->aopc_ins;
        sm->comp[i] += c->comp;
        sm->suff[i] += c->suff;
        for (int b = 0; b < FAITH_N_BINS; b++) {
            sm->comp_bin[i][b] += c->comp_bin[b];
            sm->suff_bin[i][b] += c->suff_bin[b];
        }
    }
}

static void divide(faith_summary *sm) {
    const double d = sm->n_sent > 0 ? sm->n_sent : 1;
    sm->accuracy /= d, sm->mean_p /= d, sm->mean_empty /= d, sm->mean_tokens /= d;
    for (int i = 0; i < sm->n_methods; i++) {
        sm->aopc_del[i] /= d, sm->aopc_ins[i] /= d, sm->comp[i] /= d, sm->suff[i] /= d;
        for (int b = 0; b < FAITH_N_BINS; b++) sm->comp_bin[i][b] /= d, sm->suff_bin[i][b] /= d;
    }
}

as_status faith_corpus_sst2(const as_model *m, const char *path, int limit, const faith_opts *o, int progress,
                            faith_summary *out, as_error *err) {
    memset(out, 0, sizeof *out);
    tsv_corpus corpus = {0};
    as_status s = tsv_read_sst2(path, limit, &corpus, err);
    const unsigned methods = o->methods ? o->methods : FAITH_ALL_METHODS;
    for (int i = 0; i < FAITH_N_METHODS; i++)
        if ((methods >> i) & 1u) out->methods[out->n_methods++] = (faith_method)i;
    const as_encode_opts eo = {.max_len = 0, .truncate = 1};
    const double t0 = as_now();
    for (int i = 0; !s && i < corpus.n; i++) {
        as_encoding enc = {0};
        faith_result r = {0};
        faith_opts so = *o;
        so.seed = o->seed + (uint64_t)i;
        if (!(s = as_encode(m, corpus.rows[i].text, NULL, &eo, &enc, err))) {
            uint8_t *rm = as_malloc_array((size_t)enc.n, 1);
            int n = rm ? removable_tokens(m, &enc, rm) : -1;
            free(rm);
            if (n < 0) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            else if (n == 0) out->n_skipped++;
            else if (!(s = faith_compute(m, &enc, &so, &r, err))) accumulate(out, &r, corpus.rows[i].label);
        }
        if (s) as_err_prefix(err, "%s:%d", path, corpus.rows[i].line);
        faith_result_free(&r);
        as_encoding_free(&enc);
        if (progress && !s)
            fprintf(stderr, "\rfaithfulness: %d / %d sentences, %.0f s", i + 1, corpus.n, as_now() - t0);
    }
    if (progress) fputc('\n', stderr);
    divide(out);
    tsv_corpus_free(&corpus);
    return s;
}
