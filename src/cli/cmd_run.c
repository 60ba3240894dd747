/* cmd_run.c — `attnscope run`: tokenizes a text (or pair) or takes raw ids, runs the
 * model with the requested capture and either prints a readable summary (tokens and
 * each layer's strongest attention links) or writes the tokens, offsets and
 * captured tensors as JSON or npz (array names as Hugging Face outputs). Encoder-decoder
 * models also take the decoder's input (--target text, shifted as for teacher forcing, or
 * --target-ids as given) and write their encoder, decoder and cross attentions.
 */
#include "cli.h"

#include <float.h>
#include <math.h>
#include <string.h>

static const char *RUN_HELP =
    "usage: attnscope run --model DIR (--text TEXT [--text-b TEXT] | --ids 101,7592,...)\n"
    "                     [--target TEXT | --target-ids 2,0,...]\n"
    "                     [--type-ids 0,0,...] [--layer L] [--head H]\n"
    "                     [--capture all|attn,scores,qkv,hidden,logits,stats,thumbs]\n"
    "                     [--format json|npz] [--out FILE] [--threads N]\n"
    "                     [--max-tokens N] [--no-truncate] [--top K] [--quiet]\n"
    "                     [--precision f32|bf16]\n"
    "\n"
    "Runs the model folder DIR (config.json + model.safetensors + tokenizer files) on\n"
    "the text or sentence pair and captures attention internals.\n"
    "\n"
    "Without --out and --format, prints the tokens and each layer's strongest links.\n"
    "--format json writes JSON (to --out FILE or stdout); --format npz (or an --out\n"
    "ending in .npz) writes a numpy archive with arrays named like Hugging Face's\n"
    "outputs: input_ids [T], token_type_ids [T], attention_mask [T], tokens [T] and\n"
    "token_text [T] (vocabulary pieces and readable text, unicode), offsets [T,2]\n"
    "(byte spans, -1 for special tokens), attentions [L,H,T,T], attention_scores\n"
    "[L,H,T,T] (q.k/sqrt(Dh) before softmax, or the factor the config asks for;\n"
    "masked entries hold -3.4028235e38), queries, keys, values [L,H,T,Dh],\n"
    "hidden_states [L+1,T,D] (embedding output first), logits ([1,C] classifier or\n"
    "[T,V] language-model head, when present), layers [L] and heads [H] (the\n"
    "absolute indices captured), score_scale [L] (the factor on q.k per layer),\n"
    "kv_group [H] (the key/value head each query head reads), head_stats [L,H,8]\n"
    "(--capture stats: per head, the mean over real query rows of entropy, mass on the\n"
    "first token, on itself, on the previous and next token, mean and spread of the\n"
    "attention distance, and the largest weight; computed in the forward without\n"
    "keeping T x T: with --capture stats,qkv a long input keeps O(T) per head), and for rotary models\n"
    "queries_pre_rope, keys_pre_rope [L,H,T,Dh] (q and k before the rotation).\n"
    "--capture thumbs adds thumbnails_max, thumbnails_mean [L,H,S,S], S = min(T, 64): each\n"
    "head's attention pooled onto S x S blocks (largest and mean weight), also computed in\n"
    "the forward without keeping T x T (not for encoder-decoder models).\n"
    "\n"
    "Encoder-decoder models (bart, mbart, marian) need the decoder's input: --target TEXT\n"
    "(tokenized with the model's specials, then shifted right as for teacher forcing:\n"
    "decoder_start_token_id first (mbart: the target's last non-pad token), the last\n"
    "token dropped; a Marian folder without tokenizer.json tokenizes it with target.spm)\n"
    "or --target-ids (the decoder input ids, used as given). Their files\n"
    "hold encoder_attentions [Le,H,Ts,Ts], decoder_attentions [Ld,H,Tt,Tt],\n"
    "cross_attentions [Ld,H,Tt,Ts] (each with _attention_scores, _queries, _keys,\n"
    "_values; cross_keys / cross_values have Ts rows), encoder_hidden_states,\n"
    "decoder_hidden_states, logits [Tt,V], and decoder_input_ids, decoder_tokens,\n"
    "decoder_attention_mask (JSON also decoder_layers); --target on any other model is\n"
    "an error.\n"
    "\n"
    "--precision bf16 multiplies the linear maps in BF16 (activations and weights\n"
    "rounded to BF16, sums in F32; AVX-512 BF16 where the CPU has it, about twice the\n"
    "F32 speed); attention, norms and softmax stay F32. Default f32.\n"
    "\n"
    "--layer / --head capture one layer / head (the forward stops after the deepest\n"
    "layer needed unless logits are requested). --capture selects what is kept\n"
    "(default all). Text longer than the model's positions is truncated with a\n"
    "warning; --no-truncate makes it an error. Exit status 0 ok, 2 bad input, 1 internal.\n";

typedef struct {
    const char *model, *text, *text_b, *ids, *type_ids, *format, *out, *capture, *precision, *target, *target_ids;
    int layer, head, threads, max_tokens, truncate, top, quiet;
} run_args;

/* ---- readable summary ---- */

static void print_token(const as_model *m, const as_encoding *enc, int i) {
    char *t = as_model_token_text(m, enc->ids[i]);
    printf("%s", t ? t : "?");
    free(t);
}

/* Each captured layer's top strongest links of r's attention (queries: tokens of qe, keys:
 * tokens of ke), pads skipped; kind names the attention ("", "cross-"). */
static void print_links(const as_model *m, const as_encoding *qe, const as_encoding *ke, const as_run *r,
                        const char *kind, int top) {
    printf("strongest %sattention links per layer (query -> key  weight  [head]):\n", kind);
    int T = r->T, Tk = r->Tk > 0 ? r->Tk : r->T;
    for (int li = 0; li < r->n_lay; li++) {
        printf("  layer %d:", r->layer_lo + li);
        /* top-k over heads and (query, key) by weight; pads skipped */
        int k = top;
        float best_w[16];
        int best_h[16], best_i[16], best_j[16], nb = 0;
        for (int hi = 0; hi < r->n_hd; hi++) {
            const float *a = r->attn + ((size_t)li * r->n_hd + hi) * (size_t)T * Tk;
            for (int i = 0; i < T; i++) {
                if (!qe->mask[i]) continue;
                for (int j = 0; j < Tk; j++) {
                    float w = a[(size_t)i * Tk + j];
                    if (nb < k || w > best_w[nb - 1]) {
                        int p = nb < k ? nb++ : nb - 1;
                        while (p > 0 && best_w[p - 1] < w) {
                            best_w[p] = best_w[p - 1];
                            best_h[p] = best_h[p - 1];
                            best_i[p] = best_i[p - 1];
                            best_j[p] = best_j[p - 1];
                            p--;
                        }
                        best_w[p] = w;
                        best_h[p] = r->head_lo + hi;
                        best_i[p] = i;
                        best_j[p] = j;
                    }
                }
            }
        }
        for (int b = 0; b < nb; b++) {
            printf("%s", b ? ";  " : "  ");
            print_token(m, qe, best_i[b]);
            printf(" -> ");
            print_token(m, ke, best_j[b]);
            printf("  %.2f [h%d]", (double)best_w[b], best_h[b]);
        }
        printf("\n");
    }
}

/* Prints the summary; returns 0, or 1 when the classifier logits are not finite (then
 * no prediction is printed and the caller reports the error). */
static int print_summary(const as_model *m, const as_encoding *enc, const as_run *r, int top) {
    const as_config *c = as_model_config(m);
    printf("model: %s (%s, %d layers x %d heads, width %d)\n", as_model_dir(m), c->model_type, c->n_layer,
           c->n_head, c->d_model);
    printf("tokens (%d):", enc->n);
    for (int i = 0; i < enc->n; i++) {
        printf(" %d:", i);
        print_token(m, enc, i);
    }
    printf("\n");
    if (r->attn) print_links(m, enc, enc, r, r->dec ? "encoder " : "", top);
    if (r->logits && r->logits_head == HEAD_CLASSIFIER) {
        for (int j = 0; j < r->logits_cols; j++)
            if (!isfinite(r->logits[j])) {
                printf("classifier logits: not finite (NaN or infinity): no prediction\n");
                return 1;
            }
        printf("classifier logits:");
        int arg = 0;
        for (int j = 0; j < r->logits_cols; j++) {
            const char *name = c->id2label && j < c->num_labels ? c->id2label[j] : NULL;
            if (name) printf(" %s=%.4f", name, (double)r->logits[j]);
            else printf(" LABEL_%d=%.4f", j, (double)r->logits[j]);
            if (r->logits[j] > r->logits[arg]) arg = j;
        }
        if (c->id2label && arg < c->num_labels) printf("  -> %s\n", c->id2label[arg]);
        else printf("  -> LABEL_%d\n", arg);
    }
    return 0;
}

/* An encoder-decoder run's decoder input and its self- and cross-attention links. */
static void print_seq2seq(const as_model *m, const as_encoding *src, const as_encoding *tgt, const as_run *r,
                          int top) {
    printf("decoder input (%d):", tgt->n);
    for (int i = 0; i < tgt->n; i++) {
        printf(" %d:", i);
        print_token(m, tgt, i);
    }
    printf("\n");
    if (r->dec->attn) print_links(m, tgt, tgt, r->dec, "decoder ", top);
    if (r->cross->attn) print_links(m, tgt, src, r->cross, "cross-", top);
}

/* JSON members of an encoder-decoder run after the run's own (cli_write_run_json's more). */
typedef struct {
    const as_model *m;
    const as_encoding *tgt;
} seq2seq_json;

static void more_seq2seq(FILE *f, void *ctx) {
    const seq2seq_json *j = ctx;
    cli_json_seq2seq(f, j->m, j->tgt);
}

/* The decoder input: --target text encoded and shifted right, or --target-ids as given;
 * errors for a model that is not encoder-decoder or, for one, no target. */
static int make_target(const run_args *a, const as_model *m, as_encoding *tgt) {
    const as_config *c = as_model_config(m);
    as_error err = {0};
    if (c->n_dec_layer == 0) {
        if (!a->target && !a->target_ids) return 0;
        return cli_usage_error("run", "%s is not an encoder-decoder model (%s): --target / --target-ids do not apply",
                               as_model_dir(m), c->model_type);
    }
    if (!a->target && !a->target_ids)
        return cli_usage_error("run",
                               "%s is an encoder-decoder model (%s): give the decoder input with --target TEXT or "
                               "--target-ids IDS",
                               as_model_dir(m), c->model_type);
    if (a->target_ids) return cli_make_encoding("run", m, NULL, NULL, a->target_ids, NULL, 0, 0, tgt);
    as_encoding labels = {0};
    int rc = cli_make_target_encoding(m, a->target, a->max_tokens, a->truncate, &labels);
    if (!rc && as_seq2seq_shift_target(m, &labels, tgt, &err)) rc = cli_fail(&err);
    as_encoding_free(&labels);
    return rc;
}

static int parse_args(int argc, char **argv, run_args *a) {
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i];
        const char *v = NULL;
#define VAL()                                                     \
    do {                                                          \
        if (!(v = cli_value(argc, argv, &i, "run"))) return 2;    \
    } while (0)
        if (cli_is_help(o)) {
            fputs(RUN_HELP, stdout);
            return 1;
        } else if (!strcmp(o, "--model")) { VAL(); a->model = v; }
        else if (!strcmp(o, "--text")) { VAL(); a->text = v; }
        else if (!strcmp(o, "--text-b")) { VAL(); a->text_b = v; }
        else if (!strcmp(o, "--ids")) { VAL(); a->ids = v; }
        else if (!strcmp(o, "--target")) { VAL(); a->target = v; }
        else if (!strcmp(o, "--target-ids")) { VAL(); a->target_ids = v; }
        else if (!strcmp(o, "--type-ids")) { VAL(); a->type_ids = v; }
        else if (!strcmp(o, "--format")) { VAL(); a->format = v; }
        else if (!strcmp(o, "--out")) { VAL(); a->out = v; }
        else if (!strcmp(o, "--capture")) { VAL(); a->capture = v; }
        else if (!strcmp(o, "--precision")) { VAL(); a->precision = v; }
        else if (!strcmp(o, "--layer")) {
            VAL();
            if (cli_parse_int(v, 0, AS_MAX_LAYERS - 1, &a->layer)) return cli_usage_error("run", "bad --layer '%s'", v);
        } else if (!strcmp(o, "--head")) {
            VAL();
            if (cli_parse_int(v, 0, AS_MAX_HEADS - 1, &a->head)) return cli_usage_error("run", "bad --head '%s'", v);
        } else if (!strcmp(o, "--threads")) {
            VAL();
            if (cli_parse_int(v, 1, 1024, &a->threads)) return cli_usage_error("run", "bad --threads '%s'", v);
        } else if (!strcmp(o, "--max-tokens")) {
            VAL();
            if (cli_parse_int(v, 1, AS_MAX_POSITIONS, &a->max_tokens))
                return cli_usage_error("run", "bad --max-tokens '%s'", v);
        } else if (!strcmp(o, "--top")) {
            VAL();
            if (cli_parse_int(v, 1, 16, &a->top)) return cli_usage_error("run", "bad --top '%s' (1..16)", v);
        } else if (!strcmp(o, "--no-truncate")) a->truncate = 0;
        else if (!strcmp(o, "--quiet")) a->quiet = 1;
        else return cli_usage_error("run", "unknown option '%s'", o);
#undef VAL
    }
    return 0;
}

int cmd_run(int argc, char **argv) {
    run_args a = {.layer = -1, .head = -1, .truncate = 1, .top = 3};
    int rc = parse_args(argc, argv, &a);
    if (rc == 1) return 0; /* --help */
    if (rc) return rc;
    if (!a.model) return cli_usage_error("run", "--model DIR is required");
    if (!a.text == !a.ids) return cli_usage_error("run", "give exactly one of --text or --ids");
    if (a.text_b && !a.text) return cli_usage_error("run", "--text-b needs --text");
    if (a.type_ids && !a.ids) return cli_usage_error("run", "--type-ids needs --ids");
    if (a.target && a.target_ids) return cli_usage_error("run", "give at most one of --target or --target-ids");
    int fmt_npz = 0, fmt_json = 0;
    if (a.format) {
        if (!strcmp(a.format, "npz")) fmt_npz = 1;
        else if (!strcmp(a.format, "json")) fmt_json = 1;
        else return cli_usage_error("run", "--format must be json or npz, not '%s'", a.format);
    } else if (a.out) {
        size_t n = strlen(a.out);
        fmt_npz = n >= 4 && !strcmp(a.out + n - 4, ".npz");
        fmt_json = !fmt_npz;
    }
    if (fmt_npz && !a.out) return cli_usage_error("run", "--format npz needs --out FILE");
    unsigned what = CAP_ALL;
    if (a.capture && cli_parse_capture(a.capture, &what))
        return cli_usage_error("run", "bad --capture '%s' (all, attn, scores, qkv, hidden, logits, stats, thumbs)", a.capture);
    if (!fmt_npz && !fmt_json) what |= CAP_ATTN | CAP_LOGITS; /* the summary needs them */
    as_precision prec = AS_PRECISION_F32;
    if (a.precision && as_precision_parse(a.precision, &prec))
        return cli_usage_error("run", "--precision must be f32 or bf16, not '%s'", a.precision);
    as_set_quiet(a.quiet);

    as_error err = {0};
    as_model *m = NULL;
    as_encoding enc = {0}, tgt = {0};
    as_run *r = NULL;
    if (as_model_load(a.model, &m, &err) || as_model_set_precision(m, prec, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if ((rc = cli_make_encoding("run", m, a.text, a.text_b, a.ids, a.type_ids, a.max_tokens, a.truncate,
                                &enc)))
        goto cleanup;
    if ((rc = make_target(&a, m, &tgt))) goto cleanup;
    as_capture_spec spec = {.what = what, .layer = a.layer, .head = a.head, .threads = a.threads};
    if (tgt.n ? as_forward_seq2seq(m, &enc, &tgt, &spec, &r, &err) : as_forward(m, &enc, &spec, &r, &err)) {
        rc = cli_fail(&err);
        goto cleanup;
    }
    if (fmt_npz) {
        if (as_run_write_npz_seq2seq(m, &enc, tgt.n ? &tgt : NULL, r, a.out, &err)) {
            rc = cli_fail(&err);
            goto cleanup;
        }
    } else if (fmt_json) {
        FILE *f = a.out ? fopen(a.out, "wb") : stdout;
        if (!f) {
            as_err_set(&err, AS_ERR_INPUT, "%s: cannot create the output file", a.out);
            rc = cli_fail(&err);
            goto cleanup;
        }
        seq2seq_json sj = {m, &tgt};
        int oom = cli_write_run_json(f, m, &enc, r, tgt.n ? more_seq2seq : NULL, &sj) != 0;
        int bad = ferror(f);
        if (a.out) bad |= fclose(f) != 0;
        if (oom) {
            as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
            rc = cli_fail(&err);
            goto cleanup;
        }
        if (bad) {
            as_err_set(&err, AS_ERR_INTERNAL, "%s: write failed", a.out ? a.out : "stdout");
            rc = cli_fail(&err);
            goto cleanup;
        }
    } else {
        if (print_summary(m, &enc, r, a.top)) {
            fflush(stdout);
            as_err_set(&err, AS_ERR_INPUT,
                       "%s: the classifier logits are not finite (NaN or infinity): the weights "
                       "overflow on this input; no prediction",
                       as_model_dir(m));
            rc = cli_fail(&err);
            goto cleanup;
        }
        if (r->dec) print_seq2seq(m, &enc, &tgt, r, a.top);
    }
    rc = 0;
cleanup:
    as_run_free(r);
    as_encoding_free(&tgt);
    as_encoding_free(&enc);
    as_model_free(m);
    return rc;
}
