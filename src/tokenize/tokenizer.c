/* tokenizer.c — loads a model folder's tokenizer and runs it the way Hugging Face
 * `tokenizers` does: invalid UTF-8 replaced by U+FFFD, added/special tokens matched
 * in the raw text first (leftmost-longest, with lstrip / rstrip / single_word), the
 * rest normalized and split by the model (wordpiece.c, bpe.c for byte-level BPE, spm.c
 * for the SentencePiece family: BPE with byte_fallback, or Unigram through unigram.c,
 * with their normalizers in normalize.c), then truncation (longest_first) and
 * the post-processor's template ([CLS] A [SEP] B [SEP], <s> A, ...).
 *
 * Files: DIR/tokenizer.json when present (model WordPiece, BPE or Unigram, normalizer,
 * pre_tokenizer, added_tokens, post_processor, and the decoder for readable token text;
 * tokenizer_config.json's add_bos_token / add_eos_token rebuild the template for the
 * Llama and Gemma tokenizer classes, as transformers does); else the legacy files: vocab.txt
 * (+ tokenizer_config.json) for WordPiece, vocab.json + merges.txt for byte-level BPE,
 * with special_tokens_map.json naming the specials when present; spiece.model (+
 * tokenizer_config.json's extra_ids, legacy) for a T5 / mT5 folder, built as transformers'
 * T5 converter builds the fast tokenizer; vocab.json + source.spm + target.spm for a
 * Marian folder, as transformers' MarianTokenizer runs them (tok_encode_target: the
 * target side).
 * Offsets are byte offsets into the caller's text, whatever normalization did.
 *
 * It does not: pad, decode ids back to text (beyond one piece), run WordLevel models,
 * or match added tokens after normalization except for the SentencePiece family (spm.c
 * does; elsewhere normalized = true tokens are matched in the raw text like the others).
 */
#include "tokenize/tokenizer.h"

#include <jansson.h>
#include <pcre2.h>
#include <string.h>
#include <utf8proc.h>

#include "io/config.h"
#include "tokenize/bpe.h"
#include "tokenize/normalize.h"
#include "tokenize/spm.h"
#include "tokenize/spm_model.h"
#include "tokenize/unigram.h"
#include "tokenize/vocab.h"
#include "tokenize/wordpiece.h"

#define TOK_TPL_MAX 32    /* items in a post-processor template */
#define TOK_ADDED_MAX 16384 /* added tokens in one tokenizer */

enum { KIND_WORDPIECE = 0, KIND_BPE = 1, KIND_UNIGRAM = 2 };

/* One added token of tokenizer.json's added_tokens (or a legacy special token). */
typedef struct {
    char *content; /* owned */
    size_t len;
    int32_t id;
    int special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* A byte trie over the added tokens' contents (first-child / next-sibling). */
typedef struct {
    int32_t child, next;
    int32_t tok; /* index into added, -1 when no token ends here */
    unsigned char byte;
} trie_node;

/* A template item: a special token (seq -1) or the tokens of sequence A (0) / B (1). */
typedef struct {
    int8_t seq;
    int8_t type_id;
    int32_t id;
} tpl_item;

struct tok_tokenizer {
    int kind;
    tok_vocab *vocab; /* the model's vocabulary (added tokens live in `added`) */
    tok_wordpiece_opts wp;
    tok_bpe *bpe;
    tok_spm *spm;          /* SentencePiece-style BPE (byte_fallback, "▁"); NULL for byte-level */
    tok_spm *spm_target;   /* Marian: the target side's model (target.spm); NULL otherwise */
    char disp_from[TOK_SPM_MAX_STR], disp_to[TOK_SPM_MAX_STR]; /* spm decoder's Replace ("▁" -> " ") */
    int disp_bytes;        /* spm decoder has ByteFallback: "<0xNN>" shows as its byte */
    int nfc;               /* BPE: NFC normalizer */
    int trim_offsets;      /* ByteLevel / RobertaProcessing trim_offsets */
    int trim_prefix_space; /* their add_prefix_space */
    tok_added *added;      /* (n_added) */
    int n_added;
    int32_t *added_of; /* (n_ids) index into added + 1, 0 when not added; built last */
    trie_node *trie; /* (n_trie) node 0 is the root */
    int n_trie, cap_trie;
    tpl_item single[TOK_TPL_MAX];
    int n_single;
    tpl_item pair[TOK_TPL_MAX];
    int n_pair;
    int n_tpl_special_single, n_tpl_special_pair;
    int32_t special[TOK_SP_COUNT];
    int32_t n_ids; /* max id + 1 over vocab and added tokens */
};

/* ---- tok_ids --------------------------------------------------------------- */

void tok_ids_free(tok_ids *t) {
    if (!t) return;
    free(t->ids);
    free(t->start);
    free(t->end);
    memset(t, 0, sizeof *t);
}

as_status tok_ids_push(tok_ids *t, int32_t id, int32_t start, int32_t end, as_error *err) {
    ASSERT(t);
    if (t->n == t->cap) {
        if (t->cap > (1 << 28)) return as_err_set(err, AS_ERR_INTERNAL, "too many tokens");
        int ncap = t->cap ? t->cap * 2 : 64;
        int32_t *a = realloc(t->ids, (size_t)ncap * sizeof *a);
        if (!a) return as_err_set(err, AS_ERR_INTERNAL, "tokens: out of memory");
        t->ids = a;
        a = realloc(t->start, (size_t)ncap * sizeof *a);
        if (!a) return as_err_set(err, AS_ERR_INTERNAL, "tokens: out of memory");
        t->start = a;
        a = realloc(t->end, (size_t)ncap * sizeof *a);
        if (!a) return as_err_set(err, AS_ERR_INTERNAL, "tokens: out of memory");
        t->end = a;
        t->cap = ncap;
    }
    t->ids[t->n] = id;
    t->start[t->n] = start;
    t->end[t->n] = end;
    t->n++;
    return AS_OK;
}

/* ---- as_encoding ----------------------------------------------------------- */

void as_encoding_free(as_encoding *e) {
    if (!e) return;
    if (e->pieces)
        for (int i = 0; i < e->n; i++) free(e->pieces[i]);
    free(e->pieces);
    free(e->ids);
    free(e->type_ids);
    free(e->mask);
    free(e->start);
    free(e->end);
    free(e->seq);
    memset(e, 0, sizeof *e);
}

/* ---- small helpers ----------------------------------------------------------- */

/* Rust's char::is_whitespace (Unicode White_Space). */
static int is_ws(int32_t cp) {
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return 1;
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

/* Decodes the (valid) UTF-8 char at s[i]; returns its length (1 for a bad byte). */
static int dec(const char *s, size_t n, size_t i, int32_t *cp) {
    utf8proc_ssize_t k =
        utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), cp);
    if (k <= 0) {
        *cp = 0xFFFD;
        return 1;
    }
    return (int)k;
}

/* Start of the UTF-8 char that ends at s[i - 1]. */
static size_t prev_char(const char *s, size_t i) {
    if (i == 0) return 0;
    i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    return i;
}

static int is_word_char(int32_t cp) {
    if (cp == '_') return 1;
    utf8proc_category_t c = utf8proc_category(cp);
    return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
           (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

/* Length of the maximal valid UTF-8 prefix of a sequence at s[0..n) (Unicode's
 * "maximal subpart"): returns the char length when valid, else -(bytes to replace). */
static int utf8_check(const unsigned char *s, size_t n) {
    unsigned char b = s[0];
    if (b < 0x80) return 1;
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) need = 1;
    else if (b == 0xE0) need = 2, lo = 0xA0;
    else if (b >= 0xE1 && b <= 0xEC) need = 2;
    else if (b == 0xED) need = 2, hi = 0x9F;
    else if (b >= 0xEE && b <= 0xEF) need = 2;
    else if (b == 0xF0) need = 3, lo = 0x90;
    else if (b >= 0xF1 && b <= 0xF3) need = 3;
    else if (b == 0xF4) need = 3, hi = 0x8F;
    else return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return -k;
        unsigned char c = s[k];
        if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return -k;
    }
    return need + 1;
}

/* A text made valid UTF-8, with each byte's span in the caller's text when it
 * differs (os/oe NULL: identity). */
typedef struct {
    const char *s;
    size_t n;
    char *own;       /* owned buffer behind s, or NULL */
    int32_t *os, *oe; /* (n) original [start, end) of each byte */
    int n_bad;        /* invalid sequences replaced */
} tok_text;

static void text_free(tok_text *t) {
    free(t->own);
    free(t->os);
    free(t->oe);
    memset(t, 0, sizeof *t);
}

static as_status text_sanitize(const char *s, size_t n, tok_text *out, as_error *err) {
    memset(out, 0, sizeof *out);
    size_t i = 0;
    while (i < n) {
        int k = utf8_check((const unsigned char *)s + i, n - i);
        if (k < 0) break;
        i += (size_t)k;
    }
    out->s = s;
    out->n = n;
    if (i == n) return AS_OK;
    /* Slow path: every invalid sequence becomes U+FFFD (3 bytes). */
    size_t cap = i;
    while (i < n) {
        int k = utf8_check((const unsigned char *)s + i, n - i);
        cap += k > 0 ? (size_t)k : 3;
        i += (size_t)(k > 0 ? k : -k);
    }
    out->own = as_malloc(cap + 1);
    out->os = as_malloc_array(cap + 1, sizeof *out->os);
    out->oe = as_malloc_array(cap + 1, sizeof *out->oe);
    if (!out->own || !out->os || !out->oe) {
        text_free(out);
        return as_err_set(err, AS_ERR_INTERNAL, "text: out of memory");
    }
    size_t w = 0;
    i = 0;
    while (i < n) {
        int k = utf8_check((const unsigned char *)s + i, n - i);
        if (k > 0) {
            for (int q = 0; q < k; q++, w++) {
                out->own[w] = s[i + (size_t)q];
                out->os[w] = (int32_t)(i + (size_t)q);
                out->oe[w] = (int32_t)(i + (size_t)q + 1);
            }
            i += (size_t)k;
        } else {
            static const char fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
            for (int q = 0; q < 3; q++, w++) {
                out->own[w] = fffd[q];
                out->os[w] = (int32_t)i;
                out->oe[w] = (int32_t)(i + (size_t)-k);
            }
            i += (size_t)-k;
            out->n_bad++;
        }
    }
    out->own[w] = 0;
    out->s = out->own;
    out->n = w;
    return AS_OK;
}

/* ---- NFC (BPE normalizer) ------------------------------------------------------ */

/* Code points with combining class 0 that can still compose with the char before
 * them (the second half of a canonical pair): Hangul V/T jamo and these vowel signs
 * (from UnicodeData: 2-char canonical decompositions whose second char has ccc 0). */
static int nfc_second(int32_t cp) {
    static const int32_t tab[] = {0x09BE, 0x09D7, 0x0B3E, 0x0B56, 0x0B57, 0x0BBE, 0x0BD7,
                                  0x0CC2, 0x0CD5, 0x0CD6, 0x0D3E, 0x0D57, 0x0DCF, 0x0DDF,
                                  0x102E, 0x1B35, 0x11127, 0x1133E, 0x11357, 0x114B0,
                                  0x114BA, 0x114BD, 0x115AF, 0x11930};
    if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return 1;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (tab[i] == cp) return 1;
    return 0;
}

/* NFC of s[0..n) into *out with per-byte spans relative to s. The text is cut before
 * every starter that cannot compose backwards; each piece is composed on its own and
 * its output bytes all map to the piece's span. */
static as_status nfc_text(const char *s, size_t n, tok_text *out, as_error *err) {
    memset(out, 0, sizeof *out);
    size_t cap = n * 3 + 16, w = 0;
    out->own = as_malloc(cap + 1);
    out->os = as_malloc_array(cap + 1, sizeof *out->os);
    out->oe = as_malloc_array(cap + 1, sizeof *out->oe);
    if (!out->own || !out->os || !out->oe) goto oom;
    size_t i = 0;
    while (i < n) {
        size_t a = i;
        int32_t cp;
        i += (size_t)dec(s, n, i, &cp);
        while (i < n) {
            int k = dec(s, n, i, &cp);
            if (utf8proc_get_property(cp)->combining_class == 0 && !nfc_second(cp)) break;
            i += (size_t)k;
        }
        utf8proc_uint8_t *piece = NULL;
        utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s + a, (utf8proc_ssize_t)(i - a),
                                          &piece, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        const char *src = (const char *)piece;
        size_t len = (size_t)m;
        if (m < 0) { /* cannot happen on valid UTF-8; keep the bytes as they are */
            src = s + a;
            len = i - a;
        }
        if (w + len > cap) {
            free(piece);
            goto oom;
        }
        memcpy(out->own + w, src, len);
        for (size_t q = 0; q < len; q++) {
            out->os[w + q] = (int32_t)a;
            out->oe[w + q] = (int32_t)i;
        }
        w += len;
        free(piece);
    }
    out->own[w] = 0;
    out->s = out->own;
    out->n = w;
    return AS_OK;
oom:
    text_free(out);
    return as_err_set(err, AS_ERR_INTERNAL, "nfc: out of memory");
}

/* ---- added tokens ---------------------------------------------------------------- */

static int trie_new_node(tok_tokenizer *t, unsigned char byte) {
    if (t->n_trie == t->cap_trie) {
        int ncap = t->cap_trie ? t->cap_trie * 2 : 256;
        trie_node *nn = realloc(t->trie, (size_t)ncap * sizeof *nn);
        if (!nn) return -1;
        t->trie = nn;
        t->cap_trie = ncap;
    }
    trie_node *n = &t->trie[t->n_trie];
    n->child = n->next = n->tok = -1;
    n->byte = byte;
    return t->n_trie++;
}

/* Builds the id index and the trie once all added tokens are known. */
static as_status trie_build(tok_tokenizer *t, as_error *err) {
    t->added_of = as_calloc((size_t)t->n_ids, sizeof *t->added_of);
    if (!t->added_of) goto oom;
    for (int k = 0; k < t->n_added; k++) t->added_of[t->added[k].id] = k + 1;
    t->n_trie = 0;
    if (trie_new_node(t, 0) < 0) goto oom;
    for (int k = 0; k < t->n_added; k++) {
        const tok_added *a = &t->added[k];
        if (a->len == 0 || (t->spm && a->normalized)) continue; /* spm.c matches those */
        int node = 0;
        for (size_t i = 0; i < a->len; i++) {
            unsigned char b = (unsigned char)a->content[i];
            int c = t->trie[node].child;
            while (c >= 0 && t->trie[c].byte != b) c = t->trie[c].next;
            if (c < 0) {
                c = trie_new_node(t, b);
                if (c < 0) goto oom;
                t->trie[c].next = t->trie[node].child;
                t->trie[node].child = c;
            }
            node = c;
        }
        if (t->trie[node].tok < 0) t->trie[node].tok = k; /* first of equal contents wins */
    }
    return AS_OK;
oom:
    return as_err_set(err, AS_ERR_INTERNAL, "added tokens: out of memory");
}

/* Longest added token starting at s[i]; returns its index or -1, *end = match end. */
static int trie_match(const tok_tokenizer *t, const char *s, size_t n, size_t i, size_t *end) {
    int node = 0, best = -1;
    for (size_t j = i; j < n; j++) {
        unsigned char b = (unsigned char)s[j];
        int c = t->trie[node].child;
        while (c >= 0 && t->trie[c].byte != b) c = t->trie[c].next;
        if (c < 0) break;
        node = c;
        if (t->trie[node].tok >= 0) {
            best = t->trie[node].tok;
            *end = j + 1;
        }
    }
    return best;
}

static const tok_added *added_by_id(const tok_tokenizer *t, int32_t id) {
    if (t->added_of) {
        if (id < 0 || id >= t->n_ids || !t->added_of[id]) return NULL;
        return &t->added[t->added_of[id] - 1];
    }
    for (int k = 0; k < t->n_added; k++)
        if (t->added[k].id == id) return &t->added[k];
    return NULL;
}

static const tok_added *added_by_content(const tok_tokenizer *t, const char *s) {
    size_t n = strlen(s);
    for (int k = 0; k < t->n_added; k++)
        if (t->added[k].len == n && memcmp(t->added[k].content, s, n) == 0) return &t->added[k];
    return NULL;
}

/* Adds (or updates) an added token. content is copied. */
static as_status added_push(tok_tokenizer *t, const char *content, size_t len, int32_t id,
                            int special, int lstrip, int rstrip, int single_word,
                            int normalized, const char *file, as_error *err) {
    if (id < 0 || id >= AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "%s: added token \"%.40s\": id %ld out of range", file,
                          content, (long)id);
    if (t->n_added >= TOK_ADDED_MAX)
        return as_err_set(err, AS_ERR_INPUT, "%s: more than %d added tokens", file, TOK_ADDED_MAX);
    for (int k = 0; k < t->n_added; k++) {
        if (t->added[k].id == id && (t->added[k].len != len ||
                                     memcmp(t->added[k].content, content, len) != 0))
            return as_err_set(err, AS_ERR_INPUT, "%s: duplicate added token id %ld", file, (long)id);
        if (t->added[k].id == id) return AS_OK;
    }
    const char *vp = tok_vocab_piece(t->vocab, id);
    if (vp && (strlen(vp) != len || memcmp(vp, content, len) != 0))
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: added token \"%.40s\" has id %ld, which the vocabulary gives to \"%.40s\"",
                          file, content, (long)id, vp);
    tok_added *na = realloc(t->added, (size_t)(t->n_added + 1) * sizeof *na);
    if (!na) return as_err_set(err, AS_ERR_INTERNAL, "added tokens: out of memory");
    t->added = na;
    tok_added *a = &t->added[t->n_added];
    a->content = as_malloc(len + 1);
    if (!a->content) return as_err_set(err, AS_ERR_INTERNAL, "added tokens: out of memory");
    memcpy(a->content, content, len);
    a->content[len] = 0;
    a->len = len;
    a->id = id;
    a->special = special;
    a->lstrip = lstrip;
    a->rstrip = rstrip;
    a->single_word = single_word;
    a->normalized = normalized;
    t->n_added++;
    if (id + 1 > t->n_ids) t->n_ids = id + 1;
    return AS_OK;
}

/* ---- public accessors -------------------------------------------------------------- */

int tok_n_vocab(const tok_tokenizer *t) { return t ? (int)t->n_ids : 0; }

const char *tok_id_to_piece(const tok_tokenizer *t, int32_t id) {
    if (!t) return NULL;
    const char *p = tok_vocab_piece(t->vocab, id);
    if (p) return p;
    const tok_added *a = added_by_id(t, id);
    return a ? a->content : NULL;
}

int32_t tok_piece_to_id(const tok_tokenizer *t, const char *piece) {
    if (!t || !piece) return -1;
    const tok_added *a = added_by_content(t, piece);
    if (a) return a->id;
    return tok_vocab_get(t->vocab, piece, strlen(piece));
}

/* The spm decoder's view of one piece (*len bytes, NUL-terminated): a byte-fallback
 * piece as its byte, else the piece with disp_from replaced by disp_to. */
static char *spm_display(const tok_tokenizer *t, const char *p, size_t *len) {
    int b = tok_spm_byte_piece(p);
    if (b >= 0 && t->disp_bytes) {
        char *o = as_malloc(2);
        if (o) {
            o[0] = (char)b;
            o[1] = 0;
            *len = 1;
        }
        return o;
    }
    size_t fk = strlen(t->disp_from), tk = strlen(t->disp_to), n = strlen(p), hits = 0;
    if (fk == 0) {
        *len = n;
        return as_strdup(p);
    }
    for (const char *q = strstr(p, t->disp_from); q; q = strstr(q + fk, t->disp_from)) hits++;
    char *o = as_malloc(n - hits * fk + hits * tk + 1);
    if (!o) return NULL;
    size_t w = 0;
    for (const char *q = p;;) {
        const char *h = strstr(q, t->disp_from);
        size_t keep = h ? (size_t)(h - q) : strlen(q);
        memcpy(o + w, q, keep);
        w += keep;
        if (!h) break;
        memcpy(o + w, t->disp_to, tk);
        w += tk;
        q = h + fk;
    }
    o[w] = 0;
    *len = w;
    return o;
}

char *tok_piece_bytes(const tok_tokenizer *t, int32_t id, size_t *len) {
    ASSERT(len);
    *len = 0;
    const char *p = tok_id_to_piece(t, id);
    if (!p) return NULL;
    if (t->spm) return spm_display(t, p, len); /* HF decodes added tokens too */
    if (t->kind == KIND_BPE && !added_by_id(t, id)) return tok_bpe_piece_to_bytes(p, len);
    *len = strlen(p);
    return as_strdup(p);
}

char *tok_piece_display(const tok_tokenizer *t, int32_t id) {
    size_t n;
    return tok_piece_bytes(t, id, &n);
}

const char *tok_kind_name(const tok_tokenizer *t) {
    if (!t) return "wordpiece";
    return t->kind == KIND_BPE ? "bpe" : t->kind == KIND_UNIGRAM ? "unigram" : "wordpiece";
}

int32_t tok_special_id(const tok_tokenizer *t, tok_special which) {
    if (!t || (int)which < 0 || which >= TOK_SP_COUNT) return -1;
    return t->special[which];
}

void tok_free(tok_tokenizer *t) {
    if (!t) return;
    for (int k = 0; k < t->n_added; k++) free(t->added[k].content);
    free(t->added);
    free(t->trie);
    free(t->added_of);
    tok_bpe_free(t->bpe);
    tok_spm_free(t->spm);
    tok_spm_free(t->spm_target);
    tok_vocab_free(t->vocab);
    free(t);
}

/* ---- encoding ------------------------------------------------------------------------ */

/* Model-encodes s[0..n) (valid UTF-8, no added tokens) and appends tokens whose
 * offsets are shifted by base. */
static as_status encode_plain(const tok_tokenizer *t, const char *s, size_t n, int32_t base,
                              tok_ids *out, as_error *err) {
    int n0 = out->n;
    as_status rc;
    if (n == 0) return AS_OK;
    if (t->kind == KIND_WORDPIECE) {
        rc = tok_wordpiece_encode(t->vocab, &t->wp, s, n, out, err);
    } else if (t->spm) {
        rc = tok_spm_encode(t->spm, s, n, base == 0, out, err);
    } else if (t->nfc) {
        tok_text nt;
        rc = nfc_text(s, n, &nt, err);
        if (rc != AS_OK) return rc;
        rc = tok_bpe_encode(t->bpe, nt.s, nt.n, out, err);
        for (int k = n0; rc == AS_OK && k < out->n; k++) {
            int32_t a = out->start[k], b = out->end[k];
            out->start[k] = a < (int32_t)nt.n ? nt.os[a] : (int32_t)n;
            out->end[k] = b > 0 ? nt.oe[b - 1] : 0;
        }
        text_free(&nt);
    } else {
        rc = tok_bpe_encode(t->bpe, s, n, out, err);
    }
    if (rc != AS_OK) return rc;
    for (int k = n0; k < out->n; k++) {
        out->start[k] += base;
        out->end[k] += base;
    }
    return AS_OK;
}

/* Encodes text (len bytes) without special tokens. *n_bad: invalid UTF-8 sequences. */
static as_status encode_text(const tok_tokenizer *t, const char *text, size_t len, tok_ids *out,
                             int *n_bad, as_error *err) {
    tok_text tx;
    as_status rc = text_sanitize(text, len, &tx, err);
    if (rc != AS_OK) return rc;
    if (n_bad) *n_bad = tx.n_bad;
    int n0 = out->n;
    const char *s = tx.s;
    size_t n = tx.n, seg = 0, i = 0;
    while (i < n && rc == AS_OK) {
        size_t end = 0;
        int k = t->n_added ? trie_match(t, s, n, i, &end) : -1;
        if (k < 0) {
            i++;
            continue;
        }
        const tok_added *a = &t->added[k];
        size_t ms = i, me = end;
        if (a->single_word) {
            int32_t cp;
            int ok = 1;
            if (ms > 0) {
                size_t p = prev_char(s, ms);
                dec(s, n, p, &cp);
                if (is_word_char(cp)) ok = 0;
            }
            if (me < n) {
                dec(s, n, me, &cp);
                if (is_word_char(cp)) ok = 0;
            }
            if (!ok) { /* matches do not overlap: the search resumes after this one */
                i = me;
                continue;
            }
        }
        if (a->lstrip) {
            while (ms > seg) {
                size_t p = prev_char(s, ms);
                int32_t cp;
                dec(s, n, p, &cp);
                if (!is_ws(cp)) break;
                ms = p;
            }
        }
        if (a->rstrip) {
            while (me < n) {
                int32_t cp;
                int k2 = dec(s, n, me, &cp);
                if (!is_ws(cp)) break;
                me += (size_t)k2;
            }
        }
        rc = encode_plain(t, s + seg, ms - seg, (int32_t)seg, out, err);
        if (rc == AS_OK) rc = tok_ids_push(out, a->id, (int32_t)ms, (int32_t)me, err);
        seg = i = me;
    }
    if (rc == AS_OK) rc = encode_plain(t, s + seg, n - seg, (int32_t)seg, out, err);
    if (rc == AS_OK && tx.os) {
        for (int k = n0; k < out->n; k++) {
            int32_t a = out->start[k], b = out->end[k];
            out->start[k] = a < (int32_t)tx.n ? tx.os[a] : (int32_t)len;
            out->end[k] = b > 0 ? tx.oe[b - 1] : 0;
        }
    }
    text_free(&tx);
    return rc;
}

as_status tok_encode_raw(const tok_tokenizer *t, const char *text, tok_ids *out, as_error *err) {
    ASSERT(t && out);
    if (!text) return as_err_set(err, AS_ERR_INPUT, "text is empty");
    size_t len = strlen(text);
    if (len > TOK_MAX_TEXT_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "text is %zu bytes, over the limit of %u", len,
                          TOK_MAX_TEXT_BYTES);
    return encode_text(t, text, len, out, NULL, err);
}

/* HF byte_level.rs process_offsets: drop the leading / trailing spaces of each token
 * from its offsets. HF counts them in the token's string: 'Ġ' or whitespace chars of a
 * vocabulary piece, or, for an added token, of the text it covers (with lstrip /
 * rstrip that includes the stripped whitespace). Counts are applied as bytes. */
static void trim_offsets(const tok_tokenizer *t, tok_ids *x, const char *text, size_t len) {
    for (int i = 0; i < x->n; i++) {
        const char *p;
        size_t n;
        int is_added = added_by_id(t, x->ids[i]) != NULL;
        if (is_added) {
            if (x->start[i] < 0 || (size_t)x->end[i] > len || x->start[i] > x->end[i]) continue;
            p = text + x->start[i];
            n = (size_t)(x->end[i] - x->start[i]);
        } else {
            p = tok_id_to_piece(t, x->ids[i]);
            if (!p) continue;
            n = strlen(p);
        }
        size_t lead = 0, trail = 0, pos = 0;
        while (pos < n) {
            int32_t cp;
            int k = dec(p, n, pos, &cp);
            if (cp != 0x120 && !is_ws(cp)) break;
            pos += (size_t)k;
            lead += is_added ? (size_t)k : 1;
        }
        size_t q = n;
        while (q > pos) {
            size_t pq = prev_char(p, q);
            int32_t cp;
            dec(p, n, pq, &cp);
            if (cp != 0x120 && !is_ws(cp)) break;
            trail += is_added ? q - pq : 1;
            q = pq;
        }
        if (lead > 0) {
            int is_first = i == 0 || x->start[i] == 0;
            if (is_first && t->trim_prefix_space && lead == 1) lead = 0;
            int32_t s = x->start[i] + (int32_t)lead;
            x->start[i] = s < x->end[i] ? s : x->end[i];
        }
        if (trail > 0 && x->end[i] >= (int32_t)trail) {
            int32_t e = x->end[i] - (int32_t)trail;
            x->end[i] = e > x->start[i] ? e : x->start[i];
        }
    }
}

/* Letter / number / other class of a char, for BPE word boundaries. */
static int char_class(int32_t cp) {
    if (is_ws(cp)) return 0;
    utf8proc_category_t c = utf8proc_category(cp);
    if (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) return 1;
    if (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO) return 2;
    return 3;
}

/* 1 when token k of x continues the pre-tokenized word of token k - 1. WordPiece: the
 * piece carries the continuation prefix. Byte-level BPE (GPT-2-style splits): judged
 * from the text at the tokens' offsets (approximate for other split patterns). */
static int same_word(const tok_tokenizer *t, const tok_ids *x, int k, const char *text,
                     size_t len) {
    if (added_by_id(t, x->ids[k]) || added_by_id(t, x->ids[k - 1])) return 0;
    if (t->kind == KIND_WORDPIECE) {
        const char *p = tok_id_to_piece(t, x->ids[k]);
        size_t pl = strlen(t->wp.continuing_prefix);
        return p && pl > 0 && strncmp(p, t->wp.continuing_prefix, pl) == 0;
    }
    if (t->spm) {
        const char *p0 = tok_id_to_piece(t, x->ids[k - 1]), *p1 = tok_id_to_piece(t, x->ids[k]);
        return p0 && p1 && !tok_spm_word_start(t->spm, p0, p1);
    }
    int32_t s = x->start[k], e = x->end[k - 1];
    if (s < 0 || e <= 0 || (size_t)s >= len || (size_t)e > len) return 0;
    int32_t cur, prev;
    dec(text, len, (size_t)s, &cur);
    dec(text, len, prev_char(text, (size_t)e), &prev);
    int cc = char_class(cur), pc = char_class(prev);
    if (cc == 0) return pc == 0;                  /* a whitespace run */
    if (prev == ' ') return x->start[k] == x->end[k - 1]; /* " ?\p{L}+": the space leads */
    return cc == pc;
}

/* Length of x cut after max_len tokens, keeping the rest of the word in progress. */
static int cut_at_word(const tok_tokenizer *t, const tok_ids *x, const char *text, size_t len,
                       int max_len) {
    if (x->n <= max_len) return x->n;
    int k = max_len < 1 ? 1 : max_len;
    while (k < x->n && same_word(t, x, k, text, len)) k++;
    return k;
}

static as_status check_text(const char *text, size_t len, const char *which, as_error *err) {
    if (!text || len == 0) return as_err_set(err, AS_ERR_INPUT, "%s is empty", which);
    if (len > TOK_MAX_TEXT_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "%s is %zu bytes, over the limit of %u", which, len,
                          TOK_MAX_TEXT_BYTES);
    return AS_OK;
}

static void add_warning(as_encoding *out, const char *msg) {
    out->n_warnings++;
    snprintf(out->warning, sizeof out->warning, "%s", msg);
}

as_status tok_encode(const tok_tokenizer *t, const char *text_a, const char *text_b, int max_len,
                     int truncate, as_encoding *out, as_error *err) {
    return tok_encode_n(t, text_a, text_a ? strlen(text_a) : 0, text_b,
                        text_b ? strlen(text_b) : 0, max_len, truncate, out, err);
}

as_status tok_encode_target(const tok_tokenizer *t, const char *text, int max_len, int truncate, as_encoding *out,
                            as_error *err) {
    ASSERT(t);
    if (!t->spm_target) return tok_encode(t, text, NULL, max_len, truncate, out, err);
    tok_tokenizer view = *t; /* the same tokenizer with the target's model; borrows everything */
    view.spm = t->spm_target;
    return tok_encode(&view, text, NULL, max_len, truncate, out, err);
}

as_status tok_encode_n(const tok_tokenizer *t, const char *text_a, size_t la, const char *text_b,
                       size_t lb, int max_len, int truncate, as_encoding *out, as_error *err) {
    ASSERT(t && out);
    memset(out, 0, sizeof *out);
    tok_ids a = {0}, b = {0};
    as_status rc;
    int bad_a = 0, bad_b = 0;
    if ((rc = check_text(text_a, la, "text", err)) != AS_OK) return rc;
    if (text_b && (rc = check_text(text_b, lb, "second text", err)) != AS_OK) return rc;
    if ((rc = encode_text(t, text_a, la, &a, &bad_a, err)) != AS_OK) goto cleanup;
    if (text_b && (rc = encode_text(t, text_b, lb, &b, &bad_b, err)) != AS_OK) goto cleanup;
    if (t->trim_offsets && t->kind == KIND_BPE) {
        trim_offsets(t, &a, text_a, la);
        if (text_b) trim_offsets(t, &b, text_b, lb);
    }
    const tpl_item *tpl = text_b ? t->pair : t->single;
    int n_tpl = text_b ? t->n_pair : t->n_single;
    int n_spec = text_b ? t->n_tpl_special_pair : t->n_tpl_special_single;
    long total = (long)a.n + b.n + n_spec;
    if (max_len > 0 && total > max_len) {
        if (!truncate) {
            rc = as_err_set(err, AS_ERR_INPUT,
                            "input is %ld tokens (with %d special), over the maximum of %d; "
                            "shorten it or enable truncation",
                            total, n_spec, max_len);
            goto cleanup;
        }
        /* HF tokenizers utils/truncation.rs, LongestFirst: keep is split between the
         * two sequences, the shorter keeping all it can. */
        int keep = max_len - n_spec;
        if (keep < 0) keep = 0;
        if (!text_b) {
            if (a.n > keep) a.n = keep;
        } else {
            /* tokenizers 0.23 stops encoding each sequence once it holds max_len tokens,
             * finishing the word in progress; only then are the two balanced. (Observed
             * with its npm build on 1,500 SST-2 pairs and all small length grids.) */
            a.n = cut_at_word(t, &a, text_a, la, max_len);
            b.n = cut_at_word(t, &b, text_b, lb, max_len);
            int n1 = a.n, n2 = b.n, swap = 0;
            if (n1 > n2) {
                int tmp = n1;
                n1 = n2;
                n2 = tmp;
                swap = 1;
            }
            if (n1 > keep) n2 = n1;
            else n2 = n1 > keep - n1 ? n1 : keep - n1;
            if (n1 + n2 > keep) {
                n1 = keep / 2;
                n2 = n1 + keep % 2;
            }
            if (swap) {
                int tmp = n1;
                n1 = n2;
                n2 = tmp;
            }
            if (a.n > n1) a.n = n1;
            if (b.n > n2) b.n = n2;
        }
        char msg[160];
        snprintf(msg, sizeof msg, "input truncated from %ld to %ld tokens (max_len %d)", total,
                 (long)a.n + b.n + n_spec, max_len);
        add_warning(out, msg);
    }
    if (bad_a || bad_b) {
        char msg[160];
        snprintf(msg, sizeof msg, "invalid UTF-8: %d byte sequence(s) replaced by U+FFFD",
                 bad_a + bad_b);
        add_warning(out, msg);
    }
    int T = a.n + b.n + n_spec;
    if (T == 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "the text gives no tokens with this tokenizer (it has only "
                                           "characters the tokenizer removes, and no special tokens)");
        goto cleanup;
    }
    size_t nT = (size_t)(T > 0 ? T : 1);
    out->ids = as_malloc_array(nT, sizeof *out->ids);
    out->type_ids = as_malloc_array(nT, sizeof *out->type_ids);
    out->mask = as_malloc_array(nT, sizeof *out->mask);
    out->start = as_malloc_array(nT, sizeof *out->start);
    out->end = as_malloc_array(nT, sizeof *out->end);
    out->seq = as_malloc_array(nT, sizeof *out->seq);
    out->pieces = as_calloc(nT, sizeof *out->pieces);
    if (!out->ids || !out->type_ids || !out->mask || !out->start || !out->end || !out->seq ||
        !out->pieces) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "encoding: out of memory");
        goto cleanup;
    }
    int w = 0;
    for (int k = 0; k < n_tpl; k++) {
        const tpl_item *it = &tpl[k];
        if (it->seq < 0) {
            out->ids[w] = it->id;
            out->type_ids[w] = it->type_id;
            out->start[w] = out->end[w] = -1;
            out->seq[w] = -1;
            w++;
            continue;
        }
        const tok_ids *x = it->seq == 0 ? &a : &b;
        for (int i = 0; i < x->n; i++, w++) {
            out->ids[w] = x->ids[i];
            out->type_ids[w] = it->type_id;
            out->start[w] = x->start[i];
            out->end[w] = x->end[i];
            out->seq[w] = it->seq;
        }
    }
    ASSERT(w == T);
    out->n = T;
    for (int i = 0; i < T; i++) {
        out->mask[i] = 1;
        const char *p = tok_id_to_piece(t, out->ids[i]);
        out->pieces[i] = as_strdup(p ? p : "");
        if (!out->pieces[i]) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "encoding: out of memory");
            goto cleanup;
        }
    }
    rc = AS_OK;
cleanup:
    tok_ids_free(&a);
    tok_ids_free(&b);
    if (rc != AS_OK) as_encoding_free(out);
    return rc;
}

/* ---- loading: JSON helpers -------------------------------------------------------------- */

static as_status load_json(const char *path, json_t **out, as_error *err) {
    char *buf = NULL;
    size_t n = 0;
    *out = NULL;
    as_status rc = as_read_file(path, TOK_MAX_FILE_BYTES, &buf, &n, err);
    if (rc != AS_OK) return rc;
    json_error_t je;
    json_t *root = as_json_loadb_hf(buf, n, JSON_ALLOW_NUL, &je);
    free(buf);
    if (!root)
        return as_err_set(err, AS_ERR_INPUT, "%s: bad JSON at line %d: %s", path, je.line, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return as_err_set(err, AS_ERR_INPUT, "%s: top level is not a JSON object", path);
    }
    *out = root;
    return AS_OK;
}

/* obj[key] as a bool: 1/0, or dflt when absent or null; -1 when another type. */
static int jbool(const json_t *obj, const char *key, int dflt) {
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return dflt;
    if (json_is_boolean(v)) return json_is_true(v);
    return -1;
}

/* A token name given as "text" or {"content": "text"}; NULL otherwise. */
static const char *jtoken_name(const json_t *v) {
    if (json_is_string(v)) return json_string_value(v);
    if (json_is_object(v)) {
        json_t *c = json_object_get(v, "content");
        if (json_is_string(c)) return json_string_value(c);
    }
    return NULL;
}

/* ---- loading: specials and templates ------------------------------------------------------ */

static const char *const k_special_keys[TOK_SP_COUNT] = {
    "cls_token", "sep_token", "pad_token", "unk_token", "mask_token", "bos_token", "eos_token"};

/* Special-token names from special_tokens_map.json / tokenizer_config.json (either may
 * be absent); names[i] stays NULL when neither says. Strings are copied into buf. */
typedef struct {
    char names[TOK_SP_COUNT][128];
    int have[TOK_SP_COUNT];
} special_names;

static as_status read_special_names(const char *dir, special_names *sn, as_error *err) {
    memset(sn, 0, sizeof *sn);
    static const char *const files[2] = {"special_tokens_map.json", "tokenizer_config.json"};
    for (int f = 0; f < 2; f++) {
        char path[4096];
        as_status rc = as_path_join(path, sizeof path, dir, files[f], err);
        if (rc != AS_OK) return rc;
        if (!as_file_exists(path)) continue;
        json_t *root = NULL;
        rc = load_json(path, &root, err);
        if (rc != AS_OK) return rc;
        for (int i = 0; i < TOK_SP_COUNT; i++) {
            if (sn->have[i]) continue;
            const char *nm = jtoken_name(json_object_get(root, k_special_keys[i]));
            if (nm && strlen(nm) < sizeof sn->names[i]) {
                strcpy(sn->names[i], nm);
                sn->have[i] = 1;
            }
        }
        json_decref(root);
    }
    return AS_OK;
}

static int32_t lookup_any(const tok_tokenizer *t, const char *s) {
    return s ? tok_piece_to_id(t, s) : -1;
}

/* Fills t->special from the named files, else the conventional names. */
static void resolve_specials(tok_tokenizer *t, const special_names *sn) {
    static const char *const wp_default[TOK_SP_COUNT][2] = {
        {"[CLS]", NULL}, {"[SEP]", NULL}, {"[PAD]", NULL}, {"[UNK]", NULL},
        {"[MASK]", NULL}, {NULL, NULL}, {NULL, NULL}};
    static const char *const bpe_default[TOK_SP_COUNT][2] = {
        {"<s>", NULL}, {"</s>", NULL}, {"<pad>", NULL}, {"<unk>", "<|endoftext|>"},
        {"<mask>", NULL}, {"<s>", "<|endoftext|>"}, {"</s>", "<|endoftext|>"}};
    for (int i = 0; i < TOK_SP_COUNT; i++) {
        int32_t id = -1;
        if (sn && sn->have[i]) id = lookup_any(t, sn->names[i]);
        const char *const *d = t->kind != KIND_WORDPIECE ? bpe_default[i] : wp_default[i];
        for (int k = 0; k < 2 && id < 0; k++) id = lookup_any(t, d[k]);
        t->special[i] = id;
    }
    if (t->kind == KIND_WORDPIECE) t->special[TOK_SP_UNK] = t->wp.unk_id;
}

static void tpl_count(tok_tokenizer *t) {
    t->n_tpl_special_single = t->n_tpl_special_pair = 0;
    for (int i = 0; i < t->n_single; i++) t->n_tpl_special_single += t->single[i].seq < 0;
    for (int i = 0; i < t->n_pair; i++) t->n_tpl_special_pair += t->pair[i].seq < 0;
}

static void tpl_add(tpl_item *tpl, int *n, int seq, int type_id, int32_t id) {
    ASSERT(*n < TOK_TPL_MAX);
    tpl[*n].seq = (int8_t)seq;
    tpl[*n].type_id = (int8_t)type_id;
    tpl[*n].id = id;
    (*n)++;
}

/* BertProcessing: [CLS] A [SEP] / [CLS] A [SEP] B [SEP] (B [SEP] type 1). */
static void tpl_bert(tok_tokenizer *t, int32_t cls, int32_t sep) {
    t->n_single = t->n_pair = 0;
    tpl_add(t->single, &t->n_single, -1, 0, cls);
    tpl_add(t->single, &t->n_single, 0, 0, 0);
    tpl_add(t->single, &t->n_single, -1, 0, sep);
    tpl_add(t->pair, &t->n_pair, -1, 0, cls);
    tpl_add(t->pair, &t->n_pair, 0, 0, 0);
    tpl_add(t->pair, &t->n_pair, -1, 0, sep);
    tpl_add(t->pair, &t->n_pair, 1, 1, 0);
    tpl_add(t->pair, &t->n_pair, -1, 1, sep);
    tpl_count(t);
}

/* RobertaProcessing: <s> A </s> / <s> A </s> </s> B </s>, all type 0. */
static void tpl_roberta(tok_tokenizer *t, int32_t cls, int32_t sep) {
    t->n_single = t->n_pair = 0;
    tpl_add(t->single, &t->n_single, -1, 0, cls);
    tpl_add(t->single, &t->n_single, 0, 0, 0);
    tpl_add(t->single, &t->n_single, -1, 0, sep);
    tpl_add(t->pair, &t->n_pair, -1, 0, cls);
    tpl_add(t->pair, &t->n_pair, 0, 0, 0);
    tpl_add(t->pair, &t->n_pair, -1, 0, sep);
    tpl_add(t->pair, &t->n_pair, -1, 0, sep);
    tpl_add(t->pair, &t->n_pair, 1, 0, 0);
    tpl_add(t->pair, &t->n_pair, -1, 0, sep);
    tpl_count(t);
}

/* No specials: A / A B, type ids 0. */
static void tpl_plain(tok_tokenizer *t) {
    t->n_single = t->n_pair = 0;
    tpl_add(t->single, &t->n_single, 0, 0, 0);
    tpl_add(t->pair, &t->n_pair, 0, 0, 0);
    tpl_add(t->pair, &t->n_pair, 1, 0, 0);
    tpl_count(t);
}

/* The default template for cfg's architecture (or, without cfg, the tokenizer kind). */
static as_status tpl_default(tok_tokenizer *t, const as_config *cfg, const char *file,
                             as_error *err) {
    int arch;
    if (cfg) arch = (int)cfg->arch;
    else if (t->kind == KIND_WORDPIECE) arch = ARCH_BERT;
    else arch = (tok_vocab_get(t->vocab, "<s>", 3) >= 0 && tok_vocab_get(t->vocab, "</s>", 4) >= 0)
                    ? ARCH_ROBERTA
                    : ARCH_GPT2;
    if (arch == ARCH_GPT2 || arch == ARCH_LLAMA) { /* decoders: BOS comes from tokenizer_config.json */
        tpl_plain(t);
        return AS_OK;
    }
    int32_t cls = t->special[TOK_SP_CLS], sep = t->special[TOK_SP_SEP];
    if (cls < 0 || sep < 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: the %s template needs %s and %s tokens, which the vocabulary lacks",
                          file, arch == ARCH_ROBERTA ? "RoBERTa" : "BERT",
                          arch == ARCH_ROBERTA ? "<s>" : "[CLS]",
                          arch == ARCH_ROBERTA ? "</s>" : "[SEP]");
    if (arch == ARCH_ROBERTA) tpl_roberta(t, cls, sep);
    else tpl_bert(t, cls, sep);
    return AS_OK;
}

/* transformers' LlamaTokenizerFast / GemmaTokenizerFast rebuild the template from
 * tokenizer_config.json when they load (update_post_processor): single
 * [bos:0] $A:0 [eos:0], pair single + [bos:1] $B:1 [eos:1], the brackets present when
 * add_bos_token (default true) / add_eos_token (default false) say so. Other tokenizer
 * classes keep tokenizer.json's post_processor. */
static as_status tpl_llama_config(tok_tokenizer *t, const char *dir, as_error *err) {
    static const char *const classes[] = {"LlamaTokenizer", "LlamaTokenizerFast", "CodeLlamaTokenizer",
                                          "CodeLlamaTokenizerFast", "GemmaTokenizer", "GemmaTokenizerFast"};
    char path[4096];
    json_t *conf = NULL;
    as_status rc = as_path_join(path, sizeof path, dir, "tokenizer_config.json", err);
    if (rc != AS_OK || !as_file_exists(path)) return rc;
    if ((rc = load_json(path, &conf, err)) != AS_OK) return rc;
    const char *cls = json_string_value(json_object_get(conf, "tokenizer_class"));
    int known = 0;
    for (size_t i = 0; cls && i < sizeof classes / sizeof classes[0]; i++) known |= strcmp(cls, classes[i]) == 0;
    if (!known) goto cleanup;
    int bos = jbool(conf, "add_bos_token", 1), eos = jbool(conf, "add_eos_token", 0);
    if (bos < 0 || eos < 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: add_bos_token / add_eos_token is not a boolean", path);
        goto cleanup;
    }
    /* the names: special_tokens_map.json, tokenizer_config.json, else the class's defaults */
    special_names sn;
    if ((rc = read_special_names(dir, &sn, err)) != AS_OK) goto cleanup;
    int gemma = strncmp(cls, "Gemma", 5) == 0;
    const char *dflt[2] = {gemma ? "<bos>" : "<s>", gemma ? "<eos>" : "</s>"};
    int32_t ids[2] = {-1, -1};
    const char *keys[2] = {"bos_token", "eos_token"};
    for (int k = 0; k < 2; k++) {
        if (!(k == 0 ? bos : eos)) continue;
        int which = k == 0 ? TOK_SP_BOS : TOK_SP_EOS;
        const char *nm = sn.have[which] ? sn.names[which] : dflt[k];
        ids[k] = nm ? tok_piece_to_id(t, nm) : -1;
        if (ids[k] < 0) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: add_%.3s_token is true but %s \"%.40s\" is not a token", path,
                            keys[k], keys[k], nm ? nm : "(none)");
            goto cleanup;
        }
    }
    t->n_single = t->n_pair = 0;
    for (int seq = 0; seq < 2; seq++) {
        if (bos) {
            if (seq == 0) tpl_add(t->single, &t->n_single, -1, 0, ids[0]);
            tpl_add(t->pair, &t->n_pair, -1, seq, ids[0]);
        }
        if (seq == 0) tpl_add(t->single, &t->n_single, 0, 0, 0);
        tpl_add(t->pair, &t->n_pair, seq, seq, 0);
        if (eos) {
            if (seq == 0) tpl_add(t->single, &t->n_single, -1, 0, ids[1]);
            tpl_add(t->pair, &t->n_pair, -1, seq, ids[1]);
        }
    }
    tpl_count(t);
cleanup:
    json_decref(conf);
    return rc;
}

/* ["[SEP]", 102] of BertProcessing / RobertaProcessing. */
static as_status parse_tok_pair(const json_t *v, const char *what, const char *file, int32_t *id,
                                as_error *err) {
    if (!json_is_array(v) || json_array_size(v) != 2 ||
        !json_is_integer(json_array_get(v, 1)))
        return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.%s is not [token, id]", file, what);
    json_int_t x = json_integer_value(json_array_get(v, 1));
    if (x < 0 || x >= AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.%s: id %lld out of range", file,
                          what, (long long)x);
    *id = (int32_t)x;
    return AS_OK;
}

static as_status parse_template(tok_tokenizer *t, const json_t *pp, const char *key, tpl_item *tpl,
                                int *n, const char *file, as_error *err) {
    const json_t *arr = json_object_get(pp, key);
    const json_t *specials = json_object_get(pp, "special_tokens");
    *n = 0;
    if (!json_is_array(arr))
        return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.%s is not a list", file, key);
    size_t i;
    json_t *it;
    json_array_foreach(arr, i, it) {
        json_t *sp = json_object_get(it, "SpecialToken"), *sq = json_object_get(it, "Sequence");
        json_t *body = sp ? sp : sq;
        if (!json_is_object(body))
            return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.%s[%zu] is neither SpecialToken nor Sequence",
                              file, key, i);
        json_t *tid = json_object_get(body, "type_id");
        json_int_t type_id = json_is_integer(tid) ? json_integer_value(tid) : 0;
        if (type_id < 0 || type_id > 127)
            return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.%s[%zu]: bad type_id", file, key, i);
        const char *name = json_string_value(json_object_get(body, "id"));
        if (!name)
            return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.%s[%zu] has no id", file, key, i);
        if (sq) {
            int seq = strcmp(name, "A") == 0 ? 0 : strcmp(name, "B") == 0 ? 1 : -1;
            if (seq < 0)
                return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.%s[%zu]: sequence \"%.20s\" is not A or B",
                                  file, key, i, name);
            if (*n >= TOK_TPL_MAX)
                return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.%s is too long", file, key);
            tpl_add(tpl, n, seq, (int)type_id, 0);
            continue;
        }
        const json_t *st = json_object_get(specials, name);
        const json_t *ids = json_object_get(st, "ids");
        if (!json_is_array(ids))
            return as_err_set(err, AS_ERR_INPUT, "%s: post_processor: special token \"%.40s\" is not in special_tokens",
                              file, name);
        size_t j;
        json_t *idv;
        json_array_foreach(ids, j, idv) {
            json_int_t x = json_is_integer(idv) ? json_integer_value(idv) : -1;
            if (x < 0 || x >= AS_MAX_VOCAB || !tok_id_to_piece(t, (int32_t)x))
                return as_err_set(err, AS_ERR_INPUT, "%s: post_processor: special token \"%.40s\" has an unknown id",
                                  file, name);
            if (*n >= TOK_TPL_MAX)
                return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.%s is too long", file, key);
            tpl_add(tpl, n, -1, (int)type_id, (int32_t)x);
        }
    }
    return AS_OK;
}

/* Reads one post-processor object; *have_tpl is set when it defines a template. */
static as_status parse_post(tok_tokenizer *t, const json_t *pp, const char *file, int *have_tpl,
                            int depth, as_error *err) {
    if (!pp || json_is_null(pp)) return AS_OK;
    const char *type = json_string_value(json_object_get(pp, "type"));
    if (!type) return as_err_set(err, AS_ERR_INPUT, "%s: post_processor has no type", file);
    as_status rc;
    if (strcmp(type, "BertProcessing") == 0 || strcmp(type, "RobertaProcessing") == 0) {
        int32_t cls, sep;
        if ((rc = parse_tok_pair(json_object_get(pp, "cls"), "cls", file, &cls, err)) != AS_OK) return rc;
        if ((rc = parse_tok_pair(json_object_get(pp, "sep"), "sep", file, &sep, err)) != AS_OK) return rc;
        if (!tok_id_to_piece(t, cls) || !tok_id_to_piece(t, sep))
            return as_err_set(err, AS_ERR_INPUT, "%s: post_processor: cls/sep id not in the vocabulary", file);
        if (type[0] == 'B') {
            tpl_bert(t, cls, sep);
        } else {
            tpl_roberta(t, cls, sep);
            t->trim_offsets = jbool(pp, "trim_offsets", 1) == 1;
            t->trim_prefix_space = jbool(pp, "add_prefix_space", 1) == 1;
        }
        *have_tpl = 1;
    } else if (strcmp(type, "TemplateProcessing") == 0) {
        if ((rc = parse_template(t, pp, "single", t->single, &t->n_single, file, err)) != AS_OK)
            return rc;
        if ((rc = parse_template(t, pp, "pair", t->pair, &t->n_pair, file, err)) != AS_OK)
            return rc;
        for (int i = 0; i < t->n_single; i++)
            if (t->single[i].seq == 1)
                return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.single uses sequence B", file);
        tpl_count(t);
        *have_tpl = 1;
    } else if (strcmp(type, "ByteLevel") == 0) {
        t->trim_offsets = jbool(pp, "trim_offsets", 1) == 1;
        t->trim_prefix_space = jbool(pp, "add_prefix_space", 1) == 1;
    } else if (strcmp(type, "Sequence") == 0 && depth == 0) {
        json_t *list = json_object_get(pp, "processors");
        if (!json_is_array(list))
            return as_err_set(err, AS_ERR_INPUT, "%s: post_processor.processors is not a list", file);
        size_t i;
        json_t *it;
        json_array_foreach(list, i, it) {
            if ((rc = parse_post(t, it, file, have_tpl, depth + 1, err)) != AS_OK) return rc;
        }
    } else {
        return as_err_set(err, AS_ERR_INPUT, "%s: unsupported post_processor type \"%.40s\"", file, type);
    }
    return AS_OK;
}

/* ---- loading: tokenizer.json ------------------------------------------------------------------ */

static as_status vocab_from_object(tok_tokenizer *t, const json_t *vocab, const char *file,
                                   const char *field, as_error *err) {
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: missing or empty %s", file, field);
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach((json_t *)vocab, key, klen, val) {
        if (!json_is_integer(val))
            return as_err_set(err, AS_ERR_INPUT, "%s: %s[\"%.40s\"] is not an integer id", file, field, key);
        json_int_t id = json_integer_value(val);
        if (id < 0 || id >= AS_MAX_VOCAB)
            return as_err_set(err, AS_ERR_INPUT, "%s: %s[\"%.40s\"]: id %lld out of range [0, %d)", file,
                              field, key, (long long)id, AS_MAX_VOCAB);
        as_status rc = tok_vocab_set(t->vocab, key, klen, (int32_t)id, err);
        if (rc != AS_OK) return as_err_prefix(err, "%s: %s", file, field);
    }
    t->n_ids = tok_vocab_size(t->vocab);
    return AS_OK;
}

static as_status parse_bert_normalizer(tok_tokenizer *t, const json_t *nm, const char *file,
                                       as_error *err) {
    t->wp.clean_text = t->wp.handle_chinese_chars = t->wp.lowercase = t->wp.strip_accents = 0;
    if (!nm || json_is_null(nm)) return AS_OK;
    const char *type = json_string_value(json_object_get(nm, "type"));
    if (!type || strcmp(type, "BertNormalizer") != 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: unsupported normalizer \"%.40s\" for WordPiece", file,
                          type ? type : "?");
    int ct = jbool(nm, "clean_text", 1), hc = jbool(nm, "handle_chinese_chars", 1);
    int lc = jbool(nm, "lowercase", 1), sa = jbool(nm, "strip_accents", -2);
    if (ct < 0 || hc < 0 || lc < 0 || sa == -1)
        return as_err_set(err, AS_ERR_INPUT, "%s: normalizer: a BertNormalizer option is not a boolean", file);
    t->wp.clean_text = ct;
    t->wp.handle_chinese_chars = hc;
    t->wp.lowercase = lc;
    t->wp.strip_accents = sa == -2 ? lc : sa; /* null follows lowercase */
    return AS_OK;
}

static as_status parse_bpe_normalizer(tok_tokenizer *t, const json_t *nm, const char *file,
                                      as_error *err) {
    t->nfc = 0;
    if (!nm || json_is_null(nm)) return AS_OK;
    const char *type = json_string_value(json_object_get(nm, "type"));
    if (type && strcmp(type, "NFC") == 0) {
        t->nfc = 1;
        return AS_OK;
    }
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(nm, "normalizers");
        if (json_is_array(list) && json_array_size(list) == 0) return AS_OK;
        if (json_is_array(list) && json_array_size(list) == 1)
            return parse_bpe_normalizer(t, json_array_get(list, 0), file, err);
    }
    return as_err_set(err, AS_ERR_INPUT, "%s: unsupported normalizer \"%.40s\" for BPE (null or NFC only)",
                      file, type ? type : "?");
}

/* ByteLevel, or Sequence[Split(Regex, Isolated), ByteLevel(use_regex false)]. The
 * pattern returned points into the JSON document (or is TOK_GPT2_PATTERN). */
static as_status parse_bpe_pretok(const json_t *pt, const char *file, const char **pattern,
                                  int *prefix_space, as_error *err) {
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && strcmp(type, "ByteLevel") == 0) {
        if (jbool(pt, "use_regex", 1) != 1)
            return as_err_set(err, AS_ERR_INPUT, "%s: pre_tokenizer ByteLevel without use_regex needs a Split before it", file);
        *pattern = TOK_GPT2_PATTERN;
        *prefix_space = jbool(pt, "add_prefix_space", 1) == 1;
        return AS_OK;
    }
    if (type && strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(pt, "pretokenizers");
        if (json_is_array(list) && json_array_size(list) == 2) {
            json_t *sp = json_array_get(list, 0), *bl = json_array_get(list, 1);
            const char *t0 = json_string_value(json_object_get(sp, "type"));
            const char *t1 = json_string_value(json_object_get(bl, "type"));
            const char *re = json_string_value(json_object_get(json_object_get(sp, "pattern"), "Regex"));
            const char *beh = json_string_value(json_object_get(sp, "behavior"));
            if (t0 && t1 && strcmp(t0, "Split") == 0 && strcmp(t1, "ByteLevel") == 0 && re && beh &&
                strcmp(beh, "Isolated") == 0 && jbool(sp, "invert", 0) == 0 &&
                jbool(bl, "use_regex", 1) == 0) {
                *pattern = re;
                *prefix_space = jbool(bl, "add_prefix_space", 1) == 1;
                return AS_OK;
            }
        }
    }
    return as_err_set(err, AS_ERR_INPUT,
                      "%s: unsupported pre_tokenizer for BPE (ByteLevel, or Sequence[Split(Regex, Isolated), ByteLevel])",
                      file);
}

/* Splits "a b" (exactly one space) into two strings inside buf. */
static int split_merge(const char *s, const char **l, const char **r, char **own) {
    const char *sp = strchr(s, ' ');
    if (!sp || sp == s || !sp[1] || strchr(sp + 1, ' ')) return 0;
    size_t n = strlen(s);
    char *c = as_malloc(n + 1);
    if (!c) return 0;
    memcpy(c, s, n + 1);
    c[sp - s] = 0;
    *own = c;
    *l = c;
    *r = c + (sp - s) + 1;
    return 1;
}

static as_status build_bpe(tok_tokenizer *t, const char *const *ml, const char *const *mr,
                           int nm, const char *pattern, int prefix_space, const char *file,
                           as_error *err) {
    as_status rc = tok_bpe_init(t->vocab, ml, mr, nm, pattern, prefix_space, &t->bpe, err);
    if (rc != AS_OK) return as_err_prefix(err, "%s", file);
    return AS_OK;
}

/* Reads model.merges ("a b" strings or [a, b] pairs) and builds the model: spm.c's
 * when spm is not NULL, else byte-level BPE with pattern and prefix_space. */
static as_status bpe_merges_from_json(tok_tokenizer *t, const json_t *merges, const char *file,
                                      const char *pattern, int prefix_space, const tok_spm_opts *spm,
                                      as_error *err) {
    if (!json_is_array(merges))
        return as_err_set(err, AS_ERR_INPUT, "%s: model.merges is missing or not a list", file);
    size_t n = json_array_size(merges);
    if (n > (size_t)AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "%s: model.merges has %zu entries, over %d", file, n, AS_MAX_VOCAB);
    const char **ml = as_calloc(n + 1, sizeof *ml), **mr = as_calloc(n + 1, sizeof *mr);
    char **own = as_calloc(n + 1, sizeof *own);
    as_status rc = AS_OK;
    if (!ml || !mr || !own) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", file);
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        if (json_is_string(m)) {
            if (!split_merge(json_string_value(m), &ml[i], &mr[i], &own[i])) {
                rc = as_err_set(err, AS_ERR_INPUT, "%s: model.merges[%zu] is not \"left right\"", file, i);
                goto cleanup;
            }
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            ml[i] = json_string_value(json_array_get(m, 0));
            mr[i] = json_string_value(json_array_get(m, 1));
        } else {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: model.merges[%zu] is neither \"a b\" nor [a, b]", file, i);
            goto cleanup;
        }
    }
    if (spm) {
        rc = tok_spm_init(t->vocab, ml, mr, (int)n, spm, &t->spm, err);
        if (rc != AS_OK) as_err_prefix(err, "%s", file);
    } else {
        rc = build_bpe(t, ml, mr, (int)n, pattern, prefix_space, file, err);
    }
cleanup:
    if (own)
        for (size_t i = 0; i < n; i++) free(own[i]);
    free(own);
    free(ml);
    free(mr);
    return rc;
}

static as_status parse_added_tokens(tok_tokenizer *t, const json_t *arr, const char *file,
                                    as_error *err) {
    if (!arr || json_is_null(arr)) return AS_OK;
    if (!json_is_array(arr))
        return as_err_set(err, AS_ERR_INPUT, "%s: added_tokens is not a list", file);
    size_t i;
    json_t *it;
    json_array_foreach(arr, i, it) {
        json_t *c = json_object_get(it, "content"), *id = json_object_get(it, "id");
        if (!json_is_string(c) || !json_is_integer(id))
            return as_err_set(err, AS_ERR_INPUT, "%s: added_tokens[%zu] lacks content or id", file, i);
        json_int_t x = json_integer_value(id);
        if (x < 0 || x >= AS_MAX_VOCAB)
            return as_err_set(err, AS_ERR_INPUT, "%s: added_tokens[%zu]: id %lld out of range", file, i,
                              (long long)x);
        as_status rc = added_push(t, json_string_value(c), json_string_length(c), (int32_t)x,
                                  jbool(it, "special", 0) == 1, jbool(it, "lstrip", 0) == 1,
                                  jbool(it, "rstrip", 0) == 1, jbool(it, "single_word", 0) == 1,
                                  jbool(it, "normalized", 1) == 1, file, err);
        if (rc != AS_OK) return rc;
    }
    return AS_OK;
}

/* ---- loading: SentencePiece-style BPE ------------------------------------------------------ */

/* A JSON string option of at most TOK_SPM_MAX_STR - 1 bytes (no NUL) copied into out. */
static as_status spm_str(const json_t *v, char out[TOK_SPM_MAX_STR], int allow_empty, const char *file,
                         const char *what, as_error *err) {
    const char *s = json_string_value(v);
    size_t n = s ? json_string_length(v) : 0;
    if (!s || n != strlen(s) || n >= TOK_SPM_MAX_STR || (!allow_empty && n == 0))
        return as_err_set(err, AS_ERR_INPUT, "%s: %s is not a string of 1 to %d bytes", file, what, TOK_SPM_MAX_STR - 1);
    memcpy(out, s, n + 1);
    return AS_OK;
}

#define TOK_REGEX_MAX_BYTES 256 /* a Replace normalizer's Regex pattern */

/* The SentencePiece normalizers beyond Prepend / Replace(String): Replace(Regex),
 * Precompiled, Strip, Lowercase, StripAccents, NFC / NFD / NFKC / NFKD. The step's
 * charsmap or compiled regex is owned by o (tok_spm_opts_free). */
static as_status spm_normalizer_more(const json_t *nm, const char *type, tok_spm_opts *o, const char *file,
                                     as_error *err) {
    static const char *const simple[] = {"Lowercase", "StripAccents", "NFC", "NFD", "NFKC", "NFKD"};
    int kind = -1, arg = 0;
    for (int k = 0; type && k < 6; k++)
        if (strcmp(type, simple[k]) == 0) kind = k == 0 ? TOK_SPM_LOWERCASE : k == 1 ? TOK_SPM_STRIP_ACCENTS : TOK_SPM_UNICODE, arg = k - 2;
    if (type && strcmp(type, "Strip") == 0) {
        int l = jbool(nm, "strip_left", 1), r = jbool(nm, "strip_right", 1);
        if (l < 0 || r < 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: normalizer Strip: strip_left / strip_right is not a boolean", file);
        kind = TOK_SPM_STRIP;
        arg = l | r << 1;
    }
    if (type && (strcmp(type, "Precompiled") == 0 || strcmp(type, "Replace") == 0)) kind = type[0] == 'P' ? TOK_SPM_PRECOMPILED : TOK_SPM_REPLACE_REGEX;
    if (kind < 0)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: unsupported normalizer \"%.40s\" for a SentencePiece tokenizer (Prepend, Replace, Precompiled, "
                          "Strip, Lowercase, StripAccents, NFC, NFD, NFKC, NFKD, Sequence)",
                          file, type ? type : "?");
    if (o->n_ops >= TOK_SPM_MAX_OPS)
        return as_err_set(err, AS_ERR_INPUT, "%s: normalizer has more than %d steps", file, TOK_SPM_MAX_OPS);
    tok_spm_op *op = &o->ops[o->n_ops];
    memset(op, 0, sizeof *op);
    op->kind = kind;
    op->arg = arg;
    if (kind == TOK_SPM_PRECOMPILED) {
        const json_t *cm = json_object_get(nm, "precompiled_charsmap");
        if (!json_is_string(cm))
            return as_err_set(err, AS_ERR_INPUT, "%s: normalizer Precompiled: precompiled_charsmap is not a string", file);
        tok_charsmap *c = NULL;
        as_status rc = tok_charsmap_init(json_string_value(cm), json_string_length(cm), &c, err);
        if (rc != AS_OK) return as_err_prefix(err, "%s: normalizer", file);
        op->own = c;
    } else if (kind == TOK_SPM_REPLACE_REGEX) {
        const json_t *pat = json_object_get(json_object_get(nm, "pattern"), "Regex");
        size_t pn = json_string_length(pat);
        if (!json_is_string(pat) || pn == 0 || pn > TOK_REGEX_MAX_BYTES || strlen(json_string_value(pat)) != pn)
            return as_err_set(err, AS_ERR_INPUT, "%s: normalizer Replace: pattern is neither a String nor a Regex of 1 to %d bytes",
                              file, TOK_REGEX_MAX_BYTES);
        as_status rc = spm_str(json_object_get(nm, "content"), op->to, 1, file, "normalizer Replace.content", err);
        if (rc != AS_OK) return rc;
        int ec;
        PCRE2_SIZE eo;
        op->own = pcre2_compile((PCRE2_SPTR)json_string_value(pat), pn, PCRE2_UTF, &ec, &eo, NULL);
        if (!op->own)
            return as_err_set(err, AS_ERR_INPUT, "%s: normalizer Replace: Regex \"%.40s\" does not compile (at %zu)", file,
                              json_string_value(pat), (size_t)eo);
    }
    o->n_ops++;
    return AS_OK;
}

/* One normalizer of a SentencePiece-style BPE: Prepend, Replace(String), Sequence of them. */
static as_status spm_normalizer(const json_t *nm, tok_spm_opts *o, int depth, const char *file, as_error *err) {
    if (!nm || json_is_null(nm)) return AS_OK;
    const char *type = json_string_value(json_object_get(nm, "type"));
    as_status rc;
    if (type && strcmp(type, "Sequence") == 0 && depth == 0) {
        const json_t *list = json_object_get(nm, "normalizers");
        if (!json_is_array(list))
            return as_err_set(err, AS_ERR_INPUT, "%s: normalizer.normalizers is not a list", file);
        size_t i;
        json_t *it;
        json_array_foreach(list, i, it) {
            if ((rc = spm_normalizer(it, o, depth + 1, file, err)) != AS_OK) return rc;
        }
        return AS_OK;
    }
    if (type && (strcmp(type, "Prepend") == 0 || strcmp(type, "Replace") == 0)) {
        if (o->n_ops >= TOK_SPM_MAX_OPS)
            return as_err_set(err, AS_ERR_INPUT, "%s: normalizer has more than %d steps", file, TOK_SPM_MAX_OPS);
        tok_spm_op *op = &o->ops[o->n_ops];
        if (type[0] == 'P') {
            op->kind = TOK_SPM_PREPEND;
            rc = spm_str(json_object_get(nm, "prepend"), op->to, 0, file, "normalizer Prepend.prepend", err);
        } else {
            op->kind = TOK_SPM_REPLACE;
            const json_t *pat = json_object_get(nm, "pattern");
            if (!json_is_string(json_object_get(pat, "String"))) return spm_normalizer_more(nm, type, o, file, err);
            rc = spm_str(json_object_get(pat, "String"), op->from, 0, file, "normalizer Replace.pattern", err);
            if (rc == AS_OK) rc = spm_str(json_object_get(nm, "content"), op->to, 1, file, "normalizer Replace.content", err);
        }
        if (rc != AS_OK) return rc;
        o->n_ops++;
        return AS_OK;
    }
    return spm_normalizer_more(nm, type, o, file, err);
}

static as_status spm_pretok(const json_t *pt, tok_spm_opts *o, int depth, const char *file, as_error *err) {
    if (!pt || json_is_null(pt)) return AS_OK;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && strcmp(type, "Sequence") == 0 && depth == 0) {
        const json_t *list = json_object_get(pt, "pretokenizers");
        size_t n = json_array_size(list), i = 0;
        const char *t0 = json_string_value(json_object_get(json_array_get(list, 0), "type"));
        if (n > 0 && t0 && strcmp(t0, "WhitespaceSplit") == 0) o->ws_split = 1, i = 1; /* T5: WhitespaceSplit, Metaspace */
        if (json_is_array(list) && n == i) return AS_OK;
        if (json_is_array(list) && n == i + 1)
            return spm_pretok(json_array_get(list, i), o, depth + 1, file, err);
    } else if (type && strcmp(type, "WhitespaceSplit") == 0 && depth == 0) {
        o->ws_split = 1;
        return AS_OK;
    } else if (type && strcmp(type, "Metaspace") == 0) {
        o->pre = TOK_SPM_PRE_METASPACE;
        as_status rc = spm_str(json_object_get(pt, "replacement"), o->pre_str, 0, file,
                               "pre_tokenizer Metaspace.replacement", err);
        if (rc != AS_OK) return rc;
        const char *sc = json_string_value(json_object_get(pt, "prepend_scheme"));
        int aps = jbool(pt, "add_prefix_space", 1); /* files older than prepend_scheme */
        int split = jbool(pt, "split", 1);
        if (sc ? strcmp(sc, "always") && strcmp(sc, "first") && strcmp(sc, "never") : aps < 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: pre_tokenizer Metaspace: prepend_scheme \"%.20s\" is not always, first or never",
                              file, sc ? sc : "?");
        if (split < 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: pre_tokenizer Metaspace: split is not a boolean", file);
        o->scheme = sc ? (sc[0] == 'a' ? TOK_SPM_ALWAYS : sc[0] == 'f' ? TOK_SPM_FIRST : TOK_SPM_NEVER)
                       : (aps ? TOK_SPM_ALWAYS : TOK_SPM_NEVER);
        o->split = split;
        return AS_OK;
    } else if (type && strcmp(type, "Split") == 0) {
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        const json_t *pat = json_object_get(json_object_get(pt, "pattern"), "String");
        const char *beh = json_string_value(json_object_get(pt, "behavior"));
        if (!json_is_string(pat) || jbool(pt, "invert", 0) != 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: pre_tokenizer Split with byte_fallback BPE: only a String pattern, not inverted",
                              file);
        o->pre = TOK_SPM_PRE_SPLIT;
        as_status rc = spm_str(pat, o->pre_str, 0, file, "pre_tokenizer Split.pattern", err);
        if (rc != AS_OK) return rc;
        o->behavior = -1;
        for (int k = 0; beh && k < 5; k++)
            if (strcmp(beh, names[k]) == 0) o->behavior = k;
        if (o->behavior < 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: pre_tokenizer Split: unknown behavior \"%.30s\"", file, beh ? beh : "?");
        return AS_OK;
    }
    return as_err_set(err, AS_ERR_INPUT,
                      "%s: unsupported pre_tokenizer \"%.40s\" for a SentencePiece tokenizer (none, Metaspace, Split on a "
                      "string, WhitespaceSplit, or WhitespaceSplit then one of those)",
                      file, type ? type : "?");
}

/* What the decoder shows of a piece (tok_piece_display): Replace(String a, b) steps,
 * ByteFallback, a Metaspace decoder ("▁" -> " "); the rest (Fuse, Strip) joins tokens and
 * does not change a single piece's text. */
static void spm_decoder(tok_tokenizer *t, const json_t *d, int depth) {
    const char *type = json_string_value(json_object_get(d, "type"));
    if (!type) return;
    if (strcmp(type, "Sequence") == 0 && depth == 0) {
        size_t i;
        json_t *it;
        json_array_foreach(json_object_get(d, "decoders"), i, it) spm_decoder(t, it, depth + 1);
    } else if (strcmp(type, "ByteFallback") == 0) {
        t->disp_bytes = 1;
    } else if (strcmp(type, "Replace") == 0 && !t->disp_from[0]) {
        if (spm_str(json_object_get(json_object_get(d, "pattern"), "String"), t->disp_from, 0, "", "", NULL) != AS_OK ||
            spm_str(json_object_get(d, "content"), t->disp_to, 1, "", "", NULL) != AS_OK)
            t->disp_from[0] = t->disp_to[0] = 0;
    } else if (strcmp(type, "Metaspace") == 0 && !t->disp_from[0]) {
        if (spm_str(json_object_get(d, "replacement"), t->disp_from, 0, "", "", NULL) == AS_OK) strcpy(t->disp_to, " ");
        else t->disp_from[0] = 0;
    }
}

/* 1 when tokenizer.json describes SentencePiece-style BPE: byte_fallback, a Metaspace
 * pre-tokenizer, or a Prepend / Replace normalizer (none of which byte-level BPE uses). */
static int is_spm(const json_t *root, const json_t *model) {
    if (jbool(model, "byte_fallback", 0) == 1) return 1;
    const json_t *pt = json_object_get(root, "pre_tokenizer");
    const char *pty = json_string_value(json_object_get(pt, "type"));
    if (pty && strcmp(pty, "Sequence") == 0 && json_array_size(json_object_get(pt, "pretokenizers")) == 1)
        pty = json_string_value(json_object_get(json_array_get(json_object_get(pt, "pretokenizers"), 0), "type"));
    if (pty && strcmp(pty, "Metaspace") == 0) return 1;
    const json_t *nm = json_object_get(root, "normalizer");
    const char *nty = json_string_value(json_object_get(nm, "type"));
    if (nty && strcmp(nty, "Sequence") == 0 && json_array_size(json_object_get(nm, "normalizers")) > 0)
        nty = json_string_value(json_object_get(json_array_get(json_object_get(nm, "normalizers"), 0), "type"));
    return nty && (strcmp(nty, "Prepend") == 0 || strcmp(nty, "Replace") == 0);
}

/* The options of a SentencePiece-style BPE into *o (whose owned steps the caller frees
 * when no tok_spm took them), then the model. */
static as_status load_spm_opts(tok_tokenizer *t, const json_t *root, const json_t *m, const char *path,
                               tok_spm_opts *o, as_error *err) {
    o->unk_id = -1;
    as_status rc;
    if ((rc = spm_normalizer(json_object_get(root, "normalizer"), o, 0, path, err)) != AS_OK) return rc;
    if ((rc = spm_pretok(json_object_get(root, "pre_tokenizer"), o, 0, path, err)) != AS_OK) return rc;
    int bf = jbool(m, "byte_fallback", 0), fu = jbool(m, "fuse_unk", 0), im = jbool(m, "ignore_merges", 0);
    if (bf < 0 || fu < 0 || im < 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: model.byte_fallback / fuse_unk / ignore_merges is not a boolean", path);
    o->byte_fallback = bf;
    o->fuse_unk = fu;
    o->ignore_merges = im;
    const char *unk = json_string_value(json_object_get(m, "unk_token"));
    if (unk) {
        o->unk_id = tok_vocab_get(t->vocab, unk, strlen(unk));
        if (o->unk_id < 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: unk_token \"%.40s\" is not in model.vocab", path, unk);
    }
    /* the merges are read as for byte-level BPE, then handed to spm.c */
    if ((rc = bpe_merges_from_json(t, json_object_get(m, "merges"), path, NULL, 0, o, err)) != AS_OK) return rc;
    spm_decoder(t, json_object_get(root, "decoder"), 0);
    return AS_OK;
}

static as_status load_spm(tok_tokenizer *t, const json_t *root, const json_t *m, const char *path, as_error *err) {
    tok_spm_opts o;
    memset(&o, 0, sizeof o);
    as_status rc = load_spm_opts(t, root, m, path, &o, err);
    if (rc != AS_OK && !t->spm) tok_spm_opts_free(&o); /* tok_spm_init took them on success only */
    return rc;
}

/* The Unigram model: model.vocab [[piece, score], ...] (id = index), unk_id (null or
 * absent: none), byte_fallback; the SentencePiece normalizers and pre-tokenizers. */
static as_status load_unigram(tok_tokenizer *t, const json_t *root, const json_t *m, const char *path, as_error *err) {
    const json_t *vocab = json_object_get(m, "vocab");
    size_t n = json_array_size(vocab);
    if (!json_is_array(vocab) || n == 0 || n > (size_t)AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "%s: model.vocab is not a list of 1 to %d [piece, score] pairs", path, AS_MAX_VOCAB);
    const char **pc = as_malloc_array(n, sizeof *pc);
    size_t *pl = as_malloc_array(n, sizeof *pl);
    double *sc = as_malloc_array(n, sizeof *sc);
    tok_unigram *u = NULL;
    tok_spm_opts o;
    memset(&o, 0, sizeof o);
    as_status rc = AS_OK;
    if (!pc || !pl || !sc) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *it = json_array_get(vocab, i);
        const json_t *p = json_array_get(it, 0), *x = json_array_get(it, 1);
        if (json_array_size(it) != 2 || !json_is_string(p) || !json_is_number(x)) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: model.vocab[%zu] is not [piece, score]", path, i);
            goto cleanup;
        }
        pc[i] = json_string_value(p);
        pl[i] = json_string_length(p);
        sc[i] = json_number_value(x);
        if ((rc = tok_vocab_set(t->vocab, pc[i], pl[i], (int32_t)i, err)) != AS_OK) {
            as_err_prefix(err, "%s: model.vocab", path);
            goto cleanup;
        }
    }
    t->n_ids = tok_vocab_size(t->vocab);
    const json_t *uj = json_object_get(m, "unk_id");
    int bf = jbool(m, "byte_fallback", 0);
    if ((uj && !json_is_null(uj) && (!json_is_integer(uj) || json_integer_value(uj) < 0 ||
                                     json_integer_value(uj) >= (json_int_t)n)) || bf < 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: model.unk_id is not an id of model.vocab, or byte_fallback not a boolean", path);
        goto cleanup;
    }
    o.unk_id = json_is_integer(uj) ? (int32_t)json_integer_value(uj) : -1;
    o.byte_fallback = bf;
    if ((rc = spm_normalizer(json_object_get(root, "normalizer"), &o, 0, path, err)) != AS_OK) goto cleanup;
    if ((rc = spm_pretok(json_object_get(root, "pre_tokenizer"), &o, 0, path, err)) != AS_OK) goto cleanup;
    if ((rc = tok_unigram_init(pc, pl, sc, (int)n, o.unk_id, bf, &u, err)) != AS_OK) {
        as_err_prefix(err, "%s", path);
        goto cleanup;
    }
    if ((rc = tok_spm_init_unigram(t->vocab, u, &o, &t->spm, err)) != AS_OK) goto cleanup;
    u = NULL; /* t->spm owns it, and o's steps */
    t->kind = KIND_UNIGRAM;
    spm_decoder(t, json_object_get(root, "decoder"), 0);
cleanup:
    if (!t->spm) tok_spm_opts_free(&o);
    tok_unigram_free(u);
    free(pc);
    free(pl);
    free(sc);
    return rc;
}

static as_status load_tokenizer_json(tok_tokenizer *t, const char *dir, const char *path,
                                     const as_config *cfg, int *unsupported, as_error *err) {
    json_t *root = NULL;
    as_status rc = load_json(path, &root, err);
    if (rc != AS_OK) return rc;
    const json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: missing \"model\"", path);
        goto cleanup;
    }
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!type) type = json_object_get(model, "merges") ? "BPE" : "WordPiece";
    if (strcmp(type, "WordPiece") != 0 && strcmp(type, "BPE") != 0 && strcmp(type, "Unigram") != 0) { /* e.g. WordLevel */
        *unsupported = 1;
        rc = as_err_set(err, AS_ERR_INPUT, "%s: unsupported model type \"%.40s\" (WordPiece, BPE or Unigram)", path, type);
        goto cleanup;
    }
    if (strcmp(type, "Unigram") == 0) {
        if ((rc = load_unigram(t, root, model, path, err)) != AS_OK) goto cleanup;
    } else if ((rc = vocab_from_object(t, json_object_get(model, "vocab"), path, "model.vocab", err)) != AS_OK) {
        goto cleanup;
    } else if (strcmp(type, "WordPiece") == 0) {
        t->kind = KIND_WORDPIECE;
        const char *unk = json_string_value(json_object_get(model, "unk_token"));
        if (!unk) unk = "[UNK]";
        t->wp.unk_id = tok_vocab_get(t->vocab, unk, strlen(unk));
        if (t->wp.unk_id < 0) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: unk_token \"%.40s\" is not in model.vocab", path, unk);
            goto cleanup;
        }
        const json_t *pfx = json_object_get(model, "continuing_subword_prefix");
        const char *p = json_is_string(pfx) ? json_string_value(pfx) : "##";
        if (strlen(p) >= sizeof t->wp.continuing_prefix) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: continuing_subword_prefix is too long", path);
            goto cleanup;
        }
        strcpy(t->wp.continuing_prefix, p);
        const json_t *mx = json_object_get(model, "max_input_chars_per_word");
        json_int_t m = json_is_integer(mx) ? json_integer_value(mx) : TOK_MAX_WORD_CHARS;
        if (m < 1 || m > 1000000) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: max_input_chars_per_word %lld out of range", path,
                            (long long)m);
            goto cleanup;
        }
        t->wp.max_input_chars_per_word = (int)m;
        if ((rc = parse_bert_normalizer(t, json_object_get(root, "normalizer"), path, err)) != AS_OK)
            goto cleanup;
        const json_t *pt = json_object_get(root, "pre_tokenizer");
        const char *pty = json_string_value(json_object_get(pt, "type"));
        if (pt && !json_is_null(pt) && (!pty || strcmp(pty, "BertPreTokenizer") != 0)) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: unsupported pre_tokenizer \"%.40s\" for WordPiece", path,
                            pty ? pty : "?");
            goto cleanup;
        }
    } else if (is_spm(root, model)) { /* BPE over "▁" text with byte_fallback */
        t->kind = KIND_BPE;
        const json_t *m = model;
        if (json_is_number(json_object_get(m, "dropout")) ||
            (json_is_string(json_object_get(m, "continuing_subword_prefix")) &&
             json_string_length(json_object_get(m, "continuing_subword_prefix")) > 0) ||
            (json_is_string(json_object_get(m, "end_of_word_suffix")) &&
             json_string_length(json_object_get(m, "end_of_word_suffix")) > 0)) {
            rc = as_err_set(err, AS_ERR_INPUT,
                            "%s: BPE with dropout or subword prefix/suffix is not supported", path);
            goto cleanup;
        }
        if ((rc = load_spm(t, root, m, path, err)) != AS_OK) goto cleanup;
    } else { /* BPE */
        t->kind = KIND_BPE;
        const json_t *m = model;
        if (json_is_number(json_object_get(m, "dropout")) ||
            jbool(m, "byte_fallback", 0) == 1 ||
            (json_is_string(json_object_get(m, "continuing_subword_prefix")) &&
             json_string_length(json_object_get(m, "continuing_subword_prefix")) > 0) ||
            (json_is_string(json_object_get(m, "end_of_word_suffix")) &&
             json_string_length(json_object_get(m, "end_of_word_suffix")) > 0)) {
            rc = as_err_set(err, AS_ERR_INPUT,
                            "%s: BPE with dropout, byte_fallback or subword prefix/suffix is not supported", path);
            goto cleanup;
        }
        if ((rc = parse_bpe_normalizer(t, json_object_get(root, "normalizer"), path, err)) != AS_OK)
            goto cleanup;
        const char *pattern = NULL;
        int prefix_space = 0;
        if ((rc = parse_bpe_pretok(json_object_get(root, "pre_tokenizer"), path, &pattern,
                                   &prefix_space, err)) != AS_OK)
            goto cleanup;
        if ((rc = bpe_merges_from_json(t, json_object_get(m, "merges"), path, pattern, prefix_space,
                                       NULL, err)) != AS_OK)
            goto cleanup;
        tok_bpe_set_ignore_merges(t->bpe, jbool(m, "ignore_merges", 0) == 1);
        const char *unk = json_string_value(json_object_get(m, "unk_token"));
        if (unk) {
            int32_t uid = tok_vocab_get(t->vocab, unk, strlen(unk));
            if (uid < 0) {
                rc = as_err_set(err, AS_ERR_INPUT, "%s: unk_token \"%.40s\" is not in model.vocab", path, unk);
                goto cleanup;
            }
            tok_bpe_set_unk(t->bpe, uid);
        }
    }
    if ((rc = parse_added_tokens(t, json_object_get(root, "added_tokens"), path, err)) != AS_OK)
        goto cleanup;
    special_names sn;
    if ((rc = read_special_names(dir, &sn, err)) != AS_OK) goto cleanup;
    resolve_specials(t, &sn);
    int have_tpl = 0;
    if ((rc = parse_post(t, json_object_get(root, "post_processor"), path, &have_tpl, 0, err)) != AS_OK)
        goto cleanup;
    if (!have_tpl && (rc = tpl_default(t, cfg, path, err)) != AS_OK) goto cleanup;
    if ((rc = tpl_llama_config(t, dir, err)) != AS_OK) goto cleanup;
cleanup:
    json_decref(root);
    return rc;
}

/* ---- loading: legacy files ------------------------------------------------------------------------ */

/* Calls fn on each line of buf (without "\n"; trailing whitespace trimmed when trim). */
static as_status for_lines(char *buf, size_t n, int trim,
                           as_status (*fn)(void *ctx, char *line, size_t len, size_t lineno,
                                           as_error *err),
                           void *ctx, as_error *err) {
    size_t i = 0, lineno = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && buf[j] != '\n') j++;
        size_t len = j - i;
        if (trim)
            while (len > 0 && (buf[i + len - 1] == '\r' || buf[i + len - 1] == ' ' ||
                               buf[i + len - 1] == '\t'))
                len--;
        else if (len > 0 && buf[i + len - 1] == '\r')
            len--;
        buf[i + len] = 0;
        as_status rc = fn(ctx, buf + i, len, lineno, err);
        if (rc != AS_OK) return rc;
        lineno++;
        i = j + 1;
    }
    return AS_OK;
}

typedef struct {
    tok_tokenizer *t;
    const char *file;
} vocab_txt_ctx;

static as_status vocab_txt_line(void *ctx, char *line, size_t len, size_t lineno, as_error *err) {
    vocab_txt_ctx *c = ctx;
    if (lineno >= (size_t)AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "%s: more than %d lines", c->file, AS_MAX_VOCAB);
    as_status rc = tok_vocab_set(c->t->vocab, line, len, (int32_t)lineno, err);
    if (rc != AS_OK) return as_err_prefix(err, "%s: line %zu", c->file, lineno + 1);
    return AS_OK;
}

static as_status load_vocab_txt(tok_tokenizer *t, const char *dir, const char *path,
                                const as_config *cfg, as_error *err) {
    char *buf = NULL;
    size_t n = 0;
    json_t *conf = NULL;
    as_status rc = as_read_file(path, TOK_MAX_FILE_BYTES, &buf, &n, err);
    if (rc != AS_OK) return rc;
    vocab_txt_ctx ctx = {t, path};
    if ((rc = for_lines(buf, n, 1, vocab_txt_line, &ctx, err)) != AS_OK) goto cleanup;
    t->n_ids = tok_vocab_size(t->vocab);
    if (t->n_ids == 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: empty vocabulary", path);
        goto cleanup;
    }
    t->kind = KIND_WORDPIECE;
    char cpath[4096];
    if ((rc = as_path_join(cpath, sizeof cpath, dir, "tokenizer_config.json", err)) != AS_OK) goto cleanup;
    int lower = 1, strip = -2, chinese = 1;
    if (as_file_exists(cpath)) {
        if ((rc = load_json(cpath, &conf, err)) != AS_OK) goto cleanup;
        lower = jbool(conf, "do_lower_case", 1);
        strip = jbool(conf, "strip_accents", -2);
        chinese = jbool(conf, "tokenize_chinese_chars", 1);
        if (lower < 0 || strip == -1 || chinese < 0) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: do_lower_case / strip_accents / tokenize_chinese_chars is not a boolean",
                            cpath);
            goto cleanup;
        }
    }
    t->wp.clean_text = 1;
    t->wp.handle_chinese_chars = chinese;
    t->wp.lowercase = lower;
    t->wp.strip_accents = strip == -2 ? lower : strip;
    strcpy(t->wp.continuing_prefix, "##");
    t->wp.max_input_chars_per_word = TOK_MAX_WORD_CHARS;
    special_names sn;
    if ((rc = read_special_names(dir, &sn, err)) != AS_OK) goto cleanup;
    const char *unk = sn.have[TOK_SP_UNK] ? sn.names[TOK_SP_UNK] : "[UNK]";
    t->wp.unk_id = tok_vocab_get(t->vocab, unk, strlen(unk));
    if (t->wp.unk_id < 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: unk token \"%.40s\" is not in the vocabulary", path, unk);
        goto cleanup;
    }
    /* BertTokenizerFast adds its special tokens as non-normalized added tokens. */
    static const int order[] = {TOK_SP_PAD, TOK_SP_UNK, TOK_SP_CLS, TOK_SP_SEP, TOK_SP_MASK};
    static const char *const dflt[TOK_SP_COUNT] = {"[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]", NULL, NULL};
    for (size_t k = 0; k < sizeof order / sizeof order[0]; k++) {
        int i = order[k];
        const char *nm = sn.have[i] ? sn.names[i] : dflt[i];
        int32_t id = tok_vocab_get(t->vocab, nm, strlen(nm));
        if (id >= 0 && (rc = added_push(t, nm, strlen(nm), id, 1, 0, 0, 0, 0, path, err)) != AS_OK)
            goto cleanup;
    }
    resolve_specials(t, &sn);
    rc = tpl_default(t, cfg, path, err);
cleanup:
    json_decref(conf);
    free(buf);
    return rc;
}

typedef struct {
    const char **l, **r;
    int n, cap;
    const char *file;
} merges_ctx;

static as_status merges_line(void *ctx, char *line, size_t len, size_t lineno, as_error *err) {
    merges_ctx *c = ctx;
    if (len == 0) return AS_OK;
    if (lineno == 0 && strncmp(line, "#version", 8) == 0) return AS_OK;
    char *sp = strchr(line, ' ');
    if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' '))
        return as_err_set(err, AS_ERR_INPUT, "%s: line %zu is not \"left right\"", c->file, lineno + 1);
    if (c->n == c->cap) {
        if (c->cap >= AS_MAX_VOCAB)
            return as_err_set(err, AS_ERR_INPUT, "%s: more than %d merges", c->file, AS_MAX_VOCAB);
        int ncap = c->cap ? c->cap * 2 : 1024;
        const char **nl = realloc(c->l, (size_t)ncap * sizeof *nl);
        if (!nl) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", c->file);
        c->l = nl;
        const char **nr = realloc(c->r, (size_t)ncap * sizeof *nr);
        if (!nr) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", c->file);
        c->r = nr;
        c->cap = ncap;
    }
    *sp = 0;
    c->l[c->n] = line;
    c->r[c->n] = sp + 1;
    c->n++;
    return AS_OK;
}

static as_status load_vocab_json_merges(tok_tokenizer *t, const char *dir, const char *vpath,
                                        const char *mpath, const as_config *cfg, as_error *err) {
    json_t *vj = NULL, *conf = NULL;
    char *mbuf = NULL;
    size_t mn = 0;
    merges_ctx mc = {NULL, NULL, 0, 0, mpath};
    as_status rc = load_json(vpath, &vj, err);
    if (rc != AS_OK) return rc;
    t->kind = KIND_BPE;
    if ((rc = vocab_from_object(t, vj, vpath, "vocabulary", err)) != AS_OK) goto cleanup;
    if ((rc = as_read_file(mpath, TOK_MAX_FILE_BYTES, &mbuf, &mn, err)) != AS_OK) goto cleanup;
    if ((rc = for_lines(mbuf, mn, 0, merges_line, &mc, err)) != AS_OK) goto cleanup;
    int prefix_space = 0;
    char cpath[4096];
    if ((rc = as_path_join(cpath, sizeof cpath, dir, "tokenizer_config.json", err)) != AS_OK) goto cleanup;
    if (as_file_exists(cpath)) {
        if ((rc = load_json(cpath, &conf, err)) != AS_OK) goto cleanup;
        prefix_space = jbool(conf, "add_prefix_space", 0) == 1;
    }
    if ((rc = build_bpe(t, mc.l, mc.r, mc.n, TOK_GPT2_PATTERN, prefix_space, mpath, err)) != AS_OK)
        goto cleanup;
    special_names sn;
    if ((rc = read_special_names(dir, &sn, err)) != AS_OK) goto cleanup;
    /* The specials of GPT2TokenizerFast / RobertaTokenizerFast, when in the vocabulary
     * (RoBERTa's <mask> strips the whitespace before it). */
    static const char *const names[] = {"<s>", "<pad>", "</s>", "<unk>", "<mask>", "<|endoftext|>"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        int32_t id = tok_vocab_get(t->vocab, names[k], strlen(names[k]));
        if (id < 0) continue;
        int lstrip = strcmp(names[k], "<mask>") == 0;
        if ((rc = added_push(t, names[k], strlen(names[k]), id, 1, lstrip, 0, 0, 0, vpath, err)) != AS_OK)
            goto cleanup;
    }
    resolve_specials(t, &sn);
    if ((rc = tpl_default(t, cfg, vpath, err)) != AS_OK) goto cleanup;
    int arch = cfg ? (int)cfg->arch : (t->n_tpl_special_single ? ARCH_ROBERTA : ARCH_GPT2);
    if (arch == ARCH_ROBERTA) { /* RobertaTokenizerFast: trim_offsets = True */
        t->trim_offsets = 1;
        t->trim_prefix_space = prefix_space;
    }
cleanup:
    free(mc.l);
    free(mc.r);
    free(mbuf);
    json_decref(vj);
    json_decref(conf);
    return rc;
}

/* ---- loading: a T5 / mT5 spiece.model --------------------------------------------------------------- */

#define TOK_MAX_EXTRA_IDS 10000 /* T5's <extra_id_N> sentinels (tokenizer_config.json extra_ids) */

/* 1 when the folder's tokenizer is T5's: config.json's model_type, or tokenizer_class. */
static int is_t5_folder(const as_config *cfg, const json_t *conf) {
    if (cfg && (strcmp(cfg->model_type, "t5") == 0 || strcmp(cfg->model_type, "mt5") == 0 ||
                strcmp(cfg->model_type, "umt5") == 0))
        return 1;
    const char *cls = json_string_value(json_object_get(conf, "tokenizer_class"));
    return cls && (strncmp(cls, "T5Tokenizer", 11) == 0 || strncmp(cls, "MT5Tokenizer", 12) == 0);
}

/* The steps transformers' SpmConverter writes for a SentencePiece model: Precompiled (when
 * the model has a charsmap), Strip(right), Replace(Regex " {2,}", "▁"); Metaspace with
 * prepend_scheme always (first when tokenizer_config.json says legacy: false; never
 * without add_dummy_prefix). */
static as_status spiece_opts(const tok_spm_proto *p, int legacy, tok_spm_opts *o, const char *path, as_error *err) {
    if (p->charsmap) {
        tok_spm_op *op = &o->ops[o->n_ops];
        op->kind = TOK_SPM_PRECOMPILED;
        as_status rc = tok_charsmap_init_raw(p->charsmap, p->charsmap_n, (tok_charsmap **)&op->own, err);
        if (rc != AS_OK) return as_err_prefix(err, "%s: normalizer_spec", path);
        o->n_ops++;
    }
    o->ops[o->n_ops].kind = TOK_SPM_STRIP;
    o->ops[o->n_ops++].arg = 2;
    if (p->remove_extra_whitespaces) {
        tok_spm_op *op = &o->ops[o->n_ops];
        int ec;
        PCRE2_SIZE eo;
        op->kind = TOK_SPM_REPLACE_REGEX;
        strcpy(op->to, "\xE2\x96\x81");
        op->own = pcre2_compile((PCRE2_SPTR) " {2,}", PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
        if (!op->own) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        o->n_ops++;
    }
    o->pre = TOK_SPM_PRE_METASPACE;
    strcpy(o->pre_str, "\xE2\x96\x81");
    o->scheme = !p->add_dummy_prefix ? TOK_SPM_NEVER : legacy ? TOK_SPM_ALWAYS : TOK_SPM_FIRST;
    o->split = 1;
    return AS_OK;
}

/* A T5 / mT5 folder without tokenizer.json: the Unigram model of spiece.model plus
 * tokenizer_config.json's extra_ids sentinels (<extra_id_N>, N counting down from the
 * end), as transformers' T5 converter builds the fast tokenizer: control and unknown
 * pieces and the sentinels are special added tokens, user-defined pieces plain ones,
 * template "$A </s>" / "$A </s> $B </s>". */
static as_status load_spiece(tok_tokenizer *t, const char *dir, const char *path, const as_config *cfg, as_error *err) {
    tok_spm_proto p;
    json_t *conf = NULL;
    tok_unigram *u = NULL;
    tok_spm_opts o;
    memset(&o, 0, sizeof o);
    char cpath[4096];
    const char **pc = NULL;
    size_t *pl = NULL;
    double *sc = NULL;
    as_status rc = tok_spm_proto_read(path, &p, err);
    if (rc != AS_OK) return rc;
    if ((rc = as_path_join(cpath, sizeof cpath, dir, "tokenizer_config.json", err)) != AS_OK) goto cleanup;
    if (as_file_exists(cpath) && (rc = load_json(cpath, &conf, err)) != AS_OK) goto cleanup;
    const json_t *ej = json_object_get(conf, "extra_ids");
    json_int_t extra = json_is_integer(ej) ? json_integer_value(ej) : 100;
    int legacy = jbool(conf, "legacy", 1);
    if (!is_t5_folder(cfg, conf) || p.model_type != 1) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: a SentencePiece model without tokenizer.json is read for T5 / mT5 Unigram "
                        "folders only (config.json model_type or tokenizer_config.json tokenizer_class)", path);
        goto cleanup;
    }
    if (extra < 0 || extra > TOK_MAX_EXTRA_IDS || (ej && !json_is_integer(ej)) || legacy < 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: extra_ids is not an integer in [0, %d], or legacy not a boolean", cpath,
                        TOK_MAX_EXTRA_IDS);
        goto cleanup;
    }
    int n = p.n + (int)extra;
    if (n > AS_MAX_VOCAB) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: %d pieces with the extra ids, over %d", path, n, AS_MAX_VOCAB);
        goto cleanup;
    }
    pc = as_malloc_array((size_t)n, sizeof *pc);
    pl = as_malloc_array((size_t)n, sizeof *pl);
    sc = as_malloc_array((size_t)n, sizeof *sc);
    char *names = as_malloc_array((size_t)extra + 1, 24);
    if (!pc || !pl || !sc || !names) {
        free(names);
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        goto cleanup;
    }
    for (int i = 0; i < n; i++) {
        if (i < p.n) {
            pc[i] = p.piece[i], pl[i] = p.len[i], sc[i] = p.score[i];
        } else {
            char *nm = names + 24 * (size_t)(i - p.n);
            snprintf(nm, 24, "<extra_id_%d>", n - 1 - i);
            pc[i] = nm, pl[i] = strlen(nm), sc[i] = 0.0;
        }
        if ((rc = tok_vocab_set(t->vocab, pc[i], pl[i], i, err)) != AS_OK) break;
        int ty = i < p.n ? p.type[i] : TOK_PIECE_CONTROL;
        if (ty == TOK_PIECE_UNKNOWN || ty == TOK_PIECE_CONTROL || ty == TOK_PIECE_USER)
            rc = added_push(t, pc[i], pl[i], i, ty != TOK_PIECE_USER, 0, 0, 0, 0, path, err);
        if (rc != AS_OK) break;
    }
    if (rc == AS_OK) rc = tok_unigram_init(pc, pl, sc, n, (int32_t)p.unk_id, 0, &u, err);
    free(names);
    if (rc != AS_OK) {
        as_err_prefix(err, "%s", path);
        goto cleanup;
    }
    t->n_ids = tok_vocab_size(t->vocab);
    o.unk_id = (int32_t)p.unk_id;
    if ((rc = spiece_opts(&p, legacy, &o, path, err)) != AS_OK) goto cleanup;
    if ((rc = tok_spm_init_unigram(t->vocab, u, &o, &t->spm, err)) != AS_OK) goto cleanup;
    u = NULL;
    t->kind = KIND_UNIGRAM;
    strcpy(t->disp_from, "\xE2\x96\x81");
    strcpy(t->disp_to, " ");
    int32_t eos = tok_vocab_get(t->vocab, "</s>", 4);
    if (eos < 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: no </s> piece for the T5 template", path);
        goto cleanup;
    }
    t->n_single = t->n_pair = 0;
    tpl_add(t->single, &t->n_single, 0, 0, 0);
    tpl_add(t->single, &t->n_single, -1, 0, eos);
    tpl_add(t->pair, &t->n_pair, 0, 0, 0);
    tpl_add(t->pair, &t->n_pair, -1, 0, eos);
    tpl_add(t->pair, &t->n_pair, 1, 0, 0);
    tpl_add(t->pair, &t->n_pair, -1, 0, eos);
    tpl_count(t);
    special_names sn;
    if ((rc = read_special_names(dir, &sn, err)) != AS_OK) goto cleanup;
    resolve_specials(t, &sn);
cleanup:
    if (!t->spm) tok_spm_opts_free(&o);
    tok_unigram_free(u);
    free(pc);
    free(pl);
    free(sc);
    json_decref(conf);
    tok_spm_proto_free(&p);
    return rc;
}

/* ---- loading: a Marian folder (vocab.json, source.spm, target.spm) ----------------------------------- */

/* SentencePiece's own normalizer (normalizer.cc Normalize), which MarianTokenizer runs:
 * the charsmap, then with remove_extra_whitespaces the ASCII spaces at both ends dropped and
 * runs of them made one (only ' ', unlike transformers' converters' Strip of all
 * whitespace), then the dummy prefix "▁" and every space as "▁" (Metaspace). */
static as_status marian_opts(const tok_spm_proto *p, tok_spm_opts *o, const char *path, as_error *err) {
    if (p->charsmap) {
        tok_spm_op *op = &o->ops[o->n_ops];
        op->kind = TOK_SPM_PRECOMPILED;
        as_status rc = tok_charsmap_init_raw(p->charsmap, p->charsmap_n, (tok_charsmap **)&op->own, err);
        if (rc != AS_OK) return as_err_prefix(err, "%s: normalizer_spec", path);
        o->n_ops++;
    }
    static const char *const rx[2] = {"^ +| +\\z", " {2,}"}, *const to[2] = {"", " "};
    for (int k = 0; p->remove_extra_whitespaces && k < 2; k++) {
        tok_spm_op *op = &o->ops[o->n_ops];
        int ec;
        PCRE2_SIZE eo;
        op->kind = TOK_SPM_REPLACE_REGEX;
        strcpy(op->to, to[k]);
        op->own = pcre2_compile((PCRE2_SPTR)rx[k], PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
        if (!op->own) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        o->n_ops++;
    }
    o->pre = TOK_SPM_PRE_METASPACE;
    strcpy(o->pre_str, "\xE2\x96\x81");
    o->scheme = p->add_dummy_prefix ? TOK_SPM_ALWAYS : TOK_SPM_NEVER;
    o->split = 1;
    return AS_OK;
}

/* One side's SentencePiece model as MarianTokenizer runs it: sp.encode(text, out_type=str)
 * (normalizer, dummy prefix, whitespace rules, Unigram Viterbi; control, unknown, byte and
 * unused pieces are never matched in text), each piece mapped through vocab.json (absent:
 * <unk>), an unknown token through its normalized text. */
static as_status load_marian_side(tok_tokenizer *t, const char *path, int32_t unk, tok_spm **out, as_error *err) {
    tok_spm_proto p;
    tok_unigram *u = NULL;
    tok_spm_opts o;
    memset(&o, 0, sizeof o);
    size_t *pl = NULL;
    int32_t *map = NULL;
    as_status rc = tok_spm_proto_read(path, &p, err);
    if (rc != AS_OK) return rc;
    if (p.model_type != 1) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: SentencePiece model type %d, not Unigram (1)", path, p.model_type);
        goto cleanup;
    }
    pl = as_malloc_array((size_t)p.n, sizeof *pl);
    map = as_malloc_array((size_t)p.n, sizeof *map);
    if (!pl || !map) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        goto cleanup;
    }
    for (int i = 0; i < p.n; i++) {
        int ty = p.type[i];
        pl[i] = ty == TOK_PIECE_NORMAL || ty == TOK_PIECE_USER ? p.len[i] : 0;
        int32_t id = tok_vocab_get(t->vocab, p.piece[i], p.len[i]);
        map[i] = id >= 0 ? id : unk;
    }
    if ((rc = tok_unigram_init((const char *const *)p.piece, pl, p.score, p.n, (int32_t)p.unk_id, 0, &u, err)) !=
        AS_OK) {
        as_err_prefix(err, "%s", path);
        goto cleanup;
    }
    o.unk_id = (int32_t)p.unk_id;
    if ((rc = marian_opts(&p, &o, path, err)) != AS_OK) goto cleanup;
    if ((rc = tok_spm_init_unigram(t->vocab, u, &o, out, err)) != AS_OK) goto cleanup;
    u = NULL;
    rc = tok_spm_set_remap(*out, map, p.n, t->vocab, unk, err);
cleanup:
    if (!*out) tok_spm_opts_free(&o);
    tok_unigram_free(u);
    free(pl);
    free(map);
    tok_spm_proto_free(&p);
    return rc;
}

/* A Marian (opus-mt) folder without tokenizer.json, as transformers' MarianTokenizer reads
 * it: vocab.json (piece -> id, both sides), source.spm for the text (t->spm) and
 * target.spm for a target (t->spm_target, tok_encode_target); "</s>", "<unk>" and "<pad>"
 * must be in vocab.json and are matched in the text as special tokens, the ">>xx<<"
 * language codes of vocab.json as plain added tokens; template "$A </s>" ("$A $B </s>"). */
static as_status load_marian(tok_tokenizer *t, const char *dir, const char *vpath, const char *spath,
                             const char *tpath, as_error *err) {
    json_t *vj = NULL;
    char sep[4096];
    as_status rc = as_path_join(sep, sizeof sep, dir, "target_vocab.json", err);
    if (rc != AS_OK) return rc;
    if (as_file_exists(sep))
        return as_err_set(err, AS_ERR_INPUT, "%s: separate source and target vocabularies are not supported", sep);
    if ((rc = load_json(vpath, &vj, err)) != AS_OK) return rc;
    if ((rc = vocab_from_object(t, vj, vpath, "vocabulary", err)) != AS_OK) goto cleanup;
    static const char *const need[3] = {"</s>", "<unk>", "<pad>"};
    int32_t sid[3];
    for (int k = 0; k < 3; k++) {
        sid[k] = tok_vocab_get(t->vocab, need[k], strlen(need[k]));
        if (sid[k] < 0) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: no \"%s\" entry (MarianTokenizer needs </s>, <unk> and <pad>)",
                            vpath, need[k]);
            goto cleanup;
        }
        if ((rc = added_push(t, need[k], strlen(need[k]), sid[k], 1, 0, 0, 0, 0, vpath, err)) != AS_OK) goto cleanup;
    }
    const char *key;
    size_t klen;
    json_t *val;
    json_object_keylen_foreach(vj, key, klen, val) {
        if (klen > 4 && !memcmp(key, ">>", 2) && !memcmp(key + klen - 2, "<<", 2) &&
            (rc = added_push(t, key, klen, (int32_t)json_integer_value(val), 0, 0, 0, 0, 0, vpath, err)) != AS_OK)
            goto cleanup;
    }
    if ((rc = load_marian_side(t, spath, sid[1], &t->spm, err)) != AS_OK) goto cleanup;
    if ((rc = load_marian_side(t, tpath, sid[1], &t->spm_target, err)) != AS_OK) goto cleanup;
    t->kind = KIND_UNIGRAM;
    strcpy(t->disp_from, "\xE2\x96\x81");
    strcpy(t->disp_to, " ");
    t->n_single = t->n_pair = 0;
    tpl_add(t->single, &t->n_single, 0, 0, 0);
    tpl_add(t->single, &t->n_single, -1, 0, sid[0]);
    tpl_add(t->pair, &t->n_pair, 0, 0, 0);
    tpl_add(t->pair, &t->n_pair, 1, 0, 0);
    tpl_add(t->pair, &t->n_pair, -1, 0, sid[0]);
    tpl_count(t);
    special_names sn;
    if ((rc = read_special_names(dir, &sn, err)) != AS_OK) goto cleanup;
    resolve_specials(t, &sn);
cleanup:
    json_decref(vj);
    return rc;
}

/* ---- tok_load_dir ---------------------------------------------------------------------------------- */

static as_status check_ids(const tok_tokenizer *t, const as_config *cfg, const char *dir,
                           as_error *err) {
    if (!cfg || cfg->vocab_size <= 0) return AS_OK;
    if (t->n_ids > cfg->vocab_size)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: tokenizer has token id %ld, but config.json vocab_size is %d", dir,
                          (long)t->n_ids - 1, cfg->vocab_size);
    return AS_OK;
}

as_status tok_load_dir(const char *dir, const as_config *cfg, tok_tokenizer **out, int *unsupported,
                       as_error *err) {
    ASSERT(dir && out);
    *out = NULL;
    int unsup = 0;
    if (unsupported) *unsupported = 0;
    tok_tokenizer *t = as_calloc(1, sizeof *t);
    if (!t) return as_err_set(err, AS_ERR_INTERNAL, "tokenizer: out of memory");
    t->vocab = tok_vocab_new();
    as_status rc;
    if (!t->vocab) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "tokenizer: out of memory");
        goto fail;
    }
    char p1[4096], p2[4096];
    if ((rc = as_path_join(p1, sizeof p1, dir, "tokenizer.json", err)) != AS_OK) goto fail;
    if (as_file_exists(p1)) {
        rc = load_tokenizer_json(t, dir, p1, cfg, &unsup, err);
        if (rc != AS_OK && unsupported) *unsupported = unsup;
    } else {
        if ((rc = as_path_join(p1, sizeof p1, dir, "vocab.txt", err)) != AS_OK) goto fail;
        if (as_file_exists(p1)) {
            rc = load_vocab_txt(t, dir, p1, cfg, err);
        } else {
            if ((rc = as_path_join(p1, sizeof p1, dir, "vocab.json", err)) != AS_OK) goto fail;
            if ((rc = as_path_join(p2, sizeof p2, dir, "merges.txt", err)) != AS_OK) goto fail;
            char p3[4096];
            if (as_file_exists(p1) && as_file_exists(p2))
                rc = load_vocab_json_merges(t, dir, p1, p2, cfg, err);
            else if (as_file_exists(p1) && (rc = as_path_join(p2, sizeof p2, dir, "source.spm", err)) == AS_OK &&
                     as_file_exists(p2) && (rc = as_path_join(p3, sizeof p3, dir, "target.spm", err)) == AS_OK &&
                     as_file_exists(p3))
                rc = load_marian(t, dir, p1, p2, p3, err);
            else if ((rc = as_path_join(p1, sizeof p1, dir, "spiece.model", err)) == AS_OK && as_file_exists(p1))
                rc = load_spiece(t, dir, p1, cfg, err);
            else if (rc == AS_OK)
                rc = as_err_set(err, AS_ERR_INPUT,
                                "%s: no tokenizer files (tokenizer.json, vocab.txt, vocab.json + merges.txt, vocab.json + "
                                "source.spm + target.spm, or spiece.model)",
                                dir);
        }
    }
    if (rc != AS_OK) goto fail;
    if ((rc = trie_build(t, err)) != AS_OK) goto fail;
    for (int k = 0; t->spm && k < t->n_added; k++)
        if (t->added[k].normalized &&
            (rc = tok_spm_add_normalized(t->spm, t->added[k].content, t->added[k].len, t->added[k].id, err)) != AS_OK)
            goto fail;
    if ((rc = check_ids(t, cfg, dir, err)) != AS_OK) goto fail;
    *out = t;
    return AS_OK;
fail:
    tok_free(t);
    return rc;
}
