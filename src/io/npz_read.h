/* npz_read.h — reads float32 arrays out of .npz archives (ZIP files of NAME.npy entries,
 * as numpy.savez writes them STORED and numpy.savez_compressed writes them DEFLATED).
 *
 * What it does: validates the archive before trusting any offset in it (PKWARE
 * APPNOTE.TXT 6.3.x): the end-of-central-directory record (found at the end of the
 * file, comment length matching exactly), its ZIP64 locator and record when a field is
 * saturated, single-disk archives only, the central directory inside the file and
 * before the end record, at most NPZR_MAX_ENTRIES entries, every central header's
 * signature, name length (1..NPZR_MAX_NAME, no NUL, no duplicates), extra fields
 * (well-formed blocks; the ZIP64 block supplies saturated sizes / offset), no
 * encryption, method 0 (stored) or 8 (deflate, via zlib); the chosen entry's local
 * header (signature, same name and method, sizes equal to the central ones unless a
 * data descriptor is used), its data inside the file and before the central
 * directory, the uncompressed size against NPZR_MAX_ENTRY_BYTES and the compression
 * ratio against NPZR_MAX_RATIO, then the .npy header inside (io/npy.h) with its shape
 * against the declared size, all before the array is allocated; then the inflated
 * length and stream end, and the CRC-32.
 * Every error is AS_ERR_INPUT with one line naming the file (and the entry).
 * What it does not: write archives (io/npz.h does), multi-disk archives, encryption,
 * compression methods other than stored / deflate, dtypes other than '<f4' (npz_parse_raw
 * also reads other numbers and fixed-width strings, as bytes; never objects).
 */
#ifndef AS_NPZ_READ_H
#define AS_NPZ_READ_H

#include "io/npy.h"

#define NPZR_MAX_ENTRIES 4096
#define NPZR_MAX_NAME 1024
#define NPZR_MAX_ENTRY_BYTES (((size_t)NPYR_MAX_ELEMS) * 4 + NPYR_MAX_HEADER + 16)
#define NPZR_MAX_FILE (NPZR_MAX_ENTRY_BYTES + ((size_t)1 << 26))
/* A deflated entry may declare at most NPZR_MAX_RATIO uncompressed bytes per compressed
 * byte once it declares more than NPZR_RATIO_FREE_BYTES. Attention matrices compress
 * about 1.1:1 (softmax mantissas are noise), a few :1 with causal zeros, about 80:1 for
 * a batch padded to 100 times its tokens (zero key columns);
 * deflate's own ceiling is about 1032:1, which only runs of one byte value reach. */
#define NPZR_MAX_RATIO 128
#define NPZR_RATIO_FREE_BYTES ((uint64_t)1 << 20)

/* Parses the in-memory archive buf (len bytes; fname is used in messages) and reads the
 * float32 array `name` (the entry "name.npy") into *out (npy_array_free; left zeroed on
 * error). name == NULL picks the array named "attentions", else the only array of the
 * archive. The data is copied; buf is not kept. Errors: AS_ERR_INPUT naming fname. */
as_status npz_parse_f32(const char *fname, const uint8_t *buf, size_t len, const char *name, npy_array *out,
                        as_error *err);
/* One array of any dtype npy_descr_itemsize knows (io/npy.h): its shape in a (a.data
 * stays NULL), dtype string, bytes per element and the n x itemsize bytes as stored. */
typedef struct {
    npy_array a;
    char descr[NPYR_MAX_DESCR];
    size_t itemsize;
    uint8_t *bytes; /* (a.n * itemsize) owned */
    int absent;     /* the archive has no entry "name.npy" (not an error) */
} npz_raw;
/* Reads the entry "name.npy" of the in-memory archive buf with the same checks as
 * npz_parse_f32, any dtype with a known item size (a dtype that is not, such as a
 * pickled object array, is AS_ERR_INPUT). A missing entry sets out->absent and returns
 * AS_OK. *out owned by the caller (npz_raw_free). */
as_status npz_parse_raw(const char *fname, const uint8_t *buf, size_t len, const char *name, npz_raw *out,
                        as_error *err);
void npz_raw_free(npz_raw *r);
/* Maps the file path (at most NPZR_MAX_FILE bytes) read-only and calls npz_parse_f32. */
as_status npz_read_f32(const char *path, const char *name, npy_array *out, as_error *err);
/* Reads path as .npz when it starts with a ZIP signature ("PK\3\4", or "PK\5\6" for
 * an empty archive), else as .npy (io/npy.h); name is as for npz_parse_f32 and ignored
 * for .npy files. An empty file, or one that is neither, is reported as such. */
as_status npyz_read_f32(const char *path, const char *name, npy_array *out, as_error *err);
/* Like npyz_read_f32, but reads only the shape (out->data stays NULL): a .npy file's
 * header, or an .npz entry's sizes, compression ratio and the first NPYR_MAX_PREFIX
 * bytes it inflates to. Callers check the shape before paying for the data. */
as_status npyz_read_shape(const char *path, const char *name, npy_array *out, as_error *err);

#endif
