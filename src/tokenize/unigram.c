/* unigram.c — the Unigram model (see unigram.h). The pieces live in a byte trie whose
 * children are stored contiguously and sorted by byte (built breadth-first from the
 * sorted pieces), so a common-prefix search from one text position costs one binary
 * search per byte. Viterbi follows HF models/unigram/model.rs encode_optimized (itself
 * SentencePiece unigram_model.cc): best_path_ends_at[pos] keeps the best score of a
 * path ending at byte pos; a candidate replaces it only when strictly better, pieces
 * tried shortest first. Scores are doubles, as in HF. It does not keep a cache.
 */
#include "tokenize/unigram.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define UNK_PENALTY 10.0 /* HF K_UNK_PENALTY */

typedef struct {
    int32_t first;  /* index of the first child (children are contiguous), -1 when none */
    int32_t n_kids; /* number of children */
    int32_t id;     /* piece ending here, -1 when none */
    unsigned char byte;
} ug_node;

struct tok_unigram {
    ug_node *nodes; /* (n_nodes) node 0 is the root */
    int32_t n_nodes;
    double *score;  /* (n_pieces) */
    int32_t n_pieces;
    int32_t unk_id; /* -1: none */
    int byte_fallback;
    int32_t byte_id[256]; /* id of "<0xNN>", -1 when absent */
    double min_score;
};

typedef struct {
    const char *p;
    uint32_t len;
    int32_t id;
} ug_entry;

static int entry_cmp(const void *a, const void *b) {
    const ug_entry *x = a, *y = b;
    uint32_t m = x->len < y->len ? x->len : y->len;
    int c = m ? memcmp(x->p, y->p, m) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Child of node with byte b, or -1. */
static int32_t child(const tok_unigram *u, int32_t node, unsigned char b) {
    int32_t lo = u->nodes[node].first, hi = lo + u->nodes[node].n_kids;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (u->nodes[mid].byte < b) lo = mid + 1;
        else hi = mid;
    }
    return lo < u->nodes[node].first + u->nodes[node].n_kids && u->nodes[lo].byte == b ? lo : -1;
}

/* Breadth-first trie over the sorted entries e[0..n): node k covers the entries
 * [lo[k], hi[k]) that share its depth[k]-byte prefix; its children are allocated
 * together, in byte order, when it is processed. */
static as_status trie_build(tok_unigram *u, const ug_entry *e, int32_t n, size_t total, as_error *err) {
    size_t cap = total + 1;
    int32_t *lo = as_malloc_array(cap, sizeof *lo), *hi = as_malloc_array(cap, sizeof *hi);
    uint32_t *depth = as_malloc_array(cap, sizeof *depth);
    u->nodes = as_malloc_array(cap, sizeof *u->nodes);
    as_status rc = AS_OK;
    if (!lo || !hi || !depth || !u->nodes) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "unigram: out of memory");
        goto cleanup;
    }
    u->nodes[0] = (ug_node){-1, 0, -1, 0};
    lo[0] = 0;
    hi[0] = n;
    depth[0] = 0;
    int32_t n_nodes = 1;
    for (int32_t k = 0; k < n_nodes; k++) {
        int32_t i = lo[k], end = hi[k];
        uint32_t d = depth[k];
        while (i < end && e[i].len == d) u->nodes[k].id = e[i++].id; /* equal strings: the last id */
        if (i == end) continue;
        u->nodes[k].first = n_nodes;
        while (i < end) {
            unsigned char b = (unsigned char)e[i].p[d];
            int32_t j = i;
            while (j < end && (unsigned char)e[j].p[d] == b) j++;
            ASSERT((size_t)n_nodes < cap);
            u->nodes[n_nodes] = (ug_node){-1, 0, -1, b};
            lo[n_nodes] = i;
            hi[n_nodes] = j;
            depth[n_nodes] = d + 1;
            n_nodes++;
            u->nodes[k].n_kids++;
            i = j;
        }
    }
    u->n_nodes = n_nodes;
cleanup:
    free(lo);
    free(hi);
    free(depth);
    return rc;
}

as_status tok_unigram_init(const char *const *piece, const size_t *len, const double *score, int n,
                           int32_t unk_id, int byte_fallback, tok_unigram **out, as_error *err) {
    ASSERT(out && (n <= 0 || (piece && len && score)));
    *out = NULL;
    if (n < 1 || n > AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "Unigram vocab has %d pieces (1 to %d)", n, AS_MAX_VOCAB);
    if (unk_id < -1 || unk_id >= n)
        return as_err_set(err, AS_ERR_INPUT, "Unigram unk_id %ld is not in the vocab of %d pieces", (long)unk_id, n);
    tok_unigram *u = as_calloc(1, sizeof *u);
    ug_entry *e = as_malloc_array((size_t)n, sizeof *e);
    as_status rc = AS_OK;
    if (!u || !e || !(u->score = as_malloc_array((size_t)n, sizeof *u->score))) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "unigram: out of memory");
        goto cleanup;
    }
    u->n_pieces = n;
    u->unk_id = unk_id;
    u->byte_fallback = byte_fallback;
    u->min_score = INFINITY;
    size_t total = 0;
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (len[i] > TOK_UNIGRAM_MAX_PIECE_BYTES) {
            rc = as_err_set(err, AS_ERR_INPUT, "Unigram vocab[%ld] is %zu bytes, over the limit of %d", (long)i, len[i],
                            TOK_UNIGRAM_MAX_PIECE_BYTES);
            goto cleanup;
        }
        if (!isfinite(score[i])) {
            rc = as_err_set(err, AS_ERR_INPUT, "Unigram vocab[%ld] has a score that is not a finite number", (long)i);
            goto cleanup;
        }
        total += len[i];
        if (total > TOK_UNIGRAM_MAX_VOCAB_BYTES) {
            rc = as_err_set(err, AS_ERR_INPUT, "Unigram vocab is over %u bytes", TOK_UNIGRAM_MAX_VOCAB_BYTES);
            goto cleanup;
        }
        u->score[i] = score[i];
        if (score[i] < u->min_score) u->min_score = score[i];
        if (len[i] > 0) e[m++] = (ug_entry){piece[i], (uint32_t)len[i], i};
    }
    qsort(e, (size_t)m, sizeof *e, entry_cmp);
    if ((rc = trie_build(u, e, m, total, err)) != AS_OK) goto cleanup;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        u->byte_id[b] = tok_unigram_id(u, name, 6);
    }
    *out = u;
    u = NULL;
cleanup:
    free(e);
    tok_unigram_free(u);
    return rc;
}

void tok_unigram_free(tok_unigram *u) {
    if (!u) return;
    free(u->nodes);
    free(u->score);
    free(u);
}

int32_t tok_unigram_id(const tok_unigram *u, const char *s, size_t n) {
    ASSERT(u && (s || n == 0));
    if (n == 0) return -1;
    int32_t node = 0;
    for (size_t i = 0; i < n && node >= 0; i++) node = child(u, node, (unsigned char)s[i]);
    return node >= 0 ? u->nodes[node].id : -1;
}

static size_t utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }

/* Viterbi state at one byte position. */
typedef struct {
    double score;  /* best score of a path ending here */
    int32_t start; /* where its last piece starts; -1 when no path ends here */
    int32_t id;    /* its last piece */
} ug_best;

/* Fills best[0..n] (HF encode_optimized's forward pass). */
static as_status viterbi(const tok_unigram *u, const char *w, size_t n, ug_best *best, as_error *err) {
    double unk_score = u->min_score - UNK_PENALTY;
    for (size_t i = 0; i <= n; i++) best[i] = (ug_best){0.0, -1, 0};
    for (size_t at = 0; at < n;) {
        double here = best[at].score;
        size_t mblen = utf8_len((unsigned char)w[at]);
        if (mblen > n - at) mblen = n - at;
        int single = 0;
        int32_t node = 0;
        for (size_t j = at; j < n; j++) {
            node = child(u, node, (unsigned char)w[j]);
            if (node < 0) break;
            int32_t id = u->nodes[node].id;
            if (id < 0) continue;
            size_t end = j + 1;
            double cand = u->score[id] + here;
            if (best[end].start < 0 || cand > best[end].score) best[end] = (ug_best){cand, (int32_t)at, id};
            if (end - at == mblen) single = 1;
        }
        if (!single) {
            double cand = unk_score + here;
            ug_best *b = &best[at + mblen];
            if (b->start < 0 || cand > b->score) {
                if (u->unk_id < 0)
                    return as_err_set(err, AS_ERR_INPUT,
                                      "the text has a character the Unigram vocabulary lacks, and the model has no unk_id");
                *b = (ug_best){cand, (int32_t)at, u->unk_id};
            }
        }
        at += mblen;
    }
    return AS_OK;
}

/* Appends the token for w[a, b): its piece id, else its bytes as <0xNN> pieces when
 * byte_fallback has them all (each with the whole range), else unk. */
static as_status emit(const tok_unigram *u, const char *w, size_t a, size_t b, tok_ids *out, as_error *err) {
    int32_t id = tok_unigram_id(u, w + a, b - a);
    if (id >= 0) return tok_ids_push(out, id, (int32_t)a, (int32_t)b, err);
    if (u->byte_fallback) {
        int all = 1;
        for (size_t i = a; i < b; i++) all &= u->byte_id[(unsigned char)w[i]] >= 0;
        if (all) {
            for (size_t i = a; i < b; i++) {
                as_status rc = tok_ids_push(out, u->byte_id[(unsigned char)w[i]], (int32_t)a, (int32_t)b, err);
                if (rc != AS_OK) return rc;
            }
            return AS_OK;
        }
    }
    if (u->unk_id < 0) /* cannot happen: viterbi() fails first */
        return as_err_set(err, AS_ERR_INPUT, "unknown token and the Unigram model has no unk_id");
    return tok_ids_push(out, u->unk_id, (int32_t)a, (int32_t)b, err);
}

as_status tok_unigram_encode(const tok_unigram *u, const char *w, size_t n, tok_ids *out, as_error *err) {
    ASSERT(u && out && (w || n == 0));
    if (n == 0) return AS_OK;
    if (n > TOK_UNIGRAM_MAX_WORD_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "a word of %zu bytes, over the Unigram limit of %u", n,
                          TOK_UNIGRAM_MAX_WORD_BYTES);
    int n0 = out->n;
    ug_best *best = as_malloc_array(n + 1, sizeof *best);
    int32_t *cut = as_malloc_array(n + 1, sizeof *cut); /* piece boundaries, back to front */
    as_status rc = AS_OK;
    if (!best || !cut) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "unigram: out of memory");
        goto cleanup;
    }
    if ((rc = viterbi(u, w, n, best, err)) != AS_OK) goto cleanup;
    /* The path's piece ends, back to front; then front to back, a run of unk pieces
     * (any node with the unk id, as HF compares ids) joined into one token. */
    size_t pos = 0, n_fw = 0;
    for (int32_t end = (int32_t)n; end > 0; end = best[end].start) {
        ASSERT(best[end].start >= 0 && best[end].start < end);
        cut[n_fw++] = end;
    }
    int32_t *fw = cut;
    while (n_fw > 0) {
        size_t end = (size_t)fw[--n_fw];
        int is_unk = u->unk_id >= 0 && best[end].id == u->unk_id;
        while (is_unk && n_fw > 0 && best[fw[n_fw - 1]].id == u->unk_id) end = (size_t)fw[--n_fw];
        if ((rc = emit(u, w, pos, end, out, err)) != AS_OK) goto cleanup;
        pos = end;
    }
cleanup:
    if (rc != AS_OK) out->n = n0;
    free(best);
    free(cut);
    return rc;
}
