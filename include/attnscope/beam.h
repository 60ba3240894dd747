/* attnscope/beam.h — beam search (src/analysis/beam.c): Hugging Face's generate with
 * num_beams > 1 and no sampling, for one prompt, on the forward of attnscope.h (a key/value
 * cache per beam and the beams' steps as one batch where generation has a cache: decoder-only
 * models but dynamic NTK / LongRoPE, and encoder-decoder models on their source's encoder
 * state; else one whole forward per beam and step). Part of the tools' API (see attnscope.h);
 * `attnscope generate --beams N` is built on it. It returns token sequences and scores;
 * the attention of a returned sequence is the forward over it (causal: each generated
 * token's row is the same as at its step). What it does not: sampling, diverse or
 * constrained beams, batches, tokenizing.
 */
#ifndef ATTNSCOPE_BEAM_H
#define ATTNSCOPE_BEAM_H

#include "attnscope.h"
#include "attnscope/generate.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GEN_MAX_BEAMS 16 /* --beams */

typedef struct {
    int beams;             /* 2..GEN_MAX_BEAMS */
    int num_return;        /* hypotheses returned, 1..beams (num_return_sequences) */
    int early_stopping;    /* early_stopping=True: stop once `beams` hypotheses are finished */
    double length_penalty; /* score = sum of log-probs / generated_length^length_penalty */
    int threads;
    int full_forward;      /* 1: each step runs every beam's whole sequence, even where a
                              key/value cache per beam serves the model */
} gen_beam_opts;

typedef struct {
    int n;               /* hypotheses returned, best first */
    int cap;             /* row stride of ids: the longest allowed sequence */
    int32_t *ids;        /* (n, cap): prompt + generated ids (an end-of-sequence id included) */
    int *len;            /* (n) ids used in each row */
    float *sum_logprobs; /* (n) sum of the generated tokens' log-probabilities (float32, as torch) */
    double *score;       /* (n) sum_logprobs / (len - prompt_len)^length_penalty */
} gen_beam_result;

/* Beam search from prompt (prompt_len ids: the decoder's start for an encoder-decoder
 * model, whose source is src; src NULL for a causal LM) up to max_len ids in all. The
 * end-of-sequence ids, bad_words_ids, forced_bos_token_id and forced_eos_token_id come
 * from the model's configuration. *out is filled and owned by the caller
 * (gen_beam_result_free). Errors: the forward's (AS_ERR_INPUT), bad_words_ids the
 * configuration could not hold, a vocabulary too small for the beams, out of memory. */
as_status gen_beam_search(const as_model *m, const as_encoding *src, const int32_t *prompt, int prompt_len,
                          int max_len, const gen_beam_opts *o, gen_beam_result *out, as_error *err);
/* Frees what gen_beam_search allocated and zeroes r; NULL or a zeroed r is a no-op. */
void gen_beam_result_free(gen_beam_result *r);

/* Returned sequences as padded arrays, with every generated token's attention rows: what
 * the CLI writes and the server replies. */
typedef struct {
    int R, pl, L, H, Ts;  /* sequences, prompt length, (decoder) layers, heads, source tokens (0: causal LM) */
    int Tmax, Smax;       /* the longest sequence and its generated tokens */
    int32_t *seqs;        /* (R, Tmax) ids, -1 after each sequence's end */
    int32_t *lens;        /* (R) */
    float *scores, *sums; /* (R) score and sum of log-probabilities */
    float *rows, *xrows;  /* (R, Smax, L, H, Tmax) self-attention, (R, Smax, L, H, Ts) cross-attention
                             (encoder-decoder models), zero padded; NULL without rows */
    float *best, *xbest;  /* sequence 0's at its own length: (S0, L, H, T0), (S0, L, H, Ts), or NULL */
} gen_beam_rows;

/* Fills *out (gen_beam_rows_free) from the n sequences of br (prompt length pl; src the
 * source of an encoder-decoder model, else NULL); with rows, each sequence's rows from one
 * forward over it (gen_sequence_rows), else none. Errors: the forward's, out of memory
 * (AS_ERR_INTERNAL). */
as_status gen_beam_rows_init(const as_model *m, const as_encoding *src, const gen_beam_result *br, int pl,
                             int threads, int rows, gen_beam_rows *out, as_error *err);

/* Fills *out (gen_beam_rows_free) with the one sequence of a greedy or sampled generation g
 * (gen_generate with opts.rows): the rows its steps computed (a causal LM's self-attention,
 * an encoder-decoder model's cross-attention), and an encoder-decoder model's decoder self-
 * attention rows from one forward over the sequence. Scores are 0. Errors as above. */
as_status gen_result_rows(const as_model *m, const as_encoding *src, const gen_result *g, int threads,
                          gen_beam_rows *out, as_error *err);

/* Frees what gen_beam_rows_init allocated and zeroes b; NULL or a zeroed b is a no-op. */
void gen_beam_rows_free(gen_beam_rows *b);

#ifdef __cplusplus
}
#endif

#endif
