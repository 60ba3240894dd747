/* merges.c — the BPE merge table (open addressing on the id pair) and the merge loop
 * of Hugging Face `tokenizers` models/bpe/word.rs Word::merge_all without dropout:
 * candidates in a binary heap ordered by (rank, position); a popped candidate whose
 * symbols changed since it was pushed is skipped. O(n log n) per word.
 * It does not: split text or choose the initial symbols (bpe.c, spm.c do).
 */
#include "tokenize/merges.h"

#include <string.h>

struct tok_merges {
    uint64_t *key;  /* (cap) left_id << 32 | right_id; MERGE_EMPTY when free */
    int32_t *rank;  /* (cap) */
    int32_t *nid;   /* (cap) id of the merged token */
    size_t cap;     /* power of two, load factor <= 1/2 */
};

struct tok_cand {
    int32_t rank, pos, new_id;
};

#define MERGE_EMPTY UINT64_MAX

static uint64_t pair_key(int32_t l, int32_t r) { return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r; }

static size_t pair_slot(uint64_t key, size_t cap) {
    uint64_t x = key * 0x9E3779B97F4A7C15ull; /* Fibonacci hashing */
    x ^= x >> 29;
    return (size_t)(x & (cap - 1));
}

/* Slot of (l, r) or -1. */
static long pair_find(const tok_merges *m, int32_t l, int32_t r) {
    uint64_t k = pair_key(l, r);
    size_t i = pair_slot(k, m->cap);
    while (m->key[i] != MERGE_EMPTY) {
        if (m->key[i] == k) return (long)i;
        i = (i + 1) & (m->cap - 1);
    }
    return -1;
}

static void pair_put(tok_merges *m, int32_t l, int32_t r, int32_t rank, int32_t new_id) {
    uint64_t k = pair_key(l, r);
    size_t i = pair_slot(k, m->cap);
    while (m->key[i] != MERGE_EMPTY && m->key[i] != k) i = (i + 1) & (m->cap - 1);
    m->key[i] = k;
    m->rank[i] = rank;
    m->nid[i] = new_id;
}

as_status tok_merges_init(const tok_vocab *v, const char *const *left, const char *const *right,
                          int n, tok_merges **out, as_error *err) {
    ASSERT(v && out && n >= 0 && (n == 0 || (left && right)));
    *out = NULL;
    as_status st = AS_OK;
    char *joined = NULL;
    size_t joined_cap = 0;
    tok_merges *m = as_calloc(1, sizeof *m);
    if (!m) return as_err_set(err, AS_ERR_INTERNAL, "bpe: out of memory");
    m->cap = 16;
    while (m->cap < (size_t)n * 2) m->cap *= 2;
    m->key = as_malloc_array(m->cap, sizeof *m->key);
    m->rank = as_malloc_array(m->cap, sizeof *m->rank);
    m->nid = as_malloc_array(m->cap, sizeof *m->nid);
    if (!m->key || !m->rank || !m->nid) {
        st = as_err_set(err, AS_ERR_INTERNAL, "bpe: out of memory for %d merges", n);
        goto cleanup;
    }
    for (size_t i = 0; i < m->cap; i++) m->key[i] = MERGE_EMPTY;
    for (int i = 0; i < n; i++) {
        const char *l = left[i], *r = right[i];
        if (!l || !r) {
            st = as_err_set(err, AS_ERR_INPUT, "merges[%d]: missing a side", i);
            goto cleanup;
        }
        size_t ll = strlen(l), rl = strlen(r);
        int32_t lid = tok_vocab_get(v, l, ll), rid = tok_vocab_get(v, r, rl);
        if (lid < 0 || rid < 0) {
            st = as_err_set(err, AS_ERR_INPUT, "merges[%d] \"%.60s %.60s\": \"%.60s\" is not in the vocabulary",
                            i, l, r, lid < 0 ? l : r);
            goto cleanup;
        }
        if (ll + rl + 1 > joined_cap) {
            size_t nc = (ll + rl + 1) * 2;
            char *nj = realloc(joined, nc);
            if (!nj) {
                st = as_err_set(err, AS_ERR_INTERNAL, "bpe: out of memory");
                goto cleanup;
            }
            joined = nj;
            joined_cap = nc;
        }
        memcpy(joined, l, ll);
        memcpy(joined + ll, r, rl);
        int32_t nid = tok_vocab_get(v, joined, ll + rl);
        if (nid < 0) {
            st = as_err_set(err, AS_ERR_INPUT, "merges[%d] \"%.60s %.60s\": the merged token is not in the vocabulary",
                            i, l, r);
            goto cleanup;
        }
        pair_put(m, lid, rid, i, nid);
    }
    *out = m;
    m = NULL;
cleanup:
    free(joined);
    tok_merges_free(m);
    return st;
}

void tok_merges_free(tok_merges *m) {
    if (!m) return;
    free(m->key);
    free(m->rank);
    free(m->nid);
    free(m);
}

int tok_merge_reserve(tok_merge_work *w, size_t n) {
    if (n <= w->cap) return 1;
    size_t nc = w->cap ? w->cap : 64;
    while (nc < n) nc *= 2;
    tok_sym *sym = realloc(w->sym, as_mul_size(nc, sizeof *sym));
    if (!sym) return 0;
    w->sym = sym;
    tok_cand *h = realloc(w->heap, as_mul_size(as_mul_size(nc, 3), sizeof *h));
    if (!h) return 0;
    w->heap = h;
    w->cap = nc;
    return 1;
}

void tok_merge_work_free(tok_merge_work *w) {
    if (!w) return;
    free(w->sym);
    free(w->heap);
    memset(w, 0, sizeof *w);
}

static int cand_less(const tok_cand *a, const tok_cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(tok_merge_work *w, tok_cand c) {
    int i = w->n_heap++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_less(&c, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
}

static tok_cand heap_pop(tok_merge_work *w) {
    tok_cand top = w->heap[0], last = w->heap[--w->n_heap];
    int i = 0, n = w->n_heap;
    for (;;) {
        int l = 2 * i + 1, m = i;
        const tok_cand *best = &last;
        if (l < n && cand_less(&w->heap[l], best)) {
            m = l;
            best = &w->heap[l];
        }
        if (l + 1 < n && cand_less(&w->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n > 0) w->heap[i] = last;
    return top;
}

/* Pushes the merge of symbol pos with its next, if the pair has one. The heap never
 * holds more than 3n entries: n - 1 initial pairs plus at most two per merge. */
static void push_pair(const tok_merges *m, tok_merge_work *w, int32_t pos) {
    int32_t nx = w->sym[pos].next;
    if (nx < 0) return;
    long k = pair_find(m, w->sym[pos].id, w->sym[nx].id);
    if (k < 0) return;
    tok_cand c = {m->rank[k], pos, m->nid[k]};
    heap_push(w, c);
}

void tok_merges_apply(const tok_merges *m, tok_merge_work *w, int32_t n) {
    ASSERT(m && w && (size_t)n <= w->cap);
    w->n_heap = 0;
    for (int32_t i = 0; i + 1 < n; i++) push_pair(m, w, i);
    while (w->n_heap > 0) {
        tok_cand top = heap_pop(w);
        tok_sym *cur = &w->sym[top.pos];
        if (cur->len == 0 || cur->next < 0) continue;
        int32_t nx = cur->next;
        long k = pair_find(m, cur->id, w->sym[nx].id);
        if (k < 0 || m->nid[k] != top.new_id) continue; /* stale candidate */
        tok_sym *right = &w->sym[nx];
        cur->id = top.new_id;
        cur->len += right->len;
        cur->next = right->next;
        right->len = 0;
        if (cur->next >= 0) w->sym[cur->next].prev = top.pos;
        if (cur->prev >= 0) push_pair(m, w, cur->prev);
        push_pair(m, w, top.pos);
    }
}
