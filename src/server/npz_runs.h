/* npz_runs.h — `attnscope serve --attention FILE.npz`: attention computed elsewhere,
 * served as runs of their own (no model) to the head, model and neuron views.
 * The files are read and checked by as_attn_npz_read (include/attnscope/attn_npz.h:
 * the layout of `attnscope run --format npz`, or bertviz-style arrays), once, at
 * startup. Each becomes a run with an id like the cache's (16 hex digits, starting
 * "ff"), kept for the server's lifetime (never evicted); GET /api/v1/models lists them
 * under "imported". The imported sentences of an analysis database (`--db` with
 * `--import-dir`) are made the same way on request (srv_npz_run_sentence) and kept in the
 * run cache like a model's runs.
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
    srv_entry entry; /* model -1, npz -> this, run = a.run (borrowed); unused by an imported sentence */
    int64_t db_run;  /* an analysis database's imported sentence (srv_npz_run_sentence): its run id, */
    int sent;        /* and sentence index; 0 and 0 for an --attention file */
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
/* The RunResponse of an imported run (docs/api/api.schema.json) served under id (an
 * --attention file's entry.id, or the run cache's id of an imported sentence). New reference. */
json_t *srv_npz_run_json(const srv_npz_run *r, const char *id);

/* The same kind of run from an analysis database's imported sentence: attention att
 * (L, H, T, T) read from its import folder (copied) and the stored token texts tok (T,
 * copied); name names it in the views (e.g. "0003.attention.npy"). Served through the run
 * cache (db_api.c): the cache entry owns it and frees it with srv_npz_run_free, which
 * also frees a.run. Returns NULL with err set (AS_ERR_INPUT naming what is wrong). */
srv_npz_run *srv_npz_run_sentence(const char *name, int64_t db_run, int sent, const float *att, int L, int H, int T,
                                  const char *const *tok, as_error *err);
/* Frees a run made by srv_npz_run_sentence (NULL: no-op). */
void srv_npz_run_free(srv_npz_run *r);

#endif
