/* cmd_faithfulness.c — `attnscope faithfulness`: how faithful each per-token attribution
 * method is to a sequence classifier's prediction (include/attnscope/faith.h;
 * docs/attribution.md, "Faithfulness"). Over an SST-2 TSV (--data): per method the mean
 * AOPC of the deletion and insertion curves, ERASER comprehensiveness and sufficiency,
 * beside the random order's, as a table or JSON. On one input (--text / --ids): the same
 * scores and the curves themselves, as JSON (faith_result_json) or a table.
 * What it does not: attribute for its own sake (saliency and attribute do).
 */
#include "cli_input.h"
#include "attnscope/faith.h"

#include <jansson.h>
#include <string.h>
#include <unistd.h>

static const char *FAITH_HELP =
    "usage: attnscope faithfulness --model DIR (--data FILE.tsv [--limit N] | --text TEXT [--text-b TEXT]\n"
    "                              | --ids 101,7592,... [--type-ids 0,0,...])\n"
    "                              [--methods grad,gxi,ig,rollout,flow,norm,norm2,alti,grad-attn,random]\n"
    "                              [--removal delete|mask] [--steps N] [--seed S]\n"
    "                              [--format text|json] [--out FILE] [--threads N]\n"
    "                              [--precision f32|bf16]\n"
    "\n"
    "Removes the input's tokens (never [CLS], [SEP] or other special tokens) in the order each\n"
    "method ranks them for the predicted class and reads that class's probability\n"
    "(docs/attribution.md, \"Faithfulness\"):\n"
    "  aopc_del  mean drop of the deletion curve (most relevant removed first); higher = better\n"
    "  aopc_ins  mean gain of the insertion curve (most relevant kept first); higher = better\n"
    "  comp      ERASER comprehensiveness over the bins 1,5,10,20,50 %; higher = better\n"
    "  suff      ERASER sufficiency over the same bins; lower = better\n"
    "random is a uniformly random order (seeded by --seed, default 1, + the sentence index),\n"
    "the baseline every method should beat. Default: every method.\n"
    "--data: the means over the sentences of an SST-2 TSV (header sentence<TAB>label);\n"
    "--text / --ids: one input, and its curves in JSON.\n"
    "--removal delete (default, as ERASER) takes tokens out; mask puts [MASK] in their place.\n"
    "--steps: integrated-gradient steps (default 32).\n"
    CLI_INPUT_PRECISION_HELP
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    cli_input in;
    const char *data, *format, *out;
    int limit, seed;
    faith_opts o;
} faith_args;

static int parse_option(faith_args *a, const char *o, const char *v) {
    char bad[64];
    if (!strcmp(o, "--data")) a->data = v;
    else if (!strcmp(o, "--out")) a->out = v;
    else if (!strcmp(o, "--limit")) {
        if (cli_parse_int(v, 1, 1000000000, &a->limit))
            return cli_usage_error("faithfulness", "bad --limit '%s': expected a positive integer", v);
    } else if (!strcmp(o, "--seed")) {
        if (cli_parse_int(v, 0, 2147483647, &a->seed))
            return cli_usage_error("faithfulness", "bad --seed '%s': expected a non-negative integer", v);
    } else if (!strcmp(o, "--steps")) {
        if (cli_parse_int(v, 1, 4096, &a->o.steps))
            return cli_usage_error("faithfulness", "bad --steps '%s': expected an integer in [1, 4096]", v);
    } else if (!strcmp(o, "--format")) {
        if (strcmp(v, "text") && strcmp(v, "json"))
            return cli_usage_error("faithfulness", "bad --format '%s': expected text or json", v);
        a->format = v;
    } else if (!strcmp(o, "--removal")) {
        if (strcmp(v, "delete") && strcmp(v, "mask"))
            return cli_usage_error("faithfulness", "bad --removal '%s': expected delete or mask", v);
        a->o.removal = strcmp(v, "mask") ? FAITH_DELETE : FAITH_MASK;
    } else if (!strcmp(o, "--methods")) {
        if (faith_methods_parse(v, &a->o.methods, bad, sizeof bad))
            return cli_usage_error("faithfulness", "bad --methods: unknown method '%s' (grad, gxi, ig, rollout, "
                                   "flow, norm, norm2, alti, grad-attn, random)", bad);
    } else {
        return cli_usage_error("faithfulness", "unknown option '%s'", o);
    }
    return 0;
}

static int parse_args(int argc, char **argv, faith_args *a) {
    for (int i = 1; i < argc; i++) {
        int rc;
        if (cli_input_option(&a->in, "faithfulness", argc, argv, &i, &rc)) {
            if (rc) return rc;
            continue;
        }
        const char *o = argv[i], *v = cli_value(argc, argv, &i, "faithfulness");
        if (!v) return AS_ERR_INPUT;
        if ((rc = parse_option(a, o, v))) return rc;
    }
    if (a->data) {
        if (!a->in.model) return cli_usage_error("faithfulness", "--model DIR is required");
        if (a->in.text || a->in.ids) return cli_usage_error("faithfulness", "give --data or one input, not both");
        if (a->in.text_b || a->in.type_ids)
            return cli_usage_error("faithfulness", "--text-b and --type-ids apply to one input, not --data");
        return 0;
    }
    if (a->limit) return cli_usage_error("faithfulness", "--limit applies to --data");
    return cli_input_check(&a->in, "faithfulness");
}

static FILE *open_out(const char *path) {
    if (!path) return stdout;
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "attnscope: %s: cannot write\n", path);
    return f;
}

static int close_out(FILE *f, const char *path) {
    if (f == stdout) return fflush(f) ? AS_ERR_INTERNAL : 0;
    if (fclose(f)) {
        fprintf(stderr, "attnscope: %s: cannot write\n", path);
        return AS_ERR_INPUT;
    }
    return 0;
}

static void print_row(FILE *f, const char *name, double ad, double ai, double c, double s) {
    fprintf(f, "%-10s %9.4f %9.4f %9.4f %9.4f\n", name, ad, ai, c, s);
}

static json_t *summary_json(const faith_args *a, const faith_summary *sm, double secs) {
    json_t *ms = json_array(), *bins = json_array();
    for (int b = 0; b < FAITH_N_BINS; b++) json_array_append_new(bins, json_integer(faith_bins_pct[b]));
    for (int i = 0; i < sm->n_methods; i++) {
        json_t *cb = json_array(), *sb = json_array();
        for (int b = 0; b < FAITH_N_BINS; b++) {
            json_array_append_new(cb, json_real(sm->comp_bin[i][b]));
            json_array_append_new(sb, json_real(sm->suff_bin[i][b]));
        }
        json_array_append_new(ms, json_pack("{s:s, s:f, s:f, s:f, s:f, s:o, s:o}", "method",
                                            faith_method_name(sm->methods[i]), "aopc_deletion", sm->aopc_del[i],
                                            "aopc_insertion", sm->aopc_ins[i], "comprehensiveness", sm->comp[i],
                                            "sufficiency", sm->suff[i], "comprehensiveness_bins", cb,
                                            "sufficiency_bins", sb));
    }
    return json_pack("{s:s, s:s, s:i, s:i, s:f, s:f, s:f, s:f, s:s, s:i, s:o, s:f, s:o}", "model", a->in.model,
                     "data", a->data, "sentences", sm->n_sent, "skipped", sm->n_skipped, "accuracy", sm->accuracy,
                     "mean_p", sm->mean_p, "mean_empty", sm->mean_empty, "mean_tokens", sm->mean_tokens, "removal",
                     a->o.removal == FAITH_MASK ? "mask" : "delete", "seed", a->seed, "bins", bins, "seconds", secs,
                     "methods", ms);
}

static int run_corpus(const faith_args *a, const as_model *m) {
    as_error err = {0};
    faith_summary sm;
    const double t0 = as_now();
    if (faith_corpus_sst2(m, a->data, a->limit, &a->o, isatty(2), &sm, &err)) return cli_fail(&err);
    const double secs = as_now() - t0;
    FILE *f = open_out(a->out);
    if (!f) return AS_ERR_INPUT;
    if (!strcmp(a->format, "json")) {
        json_t *j = summary_json(a, &sm, secs);
        json_dumpf(j, f, JSON_INDENT(1) | JSON_REAL_PRECISION(6));
        fputc('\n', f);
        json_decref(j);
    } else {
        fprintf(f, "sentences: %d (skipped %d without a removable token), removal: %s, seed %d\n", sm.n_sent,
                sm.n_skipped, a->o.removal == FAITH_MASK ? "mask" : "delete", a->seed);
        fprintf(f, "accuracy %.4f, mean p(predicted) %.4f, with every token removed %.4f, %.1f tokens\n",
                sm.accuracy, sm.mean_p, sm.mean_empty, sm.mean_tokens);
        fprintf(f, "%-10s %9s %9s %9s %9s\n", "method", "aopc_del", "aopc_ins", "comp", "suff");
        for (int i = 0; i < sm.n_methods; i++)
            print_row(f, faith_method_name(sm.methods[i]), sm.aopc_del[i], sm.aopc_ins[i], sm.comp[i], sm.suff[i]);
        fprintf(f, "seconds: %.1f\n", secs);
    }
    return close_out(f, a->out);
}

static int run_one(const faith_args *a, const as_model *m) {
    as_error err = {0};
    as_encoding enc = {0};
    faith_result r = {0};
    int rc = cli_input_encode(&a->in, "faithfulness", m, &enc);
    if (rc) return rc;
    if (faith_compute(m, &enc, &a->o, &r, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    FILE *f = open_out(a->out);
    if (!f) {
        rc = AS_ERR_INPUT;
        goto cleanup;
    }
    if (!strcmp(a->format, "json")) {
        json_t *j = faith_result_json(m, &r, a->o.removal);
        json_object_set_new(j, "model", json_string(a->in.model));
        json_object_set_new(j, "token_list", as_tokens_json_value(m, &enc));
        json_dumpf(j, f, JSON_COMPACT | JSON_REAL_PRECISION(9));
        fputc('\n', f);
        json_decref(j);
    } else {
        fprintf(f, "predicted class %d (p = %.4f), %d removable tokens, with all removed p = %.4f\n", r.predicted,
                r.probs[r.predicted], r.n, r.empty);
        fprintf(f, "%-10s %9s %9s %9s %9s\n", "method", "aopc_del", "aopc_ins", "comp", "suff");
        for (int i = 0; i < r.n_curves; i++) {
            const faith_curve *c = &r.curves[i];
            print_row(f, faith_method_name(c->method), c->aopc_del, c->aopc_ins, c->comp, c->suff);
        }
    }
    rc = close_out(f, a->out);
cleanup:
    faith_result_free(&r);
    as_encoding_free(&enc);
    return rc;
}

int cmd_faithfulness(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            fputs(FAITH_HELP, stdout);
            return 0;
        }
    faith_args a = {.format = NULL, .seed = 1};
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    if (!a.format) a.format = a.data ? "text" : "json";
    a.o.seed = (uint64_t)a.seed;
    a.o.threads = a.in.threads;
    as_model *m = NULL;
    if ((rc = cli_input_load(&a.in, &m))) return rc;
    rc = a.data ? run_corpus(&a, m) : run_one(&a, m);
    as_model_free(m);
    return rc;
}
