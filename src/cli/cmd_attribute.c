/* cmd_attribute.c — `attnscope attribute`: one attribution method past raw attention
 * (rollout, flow, norm-based, residual- and norm-aware norm-based, ALTI, gradient-weighted
 * attention, head importance; see
 * docs/attribution.md) on one input, written as JSON (tokens, shape, the values flat in
 * row-major order) or as an .npz archive (attr_write_npz).
 * What it does not: draw anything (the server's view does), or average over a corpus.
 */
#include "cli_input.h"
#include "attnscope/analysis.h"

#include <jansson.h>
#include <string.h>

static const char *ATTR_HELP =
    "usage: attnscope attribute --model DIR (--text TEXT [--text-b TEXT] | --ids 101,7592,...)\n"
    "                           [--type-ids 0,0,...]\n"
    "                           --method rollout|flow|norm|norm2|alti|grad|importance\n"
    "                           [--target C] [--position P] [--format json|npz] [--out FILE]\n"
    "                           [--threads N]\n"
    "\n"
    "Attributes with more than one layer's raw attention (docs/attribution.md):\n"
    "  rollout     attention rollout (Abnar & Zuidema 2020): (T, T) output x input token\n"
    "  flow        attention flow, max-flow through the layers (same paper); (T, T),\n"
    "              at most 128 tokens\n"
    "  norm        ||attention x transformed value|| per head (Kobayashi et al. 2020); (L, H, T, T)\n"
    "  norm2       ||part of each block output from each input token||, attention + residual\n"
    "              + the norm after it (Kobayashi et al. 2021); (L, T, T) per layer\n"
    "  alti        ALTI contributions (Ferrando et al. 2022) through every block, multiplied\n"
    "              over layers; (L, T, T), layer l cumulative up to l\n"
    "  grad        gradient-weighted attention rollout (Chefer et al. 2021); (T, T)\n"
    "  importance  head importance |sum A dy/dA| (Michel et al. 2019); (L, H)\n"
    "grad and importance explain one logit: --target C (class index or label of a classifier,\n"
    "token id of an LM / masked-LM head; default: the predicted one) at --position P (LM /\n"
    "masked-LM heads; default: the last token).\n"
    "--format json (default) writes to --out FILE or stdout; npz needs --out.\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    cli_input in;
    const char *target, *position, *format, *out;
    int method_set;
    attr_method method;
} attr_args;

static int parse_args(int argc, char **argv, attr_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = NULL;
        int rc;
        if (cli_input_option(&a->in, "attribute", argc, argv, &i, &rc)) {
            if (rc) return rc;
            continue;
        }
#define VAL()                                                              \
    do {                                                                   \
        if (!(v = cli_value(argc, argv, &i, "attribute"))) return AS_ERR_INPUT; \
    } while (0)
        if (!strcmp(o, "--target")) { VAL(); a->target = v; }
        else if (!strcmp(o, "--position")) { VAL(); a->position = v; }
        else if (!strcmp(o, "--out")) { VAL(); a->out = v; }
        else if (!strcmp(o, "--format")) {
            VAL();
            if (strcmp(v, "json") && strcmp(v, "npz"))
                return cli_usage_error("attribute", "bad --format '%s': expected json or npz", v);
            a->format = v;
        } else if (!strcmp(o, "--method")) {
            VAL();
            if (attr_method_parse(v, &a->method))
                return cli_usage_error("attribute", "bad --method '%s': expected rollout, flow, norm, norm2, alti, grad or importance", v);
            a->method_set = 1;
        } else {
            return cli_usage_error("attribute", "unknown option '%s'", o);
        }
#undef VAL
    }
    /* --model DIR is required before --method, and --method before the input */
    if (a->in.model && !a->method_set) return cli_usage_error("attribute", "--method is required (rollout, flow, norm, norm2, alti, grad or importance)");
    int rc = cli_input_check(&a->in, "attribute");
    if (rc) return rc;
    if (!strcmp(a->format, "npz") && !a->out) return cli_usage_error("attribute", "--format npz needs --out FILE");
    int grad = a->method == ATTR_GRAD || a->method == ATTR_IMPORTANCE;
    if (!grad && (a->target || a->position))
        return cli_usage_error("attribute", "--target and --position apply to --method grad and importance only");
    return 0;
}

/* --target as an index, or a classifier's label name; --position as an index. */
static int parse_target(const as_model *m, const attr_args *a, attr_opts *o) {
    const as_config *c = as_model_config(m);
    if (a->position && cli_parse_int(a->position, 0, AS_MAX_POSITIONS, &o->position))
        return cli_usage_error("attribute", "bad --position '%s': expected a token index", a->position);
    if (!a->target || !cli_parse_int(a->target, 0, AS_MAX_VOCAB, &o->target)) return 0;
    for (int i = 0; c->id2label && i < c->num_labels; i++)
        if (c->id2label[i] && !strcmp(c->id2label[i], a->target)) {
            o->target = i;
            return 0;
        }
    return cli_usage_error("attribute", "bad --target '%s': expected a class index, label name or token id", a->target);
}

static int write_json(const as_model *m, const as_encoding *enc, const attr_result *r, const char *out) {
    json_t *j = json_object(), *shape = json_array(), *data = json_array();
    json_object_set_new(j, "model", json_string(as_model_dir(m)));
    json_object_set_new(j, "method", json_string(attr_method_name(r->method)));
    json_object_set_new(j, "tokens", as_tokens_json_value(m, enc));
    size_t n = 1;
    for (int d = 0; d < r->ndim; d++) {
        json_array_append_new(shape, json_integer(r->shape[d]));
        n *= (size_t)r->shape[d];
    }
    json_object_set_new(j, "shape", shape);
    if (r->method == ATTR_GRAD || r->method == ATTR_IMPORTANCE) {
        json_object_set_new(j, "target", json_integer(r->target));
        json_object_set_new(j, "position", json_integer(r->position));
        json_object_set_new(j, "logit", json_real(r->logit));
    }
    for (size_t i = 0; i < n; i++) json_array_append_new(data, json_real(r->data[i]));
    json_object_set_new(j, "data", data);
    int rc = 0;
    if (out) {
        if (json_dump_file(j, out, JSON_COMPACT | JSON_REAL_PRECISION(7))) {
            fprintf(stderr, "attnscope: %s: cannot write\n", out);
            rc = AS_ERR_INPUT;
        }
    } else {
        rc = json_dumpf(j, stdout, JSON_COMPACT | JSON_REAL_PRECISION(7)) ? AS_ERR_INTERNAL : 0;
        putchar('\n');
    }
    json_decref(j);
    return rc;
}

int cmd_attribute(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (cli_is_help(argv[i])) {
            fputs(ATTR_HELP, stdout);
            return 0;
        }
    attr_args a = {.format = "json"};
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc;
    as_error err = {0};
    as_model *m = NULL;
    as_encoding enc = {0};
    attr_result r = {0};
    attr_opts o = {.method = a.method, .target = -1, .position = -1, .threads = a.in.threads};
    if ((rc = cli_input_load(&a.in, &m)) || (rc = parse_target(m, &a, &o)) ||
        (rc = cli_input_encode(&a.in, "attribute", m, &enc)))
        goto cleanup;
    if (attr_compute(m, &enc, &o, &r, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if (!strcmp(a.format, "npz")) {
        if (attr_write_npz(m, &enc, &r, a.out, &err)) rc = cli_fail(&err);
    } else {
        rc = write_json(m, &enc, &r, a.out);
    }
cleanup:
    attr_result_free(&r);
    as_encoding_free(&enc);
    as_model_free(m);
    return rc;
}
