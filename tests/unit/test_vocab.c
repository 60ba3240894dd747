/* test_vocab.c — the WordPiece vocabulary trainer (src/train/vocab_train.c) and the
 * held-out sentence filter (src/train/data.c) on a small corpus:
 *   - the specials sit at ids 0..4, every character and its ## form is present, the
 *     size is respected, two runs write identical files;
 *   - the engine's tokenizer (tok_load_dir on a folder with the vocab.txt, and again
 *     with the written tokenizer.json) encodes held-out text with < 2% [UNK] and the
 *     two agree;
 *   - SST-2 style and raw sentences share one filter key; filtered sentences are gone;
 *   - masked-LM batches (data_mlm_batch_make): [CLS] A [SEP] B [SEP] layout, segment ids,
 *     padding, round(p x tokens) predictions per pair at p = 0.15 and 0.4, 80/10/10
 *     replacement, and B following A in about half the pairs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "tokenize/tokenizer.h"
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

static const char *TRAIN =
    "The quick brown fox jumps over the lazy dog.\n"
    "A charming and often affecting journey, it's a film about friendship.\n"
    "The actors are wonderful; the story is thin but the direction is sure-footed.\n"
    "Nothing in this movie works: the jokes fall flat and the pacing is dreadful.\n"
    "Shall I compare thee to a summer's day? Thou art more lovely and more temperate.\n"
    "Rough winds do shake the darling buds of May, and summer's lease hath all too short a date.\n"
    "An uneasy mishmash of styles and genres.\n"
    "\n"
    "Émile's café served crème brûlée to the directors and the writers.\n"
    "Writers write; directors direct; actors act, and audiences watch the acting.\n";

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *slurp(const char *path) {
    char *buf = NULL;
    size_t n = 0;
    as_error err = {0};
    if (as_read_file(path, 1 << 20, &buf, &n, &err)) fail_msg("%s", err.msg);
    return buf;
}

static void test_vocab_train(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/as_test_vocab_XXXXXX");
    assert_non_null(mkdtemp(dir));
    char cp[512], v1[512], v2[512], tdir[512], tdir2[512];
    snprintf(cp, sizeof cp, "%s/corpus.txt", dir);
    snprintf(v1, sizeof v1, "%s/v1.txt", dir);
    snprintf(v2, sizeof v2, "%s/v2.txt", dir);
    write_file(cp, TRAIN);
    const char *files[1] = {cp};
    vocab_train_opts o = {.size = 200, .min_char_count = 1};
    int n1 = 0, n2 = 0;
    as_error err = {0};
    if (vocab_train_run(files, 1, &o, v1, &n1, &err)) fail_msg("%s", err.msg);
    if (vocab_train_run(files, 1, &o, v2, &n2, &err)) fail_msg("%s", err.msg);
    assert_int_equal(n1, n2);
    assert_true(n1 <= 200 && n1 > 150);
    char *a = slurp(v1), *b = slurp(v2);
    assert_string_equal(a, b);
    assert_true(!strncmp(a, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n", 30));
    /* every character of the normalised corpus and its ## form: spot checks */
    static const char *need[] = {"\na\n", "\n##a\n", "\ne\n", "\n##e\n", "\n.\n", "\n'\n", "\nz\n", "\n##z\n"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!strstr(a, need[i])) fail_msg("vocabulary lacks %s", need[i] + 1);
    assert_null(strstr(a, "\nÉ\n")); /* accents stripped, lower-cased */
    assert_non_null(strstr(a, "\nthe\n"));
    printf("vocabulary: %d tokens, identical across runs\n", n1);
    free(a);
    free(b);

    /* the engine's tokenizer on held-out text, from vocab.txt and from tokenizer.json */
    snprintf(tdir, sizeof tdir, "%s/tok", dir);
    snprintf(tdir2, sizeof tdir2, "%s/tok2", dir);
    if (vocab_train_write_tokenizer(v1, tdir, 128, &err)) fail_msg("%s", err.msg);
    if (vocab_train_write_tokenizer(v1, tdir2, 128, &err)) fail_msg("%s", err.msg);
    char tj[600];
    snprintf(tj, sizeof tj, "%s/tokenizer.json", tdir2);
    assert_int_equal(unlink(tj), 0);
    as_config cfg = {0};
    cfg.arch = ARCH_BERT;
    snprintf(cfg.model_type, sizeof cfg.model_type, "bert");
    cfg.vocab_size = n1;
    cfg.max_pos = 128;
    cfg.type_vocab = 2;
    cfg.pad_token_id = 0;
    tok_tokenizer *t1 = NULL, *t2 = NULL;
    if (tok_load_dir(tdir, &cfg, &t1, NULL, &err)) fail_msg("%s", err.msg);
    if (tok_load_dir(tdir2, &cfg, &t2, NULL, &err)) fail_msg("%s", err.msg);
    const char *held = "The directors shake the darling film; thou art a lovely writer, and the story works.";
    as_encoding e1 = {0}, e2 = {0};
    if (tok_encode(t1, held, "It's summer.", 128, 1, &e1, &err)) fail_msg("%s", err.msg);
    if (tok_encode(t2, held, "It's summer.", 128, 1, &e2, &err)) fail_msg("%s", err.msg);
    assert_int_equal(e1.n, e2.n);
    assert_memory_equal(e1.ids, e2.ids, (size_t)e1.n * sizeof(int32_t));
    assert_int_equal(e1.ids[0], VOCAB_TRAIN_CLS);
    assert_int_equal(e1.ids[e1.n - 1], VOCAB_TRAIN_SEP);
    int unk = 0, sep_b = 0;
    for (int i = 0; i < e1.n; i++) {
        unk += e1.ids[i] == VOCAB_TRAIN_UNK;
        sep_b += e1.type_ids[i];
    }
    printf("held-out text: %d tokens, %d [UNK]\n", e1.n, unk);
    assert_true(unk * 50 < e1.n);
    assert_true(sep_b > 0);
    as_encoding_free(&e1);
    as_encoding_free(&e2);
    tok_free(t1);
    tok_free(t2);

    /* too small for the alphabet: a clear error */
    o.size = 64;
    assert_int_equal(vocab_train_run(files, 1, &o, v1, &n1, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "characters"));
    const char *bad[1] = {"/nonexistent/x.txt"};
    o.size = 200;
    assert_int_equal(vocab_train_run(bad, 1, &o, v1, &n1, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "/nonexistent/x.txt"));
}

static void test_filter(void **state) {
    (void)state;
    char *k1 = data_sentence_key("It's (sic) a CHARMING, often affecting journey.");
    char *k2 = data_sentence_key("it 's -lrb- sic -rrb- a charming , often affecting journey . ");
    assert_non_null(k1);
    assert_string_equal(k1, k2);
    assert_string_equal(k1, "itssicacharmingoftenaffectingjorney");
    free(k1);
    free(k2);
    k1 = data_sentence_key("He has not learnt that humour is what the movies are about.");
    k2 = data_sentence_key("he has not learned that humor is what the movies are about . ");
    assert_string_equal(k1, k2);
    free(k1);
    free(k2);
    char cp[512], ex[512];
    snprintf(cp, sizeof cp, "%s/corpus.txt", dir);
    snprintf(ex, sizeof ex, "%s/dev.tsv", dir);
    write_file(ex, "sentence\tlabel\nan uneasy mishmash of styles and genres . \t0\n"
                   "the actors are wonderful ; the story is thin \t1\n");
    data_text t = {0};
    const char *files[1] = {cp}, *excl[1] = {ex};
    int dropped = 0;
    as_error err = {0};
    if (data_read_corpus(files, 1, excl, 1, &t, &dropped, &err)) fail_msg("%s", err.msg);
    /* the exact sentence and the sentence that contains a >= 24-character key */
    assert_int_equal(dropped, 2);
    assert_int_equal(t.n, 7);
    for (int i = 0; i < t.n; i++) assert_null(strstr(t.text[i], "mishmash"));
    assert_int_equal(t.doc[t.n - 1], 1); /* the blank line starts document 1 */
    data_text_free(&t);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

/* A synthetic corpus: 40 documents of 6 sentences; sentence s holds tokens
 * 1000 + 10 s + i (i < its length 3..9), so a token tells its sentence. */
static void synthetic_corpus(data_corpus *c, int32_t *off, int32_t *len, int32_t *doc, int32_t *tok) {
    size_t n = 0;
    for (int s = 0; s < 240; s++) {
        off[s] = (int32_t)n;
        len[s] = 3 + s % 7;
        doc[s] = s / 6;
        for (int i = 0; i < len[s]; i++) tok[n++] = 1000 + 10 * s + i;
    }
    *c = (data_corpus){.n_sent = 240, .off = off, .len = len, .doc = doc, .tok = tok, .n_tok = n};
}

static void test_mlm_batch(void **state) {
    (void)state;
    static int32_t off[240], len[240], doc[240], tok[240 * 10];
    data_corpus c;
    synthetic_corpus(&c, off, len, doc, tok);
    const int B = 64, T = 40, V = 4000;
    data_mlm_batch mb;
    as_error err = {0};
    assert_int_equal(data_mlm_batch_init(&mb, B, 4, &err), AS_ERR_INPUT); /* T < 8 */
    if (data_mlm_batch_init(&mb, B, T, &err)) fail_msg("%s", err.msg);
    const float probs[2] = {0.15f, 0.4f};
    for (int pi = 0; pi < 2; pi++) {
        mb.mask_prob = probs[pi];
        int n_mask = 0, n_kept = 0, n_pred = 0, n_next = 0, n_next_said = 0;
        for (int round = 0; round < 20; round++) {
            train_rng rng = train_rng_seeded(7, (uint64_t)(round + 100 * pi));
            data_mlm_batch_make(&mb, &c, B, V, &rng);
            assert_int_equal(mb.b, B);
            assert_true(mb.t <= T);
            assert_true(mb.n_pred <= data_max_predictions(B, T, probs[pi]));
            int preds = 0;
            for (int q = 0; q < B; q++) {
                const int32_t *ids = mb.ids + (size_t)q * mb.t, *ty = mb.type_ids + (size_t)q * mb.t;
                const int32_t *mk = mb.mask + (size_t)q * mb.t, *lb = mb.labels + (size_t)q * mb.t;
                int n = 0, seps[2], ns = 0, content = 0, row_pred = 0, last_a = -1, first_b = -1;
                while (n < mb.t && mk[n]) n++;
                for (int i = n; i < mb.t; i++) assert_int_equal(mk[i], 0), assert_int_equal(ids[i], VOCAB_TRAIN_PAD);
                assert_int_equal(ids[0], VOCAB_TRAIN_CLS);
                for (int i = 0; i < n; i++) {
                    if (ids[i] == VOCAB_TRAIN_SEP && lb[i] == TRAIN_IGNORE) {
                        assert_true(ns < 2);
                        seps[ns++] = i;
                    }
                    if (i > 0 && ids[i] != VOCAB_TRAIN_SEP) content++;
                    /* segment 0 through the first [SEP], then 1 */
                    assert_int_equal(ty[i], ns == 0 || (ns == 1 && i == seps[0]) ? 0 : 1);
                    int32_t orig = lb[i] >= 0 ? lb[i] : ids[i];
                    if (lb[i] >= 0) {
                        row_pred++;
                        assert_true(orig >= 1000);
                        if (ids[i] == VOCAB_TRAIN_MASK) n_mask++;
                        else if (ids[i] == orig) n_kept++;
                        else assert_true(ids[i] >= VOCAB_TRAIN_N_SPECIAL && ids[i] < V);
                    }
                    if (orig >= 1000 && ns == 0) last_a = orig;
                    if (orig >= 1000 && ns == 1 && first_b < 0) first_b = orig;
                }
                assert_int_equal(ns, 2);
                assert_int_equal(seps[1], n - 1);
                assert_int_equal(row_pred, (int)(probs[pi] * content + 0.5) < 1 ? 1 : (int)(probs[pi] * content + 0.5));
                preds += row_pred;
                /* A ends a sentence; B follows it when its first token starts the next one */
                int sa = (last_a - 1000) / 10, sb = (first_b - 1000) / 10;
                n_next += (first_b - 1000) % 10 == 0 && sb == sa + 1 && doc[sb] == doc[sa];
            }
            assert_int_equal(preds, mb.n_pred);
            n_pred += preds;
            n_next_said += mb.n_next;
        }
        /* 80% [MASK], 10% kept (+ the random draws that hit the token: negligible) */
        assert_in_range(n_mask * 1000 / n_pred, 770, 830);
        assert_in_range(n_kept * 1000 / n_pred, 75, 125);
        /* B follows A where the batch says so (a random B rarely happens to follow A);
           half the pairs at most, fewer here as short documents often end inside A */
        assert_in_range(n_next - n_next_said, 0, 20 * B / 50);
        assert_in_range(n_next_said * 1000 / (20 * B), 200, 520);
    }
    data_mlm_batch_free(&mb);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vocab_train),
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_mlm_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
