/* cmd_vocab.c — `attnscope vocab`: trains a WordPiece vocabulary (train/vocab_train.c)
 * on text files and writes vocab.txt, optionally with the tokenizer files; or (--type
 * bpe) a byte-level BPE vocabulary as tokenizer.json (train/bpe_train.c). */
#include "train_args.h"

static const char *VOCAB_HELP =
    "usage: attnscope vocab --corpus FILE[,FILE...] --size N --out vocab.txt\n"
    "                       [--exclude FILE.tsv] [--min-char-count N] [--tokenizer-dir DIR]\n"
    "       attnscope vocab --type bpe --corpus FILE[,FILE...] --size N --out DIR [--exclude FILE]\n"
    "\n"
    "--type bpe trains a byte-level BPE (GPT-2's split pattern and byte alphabet, no\n"
    "normalisation) on the sentences of the files (read as below): ids <s> 0, </s> 1, <pad> 2, the 256 bytes,\n"
    "then the merges of the most frequent adjacent pairs; writes DIR/tokenizer.json (with\n"
    "<s> first in every encoding) and DIR/tokenizer_config.json, loaded identically by\n"
    "attnscope and Hugging Face tokenizers. Without --type, WordPiece:\n"
    "\n"
    "Trains a BERT uncased WordPiece vocabulary: lower-case + strip accents, split on\n"
    "whitespace and punctuation, then merge the most frequent adjacent pieces (\"##\" marks\n"
    "a continuation) as Hugging Face's WordPieceTrainer. Ids 0..4 are [PAD] [UNK] [CLS]\n"
    "[SEP] [MASK]; every character seen --min-char-count times (default 1) and its ##\n"
    "form follow. Files: .conllu (# text = lines), .tsv (SST-2 'sentence' column), else\n"
    "one sentence per line. --exclude drops the sentences of a TSV (e.g. SST-2 dev/test).\n"
    "--tokenizer-dir also writes vocab.txt, tokenizer_config.json and tokenizer.json there.\n";

int cmd_vocab(int argc, char **argv) {
    ta_list corpus = {0}, excl = {0};
    const char *out = NULL, *tdir = NULL, *type = "wordpiece";
    vocab_train_opts o = {.size = 0, .min_char_count = 1};
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = NULL;
        if (cli_is_help(a)) {
            fputs(VOCAB_HELP, stdout);
            goto done;
        }
        if (!(v = cli_value(argc, argv, &i, "vocab"))) {
            rc = AS_ERR_INPUT;
            break;
        }
        if (!strcmp(a, "--corpus")) {
            if (ta_list_add(&corpus, v)) rc = cli_usage_error("vocab", "too many --corpus files (at most %d)", DATA_MAX_FILES);
        } else if (!strcmp(a, "--exclude")) {
            if (ta_list_add(&excl, v)) rc = cli_usage_error("vocab", "too many --exclude files");
        } else if (!strcmp(a, "--size")) {
            if (cli_parse_int(v, 64, AS_MAX_VOCAB, &o.size))
                rc = cli_usage_error("vocab", "bad --size '%s': expected an integer in [64, %d]", v, AS_MAX_VOCAB);
        } else if (!strcmp(a, "--min-char-count")) {
            if (cli_parse_int(v, 1, 1000000000, &o.min_char_count))
                rc = cli_usage_error("vocab", "bad --min-char-count '%s'", v);
        } else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--tokenizer-dir")) tdir = v;
        else if (!strcmp(a, "--type")) {
            if (strcmp(v, "wordpiece") && strcmp(v, "bpe"))
                rc = cli_usage_error("vocab", "bad --type '%s': expected wordpiece or bpe", v);
            type = v;
        }
        else rc = cli_usage_error("vocab", "unknown option '%s'", a);
    }
    if (!rc && (!corpus.n || !o.size || !out)) rc = cli_usage_error("vocab", "--corpus, --size and --out are required");
    if (!rc) {
        as_error err = {0};
        int n = 0;
        o.exclude = excl.v;
        o.n_exclude = excl.n;
        double t0 = as_now();
        if (!strcmp(type, "bpe")) {
            if (bpe_vocab_train(corpus.v, corpus.n, excl.v, excl.n, o.size, out, &n, &err)) rc = cli_fail(&err);
            else printf("wrote %d tokens to %s/tokenizer.json in %.1fs\n", n, out, as_now() - t0);
        } else if (vocab_train_run(corpus.v, corpus.n, &o, out, &n, &err) ||
            (tdir && vocab_train_write_tokenizer(out, tdir, 512, &err)))
            rc = cli_fail(&err);
        else
            printf("wrote %d tokens to %s in %.1fs\n", n, out, as_now() - t0);
    }
done:
    ta_list_free(&corpus);
    ta_list_free(&excl);
    return rc;
}
