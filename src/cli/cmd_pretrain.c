/* cmd_pretrain.c — `attnscope pretrain`: masked-LM pretraining of a BERT encoder
 * from scratch (train/pretrain.c). */
#include "train_args.h"

static const char *PRE_HELP =
    "usage: attnscope pretrain --corpus FILE[,FILE...] --vocab vocab.txt --out DIR\n"
    "         [--exclude FILE.tsv] [--layers 4] [--width 256] [--heads 4] [--ff 1024]\n"
    "         [--max-len 128] [--seq-len N] [--steps 1000] [--batch 32] [--lr 5e-4] [--warmup N]\n"
    "         [--wd 0.01] [--dropout 0.1] [--clip 1.0] [--seed 1234] [--threads N] [--precision f32|bf16]\n"
    "         [--save-every 500] [--log-every 10] [--dtype f16|f32] [--resume]\n"
    "         [--init-range 0.02] [--pos-init normal|sinusoidal] [--mask-prob 0.15]\n"
    "\n"
    "Masked-language modelling (--mask-prob of the tokens, default 15%: 80% [MASK],\n"
    "10% random, 10% kept) on sentence pairs [CLS] A [SEP] B [SEP], B following A half\n"
    "of the time, with segment ids. AdamW, linear warmup (default 5% of steps) and\n"
    "decay, global-norm clipping. Checkpoints (F32 + optimizer state) in DIR/checkpoint\n"
    "every --save-every steps; --resume continues from there with identical results.\n"
    "Final model: DIR (--dtype, default f16), loss curve: DIR/train_log.tsv. --seq-len\n"
    "trains on shorter sequences than the --max-len positions the model has (positions\n"
    "beyond stay untrained).\n"
    "--init-range: std of the normal initialisation of weights and embeddings (BERT:\n"
    "0.02); --pos-init sinusoidal starts the (trainable) position embeddings from\n"
    "Vaswani et al.'s sinusoids at that scale.\n"
    TA_PRECISION_HELP;

int cmd_pretrain(int argc, char **argv) {
    ta_list corpus = {0}, excl = {0};
    pretrain_opts o;
    pretrain_opts_default(&o);
    int rc = 0, seed = -1;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(PRE_HELP, stdout);
            goto done;
        }
        if (!strcmp(a, "--resume")) {
            o.resume = 1;
            continue;
        }
        if (!(v = cli_value(argc, argv, &i, "pretrain"))) {
            rc = AS_ERR_INPUT;
            break;
        }
#define INT(name, field, lo, hi) TA_INT("pretrain", name, field, lo, hi)
#define FLT(name, field, lo, hi) TA_FLT("pretrain", name, field, lo, hi)
        if (!strcmp(a, "--corpus")) {
            if (ta_list_add(&corpus, v)) rc = cli_usage_error("pretrain", "too many --corpus files");
        } else if (!strcmp(a, "--exclude")) {
            if (ta_list_add(&excl, v)) rc = cli_usage_error("pretrain", "too many --exclude files");
        } else if (!strcmp(a, "--vocab")) o.vocab = v;
        else if (!strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--pos-init")) {
            if (!strcmp(v, "normal")) o.pos_sinusoidal = 0;
            else if (!strcmp(v, "sinusoidal")) o.pos_sinusoidal = 1;
            else rc = cli_usage_error("pretrain", "bad --pos-init '%s': expected normal or sinusoidal", v);
        } else if (!strcmp(a, "--dtype")) {
            if (ta_dtype(v, &o.dtype)) rc = cli_usage_error("pretrain", "bad --dtype '%s': expected f16 or f32", v);
        }
        INT("--layers", layers, 1, AS_MAX_LAYERS)
        INT("--width", width, 8, 4096)
        INT("--heads", heads, 1, AS_MAX_HEADS)
        INT("--ff", ff, 8, 65536)
        INT("--max-len", max_len, 16, 4000)
        INT("--seq-len", seq_len, 16, 4000)
        INT("--steps", steps, 1, 100000000)
        INT("--batch", batch, 1, 4096)
        INT("--warmup", warmup, 0, 100000000)
        INT("--save-every", save_every, 1, 100000000)
        INT("--log-every", log_every, 1, 100000000)
        INT("--threads", threads, 1, 1024)
        TA_PRECISION("pretrain")
        else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(v, 0, 2147483647, &seed))
                rc = cli_usage_error("pretrain", "bad --seed '%s': expected an integer in [0, 2147483647]", v);
            else o.seed = (uint64_t)seed;
        }
        FLT("--lr", lr, 1e-8, 1.0)
        FLT("--wd", wd, 0.0, 1.0)
        FLT("--dropout", dropout, 0.0, 0.95)
        FLT("--clip", clip, 0.0, 1e6)
        FLT("--init-range", init_range, 1e-4, 1.0)
        FLT("--mask-prob", mask_prob, 0.01, 0.9)
        else rc = cli_usage_error("pretrain", "unknown option '%s'", a);
#undef INT
#undef FLT
    }
    if (!rc && (!corpus.n || !o.vocab || !o.out))
        rc = cli_usage_error("pretrain", "--corpus, --vocab and --out are required");
    if (!rc) {
        as_error err = {0};
        o.corpus = corpus.v;
        o.n_corpus = corpus.n;
        o.exclude = excl.v;
        o.n_exclude = excl.n;
        if (pretrain_run(&o, &err)) rc = cli_fail(&err);
    }
done:
    ta_list_free(&corpus);
    ta_list_free(&excl);
    return rc;
}
