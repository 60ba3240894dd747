/* attrib_out.c — writes an attribution result (attrib.c) or a saliency result (saliency.c)
 * as an .npz archive: the input and its tokens beside the result and its per-token
 * relevance (a per-layer rollout, flow or grad result as the whole model's map and
 * <name>_layers; ig's step count and logit difference), the one file format of
 * `attnscope attribute --format npz`.
 * What it does not: compute anything (attr_compute, sal_compute do) or write JSON (the CLI).
 */
#include "analysis/attrib.h"
#include "io/npz.h"

#include <stdio.h>

/* Opens path and writes input_ids (T), tokens and token_text; *w stays NULL on error. */
static as_status write_input(const as_model *m, const as_encoding *enc, const char *path, npz_writer **w,
                             as_error *err) {
    const int T = enc->n;
    const int64_t t_shape[1] = {T};
    char **text = as_calloc((size_t)T, sizeof(char *));
    as_status s = text ? npz_open(path, w, err) : as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (s) goto cleanup;
    for (int i = 0; i < T; i++) text[i] = as_model_token_text(m, enc->ids[i]);
    if ((s = npz_add(*w, "input_ids", NPY_I32, enc->ids, 1, t_shape, err))) goto cleanup;
    if ((s = npz_add_strings(*w, "tokens", (const char *const *)enc->pieces, T, err))) goto cleanup;
    s = npz_add_strings(*w, "token_text", (const char *const *)text, T, err);
cleanup:
    if (s) {
        npz_abort(*w);
        *w = NULL;
    }
    for (int i = 0; text && i < T; i++) free(text[i]);
    free(text);
    return s;
}

as_status attr_write_npz_named(const as_model *m, const as_encoding *enc, const attr_result *r, const char *name,
                               const float *rel, const char *path, as_error *err) {
    const int64_t t_shape[1] = {enc->n}, one[1] = {1};
    npz_writer *w = NULL;
    as_status s = write_input(m, enc, path, &w, err);
    if (s) return s;
    if (!name) name = attr_method_name(r->method);
    if (r->ndim == 3 && (r->method == ATTR_ROLLOUT || r->method == ATTR_FLOW || r->method == ATTR_GRAD)) {
        /* per layer (L, T, T): the last layer is the whole model's (T, T) under name */
        char lname[64];
        snprintf(lname, sizeof lname, "%s_layers", name);
        const float *last = r->data + (size_t)(r->L - 1) * r->T * r->T;
        if ((s = npz_add(w, name, NPY_F32, last, 2, r->shape + 1, err))) goto cleanup;
        if ((s = npz_add(w, lname, NPY_F32, r->data, 3, r->shape, err))) goto cleanup;
    } else if ((s = npz_add(w, name, NPY_F32, r->data, r->ndim, r->shape, err))) {
        goto cleanup;
    }
    if (rel && (s = npz_add(w, "relevance", NPY_F32, rel, 1, t_shape, err))) goto cleanup;
    if (r->method == ATTR_GRAD || r->method == ATTR_IMPORTANCE) {
        const int32_t tp[2] = {r->target, r->position};
        if ((s = npz_add(w, "target", NPY_I32, &tp[0], 1, one, err))) goto cleanup;
        if ((s = npz_add(w, "position", NPY_I32, &tp[1], 1, one, err))) goto cleanup;
        if ((s = npz_add(w, "logit", NPY_F32, &r->logit, 1, one, err))) goto cleanup;
    }
    s = npz_close(w, err);
    w = NULL;
cleanup:
    npz_abort(w);
    return s;
}

as_status attr_write_npz(const as_model *m, const as_encoding *enc, const attr_result *r, const char *path,
                         as_error *err) {
    return attr_write_npz_named(m, enc, r, NULL, NULL, path, err);
}

as_status sal_write_npz(const as_model *m, const as_encoding *enc, const sal_result *r, const char *path,
                        as_error *err) {
    const int64_t t_shape[1] = {r->T}, one[1] = {1};
    const int32_t target = r->target;
    const float logit = r->logits[r->target];
    npz_writer *w = NULL;
    as_status s = write_input(m, enc, path, &w, err);
    if (s) return s;
    if ((s = npz_add(w, sal_method_name(r->method), NPY_F32, r->scores, 1, t_shape, err))) goto cleanup;
    if ((s = npz_add(w, "relevance", NPY_F32, r->scores, 1, t_shape, err))) goto cleanup;
    if ((s = npz_add(w, "target", NPY_I32, &target, 1, one, err))) goto cleanup;
    if ((s = npz_add(w, "logit", NPY_F32, &logit, 1, one, err))) goto cleanup;
    if (r->method == SAL_IG) { /* the step count and logit(x) - logit(baseline) of completeness */
        const int32_t steps = r->steps;
        if ((s = npz_add(w, "steps", NPY_I32, &steps, 1, one, err))) goto cleanup;
        if ((s = npz_add(w, "logit_delta", NPY_F32, &r->ig_delta, 1, one, err))) goto cleanup;
    }
    s = npz_close(w, err);
    w = NULL;
cleanup:
    npz_abort(w);
    return s;
}
