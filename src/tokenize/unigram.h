/* unigram.h — the SentencePiece Unigram model of tokenizer.json ("type": "Unigram":
 * T5, mT5, XLM-R, ALBERT, mBART, Marian) as Hugging Face `tokenizers` runs it
 * (models/unigram/model.rs, encode_optimized): Viterbi over the lattice of vocabulary
 * pieces that start at each character (score = the piece's log probability), a
 * character with no one-character piece also reachable as unk with score
 * min_score - 10, consecutive unk pieces fused into one token, and byte_fallback
 * (<0xNN> pieces for the bytes of an unknown token). Internal to the tokenize module;
 * spm.c normalizes and pre-tokenizes the text and calls tok_unigram_encode per word.
 * It does not normalize, split words, sample (no nbest / alpha), or train.
 */
#ifndef AS_UNIGRAM_H
#define AS_UNIGRAM_H

#include "tokenize/tokenizer.h"

#define TOK_UNIGRAM_MAX_PIECE_BYTES 1024                  /* one vocabulary piece */
#define TOK_UNIGRAM_MAX_VOCAB_BYTES (64u * 1024u * 1024u) /* all pieces together */
#define TOK_UNIGRAM_MAX_WORD_BYTES TOK_MAX_TEXT_BYTES     /* one pre-tokenized word */

typedef struct tok_unigram tok_unigram;

/* Builds the model from n pieces (piece[i], len[i] bytes, valid UTF-8; id = i) with
 * scores score[i]; unk_id -1 for none. The strings are copied. A piece given twice
 * resolves to its last id, as HF's token map does; empty pieces are never matched.
 * Errors: AS_ERR_INPUT for n < 1 or over AS_MAX_VOCAB, unk_id out of range, a piece
 * over TOK_UNIGRAM_MAX_PIECE_BYTES, all pieces over TOK_UNIGRAM_MAX_VOCAB_BYTES, or a
 * score that is not finite; AS_ERR_INTERNAL when out of memory. */
as_status tok_unigram_init(const char *const *piece, const size_t *len, const double *score, int n,
                           int32_t unk_id, int byte_fallback, tok_unigram **out, as_error *err);
void tok_unigram_free(tok_unigram *u);

/* Encodes word w[0..n) (valid UTF-8) and appends its tokens to out with byte offsets
 * relative to w (a byte-fallback token gets the range of the whole unknown token it
 * comes from, as HF gives it). Re-entrant. Errors: AS_ERR_INPUT for a word over
 * TOK_UNIGRAM_MAX_WORD_BYTES, or an unknown character when the model has no unk_id
 * (HF fails there too); AS_ERR_INTERNAL when out of memory. out->n is restored on error. */
as_status tok_unigram_encode(const tok_unigram *u, const char *w, size_t n, tok_ids *out, as_error *err);

/* id of an exact piece, or -1. */
int32_t tok_unigram_id(const tok_unigram *u, const char *s, size_t n);

#endif
