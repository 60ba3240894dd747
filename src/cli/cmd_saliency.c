/* cmd_saliency.c — `attnscope saliency`: per-token gradient saliency of a sequence
 * classifier's prediction (vanilla gradient, gradient x input or integrated
 * gradients; see src/analysis/saliency.h), printed as a table with bars or as JSON,
 * with the predicted class and the probabilities.
 */
#include "cli_input.h"
#include "attnscope/analysis.h"

#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <string.h>

static const char *SAL_HELP =
    "usage: attnscope saliency --model DIR (--text TEXT [--text-b TEXT] | --ids 101,7592,...)\n"
    "                          [--type-ids 0,0,...] [--target C] [--method grad|gxi|ig]\n"
    "                          [--steps N] [--format text|json] [--threads N]\n"
    "                          [--precision f32|bf16]\n"
    "\n"
    "Explains a sequence classifier's prediction with one score per token.\n"
    "  grad  (default) L1 norm of the gradient of the target logit w.r.t. the token's\n"
    "        word-embedding vector (Simonyan et al. 2013; what Dodrio shows); >= 0\n"
    "  gxi   gradient x input: sum over dimensions of gradient * word vector; signed\n"
    "  ig    integrated gradients (Sundararajan et al. 2017) from all-zero word vectors,\n"
    "        midpoint rule with --steps N (default 32); signed; prints the\n"
    "        completeness gap |sum of scores - (logit - baseline logit)|\n"
    "--target C explains class C (index or label name; default: the predicted class).\n"
    "Text longer than the model's positions is truncated with a warning.\n"
    CLI_INPUT_PRECISION_HELP
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    cli_input in;
    const char *target, *format;
    sal_method method;
    int steps;
} sal_args;

static int parse_args(int argc, char **argv, sal_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = NULL;
        int rc;
        if (cli_input_option(&a->in, "saliency", argc, argv, &i, &rc)) {
            if (rc) return rc;
            continue;
        }
#define VAL()                                                   \
    do {                                                        \
        if (!(v = cli_value(argc, argv, &i, "saliency"))) return AS_ERR_INPUT; \
    } while (0)
        if (!strcmp(o, "--target")) { VAL(); a->target = v; }
        else if (!strcmp(o, "--format")) {
            VAL();
            if (strcmp(v, "text") && strcmp(v, "json"))
                return cli_usage_error("saliency", "bad --format '%s': expected text or json", v);
            a->format = v;
        } else if (!strcmp(o, "--method")) {
            VAL();
            if (sal_method_parse(v, &a->method))
                return cli_usage_error("saliency", "bad --method '%s': expected grad, gxi or ig", v);
        } else if (!strcmp(o, "--steps")) {
            VAL();
            if (cli_parse_int(v, 1, SAL_MAX_STEPS, &a->steps))
                return cli_usage_error("saliency", "bad --steps '%s': expected an integer in [1, %d]", v, SAL_MAX_STEPS);
        } else {
            return cli_usage_error("saliency", "unknown option '%s'", o);
        }
#undef VAL
    }
    int rc = cli_input_check(&a->in, "saliency");
    if (rc) return rc;
    if (a->steps && a->method != SAL_IG) return cli_usage_error("saliency", "--steps applies to --method ig only");
    return 0;
}

/* --target as an index or a label name; -1 when absent. */
static int parse_target(const as_model *m, const char *s, int *out) {
    const as_config *c = as_model_config(m);
    *out = -1;
    if (!s) return 0;
    if (!cli_parse_int(s, 0, AS_MAX_LABELS, out)) return 0;
    for (int i = 0; c->id2label && i < c->num_labels; i++)
        if (c->id2label[i] && !strcmp(c->id2label[i], s)) {
            *out = i;
            return 0;
        }
    return -1;
}

static const char *label(const as_model *m, int i, char *buf, size_t cap) {
    const as_config *c = as_model_config(m);
    if (c->id2label && i < c->num_labels && c->id2label[i]) return c->id2label[i];
    snprintf(buf, cap, "LABEL_%d", i);
    return buf;
}

static const char *method_text(sal_method m) {
    switch (m) {
    case SAL_GRAD: return "L1 norm of d logit / d word embedding";
    case SAL_GXI: return "gradient x input, summed over the embedding";
    case SAL_IG: return "integrated gradients, zero baseline";
    }
    return "";
}

static void print_text(const as_model *m, const as_encoding *enc, const sal_result *r) {
    char b1[32], b2[32];
    printf("method: %s (%s)\n", sal_method_name(r->method), method_text(r->method));
    printf("predicted: %d %s (p = %.4f)   target: %d %s\n", r->predicted, label(m, r->predicted, b1, sizeof b1),
           (double)r->probs[r->predicted], r->target, label(m, r->target, b2, sizeof b2));
    printf("probabilities:");
    for (int i = 0; i < r->C; i++) printf("  %s %.4f", label(m, i, b1, sizeof b1), (double)r->probs[i]);
    printf("\n\n");
    float mx = 0.0f;
    for (int t = 0; t < r->T; t++) mx = fabsf(r->scores[t]) > mx ? fabsf(r->scores[t]) : mx;
    int width = 0;
    char **texts = as_calloc((size_t)r->T, sizeof(char *));
    for (int t = 0; texts && t < r->T; t++) {
        texts[t] = as_model_token_text(m, enc->ids[t]);
        int w = texts[t] ? (int)strlen(texts[t]) : 0;
        width = w > width ? w : width;
    }
    if (width > 24) width = 24;
    if (width < 5) width = 5;
    printf("%4s  %-*s  %10s\n", "#", width, "token", "score");
    for (int t = 0; t < r->T; t++) {
        const char *tx = texts && texts[t] ? texts[t] : "?";
        printf("%4d  %-*.*s  %10.4g  ", t, width, width, tx, (double)r->scores[t]);
        int n = mx > 0.0f ? (int)lrintf(30.0f * fabsf(r->scores[t]) / mx) : 0;
        if (r->scores[t] < 0.0f) putchar('-');
        for (int k = 0; k < n; k++) fputs("\xe2\x96\x88", stdout); /* U+2588 full block */
        putchar('\n');
    }
    if (r->method == SAL_IG)
        printf("\nsum of attributions %.6f, logit difference %.6f, completeness gap %.2e (%d steps)\n",
               (double)r->ig_sum, (double)r->ig_delta, (double)r->ig_gap, r->steps);
    for (int t = 0; texts && t < r->T; t++) free(texts[t]);
    free(texts);
}

json_t *cli_ig_json(const sal_result *r) {
    json_t *ig = json_object();
    json_object_set_new(ig, "steps", json_integer(r->steps));
    json_object_set_new(ig, "sum", json_real(r->ig_sum));
    json_object_set_new(ig, "logit_delta", json_real(r->ig_delta));
    json_object_set_new(ig, "gap", json_real(r->ig_gap));
    return ig;
}

static int print_json(const as_model *m, const as_encoding *enc, const sal_result *r) {
    char b[32];
    json_t *j = json_object(), *toks = json_array(), *labels = json_array(), *lg = json_array(), *pr = json_array();
    json_object_set_new(j, "model", json_string(as_model_dir(m)));
    json_object_set_new(j, "method", json_string(sal_method_name(r->method)));
    json_object_set_new(j, "target", json_integer(r->target));
    json_object_set_new(j, "predicted", json_integer(r->predicted));
    for (int i = 0; i < r->C; i++) {
        json_array_append_new(labels, json_string(label(m, i, b, sizeof b)));
        json_array_append_new(lg, json_real(r->logits[i]));
        json_array_append_new(pr, json_real(r->probs[i]));
    }
    json_object_set_new(j, "labels", labels);
    json_object_set_new(j, "logits", lg);
    json_object_set_new(j, "probs", pr);
    for (int t = 0; t < r->T; t++) {
        char *tx = as_model_token_text(m, enc->ids[t]);
        json_t *o = json_object();
        json_object_set_new(o, "id", json_integer(enc->ids[t]));
        json_object_set_new(o, "token", json_string(tx ? tx : ""));
        json_object_set_new(o, "start", json_integer(enc->start ? enc->start[t] : -1));
        json_object_set_new(o, "end", json_integer(enc->end ? enc->end[t] : -1));
        json_object_set_new(o, "score", json_real(r->scores[t]));
        json_array_append_new(toks, o);
        free(tx);
    }
    json_object_set_new(j, "tokens", toks);
    if (r->method == SAL_IG) json_object_set_new(j, "ig", cli_ig_json(r));
    int rc = json_dumpf(j, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(7)) ? 1 : 0;
    putchar('\n');
    json_decref(j);
    return rc;
}

int cmd_saliency(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            fputs(SAL_HELP, stdout);
            return 0;
        }
    sal_args a = {.method = SAL_GRAD, .format = "text"};
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    as_error err = {0};
    as_model *m = NULL;
    as_encoding enc = {0};
    sal_result r = {0};
    if ((rc = cli_input_load(&a.in, &m)) || (rc = cli_input_encode(&a.in, "saliency", m, &enc))) goto cleanup;
    sal_opts so = {.method = a.method, .steps = a.steps, .threads = a.in.threads};
    if (parse_target(m, a.target, &so.target)) {
        rc = cli_usage_error("saliency", "bad --target '%s': expected a class index or label name", a.target);
        goto cleanup;
    }
    if (sal_compute(m, &enc, &so, &r, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if (!strcmp(a.format, "json")) rc = print_json(m, &enc, &r);
    else print_text(m, &enc, &r);
cleanup:
    sal_result_free(&r);
    as_encoding_free(&enc);
    as_model_free(m);
    return rc;
}
