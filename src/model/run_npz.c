/* run_npz.c — as_run_arrays and as_run_write_npz (attnscope.h): a run's input and captured tensors as
 * one .npz archive, the file of `attnscope run --format npz` (array names and shapes:
 * README, "npz / JSON contents"), with any further arrays a caller adds
 * (as_run_write_npz_extra). It does not run the model or choose what is captured;
 * the archive format itself is io/npz.c's.
 */
#include "attnscope.h"
#include "io/npz.h"

int as_run_kv_group(const as_run *r, int h) { return r->Hkv > 0 && r->Hkv < r->H ? h / (r->H / r->Hkv) : h; }

void as_run_arrays(const as_run *r, as_run_array out[AS_RUN_N_ARRAYS]) {
    int64_t T = r->T;
    const as_run_array a[AS_RUN_N_ARRAYS] = {
        {"attentions", r->attn, 4, {r->n_lay, r->n_hd, T, T}},
        {"attention_scores", r->scores, 4, {r->n_lay, r->n_hd, T, T}},
        {"queries", r->q, 4, {r->n_lay, r->n_hd, T, r->Dh}},
        {"keys", r->k, 4, {r->n_lay, r->n_hd, T, r->Dh}},
        {"values", r->v, 4, {r->n_lay, r->n_hd, T, r->Dh}},
        {"hidden_states", r->hidden, 3, {r->n_run + 1, T, r->D, 0}},
        {"logits", r->logits, 2, {r->logits_rows, r->logits_cols, 0, 0}},
        {"queries_pre_rope", r->q_pre, 4, {r->n_lay, r->n_hd, T, r->Dh}},
        {"keys_pre_rope", r->k_pre, 4, {r->n_lay, r->n_hd, T, r->Dh}},
        {"head_stats", r->head_stats, 3, {r->n_lay, r->n_hd, AS_HEAD_N_STATS, 0}},
    };
    for (int i = 0; i < AS_RUN_N_ARRAYS; i++) out[i] = a[i];
}

as_status as_run_write_npz(const as_model *m, const as_encoding *enc, const as_run *r, const char *path,
                           as_error *err) {
    return as_run_write_npz_extra(m, enc, r, NULL, 0, path, err);
}

as_status as_run_write_npz_extra(const as_model *m, const as_encoding *enc, const as_run *r,
                                 const as_npz_extra *extra, int n_extra, const char *path, as_error *err) {
    npz_writer *w = NULL;
    as_status s = npz_open(path, &w, err);
    if (s) return s;
    char **text = as_calloc((size_t)r->T, sizeof(char *));
    int64_t T = r->T, one[1] = {T}, off_shape[2] = {T, 2};
    int64_t nl[1] = {r->n_lay}, nh[1] = {r->n_hd};
    int32_t *off = as_malloc_array((size_t)T * 2, sizeof(int32_t));
    int32_t *layers = as_malloc_array((size_t)r->n_lay, sizeof(int32_t));
    int32_t *heads = as_malloc_array((size_t)r->n_hd, sizeof(int32_t));
    int32_t *group = as_malloc_array((size_t)r->n_hd, sizeof(int32_t));
    float *scale = as_malloc_array((size_t)r->n_lay, sizeof(float));
    if (!off || !layers || !heads || !group || !scale || !text) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < T; i++) text[i] = as_model_token_text(m, enc->ids[i]);
    if ((s = npz_add_strings(w, "tokens", (const char *const *)enc->pieces, enc->n, err))) goto cleanup;
    if ((s = npz_add_strings(w, "token_text", (const char *const *)text, enc->n, err))) goto cleanup;
    for (int i = 0; i < T; i++) {
        off[2 * i] = enc->start ? enc->start[i] : -1;
        off[2 * i + 1] = enc->end ? enc->end[i] : -1;
    }
    for (int i = 0; i < r->n_lay; i++) {
        layers[i] = r->layer_lo + i;
        scale[i] = as_attn_scale(as_model_config(m), r->layer_lo + i);
    }
    for (int i = 0; i < r->n_hd; i++) {
        heads[i] = r->head_lo + i;
        group[i] = as_run_kv_group(r, r->head_lo + i);
    }
    if ((s = npz_add(w, "input_ids", NPY_I32, enc->ids, 1, one, err))) goto cleanup;
    if ((s = npz_add(w, "token_type_ids", NPY_I32, enc->type_ids, 1, one, err))) goto cleanup;
    if ((s = npz_add(w, "attention_mask", NPY_I32, enc->mask, 1, one, err))) goto cleanup;
    if ((s = npz_add(w, "offsets", NPY_I32, off, 2, off_shape, err))) goto cleanup;
    if ((s = npz_add(w, "layers", NPY_I32, layers, 1, nl, err))) goto cleanup;
    if ((s = npz_add(w, "heads", NPY_I32, heads, 1, nh, err))) goto cleanup;
    if ((s = npz_add(w, "kv_group", NPY_I32, group, 1, nh, err))) goto cleanup;
    if ((s = npz_add(w, "score_scale", NPY_F32, scale, 1, nl, err))) goto cleanup;
    as_run_array arr[AS_RUN_N_ARRAYS];
    as_run_arrays(r, arr);
    for (int i = 0; i < AS_RUN_N_ARRAYS; i++) {
        if (!arr[i].data) continue;
        if ((s = npz_add(w, arr[i].name, NPY_F32, arr[i].data, arr[i].ndim, arr[i].shape, err))) goto cleanup;
    }
    for (int i = 0; i < n_extra; i++) {
        if (extra[i].dtype != DTYPE_F32 && extra[i].dtype != DTYPE_I32) {
            s = as_err_set(err, AS_ERR_INTERNAL, "npz array %s: only F32 and I32 are written", extra[i].name);
            goto cleanup;
        }
        if ((s = npz_add(w, extra[i].name, extra[i].dtype == DTYPE_F32 ? NPY_F32 : NPY_I32, extra[i].data,
                         extra[i].ndim, extra[i].shape, err)))
            goto cleanup;
    }
    s = npz_close(w, err);
    w = NULL;
cleanup:
    npz_abort(w);
    if (text)
        for (int i = 0; i < T; i++) free(text[i]);
    free(text);
    free(off);
    free(layers);
    free(scale);
    free(heads);
    free(group);
    return s;
}
