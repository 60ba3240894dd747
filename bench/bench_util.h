/* bench_util.h — what the C benchmarks of bench/ share: a monotonic clock and a small
 * deterministic generator of values in [-1, 1). Header-only; each benchmark is one
 * program built by its .sh script.
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <time.h>

/* Seconds on the monotonic clock. */
static inline double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The next value of the linear congruential sequence in *s, in [-1, 1). */
static inline float bench_frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

#endif
