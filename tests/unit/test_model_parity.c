/* test_model_parity.c — numerical parity of the forward pass with Hugging Face.
 *
 * What it does: for every fixture folder written by tests/ref/gen_models.py
 * (tests/ref/fixtures/models/<name>/: config.json, model.safetensors,
 * expected.safetensors) it loads the model through the public API, runs each case
 * (single sentence, sentence pair, right-padded sequence) with full capture and
 * compares attention probabilities, pre-softmax scores (where attention is
 * allowed), per-head q / k / v, hidden states and logits with stated max-abs
 * tolerances, printing the max diff of every tensor. It also checks selective
 * capture (one layer / one head, early stop) and input errors reported through the
 * public API (layer out of range, token id out of range, a tensor missing from or
 * misshapen in model.safetensors, an unsupported model_type), and the RoPE frequencies
 * and cos / sin rows of real checkpoints' rotary settings at positions up to 65,535
 * (tests/ref/fixtures/rope_tables.safetensors, tests/ref/gen_rope.py).
 * What it does not: tokenization (encodings are built from raw ids) or speed.
 *
 * Shapes in expected.safetensors, per case prefix "<case>.":
 *   input_ids, token_type_ids, attention_mask (T) I32
 *   attentions, attention_scores (L, H, T, T); queries, keys, values (L, H, T, Dh)
 *   hidden_states (L+1, T, D); logits (1, C) or (T, V)   all F32
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
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "attnscope.h"
#include "core/core.h"
#include "core/gemm_bf16.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/ops.h"

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif
#define FIXTURE_ROOT AS_SOURCE_DIR "/tests/ref/fixtures/models"

/* Max-abs tolerances. F32 weights: the reference is float32 torch, so only
 * summation order differs. F16 / BF16 weights: the reference was computed from the
 * rounded weights, so the same accuracy is expected, but the bounds are looser. */
typedef struct {
    double attn, scores, qkv, hidden, logits;
} tolerances;
static const tolerances TOL_F32 = {1e-5, 1e-4, 1e-4, 1e-4, 1e-4};
static const tolerances TOL_LOWP = {1e-4, 1e-3, 1e-3, 1e-3, 1e-3};

typedef struct {
    const char *name;
    int lowp; /* 1 = weights stored as F16 / BF16 */
} fixture;

static const fixture FIXTURES[] = {
    {"bert", 0},     {"bert_noprefix_mlm", 0}, {"roberta", 0},   {"distilbert", 0},
    {"gpt2", 0},     {"bert_f16", 1},          {"bert_bf16", 1}, {"gpt2_f16", 1},
    {"electra", 0},  {"gpt2_scaling", 0}, /* scale_attn_weights false, scale_attn_by_inverse_layer_idx */
    /* the LLaMA family (tests/ref/gen_llama.py) */
    {"llama", 0},    {"llama3_scaled", 0},     {"llama_bf16", 1}, {"llama_cls", 0},
    {"mistral_swa", 0}, {"qwen2_noprefix", 0}, {"qwen3", 0},      {"gemma2", 0},
    {"gemma3", 0},   {"phi3", 0},              {"yarn", 0},
    {"dynamic", 0},  {"longrope", 0}, /* long case past the original length: grown base / long factors */
};
static const char *const CASES[] = {"single", "pair", "padded"};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

static void fixture_dir(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", FIXTURE_ROOT, name);
}

/* ---- reading expected tensors ------------------------------------------- */

/* Finds "<case>.<what>" in f, checks dtype and rank, returns it (borrowed). */
static const st_tensor *want_tensor(const st_file *f, const char *fx, const char *case_name,
                                    const char *what, as_dtype dtype, int ndim) {
    char name[128];
    snprintf(name, sizeof name, "%s.%s", case_name, what);
    const st_tensor *t = st_file_find(f, name);
    if (!t) fail_msg("%s: expected.safetensors has no tensor %s", fx, name);
    assert_int_equal(t->dtype, dtype);
    assert_int_equal(t->ndim, ndim);
    return t;
}

/* Copies a tensor's data into a new buffer (the mapping need not be aligned). */
static void *copy_data(const st_tensor *t) {
    void *p = malloc(t->nbytes ? t->nbytes : 1);
    assert_non_null(p);
    memcpy(p, t->data, t->nbytes);
    return p;
}

static double max_abs_diff(const float *a, const float *b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d; /* NaN propagates as NaN */
    }
    return m;
}

/* Prints "fx/case what max|diff| = x" and counts a failure when x > tol or NaN. */
static int report(const char *fx, const char *case_name, const char *what, double d, double tol) {
    int bad = !(d <= tol);
    if (bad)
        printf("%s/%s %s max|diff| = %.2e  FAIL (tolerance %.0e)\n", fx, case_name, what, d, tol);
    else
        printf("%s/%s %s max|diff| = %.2e\n", fx, case_name, what, d);
    fflush(stdout);
    return bad;
}

/* ---- one fixture, all cases --------------------------------------------- */

static void build_encoding(const as_model *m, const st_file *ex, const char *fx,
                           const char *case_name, as_encoding *enc, int32_t **mask_out) {
    const st_tensor *ti = want_tensor(ex, fx, case_name, "input_ids", DTYPE_I32, 1);
    const st_tensor *tt = want_tensor(ex, fx, case_name, "token_type_ids", DTYPE_I32, 1);
    const st_tensor *tm = want_tensor(ex, fx, case_name, "attention_mask", DTYPE_I32, 1);
    int T = (int)ti->shape[0];
    assert_int_equal(tt->shape[0], T);
    assert_int_equal(tm->shape[0], T);
    int32_t *ids = copy_data(ti), *types = copy_data(tt), *mask = copy_data(tm);
    as_error err = {0};
    /* GPT-2 adds wte[type id] whenever type ids are passed (HF GPT2Model): only the
     * "typed" case's reference passed them */
    int pass_types = as_model_config(m)->arch != ARCH_GPT2 || !strcmp(case_name, "typed");
    as_status s = as_encoding_from_ids(m, ids, pass_types ? types : NULL, T, enc, &err);
    if (s != AS_OK) fail_msg("%s/%s: as_encoding_from_ids: %s", fx, case_name, err.msg);
    assert_int_equal(enc->n, T);
    for (int i = 0; i < T; i++) {
        assert_int_equal(enc->ids[i], ids[i]);
        assert_int_equal(enc->type_ids[i], types[i]);
        enc->mask[i] = mask[i];
    }
    free(ids);
    free(types);
    *mask_out = mask;
}

static int compare_case(const as_model *m, const st_file *ex, const char *fx, const char *case_name,
                        const tolerances *tol, const char *logits_head) {
    const as_config *cfg = as_model_config(m);
    const int L = cfg->n_layer, H = cfg->n_head, D = cfg->d_model, Dh = cfg->d_head;
    as_encoding enc = {0};
    int32_t *mask = NULL;
    build_encoding(m, ex, fx, case_name, &enc, &mask);
    const int T = enc.n;
    const size_t TT = (size_t)T * T;

    as_capture_spec spec = {.what = CAP_ALL, .layer = -1, .head = -1};
    as_run *run = NULL;
    as_error err = {0};
    as_status s = as_forward(m, &enc, &spec, &run, &err);
    if (s != AS_OK) fail_msg("%s/%s: as_forward: %s", fx, case_name, err.msg);
    assert_non_null(run);
    assert_int_equal(run->T, T);
    assert_int_equal(run->L, L);
    assert_int_equal(run->H, H);
    assert_int_equal(run->D, D);
    assert_int_equal(run->Dh, Dh);
    assert_int_equal(run->layer_lo, 0);
    assert_int_equal(run->n_lay, L);
    assert_int_equal(run->head_lo, 0);
    assert_int_equal(run->n_hd, H);
    assert_int_equal(run->n_run, L);
    assert_non_null(run->attn);
    assert_non_null(run->scores);
    assert_non_null(run->q);
    assert_non_null(run->k);
    assert_non_null(run->v);
    assert_non_null(run->hidden);
    assert_non_null(run->logits);

    int bad = 0;
    const st_tensor *t;
    float *e;

    /* attention probabilities: everywhere, padded rows and masked columns included */
    t = want_tensor(ex, fx, case_name, "attentions", DTYPE_F32, 4);
    assert_int_equal(t->n_elems, (size_t)L * H * TT);
    e = copy_data(t);
    bad += report(fx, case_name, "attentions", max_abs_diff(run->attn, e, t->n_elems), tol->attn);
    free(e);

    /* scores: only where attention is allowed (masked entries hold finfo.min-sized
     * values, or -inf where HF adds two of them) */
    t = want_tensor(ex, fx, case_name, "attention_scores", DTYPE_F32, 4);
    assert_int_equal(t->n_elems, (size_t)L * H * TT);
    e = copy_data(t);
    {
        double d = 0.0;
        size_t n_masked = 0;
        for (int lh = 0; lh < L * H; lh++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j < T; j++) {
                    size_t idx = (size_t)lh * TT + (size_t)i * T + j;
                    /* the reference holds finfo.min where attention is disallowed
                       (padding, causal, sliding window) */
                    int allowed = e[idx] > -1e30f;
                    if (allowed != (mask[j] != 0 && (!cfg->causal || j <= i)) && !cfg->sliding_window) bad++;
                    if (!allowed) {
                        /* a disallowed entry must stay hugely negative */
                        if (!(run->scores[idx] < -1e30f)) bad++;
                        n_masked++;
                        continue;
                    }
                    double x = fabs((double)run->scores[idx] - (double)e[idx]);
                    if (!(x <= d)) d = x;
                }
        bad += report(fx, case_name, "attention_scores(allowed)", d, tol->scores);
        if (n_masked) printf("    (%zu masked score entries checked to be < -1e30)\n", n_masked);
    }
    free(e);

    /* per-head q, k, v */
    static const char *const qkv_names[3] = {"queries", "keys", "values"};
    const float *const qkv_run[3] = {run->q, run->k, run->v};
    for (int i = 0; i < 3; i++) {
        t = want_tensor(ex, fx, case_name, qkv_names[i], DTYPE_F32, 4);
        assert_int_equal(t->n_elems, (size_t)L * H * T * Dh);
        e = copy_data(t);
        bad += report(fx, case_name, qkv_names[i], max_abs_diff(qkv_run[i], e, t->n_elems), tol->qkv);
        free(e);
    }

    /* rotary models: q and k before RoPE, and the key/value head of each query head */
    if (cfg->rope_dim > 0) {
        static const char *const pre_names[2] = {"queries_pre_rope", "keys_pre_rope"};
        const float *const pre_run[2] = {run->q_pre, run->k_pre};
        for (int i = 0; i < 2; i++) {
            assert_non_null(pre_run[i]);
            t = want_tensor(ex, fx, case_name, pre_names[i], DTYPE_F32, 4);
            assert_int_equal(t->n_elems, (size_t)L * H * T * Dh);
            e = copy_data(t);
            bad += report(fx, case_name, pre_names[i], max_abs_diff(pre_run[i], e, t->n_elems), tol->qkv);
            free(e);
        }
    } else {
        assert_null(run->q_pre);
        assert_null(run->k_pre);
    }
    char kvname[128];
    snprintf(kvname, sizeof kvname, "%s.kv_group", case_name);
    if ((t = st_file_find(ex, kvname)) != NULL) {
        int32_t *g = copy_data(t);
        assert_int_equal(t->n_elems, (size_t)H);
        for (int h = 0; h < H; h++) assert_int_equal(as_run_kv_group(run, h), g[h]);
        free(g);
    } else {
        for (int h = 0; h < H; h++) assert_int_equal(as_run_kv_group(run, h), h);
    }

    /* hidden states: embedding output, then each layer (GPT-2: the last after ln_f) */
    t = want_tensor(ex, fx, case_name, "hidden_states", DTYPE_F32, 3);
    assert_int_equal(t->shape[0], L + 1);
    assert_int_equal(t->n_elems, (size_t)(L + 1) * T * D);
    e = copy_data(t);
    bad += report(fx, case_name, "hidden_states", max_abs_diff(run->hidden, e, t->n_elems), tol->hidden);
    for (int l = 0; l <= L; l++) {
        size_t per = (size_t)T * D;
        double d = max_abs_diff(run->hidden + l * per, e + l * per, per);
        if (!(d <= tol->hidden)) printf("    hidden_states[%d] max|diff| = %.2e\n", l, d);
    }
    free(e);

    /* logits: classifier (1, C) or MLM / LM (T, V) */
    t = want_tensor(ex, fx, case_name, "logits", DTYPE_F32, 2);
    if (run->logits_rows != t->shape[0] || run->logits_cols != t->shape[1]) {
        printf("%s/%s logits shape [%d, %d], expected [%lld, %lld] (head %s)  FAIL\n", fx, case_name,
               run->logits_rows, run->logits_cols, (long long)t->shape[0], (long long)t->shape[1],
               logits_head);
        bad++;
    } else {
        e = copy_data(t);
        bad += report(fx, case_name, "logits", max_abs_diff(run->logits, e, t->n_elems), tol->logits);
        free(e);
    }
    as_task_head want_head = !strcmp(logits_head, "classifier") ? HEAD_CLASSIFIER
                             : !strcmp(logits_head, "mlm")      ? HEAD_MLM
                                                                : HEAD_LM;
    if (run->logits_head != want_head) {
        printf("%s/%s logits_head %d, expected %d (%s)  FAIL\n", fx, case_name, (int)run->logits_head,
               (int)want_head, logits_head);
        bad++;
    }

    /* views agree with the packed arrays */
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            size_t lh = (size_t)l * H + h;
            assert_ptr_equal(as_run_attn(run, l, h), run->attn + lh * TT);
            assert_ptr_equal(as_run_scores(run, l, h), run->scores + lh * TT);
            assert_ptr_equal(as_run_q(run, l, h), run->q + lh * T * Dh);
            assert_ptr_equal(as_run_k(run, l, h), run->k + lh * T * Dh);
            assert_ptr_equal(as_run_v(run, l, h), run->v + lh * T * Dh);
        }

    as_run_free(run);
    as_encoding_free(&enc);
    free(mask);
    return bad;
}

static void test_fixture(void **state) {
    const fixture *fx = *state;
    char dir[1024], path[1200];
    fixture_dir(dir, sizeof dir, fx->name);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    as_error err = {0};
    as_model *m = NULL;
    if (as_model_load(dir, &m, &err) != AS_OK) fail_msg("%s: as_model_load: %s", fx->name, err.msg);
    st_file *ex = NULL;
    if (st_file_open(path, &ex, &err) != AS_OK) fail_msg("%s: %s", fx->name, err.msg);

    const char *head = st_file_metadata(ex, "logits_head");
    const char *dtype = st_file_metadata(ex, "dtype");
    assert_non_null(head);
    assert_non_null(dtype);
    assert_string_equal(as_dtype_name(as_model_dtype(m)), dtype);
    unsigned heads = as_model_heads(m);
    if (!strcmp(head, "classifier")) assert_true(heads & HEAD_CLASSIFIER);
    if (!strcmp(head, "mlm")) assert_true(heads & HEAD_MLM);
    if (!strcmp(head, "lm")) assert_true(heads & HEAD_LM);
    if (!strcmp(fx->name, "bert")) assert_true(heads & HEAD_MLM); /* both heads present */

    /* every case the generator wrote (metadata "cases"): the encoder fixtures hold single,
       pair and padded; GPT-2's also "typed" (token_type_ids passed, wte[type id] added);
       the LLaMA family's single, padded and long (past the sliding windows) */
    const char *cases = st_file_metadata(ex, "cases");
    assert_non_null(cases);
    if (as_model_config(m)->arch == ARCH_GPT2) assert_non_null(strstr(cases, "typed"));
    if (as_model_config(m)->arch != ARCH_LLAMA)
        for (int c = 0; c < N_CASES; c++) assert_non_null(strstr(cases, CASES[c]));
    int bad = 0, n_cases = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", cases);
    for (char *save = NULL, *c = strtok_r(list, ",", &save); c; c = strtok_r(NULL, ",", &save), n_cases++)
        bad += compare_case(m, ex, fx->name, c, fx->lowp ? &TOL_LOWP : &TOL_F32, head);
    assert_true(n_cases >= 3);
    st_file_free(ex);
    as_model_free(m);
    if (bad) fail_msg("%s: %d comparison(s) out of tolerance (see the max|diff| lines above)", fx->name, bad);
}

/* ---- selective capture ---------------------------------------------------- */

typedef struct {
    as_model *m;
    as_encoding enc;
    int32_t *mask;
    st_file *ex;
} loaded_case;

static void load_case(const char *name, const char *case_name, loaded_case *lc) {
    char dir[1024], path[1200];
    as_error err = {0};
    memset(lc, 0, sizeof *lc);
    fixture_dir(dir, sizeof dir, name);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    if (as_model_load(dir, &lc->m, &err) != AS_OK) fail_msg("%s: %s", name, err.msg);
    if (st_file_open(path, &lc->ex, &err) != AS_OK) fail_msg("%s: %s", name, err.msg);
    build_encoding(lc->m, lc->ex, name, case_name, &lc->enc, &lc->mask);
}

static void free_case(loaded_case *lc) {
    as_encoding_free(&lc->enc);
    free(lc->mask);
    st_file_free(lc->ex);
    as_model_free(lc->m);
}

static as_run *forward_ok(const loaded_case *lc, unsigned what, int layer, int head) {
    as_capture_spec spec = {.what = what, .layer = layer, .head = head};
    as_run *run = NULL;
    as_error err = {0};
    if (as_forward(lc->m, &lc->enc, &spec, &run, &err) != AS_OK)
        fail_msg("as_forward(what %u, layer %d, head %d): %s", what, layer, head, err.msg);
    assert_non_null(run);
    return run;
}

static void test_selective_capture(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "gpt2"};
    for (int fi = 0; fi < 2; fi++) {
        loaded_case lc;
        load_case(names[fi], "pair", &lc);
        const as_config *cfg = as_model_config(lc.m);
        const int L = cfg->n_layer, H = cfg->n_head, T = lc.enc.n, Dh = cfg->d_head;
        const size_t TT = (size_t)T * T, TD = (size_t)T * Dh;
        as_run *full = forward_ok(&lc, CAP_ALL, -1, -1);

        /* one layer, one head, attention only */
        as_run *one = forward_ok(&lc, CAP_ATTN, 1, 2);
        assert_int_equal(one->layer_lo, 1);
        assert_int_equal(one->n_lay, 1);
        assert_int_equal(one->head_lo, 2);
        assert_int_equal(one->n_hd, 1);
        assert_int_equal(one->n_run, 2); /* stops after the deepest layer needed */
        assert_non_null(one->attn);
        assert_null(one->scores);
        assert_null(one->q);
        assert_null(one->k);
        assert_null(one->v);
        assert_null(one->hidden);
        assert_null(one->logits);
        double d = max_abs_diff(one->attn, full->attn + ((size_t)1 * H + 2) * TT, TT);
        printf("%s/pair selective attn[1,2] vs full run max|diff| = %.2e\n", names[fi], d);
        assert_true(d <= 1e-6);
        assert_ptr_equal(as_run_attn(one, 1, 2), one->attn);
        assert_null(as_run_attn(one, 1, 1));
        assert_null(as_run_attn(one, 0, 2));
        assert_null(as_run_scores(one, 1, 2));
        assert_null(as_run_q(one, 1, 2));

        /* layer 0, all heads, attention + qkv: only one layer computed */
        as_run *l0 = forward_ok(&lc, CAP_ATTN | CAP_QKV, 0, -1);
        assert_int_equal(l0->layer_lo, 0);
        assert_int_equal(l0->n_lay, 1);
        assert_int_equal(l0->head_lo, 0);
        assert_int_equal(l0->n_hd, H);
        assert_int_equal(l0->n_run, 1);
        assert_non_null(l0->attn);
        assert_non_null(l0->q);
        assert_non_null(l0->k);
        assert_non_null(l0->v);
        assert_null(l0->scores);
        assert_null(l0->hidden);
        assert_null(l0->logits);
        double dq = 0.0;
        for (int h = 0; h < H; h++) {
            const float *a = as_run_attn(l0, 0, h), *fa = as_run_attn(full, 0, h);
            assert_non_null(a);
            assert_non_null(fa);
            d = max_abs_diff(a, fa, TT);
            if (d > dq) dq = d;
            d = max_abs_diff(as_run_q(l0, 0, h), as_run_q(full, 0, h), TD);
            if (d > dq) dq = d;
            d = max_abs_diff(as_run_k(l0, 0, h), as_run_k(full, 0, h), TD);
            if (d > dq) dq = d;
            d = max_abs_diff(as_run_v(l0, 0, h), as_run_v(full, 0, h), TD);
            if (d > dq) dq = d;
        }
        printf("%s/pair layer-0 run (attn, q, k, v) vs full run max|diff| = %.2e\n", names[fi], dq);
        assert_true(dq <= 1e-6);
        assert_null(as_run_attn(l0, 1, 0));
        assert_null(as_run_q(l0, L - 1, 0));

        /* the last layer with logits: everything computed */
        as_run *lg = forward_ok(&lc, CAP_ATTN | CAP_LOGITS, L - 1, 0);
        assert_int_equal(lg->n_run, L);
        assert_non_null(lg->logits);
        assert_int_equal(lg->logits_rows, full->logits_rows);
        assert_int_equal(lg->logits_cols, full->logits_cols);
        d = max_abs_diff(lg->logits, full->logits, (size_t)full->logits_rows * full->logits_cols);
        assert_true(d <= 1e-6);

        as_run_free(lg);
        as_run_free(l0);
        as_run_free(one);
        as_run_free(full);
        free_case(&lc);
    }
}

/* ---- errors through the public API ---------------------------------------- */

static void test_spec_out_of_range(void **state) {
    (void)state;
    loaded_case lc;
    load_case("bert", "single", &lc);
    const as_config *cfg = as_model_config(lc.m);
    const int bad_specs[][2] = {{cfg->n_layer, -1}, {-2, -1}, {0, cfg->n_head}, {0, -2}};
    for (size_t i = 0; i < sizeof bad_specs / sizeof bad_specs[0]; i++) {
        as_capture_spec spec = {.what = CAP_ALL, .layer = bad_specs[i][0], .head = bad_specs[i][1]};
        as_run *run = NULL;
        as_error err = {0};
        as_status s = as_forward(lc.m, &lc.enc, &spec, &run, &err);
        printf("spec layer %d head %d -> %d: %s\n", spec.layer, spec.head, (int)s, err.msg);
        assert_int_equal(s, AS_ERR_INPUT);
        assert_null(run);
        assert_true(strlen(err.msg) > 0);
        assert_null(strchr(err.msg, '\n'));
    }
    free_case(&lc);
}

static void test_id_out_of_range(void **state) {
    (void)state;
    char dir[1024];
    fixture_dir(dir, sizeof dir, "bert");
    as_model *m = NULL;
    as_error err = {0};
    if (as_model_load(dir, &m, &err) != AS_OK) fail_msg("%s", err.msg);
    const int V = as_model_config(m)->vocab_size;
    int32_t ids[4] = {2, 10, V, 3};
    as_encoding enc = {0};
    as_status s = as_encoding_from_ids(m, ids, NULL, 4, &enc, &err);
    printf("id %d (V = %d) -> %d: %s\n", V, V, (int)s, err.msg);
    assert_int_equal(s, AS_ERR_INPUT);
    as_encoding_free(&enc);
    ids[2] = -1;
    s = as_encoding_from_ids(m, ids, NULL, 4, &enc, &err);
    assert_int_equal(s, AS_ERR_INPUT);
    as_encoding_free(&enc);
    ids[2] = V - 1;
    s = as_encoding_from_ids(m, ids, NULL, 4, &enc, &err);
    assert_int_equal(s, AS_OK);
    as_encoding_free(&enc);
    as_model_free(m);
}

/* A copy of a fixture folder in a fresh temporary directory. */
typedef struct {
    char dir[256];
} tmp_model;

static void copy_file(const char *from, const char *to) {
    FILE *in = fopen(from, "rb");
    assert_non_null(in);
    FILE *out = fopen(to, "wb");
    assert_non_null(out);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0) assert_int_equal(fwrite(buf, 1, n, out), n);
    fclose(in);
    assert_int_equal(fclose(out), 0);
}

static void tmp_model_init(tmp_model *tm, const char *fixture_name) {
    char src[1024], a[1200], b[512];
    snprintf(tm->dir, sizeof tm->dir, "/tmp/as_parity_XXXXXX");
    assert_non_null(mkdtemp(tm->dir));
    fixture_dir(src, sizeof src, fixture_name);
    snprintf(a, sizeof a, "%s/config.json", src);
    snprintf(b, sizeof b, "%s/config.json", tm->dir);
    copy_file(a, b);
}

static void tmp_model_free(tmp_model *tm) {
    static const char *const files[] = {"config.json", "model.safetensors"};
    char p[512];
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", tm->dir, files[i]);
        unlink(p);
    }
    rmdir(tm->dir);
}

/* Writes tm/model.safetensors from the fixture's weights: tensor `drop` left out
 * (when non-NULL), and tensor `reshape` given shape (d0, d1) (same element count). */
static void write_weights(const tmp_model *tm, const char *fixture_name, const char *drop,
                          const char *reshape, int64_t d0, int64_t d1) {
    char src[1024], path[1200], dst[512];
    fixture_dir(src, sizeof src, fixture_name);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    snprintf(dst, sizeof dst, "%s/model.safetensors", tm->dir);
    st_file *f = NULL;
    as_error err = {0};
    if (st_file_open(path, &f, &err) != AS_OK) fail_msg("%s", err.msg);
    int n = st_file_count(f), k = 0, found_drop = 0, found_reshape = 0;
    st_tensor *ts = calloc((size_t)n, sizeof *ts);
    assert_non_null(ts);
    for (int i = 0; i < n; i++) {
        const st_tensor *t = st_file_tensor(f, i);
        if (drop && !strcmp(t->name, drop)) {
            found_drop = 1;
            continue;
        }
        ts[k] = *t;
        if (reshape && !strcmp(t->name, reshape)) {
            assert_int_equal(t->n_elems, (size_t)(d0 * d1));
            ts[k].ndim = 2;
            ts[k].shape[0] = d0;
            ts[k].shape[1] = d1;
            found_reshape = 1;
        }
        k++;
    }
    assert_true(!drop || found_drop);
    assert_true(!reshape || found_reshape);
    if (st_write(dst, ts, k, &err) != AS_OK) fail_msg("st_write: %s", err.msg);
    free(ts);
    st_file_free(f);
}

static void expect_load_error(const char *dir, const char *must_name) {
    as_model *m = NULL;
    as_error err = {0};
    as_status s = as_model_load(dir, &m, &err);
    printf("load %s -> %d: %s\n", dir, (int)s, err.msg);
    assert_int_equal(s, AS_ERR_INPUT);
    assert_null(m);
    assert_null(strchr(err.msg, '\n'));
    if (must_name && !strstr(err.msg, must_name))
        fail_msg("error message does not name '%s': %s", must_name, err.msg);
}

static void test_missing_tensor(void **state) {
    (void)state;
    static const struct {
        const char *fixture, *tensor;
    } cases[] = {
        {"bert", "bert.encoder.layer.1.attention.self.key.weight"},
        {"bert_noprefix_mlm", "encoder.layer.0.output.LayerNorm.bias"},
        {"distilbert", "distilbert.transformer.layer.1.ffn.lin2.weight"},
        {"gpt2", "transformer.h.2.attn.c_attn.bias"},
        {"roberta", "roberta.embeddings.position_embeddings.weight"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tmp_model tm;
        tmp_model_init(&tm, cases[i].fixture);
        /* sanity: the untouched copy loads */
        write_weights(&tm, cases[i].fixture, NULL, NULL, 0, 0);
        as_model *m = NULL;
        as_error err = {0};
        if (as_model_load(tm.dir, &m, &err) != AS_OK) fail_msg("copy of %s: %s", cases[i].fixture, err.msg);
        as_model_free(m);
        write_weights(&tm, cases[i].fixture, cases[i].tensor, NULL, 0, 0);
        expect_load_error(tm.dir, cases[i].tensor);
        tmp_model_free(&tm);
    }
}

static void test_wrong_shape(void **state) {
    (void)state;
    static const struct {
        const char *fixture, *tensor;
        int64_t d0, d1;
    } cases[] = {
        /* same element count, transposed-looking shapes: a size check alone misses them */
        {"bert", "bert.encoder.layer.0.attention.output.dense.weight", 16, 64},
        {"bert", "bert.encoder.layer.1.intermediate.dense.weight", 32, 64},
        {"gpt2", "transformer.h.0.mlp.c_fc.weight", 128, 32},
        {"distilbert", "distilbert.embeddings.word_embeddings.weight", 32, 112},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tmp_model tm;
        tmp_model_init(&tm, cases[i].fixture);
        write_weights(&tm, cases[i].fixture, NULL, cases[i].tensor, cases[i].d0, cases[i].d1);
        expect_load_error(tm.dir, cases[i].tensor);
        tmp_model_free(&tm);
    }
}

static void test_unsupported_model_type(void **state) {
    (void)state;
    tmp_model tm;
    tmp_model_init(&tm, "bert");
    write_weights(&tm, "bert", NULL, NULL, 0, 0);
    char path[512];
    snprintf(path, sizeof path, "%s/config.json", tm.dir);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    assert_non_null(root);
    assert_int_equal(json_object_set_new(root, "model_type", json_string("xlnet")), 0);
    assert_int_equal(json_dump_file(root, path, JSON_INDENT(2)), 0);
    json_decref(root);
    expect_load_error(tm.dir, "xlnet");
    tmp_model_free(&tm);
}

/* Writes the fixture's weights to tm with the "transformer."/"bert." prefix stripped
 * (as the original "gpt2" checkpoint stores them), an extra HF buffer tensor that
 * the engine must ignore, and split over two shards with an index when sharded. */
static void write_layout(const tmp_model *tm, const char *fixture_name, const char *prefix, int sharded) {
    char src[1024], path[1200];
    fixture_dir(src, sizeof src, fixture_name);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    st_file *f = NULL;
    as_error err = {0};
    if (st_file_open(path, &f, &err) != AS_OK) fail_msg("%s", err.msg);
    int n = st_file_count(f);
    st_tensor *ts = calloc((size_t)n + 1, sizeof *ts);
    char **names = calloc((size_t)n + 1, sizeof *names);
    assert_non_null(ts);
    assert_non_null(names);
    size_t pl = strlen(prefix);
    for (int i = 0; i < n; i++) {
        ts[i] = *st_file_tensor(f, i);
        const char *nm = ts[i].name;
        names[i] = strdup(strncmp(nm, prefix, pl) ? nm : nm + pl);
        ts[i].name = names[i];
    }
    static const float buf[16] = {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1};
    st_tensor extra = {.name = "h.0.attn.bias", .dtype = DTYPE_F32, .ndim = 4,
                       .shape = {1, 1, 4, 4}, .n_elems = 16, .data = buf, .nbytes = sizeof buf};
    memcpy(extra.dtype_name, "F32", 4);
    ts[n] = extra;
    char dst[600];
    if (!sharded) {
        snprintf(dst, sizeof dst, "%s/model.safetensors", tm->dir);
        if (st_write(dst, ts, n + 1, &err) != AS_OK) fail_msg("st_write: %s", err.msg);
    } else {
        int half = (n + 1) / 2;
        snprintf(dst, sizeof dst, "%s/model-00001-of-00002.safetensors", tm->dir);
        if (st_write(dst, ts, half, &err) != AS_OK) fail_msg("st_write: %s", err.msg);
        snprintf(dst, sizeof dst, "%s/model-00002-of-00002.safetensors", tm->dir);
        if (st_write(dst, ts + half, n + 1 - half, &err) != AS_OK) fail_msg("st_write: %s", err.msg);
        json_t *map = json_object();
        for (int i = 0; i <= n; i++)
            json_object_set_new(map, ts[i].name, json_string(i < half ? "model-00001-of-00002.safetensors"
                                                                      : "model-00002-of-00002.safetensors"));
        json_t *root = json_pack("{s:{s:i},s:o}", "metadata", "total_size", 0, "weight_map", map);
        snprintf(dst, sizeof dst, "%s/model.safetensors.index.json", tm->dir);
        assert_int_equal(json_dump_file(root, dst, 0), 0);
        json_decref(root);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    free(ts);
    st_file_free(f);
}

/* Real-world layouts: names without the task prefix plus an ignored buffer tensor,
 * single file and sharded; the run must equal the fixture's own. */
static void test_hf_layouts(void **state) {
    (void)state;
    static const struct {
        const char *fixture, *prefix;
    } cases[] = {{"gpt2", "transformer."}, {"bert", "bert."}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int sharded = 0; sharded < 2; sharded++) {
            loaded_case lc;
            load_case(cases[i].fixture, "single", &lc);
            as_run *want = forward_ok(&lc, CAP_ALL, -1, -1);
            tmp_model tm;
            tmp_model_init(&tm, cases[i].fixture);
            write_layout(&tm, cases[i].fixture, cases[i].prefix, sharded);
            as_model *m = NULL;
            as_error err = {0};
            if (as_model_load(tm.dir, &m, &err) != AS_OK)
                fail_msg("%s (%s): %s", cases[i].fixture, sharded ? "sharded" : "no prefix", err.msg);
            as_capture_spec spec = {.what = CAP_ALL, .layer = -1, .head = -1};
            as_run *got = NULL;
            if (as_forward(m, &lc.enc, &spec, &got, &err) != AS_OK) fail_msg("%s", err.msg);
            size_t na = (size_t)want->n_lay * want->n_hd * want->T * want->T;
            size_t nh = (size_t)(want->n_run + 1) * want->T * want->D;
            assert_true(max_abs_diff(want->attn, got->attn, na) == 0.0);
            assert_true(max_abs_diff(want->hidden, got->hidden, nh) == 0.0);
            assert_true(max_abs_diff(want->logits, got->logits,
                                     (size_t)want->logits_rows * want->logits_cols) == 0.0);
            printf("%s %s: identical run\n", cases[i].fixture, sharded ? "sharded + no prefix" : "no prefix");
            as_run_free(got);
            as_run_free(want);
            as_model_free(m);
            free_case(&lc);
            char p[700];
            static const char *const files[] = {"model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors",
                                                "model.safetensors.index.json"};
            for (size_t k = 0; k < 3; k++) {
                snprintf(p, sizeof p, "%s/%s", tm.dir, files[k]);
                unlink(p);
            }
            tmp_model_free(&tm);
        }
    }
}

/* ---- reused buffers ---------------------------------------------------------
 * as_forward takes its capture block and scratch from the reuse cache of
 * core.h (as_large_get). After one forward, every cached buffer is filled with NaN
 * bytes; the next forward of the same case reuses them, and must still match the
 * fixture: every captured element and every scratch element read is written first. */
static void poison_cached_buffers(void) {
    void *got[64];
    size_t caps[64];
    int n = 0;
    for (size_t sz = 64; sz <= ((size_t)1 << 28) && n < 64; sz *= 2) {
        size_t c = 0;
        void *p = as_large_get(sz, &c);
        assert_non_null(p);
        if (c != sz) { /* it came from the cache */
            memset(p, 0xff, c);
            got[n] = p;
            caps[n++] = c;
        } else {
            free(p);
        }
    }
    for (int i = 0; i < n; i++) as_large_put(got[i], caps[i]);
}

static void test_reused_buffers(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "roberta", "distilbert", "gpt2", "bert_f16"};
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++) {
        for (int c = 0; c < N_CASES; c++) {
            loaded_case lc;
            load_case(names[fi], CASES[c], &lc);
            as_run_free(forward_ok(&lc, CAP_ALL, -1, -1)); /* leaves its buffers cached */
            poison_cached_buffers();
            const char *head = st_file_metadata(lc.ex, "logits_head");
            assert_non_null(head);
            int lowp = !strcmp(names[fi], "bert_f16");
            int bad = compare_case(lc.m, lc.ex, names[fi], CASES[c], lowp ? &TOL_LOWP : &TOL_F32, head);
            free_case(&lc);
            if (bad) fail_msg("%s/%s: forward on reused (NaN-filled) buffers differs", names[fi], CASES[c]);
        }
    }
}

/* ---- BF16 weights read in place, on the threaded path ----------------------- */

/* A Llama-shaped random model big enough that its linear maps split over threads
 * (T x out x in >= 2e6), written twice to dir/bf16 and dir/f32: BF16 weights, and the
 * same BF16-rounded values as F32. Loading the BF16 copy keeps its matrices in the
 * mapping (on AVX-512F multiplied by the F32 kernel on blocks packed per call, else
 * widened 64 rows at a time on each thread); the F32 copy multiplies F32 matrices; both
 * must give the same forward to float rounding. The BF16 copy set to bf16 and back to f32
 * (its matrices now packed whole) must give its first forward bit for bit. */
enum { BIG_D = 256, BIG_H = 4, BIG_KV = 2, BIG_DH = 64, BIG_F = 512, BIG_L = 2, BIG_V = 300 };

/* config.json of write_big_llama's shape: model_type type, max_pos positions, a sliding
 * window of `window` keys when > 0. */
static void write_big_config(const char *dir, const char *type, int max_pos, int window, int tied) {
    char path[600], win[48] = "";
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (window > 0) snprintf(win, sizeof win, "\"sliding_window\": %d, ", window);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "{\"model_type\": \"%s\", \"hidden_size\": %d, \"num_attention_heads\": %d, "
               "\"num_key_value_heads\": %d, \"head_dim\": %d, \"intermediate_size\": %d, "
               "\"num_hidden_layers\": %d, \"vocab_size\": %d, \"max_position_embeddings\": %d, "
               "\"rms_norm_eps\": 1e-5, %s\"tie_word_embeddings\": %s}\n",
            type, BIG_D, BIG_H, BIG_KV, BIG_DH, BIG_F, BIG_L, BIG_V, max_pos, win, tied ? "true" : "false");
    fclose(f);
}

static void write_big_llama(const char *dir, int bf16, int tied) {
    enum { D = BIG_D, H = BIG_H, KV = BIG_KV, DH = BIG_DH, F = BIG_F, L = BIG_L, V = BIG_V };
    char path[600];
    write_big_config(dir, "llama", 128, 0, tied);
    struct { char name[96]; int64_t d0, d1; } spec[4 + 9 * L];
    int n = 0;
#define ADD(nm, a, b) (snprintf(spec[n].name, sizeof spec[n].name, "%s", nm), spec[n].d0 = (a), spec[n].d1 = (b), n++)
    ADD("model.embed_tokens.weight", V, D);
    if (!tied) ADD("lm_head.weight", V, D);
    ADD("model.norm.weight", D, 0);
    for (int l = 0; l < L; l++) {
        char b[96];
        const struct { const char *s; int64_t a, b; } p[] = {
            {"self_attn.q_proj.weight", H * DH, D}, {"self_attn.k_proj.weight", KV * DH, D},
            {"self_attn.v_proj.weight", KV * DH, D}, {"self_attn.o_proj.weight", D, H * DH},
            {"mlp.gate_proj.weight", F, D}, {"mlp.up_proj.weight", F, D}, {"mlp.down_proj.weight", D, F},
            {"input_layernorm.weight", D, 0}, {"post_attention_layernorm.weight", D, 0}};
        for (int i = 0; i < 9; i++) {
            snprintf(b, sizeof b, "model.layers.%d.%s", l, p[i].s);
            ADD(b, p[i].a, p[i].b);
        }
    }
#undef ADD
    st_tensor ts[4 + 9 * L];
    void *bufs[4 + 9 * L];
    unsigned seed = 777;
    for (int i = 0; i < n; i++) {
        size_t cnt = (size_t)spec[i].d0 * (spec[i].d1 ? (size_t)spec[i].d1 : 1);
        float *v = malloc(cnt * sizeof(float));
        uint16_t *h = malloc(cnt * sizeof(uint16_t));
        assert_true(v && h);
        for (size_t k = 0; k < cnt; k++) {
            seed = seed * 1664525u + 1013904223u;
            float u = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
            h[k] = as_f32_to_bf16(spec[i].d1 ? 0.1f * u : 1.0f + 0.1f * u);
            v[k] = as_bf16_to_f32(h[k]);
        }
        memset(&ts[i], 0, sizeof ts[i]);
        ts[i].name = spec[i].name;
        ts[i].dtype = bf16 ? DTYPE_BF16 : DTYPE_F32;
        snprintf(ts[i].dtype_name, sizeof ts[i].dtype_name, "%s", bf16 ? "BF16" : "F32");
        ts[i].ndim = spec[i].d1 ? 2 : 1;
        ts[i].shape[0] = spec[i].d0;
        ts[i].shape[1] = spec[i].d1;
        ts[i].n_elems = cnt;
        ts[i].data = bf16 ? (void *)h : (void *)v;
        ts[i].nbytes = cnt * (bf16 ? 2 : 4);
        bufs[i] = bf16 ? (void *)h : (void *)v;
        free(bf16 ? (void *)v : (void *)h);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    as_error err = {0};
    if (st_write(path, ts, n, &err) != AS_OK) fail_msg("st_write: %s", err.msg);
    for (int i = 0; i < n; i++) free(bufs[i]);
}

static void bf16_in_place_case(int tied) {
    char root[64] = "/tmp/as_bf16_XXXXXX", dirs[2][128];
    assert_non_null(mkdtemp(root));
    as_model *m[2] = {NULL, NULL};
    as_run *r[2] = {NULL, NULL};
    as_encoding enc[2] = {{0}, {0}};
    int32_t ids[48];
    for (int i = 0; i < 48; i++) ids[i] = (i * 37 + 11) % 300;
    for (int k = 0; k < 2; k++) {
        snprintf(dirs[k], sizeof dirs[k], "%s/%s", root, k ? "f32" : "bf16");
        assert_int_equal(mkdir(dirs[k], 0700), 0);
        write_big_llama(dirs[k], !k, tied);
        as_error err = {0};
        if (as_model_load(dirs[k], &m[k], &err)) fail_msg("%s: %s", dirs[k], err.msg);
        assert_int_equal(as_model_dtype(m[k]), k ? DTYPE_F32 : DTYPE_BF16);
        if (as_encoding_from_ids(m[k], ids, NULL, 48, &enc[k], &err)) fail_msg("%s", err.msg);
        as_capture_spec spec = {.what = CAP_ALL, .layer = -1, .head = -1, .threads = 2};
        if (as_forward(m[k], &enc[k], &spec, &r[k], &err)) fail_msg("%s: %s", dirs[k], err.msg);
    }
    size_t na = (size_t)r[0]->n_lay * r[0]->n_hd * 48 * 48, nh = (size_t)(r[0]->n_run + 1) * 48 * 256;
    double da = max_abs_diff(r[0]->attn, r[1]->attn, na), dh = max_abs_diff(r[0]->hidden, r[1]->hidden, nh);
    double dl = max_abs_diff(r[0]->logits, r[1]->logits, (size_t)48 * 300);
    printf("bf16 in place vs f32 copy (%s): attentions %.2e hidden %.2e logits %.2e\n", tied ? "tied" : "untied",
           da, dh, dl);
    assert_true(da <= 1e-6 && dh <= 1e-5 && dl <= 1e-5);
    {
        as_error err = {0};
        as_run *again = NULL;
        as_capture_spec spec = {.what = CAP_ALL, .layer = -1, .head = -1, .threads = 2};
        if (as_model_set_precision(m[0], AS_PRECISION_BF16, &err) ||
            as_model_set_precision(m[0], AS_PRECISION_F32, &err) || as_forward(m[0], &enc[0], &spec, &again, &err))
            fail_msg("%s", err.msg);
        if (max_abs_diff(again->attn, r[0]->attn, na) != 0.0 || max_abs_diff(again->hidden, r[0]->hidden, nh) != 0.0 ||
            max_abs_diff(again->logits, r[0]->logits, (size_t)48 * 300) != 0.0)
            fail_msg("bf16 in place (%s): f32 after bf16 differs from the first f32 forward", tied ? "tied" : "untied");
        as_run_free(again);
    }
    for (int k = 0; k < 2; k++) {
        as_run_free(r[k]);
        as_encoding_free(&enc[k]);
        as_model_free(m[k]);
        char p[200];
        snprintf(p, sizeof p, "%s/config.json", dirs[k]);
        unlink(p);
        snprintf(p, sizeof p, "%s/model.safetensors", dirs[k]);
        unlink(p);
        rmdir(dirs[k]);
    }
    rmdir(root);
}

/* untied lm_head, and the head tied to the BF16 embedding table (both read in place) */
static void test_bf16_in_place_threads(void **state) {
    (void)state;
    bf16_in_place_case(0);
    bf16_in_place_case(1);
}

/* ---- the AVX-512 F32 products against sgemm ------------------------------ */

/* Past the small kernels' rows the F32 products run core/gemm_bf16.c's AVX-512 kernels
 * (F32 weights packed per call, Conv1D read in place, BF16 weights widened in the tile);
 * with them forced off, OpenBLAS sgemm (F32) or widened blocks (BF16). Both forwards of
 * each family's fixture at T tokens (past 32; GPT-2's 64 positions keep it within its
 * Conv1D small kernel's rows, which test_gemm_bf16 covers) must agree to float rounding:
 * attentions within 5e-6, hidden states within 1e-5 of their largest value, logits within
 * 1e-5 of the larger of theirs and the hidden states' (a classifier's logits can be a
 * hundred times smaller than the states they are computed from, and carry their error). */
static double max_abs(const float *a, size_t n);
static void test_f32_kernels_vs_sgemm(void **state) {
    (void)state;
    static const struct { const char *name; int T; } cases[] = {
        {"bert", 60}, {"roberta", 60}, {"distilbert", 60}, {"llama", 100}, {"llama_bf16", 100},
        {"phi3", 100}, {"gemma2", 90}, {"qwen3", 70}, {"mistral_swa", 80}};
    if (!as_gemm_f32_packed_native()) {
        printf("SKIPPED: no AVX-512F here, the F32 products are sgemm's on every path\n");
        return;
    }
    int differ = 0; /* families whose forwards differ: at these small K, without biases, sgemm adds in the
                       kernels' order (the fixtures with biases or K past 32 differ in the last bits) */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[1024];
        fixture_dir(dir, sizeof dir, cases[i].name);
        as_model *m = NULL;
        as_error err = {0};
        if (as_model_load(dir, &m, &err) != AS_OK) fail_msg("%s: %s", cases[i].name, err.msg);
        int T = cases[i].T, V = as_model_config(m)->vocab_size;
        int32_t ids[128];
        for (int t = 0; t < T; t++) ids[t] = (t * 29 + 7) % V;
        as_encoding enc = {0};
        if (as_encoding_from_ids(m, ids, NULL, T, &enc, &err)) fail_msg("%s: %s", cases[i].name, err.msg);
        as_run *r[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++) {
            as_capture_spec spec = {.what = CAP_ALL, .layer = -1, .head = -1, .threads = 2};
            as_gemm_bf16_force_fallback(k);
            as_status st = as_forward(m, &enc, &spec, &r[k], &err);
            as_gemm_bf16_force_fallback(0);
            if (st) fail_msg("%s: %s", cases[i].name, err.msg);
        }
        size_t na = (size_t)r[0]->n_lay * r[0]->n_hd * T * T, nh = (size_t)(r[0]->n_run + 1) * T * r[0]->D;
        size_t nl = r[0]->logits ? (size_t)r[0]->logits_rows * r[0]->logits_cols : 0;
        double da = max_abs_diff(r[0]->attn, r[1]->attn, na), dh = max_abs_diff(r[0]->hidden, r[1]->hidden, nh);
        double dl = nl ? max_abs_diff(r[0]->logits, r[1]->logits, nl) : 0.0;
        double sh = max_abs(r[1]->hidden, nh), sl = nl ? max_abs(r[1]->logits, nl) : 1.0;
        double sl_tol = sl > sh ? sl : sh;
        printf("%s T=%d F32 kernels vs sgemm: attentions %.2e hidden %.2e (%.2e of max) logits %.2e (%.2e of max)\n",
               cases[i].name, T, da, dh, dh / sh, dl, dl / sl);
        if (!(da <= 5e-6 && dh <= 1e-5 * sh && dl <= 1e-5 * sl_tol))
            fail_msg("%s: the F32 kernels and sgemm disagree", cases[i].name);
        differ += dh > 0.0;
        as_run_free(r[0]);
        as_run_free(r[1]);
        as_encoding_free(&enc);
        as_model_free(m);
    }
    if (differ < 3) fail_msg("only %d families' forwards differ between the paths: the kernels did not run", differ);
}

/* ---- statistics in the forward and rows recomputed from q, k ---------------- */

/* CAP_STATS against the same statistics computed here from the dense capture, and
 * as_run_attention_rows against the dense attention, on every kind of mask (padding,
 * causal, sliding window, soft-cap, GQA), capturing all heads or one. */
static void test_head_stats_and_rows(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "gpt2", "mistral_swa", "gemma2", "qwen3"};
    static const char *const cases[] = {"single", "padded"};
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++)
        for (int ci = 0; ci < 2; ci++) {
            loaded_case lc;
            load_case(names[fi], cases[ci], &lc);
            as_run *r = forward_ok(&lc, CAP_ATTN | CAP_QKV | CAP_STATS, -1, -1);
            int T = r->T;
            size_t TT = (size_t)T * T;
            double worst_s = 0.0, worst_r = 0.0;
            float *rows = malloc(TT * sizeof(float));
            assert_non_null(rows);
            for (int lh = 0; lh < r->n_lay * r->n_hd; lh++) {
                const float *P = r->attn + (size_t)lh * TT;
                double acc[AS_HEAD_N_STATS] = {0};
                int n = 0, np = 0, nn = 0;
                for (int i = 0; i < T; i++) {
                    if (!lc.mask[i]) continue;
                    double ent = 0, d = 0, mx = 0, var = 0;
                    for (int j = 0; j < T; j++) {
                        double v = P[(size_t)i * T + j];
                        if (v > 0) ent -= v * log(v);
                        d += v * fabs((double)(i - j));
                        if (v > mx) mx = v;
                    }
                    for (int j = 0; j < T; j++) {
                        double e = fabs((double)(i - j)) - d;
                        var += P[(size_t)i * T + j] * e * e;
                    }
                    acc[0] += ent, acc[1] += P[(size_t)i * T], acc[2] += P[(size_t)i * T + i];
                    if (i >= 1) acc[3] += P[(size_t)i * T + i - 1], np++;
                    if (i + 1 < T) acc[4] += P[(size_t)i * T + i + 1], nn++;
                    acc[5] += d, acc[6] += sqrt(var), acc[7] += mx, n++;
                }
                for (int k = 0; k < AS_HEAD_N_STATS; k++) {
                    double want = acc[k] / (k == 3 ? np : k == 4 ? nn : n);
                    worst_s = fmax(worst_s, fabs(want - r->head_stats[(size_t)lh * AS_HEAD_N_STATS + k]));
                }
                as_error err = {0};
                int l = lh / r->n_hd, h = lh % r->n_hd;
                if (as_run_attention_rows(lc.m, r, l, h, 0, T, rows, &err)) fail_msg("%s", err.msg);
                for (size_t i = 0; i < TT; i++) worst_r = fmax(worst_r, fabs((double)rows[i] - P[i]));
            }
            printf("%s/%s: head statistics max|diff| %.2e, recomputed rows max|diff| %.2e\n", names[fi], cases[ci],
                   worst_s, worst_r);
            assert_true(worst_s <= 1e-5 && worst_r <= 1e-6);
            /* one head captured: its statistics equal the all-heads ones */
            as_run *one = forward_ok(&lc, CAP_STATS, 1, 2);
            size_t slot = (size_t)1 * r->n_hd + 2;
            assert_memory_equal(one->head_stats, r->head_stats + slot * AS_HEAD_N_STATS,
                                AS_HEAD_N_STATS * sizeof(float));
            as_error err = {0};
            assert_int_equal(as_run_attention_rows(lc.m, one, 1, 2, 0, 1, rows, &err), AS_ERR_INPUT);
            assert_int_equal(as_run_attention_rows(lc.m, r, 0, 0, 0, T + 1, rows, &err), AS_ERR_INPUT);
            as_run_free(one);
            free(rows);
            as_run_free(r);
            free_case(&lc);
        }
}

/* Inputs longer than the forward's row block (64 query rows): attention kept or not, the
 * logits and statistics are the same bits; recomputed rows equal the kept attention. */
static void test_row_blocks(void **state) {
    (void)state;
    char dir[64] = "/tmp/as_rows_XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_big_llama(dir, 0, 0);
    as_error err = {0};
    as_model *m = NULL;
    if (as_model_load(dir, &m, &err)) fail_msg("%s", err.msg);
    int T = 125;
    int32_t ids[125];
    for (int i = 0; i < T; i++) ids[i] = (i * 53 + 7) % 300;
    as_encoding enc = {0};
    if (as_encoding_from_ids(m, ids, NULL, T, &enc, &err)) fail_msg("%s", err.msg);
    as_capture_spec sa = {.what = CAP_ATTN | CAP_QKV | CAP_STATS | CAP_LOGITS, .layer = -1, .head = -1, .threads = 2};
    as_capture_spec sb = {.what = CAP_STATS | CAP_LOGITS, .layer = -1, .head = -1, .threads = 2};
    as_run *a = NULL, *b = NULL;
    if (as_forward(m, &enc, &sa, &a, &err) || as_forward(m, &enc, &sb, &b, &err)) fail_msg("%s", err.msg);
    assert_memory_equal(a->logits, b->logits, (size_t)a->logits_rows * a->logits_cols * sizeof(float));
    size_t ns = (size_t)a->n_lay * a->n_hd * AS_HEAD_N_STATS;
    assert_memory_equal(a->head_stats, b->head_stats, ns * sizeof(float));
    float *rows = malloc((size_t)T * T * sizeof(float));
    assert_non_null(rows);
    double d = 0.0;
    for (int l = 0; l < a->n_lay; l++)
        for (int h = 0; h < a->n_hd; h++) {
            if (as_run_attention_rows(m, a, l, h, 0, T, rows, &err)) fail_msg("%s", err.msg);
            const float *P = as_run_attn(a, l, h);
            for (size_t i = 0; i < (size_t)T * T; i++) d = fmax(d, fabs((double)rows[i] - P[i]));
        }
    printf("T = %d: logits and statistics equal with and without the kept attention; recomputed rows %.2e\n", T,
           d);
    assert_true(d <= 1e-6);
    free(rows);
    as_run_free(a);
    as_run_free(b);
    as_encoding_free(&enc);
    as_model_free(m);
    char f[200];
    snprintf(f, sizeof f, "%s/config.json", dir);
    unlink(f);
    snprintf(f, sizeof f, "%s/model.safetensors", dir);
    unlink(f);
    rmdir(dir);
}

/* Logits (T, V) of a forward over ids; the caller frees. */
static float *window_logits(as_model *m, const int32_t *ids, int T) {
    as_error err = {0};
    as_encoding enc = {0};
    if (as_encoding_from_ids(m, ids, NULL, T, &enc, &err)) fail_msg("%s", err.msg);
    as_capture_spec sp = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 2};
    as_run *r = NULL;
    if (as_forward(m, &enc, &sp, &r, &err)) fail_msg("%s", err.msg);
    size_t n = (size_t)r->logits_rows * r->logits_cols;
    float *out = malloc(n * sizeof(float));
    assert_non_null(out);
    memcpy(out, r->logits, n * sizeof(float));
    as_run_free(r);
    as_encoding_free(&enc);
    return out;
}

/* A causal sliding-window model over more query rows than one attention block: the rows
 * of a block multiply only the values of the keys some row of theirs may see. Checked
 * by what the masks imply: a prefix's logits are the full input's first rows, and (RoPE
 * scores depend on relative positions only) a suffix's logits, once its rows are further
 * from its start than the L layers' reach L (W - 1), are the full input's last rows. */
static void test_window_blocks(void **state) {
    (void)state;
    enum { T = 200, S = 100, W = 8, L = BIG_L, V = BIG_V };
    char dir[64] = "/tmp/as_window_XXXXXX";
    assert_non_null(mkdtemp(dir));
    write_big_llama(dir, 0, 0);
    write_big_config(dir, "mistral", 256, W, 0);
    char f[200];
    snprintf(f, sizeof f, "%s/config.json", dir);
    as_error err = {0};
    as_model *m = NULL;
    if (as_model_load(dir, &m, &err)) fail_msg("%s", err.msg);
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (i * 97 + 13) % V;
    float *full = window_logits(m, ids, T), *pre = window_logits(m, ids, S), *suf = window_logits(m, ids + S, T - S);
    double mx = 0.0, dp = 0.0, ds = 0.0;
    for (size_t i = 0; i < (size_t)T * V; i++) mx = fmax(mx, fabs(full[i]));
    for (size_t i = 0; i < (size_t)S * V; i++) dp = fmax(dp, fabs((double)pre[i] - full[i]));
    for (int t = L * (W - 1); t < T - S; t++)
        for (int v = 0; v < V; v++)
            ds = fmax(ds, fabs((double)suf[(size_t)t * V + v] - full[(size_t)(S + t) * V + v]));
    printf("window %d, T = %d: prefix's logits %.2e, suffix's %.2e (largest |logit| %.2f)\n", W, T, dp, ds, mx);
    assert_true(mx > 0.1);
    assert_true(dp <= 1e-5 * mx);
    assert_true(ds <= 1e-4 * mx);
    free(full);
    free(pre);
    free(suf);
    as_model_free(m);
    unlink(f);
    snprintf(f, sizeof f, "%s/model.safetensors", dir);
    unlink(f);
    rmdir(dir);
}

/* ---- precision bf16 -------------------------------------------------------- */

static double max_abs(const float *a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

/* Precision bf16 against the F32 reference on every family (Conv1D GPT-2, fused Phi-3,
 * BF16 weights in place): attention within BF16_ATTN_TOL, hidden states and logits within
 * BF16_REL_TOL of their largest magnitude (BF16 keeps 8 bits of mantissa: relative
 * rounding 2^-9 per operand, summed over a few layers); it must differ from F32 (the
 * BF16 products ran), and switching back to F32 restores the F32 parity exactly. */
#define BF16_ATTN_TOL 0.03
#define BF16_REL_TOL 0.05
static void test_precision_bf16(void **state) {
    (void)state;
    static const char *const names[] = {"bert", "gpt2", "llama", "llama_bf16", "gemma2", "phi3", "qwen3"};
    for (size_t fi = 0; fi < sizeof names / sizeof names[0]; fi++) {
        loaded_case lc;
        load_case(names[fi], "single", &lc);
        as_error err = {0};
        if (as_model_set_precision(lc.m, AS_PRECISION_BF16, &err)) fail_msg("%s: %s", names[fi], err.msg);
        assert_int_equal(as_model_precision(lc.m), AS_PRECISION_BF16);
        as_run *r = forward_ok(&lc, CAP_ALL, -1, -1);
        const char *what[] = {"attentions", "hidden_states", "logits"};
        const float *got[] = {r->attn, r->hidden, r->logits};
        for (int k = 0; k < 3; k++) {
            char name[64];
            snprintf(name, sizeof name, "single.%s", what[k]);
            const st_tensor *t = st_file_find(lc.ex, name);
            assert_non_null(t);
            float *e = copy_data(t);
            double d = max_abs_diff(got[k], e, t->n_elems), scale = k ? max_abs(e, t->n_elems) : 1.0;
            double tol = k ? BF16_REL_TOL * scale : BF16_ATTN_TOL;
            printf("%s/single bf16 %s max|diff| = %.2e (%.2e of max |x|)\n", names[fi], what[k], d, d / scale);
            if (!(d <= tol)) fail_msg("%s: bf16 %s differs by %.3g (tolerance %.3g)", names[fi], what[k], d, tol);
            if (k == 2 && !(d > 0.0)) fail_msg("%s: bf16 logits equal F32's: the BF16 products did not run", names[fi]);
            free(e);
        }
        as_run_free(r);
        if (as_model_set_precision(lc.m, AS_PRECISION_F32, &err)) fail_msg("%s: %s", names[fi], err.msg);
        int lowp = !strcmp(names[fi], "llama_bf16");
        const char *head = st_file_metadata(lc.ex, "logits_head");
        if (compare_case(lc.m, lc.ex, names[fi], "single", lowp ? &TOL_LOWP : &TOL_F32, head))
            fail_msg("%s: back at F32, the forward no longer matches the reference", names[fi]);
        free_case(&lc);
    }
}

/* RoPE whose frequencies depend on the input's length (LongRoPE, dynamic NTK): the
 * captured queries are the pre-RoPE ones rotated by the frequencies transformers computes
 * for a forward of that length (its seq_len = max(position_ids) + 1), on both sides of
 * the switch: T = the original length (short factors / rope_theta) and one more (long
 * factors / the grown base). The fixtures' own cases sit at 11 and 18 tokens. */
/* The RoPE settings of real checkpoints (gen_rope.py: Llama 2 / 3.1, Qwen2.5 YaRN, Qwen3,
 * Mistral, Gemma 2 / 3 global and local, Phi-3.5 LongRoPE short and long, Phi-4-mini's
 * partial rotary, dynamic NTK, an odd head) parsed from their config.json text: the
 * inverse frequencies equal transformers' float32 ones bit for bit but for torch's
 * vectorised powf being one ulp off now and then (at most 3 in 100 pairs, each within
 * 2 ulps once LongRoPE's factor multiplies it; computed in double, a fifth were off);
 * op_rope_table's cos / sin rows at positions up to 65,535 within 3e-7 where the
 * frequency is the same, else within what the frequency's difference turns the angle
 * by (an ulp on a frequency near 1 turns position 65,535 by 4e-3 rad). */
/* rope_tables.safetensors: entry i's metadata "i.key" (tensor 0) or tensor "i.key" (tensor 1);
 * fails the test when absent. */
static const void *rope_entry(const st_file *f, int i, const char *key, int tensor) {
    char k[64];
    snprintf(k, sizeof k, "%d.%s", i, key);
    const void *v = tensor ? (const void *)st_file_find(f, k) : (const void *)st_file_metadata(f, k);
    if (!v) fail_msg("rope_tables.safetensors: no %s %s", tensor ? "tensor" : "metadata", k);
    return v;
}
#define rope_meta(f, i, key) ((const char *)rope_entry(f, i, key, 0))
#define rope_tensor(f, i, key) ((const st_tensor *)rope_entry(f, i, key, 1))

static void test_rope_long_positions(void **state) {
    (void)state;
    st_file *f = NULL;
    as_error err = {0};
    if (st_file_open(AS_SOURCE_DIR "/tests/ref/fixtures/rope_tables.safetensors", &f, &err) != AS_OK)
        fail_msg("%s", err.msg);
    const char *ns = st_file_metadata(f, "n");
    assert_non_null(ns);
    int n = atoi(ns), pairs = 0, inexact = 0;
    assert_true(n >= 10);
    for (int i = 0; i < n; i++) {
        const char *js = rope_meta(f, i, "config"), *name = rope_meta(f, i, "name");
        as_config c;
        if (as_config_parse(js, strlen(js), name, &c, &err) != AS_OK) fail_msg("%s: %s", name, err.msg);
        const int half = c.rope_dim / 2, T = atoi(rope_meta(f, i, "T"));
        const st_tensor *ti = rope_tensor(f, i, "inv"), *tp = rope_tensor(f, i, "pos");
        const st_tensor *tc = rope_tensor(f, i, "cos"), *tsn = rope_tensor(f, i, "sin");
        assert_int_equal(ti->shape[0], half);
        float *want = copy_data(ti), *wc = copy_data(tc), *ws = copy_data(tsn);
        int32_t *pos = copy_data(tp);
        int np = (int)tp->shape[0];
        float *inv = malloc((size_t)half * sizeof *inv), mscale = 0;
        assert_non_null(inv);
        llama_rope_freqs(&c, atoi(rope_meta(f, i, "local")), T, inv, &mscale);
        int diff = 0;
        for (int j = 0; j < half; j++) {
            if (inv[j] == want[j]) continue;
            diff++;
            float up = nextafterf(want[j], INFINITY), down = nextafterf(want[j], -INFINITY);
            float up2 = nextafterf(up, INFINITY), down2 = nextafterf(down, -INFINITY);
            if (inv[j] < down2 || inv[j] > up2)
                fail_msg("%s: inverse frequency %d is %.9g, transformers' %.9g (more than 2 ulps)", name, j,
                         (double)inv[j], (double)want[j]);
        }
        int maxp = pos[np - 1];
        float *cs = malloc((size_t)(maxp + 1) * c.rope_dim * sizeof *cs);
        assert_non_null(cs);
        op_rope_table(cs, 0, 1, maxp + 1, 0, inv, c.rope_dim, mscale);
        double worst = 0, worst_same = 0;
        for (int k = 0; k < np; k++) {
            const float *row = cs + (size_t)pos[k] * c.rope_dim;
            for (int j = 0; j < half; j++) {
                double d = fmax(fabs((double)row[j] - wc[(size_t)k * half + j]),
                                fabs((double)row[half + j] - ws[(size_t)k * half + j]));
                /* same frequency: the same float angle, so cosf / sinf against torch's (an ulp
                   or two); a frequency an ulp or two off turns the angle by pos x that, plus
                   the angle's own rounding */
                double a = (double)pos[k] * want[j], tol = 3e-7 * mscale;
                if (inv[j] != want[j])
                    tol += mscale * ((double)pos[k] * fabs((double)inv[j] - want[j]) +
                                     2.0 * (nextafterf((float)a, INFINITY) - (float)a));
                if (!(d <= tol))
                    fail_msg("%s: position %d pair %d: cos / sin differ from transformers' by %.3g (tolerance %.3g)",
                             name, pos[k], j, d, tol);
                if (!(d <= worst)) worst = d;
                if (inv[j] == want[j] && !(d <= worst_same)) worst_same = d;
            }
        }
        printf("%-18s R=%3d T=%5d: %d of %d inverse frequencies differ; cos/sin up to position %d max|diff| %.2e "
               "(%.2e where the frequency is the same)\n",
               name, c.rope_dim, T, diff, half, maxp, worst, worst_same);
        pairs += half;
        inexact += diff;
        free(cs);
        free(inv);
        free(want);
        free(wc);
        free(ws);
        free(pos);
        as_config_clear(&c);
    }
    printf("%d of %d inverse frequencies differ from transformers' (by 1-2 ulps)\n", inexact, pairs);
    assert_true(inexact * 100 <= 3 * pairs);
    st_file_free(f);
}

static void test_rope_by_length(void **state) {
    (void)state;
    static const char *const names[] = {"longrope", "dynamic"};
    for (int f = 0; f < 2; f++) {
        char dir[1024];
        fixture_dir(dir, sizeof dir, names[f]);
        as_model *m = NULL;
        as_error err = {0};
        if (as_model_load(dir, &m, &err) != AS_OK) fail_msg("%s: %s", names[f], err.msg);
        const as_config *c = as_model_config(m);
        const int M = c->rope_orig_max_pos, R = c->rope_dim, half = R / 2, Dh = c->d_head;
        const int L = c->n_layer, H = c->n_head;
        assert_true(c->rope_scaling == (f == 0 ? ROPE_SCALE_LONGROPE : ROPE_SCALE_DYNAMIC));
        assert_true(M > 0 && M < 64);
        for (int T = M; T <= M + 1; T++) {
            int32_t ids[64];
            for (int t = 0; t < T; t++) ids[t] = 4 + (t * 7) % (c->vocab_size - 4);
            as_encoding enc = {0};
            if (as_encoding_from_ids(m, ids, NULL, T, &enc, &err) != AS_OK) fail_msg("%s", err.msg);
            as_capture_spec spec = {.what = CAP_ALL, .layer = -1, .head = -1};
            as_run *run = NULL;
            if (as_forward(m, &enc, &spec, &run, &err) != AS_OK) fail_msg("%s: %s", names[f], err.msg);
            assert_non_null(run->q_pre);
            double theta = c->rope_theta, att = 1.0, inv[AS_MAX_ROPE_PAIRS];
            if (f == 1 && T > M) /* dynamic: theta (f T / M - (f - 1))^(R / (R - 2)) */
                theta *= pow(c->rope_factor * T / (double)M - (c->rope_factor - 1.0), (double)R / (R - 2));
            for (int i = 0; i < half; i++) {
                inv[i] = 1.0 / pow(theta, 2.0 * i / R);
                if (f == 0) inv[i] /= T > M ? c->rope_long_factor[i] : c->rope_short_factor[i];
            }
            if (f == 0) att = c->rope_attn_factor;
            double worst = 0;
            for (size_t row = 0; row < (size_t)L * H * T; row++) {
                int t = (int)(row % (size_t)T);
                const float *x = run->q_pre + row * Dh, *y = run->q + row * Dh;
                for (int i = 0; i < Dh; i++) {
                    double want = x[i];
                    if (i < R) {
                        int p = i % half;
                        double a = t * inv[p], cs = cos(a) * att, sn = sin(a) * att;
                        want = i < half ? x[p] * cs - x[p + half] * sn : x[p + half] * cs + x[p] * sn;
                    }
                    double d = fabs(want - y[i]) / fmax(1.0, fabs(want));
                    if (d > worst) worst = d;
                }
            }
            printf("%s T=%d: queries against the pre-RoPE ones rotated, max rel diff %.2e\n", names[f], T, worst);
            assert_true(worst < 2e-5);
            as_run_free(run);
            as_encoding_free(&enc);
        }
        as_model_free(m);
    }
}

int main(void) {
    struct CMUnitTest tests[sizeof FIXTURES / sizeof FIXTURES[0] + 16];
    size_t n = 0;
    for (size_t i = 0; i < sizeof FIXTURES / sizeof FIXTURES[0]; i++) {
        struct CMUnitTest t = cmocka_unit_test_prestate(test_fixture, (void *)&FIXTURES[i]);
        t.name = FIXTURES[i].name;
        tests[n++] = t;
    }
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_selective_capture);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_spec_out_of_range);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_id_out_of_range);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_missing_tensor);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_wrong_shape);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_unsupported_model_type);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_hf_layouts);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_reused_buffers);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_precision_bf16);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_bf16_in_place_threads);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_f32_kernels_vs_sgemm);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_head_stats_and_rows);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_row_blocks);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_window_blocks);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_rope_by_length);
    tests[n++] = (struct CMUnitTest)cmocka_unit_test(test_rope_long_positions);
    return _cmocka_run_group_tests("model_parity", tests, n, NULL, NULL);
}
