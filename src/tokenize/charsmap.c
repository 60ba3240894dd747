/* charsmap.c — SentencePiece's precompiled_charsmap (see charsmap.h): base64 decoding,
 * the darts-clone double-array unit layout (sentencepiece third_party/darts_clone,
 * as read by HF spm_precompiled: has_leaf = bit 8, value = low 31 bits, label = low 8
 * bits plus bit 31, offset = (unit >> 10) << 8 when bit 9 is set, else unit >> 10), and
 * the common-prefix search. Every array index is checked against the number of units.
 * It does not build tables.
 */
#include "tokenize/charsmap.h"

#include <string.h>

struct tok_charsmap {
    uint32_t *units; /* (n_units) the double-array trie */
    size_t n_units;
    char *norm;      /* (n_norm) NUL-separated replacement strings */
    size_t n_norm;
};

static int b64_val(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with padding (as HF writes it); *out owned by the caller. */
static as_status b64_decode(const char *s, size_t n, unsigned char **out, size_t *out_n, as_error *err) {
    *out = NULL;
    *out_n = 0;
    if (n % 4 != 0)
        return as_err_set(err, AS_ERR_INPUT, "precompiled_charsmap: base64 length %zu is not a multiple of 4", n);
    if (n / 4 * 3 > TOK_CHARSMAP_MAX_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "precompiled_charsmap: over %u bytes", TOK_CHARSMAP_MAX_BYTES);
    unsigned char *b = as_malloc(n / 4 * 3 + 1);
    if (!b) return as_err_set(err, AS_ERR_INTERNAL, "precompiled_charsmap: out of memory");
    size_t w = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + (size_t)k];
            if (c == '=' && i + 4 == n && k >= 2) {
                v[k] = 0;
                pad++;
                continue;
            }
            v[k] = b64_val(c);
            if (v[k] < 0 || pad) {
                free(b);
                return as_err_set(err, AS_ERR_INPUT, "precompiled_charsmap: bad base64 at character %zu", i + (size_t)k);
            }
        }
        uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        b[w++] = (unsigned char)(x >> 16);
        if (pad < 2) b[w++] = (unsigned char)(x >> 8);
        if (pad < 1) b[w++] = (unsigned char)x;
    }
    *out = b;
    *out_n = w;
    return AS_OK;
}

/* 1 when s[0..n) is valid UTF-8 (no surrogates or overlongs), as Rust's from_utf8. */
static int valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        size_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b < 0x80) need = 0;
        else if (b >= 0xC2 && b <= 0xDF) need = 1;
        else if (b == 0xE0) need = 2, lo = 0xA0;
        else if (b == 0xED) need = 2, hi = 0x9F;
        else if (b >= 0xE1 && b <= 0xEF) need = 2;
        else if (b == 0xF0) need = 3, lo = 0x90;
        else if (b >= 0xF1 && b <= 0xF3) need = 3;
        else if (b == 0xF4) need = 3, hi = 0x8F;
        else return 0;
        if (need > n - i - 1) return 0;
        for (size_t k = 1; k <= need; k++) {
            unsigned char c = s[i + k];
            if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) return 0;
        }
        i += need + 1;
    }
    return 1;
}

as_status tok_charsmap_init(const char *b64, size_t n, tok_charsmap **out, as_error *err) {
    ASSERT(out && (b64 || n == 0));
    *out = NULL;
    unsigned char *raw = NULL;
    size_t rn = 0;
    as_status rc = b64_decode(b64, n, &raw, &rn, err);
    if (rc != AS_OK) return rc;
    rc = tok_charsmap_init_raw(raw, rn, out, err);
    free(raw);
    return rc;
}

as_status tok_charsmap_init_raw(const unsigned char *raw, size_t rn, tok_charsmap **out, as_error *err) {
    ASSERT(out && (raw || rn == 0));
    *out = NULL;
    as_status rc = AS_OK;
    tok_charsmap *c = NULL;
    if (rn > TOK_CHARSMAP_MAX_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "precompiled_charsmap: over %u bytes", TOK_CHARSMAP_MAX_BYTES);
    if (rn < 4) {
        rc = as_err_set(err, AS_ERR_INPUT, "precompiled_charsmap: %zu bytes, too short for its header", rn);
        goto cleanup;
    }
    uint32_t trie_bytes = (uint32_t)raw[0] | (uint32_t)raw[1] << 8 | (uint32_t)raw[2] << 16 | (uint32_t)raw[3] << 24;
    if (trie_bytes % 4 != 0 || trie_bytes < 4 || trie_bytes > rn - 4) {
        rc = as_err_set(err, AS_ERR_INPUT,
                        "precompiled_charsmap: trie size %u is not a positive multiple of 4 within the %zu bytes",
                        trie_bytes, rn - 4);
        goto cleanup;
    }
    size_t n_norm = rn - 4 - trie_bytes;
    if (!valid_utf8(raw + 4 + trie_bytes, n_norm)) {
        rc = as_err_set(err, AS_ERR_INPUT, "precompiled_charsmap: the replacement strings are not valid UTF-8");
        goto cleanup;
    }
    c = as_calloc(1, sizeof *c);
    if (!c) goto oom;
    c->n_units = trie_bytes / 4;
    c->units = as_malloc_array(c->n_units, sizeof *c->units);
    c->norm = as_malloc(n_norm + 1);
    if (!c->units || !c->norm) goto oom;
    for (size_t i = 0; i < c->n_units; i++) {
        const unsigned char *p = raw + 4 + 4 * i;
        c->units[i] = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    }
    memcpy(c->norm, raw + 4 + trie_bytes, n_norm);
    c->norm[n_norm] = 0;
    c->n_norm = n_norm;
    *out = c;
    c = NULL;
    goto cleanup;
oom:
    rc = as_err_set(err, AS_ERR_INTERNAL, "precompiled_charsmap: out of memory");
cleanup:
    tok_charsmap_free(c);
    return rc;
}

void tok_charsmap_free(tok_charsmap *c) {
    if (!c) return;
    free(c->units);
    free(c->norm);
    free(c);
}

static int unit_has_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t unit_value(uint32_t u) { return u & ((1u << 31) - 1); }
static uint32_t unit_label(uint32_t u) { return u & ((1u << 31) | 0xFF); }
static size_t unit_offset(uint32_t u) { return (size_t)(u >> 10) << ((u & (1u << 9)) >> 6); }

const char *tok_charsmap_lookup(const tok_charsmap *c, const char *s, size_t n, size_t *len) {
    ASSERT(c && len && (s || n == 0));
    *len = 0;
    size_t pos = unit_offset(c->units[0]);
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b == 0) break;
        pos ^= b;
        if (pos >= c->n_units) return NULL;
        uint32_t u = c->units[pos];
        if (unit_label(u) != b) return NULL;
        pos ^= unit_offset(u);
        if (!unit_has_leaf(u)) continue;
        if (pos >= c->n_units) return NULL;
        size_t at = unit_value(c->units[pos]);
        if (at > c->n_norm) return NULL; /* at == n_norm: the empty string */
        if (((unsigned char)c->norm[at] & 0xC0) == 0x80) return NULL;
        *len = strlen(c->norm + at);
        return c->norm + at;
    }
    return NULL;
}
