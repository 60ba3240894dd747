/* cmd_eval.c — `attnscope eval`: accuracy of a classifier on a labelled TSV
 * (--task sst2), masked-token accuracy of an MLM model on held-out text (--task mlm),
 * and the positional attention patterns of every head (--task patterns: mean
 * attention to the next token, the previous token, and [CLS]/[SEP], averaged over the
 * real query tokens of sentence pairs from the text; Clark et al. 2019, sec. 3), and the
 * held-out perplexity of a causal LM next to a Kneser-Ney n-gram baseline on the same
 * tokens (--task lm). */
#include "train_args.h"
#include "attnscope/ngram.h"

static const char *EVAL_HELP =
    "usage: attnscope eval --model DIR --task sst2 --data FILE.tsv [--threads N]\n"
    "       attnscope eval --model DIR --task mlm --data FILE[,FILE...] [--batches 50] [--batch 32]\n"
    "                      [--max-len 64] [--seed 7]\n"
    "       attnscope eval --model DIR --task patterns --data FILE[,FILE...] [--pairs 200]\n"
    "                      [--precision f32|bf16]\n"
    "       attnscope eval --model DIR --task lm --data FILE[,FILE...] [--seq N] [--stride S]\n"
    "                      [--precision f32|bf16]\n"
    "                      [--window-start text|bos]\n"
    "                      [--ngram-train FILE[,FILE...] [--exclude FILE,...] [--ngram-order 3]]\n"
    "\n"
    "sst2: last line 'accuracy: 0.xxxx'. mlm: masked-token accuracy on pairs built and\n"
    "masked as in pretraining (fixed --seed), last line 'mlm_accuracy: 0.xxxx'.\n"
    "patterns: per head, the mean attention to the next token, the previous token and\n"
    "[CLS]+[SEP], over consecutive sentence pairs of the text; then the strongest head\n"
    "for each.\n"
    "lm: the documents of the files packed as train-lm packs them (BOS per document,\n"
    "sentences joined by a line break) and scored by the causal LM in windows of --seq\n"
    "tokens (default min(256, the model's positions)) every --stride tokens (default\n"
    "seq/2): every token after the first is predicted once, past the first window with\n"
    "at least seq - stride tokens of context. --window-start bos puts a BOS token in front\n"
    "of every window that does not start with one (seq - 1 text tokens a window), as the\n"
    "model sees text in use; the default, text, scores the windows as they are. Prints\n"
    "the tokens, the text's bytes, and the mean negative log-likelihood (nats/token),\n"
    "perplexity and bits per byte. With\n"
    "--ngram-train, an interpolated modified Kneser-Ney n-gram model (--ngram-order 1..5)\n"
    "counted on those files packed the same way (minus the sentences of --exclude files)\n"
    "scores the same tokens, printed next to the model.\n"
    "--precision bf16 (patterns, lm) multiplies the linear maps in BF16 (as `attnscope run`'s):\n"
    "the lm task then gives BF16's change of the perplexity.\n";

static int eval_patterns(const char *model, as_precision prec, const ta_list *files, int pairs, int threads) {
    as_error err = {0};
    as_model *m = NULL;
    data_text txt = {0};
    int drop = 0, rc = 0;
    double *acc = NULL;
    if ((rc = cli_load_model(model, prec, &m))) goto done;
    if (data_read_corpus(files->v, files->n, NULL, 0, &txt, &drop, &err)) {
        rc = cli_fail(&err);
        goto done;
    }
    const as_config *c = as_model_config(m);
    int L = c->n_layer, H = c->n_head;
    acc = as_calloc((size_t)L * H * 3, sizeof(double));
    if (!acc) {
        as_err_set(&err, AS_ERR_INTERNAL, "out of memory");
        rc = cli_fail(&err);
        goto done;
    }
    double nq = 0;
    int used = 0;
    as_set_quiet(1);
    for (int i = 0; i + 1 < txt.n && used < pairs; i += 2) {
        if (txt.doc[i] != txt.doc[i + 1]) continue;
        as_encoding e = {0};
        as_encode_opts eo = {0, 1};
        as_run *r = NULL;
        as_capture_spec sp = {.what = CAP_ATTN, .layer = -1, .head = -1, .threads = threads};
        if (as_encode(m, txt.text[i], txt.text[i + 1], &eo, &e, &err) || as_forward(m, &e, &sp, &r, &err)) {
            as_encoding_free(&e);
            rc = cli_fail(&err);
            goto done;
        }
        int T = e.n;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                const float *A = as_run_attn(r, l, h);
                double *o = acc + ((size_t)l * H + h) * 3;
                for (int q = 0; q < T; q++) {
                    if (q + 1 < T) o[0] += A[(size_t)q * T + q + 1];
                    if (q > 0) o[1] += A[(size_t)q * T + q - 1];
                    for (int k = 0; k < T; k++)
                        if (e.seq[k] < 0) o[2] += A[(size_t)q * T + k];
                }
            }
        nq += T;
        used++;
        as_run_free(r);
        as_encoding_free(&e);
    }
    as_set_quiet(0);
    printf("%d sentence pairs, %.0f query tokens\nlayer head   next   prev  cls+sep\n", used, nq);
    int best[3] = {0, 0, 0};
    for (int k = 0; k < L * H; k++) {
        printf("%5d %4d  %.3f  %.3f  %.3f\n", k / H, k % H, acc[k * 3] / nq, acc[k * 3 + 1] / nq,
               acc[k * 3 + 2] / nq);
        for (int j = 0; j < 3; j++)
            if (acc[k * 3 + j] > acc[best[j] * 3 + j]) best[j] = k;
    }
    static const char *names[3] = {"next token", "previous token", "[CLS]/[SEP]"};
    for (int j = 0; j < 3; j++)
        printf("strongest %s head: layer %d head %d (%.3f)\n", names[j], best[j] / H, best[j] % H,
               acc[best[j] * 3 + j] / nq);
done:
    free(acc);
    data_text_free(&txt);
    as_model_free(m);
    return rc;
}

typedef struct {
    int seq, stride, order, threads, bos_windows;
    const ta_list *data, *ngram_train, *exclude;
    as_precision precision;
} eval_lm_opts;

/* Prints "<who>_nll", "_perplexity" and "_bits_per_byte" of a summed NLL over n_pred
 * predictions of a text of n_bytes bytes. */
static void print_nll(const char *who, double nll, size_t n_pred, size_t n_bytes) {
    double mean = nll / (double)n_pred;
    printf("%s_nll: %.9g\n%s_perplexity: %.9g\n%s_bits_per_byte: %.9g\n", who, mean, who, exp(mean), who,
           nll / log(2.0) / (double)n_bytes);
}

static int eval_lm(const char *model, const eval_lm_opts *o) {
    as_error err = {0};
    as_model *m = NULL;
    int32_t *ids = NULL, *train = NULL;
    ngram_lm *ng = NULL;
    size_t n = 0, n_bytes = 0, n_pred = 0, n_train = 0;
    double nll = 0;
    int rc = 0, dropped = 0;
    if ((rc = cli_load_model(model, o->precision, &m))) goto done;
    if (!(as_model_heads(m) & HEAD_LM)) {
        as_err_set(&err, AS_ERR_INPUT, "%s: the model has no causal-LM head", model);
        goto fail;
    }
    int seq = o->seq ? o->seq : as_model_max_tokens(m) < 256 ? as_model_max_tokens(m) : 256;
    int stride = o->stride ? o->stride : seq / 2 > 0 ? seq / 2 : 1;
    if (seq > as_model_max_tokens(m)) {
        rc = cli_usage_error("eval", "--seq %d is over the model's %d positions", seq, as_model_max_tokens(m));
        goto done;
    }
    int bos_id = o->bos_windows ? as_model_config(m)->bos_token_id : -1;
    if (o->bos_windows && bos_id < 0) {
        rc = cli_usage_error("eval", "--window-start bos: %s has no BOS token", model);
        goto done;
    }
    if (stride >= seq - (bos_id >= 0)) {
        rc = cli_usage_error("eval", "--stride %d must be below the window of %d text tokens", stride,
                             seq - (bos_id >= 0));
        goto done;
    }
    if (lm_corpus_tokens(m, o->data->v, o->data->n, NULL, 0, &ids, &n, &n_bytes, NULL, &err)) goto fail;
    if (n < 2) {
        as_err_set(&err, AS_ERR_INPUT, "%s: the text has %zu tokens; at least 2 are needed", o->data->v[0], n);
        goto fail;
    }
    if (o->ngram_train->n) { /* counted before the model runs: a bad file fails fast */
        if (lm_corpus_tokens(m, o->ngram_train->v, o->ngram_train->n, o->exclude->v, o->exclude->n, &train, &n_train,
                             NULL, &dropped, &err) ||
            ngram_train(train, n_train, o->order, as_model_config(m)->vocab_size, &ng, &err))
            goto fail;
    }
    printf("tokens: %zu\npredicted: %zu\nbytes: %zu\nwindow: %d\nstride: %d\nwindow_start: %s\n", n, n - 1, n_bytes,
           seq, stride, bos_id >= 0 ? "bos" : "text");
    fflush(stdout);
    if (lm_eval_windows(m, ids, n, seq, stride, bos_id, o->threads, NULL, &nll, &n_pred, &err)) goto fail;
    print_nll("model", nll, n_pred, n_bytes);
    if (ng) {
        printf("ngram_order: %d\nngram_train_tokens: %zu\nngram_held_out_sentences_left_out: %d\n", o->order, n_train,
               dropped);
        if (ngram_nll(ng, ids, n, &nll, &n_pred, &err)) goto fail;
        print_nll("ngram", nll, n_pred, n_bytes);
    }
    goto done;
fail:
    rc = cli_fail(&err);
done:
    ngram_free(ng);
    free(train);
    free(ids);
    as_model_free(m);
    return rc;
}

int cmd_eval(int argc, char **argv) {
    const char *model = NULL, *task = NULL;
    ta_list data = {0}, ngram_files = {0}, exclude = {0};
    int rc = 0, threads = 0, batches = 50, batch = 32, max_len = 64, seed = 7, pairs = 200;
    int seq = 0, stride = 0, order = 3, bos_windows = 0;
    as_precision prec = AS_PRECISION_F32;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(EVAL_HELP, stdout);
            goto done;
        }
        if (!(v = cli_value(argc, argv, &i, "eval"))) {
            rc = AS_ERR_INPUT;
            break;
        }
        if (!strcmp(a, "--model")) model = v;
        else if (!strcmp(a, "--task")) task = v;
        else if (!strcmp(a, "--data")) {
            if (ta_list_add(&data, v)) rc = cli_usage_error("eval", "too many --data files");
        } else if (!strcmp(a, "--ngram-train")) {
            if (ta_list_add(&ngram_files, v)) rc = cli_usage_error("eval", "too many --ngram-train files");
        } else if (!strcmp(a, "--exclude")) {
            if (ta_list_add(&exclude, v)) rc = cli_usage_error("eval", "too many --exclude files");
        } else if (!strcmp(a, "--seq")) {
            if (cli_parse_int(v, 2, AS_MAX_POSITIONS, &seq)) rc = cli_usage_error("eval", "bad --seq '%s'", v);
        } else if (!strcmp(a, "--stride")) {
            if (cli_parse_int(v, 1, AS_MAX_POSITIONS, &stride)) rc = cli_usage_error("eval", "bad --stride '%s'", v);
        } else if (!strcmp(a, "--window-start")) {
            if (!strcmp(v, "bos")) bos_windows = 1;
            else if (!strcmp(v, "text")) bos_windows = 0;
            else rc = cli_usage_error("eval", "bad --window-start '%s' (text or bos)", v);
        } else if (!strcmp(a, "--ngram-order")) {
            if (cli_parse_int(v, 1, NGRAM_MAX_ORDER, &order))
                rc = cli_usage_error("eval", "bad --ngram-order '%s' (1..%d)", v, NGRAM_MAX_ORDER);
        } else if (!strcmp(a, "--threads")) {
            if (cli_parse_int(v, 1, 1024, &threads)) rc = cli_usage_error("eval", "bad --threads '%s'", v);
        } else if (!strcmp(a, "--batches")) {
            if (cli_parse_int(v, 1, 1000000, &batches)) rc = cli_usage_error("eval", "bad --batches '%s'", v);
        } else if (!strcmp(a, "--batch")) {
            if (cli_parse_int(v, 1, 4096, &batch)) rc = cli_usage_error("eval", "bad --batch '%s'", v);
        } else if (!strcmp(a, "--max-len")) {
            if (cli_parse_int(v, 16, 4000, &max_len)) rc = cli_usage_error("eval", "bad --max-len '%s'", v);
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(v, 0, 2147483647, &seed)) rc = cli_usage_error("eval", "bad --seed '%s'", v);
        } else if (!strcmp(a, "--precision")) {
            rc = cli_parse_precision("eval", v, &prec);
        } else if (!strcmp(a, "--pairs")) {
            if (cli_parse_int(v, 1, 1000000, &pairs)) rc = cli_usage_error("eval", "bad --pairs '%s'", v);
        } else rc = cli_usage_error("eval", "unknown option '%s'", a);
    }
    if (rc) goto done;
    if (!model || !task || !data.n) {
        rc = cli_usage_error("eval", "--model, --task and --data are required");
        goto done;
    }
    as_error err = {0};
    if (prec == AS_PRECISION_BF16 && (!strcmp(task, "sst2") || !strcmp(task, "mlm"))) {
        rc = cli_usage_error("eval", "--precision applies to --task lm and patterns (%s runs F32)", task);
        goto done;
    }
    if (!strcmp(task, "sst2")) {
        float acc = 0.0f;
        int n = 0;
        if (data.n != 1) rc = cli_usage_error("eval", "--task sst2 takes one --data file");
        else if (finetune_eval_cls(model, data.v[0], threads, 0, &acc, &n, &err)) rc = cli_fail(&err);
        else printf("sentences: %d\naccuracy: %.4f\n", n, (double)acc);
    } else if (!strcmp(task, "mlm")) {
        float acc = 0.0f, loss = 0.0f;
        train_set_threads(threads);
        if (finetune_eval_mlm(model, data.v, data.n, batches, batch, max_len, (uint64_t)seed, &acc, &loss, &err))
            rc = cli_fail(&err);
        else printf("mlm_loss: %.4f\nmlm_accuracy: %.4f\n", (double)loss, (double)acc);
    } else if (!strcmp(task, "patterns")) {
        rc = eval_patterns(model, prec, &data, pairs, threads);
    } else if (!strcmp(task, "lm")) {
        if (exclude.n && !ngram_files.n) rc = cli_usage_error("eval", "--exclude applies to --ngram-train files");
        else {
            eval_lm_opts lo = {seq, stride, order, threads, bos_windows, &data, &ngram_files, &exclude, prec};
            rc = eval_lm(model, &lo);
        }
    } else {
        rc = cli_usage_error("eval", "unknown --task '%s' (sst2, mlm, patterns or lm)", task);
    }
done:
    ta_list_free(&ngram_files);
    ta_list_free(&exclude);
    ta_list_free(&data);
    return rc;
}
