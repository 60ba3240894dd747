/* attnscope/npy.h — NumPy files: reading float32 .npy arrays, writing .npy files and
 * .npz archives. Part of the tools' API (see attnscope.h, "Library and tools"): the
 * CLI writes `attnscope run --format npz` with it, the server reads imported attention.
 *
 * Reading validates everything before trusting it (magic, version, header length
 * against the file size and NPYR_MAX_HEADER, the header dict, dtype '<f4', C order,
 * shape and element count, data length); errors are AS_ERR_INPUT naming the file.
 * Writing produces what numpy.load reads: an .npz is an uncompressed ZIP of .npy files,
 * as numpy.savez writes it; float32, int32, float16 and unicode string arrays.
 * What it does not: other dtypes on reading, Fortran order, object arrays, pickles.
 * The .npz reader (deflated archives too) and the parsing of in-memory images are
 * internal to the library (src/io/npz_read.h, src/io/npy.h).
 */
#ifndef ATTNSCOPE_NPY_H
#define ATTNSCOPE_NPY_H

#include "attnscope.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- reading float32 .npy (NEP 1 / numpy/lib/format.py) ---- */

#define NPYR_MAX_DIMS 8
#define NPYR_MAX_HEADER 65536
#define NPYR_MAX_ELEMS ((int64_t)1 << 31)

typedef struct {
    int ndim;
    int64_t shape[NPYR_MAX_DIMS];
    size_t n;    /* product of shape */
    float *data; /* (n) owned, C order */
} npy_array;

/* Reads path into *out (npy_array_free). Errors: AS_ERR_INPUT naming the file. */
as_status npy_read_f32(const char *path, npy_array *out, as_error *err);
void npy_array_free(npy_array *a);

/* ---- writing .npy and .npz ---- */

#define NPZ_MAX_ARRAYS 64
#define NPZ_MAX_STRING 4096 /* code points per string in npz_add_strings */

typedef enum { NPY_F32 = 0, NPY_I32, NPY_F16 } npy_type;

typedef struct npz_writer npz_writer;

/* Opens path for writing. Errors: AS_ERR_INPUT when the path cannot be created. */
as_status npz_open(const char *path, npz_writer **out, as_error *err);
/* Adds array `name` (stored as name.npy) of the given shape; data is copied out
 * immediately (not kept). Errors: AS_ERR_INPUT for a name that is empty, over 200
 * characters, contains '/', repeats an earlier one, or past NPZ_MAX_ARRAYS arrays;
 * AS_ERR_INTERNAL on write failure (then npz_close fails too). */
as_status npz_add(npz_writer *w, const char *name, npy_type type, const void *data, int ndim,
                  const int64_t *shape, as_error *err);
/* Adds a 1-d numpy unicode array ('<U{width}', UTF-32LE, width = the longest
 * string's code points) from n UTF-8 strings (NULL = ""; invalid bytes become
 * U+FFFD); numpy.load reads it without pickle. Copied out immediately.
 * Errors: AS_ERR_INPUT for a bad name or a string over NPZ_MAX_STRING characters. */
as_status npz_add_strings(npz_writer *w, const char *name, const char *const *strs, int n,
                          as_error *err);
/* Writes the central directory and closes; frees w in every case. */
as_status npz_close(npz_writer *w, as_error *err);
/* Frees without finishing (removes nothing; for error paths). npz_abort(NULL) no-op. */
void npz_abort(npz_writer *w);

/* Writes a single .npy file. */
as_status npy_write(const char *path, npy_type type, const void *data, int ndim,
                    const int64_t *shape, as_error *err);

#ifdef __cplusplus
}
#endif
#endif
