/* spm_model.c — the SentencePiece ModelProto reader (see spm_model.h). Protobuf wire
 * format (protobuf.dev, "Encoding"): each field is a varint key (number << 3 | wire
 * type) then a varint (type 0), 8 bytes (1), a varint length and that many bytes (2), or
 * 4 bytes (5). Fields read (sentencepiece_model.proto): ModelProto 1 pieces, 2
 * trainer_spec, 3 normalizer_spec; SentencePiece 1 piece, 2 score (float), 3 type;
 * TrainerSpec 3 model_type, 40 unk_id; NormalizerSpec 2 precompiled_charsmap,
 * 3 add_dummy_prefix, 4 remove_extra_whitespaces. Unknown fields are skipped.
 * It does not write models.
 */
#include "tokenize/spm_model.h"

#include <string.h>
#include <utf8proc.h>

#include "tokenize/tokenizer.h"
#include "tokenize/unigram.h"

typedef struct {
    const unsigned char *p, *end;
} pb;

/* One varint; 0 when it runs past the end or over 10 bytes. */
static int pb_varint(pb *b, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 70; s += 7) {
        if (b->p >= b->end) return 0;
        unsigned char c = *b->p++;
        *v |= (uint64_t)(c & 0x7F) << s;
        if (c < 0x80) return 1;
    }
    return 0;
}

typedef struct {
    uint32_t num;
    int wire;
    uint64_t v;    /* varint value */
    pb sub;        /* wire 2: the bytes; wire 5: the 4 bytes */
} pb_field;

/* The next field of b; 0 at the end, -1 when malformed. */
static int pb_next(pb *b, pb_field *f) {
    if (b->p >= b->end) return 0;
    uint64_t key;
    if (!pb_varint(b, &key) || key >> 3 == 0 || key >> 3 > 536870911u) return -1;
    f->num = (uint32_t)(key >> 3);
    f->wire = (int)(key & 7);
    size_t left;
    switch (f->wire) {
    case 0: return pb_varint(b, &f->v) ? 1 : -1;
    case 1:
    case 5:
        left = (size_t)(b->end - b->p);
        if (left < (f->wire == 1 ? 8u : 4u)) return -1;
        f->sub.p = b->p;
        b->p += f->wire == 1 ? 8 : 4;
        f->sub.end = b->p;
        return 1;
    case 2:
        if (!pb_varint(b, &f->v) || f->v > (uint64_t)(b->end - b->p)) return -1;
        f->sub.p = b->p;
        b->p += f->v;
        f->sub.end = b->p;
        return 1;
    default: return -1;
    }
}

void tok_spm_proto_free(tok_spm_proto *p) {
    if (!p) return;
    for (int i = 0; p->piece && i < p->n; i++) free(p->piece[i]);
    free(p->piece);
    free(p->len);
    free(p->score);
    free(p->type);
    free(p->charsmap);
    memset(p, 0, sizeof *p);
}

static int grow(tok_spm_proto *p, int *cap) {
    if (p->n < *cap) return 1;
    int nc = *cap ? *cap * 2 : 1024;
    if (nc > AS_MAX_VOCAB) nc = AS_MAX_VOCAB;
    char **np = realloc(p->piece, (size_t)nc * sizeof *np);
    if (!np) return 0;
    p->piece = np;
    size_t *nl = realloc(p->len, (size_t)nc * sizeof *nl);
    if (!nl) return 0;
    p->len = nl;
    double *ns = realloc(p->score, (size_t)nc * sizeof *ns);
    if (!ns) return 0;
    p->score = ns;
    int *nt = realloc(p->type, (size_t)nc * sizeof *nt);
    if (!nt) return 0;
    p->type = nt;
    *cap = nc;
    return 1;
}

/* One SentencePiece message into piece n. */
static as_status read_piece(tok_spm_proto *p, pb b, const char *path, as_error *err) {
    const unsigned char *s = NULL;
    size_t n = 0;
    float score = 0;
    int type = TOK_PIECE_NORMAL, r;
    pb_field f;
    while ((r = pb_next(&b, &f)) > 0) {
        if (f.num == 1 && f.wire == 2) s = f.sub.p, n = (size_t)(f.sub.end - f.sub.p);
        else if (f.num == 2 && f.wire == 5) memcpy(&score, f.sub.p, 4);
        else if (f.num == 3 && f.wire == 0) type = f.v <= 6 ? (int)f.v : -1;
    }
    if (r < 0 || type < 1)
        return as_err_set(err, AS_ERR_INPUT, "%s: piece %d is malformed", path, p->n);
    if (n > TOK_UNIGRAM_MAX_PIECE_BYTES)
        return as_err_set(err, AS_ERR_INPUT, "%s: piece %d is %zu bytes, over the limit of %d", path, p->n, n,
                          TOK_UNIGRAM_MAX_PIECE_BYTES);
    for (size_t i = 0; i < n;) {
        int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(s + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0 || cp == 0) return as_err_set(err, AS_ERR_INPUT, "%s: piece %d is not UTF-8", path, p->n);
        i += (size_t)k;
    }
    char *c = as_malloc(n + 1);
    if (!c) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
    if (n) memcpy(c, s, n);
    c[n] = 0;
    p->piece[p->n] = c;
    p->len[p->n] = n;
    p->score[p->n] = score;
    p->type[p->n] = type;
    p->n++;
    return AS_OK;
}

static as_status read_spec(tok_spm_proto *p, pb b, int which, const char *path, as_error *err) {
    pb_field f;
    int r;
    while ((r = pb_next(&b, &f)) > 0) {
        if (which == 2 && f.num == 3 && f.wire == 0) p->model_type = (int)(f.v & 0xFF);
        else if (which == 2 && f.num == 40 && f.wire == 0) p->unk_id = (int64_t)f.v;
        else if (which == 3 && f.num == 3 && f.wire == 0) p->add_dummy_prefix = f.v != 0;
        else if (which == 3 && f.num == 4 && f.wire == 0) p->remove_extra_whitespaces = f.v != 0;
        else if (which == 3 && f.num == 2 && f.wire == 2 && f.sub.end > f.sub.p) {
            size_t n = (size_t)(f.sub.end - f.sub.p);
            free(p->charsmap);
            p->charsmap = as_malloc(n);
            if (!p->charsmap) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
            memcpy(p->charsmap, f.sub.p, n);
            p->charsmap_n = n;
        }
    }
    if (r < 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: %s is malformed", path, which == 2 ? "trainer_spec" : "normalizer_spec");
    return AS_OK;
}

as_status tok_spm_proto_read(const char *path, tok_spm_proto *out, as_error *err) {
    ASSERT(path && out);
    memset(out, 0, sizeof *out);
    out->add_dummy_prefix = out->remove_extra_whitespaces = 1;
    out->model_type = 1;
    char *buf = NULL;
    size_t n = 0;
    as_status rc = as_read_file(path, TOK_MAX_FILE_BYTES, &buf, &n, err);
    if (rc != AS_OK) return rc;
    pb b = {(const unsigned char *)buf, (const unsigned char *)buf + n};
    pb_field f;
    int r = 0, cap = 0;
    while (rc == AS_OK && (r = pb_next(&b, &f)) > 0) {
        if (f.num == 1 && f.wire == 2) {
            if (out->n >= AS_MAX_VOCAB) {
                rc = as_err_set(err, AS_ERR_INPUT, "%s: more than %d pieces", path, AS_MAX_VOCAB);
            } else if (!grow(out, &cap)) {
                rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
            } else {
                rc = read_piece(out, f.sub, path, err);
            }
        } else if ((f.num == 2 || f.num == 3) && f.wire == 2) {
            rc = read_spec(out, f.sub, (int)f.num, path, err);
        }
    }
    if (rc == AS_OK && r < 0) rc = as_err_set(err, AS_ERR_INPUT, "%s: not a SentencePiece model (malformed protobuf)", path);
    if (rc == AS_OK && out->n == 0) rc = as_err_set(err, AS_ERR_INPUT, "%s: no pieces", path);
    if (rc == AS_OK && (out->unk_id < 0 || out->unk_id >= out->n || out->type[out->unk_id] != TOK_PIECE_UNKNOWN))
        rc = as_err_set(err, AS_ERR_INPUT, "%s: trainer_spec.unk_id %lld is not the model's unknown piece", path,
                        (long long)out->unk_id);
    free(buf);
    if (rc != AS_OK) tok_spm_proto_free(out);
    return rc;
}
