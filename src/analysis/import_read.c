/* import_read.c — the import formats of `attnscope import` (docs/analysis.md, "Import
 * format"): attention arrays (.npy / .npz, checked to be probabilities), tokens and
 * their kinds, saliency in its three layouts, Dodrio's word-level parses, and the
 * alignment of tokens to words by spelling. Every error names the file.
 * What it does not: decide which files make a sentence (import.c).
 */
#include "analysis/runner_internal.h"

#include "io/npz_read.h"

#include <ctype.h>
#include <math.h>
#include <string.h>

void an_im_release(void *u_) {
    im_user *u = u_;
    free(u->tok_text);
    u->tok_text = NULL;
    free(u->kind);
    u->kind = NULL;
    free(u->sal_all);
    u->sal_all = NULL;
    free(u->word);
    u->word = NULL;
    free(u->parent);
    u->parent = NULL;
    free(u->rel);
    u->rel = NULL;
    free(u->form);
    u->form = NULL;
    npy_array_free(&u->a);
    json_decref(u->j);
    u->j = NULL;
    json_decref(u->jsal);
    u->jsal = NULL;
    json_decref(u->jdep);
    u->jdep = NULL;
    cu_corpus_free(&u->cu);
    memset(&u->cu, 0, sizeof u->cu);
}

/* Aligns WordPiece tokens to parse words by consuming the words' characters (ASCII
 * case-folded): a token belongs to the word holding its first character; [UNK] takes
 * the rest of the current word. Returns -1 when the texts do not match. */
int an_im_align_pieces(char *const *tok, const uint8_t *kind, int T, char *const *words, int W, int *word) {
    int w = 0;
    size_t c = 0;
    for (int t = 0; t < T; t++) {
        word[t] = -1;
        if (kind[t] == HK_CLS || kind[t] == HK_SEP || kind[t] == HK_PAD) continue;
        const char *p = tok[t];
        if (p[0] == '#' && p[1] == '#' && p[2]) p += 2;
        /* byte-level BPE marks a leading space with U+0120 'Ġ', SentencePiece with U+2581 */
        if (!strncmp(p, "\xc4\xa0", 2) && p[2]) p += 2;
        else if (!strncmp(p, "\xe2\x96\x81", 3) && p[3]) p += 3;
        while (w < W && words[w][c] == 0) w++, c = 0;
        if (w >= W) return -1;
        word[t] = w;
        if (!strcmp(p, "[UNK]")) {
            c = strlen(words[w]);
            continue;
        }
        for (; *p; p++) {
            while (w < W && words[w][c] == 0) w++, c = 0;
            if (w >= W) return -1;
            unsigned char a = (unsigned char)*p, b = (unsigned char)words[w][c];
            if (a < 128 && b < 128 ? tolower(a) != tolower(b) : a != b) return -1;
            c++;
        }
    }
    return 0;
}


/* Row sums of imported attention must be 1 within this. float32 softmax rows are within
 * 1e-6; float16 or bfloat16 attention cast to float32 also passes (bfloat16 keeps 8
 * significant bits: each entry is rounded by at most 2^-9 of itself, a row's sum by at
 * most 2^-9 = 0.002). A row summing to 0 or 2 is far outside. */
#define IM_ROW_SUM_TOL 5e-3

/* Reads the attention file path into u->a once its declared shape is (L, H, T, T): the
 * shape is read first (a .npy header, or an .npz entry's sizes and header), so a file
 * declaring more than the tokens file needs is refused before its data are read. */
as_status an_im_read_attention(im_user *u, const char *path, int T, as_error *err) {
    npy_array hdr;
    as_status rc = npyz_read_shape(path, NULL, &hdr, err);
    if (rc) return rc;
    if (hdr.ndim != 4 || hdr.shape[0] != u->L || hdr.shape[1] != u->H || hdr.shape[2] != T || hdr.shape[3] != T)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: attention shape must be [%d, %d, %d, %d] (layers, heads, tokens, tokens; the tokens "
                          "file has %d tokens)",
                          path, u->L, u->H, T, T, T);
    if ((rc = npyz_read_f32(path, NULL, &u->a, err))) return rc;
    if (u->a.ndim != 4 || u->a.shape[0] != u->L || u->a.shape[1] != u->H || u->a.shape[2] != T || u->a.shape[3] != T)
        return as_err_set(err, AS_ERR_INPUT, "%s: the file changed while it was read", path);
    return AS_OK;
}

/* Checks every attention row of u->a (L, H, T, T): entries finite and in [0, 1], and the
 * row summing to 1 within IM_ROW_SUM_TOL; the row of a [PAD] query (kind[i] ==
 * HK_PAD) may also be all zeros (frameworks that zero masked queries). Errors name the
 * file, layer, head and row. */
as_status an_im_check_values(const im_user *u, const char *path, int T, as_error *err) {
    for (int l = 0; l < u->L; l++)
        for (int h = 0; h < u->H; h++)
            for (int i = 0; i < T; i++) {
                const float *row = u->a.data + (((size_t)l * u->H + h) * T + i) * T;
                double sum = 0.0;
                for (int j = 0; j < T; j++) {
                    float v = row[j];
                    if (!isfinite(v) || v < 0.0f || v > 1.0f + (float)IM_ROW_SUM_TOL)
                        return as_err_set(err, AS_ERR_INPUT,
                                          "%s: layer %d, head %d, row %d (token '%s'): entry %d is %g, not a "
                                          "probability in [0, 1]",
                                          path, l, h, i, u->tok_text[i], j, (double)v);
                    sum += v;
                }
                if (fabs(sum - 1.0) <= IM_ROW_SUM_TOL || (u->kind[i] == HK_PAD && sum <= IM_ROW_SUM_TOL)) continue;
                return as_err_set(err, AS_ERR_INPUT,
                                  "%s: layer %d, head %d, row %d (token '%s'): the row sums to %.6g, not 1 (tolerance "
                                  "%g%s)",
                                  path, l, h, i, u->tok_text[i], sum, IM_ROW_SUM_TOL,
                                  u->kind[i] == HK_PAD ? "; a [PAD] row may also be all zeros" : "");
            }
    return AS_OK;
}

/* Token texts and kinds from the JSON array toks (T strings). special: optional (T)
 * array of 0/1 (Hugging Face special_tokens_mask): the first special token is [CLS],
 * the others [SEP]; without it the spelling decides ([CLS]/<s>, [SEP]/</s>, [PAD]/<pad>). */
as_status an_im_tokens(im_user *u, const char *jpath, json_t *toks, json_t *special, as_error *err) {
    const int T = (int)json_array_size(toks);
    u->tok_text = as_calloc((size_t)T, sizeof *u->tok_text);
    u->kind = as_malloc((size_t)T);
    if (!u->tok_text || !u->kind) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (special && (!json_is_array(special) || (int)json_array_size(special) != T))
        return as_err_set(err, AS_ERR_INPUT, "%s: 'special_tokens_mask' must be an array of %d integers 0/1", jpath, T);
    int seen_special = 0;
    for (int t = 0; t < T; t++) {
        const char *p = json_string_value(json_array_get(toks, (size_t)t));
        if (!p) return as_err_set(err, AS_ERR_INPUT, "%s: tokens[%d] is not a string", jpath, t);
        u->tok_text[t] = (char *)p;
        int pad = !strcmp(p, "[PAD]") || !strcmp(p, "<pad>");
        if (special) {
            json_t *m = json_array_get(special, (size_t)t);
            if (!json_is_integer(m) || json_integer_value(m) < 0 || json_integer_value(m) > 1)
                return as_err_set(err, AS_ERR_INPUT, "%s: special_tokens_mask[%d] is not 0 or 1", jpath, t);
            if (json_integer_value(m)) {
                u->kind[t] = pad ? HK_PAD : seen_special++ ? HK_SEP : HK_CLS;
                continue;
            }
            u->kind[t] = hd_is_punct(p) ? HK_PUNCT : HK_WORD;
            continue;
        }
        int first = !strcmp(p, "[CLS]") || !strcmp(p, "<s>");
        int special_tok = first || !strcmp(p, "[SEP]") || !strcmp(p, "</s>");
        u->kind[t] = special_tok ? (first ? HK_CLS : HK_SEP) : hd_is_punct(p) ? HK_PUNCT : HK_WORD;
        if (pad) u->kind[t] = HK_PAD;
    }
    return AS_OK;
}

/* Saliency in one of three layouts (docs/analysis.md "Import format"): Dodrio's T
 * objects {"token": ..., "<class>": value, ...}; C arrays of T numbers (class c = row c);
 * or T numbers (the predicted class's saliency). Sets s->sal* from u->sal_all. */
as_status an_im_saliency(im_user *u, const char *jpath, json_t *sal, int T, an_sent *s, as_error *err) {
    as_status rc = AS_OK;
    json_t *first = json_array_get(sal, 0);
    if (!json_is_array(sal) || json_array_size(sal) == 0) IM_FAIL("%s: 'saliency' must be a non-empty array", jpath);
    int C = 0, layout; /* 0 objects, 1 rows, 2 one vector */
    if (json_is_object(first)) {
        layout = 0;
        const char *key;
        json_t *v;
        json_object_foreach(first, key, v) C += strcmp(key, "token") != 0;
        if ((int)json_array_size(sal) != T) IM_FAIL("%s: 'saliency' must be an array of %d objects", jpath, T);
        if (C < 1 || C > AS_MAX_LABELS) IM_FAIL("%s: saliency[0] has no class values", jpath);
    } else if (json_is_array(first)) {
        layout = 1;
        C = (int)json_array_size(sal);
        if (C > AS_MAX_LABELS) IM_FAIL("%s: saliency has %d classes, over %d", jpath, C, AS_MAX_LABELS);
    } else {
        layout = 2;
        C = 1;
        if ((int)json_array_size(sal) != T) IM_FAIL("%s: 'saliency' must hold %d numbers (one per token)", jpath, T);
    }
    if (!(u->sal_all = as_malloc_array(as_mul_size((size_t)C, (size_t)T), sizeof *u->sal_all)))
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int t = 0; layout == 0 && t < T; t++) {
        json_t *o = json_array_get(sal, (size_t)t), *v;
        const char *key;
        if (!json_is_object(o)) IM_FAIL("%s: saliency[%d] is not an object", jpath, t);
        int k = 0;
        json_object_foreach(o, key, v) {
            if (!strcmp(key, "token")) continue;
            if (k >= C || !json_is_number(v)) IM_FAIL("%s: saliency[%d].%s is not a number or classes differ", jpath, t, key);
            u->sal_all[(size_t)k * T + t] = (float)json_number_value(v);
            k++;
        }
        if (k != C) IM_FAIL("%s: saliency[%d] has %d classes, saliency[0] has %d", jpath, t, k, C);
    }
    for (int k = 0; layout > 0 && k < C; k++) {
        json_t *row = layout == 1 ? json_array_get(sal, (size_t)k) : sal;
        if (!json_is_array(row) || (int)json_array_size(row) != T)
            IM_FAIL("%s: saliency[%d] must hold %d numbers (one per token)", jpath, k, T);
        for (int t = 0; t < T; t++) {
            json_t *v = json_array_get(row, (size_t)t);
            if (!json_is_number(v) || !isfinite(json_number_value(v)))
                IM_FAIL("%s: saliency value %d of class %d is not a finite number", jpath, t, k);
            u->sal_all[(size_t)k * T + t] = (float)json_number_value(v);
        }
    }
    s->sal_all = u->sal_all;
    s->n_sal_cls = C;
    if (layout == 2) {
        s->sal_first_class = s->predicted >= 0 ? s->predicted : 0;
        s->sal = u->sal_all;
        return AS_OK;
    }
    s->sal_first_class = 0;
    if (s->predicted >= C) IM_FAIL("%s: predicted_label %d but saliency has %d classes", jpath, s->predicted, C);
    if (s->predicted >= 0) s->sal = u->sal_all + (size_t)s->predicted * T;
    return AS_OK;
fail:
    return rc;
}

/* Allocates the word arrays for W words (parent -2 = no arc, relation ""). */
as_status an_im_words_alloc(im_user *u, int T, int W, as_error *err) {
    u->word = as_malloc_array((size_t)T, sizeof *u->word);
    u->parent = as_malloc_array((size_t)(W ? W : 1), sizeof *u->parent);
    u->rel = as_calloc((size_t)(W ? W : 1), sizeof *u->rel);
    u->form = as_calloc((size_t)(W ? W : 1), sizeof *u->form);
    if (!u->word || !u->parent || !u->rel || !u->form) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int w = 0; w < W; w++) {
        u->parent[w] = -2;
        u->rel[w] = (char *)"";
    }
    return AS_OK;
}

/* Dodrio's word-level parse {"words": [...], "list": [{"child", "parent" (null = root),
 * "relation"}]} (0-based) into u->form / parent / rel; *W_out = number of words. */
as_status an_im_deps_json(im_user *u, const char *jpath, json_t *deps, int T, int *W_out, as_error *err) {
    as_status rc;
    json_t *lst = json_object_get(deps, "list"), *words = json_object_get(deps, "words");
    if (!json_is_array(lst) || !json_is_array(words)) IM_FAIL("%s: 'dependencies' needs arrays 'list' and 'words'", jpath);
    int W = (int)json_array_size(words);
    if (W > T) IM_FAIL("%s: %d parse words but only %d tokens", jpath, W, T);
    if ((rc = an_im_words_alloc(u, T, W, err))) return rc;
    for (int w = 0; w < W; w++)
        if (!(u->form[w] = (char *)json_string_value(json_array_get(words, (size_t)w))))
            IM_FAIL("%s: dependencies.words[%d] is not a string", jpath, w);
    for (size_t i = 0; i < json_array_size(lst); i++) {
        json_t *e = json_array_get(lst, i), *ch = json_object_get(e, "child"), *pa = json_object_get(e, "parent");
        const char *rl = json_string_value(json_object_get(e, "relation"));
        if (!json_is_integer(ch) || json_integer_value(ch) < 0 || json_integer_value(ch) >= W || !rl ||
            !(json_is_null(pa) || (json_is_integer(pa) && json_integer_value(pa) >= 0 && json_integer_value(pa) < W)))
            IM_FAIL("%s: dependencies.list[%zu] needs child and parent in [0, %d) (parent may be null) and a relation",
                    jpath, i, W);
        int c = (int)json_integer_value(ch);
        u->parent[c] = json_is_null(pa) ? -1 : (int)json_integer_value(pa);
        u->rel[c] = (char *)rl;
    }
    *W_out = W;
    return AS_OK;
fail:
    return rc;
}

/* Hands the parse to s once the tokens are aligned to its W words. */
void an_im_set_words(im_user *u, an_sent *s, int W) {
    s->W = W;
    s->word = u->word;
    s->parent = u->parent;
    s->rel = u->rel;
    s->word_form = u->form;
}

/* Largest JSON file of an import (tokens, saliency, dependencies of one sentence). */
#define IM_MAX_JSON_BYTES ((size_t)64 << 20)

/* Loads a JSON file (a regular file of at most IM_MAX_JSON_BYTES) into *out; syntax
 * errors as "file:line: invalid JSON: ...". */
as_status an_im_load_json(const char *path, json_t **out, as_error *err) {
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    as_status rc = as_read_file(path, IM_MAX_JSON_BYTES, &text, &len, err);
    if (rc) return rc;
    json_error_t je;
    *out = json_loadb(text, len, 0, &je);
    free(text);
    if (!*out) return as_err_set(err, AS_ERR_INPUT, "%s:%d: invalid JSON: %s", path, je.line, je.text);
    return AS_OK;
}

/* Layers and heads of an import from the shape of its first attention file (npy or
 * npz; the data are not read), within AS_MAX_LAYERS, AS_MAX_HEADS, AS_MAX_RUN_HEADS
 * and AS_MAX_POSITIONS. */
as_status an_im_sizes(const char *path, im_user *u, as_error *err) {
    npy_array a;
    as_status rc = npyz_read_shape(path, NULL, &a, err);
    if (rc) return rc;
    if (a.ndim != 4 || a.shape[2] != a.shape[3] || a.shape[0] < 1 || a.shape[1] < 1 || a.shape[2] < 1)
        return as_err_set(err, AS_ERR_INPUT, "%s: attention must be float32 with shape [layers, heads, tokens, tokens]",
                          path);
    if (a.shape[0] > AS_MAX_LAYERS || a.shape[1] > AS_MAX_HEADS || a.shape[0] * a.shape[1] > AS_MAX_RUN_HEADS ||
        a.shape[2] > AS_MAX_POSITIONS)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: attention shape [%lld, %lld, %lld, %lld] is over the limits (at most %d layers, %d "
                          "heads, %d heads in all, %d tokens)",
                          path, (long long)a.shape[0], (long long)a.shape[1], (long long)a.shape[2],
                          (long long)a.shape[3], AS_MAX_LAYERS, AS_MAX_HEADS, AS_MAX_RUN_HEADS, AS_MAX_POSITIONS);
    u->L = (int)a.shape[0];
    u->H = (int)a.shape[1];
    return AS_OK;
}
