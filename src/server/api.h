/* api.h — the /api/v1 routes of the server, independent of the HTTP library:
 * a request (method, path, query lookup, body) in, a response (status, body,
 * content type) out. Internal to the server module; see docs/server.md.
 */
#ifndef AS_SRV_API_H
#define AS_SRV_API_H

#include "server/cache.h"
#include "server/server.h"

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
} srv_state;

typedef struct {
    int status;
    unsigned char *body; /* malloc'd, owned by the response */
    size_t len;
    const char *mime;    /* static string */
    const char *allow;   /* for 405: the allowed methods */
    int retry_after;     /* seconds, for 503; 0 = none */
} srv_response;

typedef struct {
    const char *method;
    const char *path; /* percent-decoded, without the query string */
    const char *body; /* (body_len) bytes, not NUL-terminated; may be NULL */
    size_t body_len;
    const char *(*query)(void *ctx, const char *key); /* NULL when absent */
    void *query_ctx;
} srv_request;

/* Handles one request whose path starts with "/api/". Fills rs (body owned by rs). */
void api_handle(srv_state *s, const srv_request *rq, srv_response *rs);
/* Sets rs to a one-line JSON error {"error": msg}. */
void api_error(srv_response *rs, int status, const char *fmt, ...) AS_PRINTF(3, 4);

#endif
