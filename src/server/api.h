/* api.h — the /api/v1 routes of the server, independent of the HTTP library:
 * a request (method, path, query lookup, body) in, a response (status, body,
 * content type) out (server/reply.h). Internal to the server module; see
 * docs/server.md.
 */
#ifndef AS_SRV_API_H
#define AS_SRV_API_H

#include "cache.h"
#include "npz_runs.h"
#include "reply.h" /* srv_request, srv_response */
#include "server.h"

struct srv_db; /* server/db_api.h */

typedef struct {
    as_model *m;    /* owned */
    char name[128]; /* the folder's base name, made unique */
} srv_model;

typedef struct {
    srv_model *models; /* (n_models) */
    int n_models;
    srv_cache cache;
    pthread_mutex_t admit_mu; /* guards active */
    int active, max_active;
    pthread_mutex_t fwd_mu; /* one forward at a time (OpenBLAS thread settings are global) */
    int threads;
    int test_delay_ms;
    struct srv_db *db; /* the --db analysis database (server/db_api.h), or NULL */
    srv_imports imports; /* --import-dir folders (server/imports.h) */
    srv_npz_runs npz;    /* --attention files (server/npz_runs.h) */
} srv_state;

/* Handles one request whose path starts with "/api/". Fills rs (body owned by rs). */
void api_handle(srv_state *s, const srv_request *rq, srv_response *rs);

/* ---- runs, shared with server/db_api.c (which recomputes a sentence's attention) ---- */
/* Admission (at most max_active runs; sets a 503 and returns 0 when full) and release. */
int api_admit(srv_state *s, srv_response *rs);
void api_leave(srv_state *s);
/* Runs the model under the forward lock; the caller is admitted. *out owned by the caller. */
as_status api_forward(srv_state *s, const as_model *m, const as_encoding *enc, unsigned what, as_run **out,
                      as_error *err);

#endif
