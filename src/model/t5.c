/* t5.c — T5 (Raffel et al. 2020) and mT5 (Xue et al. 2021) encoder-decoder models: binds
 * transformers' T5ForConditionalGeneration names (encoder.block.{l}.layer.{0,1}, decoder
 * block layers 0 self-attention, 1 EncDecAttention, 2 DenseReluDense) into the layer views
 * of model.h: pre-norm layers whose norms are T5LayerNorm (RMS, no bias: cfg.rms_norm), no
 * biases, the relative position bias of each stack's first layer (shared by all its layers,
 * m->rel_bias), a ReLU or gated (wi_0 / wi_1) feed-forward, final_layer_norm after each
 * stack, and the LM head (tied to shared, its input scaled by d_model^-0.5, or lm_head).
 * config.c parses the block description; the layers, the buckets and the scaling run in
 * encoder.c (as_forward_seq2seq); the decoder is an as_model view as in bart.c. It does not
 * bind T5EncoderModel-only checkpoints or classification heads.
 */
#include "model/model.h"

#include <string.h>

/* Linear map base (nn.Linear layout, no bias). */
static as_status get_lin(as_model *m, const char *base, int n_in, int n_out, lin_t *out, as_error *err) {
    as_status s = model_get_lin(m, base, n_in, n_out, 0, 0, out, err);
    if (!s) out->b = NULL;
    return s;
}

/* T5LayerNorm base.weight (n): RMS norm without bias. */
static as_status get_rms(as_model *m, const char *base, int n, ln_t *out, as_error *err) {
    char name[512];
    if (snprintf(name, sizeof name, "%s.weight", base) >= (int)sizeof name)
        return as_err_set(err, AS_ERR_INTERNAL, "tensor name too long: %s", base);
    out->b = NULL;
    out->n = n;
    as_status s = model_get(m, name, n, -1, 1, &out->g, err);
    if (!s) out->gname = model_tensor_name(m, name);
    return s;
}

/* One attention sub-layer block.{l}.layer.{k}.{kind} into q, k, v, o. */
static as_status get_attn(as_model *m, const char *base, lin_t *q, lin_t *k, lin_t *v, lin_t *o, as_error *err) {
    const as_config *c = &m->cfg;
    int D = c->d_model, Qw = c->n_head * c->d_head;
    char name[512];
    as_status s;
#define ANAME(x) (snprintf(name, sizeof name, "%s." x, base), name)
    if ((s = get_lin(m, ANAME("q"), D, Qw, q, err)) || (s = get_lin(m, ANAME("k"), D, Qw, k, err)) ||
        (s = get_lin(m, ANAME("v"), D, Qw, v, err)) || (s = get_lin(m, ANAME("o"), Qw, D, o, err)))
        return s;
    return AS_OK;
#undef ANAME
}

static as_status bind_layer(as_model *m, const char *st, int l, int cross, layer_w *w, as_error *err) {
    const as_config *c = &m->cfg;
    int D = c->d_model, F = c->d_ff, ff = cross ? 2 : 1;
    char name[512];
    as_status s;
#define LNAME(...) (snprintf(name, sizeof name, __VA_ARGS__), name)
    if ((s = get_attn(m, LNAME("%s.block.%d.layer.0.SelfAttention", st, l), &w->q, &w->k, &w->v, &w->o, err)) ||
        (s = get_rms(m, LNAME("%s.block.%d.layer.0.layer_norm", st, l), D, &w->ln1, err)))
        return s;
    if (cross && ((s = get_attn(m, LNAME("%s.block.%d.layer.1.EncDecAttention", st, l), &w->cq, &w->ck, &w->cv,
                                &w->co, err)) ||
                  (s = get_rms(m, LNAME("%s.block.%d.layer.1.layer_norm", st, l), D, &w->ln_c, err))))
        return s;
    if (c->gated_mlp) {
        if ((s = get_lin(m, LNAME("%s.block.%d.layer.%d.DenseReluDense.wi_0", st, l, ff), D, F, &w->ff1, err)) ||
            (s = get_lin(m, LNAME("%s.block.%d.layer.%d.DenseReluDense.wi_1", st, l, ff), D, F, &w->up, err)))
            return s;
    } else if ((s = get_lin(m, LNAME("%s.block.%d.layer.%d.DenseReluDense.wi", st, l, ff), D, F, &w->ff1, err))) {
        return s;
    }
    if ((s = get_lin(m, LNAME("%s.block.%d.layer.%d.DenseReluDense.wo", st, l, ff), F, D, &w->ff2, err)) ||
        (s = get_rms(m, LNAME("%s.block.%d.layer.%d.layer_norm", st, l, ff), D, &w->ln2, err)))
        return s;
    return AS_OK;
#undef LNAME
}

/* Binds stack st of m into sm (m for the encoder, m->dec for the decoder). */
static as_status bind_stack(as_model *m, as_model *sm, const char *st, int L, int cross, as_error *err) {
    const as_config *c = &m->cfg;
    char name[512];
    as_status s;
    sm->pre_ln = 1;
    snprintf(name, sizeof name, "%s.embed_tokens.weight", st);
    if ((s = model_get(m, model_has(m, "shared.weight") ? "shared.weight" : name, c->vocab_size, c->d_model, 1,
                       &sm->wte, err)))
        return s;
    snprintf(name, sizeof name, "%s.block.0.layer.0.SelfAttention.relative_attention_bias.weight", st);
    if ((s = model_get(m, name, c->rel_buckets, c->n_head, 1, &sm->rel_bias, err))) return s;
    snprintf(name, sizeof name, "%s.final_layer_norm", st);
    if ((s = get_rms(m, name, c->d_model, &sm->ln_f, err))) return s;
    sm->layers = as_calloc((size_t)L, sizeof *sm->layers);
    if (!sm->layers) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int l = 0; l < L; l++)
        if ((s = bind_layer(m, st, l, cross, &sm->layers[l], err))) return s;
    return AS_OK;
}

as_status t5_bind(as_model *m, as_error *err) {
    as_status s;
    const as_config *c = &m->cfg;
    if (model_has(m, "classification_head.dense.weight") || model_has(m, "qa_outputs.weight"))
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: %s sequence-classification / question-answering heads are not supported (the LM "
                          "head is)",
                          m->dir, c->model_type);
    as_model *d = model_decoder_view(m);
    if (!d) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if ((s = bind_stack(m, m, "encoder", c->n_layer, 0, err)) ||
        (s = bind_stack(m, d, "decoder", c->n_dec_layer, 1, err)))
        return s;
    if (c->tie_word_embeddings) d->mlm_decoder = d->wte;
    else if ((s = model_get(m, "lm_head.weight", c->vocab_size, c->d_model, 1, &d->mlm_decoder, err))) return s;
    d->heads = m->heads = HEAD_LM;
    m->mlm_decoder = d->mlm_decoder;
    return AS_OK;
}
