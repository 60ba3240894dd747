/* model.h — internal definition of as_model and the pieces every architecture file
 * shares: weight binding (name lookup with or without the task prefix, shape checks,
 * dtype conversion), linear / layer-norm views, and the transformer layer with
 * attention capture (encoder.c). One file per architecture family binds its weights
 * and computes its embeddings and task heads: bert.c (BERT, RoBERTa, ELECTRA),
 * distilbert.c, gpt2.c, llama.c, and the encoder-decoder families bart.c (BART, mBART,
 * Marian) and t5.c (T5, mT5), whose decoder stack is a second as_model view (dec).
 *
 * Dimension legend: L layers, H heads, T tokens, D model width, Dh head width,
 * F feed-forward width, V vocabulary, P max positions, C classes, De embedding width.
 */
#ifndef AS_MODEL_H
#define AS_MODEL_H

#include "core/core.h"
#include "io/safetensors.h"
#include "tokenize/tokenizer.h"

/* A linear map y = x W^T + b (nn.Linear, w is (n_out, n_in)) or y = x W + b
 * (GPT-2 Conv1D, w is (n_in, n_out) with row stride ldw, which may be wider than
 * n_out for views into fused c_attn). Borrowed pointers into model weights. */
typedef struct {
    const float *w; /* (n_out, n_in) or (n_in, ldw); NULL when only wbf is held */
    const uint16_t *wbf; /* (n_out, n_in) BF16 weights, rows contiguous (nn.Linear layout): read in
                            place from the mapping (then w is NULL), or the BF16 copy that
                            precision bf16 makes of w */
    const uint32_t *wpk; /* wbf packed for as_gemm_bf16_xwt_packed (core/gemm_bf16.h), made when
                            the precision is set to bf16 on a CPU with the AVX-512 BF16 kernel
                            (owned by the model), else NULL; always wbf's current values */
    const float *b; /* (n_out) or NULL */
    int n_in, n_out, ldw;
    int in_out;     /* 1 = Conv1D layout (n_in, n_out) */
    const char *wname; /* the weight tensor's name in the checkpoint (borrowed), for gradients */
    int part_off;   /* a view into a fused tensor: its first row (nn.Linear) or column (Conv1D) */
} lin_t;

/* LayerNorm (g, b) or RMSNorm (g only, b NULL); g NULL = no norm there. */
/* 1 when the map exists (F32 or BF16 weights). */
static inline int lin_has(const lin_t *l) { return l->w != NULL || l->wbf != NULL; }

typedef struct {
    const float *g, *b; /* (n) */
    int n;
    const char *gname, *bname; /* tensor names in the checkpoint (borrowed), for gradients */
} ln_t;

typedef struct {
    lin_t q;        /* (D -> H Dh) */
    lin_t k, v;     /* (D -> Hkv Dh); Hkv = H except with grouped-query attention */
    lin_t o;        /* (H Dh -> D) */
    ln_t ln1;       /* post-LN: after attention; pre-norm (GPT-2, LLaMA family): before attention */
    lin_t ff1;      /* (D -> F); the gate projection of a gated MLP */
    lin_t up;       /* (D -> F) gated MLP's up projection; w NULL otherwise */
    lin_t ff2;      /* (F -> D) */
    ln_t ln2;       /* post-LN: after the feed-forward; pre-norm: before it */
    ln_t post_attn; /* Gemma 2/3: norm of the attention output before the residual add */
    ln_t post_ff;   /* Gemma 2/3: norm of the MLP output before the residual add */
    ln_t q_norm, k_norm; /* (Dh) Qwen3 / Gemma 3: RMSNorm of each head's q and k */
    /* cross-attention of an encoder-decoder model's decoder layers (keys and values from the
       encoder's output); cq.w NULL elsewhere */
    lin_t cq;       /* (D -> H Dh) on the decoder's stream */
    lin_t ck, cv;   /* (D -> H Dh) on the encoder's output */
    lin_t co;       /* (H Dh -> D) */
    ln_t ln_c;      /* post-LN: after the cross-attention; pre-norm: before it */
} layer_w;

enum { CLS_ACT_NONE = 0, CLS_ACT_TANH, CLS_ACT_RELU, CLS_ACT_GELU };

struct as_model {
    char *dir;
    as_config cfg;
    st_set *st;           /* owns the mappings */
    tok_tokenizer *tok;   /* NULL when the folder has no tokenizer files */
    char tok_unsupported[AS_ERR_MSG_MAX]; /* why the tokenizer files were not used, or "" */
    const char *prefix;   /* "bert.", "roberta.", ... or "" as found in the file */
    as_dtype dtype;       /* dtype of the stored float weights */
    size_t n_params;
    float **owned;        /* converted (F16/BF16/unaligned) tensors and BF16 copies, owned */
    int keep_bf16;        /* BF16 matrices stay in the mapping (LLaMA family): no F32 copy */
    as_precision precision; /* arithmetic of the linear maps (as_model_set_precision) */
    int n_owned, cap_owned;
    int pre_ln;           /* 1 for GPT-2 and the LLaMA family */
    int pos_offset;       /* RoBERTa: padding_idx + 1 first position; else 0 */
    /* embeddings */
    const float *wte;     /* (V, De); NULL when wte_bf holds the table */
    const uint16_t *wte_bf; /* (V, De) LLaMA family's BF16 embedding table read in place, else NULL */
    const float *wpe;     /* (P, De); NULL with rotary positions */
    const float *wtt;     /* (type_vocab, De) or NULL */
    ln_t ln_emb;          /* (De) BERT family; unused for GPT-2 */
    float *mean_wte;      /* (De) mean word embedding, owned (for ABLATE_TOKEN) */
    float *mean_wpe;      /* (De) mean position embedding, owned */
    float *mean_wtt;      /* (De) mean token-type embedding, owned; NULL without types */
    lin_t emb_proj;       /* ELECTRA embeddings_project (De -> D); w NULL when absent */
    layer_w *layers;      /* (L) */
    ln_t ln_f;            /* final norm of pre-norm models (D): GPT-2 ln_f, LLaMA model.norm */
    float *rope_inv_freq; /* (2, rope_dim / 2) owned: global layers, then local (sliding) ones, for
                             forwards up to the scaling's original length (llama_rope_freqs) */
    float rope_mscale;    /* attention factor on cos/sin of the global layers (YaRN, LongRoPE), else 1 */
    unsigned heads;       /* bit set of as_task_head */
    /* sequence classifier */
    lin_t cls_pre;        /* BERT pooler / RoBERTa+ELECTRA classifier.dense / DistilBERT pre_classifier */
    lin_t cls_out;        /* (D -> C) */
    int cls_pre_act;      /* CLS_ACT_*: activation after cls_pre */
    int cls_last_token;   /* GPT-2 score head: classify the last non-pad token */
    /* masked-LM / LM head */
    lin_t mlm_dense;      /* (D -> D); w NULL for GPT-2 */
    as_act mlm_act;       /* activation after mlm_dense */
    ln_t mlm_ln;          /* (D) */
    const float *mlm_decoder; /* (V, D): tied word embeddings or explicit decoder */
    lin_t lm_head;        /* (D -> V) LLaMA family's untied lm_head (may be BF16 in place); w and wbf
                             NULL otherwise (mlm_decoder is used) */
    const float *mlm_bias;    /* (V) or NULL */
    /* encoder-decoder models (bart.c): this model is the encoder stack (its layers, ln_f the
       final encoder norm of pre-norm models) and dec the decoder stack, an as_model view
       sharing this one's mapping and owned weights (its own layers, cfg with causal = 1,
       n_layer = n_dec_layer, and the LM head); NULL for other models */
    struct as_model *dec;
    const float *rel_bias; /* (n_buckets, H) T5: the stack's relative position bias (its first
                              layer's relative_attention_bias), NULL elsewhere */
};

/* 1 when the LM head is the masked-LM decoder seen as a linear map (as_model_set_precision
 * bf16 makes it so the decoder multiplies in BF16): its gradient is the decoder's (the word
 * table's when tied), and model_grads gives it no slot of its own. */
static inline int model_lm_head_is_decoder(const as_model *m) {
    return m->lm_head.w && m->lm_head.w == m->mlm_decoder;
}

/* ---- weight binding (model.c) ---- */

/* Finds tensor `name` (tried as prefix+name, then name, then with the prefix
 * stripped), checks dtype is float and shape equals (d0[, d1]) (d1 = -1: 1-D), and
 * returns an f32 pointer (borrowed from the mmap when F32 and aligned, else
 * converted into memory owned by m). required = 0: *out = NULL when absent.
 * Errors: AS_ERR_INPUT naming the tensor (missing, wrong dtype, wrong shape). */
as_status model_get(as_model *m, const char *name, int64_t d0, int64_t d1, int required,
                    const float **out, as_error *err);
/* The BF16 matrix `name` (d0, d1) borrowed from the mapping when the model keeps BF16
 * weights (m->keep_bf16) and the tensor is BF16 and 2-byte aligned; *out = NULL when
 * not (the caller converts it through model_get). Errors: AS_ERR_INPUT for non-finite
 * values. */
as_status model_get_bf16(as_model *m, const char *name, int64_t d0, int64_t d1, const uint16_t **out,
                         as_error *err);
as_status model_get_lin(as_model *m, const char *base, int n_in, int n_out, int in_out,
                        int bias_required, lin_t *out, as_error *err);
as_status model_get_ln(as_model *m, const char *base, int n, const char *gname,
                       const char *bname, ln_t *out, as_error *err);
/* The decoder stack of an encoder-decoder model as an as_model view set as m->dec: m's
 * config with n_dec_layer layers, causal, no labels, m's file, prefix and dtype (weights
 * bound by the caller, owned by m). NULL when out of memory. */
as_model *model_decoder_view(as_model *m);
int model_has(const as_model *m, const char *name);
/* The checkpoint's name of tensor `name` (looked up as model_get does; borrowed from the
 * mapping), or NULL. */
const char *model_tensor_name(const as_model *m, const char *name);
/* Sets m->cfg.num_labels from the rows of classifier weight `name` (exact name),
 * checked against the config when it states a count. Errors: AS_ERR_INPUT. */
as_status model_classes_from(as_model *m, const char *name, as_error *err);

/* Architecture binders: fill the weight views of m (m->cfg is parsed). */
as_status bert_bind(as_model *m, as_error *err);
as_status distilbert_bind(as_model *m, as_error *err);
as_status gpt2_bind(as_model *m, as_error *err);
as_status llama_bind(as_model *m, as_error *err);
as_status bart_bind(as_model *m, as_error *err);
as_status t5_bind(as_model *m, as_error *err);
/* Frees what bart_bind / t5_bind allocated for the decoder view m->dec (not the shared
 * weights). */
void bart_free_dec(struct as_model *dec);

/* ---- operations on the thread pool (par_ops.c) ---- */

/* What model_par_begin replaces, restored by model_par_end. */
typedef struct {
    int threads, blas_threads, fixed;
    float *conv;
    size_t conv_per_thread;
    uint16_t *xb, *dyb, *dwb;
    size_t dyb_cap, dwb_cap;
} par_state;
/* Sets, for the calling thread, the pool threads of the pass, the linear maps' scratch
 * (conv: per thread conv_per_thread floats >= as_gemm_bf16_scratch(widest input); xb:
 * (T, widest input) BF16 input at precision bf16, else NULL), and OpenBLAS to one thread. */
void model_par_begin(int nthreads, float *conv, size_t conv_per_thread, uint16_t *xb, par_state *saved);
/* Within a pass (after model_par_begin): the input gradients dx = dy W of BF16 weights run
 * in BF16 (dy rounded into dyb, cap values; products of up to cap / T outputs; wider ones
 * and F32 weights stay F32); conv must then also hold as_gemm_bf16_xw_scratch(widest
 * input) floats a thread. dyb NULL: F32 again. model_par_end restores the caller's. */
void model_par_bf16_dx(uint16_t *dyb, size_t cap);
/* Within a pass: the weight gradients of maps with BF16 weights run in BF16 (both operands
 * rounded into dwb, cap values: products with T (rows + columns of dW) <= cap; larger ones
 * and F32 weights stay F32); conv as for model_par_bf16_dx. dwb NULL: F32 again. */
void model_par_bf16_dw(uint16_t *dwb, size_t cap);
/* Within a pass: products split into blocks of columns that depend on their size only,
 * not on the thread count, so their results do not either (a few more, smaller calls). */
void model_par_fixed_blocks(void);
void model_par_end(const par_state *saved);
int model_par_threads(void);

/* ---- what the backward needs of a forward (backward.c) ---- */

/* One layer's saved activations; Qw = H Dh, Kw = Hkv Dh. NULL when the layer has none. */
typedef struct {
    float *x_in;   /* (T, D) the layer's input (norm1's input; post-LN: the attention's) */
    float *mid;    /* (T, D) pre-norm: the residual after attention (norm2's input); post-LN:
                      input + attention output (LN1's input) */
    float *r2;     /* (T, D) post-LN: LN2's input; Gemma: the MLP output (post_ff's input) */
    float *o_out;  /* (T, D) Gemma: the attention output (post_attn's input) */
    float *qn_in, *kn_in; /* (T, Qw), (T, Kw): inputs of the q / k norms (Qwen3, Gemma 3) */
    float *q, *k, *v; /* (T, Qw), (T, Kw), (T, Kw) as attention used them (after norm and RoPE) */
    float *P;      /* (H, T, T) attention probabilities */
    float *S;      /* (H, T, T) soft-capped scores (Gemma 2) */
    float *ff_pre; /* (T, F) the first (gate) projection, before the activation */
    float *up;     /* (T, F) the up projection of a gated MLP */
    float *ctx;    /* (T, Qw) the heads' outputs (the output projection's input) */
    /* dropout masks (0 or 1 / (1 - p)), NULL when the forward has no dropout */
    float *m_attn; /* (H, T, T) on the attention probabilities (the P that multiplies V) */
    float *m_ao;   /* (T, D) on the attention sub-layer's output, before the residual add */
    float *m_ff;   /* (T, D) on the feed-forward sub-layer's output, before the residual add */
} tape_layer;

typedef struct {
    int T;
    tape_layer *lay; /* (L) */
    float *x_last;   /* (T, D) residual stream after the last layer (before a final norm) */
    float *block;    /* owns everything above */
    size_t cap;
    /* training-mode dropout (model_tape_dropout): probability p_drop at the sites of
       Hugging Face's BERT (embeddings output, attention probabilities, each sub-layer's
       output before its residual add, the pooled classifier input); the forward draws
       its masks from drop_seed, which the caller changes for every sequence and step */
    float p_drop;
    uint64_t drop_seed;
    float *m_emb;    /* (T, D) on the embeddings' output */
    float *m_cls;    /* (n) on the classifier's pooled vector (cls_pre's output), or NULL */
    float *drop_block; /* owns the masks */
    size_t drop_cap;
} model_tape;

/* Sizes a tape for T tokens of m. Errors: AS_ERR_INTERNAL (out of memory). */
as_status model_tape_init(const as_model *m, int T, model_tape *tp, as_error *err);
void model_tape_free(model_tape *tp);
/* Turns training-mode dropout on (p in (0, 1)) or off (p = 0) for the forwards that fill
 * tp, allocating its masks. Dropout site ids: 0 embeddings, 1 classifier, 4 (l + 1) + k for
 * layer l (k: 0 attention probabilities, 1 attention output, 2 feed-forward output).
 * Errors: p outside [0, 1), out of memory. */
as_status model_tape_dropout(const as_model *m, model_tape *tp, float p, as_error *err);

/* Parameter gradients, accumulated by model_backward: one F32 buffer per weight view of
 * the model (a lin_t's gradient in its weight's layout; views into a fused tensor have
 * their own), NULL where the model has no such weight. Tied LM heads add to wte. */
typedef struct {
    float *w, *b; /* (n_out, n_in) (Conv1D: (n_in, n_out)), (n_out) */
} lin_grad;
typedef struct {
    float *g, *b; /* (n) */
} ln_grad;
typedef struct {
    lin_grad q, k, v, o, ff1, up, ff2;
    ln_grad ln1, ln2, post_attn, post_ff, q_norm, k_norm;
} layer_grad;
typedef struct {
    layer_grad *layers;            /* (L) */
    float *wte, *wpe, *wtt;        /* (V, De), (P, De), (TV, De) */
    float *mlm_decoder, *mlm_bias; /* an untied MLM decoder (V, D) and its bias (V) */
    ln_grad ln_emb, ln_f, mlm_ln;
    lin_grad emb_proj, cls_pre, cls_out, mlm_dense, lm_head;
    float *block; /* owns every buffer above */
    size_t n;     /* floats in block */
} model_grads;

/* Allocates zeroed gradients for every parameter of m. Errors: AS_ERR_INTERNAL. */
as_status model_grads_init(const as_model *m, model_grads *g, as_error *err);
void model_grads_zero(model_grads *g);
void model_grads_free(model_grads *g);

/* ---- a batch's weight gradients in one product per map (dw_stage.c) ---- */

/* At precision bf16, the layers' linear maps' dW = dy^T x of a chunk of n_seq sequences of
 * T tokens each, summed in one BF16 product per map with K = n_seq T (instead of one per
 * sequence) and added to the batch's gradient by model_dw_stage_flush: each sequence's
 * backward only rounds its two operands into its own columns. Same sums at any thread
 * count. Owned by its caller; one chunk at a time. */
typedef struct model_dw_stage model_dw_stage;
/* A stage for m's maps, their gradients located by layout (any model_grads of m), and up
 * to `threads` threads in the flush. *out = NULL (AS_OK) when there is nothing to stage:
 * precision f32, n_seq < 2, or a stage over DW_STAGE_BUDGET (1.5 GiB, dw_stage.c). Errors:
 * out of memory. */
as_status model_dw_stage_init(const as_model *m, const model_grads *layout, int n_seq, int T, int threads,
                              model_dw_stage **out, as_error *err);
void model_dw_stage_free(model_dw_stage *s); /* NULL: no-op */
/* 1 when s serves model_dw_stage_init's arguments. */
int model_dw_stage_fits(const model_dw_stage *s, const as_model *m, const model_grads *layout, int n_seq, int T,
                        int threads);
/* For the backwards the calling thread runs next: they are sequence seq (< n_seq) of the
 * chunk and accumulate into buf (of the layout); op_linear_dw then stages the layers' maps
 * (T tokens only) instead of multiplying. s NULL: products again. */
void model_dw_stage_seq(model_dw_stage *s, int seq, const model_grads *buf);
/* op_linear_dw's hook: 1 when it staged dW += dy^T x of l (dw: l's gradient in the buffer
 * given to model_dw_stage_seq), 0 when the caller multiplies. */
int model_dw_stage_put(const lin_t *l, const float *x, const float *dy, int T, const float *dw);
/* g (of the layout) += the staged products, split by rows of dW over up to `threads`
 * threads; the stage is then empty. g NULL: the staged products are discarded. */
void model_dw_stage_flush(model_dw_stage *s, model_grads *g, int threads);

/* ---- trainable weights (params.c) ---- */

/* Copies every weight of m into writable F32 memory laid out as m's model_grads (p: the
 * same buffers, holding weights) and points m's views at it. The caller owns p and frees
 * it (model_grads_free) after the last use of m. BF16 weights are widened; the precision
 * returns to F32. Errors: out of memory. */
as_status model_params_own(as_model *m, model_grads *p, as_error *err);
/* At precision bf16: the BF16 copies of the linear maps (as_model_set_precision made them)
 * rounded again from their F32 weights, which a training step changed in place; threads
 * <= 0: one per core. At F32: nothing. Errors: out of memory. */
as_status model_params_round_bf16(as_model *m, int threads, as_error *err);
/* mask (p->n) = 1 for the floats of weight matrices and embedding tables (AdamW decays
 * them), 0 for biases and norm gains. */
void model_params_decay_mask(const as_model *m, const model_grads *p, uint8_t *mask);
/* Writes dir/model.safetensors (F32, every tensor of the model's checkpoint under its
 * name: the current weights, fused tensors reassembled from their views, unbound ones as
 * stored) and copies config.json and the tokenizer files of src_dir. */
as_status model_params_save(const as_model *m, const char *src_dir, const char *dir, as_error *err);
/* The F32 data of checkpoint tensor `name` (n floats) as m holds it now (its own copy
 * after model_params_own), or NULL when m does not bind it as one whole buffer. Borrowed. */
const float *model_param_data(const as_model *m, const char *name, size_t n);

/* The forward (encoder.c) with, optionally, word vectors instead of the table's rows
 * (word: (T, De)) and a tape to fill (spec must ask for logits, without ablation). */
as_status model_forward(const as_model *m, const as_encoding *enc, const as_capture_spec *spec, const float *word,
                        model_tape *tape, as_run **out, as_error *err);

/* ---- generation with a key/value cache (encoder.c) ---- */

/* What a causal decoder's forward keeps of its positions between generation steps:
 * every layer's keys (after RoPE) and values, rows (cap, Kw = Hkv Dh) per layer. One
 * owner; model_kv_free releases it. */
typedef struct {
    int cap;      /* positions it holds */
    int n;        /* positions filled: the next step's tokens start at position n */
    int layers;   /* L */
    size_t Kw;    /* floats of one position's keys (n_kv_head x d_head) */
    float *k, *v; /* (L, cap, Kw) */
    size_t bytes_;
} model_kv;
/* 1 when model_forward_step serves m: a decoder with only self-attention (GPT-2, the
 * LLaMA family) whose RoPE frequencies do not depend on the length (not dynamic NTK or
 * LongRoPE, which transformers recomputes per length); else 0 (generation runs the whole
 * sequence at each step). */
int model_kv_supported(const as_model *m);
/* An empty cache for cap positions. Errors: AS_ERR_INPUT when cap is not in 1 .. the
 * model's positions (as_model_max_tokens); AS_ERR_INTERNAL when out of memory. */
as_status model_kv_init(const as_model *m, int cap, model_kv *kv, as_error *err);
void model_kv_free(model_kv *kv);
/* An encoder-decoder model's generation state: the source through the encoder once, its
 * output projected to every decoder layer's cross-attention keys and values once, and the
 * decoder's own key/value cache. One owner; model_s2s_kv_free releases it. */
typedef struct {
    model_kv self;         /* the decoder's self-attention cache */
    float *ck, *cv;        /* (Ld, Ts, Kw) every decoder layer's cross-attention keys, values */
    float *keep_mem;       /* (Ts) 1 for real source tokens, 0 for padding */
    int Ts;
    size_t bytes_;
} model_s2s_kv;
/* 1 when m is an encoder-decoder model (BART, mBART, Marian, T5, mT5): model_s2s_* serve it. */
int model_s2s_kv_supported(const as_model *m);
/* Runs src through m's encoder and fills kv for a decoder sequence of up to cap positions.
 * Errors: AS_ERR_INPUT when m is not served, src is not a valid input or cap is not in 1 ..
 * the decoder's positions; AS_ERR_INTERNAL when out of memory (kv is then empty). */
as_status model_s2s_kv_init(const as_model *m, const as_encoding *src, int cap, int threads, model_s2s_kv *kv,
                            as_error *err);
void model_s2s_kv_free(model_s2s_kv *kv);
/* One decoder step: ids (n >= 1) at decoder positions kv->self.n .. + n - 1 through every
 * decoder layer, self-attention on the cache, cross-attention on the encoder's keys and
 * values (kv->self.n grows by n). logits (V): the LM head's scores of the last of them;
 * rows, when not NULL: (Ld, H, Ts) every decoder layer's cross-attention probabilities of
 * the last of them (the rows the full forward gives, to rounding). Errors as
 * model_forward_step's. */
as_status model_s2s_step(const as_model *m, model_s2s_kv *kv, const int32_t *ids, int n, int threads,
                         float *logits, float *rows, as_error *err);
/* A decoder cache for one beam of an encoder-decoder model's beam search (as model_kv_init
 * on m's decoder); AS_ERR_INPUT when m is not served. */
as_status model_s2s_beam_cache(const as_model *m, int cap, model_kv *kv, as_error *err);
/* One decoder step of nb beams of an encoder-decoder model: ids[b] at decoder position n
 * (every beams[b] holding n positions, made by model_s2s_beam_cache) as one batch of rows,
 * row b's self-attention on beams[b], every row's cross-attention on kv's encoder keys and
 * values (kv->self is not used). logits (nb, V). Errors as model_forward_beams'. */
as_status model_s2s_beams(const as_model *m, model_s2s_kv *kv, model_kv *beams, int nb, const int32_t *ids,
                          int threads, float *logits, as_error *err);
/* One step of nb beams, each with its own cache (kv[b], every one holding the same n
 * positions): ids[b] at position n through every layer as one batch of nb rows, row b's
 * attention reading kv[b] (each kv[b].n becomes n + 1). logits (nb, V): the LM head's
 * scores of each row. Nothing captured. Rounds as model_forward_step does for one beam.
 * Errors: as model_forward_step's, and AS_ERR_INPUT when the caches hold different counts. */
as_status model_forward_beams(const as_model *m, model_kv *kv, int nb, const int32_t *ids, int threads,
                              float *logits, as_error *err);
/* dst holds what src holds: src's n positions of every layer copied (both made by
 * model_kv_init for one model with the same cap). */
void model_kv_copy(model_kv *dst, const model_kv *src);
/* One generation step of the one forward: ids (n >= 1) at positions kv->n .. kv->n + n - 1
 * through every layer, their attention reading the cache's keys and values before them
 * (kv->n grows by n). logits (V): the LM head's scores of the last of them; rows, when not
 * NULL: (L, H, kv->n + n), every layer's and head's attention probabilities of the last
 * of them over all the keys (the row the full forward would give, to rounding). No other
 * capture, ablation or intervention. Errors: AS_ERR_INPUT when the model is not served
 * (model_kv_supported), an id is out of the vocabulary or the cache is full;
 * AS_ERR_INTERNAL when out of memory. */
as_status model_forward_step(const as_model *m, model_kv *kv, const int32_t *ids, int n, int threads,
                             float *logits, float *rows, as_error *err);

/* Backward of that forward for the scalar y = sum(dlogits * logits) (dlogits shaped like
 * r->logits): d_word (T, De) = dy / d(word vectors); d_attn (L, H, T, T), when non-NULL,
 * = dy / d(attention probabilities) as used in P V (masked entries included); d_word may
 * be NULL. model_backward_params also accumulates into pg dy / d(every parameter) (the
 * table rows looked up get their share unless word vectors were given). word: what the
 * forward was given (NULL: table rows). */
as_status model_backward(const as_model *m, const as_encoding *enc, const float *word, const model_tape *tp,
                         const as_run *r, const float *dlogits, int threads, float *d_word, float *d_attn,
                         as_error *err);
as_status model_backward_params(const as_model *m, const as_encoding *enc, const float *word,
                                const model_tape *tp, const as_run *r, const float *dlogits, int threads,
                                float *d_word, float *d_attn, model_grads *pg, as_error *err);
/* The same for y = sum(dlogits * logits) + sum(d_top * h), h (T, D) the task head's input
 * (the last layer's output, after a final norm): a loss computed outside the forward's
 * head (masked-LM rows, hidden-state distillation) enters through d_top. dlogits may be
 * NULL (then the forward need not have computed logits), d_top too. Gradients accumulate
 * into pg. */
as_status model_backward_top(const as_model *m, const as_encoding *enc, const model_tape *tp, const as_run *r,
                             const float *dlogits, const float *d_top, int threads, model_grads *pg,
                             as_error *err);

/* ---- the masked-LM / LM head on chosen rows (training losses) ---- */

/* logits (n, V) of the vocabulary head (masked-LM transform + decoder, or the LM head)
 * on x (n, D), rows of final hidden states; both functions give the same results at any
 * thread count (model_par_fixed_blocks). Errors: out of memory. */
as_status model_vocab_rows(const as_model *m, const float *x, int n, int threads, float *logits, as_error *err);
/* Its backward for y = sum(dlogits * logits): dx (n, D) overwritten, the head's parameter
 * gradients accumulated into pg (may be NULL). Errors: out of memory. */
as_status model_vocab_rows_backward(const as_model *m, const float *x, int n, const float *dlogits, int threads,
                                    float *dx, model_grads *pg, as_error *err);

/* ---- compute (encoder.c) ---- */

/* Additive mask value for disallowed attention, as Hugging Face uses
 * (torch.finfo(float32).min). */
#define AS_MASK_VALUE (-3.4028234663852886e+38f)

void op_linear(const lin_t *l, const float *x, int T, float *y);          /* x (T, n_in) -> y (T, n_out) */
/* ys[i] (T, ls[i]->n_out) = x ls[i]^T + b_i for 1..4 maps of the same input width (q, k and
 * v; a gated MLP's gate and up): one rounding of x at precision bf16, and the maps' columns
 * split among the threads together. */
void op_linear_n(const lin_t *const *ls, int n, const float *x, int T, float *const *ys);
/* x (T, l->n_in) = act(x), or act(x) * up when up is given (gated MLP), in place; then
 * y (T, l->n_out) = x W^T + b (op_linear), the BF16 rounding of x that a product at
 * precision bf16 reads made in the activation's pass. */
void op_act_linear(as_act a, float *x, const float *up, const lin_t *l, int T, float *y);
void op_layernorm(const ln_t *ln, float eps, float *x, int T);            /* in place, x (T, n) */
void op_rmsnorm(const ln_t *ln, float eps, int add_one, float *x, int T); /* in place, x (T, n) */
void op_glu(as_act a, float *gate, const float *up, size_t n);            /* gate = act(gate) * up */
/* Normalises the rows of x (T, ln->n) in place: LayerNorm, or RMSNorm for models that
 * use it; nothing when the model has no norm there (g NULL). */
void model_norm_rows(const as_model *m, const ln_t *ln, float *x, int T);
/* dx (T, n_in) = dy (T, n_out) W (+ dx when accumulate): the input gradient of op_linear. */
void op_linear_dx(const lin_t *l, const float *dy, int T, float *dx, int accumulate);
/* Weight gradients of op_linear, accumulated: dw (the weight's layout: (n_out, n_in), or
 * (n_in, n_out) for Conv1D) += from x (T, n_in) and dy (T, n_out); db (n_out) += column
 * sums of dy. Either may be NULL. */
void op_linear_dw(const lin_t *l, const float *x, const float *dy, int T, float *dw, float *db);
void op_act(as_act a, float *x, size_t n);                                /* in place */
void op_add(float *y, const float *x, size_t n);                         /* y += x */

/* What the embeddings read: the encoding, the components ablated (as_ablate bits), and
 * optionally the word vectors to use instead of the table's rows (saliency, integrated
 * gradients). */
typedef struct {
    const as_encoding *enc;
    unsigned ablate;
    const float *word; /* (T, De) or NULL */
    int pos0;          /* position of the encoding's first token (a generation step's), else 0 */
    int one_pos;       /* 1: every token at pos0 (a beam step's rows: one token of each beam) */
} emb_in;

/* Computes embeddings into x (T, D) for the architecture. */
void bert_embed(const as_model *m, const emb_in *in, float *x, float *tmp);
void distilbert_embed(const as_model *m, const emb_in *in, float *x);
void gpt2_embed(const as_model *m, const emb_in *in, float *x);
/* Position id of token t (t itself; RoBERTa: padding_idx + running count of non-pad tokens,
 * pads at padding_idx, counted in *count, which starts at 0 and is passed for t = 0, 1, ...). */
int bert_position(const as_model *m, const as_encoding *enc, int t, int *count);
/* The sums before the embedding LayerNorm, e (T, De) (the backward recomputes them). */
void bert_embed_sum(const as_model *m, const emb_in *in, float *e);
void distilbert_embed_sum(const as_model *m, const emb_in *in, float *e);
/* BART family: word embeddings times emb_scale, plus positions (offset pos_offset), then
 * layernorm_embedding where the model has it; x (T, D). */
void bart_embed(const as_model *m, const emb_in *in, float *x);
/* LLaMA family: word embeddings (times emb_scale for Gemma) into x (T, D). */
void llama_embed(const as_model *m, const emb_in *in, float *x);
/* LLaMA family: the rope_dim / 2 inverse frequencies (in float, as transformers computes
 * them) of the global layers (local 0) or of Gemma 3's sliding layers (local 1: the
 * unscaled rope_local_base_freq ones; other families' local table is the global one) in a
 * forward over n_pos positions (0: as bound at load), and the factor on cos and sin. */
void llama_rope_freqs(const as_config *c, int local, int n_pos, float *inv, float *mscale);
/* LLaMA family: the cos / sin tables (op_rope_table) of positions p0 .. p0 + T - 1 (all 0
 * when still) into cs (2, T, rope_dim): the global layers' (with their factor on cos and
 * sin), then the local (Gemma 3 sliding) layers'. Row t is at position p0 + dp t (a
 * generation step's rows start at p0 > 0; a beam step's, dp 0, share one position; the
 * length-dependent frequencies below take the length p0 + T, never with beams). The frequencies are those bound at load
 * (rope_inv_freq), except the global ones of the scalings that depend on the length
 * (dynamic NTK past max_position_embeddings, LongRoPE's long factors past
 * original_max_position_embeddings), computed here. AS_ERR_INTERNAL: out of memory. */
as_status llama_rope_tables(const as_model *m, int p0, int dp, int T, int still, float *cs);
/* Rows of the embedding tables to add for token t, honouring ablation. */
const float *model_emb_word(const as_model *m, const emb_in *in, int t);
const float *model_emb_pos(const as_model *m, unsigned ablate, int pos);
/* Exclusive upper bound of token type ids: the segment table's rows, or (GPT-2, type
 * ids given by the caller) the vocabulary, whose rows HF adds; 1 when neither. */
int model_type_id_limit(const as_model *m, int given);
const float *model_emb_type(const as_model *m, const as_encoding *enc, unsigned ablate, int t);
/* Task heads: x (T, D) final hidden states -> logits (rows, cols); cls_mask: dropout
 * mask of the classifier's pooled vector (cls_pre.n_out), or NULL. */
void model_head_logits(const as_model *m, const as_encoding *enc, const float *x, const float *cls_mask,
                       float *logits, float *work);
/* The masked-LM / LM head on x (T, D) -> logits (T, V); work (T, D). On the caller's pool
 * state (model_par_begin). */
void model_vocab_logits(const as_model *m, const float *x, int T, float *logits, float *work);

#endif
