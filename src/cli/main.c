/* main.c — the attnscope command: dispatches to one subcommand per cmd_*.c. */
#include "cli/cli.h"

#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "attnscope %s — look inside Transformer attention\n"
            "\n"
            "usage: attnscope <command> [options]\n"
            "\n"
            "commands:\n"
            "  run     tokenize + run a model, print a summary or write captured tensors (json|npz)\n"
            "  info    print a model folder's architecture, sizes, dtype and vocabulary\n"
            "  bench   time one forward pass with full capture (median ms, GFLOP/s, sgemm peak)\n"
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
    fprintf(stderr, "attnscope: unknown command '%s' (see attnscope --help)\n", c);
    return AS_ERR_INPUT;
}
