/* cmd_generate.c — `attnscope generate`: autoregressive continuation of a prompt by a
 * model with a causal-LM head (GPT-2, the LLaMA family) on the one forward (as_forward).
 * Each step runs the whole sequence so far again (no key/value cache: the forward keeps
 * none) and takes the last position's logits: greedy argmax at temperature 0, else a
 * draw from softmax(logits / temperature) over the top-k ids, from a splitmix64 stream
 * seeded by --seed (Steele et al. 2014), so a seed gives the same text. With --out, the
 * final sequence's run (the file `attnscope run` writes, JSON or npz) plus the generated
 * ids and, when attention is captured, each step's attention row of the position that
 * chose the new token. Encoder-decoder models (bart, mbart, marian, t5, mt5) take the
 * prompt as the source and generate the decoder's sequence from decoder_start_token_id (or
 * --target-ids), each step a whole as_forward_seq2seq; their per-step rows are the
 * cross-attention's (which source tokens the choosing position read). What it does not:
 * beam search, repetition penalties, batches.
 */
#include "cli.h"

#include <math.h>
#include <string.h>

static const char *GEN_HELP =
    "usage: attnscope generate --model DIR (--text PROMPT | --ids 1,2,...) [--max-new 50]\n"
    "                          [--temperature 0 | --top-k K [--temperature 1] [--seed 0]]\n"
    "                          [--stop-at-eos] [--out FILE.json|FILE.npz] [--target-ids 2,...]\n"
    "                          [--capture attentions|all|attn,scores,qkv,hidden,logits]\n"
    "                          [--threads N] [--quiet]\n"
    "\n"
    "Continues the prompt (tokenized with the model's special tokens, e.g. BOS) by up to\n"
    "--max-new tokens with the model's LM head and prints the prompt and its continuation.\n"
    "--temperature 0 (the default without --top-k) is greedy: the most likely next token.\n"
    "A temperature > 0 or --top-k K samples from softmax(logits / temperature) over the K\n"
    "most likely ids (all ids without --top-k; temperature 1 when only --top-k is given)\n"
    "with a pseudo-random stream seeded by --seed: the same seed gives the same text.\n"
    "--stop-at-eos stops after the model's end-of-sequence token. Generation stops at the\n"
    "model's positions. Each step runs the whole sequence again (no key/value cache).\n"
    "\n"
    "--out writes the final sequence as `attnscope run` writes it (JSON, or npz for a name\n"
    "ending in .npz; --capture as run's, default attentions), plus prompt_length,\n"
    "generated_ids [steps] and, with attention captured, generation_attentions\n"
    "[steps, L, H, T]: at step s, every head's attention row of the position that chose\n"
    "the new token (position prompt_length - 1 + s; keys after it are 0).\n"
    "\n"
    "Encoder-decoder models (bart, mbart, marian, t5, mt5): the prompt is the source; the\n"
    "decoder's sequence starts with decoder_start_token_id, or with --target-ids (mBART:\n"
    "give the target language code), and grows from there; the text printed is the decoder's\n"
    "(prompt_length counts its start). --out writes the final run as `attnscope run --target-ids`\n"
    "does, and generation_cross_attentions [steps, L, H, Ts]: at step s, every decoder layer's\n"
    "and head's cross-attention row of the choosing position over the Ts source tokens.\n"
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    const char *model, *text, *ids, *out, *capture, *target_ids;
    int max_new, top_k, seed, stop_eos, threads, quiet;
    double temperature; /* < 0: not given */
} gen_args;

typedef struct {
    int prompt_len, steps, L, H, T;
    int32_t *gen;   /* (steps) */
    float *rows;    /* (steps, L, H, K) or NULL */
    const as_encoding *src; /* encoder-decoder models: the source (the prompt), else NULL */
    int K;          /* keys of a row: the source's tokens (encoder-decoder), or T */
} gen_result;

static uint64_t gen_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static const float *g_sort_logits;
/* descending logit, then ascending id */
static int gen_cmp(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    float x = g_sort_logits[i], y = g_sort_logits[j];
    return x > y ? -1 : x < y ? 1 : (i > j) - (i < j);
}

/* The next id from one row of V logits: argmax at temperature 0, else a draw from the
 * top-k (k <= 0: all) softmax at that temperature; order (V) is scratch. */
static int gen_pick(const float *logits, int V, const gen_args *a, uint64_t *rng, int *order) {
    if (a->temperature == 0.0) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        return best;
    }
    int k = a->top_k > 0 && a->top_k < V ? a->top_k : V;
    for (int v = 0; v < V; v++) order[v] = v;
    g_sort_logits = logits;
    qsort(order, (size_t)V, sizeof(int), gen_cmp);
    double z = 0.0, mx = logits[order[0]];
    for (int i = 0; i < k; i++) z += exp(((double)logits[order[i]] - mx) / a->temperature);
    double u = (double)(gen_splitmix(rng) >> 11) * 0x1.0p-53 * z, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += exp(((double)logits[order[i]] - mx) / a->temperature);
        if (u < acc) return order[i];
    }
    return order[k - 1];
}

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
        else if (!strcmp(o, "--max-new")) {
            if (cli_parse_int(v, 1, AS_MAX_POSITIONS, &a->max_new))
                return cli_usage_error("generate", "bad --max-new '%s' (1..%d)", v, AS_MAX_POSITIONS);
        } else if (!strcmp(o, "--top-k")) {
            if (cli_parse_int(v, 1, AS_MAX_VOCAB, &a->top_k)) return cli_usage_error("generate", "bad --top-k '%s'", v);
        } else if (!strcmp(o, "--seed")) {
            if (cli_parse_int(v, 0, 2147483647, &a->seed)) return cli_usage_error("generate", "bad --seed '%s'", v);
        } else if (!strcmp(o, "--threads")) {
            if (cli_parse_int(v, 1, 1024, &a->threads)) return cli_usage_error("generate", "bad --threads '%s'", v);
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
    if (a->capture && !a->out) return cli_usage_error("generate", "--capture needs --out FILE");
    return 0;
}

/* Runs the steps: ids (cap entries, *n used) grows by the picked tokens. */
static as_status gen_loop(const as_model *m, const gen_args *a, unsigned what, int32_t *ids, int *n, gen_result *g,
                          as_error *err) {
    const as_config *c = as_model_config(m);
    int V = c->vocab_size, cap = g->T;
    uint64_t rng = (uint64_t)a->seed;
    int *order = as_malloc_array((size_t)V, sizeof(int));
    if (!order) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    as_status s = AS_OK;
    while (!s && *n < cap) {
        as_encoding enc = {0};
        as_run *r = NULL;
        as_capture_spec spec = {.what = CAP_LOGITS | (what & CAP_ATTN), .layer = -1, .head = -1, .threads = a->threads};
        if (!(s = as_encoding_from_ids(m, ids, NULL, *n, &enc, err)) &&
            !(s = g->src ? as_forward_seq2seq(m, g->src, &enc, &spec, &r, err) : as_forward(m, &enc, &spec, &r, err))) {
            /* encoder-decoder: the logits are the decoder's, the rows the cross-attention's */
            const as_run *lr = g->src ? r->dec : r, *ar = g->src ? r->cross : r;
            int T = *n, K = g->src ? g->K : T, next = gen_pick(lr->logits + (size_t)(T - 1) * V, V, a, &rng, order);
            for (int l = 0; g->rows && l < g->L; l++)
                for (int h = 0; h < g->H; h++)
                    memcpy(g->rows + (((size_t)g->steps * g->L + l) * g->H + h) * (g->src ? g->K : g->T),
                           as_run_attn(ar, l, h) + (size_t)(T - 1) * K, (size_t)K * sizeof(float));
            g->gen[g->steps++] = ids[(*n)++] = next;
            if (a->stop_eos && next == c->eos_token_id) cap = *n;
        }
        as_run_free(r);
        as_encoding_free(&enc);
    }
    free(order);
    if (!s && g->rows && !g->src && *n < g->T) { /* stopped early: rows of the final length */
        for (size_t i = 0; i < (size_t)g->steps * g->L * g->H; i++)
            memmove(g->rows + i * (size_t)*n, g->rows + i * (size_t)g->T, (size_t)*n * sizeof(float));
    }
    if (!s) g->T = *n;
    return s;
}

/* Prints the prompt and the continuation as text: the tokens' bytes joined (special ids
 * left out), ill-formed UTF-8 as U+FFFD. Returns -1 when out of memory. */
static int gen_print(const as_model *m, const int32_t *ids, int n) {
    const as_config *c = as_model_config(m);
    size_t len = 0, cap = 256;
    char *buf = as_malloc(cap), *clean = NULL;
    for (int i = 0; buf && i < n; i++) {
        if (ids[i] == c->bos_token_id || ids[i] == c->eos_token_id || ids[i] == c->pad_token_id) continue;
        char *t = as_model_token_text(m, ids[i]);
        size_t k = t ? strlen(t) : 0;
        if (len + k + 1 > cap) {
            char *g = realloc(buf, cap = 2 * (len + k + 1));
            if (!g) free(buf);
            buf = g;
        }
        if (buf) memcpy(buf + len, t ? t : "", k), len += k;
        free(t);
    }
    if (buf) buf[len] = 0, clean = as_utf8_clean(buf);
    if (clean) printf("%s\n", clean);
    free(buf);
    free(clean);
    return clean ? 0 : -1;
}

typedef struct {
    const gen_result *g;
    const as_model *m;
    const as_encoding *dec; /* the final sequence (the decoder's for an encoder-decoder model) */
} gen_json_ctx;

static void gen_json_more(FILE *f, void *vctx) {
    const gen_json_ctx *ctx = vctx;
    const gen_result *g = ctx->g;
    if (g->src) cli_json_seq2seq(f, ctx->m, ctx->dec);
    fprintf(f, ",\n\"prompt_length\":%d,\n\"generated_ids\":", g->prompt_len);
    cli_json_ints(f, g->gen, g->steps);
    if (g->rows) {
        int64_t shape[4] = {g->steps, g->L, g->H, g->src ? g->K : g->T};
        fprintf(f, ",\n\"%s\":", g->src ? "generation_cross_attentions" : "generation_attentions");
        cli_json_tensor(f, g->rows, 4, shape);
    }
}

/* The final sequence's run with the generation arrays, as JSON or npz. */
static as_status gen_write(const as_model *m, const gen_args *a, unsigned what, const int32_t *ids, int n,
                           const gen_result *g, as_error *err) {
    as_encoding enc = {0};
    as_run *r = NULL;
    as_capture_spec spec = {.what = what, .layer = -1, .head = -1, .threads = a->threads};
    as_status s = as_encoding_from_ids(m, ids, NULL, n, &enc, err);
    if (!s) s = g->src ? as_forward_seq2seq(m, g->src, &enc, &spec, &r, err) : as_forward(m, &enc, &spec, &r, err);
    size_t len = strlen(a->out);
    if (!s && len >= 4 && !strcmp(a->out + len - 4, ".npz")) {
        int32_t pl = g->prompt_len;
        as_npz_extra ex[3] = {{"prompt_length", DTYPE_I32, &pl, 1, {1}},
                              {"generated_ids", DTYPE_I32, g->gen, 1, {g->steps}},
                              {g->src ? "generation_cross_attentions" : "generation_attentions", DTYPE_F32, g->rows,
                               4, {g->steps, g->L, g->H, g->src ? g->K : g->T}}};
        s = g->src ? as_run_write_npz_seq2seq_extra(m, g->src, &enc, r, ex, g->rows ? 3 : 2, a->out, err)
                   : as_run_write_npz_extra(m, &enc, r, ex, g->rows ? 3 : 2, a->out, err);
    } else if (!s) {
        FILE *f = fopen(a->out, "wb");
        gen_json_ctx ctx = {g, m, &enc};
        if (!f) s = as_err_set(err, AS_ERR_INPUT, "%s: cannot create the output file", a->out);
        else {
            int oom = cli_write_run_json(f, m, g->src ? g->src : &enc, r, gen_json_more, &ctx) != 0;
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
    gen_args a = {.max_new = 50, .temperature = -1.0};
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
    int32_t *ids = NULL;
    gen_result g = {0};
    if (as_model_load(a.model, &m, &err)) return cli_fail(&err);
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
    g.prompt_len = n;
    g.T = n + a.max_new < max ? n + a.max_new : max;
    if (n + a.max_new > max) as_warn("stopping at the model's %d positions (%d new tokens)", max, max - n);
    g.L = c->n_dec_layer ? c->n_dec_layer : c->n_layer;
    g.H = c->n_head;
    g.src = c->n_dec_layer ? &enc : NULL;
    g.K = c->n_dec_layer ? enc.n : 0;
    ids = as_malloc_array((size_t)g.T, sizeof(int32_t));
    g.gen = as_malloc_array((size_t)g.T, sizeof(int32_t));
    size_t rows = as_mul_size(as_mul_size((size_t)(g.T - n), (size_t)g.L * g.H), (size_t)(g.K ? g.K : g.T));
    if (a.out && (what & CAP_ATTN)) g.rows = rows ? as_calloc(rows, sizeof(float)) : NULL;
    if (!ids || !g.gen || (a.out && (what & CAP_ATTN) && !g.rows)) {
        as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
        rc = cli_fail(&err);
        goto cleanup;
    }
    memcpy(ids, seq->ids, (size_t)n * sizeof(int32_t));
    if (gen_loop(m, &a, a.out ? what : 0, ids, &n, &g, &err) || (a.out && gen_write(m, &a, what, ids, n, &g, &err))) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if (gen_print(m, ids, n)) {
        as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
        rc = cli_fail(&err);
    }
cleanup:
    free(ids);
    free(g.gen);
    free(g.rows);
    as_encoding_free(&dec);
    as_encoding_free(&enc);
    as_model_free(m);
    return rc;
}
