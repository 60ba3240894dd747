/* attnscope/generate.h — autoregressive continuation of a prompt by a model with a
 * causal-LM head (GPT-2, the LLaMA family; encoder-decoder models generate their decoder's
 * sequence from a source), recording every step's attention row of the choosing position.
 * Part of the tools' API (see attnscope.h): `attnscope generate` and the server's generate
 * route are built on it, so both give the same tokens and rows for the same options.
 * Decoder-only models whose RoPE does not depend on the length (GPT-2, the LLaMA family
 * but dynamic NTK and LongRoPE) run on a key/value cache: the prompt in one forward, then
 * one token per step (model_forward_step); encoder-decoder models run the source through
 * the encoder once and the decoder on its own cache (model_s2s_step); the others run the
 * whole sequence so far again at each step. Each step takes the last position's logits: greedy argmax at temperature 0, else a draw
 * from softmax(logits / temperature) over the top-k ids, from a splitmix64 stream seeded
 * by the seed (Steele et al. 2014), so a seed gives the same tokens. Before the pick the
 * logits pass Hugging Face generate's configured processors as beam search does
 * (gen_process_logits: bad_words_ids, forced BOS at the first generated position, forced
 * EOS at the last), and stop_eos ends at any id of the config's eos_token_id list. On
 * request each step also keeps the probability of the id chosen and the most probable ids.
 * What it does not: beam search, repetition penalties, batches, tokenizing or printing.
 */
#ifndef ATTNSCOPE_GENERATE_H
#define ATTNSCOPE_GENERATE_H

#include "attnscope.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int max_new;        /* tokens to add, >= 1 (fewer when the model's positions run out) */
    double temperature; /* 0 = greedy (argmax); > 0 samples */
    int top_k;          /* sample among the top_k most likely ids; 0 = all */
    uint64_t seed;      /* the sampling stream's seed */
    int stop_eos;       /* stop after the model's end-of-sequence token */
    int rows;           /* record each step's attention rows (gen_result.rows) */
    int threads;        /* threads of each forward; 0 = the default */
    int full_forward;   /* 1: every step runs the whole sequence again, even where a key/value
                           cache serves the model (the reference the cache is checked against) */
    int probs;          /* keep each step's chosen id's probability (gen_result.probs; a pass
                           over the vocabulary per step) */
    int top;            /* keep each step's `top` most probable ids and their probabilities
                           (gen_result.top_ids / top_probs; probs too), 0..GEN_MAX_TOP; 0 = none */
} gen_opts;

#define GEN_MAX_TOP 20 /* gen_opts.top */

typedef struct {
    int prompt_len; /* tokens of the prompt (of the decoder's start for encoder-decoder models) */
    int steps;      /* tokens generated */
    int L, H;       /* layers (the decoder's) and heads of a row */
    int T;          /* tokens of the final sequence: prompt_len + steps */
    int K;          /* keys of a row: T (causal models), or the source's tokens */
    int cached;     /* 1 when the steps ran on a key/value cache, 0 when each ran the whole sequence */
    int32_t *ids;   /* (T) the final sequence */
    int32_t *gen;   /* (steps) the generated ids */
    float *rows;    /* (steps, L, H, K) or NULL without opts.rows: at step s, every head's
                       attention row of the position that chose the new token (position
                       prompt_len - 1 + s; keys after it are 0), for encoder-decoder models
                       the cross-attention's row over the source */
    /* the model's next-token distribution at each step: softmax of the logits after the
       processors below (gen_process_logits), before temperature and top-k */
    float *probs;       /* (steps) the probability of the id chosen, or NULL without opts.probs / top */
    int top;            /* opts.top */
    int32_t *top_ids;   /* (steps, top) the most probable ids, most probable first (ties: lower id), or NULL */
    float *top_probs;   /* (steps, top) their probabilities, or NULL */
} gen_result;

/* 1 when id is one of the config's end-of-sequence ids (c->eos_ids), else 0. */
int gen_is_eos(const as_config *c, int id);

/* Hugging Face generate's configured logits processors (logits_process.py, in its order) on
 * row (V = c->vocab_size), the next-token scores of the sequence ids[0..cur) that may grow to
 * max_len tokens: NoBadWordsLogitsProcessor (the last id of each c->bad_words sequence whose
 * other ids end the sequence is -inf; a lone eos id is left out; nothing when n_bad_words is
 * -1), then ForcedBOSTokenLogitsProcessor at cur == 1 and ForcedEOSTokenLogitsProcessor at
 * cur == max_len - 1 (the forced id 0, every other -inf). */
void gen_process_logits(const as_config *c, const int32_t *ids, int cur, int max_len, float *row);

/* Continues the n ids of prompt with model m (src: the source of an encoder-decoder
 * model, else NULL) by up to o->max_new tokens, stopping at the model's positions.
 * Fills *out (gen_result_free; owned by the caller). Errors: AS_ERR_INPUT when the model
 * has no causal-LM head, the prompt is empty or fills the model's positions, or a
 * forward refuses the ids; AS_ERR_INTERNAL when out of memory. */
as_status gen_generate(const as_model *m, const as_encoding *src, const int32_t *prompt, int n, const gen_opts *o,
                       gen_result *out, as_error *err);

/* The attention rows of a generated sequence from one forward over it: ids (T ids, the
 * first pl of them the prompt / the decoder's start; src the source of an encoder-decoder
 * model, else NULL), at the positions pl - 1 .. T - 2 that chose each generated token.
 * rows: (T - pl, L, H, ld) self-attention rows (decoder's for encoder-decoder models), ld >= T,
 * keys T.. left as they are; xrows: (T - pl, L, H, src->n) cross-attention rows, or NULL
 * (NULL too for a causal LM). A causal forward gives every row as the step that chose the
 * token saw it, so these equal gen_result.rows of a cached generation and serve beam
 * search, which keeps none. Errors: the forward's (AS_ERR_INPUT, AS_ERR_INTERNAL). */
as_status gen_sequence_rows(const as_model *m, const as_encoding *src, const int32_t *ids, int T, int pl, int threads,
                            float *rows, size_t ld, float *xrows, as_error *err);

/* Frees what gen_generate allocated and zeroes g; a zeroed g is a no-op. */
void gen_result_free(gen_result *g);

#ifdef __cplusplus
}
#endif

#endif
