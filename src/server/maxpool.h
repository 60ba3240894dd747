/* maxpool.h — downsampling of attention matrices for the model view's thumbnails:
 * adaptive max pooling of a (T, T) matrix onto (P, P) blocks, P = min(N, T), or of a
 * rectangular (R, C) one onto (min(N, R), min(N, C)).
 * Max (not mean or sum) keeps a single strong link — a thin diagonal, a column
 * on [SEP] — visible at any size, and it keeps each block's value in the
 * attention range [0, 1], so the same heat-map scale applies. It only computes;
 * the route (server/api.c) parses and validates the request. (Not the thread pool
 * of the library, src/core/pool.h.)
 *
 * Blocks partition the tokens: block i covers [floor(i*T/P), floor((i+1)*T/P)),
 * so every block holds floor(T/P) or ceil(T/P) tokens and none is empty.
 */
#ifndef AS_SRV_MAXPOOL_H
#define AS_SRV_MAXPOOL_H

#include <stddef.h>

/* The side P of the pooled matrix for T tokens and at most n blocks (n >= 1). */
int srv_maxpool_size(int T, int n);

/* First token of block i of P over T tokens (i = P gives T). */
int srv_maxpool_start(int i, int T, int P);

/* Max-pools att (T, T), row-major, into out (P, P); 1 <= P <= T. scratch: T floats
 * of work space. NaN entries are skipped (a block of only NaN gives -inf). Borrows
 * att and scratch, writes out. */
void srv_maxpool(const float *att, int T, int P, float *out, float *scratch);

/* Max-pools a rectangular att (R, C) (cross-attention: decoder rows, encoder columns)
 * into out (Pr, Pc), rows and columns in blocks as above; 1 <= Pr <= R, 1 <= Pc <= C.
 * scratch: C floats. srv_maxpool is this with R = C = T, Pr = Pc = P. */
void srv_maxpool_rect(const float *att, int R, int C, int Pr, int Pc, float *out, float *scratch);

#endif
