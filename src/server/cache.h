/* cache.h — the server's run cache: finished runs (encoding + captured tensors)
 * keyed by (model, text, text_b, target: an encoder-decoder run's decoder input), bounded by SRV_MAX_CACHED_RUNS entries and
 * SRV_MAX_CACHE_BYTES captured bytes, least recently used evicted first. Entries
 * are reference counted so a request can keep reading one that another request
 * evicts; an evicted entry that is still referenced keeps counting against the
 * byte bound until it is freed. Responses streamed from a run (srv_cache_stream_begin)
 * are admitted only while the runs they hold fit the byte bound. Thread-safe (one
 * mutex). It does not run models or speak HTTP.
 */
#ifndef AS_SRV_CACHE_H
#define AS_SRV_CACHE_H

#include "attnscope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pthread.h>

#define SRV_MAX_CACHED_RUNS 16
#define SRV_MAX_CACHE_BYTES ((size_t)2 << 30) /* 2 GiB of captured tensors */
#define SRV_RUN_ID_LEN 16                     /* hex digits */
/* A run made from token ids is keyed by the text SRV_IDS_KEY followed by its ids
 * ("\xff" "ids:1,5,9"): not UTF-8, so no posted text is ever equal to it. */
#define SRV_IDS_KEY "\xff" "ids:"

/* The capture a POST /run asks for, part of the cache key: auto (dense up to
 * SRV_LONG_TOKENS tokens, else stats,qkv), dense, or stats,qkv. */
enum { SRV_CAPTURE_AUTO = 0, SRV_CAPTURE_DENSE, SRV_CAPTURE_STATS };

typedef struct srv_entry {
    char id[SRV_RUN_ID_LEN + 1]; /* hex, unique for the server's lifetime */
    int model;                   /* index into the server's models */
    char *text, *text_b;         /* owned; text_b may be NULL */
    char *target;                /* owned: an encoder-decoder run's target text (or SRV_IDS_KEY and
                                    its decoder input ids); NULL for other runs */
    as_encoding enc;             /* owned */
    as_encoding dec;             /* owned: the decoder's input ids of an encoder-decoder run (the
                                    target shifted right, or the ids as given); empty otherwise */
    as_run *run;                 /* owned: all layers and heads; CAP_ATTN | CAP_SCORES | CAP_QKV | CAP_STATS
                                    (dense), or CAP_STATS | CAP_QKV for a long input (no T x T) */
    int capture;                 /* part of the key: the capture the run was asked with
                                    (SRV_CAPTURE_*; 0, auto, for entries not made by POST /run) */
    int refs;                    /* cache's own reference + readers */
    int in_cache;
    int evicted;                 /* left the cache while referenced: counted in held_bytes */
    int streams;                 /* responses streaming from this run */
    void *maps;                  /* attribution maps computed on this run (server/maps_api.c), freed by
                                    maps_free with the entry; guarded by the server's forward lock */
    void (*maps_free)(void *maps);
    const struct srv_npz_run *npz; /* attention imported from an .npz (server/npz_runs.h; model -1,
                                      never in the cache), or an imported sentence of the analysis
                                      database (model -1, in the cache), or NULL for a model's run */
    void (*npz_free)(struct srv_npz_run *npz); /* set when the entry owns npz (an imported sentence):
                                                  frees it and the run it lends to run */
    struct srv_entry *prev, *next; /* LRU list, most recent first */
} srv_entry;

typedef struct {
    pthread_mutex_t mu;
    srv_entry *head, *tail;
    int n;
    size_t bytes;        /* entries in the cache */
    size_t held_bytes;   /* evicted entries still referenced */
    size_t stream_bytes; /* entries with at least one response streaming from them */
    size_t max_bytes;    /* bound on bytes + held_bytes, and on stream_bytes */
    int max_entries;
    uint64_t next_id;
} srv_cache;

void srv_cache_init(srv_cache *c, int max_entries, size_t max_bytes);
/* Frees every entry (no request may still hold one). */
void srv_cache_free(srv_cache *c);
/* Finds by key or id; returns a referenced entry (release with srv_cache_release) or NULL.
 * srv_cache_find looks for capture SRV_CAPTURE_AUTO, srv_cache_find_capture for any, both
 * for runs without a target; srv_cache_find_target for the target too (NULL: none). */
srv_entry *srv_cache_find(srv_cache *c, int model, const char *text, const char *text_b);
srv_entry *srv_cache_find_capture(srv_cache *c, int model, const char *text, const char *text_b, int capture);
srv_entry *srv_cache_find_target(srv_cache *c, int model, const char *text, const char *text_b,
                                 const char *target, int capture);
srv_entry *srv_cache_get(srv_cache *c, const char *id);
/* Takes ownership of e (its text, enc and run), assigns an id and inserts it, evicting
 * least recently used entries beyond the bounds. When an entry with the same key was
 * inserted meanwhile, e is freed and that one returned. Returns a referenced entry. */
srv_entry *srv_cache_put(srv_cache *c, srv_entry *e);
void srv_cache_release(srv_cache *c, srv_entry *e);
/* A response starts streaming from e (the caller holds a reference to e): takes a
 * reference of its own. Returns 1, or 0 when the runs already streamed plus e would
 * exceed max_bytes (one run is always admitted); the caller then answers 503. */
int srv_cache_stream_begin(srv_cache *c, srv_entry *e);
/* The response started by srv_cache_stream_begin ended: drops its reference. */
void srv_cache_stream_end(srv_cache *c, srv_entry *e);
/* 1 when e was run from token ids (its text is SRV_IDS_KEY...), else 0. */
static inline int srv_entry_from_ids(const srv_entry *e) {
    return e->text && !strncmp(e->text, SRV_IDS_KEY, sizeof SRV_IDS_KEY - 1);
}
/* Frees an entry that was never put (refs == 0). */
void srv_entry_free(srv_entry *e);

#endif
