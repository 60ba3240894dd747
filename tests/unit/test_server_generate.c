/* test_server_generate.c — `attnscope serve`'s POST /api/v1/generate on encoder-decoder
 * models and with beam search (bart_tiny and t5_tiny of tests/ref/gen_encdec.py, llama,
 * llama_cls; no tokenizers, prompts as ids). Against the torch beam search of
 * tests/ref/gen_beam.py (fixtures/beam/beam.json, the cases that use the model folders
 * as they are): the returned hypotheses' ids identical, scores within 1e-5 and sums of
 * log-probabilities within 5e-5, every generated token's self- and cross-attention rows
 * (beam_attention, beam_cross_attention) within 1e-5 and zero after each sequence, and
 * attention / cross_attention the best hypothesis' at its own length. Greedy generation
 * of the encoder-decoder models: the rows equal the run route's decoder and cross-
 * attention of the same source and decoder sequence (POST /run with target_ids), at f32
 * and (within f16 rounding) f16; the source's ids and tokens are in meta. Errors, one-line
 * 400s: sampling fields or stop_at_eos with beams, beam fields without, num_return above
 * beams, a bad length_penalty, target_ids on a causal LM or outside the vocabulary, a
 * model without a language-model head. Starts the real binary (server_harness.h).
 * What it does not: the causal LM's sampled steps (tests/api/contract.test.mjs) or text
 * prompts (tests/browser/generate.test.mjs).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FIX AS_SOURCE_DIR "/tests/ref/fixtures/"

#include "server_harness.h"

static server S;

static int setup(void **state) {
    const char *args[] = {"--model", FIX "models/bart_tiny", "--model", FIX "models/t5_tiny", "--model",
                          FIX "models/llama", "--model", FIX "models/llama_cls", NULL};
    return server_start_or_report(&S, args);
}

static int teardown(void **state) { return server_stop_report(&S) == 0 ? 0 : -1; }

static int int_at(json_t *arr, size_t i) { return (int)json_integer_value(json_array_get(arr, i)); }

/* POST path body expecting status; a 200's binary tensors parsed into t (caller decrefs
 * t->hdr and frees r), else the one-line error checked. */
static void post_expect(const char *path, const char *body, int status, resp *r, tb *t) {
    post(S.port, path, body, r);
    if (r->status != status) fprintf(stderr, "POST %s %s: %d %s\n", path, body, r->status, r->body);
    assert_int_equal(r->status, status);
    if (status == 200) {
        assert_true(header_has(r, "application/octet-stream"));
        tb_parse(r, t);
    }
    else expect_error(r, status);
}

static void expect_400(const char *body, const char *needle) {
    resp r;
    post_expect("/api/v1/generate", body, 400, &r, NULL);
    if (!strstr((const char *)r.body, needle)) fail_msg("%s: error %s does not name %s", body, r.body, needle);
    resp_free(&r);
}

static json_t *meta_of(const tb *t) { return json_object_get(t->hdr, "meta"); }

/* |served tensor x at element k - v| */
static double diff_at(const tb *t, json_t *x, size_t k, double v) { return fabs((double)tb_at(t, x, k) - v); }

static void shape_is(json_t *x, int nd, const int *want) {
    json_t *sh = json_object_get(x, "shape");
    assert_int_equal(json_array_size(sh), nd);
    for (int d = 0; d < nd; d++) assert_int_equal(int_at(sh, (size_t)d), want[d]);
}

/* The torch case named name of beam.json (caller decrefs the root). */
static json_t *beam_case(const char *name, json_t **root) {
    json_error_t e;
    *root = json_load_file(FIX "beam/beam.json", 0, &e);
    if (!*root) fail_msg("beam.json: %s", e.text);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(*root, "cases"), i, c) if (!strcmp(json_string_value(json_object_get(c, "name")), name)) {
        assert_int_equal(json_object_size(json_object_get(c, "config")), 0); /* the folder as it is */
        return c;
    }
    fail_msg("beam.json has no case %s", name);
    return NULL;
}

/* Checks rows (R, Smax, L, H, K) of the served tensor x, hypothesis r, against the
 * fixture's (S, L, H, Kr) list h_rows; keys from Kr and steps from S are 0. */
static double rows_diff(const tb *t, json_t *x, int r, json_t *h_rows, int Smax, int L, int H, int K) {
    double worst = 0;
    int S = (int)json_array_size(h_rows);
    for (int s = 0; s < Smax; s++)
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                json_t *row = s < S ? json_array_get(json_array_get(json_array_get(h_rows, (size_t)s), (size_t)l), (size_t)h)
                                    : NULL;
                size_t base = ((((size_t)r * Smax + s) * L + l) * H + h) * K;
                for (int k = 0; k < K; k++) {
                    double want = row && (size_t)k < json_array_size(row) ? json_number_value(json_array_get(row, (size_t)k)) : 0.0;
                    worst = fmax(worst, diff_at(t, x, base + (size_t)k, want));
                }
            }
    return worst;
}

/* Beam search through the route against the torch case: hypotheses, scores and rows. */
static void check_beam_case(const char *name, const char *model) {
    json_t *root, *c = beam_case(name, &root);
    json_t *hyps = json_object_get(c, "hypotheses"), *prompt = json_object_get(c, "prompt");
    int pl = (int)json_integer_value(json_object_get(c, "prompt_length")), R = (int)json_array_size(hyps);
    int seq2seq = json_is_true(json_object_get(c, "encoder_decoder"));
    char *pj = json_dumps(prompt, JSON_COMPACT), body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"ids\":%s,\"beams\":%d,\"max_new\":%d,\"length_penalty\":%.17g,\"early_stopping\":%s,"
             "\"num_return\":%d}",
             model, pj, (int)json_integer_value(json_object_get(c, "beams")),
             (int)json_integer_value(json_object_get(c, "max_new")),
             json_number_value(json_object_get(c, "length_penalty")),
             json_is_true(json_object_get(c, "early_stopping")) ? "true" : "false", R);
    free(pj);
    resp r;
    tb t;
    post_expect("/api/v1/generate", body, 200, &r, &t);
    json_t *m = meta_of(&t), *mh = json_object_get(m, "hypotheses");
    int L = (int)json_integer_value(json_object_get(m, "layers")), H = (int)json_integer_value(json_object_get(m, "heads"));
    assert_int_equal(json_array_size(mh), R);
    assert_int_equal(json_integer_value(json_object_get(m, "prompt_length")), pl);
    assert_true(json_is_true(json_object_get(m, "encoder_decoder")) == seq2seq);
    int Tmax = 0, Ts = seq2seq ? (int)json_array_size(prompt) : 0;
    double ds = 0, dl = 0;
    for (int k = 0; k < R; k++) {
        json_t *want = json_object_get(json_array_get(hyps, (size_t)k), "ids");
        json_t *got = json_object_get(json_array_get(mh, (size_t)k), "ids");
        assert_true(json_equal(want, got));
        assert_int_equal(json_array_size(json_object_get(json_array_get(mh, (size_t)k), "tokens")), json_array_size(want));
        ds = fmax(ds, fabs(json_number_value(json_object_get(json_array_get(mh, (size_t)k), "score")) -
                           json_number_value(json_object_get(json_array_get(hyps, (size_t)k), "score"))));
        dl = fmax(dl, fabs(json_number_value(json_object_get(json_array_get(mh, (size_t)k), "sum_logprobs")) -
                           json_number_value(json_object_get(json_array_get(hyps, (size_t)k), "sum_logprobs"))));
        if ((int)json_array_size(want) > Tmax) Tmax = (int)json_array_size(want);
    }
    assert_true(ds <= 1e-5);
    assert_true(dl <= 5e-5);
    json_t *h0 = json_array_get(hyps, 0);
    assert_true(json_equal(json_object_get(m, "ids"), json_object_get(h0, "ids")));
    int T0 = (int)json_array_size(json_object_get(h0, "ids")), S0 = T0 - pl, Smax = Tmax - pl;
    json_t *ba = tb_tensor(&t, "beam_attention"), *a = tb_tensor(&t, "attention");
    shape_is(ba, 5, (int[]){R, Smax, L, H, Tmax});
    shape_is(a, 4, (int[]){S0, L, H, T0});
    double worst = 0;
    for (int k = 0; k < R; k++)
        worst = fmax(worst, rows_diff(&t, ba, k, json_object_get(json_array_get(hyps, (size_t)k), "self_rows"), Smax, L, H, Tmax));
    worst = fmax(worst, rows_diff(&t, a, 0, json_object_get(h0, "self_rows"), S0, L, H, T0));
    if (seq2seq) {
        json_t *bx = tb_tensor(&t, "beam_cross_attention"), *x = tb_tensor(&t, "cross_attention");
        shape_is(bx, 5, (int[]){R, Smax, L, H, Ts});
        shape_is(x, 4, (int[]){S0, L, H, Ts});
        for (int k = 0; k < R; k++)
            worst = fmax(worst, rows_diff(&t, bx, k, json_object_get(json_array_get(hyps, (size_t)k), "cross_rows"), Smax, L, H, Ts));
        worst = fmax(worst, rows_diff(&t, x, 0, json_object_get(h0, "cross_rows"), S0, L, H, Ts));
        assert_true(json_equal(json_object_get(m, "source_ids"), prompt));
    }
    if (worst > 1e-5) fail_msg("%s: rows %.3g from torch's (bound 1e-5)", name, worst);
    json_decref(t.hdr);
    resp_free(&r);
    /* one hypothesis: only the best one's tensors */
    char *one = strstr(body, "\"num_return\"");
    snprintf(one, sizeof body - (size_t)(one - body), "\"num_return\":1}");
    post_expect("/api/v1/generate", body, 200, &r, &t);
    assert_int_equal(json_array_size(json_object_get(t.hdr, "tensors")), seq2seq ? 2 : 1);
    assert_true(json_equal(json_object_get(meta_of(&t), "ids"), json_object_get(h0, "ids")));
    assert_true(rows_diff(&t, tb_tensor(&t, "attention"), 0, json_object_get(h0, "self_rows"), S0, L, H, T0) <= 1e-5);
    json_decref(t.hdr);
    resp_free(&r);
    json_decref(root);
}

static void test_beams_bart(void **state) { check_beam_case("bart_b4", "bart_tiny"); }
static void test_beams_llama(void **state) { check_beam_case("llama_b3", "llama"); }

/* Greedy generation of an encoder-decoder model: rows = the run route's over the result. */
static void check_greedy(const char *model, const char *src, const char *dtype, double tol) {
    char body[512], path[256];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"ids\":%s,\"max_new\":6,\"dtype\":\"%s\"}", model, src, dtype);
    resp r, rr, ra;
    tb t, ta;
    post_expect("/api/v1/generate", body, 200, &r, &t);
    json_t *m = meta_of(&t);
    int pl = (int)json_integer_value(json_object_get(m, "prompt_length"));
    int Sn = (int)json_integer_value(json_object_get(m, "steps"));
    int L = (int)json_integer_value(json_object_get(m, "layers")), H = (int)json_integer_value(json_object_get(m, "heads"));
    json_t *ids = json_object_get(m, "ids"), *sids = json_object_get(m, "source_ids");
    int T = (int)json_array_size(ids), Ts = (int)json_array_size(sids);
    assert_int_equal(T, pl + Sn);
    assert_int_equal(pl, 1);
    assert_true(json_is_true(json_object_get(m, "encoder_decoder")));
    assert_int_equal(json_array_size(json_object_get(m, "source_tokens")), Ts);
    char *sj = json_dumps(sids, JSON_COMPACT), *tj = json_dumps(ids, JSON_COMPACT);
    assert_string_equal(sj, src);
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"ids\":%s,\"target_ids\":%s}", model, sj, tj);
    free(sj);
    free(tj);
    post(S.port, "/api/v1/run", body, &rr);
    assert_int_equal(rr.status, 200);
    json_t *run = body_json(&rr);
    const char *id = json_string_value(json_object_get(run, "id"));
    double worst = 0;
    for (int kind = 0; kind < 2; kind++) {
        json_t *x = tb_tensor(&t, kind ? "cross_attention" : "attention");
        int K = kind ? Ts : T;
        shape_is(x, 4, (int[]){Sn, L, H, K});
        snprintf(path, sizeof path, "/api/v1/runs/%s/attention?kind=%s&dtype=f32", id, kind ? "cross" : "decoder");
        get(S.port, path, &ra);
        assert_int_equal(ra.status, 200);
        tb_parse(&ra, &ta);
        json_t *y = json_array_get(json_object_get(ta.hdr, "tensors"), 0); /* (L, H, T, K) */
        for (int s = 0; s < Sn; s++)
            for (int l = 0; l < L; l++)
                for (int h = 0; h < H; h++)
                    for (int k = 0; k < K; k++) {
                        size_t at = (((size_t)s * L + l) * H + h) * K + k;
                        size_t want = (((size_t)l * H + h) * T + (pl - 1 + s)) * K + k;
                        worst = fmax(worst, diff_at(&t, x, at, tb_at(&ta, y, want)));
                    }
        json_decref(ta.hdr);
        resp_free(&ra);
    }
    if (worst > tol) fail_msg("%s %s: rows %.3g from the run route's (bound %g)", model, dtype, worst, tol);
    json_decref(run);
    resp_free(&rr);
    json_decref(t.hdr);
    resp_free(&r);
}

static void test_greedy_encdec(void **state) {
    check_greedy("bart_tiny", "[0,17,45,9,88,23,2]", "f32", 1e-6);
    check_greedy("t5_tiny", "[40,41,52,63,7,1]", "f32", 1e-6);
    check_greedy("bart_tiny", "[0,5,77,12,3,96,2]", "f16", 1e-3);
}

static void test_errors(void **state) {
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"beams\":2,\"top_k\":3}", "'top_k'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"beams\":2,\"temperature\":0.5}", "'temperature'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"beams\":2,\"seed\":1}", "'seed'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"beams\":2,\"stop_at_eos\":true}", "'stop_at_eos'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"num_return\":2}", "'num_return'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"length_penalty\":2}", "'length_penalty'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"early_stopping\":true}", "'early_stopping'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"beams\":2,\"num_return\":3}", "'num_return'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"beams\":17}", "'beams'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"beams\":2,\"length_penalty\":\"x\"}", "'length_penalty'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"beams\":2,\"length_penalty\":1e9}", "'length_penalty'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"beams\":2,\"early_stopping\":1}", "'early_stopping'");
    expect_400("{\"model\":\"llama\",\"ids\":[1,5],\"target_ids\":[2]}", "not encoder-decoder");
    expect_400("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target_ids\":[2,100000]}", "target_ids");
    expect_400("{\"model\":\"bart_tiny\",\"ids\":[0,5,2],\"target_ids\":[]}", "'target_ids'");
    expect_400("{\"model\":\"bart_tiny\",\"ids\":[0,100000]}", "ids");
    expect_400("{\"model\":\"bart_tiny\",\"text\":\"a\"}", "no tokenizer");
    expect_400("{\"model\":\"llama_cls\",\"ids\":[1,5]}", "language-model head");
}

int main(void) {
    if (binary_missing("test_server_generate")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_beams_bart),
        cmocka_unit_test(test_beams_llama),
        cmocka_unit_test(test_greedy_encdec),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
