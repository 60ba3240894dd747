/* cmd_bench.c — `attnscope bench`: median wall time of one forward pass with full
 * capture (or, with --saliency, of one gradient saliency: forward + backward to the
 * word embeddings) on seeded random token ids, the achieved GFLOP/s, the sgemm peak
 * measured in the same run (on the model's largest linear shape) and peak RSS; for an
 * encoder-decoder model, the forward of both stacks (as_forward_seq2seq) on N source and
 * --target-tokens decoder tokens; with --attrib, after each timed forward the listed
 * attribution methods on its run (attr_compute_run), each timed alone. Measures, never
 * asserts. */
#include "cli.h"
#include "attnscope/analysis.h"

#include <cblas.h>
#include <string.h>
#include <sys/resource.h>

static const char *BENCH_HELP =
    "usage: attnscope bench --model DIR --tokens N [--repeat R] [--threads N]\n"
    "                       [--capture all|none|attn,scores,qkv,hidden,logits]\n"
    "                       [--layer L] [--precision f32|bf16] [--saliency]\n"
    "                       [--target-tokens M] [--attrib rollout,norm,...]\n"
    "\n"
    "Times R (default 5, after one warm-up) forward passes of N seeded random tokens\n"
    "with full capture (or --capture; none = the logits only) and prints the median\n"
    "and minimum ms, the forward's GFLOP/s, the sgemm peak GFLOP/s measured in the same\n"
    "run on the model's feed-forward shape (N x D x F) with the OpenBLAS kernels named\n"
    "(openblas_core: OPENBLAS_CORETYPE's, else those of the CPU OpenBLAS detects),\n"
    "their ratio, captured MB and peak RSS MB. --layer L captures layer L only (as `attnscope run --layer`: the\n"
    "forward stops after layer L unless logits are captured; GFLOP/s counts the layers\n"
    "computed and the logits' product). --precision bf16 multiplies in BF16 (see\n"
    "`attnscope run --help`). --saliency times sal_compute instead (gradient saliency\n"
    "of the predicted class: the forward and the backward to the word embeddings;\n"
    "BERT-family classifiers). Encoder-decoder models (bart, mbart, marian, t5, mt5) time\n"
    "the forward of both stacks on N source and M (--target-tokens, default N) decoder\n"
    "tokens (the next M ids of the same generator) with the three attention kinds captured.\n"
    "--attrib rollout,flow,norm,norm2,alti times, after each timed forward (capture all),\n"
    "each listed attribution method on that forward's run (attr_compute_run: the method's\n"
    "own work, no second forward) and prints its median wall and CPU (every thread) ms\n"
    "and their ratios to the forward's.\n";

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* CPU time of the process (every thread, user + system) in ms. */
static double cpu_ms(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-3;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

/* Best GFLOP/s of R sgemm calls C(M,N) = A(M,K) B(K,N). */
static double sgemm_peak(int M, int N, int K, int R) {
    float *A = as_calloc((size_t)M * K, sizeof(float));
    float *B = as_calloc((size_t)K * N, sizeof(float));
    float *C = as_calloc((size_t)M * N, sizeof(float));
    double best = 0.0;
    if (A && B && C) {
        for (size_t i = 0; i < (size_t)M * K; i++) A[i] = (float)(i % 7) * 0.01f;
        for (size_t i = 0; i < (size_t)K * N; i++) B[i] = (float)(i % 5) * 0.01f;
        for (int r = 0; r < R + 1; r++) {
            double t0 = as_now();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, A, K, B, K, 0.0f, C, N);
            double dt = as_now() - t0;
            double g = 2.0 * M * N * K / dt * 1e-9;
            if (r > 0 && g > best) best = g;
        }
    }
    free(A);
    free(B);
    free(C);
    return best;
}

int cmd_bench(int argc, char **argv) {
    const char *dir = NULL, *capture = "all", *precision = "f32";
    const char *attrib = NULL;
    int T = 128, R = 5, threads = 0, layer = -1, saliency = 0, Tdec = 0;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        if (cli_is_help(o)) {
            fputs(BENCH_HELP, stdout);
            return 0;
        }
        if (!strcmp(o, "--saliency")) {
            saliency = 1;
            continue;
        }
        if (!(v = cli_value(argc, argv, &i, "bench"))) return AS_ERR_INPUT;
        if (!strcmp(o, "--model")) dir = v;
        else if (!strcmp(o, "--capture")) capture = v;
        else if (!strcmp(o, "--precision")) precision = v;
        else if (!strcmp(o, "--attrib")) attrib = v;
        else if (!strcmp(o, "--tokens")) {
            if (cli_parse_int(v, 1, AS_MAX_POSITIONS, &T)) return cli_usage_error("bench", "bad --tokens '%s'", v);
        } else if (!strcmp(o, "--target-tokens")) {
            if (cli_parse_int(v, 1, AS_MAX_POSITIONS, &Tdec))
                return cli_usage_error("bench", "bad --target-tokens '%s'", v);
        } else if (!strcmp(o, "--repeat")) {
            if (cli_parse_int(v, 1, 1000, &R)) return cli_usage_error("bench", "bad --repeat '%s'", v);
        } else if (!strcmp(o, "--layer")) {
            if (cli_parse_int(v, 0, AS_MAX_LAYERS - 1, &layer)) return cli_usage_error("bench", "bad --layer '%s'", v);
        } else if (!strcmp(o, "--threads")) {
            if (cli_parse_int(v, 1, 1024, &threads)) return cli_usage_error("bench", "bad --threads '%s'", v);
        } else return cli_usage_error("bench", "unknown option '%s'", o);
    }
    if (!dir) return cli_usage_error("bench", "--model DIR is required");
    attr_method meth[8];
    int n_meth = 0;
    if (attrib && (saliency || layer >= 0 || strcmp(capture, "all")))
        return cli_usage_error("bench", "--attrib times methods on a forward with full capture: "
                               "not with --saliency, --layer or --capture");
    for (const char *p = attrib; p && *p;) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char name[32];
        if (n == 0 || n >= sizeof name || n_meth == 8)
            return cli_usage_error("bench", "--attrib: expected up to 8 comma-separated methods");
        memcpy(name, p, n);
        name[n] = 0;
        if (attr_method_parse(name, &meth[n_meth]) || meth[n_meth] == ATTR_GRAD || meth[n_meth] == ATTR_IMPORTANCE)
            return cli_usage_error("bench", "--attrib: '%s' is not one of rollout, flow, norm, norm2, alti", name);
        n_meth++;
        p = e ? e + 1 : p + n;
    }
    unsigned what = 0;
    if (!strcmp(capture, "none")) what = CAP_LOGITS;
    else if (cli_parse_capture(capture, &what))
        return cli_usage_error("bench", "--capture must be all, none or a list of attn, scores, qkv, hidden, logits");
    as_precision prec;
    if (as_precision_parse(precision, &prec)) return cli_usage_error("bench", "--precision must be f32 or bf16");
    as_error err = {0};
    as_model *m = NULL;
    as_encoding enc = {0}, tgt = {0};
    int32_t *ids = NULL;
    double *ms = NULL, *ams = NULL, *cms = NULL;
    int rc = 0;
    if (as_model_load(dir, &m, &err)) return cli_fail(&err);
    if (as_model_set_precision(m, prec, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    const as_config *c = as_model_config(m);
    if (layer >= c->n_layer) {
        rc = cli_usage_error("bench", "--layer %d is over the model's %d layers", layer, c->n_layer);
        goto cleanup;
    }
    int s2s = c->n_dec_layer > 0;
    if (!s2s && Tdec) {
        rc = cli_usage_error("bench", "--target-tokens: %s is not an encoder-decoder model", dir);
        goto cleanup;
    }
    if (s2s && !Tdec) Tdec = T;
    if (s2s && saliency) {
        rc = cli_usage_error("bench", "--saliency: no gradients for encoder-decoder models");
        goto cleanup;
    }
    if (T > as_model_max_tokens(m) || Tdec > as_model_max_tokens(m)) {
        rc = cli_usage_error("bench", "--tokens %d / --target-tokens %d: over the model's %d positions", T, Tdec,
                             as_model_max_tokens(m));
        goto cleanup;
    }
    ids = as_malloc_array((size_t)(T + Tdec), sizeof *ids);
    ms = as_malloc_array((size_t)R, sizeof *ms);
    ams = as_malloc_array((size_t)R * (n_meth + 1) * 2, sizeof *ams);
    cms = ams + (size_t)R * (n_meth + 1); /* CPU ms: the forward's (k = n_meth) and each method's */
    if (!ids || !ms || !ams) {
        as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
        rc = cli_fail(&err);
        goto cleanup;
    }
    uint32_t seed = 12345;
    for (int i = 0; i < T + Tdec; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = (int32_t)(5 + (seed >> 8) % (uint32_t)(c->vocab_size - 5));
    }
    if (as_encoding_from_ids(m, ids, NULL, T, &enc, &err) ||
        (s2s && as_encoding_from_ids(m, ids + T, NULL, Tdec, &tgt, &err))) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    as_capture_spec spec = {.what = what, .layer = layer, .head = -1, .threads = threads};
    sal_opts so = {.method = SAL_GRAD, .target = -1, .threads = threads};
    size_t cap_bytes = 0;
    int n_run = 0, head_rows = 0, head_cols = 0; /* layers computed; logits (rows, cols) */
    for (int r = -1; r < R; r++) {
        as_run *run = NULL;
        sal_result sr = {0};
        double t0 = as_now(), c0 = cpu_ms();
        as_status st = saliency ? sal_compute(m, &enc, &so, &sr, &err)
                       : s2s    ? as_forward_seq2seq(m, &enc, &tgt, &spec, &run, &err)
                                : as_forward(m, &enc, &spec, &run, &err);
        if (st) {
            rc = cli_fail(&err);
            goto cleanup;
        }
        double dt = (as_now() - t0) * 1e3;
        if (r >= 0) cms[(size_t)n_meth * R + r] = cpu_ms() - c0;
        for (int k = 0; k < n_meth; k++) { /* each method on this forward's run */
            attr_opts ao = {.method = meth[k], .target = -1, .position = -1, .threads = threads};
            attr_result ar = {0};
            double a0 = as_now(), ac0 = cpu_ms();
            if (attr_compute_run(m, &enc, run, &ao, &ar, &err)) {
                as_run_free(run);
                rc = cli_fail(&err);
                goto cleanup;
            }
            if (r >= 0) {
                ams[(size_t)k * R + r] = (as_now() - a0) * 1e3;
                cms[(size_t)k * R + r] = cpu_ms() - ac0;
            }
            attr_result_free(&ar);
        }
        cap_bytes = run ? run->bytes + (s2s ? run->dec->bytes + run->cross->bytes : 0) : 0;
        n_run = run ? run->n_run : c->n_layer;
        const as_run *lr = s2s ? run->dec : run; /* the run holding the logits */
        head_rows = lr && lr->logits ? lr->logits_rows : 0;
        head_cols = lr && lr->logits ? lr->logits_cols : 0;
        as_run_free(run);
        sal_result_free(&sr);
        if (r >= 0) ms[r] = dt;
    }
    qsort(ms, (size_t)R, sizeof *ms, cmp_double);
    double med = R % 2 ? ms[R / 2] : 0.5 * (ms[R / 2 - 1] + ms[R / 2]);
    /* per layer computed: q, k, v, o projections, the feed-forward (3 maps when gated), q.k
     * and P.v; then the logits' last product (rows x D x cols: the LM head of a decoder) */
    double D = c->d_model, F = c->d_ff, L = n_run, Tt = T;
    double Qw = (double)c->n_head * c->d_head, Kw = (double)c->n_kv_head * c->d_head;
    double flop = L * (2.0 * Tt * D * (2 * Qw + 2 * Kw) + 2.0 * Tt * D * F * (c->gated_mlp ? 3 : 2) +
                       2.0 * Tt * Tt * Qw * 2) +
                  2.0 * head_rows * D * head_cols;
    /* the saliency's backward to the inputs: the same products again and four attention ones */
    if (saliency)
        flop += L * (2.0 * Tt * D * (2 * Qw + 2 * Kw) + 2.0 * Tt * D * F * (c->gated_mlp ? 3 : 2) +
                     2.0 * Tt * Tt * Qw * 4);
    if (s2s) { /* the decoder: self-attention and feed-forward on M tokens, cross-attention's q
                  and o on M, k and v on N, its products M x N */
        double M = tgt.n, N = T;
        flop += c->n_dec_layer * (2.0 * M * D * (2 * Qw + 2 * Kw) + 2.0 * M * D * F * (c->gated_mlp ? 3 : 2) +
                                  2.0 * M * M * Qw * 2 + 2.0 * M * D * 2 * Qw + 2.0 * N * D * 2 * Kw +
                                  2.0 * M * N * Qw * 2);
    }
    double gflops = flop / (med * 1e-3) * 1e-9;
    /* the same thread count as the forward; OpenBLAS's own threads do the sgemm here */
    openblas_set_num_threads(threads ? threads : as_n_cores());
    double peak = sgemm_peak(T, c->d_ff, c->d_model, 5);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    if (s2s) printf("encoder-decoder  target_tokens %d\n", tgt.n);
    /* OpenBLAS's kernels (OPENBLAS_CORETYPE or its CPU detection) set sgemm_peak_gflops and
       the products that stay sgemm's: on an AVX-512 CPU, Haswell's are half as fast */
    const char *core = openblas_get_corename();
    printf("model %s  tokens %d  threads %d  repeat %d  precision %s%s%s  openblas_core %s\n", dir, T,
           threads ? threads : as_n_cores(), R, as_precision_name(prec),
           prec == AS_PRECISION_BF16 && !as_cpu_bf16() ? " (no AVX-512 BF16: widened)" : "", saliency ? "  saliency" : "",
           core && *core ? core : "unknown");
    size_t w_res = 0, w_huge = 0; /* the mapped weights' pages: 2 MiB ones spare TLB misses */
    as_model_weight_pages(m, &w_res, &w_huge);
    printf("median_ms %.2f  min_ms %.2f  gflop %.2f  gflops %.1f  sgemm_peak_gflops %.1f  "
           "efficiency %.0f%%  captured_mb %.1f  peak_rss_mb %.1f  weights_on_2mib_pages %.0f%%\n",
           med, ms[0], flop * 1e-9, gflops, peak, peak > 0 ? 100.0 * gflops / peak : 0.0,
           (double)cap_bytes / 1048576.0, (double)ru.ru_maxrss / 1024.0,
           w_res ? 100.0 * (double)w_huge / (double)w_res : 0.0);
    double fcpu = n_meth ? median(cms + (size_t)n_meth * R, R) : 0.0;
    if (n_meth) printf("forward cpu_median_ms %.2f\n", fcpu);
    for (int k = 0; k < n_meth; k++) {
        double *a = ams + (size_t)k * R, am = median(a, R), ac = median(cms + (size_t)k * R, R);
        printf("attrib %s  median_ms %.2f  min_ms %.2f  of_forward %.1f%%  cpu_median_ms %.2f  cpu_of_forward %.1f%%\n",
               attr_method_name(meth[k]), am, a[0], 100.0 * am / med, ac, fcpu > 0 ? 100.0 * ac / fcpu : 0.0);
    }
cleanup:
    free(ids);
    free(ms);
    free(ams);
    as_encoding_free(&enc);
    as_encoding_free(&tgt);
    as_model_free(m);
    return rc;
}
