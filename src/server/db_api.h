/* db_api.h — the /api/v1/db routes of `attnscope serve --db FILE.sqlite`:
 * read-only access to the database written by `attnscope analyze` / `import`
 * (schema: docs/analysis.md) for the Dodrio views of the explorer: the analysed runs,
 * every head's scores / statistics / pattern / concentration / ablation, the head-pair
 * JSD matrix (binary), per-relation best heads, a paginated searchable sentence list,
 * one sentence's tokens, words, arcs and saliency, and a head's predicted parents on a
 * sentence (recomputed with the served model; see docs/views.md).
 * What it does not: write to the database (it is opened SQLITE_OPEN_READONLY), build
 * SQL from request text (every parameter is bound to a prepared statement), or speak
 * HTTP (server.c) — api.c routes "/api/v1/db/..." here.
 */
#ifndef AS_SRV_DB_API_H
#define AS_SRV_DB_API_H

#include "api.h"

/* ---- named limits (docs/views.md lists them) ---- */
#define SRV_DB_MAX_PAGE 200          /* sentences per page (?limit) */
#define SRV_DB_DEFAULT_PAGE 50
#define SRV_DB_MAX_QUERY_BYTES 256   /* ?q search text */
#define SRV_DB_MAX_CONF_ROWS 50      /* ?confidence=1 recomputes at most this many rows */
#define SRV_DB_MAX_BEST 10           /* ?top best heads per relation and direction */
#define SRV_DB_MAX_OFFSET 1000000000L /* ?offset of the first sentence of a page */
#define SRV_DB_TOPK_MAX_ENTRIES (4u << 20) /* top-k entries (L x H x T x k) of one .../topk-all reply */

typedef struct srv_db srv_db;

/* Opens path read-only and checks that it is an attnscope analysis database of the
 * schema version this binary reads. *out is owned by the caller (srv_db_free).
 * Errors: AS_ERR_INPUT naming the file (missing, not SQLite, other schema). */
as_status srv_db_open(const char *path, srv_db **out, as_error *err);
void srv_db_free(srv_db *d);
/* Base name of the database file (for the UI). */
const char *srv_db_name(const srv_db *d);

/* Prints one line per --import-dir folder: the imported run it serves, or a warning on
 * stderr when it serves none (server/imports.h). */
void db_api_print_imports(srv_state *s, FILE *out);

/* Handles one request whose path starts with "/api/v1/db"; rest is the part after it
 * ("" or "/runs/..."). Fills rs (body owned by rs). s->db may be NULL (404). */
void db_api_handle(srv_state *s, const srv_request *rq, const char *rest, srv_response *rs);

#endif
