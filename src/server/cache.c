/* cache.c — LRU cache of finished runs (see cache.h). */
#include "cache.h"

#include <string.h>

void srv_cache_init(srv_cache *c, int max_entries, size_t max_bytes) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->max_entries = max_entries;
    c->max_bytes = max_bytes;
    c->next_id = 1;
}

void srv_entry_free(srv_entry *e) {
    if (!e) return;
    free(e->text);
    free(e->text_b);
    free(e->target);
    as_encoding_free(&e->enc);
    as_encoding_free(&e->dec);
    if (e->npz_free) { /* the imported sentence owns the run */
        e->npz_free((struct srv_npz_run *)e->npz);
        e->run = NULL;
    }
    as_run_free(e->run);
    if (e->maps) e->maps_free(e->maps);
    free(e);
}

/* The captured bytes of e's run, with an encoder-decoder run's decoder and cross-attention. */
static size_t entry_bytes(const srv_entry *e) {
    const as_run *r = e->run;
    if (!r) return 0;
    return r->bytes + (r->dec ? r->dec->bytes : 0) + (r->cross ? r->cross->bytes : 0);
}

static void unlink_entry(srv_cache *c, srv_entry *e) {
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    e->prev = e->next = NULL;
    e->in_cache = 0;
    c->n--;
    c->bytes -= entry_bytes(e);
}

static void push_front(srv_cache *c, srv_entry *e) {
    e->prev = NULL;
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
    e->in_cache = 1;
    c->n++;
    c->bytes += entry_bytes(e);
}

/* Drops a reference; frees the entry when it was the last. Caller holds mu. */
static void unref_locked(srv_cache *c, srv_entry *e) {
    if (--e->refs > 0) return;
    if (e->evicted) c->held_bytes -= entry_bytes(e);
    srv_entry_free(e);
}

void srv_cache_free(srv_cache *c) {
    srv_entry *e = c->head;
    while (e) {
        srv_entry *nx = e->next;
        srv_entry_free(e);
        e = nx;
    }
    pthread_mutex_destroy(&c->mu);
    memset(c, 0, sizeof *c);
}

static int same(const char *a, const char *b) {
    if (!a || !b) return a == b;
    return !strcmp(a, b);
}

static srv_entry *find_locked(srv_cache *c, int model, const char *text, const char *text_b, const char *target,
                              int capture) {
    for (srv_entry *e = c->head; e; e = e->next)
        if (e->model == model && e->capture == capture && same(e->text, text) && same(e->text_b, text_b) &&
            same(e->target, target))
            return e;
    return NULL;
}

/* Marks e most recently used and takes a reader reference. Caller holds mu. */
static srv_entry *touch_locked(srv_cache *c, srv_entry *e) {
    if (e != c->head) {
        unlink_entry(c, e);
        push_front(c, e);
    }
    e->refs++;
    return e;
}

srv_entry *srv_cache_find(srv_cache *c, int model, const char *text, const char *text_b) {
    return srv_cache_find_capture(c, model, text, text_b, SRV_CAPTURE_AUTO);
}

srv_entry *srv_cache_find_capture(srv_cache *c, int model, const char *text, const char *text_b, int capture) {
    return srv_cache_find_target(c, model, text, text_b, NULL, capture);
}

srv_entry *srv_cache_find_target(srv_cache *c, int model, const char *text, const char *text_b,
                                 const char *target, int capture) {
    pthread_mutex_lock(&c->mu);
    srv_entry *e = find_locked(c, model, text, text_b, target, capture);
    if (e) touch_locked(c, e);
    pthread_mutex_unlock(&c->mu);
    return e;
}

srv_entry *srv_cache_get(srv_cache *c, const char *id) {
    pthread_mutex_lock(&c->mu);
    srv_entry *e = c->head;
    while (e && strcmp(e->id, id)) e = e->next;
    if (e) touch_locked(c, e);
    pthread_mutex_unlock(&c->mu);
    return e;
}

srv_entry *srv_cache_put(srv_cache *c, srv_entry *e) {
    pthread_mutex_lock(&c->mu);
    srv_entry *old = find_locked(c, e->model, e->text, e->text_b, e->target, e->capture);
    if (old) {
        touch_locked(c, old);
        pthread_mutex_unlock(&c->mu);
        srv_entry_free(e);
        return old;
    }
    /* Ids mix a counter with the entry's address bits so they are not guessable
     * sequences across restarts; uniqueness comes from the counter. */
    uint64_t salt = (uint64_t)(uintptr_t)e * 0x9E3779B97F4A7C15ull;
    snprintf(e->id, sizeof e->id, "%06llx%010llx", (unsigned long long)(c->next_id++ & 0xffffff),
             (unsigned long long)(salt >> 24) & 0xffffffffffull);
    e->refs = 2; /* the cache's and the caller's */
    push_front(c, e);
    while (c->tail && c->tail != e && (c->n > c->max_entries || c->bytes + c->held_bytes > c->max_bytes)) {
        srv_entry *v = c->tail;
        unlink_entry(c, v);
        if (v->refs > 1) { /* a request still reads it: it stays in memory until released */
            v->evicted = 1;
            c->held_bytes += entry_bytes(v);
        }
        unref_locked(c, v);
    }
    pthread_mutex_unlock(&c->mu);
    return e;
}

void srv_cache_release(srv_cache *c, srv_entry *e) {
    if (!e) return;
    pthread_mutex_lock(&c->mu);
    unref_locked(c, e);
    pthread_mutex_unlock(&c->mu);
}

int srv_cache_stream_begin(srv_cache *c, srv_entry *e) {
    pthread_mutex_lock(&c->mu);
    size_t b = entry_bytes(e);
    int ok = e->streams > 0 || c->stream_bytes == 0 ||
             (c->stream_bytes <= c->max_bytes && b <= c->max_bytes - c->stream_bytes);
    if (ok) {
        if (e->streams++ == 0) c->stream_bytes += b;
        e->refs++;
    }
    pthread_mutex_unlock(&c->mu);
    return ok;
}

void srv_cache_stream_end(srv_cache *c, srv_entry *e) {
    pthread_mutex_lock(&c->mu);
    if (--e->streams == 0) c->stream_bytes -= entry_bytes(e);
    unref_locked(c, e);
    pthread_mutex_unlock(&c->mu);
}
