/* npy.h — reads float32 .npy files (NEP 1 / numpy/lib/format.py), as PyTorch and NumPy
 * users export attention with numpy.save.
 *
 * What it does: validates everything before trusting it: the magic "\x93NUMPY", the
 * version (1.0: u16 header length; 2.0 / 3.0: u32), the header length against the file
 * size and NPYR_MAX_HEADER, the header as a Python dict literal with exactly the keys
 * 'descr', 'fortran_order' and 'shape', descr '<f4' (little-endian float32),
 * fortran_order False, the shape (0..NPYR_MAX_DIMS non-negative dimensions, element
 * count <= NPYR_MAX_ELEMS without overflow), and data bytes == 4 x elements exactly.
 * Errors are AS_ERR_INPUT naming the file and what is wrong.
 * What it does not: other dtypes, Fortran order, object arrays, .npz archives, writing
 * (io/npz.h writes).
 */
#ifndef AS_NPY_H
#define AS_NPY_H

#include "core/core.h"

#define NPYR_MAX_DIMS 8
#define NPYR_MAX_HEADER 65536
#define NPYR_MAX_ELEMS ((int64_t)1 << 31)

typedef struct {
    int ndim;
    int64_t shape[NPYR_MAX_DIMS];
    size_t n;    /* product of shape */
    float *data; /* (n) owned, C order */
} npy_array;

/* Reads path into *out (npy_array_free). */
as_status npy_read_f32(const char *path, npy_array *out, as_error *err);
/* Parses an in-memory .npy image; name is used in messages. Data is copied. */
as_status npy_parse_f32(const char *name, const uint8_t *buf, size_t len, npy_array *out, as_error *err);
void npy_array_free(npy_array *a);

#endif
