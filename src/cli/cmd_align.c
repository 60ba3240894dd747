/* cmd_align.c — `attnscope align`: word alignment of a parallel corpus from an
 * encoder-decoder model's cross-attention (attnscope/align.h). Each sentence pair runs
 * once (source text as the encoder's input, target text shifted as for teacher forcing);
 * every decoder layer's heads and head mean align each target word to the source word it
 * attends to most; with gold alignments the alignment error rate of every head, the head
 * mean per layer and the best head are printed (text) or written as JSON with each
 * sentence's alignment.
 * What it does not: symmetrise, threshold or train an aligner; store anything (that is
 * `attnscope analyze --source/--target`).
 */
#include "cli.h"
#include "attnscope/align.h"

#include <math.h>
#include <string.h>

static const char *ALIGN_HELP =
    "usage: attnscope align --model DIR --source FILE --target FILE [--gold FILE]\n"
    "                       [--format text|json] [--out FILE] [--rows predict|input]\n"
    "                       [--layer L] [--head H|mean] [--limit N] [--precision f32|bf16]\n"
    "                       [--threads N] [--quiet]\n"
    "\n"
    "Aligns the words of each sentence pair (line i of --source and of --target, words\n"
    "separated by spaces) with the cross-attention of the encoder-decoder model DIR\n"
    "(bart, mbart, marian, t5, mt5 with a tokenizer): the source is the encoder's input,\n"
    "the target is tokenized (Marian: with target.spm) and shifted right as for teacher\n"
    "forcing. A target word's rows\n"
    "are averaged over its pieces, a source word's columns summed over its pieces, special\n"
    "tokens left out, and each target word is aligned to the source word of largest\n"
    "weight, for every layer and head and for each layer's mean of heads.\n"
    "  --gold FILE    gold alignments, one Pharaoh line per pair: I-J sure, I?J or IpJ\n"
    "                 possible (I source word, J target word, 0-based); gives the alignment\n"
    "                 error rate AER = 1 - (|A&S| + |A&P|) / (|A| + |S|) (Och & Ney 2003)\n"
    "                 of every head and head mean, and the best head\n"
    "  --rows predict the row of a target token is the decoder position that predicts it\n"
    "                 (default); input: the position that reads it (Shift-Att)\n"
    "  --layer, --head  the alignment printed for each sentence (default: the best head\n"
    "                 with --gold, else the head mean of the penultimate layer)\n"
    "  --format text  (default) the AER table and best head with --gold, else one Pharaoh\n"
    "                 line per sentence; json: all of it, each sentence's alignment\n"
    "  --limit N      the first N pairs\n"
    "  --precision bf16  multiply the linear maps in BF16 (as `attnscope run`'s)\n"
    "See docs/analysis.md, \"Word alignment\". Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    const char *model, *source, *target, *gold, *format, *out, *rows, *head_s;
    int layer, head, limit, threads, quiet;
    as_precision precision;
} align_args;

/* One sentence pair's result: best (L, H + 1, Wt) of al_align_run. */
typedef struct {
    int Ws, Wt;
    int32_t *best;
    al_links gold;
} align_sent;

typedef struct {
    int L, H, n, shift;
    align_sent *s;
    al_counts *cnt; /* (L, H + 1) summed over sentences */
    int64_t sure, possible;
} align_result;

static int parse_args(int argc, char **argv, align_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *v = NULL;
#define VAL()                                                      \
    do {                                                           \
        if (!(v = cli_value(argc, argv, &i, "align"))) return 2;   \
    } while (0)
        if (cli_is_help(o)) {
            fputs(ALIGN_HELP, stdout);
            return 1;
        } else if (!strcmp(o, "--model")) { VAL(); a->model = v; }
        else if (!strcmp(o, "--source")) { VAL(); a->source = v; }
        else if (!strcmp(o, "--target")) { VAL(); a->target = v; }
        else if (!strcmp(o, "--gold")) { VAL(); a->gold = v; }
        else if (!strcmp(o, "--format")) { VAL(); a->format = v; }
        else if (!strcmp(o, "--out")) { VAL(); a->out = v; }
        else if (!strcmp(o, "--rows")) { VAL(); a->rows = v; }
        else if (!strcmp(o, "--head")) { VAL(); a->head_s = v; }
        else if (!strcmp(o, "--precision")) {
            VAL();
            if (cli_parse_precision("align", v, &a->precision)) return 2;
        }
        else if (!strcmp(o, "--layer")) {
            VAL();
            if (cli_parse_int(v, 0, AS_MAX_LAYERS - 1, &a->layer)) return cli_usage_error("align", "bad --layer '%s'", v);
        } else if (!strcmp(o, "--limit")) {
            VAL();
            if (cli_parse_int(v, 1, AL_MAX_LINES, &a->limit)) return cli_usage_error("align", "bad --limit '%s'", v);
        } else if (!strcmp(o, "--threads")) {
            VAL();
            if (cli_parse_int(v, 1, 1024, &a->threads)) return cli_usage_error("align", "bad --threads '%s'", v);
        } else if (!strcmp(o, "--quiet")) a->quiet = 1;
        else return cli_usage_error("align", "unknown option '%s'", o);
#undef VAL
    }
    if (!a->model || !a->source || !a->target)
        return cli_usage_error("align", "--model DIR, --source FILE and --target FILE are required");
    if (a->format && strcmp(a->format, "text") && strcmp(a->format, "json"))
        return cli_usage_error("align", "--format must be text or json, not '%s'", a->format);
    if (a->rows && strcmp(a->rows, "predict") && strcmp(a->rows, "input"))
        return cli_usage_error("align", "--rows must be predict or input, not '%s'", a->rows);
    if (a->head_s && strcmp(a->head_s, "mean") && cli_parse_int(a->head_s, 0, AS_MAX_HEADS - 1, &a->head))
        return cli_usage_error("align", "bad --head '%s' (a head index or mean)", a->head_s);
    if (a->head_s && !strcmp(a->head_s, "mean")) a->head = -2;
    if ((a->layer >= 0) != (a->head_s != NULL)) return cli_usage_error("align", "give --layer and --head together");
    return 0;
}

/* Runs pair k (source line src, target line tgt, gold line gold or NULL; line numbers
 * k + 1) and fills s. Returns an exit status after printing a one-line error. */
static int align_pair(const align_args *a, const as_model *m, int k, const char *src, const char *tgt,
                      const char *gold, align_result *res, align_sent *s) {
    as_error err = {0};
    as_encoding se = {0}, te = {0}, de = {0};
    as_run *r = NULL;
    int *sw = NULL, *lw = NULL, *rw = NULL, rc = 0;
    as_encode_opts eo = {.max_len = 0, .truncate = 1};
    const char *where = a->source;
    if (as_encode(m, src, NULL, &eo, &se, &err)) goto fail;
    where = a->target;
    if (as_encode_target(m, tgt, &eo, &te, &err) || as_seq2seq_shift_target(m, &te, &de, &err)) goto fail;
    if (!a->quiet && (se.n_warnings || te.n_warnings))
        fprintf(stderr, "attnscope align: warning: pair %d: %s\n", k + 1, se.n_warnings ? se.warning : te.warning);
    sw = as_malloc_array((size_t)se.n, sizeof *sw);
    lw = as_malloc_array((size_t)te.n, sizeof *lw);
    rw = as_malloc_array((size_t)te.n, sizeof *rw);
    if (!sw || !lw || !rw) {
        as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
        goto fail;
    }
    where = a->source;
    if (al_token_words(&se, src, sw, &s->Ws, &err)) goto fail;
    where = a->target;
    if (al_token_words(&te, tgt, lw, &s->Wt, &err)) goto fail;
    al_target_rows(lw, te.n, res->shift, rw);
    as_capture_spec spec = {.what = CAP_ATTN, .layer = -1, .head = -1, .threads = a->threads};
    where = a->source;
    if (as_forward_seq2seq(m, &se, &de, &spec, &r, &err)) goto fail;
    s->best = as_malloc_array((size_t)res->L * (res->H + 1), (size_t)(s->Wt > 0 ? s->Wt : 1) * sizeof *s->best);
    if (!s->best) {
        as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
        goto fail;
    }
    if (al_align_run(r->cross, rw, s->Wt, sw, s->Ws, s->best, &err)) goto fail;
    if (gold) {
        if (al_parse_line(a->gold, k + 1, gold, s->Ws, s->Wt, &s->gold, &err)) {
            rc = cli_fail(&err);
            goto cleanup;
        }
        for (int i = 0; i < s->gold.n; i++) s->gold.links[i].sure ? res->sure++ : res->possible++;
        for (int x = 0; x < res->L * (res->H + 1); x++) al_count(s->best + (size_t)x * s->Wt, s->Wt, &s->gold, &res->cnt[x]);
    }
    goto cleanup;
fail:
    as_err_prefix(&err, "%s:%d", where, k + 1);
    rc = cli_fail(&err);
cleanup:
    as_run_free(r);
    as_encoding_free(&se);
    as_encoding_free(&te);
    as_encoding_free(&de);
    free(sw);
    free(lw);
    free(rw);
    return rc;
}

static double aer_at(const align_result *r, int l, int h) { return al_aer(&r->cnt[(size_t)l * (r->H + 1) + h]); }

/* The best single head by AER (lowest; the first in layer, head order on ties). */
static void best_head(const align_result *r, int *bl, int *bh) {
    *bl = 0, *bh = 0;
    for (int l = 0; l < r->L; l++)
        for (int h = 0; h < r->H; h++)
            if (aer_at(r, l, h) < aer_at(r, *bl, *bh)) *bl = l, *bh = h;
}

static void json_num(FILE *f, double v) {
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

static void write_json(FILE *f, const align_args *a, const as_model *m, const align_result *r, int sl, int sh) {
    const as_config *c = as_model_config(m);
    fprintf(f, "{\"model\":");
    cli_json_str(f, as_model_dir(m));
    fprintf(f, ",\"model_type\":");
    cli_json_str(f, c->model_type);
    fprintf(f, ",\"layers\":%d,\"heads\":%d,\"pairs\":%d,\"rows\":\"%s\"", r->L, r->H, r->n,
            r->shift ? "input" : "predict");
    if (a->gold) {
        int bl, bh;
        best_head(r, &bl, &bh);
        fprintf(f, ",\"gold\":{\"path\":");
        cli_json_str(f, a->gold);
        fprintf(f, ",\"sure\":%lld,\"possible\":%lld},\"aer\":[", (long long)r->sure, (long long)r->possible);
        for (int l = 0; l < r->L; l++) {
            fprintf(f, "%s[", l ? "," : "");
            for (int h = 0; h < r->H; h++) {
                if (h) fputc(',', f);
                json_num(f, aer_at(r, l, h));
            }
            fputc(']', f);
        }
        fprintf(f, "],\"aer_mean\":[");
        for (int l = 0; l < r->L; l++) {
            if (l) fputc(',', f);
            json_num(f, aer_at(r, l, r->H));
        }
        fprintf(f, "],\"best\":{\"layer\":%d,\"head\":%d,\"aer\":", bl, bh);
        json_num(f, aer_at(r, bl, bh));
        fputc('}', f);
    }
    fprintf(f, ",\"selected\":{\"layer\":%d,\"head\":", sl);
    if (sh == r->H) fprintf(f, "\"mean\"}");
    else fprintf(f, "%d}", sh);
    fprintf(f, ",\"sentences\":[");
    char *buf = malloc(16 * AL_MAX_WORDS);
    for (int k = 0; k < r->n; k++) {
        const align_sent *s = &r->s[k];
        const int32_t *b = s->best + ((size_t)sl * (r->H + 1) + sh) * s->Wt;
        fprintf(f, "%s\n{\"pair\":%d,\"source_words\":%d,\"target_words\":%d,\"alignment\":", k ? "," : "", k + 1, s->Ws,
                s->Wt);
        cli_json_str(f, buf ? al_format(b, s->Wt, buf, 16 * AL_MAX_WORDS) : "");
        if (a->gold) {
            al_counts one = {0};
            al_count(b, s->Wt, &s->gold, &one);
            fprintf(f, ",\"aer\":");
            json_num(f, al_aer(&one));
        }
        fputc('}', f);
    }
    fprintf(f, "]}\n");
    free(buf);
}

static void write_text(FILE *f, const align_args *a, const as_model *m, const align_result *r, int sl, int sh) {
    const as_config *c = as_model_config(m);
    fprintf(f, "model: %s (%s, %d decoder layers x %d heads); %d sentence pairs; rows: %s\n", as_model_dir(m),
            c->model_type, r->L, r->H, r->n, r->shift ? "input" : "predict");
    if (!a->gold) {
        if (sh == r->H) fprintf(f, "alignments of layer %d, head mean (Pharaoh: source-target word indices):\n", sl);
        else fprintf(f, "alignments of layer %d, head %d (Pharaoh: source-target word indices):\n", sl, sh);
        char *buf = malloc(16 * AL_MAX_WORDS);
        for (int k = 0; buf && k < r->n; k++) {
            const align_sent *s = &r->s[k];
            fprintf(f, "%d\t%s\n", k + 1, al_format(s->best + ((size_t)sl * (r->H + 1) + sh) * s->Wt, s->Wt, buf,
                                                    16 * AL_MAX_WORDS));
        }
        free(buf);
        return;
    }
    fprintf(f, "alignment error rate per layer and head (gold %s: %lld sure, %lld possible links; lower is better):\n",
            a->gold, (long long)r->sure, (long long)r->possible);
    fprintf(f, "layer");
    for (int h = 0; h < r->H; h++) fprintf(f, "   h%-3d", h);
    fprintf(f, "   mean\n");
    for (int l = 0; l < r->L; l++) {
        fprintf(f, "%5d", l);
        for (int h = 0; h <= r->H; h++) fprintf(f, "  %.3f", aer_at(r, l, h));
        fprintf(f, "\n");
    }
    int bl, bh;
    best_head(r, &bl, &bh);
    fprintf(f, "best head: layer %d head %d, AER %.3f (head mean of layer %d: %.3f)\n", bl, bh, aer_at(r, bl, bh), bl,
            aer_at(r, bl, r->H));
}

/* Reads the files and checks they pair up; lines owned by the caller. */
static int read_inputs(const align_args *a, char ***src, int *ns, char ***tgt, int *nt, char ***gold, int *ng) {
    as_error err = {0};
    if (al_read_lines(a->source, src, ns, &err) || al_read_lines(a->target, tgt, nt, &err) ||
        (a->gold && al_read_lines(a->gold, gold, ng, &err)))
        return cli_fail(&err);
    if (*ns != *nt) return cli_usage_error("align", "%s has %d lines but %s has %d", a->source, *ns, a->target, *nt);
    if (a->gold && *ng != *ns)
        return cli_usage_error("align", "%s has %d lines but %s has %d", a->gold, *ng, a->source, *ns);
    if (*ns == 0) return cli_usage_error("align", "%s has no lines", a->source);
    return 0;
}

int cmd_align(int argc, char **argv) {
    align_args a = {.layer = -1, .head = -1};
    int rc = parse_args(argc, argv, &a);
    if (rc == 1) return 0; /* --help */
    if (rc) return rc;
    as_set_quiet(a.quiet);
    as_model *m = NULL;
    char **src = NULL, **tgt = NULL, **gold = NULL;
    int ns = 0, nt = 0, ng = 0;
    align_result res = {.shift = a.rows && !strcmp(a.rows, "input")};
    FILE *out = stdout;
    if ((rc = read_inputs(&a, &src, &ns, &tgt, &nt, &gold, &ng))) goto cleanup;
    if ((rc = cli_load_model(a.model, a.precision, &m))) goto cleanup;
    const as_config *c = as_model_config(m);
    if (c->n_dec_layer == 0) {
        rc = cli_usage_error("align", "%s is not an encoder-decoder model (%s): align reads cross-attention",
                             as_model_dir(m), c->model_type);
        goto cleanup;
    }
    if (!as_model_has_tokenizer(m)) {
        rc = cli_usage_error("align", "%s has no tokenizer that loads: align needs one to find the words",
                             as_model_dir(m));
        goto cleanup;
    }
    res.L = c->n_dec_layer, res.H = c->n_head;
    if (a.layer >= res.L || a.head >= res.H) {
        rc = cli_usage_error("align", "--layer %d / --head %s is outside the decoder's %d layers x %d heads", a.layer,
                             a.head_s, res.L, res.H);
        goto cleanup;
    }
    res.n = a.limit && a.limit < ns ? a.limit : ns;
    res.s = as_calloc((size_t)res.n, sizeof *res.s);
    res.cnt = as_calloc((size_t)res.L * (res.H + 1), sizeof *res.cnt);
    if (!res.s || !res.cnt) {
        rc = cli_fail(&(as_error){.code = AS_ERR_INTERNAL, .msg = "out of memory"});
        goto cleanup;
    }
    for (int k = 0; k < res.n; k++)
        if ((rc = align_pair(&a, m, k, src[k], tgt[k], gold ? gold[k] : NULL, &res, &res.s[k]))) goto cleanup;
    int sl = res.L >= 2 ? res.L - 2 : 0, sh = res.H;
    if (a.layer >= 0) sl = a.layer, sh = a.head == -2 ? res.H : a.head;
    else if (a.gold) best_head(&res, &sl, &sh);
    if (a.out && !(out = fopen(a.out, "w"))) {
        rc = cli_usage_error("align", "%s: cannot create", a.out);
        out = stdout;
        goto cleanup;
    }
    if (a.format && !strcmp(a.format, "json")) write_json(out, &a, m, &res, sl, sh);
    else write_text(out, &a, m, &res, sl, sh);
    if (ferror(out)) rc = cli_fail(&(as_error){.code = AS_ERR_INTERNAL, .msg = "write failed"});
cleanup:
    if (out != stdout) fclose(out);
    for (int k = 0; res.s && k < res.n; k++) {
        free(res.s[k].best);
        al_links_free(&res.s[k].gold);
    }
    free(res.s);
    free(res.cnt);
    al_lines_free(src, ns);
    al_lines_free(tgt, nt);
    al_lines_free(gold, ng);
    as_model_free(m);
    return rc;
}
