/* cmd_import.c — `attnscope import`: scores attention computed elsewhere (a folder of
 * NNNN.attention.npy + NNNN.json, as in Dodrio's data) into the analysis database.
 */
#include "cli/cli.h"
#include "analysis/runner.h"

#include <string.h>
#include <unistd.h>

static const char *IMPORT_HELP =
    "usage: attnscope import --dir DIR --db FILE [--limit N] [--chunk K] [--min-rel N] [--quiet]\n"
    "\n"
    "Imports every NNNN.attention.npy (float32 [layers, heads, T, T], rows = queries) with\n"
    "its NNNN.json (sentence, label, predicted_label, tokens, per-class saliency, word-level\n"
    "dependencies) from DIR and computes the same head scores as `attnscope analyze`\n"
    "(no concentration or ablation: they need the model). `report` and `export` then show\n"
    "it like any model. See docs/analysis.md for the JSON fields.\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

int cmd_import(int argc, char **argv) {
    an_opts o = {.explain = 0};
    const char *db = NULL, *dir = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(IMPORT_HELP, stdout);
            return 0;
        }
#define VAL() do { if (!(v = cli_value(argc, argv, &i, "import"))) return AS_ERR_INPUT; } while (0)
#define INT(lo, hi, dst) do { VAL(); if (cli_parse_int(v, lo, hi, dst)) return cli_usage_error("import", "bad %s '%s': expected an integer in [%d, %d]", a, v, lo, hi); } while (0)
        if (!strcmp(a, "--dir")) { VAL(); dir = v; }
        else if (!strcmp(a, "--db")) { VAL(); db = v; }
        else if (!strcmp(a, "--limit")) INT(1, 100000000, &o.limit);
        else if (!strcmp(a, "--chunk")) INT(1, 100000, &o.chunk);
        else if (!strcmp(a, "--min-rel")) INT(1, 100000000, &o.min_rel);
        else if (!strcmp(a, "--quiet")) o.quiet = 1;
        else return cli_usage_error("import", "unknown option '%s'", a);
#undef INT
#undef VAL
    }
    if (!dir) return cli_usage_error("import", "--dir DIR is required");
    if (!db) return cli_usage_error("import", "--db FILE is required");
    o.progress = isatty(2) && !o.quiet;
    as_error err = {0};
    if (an_import_dir(db, dir, &o, &err)) return cli_fail(&err);
    return 0;
}
