/* align.c — word alignment from cross-attention and its alignment error rate
 * (include/attnscope/align.h): Pharaoh lines, tokens to words, word-level attention,
 * argmax alignment per layer / head / head mean, AER counts.
 * What it does not: run models or tokenize (callers pass the encodings and runs), read
 * or write the analysis database.
 *
 * Dimension letters: L decoder layers, H heads, Tt decoder rows, Ts source tokens, Wt
 * target words, Ws source words.
 */
#include "attnscope/align.h"

#include "core/core.h"
#include "core/file.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void al_links_free(al_links *a) {
    if (!a) return;
    free(a->links);
    a->links = NULL;
    a->n = 0;
}

static int is_blank(char c) { return c == ' ' || c == '\t'; }

/* Parses a non-negative decimal index of at most 9 digits at *p; -1 when there is none. */
static int parse_index(const char **p) {
    const char *s = *p;
    int v = 0, n = 0;
    while (*s >= '0' && *s <= '9') {
        if (++n > 9) return -1;
        v = v * 10 + (*s++ - '0');
    }
    if (!n) return -1;
    *p = s;
    return v;
}

static int link_cmp(const void *x, const void *y) {
    const al_link *a = x, *b = y;
    if (a->tgt != b->tgt) return a->tgt < b->tgt ? -1 : 1;
    if (a->src != b->src) return a->src < b->src ? -1 : 1;
    return 0;
}

/* Sorts by (tgt, src) and merges repeated pairs (sure wins). */
static void links_normalize(al_links *a) {
    if (a->n < 2) return;
    qsort(a->links, (size_t)a->n, sizeof *a->links, link_cmp);
    int w = 0;
    for (int i = 0; i < a->n; i++) {
        if (w && !link_cmp(&a->links[w - 1], &a->links[i])) {
            a->links[w - 1].sure |= a->links[i].sure;
            continue;
        }
        a->links[w++] = a->links[i];
    }
    a->n = w;
}

as_status al_parse_line(const char *path, int line, const char *text, int n_src, int n_tgt, al_links *out,
                        as_error *err) {
    memset(out, 0, sizeof *out);
    int cap = 0, k = 0;
    const char *p = text;
    char q[64];
    for (;;) {
        while (is_blank(*p)) p++;
        if (!*p) break;
        const char *t0 = p;
        size_t tl = 0;
        while (t0[tl] && !is_blank(t0[tl])) tl++;
        k++;
        as_quote_bytes(q, sizeof q, t0, tl);
        if (k > AL_MAX_LINKS) {
            al_links_free(out);
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: pair %d '%s': more than %d pairs on a line", path, line, k, q,
                              AL_MAX_LINKS);
        }
        int src = parse_index(&p), sure = -1;
        if (src >= 0 && *p == '-') sure = 1;
        else if (src >= 0 && (*p == '?' || *p == 'p')) sure = 0;
        int tgt = -1;
        if (sure >= 0) {
            p++;
            tgt = parse_index(&p);
        }
        if (src < 0 || sure < 0 || tgt < 0 || (*p && !is_blank(*p))) {
            al_links_free(out);
            return as_err_set(err, AS_ERR_INPUT,
                              "%s:%d: pair %d '%s': expected I-J (sure) or I?J / IpJ (possible), I and J word indices",
                              path, line, k, q);
        }
        if ((n_src >= 0 && src >= n_src) || (n_tgt >= 0 && tgt >= n_tgt)) {
            int bad_src = n_src >= 0 && src >= n_src;
            al_links_free(out);
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: pair %d '%s': %s index %d is outside the %s sentence's %d words",
                              path, line, k, q, bad_src ? "source" : "target", bad_src ? src : tgt,
                              bad_src ? "source" : "target", bad_src ? n_src : n_tgt);
        }
        if (out->n == cap) {
            int nc = cap ? 2 * cap : 16;
            al_link *nl = realloc(out->links, (size_t)nc * sizeof *nl);
            if (!nl) {
                al_links_free(out);
                return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            }
            out->links = nl;
            cap = nc;
        }
        out->links[out->n++] = (al_link){.src = src, .tgt = tgt, .sure = sure};
    }
    links_normalize(out);
    return AS_OK;
}

void al_lines_free(char **lines, int n) {
    for (int i = 0; lines && i < n; i++) free(lines[i]);
    free(lines);
}

as_status al_read_lines(const char *path, char ***lines, int *n, as_error *err) {
    *lines = NULL;
    *n = 0;
    char *buf = NULL, **ls = NULL;
    size_t len = 0;
    int cnt = 0, cap = 0;
    as_status rc = as_read_file(path, AL_MAX_FILE_BYTES, &buf, &len, err);
    if (rc) return rc;
    if (memchr(buf, 0, len)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: has a NUL byte (not a text file)", path);
        goto cleanup;
    }
    for (size_t pos = 0; pos < len;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        size_t e = nl ? (size_t)(nl - buf) : len, next = nl ? e + 1 : len;
        if (e > pos && buf[e - 1] == '\r') e--;
        if (e - pos > AL_MAX_LINE_BYTES) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s:%d: line is %zu bytes, over the limit of %d", path, cnt + 1,
                            e - pos, AL_MAX_LINE_BYTES);
            goto cleanup;
        }
        if (cnt == AL_MAX_LINES) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: more than %d lines", path, AL_MAX_LINES);
            goto cleanup;
        }
        if (cnt == cap) {
            int nc = cap ? 2 * cap : 64;
            char **nls = realloc(ls, (size_t)nc * sizeof *nls);
            if (!nls) {
                rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
                goto cleanup;
            }
            ls = nls;
            cap = nc;
        }
        if (!(ls[cnt] = as_malloc(e - pos + 1))) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        memcpy(ls[cnt], buf + pos, e - pos);
        ls[cnt++][e - pos] = 0;
        pos = next;
    }
    *lines = ls;
    *n = cnt;
    ls = NULL;
cleanup:
    al_lines_free(ls, cnt);
    free(buf);
    return rc;
}

int al_count_words(const char *text) {
    int n = 0;
    for (const char *p = text; *p;) {
        while (is_blank(*p)) p++;
        if (!*p) break;
        if (++n > AL_MAX_WORDS) return -1;
        while (*p && !is_blank(*p)) p++;
    }
    return n;
}

as_status al_token_words(const as_encoding *enc, const char *text, int *word, int *n_words, as_error *err) {
    int W = al_count_words(text);
    if (W < 0) return as_err_set(err, AS_ERR_INPUT, "sentence has more than %d words", AL_MAX_WORDS);
    /* word index of each byte of text, -1 on blanks */
    size_t len = strlen(text);
    int *bw = as_malloc_array(len + 1, sizeof *bw);
    if (!bw) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    int w = -1, in = 0;
    for (size_t i = 0; i < len; i++) {
        if (is_blank(text[i])) {
            in = 0;
            bw[i] = -1;
        } else {
            if (!in) w++;
            in = 1;
            bw[i] = w;
        }
    }
    bw[len] = -1;
    for (int t = 0; t < enc->n; t++) {
        int s = enc->start[t], e = enc->end[t];
        word[t] = -1;
        if (s < 0 || !enc->mask[t] || (size_t)s >= len) continue;
        if (e < s || (size_t)e > len) e = (int)len;
        int i = s;
        while (i < e && bw[i] < 0) i++;
        if (i == e) /* spaces only: the next word */
            while ((size_t)i < len && bw[i] < 0) i++;
        word[t] = bw[i];
    }
    free(bw);
    *n_words = W;
    return AS_OK;
}

void al_target_rows(const int *label_word, int Tt, int shift, int *row_word) {
    for (int i = 0; i < Tt; i++) row_word[i] = i - shift >= 0 ? label_word[i - shift] : -1;
}

void al_word_matrix(const float *A, int Tt, int Ts, const int *row_word, int Wt, const int *src_word, int Ws,
                    float *Wm) {
    memset(Wm, 0, (size_t)Wt * Ws * sizeof *Wm);
    for (int i = 0; i < Tt; i++) {
        int b = row_word[i];
        if (b < 0 || b >= Wt) continue;
        for (int j = 0; j < Ts; j++) {
            int a = src_word[j];
            if (a >= 0 && a < Ws) Wm[(size_t)b * Ws + a] += A[(size_t)i * Ts + j];
        }
    }
    for (int b = 0; b < Wt; b++) {
        int rows = 0;
        for (int i = 0; i < Tt; i++) rows += row_word[i] == b;
        if (rows > 1)
            for (int a = 0; a < Ws; a++) Wm[(size_t)b * Ws + a] /= (float)rows;
    }
}

void al_argmax(const float *Wm, int Wt, int Ws, const uint8_t *row_has, const uint8_t *src_has, int32_t *best) {
    for (int b = 0; b < Wt; b++) {
        best[b] = -1;
        if (!row_has[b]) continue;
        for (int a = 0; a < Ws; a++)
            if (src_has[a] && (best[b] < 0 || Wm[(size_t)b * Ws + a] > Wm[(size_t)b * Ws + best[b]])) best[b] = a;
    }
}

as_status al_align_run(const as_run *cross, const int *row_word, int Wt, const int *src_word, int Ws, int32_t *best,
                       as_error *err) {
    if (!cross || !cross->attn) return as_err_set(err, AS_ERR_INPUT, "cross-attention was not captured");
    const int Tt = cross->T, Ts = cross->Tk, NH = cross->n_hd;
    const size_t TT = (size_t)Tt * Ts;
    as_status rc = AS_OK;
    float *Wm = as_malloc_array((size_t)(Wt > 0 ? Wt : 1) * (Ws > 0 ? Ws : 1), sizeof *Wm);
    float *mean = as_malloc_array(TT ? TT : 1, sizeof *mean);
    uint8_t *row_has = calloc((size_t)Wt + 1, 1), *src_has = calloc((size_t)Ws + 1, 1);
    if (!Wm || !mean || !row_has || !src_has) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < Tt; i++)
        if (row_word[i] >= 0 && row_word[i] < Wt) row_has[row_word[i]] = 1;
    for (int j = 0; j < Ts; j++)
        if (src_word[j] >= 0 && src_word[j] < Ws) src_has[src_word[j]] = 1;
    for (int l = 0; l < cross->n_lay; l++) {
        memset(mean, 0, TT * sizeof *mean);
        for (int h = 0; h <= NH; h++) {
            const float *A = mean;
            if (h < NH) {
                A = cross->attn + ((size_t)l * NH + h) * TT;
                for (size_t x = 0; x < TT; x++) mean[x] += A[x] / (float)NH;
            }
            al_word_matrix(A, Tt, Ts, row_word, Wt, src_word, Ws, Wm);
            al_argmax(Wm, Wt, Ws, row_has, src_has, best + ((size_t)l * (NH + 1) + h) * Wt);
        }
    }
cleanup:
    free(Wm);
    free(mean);
    free(row_has);
    free(src_has);
    return rc;
}

/* 1: sure, 0: possible, -1: not a gold link (gold sorted by (tgt, src)). */
static int gold_find(const al_links *g, int src, int tgt) {
    int lo = 0, hi = g->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const al_link *m = &g->links[mid];
        int c = m->tgt != tgt ? (m->tgt < tgt ? -1 : 1) : m->src != src ? (m->src < src ? -1 : 1) : 0;
        if (!c) return m->sure ? 1 : 0;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

void al_count(const int32_t *best, int Wt, const al_links *gold, al_counts *c) {
    for (int i = 0; i < gold->n; i++) c->s += gold->links[i].sure ? 1 : 0;
    for (int b = 0; b < Wt; b++) {
        if (best[b] < 0) continue;
        c->a++;
        int g = gold_find(gold, best[b], b);
        if (g >= 0) c->a_p++;
        if (g == 1) c->a_s++;
    }
}

double al_aer(const al_counts *c) {
    if (c->a + c->s == 0) return NAN;
    return 1.0 - (double)(c->a_s + c->a_p) / (double)(c->a + c->s);
}

char *al_format(const int32_t *best, int Wt, char *buf, size_t cap) {
    size_t n = 0;
    if (!cap) return buf;
    buf[0] = 0;
    for (int b = 0; b < Wt; b++) {
        if (best[b] < 0) continue;
        int k = snprintf(buf + n, cap - n, "%s%d-%d", n ? " " : "", best[b], b);
        if (k < 0 || (size_t)k >= cap - n) {
            buf[n] = 0;
            break;
        }
        n += (size_t)k;
    }
    return buf;
}
