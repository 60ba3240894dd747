/* saliency.c — vanilla gradient, gradient x input and integrated gradients of a
 * classifier logit w.r.t. the word-embedding vectors (see saliency.h for the
 * formulas and the choices), for every family with a classifier head. Runs the one
 * forward (model/encoder.c, with a tape and, for integrated gradients, the word vectors
 * given) and its backward (model/backward.c), on the loaded weights in place.
 */
#include "analysis/saliency.h"
#include "model/model.h"

#include <math.h>
#include <string.h>


const char *sal_method_name(sal_method m) {
    switch (m) {
    case SAL_GRAD: return "grad";
    case SAL_GXI: return "gxi";
    case SAL_IG: return "ig";
    }
    return "?";
}

int sal_method_parse(const char *s, sal_method *out) {
    if (!strcmp(s, "grad")) *out = SAL_GRAD;
    else if (!strcmp(s, "gxi")) *out = SAL_GXI;
    else if (!strcmp(s, "ig")) *out = SAL_IG;
    else return -1;
    return 0;
}

void sal_result_free(sal_result *r) {
    if (!r) return;
    free(r->scores);
    free(r->logits);
    free(r->probs);
    memset(r, 0, sizeof *r);
}

/* Checks the input and options against the model; *steps = the integrated-gradient
 * points (0 for grad / gxi). */
static as_status check_request(const as_model *m, const as_encoding *enc, const sal_opts *o, int *steps,
                               as_error *err) {
    const as_config *c = as_model_config(m);
    *steps = 0;
    if (!(as_model_heads(m) & HEAD_CLASSIFIER) || c->num_labels <= 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no sequence-classifier head to explain",
                          as_model_dir(m));
    if (!enc || enc->n <= 0 || !enc->ids) return as_err_set(err, AS_ERR_INPUT, "empty input: no tokens");
    if (o->method == SAL_IG) {
        *steps = o->steps ? o->steps : SAL_DEFAULT_STEPS;
        if (*steps < 1 || *steps > SAL_MAX_STEPS)
            return as_err_set(err, AS_ERR_INPUT, "integrated-gradient steps %d out of range [1, %d]", *steps,
                              SAL_MAX_STEPS);
    } else if (o->method != SAL_GRAD && o->method != SAL_GXI) {
        return as_err_set(err, AS_ERR_INPUT, "unknown saliency method %d", (int)o->method);
    }
    if (o->target < -1 || o->target >= c->num_labels)
        return as_err_set(err, AS_ERR_INPUT, "target class %d out of range [0, %d)", o->target, c->num_labels);
    return AS_OK;
}

/* out->logits (C) given: the softmax into out->probs and the argmax; returns it. */
static int set_prediction(sal_result *out, int C) {
    int pred = 0;
    for (int i = 1; i < C; i++) pred = out->logits[i] > out->logits[pred] ? i : pred;
    double mx = out->logits[pred], z = 0.0;
    for (int i = 0; i < C; i++) z += exp((double)out->logits[i] - mx);
    for (int i = 0; i < C; i++) out->probs[i] = (float)(exp((double)out->logits[i] - mx) / z);
    return pred;
}

/* The backward of logit target of run r (whose forward filled tp) into d_word (T, De)
 * and, when d_attn is non-NULL, the attention gradient (L, H, T, T). */
static as_status backward(const as_model *m, const as_encoding *enc, const float *word, const model_tape *tp,
                          const as_run *r, int threads, int target, float *d_word, float *d_attn, as_error *err) {
    float dl[AS_MAX_LABELS] = {0};
    dl[target] = 1.0f;
    return model_backward(m, enc, word, tp, r, dl, threads, d_word, d_attn, err);
}

/* The forward on enc with word vectors `word` (T, De) (NULL: the table's rows) saving
 * into tp: its logits into logits (C), its attention into attn when non-NULL; then,
 * with target >= 0, the backward of logit target into d_word (T, De). With target -1
 * the run is returned in *keep for a later backward (pick the target from the logits). */
static as_status pass(const as_model *m, const as_encoding *enc, const float *word, int threads, int target,
                      float *logits, float *attn, float *d_word, model_tape *tp, as_run **keep, unsigned capture,
                      as_error *err) {
    as_capture_spec spec = {.what = CAP_LOGITS | (attn ? CAP_ATTN : 0) | capture, .layer = -1, .head = -1,
                            .threads = threads};
    as_run *r = NULL;
    as_status s = model_forward(m, enc, &spec, word, tp, &r, err);
    if (s) return s;
    memcpy(logits, r->logits, (size_t)r->logits_cols * sizeof(float));
    if (attn) memcpy(attn, r->attn, (size_t)r->n_lay * r->n_hd * r->T * r->T * sizeof(float));
    if (target >= 0) s = backward(m, enc, word, tp, r, threads, target, d_word, NULL, err);
    if (keep && !s) *keep = r;
    else as_run_free(r);
    return s;
}

as_status sal_compute(const as_model *m, const as_encoding *enc, const sal_opts *o, sal_result *out,
                      as_error *err) {
    return sal_compute_extra(m, enc, o, NULL, out, err);
}

as_status sal_compute_extra(const as_model *m, const as_encoding *enc, const sal_opts *o, const sal_extra *x,
                            sal_result *out, as_error *err) {
    static const sal_extra none = {0};
    if (!x) x = &none;
    memset(out, 0, sizeof *out);
    int steps;
    as_status s = check_request(m, enc, o, &steps, err);
    if (s) return s;
    const as_config *c = as_model_config(m);
    const int T = enc->n, C = c->num_labels, De = c->d_embed;
    const size_t TD = (size_t)T * De;
    model_tape tp = {0};
    float *w = NULL, *g = NULL, *gsum = NULL, *lg = NULL;
    out->scores = as_calloc((size_t)T, sizeof(float));
    out->logits = as_calloc((size_t)C, sizeof(float));
    out->probs = as_calloc((size_t)C, sizeof(float));
    w = as_malloc_array(TD, sizeof(float)); /* (T, De) word vectors */
    g = as_malloc_array(TD, sizeof(float)); /* (T, De) their gradient */
    lg = as_malloc_array((size_t)C, sizeof(float));
    if (!out->scores || !out->logits || !out->probs || !w || !g || !lg) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if ((s = model_tape_init(m, T, &tp, err))) goto cleanup;
    /* the input itself: logits and prediction; grad / gxi back-propagate the target logit */
    if (o->method != SAL_IG) {
        as_run *r = NULL;
        if ((s = pass(m, enc, NULL, o->threads, -1, out->logits, o->attn_out, NULL, &tp, &r,
                      x->capture | (x->d_attn || x->run ? CAP_ATTN : 0), err)))
            goto cleanup;
        int pred = set_prediction(out, C), target = o->target >= 0 ? o->target : pred;
        s = backward(m, enc, NULL, &tp, r, o->threads, target, g, x->d_attn, err);
        if (!s && x->run) *x->run = r;
        else as_run_free(r);
        if (s) goto cleanup;
        emb_in in = {enc, 0, NULL, 0, 0};
        for (int t = 0; t < T; t++) {
            const float *x = model_emb_word(m, &in, t), *gt = g + (size_t)t * De;
            double acc = 0.0;
            for (int i = 0; i < De; i++) acc += o->method == SAL_GRAD ? fabs((double)gt[i]) : (double)gt[i] * x[i];
            out->scores[t] = (float)acc;
        }
        out->predicted = pred;
        out->target = target;
    } else {
        if ((s = pass(m, enc, NULL, o->threads, -1, out->logits, o->attn_out, NULL, NULL, NULL, 0, err))) goto cleanup;
        const int pred = set_prediction(out, C), target = o->target >= 0 ? o->target : pred;
        /* Integrated gradients (Sundararajan et al. 2017, eq. 1, midpoint rule with a zero
           baseline; saliency.h): the baseline logit, then the points alpha_k * x */
        if (!(gsum = as_calloc(TD, sizeof(float)))) {
            s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        memset(w, 0, TD * sizeof(float));
        if ((s = pass(m, enc, w, o->threads, -1, lg, NULL, NULL, NULL, NULL, 0, err))) goto cleanup;
        float logit_base = lg[target];
        emb_in in = {enc, 0, NULL, 0, 0};
        for (int k = 0; k < steps; k++) {
            float alpha = (float)((k + 0.5) / steps);
            for (int t = 0; t < T; t++) {
                const float *e = model_emb_word(m, &in, t);
                for (int i = 0; i < De; i++) w[(size_t)t * De + i] = alpha * e[i];
            }
            if ((s = pass(m, enc, w, o->threads, target, lg, NULL, g, &tp, NULL, 0, err))) goto cleanup;
            for (size_t i = 0; i < TD; i++) gsum[i] += g[i];
        }
        double total = 0.0;
        for (int t = 0; t < T; t++) {
            const float *e = model_emb_word(m, &in, t), *gt = gsum + (size_t)t * De;
            double acc = 0.0;
            for (int i = 0; i < De; i++) acc += (double)e[i] * gt[i]; /* (w - 0) * mean gradient */
            out->scores[t] = (float)(acc / steps);
            total += acc / steps;
        }
        out->steps = steps;
        out->ig_sum = (float)total;
        out->ig_delta = out->logits[target] - logit_base;
        out->ig_gap = fabsf(out->ig_sum - out->ig_delta);
        out->predicted = pred;
        out->target = target;
    }
    out->method = o->method;
    out->T = T;
    out->C = C;
cleanup:
    free(w);
    free(g);
    free(gsum);
    free(lg);
    model_tape_free(&tp);
    if (s) sal_result_free(out);
    return s;
}
