/* cli_input.c — the shared input options of the one-input analysis commands
 * (cli_input.h): parsing, checking, loading the model and encoding the input.
 */
#include "cli_input.h"

#include <string.h>

int cli_input_option(cli_input *in, const char *cmd, int argc, char **argv, int *i, int *rc) {
    static const char *const names[] = {"--model", "--text",      "--text-b", "--ids",
                                        "--type-ids", "--precision", "--threads"};
    const char **slot[] = {&in->model, &in->text, &in->text_b, &in->ids, &in->type_ids, NULL, NULL};
    const char *o = argv[*i], *v;
    size_t k = 0;
    while (k < sizeof names / sizeof *names && strcmp(o, names[k])) k++;
    if (k == sizeof names / sizeof *names) return 0;
    *rc = 0;
    if (!(v = cli_value(argc, argv, i, cmd))) *rc = AS_ERR_INPUT;
    else if (slot[k]) *slot[k] = v;
    else if (!strcmp(o, "--precision")) *rc = cli_parse_precision(cmd, v, &in->precision);
    else if (cli_parse_int(v, 1, 1024, &in->threads))
        *rc = cli_usage_error(cmd, "bad --threads '%s': expected an integer in [1, 1024]", v);
    return 1;
}

int cli_input_check(const cli_input *in, const char *cmd) {
    if (!in->model) return cli_usage_error(cmd, "--model DIR is required");
    if (!in->text == !in->ids) return cli_usage_error(cmd, "give exactly one of --text or --ids");
    if (in->text_b && !in->text) return cli_usage_error(cmd, "--text-b needs --text");
    if (in->type_ids && !in->ids) return cli_usage_error(cmd, "--type-ids needs --ids");
    return 0;
}

int cli_input_load(const cli_input *in, as_model **m) { return cli_load_model(in->model, in->precision, m); }

int cli_input_encode(const cli_input *in, const char *cmd, const as_model *m, as_encoding *enc) {
    return cli_make_encoding(cmd, m, in->text, in->text_b, in->ids, in->type_ids, 0, 1, enc);
}
