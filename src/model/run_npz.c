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
    int64_t T = r->T, Tk = r->Tk > 0 ? r->Tk : r->T; /* keys: the source's tokens in a cross-attention run */
    const as_run_array a[AS_RUN_N_ARRAYS] = {
        {"attentions", r->attn, 4, {r->n_lay, r->n_hd, T, Tk}},
        {"attention_scores", r->scores, 4, {r->n_lay, r->n_hd, T, Tk}},
        {"queries", r->q, 4, {r->n_lay, r->n_hd, T, r->Dh}},
        {"keys", r->k, 4, {r->n_lay, r->n_hd, Tk, r->Dh}},
        {"values", r->v, 4, {r->n_lay, r->n_hd, Tk, r->Dh}},
        {"hidden_states", r->hidden, 3, {r->n_run + 1, T, r->D, 0}},
        {"logits", r->logits, 2, {r->logits_rows, r->logits_cols, 0, 0}},
        {"queries_pre_rope", r->q_pre, 4, {r->n_lay, r->n_hd, T, r->Dh}},
        {"keys_pre_rope", r->k_pre, 4, {r->n_lay, r->n_hd, T, r->Dh}},
        {"head_stats", r->head_stats, 3, {r->n_lay, r->n_hd, AS_HEAD_N_STATS, 0}},
        {"thumbnails_max", r->thumb_max, 4, {r->n_lay, r->n_hd, r->thumb, r->thumb}},
        {"thumbnails_mean", r->thumb_mean, 4, {r->n_lay, r->n_hd, r->thumb, r->thumb}},
    };
    for (int i = 0; i < AS_RUN_N_ARRAYS; i++) out[i] = a[i];
}

/* Names of an encoder-decoder run's arrays, per kind, in as_run_arrays' order (NULL: none). */
static const char *const KIND_NAMES[3][AS_RUN_N_ARRAYS] = {
    {"encoder_attentions", "encoder_attention_scores", "encoder_queries", "encoder_keys", "encoder_values",
     "encoder_hidden_states", NULL, "encoder_queries_pre_rope", "encoder_keys_pre_rope", "encoder_head_stats", NULL, NULL},
    {"decoder_attentions", "decoder_attention_scores", "decoder_queries", "decoder_keys", "decoder_values",
     "decoder_hidden_states", "logits", "decoder_queries_pre_rope", "decoder_keys_pre_rope", "decoder_head_stats", NULL, NULL},
    {"cross_attentions", "cross_attention_scores", "cross_queries", "cross_keys", "cross_values", NULL, NULL, NULL,
     NULL, NULL, NULL, NULL},
};

int as_run_all_arrays(const as_run *r, as_run_array out[AS_RUN_MAX_ARRAYS]) {
    if (!r->dec || !r->cross) {
        as_run_arrays(r, out);
        return AS_RUN_N_ARRAYS;
    }
    const as_run *kinds[3] = {r, r->dec, r->cross};
    int n = 0;
    for (int k = 0; k < 3; k++) {
        as_run_array a[AS_RUN_N_ARRAYS];
        as_run_arrays(kinds[k], a);
        for (int i = 0; i < AS_RUN_N_ARRAYS; i++) {
            if (!KIND_NAMES[k][i]) continue;
            out[n] = a[i];
            out[n++].name = KIND_NAMES[k][i];
        }
    }
    return n;
}

/* The target's arrays of an encoder-decoder run: decoder_input_ids, decoder_attention_mask,
 * decoder_tokens, decoder_token_text. */
static as_status add_target(npz_writer *w, const as_model *m, const as_encoding *tgt, as_error *err) {
    int64_t one[1] = {tgt->n};
    char **text = as_calloc((size_t)tgt->n, sizeof(char *));
    if (!text) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int i = 0; i < tgt->n; i++) text[i] = as_model_token_text(m, tgt->ids[i]);
    as_status s;
    if (!(s = npz_add(w, "decoder_input_ids", NPY_I32, tgt->ids, 1, one, err)) &&
        !(s = npz_add(w, "decoder_attention_mask", NPY_I32, tgt->mask, 1, one, err)) &&
        !(s = npz_add_strings(w, "decoder_tokens", (const char *const *)tgt->pieces, tgt->n, err)))
        s = npz_add_strings(w, "decoder_token_text", (const char *const *)text, tgt->n, err);
    for (int i = 0; i < tgt->n; i++) free(text[i]);
    free(text);
    return s;
}

static as_status write_npz(const as_model *m, const as_encoding *enc, const as_encoding *tgt, const as_run *r,
                           const as_npz_extra *extra, int n_extra, const char *path, as_error *err);

as_status as_run_write_npz(const as_model *m, const as_encoding *enc, const as_run *r, const char *path,
                           as_error *err) {
    return write_npz(m, enc, NULL, r, NULL, 0, path, err);
}

as_status as_run_write_npz_seq2seq(const as_model *m, const as_encoding *enc, const as_encoding *tgt,
                                   const as_run *r, const char *path, as_error *err) {
    return write_npz(m, enc, tgt, r, NULL, 0, path, err);
}

as_status as_run_write_npz_extra(const as_model *m, const as_encoding *enc, const as_run *r,
                                 const as_npz_extra *extra, int n_extra, const char *path, as_error *err) {
    return write_npz(m, enc, NULL, r, extra, n_extra, path, err);
}

as_status as_run_write_npz_seq2seq_extra(const as_model *m, const as_encoding *enc, const as_encoding *tgt,
                                         const as_run *r, const as_npz_extra *extra, int n_extra, const char *path,
                                         as_error *err) {
    return write_npz(m, enc, tgt, r, extra, n_extra, path, err);
}

/* The archive of run r: enc's arrays, tgt's (encoder-decoder runs), the captured tensors,
 * then the extra arrays. */
static as_status write_npz(const as_model *m, const as_encoding *enc, const as_encoding *tgt, const as_run *r,
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
    if (tgt && r->dec && (s = add_target(w, m, tgt, err))) goto cleanup;
    as_run_array arr[AS_RUN_MAX_ARRAYS];
    int n_arr = as_run_all_arrays(r, arr);
    for (int i = 0; i < n_arr; i++) {
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
