/* test_beam.c — src/analysis/beam.c (gen_beam_search) against the torch beam search of
 * tests/ref/gen_beam.py (tests/ref/fixtures/beam/beam.json): every case's model folder is
 * rebuilt with its config.json overrides (forced bos/eos, eos lists, bad_words_ids), the
 * search run from its prompt (an encoder-decoder model's source, decoder_start_token_id
 * first), and the returned sequences must be identical, their scores within 1e-5 and sums
 * of log-probabilities within 5e-5. Here so the search also runs under the sanitizers; the
 * attention rows and the CLI's files are tests/cli/test_generate_beam.sh's.
 * The search runs on a key/value cache per beam (every case above takes it), and
 * test_cache_matches_full runs nine decoder fixtures (GPT-2 and the LLaMA family: GQA, a
 * sliding window, soft-caps, YaRN, BF16 weights) and the five encoder-decoder ones at 2 and
 * 5 beams with the caches and with full_forward (each beam's whole sequence every step):
 * the same hypotheses, scores within 1e-6.
 * It does not test option parsing (the CLI's).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "attnscope.h"
#include "attnscope/beam.h"
#include "core/core.h"

#define FX AS_SOURCE_DIR "/tests/ref/fixtures"

/* dir/name <- the bytes of src */
static void copy_file(const char *src, const char *dir, const char *name) {
    char dst[512], *buf = NULL;
    size_t n = 0;
    as_error err = {0};
    assert_int_equal(as_read_file(src, 1u << 26, &buf, &n, &err), AS_OK);
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    FILE *f = fopen(dst, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(buf, 1, n, f), n);
    fclose(f);
    free(buf);
}

/* Fixture model `folder` copied into a new directory dir (/tmp/as_beam_XXXXXX) with its
 * config.json updated by over (NULL: as it is), and loaded. */
static as_model *load_copy(const char *folder, json_t *over, char *dir) {
    char src[512], cpath[512];
    strcpy(dir, "/tmp/as_beam_XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(src, sizeof src, "%s/models/%s/model.safetensors", FX, folder);
    copy_file(src, dir, "model.safetensors");
    snprintf(src, sizeof src, "%s/models/%s/config.json", FX, folder);
    json_error_t je;
    json_t *cfg = json_load_file(src, 0, &je);
    assert_non_null(cfg);
    if (over) assert_int_equal(json_object_update(cfg, over), 0);
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, cpath, 0), 0);
    json_decref(cfg);
    as_model *m = NULL;
    as_error err = {0};
    if (as_model_load(dir, &m, &err)) fail_msg("%s: %s", folder, err.msg);
    return m;
}

/* Frees m and removes load_copy's directory. */
static void drop_copy(as_model *m, const char *dir) {
    char path[512];
    as_model_free(m);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    rmdir(dir);
}

/* One case: its folder, the search, the comparison; returns the largest score difference. */
static double run_case(const json_t *cs) {
    const char *name = json_string_value(json_object_get(cs, "name"));
    char dir[64];
    as_model *m = load_copy(json_string_value(json_object_get(cs, "model")), json_object_get(cs, "config"), dir);
    as_error err = {0};
    const json_t *pj = json_object_get(cs, "prompt");
    int np = (int)json_array_size(pj), encdec = json_is_true(json_object_get(cs, "encoder_decoder"));
    int32_t *prompt = calloc((size_t)np, sizeof(int32_t));
    assert_non_null(prompt);
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    as_encoding srcenc = {0};
    int32_t start = as_model_config(m)->decoder_start_token_id;
    if (encdec) assert_int_equal(as_encoding_from_ids(m, prompt, NULL, np, &srcenc, &err), AS_OK);
    const int32_t *p0 = encdec ? &start : prompt;
    int pl = encdec ? 1 : np, max_new = (int)json_integer_value(json_object_get(cs, "max_new"));
    gen_beam_opts o = {.beams = (int)json_integer_value(json_object_get(cs, "beams")),
                       .num_return = (int)json_integer_value(json_object_get(cs, "num_return")),
                       .early_stopping = json_is_true(json_object_get(cs, "early_stopping")),
                       .length_penalty = json_number_value(json_object_get(cs, "length_penalty")),
                       .threads = 1};
    gen_beam_result r = {0};
    if (gen_beam_search(m, encdec ? &srcenc : NULL, p0, pl, pl + max_new, &o, &r, &err))
        fail_msg("%s: %s", name, err.msg);
    const json_t *hyps = json_object_get(cs, "hypotheses");
    assert_int_equal(r.n, (int)json_array_size(hyps));
    double worst = 0.0, worst_sum = 0.0;
    for (int h = 0; h < r.n; h++) {
        const json_t *hj = json_array_get(hyps, (size_t)h), *ids = json_object_get(hj, "ids");
        assert_int_equal(r.len[h], (int)json_array_size(ids));
        for (int t = 0; t < r.len[h]; t++)
            assert_int_equal(r.ids[(size_t)h * r.cap + t], json_integer_value(json_array_get(ids, (size_t)t)));
        double ds = fabs(r.score[h] - json_number_value(json_object_get(hj, "score")));
        double dl = fabs(r.sum_logprobs[h] - json_number_value(json_object_get(hj, "sum_logprobs")));
        worst = ds > worst ? ds : worst;
        worst_sum = dl > worst_sum ? dl : worst_sum;
    }
    printf("  %-20s %d hypotheses equal, scores %.1e, log-prob sums %.1e\n", name, r.n, worst, worst_sum);
    assert_true(worst <= 1e-5);
    assert_true(worst_sum <= 5e-5);
    gen_beam_result_free(&r);
    gen_beam_result_free(&r); /* a zeroed result frees as a no-op */
    as_encoding_free(&srcenc);
    free(prompt);
    drop_copy(m, dir);
    return worst;
}

static void test_fixture_cases(void **state) {
    (void)state;
    json_error_t je;
    json_t *fx = json_load_file(FX "/beam/beam.json", 0, &je);
    if (!fx) fail_msg("beam.json: %s", je.text);
    const json_t *cases = json_object_get(fx, "cases");
    assert_true(json_array_size(cases) >= 5);
    for (size_t i = 0; i < json_array_size(cases); i++) run_case(json_array_get(cases, i));
    json_decref(fx);
}

/* The search from prompt with a cache per beam and with full_forward: the same
 * hypotheses, scores within 1e-6. */
static void cache_vs_full(const as_model *m, const as_encoding *src, const char *name, const int32_t *prompt, int pl,
                          int nb, int max_new) {
    as_error err = {0};
    gen_beam_result rc = {0}, rf = {0};
    gen_beam_opts o = {.beams = nb, .num_return = nb, .length_penalty = 1.0, .threads = 2};
    if (gen_beam_search(m, src, prompt, pl, pl + max_new, &o, &rc, &err)) fail_msg("%s cached: %s", name, err.msg);
    o.full_forward = 1;
    if (gen_beam_search(m, src, prompt, pl, pl + max_new, &o, &rf, &err)) fail_msg("%s full: %s", name, err.msg);
    assert_int_equal(rc.n, rf.n);
    double worst = 0.0;
    for (int h = 0; h < rc.n; h++) {
        assert_int_equal(rc.len[h], rf.len[h]);
        assert_memory_equal(rc.ids + (size_t)h * rc.cap, rf.ids + (size_t)h * rf.cap,
                            (size_t)rc.len[h] * sizeof(int32_t));
        double d = fabs(rc.score[h] - rf.score[h]);
        worst = d > worst ? d : worst;
    }
    if (worst > 1e-6) fail_msg("%s, %d beams, prompt %d: scores %.2e apart", name, nb, pl, worst);
    gen_beam_result_free(&rc);
    gen_beam_result_free(&rf);
}

static void test_cache_matches_full(void **state) {
    (void)state;
    static const char *models[] = {"gpt2", "llama", "llama_bf16", "mistral_swa", "qwen3", "gemma2", "gemma3",
                                   "phi3", "yarn"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/models/%s", FX, models[i]);
        as_model *m = NULL;
        as_error err = {0};
        if (as_model_load(dir, &m, &err)) fail_msg("%s: %s", models[i], err.msg);
        int V = as_model_config(m)->vocab_size;
        for (int nb = 2; nb <= 5; nb += 3)
            for (int pl = 3; pl <= 7; pl += 4) {
                int32_t prompt[7];
                for (int t = 0; t < pl; t++) prompt[t] = (int32_t)((7 * t + 3 * nb + 1) % (V < 50 ? V : 50));
                cache_vs_full(m, NULL, models[i], prompt, pl, nb, 12);
            }
        printf("  %-12s cache = whole sequences (2 and 5 beams, prompts of 3 and 7)\n", models[i]);
        as_model_free(m);
    }
    /* every id but 0, 1 and 2 banned (bad_words_ids): 3 ids for 5 beams, so the first step
       also continues beams that only copied beam 0's prompt, and beams hold the same ids */
    json_t *bad = json_array();
    for (int id = 3; id < 53; id++) json_array_append_new(bad, json_pack("[i]", id));
    json_t *over = json_pack("{s:o, s:[]}", "bad_words_ids", bad, "eos_token_id");
    char dir[64];
    as_model *m = load_copy("llama", over, dir);
    json_decref(over);
    assert_int_equal(as_model_config(m)->vocab_size, 53);
    const int32_t prompt[3] = {5, 9, 2};
    cache_vs_full(m, NULL, "llama, 3 ids allowed", prompt, 3, 5, 6);
    printf("  %-12s cache = whole sequences with 3 ids allowed for 5 beams\n", "llama");
    drop_copy(m, dir);
    /* encoder-decoder models: the source through the encoder once, a decoder cache per beam */
    static const char *s2s[] = {"bart_tiny", "marian_tiny", "mbart_tiny", "t5_tiny", "mt5_tiny"};
    for (size_t i = 0; i < sizeof s2s / sizeof *s2s; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/models/%s", FX, s2s[i]);
        as_error err = {0};
        if (as_model_load(path, &m, &err)) fail_msg("%s: %s", s2s[i], err.msg);
        const as_config *c = as_model_config(m);
        int32_t source[8], start = c->decoder_start_token_id >= 0 ? c->decoder_start_token_id : 2;
        for (int t = 0; t < 8; t++) source[t] = (int32_t)(4 + (5 * t + (int)i) % (c->vocab_size - 5));
        as_encoding src = {0};
        if (as_encoding_from_ids(m, source, NULL, 8, &src, &err)) fail_msg("%s: %s", s2s[i], err.msg);
        for (int nb = 2; nb <= 5; nb += 3) cache_vs_full(m, &src, s2s[i], &start, 1, nb, 10);
        printf("  %-12s cache = whole sequences (2 and 5 beams, a source of 8)\n", s2s[i]);
        as_encoding_free(&src);
        as_model_free(m);
    }
}

int main(void) {
    as_set_quiet(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_cases),
        cmocka_unit_test(test_cache_matches_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
