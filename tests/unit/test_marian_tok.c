/* test_marian_tok.c — Marian folders without tokenizer.json (vocab.json + source.spm +
 * target.spm, src/tokenize/tokenizer.c load_marian): the ids of 300 varied lines (Unicode
 * normalization, digits, whitespace runs, tabs, CJK, emoji) on the source side
 * (tok_encode) and the target side (tok_encode_target) against
 * tests/ref/fixtures/marian_spm/expected.json, which tests/ref/gen_marian_spm.py computed
 * with Debian's python3-sentencepiece as MarianTokenizer does (pieces through vocab.json,
 * unknown ones by their text, then </s>). Then the refusals, one line each: vocab.json
 * without </s> / <unk> / <pad>, a separate target_vocab.json, a BPE model, and truncated
 * or bit-flipped source.spm files (loaded or refused, never a crash).
 * It does not run a model (tests/cli/test_marian_text.sh does).
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

#define FX AS_SOURCE_DIR "/tests/ref/fixtures/marian_spm"

static tok_tokenizer *load(const char *dir) {
    tok_tokenizer *t = NULL;
    as_error err = {0};
    if (tok_load_dir(dir, NULL, &t, NULL, &err) != AS_OK) fail_msg("%s: %s", dir, err.msg);
    return t;
}

/* Number of lines of one side whose ids differ from the fixture's (the first few printed). */
static int compare_side(const tok_tokenizer *t, const json_t *lines, const json_t *want, int target) {
    int bad = 0;
    for (size_t i = 0; i < json_array_size(lines); i++) {
        const char *s = json_string_value(json_array_get(lines, i));
        const json_t *w = json_array_get(want, i);
        as_encoding e = {0};
        as_error err = {0};
        as_status rc = target ? tok_encode_target(t, s, 0, 0, &e, &err) : tok_encode(t, s, NULL, 0, 0, &e, &err);
        int same = rc == AS_OK && (size_t)e.n == json_array_size(w);
        for (int k = 0; same && k < e.n; k++) same = e.ids[k] == json_integer_value(json_array_get(w, (size_t)k));
        if (!same && bad++ < 5) {
            printf("  %s line %zu \"%s\": rc %d (%s), got", target ? "target" : "source", i, s, (int)rc, err.msg);
            for (int k = 0; k < e.n; k++) printf(" %d", (int)e.ids[k]);
            printf(" want");
            for (size_t k = 0; k < json_array_size(w); k++) printf(" %lld", (long long)json_integer_value(json_array_get(w, k)));
            printf("\n");
        }
        as_encoding_free(&e);
    }
    return bad;
}

static void test_fixture_ids(void **state) {
    (void)state;
    json_error_t je;
    json_t *exp = json_load_file(FX "/expected.json", 0, &je);
    if (!exp) fail_msg("expected.json: %s", je.text);
    const json_t *lines = json_object_get(exp, "lines");
    assert_true(json_array_size(lines) >= 200);
    tok_tokenizer *t = load(FX);
    int bs = compare_side(t, lines, json_object_get(exp, "source"), 0);
    int bt = compare_side(t, lines, json_object_get(exp, "target"), 1);
    printf("  %zu lines: source %d differ, target %d differ\n", json_array_size(lines), bs, bt);
    assert_int_equal(bs, 0);
    assert_int_equal(bt, 0);
    /* the two sides differ (target.spm is another model) and </s> is vocab.json's */
    as_encoding a = {0}, b = {0};
    as_error err = {0};
    assert_int_equal(tok_encode(t, "Straße und Fuß", NULL, 0, 0, &a, &err), AS_OK);
    assert_int_equal(tok_encode_target(t, "Straße und Fuß", 0, 0, &b, &err), AS_OK);
    assert_true(a.n != b.n || memcmp(a.ids, b.ids, (size_t)a.n * sizeof(int32_t)) != 0);
    assert_int_equal(a.ids[a.n - 1], 0);
    assert_int_equal(tok_special_id(t, TOK_SP_EOS), 0);
    assert_int_equal(tok_special_id(t, TOK_SP_UNK), 1);
    as_encoding_free(&a);
    as_encoding_free(&b);
    /* special tokens in the text are matched, as MarianTokenizer's added tokens */
    assert_int_equal(tok_encode(t, "the house</s>", NULL, 0, 0, &a, &err), AS_OK);
    assert_true(a.n >= 3 && a.ids[a.n - 1] == 0 && a.ids[a.n - 2] == 0);
    as_encoding_free(&a);
    /* pieces read as text: "▁the" -> " the" (the generated ids' display) */
    int32_t the = tok_piece_to_id(t, "\xE2\x96\x81the");
    assert_true(the > 1);
    char *disp = tok_piece_display(t, the);
    assert_string_equal(disp, " the");
    free(disp);
    tok_free(t);
    json_decref(exp);
}

/* A folder with the fixture's files, some replaced: vocab (NULL: the fixture's),
 * source.spm bytes (NULL: the fixture's), and an extra file name written empty. */
static as_status load_variant(const char *vocab, const unsigned char *src, size_t n_src, const char *extra, char *msg,
                              size_t cap) {
    char dir[] = "/tmp/as_marian_XXXXXX", p[4][512], cmd[1024];
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "cp %s/vocab.json %s/source.spm %s/target.spm %s/", FX, FX, FX, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(p[0], sizeof p[0], "%s/vocab.json", dir);
    snprintf(p[1], sizeof p[1], "%s/source.spm", dir);
    snprintf(p[2], sizeof p[2], "%s/target.spm", dir);
    snprintf(p[3], sizeof p[3], "%s/%s", dir, extra ? extra : "none");
    FILE *f;
    if (vocab) {
        assert_non_null(f = fopen(p[0], "w"));
        fputs(vocab, f);
        fclose(f);
    }
    if (src) {
        assert_non_null(f = fopen(p[1], "wb"));
        assert_int_equal(fwrite(src, 1, n_src, f), n_src);
        fclose(f);
    }
    if (extra) {
        assert_non_null(f = fopen(p[3], "w"));
        fclose(f);
    }
    tok_tokenizer *t = NULL;
    as_error err = {0};
    as_status rc = tok_load_dir(dir, NULL, &t, NULL, &err);
    snprintf(msg, cap, "%s", rc == AS_OK ? "" : err.msg);
    if (rc == AS_OK) { /* a model that loads must encode without harm */
        as_encoding e = {0};
        tok_encode(t, "Hello \xEF\xBC\xA1\xE2\x91\xA0  caf\xC3\xA9 \xF0\x9F\x98\x80 </s>", NULL, 0, 0, &e, &err);
        as_encoding_free(&e);
    }
    tok_free(t);
    for (int k = 0; k < 4; k++) unlink(p[k]);
    rmdir(dir);
    return rc;
}

static uint64_t rng(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void test_refused(void **state) {
    (void)state;
    char msg[512];
    static const struct {
        const char *vocab, *extra, *word;
    } bad[] = {
        {"{\"<unk>\": 1, \"<pad>\": 2, \"a\": 3}", NULL, "\"</s>\""},
        {"{\"</s>\": 0, \"<pad>\": 2}", NULL, "\"<unk>\""},
        {"{\"</s>\": 0, \"<unk>\": 1}", NULL, "\"<pad>\""},
        {"{\"</s>\": 0, \"<unk>\": 1, \"<pad>\": \"x\"}", NULL, "integer"},
        {"[1, 2]", NULL, "vocab.json"},
        {"{\"</s>\": 0, \"<unk>\": 1, \"<pad>\": 2}", "target_vocab.json", "separate"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(load_variant(bad[k].vocab, NULL, 0, bad[k].extra, msg, sizeof msg), AS_ERR_INPUT);
        printf("  -> %s\n", msg);
        if (!strstr(msg, bad[k].word)) fail_msg("\"%s\" lacks \"%s\"", msg, bad[k].word);
        assert_null(strchr(msg, '\n'));
    }
    char *m = NULL;
    size_t n = 0;
    as_error err = {0};
    assert_int_equal(as_read_file(FX "/source.spm", 1u << 24, &m, &n, &err), AS_OK);
    assert_int_equal(load_variant(NULL, (const unsigned char *)m, n, NULL, msg, sizeof msg), AS_OK);
    uint64_t seed = 0x5EED5EEDull;
    unsigned char *c = malloc(n);
    assert_non_null(c);
    int n_ok = 0, n_err = 0;
    for (int round = 0; round < 120; round++) {
        memcpy(c, m, n);
        size_t len = n;
        if (round % 3 == 0) {
            len = rng(&seed) % n;
        } else {
            int flips = 1 + (int)(rng(&seed) % 16);
            for (int k = 0; k < flips; k++) {
                size_t at = round % 3 == 1 ? rng(&seed) % 64 : rng(&seed) % n;
                c[at] ^= (unsigned char)(1u << (rng(&seed) % 8));
            }
        }
        as_status rc = load_variant(NULL, c, len, NULL, msg, sizeof msg);
        if (rc == AS_OK) {
            n_ok++;
        } else {
            n_err++;
            assert_int_equal(rc, AS_ERR_INPUT);
            assert_null(strchr(msg, '\n'));
        }
    }
    printf("  damaged source.spm: %d loaded, %d refused\n", n_ok, n_err);
    assert_true(n_err > 20);
    free(c);
    free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_ids),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
