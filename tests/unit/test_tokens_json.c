/* test_tokens_json.c — unit tests for as_tokens_json (src/model/tokens_json.c), the one
 * JSON form of an input's tokens (the server's runs and `attnscope run --format json`):
 * field names and order, segments and specials of a pair, byte spans, hex bytes, raw
 * ids, and no tokens. On models/demo-bert (WordPiece). Byte-level BPE tokens that end
 * inside a character are covered against the real binary by tests/cli/test_encoding.sh
 * and tests/api/contract.test.mjs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "attnscope.h"

#include <jansson.h>
#include <stdlib.h>

static as_model *g_model;

static int setup(void **state) {
    as_error err = {0};
    if (as_model_load(AS_SOURCE_DIR "/models/demo-bert", &g_model, &err)) {
        fprintf(stderr, "models/demo-bert: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    as_model_free(g_model);
    return 0;
}

/* as_tokens_json(enc) parsed; fails the test when it is not a JSON array. */
static json_t *tokens(const as_encoding *enc) {
    char *txt = as_tokens_json(g_model, enc);
    assert_non_null(txt);
    json_error_t je;
    json_t *a = json_loads(txt, 0, &je);
    if (!a) fprintf(stderr, "not JSON: %s: %s\n", je.text, txt);
    free(txt);
    assert_non_null(a);
    assert_true(json_is_array(a));
    return a;
}

static const char *str(json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }
static long long num(json_t *o, const char *k) { return (long long)json_integer_value(json_object_get(o, k)); }

/* A pair: [CLS] the dog [SEP] the ##s [SEP] (demo-bert splits "thes" into the ##s). */
static void test_pair(void **state) {
    as_error err = {0};
    as_encoding enc = {0};
    as_encode_opts eo = {.max_len = 0, .truncate = 0};
    assert_int_equal(as_encode(g_model, "the dog", "thes", &eo, &enc, &err), AS_OK);
    json_t *a = tokens(&enc);
    assert_int_equal((int)json_array_size(a), enc.n);
    static const char *keys[] = {"i", "id", "piece", "text", "bytes", "start", "end", "type_id", "segment", "special"};
    static const struct { const char *piece, *bytes; int start, end, type_id, segment, special; } want[] = {
        {"[CLS]", "5b434c535d", -1, -1, 0, 0, 1}, {"the", "746865", 0, 3, 0, 0, 0}, {"dog", "646f67", 4, 7, 0, 0, 0},
        {"[SEP]", "5b5345505d", -1, -1, 0, 0, 1}, {"the", "746865", 0, 3, 1, 1, 0}, {"##s", "232373", 3, 4, 1, 1, 0},
        {"[SEP]", "5b5345505d", -1, -1, 1, 1, 1}};
    assert_int_equal(enc.n, (int)(sizeof want / sizeof want[0]));
    for (int i = 0; i < enc.n; i++) {
        json_t *t = json_array_get(a, (size_t)i);
        /* exactly these fields, in this order */
        assert_int_equal((int)json_object_size(t), (int)(sizeof keys / sizeof keys[0]));
        const char *k;
        json_t *v;
        int n = 0;
        json_object_foreach(t, k, v) assert_string_equal(k, keys[n++]);
        assert_int_equal(num(t, "i"), i);
        assert_int_equal(num(t, "id"), enc.ids[i]);
        assert_string_equal(str(t, "piece"), want[i].piece);
        assert_string_equal(str(t, "bytes"), want[i].bytes);
        assert_int_equal(num(t, "start"), want[i].start);
        assert_int_equal(num(t, "end"), want[i].end);
        assert_int_equal(num(t, "type_id"), want[i].type_id);
        assert_int_equal(num(t, "segment"), want[i].segment);
        assert_int_equal(json_is_true(json_object_get(t, "special")), want[i].special);
        /* bytes are text's bytes */
        const char *text = str(t, "text"), *hex = str(t, "bytes");
        assert_int_equal(strlen(hex), 2 * strlen(text));
        for (size_t j = 0; text[j]; j++) {
            char b[3];
            snprintf(b, sizeof b, "%02x", (unsigned char)text[j]);
            assert_memory_equal(hex + 2 * j, b, 2);
        }
    }
    json_decref(a);
    as_encoding_free(&enc);
}

/* Raw ids: no offsets (-1), no specials marked by the template, one segment. */
static void test_ids(void **state) {
    as_error err = {0};
    as_encoding enc = {0};
    const int32_t ids[] = {2, 69, 3}; /* [CLS] the [SEP] */
    assert_int_equal(as_encoding_from_ids(g_model, ids, NULL, 3, &enc, &err), AS_OK);
    json_t *a = tokens(&enc);
    assert_int_equal((int)json_array_size(a), 3);
    json_t *t = json_array_get(a, 1);
    assert_string_equal(str(t, "piece"), "the");
    assert_int_equal(num(t, "start"), -1);
    assert_int_equal(num(t, "end"), -1);
    for (int i = 0; i < 3; i++) assert_int_equal(num(json_array_get(a, (size_t)i), "segment"), 0);
    json_decref(a);
    as_encoding_free(&enc);
}

/* No tokens: an empty array. */
static void test_empty(void **state) {
    as_encoding enc = {0};
    json_t *a = tokens(&enc);
    assert_int_equal((int)json_array_size(a), 0);
    json_decref(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pair),
        cmocka_unit_test(test_ids),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
