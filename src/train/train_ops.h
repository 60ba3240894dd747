/* train_ops.h — the kernel the training losses share: softmax cross-entropy with its
 * gradient (bert_loss.c, lm_train.c). Single-threaded; rows in order. It does not know
 * about layers, models or batches; the model's operations are in model/ops.h.
 *
 * Shapes: N rows, C columns.
 */
#ifndef AS_TR_OPS_H
#define AS_TR_OPS_H

#include <stddef.h>
#include <stdint.h>

/* Softmax cross-entropy per row: logits (N, C), targets (N); dlogits (N, C) =
 * scale * (softmax - onehot); row_loss[n] = -log softmax[target] (double). */
void trainop_xent(float *dlogits, double *row_loss, const float *logits, const int32_t *targets, int N, int C,
              float scale);

#endif
