/* test_wordpiece.c — WordPiece and the tokenizer's loading / dispatch layer on small
 * inline vocabularies: greedy longest-match-first, "##" pieces, [UNK] for unmatched and
 * over-long words, punctuation / CJK splits, accents and byte offsets after
 * normalization, added tokens (lstrip / rstrip / single_word as tokenizers 0.23.2 does
 * them), templates, truncation on / off with exact lengths, invalid UTF-8, malformed
 * files (one-line errors naming the file), and a hostile random-bytes loop.
 * Needs nothing outside the repository (the real-vocabulary parity test is
 * test_tokenizer.c).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tokenize/tokenizer.h"
#include "tokenize/vocab.h"
#include "tokenize/wordpiece.h"

/* ---- helpers ------------------------------------------------------------------ */

typedef struct {
    char dir[64];
    char names[8][64];
    int n;
} tmp_dir;

static void td_init(tmp_dir *td) {
    memset(td, 0, sizeof *td);
    strcpy(td->dir, "/tmp/as_wp_XXXXXX");
    assert_non_null(mkdtemp(td->dir));
}

static void td_path(const tmp_dir *td, const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/%s", td->dir, name);
}

static void td_write(tmp_dir *td, const char *name, const char *content) {
    char p[256];
    td_path(td, name, p, sizeof p);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
    for (int i = 0; i < td->n; i++)
        if (strcmp(td->names[i], name) == 0) return;
    assert_true(td->n < 8);
    strcpy(td->names[td->n++], name);
}

static void td_remove(tmp_dir *td, const char *name) {
    char p[256];
    td_path(td, name, p, sizeof p);
    unlink(p);
    for (int i = 0; i < td->n; i++)
        if (strcmp(td->names[i], name) == 0) {
            memmove(td->names[i], td->names[td->n - 1], sizeof td->names[i]);
            td->n--;
            return;
        }
}

static void td_free(tmp_dir *td) {
    char p[256];
    for (int i = 0; i < td->n; i++) {
        td_path(td, td->names[i], p, sizeof p);
        unlink(p);
    }
    rmdir(td->dir);
}

static const char *k_vocab_json =
    "{\"[PAD]\":0,\"[UNK]\":1,\"[CLS]\":2,\"[SEP]\":3,\"[MASK]\":4,\"un\":5,\"##aff\":6,"
    "\"##able\":7,\"hello\":8,\",\":9,\"world\":10,\"!\":11,\"a\":12,\"##a\":13,\"\xe4\xb8\xad\":14,"
    "\"\xe6\x96\x87\":15,\"cafe\":16,\"naive\":17,\"the\":18,\"sat\":19,\"i\":20,\"b\":21,"
    "\"<x>\":22,\"ab\":23,\"##b\":24,\"x\":25,\"##x\":26,\"<w>\":27}";

/* A BERT-like tokenizer.json over k_vocab_json; post and extra are spliced in. */
static void write_tokenizer_json(tmp_dir *td, const char *normalizer, const char *post) {
    char buf[8192];
    snprintf(buf, sizeof buf,
             "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":["
             "{\"id\":0,\"content\":\"[PAD]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
             "{\"id\":1,\"content\":\"[UNK]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
             "{\"id\":2,\"content\":\"[CLS]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
             "{\"id\":3,\"content\":\"[SEP]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
             "{\"id\":4,\"content\":\"[MASK]\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true},"
             "{\"id\":22,\"content\":\"<x>\",\"single_word\":false,\"lstrip\":true,\"rstrip\":true,\"normalized\":false,\"special\":true},"
             "{\"id\":27,\"content\":\"<w>\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":true}],"
             "\"normalizer\":%s,\"pre_tokenizer\":{\"type\":\"BertPreTokenizer\"},\"post_processor\":%s,"
             "\"decoder\":null,\"model\":{\"type\":\"WordPiece\",\"unk_token\":\"[UNK]\","
             "\"continuing_subword_prefix\":\"##\",\"max_input_chars_per_word\":100,\"vocab\":%s}}",
             normalizer, post, k_vocab_json);
    td_write(td, "tokenizer.json", buf);
}

static const char *k_bert_norm =
    "{\"type\":\"BertNormalizer\",\"clean_text\":true,\"handle_chinese_chars\":true,"
    "\"strip_accents\":null,\"lowercase\":true}";
static const char *k_bert_post =
    "{\"type\":\"BertProcessing\",\"sep\":[\"[SEP]\",3],\"cls\":[\"[CLS]\",2]}";

static tok_tokenizer *load_small(tmp_dir *td) {
    td_init(td);
    write_tokenizer_json(td, k_bert_norm, k_bert_post);
    tok_tokenizer *t = NULL;
    as_error err = {0};
    if (tok_load_dir(td->dir, NULL, &t, NULL, &err) != AS_OK) fail_msg("%s", err.msg);
    return t;
}

/* Encodes with a direct WordPiece call; returns the count, fills ids/offsets. */
typedef struct {
    tok_vocab *v;
    tok_wordpiece_opts o;
} wp_fixture;

static void wp_setup(wp_fixture *f, int lower, int strip) {
    f->v = tok_vocab_new();
    assert_non_null(f->v);
    static const char *const pieces[] = {"[UNK]", "un", "##aff", "##able", "unaff", "hello", ",",
                                         "world", "!", "a", "##a", "\xe4\xb8\xad", "\xe6\x96\x87",
                                         "cafe", "naive", "ab", "##c", "i", "\xcc\x87", "##\xcc\x87",
                                         "Hello", "x", "##x", "angstrom"};
    as_error err = {0};
    for (int i = 0; i < (int)(sizeof pieces / sizeof pieces[0]); i++)
        assert_int_equal(tok_vocab_set(f->v, pieces[i], strlen(pieces[i]), i, &err), AS_OK);
    memset(&f->o, 0, sizeof f->o);
    f->o.clean_text = 1;
    f->o.handle_chinese_chars = 1;
    f->o.lowercase = lower;
    f->o.strip_accents = strip;
    strcpy(f->o.continuing_prefix, "##");
    f->o.max_input_chars_per_word = 100;
    f->o.unk_id = 0;
}

/* expect: "piece start end" triples joined by spaces; compares ids via pieces. */
static void wp_expect(wp_fixture *f, const char *text, size_t len, const char *const *pieces,
                      const int32_t *offs, int n) {
    tok_ids out = {0};
    as_error err = {0};
    assert_int_equal(tok_wordpiece_encode(f->v, &f->o, text, len, &out, &err), AS_OK);
    if (out.n != n) {
        for (int i = 0; i < out.n; i++)
            printf("  got %s [%d,%d)\n", tok_vocab_piece(f->v, out.ids[i]), out.start[i], out.end[i]);
    }
    assert_int_equal(out.n, n);
    for (int i = 0; i < n; i++) {
        assert_string_equal(tok_vocab_piece(f->v, out.ids[i]), pieces[i]);
        assert_int_equal(out.start[i], offs[2 * i]);
        assert_int_equal(out.end[i], offs[2 * i + 1]);
    }
    tok_ids_free(&out);
}

static void wp_teardown(wp_fixture *f) { tok_vocab_free(f->v); }

/* ---- WordPiece model ----------------------------------------------------------- */

static void test_vocab_basics(void **state) {
    (void)state;
    tok_vocab *v = tok_vocab_new();
    as_error err = {0};
    assert_int_equal(tok_vocab_set(v, "abc", 3, 5, &err), AS_OK);
    assert_int_equal(tok_vocab_set(v, "x\0y", 3, 0, &err), AS_OK);
    assert_int_equal(tok_vocab_get(v, "abc", 3), 5);
    assert_int_equal(tok_vocab_get(v, "ab", 2), -1);
    assert_int_equal(tok_vocab_get(v, "x\0y", 3), 0);
    assert_int_equal(tok_vocab_size(v), 6);
    assert_null(tok_vocab_piece(v, 3)); /* a hole */
    assert_null(tok_vocab_piece(v, 6));
    assert_null(tok_vocab_piece(v, -1));
    assert_string_equal(tok_vocab_piece(v, 5), "abc");
    assert_int_equal(tok_vocab_set(v, "dup", 3, 5, &err), AS_ERR_INPUT); /* duplicate id */
    assert_non_null(strstr(err.msg, "duplicate"));
    assert_int_equal(tok_vocab_set(v, "neg", 3, -1, &err), AS_ERR_INPUT);
    assert_int_equal(tok_vocab_set(v, "big", 3, AS_MAX_VOCAB, &err), AS_ERR_INPUT);
    /* A repeated piece maps to its latest id; both ids keep their piece. */
    assert_int_equal(tok_vocab_set(v, "abc", 3, 7, &err), AS_OK);
    assert_int_equal(tok_vocab_get(v, "abc", 3), 7);
    assert_string_equal(tok_vocab_piece(v, 5), "abc");
    assert_int_equal((int)tok_vocab_max_len(v), 3);
    for (int i = 100; i < 5000; i++) { /* forces table growth */
        char p[16];
        int n = snprintf(p, sizeof p, "p%d", i);
        assert_int_equal(tok_vocab_set(v, p, (size_t)n, i, &err), AS_OK);
    }
    assert_int_equal(tok_vocab_get(v, "p4321", 5), 4321);
    assert_int_equal(tok_vocab_get(v, "abc", 3), 7);
    tok_vocab_free(v);
    tok_vocab_free(NULL);
}

static void test_greedy_longest_match(void **state) {
    (void)state;
    wp_fixture f;
    wp_setup(&f, 1, 1);
    /* "unaff" beats "un" + "##aff": longest match first. */
    const char *p1[] = {"unaff", "##able"};
    const int32_t o1[] = {0, 5, 5, 9};
    wp_expect(&f, "unaffable", 9, p1, o1, 2);
    /* "##" pieces after the first; offsets are each piece's substring. */
    const char *p2[] = {"a", "##a", "##a"};
    const int32_t o2[] = {0, 1, 1, 2, 2, 3};
    wp_expect(&f, "aaa", 3, p2, o2, 3);
    /* a word that cannot be fully matched becomes one [UNK] over the whole word */
    const char *p3[] = {"hello", "[UNK]", "world"};
    const int32_t o3[] = {0, 5, 6, 16, 17, 22};
    wp_expect(&f, "hello unaffablez world", 22, p3, o3, 3);
    wp_teardown(&f);
}

static void test_long_words(void **state) {
    (void)state;
    wp_fixture f;
    wp_setup(&f, 1, 1);
    char w[300];
    memset(w, 'a', sizeof w);
    /* exactly 100 chars: 100 pieces */
    tok_ids out = {0};
    as_error err = {0};
    assert_int_equal(tok_wordpiece_encode(f.v, &f.o, w, 100, &out, &err), AS_OK);
    assert_int_equal(out.n, 100);
    assert_int_equal(out.start[99], 99);
    assert_int_equal(out.end[99], 100);
    tok_ids_free(&out);
    /* 101 chars: [UNK] spanning the word */
    assert_int_equal(tok_wordpiece_encode(f.v, &f.o, w, 101, &out, &err), AS_OK);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.ids[0], 0);
    assert_int_equal(out.start[0], 0);
    assert_int_equal(out.end[0], 101);
    tok_ids_free(&out);
    /* 100 two-byte chars (é -> e after stripping) is still 100 chars: not [UNK] by length */
    char e2[201];
    for (int i = 0; i < 100; i++) {
        e2[2 * i] = (char)0xC3;
        e2[2 * i + 1] = (char)0xA9;
    }
    assert_int_equal(tok_wordpiece_encode(f.v, &f.o, e2, 200, &out, &err), AS_OK);
    assert_int_equal(out.n, 1); /* "e..." has no pieces here: one [UNK] over 200 bytes */
    assert_int_equal(out.end[0], 200);
    tok_ids_free(&out);
    wp_teardown(&f);
}

static void test_punct_cjk_accents(void **state) {
    (void)state;
    wp_fixture f;
    wp_setup(&f, 1, 1);
    const char *p1[] = {"hello", ",", "world", "!"};
    const int32_t o1[] = {0, 5, 5, 6, 6, 11, 11, 12};
    wp_expect(&f, "Hello,WORLD!", 12, p1, o1, 4);
    /* CJK ideographs are split off even without spaces */
    const char *p2[] = {"ab", "\xe4\xb8\xad", "\xe6\x96\x87", "a"};
    const int32_t o2[] = {0, 2, 2, 5, 5, 8, 8, 9};
    wp_expect(&f, "ab\xe4\xb8\xad\xe6\x96\x87" "a", 9, p2, o2, 4);
    /* accents stripped; offsets cover the original bytes ("Café" is 5 bytes) */
    const char *p3[] = {"cafe", "naive"};
    const int32_t o3[] = {0, 5, 7, 13};
    wp_expect(&f, "Caf\xc3\xa9  na\xc3\xafve", 13, p3, o3, 2);
    /* a decomposed accent: the dropped mark is outside the token's span */
    const int32_t o4[] = {0, 4};
    const char *p4[] = {"cafe"};
    wp_expect(&f, "cafe\xcc\x81", 6, p4, o4, 1);
    /* "Ångström" (Å = U+00C5, ö = U+00F6) */
    const char *p5[] = {"angstrom"};
    const int32_t o5[] = {0, 10};
    wp_expect(&f, "\xc3\x85ngstr\xc3\xb6m", 10, p5, o5, 1);
    /* control chars and U+0000 removed, the word joins up; tab / CR LF are spaces */
    const char *p6[] = {"hello", "world", "a"};
    const int32_t o6[] = {0, 6, 7, 12, 14, 15};
    wp_expect(&f, "hel\x00lo\tworld\r\na", 15, p6, o6, 3);
    /* zero-width space (Cf) and BOM vanish */
    const char *p7[] = {"hello"};
    const int32_t o7[] = {0, 11};
    wp_expect(&f, "he\xe2\x80\x8bll\xef\xbb\xbfo", 11, p7, o7, 1);
    wp_teardown(&f);
}

static void test_lowercase_options(void **state) {
    (void)state;
    wp_fixture f;
    wp_setup(&f, 0, 0); /* cased */
    const char *p1[] = {"Hello", "[UNK]"};
    const int32_t o1[] = {0, 5, 6, 11};
    wp_expect(&f, "Hello HELLO", 11, p1, o1, 2);
    wp_teardown(&f);
    /* lowercase without stripping: U+0130 becomes "i" + U+0307 (Rust's to_lowercase) */
    wp_setup(&f, 1, 0);
    const char *p2[] = {"i", "##\xcc\x87"};
    const int32_t o2[] = {0, 2, 0, 2};
    wp_expect(&f, "\xc4\xb0", 2, p2, o2, 2);
    wp_teardown(&f);
    /* with stripping, it is just "i" */
    wp_setup(&f, 1, 1);
    const char *p3[] = {"i"};
    const int32_t o3[] = {0, 2};
    wp_expect(&f, "\xc4\xb0", 2, p3, o3, 1);
    wp_teardown(&f);
}

/* ---- tokenizer: loading, templates, added tokens ---------------------------------- */

static void expect_enc(const as_encoding *e, const int32_t *ids, const int32_t *offs, int n) {
    if (e->n != n)
        for (int i = 0; i < e->n; i++)
            printf("  got %d %s [%d,%d)\n", e->ids[i], e->pieces[i], e->start[i], e->end[i]);
    assert_int_equal(e->n, n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(e->ids[i], ids[i]);
        assert_int_equal(e->start[i], offs[2 * i]);
        assert_int_equal(e->end[i], offs[2 * i + 1]);
        assert_int_equal(e->mask[i], 1);
        assert_int_equal(e->seq[i], offs[2 * i] < 0 ? -1 : e->seq[i]);
    }
}

static void test_templates_and_added(void **state) {
    (void)state;
    tmp_dir td;
    tok_tokenizer *t = load_small(&td);
    as_encoding e = {0};
    as_error err = {0};
    assert_string_equal(tok_kind_name(t), "wordpiece");
    assert_int_equal(tok_n_vocab(t), 28);
    assert_int_equal(tok_piece_to_id(t, "[MASK]"), 4);
    assert_int_equal(tok_piece_to_id(t, "nope"), -1);
    assert_string_equal(tok_id_to_piece(t, 6), "##aff");
    assert_null(tok_id_to_piece(t, 28));
    assert_null(tok_id_to_piece(t, -3));
    char *d = tok_piece_display(t, 6);
    assert_string_equal(d, "##aff");
    free(d);
    assert_int_equal(tok_special_id(t, TOK_SP_CLS), 2);
    assert_int_equal(tok_special_id(t, TOK_SP_UNK), 1);
    assert_int_equal(tok_special_id(t, TOK_SP_EOS), -1);

    /* [MASK] in the raw text is one token even though the text is lower-cased */
    assert_int_equal(tok_encode(t, "the [MASK] sat", NULL, 0, 1, &e, &err), AS_OK);
    const int32_t i1[] = {2, 18, 4, 19, 3};
    const int32_t o1[] = {-1, -1, 0, 3, 4, 10, 11, 14, -1, -1};
    expect_enc(&e, i1, o1, 5);
    assert_string_equal(e.pieces[2], "[MASK]");
    assert_int_equal(e.seq[2], 0);
    assert_int_equal(e.n_warnings, 0);
    as_encoding_free(&e);
    /* pair: [CLS] A [SEP] B [SEP], B and its [SEP] type 1, B offsets into text_b */
    assert_int_equal(tok_encode(t, "hello", "world!", 0, 1, &e, &err), AS_OK);
    const int32_t i2[] = {2, 8, 3, 10, 11, 3};
    const int32_t o2[] = {-1, -1, 0, 5, -1, -1, 0, 5, 5, 6, -1, -1};
    expect_enc(&e, i2, o2, 6);
    const int32_t ty[] = {0, 0, 0, 1, 1, 1};
    const int8_t sq[] = {-1, 0, -1, 1, 1, -1};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(e.type_ids[i], ty[i]);
        assert_int_equal(e.seq[i], sq[i]);
    }
    as_encoding_free(&e);
    /* lstrip + rstrip: the token's span takes in the spaces (tokenizers 0.23.2) */
    assert_int_equal(tok_encode(t, "a  <x>  b", NULL, 0, 1, &e, &err), AS_OK);
    const int32_t i3[] = {2, 12, 22, 21, 3};
    const int32_t o3[] = {-1, -1, 0, 1, 1, 8, 8, 9, -1, -1};
    expect_enc(&e, i3, o3, 5);
    as_encoding_free(&e);
    assert_int_equal(tok_encode(t, "a <x><x> b", NULL, 0, 1, &e, &err), AS_OK);
    const int32_t i4[] = {2, 12, 22, 22, 21, 3};
    const int32_t o4[] = {-1, -1, 0, 1, 1, 5, 5, 9, 9, 10, -1, -1};
    expect_enc(&e, i4, o4, 6);
    as_encoding_free(&e);
    /* single_word: only between non-word chars */
    assert_int_equal(tok_encode(t, "a <w> b", NULL, 0, 1, &e, &err), AS_OK);
    const int32_t i5[] = {2, 12, 27, 21, 3};
    const int32_t o5[] = {-1, -1, 0, 1, 2, 5, 6, 7, -1, -1};
    expect_enc(&e, i5, o5, 5);
    as_encoding_free(&e);
    assert_int_equal(tok_encode(t, "a_<w>", NULL, 0, 1, &e, &err), AS_OK);
    assert_int_equal(e.n, 7); /* a _ < w > as WordPiece: a [UNK] [UNK] [UNK] [UNK] */
    for (int i = 2; i < 6; i++) assert_int_equal(e.ids[i], 1);
    as_encoding_free(&e);
    assert_int_equal(tok_encode(t, "<w><w>", NULL, 0, 1, &e, &err), AS_OK);
    assert_int_equal(e.n, 4);
    assert_int_equal(e.ids[1], 27);
    assert_int_equal(e.ids[2], 27);
    as_encoding_free(&e);
    /* as_encoding_free is safe twice and on a zeroed struct */
    as_encoding_free(&e);
    as_encoding z = {0};
    as_encoding_free(&z);
    as_encoding_free(NULL);
    tok_free(t);
    tok_free(NULL);
    td_free(&td);
}

static void test_template_processing_and_defaults(void **state) {
    (void)state;
    tmp_dir td;
    td_init(&td);
    /* a TemplateProcessing with a two-token special and custom type ids */
    write_tokenizer_json(
        &td, "null",
        "{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"[CLS]\",\"type_id\":0}},"
        "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}}],"
        "\"pair\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"[SEP]\",\"type_id\":0}},"
        "{\"Sequence\":{\"id\":\"B\",\"type_id\":2}}],"
        "\"special_tokens\":{\"[CLS]\":{\"id\":\"[CLS]\",\"ids\":[2,4],\"tokens\":[\"[CLS]\",\"[MASK]\"]},"
        "\"[SEP]\":{\"id\":\"[SEP]\",\"ids\":[3],\"tokens\":[\"[SEP]\"]}}}");
    tok_tokenizer *t = NULL;
    as_error err = {0};
    if (tok_load_dir(td.dir, NULL, &t, NULL, &err) != AS_OK) fail_msg("%s", err.msg);
    as_encoding e = {0};
    /* normalizer null: no lower-casing, so "Hello" is [UNK] */
    assert_int_equal(tok_encode(t, "Hello", NULL, 0, 1, &e, &err), AS_OK);
    const int32_t i1[] = {2, 4, 1, 3};
    const int32_t o1[] = {-1, -1, -1, -1, 0, 5, -1, -1};
    expect_enc(&e, i1, o1, 4);
    as_encoding_free(&e);
    assert_int_equal(tok_encode(t, "a", "b", 0, 1, &e, &err), AS_OK);
    const int32_t i2[] = {12, 3, 21};
    const int32_t o2[] = {0, 1, -1, -1, 0, 1};
    expect_enc(&e, i2, o2, 3);
    assert_int_equal(e.type_ids[2], 2);
    as_encoding_free(&e);
    tok_free(t);
    /* post_processor null: the arch default (BERT here, as cfg says) */
    write_tokenizer_json(&td, k_bert_norm, "null");
    as_config cfg = {0};
    cfg.arch = ARCH_BERT;
    if (tok_load_dir(td.dir, &cfg, &t, NULL, &err) != AS_OK) fail_msg("%s", err.msg);
    assert_int_equal(tok_encode(t, "a", "b", 0, 1, &e, &err), AS_OK);
    const int32_t i3[] = {2, 12, 3, 21, 3};
    const int32_t o3[] = {-1, -1, 0, 1, -1, -1, 0, 1, -1, -1};
    expect_enc(&e, i3, o3, 5);
    assert_int_equal(e.type_ids[4], 1);
    as_encoding_free(&e);
    tok_free(t);
    /* GPT-2 arch default: no specials, all type ids 0 */
    cfg.arch = ARCH_GPT2;
    if (tok_load_dir(td.dir, &cfg, &t, NULL, &err) != AS_OK) fail_msg("%s", err.msg);
    assert_int_equal(tok_encode(t, "a", "b", 0, 1, &e, &err), AS_OK);
    const int32_t i4[] = {12, 21};
    const int32_t o4[] = {0, 1, 0, 1};
    expect_enc(&e, i4, o4, 2);
    assert_int_equal(e.type_ids[1], 0);
    assert_int_equal(e.seq[1], 1);
    as_encoding_free(&e);
    tok_free(t);
    /* config vocab_size smaller than the tokenizer's ids: rejected */
    cfg.arch = ARCH_BERT;
    cfg.vocab_size = 10;
    assert_int_equal(tok_load_dir(td.dir, &cfg, &t, NULL, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "vocab_size"));
    assert_null(t);
    td_free(&td);
}

static void test_legacy_vocab_txt(void **state) {
    (void)state;
    tmp_dir td;
    td_init(&td);
    td_write(&td, "vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nHello\n##s\r\nworld\n");
    tok_tokenizer *t = NULL;
    as_error err = {0};
    if (tok_load_dir(td.dir, NULL, &t, NULL, &err) != AS_OK) fail_msg("%s", err.msg);
    assert_int_equal(tok_n_vocab(t), 9);
    as_encoding e = {0};
    assert_int_equal(tok_encode(t, "Hellos [MASK] WORLD", NULL, 0, 1, &e, &err), AS_OK);
    const int32_t i1[] = {2, 5, 7, 4, 8, 3}; /* do_lower_case defaults to true */
    const int32_t o1[] = {-1, -1, 0, 5, 5, 6, 7, 13, 14, 19, -1, -1};
    expect_enc(&e, i1, o1, 6);
    as_encoding_free(&e);
    tok_free(t);
    td_write(&td, "tokenizer_config.json", "{\"do_lower_case\": false}");
    if (tok_load_dir(td.dir, NULL, &t, NULL, &err) != AS_OK) fail_msg("%s", err.msg);
    assert_int_equal(tok_encode(t, "Hello hello", NULL, 0, 1, &e, &err), AS_OK);
    const int32_t i2[] = {2, 6, 5, 3};
    const int32_t o2[] = {-1, -1, 0, 5, 6, 11, -1, -1};
    expect_enc(&e, i2, o2, 4);
    as_encoding_free(&e);
    tok_free(t);
    /* special_tokens_map.json renames the unk token */
    td_write(&td, "special_tokens_map.json", "{\"unk_token\": {\"content\": \"[NOPE]\"}}");
    assert_int_equal(tok_load_dir(td.dir, NULL, &t, NULL, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "[NOPE]"));
    assert_non_null(strstr(err.msg, "vocab.txt"));
    td_free(&td);
}

/* ---- errors ------------------------------------------------------------------------- */

static void expect_load_error(tmp_dir *td, const char *file, const char *content, const char *needle) {
    td_write(td, file, content);
    tok_tokenizer *t = NULL;
    as_error err = {0};
    as_status rc = tok_load_dir(td->dir, NULL, &t, NULL, &err);
    if (rc != AS_ERR_INPUT || !strstr(err.msg, needle) || !strstr(err.msg, file) ||
        strchr(err.msg, '\n'))
        fail_msg("want error with \"%s\" naming %s, got rc %d: %s", needle, file, (int)rc, err.msg);
    assert_null(t);
}

static void test_load_errors(void **state) {
    (void)state;
    tok_tokenizer *t = NULL;
    as_error err = {0};
    assert_int_equal(tok_load_dir("/nonexistent/dir", NULL, &t, NULL, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "/nonexistent/dir"));
    tmp_dir td;
    td_init(&td);
    assert_int_equal(tok_load_dir(td.dir, NULL, &t, NULL, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "no tokenizer files"));
    expect_load_error(&td, "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\",", "bad JSON");
    expect_load_error(&td, "tokenizer.json", "[1, 2]", "not a JSON object");
    expect_load_error(&td, "tokenizer.json", "{\"version\": \"1.0\"}", "missing \"model\"");
    expect_load_error(&td, "tokenizer.json", "{\"model\": {\"type\": \"WordPiece\"}}", "model.vocab");
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", "unk_token");
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": -4}}}", "out of range");
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 99999999}}}", "out of range");
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0, \"a\": 0}}}", "duplicate");
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": \"x\"}}}", "not an integer");
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"WordLevel\", \"vocab\": {\"[UNK]\": 0}}}", "unsupported model");
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0}},"
                      " \"post_processor\": {\"type\": \"Nope\"}}", "unsupported post_processor");
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0}},"
                      " \"added_tokens\": [{\"id\": 0, \"content\": \"[X]\"}]}", "vocabulary gives");
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]},"
                      " \"pre_tokenizer\": {\"type\": \"ByteLevel\"}}", "merges[0]");
    /* BERT template without [CLS]/[SEP]: no defaults to fall back on */
    expect_load_error(&td, "tokenizer.json",
                      "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"[UNK]\": 0}}}", "template");
    /* a file over TOK_MAX_FILE_BYTES (sparse) */
    char p[256];
    td_path(&td, "tokenizer.json", p, sizeof p);
    assert_int_equal(truncate(p, (off_t)TOK_MAX_FILE_BYTES + 1), 0);
    assert_int_equal(tok_load_dir(td.dir, NULL, &t, NULL, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "over the limit"));
    td_remove(&td, "tokenizer.json");
    /* legacy files */
    expect_load_error(&td, "vocab.txt", "a\nb\n", "[UNK]");
    td_remove(&td, "vocab.txt");
    td_write(&td, "merges.txt", "#version: 0.2\na b\n");
    expect_load_error(&td, "vocab.json", "{\"a\": 0, \"b\": 0}", "duplicate");
    expect_load_error(&td, "vocab.json", "{\"a\": 0, \"b\": ", "bad JSON");
    td_write(&td, "vocab.json", "{\"a\": 0, \"b\": 1, \"ab\": 2}");
    expect_load_error(&td, "merges.txt", "#version: 0.2\nab\n", "line 2");
    td_free(&td);
}

static void test_encode_errors_and_truncation(void **state) {
    (void)state;
    tmp_dir td;
    tok_tokenizer *t = load_small(&td);
    as_encoding e = {0};
    as_error err = {0};
    assert_int_equal(tok_encode(t, NULL, NULL, 0, 1, &e, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "text is empty"));
    assert_int_equal(tok_encode(t, "", NULL, 0, 1, &e, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "text is empty"));
    /* whitespace only: tokenized as Hugging Face does (BertTokenizer drops it, leaving
     * [CLS] [SEP]; a pair keeps both [SEP]s) */
    assert_int_equal(tok_encode(t, " \t\r\n\xe3\x80\x80 ", NULL, 0, 1, &e, &err), AS_OK);
    assert_int_equal(e.n, 2);
    assert_string_equal(e.pieces[0], "[CLS]");
    assert_string_equal(e.pieces[1], "[SEP]");
    as_encoding_free(&e);
    assert_int_equal(tok_encode(t, "a", "  ", 0, 1, &e, &err), AS_OK);
    assert_int_equal(e.n, 4);
    assert_string_equal(e.pieces[3], "[SEP]");
    as_encoding_free(&e);
    memset(&e, 0, sizeof e);
    /* single: 8 tokens + 2 specials, max 5 -> 3 tokens kept, with a warning */
    const char *eight = "a a a a a a a a";
    assert_int_equal(tok_encode(t, eight, NULL, 5, 1, &e, &err), AS_OK);
    assert_int_equal(e.n, 5);
    assert_int_equal(e.ids[4], 3);
    assert_int_equal(e.n_warnings, 1);
    assert_non_null(strstr(e.warning, "truncated from 10 to 5"));
    as_encoding_free(&e);
    assert_int_equal(tok_encode(t, eight, NULL, 5, 0, &e, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "10 tokens"));
    assert_non_null(strstr(err.msg, "maximum of 5"));
    assert_int_equal(tok_encode(t, eight, NULL, 10, 0, &e, &err), AS_OK); /* fits exactly */
    assert_int_equal(e.n, 10);
    assert_int_equal(e.n_warnings, 0);
    as_encoding_free(&e);
    assert_int_equal(tok_encode(t, eight, NULL, 0, 0, &e, &err), AS_OK); /* no limit */
    assert_int_equal(e.n, 10);
    as_encoding_free(&e);
    assert_int_equal(tok_encode(t, eight, NULL, -3, 0, &e, &err), AS_OK);
    assert_int_equal(e.n, 10);
    as_encoding_free(&e);
    /* pairs (HF longest_first): A 8, B 4, max 10 -> keep 7 -> A 4, B 3 */
    static const struct {
        int a, b, max, want_a, want_b;
    } cases[] = {{8, 4, 10, 4, 3}, {4, 8, 10, 3, 4}, {8, 8, 10, 3, 4}, {2, 6, 10, 2, 5},
                 {10, 8, 6, 1, 2}, {8, 10, 6, 1, 2}, {20, 1, 8, 4, 1}, {9, 5, 11, 4, 4},
                 {5, 5, 3, 0, 0}, {5, 5, 2, 0, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char ta[64] = "", tb[64] = "";
        for (int i = 0; i < cases[c].a; i++) strcat(ta, "a ");
        for (int i = 0; i < cases[c].b; i++) strcat(tb, "b ");
        assert_int_equal(tok_encode(t, ta, tb, cases[c].max, 1, &e, &err), AS_OK);
        int na = 0, nb = 0;
        for (int i = 0; i < e.n; i++) {
            na += e.seq[i] == 0;
            nb += e.seq[i] == 1;
        }
        if (na != cases[c].want_a || nb != cases[c].want_b)
            fail_msg("A %d B %d max %d: got %d %d, want %d %d", cases[c].a, cases[c].b,
                     cases[c].max, na, nb, cases[c].want_a, cases[c].want_b);
        assert_int_equal(e.n, na + nb + 3);
        assert_int_equal(e.ids[e.n - 1], 3);
        as_encoding_free(&e);
        assert_int_equal(tok_encode(t, ta, tb, cases[c].max, 0, &e, &err), AS_ERR_INPUT);
    }
    /* too long a text */
    size_t big = TOK_MAX_TEXT_BYTES + 1;
    char *huge = malloc(big + 1);
    memset(huge, 'a', big);
    huge[big] = 0;
    assert_int_equal(tok_encode(t, huge, NULL, 0, 1, &e, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "over the limit"));
    free(huge);
    tok_free(t);
    td_free(&td);
}

static void test_invalid_utf8(void **state) {
    (void)state;
    tmp_dir td;
    tok_tokenizer *t = load_small(&td);
    as_encoding e = {0};
    as_error err = {0};
    /* a bad byte inside a word: U+FFFD, which clean_text removes -> "ab" spans it */
    assert_int_equal(tok_encode(t, "a\xff" "b hello", NULL, 0, 1, &e, &err), AS_OK);
    const int32_t i1[] = {2, 23, 8, 3};
    const int32_t o1[] = {-1, -1, 0, 3, 4, 9, -1, -1};
    expect_enc(&e, i1, o1, 4);
    assert_int_equal(e.n_warnings, 1);
    assert_non_null(strstr(e.warning, "invalid UTF-8"));
    as_encoding_free(&e);
    /* truncated sequences, overlong forms, surrogates, a lone continuation byte */
    const char *bad[] = {"hello \xc3", "\xe2\x82 hello", "\xc0\xaf hello", "\xed\xa0\x80 hello",
                         "\x80hello", "hello\xf4\x90\x80\x80", "\xf0\x9f\x98 a"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        assert_int_equal(tok_encode(t, bad[k], NULL, 0, 1, &e, &err), AS_OK);
        assert_true(e.n_warnings >= 1);
        size_t len = strlen(bad[k]);
        for (int i = 0; i < e.n; i++) {
            if (e.seq[i] < 0) continue;
            assert_true(e.start[i] >= 0 && e.start[i] <= e.end[i] && (size_t)e.end[i] <= len);
        }
        as_encoding_free(&e);
    }
    /* only invalid bytes: not "empty", just no tokens between the specials */
    assert_int_equal(tok_encode(t, "\xff\xfe", NULL, 0, 1, &e, &err), AS_OK);
    assert_int_equal(e.n, 2);
    as_encoding_free(&e);
    /* NUL bytes through the length-taking entry point */
    assert_int_equal(tok_encode_n(t, "hel\0lo", 6, NULL, 0, 0, 1, &e, &err), AS_OK);
    const int32_t i2[] = {2, 8, 3};
    const int32_t o2[] = {-1, -1, 0, 6, -1, -1};
    expect_enc(&e, i2, o2, 3);
    as_encoding_free(&e);
    tok_free(t);
    td_free(&td);
}

/* ---- hostile input ------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

static void fill_hostile(char *buf, size_t n) {
    static const char *const frags[] = {"[MASK]", "<x>", "<w>", " ", "\xe4\xb8\xad", "\xcc\x81",
                                        "\xc3\xa9", "##", "a", "\xef\xbb\xbf", "\xf0\x9f\x98\x80",
                                        "\xc4\xb0", "[", "<", "\t", "\xe2\x80\x8b"};
    size_t i = 0;
    while (i < n) {
        uint32_t r = rnd() % 4;
        if (r == 0) {
            const char *f = frags[rnd() % (sizeof frags / sizeof frags[0])];
            size_t k = strlen(f);
            if (i + k > n) k = n - i;
            memcpy(buf + i, f, k);
            i += k;
        } else {
            unsigned char b = (unsigned char)(rnd() & 0xFF);
            buf[i++] = (char)(b ? b : 'z');
        }
    }
    buf[n] = 0;
}

static void test_hostile_input(void **state) {
    (void)state;
    tmp_dir td;
    tok_tokenizer *t = load_small(&td);
    char *a = malloc(4097), *b = malloc(4097);
    int n_ok = 0;
    for (int it = 0; it < 3000; it++) {
        size_t la = rnd() % (it % 10 == 0 ? 4096 : 64), lb = rnd() % 64;
        fill_hostile(a, la);
        fill_hostile(b, lb);
        int max_len = (int)(rnd() % 40) - 5;
        int trunc = (int)(rnd() % 2);
        as_encoding e = {0};
        as_error err = {0};
        as_status rc = tok_encode(t, a, (rnd() % 3 == 0) ? b : NULL, max_len, trunc, &e, &err);
        assert_true(rc == AS_OK || rc == AS_ERR_INPUT);
        if (rc != AS_OK) {
            assert_true(err.msg[0] != 0);
            assert_null(e.ids);
            continue;
        }
        n_ok++;
        if (max_len > 0 && trunc && e.n > 3) assert_true(e.n <= max_len);
        for (int i = 0; i < e.n; i++) {
            assert_true(e.ids[i] >= 0 && e.ids[i] < tok_n_vocab(t));
            assert_non_null(e.pieces[i]);
            if (e.seq[i] < 0) {
                assert_int_equal(e.start[i], -1);
                continue;
            }
            size_t len = strlen(e.seq[i] == 0 ? a : b);
            assert_true(e.start[i] >= 0 && e.start[i] <= e.end[i] && (size_t)e.end[i] <= len);
        }
        as_encoding_free(&e);
        tok_ids raw = {0};
        rc = tok_encode_raw(t, a, &raw, &err);
        assert_int_equal(rc, AS_OK);
        tok_ids_free(&raw);
    }
    printf("  hostile loop: 3000 inputs, %d encoded, none crashed\n", n_ok);
    assert_true(n_ok > 1000);
    free(a);
    free(b);
    tok_free(t);
    td_free(&td);
}

/* Long words and long texts stay linear: 1 MB each in well under a second. */
static void test_no_quadratic(void **state) {
    (void)state;
    tmp_dir td;
    tok_tokenizer *t = load_small(&td);
    size_t n = 1u << 20;
    char *s = malloc(n + 1);
    as_encoding e = {0};
    as_error err = {0};
    memset(s, 'a', n); /* one 1 MB word: [UNK] */
    s[n] = 0;
    double t0 = as_now();
    assert_int_equal(tok_encode(t, s, NULL, 0, 1, &e, &err), AS_OK);
    assert_int_equal(e.n, 3);
    as_encoding_free(&e);
    for (size_t i = 0; i < n; i++) s[i] = (i % 101 == 100) ? ' ' : 'a'; /* 100-char words */
    assert_int_equal(tok_encode(t, s, NULL, 0, 1, &e, &err), AS_OK);
    assert_true(e.n > (int)(n / 101) * 99);
    as_encoding_free(&e);
    for (size_t i = 0; i < n; i++) s[i] = "[MASK<x"[i % 7]; /* near-misses of added tokens */
    assert_int_equal(tok_encode(t, s, NULL, 0, 1, &e, &err), AS_OK);
    as_encoding_free(&e);
    double dt = as_now() - t0;
    printf("  3 x 1 MB texts: %.2f s\n", dt);
    assert_true(dt < 20.0); /* sanitizer builds; a quadratic path would take hours */
    free(s);
    tok_free(t);
    td_free(&td);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_basics),
        cmocka_unit_test(test_greedy_longest_match),
        cmocka_unit_test(test_long_words),
        cmocka_unit_test(test_punct_cjk_accents),
        cmocka_unit_test(test_lowercase_options),
        cmocka_unit_test(test_templates_and_added),
        cmocka_unit_test(test_template_processing_and_defaults),
        cmocka_unit_test(test_legacy_vocab_txt),
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_encode_errors_and_truncation),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_hostile_input),
        cmocka_unit_test(test_no_quadratic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
