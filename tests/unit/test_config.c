/* test_config.c — unit tests for src/io/config.c: example config.json texts of every
 * supported family parsed field by field, the real bert-base-uncased config when
 * ../shared has it, and the errors (missing / wrong-typed field, unsupported
 * model_type, sizes out of range, hidden size not divisible by heads, bad id2label).
 * The decoder LLM family (llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3): each
 * model_type's transformers defaults, published configs' shapes (Llama 3.1, Qwen2.5,
 * Gemma 2 / 3, Phi-3, Mistral), RoPE scaling and sliding-window layouts, and every
 * option refused by name.
 * It does not load weights.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "io/config.h"

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif

static as_status parse(const char *json, as_config *c, as_error *err) {
    return as_config_parse(json, strlen(json), "cfg/config.json", c, err);
}

/* Expects AS_ERR_INPUT with every word in the message (NULL-terminated list). */
static void expect_error(const char *json, const char *w1, const char *w2) {
    as_config c;
    as_error err = {0};
    as_status rc = parse(json, &c, &err);
    if (rc != AS_ERR_INPUT || !strstr(err.msg, w1) || (w2 && !strstr(err.msg, w2)))
        print_error("expected '%s' / '%s' in: %s (rc %d)\n", w1, w2 ? w2 : "", err.msg, (int)rc);
    assert_int_equal(rc, AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "cfg/config.json"));
    assert_non_null(strstr(err.msg, w1));
    if (w2) assert_non_null(strstr(err.msg, w2));
    /* a failed parse leaves a cleared config */
    assert_null(c.id2label);
    assert_int_equal(c.n_layer, 0);
    as_config_clear(&c);
}

static const char *BERT_TINY =
    "{\"architectures\":[\"BertForSequenceClassification\"],\"model_type\":\"bert\","
    "\"num_hidden_layers\":2,\"num_attention_heads\":4,\"hidden_size\":32,"
    "\"intermediate_size\":64,\"hidden_act\":\"gelu\",\"max_position_embeddings\":128,"
    "\"type_vocab_size\":2,\"layer_norm_eps\":1e-12,\"pad_token_id\":0,\"vocab_size\":1000,"
    "\"id2label\":{\"0\":\"NEGATIVE\",\"1\":\"POSITIVE\"},"
    "\"label2id\":{\"NEGATIVE\":0,\"POSITIVE\":1}}";

static void test_bert(void **state) {
    (void)state;
    as_config c;
    as_error err = {0};
    assert_int_equal(parse(BERT_TINY, &c, &err), AS_OK);
    assert_int_equal(c.arch, ARCH_BERT);
    assert_string_equal(c.model_type, "bert");
    assert_int_equal(c.n_layer, 2);
    assert_int_equal(c.n_head, 4);
    assert_int_equal(c.d_model, 32);
    assert_int_equal(c.d_head, 8);
    assert_int_equal(c.d_ff, 64);
    assert_int_equal(c.d_embed, 32);
    assert_int_equal(c.vocab_size, 1000);
    assert_int_equal(c.max_pos, 128);
    assert_int_equal(c.type_vocab, 2);
    assert_int_equal(c.pad_token_id, 0);
    assert_int_equal(c.causal, 0);
    assert_true(c.ln_eps == 1e-12f);
    assert_int_equal(c.act, ACT_GELU);
    assert_int_equal(c.num_labels, 2);
    assert_string_equal(c.id2label[0], "NEGATIVE");
    assert_string_equal(c.id2label[1], "POSITIVE");
    assert_int_equal(c.sinusoidal_pos, 0);
    as_config_clear(&c);
    assert_null(c.id2label);
    assert_int_equal(c.num_labels, 0);
    as_config_clear(&c); /* twice is safe */
    as_config_clear(NULL);
}

static void test_bert_defaults_and_arch_inference(void **state) {
    (void)state;
    as_config c;
    as_error err = {0};
    /* no model_type: inferred from architectures; optional fields take HF defaults */
    const char *j = "{\"architectures\":[\"SomethingElse\",\"BertForMaskedLM\"],"
                    "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"hidden_size\":8,"
                    "\"intermediate_size\":16,\"max_position_embeddings\":16,\"vocab_size\":50,"
                    "\"num_labels\":3}";
    assert_int_equal(parse(j, &c, &err), AS_OK);
    assert_string_equal(c.model_type, "bert");
    assert_int_equal(c.arch, ARCH_BERT);
    assert_int_equal(c.act, ACT_GELU);
    assert_int_equal(c.type_vocab, 2);
    assert_int_equal(c.pad_token_id, 0);
    assert_true(c.ln_eps == 1e-12f);
    assert_int_equal(c.num_labels, 3);
    assert_null(c.id2label);
    as_config_clear(&c);
    expect_error("{\"architectures\":[\"XLNetLMHeadModel\"],\"num_hidden_layers\":1}", "model_type", NULL);
    expect_error("{\"num_hidden_layers\":1}", "model_type", NULL);
}

static void test_roberta_family(void **state) {
    (void)state;
    const char *types[3] = {"roberta", "camembert", "xlm-roberta"};
    for (int i = 0; i < 3; i++) {
        char j[1024];
        snprintf(j, sizeof j,
                 "{\"model_type\":\"%s\",\"num_hidden_layers\":12,\"num_attention_heads\":12,"
                 "\"hidden_size\":768,\"intermediate_size\":3072,\"hidden_act\":\"gelu\","
                 "\"max_position_embeddings\":514,\"type_vocab_size\":1,"
                 "\"layer_norm_eps\":1e-05,\"vocab_size\":50265,\"bos_token_id\":0}",
                 types[i]);
        as_config c;
        as_error err = {0};
        assert_int_equal(parse(j, &c, &err), AS_OK);
        assert_int_equal(c.arch, ARCH_ROBERTA);
        assert_string_equal(c.model_type, types[i]);
        assert_int_equal(c.n_layer, 12);
        assert_int_equal(c.d_head, 64);
        assert_int_equal(c.max_pos, 514);
        assert_int_equal(c.type_vocab, 1);
        assert_int_equal(c.pad_token_id, 1); /* RoBERTa default */
        assert_true(c.ln_eps == 1e-5f);
        assert_int_equal(c.vocab_size, 50265);
        assert_int_equal(c.num_labels, 0);
        as_config_clear(&c);
    }
}

static void test_electra(void **state) {
    (void)state;
    const char *j =
        "{\"model_type\":\"electra\",\"num_hidden_layers\":12,\"num_attention_heads\":4,"
        "\"hidden_size\":256,\"intermediate_size\":1024,\"hidden_act\":\"gelu\","
        "\"max_position_embeddings\":512,\"type_vocab_size\":2,\"layer_norm_eps\":1e-12,"
        "\"vocab_size\":30522,\"embedding_size\":128,\"pad_token_id\":0}";
    as_config c;
    as_error err = {0};
    assert_int_equal(parse(j, &c, &err), AS_OK);
    assert_int_equal(c.arch, ARCH_BERT);
    assert_string_equal(c.model_type, "electra");
    assert_int_equal(c.d_model, 256);
    assert_int_equal(c.d_embed, 128);
    assert_int_equal(c.d_head, 64);
    assert_int_equal(c.d_ff, 1024);
    as_config_clear(&c);
}

static void test_distilbert(void **state) {
    (void)state;
    const char *j =
        "{\"activation\":\"gelu\",\"architectures\":[\"DistilBertForSequenceClassification\"],"
        "\"dim\":768,\"dropout\":0.1,\"hidden_dim\":3072,\"id2label\":{\"1\":\"POSITIVE\","
        "\"0\":\"NEGATIVE\"},\"max_position_embeddings\":512,\"model_type\":\"distilbert\","
        "\"n_heads\":12,\"n_layers\":6,\"pad_token_id\":0,\"sinusoidal_pos_embds\":false,"
        "\"vocab_size\":30522}";
    as_config c;
    as_error err = {0};
    assert_int_equal(parse(j, &c, &err), AS_OK);
    assert_int_equal(c.arch, ARCH_DISTILBERT);
    assert_int_equal(c.n_layer, 6);
    assert_int_equal(c.n_head, 12);
    assert_int_equal(c.d_model, 768);
    assert_int_equal(c.d_embed, 768);
    assert_int_equal(c.d_ff, 3072);
    assert_int_equal(c.max_pos, 512);
    assert_int_equal(c.vocab_size, 30522);
    assert_int_equal(c.type_vocab, 0);
    assert_int_equal(c.pad_token_id, 0);
    assert_int_equal(c.act, ACT_GELU);
    assert_true(c.ln_eps == 1e-12f);
    assert_int_equal(c.sinusoidal_pos, 0);
    assert_int_equal(c.num_labels, 2);
    assert_string_equal(c.id2label[0], "NEGATIVE");
    assert_string_equal(c.id2label[1], "POSITIVE");
    as_config_clear(&c);

    const char *j2 = "{\"model_type\":\"distilbert\",\"dim\":8,\"hidden_dim\":16,\"n_heads\":2,"
                     "\"n_layers\":1,\"max_position_embeddings\":8,\"vocab_size\":10,"
                     "\"sinusoidal_pos_embds\":true,\"activation\":\"relu\"}";
    assert_int_equal(parse(j2, &c, &err), AS_OK);
    assert_int_equal(c.sinusoidal_pos, 1);
    assert_int_equal(c.act, ACT_RELU);
    as_config_clear(&c);
    expect_error("{\"model_type\":\"distilbert\",\"dim\":8,\"hidden_dim\":16,\"n_heads\":2,"
                 "\"n_layers\":1,\"max_position_embeddings\":8,\"vocab_size\":10,"
                 "\"sinusoidal_pos_embds\":1}",
                 "'sinusoidal_pos_embds'", NULL);
}

static void test_gpt2(void **state) {
    (void)state;
    const char *j =
        "{\"activation_function\":\"gelu_new\",\"architectures\":[\"GPT2LMHeadModel\"],"
        "\"bos_token_id\":50256,\"eos_token_id\":50256,\"layer_norm_epsilon\":1e-05,"
        "\"model_type\":\"gpt2\",\"n_ctx\":1024,\"n_embd\":768,\"n_head\":12,\"n_inner\":null,"
        "\"n_layer\":12,\"n_positions\":1024,\"vocab_size\":50257}";
    as_config c;
    as_error err = {0};
    assert_int_equal(parse(j, &c, &err), AS_OK);
    assert_int_equal(c.arch, ARCH_GPT2);
    assert_int_equal(c.n_layer, 12);
    assert_int_equal(c.n_head, 12);
    assert_int_equal(c.d_model, 768);
    assert_int_equal(c.d_head, 64);
    assert_int_equal(c.d_ff, 3072);
    assert_int_equal(c.d_embed, 768);
    assert_int_equal(c.max_pos, 1024);
    assert_int_equal(c.vocab_size, 50257);
    assert_int_equal(c.type_vocab, 0);
    assert_int_equal(c.pad_token_id, -1);
    assert_int_equal(c.causal, 1);
    assert_int_equal(c.act, ACT_GELU_NEW);
    assert_true(c.ln_eps == 1e-5f);
    as_config_clear(&c);

    /* n_ctx fallback, explicit n_inner, pad id, defaults for eps and activation */
    const char *j2 = "{\"model_type\":\"gpt2\",\"n_ctx\":64,\"n_embd\":16,\"n_head\":2,"
                     "\"n_inner\":40,\"n_layer\":1,\"vocab_size\":100,\"pad_token_id\":99}";
    assert_int_equal(parse(j2, &c, &err), AS_OK);
    assert_int_equal(c.max_pos, 64);
    assert_int_equal(c.d_ff, 40);
    assert_int_equal(c.pad_token_id, 99);
    assert_int_equal(c.act, ACT_GELU_NEW);
    assert_true(c.ln_eps == 1e-5f);
    as_config_clear(&c);
    expect_error("{\"model_type\":\"gpt2\",\"n_embd\":16,\"n_head\":2,\"n_layer\":1,"
                 "\"vocab_size\":100}",
                 "'n_positions' missing", NULL);
}

/* Options that change what attention computes: read and applied (GPT-2 scaling,
 * BERT is_decoder), or refused by name (relative positions, cross-attention). */
static void test_attention_options(void **state) {
    (void)state;
    as_config c;
    as_error err = {0};
    /* GPT-2 (Dh = 16): stock 1/sqrt(Dh) in every layer; Mistral's runs also / (layer + 1);
       scale_attn_weights false: plain q.k */
    static const struct {
        const char *extra;
        int unscaled, layer_scale;
        float l0, l2; /* as_attn_scale of layers 0 and 2 */
    } g[] = {
        {"", 0, 0, 0.25f, 0.25f},
        {",\"scale_attn_by_inverse_layer_idx\":true,\"reorder_and_upcast_attn\":true", 0, 1, 0.25f, 0.25f / 3},
        {",\"scale_attn_weights\":false", 1, 0, 1.0f, 1.0f},
        {",\"scale_attn_weights\":false,\"scale_attn_by_inverse_layer_idx\":true", 1, 1, 1.0f, 1.0f / 3},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        char j[512];
        snprintf(j, sizeof j,
                 "{\"model_type\":\"gpt2\",\"n_positions\":64,\"n_embd\":64,\"n_head\":4,"
                 "\"n_layer\":3,\"vocab_size\":100%s}",
                 g[i].extra);
        assert_int_equal(parse(j, &c, &err), AS_OK);
        assert_int_equal(c.attn_unscaled, g[i].unscaled);
        assert_int_equal(c.attn_layer_scale, g[i].layer_scale);
        assert_float_equal(as_attn_scale(&c, 0), g[i].l0, 1e-7);
        assert_float_equal(as_attn_scale(&c, 2), g[i].l2, 1e-7);
        as_config_clear(&c);
    }
    expect_error("{\"model_type\":\"gpt2\",\"n_positions\":64,\"n_embd\":64,\"n_head\":4,"
                 "\"n_layer\":3,\"vocab_size\":100,\"scale_attn_weights\":\"yes\"}",
                 "'scale_attn_weights' must be a boolean", NULL);

    /* BERT: encoder by default; is_decoder = causal (BertLMHeadModel) */
    assert_int_equal(parse(BERT_TINY, &c, &err), AS_OK);
    assert_int_equal(c.causal, 0);
    assert_float_equal(as_attn_scale(&c, 1), 1.0f / sqrtf(8.0f), 1e-7);
    as_config_clear(&c);
    char j[1024];
    snprintf(j, sizeof j, "%.*s,\"is_decoder\":true,\"position_embedding_type\":\"absolute\"}",
             (int)strlen(BERT_TINY) - 1, BERT_TINY);
    assert_int_equal(parse(j, &c, &err), AS_OK);
    assert_int_equal(c.causal, 1);
    as_config_clear(&c);
    snprintf(j, sizeof j, "%.*s,\"position_embedding_type\":\"relative_key_query\"}", (int)strlen(BERT_TINY) - 1,
             BERT_TINY);
    expect_error(j, "'position_embedding_type' = 'relative_key_query' is not supported", NULL);
    snprintf(j, sizeof j, "%.*s,\"is_decoder\":true,\"add_cross_attention\":true}", (int)strlen(BERT_TINY) - 1,
             BERT_TINY);
    expect_error(j, "'add_cross_attention' = true is not supported", NULL);
}

static void test_activations(void **state) {
    (void)state;
    enum { N = 7 };
    const char *names[N] = {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast", "relu", "gelu_python",
                            "gelu_accurate"};
    as_act acts[N] = {ACT_GELU, ACT_GELU_NEW, ACT_GELU_NEW, ACT_GELU_NEW, ACT_RELU, ACT_GELU, ACT_GELU_NEW};
    for (int i = 0; i <= N; i++) {
        char j[512];
        snprintf(j, sizeof j,
                 "{\"model_type\":\"bert\",\"num_hidden_layers\":1,\"num_attention_heads\":2,"
                 "\"hidden_size\":8,\"intermediate_size\":16,\"max_position_embeddings\":16,"
                 "\"vocab_size\":50,\"hidden_act\":\"%s\"}",
                 i < N ? names[i] : "swish");
        if (i == N) {
            expect_error(j, "'hidden_act'", "swish");
            continue;
        }
        as_config c;
        as_error err = {0};
        assert_int_equal(parse(j, &c, &err), AS_OK);
        assert_int_equal(c.act, acts[i]);
        as_config_clear(&c);
    }
}

static void test_real_bert_base(void **state) {
    (void)state;
    const char *dir = AS_SOURCE_DIR "/../shared/data/bert-base-uncased";
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!as_file_exists(path)) {
        print_message("skipping: %s not found\n", path);
        skip();
    }
    as_config c;
    as_error err = {0};
    assert_int_equal(as_config_load_dir(dir, &c, &err), AS_OK);
    assert_int_equal(c.arch, ARCH_BERT);
    assert_string_equal(c.model_type, "bert");
    assert_int_equal(c.n_layer, 12);
    assert_int_equal(c.n_head, 12);
    assert_int_equal(c.d_model, 768);
    assert_int_equal(c.d_head, 64);
    assert_int_equal(c.d_ff, 3072);
    assert_int_equal(c.d_embed, 768);
    assert_int_equal(c.vocab_size, 30522);
    assert_int_equal(c.max_pos, 512);
    assert_int_equal(c.type_vocab, 2);
    assert_int_equal(c.pad_token_id, 0);
    assert_int_equal(c.causal, 0);
    assert_int_equal(c.act, ACT_GELU);
    assert_true(c.ln_eps == 1e-12f);
    assert_int_equal(c.num_labels, 0);
    assert_null(c.id2label);
    as_config_clear(&c);
}

static void test_load_dir_missing(void **state) {
    (void)state;
    as_config c;
    as_error err = {0};
    assert_int_equal(as_config_load_dir("/nonexistent-attnscope-dir", &c, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "/nonexistent-attnscope-dir/config.json"));
    assert_null(c.id2label);
}

/* A BERT config with one field's JSON text replaced (or removed when value is NULL). */
static void bert_with(char *out, size_t cap, const char *key, const char *value) {
    const char *keys[7] = {"num_hidden_layers", "num_attention_heads", "hidden_size",
                           "intermediate_size", "max_position_embeddings", "vocab_size",
                           "type_vocab_size"};
    const char *vals[7] = {"2", "4", "32", "64", "128", "1000", "2"};
    size_t n = (size_t)snprintf(out, cap, "{\"model_type\":\"bert\"");
    for (int i = 0; i < 7; i++) {
        const char *v = strcmp(keys[i], key) == 0 ? value : vals[i];
        if (v) n += (size_t)snprintf(out + n, cap - n, ",\"%s\":%s", keys[i], v);
    }
    if (!strstr(out, key) && value) n += (size_t)snprintf(out + n, cap - n, ",\"%s\":%s", key, value);
    snprintf(out + n, cap - n, "}");
}

static void test_field_errors(void **state) {
    (void)state;
    char j[1024];
    bert_with(j, sizeof j, "hidden_size", NULL);
    expect_error(j, "field 'hidden_size' missing", NULL);
    bert_with(j, sizeof j, "hidden_size", "\"768\"");
    expect_error(j, "'hidden_size'", "integer");
    bert_with(j, sizeof j, "hidden_size", "32.0");
    expect_error(j, "'hidden_size'", "integer");
    bert_with(j, sizeof j, "num_hidden_layers", "-1");
    expect_error(j, "'num_hidden_layers'", "range");
    bert_with(j, sizeof j, "num_hidden_layers", "0");
    expect_error(j, "'num_hidden_layers'", "range");
    bert_with(j, sizeof j, "num_hidden_layers", "100000000000");
    expect_error(j, "'num_hidden_layers'", "range");
    bert_with(j, sizeof j, "num_attention_heads", "5");
    expect_error(j, "'hidden_size'", "divisible");
    bert_with(j, sizeof j, "num_attention_heads", "257");
    expect_error(j, "'num_attention_heads'", "range");
    bert_with(j, sizeof j, "vocab_size", "4000001");
    expect_error(j, "'vocab_size'", "range");
    bert_with(j, sizeof j, "max_position_embeddings", "65537");
    expect_error(j, "'max_position_embeddings'", "range");
    bert_with(j, sizeof j, "hidden_size", "131072");
    expect_error(j, "'hidden_size'", "range");
    bert_with(j, sizeof j, "type_vocab_size", "-2");
    expect_error(j, "'type_vocab_size'", "range");
    bert_with(j, sizeof j, "layer_norm_eps", "\"small\"");
    expect_error(j, "'layer_norm_eps'", NULL);
    bert_with(j, sizeof j, "layer_norm_eps", "0");
    expect_error(j, "'layer_norm_eps'", "range");
    bert_with(j, sizeof j, "pad_token_id", "1000");
    expect_error(j, "'pad_token_id'", NULL);
    bert_with(j, sizeof j, "hidden_act", "7");
    expect_error(j, "'hidden_act'", "string");
    expect_error("{\"model_type\":\"xlnet\",\"d_model\":512}", "'model_type'", "xlnet");
    expect_error("{\"model_type\":3}", "'model_type'", "string");
    expect_error("[1,2]", "object", NULL);
    expect_error("{\"model_type\":\"bert\",", "invalid JSON", NULL);
    expect_error("", "invalid JSON", NULL);
}

static void test_label_errors(void **state) {
    (void)state;
    char j[1024];
    bert_with(j, sizeof j, "id2label", "{\"0\":\"a\",\"2\":\"b\"}");
    expect_error(j, "'id2label'", "'2'");
    bert_with(j, sizeof j, "id2label", "{\"0\":\"a\",\"01\":\"b\"}");
    expect_error(j, "'id2label'", "'01'");
    bert_with(j, sizeof j, "id2label", "{\"0\":\"a\",\"-1\":\"b\"}");
    expect_error(j, "'id2label'", NULL);
    bert_with(j, sizeof j, "id2label", "{\"0\":5}");
    expect_error(j, "'id2label'", "string");
    bert_with(j, sizeof j, "id2label", "[\"a\"]");
    expect_error(j, "'id2label'", "object");
    bert_with(j, sizeof j, "num_labels", "5000");
    expect_error(j, "'num_labels'", "range");
    bert_with(j, sizeof j, "id2label", "{\"0\":\"a\",\"0\":\"b\"}");
    expect_error(j, "invalid JSON", NULL); /* duplicate key */

    /* three labels in any key order */
    as_config c;
    as_error err = {0};
    bert_with(j, sizeof j, "id2label", "{\"2\":\"c\",\"0\":\"a\",\"1\":\"b\"}");
    assert_int_equal(parse(j, &c, &err), AS_OK);
    assert_int_equal(c.num_labels, 3);
    assert_string_equal(c.id2label[0], "a");
    assert_string_equal(c.id2label[1], "b");
    assert_string_equal(c.id2label[2], "c");
    as_config_clear(&c);
}


/* ---- decoder LLM family --------------------------------------------------- */

static void parse_ok(const char *json, as_config *c) {
    as_error err = {0};
    as_status rc = parse(json, c, &err);
    if (rc != AS_OK) print_error("unexpected error: %s\n", err.msg);
    assert_int_equal(rc, AS_OK);
}

static int n_sliding(const as_config *c) {
    int n = 0;
    for (int l = 0; l < c->n_layer; l++) n += c->layer_sliding[l];
    return n;
}

/* {"model_type": T} alone: every size, flag and id from the configuration class defaults */
static void test_llm_defaults(void **state) {
    (void)state;
    as_config c;
    parse_ok("{\"model_type\":\"llama\"}", &c);
    assert_int_equal(c.arch, ARCH_LLAMA);
    assert_int_equal(c.n_layer, 32);
    assert_int_equal(c.n_head, 32);
    assert_int_equal(c.n_kv_head, 32);
    assert_int_equal(c.d_model, 4096);
    assert_int_equal(c.d_head, 128);
    assert_int_equal(c.d_ff, 11008);
    assert_int_equal(c.d_embed, 4096);
    assert_int_equal(c.vocab_size, 32000);
    assert_int_equal(c.max_pos, 2048);
    assert_int_equal(c.type_vocab, 0);
    assert_int_equal(c.causal, 1);
    assert_int_equal(c.act, ACT_SILU);
    assert_true(c.ln_eps == 1e-6f);
    assert_int_equal(c.rms_norm, 1);
    assert_int_equal(c.gated_mlp, 1);
    assert_int_equal(c.norm_add_one, 0);
    assert_int_equal(c.post_norms, 0);
    assert_int_equal(c.qkv_bias, 0);
    assert_int_equal(c.o_bias, 0);
    assert_int_equal(c.mlp_bias, 0);
    assert_int_equal(c.qk_norm, 0);
    assert_int_equal(c.tie_word_embeddings, 0);
    assert_true(c.emb_scale == 0.0f);
    assert_true(c.query_scale == 0.0f);
    assert_true(c.attn_softcap == 0.0f && c.final_softcap == 0.0f);
    assert_int_equal(c.rope_dim, 128);
    assert_true(c.rope_theta == 10000.0f);
    assert_true(c.rope_local_theta == 0.0f);
    assert_int_equal(c.rope_scaling, ROPE_SCALE_NONE);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(n_sliding(&c), 0);
    assert_int_equal(c.pad_token_id, -1);
    assert_int_equal(c.bos_token_id, 1);
    assert_int_equal(c.eos_token_id, 2);
    assert_int_equal(c.num_labels, 0);
    assert_float_equal(as_attn_scale(&c, 5), 1.0 / sqrt(128.0), 1e-9);
    as_config_clear(&c);

    parse_ok("{\"model_type\":\"mistral\"}", &c);
    assert_int_equal(c.n_kv_head, 8);
    assert_int_equal(c.d_ff, 14336);
    assert_int_equal(c.max_pos, AS_MAX_POSITIONS); /* 131072, kept at the engine's limit */
    assert_int_equal(c.sliding_window, 4096);      /* MistralConfig default: every layer */
    assert_int_equal(n_sliding(&c), 32);
    assert_int_equal(c.qkv_bias, 0);
    as_config_clear(&c);

    parse_ok("{\"model_type\":\"qwen2\"}", &c);
    assert_int_equal(c.vocab_size, 151936);
    assert_int_equal(c.qkv_bias, 1); /* always, o_proj none */
    assert_int_equal(c.o_bias, 0);
    assert_int_equal(c.max_pos, 32768);
    assert_int_equal(c.sliding_window, 0); /* use_sliding_window false */
    assert_int_equal(n_sliding(&c), 0);
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.eos_token_id, -1);
    as_config_clear(&c);

    parse_ok("{\"model_type\":\"qwen3\"}", &c);
    assert_int_equal(c.d_head, 128);
    assert_int_equal(c.qk_norm, 1);
    assert_int_equal(c.qkv_bias, 0);
    as_config_clear(&c);

    parse_ok("{\"model_type\":\"gemma2\"}", &c);
    assert_int_equal(c.vocab_size, 256000);
    assert_int_equal(c.d_model, 2304);
    assert_int_equal(c.n_layer, 26);
    assert_int_equal(c.n_head, 8);
    assert_int_equal(c.n_kv_head, 4);
    assert_int_equal(c.d_head, 256);
    assert_int_equal(c.act, ACT_GELU_NEW);
    assert_int_equal(c.tie_word_embeddings, 1);
    assert_int_equal(c.norm_add_one, 1);
    assert_int_equal(c.post_norms, 1);
    assert_int_equal(c.qk_norm, 0);
    assert_true(c.attn_softcap == 50.0f);
    assert_true(c.final_softcap == 30.0f);
    assert_float_equal(c.query_scale, 1.0 / 16.0, 1e-9); /* 256 ** -0.5 */
    assert_float_equal(as_attn_scale(&c, 3), 1.0 / 16.0, 1e-9);
    assert_float_equal(c.emb_scale, sqrt(2304.0), 1e-4);
    assert_int_equal(c.sliding_window, 4096);
    for (int l = 0; l < 26; l++) assert_int_equal(c.layer_sliding[l], l % 2 == 0);
    assert_int_equal(c.pad_token_id, 0);
    assert_int_equal(c.bos_token_id, 2);
    assert_int_equal(c.eos_token_id, 1);
    assert_true(c.rope_local_theta == 0.0f);
    as_config_clear(&c);

    parse_ok("{\"model_type\":\"gemma3_text\"}", &c);
    assert_int_equal(c.vocab_size, 262208);
    assert_int_equal(c.qk_norm, 1);
    assert_int_equal(c.norm_add_one, 1);
    assert_int_equal(c.post_norms, 1);
    assert_true(c.attn_softcap == 0.0f && c.final_softcap == 0.0f);
    assert_true(c.rope_theta == 1000000.0f);
    assert_true(c.rope_local_theta == 10000.0f);
    assert_int_equal(c.max_pos, AS_MAX_POSITIONS);
    for (int l = 0; l < 26; l++) assert_int_equal(c.layer_sliding[l], (l + 1) % 6 != 0);
    as_config_clear(&c);

    parse_ok("{\"model_type\":\"phi3\"}", &c);
    assert_int_equal(c.vocab_size, 32064);
    assert_int_equal(c.d_ff, 8192);
    assert_true(c.ln_eps == 1e-5f);
    assert_int_equal(c.pad_token_id, 32000);
    assert_int_equal(c.eos_token_id, 32000);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.rope_dim, 96);
    as_config_clear(&c);
}

/* Shapes and options of published checkpoints' config.json */
static void test_llm_published(void **state) {
    (void)state;
    as_config c;
    /* Llama 3.1 8B: llama3 RoPE scaling, eos list, 131072 positions */
    parse_ok("{\"architectures\":[\"LlamaForCausalLM\"],\"attention_bias\":false,\"bos_token_id\":128000,"
             "\"eos_token_id\":[128001,128008,128009],\"hidden_act\":\"silu\",\"hidden_size\":4096,"
             "\"intermediate_size\":14336,\"max_position_embeddings\":131072,\"mlp_bias\":false,"
             "\"model_type\":\"llama\",\"num_attention_heads\":32,\"num_hidden_layers\":32,"
             "\"num_key_value_heads\":8,\"pretraining_tp\":1,\"rms_norm_eps\":1e-05,"
             "\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
             "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
             "\"rope_theta\":500000.0,\"tie_word_embeddings\":false,\"vocab_size\":128256}",
             &c);
    assert_int_equal(c.n_kv_head, 8);
    assert_int_equal(c.bos_token_id, 128000);
    assert_int_equal(c.eos_token_id, 128001);
    assert_int_equal(c.rope_scaling, ROPE_SCALE_LLAMA3);
    assert_true(c.rope_factor == 8.0f);
    assert_true(c.rope_low_freq_factor == 1.0f);
    assert_true(c.rope_high_freq_factor == 4.0f);
    assert_int_equal(c.rope_orig_max_pos, 8192);
    assert_true(c.rope_theta == 500000.0f);
    assert_true(c.ln_eps == 1e-5f);
    as_config_clear(&c);

    /* Qwen2.5: sliding_window 131072 present but use_sliding_window false */
    parse_ok("{\"architectures\":[\"Qwen2ForCausalLM\"],\"bos_token_id\":151643,\"eos_token_id\":151645,"
             "\"hidden_act\":\"silu\",\"hidden_size\":896,\"intermediate_size\":4864,"
             "\"max_position_embeddings\":32768,\"max_window_layers\":21,\"model_type\":\"qwen2\","
             "\"num_attention_heads\":14,\"num_hidden_layers\":24,\"num_key_value_heads\":2,"
             "\"rms_norm_eps\":1e-06,\"rope_theta\":1000000.0,\"sliding_window\":131072,"
             "\"tie_word_embeddings\":true,\"use_sliding_window\":false,\"vocab_size\":151936}",
             &c);
    assert_int_equal(c.d_head, 64);
    assert_int_equal(c.n_kv_head, 2);
    assert_int_equal(c.tie_word_embeddings, 1);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(n_sliding(&c), 0);
    as_config_clear(&c);
    /* ... and with use_sliding_window: layers >= max_window_layers slide */
    parse_ok("{\"model_type\":\"qwen2\",\"num_hidden_layers\":5,\"use_sliding_window\":true,"
             "\"sliding_window\":7,\"max_window_layers\":3}",
             &c);
    assert_int_equal(c.sliding_window, 7);
    for (int l = 0; l < 5; l++) assert_int_equal(c.layer_sliding[l], l >= 3);
    as_config_clear(&c);
    /* layer_types wins over max_window_layers */
    parse_ok("{\"model_type\":\"qwen3\",\"num_hidden_layers\":3,\"use_sliding_window\":true,"
             "\"sliding_window\":5,\"layer_types\":[\"sliding_attention\",\"full_attention\","
             "\"sliding_attention\"]}",
             &c);
    assert_int_equal(c.layer_sliding[0], 1);
    assert_int_equal(c.layer_sliding[1], 0);
    assert_int_equal(c.layer_sliding[2], 1);
    as_config_clear(&c);

    /* Qwen3-0.6B: explicit head_dim 128 != 1024 / 16 */
    parse_ok("{\"architectures\":[\"Qwen3ForCausalLM\"],\"attention_bias\":false,\"head_dim\":128,"
             "\"hidden_size\":1024,\"intermediate_size\":3072,\"max_position_embeddings\":40960,"
             "\"model_type\":\"qwen3\",\"num_attention_heads\":16,\"num_hidden_layers\":28,"
             "\"num_key_value_heads\":8,\"rope_scaling\":null,\"rope_theta\":1000000,"
             "\"sliding_window\":null,\"tie_word_embeddings\":true,\"use_sliding_window\":false,"
             "\"vocab_size\":151936}",
             &c);
    assert_int_equal(c.d_head, 128);
    assert_int_equal(c.rope_dim, 128);
    assert_true(c.rope_theta == 1000000.0f);
    assert_float_equal(as_attn_scale(&c, 0), 1.0 / sqrt(128.0), 1e-9);
    as_config_clear(&c);

    /* Gemma 3 4B (multimodal): the text model nested in text_config */
    parse_ok("{\"architectures\":[\"Gemma3ForConditionalGeneration\"],\"model_type\":\"gemma3\","
             "\"boi_token_index\":255999,\"text_config\":{\"hidden_size\":2560,"
             "\"intermediate_size\":10240,\"model_type\":\"gemma3_text\",\"num_hidden_layers\":34,"
             "\"rope_scaling\":{\"factor\":8.0,\"rope_type\":\"linear\"},\"sliding_window\":1024},"
             "\"vision_config\":{\"hidden_size\":1152}}",
             &c);
    assert_string_equal(c.model_type, "gemma3");
    assert_int_equal(c.d_model, 2560);
    assert_int_equal(c.n_layer, 34);
    assert_int_equal(c.d_head, 256);
    assert_int_equal(c.n_head, 8);
    assert_int_equal(c.sliding_window, 1024);
    assert_int_equal(c.rope_scaling, ROPE_SCALE_LINEAR);
    assert_true(c.rope_factor == 8.0f);
    assert_true(c.rope_local_theta == 10000.0f);
    assert_int_equal(c.layer_sliding[5], 0);
    assert_int_equal(c.layer_sliding[6], 1);
    as_config_clear(&c);
    /* transformers 5 form: rope_parameters per layer type */
    parse_ok("{\"model_type\":\"gemma3_text\",\"num_hidden_layers\":4,\"sliding_window_pattern\":2,"
             "\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"linear\",\"factor\":4.0,"
             "\"rope_theta\":500000.0},\"sliding_attention\":{\"rope_type\":\"default\","
             "\"rope_theta\":12345.0}}}",
             &c);
    assert_int_equal(c.rope_scaling, ROPE_SCALE_LINEAR);
    assert_true(c.rope_factor == 4.0f);
    assert_true(c.rope_theta == 500000.0f);
    assert_true(c.rope_local_theta == 12345.0f);
    for (int l = 0; l < 4; l++) assert_int_equal(c.layer_sliding[l], l % 2 == 0);
    as_config_clear(&c);

    /* Gemma 2 2B: soft-capping, query_pre_attn_scalar; null caps turn them off */
    parse_ok("{\"model_type\":\"gemma2\",\"head_dim\":256,\"hidden_size\":2304,"
             "\"query_pre_attn_scalar\":224,\"attn_logit_softcapping\":null,"
             "\"final_logit_softcapping\":30.0,\"hidden_act\":\"gelu_pytorch_tanh\","
             "\"hidden_activation\":\"gelu_pytorch_tanh\"}",
             &c);
    assert_float_equal(c.query_scale, 1.0 / sqrt(224.0), 1e-8);
    assert_true(c.attn_softcap == 0.0f);
    assert_true(c.final_softcap == 30.0f);
    as_config_clear(&c);

    /* Phi-3 mini 4k: sliding_window 2047 on every layer; partial rotary */
    parse_ok("{\"architectures\":[\"Phi3ForCausalLM\"],\"hidden_size\":3072,\"model_type\":\"phi3\","
             "\"num_hidden_layers\":32,\"original_max_position_embeddings\":4096,"
             "\"rope_scaling\":null,\"sliding_window\":2047,\"pad_token_id\":32000}",
             &c);
    assert_int_equal(c.sliding_window, 2047);
    assert_int_equal(n_sliding(&c), 32);
    as_config_clear(&c);
    parse_ok("{\"model_type\":\"phi3\",\"hidden_size\":64,\"num_attention_heads\":4,"
             "\"partial_rotary_factor\":0.5,\"vocab_size\":100,\"pad_token_id\":0}",
             &c);
    assert_int_equal(c.d_head, 16);
    assert_int_equal(c.rope_dim, 8);
    as_config_clear(&c);

    /* Mistral 7B v0.2: sliding_window null = none */
    parse_ok("{\"model_type\":\"mistral\",\"sliding_window\":null,\"rope_theta\":1000000.0}", &c);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(n_sliding(&c), 0);
    as_config_clear(&c);
}

static void test_llm_arch_and_labels(void **state) {
    (void)state;
    as_config c;
    parse_ok("{\"architectures\":[\"Qwen2ForSequenceClassification\"],\"hidden_size\":64,"
             "\"num_attention_heads\":4,\"num_key_value_heads\":4,\"vocab_size\":100,\"pad_token_id\":3,"
             "\"id2label\":{\"0\":\"neg\",\"1\":\"pos\"}}",
             &c);
    assert_string_equal(c.model_type, "qwen2");
    assert_int_equal(c.arch, ARCH_LLAMA);
    assert_int_equal(c.num_labels, 2);
    assert_string_equal(c.id2label[1], "pos");
    assert_int_equal(c.pad_token_id, 3);
    as_config_clear(&c);
    const char *cls[] = {"LlamaForCausalLM", "MistralForCausalLM", "Gemma2ForCausalLM",
                         "Gemma3ForCausalLM", "Phi3ForCausalLM", "Qwen3Model"};
    const char *types[] = {"llama", "mistral", "gemma2", "gemma3_text", "phi3", "qwen3"};
    for (int i = 0; i < 6; i++) {
        char j[256];
        snprintf(j, sizeof j, "{\"architectures\":[\"%s\"],\"num_labels\":3,\"pad_token_id\":0}", cls[i]);
        parse_ok(j, &c);
        assert_string_equal(c.model_type, types[i]);
        assert_int_equal(c.num_labels, 3);
        as_config_clear(&c);
    }
    /* other layouts whose class names start the same */
    expect_error("{\"architectures\":[\"Qwen2MoeForCausalLM\"]}", "'model_type' missing", NULL);
    expect_error("{\"architectures\":[\"Phi3VForCausalLM\"]}", "'model_type' missing", NULL);
    expect_error("{\"model_type\":\"llama4\"}", "'model_type' = 'llama4' is not supported", "qwen3");
}

/* {"model_type":T,"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,
 *  "num_hidden_layers":3,"vocab_size":100,"pad_token_id":0 EXTRA} */
static void llm_with(char *out, size_t cap, const char *type, const char *extra) {
    snprintf(out, cap,
             "{\"model_type\":\"%s\",\"hidden_size\":64,\"num_attention_heads\":4,"
             "\"num_key_value_heads\":2,\"num_hidden_layers\":3,\"vocab_size\":100,\"pad_token_id\":0%s}",
             type, extra);
}

static void test_llm_rope(void **state) {
    (void)state;
    as_config c;
    char j[1024];
    /* yarn: attention factor computed from factor (0.1 ln s + 1), betas default 32 / 1 */
    llm_with(j, sizeof j, "qwen2",
             ",\"max_position_embeddings\":131072,\"rope_scaling\":{\"type\":\"yarn\",\"factor\":4.0,"
             "\"original_max_position_embeddings\":32768}");
    parse_ok(j, &c);
    assert_int_equal(c.rope_scaling, ROPE_SCALE_YARN);
    assert_true(c.rope_factor == 4.0f);
    assert_int_equal(c.rope_orig_max_pos, 32768);
    assert_true(c.yarn_beta_fast == 32.0f && c.yarn_beta_slow == 1.0f);
    assert_float_equal(c.rope_attn_factor, 0.1 * log(4.0) + 1.0, 1e-6);
    as_config_clear(&c);
    /* explicit attention_factor and betas; mscale / mscale_all_dim ratio */
    llm_with(j, sizeof j, "llama",
             ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,\"beta_fast\":16,\"beta_slow\":2,"
             "\"attention_factor\":1.5}");
    parse_ok(j, &c);
    assert_true(c.rope_attn_factor == 1.5f && c.yarn_beta_fast == 16.0f && c.yarn_beta_slow == 2.0f);
    assert_int_equal(c.rope_orig_max_pos, 2048); /* default: max_position_embeddings */
    assert_int_equal(c.max_pos, 4096);           /* inputs up to original x factor */
    as_config_clear(&c);
    /* the input limit with llama3 / yarn: the larger of max_position_embeddings and
       original x factor, capped (Qwen2.5 enables YaRN keeping max_position_embeddings) */
    static const struct { const char *type, *extra; int max_pos, orig, want; double factor; } lim[] = {
        {"yarn", "", 8000, 8000, 32000, 4.0},
        {"yarn", "", 32768, 32768, AS_MAX_POSITIONS, 4.0},
        {"llama3", ",\"low_freq_factor\":1.0,\"high_freq_factor\":4.0", 20000, 8192, 20000, 2.0},
        {"llama3", ",\"low_freq_factor\":1.0,\"high_freq_factor\":4.0", 1000, 1000, 8000, 8.0},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        char extra[512];
        snprintf(extra, sizeof extra,
                 ",\"max_position_embeddings\":%d,\"rope_scaling\":{\"rope_type\":\"%s\",\"factor\":%g,"
                 "\"original_max_position_embeddings\":%d%s}",
                 lim[i].max_pos, lim[i].type, lim[i].factor, lim[i].orig, lim[i].extra);
        llm_with(j, sizeof j, "qwen2", extra);
        parse_ok(j, &c);
        assert_int_equal(c.max_pos, lim[i].want);
        as_config_clear(&c);
    }
    llm_with(j, sizeof j, "llama",
             ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":40,\"mscale\":0.707,"
             "\"mscale_all_dim\":1.0,\"original_max_position_embeddings\":1024}");
    parse_ok(j, &c);
    assert_float_equal(c.rope_attn_factor, (0.1 * 0.707 * log(40.0) + 1) / (0.1 * log(40.0) + 1), 1e-6);
    as_config_clear(&c);
    /* factor null: max_position_embeddings / original */
    llm_with(j, sizeof j, "llama",
             ",\"max_position_embeddings\":8192,\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":null,"
             "\"original_max_position_embeddings\":2048}");
    parse_ok(j, &c);
    assert_true(c.rope_factor == 4.0f);
    as_config_clear(&c);
    /* transformers 5: rope_parameters with rope_theta inside; "default" = none */
    llm_with(j, sizeof j, "mistral", ",\"rope_parameters\":{\"rope_type\":\"default\",\"rope_theta\":250000.0}");
    parse_ok(j, &c);
    assert_int_equal(c.rope_scaling, ROPE_SCALE_NONE);
    assert_true(c.rope_theta == 250000.0f);
    as_config_clear(&c);
    /* gemma3 linear scaling, old form: global layers scaled, local base separate */
    llm_with(j, sizeof j, "gemma3_text",
             ",\"head_dim\":12,\"rope_local_base_freq\":500.0,\"rope_theta\":20000.0,"
             "\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":2.0}");
    parse_ok(j, &c);
    assert_int_equal(c.d_head, 12);
    assert_true(c.rope_local_theta == 500.0f && c.rope_theta == 20000.0f && c.rope_factor == 2.0f);
    as_config_clear(&c);
    /* phi3: the top-level original_max_position_embeddings wins for yarn */
    llm_with(j, sizeof j, "phi3",
             ",\"original_max_position_embeddings\":512,\"rope_scaling\":{\"rope_type\":\"yarn\","
             "\"factor\":2.0,\"original_max_position_embeddings\":1024}");
    parse_ok(j, &c);
    assert_int_equal(c.rope_orig_max_pos, 512);
    as_config_clear(&c);

    /* dynamic NTK: max_position_embeddings as written is where the base starts to grow, and
       inputs may run past it */
    llm_with(j, sizeof j, "llama",
             ",\"max_position_embeddings\":4096,\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2.0}");
    parse_ok(j, &c);
    assert_int_equal(c.rope_scaling, ROPE_SCALE_DYNAMIC);
    assert_true(c.rope_factor == 2.0f);
    assert_int_equal(c.rope_orig_max_pos, 4096);
    assert_int_equal(c.max_pos, AS_MAX_POSITIONS);
    as_config_clear(&c);
    /* longrope: Phi-3's top-level original length, factor = max / original, attention factor
       sqrt(1 + ln factor / ln original); "su" is Phi-3's earlier name */
    static const char *const lr_names[] = {"\"rope_type\":\"longrope\"", "\"type\":\"su\"", "\"type\":\"yarn\""};
    const char *lists = "\"short_factor\":[1,1,1,1,1,1,1,1.5],\"long_factor\":[1,2,3,4,5,6,7,8.5]";
    for (int i = 0; i < 3; i++) {
        char r[512];
        snprintf(r, sizeof r,
                 ",\"max_position_embeddings\":131072,\"original_max_position_embeddings\":4096,"
                 "\"rope_scaling\":{%s,%s}",
                 lr_names[i], lists);
        llm_with(j, sizeof j, "phi3", r);
        parse_ok(j, &c);
        assert_int_equal(c.rope_scaling, ROPE_SCALE_LONGROPE);
        assert_int_equal(c.rope_orig_max_pos, 4096);
        assert_true(c.rope_factor == 32.0f);
        assert_float_equal(c.rope_attn_factor, sqrt(1.0 + log(32.0) / log(4096.0)), 1e-6);
        assert_true(c.rope_short_factor[7] == 1.5f && c.rope_long_factor[0] == 1.0f && c.rope_long_factor[7] == 8.5f);
        as_config_clear(&c);
    }
    /* longrope elsewhere (the generic rope code): explicit factor and attention_factor */
    llm_with(j, sizeof j, "llama",
             ",\"rope_scaling\":{\"rope_type\":\"longrope\",\"factor\":4,\"attention_factor\":1.25,"
             "\"original_max_position_embeddings\":512,\"short_factor\":[1,1,1,1,1,1,1,1],"
             "\"long_factor\":[2,2,2,2,2,2,2,2]}");
    parse_ok(j, &c);
    assert_true(c.rope_factor == 4.0f && c.rope_attn_factor == 1.25f);
    assert_int_equal(c.rope_orig_max_pos, 512);
    as_config_clear(&c);
    llm_with(j, sizeof j, "phi3", ",\"rope_scaling\":{\"rope_type\":\"longrope\",\"short_factor\":[1],"
             "\"long_factor\":[1]}");
    expect_error(j, "'rope_scaling.short_factor' must be a list of 8 numbers", "got an array of 1");
    llm_with(j, sizeof j, "phi3", ",\"rope_scaling\":{\"type\":\"su\",\"short_factor\":[1,1,1,1,1,1,1,1]}");
    expect_error(j, "'rope_scaling.long_factor' missing", NULL);
    llm_with(j, sizeof j, "phi3",
             ",\"rope_scaling\":{\"type\":\"su\",\"short_factor\":[1,1,1,1,1,1,1,1],\"long_factor\":[1,1,1,0,1,1,1,1]}");
    expect_error(j, "'rope_scaling.long_factor' entry 3 is not a number", NULL);
    llm_with(j, sizeof j, "phi3",
             ",\"rope_scaling\":{\"type\":\"su\",\"short_factor\":[1,1,1,1,1,1,1,1],\"long_factor\":\"x\"}");
    expect_error(j, "'rope_scaling.long_factor' must be a list", "got a string");
    /* dynamic needs more than two rotated dimensions (64 / 32 heads: 2) */
    snprintf(j, sizeof j,
             "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":32,\"num_hidden_layers\":1,"
             "\"vocab_size\":100,\"rope_scaling\":{\"rope_type\":\"dynamic\",\"factor\":2}}");
    expect_error(j, "'rope_scaling.rope_type' = 'dynamic' needs more than 2 rotated dimensions", NULL);

    /* refused by name ("su" means longrope to Phi-3 only) */
    const char *refused[] = {"su", "ntk-by-parts", "proportional"};
    for (int i = 0; i < 3; i++) {
        char r[256];
        snprintf(r, sizeof r, ",\"rope_scaling\":{\"type\":\"%s\",\"factor\":2.0}", refused[i]);
        llm_with(j, sizeof j, "llama", r);
        expect_error(j, "'rope_scaling.type'", refused[i]);
    }
    llm_with(j, sizeof j, "llama", ",\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":2,\"truncate\":false}");
    expect_error(j, "'rope_scaling.truncate' = false", NULL);
    llm_with(j, sizeof j, "gemma3_text",
             ",\"head_dim\":16,\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"default\"},"
             "\"sliding_attention\":{\"rope_type\":\"linear\",\"factor\":2}}");
    expect_error(j, "'rope_parameters.sliding_attention.rope_type' = 'linear'", NULL);
    llm_with(j, sizeof j, "llama", ",\"rope_parameters\":{\"full_attention\":{\"rope_type\":\"default\"}}");
    expect_error(j, "'rope_parameters' per layer type", NULL);
    llm_with(j, sizeof j, "llama", ",\"partial_rotary_factor\":0.5");
    expect_error(j, "'partial_rotary_factor' = 0.5 is not supported for llama", NULL);
    /* bad values */
    llm_with(j, sizeof j, "llama", ",\"rope_scaling\":{\"rope_type\":\"linear\"}");
    expect_error(j, "'rope_scaling.factor' missing", NULL);
    llm_with(j, sizeof j, "llama", ",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":\"2\"}");
    expect_error(j, "'rope_scaling.factor' must be a number", NULL);
    llm_with(j, sizeof j, "llama", ",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":-2}");
    expect_error(j, "'rope_scaling.factor'", "range");
    llm_with(j, sizeof j, "llama",
             ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"high_freq_factor\":4}");
    expect_error(j, "'rope_scaling.low_freq_factor' missing", NULL);
    llm_with(j, sizeof j, "llama",
             ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":4,"
             "\"high_freq_factor\":4}");
    expect_error(j, "'rope_scaling.high_freq_factor' = 4 is not above", NULL);
    llm_with(j, sizeof j, "llama",
             ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,\"low_freq_factor\":1,"
             "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192.5}");
    expect_error(j, "'rope_scaling.original_max_position_embeddings' = 8192.5 is not an integer", NULL);
    llm_with(j, sizeof j, "llama", ",\"rope_scaling\":[1]");
    expect_error(j, "'rope_scaling' must be an object", NULL);
    llm_with(j, sizeof j, "llama", ",\"rope_theta\":1");
    expect_error(j, "'rope_theta'", "range");
    llm_with(j, sizeof j, "llama", ",\"rope_theta\":\"1e4\"");
    expect_error(j, "'rope_theta' must be a number", NULL);
    llm_with(j, sizeof j, "phi3", ",\"partial_rotary_factor\":0.3"); /* 16 * 0.3 = 4.8 -> 4: fine */
    parse_ok(j, &c);
    assert_int_equal(c.rope_dim, 4);
    as_config_clear(&c);
    llm_with(j, sizeof j, "phi3", ",\"partial_rotary_factor\":0.2"); /* 16 * 0.2 = 3: odd */
    expect_error(j, "rotary dimension", "even");
    llm_with(j, sizeof j, "phi3", ",\"partial_rotary_factor\":1.5");
    expect_error(j, "'partial_rotary_factor'", "range");
    llm_with(j, sizeof j, "llama", ",\"head_dim\":15");
    expect_error(j, "rotary dimension", "even");
}

static void test_llm_refusals_and_bad_values(void **state) {
    (void)state;
    char j[1024];
    as_config c;
    /* options a family's modeling code does not have */
    llm_with(j, sizeof j, "mistral", ",\"mlp_bias\":true");
    expect_error(j, "'mlp_bias' = true is not supported", NULL);
    llm_with(j, sizeof j, "phi3", ",\"attention_bias\":true");
    expect_error(j, "'attention_bias' = true is not supported", NULL);
    llm_with(j, sizeof j, "gemma3_text", ",\"head_dim\":16,\"use_bidirectional_attention\":true");
    expect_error(j, "'use_bidirectional_attention' = true is not supported", NULL);
    llm_with(j, sizeof j, "qwen3", ",\"use_sliding_window\":true,\"layer_types\":[\"full_attention\","
                                   "\"chunked_attention\",\"full_attention\"]");
    expect_error(j, "'layer_types' entry 1 = 'chunked_attention' is not supported", NULL);
    llm_with(j, sizeof j, "gemma2", ",\"head_dim\":16,\"layer_types\":[\"full_attention\"]");
    expect_error(j, "'layer_types' has 1 entries", NULL);
    expect_error("{\"model_type\":\"gemma3\"}", "'text_config' missing", NULL);
    expect_error("{\"model_type\":\"gemma3\",\"text_config\":{\"model_type\":\"siglip\"}}",
                 "'text_config.model_type' = 'siglip'", NULL);
    expect_error("{\"model_type\":\"gemma3\",\"text_config\":{\"num_hidden_layers\":0}}",
                 "'text_config.num_hidden_layers'", "range");
    /* honoured: llama biases */
    llm_with(j, sizeof j, "llama", ",\"attention_bias\":true,\"mlp_bias\":true");
    parse_ok(j, &c);
    assert_int_equal(c.qkv_bias, 1);
    assert_int_equal(c.o_bias, 1);
    assert_int_equal(c.mlp_bias, 1);
    as_config_clear(&c);
    /* bad values of each kind */
    expect_error("{\"model_type\":\"llama\",\"num_key_value_heads\":3}",
                 "'num_key_value_heads' (3) does not divide num_attention_heads (32)", NULL);
    expect_error("{\"model_type\":\"llama\",\"num_key_value_heads\":0}", "'num_key_value_heads'", "range");
    expect_error("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":5}",
                 "'hidden_size' (64) is not divisible by num_attention_heads (5)", NULL);
    parse_ok("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":5,\"head_dim\":8}", &c);
    assert_int_equal(c.d_head, 8);
    as_config_clear(&c);
    llm_with(j, sizeof j, "llama", ",\"head_dim\":\"8\"");
    expect_error(j, "'head_dim' must be an integer", NULL);
    expect_error("{\"model_type\":\"llama\",\"num_hidden_layers\":257}", "'num_hidden_layers'", "range");
    expect_error("{\"model_type\":\"llama\",\"intermediate_size\":0}", "'intermediate_size'", "range");
    expect_error("{\"model_type\":\"llama\",\"vocab_size\":4000001}", "'vocab_size'", "range");
    expect_error("{\"model_type\":\"llama\",\"max_position_embeddings\":100000000}",
                 "'max_position_embeddings'", "range");
    expect_error("{\"model_type\":\"llama\",\"rms_norm_eps\":0}", "'rms_norm_eps'", "range");
    expect_error("{\"model_type\":\"llama\",\"hidden_act\":\"mish\"}", "'hidden_act' = 'mish'", "silu");
    expect_error("{\"model_type\":\"gemma2\",\"hidden_activation\":5}", "'hidden_activation'", "string");
    expect_error("{\"model_type\":\"llama\",\"tie_word_embeddings\":1}", "'tie_word_embeddings'", "boolean");
    expect_error("{\"model_type\":\"llama\",\"eos_token_id\":[\"x\"]}", "'eos_token_id' must list integers",
                 NULL);
    expect_error("{\"model_type\":\"llama\",\"eos_token_id\":-5}", "'eos_token_id'", "range");
    expect_error("{\"model_type\":\"llama\",\"vocab_size\":100,\"pad_token_id\":100}", "'pad_token_id'",
                 NULL);
    expect_error("{\"model_type\":\"mistral\",\"sliding_window\":0}", "'sliding_window'", "range");
    expect_error("{\"model_type\":\"gemma3_text\",\"sliding_window_pattern\":0}",
                 "'sliding_window_pattern'", "range");
    expect_error("{\"model_type\":\"qwen2\",\"use_sliding_window\":true,\"max_window_layers\":-1}",
                 "'max_window_layers'", "range");
    expect_error("{\"model_type\":\"gemma2\",\"query_pre_attn_scalar\":0}", "'query_pre_attn_scalar'",
                 "range");
    expect_error("{\"model_type\":\"gemma2\",\"attn_logit_softcapping\":-1}", "'attn_logit_softcapping'",
                 "range");
    expect_error("{\"model_type\":\"gemma2\",\"final_logit_softcapping\":\"30\"}",
                 "'final_logit_softcapping' must be a number", NULL);
    expect_error("{\"model_type\":\"llama\",\"id2label\":{\"1\":\"a\"}}", "'id2label'", NULL);
}

/* The config.json of every decoder fixture written by tests/ref/gen_llama.py, read as the
 * generator's torch forward reads it (the parity test runs the forward on these). */
static void test_llm_fixture_configs(void **state) {
    (void)state;
    static const struct {
        const char *name;
        int L, kv, Dh, rope_dim, tie, qkv_bias, o_bias, mlp_bias, qk_norm, gemma, window;
        const char *sliding; /* per layer */
        as_rope_scale scaling;
    } fx[] = {
        {"llama", 2, 2, 8, 8, 0, 0, 0, 0, 0, 0, 0, "00", ROPE_SCALE_NONE},
        {"llama3_scaled", 2, 2, 8, 8, 1, 1, 1, 1, 0, 0, 0, "00", ROPE_SCALE_LLAMA3},
        {"mistral_swa", 2, 2, 8, 8, 0, 0, 0, 0, 0, 0, 5, "11", ROPE_SCALE_NONE},
        {"qwen2_noprefix", 2, 2, 8, 8, 1, 1, 0, 0, 0, 0, 6, "01", ROPE_SCALE_NONE},
        {"qwen3", 2, 1, 10, 10, 0, 0, 0, 0, 1, 0, 0, "00", ROPE_SCALE_NONE},
        {"gemma2", 2, 2, 10, 10, 1, 0, 0, 0, 0, 1, 5, "10", ROPE_SCALE_NONE},
        {"gemma3", 3, 2, 10, 10, 1, 0, 0, 0, 1, 1, 4, "110", ROPE_SCALE_LINEAR},
        {"phi3", 2, 2, 8, 4, 0, 0, 0, 0, 0, 0, 8, "11", ROPE_SCALE_NONE},
        {"yarn", 2, 2, 8, 8, 0, 0, 0, 0, 0, 0, 0, "00", ROPE_SCALE_YARN},
        {"dynamic", 2, 2, 8, 8, 0, 0, 0, 0, 0, 0, 0, "00", ROPE_SCALE_DYNAMIC},
        {"longrope", 2, 4, 8, 6, 0, 0, 0, 0, 0, 0, 0, "00", ROPE_SCALE_LONGROPE},
        {"llama_bf16", 2, 2, 8, 8, 0, 0, 0, 0, 0, 0, 0, "00", ROPE_SCALE_NONE},
        {"llama_cls", 2, 2, 8, 8, 0, 0, 0, 0, 0, 0, 0, "00", ROPE_SCALE_NONE},
    };
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/llama/config.json", AS_SOURCE_DIR);
    if (!as_file_exists(dir)) {
        print_message("skipping: %s not found\n", dir);
        skip();
    }
    for (size_t i = 0; i < sizeof fx / sizeof fx[0]; i++) {
        snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/%s", AS_SOURCE_DIR, fx[i].name);
        as_config c;
        as_error err = {0};
        as_status rc = as_config_load_dir(dir, &c, &err);
        if (rc != AS_OK) print_error("%s: %s\n", fx[i].name, err.msg);
        assert_int_equal(rc, AS_OK);
        assert_int_equal(c.arch, ARCH_LLAMA);
        assert_int_equal(c.n_layer, fx[i].L);
        assert_int_equal(c.n_head, strcmp(fx[i].name, "dynamic") == 0 ? 6 : 4);
        assert_int_equal(c.n_kv_head, fx[i].kv);
        assert_int_equal(c.d_model, 32);
        assert_int_equal(c.d_head, fx[i].Dh);
        assert_int_equal(c.d_ff, 20);
        assert_int_equal(c.vocab_size, 53);
        assert_int_equal(c.rope_dim, fx[i].rope_dim);
        assert_int_equal(c.tie_word_embeddings, fx[i].tie);
        assert_int_equal(c.qkv_bias, fx[i].qkv_bias);
        assert_int_equal(c.o_bias, fx[i].o_bias);
        assert_int_equal(c.mlp_bias, fx[i].mlp_bias);
        assert_int_equal(c.qk_norm, fx[i].qk_norm);
        assert_int_equal(c.norm_add_one, fx[i].gemma);
        assert_int_equal(c.post_norms, fx[i].gemma);
        assert_int_equal(c.act, fx[i].gemma ? ACT_GELU_NEW : ACT_SILU);
        assert_int_equal(c.sliding_window, fx[i].window);
        for (int l = 0; l < c.n_layer; l++) assert_int_equal(c.layer_sliding[l], fx[i].sliding[l] == '1');
        assert_int_equal(c.rope_scaling, fx[i].scaling);
        as_config_clear(&c);
    }
    /* the values beyond the table */
    as_config c;
    as_error err = {0};
    snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/gemma2", AS_SOURCE_DIR);
    assert_int_equal(as_config_load_dir(dir, &c, &err), AS_OK);
    assert_float_equal(as_attn_scale(&c, 0), 1.0 / sqrt(20.0), 1e-8);
    assert_true(c.attn_softcap == 3.0f && c.final_softcap == 4.0f);
    assert_float_equal(c.emb_scale, sqrt(32.0), 1e-6);
    as_config_clear(&c);
    snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/gemma3", AS_SOURCE_DIR);
    assert_int_equal(as_config_load_dir(dir, &c, &err), AS_OK);
    assert_true(c.rope_theta == 50000.0f && c.rope_local_theta == 100.0f && c.rope_factor == 2.0f);
    assert_float_equal(as_attn_scale(&c, 2), 0.25, 1e-8);
    as_config_clear(&c);
    snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/llama3_scaled", AS_SOURCE_DIR);
    assert_int_equal(as_config_load_dir(dir, &c, &err), AS_OK);
    assert_true(c.rope_factor == 8.0f && c.rope_low_freq_factor == 1.0f && c.rope_high_freq_factor == 4.0f);
    assert_int_equal(c.rope_orig_max_pos, 64);
    assert_int_equal(c.eos_token_id, 2);
    as_config_clear(&c);
    snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/yarn", AS_SOURCE_DIR);
    assert_int_equal(as_config_load_dir(dir, &c, &err), AS_OK);
    assert_true(c.rope_factor == 4.0f && c.yarn_beta_fast == 32.0f && c.yarn_beta_slow == 1.0f);
    assert_int_equal(c.rope_orig_max_pos, 64);
    assert_float_equal(c.rope_attn_factor, 0.1 * log(4.0) + 1.0, 1e-6);
    as_config_clear(&c);
    snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/phi3", AS_SOURCE_DIR);
    assert_int_equal(as_config_load_dir(dir, &c, &err), AS_OK);
    assert_true(c.ln_eps == 1e-5f);
    as_config_clear(&c);
    snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/llama_cls", AS_SOURCE_DIR);
    assert_int_equal(as_config_load_dir(dir, &c, &err), AS_OK);
    assert_int_equal(c.num_labels, 3);
    assert_string_equal(c.id2label[2], "positive");
    assert_int_equal(c.pad_token_id, 0);
    as_config_clear(&c);
}

/* Generation settings: the eos_token_id list, forced_bos / forced_eos with transformers'
 * per-family defaults (BartConfig 2, MarianConfig 0, T5 none), null = none, bad ids refused */
static void test_generation_settings(void **state) {
    (void)state;
    as_config c;
    parse_ok("{\"model_type\":\"llama\",\"vocab_size\":100,\"eos_token_id\":[5,7,300]}", &c);
    assert_int_equal(c.eos_token_id, 5);
    assert_int_equal(c.n_eos_ids, 2); /* 300 is past the vocabulary: no step can pick it */
    assert_int_equal(c.eos_ids[0], 5);
    assert_int_equal(c.eos_ids[1], 7);
    assert_int_equal(c.forced_bos_token_id, -1);
    assert_int_equal(c.forced_eos_token_id, -1);
    as_config_clear(&c);
    parse_ok("{\"model_type\":\"bart\",\"vocab_size\":50}", &c);
    assert_int_equal(c.n_eos_ids, 1);
    assert_int_equal(c.eos_ids[0], 2);
    assert_int_equal(c.forced_eos_token_id, 2);
    assert_int_equal(c.forced_bos_token_id, -1);
    as_config_clear(&c);
    parse_ok("{\"model_type\":\"marian\",\"vocab_size\":50,\"pad_token_id\":49,\"decoder_start_token_id\":49}", &c);
    assert_int_equal(c.forced_eos_token_id, 0);
    as_config_clear(&c);
    parse_ok("{\"model_type\":\"bart\",\"vocab_size\":50,\"forced_eos_token_id\":null,\"forced_bos_token_id\":0}", &c);
    assert_int_equal(c.forced_eos_token_id, -1);
    assert_int_equal(c.forced_bos_token_id, 0);
    as_config_clear(&c);
    parse_ok("{\"model_type\":\"t5\",\"vocab_size\":50}", &c);
    assert_int_equal(c.forced_eos_token_id, -1);
    assert_int_equal(c.n_eos_ids, 1);
    assert_int_equal(c.eos_ids[0], 1);
    as_config_clear(&c);
    expect_error("{\"model_type\":\"t5\",\"vocab_size\":50,\"forced_bos_token_id\":50}", "forced_bos_token_id",
                 "vocab_size");
    expect_error("{\"model_type\":\"llama\",\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}", "eos_token_id", "at most 8");
    expect_error("{\"model_type\":\"llama\",\"eos_token_id\":[1,\"x\"]}", "eos_token_id", NULL);
    /* bad_words_ids: held as given, or -1 (loading still works) */
    parse_ok("{\"model_type\":\"marian\",\"vocab_size\":50,\"pad_token_id\":49,\"decoder_start_token_id\":49,"
             "\"bad_words_ids\":[[49],[3,4,5]]}",
             &c);
    assert_int_equal(c.n_bad_words, 2);
    assert_int_equal(c.bad_word_len[0], 1);
    assert_int_equal(c.bad_words[0][0], 49);
    assert_int_equal(c.bad_word_len[1], 3);
    assert_int_equal(c.bad_words[1][2], 5);
    as_config_clear(&c);
    static const char *const unheld[] = {"[[50]]", "[[]]", "[1,2]", "\"x\"", "[[1,2,3,4,5,6,7,8,9]]"};
    for (size_t i = 0; i < sizeof unheld / sizeof unheld[0]; i++) {
        char js[256];
        snprintf(js, sizeof js, "{\"model_type\":\"t5\",\"vocab_size\":50,\"bad_words_ids\":%s}", unheld[i]);
        parse_ok(js, &c);
        assert_int_equal(c.n_bad_words, -1);
        as_config_clear(&c);
    }
    parse_ok("{\"model_type\":\"t5\",\"vocab_size\":50}", &c);
    assert_int_equal(c.n_bad_words, 0);
    as_config_clear(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bert),
        cmocka_unit_test(test_bert_defaults_and_arch_inference),
        cmocka_unit_test(test_roberta_family),
        cmocka_unit_test(test_electra),
        cmocka_unit_test(test_distilbert),
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_attention_options),
        cmocka_unit_test(test_activations),
        cmocka_unit_test(test_real_bert_base),
        cmocka_unit_test(test_load_dir_missing),
        cmocka_unit_test(test_field_errors),
        cmocka_unit_test(test_label_errors),
        cmocka_unit_test(test_llm_defaults),
        cmocka_unit_test(test_llm_published),
        cmocka_unit_test(test_llm_arch_and_labels),
        cmocka_unit_test(test_llm_rope),
        cmocka_unit_test(test_llm_refusals_and_bad_values),
        cmocka_unit_test(test_llm_fixture_configs),
        cmocka_unit_test(test_generation_settings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
