/* config.c — Hugging Face config.json -> as_config.
 *
 * What it does: reads the fields each supported family names its sizes with
 * (BERT / ELECTRA / RoBERTa / CamemBERT / XLM-R: num_hidden_layers ...; DistilBERT:
 * n_layers ...; GPT-2: n_layer ...), applies the transformers library's defaults for
 * optional fields, maps activation names, reads id2label, and checks every size
 * against the AS_MAX_* limits. Errors name the file and the field.
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
} cfg_ctx;

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

/* Field value or NULL when absent or null. */
static json_t *field(const cfg_ctx *c, const char *key) {
    json_t *v = json_object_get(c->root, key);
    return json_is_null(v) ? NULL : v;
}

/* Reads integer field key into *out, checking lo <= v <= hi. When absent: error if
 * required, else *out = def. */
static as_status get_int(const cfg_ctx *c, const char *key, int required, int def, long lo,
                         long hi, int *out) {
    json_t *v = field(c, key);
    if (!v) {
        if (required)
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' missing", c->path, key);
        *out = def;
        return AS_OK;
    }
    if (!json_is_integer(v))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be an integer, got %s",
                          c->path, key, json_kind(v));
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = %lld out of range [%ld, %ld]",
                          c->path, key, (long long)x, lo, hi);
    *out = (int)x;
    return AS_OK;
}

/* Reads a string field; *out = def when absent (NULL def + absent = missing error). */
static as_status get_str(const cfg_ctx *c, const char *key, const char *def, const char **out) {
    json_t *v = field(c, key);
    if (!v) {
        if (!def) return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' missing", c->path, key);
        *out = def;
        return AS_OK;
    }
    if (!json_is_string(v))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be a string, got %s", c->path,
                          key, json_kind(v));
    *out = json_string_value(v);
    return AS_OK;
}

/* Layer-norm epsilon: a number in (0, 1). */
static as_status get_eps(const cfg_ctx *c, const char *key, double def, float *out) {
    json_t *v = field(c, key);
    double x = def;
    if (v) {
        if (!json_is_number(v))
            return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be a number, got %s",
                              c->path, key, json_kind(v));
        x = json_number_value(v);
    }
    if (!(x > 0.0 && x < 1.0))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' = %g out of range (0, 1)", c->path,
                          key, x);
    *out = (float)x;
    return AS_OK;
}

static as_status get_bool(const cfg_ctx *c, const char *key, int def, int *out) {
    json_t *v = field(c, key);
    if (!v) {
        *out = def;
        return AS_OK;
    }
    if (!json_is_boolean(v))
        return as_err_set(c->err, AS_ERR_INPUT, "%s: field '%s' must be a boolean, got %s",
                          c->path, key, json_kind(v));
    *out = json_is_true(v);
    return AS_OK;
}

static as_status get_act(const cfg_ctx *c, const char *key, const char *def, as_act *out) {
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
    else
        return as_err_set(c->err, AS_ERR_INPUT,
                          "%s: field '%s' = '%.64s' is not supported (gelu, gelu_python, gelu_new, "
                          "gelu_pytorch_tanh, gelu_fast, gelu_accurate, relu)",
                          c->path, key, s);
    return AS_OK;
}

/* Maps a model_type to its architecture; -1 when unsupported. */
static int arch_of(const char *t) {
    if (strcmp(t, "bert") == 0 || strcmp(t, "electra") == 0) return ARCH_BERT;
    if (strcmp(t, "roberta") == 0 || strcmp(t, "camembert") == 0 || strcmp(t, "xlm-roberta") == 0)
        return ARCH_ROBERTA;
    if (strcmp(t, "distilbert") == 0) return ARCH_DISTILBERT;
    if (strcmp(t, "gpt2") == 0) return ARCH_GPT2;
    return -1;
}

/* model_type from an "architectures" class name (BertForMaskedLM -> bert), or NULL. */
static const char *type_from_class(const char *cls) {
    static const struct {
        const char *prefix, *type;
    } map[] = {{"DistilBert", "distilbert"}, {"XLMRoberta", "xlm-roberta"},
               {"Camembert", "camembert"},   {"Roberta", "roberta"},
               {"Electra", "electra"},       {"Bert", "bert"},
               {"GPT2", "gpt2"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strncmp(cls, map[i].prefix, strlen(map[i].prefix)) == 0) return map[i].type;
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
                          "roberta, camembert, xlm-roberta, distilbert, gpt2)",
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
        (rc = get_act(c, "hidden_act", "gelu", &o->act)) ||
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
        (rc = get_act(c, "activation", "gelu", &o->act)) ||
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
        (rc = get_act(c, "activation_function", "gelu_new", &o->act)) ||
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

/* The decoder LLM family (ARCH_LLAMA): llama, mistral, qwen2, qwen3, gemma2, gemma3_text,
 * phi3. Fills the block description of as_config (see attnscope.h). */
static as_status parse_llama(const cfg_ctx *c, as_config *o) {
    (void)o;
    return as_err_set(c->err, AS_ERR_INPUT, "%s: model_type '%s' is not supported yet", c->path, o->model_type);
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

as_status as_config_parse(const char *json, size_t len, const char *path, as_config *out,
                          as_error *err) {
    as_status rc = AS_OK;
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = as_json_loadb_hf(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return as_err_set(err, AS_ERR_INPUT, "%s: invalid JSON: %s (line %d)", path, jerr.text,
                          jerr.line);
    cfg_ctx c = {root, path, err};
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
    }
    if (rc != AS_OK) goto cleanup;
    if (out->arch == ARCH_LLAMA) goto labels; /* parse_llama checks its own head layout */
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
    double s = c->attn_unscaled ? 1.0 : 1.0 / sqrt((double)c->d_head);
    if (c->attn_layer_scale) s /= (double)(layer + 1);
    return (float)s;
}
