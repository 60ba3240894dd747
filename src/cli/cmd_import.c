/* cmd_import.c — `attnscope import`: scores attention computed elsewhere into the
 * analysis database: a folder of NNNN.attention.npy + NNNN.json (Dodrio's data), or
 * separate files per sentence (--attention .npy/.npz + --tokens JSON, optional
 * --saliency and --dependencies), as any framework can export them.
 */
#include "cli.h"
#include "attnscope/analysis.h"

#include <string.h>
#include <unistd.h>

static const char *IMPORT_HELP =
    "usage: attnscope import --dir DIR --db FILE [--limit N] [--chunk K] [--min-rel N] [--quiet]\n"
    "       attnscope import --attention FILE.npy|FILE.npz --tokens FILE.json [--saliency FILE.json]\n"
    "                        [--dependencies FILE.conllu|FILE.json] [--model-name NAME] --db FILE\n"
    "                        [--limit N] [--chunk K] [--min-rel N] [--quiet]\n"
    "\n"
    "Imports attention computed by any framework (float32 [layers, heads, T, T], rows =\n"
    "queries) and computes the same head scores as `attnscope analyze` (no concentration\n"
    "or ablation: they need the model). `report` and `export` then show it like any model.\n"
    "  --dir DIR            every NNNN.attention.npy with its NNNN.json (sentence, label,\n"
    "                       predicted_label, tokens, per-class saliency, word-level parse)\n"
    "  --attention FILE     one sentence's attention: .npy, or .npz (numpy.savez or\n"
    "                       savez_compressed) with an array 'attentions' or a single array\n"
    "  --tokens FILE        its tokens JSON: tokens, optional special_tokens_mask, text,\n"
    "                       words + word_ids, label, prediction\n"
    "  --saliency FILE      T numbers (predicted class), C arrays of T numbers, or Dodrio's\n"
    "                       per-token objects\n"
    "  --dependencies FILE  a one-sentence CoNLL-U file, or {\"words\", \"list\"} JSON\n"
    "Repeat --attention/--tokens (and --saliency/--dependencies, for every sentence or for\n"
    "none) to import several sentences as one run. See docs/analysis.md for the formats.\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

#define IM_MAX_FILES 100000

int cmd_import(int argc, char **argv) {
    an_opts o = {.explain = 0};
    const char *db = NULL, *dir = NULL, *model_name = NULL;
    /* at most argc / 2 values of each repeated option */
    const char **lists[4];
    int nl[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; k++) lists[k] = calloc((size_t)argc + 1, sizeof *lists[k]);
    int rc = 0;
    if (!lists[0] || !lists[1] || !lists[2] || !lists[3]) {
        fputs("attnscope: out of memory\n", stderr);
        rc = AS_ERR_INTERNAL;
        goto cleanup;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(IMPORT_HELP, stdout);
            goto cleanup;
        }
#define VAL() do { if (!(v = cli_value(argc, argv, &i, "import"))) { rc = AS_ERR_INPUT; goto cleanup; } } while (0)
#define INT(lo, hi, dst) do { VAL(); if (cli_parse_int(v, lo, hi, dst)) { rc = cli_usage_error("import", "bad %s '%s': expected an integer in [%d, %d]", a, v, lo, hi); goto cleanup; } } while (0)
        int li = !strcmp(a, "--attention") ? 0 : !strcmp(a, "--tokens") ? 1 : !strcmp(a, "--saliency") ? 2
               : !strcmp(a, "--dependencies") ? 3 : -1;
        if (li >= 0) { VAL(); lists[li][nl[li]++] = v; }
        else if (!strcmp(a, "--dir")) { VAL(); dir = v; }
        else if (!strcmp(a, "--db")) { VAL(); db = v; }
        else if (!strcmp(a, "--model-name")) { VAL(); model_name = v; }
        else if (!strcmp(a, "--limit")) INT(1, 100000000, &o.limit);
        else if (!strcmp(a, "--chunk")) INT(1, 100000, &o.chunk);
        else if (!strcmp(a, "--min-rel")) INT(1, 100000000, &o.min_rel);
        else if (!strcmp(a, "--quiet")) o.quiet = 1;
        else { rc = cli_usage_error("import", "unknown option '%s'", a); goto cleanup; }
#undef INT
#undef VAL
    }
    int files = nl[0] || nl[1] || nl[2] || nl[3] || model_name;
    if (dir && files) rc = cli_usage_error("import", "give either --dir DIR or --attention/--tokens files, not both");
    else if (!dir && !files) rc = cli_usage_error("import", "give --dir DIR, or --attention FILE --tokens FILE");
    else if (!db) rc = cli_usage_error("import", "--db FILE is required");
    else if (files && (nl[0] == 0 || nl[0] != nl[1]))
        rc = cli_usage_error("import", "give as many --tokens files as --attention files (%d and %d)", nl[1], nl[0]);
    else if (files && ((nl[2] && nl[2] != nl[0]) || (nl[3] && nl[3] != nl[0])))
        rc = cli_usage_error("import", "give --saliency and --dependencies once per --attention file (%d) or not at all", nl[0]);
    if (rc) goto cleanup;
    o.progress = isatty(2) && !o.quiet;
    as_error err = {0};
    if (dir) {
        if (an_import_dir(db, dir, &o, &err)) rc = cli_fail(&err);
    } else {
        an_import_files_opts f = {.n = nl[0], .attention = lists[0], .tokens = lists[1],
                                  .saliency = nl[2] ? lists[2] : NULL, .dependencies = nl[3] ? lists[3] : NULL,
                                  .model_name = model_name};
        if (an_import_files(db, &f, &o, &err)) rc = cli_fail(&err);
    }
cleanup:
    for (int k = 0; k < 4; k++) free(lists[k]);
    return rc;
}
