/* probe.c — the induction probe (an_induction_probe, include/attnscope/analysis.h): the
 * model runs on BOS (when it has one) + R seeded random token ids + the same R ids again
 * (Olsson et al. 2022, "In-context Learning and Induction Heads", sec. 2: repeated random
 * tokens), and every head is scored on the second copy: induction = mean attention from
 * the token at i (first seen at p) to p + 1, previous = mean attention to i - 1, sink =
 * mean attention to position 0. With an LM head, also the mean next-token loss on each
 * copy (the in-context loss drop: the second copy is predictable only from the first).
 * What it does not: read text or store anything (`attnscope probe` prints the result,
 * `attnscope analyze` stores the induction score per head through finalize.c).
 */
#include "attnscope/analysis.h"

#include "core/core.h"

#include <math.h>
#include <string.h>

void an_probe_result_free(an_probe_result *r) {
    if (!r) return;
    free(r->ids);
    free(r->heads);
    memset(r, 0, sizeof *r);
}

/* Mean of -log softmax(logits[p - 1])[ids[p]] over positions p of [lo, hi): the loss of
 * predicting each token from the ones before it. logits: (T, V). */
static double probe_loss(const float *logits, int V, const int32_t *ids, int lo, int hi) {
    double sum = 0.0;
    for (int p = lo; p < hi; p++) {
        const float *z = logits + (size_t)(p - 1) * (size_t)V;
        float mx = z[0];
        for (int v = 1; v < V; v++)
            if (z[v] > mx) mx = z[v];
        double s = 0.0;
        for (int v = 0; v < V; v++) s += exp((double)z[v] - mx);
        sum += log(s) + mx - z[ids[p]];
    }
    return hi > lo ? sum / (hi - lo) : NAN;
}

as_status an_induction_probe(const as_model *m, int R, int seed, int threads, an_probe_result *out, as_error *err) {
    memset(out, 0, sizeof *out);
    const as_config *c = as_model_config(m);
    as_encoding enc = {0};
    as_run *r = NULL;
    as_status rc = AS_OK;
    const int bos = c->bos_token_id >= 0 ? 1 : 0, T = bos + 2 * R, lo = 16 < c->vocab_size / 2 ? 16 : 0;
    if (R < 2) return as_err_set(err, AS_ERR_INPUT, "induction probe: length %d, need at least 2", R);
    if (T > as_model_max_tokens(m))
        return as_err_set(err, AS_ERR_INPUT, "induction probe: length %d makes %d tokens, over the model's %d", R, T,
                          as_model_max_tokens(m));
    out->T = T;
    out->R = R;
    out->bos = bos;
    out->n_layer = c->n_layer;
    out->n_head = c->n_head;
    out->loss_first = out->loss_second = NAN;
    out->ids = as_malloc_array((size_t)T, sizeof *out->ids);
    out->heads = as_calloc((size_t)c->n_layer * (size_t)c->n_head, sizeof *out->heads);
    if (!out->ids || !out->heads) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    int32_t *ids = out->ids;
    if (bos) ids[0] = c->bos_token_id;
    uint32_t s = (uint32_t)seed * 2654435761u + 1u;
    for (int k = 0; k < R; k++) { /* random ids above the special ones; the second copy repeats them */
        s = s * 1664525u + 1013904223u;
        ids[bos + k] = ids[bos + R + k] = (int32_t)(lo + (s >> 8) % (uint32_t)(c->vocab_size - lo));
    }
    const int lm = (as_model_heads(m) & HEAD_LM) != 0;
    as_capture_spec spec = {.what = CAP_ATTN | (lm ? CAP_LOGITS : 0), .layer = -1, .head = -1, .threads = threads};
    if ((rc = as_encoding_from_ids(m, ids, NULL, T, &enc, err)) || (rc = as_forward(m, &enc, &spec, &r, err)))
        goto cleanup;
    for (int l = 0; l < c->n_layer; l++)
        for (int h = 0; h < c->n_head; h++) {
            const float *P = as_run_attn(r, l, h); /* (T, T) */
            an_probe_score *p = &out->heads[(size_t)l * c->n_head + h];
            for (int k = 1; k < R; k++) { /* query bos + R + k; its first occurrence bos + k */
                int i = bos + R + k, first = bos + k;
                p->induction += P[(size_t)i * T + first + 1];
                p->previous += P[(size_t)i * T + i - 1];
                p->sink += P[(size_t)i * T];
            }
            p->induction /= R - 1, p->previous /= R - 1, p->sink /= R - 1;
        }
    if (lm && r->logits && r->logits_head == HEAD_LM && r->logits_rows == T) {
        /* the first copy's tokens after its first one, and the same tokens in the second copy */
        out->loss_first = probe_loss(r->logits, r->logits_cols, ids, bos + 1, bos + R);
        out->loss_second = probe_loss(r->logits, r->logits_cols, ids, bos + R + 1, bos + 2 * R);
    }
cleanup:
    as_run_free(r);
    as_encoding_free(&enc);
    if (rc) an_probe_result_free(out);
    return rc;
}
