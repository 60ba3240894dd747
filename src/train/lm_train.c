/* lm_train.c — causal-LM training of a decoder (GPT-2 and the LLaMA family) on the one
 * forward and its backward (src/model: encoder.c, backward.c), for any model with an LM
 * head: the mean next-token cross-entropy of a batch of token windows, its gradient for
 * every parameter (model_backward_params), global-norm clipping and AdamW (Loshchilov &
 * Hutter 2019, Algorithm 2; bias correction as torch.optim.AdamW) over the model's own
 * weights made writable (model_params_own: weights and gradients are two flat arrays of
 * one layout), with linear warmup then cosine decay to 10% of the peak rate. Windows of T
 * tokens are cut at seeded random offsets of the packed token stream (documents joined,
 * each preceded by the model's BOS when it has one), so a run is a pure function of the
 * seed; checkpoints (weights + AdamW moments + step) every save_every steps, and resume
 * continues from one exactly as the uninterrupted run would. At precision bf16 the
 * products run in BF16 against the F32 weights' BF16 copies, rounded again after every
 * step (model_params_round_bf16); the optimizer and its moments stay F32.
 * What it does not: dropout, loss scaling (BF16 keeps F32's exponent range), sequence
 * classifiers, the BERT family's masked-LM training (src/train/pretrain.c).
 */
#include "train/lm_train.h"
#include "train/grad_groups.h"
#include "train/train_ops.h"
#include "io/safetensors.h"
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* One thread's workspace of lm_batch_loss: a window's tape, encoding and logit gradient. */
typedef struct {
    model_tape tp;
    as_encoding enc;
    float *dl; /* (T, V) */
} lm_worker;

typedef struct {
    const as_model *m;
    const int32_t *ids; /* (B, T) */
    int B, T, G;
    double inv;         /* 1 / (B (T - 1)) */
    double *row_loss;   /* (B, T - 1) */
    lm_worker *wk;      /* (threads of a round) */
    int n_wk;
    model_dw_stage *stage; /* NULL, or the batch's staged weight gradients */
    as_status *st;      /* (G) */
    as_error *err;      /* (G) */
} lm_job;

/* Group j's windows, each forward and backward single-threaded, gradients into buf. */
static int lm_group(void *ctx, int j, model_grads *buf) {
    const lm_job *c = ctx;
    lm_worker *w = &c->wk[j % c->n_wk]; /* a round's groups are consecutive: distinct workers */
    int lo, hi, T = c->T, V = as_model_config(c->m)->vocab_size;
    as_status s = AS_OK;
    grad_groups_range(c->B, c->G, j, &lo, &hi);
    for (int b = lo; b < hi && !s; b++) {
        const int32_t *ids = c->ids + (size_t)b * T;
        as_encoding_free(&w->enc);
        if ((s = as_encoding_from_ids(c->m, ids, NULL, T, &w->enc, &c->err[j]))) break;
        as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = 1};
        as_run *r = NULL;
        if ((s = model_forward(c->m, &w->enc, &spec, NULL, &w->tp, &r, &c->err[j]))) break;
        /* rows 0..T-2 predict the next token: dl = (softmax - onehot) / N; the last row nothing */
        trainop_xent(w->dl, c->row_loss + (size_t)b * (T - 1), r->logits, ids + 1, T - 1, V, (float)c->inv);
        memset(w->dl + (size_t)(T - 1) * V, 0, (size_t)V * sizeof(float));
        model_dw_stage_seq(c->stage, b, buf);
        s = model_backward_params(c->m, &w->enc, NULL, &w->tp, r, w->dl, 1, NULL, NULL, buf, &c->err[j]);
        model_dw_stage_seq(NULL, 0, NULL);
        as_run_free(r);
    }
    c->st[j] = s;
    return s != AS_OK;
}

/* What lm_batch_loss needs for batches of B windows of T tokens on `threads` threads: the
 * workers, the groups' gradient buffers and the row losses; kept over a run's steps (fresh
 * buffers of a large vocabulary's logit gradient and of the gradients cost page faults). */
typedef struct {
    int B, T, G, nw;
    lm_worker *wk;    /* (nw) */
    grad_groups gg;   /* nw buffers */
    double *row_loss; /* (B, T - 1) */
} lm_ws;

static void lm_ws_free(lm_ws *w) {
    for (int i = 0; w->wk && i < w->nw; i++) {
        as_encoding_free(&w->wk[i].enc);
        model_tape_free(&w->wk[i].tp);
        free(w->wk[i].dl);
    }
    free(w->wk);
    free(w->row_loss);
    grad_groups_free(&w->gg);
    memset(w, 0, sizeof *w);
}

static as_status lm_ws_init(const as_model *m, int B, int T, int threads, lm_ws *w, as_error *err) {
    int V = as_model_config(m)->vocab_size, nt = threads > 0 ? threads : as_n_cores();
    as_status s = AS_OK;
    memset(w, 0, sizeof *w);
    if (T < 2 || B < 1) return as_err_set(err, AS_ERR_INPUT, "a batch needs at least 1 window of 2 tokens");
    if (!(as_model_heads(m) & HEAD_LM))
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no causal-LM head to train", as_model_dir(m));
    w->B = B, w->T = T, w->G = grad_groups_count(B);
    w->nw = nt < w->G ? nt : w->G;
    w->row_loss = as_malloc_array((size_t)B * (T - 1), sizeof(double));
    w->wk = as_calloc((size_t)w->nw, sizeof *w->wk);
    if (!w->row_loss || !w->wk) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int i = 0; !s && i < w->nw; i++) {
        if ((s = model_tape_init(m, T, &w->wk[i].tp, err))) break;
        if (!(w->wk[i].dl = as_malloc_array((size_t)T * V, sizeof(float))))
            s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    if (!s) s = grad_groups_init(m, w->nw, &w->gg, err);
    if (!s) s = grad_groups_stage(&w->gg, m, B, T, err);
    if (s) lm_ws_free(w);
    return s;
}

/* lm_batch_loss on a workspace of its B, T. */
static as_status lm_ws_loss(const as_model *m, const int32_t *ids, lm_ws *w, model_grads *g, double *loss,
                            as_error *err) {
    as_status s = AS_OK, st[GRAD_GROUPS] = {0};
    as_error errs[GRAD_GROUPS];
    lm_job job = {.m = m, .ids = ids, .B = w->B, .T = w->T, .G = w->G, .inv = 1.0 / ((double)w->B * (w->T - 1)),
                  .row_loss = w->row_loss, .wk = w->wk, .n_wk = w->nw, .stage = w->gg.stage, .st = st, .err = errs};
    *loss = 0.0;
    par_state saved;
    model_par_begin(1, NULL, 0, NULL, &saved); /* OpenBLAS single-threaded under the pool's tasks */
    int failed = grad_groups_run(&w->gg, w->G, g, lm_group, &job);
    model_par_end(&saved);
    for (int j = 0; failed && j < w->G && !s; j++)
        if (st[j]) *err = errs[j], s = st[j];
    for (size_t i = 0; !s && i < (size_t)w->B * (w->T - 1); i++) *loss += w->row_loss[i] * job.inv;
    return s;
}

/* Mean cross-entropy of the next token over the B x (T - 1) predictions of windows ids
 * (B, T); the gradient of that mean for every parameter accumulated into g. Windows run
 * whole on the threads, in fixed groups (grad_groups.h): the same result at any thread
 * count. */
as_status lm_batch_loss(const as_model *m, const int32_t *ids, int B, int T, int threads, model_grads *g,
                        double *loss, as_error *err) {
    lm_ws w;
    *loss = 0.0;
    as_status s = lm_ws_init(m, B, T, threads, &w, err);
    if (s) return s;
    s = lm_ws_loss(m, ids, &w, g, loss, err);
    lm_ws_free(&w);
    return s;
}

void lm_opts_default(lm_opts *o) {
    memset(o, 0, sizeof *o);
    o->steps = 100;
    o->batch = 8;
    o->seq = 128;
    o->warmup = 10;
    o->log_every = 10;
    o->lr = 3e-4f;
    o->weight_decay = 0.1f;
    o->clip = 1.0f;
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->eps = 1e-8f;
    o->seed = 1;
}

/* Own random stream of the repeated-span windows: drawing from it leaves every window
 * offset as it is without them. */
#define LM_REPEAT_STREAM 0x5265706561745370ULL
#define LM_BOS_STREAM 0x426f7353746172ULL

size_t lm_window_start(const int32_t *stream, size_t at, int32_t bos) {
    for (size_t i = at;; i--) {
        if (stream[i] == bos) return i;
        if (i == 0) return at;
    }
}

void lm_repeat_span(int32_t *w, int T, float random_frac, int vocab, int n_ids, train_rng *r) {
    if (T < 8) return;
    int m = T / 16 + (int)train_rng_below(r, (uint32_t)(T / 2 - T / 16 + 1)); /* span length in [T/16, T/2] */
    int s = (int)train_rng_below(r, (uint32_t)(T - 2 * m + 1));                  /* start: s + 2m <= T */
    if (random_frac > 0 && vocab > 0 && train_rng_uniform(r) < random_frac) {
        int lo = vocab > 32 ? 16 : 0; /* above the special ids, as the induction probe */
        int n = n_ids > 0 && n_ids < vocab - lo ? n_ids : vocab - lo;
        for (int k = 0; k < m; k++) w[s + k] = lo + (int32_t)train_rng_below(r, (uint32_t)n);
    }
    memmove(w + s + m, w + s, (size_t)m * sizeof(int32_t));
}

void lm_fill_window(int32_t *w, const int32_t *stream, size_t n_tok, const lm_opts *o, int step, int32_t bos_id,
                    int vocab, train_rng *rng, train_rng *rep, train_rng *bos) {
    size_t at = (size_t)(train_rng_uniform(rng) * (double)(n_tok - (size_t)o->seq));
    if (o->bos_start > 0 && train_rng_uniform(bos) < o->bos_start) at = lm_window_start(stream, at, bos_id);
    memcpy(w, stream + at, (size_t)o->seq * sizeof(int32_t));
    int lead = o->bos_prefix > 0 && train_rng_uniform(bos) < o->bos_prefix; /* w[0] becomes BOS */
    if (lead) w[0] = bos_id;
    if (step >= o->repeat_from && o->repeat_frac > 0 && train_rng_uniform(rep) < o->repeat_frac)
        lm_repeat_span(w + lead, o->seq - lead, o->repeat_random, vocab, o->repeat_ids, rep);
}

/* Learning rate at step (0-based): linear warmup over `warmup` steps, then cosine decay
 * to 10% of lr at `steps`. */
static float lm_lr(const lm_opts *o, int step) {
    if (o->warmup > 0 && step < o->warmup) return o->lr * (float)(step + 1) / (float)o->warmup;
    double span = o->steps > o->warmup ? (double)(o->steps - o->warmup) : 1.0;
    double pr = (step - o->warmup) / span;
    pr = pr < 0 ? 0 : pr > 1 ? 1 : pr;
    return (float)(o->lr * (0.1 + 0.9 * 0.5 * (1.0 + cos(3.14159265358979323846 * pr))));
}

void lm_adamw_step(float *p, const float *g, float *mo, float *vo, const uint8_t *decay, size_t n, int step,
                   const lm_opts *o, float lr, float gscale) {
    float bc1 = 1.0f - powf(o->beta1, (float)(step + 1)), bc2 = 1.0f - powf(o->beta2, (float)(step + 1));
    for (size_t i0 = 0, i1; i0 < n; i0 = i1) { /* runs of equal decay: optim.c's update on each */
        for (i1 = i0 + 1; i1 < n && decay[i1] == decay[i0];) i1++;
        trainop_adamw_span(p + i0, g + i0, mo + i0, vo + i0, i1 - i0, gscale, o->beta1, o->beta2,
                           decay[i0] ? 1.0f - lr * o->weight_decay : 1.0f, lr / bc1, 1.0f / sqrtf(bc2), o->eps);
    }
}

/* Grows ids (len used of cap) to hold `more` further tokens. */
static as_status stream_reserve(int32_t **ids, size_t len, size_t *cap, size_t more, as_error *err) {
    while (len + more > *cap) {
        int32_t *g = *cap < ((size_t)1 << 31) ? realloc(*ids, 2 * *cap * sizeof(int32_t)) : NULL;
        if (!g) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        *ids = g, *cap *= 2;
    }
    return AS_OK;
}

/* Appends the non-special tokens of text to ids (len, cap grown as needed). */
static as_status stream_add(const as_model *m, const char *text, int32_t **ids, size_t *len, size_t *cap,
                            as_error *err) {
    as_encoding enc = {0};
    as_encode_opts eo = {.max_len = 1 << 20, .truncate = 1};
    as_status s = as_encode(m, text, NULL, &eo, &enc, err);
    if (s) return s;
    s = stream_reserve(ids, *len, cap, (size_t)enc.n, err);
    for (int t = 0; !s && t < enc.n; t++)
        if (enc.seq[t] >= 0) (*ids)[(*len)++] = enc.ids[t];
    as_encoding_free(&enc);
    return s;
}

as_status lm_corpus_tokens(const as_model *m, const char *const *files, int n_files, const char *const *exclude,
                           int n_exclude, int32_t **out, size_t *n, size_t *n_bytes, int *n_dropped, as_error *err) {
    const as_config *c = as_model_config(m);
    data_text txt = {0};
    int dropped = 0;
    *out = NULL;
    *n = 0;
    if (!as_model_has_tokenizer(m))
        return as_err_set(err, AS_ERR_INPUT, "%s: no tokenizer files: the corpus is text", as_model_dir(m));
    as_status s = data_read_corpus(files, n_files, exclude, n_exclude, &txt, &dropped, err);
    if (s) return s;
    size_t cap = 1 << 16, len = 0, bytes = 0;
    int32_t *ids = as_malloc_array(cap, sizeof(int32_t));
    if (!ids) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    /* the tokens of the line break between sentences, encoded once */
    size_t sep_cap = 16, n_sep = 0;
    int32_t *sep = ids ? as_malloc_array(sep_cap, sizeof(int32_t)) : NULL;
    if (ids && !sep) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (!s) s = stream_add(m, "\n", &sep, &n_sep, &sep_cap, err);
    for (int i = 0; i < txt.n && !s; i++) {
        int first = i == 0 || txt.doc[i] != txt.doc[i - 1];
        if (first && c->bos_token_id >= 0) {
            if (!(s = stream_reserve(&ids, len, &cap, 1, err))) ids[len++] = c->bos_token_id;
        } else if (!first && !(s = stream_reserve(&ids, len, &cap, n_sep, err))) {
            memcpy(ids + len, sep, n_sep * sizeof(int32_t));
            len += n_sep;
        }
        if (!s) s = stream_add(m, txt.text[i], &ids, &len, &cap, err);
        bytes += strlen(txt.text[i]) + (i > 0); /* a line break or a document boundary before it */
    }
    data_text_free(&txt);
    free(sep);
    if (s) {
        free(ids);
        return s;
    }
    *out = ids;
    *n = len;
    if (n_bytes) *n_bytes = bytes;
    if (n_dropped) *n_dropped = dropped;
    return AS_OK;
}

/* The optimizer state of a checkpoint: dir/optimizer.safetensors with the moments and the
 * number of steps done. */
static as_status state_save(const char *dir, const float *mo, const float *vo, size_t n, int step, as_error *err) {
    char path[4096];
    as_status s = as_path_join(path, sizeof path, dir, "optimizer.safetensors", err);
    if (s) return s;
    int32_t st = step;
    st_tensor ts[3] = {{.name = "adamw.m", .dtype = DTYPE_F32, .ndim = 1, .shape = {(int64_t)n}, .n_elems = n,
                        .data = mo, .nbytes = n * sizeof(float)},
                       {.name = "adamw.v", .dtype = DTYPE_F32, .ndim = 1, .shape = {(int64_t)n}, .n_elems = n,
                        .data = vo, .nbytes = n * sizeof(float)},
                       {.name = "steps_done", .dtype = DTYPE_I32, .ndim = 1, .shape = {1}, .n_elems = 1, .data = &st,
                        .nbytes = sizeof st}};
    snprintf(ts[0].dtype_name, sizeof ts[0].dtype_name, "F32");
    snprintf(ts[1].dtype_name, sizeof ts[1].dtype_name, "F32");
    snprintf(ts[2].dtype_name, sizeof ts[2].dtype_name, "I32");
    return st_write(path, ts, 3, err);
}

static as_status state_load(const char *dir, float *mo, float *vo, size_t n, int *step, as_error *err) {
    char path[4096];
    st_file *f = NULL;
    as_status s = as_path_join(path, sizeof path, dir, "optimizer.safetensors", err);
    if (s || (s = st_file_open(path, &f, err))) return s;
    const st_tensor *m = st_file_find(f, "adamw.m"), *v = st_file_find(f, "adamw.v"), *k = st_file_find(f, "steps_done");
    if (!m || !v || !k || m->dtype != DTYPE_F32 || v->dtype != DTYPE_F32 || k->dtype != DTYPE_I32 || m->n_elems != n ||
        v->n_elems != n || k->n_elems != 1)
        s = as_err_set(err, AS_ERR_INPUT, "%s: not the optimizer state of this model (%zu parameters)", path, n);
    else {
        memcpy(mo, m->data, n * sizeof(float));
        memcpy(vo, v->data, n * sizeof(float));
        int32_t st;
        memcpy(&st, k->data, sizeof st);
        *step = st;
    }
    st_file_free(f);
    return s;
}

as_status lm_train_run(const lm_opts *o, as_error *err) {
    as_status s;
    as_model *m = NULL;
    model_grads params = {0}, grads = {0};
    lm_ws ws = {0};
    int32_t *stream = NULL, *batch = NULL;
    float *mo = NULL, *vo = NULL;
    uint8_t *decay = NULL;
    size_t n_tok = 0;
    if (o->steps < 1 || o->batch < 1 || o->seq < 2)
        return as_err_set(err, AS_ERR_INPUT, "steps, batch and sequence length must be positive (sequence >= 2)");
    if (o->bos_start > 0 && o->bos_prefix > 0)
        return as_err_set(err, AS_ERR_INPUT, "--bos-start and --bos-prefix: choose one");
    char ckpt[4096];
    if ((s = as_path_join(ckpt, sizeof ckpt, o->out_dir, "checkpoint", err))) return s;
    if (!o->out_dir || (mkdir(o->out_dir, 0755) && errno != EEXIST))
        return as_err_set(err, AS_ERR_INPUT, "%s: cannot create the output folder", o->out_dir ? o->out_dir : "");
    /* --resume: the weights of out_dir/checkpoint, its moments and step count */
    char opt_path[4200];
    snprintf(opt_path, sizeof opt_path, "%s/optimizer.safetensors", ckpt);
    if (o->resume && !as_file_exists(opt_path))
        return as_err_set(err, AS_ERR_INPUT, "%s: no checkpoint to resume from", ckpt);
    if ((s = as_model_load(o->resume ? ckpt : o->model_dir, &m, err))) return s;
    if (!(as_model_heads(m) & HEAD_LM)) {
        s = as_err_set(err, AS_ERR_INPUT, "%s: the model has no causal-LM head to train", o->model_dir);
        goto cleanup;
    }
    if (!as_model_has_tokenizer(m)) {
        s = as_err_set(err, AS_ERR_INPUT, "%s: no tokenizer files: the corpus is text", o->model_dir);
        goto cleanup;
    }
    if (o->seq > as_model_max_tokens(m)) {
        s = as_err_set(err, AS_ERR_INPUT, "sequence length %d is over the model's %d positions", o->seq,
                       as_model_max_tokens(m));
        goto cleanup;
    }
    const int bos_id = as_model_config(m)->bos_token_id;
    if ((o->bos_start > 0 || o->bos_prefix > 0) && bos_id < 0) {
        s = as_err_set(err, AS_ERR_INPUT, "%s: --%s needs a model with a BOS token", o->model_dir,
                       o->bos_start > 0 ? "bos-start" : "bos-prefix");
        goto cleanup;
    }
    int dropped = 0;
    if ((s = lm_corpus_tokens(m, o->corpus, o->n_corpus, o->exclude, o->n_exclude, &stream, &n_tok, NULL, &dropped,
                              err)))
        goto cleanup;
    if (!o->quiet && dropped) printf("train-lm: %d held-out sentences left out of the corpus\n", dropped);
    if (n_tok < (size_t)o->seq + 1) {
        s = as_err_set(err, AS_ERR_INPUT, "the corpus has %zu tokens, fewer than one window of %d", n_tok, o->seq);
        goto cleanup;
    }
    if ((s = model_params_own(m, &params, err)) || (s = as_model_set_precision(m, o->precision, err)) ||
        (s = model_grads_init(m, &grads, err)) ||
        (s = lm_ws_init(m, o->batch, o->seq, o->threads, &ws, err)))
        goto cleanup;
    mo = as_calloc(params.n, sizeof(float));
    vo = as_calloc(params.n, sizeof(float));
    decay = as_malloc(params.n ? params.n : 1);
    batch = as_malloc_array((size_t)o->batch * o->seq, sizeof(int32_t));
    if (!mo || !vo || !decay || !batch) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory for the optimizer (%zu parameters)", params.n);
        goto cleanup;
    }
    model_params_decay_mask(m, &params, decay);
    int start = 0;
    if (o->resume && (s = state_load(ckpt, mo, vo, params.n, &start, err))) goto cleanup;
    if (start > o->steps || (o->stop_after > 0 && start >= o->stop_after)) {
        s = as_err_set(err, AS_ERR_INPUT, "%s: the checkpoint is at step %d, past --%s %d", ckpt, start,
                       start > o->steps ? "steps" : "stop-after", start > o->steps ? o->steps : o->stop_after);
        goto cleanup;
    }
    if (!o->quiet)
        printf("train-lm: %s, %zu parameters, %zu corpus tokens, %d steps of %d x %d tokens\n", o->model_dir, params.n,
               n_tok, o->steps, o->batch, o->seq);
    double t0 = as_now();
    int stop = o->stop_after > 0 && o->stop_after < o->steps ? o->stop_after : o->steps;
    for (int step = start; step < stop; step++) {
        train_rng rng = train_rng_seeded(o->seed, (uint64_t)step);
        train_rng rep = train_rng_seeded(o->seed ^ LM_REPEAT_STREAM, (uint64_t)step);
        train_rng bos = train_rng_seeded(o->seed ^ LM_BOS_STREAM, (uint64_t)step);
        for (int b = 0; b < o->batch; b++)
            lm_fill_window(batch + (size_t)b * o->seq, stream, n_tok, o, step, bos_id, as_model_config(m)->vocab_size,
                           &rng, &rep, &bos);
        model_grads_zero(&grads);
        double loss;
        if ((s = lm_ws_loss(m, batch, &ws, &grads, &loss, err))) goto cleanup;
        double norm = 0.0;
        for (size_t i = 0; i < grads.n; i++) norm += (double)grads.block[i] * grads.block[i];
        norm = sqrt(norm);
        float gscale = o->clip > 0 && norm > o->clip ? (float)(o->clip / norm) : 1.0f, lr = lm_lr(o, step);
        lm_adamw_step(params.block, grads.block, mo, vo, decay, params.n, step, o, lr, gscale);
        if ((s = model_params_round_bf16(m, o->threads, err))) goto cleanup;
        if (!o->quiet && (step % (o->log_every > 0 ? o->log_every : 10) == 0 || step == o->steps - 1))
            printf("step %d/%d  loss %.4f  grad norm %.3f  lr %.2e  %.0f tokens/s\n", step + 1, o->steps, loss, norm,
                   lr, (double)(step + 1 - start) * o->batch * o->seq / (as_now() - t0));
        if (o->loss_out) o->loss_out[step] = (float)loss;
        if ((o->save_every > 0 && (step + 1) % o->save_every == 0 && step + 1 < o->steps) ||
            (step + 1 == stop && stop < o->steps)) {
            if ((s = model_params_save(m, o->model_dir, ckpt, err)) ||
                (s = state_save(ckpt, mo, vo, params.n, step + 1, err)))
                goto cleanup;
            if (!o->quiet) printf("checkpoint at step %d: %s\n", step + 1, ckpt);
        }
    }
    s = model_params_save(m, o->model_dir, o->out_dir, err);
    if (!s && !o->quiet) printf("wrote %s\n", o->out_dir);
cleanup:
    free(stream);
    free(batch);
    free(mo);
    free(vo);
    free(decay);
    as_model_free(m);
    model_grads_free(&params);
    model_grads_free(&grads);
    lm_ws_free(&ws);
    return s;
}
