/* reply.h — what every route of the server shares: the request and response types
 * (independent of the HTTP library), the replies (a one-line JSON error, a JSON body,
 * a binary tensor container), a JSON string for text that may not be valid UTF-8, and
 * the query-string helpers. The routes are in api.c (/api/v1) and db_api.c
 * (/api/v1/db); server.c turns a srv_response into HTTP.
 * What it does not: route, run models, read the database or speak HTTP.
 */
#ifndef AS_SRV_REPLY_H
#define AS_SRV_REPLY_H

#include "tensor.h"

#include <jansson.h>
#include <sys/types.h>

#define REPLY_JSON_MIME "application/json"
#define REPLY_TENSOR_MIME "application/octet-stream"

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

/* Frees rs's body or stream and zeroes rs. */
void reply_reset(srv_response *rs);
/* Sets rs to status and a one-line JSON error {"error": msg} (newlines become spaces;
 * a message that is not UTF-8 is replaced by a fixed one). */
void reply_error(srv_response *rs, int status, const char *fmt, ...) AS_PRINTF(3, 4);
/* Sets rs to status + compact JSON of o (steals o; a NULL o or a failed dump is a 500). */
void reply_json(srv_response *rs, int status, json_t *o);
/* Sets rs to a 200 with the binary tensor container of t (tensor.h; t borrowed, meta
 * stolen); a failure to build it is a 500. */
void reply_tensors(srv_response *rs, const srv_tb_tensor *t, int n, json_t *meta);
/* The query parameter key of rq, or NULL when absent. */
const char *reply_query(const srv_request *rq, const char *key);
/* Parses "a-b" or "a" (decimal, a <= b) into [lo, hi] within [0, n); NULL s = the whole
 * range. Returns 0, or -1 when malformed or out of range. */
int reply_parse_range(const char *s, int n, int *lo, int *hi);
/* rq's optional "layers" and "heads" ranges (reply_parse_range over [0, L) and [0, H);
 * absent = all). Returns 0, or -1 after setting rs to a 400 naming the query and its bound. */
int reply_query_layers_heads(const srv_request *rq, int L, int H, int *l0, int *l1, int *h0, int *h1,
                             srv_response *rs);

#endif
