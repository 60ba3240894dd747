/* wordpiece.h — BERT's basic tokenizer (text cleanup, CJK split, lower-casing and
 * accent stripping, punctuation split) and greedy longest-match-first WordPiece,
 * as Hugging Face's BertNormalizer + BertPreTokenizer + WordPiece model do.
 * Internal to the tokenize module.
 */
#ifndef AS_WORDPIECE_H
#define AS_WORDPIECE_H

#include "tokenize/tokenizer.h"
#include "tokenize/vocab.h"

typedef struct {
    int clean_text;           /* drop control chars / U+FFFD, map whitespace to ' ' */
    int handle_chinese_chars; /* put spaces around CJK ideographs */
    int lowercase;
    int strip_accents;        /* 1 / 0; (tokenizer.json null => follows lowercase) */
    char continuing_prefix[16]; /* "##" */
    int max_input_chars_per_word; /* 100 */
    int32_t unk_id;
} tok_wordpiece_opts;

/* Encodes text (len bytes, valid UTF-8) with vocab v; offsets are byte offsets into text. */
as_status tok_wordpiece_encode(const tok_vocab *v, const tok_wordpiece_opts *o, const char *text,
                               size_t len, tok_ids *out, as_error *err);

/* Runs only BertNormalizer + BertPreTokenizer over text and calls fn once per word
 * with the UTF-8 bytes of its normalized characters (not NUL-terminated; valid only
 * during the call). fn returns 0 to go on, non-zero to stop (AS_ERR_INTERNAL).
 * Used by the vocabulary trainer (src/train/vocab_train.c). */
typedef int (*tok_word_fn)(const char *word, size_t len, void *ctx);
as_status tok_wordpiece_words(const tok_wordpiece_opts *o, const char *text, size_t len, tok_word_fn fn,
                              void *ctx, as_error *err);

#endif
