/* main.c — the attnscope command: dispatches to one subcommand per cmd_*.c. */
#include "cli.h"

#include <string.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "attnscope %s — look inside Transformer attention\n"
            "\n"
            "usage: attnscope <command> [options]\n"
            "\n"
            "commands:\n"
            "  run       tokenize + run a model, print a summary or write captured tensors (json|npz)\n"
            "  info      print a model folder's architecture, sizes, dtype and vocabulary\n"
            "  bench     time one forward pass with full capture (median ms, GFLOP/s, sgemm peak)\n"
            "  saliency  per-token gradient saliency for a classifier (grad | gxi | ig)\n"
            "  attribute rollout, flow, norm-based, ALTI, gradient-weighted attention, head importance\n"
            "  faithfulness AOPC, comprehensiveness, sufficiency of every per-token attribution method\n"
            "  intervene the output with heads ablated or attention edges knocked out, beside the original\n"
            "  ablate    the same as intervene (--heads L:H,... [--mode zero|mean] [--knockout L:i>j,...])\n"
            "  vocab     train a WordPiece vocabulary (vocab.txt) on text files\n"
            "  pretrain  masked-LM pretraining of a BERT encoder from scratch\n"
            "  train-lm  causal-LM training of a decoder (GPT-2, LLaMA family) on the one forward\n"
            "  probe     induction / previous-token / sink scores of every head (--induction)\n"
            "  lens      the logit lens: every layer's top next tokens at one position\n"
            "  finetune  fine-tune a classifier (sst2), keeping the best dev epoch\n"
            "  eval      classifier accuracy (sst2), masked-token accuracy (mlm), head patterns,\n"
            "            causal-LM perplexity next to a Kneser-Ney n-gram baseline (lm)\n"
            "  generate  continue a prompt with a causal LM (greedy or top-k sampling)\n"
            "  align     word alignment from an encoder-decoder model's cross-attention, AER per head\n"
            "  distill   distil a masked-LM teacher into a student with half the layers\n"
            "  serve     serve the attention explorer (web UI + JSON/binary API) on loopback\n"
            "  analyze   corpus-scale head scores, patterns and explanations into SQLite\n"
            "  import    score attention computed elsewhere (npy + json folder) into SQLite\n"
            "  report    top heads per score, relation and pattern of an analysis database\n"
            "  export    per-head results of an analysis database as JSON\n"
            "\n"
            "`attnscope <command> --help` describes each. Exit status: 0 success, 2 bad input,\n"
            "1 internal error.\n",
            AS_VERSION);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return AS_ERR_INPUT;
    }
    const char *c = argv[1];
    if (cli_is_help(c)) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(c, "--version")) {
        printf("attnscope %s\n", AS_VERSION);
        return 0;
    }
    if (!strcmp(c, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(c, "info")) return cmd_info(argc - 1, argv + 1);
    if (!strcmp(c, "bench")) return cmd_bench(argc - 1, argv + 1);
    if (!strcmp(c, "saliency")) return cmd_saliency(argc - 1, argv + 1);
    if (!strcmp(c, "attribute")) return cmd_attribute(argc - 1, argv + 1);
    if (!strcmp(c, "faithfulness")) return cmd_faithfulness(argc - 1, argv + 1);
    if (!strcmp(c, "intervene") || !strcmp(c, "ablate")) return cmd_intervene(argc - 1, argv + 1);
    if (!strcmp(c, "serve")) return cmd_serve(argc - 1, argv + 1);
    if (!strcmp(c, "analyze")) return cmd_analyze(argc - 1, argv + 1);
    if (!strcmp(c, "import")) return cmd_import(argc - 1, argv + 1);
    if (!strcmp(c, "report")) return cmd_report(argc - 1, argv + 1);
    if (!strcmp(c, "export")) return cmd_export(argc - 1, argv + 1);
    if (!strcmp(c, "vocab")) return cmd_vocab(argc - 1, argv + 1);
    if (!strcmp(c, "pretrain")) return cmd_pretrain(argc - 1, argv + 1);
    if (!strcmp(c, "train-lm")) return cmd_train_lm(argc - 1, argv + 1);
    if (!strcmp(c, "probe")) return cmd_probe(argc - 1, argv + 1);
    if (!strcmp(c, "lens")) return cmd_lens(argc - 1, argv + 1);
    if (!strcmp(c, "finetune")) return cmd_finetune(argc - 1, argv + 1);
    if (!strcmp(c, "eval")) return cmd_eval(argc - 1, argv + 1);
    if (!strcmp(c, "distill")) return cmd_distill(argc - 1, argv + 1);
    if (!strcmp(c, "generate")) return cmd_generate(argc - 1, argv + 1);
    if (!strcmp(c, "align")) return cmd_align(argc - 1, argv + 1);
    fprintf(stderr, "attnscope: unknown command '%s' (see attnscope --help)\n", c);
    return AS_ERR_INPUT;
}
