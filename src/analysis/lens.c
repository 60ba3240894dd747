/* lens.c — the logit lens (nostalgebraist 2020) of one input at one position as JSON: one
 * forward keeping the hidden states, then every layer's state read through the model's
 * final norm and LM / masked-LM head (as_run_logit_lens), its top K tokens with softmax
 * probabilities. `attnscope lens` prints it (json, or a line per layer) and the server's
 * lens route sends it.
 * What it does not: keep the run, or rank anything but the one position's tokens.
 */
#include "attnscope/analysis.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>

/* The K largest of row (V) into best (K), descending (insertion; ties: lower id first). */
static int top_k(const float *row, int V, int K, int *best) {
    int n = 0;
    for (int v = 0; v < V; v++) {
        int k = n < K ? n++ : K;
        if (k == K && row[v] <= row[best[K - 1]]) continue;
        if (k == K) k = K - 1;
        while (k > 0 && row[v] > row[best[k - 1]]) best[k] = best[k - 1], k--;
        best[k] = v;
    }
    return n;
}

/* {"layer": l, "top": [{"id", "text", "prob", "logit"}]} of the logits row (V). */
static json_t *layer_json(const as_model *m, int l, const float *row, int V, int K, int *best) {
    double mx = row[0], z = 0.0;
    for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    for (int v = 0; v < V; v++) z += exp((double)row[v] - mx);
    int n = top_k(row, V, K, best);
    json_t *top = json_array();
    for (int k = 0; k < n; k++) {
        char *t = as_model_token_text(m, best[k]);
        json_t *s = as_json_string_utf8(t ? t : "");
        free(t);
        json_array_append_new(top, json_pack("{s:i, s:o, s:f, s:f}", "id", best[k], "text", s ? s : json_string(""),
                                             "prob", exp((double)row[best[k]] - mx) / z, "logit", (double)row[best[k]]));
    }
    return json_pack("{s:i, s:o}", "layer", l, "top", top);
}

as_status lens_json(const as_model *m, const as_encoding *enc, int pos, int top, int threads, struct json_t **out,
                    as_error *err) {
    *out = NULL;
    if (enc->n < 1) return as_err_set(err, AS_ERR_INPUT, "empty input");
    if (top < 1 || top > LENS_MAX_TOP) return as_err_set(err, AS_ERR_INPUT, "top %d outside 1..%d", top, LENS_MAX_TOP);
    if (pos >= enc->n) return as_err_set(err, AS_ERR_INPUT, "position %d is past the input's %d tokens", pos, enc->n);
    if (pos < 0)
        for (int i = 0; i < enc->n; i++)
            if (!enc->mask || enc->mask[i]) pos = i;
    as_run *r = NULL;
    float *logits = NULL;
    int *best = NULL;
    json_t *layers = NULL;
    as_capture_spec spec = {.what = CAP_HIDDEN | CAP_LOGITS, .layer = -1, .head = -1, .threads = threads};
    as_status st = as_forward(m, enc, &spec, &r, err);
    if (st) goto cleanup;
    int V = as_model_config(m)->vocab_size, T = enc->n;
    logits = as_malloc_array((size_t)T * (size_t)V, sizeof(float));
    best = as_malloc_array((size_t)top, sizeof(int));
    layers = json_array();
    if (!logits || !best || !layers) {
        st = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (int l = 0; l <= r->n_run; l++) {
        if ((st = as_run_logit_lens(m, r, l, threads, logits, err))) goto cleanup;
        json_array_append_new(layers, layer_json(m, l, logits + (size_t)pos * V, V, top, best));
    }
    *out = json_pack("{s:i, s:i, s:O}", "position", pos, "id", (int)enc->ids[pos], "layers", layers);
    if (!*out) st = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
cleanup:
    json_decref(layers);
    free(logits);
    free(best);
    as_run_free(r);
    return st;
}
