/* train.h — training-grade forward and backward pass for the post-LN encoder family
 * (BERT, RoBERTa, DistilBERT): parameters, gradients and saved activations each in
 * one contiguous arena (llm.c style: a struct of pointers into one float block, the
 * same layout for the gradients, so an optimizer runs over flat arrays).
 *
 * What it does: embeddings (word + position + segment, LayerNorm), the post-LN layer
 * (fused QKV projection, masked softmax attention, output projection, residual +
 * LayerNorm, GELU feed-forward, residual + LayerNorm), inverted dropout from a seeded
 * counter-based RNG, the sequence classifier (first token -> dense -> tanh/ReLU ->
 * dense) with mean cross-entropy, and the masked-LM head (dense -> act -> LayerNorm
 * -> decoder tied to the word embeddings + bias) with mean cross-entropy over the
 * positions whose label is not -100; the backward pass of all of it; building the
 * arena from a loaded as_model (weights copied, or the large matrices borrowed in place
 * for a model that is only run: evaluation) or from a seeded random initialiser, and
 * writing it back out as a Hugging Face folder that as_model_load reads.
 * What it does not: GPT-2 / pre-LN layers, ELECTRA (embedding width != D), untied
 * MLM decoders, the optimizer, data loading, or checkpoint scheduling (callers).
 *
 * Dimension legend: L layers, H heads, T tokens per sequence, B sequences, BT = B*T,
 * D model width, Dh = D/H, F feed-forward width, V vocabulary, P positions,
 * TV token types, C classes, M masked-LM rows (labels != -100) in a batch.
 *
 * Usage:
 *   train_model *tm; train_from_as_opts fo = TRAIN_FROM_AS_DEFAULTS; fo.with_grads = 1;
 *   train_model_from_as(m, &fo, &tm, &err);
 *   train_acts *a; train_acts_init(tm, B, T, 0, &a, &err);
 *   train_batch b = {.B = B, .T = T, .ids = ids, .mask = mask, .cls_labels = y};
 *   train_zero_grad(tm);
 *   train_forward(tm, a, &b, &err);        // a->loss, a->cls_logits, dL/dlogits
 *   train_backward(tm, a, &b, 1);          // += into tm->grads; a->d_emb_out, a->d_emb_sum
 *   ... optimizer over tm->params_mem / tm->grads_mem (tm->n_params floats) ...
 *   train_model_save(tm, "out/dir", DTYPE_F16, &err);
 *   train_acts_free(a); train_model_free(tm);
 */
#ifndef AS_TRAIN_H
#define AS_TRAIN_H

#include "core/core.h"

/* Label value that masked-LM cross-entropy ignores (torch CrossEntropyLoss default). */
#define TRAIN_IGNORE (-100)

/* Activation after the classifier's first dense layer. */
typedef enum { TRAIN_CLS_TANH = 0, TRAIN_CLS_RELU = 1 } train_cls_act;

typedef struct {
    as_arch arch;       /* ARCH_BERT, ARCH_ROBERTA or ARCH_DISTILBERT */
    int n_layer;        /* L */
    int n_head;         /* H */
    int d_model;        /* D */
    int d_ff;           /* F */
    int vocab_size;     /* V */
    int max_pos;        /* P */
    int type_vocab;     /* TV; 0 = no segment embeddings (DistilBERT) */
    int num_labels;     /* C; 0 = no classifier head */
    int mlm;            /* 1 = masked-LM head present */
    float ln_eps;
    as_act act;         /* feed-forward activation (gelu = erf form) */
    as_act mlm_act;     /* activation in the MLM transform (RoBERTa: always gelu) */
    train_cls_act cls_act; /* BERT pooler / RoBERTa classifier.dense: tanh; DistilBERT: ReLU */
    int pad_token_id;   /* -1 none; RoBERTa position ids count non-pad tokens */
    int pos_offset;     /* RoBERTa: pad_token_id + 1 = first position id; else 0 */
    float init_range;   /* std of the normal initialisation (config.json initializer_range);
                           0 = Hugging Face's default 0.02 */
} train_config;

/* Parameter tensors, in arena order. Pointers into one block; NULL when the
 * config has no such tensor (wtt when TV = 0, heads absent). The gradient struct
 * has the same layout over its own block. */
typedef struct {
    float *wte;              /* (V, D) word embeddings; also the MLM decoder (tied) */
    float *wpe;              /* (P, D) position embeddings */
    float *wtt;              /* (TV, D) token-type embeddings */
    float *ln_e_g, *ln_e_b;  /* (D) embedding LayerNorm */
    float *qkv_w;            /* (L, 3D, D) rows: query, then key, then value (nn.Linear) */
    float *qkv_b;            /* (L, 3D) */
    float *o_w;              /* (L, D, D) attention output projection */
    float *o_b;              /* (L, D) */
    float *ln1_g, *ln1_b;    /* (L, D) after attention */
    float *f1_w;             /* (L, F, D) */
    float *f1_b;             /* (L, F) */
    float *f2_w;             /* (L, D, F) */
    float *f2_b;             /* (L, D) */
    float *ln2_g, *ln2_b;    /* (L, D) after the feed-forward */
    float *pool_w, *pool_b;  /* (D, D), (D): BERT pooler / RoBERTa classifier.dense / DistilBERT pre_classifier */
    float *cls_w, *cls_b;    /* (C, D), (C) */
    float *mlm_w, *mlm_b;    /* (D, D), (D) MLM transform dense */
    float *mlm_ln_g, *mlm_ln_b; /* (D) */
    float *mlm_bias;         /* (V) decoder bias */
} train_params;

#define TRAIN_N_TENSORS 26

/* The weight matrices of one layer, as the passes read them: views into params_mem
 * (q, k, v are row blocks of qkv_w), or into a loaded model's tensors when borrowed. */
typedef struct {
    const float *q, *k, *v; /* (D, D) each, [out, in] as nn.Linear */
    const float *o;         /* (D, D) */
    const float *f1;        /* (F, D) */
    const float *f2;        /* (D, F) */
} train_layer_w;

typedef struct {
    train_config cfg;
    train_params params;       /* views into params_mem; for a borrowed model wte, wpe and wtt
                                  point into the as_model (read-only) and qkv_w, o_w, f1_w,
                                  f2_w are NULL (the layer matrices are in lw only) */
    train_params grads;        /* views into grads_mem; all NULL when built without gradients */
    train_layer_w *lw;         /* (L) owned array of views: what train_forward / train_backward read */
    int borrowed;              /* 1: built with train_from_as_opts.borrow: valid while the as_model
                                  lives; no gradients, no optimizer, not savable */
    float *params_mem;      /* (n_params) owned; borrowed: only the tensors not borrowed */
    float *grads_mem;       /* (n_params) owned, or NULL */
    size_t n_params;           /* parameters of the model (borrowed ones included) */
    size_t sizes[TRAIN_N_TENSORS]; /* element count of each tensor in arena order (0 = absent) */
    char **labels;          /* (C) id2label names, owned; NULL = none */
} train_model;

/* A named view of one Hugging Face tensor inside the arena (q/k/v are row blocks of
 * qkv_w). name is owned by the view array; data is borrowed from the model. */
typedef struct {
    char name[96];
    const float *data;
    int ndim;
    int64_t shape[2];
    size_t n;
} train_named;

/* ---- building and saving (train_model.c) ---- */

/* Checks a config (architecture, sizes against the AS_MAX_* limits, D % H == 0,
 * pad id, positions). AS_ERR_INPUT naming the field. */
as_status train_config_check(const train_config *c, as_error *err);

/* Allocates a model with Hugging Face's initialisation (_init_weights): weights and
 * embeddings N(0, cfg->init_range or 0.02) from a seeded RNG, biases 0, LayerNorm gains 1, the padding
 * row of the word embeddings 0. with_grads: also allocate a zeroed gradient arena.
 * *out owned by the caller (train_model_free). */
as_status train_model_init(const train_config *cfg, uint64_t seed, int with_grads, train_model **out,
                        as_error *err);
/* Overwrites the position embeddings with the sinusoids of Vaswani et al. 2017
 * (sec. 3.5: PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(...)), scaled to the
 * root-mean-square of the normal initialisation (init_range). They stay trainable: this is
 * only a starting point in which a fixed offset is a linear map of the embedding,
 * so that heads attending to the previous / next token are easy to learn. */
void train_model_init_sinusoidal_positions(train_model *m);
/* The initialisation std of c: c->init_range, or 0.02 when unset. */
double train_init_std(const train_config *c);

typedef struct {
    int with_grads;  /* allocate the gradient arena */
    int num_labels;  /* -1 keep the model's classifier (if any); 0 drop it; C > 0: keep if the
                        model has C classes, else add a freshly initialised C-class head */
    int mlm;         /* -1 keep; 0 drop; 1 keep or add a freshly initialised MLM head */
    uint64_t seed;   /* for freshly initialised heads */
    int borrow;      /* 1: read the embeddings and the layer matrices in place from the
                        as_model (no copy; the model must outlive the train_model); the
                        biases, norms and heads are copied into a small arena. Requires
                        with_grads = 0 */
} train_from_as_opts;
#define TRAIN_FROM_AS_DEFAULTS {0, -1, -1, 1234, 0}

/* Copies a loaded model's weights into a new arena (any stored dtype; the as_model
 * keeps its own), or with o->borrow views its large tensors in place. The MLM decoder
 * must be tied to (equal to) the word embeddings.
 * Errors: AS_ERR_INPUT for GPT-2, ELECTRA with a projection, an untied decoder, borrow
 * with gradients. */
as_status train_model_from_as(const as_model *m, const train_from_as_opts *o, train_model **out,
                           as_error *err);
void train_model_free(train_model *m);
void train_zero_grad(train_model *m);

/* Fills out[0..n) with the Hugging Face names and views of the parameters
 * (which = 0) or gradients (which = 1; requires grads_mem) in the layout the model's
 * architecture uses (bert./roberta./distilbert. prefixed base, head names as
 * BertForSequenceClassification / BertForMaskedLM / Roberta... / DistilBert...).
 * Returns n (<= cap), or -1 when cap is too small. TRAIN_MAX_NAMED always suffices
 * for L <= AS_MAX_LAYERS. */
#define TRAIN_MAX_NAMED (16 * AS_MAX_LAYERS + 32)
int train_model_named(const train_model *m, int which, train_named *out, int cap);
/* The layer matrices of views built from params (owned models: lw[l] into qkv_w, ...). */
void train_model_bind_layers(train_model *m);

/* Writes DIR/config.json and DIR/model.safetensors (F32 or F16; tied decoder
 * omitted, as Hugging Face does) so that as_model_load(DIR) reads the same model.
 * Creates DIR when missing. Errors: AS_ERR_INPUT for another dtype, AS_ERR_INTERNAL
 * for I/O failures (naming the path). */
as_status train_model_save(const train_model *m, const char *dir, as_dtype dtype, as_error *err);
/* Copies the tokenizer files present in src_dir (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, vocab.txt, vocab.json, merges.txt) into dst_dir. */
as_status train_copy_tokenizer(const char *src_dir, const char *dst_dir, as_error *err);

/* ---- batches, activations, forward, backward (train_forward.c) ---- */

typedef struct {
    int B, T;
    const int32_t *ids;        /* (B, T) token ids */
    const int32_t *type_ids;   /* (B, T) segment ids, or NULL = all 0 */
    const int32_t *mask;       /* (B, T) 1 = real token, 0 = padding; NULL = all real */
    const int32_t *cls_labels; /* (B) class per sequence, or NULL = no classifier loss */
    const int32_t *mlm_labels; /* (B, T) target id or TRAIN_IGNORE, or NULL = no MLM head run */
    const float *word_embeds;  /* (B, T, D) replaces wte[ids] (saliency, integrated gradients);
                                  NULL = look up. No wte gradient is accumulated when set. */
} train_batch;

/* Saved activations and gradient scratch for batches of at most B x T (one float
 * arena sized from B, T and the config). Dropout probabilities and seed are read by
 * both train_forward and train_backward: set them before train_forward and leave them until
 * train_backward has run (masks are recomputed from (seed, site, index), not stored). */
typedef struct {
    int B, T, M_max;           /* capacity */
    int nthr;                  /* per-thread scratch slots (the cores, at most TRAIN_MAX_THREADS) */
    int threads;               /* threads of a pass (train_set_threads's count at init; the
                                  caller may change it; no result depends on it) */
    int nblk;                  /* blocks of sequences (train_forward.c) at capacity */
    int split;                 /* this pass is one block: each step is split over the threads
                                  (columns of the products, heads), weights read unpacked */
    size_t n_floats;           /* size of the arena */
    float p_hidden;            /* dropout after the embeddings, each sub-layer's output, the pooler */
    float p_attn;              /* dropout on attention probabilities */
    uint64_t seed;             /* dropout seed; change it every step */
    /* saved by train_forward; row r = b * T + t */
    int32_t *pos;              /* (BT) position ids */
    float *emb_sum;            /* (BT, D) word + position + segment (embedding LayerNorm input) */
    float *emb_mean, *emb_rstd;/* (BT) */
    float *resid;              /* (L + 1, BT, D) [0] embedding output (after LN + dropout), [l + 1] layer l output */
    float *qkv;                /* (L, BT, 3D) */
    float *att;                /* (L, B, H, T, T) softmax probabilities before dropout */
    float *ctx;                /* (L, BT, D) attention context (heads concatenated) */
    float *res1;               /* (L, BT, D) LN1 input: x + dropout(ctx Wo^T + bo) */
    float *mean1, *rstd1;      /* (L, BT) */
    float *h1;                 /* (L, BT, D) LN1 output */
    float *fpre;               /* (L, BT, F) ff1 output before the activation */
    float *fact;               /* (L, BT, F) after the activation */
    float *res2;               /* (L, BT, D) LN2 input */
    float *mean2, *rstd2;      /* (L, BT) */
    float *cls_h0;             /* (B, D) first-token states */
    float *cls_pool;           /* (B, D) after dense + activation */
    float *cls_poold;          /* (B, D) after dropout */
    float *cls_logits;         /* (B, C) */
    float *d_cls_logits;       /* (B, C) dLoss/dlogits (set by train_forward; caller may change) */
    int n_mlm;                 /* M rows in this batch */
    int32_t *mlm_rows;         /* (M_max) row index b * T + t of each MLM row */
    int32_t *mlm_tgt;          /* (M_max) target ids */
    int32_t *blk_mlm;          /* (nblk + 1) first MLM row of each block of sequences */
    float *mlm_h;              /* (M_max, D) gathered final states */
    float *mlm_t1, *mlm_t2, *mlm_t3; /* (M_max, D) dense, act, LayerNorm outputs */
    float *mlm_mean, *mlm_rstd;/* (M_max) */
    float *mlm_logits;         /* (M_max, V) */
    float *d_mlm_logits;       /* (M_max, V) dLoss/dlogits */
    float loss_cls, loss_mlm;  /* mean cross-entropies (0 when absent) */
    float loss;                /* loss_cls + loss_mlm */
    /* gradients w.r.t. activations */
    float *d_out;              /* (BT, D) dLoss/d final states beyond the heads: zeroed by train_forward,
                                  the caller may add (e.g. a hidden-state distillation loss) */
    float *d_emb_out;          /* (BT, D) dLoss/d embedding output (input of layer 0) after train_backward */
    float *d_emb_sum;          /* (BT, D) dLoss/d (word + position + segment) = dLoss/d word vectors */
    /* scratch; (2, ...): one set for even layers, one for odd */
    float *d_x, *d_y, *d_h1, *d_ctx; /* (BT, D) each */
    float *d_h, *d_t;          /* (2, BT, D) dLoss/d LN2 input, and after the feed-forward dropout */
    float *d_r1, *d_ao;        /* (2, BT, D) dLoss/d LN1 input, and after the attention-output dropout */
    float *d_ff;               /* (2, BT, F) */
    float *d_qkv;              /* (2, BT, 3D) */
    float *d_m1, *d_m2, *d_m3; /* (max(M_max, B), D) */
    float *scr;                /* (nthr, ...) per-thread attention scratch (train_forward.c) */
    float *wpack;              /* the weights of the current pass, packed for trainop_gemm (train_forward.c) */
    float *part;               /* per-block partial sums of bias and LayerNorm gradients (train_forward.c) */
    double *row_loss;          /* (max(M_max, B)) cross-entropy of each row, summed in row order */
    float *block;              /* the arena (core.h as_large_get: reused, not zeroed) */
    size_t block_cap;          /* its capacity in bytes */
    int32_t *iblock;
} train_acts;

/* Allocates activations for batches up to B x T; max_mlm = capacity in MLM rows
 * (0 = B * T). Dropout starts at 0. *out owned by the caller (train_acts_free). */
as_status train_acts_init(const train_model *m, int B, int T, int max_mlm, train_acts **out, as_error *err);
void train_acts_free(train_acts *a);
size_t train_acts_bytes(const train_acts *a);

/* Runs the forward pass on b (b->B <= a->B, b->T == a->T), saving activations.
 * With labels: a->loss_* and the dLoss/dlogits buffers are filled (total loss =
 * loss_cls + loss_mlm); without: the dlogit buffers are zero. Zeroes a->d_out.
 * Errors: AS_ERR_INPUT for ids / type ids / labels out of range, more MLM rows than
 * capacity, a batch larger than the activations. */
as_status train_forward(const train_model *m, train_acts *a, const train_batch *b, as_error *err);

/* Back-propagates a->d_cls_logits, a->d_mlm_logits and a->d_out through the saved
 * activations of the last train_forward on the same batch. param_grads = 1: adds into
 * m->grads (call train_zero_grad first; requires grads_mem); 0: computes only the
 * gradients w.r.t. activations (a->d_emb_out, a->d_emb_sum), about twice as fast. */
void train_backward(train_model *m, train_acts *a, const train_batch *b, int param_grads);

/* Threads of the training passes and the optimizer (train_set_threads; default: the
 * cores). Work runs on the one thread pool of core/pool.h. */
#define TRAIN_MAX_THREADS 256
int train_threads(void);

/* The dropout keep decision used for site/index: 1 with probability 1 - p. */
int train_dropout_keep(uint64_t seed, uint32_t site, uint64_t idx, float p);

#endif
