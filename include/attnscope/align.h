/* attnscope/align.h — word alignment from an encoder-decoder model's cross-attention,
 * scored against gold alignments by the alignment error rate (Och & Ney 2003).
 * Part of the tools' API (attnscope.h, "Library and tools"): `attnscope align`,
 * `attnscope analyze --source/--target` and the server are built on it.
 *
 * What it does: reads Pharaoh alignment lines ("0-0 1-2 2?1": source word i, target
 * word j, 0-based; '-' a sure link, '?' or 'p' a possible one), maps a sentence's tokens
 * to its whitespace-separated words, turns one cross-attention head (target rows ×
 * source columns) into a word × word matrix, aligns each target word to the source word
 * it attends to most, per layer and head and for the mean of a layer's heads, and counts
 * what AER needs.
 * What it does not: run the model, tokenize or store anything (the CLI, analysis runner
 * and server do); it computes no other aligner (no thresholds, no bidirectional
 * symmetrisation). Formulas and choices: docs/analysis.md, "Word alignment".
 *
 * Dimension letters: L decoder layers, H heads, Tt decoder positions (rows), Ts source
 * tokens (columns), Wt target words, Ws source words.
 */
#ifndef ATTNSCOPE_ALIGN_H
#define ATTNSCOPE_ALIGN_H

#include "attnscope.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Limits on untrusted input. */
#define AL_MAX_WORDS 1024             /* words per sentence */
#define AL_MAX_LINKS 65536            /* links per alignment line */
#define AL_MAX_LINE_BYTES (1 << 20)   /* bytes per line of a sentence or alignment file */
#define AL_MAX_LINES 100000           /* lines per file */
#define AL_MAX_FILE_BYTES (256u << 20) /* bytes per file */

/* One gold link: source word src, target word tgt; sure 1, possible 0. */
typedef struct {
    int32_t src, tgt;
    int32_t sure;
} al_link;

/* The gold links of one sentence pair: sorted by (tgt, src), each pair once (a pair given
 * both sure and possible is sure). */
typedef struct {
    int n;
    al_link *links; /* (n), owned */
} al_links;

/* Parses one Pharaoh line (NUL-terminated; empty or blank = no links) into *out
 * (al_links_free). Each pair is "I-J" (sure), "I?J" or "IpJ" (possible), separated by
 * spaces or tabs, I the source word and J the target word, both 0-based. n_src / n_tgt:
 * the sentence's word counts, every index must be below them (-1: not checked).
 * Errors: AS_ERR_INPUT "PATH:LINE: pair K 'TEXT': ..." naming the pair (1-based K) and what
 * is wrong (syntax, an index outside the sentence, more than AL_MAX_LINKS pairs);
 * AS_ERR_INTERNAL out of memory. */
as_status al_parse_line(const char *path, int line, const char *text, int n_src, int n_tgt, al_links *out,
                        as_error *err);
void al_links_free(al_links *a);

/* The lines of a text file (sentences or alignments), '\n' or "\r\n" ended, a last line
 * without one kept. *lines (n) owned by the caller (al_lines_free). Errors: AS_ERR_INPUT
 * naming the path for a file that cannot be read, is not a regular file, is over
 * AL_MAX_FILE_BYTES, has a NUL byte, a line over AL_MAX_LINE_BYTES or more than
 * AL_MAX_LINES lines. */
as_status al_read_lines(const char *path, char ***lines, int *n, as_error *err);
void al_lines_free(char **lines, int n);

/* Number of whitespace-separated words of text (space, tab); -1 when over AL_MAX_WORDS. */
int al_count_words(const char *text);

/* Word of each token of enc, an encoding of text: word[t] is the word (0-based, words
 * split on spaces and tabs) holding the first non-space byte of the token's span
 * [start, end), or for a token of spaces only the next word; -1 for special tokens and
 * padding (start < 0, mask 0). *n_words: the text's word count. Errors: AS_ERR_INPUT when
 * the text has more than AL_MAX_WORDS words. */
as_status al_token_words(const as_encoding *enc, const char *text, int *word, int *n_words, as_error *err);

/* Decoder rows of a target: row_word (Tt) from the target's own tokens' words label_word
 * (Tt, al_token_words of the target encoding before the shift of
 * as_seq2seq_shift_target). shift 0: row i stands for label token i, the position that
 * predicts it; shift 1: row i stands for label token i - 1, the position that reads it
 * as input (Chen et al. 2020, "Shift-Att"). */
void al_target_rows(const int *label_word, int Tt, int shift, int *row_word);

/* Word-level cross-attention of one head: Wm[b, a] (Wt, Ws) = mean over the rows i with
 * row_word[i] == b of the sum over the columns j with src_word[j] == a of A[i, j]
 * (Clark et al. 2019, sec. 4.1: keys summed over a word's pieces, queries averaged).
 * A: (Tt, Ts). Rows and columns with word -1 are dropped; a word without pieces gets
 * zeros. */
void al_word_matrix(const float *A, int Tt, int Ts, const int *row_word, int Wt, const int *src_word, int Ws,
                    float *Wm);

/* best (Wt): for each target word b with rows (row_has[b] != 0) the source word a with
 * pieces (src_has[a] != 0) of largest Wm[b, a], the lowest index on ties; -1 otherwise. */
void al_argmax(const float *Wm, int Wt, int Ws, const uint8_t *row_has, const uint8_t *src_has, int32_t *best);

/* Argmax alignment of every captured layer and head of a cross-attention run (cross:
 * as_run ->cross of as_forward_seq2seq, attention captured) and of each layer's head mean
 * (the mean of its captured heads' A, then the word matrix): best (n_lay, n_hd + 1, Wt),
 * the mean at head index n_hd. row_word (cross->T), src_word (cross->Tk) as above.
 * Errors: AS_ERR_INPUT when the attention was not captured; AS_ERR_INTERNAL out of memory. */
as_status al_align_run(const as_run *cross, const int *row_word, int Wt, const int *src_word, int Ws, int32_t *best,
                       as_error *err);

/* What AER needs, summed over sentences: |A|, |S|, |A∩S|, |A∩P| (P = sure ∪ possible). */
typedef struct {
    int64_t a, s, a_s, a_p;
} al_counts;

/* Adds the alignment best (Wt: best[b] the source word of target word b, or -1 for none)
 * scored against gold to *c. */
void al_count(const int32_t *best, int Wt, const al_links *gold, al_counts *c);
/* AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|) (Och & Ney 2003, sec. 5); NAN when |A| + |S| = 0. */
double al_aer(const al_counts *c);

/* best (Wt) as a Pharaoh line "a-b a-b ..." in target order, into buf (cap bytes,
 * truncated, always NUL-terminated). Returns buf. */
char *al_format(const int32_t *best, int Wt, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
