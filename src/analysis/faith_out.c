/* faith_out.c — a faithfulness result (faith_model.c) as JSON, the one format of
 * `attnscope faithfulness --text` and the server's faithfulness route
 * (include/attnscope/faith.h, faith_result_json; docs/api/api.schema.json,
 * FaithfulnessResponse). What it does not: compute anything, or the corpus table (the CLI).
 */
#include "attnscope/faith.h"

#include <jansson.h>
#include <math.h>

static json_t *doubles(const double *x, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) json_array_append_new(a, json_real(isfinite(x[i]) ? x[i] : 0.0));
    return a;
}

static json_t *floats(const float *x, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) json_array_append_new(a, json_real(isfinite(x[i]) ? (double)x[i] : 0.0));
    return a;
}

static json_t *ints(const int *x, int n) {
    json_t *a = json_array();
    for (int i = 0; a && i < n; i++) json_array_append_new(a, json_integer(x[i]));
    return a;
}

static json_t *curve_json(const faith_curve *c, int T, int n) {
    return json_pack("{s:s, s:f, s:f, s:f, s:f, s:o, s:o, s:o, s:o, s:o, s:o}", "method",
                     faith_method_name(c->method), "aopc_deletion", c->aopc_del, "aopc_insertion", c->aopc_ins,
                     "comprehensiveness", c->comp, "sufficiency", c->suff, "comprehensiveness_bins",
                     doubles(c->comp_bin, FAITH_N_BINS), "sufficiency_bins", doubles(c->suff_bin, FAITH_N_BINS),
                     "order", ints(c->order, n), "relevance", floats(c->relevance, T), "deletion",
                     doubles(c->del, n + 1), "insertion", doubles(c->ins, n + 1));
}

json_t *faith_result_json(const as_model *m, const faith_result *r, faith_removal removal) {
    const as_config *cfg = as_model_config(m);
    char buf[32];
    const char *label = cfg->id2label && r->predicted < cfg->num_labels ? cfg->id2label[r->predicted] : NULL;
    if (!label) {
        snprintf(buf, sizeof buf, "LABEL_%d", r->predicted);
        label = buf;
    }
    json_t *methods = json_array();
    for (int i = 0; methods && i < r->n_curves; i++) {
        json_t *c = curve_json(&r->curves[i], r->T, r->n);
        if (!c || json_array_append_new(methods, c)) {
            json_decref(methods);
            return NULL;
        }
    }
    return json_pack("{s:i, s:s, s:o, s:i, s:f, s:s, s:o, s:o}", "predicted", r->predicted, "label", label, "probs",
                     doubles(r->probs, r->C), "tokens", r->n, "empty", r->empty, "removal",
                     removal == FAITH_MASK ? "mask" : "delete", "bins", ints(faith_bins_pct, FAITH_N_BINS),
                     "methods", methods);
}
