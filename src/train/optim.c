/* optim.c — AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay
 * Regularization", Algorithm 2) over a model's flat parameter and gradient arrays
 * (model_params_own / model_grads), with
 * global-norm gradient clipping (Pascanu et al. 2013, sec. 3.2) and the BERT learning
 * rate schedule: linear warmup, then linear decay to 0 (Devlin et al. 2019, A.2).
 * Bias correction as torch.optim.AdamW. Weight decay applies to weight matrices and
 * embeddings, not to biases and LayerNorm parameters (Hugging Face's run_mlm /
 * BERT's optimization.py exclude_from_weight_decay).
 * What it does not: other optimizers, gradient accumulation, BF16 weights (the F32
 * weights it updates are rounded to BF16 copies by model_params_round_bf16).
 */
#include "train/trainer.h"
#include "core/pool.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

static int g_threads; /* 0 = the cores */

void train_set_threads(int threads) {
    g_threads = threads > 0 ? (threads < TRAIN_MAX_THREADS ? threads : TRAIN_MAX_THREADS) : 0;
    openblas_set_num_threads(threads > 0 ? threads : as_n_cores());
}

int train_threads(void) {
    int n = g_threads > 0 ? g_threads : as_n_cores();
    return n < 1 ? 1 : n < TRAIN_MAX_THREADS ? n : TRAIN_MAX_THREADS;
}

as_status trainop_adamw_init(trainop_adamw *o, size_t n, as_error *err) {
    o->m = as_calloc_large(n, sizeof(float));
    o->v = as_calloc_large(n, sizeof(float));
    o->n = n;
    o->step = 0;
    if (!o->m || !o->v) {
        trainop_adamw_free(o);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for optimizer state");
    }
    return AS_OK;
}

void trainop_adamw_free(trainop_adamw *o) {
    if (!o) return;
    free(o->m);
    free(o->v);
    o->m = o->v = NULL;
}

float trainop_adamw_lr(const trainop_adamw *o, int64_t step) {
    if (o->warmup > 0 && step < o->warmup) return o->lr * (float)(step + 1) / (float)o->warmup;
    if (o->total <= o->warmup) return o->lr;
    double f = (double)(o->total - step) / (double)(o->total - o->warmup);
    return f > 0 ? (float)(o->lr * f) : 0.0f;
}

/* The parameter arena is cut into ADAM_CHUNKS fixed chunks, run on the thread pool
 * (train_threads()); the squared gradient norm sums each chunk in double, then the
 * chunks in order, so the result does not depend on the thread count. */
#define ADAM_CHUNKS 256

typedef struct {
    trainop_adamw *o;
    float *p;
    const float *g;
    const uint8_t *decay;
    size_t chunk;
    double *part;
    float gscale, lr, b1, b2, step_size, rbc2;
} adam_job;

void trainop_adamw_span(float *restrict p, const float *restrict g, float *restrict mm, float *restrict vv, size_t n,
                        float gscale, float b1, float b2, float decay, float step_size, float rbc2, float eps) {
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * gscale;
        mm[i] = b1 * mm[i] + (1.0f - b1) * gi;
        vv[i] = b2 * vv[i] + (1.0f - b2) * gi * gi;
        p[i] = p[i] * decay - step_size * mm[i] / (sqrtf(vv[i]) * rbc2 + eps);
    }
}

/* chunk k's squared gradient norm */
static void norm_task(void *ctx, int k, int tid) {
    const adam_job *j = ctx;
    size_t n = j->o->n, i0 = (size_t)k * j->chunk, i1 = i0 + j->chunk < n ? i0 + j->chunk : n;
    const float *gm = j->g;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = i0; i < i1; i++) s += (double)gm[i] * gm[i];
    j->part[k] = s;
}

/* chunk c's update, run by run of equal weight decay */
static void adam_task(void *ctx, int c, int tid) {
    const adam_job *j = ctx;
    trainop_adamw *o = j->o;
    size_t n = o->n, i0 = (size_t)c * j->chunk, i1 = i0 + j->chunk < n ? i0 + j->chunk : n;
    for (size_t s0 = i0, s1; s0 < i1; s0 = s1) {
        for (s1 = s0 + 1; s1 < i1 && j->decay[s1] == j->decay[s0];) s1++;
        float decay = j->decay[s0] ? 1.0f - j->lr * o->wd : 1.0f;
        trainop_adamw_span(j->p + s0, j->g + s0, o->m + s0, o->v + s0, s1 - s0, j->gscale, j->b1, j->b2, decay,
                           j->step_size, j->rbc2, o->eps);
    }
}

float trainop_adamw_step(trainop_adamw *o, float *p, const float *g, const uint8_t *decay) {
    size_t n = o->n, chunk = (n + ADAM_CHUNKS - 1) / ADAM_CHUNKS;
    double part[ADAM_CHUNKS];
    adam_job j = {o, p, g, decay, chunk, part, 0, 0, 0, 0, 0, 0};
    int nt = train_threads();
    as_parallel_for(ADAM_CHUNKS, nt, norm_task, &j);
    double ss = 0.0;
    for (int k = 0; k < ADAM_CHUNKS; k++) ss += part[k];
    float norm = (float)sqrt(ss);
    float gscale = (o->clip > 0.0f && norm > o->clip) ? o->clip / (norm + 1e-6f) : 1.0f;
    float lr = trainop_adamw_lr(o, o->step);
    o->step++;
    float b1 = o->beta1, b2 = o->beta2;
    float bc1 = 1.0f - powf(b1, (float)o->step), bc2 = 1.0f - powf(b2, (float)o->step);
    j.gscale = gscale;
    j.lr = lr;
    j.b1 = b1;
    j.b2 = b2;
    j.step_size = lr / bc1;
    j.rbc2 = 1.0f / sqrtf(bc2);
    as_parallel_for(ADAM_CHUNKS, nt, adam_task, &j);
    return norm;
}
