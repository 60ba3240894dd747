/* reply.c — the server's replies and query-string helpers (see reply.h). */
#include "reply.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

void reply_reset(srv_response *rs) {
    free(rs->body);
    if (rs->stream.free) rs->stream.free(rs->stream.ctx);
    memset(rs, 0, sizeof *rs);
}

void reply_error(srv_response *rs, int status, const char *fmt, ...) {
    char msg[AS_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r') *p = ' ';
    reply_reset(rs);
    rs->status = status;
    rs->mime = REPLY_JSON_MIME;
    json_t *o = json_object();
    /* json_string rejects invalid UTF-8 (a message may quote input); fall back. */
    json_t *str = json_string(msg);
    json_object_set_new(o, "error", str ? str : json_string("invalid request (message not UTF-8)"));
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (s) {
        rs->body = (unsigned char *)s;
        rs->len = strlen(s);
    }
}

void reply_json(srv_response *rs, int status, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) {
        reply_error(rs, 500, "out of memory");
        return;
    }
    reply_reset(rs);
    rs->status = status;
    rs->mime = REPLY_JSON_MIME;
    rs->body = (unsigned char *)s;
    rs->len = strlen(s);
}

void reply_tensors(srv_response *rs, const srv_tb_tensor *t, int n, json_t *meta) {
    as_error err = {0};
    unsigned char *buf;
    size_t len;
    as_status st = srv_tb_write(t, n, meta, &buf, &len, &err);
    json_decref(meta);
    if (st) {
        reply_error(rs, 500, "%s", err.msg);
        return;
    }
    reply_reset(rs);
    rs->status = 200;
    rs->mime = REPLY_TENSOR_MIME;
    rs->body = buf;
    rs->len = len;
}

const char *reply_query(const srv_request *rq, const char *key) {
    return rq->query ? rq->query(rq->query_ctx, key) : NULL;
}

int reply_query_layers_heads(const srv_request *rq, int L, int H, int *l0, int *l1, int *h0, int *h1,
                             srv_response *rs) {
    if (reply_parse_range(reply_query(rq, "layers"), L, l0, l1)) {
        reply_error(rs, 400, "query 'layers': expected a or a-b with 0 <= a <= b < %d", L);
        return -1;
    }
    if (reply_parse_range(reply_query(rq, "heads"), H, h0, h1)) {
        reply_error(rs, 400, "query 'heads': expected a or a-b with 0 <= a <= b < %d", H);
        return -1;
    }
    return 0;
}

int reply_parse_range(const char *s, int n, int *lo, int *hi) {
    if (!s) {
        *lo = 0;
        *hi = n - 1;
        return 0;
    }
    char *end;
    if (*s < '0' || *s > '9') return -1;
    errno = 0;
    long a = strtol(s, &end, 10), b = a;
    if (errno) return -1;
    if (*end == '-') {
        const char *p = end + 1;
        if (*p < '0' || *p > '9') return -1;
        b = strtol(p, &end, 10);
        if (errno) return -1;
    }
    if (*end || a < 0 || b < a || b >= n) return -1;
    *lo = (int)a;
    *hi = (int)b;
    return 0;
}
