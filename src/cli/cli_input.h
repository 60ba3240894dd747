/* cli_input.h — the input options the one-input analysis commands (intervene, saliency,
 * attribute, faithfulness) share: --model, --text, --text-b, --ids, --type-ids,
 * --precision and --threads, their
 * checks, and loading the model and encoding the input, each with the command's
 * one-line usage errors (cli.h).
 */
#ifndef AS_CLI_INPUT_H
#define AS_CLI_INPUT_H

#include "cli.h"
#include "attnscope/analysis.h" /* sal_result */

typedef struct {
    const char *model, *text, *text_b, *ids, *type_ids;
    as_precision precision; /* --precision f32|bf16; zero-initialised: f32 */
    int threads;
} cli_input;

/* The help line of --precision, shared by the commands that take cli_input. */
#define CLI_INPUT_PRECISION_HELP                                                          \
    "--precision bf16 runs the model's products in BF16 with F32 sums, gradients' included\n" \
    "(faster on CPUs with AVX-512 BF16; `attnscope run --help`).\n"

/* Consumes argv[*i] when it is one of the shared options (its value too, advancing
 * *i): returns 1 with *rc 0, or *rc an exit status after printing a usage error.
 * Returns 0, touching nothing, for any other option. */
int cli_input_option(cli_input *in, const char *cmd, int argc, char **argv, int *i, int *rc);
/* Checks the options together: --model given, exactly one of --text and --ids,
 * --text-b only with --text, --type-ids only with --ids. 0 or an exit status. */
int cli_input_check(const cli_input *in, const char *cmd);
/* Loads in->model into *m (the caller's, as_model_free) at in->precision; 0 or an exit
 * status. */
int cli_input_load(const cli_input *in, as_model **m);

/* {"steps", "sum", "logit_delta", "gap"} of integrated gradients' completeness check, the
 * "ig" object of `saliency --format json` and `attribute --method ig --format json`
 * (src/cli/cmd_saliency.c). */
struct json_t *cli_ig_json(const sal_result *r);
/* Encodes the input for m (untruncated past the model's limit, warnings printed)
 * into *enc (the caller's, as_encoding_free); 0 or an exit status. */
int cli_input_encode(const cli_input *in, const char *cmd, const as_model *m, as_encoding *enc);

#endif
