/* spm.h — SentencePiece-family tokenizers as Hugging Face `tokenizers` runs their
 * tokenizer.json files: BPE over characters with byte_fallback (<0xNN> tokens), unk /
 * fuse_unk and ignore_merges (Llama 2, Mistral, Phi-3, TinyLlama, Gemma), or the Unigram
 * model (unigram.c: T5, mT5, XLM-R, ALBERT, mBART, Marian); the normalizer steps
 * (Prepend, Replace of a string or a regex, Precompiled charsmap, Strip, Lowercase,
 * StripAccents, NFC/NFD/NFKC/NFKD); the pre-tokenizer (Metaspace, a literal Split,
 * WhitespaceSplit, or WhitespaceSplit then Metaspace). Internal to the tokenize module;
 * tokenizer.c reads the options from tokenizer.json.
 */
#ifndef AS_SPM_H
#define AS_SPM_H

#include "tokenize/tokenizer.h"
#include "tokenize/charsmap.h"
#include "tokenize/unigram.h"
#include "tokenize/vocab.h"

#define TOK_SPM_MAX_OPS 16 /* normalizer steps */
#define TOK_SPM_MAX_STR 32 /* bytes of a Prepend / Replace / Split / Metaspace string, NUL included */

typedef enum {
    TOK_SPM_PREPEND = 0, TOK_SPM_REPLACE, TOK_SPM_REPLACE_REGEX, TOK_SPM_PRECOMPILED, TOK_SPM_STRIP,
    TOK_SPM_LOWERCASE, TOK_SPM_STRIP_ACCENTS, TOK_SPM_UNICODE
} tok_spm_op_kind;
typedef enum { TOK_SPM_PRE_NONE = 0, TOK_SPM_PRE_METASPACE, TOK_SPM_PRE_SPLIT } tok_spm_pre_kind;
/* Metaspace prepend_scheme: always, first (only a text starting the input), never. */
typedef enum { TOK_SPM_ALWAYS = 0, TOK_SPM_FIRST, TOK_SPM_NEVER } tok_spm_scheme;
/* HF SplitDelimiterBehavior. */
typedef enum {
    TOK_SPM_REMOVED = 0, TOK_SPM_ISOLATED, TOK_SPM_MERGED_PREV, TOK_SPM_MERGED_NEXT, TOK_SPM_CONTIGUOUS
} tok_spm_behavior;

typedef struct {
    int kind;                  /* tok_spm_op_kind */
    char from[TOK_SPM_MAX_STR]; /* Replace: the literal replaced (non-empty) */
    char to[TOK_SPM_MAX_STR];   /* Prepend: the string prepended; Replace (both): the replacement */
    int arg;                    /* Strip: 1 left | 2 right; Unicode: a tok_norm_form */
    void *own;                  /* Precompiled: its tok_charsmap; Replace(Regex): its pcre2_code (owned) */
} tok_spm_op;

typedef struct {
    tok_spm_op ops[TOK_SPM_MAX_OPS]; /* the normalizer, in order */
    int n_ops;
    int pre;                        /* tok_spm_pre_kind */
    char pre_str[TOK_SPM_MAX_STR];  /* Metaspace replacement ("▁") or the Split literal */
    int scheme;                     /* Metaspace: tok_spm_scheme */
    int split;                      /* Metaspace: split at each replacement */
    int behavior;                   /* Split: tok_spm_behavior */
    int ws_split;                   /* WhitespaceSplit first (alone when pre is NONE) */
    int byte_fallback, fuse_unk, ignore_merges;
    int32_t unk_id;                 /* -1: none (unknown characters are dropped, as HF does) */
} tok_spm_opts;

typedef struct tok_spm tok_spm;

/* Frees what o's steps own (charsmaps, regexes) and clears them from o. */
void tok_spm_opts_free(tok_spm_opts *o);

/* Builds the model over vocab v (borrowed; must outlive it) from merges given as pairs
 * of vocabulary strings (rank = index) and the options (copied; o's owned steps are
 * taken over on success only). Errors: AS_ERR_INPUT
 * for a merge naming a string not in v; AS_ERR_INTERNAL when out of memory. */
as_status tok_spm_init(const tok_vocab *v, const char *const *merge_left,
                       const char *const *merge_right, int n_merges, const tok_spm_opts *o,
                       tok_spm **out, as_error *err);
/* Builds a Unigram tokenizer over vocab v (borrowed, the same strings and ids as u)
 * with model u. Takes ownership of u and of o's owned steps on success only; o is copied.
 * Errors: AS_ERR_INTERNAL when out of memory. */
as_status tok_spm_init_unigram(const tok_vocab *v, tok_unigram *u, const tok_spm_opts *o, tok_spm **out,
                               as_error *err);
void tok_spm_free(tok_spm *s);
/* Marian (vocab.json over a SentencePiece model): the Unigram model's piece index i
 * becomes map[i] (n entries, copied) in the output, and an unknown token (the model's
 * unk_id) the id vocabulary surface (borrowed, must outlive s) gives its normalized text
 * (SentencePiece returns that text as the piece), else unk. Unigram models only.
 * Errors: AS_ERR_INTERNAL when out of memory. */
as_status tok_spm_set_remap(tok_spm *s, const int32_t *map, int n, const tok_vocab *surface, int32_t unk,
                            as_error *err);

/* Encodes text (len bytes, valid UTF-8, no added tokens in it) and appends its tokens
 * to out with byte offsets into text; a token holding part of a character (byte
 * fallback) gets the whole character's range, and a token made only of inserted
 * characters (a prepended "▁") the range of the character it stands before. at_start:
 * text begins the caller's input (Metaspace prepend_scheme "first"). Re-entrant.
 * Errors: AS_ERR_INPUT for text over TOK_MAX_TEXT_BYTES; AS_ERR_INTERNAL when out of
 * memory; out->n is restored on error. */
as_status tok_spm_encode(const tok_spm *s, const char *text, size_t len, int at_start,
                         tok_ids *out, as_error *err);

/* Registers an added token with normalized = true: HF matches it, in the normalized text
 * before pre-tokenization, as its content normalized like the text (with a Prepend("▁")
 * normalizer "<s>" becomes "▁<s>"); the longest match starting leftmost wins, and the
 * first registered of equal strings. content (len bytes, valid UTF-8) is copied.
 * Errors: AS_ERR_INTERNAL when out of memory; a content that normalizes to nothing is
 * ignored. Not thread-safe; call before encoding. */
as_status tok_spm_add_normalized(tok_spm *s, const char *content, size_t len, int32_t id, as_error *err);

/* 1 when a token with vocabulary string piece begins a new pre-tokenized word (for
 * truncation that finishes the word in progress); prev is the token before it. */
int tok_spm_word_start(const tok_spm *s, const char *prev, const char *piece);

/* The byte a byte-fallback piece ("<0x0A>") stands for, or -1 when piece is not one. */
int tok_spm_byte_piece(const char *piece);

#endif
