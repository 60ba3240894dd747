/* cmd_report.c — `attnscope report`: top heads per score, per relation and per pattern
 * of every run in an analysis database (analysis/report.h).
 */
#include "cli.h"
#include "attnscope/analysis.h"

#include <string.h>

static const char *REPORT_HELP =
    "usage: attnscope report --db FILE [--top N]\n"
    "\n"
    "Prints, for every run in the database: the top N heads (default 5) by importance,\n"
    "semantic and syntactic score and by each Clark et al. statistic; the best head per\n"
    "dependency relation and direction where it beats the fixed-offset baseline; and the\n"
    "heads of each pattern with its confidence and the embedding it depends on most.\n"
    "Heads are LxHy, both 0-based.\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

int cmd_report(int argc, char **argv) {
    const char *db = NULL;
    int top = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(REPORT_HELP, stdout);
            return 0;
        }
        if (!strcmp(a, "--db")) {
            if (!(v = cli_value(argc, argv, &i, "report"))) return AS_ERR_INPUT;
            db = v;
        } else if (!strcmp(a, "--top")) {
            if (!(v = cli_value(argc, argv, &i, "report"))) return AS_ERR_INPUT;
            if (cli_parse_int(v, 1, 100000, &top)) return cli_usage_error("report", "bad --top '%s'", v);
        } else {
            return cli_usage_error("report", "unknown option '%s'", a);
        }
    }
    if (!db) return cli_usage_error("report", "--db FILE is required");
    as_error err = {0};
    return an_report_db(db, stdout, top, &err) ? cli_fail(&err) : 0;
}
