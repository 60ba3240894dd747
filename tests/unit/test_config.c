/* test_config.c — unit tests for src/io/config.c: example config.json texts of every
 * supported family parsed field by field, the real bert-base-uncased config when
 * ../shared has it, and the errors (missing / wrong-typed field, unsupported
 * model_type, sizes out of range, hidden size not divisible by heads, bad id2label).
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
    expect_error("{\"architectures\":[\"T5Model\"],\"num_hidden_layers\":1}", "model_type", NULL);
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
    expect_error("{\"model_type\":\"t5\",\"d_model\":512}", "'model_type'", "t5");
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
