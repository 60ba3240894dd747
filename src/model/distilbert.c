/* distilbert.c — DistilBERT (Sanh et al. 2019): word + position embeddings (no
 * segments), post-LN layers with q_lin/k_lin/v_lin/out_lin, and the task heads
 * present (pre_classifier + ReLU + classifier on the first token; vocab_transform +
 * activation + vocab_layer_norm + vocab_projector). Hugging Face names with or
 * without the distilbert. prefix. The layers run in encoder.c.
 */
#include "model/model.h"

#include <string.h>

as_status distilbert_bind(as_model *m, as_error *err) {
    as_status s;
    const as_config *c = &m->cfg;
    int D = c->d_model, F = c->d_ff, L = c->n_layer, V = c->vocab_size;
    char name[512];
    if ((s = model_get(m, "embeddings.word_embeddings.weight", V, D, 1, &m->wte, err))) return s;
    if ((s = model_get(m, "embeddings.position_embeddings.weight", c->max_pos, D, 1, &m->wpe, err))) return s;
    if ((s = model_get_ln(m, "embeddings.LayerNorm", D, "weight", "bias", &m->ln_emb, err))) return s;
    m->layers = as_calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int l = 0; l < L; l++) {
        layer_w *w = &m->layers[l];
        struct { const char *suffix; lin_t *lin; int in, out; } lins[] = {
            {"attention.q_lin", &w->q, D, D}, {"attention.k_lin", &w->k, D, D},
            {"attention.v_lin", &w->v, D, D}, {"attention.out_lin", &w->o, D, D},
            {"ffn.lin1", &w->ff1, D, F}, {"ffn.lin2", &w->ff2, F, D}};
        for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++) {
            snprintf(name, sizeof name, "transformer.layer.%d.%s", l, lins[i].suffix);
            if ((s = model_get_lin(m, name, lins[i].in, lins[i].out, 0, 1, lins[i].lin, err))) return s;
        }
        snprintf(name, sizeof name, "transformer.layer.%d.sa_layer_norm", l);
        if ((s = model_get_ln(m, name, D, "weight", "bias", &w->ln1, err))) return s;
        snprintf(name, sizeof name, "transformer.layer.%d.output_layer_norm", l);
        if ((s = model_get_ln(m, name, D, "weight", "bias", &w->ln2, err))) return s;
    }
    if (st_set_find(m->st, "classifier.weight")) {
        if ((s = model_classes_from(m, "classifier.weight", err))) return s;
        if ((s = model_get_lin(m, "@pre_classifier", D, D, 0, 1, &m->cls_pre, err))) return s;
        if ((s = model_get_lin(m, "@classifier", D, m->cfg.num_labels, 0, 1, &m->cls_out, err))) return s;
        m->cls_pre_act = CLS_ACT_RELU;
        m->heads |= HEAD_CLASSIFIER;
    }
    if (st_set_find(m->st, "vocab_transform.weight")) {
        if ((s = model_get_lin(m, "@vocab_transform", D, D, 0, 1, &m->mlm_dense, err))) return s;
        m->mlm_act = c->act;
        if ((s = model_get_ln(m, "@vocab_layer_norm", D, "weight", "bias", &m->mlm_ln, err))) return s;
        if ((s = model_get(m, "@vocab_projector.weight", V, D, 0, &m->mlm_decoder, err))) return s;
        if (!m->mlm_decoder) m->mlm_decoder = m->wte;
        if ((s = model_get(m, "@vocab_projector.bias", V, -1, 0, &m->mlm_bias, err))) return s;
        m->heads |= HEAD_MLM;
    }
    return AS_OK;
}

/* word + position embeddings (T, D), before the LayerNorm. */
void distilbert_embed_sum(const as_model *m, const emb_in *in, float *e) {
    int T = in->enc->n, D = m->cfg.d_model;
    for (int t = 0; t < T; t++) {
        const float *w = model_emb_word(m, in, t), *p = model_emb_pos(m, in->ablate, t);
        float *r = e + (size_t)t * D;
        for (int i = 0; i < D; i++) r[i] = w[i] + p[i];
    }
}

/* word + position embeddings, then LayerNorm. x: (T, D). */
void distilbert_embed(const as_model *m, const emb_in *in, float *x) {
    distilbert_embed_sum(m, in, x);
    op_layernorm(&m->ln_emb, m->cfg.ln_eps, x, in->enc->n);
}
