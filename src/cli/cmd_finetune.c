/* cmd_finetune.c — `attnscope finetune`: trains a sequence-classification head and
 * the encoder on a labelled TSV (train/finetune.c), keeping the best dev epoch. */
#include "train_args.h"

static const char *FT_HELP =
    "usage: attnscope finetune --task sst2 --model DIR --train FILE.tsv --dev FILE.tsv --out DIR\n"
    "         [--epochs 3] [--batch 32] [--lr 1e-4] [--wd 0.01] [--dropout 0.1] [--clip 1.0]\n"
    "         [--warmup-frac 0.1] [--max-len 128] [--max-train N] [--seed 42] [--threads N] [--precision f32|bf16]\n"
    "         [--dtype f16|f32]\n"
    "\n"
    "Fine-tunes DIR (a BERT-family folder with a tokenizer) as a 2-class classifier\n"
    "(id2label NEGATIVE / POSITIVE), prints the dev accuracy after every epoch and saves\n"
    "the best epoch to --out with the tokenizer files.\n"
    TA_PRECISION_HELP;

int cmd_finetune(int argc, char **argv) {
    finetune_opts o;
    finetune_opts_default(&o);
    int rc = 0, seed = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(FT_HELP, stdout);
            return 0;
        }
        if (!(v = cli_value(argc, argv, &i, "finetune"))) return AS_ERR_INPUT;
#define INT(name, field, lo, hi) TA_INT("finetune", name, field, lo, hi)
#define FLT(name, field, lo, hi) TA_FLT("finetune", name, field, lo, hi)
        if (!strcmp(a, "--task")) o.task = v;
        else if (!strcmp(a, "--model")) o.model = v;
        else if (!strcmp(a, "--train")) o.train = v;
        else if (!strcmp(a, "--dev")) o.dev = v;
        else if (!strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--dtype")) {
            if (ta_dtype(v, &o.dtype)) rc = cli_usage_error("finetune", "bad --dtype '%s': expected f16 or f32", v);
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(v, 0, 2147483647, &seed)) rc = cli_usage_error("finetune", "bad --seed '%s'", v);
            else o.seed = (uint64_t)seed;
        }
        INT("--epochs", epochs, 1, 1000)
        INT("--batch", batch, 1, 4096)
        INT("--max-len", max_len, 8, 4000)
        INT("--max-train", max_train, 1, 100000000)
        INT("--threads", threads, 1, 1024)
        TA_PRECISION("finetune")
        FLT("--lr", lr, 1e-8, 1.0)
        FLT("--wd", wd, 0.0, 1.0)
        FLT("--dropout", dropout, 0.0, 0.95)
        FLT("--clip", clip, 0.0, 1e6)
        FLT("--warmup-frac", warmup_frac, 0.0, 1.0)
        else rc = cli_usage_error("finetune", "unknown option '%s'", a);
#undef INT
#undef FLT
    }
    if (rc) return rc;
    if (!o.model || !o.train || !o.dev || !o.out)
        return cli_usage_error("finetune", "--model, --train, --dev and --out are required");
    as_error err = {0};
    float acc = 0.0f;
    if (finetune_run(&o, &acc, &err)) return cli_fail(&err);
    return 0;
}
