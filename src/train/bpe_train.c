/* bpe_train.c — a byte-level BPE vocabulary (Sennrich et al. 2016; GPT-2's byte-level
 * variant, Radford et al. 2019) trained on text files and written as a Hugging Face
 * tokenizer.json that attnscope and Hugging Face `tokenizers` load identically: ByteLevel
 * pre-tokenizer (GPT-2's split pattern, no prefix space), a BPE model with its vocabulary
 * and merges, ByteLevel decoder, and a template that puts <s> first.
 *
 * Training: each sentence of the corpus files (read and held-out filtered as data.c reads
 * corpora: text lines, CoNLL-U "# text", SST-2 TSV) is split by the pattern; equal pieces are counted once
 * with their frequency; every piece starts as its bytes (the 256 byte symbols always in
 * the vocabulary); then, until the vocabulary has `size` entries or no pair occurs twice,
 * the most frequent adjacent pair (ties: the smaller pair of ids) is merged everywhere,
 * pair counts updated where the merge happened. Ids: <s> 0, </s> 1, <pad> 2, the 256 bytes
 * in byte order, then the merges in the order they were made. Deterministic.
 * What it does not: normalisation, a word-boundary prefix, limits on merges across scripts.
 */
#include "attnscope/train.h"
#include "tokenize/bpe.h"
#include "train/trainer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <errno.h>
#include <jansson.h>
#include <pcre2.h>
#include <string.h>
#include <sys/stat.h>

#define BT_N_SPECIAL 3
static const char *const BT_SPECIAL[BT_N_SPECIAL] = {"<s>", "</s>", "<pad>"};

/* ---- a counted set of pieces ---- */

typedef struct {
    char **key;      /* (cap) the piece's bytes, NUL-terminated, or NULL */
    int64_t *count;  /* (cap) */
    size_t cap, n;
} bt_words;

static uint64_t bt_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int bt_words_add(bt_words *w, const char *s, size_t n) {
    if (2 * (w->n + 1) > w->cap) { /* grow to keep the load under 1/2 */
        size_t nc = w->cap ? 2 * w->cap : 1 << 12;
        bt_words g = {as_calloc(nc, sizeof(char *)), as_calloc(nc, sizeof(int64_t)), nc, 0};
        if (!g.key || !g.count) {
            free(g.key);
            free(g.count);
            return -1;
        }
        for (size_t i = 0; i < w->cap; i++)
            if (w->key[i]) {
                size_t j = bt_hash(w->key[i], strlen(w->key[i])) & (nc - 1);
                while (g.key[j]) j = (j + 1) & (nc - 1);
                g.key[j] = w->key[i], g.count[j] = w->count[i], g.n++;
            }
        free(w->key);
        free(w->count);
        *w = g;
    }
    size_t j = bt_hash(s, n) & (w->cap - 1);
    while (w->key[j] && (strlen(w->key[j]) != n || memcmp(w->key[j], s, n))) j = (j + 1) & (w->cap - 1);
    if (!w->key[j]) {
        if (!(w->key[j] = as_malloc(n + 1))) return -1;
        memcpy(w->key[j], s, n);
        w->key[j][n] = 0;
        w->n++;
    }
    w->count[j]++;
    return 0;
}

/* ---- pair counts: (a, b) -> count, open addressing ---- */

typedef struct {
    uint64_t *key; /* a << 32 | b, UINT64_MAX = empty */
    int64_t *val;
    size_t cap, n;
} bt_pairs;

static size_t bt_slot(const bt_pairs *p, uint64_t k) {
    size_t j = (size_t)((k * 0x9e3779b97f4a7c15ull) >> 20) & (p->cap - 1);
    while (p->key[j] != UINT64_MAX && p->key[j] != k) j = (j + 1) & (p->cap - 1);
    return j;
}

static int bt_pairs_add(bt_pairs *p, int32_t a, int32_t b, int64_t d) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    if (2 * (p->n + 1) > p->cap) {
        size_t nc = p->cap ? 2 * p->cap : 1 << 14;
        bt_pairs g = {as_malloc_array(nc, sizeof(uint64_t)), as_calloc(nc, sizeof(int64_t)), nc, 0};
        if (!g.key || !g.val) {
            free(g.key);
            free(g.val);
            return -1;
        }
        memset(g.key, 0xff, nc * sizeof(uint64_t));
        for (size_t i = 0; i < p->cap; i++)
            if (p->key[i] != UINT64_MAX) {
                size_t j = bt_slot(&g, p->key[i]);
                g.key[j] = p->key[i], g.val[j] = p->val[i], g.n++;
            }
        free(p->key);
        free(p->val);
        *p = g;
    }
    size_t j = bt_slot(p, k);
    if (p->key[j] == UINT64_MAX) p->key[j] = k, p->n++;
    p->val[j] += d;
    return 0;
}

/* ---- training ---- */

typedef struct {
    int32_t *sym;     /* all words' symbols, word i at off[i], len[i] of them */
    size_t *off;
    int *len;
    int64_t *count;   /* (n) */
    size_t n;
    char **str;       /* (n_sym) each symbol's bytes */
    int32_t (*merge)[2]; /* (n_sym - 256) the pair each merged symbol came from */
    int n_sym;
} bt_state;

/* Splits each sentence of the corpus with the pattern and counts the pieces. */
static as_status bt_count(const data_text *txt, bt_words *w, as_error *err) {
    int ec = 0;
    PCRE2_SIZE eo = 0;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)TOK_GPT2_PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo,
                                   NULL);
    pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
    as_status s = AS_OK;
    if (!re || !md) {
        s = as_err_set(err, AS_ERR_INTERNAL, "bpe vocabulary: cannot compile the split pattern");
        goto cleanup;
    }
    for (int i = 0; i < txt->n && !s; i++) {
        char *text = as_utf8_clean(txt->text[i]); /* PCRE2_UTF needs valid UTF-8: U+FFFD for bad bytes */
        if (!text) {
            s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            break;
        }
        size_t len = strlen(text), at = 0;
        while (at < len && !s) {
            int rc = pcre2_match(re, (PCRE2_SPTR)text, len, at, 0, md, NULL);
            if (rc < 0) break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            if (ov[1] == ov[0]) { /* an empty match: step one character */
                at = ov[1] + 1;
                continue;
            }
            if (bt_words_add(w, text + ov[0], ov[1] - ov[0])) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            at = ov[1];
        }
        free(text);
    }
cleanup:
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return s;
}

static void bt_state_free(bt_state *t) {
    free(t->sym);
    free(t->off);
    free(t->len);
    free(t->count);
    for (int i = 0; i < t->n_sym; i++) free(t->str[i]);
    free(t->str);
    free(t->merge);
    memset(t, 0, sizeof *t);
}

/* Symbols of every counted piece (its bytes), the 256 byte symbols, and the pair counts. */
static as_status bt_init(const bt_words *w, int size, bt_state *t, bt_pairs *pc, as_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < w->cap; i++)
        if (w->key[i]) total += strlen(w->key[i]);
    int max_sym = size - BT_N_SPECIAL;
    t->sym = as_malloc_array(total ? total : 1, sizeof(int32_t));
    t->off = as_malloc_array(w->n ? w->n : 1, sizeof(size_t));
    t->len = as_malloc_array(w->n ? w->n : 1, sizeof(int));
    t->count = as_malloc_array(w->n ? w->n : 1, sizeof(int64_t));
    t->str = as_calloc((size_t)max_sym, sizeof(char *));
    t->merge = as_calloc((size_t)max_sym, sizeof *t->merge);
    if (!t->sym || !t->off || !t->len || !t->count || !t->str || !t->merge)
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int b = 0; b < 256; b++) {
        if (!(t->str[b] = as_malloc(2))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        t->str[b][0] = (char)b, t->str[b][1] = 0;
        t->n_sym++;
    }
    size_t at = 0;
    for (size_t i = 0; i < w->cap; i++) { /* in table order: deterministic for a given corpus */
        if (!w->key[i]) continue;
        size_t n = strlen(w->key[i]);
        t->off[t->n] = at;
        t->len[t->n] = (int)n;
        t->count[t->n] = w->count[i];
        for (size_t k = 0; k < n; k++) t->sym[at + k] = (unsigned char)w->key[i][k];
        for (size_t k = 0; k + 1 < n; k++)
            if (bt_pairs_add(pc, t->sym[at + k], t->sym[at + k + 1], w->count[i]))
                return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        at += n;
        t->n++;
    }
    return AS_OK;
}

/* Merges pairs until the vocabulary holds `size` entries or no pair occurs twice. */
static as_status bt_merge(bt_state *t, bt_pairs *pc, int size, as_error *err) {
    while (t->n_sym < size - BT_N_SPECIAL) {
        size_t best = SIZE_MAX;
        for (size_t j = 0; j < pc->cap; j++)
            if (pc->key[j] != UINT64_MAX && pc->val[j] >= 2 &&
                (best == SIZE_MAX || pc->val[j] > pc->val[best] || (pc->val[j] == pc->val[best] && pc->key[j] < pc->key[best])))
                best = j;
        if (best == SIZE_MAX) break;
        int32_t a = (int32_t)(pc->key[best] >> 32), b = (int32_t)(pc->key[best] & 0xffffffffu), z = t->n_sym;
        size_t la = strlen(t->str[a]), lb = strlen(t->str[b]);
        if (!(t->str[z] = as_malloc(la + lb + 1))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        memcpy(t->str[z], t->str[a], la);
        memcpy(t->str[z] + la, t->str[b], lb + 1);
        t->merge[z][0] = a, t->merge[z][1] = b;
        t->n_sym++;
        for (size_t wi = 0; wi < t->n; wi++) { /* replace (a, b) left to right in every piece */
            int32_t *s = t->sym + t->off[wi];
            int n = t->len[wi];
            int64_t c = t->count[wi];
            for (int i = 0; i + 1 < n; i++) {
                if (s[i] != a || s[i + 1] != b) continue;
                int fail = 0;
                if (i > 0) fail |= bt_pairs_add(pc, s[i - 1], a, -c) | bt_pairs_add(pc, s[i - 1], z, c);
                if (i + 2 < n) fail |= bt_pairs_add(pc, b, s[i + 2], -c) | bt_pairs_add(pc, z, s[i + 2], c);
                fail |= bt_pairs_add(pc, a, b, -c);
                if (fail) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
                s[i] = z;
                memmove(s + i + 1, s + i + 2, (size_t)(n - i - 2) * sizeof(int32_t));
                n--;
            }
            t->len[wi] = n;
        }
    }
    return AS_OK;
}

/* A symbol's bytes in the byte-level alphabet (GPT-2's bytes_to_unicode). Caller frees. */
static char *bt_visible(const char *bytes) {
    size_t n = strlen(bytes);
    char *out = as_malloc(2 * n + 1), *p = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        const char *c = tok_bpe_byte_str((uint8_t)bytes[i]);
        size_t k = strlen(c);
        memcpy(p, c, k);
        p += k;
    }
    *p = 0;
    return out;
}

static json_t *bt_special(const char *tok, int id) {
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", tok, "single_word", 0, "lstrip", 0,
                     "rstrip", 0, "normalized", 0, "special", 1);
}

/* tokenizer.json and tokenizer_config.json of the trained vocabulary into dir. */
static as_status bt_write(const bt_state *t, const char *dir, as_error *err) {
    as_status s = AS_OK;
    json_t *root = json_object(), *vocab = json_object(), *merges = json_array(), *added = json_array();
    char path[4096];
    if (!root || !vocab || !merges || !added) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < BT_N_SPECIAL; i++) {
        json_object_set_new(vocab, BT_SPECIAL[i], json_integer(i));
        json_array_append_new(added, bt_special(BT_SPECIAL[i], i));
    }
    for (int z = 0; z < t->n_sym; z++) {
        char *v = bt_visible(t->str[z]);
        if (!v) {
            s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        json_object_set_new(vocab, v, json_integer(BT_N_SPECIAL + z));
        if (z >= 256) {
            char *l = bt_visible(t->str[t->merge[z][0]]), *r = bt_visible(t->str[t->merge[z][1]]);
            if (l && r) json_array_append_new(merges, json_pack("[s, s]", l, r));
            free(l);
            free(r);
        }
        free(v);
    }
    json_t *tpl_s = json_pack("[{s:{s:s, s:i}}, {s:{s:s, s:i}}]", "SpecialToken", "id", "<s>", "type_id", 0, "Sequence",
                              "id", "A", "type_id", 0);
    json_t *tpl_p = json_pack("[{s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}, {s:{s:s, s:i}}]", "SpecialToken", "id",
                              "<s>", "type_id", 0, "Sequence", "id", "A", "type_id", 0, "SpecialToken", "id", "<s>",
                              "type_id", 1, "Sequence", "id", "B", "type_id", 1);
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "truncation", json_null());
    json_object_set_new(root, "padding", json_null());
    json_object_set_new(root, "added_tokens", added);
    added = NULL;
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "pre_tokenizer", json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space",
                                                         0, "trim_offsets", 1, "use_regex", 1));
    json_object_set_new(root, "post_processor",
                        json_pack("{s:s, s:o, s:o, s:{s:{s:s, s:[i], s:[s]}}}", "type", "TemplateProcessing", "single",
                                  tpl_s, "pair", tpl_p, "special_tokens", "<s>", "id", "<s>", "ids", 0, "tokens", "<s>"));
    json_object_set_new(root, "decoder", json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 1,
                                                   "trim_offsets", 1, "use_regex", 1));
    json_object_set_new(root, "model", json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE",
                                                 "dropout", "unk_token", "continuing_subword_prefix",
                                                 "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                                                 "ignore_merges", 0, "vocab", vocab, "merges", merges));
    vocab = merges = NULL;
    if ((s = as_path_join(path, sizeof path, dir, "tokenizer.json", err))) goto cleanup;
    if (json_dump_file(root, path, JSON_INDENT(1)) != 0) {
        s = as_err_set(err, AS_ERR_INTERNAL, "%s: cannot write", path);
        goto cleanup;
    }
    json_t *cfg = json_pack("{s:s, s:s, s:s, s:b, s:b, s:s}", "bos_token", "<s>", "eos_token", "</s>", "pad_token",
                            "<pad>", "add_bos_token", 1, "add_eos_token", 0, "tokenizer_class", "PreTrainedTokenizerFast");
    if ((s = as_path_join(path, sizeof path, dir, "tokenizer_config.json", err))) {
        json_decref(cfg);
        goto cleanup;
    }
    if (!cfg || json_dump_file(cfg, path, JSON_INDENT(2)) != 0) s = as_err_set(err, AS_ERR_INTERNAL, "%s: cannot write", path);
    json_decref(cfg);
cleanup:
    json_decref(root);
    json_decref(vocab);
    json_decref(merges);
    json_decref(added);
    return s;
}

as_status bpe_vocab_train(const char *const *files, int n_files, const char *const *exclude, int n_exclude, int size,
                          const char *dir, int *n_out, as_error *err) {
    if (size < 256 + BT_N_SPECIAL || size > AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "a byte-level BPE vocabulary needs %d to %d entries, not %d",
                          256 + BT_N_SPECIAL, AS_MAX_VOCAB, size);
    bt_words w = {0};
    bt_pairs pc = {0};
    bt_state t = {0};
    data_text txt = {0};
    int dropped = 0;
    as_status s = data_read_corpus(files, n_files, exclude, n_exclude, &txt, &dropped, err);
    if (!s) s = bt_count(&txt, &w, err);
    data_text_free(&txt);
    if (!s && !w.n) s = as_err_set(err, AS_ERR_INPUT, "the corpus holds no text");
    if (!s) s = bt_init(&w, size, &t, &pc, err);
    if (!s) s = bt_merge(&t, &pc, size, err);
    if (!s && mkdir(dir, 0755) && errno != EEXIST) s = as_err_set(err, AS_ERR_INPUT, "%s: cannot create the folder", dir);
    if (!s) s = bt_write(&t, dir, err);
    if (!s && n_out) *n_out = BT_N_SPECIAL + t.n_sym;
    for (size_t i = 0; i < w.cap; i++) free(w.key ? w.key[i] : NULL);
    free(w.key);
    free(w.count);
    free(pc.key);
    free(pc.val);
    bt_state_free(&t);
    return s;
}
