/* bart.c — the encoder-decoder family in one binding: BART (Lewis et al. 2020; post-norm,
 * learned positions with offset 2, layernorm_embedding), mBART (Liu et al. 2020; the same
 * with pre-norm layers and final encoder / decoder layer norms) and Marian (Junczys-Dowmunt
 * et al. 2018; post-norm, sinusoidal positions, no embedding norm). config.c turns
 * config.json into the block description of as_config; this file binds the Hugging Face
 * names (with or without the "model." prefix) of both stacks, builds the decoder stack as
 * an as_model view (m->dec) whose layers carry the cross-attention weights, binds the LM
 * head (tied to model.shared or lm_head.weight, plus final_logits_bias) and computes the
 * embeddings. The layers run in encoder.c (as_forward_seq2seq). It does not bind the
 * sequence-classification or question-answering heads (refused by name).
 */
#include "model/model.h"

#include <math.h>
#include <string.h>

/* Largest sinusoidal position table computed at load (max_position_embeddings x d_model
 * floats; opus-mt's is 512 x 512, 1 MiB): a config asking for more is refused. */
#define BART_MAX_SINUSOID_BYTES ((size_t)256 << 20)

/* Linear map base (nn.Linear layout) with its bias. */
static as_status get_lin(as_model *m, const char *base, int n_in, int n_out, lin_t *out, as_error *err) {
    return model_get_lin(m, base, n_in, n_out, 0, 1, out, err);
}

static as_status get_ln(as_model *m, const char *base, int n, ln_t *out, as_error *err) {
    return model_get_ln(m, base, n, "weight", "bias", out, err);
}

/* Binds layer l of stack st ("encoder" or "decoder") into w; cross: the decoder's
 * encoder_attn sub-layer. */
static as_status bind_layer(as_model *m, const char *st, int l, int cross, layer_w *w, as_error *err) {
    int D = m->cfg.d_model, F = m->cfg.d_ff;
    char name[512];
    as_status s;
#define LNAME(fmt) (snprintf(name, sizeof name, "%s.layers.%d." fmt, st, l), name)
    if ((s = get_lin(m, LNAME("self_attn.q_proj"), D, D, &w->q, err)) ||
        (s = get_lin(m, LNAME("self_attn.k_proj"), D, D, &w->k, err)) ||
        (s = get_lin(m, LNAME("self_attn.v_proj"), D, D, &w->v, err)) ||
        (s = get_lin(m, LNAME("self_attn.out_proj"), D, D, &w->o, err)) ||
        (s = get_ln(m, LNAME("self_attn_layer_norm"), D, &w->ln1, err)) ||
        (s = get_lin(m, LNAME("fc1"), D, F, &w->ff1, err)) || (s = get_lin(m, LNAME("fc2"), F, D, &w->ff2, err)) ||
        (s = get_ln(m, LNAME("final_layer_norm"), D, &w->ln2, err)))
        return s;
    if (!cross) return AS_OK;
    if ((s = get_lin(m, LNAME("encoder_attn.q_proj"), D, D, &w->cq, err)) ||
        (s = get_lin(m, LNAME("encoder_attn.k_proj"), D, D, &w->ck, err)) ||
        (s = get_lin(m, LNAME("encoder_attn.v_proj"), D, D, &w->cv, err)) ||
        (s = get_lin(m, LNAME("encoder_attn.out_proj"), D, D, &w->co, err)) ||
        (s = get_ln(m, LNAME("encoder_attn_layer_norm"), D, &w->ln_c, err)))
        return s;
    return AS_OK;
#undef LNAME
}

/* Marian's sinusoidal table (transformers MarianSinusoidalPositionalEmbedding._init_weight):
 * angle(pos, j) = pos / 10000^(2 floor(j / 2) / D); the first ceil(D / 2) columns hold sin of
 * the even j's angles, the rest cos of the odd j's. tab: (P, D). */
static void sinusoid_table(float *tab, int P, int D) {
    int half = D % 2 == 0 ? D / 2 : D / 2 + 1;
    for (int p = 0; p < P; p++) {
        float *r = tab + (size_t)p * D;
        for (int j = 0; j < D; j += 2) r[j / 2] = (float)sin(p / pow(10000.0, (double)j / D));
        for (int j = 1; j < D; j += 2) r[half + j / 2] = (float)cos(p / pow(10000.0, (double)(j - 1) / D));
    }
}

/* The position table of stack st: learned (P, D) rows, or Marian's sinusoids (read from the
 * file when it stores them, else computed into memory owned by m). */
static as_status bind_positions(as_model *m, const char *st, const float **out, as_error *err) {
    const as_config *c = &m->cfg;
    char name[512];
    snprintf(name, sizeof name, "%s.embed_positions.weight", st);
    if (!c->sinusoidal_pos || model_has(m, name)) return model_get(m, name, c->max_pos, c->d_model, 1, out, err);
    if (m->wpe) { /* the encoder's computed table serves the decoder too */
        *out = m->wpe;
        return AS_OK;
    }
    if ((size_t)c->max_pos * c->d_model > BART_MAX_SINUSOID_BYTES / sizeof(float))
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: max_position_embeddings %d x d_model %d: the sinusoidal position table would be "
                          "over %zu MiB",
                          m->dir, c->max_pos, c->d_model, BART_MAX_SINUSOID_BYTES >> 20);
    float *tab = as_malloc_array((size_t)c->max_pos * c->d_model, sizeof(float));
    if (!tab) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    sinusoid_table(tab, c->max_pos, c->d_model);
    if (m->n_owned == m->cap_owned) {
        int nc = m->cap_owned ? m->cap_owned * 2 : 64;
        float **n = realloc(m->owned, (size_t)nc * sizeof *n);
        if (!n) {
            free(tab);
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        }
        m->owned = n;
        m->cap_owned = nc;
    }
    m->owned[m->n_owned++] = tab;
    *out = tab;
    return AS_OK;
}

/* The word embedding table: model.shared, else the stack's own embed_tokens. */
static as_status bind_words(as_model *m, const char *st, const float **out, as_error *err) {
    char name[512];
    const as_config *c = &m->cfg;
    snprintf(name, sizeof name, "%s.embed_tokens.weight", st);
    const char *use = model_has(m, "shared.weight") ? "shared.weight" : name;
    return model_get(m, use, c->vocab_size, c->d_model, 1, out, err);
}

/* Binds stack st of m into sm (m itself for the encoder, m->dec for the decoder). */
static as_status bind_stack(as_model *m, as_model *sm, const char *st, int L, int cross, as_error *err) {
    const as_config *c = &m->cfg;
    char name[512];
    as_status s;
    sm->pre_ln = c->pre_norm;
    sm->pos_offset = c->sinusoidal_pos ? 0 : 2; /* BartLearnedPositionalEmbedding's offset */
    if ((s = bind_words(m, st, &sm->wte, err)) || (s = bind_positions(m, st, &sm->wpe, err))) return s;
    if (c->layernorm_embedding) {
        snprintf(name, sizeof name, "%s.layernorm_embedding", st);
        if ((s = get_ln(m, name, c->d_model, &sm->ln_emb, err))) return s;
    }
    if (c->pre_norm) {
        snprintf(name, sizeof name, "%s.layer_norm", st);
        if ((s = get_ln(m, name, c->d_model, &sm->ln_f, err))) return s;
    }
    sm->layers = as_calloc((size_t)L, sizeof *sm->layers);
    if (!sm->layers) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int l = 0; l < L; l++)
        if ((s = bind_layer(m, st, l, cross, &sm->layers[l], err))) return s;
    return AS_OK;
}

as_status bart_bind(as_model *m, as_error *err) {
    as_status s;
    const as_config *c = &m->cfg;
    int V = c->vocab_size, D = c->d_model;
    static const char *const refused[] = {"classification_head.dense.weight", "qa_outputs.weight"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++)
        if (model_has(m, refused[i]))
            return as_err_set(err, AS_ERR_INPUT,
                              "%s: tensor '%s': %s sequence-classification / question-answering heads are not "
                              "supported (the LM head is)",
                              m->dir, refused[i], c->model_type);
    as_model *d = model_decoder_view(m);
    if (!d) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if ((s = bind_stack(m, m, "encoder", c->n_layer, 0, err)) ||
        (s = bind_stack(m, d, "decoder", c->n_dec_layer, 1, err)))
        return s;
    /* LM head: logits = x shared^T + final_logits_bias (BartForConditionalGeneration) */
    const float *bias = NULL;
    if ((s = model_get(m, "@final_logits_bias", 1, V, 0, &bias, err))) return s;
    if (c->tie_word_embeddings) d->mlm_decoder = d->wte;
    else if ((s = model_get(m, "@lm_head.weight", V, D, 1, &d->mlm_decoder, err))) return s;
    d->mlm_bias = bias;
    d->heads = HEAD_LM;
    /* the encoder reports the model's head; its forward is as_forward_seq2seq's */
    m->mlm_decoder = d->mlm_decoder;
    m->mlm_bias = bias;
    m->heads = HEAD_LM;
    return AS_OK;
}

void bart_free_dec(as_model *dec) {
    if (!dec) return;
    free(dec->layers);
    free(dec->mean_wte);
    free(dec->mean_wpe);
    free(dec->mean_wtt);
    free(dec);
}

void bart_embed(const as_model *m, const emb_in *in, float *x) {
    const as_encoding *enc = in->enc;
    int T = enc->n, D = m->cfg.d_model;
    float sc = m->cfg.emb_scale > 0 ? m->cfg.emb_scale : 1.0f;
    for (int t = 0; t < T; t++) {
        const float *w = model_emb_word(m, in, t), *p = model_emb_pos(m, in->ablate, in->pos0 + (in->one_pos ? 0 : t) + m->pos_offset);
        float *r = x + (size_t)t * D;
        for (int i = 0; i < D; i++) r[i] = w[i] * sc + p[i];
    }
    if (m->ln_emb.g) op_layernorm(&m->ln_emb, m->cfg.ln_eps, x, T);
}

as_status as_seq2seq_shift_target(const as_model *m, const as_encoding *target, as_encoding *dec, as_error *err) {
    memset(dec, 0, sizeof *dec);
    const as_config *c = &m->cfg;
    if (!m->dec)
        return as_err_set(err, AS_ERR_INPUT, "%s is not an encoder-decoder model (%s): it takes no target", m->dir,
                          c->model_type);
    int n = target->n;
    if (n <= 0) return as_err_set(err, AS_ERR_INPUT, "empty target: no tokens");
    int start = c->decoder_start_token_id;
    if (!strcmp(c->model_type, "mbart")) { /* modeling_mbart.shift_tokens_right: the last non-pad token
                                              (the language code) starts the decoder input */
        int last = n - 1;
        while (last > 0 && target->ids[last] == c->pad_token_id) last--;
        start = target->ids[last];
    } else if (start < 0) {
        return as_err_set(err, AS_ERR_INPUT, "%s: config.json has no decoder_start_token_id to shift the target with",
                          m->dir);
    }
    int32_t *ids = as_malloc_array((size_t)n, sizeof(int32_t));
    if (!ids) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    ids[0] = start;
    for (int i = 1; i < n; i++) ids[i] = target->ids[i - 1];
    as_status s = as_encoding_from_ids(m, ids, NULL, n, dec, err);
    free(ids);
    if (s) return s;
    /* each token keeps its byte span in the target text and its special mark, shifted with
       it; the start token is a special */
    dec->start[0] = dec->end[0] = -1;
    dec->seq[0] = -1;
    for (int i = 1; i < n; i++) {
        dec->start[i] = target->start[i - 1];
        dec->end[i] = target->end[i - 1];
        dec->seq[i] = target->seq[i - 1];
    }
    return AS_OK;
}
