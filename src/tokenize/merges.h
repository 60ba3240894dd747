/* merges.h — the BPE merge table and merge loop shared by byte-level BPE (bpe.c) and
 * SentencePiece-style BPE (spm.c): pairs of vocabulary ids -> (rank, merged id), and
 * Hugging Face's Word::merge_all (lowest rank first, leftmost first among equal ranks;
 * a binary heap over candidate pairs, O(n log n) in the symbols of a word).
 * It does not: split text, map bytes or characters to symbols, or know any vocabulary
 * format. Internal to the tokenize module.
 */
#ifndef AS_MERGES_H
#define AS_MERGES_H

#include "tokenize/vocab.h"

typedef struct tok_merges tok_merges;

/* Builds the table from merges given as pairs of vocabulary strings, rank = index; a
 * later duplicate pair replaces the earlier one (as HF's HashMap collect does). v is
 * only read during the call. Errors: AS_ERR_INPUT naming merges[i] when a side or the
 * merged string is not in v; AS_ERR_INTERNAL when out of memory. */
as_status tok_merges_init(const tok_vocab *v, const char *const *left, const char *const *right,
                          int n, tok_merges **out, as_error *err);
void tok_merges_free(tok_merges *m);

/* One symbol of a word being merged: a doubly linked list by index. */
typedef struct {
    int32_t id;
    int32_t prev, next;  /* symbol indices, -1 at the ends */
    uint32_t start, len; /* bytes covered; len 0 = merged into its left neighbour */
} tok_sym;

typedef struct tok_cand tok_cand;

/* Per-call scratch owned by the caller (zero-initialise; tok_merge_work_free). */
typedef struct {
    tok_sym *sym;   /* (cap) */
    tok_cand *heap; /* (3 * cap) */
    size_t cap;
    int n_heap;
} tok_merge_work;

/* Makes room for n symbols; 0 when out of memory. */
int tok_merge_reserve(tok_merge_work *w, size_t n);
void tok_merge_work_free(tok_merge_work *w);

/* Merges w->sym[0..n) in place (the caller has set id, start, len and the prev/next
 * links of a plain list 0..n-1). Afterwards the surviving symbols are reached from
 * index 0 through next. Cannot fail once tok_merge_reserve(w, n) succeeded. */
void tok_merges_apply(const tok_merges *m, tok_merge_work *w, int32_t n);

#endif
