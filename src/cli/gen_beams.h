/* gen_beams.h — the beam-search branch of `attnscope generate` (gen_beams.c): runs
 * gen_beam_search (attnscope/beam.h), prints the returned hypotheses and writes --out.
 * cmd_generate.c parses the options and calls it when --beams is above 1.
 */
#ifndef AS_CLI_GEN_BEAMS_H
#define AS_CLI_GEN_BEAMS_H

#include "attnscope/beam.h"
#include "cli.h"

typedef struct {
    gen_beam_opts o;
    const char *out; /* --out FILE.json|FILE.npz or NULL */
    unsigned what;   /* the final run's capture (as_capture_what bits); rows need CAP_ATTN */
    int timing;      /* --timing: the search's wall time to stderr */
} gen_beams_args;

/* Beam search from the prompt's n ids (the decoder's start for an encoder-decoder model,
 * src its source; src NULL for a causal LM) up to max_len ids. Prints one line per
 * returned hypothesis, best first; with a->out writes the best hypothesis' run and the
 * beam arrays. Returns an exit status (0, 2 bad input, 1 internal) after printing a
 * one-line error. */
int gen_beams_run(const as_model *m, const as_encoding *src, const int32_t *prompt, int n, int max_len,
                  const gen_beams_args *a);

/* Prints ids as one line of text (the tokens' bytes joined, BOS / padding / every
 * end-of-sequence id left out, ill-formed UTF-8 as U+FFFD), for greedy, sampled and
 * beam generation alike. Returns -1 when out of memory. */
int gen_print_text(const as_model *m, const int32_t *ids, int n);

#endif
