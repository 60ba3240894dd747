/* core.h — shared helpers for every module: error reporting, programmer-bug
 * assertions, checked allocation, logging, half-precision conversion, file reading.
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
#define ASSERT(x)                                                                         \
    do {                                                                                  \
        if (!(x)) {                                                                       \
            fprintf(stderr, "attnscope: assertion failed: %s at %s:%d\n", #x, __FILE__,   \
                    __LINE__);                                                            \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

#if defined(__GNUC__)
#define AS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AS_PRINTF(a, b)
#endif

/* Sets err (when non-NULL) to code and a one-line message; returns code.
 * Newlines in the formatted message are replaced by spaces. */
as_status as_err_set(as_error *err, as_status code, const char *fmt, ...) AS_PRINTF(3, 4);
/* Prefixes an already-set err->msg with "prefix: ". Returns err->code. */
as_status as_err_prefix(as_error *err, const char *fmt, ...) AS_PRINTF(2, 3);
void as_err_clear(as_error *err);

/* Warnings go to stderr with an "attnscope: warning: " prefix unless silenced. */
void as_warn(const char *fmt, ...) AS_PRINTF(1, 2);
void as_set_quiet(int quiet);

/* Checked allocation: NULL on overflow or failure (callers report AS_ERR_INTERNAL). */
void *as_malloc(size_t n);
void *as_calloc(size_t n, size_t size);
void *as_malloc_array(size_t n, size_t size); /* n*size with overflow check */
/* Like as_malloc_array, for large buffers filled once (captured tensors, forward
 * scratch): from 4 MiB up, aligned to 2 MiB and marked for transparent huge pages
 * (madvise; fewer first-touch page faults). Released with free(). */
void *as_malloc_large(size_t n, size_t size);
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
char *as_strdup(const char *s);
/* Length (1-4) of the well-formed UTF-8 sequence at s[0..n) (no overlong forms,
 * surrogates or code points above U+10FFFF), or 0 when it is not one. */
int as_utf8_seq_len(const unsigned char *s, size_t n);
/* Where as_utf8_seq_len is 0: the length (>= 1) of the maximal subpart of an ill-formed
 * sequence at s[0..n), which becomes one U+FFFD (Unicode 15, sec. 3.9 "U+FFFD
 * Substitution of Maximal Subparts", as Python, Rust and browsers decode). */
size_t as_utf8_bad_len(const unsigned char *s, size_t n);
/* A copy of the NUL-terminated s that is valid UTF-8: each maximal subpart of an
 * ill-formed sequence becomes U+FFFD. Owned by the caller (free); NULL when out of
 * memory or s is NULL. */
char *as_utf8_clean(const char *s);
/* Rewrites, in place, every integer literal of the JSON text buf[0..n) (outside
 * strings) that does not fit an int64 as `null` padded with spaces (same length, so
 * line numbers hold): transformers writes "model_max_length":
 * 1000000000000000019884624838656 for "no limit", which a JSON parser with 64-bit
 * integers refuses. Readers then see the field as null, i.e. absent. Returns how many
 * literals were rewritten. */
int as_json_null_big_ints(char *buf, size_t n);
/* n*m*... with overflow check: returns 0 on overflow (sizes are never 0 here). */
size_t as_mul_size(size_t a, size_t b);

/* Reads a whole file (at most max_bytes) into a NUL-terminated buffer owned by the
 * caller. Errors name the path. */
as_status as_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                       as_error *err);
/* Joins dir and name into buf; AS_ERR_INPUT if it does not fit. */
as_status as_path_join(char *buf, size_t cap, const char *dir, const char *name, as_error *err);
/* 1 when path names something, of any type (a FIFO, device or folder too), so that
 * a loader opening it says "not a regular file" instead of treating it as absent. */
int as_file_exists(const char *path);

/* Half-precision conversions (IEEE binary16 and bfloat16) to float. */
float as_f16_to_f32(uint16_t h);
float as_bf16_to_f32(uint16_t h);
uint16_t as_f32_to_f16(float f);
uint16_t as_f32_to_bf16(float f);

/* Number of online CPUs (>= 1). */
int as_n_cores(void);
/* Monotonic time in seconds. */
double as_now(void);

#endif
