/* attnscope/train.h — training, as the `attnscope vocab / pretrain / finetune / eval /
 * distill` commands run it. Part of the tools' API (see attnscope.h, "Library and
 * tools"): the WordPiece vocabulary trainer, corpus reading, and the pretraining,
 * fine-tuning, evaluation and distillation loops with their options.
 * What it does not: the numerics (forward, backward, AdamW) or the batches, which are
 * internal to the library (src/train/train.h, src/train/trainer.h), nor argument
 * parsing (src/cli).
 *
 * Reproducibility: every random choice (data order, masking, dropout seeds) is a pure
 * function of (seed, step), so a run resumed from a checkpoint at step s draws the
 * same batches as an uninterrupted run.
 */
#ifndef ATTNSCOPE_TRAIN_H
#define ATTNSCOPE_TRAIN_H

#include "attnscope.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DATA_MAX_FILES 64 /* files in one list (corpus, exclude, eval files) */

/* ---- vocabulary trainer ---- */

/* Trains a WordPiece vocabulary of at most size entries on the text files (each read
 * as data_text describes) and writes it, one piece per line, to out_path.
 * Normaliser and pre-tokenizer: BERT uncased (lower-case, strip accents, split on
 * whitespace and punctuation). Entries: the 5 specials, every character seen at least
 * min_char_count times and its "##" form, then BPE-style merges of the most frequent
 * adjacent pair (ties: the lexicographically smaller pair of strings), as Hugging
 * Face's WordPieceTrainer builds it. Errors: AS_ERR_INPUT for unreadable files, size
 * too small for the alphabet; *n_out = entries written. */
typedef struct {
    int size;           /* target vocabulary size, >= 64 */
    int min_char_count; /* characters rarer than this are left out (become [UNK]); default 1 */
    const char *const *exclude; /* TSV files whose sentences are dropped (n_exclude) */
    int n_exclude;
} vocab_train_opts;
as_status vocab_train_run(const char *const *files, int n_files, const vocab_train_opts *o, const char *out_path,
                    int *n_out, as_error *err);

/* Writes DIR/vocab.txt (copy of vocab_path), DIR/tokenizer_config.json (uncased) and a
 * Hugging Face tokenizer.json (BertNormalizer, BertPreTokenizer, WordPiece,
 * [CLS] A [SEP] B [SEP] template) for the vocabulary. Creates DIR when missing. */
as_status vocab_train_write_tokenizer(const char *vocab_path, const char *dir, int max_len, as_error *err);

/* ---- corpora ---- */

/* Sentences of text files, before tokenization. Formats by extension:
 *   .conllu  the "# text = " lines; "# newdoc" starts a document
 *   .tsv     the "sentence" column (header "sentence\tlabel" or "index\tsentence");
 *            the whole file is one document stream
 *   other    one sentence per non-empty line; a blank line ends a document */
typedef struct {
    int n;
    char **text;  /* (n) owned */
    int32_t *doc; /* (n) document number */
} data_text;
void data_text_free(data_text *t);
/* Reads all files (plus filtering) into one data_text; documents numbered across files. */
as_status data_read_corpus(const char *const *files, int n_files, const char *const *exclude, int n_exclude,
                          data_text *out, int *n_dropped, as_error *err);

/* ---- loops ---- */

/* Sets the threads (<= 0: all cores) of the training and evaluation loops: the
 * passes and the optimizer run on the library's thread pool, OpenBLAS outside them;
 * call before them. No result depends on the count. */
void train_set_threads(int threads);

typedef struct {
    const char *const *corpus; int n_corpus;
    const char *const *exclude; int n_exclude;
    const char *vocab;      /* vocab.txt */
    const char *out;        /* output folder */
    int layers, width, heads, ff, max_len;
    int seq_len;            /* tokens per training sequence (0 = max_len; <= max_len) */
    int steps, batch, warmup, save_every, log_every, threads, resume;
    float lr, wd, dropout, clip;
    uint64_t seed;
    as_dtype dtype;         /* of the final model */
    const char *log_path;   /* TSV of step, loss, lr, ... (NULL = OUT/train_log.tsv) */
    int stop_after;         /* > 0: stop after this step as if interrupted, once its checkpoint is
                               written (tests of --resume); 0 = run to the end */
    int quiet;              /* no progress lines */
    float init_range;       /* std of the normal initialisation (0 = 0.02) */
    int pos_sinusoidal;     /* start the position embeddings from sinusoids
                               instead of N(0, 0.02) */
    float mask_prob;        /* fraction of tokens predicted (0 = 0.15, BERT's) */
    as_precision precision; /* arithmetic of the products: bf16 runs the forward's, the input
                               gradients' and the weight gradients' in BF16 with F32 sums
                               against F32 master weights (re-rounded after every step) */
} pretrain_opts;
void pretrain_opts_default(pretrain_opts *o);
/* Pretrains a BERT MLM model. Checkpoints (F32 weights + trainer_state.bin + tokenizer
 * files) go to OUT/checkpoint every save_every steps and at the end; the final model
 * to OUT in o->dtype. resume: continues from OUT/checkpoint. Progress on stderr. */
as_status pretrain_run(const pretrain_opts *o, as_error *err);

typedef struct {
    const char *task;       /* "sst2" */
    const char *model, *train, *dev, *out;
    int epochs, batch, threads, max_len, max_train;
    float lr, wd, dropout, clip, warmup_frac;
    uint64_t seed;
    as_dtype dtype;
    as_precision precision; /* as pretrain_opts.precision */
} finetune_opts;
void finetune_opts_default(finetune_opts *o);
/* Fine-tunes a sequence classifier (labels NEGATIVE/POSITIVE for sst2); evaluates on
 * dev after each epoch and saves the best epoch to OUT. *best_acc. */
as_status finetune_run(const finetune_opts *o, float *best_acc, as_error *err);

/* Accuracy of a classifier folder on a labelled SST-2 style TSV. */
as_status finetune_eval_cls(const char *model_dir, const char *tsv, int threads, int max_len, float *acc, int *n,
                       as_error *err);
/* Masked-token accuracy of an MLM folder on held-out text (files as data_text describes):
 * pairs built as in pretraining with a fixed seed; *acc over n_batches x batch. */
as_status finetune_eval_mlm(const char *model_dir, const char *const *files, int n_files, int n_batches, int batch,
                       int max_len, uint64_t seed, float *acc, float *loss, as_error *err);

typedef struct {
    const char *teacher, *out;
    const char *const *corpus; int n_corpus;
    const char *const *exclude; int n_exclude;
    int steps, batch, max_len, threads, log_every;
    float lr, wd, dropout, clip, temperature, alpha_kl, alpha_mlm, alpha_cos;
    uint64_t seed;
    as_dtype dtype;
    as_precision precision; /* the student's, as pretrain_opts.precision */
} distill_opts;
void distill_opts_default(distill_opts *o);
/* DistilBERT-style distillation (Sanh et al. 2019): student = every other teacher
 * layer; loss = alpha_kl T^2 KL(teacher_T || student_T) on the masked positions +
 * alpha_mlm MLM + alpha_cos (1 - cos) between final hidden states. */
as_status distill_run(const distill_opts *o, as_error *err);

/* Trains a byte-level BPE vocabulary of `size` entries (<s> </s> <pad>, the 256 bytes,
 * then merges) on the sentences of the corpus files minus those of the exclude files
 * (data_read_corpus) and writes DIR/tokenizer.json (ByteLevel
 * pre-tokenizer with GPT-2's pattern, BPE model, <s> first) and tokenizer_config.json,
 * which attnscope and Hugging Face tokenizers load identically (train/bpe_train.c).
 * *n_out: the entries written (fewer than size when no pair occurs twice). */
as_status bpe_vocab_train(const char *const *files, int n_files, const char *const *exclude, int n_exclude, int size,
                          const char *dir, int *n_out, as_error *err);

/* Causal-LM training of a decoder with an LM head (GPT-2, the LLaMA family) on the
 * engine's one forward and backward (src/train/lm_train.c): next-token cross-entropy on
 * seeded random windows of the packed corpus (documents as data_read_corpus reads them,
 * BOS first, sentences separated by a line break; exclude's sentences left out),
 * global-norm clipping, AdamW with warmup then cosine decay to 10%; the trained weights
 * written to out_dir in F32 under the checkpoint's own names, with its config and
 * tokenizer files; checkpoints in out_dir/checkpoint, from which resume continues with
 * results identical to an uninterrupted run. */
typedef struct {
    const char *model_dir, *out_dir;
    const char *const *corpus; int n_corpus;
    const char *const *exclude; int n_exclude; /* held-out files: their sentences are left out */
    int steps, batch, seq, warmup, threads, log_every, quiet;
    int save_every; /* checkpoint out_dir/checkpoint every N steps (0 = never) */
    int resume;     /* continue from out_dir/checkpoint (weights, moments, step) */
    float repeat_frac; /* from step repeat_from on, this fraction of the windows (seeded,
                          own stream) gets a span repeated right after itself
                          (lm_repeat_span): a curriculum for in-context copying */
    int repeat_from;
    float repeat_random; /* this fraction of the repeated spans is first filled with seeded
                            random token ids (uniform over ids >= 16 of the vocabulary), so
                            that only copying predicts the second copy */
    int repeat_ids; /* > 0: those random ids are drawn from the first repeat_ids ids >= 16
                       only (a smaller alphabet: an easier copying task); 0 = all */
    float bos_start; /* this fraction of the windows (seeded, own stream) is moved back to
                        the start of the document its random offset falls in, so that it
                        begins with BOS as a prompt does (0 = every window at its offset) */
    float bos_prefix; /* this fraction of the windows (seeded, own stream) keeps its random
                         offset but has its first token replaced by BOS: every such window
                         starts as a prompt does while the text stays uniformly sampled
                         (bos_start instead repeats the first window of each document);
                         not with bos_start */
    int stop_after; /* > 0: stop after this step (checkpoint and weights written there);
                       the schedule stays that of `steps` */
    float lr, weight_decay, clip, beta1, beta2, eps;
    uint64_t seed;
    float *loss_out; /* optional (steps): each step's loss */
    as_precision precision; /* as pretrain_opts.precision */
} lm_opts;
void lm_opts_default(lm_opts *o);
as_status lm_train_run(const lm_opts *o, as_error *err);

/* The token stream lm_train_run trains on, for corpus files read by data_read_corpus minus
 * the sentences of the exclude files: each document starts with the model's BOS (when it
 * has one), its sentences follow one another separated by the tokens of a line break.
 * *out (n tokens) is malloc'd and the caller's (free). *n_bytes (may be NULL): the bytes
 * of the text those tokens stand for, the sentences' UTF-8 bytes plus one byte before
 * each sentence but the first (the line break, or at a document boundary the BOS).
 * *n_dropped (may be NULL): held-out sentences left out. Errors: a model without
 * tokenizer files, unreadable corpus files. */
as_status lm_corpus_tokens(const as_model *m, const char *const *files, int n_files, const char *const *exclude,
                           int n_exclude, int32_t **out, size_t *n, size_t *n_bytes, int *n_dropped, as_error *err);

/* Next-token cross-entropy of a causal LM on a token stream ids (n) in windows of seq
 * tokens, a new window every stride tokens (src/train/lm_eval.c): the first window
 * [0, seq) scores its predictions of tokens 1..seq-1; the window [b, b + seq) then scores
 * only the tokens after the previous window's end, so every token after the first is
 * predicted exactly once, with at least seq - stride tokens of context once past the
 * first window (the last window ends at n). Each window is one forward from position 0.
 * bos_id >= 0: every window holds seq - 1 stream tokens and, unless its first token is
 * already bos_id, runs after a bos_id token put in front of it (the context a model that
 * always sees BOS first is used with); bos_id < 0: windows are the stream's tokens alone.
 * *nll_sum: the summed negative log-likelihood in nats (double precision log-softmax of
 * the model's logits); *n_pred = n - 1. Errors: no LM head, n < 2, seq < 2 or over the
 * model's positions, stride outside [1, seq - 1] ([1, seq - 2] with a BOS), token ids or
 * bos_id outside the vocabulary.
 * progress (may be NULL) is called after each window with the tokens scored so far. */
as_status lm_eval_windows(const as_model *m, const int32_t *ids, size_t n, int seq, int stride, int bos_id,
                          int threads, void (*progress)(size_t done, size_t total), double *nll_sum, size_t *n_pred,
                          as_error *err);

#ifdef __cplusplus
}
#endif
#endif
