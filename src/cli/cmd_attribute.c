/* cmd_attribute.c — `attnscope attribute`: one attribution method past raw attention
 * (rollout, flow, norm-based, residual- and norm-aware norm-based, ALTI, gradient-weighted
 * attention, head importance; see docs/attribution.md) or one gradient saliency (grad,
 * gxi, ig: sal_compute) on one input, with the target's per-token relevance
 * (attr_relevance; a saliency's scores), written as JSON (tokens, shape, the values flat
 * in row-major order, relevance) or as an .npz archive (attr_write_npz_named, sal_write_npz).
 * Rollout, flow and grad-attn also write every layer's cumulative map (attr_opts.layers:
 * (L, T, T), the last the whole model's (T, T) result); ig takes --steps.
 * What it does not: draw anything (the server's view does), or average over a corpus.
 */
#include "cli_input.h"
#include "attnscope/analysis.h"

#include <jansson.h>
#include <string.h>

static const char *ATTR_HELP =
    "usage: attnscope attribute --model DIR (--text TEXT [--text-b TEXT] | --ids 101,7592,...)\n"
    "                           [--type-ids 0,0,...]\n"
    "                           --method rollout|flow|norm|norm2|alti|grad-attn|grad|gxi|ig\n"
    "                                    |importance\n"
    "                           [--target C] [--position P] [--steps N] [--format json|npz]\n"
    "                           [--out FILE] [--threads N]\n"
    "                           [--precision f32|bf16]\n"
    "\n"
    "Attributes with more than one layer's raw attention (docs/attribution.md):\n"
    "  rollout     attention rollout (Abnar & Zuidema 2020): (T, T) output x input token,\n"
    "              and (L, T, T) per layer, layer l the product of layers 0..l\n"
    "  flow        attention flow, max-flow through the layers (same paper); (T, T), and\n"
    "              (L, T, T) per layer, layer l from layer 0 to layer l's output; at most\n"
    "              128 tokens\n"
    "  norm        ||attention x transformed value|| per head (Kobayashi et al. 2020); (L, H, T, T)\n"
    "  norm2       ||part of each block output from each input token||, attention + residual\n"
    "              + the norm after it (Kobayashi et al. 2021); (L, T, T) per layer\n"
    "  alti        ALTI contributions (Ferrando et al. 2022) through every block, multiplied\n"
    "              over layers; (L, T, T), layer l cumulative up to l\n"
    "  grad-attn   gradient-weighted attention rollout (Chefer et al. 2021); (T, T), and\n"
    "              (L, T, T) per layer, layer l propagated through layers 0..l\n"
    "  grad        gradient saliency ||dy/de_t||_1 on each word embedding (as `attnscope\n"
    "              saliency`); (T); sequence classifiers\n"
    "  gxi         gradient x input, signed; (T); sequence classifiers\n"
    "  ig          integrated gradients from all-zero word vectors, --steps N midpoint\n"
    "              steps (1..1024, default 32); (T); sequence classifiers\n"
    "  importance  head importance |sum A dy/dA| (Michel et al. 2019); (L, H)\n"
    "grad-attn, grad, gxi, ig and importance explain one logit: --target C (class index or\n"
    "label of a classifier, token id of an LM / masked-LM head; default: the predicted one)\n"
    "at --position P (grad-attn, importance on LM / masked-LM heads; default: the last token).\n"
    "Every method but importance also writes `relevance` (T), each token's relevance for the\n"
    "prediction: the row of the token whose prediction is read ([CLS] or the last real token\n"
    "of a classifier, --position of an LM) of the whole model's map (rollout, flow,\n"
    "grad-attn, alti), of the last layer's (norm2), of the last layer's summed over heads\n"
    "(norm); the scores themselves for grad, gxi, ig. The npz holds the result under the\n"
    "method's name, relevance, input_ids, tokens and token_text; rollout, flow and grad-attn\n"
    "also their per-layer maps as <method>_layers (JSON: \"layers\": {shape, data}); ig also\n"
    "steps and logit_delta (logit - baseline logit; |sum(relevance) - logit_delta| is the\n"
    "completeness gap; JSON: \"ig\": {steps, sum, logit_delta, gap}).\n"
    "--format json (default) writes to --out FILE or stdout; npz needs --out.\n"
    CLI_INPUT_PRECISION_HELP
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    cli_input in;
    const char *target, *position, *format, *out;
    int steps;    /* --steps (ig); 0 = SAL_DEFAULT_STEPS */
    int method_set;
    attr_method method;
    int saliency; /* 1: --method grad, gxi or ig (sal_method in smethod) */
    sal_method smethod;
} attr_args;

/* Largest --steps of ig (each step is one forward and one backward). */
#define ATTR_IG_MAX_STEPS 1024

#define METHODS "rollout, flow, norm, norm2, alti, grad-attn, grad, gxi, ig or importance"

/* --method: the gradient saliencies by sal_method_parse, the rest by attr_method_parse
 * ("grad" is the saliency here; gradient-weighted attention is "grad-attn"). */
static int parse_method(const char *v, attr_args *a) {
    if (!sal_method_parse(v, &a->smethod)) {
        a->saliency = 1;
        return 0;
    }
    a->saliency = 0;
    return attr_method_parse(v, &a->method);
}

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
        else if (!strcmp(o, "--steps")) {
            VAL();
            if (cli_parse_int(v, 1, ATTR_IG_MAX_STEPS, &a->steps))
                return cli_usage_error("attribute", "bad --steps '%s': expected an integer in [1, %d]", v,
                                       ATTR_IG_MAX_STEPS);
        }
        else if (!strcmp(o, "--format")) {
            VAL();
            if (strcmp(v, "json") && strcmp(v, "npz"))
                return cli_usage_error("attribute", "bad --format '%s': expected json or npz", v);
            a->format = v;
        } else if (!strcmp(o, "--method")) {
            VAL();
            if (parse_method(v, a))
                return cli_usage_error("attribute", "bad --method '%s': expected " METHODS, v);
            a->method_set = 1;
        } else {
            return cli_usage_error("attribute", "unknown option '%s'", o);
        }
#undef VAL
    }
    /* --model DIR is required before --method, and --method before the input */
    if (a->in.model && !a->method_set) return cli_usage_error("attribute", "--method is required (" METHODS ")");
    int rc = cli_input_check(&a->in, "attribute");
    if (rc) return rc;
    if (!strcmp(a->format, "npz") && !a->out) return cli_usage_error("attribute", "--format npz needs --out FILE");
    if (a->steps && !(a->saliency && a->smethod == SAL_IG))
        return cli_usage_error("attribute", "--steps applies to --method ig only");
    if (a->saliency && a->position)
        return cli_usage_error("attribute", "--position applies to --method grad-attn and importance only");
    int grad = a->saliency || a->method == ATTR_GRAD || a->method == ATTR_IMPORTANCE;
    if (!grad && (a->target || a->position))
        return cli_usage_error("attribute", "--target and --position apply to --method grad-attn, grad, gxi, ig "
                               "and importance only");
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

/* What write_json writes beside the tokens: the result (ndim, shape, data) under `method`,
 * rel (T) or NULL, layers (L, T, T) or NULL, target / position / logit when target >= 0
 * (position >= 0), and ig's step count and logit difference when ig is not NULL. */
typedef struct {
    const char *method;
    int ndim;
    const int64_t *shape;
    const float *data, *rel;
    const float *layers; /* (L, T, T) every layer's map, the last = data; or NULL */
    int L;
    int target, position;
    float logit;
    const sal_result *ig;
} json_body;

/* {"shape": [shape], "data": [n values]} */
static json_t *json_tensor(int ndim, const int64_t *shape, const float *x) {
    json_t *t = json_object(), *sh = json_array(), *data = json_array();
    size_t n = 1;
    for (int d = 0; d < ndim; d++) {
        json_array_append_new(sh, json_integer(shape[d]));
        n *= (size_t)shape[d];
    }
    for (size_t i = 0; i < n; i++) json_array_append_new(data, json_real(x[i]));
    json_object_set_new(t, "shape", sh);
    json_object_set_new(t, "data", data);
    return t;
}

static int write_json(const as_model *m, const as_encoding *enc, const json_body *b, const char *out) {
    json_t *j = json_object(), *res = json_tensor(b->ndim, b->shape, b->data);
    json_object_set_new(j, "model", json_string(as_model_dir(m)));
    json_object_set_new(j, "method", json_string(b->method));
    json_object_set_new(j, "tokens", as_tokens_json_value(m, enc));
    json_object_set(j, "shape", json_object_get(res, "shape"));
    if (b->target >= 0) {
        json_object_set_new(j, "target", json_integer(b->target));
        if (b->position >= 0) json_object_set_new(j, "position", json_integer(b->position));
        json_object_set_new(j, "logit", json_real(b->logit));
    }
    if (b->ig) json_object_set_new(j, "ig", cli_ig_json(b->ig)); /* as `attnscope saliency --format json` */
    json_object_set(j, "data", json_object_get(res, "data"));
    json_decref(res);
    if (b->layers) {
        const int64_t lshape[3] = {b->L, enc->n, enc->n};
        json_object_set_new(j, "layers", json_tensor(3, lshape, b->layers));
    }
    if (b->rel) {
        json_t *rel = json_array();
        for (int t = 0; t < enc->n; t++) json_array_append_new(rel, json_real(b->rel[t]));
        json_object_set_new(j, "relevance", rel);
    }
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

/* --method grad, gxi or ig: sal_compute's scores, which are also the relevance. */
static int run_saliency(const as_model *m, const as_encoding *enc, const attr_args *a, int target) {
    as_error err = {0};
    sal_opts so = {.method = a->smethod, .target = target, .steps = a->steps, .threads = a->in.threads};
    sal_result r = {0};
    int rc = 0;
    if (sal_compute(m, enc, &so, &r, &err)) {
        rc = cli_fail(&err);
    } else if (!strcmp(a->format, "npz")) {
        if (sal_write_npz(m, enc, &r, a->out, &err)) rc = cli_fail(&err);
    } else {
        const int64_t shape[1] = {r.T};
        json_body b = {.method = sal_method_name(r.method), .ndim = 1, .shape = shape, .data = r.scores,
                       .rel = r.scores, .target = r.target, .position = -1, .logit = r.logits[r.target],
                       .ig = r.method == SAL_IG ? &r : NULL};
        rc = write_json(m, enc, &b, a->out);
    }
    sal_result_free(&r);
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
    float *rel = NULL;
    /* rollout, flow, grad-attn: every layer's map, the last the whole model's */
    const int layers = a.method == ATTR_ROLLOUT || a.method == ATTR_FLOW || a.method == ATTR_GRAD;
    attr_opts o = {.method = a.method, .target = -1, .position = -1, .threads = a.in.threads,
                   .layers = !a.saliency && layers};
    if ((rc = cli_input_load(&a.in, &m)) || (rc = parse_target(m, &a, &o)) ||
        (rc = cli_input_encode(&a.in, "attribute", m, &enc)))
        goto cleanup;
    if (a.saliency) {
        rc = run_saliency(m, &enc, &a, o.target);
        goto cleanup;
    }
    if (attr_compute(m, &enc, &o, &r, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    /* (T): every method's but importance's (per head) */
    if (r.method != ATTR_IMPORTANCE) {
        if (!(rel = as_calloc((size_t)enc.n, sizeof(float)))) {
            as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
            rc = cli_fail(&err);
            goto cleanup;
        }
        if (attr_relevance(m, &enc, &r, rel, &err)) {
            rc = cli_fail(&err);
            goto cleanup;
        }
    }
    const char *name = r.method == ATTR_GRAD ? "grad-attn" : attr_method_name(r.method);
    if (!strcmp(a.format, "npz")) {
        if (attr_write_npz_named(m, &enc, &r, name, rel, a.out, &err)) rc = cli_fail(&err);
    } else {
        int grad = r.method == ATTR_GRAD || r.method == ATTR_IMPORTANCE;
        json_body b = {.method = name, .ndim = r.ndim, .shape = r.shape, .data = r.data, .rel = rel,
                       .target = grad ? r.target : -1, .position = r.position, .logit = r.logit};
        if (o.layers) { /* the whole model's (T, T) as the result, every layer's beside it */
            b.ndim = 2, b.shape = r.shape + 1, b.layers = r.data, b.L = r.L;
            b.data = r.data + (size_t)(r.L - 1) * r.T * r.T;
        }
        rc = write_json(m, &enc, &b, a.out);
    }
cleanup:
    free(rel);
    attr_result_free(&r);
    as_encoding_free(&enc);
    as_model_free(m);
    return rc;
}
