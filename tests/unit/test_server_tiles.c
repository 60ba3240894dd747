/* test_server_tiles.c — admission limits of GET /api/v1/runs/{id}/tile with the real
 * server, on a random Llama of 33 layers x 32 heads (1,056 heads; written by
 * bench/make_llama_checkpoint.py) and a 128-token stats,qkv run:
 *  - layers=a-b&heads=c-d returns the same tile of every head of the block, tensors
 *    (layers, heads, Pr, Pc), each equal (bit for bit) to that head's own tile request;
 *  - more than SRV_TILE_MAX_PER_REQUEST (1,024) tiles, or more than
 *    SRV_TILE_MAX_RESPONSE_BYTES of cells, is a 413 with a one-line JSON error, and
 *    mixing layer/head with layers/heads a 400;
 *  - six 1,024-tile requests sent at once: each is answered 200 or 429 (with
 *    Retry-After), at least one of each, never more than SRV_TILE_MAX_ACTIVE (2) computing;
 *    once they are done a request is admitted again.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "server_harness.h"

#define NL 33
#define NH 32
#define T 128

static server S;
static char g_dir[64];
static char g_run[32];

/* the harness's helpers this test does not call */
__attribute__((unused)) static void harness_unused(void) { (void)header_has; }

static int setup(void **state) {
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/as_tiles_XXXXXX");
    if (!mkdtemp(g_dir)) return -1;
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 '%s/bench/make_llama_checkpoint.py' '%s/many' --layers %d --width 128 --heads %d "
             "--kv-heads %d --ff 64 --vocab 64 --positions 1024 --dtype f32 --seed 3 >/dev/null",
             AS_SOURCE_DIR, g_dir, NL, NH, NH);
    if (system(cmd)) {
        fprintf(stderr, "could not write the model: %s\n", cmd);
        return -1;
    }
    char model[128];
    snprintf(model, sizeof model, "%s/many", g_dir);
    const char *args[] = {"--model", model, "--threads", "1", NULL};
    if (server_start_or_report(&S, args)) return -1;
    /* the run: T ids, q and k kept (no T x T) */
    char body[2048];
    size_t n = (size_t)snprintf(body, sizeof body, "{\"model\":\"many\",\"capture\":\"stats,qkv\",\"ids\":[");
    for (int i = 0; i < T; i++) n += (size_t)snprintf(body + n, sizeof body - n, i ? ",%d" : "%d", (i * 7 + 3) % 50);
    snprintf(body + n, sizeof body - n, "]}");
    resp r;
    post(S.port, "/api/v1/run", body, &r);
    if (r.status != 200) {
        fprintf(stderr, "POST /run: %d %s\n", r.status, r.body ? (char *)r.body : "");
        resp_free(&r);
        return -1;
    }
    json_t *j = body_json(&r);
    snprintf(g_run, sizeof g_run, "%s", json_string_value(json_object_get(j, "id")));
    json_decref(j);
    resp_free(&r);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    int rc = server_stop_report(&S);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd)) rc = -1;
    return rc ? -1 : 0;
}

/* GET .../tile?query into r. */
static void get_tile(const char *query, resp *r) {
    char path[256];
    snprintf(path, sizeof path, "/api/v1/runs/%s/tile?%s", g_run, query);
    get(S.port, path, r);
}

static void test_block_equals_single(void **state) {
    (void)state;
    resp r;
    get_tile("layers=3-5&heads=10-13&n=8&rows=5-100&cols=0-127", &r);
    assert_int_equal(r.status, 200);
    tb t;
    tb_parse(&r, &t);
    json_t *meta = json_object_get(t.hdr, "meta");
    assert_int_equal(json_integer_value(json_array_get(json_object_get(meta, "layers"), 1)), 5);
    assert_int_equal(json_integer_value(json_array_get(json_object_get(meta, "heads"), 0)), 10);
    const char *names[2] = {"max", "mean"};
    for (int k = 0; k < 2; k++) {
        json_t *x = tb_tensor(&t, names[k]), *sh = json_object_get(x, "shape");
        assert_int_equal(json_integer_value(json_array_get(sh, 0)), 3);
        assert_int_equal(json_integer_value(json_array_get(sh, 1)), 4);
        assert_int_equal(json_integer_value(json_array_get(sh, 2)), 8);
        assert_int_equal(json_integer_value(json_array_get(sh, 3)), 8);
    }
    int diffs = 0;
    for (int l = 0; l < 3; l++)
        for (int h = 0; h < 4; h++) {
            char q[128];
            snprintf(q, sizeof q, "layer=%d&head=%d&n=8&rows=5-100&cols=0-127", 3 + l, 10 + h);
            resp one;
            get_tile(q, &one);
            assert_int_equal(one.status, 200);
            tb u;
            tb_parse(&one, &u);
            for (int k = 0; k < 2; k++) {
                json_t *x = tb_tensor(&t, names[k]), *y = tb_tensor(&u, names[k]);
                for (size_t c = 0; c < 64; c++)
                    diffs += tb_at(&t, x, (size_t)(l * 4 + h) * 64 + c) != tb_at(&u, y, c);
            }
            json_decref(u.hdr);
            resp_free(&one);
        }
    printf("block of 3 x 4 heads: %d cells differ from the single-head tiles\n", diffs);
    assert_int_equal(diffs, 0);
    json_decref(t.hdr);
    resp_free(&r);
}

static void test_limits(void **state) {
    (void)state;
    resp r;
    get_tile("layers=0-32&heads=0-31&n=4", &r); /* 1,056 tiles */
    expect_error(&r, 413);
    assert_non_null(strstr((char *)r.body, "SRV_TILE_MAX_PER_REQUEST"));
    resp_free(&r);
    get_tile("layers=0-31&heads=0-31&n=64", &r); /* 1,024 x 64 x 64 x 2 x 4 bytes = 32 MiB */
    expect_error(&r, 413);
    assert_non_null(strstr((char *)r.body, "SRV_TILE_MAX_RESPONSE_BYTES"));
    resp_free(&r);
    get_tile("layer=0&heads=0-3", &r);
    expect_error(&r, 400);
    resp_free(&r);
    get_tile("layers=0-40&heads=0-3", &r);
    expect_error(&r, 400);
    resp_free(&r);
    get_tile("layers=0-31&heads=0-31&n=16", &r); /* the model view: 1,024 heads, 2 MiB */
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

#define N_AT_ONCE 6

static void test_concurrency(void **state) {
    (void)state;
    int fd[N_AT_ONCE];
    char head[512];
    int n = snprintf(head, sizeof head,
                     "GET /api/v1/runs/%s/tile?layers=0-31&heads=0-31&n=16 HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                     "Connection: close\r\n\r\n",
                     g_run, S.port);
    for (int i = 0; i < N_AT_ONCE; i++) {
        fd[i] = connect_port(S.port);
        assert_true(fd[i] >= 0);
    }
    for (int i = 0; i < N_AT_ONCE; i++) send_all(fd[i], head, (size_t)n);
    int ok = 0, busy = 0;
    for (int i = 0; i < N_AT_ONCE; i++) {
        resp r;
        read_resp(fd[i], &r);
        close(fd[i]);
        if (r.status == 429) {
            expect_error(&r, 429);
            assert_non_null(strstr(r.head, "Retry-After: 1"));
            busy++;
        } else {
            assert_int_equal(r.status, 200);
            ok++;
        }
        resp_free(&r);
    }
    printf("%d requests at once: %d answered, %d refused with 429\n", N_AT_ONCE, ok, busy);
    assert_true(ok >= 1 && busy >= 1);
    resp r;
    get_tile("layers=0-31&heads=0-31&n=16", &r); /* the slots were given back */
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

int main(void) {
    if (binary_missing("test_server_tiles")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_equals_single),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_concurrency),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
