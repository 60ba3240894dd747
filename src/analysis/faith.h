/* faith.h — the curves of faithfulness (include/attnscope/faith.h) on any probability
 * function, so that tests can run them on a constructed model as well as on a real one.
 * What it does not: attribute or rank (faith.c does both for a real model).
 */
#ifndef AS_FAITH_INTERNAL_H
#define AS_FAITH_INTERNAL_H

#include "attnscope/faith.h"

/* p (out) = the probability of the explained class on the input with token t kept where
 * keep[t] != 0 (T entries). Called from several threads at once: must be thread-safe. */
typedef as_status (*faith_prob_fn)(void *ctx, const uint8_t *keep, double *p, as_error *err);

/* The deletion and insertion curves of order (n removable positions, most relevant first)
 * of an input of T tokens whose removable tokens are removable[t] != 0: del (n + 1) and ins
 * (n + 1), del[k] with order[0 .. k) removed, ins[k] with only order[0 .. k) of the
 * removable tokens kept. 2 n calls of fn (del[n] = ins[0] and del[0] = ins[n] are each
 * computed once) on up to `threads` threads (0 or 1: the calling thread). Errors: the
 * first failing call's (by curve position); AS_ERR_INTERNAL out of memory. */
as_status faith_curves(int T, const uint8_t *removable, const int *order, int n, faith_prob_fn fn, void *ctx,
                       int threads, double *del, double *ins, as_error *err);

/* A uniformly random order of the removable positions (Fisher-Yates on a splitmix64
 * stream from seed) into order; returns n. */
int faith_random_order(const uint8_t *removable, int T, uint64_t seed, int *order);

#endif
