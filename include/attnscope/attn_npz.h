/* attnscope/attn_npz.h — attention computed elsewhere, read from an .npz file into a run
 * (as_run) with its tokens, so the server's head, model and neuron views show it without
 * a model (`attnscope serve --attention FILE.npz`). Part of the tools' API (attnscope.h,
 * "Library and tools").
 *
 * Two layouts, with the rules of the Python package's reader (python/attnscope/npz.py):
 *  - `attnscope run --format npz`: attentions [L, H, T, T] and tokens (T strings);
 *    optional token_text, input_ids, token_type_ids (T), layers (L), heads (H), kv_group
 *    (H), and for the neuron view queries and keys [L, H, T, Dh], attention_scores
 *    [L, H, T, T], score_scale (L);
 *  - bertviz-style arrays: attention [L, 1, H, T, T] or [L, H, T, T] (a stacked tuple of
 *    per-layer outputs), tokens, optional sentence_b_start (a scalar).
 * Weights: float16, float32 or float64, finite and non-negative; tokens: a unicode ('<U')
 * or bytes ('|S') array. Every size is checked against the file (io/npz_read.h's
 * archive checks) and the limits below; objects and pickles are never read.
 * What it does not: check that rows sum to 1 (attention from other tools may be
 * renormalised, pooled or masked), run a model, or write anything.
 */
#ifndef ATTNSCOPE_ATTN_NPZ_H
#define ATTNSCOPE_ATTN_NPZ_H

#include "attnscope.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AS_NPZ_MAX_FILE_BYTES ((uint64_t)1 << 31)       /* one file: 2 GiB */
#define AS_NPZ_MAX_WEIGHTS ((size_t)12 * 12 * 2048 * 2048) /* L x H x T x T: BERT-base at 2048 tokens */
#define AS_NPZ_MAX_LAYERS 256
#define AS_NPZ_MAX_HEADS 256
#define AS_NPZ_MAX_TOKENS 8192
#define AS_NPZ_MAX_D_HEAD 1024
#define AS_NPZ_MAX_TOKEN_CHARS 1024 /* code points (or bytes) of one token string */

typedef struct {
    as_run *run;          /* owned: T, L, H, Hkv, Dh (0 without q/k); attn (L, H, T, T) as float32;
                             with neuron also scores (L, H, T, T), q and k (L, H, T, Dh);
                             attention_mask (T) all 1; all layers and heads captured */
    char **tokens;        /* (T) owned UTF-8 strings, the pieces */
    char **token_text;    /* (T) owned, or NULL when the file has no token_text */
    int32_t *input_ids;   /* (T) owned, or NULL */
    int32_t *type_ids;    /* (T) owned: token_type_ids, else 0 / 1 from sentence_b_start, else 0 */
    float *scale;         /* (L) owned: score_scale, else 1/sqrt(Dh) with q/k, else 1 */
    int32_t *kv_group;    /* (H) owned: the file's kv_group, else 0..H-1 */
    int neuron;           /* queries, keys and attention_scores present (queries and keys of one shape) */
    int causal;           /* T > 1 and no weight above the diagonal */
    int bertviz;          /* read from 'attention' (bertviz-style), not 'attentions' */
} as_attn_npz;

/* Reads path into *out (as_attn_npz_free, also after an error). Errors: AS_ERR_INPUT with
 * one line naming the file, the array and what is wrong. */
as_status as_attn_npz_read(const char *path, as_attn_npz *out, as_error *err);
void as_attn_npz_free(as_attn_npz *a);

/* The same struct from attention already in memory (an analysis database's imported
 * sentence, read from its import folder): attn (L, H, T, T) copied, rows = queries;
 * tokens (T) UTF-8 strings copied as the pieces and their text; no q/k (neuron 0),
 * type ids 0, scale 1, kv_group 0..H-1, causal when no weight lies above the
 * diagonal. *out owned by the caller (as_attn_npz_free, also after an error). Errors:
 * AS_ERR_INPUT for sizes outside the limits above or weights negative or not finite. */
as_status as_attn_npz_from_attention(const float *attn, int L, int H, int T, const char *const *tokens,
                                     as_attn_npz *out, as_error *err);

#ifdef __cplusplus
}
#endif
#endif
