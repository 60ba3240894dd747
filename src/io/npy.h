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
 * (io/npz.h writes). The file-level reader is declared in include/attnscope/npy.h (the
 * tools' API); this header adds the in-memory parsers the library uses.
 */
#ifndef AS_NPY_H
#define AS_NPY_H

#include "attnscope/npy.h" /* npy_array, npy_read_f32, npy_array_free, NPYR_MAX_* */
#include "core/core.h"

/* Bytes that always hold a .npy file's magic, version, header length and header. */
#define NPYR_MAX_PREFIX (12 + NPYR_MAX_HEADER)

/* Parses an in-memory .npy image; name is used in messages. Data is copied. */
as_status npy_parse_f32(const char *name, const uint8_t *buf, size_t len, npy_array *out, as_error *err);
/* Parses only the header of the .npy image buf (len may stop after the header):
 * out->ndim, shape and n are set, out->data stays NULL, *data_off is where the data
 * start. The data length is not checked (callers compare it with 4 x n). */
as_status npy_parse_header(const char *name, const uint8_t *buf, size_t len, npy_array *out, size_t *data_off,
                           as_error *err);
/* Longest dtype string kept by npy_parse_header_descr (with its NUL), and the longest
 * fixed-width string dtype ('<U n' or '|S n') npy_descr_itemsize accepts. */
#define NPYR_MAX_DESCR 32
#define NPYR_MAX_STR 4096
/* Like npy_parse_header, for any dtype: the header's 'descr' is copied into descr as
 * written and not checked (npy_descr_itemsize tells the ones with a known size). */
as_status npy_parse_header_descr(const char *name, const uint8_t *buf, size_t len, npy_array *out,
                                 size_t *data_off, char descr[NPYR_MAX_DESCR], as_error *err);
/* Bytes per element of a little-endian numeric dtype ('<f4', '<f2', '<i8', '|b1', ...) or
 * of a fixed-width string dtype ('<U n': 4n, '|S n': n, n <= NPYR_MAX_STR); 0 for any
 * other (big-endian, objects, structured dtypes). */
size_t npy_descr_itemsize(const char *descr);
/* Reads only the header of the file path (at most NPYR_MAX_PREFIX bytes) and checks
 * the file's data length against the shape; out->data stays NULL. */
as_status npy_read_header(const char *path, npy_array *out, as_error *err);

#endif
