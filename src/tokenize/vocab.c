/* vocab.c — the token-string <-> id table shared by WordPiece and BPE: an
 * open-addressing hash map (FNV-1a, linear probing, load <= 1/2) from piece bytes to
 * id, and an array from id to piece (ids may be sparse; holes are NULL).
 * It does not read files or know about any tokenizer format.
 *
 * A piece set twice under two ids keeps both id -> piece entries and maps the piece
 * to the later id, as Hugging Face does for a vocab.txt with a repeated line.
 */
#include "tokenize/vocab.h"

#include <string.h>

typedef struct {
    uint64_t hash;
    int32_t id; /* -1 = empty slot */
} vocab_slot;

struct tok_vocab {
    vocab_slot *slots; /* (cap) */
    size_t cap;        /* power of two */
    size_t n_keys;     /* distinct pieces in the map */
    char **pieces;     /* (n_ids) owned, NUL-terminated; NULL for a hole */
    size_t *lens;      /* (n_ids) byte length of each piece */
    int32_t n_ids;     /* max id + 1 */
    int32_t ids_cap;
    size_t max_len;
};

static uint64_t fnv1a(const char *s, size_t len) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

tok_vocab *tok_vocab_new(void) {
    tok_vocab *v = as_calloc(1, sizeof *v);
    if (!v) return NULL;
    v->cap = 1024;
    v->slots = as_malloc_array(v->cap, sizeof *v->slots);
    if (!v->slots) {
        free(v);
        return NULL;
    }
    for (size_t i = 0; i < v->cap; i++) v->slots[i].id = -1;
    return v;
}

void tok_vocab_free(tok_vocab *v) {
    if (!v) return;
    for (int32_t i = 0; i < v->n_ids; i++) free(v->pieces[i]);
    free(v->pieces);
    free(v->lens);
    free(v->slots);
    free(v);
}

/* Slot holding piece, or the empty slot where it would go. */
static size_t find_slot(const tok_vocab *v, const char *piece, size_t len, uint64_t h) {
    size_t mask = v->cap - 1;
    size_t i = (size_t)h & mask;
    for (;;) {
        const vocab_slot *s = &v->slots[i];
        if (s->id < 0) return i;
        if (s->hash == h && v->lens[s->id] == len && memcmp(v->pieces[s->id], piece, len) == 0)
            return i;
        i = (i + 1) & mask;
    }
}

static int grow_table(tok_vocab *v) {
    size_t ncap = v->cap * 2;
    vocab_slot *ns = as_malloc_array(ncap, sizeof *ns);
    if (!ns) return 0;
    for (size_t i = 0; i < ncap; i++) ns[i].id = -1;
    for (size_t i = 0; i < v->cap; i++) {
        if (v->slots[i].id < 0) continue;
        size_t j = (size_t)v->slots[i].hash & (ncap - 1);
        while (ns[j].id >= 0) j = (j + 1) & (ncap - 1);
        ns[j] = v->slots[i];
    }
    free(v->slots);
    v->slots = ns;
    v->cap = ncap;
    return 1;
}

static int grow_ids(tok_vocab *v, int32_t need) {
    if (need <= v->ids_cap) return 1;
    int32_t ncap = v->ids_cap ? v->ids_cap : 1024;
    while (ncap < need) ncap = ncap > AS_MAX_VOCAB / 2 ? AS_MAX_VOCAB : ncap * 2;
    char **np = realloc(v->pieces, (size_t)ncap * sizeof *np);
    if (!np) return 0;
    v->pieces = np;
    size_t *nl = realloc(v->lens, (size_t)ncap * sizeof *nl);
    if (!nl) return 0;
    v->lens = nl;
    for (int32_t i = v->ids_cap; i < ncap; i++) {
        v->pieces[i] = NULL;
        v->lens[i] = 0;
    }
    v->ids_cap = ncap;
    return 1;
}

as_status tok_vocab_set(tok_vocab *v, const char *piece, size_t len, int32_t id, as_error *err) {
    ASSERT(v && (piece || len == 0));
    if (id < 0 || id >= AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "token id %ld is out of range [0, %d)", (long)id,
                          AS_MAX_VOCAB);
    if (id < v->n_ids && v->pieces[id])
        return as_err_set(err, AS_ERR_INPUT, "duplicate token id %ld (\"%.40s\" and \"%.40s\")",
                          (long)id, v->pieces[id], len ? piece : "");
    if ((v->n_keys + 1) * 2 > v->cap && !grow_table(v))
        return as_err_set(err, AS_ERR_INTERNAL, "vocabulary: out of memory");
    if (!grow_ids(v, id + 1)) return as_err_set(err, AS_ERR_INTERNAL, "vocabulary: out of memory");
    char *copy = as_malloc(len + 1);
    if (!copy) return as_err_set(err, AS_ERR_INTERNAL, "vocabulary: out of memory");
    if (len) memcpy(copy, piece, len);
    copy[len] = 0;
    v->pieces[id] = copy;
    v->lens[id] = len;
    if (id >= v->n_ids) v->n_ids = id + 1;
    if (len > v->max_len) v->max_len = len;
    uint64_t h = fnv1a(piece, len);
    size_t i = find_slot(v, piece, len, h);
    if (v->slots[i].id < 0) v->n_keys++;
    v->slots[i].hash = h;
    v->slots[i].id = id; /* a repeated piece maps to its latest id */
    return AS_OK;
}

int32_t tok_vocab_get(const tok_vocab *v, const char *piece, size_t len) {
    if (!v || len > v->max_len) return -1;
    size_t i = find_slot(v, piece, len, fnv1a(piece, len));
    return v->slots[i].id;
}

const char *tok_vocab_piece(const tok_vocab *v, int32_t id) {
    if (!v || id < 0 || id >= v->n_ids) return NULL;
    return v->pieces[id];
}

int tok_vocab_size(const tok_vocab *v) { return v ? (int)v->n_ids : 0; }

size_t tok_vocab_max_len(const tok_vocab *v) { return v ? v->max_len : 0; }
