/* imports.h — `attnscope serve --db FILE --import-dir [RUN=]DIR`: the
 * per-sentence attention of runs written by `attnscope import --dir DIR`, read straight
 * from the folder's NNNN.attention.npy files (float32 [L, H, T, T], rows = queries), so
 * the dependency view, the attention graph and the overview's mini drawings work for
 * imported runs, which have no model to recompute attention with.
 *
 * A folder serves an imported run when the run id was given explicitly (RUN=DIR), or
 * when the run's corpus_digest equals the folder's digest: SHA-256 over the name (with
 * its NUL) and the bytes of every *.json file, in alphasort order, as `attnscope import`
 * computes it (an_import_digest, include/attnscope/analysis.h).
 * What it does not: write anything, read any file but DIR/<stored source>.json's
 * sibling .attention.npy, or trust that file: its size, shape [L, H, T, T] (T = the
 * stored token count) and values (finite, >= 0) are checked on every read.
 */
#ifndef AS_SRV_IMPORTS_H
#define AS_SRV_IMPORTS_H

#include "attnscope.h"
#include "attnscope/npy.h"

#define SRV_MAX_IMPORT_DIRS 16 /* --import-dir options */

typedef struct {
    char dir[1024];   /* the folder, as given */
    int64_t run;      /* explicit run id (RUN=DIR), 0 = match by digest */
    char digest[65];  /* corpus digest of the folder's *.json files */
} srv_import;

typedef struct {
    srv_import *dirs; /* (n) owned */
    int n;
} srv_imports;

/* Parses each spec ("DIR" or "RUN=DIR", RUN a positive decimal id), checks that DIR is a
 * folder and computes its digest. *out owned by the caller (srv_imports_free).
 * Errors: AS_ERR_INPUT naming the option or folder. */
as_status srv_imports_init(const char *const *specs, int n, srv_imports *out, as_error *err);
void srv_imports_free(srv_imports *im);

/* The folder that serves run id (explicit mapping first, then corpus_digest, which may
 * be NULL); -1 when none. */
int srv_imports_find(const srv_imports *im, int64_t run, const char *corpus_digest);

/* Reads the attention of the stored sentence whose source file is `source`
 * ("NNNN.json", a plain file name) from folder dir: DIR/NNNN.attention.npy, checked to
 * be float32 [L, H, T, T] with finite, non-negative values. *out owned by the caller
 * (npy_array_free). Errors: AS_ERR_INPUT naming the file and what is wrong. */
as_status srv_imports_read(const srv_import *dir, const char *source, int L, int H, int T, npy_array *out,
                           as_error *err);

#endif
