/* lm_eval.c — held-out next-token cross-entropy of a causal LM (GPT-2, the LLaMA family)
 * on a token stream, in overlapping windows of the model's training length so that every
 * token after the first is predicted once and with context (lm_eval_windows,
 * include/attnscope/train.h): the strided sliding-window evaluation of Hugging Face's
 * "Perplexity of fixed-length models" guide, with the last window moved back to be full;
 * optionally each window is put after a BOS token, as the model sees text in use.
 * It runs the one forward (as_forward, logits only); it does not pack the corpus
 * (lm_corpus_tokens) nor print anything.
 */
#include "attnscope/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -log softmax(row)[target] in double precision over V logits. */
static double row_nll(const float *row, int V, int target) {
    double mx = row[0], z = 0.0;
    for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    for (int v = 0; v < V; v++) z += exp((double)row[v] - mx);
    return log(z) + mx - (double)row[target];
}

as_status lm_eval_windows(const as_model *m, const int32_t *ids, size_t n, int seq, int stride, int bos_id,
                          int threads, void (*progress)(size_t done, size_t total), double *nll_sum, size_t *n_pred,
                          as_error *err) {
    const as_config *c = as_model_config(m);
    *nll_sum = 0.0;
    *n_pred = 0;
    if (!(as_model_heads(m) & HEAD_LM))
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no causal-LM head", as_model_dir(m));
    if (n < 2) return as_err_set(err, AS_ERR_INPUT, "the text has %zu tokens; at least 2 are needed", n);
    if (seq < 2 || seq > as_model_max_tokens(m))
        return as_err_set(err, AS_ERR_INPUT, "window of %d tokens: it must be in [2, %d] (the model's positions)",
                          seq, as_model_max_tokens(m));
    if (bos_id >= c->vocab_size)
        return as_err_set(err, AS_ERR_INPUT, "BOS id %d is outside the vocabulary of %d", bos_id, c->vocab_size);
    const size_t span = (size_t)seq - (bos_id >= 0); /* stream tokens per window */
    if (stride < 1 || (size_t)stride >= span)
        return as_err_set(err, AS_ERR_INPUT, "stride %d: it must be in [1, %zu] (below the window)", stride,
                          span - 1);
    int32_t *win = as_malloc_array((size_t)seq, sizeof(int32_t)); /* (seq,) one window's ids */
    if (!win) return as_err_set(err, AS_ERR_INTERNAL, "out of memory for a window of %d tokens", seq);
    int V = c->vocab_size;
    double sum = 0.0;
    size_t done = 1; /* the next target to score */
    as_status s = AS_OK;
    for (size_t begin = 0; done < n && !s; begin += (size_t)stride) {
        size_t end = begin + span < n ? begin + span : n;
        size_t b = end >= span ? end - span : 0; /* the last window kept full */
        size_t lead = bos_id >= 0 && ids[b] != bos_id; /* a BOS put in front of the window */
        if (lead) win[0] = bos_id;
        memcpy(win + lead, ids + b, (end - b) * sizeof(int32_t));
        int T = (int)(end - b + lead);
        as_encoding enc = {0};
        as_run *r = NULL;
        as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = threads};
        s = as_encoding_from_ids(m, win, NULL, T, &enc, err);
        if (!s) s = as_forward(m, &enc, &spec, &r, err);
        if (!s && (!r->logits || r->logits_cols != V || r->logits_rows != T))
            s = as_err_set(err, AS_ERR_INTERNAL, "the forward gave no (T, V) logits");
        for (size_t t = done; !s && t < end; t++) /* row t - 1 - b + lead (token t - 1) predicts token t */
            sum += row_nll(r->logits + (t - 1 - b + lead) * (size_t)V, V, ids[t]);
        as_run_free(r);
        as_encoding_free(&enc);
        done = end;
        if (!s && progress) progress(done - 1, n - 1);
    }
    free(win);
    if (s) return s;
    *nll_sum = sum;
    *n_pred = n - 1;
    return AS_OK;
}
