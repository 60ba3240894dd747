/* attnscope.h — the public C API of the attnscope engine.
 *
 * What it does: loads a Hugging Face model folder (config.json, model.safetensors
 * or a sharded index, tokenizer files), tokenizes text exactly as the model's own
 * tokenizer does, runs the forward pass and captures attention internals.
 * What it does not: training, corpus analysis, serving. The library's training loops,
 * corpus analysis and .npy reading have their own headers in include/attnscope/ (the
 * API the attnscope tools use, see the end of this comment); serving is a tool
 * (src/server), not part of the library.
 *
 * Tutorial
 * --------
 *   as_error err;
 *   as_model *m = NULL;
 *   if (as_model_load("models/tiny", &m, &err) != AS_OK) {
 *       fprintf(stderr, "attnscope: %s\n", err.msg);     // one line, names the problem
 *       return err.code;                                   // 2 bad input, 1 internal
 *   }
 *   as_encoding enc = {0};
 *   as_encode_opts eo = { .max_len = 0, .truncate = 1 }; // 0 = model's max positions
 *   as_encode(m, "The cat sat.", "It was tired.", &eo, &enc, &err);
 *
 *   as_capture_spec spec = { .what = CAP_ALL, .layer = -1, .head = -1 };
 *   as_run *run = NULL;
 *   as_forward(m, &enc, &spec, &run, &err);
 *   const float *a = as_run_attn(run, 0, 3);   // (T, T) rows = query token, sum to 1
 *   ...
 *   as_run_free(run);
 *   as_encoding_free(&enc);
 *   as_model_free(m);
 *
 * Dimension letters used in shape comments: L layers, H heads, T tokens,
 * D model width, Dh head width, F feed-forward width, V vocabulary, C classes.
 *
 * Ownership: every X_init/X_load has an X_free; X_free(NULL) is a no-op.
 * Captured tensors belong to the as_run; pointers into it are valid until
 * as_run_free. Weights are mmap'd read-only and owned by the as_model.
 *
 * Library and tools: libattnscope (src/core, io, tokenize, model, train, analysis)
 * exposes only include/. This header is the stable API; the sub-headers
 *   attnscope/train.h     vocabulary training, pretraining, fine-tuning, evaluation, distillation
 *   attnscope/analysis.h  saliency, corpus analysis and import, reports, the analysis database
 *   attnscope/npy.h       reading float32 .npy files (imported attention)
 *   attnscope/attn_npz.h  attention computed elsewhere, read from an .npz into a run
 *   attnscope/beam.h      beam search over the forward (`attnscope generate --beams`)
 * are the API of the higher layers that the tools (the CLI in src/cli, the server in
 * src/server) are built on; they follow the library's internals more closely and may
 * change with them.
 */
#ifndef ATTNSCOPE_H
#define ATTNSCOPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AS_VERSION "0.1.0"

/* ---- errors ------------------------------------------------------------ */

/* Exit statuses of the CLI are these codes. */
typedef enum {
    AS_OK = 0,
    AS_ERR_INTERNAL = 1, /* a bug, out of memory, an I/O failure not caused by input */
    AS_ERR_INPUT = 2     /* bad file, bad argument, bad text: the caller's to fix */
} as_status;

#define AS_ERR_MSG_MAX 512
typedef struct {
    as_status code;
    char msg[AS_ERR_MSG_MAX]; /* one line, no trailing newline */
} as_error;

#if defined(__GNUC__)
#define AS_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define AS_PRINTF(a, b)
#endif

/* Sets err (when non-NULL) to code and a one-line message; returns code.
 * Newlines in the formatted message are replaced by spaces. */
as_status as_err_set(as_error *err, as_status code, const char *fmt, ...) AS_PRINTF(3, 4);
/* Prefixes an already-set err->msg with "prefix: ". Returns err->code. */
as_status as_err_prefix(as_error *err, const char *fmt, ...) AS_PRINTF(2, 3);
void as_err_clear(as_error *err);

/* Warnings go to stderr with an "attnscope: warning: " prefix unless silenced. */
void as_warn(const char *fmt, ...) AS_PRINTF(1, 2);
void as_set_quiet(int quiet);

/* Programmer bug: prints "assertion failed" with file:line on stderr and aborts.
 * Never used for untrusted input (that returns an as_status). Needs <stdio.h> and
 * <stdlib.h>. */
#define AS_ASSERT(x)                                                                      \
    do {                                                                                  \
        if (!(x)) {                                                                       \
            fprintf(stderr, "attnscope: assertion failed: %s at %s:%d\n", #x, __FILE__,   \
                    __LINE__);                                                            \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* ---- named limits (every size read from a file is checked against these) */
#define AS_MAX_LAYERS 256
#define AS_MAX_HEADS 256
#define AS_MAX_DMODEL 65536
#define AS_MAX_VOCAB 4000000
#define AS_MAX_POSITIONS 65536
#define AS_MAX_LABELS 4096
#define AS_MAX_EOS_IDS 8         /* ids config.json's eos_token_id may list */
#define AS_MAX_BAD_WORDS 64      /* sequences of config.json's bad_words_ids held */
#define AS_MAX_BAD_WORD_LEN 8    /* ids of one of them */
#define AS_MAX_ROPE_PAIRS 256    /* rotated pairs of a head (rope_dim / 2) that LongRoPE's factor lists may cover */
#define AS_NPZ_EXTRA_MAX_DIMS 5  /* dimensions of an as_npz_extra array */
/* layers x heads of one run in an analysis database (its head-pair matrix is that
   squared); GPT-2 XL has 1,200 */
#define AS_MAX_RUN_HEADS 4096

/* ---- configuration ------------------------------------------------------ */

/* ARCH_LLAMA: the decoder LLM family (model_type llama, mistral, qwen2, qwen3, gemma2,
 * gemma3_text, phi3), one block description in as_config's decoder fields below.
 * ARCH_BART: the encoder-decoder family (model_type bart, mbart, marian): an encoder stack
 * and a decoder stack whose layers also attend to the encoder's output (n_dec_layer > 0).
 * ARCH_T5: t5, mt5: encoder-decoder with relative position buckets and RMS norms. */
typedef enum { ARCH_BERT = 0, ARCH_ROBERTA, ARCH_DISTILBERT, ARCH_GPT2, ARCH_LLAMA, ARCH_BART, ARCH_T5 } as_arch;
/* gelu = erf form; gelu_new = tanh form (also gelu_pytorch_tanh); silu = x * sigmoid(x) */
typedef enum { ACT_GELU = 0, ACT_GELU_NEW, ACT_RELU, ACT_SILU } as_act;
/* rope_scaling "type"/"rope_type" values the engine computes (others are refused by name).
 * DYNAMIC and LONGROPE depend on the forward's length (as_config's rope fields). */
typedef enum {
    ROPE_SCALE_NONE = 0,
    ROPE_SCALE_LINEAR,
    ROPE_SCALE_LLAMA3,
    ROPE_SCALE_YARN,
    ROPE_SCALE_DYNAMIC,
    ROPE_SCALE_LONGROPE
} as_rope_scale;
typedef enum { DTYPE_F32 = 0, DTYPE_F16, DTYPE_BF16, DTYPE_I64, DTYPE_I32, DTYPE_OTHER } as_dtype;

typedef struct {
    as_arch arch;
    char model_type[32]; /* as in config.json: bert, roberta, distilbert, gpt2, electra, ... */
    int n_layer;         /* L */
    int n_head;          /* H */
    int d_model;         /* D */
    int d_head;          /* Dh = D / H */
    int d_ff;            /* F */
    int d_embed;         /* embedding width (ELECTRA may differ from D; else == D) */
    int vocab_size;      /* V */
    int max_pos;         /* max_position_embeddings / n_positions (rotary models: at most
                            AS_MAX_POSITIONS; config.json may say more, e.g. 131072; dynamic NTK
                            scaling, which exists to run past it: AS_MAX_POSITIONS) */
    int type_vocab;      /* number of segment types; 0 when the model has none */
    int pad_token_id;    /* -1 when none */
    int causal;          /* 1 for GPT-2 */
    float ln_eps;
    as_act act;
    int num_labels;      /* classifier classes C; 0 when no id2label / num_labels */
    char **id2label;     /* (C) owned by the config, may be NULL */
    int sinusoidal_pos;  /* DistilBERT sinusoidal_pos_embds (weights still read from file) */
    int attn_unscaled;   /* GPT-2 scale_attn_weights false: scores are q.k, not q.k / sqrt(Dh) */
    int attn_layer_scale; /* GPT-2 scale_attn_by_inverse_layer_idx: scores also / (layer + 1) */
    /* Decoder LLM block description (ARCH_LLAMA; zero for the other families). The layer is
     * pre-norm: x += [post_norm](Attn(norm1(x))); x += [post_norm](MLP(norm2(x))); then the
     * final norm and the LM head. */
    int n_kv_head;       /* key/value heads (grouped-query attention: query head h reads kv head
                            h / (n_head / n_kv_head)); == n_head for the other families */
    int rms_norm;        /* RMSNorm (Zhang & Sennrich 2019) instead of LayerNorm; eps in ln_eps */
    int norm_add_one;    /* Gemma: RMSNorm scales by (1 + w) */
    int post_norms;      /* Gemma 2/3: post_attention_layernorm and post_feedforward_layernorm on each
                            sub-layer's output before the residual add */
    int gated_mlp;       /* MLP = down(act(gate(x)) * up(x)) (SwiGLU / GeGLU); act is the activation */
    int qkv_bias;        /* biases on q, k, v (attention_bias; Qwen2 always) */
    int o_bias;          /* bias on the attention output projection (attention_bias) */
    int mlp_bias;        /* biases on gate, up and down (mlp_bias) */
    int qk_norm;         /* Qwen3 / Gemma 3: RMSNorm over each head's q and k (Dh) before RoPE */
    int tie_word_embeddings; /* LM head = embed_tokens^T */
    float emb_scale;     /* Gemma: embeddings times sqrt(D) (rounded to the weights' dtype); 0 = none */
    float query_scale;   /* factor on q.k when the config fixes it (Gemma: query_pre_attn_scalar^-1/2);
                            0 = 1/sqrt(Dh) */
    float attn_softcap;  /* Gemma 2: scores = c * tanh(scores / c); 0 = none */
    float final_softcap; /* Gemma 2: logits = c * tanh(logits / c); 0 = none */
    int rope_dim;        /* rotated dimensions of each head (partial_rotary_factor * Dh, even);
                            0 = no rotary embedding */
    float rope_theta;    /* rotary base (global layers) */
    float rope_local_theta; /* Gemma 3 sliding-window layers' base (rope_local_base_freq), no
                               scaling there; 0 = rope_theta for every layer */
    as_rope_scale rope_scaling; /* applies to every layer, except the sliding layers of a model
                                   with rope_local_theta (Gemma 3), which use unscaled RoPE */
    float rope_factor;   /* linear / llama3 / yarn / dynamic / longrope factor */
    float rope_low_freq_factor, rope_high_freq_factor; /* llama3 */
    int rope_orig_max_pos; /* llama3, yarn, longrope: original_max_position_embeddings; dynamic:
                              max_position_embeddings as written. A forward over more positions
                              than this uses dynamic NTK's grown base or LongRoPE's long factors */
    float yarn_beta_fast, yarn_beta_slow; /* yarn (defaults 32, 1) */
    float rope_attn_factor; /* yarn, longrope: factor on cos / sin of the scaled layers; the parser
                               always fills it (explicit, or from factor / mscale); else 0 */
    float rope_short_factor[AS_MAX_ROPE_PAIRS]; /* longrope: frequency divisors per rotated pair, */
    float rope_long_factor[AS_MAX_ROPE_PAIRS];  /* (rope_dim / 2) used, short up to rope_orig_max_pos */
    int sliding_window;  /* on layers marked in layer_sliding, query i sees keys j with
                            i - sliding_window < j <= i; 0 = none (no layer is windowed) */
    unsigned char layer_sliding[AS_MAX_LAYERS]; /* 1 = layer l is a sliding layer (Gemma 3 keeps
                            the marks when sliding_window is 0: they still pick the local RoPE) */
    int bos_token_id;    /* -1 when none */
    int eos_token_id;    /* -1 when none (the first when config.json lists several) */
    /* Encoder-decoder block description (ARCH_BART; zero for the other families). n_layer,
     * n_head, d_ff describe the encoder; the decoder has n_dec_layer layers of the same
     * width and heads, each with causal self-attention, cross-attention to the encoder's
     * output and the feed-forward. */
    int n_dec_layer;     /* decoder layers; 0 = not an encoder-decoder model */
    int decoder_start_token_id; /* first decoder input of a shifted target; -1 when none */
    int pre_norm;        /* mBART: pre-norm layers and final encoder / decoder layer norms;
                            0 = post-norm (BART, Marian) */
    int layernorm_embedding; /* BART / mBART: LayerNorm of the embedding sum (Marian: none) */
    int rel_buckets;     /* T5: relative position buckets of the self-attention's bias (bidirectional
                            in the encoder, causal in the decoder); 0 = none */
    int rel_max_distance; /* T5: relative_attention_max_distance */
    float head_in_scale; /* T5 with tied embeddings: the LM head's input times d_model^-0.5; 0 = none */
    /* Generation settings Hugging Face's generate takes from the configuration: every id that
     * eos_token_id lists below vocab_size (n_eos_ids of them; 0 when eos_token_id is -1),
     * forced_bos_token_id (the only allowed first generated token) and forced_eos_token_id
     * (the only allowed token at the last position); -1 when none. The encoder-decoder family
     * has transformers' defaults (BartConfig and MBartConfig: forced_eos 2, MarianConfig: 0). */
    int n_eos_ids;
    int eos_ids[AS_MAX_EOS_IDS];
    int forced_bos_token_id, forced_eos_token_id;
    /* bad_words_ids (Marian: [[pad]]): id sequences whose last id may not follow the others;
     * n_bad_words -1 when the field is there but not held (not lists of ids below vocab_size,
     * more than AS_MAX_BAD_WORDS or one longer than AS_MAX_BAD_WORD_LEN): loading still
     * works, generation refuses it by name. */
    int n_bad_words;
    int bad_word_len[AS_MAX_BAD_WORDS];
    int32_t bad_words[AS_MAX_BAD_WORDS][AS_MAX_BAD_WORD_LEN];
} as_config;

/* Factor applied to q.k in layer l (0-based): query_scale when set (Gemma), else 1/sqrt(Dh)
 * (unless attn_unscaled), divided by l + 1 when attn_layer_scale. */
float as_attn_scale(const as_config *c, int layer);

/* ---- model --------------------------------------------------------------- */

typedef struct as_model as_model;

typedef enum { HEAD_NONE = 0, HEAD_CLASSIFIER = 1, HEAD_MLM = 2, HEAD_LM = 4 } as_task_head;

/* Loads DIR/config.json, DIR/model.safetensors (or DIR/model.safetensors.index.json
 * and its shards) and the tokenizer files in DIR. On success *out owns everything;
 * free with as_model_free. Errors: AS_ERR_INPUT naming the file/field/tensor. */
as_status as_model_load(const char *dir, as_model **out, as_error *err);
void as_model_free(as_model *m);
const as_config *as_model_config(const as_model *m);
unsigned as_model_heads(const as_model *m);        /* bit set of as_task_head present */
as_dtype as_model_dtype(const as_model *m);        /* dtype of the stored weights */
size_t as_model_n_params(const as_model *m);
const char *as_model_dir(const as_model *m);
/* Of the mapped weight files: bytes resident in memory and, of those, bytes on 2 MiB pages
 * (one TLB entry each; a file read from disk is cached so, one still cached from being
 * written is not). Both 0 where the system does not say (Linux's /proc/self/smaps). */
void as_model_weight_pages(const as_model *m, size_t *resident, size_t *huge);
/* Longest input in tokens the position table allows (RoBERTa: max_pos - 2). */
int as_model_max_tokens(const as_model *m);
/* 1 when the folder had tokenizer files (as_encode works), else 0 (use ids). */
int as_model_has_tokenizer(const as_model *m);
/* Why the folder's tokenizer files are not used (e.g. a Unigram tokenizer.json), or NULL
 * when they are used or there are none. Owned by the model. */
const char *as_model_tokenizer_problem(const as_model *m);
/* Readable form of token id (byte-level BPE decoded to UTF-8); caller frees. NULL if unknown. */
char *as_model_token_text(const as_model *m, int32_t id);
const char *as_dtype_name(as_dtype t);
const char *as_arch_name(as_arch a);
/* Hugging Face's name of an activation ("gelu", "gelu_new", "relu", "silu") and of a
 * rope_scaling type ("none", "linear", "llama3", "yarn"). */
const char *as_act_name(as_act a);
const char *as_rope_scale_name(as_rope_scale k);

/* Arithmetic of a model's linear maps. F32 (default): the products of the stored weights
 * in F32 (BF16 weights of the LLaMA family are never copied whole: they are widened block
 * by block from the mapping, or, on CPUs with AVX-512F, weight by weight inside the
 * product). BF16: activations and weights rounded to BF16 (round to nearest
 * even), products summed in F32 — AVX-512 BF16 where the CPU has it, about twice the
 * F32 speed; F32/F16 checkpoints are converted to BF16 once. Norms, softmax, attention
 * and the residual stream stay F32. Its error against F32 is measured in
 * docs/engine.md. */
typedef enum { AS_PRECISION_F32 = 0, AS_PRECISION_BF16 } as_precision;
as_status as_model_set_precision(as_model *m, as_precision p, as_error *err);
as_precision as_model_precision(const as_model *m);
/* 1 when this CPU multiplies BF16 natively (AVX-512 BF16), else 0. */
int as_cpu_bf16(void);
const char *as_precision_name(as_precision p);
/* "f32" / "bf16" -> *out; -1 when unknown. */
int as_precision_parse(const char *s, as_precision *out);

/* ---- tokenization ----------------------------------------------------------- */

typedef struct {
    int n;             /* T */
    int32_t *ids;      /* (T) */
    int32_t *type_ids; /* (T) segment ids (0 = sentence A, 1 = B) */
    int32_t *mask;     /* (T) attention mask, 1 = real token, 0 = padding */
    int32_t *start;    /* (T) byte offset of the token in its text; -1 for specials */
    int32_t *end;      /* (T) exclusive end byte offset; -1 for specials */
    int8_t *seq;       /* (T) 0 = from text A, 1 = from text B, -1 = special/pad */
    char **pieces;     /* (T) token strings as in the vocabulary, owned */
    int n_warnings;    /* truncation, invalid UTF-8 replaced, ... */
    char warning[256]; /* the last warning, one line */
    int type_ids_given; /* 1 when the caller gave type_ids (as_encoding_from_ids): a model
                         * without segment embeddings that, in Hugging Face, adds an
                         * embedding of token_type_ids when they are passed (GPT-2:
                         * wte[type id], zeros included) does so; 0 from as_encode */
} as_encoding;

typedef struct {
    int max_len;  /* 0 = model max positions */
    int truncate; /* 1 = truncate with a warning (longest-first for pairs), 0 = error */
} as_encode_opts;

/* Tokenizes text_a (and text_b when non-NULL) with the model's tokenizer and adds the
 * model's special tokens. *out is filled and owned by the caller (as_encoding_free).
 * A model without segment embeddings (type_vocab_size <= 1: DistilBERT, RoBERTa, GPT-2)
 * gets type id 0 everywhere, as Hugging Face's tokenizers and models treat it, even when
 * its tokenizer's pair template says 1 for sentence B; seq still marks A / B.
 * Errors: AS_ERR_INPUT for empty text or (truncate == 0) too long input. */
as_status as_encode(const as_model *m, const char *text_a, const char *text_b,
                    const as_encode_opts *opts, as_encoding *out, as_error *err);
/* as_encode of an encoder-decoder model's target text (the labels a decoder input is
 * shifted from): a Marian folder's target.spm (vocab.json is shared); the same as
 * as_encode(m, text, NULL, ...) for every other tokenizer. */
as_status as_encode_target(const as_model *m, const char *text, const as_encode_opts *opts, as_encoding *out,
                           as_error *err);
/* Builds an encoding from raw ids (pieces looked up; type ids 0, offsets -1).
 * type_ids may be NULL; when given, they are passed to the model as Hugging Face
 * passes token_type_ids: BERT-family segment embeddings (ids < type_vocab_size),
 * GPT-2 wte[type id] added to every position (ids < vocab_size, zeros included);
 * models without either accept only zeros. Errors: id out of vocabulary range,
 * type id out of range, too many ids. */
as_status as_encoding_from_ids(const as_model *m, const int32_t *ids, const int32_t *type_ids,
                               int n, as_encoding *out, as_error *err);
void as_encoding_free(as_encoding *e);
/* The tokens of enc (T = enc->n) as JSON text: the one token format of `attnscope run
 * --format json` and of the server (docs/api/api.schema.json, Token). A compact array of
 *   {"i", "id", "piece", "text", "bytes", "start", "end", "type_id", "segment", "special"}
 * i: position; id: vocabulary id; piece: the vocabulary string; text: the readable form
 * (as_model_token_text); bytes: text's exact bytes as lowercase hex (piece and text
 * replace the bytes of a partial UTF-8 character, which a byte-level BPE token may end
 * inside, with U+FFFD); start/end: byte span in the token's own text, -1 for specials;
 * type_id: the token type id given to the model; segment: 0 = sentence A, 1 = B, a
 * special token belonging to the sentence before it; special: added by the model's
 * template (seq < 0). Returns NUL-terminated UTF-8 owned by the caller (free), or NULL
 * when out of memory. m and enc are only read. */
char *as_tokens_json(const as_model *m, const as_encoding *enc);
/* The same tokens as a jansson array (for tools that build JSON with jansson, e.g. the
 * server): new reference (json_decref), or NULL when out of memory. */
struct json_t;
struct json_t *as_tokens_json_value(const as_model *m, const as_encoding *enc);
/* A jansson string of s that is always valid UTF-8 (ill-formed sequences become U+FFFD,
 * as_utf8_clean); json null for NULL s or when out of memory. New reference. */
struct json_t *as_json_string_utf8(const char *s);

/* ---- forward with capture ------------------------------------------------- */

typedef enum {
    CAP_ATTN = 1,   /* attention probabilities after mask + softmax */
    CAP_SCORES = 2, /* q.k times the layer's as_attn_scale (1/sqrt(Dh) unless the config
                       sets it: GPT-2's flags, Gemma's query scale), soft-capped when the
                       config has attn_softcap (Gemma 2), before softmax; masked keys
                       (padding, later keys of a causal model, keys outside a sliding
                       window) hold -FLT_MAX (HF's finfo.min) */
    CAP_QKV = 4,    /* per-head q, k (after projection, bias, q/k norm and RoPE where the
                       model has them, before scaling; q_pre / k_pre before RoPE) and v */
    CAP_HIDDEN = 8, /* hidden states: embedding output, then every layer's output */
    CAP_LOGITS = 16,/* task head logits when the model has one (forces all layers) */
    CAP_STATS = 32, /* per-head statistics of the attention (AS_HEAD_STAT_*), computed row by
                       row in the forward without keeping T x T; asked for by name (not in
                       CAP_ALL) */
    CAP_THUMBS = 64,/* per-head thumbnails: the attention pooled onto AS_THUMB_SIDE x
                       AS_THUMB_SIDE blocks (max and mean), accumulated row by row in the
                       forward without keeping T x T; asked for by name (not in CAP_ALL);
                       self-attention of single-stack models only */
    CAP_ALL = 31    /* every tensor above: attention, scores, q/k/v, hidden states, logits */
} as_capture_what;

/* Side S of the CAP_THUMBS thumbnails of T tokens: min(T, AS_THUMB_SIDE). Row (query)
 * block b covers [floor(b T / S), floor((b + 1) T / S)), and likewise for columns (keys),
 * so each block holds floor(T / S) or ceil(T / S) tokens; each cell holds the largest
 * weight of its block (0 when all are masked) and their mean over all its cells, masked
 * ones as 0. */
#define AS_THUMB_SIDE 64
/* The CAP_THUMBS thumbnails of one head's whole attention P (T, T) (rows = queries, masked
 * weights 0): mx and mean (S, S), S = min(T, AS_THUMB_SIDE), pooled as the forward pools
 * them (for a run kept with CAP_ATTN, pooled afterwards). Borrows P, writes mx and mean. */
void as_thumbs_pool(const float *P, int T, float *mx, float *mean);

/* The per-head statistics of CAP_STATS, each the mean over the real (unpadded) query
 * rows i of a head's attention row p_i (natural log; distances in tokens). */
enum {
    AS_HEAD_STAT_ENTROPY = 0, /* -sum_j p_ij log p_ij */
    AS_HEAD_STAT_SINK,        /* p_i0: mass on the first token (BOS / [CLS]) */
    AS_HEAD_STAT_SELF,        /* p_ii */
    AS_HEAD_STAT_PREV,        /* p_i,i-1 (rows i >= 1) */
    AS_HEAD_STAT_NEXT,        /* p_i,i+1 (rows i < T - 1; 0 for causal models) */
    AS_HEAD_STAT_DIST,        /* d_i = sum_j p_ij |i - j| */
    AS_HEAD_STAT_SPREAD,      /* sqrt(sum_j p_ij (|i - j| - d_i)^2) */
    AS_HEAD_STAT_MAX,         /* max_j p_ij */
    AS_HEAD_N_STATS
};

/* Embedding ablation: the named component of the input embedding is replaced by the
 * mean of its table's rows (the same vector for every token), so the pattern a head
 * keeps without it shows how much that component drives it. */
typedef enum {
    ABLATE_TOKEN = 1,    /* word embeddings -> mean word embedding */
    ABLATE_POSITION = 2, /* position embeddings -> mean position embedding */
    ABLATE_SEGMENT = 4   /* token-type embeddings -> mean of the type rows (no-op without them) */
} as_ablate;

/* Interventions on the attention (docs/attribution.md, "Interventions"), applied inside the
 * one forward: head ablation replaces the context vector ctx_h = A_h V_h of each listed
 * head (its input to the output projection) by zeros (AS_HEAD_ZERO, Michel et al. 2019's
 * gate at 0) or, at every position, by its mean over the input's real positions
 * (AS_HEAD_MEAN); attention knockout sets A_h[query, key] to 0 after the softmax at one
 * layer, for one head or every head (head -1), and with renorm divides each changed row by
 * what is left (the same as masking the score before the softmax; a row left empty stays 0).
 * Knockouts come first, so an ablated head's mean uses the knocked-out attention. Captured
 * attention holds the knockouts; an ablated head's attention is captured as computed. */
typedef enum { AS_HEAD_ZERO = 0, AS_HEAD_MEAN = 1 } as_head_mode;
/* Most heads or edges one intervention lists. */
#define AS_MAX_INTERVENTION_ITEMS 65536
typedef struct {
    int layer, head; /* an ablated head */
} as_head_ref;
typedef struct {
    int layer;      /* 0..L-1 */
    int head;       /* a query head, or -1 = every head of the layer */
    int query, key; /* token positions: the edge key -> query (A[query, key]) */
} as_edge;
typedef struct {
    int n_heads;              /* heads ablated, 0..AS_MAX_INTERVENTION_ITEMS */
    const as_head_ref *heads; /* (n_heads), borrowed for the call */
    int head_mode;            /* as_head_mode */
    int n_edges;              /* edges knocked out, 0..AS_MAX_INTERVENTION_ITEMS */
    const as_edge *edges;     /* (n_edges), borrowed for the call */
    int renorm;               /* 1: knocked-out rows renormalised; 0: only the edges zeroed */
} as_intervention;

typedef struct {
    unsigned what; /* bit set of as_capture_what */
    int layer;     /* -1 = all layers, else only this layer is captured */
    int head;      /* -1 = all heads, else only this head is captured */
    int threads;   /* 0 = number of cores */
    unsigned ablate; /* bit set of as_ablate; 0 = the normal forward */
    const as_intervention *intervene; /* NULL = none; else checked (AS_ERR_INPUT naming the
                                         item out of range) and applied; borrowed for the call */
} as_capture_spec;

typedef struct as_run {
    int T, L, H, D, Dh;  /* sizes of the model and input (H query heads) */
    int Hkv;             /* key/value heads (== H without grouped-query attention) */
    int layer_lo, n_lay; /* captured layers [layer_lo, layer_lo + n_lay) */
    int head_lo, n_hd;   /* captured heads  [head_lo, head_lo + n_hd) */
    int n_run;           /* layers actually computed (forward stops after the deepest needed) */
    float *attn;         /* (n_lay, n_hd, T, T) or NULL */
    float *scores;       /* (n_lay, n_hd, T, T) or NULL; masked entries hold the additive mask value */
    float *q, *k, *v;    /* (n_lay, n_hd, T, Dh) or NULL; q and k after RoPE when the model has it;
                            k and v of query head h are those of its key/value head
                            h / (H / Hkv) (grouped-query attention) */
    float *q_pre, *k_pre; /* (n_lay, n_hd, T, Dh): q and k before RoPE (CAP_QKV on a rotary
                             model), else NULL */
    float *head_stats;   /* (n_lay, n_hd, AS_HEAD_N_STATS) with CAP_STATS, else NULL */
    int32_t *attention_mask; /* (T) the input's mask (1 real, 0 padding), always kept */
    float *hidden;       /* (n_run + 1, T, D) or NULL; [0] = embedding output */
    float *logits;       /* (logits_rows, logits_cols) or NULL */
    int logits_rows;     /* 1 for a sequence classifier, T for MLM / LM heads */
    int logits_cols;     /* C or V */
    as_task_head logits_head;
    size_t bytes;        /* bytes held by captured tensors */
    void *block_;        /* private: the one allocation the tensors above live in */
    size_t block_cap_;   /* private: its capacity in bytes */
    /* Encoder-decoder runs (as_forward_seq2seq): this run holds the encoder's self-attention
     * and hidden states (T source tokens); dec the decoder's self-attention, hidden states
     * and the LM logits (T target tokens); cross the cross-attention, whose queries are the
     * target's (T = target tokens) and keys / values the encoder output's (Tk = source
     * tokens). NULL for other runs; owned by this run. */
    int Tk;              /* keys per attention row: T, except in a cross-attention run */
    struct as_run *dec, *cross;
    int thumb;           /* side S of the thumbnails, min(T, AS_THUMB_SIDE); 0 without CAP_THUMBS */
    float *thumb_max;    /* (n_lay, n_hd, S, S) with CAP_THUMBS: each block's largest weight, else NULL */
    float *thumb_mean;   /* (n_lay, n_hd, S, S) with CAP_THUMBS: each block's mean weight, else NULL */
} as_run;

/* Runs the model on enc. *out is allocated and owned by the caller (as_run_free).
 * Errors: AS_ERR_INPUT if spec names a layer/head out of range or enc does not fit. */
as_status as_forward(const as_model *m, const as_encoding *enc, const as_capture_spec *spec,
                     as_run **out, as_error *err);
void as_run_free(as_run *r);
/* The forward of an encoder-decoder model (as_config.n_dec_layer > 0): the encoder on src,
 * then the decoder on tgt (teacher-forced decoder input ids, used as given), each decoder
 * layer attending to the encoder's output. *out is the encoder's run with ->dec and
 * ->cross filled (as_run); spec applies to all three kinds (a --layer must exist in both
 * stacks). The LM logits (with CAP_LOGITS) are (Tt, V) in out->dec. Owned by the caller
 * (as_run_free). Errors: AS_ERR_INPUT for a model that is not encoder-decoder, ids out of
 * range, too many tokens, a layer/head out of range. as_forward on an encoder-decoder
 * model is AS_ERR_INPUT (it needs a target). */
as_status as_forward_seq2seq(const as_model *m, const as_encoding *src, const as_encoding *tgt,
                             const as_capture_spec *spec, as_run **out, as_error *err);
/* The decoder input of a target text's encoding for teacher forcing, as Hugging Face's
 * shift_tokens_right makes it from labels: decoder_start_token_id, then the target's ids
 * but the last (T stays the same), each with its byte span (start, end) in the target text
 * and its special mark (seq) shifted with it; the start token is a special (start -1, seq
 * -1). dec is filled and owned by the caller
 * (as_encoding_free). Errors: the model has no decoder_start_token_id, out of memory. */
as_status as_seq2seq_shift_target(const as_model *m, const as_encoding *target, as_encoding *dec,
                                  as_error *err);
/* Views into a run for absolute layer l / head h; NULL when not captured. */
const float *as_run_attn(const as_run *r, int l, int h);   /* (T, Tk): Tk = T except cross-attention */
const float *as_run_scores(const as_run *r, int l, int h); /* (T, Tk) */
const float *as_run_q(const as_run *r, int l, int h);      /* (T, Dh) */
const float *as_run_k(const as_run *r, int l, int h);      /* (Tk, Dh) */
const float *as_run_v(const as_run *r, int l, int h);      /* (T, Dh) */
/* Rows [i0, i1) of the attention of absolute layer l, head h, recomputed from the run's
 * captured q and k (CAP_QKV, post-RoPE) with the model's scale, soft-cap and masks (causal,
 * sliding window, padding): out (i1 - i0, T), equal to the dense capture to float
 * rounding. Lets a long input keep O(T) per head (q, k, statistics) and any row, block
 * or head be computed when a view asks for it. Errors: AS_ERR_INPUT when q/k of that
 * layer and head were not captured or the rows are out of range. */
as_status as_run_attention_rows(const as_model *m, const as_run *r, int l, int h, int i0, int i1, float *out,
                                as_error *err);
/* The logit lens (nostalgebraist 2020): hidden state l of the run (0 = embeddings, captured
 * with CAP_HIDDEN) through the model's final norm (pre-norm models; the last state already
 * has it) and its language-model or masked-LM head: logits (T, V). For l = the last layer
 * this is the model's own LM logits. Errors: no LM head, hidden states not captured, l
 * outside 0..n_run. */
as_status as_run_logit_lens(const as_model *m, const as_run *r, int l, int threads, float *logits, as_error *err);
/* Key/value head that query head h reads (h itself without grouped-query attention). */
int as_run_kv_group(const as_run *r, int h);
/* The captured tensors of a run under their Hugging Face output names, in the order the
 * CLI writes them (attentions, attention_scores, queries, keys, values, hidden_states,
 * logits, queries_pre_rope, keys_pre_rope, head_stats, thumbnails_max, thumbnails_mean),
 * with their shapes; data is NULL for what was not captured. Borrowed views into r, valid
 * until as_run_free. */
#define AS_RUN_N_ARRAYS 12
typedef struct {
    const char *name;
    const float *data;
    int ndim;
    int64_t shape[4];
} as_run_array;
void as_run_arrays(const as_run *r, as_run_array out[AS_RUN_N_ARRAYS]);
/* Every array of a run, including an encoder-decoder run's three kinds, as the JSON and
 * npz writers name them: as_run_arrays for other runs; for encoder-decoder runs the
 * encoder's under encoder_* (encoder_attentions, encoder_queries, encoder_hidden_states,
 * ...), the decoder's under decoder_*, the cross-attention's under cross_*
 * (cross_attentions, cross_attention_scores, cross_queries (Tt rows), cross_keys and
 * cross_values (Ts rows)), and the LM logits as logits. Returns the count written (at most
 * AS_RUN_MAX_ARRAYS); entries whose data is NULL were not captured. */
#define AS_RUN_MAX_ARRAYS (3 * AS_RUN_N_ARRAYS)
int as_run_all_arrays(const as_run *r, as_run_array out[AS_RUN_MAX_ARRAYS]);
/* Writes run r of input enc under model m as an .npz archive at path (numpy.load reads
 * it without pickle): input_ids, token_type_ids, attention_mask, offsets (T, 2), tokens
 * and token_text (unicode), layers and heads (absolute indices), score_scale, then
 * every tensor r captured (attentions, attention_scores, queries, keys, values,
 * hidden_states, logits); README "npz / JSON contents" lists the shapes. Only reads m,
 * enc and r. Errors: AS_ERR_INPUT when path cannot be created; AS_ERR_INTERNAL when
 * out of memory or a write fails. */
/* An encoder-decoder run's archive also holds decoder_input_ids, decoder_attention_mask,
 * decoder_tokens and decoder_token_text of tgt (NULL for other runs) and the arrays of
 * as_run_all_arrays. */
as_status as_run_write_npz_seq2seq(const as_model *m, const as_encoding *enc, const as_encoding *tgt,
                                   const as_run *r, const char *path, as_error *err);
as_status as_run_write_npz(const as_model *m, const as_encoding *enc, const as_run *r, const char *path,
                           as_error *err);
/* An array written after a run's own by as_run_write_npz_extra: data (F32 or I32 as
 * dtype says) of the given shape, borrowed. */
typedef struct {
    const char *name;
    as_dtype dtype; /* DTYPE_F32 or DTYPE_I32 */
    const void *data;
    int ndim; /* 1..AS_NPZ_EXTRA_MAX_DIMS */
    int64_t shape[AS_NPZ_EXTRA_MAX_DIMS];
} as_npz_extra;
/* as_run_write_npz, then the n_extra arrays of extra (e.g. `attnscope generate`'s
 * generated ids and per-step attention) in the same archive. Errors as there, and
 * AS_ERR_INTERNAL for an extra of another dtype. */
as_status as_run_write_npz_extra(const as_model *m, const as_encoding *enc, const as_run *r,
                                 const as_npz_extra *extra, int n_extra, const char *path, as_error *err);
/* as_run_write_npz_seq2seq, then the n_extra arrays of extra. */
as_status as_run_write_npz_seq2seq_extra(const as_model *m, const as_encoding *enc, const as_encoding *tgt,
                                         const as_run *r, const as_npz_extra *extra, int n_extra, const char *path,
                                         as_error *err);

/* ---- utilities ------------------------------------------------------------ */

/* Checked allocation: NULL on overflow or failure (callers report AS_ERR_INTERNAL).
 * Released with free(). */
void *as_malloc(size_t n);
void *as_calloc(size_t n, size_t size);
void *as_malloc_array(size_t n, size_t size); /* n*size with overflow check */
char *as_strdup(const char *s);               /* NULL for NULL or out of memory */
/* a*b with overflow check: returns 0 on overflow (sizes are never 0 here). */
size_t as_mul_size(size_t a, size_t b);

/* A copy of the NUL-terminated s that is valid UTF-8: each maximal subpart of an
 * ill-formed sequence becomes U+FFFD (Unicode 15, sec. 3.9). Owned by the caller
 * (free); NULL when out of memory or s is NULL. */
char *as_utf8_clean(const char *s);
/* Joins dir and name into buf; AS_ERR_INPUT if it does not fit. */
as_status as_path_join(char *buf, size_t cap, const char *dir, const char *name, as_error *err);

/* Half-precision conversions (IEEE binary16 and bfloat16). */
float as_f16_to_f32(uint16_t h);
float as_bf16_to_f32(uint16_t h);
uint16_t as_f32_to_f16(float f);
uint16_t as_f32_to_bf16(float f);

/* Number of online CPUs (>= 1). */
int as_n_cores(void);
/* Monotonic time in seconds. */
double as_now(void);

#ifdef __cplusplus
}
#endif
#endif
