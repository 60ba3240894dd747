/* cmd_info.c — `attnscope info`: architecture, sizes, dtype, heads and vocabulary of
 * a model folder. */
#include "cli.h"

#include <string.h>

static const char *INFO_HELP =
    "usage: attnscope info --model DIR\n"
    "\n"
    "Prints the architecture, sizes, stored dtype, task heads, parameter count and\n"
    "tokenizer of the Hugging Face model folder DIR. Exit status 0 ok, 2 bad input.\n";

int cmd_info(int argc, char **argv) {
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(INFO_HELP, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--model")) {
            if (!(dir = cli_value(argc, argv, &i, "info"))) return AS_ERR_INPUT;
        } else {
            return cli_usage_error("info", "unknown option '%s'", argv[i]);
        }
    }
    if (!dir) return cli_usage_error("info", "--model DIR is required");
    as_error err = {0};
    as_model *m = NULL;
    if (as_model_load(dir, &m, &err)) return cli_fail(&err);
    const as_config *c = as_model_config(m);
    unsigned heads = as_model_heads(m);
    static const char *acts[] = {"gelu", "gelu_new", "relu"};
    printf("model:        %s\n", dir);
    printf("architecture: %s (model_type %s)%s\n", as_arch_name(c->arch), c->model_type,
           c->causal ? ", causal" : "");
    printf("layers:       %d\n", c->n_layer);
    printf("heads:        %d (head width %d)\n", c->n_head, c->d_head);
    printf("scores:       q.k%s%s\n", c->attn_unscaled ? "" : " / sqrt(head width)",
           c->attn_layer_scale ? " / (layer + 1)" : "");
    printf("width:        %d (feed-forward %d, embeddings %d)\n", c->d_model, c->d_ff, c->d_embed);
    printf("activation:   %s\n", acts[c->act]);
    printf("positions:    %d (longest input %d tokens)\n", c->max_pos, as_model_max_tokens(m));
    printf("segments:     %d\n", c->type_vocab);
    printf("vocabulary:   %d\n", c->vocab_size);
    printf("dtype:        %s\n", as_dtype_name(as_model_dtype(m)));
    printf("parameters:   %zu\n", as_model_n_params(m));
    printf("task heads:  ");
    if (!heads) printf(" none");
    if (heads & HEAD_CLASSIFIER) {
        printf(" sequence-classifier (%d classes:", c->num_labels);
        for (int i = 0; i < c->num_labels && i < 16; i++) {
            if (c->id2label && c->id2label[i]) printf(" %s", c->id2label[i]);
            else printf(" LABEL_%d", i);
        }
        if (c->num_labels > 16) printf(" ...");
        printf(")");
    }
    if (heads & HEAD_MLM) printf(" masked-lm");
    if (heads & HEAD_LM) printf(" causal-lm");
    printf("\n");
    const char *tok_why = as_model_tokenizer_problem(m);
    if (tok_why) printf("tokenizer:    not used (%s; use --ids)\n", tok_why);
    else printf("tokenizer:    %s\n", as_model_has_tokenizer(m) ? "yes" : "none (use --ids)");
    as_model_free(m);
    return 0;
}
