/* llama.c — the decoder LLM family in one binding: Llama 2/3 (Touvron et al. 2023),
 * Mistral (sliding-window attention), Qwen2 (q/k/v biases), Qwen3 (q/k RMSNorm, explicit
 * head_dim), Gemma 2/3 ((1 + w) RMSNorm, norms before and after each sub-layer, scaled
 * embeddings, soft-capping, local/global RoPE bases) and Phi-3 (fused qkv_proj and
 * gate_up_proj, partial rotary). config.c turns config.json into the block description
 * of as_config; this file binds the Hugging Face parameter names (with or without the
 * "model." prefix) to the layer views of model.h, computes the embeddings and the
 * rotary frequencies (with linear, llama3 and YaRN scaling). The layers run in
 * encoder.c, whose pre-norm path reads the same block description.
 */
#include "model/model.h"
#include "model/ops.h"

#include <math.h>
#include <string.h>

#define LLAMA_PI 3.14159265358979323846

/* Linear map `base` (nn.Linear layout), its bias read only when the config has one. */
static as_status get_lin(as_model *m, const char *base, int n_in, int n_out, int bias, lin_t *out,
                         as_error *err) {
    as_status s = model_get_lin(m, base, n_in, n_out, 0, bias, out, err);
    if (!s && !bias) out->b = NULL;
    return s;
}

/* RMSNorm weight base.weight (n). */
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

/* Rows [r0, r0 + n) of a fused nn.Linear weight (and bias) as a map of its own. */
static lin_t rows_of(const lin_t *f, int r0, int n) {
    lin_t r = *f;
    r.w = f->w ? f->w + (size_t)r0 * f->ldw : NULL;
    r.wbf = f->wbf ? f->wbf + (size_t)r0 * f->n_in : NULL; /* BF16 in place: rows of n_in */
    r.b = f->b ? f->b + r0 : NULL;
    r.n_out = n;
    r.part_off = r0;
    return r;
}

static as_status bind_layer(as_model *m, int l, as_error *err) {
    const as_config *c = &m->cfg;
    int D = c->d_model, F = c->d_ff, H = c->n_head, Hkv = c->n_kv_head, Dh = c->d_head;
    layer_w *w = &m->layers[l];
    char name[512];
    as_status s;
#define LNAME(fmt) (snprintf(name, sizeof name, "layers.%d." fmt, l), name)
    if (model_has(m, LNAME("self_attn.qkv_proj.weight"))) {
        lin_t f;
        if ((s = get_lin(m, LNAME("self_attn.qkv_proj"), D, (H + 2 * Hkv) * Dh, c->qkv_bias, &f, err))) return s;
        w->q = rows_of(&f, 0, H * Dh);
        w->k = rows_of(&f, H * Dh, Hkv * Dh);
        w->v = rows_of(&f, (H + Hkv) * Dh, Hkv * Dh);
    } else {
        if ((s = get_lin(m, LNAME("self_attn.q_proj"), D, H * Dh, c->qkv_bias, &w->q, err)) ||
            (s = get_lin(m, LNAME("self_attn.k_proj"), D, Hkv * Dh, c->qkv_bias, &w->k, err)) ||
            (s = get_lin(m, LNAME("self_attn.v_proj"), D, Hkv * Dh, c->qkv_bias, &w->v, err)))
            return s;
    }
    if ((s = get_lin(m, LNAME("self_attn.o_proj"), H * Dh, D, c->o_bias, &w->o, err))) return s;
    if (c->qk_norm && ((s = get_rms(m, LNAME("self_attn.q_norm"), Dh, &w->q_norm, err)) ||
                       (s = get_rms(m, LNAME("self_attn.k_norm"), Dh, &w->k_norm, err))))
        return s;
    if ((s = get_rms(m, LNAME("input_layernorm"), D, &w->ln1, err))) return s;
    if (c->post_norms) {
        if ((s = get_rms(m, LNAME("post_attention_layernorm"), D, &w->post_attn, err)) ||
            (s = get_rms(m, LNAME("pre_feedforward_layernorm"), D, &w->ln2, err)) ||
            (s = get_rms(m, LNAME("post_feedforward_layernorm"), D, &w->post_ff, err)))
            return s;
    } else if ((s = get_rms(m, LNAME("post_attention_layernorm"), D, &w->ln2, err))) {
        return s; /* Llama's name for the norm before the MLP */
    }
    if (model_has(m, LNAME("mlp.gate_up_proj.weight"))) {
        lin_t f;
        if ((s = get_lin(m, LNAME("mlp.gate_up_proj"), D, 2 * F, c->mlp_bias, &f, err))) return s;
        w->ff1 = rows_of(&f, 0, F); /* Phi-3: gate first, then up */
        w->up = rows_of(&f, F, F);
    } else if ((s = get_lin(m, LNAME("mlp.gate_proj"), D, F, c->mlp_bias, &w->ff1, err)) ||
               (s = get_lin(m, LNAME("mlp.up_proj"), D, F, c->mlp_bias, &w->up, err))) {
        return s;
    }
    return get_lin(m, LNAME("mlp.down_proj"), F, D, c->mlp_bias, &w->ff2, err);
#undef LNAME
}

/* Inverse frequencies of one rotary table (HF modeling_rope_utils) for a forward over
 * positions 0 .. n_pos - 1: theta^(-2i/R) for i < R/2, then the scaling of the global
 * layers. inv: (R/2). */
/* theta ^ (2i / R) as transformers computes it in float32: the exponent
 * arange(0, R, 2).float() / R rounded to float, the base (a Python float) cast to float,
 * the power rounded once to float. The inverse frequencies built on it (1.0 / this, in
 * float) then equal transformers' bit for bit, except for about one pair in a hundred
 * where torch's vectorised powf is one ulp off. Computed in double instead, a fifth of
 * them differed by an ulp, and an ulp on a frequency near 1 turns position 65,536 by
 * 4e-3 rad. */
static float rope_pos_freq(double theta, int i, int R) {
    float e = (float)(2 * i) / (float)R;
    return (float)pow((double)(float)theta, (double)e);
}

static void rope_freqs(const as_config *c, double theta, int scaled, int n_pos, float *inv, float *mscale) {
    int R = c->rope_dim, half = R / 2;
    *mscale = 1.0f;
    if (scaled && c->rope_scaling == ROPE_SCALE_DYNAMIC && n_pos > c->rope_orig_max_pos) {
        /* NTK-aware: the base grows to theta (f n / M - (f - 1))^(R / (R - 2)) past M positions */
        double f = c->rope_factor, M = c->rope_orig_max_pos;
        theta *= pow(f * n_pos / M - (f - 1.0), (double)R / (R - 2));
    }
    for (int i = 0; i < half; i++) inv[i] = 1.0f / rope_pos_freq(theta, i, R);
    if (!scaled) return;
    switch (c->rope_scaling) {
    case ROPE_SCALE_NONE: break;
    case ROPE_SCALE_DYNAMIC: break; /* in the base above */
    case ROPE_SCALE_LONGROPE: { /* divisors per pair: the long list past the original length */
        const float *ext = n_pos > c->rope_orig_max_pos ? c->rope_long_factor : c->rope_short_factor;
        for (int i = 0; i < half; i++) inv[i] = 1.0f / (ext[i] * rope_pos_freq(theta, i, R));
        *mscale = c->rope_attn_factor;
        break;
    }
    case ROPE_SCALE_LINEAR:
        for (int i = 0; i < half; i++) inv[i] = inv[i] / c->rope_factor;
        break;
    case ROPE_SCALE_LLAMA3: { /* wavelengths beyond the low-frequency one are divided by
                                 the factor, those below the high-frequency one kept,
                                 and the band between interpolated */
        double orig = c->rope_orig_max_pos, lo = c->rope_low_freq_factor, hi = c->rope_high_freq_factor;
        float lo_wl = (float)(orig / lo), hi_wl = (float)(orig / hi), span = (float)(hi - lo);
        float factor = c->rope_factor;
        for (int i = 0; i < half; i++) {
            float f = inv[i], wl = (float)(2.0 * LLAMA_PI) / f;
            if (wl > lo_wl) f = f / factor;
            else if (wl >= hi_wl) {
                float sm = ((float)orig / wl - (float)lo) / span;
                f = (1.0f - sm) * f / factor + sm * f;
            }
            inv[i] = f;
        }
        break;
    }
    case ROPE_SCALE_YARN: { /* Peng et al. 2023: interpolate the low frequencies, keep the
                               high ones, linear ramp between the correction dims */
        double factor = c->rope_factor, orig = c->rope_orig_max_pos;
        double bf = c->yarn_beta_fast > 0 ? c->yarn_beta_fast : 32.0;
        double bs = c->yarn_beta_slow > 0 ? c->yarn_beta_slow : 1.0;
        double lo = floor(R * log(orig / (bf * 2.0 * LLAMA_PI)) / (2.0 * log(theta)));
        double hi = ceil(R * log(orig / (bs * 2.0 * LLAMA_PI)) / (2.0 * log(theta)));
        if (lo < 0) lo = 0;
        if (hi > R - 1) hi = R - 1;
        if (lo == hi) hi += 0.001;
        for (int i = 0; i < half; i++) {
            float pos_freq = rope_pos_freq(theta, i, R);
            float extra = 1.0f / pos_freq, inter = 1.0f / ((float)factor * pos_freq);
            float ramp = ((float)i - (float)lo) / (float)(hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float ef = 1.0f - ramp;
            inv[i] = inter * (1.0f - ef) + extra * ef;
        }
        *mscale = c->rope_attn_factor > 0 ? c->rope_attn_factor
                                          : (float)(factor > 1.0 ? 0.1 * log(factor) + 1.0 : 1.0);
        break;
    }
    }
}

as_status llama_bind(as_model *m, as_error *err) {
    as_status s;
    as_config *c = &m->cfg;
    int D = c->d_model, L = c->n_layer, V = c->vocab_size;
    m->pre_ln = 1;
    m->keep_bf16 = 1; /* BF16 matrices are multiplied from the mapping, not copied to F32 */
    if ((s = model_get_bf16(m, "embed_tokens.weight", V, D, &m->wte_bf, err))) return s;
    if (!m->wte_bf && (s = model_get(m, "embed_tokens.weight", V, D, 1, &m->wte, err))) return s;
    m->layers = as_calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int l = 0; l < L; l++)
        if ((s = bind_layer(m, l, err))) return s;
    if ((s = get_rms(m, "norm", D, &m->ln_f, err))) return s;
    if (st_set_find(m->st, "score.weight")) {
        if ((s = model_classes_from(m, "score.weight", err))) return s;
        if ((s = get_lin(m, "@score", D, c->num_labels, 0, &m->cls_out, err))) return s;
        m->cls_last_token = 1;
        m->heads |= HEAD_CLASSIFIER;
    } else {
        if (c->tie_word_embeddings && m->wte_bf) /* the BF16 table is the head's weight, in place */
            m->lm_head = (lin_t){.wbf = m->wte_bf, .n_in = D, .n_out = V, .ldw = D};
        else if (c->tie_word_embeddings)
            m->mlm_decoder = m->wte;
        else if ((s = get_lin(m, "@lm_head", D, V, 0, &m->lm_head, err))) return s;
        m->heads |= HEAD_LM;
    }
    if (c->rope_dim > 0) {
        int half = c->rope_dim / 2;
        float unused;
        if (!(m->rope_inv_freq = as_malloc_array(2 * (size_t)half, sizeof(float))))
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        llama_rope_freqs(c, 0, 0, m->rope_inv_freq, &m->rope_mscale);
        llama_rope_freqs(c, 1, 0, m->rope_inv_freq + half, &unused);
    }
    return AS_OK;
}

void llama_rope_freqs(const as_config *c, int local, int n_pos, float *inv, float *mscale) {
    if (!local) rope_freqs(c, c->rope_theta, 1, n_pos, inv, mscale);
    else if (c->rope_local_theta > 0) rope_freqs(c, c->rope_local_theta, 0, 0, inv, mscale);
    else rope_freqs(c, c->rope_theta, 1, n_pos, inv, mscale);
}

as_status llama_rope_tables(const as_model *m, int p0, int dp, int T, int still, float *cs) {
    const as_config *c = &m->cfg;
    const int R = c->rope_dim, half = R / 2;
    const float *inv = m->rope_inv_freq;
    float mscale = m->rope_mscale, *grown = NULL;
    if (c->rope_scaling == ROPE_SCALE_DYNAMIC || c->rope_scaling == ROPE_SCALE_LONGROPE) {
        /* the global table depends on the length; the local one (Gemma 3) is unscaled */
        if (!(grown = as_malloc_array((size_t)half, sizeof(float)))) return AS_ERR_INTERNAL;
        llama_rope_freqs(c, 0, p0 + T, grown, &mscale);
        inv = grown;
    }
    op_rope_table(cs, p0, dp, T, still, inv, R, mscale);
    op_rope_table(cs + (size_t)T * R, p0, dp, T, still, m->rope_inv_freq + half, R, 1.0f);
    free(grown);
    return AS_OK;
}

/* Word embeddings, times sqrt(D) for Gemma (HF multiplies by the normaliser in the
 * hidden states' dtype: float32 here). x: (T, D). */
void llama_embed(const as_model *m, const emb_in *in, float *x) {
    const as_encoding *enc = in->enc;
    int T = enc->n, D = m->cfg.d_model;
    float sc = m->cfg.emb_scale > 0 ? m->cfg.emb_scale : 1.0f;
    for (int t = 0; t < T; t++) {
        float *r = x + (size_t)t * D;
        if (m->wte_bf && !in->word && !(in->ablate & ABLATE_TOKEN)) { /* a row of the BF16 table in the mapping */
            const uint16_t *w = m->wte_bf + (size_t)enc->ids[t] * D;
            for (int i = 0; i < D; i++) r[i] = as_bf16_to_f32(w[i]) * sc;
            continue;
        }
        const float *w = model_emb_word(m, in, t);
        for (int i = 0; i < D; i++) r[i] = w[i] * sc;
    }
}
