/* server.c — the HTTP side of `attnscope serve` on libmicrohttpd: listens (loopback by
 * default) and accepts connections itself, so that it can bound them: at most
 * --max-connections open (and a quarter of that per client address when not on
 * loopback), each further one answered 503 and closed gracefully; every request's
 * headers and body must arrive within --request-timeout seconds of the connection
 * being ready for it, or the connection is shut down. Connections are then served
 * by libmicrohttpd, one thread each. Reads request bodies up to SRV_MAX_BODY_BYTES,
 * checks the Host header strictly, serves the embedded assets by exact path (nothing
 * is read from disk, so no path can escape), passes /api/ requests to api.c (whose
 * tensor responses are streamed), adds security headers, and shuts down cleanly on
 * SIGINT/SIGTERM. It does not implement the API itself.
 */
#include "api.h"
#include "assets.h"
#include "db_api.h"

#include <arpa/inet.h>
#include <cblas.h> /* openblas_set_num_threads */
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

_Static_assert(SRV_STREAM_ERROR == MHD_CONTENT_READER_END_WITH_ERROR, "srv_stream errors are MHD's");

typedef struct {
    char *body; /* (len) bytes, capacity cap */
    size_t len, cap;
    int too_big;
} req_ctx;

/* ---- open connections: limits and the per-request receive deadline ---------- */

typedef struct {
    int fd;                        /* -1: free */
    struct sockaddr_storage addr;  /* (addr_len) the client */
    socklen_t addr_len;
    int64_t deadline_ms;           /* the request must be received by then; 0 = not receiving */
} conn_slot;

typedef struct {
    pthread_mutex_t mu;            /* guards every slot and n_open */
    conn_slot *slots;              /* (n_slots) */
    int n_slots, n_open;
    int per_ip;                    /* most open connections from one address; 0 = no such limit */
    int timeout_ms;                /* time allowed to receive a request's headers and body */
} conn_table;

typedef struct {
    srv_state *st;
    conn_table *ct;
    int loopback;          /* bound to a loopback address: Host headers must name loopback too */
    const char *host_name; /* --host when it is a name rather than an address, else NULL */
    char csp[512];         /* the pages' Content-Security-Policy (csp_make) */
} srv_ctx;

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                       sizeof(struct in6_addr));
    return 0;
}

/* Takes a slot for a new connection, its deadline starting now. Returns the slot, or
 * NULL with *why set: "too many open connections" (all slots taken) or "too many
 * open connections from this address". */
static conn_slot *conn_open(conn_table *ct, int fd, const struct sockaddr_storage *addr, socklen_t len,
                            const char **why) {
    conn_slot *free_slot = NULL;
    int same = 0;
    pthread_mutex_lock(&ct->mu);
    for (int i = 0; i < ct->n_slots; i++) {
        conn_slot *c = &ct->slots[i];
        if (c->fd < 0) {
            if (!free_slot) free_slot = c;
        } else if (ct->per_ip && same_addr(&c->addr, addr)) {
            same++;
        }
    }
    *why = !free_slot ? "too many open connections" : ct->per_ip && same >= ct->per_ip
                                                          ? "too many open connections from this address"
                                                          : NULL;
    if (!*why) {
        free_slot->fd = fd;
        memcpy(&free_slot->addr, addr, len);
        free_slot->addr_len = len;
        free_slot->deadline_ms = now_ms() + ct->timeout_ms;
        ct->n_open++;
    }
    pthread_mutex_unlock(&ct->mu);
    return *why ? NULL : free_slot;
}

static void conn_close_locked(conn_table *ct, conn_slot *c) {
    if (c->fd < 0) return;
    c->fd = -1;
    c->deadline_ms = 0;
    ct->n_open--;
}

/* A request on c was received in full (0), or c is ready for its next one (1). */
static void conn_set_receiving(conn_table *ct, conn_slot *c, int receiving) {
    if (!c) return;
    pthread_mutex_lock(&ct->mu);
    if (c->fd >= 0) c->deadline_ms = receiving ? now_ms() + ct->timeout_ms : 0;
    pthread_mutex_unlock(&ct->mu);
}

/* Shuts down every connection whose request is overdue: its thread then reads the
 * end of the stream and libmicrohttpd closes it. The socket stays open until the
 * closed notification frees its slot (under the same mutex), so fd is never stale. */
static void conn_reap(conn_table *ct) {
    int64_t now = now_ms();
    pthread_mutex_lock(&ct->mu);
    for (int i = 0; i < ct->n_slots; i++) {
        conn_slot *c = &ct->slots[i];
        if (c->fd >= 0 && c->deadline_ms && now >= c->deadline_ms) {
            shutdown(c->fd, SHUT_RDWR);
            c->deadline_ms = 0;
        }
    }
    pthread_mutex_unlock(&ct->mu);
}

static conn_slot *conn_of(struct MHD_Connection *con) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* libmicrohttpd's connection start and end: binds its connection to the slot the
 * accept loop took for the socket, and frees that slot. */
static void on_connection(void *cls, struct MHD_Connection *con, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    conn_table *ct = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
        pthread_mutex_lock(&ct->mu);
        for (int i = 0; ci && i < ct->n_slots; i++)
            if (ct->slots[i].fd == ci->connect_fd) *socket_context = &ct->slots[i];
        pthread_mutex_unlock(&ct->mu);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        pthread_mutex_lock(&ct->mu);
        conn_close_locked(ct, *socket_context);
        pthread_mutex_unlock(&ct->mu);
        *socket_context = NULL;
    }
}

static const char *CSP = "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
                         "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors ";

/* Writes the pages' CSP into out (cap bytes): frame-ancestors 'none', or the sources of
 * --frame-ancestors (CSP 3, sec. 6.4.2: origins and scheme sources separated by spaces),
 * which must be printable ASCII without ';', ',', quotes or backslashes (so they cannot add
 * a directive) and at most SRV_MAX_FRAME_ANCESTORS bytes. */
static as_status csp_make(const char *ancestors, char *out, size_t cap, as_error *err) {
    if (!ancestors) {
        snprintf(out, cap, "%s'none'", CSP);
        return AS_OK;
    }
    size_t n = strlen(ancestors);
    int blank = 1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)ancestors[i];
        if (c < 0x20 || c > 0x7e || strchr(";,'\"\\", c))
            return as_err_set(err, AS_ERR_INPUT, "serve: --frame-ancestors: character 0x%02x is not allowed "
                              "(give origins separated by spaces, e.g. http://localhost:8888)", c);
        if (c != ' ') blank = 0;
    }
    if (blank || n > SRV_MAX_FRAME_ANCESTORS)
        return as_err_set(err, AS_ERR_INPUT, "serve: --frame-ancestors: expected 1 to %d bytes of origins",
                          SRV_MAX_FRAME_ANCESTORS);
    snprintf(out, cap, "%s%s", CSP, ancestors);
    return AS_OK;
}

static const char *query_lookup(void *con, const char *key) {
    return MHD_lookup_connection_value((struct MHD_Connection *)con, MHD_GET_ARGUMENT_KIND, key);
}

static enum MHD_Result send_response(struct MHD_Connection *con, srv_response *rs) {
    struct MHD_Response *r;
    if (rs->stream.read) {
        r = MHD_create_response_from_callback(rs->stream.size, SRV_STREAM_BLOCK_BYTES, rs->stream.read,
                                              rs->stream.ctx, rs->stream.free);
        if (!r) rs->stream.free(rs->stream.ctx);
        memset(&rs->stream, 0, sizeof rs->stream); /* owned by r now */
    } else {
        r = MHD_create_response_from_buffer(rs->len, rs->body ? rs->body : (unsigned char *)"",
                                            rs->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (!r) free(rs->body);
        rs->body = NULL; /* owned by r now */
    }
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", rs->mime ? rs->mime : "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (rs->allow) MHD_add_response_header(r, "Allow", rs->allow);
    if (rs->retry_after > 0) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", rs->retry_after);
        MHD_add_response_header(r, "Retry-After", buf);
    }
    enum MHD_Result ok = MHD_queue_response(con, (unsigned)rs->status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_error(struct MHD_Connection *con, int status, const char *msg) {
    srv_response rs = {0};
    reply_error(&rs, status, "%s", msg);
    return send_response(con, &rs);
}

static const srv_asset *find_asset(const char *path) {
    if (!strcmp(path, "/")) path = "/index.html";
    for (size_t i = 0; i < srv_n_assets; i++)
        if (!strcmp(srv_assets[i].path, path)) return &srv_assets[i];
    return NULL;
}

static enum MHD_Result send_asset(struct MHD_Connection *con, const srv_asset *a, const char *csp) {
    struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", a->mime);
    /* Vite names bundles by content hash: those never change; index.html may. */
    MHD_add_response_header(r, "Cache-Control",
                            strncmp(a->path, "/assets/", 8) ? "no-cache" : "public, max-age=31536000, immutable");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy", csp);
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    enum MHD_Result ok = MHD_queue_response(con, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ok;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Splits a Host header value strictly into its host, written to name (cap bytes,
 * without brackets): "[" IPv6 "]" or a run of letters, digits, '-' and '.', then
 * optionally ':' and 1 to 5 digits up to 65535, and nothing else. *bracketed tells
 * the first form. Returns 0, or -1 when the value has any other form. */
static int host_split(const char *h, char *name, size_t cap, int *bracketed) {
    const char *end;
    size_t n;
    *bracketed = h[0] == '[';
    if (*bracketed) {
        n = strspn(h + 1, "0123456789abcdefABCDEF:.");
        if (h[1 + n] != ']') return -1;
        memcpy(name, h + 1, n < cap ? n : 0);
        end = h + 2 + n;
    } else {
        n = strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.");
        memcpy(name, h, n < cap ? n : 0);
        end = h + n;
    }
    if (!n || n >= cap) return -1;
    name[n] = 0;
    if (!*end) return 0;
    size_t d = strspn(end + 1, "0123456789");
    if (*end != ':' || d < 1 || d > 5 || end[1 + d] || atoi(end + 1) > 65535) return -1;
    return 0;
}

/* The host of a well-formed Host header names this loopback server: localhost, the
 * --host name, an IPv4 address in 127.0.0.0/8 (strict dotted quad), or [::1]. */
static int host_is_loopback(const srv_ctx *sc, const char *name, int bracketed) {
    if (bracketed) {
        struct in6_addr a6;
        return inet_pton(AF_INET6, name, &a6) == 1 &&
               (IN6_IS_ADDR_LOOPBACK(&a6) || (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127));
    }
    if (!strcasecmp(name, "localhost") || (sc->host_name && !strcasecmp(name, sc->host_name))) return 1;
    struct in_addr a;
    return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    if (!strcasecmp(key, "Host")) ++*(int *)cls;
    return MHD_YES;
}

/* Checks the request's Host header: 0, or sends the 400/403 and returns -1 with *ret set.
 * A missing Host (HTTP/1.0) is accepted. */
static int check_host(const srv_ctx *sc, struct MHD_Connection *con, enum MHD_Result *ret) {
    int n = 0;
    MHD_get_connection_values(con, MHD_HEADER_KIND, count_host, &n);
    const char *h = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Host");
    if (n > 1) {
        *ret = send_error(con, 400, "more than one Host header");
        return -1;
    }
    if (!h) return 0;
    char name[256];
    int bracketed;
    if (host_split(h, name, sizeof name, &bracketed)) {
        *ret = send_error(con, 400, "Host header: expected HOST or HOST:PORT (a name, an IPv4 address or [IPv6])");
        return -1;
    }
    if (sc->loopback && !host_is_loopback(sc, name, bracketed)) {
        *ret = send_error(con, 403, "Host header must name a loopback address");
        return -1;
    }
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    srv_ctx *sc = cls;
    req_ctx *rc = *con_cls;
    if (!rc) { /* first call: headers only */
        rc = calloc(1, sizeof *rc);
        if (!rc) return MHD_NO;
        *con_cls = rc;
        const char *cl = MHD_lookup_connection_value(con, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > SRV_MAX_BODY_BYTES) {
            char msg[96];
            snprintf(msg, sizeof msg, "request body over the limit of %u bytes", SRV_MAX_BODY_BYTES);
            return send_error(con, 413, msg);
        }
        return MHD_YES;
    }
    if (*upload_data_size) { /* a body chunk */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rc->too_big || n > SRV_MAX_BODY_BYTES - rc->len) {
            rc->too_big = 1;
            return MHD_YES;
        }
        if (rc->len + n > rc->cap) {
            size_t cap = rc->cap ? rc->cap : 1024;
            while (cap < rc->len + n) cap *= 2;
            char *nb = realloc(rc->body, cap);
            if (!nb) return MHD_NO;
            rc->body = nb;
            rc->cap = cap;
        }
        memcpy(rc->body + rc->len, upload_data, n);
        rc->len += n;
        return MHD_YES;
    }
    conn_set_receiving(sc->ct, conn_of(con), 0); /* the request is in: no receive deadline while it is served */
    if (rc->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body over the limit of %u bytes", SRV_MAX_BODY_BYTES);
        return send_error(con, 413, msg);
    }
    enum MHD_Result ret;
    if (check_host(sc, con, &ret)) return ret;
    if (!strncmp(url, "/api/", 5) || !strcmp(url, "/api")) {
        srv_request rq = {.method = method, .path = url, .body = rc->body, .body_len = rc->len,
                          .query = query_lookup, .query_ctx = con};
        srv_response rs = {0};
        api_handle(sc->st, &rq, &rs);
        return send_response(con, &rs);
    }
    const srv_asset *a = find_asset(url);
    if (!a) return send_error(con, 404, "not found");
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        srv_response rs = {0};
        reply_error(&rs, 405, "method not allowed (allowed: GET, HEAD)");
        rs.allow = "GET, HEAD";
        return send_response(con, &rs);
    }
    return send_asset(con, a, sc->csp);
}

/* Percent-decodes uri in place (MHD's default, except that %00 becomes 0x7F so a
 * decoded NUL can never shorten a path or a query value). Returns the new length. */
static size_t unescape(void *cls, struct MHD_Connection *con, char *uri) {
    char *w = uri;
    for (const char *r = uri; *r; r++) {
        int hi, lo;
        if (r[0] == '%' && (hi = hexval(r[1])) >= 0 && (lo = hexval(r[2])) >= 0) {
            char c = (char)(hi * 16 + lo);
            *w++ = c ? c : 0x7F;
            r += 2;
        } else {
            *w++ = *r;
        }
    }
    *w = 0;
    return (size_t)(w - uri);
}

/* A request ended: the connection's next request has its own receive deadline. */
static void on_completed(void *cls, struct MHD_Connection *con, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    conn_set_receiving(cls, conn_of(con), 1);
    req_ctx *rc = *con_cls;
    if (!rc) return;
    free(rc->body);
    free(rc);
    *con_cls = NULL;
}

/* The folder's last path component, made unique among the models loaded so far. */
static void model_name(srv_state *s, int i, const char *dir) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && dir[b - 1] != '/') b--;
    char base[100];
    snprintf(base, sizeof base, "%.*s", (int)(n - b), dir + b);
    snprintf(s->models[i].name, sizeof s->models[i].name, "%s", base);
    for (int k = 2;; k++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= !strcmp(s->models[j].name, s->models[i].name);
        if (!dup) break;
        snprintf(s->models[i].name, sizeof s->models[i].name, "%s-%d", base, k);
    }
}

static int g_sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    unsigned char c = (unsigned char)sig;
    int saved = errno;
    if (write(g_sig_pipe[1], &c, 1) < 0) { /* nothing more to do in a handler */
    }
    errno = saved;
}

static int addr_is_loopback(const struct sockaddr *sa) {
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return 0;
}

/* ---- the accept loop -------------------------------------------------------- */

/* A refused connection: its 503 is sent, and its input is read and dropped until the
 * client closes or SRV_LINGER_MS pass, so that closing it does not reset the
 * connection before the client reads the answer. */
typedef struct {
    int fd;
    int64_t until_ms;
} linger_fd;

typedef struct {
    linger_fd fds[SRV_LINGER_MAX]; /* (n) */
    int n;
} linger_list;

static void linger_add(linger_list *lg, int fd) {
    if (lg->n == SRV_LINGER_MAX) { /* full: the oldest is closed now */
        close(lg->fds[0].fd);
        memmove(lg->fds, lg->fds + 1, sizeof lg->fds[0] * (SRV_LINGER_MAX - 1));
        lg->n--;
    }
    lg->fds[lg->n++] = (linger_fd){fd, now_ms() + SRV_LINGER_MS};
}

/* Reads and drops what lingering sockets received (ready[i] from poll); closes the
 * ones at their end of stream or past their time. */
static void linger_step(linger_list *lg, const struct pollfd *ready) {
    int64_t now = now_ms();
    int k = 0;
    for (int i = 0; i < lg->n; i++) {
        int done = now >= lg->fds[i].until_ms;
        if (!done && ready[i].revents) {
            char buf[4096];
            ssize_t r = recv(lg->fds[i].fd, buf, sizeof buf, MSG_DONTWAIT);
            done = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
        }
        if (done) close(lg->fds[i].fd);
        else lg->fds[k++] = lg->fds[i];
    }
    lg->n = k;
}

/* Answers a connection over the limits with a 503 (Retry-After: 1) and lingers it. */
static void refuse(linger_list *lg, int fd, const char *why, int limit) {
    char body[160], msg[512];
    snprintf(body, sizeof body, "{\"error\":\"%s (limit %d); retry shortly\"}", why, limit);
    int n = snprintf(msg, sizeof msg,
                     "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nRetry-After: 1\r\nCache-Control: no-store\r\n"
                     "X-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n%s",
                     strlen(body), body);
    if (send(fd, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* the client is gone: close below */
    }
    shutdown(fd, SHUT_WR);
    linger_add(lg, fd);
}

/* Accepts what is pending on lfd (at most a batch, so reaping stays timely): each
 * connection within the limits goes to the daemon, the others get a 503. Returns -1
 * when out of file descriptors (the caller waits before accepting again). */
static int accept_pending(int lfd, struct MHD_Daemon *d, conn_table *ct, linger_list *lg) {
    for (int k = 0; k < 64; k++) {
        struct sockaddr_storage addr;
        socklen_t len = sizeof addr;
        int fd = accept(lfd, (struct sockaddr *)&addr, &len);
        if (fd >= 0) {
            fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
            fcntl(fd, F_SETFD, FD_CLOEXEC);
        }
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) return -1;
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return 0; /* EAGAIN: nothing more pending */
        }
        const char *why;
        conn_slot *c = conn_open(ct, fd, &addr, len, &why);
        if (!c) {
            refuse(lg, fd, why, !strcmp(why, "too many open connections") ? ct->n_slots : ct->per_ip);
            continue;
        }
        if (MHD_add_connection(d, fd, (const struct sockaddr *)&addr, len) != MHD_YES) {
            pthread_mutex_lock(&ct->mu); /* libmicrohttpd closed fd (and may have freed the slot) */
            if (c->fd == fd) conn_close_locked(ct, c);
            pthread_mutex_unlock(&ct->mu);
        }
    }
    return 0;
}

/* Serves until a signal arrives on sig_fd: accepts on lfd, lingers refused
 * connections and shuts down overdue ones. Returns the signal number. */
static int accept_loop(int lfd, int sig_fd, struct MHD_Daemon *d, conn_table *ct) {
    linger_list lg = {.n = 0};
    int64_t paused_until = 0; /* out of file descriptors: stop accepting for a moment */
    unsigned char sig = 0;
    for (;;) {
        struct pollfd pf[2 + SRV_LINGER_MAX];
        int64_t now = now_ms();
        pf[0] = (struct pollfd){.fd = sig_fd, .events = POLLIN};
        pf[1] = (struct pollfd){.fd = now >= paused_until ? lfd : -1, .events = POLLIN};
        for (int i = 0; i < lg.n; i++) pf[2 + i] = (struct pollfd){.fd = lg.fds[i].fd, .events = POLLIN};
        int r = poll(pf, (nfds_t)(2 + lg.n), SRV_REAP_INTERVAL_MS);
        if (r < 0) {
            if (errno != EINTR) break;
            for (int i = 0; i < 2 + lg.n; i++) pf[i].revents = 0;
        }
        if ((pf[0].revents & POLLIN) && read(sig_fd, &sig, 1) == 1) break;
        linger_step(&lg, pf + 2); /* before accepting, which may add to lg */
        if ((pf[1].revents & POLLIN) && accept_pending(lfd, d, ct, &lg)) paused_until = now_ms() + SRV_REAP_INTERVAL_MS;
        conn_reap(ct);
    }
    for (int i = 0; i < lg.n; i++) close(lg.fds[i].fd);
    return sig;
}

/* A listening socket on ai's address (SO_REUSEADDR, non-blocking), or -1 with errno. */
static int listen_on(const struct addrinfo *ai) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

as_status srv_serve(const srv_options *o, as_error *err) {
    as_status st = AS_OK;
    srv_state s = {0};
    struct addrinfo *ai = NULL;
    struct MHD_Daemon *d = NULL;
    conn_table ct = {.slots = NULL};
    int cache_ready = 0, lfd = -1, ct_ready = 0;
    if (o->n_models < (o->n_attention_files > 0 ? 0 : 1) || o->n_models > SRV_MAX_MODELS)
        return as_err_set(err, AS_ERR_INPUT, "serve: give between 1 and %d --model folders (or --attention files)",
                          SRV_MAX_MODELS);
    /* OpenBLAS at one thread for the whole server: every route brings its own threads (a
       forward's worker pool, a tile's --threads), and OpenBLAS's threads nested inside those
       wait on each other: a whole-head tile of 2048 tokens took 0.7-0.9 s with them and 24-38
       ms without, on 2 loaded cores (bench/RESULTS.md, "Long context targets"). */
    openblas_set_num_threads(1);
    if ((st = srv_npz_runs_init(o->attention_files, o->n_attention_files, &s.npz, err))) goto cleanup;
    s.models = calloc((size_t)(o->n_models > 0 ? o->n_models : 1), sizeof *s.models);
    if (!s.models) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int i = 0; i < o->n_models; i++) {
        if ((st = as_model_load(o->model_dirs[i], &s.models[i].m, err))) goto cleanup;
        s.n_models++;
        if ((st = as_model_set_precision(s.models[i].m, o->precision, err))) goto cleanup;
        model_name(&s, i, o->model_dirs[i]);
    }
    if (o->db_path && (st = srv_db_open(o->db_path, &s.db, err))) goto cleanup;
    if (o->n_import_dirs && !s.db) {
        st = as_err_set(err, AS_ERR_INPUT, "serve: --import-dir needs --db");
        goto cleanup;
    }
    if ((st = srv_imports_init(o->import_dirs, o->n_import_dirs, &s.imports, err))) goto cleanup;
    srv_cache_init(&s.cache, o->max_cached_runs > 0 ? o->max_cached_runs : SRV_MAX_CACHED_RUNS,
                   o->max_cache_bytes > 0 ? o->max_cache_bytes : SRV_MAX_CACHE_BYTES);
    cache_ready = 1;
    pthread_mutex_init(&s.admit_mu, NULL);
    pthread_mutex_init(&s.fwd_mu, NULL);
    s.max_active = o->max_active_runs > 0 ? o->max_active_runs : SRV_MAX_ACTIVE_RUNS;
    s.threads = o->threads;
    s.test_delay_ms = o->test_delay_ms;

    const char *host = o->host ? o->host : "127.0.0.1";
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int gai = getaddrinfo(host, port, &hints, &ai);
    if (gai || !ai) {
        st = as_err_set(err, AS_ERR_INPUT, "serve: --host %s: %s", host, gai_strerror(gai));
        goto cleanup;
    }
    struct in6_addr host_ip;
    srv_ctx sc = {.st = &s, .ct = &ct, .loopback = addr_is_loopback(ai->ai_addr),
                  .host_name = inet_pton(AF_INET, host, &host_ip) == 1 || inet_pton(AF_INET6, host, &host_ip) == 1
                                   ? NULL : host};
    if ((st = csp_make(o->frame_ancestors, sc.csp, sizeof sc.csp, err))) goto cleanup;
    if (!sc.loopback)
        fprintf(stderr, "attnscope: warning: serving on %s, which is not a loopback address: anyone who can "
                        "reach it can use this server (there is no authentication)\n", host);

    ct.n_slots = o->max_connections > 0 ? o->max_connections : SRV_MAX_CONNECTIONS;
    ct.per_ip = sc.loopback ? 0 : (ct.n_slots / 4 > 0 ? ct.n_slots / 4 : 1);
    ct.timeout_ms = 1000 * (o->request_timeout_s > 0 ? o->request_timeout_s : SRV_REQUEST_TIMEOUT_S);
    ct.slots = calloc((size_t)ct.n_slots, sizeof *ct.slots);
    if (!ct.slots) {
        st = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < ct.n_slots; i++) ct.slots[i].fd = -1;
    pthread_mutex_init(&ct.mu, NULL);
    ct_ready = 1;

    /* Signals: a handler (run by whichever thread gets the signal, including the
     * math library's threads) writes the signal number to a pipe that the accept
     * loop reads, so a second signal during shutdown is harmless too. */
    if (pipe(g_sig_pipe)) {
        st = as_err_set(err, AS_ERR_INTERNAL, "serve: pipe: %s", strerror(errno));
        goto cleanup;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    lfd = listen_on(ai);
    /* The accept loop hands connections over (MHD_add_connection); libmicrohttpd's own
     * limit is a backstop above ours, as it counts a closed connection until its
     * thread is joined. */
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    if (lfd >= 0)
        d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, &sc,
                             MHD_OPTION_CONNECTION_LIMIT, (unsigned)(2 * ct.n_slots),
                             MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SRV_CONNECTION_TIMEOUT_S,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)SRV_CONNECTION_MEMORY,
                             MHD_OPTION_NOTIFY_COMPLETED, on_completed, &ct,
                             MHD_OPTION_NOTIFY_CONNECTION, on_connection, &ct,
                             MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                             MHD_OPTION_END);
    if (!d) {
        st = as_err_set(err, AS_ERR_INTERNAL, "serve: cannot listen on %s port %d (in use, or not an address of this machine?)",
                        host, o->port);
        goto cleanup;
    }
    struct sockaddr_storage bound_addr;
    socklen_t bound_len = sizeof bound_addr;
    int bound = o->port;
    if (!getsockname(lfd, (struct sockaddr *)&bound_addr, &bound_len))
        bound = ntohs(bound_addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound_addr)->sin6_port
                                                       : ((struct sockaddr_in *)&bound_addr)->sin_port);
    int v6 = ai->ai_family == AF_INET6;
    printf("attnscope serve: listening on http://%s%s%s:%d/\n", v6 ? "[" : "", host, v6 ? "]" : "", bound);
    for (int i = 0; i < s.n_models; i++) {
        const as_config *c = as_model_config(s.models[i].m);
        printf("attnscope serve: model %s (%s, %d layers x %d heads, up to %d tokens)\n", s.models[i].name,
               as_arch_name(c->arch), c->n_layer, c->n_head, as_model_max_tokens(s.models[i].m));
    }
    for (int i = 0; i < s.npz.n; i++) {
        const as_run *r = s.npz.runs[i].a.run;
        printf("attnscope serve: imported attention %s (%d layers x %d heads, %d tokens%s): run %s\n",
               s.npz.runs[i].name, r->L, r->H, r->T, s.npz.runs[i].a.neuron ? ", queries and keys" : "",
               s.npz.runs[i].entry.id);
    }
    if (s.db) printf("attnscope serve: analysis database %s (GET /api/v1/db/runs)\n", srv_db_name(s.db));
    if (s.db) db_api_print_imports(&s, stdout);
    fflush(stdout);
    int sig = accept_loop(lfd, g_sig_pipe[0], d, &ct);
    signal(SIGINT, SIG_DFL); /* from now on a repeated signal ends the process at once */
    signal(SIGTERM, SIG_DFL);
    printf("attnscope serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    fflush(stdout);
cleanup:
    if (lfd >= 0) close(lfd);
    if (d) MHD_stop_daemon(d);
    if (ct_ready) pthread_mutex_destroy(&ct.mu);
    free(ct.slots);
    if (g_sig_pipe[0] >= 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        close(g_sig_pipe[0]);
        close(g_sig_pipe[1]);
        g_sig_pipe[0] = g_sig_pipe[1] = -1;
    }
    if (ai) freeaddrinfo(ai);
    if (cache_ready) {
        srv_cache_free(&s.cache);
        pthread_mutex_destroy(&s.admit_mu);
        pthread_mutex_destroy(&s.fwd_mu);
    }
    for (int i = 0; i < s.n_models; i++) as_model_free(s.models[i].m);
    free(s.models);
    srv_db_free(s.db);
    srv_imports_free(&s.imports);
    srv_npz_runs_free(&s.npz);
    return st;
}
