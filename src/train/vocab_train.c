/* vocab_train.c — trains a WordPiece vocabulary the way Hugging Face's
 * WordPieceTrainer does (tokenizers/src/models/wordpiece/trainer.rs delegates to the
 * BPE trainer with a "##" continuing-subword prefix): words are counted after the
 * BERT uncased normaliser and pre-tokenizer; each word starts as its characters (the
 * first plain, the others "##c"); the most frequent adjacent pair of symbols is
 * merged (a + b without b's "##") until the vocabulary is full (Sennrich et al. 2016,
 * sec. 3.2). Ties break on the smaller pair of symbol ids, so the output is a pure
 * function of the corpus. Also writes the tokenizer files of a vocabulary.
 * What it does not: SentencePiece / unigram vocabularies, cased vocabularies.
 */
#include "train/trainer.h"
#include "tokenize/wordpiece.h"

#include <errno.h>
#include <jansson.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#define VOCAB_TRAIN_MIN_SIZE 64
#define VOCAB_TRAIN_MAX_WORD_CHARS 100

/* ---- a string -> index map (FNV-1a, open addressing) ---- */

typedef struct {
    char **keys;   /* (cap) owned, NULL = empty */
    int32_t *val;  /* (cap) */
    size_t cap, n;
} str_map;

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static void smap_free(str_map *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->val);
    memset(m, 0, sizeof *m);
}

/* Slot of key (empty slot when absent). */
static size_t smap_slot(const str_map *m, const char *s, size_t n) {
    size_t i = fnv(s, n) & (m->cap - 1);
    while (m->keys[i] && (strncmp(m->keys[i], s, n) || m->keys[i][n])) i = (i + 1) & (m->cap - 1);
    return i;
}

static int smap_grow(str_map *m) {
    str_map g = {as_calloc(m->cap ? m->cap * 2 : 1024, sizeof(char *)), NULL, m->cap ? m->cap * 2 : 1024, m->n};
    g.val = as_calloc(g.cap, sizeof(int32_t));
    if (!g.keys || !g.val) {
        free(g.keys);
        free(g.val);
        return -1;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) {
            size_t j = smap_slot(&g, m->keys[i], strlen(m->keys[i]));
            g.keys[j] = m->keys[i];
            g.val[j] = m->val[i];
        }
    free(m->keys);
    free(m->val);
    *m = g;
    return 0;
}

/* Returns the value slot for key, inserting (value init) when absent; NULL on OOM. */
static int32_t *smap_put(str_map *m, const char *s, size_t n, int32_t init, int *added) {
    if ((m->n + 1) * 2 > m->cap && smap_grow(m)) return NULL;
    size_t i = smap_slot(m, s, n);
    *added = 0;
    if (!m->keys[i]) {
        char *k = as_malloc(n + 1);
        if (!k) return NULL;
        memcpy(k, s, n);
        k[n] = 0;
        m->keys[i] = k;
        m->val[i] = init;
        m->n++;
        *added = 1;
    }
    return &m->val[i];
}

static int32_t smap_get(const str_map *m, const char *s, size_t n) {
    if (!m->cap) return -1;
    size_t i = smap_slot(m, s, n);
    return m->keys[i] ? m->val[i] : -1;
}

/* ---- word counting ---- */

typedef struct {
    str_map words;      /* word -> index into counts */
    int64_t *counts;
    size_t n, cap;
} word_count;

static int count_word(const char *w, size_t n, void *ctx) {
    word_count *wc = ctx;
    int added;
    int32_t *v = smap_put(&wc->words, w, n, (int32_t)wc->n, &added);
    if (!v) return 1;
    if (added) {
        if (wc->n == wc->cap) {
            size_t nc = wc->cap ? wc->cap * 2 : 4096;
            int64_t *c = realloc(wc->counts, nc * sizeof *c);
            if (!c) return 1;
            wc->counts = c;
            wc->cap = nc;
        }
        wc->counts[wc->n++] = 0;
    }
    wc->counts[*v]++;
    return 0;
}

static tok_wordpiece_opts bert_uncased_opts(void) {
    tok_wordpiece_opts o = {1, 1, 1, 1, "##", VOCAB_TRAIN_MAX_WORD_CHARS, VOCAB_TRAIN_UNK};
    return o;
}

/* ---- pair counts + lazy max-heap ---- */

typedef struct {
    uint64_t *key;  /* (cap) a << 32 | b, UINT64_MAX = empty */
    int64_t *cnt;
    size_t cap, n;
} pair_map;

static size_t pm_slot(const pair_map *p, uint64_t k) {
    size_t i = (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & (p->cap - 1);
    while (p->key[i] != UINT64_MAX && p->key[i] != k) i = (i + 1) & (p->cap - 1);
    return i;
}

static int pm_grow(pair_map *p) {
    pair_map g = {as_malloc_array(p->cap ? p->cap * 2 : 65536, sizeof(uint64_t)), NULL,
                  p->cap ? p->cap * 2 : 65536, p->n};
    g.cnt = as_calloc(g.cap, sizeof(int64_t));
    if (!g.key || !g.cnt) {
        free(g.key);
        free(g.cnt);
        return -1;
    }
    memset(g.key, 0xff, g.cap * sizeof(uint64_t));
    for (size_t i = 0; i < p->cap; i++)
        if (p->key[i] != UINT64_MAX) {
            size_t j = pm_slot(&g, p->key[i]);
            g.key[j] = p->key[i];
            g.cnt[j] = p->cnt[i];
        }
    free(p->key);
    free(p->cnt);
    *p = g;
    return 0;
}

static int64_t *pm_ref(pair_map *p, uint64_t k) {
    if ((p->n + 1) * 2 > p->cap && pm_grow(p)) return NULL;
    size_t i = pm_slot(p, k);
    if (p->key[i] == UINT64_MAX) {
        p->key[i] = k;
        p->cnt[i] = 0;
        p->n++;
    }
    return &p->cnt[i];
}

typedef struct {
    int64_t c;
    uint64_t k;
} heap_e;

typedef struct {
    heap_e *a;
    size_t n, cap;
} heap;

/* e outranks f: larger count, then smaller pair key. */
static int outranks(heap_e e, heap_e f) { return e.c > f.c || (e.c == f.c && e.k < f.k); }

static int heap_push(heap *h, int64_t c, uint64_t k) {
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 65536;
        heap_e *na = realloc(h->a, nc * sizeof *na);
        if (!na) return -1;
        h->a = na;
        h->cap = nc;
    }
    size_t i = h->n++;
    heap_e e = {c, k};
    while (i > 0 && outranks(e, h->a[(i - 1) / 2])) {
        h->a[i] = h->a[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->a[i] = e;
    return 0;
}

static heap_e heap_pop(heap *h) {
    heap_e top = h->a[0], last = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, b = i;
        heap_e be = last;
        if (l < h->n && outranks(h->a[l], be)) {
            b = l;
            be = h->a[l];
        }
        if (r < h->n && outranks(h->a[r], be)) b = r;
        if (b == i) break;
        h->a[i] = h->a[b];
        i = b;
    }
    if (h->n) h->a[i] = last;
    return top;
}

/* ---- the trainer ---- */

typedef struct {
    int32_t *sym;  /* (n) symbol ids */
    int n;
    int64_t f;
} tword;

typedef struct {
    str_map ids;   /* piece -> id */
    char **piece;  /* (n) owned by ids' keys: borrowed */
    int n, cap;
} pieces;

static int32_t piece_add(pieces *p, const char *s, size_t n) {
    int added;
    int32_t *v = smap_put(&p->ids, s, n, p->n, &added);
    if (!v) return -1;
    if (!added) return *v;
    if (p->n == p->cap) {
        int nc = p->cap ? p->cap * 2 : 1024;
        char **np = realloc(p->piece, (size_t)nc * sizeof *np);
        if (!np) return -1;
        p->piece = np;
        p->cap = nc;
    }
    size_t slot = smap_slot(&p->ids, s, n);
    p->piece[p->n] = p->ids.keys[slot];
    return p->n++;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Adds f * (pairs of w) to the counts; pushes the changed pairs when f > 0. */
static int word_pairs(pair_map *pm, heap *h, const tword *w, int64_t f) {
    for (int i = 0; i + 1 < w->n; i++) {
        uint64_t k = (uint64_t)(uint32_t)w->sym[i] << 32 | (uint32_t)w->sym[i + 1];
        int64_t *c = pm_ref(pm, k);
        if (!c) return -1;
        *c += f;
        if (f > 0 && heap_push(h, *c, k)) return -1;
    }
    return 0;
}

as_status vocab_train_run(const char *const *files, int n_files, const vocab_train_opts *o, const char *out_path, int *n_out,
                    as_error *err) {
    as_status rc = AS_OK;
    data_text txt = {0};
    word_count wc = {0};
    pieces P = {0};
    pair_map pm = {0};
    heap h = {0};
    tword *W = NULL;
    size_t nW = 0;
    int32_t *alpha = NULL;
    int64_t *acount = NULL;
    int n_alpha = 0;
    FILE *f = NULL;
    char *buf = NULL;
    str_map cmap = {0};
    *n_out = 0;
    if (o->size < VOCAB_TRAIN_MIN_SIZE || o->size > AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "vocabulary size %d is outside [%d, %d]", o->size, VOCAB_TRAIN_MIN_SIZE,
                          AS_MAX_VOCAB);
    int drop = 0;
    if ((rc = data_read_corpus(files, n_files, o->exclude, o->n_exclude, &txt, &drop, err))) goto cleanup;
    tok_wordpiece_opts wo = bert_uncased_opts();
    for (int i = 0; i < txt.n; i++)
        if ((rc = tok_wordpiece_words(&wo, txt.text[i], strlen(txt.text[i]), count_word, &wc, err))) goto cleanup;
    if (!wc.n) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: the corpus has no words", files[0]);
        goto cleanup;
    }
    /* alphabet: code points weighted by word count */
    {
        size_t acap = 0;
        for (size_t s = 0; s < wc.words.cap; s++) {
            const char *wd = wc.words.keys[s];
            if (!wd) continue;
            int64_t cnt = wc.counts[wc.words.val[s]];
            size_t len = strlen(wd), i = 0;
            while (i < len) {
                int32_t cp;
                utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)wd + i, (utf8proc_ssize_t)(len - i), &cp);
                if (k <= 0) k = 1;
                int added;
                int32_t *v = smap_put(&cmap, wd + i, (size_t)k, n_alpha, &added);
                if (!v) goto oom;
                if (added) {
                    if ((size_t)n_alpha == acap) {
                        acap = acap ? acap * 2 : 256;
                        int32_t *na = realloc(alpha, acap * sizeof *na);
                        int64_t *nc = realloc(acount, acap * sizeof *nc);
                        if (na) alpha = na;
                        if (nc) acount = nc;
                        if (!na || !nc) goto oom;
                    }
                    alpha[n_alpha] = cp;
                    acount[n_alpha++] = 0;
                }
                acount[*v] += cnt;
                i += (size_t)k;
            }
        }
    }
    /* kept characters, sorted by code point */
    int32_t *keep = as_malloc_array((size_t)n_alpha + 1, sizeof(int32_t));
    if (!keep) {
        smap_free(&cmap);
        goto oom;
    }
    int n_keep = 0;
    int minc = o->min_char_count > 0 ? o->min_char_count : 1;
    for (int i = 0; i < n_alpha; i++)
        if (acount[i] >= minc) keep[n_keep++] = alpha[i];
    smap_free(&cmap);
    qsort(keep, (size_t)n_keep, sizeof *keep, cmp_i32);
    if (VOCAB_TRAIN_N_SPECIAL + 2 * n_keep > o->size) {
        free(keep);
        rc = as_err_set(err, AS_ERR_INPUT,
                        "vocabulary size %d is smaller than the %d specials + 2 x %d characters need (raise --size or "
                        "--min-char-count)",
                        o->size, VOCAB_TRAIN_N_SPECIAL, n_keep);
        goto cleanup;
    }
    static const char *const specials[VOCAB_TRAIN_N_SPECIAL] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 0; i < VOCAB_TRAIN_N_SPECIAL; i++)
        if (piece_add(&P, specials[i], strlen(specials[i])) < 0) goto oom_keep;
    char cb[8];
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n_keep; i++) {
            int k = 0;
            if (pass) cb[k++] = '#', cb[k++] = '#';
            k += (int)utf8proc_encode_char(keep[i], (utf8proc_uint8_t *)cb + k);
            if (piece_add(&P, cb, (size_t)k) < 0) goto oom_keep;
        }
    free(keep);
    keep = NULL;
    /* words as symbol sequences (words with a dropped character are left out) */
    W = as_calloc(wc.n, sizeof *W);
    if (!W) goto oom;
    for (size_t s = 0; s < wc.words.cap; s++) {
        const char *wd = wc.words.keys[s];
        if (!wd) continue;
        size_t len = strlen(wd), i = 0;
        int32_t *sym = as_malloc_array(len + 1, sizeof(int32_t));
        if (!sym) goto oom;
        int n = 0, ok = 1;
        while (i < len && ok) {
            int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)wd + i, (utf8proc_ssize_t)(len - i), &cp);
            if (k <= 0) k = 1;
            int q = 0;
            if (i > 0) cb[q++] = '#', cb[q++] = '#';
            memcpy(cb + q, wd + i, (size_t)k);
            int32_t id = smap_get(&P.ids, cb, (size_t)q + (size_t)k);
            if (id < 0) ok = 0;
            sym[n++] = id;
            i += (size_t)k;
        }
        if (!ok || n > VOCAB_TRAIN_MAX_WORD_CHARS) {
            free(sym);
            continue;
        }
        W[nW].sym = sym;
        W[nW].n = n;
        W[nW].f = wc.counts[wc.words.val[s]];
        nW++;
    }
    /* initial pair counts */
    for (size_t i = 0; i < nW; i++)
        if (word_pairs(&pm, &h, &W[i], W[i].f)) goto oom;
    for (size_t i = 0; i < pm.cap; i++)
        if (pm.key[i] != UINT64_MAX && pm.cnt[i] > 0 && heap_push(&h, pm.cnt[i], pm.key[i])) goto oom;
    buf = as_malloc(8 * 1024);
    if (!buf) goto oom;
    while (P.n < o->size && h.n) {
        heap_e e = heap_pop(&h);
        int64_t *cur = pm_ref(&pm, e.k);
        if (!cur) goto oom;
        if (*cur != e.c) {
            if (*cur > 0 && heap_push(&h, *cur, e.k)) goto oom;
            continue;
        }
        if (e.c <= 0) break;
        int32_t a = (int32_t)(e.k >> 32), b = (int32_t)(e.k & 0xffffffffu);
        const char *sa = P.piece[a], *sb = P.piece[b];
        if (sb[0] == '#' && sb[1] == '#') sb += 2;
        size_t la = strlen(sa), lb = strlen(sb);
        if (la + lb >= 8 * 1024) {
            *cur = 0;
            continue;
        }
        memcpy(buf, sa, la);
        memcpy(buf + la, sb, lb);
        int32_t nid = piece_add(&P, buf, la + lb);
        if (nid < 0) goto oom;
        for (size_t i = 0; i < nW; i++) {
            tword *w = &W[i];
            int has = 0;
            for (int j = 0; j + 1 < w->n && !has; j++) has = w->sym[j] == a && w->sym[j + 1] == b;
            if (!has) continue;
            if (word_pairs(&pm, &h, w, -w->f)) goto oom;
            int n = 0;
            for (int j = 0; j < w->n; j++) {
                if (j + 1 < w->n && w->sym[j] == a && w->sym[j + 1] == b) {
                    w->sym[n++] = nid;
                    j++;
                } else {
                    w->sym[n++] = w->sym[j];
                }
            }
            w->n = n;
            if (word_pairs(&pm, &h, w, w->f)) goto oom;
        }
    }
    f = fopen(out_path, "w");
    if (!f) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: cannot write: %s", out_path, strerror(errno));
        goto cleanup;
    }
    for (int i = 0; i < P.n; i++) fprintf(f, "%s\n", P.piece[i]);
    if (fclose(f)) {
        f = NULL;
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: write failed", out_path);
        goto cleanup;
    }
    f = NULL;
    *n_out = P.n;
    goto cleanup;
oom_keep:
    free(keep);
oom:
    rc = as_err_set(err, AS_ERR_INTERNAL, "vocabulary trainer: out of memory");
cleanup:
    if (f) fclose(f);
    free(buf);
    for (size_t i = 0; i < nW; i++) free(W[i].sym);
    free(W);
    free(pm.key);
    free(pm.cnt);
    free(h.a);
    free(P.piece);
    smap_free(&P.ids);
    smap_free(&wc.words);
    smap_free(&cmap);
    free(wc.counts);
    free(alpha);
    free(acount);
    data_text_free(&txt);
    return rc;
}

/* ---- tokenizer files ---- */

static as_status write_json(json_t *j, const char *dir, const char *name, as_error *err) {
    char path[4096];
    as_status rc = as_path_join(path, sizeof path, dir, name, err);
    if (rc) return rc;
    if (json_dump_file(j, path, JSON_INDENT(1) | JSON_PRESERVE_ORDER))
        return as_err_set(err, AS_ERR_INTERNAL, "%s: cannot write", path);
    return AS_OK;
}

static json_t *special_tok(const char *name, int type_id) {
    return json_pack("{s:{s:s,s:i}}", "SpecialToken", "id", name, "type_id", type_id);
}

as_status vocab_train_write_tokenizer(const char *vocab_path, const char *dir, int max_len, as_error *err) {
    char *buf = NULL;
    size_t len = 0;
    as_status rc = as_read_file(vocab_path, (size_t)64 << 20, &buf, &len, err);
    if (rc) return rc;
    json_t *tj = NULL, *cfg = NULL;
    char path[4096];
    if (mkdir(dir, 0755) && errno != EEXIST) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: cannot create: %s", dir, strerror(errno));
        goto cleanup;
    }
    if ((rc = as_path_join(path, sizeof path, dir, "vocab.txt", err))) goto cleanup;
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(buf, 1, len, f) != len) {
        if (f) fclose(f);
        rc = as_err_set(err, AS_ERR_INPUT, "%s: cannot write", path);
        goto cleanup;
    }
    if (fclose(f)) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: write failed", path);
        goto cleanup;
    }
    cfg = json_pack("{s:b,s:i,s:s,s:s,s:s,s:s,s:s,s:s}", "do_lower_case", 1, "model_max_length", max_len,
                    "tokenizer_class", "BertTokenizer", "unk_token", "[UNK]", "sep_token", "[SEP]", "pad_token",
                    "[PAD]", "cls_token", "[CLS]", "mask_token", "[MASK]");
    if (!cfg || (rc = write_json(cfg, dir, "tokenizer_config.json", err))) goto cleanup_oom;
    /* tokenizer.json */
    json_t *vocab = json_object(), *added = json_array();
    tj = json_object();
    if (!vocab || !added || !tj) {
        json_decref(vocab);
        json_decref(added);
        goto cleanup_oom;
    }
    int id = 0;
    for (char *p = buf; p < buf + len; id++) {
        char *nl = memchr(p, '\n', (size_t)(buf + len - p));
        char *e = nl ? nl : buf + len;
        if (e > p && e[-1] == '\r') e[-1] = 0;
        *e = 0;
        json_object_set_new(vocab, p, json_integer(id));
        if (id < VOCAB_TRAIN_N_SPECIAL)
            json_array_append_new(added, json_pack("{s:i,s:s,s:b,s:b,s:b,s:b,s:b}", "id", id, "content", p,
                                                   "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0,
                                                   "special", 1));
        p = e + 1;
    }
    json_object_set_new(tj, "version", json_string("1.0"));
    json_object_set_new(tj, "truncation", json_null());
    json_object_set_new(tj, "padding", json_null());
    json_object_set_new(tj, "added_tokens", added);
    json_object_set_new(tj, "normalizer", json_pack("{s:s,s:b,s:b,s:n,s:b}", "type", "BertNormalizer", "clean_text", 1,
                                                   "handle_chinese_chars", 1, "strip_accents", "lowercase", 1));
    json_object_set_new(tj, "pre_tokenizer", json_pack("{s:s}", "type", "BertPreTokenizer"));
    json_t *single = json_pack("[o,{s:{s:s,s:i}},o]", special_tok("[CLS]", 0), "Sequence", "id", "A", "type_id", 0,
                               special_tok("[SEP]", 0));
    json_t *pair = json_pack("[o,{s:{s:s,s:i}},o,{s:{s:s,s:i}},o]", special_tok("[CLS]", 0), "Sequence", "id", "A",
                             "type_id", 0, special_tok("[SEP]", 0), "Sequence", "id", "B", "type_id", 1,
                             special_tok("[SEP]", 1));
    json_t *sp = json_pack("{s:{s:s,s:[i],s:[s]},s:{s:s,s:[i],s:[s]}}", "[CLS]", "id", "[CLS]", "ids", VOCAB_TRAIN_CLS,
                           "tokens", "[CLS]", "[SEP]", "id", "[SEP]", "ids", VOCAB_TRAIN_SEP, "tokens", "[SEP]");
    json_object_set_new(tj, "post_processor",
                        json_pack("{s:s,s:o,s:o,s:o}", "type", "TemplateProcessing", "single", single, "pair", pair,
                                  "special_tokens", sp));
    json_object_set_new(tj, "decoder", json_pack("{s:s,s:s,s:b}", "type", "WordPiece", "prefix", "##", "cleanup", 1));
    json_object_set_new(tj, "model", json_pack("{s:s,s:s,s:s,s:i,s:o}", "type", "WordPiece", "unk_token", "[UNK]",
                                               "continuing_subword_prefix", "##", "max_input_chars_per_word",
                                               VOCAB_TRAIN_MAX_WORD_CHARS, "vocab", vocab));
    rc = write_json(tj, dir, "tokenizer.json", err);
    goto cleanup;
cleanup_oom:
    if (!rc) rc = as_err_set(err, AS_ERR_INTERNAL, "tokenizer files: out of memory");
cleanup:
    json_decref(tj);
    json_decref(cfg);
    free(buf);
    return rc;
}
