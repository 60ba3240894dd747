/* safetensors.h — read-only, mmap'd access to safetensors files and to sharded
 * checkpoints (model.safetensors.index.json). Validates everything read from the
 * file: header length against the file size and ST_MAX_HEADER_BYTES, the tensor count
 * against ST_MAX_FILE_TENSORS (counted before the JSON is parsed), JSON syntax,
 * dtype names, shape x dtype size == byte span, offsets in range, non-overlapping.
 * It does not convert dtypes (see model loading) and never writes.
 */
#ifndef AS_SAFETENSORS_H
#define AS_SAFETENSORS_H

#include "core/core.h"

/* Limits on what a file may declare, checked before anything is parsed. Parsing a
 * header costs about 1.2 KB of memory per tensor entry (jansson), so the per-file
 * limits bound the peak near 160 MB. Real checkpoints need far less: a Llama-70B shard
 * header is under 100 KB, DeepSeek-V3 lists about 91,000 tensors over 163 shards. */
#define ST_MAX_HEADER_BYTES (16u * 1024u * 1024u) /* one file's JSON header */
#define ST_MAX_FILE_TENSORS 131072                /* tensors in one file */
#define ST_MAX_INDEX_BYTES (64u * 1024u * 1024u)  /* model.safetensors.index.json */
#define ST_MAX_DIMS 8
#define ST_MAX_TENSORS 1000000                    /* tensors of a folder, all shards */
#define ST_MAX_SHARDS 4096

typedef struct {
    const char *name;          /* owned by the st_file / st_set */
    as_dtype dtype;            /* DTYPE_OTHER for dtypes we parse but cannot compute with */
    char dtype_name[8];        /* as written in the header: F32, F16, BF16, I64, ... */
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t n_elems;
    const void *data;          /* borrowed from the mapping; valid until the file is freed */
    size_t nbytes;
} st_tensor;

typedef struct st_file st_file;

/* mmaps path read-only and parses its header. *out is owned by the caller
 * (st_file_free). Errors: AS_ERR_INPUT naming the path and what is wrong (including
 * "not a regular file": a FIFO or a device is refused without being waited on). */
as_status st_file_open(const char *path, st_file **out, as_error *err);
void st_file_free(st_file *f);
int st_file_count(const st_file *f);
const st_tensor *st_file_tensor(const st_file *f, int i); /* in name order; NULL out of range */
const st_tensor *st_file_find(const st_file *f, const char *name);
/* The __metadata__ object's value for key, or NULL. Borrowed. */
const char *st_file_metadata(const st_file *f, const char *key);

/* A model folder's weights: DIR/model.safetensors, or DIR/model.safetensors.index.json
 * and the shards it names (shard names must be plain file names inside DIR). */
typedef struct st_set st_set;
as_status st_set_open_dir(const char *dir, st_set **out, as_error *err);
void st_set_free(st_set *s);
/* Finds a tensor by exact name across shards; NULL when absent. Borrowed. */
const st_tensor *st_set_find(const st_set *s, const char *name);
int st_set_count(const st_set *s);
const st_tensor *st_set_tensor(const st_set *s, int i); /* all shards, in name order */
/* Of the set's mapped files: bytes resident in memory (*resident) and of those, bytes
 * mapped by 2 MiB pages (*huge), read from /proc/self/smaps. Both 0 where smaps cannot
 * be read (not Linux, /proc not mounted). */
void st_set_pages(const st_set *s, size_t *resident, size_t *huge);
/* Gives back the whole pages inside [p, p + bytes) of a tensor's data (madvise
 * MADV_DONTNEED on the read-only private mapping: nothing is lost, the next read maps them
 * again from the page cache or the file), after a copy has replaced them for the hot path. */
void st_release(const void *p, size_t bytes);
size_t st_dtype_size(as_dtype t); /* 4, 2, 2, 8, 4; 0 for DTYPE_OTHER */
/* Element size of a safetensors dtype named as in a header (F32, BF16, U8, F8_E4M3, ...);
 * 0 when name is not a fixed-width safetensors dtype. */
size_t st_dtype_name_size(const char *name);

/* 1 when t->data is aligned to its element size (st_dtype_name_size of dtype_name).
 * HF writers pad the header to 8 bytes and order tensors so this holds, but a valid
 * file need not: callers that read data as float / int32 must check, or memcpy. */
int st_tensor_aligned(const st_tensor *t);

/* Writes a safetensors file (used by training and tests). tensors[i].data is read;
 * names are written in the order given (the header is sorted as HF does not require
 * any order); data is contiguous in that order with no padding (the format allows no
 * holes), so list tensors by decreasing element size to keep every tensor aligned.
 * The header is padded with spaces to a multiple of 8 bytes. Errors: AS_ERR_INTERNAL
 * for I/O failures; AS_ERR_INPUT for a repeated name, an unknown dtype, a negative
 * shape or missing data. */
as_status st_write(const char *path, const st_tensor *tensors, int n, as_error *err);

#endif
