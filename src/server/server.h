/* server.h — `attnscope serve`: an HTTP server (libmicrohttpd) that serves the
 * embedded web explorer and the versioned JSON + binary-tensor API under /api/v1
 * (see docs/server.md). It does not parse command lines (src/cli/cmd_serve.c does)
 * and never reads files other than the model folders, database, import folders and
 * --attention files it is given.
 */
#ifndef AS_SRV_SERVER_H
#define AS_SRV_SERVER_H

#include "attnscope.h"

#include <stdio.h>
#include <stdlib.h>
#include "imports.h"  /* SRV_MAX_IMPORT_DIRS */
#include "npz_runs.h" /* SRV_MAX_NPZ_FILES */

/* ---- named limits (docs/server.md lists them) ---- */
#define SRV_MAX_MODELS 16
#define SRV_MAX_BODY_BYTES (64u * 1024u)  /* request body */
#define SRV_MAX_ACTIVE_RUNS 2             /* runs admitted at once; more get 503 */
#define SRV_MAX_CONNECTIONS 512           /* open connections (--max-connections); more get 503 */
#define SRV_MAX_CONNECTIONS_ARG 4096      /* the largest --max-connections */
#define SRV_REQUEST_TIMEOUT_S 10          /* a request's headers and body must arrive within (--request-timeout) */
#define SRV_CONNECTION_TIMEOUT_S 60       /* a connection idle this long (e.g. a client not reading) is closed */
#define SRV_STREAM_BLOCK_BYTES (64u * 1024u) /* streamed responses are encoded in blocks of this size */
#define SRV_LINGER_MAX 64                 /* refused connections draining after their 503 */
#define SRV_LINGER_MS 1000                /* how long a refused connection is drained */
#define SRV_REAP_INTERVAL_MS 100          /* how often overdue requests are looked for */
#define SRV_MAX_TOPK 50                   /* /mlm "k" */
#define SRV_POOL_MIN 8                    /* /runs/{id}/attention "pool": thumbnails of at most N x N */
#define SRV_POOL_MAX 128
#define SRV_CONNECTION_MEMORY (256u * 1024u) /* per connection: request line and headers (a page URL
                                               holding an 8192-token input, and its Referer) */
#define SRV_LONG_TOKENS 1024              /* runs longer than this capture stats,qkv, not T x T (capture "auto") */
#define SRV_DEFAULT_PORT 8080
#define SRV_MAX_FRAME_ANCESTORS 256       /* bytes of --frame-ancestors */

typedef struct {
    const char *const *model_dirs; /* (n_models) borrowed */
    int n_models;
    const char *host;      /* "127.0.0.1" by default */
    int port;              /* 0 = any free port (the bound port is printed) */
    int threads;           /* threads per forward; 0 = cores */
    int max_active_runs;   /* 0 = SRV_MAX_ACTIVE_RUNS */
    int max_cached_runs;   /* 0 = SRV_MAX_CACHED_RUNS */
    size_t max_cache_bytes;/* 0 = SRV_MAX_CACHE_BYTES */
    int max_connections;   /* 0 = SRV_MAX_CONNECTIONS */
    int request_timeout_s; /* 0 = SRV_REQUEST_TIMEOUT_S */
    int test_delay_ms;     /* testing only: sleep inside each admitted run */
    const char *db_path;   /* analysis database served under /api/v1/db (read-only), or NULL */
    const char *const *import_dirs; /* (n_import_dirs) borrowed: "DIR" or "RUN=DIR" (server/imports.h) */
    int n_import_dirs;
    const char *const *attention_files; /* (n_attention_files) borrowed: .npz files served as runs
                                           without a model (server/npz_runs.h) */
    int n_attention_files;
    const char *frame_ancestors; /* the pages' CSP frame-ancestors sources (origins that may show
                                    them in a frame, e.g. a notebook's "http://localhost:8888"),
                                    or NULL: 'none'. Borrowed */
    as_precision precision; /* arithmetic of every model's linear maps (as_model_set_precision) */
} srv_options;

/* Loads the models, listens, prints "attnscope serve: listening on http://HOST:PORT/"
 * on stdout and serves until SIGINT or SIGTERM, then shuts down cleanly.
 * At least one model folder or --attention file is needed.
 * Returns AS_OK after a signal; AS_ERR_INPUT for a bad model folder, .npz file or host,
 * AS_ERR_INTERNAL when it cannot listen. */
as_status srv_serve(const srv_options *o, as_error *err);

#endif
