/* server.c — the HTTP side of `attnscope serve` on libmicrohttpd: binds (loopback by
 * default), reads request bodies up to SRV_MAX_BODY_BYTES, serves the embedded
 * assets by exact path (nothing is read from disk, so no path can escape), passes
 * /api/ requests to api.c, adds security headers, and shuts down cleanly on
 * SIGINT/SIGTERM. It does not implement the API itself.
 */
#include "server/api.h"
#include "server/assets.h"
#include "server/db_api.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct {
    char *body; /* (len) bytes, capacity cap */
    size_t len, cap;
    int too_big;
} req_ctx;

typedef struct {
    srv_state *st;
    int loopback; /* bound to a loopback address: Host headers must name loopback too */
} srv_ctx;

static const char *CSP = "default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; "
                         "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

static const char *query_lookup(void *con, const char *key) {
    return MHD_lookup_connection_value((struct MHD_Connection *)con, MHD_GET_ARGUMENT_KIND, key);
}

static enum MHD_Result send_response(struct MHD_Connection *con, srv_response *rs) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(rs->len, rs->body ? rs->body : (unsigned char *)"", rs->body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        free(rs->body);
        return MHD_NO;
    }
    rs->body = NULL; /* owned by r now */
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
    api_error(&rs, status, "%s", msg);
    return send_response(con, &rs);
}

static const srv_asset *find_asset(const char *path) {
    if (!strcmp(path, "/")) path = "/index.html";
    for (size_t i = 0; i < srv_n_assets; i++)
        if (!strcmp(srv_assets[i].path, path)) return &srv_assets[i];
    return NULL;
}

static enum MHD_Result send_asset(struct MHD_Connection *con, const srv_asset *a) {
    struct MHD_Response *r = MHD_create_response_from_buffer(a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", a->mime);
    /* Vite names bundles by content hash: those never change; index.html may. */
    MHD_add_response_header(r, "Cache-Control",
                            strncmp(a->path, "/assets/", 8) ? "no-cache" : "public, max-age=31536000, immutable");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy", CSP);
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

/* Host header names a loopback address (DNS-rebinding guard when bound to loopback). */
static int host_is_loopback(const char *h) {
    if (!h) return 1; /* HTTP/1.0 clients may omit it */
    char name[256];
    size_t n = strlen(h);
    if (n >= sizeof name) return 0;
    if (h[0] == '[') {
        const char *e = strchr(h, ']');
        if (!e) return 0;
        n = (size_t)(e - h - 1);
        memcpy(name, h + 1, n);
    } else {
        const char *c = strchr(h, ':');
        if (c) n = (size_t)(c - h);
        memcpy(name, h, n);
    }
    name[n] = 0;
    if (!strcasecmp(name, "localhost") || !strcmp(name, "::1")) return 1;
    struct in_addr a;
    return inet_pton(AF_INET, name, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
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
    if (rc->too_big) {
        char msg[96];
        snprintf(msg, sizeof msg, "request body over the limit of %u bytes", SRV_MAX_BODY_BYTES);
        return send_error(con, 413, msg);
    }
    if (sc->loopback && !host_is_loopback(MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Host")))
        return send_error(con, 403, "Host header must name a loopback address");
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
        api_error(&rs, 405, "method not allowed (allowed: GET, HEAD)");
        rs.allow = "GET, HEAD";
        return send_response(con, &rs);
    }
    return send_asset(con, a);
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

static void on_completed(void *cls, struct MHD_Connection *con, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
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

as_status srv_serve(const srv_options *o, as_error *err) {
    as_status st = AS_OK;
    srv_state s = {0};
    struct addrinfo *ai = NULL;
    struct MHD_Daemon *d = NULL;
    int cache_ready = 0;
    if (o->n_models < 1 || o->n_models > SRV_MAX_MODELS)
        return as_err_set(err, AS_ERR_INPUT, "serve: give between 1 and %d --model folders", SRV_MAX_MODELS);
    s.models = calloc((size_t)o->n_models, sizeof *s.models);
    if (!s.models) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int i = 0; i < o->n_models; i++) {
        if ((st = as_model_load(o->model_dirs[i], &s.models[i].m, err))) goto cleanup;
        s.n_models++;
        model_name(&s, i, o->model_dirs[i]);
    }
    if (o->db_path && (st = srv_db_open(o->db_path, &s.db, err))) goto cleanup; /* issue 6 */
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
    srv_ctx sc = {.st = &s, .loopback = addr_is_loopback(ai->ai_addr)};
    if (!sc.loopback)
        fprintf(stderr, "attnscope: warning: serving on %s, which is not a loopback address: anyone who can "
                        "reach it can use this server (there is no authentication)\n", host);

    /* Signals: a handler (run by whichever thread gets the signal, including the
     * math library's threads) writes the signal number to a pipe that this thread
     * reads, so a second signal during shutdown is harmless too. */
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

    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, on_request, &sc,
                         MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                         MHD_OPTION_CONNECTION_LIMIT, (unsigned)SRV_MAX_CONNECTIONS,
                         MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SRV_CONNECTION_TIMEOUT_S,
                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                         MHD_OPTION_UNESCAPE_CALLBACK, unescape, NULL,
                         MHD_OPTION_END);
    if (!d) {
        st = as_err_set(err, AS_ERR_INTERNAL, "serve: cannot listen on %s port %d (in use, or not an address of this machine?)",
                        host, o->port);
        goto cleanup;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    int bound = info ? info->port : o->port;
    int v6 = ai->ai_family == AF_INET6;
    printf("attnscope serve: listening on http://%s%s%s:%d/\n", v6 ? "[" : "", host, v6 ? "]" : "", bound);
    for (int i = 0; i < s.n_models; i++) {
        const as_config *c = as_model_config(s.models[i].m);
        printf("attnscope serve: model %s (%s, %d layers x %d heads, up to %d tokens)\n", s.models[i].name,
               as_arch_name(c->arch), c->n_layer, c->n_head, as_model_max_tokens(s.models[i].m));
    }
    if (s.db) printf("attnscope serve: analysis database %s (GET /api/v1/db/runs)\n", srv_db_name(s.db)); /* issue 6 */
    if (s.db) db_api_print_imports(&s, stdout);
    fflush(stdout);
    unsigned char sig = 0;
    while (read(g_sig_pipe[0], &sig, 1) < 0 && errno == EINTR) {
    }
    signal(SIGINT, SIG_DFL); /* from now on a repeated signal ends the process at once */
    signal(SIGTERM, SIG_DFL);
    printf("attnscope serve: %s received, shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    fflush(stdout);
cleanup:
    if (d) MHD_stop_daemon(d);
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
    srv_db_free(s.db); /* issue 6 */
    srv_imports_free(&s.imports);
    return st;
}
