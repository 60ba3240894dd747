/* api.h — the /api/v1 routes of the server, independent of the HTTP library:
 * a request (method, path, query lookup, body) in, a response (status, body,
 * content type) out. Internal to the server module; see docs/server.md.
 */
#ifndef AS_SRV_API_H
#define AS_SRV_API_H

#include "server/cache.h"
#include "server/server.h"
#include "server/tensor.h" /* api_reply_tensors */

#include <sys/types.h>

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
} srv_state;

#define SRV_STREAM_ERROR ((ssize_t)-2) /* a srv_stream read failed: the connection is closed */

/* A body produced while it is sent: read fills buf with up to max bytes at pos and
 * returns the count (> 0), or SRV_STREAM_ERROR; free releases ctx once the response
 * is done or abandoned. */
typedef struct {
    uint64_t size;
    ssize_t (*read)(void *ctx, uint64_t pos, char *buf, size_t max);
    void (*free)(void *ctx);
    void *ctx; /* owned by the response */
} srv_stream;

typedef struct {
    int status;
    unsigned char *body; /* malloc'd, owned by the response */
    size_t len;
    srv_stream stream;   /* when stream.read is set: the body instead of body/len */
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

/* ---- shared with server/db_api.c (the analysis database routes) ---- */
/* Sets rs to status + compact JSON of o (steals o). */
void api_reply_json(srv_response *rs, int status, json_t *o);
/* Sets rs to the binary tensor container of t (meta stolen). */
void api_reply_tensors(srv_response *rs, const srv_tb_tensor *t, int n, json_t *meta);
/* A JSON string for bytes that may not be valid UTF-8 (U+FFFD replaces bad sequences). */
json_t *api_json_utf8(const char *s);
/* The query parameter key, or NULL. */
const char *api_query(const srv_request *rq, const char *key);
/* Parses "a-b" or "a" into [lo, hi] within [0, n) (NULL = all); -1 when malformed. */
int api_parse_range(const char *s, int n, int *lo, int *hi);
/* Admission (at most max_active runs; sets a 503 and returns 0 when full) and release. */
int api_admit(srv_state *s, srv_response *rs);
void api_leave(srv_state *s);
/* Runs the model under the forward lock; the caller is admitted. *out owned by the caller. */
as_status api_forward(srv_state *s, const as_model *m, const as_encoding *enc, unsigned what, as_run **out,
                      as_error *err);
/* JSON of a cached run, as POST /api/v1/run returns it. */
json_t *api_run_json(const srv_state *s, const srv_entry *e, int cached);

#endif
