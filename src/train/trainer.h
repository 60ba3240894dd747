/* trainer.h — the training pipeline above the one forward and backward (src/model):
 * the WordPiece vocabulary trainer, corpus loading (text, CoNLL-U, SST-2 TSV) with
 * held-out sentence filtering, masked-LM batches on sentence pairs, AdamW with
 * warmup + linear decay and global-norm clipping, checkpoints with optimizer state,
 * and the pretrain / finetune / evaluate / distill loops the CLI runs.
 * What it does not: the numerics of the model (src/model, bert_loss.c), tokenizer loading for
 * inference (src/tokenize), argument parsing (src/cli/cmd_*.c). The options and entry
 * points the tools call are declared in include/attnscope/train.h.
 *
 * Dimension legend: B sequences, T tokens, V vocabulary, D width.
 * Reproducibility: every random choice (data order, masking, dropout seeds) is a pure
 * function of (seed, step), so a run resumed from a checkpoint at step s draws the
 * same batches as an uninterrupted run.
 */
#ifndef AS_TRAINER_H
#define AS_TRAINER_H

#include "attnscope/train.h" /* the options and loops the tools call */
#include "train/bert_ckpt.h"
#include "train/bert_loss.h"

#define VOCAB_TRAIN_N_SPECIAL 5         /* [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0..4 */
#define VOCAB_TRAIN_PAD 0
#define VOCAB_TRAIN_UNK 1
#define VOCAB_TRAIN_CLS 2
#define VOCAB_TRAIN_SEP 3
#define VOCAB_TRAIN_MASK 4
#define DATA_MAX_FILE_BYTES ((size_t)1 << 30)

/* ---- a tiny deterministic RNG (splitmix64) ---- */
typedef struct {
    uint64_t s;
} train_rng;
train_rng train_rng_seeded(uint64_t seed, uint64_t stream);
uint64_t train_rng_next(train_rng *r);
double train_rng_uniform(train_rng *r);            /* [0, 1) */
uint32_t train_rng_below(train_rng *r, uint32_t n); /* [0, n), n > 0 */

/* ---- corpora (data.c) ---- */

/* Reads the sentences of one file (formats: data_text in attnscope/train.h). */
as_status data_read_sentences(const char *path, data_text *out, int doc_base, as_error *err);
/* Drops every sentence whose key (data_sentence_key) equals the key of a sentence in
 * one of the exclude files, or contains such a key of >= 24 characters. *n_dropped. */
as_status data_filter(data_text *t, const char *const *exclude, int n_exclude, int *n_dropped, as_error *err);
/* Matching key: lower-cased, accents stripped, only letters and digits kept, the PTB
 * bracket words lrb/rrb/lsb/rsb removed ("It's (sic)" and "it 's -lrb- sic -rrb-"
 * share one key), British spellings folded as SST does ("learnt" -> "learned", "our"
 * -> "or" after the second letter of a word: humour, favourite). Caller frees. */
char *data_sentence_key(const char *s);

/* A WordPiece encoder over a vocab.txt (BERT uncased), independent of a model folder. */
typedef struct data_tok data_tok;
as_status data_tok_load(const char *vocab_path, data_tok **out, as_error *err);
void data_tok_free(data_tok *t);
int data_tok_vocab(const data_tok *t);
/* Encodes text without specials; *ids malloc'd (caller frees), *n tokens. */
as_status data_tok_encode(const data_tok *t, const char *text, int32_t **ids, int *n, as_error *err);

/* Tokenized sentences in one flat array. */
typedef struct {
    int n_sent;
    int32_t *off, *len, *doc; /* (n_sent) */
    int32_t *tok;             /* (n_tok) */
    size_t n_tok;
} data_corpus;
as_status data_tokenize(const data_tok *tk, const data_text *txt, data_corpus *out, as_error *err);
void data_corpus_free(data_corpus *c);

#define DATA_MASK_PROB 0.15f /* BERT's fraction of predicted tokens (Devlin et al. 2019) */

/* A masked-LM batch of sentence pairs [CLS] A [SEP] B [SEP]: A from consecutive
 * sentences of one document starting at a random sentence; B with probability 1/2
 * the sentences that follow A in the same document, else sentences from a random
 * place; both filled up to T - 3 tokens. mask_prob (DATA_MASK_PROB unless changed after
 * _init) of the non-special tokens (at least 1) are predicted: 80% replaced by [MASK],
 * 10% by a random non-special token, 10% kept (Devlin et al. 2019, sec. 3.1). Padded to the longest pair; arrays (B, T). */
typedef struct {
    int B, T;     /* capacity */
    int b, t;     /* this batch */
    int32_t *ids, *type_ids, *mask, *labels;
    int n_pred;
    int n_next;   /* pairs whose B follows A */
    float mask_prob; /* fraction of the non-special tokens predicted, in (0, 1) */
} data_mlm_batch;
as_status data_mlm_batch_init(data_mlm_batch *mb, int B, int T, as_error *err);
void data_mlm_batch_free(data_mlm_batch *mb);
/* Fills mb with b sequences drawn with rng; V = vocabulary size. */
void data_mlm_batch_make(data_mlm_batch *mb, const data_corpus *c, int b, int V, train_rng *rng);
/* Masks the given sequence in place (ids (t), labels (t) out): round(prob x candidates),
 * at least 1, of the positions whose ids are >= VOCAB_TRAIN_N_SPECIAL. Returns predictions. */
int data_mask(int32_t *ids, int32_t *labels, int t, int V, float prob, train_rng *rng);
/* The most predictions data_mlm_batch_make can make for b sequences of T tokens. */
int data_max_predictions(int b, int T, float prob);

/* ---- AdamW (optim.c) ---- */

/* Threads of the training loops and the optimizer (train_set_threads; default: the
 * cores). Work runs on the one thread pool of core/pool.h. */
#define TRAIN_MAX_THREADS 256
int train_threads(void);

/* AdamW (Loshchilov & Hutter 2019, Algorithm 2) over a model's flat parameters: decoupled
 * weight decay on weight matrices and embeddings only (not biases / LayerNorm, as BERT).
 * lr(step) = peak * step / warmup for step < warmup, then linear decay to 0 at total. */
typedef struct {
    float lr, beta1, beta2, eps, wd, clip; /* clip: max global gradient norm, 0 = none */
    int warmup, total;
    int64_t step;  /* updates done */
    size_t n;
    float *m, *v;  /* (n) owned */
} trainop_adamw;
as_status trainop_adamw_init(trainop_adamw *o, size_t n, as_error *err);
void trainop_adamw_free(trainop_adamw *o);
float trainop_adamw_lr(const trainop_adamw *o, int64_t step);
/* Clips the gradients g (o->n) to o->clip (when > 0), applies one update to p (decay:
 * model_params_decay_mask, 1 = decayed); returns the gradient norm before clipping. No
 * result depends on the thread count. */
float trainop_adamw_step(trainop_adamw *o, float *p, const float *g, const uint8_t *decay);
/* The update itself on n elements (Algorithm 2 with torch's bias correction): g scaled by
 * gscale into the moments mm, vv; p = p * decay - step_size * mm / (sqrt(vv) * rbc2 + eps),
 * decay = 1 - lr * weight_decay (1 when not decayed), step_size = lr / (1 - b1^t),
 * rbc2 = 1 / sqrt(1 - b2^t). */
void trainop_adamw_span(float *restrict p, const float *restrict g, float *restrict mm, float *restrict vv, size_t n,
                        float gscale, float b1, float b2, float decay, float step_size, float rbc2, float eps);

/* ---- checkpoints (checkpoint.c) ---- */

/* DIR/trainer_state.bin: magic, step, seed, the Adam moments. Written atomically
 * (temporary file + rename). Errors name the file. */
as_status checkpoint_state_save(const char *dir, const trainop_adamw *o, uint64_t seed, as_error *err);
/* Loads the state into o (o->n must match); *seed returned. */
as_status checkpoint_state_load(const char *dir, trainop_adamw *o, uint64_t *seed, as_error *err);

/* A model made trainable: loaded, its weights owned (p: the F32 values in model_grads
 * layout, model_params_own), gradients g of the same layout, and AdamW's decay mask. */
typedef struct {
    as_model *m;
    model_grads p, g;
    uint8_t *decay; /* (p.n) 1 = weight decay (model_params_decay_mask) */
    grad_groups gg; /* bert_batch_loss's group gradient buffers across steps (bert_loss_opts.keep) */
} trainable;
/* Loads dir (a folder bert_ckpt_write wrote, or any supported checkpoint) as trainable.
 * Errors: those of as_model_load and bert_ckpt_config; out of memory. */
as_status trainable_load(const char *dir, trainable *t, as_error *err);
void trainable_free(trainable *t);

#endif
