/* bert_ckpt.h — Hugging Face folders of the BERT family (BERT, RoBERTa, DistilBERT) for
 * training: the architecture described as data (train_config), its tensors under their
 * Hugging Face names, and one writer that makes every folder the training commands need
 * (config.json + model.safetensors, F32 or F16, that as_model_load reads): a fresh model
 * with Hugging Face's initialisation (pretraining), a loaded model with a new or dropped
 * head (fine-tuning), a student from every other teacher layer (distillation), and a
 * trained model saved. Training itself runs on the loaded as_model (bert_loss.h).
 * What it does not: GPT-2 / pre-norm layers, ELECTRA's embedding projection, untied MLM
 * decoders, tokenizer training (vocab_train.c).
 *
 * Dimension legend: L layers, H heads, D width, F feed-forward width, V vocabulary,
 * P positions, TV token types, C classes.
 */
#ifndef AS_BERT_CKPT_H
#define AS_BERT_CKPT_H

#include "model/model.h"

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

/* Checks a config (architecture, sizes against the AS_MAX_* limits, D % H == 0, pad id,
 * positions). AS_ERR_INPUT naming the field. */
as_status train_config_check(const train_config *c, as_error *err);
/* The initialisation std of c: c->init_range, or 0.02 when unset. */
double train_init_std(const train_config *c);
/* The config of a loaded model with both its heads (num_labels 0 / mlm 0 when absent).
 * Errors: AS_ERR_INPUT for models training does not support (GPT-2 and pre-norm models,
 * decoders, ELECTRA with a projection, an untied MLM decoder, BF16-only weights). */
as_status bert_ckpt_config(const as_model *m, train_config *c, as_error *err);

typedef struct {
    const as_model *src;    /* weights to copy, found by their Hugging Face names; NULL = none */
    const int *layer_of;    /* (L) layer l copies src's layer layer_of[l]; NULL = l */
    uint64_t seed;          /* initialisation of every tensor src does not have (a new head) */
    int sinusoidal;         /* new position embeddings: Vaswani et al.'s sinusoids (see below) */
    char *const *labels;    /* (C) id2label names, or NULL = LABEL_i (or src's when it has C) */
    as_dtype dtype;         /* DTYPE_F32 or DTYPE_F16 */
} bert_ckpt_opts;

/* Writes dir/config.json and dir/model.safetensors of the model c describes (creating
 * dir): each tensor from o->src when it has one of that name and shape, else initialised
 * as Hugging Face's _init_weights does (weights and embeddings N(0, init std) from one
 * seeded stream, biases 0, LayerNorm gains 1, the padding rows of the word (and RoBERTa's
 * position) embeddings 0), sinusoidal positions when asked (Vaswani et al. 2017, sec. 3.5,
 * scaled to the normal initialisation's root-mean-square: PE[p, 2i] = sin(p / 10000^(2i/D)),
 * PE[p, 2i+1] = cos(...)). The tied decoder is not stored (as Hugging Face does). A model
 * file already there is replaced (unlinked first: a mapping of it stays valid).
 * Errors: AS_ERR_INPUT for a bad config or dtype; AS_ERR_INTERNAL for I/O (naming the path). */
as_status bert_ckpt_write(const char *dir, const train_config *c, const bert_ckpt_opts *o, as_error *err);

/* Copies the tokenizer files present in src_dir (tokenizer.json, tokenizer_config.json,
 * special_tokens_map.json, vocab.txt, vocab.json, merges.txt) into dst_dir. */
as_status train_copy_tokenizer(const char *src_dir, const char *dst_dir, as_error *err);
/* Removes dir/config.json, dir/model.safetensors, the tokenizer files and dir itself (a
 * scratch folder written by bert_ckpt_write). */
void bert_ckpt_remove(const char *dir);

#endif
