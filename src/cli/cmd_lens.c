/* cmd_lens.c — `attnscope lens`: the logit lens (nostalgebraist 2020) — every layer's
 * hidden state at one position read through the model's final norm and language-model
 * head (as_run_logit_lens): the top tokens and their probabilities per layer. */
#include "cli.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *LENS_HELP =
    "usage: attnscope lens --model DIR (--text TEXT | --ids 1,2,...) [--position P] [--top K]\n"
    "                      [--format text|json] [--threads N]\n"
    "\n"
    "Runs the model (one with a language-model or masked-LM head) and reads each layer's\n"
    "hidden state at position P (default: the last token) through the final norm and the\n"
    "head, as if the model stopped there: prints the top K (default 5) tokens and their\n"
    "softmax probabilities per layer, from the embeddings (layer 0) to the output (the\n"
    "model's own prediction). --format json prints the same as one object.\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

int cmd_lens(int argc, char **argv) {
    const char *dir = NULL, *text = NULL, *ids = NULL, *format = "text";
    int pos = -1, top = 5, threads = 0;
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
        else if (!strcmp(o, "--position")) {
            if (cli_parse_int(v, 0, AS_MAX_POSITIONS - 1, &pos)) return cli_usage_error("lens", "bad --position '%s'", v);
        } else if (!strcmp(o, "--top")) {
            if (cli_parse_int(v, 1, 100, &top)) return cli_usage_error("lens", "bad --top '%s' (1..100)", v);
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
    as_run *r = NULL;
    float *logits = NULL;
    int rc = 0, *best = NULL;
    if (as_model_load(dir, &m, &err)) return cli_fail(&err);
    if ((rc = cli_make_encoding("lens", m, text, NULL, ids, NULL, 0, 1, &enc))) goto cleanup;
    if (pos >= enc.n) {
        rc = cli_usage_error("lens", "--position %d is past the input's %d tokens", pos, enc.n);
        goto cleanup;
    }
    if (pos < 0)
        for (int i = 0; i < enc.n; i++)
            if (enc.mask[i]) pos = i;
    as_capture_spec spec = {.what = CAP_HIDDEN | CAP_LOGITS, .layer = -1, .head = -1, .threads = threads};
    if (as_forward(m, &enc, &spec, &r, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    const as_config *c = as_model_config(m);
    int V = c->vocab_size, T = enc.n;
    logits = as_malloc_array((size_t)T * V, sizeof(float));
    best = as_malloc_array((size_t)top, sizeof(int));
    if (!logits || !best) {
        as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
        rc = cli_fail(&err);
        goto cleanup;
    }
    int json = !strcmp(format, "json");
    if (json) printf("{\"position\":%d,\"id\":%d,\"layers\":[", pos, (int)enc.ids[pos]);
    else printf("logit lens at position %d of %d (%s, %d layers)\n", pos, T, c->model_type, c->n_layer);
    for (int l = 0; l <= r->n_run; l++) {
        if (as_run_logit_lens(m, r, l, threads, logits, &err)) {
            rc = cli_fail(&err);
            goto cleanup;
        }
        const float *row = logits + (size_t)pos * V;
        double mx = row[0], z = 0.0;
        for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
        for (int v = 0; v < V; v++) z += exp((double)row[v] - mx);
        int n = 0; /* top K by insertion */
        for (int v = 0; v < V; v++) {
            int k = n < top ? n++ : top;
            if (k == top && row[v] <= row[best[top - 1]]) continue;
            if (k == top) k = top - 1;
            while (k > 0 && row[v] > row[best[k - 1]]) best[k] = best[k - 1], k--;
            best[k] = v;
        }
        if (json) printf("%s{\"layer\":%d,\"top\":[", l ? "," : "", l);
        else printf("  %2d:", l);
        for (int k = 0; k < n; k++) {
            double p = exp((double)row[best[k]] - mx) / z;
            char *t = as_model_token_text(m, best[k]);
            if (json) {
                json_t *js = as_json_string_utf8(t ? t : "");
                char *q = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
                printf("%s{\"id\":%d,\"text\":%s,\"prob\":%.6f,\"logit\":%.6f}", k ? "," : "", best[k], q ? q : "\"\"", p,
                       (double)row[best[k]]);
                free(q);
                json_decref(js);
            } else {
                printf("  %s %.3f", t ? t : "?", p);
            }
            free(t);
        }
        printf(json ? "]}" : "\n");
    }
    if (json) printf("]}\n");
cleanup:
    free(logits);
    free(best);
    as_run_free(r);
    as_encoding_free(&enc);
    as_model_free(m);
    return rc;
}
