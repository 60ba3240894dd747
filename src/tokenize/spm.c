/* spm.c — SentencePiece-style BPE exactly as Hugging Face `tokenizers` runs the
 * tokenizer.json files of Llama 2, Mistral, Phi-3 and Gemma (models/bpe/model.rs with
 * byte_fallback; normalizers/{prepend,replace}.rs; pre_tokenizers/{metaspace,split}.rs):
 *   1. the normalizer steps in order: Prepend(s) puts s before a non-empty text,
 *      Replace(a, b) replaces every (non-overlapping, leftmost) a by b;
 *   2. the pre-tokenizer: none (the whole text is one word), Metaspace (" " -> "▁",
 *      "▁" prepended per prepend_scheme unless the text already starts with it, then
 *      optionally split before every "▁"), or Split on a literal string;
 *   3. per word: the whole word when ignore_merges finds it in the vocabulary; else one
 *      symbol per character in the vocabulary, its bytes as <0xNN> tokens (byte_fallback)
 *      otherwise, else the unk token (consecutive ones fused with fuse_unk); then the
 *      merges (merges.c), lowest rank first.
 * Every byte of the normalized text remembers the byte range of the original character
 * it came from (an inserted string: the character it stands before), so a token's
 * offsets are the range from its first byte's character to its last byte's, as HF's
 * NormalizedString alignments give them. HF quirks kept: a pending unk is emitted after
 * byte-fallback tokens that follow it; characters with no token and no unk are dropped.
 *
 * Added tokens with normalized = true are matched here, in the normalized text, as their
 * normalized contents (tok_spm_add_normalized); the others tokenizer.c matches in the
 * raw text before calling in.
 *
 * It does not: run regex splits, Unicode normalization forms, dropout, lstrip / rstrip /
 * single_word of normalized added tokens, or decode (tok_spm_byte_piece helps).
 */
#include "tokenize/spm.h"

#include <string.h>

#include "tokenize/merges.h"
#include "tokenize/normalize.h"

#include <pcre2.h>
#include <utf8proc.h>

/* A byte trie over the normalized contents of normalized added tokens. */
typedef struct {
    int32_t child, next; /* first child / next sibling, -1 when none */
    int32_t id;          /* added token ending here, -1 when none */
    unsigned char byte;
} spm_node;

struct tok_spm {
    const tok_vocab *vocab; /* borrowed */
    tok_merges *merges;   /* BPE; NULL for Unigram */
    tok_unigram *unigram; /* Unigram; NULL for BPE */
    tok_spm_opts o;
    int32_t byte_id[256]; /* id of "<0xNN>", -1 when absent */
    spm_node *trie;       /* (n_trie) node 0 is the root; NULL when no normalized added token */
    int n_trie, cap_trie;
    int32_t *remap;       /* (n_remap) Unigram piece index -> output id (tok_spm_set_remap); NULL: none */
    int n_remap;
    const tok_vocab *remap_surface; /* borrowed: an unknown token's normalized text -> output id */
    int32_t remap_unk;    /* output id of an unknown token whose text is not in remap_surface */
};

/* ---- init / free ------------------------------------------------------------------ */

static void byte_piece_name(char out[8], int b) {
    static const char hex[] = "0123456789ABCDEF";
    memcpy(out, "<0x", 3);
    out[3] = hex[b >> 4];
    out[4] = hex[b & 15];
    out[5] = '>';
    out[6] = 0;
}

as_status tok_spm_init(const tok_vocab *v, const char *const *merge_left,
                       const char *const *merge_right, int n_merges, const tok_spm_opts *o,
                       tok_spm **out, as_error *err) {
    ASSERT(v && o && out && o->n_ops >= 0 && o->n_ops <= TOK_SPM_MAX_OPS);
    *out = NULL;
    tok_spm *s = as_calloc(1, sizeof *s);
    if (!s) return as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
    s->vocab = v;
    s->o = *o;
    for (int b = 0; b < 256; b++) {
        char name[8];
        byte_piece_name(name, b);
        s->byte_id[b] = tok_vocab_get(v, name, 6);
    }
    as_status st = tok_merges_init(v, merge_left, merge_right, n_merges, &s->merges, err);
    if (st != AS_OK) { /* the caller keeps o's owned steps */
        for (int k = 0; k < s->o.n_ops; k++) s->o.ops[k].own = NULL;
        tok_spm_free(s);
        return st;
    }
    *out = s;
    return AS_OK;
}

as_status tok_spm_init_unigram(const tok_vocab *v, tok_unigram *u, const tok_spm_opts *o, tok_spm **out,
                               as_error *err) {
    ASSERT(v && u && o && out && o->n_ops >= 0 && o->n_ops <= TOK_SPM_MAX_OPS);
    *out = NULL;
    tok_spm *s = as_calloc(1, sizeof *s);
    if (!s) return as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
    s->vocab = v;
    s->o = *o;
    s->unigram = u;
    for (int b = 0; b < 256; b++) s->byte_id[b] = -1; /* unigram.c does its own byte fallback */
    *out = s;
    return AS_OK;
}

void tok_spm_opts_free(tok_spm_opts *o) {
    if (!o) return;
    for (int k = 0; k < o->n_ops && k < TOK_SPM_MAX_OPS; k++) {
        tok_spm_op *op = &o->ops[k];
        if (op->kind == TOK_SPM_PRECOMPILED) tok_charsmap_free(op->own);
        else if (op->kind == TOK_SPM_REPLACE_REGEX) pcre2_code_free(op->own);
        op->own = NULL;
    }
}

void tok_spm_free(tok_spm *s) {
    if (!s) return;
    tok_spm_opts_free(&s->o);
    tok_unigram_free(s->unigram);
    tok_merges_free(s->merges);
    free(s->trie);
    free(s->remap);
    free(s);
}

as_status tok_spm_set_remap(tok_spm *s, const int32_t *map, int n, const tok_vocab *surface, int32_t unk,
                            as_error *err) {
    ASSERT(s && s->unigram && map && n > 0 && surface);
    int32_t *m = as_malloc_array((size_t)n, sizeof *m);
    if (!m) return as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
    memcpy(m, map, (size_t)n * sizeof *m);
    free(s->remap);
    s->remap = m;
    s->n_remap = n;
    s->remap_surface = surface;
    s->remap_unk = unk;
    return AS_OK;
}

/* tok_spm_set_remap's mapping of the tokens out[n0..) of word w (offsets still relative
 * to w): a piece to its output id, an unknown token to the id of its normalized text. */
static void remap_tokens(const tok_spm *s, const char *w, tok_ids *out, int n0) {
    for (int k = n0; k < out->n; k++) {
        int32_t id = out->ids[k];
        if (id == s->o.unk_id) {
            int32_t v = tok_vocab_get(s->remap_surface, w + out->start[k], (size_t)(out->end[k] - out->start[k]));
            out->ids[k] = v >= 0 ? v : s->remap_unk;
        } else out->ids[k] = id >= 0 && id < s->n_remap ? s->remap[id] : s->remap_unk;
    }
}

int tok_spm_byte_piece(const char *p) {
    if (!p || strncmp(p, "<0x", 3) != 0 || p[5] != '>' || p[6] != 0) return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

/* ---- the normalized text --------------------------------------------------------------- */

static size_t utf8_len(unsigned char c) {
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}

static as_status text_init(tok_ntext *t, const char *s, size_t n, as_error *err) {
    if (!tok_ntext_alloc(t, n)) return as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
    memcpy(t->s, s, n);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len((unsigned char)s[i]);
        if (i + k > n) k = n - i;
        for (size_t q = 0; q < k; q++) {
            t->os[i + q] = (int32_t)i;
            t->oe[i + q] = (int32_t)(i + k);
        }
        i += k;
    }
    return AS_OK;
}

static int starts_with(const tok_ntext *t, const char *p) {
    size_t k = strlen(p);
    return t->n >= k && memcmp(t->s, p, k) == 0;
}

/* Puts p before a non-empty text, aligned with its first character. */
static as_status text_prepend(tok_ntext *t, const char *p, as_error *err) {
    size_t k = strlen(p);
    if (t->n == 0 || k == 0) return AS_OK;
    if (t->n + k > TOK_MAX_NORM_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "text: over %u bytes once normalized", TOK_MAX_NORM_BYTES);
    tok_ntext o;
    if (!tok_ntext_alloc(&o, t->n + k)) return as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
    memcpy(o.s, p, k);
    memcpy(o.s + k, t->s, t->n);
    for (size_t q = 0; q < k; q++) {
        o.os[q] = t->os[0];
        o.oe[q] = t->oe[0];
    }
    memcpy(o.os + k, t->os, t->n * sizeof *o.os);
    memcpy(o.oe + k, t->oe, t->n * sizeof *o.oe);
    tok_ntext_free(t);
    *t = o;
    return AS_OK;
}

/* Leftmost non-overlapping occurrence of p (k bytes) in t at or after i; t->n if none. */
static size_t find_from(const tok_ntext *t, const char *p, size_t k, size_t i) {
    if (k == 0) return t->n;
    while (i + k <= t->n) {
        const char *hit = memchr(t->s + i, p[0], t->n - i - k + 1);
        if (!hit) return t->n;
        i = (size_t)(hit - t->s);
        if (memcmp(hit, p, k) == 0) return i;
        i++;
    }
    return t->n;
}

/* Replaces every occurrence of from by to; the new bytes take the alignment of the
 * last byte they replace (HF NormalizedString::replace inserts them after the match). */
static as_status text_replace(tok_ntext *t, const char *from, const char *to, as_error *err) {
    size_t fk = strlen(from), tk = strlen(to), hits = 0;
    for (size_t i = find_from(t, from, fk, 0); i < t->n; i = find_from(t, from, fk, i + fk)) hits++;
    if (hits == 0) return AS_OK;
    size_t nn = t->n - hits * fk;
    if (tk > 0 && hits > (TOK_MAX_NORM_BYTES - nn) / tk)
        return as_err_set(err, AS_ERR_INPUT, "text: over %u bytes once normalized", TOK_MAX_NORM_BYTES);
    nn += hits * tk;
    tok_ntext o;
    if (!tok_ntext_alloc(&o, nn)) return as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
    size_t r = 0, w = 0;
    while (r < t->n) {
        size_t h = find_from(t, from, fk, r);
        size_t keep = h - r;
        memcpy(o.s + w, t->s + r, keep);
        memcpy(o.os + w, t->os + r, keep * sizeof *o.os);
        memcpy(o.oe + w, t->oe + r, keep * sizeof *o.oe);
        w += keep;
        if (h >= t->n) break;
        memcpy(o.s + w, to, tk);
        for (size_t q = 0; q < tk; q++) {
            o.os[w + q] = t->os[h + fk - 1];
            o.oe[w + q] = t->oe[h + fk - 1];
        }
        w += tk;
        r = h + fk;
    }
    ASSERT(w == nn);
    tok_ntext_free(t);
    *t = o;
    return AS_OK;
}

/* The normalizer steps of s over t. */
static as_status text_normalize(const tok_spm *s, tok_ntext *t, as_error *err) {
    as_status st = AS_OK;
    for (int k = 0; st == AS_OK && k < s->o.n_ops; k++) {
        const tok_spm_op *op = &s->o.ops[k];
        switch (op->kind) {
        case TOK_SPM_PREPEND: st = text_prepend(t, op->to, err); break;
        case TOK_SPM_REPLACE: st = text_replace(t, op->from, op->to, err); break;
        case TOK_SPM_REPLACE_REGEX: st = tok_norm_replace_regex(t, op->own, op->to, err); break;
        case TOK_SPM_PRECOMPILED: st = tok_norm_precompiled(t, op->own, err); break;
        case TOK_SPM_STRIP: st = tok_norm_strip(t, op->arg & 1, (op->arg & 2) != 0, err); break;
        case TOK_SPM_LOWERCASE: st = tok_norm_lowercase(t, err); break;
        case TOK_SPM_STRIP_ACCENTS: st = tok_norm_strip_accents(t, err); break;
        default: st = tok_norm_unicode(t, (tok_norm_form)op->arg, err); break;
        }
    }
    return st;
}

static int trie_node(tok_spm *s, unsigned char byte) {
    if (s->n_trie == s->cap_trie) {
        int nc = s->cap_trie ? s->cap_trie * 2 : 64;
        spm_node *nn = realloc(s->trie, (size_t)nc * sizeof *nn);
        if (!nn) return -1;
        s->trie = nn;
        s->cap_trie = nc;
    }
    s->trie[s->n_trie] = (spm_node){-1, -1, -1, byte};
    return s->n_trie++;
}

as_status tok_spm_add_normalized(tok_spm *s, const char *content, size_t len, int32_t id, as_error *err) {
    ASSERT(s && (content || len == 0) && id >= 0);
    if (len > TOK_MAX_TEXT_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "added token of %zu bytes, over the limit of %u", len, TOK_MAX_TEXT_BYTES);
    tok_ntext t = {0};
    as_status st = text_init(&t, content, len, err);
    if (st == AS_OK) st = text_normalize(s, &t, err);
    if (st != AS_OK || t.n == 0) goto cleanup;
    if (s->n_trie == 0 && trie_node(s, 0) < 0) goto oom;
    int node = 0;
    for (size_t i = 0; i < t.n; i++) {
        unsigned char b = (unsigned char)t.s[i];
        int c = s->trie[node].child;
        while (c >= 0 && s->trie[c].byte != b) c = s->trie[c].next;
        if (c < 0) {
            if ((c = trie_node(s, b)) < 0) goto oom;
            s->trie[c].next = s->trie[node].child;
            s->trie[node].child = c;
        }
        node = c;
    }
    if (s->trie[node].id < 0) s->trie[node].id = id;
    goto cleanup;
oom:
    st = as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
cleanup:
    tok_ntext_free(&t);
    return st;
}

/* Longest normalized added token starting at t->s[i]: its id (or -1), *end its end. */
static int32_t trie_match(const tok_spm *s, const tok_ntext *t, size_t i, size_t *end) {
    int node = 0;
    int32_t best = -1;
    for (size_t j = i; j < t->n; j++) {
        int c = s->trie[node].child;
        while (c >= 0 && s->trie[c].byte != (unsigned char)t->s[j]) c = s->trie[c].next;
        if (c < 0) break;
        node = c;
        if (s->trie[node].id >= 0) {
            best = s->trie[node].id;
            *end = j + 1;
        }
    }
    return best;
}

/* ---- pre-tokenization: word ranges -------------------------------------------------- */

typedef struct {
    size_t *a, *b; /* (n) [a, b) in the normalized text */
    size_t n, cap;
} spm_words;

static int words_push(spm_words *w, size_t a, size_t b) {
    if (b <= a) return 1; /* HF drops empty splits */
    if (w->n == w->cap) {
        size_t nc = w->cap ? w->cap * 2 : 16;
        size_t *na = realloc(w->a, as_mul_size(nc, sizeof *na));
        if (!na) return 0;
        w->a = na;
        size_t *nb = realloc(w->b, as_mul_size(nc, sizeof *nb));
        if (!nb) return 0;
        w->b = nb;
        w->cap = nc;
    }
    w->a[w->n] = a;
    w->b[w->n] = b;
    w->n++;
    return 1;
}

/* HF NormalizedString::split on a literal with the given behaviour. */
static int split_literal(const tok_ntext *t, const char *p, int behavior, spm_words *w) {
    size_t k = strlen(p), prev = 0; /* prev: end of what is already assigned */
    size_t run_s = 0, run_e = 0;    /* Contiguous: the current run of matches */
    int in_run = 0;
    for (size_t h = find_from(t, p, k, 0); h < t->n; h = find_from(t, p, k, h + k)) {
        switch (behavior) {
        case TOK_SPM_REMOVED:
            if (!words_push(w, prev, h)) return 0;
            prev = h + k;
            break;
        case TOK_SPM_ISOLATED:
            if (!words_push(w, prev, h) || !words_push(w, h, h + k)) return 0;
            prev = h + k;
            break;
        case TOK_SPM_MERGED_PREV:
            if (!words_push(w, prev, h + k)) return 0;
            prev = h + k;
            break;
        case TOK_SPM_MERGED_NEXT:
            if (!words_push(w, prev, h)) return 0;
            prev = h;
            break;
        default: /* TOK_SPM_CONTIGUOUS */
            if (in_run && h == run_e) {
                run_e = h + k;
            } else {
                if (in_run && (!words_push(w, prev, run_s) || !words_push(w, run_s, run_e))) return 0;
                if (in_run) prev = run_e;
                run_s = h;
                run_e = h + k;
                in_run = 1;
            }
            break;
        }
    }
    if (in_run) {
        if (!words_push(w, prev, run_s) || !words_push(w, run_s, run_e)) return 0;
        prev = run_e;
    }
    return words_push(w, prev, t->n);
}

/* ---- the model -------------------------------------------------------------------------- */

typedef struct {
    tok_merge_work w;
    int32_t n;
    uint32_t pos; /* bytes covered so far, in the order symbols are added */
} spm_word;

static void sym_add(spm_word *x, int32_t id, uint32_t len) {
    int32_t i = x->n++;
    x->w.sym[i] = (tok_sym){id, i - 1, -1, x->pos, len};
    if (i > 0) x->w.sym[i - 1].next = i;
    x->pos += len;
}

/* Encodes word t->s[a, b) and appends its tokens with offsets mapped to the original. */
static as_status encode_word(const tok_spm *s, spm_word *x, const tok_ntext *t, size_t a, size_t b,
                             tok_ids *out, as_error *err) {
    const char *w = t->s + a;
    size_t n = b - a;
    if (s->unigram) { /* offsets come back relative to w */
        int n0 = out->n;
        as_status st = tok_unigram_encode(s->unigram, w, n, out, err);
        if (st == AS_OK && s->remap) remap_tokens(s, w, out, n0);
        for (int k = n0; st == AS_OK && k < out->n; k++) {
            size_t ys = a + (size_t)out->start[k], ye = a + (size_t)out->end[k];
            out->start[k] = t->os[ys];
            out->end[k] = t->oe[ye - 1];
        }
        return st;
    }
    if (s->o.ignore_merges) {
        int32_t id = tok_vocab_get(s->vocab, w, n);
        if (id >= 0) return tok_ids_push(out, id, t->os[a], t->oe[b - 1], err);
    }
    if (!tok_merge_reserve(&x->w, n)) return as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
    x->n = 0;
    x->pos = 0;
    int have_unk = 0;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len((unsigned char)w[i]);
        if (i + k > n) k = n - i;
        int32_t id = tok_vocab_get(s->vocab, w + i, k);
        if (id >= 0) {
            if (have_unk) sym_add(x, s->o.unk_id, unk_len);
            have_unk = 0;
            sym_add(x, id, (uint32_t)k);
            i += k;
            continue;
        }
        if (s->o.byte_fallback) {
            int all = 1;
            for (size_t q = 0; q < k; q++) all &= s->byte_id[(unsigned char)w[i + q]] >= 0;
            if (all) { /* HF leaves a pending unk pending here */
                for (size_t q = 0; q < k; q++) sym_add(x, s->byte_id[(unsigned char)w[i + q]], 1);
                i += k;
                continue;
            }
        }
        if (s->o.unk_id >= 0) {
            if (have_unk && s->o.fuse_unk) {
                unk_len += (uint32_t)k;
            } else {
                if (have_unk) sym_add(x, s->o.unk_id, unk_len);
                have_unk = 1;
                unk_len = (uint32_t)k;
            }
        }
        i += k;
    }
    if (have_unk) sym_add(x, s->o.unk_id, unk_len);
    if (x->n > 1) tok_merges_apply(s->merges, &x->w, x->n);
    for (int32_t i = 0; i >= 0 && i < x->n; i = x->w.sym[i].next) {
        const tok_sym *y = &x->w.sym[i];
        size_t ys = a + y->start, ye = a + y->start + y->len;
        if (y->len == 0 || ye > b) continue; /* cannot happen: lengths sum to at most n */
        as_status st = tok_ids_push(out, y->id, t->os[ys], t->oe[ye - 1], err);
        if (st != AS_OK) return st;
    }
    return AS_OK;
}

/* Pre-tokenizes and encodes t (normalized; modified by Metaspace) and appends its tokens. */
static as_status encode_pretok(const tok_spm *s, spm_word *x, tok_ntext *t, int at_start, tok_ids *out,
                                   as_error *err) {
    spm_words words = {0};
    as_status st = AS_OK;
    int ok = 1;
    if (s->o.pre == TOK_SPM_PRE_METASPACE) {
        const char *rep = s->o.pre_str;
        if ((st = text_replace(t, " ", rep, err)) != AS_OK) goto cleanup;
        int pre = s->o.scheme == TOK_SPM_ALWAYS || (s->o.scheme == TOK_SPM_FIRST && at_start);
        if (pre && !starts_with(t, rep) && (st = text_prepend(t, rep, err)) != AS_OK) goto cleanup;
        ok = s->o.split ? split_literal(t, rep, TOK_SPM_MERGED_NEXT, &words) : words_push(&words, 0, t->n);
    } else if (s->o.pre == TOK_SPM_PRE_SPLIT) {
        ok = split_literal(t, s->o.pre_str, s->o.behavior, &words);
    } else {
        ok = words_push(&words, 0, t->n);
    }
    if (!ok) {
        st = as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
        goto cleanup;
    }
    for (size_t i = 0; i < words.n && st == AS_OK; i++)
        st = encode_word(s, x, t, words.a[i], words.b[i], out, err);
cleanup:
    free(words.a);
    free(words.b);
    return st;
}

/* WhitespaceSplit (when set) then the rest of the pre-tokenizer, on t. A word begins
 * the input (Metaspace prepend_scheme "first") when t does and its first character is
 * the input's first, as HF's offsets_original of the split says. */
static as_status encode_normalized(const tok_spm *s, spm_word *x, tok_ntext *t, int at_start, tok_ids *out,
                                   as_error *err) {
    if (!s->o.ws_split) return encode_pretok(s, x, t, at_start, out, err);
    as_status st = AS_OK;
    size_t i = 0;
    while (i < t->n && st == AS_OK) {
        size_t a = i, b;
        int32_t cp;
        utf8proc_ssize_t k;
        while (a < t->n && (k = utf8proc_iterate((const utf8proc_uint8_t *)t->s + a, (utf8proc_ssize_t)(t->n - a), &cp)) > 0 &&
               tok_is_whitespace(cp))
            a += (size_t)k;
        for (b = a; b < t->n; b += (size_t)k) {
            k = utf8proc_iterate((const utf8proc_uint8_t *)t->s + b, (utf8proc_ssize_t)(t->n - b), &cp);
            if (k <= 0) k = 1;
            else if (tok_is_whitespace(cp)) break;
        }
        i = b;
        if (b <= a) break;
        tok_ntext u;
        if (!tok_ntext_alloc(&u, b - a)) return as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
        memcpy(u.s, t->s + a, b - a);
        memcpy(u.os, t->os + a, (b - a) * sizeof *u.os);
        memcpy(u.oe, t->oe + a, (b - a) * sizeof *u.oe);
        st = encode_pretok(s, x, &u, at_start && u.os[0] == 0, out, err);
        tok_ntext_free(&u);
    }
    return st;
}

/* Encodes t->s[a, b) (a normalized span between added tokens) on a copy. */
static as_status encode_span(const tok_spm *s, spm_word *x, const tok_ntext *t, size_t a, size_t b, int at_start,
                             tok_ids *out, as_error *err) {
    if (b <= a) return AS_OK;
    tok_ntext u;
    if (!tok_ntext_alloc(&u, b - a)) return as_err_set(err, AS_ERR_INTERNAL, "spm: out of memory");
    memcpy(u.s, t->s + a, b - a);
    memcpy(u.os, t->os + a, (b - a) * sizeof *u.os);
    memcpy(u.oe, t->oe + a, (b - a) * sizeof *u.oe);
    as_status st = encode_normalized(s, x, &u, at_start && u.os[0] == 0, out, err);
    tok_ntext_free(&u);
    return st;
}

as_status tok_spm_encode(const tok_spm *s, const char *text, size_t len, int at_start,
                         tok_ids *out, as_error *err) {
    ASSERT(s && out && (text || len == 0));
    if (len > TOK_MAX_TEXT_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "text is %zu bytes, over the limit of %u", len,
                          TOK_MAX_TEXT_BYTES);
    if (len == 0) return AS_OK;
    int n_entry = out->n;
    tok_ntext t = {0};
    spm_word x = {0};
    as_status st = text_init(&t, text, len, err);
    if (st == AS_OK) st = text_normalize(s, &t, err);
    if (st != AS_OK) goto cleanup;
    if (!s->trie) {
        st = encode_normalized(s, &x, &t, at_start, out, err);
        goto cleanup;
    }
    /* HF added_vocabulary.rs: normalized added tokens split the normalized text */
    size_t seg = 0, i = 0;
    while (i < t.n && st == AS_OK) {
        size_t end = 0;
        int32_t id = trie_match(s, &t, i, &end);
        if (id < 0) {
            i++;
            continue;
        }
        st = encode_span(s, &x, &t, seg, i, at_start, out, err);
        if (st == AS_OK) st = tok_ids_push(out, id, t.os[i], t.oe[end - 1], err);
        seg = i = end;
    }
    if (st == AS_OK) st = encode_span(s, &x, &t, seg, t.n, at_start, out, err);
cleanup:
    if (st != AS_OK) out->n = n_entry;
    tok_merge_work_free(&x.w);
    tok_ntext_free(&t);
    return st;
}

int tok_spm_word_start(const tok_spm *s, const char *prev, const char *piece) {
    ASSERT(s && prev && piece);
    const char *p = s->o.pre_str;
    size_t k = strlen(p), pl = strlen(prev);
    int starts = strncmp(piece, p, k) == 0;
    int prev_ends = pl >= k && memcmp(prev + pl - k, p, k) == 0;
    if (s->o.pre == TOK_SPM_PRE_METASPACE) return s->o.split && starts;
    if (s->o.pre != TOK_SPM_PRE_SPLIT || k == 0) return 0;
    switch (s->o.behavior) {
    case TOK_SPM_MERGED_NEXT: return starts;
    case TOK_SPM_MERGED_PREV: return prev_ends;
    default: return starts || prev_ends;
    }
}
