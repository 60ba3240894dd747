/* conllu.h — reads Universal Dependencies CoNLL-U files (https://universaldependencies.org/format.html)
 * and aligns each sentence's syntactic words to byte spans of its "# text =" line, and
 * from there to a model's tokens.
 *
 * What it does: parses word lines (ID, FORM, ..., HEAD, DEPREL), skips multi-word token
 * range lines ("1-2") and empty nodes ("8.1") while using the range lines for the
 * alignment (the surface form "didn't" is what appears in the text; its words "did" and
 * "n't" get the sub-spans when their forms concatenate to the surface form, else the
 * first word gets the whole span and the others none). A sentence without "# text ="
 * gets its text rebuilt from the surface forms and SpaceAfter=No. Malformed input (wrong
 * field count, bad or non-sequential IDs, HEAD out of range, empty DEPREL, a form that
 * is not in the text, too long lines or sentences) is AS_ERR_INPUT naming file and line.
 * What it does not: enhanced dependencies (DEPS), features, lemmas, or validation of
 * the tree's shape beyond HEAD ranges.
 */
#ifndef AS_CONLLU_H
#define AS_CONLLU_H

#include "core/core.h"

#define CU_MAX_FILE_BYTES ((size_t)1 << 30)
#define CU_MAX_WORDS 4096  /* words per sentence */
#define CU_MAX_LINE 65536  /* bytes per line */

typedef struct {
    char *form;   /* owned */
    char *deprel; /* owned; full label as written ("nmod:poss") */
    int head;     /* 0-based index of the parent word; -1 for the root */
    int start;    /* byte span [start, end) in the sentence text; -1, -1 when none */
    int end;
    int line;     /* 1-based line of the word in the file */
} cu_word;

typedef struct {
    char *text;    /* owned: "# text =" value, or rebuilt */
    char *sent_id; /* owned, or NULL */
    int line;      /* 1-based line of the sentence's first line */
    int n_words;   /* W */
    cu_word *words;/* (W) owned */
} cu_sentence;

typedef struct {
    int n;
    cu_sentence *s; /* (n) owned */
} cu_corpus;

/* Reads up to limit sentences (limit <= 0: all) of path into *out (caller frees with
 * cu_corpus_free, also after an error). Errors: AS_ERR_INPUT "path:line: what". */
as_status cu_read(const char *path, int limit, cu_corpus *out, as_error *err);
/* Same on an in-memory buffer (name is used in messages). */
as_status cu_parse(const char *name, const char *buf, size_t len, int limit, cu_corpus *out,
                   as_error *err);
void cu_corpus_free(cu_corpus *c);

/* Maps tokens to words: word_of_token[t] = the word whose byte span contains the
 * token's start offset start[t]; -1 for tokens with start < 0 (specials, pads) or that
 * start outside every word. start: (T). word_of_token: (T) written. */
void cu_token_words(const cu_sentence *s, const int32_t *start, int T, int *word_of_token);

#endif
