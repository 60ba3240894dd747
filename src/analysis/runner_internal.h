/* runner_internal.h — what the files of the corpus runner share; not a public API
 * (callers use analysis/runner.h).
 *
 * The runner is split by concern:
 *   jsd_kernel.c   the vectorised mixture entropy of two attention rows (head-pair JSD)
 *   records.c      per-sentence records: scoring a sentence into one, writing one
 *   chunks.c       the runner context, chunk transactions, finding / resuming a run
 *   drive.c        the resumable loop, one process or MPI ranks
 *   finalize.c     an_finalize: the aggregate tables, one function per table
 *   digest.c       run identity: SHA-256 of model folders, corpora and import files
 *   analyze.c      an_analyze: sentences from a model and SST-2 / CoNLL-U corpora
 *   analyze_encdec.c  an_analyze_encdec: an encoder-decoder model on a parallel corpus
 *   import_read.c  the import formats: attention arrays, tokens, saliency, parses
 *   import.c       an_import_dir / an_import_files: sentences from imported files
 * What it does not: anything outside src/analysis uses it.
 */
#ifndef AS_RUNNER_INTERNAL_H
#define AS_RUNNER_INTERNAL_H

#include "analysis/runner.h"
#include "analysis/sha256.h"
#include "io/conllu.h"
#include "io/npy.h"

#include <dirent.h>
#include <jansson.h>

/* ---- jsd_kernel.c ------------------------------------------------------------------- */

/* Row stride of a query row's transposed attention for an_jsd_mix_rows: LH heads and 16
 * zero lanes, so a 16-head load from any head stays inside the row. */
#define AN_JSD_LD(LH) ((LH) + 16)
/* For one query row: at (T keys, ld = AN_JSD_LD(LH)) holds the attention of the LH heads
 * transposed (at[j * ld + h] = head h's weight on key j; columns LH .. ld - 1 zero). Writes
 * hm[b], for b = a + 1 .. LH - 1, the entropy in bits of the mixture (x + y) / 2 of head a's
 * row x and head b's row y: -sum m log2 m over entries m > 1e-30 (smaller ones, denormals
 * and non-positive values included, add less than 1e-27 each and are skipped). Float terms
 * with a vectorised log2, summed per 16 keys in float and across them in double: within
 * ~1e-6 of hd_jsd's double sums. */
void an_jsd_mix_rows(const float *at, int T, int ld, int a, int LH, double *hm);

/* ---- records.c ---------------------------------------------------------------------- */

/* A growable byte buffer holding one sentence record (see records.c). */
typedef struct {
    uint8_t *b;
    size_t n, cap;
    int oom;
} rec_buf;

#define AN_REC_MAGIC 0x31525341 /* "ASR1": first int32 of every record */

void an_rb_reset(rec_buf *r);
/* Frees r's buffer; r is then empty. */
void an_rb_free(rec_buf *r);
/* Makes room for need bytes in total; 0 (and r->oom set) when out of memory. */
int an_rb_reserve(rec_buf *r, size_t need);

/* ---- chunks.c: the runner context ---------------------------------------------------- */

typedef struct {
    store *st;
    int64_t run;
    int L, H, Dh, LH;
    size_t npairs;
    int chunk, explain, min_rel, progress;
    double t0;
    int n_total, n_start;
    /* chunk accumulators: acc = [rows | jsd sums (npairs) | concentration histogram (LH, Dh + 1)] */
    double *acc;
    size_t nacc;
    int chunk_first, chunk_n;
    /* relations seen in the current chunk */
    int nrel, caprel;
    char **rel;
    int64_t *rel_total;   /* (nrel) */
    int64_t *rel_correct; /* (nrel, 2, LH) */
    int64_t *rel_base;    /* (nrel, 2, HD_N_OFFSETS) */
    sqlite3_stmt *ins_sent, *ins_tok, *ins_word, *ins_sal, *ins_sh, *ins_topk;
    float *Wm;            /* (W, W) scratch */
    int capW;
    int *pred;            /* (W) scratch */
    uint8_t *has_piece;   /* (W) scratch */
    int rank, size;       /* MPI rank and number of ranks; 0 and 1 without MPI */
    int threads;          /* threads of the per-sentence scores (an_opts.threads; 0 = cores) */
    const double *induction; /* (LH) the induction probe's score per head (borrowed), or NULL: not probed */
    rec_buf rb;           /* the current sentence's record */
} an_ctx;

/* Sets up c for a run of L x H heads of Dh dims (c zeroed by the caller). st NULL: an
 * MPI worker, which builds records and writes nothing; else the row inserts are
 * prepared on st (borrowed). */
as_status an_ctx_init(an_ctx *c, store *st, int64_t run, int L, int H, int Dh, as_error *err);
void an_ctx_free(an_ctx *c);
/* Index of relation name among the current chunk's relations (added with zero counts
 * when new); -1 when out of memory. */
int an_rel_id(an_ctx *c, const char *name);
/* Writes the chunk's counts, accumulators and n_done, commits, and resets them. */
as_status an_chunk_commit(an_ctx *c, as_error *err);

/* What identifies a run (runs row) and its shape. */
typedef struct {
    const char *model_name, *model_digest, *arch, *corpus, *corpus_digest, *params;
    const char *source; /* runs.source: STORE_SOURCE_ANALYZE or STORE_SOURCE_IMPORT */
    int L, H, Dh, n_total;
} run_key;

/* Finds or creates the run; *n_done and *done tell where it stands. */
as_status an_run_begin(store *st, const run_key *k, int64_t *run, int *n_done, int *done, as_error *err);
/* Removes rows of sentences >= from. */
as_status an_run_truncate(store *st, int64_t run, int from, as_error *err);

/* ---- records.c: building and applying ---------------------------------------------- */

/* Scores sentence idx into the record r (reset first). Uses c's scratch, not its store. */
as_status an_rec_build(an_ctx *c, int idx, const an_sent *s, rec_buf *r, as_error *err);
/* Writes the record's rows and adds its accumulators to the open chunk. */
as_status an_rec_apply(an_ctx *c, const rec_buf *rbuf, as_error *err);
/* An error record (an MPI rank's failure, reported by rank 0). */
void an_rec_error(rec_buf *r, int idx, as_status code, const char *msg);

/* ---- drive.c ------------------------------------------------------------------------ */

/* Produces sentence idx into *s (and whatever it owns in user); release frees it. */
typedef as_status (*produce_fn)(void *user, int idx, int explain, an_sent *s, as_error *err);
typedef void (*release_fn)(void *user);

/* Finishes a run found by an_run_begin: nothing when done (prints "nothing to do"),
 * else drops stray rows, scores sentences n_done.. and finalizes. what names the
 * command in the summary line. */
as_status an_finish_run(an_ctx *c, store *st, int n_done, int done, produce_fn pf, release_fn rf, void *user,
                        const an_opts *o, const char *what, as_error *err);
/* MPI ranks > 0: score this rank's sentences from n_done and send them to rank 0. */
as_status an_drive_worker(an_ctx *c, int n_done, produce_fn produce, release_fn release, void *user, as_error *err);
/* This process's MPI rank and size (0 and 1 without MPI or outside mpirun). */
void an_mpi_rank(int *rank, int *size);
/* Agrees on every rank's setup status rc (returns the status this rank goes on with;
 * a worker whose failure rank 0 reports gets an empty message). */
as_status an_mpi_agree(int rank, int size, as_status rc, as_error *err);
/* Rank 0 broadcasts rc, n_done and done; the workers take them (an empty message
 * when rank 0 failed). */
as_status an_mpi_sync(int rank, int size, as_status rc, int *n_done, int *done, as_error *err);

/* ---- analyze_encdec.c ---------------------------------------------------------------- */

/* an_analyze with o->source / o->target: the three attention kinds' per-head statistics
 * and, with o->gold, each cross-attention head's AER into table encdec_heads. */
as_status an_analyze_encdec(const char *db_path, const an_opts *o, as_error *err);

/* ---- digest.c ----------------------------------------------------------------------- */

/* sha256 over (name, NUL, bytes) of the files of dir that filter accepts, in name order. */
as_status an_digest_dir(const char *dir, int (*filter)(const struct dirent *), char hex[65], as_error *err);
/* The files of a model folder that identify it (config, weights, tokenizer). */
int an_model_file_wanted(const struct dirent *d);
/* NAME.json / NAME.attention.npy files of an import folder. */
int an_import_json_wanted(const struct dirent *d);
int an_import_npy_wanted(const struct dirent *d);
/* sha256 over (tag, then index, NUL, bytes) of n files; paths NULL is skipped. */
as_status an_digest_files(sha256_ctx *c, const char *tag, const char *const *paths, int n, as_error *err);
/* s as the body of a JSON string (quotes and backslashes escaped, controls as '?'). */
void an_json_escape_path(char *out, size_t cap, const char *s);

/* ---- import_read.c ------------------------------------------------------------------ */

/* An import in progress and the current sentence's data (released by an_im_release). */
typedef struct {
    const char *dir;               /* an_import_dir: the folder */
    char **names;                  /* (n) json file names (an_import_dir) */
    const an_import_files_opts *f; /* an_import_files: the file lists */
    int n;
    int L, H;
    /* owned by the current sentence */
    json_t *j, *jsal, *jdep;
    cu_corpus cu;
    npy_array a;
    char **tok_text;
    uint8_t *kind;
    float *sal_all;
    int *word, *parent;
    char **rel, **form;
    char src[1200];
} im_user;

void an_im_release(void *u);
as_status an_im_load_json(const char *path, json_t **out, as_error *err);
as_status an_im_read_attention(im_user *u, const char *path, int T, as_error *err);
as_status an_im_check_values(const im_user *u, const char *path, int T, as_error *err);
as_status an_im_tokens(im_user *u, const char *jpath, json_t *toks, json_t *special, as_error *err);
as_status an_im_saliency(im_user *u, const char *jpath, json_t *sal, int T, an_sent *s, as_error *err);
as_status an_im_words_alloc(im_user *u, int T, int W, as_error *err);
as_status an_im_deps_json(im_user *u, const char *jpath, json_t *deps, int T, int *W_out, as_error *err);
void an_im_set_words(im_user *u, an_sent *s, int W);
int an_im_align_pieces(char *const *tok, const uint8_t *kind, int T, char *const *words, int W, int *word);
as_status an_im_sizes(const char *path, im_user *u, as_error *err);

#define IM_FAIL(...) do { rc = as_err_set(err, AS_ERR_INPUT, __VA_ARGS__); goto fail; } while (0)

#endif
