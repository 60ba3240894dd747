/* cmd_info.c — `attnscope info`: architecture, sizes, attention block (grouped-query
 * heads, scores' factor, RoPE, sliding windows, soft-caps), norms, dtype and arithmetic
 * precision, task heads and vocabulary of a model folder, as text or (--format json) one
 * JSON object. */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static const char *INFO_HELP =
    "usage: attnscope info --model DIR [--format text|json]\n"
    "\n"
    "Prints the architecture, sizes, attention block (query and key/value heads, the\n"
    "scores' factor, RoPE, sliding windows, soft-caps), norms, stored dtype, task heads,\n"
    "parameter count and tokenizer of the Hugging Face model folder DIR; --format json\n"
    "prints the same as one JSON object. Exit status 0 ok, 2 bad input.\n";

static int kv_heads(const as_config *c) { return c->n_kv_head > 0 ? c->n_kv_head : c->n_head; }

/* The layers with a sliding window, as "0-3,5" into buf; returns how many there are. */
static int window_layers(const as_config *c, char *buf, size_t cap) {
    int n = 0;
    size_t len = 0;
    buf[0] = 0;
    for (int l = 0; l < c->n_layer; l++) {
        if (!(c->sliding_window > 0 && c->layer_sliding[l])) continue;
        int e = l;
        while (e + 1 < c->n_layer && c->layer_sliding[e + 1]) e++;
        int w = e > l ? snprintf(buf + len, cap - len, "%s%d-%d", len ? "," : "", l, e)
                      : snprintf(buf + len, cap - len, "%s%d", len ? "," : "", l);
        if (w < 0 || (size_t)w >= cap - len) break;
        len += (size_t)w;
        n += e - l + 1;
        l = e;
    }
    return n;
}

/* The norm as words: "RMSNorm" or "LayerNorm", with Gemma's (1 + w), q/k norm, post-norms. */
static void norm_text(const as_config *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s (eps %g)%s%s%s", c->rms_norm ? "RMSNorm" : "LayerNorm", (double)c->ln_eps,
             c->norm_add_one ? ", scaled by (1 + w)" : "", c->qk_norm ? ", q/k norm" : "",
             c->post_norms ? ", post-attention and post-feed-forward norms" : "");
}

static json_t *info_json(const char *dir, const as_model *m) {
    const as_config *c = as_model_config(m);
    unsigned heads = as_model_heads(m);
    json_t *th = json_array(), *win = json_array(), *labels = json_array(), *rope = json_null();
    if (heads & HEAD_CLASSIFIER) json_array_append_new(th, json_string("classifier"));
    if (heads & HEAD_MLM) json_array_append_new(th, json_string("mlm"));
    if (heads & HEAD_LM) json_array_append_new(th, json_string("lm"));
    for (int i = 0; c->id2label && i < c->num_labels; i++)
        json_array_append_new(labels, c->id2label[i] ? as_json_string_utf8(c->id2label[i]) : json_null());
    for (int l = 0; l < c->n_layer; l++)
        json_array_append_new(win, json_integer(c->sliding_window > 0 && c->layer_sliding[l] ? c->sliding_window : 0));
    if (c->rope_dim > 0) {
        rope = json_pack("{s:i, s:f, s:s}", "dim", c->rope_dim, "theta", (double)c->rope_theta, "scaling",
                         as_rope_scale_name(c->rope_scaling));
        json_object_set_new(rope, "factor", c->rope_scaling ? json_real((double)c->rope_factor) : json_null());
        json_object_set_new(rope, "local_theta",
                            c->rope_local_theta > 0 ? json_real((double)c->rope_local_theta) : json_null());
        if (c->rope_scaling == ROPE_SCALE_LLAMA3 || c->rope_scaling == ROPE_SCALE_YARN ||
            c->rope_scaling == ROPE_SCALE_LONGROPE)
            json_object_set_new(rope, "original_max_position_embeddings", json_integer(c->rope_orig_max_pos));
        if (c->rope_scaling == ROPE_SCALE_DYNAMIC) /* the length past which the base grows */
            json_object_set_new(rope, "max_position_embeddings", json_integer(c->rope_orig_max_pos));
        if (c->rope_scaling == ROPE_SCALE_YARN || c->rope_scaling == ROPE_SCALE_LONGROPE)
            json_object_set_new(rope, "attention_factor", json_real((double)c->rope_attn_factor));
    }
    char norm[160];
    norm_text(c, norm, sizeof norm);
    const char *tok_why = as_model_tokenizer_problem(m);
    json_t *o = json_pack("{s:s, s:s, s:s, s:b, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "model", dir,
                          "arch", as_arch_name(c->arch), "model_type", c->model_type, "causal", c->causal != 0,
                          "layers", c->n_layer, "heads", c->n_head, "kv_heads", kv_heads(c), "d_head", c->d_head,
                          "d_model", c->d_model, "d_ff", c->d_ff, "d_embed", c->d_embed, "max_positions", c->max_pos,
                          "max_tokens", as_model_max_tokens(m), "type_vocab", c->type_vocab, "vocab_size",
                          c->vocab_size);
    json_object_set_new(o, "gqa_ratio", json_integer(c->n_head / kv_heads(c)));
    /* encoder-decoder models: layers are the encoder's */
    json_object_set_new(o, "decoder_layers", json_integer(c->n_dec_layer));
    json_object_set_new(o, "relative_attention",
                        c->rel_buckets > 0 ? json_pack("{s:i, s:i}", "buckets", c->rel_buckets, "max_distance",
                                                       c->rel_max_distance)
                                           : json_null());
    json_object_set_new(o, "score_scale", json_real((double)as_attn_scale(c, 0)));
    json_object_set_new(o, "score_layer_scale", json_boolean(c->attn_layer_scale));
    json_object_set_new(o, "activation", json_string(as_act_name(c->act)));
    json_object_set_new(o, "gated_mlp", json_boolean(c->gated_mlp));
    json_object_set_new(o, "norm", json_string(c->rms_norm ? "rmsnorm" : "layernorm"));
    json_object_set_new(o, "norm_text", json_string(norm));
    json_object_set_new(o, "rope", rope);
    json_object_set_new(o, "sliding_window", json_integer(c->sliding_window));
    json_object_set_new(o, "window", win);
    json_object_set_new(o, "attn_softcap", json_real((double)c->attn_softcap));
    json_object_set_new(o, "final_softcap", json_real((double)c->final_softcap));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(o, "dtype", json_string(as_dtype_name(as_model_dtype(m))));
    json_object_set_new(o, "precision", json_string(as_precision_name(as_model_precision(m))));
    json_object_set_new(o, "cpu_bf16", json_boolean(as_cpu_bf16()));
    json_object_set_new(o, "n_params", json_integer((json_int_t)as_model_n_params(m)));
    json_object_set_new(o, "task_heads", th);
    json_object_set_new(o, "labels", labels);
    json_object_set_new(o, "tokenizer", json_boolean(as_model_has_tokenizer(m)));
    json_object_set_new(o, "tokenizer_problem", tok_why ? as_json_string_utf8(tok_why) : json_null());
    return o;
}

static void info_text(const char *dir, const as_model *m) {
    const as_config *c = as_model_config(m);
    unsigned heads = as_model_heads(m);
    int hkv = kv_heads(c);
    printf("model:        %s\n", dir);
    printf("architecture: %s (model_type %s)%s\n", as_arch_name(c->arch), c->model_type, c->causal ? ", causal" : "");
    printf("layers:       %d%s\n", c->n_layer, c->n_dec_layer ? " (encoder)" : "");
    if (c->n_dec_layer)
        printf("decoder:      %d layers (causal self-attention, cross-attention to the encoder, feed-forward; %s)\n",
               c->n_dec_layer, c->pre_norm ? "pre-norm" : "post-norm");
    if (c->rel_buckets > 0)
        printf("relative:     %d position buckets up to distance %d (the first layer's bias, every layer)\n",
               c->rel_buckets, c->rel_max_distance);
    if (hkv < c->n_head)
        printf("heads:        %d query, %d key/value (grouped-query, %d query heads per kv head; head width %d)\n",
               c->n_head, hkv, c->n_head / hkv, c->d_head);
    else printf("heads:        %d (head width %d)\n", c->n_head, c->d_head);
    if (c->query_scale > 0) printf("scores:       q.k x %g (the config's query scale)\n", (double)c->query_scale);
    else
        printf("scores:       q.k%s%s\n", c->attn_unscaled ? "" : " / sqrt(head width)",
               c->attn_layer_scale ? " / (layer + 1)" : "");
    if (c->rope_dim > 0) {
        printf("rope:         %d of %d dims, theta %g", c->rope_dim, c->d_head, (double)c->rope_theta);
        if (c->rope_scaling) printf(", scaling %s x %g", as_rope_scale_name(c->rope_scaling), (double)c->rope_factor);
        else printf(", scaling none");
        if (c->rope_scaling == ROPE_SCALE_LLAMA3 || c->rope_scaling == ROPE_SCALE_YARN)
            printf(" (original %d positions)", c->rope_orig_max_pos);
        if (c->rope_scaling == ROPE_SCALE_DYNAMIC)
            printf(" (base grows past %d positions)", c->rope_orig_max_pos);
        if (c->rope_scaling == ROPE_SCALE_LONGROPE)
            printf(" (long factors past %d positions, cos/sin x %g)", c->rope_orig_max_pos,
                   (double)c->rope_attn_factor);
        if (c->rope_local_theta > 0) printf(", local theta %g on sliding layers", (double)c->rope_local_theta);
        printf("\n");
    }
    if (c->arch == ARCH_LLAMA) {
        char layers[512];
        int n = window_layers(c, layers, sizeof layers);
        if (n) printf("window:       %d on layer%s %s (%d of %d)\n", c->sliding_window, n > 1 ? "s" : "", layers, n, c->n_layer);
        else printf("window:       none\n");
        if (c->attn_softcap > 0 || c->final_softcap > 0)
            printf("soft-caps:    attention %g, final %g\n", (double)c->attn_softcap, (double)c->final_softcap);
        else printf("soft-caps:    none\n");
        char norm[160];
        norm_text(c, norm, sizeof norm);
        printf("norms:        %s\n", norm);
        printf("embeddings:   %s\n", c->tie_word_embeddings ? "tied (the LM head is the embedding matrix)" : "not tied");
    }
    printf("width:        %d (feed-forward %d, embeddings %d)\n", c->d_model, c->d_ff, c->d_embed);
    printf("activation:   %s%s\n", as_act_name(c->act), c->gated_mlp ? " (gated MLP)" : "");
    printf("positions:    %d (longest input %d tokens)\n", c->max_pos, as_model_max_tokens(m));
    printf("segments:     %d\n", c->type_vocab);
    printf("vocabulary:   %d\n", c->vocab_size);
    printf("dtype:        %s (arithmetic %s%s)\n", as_dtype_name(as_model_dtype(m)), as_precision_name(as_model_precision(m)),
           as_cpu_bf16() ? "; this CPU multiplies bf16 natively" : "");
    printf("parameters:   %zu\n", as_model_n_params(m));
    printf("task heads:  ");
    if (!heads) printf(" none");
    if (heads & HEAD_CLASSIFIER) {
        printf(" sequence-classifier (%d classes:", c->num_labels);
        for (int i = 0; i < c->num_labels && i < 16; i++) {
            if (c->id2label && c->id2label[i]) printf(" %s", c->id2label[i]);
            else printf(" LABEL_%d", i);
        }
        if (c->num_labels > 16) printf(" ...");
        printf(")");
    }
    if (heads & HEAD_MLM) printf(" masked-lm");
    if (heads & HEAD_LM) printf(" causal-lm");
    printf("\n");
    const char *tok_why = as_model_tokenizer_problem(m);
    if (tok_why) printf("tokenizer:    not used (%s; use --ids)\n", tok_why);
    else printf("tokenizer:    %s\n", as_model_has_tokenizer(m) ? "yes" : "none (use --ids)");
}

int cmd_info(int argc, char **argv) {
    const char *dir = NULL, *format = "text";
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(INFO_HELP, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--model")) {
            if (!(dir = cli_value(argc, argv, &i, "info"))) return AS_ERR_INPUT;
        } else if (!strcmp(argv[i], "--format")) {
            if (!(format = cli_value(argc, argv, &i, "info"))) return AS_ERR_INPUT;
        } else {
            return cli_usage_error("info", "unknown option '%s'", argv[i]);
        }
    }
    if (!dir) return cli_usage_error("info", "--model DIR is required");
    if (strcmp(format, "text") && strcmp(format, "json"))
        return cli_usage_error("info", "--format: expected text or json, got '%s'", format);
    as_error err = {0};
    as_model *m = NULL;
    if (as_model_load(dir, &m, &err)) return cli_fail(&err);
    int rc = 0;
    if (!strcmp(format, "json")) {
        json_t *o = info_json(dir, m);
        char *s = o ? json_dumps(o, JSON_INDENT(1) | JSON_ENSURE_ASCII) : NULL;
        if (s) printf("%s\n", s);
        else rc = cli_usage_error("info", "out of memory");
        free(s);
        json_decref(o);
    } else {
        info_text(dir, m);
    }
    as_model_free(m);
    return rc;
}
