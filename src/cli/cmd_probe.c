/* cmd_probe.c — `attnscope probe --induction`: the induction and previous-token scores of
 * every head on a repeated random sequence (Olsson et al. 2022): BOS (when the model has
 * one), R seeded random tokens, the same R tokens again. For a query in the second copy
 * at position i whose token first appeared at position p, an induction head attends to
 * p + 1 (the token that followed it last time); a previous-token head to i - 1. Scores
 * are the mean attention on those keys over the second copy (positions p + 1 < i).
 * Also the mean mass on the first token (the sink), and with an LM head the next-token
 * loss on each copy. The probe itself is an_induction_probe (include/attnscope/analysis.h);
 * this file parses options and prints. Text or JSON; uses the public API.
 */
#include "cli.h"

#include "attnscope/analysis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *PROBE_HELP =
    "usage: attnscope probe --model DIR --induction [--length R] [--seed S] [--top K]\n"
    "                       [--format text|json] [--precision f32|bf16] [--threads N]\n"
    "\n"
    "Runs the model on BOS (when it has one) + R seeded random tokens (default R = 50,\n"
    "ids above the special tokens) + the same R tokens again, and scores every head:\n"
    "induction = mean attention from a token of the second copy to the token that\n"
    "followed its first occurrence (Olsson et al. 2022); previous = mean attention to the\n"
    "token before; sink = mean attention to the first token. Prints the --top K heads by\n"
    "induction score (default 10), or (--format json) every head's scores and the ids.\n"
    "A model with an LM head also gets the mean next-token loss on each copy (the drop\n"
    "on the second copy is in-context learning; JSON: loss_first, loss_second).\n"
    "--precision bf16 multiplies the linear maps in BF16 (as `attnscope run`'s).\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    int layer, head;
    double induction, previous, sink;
} probe_score;

static int by_induction(const void *a, const void *b) {
    double x = ((const probe_score *)a)->induction, y = ((const probe_score *)b)->induction;
    return x < y ? 1 : x > y ? -1 : 0;
}

int cmd_probe(int argc, char **argv) {
    const char *dir = NULL, *format = "text";
    int induction = 0, R = 50, seed = 1, top = 10, threads = 0;
    as_precision prec = AS_PRECISION_F32;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        if (cli_is_help(o)) {
            fputs(PROBE_HELP, stdout);
            return 0;
        }
        if (!strcmp(o, "--induction")) {
            induction = 1;
            continue;
        }
        if (!(v = cli_value(argc, argv, &i, "probe"))) return AS_ERR_INPUT;
        if (!strcmp(o, "--model")) dir = v;
        else if (!strcmp(o, "--format")) format = v;
        else if (!strcmp(o, "--precision")) {
            if (cli_parse_precision("probe", v, &prec)) return AS_ERR_INPUT;
        } else if (!strcmp(o, "--length")) {
            if (cli_parse_int(v, 2, AS_MAX_POSITIONS / 2, &R)) return cli_usage_error("probe", "bad --length '%s'", v);
        } else if (!strcmp(o, "--seed")) {
            if (cli_parse_int(v, 0, 2147483647, &seed)) return cli_usage_error("probe", "bad --seed '%s'", v);
        } else if (!strcmp(o, "--top")) {
            if (cli_parse_int(v, 1, 1 << 20, &top)) return cli_usage_error("probe", "bad --top '%s'", v);
        } else if (!strcmp(o, "--threads")) {
            if (cli_parse_int(v, 1, 1024, &threads)) return cli_usage_error("probe", "bad --threads '%s'", v);
        } else return cli_usage_error("probe", "unknown option '%s'", o);
    }
    if (!dir) return cli_usage_error("probe", "--model DIR is required");
    if (!induction) return cli_usage_error("probe", "say which probe: --induction");
    if (strcmp(format, "text") && strcmp(format, "json"))
        return cli_usage_error("probe", "--format must be text or json, not '%s'", format);
    as_error err = {0};
    as_model *m = NULL;
    an_probe_result pr = {0};
    probe_score *sc = NULL;
    int rc = 0;
    if ((rc = cli_load_model(dir, prec, &m))) return rc;
    const as_config *c = as_model_config(m);
    const int LH = c->n_layer * c->n_head;
    if (an_induction_probe(m, R, seed, threads, &pr, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if (!(sc = as_calloc((size_t)LH, sizeof *sc))) {
        as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
        rc = cli_fail(&err);
        goto cleanup;
    }
    for (int k = 0; k < LH; k++) {
        sc[k].layer = k / c->n_head, sc[k].head = k % c->n_head;
        sc[k].induction = pr.heads[k].induction, sc[k].previous = pr.heads[k].previous, sc[k].sink = pr.heads[k].sink;
    }
    if (!strcmp(format, "json")) {
        printf("{\"model\":\"%s\",\"length\":%d,\"seed\":%d,\"ids\":[", as_model_dir(m), R, seed);
        for (int i = 0; i < pr.T; i++) printf("%s%d", i ? "," : "", (int)pr.ids[i]);
        printf("],\"heads\":[");
        for (int k = 0; k < LH; k++)
            printf("%s{\"layer\":%d,\"head\":%d,\"induction\":%.6f,\"previous\":%.6f,\"sink\":%.6f}", k ? "," : "",
                   sc[k].layer, sc[k].head, sc[k].induction, sc[k].previous, sc[k].sink);
        printf("]");
        if (!isnan(pr.loss_first)) printf(",\"loss_first\":%.6f,\"loss_second\":%.6f", pr.loss_first, pr.loss_second);
        printf("}\n");
    } else {
        qsort(sc, (size_t)LH, sizeof *sc, by_induction);
        printf("induction probe: %s, %d random tokens repeated (seed %d)\n", as_model_dir(m), R, seed);
        if (!isnan(pr.loss_first))
            printf("next-token loss: first copy %.4f, second copy %.4f nats (in-context drop %.4f)\n", pr.loss_first,
                   pr.loss_second, pr.loss_first - pr.loss_second);
        printf("  layer head  induction  previous  sink\n");
        for (int k = 0; k < top && k < LH; k++)
            printf("  %5d %4d  %9.4f  %8.4f  %.4f\n", sc[k].layer, sc[k].head, sc[k].induction, sc[k].previous,
                   sc[k].sink);
    }
cleanup:
    free(sc);
    an_probe_result_free(&pr);
    as_model_free(m);
    return rc;
}
