/* intervene.c — the output with and without an intervention on the attention (head
 * ablation, attention knockout; as_intervention in attnscope.h, applied by the one forward
 * in model/encoder.c): two forwards of the same input, one row of log-probabilities each,
 * and the parsers of the intervention's text form ("L:H,..." heads, "L[:H]:i>j,..." edges)
 * that the CLI and the server share.
 * What it does not: apply the intervention itself (the forward does), or rank heads.
 */
#include "attnscope/analysis.h"
#include "model/model.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void iv_result_free(iv_result *r) {
    if (!r) return;
    free(r->base);
    free(r->after);
    memset(r, 0, sizeof *r);
}

static int last_real(const as_encoding *enc) {
    for (int t = enc->n - 1; t >= 0; t--)
        if (!enc->mask || enc->mask[t]) return t;
    return enc->n - 1;
}

/* y (n) = log_softmax(x) in double. */
static void log_softmax(const float *x, int n, float *y) {
    double mx = -INFINITY, s = 0.0;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    for (int i = 0; i < n; i++) s += exp((double)x[i] - mx);
    double lz = mx + log(s);
    for (int i = 0; i < n; i++) y[i] = (float)((double)x[i] - lz);
}

/* One forward with logits (and iv, or none) into y (cols) at out->position. */
static as_status one(const as_model *m, const as_encoding *enc, const as_intervention *iv, const iv_opts *o,
                     iv_result *out, float **y, as_error *err) {
    as_capture_spec spec = {.what = CAP_LOGITS, .layer = -1, .head = -1, .threads = o->threads, .intervene = iv};
    as_run *r = NULL;
    as_status s = as_forward(m, enc, &spec, &r, err);
    if (s) return s;
    if (!r->logits) {
        s = as_err_set(err, AS_ERR_INPUT, "%s: the model has no task head whose output could change", as_model_dir(m));
        goto cleanup;
    }
    if (!out->cols) {
        out->cols = r->logits_cols;
        out->classifier = r->logits_rows == 1;
        if (out->classifier && o->position != -1) {
            s = as_err_set(err, AS_ERR_INPUT, "position %d: a sequence classifier has one output; position applies "
                           "to LM / masked-LM heads", o->position);
            goto cleanup;
        }
        /* the classifier's row is the token its head reads: [CLS] / <s>, or the last real one */
        out->position = o->position != -1 ? o->position : out->classifier && !m->cls_last_token ? 0 : last_real(enc);
        if (out->position < 0 || out->position >= enc->n) {
            s = as_err_set(err, AS_ERR_INPUT, "position %d out of range [0, %d)", o->position, enc->n);
            goto cleanup;
        }
    }
    if (!(*y = as_malloc_array((size_t)out->cols, sizeof(float)))) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    log_softmax(r->logits + (size_t)(out->classifier ? 0 : out->position) * out->cols, out->cols, *y);
cleanup:
    as_run_free(r);
    return s;
}

as_status iv_compare(const as_model *m, const as_encoding *enc, const as_intervention *iv, const iv_opts *o,
                     iv_result *out, as_error *err) {
    memset(out, 0, sizeof *out);
    if (!enc || enc->n <= 0) return as_err_set(err, AS_ERR_INPUT, "empty input: no tokens");
    if (o->position < -1) return as_err_set(err, AS_ERR_INPUT, "position %d: expected -1 or an index", o->position);
    if (!(as_model_heads(m) & (HEAD_CLASSIFIER | HEAD_MLM | HEAD_LM)))
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no task head whose output could change",
                          as_model_dir(m));
    as_status s = one(m, enc, NULL, o, out, &out->base, err);
    if (!s) s = one(m, enc, iv, o, out, &out->after, err);
    if (s) iv_result_free(out);
    return s;
}

/* Indices of the k largest of x (n) into idx, largest first (ties: the lower index). */
static void top_k(const float *x, int n, int k, int *idx) {
    for (int r = 0; r < k; r++) {
        int b = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < r && !taken; q++) taken = idx[q] == i;
            if (!taken && (b < 0 || x[i] > x[b])) b = i;
        }
        idx[r] = b;
    }
}

static json_t *token_json(const as_model *m, const iv_result *r, int id) {
    char *t = as_model_token_text(m, id);
    json_t *o = json_pack("{s:i, s:o, s:f, s:f}", "id", id, "text", as_json_string_utf8(t ? t : ""), "before",
                          (double)r->base[id], "after", (double)r->after[id]);
    free(t);
    return o;
}

json_t *iv_result_json(const as_model *m, const iv_result *r, int top, int target) {
    json_t *o = json_pack("{s:s, s:i}", "kind", r->classifier ? "classifier" : "lm", "position", r->position);
    if (!o) return NULL;
    if (r->classifier) {
        const as_config *c = as_model_config(m);
        json_t *cl = json_array();
        for (int k = 0; k < r->cols; k++) {
            const char *label = c->id2label && k < c->num_labels && c->id2label[k] ? c->id2label[k] : "";
            json_array_append_new(cl, json_pack("{s:i, s:o, s:f, s:f}", "index", k, "label", as_json_string_utf8(label),
                                                "before", exp((double)r->base[k]), "after", exp((double)r->after[k])));
        }
        json_object_set_new(o, "classes", cl);
        return o;
    }
    int k = top < r->cols ? top : r->cols;
    int *idx = as_malloc_array((size_t)(k > 0 ? k : 1), sizeof(int));
    if (!idx) {
        json_decref(o);
        return NULL;
    }
    const float *side[2] = {r->base, r->after};
    const char *name[2] = {"top_before", "top_after"};
    for (int s = 0; s < 2; s++) {
        top_k(side[s], r->cols, k, idx);
        json_t *a = json_array();
        for (int q = 0; q < k; q++) json_array_append_new(a, token_json(m, r, idx[q]));
        json_object_set_new(o, name[s], a);
    }
    top_k(r->base, r->cols, 1, idx);
    json_object_set_new(o, "target", token_json(m, r, target >= 0 && target < r->cols ? target : idx[0]));
    free(idx);
    return o;
}

/* ---- the text form ------------------------------------------------------------------ */

static int parse_fail(char *msg, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, cap, fmt, ap);
    va_end(ap);
    return -1;
}

/* A decimal integer at *p (advanced), in [0, 1 << 24]; -1 when none. */
static long number(const char **p) {
    if (**p < '0' || **p > '9') return -1;
    char *end;
    errno = 0;
    long v = strtol(*p, &end, 10);
    if (errno || v > (1L << 24)) return -1;
    *p = end;
    return v;
}

/* Splits s at commas into items, calling fn on each; -1 on the first that fails. */
typedef int (*item_fn)(const char *item, size_t len, void *acc, char *msg, size_t cap);

static int each_item(const char *s, item_fn fn, void *acc, char *msg, size_t cap) {
    if (!s || !*s) return parse_fail(msg, cap, "an empty list");
    const char *p = s;
    for (;;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (fn(p, len, acc, msg, cap)) return -1;
        if (!c) return 0;
        p = c + 1;
    }
}

typedef struct {
    void *items;
    int n, cap;
    size_t size;
} grow_t;

static void *grow_next(grow_t *g) {
    if (g->n >= AS_MAX_INTERVENTION_ITEMS) return NULL;
    if (g->n == g->cap) {
        int nc = g->cap ? 2 * g->cap : 8;
        void *p = realloc(g->items, (size_t)nc * g->size);
        if (!p) return NULL;
        g->items = p, g->cap = nc;
    }
    return (char *)g->items + (size_t)g->n++ * g->size;
}

static int head_item(const char *it, size_t len, void *acc, char *msg, size_t cap) {
    const char *p = it;
    long l = number(&p), h = -1;
    if (l >= 0 && *p == ':') p++, h = number(&p);
    if (l < 0 || h < 0 || (size_t)(p - it) != len)
        return parse_fail(msg, cap, "bad head '%.*s': expected LAYER:HEAD", (int)len, it);
    as_head_ref *x = grow_next(acc);
    if (!x) return parse_fail(msg, cap, "more than %d heads", AS_MAX_INTERVENTION_ITEMS);
    *x = (as_head_ref){(int)l, (int)h};
    return 0;
}

static int edge_item(const char *it, size_t len, void *acc, char *msg, size_t cap) {
    const char *p = it;
    long l = number(&p), h = -1, i = -1, j = -1;
    int ok = l >= 0 && *p == ':';
    if (ok) {
        p++;
        const char *q = p;
        long a = number(&q);
        if (a >= 0 && *q == ':') { /* L:H:i>j */
            h = a, p = q + 1;
        } else if (*p == '*' && p[1] == ':') { /* L:*:i>j */
            p += 2;
        }
        i = number(&p);
        ok = i >= 0 && *p == '>';
        if (ok) p++, j = number(&p);
    }
    if (!ok || j < 0 || (size_t)(p - it) != len)
        return parse_fail(msg, cap, "bad edge '%.*s': expected LAYER:QUERY>KEY or LAYER:HEAD:QUERY>KEY", (int)len, it);
    as_edge *x = grow_next(acc);
    if (!x) return parse_fail(msg, cap, "more than %d edges", AS_MAX_INTERVENTION_ITEMS);
    *x = (as_edge){(int)l, (int)h, (int)i, (int)j};
    return 0;
}

int iv_parse_heads(const char *s, as_head_ref **out, int *n_out, char *msg, size_t cap) {
    grow_t g = {NULL, 0, 0, sizeof(as_head_ref)};
    int rc = each_item(s, head_item, &g, msg, cap);
    if (rc) free(g.items), g.items = NULL, g.n = 0;
    *out = g.items, *n_out = g.n;
    return rc;
}

int iv_parse_edges(const char *s, as_edge **out, int *n_out, char *msg, size_t cap) {
    grow_t g = {NULL, 0, 0, sizeof(as_edge)};
    int rc = each_item(s, edge_item, &g, msg, cap);
    if (rc) free(g.items), g.items = NULL, g.n = 0;
    *out = g.items, *n_out = g.n;
    return rc;
}
