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
    const gen_beam_rows *b;
    const gen_beams_args *a;
    const as_model *m;
    const as_encoding *dec; /* the best sequence (an encoder-decoder model's decoder input) */
    int seq2seq;
} beams_json_ctx;

static void beams_json_more(FILE *f, void *vctx) {
    const beams_json_ctx *x = vctx;
    const gen_beam_rows *b = x->b;
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
    cli_json_tensor(f, b->best, 4, g);
    fputs(",\n\"beam_attentions\":", f);
    cli_json_tensor(f, b->rows, 5, all);
    if (!b->xrows) return;
    g[3] = all[4] = b->Ts;
    fputs(",\n\"generation_cross_attentions\":", f);
    cli_json_tensor(f, b->xbest, 4, g);
    fputs(",\n\"beam_cross_attentions\":", f);
    cli_json_tensor(f, b->xrows, 5, all);
}

/* The best hypothesis' run with the beam arrays, as JSON or npz (by the name's ending). */
static as_status beams_write(const as_model *m, const as_encoding *src, const gen_beams_args *a, const gen_beam_rows *b,
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
            {"generation_attentions", DTYPE_F32, b->best, 4, {S0, L, H, b->lens[0]}},
            {"beam_attentions", DTYPE_F32, b->rows, 5, {b->R, b->Smax, L, H, b->Tmax}},
            {"generation_cross_attentions", DTYPE_F32, b->xbest, 4, {S0, L, H, b->Ts}},
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
    gen_beam_rows b = {0};
    int rc = 0, rows = a->out && (a->what & CAP_ATTN);
    double t0 = as_now();
    as_status s = gen_beam_search(m, src, prompt, n, max_len, &a->o, &br, &err);
    if (!s && a->timing)
        fprintf(stderr, "generate: beam search (%d beams) after a %d-token prompt in %.1f ms\n", a->o.beams, n,
                (as_now() - t0) * 1e3);
    if (!s) s = gen_beam_rows_init(m, src, &br, n, a->o.threads, rows, &b, &err);
    if (!s && a->out) s = beams_write(m, src, a, &b, &err);
    if (s) rc = cli_fail(&err);
    for (int r = 0; !rc && r < b.R; r++)
        if (gen_print_text(m, b.seqs + (size_t)r * b.Tmax, b.lens[r])) {
            as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
            rc = cli_fail(&err);
        }
    gen_beam_rows_free(&b);
    gen_beam_result_free(&br);
    return rc;
}
