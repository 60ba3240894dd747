/* cmd_intervene.c — `attnscope intervene`: the model's output on one input with and without
 * an intervention on its attention (head ablation to zero or to the mean, attention
 * knockout of edges query>key; docs/attribution.md "Interventions"), side by side: the
 * class probabilities of a sequence classifier, or the top next-token log-probabilities
 * and one target token's of an LM / masked-LM head. Text table or JSON.
 * What it does not: search for heads or edges to intervene on, or keep the runs.
 */
#include "cli.h"
#include "attnscope/analysis.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *IV_HELP =
    "usage: attnscope intervene --model DIR (--text TEXT [--text-b TEXT] | --ids 101,7592,...)\n"
    "                           [--type-ids 0,0,...] [--heads L:H,...] [--mode zero|mean]\n"
    "                           [--knockout L:Q>K,L:H:Q>K,...] [--renorm] [--position P]\n"
    "                           [--top K] [--target ID] [--format text|json] [--threads N]\n"
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
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

#define IV_MAX_TOP 100

typedef struct {
    const char *model, *text, *text_b, *ids, *type_ids, *heads, *knockout, *format;
    int mode, renorm, position, top, target, threads;
} iv_args;

static int parse_args(int argc, char **argv, iv_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = NULL;
#define VAL()                                                                   \
    do {                                                                        \
        if (!(v = cli_value(argc, argv, &i, "intervene"))) return AS_ERR_INPUT; \
    } while (0)
        if (!strcmp(o, "--model")) { VAL(); a->model = v; }
        else if (!strcmp(o, "--text")) { VAL(); a->text = v; }
        else if (!strcmp(o, "--text-b")) { VAL(); a->text_b = v; }
        else if (!strcmp(o, "--ids")) { VAL(); a->ids = v; }
        else if (!strcmp(o, "--type-ids")) { VAL(); a->type_ids = v; }
        else if (!strcmp(o, "--heads")) { VAL(); a->heads = v; }
        else if (!strcmp(o, "--knockout")) { VAL(); a->knockout = v; }
        else if (!strcmp(o, "--renorm")) { a->renorm = 1; }
        else if (!strcmp(o, "--mode")) {
            VAL();
            if (strcmp(v, "zero") && strcmp(v, "mean"))
                return cli_usage_error("intervene", "bad --mode '%s': expected zero or mean", v);
            a->mode = !strcmp(v, "mean") ? AS_HEAD_MEAN : AS_HEAD_ZERO;
        } else if (!strcmp(o, "--format")) {
            VAL();
            if (strcmp(v, "text") && strcmp(v, "json"))
                return cli_usage_error("intervene", "bad --format '%s': expected text or json", v);
            a->format = v;
        } else if (!strcmp(o, "--position")) {
            VAL();
            if (cli_parse_int(v, 0, AS_MAX_POSITIONS, &a->position))
                return cli_usage_error("intervene", "bad --position '%s': expected a token index", v);
        } else if (!strcmp(o, "--top")) {
            VAL();
            if (cli_parse_int(v, 1, IV_MAX_TOP, &a->top))
                return cli_usage_error("intervene", "bad --top '%s': expected an integer in [1, %d]", v, IV_MAX_TOP);
        } else if (!strcmp(o, "--target")) {
            VAL();
            if (cli_parse_int(v, 0, AS_MAX_VOCAB, &a->target))
                return cli_usage_error("intervene", "bad --target '%s': expected a token id", v);
        } else if (!strcmp(o, "--threads")) {
            VAL();
            if (cli_parse_int(v, 1, 1024, &a->threads))
                return cli_usage_error("intervene", "bad --threads '%s': expected an integer in [1, 1024]", v);
        } else {
            return cli_usage_error("intervene", "unknown option '%s'", o);
        }
#undef VAL
    }
    if (!a->model) return cli_usage_error("intervene", "--model DIR is required");
    if (!a->text == !a->ids) return cli_usage_error("intervene", "give exactly one of --text or --ids");
    if (a->text_b && !a->text) return cli_usage_error("intervene", "--text-b needs --text");
    if (a->type_ids && !a->ids) return cli_usage_error("intervene", "--type-ids needs --ids");
    if (!a->heads && !a->knockout) return cli_usage_error("intervene", "give --heads, --knockout or both");
    return 0;
}

/* Indices of the k largest of x (n) into idx, largest first. */
static void top_k(const float *x, int n, int k, int *idx) {
    for (int r = 0; r < k; r++) {
        int b = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < r && !taken; q++) taken = idx[q] == i;
            if (!taken && (b < 0 || x[i] > x[b])) b = i;
        }
        idx[r] = b;
    }
}

static void print_token(FILE *f, const as_model *m, int id, int json) {
    char *t = as_model_token_text(m, id);
    if (json) cli_json_str(f, t ? t : "");
    else fprintf(f, "%-14s", t ? t : "?");
    free(t);
}

static void write_classes(FILE *f, const as_model *m, const iv_result *r, int json) {
    const as_config *c = as_model_config(m);
    if (!json) fprintf(f, "%-14s %9s %9s %9s\n", "class", "before", "after", "change");
    for (int k = 0; k < r->cols; k++) {
        double b = exp(r->base[k]), a = exp(r->after[k]);
        const char *label = c->id2label && k < c->num_labels && c->id2label[k] ? c->id2label[k] : NULL;
        if (json) {
            fprintf(f, "%s{\"index\": %d, \"label\": ", k ? ", " : "", k);
            cli_json_str(f, label ? label : "");
            fprintf(f, ", \"before\": %.7g, \"after\": %.7g}", b, a);
        } else {
            char idx[16];
            snprintf(idx, sizeof idx, "%d", k);
            fprintf(f, "%-14s %9.5f %9.5f %+9.5f\n", label ? label : idx, b, a, a - b);
        }
    }
}

/* The top k of one side as JSON [{"id", "text", "before", "after"}] or text rows. */
static void write_top(FILE *f, const as_model *m, const iv_result *r, const int *idx, int k, int json) {
    for (int q = 0; q < k; q++) {
        int id = idx[q];
        if (json) {
            fprintf(f, "%s{\"id\": %d, \"text\": ", q ? ", " : "", id);
            print_token(f, m, id, 1);
            fprintf(f, ", \"before\": %.7g, \"after\": %.7g}", r->base[id], r->after[id]);
        } else {
            fprintf(f, "  %6d ", id);
            print_token(f, m, id, 0);
            fprintf(f, " %10.5f %10.5f %+9.5f\n", r->base[id], r->after[id], r->after[id] - r->base[id]);
        }
    }
}

static int write_out(const as_model *m, const iv_result *r, const iv_args *a) {
    int json = !strcmp(a->format, "json"), k = a->top < r->cols ? a->top : r->cols;
    int *ib = malloc((size_t)k * sizeof(int)), *ia = malloc((size_t)k * sizeof(int));
    if (!ib || !ia) {
        free(ib);
        free(ia);
        fprintf(stderr, "attnscope: out of memory\n");
        return AS_ERR_INTERNAL;
    }
    FILE *f = stdout;
    if (json) {
        fprintf(f, "{\"model\": ");
        cli_json_str(f, as_model_dir(m));
        fprintf(f, ", \"kind\": \"%s\", \"position\": %d, ", r->classifier ? "classifier" : "lm", r->position);
    }
    if (r->classifier) {
        if (json) fprintf(f, "\"classes\": [");
        write_classes(f, m, r, json);
        if (json) fprintf(f, "]}\n");
    } else {
        top_k(r->base, r->cols, k, ib);
        top_k(r->after, r->cols, k, ia);
        int target = a->target >= 0 ? a->target : ib[0];
        if (json) {
            fprintf(f, "\"top_before\": [");
            write_top(f, m, r, ib, k, 1);
            fprintf(f, "], \"top_after\": [");
            write_top(f, m, r, ia, k, 1);
            fprintf(f, "], \"target\": ");
            write_top(f, m, r, &target, 1, 1);
            fprintf(f, "}\n");
        } else {
            fprintf(f, "log-probabilities at position %d, top %d before the intervention:\n", r->position, k);
            fprintf(f, "  %6s %-14s %10s %10s %9s\n", "id", "token", "before", "after", "change");
            write_top(f, m, r, ib, k, 0);
            fprintf(f, "top %d after:\n", k);
            write_top(f, m, r, ia, k, 0);
            fprintf(f, "target:\n");
            write_top(f, m, r, &target, 1, 0);
        }
    }
    free(ib);
    free(ia);
    return 0;
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
        rc = cli_usage_error("intervene", "--heads: %s", msg);
        goto cleanup;
    }
    if (a.knockout && iv_parse_edges(a.knockout, &edges, &iv.n_edges, msg, sizeof msg)) {
        rc = cli_usage_error("intervene", "--knockout: %s", msg);
        goto cleanup;
    }
    iv.heads = heads, iv.edges = edges;
    if (as_model_load(a.model, &m, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if ((rc = cli_make_encoding("intervene", m, a.text, a.text_b, a.ids, a.type_ids, 0, 1, &enc))) goto cleanup;
    iv_opts o = {.position = a.position, .threads = a.threads};
    if (iv_compare(m, &enc, &iv, &o, &r, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if (!r.classifier && a.target >= r.cols) {
        rc = cli_usage_error("intervene", "--target %d is outside the vocabulary [0, %d)", a.target, r.cols);
        goto cleanup;
    }
    if (r.classifier && a.target >= 0) {
        rc = cli_usage_error("intervene", "--target applies to LM / masked-LM heads (a classifier shows every class)");
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
