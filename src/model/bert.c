/* bert.c — the BERT family: BERT (Devlin et al. 2019), RoBERTa (Liu et al. 2019;
 * position ids offset by padding_idx + 1, pads keep padding_idx) and ELECTRA
 * discriminators (Clark et al. 2020; optional embeddings_project when the embedding
 * width differs). Binds Hugging Face parameter names (with or without the
 * bert./roberta./electra. prefix), computes embeddings, and binds the task heads
 * present: sequence classifier (BERT pooler + classifier; RoBERTa/ELECTRA
 * classifier.dense + out_proj) and the masked-LM head (cls.predictions / lm_head).
 * The layers themselves run in encoder.c.
 */
#include "model/model.h"

#include <string.h>

/* LayerNorm named base.{weight,bias}, or base.{gamma,beta} in TF-converted files. */
static as_status get_ln(as_model *m, const char *base, int n, ln_t *out, as_error *err) {
    char name[512];
    if (snprintf(name, sizeof name, "%s.gamma", base) >= (int)sizeof name)
        return as_err_set(err, AS_ERR_INTERNAL, "tensor name too long: %s", base);
    if (!model_has(m, name)) return model_get_ln(m, base, n, "weight", "bias", out, err);
    return model_get_ln(m, base, n, "gamma", "beta", out, err);
}

static as_status bind_heads(as_model *m, as_error *err) {
    as_status s;
    const as_config *c = &m->cfg;
    int D = c->d_model, V = c->vocab_size;
    int electra = !strcmp(c->model_type, "electra");
    if (st_set_find(m->st, "classifier.out_proj.weight")) {
        if ((s = model_classes_from(m, "classifier.out_proj.weight", err))) return s;
        if ((s = model_get_lin(m, "@classifier.dense", D, D, 0, 1, &m->cls_pre, err))) return s;
        if ((s = model_get_lin(m, "@classifier.out_proj", D, m->cfg.num_labels, 0, 1, &m->cls_out, err))) return s;
        m->cls_pre_act = electra ? CLS_ACT_GELU : CLS_ACT_TANH;
        m->heads |= HEAD_CLASSIFIER;
    } else if (st_set_find(m->st, "classifier.weight")) {
        if ((s = model_classes_from(m, "classifier.weight", err))) return s;
        if ((s = model_get_lin(m, "pooler.dense", D, D, 0, 1, &m->cls_pre, err))) return s;
        if ((s = model_get_lin(m, "@classifier", D, m->cfg.num_labels, 0, 1, &m->cls_out, err))) return s;
        m->cls_pre_act = CLS_ACT_TANH;
        m->heads |= HEAD_CLASSIFIER;
    }
    /* masked-LM head: BERT cls.predictions.*, RoBERTa lm_head.* */
    const char *dense = NULL, *ln = NULL, *dec = NULL, *bias = NULL, *bias2 = NULL;
    if (st_set_find(m->st, "cls.predictions.transform.dense.weight")) {
        dense = "@cls.predictions.transform.dense";
        ln = "@cls.predictions.transform.LayerNorm";
        dec = "@cls.predictions.decoder.weight";
        bias = "@cls.predictions.bias";
        bias2 = "@cls.predictions.decoder.bias";
        m->mlm_act = c->act;
    } else if (st_set_find(m->st, "lm_head.dense.weight")) {
        dense = "@lm_head.dense";
        ln = "@lm_head.layer_norm";
        dec = "@lm_head.decoder.weight";
        bias = "@lm_head.bias";
        bias2 = "@lm_head.decoder.bias";
        m->mlm_act = ACT_GELU; /* RobertaLMHead applies gelu regardless of hidden_act */
    }
    if (dense) {
        if ((s = model_get_lin(m, dense, D, D, 0, 1, &m->mlm_dense, err))) return s;
        if ((s = get_ln(m, ln, D, &m->mlm_ln, err))) return s;
        if ((s = model_get(m, dec, V, D, 0, &m->mlm_decoder, err))) return s;
        if (!m->mlm_decoder) {
            if (c->d_embed != D)
                return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s' missing (cannot tie: embedding width %d != %d)",
                                  m->dir, dec + 1, c->d_embed, D);
            m->mlm_decoder = m->wte;
        }
        if ((s = model_get(m, bias, V, -1, 0, &m->mlm_bias, err))) return s;
        if (!m->mlm_bias && (s = model_get(m, bias2, V, -1, 0, &m->mlm_bias, err))) return s;
        /* the same head predicts the next token in a decoder (BertLMHeadModel) */
        m->heads |= c->causal ? HEAD_LM : HEAD_MLM;
    }
    return AS_OK;
}

as_status bert_bind(as_model *m, as_error *err) {
    as_status s;
    const as_config *c = &m->cfg;
    int D = c->d_model, De = c->d_embed, F = c->d_ff, L = c->n_layer;
    char name[512];
    if (c->arch == ARCH_ROBERTA) {
        if (c->pad_token_id < 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: config.json: RoBERTa needs pad_token_id", m->dir);
        m->pos_offset = c->pad_token_id + 1;
        if (m->pos_offset >= c->max_pos)
            return as_err_set(err, AS_ERR_INPUT, "%s: config.json: pad_token_id %d leaves no positions (max %d)",
                              m->dir, c->pad_token_id, c->max_pos);
    }
    if ((s = model_get(m, "embeddings.word_embeddings.weight", c->vocab_size, De, 1, &m->wte, err))) return s;
    if ((s = model_get(m, "embeddings.position_embeddings.weight", c->max_pos, De, 1, &m->wpe, err))) return s;
    if (c->type_vocab > 0 &&
        (s = model_get(m, "embeddings.token_type_embeddings.weight", c->type_vocab, De, 1, &m->wtt, err)))
        return s;
    if ((s = get_ln(m, "embeddings.LayerNorm", De, &m->ln_emb, err))) return s;
    if (De != D && (s = model_get_lin(m, "embeddings_project", De, D, 0, 1, &m->emb_proj, err))) return s;
    m->layers = as_calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int l = 0; l < L; l++) {
        layer_w *w = &m->layers[l];
        struct { const char *suffix; lin_t *lin; int in, out; } lins[] = {
            {"attention.self.query", &w->q, D, D}, {"attention.self.key", &w->k, D, D},
            {"attention.self.value", &w->v, D, D}, {"attention.output.dense", &w->o, D, D},
            {"intermediate.dense", &w->ff1, D, F}, {"output.dense", &w->ff2, F, D}};
        for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++) {
            snprintf(name, sizeof name, "encoder.layer.%d.%s", l, lins[i].suffix);
            if ((s = model_get_lin(m, name, lins[i].in, lins[i].out, 0, 1, lins[i].lin, err))) return s;
        }
        snprintf(name, sizeof name, "encoder.layer.%d.attention.output.LayerNorm", l);
        if ((s = get_ln(m, name, D, &w->ln1, err))) return s;
        snprintf(name, sizeof name, "encoder.layer.%d.output.LayerNorm", l);
        if ((s = get_ln(m, name, D, &w->ln2, err))) return s;
    }
    return bind_heads(m, err);
}

/* Embeddings (BERT: Devlin et al. 2019, sec. 3): e = word + token type + position
 * (T, De), before the LayerNorm. RoBERTa positions follow Hugging Face's
 * create_position_ids_from_input_ids: padding_idx + running count of non-pad tokens,
 * pads at padding_idx. */
int bert_position(const as_model *m, const as_encoding *enc, int t, int *count) {
    const as_config *c = &m->cfg;
    if (c->arch != ARCH_ROBERTA) return t;
    int is_pad = enc->ids[t] == c->pad_token_id;
    if (!is_pad) (*count)++;
    return is_pad ? c->pad_token_id : c->pad_token_id + *count;
}

void bert_embed_sum(const as_model *m, const emb_in *in, float *e) {
    const as_config *c = &m->cfg;
    const as_encoding *enc = in->enc;
    unsigned ablate = in->ablate;
    int T = enc->n, De = c->d_embed;
    int count = 0;
    for (int t = 0; t < T; t++) {
        int pos = bert_position(m, enc, t, &count);
        const float *w = model_emb_word(m, in, t);
        const float *p = model_emb_pos(m, ablate, pos);
        const float *tt = model_emb_type(m, enc, ablate, t);
        float *r = e + (size_t)t * De;
        for (int i = 0; i < De; i++) r[i] = (tt ? w[i] + tt[i] : w[i]) + p[i];
    }
}

/* The embedding sum, its LayerNorm and ELECTRA's projection. x: (T, D); tmp: (T, max(De, D)). */
void bert_embed(const as_model *m, const emb_in *in, float *x, float *tmp) {
    int T = in->enc->n;
    float *e = lin_has(&m->emb_proj) ? tmp : x;
    bert_embed_sum(m, in, e);
    op_layernorm(&m->ln_emb, m->cfg.ln_eps, e, T);
    if (lin_has(&m->emb_proj)) op_linear(&m->emb_proj, e, T, x);
}
