/* core.h — shared helpers for every module of the library: the public utilities of
 * attnscope.h (errors, warnings, checked allocation, UTF-8 cleaning, half precision,
 * timing) plus the internal ones below: the ASSERT macro, large-buffer reuse, UTF-8
 * sequence lengths, JSON big-integer rewriting, file reading.
 * It does not know about models, tokenizers or files' formats.
 */
#ifndef AS_CORE_H
#define AS_CORE_H

#include "attnscope.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Programmer bug: print file:line and abort. Never used for untrusted input. */
#define ASSERT(x) AS_ASSERT(x)

/* Like as_malloc_array, for large buffers filled once (captured tensors, forward
 * scratch): from 4 MiB up, aligned to 2 MiB and marked for transparent huge pages
 * (madvise; fewer first-touch page faults). Released with free(). */
void *as_malloc_large(size_t n, size_t size);
/* as_malloc_large, zeroed. */
void *as_calloc_large(size_t n, size_t size);
/* Reuse of large buffers between forwards (first touch of fresh pages costs a page
 * fault and the kernel's zeroing per page; a reused buffer costs neither).
 * as_large_get: a buffer of at least `bytes`, its capacity in *cap — a released one
 * whose capacity is between bytes and 2 * bytes when there is one, else
 * as_malloc_large. as_large_put(p, cap): gives the buffer back; it is always kept,
 * and older ones are freed (smallest first) so that at most AS_LARGE_CACHE_N buffers
 * and AS_LARGE_CACHE_BYTES in all are kept -- or the one buffer alone when it is
 * larger than that (so forwards of any size reuse their memory).
 * Thread-safe. The contents of a reused buffer are whatever was left in it. ASan
 * builds keep nothing (so use-after-free stays detectable). */
#define AS_LARGE_CACHE_N 4
#define AS_LARGE_CACHE_BYTES ((size_t)512 << 20)
void *as_large_get(size_t bytes, size_t *cap);
void as_large_put(void *p, size_t cap);
int as_large_reuses(void); /* 1 when released buffers are kept (not under ASan) */
/* Length (1-4) of the well-formed UTF-8 sequence at s[0..n) (no overlong forms,
 * surrogates or code points above U+10FFFF), or 0 when it is not one. */
int as_utf8_seq_len(const unsigned char *s, size_t n);
/* Where as_utf8_seq_len is 0: the length (>= 1) of the maximal subpart of an ill-formed
 * sequence at s[0..n), which becomes one U+FFFD (Unicode 15, sec. 3.9 "U+FFFD
 * Substitution of Maximal Subparts", as Python, Rust and browsers decode). */
size_t as_utf8_bad_len(const unsigned char *s, size_t n);
/* Rewrites, in place, every integer literal of the JSON text buf[0..n) (outside
 * strings) that does not fit an int64 as `null` padded with spaces (same length, so
 * line numbers hold): transformers writes "model_max_length":
 * 1000000000000000019884624838656 for "no limit", which a JSON parser with 64-bit
 * integers refuses. Readers then see the field as null, i.e. absent. Returns how many
 * literals were rewritten. */
int as_json_null_big_ints(char *buf, size_t n);

/* Reads a whole file (at most max_bytes) into a NUL-terminated buffer owned by the
 * caller. Errors name the path. */
as_status as_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                       as_error *err);
/* 1 when path names something, of any type (a FIFO, device or folder too), so that
 * a loader opening it says "not a regular file" instead of treating it as absent. */
int as_file_exists(const char *path);

#endif
