/* attn_npz.c — attention computed elsewhere, read from an .npz into a run (see
 * include/attnscope/attn_npz.h). The archive and each array's .npy header are checked by
 * io/npz_read.c (npz_parse_raw) before any array is allocated; this file checks the
 * shapes against each other and the named limits, converts the numbers to float32 and
 * the strings to UTF-8.
 * What it does not: read dtypes other than numbers and fixed-width strings, or keep the
 * file mapped after reading.
 */
#include "attnscope/attn_npz.h"

#include "core/core.h"
#include "core/file.h"
#include "io/npz_read.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    const char *path;
    const uint8_t *buf;
    size_t len;
} npz_src;

/* Array name of the file, or out->absent; errors name the file and the array. */
static as_status get(const npz_src *f, const char *name, npz_raw *out, as_error *err) {
    return npz_parse_raw(f->path, f->buf, f->len, name, out, err);
}

/* 1 when a's shape equals shape[0..nd) (entries < 0 match any size). */
static int shape_is(const npz_raw *a, int nd, const int64_t *shape) {
    if (a->a.ndim != nd) return 0;
    for (int d = 0; d < nd; d++)
        if (shape[d] >= 0 && a->a.shape[d] != shape[d]) return 0;
    return 1;
}

/* "[2, 3, 4]" of a's shape into buf. */
static const char *shape_str(const npz_raw *a, char *buf, size_t cap) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < a->a.ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)a->a.shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
    return buf;
}

/* Element i of a numeric array as a double; 0 with *bad set for a dtype that is not. */
static double num_at(const npz_raw *a, size_t i, int *bad) {
    const uint8_t *p = a->bytes + i * a->itemsize;
    const char *d = a->descr;
    if (!strcmp(d, "<f4")) {
        float v;
        memcpy(&v, p, 4);
        return v;
    }
    if (!strcmp(d, "<f8")) {
        double v;
        memcpy(&v, p, 8);
        return v;
    }
    if (!strcmp(d, "<f2")) return as_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
    if (!strcmp(d, "<i4")) {
        int32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    if (!strcmp(d, "<i8")) {
        int64_t v;
        memcpy(&v, p, 8);
        return (double)v;
    }
    if (!strcmp(d, "<i2")) {
        int16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    if (!strcmp(d, "|i1")) return (int8_t)p[0];
    if (!strcmp(d, "|u1") || !strcmp(d, "|b1")) return p[0];
    *bad = 1;
    return 0;
}

static int is_float(const npz_raw *a) { return !strcmp(a->descr, "<f2") || !strcmp(a->descr, "<f4") || !strcmp(a->descr, "<f8"); }
static int is_int(const npz_raw *a) { return a->descr[1] == 'i' || a->descr[1] == 'u' || a->descr[1] == 'b'; }

/* The floats of a (shape already checked) into dst, float32; check: 0 any, 1 finite and
 * >= 0 (weights), 2 finite (q, k), 3 not NaN (scores: masked entries may be -inf). */
static as_status floats(const char *path, const char *name, const npz_raw *a, float *dst, int check, as_error *err) {
    if (!is_float(a))
        return as_err_set(err, AS_ERR_INPUT, "%s: '%s' must hold floats (float16, float32 or float64), not '%s'", path,
                          name, a->descr);
    const int w = (int)a->itemsize; /* 2, 4 or 8: the dtype, decided once */
    const uint8_t *p = a->bytes;
    for (size_t i = 0; i < a->a.n; i++, p += w) {
        float v;
        if (w == 4) memcpy(&v, p, 4);
        else if (w == 2) v = as_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
        else {
            double d;
            memcpy(&d, p, 8);
            v = (float)d;
        }
        if ((check == 1 && (!isfinite(v) || v < 0.0f)) || (check == 2 && !isfinite(v)) || (check == 3 && isnan(v)))
            return as_err_set(err, AS_ERR_INPUT, "%s: '%s' entry %zu is %s", path, name, i,
                              check == 1 ? "negative or not finite (weights must be finite and >= 0)"
                              : check == 2 ? "not finite" : "NaN");
        dst[i] = v;
    }
    return AS_OK;
}

/* The T strings of a ('<U n' or '|S n', 1-D of length T) as owned UTF-8 into out[T]. */
static as_status strings(const char *path, const char *name, const npz_raw *a, int T, char **out, as_error *err) {
    char sh[64];
    int ucs = !strncmp(a->descr, "<U", 2), bytes = !strncmp(a->descr, "|S", 2);
    if (a->a.ndim != 1 || a->a.shape[0] != T || (!ucs && !bytes))
        return as_err_set(err, AS_ERR_INPUT, "%s: '%s' must be %d strings, not '%s' of %s", path, name, T, a->descr,
                          shape_str(a, sh, sizeof sh));
    size_t width = ucs ? a->itemsize / 4 : a->itemsize;
    if (width > AS_NPZ_MAX_TOKEN_CHARS)
        return as_err_set(err, AS_ERR_INPUT, "%s: '%s' holds strings of up to %zu characters, over "
                          "AS_NPZ_MAX_TOKEN_CHARS (%d)", path, name, width, AS_NPZ_MAX_TOKEN_CHARS);
    for (int i = 0; i < T; i++) {
        const uint8_t *p = a->bytes + (size_t)i * a->itemsize;
        char *s = out[i] = malloc(width * 4 + 1);
        if (!s) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        size_t n = 0;
        for (size_t c = 0; c < width; c++) {
            uint32_t cp = ucs ? (uint32_t)p[4 * c] | (uint32_t)p[4 * c + 1] << 8 | (uint32_t)p[4 * c + 2] << 16 |
                                    (uint32_t)p[4 * c + 3] << 24
                              : p[c];
            if (!cp) break; /* numpy pads with NULs */
            if (!ucs) {
                s[n++] = (char)cp; /* bytes as they are; JSON writers clean them (as_json_string_utf8) */
                continue;
            }
            if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
                return as_err_set(err, AS_ERR_INPUT, "%s: '%s' string %d holds U+%X, not a Unicode scalar value", path,
                                  name, i, (unsigned)cp);
            if (cp < 0x80) s[n++] = (char)cp;
            else if (cp < 0x800) {
                s[n++] = (char)(0xC0 | cp >> 6);
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                s[n++] = (char)(0xE0 | cp >> 12);
                s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            } else {
                s[n++] = (char)(0xF0 | cp >> 18);
                s[n++] = (char)(0x80 | ((cp >> 12) & 0x3F));
                s[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
                s[n++] = (char)(0x80 | (cp & 0x3F));
            }
        }
        s[n] = 0;
    }
    return AS_OK;
}

/* Integer array a of shape (n) into dst[n] (values in [lo, hi]). */
static as_status ints(const char *path, const char *name, const npz_raw *a, int n, int64_t lo, int64_t hi,
                      int32_t *dst, as_error *err) {
    char sh[64];
    int64_t want[1] = {n};
    if (!shape_is(a, 1, want) || !is_int(a))
        return as_err_set(err, AS_ERR_INPUT, "%s: '%s' must be %d integers, not '%s' of %s", path, name, n, a->descr,
                          shape_str(a, sh, sizeof sh));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        double v = num_at(a, (size_t)i, &bad);
        if (bad || v < (double)lo || v > (double)hi)
            return as_err_set(err, AS_ERR_INPUT, "%s: '%s' entry %d is outside [%lld, %lld]", path, name, i,
                              (long long)lo, (long long)hi);
        dst[i] = (int32_t)v;
    }
    return AS_OK;
}

/* The attention array: 'attentions', else 'attention'; [L, 1, H, T, T] squeezed to
 * [L, H, T, T]; sizes against the limits. Sets *L, *H, *T. */
static as_status attention_shape(const char *path, npz_raw *a, const char *key, int *L, int *H, int *T,
                                 as_error *err) {
    char sh[64];
    int64_t s[4];
    if (a->a.ndim == 5 && a->a.shape[1] == 1) {
        s[0] = a->a.shape[0];
        for (int d = 1; d < 4; d++) s[d] = a->a.shape[d + 1];
    } else if (a->a.ndim == 4) {
        memcpy(s, a->a.shape, sizeof s);
    } else {
        return as_err_set(err, AS_ERR_INPUT, "%s: '%s' must be [layers, heads, T, T] (or bertviz's [layers, 1, heads, "
                          "T, T]), not %s", path, key, shape_str(a, sh, sizeof sh));
    }
    if (s[2] != s[3] || !s[0] || !s[1] || !s[2])
        return as_err_set(err, AS_ERR_INPUT, "%s: '%s' must be [layers, heads, T, T], not %s", path, key,
                          shape_str(a, sh, sizeof sh));
    if (s[0] > AS_NPZ_MAX_LAYERS || s[1] > AS_NPZ_MAX_HEADS || s[2] > AS_NPZ_MAX_TOKENS)
        return as_err_set(err, AS_ERR_INPUT, "%s: '%s' is %s, over the limits of %d layers (AS_NPZ_MAX_LAYERS), %d "
                          "heads (AS_NPZ_MAX_HEADS), %d tokens (AS_NPZ_MAX_TOKENS)", path, key,
                          shape_str(a, sh, sizeof sh), AS_NPZ_MAX_LAYERS, AS_NPZ_MAX_HEADS, AS_NPZ_MAX_TOKENS);
    if (a->a.n > AS_NPZ_MAX_WEIGHTS)
        return as_err_set(err, AS_ERR_INPUT, "%s: '%s' has %zu weights, more than AS_NPZ_MAX_WEIGHTS (%zu)", path, key,
                          a->a.n, (size_t)AS_NPZ_MAX_WEIGHTS);
    *L = (int)s[0];
    *H = (int)s[1];
    *T = (int)s[2];
    return AS_OK;
}

/* An empty run of L layers, H heads, T tokens (Dh > 0: with scores, q and k), its
 * tensors in one block released by as_run_free. */
static as_run *run_alloc(int L, int H, int T, int Dh) {
    as_run *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    size_t tt = (size_t)L * H * T * T, td = (size_t)L * H * T * (size_t)Dh;
    size_t floats = tt + (Dh ? tt + 2 * td : 0), bytes = floats * sizeof(float) + (size_t)T * sizeof(int32_t);
    r->block_ = as_large_get(bytes, &r->block_cap_);
    if (!r->block_) {
        free(r);
        return NULL;
    }
    float *p = r->block_;
    r->attn = p;
    if (Dh) {
        r->scores = p + tt;
        r->q = p + 2 * tt;
        r->k = p + 2 * tt + td;
    }
    r->attention_mask = (int32_t *)(p + floats);
    for (int i = 0; i < T; i++) r->attention_mask[i] = 1;
    r->T = T;
    r->L = r->n_lay = r->n_run = L;
    r->H = r->n_hd = r->Hkv = H;
    r->Dh = Dh;
    r->bytes = floats * sizeof(float);
    return r;
}

/* The optional arrays: queries, keys, attention_scores (all three or the neuron view is
 * off), score_scale, kv_group, layers, heads, token_text, input_ids, token_type_ids /
 * sentence_b_start. */
static as_status read_optional(const npz_src *f, as_attn_npz *o, int L, int H, int T, as_error *err) {
    const char *path = f->path;
    char sh[64];
    npz_raw q = {0}, k = {0}, s = {0}, a = {0};
    as_status rc;
    if ((rc = get(f, "queries", &q, err)) || (rc = get(f, "keys", &k, err)) ||
        (rc = get(f, "attention_scores", &s, err)))
        goto cleanup;
    int64_t qs[4] = {L, H, T, -1}, ss[4] = {L, H, T, T};
    const char *bad = !q.absent && !shape_is(&q, 4, qs) ? "queries" : !k.absent && !shape_is(&k, 4, qs) ? "keys" : NULL;
    if (bad) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: '%s' must be [%d, %d, %d, d_head], not %s", path, bad, L, H, T,
                        shape_str(!strcmp(bad, "queries") ? &q : &k, sh, sizeof sh));
        goto cleanup;
    }
    if (!s.absent && !shape_is(&s, 4, ss)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: 'attention_scores' must be [%d, %d, %d, %d], not %s", path, L, H, T, T,
                        shape_str(&s, sh, sizeof sh));
        goto cleanup;
    }
    int Dh = !q.absent && !k.absent && !s.absent && q.a.shape[3] == k.a.shape[3] ? (int)q.a.shape[3] : 0;
    if (Dh > AS_NPZ_MAX_D_HEAD || (!q.absent && !q.a.shape[3])) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: 'queries' has a head width of %lld, outside [1, %d] "
                        "(AS_NPZ_MAX_D_HEAD)", path, (long long)q.a.shape[3], AS_NPZ_MAX_D_HEAD);
        goto cleanup;
    }
    o->neuron = Dh > 0;
    if (Dh) {
        as_run *r = run_alloc(L, H, T, Dh);
        if (!r) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        memcpy(r->attn, o->run->attn, (size_t)L * H * T * T * sizeof(float));
        as_run_free(o->run);
        o->run = r;
        if ((rc = floats(path, "queries", &q, r->q, 2, err)) || (rc = floats(path, "keys", &k, r->k, 2, err)) ||
            (rc = floats(path, "attention_scores", &s, r->scores, 3, err)))
            goto cleanup;
    }
    for (int l = 0; l < L; l++) o->scale[l] = Dh ? 1.0f / sqrtf((float)Dh) : 1.0f;
    npz_raw_free(&a);
    if ((rc = get(f, "score_scale", &a, err))) goto cleanup;
    int64_t ls[1] = {L};
    if (!a.absent && (!shape_is(&a, 1, ls) || (rc = floats(path, "score_scale", &a, o->scale, 2, err)))) {
        if (!rc)
            rc = as_err_set(err, AS_ERR_INPUT, "%s: 'score_scale' must be [%d], not %s", path, L,
                            shape_str(&a, sh, sizeof sh));
        goto cleanup;
    }
    npz_raw_free(&a);
    if ((rc = get(f, "kv_group", &a, err))) goto cleanup;
    if (!a.absent && (rc = ints(path, "kv_group", &a, H, 0, H - 1, o->kv_group, err))) goto cleanup;
    /* layers and heads: the ids `attnscope run --layer/--head` captured; checked, not used
       (the views number what the file holds from 0) */
    for (int w = 0; w < 2; w++) {
        npz_raw_free(&a);
        const char *nm = w ? "heads" : "layers";
        int n = w ? H : L;
        int32_t *ids = calloc((size_t)n, sizeof *ids);
        if (!ids) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        if (!(rc = get(f, nm, &a, err)) && !a.absent) rc = ints(path, nm, &a, n, 0, w ? AS_NPZ_MAX_HEADS : AS_NPZ_MAX_LAYERS, ids, err);
        free(ids);
        if (rc) goto cleanup;
    }
    npz_raw_free(&a);
    if ((rc = get(f, "token_text", &a, err))) goto cleanup;
    if (!a.absent) {
        if (!(o->token_text = calloc((size_t)T, sizeof *o->token_text))) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        if ((rc = strings(path, "token_text", &a, T, o->token_text, err))) goto cleanup;
    }
    npz_raw_free(&a);
    if ((rc = get(f, "input_ids", &a, err))) goto cleanup;
    if (!a.absent) {
        if (!(o->input_ids = calloc((size_t)T, sizeof *o->input_ids))) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        if ((rc = ints(path, "input_ids", &a, T, 0, INT32_MAX, o->input_ids, err))) goto cleanup;
    }
    npz_raw_free(&a);
    if ((rc = get(f, "token_type_ids", &a, err))) goto cleanup;
    if (!a.absent && (rc = ints(path, "token_type_ids", &a, T, 0, INT32_MAX, o->type_ids, err))) goto cleanup;
    if (a.absent) {
        npz_raw_free(&a);
        if ((rc = get(f, "sentence_b_start", &a, err))) goto cleanup;
        if (!a.absent) {
            int badv = 0;
            double b = a.a.ndim == 0 && is_int(&a) ? num_at(&a, 0, &badv) : -1;
            if (badv || b < 0 || b > T) {
                rc = as_err_set(err, AS_ERR_INPUT, "%s: 'sentence_b_start' must be one integer in [0, %d]", path, T);
                goto cleanup;
            }
            for (int i = (int)b; i < T; i++) o->type_ids[i] = 1;
        }
    }
cleanup:
    npz_raw_free(&q);
    npz_raw_free(&k);
    npz_raw_free(&s);
    npz_raw_free(&a);
    return rc;
}

/* Reads the mapped archive f into o. */
/* 1 when T > 1 and no weight of attn (L, H, T, T) lies above the diagonal. */
static int is_causal(const float *w, int L, int H, int T) {
    if (T < 2) return 0;
    for (size_t m = 0; m < (size_t)L * H; m++)
        for (int i = 0; i < T; i++)
            for (int j = i + 1; j < T; j++)
                if (w[(m * T + i) * T + j] != 0.0f) return 0;
    return 1;
}

static as_status read_archive(const npz_src *f, as_attn_npz *o, as_error *err) {
    const char *path = f->path, *key = "attentions";
    npz_raw a = {0};
    int L = 0, H = 0, T = 0;
    as_status rc = get(f, key, &a, err);
    if (!rc && a.absent) {
        key = "attention";
        o->bertviz = 1;
        rc = get(f, key, &a, err);
    }
    if (!rc && a.absent)
        rc = as_err_set(err, AS_ERR_INPUT, "%s: no 'attentions' array (float [layers, heads, T, T]; bertviz-style "
                        "'attention' [layers, 1, heads, T, T] also works)", path);
    if (rc || (rc = attention_shape(path, &a, key, &L, &H, &T, err))) goto cleanup;
    if (!(o->run = run_alloc(L, H, T, 0)) || !(o->tokens = calloc((size_t)T, sizeof *o->tokens)) ||
        !(o->type_ids = calloc((size_t)T, sizeof *o->type_ids)) || !(o->scale = calloc((size_t)L, sizeof *o->scale)) ||
        !(o->kv_group = calloc((size_t)H, sizeof *o->kv_group))) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if ((rc = floats(path, key, &a, o->run->attn, 1, err))) goto cleanup;
    npz_raw_free(&a);
    if ((rc = get(f, "tokens", &a, err))) goto cleanup;
    if (a.absent) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: no 'tokens' array (the token strings, one per position)", path);
        goto cleanup;
    }
    if ((rc = strings(path, "tokens", &a, T, o->tokens, err))) goto cleanup;
    for (int h = 0; h < H; h++) o->kv_group[h] = h;
    if ((rc = read_optional(f, o, L, H, T, err))) goto cleanup;
    int groups = 0; /* distinct key/value groups, for Hkv */
    for (int h = 0; h < H; h++) {
        int seen = 0;
        for (int g = 0; g < h; g++) seen |= o->kv_group[g] == o->kv_group[h];
        groups += !seen;
    }
    o->run->Hkv = groups;
    o->causal = is_causal(o->run->attn, L, H, T);
cleanup:
    npz_raw_free(&a);
    return rc;
}

as_status as_attn_npz_read(const char *path, as_attn_npz *out, as_error *err) {
    memset(out, 0, sizeof *out);
    int fd;
    uint64_t size;
    as_status rc = as_file_open_regular(path, AS_NPZ_MAX_FILE_BYTES, &fd, &size, err);
    if (rc) return rc;
    if (size < 4) {
        close(fd);
        return as_err_set(err, AS_ERR_INPUT, "%s: %llu bytes: not an .npz archive", path, (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return as_err_set(err, AS_ERR_INTERNAL, "%s: mmap failed", path);
    const uint8_t *b = map;
    if (memcmp(b, "PK\3\4", 4) && memcmp(b, "PK\5\6", 4)) {
        int npy = !memcmp(b, "\x93NUM", 4);
        munmap(map, (size_t)size);
        return as_err_set(err, AS_ERR_INPUT, "%s: not an .npz archive (no ZIP signature PK\\3\\4%s)", path,
                          npy ? "; a single .npy array has no tokens" : "");
    }
    npz_src f = {path, b, (size_t)size};
    rc = read_archive(&f, out, err);
    munmap(map, (size_t)size);
    return rc;
}

static void free_strings(char **s, int n) {
    for (int i = 0; s && i < n; i++) free(s[i]);
    free(s);
}

void as_attn_npz_free(as_attn_npz *a) {
    if (!a) return;
    int T = a->run ? a->run->T : 0;
    free_strings(a->tokens, T);
    free_strings(a->token_text, T);
    free(a->input_ids);
    free(a->type_ids);
    free(a->scale);
    free(a->kv_group);
    as_run_free(a->run);
    memset(a, 0, sizeof *a);
}

as_status as_attn_npz_from_attention(const float *attn, int L, int H, int T, const char *const *tokens,
                                     as_attn_npz *out, as_error *err) {
    memset(out, 0, sizeof *out);
    if (L < 1 || L > AS_NPZ_MAX_LAYERS || H < 1 || H > AS_NPZ_MAX_HEADS || T < 1 || T > AS_NPZ_MAX_TOKENS ||
        (size_t)L * H * T * T > AS_NPZ_MAX_WEIGHTS)
        return as_err_set(err, AS_ERR_INPUT, "attention [%d, %d, %d, %d] outside the limits (layers <= %d, heads <= %d, "
                          "tokens <= %d, weights <= %zu)", L, H, T, T, AS_NPZ_MAX_LAYERS, AS_NPZ_MAX_HEADS,
                          AS_NPZ_MAX_TOKENS, (size_t)AS_NPZ_MAX_WEIGHTS);
    const size_t n = (size_t)L * H * T * T;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(attn[i]) || attn[i] < 0.0f)
            return as_err_set(err, AS_ERR_INPUT, "attention entry %zu is negative or not finite", i);
    if (!(out->run = run_alloc(L, H, T, 0)) || !(out->tokens = calloc((size_t)T, sizeof *out->tokens)) ||
        !(out->token_text = calloc((size_t)T, sizeof *out->token_text)) ||
        !(out->type_ids = calloc((size_t)T, sizeof *out->type_ids)) || !(out->scale = calloc((size_t)L, sizeof *out->scale)) ||
        !(out->kv_group = calloc((size_t)H, sizeof *out->kv_group)))
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    memcpy(out->run->attn, attn, n * sizeof(float));
    for (int t = 0; t < T; t++)
        if (!(out->tokens[t] = as_strdup(tokens[t] ? tokens[t] : "")) ||
            !(out->token_text[t] = as_strdup(tokens[t] ? tokens[t] : "")))
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int l = 0; l < L; l++) out->scale[l] = 1.0f;
    for (int h = 0; h < H; h++) out->kv_group[h] = h;
    out->causal = is_causal(out->run->attn, L, H, T);
    return AS_OK;
}
