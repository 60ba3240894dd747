/* test_conllu.c — CoNLL-U reader (src/io/conllu.c) and the SST-2 TSV reader
 * (src/io/tsv.c): words, heads, relations, multi-word tokens ("didn't" = did + n't,
 * aligned as sub-spans; a non-concatenating one gives the first word the whole span),
 * empty nodes skipped, the text rebuilt when "# text" is missing, the token -> word map
 * (a token spanning words belongs to the word of its start byte), limits, and malformed
 * input rejected with "file:line: what". The real UD EWT dev file (../shared) is read
 * whole when present: 2,001 sentences, every word aligned.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "io/conllu.h"
#include "io/tsv.h"
#include "core/file.h"

#define EWT AS_SOURCE_DIR "/../shared/data/ud/en_ewt-ud-dev.conllu"
#define SST AS_SOURCE_DIR "/../shared/data/sst2/dev.tsv"

static const char *DOC =
    "# newdoc id = x\n"
    "# sent_id = s1\n"
    "# text = The cat didn't sit.\n"
    "1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n"
    "2\tcat\tcat\tNOUN\tNN\t_\t5\tnsubj\t_\t_\n"
    "3-4\tdidn't\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "3\tdid\tdo\tAUX\tVBD\t_\t5\taux\t_\t_\n"
    "4\tn't\tnot\tPART\tRB\t_\t5\tadvmod\t_\t_\n"
    "5\tsit\tsit\tVERB\tVB\t_\t0\troot\t_\tSpaceAfter=No\n"
    "5.1\tsat\tsit\tVERB\tVB\t_\t_\t_\t2:x\t_\n"
    "6\t.\t.\tPUNCT\t.\t_\t5\tpunct\t_\t_\n"
    "\n"
    "# sent_id = s2\n"
    "1-2\tdel\t_\t_\t_\t_\t_\t_\t_\t_\n"
    "1\tde\tde\tADP\tIN\t_\t3\tcase\t_\t_\n"
    "2\tel\tel\tDET\tDT\t_\t3\tdet\t_\t_\n"
    "3\tmundo\tmundo\tNOUN\tNN\t_\t0\troot\t_\tSpaceAfter=No\n"
    "4\t!\t!\tPUNCT\t.\t_\t3\tpunct\t_\t_\n";

static void test_parse_mwt(void **state) {
    (void)state;
    cu_corpus c;
    as_error err = {0};
    assert_int_equal(cu_parse("doc.conllu", DOC, strlen(DOC), 0, &c, &err), AS_OK);
    assert_int_equal(c.n, 2);
    cu_sentence *s = &c.s[0];
    assert_string_equal(s->text, "The cat didn't sit.");
    assert_string_equal(s->sent_id, "s1");
    assert_int_equal(s->n_words, 6);
    const int heads[6] = {1, 4, 4, 4, -1, 4};
    const int spans[6][2] = {{0, 3}, {4, 7}, {8, 11}, {11, 14}, {15, 18}, {18, 19}};
    for (int w = 0; w < 6; w++) {
        assert_int_equal(s->words[w].head, heads[w]);
        assert_int_equal(s->words[w].start, spans[w][0]);
        assert_int_equal(s->words[w].end, spans[w][1]);
    }
    assert_string_equal(s->words[3].form, "n't");
    assert_string_equal(s->words[3].deprel, "advmod");
    assert_int_equal(s->words[3].line, 8);
    /* no "# text": rebuilt from the surface forms and SpaceAfter=No; "del" != "de"+"el" */
    s = &c.s[1];
    assert_string_equal(s->text, "del mundo!");
    assert_int_equal(s->words[0].start, 0);
    assert_int_equal(s->words[0].end, 3);
    assert_int_equal(s->words[1].start, -1);
    assert_int_equal(s->words[2].start, 4);
    assert_int_equal(s->words[3].start, 9);
    /* tokens -> words: "didn" (8..12) spans did|n't -> did; "'t" (12..14) -> n't;
     * a special (-1) -> none */
    int32_t start[5] = {-1, 4, 8, 12, 18};
    int word[5];
    cu_token_words(&c.s[0], start, 5, word);
    const int want[5] = {-1, 1, 2, 3, 5};
    for (int t = 0; t < 5; t++) assert_int_equal(word[t], want[t]);
    cu_corpus_free(&c);
    assert_int_equal(cu_parse("doc.conllu", DOC, strlen(DOC), 1, &c, &err), AS_OK);
    assert_int_equal(c.n, 1);
    cu_corpus_free(&c);
}

static void expect_bad(const char *text, const char *pat) {
    cu_corpus c;
    as_error err = {0};
    assert_int_equal(cu_parse("bad.conllu", text, strlen(text), 0, &c, &err), AS_ERR_INPUT);
    cu_corpus_free(&c);
    if (!strstr(err.msg, pat)) {
        fprintf(stderr, "'%s' lacks '%s'\n", err.msg, pat);
        fail();
    }
}

static void test_malformed(void **state) {
    (void)state;
    expect_bad("# text = a\n1\ta\ta\tX\tX\t_\t0\troot\t_\n", "bad.conllu:2: expected 10 tab-separated fields, found 9");
    expect_bad("# text = a b\n1\ta\ta\tX\tX\t_\t0\troot\t_\t_\n3\tb\tb\tX\tX\t_\t1\tdep\t_\t_\n", "bad.conllu:3: ID '3' out of sequence");
    expect_bad("# text = a b\n1\ta\ta\tX\tX\t_\t0\troot\t_\t_\n2\tb\tb\tX\tX\t_\t9\tdep\t_\t_\n", "bad.conllu:3: HEAD 9 is beyond");
    expect_bad("# text = a\n1\ta\ta\tX\tX\t_\tx\troot\t_\t_\n", "bad.conllu:2: HEAD 'x'");
    /* quoted fields carry no raw control bytes */
    expect_bad("# text = a\n1\ta\ta\tX\tX\t_\tx\x1b[2J\troot\t_\t_\n", "bad.conllu:2: HEAD 'x\\x1b[2J'");
    expect_bad("# text = a\n1\ta\ta\tX\tX\t_\t0\t_\t_\t_\n", "bad.conllu:2: DEPREL");
    expect_bad("# text = a c\n1\ta\ta\tX\tX\t_\t0\troot\t_\t_\n2\tb\tb\tX\tX\t_\t1\tdep\t_\t_\n", "bad.conllu:3: form 'b' is not in the sentence text");
    expect_bad("# text = ab\n1-3\tab\t_\t_\t_\t_\t_\t_\t_\t_\n1\ta\ta\tX\tX\t_\t0\troot\t_\t_\n2\tb\tb\tX\tX\t_\t1\tdep\t_\t_\n\n", "range 1-3 is beyond");
    expect_bad("# text = a\n1\ta\ta\tX\tX\t_\t1\troot\t_\t_\n", "its own HEAD");
}

static void test_ewt(void **state) {
    (void)state;
    FILE *f = fopen(EWT, "r");
    if (!f) {
        printf("skip: %s absent (../shared)\n", EWT);
        skip();
    }
    fclose(f);
    cu_corpus c;
    as_error err = {0};
    assert_int_equal(cu_read(EWT, 0, &c, &err), AS_OK);
    assert_int_equal(c.n, 2001);
    int words = 0, unaligned = 0;
    for (int i = 0; i < c.n; i++)
        for (int w = 0; w < c.s[i].n_words; w++) {
            words++;
            unaligned += c.s[i].words[w].start < 0;
            if (c.s[i].words[w].start >= 0)
                assert_memory_equal(c.s[i].text + c.s[i].words[w].start, c.s[i].words[w].form,
                                    (size_t)(c.s[i].words[w].end - c.s[i].words[w].start));
        }
    assert_int_equal(words, 25147);
    assert_int_equal(unaligned, 0);
    cu_corpus_free(&c);
}

static void test_tsv(void **state) {
    (void)state;
    const char *ok = "sentence\tlabel\r\nit 's good . \t1\r\n\r\nbad\t0";
    tsv_corpus c;
    as_error err = {0};
    assert_int_equal(tsv_parse_sst2("t.tsv", ok, strlen(ok), 0, &c, &err), AS_OK);
    assert_int_equal(c.n, 2);
    assert_string_equal(c.rows[0].text, "it 's good . ");
    assert_int_equal(c.rows[0].label, 1);
    assert_int_equal(c.rows[1].line, 4);
    assert_int_equal(c.rows[1].label, 0);
    tsv_corpus_free(&c);
    static const char *bad[][2] = {
        {"index\tsentence\n0\tx\n", "t.tsv:1: expected the header"},
        {"sentence\tlabel\nx\t1\ty\n", "t.tsv:2: expected 2 tab-separated fields"},
        {"sentence\tlabel\nx\n", "t.tsv:2: expected 2"},
        {"sentence\tlabel\nx\t-1\n", "t.tsv:2: label '-1'"},
        {"sentence\tlabel\n  \t1\n", "t.tsv:2: empty sentence"},
        {"", "t.tsv: empty file"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(tsv_parse_sst2("t.tsv", bad[i][0], strlen(bad[i][0]), 0, &c, &err), AS_ERR_INPUT);
        tsv_corpus_free(&c);
        if (!strstr(err.msg, bad[i][1])) {
            fprintf(stderr, "'%s' lacks '%s'\n", err.msg, bad[i][1]);
            fail();
        }
    }
    /* a UTF-8 byte-order mark (as Excel and Notepad write) is skipped */
    const char *bom = "\xEF\xBB\xBFsentence\tlabel\r\ngood\t1\r\n";
    assert_int_equal(tsv_parse_sst2("t.tsv", bom, strlen(bom), 0, &c, &err), AS_OK);
    assert_int_equal(c.n, 1);
    assert_string_equal(c.rows[0].text, "good");
    tsv_corpus_free(&c);
    /* the file's bytes are quoted with every non-printable or non-ASCII byte as \xNN:
     * nothing raw reaches the terminal, and a BOM-like prefix is visible */
#define RAW(in, want) {in, sizeof in - 1, want}
    static const struct {
        const char *in;
        size_t len;
        const char *want;
    } raw[] = {
        RAW("\x89PNG\r\n\x1a\n\x01\x02", "t.tsv:1: expected the header 'sentence<TAB>label', found '\\x89PNG'"),
        RAW("\xC2\xA0sentence\tlabel\n", "found '\\xc2\\xa0sentence\\x09label'"),
        RAW("\xEF\xBB\xBF\xEF\xBB\xBFsentence\tlabel\n", "found '\\xef\\xbb\\xbfsentence\\x09label'"),
        RAW("sentence\tlabel\nx\t\xff\x1b[2J\n", "t.tsv:2: label '\\xff\\x1b[2J'"),
        RAW("sentence\tlabel\n\x7f\x00" "ELF\n", "t.tsv:2: NUL byte (binary data"),
        RAW("\xFF\xFEs\x00" "e\x00", "t.tsv: UTF-16 text (byte-order mark FF FE)"),
    };
#undef RAW
    for (size_t i = 0; i < sizeof raw / sizeof *raw; i++) {
        assert_int_equal(tsv_parse_sst2("t.tsv", raw[i].in, raw[i].len, 0, &c, &err), AS_ERR_INPUT);
        tsv_corpus_free(&c);
        if (!strstr(err.msg, raw[i].want)) {
            fprintf(stderr, "'%s' lacks '%s'\n", err.msg, raw[i].want);
            fail();
        }
        for (const char *m = err.msg; *m; m++) assert_true(*m >= 0x20 && *m < 0x7f);
    }
    char q[16];
    assert_string_equal(as_quote_bytes(q, sizeof q, "abc\tdefghijklmnop", 17), "abc\\x09defgh...");
    assert_string_equal(as_quote_bytes(q, sizeof q, "", 0), "");
    /* words in any script show as themselves; look-alike spaces, invisible format
     * characters, C1 controls and invalid UTF-8 are escaped */
    char q2[96];
    assert_string_equal(as_quote_bytes(q2, sizeof q2, "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd", 12), "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd");
    assert_string_equal(as_quote_bytes(q2, sizeof q2, "a\xc2\xa0" "b\xe2\x80\x8b" "c\xef\xbb\xbf" "d\xc2\x85" "e\xe4\xbd", 17),
                        "a\\xc2\\xa0b\\xe2\\x80\\x8bc\\xef\\xbb\\xbfd\\xc2\\x85e\\xe4\\xbd");
    /* a character is never cut by the "..." */
    assert_string_equal(as_quote_bytes(q, 9, "ab\xe4\xbd\xa0\xe5\xa5\xbd", 8), "ab\xe4\xbd\xa0...");
    FILE *f = fopen(SST, "r");
    if (!f) {
        printf("skip: %s absent (../shared)\n", SST);
        return;
    }
    fclose(f);
    assert_int_equal(tsv_read_sst2(SST, 0, &c, &err), AS_OK);
    assert_int_equal(c.n, 872);
    int pos = 0;
    for (int i = 0; i < c.n; i++) pos += c.rows[i].label;
    assert_int_equal(pos, 444);
    tsv_corpus_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_mwt),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_ewt),
        cmocka_unit_test(test_tsv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
