/* test_tokenizer.c — parity of the tokenizer with Hugging Face `tokenizers` on the real
 * bert-base-uncased tokenizer: every record of tests/ref/fixtures/tok_bert_base_uncased.json
 * (written by tests/ref/gen_tokenizer_fixtures.mjs with tokenizers 0.23.2) must give the
 * same ids, type ids, tokens and byte offsets, loading the folder once via tokenizer.json
 * and once via vocab.txt + tokenizer_config.json only; and the same for a small committed
 * RoBERTa-style BPE (tests/ref/fixtures/tok_roberta_small*, via tokenizer.json and via
 * vocab.json + merges.txt). Also times a 512-token encode.
 * The bert-base-uncased parts need ../shared/data; they skip with a message when absent.
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

#define BERT_DIR AS_SOURCE_DIR "/../shared/data/bert-base-uncased"
#define FIXTURE AS_SOURCE_DIR "/tests/ref/fixtures/tok_bert_base_uncased.json"
#define ROBERTA_DIR AS_SOURCE_DIR "/tests/ref/fixtures/tok_roberta_small"
#define ROBERTA_FIXTURE AS_SOURCE_DIR "/tests/ref/fixtures/tok_roberta_small.json"

static int have_shared(void) {
    if (as_file_exists(BERT_DIR "/tokenizer.json") && as_file_exists(BERT_DIR "/vocab.txt")) return 1;
    printf("SKIP: %s is absent (needs ../shared/data)\n", BERT_DIR);
    return 0;
}

static json_t *load_fixture(const char *path) {
    json_error_t je;
    json_t *doc = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!doc) fail_msg("%s: %s (line %d)", path, je.text, je.line);
    return doc;
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

static int copy_file(const char *from, const char *to) {
    FILE *f = fopen(from, "rb"), *g = fopen(to, "wb");
    int ok = f && g;
    char buf[65536];
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = fwrite(buf, 1, n, g) == n;
    if (f) fclose(f);
    if (g && fclose(g) != 0) ok = 0;
    return ok;
}

/* HF reports an lstrip / rstrip added token as the text it covers (" <mask>"); our
 * pieces are always the vocabulary string, so surrounding spaces are ignored. */
static int same_piece(const char *got, const char *want) {
    if (strcmp(got, want) == 0) return 1;
    while (*want == ' ') want++;
    size_t n = strlen(want);
    while (n > 0 && want[n - 1] == ' ') n--;
    return strlen(got) == n && strncmp(got, want, n) == 0;
}

/* Checks every record of the fixture at path against t; returns the number checked. */
static int check_fixture(const tok_tokenizer *t, const char *how, const char *path, int min_records) {
    json_t *doc = load_fixture(path);
    json_t *recs = json_object_get(doc, "records");
    assert_true(json_is_array(recs));
    size_t i;
    json_t *r;
    int n_checked = 0, n_bad = 0;
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
        n_checked++;
        int ok = rc == AS_OK && (size_t)e.n == json_array_size(ids);
        int bad_at = -1;
        for (int k = 0; ok && k < e.n; k++) {
            json_t *o = json_array_get(offs, (size_t)k);
            int32_t es = (int32_t)json_integer_value(json_array_get(o, 0));
            int32_t ee = (int32_t)json_integer_value(json_array_get(o, 1));
            if (e.ids[k] != json_integer_value(json_array_get(ids, (size_t)k)) ||
                e.type_ids[k] != json_integer_value(json_array_get(types, (size_t)k)) ||
                !same_piece(e.pieces[k], json_string_value(json_array_get(toks, (size_t)k))) ||
                e.start[k] != es || e.end[k] != ee || e.mask[k] != 1 ||
                e.seq[k] != json_integer_value(json_array_get(seqs, (size_t)k))) {
                ok = 0;
                bad_at = k;
            }
        }
        if (!ok) {
            n_bad++;
            printf("  MISMATCH (%s) record %zu: rc=%d %s n=%d want %zu, first bad token %d\n", how, i,
                   (int)rc, rc ? err.msg : "", e.n, json_array_size(ids), bad_at);
            print_text("text_a", a, la);
            if (b) print_text("text_b", b, lb);
            for (int k = 0; k < e.n && k < 40; k++)
                printf("    got %d %s [%d,%d)\n", e.ids[k], e.pieces[k], e.start[k], e.end[k]);
            char *want = json_dumps(r, JSON_COMPACT);
            printf("    want %.600s\n", want);
            free(want);
        }
        as_encoding_free(&e);
    }
    json_decref(doc);
    printf("  %s: %d fixture records checked, %d mismatched\n", how, n_checked, n_bad);
    assert_int_equal(n_bad, 0);
    assert_true(n_checked >= min_records);
    return n_checked;
}

static void test_fixture_tokenizer_json(void **state) {
    (void)state;
    if (!have_shared()) skip();
    as_config cfg = {0};
    cfg.arch = ARCH_BERT;
    cfg.vocab_size = 30522;
    tok_tokenizer *t = NULL;
    as_error err = {0};
    if (tok_load_dir(BERT_DIR, &cfg, &t, NULL, &err) != AS_OK) fail_msg("%s", err.msg);
    assert_string_equal(tok_kind_name(t), "wordpiece");
    assert_int_equal(tok_n_vocab(t), 30522);
    assert_int_equal(tok_special_id(t, TOK_SP_CLS), 101);
    assert_int_equal(tok_special_id(t, TOK_SP_SEP), 102);
    assert_int_equal(tok_special_id(t, TOK_SP_PAD), 0);
    assert_int_equal(tok_special_id(t, TOK_SP_UNK), 100);
    assert_int_equal(tok_special_id(t, TOK_SP_MASK), 103);
    assert_int_equal(tok_special_id(t, TOK_SP_BOS), -1);
    check_fixture(t, "tokenizer.json", FIXTURE, 300);
    tok_free(t);
}

static void test_fixture_vocab_txt(void **state) {
    (void)state;
    if (!have_shared()) skip();
    char dir[] = "/tmp/as_tok_vocab_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/vocab.txt", dir);
    snprintf(p2, sizeof p2, "%s/tokenizer_config.json", dir);
    assert_true(copy_file(BERT_DIR "/vocab.txt", p1));
    assert_true(copy_file(BERT_DIR "/tokenizer_config.json", p2));
    tok_tokenizer *t = NULL;
    as_error err = {0};
    as_status rc = tok_load_dir(dir, NULL, &t, NULL, &err);
    unlink(p1);
    unlink(p2);
    rmdir(dir);
    if (rc != AS_OK) fail_msg("%s", err.msg);
    assert_int_equal(tok_n_vocab(t), 30522);
    assert_int_equal(tok_special_id(t, TOK_SP_MASK), 103);
    check_fixture(t, "vocab.txt", FIXTURE, 300);
    tok_free(t);
}

/* RoBERTa-style byte-level BPE (committed fixture, no ../shared needed): template,
 * trim_offsets and the lstrip <mask>, via tokenizer.json and via the legacy files. */
static void test_fixture_roberta(void **state) {
    (void)state;
    tok_tokenizer *t = NULL;
    as_error err = {0};
    if (tok_load_dir(ROBERTA_DIR, NULL, &t, NULL, &err) != AS_OK) fail_msg("%s", err.msg);
    assert_string_equal(tok_kind_name(t), "bpe");
    assert_int_equal(tok_special_id(t, TOK_SP_CLS), 2000);
    assert_int_equal(tok_special_id(t, TOK_SP_SEP), 2002);
    assert_int_equal(tok_special_id(t, TOK_SP_MASK), 2004);
    assert_int_equal(tok_special_id(t, TOK_SP_PAD), 2001);
    char *d = tok_piece_display(t, tok_piece_to_id(t, "\xc4\xa0the"));
    if (d) assert_string_equal(d, " the");
    free(d);
    check_fixture(t, "roberta tokenizer.json", ROBERTA_FIXTURE, 200);
    tok_free(t);

    char dir[] = "/tmp/as_tok_roberta_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char p1[512], p2[512];
    snprintf(p1, sizeof p1, "%s/vocab.json", dir);
    snprintf(p2, sizeof p2, "%s/merges.txt", dir);
    assert_true(copy_file(ROBERTA_DIR "/vocab.json", p1));
    assert_true(copy_file(ROBERTA_DIR "/merges.txt", p2));
    as_config cfg = {0};
    cfg.arch = ARCH_ROBERTA;
    as_status rc = tok_load_dir(dir, &cfg, &t, NULL, &err);
    unlink(p1);
    unlink(p2);
    rmdir(dir);
    if (rc != AS_OK) fail_msg("%s", err.msg);
    check_fixture(t, "roberta vocab.json + merges.txt", ROBERTA_FIXTURE, 200);
    tok_free(t);
}

/* A tokenizer.json whose model this engine does not implement (Unigram: XLM-R, CamemBERT)
 * is told apart from a bad file, so that the model can still run on token ids. */
static void test_unsupported_model(void **state) {
    (void)state;
    static const struct {
        const char *json, *word;
        int unsupported;
    } cases[] = {
        {"{\"model\":{\"type\":\"Unigram\",\"unk_id\":5,\"vocab\":[[\"<unk>\",0.0],[\"\\u2581a\",-1.0]]}}",
         "unk_id", 0},
        {"{\"model\":{\"type\":\"WordLevel\",\"vocab\":{\"a\":0},\"unk_token\":\"a\"}}", "\"WordLevel\"", 1},
        {"{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "model.vocab", 0},
        {"{\"model\": ", "tokenizer.json", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[] = "/tmp/as_tok_unsup_XXXXXX";
        assert_non_null(mkdtemp(dir));
        char p[512];
        snprintf(p, sizeof p, "%s/tokenizer.json", dir);
        FILE *f = fopen(p, "w");
        assert_non_null(f);
        fputs(cases[i].json, f);
        fclose(f);
        tok_tokenizer *t = NULL;
        as_error err = {0};
        int unsup = -1;
        as_status rc = tok_load_dir(dir, NULL, &t, &unsup, &err);
        unlink(p);
        rmdir(dir);
        assert_int_equal(rc, AS_ERR_INPUT);
        assert_null(t);
        if (!strstr(err.msg, cases[i].word)) fail_msg("case %zu: '%s' not in: %s", i, cases[i].word, err.msg);
        assert_int_equal(unsup, cases[i].unsupported);
    }
}

/* A text of ~512 WordPiece tokens must encode in well under a few milliseconds. */
static void test_speed_512(void **state) {
    (void)state;
    if (!have_shared()) skip();
    tok_tokenizer *t = NULL;
    as_error err = {0};
    if (tok_load_dir(BERT_DIR, NULL, &t, NULL, &err) != AS_OK) fail_msg("%s", err.msg);
    char text[8192] = "";
    while (strlen(text) < 2300)
        strcat(text, "The film's unflinching portrait of grief, régime and Ångström-level "
                     "precision is oddly affecting; 42 viewers agreed. ");
    as_encoding e = {0};
    assert_int_equal(tok_encode(t, text, NULL, 0, 1, &e, &err), AS_OK);
    int n = e.n;
    as_encoding_free(&e);
    assert_true(n >= 450);
    int reps = 200;
    double t0 = as_now();
    for (int i = 0; i < reps; i++) {
        assert_int_equal(tok_encode(t, text, NULL, 512, 1, &e, &err), AS_OK);
        as_encoding_free(&e);
    }
    double us = (as_now() - t0) / reps * 1e6;
    printf("  encode of %d tokens: %.1f us (this build)\n", n, us);
    assert_true(us < 20000.0); /* generous: sanitizer builds are ~10x slower */
    tok_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_tokenizer_json),
        cmocka_unit_test(test_fixture_vocab_txt),
        cmocka_unit_test(test_fixture_roberta),
        cmocka_unit_test(test_unsupported_model),
        cmocka_unit_test(test_speed_512),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
