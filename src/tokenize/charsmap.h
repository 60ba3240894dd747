/* charsmap.h — SentencePiece's precompiled_charsmap, the normalization table of the
 * `Precompiled` normalizer in tokenizer.json (T5, mT5, XLM-R, ALBERT, mBART, Marian):
 * base64 of [u32 little-endian trie size in bytes][darts-clone double-array trie of u32
 * units][NUL-separated UTF-8 replacement strings]. Parsed with every offset checked
 * (hostile files give an error, never an out-of-bounds read) and looked up as Hugging
 * Face's spm_precompiled crate does. It does not apply the table to a text
 * (normalize.c does, grapheme by grapheme, as HF does). Internal to the tokenize module.
 */
#ifndef AS_CHARSMAP_H
#define AS_CHARSMAP_H

#include "core/core.h"

#define TOK_CHARSMAP_MAX_BYTES (16u * 1024u * 1024u) /* decoded table */

typedef struct tok_charsmap tok_charsmap;

/* Decodes the base64 text b64 (n bytes) and parses the table. Errors: AS_ERR_INPUT with
 * a message naming what is wrong (bad base64, too short, trie size past the end or not
 * a multiple of 4, replacement strings not UTF-8, over TOK_CHARSMAP_MAX_BYTES);
 * AS_ERR_INTERNAL when out of memory. */
as_status tok_charsmap_init(const char *b64, size_t n, tok_charsmap **out, as_error *err);
/* As tok_charsmap_init, from the decoded table (raw, rn bytes; only read). */
as_status tok_charsmap_init_raw(const unsigned char *raw, size_t rn, tok_charsmap **out, as_error *err);
void tok_charsmap_free(tok_charsmap *c);

/* The replacement for the shortest key of the table that is a prefix of s[0..n) (the
 * first result of spm_precompiled's common_prefix_search, which HF uses): returns a
 * pointer into the table (borrowed, valid until tok_charsmap_free) and sets *len; NULL
 * when no key is a prefix of s, or when the table's entry is damaged (points outside the
 * strings or into the middle of a character). */
const char *tok_charsmap_lookup(const tok_charsmap *c, const char *s, size_t n, size_t *len);

#endif
