/* cmd_lens.c — `attnscope lens`: the logit lens (nostalgebraist 2020) — every layer's
 * hidden state at one position read through the model's final norm and language-model
 * head (lens_json, src/analysis/lens.c): the top tokens and their probabilities per layer. */
#include "cli.h"
#include "attnscope/analysis.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *LENS_HELP =
    "usage: attnscope lens --model DIR (--text TEXT | --ids 1,2,...) [--position P] [--top K]\n"
    "                      [--format text|json] [--precision f32|bf16] [--threads N]\n"
    "\n"
    "Runs the model (one with a language-model or masked-LM head) and reads each layer's\n"
    "hidden state at position P (default: the last token) through the final norm and the\n"
    "head, as if the model stopped there: prints the top K (default 5) tokens and their\n"
    "softmax probabilities per layer, from the embeddings (layer 0) to the output (the\n"
    "model's own prediction). --format json prints the same as one object. --precision\n"
    "bf16 multiplies the linear maps in BF16 (as `attnscope run`'s).\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

int cmd_lens(int argc, char **argv) {
    const char *dir = NULL, *text = NULL, *ids = NULL, *format = "text";
    int pos = -1, top = 5, threads = 0;
    as_precision prec = AS_PRECISION_F32;
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        if (cli_is_help(o)) {
            fputs(LENS_HELP, stdout);
            return 0;
        }
        if (!(v = cli_value(argc, argv, &i, "lens"))) return AS_ERR_INPUT;
        if (!strcmp(o, "--model")) dir = v;
        else if (!strcmp(o, "--text")) text = v;
        else if (!strcmp(o, "--ids")) ids = v;
        else if (!strcmp(o, "--format")) format = v;
        else if (!strcmp(o, "--precision")) {
            if (cli_parse_precision("lens", v, &prec)) return AS_ERR_INPUT;
        } else if (!strcmp(o, "--position")) {
            if (cli_parse_int(v, 0, AS_MAX_POSITIONS - 1, &pos)) return cli_usage_error("lens", "bad --position '%s'", v);
        } else if (!strcmp(o, "--top")) {
            if (cli_parse_int(v, 1, LENS_MAX_TOP, &top))
                return cli_usage_error("lens", "bad --top '%s' (1..%d)", v, LENS_MAX_TOP);
        } else if (!strcmp(o, "--threads")) {
            if (cli_parse_int(v, 1, 1024, &threads)) return cli_usage_error("lens", "bad --threads '%s'", v);
        } else return cli_usage_error("lens", "unknown option '%s'", o);
    }
    if (!dir) return cli_usage_error("lens", "--model DIR is required");
    if (!text == !ids) return cli_usage_error("lens", "give exactly one of --text or --ids");
    if (strcmp(format, "text") && strcmp(format, "json"))
        return cli_usage_error("lens", "--format must be text or json, not '%s'", format);
    as_error err = {0};
    as_model *m = NULL;
    as_encoding enc = {0};
    json_t *j = NULL;
    int rc = 0;
    if ((rc = cli_load_model(dir, prec, &m))) return rc;
    if ((rc = cli_make_encoding("lens", m, text, NULL, ids, NULL, 0, 1, &enc))) goto cleanup;
    if (pos >= enc.n) {
        rc = cli_usage_error("lens", "--position %d is past the input's %d tokens", pos, enc.n);
        goto cleanup;
    }
    if (lens_json(m, &enc, pos, top, threads, &j, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if (!strcmp(format, "json")) {
        rc = json_dumpf(j, stdout, JSON_COMPACT | JSON_REAL_PRECISION(7)) ? AS_ERR_INTERNAL : 0;
        putchar('\n');
        goto cleanup;
    }
    const as_config *c = as_model_config(m);
    printf("logit lens at position %d of %d (%s, %d layers)\n", (int)json_integer_value(json_object_get(j, "position")),
           enc.n, c->model_type, c->n_layer);
    size_t l, k;
    json_t *layer, *x;
    json_array_foreach(json_object_get(j, "layers"), l, layer) {
        printf("  %2d:", (int)l);
        json_array_foreach(json_object_get(layer, "top"), k, x)
            printf("  %s %.3f", json_string_value(json_object_get(x, "text")), json_real_value(json_object_get(x, "prob")));
        printf("\n");
    }
cleanup:
    json_decref(j);
    as_encoding_free(&enc);
    as_model_free(m);
    return rc;
}
