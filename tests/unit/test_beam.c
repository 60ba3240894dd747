/* test_beam.c — src/analysis/beam.c (gen_beam_search) against the torch beam search of
 * tests/ref/gen_beam.py (tests/ref/fixtures/beam/beam.json): every case's model folder is
 * rebuilt with its config.json overrides (forced bos/eos, eos lists, bad_words_ids), the
 * search run from its prompt (an encoder-decoder model's source, decoder_start_token_id
 * first), and the returned sequences must be identical, their scores within 1e-5 and sums
 * of log-probabilities within 5e-5. Here so the search also runs under the sanitizers; the
 * attention rows and the CLI's files are tests/cli/test_generate_beam.sh's.
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

/* One case: its folder, the search, the comparison; returns the largest score difference. */
static double run_case(const json_t *cs) {
    const char *name = json_string_value(json_object_get(cs, "name"));
    const char *folder = json_string_value(json_object_get(cs, "model"));
    char dir[] = "/tmp/as_beam_XXXXXX", src[512], cpath[512];
    assert_non_null(mkdtemp(dir));
    snprintf(src, sizeof src, "%s/models/%s/model.safetensors", FX, folder);
    copy_file(src, dir, "model.safetensors");
    snprintf(src, sizeof src, "%s/models/%s/config.json", FX, folder);
    json_error_t je;
    json_t *cfg = json_load_file(src, 0, &je);
    assert_non_null(cfg);
    assert_int_equal(json_object_update(cfg, json_object_get(cs, "config")), 0);
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, cpath, 0), 0);
    json_decref(cfg);

    as_model *m = NULL;
    as_error err = {0};
    if (as_model_load(dir, &m, &err)) fail_msg("%s: %s", name, err.msg);
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
    if (gen_beam_search(m, encdec ? &srcenc : NULL, p0, pl, pl + max_new, &o, &r, &err)) fail_msg("%s: %s", name, err.msg);
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
    as_model_free(m);
    unlink(cpath);
    snprintf(src, sizeof src, "%s/model.safetensors", dir);
    unlink(src);
    rmdir(dir);
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

int main(void) {
    as_set_quiet(1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture_cases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
