/* tokens_json.c — as_tokens_json / as_tokens_json_value (attnscope.h): an input's
 * tokens in the one JSON format of `attnscope run --format json` and of the server;
 * and as_json_string_utf8, the jansson string that is always valid UTF-8, which the
 * library and the server share. It does not tokenize: it describes an as_encoding the
 * caller made.
 */
#include "attnscope.h"
#include "core/core.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

json_t *as_json_string_utf8(const char *s) {
    if (!s) return json_null();
    json_t *j = json_string(s);
    if (j) return j;
    char *clean = as_utf8_clean(s);
    j = clean ? json_string(clean) : NULL;
    free(clean);
    return j ? j : json_null();
}

/* The bytes of s as a JSON string of lowercase hex digits. New reference or NULL. */
static json_t *hex_string(const char *s) {
    size_t n = s ? strlen(s) : 0;
    char *hex = malloc(2 * n + 1);
    if (!hex) return NULL;
    for (size_t i = 0; i < n; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)s[i]);
    hex[2 * n] = 0;
    json_t *j = json_string(hex);
    free(hex);
    return j;
}

json_t *as_tokens_json_value(const as_model *m, const as_encoding *enc) {
    json_t *arr = json_array();
    int seg = 0;
    for (int i = 0; arr && i < enc->n; i++) {
        int seq = enc->seq ? enc->seq[i] : 0;
        if (seq >= 0) seg = seq; /* specials belong to the sentence before them */
        char *text = as_model_token_text(m, enc->ids[i]);
        json_t *t = json_pack("{s:i, s:i, s:o, s:o, s:o, s:i, s:i, s:i, s:i, s:b}", "i", i, "id", (int)enc->ids[i],
                              "piece", as_json_string_utf8(enc->pieces && enc->pieces[i] ? enc->pieces[i] : ""),
                              "text", as_json_string_utf8(text ? text : ""),
                              "bytes", hex_string(text), "start", enc->start ? (int)enc->start[i] : -1, "end",
                              enc->end ? (int)enc->end[i] : -1, "type_id", enc->type_ids ? (int)enc->type_ids[i] : 0,
                              "segment", seg, "special", seq < 0);
        free(text);
        if (!t || json_array_append_new(arr, t)) {
            json_decref(arr);
            arr = NULL;
        }
    }
    return arr;
}

char *as_tokens_json(const as_model *m, const as_encoding *enc) {
    json_t *arr = as_tokens_json_value(m, enc);
    char *out = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return out;
}
