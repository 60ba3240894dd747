/* data.c — training data: reading sentences from text / CoNLL-U / SST-2 TSV files,
 * dropping held-out sentences (SST-2 dev/test) by a normalised key, WordPiece
 * tokenization with a vocab.txt, and masked-LM batches of sentence pairs (BERT,
 * Devlin et al. 2019, sec. 3.1 and appendix A.1), plus the splitmix64 RNG.
 * What it does not: classification batches (finetune.c), model code.
 */
#include "train/trainer.h"
#include "tokenize/vocab.h"
#include "tokenize/wordpiece.h"

#include <ctype.h>
#include <string.h>
#include <utf8proc.h>

/* ---- RNG: splitmix64 (Steele et al. 2014) ---- */

train_rng train_rng_seeded(uint64_t seed, uint64_t stream) {
    train_rng r = {seed * 0x9E3779B97F4A7C15ull ^ (stream + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull};
    train_rng_next(&r);
    return r;
}

uint64_t train_rng_next(train_rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double train_rng_uniform(train_rng *r) { return (double)(train_rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

uint32_t train_rng_below(train_rng *r, uint32_t n) { return (uint32_t)(((train_rng_next(r) >> 32) * (uint64_t)n) >> 32); }

/* ---- sentences ---- */

void data_text_free(data_text *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) free(t->text[i]);
    free(t->text);
    free(t->doc);
    memset(t, 0, sizeof *t);
}

static int text_push(data_text *t, int *cap, const char *s, size_t n, int doc) {
    while (n && isspace((unsigned char)s[n - 1])) n--;
    while (n && isspace((unsigned char)*s)) s++, n--;
    if (!n) return 0;
    if (t->n == *cap) {
        int nc = *cap ? *cap * 2 : 1024;
        char **nt = realloc(t->text, (size_t)nc * sizeof *nt);
        if (nt) t->text = nt;
        int32_t *nd = realloc(t->doc, (size_t)nc * sizeof *nd);
        if (nd) t->doc = nd;
        if (!nt || !nd) return -1;
        *cap = nc;
    }
    char *c = as_malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = 0;
    t->text[t->n] = c;
    t->doc[t->n++] = doc;
    return 0;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

as_status data_read_sentences(const char *path, data_text *out, int doc_base, as_error *err) {
    char *buf = NULL;
    size_t len = 0;
    memset(out, 0, sizeof *out);
    as_status rc = as_read_file(path, DATA_MAX_FILE_BYTES, &buf, &len, err);
    if (rc) return rc;
    int kind = ends_with(path, ".conllu") ? 1 : ends_with(path, ".tsv") ? 2 : 0;
    int cap = 0, doc = doc_base, col = -1, lineno = 0, blank_run = 1;
    char *p = buf, *end = buf + len;
    while (p < end) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *e = nl ? nl : end;
        size_t n = (size_t)(e - p);
        if (n && p[n - 1] == '\r') n--;
        lineno++;
        int bad = 0;
        if (kind == 1) {
            if (n >= 9 && !strncmp(p, "# newdoc", 8)) doc++;
            else if (n >= 9 && !strncmp(p, "# text = ", 9)) bad = text_push(out, &cap, p + 9, n - 9, doc);
        } else if (kind == 2) {
            if (lineno == 1) {
                if (n >= 14 && !strncmp(p, "sentence\tlabel", 14)) col = 0;
                else if (n >= 14 && !strncmp(p, "index\tsentence", 14)) col = 1;
                else {
                    rc = as_err_set(err, AS_ERR_INPUT, "%s:1: expected a header 'sentence<TAB>label' or "
                                                       "'index<TAB>sentence'", path);
                    goto fail;
                }
            } else if (n) {
                const char *f = p, *fe = p + n;
                for (int c = 0; c < col && f < fe; c++) {
                    const char *tab = memchr(f, '\t', (size_t)(fe - f));
                    f = tab ? tab + 1 : fe;
                }
                const char *tab = memchr(f, '\t', (size_t)(fe - f));
                if (f >= fe || (col == 0 && !tab)) {
                    rc = as_err_set(err, AS_ERR_INPUT, "%s:%d: missing the sentence column", path, lineno);
                    goto fail;
                }
                bad = text_push(out, &cap, f, (size_t)((tab ? tab : fe) - f), doc);
            }
        } else {
            int blank = 1;
            for (size_t i = 0; i < n && blank; i++) blank = isspace((unsigned char)p[i]) != 0;
            if (blank) {
                if (!blank_run) doc++;
                blank_run = 1;
            } else {
                blank_run = 0;
                bad = text_push(out, &cap, p, n, doc);
            }
        }
        if (bad) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
            goto fail;
        }
        p = e + 1;
    }
    free(buf);
    if (!out->n) {
        data_text_free(out);
        return as_err_set(err, AS_ERR_INPUT, "%s: no sentences found", path);
    }
    return AS_OK;
fail:
    free(buf);
    data_text_free(out);
    return rc;
}

/* ---- held-out filter ---- */

typedef struct {
    char *buf;
    size_t n, cap;
} key_buf;

static int key_word(const char *w, size_t n, void *ctx) {
    key_buf *k = ctx;
    if ((n == 3 && (!strncmp(w, "lrb", 3) || !strncmp(w, "rrb", 3) || !strncmp(w, "lsb", 3) ||
                    !strncmp(w, "rsb", 3))))
        return 0;
    /* SST's text uses American spelling where the snippets have British: "learnt" ->
       "learned", "our" -> "or" inside words (humour, favourite; harmless on both sides) */
    if (n == 6 && !strncmp(w, "learnt", 6)) {
        w = "learned";
        n = 7;
    }
    if (k->n + n + 1 >= k->cap) {
        size_t nc = (k->n + n + 1) * 2 + 64;
        char *nb = realloc(k->buf, nc);
        if (!nb) return 1;
        k->buf = nb;
        k->cap = nc;
    }
    size_t start = k->n;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)w[i];
        if (!(isalnum(c) || c >= 0x80)) continue;
        if (c == 'u' && k->n >= start + 2 && k->buf[k->n - 1] == 'o' && i + 1 < n && w[i + 1] == 'r')
            continue;
        k->buf[k->n++] = (char)c;
    }
    return 0;
}

char *data_sentence_key(const char *s) {
    tok_wordpiece_opts o = {1, 1, 1, 1, "##", 100, 0};
    key_buf k = {as_malloc(64), 0, 64};
    if (!k.buf) return NULL;
    as_error e;
    if (tok_wordpiece_words(&o, s, strlen(s), key_word, &k, &e)) {
        free(k.buf);
        return NULL;
    }
    k.buf[k.n] = 0;
    return k.buf;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

#define DATA_MIN_SUBSTR_KEY 24

static int cmp_prefix(const void *a, const void *b) {
    return strncmp(*(char *const *)a, *(char *const *)b, DATA_MIN_SUBSTR_KEY);
}

as_status data_filter(data_text *t, const char *const *exclude, int n_exclude, int *n_dropped, as_error *err) {
    *n_dropped = 0;
    if (n_exclude <= 0) return AS_OK;
    char **keys = NULL, **pre = NULL;
    int nk = 0, kcap = 0, npre = 0;
    as_status rc = AS_OK;
    for (int f = 0; f < n_exclude; f++) {
        data_text ex;
        if ((rc = data_read_sentences(exclude[f], &ex, 0, err))) goto cleanup;
        for (int i = 0; i < ex.n; i++) {
            char *k = data_sentence_key(ex.text[i]);
            if (!k || nk == kcap) {
                char **nkeys = k ? realloc(keys, (size_t)(kcap ? kcap * 2 : 1024) * sizeof *nkeys) : NULL;
                if (!nkeys) {
                    free(k);
                    data_text_free(&ex);
                    rc = as_err_set(err, AS_ERR_INTERNAL, "filter: out of memory");
                    goto cleanup;
                }
                keys = nkeys;
                kcap = kcap ? kcap * 2 : 1024;
            }
            if (k[0]) keys[nk++] = k;
            else free(k);
        }
        data_text_free(&ex);
    }
    qsort(keys, (size_t)nk, sizeof *keys, cmp_str);
    /* the keys of >= DATA_MIN_SUBSTR_KEY characters by their first DATA_MIN_SUBSTR_KEY
       characters, to find them inside longer sentences with one lookup per offset */
    pre = as_malloc_array((size_t)nk + 1, sizeof *pre);
    if (!pre) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "filter: out of memory");
        goto cleanup;
    }
    for (int i = 0; i < nk; i++)
        if (strlen(keys[i]) >= DATA_MIN_SUBSTR_KEY) pre[npre++] = keys[i];
    qsort(pre, (size_t)npre, sizeof *pre, cmp_prefix);
    int w = 0;
    for (int i = 0; i < t->n; i++) {
        char *k = data_sentence_key(t->text[i]);
        if (!k) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "filter: out of memory");
            goto cleanup;
        }
        int hit = k[0] && bsearch(&k, keys, (size_t)nk, sizeof *keys, cmp_str) != NULL;
        size_t kl = strlen(k);
        for (size_t o = 0; !hit && o + DATA_MIN_SUBSTR_KEY <= kl; o++) {
            const char *q = k + o;
            char *const *f = bsearch(&q, pre, (size_t)npre, sizeof *pre, cmp_prefix);
            if (!f) continue;
            /* every key sharing this prefix */
            char *const *lo = f, *const *hi = f;
            while (lo > pre && !cmp_prefix(&q, lo - 1)) lo--;
            while (hi + 1 < pre + npre && !cmp_prefix(&q, hi + 1)) hi++;
            for (char *const *c = lo; c <= hi && !hit; c++) hit = !strncmp(q, *c, strlen(*c));
        }
        free(k);
        if (hit) {
            free(t->text[i]);
            (*n_dropped)++;
        } else {
            t->text[w] = t->text[i];
            t->doc[w++] = t->doc[i];
        }
    }
    t->n = w;
cleanup:
    for (int i = 0; i < nk; i++) free(keys[i]);
    free(keys);
    free(pre);
    return rc;
}

as_status data_read_corpus(const char *const *files, int n_files, const char *const *exclude, int n_exclude,
                          data_text *out, int *n_dropped, as_error *err) {
    memset(out, 0, sizeof *out);
    *n_dropped = 0;
    if (n_files <= 0) return as_err_set(err, AS_ERR_INPUT, "no corpus files given");
    int cap = 0, doc = 0;
    as_status rc = AS_OK;
    for (int f = 0; f < n_files; f++) {
        data_text one;
        if ((rc = data_read_sentences(files[f], &one, doc, err))) goto fail;
        for (int i = 0; i < one.n; i++) {
            if (out->n == cap) {
                int nc = cap ? cap * 2 : 4096;
                char **nt = realloc(out->text, (size_t)nc * sizeof *nt);
                if (nt) out->text = nt;
                int32_t *nd = realloc(out->doc, (size_t)nc * sizeof *nd);
                if (nd) out->doc = nd;
                if (!nt || !nd) {
                    data_text_free(&one);
                    rc = as_err_set(err, AS_ERR_INTERNAL, "corpus: out of memory");
                    goto fail;
                }
                cap = nc;
            }
            out->text[out->n] = one.text[i];
            out->doc[out->n++] = one.doc[i];
            one.text[i] = NULL;
        }
        doc = one.doc[one.n - 1] + 1;
        data_text_free(&one);
    }
    if ((rc = data_filter(out, exclude, n_exclude, n_dropped, err))) goto fail;
    return AS_OK;
fail:
    data_text_free(out);
    return rc;
}

/* ---- tokenizer over a vocab.txt ---- */

struct data_tok {
    tok_vocab *v;
    tok_wordpiece_opts o;
};

as_status data_tok_load(const char *vocab_path, data_tok **out, as_error *err) {
    *out = NULL;
    char *buf = NULL;
    size_t len = 0;
    as_status rc = as_read_file(vocab_path, (size_t)64 << 20, &buf, &len, err);
    if (rc) return rc;
    data_tok *t = as_calloc(1, sizeof *t);
    if (!t || !(t->v = tok_vocab_new())) {
        free(t);
        free(buf);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    int id = 0;
    for (char *p = buf; p < buf + len; id++) {
        char *nl = memchr(p, '\n', (size_t)(buf + len - p));
        char *e = nl ? nl : buf + len;
        size_t n = (size_t)(e - p);
        if (n && p[n - 1] == '\r') n--;
        if ((rc = tok_vocab_set(t->v, p, n, id, err))) {
            as_err_prefix(err, "%s:%d", vocab_path, id + 1);
            goto fail;
        }
        p = e + 1;
    }
    static const char *const sp[VOCAB_TRAIN_N_SPECIAL] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
    for (int i = 0; i < VOCAB_TRAIN_N_SPECIAL; i++)
        if (tok_vocab_get(t->v, sp[i], strlen(sp[i])) != i) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: line %d must be %s (attnscope vocabularies put the specials "
                                               "at ids 0..4)", vocab_path, i + 1, sp[i]);
            goto fail;
        }
    tok_wordpiece_opts o = {1, 1, 1, 1, "##", 100, VOCAB_TRAIN_UNK};
    t->o = o;
    free(buf);
    *out = t;
    return AS_OK;
fail:
    free(buf);
    data_tok_free(t);
    return rc;
}

void data_tok_free(data_tok *t) {
    if (!t) return;
    tok_vocab_free(t->v);
    free(t);
}

int data_tok_vocab(const data_tok *t) { return tok_vocab_size(t->v); }

as_status data_tok_encode(const data_tok *t, const char *text, int32_t **ids, int *n, as_error *err) {
    tok_ids ti = {0};
    *ids = NULL;
    *n = 0;
    as_status rc = tok_wordpiece_encode(t->v, &t->o, text, strlen(text), &ti, err);
    if (rc) {
        tok_ids_free(&ti);
        return rc;
    }
    *ids = ti.ids;
    *n = ti.n;
    ti.ids = NULL;
    tok_ids_free(&ti);
    return AS_OK;
}

void data_corpus_free(data_corpus *c) {
    if (!c) return;
    free(c->off);
    free(c->len);
    free(c->doc);
    free(c->tok);
    memset(c, 0, sizeof *c);
}

as_status data_tokenize(const data_tok *tk, const data_text *txt, data_corpus *out, as_error *err) {
    memset(out, 0, sizeof *out);
    size_t cap = 1 << 20;
    out->off = as_malloc_array((size_t)txt->n + 1, sizeof(int32_t));
    out->len = as_malloc_array((size_t)txt->n + 1, sizeof(int32_t));
    out->doc = as_malloc_array((size_t)txt->n + 1, sizeof(int32_t));
    out->tok = as_malloc_array(cap, sizeof(int32_t));
    if (!out->off || !out->len || !out->doc || !out->tok) goto oom;
    for (int i = 0; i < txt->n; i++) {
        int32_t *ids;
        int n;
        as_status rc = data_tok_encode(tk, txt->text[i], &ids, &n, err);
        if (rc) {
            data_corpus_free(out);
            return rc;
        }
        if (!n) {
            free(ids);
            continue;
        }
        if (out->n_tok + (size_t)n > INT32_MAX) {
            free(ids);
            data_corpus_free(out);
            return as_err_set(err, AS_ERR_INPUT, "corpus has more than 2^31 tokens");
        }
        while (out->n_tok + (size_t)n > cap) {
            int32_t *nt = realloc(out->tok, cap * 2 * sizeof *nt);
            if (!nt) {
                free(ids);
                goto oom;
            }
            out->tok = nt;
            cap *= 2;
        }
        memcpy(out->tok + out->n_tok, ids, (size_t)n * sizeof *ids);
        free(ids);
        out->off[out->n_sent] = (int32_t)out->n_tok;
        out->len[out->n_sent] = n;
        out->doc[out->n_sent++] = txt->doc[i];
        out->n_tok += (size_t)n;
    }
    if (!out->n_sent) {
        data_corpus_free(out);
        return as_err_set(err, AS_ERR_INPUT, "corpus has no tokens");
    }
    return AS_OK;
oom:
    data_corpus_free(out);
    return as_err_set(err, AS_ERR_INTERNAL, "tokenize corpus: out of memory");
}

/* ---- masked-LM batches ---- */

int data_max_predictions(int b, int T, float prob) {
    return b * ((int)(prob * (T - 3) + 0.5) + 1);
}

as_status data_mlm_batch_init(data_mlm_batch *mb, int B, int T, as_error *err) {
    memset(mb, 0, sizeof *mb);
    if (B <= 0 || T < 8) return as_err_set(err, AS_ERR_INPUT, "batch %d x %d: need B >= 1 and T >= 8", B, T);
    size_t n = (size_t)B * (size_t)T;
    mb->ids = as_malloc_array(n, sizeof(int32_t));
    mb->type_ids = as_malloc_array(n, sizeof(int32_t));
    mb->mask = as_malloc_array(n, sizeof(int32_t));
    mb->labels = as_malloc_array(n, sizeof(int32_t));
    if (!mb->ids || !mb->type_ids || !mb->mask || !mb->labels) {
        data_mlm_batch_free(mb);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    mb->B = B;
    mb->T = T;
    mb->mask_prob = DATA_MASK_PROB;
    return AS_OK;
}

void data_mlm_batch_free(data_mlm_batch *mb) {
    if (!mb) return;
    free(mb->ids);
    free(mb->type_ids);
    free(mb->mask);
    free(mb->labels);
    memset(mb, 0, sizeof *mb);
}

int data_mask(int32_t *ids, int32_t *labels, int t, int V, float prob, train_rng *rng) {
    int cand[4096], nc = 0;
    for (int i = 0; i < t; i++) {
        labels[i] = TRAIN_IGNORE;
        if (ids[i] >= VOCAB_TRAIN_N_SPECIAL && nc < 4096) cand[nc++] = i;
    }
    if (!nc) return 0;
    int np = (int)(prob * nc + 0.5);
    if (np < 1) np = 1;
    /* partial Fisher-Yates: the first np candidates are a uniform sample */
    for (int i = 0; i < np; i++) {
        int j = i + (int)train_rng_below(rng, (uint32_t)(nc - i));
        int tmp = cand[i];
        cand[i] = cand[j];
        cand[j] = tmp;
        int p = cand[i];
        labels[p] = ids[p];
        double u = train_rng_uniform(rng);
        if (u < 0.8) ids[p] = VOCAB_TRAIN_MASK;
        else if (u < 0.9) ids[p] = VOCAB_TRAIN_N_SPECIAL + (int32_t)train_rng_below(rng, (uint32_t)(V - VOCAB_TRAIN_N_SPECIAL));
    }
    return np;
}

/* Appends sentences from s onward while they stay in doc and len < want; returns the
 * end sentence (exclusive) and adds tokens to *n (capped at cap by truncation). */
static int take(const data_corpus *c, int s, int want, int32_t *dst, int *n, int cap) {
    int doc = c->doc[s];
    while (s < c->n_sent && c->doc[s] == doc && *n < want) {
        int k = c->len[s];
        if (*n + k > cap) k = cap - *n;
        memcpy(dst + *n, c->tok + c->off[s], (size_t)k * sizeof(int32_t));
        *n += k;
        s++;
    }
    return s;
}

void data_mlm_batch_make(data_mlm_batch *mb, const data_corpus *c, int b, int V, train_rng *rng) {
    ASSERT(b > 0 && b <= mb->B);
    int T = mb->T, budget = T - 3;
    int32_t A[4096], Bs[4096];
    ASSERT(budget < 4096);
    mb->b = b;
    mb->t = 0;
    mb->n_pred = 0;
    mb->n_next = 0;
    int lens[4096];
    for (int q = 0; q < b; q++) {
        int na = 0, nb = 0;
        /* A: half the budget, at a random length in [budget/4, budget/2] like BERT's
           random split of a target-length chunk */
        int want_a = budget / 4 + (int)train_rng_below(rng, (uint32_t)(budget / 4 + 1));
        if (want_a < 1) want_a = 1;
        int s = (int)train_rng_below(rng, (uint32_t)c->n_sent);
        int e = take(c, s, want_a, A, &na, budget - 1);
        int next = train_rng_uniform(rng) < 0.5 && e < c->n_sent && c->doc[e] == c->doc[s];
        int sb = next ? e : (int)train_rng_below(rng, (uint32_t)c->n_sent);
        take(c, sb, budget - na, Bs, &nb, budget - na);
        if (nb == 0) { /* A filled the budget: give B its last token */
            Bs[nb++] = A[--na];
        }
        mb->n_next += next;
        int32_t *ids = mb->ids + (size_t)q * T, *ty = mb->type_ids + (size_t)q * T;
        int t = 0;
        ids[t] = VOCAB_TRAIN_CLS, ty[t++] = 0;
        for (int i = 0; i < na; i++) ids[t] = A[i], ty[t++] = 0;
        ids[t] = VOCAB_TRAIN_SEP, ty[t++] = 0;
        for (int i = 0; i < nb; i++) ids[t] = Bs[i], ty[t++] = 1;
        ids[t] = VOCAB_TRAIN_SEP, ty[t++] = 1;
        lens[q] = t;
        if (t > mb->t) mb->t = t;
    }
    /* repack rows at stride mb->t (rows were written at stride T) and mask */
    int t = mb->t;
    for (int q = 0; q < b; q++) {
        int32_t *src_i = mb->ids + (size_t)q * T, *src_t = mb->type_ids + (size_t)q * T;
        int32_t *di = mb->ids + (size_t)q * t, *dt = mb->type_ids + (size_t)q * t;
        memmove(di, src_i, (size_t)lens[q] * sizeof(int32_t));
        memmove(dt, src_t, (size_t)lens[q] * sizeof(int32_t));
        for (int i = lens[q]; i < t; i++) di[i] = VOCAB_TRAIN_PAD, dt[i] = 0;
        int32_t *mk = mb->mask + (size_t)q * t;
        for (int i = 0; i < t; i++) mk[i] = i < lens[q];
        mb->n_pred += data_mask(di, mb->labels + (size_t)q * t, t, V, mb->mask_prob, rng);
    }
}
