/* bpe.h — byte-level BPE as GPT-2 / RoBERTa (and tokenizer.json files such as
 * Llama-3's and Qwen's) use it: a pre-tokenizer regex (PCRE2, Unicode classes),
 * the bytes-to-unicode map, merges applied by rank. Internal to the tokenize module.
 */
#ifndef AS_BPE_H
#define AS_BPE_H

#include "tokenize/tokenizer.h"
#include "tokenize/vocab.h"

typedef struct tok_bpe tok_bpe;

/* GPT-2's pre-tokenizer pattern (ByteLevel with use_regex = true). */
#define TOK_GPT2_PATTERN \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

/* The UTF-8 of byte b's character in the byte-level alphabet (GPT-2's bytes_to_unicode). */
const char *tok_bpe_byte_str(uint8_t b);

/* Builds a BPE model over vocab v (borrowed; must outlive the model) from merges
 * given as pairs of vocabulary strings, rank = index. pattern: the split regex (or
 * NULL for the GPT-2 pattern); add_prefix_space as in ByteLevel. */
as_status tok_bpe_init(const tok_vocab *v, const char *const *merge_left,
                       const char *const *merge_right, int n_merges, const char *pattern,
                       int add_prefix_space, tok_bpe **out, as_error *err);
void tok_bpe_free(tok_bpe *b);
/* Encodes text (len bytes, valid UTF-8); offsets are byte offsets into text. */
/* (bpe.c owner:) appends to out (out->n is restored on error). As in HF, a token
 * covers whole characters: one holding part of a multi-byte character gets that
 * character's full byte range; the add_prefix_space space takes the first character's.
 * Re-entrant (b is read-only). Errors: AS_ERR_INPUT for invalid UTF-8, text over
 * TOK_MAX_TEXT_BYTES, regex match limits, a byte missing from the vocabulary (no unk);
 * AS_ERR_INTERNAL when out of memory. tok_bpe_init errors: AS_ERR_INPUT for a pattern
 * PCRE2 rejects or a merge naming a token (or merged token) not in v. */
as_status tok_bpe_encode(const tok_bpe *b, const char *text, size_t len, tok_ids *out,
                         as_error *err);
/* Decodes a byte-level piece ("Ġthe") to its UTF-8 bytes (" the"). Owned by caller. */
char *tok_bpe_piece_to_text(const char *piece);

/* Additions (bpe.c owner). Options beyond tok_bpe_init's, set before encoding:
 * ignore_merges as in tokenizer.json's model.ignore_merges (Llama-3: a piece found
 * whole in the vocabulary is one token); unk_id: id used for a byte whose char is
 * missing from the vocabulary (default -1: encoding such a byte is AS_ERR_INPUT). */
void tok_bpe_set_ignore_merges(tok_bpe *b, int on);
void tok_bpe_set_unk(tok_bpe *b, int32_t unk_id);
/* As tok_bpe_piece_to_text, also giving the byte count (a piece may decode to a 0
 * byte or to part of a UTF-8 character). A piece holding a char that is not a byte
 * char is returned unchanged, as HF's ByteLevel decoder does. NULL when out of memory. */
char *tok_bpe_piece_to_bytes(const char *piece, size_t *out_len);

#endif
