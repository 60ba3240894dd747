/* test_generate.c — gen_generate (src/analysis/generate.c, attnscope/generate.h) on the
 * llama_bytes fixture (tests/ref/gen_lm_eval.py: a tiny random Llama, 64 positions):
 *   - greedy continuation of the fixture's prompt equals PyTorch's argmax continuation
 *     (expected.json greedy_ids, ids identical);
 *   - each step's rows: every head's row sums to 1 over the keys up to the choosing position,
 *     0 after it, and equals that position's row of one forward of the final sequence
 *     (causal attention does not see later tokens; 1e-5);
 *   - each greedy step's five most probable ids and probabilities equal PyTorch's
 *     (expected.json greedy_top5, 5e-6), the chosen id is the first with its probability;
 *     a top-3 draw is one of the step's three most probable;
 *   - sampling: the same seed gives the same ids and rows, top-k 1 gives the greedy ids;
 *   - the model's positions cap the steps (max_new 100 from 8 tokens: 56 steps);
 *   - errors: an empty prompt, a prompt filling the positions and a model without an LM
 *     head are AS_ERR_INPUT; nothing is left allocated (gen_result zeroed);
 *   - the key/value cache against the full forward at every step on every decoder family's
 *     fixture (the same ids, rows within 1e-5), at 1 and 2 threads; dynamic NTK and
 *     LongRoPE models run each step on the whole sequence; encoder-decoder fixtures (BART,
 *     Marian, mBART, T5, mT5) on the encoder's output taken once and the decoder's cache
 *     against whole forwards (the same ids, cross-attention rows within 1e-5);
 *   - model_kv_init refuses more positions than the model's; model_forward_step refuses a
 *     model it does not serve, a full cache and an id outside the vocabulary, leaving the
 *     cache as it was; model_s2s_kv_init refuses a decoder-only model, model_s2s_step a
 *     full cache and an id outside the vocabulary (T5), leaving the state as it was;
 *   - gen_process_logits on a hand-set configuration: a bad single id always -inf, a bad
 *     pair only after its first id, a lone eos id left out, forced BOS only at cur 1 and
 *     forced EOS only at max_len - 1 (that id 0, all others -inf); gen_is_eos over the list.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "attnscope.h"
#include "attnscope/generate.h"
#include "model/model.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LM_MODEL AS_SOURCE_DIR "/tests/ref/fixtures/models/llama_bytes"

static as_model *g_m;
static int32_t g_prompt[64], g_greedy[64];
static int g_np, g_ng;

static int setup(void **state) {
    (void)state;
    as_error err = {0};
    json_error_t je;
    if (as_model_load(LM_MODEL, &g_m, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return -1;
    }
    json_t *e = json_load_file(LM_MODEL "/expected.json", 0, &je);
    if (!e) return -1;
    json_t *p = json_object_get(e, "prompt_ids"), *g = json_object_get(e, "greedy_ids");
    g_np = (int)json_array_size(p);
    g_ng = (int)json_array_size(g);
    for (int i = 0; i < g_np && i < 64; i++) g_prompt[i] = (int32_t)json_integer_value(json_array_get(p, i));
    for (int i = 0; i < g_ng && i < 64; i++) g_greedy[i] = (int32_t)json_integer_value(json_array_get(g, i));
    json_decref(e);
    return g_np > 0 && g_ng > 0 && g_np + g_ng <= 64 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    as_model_free(g_m);
    return 0;
}

static void test_greedy_rows(void **state) {
    (void)state;
    as_error err = {0};
    gen_result g;
    gen_opts o = {.max_new = g_ng, .rows = 1, .threads = 1};
    if (gen_generate(g_m, NULL, g_prompt, g_np, &o, &g, &err)) fail_msg("%s", err.msg);
    assert_int_equal(g.steps, g_ng);
    assert_int_equal(g.prompt_len, g_np);
    assert_int_equal(g.T, g_np + g_ng);
    assert_int_equal(g.K, g.T);
    assert_memory_equal(g.gen, g_greedy, (size_t)g_ng * sizeof(int32_t));
    assert_memory_equal(g.ids, g_prompt, (size_t)g_np * sizeof(int32_t));
    /* the final sequence's forward: row P - 1 + s of each head is step s's row */
    as_encoding enc = {0};
    as_run *r = NULL;
    as_capture_spec spec = {.what = CAP_ATTN, .layer = -1, .head = -1, .threads = 1};
    if (as_encoding_from_ids(g_m, g.ids, NULL, g.T, &enc, &err) || as_forward(g_m, &enc, &spec, &r, &err))
        fail_msg("%s", err.msg);
    double worst = 0.0;
    for (int s = 0; s < g.steps; s++)
        for (int l = 0; l < g.L; l++)
            for (int h = 0; h < g.H; h++) {
                const float *row = g.rows + (((size_t)s * g.L + l) * g.H + h) * g.K;
                const float *ref = as_run_attn(r, l, h) + (size_t)(g_np - 1 + s) * g.T;
                double sum = 0.0;
                for (int k = 0; k < g.K; k++) {
                    if (k > g_np - 1 + s) assert_true(row[k] == 0.0f);
                    sum += row[k];
                    double d = fabs((double)row[k] - ref[k]);
                    if (d > worst) worst = d;
                }
                assert_true(fabs(sum - 1.0) < 1e-5);
            }
    printf("greedy: %d ids = PyTorch's; rows vs the final forward: max |d| %.2e\n", g.steps, worst);
    assert_true(worst < 1e-5);
    as_run_free(r);
    as_encoding_free(&enc);
    gen_result_free(&g);
    assert_null(g.rows);
}

/* Each greedy step's distribution against PyTorch's (expected.json greedy_top5: softmax in
 * float64 of the same logits): the five most probable ids identical, probabilities within
 * 5e-6 (float32 logits); the chosen id is the most probable, with its probability; sampling keeps the
 * chosen id's probability among the top ones where it is one of them. */
static void test_top_probs(void **state) {
    (void)state;
    as_error err = {0};
    json_error_t je;
    json_t *e = json_load_file(LM_MODEL "/expected.json", 0, &je), *tops = json_object_get(e, "greedy_top5");
    assert_non_null(tops);
    gen_result g, smp;
    gen_opts o = {.max_new = g_ng, .threads = 1, .top = 5}, plain = {.max_new = 2, .threads = 1, .probs = 1};
    if (gen_generate(g_m, NULL, g_prompt, g_np, &o, &g, &err)) fail_msg("%s", err.msg);
    assert_int_equal(g.top, 5);
    assert_int_equal(json_array_size(tops), g.steps);
    double worst = 0.0;
    for (int s = 0; s < g.steps; s++) {
        json_t *t = json_array_get(tops, (size_t)s);
        for (int i = 0; i < 5; i++) {
            assert_int_equal(g.top_ids[s * 5 + i], json_integer_value(json_array_get(json_object_get(t, "ids"), (size_t)i)));
            double want = json_number_value(json_array_get(json_object_get(t, "probs"), (size_t)i));
            worst = fmax(worst, fabs(g.top_probs[s * 5 + i] - want));
            if (i) assert_true(g.top_probs[s * 5 + i] <= g.top_probs[s * 5 + i - 1]);
        }
        assert_int_equal(g.gen[s], g.top_ids[s * 5]);
        assert_true(g.probs[s] == g.top_probs[s * 5]);
    }
    printf("top 5 of %d greedy steps = PyTorch's; probabilities max |d| %.2e\n", g.steps, worst);
    assert_true(worst < 5e-6);
    gen_opts so = {.max_new = 16, .temperature = 1.5, .top_k = 3, .seed = 7, .threads = 1, .top = 3};
    if (gen_generate(g_m, NULL, g_prompt, g_np, &so, &smp, &err)) fail_msg("%s", err.msg);
    for (int s = 0; s < smp.steps; s++) { /* a top-3 draw is one of the 3 most probable */
        int found = 0;
        for (int i = 0; i < 3; i++)
            if (smp.top_ids[s * 3 + i] == smp.gen[s]) found = 1, assert_true(smp.probs[s] == smp.top_probs[s * 3 + i]);
        assert_true(found);
    }
    gen_result_free(&smp);
    gen_result_free(&g);
    assert_null(g.top_ids);
    /* probs alone: the chosen ids' probabilities, no top arrays; neither: no probs */
    if (gen_generate(g_m, NULL, g_prompt, g_np, &plain, &g, &err)) fail_msg("%s", err.msg);
    assert_null(g.top_ids);
    for (int s = 0; s < g.steps; s++) {
        json_t *p0 = json_array_get(json_object_get(json_array_get(tops, (size_t)s), "probs"), 0);
        assert_true(fabs(g.probs[s] - json_number_value(p0)) < 5e-6);
    }
    gen_result_free(&g);
    plain.probs = 0;
    if (gen_generate(g_m, NULL, g_prompt, g_np, &plain, &g, &err)) fail_msg("%s", err.msg);
    assert_null(g.probs);
    gen_result_free(&g);
    json_decref(e);
}

static void test_sampling(void **state) {
    (void)state;
    as_error err = {0};
    gen_result a, b, c;
    gen_opts o = {.max_new = 16, .temperature = 1.5, .top_k = 20, .seed = 7, .rows = 1, .threads = 1};
    if (gen_generate(g_m, NULL, g_prompt, g_np, &o, &a, &err) || gen_generate(g_m, NULL, g_prompt, g_np, &o, &b, &err))
        fail_msg("%s", err.msg);
    assert_int_equal(a.steps, b.steps);
    assert_memory_equal(a.gen, b.gen, (size_t)a.steps * sizeof(int32_t));
    assert_memory_equal(a.rows, b.rows, (size_t)a.steps * a.L * a.H * a.K * sizeof(float));
    gen_opts one = {.max_new = g_ng, .temperature = 1.0, .top_k = 1, .seed = 3, .threads = 1};
    if (gen_generate(g_m, NULL, g_prompt, g_np, &one, &c, &err)) fail_msg("%s", err.msg);
    assert_null(c.rows);
    assert_memory_equal(c.gen, g_greedy, (size_t)g_ng * sizeof(int32_t));
    gen_result_free(&a);
    gen_result_free(&b);
    gen_result_free(&c);
}

static void test_limits_and_errors(void **state) {
    (void)state;
    as_error err = {0};
    gen_result g;
    gen_opts o = {.max_new = 100, .threads = 1};
    int max = as_model_max_tokens(g_m);
    if (gen_generate(g_m, NULL, g_prompt, g_np, &o, &g, &err)) fail_msg("%s", err.msg);
    assert_int_equal(g.T, max);
    assert_int_equal(g.steps, max - g_np);
    gen_result_free(&g);
    assert_int_equal(gen_generate(g_m, NULL, g_prompt, 0, &o, &g, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "empty"));
    int32_t *full = calloc((size_t)max, sizeof *full);
    assert_int_equal(gen_generate(g_m, NULL, full, max, &o, &g, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "no room left"));
    assert_null(g.ids);
    free(full);
    as_model *bert = NULL;
    if (as_model_load(AS_SOURCE_DIR "/tests/ref/fixtures/models/bert", &bert, &err)) fail_msg("%s", err.msg);
    int32_t ids[3] = {1, 5, 2};
    assert_int_equal(gen_generate(bert, NULL, ids, 3, &o, &g, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "causal-LM head"));
    as_model_free(bert);
}

/* The key/value cache against the full forward of every step: each decoder family's
 * fixture (GQA, sliding windows shorter than the sequence, soft-caps, Gemma 3's local RoPE,
 * partial rotary, yarn / llama3 frequencies, GPT-2's positions, BF16 weights) at 1 and 2
 * threads, greedy: the same ids, and every step's rows within 1e-5. A model whose RoPE
 * depends on the length (dynamic NTK) is not served by the cache. */
/* Greedy generation of 20 ids after prompt (n) on the cache and with full_forward: the
 * same ids, every row within 1e-5. */
static void cache_vs_full(as_model *m, const as_encoding *src, const char *name, const int32_t *prompt, int n,
                          int threads) {
    as_error err = {0};
    gen_result a, b;
    gen_opts o = {.max_new = 20, .rows = 1, .threads = threads};
    gen_opts full = o;
    full.full_forward = 1;
    if (gen_generate(m, src, prompt, n, &o, &a, &err) || gen_generate(m, src, prompt, n, &full, &b, &err))
        fail_msg("%s: %s", name, err.msg);
    assert_int_equal(a.steps, b.steps);
    assert_int_equal(a.K, b.K);
    assert_true(a.cached && !b.cached);
    if (memcmp(a.gen, b.gen, (size_t)a.steps * sizeof(int32_t)))
        fail_msg("%s, %d threads: the cache's ids differ from the full forward's", name, threads);
    double worst = 0.0;
    for (size_t i = 0; i < (size_t)a.steps * a.L * a.H * a.K; i++) {
        double d = fabs((double)a.rows[i] - b.rows[i]);
        if (!(d <= worst)) worst = d;
    }
    printf("%-15s %d thread(s): %d steps, the same ids; rows max |d| %.2e\n", name, threads, a.steps, worst);
    if (!(worst <= 1e-5)) fail_msg("%s: rows differ by %.3g", name, worst);
    gen_result_free(&a);
    gen_result_free(&b);
}

static void test_cache_vs_full(void **state) {
    (void)state;
    static const char *const names[] = {"gpt2", "llama", "llama3_scaled", "llama_bf16", "mistral_swa", "qwen2_noprefix",
                                        "qwen3", "gemma2", "gemma3", "phi3", "yarn", "gpt2_scaling"};
    for (size_t f = 0; f < sizeof names / sizeof names[0]; f++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/%s", AS_SOURCE_DIR, names[f]);
        as_model *m = NULL;
        as_error err = {0};
        if (as_model_load(dir, &m, &err)) fail_msg("%s: %s", names[f], err.msg);
        int V = as_model_config(m)->vocab_size, n = 7;
        int32_t prompt[8];
        for (int i = 0; i < n; i++) prompt[i] = 4 + (i * 13 + (int)f) % (V - 4);
        for (int threads = 1; threads <= 2; threads++) cache_vs_full(m, NULL, names[f], prompt, n, threads);
        /* at precision bf16 (the products' inputs rounded; the packed kernels where the CPU has them) */
        if (!strcmp(names[f], "gemma2")) {
            if (as_model_set_precision(m, AS_PRECISION_BF16, &err)) fail_msg("%s", err.msg);
            cache_vs_full(m, NULL, "gemma2 bf16", prompt, n, 2);
        }
        as_model_free(m);
    }
    /* encoder-decoder models: the source through the encoder once, the decoder on its cache;
       the rows compared are the cross-attention's */
    static const char *const s2s[] = {"bart_tiny", "marian_tiny", "mbart_tiny", "t5_tiny", "mt5_tiny"};
    for (size_t f = 0; f < sizeof s2s / sizeof s2s[0]; f++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/%s", AS_SOURCE_DIR, s2s[f]);
        as_model *m = NULL;
        as_error err = {0};
        if (as_model_load(dir, &m, &err)) fail_msg("%s: %s", s2s[f], err.msg);
        assert_true(model_s2s_kv_supported(m) && !model_kv_supported(m));
        const as_config *c = as_model_config(m);
        int V = c->vocab_size, n = 9;
        int32_t source[9], start[2] = {c->decoder_start_token_id >= 0 ? c->decoder_start_token_id : 2, 5};
        for (int i = 0; i < n; i++) source[i] = 4 + (i * 11 + (int)f) % (V - 5);
        as_encoding src = {0};
        if (as_encoding_from_ids(m, source, NULL, n, &src, &err)) fail_msg("%s: %s", s2s[f], err.msg);
        for (int threads = 1; threads <= 2; threads++) cache_vs_full(m, &src, s2s[f], start, 1, threads);
        cache_vs_full(m, &src, s2s[f], start, 2, 2); /* two start ids: the first step runs both */
        as_encoding_free(&src);
        as_model_free(m);
    }
    /* RoPE that follows the length (dynamic NTK, LongRoPE): each step the whole sequence */
    static const char *const whole[] = {"dynamic", "longrope"};
    for (int f = 0; f < 2; f++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/%s", AS_SOURCE_DIR, whole[f]);
        as_model *m = NULL;
        as_error err = {0};
        if (as_model_load(dir, &m, &err)) fail_msg("%s: %s", whole[f], err.msg);
        int32_t prompt[3] = {1, 5, 9};
        gen_result g;
        gen_opts o = {.max_new = 4, .threads = 1};
        if (gen_generate(m, NULL, prompt, 3, &o, &g, &err)) fail_msg("%s: %s", whole[f], err.msg);
        assert_int_equal(g.steps, 4);
        assert_false(g.cached);
        gen_result_free(&g);
        as_model_free(m);
    }
}

/* model_forward_step's refusals: a model it does not serve, more ids than the cache has
 * room for, an id outside the vocabulary; the cache is unchanged after each. */
static void test_step_errors(void **state) {
    (void)state;
    as_error err = {0};
    model_kv kv;
    float logits[512];
    as_model *bert = NULL;
    if (as_model_load(AS_SOURCE_DIR "/tests/ref/fixtures/models/bert", &bert, &err)) fail_msg("%s", err.msg);
    assert_false(model_kv_supported(bert));
    if (model_kv_init(bert, 4, &kv, &err)) fail_msg("%s", err.msg);
    int32_t ids[6] = {1, 5, 9, 7, 3, 2};
    assert_int_equal(model_forward_step(bert, &kv, ids, 2, 1, logits, NULL, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "decoder-only"));
    model_kv_free(&kv);
    as_model_free(bert);
    assert_true(model_kv_supported(g_m));
    assert_true(as_model_config(g_m)->vocab_size <= 512);
    assert_int_equal(model_kv_init(g_m, as_model_max_tokens(g_m) + 1, &kv, &err), AS_ERR_INPUT);
    assert_null(kv.k);
    if (model_kv_init(g_m, 4, &kv, &err)) fail_msg("%s", err.msg);
    assert_int_equal(model_forward_step(g_m, &kv, ids, 5, 1, logits, NULL, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "over the cache"));
    assert_int_equal(kv.n, 0);
    int32_t bad[2] = {1, 1 << 20};
    assert_int_equal(model_forward_step(g_m, &kv, bad, 2, 1, logits, NULL, &err), AS_ERR_INPUT);
    assert_int_equal(kv.n, 0);
    assert_int_equal(model_forward_step(g_m, &kv, ids, 3, 1, logits, NULL, &err), AS_OK);
    assert_int_equal(model_forward_step(g_m, &kv, ids + 3, 1, 1, logits, NULL, &err), AS_OK);
    assert_int_equal(kv.n, 4);
    assert_int_equal(model_forward_step(g_m, &kv, ids, 1, 1, logits, NULL, &err), AS_ERR_INPUT);
    model_kv_free(&kv);

    /* the encoder-decoder state: refused for a decoder-only model; a step over its
       positions or with an id outside the vocabulary leaves it as it was */
    model_s2s_kv x;
    as_encoding src = {0};
    if (as_encoding_from_ids(g_m, ids, NULL, 3, &src, &err)) fail_msg("%s", err.msg);
    assert_int_equal(model_s2s_kv_init(g_m, &src, 4, 1, &x, &err), AS_ERR_INPUT);
    assert_null(x.ck);
    as_encoding_free(&src);
    as_model *t5 = NULL;
    if (as_model_load(AS_SOURCE_DIR "/tests/ref/fixtures/models/t5_tiny", &t5, &err)) fail_msg("%s", err.msg);
    assert_true(as_model_config(t5)->vocab_size <= 512);
    if (as_encoding_from_ids(t5, ids, NULL, 6, &src, &err)) fail_msg("%s", err.msg);
    if (model_s2s_kv_init(t5, &src, 3, 1, &x, &err)) fail_msg("%s", err.msg);
    assert_int_equal(x.Ts, 6);
    assert_int_equal(model_s2s_step(t5, &x, ids, 4, 1, logits, NULL, &err), AS_ERR_INPUT);
    assert_non_null(strstr(err.msg, "over the cache"));
    assert_int_equal(model_s2s_step(t5, &x, bad, 2, 1, logits, NULL, &err), AS_ERR_INPUT);
    assert_int_equal(x.self.n, 0);
    assert_int_equal(model_s2s_step(t5, &x, ids, 3, 1, logits, NULL, &err), AS_OK);
    assert_int_equal(x.self.n, 3);
    assert_int_equal(model_s2s_step(t5, &x, ids, 1, 1, logits, NULL, &err), AS_ERR_INPUT);
    model_s2s_kv_free(&x);
    model_s2s_kv_free(&x); /* a freed state frees as a no-op */
    as_encoding_free(&src);
    as_model_free(t5);
}

static void test_logits_processors(void **state) {
    (void)state;
    static as_config c; /* large: not on the stack */
    memset(&c, 0, sizeof c);
    enum { V = 8 };
    c.vocab_size = V;
    c.n_eos_ids = 2, c.eos_ids[0] = 2, c.eos_ids[1] = 5;
    c.forced_bos_token_id = 6, c.forced_eos_token_id = 2;
    c.n_bad_words = 3;
    c.bad_word_len[0] = 1, c.bad_words[0][0] = 7;                         /* never */
    c.bad_word_len[1] = 2, c.bad_words[1][0] = 3, c.bad_words[1][1] = 4; /* 4 after 3 */
    c.bad_word_len[2] = 1, c.bad_words[2][0] = 5;                         /* an eos id: left out */
    assert_true(gen_is_eos(&c, 2) && gen_is_eos(&c, 5) && !gen_is_eos(&c, 0));
    const int32_t ids[4] = {0, 1, 3, 1};
    float row[V];
    for (int cur = 1; cur <= 4; cur++) {
        for (int v = 0; v < V; v++) row[v] = 0.5f * (float)v;
        gen_process_logits(&c, ids, cur, 10, row);
        for (int v = 0; v < V; v++) {
            float want = 0.5f * (float)v;
            if (cur == 1) want = v == 6 ? 0.0f : -INFINITY; /* forced BOS */
            else if (v == 7 || (v == 4 && cur == 3)) want = -INFINITY;
            assert_true(row[v] == want);
        }
    }
    for (int v = 0; v < V; v++) row[v] = 1.0f;
    gen_process_logits(&c, ids, 4, 5, row); /* cur == max_len - 1: forced EOS */
    for (int v = 0; v < V; v++) assert_true(row[v] == (v == 2 ? 0.0f : -INFINITY));
    c.forced_bos_token_id = c.forced_eos_token_id = -1, c.n_bad_words = -1; /* none held: unchanged */
    for (int v = 0; v < V; v++) row[v] = 1.0f;
    gen_process_logits(&c, ids, 1, 2, row);
    for (int v = 0; v < V; v++) assert_true(row[v] == 1.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_rows),
        cmocka_unit_test(test_top_probs),
        cmocka_unit_test(test_sampling),
        cmocka_unit_test(test_limits_and_errors),
        cmocka_unit_test(test_cache_vs_full),
        cmocka_unit_test(test_step_errors),
        cmocka_unit_test(test_logits_processors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
