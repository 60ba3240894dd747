/* attnscope/npy.h — reading float32 .npy files (NEP 1 / numpy/lib/format.py), as
 * NumPy and PyTorch users save attention with numpy.save. Part of the tools' API (see
 * attnscope.h, "Library and tools"): the server reads imported runs' attention with it.
 *
 * Reading validates everything before trusting it (magic, version, header length
 * against the file size and NPYR_MAX_HEADER, the header dict, dtype '<f4', C order,
 * shape and element count, data length); errors are AS_ERR_INPUT naming the file.
 * What it does not: other dtypes, Fortran order, object arrays, pickles. Writing
 * (as_run_write_npz in attnscope.h; src/io/npz.h), the .npz reader and the parsing of
 * in-memory images are internal to the library (src/io/npz_read.h, src/io/npy.h).
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

#ifdef __cplusplus
}
#endif
#endif
