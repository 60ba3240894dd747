/* normalize.h — a normalized text that remembers, for each of its bytes, the byte range
 * of the original character it comes from (HF tokenizers' NormalizedString alignments),
 * and the tokenizer.json normalizers that SentencePiece models use beyond Prepend and
 * Replace(String): Precompiled (the charsmap), Replace(Regex), Strip, Lowercase,
 * StripAccents and the Unicode forms NFC / NFD / NFKC / NFKD. Each is applied as HF
 * applies it, through one transform (HF NormalizedString::transform_range) that gives
 * every new character its alignment. Internal to the tokenize module; spm.c runs the
 * steps in the file's order. It does not parse tokenizer.json (tokenizer.c does).
 */
#ifndef AS_NORMALIZE_H
#define AS_NORMALIZE_H

#include "tokenize/charsmap.h"
#include "tokenize/tokenizer.h"

/* A normalized text may grow (" " -> "▁" triples it, NFKD more); past this it is refused. */
#define TOK_MAX_NORM_BYTES (4u * TOK_MAX_TEXT_BYTES + 4096u)

typedef struct {
    char *s;          /* (n + 1) NUL-terminated */
    int32_t *os, *oe; /* (n) original byte range [os, oe) of each byte's character */
    size_t n;
} tok_ntext;

/* Allocates n bytes (contents undefined); 0 when out of memory (t left empty). */
int tok_ntext_alloc(tok_ntext *t, size_t n);
void tok_ntext_free(tok_ntext *t);

/* 1 for Unicode White_Space (Rust's char::is_whitespace, HF's WhitespaceSplit / Strip). */
int tok_is_whitespace(int32_t cp);

/* Unicode forms of the NFC / NFD / NFKC / NFKD normalizers. */
typedef enum { TOK_NORM_NFC = 0, TOK_NORM_NFD, TOK_NORM_NFKC, TOK_NORM_NFKD } tok_norm_form;

/* Each rewrites t in place. Errors: AS_ERR_INPUT when the result would pass
 * TOK_MAX_NORM_BYTES; AS_ERR_INTERNAL when out of memory (t unchanged then). */
/* Precompiled: grapheme by grapheme, a grapheme under 6 bytes replaced whole when a key
 * of the table is its prefix, else each of its characters looked up alone. */
as_status tok_norm_precompiled(tok_ntext *t, const tok_charsmap *c, as_error *err);
/* Strip: removes leading (left) / trailing (right) Unicode whitespace. */
as_status tok_norm_strip(tok_ntext *t, int left, int right, as_error *err);
/* Lowercase: Unicode lowercase mapping per character (U+0130 gives "i\u0307"). */
as_status tok_norm_lowercase(tok_ntext *t, as_error *err);
/* StripAccents: removes characters of general category M (Mn, Mc, Me). */
as_status tok_norm_strip_accents(tok_ntext *t, as_error *err);
/* NFC / NFD / NFKC / NFKD of the whole text, each output run (characters that
 * normalize together) aligned with the run it replaces. */
as_status tok_norm_unicode(tok_ntext *t, tok_norm_form form, as_error *err);
/* Replace(Regex): every match of re (PCRE2, UTF mode, a pcre2_code *) by content (valid
 * UTF-8, may be empty), leftmost first, non-overlapping; the content takes the alignment
 * of the match's last byte, as HF's replace gives it. */
as_status tok_norm_replace_regex(tok_ntext *t, const void *re, const char *content, as_error *err);

#endif
