/* cmd_generate.c — `attnscope generate`: autoregressive continuation of a prompt by a
 * model with a causal-LM head (GPT-2, the LLaMA family) on the one forward (as_forward).
 * Decoder-only models run the prompt once and then one token per step on a key/value
 * cache (model_forward_step; not for dynamic NTK or LongRoPE, whose frequencies follow
 * the length, nor with --full-forward, where each step runs the whole sequence again);
 * encoder-decoder models run the encoder once and the decoder on a cache (model_s2s_step).
 * Each step takes the last position's logits: greedy argmax at temperature 0, else a
 * draw from softmax(logits / temperature) over the top-k ids, from a splitmix64 stream
 * seeded by --seed (Steele et al. 2014), so a seed gives the same text. With --out, the
 * final sequence's run (the file `attnscope run` writes, JSON or npz) plus the generated
 * ids and, when attention is captured, each step's attention row of the position that
 * chose the new token. Encoder-decoder models (bart, mbart, marian, t5, mt5) take the
 * prompt as the source and generate the decoder's sequence from decoder_start_token_id (or
 * --target-ids), each step a whole as_forward_seq2seq; their per-step rows are the
 * cross-attention's (which source tokens the choosing position read). The steps are the
 * library's (attnscope/generate.h, shared with the server's generate route); this file
 * parses, prints and writes. --beams N hands the search, printing and writing to
 * gen_beams.c (attnscope/beam.h). What it does not: repetition penalties, batches.
 */
#include "cli.h"
#include "gen_beams.h"
#include "attnscope/generate.h"

#include <math.h>
#include <string.h>

static const char *GEN_HELP =
    "usage: attnscope generate --model DIR (--text PROMPT | --ids 1,2,...) [--max-new 50]\n"
    "                          [--temperature 0 | --top-k K [--temperature 1] [--seed 0]]\n"
    "                          [--stop-at-eos] [--out FILE.json|FILE.npz] [--top N] [--target-ids 2,...]\n"
    "                          [--capture attentions|all|attn,scores,qkv,hidden,logits]\n"
    "                          [--beams N [--length-penalty 1] [--early-stopping] [--num-return 1]]\n"
    "                          [--precision f32|bf16] [--threads N] [--full-forward] [--timing]\n"
    "                          [--quiet]\n"
    "\n"
    "Continues the prompt (tokenized with the model's special tokens, e.g. BOS) by up to\n"
    "--max-new tokens with the model's LM head and prints the prompt and its continuation.\n"
    "--temperature 0 (the default without --top-k) is greedy: the most likely next token.\n"
    "A temperature > 0 or --top-k K samples from softmax(logits / temperature) over the K\n"
    "most likely ids (all ids without --top-k; temperature 1 when only --top-k is given)\n"
    "with a pseudo-random stream seeded by --seed: the same seed gives the same text.\n"
    "--stop-at-eos stops after any id of the config's eos_token_id. As Hugging Face's\n"
    "generate, the config's bad_words_ids are never generated and forced_bos_token_id /\n"
    "forced_eos_token_id force the first / last token (see --beams). Generation stops at the\n"
    "model's positions. Decoder-only models (GPT-2, the LLaMA family) read the prompt once\n"
    "and then one token per step, keeping every layer's keys and values (a key/value\n"
    "cache; with --beams one per beam); encoder-decoder models run the source through the\n"
    "encoder once and the decoder on a cache (one per beam). --full-forward runs the whole\n"
    "sequence again at each step instead (as do RoPE scalings that follow the length:\n"
    "dynamic, longrope).\n"
    "Both give the same tokens and rows to rounding. --timing prints to stderr the\n"
    "generation's wall time (model load and --out excluded) and its tokens per second.\n"
    "--precision bf16 multiplies the linear maps in BF16 (as `attnscope run`'s).\n"
    "\n"
    "--out writes the final sequence as `attnscope run` writes it (JSON, or npz for a name\n"
    "ending in .npz; --capture as run's, default attentions), plus prompt_length,\n"
    "generated_ids [steps] and, with attention captured, generation_attentions\n"
    "[steps, L, H, T]: at step s, every head's attention row of the position that chose\n"
    "the new token (position prompt_length - 1 + s; keys after it are 0), and\n"
    "generation_probs [steps]: the probability the model gave each chosen token (softmax of\n"
    "its logits after the processors above, before temperature and top-k); --top N (1..20)\n"
    "adds generation_top_ids and generation_top_probs [steps, N], each step's N most\n"
    "probable ids (ties: lower id first; -1 and 0 past a smaller vocabulary).\n"
    "\n"
    "Encoder-decoder models (bart, mbart, marian, t5, mt5): the prompt is the source; the\n"
    "decoder's sequence starts with decoder_start_token_id, or with --target-ids (mBART:\n"
    "give the target language code), and grows from there; the text printed is the decoder's\n"
    "(prompt_length counts its start). --out writes the final run as `attnscope run --target-ids`\n"
    "does, and generation_cross_attentions [steps, L, H, Ts]: at step s, every decoder layer's\n"
    "and head's cross-attention row of the choosing position over the Ts source tokens.\n"
    "\n"
    "--beams N (2..16) is beam search as Hugging Face's generate runs it (num_beams, no\n"
    "sampling): the N best partial sequences by their sum of log-probabilities grow one token\n"
    "at a time; a hypothesis ends at the model's eos_token_id (every id config.json lists),\n"
    "the config's bad_words_ids are never generated (Marian: its pad id),\n"
    "the config's forced_bos_token_id / forced_eos_token_id (BART and mBART: 2, Marian: 0 when\n"
    "absent) force the first / last token, and hypotheses rank by sum / generated_length^\n"
    "--length-penalty. --early-stopping stops once N hypotheses have ended (else when none\n"
    "left running can beat them); --num-return R (<= N) prints the R best, one per line.\n"
    "With --out: the best hypothesis' run and generated_ids, generation_attentions [steps, L,\n"
    "H, T] (its (decoder) self-attention rows) and, for encoder-decoder models,\n"
    "generation_cross_attentions; beam_sequences [R, Tmax] (-1 after each end), beam_lengths,\n"
    "beam_scores, beam_sum_logprobs [R], beam_attentions [R, Smax, L, H, Tmax] and\n"
    "beam_cross_attentions [R, Smax, L, H, Ts], each row from the forward over its sequence.\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    const char *model, *text, *ids, *out, *capture, *target_ids;
    int max_new, top_k, seed, stop_eos, threads, quiet, full_forward, timing, top;
    as_precision precision;
    double temperature; /* < 0: not given */
    int beams, num_return, early_stopping; /* num_return 0: not given */
    double length_penalty;                 /* NAN: not given */
} gen_args;

static int gen_parse(int argc, char **argv, gen_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v;
        if (!strcmp(o, "--stop-at-eos")) {
            a->stop_eos = 1;
            continue;
        }
        if (!strcmp(o, "--quiet")) {
            a->quiet = 1;
            continue;
        }
        if (!strcmp(o, "--full-forward")) {
            a->full_forward = 1;
            continue;
        }
        if (!strcmp(o, "--timing")) {
            a->timing = 1;
            continue;
        }
        if (!strcmp(o, "--early-stopping")) {
            a->early_stopping = 1;
            continue;
        }
        if (cli_is_help(o)) {
            fputs(GEN_HELP, stdout);
            return -1;
        }
        if (!(v = cli_value(argc, argv, &i, "generate"))) return AS_ERR_INPUT;
        char *end;
        if (!strcmp(o, "--model")) a->model = v;
        else if (!strcmp(o, "--text")) a->text = v;
        else if (!strcmp(o, "--ids")) a->ids = v;
        else if (!strcmp(o, "--target-ids")) a->target_ids = v;
        else if (!strcmp(o, "--out")) a->out = v;
        else if (!strcmp(o, "--capture")) a->capture = v;
        else if (!strcmp(o, "--precision")) {
            if (cli_parse_precision("generate", v, &a->precision)) return AS_ERR_INPUT;
        } else if (!strcmp(o, "--max-new")) {
            if (cli_parse_int(v, 1, AS_MAX_POSITIONS, &a->max_new))
                return cli_usage_error("generate", "bad --max-new '%s' (1..%d)", v, AS_MAX_POSITIONS);
        } else if (!strcmp(o, "--top-k")) {
            if (cli_parse_int(v, 1, AS_MAX_VOCAB, &a->top_k)) return cli_usage_error("generate", "bad --top-k '%s'", v);
        } else if (!strcmp(o, "--top")) {
            if (cli_parse_int(v, 1, GEN_MAX_TOP, &a->top))
                return cli_usage_error("generate", "bad --top '%s' (1..%d)", v, GEN_MAX_TOP);
        } else if (!strcmp(o, "--seed")) {
            if (cli_parse_int(v, 0, 2147483647, &a->seed)) return cli_usage_error("generate", "bad --seed '%s'", v);
        } else if (!strcmp(o, "--threads")) {
            if (cli_parse_int(v, 1, 1024, &a->threads)) return cli_usage_error("generate", "bad --threads '%s'", v);
        } else if (!strcmp(o, "--beams")) {
            if (cli_parse_int(v, 1, GEN_MAX_BEAMS, &a->beams))
                return cli_usage_error("generate", "bad --beams '%s' (1..%d)", v, GEN_MAX_BEAMS);
        } else if (!strcmp(o, "--num-return")) {
            if (cli_parse_int(v, 1, GEN_MAX_BEAMS, &a->num_return))
                return cli_usage_error("generate", "bad --num-return '%s' (1..%d)", v, GEN_MAX_BEAMS);
        } else if (!strcmp(o, "--length-penalty")) {
            a->length_penalty = strtod(v, &end);
            if (end == v || *end || !isfinite(a->length_penalty) || fabs(a->length_penalty) > 100)
                return cli_usage_error("generate", "bad --length-penalty '%s' (a number in [-100, 100])", v);
        } else if (!strcmp(o, "--temperature")) {
            a->temperature = strtod(v, &end);
            if (end == v || *end || !isfinite(a->temperature) || a->temperature < 0 || a->temperature > 100)
                return cli_usage_error("generate", "bad --temperature '%s' (a number in [0, 100])", v);
        } else return cli_usage_error("generate", "unknown option '%s'", o);
    }
    if (!a->model) return cli_usage_error("generate", "--model DIR is required");
    if (!a->text == !a->ids) return cli_usage_error("generate", "give exactly one of --text or --ids");
    if (a->top_k && a->temperature == 0.0)
        return cli_usage_error("generate", "--top-k samples: it needs a --temperature above 0");
    if (a->temperature < 0) a->temperature = a->top_k ? 1.0 : 0.0;
    if ((a->capture || a->top) && !a->out)
        return cli_usage_error("generate", "%s needs --out FILE", a->capture ? "--capture" : "--top");
    if (a->top && a->beams > 1)
        return cli_usage_error("generate", "--top applies to greedy and sampled generation, not --beams");
    if (a->beams <= 1 && (a->early_stopping || a->num_return || !isnan(a->length_penalty)))
        return cli_usage_error("generate", "--early-stopping, --num-return and --length-penalty need --beams 2 or more");
    if (a->beams > 1 && a->temperature != 0.0)
        return cli_usage_error("generate", "--beams does not sample: leave out --temperature and --top-k");
    if (a->num_return > a->beams && a->beams > 1)
        return cli_usage_error("generate", "bad --num-return %d (at most --beams, %d)", a->num_return, a->beams);
    return 0;
}

typedef struct {
    const gen_result *g;
    const as_encoding *src; /* encoder-decoder models: the source (the prompt), else NULL */
    const as_model *m;
    const as_encoding *dec; /* the final sequence (the decoder's for an encoder-decoder model) */
} gen_json_ctx;

static void gen_json_more(FILE *f, void *vctx) {
    const gen_json_ctx *ctx = vctx;
    const gen_result *g = ctx->g;
    const as_encoding *src = ctx->src;
    if (src) cli_json_seq2seq(f, ctx->m, ctx->dec);
    fprintf(f, ",\n\"prompt_length\":%d,\n\"generated_ids\":", g->prompt_len);
    cli_json_ints(f, g->gen, g->steps);
    int64_t n1[1] = {g->steps}, n2[2] = {g->steps, g->top};
    fputs(",\n\"generation_probs\":", f);
    cli_json_tensor(f, g->probs, 1, n1);
    if (g->top) {
        fputs(",\n\"generation_top_ids\":[", f);
        for (int st = 0; st < g->steps; st++) {
            fputs(st ? "," : "", f);
            cli_json_ints(f, g->top_ids + (size_t)st * g->top, g->top);
        }
        fputc(']', f);
        fputs(",\n\"generation_top_probs\":", f);
        cli_json_tensor(f, g->top_probs, 2, n2);
    }
    if (g->rows) {
        int64_t shape[4] = {g->steps, g->L, g->H, g->K};
        fprintf(f, ",\n\"%s\":", src ? "generation_cross_attentions" : "generation_attentions");
        cli_json_tensor(f, g->rows, 4, shape);
    }
}

/* The final sequence's run with the generation arrays, as JSON or npz. */
static as_status gen_write(const as_model *m, const gen_args *a, unsigned what, const int32_t *ids, int n,
                           const gen_result *g, const as_encoding *src, as_error *err) {
    as_encoding enc = {0};
    as_run *r = NULL;
    as_capture_spec spec = {.what = what, .layer = -1, .head = -1, .threads = a->threads};
    as_status s = as_encoding_from_ids(m, ids, NULL, n, &enc, err);
    if (!s) s = src ? as_forward_seq2seq(m, src, &enc, &spec, &r, err) : as_forward(m, &enc, &spec, &r, err);
    size_t len = strlen(a->out);
    if (!s && len >= 4 && !strcmp(a->out + len - 4, ".npz")) {
        int32_t pl = g->prompt_len;
        as_npz_extra ex[6] = {{"prompt_length", DTYPE_I32, &pl, 1, {1}},
                              {"generated_ids", DTYPE_I32, g->gen, 1, {g->steps}},
                              {"generation_probs", DTYPE_F32, g->probs, 1, {g->steps}}};
        int n_ex = 3;
        if (g->top) {
            ex[n_ex++] = (as_npz_extra){"generation_top_ids", DTYPE_I32, g->top_ids, 2, {g->steps, g->top}};
            ex[n_ex++] = (as_npz_extra){"generation_top_probs", DTYPE_F32, g->top_probs, 2, {g->steps, g->top}};
        }
        if (g->rows)
            ex[n_ex++] = (as_npz_extra){src ? "generation_cross_attentions" : "generation_attentions", DTYPE_F32,
                                        g->rows, 4, {g->steps, g->L, g->H, g->K}};
        s = src ? as_run_write_npz_seq2seq_extra(m, src, &enc, r, ex, n_ex, a->out, err)
                : as_run_write_npz_extra(m, &enc, r, ex, n_ex, a->out, err);
    } else if (!s) {
        FILE *f = fopen(a->out, "wb");
        gen_json_ctx ctx = {g, src, m, &enc};
        if (!f) s = as_err_set(err, AS_ERR_INPUT, "%s: cannot create the output file", a->out);
        else {
            int oom = cli_write_run_json(f, m, src ? src : &enc, r, gen_json_more, &ctx) != 0;
            int bad = ferror(f) | (fclose(f) != 0);
            if (oom) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            else if (bad) s = as_err_set(err, AS_ERR_INTERNAL, "%s: write failed", a->out);
        }
    }
    as_run_free(r);
    as_encoding_free(&enc);
    return s;
}

/* The decoder's first ids of an encoder-decoder model: --target-ids, else
 * decoder_start_token_id; dec stays empty for other models (--target-ids refused there). */
static int gen_decoder_start(const as_model *m, const gen_args *a, as_encoding *dec) {
    const as_config *c = as_model_config(m);
    if (!c->n_dec_layer)
        return a->target_ids ? cli_usage_error("generate", "--target-ids: %s is not an encoder-decoder model (%s)",
                                               as_model_dir(m), c->model_type)
                             : 0;
    if (a->target_ids) return cli_make_encoding("generate", m, NULL, NULL, a->target_ids, NULL, 0, 0, dec);
    if (c->decoder_start_token_id < 0)
        return cli_usage_error("generate", "%s has no decoder_start_token_id: give the decoder's first ids with "
                                           "--target-ids (mBART: the target language code)",
                               as_model_dir(m));
    as_error err = {0};
    int32_t start = c->decoder_start_token_id;
    return as_encoding_from_ids(m, &start, NULL, 1, dec, &err) ? cli_fail(&err) : 0;
}

int cmd_generate(int argc, char **argv) {
    gen_args a = {.max_new = 50, .temperature = -1.0, .beams = 1, .length_penalty = NAN};
    int rc = gen_parse(argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    unsigned what = CAP_ATTN;
    if (a.capture && strcmp(a.capture, "attentions") && cli_parse_capture(a.capture, &what))
        return cli_usage_error("generate", "bad --capture '%s' (attentions, all, attn, scores, qkv, hidden, logits)",
                               a.capture);
    as_set_quiet(a.quiet);
    as_error err = {0};
    as_model *m = NULL;
    as_encoding enc = {0}, dec = {0};
    gen_result g = {0};
    if ((rc = cli_load_model(a.model, a.precision, &m))) return rc;
    if (!(as_model_heads(m) & HEAD_LM)) {
        as_err_set(&err, AS_ERR_INPUT, "%s: the model has no causal-LM head to generate with", a.model);
        rc = cli_fail(&err);
        goto cleanup;
    }
    if ((rc = cli_make_encoding("generate", m, a.text, NULL, a.ids, NULL, 0, 0, &enc))) goto cleanup;
    const as_config *c = as_model_config(m);
    if ((rc = gen_decoder_start(m, &a, &dec))) goto cleanup;
    const as_encoding *seq = c->n_dec_layer ? &dec : &enc; /* the sequence that grows */
    int max = as_model_max_tokens(m), n = seq->n;
    if (n >= max) {
        rc = cli_usage_error("generate", "the prompt has %d tokens: no room left in the model's %d positions", n, max);
        goto cleanup;
    }
    if (n + a.max_new > max) as_warn("stopping at the model's %d positions (%d new tokens)", max, max - n);
    if (a.beams > 1) {
        gen_beams_args ba = {.o = {.beams = a.beams, .num_return = a.num_return ? a.num_return : 1,
                                   .early_stopping = a.early_stopping,
                                   .length_penalty = isnan(a.length_penalty) ? 1.0 : a.length_penalty,
                                   .threads = a.threads, .full_forward = a.full_forward},
                             .out = a.out, .what = what, .timing = a.timing};
        rc = gen_beams_run(m, c->n_dec_layer ? &enc : NULL, seq->ids, n, n + a.max_new < max ? n + a.max_new : max, &ba);
        goto cleanup;
    }
    const as_encoding *src = c->n_dec_layer ? &enc : NULL;
    gen_opts o = {.max_new = a.max_new, .temperature = a.temperature, .top_k = a.top_k, .seed = (uint64_t)a.seed,
                  .stop_eos = a.stop_eos, .rows = a.out && (what & CAP_ATTN), .threads = a.threads,
                  .full_forward = a.full_forward, .probs = a.out != NULL, .top = a.top};
    double t0 = as_now();
    if (gen_generate(m, src, seq->ids, n, &o, &g, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    double ms = (as_now() - t0) * 1e3;
    if (a.timing)
        fprintf(stderr, "generate: %d tokens after a %d-token prompt in %.1f ms (%.2f tokens/s)%s\n", g.steps,
                g.prompt_len, ms, ms > 0 ? g.steps / (ms * 1e-3) : 0.0,
                g.cached ? ", key/value cache" : ", each step the whole sequence");
    if (a.out && gen_write(m, &a, what, g.ids, g.T, &g, src, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if (gen_print_text(m, g.ids, g.T)) {
        as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
        rc = cli_fail(&err);
    }
cleanup:
    gen_result_free(&g);
    as_encoding_free(&dec);
    as_encoding_free(&enc);
    as_model_free(m);
    return rc;
}
