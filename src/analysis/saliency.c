/* saliency.c — vanilla gradient, gradient x input and integrated gradients of a
 * classifier logit w.r.t. the word-embedding vectors (see saliency.h for the
 * formulas and the choices). Uses the training forward / backward (src/train) with
 * the word vectors passed in as train_batch.word_embeds and parameter gradients off,
 * on a train_model that reads the loaded model's weights in place (no copy). One
 * sentence runs as a split pass: every product, head and norm on all threads.
 */
#include "analysis/saliency.h"

#include <math.h>
#include <string.h>

/* Integrated-gradient interpolation points run together, this many per batch. */
#define SAL_IG_CHUNK 16

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

as_status sal_compute(const as_model *m, const as_encoding *enc, const sal_opts *o, sal_result *out,
                      as_error *err) {
    memset(out, 0, sizeof *out);
    if (!(as_model_heads(m) & HEAD_CLASSIFIER))
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no sequence-classifier head to explain",
                          as_model_dir(m));
    train_from_as_opts fo = TRAIN_FROM_AS_DEFAULTS;
    fo.mlm = 0;    /* not needed */
    fo.borrow = 1; /* the embeddings and layer matrices are read in place */
    train_model *tm = NULL;
    as_status s = train_model_from_as(m, &fo, &tm, err);
    if (s) return s;
    s = sal_compute_tr(tm, enc, o, out, err);
    train_model_free(tm);
    return s;
}

/* Sets dlogit_target = 1 in every row of batch b, whose forward is in a, and
 * back-propagates to a->d_emb_sum. */
static void backward_from_logit(const train_model *tm, train_acts *a, const train_batch *b, int target) {
    int C = tm->cfg.num_labels;
    memset(a->d_cls_logits, 0, (size_t)b->B * C * sizeof(float));
    for (int i = 0; i < b->B; i++) a->d_cls_logits[(size_t)i * C + target] = 1.0f;
    train_backward((train_model *)tm, a, b, 0); /* param_grads = 0: the model is not written */
}

/* Runs rows [0, B) of batch b (word vectors given), then backward_from_logit. */
static as_status grad_pass(const train_model *tm, train_acts *a, const train_batch *b, int target, as_error *err) {
    as_status s = train_forward(tm, a, b, err);
    if (s) return s;
    backward_from_logit(tm, a, b, target);
    return AS_OK;
}

/* Checks the input and options against the model; *steps = the integrated-gradient
 * points (0 for grad / gxi). */
static as_status check_request(const train_config *c, const as_encoding *enc, const sal_opts *o, int *steps,
                               as_error *err) {
    int C = c->num_labels;
    *steps = 0;
    if (C <= 0) return as_err_set(err, AS_ERR_INPUT, "the model has no sequence-classifier head to explain");
    if (!enc || enc->n <= 0 || !enc->ids) return as_err_set(err, AS_ERR_INPUT, "empty input: no tokens");
    int T = enc->n;
    if (T > c->max_pos - c->pos_offset)
        return as_err_set(err, AS_ERR_INPUT, "%d tokens, but the model takes at most %d", T, c->max_pos - c->pos_offset);
    if (o->method == SAL_IG) {
        *steps = o->steps ? o->steps : SAL_DEFAULT_STEPS;
        if (*steps < 1 || *steps > SAL_MAX_STEPS)
            return as_err_set(err, AS_ERR_INPUT, "integrated-gradient steps %d out of range [1, %d]", *steps,
                              SAL_MAX_STEPS);
    } else if (o->method != SAL_GRAD && o->method != SAL_GXI) {
        return as_err_set(err, AS_ERR_INPUT, "unknown saliency method %d", (int)o->method);
    }
    if (o->target < -1 || o->target >= C)
        return as_err_set(err, AS_ERR_INPUT, "target class %d out of range [0, %d)", o->target, C);
    for (int t = 0; t < T; t++)
        if (enc->ids[t] < 0 || enc->ids[t] >= c->vocab_size)
            return as_err_set(err, AS_ERR_INPUT, "token id %d at position %d is outside the vocabulary [0, %d)",
                              (int)enc->ids[t], t, c->vocab_size);
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

/* Integrated gradients (Sundararajan et al. 2017, eq. 1, midpoint rule with a zero
 * baseline; saliency.h): the baseline logit, then the steps points alpha * x in batches
 * of up to chunk rows of b, whose word vectors w (chunk, T, D) are overwritten; gsum
 * (T, D) accumulates the gradients. Fills out->scores, steps, ig_sum, ig_delta and
 * ig_gap; logit_x is the input's target logit. */
static as_status integrated_gradients(const train_model *tm, train_acts *a, train_batch *b, const as_encoding *enc,
                                      float *w, float *gsum, int steps, int chunk, int target, float logit_x,
                                      sal_result *out, as_error *err) {
    const int T = enc->n, D = tm->cfg.d_model;
    const size_t TD = (size_t)T * D;
    const float *wte = tm->params.wte;
    memset(w, 0, TD * sizeof(float));
    b->B = 1;
    as_status s = train_forward(tm, a, b, err);
    if (s) return s;
    float logit_base = a->cls_logits[target];
    for (int k0 = 0; k0 < steps; k0 += chunk) {
        int nb = steps - k0 < chunk ? steps - k0 : chunk;
        for (int j = 0; j < nb; j++) {
            float alpha = (float)((k0 + j + 0.5) / steps);
            float *wj = w + (size_t)j * TD;
            for (int t = 0; t < T; t++) {
                const float *e = wte + (size_t)enc->ids[t] * D;
                for (int i = 0; i < D; i++) wj[(size_t)t * D + i] = alpha * e[i];
            }
        }
        b->B = nb;
        if ((s = grad_pass(tm, a, b, target, err))) return s;
        for (int j = 0; j < nb; j++) {
            const float *g = a->d_emb_sum + (size_t)j * TD;
            for (size_t i = 0; i < TD; i++) gsum[i] += g[i];
        }
    }
    double total = 0.0;
    for (int t = 0; t < T; t++) {
        const float *e = wte + (size_t)enc->ids[t] * D, *g = gsum + (size_t)t * D;
        double acc = 0.0;
        for (int i = 0; i < D; i++) acc += (double)e[i] * g[i]; /* (w - 0) * mean gradient */
        out->scores[t] = (float)(acc / steps);
        total += acc / steps;
    }
    out->steps = steps;
    out->ig_sum = (float)total;
    out->ig_delta = logit_x - logit_base;
    out->ig_gap = fabsf(out->ig_sum - out->ig_delta);
    return AS_OK;
}

as_status sal_compute_tr(const train_model *tm, const as_encoding *enc, const sal_opts *o, sal_result *out,
                         as_error *err) {
    memset(out, 0, sizeof *out);
    const train_config *c = &tm->cfg;
    const int C = c->num_labels, D = c->d_model;
    int steps;
    as_status s = check_request(c, enc, o, &steps, err);
    if (s) return s;
    const int T = enc->n, chunk = steps > SAL_IG_CHUNK ? SAL_IG_CHUNK : (steps > 0 ? steps : 1);
    const size_t TD = (size_t)T * D;
    train_acts *a = NULL;
    float *w = NULL, *gsum = NULL;
    int32_t *rep = NULL;
    if ((s = train_acts_init(tm, chunk, T, 0, &a, err))) return s;
    if (o->threads > 0) a->threads = o->threads;
    a->cls_only = 1; /* only the logits are read */
    out->scores = as_calloc((size_t)T, sizeof(float));
    out->logits = as_calloc((size_t)C, sizeof(float));
    out->probs = as_calloc((size_t)C, sizeof(float));
    w = as_malloc_array((size_t)chunk * TD, sizeof(float));     /* (chunk, T, D) word vectors */
    gsum = as_calloc(TD, sizeof(float));                         /* (T, D) */
    rep = as_malloc_array((size_t)chunk * 3 * T, sizeof(int32_t)); /* ids, types, mask (chunk, T) each */
    if (!out->scores || !out->logits || !out->probs || !w || !gsum || !rep) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    int32_t *ids = rep, *tt = rep + (size_t)chunk * T, *mask = tt + (size_t)chunk * T;
    for (int k = 0; k < chunk; k++)
        for (int t = 0; t < T; t++) {
            ids[(size_t)k * T + t] = enc->ids[t];
            tt[(size_t)k * T + t] = enc->type_ids ? enc->type_ids[t] : 0;
            mask[(size_t)k * T + t] = enc->mask ? enc->mask[t] : 1;
        }
    /* the input itself: logits, prediction, and (grad / gxi) the gradient */
    for (int t = 0; t < T; t++)
        memcpy(w + (size_t)t * D, tm->params.wte + (size_t)enc->ids[t] * D, (size_t)D * sizeof(float));
    train_batch b = {.B = 1, .T = T, .ids = ids, .type_ids = tt, .mask = mask, .word_embeds = w};
    if ((s = train_forward(tm, a, &b, err))) goto cleanup;
    if (o->attn_out) { /* a->att is (L, chunk, H, T, T); sequence 0 is the input */
        size_t HTT = (size_t)c->n_head * T * T;
        for (int l = 0; l < c->n_layer; l++)
            memcpy(o->attn_out + (size_t)l * HTT, a->att + (size_t)l * chunk * HTT, HTT * sizeof(float));
    }
    memcpy(out->logits, a->cls_logits, (size_t)C * sizeof(float));
    const int pred = set_prediction(out, C), target = o->target >= 0 ? o->target : pred;
    out->method = o->method;
    out->T = T;
    out->C = C;
    out->predicted = pred;
    out->target = target;
    if (o->method == SAL_IG) {
        s = integrated_gradients(tm, a, &b, enc, w, gsum, steps, chunk, target, out->logits[target], out, err);
        goto cleanup;
    }
    /* the activations of the forward above are still in a: back-propagate from them */
    backward_from_logit(tm, a, &b, target);
    for (int t = 0; t < T; t++) {
        const float *g = a->d_emb_sum + (size_t)t * D, *x = w + (size_t)t * D;
        double acc = 0.0;
        for (int i = 0; i < D; i++) acc += o->method == SAL_GRAD ? fabs((double)g[i]) : (double)g[i] * x[i];
        out->scores[t] = (float)acc;
    }
cleanup:
    free(w);
    free(gsum);
    free(rep);
    train_acts_free(a);
    if (s) sal_result_free(out);
    return s;
}
