/* cmd_intervene.c — `attnscope intervene`: the model's output on one input with and without
 * an intervention on its attention (head ablation to zero or to the mean, attention
 * knockout of edges query>key; docs/attribution.md "Interventions"), side by side: the
 * class probabilities of a sequence classifier, or the top next-token log-probabilities
 * and one target token's of an LM / masked-LM head. Text table or JSON. `attnscope ablate`
 * is this command under the other name (argv[0] names it in messages).
 * What it does not: search for heads or edges to intervene on, or keep the runs.
 */
#include "cli_input.h"
#include "attnscope/analysis.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *IV_HELP =
    "usage: attnscope intervene|ablate --model DIR (--text TEXT [--text-b TEXT] | --ids 101,7592,...)\n"
    "                           [--type-ids 0,0,...] [--heads L:H,...] [--mode zero|mean]\n"
    "                           [--knockout L:Q>K,L:H:Q>K,...] [--renorm] [--position P]\n"
    "                           [--top K] [--target ID] [--format text|json] [--threads N]\n"
    "                           [--precision f32|bf16]\n"
    "\n"
    "Runs the input twice, without and with the intervention (docs/attribution.md):\n"
    "  --heads L:H,...     heads whose output is ablated: --mode zero (default) replaces the\n"
    "                      head's context vectors by 0, mean by their mean over the input's\n"
    "                      positions\n"
    "  --knockout ...      attention edges set to 0 after the softmax: query Q stops reading\n"
    "                      key K in layer L (every head, or head H); --renorm renormalises\n"
    "                      each changed row to sum 1 (as masking the score would)\n"
    "Prints a classifier's class probabilities, or an LM's (masked LM's) top K (default 5)\n"
    "log-probabilities at --position P (default: the last token, the next-token prediction)\n"
    "before and after, and --target ID's (default: the prediction before).\n"
    CLI_INPUT_PRECISION_HELP
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    cli_input in;
    const char *heads, *knockout, *format;
    int mode, renorm, position, top, target;
} iv_args;

static int parse_args(int argc, char **argv, iv_args *a) {
    const char *cmd = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = NULL;
        int rc;
        if (cli_input_option(&a->in, cmd, argc, argv, &i, &rc)) {
            if (rc) return rc;
            continue;
        }
#define VAL()                                                                   \
    do {                                                                        \
        if (!(v = cli_value(argc, argv, &i, cmd))) return AS_ERR_INPUT; \
    } while (0)
        if (!strcmp(o, "--heads")) { VAL(); a->heads = v; }
        else if (!strcmp(o, "--knockout")) { VAL(); a->knockout = v; }
        else if (!strcmp(o, "--renorm")) { a->renorm = 1; }
        else if (!strcmp(o, "--mode")) {
            VAL();
            if (strcmp(v, "zero") && strcmp(v, "mean"))
                return cli_usage_error(cmd, "bad --mode '%s': expected zero or mean", v);
            a->mode = !strcmp(v, "mean") ? AS_HEAD_MEAN : AS_HEAD_ZERO;
        } else if (!strcmp(o, "--format")) {
            VAL();
            if (strcmp(v, "text") && strcmp(v, "json"))
                return cli_usage_error(cmd, "bad --format '%s': expected text or json", v);
            a->format = v;
        } else if (!strcmp(o, "--position")) {
            VAL();
            if (cli_parse_int(v, 0, AS_MAX_POSITIONS, &a->position))
                return cli_usage_error(cmd, "bad --position '%s': expected a token index", v);
        } else if (!strcmp(o, "--top")) {
            VAL();
            if (cli_parse_int(v, 1, IV_MAX_TOP, &a->top))
                return cli_usage_error(cmd, "bad --top '%s': expected an integer in [1, %d]", v, IV_MAX_TOP);
        } else if (!strcmp(o, "--target")) {
            VAL();
            if (cli_parse_int(v, 0, AS_MAX_VOCAB, &a->target))
                return cli_usage_error(cmd, "bad --target '%s': expected a token id", v);
        } else {
            return cli_usage_error(cmd, "unknown option '%s'", o);
        }
#undef VAL
    }
    int rc = cli_input_check(&a->in, cmd);
    if (rc) return rc;
    if (!a->heads && !a->knockout) return cli_usage_error(cmd, "give --heads, --knockout or both");
    return 0;
}

/* The text table of j (iv_result_json's object). */
static void write_text(FILE *f, json_t *j) {
    size_t k;
    json_t *x;
    if (json_object_get(j, "classes")) {
        fprintf(f, "%-14s %9s %9s %9s\n", "class", "before", "after", "change");
        json_array_foreach(json_object_get(j, "classes"), k, x) {
            double b = json_real_value(json_object_get(x, "before")), a = json_real_value(json_object_get(x, "after"));
            const char *label = json_string_value(json_object_get(x, "label"));
            char idx[16];
            snprintf(idx, sizeof idx, "%d", (int)json_integer_value(json_object_get(x, "index")));
            fprintf(f, "%-14s %9.5f %9.5f %+9.5f\n", label && *label ? label : idx, b, a, a - b);
        }
        return;
    }
    const char *part[3] = {"top_before", "top_after", "target"};
    const char *title[3] = {"top %zu before the intervention", "top %zu after", "target"};
    fprintf(f, "log-probabilities at position %d:\n", (int)json_integer_value(json_object_get(j, "position")));
    for (int p = 0; p < 3; p++) {
        json_t *arr = json_object_get(j, part[p]);
        size_t n = json_is_array(arr) ? json_array_size(arr) : 1;
        fprintf(f, title[p], n);
        fprintf(f, ":\n  %6s %-14s %10s %10s %9s\n", "id", "token", "before", "after", "change");
        for (size_t q = 0; q < n; q++) {
            x = json_is_array(arr) ? json_array_get(arr, q) : arr;
            double b = json_real_value(json_object_get(x, "before")), a = json_real_value(json_object_get(x, "after"));
            fprintf(f, "  %6d %-14s %10.5f %10.5f %+9.5f\n", (int)json_integer_value(json_object_get(x, "id")),
                    json_string_value(json_object_get(x, "text")), b, a, a - b);
        }
    }
}

static int write_out(const as_model *m, const iv_result *r, const iv_args *a) {
    json_t *j = iv_result_json(m, r, a->top, a->target);
    if (!j) {
        fprintf(stderr, "attnscope: out of memory\n");
        return AS_ERR_INTERNAL;
    }
    int rc = 0;
    if (!strcmp(a->format, "json")) {
        json_object_set_new(j, "model", json_string(as_model_dir(m)));
        rc = json_dumpf(j, stdout, JSON_COMPACT | JSON_REAL_PRECISION(7)) ? AS_ERR_INTERNAL : 0;
        putchar('\n');
    } else {
        write_text(stdout, j);
    }
    json_decref(j);
    return rc;
}

int cmd_intervene(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            fputs(IV_HELP, stdout);
            return 0;
        }
    iv_args a = {.format = "text", .position = -1, .top = 5, .target = -1};
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    as_error err = {0};
    as_model *m = NULL;
    as_encoding enc = {0};
    iv_result r = {0};
    char msg[256];
    as_intervention iv = {.head_mode = a.mode, .renorm = a.renorm};
    as_head_ref *heads = NULL;
    as_edge *edges = NULL;
    if (a.heads && iv_parse_heads(a.heads, &heads, &iv.n_heads, msg, sizeof msg)) {
        rc = cli_usage_error(argv[0], "--heads: %s", msg);
        goto cleanup;
    }
    if (a.knockout && iv_parse_edges(a.knockout, &edges, &iv.n_edges, msg, sizeof msg)) {
        rc = cli_usage_error(argv[0], "--knockout: %s", msg);
        goto cleanup;
    }
    iv.heads = heads, iv.edges = edges;
    if ((rc = cli_input_load(&a.in, &m)) || (rc = cli_input_encode(&a.in, argv[0], m, &enc))) goto cleanup;
    iv_opts o = {.position = a.position, .threads = a.in.threads};
    if (iv_compare(m, &enc, &iv, &o, &r, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if (!r.classifier && a.target >= r.cols) {
        rc = cli_usage_error(argv[0], "--target %d is outside the vocabulary [0, %d)", a.target, r.cols);
        goto cleanup;
    }
    if (r.classifier && a.target >= 0) {
        rc = cli_usage_error(argv[0], "--target applies to LM / masked-LM heads (a classifier shows every class)");
        goto cleanup;
    }
    rc = write_out(m, &r, &a);
cleanup:
    iv_result_free(&r);
    free(heads);
    free(edges);
    as_encoding_free(&enc);
    as_model_free(m);
    return rc;
}
