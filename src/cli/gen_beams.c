/* gen_beams.c — `attnscope generate --beams N`: runs the library's beam search
 * (attnscope/beam.h), prints each returned hypothesis as text (one line each, best first)
 * and, with --out, writes the best hypothesis' run (as `attnscope run` does, JSON or npz)
 * with the beam arrays: every returned sequence, its length, score and sum of
 * log-probabilities, and each generated token's attention rows taken from the forward over
 * that sequence (causal: the same rows the step that chose the token saw), decoder self-
 * attention and, for encoder-decoder models, cross-attention.
 * What it does not: parse options (cmd_generate.c), search (src/analysis/beam.c).
 */
#include "gen_beams.h"
#include "attnscope/generate.h"

#include <string.h>

typedef struct {
    int R, pl, L, H, Ts;   /* hypotheses, prompt length, (decoder) layers, heads, source tokens (0: causal LM) */
    int Tmax, Smax;        /* the longest returned sequence and its generated tokens */
    int32_t *seqs;         /* (R, Tmax) ids, -1 after a sequence's end */
    int32_t *lens;         /* (R) */
    float *scores, *sums;  /* (R) score, sum of log-probabilities */
    float *rows, *xrows;   /* (R, Smax, L, H, Tmax) self, (R, Smax, L, H, Ts) cross; zero padded; or NULL */
    float *grows, *gxrows; /* the best hypothesis': (S0, L, H, T0), (S0, L, H, Ts), or NULL */
} beams_out;

static void beams_out_free(beams_out *b) {
    free(b->seqs);
    free(b->lens);
    free(b->scores);
    free(b->sums);
    free(b->rows);
    free(b->xrows);
    free(b->grows);
    free(b->gxrows);
}

/* The arrays of the returned hypotheses, the row buffers zeroed when rows is set. */
static as_status beams_alloc(const as_model *m, const gen_beam_result *br, int pl, int Ts, int rows, beams_out *b,
                             as_error *err) {
    const as_config *c = as_model_config(m);
    b->R = br->n, b->pl = pl, b->Ts = Ts;
    b->L = c->n_dec_layer ? c->n_dec_layer : c->n_layer, b->H = c->n_head;
    for (int r = 0; r < br->n; r++)
        if (br->len[r] > b->Tmax) b->Tmax = br->len[r];
    b->Smax = b->Tmax - pl;
    size_t R = (size_t)b->R, per = as_mul_size((size_t)b->Smax * b->L, (size_t)b->H);
    size_t S0 = (size_t)(br->len[0] - pl), T0 = (size_t)br->len[0];
    b->seqs = as_malloc_array(as_mul_size(R, (size_t)b->Tmax), sizeof(int32_t));
    b->lens = as_malloc_array(R, sizeof(int32_t));
    b->scores = as_malloc_array(R, sizeof(float));
    b->sums = as_malloc_array(R, sizeof(float));
    if (!b->seqs || !b->lens || !b->scores || !b->sums) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (rows) { /* as_mul_size gives 0 on overflow: refused like a failed allocation */
        size_t n_all = as_mul_size(as_mul_size(R, per), (size_t)b->Tmax);
        size_t n_best = as_mul_size(as_mul_size(S0, (size_t)b->L * b->H), T0);
        b->rows = n_all ? as_calloc(n_all, sizeof(float)) : NULL;
        b->grows = n_best ? as_calloc(n_best, sizeof(float)) : NULL;
        if (!b->rows || !b->grows) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        if (Ts) {
            n_all = as_mul_size(as_mul_size(R, per), (size_t)Ts);
            n_best = as_mul_size(as_mul_size(S0, (size_t)b->L * b->H), (size_t)Ts);
            b->xrows = n_all ? as_calloc(n_all, sizeof(float)) : NULL;
            b->gxrows = n_best ? as_calloc(n_best, sizeof(float)) : NULL;
            if (!b->xrows || !b->gxrows) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        }
    }
    for (int r = 0; r < b->R; r++) {
        int32_t *dst = b->seqs + (size_t)r * b->Tmax;
        for (int t = 0; t < b->Tmax; t++) dst[t] = t < br->len[r] ? br->ids[(size_t)r * br->cap + t] : -1;
        b->lens[r] = br->len[r];
        b->scores[r] = (float)br->score[r];
        b->sums[r] = br->sum_logprobs[r];
    }
    return AS_OK;
}

/* Hypothesis r's rows (gen_sequence_rows: the forward over its sequence, at the positions
 * pl - 1 .. T - 2 that chose each generated token); the best hypothesis' also into grows /
 * gxrows at its own length. */
static as_status beams_rows(const as_model *m, const as_encoding *src, int threads, int r, beams_out *b,
                            as_error *err) {
    int T = b->lens[r], S = T - b->pl, Ts = b->Ts;
    size_t per = (size_t)b->Smax * b->L * b->H, n = (size_t)S * b->L * b->H;
    float *rows = b->rows + (size_t)r * per * b->Tmax, *xrows = src ? b->xrows + (size_t)r * per * Ts : NULL;
    as_status s = gen_sequence_rows(m, src, b->seqs + (size_t)r * b->Tmax, T, b->pl, threads, rows,
                                    (size_t)b->Tmax, xrows, err);
    if (s || r) return s;
    for (size_t i = 0; i < n; i++) memcpy(b->grows + i * T, rows + i * b->Tmax, (size_t)T * sizeof(float));
    if (src) memcpy(b->gxrows, xrows, n * Ts * sizeof(float));
    return AS_OK;
}

/* Prints ids as text: the tokens' bytes joined, the special ids (BOS, padding, every
 * end-of-sequence id) left out, ill-formed UTF-8 as U+FFFD. Returns -1 when out of memory. */
int gen_print_text(const as_model *m, const int32_t *ids, int n) {
    const as_config *c = as_model_config(m);
    size_t len = 0, cap = 256;
    char *buf = as_malloc(cap), *clean = NULL;
    for (int i = 0; buf && i < n; i++) {
        int id = ids[i];
        if (id == c->bos_token_id || id == c->pad_token_id || id == c->eos_token_id || gen_is_eos(c, id)) continue;
        char *t = as_model_token_text(m, id);
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
    const beams_out *b;
    const gen_beams_args *a;
    const as_model *m;
    const as_encoding *dec; /* the best sequence (an encoder-decoder model's decoder input) */
    int seq2seq;
} beams_json_ctx;

static void beams_json_more(FILE *f, void *vctx) {
    const beams_json_ctx *x = vctx;
    const beams_out *b = x->b;
    int S0 = b->lens[0] - b->pl, T0 = b->lens[0];
    if (x->seq2seq) cli_json_seq2seq(f, x->m, x->dec);
    fprintf(f, ",\n\"prompt_length\":%d,\n\"generated_ids\":", b->pl);
    cli_json_ints(f, b->seqs + b->pl, S0);
    fprintf(f, ",\n\"beams\":%d,\n\"length_penalty\":%.17g,\n\"early_stopping\":%s,\n\"num_return\":%d", x->a->o.beams,
            x->a->o.length_penalty, x->a->o.early_stopping ? "true" : "false", x->a->o.num_return);
    fputs(",\n\"beam_sequences\":[", f);
    for (int r = 0; r < b->R; r++) {
        fputs(r ? "," : "", f);
        cli_json_ints(f, b->seqs + (size_t)r * b->Tmax, b->Tmax);
    }
    fputs("],\n\"beam_lengths\":", f);
    cli_json_ints(f, b->lens, b->R);
    int64_t n1[1] = {b->R};
    fputs(",\n\"beam_scores\":", f);
    cli_json_tensor(f, b->scores, 1, n1);
    fputs(",\n\"beam_sum_logprobs\":", f);
    cli_json_tensor(f, b->sums, 1, n1);
    if (!b->rows) return;
    int64_t g[4] = {S0, b->L, b->H, T0}, all[5] = {b->R, b->Smax, b->L, b->H, b->Tmax};
    fputs(",\n\"generation_attentions\":", f);
    cli_json_tensor(f, b->grows, 4, g);
    fputs(",\n\"beam_attentions\":", f);
    cli_json_tensor(f, b->rows, 5, all);
    if (!b->xrows) return;
    g[3] = all[4] = b->Ts;
    fputs(",\n\"generation_cross_attentions\":", f);
    cli_json_tensor(f, b->gxrows, 4, g);
    fputs(",\n\"beam_cross_attentions\":", f);
    cli_json_tensor(f, b->xrows, 5, all);
}

/* The best hypothesis' run with the beam arrays, as JSON or npz (by the name's ending). */
static as_status beams_write(const as_model *m, const as_encoding *src, const gen_beams_args *a, const beams_out *b,
                             as_error *err) {
    as_encoding enc = {0};
    as_run *r = NULL;
    as_capture_spec spec = {.what = a->what, .layer = -1, .head = -1, .threads = a->o.threads};
    as_status s = as_encoding_from_ids(m, b->seqs, NULL, b->lens[0], &enc, err);
    if (!s) s = src ? as_forward_seq2seq(m, src, &enc, &spec, &r, err) : as_forward(m, &enc, &spec, &r, err);
    size_t len = strlen(a->out);
    if (!s && len >= 4 && !strcmp(a->out + len - 4, ".npz")) {
        int32_t pl = b->pl, nb = a->o.beams, early = a->o.early_stopping, S0 = b->lens[0] - b->pl;
        float lp = (float)a->o.length_penalty;
        int64_t L = b->L, H = b->H;
        as_npz_extra ex[13] = {
            {"prompt_length", DTYPE_I32, &pl, 1, {1}},
            {"generated_ids", DTYPE_I32, b->seqs + b->pl, 1, {S0}},
            {"beams", DTYPE_I32, &nb, 1, {1}},
            {"length_penalty", DTYPE_F32, &lp, 1, {1}},
            {"early_stopping", DTYPE_I32, &early, 1, {1}},
            {"beam_sequences", DTYPE_I32, b->seqs, 2, {b->R, b->Tmax}},
            {"beam_lengths", DTYPE_I32, b->lens, 1, {b->R}},
            {"beam_scores", DTYPE_F32, b->scores, 1, {b->R}},
            {"beam_sum_logprobs", DTYPE_F32, b->sums, 1, {b->R}},
            {"generation_attentions", DTYPE_F32, b->grows, 4, {S0, L, H, b->lens[0]}},
            {"beam_attentions", DTYPE_F32, b->rows, 5, {b->R, b->Smax, L, H, b->Tmax}},
            {"generation_cross_attentions", DTYPE_F32, b->gxrows, 4, {S0, L, H, b->Ts}},
            {"beam_cross_attentions", DTYPE_F32, b->xrows, 5, {b->R, b->Smax, L, H, b->Ts}},
        };
        int n = b->xrows ? 13 : b->rows ? 11 : 9;
        s = src ? as_run_write_npz_seq2seq_extra(m, src, &enc, r, ex, n, a->out, err)
                : as_run_write_npz_extra(m, &enc, r, ex, n, a->out, err);
    } else if (!s) {
        FILE *f = fopen(a->out, "wb");
        beams_json_ctx ctx = {b, a, m, &enc, src != NULL};
        if (!f) s = as_err_set(err, AS_ERR_INPUT, "%s: cannot create the output file", a->out);
        else {
            int oom = cli_write_run_json(f, m, src ? src : &enc, r, beams_json_more, &ctx) != 0;
            int bad = ferror(f) | (fclose(f) != 0);
            if (oom) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            else if (bad) s = as_err_set(err, AS_ERR_INTERNAL, "%s: write failed", a->out);
        }
    }
    as_run_free(r);
    as_encoding_free(&enc);
    return s;
}

int gen_beams_run(const as_model *m, const as_encoding *src, const int32_t *prompt, int n, int max_len,
                  const gen_beams_args *a) {
    as_error err = {0};
    gen_beam_result br = {0};
    beams_out b = {0};
    int rc = 0, rows = a->out && (a->what & CAP_ATTN);
    double t0 = as_now();
    as_status s = gen_beam_search(m, src, prompt, n, max_len, &a->o, &br, &err);
    if (!s && a->timing)
        fprintf(stderr, "generate: beam search (%d beams) after a %d-token prompt in %.1f ms\n", a->o.beams, n,
                (as_now() - t0) * 1e3);
    if (!s) s = beams_alloc(m, &br, n, src ? src->n : 0, rows, &b, &err);
    for (int r = 0; !s && rows && r < b.R; r++) s = beams_rows(m, src, a->o.threads, r, &b, &err);
    if (!s && a->out) s = beams_write(m, src, a, &b, &err);
    if (s) rc = cli_fail(&err);
    for (int r = 0; !rc && r < b.R; r++)
        if (gen_print_text(m, b.seqs + (size_t)r * b.Tmax, b.lens[r])) {
            as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
            rc = cli_fail(&err);
        }
    beams_out_free(&b);
    gen_beam_result_free(&br);
    return rc;
}
