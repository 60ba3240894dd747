/* cmd_train_lm.c — `attnscope train-lm`: causal-LM training of a decoder model folder
 * (GPT-2, the LLaMA family) on the engine's one forward and backward (train/lm_train.c). */
#include "train_args.h"

static const char *TRAIN_LM_HELP =
    "usage: attnscope train-lm --model DIR --corpus FILE[,FILE...] --out DIR\n"
    "         [--steps 100] [--batch 8] [--seq 128] [--lr 3e-4] [--warmup 10] [--wd 0.1]\n"
    "         [--clip 1.0] [--seed 1] [--threads N] [--precision f32|bf16] [--log-every 10] [--quiet]\n"
    "         [--save-every N] [--resume] [--exclude FILE[,FILE...]]\n"
    "         [--repeat-frac P [--repeat-from STEP] [--repeat-random Q [--repeat-ids N]]]\n"
    "         [--bos-start P | --bos-prefix P] [--stop-after STEP]\n"
    "\n"
    "Trains the model folder DIR (config.json, model.safetensors, tokenizer files; any\n"
    "model with a causal-LM head: GPT-2, Llama, Mistral, Qwen2/3, Gemma 2/3, Phi-3) on\n"
    "next-token prediction. Corpus files: .conllu (# text = lines, # newdoc documents),\n"
    "SST-2 .tsv (the sentence column), else text with a blank line between documents and\n"
    "a sentence a line; --exclude drops the sentences of held-out files (any of these\n"
    "formats). Each document starts with BOS when the model has one, its sentences are\n"
    "joined by line breaks, documents are packed into one token stream, and each\n"
    "step takes --batch windows of --seq tokens at seeded random offsets (a run is a pure\n"
    "function of --seed). Gradients of every parameter through the same forward the views\n"
    "use; global-norm clipping at --clip; AdamW (betas 0.9, 0.95; decay on matrices and\n"
    "tables) with linear warmup then cosine decay to 10% of --lr. Writes the trained\n"
    "weights (F32, the checkpoint's tensor names) with config.json and the tokenizer\n"
    "files to --out. --save-every N checkpoints the weights and the optimizer state in\n"
    "--out/checkpoint; --resume continues from there (same options) with results\n"
    "identical to an uninterrupted run. --repeat-frac P: from step --repeat-from (default\n"
    "0) on, a fraction P of the windows (seeded, drawn apart from the window offsets) has\n"
    "a span of T/16..T/2 tokens repeated right after itself, so that copying from context\n"
    "pays off (a curriculum for induction heads); --repeat-random Q fills a fraction Q of\n"
    "those spans with seeded random token ids first, so that only copying predicts the\n"
    "second copy (the repeated random sequences of Olsson et al. 2022); --repeat-ids N\n"
    "draws those random ids from the first N ids above the special ones only (a smaller\n"
    "alphabet, an easier copying task to start from). --bos-start P moves a fraction P of\n"
    "the windows (seeded) back to the start of the document their offset falls in, so\n"
    "that they begin with BOS as a prompt does (a document's first window recurs: long\n"
    "documents are then seen only at their start). --bos-prefix P keeps the random offsets\n"
    "but replaces the first token of a fraction P of the windows by BOS, so that they\n"
    "begin as a prompt does while the text stays uniformly sampled (not with --bos-start).\n"
    "--stop-after STEP ends the run after that step (checkpoint and weights written) with\n"
    "the schedule of --steps, so that a run can continue from there with other options.\n"
    TA_PRECISION_HELP
    "Exit status 0 ok, 2 bad input, 1 internal.\n";

int cmd_train_lm(int argc, char **argv) {
    ta_list corpus = {0}, excl = {0};
    lm_opts o;
    lm_opts_default(&o);
    int rc = 0, seed = -1;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(TRAIN_LM_HELP, stdout);
            goto done;
        }
        if (!strcmp(a, "--quiet") || !strcmp(a, "--resume")) {
            if (a[2] == 'q') o.quiet = 1;
            else o.resume = 1;
            continue;
        }
        if (!(v = cli_value(argc, argv, &i, "train-lm"))) {
            rc = AS_ERR_INPUT;
            break;
        }
#define INT(name, field, lo, hi) TA_INT("train-lm", name, field, lo, hi)
#define FLT(name, field, lo, hi) TA_FLT("train-lm", name, field, lo, hi)
        if (!strcmp(a, "--corpus")) {
            if (ta_list_add(&corpus, v)) rc = cli_usage_error("train-lm", "too many --corpus files");
        } else if (!strcmp(a, "--exclude")) {
            if (ta_list_add(&excl, v)) rc = cli_usage_error("train-lm", "too many --exclude files");
        } else if (!strcmp(a, "--model")) o.model_dir = v;
        else if (!strcmp(a, "--out")) o.out_dir = v;
        INT("--steps", steps, 1, 100000000)
        INT("--batch", batch, 1, 4096)
        INT("--seq", seq, 2, AS_MAX_POSITIONS)
        INT("--warmup", warmup, 0, 100000000)
        INT("--log-every", log_every, 1, 100000000)
        INT("--save-every", save_every, 1, 100000000)
        INT("--threads", threads, 1, 1024)
        TA_PRECISION("train-lm")
        INT("--repeat-from", repeat_from, 0, 100000000)
        INT("--stop-after", stop_after, 1, 100000000)
        INT("--repeat-ids", repeat_ids, 1, 100000000)
        else if (!strcmp(a, "--seed")) {
            if (cli_parse_int(v, 0, 2147483647, &seed))
                rc = cli_usage_error("train-lm", "bad --seed '%s': expected an integer in [0, 2147483647]", v);
            else o.seed = (uint64_t)seed;
        }
        FLT("--lr", lr, 1e-8, 1.0)
        FLT("--wd", weight_decay, 0.0, 1.0)
        FLT("--clip", clip, 0.0, 1e6)
        FLT("--repeat-frac", repeat_frac, 0.0, 1.0)
        FLT("--repeat-random", repeat_random, 0.0, 1.0)
        FLT("--bos-start", bos_start, 0.0, 1.0)
        FLT("--bos-prefix", bos_prefix, 0.0, 1.0)
        else rc = cli_usage_error("train-lm", "unknown option '%s'", a);
#undef INT
#undef FLT
    }
    if (!rc && (!corpus.n || !o.model_dir || !o.out_dir))
        rc = cli_usage_error("train-lm", "--model, --corpus and --out are required");
    if (!rc) {
        as_error err = {0};
        o.corpus = corpus.v;
        o.n_corpus = corpus.n;
        o.exclude = excl.v;
        o.n_exclude = excl.n;
        if (lm_train_run(&o, &err)) rc = cli_fail(&err);
    }
done:
    ta_list_free(&corpus);
    ta_list_free(&excl);
    return rc;
}
