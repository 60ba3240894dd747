/* test_encdec.c — encoder-decoder models (BART, mBART, Marian, T5, mT5) against PyTorch.
 *
 * What it does: for each fixture written by tests/ref/gen_encdec.py (bart_tiny, mbart_tiny,
 * marian_tiny, t5_tiny, mt5_tiny: 2 encoder and 3 decoder layers, width 24, 3 heads,
 * feed-forward 40, vocabulary 101; T5 heads of width 10 and relative position buckets) it
 * runs as_forward_seq2seq on every case (the second source ends in two padding tokens; T5's
 * third is 17 source and 14 decoder tokens, past the buckets' max distance) with full capture and compares the encoder, decoder and cross attentions
 * (max-abs 1e-5), the cross-attention queries / keys / values and both stacks' hidden
 * states (1e-4) and the LM logits (1e-4 relative to their largest magnitude), printing each
 * max diff; checks the named arrays of as_run_all_arrays (names and shapes), selective
 * capture (one layer and head of every kind equals the full capture's), the target shift
 * of teacher forcing (BART: decoder_start_token_id first; mBART: the last non-pad token),
 * and the errors: as_forward without a target, a target on a model that is not
 * encoder-decoder, a target id out of range, the config options refused by name (and the
 * legacy block keys accepted), a sinusoidal table over its named limit.
 * What it does not: tokenization (ids only) or the CLI (tests/cli/test_encdec.sh).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnscope.h"
#include "io/safetensors.h"

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif
#define FIXTURE_ROOT AS_SOURCE_DIR "/tests/ref/fixtures/models"

#define TOL_ATTN 1e-5
#define TOL_HIDDEN 1e-4
#define TOL_LOGITS_REL 1e-4

static const struct {
    const char *name;
    int arch, cases, dh;
} FIXTURES[] = {{"bart_tiny", ARCH_BART, 2, 8},
                {"mbart_tiny", ARCH_BART, 2, 8},
                {"marian_tiny", ARCH_BART, 2, 8},
                {"t5_tiny", ARCH_T5, 3, 10},
                {"mt5_tiny", ARCH_T5, 3, 10}};

static const st_tensor *want(const st_file *f, const char *fx, int c, const char *what) {
    char name[128];
    snprintf(name, sizeof name, "c%d.%s", c, what);
    const st_tensor *t = st_file_find(f, name);
    if (!t) fail_msg("%s: expected.safetensors has no tensor %s", fx, name);
    return t;
}

static void *copy_data(const st_tensor *t) {
    void *p = malloc(t->nbytes ? t->nbytes : 1);
    assert_non_null(p);
    memcpy(p, t->data, t->nbytes);
    return p;
}

/* max |a - ref| over n values (NaN propagates); *ref_max = max |ref| when non-NULL */
static double max_diff(const float *a, const float *ref, size_t n, double *ref_max) {
    double m = 0.0, r = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)ref[i]);
        if (!(d <= m)) m = d;
        if (fabs((double)ref[i]) > r) r = fabs((double)ref[i]);
    }
    if (ref_max) *ref_max = r;
    return m;
}

/* Compares captured data (n floats) with the expected tensor; returns 1 on failure. */
static int check(const char *fx, int c, const char *what, const float *got, const st_file *ex, double tol,
                 int relative) {
    const st_tensor *t = want(ex, fx, c, what);
    if (!got) fail_msg("%s/c%d: %s was not captured", fx, c, what);
    float *e = copy_data(t);
    double rmax = 0.0, d = max_diff(got, e, t->n_elems, &rmax);
    free(e);
    if (relative) d = rmax > 0 ? d / rmax : d;
    int bad = !(d <= tol);
    printf("%s/c%d %s max|diff|%s = %.2e%s\n", fx, c, what, relative ? " (relative)" : "", d, bad ? "  FAIL" : "");
    fflush(stdout);
    return bad;
}

/* The case's source (mask from the fixture) and decoder input encodings. */
static void case_encodings(const as_model *m, const st_file *ex, const char *fx, int c, as_encoding *src,
                           as_encoding *tgt) {
    const st_tensor *ts = want(ex, fx, c, "src_ids"), *tm = want(ex, fx, c, "src_mask"), *tt = want(ex, fx, c, "tgt_ids");
    int32_t *ids = copy_data(ts), *mask = copy_data(tm), *tids = copy_data(tt);
    as_error err = {0};
    if (as_encoding_from_ids(m, ids, NULL, (int)ts->shape[0], src, &err) ||
        as_encoding_from_ids(m, tids, NULL, (int)tt->shape[0], tgt, &err))
        fail_msg("%s/c%d: %s", fx, c, err.msg);
    for (int i = 0; i < src->n; i++) src->mask[i] = mask[i];
    free(ids);
    free(mask);
    free(tids);
}

static as_model *load(const char *name) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", FIXTURE_ROOT, name);
    as_model *m = NULL;
    as_error err = {0};
    if (as_model_load(dir, &m, &err)) fail_msg("%s: %s", name, err.msg);
    return m;
}

static st_file *load_expected(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/expected.safetensors", FIXTURE_ROOT, name);
    st_file *f = NULL;
    as_error err = {0};
    if (st_file_open(path, &f, &err)) fail_msg("%s", err.msg);
    return f;
}

static void test_parity(void **state) {
    (void)state;
    int bad = 0;
    for (size_t fi = 0; fi < sizeof FIXTURES / sizeof FIXTURES[0]; fi++) {
        const char *fx = FIXTURES[fi].name;
        as_model *m = load(fx);
        st_file *ex = load_expected(fx);
        const as_config *cfg = as_model_config(m);
        assert_int_equal(cfg->arch, FIXTURES[fi].arch);
        assert_int_equal(cfg->n_layer, 2);
        assert_int_equal(cfg->n_dec_layer, 3);
        assert_int_equal(cfg->d_head, FIXTURES[fi].dh);
        for (int c = 0; c < FIXTURES[fi].cases; c++) {
            as_encoding src = {0}, tgt = {0};
            case_encodings(m, ex, fx, c, &src, &tgt);
            as_capture_spec spec = {.what = CAP_ALL, .layer = -1, .head = -1, .threads = 2};
            as_run *r = NULL;
            as_error err = {0};
            if (as_forward_seq2seq(m, &src, &tgt, &spec, &r, &err)) fail_msg("%s/c%d: %s", fx, c, err.msg);
            assert_non_null(r->dec);
            assert_non_null(r->cross);
            assert_int_equal(r->T, src.n);
            assert_int_equal(r->dec->T, tgt.n);
            assert_int_equal(r->cross->T, tgt.n);
            assert_int_equal(r->cross->Tk, src.n);
            bad += check(fx, c, "encoder_attentions", r->attn, ex, TOL_ATTN, 0);
            bad += check(fx, c, "decoder_attentions", r->dec->attn, ex, TOL_ATTN, 0);
            bad += check(fx, c, "cross_attentions", r->cross->attn, ex, TOL_ATTN, 0);
            bad += check(fx, c, "cross_queries", r->cross->q, ex, TOL_HIDDEN, 0);
            bad += check(fx, c, "cross_keys", r->cross->k, ex, TOL_HIDDEN, 0);
            bad += check(fx, c, "cross_values", r->cross->v, ex, TOL_HIDDEN, 0);
            bad += check(fx, c, "encoder_hidden_states", r->hidden, ex, TOL_HIDDEN, 0);
            bad += check(fx, c, "decoder_hidden_states", r->dec->hidden, ex, TOL_HIDDEN, 0);
            bad += check(fx, c, "logits", r->dec->logits, ex, TOL_LOGITS_REL, 1);
            /* padding keys of the source get no cross-attention */
            if (c == 1) {
                const float *a = r->cross->attn;
                for (size_t i = 0; i < (size_t)3 * 3 * tgt.n; i++) {
                    assert_true(a[i * src.n + src.n - 1] == 0.0f);
                    assert_true(a[i * src.n + src.n - 2] == 0.0f);
                }
            }
            as_run_free(r);
            as_encoding_free(&src);
            as_encoding_free(&tgt);
        }
        st_file_free(ex);
        as_model_free(m);
    }
    assert_int_equal(bad, 0);
}

/* Names and shapes of the writers' arrays; one layer / head of each kind. */
static void test_arrays_and_selection(void **state) {
    (void)state;
    as_model *m = load("bart_tiny");
    st_file *ex = load_expected("bart_tiny");
    as_encoding src = {0}, tgt = {0};
    case_encodings(m, ex, "bart_tiny", 1, &src, &tgt);
    int Ts = src.n, Tt = tgt.n;
    as_capture_spec spec = {.what = CAP_ALL | CAP_STATS, .layer = -1, .head = -1, .threads = 1};
    as_run *r = NULL, *one = NULL;
    as_error err = {0};
    assert_int_equal(as_forward_seq2seq(m, &src, &tgt, &spec, &r, &err), AS_OK);
    as_run_array arr[AS_RUN_MAX_ARRAYS];
    int n = as_run_all_arrays(r, arr);
    struct {
        const char *name;
        int64_t s0, s1, s2, s3;
    } want_arr[] = {
        {"encoder_attentions", 2, 3, Ts, Ts},  {"encoder_queries", 2, 3, Ts, 8},
        {"encoder_hidden_states", 3, Ts, 24, 0}, {"encoder_head_stats", 2, 3, AS_HEAD_N_STATS, 0},
        {"decoder_attentions", 3, 3, Tt, Tt},  {"decoder_hidden_states", 4, Tt, 24, 0},
        {"cross_attentions", 3, 3, Tt, Ts},    {"cross_attention_scores", 3, 3, Tt, Ts},
        {"cross_queries", 3, 3, Tt, 8},        {"cross_keys", 3, 3, Ts, 8},
        {"cross_values", 3, 3, Ts, 8},         {"logits", Tt, 101, 0, 0},
    };
    for (size_t w = 0; w < sizeof want_arr / sizeof want_arr[0]; w++) {
        int found = 0;
        for (int i = 0; i < n; i++) {
            if (strcmp(arr[i].name, want_arr[w].name)) continue;
            found = 1;
            assert_non_null(arr[i].data);
            assert_int_equal(arr[i].shape[0], want_arr[w].s0);
            assert_int_equal(arr[i].shape[1], want_arr[w].s1);
            if (arr[i].ndim > 2) assert_int_equal(arr[i].shape[2], want_arr[w].s2);
            if (arr[i].ndim > 3) assert_int_equal(arr[i].shape[3], want_arr[w].s3);
        }
        if (!found) fail_msg("no array %s", want_arr[w].name);
    }
    for (int i = 0; i < n; i++) /* no unprefixed self-attention names in an encoder-decoder run */
        assert_true(strcmp(arr[i].name, "attentions") && strcmp(arr[i].name, "hidden_states"));
    as_capture_spec sel = {.what = CAP_ATTN | CAP_QKV, .layer = 1, .head = 2, .threads = 1};
    assert_int_equal(as_forward_seq2seq(m, &src, &tgt, &sel, &one, &err), AS_OK);
    size_t TsTs = (size_t)Ts * Ts, TtTt = (size_t)Tt * Tt, TtTs = (size_t)Tt * Ts;
    assert_memory_equal(one->attn, r->attn + (1 * 3 + 2) * TsTs, TsTs * sizeof(float));
    assert_memory_equal(one->dec->attn, r->dec->attn + (1 * 3 + 2) * TtTt, TtTt * sizeof(float));
    assert_memory_equal(one->cross->attn, r->cross->attn + (1 * 3 + 2) * TtTs, TtTs * sizeof(float));
    assert_memory_equal(one->cross->k, r->cross->k + (1 * 3 + 2) * (size_t)Ts * 8, (size_t)Ts * 8 * sizeof(float));
    assert_null(one->dec->logits);
    as_run_free(one);
    as_run_free(r);
    as_encoding_free(&src);
    as_encoding_free(&tgt);
    st_file_free(ex);
    as_model_free(m);
}

static void test_shift_target(void **state) {
    (void)state;
    const char *names[] = {"bart_tiny", "mbart_tiny"};
    const int32_t labels[] = {0, 5, 6, 2, 1}; /* ends in a pad (1) */
    const int32_t want[2][5] = {{2, 0, 5, 6, 2}, {2, 0, 5, 6, 2}};
    for (int k = 0; k < 2; k++) {
        as_model *m = load(names[k]);
        as_encoding t = {0}, d = {0};
        as_error err = {0};
        assert_int_equal(as_encoding_from_ids(m, labels, NULL, 5, &t, &err), AS_OK);
        assert_int_equal(as_seq2seq_shift_target(m, &t, &d, &err), AS_OK);
        assert_int_equal(d.n, 5);
        for (int i = 0; i < 5; i++) assert_int_equal(d.ids[i], want[k][i]);
        as_encoding_free(&t);
        as_encoding_free(&d);
        as_model_free(m);
    }
    /* mBART: the last non-pad token (a language code) starts the decoder input */
    as_model *m = load("mbart_tiny");
    const int32_t lab2[] = {40, 41, 2, 77, 1, 1};
    as_encoding t = {0}, d = {0};
    as_error err = {0};
    assert_int_equal(as_encoding_from_ids(m, lab2, NULL, 6, &t, &err), AS_OK);
    assert_int_equal(as_seq2seq_shift_target(m, &t, &d, &err), AS_OK);
    assert_int_equal(d.ids[0], 77);
    assert_int_equal(d.ids[1], 40);
    assert_int_equal(d.ids[5], 1);
    as_encoding_free(&t);
    as_encoding_free(&d);
    as_model_free(m);
}

static void test_errors(void **state) {
    (void)state;
    as_model *m = load("bart_tiny"), *bert = load("bert");
    const int32_t ids[] = {0, 7, 2}, bad_ids[] = {0, 101, 2};
    as_encoding e = {0}, eb = {0}, bad = {0};
    as_error err = {0};
    as_run *r = NULL;
    as_capture_spec spec = {.what = CAP_ALL, .layer = -1, .head = -1, .threads = 1};
    assert_int_equal(as_encoding_from_ids(m, ids, NULL, 3, &e, &err), AS_OK);
    assert_int_equal(as_forward(m, &e, &spec, &r, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "needs a target"));
    assert_int_equal(as_encoding_from_ids(bert, ids, NULL, 3, &eb, &err), AS_OK);
    assert_int_equal(as_forward_seq2seq(bert, &eb, &eb, &spec, &r, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "not an encoder-decoder model"));
    /* an id out of range in the target (built by hand: as_encoding_from_ids refuses it too) */
    assert_int_equal(as_encoding_from_ids(m, ids, NULL, 3, &bad, &err), AS_OK);
    bad.ids[1] = bad_ids[1];
    assert_int_equal(as_forward_seq2seq(m, &e, &bad, &spec, &r, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "target"));
    as_capture_spec far = {.what = CAP_ATTN, .layer = 2, .head = -1, .threads = 1}; /* encoder has 2 layers */
    assert_int_equal(as_forward_seq2seq(m, &e, &e, &far, &r, &err), AS_ERR_INPUT);
    assert_null(r);
    as_encoding_free(&e);
    as_encoding_free(&eb);
    as_encoding_free(&bad);
    as_model_free(bert);
    as_model_free(m);

    /* options refused by name (field set) or, for the keys older configs carry with the values
       of the block each model_type is, accepted (field NULL): a copy of a fixture's config with
       one field changed */
    const char *D = "\"dropout\": 0.1";
    struct {
        const char *fx, *from, *to, *field;
    } cases[] = {
        {"bart_tiny", D, "\"dropout\": 0.1, \"add_bias_logits\": false, \"add_final_layer_norm\": false, "
                      "\"normalize_before\": false, \"normalize_embedding\": true, \"static_position_embeddings\": false, "
                      "\"extra_pos_embeddings\": 2", NULL},
        {"mbart_tiny", D, "\"dropout\": 0.1, \"add_final_layer_norm\": true, \"normalize_before\": true, "
                       "\"normalize_embedding\": true, \"static_position_embeddings\": false", NULL},
        {"marian_tiny", D, "\"dropout\": 0.1, \"add_final_layer_norm\": false, \"normalize_before\": false, "
                        "\"normalize_embedding\": false, \"static_position_embeddings\": true", NULL},
        {"mbart_tiny", D, "\"dropout\": 0.1, \"normalize_before\": false", "normalize_before"},
        {"mbart_tiny", D, "\"dropout\": 0.1, \"add_final_layer_norm\": false", "add_final_layer_norm"},
        {"marian_tiny", D, "\"dropout\": 0.1, \"static_position_embeddings\": false", "static_position_embeddings"},
        {"marian_tiny", D, "\"dropout\": 0.1, \"normalize_embedding\": true", "normalize_embedding"},
        {"bart_tiny", D, "\"dropout\": 0.1, \"extra_pos_embeddings\": 3", "extra_pos_embeddings"},
        {"bart_tiny", "\"decoder_attention_heads\": 3", "\"decoder_attention_heads\": 1", "decoder_attention_heads"},
        {"bart_tiny", "\"decoder_ffn_dim\": 40", "\"decoder_ffn_dim\": 48", "decoder_ffn_dim"},
        {"bart_tiny", "\"dropout\": 0.1", "\"dropout\": 0.1, \"normalize_before\": true", "normalize_before"},
        {"bart_tiny", "\"dropout\": 0.1", "\"dropout\": 0.1, \"add_bias_logits\": true", "add_bias_logits"},
        {"bart_tiny", "\"is_encoder_decoder\": true", "\"is_encoder_decoder\": false", "is_encoder_decoder"},
        {"marian_tiny", "\"share_encoder_decoder_embeddings\": true", "\"share_encoder_decoder_embeddings\": false",
         "share_encoder_decoder_embeddings"},
        {"marian_tiny", "\"decoder_vocab_size\": 101", "\"decoder_vocab_size\": 90", "decoder_vocab_size"},
        {"bart_tiny", "\"activation_function\": \"gelu\"", "\"activation_function\": \"mish\"", "activation_function"},
        {"t5_tiny", "\"feed_forward_proj\": \"relu\"", "\"feed_forward_proj\": \"gated-mish\"", "feed_forward_proj"},
        {"t5_tiny", "\"is_encoder_decoder\": true", "\"is_encoder_decoder\": false", "is_encoder_decoder"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char dir[] = "/tmp/as_encdec_XXXXXX", src[1200], dst[1200];
        assert_non_null(mkdtemp(dir));
        snprintf(src, sizeof src, "%s/%s/config.json", FIXTURE_ROOT, cases[k].fx);
        FILE *f = fopen(src, "rb");
        assert_non_null(f);
        char text[4096];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        char *at = strstr(text, cases[k].from);
        if (!at) fail_msg("%s: no '%s' in config.json", cases[k].fx, cases[k].from);
        char out[4600];
        snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, cases[k].to, at + strlen(cases[k].from));
        snprintf(dst, sizeof dst, "%s/config.json", dir);
        f = fopen(dst, "wb");
        assert_non_null(f);
        fputs(out, f);
        fclose(f);
        snprintf(src, sizeof src, "%s/%s/model.safetensors", FIXTURE_ROOT, cases[k].fx);
        snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
        assert_int_equal(symlink(src, dst), 0);
        as_model *mm = NULL;
        as_status st = as_model_load(dir, &mm, &err);
        if (!cases[k].field) {
            if (st) fail_msg("%s with %s: %s", cases[k].fx, cases[k].to, err.msg);
            as_model_free(mm);
        } else {
            assert_int_equal(st, AS_ERR_INPUT);
            printf("refused: %s\n", err.msg);
            assert_non_null(strstr(err.msg, cases[k].field));
        }
        unlink(dst);
        snprintf(dst, sizeof dst, "%s/config.json", dir);
        unlink(dst);
        rmdir(dir);
    }
}

/* A Marian config whose computed sinusoidal table would be 65534 x 65536 floats (16 GiB):
 * refused by size before anything is allocated; the file holds only the 1 x 65536 word table
 * (shared.weight), bound before the positions. */
static void test_sinusoid_limit(void **state) {
    (void)state;
    char dir[] = "/tmp/as_encdec_XXXXXX", path[1200];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fputs("{\"model_type\": \"marian\", \"vocab_size\": 1, \"d_model\": 65536, \"encoder_layers\": 1, "
          "\"decoder_layers\": 1, \"encoder_attention_heads\": 1, \"decoder_attention_heads\": 1, "
          "\"encoder_ffn_dim\": 1, \"decoder_ffn_dim\": 1, \"max_position_embeddings\": 65534, "
          "\"pad_token_id\": 0, \"eos_token_id\": 0, \"decoder_start_token_id\": 0, \"decoder_vocab_size\": 1}",
          f);
    fclose(f);
    float *w = calloc(65536, sizeof(float));
    assert_non_null(w);
    st_tensor t = {.name = "shared.weight", .dtype = DTYPE_F32, .ndim = 2, .shape = {1, 65536},
                   .n_elems = 65536, .data = w, .nbytes = 65536 * sizeof(float)};
    snprintf(t.dtype_name, sizeof t.dtype_name, "F32");
    as_error err = {0};
    char st[1200];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    assert_int_equal(st_write(st, &t, 1, &err), AS_OK);
    free(w);
    as_model *m = NULL;
    assert_int_equal(as_model_load(dir, &m, &err), AS_ERR_INPUT);
    printf("refused: %s\n", err.msg);
    assert_non_null(strstr(err.msg, "sinusoidal position table"));
    unlink(st);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_arrays_and_selection),
        cmocka_unit_test(test_shift_target),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_sinusoid_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
