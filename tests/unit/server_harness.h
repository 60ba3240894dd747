/* server_harness.h — shared by the server tests (test_server.c, test_server_db.c,
 * test_server_hostile.c): the binary and source paths (AS_BINARY, AS_SOURCE_DIR, set by
 * CMake), starting the real attnscope binary on an ephemeral loopback port, a minimal
 * HTTP client, and decoding of the binary tensor responses. Static functions: include
 * it once per test program, after the system and cmocka headers. */
#ifndef AS_SERVER_HARNESS_H
#define AS_SERVER_HARNESS_H

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif
#ifndef AS_BINARY
#define AS_BINARY "build/attnscope"
#endif
#define DEMO AS_SOURCE_DIR "/models/demo-bert"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- a server process -------------------------------------------------------- */

typedef struct {
    pid_t pid;
    int port;
    char err_path[256]; /* its stderr */
} server;

/* 0 when AS_BINARY is built; else names it on stderr for the test `name` and returns 1
 * (the test's exit status). */
static int binary_missing(const char *name) {
    if (!access(AS_BINARY, X_OK)) return 0;
    fprintf(stderr, "%s: %s is not built\n", name, AS_BINARY);
    return 1;
}

/* Starts AS_BINARY serve with extra args (NULL-terminated); returns 0 and fills s. */
static int server_start(server *s, const char *const *args) {
    memset(s, 0, sizeof *s);
    static int seq = 0;
    snprintf(s->err_path, sizeof s->err_path, "/tmp/attnscope_test_server_%d_%d.err", (int)getpid(), seq++);
    int out[2];
    if (pipe(out)) return -1;
    const char *argv[32];
    int n = 0;
    argv[n++] = AS_BINARY;
    argv[n++] = "serve";
    argv[n++] = "--port";
    argv[n++] = "0";
    argv[n++] = "--threads";
    argv[n++] = "2";
    for (int i = 0; args && args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(out[1], 1);
        FILE *e = fopen(s->err_path, "w");
        if (e) dup2(fileno(e), 2);
        close(out[0]);
        close(out[1]);
        execv(AS_BINARY, (char *const *)argv);
        _exit(127);
    }
    close(out[1]);
    s->pid = pid;
    char buf[4096];
    size_t len = 0;
    double t0 = (double)time(NULL);
    while (len < sizeof buf - 1 && time(NULL) - t0 < 60) {
        struct pollfd p = {.fd = out[0], .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0) continue;
        ssize_t r = read(out[0], buf + len, sizeof buf - 1 - len);
        if (r <= 0) break;
        len += (size_t)r;
        buf[len] = 0;
        const char *u = strstr(buf, "listening on http://"); /* ...http://HOST:PORT/ */
        const char *nl = u ? strchr(u, '\n') : NULL;
        if (nl) {
            const char *c = nl;
            while (c > u && *c != ':') c--;
            s->port = atoi(c + 1);
            break;
        }
    }
    /* Keep draining stdout in the background is unnecessary: the server prints
     * only at start and stop, which fits the pipe buffer. */
    close(out[0]);
    return s->port > 0 ? 0 : -1;
}

/* Sends sig and returns the exit status (or -1 when killed by a signal). */
static int server_stop(server *s, int sig) {
    if (!s->pid) return -1;
    kill(s->pid, sig);
    int st = 0;
    for (int i = 0; i < 600; i++) { /* up to 60 s (ASan builds stop slowly) */
        pid_t r = waitpid(s->pid, &st, WNOHANG);
        if (r == s->pid) break;
        sleep_ms(100);
        if (i == 599) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &st, 0);
        }
    }
    s->pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path);

/* server_start that prints the server's stderr when it cannot start; returns 0 or -1. */
static int server_start_or_report(server *s, const char *const *args) {
    if (!server_start(s, args)) return 0;
    char *e = slurp(s->err_path);
    fprintf(stderr, "could not start %s serve: %s\n", AS_BINARY, e);
    free(e);
    return -1;
}

/* Stops s with SIGTERM, prints its stderr when it did not exit 0, removes the stderr
 * file; returns the exit status. */
static int server_stop_report(server *s) {
    int rc = server_stop(s, SIGTERM);
    char *err = slurp(s->err_path);
    if (rc != 0) fprintf(stderr, "server exit status %d; stderr:\n%s\n", rc, err);
    free(err);
    unlink(s->err_path);
    return rc;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return strdup(buf);
}

/* ---- a minimal HTTP/1.1 client ----------------------------------------------- */

typedef struct {
    int status;
    char head[8192];   /* status line + headers */
    unsigned char *body;
    size_t len;
} resp;

static void resp_free(resp *r) {
    free(r->body);
    memset(r, 0, sizeof *r);
}

static int connect_port(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0) return; /* the server may close early (413) */
        c += w;
        n -= (size_t)w;
    }
}

/* Reads the whole response (the request said Connection: close). */
static void read_resp(int fd, resp *r) {
    memset(r, 0, sizeof *r);
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (len == cap) buf = realloc(buf, cap *= 2);
        ssize_t n = recv(fd, buf + len, cap - len, 0);
        if (n <= 0) break;
        len += (size_t)n;
    }
    unsigned char *sep = NULL;
    for (size_t i = 0; i + 3 < len; i++)
        if (!memcmp(buf + i, "\r\n\r\n", 4)) {
            sep = buf + i;
            break;
        }
    if (!sep) {
        free(buf);
        return;
    }
    size_t hl = (size_t)(sep - buf);
    if (hl >= sizeof r->head) hl = sizeof r->head - 1;
    memcpy(r->head, buf, hl);
    r->head[hl] = 0;
    sscanf(r->head, "HTTP/1.%*d %d", &r->status);
    r->len = len - (size_t)(sep + 4 - buf);
    r->body = malloc(r->len + 1);
    memcpy(r->body, sep + 4, r->len);
    r->body[r->len] = 0;
    free(buf);
}

/* One request; extra: additional header lines ("Name: value\r\n"...) or NULL. */
static void http(int port, const char *method, const char *path, const char *extra, const void *body,
                 size_t blen, resp *r) {
    int fd = connect_port(port);
    assert_true(fd >= 0);
    char head[4096];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n%s", method,
                     path, port, extra ? extra : "");
    if (body) n += snprintf(head + n, sizeof head - (size_t)n, "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
    n += snprintf(head + n, sizeof head - (size_t)n, "\r\n");
    send_all(fd, head, (size_t)n);
    if (body) send_all(fd, body, blen);
    read_resp(fd, r);
    close(fd);
}

static void get(int port, const char *path, resp *r) { http(port, "GET", path, NULL, NULL, 0, r); }
static void post(int port, const char *path, const char *json, resp *r) {
    http(port, "POST", path, NULL, json, strlen(json), r);
}

static json_t *body_json(const resp *r) {
    json_error_t e;
    json_t *j = json_loadb((const char *)r->body, r->len, 0, &e);
    if (!j) fprintf(stderr, "not JSON (%d): %.200s\n", r->status, r->body ? (const char *)r->body : "");
    assert_non_null(j);
    return j;
}

/* Asserts status and, for errors, a one-line JSON {"error": "..."} body. */
static void expect_error(const resp *r, int status) {
    if (r->status != status) fprintf(stderr, "expected %d, got %d: %.300s\n", status, r->status, r->body ? (char *)r->body : "");
    assert_int_equal(r->status, status);
    json_t *j = body_json(r);
    assert_true(json_is_string(json_object_get(j, "error")));
    assert_true(strlen(json_string_value(json_object_get(j, "error"))) > 0);
    assert_null(memchr(r->body, '\n', r->len));
    json_decref(j);
}

static int header_has(const resp *r, const char *needle) { return strstr(r->head, needle) != NULL; }

/* ---- binary tensors ------------------------------------------------------------- */

typedef struct {
    json_t *hdr;
    const unsigned char *data; /* after the header */
} tb;

static void tb_parse(const resp *r, tb *t) {
    assert_true(r->len >= 8);
    assert_memory_equal(r->body, "ASTB", 4);
    uint32_t n = (uint32_t)r->body[4] | (uint32_t)r->body[5] << 8 | (uint32_t)r->body[6] << 16 | (uint32_t)r->body[7] << 24;
    assert_true(8 + (size_t)n <= r->len);
    assert_int_equal((8 + n) % 8, 0);
    json_error_t e;
    t->hdr = json_loadb((const char *)r->body + 8, n, 0, &e);
    assert_non_null(t->hdr);
    t->data = r->body + 8 + n;
    json_t *ts = json_object_get(t->hdr, "tensors");
    size_t i;
    json_t *x;
    json_array_foreach(ts, i, x) {
        size_t off = (size_t)json_integer_value(json_object_get(x, "offset"));
        size_t nb = (size_t)json_integer_value(json_object_get(x, "nbytes"));
        assert_int_equal(off % 8, 0);
        assert_true(8 + n + off + nb <= r->len);
    }
}

static json_t *tb_tensor(const tb *t, const char *name) {
    json_t *ts = json_object_get(t->hdr, "tensors"), *x;
    size_t i;
    json_array_foreach(ts, i, x) if (!strcmp(json_string_value(json_object_get(x, "name")), name)) return x;
    fail_msg("tensor %s missing", name);
    return NULL;
}

static float f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? INFINITY : ldexpf(1.0f + (float)m / 1024.0f, e - 15);
    return s ? -v : v;
}

/* Element k of tensor x as float. */
static float tb_at(const tb *t, json_t *x, size_t k) {
    const unsigned char *p = t->data + json_integer_value(json_object_get(x, "offset"));
    const char *dt = json_string_value(json_object_get(x, "dtype"));
    if (!strcmp(dt, "f32")) {
        float v;
        memcpy(&v, p + 4 * k, 4);
        return v;
    }
    if (!strcmp(dt, "f16")) return f16((uint16_t)(p[2 * k] | p[2 * k + 1] << 8));
    return (float)(json_number_value(json_object_get(x, "zero")) + json_number_value(json_object_get(x, "scale")) * p[k]);
}

#endif
