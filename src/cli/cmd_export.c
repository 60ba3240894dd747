/* cmd_export.c — `attnscope export`: every finished run's per-head results as JSON
 * (format in docs/analysis.md, "Export").
 */
#include "cli.h"
#include "attnscope/analysis.h"

#include <string.h>

static const char *EXPORT_HELP =
    "usage: attnscope export --db FILE --out heads.json\n"
    "\n"
    "Writes every finished run (model) of the database with, per head: layer, head,\n"
    "semantic, importance, syntactic score, per-relation accuracies, Clark et al.\n"
    "statistics and pattern (label, confidence, concentration, ablation), plus the\n"
    "head-by-head Jensen-Shannon divergence matrix. Format: docs/analysis.md.\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

int cmd_export(int argc, char **argv) {
    const char *db = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) {
            fputs(EXPORT_HELP, stdout);
            return 0;
        }
        if (!strcmp(a, "--db")) {
            if (!(db = cli_value(argc, argv, &i, "export"))) return AS_ERR_INPUT;
        } else if (!strcmp(a, "--out")) {
            if (!(out = cli_value(argc, argv, &i, "export"))) return AS_ERR_INPUT;
        } else {
            return cli_usage_error("export", "unknown option '%s'", a);
        }
    }
    if (!db) return cli_usage_error("export", "--db FILE is required");
    if (!out) return cli_usage_error("export", "--out FILE is required");
    as_error err = {0};
    return an_export_db(db, out, &err) ? cli_fail(&err) : 0;
}
