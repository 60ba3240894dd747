/* bpe.c — byte-level BPE exactly as Hugging Face `tokenizers` runs it for GPT-2,
 * RoBERTa, Llama-3 and Qwen tokenizer.json files:
 *   1. split the text with the pre-tokenizer regex (PCRE2, UTF + UCP, JIT when
 *      available); every match and every non-matching gap is one piece, as HF's
 *      Split(behavior = Isolated) and ByteLevel(use_regex) do;
 *   2. map each piece's bytes through GPT-2's bytes_to_unicode table;
 *   3. merge adjacent symbols, lowest merge rank first and leftmost first among equal
 *      ranks (merges.c: HF's Word::merge_all, a binary heap over candidate pairs);
 *   4. emit ids with byte offsets into the original text.
 * Offsets follow HF: a token covers whole UTF-8 characters of the input, so a token
 * holding only part of a multi-byte character gets that whole character's byte range
 * (neighbouring tokens then overlap). With add_prefix_space the added space is aligned
 * with the text's first character.
 *
 * It does not: read tokenizer files, handle added/special tokens, normalize (NFC),
 * apply dropout, byte_fallback or continuing_subword_prefix (the loader must reject those).
 * Encoding is re-entrant: tok_bpe is read-only after tok_bpe_init and its setters.
 */
#include "tokenize/bpe.h"
#include "tokenize/merges.h"

#include <pthread.h>
#include <string.h>

#include <pcre2.h>

/* Limits on one pcre2_match call: adversarial text fails with AS_ERR_INPUT rather
 * than spinning (the patterns in use never come close). */
#define BPE_MATCH_LIMIT 100000000u
#define BPE_DEPTH_LIMIT 10000000u
#define BPE_HEAP_LIMIT_KIB (256u * 1024u)

struct tok_bpe {
    const tok_vocab *vocab; /* borrowed */
    pcre2_code *re;
    pcre2_match_context *mctx; /* read-only after init: limits only, no JIT stack */
    int add_prefix_space;
    int ignore_merges; /* Llama-3: a piece found whole in the vocab is one token */
    int32_t unk_id;    /* -1: a byte missing from the vocab is an error */
    tok_merges *merges;
    int32_t byte_id[256];       /* vocab id of each byte's char; -1 when absent */
};

/* ---- bytes_to_unicode (GPT-2 encoder.py) ----------------------------------- */

/* Printable bytes map to themselves; the other 68 to U+0100 + n in byte order.
 * Radford et al. 2019, openai/gpt-2 src/encoder.py bytes_to_unicode(). */
static uint32_t byte_to_cp(uint8_t b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++)
        if (!((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE))) n++;
    return 0x100 + n;
}

typedef struct {
    char s[256][3]; /* UTF-8 of each byte's char, NUL-terminated */
    uint8_t len[256];
    int16_t rev[0x144]; /* code point -> byte, -1 when not a byte char */
} bpe_table;

static bpe_table g_table;
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void table_build(void) {
    bpe_table *t = &g_table;
    for (int c = 0; c < 0x144; c++) t->rev[c] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = byte_to_cp((uint8_t)b);
        if (cp < 0x80) {
            t->s[b][0] = (char)cp;
            t->s[b][1] = 0;
            t->len[b] = 1;
        } else {
            t->s[b][0] = (char)(0xC0 | (cp >> 6));
            t->s[b][1] = (char)(0x80 | (cp & 0x3F));
            t->s[b][2] = 0;
            t->len[b] = 2;
        }
        t->rev[cp] = (int16_t)b;
    }
}

static const bpe_table *table(void) {
    pthread_once(&g_table_once, table_build);
    return &g_table;
}

const char *tok_bpe_byte_str(uint8_t b) { return table()->s[b]; }

/* ---- init / free ------------------------------------------------------------ */

as_status tok_bpe_init(const tok_vocab *v, const char *const *merge_left,
                       const char *const *merge_right, int n_merges, const char *pattern,
                       int add_prefix_space, tok_bpe **out, as_error *err) {
    ASSERT(v && out && n_merges >= 0 && (n_merges == 0 || (merge_left && merge_right)));
    *out = NULL;
    as_status st = AS_OK;
    const bpe_table *tab = table();
    tok_bpe *b = as_calloc(1, sizeof *b);
    if (!b) return as_err_set(err, AS_ERR_INTERNAL, "bpe: out of memory");
    b->vocab = v;
    b->add_prefix_space = add_prefix_space != 0;
    b->unk_id = -1;

    /* regex */
    const char *pat = pattern ? pattern : TOK_GPT2_PATTERN;
    int ecode = 0;
    PCRE2_SIZE eoff = 0;
    b->re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ecode,
                          &eoff, NULL);
    if (!b->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ecode, msg, sizeof msg);
        st = as_err_set(err, AS_ERR_INPUT, "pre-tokenizer regex: %s at offset %zu", (char *)msg,
                        (size_t)eoff);
        goto cleanup;
    }
    (void)pcre2_jit_compile(b->re, PCRE2_JIT_COMPLETE); /* interpreter when unavailable */
    b->mctx = pcre2_match_context_create(NULL);
    if (!b->mctx) {
        st = as_err_set(err, AS_ERR_INTERNAL, "bpe: out of memory");
        goto cleanup;
    }
    pcre2_set_match_limit(b->mctx, BPE_MATCH_LIMIT);
    pcre2_set_depth_limit(b->mctx, BPE_DEPTH_LIMIT);
    pcre2_set_heap_limit(b->mctx, BPE_HEAP_LIMIT_KIB);

    for (int c = 0; c < 256; c++) b->byte_id[c] = tok_vocab_get(v, tab->s[c], tab->len[c]);

    st = tok_merges_init(v, merge_left, merge_right, n_merges, &b->merges, err);
    if (st != AS_OK) goto cleanup;
    *out = b;
    b = NULL;
cleanup:
    tok_bpe_free(b);
    return st;
}

void tok_bpe_set_ignore_merges(tok_bpe *b, int on) {
    ASSERT(b);
    b->ignore_merges = on != 0;
}

void tok_bpe_set_unk(tok_bpe *b, int32_t unk_id) {
    ASSERT(b);
    b->unk_id = unk_id < 0 ? -1 : unk_id;
}

void tok_bpe_free(tok_bpe *b) {
    if (!b) return;
    pcre2_match_context_free(b->mctx);
    pcre2_code_free(b->re);
    tok_merges_free(b->merges);
    free(b);
}

/* ---- encoding ----------------------------------------------------------------- */

/* Per-call scratch, grown to the longest piece. */
typedef struct {
    tok_merge_work w;
    char *word;    /* byte-level string of the piece (ignore_merges lookup) */
    size_t wcap;   /* bytes in word */
} bpe_scratch;

static int scratch_reserve(bpe_scratch *s, size_t n) {
    if (!tok_merge_reserve(&s->w, n)) return 0;
    if (2 * n > s->wcap) {
        char *w = realloc(s->word, as_mul_size(n, 2));
        if (!w) return 0;
        s->word = w;
        s->wcap = 2 * n;
    }
    return 1;
}

/* Byte range in the original text for byte j of the (possibly prefixed) buffer:
 * the whole UTF-8 character containing it. The added prefix space (j == 0 when
 * prefixed) takes the range of the text's first character, as HF's prepend does. */
static size_t char_start(const unsigned char *t, size_t i) {
    while (i > 0 && (t[i] & 0xC0) == 0x80) i--;
    return i;
}
static size_t char_end(const unsigned char *t, size_t n, size_t i) {
    i++;
    while (i < n && (t[i] & 0xC0) == 0x80) i++;
    return i;
}

typedef struct {
    const unsigned char *text; /* original */
    size_t n;                  /* original length */
    int prefixed;              /* the buffer is " " + text */
} bpe_offmap;

static void map_range(const bpe_offmap *m, size_t a, size_t bend, int32_t *s, int32_t *e) {
    /* [a, bend) in buffer coordinates, bend > a */
    size_t first = a, last = bend - 1;
    if (m->prefixed) {
        *s = first == 0 ? 0 : (int32_t)char_start(m->text, first - 1);
        *e = last == 0 ? (int32_t)(m->n ? char_end(m->text, m->n, 0) : 0)
                       : (int32_t)char_end(m->text, m->n, last - 1);
    } else {
        *s = (int32_t)char_start(m->text, first);
        *e = (int32_t)char_end(m->text, m->n, last);
    }
}

/* Encodes one piece buf[ps, pe) and appends its tokens. */
static as_status encode_piece(const tok_bpe *b, bpe_scratch *s, const unsigned char *buf,
                              size_t ps, size_t pe, const bpe_offmap *om, tok_ids *out,
                              as_error *err) {
    const bpe_table *tab = table();
    size_t n = pe - ps;
    int32_t ts, te;
    if (!scratch_reserve(s, n)) return as_err_set(err, AS_ERR_INTERNAL, "bpe: out of memory");
    if (b->ignore_merges) {
        size_t wl = 0;
        for (size_t i = 0; i < n; i++) {
            uint8_t c = buf[ps + i];
            memcpy(s->word + wl, tab->s[c], tab->len[c]);
            wl += tab->len[c];
        }
        int32_t id = tok_vocab_get(b->vocab, s->word, wl);
        if (id >= 0) {
            map_range(om, ps, pe, &ts, &te);
            return tok_ids_push(out, id, ts, te, err);
        }
    }
    int32_t ns = (int32_t)n;
    for (int32_t i = 0; i < ns; i++) {
        uint8_t c = buf[ps + (size_t)i];
        int32_t id = b->byte_id[c];
        if (id < 0) id = b->unk_id;
        if (id < 0) {
            return as_err_set(err, AS_ERR_INPUT,
                              "bpe: byte 0x%02X (token \"%s\") is not in the vocabulary and there is no unk token",
                              c, tab->s[c]);
        }
        s->w.sym[i] = (tok_sym){id, i - 1, i + 1 < ns ? i + 1 : -1, (uint32_t)i, 1};
    }
    tok_merges_apply(b->merges, &s->w, ns);
    for (int32_t i = 0; i >= 0 && i < ns; i = s->w.sym[i].next) {
        const tok_sym *y = &s->w.sym[i];
        map_range(om, ps + y->start, ps + y->start + y->len, &ts, &te);
        as_status st = tok_ids_push(out, y->id, ts, te, err);
        if (st != AS_OK) return st;
    }
    return AS_OK;
}

static size_t utf8_next(const unsigned char *t, size_t n, size_t i) {
    i++;
    while (i < n && (t[i] & 0xC0) == 0x80) i++;
    return i;
}

as_status tok_bpe_encode(const tok_bpe *b, const char *text, size_t len, tok_ids *out,
                         as_error *err) {
    ASSERT(b && out && (text || len == 0));
    if (len > TOK_MAX_TEXT_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "text is %zu bytes, over the limit of %u", len,
                          TOK_MAX_TEXT_BYTES);
    as_status st = AS_OK;
    int n_entry = out->n;
    bpe_scratch s = {0};
    unsigned char *pref = NULL;
    pcre2_match_data *md = NULL;
    if (len == 0) return AS_OK;

    bpe_offmap om = {(const unsigned char *)text, len, 0};
    const unsigned char *buf = (const unsigned char *)text;
    size_t n = len;
    if (b->add_prefix_space && text[0] != ' ') {
        pref = as_malloc(len + 1);
        if (!pref) {
            st = as_err_set(err, AS_ERR_INTERNAL, "bpe: out of memory");
            goto cleanup;
        }
        pref[0] = ' ';
        memcpy(pref + 1, text, len);
        buf = pref;
        n = len + 1;
        om.prefixed = 1;
    }
    md = pcre2_match_data_create_from_pattern(b->re, NULL);
    if (!md) {
        st = as_err_set(err, AS_ERR_INTERNAL, "bpe: out of memory");
        goto cleanup;
    }
    size_t pos = 0, gap = 0;
    uint32_t opts = 0; /* the first call checks UTF-8 validity of the whole text */
    while (pos <= n) {
        int rc = pcre2_match(b->re, buf, n, pos, opts, md, b->mctx);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(b->re, buf, n, pos, opts | PCRE2_NO_JIT, md, b->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            size_t at = rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21
                            ? (size_t)pcre2_get_startchar(md) - (size_t)om.prefixed
                            : pos;
            st = as_err_set(err, AS_ERR_INPUT, "text: pre-tokenizer regex failed at byte %zu: %s", at,
                            (char *)msg);
            goto cleanup;
        }
        opts = PCRE2_NO_UTF_CHECK;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms < gap || me < ms || me > n) { /* \K tricks: not a plain split */
            st = as_err_set(err, AS_ERR_INPUT, "pre-tokenizer regex: match [%zu, %zu) is out of order", ms, me);
            goto cleanup;
        }
        if (ms > gap) {
            st = encode_piece(b, &s, buf, gap, ms, &om, out, err);
            if (st != AS_OK) goto cleanup;
        }
        if (me > ms) {
            st = encode_piece(b, &s, buf, ms, me, &om, out, err);
            if (st != AS_OK) goto cleanup;
            gap = me;
            pos = me;
        } else {
            gap = ms;
            if (ms >= n) break;
            pos = utf8_next(buf, n, ms); /* empty match: step one character */
        }
    }
    if (gap < n) st = encode_piece(b, &s, buf, gap, n, &om, out, err);
cleanup:
    if (st != AS_OK) out->n = n_entry;
    pcre2_match_data_free(md);
    free(pref);
    tok_merge_work_free(&s.w);
    free(s.word);
    return st;
}

/* ---- decoding ----------------------------------------------------------------- */

char *tok_bpe_piece_to_bytes(const char *piece, size_t *out_len) {
    ASSERT(piece && out_len);
    const bpe_table *tab = table();
    const unsigned char *p = (const unsigned char *)piece;
    size_t n = strlen(piece);
    char *o = as_malloc(n + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t w;
        if (p[i] < 0x80) {
            cp = p[i];
            w = 1;
        } else if ((p[i] & 0xE0) == 0xC0 && i + 1 < n && (p[i + 1] & 0xC0) == 0x80) {
            cp = ((uint32_t)(p[i] & 0x1F) << 6) | (p[i + 1] & 0x3F);
            w = 2;
        } else {
            cp = UINT32_MAX; /* not a byte char (3-4 byte characters, bad UTF-8) */
            w = 1;
        }
        if (cp >= 0x144 || tab->rev[cp] < 0) {
            /* HF's ByteLevel decoder keeps a token with any non-byte char as-is */
            memcpy(o, piece, n);
            k = n;
            break;
        }
        o[k++] = (char)tab->rev[cp];
        i += w;
    }
    o[k] = 0;
    *out_len = k;
    return o;
}

char *tok_bpe_piece_to_text(const char *piece) {
    size_t n;
    return tok_bpe_piece_to_bytes(piece, &n);
}
