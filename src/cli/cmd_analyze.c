/* cmd_analyze.c — `attnscope analyze`: corpus-scale head analysis of a model into a
 * SQLite database (analysis/runner.h). Resumable: run it again with the same arguments.
 * Built with MPI (AS_MPI) and started by mpirun, it initializes MPI and the runner
 * splits the sentences across the ranks; rank 0 writes the database.
 */
#include "cli.h"
#include "attnscope/analysis.h"

#include <cblas.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef AS_MPI
#include <mpi.h>
#endif

static const char *ANALYZE_HELP =
    "usage: attnscope analyze --model DIR [--sst2 FILE] [--conllu FILE] --db FILE\n"
    "       attnscope analyze --model DIR --source FILE --target FILE [--gold FILE] --db FILE\n"
    "                         [--limit N] [--threads N] [--chunk K] [--explain N] [--min-rel N]\n"
    "                         [--topk [K]] [--precision f32|bf16] [--quiet]\n"
    "\n"
    "Runs every sentence once (forward + attention capture; gradient saliency on SST-2\n"
    "sentences when the model has a classifier head) and stores Dodrio's importance,\n"
    "semantic and syntactic scores, Clark et al.'s statistics, head patterns and their\n"
    "explanation (concentration, embedding ablation) in the SQLite database FILE.\n"
    "A causal LM (GPT-2, LLaMA family) also gets each head's induction score (the\n"
    "repeated random-token probe of `attnscope probe --induction`) and its mass on the\n"
    "first token; its heads can be labelled induction and sink (docs/analysis.md).\n"
    "  --sst2 FILE    GLUE SST-2 TSV (header sentence<TAB>label)\n"
    "  --conllu FILE  Universal Dependencies CoNLL-U (syntactic score)\n"
    "  --limit N      at most N sentences of each corpus (default: all)\n"
    "  --chunk K      sentences per transaction (default 16)\n"
    "  --explain N    concentration + ablation on the first N sentences (default 64)\n"
    "  --min-rel N    relations need N instances for the syntactic score (default 100)\n"
    "  --source FILE, --target FILE  an encoder-decoder model (bart, mbart, marian, t5, mt5) on a\n"
    "                 parallel corpus (line i of each: a sentence pair): per-head entropy,\n"
    "                 first-token, self / previous / next mass and distances of its encoder,\n"
    "                 decoder and cross-attention (table encdec_heads)\n"
    "  --gold FILE    with them: gold word alignments (Pharaoh lines) and the alignment\n"
    "                 error rate of every cross-attention head (see `attnscope align`)\n"
    "  --topk [K]     also store each head's K strongest keys per query and the mass of\n"
    "                 the rest (table topk; K 1..64, default 8), computed from attention\n"
    "                 rows recomputed from q and k; `report` shows the mass they keep;\n"
    "                 with --source / --target, of the cross-attention (table topk_cross)\n"
    "  --precision bf16  multiply the linear maps in BF16 (as `attnscope run`'s); a run of\n"
    "                 its own\n"
    "A run is identified by the model's and corpora's SHA-256 and these parameters: the\n"
    "same command resumes an interrupted run and does nothing for a finished one. Several\n"
    "models can share one database. With MPI: `mpirun -n N attnscope analyze ...` scores\n"
    "sentence i on rank i % N and rank 0 writes the same database as one process would.\n"
    "See docs/analysis.md.\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

int cmd_analyze(int argc, char **argv) {
    an_opts o = {.explain = -1};
    const char *db = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(ANALYZE_HELP, stdout);
#ifdef AS_MPI
            fputs("This build: MPI enabled.\n", stdout);
#else
            fputs("This build: without MPI (single process).\n", stdout);
#endif
            return 0;
        }
#define VAL() do { if (!(v = cli_value(argc, argv, &i, "analyze"))) return AS_ERR_INPUT; } while (0)
#define INT(lo, hi, dst) do { VAL(); if (cli_parse_int(v, lo, hi, dst)) return cli_usage_error("analyze", "bad %s '%s': expected an integer in [%d, %d]", a, v, lo, hi); } while (0)
        if (!strcmp(a, "--model")) { VAL(); o.model_dir = v; }
        else if (!strcmp(a, "--sst2")) { VAL(); o.sst2 = v; }
        else if (!strcmp(a, "--conllu")) { VAL(); o.conllu = v; }
        else if (!strcmp(a, "--db")) { VAL(); db = v; }
        else if (!strcmp(a, "--source")) { VAL(); o.source = v; }
        else if (!strcmp(a, "--target")) { VAL(); o.target = v; }
        else if (!strcmp(a, "--gold")) { VAL(); o.gold = v; }
        else if (!strcmp(a, "--limit")) INT(1, 100000000, &o.limit);
        else if (!strcmp(a, "--threads")) INT(1, 1024, &o.threads);
        else if (!strcmp(a, "--chunk")) INT(1, 100000, &o.chunk);
        else if (!strcmp(a, "--explain")) INT(0, 100000000, &o.explain);
        else if (!strcmp(a, "--min-rel")) INT(1, 100000000, &o.min_rel);
        else if (!strcmp(a, "--topk")) {
            /* the value is optional: --topk alone (or before another option) is K = 8 */
            if (i + 1 < argc && strncmp(argv[i + 1], "--", 2)) {
                v = argv[++i];
                if (cli_parse_int(v, 1, AN_TOPK_MAX, &o.topk))
                    return cli_usage_error("analyze", "bad --topk '%s': expected an integer in [1, %d]", v, AN_TOPK_MAX);
            } else o.topk = AN_TOPK_DEFAULT;
        }
        else if (!strcmp(a, "--precision")) {
            VAL();
            if (cli_parse_precision("analyze", v, &o.precision)) return AS_ERR_INPUT;
        }
        else if (!strcmp(a, "--quiet")) o.quiet = 1;
        else return cli_usage_error("analyze", "unknown option '%s'", a);
#undef INT
#undef VAL
    }
    if (!o.model_dir) return cli_usage_error("analyze", "--model DIR is required");
    if (!db) return cli_usage_error("analyze", "--db FILE is required");
    if (!o.sst2 && !o.conllu && !o.source && !o.target)
        return cli_usage_error("analyze", "give --sst2 FILE and/or --conllu FILE, or --source FILE --target FILE");
#ifdef AS_MPI
    int rank = 0, size = 1;
    /* only when started by mpirun (OpenMPI / PMI environment): a plain run stays MPI-free */
    int mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
    if (mpi) {
        MPI_Init(NULL, NULL);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (!o.threads && size > 1) {
            /* share this machine's cores among the ranks on it */
            MPI_Comm node;
            int local = 1;
            if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
                MPI_Comm_size(node, &local);
                MPI_Comm_free(&node);
            }
            o.threads = as_n_cores() / local > 1 ? as_n_cores() / local : 1;
        }
        if (rank > 0) o.quiet = 1;
    }
#endif
    if (o.threads) openblas_set_num_threads(o.threads);
    o.progress = isatty(2) && !o.quiet;
    as_error err = {0};
    int rc = an_analyze(db, &o, &err);
    if (rc && err.msg[0]) rc = cli_fail(&err);
#ifdef AS_MPI
    if (mpi) {
        /* rank 0 failing mid-run leaves the other ranks waiting to send: stop them all */
        if (rc && rank == 0 && size > 1) {
            fflush(NULL);
            MPI_Abort(MPI_COMM_WORLD, rc);
        }
        MPI_Finalize();
    }
#endif
    return rc;
}
