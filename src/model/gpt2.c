/* gpt2.c — GPT-2 (Radford et al. 2019): word + position embeddings, pre-LN causal
 * layers whose Conv1D weights are stored [in, out] with a fused c_attn [D, 3D]
 * (q, k, v are column views into it), final ln_f, and the LM head tied to wte (or
 * lm_head.weight when stored) or a sequence-classification `score` head on the last
 * non-pad token. Hugging Face names with or without the transformer. prefix. The
 * layers run in encoder.c.
 */
#include "model/model.h"

#include <string.h>

as_status gpt2_bind(as_model *m, as_error *err) {
    as_status s;
    const as_config *c = &m->cfg;
    int D = c->d_model, F = c->d_ff, L = c->n_layer, V = c->vocab_size;
    char name[512];
    m->pre_ln = 1;
    if ((s = model_get(m, "wte.weight", V, D, 1, &m->wte, err))) return s;
    if ((s = model_get(m, "wpe.weight", c->max_pos, D, 1, &m->wpe, err))) return s;
    m->layers = as_calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int l = 0; l < L; l++) {
        layer_w *w = &m->layers[l];
        lin_t qkv;
        snprintf(name, sizeof name, "h.%d.attn.c_attn", l);
        if ((s = model_get_lin(m, name, D, 3 * D, 1, 1, &qkv, err))) return s;
        for (int i = 0; i < 3; i++) {
            lin_t *dst = i == 0 ? &w->q : i == 1 ? &w->k : &w->v;
            *dst = qkv;
            dst->w = qkv.w + (size_t)i * D;
            dst->b = qkv.b + (size_t)i * D;
            dst->n_out = D;
            dst->ldw = 3 * D;
            dst->part_off = i * D;
        }
        snprintf(name, sizeof name, "h.%d.attn.c_proj", l);
        if ((s = model_get_lin(m, name, D, D, 1, 1, &w->o, err))) return s;
        snprintf(name, sizeof name, "h.%d.mlp.c_fc", l);
        if ((s = model_get_lin(m, name, D, F, 1, 1, &w->ff1, err))) return s;
        snprintf(name, sizeof name, "h.%d.mlp.c_proj", l);
        if ((s = model_get_lin(m, name, F, D, 1, 1, &w->ff2, err))) return s;
        snprintf(name, sizeof name, "h.%d.ln_1", l);
        if ((s = model_get_ln(m, name, D, "weight", "bias", &w->ln1, err))) return s;
        snprintf(name, sizeof name, "h.%d.ln_2", l);
        if ((s = model_get_ln(m, name, D, "weight", "bias", &w->ln2, err))) return s;
    }
    if ((s = model_get_ln(m, "ln_f", D, "weight", "bias", &m->ln_f, err))) return s;
    if (st_set_find(m->st, "score.weight")) {
        if ((s = model_classes_from(m, "score.weight", err))) return s;
        if ((s = model_get_lin(m, "@score", D, m->cfg.num_labels, 0, 0, &m->cls_out, err))) return s;
        m->cls_last_token = 1;
        m->heads |= HEAD_CLASSIFIER;
    } else {
        if ((s = model_get(m, "@lm_head.weight", V, D, 0, &m->mlm_decoder, err))) return s;
        if (!m->mlm_decoder) m->mlm_decoder = m->wte;
        m->heads |= HEAD_LM;
    }
    return AS_OK;
}

/* word + position embeddings (positions 0..T-1), plus wte[token type id] when the
 * caller gave type ids (HF GPT2Model adds wte(token_type_ids) whenever they are passed,
 * zeros included). x: (T, D). */
void gpt2_embed(const as_model *m, const emb_in *in, float *x) {
    const as_encoding *enc = in->enc;
    unsigned ablate = in->ablate;
    int T = enc->n, D = m->cfg.d_model;
    for (int t = 0; t < T; t++) {
        const float *w = model_emb_word(m, in, t), *p = model_emb_pos(m, ablate, in->one_pos ? in->pos0 : in->pos0 + t);
        const float *tt = model_emb_type(m, enc, ablate, t);
        float *r = x + (size_t)t * D;
        for (int i = 0; i < D; i++) r[i] = (tt ? w[i] + tt[i] : w[i]) + p[i];
    }
}
