/* npz_runs.h — `attnscope serve --attention FILE.npz`: attention computed elsewhere,
 * served as runs of their own (no model) to the head, model and neuron views.
 * The files are read and checked by as_attn_npz_read (include/attnscope/attn_npz.h:
 * the layout of `attnscope run --format npz`, or bertviz-style arrays), once, at
 * startup. Each becomes a run with an id like the cache's (16 hex digits, starting
 * "ff"), kept for the server's lifetime (never evicted); GET /api/v1/models lists them
 * under "imported".
 * What it does not: run a model, recompute attention, or write anything. Routes that need
 * a model (attribution, tiles, head statistics) are refused by api.c with 409.
 */
#ifndef AS_SRV_NPZ_RUNS_H
#define AS_SRV_NPZ_RUNS_H

#include "attnscope/attn_npz.h"
#include "cache.h" /* srv_entry */

#include <jansson.h>

#define SRV_MAX_NPZ_FILES 16 /* --attention options */

typedef struct srv_npz_run {
    char name[128];  /* the file's base name, made unique among the files */
    as_attn_npz a;   /* the arrays; a.run is lent to entry.run */
    json_t *tokens;  /* (T) the run's Token objects (docs/api/api.schema.json); owned */
    srv_entry entry; /* model -1, npz -> this, run = a.run (borrowed) */
} srv_npz_run;

typedef struct {
    srv_npz_run *runs; /* (n) owned */
    int n;
} srv_npz_runs;

/* Reads and checks each file (paths borrowed). *out owned by the caller
 * (srv_npz_runs_free, also after an error). Errors: AS_ERR_INPUT with one line naming
 * the file and what is wrong. */
as_status srv_npz_runs_init(const char *const *paths, int n, srv_npz_runs *out, as_error *err);
void srv_npz_runs_free(srv_npz_runs *r);
/* The imported run with this id, or NULL. Its entry lives as long as *r. */
srv_entry *srv_npz_find(const srv_npz_runs *r, const char *id);
/* The RunResponse of an imported run (docs/api/api.schema.json). New reference. */
json_t *srv_npz_run_json(const srv_npz_run *r);

#endif
