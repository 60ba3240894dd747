/* test_unigram.c — the SentencePiece Unigram tokenizer (src/tokenize/unigram.c, the
 * Precompiled charsmap of charsmap.c, the normalizers of normalize.c, through spm.c and
 * tokenizer.c's loader) against Hugging Face `tokenizers`.
 *
 * tests/ref/fixtures/unigram/tokenizer.json is a T5-style tokenizer.json converted from a
 * SentencePiece Unigram model (3,000 pieces, the nmt_nfkc precompiled_charsmap of
 * SentencePiece 0.1.97); tests/ref/unigram_tokenizers.py makes its T5, XLM-R, ALBERT,
 * recent-SpmConverter, byte_fallback and NFKC+Lowercase variants, and every record of
 * tests/ref/fixtures/unigram_<variant>.json (gen_unigram_fixtures.mjs, tokenizers 0.23.2,
 * 277 texts, pairs and truncations each) must give the same ids, type ids, pieces,
 * sequence ids and byte offsets. The spiece variants are folders without tokenizer.json
 * (spiece.model + tokenizer_config.json, T5Tokenizer) whose fixtures come from the file
 * transformers' T5 converter writes for that model. Also: the lattice on a hand-made vocabulary (HF's own
 * doc example, unk fusing, ties, no unk_id), readable token text, hostile tokenizer.json
 * files (bad charsmaps, vocab entries, unk_id, normalizers: one-line errors), random
 * charsmap tables (no crash, whatever they say), spiece.model folders refused by name,
 * truncated or bit-flipped (loaded or refused in one line), and speed on 100 KB and a 1 MiB word.
 * It does not test SentencePiece-style BPE (test_spm.c).
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

#include "tokenize/charsmap.h"
#include "tokenize/tokenizer.h"
#include "tokenize/unigram.h"

#define REF AS_SOURCE_DIR "/tests/ref"
#define BASE REF "/fixtures/unigram/tokenizer.json"

static const char *const k_variants[] = {"t5",         "xlmr",   "albert",      "new_spm",
                                         "byte_fallback", "nfkc_lower", "spiece", "spiece_first"};
static char g_dir[] = "/tmp/as_unigram_XXXXXX"; /* the variants, made once */

static int setup(void **state) {
    (void)state;
    if (!mkdtemp(g_dir)) return -1;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/unigram_tokenizers.py --variants %s %s", REF, BASE, g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static tok_tokenizer *load_variant(const char *name) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/%s", g_dir, name);
    tok_tokenizer *t = NULL;
    as_error err = {0};
    double t0 = as_now();
    if (tok_load_dir(dir, NULL, &t, NULL, &err) != AS_OK) fail_msg("%s: %s", dir, err.msg);
    printf("  loaded %s in %.3f s\n", name, as_now() - t0);
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

/* HF names a byte-fallback or fused token by the text it covers; ours is the piece. */
static int same_piece(const tok_tokenizer *t, int32_t id, const char *got, const char *want) {
    return strcmp(got, want) == 0 || id == tok_special_id(t, TOK_SP_UNK) || strncmp(got, "<0x", 3) == 0 ||
           (strlen(want) > strlen(got) && strcmp(want + strlen(want) - strlen(got), got) == 0);
}

/* Checks every record of fixture fx against t; returns the number of records. */
static int check_fixture(const tok_tokenizer *t, const char *fx) {
    json_error_t je;
    json_t *doc = json_load_file(fx, JSON_ALLOW_NUL, &je);
    if (!doc) fail_msg("%s: %s (line %d)", fx, je.text, je.line);
    json_t *recs = json_object_get(doc, "records");
    assert_true(json_is_array(recs) && json_array_size(recs) > 200);
    size_t i;
    json_t *r;
    int n_bad = 0, n_tok = 0, n_off = 0;
    json_array_foreach(recs, i, r) {
        json_t *ja = json_object_get(r, "text_a"), *jb = json_object_get(r, "text_b");
        const char *a = json_string_value(ja), *b = json_is_string(jb) ? json_string_value(jb) : NULL;
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
                !same_piece(t, e.ids[k], e.pieces[k], json_string_value(json_array_get(toks, (size_t)k))) ||
                e.seq[k] != json_integer_value(json_array_get(seqs, (size_t)k))) {
                ok = 0;
                bad_at = k;
            } else if (e.start[k] != json_integer_value(json_array_get(o, 0)) ||
                       e.end[k] != json_integer_value(json_array_get(o, 1))) {
                n_off++;
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
    printf("  %s: %d records (%d tokens), %d mismatched (%d on offsets only)\n", fx, n, n_tok, n_bad, n_off);
    json_decref(doc);
    assert_int_equal(n_bad, 0);
    return n;
}

static void test_fixtures(void **state) {
    (void)state;
    for (size_t v = 0; v < sizeof k_variants / sizeof k_variants[0]; v++) {
        tok_tokenizer *t = load_variant(k_variants[v]);
        assert_string_equal(tok_kind_name(t), "unigram");
        char fx[512];
        snprintf(fx, sizeof fx, "%s/fixtures/unigram_%s.json", REF, k_variants[v]);
        check_fixture(t, fx);
        tok_free(t);
    }
}

/* ---- the lattice on hand-made vocabularies ------------------------------------------- */

static void encode_words(const tok_unigram *u, const char *w, const char *want) {
    tok_ids x = {0};
    as_error err = {0};
    assert_int_equal(tok_unigram_encode(u, w, strlen(w), &x, &err), AS_OK);
    char got[256] = "";
    for (int k = 0; k < x.n; k++)
        snprintf(got + strlen(got), sizeof got - strlen(got), "%s%d:%d-%d", k ? " " : "", x.ids[k], x.start[k], x.end[k]);
    printf("  \"%s\" -> %s\n", w, got);
    assert_string_equal(got, want);
    tok_ids_free(&x);
}

static void test_lattice(void **state) {
    (void)state;
    /* HF models/unigram/model.rs doc example: "abcdacdxx" -> abcd a cd xx (xx one fused unk) */
    const char *p[] = {"<unk>", "a", "b", "c", "d", "cd", "ab", "abc", "abcd"};
    size_t len[9];
    for (int k = 0; k < 9; k++) len[k] = strlen(p[k]);
    double sc[] = {0, 0, 0, 0, 0, 1, 2, 5, 10};
    tok_unigram *u = NULL;
    as_error err = {0};
    assert_int_equal(tok_unigram_init(p, len, sc, 9, 0, 0, &u, &err), AS_OK);
    encode_words(u, "abcdacdxx", "8:0-4 1:4-5 5:5-7 0:7-9");
    encode_words(u, "x\xC3\xA9y", "0:0-4"); /* unknown characters of any length fuse */
    assert_int_equal(tok_unigram_id(u, "cd", 2), 5);
    assert_int_equal(tok_unigram_id(u, "c", 2), -1);
    tok_unigram_free(u);
    /* scores decide: "ab" + "c" (-1 + -1) beats "a" + "bc" (-0.5 + -3); an exact tie keeps
     * the path found first (the shorter first piece is tried first) */
    const char *q[] = {"<unk>", "a", "b", "c", "ab", "bc", "<0x7A>", "a"};
    size_t ql[8];
    for (int k = 0; k < 8; k++) ql[k] = strlen(q[k]);
    double qs[] = {0, -0.5, -2, -1, -1, -3, -1, -0.25};
    assert_int_equal(tok_unigram_init(q, ql, qs, 8, 0, 1, &u, &err), AS_OK);
    encode_words(u, "abc", "4:0-2 3:2-3");
    encode_words(u, "aa", "7:0-1 7:1-2"); /* a piece given twice: its last id */
    encode_words(u, "zq", "0:0-2");       /* byte_fallback needs every byte: no <0x71>, so unk */
    encode_words(u, "z", "6:0-1");
    tok_unigram_free(u);
    /* no unk_id: an unknown character is an error, as in HF */
    assert_int_equal(tok_unigram_init(p, len, sc, 9, -1, 0, &u, &err), AS_OK);
    tok_ids x = {0};
    assert_int_equal(tok_unigram_encode(u, "ax", 2, &x, &err), AS_ERR_INPUT);
    printf("  no unk_id: %s\n", err.msg);
    assert_int_equal(x.n, 0);
    tok_ids_free(&x);
    tok_unigram_free(u);
    /* refused models */
    double bad[] = {0, 1.0 / 0.0};
    assert_int_equal(tok_unigram_init(p, len, bad, 2, 0, 0, &u, &err), AS_ERR_INPUT);
    assert_int_equal(tok_unigram_init(p, len, sc, 9, 9, 0, &u, &err), AS_ERR_INPUT);
    assert_int_equal(tok_unigram_init(p, len, sc, 0, -1, 0, &u, &err), AS_ERR_INPUT);
}

static void test_display(void **state) {
    (void)state;
    tok_tokenizer *t = load_variant("t5");
    int32_t id = tok_piece_to_id(t, "\xE2\x96\x81the");
    assert_true(id >= 0);
    char *d = tok_piece_display(t, id);
    assert_string_equal(d, " the");
    free(d);
    as_encoding e = {0};
    as_error err = {0};
    assert_int_equal(tok_encode(t, "The  \xEF\xBC\xA1 cat", NULL, 0, 0, &e, &err), AS_OK);
    assert_int_equal(e.ids[e.n - 1], tok_piece_to_id(t, "</s>")); /* the template's "$A </s>" */
    assert_int_equal(e.start[e.n - 1], -1);
    tok_free(t);
    as_encoding_free(&e);
}

/* ---- hostile files -------------------------------------------------------------------- */

/* Loads a copy of the t5 variant with one field replaced; returns the status. */
static as_status load_edited(const char *what, json_t *value, char *msg, size_t cap) {
    char src[512], dir[] = "/tmp/as_unigram_bad_XXXXXX", path[512];
    snprintf(src, sizeof src, "%s/t5/tokenizer.json", g_dir);
    json_error_t je;
    json_t *j = json_load_file(src, 0, &je);
    assert_non_null(j);
    json_t *model = json_object_get(j, "model");
    if (strcmp(what, "charsmap") == 0)
        json_object_set_new(json_array_get(json_object_get(json_object_get(j, "normalizer"), "normalizers"), 0),
                            "precompiled_charsmap", value);
    else if (strcmp(what, "normalizer") == 0 || strcmp(what, "pre_tokenizer") == 0)
        json_object_set_new(j, what, value);
    else if (strcmp(what, "vocab0") == 0)
        json_array_set_new(json_object_get(model, "vocab"), 0, value);
    else
        json_object_set_new(model, what, value);
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    assert_int_equal(json_dump_file(j, path, JSON_COMPACT), 0);
    json_decref(j);
    tok_tokenizer *t = NULL;
    as_error err = {0};
    as_status rc = tok_load_dir(dir, NULL, &t, NULL, &err);
    snprintf(msg, cap, "%s", rc == AS_OK ? "" : err.msg);
    if (rc == AS_OK) { /* a table that loads must still encode without harm */
        as_encoding e = {0};
        tok_encode(t, "Hello \xEF\xBC\xA1\xE2\x91\xA0 caf\xC3\xA9 \xF0\x9F\x98\x80", NULL, 0, 0, &e, &err);
        as_encoding_free(&e);
    }
    tok_free(t);
    unlink(path);
    rmdir(dir);
    return rc;
}

static void expect_refused(const char *what, json_t *value, const char *needle) {
    char msg[512];
    as_status rc = load_edited(what, value, msg, sizeof msg);
    printf("  %s -> %s\n", what, msg);
    assert_int_equal(rc, AS_ERR_INPUT);
    assert_null(strchr(msg, '\n'));
    if (!strstr(msg, needle)) fail_msg("error \"%s\" does not say \"%s\"", msg, needle);
}

static void test_refused(void **state) {
    (void)state;
    expect_refused("charsmap", json_string("not base64!"), "base64");
    expect_refused("charsmap", json_string("AAA="), "too short");
    expect_refused("charsmap", json_string("/////wAAAAA="), "trie size");
    expect_refused("charsmap", json_string("BAAAAAAAAAD/"), "UTF-8");
    expect_refused("charsmap", json_integer(3), "precompiled_charsmap");
    expect_refused("unk_id", json_integer(1000000), "unk_id");
    expect_refused("unk_id", json_string("2"), "unk_id");
    expect_refused("vocab", json_array(), "model.vocab");
    expect_refused("vocab", json_string("x"), "model.vocab");
    expect_refused("vocab0", json_pack("[s]", "<pad>"), "model.vocab[0]");
    expect_refused("vocab0", json_pack("[s,s]", "<pad>", "0.5"), "model.vocab[0]");
    expect_refused("byte_fallback", json_integer(1), "byte_fallback");
    expect_refused("normalizer", json_pack("{s:s}", "type", "BertNormalizer"), "unsupported normalizer");
    expect_refused("normalizer", json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "Regex", "(", "content", " "),
                   "does not compile");
    expect_refused("normalizer", json_pack("{s:s, s:i}", "type", "Strip", "strip_left", 3), "Strip");
    expect_refused("pre_tokenizer", json_pack("{s:s}", "type", "ByteLevel"), "unsupported pre_tokenizer");
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random tables: a header saying the trie is k units, random units (some made
 * plausible: the root's offset small, labels matching), random strings. */
static void test_random_charsmaps(void **state) {
    (void)state;
    uint64_t seed = 0x2545F4914F6CDD1Dull;
    int n_ok = 0, n_err = 0, n_hit = 0;
    static const char *const probes[] = {"A", "\xEF\xBC\xA1", "\xE2\x91\xA0", "a\xCC\x81", "\xF0\x9F\x98\x80", "x"};
    for (int round = 0; round < 3000; round++) {
        size_t units = 1 + rng(&seed) % 600, strs = rng(&seed) % 64;
        size_t n = 4 + units * 4 + strs;
        unsigned char *raw = malloc(n);
        assert_non_null(raw);
        uint32_t tb = (uint32_t)(units * 4);
        if (round % 10 == 0) tb = (uint32_t)rng(&seed); /* a lying header */
        memcpy(raw, &tb, 4);
        for (size_t i = 0; i < units; i++) {
            uint32_t u = (uint32_t)rng(&seed);
            if (rng(&seed) % 2) u = (u & ~0xFFu & ~(1u << 31)) | (uint32_t)(rng(&seed) % 256); /* some label */
            if (i == 0) u = (uint32_t)((rng(&seed) % 64) << 10);
            memcpy(raw + 4 + 4 * i, &u, 4);
        }
        for (size_t i = 0; i < strs; i++) raw[4 + units * 4 + i] = rng(&seed) % 3 ? (unsigned char)('a' + rng(&seed) % 26) : 0;
        static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        char *enc = malloc((n + 2) / 3 * 4 + 1);
        assert_non_null(enc);
        size_t w = 0;
        for (size_t i = 0; i < n; i += 3) {
            uint32_t x = (uint32_t)raw[i] << 16 | (i + 1 < n ? (uint32_t)raw[i + 1] << 8 : 0) | (i + 2 < n ? raw[i + 2] : 0);
            enc[w++] = b64[x >> 18 & 63];
            enc[w++] = b64[x >> 12 & 63];
            enc[w++] = i + 1 < n ? b64[x >> 6 & 63] : '=';
            enc[w++] = i + 2 < n ? b64[x & 63] : '=';
        }
        enc[w] = 0;
        tok_charsmap *c = NULL;
        as_error err = {0};
        if (tok_charsmap_init(enc, w, &c, &err) == AS_OK) {
            n_ok++;
            for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
                size_t len;
                const char *r = tok_charsmap_lookup(c, probes[k], strlen(probes[k]), &len);
                if (r) {
                    n_hit++;
                    assert_int_equal(strlen(r), len);
                }
            }
            tok_charsmap_free(c);
        } else {
            n_err++;
            assert_null(strchr(err.msg, '\n'));
        }
        free(enc);
        free(raw);
    }
    printf("  random charsmaps: %d loaded (%d lookups found something), %d refused\n", n_ok, n_hit, n_err);
    assert_true(n_ok > 1000 && n_err > 100);

    /* the real table with random base64 characters changed (still base64: the bytes of the
     * header, trie units and strings change), looked up with what it normalizes */
    json_error_t je;
    json_t *j = json_load_file(BASE, 0, &je);
    assert_non_null(j);
    const char *b64 = json_string_value(json_object_get(
        json_array_get(json_object_get(json_object_get(j, "normalizer"), "normalizers"), 0), "precompiled_charsmap"));
    assert_non_null(b64);
    size_t n = strlen(b64);
    char *m = malloc(n + 1);
    assert_non_null(m);
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    static const char *const real[] = {"\xEF\xBC\xA1", "\xE2\x91\xA0", "\xEF\xBD\xB6\xEF\xBE\x9E", "\xE3\x8D\xBB",
                                       "\xC2\xBD", "\xEF\xAC\x81", "\xE2\x84\xA2", "\x01", "\xE3\x80\x80"};
    n_ok = n_err = n_hit = 0;
    for (int round = 0; round < 400; round++) {
        memcpy(m, b64, n + 1);
        int edits = 1 + (int)(rng(&seed) % 64);
        for (int e = 0; e < edits; e++) {
            /* the header, the trie (the first half or so), or anywhere */
            size_t at = rng(&seed) % (round % 8 == 0 ? 8 : round % 8 < 6 ? n / 2 : n - 2);
            if (m[at] != '=') m[at] = alpha[rng(&seed) % 64];
        }
        tok_charsmap *c = NULL;
        as_error err = {0};
        if (tok_charsmap_init(m, n, &c, &err) != AS_OK) {
            n_err++;
            assert_null(strchr(err.msg, '\n'));
            continue;
        }
        n_ok++;
        for (size_t k = 0; k < sizeof real / sizeof real[0]; k++) {
            size_t len;
            const char *r = tok_charsmap_lookup(c, real[k], strlen(real[k]), &len);
            if (r) {
                n_hit++;
                assert_int_equal(strlen(r), len);
            }
        }
        tok_charsmap_free(c);
    }
    printf("  mutated real charsmap: %d loaded (%d lookups found something), %d refused\n", n_ok, n_hit, n_err);
    assert_true(n_ok > 100 && n_hit > 1000);
    free(m);
    json_decref(j);
}

/* Writes a spiece folder with model bytes m (n) and the given tokenizer_config.json, loads
 * it and returns the status (the message in msg); a model that loads must encode. */
static as_status load_spiece_bytes(const unsigned char *m, size_t n, const char *conf, char *msg, size_t cap) {
    char dir[] = "/tmp/as_unigram_sp_XXXXXX", p1[512], p2[512];
    assert_non_null(mkdtemp(dir));
    snprintf(p1, sizeof p1, "%s/spiece.model", dir);
    snprintf(p2, sizeof p2, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(p1, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(m, 1, n, f), n);
    fclose(f);
    f = fopen(p2, "w");
    assert_non_null(f);
    fputs(conf, f);
    fclose(f);
    tok_tokenizer *t = NULL;
    as_error err = {0};
    as_status rc = tok_load_dir(dir, NULL, &t, NULL, &err);
    snprintf(msg, cap, "%s", rc == AS_OK ? "" : err.msg);
    if (rc == AS_OK) {
        as_encoding e = {0};
        tok_encode(t, "Hello \xEF\xBC\xA1\xE2\x91\xA0  caf\xC3\xA9 <extra_id_0> \xF0\x9F\x98\x80", NULL, 0, 0, &e, &err);
        as_encoding_free(&e);
    }
    tok_free(t);
    unlink(p1);
    unlink(p2);
    rmdir(dir);
    return rc;
}

/* spiece.model folders: refused configurations, truncated and bit-flipped models. */
static void test_spiece_hostile(void **state) {
    (void)state;
    char *m = NULL, msg[512];
    size_t n = 0;
    as_error err = {0};
    assert_int_equal(as_read_file(REF "/fixtures/unigram/spiece.model", 1u << 24, &m, &n, &err), AS_OK);
    const unsigned char *u = (const unsigned char *)m;
    const char *t5 = "{\"tokenizer_class\": \"T5Tokenizer\", \"extra_ids\": 3}";
    assert_int_equal(load_spiece_bytes(u, n, t5, msg, sizeof msg), AS_OK);
    static const struct {
        const char *conf, *word;
    } bad[] = {
        {"{}", "T5 / mT5"},
        {"{\"tokenizer_class\": \"AlbertTokenizer\"}", "T5 / mT5"},
        {"{\"tokenizer_class\": \"T5Tokenizer\", \"extra_ids\": -1}", "extra_ids"},
        {"{\"tokenizer_class\": \"T5Tokenizer\", \"extra_ids\": \"5\"}", "extra_ids"},
        {"{\"tokenizer_class\": \"T5Tokenizer\", \"legacy\": 3}", "legacy"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(load_spiece_bytes(u, n, bad[k].conf, msg, sizeof msg), AS_ERR_INPUT);
        printf("  %s -> %s\n", bad[k].conf, msg);
        if (!strstr(msg, bad[k].word)) fail_msg("\"%s\" lacks \"%s\"", msg, bad[k].word);
    }
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    unsigned char *c = malloc(n);
    assert_non_null(c);
    int n_ok = 0, n_err = 0;
    for (int round = 0; round < 160; round++) {
        memcpy(c, u, n);
        size_t len = n;
        if (round % 4 == 0) {
            len = rng(&seed) % n;
        } else {
            int flips = 1 + (int)(rng(&seed) % 16);
            for (int k = 0; k < flips; k++) {
                size_t at = round % 4 == 1 ? rng(&seed) % 64 : rng(&seed) % n; /* the first pieces, or anywhere */
                c[at] ^= (unsigned char)(1u << (rng(&seed) % 8));
            }
        }
        as_status rc = load_spiece_bytes(c, len, t5, msg, sizeof msg);
        if (rc == AS_OK) {
            n_ok++;
        } else {
            n_err++;
            assert_int_equal(rc, AS_ERR_INPUT);
            assert_null(strchr(msg, '\n'));
        }
    }
    printf("  damaged spiece.model: %d loaded, %d refused\n", n_ok, n_err);
    assert_true(n_err > 20);
    free(c);
    free(m);
}

static void test_speed(void **state) {
    (void)state;
    tok_tokenizer *t = load_variant("xlmr");
    const char *chunk = "The quick brown fox, 12345 times: don't stop!\n  caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
                        "\xF0\x9F\x98\x80 \xEF\xBC\xA1\xEF\xBC\xA2 int x = y*2;\t";
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
    assert_true(dt < 5.0);
    tok_ids_free(&ids);
    for (n = 0; n + 3 <= (1u << 20); n += 3) memcpy(text + n, "\xE6\x97\xA5", 3); /* one 1 MiB word of 日 */
    text[n] = 0;
    t0 = as_now();
    assert_int_equal(tok_encode_raw(t, text, &ids, &err), AS_OK);
    dt = as_now() - t0;
    printf("  one 1 MiB word -> %d tokens in %.3f s\n", ids.n, dt);
    assert_true(dt < 20.0);
    assert_int_equal(ids.end[ids.n - 1], (int32_t)n);
    tok_ids_free(&ids);
    free(text);
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lattice),
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_display),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_random_charsmaps),
        cmocka_unit_test(test_spiece_hostile),
        cmocka_unit_test(test_speed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
