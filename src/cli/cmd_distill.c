/* cmd_distill.c — `attnscope distill`: DistilBERT-style distillation of a masked-LM
 * teacher into a student with half the layers (train/distill.c). */
#include "train_args.h"

static const char *DI_HELP =
    "usage: attnscope distill --teacher DIR --corpus FILE[,FILE...] --out DIR [--exclude FILE.tsv]\n"
    "         [--steps 1000] [--batch 32] [--max-len 64] [--lr 5e-4] [--temperature 2]\n"
    "         [--alpha-kl 5] [--alpha-mlm 2] [--alpha-cos 1] [--dropout 0] [--seed 99]\n"
    "         [--threads N] [--precision f32|bf16] [--dtype f16|f32]\n"
    "\n"
    "Student = every other teacher layer + the teacher's embeddings and MLM head, trained\n"
    "on masked-LM pairs with soft-target KL (temperature T, scaled by T^2), the MLM loss\n"
    "and a cosine loss between the final hidden states (Sanh et al. 2019).\n"
    TA_PRECISION_HELP;

int cmd_distill(int argc, char **argv) {
    ta_list corpus = {0}, excl = {0};
    distill_opts o;
    distill_opts_default(&o);
    int rc = 0, seed = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(DI_HELP, stdout);
            goto done;
        }
        if (!(v = cli_value(argc, argv, &i, "distill"))) {
            rc = AS_ERR_INPUT;
            break;
        }
#define INT(name, field, lo, hi) TA_INT("distill", name, field, lo, hi)
#define FLT(name, field, lo, hi) TA_FLT("distill", name, field, lo, hi)
        if (!strcmp(a, "--teacher")) o.teacher = v;
        else if (!strcmp(a, "--out")) o.out = v;
        else if (!strcmp(a, "--corpus")) {
            if (ta_list_add(&corpus, v)) rc = cli_usage_error("distill", "too many --corpus files");
        } else if (!strcmp(a, "--exclude")) {
            if (ta_list_add(&excl, v)) rc = cli_usage_error("distill", "too many --exclude files");
        } else if (!strcmp(a, "--dtype")) {
            if (ta_dtype(v, &o.dtype)) rc = cli_usage_error("distill", "bad --dtype '%s': expected f16 or f32", v);
        } else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(v, 0, 2147483647, &seed)) rc = cli_usage_error("distill", "bad --seed '%s'", v);
            else o.seed = (uint64_t)seed;
        }
        INT("--steps", steps, 1, 100000000)
        INT("--batch", batch, 1, 4096)
        INT("--max-len", max_len, 16, 4000)
        INT("--threads", threads, 1, 1024)
        TA_PRECISION("distill")
        INT("--log-every", log_every, 1, 100000000)
        FLT("--lr", lr, 1e-8, 1.0)
        FLT("--wd", wd, 0.0, 1.0)
        FLT("--dropout", dropout, 0.0, 0.95)
        FLT("--clip", clip, 0.0, 1e6)
        FLT("--temperature", temperature, 0.01, 100.0)
        FLT("--alpha-kl", alpha_kl, 0.0, 1000.0)
        FLT("--alpha-mlm", alpha_mlm, 0.0, 1000.0)
        FLT("--alpha-cos", alpha_cos, 0.0, 1000.0)
        else rc = cli_usage_error("distill", "unknown option '%s'", a);
#undef INT
#undef FLT
    }
    if (!rc && (!o.teacher || !corpus.n || !o.out))
        rc = cli_usage_error("distill", "--teacher, --corpus and --out are required");
    if (!rc) {
        as_error err = {0};
        o.corpus = corpus.v;
        o.n_corpus = corpus.n;
        o.exclude = excl.v;
        o.n_exclude = excl.n;
        if (distill_run(&o, &err)) rc = cli_fail(&err);
    }
done:
    ta_list_free(&corpus);
    ta_list_free(&excl);
    return rc;
}
