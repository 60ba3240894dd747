/* wordpiece.c — BERT's tokenizer exactly as Hugging Face `tokenizers` runs it:
 * BertNormalizer (clean_text, handle_chinese_chars, strip_accents, lowercase), then
 * BertPreTokenizer (split on whitespace, isolate punctuation), then the WordPiece
 * model (greedy longest-match-first with a continuation prefix).
 * Sources: tokenizers/src/normalizers/bert.rs, pre_tokenizers/bert.rs,
 * models/wordpiece/mod.rs; google-research/bert tokenization.py.
 *
 * Offsets: every normalized character keeps the byte span of the original character
 * it came from (as HF's NormalizedString alignments do); a token spans from its first
 * character's start to its last character's end, in bytes of the input text.
 *
 * Character classes come from utf8proc, corrected by small exception tables so that
 * they agree with what HF actually uses (Rust's std for whitespace and lower-casing,
 * the `unicode_categories` crate's older tables for control/punctuation/Mn). The
 * tables were derived by probing every code point through tokenizers 0.23.2.
 * It does not handle added/special tokens (tokenizer.c does) or invalid UTF-8
 * (callers pass valid UTF-8; bad bytes are read as U+FFFD without crashing).
 */
#include "tokenize/wordpiece.h"

#include <string.h>
#include <utf8proc.h>

/* A normalized character and the byte span [s, e) of the original text it came from. */
typedef struct {
    int32_t cp;
    int32_t s, e;
} wp_char;

typedef struct {
    wp_char *a;
    size_t n, cap;
} wp_chars;

static int chars_push(wp_chars *c, int32_t cp, int32_t s, int32_t e) {
    if (c->n == c->cap) {
        size_t ncap = c->cap ? c->cap * 2 : 64;
        wp_char *na = realloc(c->a, ncap * sizeof *na);
        if (!na) return 0;
        c->a = na;
        c->cap = ncap;
    }
    c->a[c->n].cp = cp;
    c->a[c->n].s = s;
    c->a[c->n].e = e;
    c->n++;
    return 1;
}

/* ---- character classes ---------------------------------------------------- */

typedef struct {
    int32_t lo, hi;
} cp_range;

static int in_ranges(int32_t cp, const cp_range *r, size_t n) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo) hi = mid;
        else if (cp > r[mid].hi) lo = mid + 1;
        else return 1;
    }
    return 0;
}

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

#include "tokenize/wordpiece_tables.h"

/* Rust's char::is_whitespace (Unicode White_Space). */
static int is_ws(int32_t cp) {
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return 1;
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static utf8proc_category_t category(int32_t cp) {
    return (utf8proc_category_t)utf8proc_category(cp);
}

/* HF bert.rs is_control: categories Cc, Cf, Co (unicode_categories' is_other)
 * except \t \n \r. */
static int is_control(int32_t cp) {
    if (cp == '\t' || cp == '\n' || cp == '\r') return 0;
    if (cp < 0x20 || cp == 0x7F) return 1;
    if (cp < 0xA0 && cp > 0x7F) return 1;
    if (cp < 0xA0) return 0;
    if (in_ranges(cp, wp_control_flip, N_OF(wp_control_flip))) {
        utf8proc_category_t c = category(cp);
        return !(c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF ||
                 c == UTF8PROC_CATEGORY_CO);
    }
    utf8proc_category_t c = category(cp);
    return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO;
}

/* HF pre_tokenizers/bert.rs is_bert_punc: ASCII punctuation or Unicode P*. */
static int is_punct(int32_t cp) {
    if (cp < 0x80)
        return (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
               (cp >= 123 && cp <= 126);
    int p;
    utf8proc_category_t c = category(cp);
    p = c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
    if (in_ranges(cp, wp_punct_flip, N_OF(wp_punct_flip))) p = !p;
    return p;
}

/* Nonspacing mark (Mn), dropped by strip_accents. */
static int is_mn(int32_t cp) {
    if (cp < 0x300) return 0;
    int m = category(cp) == UTF8PROC_CATEGORY_MN;
    if (in_ranges(cp, wp_mn_flip, N_OF(wp_mn_flip))) m = !m;
    return m;
}

/* HF bert.rs is_chinese_char (note 0x2B920, not 0x2B820, as in tokenizers' source). */
static int is_cjk(int32_t cp) {
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* Rust's char::to_lowercase: writes 1 or 2 code points to out, returns the count. */
static int to_lower(int32_t cp, int32_t out[2]) {
    if (cp < 0x80) {
        out[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
        return 1;
    }
    if (cp == 0x130) { /* SpecialCasing: LATIN CAPITAL LETTER I WITH DOT ABOVE */
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    size_t lo = 0, hi = N_OF(wp_lower_fix);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < wp_lower_fix[mid][0]) hi = mid;
        else if (cp > wp_lower_fix[mid][0]) lo = mid + 1;
        else {
            out[0] = wp_lower_fix[mid][1];
            return 1;
        }
    }
    out[0] = utf8proc_tolower(cp);
    return 1;
}

/* Canonical decomposition (NFD of one code point); returns the count (<= cap). */
static int decompose(int32_t cp, int32_t *out, int cap) {
    if (cp < 0xC0) {
        out[0] = cp;
        return 1;
    }
    if (in_ranges(cp, wp_nfd_keep, N_OF(wp_nfd_keep))) {
        out[0] = cp;
        return 1;
    }
    int bound = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char(cp, out, cap, UTF8PROC_DECOMPOSE, &bound);
    if (n <= 0 || n > cap) {
        out[0] = cp;
        return 1;
    }
    return (int)n;
}

static int ccc(int32_t cp) {
    if (cp < 0x300) return 0;
    return utf8proc_get_property(cp)->combining_class;
}

/* NFD's canonical ordering: within each run of non-starters, a stable sort by
 * combining class (counting sort, so hostile runs stay linear). tmp: (n) scratch. */
static void canonical_order(wp_char *a, size_t n, wp_char *tmp) {
    size_t i = 0;
    while (i < n) {
        if (ccc(a[i].cp) == 0) {
            i++;
            continue;
        }
        size_t j = i + 1, sorted = 1;
        int prev = ccc(a[i].cp);
        while (j < n) {
            int c = ccc(a[j].cp);
            if (c == 0) break;
            if (c < prev) sorted = 0;
            prev = c;
            j++;
        }
        if (!sorted) {
            size_t count[257] = {0};
            for (size_t k = i; k < j; k++) count[ccc(a[k].cp) + 1]++;
            for (int k = 1; k < 257; k++) count[k] += count[k - 1];
            for (size_t k = i; k < j; k++) tmp[count[ccc(a[k].cp)]++] = a[k];
            memcpy(a + i, tmp, (j - i) * sizeof *a);
        }
        i = j;
    }
}

/* ---- normalization ---------------------------------------------------------- */

/* Runs BertNormalizer over text into *out (normalized chars with original spans). */
static as_status normalize(const tok_wordpiece_opts *o, const char *text, size_t len,
                           wp_chars *out, as_error *err) {
    wp_chars a = {0}, b = {0};
    as_status rc = AS_OK;
    size_t i = 0;
    while (i < len) {
        int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i,
                                              (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0) {
            cp = 0xFFFD;
            k = 1;
        }
        int32_t s = (int32_t)i, e = (int32_t)(i + (size_t)k);
        i += (size_t)k;
        if (o->clean_text) {
            if (cp == 0 || cp == 0xFFFD || is_control(cp)) continue;
            if (is_ws(cp)) cp = ' ';
        }
        int ok;
        if (o->handle_chinese_chars && is_cjk(cp))
            ok = chars_push(&a, ' ', s, e) && chars_push(&a, cp, s, e) && chars_push(&a, ' ', s, e);
        else if (o->strip_accents) {
            int32_t d[8];
            int nd = decompose(cp, d, 8);
            ok = 1;
            for (int q = 0; q < nd && ok; q++) ok = chars_push(&a, d[q], s, e);
        } else
            ok = chars_push(&a, cp, s, e);
        if (!ok) goto oom;
    }
    if (o->strip_accents) {
        wp_char *tmp = as_malloc_array(a.n, sizeof *tmp);
        if (!tmp) goto oom;
        canonical_order(a.a, a.n, tmp);
        free(tmp);
        size_t w = 0;
        for (size_t r = 0; r < a.n; r++)
            if (!is_mn(a.a[r].cp)) a.a[w++] = a.a[r];
        a.n = w;
    }
    if (o->lowercase) {
        for (size_t r = 0; r < a.n; r++) {
            int32_t lc[2];
            int nl = to_lower(a.a[r].cp, lc);
            for (int q = 0; q < nl; q++)
                if (!chars_push(&b, lc[q], a.a[r].s, a.a[r].e)) goto oom;
        }
        free(a.a);
        *out = b;
    } else {
        *out = a;
    }
    return AS_OK;
oom:
    free(a.a);
    free(b.a);
    rc = as_err_set(err, AS_ERR_INTERNAL, "wordpiece: out of memory");
    return rc;
}

/* ---- WordPiece model -------------------------------------------------------- */

typedef struct {
    const tok_vocab *v;
    const tok_wordpiece_opts *o;
    size_t plen;     /* strlen(continuing_prefix) */
    size_t max_len;  /* longest vocabulary piece in bytes */
    char *buf;       /* (plen + 4 * max chars per word) word bytes, see encode_word */
    int32_t *bchar;  /* (4 * max chars per word + 1) char index of each word byte */
    size_t buf_cap;
} wp_state;

static int enc_utf8(int32_t cp, char *out) {
    return (int)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
}

/* Tokenizes the word w[0..n) (normalized chars) and appends its pieces to out. */
static as_status encode_word(wp_state *st, const wp_char *w, size_t n, tok_ids *out,
                             as_error *err) {
    const tok_wordpiece_opts *o = st->o;
    if (n == 0) return AS_OK;
    if ((int)n > o->max_input_chars_per_word)
        return tok_ids_push(out, o->unk_id, w[0].s, w[n - 1].e, err);
    /* The word's bytes start at buf + plen; for a match starting at byte p > 0 the
     * prefix is written over the (already consumed) bytes just before it, so the
     * candidate "##" + word[p..q) is contiguous at buf + p. */
    size_t need = st->plen + 4 * n + 1;
    if (need > st->buf_cap) {
        char *nb = realloc(st->buf, need);
        if (!nb) return as_err_set(err, AS_ERR_INTERNAL, "wordpiece: out of memory");
        st->buf = nb;
        int32_t *nc = realloc(st->bchar, need * sizeof *nc);
        if (!nc) return as_err_set(err, AS_ERR_INTERNAL, "wordpiece: out of memory");
        st->bchar = nc;
        st->buf_cap = need;
    }
    char *wb = st->buf + st->plen;
    size_t wlen = 0;
    for (size_t c = 0; c < n; c++) {
        int k = enc_utf8(w[c].cp, wb + wlen);
        for (int q = 0; q < k; q++) st->bchar[wlen + (size_t)q] = (int32_t)c;
        wlen += (size_t)k;
    }
    st->bchar[wlen] = (int32_t)n;
    int first_piece = out->n;
    size_t start = 0;
    while (start < wlen) {
        const char *cand;
        size_t extra;
        if (start > 0) {
            memcpy(st->buf + start, o->continuing_prefix, st->plen);
            cand = st->buf + start;
            extra = st->plen;
        } else {
            cand = wb;
            extra = 0;
        }
        size_t end = wlen;
        if (st->max_len < extra) end = start;
        else if (end - start > st->max_len - extra) end = start + (st->max_len - extra);
        while (end > start && end < wlen && st->bchar[end] == st->bchar[end - 1]) end--;
        int32_t id = -1;
        while (end > start) {
            id = tok_vocab_get(st->v, cand, extra + (end - start));
            if (id >= 0) break;
            end--;
            while (end > start && st->bchar[end] == st->bchar[end - 1]) end--;
        }
        if (id < 0) { /* the whole word becomes one unknown token */
            out->n = first_piece;
            return tok_ids_push(out, o->unk_id, w[0].s, w[n - 1].e, err);
        }
        const wp_char *c0 = &w[st->bchar[start]], *c1 = &w[st->bchar[end - 1]];
        as_status rc = tok_ids_push(out, id, c0->s, c1->e, err);
        if (rc != AS_OK) return rc;
        start = end;
    }
    return AS_OK;
}

as_status tok_wordpiece_encode(const tok_vocab *v, const tok_wordpiece_opts *o, const char *text,
                               size_t len, tok_ids *out, as_error *err) {
    ASSERT(v && o && out && (text || len == 0));
    wp_chars nc = {0};
    as_status rc = normalize(o, text, len, &nc, err);
    if (rc != AS_OK) return rc;
    wp_state st = {.v = v, .o = o, .plen = strlen(o->continuing_prefix),
                   .max_len = tok_vocab_max_len(v)};
    /* BertPreTokenizer: whitespace separates words; each punctuation char is a word. */
    size_t w0 = 0;
    for (size_t i = 0; i <= nc.n && rc == AS_OK; i++) {
        if (i == nc.n) {
            rc = encode_word(&st, nc.a + w0, i - w0, out, err);
            break;
        }
        int32_t cp = nc.a[i].cp;
        if (is_ws(cp)) {
            rc = encode_word(&st, nc.a + w0, i - w0, out, err);
            w0 = i + 1;
        } else if (is_punct(cp)) {
            rc = encode_word(&st, nc.a + w0, i - w0, out, err);
            if (rc == AS_OK) rc = encode_word(&st, nc.a + i, 1, out, err);
            w0 = i + 1;
        }
    }
    free(st.buf);
    free(st.bchar);
    free(nc.a);
    return rc;
}

/* Normaliser + pre-tokenizer only (used by the vocabulary trainer in src/train):
 * the same words tok_wordpiece_encode splits text into, as UTF-8 of their
 * normalized characters. */
as_status tok_wordpiece_words(const tok_wordpiece_opts *o, const char *text, size_t len, tok_word_fn fn,
                              void *ctx, as_error *err) {
    ASSERT(o && fn && (text || len == 0));
    wp_chars nc = {0};
    as_status rc = normalize(o, text, len, &nc, err);
    if (rc != AS_OK) return rc;
    char *buf = as_malloc(4 * (nc.n + 1));
    if (!buf) {
        free(nc.a);
        return as_err_set(err, AS_ERR_INTERNAL, "wordpiece: out of memory");
    }
    size_t w0 = 0;
    for (size_t i = 0; i <= nc.n && rc == AS_OK; i++) {
        int ws = i < nc.n && is_ws(nc.a[i].cp), pu = i < nc.n && !ws && is_punct(nc.a[i].cp);
        if (i < nc.n && !ws && !pu) continue;
        /* emit [w0, i), then the punctuation char alone */
        for (int pass = 0; pass < 1 + pu && rc == AS_OK; pass++) {
            size_t a = pass ? i : w0, b = pass ? i + 1 : i, n = 0;
            for (size_t k = a; k < b; k++) n += (size_t)enc_utf8(nc.a[k].cp, buf + n);
            if (n && fn(buf, n, ctx)) rc = as_err_set(err, AS_ERR_INTERNAL, "wordpiece: word callback failed");
        }
        w0 = i + 1;
    }
    free(buf);
    free(nc.a);
    return rc;
}
