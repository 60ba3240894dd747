/* grad_groups.h — data parallelism of a training batch over whole sequences: the batch's
 * sequences fall into GRAD_GROUPS fixed groups (contiguous, in order); one thread runs a
 * group's forwards and backwards single-threaded and accumulates the group's parameter
 * gradient, from zero, into a buffer of its own; the buffers are then added into the
 * batch's gradient in group order. The groups do not depend on the thread count, so no
 * result does. Groups run in rounds of up to `threads` at a time; memory: one gradient
 * buffer (the model's parameter count in floats) per thread of a round, at most
 * GRAD_GROUPS; grad_groups_run leaves them zeroed, so a training loop keeps them across
 * steps. It does not split a sequence's own work over threads.
 */
#ifndef AS_GRAD_GROUPS_H
#define AS_GRAD_GROUPS_H

#include "model/model.h"

/* Groups of a batch (fewer when it has fewer sequences). */
#define GRAD_GROUPS 4

typedef struct {
    model_grads *buf;      /* (n) zeroed gradient buffers, one per thread of a round */
    int n;
    model_dw_stage *stage; /* NULL, or the weight gradients staged for one product per map */
} grad_groups;

/* Groups of n_seq sequences: min(n_seq, GRAD_GROUPS). */
int grad_groups_count(int n_seq);
/* Sequences [*lo, *hi) of group j of G over n_seq sequences. */
void grad_groups_range(int n_seq, int G, int j, int *lo, int *hi);
/* n zeroed buffers for m's parameters. Errors: AS_ERR_INTERNAL (out of memory). */
as_status grad_groups_init(const as_model *m, int n, grad_groups *gg, as_error *err);
void grad_groups_free(grad_groups *gg); /* NULL or zeroed: no-op */
/* At precision bf16: the layers' weight gradients of the next runs' chunks of up to n_seq
 * sequences of T tokens are staged (model/model.h model_dw_stage) and multiplied once
 * per map at the end of grad_groups_run; the stage is kept while the shape holds. A
 * group's fn then calls model_dw_stage_seq(gg->stage, k, buf) before the backward of the
 * chunk's sequence k (and with NULL after). gg->stage stays NULL at precision f32.
 * Errors: out of memory. */
as_status grad_groups_stage(grad_groups *gg, const as_model *m, int n_seq, int T, as_error *err);

/* Runs fn(ctx, j, buf) for every group j in [0, G): rounds of up to gg->n groups on as
 * many threads, each group with its own zeroed buffer, which after the round is added into
 * g in group order (element by element: g + G_0 + G_1 + ... whatever the round sizes) and
 * zeroed again; then the staged weight gradients, if any, are added into g. fn returns nonzero to report a failure; the failure of the lowest group is
 * returned (the remaining groups of its round still run, later rounds do not). */
typedef int (*grad_group_fn)(void *ctx, int j, model_grads *buf);
int grad_groups_run(grad_groups *gg, int G, model_grads *g, grad_group_fn fn, void *ctx);

#endif
