/* lm_train.h — the pieces of causal-LM training on the one forward (lm_train.c) that
 * tests and tools use besides lm_train_run (include/attnscope/train.h): the batch loss
 * with its parameter gradients and one AdamW step over flat arrays.
 */
#ifndef AS_LM_TRAIN_H
#define AS_LM_TRAIN_H

#include "attnscope/train.h"
#include "model/model.h"
#include "train/trainer.h"

/* Mean next-token cross-entropy of the B x (T - 1) predictions of windows ids (B, T) into
 * *loss; the gradient of that mean for every parameter accumulated into g. Errors: a
 * model without an LM head, ids outside the vocabulary, T over the positions. */
as_status lm_batch_loss(const as_model *m, const int32_t *ids, int B, int T, int threads, model_grads *g,
                        double *loss, as_error *err);
/* The start of the document holding stream position at: the last position i <= at with
 * stream[i] == bos (at itself when there is none). Moving a window back keeps it inside the
 * stream. */
size_t lm_window_start(const int32_t *stream, size_t at, int32_t bos);

/* Fills one training window w (o->seq tokens) from the token stream (n_tok > o->seq):
 * the tokens at an offset drawn from rng; moved back to its document's start
 * (lm_window_start) with probability o->bos_start, drawn from bos; its first token replaced
 * by bos_id with probability o->bos_prefix, drawn from bos; then, from step o->repeat_from
 * on and with probability o->repeat_frac drawn from rep, a span repeated (lm_repeat_span)
 * among the tokens after that BOS. A draw is made only for an option that is on, so
 * windows without the BOS options are those of a run before they existed. */
void lm_fill_window(int32_t *w, const int32_t *stream, size_t n_tok, const lm_opts *o, int step, int32_t bos_id,
                    int vocab, train_rng *rng, train_rng *rep, train_rng *bos);
/* Repeats a span of the window w (T tokens) right after itself: a span length m in
 * [T/16, T/2] and a start s with s + 2m <= T drawn from r; w[s+m, s+2m) = w[s, s+m).
 * With probability random_frac (drawn from r) the span w[s, s+m) is first overwritten by
 * ids drawn uniformly from [16, vocab) (from [0, vocab) when vocab <= 32), or from the
 * first n_ids of those when 0 < n_ids < their count. */
void lm_repeat_span(int32_t *w, int T, float random_frac, int vocab, int n_ids, train_rng *r);
/* One AdamW step (Loshchilov & Hutter 2019, Algorithm 2; bias correction as torch) over n
 * parameters p with gradients g * gscale, moments mo, vo, decay mask (1 = decayed), at
 * 0-based step with rate lr (o: betas, eps, weight decay). */
void lm_adamw_step(float *p, const float *g, float *mo, float *vo, const uint8_t *decay, size_t n, int step,
                   const lm_opts *o, float lr, float gscale);

#endif
