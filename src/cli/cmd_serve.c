/* cmd_serve.c — `attnscope serve`: parses the options and hands them to the server
 * module (src/server). It does not serve anything itself.
 */
#include "cli.h"
#include "../server/server.h"

#include <string.h>

static const char *SERVE_HELP =
    "usage: attnscope serve --model DIR [--model DIR2 ...] [--attention FILE.npz ...]\n"
    "                       [--host 127.0.0.1] [--port 8080]\n"
    "                       [--threads N] [--max-runs N] [--cache-runs N] [--cache-mb N]\n"
    "                       [--max-connections N] [--request-timeout S]\n"
    "                       [--db FILE.sqlite [--import-dir [RUN=]DIR ...]]\n"
    "                       [--frame-ancestors ORIGINS] [--precision f32|bf16]\n"
    "\n"
    "Serves the attention explorer (head view, model view, neuron view) and its JSON +\n"
    "binary API (docs/server.md) for the model folders given. The web front end is\n"
    "embedded in the binary; nothing is fetched from the network.\n"
    "\n"
    "--host defaults to 127.0.0.1 (loopback); any other address prints a warning, as\n"
    "the server has no authentication. --port 0 picks a free port. The bound URL is\n"
    "printed as `attnscope serve: listening on http://HOST:PORT/`.\n"
    "--threads: threads per forward pass (default: all cores). --max-runs: runs computed\n"
    "at once before requests get 503 (default 2). --cache-runs / --cache-mb: the run\n"
    "cache's bounds (default 16 runs, 2048 MiB). --max-connections: open connections\n"
    "before further ones get 503 (default 512; a quarter of it per client address when not\n"
    "on loopback). --request-timeout: seconds a request's headers and body have to arrive\n"
    "(default 10), after which its connection is closed. SIGINT or SIGTERM stops it (exit 0).\n"
    "--db: an `attnscope analyze`/`import` database, opened read-only, for the head\n"
    "overview, dependency, graph, pattern and comparison views (docs/views.md).\n"
    "--import-dir: the folder an imported run came from (`attnscope import --dir DIR`);\n"
    "its NNNN.attention.npy files give that run's per-sentence attention (dependency view,\n"
    "graph). It serves the imported run whose corpus digest matches the folder, or run\n"
    "RUN with RUN=DIR. Repeatable (at most 16); needs --db.\n"
    "--attention FILE.npz: attention computed elsewhere, shown in the head and model views\n"
    "(and the neuron view when the file has queries, keys and attention_scores) without a\n"
    "model: the npz of `attnscope run --format npz`, or bertviz-style arrays (attention\n"
    "[layers, 1, heads, T, T] or [layers, heads, T, T], tokens as strings). Each file is\n"
    "checked at startup (shapes, limits, finite non-negative weights); its run is listed\n"
    "by GET /api/v1/models under \"imported\". Repeatable (at most 16); --model is then\n"
    "optional.\n"
    "--frame-ancestors: origins allowed to show the pages in a frame, separated by spaces\n"
    "(e.g. \"http://localhost:8888\" for a notebook's attnscope.head_view(r, server=...));\n"
    "by default no page may be framed (Content-Security-Policy frame-ancestors 'none').\n"
    "--precision bf16: every model multiplies in BF16 (see `attnscope run --help`); the\n"
    "models' info (GET /api/v1/models) says which.\n";

int cmd_serve(int argc, char **argv) {
    const char *dirs[SRV_MAX_MODELS], *imports[SRV_MAX_IMPORT_DIRS], *npz[SRV_MAX_NPZ_FILES];
    srv_options o = {.model_dirs = dirs, .import_dirs = imports, .attention_files = npz, .host = "127.0.0.1",
                     .port = SRV_DEFAULT_PORT};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int n;
        if (cli_is_help(a)) {
            fputs(SERVE_HELP, stdout);
            return 0;
        } else if (!strcmp(a, "--model")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (o.n_models == SRV_MAX_MODELS)
                return cli_usage_error("serve", "at most %d --model folders", SRV_MAX_MODELS);
            dirs[o.n_models++] = v;
        } else if (!strcmp(a, "--host")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (!*v) return cli_usage_error("serve", "--host needs an address");
            o.host = v;
        } else if (!strcmp(a, "--port")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (cli_parse_int(v, 0, 65535, &o.port)) return cli_usage_error("serve", "--port: expected 0..65535");
        } else if (!strcmp(a, "--threads")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (cli_parse_int(v, 0, 1024, &o.threads)) return cli_usage_error("serve", "--threads: expected 0..1024");
        } else if (!strcmp(a, "--max-runs")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (cli_parse_int(v, 1, 64, &o.max_active_runs)) return cli_usage_error("serve", "--max-runs: expected 1..64");
        } else if (!strcmp(a, "--cache-runs")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (cli_parse_int(v, 1, 4096, &o.max_cached_runs))
                return cli_usage_error("serve", "--cache-runs: expected 1..4096");
        } else if (!strcmp(a, "--cache-mb")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (cli_parse_int(v, 1, 1 << 20, &n)) return cli_usage_error("serve", "--cache-mb: expected 1..1048576");
            o.max_cache_bytes = (size_t)n << 20;
        } else if (!strcmp(a, "--max-connections")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (cli_parse_int(v, 1, SRV_MAX_CONNECTIONS_ARG, &o.max_connections))
                return cli_usage_error("serve", "--max-connections: expected 1..%d", SRV_MAX_CONNECTIONS_ARG);
        } else if (!strcmp(a, "--request-timeout")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (cli_parse_int(v, 1, 3600, &o.request_timeout_s))
                return cli_usage_error("serve", "--request-timeout: expected 1..3600 seconds");
        } else if (!strcmp(a, "--precision")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (as_precision_parse(v, &o.precision))
                return cli_usage_error("serve", "--precision must be f32 or bf16, not '%s'", v);
        } else if (!strcmp(a, "--frame-ancestors")) {
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            o.frame_ancestors = v;
        } else if (!strcmp(a, "--db")) { /* analysis database (server/db_api.c) */
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (!*v) return cli_usage_error("serve", "--db needs a file");
            o.db_path = v;
        } else if (!strcmp(a, "--import-dir")) { /* attention of imported runs (server/imports.c) */
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (!*v) return cli_usage_error("serve", "--import-dir needs a folder");
            if (o.n_import_dirs == SRV_MAX_IMPORT_DIRS)
                return cli_usage_error("serve", "at most %d --import-dir folders", SRV_MAX_IMPORT_DIRS);
            imports[o.n_import_dirs++] = v;
        } else if (!strcmp(a, "--attention")) { /* attention computed elsewhere (server/npz_runs.c) */
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (!*v) return cli_usage_error("serve", "--attention needs an .npz file");
            if (o.n_attention_files == SRV_MAX_NPZ_FILES)
                return cli_usage_error("serve", "at most %d --attention files", SRV_MAX_NPZ_FILES);
            npz[o.n_attention_files++] = v;
        } else if (!strcmp(a, "--test-delay-ms")) { /* testing only: makes runs slow to exercise limits */
            if (!(v = cli_value(argc, argv, &i, "serve"))) return AS_ERR_INPUT;
            if (cli_parse_int(v, 0, 60000, &o.test_delay_ms)) return cli_usage_error("serve", "--test-delay-ms: 0..60000");
        } else {
            return cli_usage_error("serve", "unknown option '%s'", a);
        }
    }
    if (!o.n_models && !o.n_attention_files)
        return cli_usage_error("serve", "--model DIR (or --attention FILE.npz) is required");
    if (o.n_import_dirs && !o.db_path) return cli_usage_error("serve", "--import-dir needs --db FILE.sqlite");
    as_error err = {0};
    if (srv_serve(&o, &err) != AS_OK) return cli_fail(&err);
    return 0;
}
