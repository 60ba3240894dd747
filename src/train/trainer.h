/* trainer.h — the training pipeline above the forward/backward pass of train.h:
 * the WordPiece vocabulary trainer, corpus loading (text, CoNLL-U, SST-2 TSV) with
 * held-out sentence filtering, masked-LM batches on sentence pairs, AdamW with
 * warmup + linear decay and global-norm clipping, checkpoints with optimizer state,
 * and the pretrain / finetune / evaluate / distill loops the CLI runs.
 * What it does not: the numerics of the model (tr_forward.c), tokenizer loading for
 * inference (src/tokenize), argument parsing (src/cli/cmd_*.c). The options and entry
 * points the tools call are declared in include/attnscope/train.h.
 *
 * Dimension legend as in train.h: B sequences, T tokens, V vocabulary, D width.
 * Reproducibility: every random choice (data order, masking, dropout seeds) is a pure
 * function of (seed, step), so a run resumed from a checkpoint at step s draws the
 * same batches as an uninterrupted run.
 */
#ifndef AS_TRAINER_H
#define AS_TRAINER_H

#include "attnscope/train.h" /* the options and loops the tools call */
#include "train/train.h"

#define TRV_N_SPECIAL 5         /* [PAD] [UNK] [CLS] [SEP] [MASK] at ids 0..4 */
#define TRV_PAD 0
#define TRV_UNK 1
#define TRV_CLS 2
#define TRV_SEP 3
#define TRV_MASK 4
#define TRD_MAX_FILE_BYTES ((size_t)1 << 30)

/* ---- a tiny deterministic RNG (splitmix64) ---- */
typedef struct {
    uint64_t s;
} trr_rng;
trr_rng trr_seeded(uint64_t seed, uint64_t stream);
uint64_t trr_next(trr_rng *r);
double trr_uniform(trr_rng *r);            /* [0, 1) */
uint32_t trr_below(trr_rng *r, uint32_t n); /* [0, n), n > 0 */

/* ---- corpora (data.c) ---- */

/* Reads the sentences of one file (formats: trd_text in attnscope/train.h). */
as_status trd_read_sentences(const char *path, trd_text *out, int doc_base, as_error *err);
/* Drops every sentence whose key (trd_sentence_key) equals the key of a sentence in
 * one of the exclude files, or contains such a key of >= 24 characters. *n_dropped. */
as_status trd_filter(trd_text *t, const char *const *exclude, int n_exclude, int *n_dropped, as_error *err);
/* Matching key: lower-cased, accents stripped, only letters and digits kept, the PTB
 * bracket words lrb/rrb/lsb/rsb removed ("It's (sic)" and "it 's -lrb- sic -rrb-"
 * share one key), British spellings folded as SST does ("learnt" -> "learned", "our"
 * -> "or" after the second letter of a word: humour, favourite). Caller frees. */
char *trd_sentence_key(const char *s);

/* A WordPiece encoder over a vocab.txt (BERT uncased), independent of a model folder. */
typedef struct trd_tok trd_tok;
as_status trd_tok_load(const char *vocab_path, trd_tok **out, as_error *err);
void trd_tok_free(trd_tok *t);
int trd_tok_vocab(const trd_tok *t);
/* Encodes text without specials; *ids malloc'd (caller frees), *n tokens. */
as_status trd_tok_encode(const trd_tok *t, const char *text, int32_t **ids, int *n, as_error *err);

/* Tokenized sentences in one flat array. */
typedef struct {
    int n_sent;
    int32_t *off, *len, *doc; /* (n_sent) */
    int32_t *tok;             /* (n_tok) */
    size_t n_tok;
} trd_corpus;
as_status trd_tokenize(const trd_tok *tk, const trd_text *txt, trd_corpus *out, as_error *err);
void trd_corpus_free(trd_corpus *c);

#define TRD_MASK_PROB 0.15f /* BERT's fraction of predicted tokens (Devlin et al. 2019) */

/* A masked-LM batch of sentence pairs [CLS] A [SEP] B [SEP]: A from consecutive
 * sentences of one document starting at a random sentence; B with probability 1/2
 * the sentences that follow A in the same document, else sentences from a random
 * place; both filled up to T - 3 tokens. mask_prob (TRD_MASK_PROB unless changed after
 * _init) of the non-special tokens (at least 1) are predicted: 80% replaced by [MASK],
 * 10% by a random non-special token, 10% kept (Devlin et al. 2019, sec. 3.1). Padded to the longest pair; arrays (B, T). */
typedef struct {
    int B, T;     /* capacity */
    int b, t;     /* this batch */
    int32_t *ids, *type_ids, *mask, *labels;
    int n_pred;
    int n_next;   /* pairs whose B follows A */
    float mask_prob; /* fraction of the non-special tokens predicted, in (0, 1) */
} trd_mlm_batch;
as_status trd_mlm_batch_init(trd_mlm_batch *mb, int B, int T, as_error *err);
void trd_mlm_batch_free(trd_mlm_batch *mb);
/* Fills mb with b sequences drawn with rng; V = vocabulary size. */
void trd_mlm_batch_make(trd_mlm_batch *mb, const trd_corpus *c, int b, int V, trr_rng *rng);
/* Masks the given sequence in place (ids (t), labels (t) out): round(prob x candidates),
 * at least 1, of the positions whose ids are >= TRV_N_SPECIAL. Returns predictions. */
int trd_mask(int32_t *ids, int32_t *labels, int t, int V, float prob, trr_rng *rng);
/* The most predictions trd_mlm_batch_make can make for b sequences of T tokens. */
int trd_max_predictions(int b, int T, float prob);

/* ---- AdamW (optim.c) ---- */

/* AdamW (Loshchilov & Hutter 2019, Algorithm 2) over the model's flat arena: decoupled
 * weight decay on weight matrices and embeddings only (not biases / LayerNorm, as BERT).
 * lr(step) = peak * step / warmup for step < warmup, then linear decay to 0 at total. */
typedef struct {
    float lr, beta1, beta2, eps, wd, clip; /* clip: max global gradient norm, 0 = none */
    int warmup, total;
    int64_t step;  /* updates done */
    size_t n;
    float *m, *v;  /* (n) owned */
} tro_adamw;
as_status tro_adamw_init(tro_adamw *o, size_t n, as_error *err);
void tro_adamw_free(tro_adamw *o);
float tro_adamw_lr(const tro_adamw *o, int64_t step);
/* Clips the gradients to o->clip (when > 0), applies one update; returns the gradient
 * norm before clipping. */
float tro_adamw_step(tro_adamw *o, tr_model *m);

/* ---- checkpoints (checkpoint.c) ---- */

/* DIR/trainer_state.bin: magic, step, seed, the Adam moments. Written atomically
 * (temporary file + rename). Errors name the file. */
as_status trc_state_save(const char *dir, const tro_adamw *o, uint64_t seed, as_error *err);
/* Loads the state into o (o->n must match); *seed returned. */
as_status trc_state_load(const char *dir, tro_adamw *o, uint64_t *seed, as_error *err);
/* Loads DIR as a trainable model (as_model_load + tr_model_from_as). */
as_status trc_model_load(const char *dir, const tr_from_as_opts *fo, tr_model **out, as_error *err);

/* ---- loops (pretrain.c, finetune.c, distill.c) ---- */

/* Number of MLM rows of the last tr_forward whose argmax is the target. */
float tr_mlm_correct(const tr_acts *a, int V);

/* The distillation terms. zs, zt, d (M, V): returns mean_rows KL(softmax(zt/T) ||
 * softmax(zs/T)) and adds alpha * T^2 * its gradient w.r.t. zs (averaged over M) into d.
 * hs, ht, d_out (N, D), mask (N): returns mean over rows with mask != 0 of
 * 1 - cos(hs, ht) and adds alpha times its gradient w.r.t. hs into d_out. */
double trk_kl_grad(const float *zs, const float *zt, float *d, int M, int V, float T, float alpha);
double trk_cos_grad(const float *hs, const float *ht, const int32_t *mask, float *d_out, int N, int D, float alpha);

#endif
