/* config.c — Hugging Face config.json -> as_config.
 *
 * What it does: reads the fields each supported family names its sizes with
 * (BERT / ELECTRA / RoBERTa / CamemBERT / XLM-R: num_hidden_layers ...; DistilBERT:
 * n_layers ...; GPT-2: n_layer ...; the decoder LLMs llama / mistral / qwen2 / qwen3 /
 * gemma2 / gemma3 / phi3: sizes, GQA heads, RoPE and its scaling, sliding-window layers,
 * Gemma's scales and soft-caps), applies the transformers library's defaults for
 * optional fields, maps activation names, reads id2label, and checks every size
 * against the AS_MAX_* limits. Options a family's modeling code has that the engine
 * does not compute (RoPE types other than default / linear / dynamic / llama3 / yarn /
 * longrope, bidirectional Gemma 3, ...) are refused by name. Errors name the file and
 * the field ("text_config.rope_scaling.factor").
 * What it does not: look at weights or tokenizer files, or accept model types whose
 * layout attnscope cannot run.
 */
#include "io/config.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

/* Context for field readers: the parsed object and the path used in messages. */
typedef struct {
    json_t *root;
    const char *path;
    as_error *err;
    const char *scope; /* "" or the enclosing object's name with a dot ("text_config.") */
} cfg_ctx;

/* Upper bound of max_position_embeddings, original_max_position_embeddings and
 * sliding_window for rotary models (no position table; Llama 3.1 and Gemma 3 say 131072).
 * as_config.max_pos keeps min(value, AS_MAX_POSITIONS). */
#define CFG_MAX_ROPE_POSITIONS (1L << 24)
/* Upper bound of rope_theta and of the rope_scaling numbers (factor, beta_*, ...) */
#define CFG_MAX_ROPE_NUMBER 1e12

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    default: return "null";
    }
}

/* key with the context's scope prefix, for messages ("rope_scaling.factor"). */
#define QKEY(c, key, buf) (snprintf((buf), sizeof(buf), "%s%s", (c)->scope ? (c)->scope : "", (key)), (buf))

/* Field value or NULL when absent or null. */
static json_t *field(const cfg_ctx *c, const char *key) {
    json_t *v = json_object_get(c->root, key);
    return json_is_null(v) ? NULL : v;
}

/* Reads integer field key into *out, checking lo <= v <= hi. When absent: error if
 * required, else *out = def. */
static as_status get_int(const cfg_ctx *c, const char *key, int required, int def, long lo,
                         long hi, int *out) {
    char qb[160];
    json_t *v = field(c, key);
    if (!v) {
        if (required)
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' missing", c->path,
                              QKEY(c, key, qb));
        *out = def;
        return AS_OK;
    }
    if (!json_is_integer(v))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be an integer, got %s",
                          c->path, QKEY(c, key, qb), json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = %lld out of range [%ld, %ld]",
                          c->path, QKEY(c, key, qb), (long long)x, lo, hi);
    *out = (int)x;
    return AS_OK;
}

/* Reads a string field; *out = def when absent (NULL def + absent = missing error). */
static as_status get_str(const cfg_ctx *c, const char *key, const char *def, const char **out) {
    char qb[160];
    json_t *v = field(c, key);
    if (!v) {
        if (!def)
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' missing", c->path,
                              QKEY(c, key, qb));
        *out = def;
        return AS_OK;
    }
    if (!json_is_string(v))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be a string, got %s", c->path,
                          QKEY(c, key, qb), json_kind(v));
    *out = json_string_value(v);
    return AS_OK;
}

/* Reads a number field (integer or real) into *out, checking lo < v <= hi (lo_incl: lo <= v).
 * When absent or null: error if required (def unused), else *out = def. */
static as_status get_num(const cfg_ctx *c, const char *key, int required, double def, double lo,
                         int lo_incl, double hi, double *out) {
    char qb[160];
    json_t *v = field(c, key);
    if (!v) {
        if (required)
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' missing", c->path,
                              QKEY(c, key, qb));
        *out = def;
        return AS_OK;
    }
    if (!json_is_number(v))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be a number, got %s", c->path,
                          QKEY(c, key, qb), json_kind(v));
    double x = json_number_value(v);
    if (!(lo_incl ? x >= lo : x > lo) || !(x <= hi))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = %g out of range %c%g, %g]",
                          c->path, QKEY(c, key, qb), x, lo_incl ? '[' : '(', lo, hi);
    *out = x;
    return AS_OK;
}

/* Layer-norm epsilon: a number in (0, 1). */
static as_status get_eps(const cfg_ctx *c, const char *key, double def, float *out) {
    char qb[160];
    json_t *v = field(c, key);
    double x = def;
    if (v) {
        if (!json_is_number(v))
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be a number, got %s",
                              c->path, QKEY(c, key, qb), json_kind(v));
        x = json_number_value(v);
    }
    if (!(x > 0.0 && x < 1.0))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = %g out of range (0, 1)", c->path,
                          QKEY(c, key, qb), x);
    *out = (float)x;
    return AS_OK;
}

static as_status get_bool(const cfg_ctx *c, const char *key, int def, int *out) {
    char qb[160];
    json_t *v = field(c, key);
    if (!v) {
        *out = def;
        return AS_OK;
    }
    if (!json_is_boolean(v))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be a boolean, got %s",
                          c->path, QKEY(c, key, qb), json_kind(v));
    *out = json_is_true(v);
    return AS_OK;
}

/* Activation name -> as_act. silu (swish is transformers' alias) only where allow_silu:
 * the decoder LLM family's gated MLP. */
static as_status get_act(const cfg_ctx *c, const char *key, const char *def, int allow_silu,
                         as_act *out) {
    char qb[160];
    const char *s = NULL;
    as_status rc = get_str(c, key, def, &s);
    if (rc != AS_OK) return rc;
    /* transformers ACT2FN names of the same two functions: gelu_python is the erf form in
       Python; gelu_accurate and gelu_fast are the tanh form written differently */
    if (strcmp(s, "gelu") == 0 || strcmp(s, "gelu_python") == 0) *out = ACT_GELU;
    else if (strcmp(s, "gelu_new") == 0 || strcmp(s, "gelu_pytorch_tanh") == 0 ||
             strcmp(s, "gelu_fast") == 0 || strcmp(s, "gelu_accurate") == 0)
        *out = ACT_GELU_NEW;
    else if (strcmp(s, "relu") == 0) *out = ACT_RELU;
    else if (allow_silu && (strcmp(s, "silu") == 0 || strcmp(s, "swish") == 0)) *out = ACT_SILU;
    else
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' = '%.64s' is not supported (gelu, gelu_python, gelu_new, "
                          "gelu_pytorch_tanh, gelu_fast, gelu_accurate, relu%s)",
                          c->path, QKEY(c, key, qb), s, allow_silu ? ", silu, swish" : "");
    return AS_OK;
}

/* The decoder LLM family's model_types (ARCH_LLAMA). gemma3 is the multimodal
 * Gemma3ForConditionalGeneration config: its text model is under "text_config". */
static const char *const LLM_TYPES[] = {"llama",  "mistral",     "qwen2", "qwen3",
                                        "gemma2", "gemma3_text", "gemma3", "phi3"};

/* Maps a model_type to its architecture; -1 when unsupported. */
static int arch_of(const char *t) {
    if (strcmp(t, "bert") == 0 || strcmp(t, "electra") == 0) return ARCH_BERT;
    if (strcmp(t, "roberta") == 0 || strcmp(t, "camembert") == 0 || strcmp(t, "xlm-roberta") == 0)
        return ARCH_ROBERTA;
    if (strcmp(t, "distilbert") == 0) return ARCH_DISTILBERT;
    if (strcmp(t, "gpt2") == 0) return ARCH_GPT2;
    if (strcmp(t, "bart") == 0 || strcmp(t, "mbart") == 0 || strcmp(t, "marian") == 0) return ARCH_BART;
    if (strcmp(t, "t5") == 0 || strcmp(t, "mt5") == 0) return ARCH_T5;
    for (size_t i = 0; i < sizeof LLM_TYPES / sizeof LLM_TYPES[0]; i++)
        if (strcmp(t, LLM_TYPES[i]) == 0) return ARCH_LLAMA;
    return -1;
}

/* model_type from an "architectures" class name (BertForMaskedLM -> bert), or NULL.
 * The decoder family's names must be exactly PREFIX + "For..." or PREFIX + "Model", so
 * that Qwen2MoeForCausalLM or Phi3VForCausalLM (other layouts) are not taken for qwen2
 * or phi3. */
static const char *type_from_class(const char *cls) {
    static const struct {
        const char *prefix, *type;
        int exact; /* 1: the rest must be "For..." or "Model" */
    } map[] = {{"DistilBert", "distilbert", 0},
               {"XLMRoberta", "xlm-roberta", 0},
               {"Camembert", "camembert", 0},
               {"Roberta", "roberta", 0},
               {"Electra", "electra", 0},
               {"Bert", "bert", 0},
               {"GPT2", "gpt2", 0},
               {"MBart", "mbart", 0},
               {"Bart", "bart", 0},
               {"Marian", "marian", 0},
               {"MT5", "mt5", 0},
               {"T5", "t5", 0},
               {"Gemma3ForConditionalGeneration", "gemma3", 1},
               {"Gemma3Text", "gemma3_text", 1},
               {"Gemma3", "gemma3_text", 1},
               {"Gemma2", "gemma2", 1},
               {"Llama", "llama", 1},
               {"Mistral", "mistral", 1},
               {"Qwen2", "qwen2", 1},
               {"Qwen3", "qwen3", 1},
               {"Phi3", "phi3", 1}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        size_t n = strlen(map[i].prefix);
        if (strncmp(cls, map[i].prefix, n) != 0) continue;
        const char *rest = cls + n;
        if (!map[i].exact || *rest == 0 || strncmp(rest, "For", 3) == 0 || strcmp(rest, "Model") == 0)
            return map[i].type;
    }
    return NULL;
}

static as_status parse_model_type(const cfg_ctx *c, as_config *out) {
    json_t *v = field(c, "model_type");
    const char *t = NULL;
    if (v) {
        if (!json_is_string(v))
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field 'model_type' must be a string, got %s",
                              c->path, json_kind(v));
        t = json_string_value(v);
    } else {
        json_t *archs = field(c, "architectures");
        size_t i;
        json_t *a;
        if (json_is_array(archs))
            json_array_foreach(archs, i, a) {
                if (json_is_string(a) && (t = type_from_class(json_string_value(a)))) break;
            }
        if (!t)
            return as_err_set(c->err, AS_ERR_INPUT,
                              "%s: field 'model_type' missing and 'architectures' names no "
                              "supported model",
                              c->path);
    }
    int arch = arch_of(t);
    if (arch < 0)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field 'model_type' = '%.64s' is not supported (bert, electra, "
                          "roberta, camembert, xlm-roberta, distilbert, gpt2, llama, mistral, "
                          "qwen2, qwen3, gemma2, gemma3_text, gemma3, phi3, bart, mbart, marian, t5, mt5)",
                          c->path, t);
    out->arch = (as_arch)arch;
    snprintf(out->model_type, sizeof out->model_type, "%s", t);
    return AS_OK;
}

/* Parses a canonical non-negative decimal ("0", "17"; no sign, no leading zeros). */
static long parse_label_index(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 6 || (n > 1 && s[0] == '0')) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

static as_status parse_labels(const cfg_ctx *c, as_config *out) {
    json_t *m = field(c, "id2label");
    if (!m) return get_int(c, "num_labels", 0, 0, 0, AS_MAX_LABELS, &out->num_labels);
    if (!json_is_object(m))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field 'id2label' must be an object, got %s",
                          c->path, json_kind(m));
    size_t n = json_object_size(m);
    if (n > AS_MAX_LABELS)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field 'id2label' has %zu labels, over the limit of %d",
                          c->path, n, AS_MAX_LABELS);
    if (n == 0) return AS_OK;
    out->id2label = as_calloc(n, sizeof(char *));
    if (!out->id2label) return as_err_set(c->err, AS_ERR_INTERNAL, "%s: out of memory", c->path);
    out->num_labels = (int)n;
    const char *key;
    json_t *val;
    json_object_foreach(m, key, val) {
        long i = parse_label_index(key);
        if (i < 0 || (size_t)i >= n)
            return as_err_set(c->err, AS_ERR_INPUT,
                              "%s: field 'id2label' key '%.32s' is not an index in 0..%zu", c->path,
                              key, n - 1);
        if (!json_is_string(val))
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field 'id2label' value for '%s' must be a string",
                              c->path, key);
        /* keys are distinct canonical integers < n, so each slot is filled once */
        if (!(out->id2label[i] = as_strdup(json_string_value(val))))
            return as_err_set(c->err, AS_ERR_INTERNAL, "%s: out of memory", c->path);
    }
    return AS_OK;
}

/* BERT / ELECTRA / RoBERTa family field names. */
static as_status parse_bert(const cfg_ctx *c, as_config *o) {
    as_status rc;
    int is_roberta = o->arch == ARCH_ROBERTA;
    if ((rc = get_int(c, "num_hidden_layers", 1, 0, 1, AS_MAX_LAYERS, &o->n_layer)) ||
        (rc = get_int(c, "num_attention_heads", 1, 0, 1, AS_MAX_HEADS, &o->n_head)) ||
        (rc = get_int(c, "hidden_size", 1, 0, 1, AS_MAX_DMODEL, &o->d_model)) ||
        (rc = get_int(c, "intermediate_size", 1, 0, 1, 4L * AS_MAX_DMODEL, &o->d_ff)) ||
        (rc = get_act(c, "hidden_act", "gelu", 0, &o->act)) ||
        (rc = get_int(c, "max_position_embeddings", 1, 0, 1, AS_MAX_POSITIONS, &o->max_pos)) ||
        (rc = get_int(c, "type_vocab_size", 0, 2, 0, AS_MAX_POSITIONS, &o->type_vocab)) ||
        (rc = get_eps(c, "layer_norm_eps", 1e-12, &o->ln_eps)) ||
        (rc = get_int(c, "vocab_size", 1, 0, 1, AS_MAX_VOCAB, &o->vocab_size)) ||
        (rc = get_int(c, "pad_token_id", 0, is_roberta ? 1 : 0, -1, AS_MAX_VOCAB,
                      &o->pad_token_id)))
        return rc;
    /* Relative position schemes (Shaw et al. 2018; Huang et al. 2020) add distance
       embeddings inside attention, which this engine does not compute: refuse them
       rather than run a different model. */
    const char *pe = NULL;
    if ((rc = get_str(c, "position_embedding_type", "absolute", &pe))) return rc;
    if (strcmp(pe, "absolute") != 0)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field 'position_embedding_type' = '%.64s' is not supported (absolute)",
                          c->path, pe);
    /* is_decoder (BertLMHeadModel, RobertaForCausalLM): causal self-attention. A decoder
       with cross-attention needs an encoder's states, which a text input does not give. */
    int cross = 0;
    if ((rc = get_bool(c, "is_decoder", 0, &o->causal)) ||
        (rc = get_bool(c, "add_cross_attention", 0, &cross)))
        return rc;
    if (cross)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field 'add_cross_attention' = true is not supported (encoder-decoder "
                          "models need encoder states)",
                          c->path);
    o->d_embed = o->d_model;
    if (strcmp(o->model_type, "electra") == 0 &&
        (rc = get_int(c, "embedding_size", 0, o->d_model, 1, AS_MAX_DMODEL, &o->d_embed)))
        return rc;
    return AS_OK;
}

static as_status parse_distilbert(const cfg_ctx *c, as_config *o) {
    as_status rc;
    if ((rc = get_int(c, "n_layers", 1, 0, 1, AS_MAX_LAYERS, &o->n_layer)) ||
        (rc = get_int(c, "n_heads", 1, 0, 1, AS_MAX_HEADS, &o->n_head)) ||
        (rc = get_int(c, "dim", 1, 0, 1, AS_MAX_DMODEL, &o->d_model)) ||
        (rc = get_int(c, "hidden_dim", 1, 0, 1, 4L * AS_MAX_DMODEL, &o->d_ff)) ||
        (rc = get_act(c, "activation", "gelu", 0, &o->act)) ||
        (rc = get_int(c, "max_position_embeddings", 1, 0, 1, AS_MAX_POSITIONS, &o->max_pos)) ||
        (rc = get_int(c, "vocab_size", 1, 0, 1, AS_MAX_VOCAB, &o->vocab_size)) ||
        (rc = get_bool(c, "sinusoidal_pos_embds", 0, &o->sinusoidal_pos)) ||
        (rc = get_int(c, "pad_token_id", 0, 0, -1, AS_MAX_VOCAB, &o->pad_token_id)))
        return rc;
    o->d_embed = o->d_model;
    o->type_vocab = 0;
    o->ln_eps = 1e-12f;
    return AS_OK;
}

static as_status parse_gpt2(const cfg_ctx *c, as_config *o) {
    as_status rc;
    if ((rc = get_int(c, "n_layer", 1, 0, 1, AS_MAX_LAYERS, &o->n_layer)) ||
        (rc = get_int(c, "n_head", 1, 0, 1, AS_MAX_HEADS, &o->n_head)) ||
        (rc = get_int(c, "n_embd", 1, 0, 1, AS_MAX_DMODEL, &o->d_model)) ||
        (rc = get_eps(c, "layer_norm_epsilon", 1e-5, &o->ln_eps)) ||
        (rc = get_act(c, "activation_function", "gelu_new", 0, &o->act)) ||
        (rc = get_int(c, "vocab_size", 1, 0, 1, AS_MAX_VOCAB, &o->vocab_size)))
        return rc;
    if (field(c, "n_positions") || !field(c, "n_ctx"))
        rc = get_int(c, "n_positions", 1, 0, 1, AS_MAX_POSITIONS, &o->max_pos);
    else
        rc = get_int(c, "n_ctx", 1, 0, 1, AS_MAX_POSITIONS, &o->max_pos);
    if (rc) return rc;
    if ((rc = get_int(c, "n_inner", 0, 0, 1, 4L * AS_MAX_DMODEL, &o->d_ff))) return rc;
    /* transformers GPT2Attention: scores / sqrt(Dh) unless scale_attn_weights is false,
       then / (layer + 1) when scale_attn_by_inverse_layer_idx (Mistral's GPT-2 runs) */
    int scaled = 1;
    if ((rc = get_bool(c, "scale_attn_weights", 1, &scaled)) ||
        (rc = get_bool(c, "scale_attn_by_inverse_layer_idx", 0, &o->attn_layer_scale)))
        return rc;
    o->attn_unscaled = !scaled;
    if (o->d_ff == 0) o->d_ff = 4 * o->d_model; /* transformers: n_inner None -> 4 * n_embd */
    json_t *pad = field(c, "pad_token_id");
    o->pad_token_id = -1;
    if (json_is_integer(pad) &&
        (rc = get_int(c, "pad_token_id", 0, -1, -1, AS_MAX_VOCAB, &o->pad_token_id)))
        return rc;
    o->d_embed = o->d_model;
    o->type_vocab = 0;
    o->causal = 1;
    return AS_OK;
}

/* ---- the encoder-decoder family (ARCH_BART) ---------------------------------
 * bart, mbart and marian as transformers' configuration_{bart,mbart,marian}.py and
 * modeling_*.py define them; docs/encoder_decoder.md has the block each one runs. */

static as_status refuse_true(const cfg_ctx *c, const char *key, const char *why);
static as_status get_token_id(const cfg_ctx *c, const char *key, int def, int *out);

/* Refuses an integer field that, when present, differs from want (a layout the engine
 * does not run: different encoder and decoder heads, a separate decoder vocabulary). */
static as_status refuse_other_int(const cfg_ctx *c, const char *key, int want, const char *why) {
    int v = want;
    as_status rc = get_int(c, key, 0, want, 0, AS_MAX_VOCAB, &v);
    if (rc != AS_OK) return rc;
    if (v != want)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = %d is not supported (%s: %d)", c->path, key, v,
                          why, want);
    return AS_OK;
}

/* Refuses a boolean field that, when present, is not want. */
static as_status want_bool(const cfg_ctx *c, const char *key, int want, const char *why) {
    int v = want;
    as_status rc = get_bool(c, key, want, &v);
    if (rc != AS_OK) return rc;
    if (v != want)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = %s is not supported (%s)", c->path, key,
                          v ? "true" : "false", why);
    return AS_OK;
}

static as_status parse_bart(const cfg_ctx *c, as_config *o) {
    as_status rc;
    int marian = strcmp(o->model_type, "marian") == 0, mbart = strcmp(o->model_type, "mbart") == 0;
    int dheads = 0, dffn = 0, scale = 0, enc_dec = 1;
    if ((rc = get_int(c, "vocab_size", 0, marian ? 58101 : 50265, 1, AS_MAX_VOCAB, &o->vocab_size)) ||
        (rc = get_int(c, "d_model", 0, 1024, 1, AS_MAX_DMODEL, &o->d_model)) ||
        (rc = get_int(c, "encoder_layers", 0, 12, 1, AS_MAX_LAYERS, &o->n_layer)) ||
        (rc = get_int(c, "decoder_layers", 0, 12, 1, AS_MAX_LAYERS, &o->n_dec_layer)) ||
        (rc = get_int(c, "encoder_attention_heads", 0, 16, 1, AS_MAX_HEADS, &o->n_head)) ||
        (rc = get_int(c, "decoder_attention_heads", 0, 16, 1, AS_MAX_HEADS, &dheads)) ||
        (rc = get_int(c, "encoder_ffn_dim", 0, 4096, 1, 4L * AS_MAX_DMODEL, &o->d_ff)) ||
        (rc = get_int(c, "decoder_ffn_dim", 0, 4096, 1, 4L * AS_MAX_DMODEL, &dffn)) ||
        (rc = get_int(c, "max_position_embeddings", 0, 1024, 1, AS_MAX_POSITIONS - 2, &o->max_pos)) ||
        (rc = get_act(c, "activation_function", "gelu", 1, &o->act)) ||
        (rc = get_bool(c, "scale_embedding", 0, &scale)) ||
        (rc = get_bool(c, "tie_word_embeddings", 1, &o->tie_word_embeddings)) ||
        (rc = get_bool(c, "is_encoder_decoder", 1, &enc_dec)) ||
        (rc = get_int(c, "pad_token_id", 0, marian ? 58100 : 1, -1, AS_MAX_VOCAB, &o->pad_token_id)) ||
        (rc = get_token_id(c, "bos_token_id", marian ? -1 : 0, &o->bos_token_id)) ||
        (rc = get_token_id(c, "eos_token_id", marian ? 0 : 2, &o->eos_token_id)) ||
        (rc = get_token_id(c, "decoder_start_token_id", marian ? 58100 : mbart ? -1 : 2,
                           &o->decoder_start_token_id)))
        return rc;
    if (!enc_dec)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field 'is_encoder_decoder' = false is not supported (%s)",
                          c->path, o->model_type);
    if (dheads != o->n_head)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field 'decoder_attention_heads' = %d is not supported (it must equal "
                          "encoder_attention_heads = %d)",
                          c->path, dheads, o->n_head);
    if (dffn != o->d_ff)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field 'decoder_ffn_dim' = %d is not supported (it must equal encoder_ffn_dim = %d)",
                          c->path, dffn, o->d_ff);
    if (o->d_model % o->n_head)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field 'd_model' (%d) is not divisible by "
                          "'encoder_attention_heads' (%d)", c->path, o->d_model, o->n_head);
    /* fields of older BART / mBART / Marian configurations naming the block each one is:
       accepted when they say what the model_type runs, refused otherwise */
    if ((rc = want_bool(c, "add_bias_logits", 0, "the LM head's bias is final_logits_bias")) ||
        (rc = want_bool(c, "static_position_embeddings", marian,
                        marian ? "marian's positions are sinusoidal" : "positions are a learned table")) ||
        (rc = want_bool(c, "add_final_layer_norm", mbart,
                        mbart ? "mbart has final layer norms" : "final layer norms only with mbart")) ||
        (rc = want_bool(c, "normalize_before", mbart,
                        mbart ? "mbart's layers are pre-norm" : "post-norm layers; pre-norm is mbart")) ||
        (rc = want_bool(c, "normalize_embedding", !marian,
                        marian ? "marian has no layernorm_embedding" : "layernorm_embedding is part of the model")))
        return rc;
    if (!marian) {
        if ((rc = refuse_other_int(c, "extra_pos_embeddings", 2, "it must be the learned positions' offset")))
            return rc;
    } else {
        int share = 1;
        if ((rc = get_bool(c, "share_encoder_decoder_embeddings", 1, &share))) return rc;
        if (!share)
            return as_err_set(c->err, AS_ERR_INPUT,
                              "%s: field 'share_encoder_decoder_embeddings' = false is not supported (one "
                              "shared embedding table)", c->path);
        if ((rc = refuse_other_int(c, "decoder_vocab_size", o->vocab_size, "it must equal vocab_size")))
            return rc;
    }
    o->d_head = o->d_model / o->n_head;
    o->n_kv_head = o->n_head;
    o->d_embed = o->d_model;
    o->qkv_bias = o->o_bias = o->mlp_bias = 1;
    o->ln_eps = 1e-5f; /* nn.LayerNorm's default: these configurations have no epsilon */
    o->emb_scale = scale ? sqrtf((float)o->d_model) : 0.0f;
    o->pre_norm = mbart;
    o->layernorm_embedding = !marian;
    o->sinusoidal_pos = marian;
    if (!marian) o->max_pos += 2; /* BartLearnedPositionalEmbedding: offset 2, max + 2 rows */
    if (o->pad_token_id >= o->vocab_size || o->eos_token_id >= o->vocab_size ||
        o->decoder_start_token_id >= o->vocab_size || o->bos_token_id >= o->vocab_size)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: a special token id (pad %d, bos %d, eos %d, decoder_start %d) is not below "
                          "vocab_size (%d)", c->path, o->pad_token_id, o->bos_token_id, o->eos_token_id,
                          o->decoder_start_token_id, o->vocab_size);
    return AS_OK;
}

/* t5 and mt5 (ARCH_T5) as transformers' configuration_t5.py / configuration_mt5.py define
 * them: pre-norm layers with T5LayerNorm (RMS, no bias, no mean), no biases, q.k unscaled,
 * a relative position bias from the first layer of each stack, feed_forward_proj "relu"
 * (T5 v1.0) or "gated-gelu" (v1.1, mT5: gelu_new), the tied LM head's input scaled by
 * d_model^-0.5. */
static as_status parse_t5(const cfg_ctx *c, as_config *o) {
    as_status rc;
    char qb[160];
    int mt5 = strcmp(o->model_type, "mt5") == 0, enc_dec = 1;
    const char *ffp = NULL;
    if ((rc = get_int(c, "vocab_size", 0, mt5 ? 250112 : 32128, 1, AS_MAX_VOCAB, &o->vocab_size)) ||
        (rc = get_int(c, "d_model", 0, 512, 1, AS_MAX_DMODEL, &o->d_model)) ||
        (rc = get_int(c, "d_kv", 0, 64, 1, AS_MAX_DMODEL, &o->d_head)) ||
        (rc = get_int(c, "d_ff", 0, mt5 ? 1024 : 2048, 1, 4L * AS_MAX_DMODEL, &o->d_ff)) ||
        (rc = get_int(c, "num_layers", 0, mt5 ? 8 : 6, 1, AS_MAX_LAYERS, &o->n_layer)) ||
        (rc = get_int(c, "num_decoder_layers", 0, o->n_layer, 1, AS_MAX_LAYERS, &o->n_dec_layer)) ||
        (rc = get_int(c, "num_heads", 0, mt5 ? 6 : 8, 1, AS_MAX_HEADS, &o->n_head)) ||
        (rc = get_int(c, "relative_attention_num_buckets", 0, 32, 4, 1 << 16, &o->rel_buckets)) ||
        (rc = get_int(c, "relative_attention_max_distance", 0, 128, 1, AS_MAX_POSITIONS, &o->rel_max_distance)) ||
        (rc = get_eps(c, "layer_norm_epsilon", 1e-6, &o->ln_eps)) ||
        (rc = get_str(c, "feed_forward_proj", mt5 ? "gated-gelu" : "relu", &ffp)) ||
        (rc = get_bool(c, "tie_word_embeddings", mt5 ? 0 : 1, &o->tie_word_embeddings)) ||
        (rc = get_bool(c, "is_encoder_decoder", 1, &enc_dec)) ||
        (rc = get_int(c, "pad_token_id", 0, 0, -1, AS_MAX_VOCAB, &o->pad_token_id)) ||
        (rc = get_token_id(c, "eos_token_id", 1, &o->eos_token_id)) ||
        (rc = get_token_id(c, "decoder_start_token_id", 0, &o->decoder_start_token_id)))
        return rc;
    if (!enc_dec)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field 'is_encoder_decoder' = false is not supported (%s)",
                          c->path, o->model_type);
    /* T5Config: "ACT" or "gated-ACT"; "gated-gelu" means gelu_new */
    const char *a = ffp;
    o->gated_mlp = strncmp(ffp, "gated-", 6) == 0;
    if (o->gated_mlp) a = ffp + 6;
    if (!strcmp(ffp, "gated-gelu") || !strcmp(a, "gelu_new") || !strcmp(a, "gelu_pytorch_tanh"))
        o->act = ACT_GELU_NEW;
    else if (!strcmp(a, "gelu")) o->act = ACT_GELU;
    else if (!strcmp(a, "relu")) o->act = ACT_RELU;
    else if (!strcmp(a, "silu") || !strcmp(a, "swish")) o->act = ACT_SILU;
    else
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' = '%.64s' is not supported (relu, gelu, gelu_new, silu, each optionally "
                          "gated-)",
                          c->path, QKEY(c, "feed_forward_proj", qb), ffp);
    o->bos_token_id = -1;
    o->n_kv_head = o->n_head;
    o->d_embed = o->d_model;
    o->rms_norm = 1;
    o->pre_norm = 1;
    o->query_scale = 1.0f; /* T5Attention does not scale q.k (Mesh TensorFlow folds it into the init) */
    o->head_in_scale = o->tie_word_embeddings ? 1.0f / sqrtf((float)o->d_model) : 0.0f;
    o->max_pos = AS_MAX_POSITIONS; /* relative positions: no table */
    if (o->pad_token_id >= o->vocab_size || o->eos_token_id >= o->vocab_size ||
        o->decoder_start_token_id >= o->vocab_size)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: a special token id (pad %d, eos %d, decoder_start %d) is not below vocab_size (%d)",
                          c->path, o->pad_token_id, o->eos_token_id, o->decoder_start_token_id, o->vocab_size);
    return AS_OK;
}

/* ---- the decoder LLM family (ARCH_LLAMA) -----------------------------------
 * Semantics of transformers' main branch (configuration_*.py defaults, modeling_*.py use)
 * for llama, mistral, qwen2, qwen3, gemma2, gemma3_text / gemma3, phi3. docs/llama_family.md
 * has the formulas the fields feed. */

/* Defaults of the configuration classes, per model_type. */
typedef struct {
    const char *type;
    int vocab, hidden, inter, layers, heads, kv_heads; /* kv_heads 0 = heads */
    int head_dim;                                      /* 0 = hidden / heads */
    long max_pos;
    double eps, theta;
    int tie, pad, bos, eos;                            /* -1 = None */
    const char *act;
} llm_defaults;

static const llm_defaults LLM_DEFAULTS[] = {
    {"llama", 32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 10000.0, 0, -1, 1, 2, "silu"},
    {"mistral", 32000, 4096, 14336, 32, 32, 8, 0, 4096L * 32, 1e-6, 10000.0, 0, -1, 1, 2, "silu"},
    {"qwen2", 151936, 4096, 22016, 32, 32, 32, 0, 32768, 1e-6, 10000.0, 0, -1, -1, -1, "silu"},
    {"qwen3", 151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, 10000.0, 0, -1, -1, -1, "silu"},
    {"gemma2", 256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6, 10000.0, 1, 0, 2, 1,
     "gelu_pytorch_tanh"},
    {"gemma3_text", 262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6, 1000000.0, 1, 0, 2, 1,
     "gelu_pytorch_tanh"},
    {"phi3", 32064, 3072, 8192, 32, 32, 0, 0, 4096, 1e-5, 10000.0, 0, 32000, 1, 32000, "silu"},
};

/* A token id field: integer in [0, AS_MAX_VOCAB], or a list whose first entry is taken
 * (eos_token_id: [128001, 128008, 128009]); absent or null = def. */
static as_status get_token_id(const cfg_ctx *c, const char *key, int def, int *out) {
    char qb[160];
    json_t *v = field(c, key);
    if (json_is_array(v)) {
        if (json_array_size(v) == 0) {
            *out = -1;
            return AS_OK;
        }
        v = json_array_get(v, 0);
        if (!json_is_integer(v))
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must list integers, got %s",
                              c->path, QKEY(c, key, qb), json_kind(v));
        json_int_t x = json_integer_value(v);
        if (x < 0 || x > AS_MAX_VOCAB)
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' entry %lld out of range [0, %d]",
                              c->path, QKEY(c, key, qb), (long long)x, AS_MAX_VOCAB);
        *out = (int)x;
        return AS_OK;
    }
    return get_int(c, key, 0, def, 0, AS_MAX_VOCAB, out);
}

/* An object-valued field (absent or null: *out = NULL). */
static as_status get_obj(const cfg_ctx *c, const char *key, json_t **out) {
    char qb[160];
    json_t *v = field(c, key);
    *out = NULL;
    if (!v) return AS_OK;
    if (!json_is_object(v))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be an object, got %s", c->path,
                          QKEY(c, key, qb), json_kind(v));
    *out = v;
    return AS_OK;
}

/* Refuses key = true where the family's modeling code has no such option (a checkpoint
 * saying so carries weights transformers would not load). */
static as_status refuse_true(const cfg_ctx *c, const char *key, const char *why) {
    char qb[160];
    int v = 0;
    as_status rc = get_bool(c, key, 0, &v);
    if (rc != AS_OK) return rc;
    if (v)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = true is not supported (%s)", c->path,
                          QKEY(c, key, qb), why);
    return AS_OK;
}

/* The pre-extension context length of llama3 / yarn / longrope into *orig: Phi-3's top-level
 * original_max_position_embeddings (orig_top > 0) first, then c's, else max_pos_raw; an
 * integer in [1, CFG_MAX_ROPE_POSITIONS]. */
static as_status get_orig_len(const cfg_ctx *c, double max_pos_raw, int orig_top, double *orig) {
    char qb[160];
    as_status rc = get_num(c, "original_max_position_embeddings", 0, max_pos_raw, 1.0, 1,
                           (double)CFG_MAX_ROPE_POSITIONS, orig);
    if (rc) return rc;
    if (orig_top > 0) *orig = orig_top;
    if (*orig != floor(*orig))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = %g is not an integer", c->path,
                          QKEY(c, "original_max_position_embeddings", qb), *orig);
    return AS_OK;
}

/* LongRoPE's factor list key of c: rope_dim / 2 positive numbers into out. */
static as_status get_rope_factors(const cfg_ctx *c, const char *key, int n, float *out) {
    char qb[160];
    json_t *v = field(c, key);
    if (!v) return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' missing", c->path, QKEY(c, key, qb));
    if (!json_is_array(v) || json_array_size(v) != (size_t)n)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' must be a list of %d numbers (rotated dimensions / 2), got %s "
                          "of %zu",
                          c->path, QKEY(c, key, qb), n, json_kind(v),
                          json_is_array(v) ? json_array_size(v) : (size_t)0);
    for (int i = 0; i < n; i++) {
        json_t *e = json_array_get(v, (size_t)i);
        double x = json_is_number(e) ? json_number_value(e) : -1;
        if (!(x > 0 && x <= CFG_MAX_ROPE_NUMBER))
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' entry %d is not a number in (0, %g]",
                              c->path, QKEY(c, key, qb), i, CFG_MAX_ROPE_NUMBER);
        out[i] = (float)x;
    }
    return AS_OK;
}

/* LongRoPE (Ding et al. 2024; transformers' _compute_longrope_parameters): per-pair divisors
 * of the frequencies, short_factor up to original_max_position_embeddings positions and
 * long_factor past it; factor null = max_position_embeddings / original; attention_factor
 * null = sqrt(1 + ln(factor) / ln(original)) when factor > 1, else 1. */
static as_status parse_longrope(const cfg_ctx *c, as_config *o, double max_pos_raw, int orig_top) {
    as_status rc;
    char qb[160];
    int n = o->rope_dim / 2;
    if (n > AS_MAX_ROPE_PAIRS)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s': %d rotated pairs per head is over the limit of %d for longrope",
                          c->path, QKEY(c, "long_factor", qb), n, AS_MAX_ROPE_PAIRS);
    double orig = 0, f = 0, att = 0;
    if ((rc = get_rope_factors(c, "short_factor", n, o->rope_short_factor)) ||
        (rc = get_rope_factors(c, "long_factor", n, o->rope_long_factor)) ||
        (rc = get_orig_len(c, max_pos_raw, orig_top, &orig)))
        return rc;
    if ((rc = get_num(c, "factor", 0, max_pos_raw / orig, 0.0, 0, CFG_MAX_ROPE_NUMBER, &f)) ||
        (rc = get_num(c, "attention_factor", 0, 0, 0.0, 0, CFG_MAX_ROPE_NUMBER, &att)))
        return rc;
    if (att == 0 && f > 1 && orig < 2)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' = %g leaves the attention factor undefined (ln of it is 0); give "
                          "attention_factor",
                          c->path, QKEY(c, "original_max_position_embeddings", qb), orig);
    if (att == 0) att = f > 1 ? sqrt(1.0 + log(f) / log(orig)) : 1.0;
    o->rope_scaling = ROPE_SCALE_LONGROPE;
    o->rope_factor = (float)f;
    o->rope_orig_max_pos = (int)orig;
    o->rope_attn_factor = (float)att;
    return AS_OK;
}

/* llama3 and yarn scale the frequencies for original_max_position_embeddings x factor
 * positions; checkpoints that enable them by adding rope_scaling (Qwen2.5's YaRN) keep the
 * pre-extension max_position_embeddings, so the input limit is the larger of the two
 * (transformers sets none), capped at AS_MAX_POSITIONS. */
static void rope_extend_max_pos(as_config *o, double extended) {
    if (extended > (double)o->max_pos) o->max_pos = extended < AS_MAX_POSITIONS ? (int)extended : AS_MAX_POSITIONS;
}

/* One rope_scaling / rope_parameters object r (its scope, e.g. "rope_scaling.", in rc).
 * Fills the scaling fields of o; rope_theta too when r holds one (transformers 5 moves it
 * there). allow_scaling 0 (Gemma 3's sliding layers): only "default" is accepted.
 * max_pos_raw: max_position_embeddings as written; orig_top: Phi-3's top-level
 * original_max_position_embeddings (0 = none), which wins over r's for llama3 / yarn /
 * longrope; phi3: the model type (its renamed scaling types).
 * Source: modeling_rope_utils.py (_compute_*_parameters, standardize_rope_params). */
static as_status parse_rope_obj(const cfg_ctx *rc_, as_config *o, int allow_scaling,
                                double max_pos_raw, int orig_top, int phi3, double *theta) {
    as_status rc;
    const cfg_ctx *c = rc_;
    char qb[160];
    json_t *tv = field(c, "rope_type");
    const char *key = "rope_type";
    if (!tv) {
        tv = field(c, "type");
        key = "type";
    }
    const char *t = "default";
    if (tv && (rc = get_str(c, key, "default", &t))) return rc;
    if ((rc = get_num(c, "rope_theta", 0, *theta, 1.0, 0, CFG_MAX_ROPE_NUMBER, theta))) return rc;
    if (strcmp(t, "default") == 0) {
        if (allow_scaling) o->rope_scaling = ROPE_SCALE_NONE;
        return AS_OK;
    }
    /* Phi3Config renames a "type" of "su" or "yarn" to longrope (earlier checkpoints' names) */
    if (phi3 && (strcmp(t, "su") == 0 || (strcmp(t, "yarn") == 0 && strcmp(key, "type") == 0))) t = "longrope";
    int known = strcmp(t, "linear") == 0 || strcmp(t, "llama3") == 0 || strcmp(t, "yarn") == 0 ||
                strcmp(t, "dynamic") == 0 || strcmp(t, "longrope") == 0;
    if (!known || !allow_scaling)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' = '%.32s' is not supported (%s)", c->path,
                          QKEY(c, key, qb), t,
                          allow_scaling ? "default, linear, dynamic, llama3, yarn, longrope"
                                        : "default only on sliding-window layers");
    if (strcmp(t, "longrope") == 0) return parse_longrope(c, o, max_pos_raw, orig_top);
    double f = 0, orig = 0;
    if (strcmp(t, "yarn") != 0 &&
        (rc = get_num(c, "factor", 1, 0, 0.0, 0, CFG_MAX_ROPE_NUMBER, &f)))
        return rc;
    if (strcmp(t, "linear") == 0) {
        o->rope_scaling = ROPE_SCALE_LINEAR;
        o->rope_factor = (float)f;
        return AS_OK;
    }
    if (strcmp(t, "dynamic") == 0) {
        /* NTK-aware scaling (transformers' _compute_dynamic_ntk_parameters): past
           max_position_embeddings the base grows with the length; inputs may be longer than it */
        if (o->rope_dim <= 2)
            return as_err_set(c->err, AS_ERR_INPUT,
                              "%s: field '%s' = 'dynamic' needs more than 2 rotated dimensions per head (the "
                              "base grows by a power dim / (dim - 2)), got %d",
                              c->path, QKEY(c, key, qb), o->rope_dim);
        o->rope_scaling = ROPE_SCALE_DYNAMIC;
        o->rope_factor = (float)f;
        o->rope_orig_max_pos = (int)max_pos_raw;
        o->max_pos = AS_MAX_POSITIONS;
        return AS_OK;
    }
    /* llama3 and yarn: the pre-extension context length */
    if ((rc = get_orig_len(c, max_pos_raw, orig_top, &orig))) return rc;
    o->rope_orig_max_pos = (int)orig;
    if (strcmp(t, "llama3") == 0) {
        double lo = 0, hi = 0;
        if ((rc = get_num(c, "low_freq_factor", 1, 0, 0.0, 0, CFG_MAX_ROPE_NUMBER, &lo)) ||
            (rc = get_num(c, "high_freq_factor", 1, 0, 0.0, 0, CFG_MAX_ROPE_NUMBER, &hi)))
            return rc;
        if (!(hi > lo)) /* the smoothing divides by high - low */
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = %g is not above low_freq_factor (%g)",
                              c->path, QKEY(c, "high_freq_factor", qb), hi, lo);
        o->rope_scaling = ROPE_SCALE_LLAMA3;
        o->rope_factor = (float)f;
        rope_extend_max_pos(o, orig * f);
        o->rope_low_freq_factor = (float)lo;
        o->rope_high_freq_factor = (float)hi;
        return AS_OK;
    }
    /* yarn (Peng et al. 2023, YaRN section 3): factor null = max_pos / original; beta_fast /
       beta_slow null or 0 = 32 / 1; attention_factor null = mscale formula below */
    double fast = 0, slow = 0, att = 0, ms = 0, ms_all = 0;
    int truncate = 1;
    if ((rc = get_num(c, "factor", 0, max_pos_raw / orig, 0.0, 0, CFG_MAX_ROPE_NUMBER, &f)) ||
        (rc = get_num(c, "beta_fast", 0, 0, 0.0, 1, CFG_MAX_ROPE_NUMBER, &fast)) ||
        (rc = get_num(c, "beta_slow", 0, 0, 0.0, 1, CFG_MAX_ROPE_NUMBER, &slow)) ||
        (rc = get_num(c, "attention_factor", 0, 0, 0.0, 0, CFG_MAX_ROPE_NUMBER, &att)) ||
        (rc = get_num(c, "mscale", 0, 0, 0.0, 1, CFG_MAX_ROPE_NUMBER, &ms)) ||
        (rc = get_num(c, "mscale_all_dim", 0, 0, 0.0, 1, CFG_MAX_ROPE_NUMBER, &ms_all)) ||
        (rc = get_bool(c, "truncate", 1, &truncate)))
        return rc;
    if (!truncate)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' = false is not supported (the correction range is "
                          "always floored / ceiled)",
                          c->path, QKEY(c, "truncate", qb));
    if (att == 0) {
        /* get_mscale(s, m) = 1 when s <= 1, else 0.1 * m * ln(s) + 1 */
        double g1 = f <= 1 ? 1.0 : 0.1 * log(f) + 1.0;
        if (ms > 0 && ms_all > 0) {
            double gm = f <= 1 ? 1.0 : 0.1 * ms * log(f) + 1.0;
            double ga = f <= 1 ? 1.0 : 0.1 * ms_all * log(f) + 1.0;
            att = gm / ga;
        } else {
            att = g1;
        }
    }
    o->rope_scaling = ROPE_SCALE_YARN;
    o->rope_factor = (float)f;
    rope_extend_max_pos(o, orig * f);
    o->yarn_beta_fast = (float)(fast > 0 ? fast : 32.0);
    o->yarn_beta_slow = (float)(slow > 0 ? slow : 1.0);
    o->rope_attn_factor = (float)att;
    return AS_OK;
}

/* Marks the sliding layers from "layer_types" (absent: *given = 0). */
static as_status parse_layer_types(const cfg_ctx *c, as_config *o, int *given) {
    char qb[160];
    json_t *a = field(c, "layer_types");
    *given = 0;
    if (!a) return AS_OK;
    if (!json_is_array(a))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be an array, got %s", c->path,
                          QKEY(c, "layer_types", qb), json_kind(a));
    if (json_array_size(a) != (size_t)o->n_layer)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' has %zu entries, not num_hidden_layers (%d)",
                          c->path, QKEY(c, "layer_types", qb), json_array_size(a), o->n_layer);
    for (int l = 0; l < o->n_layer; l++) {
        json_t *v = json_array_get(a, (size_t)l);
        const char *s = json_is_string(v) ? json_string_value(v) : NULL;
        if (s && strcmp(s, "sliding_attention") == 0) o->layer_sliding[l] = 1;
        else if (s && strcmp(s, "full_attention") == 0) o->layer_sliding[l] = 0;
        else
            return as_err_set(c->err, AS_ERR_INPUT,
                              "%s: field '%s' entry %d = '%.32s' is not supported (sliding_attention, "
                              "full_attention)",
                              c->path, QKEY(c, "layer_types", qb), l, s ? s : json_kind(v));
    }
    *given = 1;
    return AS_OK;
}

/* The decoder LLM family (ARCH_LLAMA): llama, mistral, qwen2, qwen3, gemma2, gemma3_text,
 * gemma3 (text_config), phi3. Fills the block description of as_config (see attnscope.h). */
static as_status parse_llama(const cfg_ctx *top, as_config *o) {
    as_status rc;
    char qb[160];
    cfg_ctx sub;
    const cfg_ctx *c = top;
    const char *mt = o->model_type;
    if (strcmp(mt, "gemma3") == 0) {
        json_t *tc = NULL;
        if ((rc = get_obj(top, "text_config", &tc))) return rc;
        if (!tc)
            return as_err_set(top->err, AS_ERR_INPUT, "%s: field 'text_config' missing (gemma3)",
                              top->path);
        sub = (cfg_ctx){tc, top->path, top->err, "text_config."};
        c = &sub;
        const char *inner = "gemma3_text";
        if ((rc = get_str(c, "model_type", "gemma3_text", &inner))) return rc;
        if (strcmp(inner, "gemma3_text") != 0)
            return as_err_set(c->err, AS_ERR_INPUT,
                              "%s: field 'text_config.model_type' = '%.32s' is not supported "
                              "(gemma3_text)",
                              c->path, inner);
        mt = "gemma3_text";
    }
    const llm_defaults *d = NULL;
    for (size_t i = 0; i < sizeof LLM_DEFAULTS / sizeof LLM_DEFAULTS[0]; i++)
        if (strcmp(mt, LLM_DEFAULTS[i].type) == 0) d = &LLM_DEFAULTS[i];
    AS_ASSERT(d); /* arch_of and LLM_DEFAULTS list the same types */
    int gemma2 = strcmp(mt, "gemma2") == 0, gemma3 = strcmp(mt, "gemma3_text") == 0;
    int gemma = gemma2 || gemma3, qwen2 = strcmp(mt, "qwen2") == 0, qwen3 = strcmp(mt, "qwen3") == 0;
    int phi3 = strcmp(mt, "phi3") == 0, mistral = strcmp(mt, "mistral") == 0;
    int llama = strcmp(mt, "llama") == 0;

    /* sizes */
    int max_pos_raw = 0;
    if ((rc = get_int(c, "num_hidden_layers", 0, d->layers, 1, AS_MAX_LAYERS, &o->n_layer)) ||
        (rc = get_int(c, "num_attention_heads", 0, d->heads, 1, AS_MAX_HEADS, &o->n_head)) ||
        (rc = get_int(c, "hidden_size", 0, d->hidden, 1, AS_MAX_DMODEL, &o->d_model)) ||
        (rc = get_int(c, "intermediate_size", 0, d->inter, 1, 4L * AS_MAX_DMODEL, &o->d_ff)) ||
        (rc = get_int(c, "vocab_size", 0, d->vocab, 1, AS_MAX_VOCAB, &o->vocab_size)) ||
        (rc = get_int(c, "max_position_embeddings", 0, (int)d->max_pos, 1, CFG_MAX_ROPE_POSITIONS,
                      &max_pos_raw)) ||
        (rc = get_eps(c, "rms_norm_eps", d->eps, &o->ln_eps)))
        return rc;
    o->max_pos = max_pos_raw < AS_MAX_POSITIONS ? max_pos_raw : AS_MAX_POSITIONS;
    if ((rc = get_int(c, "num_key_value_heads", 0, d->kv_heads ? d->kv_heads : o->n_head, 1,
                      AS_MAX_HEADS, &o->n_kv_head)))
        return rc;
    if (o->n_head % o->n_kv_head != 0)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' (%d) does not divide num_attention_heads (%d)", c->path,
                          QKEY(c, "num_key_value_heads", qb), o->n_kv_head, o->n_head);
    /* head_dim: explicit (getattr(config, "head_dim") in every family; Qwen3 and Gemma
       default to 128 / 256), else hidden / heads */
    if (!field(c, "head_dim") && !d->head_dim && o->d_model % o->n_head != 0)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' (%d) is not divisible by num_attention_heads (%d) and "
                          "head_dim is not given",
                          c->path, QKEY(c, "hidden_size", qb), o->d_model, o->n_head);
    if ((rc = get_int(c, "head_dim", 0, d->head_dim ? d->head_dim : o->d_model / o->n_head, 1,
                      AS_MAX_DMODEL, &o->d_head)))
        return rc;
    if ((long)o->n_head * o->d_head > 4L * AS_MAX_DMODEL)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' (%d) times num_attention_heads (%d) is over the limit of %ld",
                          c->path, QKEY(c, "head_dim", qb), o->d_head, o->n_head, 4L * AS_MAX_DMODEL);

    /* tokens */
    if ((rc = get_int(c, "pad_token_id", 0, d->pad, -1, AS_MAX_VOCAB, &o->pad_token_id)) ||
        (rc = get_token_id(c, "bos_token_id", d->bos, &o->bos_token_id)) ||
        (rc = get_token_id(c, "eos_token_id", d->eos, &o->eos_token_id)))
        return rc;

    /* activation: Gemma's MLP reads hidden_activation (its hidden_act is not used) */
    if ((rc = get_act(c, gemma ? "hidden_activation" : "hidden_act", d->act, 1, &o->act))) return rc;

    /* block layout */
    o->rms_norm = 1;
    o->gated_mlp = 1;
    o->causal = 1;
    o->type_vocab = 0;
    o->d_embed = o->d_model;
    if ((rc = get_bool(c, "tie_word_embeddings", d->tie, &o->tie_word_embeddings))) return rc;
    int attn_bias = 0;
    if (llama || qwen3 || gemma) {
        /* q, k, v and o all take bias=config.attention_bias */
        if ((rc = get_bool(c, "attention_bias", 0, &attn_bias))) return rc;
        o->qkv_bias = o->o_bias = attn_bias;
    } else if ((rc = refuse_true(c, "attention_bias", "this family's attention has fixed biases"))) {
        return rc;
    }
    if (qwen2) o->qkv_bias = 1; /* Qwen2Attention: q/k/v bias=True, o_proj bias=False */
    if (llama) {
        if ((rc = get_bool(c, "mlp_bias", 0, &o->mlp_bias))) return rc;
    } else if ((rc = refuse_true(c, "mlp_bias", "this family's MLP has no biases"))) {
        return rc;
    }
    o->qk_norm = qwen3 || gemma3;
    o->norm_add_one = gemma;
    o->post_norms = gemma;
    if (gemma) {
        double qs = 0, ac = 0, fc = 0;
        if ((rc = get_num(c, "query_pre_attn_scalar", 0, 256.0, 0.0, 0, CFG_MAX_ROPE_NUMBER, &qs)) ||
            (rc = get_num(c, "attn_logit_softcapping", 0, gemma2 ? 50.0 : 0.0, 0.0, 0,
                          CFG_MAX_ROPE_NUMBER, &ac)) ||
            (rc = get_num(c, "final_logit_softcapping", 0, gemma2 ? 30.0 : 0.0, 0.0, 0,
                          CFG_MAX_ROPE_NUMBER, &fc)))
            return rc;
        /* absent uses the class default; an explicit null turns soft-capping off */
        json_t *tc = c->root;
        if (json_is_null(json_object_get(tc, "attn_logit_softcapping"))) ac = 0;
        if (json_is_null(json_object_get(tc, "final_logit_softcapping"))) fc = 0;
        o->query_scale = (float)(1.0 / sqrt(qs)); /* query_pre_attn_scalar ** -0.5 */
        o->attn_softcap = (float)ac;
        o->final_softcap = (float)fc;
        o->emb_scale = (float)sqrt((double)o->d_model); /* hidden_size ** 0.5 */
        /* Gemma 3 embedding models (EmbeddingGemma) attend both ways */
        if ((rc = refuse_true(c, "use_bidirectional_attention", "causal attention only"))) return rc;
    }

    /* rotary embedding: partial_rotary_factor (Phi-3 only; others would not broadcast) */
    double prf = 1.0;
    if ((rc = get_num(c, "partial_rotary_factor", 0, 1.0, 0.0, 0, 1.0, &prf))) return rc;
    json_t *rs = NULL, *rp = NULL;
    if ((rc = get_obj(c, "rope_scaling", &rs)) || (rc = get_obj(c, "rope_parameters", &rp))) return rc;
    if (rs && json_object_size(rs) == 0) rs = NULL;
    json_t *rope = rs ? rs : rp; /* transformers 5: rope_scaling, when set, wins */
    const char *rope_key = rs ? "rope_scaling" : "rope_parameters";
    json_t *rope_local = NULL;
    if (rope && (json_object_get(rope, "full_attention") || json_object_get(rope, "sliding_attention"))) {
        /* per-layer-type parameters (transformers 5 Gemma 3) */
        if (!gemma3)
            return as_err_set(c->err, AS_ERR_INPUT,
                              "%s: field '%s' per layer type is not supported for %s", c->path,
                              QKEY(c, rope_key, qb), mt);
        rope_local = json_object_get(rope, "sliding_attention");
        rope = json_object_get(rope, "full_attention");
        if ((rope && !json_is_object(rope)) || (rope_local && !json_is_object(rope_local)))
            return as_err_set(c->err, AS_ERR_INPUT,
                              "%s: field '%s' entries must be objects", c->path, QKEY(c, rope_key, qb));
    }
    if (json_is_object(rope) && !phi3) {
        json_t *p = json_object_get(rope, "partial_rotary_factor");
        if (json_is_number(p)) prf = json_number_value(p);
    }
    if (prf != 1.0 && !phi3)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' = %g is not supported for %s (only phi3 rotates part of "
                          "each head)",
                          c->path, QKEY(c, "partial_rotary_factor", qb), prf, mt);
    if (phi3 && json_is_object(rope)) {
        json_t *p = json_object_get(rope, "partial_rotary_factor");
        if (p && !(json_is_number(p) && json_number_value(p) > 0 && json_number_value(p) <= 1))
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be a number in (0, 1]",
                              c->path, QKEY(c, "rope_parameters.partial_rotary_factor", qb));
        if (p) prf = json_number_value(p);
    }
    o->rope_dim = (int)((double)o->d_head * prf); /* int(head_dim * partial_rotary_factor) */
    if (o->rope_dim < 2 || o->rope_dim % 2 != 0)
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: rotary dimension head_dim * partial_rotary_factor = %d x %g = %d is "
                          "not a positive even number",
                          c->path, o->d_head, prf, o->rope_dim);
    int orig_top = 0;
    if (phi3 && (rc = get_int(c, "original_max_position_embeddings", 0, 0, 1,
                              CFG_MAX_ROPE_POSITIONS, &orig_top)))
        return rc;
    double theta = d->theta;
    if ((rc = get_num(c, "rope_theta", 0, d->theta, 1.0, 0, CFG_MAX_ROPE_NUMBER, &theta))) return rc;
    char scope[192];
    if (json_is_object(rope)) {
        snprintf(scope, sizeof scope, "%s%s.%s", c->scope, rope_key,
                 rope_local || json_object_get(json_object_get(c->root, rope_key), "full_attention")
                     ? "full_attention."
                     : "");
        cfg_ctx rcx = {rope, c->path, c->err, scope};
        if ((rc = parse_rope_obj(&rcx, o, 1, max_pos_raw, orig_top, phi3, &theta))) return rc;
    }
    o->rope_theta = (float)theta;
    if (gemma3) {
        /* sliding layers: rope_local_base_freq, default rope (no scaling) */
        double local = 10000.0;
        if ((rc = get_num(c, "rope_local_base_freq", 0, 10000.0, 1.0, 0, CFG_MAX_ROPE_NUMBER, &local)))
            return rc;
        if (json_is_object(rope_local)) {
            snprintf(scope, sizeof scope, "%s%s.sliding_attention.", c->scope, rope_key);
            cfg_ctx rcx = {rope_local, c->path, c->err, scope};
            if ((rc = parse_rope_obj(&rcx, o, 0, max_pos_raw, 0, 0, &local))) return rc;
        }
        o->rope_local_theta = (float)local;
    }

    /* sliding windows: which layers, and the window (query i sees keys i - W < j <= i) */
    int window = 0, given = 0;
    if ((rc = parse_layer_types(c, o, &given))) return rc;
    if (mistral || phi3) {
        /* every layer, when sliding_window is set (Mistral's default 4096; Phi-3's None) */
        if ((rc = get_int(c, "sliding_window", 0, mistral ? 4096 : 0, 1,
                          CFG_MAX_ROPE_POSITIONS, &window)))
            return rc;
        for (int l = 0; l < o->n_layer; l++) o->layer_sliding[l] = window > 0;
    } else if (qwen2 || qwen3) {
        /* Qwen2Config: sliding_window = sliding_window if use_sliding_window else None;
           layer_types default: sliding from layer max_window_layers on */
        int use = 0, mwl = 28;
        if ((rc = get_bool(c, "use_sliding_window", 0, &use))) return rc;
        if (use) {
            if ((rc = get_int(c, "sliding_window", 0, 4096, 1, CFG_MAX_ROPE_POSITIONS, &window)) ||
                (rc = get_int(c, "max_window_layers", 0, 28, 0, AS_MAX_LAYERS, &mwl)))
                return rc;
        }
        for (int l = 0; l < o->n_layer; l++)
            o->layer_sliding[l] = window > 0 && (given ? o->layer_sliding[l] : l >= mwl);
    } else if (gemma) {
        if ((rc = get_int(c, "sliding_window", 0, 4096, 1, CFG_MAX_ROPE_POSITIONS, &window))) return rc;
        int pattern = 2; /* Gemma 2: layers 0, 2, 4, ... slide */
        if (gemma3 && (rc = get_int(c, "sliding_window_pattern", 0, 6, 1, AS_MAX_LAYERS, &pattern)))
            return rc;
        if (!given) /* every pattern-th layer (1-based) is global */
            for (int l = 0; l < o->n_layer; l++) o->layer_sliding[l] = (l + 1) % pattern != 0;
    } else {
        /* llama: LlamaModel has no sliding window (a sliding_window key is not read) */
        memset(o->layer_sliding, 0, sizeof o->layer_sliding);
    }
    /* an explicit "sliding_window": null means no window (the class default only when absent) */
    if (json_is_null(json_object_get(c->root, "sliding_window"))) window = 0;
    if (window == 0 && !gemma3) memset(o->layer_sliding, 0, sizeof o->layer_sliding);
    o->sliding_window = window;
    return AS_OK;
}

json_t *as_json_loadb_hf(const char *buf, size_t len, size_t flags, json_error_t *je) {
    json_t *root = json_loadb(buf, len, flags, je);
    if (root || !strstr(je->text, "too big")) return root;
    char *copy = as_malloc(len + 1);
    if (!copy) return NULL; /* je keeps jansson's message */
    memcpy(copy, buf, len);
    copy[len] = 0;
    as_json_null_big_ints(copy, len);
    root = json_loadb(copy, len, flags, je);
    free(copy);
    return root;
}

/* bad_words_ids: a list of lists of ids below vocab_size, held when within the limits;
 * anything else sets n_bad_words to -1 (generation refuses it, loading does not). */
static void parse_bad_words(const cfg_ctx *c, as_config *o) {
    json_t *b = field(c, "bad_words_ids");
    o->n_bad_words = 0;
    if (!b) return;
    if (!json_is_array(b) || json_array_size(b) > AS_MAX_BAD_WORDS) {
        o->n_bad_words = -1;
        return;
    }
    for (size_t i = 0; i < json_array_size(b); i++) {
        json_t *w = json_array_get(b, i);
        size_t k = json_array_size(w);
        if (!json_is_array(w) || k == 0 || k > AS_MAX_BAD_WORD_LEN) {
            o->n_bad_words = -1;
            return;
        }
        for (size_t j = 0; j < k; j++) {
            json_t *v = json_array_get(w, j);
            json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
            if (x < 0 || x >= o->vocab_size) {
                o->n_bad_words = -1;
                return;
            }
            o->bad_words[i][j] = (int32_t)x;
        }
        o->bad_word_len[i] = (int)k;
        o->n_bad_words = (int)i + 1;
    }
}

/* The generation settings of as_config: the eos_token_id list (as the family parsed
 * eos_token_id: -1 leaves it empty; ids at or above vocab_size, which no step can pick, are
 * left out), forced_bos_token_id and forced_eos_token_id (absent:
 * transformers' configuration default, BartConfig / MBartConfig 2, MarianConfig 0, else
 * none; null: none). Each id below vocab_size. */
static as_status parse_generation(const cfg_ctx *c, as_config *o) {
    char qb[160];
    as_status rc;
    o->n_eos_ids = 0;
    json_t *e = field(c, "eos_token_id");
    if (o->eos_token_id >= 0 && json_is_array(e)) {
        if (json_array_size(e) > AS_MAX_EOS_IDS)
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' lists %zu ids (at most %d)", c->path,
                              QKEY(c, "eos_token_id", qb), json_array_size(e), AS_MAX_EOS_IDS);
        for (size_t i = 0; i < json_array_size(e); i++) {
            json_t *v = json_array_get(e, i);
            json_int_t x = json_is_integer(v) ? json_integer_value(v) : -1;
            if (x < 0 || x > AS_MAX_VOCAB)
                return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' entry %zu is not an id in [0, %d]", c->path,
                                  QKEY(c, "eos_token_id", qb), i, AS_MAX_VOCAB);
            if (x < o->vocab_size) o->eos_ids[o->n_eos_ids++] = (int)x;
        }
    } else if (o->eos_token_id >= 0 && o->eos_token_id < o->vocab_size) o->eos_ids[o->n_eos_ids++] = o->eos_token_id;
    int def_eos = -1;
    if (o->arch == ARCH_BART) def_eos = strcmp(o->model_type, "marian") ? 2 : 0;
    const char *keys[2] = {"forced_bos_token_id", "forced_eos_token_id"};
    int *dst[2] = {&o->forced_bos_token_id, &o->forced_eos_token_id}, defs[2] = {-1, def_eos};
    for (int i = 0; i < 2; i++) {
        *dst[i] = -1;
        if (json_is_null(json_object_get(c->root, keys[i]))) continue;
        if ((rc = get_token_id(c, keys[i], defs[i], dst[i]))) return rc;
        if (*dst[i] >= o->vocab_size)
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' (%d) is not below vocab_size (%d)", c->path,
                              QKEY(c, keys[i], qb), *dst[i], o->vocab_size);
    }
    parse_bad_words(c, o);
    return AS_OK;
}

as_status as_config_parse(const char *json, size_t len, const char *path, as_config *out,
                          as_error *err) {
    as_status rc = AS_OK;
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = as_json_loadb_hf(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return as_err_set(err, AS_ERR_INPUT, "%s: invalid JSON: %s (line %d)", path, jerr.text,
                          jerr.line);
    cfg_ctx c = {root, path, err, ""};
    if (!json_is_object(root)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: not a JSON object", path);
        goto cleanup;
    }
    if ((rc = parse_model_type(&c, out)) != AS_OK) goto cleanup;
    switch (out->arch) {
    case ARCH_BERT:
    case ARCH_ROBERTA: rc = parse_bert(&c, out); break;
    case ARCH_DISTILBERT: rc = parse_distilbert(&c, out); break;
    case ARCH_GPT2: rc = parse_gpt2(&c, out); break;
    case ARCH_LLAMA: rc = parse_llama(&c, out); break;
    case ARCH_BART: rc = parse_bart(&c, out); break;
    case ARCH_T5: rc = parse_t5(&c, out); break;
    }
    if (rc != AS_OK) goto cleanup;
    if (out->arch == ARCH_LLAMA || out->arch == ARCH_BART || out->arch == ARCH_T5) goto labels; /* parse_llama checks its own head layout */
    const char *hk = out->arch == ARCH_GPT2         ? "n_embd"
                     : out->arch == ARCH_DISTILBERT ? "dim"
                                                    : "hidden_size";
    const char *nk = out->arch == ARCH_GPT2         ? "n_head"
                     : out->arch == ARCH_DISTILBERT ? "n_heads"
                                                    : "num_attention_heads";
    if (out->d_model % out->n_head != 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: field '%s' (%d) is not divisible by '%s' (%d)",
                        path, hk, out->d_model, nk, out->n_head);
        goto cleanup;
    }
    out->d_head = out->d_model / out->n_head;
    out->n_kv_head = out->n_head;
    out->bos_token_id = out->eos_token_id = -1;
labels:
    if ((rc = parse_generation(&c, out)) != AS_OK) goto cleanup;
    if (out->pad_token_id >= out->vocab_size) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: field 'pad_token_id' (%d) is not below vocab_size (%d)",
                        path, out->pad_token_id, out->vocab_size);
        goto cleanup;
    }
    rc = parse_labels(&c, out);

cleanup:
    json_decref(root);
    if (rc != AS_OK) as_config_clear(out);
    return rc;
}

as_status as_config_load_dir(const char *dir, as_config *out, as_error *err) {
    char path[4096];
    char *text = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    as_status rc = as_path_join(path, sizeof path, dir, "config.json", err);
    if (rc != AS_OK) return rc;
    if ((rc = as_read_file(path, CFG_MAX_BYTES, &text, &len, err)) != AS_OK) return rc;
    rc = as_config_parse(text, len, path, out, err);
    free(text);
    return rc;
}

void as_config_clear(as_config *c) {
    if (!c) return;
    if (c->id2label)
        for (int i = 0; i < c->num_labels; i++) free(c->id2label[i]);
    free(c->id2label);
    memset(c, 0, sizeof *c);
}

float as_attn_scale(const as_config *c, int layer) {
    if (c->query_scale > 0) return c->query_scale; /* Gemma: query_pre_attn_scalar ** -0.5 */
    double s = c->attn_unscaled ? 1.0 : 1.0 / sqrt((double)c->d_head);
    if (c->attn_layer_scale) s /= (double)(layer + 1);
    return (float)s;
}
