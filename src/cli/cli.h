/* cli.h — shared pieces of the attnscope subcommands: argument helpers, one-line
 * error reporting and exit statuses (0 success, 2 bad input, 1 internal error).
 * Each subcommand lives in its own cmd_*.c; main.c only dispatches.
 * The CLI is a client of the library: it sees include/ only (attnscope.h and the
 * tools' API in include/attnscope/), never src/.
 */
#ifndef AS_CLI_H
#define AS_CLI_H

#include "attnscope.h"

#include <stdio.h>
#include <stdlib.h>

/* Prints "attnscope: <msg>" on one line and returns err->code as an exit status. */
int cli_fail(const as_error *err);
/* Prints "attnscope <cmd>: <msg>" for a usage error and returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) AS_PRINTF(2, 3);
/* Parses a decimal int in [lo, hi]; 0 on success, -1 otherwise. */
int cli_parse_int(const char *s, long lo, long hi, int *out);
/* Parses "1,2,3" into a malloc'd array (caller frees). 0 ok, -1 bad syntax/range. */
int cli_parse_ids(const char *s, int32_t **out, int *n);
/* Returns argv[*i + 1] and advances *i, or NULL (after printing a usage error)
 * when the option has no value. */
const char *cli_value(int argc, char **argv, int *i, const char *cmd);
int cli_is_help(const char *a);
/* Parses a --capture list "attn,scores,qkv,hidden,logits" or "all" into a bit set of
 * as_capture_what. 0 ok, -1 on an unknown name or an empty list. */
int cli_parse_capture(const char *s, unsigned *what);
/* Parses --precision's value v ("f32" or "bf16") into *out; 0, or cli_usage_error's exit
 * status (2) naming cmd. */
int cli_parse_precision(const char *cmd, const char *v, as_precision *out);
/* Loads the model folder dir and sets its arithmetic to p; 0, or cli_fail's exit status
 * (*m NULL). */
int cli_load_model(const char *dir, as_precision p, as_model **m);

/* Builds the model input from --text/--text-b (tokenized, truncated to max_tokens
 * (0 = the model's limit) when truncate != 0, warnings printed) or from --ids /
 * --type-ids (comma-separated). *enc is the caller's (as_encoding_free). Returns an
 * exit status: 0, or 2/1 after printing a one-line error. */
int cli_make_encoding(const char *cmd, const as_model *m, const char *text, const char *text_b,
                      const char *ids, const char *type_ids, int max_tokens, int truncate,
                      as_encoding *enc);
/* As cli_make_encoding for an encoder-decoder model's target text (as_encode_target:
 * Marian's target.spm); same exit statuses. */
int cli_make_target_encoding(const as_model *m, const char *text, int max_tokens, int truncate, as_encoding *enc);

/* The JSON of `attnscope run --format json` for run r of input enc (src/cli/run_json.c):
 * one object with the model's sizes, tokens, input_ids, token_type_ids, attention_mask,
 * score_scale, kv_group and the captured tensors under their Hugging Face names; more
 * (may be NULL) writes further ",\n\"key\":value" members before the closing brace.
 * Returns 0, or -1 when out of memory (nothing written). Only reads m, enc and r. */
int cli_write_run_json(FILE *f, const as_model *m, const as_encoding *enc, const as_run *r,
                       void (*more)(FILE *f, void *ctx), void *ctx);
/* JSON pieces for such members: a string (always valid UTF-8, ill-formed bytes as
 * U+FFFD), ints, and a float tensor of ndim dimensions as nested arrays. */
void cli_json_str(FILE *f, const char *s);
void cli_json_ints(FILE *f, const int32_t *v, int n);
void cli_json_tensor(FILE *f, const float *data, int ndim, const int64_t *shape);
/* An encoder-decoder run's members for the decoder input tgt: decoder_layers, decoder_tokens,
 * decoder_input_ids, decoder_attention_mask (each after ",\n"). */
void cli_json_seq2seq(FILE *f, const as_model *m, const as_encoding *tgt);

int cmd_run(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_saliency(int argc, char **argv);
int cmd_attribute(int argc, char **argv);
int cmd_faithfulness(int argc, char **argv);
int cmd_analyze(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_vocab(int argc, char **argv);
int cmd_pretrain(int argc, char **argv);
int cmd_train_lm(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_lens(int argc, char **argv);
int cmd_intervene(int argc, char **argv);
int cmd_finetune(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_distill(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_align(int argc, char **argv);

#endif
