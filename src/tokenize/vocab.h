/* vocab.h — a token-string <-> id table (hash map + array), shared by WordPiece and
 * BPE. Internal to the tokenize module.
 */
#ifndef AS_VOCAB_H
#define AS_VOCAB_H

#include "core/core.h"

typedef struct tok_vocab tok_vocab;

tok_vocab *tok_vocab_new(void);
void tok_vocab_free(tok_vocab *v);
/* Sets piece -> id (copies piece). Ids may be sparse; size() = max id + 1.
 * Errors: AS_ERR_INPUT for id < 0 or >= AS_MAX_VOCAB, or a duplicate id. */
as_status tok_vocab_set(tok_vocab *v, const char *piece, size_t len, int32_t id, as_error *err);
int32_t tok_vocab_get(const tok_vocab *v, const char *piece, size_t len); /* -1 if absent */
const char *tok_vocab_piece(const tok_vocab *v, int32_t id);             /* NULL if absent */
int tok_vocab_size(const tok_vocab *v);
/* Length in bytes of the longest piece (0 when empty): bounds longest-match searches. */
size_t tok_vocab_max_len(const tok_vocab *v);

#endif
