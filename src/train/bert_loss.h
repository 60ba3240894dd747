/* bert_loss.h — the training objectives of the BERT family on the one forward and its
 * backward (src/model: encoder.c, backward.c): the sequence classifier's mean
 * cross-entropy, the masked-LM head's mean cross-entropy over the predicted positions
 * only, and DistilBERT's distillation terms (KL at a temperature against a teacher's
 * masked-LM logits, cosine of the final hidden states), with training-mode dropout, for a
 * batch of sequences; the gradient of the total for every parameter (model_grads).
 * What it does not: the optimizer, data, schedules or checkpoints (pretrain.c,
 * finetune.c, distill.c), decoders (lm_train.c).
 *
 * Dimension legend: B sequences, T tokens per sequence, C classes, V vocabulary, D width,
 * M predicted (masked-LM) positions of the batch.
 */
#ifndef AS_BERT_LOSS_H
#define AS_BERT_LOSS_H

#include "model/model.h"
#include "train/grad_groups.h"

/* Label value that masked-LM cross-entropy ignores (torch CrossEntropyLoss default). */
#define TRAIN_IGNORE (-100)

typedef struct {
    int B, T;
    const int32_t *ids;        /* (B, T) token ids */
    const int32_t *type_ids;   /* (B, T) segment ids, or NULL = all 0 */
    const int32_t *mask;       /* (B, T) 1 = real token, 0 = padding; NULL = all real */
    const int32_t *cls_labels; /* (B) class per sequence, or NULL = no classifier loss */
    const int32_t *mlm_labels; /* (B, T) target id or TRAIN_IGNORE, or NULL = no masked-LM loss */
} bert_batch;

typedef struct {
    float dropout;   /* training-mode dropout p (model_tape_dropout); 0 = off */
    uint64_t seed;   /* this step's dropout seed; sequence b draws its masks from (seed, b) */
    int threads;     /* of the forward and backward; 0 = the cores */
    /* distillation (Sanh et al. 2019): teacher non-NULL adds its terms */
    const as_model *teacher;
    float temperature, alpha_kl, alpha_mlm, alpha_cos; /* alpha_mlm weighs the masked-LM loss
                                                          only with a teacher (1 otherwise) */
    /* the groups' gradient buffers kept across calls on the same model (zeroed {0} before
       the first; the caller frees them, grad_groups_free), or NULL: allocated per call */
    grad_groups *keep;
} bert_loss_opts;

typedef struct {
    double loss;             /* the total: loss_cls + alpha_mlm loss_mlm (+ alpha_kl T^2 loss_kl + alpha_cos loss_cos) */
    double loss_cls, loss_mlm; /* mean cross-entropies (0 without labels) */
    double loss_kl, loss_cos;  /* distillation: mean KL over the predicted rows, mean 1 - cos over real tokens */
    int n_mlm;               /* M */
    int mlm_correct;         /* predicted rows whose argmax is the target */
    float *cls_logits;       /* (B, C): filled when the caller points it at memory */
    float *mlm_logits;       /* (M, V) of the predicted rows in batch order: filled when non-NULL */
} bert_loss_out;

/* The objective of batch b on m (and the teacher's terms), and when g is non-NULL its
 * gradient for every parameter accumulated into g. Each sequence runs at its length (up
 * to its last real token). Errors: AS_ERR_INPUT naming the sequence for ids, types or
 * labels out of range, a model without the head a loss needs; out of memory. */
as_status bert_batch_loss(const as_model *m, const bert_batch *b, const bert_loss_opts *o, model_grads *g,
                          bert_loss_out *out, as_error *err);

/* The distillation terms (Hinton et al. 2015, sec. 2; Sanh et al. 2019). zs, zt, d (M, V):
 * returns mean_rows KL(softmax(zt/T) || softmax(zs/T)) and adds alpha * T^2 * its gradient
 * w.r.t. zs (averaged over M) into d. hs, ht, d_out (N, D), mask (N): returns the mean over
 * rows with mask != 0 of 1 - cos(hs, ht) and adds alpha times its gradient w.r.t. hs into
 * d_out. */
double distill_kl_grad(const float *zs, const float *zt, float *d, int M, int V, float T, float alpha);
double distill_cos_grad(const float *hs, const float *ht, const int32_t *mask, float *d_out, int N, int D, float alpha);

#endif
