/* head_out.h — read access to one attention head's slice of a layer's output
 * projection, for analyses that follow a head's contribution to the residual stream
 * (analysis/attrib.c, the norm-based attention of Kobayashi et al. 2020), and its Gram
 * matrix.
 * What it does not: compute anything of the forward; the weights are only read.
 */
#ifndef AS_MODEL_HEAD_OUT_H
#define AS_MODEL_HEAD_OUT_H

#include "model/model.h"

/* W_o^h of layer l, head h: the (Dh, D) rows of the output projection that head h's
 * context feeds, so that the attention output is sum_h ctx_h W_o^h + b_o (ctx_h: (T, Dh)).
 * Copied into w (Dh, D) as F32 whatever the weights' layout (nn.Linear (D, H Dh) or
 * GPT-2 Conv1D (H Dh, D)) and dtype (F32, or BF16 read in place). ASSERTs l and h. */
void model_head_out(const as_model *m, int l, int h, float *w);

/* Y (T, D) = X (T, Dh) W_o^h (ldx, ldy in floats), one sgemm reading F32 weights in place
 * (either layout); BF16 weights through model_head_out into scratch (Dh, D). ASSERTs l
 * and h. */
void model_head_out_mul(const as_model *m, int l, int h, const float *X, int T, size_t ldx, float *Y, size_t ldy,
                        float *scratch);

/* G (Dh, Dh) = W_o^h W_o^h^T, the Gram matrix of layer l head h's rows, so that
 * ||v W_o^h||^2 = v G v^T. F32 weights are read in place (one ssyrk on the strided
 * slice, both layouts); BF16 ones through model_head_out into scratch (Dh, D). ASSERTs l
 * and h. */
void model_head_out_gram(const as_model *m, int l, int h, float *scratch, float *G);

#endif
