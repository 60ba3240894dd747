/* tokenizer.h — the model's tokenizer, matching Hugging Face `tokenizers`:
 * WordPiece (BERT, DistilBERT, ELECTRA), byte-level BPE (GPT-2, RoBERTa, Llama 3, Qwen)
 * SentencePiece-style BPE with byte_fallback (Llama 2, Mistral, Phi-3, Gemma) and the
 * SentencePiece Unigram model with its Precompiled charsmap (T5, mT5, XLM-R, ALBERT,
 * mBART, Marian),
 * loaded from tokenizer.json or from the legacy files (vocab.txt; vocab.json +
 * merges.txt; spiece.model of T5 / mT5) plus tokenizer_config.json /
 * special_tokens_map.json when present.
 * Adds the model's special tokens for single sentences and pairs, and keeps a byte
 * offset map into the input text. It does not run models.
 *
 * Ownership: a tok_tokenizer owns its vocabulary; tok_ids owns its arrays
 * (tok_ids_free); as_encoding is filled for the caller (as_encoding_free).
 */
#ifndef AS_TOKENIZER_H
#define AS_TOKENIZER_H

#include "core/core.h"

#define TOK_MAX_TEXT_BYTES (8u * 1024u * 1024u) /* per input text */
#define TOK_MAX_FILE_BYTES (64u * 1024u * 1024u) /* tokenizer.json, vocab files */
#define TOK_MAX_WORD_CHARS 100                  /* BERT: longer words become [UNK] */

/* A raw token sequence, before special tokens are added. */
typedef struct {
    int n, cap;
    int32_t *ids;   /* (n) */
    int32_t *start; /* (n) byte offset into the (original) text */
    int32_t *end;   /* (n) exclusive */
} tok_ids;
void tok_ids_free(tok_ids *t);
/* Appends one token; AS_ERR_INTERNAL on allocation failure. */
as_status tok_ids_push(tok_ids *t, int32_t id, int32_t start, int32_t end, as_error *err);

typedef struct tok_tokenizer tok_tokenizer;

/* Loads DIR's tokenizer. cfg decides defaults (special-token template, lower-casing)
 * when the files do not say. Errors: AS_ERR_INPUT naming the file. When unsupported is
 * not NULL it is set to 1 if the failure is a tokenizer.json model this engine does not
 * implement (WordLevel) rather than a bad file, else 0. */
as_status tok_load_dir(const char *dir, const as_config *cfg, tok_tokenizer **out, int *unsupported,
                       as_error *err);
void tok_free(tok_tokenizer *t);

/* Encodes text_a (and text_b when non-NULL) with special tokens into *out.
 * Invalid UTF-8 is replaced by U+FFFD with a warning in out->warning (offsets still
 * refer to the original bytes). Texts longer than max_len tokens (specials included)
 * are truncated longest-first with a warning when truncate != 0, else AS_ERR_INPUT.
 * An empty text ("") is AS_ERR_INPUT; a text of only whitespace is tokenized as the
 * model's tokenizer does (byte-level BPE keeps it: Llama-3 gives one token for three
 * spaces; WordPiece drops it, leaving the special tokens), and AS_ERR_INPUT only when
 * that leaves no token at all. */
as_status tok_encode(const tok_tokenizer *t, const char *text_a, const char *text_b, int max_len,
                     int truncate, as_encoding *out, as_error *err);
/* As tok_encode, with explicit byte lengths (the texts may hold NUL bytes, as JSON
 * strings can); text_b NULL for a single text. */
as_status tok_encode_n(const tok_tokenizer *t, const char *text_a, size_t len_a,
                       const char *text_b, size_t len_b, int max_len, int truncate,
                       as_encoding *out, as_error *err);
/* tok_encode of a single text as an encoder-decoder model's target: Marian's target.spm
 * (vocab.json shared); the same as tok_encode for every other tokenizer. */
as_status tok_encode_target(const tok_tokenizer *t, const char *text, int max_len, int truncate, as_encoding *out,
                            as_error *err);
/* Raw encoding of one text without special tokens (used by tok_encode and tests). */
as_status tok_encode_raw(const tok_tokenizer *t, const char *text, tok_ids *out, as_error *err);

int tok_n_vocab(const tok_tokenizer *t);
/* Token string for id as stored in the vocabulary ("##ing", "Ġthe"); NULL if out of range. */
const char *tok_id_to_piece(const tok_tokenizer *t, int32_t id);
/* id for an exact vocabulary string, or -1. */
int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece);
/* Human-readable form of a token, owned by the caller: byte-level BPE pieces decoded to
 * their bytes ("Ġthe" -> " the"), SentencePiece-style pieces through the file's decoder
 * ("▁the" -> " the", "<0x0A>" -> the byte 0x0A; a NUL byte reads "": see
 * tok_piece_bytes), "##" kept. */
char *tok_piece_display(const tok_tokenizer *t, int32_t id);
/* As tok_piece_display, also giving the byte count, which a piece standing for a NUL
 * byte ("<0x00>", GPT-2's "Ā") needs: *len = 1 there while the string reads "". NULL
 * (and *len = 0) when id is unknown or out of memory. */
char *tok_piece_bytes(const tok_tokenizer *t, int32_t id, size_t *len);
const char *tok_kind_name(const tok_tokenizer *t); /* "wordpiece", "bpe" or "unigram" */

typedef enum { TOK_SP_CLS = 0, TOK_SP_SEP, TOK_SP_PAD, TOK_SP_UNK, TOK_SP_MASK, TOK_SP_BOS, TOK_SP_EOS, TOK_SP_COUNT } tok_special;
/* id of a special token, -1 when the tokenizer has none. */
int32_t tok_special_id(const tok_tokenizer *t, tok_special which);

#endif
