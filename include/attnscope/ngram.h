/* attnscope/ngram.h — a smoothed n-gram language model over token ids, the baseline that
 * `attnscope eval --task lm` prints next to a causal LM on the same tokenization and split
 * (src/train/ngram.c). Part of the tools' API (see attnscope.h, "Library and tools").
 *
 * The model: interpolated modified Kneser-Ney smoothing (Chen & Goodman 1998, "An
 * empirical study of smoothing techniques for language modeling", TR-10-98, sec. 3 and
 * 4.1.6; the form KenLM and SRILM's -kndiscount -interpolate estimate), of order 1 to
 * NGRAM_MAX_ORDER, over a vocabulary of V ids:
 *   p_0(w)        = 1 / V
 *   p_k(w | h)    = [max(c_k(hw) - D_k(c_k(hw)), 0)
 *                    + (D_k1 N1(h.) + D_k2 N2(h.) + D_k3 N3+(h.)) p_{k-1}(w | h')] / sum_v c_k(hv)
 *                   (h: the last k - 1 tokens, h' its last k - 2; when sum_v c_k(hv) = 0,
 *                   p_k(w | h) = p_{k-1}(w | h'))
 * c_k is the raw count at the highest order and the continuation count N1+(. hw) (the
 * number of distinct tokens seen before hw) below it; N_j(h.) counts the w with
 * c_k(hw) = j (N3+: >= 3). The three discounts of order k come from its counts of counts
 * n_1..n_4: Y = n1 / (n1 + 2 n2), D_k1 = 1 - 2Y n2/n1, D_k2 = 2 - 3Y n3/n2,
 * D_k3 = 3 - 4Y n4/n3; when n3 or n4 is 0 the order falls back to one absolute discount
 * Y for all three (Ney, Essen & Kneser 1994), when n1 or n2 is 0 to 0.5; each is then
 * clamped to [NGRAM_MIN_DISCOUNT, j], so every seen context passes some mass down and
 * every id has a probability above 0. The probabilities of the V ids sum to 1 in every
 * context.
 * The training stream is counted as one sequence (n-grams cross document boundaries,
 * as the LM's training windows do); an n-gram seen only at the very start of the stream
 * has no continuation count.
 *
 * What it does not: pruning, <unk> handling (every id below V is in the vocabulary),
 * sentence-boundary padding, or reading/writing ARPA files.
 */
#ifndef ATTNSCOPE_NGRAM_H
#define ATTNSCOPE_NGRAM_H

#include "attnscope.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NGRAM_MAX_ORDER 5
#define NGRAM_MIN_DISCOUNT 0.01
/* distinct n-grams and contexts of all orders together (hash-table entries) */
#define NGRAM_MAX_ENTRIES (1u << 27)

typedef struct ngram_lm ngram_lm;

/* Counts the n-grams of ids (n tokens, each in [0, vocab)) up to order and estimates the
 * model. *out is the caller's (ngram_free). Errors: AS_ERR_INPUT for order outside
 * [1, NGRAM_MAX_ORDER], vocab outside [1, AS_MAX_VOCAB], an id outside the vocabulary,
 * fewer than order tokens, more than NGRAM_MAX_ENTRIES distinct n-grams; AS_ERR_INTERNAL
 * when out of memory. ids is only read. */
as_status ngram_train(const int32_t *ids, size_t n, int order, int vocab, ngram_lm **out, as_error *err);
void ngram_free(ngram_lm *lm);
int ngram_order(const ngram_lm *lm);
/* p(w | the last min(n_ctx, order - 1) tokens of ctx); ctx may be NULL when n_ctx is 0.
 * w and the context ids must be in [0, vocab) (ngram_nll checks them). */
double ngram_prob(const ngram_lm *lm, const int32_t *ctx, int n_ctx, int32_t w);
/* The three discounts D_k1, D_k2, D_k3+ of order k (1..order). */
void ngram_discounts(const ngram_lm *lm, int k, double d[3]);
/* Summed -ln p of tokens 1..n-1 of ids, each given the tokens before it in ids (up to
 * order - 1 of them): *nll_sum, *n_pred = n - 1. Errors: n < 2, an id outside the
 * vocabulary. */
as_status ngram_nll(const ngram_lm *lm, const int32_t *ids, size_t n, double *nll_sum, size_t *n_pred,
                    as_error *err);

#ifdef __cplusplus
}
#endif
#endif
