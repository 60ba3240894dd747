/* npz.h — writes .npy arrays and .npz archives (an uncompressed ZIP of .npy files,
 * as numpy.savez writes) readable by numpy.load. Little-endian float32 / int32 /
 * float16, and unicode string arrays. as_run_write_npz (attnscope.h, model/run_npz.c)
 * writes a run with it. It does not read npz (io/npz_read.h does).
 */
#ifndef AS_NPZ_H
#define AS_NPZ_H

#include "core/core.h"

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

/* Testing hook: when on, every entry and the end record use ZIP64 fields, as they
 * must for sizes or offsets >= 4 GiB (which this switches to automatically). */
void npz_force_zip64(npz_writer *w, int on);

#endif
