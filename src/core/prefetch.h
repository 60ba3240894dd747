/* prefetch.h — fetching the next block of a matrix into L2 while the current one is
 * multiplied: the block's rows (row_bytes each, ld_bytes apart) are cut into cache lines,
 * and each call of as_ahead_step fetches the next few, so that the fetches spread over
 * the steps of the current block's work. A weight is read once per forward, from DRAM,
 * in rows of a few KiB that the hardware prefetcher follows late; fetched this way the
 * BF16 products of core/gemm_bf16.c find their next block in L2.
 * Prefetches never fault, and each stays within its row.
 * What it does not: decide whether fetching pays (callers do), write anything.
 */
#ifndef AS_PREFETCH_H
#define AS_PREFETCH_H

#include <stddef.h>

typedef struct {
    const char *base;  /* the block's first row */
    size_t ld, bytes;  /* bytes between rows; bytes of each row */
    size_t lines;      /* lines per row: bytes / 64, and one more for an unaligned start */
    size_t row, line;  /* the next line to fetch */
    size_t rows, per;  /* rows of the block (0: nothing to fetch); lines per step */
} as_ahead;

/* The block of `rows` rows of row_bytes bytes from base, ld_bytes apart, fetched over
 * `steps` calls of as_ahead_step. rows = 0 or row_bytes = 0: the steps fetch nothing. */
static inline void as_ahead_init(as_ahead *a, const void *base, size_t ld_bytes, size_t rows, size_t row_bytes,
                                 size_t steps) {
    a->base = (const char *)base;
    a->ld = ld_bytes;
    a->rows = row_bytes ? rows : 0;
    a->bytes = row_bytes;
    a->lines = a->rows ? (row_bytes + 63) / 64 + 1 : 0;
    a->row = a->line = 0;
    if (!steps) steps = 1;
    a->per = (a->lines * a->rows + steps - 1) / steps;
}

/* Fetches the next `per` lines into L2 (prefetcht1 on x86-64). */
static inline void as_ahead_step(as_ahead *a) {
    for (size_t i = 0; i < a->per && a->row < a->rows; i++) {
        size_t off = a->line * 64 < a->bytes ? a->line * 64 : a->bytes - 1;
        __builtin_prefetch(a->base + a->row * a->ld + off, 0, 2);
        if (++a->line == a->lines) a->line = 0, a->row++;
    }
}

#endif
