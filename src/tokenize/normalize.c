/* normalize.c — the normalized text with alignments and the SentencePiece-family
 * normalizers (see normalize.h). Every normalizer lists the new text as (character,
 * change) pairs exactly as HF tokenizers builds them (normalizers/precompiled.rs,
 * strip.rs, NormalizedString::{lowercase, filter, lrstrip, replace}) and hands them to
 * transform(), a port of NormalizedString::transform_range over the whole text: change 0
 * replaces the next original character (and takes its alignment), 1 inserts (and takes
 * the alignment of the byte before), -k replaces and removes the k characters after it.
 * The Unicode forms use utf8proc on runs that normalize independently, so the text is
 * the whole text's normalization; their alignment approximates HF's
 * (unicode-normalization-alignments) run by run.
 * It does not: other normalizers (BertNormalizer, NMT, ByteLevel, Prepend and
 * Replace(String) are elsewhere), or Unicode versions other than utf8proc's.
 */
#include "tokenize/normalize.h"

#include <pcre2.h>
#include <string.h>
#include <utf8proc.h>

int tok_ntext_alloc(tok_ntext *t, size_t n) {
    t->s = as_malloc(n + 1);
    t->os = as_malloc_array(n + 1, sizeof *t->os);
    t->oe = as_malloc_array(n + 1, sizeof *t->oe);
    t->n = n;
    if (t->s && t->os && t->oe) {
        t->s[n] = 0;
        return 1;
    }
    tok_ntext_free(t);
    return 0;
}

void tok_ntext_free(tok_ntext *t) {
    if (!t) return;
    free(t->s);
    free(t->os);
    free(t->oe);
    memset(t, 0, sizeof *t);
}

/* ---- the transform --------------------------------------------------------------- */

/* One step of a transform: emit cp with change (0, 1 or -k); cp < 0 emits nothing and
 * removes -change original characters (HF's initial_offset, or a removed match). */
typedef struct {
    int32_t cp;
    int32_t change;
} nchange;

typedef struct {
    nchange *v;
    size_t n, cap;
    size_t bytes; /* UTF-8 bytes of the emitted characters */
} nchanges;

static int ch_push(nchanges *c, int32_t cp, int32_t change) {
    if (c->n == c->cap) {
        size_t nc = c->cap ? c->cap * 2 : 256;
        nchange *nv = realloc(c->v, as_mul_size(nc, sizeof *nv));
        if (!nv) return 0;
        c->v = nv;
        c->cap = nc;
    }
    c->v[c->n++] = (nchange){cp, change};
    if (cp >= 0) {
        utf8proc_uint8_t tmp[4];
        c->bytes += (size_t)utf8proc_encode_char(cp, tmp);
    }
    return 1;
}

static size_t char_len(const tok_ntext *t, size_t i) {
    unsigned char c = (unsigned char)t->s[i];
    size_t k = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    return i + k > t->n ? t->n - i : k;
}

/* Decodes the (valid) character at t->s[i]; returns its length. */
static size_t dec(const tok_ntext *t, size_t i, int32_t *cp) {
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)t->s + i, (utf8proc_ssize_t)(t->n - i), cp);
    if (k <= 0) {
        *cp = 0xFFFD;
        return 1;
    }
    return (size_t)k;
}

/* Rebuilds t from the changes (HF transform_range over the whole text). */
static as_status transform(tok_ntext *t, const nchanges *c, as_error *err) {
    if (c->bytes > TOK_MAX_NORM_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "text: over %u bytes once normalized", TOK_MAX_NORM_BYTES);
    tok_ntext o;
    if (!tok_ntext_alloc(&o, c->bytes)) return as_err_set(err, AS_ERR_INTERNAL, "normalizer: out of memory");
    size_t off = 0, w = 0; /* off: the next original byte not yet consumed */
    for (size_t k = 0; k < c->n; k++) {
        int32_t cp = c->v[k].cp, change = c->v[k].change;
        int32_t as = 0, ae = 0;
        if (cp >= 0) {
            if (change > 0) {
                if (off > 0) as = t->os[off - 1], ae = t->oe[off - 1];
            } else if (off < t->n) {
                as = t->os[off], ae = t->oe[off];
            } else if (t->n > 0) { /* not reached by the normalizers here */
                as = t->os[t->n - 1], ae = t->oe[t->n - 1];
            }
            if (change <= 0 && off < t->n) off += char_len(t, off);
        }
        for (int32_t q = 0; change < 0 && q < -change && off < t->n; q++) off += char_len(t, off);
        if (cp < 0) continue;
        utf8proc_ssize_t m = utf8proc_encode_char(cp, (utf8proc_uint8_t *)o.s + w);
        for (utf8proc_ssize_t q = 0; q < m; q++) {
            o.os[w + (size_t)q] = as;
            o.oe[w + (size_t)q] = ae;
        }
        w += (size_t)m;
    }
    ASSERT(w == c->bytes);
    o.s[w] = 0;
    tok_ntext_free(t);
    *t = o;
    return AS_OK;
}

static as_status oom(nchanges *c, as_error *err) {
    free(c->v);
    return as_err_set(err, AS_ERR_INTERNAL, "normalizer: out of memory");
}

static as_status finish(tok_ntext *t, nchanges *c, as_error *err) {
    as_status rc = transform(t, c, err);
    free(c->v);
    return rc;
}

/* Pushes norm (valid UTF-8, len bytes) replacing old_count characters, as HF's
 * precompiled.rs replace() does: every new character with change 0, then the last
 * (new - old) of all listed changes set to 1 when it grows, or old - new subtracted from
 * the last listed change when it shrinks (an earlier character's when norm is empty). */
static int push_replacement(nchanges *c, const char *norm, size_t len, int32_t old_count) {
    int32_t new_count = 0;
    for (size_t i = 0; i < len;) {
        int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)norm + i, (utf8proc_ssize_t)(len - i), &cp);
        if (k <= 0) break; /* the table's strings are checked UTF-8 */
        if (!ch_push(c, cp, 0)) return 0;
        new_count++;
        i += (size_t)k;
    }
    int32_t diff = new_count - old_count;
    for (size_t q = c->n; diff > 0 && q > 0 && q > c->n - (size_t)diff; q--) c->v[q - 1].change = 1;
    if (diff < 0 && c->n > 0) c->v[c->n - 1].change += diff;
    return 1;
}

/* ---- the normalizers ---------------------------------------------------------------- */

as_status tok_norm_precompiled(tok_ntext *t, const tok_charsmap *cm, as_error *err) {
    nchanges c = {0};
    int modified = 0;
    utf8proc_int32_t state = 0;
    size_t i = 0;
    while (i < t->n) {
        /* one extended grapheme cluster [i, j) */
        int32_t cp, prev;
        size_t j = i + dec(t, i, &prev);
        while (j < t->n) {
            size_t k = dec(t, j, &cp);
            if (utf8proc_grapheme_break_stateful(prev, cp, &state)) break;
            prev = cp;
            j += k;
        }
        state = 0;
        size_t nlen;
        const char *norm = j - i < 6 ? tok_charsmap_lookup(cm, t->s + i, j - i, &nlen) : NULL;
        if (norm) {
            int32_t old_count = 0;
            for (size_t q = i; q < j; q++) old_count += ((unsigned char)t->s[q] & 0xC0) != 0x80;
            if (!push_replacement(&c, norm, nlen, old_count)) return oom(&c, err);
            modified = 1;
        } else {
            for (size_t q = i; q < j;) {
                size_t k = dec(t, q, &cp);
                norm = tok_charsmap_lookup(cm, t->s + q, k, &nlen);
                if (norm) modified = 1;
                if (!(norm ? push_replacement(&c, norm, nlen, 1) : ch_push(&c, cp, 0))) return oom(&c, err);
                q += k;
            }
        }
        i = j;
    }
    if (!modified) {
        free(c.v);
        return AS_OK;
    }
    return finish(t, &c, err);
}

int tok_is_whitespace(int32_t cp) {
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return 1;
    if (cp < 0x85) return 0;
    return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

as_status tok_norm_strip(tok_ntext *t, int left, int right, as_error *err) {
    size_t n_chars = 0, lead = 0, trail = 0;
    int32_t cp;
    int in_lead = 1;
    for (size_t i = 0; i < t->n; n_chars++) {
        i += dec(t, i, &cp);
        if (in_lead && tok_is_whitespace(cp)) lead++;
        else in_lead = 0;
        trail = tok_is_whitespace(cp) ? trail + 1 : 0;
    }
    if (!left) lead = 0;
    if (!right) trail = 0;
    if (lead == 0 && trail == 0) return AS_OK;
    nchanges c = {0};
    if (!ch_push(&c, -1, -(int32_t)lead)) return oom(&c, err);
    size_t k = 0;
    for (size_t i = 0; i < t->n; k++) {
        i += dec(t, i, &cp);
        if (k < lead || k + trail >= n_chars) continue;
        if (!ch_push(&c, cp, k + trail + 1 == n_chars ? -(int32_t)trail : 0)) return oom(&c, err);
    }
    return finish(t, &c, err);
}

as_status tok_norm_lowercase(tok_ntext *t, as_error *err) {
    nchanges c = {0};
    for (size_t i = 0; i < t->n;) {
        int32_t cp;
        i += dec(t, i, &cp);
        int ok = cp == 0x130 ? ch_push(&c, 'i', 0) && ch_push(&c, 0x307, 1) : ch_push(&c, utf8proc_tolower(cp), 0);
        if (!ok) return oom(&c, err);
    }
    return finish(t, &c, err);
}

static int is_mark(int32_t cp) {
    utf8proc_category_t g = utf8proc_category(cp);
    return g == UTF8PROC_CATEGORY_MN || g == UTF8PROC_CATEGORY_MC || g == UTF8PROC_CATEGORY_ME;
}

as_status tok_norm_strip_accents(tok_ntext *t, as_error *err) {
    nchanges c = {0};
    int32_t lead = 0;
    size_t i = 0;
    int32_t cp;
    while (i < t->n) { /* marks before the first kept character: HF's initial_offset */
        size_t k = dec(t, i, &cp);
        if (!is_mark(cp)) break;
        lead++;
        i += k;
    }
    if (lead && !ch_push(&c, -1, -lead)) return oom(&c, err);
    while (i < t->n) {
        i += dec(t, i, &cp);
        int32_t removed = 0, m;
        while (i < t->n) {
            size_t k = dec(t, i, &m);
            if (!is_mark(m)) break;
            removed++;
            i += k;
        }
        if (!ch_push(&c, cp, -removed)) return oom(&c, err);
    }
    return finish(t, &c, err);
}

/* A decomposition run [a, b) whose characters decomposed one by one give exactly its
 * decomposition run[0..m) (no canonical reordering across them) is listed per
 * character, as unicode-normalization-alignments does: each character's first output
 * replaces it, the others are inserted. Returns 1 when listed, 0 when the run must be
 * listed whole, -1 when out of memory. */
static int decompose_by_char(const tok_ntext *t, size_t a, size_t b, const utf8proc_uint8_t *run, size_t m, int opt,
                             nchanges *c) {
    size_t n0 = c->n, bytes0 = c->bytes, w = 0;
    for (size_t i = a; i < b;) {
        int32_t cp;
        size_t k = dec(t, i, &cp);
        int32_t buf[32];
        utf8proc_ssize_t nd = utf8proc_decompose_char(cp, buf, 32, (utf8proc_option_t)(UTF8PROC_STABLE | opt), NULL);
        if (nd < 0 || nd > 32) goto whole;
        for (utf8proc_ssize_t q = 0; q < nd; q++) {
            utf8proc_uint8_t e[4];
            utf8proc_ssize_t el = utf8proc_encode_char(buf[q], e);
            if (w + (size_t)el > m || memcmp(run + w, e, (size_t)el) != 0) goto whole;
            w += (size_t)el;
            if (!ch_push(c, buf[q], q == 0 ? 0 : 1)) return -1;
        }
        if (nd == 0 && !ch_push(c, -1, -1)) return -1;
        i += k;
    }
    if (w == m) return 1;
whole:
    c->n = n0;
    c->bytes = bytes0;
    return 0;
}

/* 1 when normalizing s[a, b) and s[b, e) apart gives what normalizing s[a, e) gives:
 * b is then a safe place to cut a run (-1 when out of memory). ASCII never combines
 * with what is before it. */
static int cut_ok(const tok_ntext *t, size_t a, size_t b, size_t e, int opt) {
    if ((unsigned char)t->s[b] < 0x80) return 1;
    utf8proc_uint8_t *x = NULL, *y = NULL, *z = NULL;
    utf8proc_option_t o = (utf8proc_option_t)(UTF8PROC_STABLE | opt);
    utf8proc_ssize_t nx = utf8proc_map((const utf8proc_uint8_t *)t->s + a, (utf8proc_ssize_t)(b - a), &x, o);
    utf8proc_ssize_t ny = utf8proc_map((const utf8proc_uint8_t *)t->s + b, (utf8proc_ssize_t)(e - b), &y, o);
    utf8proc_ssize_t nz = utf8proc_map((const utf8proc_uint8_t *)t->s + a, (utf8proc_ssize_t)(e - a), &z, o);
    int r = nx < 0 || ny < 0 || nz < 0 ? -1
            : nz == nx + ny && memcmp(z, x, (size_t)nx) == 0 && memcmp(z + nx, y, (size_t)ny) == 0;
    free(x);
    free(y);
    free(z);
    return r;
}

/* The text is cut into runs that normalize independently (cut_ok), so the result is
 * the normalization of the whole text; each run's output is aligned with the run:
 * decompositions character by character where that gives the same text, else the
 * run's first characters replace its first characters, the rest inserted or removed. */
as_status tok_norm_unicode(tok_ntext *t, tok_norm_form form, as_error *err) {
    static const int opts[4] = {UTF8PROC_COMPOSE, UTF8PROC_DECOMPOSE, UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
                                UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT};
    nchanges c = {0};
    for (size_t i = 0; i < t->n;) {
        size_t a = i;
        int32_t cp;
        i += dec(t, i, &cp);
        int32_t old = 1;
        while (i < t->n) {
            size_t k = dec(t, i, &cp);
            int r = cut_ok(t, a, i, i + k, opts[form]);
            if (r < 0) return oom(&c, err);
            if (r) break;
            old++;
            i += k;
        }
        utf8proc_uint8_t *run = NULL;
        utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)t->s + a, (utf8proc_ssize_t)(i - a), &run,
                                          (utf8proc_option_t)(UTF8PROC_STABLE | opts[form]));
        if (m < 0) return oom(&c, err);
        if ((form == TOK_NORM_NFD || form == TOK_NORM_NFKD) && old > 1) {
            int r = decompose_by_char(t, a, i, run, (size_t)m, opts[form], &c);
            if (r < 0) goto fail;
            if (r > 0) {
                free(run);
                continue;
            }
        }
        int32_t n_new = 0;
        for (utf8proc_ssize_t q = 0; q < m; q++) n_new += (run[q] & 0xC0) != 0x80;
        if (n_new == 0 && !ch_push(&c, -1, -old)) goto fail;
        int32_t idx = 0;
        for (utf8proc_ssize_t q = 0; q < m; idx++) {
            int32_t x;
            q += utf8proc_iterate(run + q, m - q, &x);
            int32_t change = idx < old ? 0 : 1;
            if (n_new < old && idx == n_new - 1) change = -(old - n_new);
            if (!ch_push(&c, x, change)) goto fail;
        }
        free(run);
        continue;
    fail:
        free(run);
        return oom(&c, err);
    }
    return finish(t, &c, err);
}

as_status tok_norm_replace_regex(tok_ntext *t, const void *re, const char *content, as_error *err) {
    const pcre2_code *code = re;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    if (!md) return as_err_set(err, AS_ERR_INTERNAL, "normalizer: out of memory");
    nchanges c = {0};
    size_t i = 0, done = 0; /* done: bytes of t already listed */
    int any = 0;
    as_status rc = AS_OK;
    while (i <= t->n) {
        int r = pcre2_match(code, (PCRE2_SPTR)t->s, t->n, i, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r < 0) break; /* no match (or a match limit): the rest stays */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms < done || me < ms) break;
        any = 1;
        int32_t cp;
        for (size_t q = done; q < ms;) {
            q += dec(t, q, &cp);
            if (!ch_push(&c, cp, 0)) goto oom;
        }
        int32_t removed = 0;
        for (size_t q = ms; q < me; removed++) q += dec(t, q, &cp);
        if (removed && !ch_push(&c, -1, -removed)) goto oom;
        for (size_t q = 0; content[q];) {
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)content + q, -1, &cp);
            if (k <= 0) break;
            if (!ch_push(&c, cp, 1)) goto oom;
            q += (size_t)k;
        }
        done = me;
        i = me > ms ? me : (me < t->n ? me + char_len(t, me) : t->n + 1);
    }
    if (!any) goto cleanup;
    for (size_t q = done; q < t->n;) {
        int32_t cp;
        q += dec(t, q, &cp);
        if (!ch_push(&c, cp, 0)) goto oom;
    }
    rc = transform(t, &c, err);
    goto cleanup;
oom:
    rc = as_err_set(err, AS_ERR_INTERNAL, "normalizer: out of memory");
cleanup:
    free(c.v);
    pcre2_match_data_free(md);
    return rc;
}
