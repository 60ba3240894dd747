/* conllu.c — CoNLL-U reader and word/token alignment (see conllu.h). The format:
 * https://universaldependencies.org/format.html (10 tab-separated fields per word
 * line; "a-b" multi-word token ranges; "a.b" empty nodes; blank line ends a sentence).
 */
#include "io/conllu.h"

#include "core/file.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>

/* A field or form of the file quoted for a message (as_quote_bytes: no raw control or
 * invalid bytes), in a buffer that lives until the end of the enclosing statement. */
#define QUOTE(p, n) as_quote_bytes((char[96]){0}, 96, (p), (n))

typedef struct {
    int a, b;      /* 1-based word range of a multi-word token */
    char *form;    /* surface form */
    int no_space;  /* SpaceAfter=No */
    int line;
} cu_mwt;

typedef struct {
    const char *name;
    cu_word *w;
    int nw, capw;
    int *no_space; /* (capw) SpaceAfter=No per word */
    cu_mwt *m;
    int nm, capm;
    char *text, *sent_id;
    int first_line;
} cu_state;

static void state_reset(cu_state *st) {
    for (int i = 0; i < st->nw; i++) {
        free(st->w[i].form);
        free(st->w[i].deprel);
    }
    for (int i = 0; i < st->nm; i++) free(st->m[i].form);
    free(st->text);
    free(st->sent_id);
    st->nw = st->nm = 0;
    st->text = st->sent_id = NULL;
    st->first_line = 0;
}

static void state_free(cu_state *st) {
    state_reset(st);
    free(st->w);
    free(st->no_space);
    free(st->m);
}

void cu_corpus_free(cu_corpus *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        cu_sentence *s = &c->s[i];
        for (int w = 0; w < s->n_words; w++) {
            free(s->words[w].form);
            free(s->words[w].deprel);
        }
        free(s->words);
        free(s->text);
        free(s->sent_id);
    }
    free(c->s);
    c->s = NULL;
    c->n = 0;
}

static char *dup_n(const char *p, size_t n) {
    char *s = as_malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, p, n);
    s[n] = 0;
    return s;
}

/* Parses a positive decimal integer filling all of [p, p+n). -1 on error. */
static long parse_uint(const char *p, size_t n) {
    if (n == 0 || n > 9) return -1;
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9') return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

static int misc_no_space(const char *p, size_t n) {
    const char *key = "SpaceAfter=No";
    size_t k = strlen(key);
    for (size_t i = 0; i + k <= n; i++)
        if ((i == 0 || p[i - 1] == '|') && !memcmp(p + i, key, k) && (i + k == n || p[i + k] == '|')) return 1;
    return 0;
}

/* Finds form in text at or after *pos (leading whitespace skipped); sets span. */
static int find_form(const char *text, size_t tlen, size_t *pos, const char *form, int *start, int *end) {
    size_t p = *pos, fl = strlen(form);
    while (p < tlen && isspace((unsigned char)text[p])) p++;
    if (fl == 0) return -1;
    const char *hit = NULL;
    if (p + fl <= tlen && !memcmp(text + p, form, fl)) hit = text + p;
    else hit = strstr(text + p, form);
    if (!hit) return -1;
    *start = (int)(hit - text);
    *end = *start + (int)fl;
    *pos = (size_t)*end;
    return 0;
}

/* Ends the sentence in st: checks heads, builds/aligns the text, appends to out. */
static as_status finish_sentence(cu_state *st, cu_corpus *out, int *cap, as_error *err) {
    if (st->nw == 0) {
        if (st->nm) return as_err_set(err, AS_ERR_INPUT, "%s:%d: multi-word token without words", st->name, st->m[0].line);
        state_reset(st);
        return AS_OK;
    }
    for (int i = 0; i < st->nw; i++)
        if (st->w[i].head >= st->nw)
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: HEAD %d is beyond the sentence's %d words", st->name,
                              st->w[i].line, st->w[i].head + 1, st->nw);
    for (int k = 0; k < st->nm; k++)
        if (st->m[k].b > st->nw)
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: multi-word token range %d-%d is beyond the sentence's %d words",
                              st->name, st->m[k].line, st->m[k].a, st->m[k].b, st->nw);
    /* surface units: a multi-word token covers words a..b; any other word is its own */
    if (!st->text) {
        size_t n = 1;
        for (int i = 0; i < st->nw; i++) n += strlen(st->w[i].form) + 1;
        for (int k = 0; k < st->nm; k++) n += strlen(st->m[k].form) + 1;
        char *t = as_malloc(n);
        if (!t) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        size_t o = 0;
        int k = 0;
        for (int i = 0; i < st->nw;) {
            const char *f;
            int ns;
            if (k < st->nm && st->m[k].a == i + 1) {
                f = st->m[k].form;
                ns = st->m[k].no_space;
                i = st->m[k].b;
                k++;
            } else {
                f = st->w[i].form;
                ns = st->no_space[i];
                i++;
            }
            size_t fl = strlen(f);
            memcpy(t + o, f, fl);
            o += fl;
            if (!ns && i < st->nw) t[o++] = ' ';
        }
        t[o] = 0;
        st->text = t;
    }
    size_t tlen = strlen(st->text), pos = 0;
    int k = 0;
    for (int i = 0; i < st->nw;) {
        if (k < st->nm && st->m[k].a == i + 1) {
            cu_mwt *m = &st->m[k++];
            int s0, e0;
            if (find_form(st->text, tlen, &pos, m->form, &s0, &e0))
                return as_err_set(err, AS_ERR_INPUT, "%s:%d: form '%s' is not in the sentence text", st->name, m->line,
                                  QUOTE(m->form, strlen(m->form)));
            /* sub-spans when the words' forms concatenate to the surface form */
            int o = s0, ok = 1;
            for (int w = m->a - 1; w < m->b && ok; w++) {
                size_t fl = strlen(st->w[w].form);
                if ((size_t)o + fl > (size_t)e0 || memcmp(st->text + o, st->w[w].form, fl)) ok = 0;
                o += (int)fl;
            }
            if (o != e0) ok = 0;
            o = s0;
            for (int w = m->a - 1; w < m->b; w++) {
                if (ok) {
                    st->w[w].start = o;
                    o += (int)strlen(st->w[w].form);
                    st->w[w].end = o;
                } else {
                    st->w[w].start = w == m->a - 1 ? s0 : -1;
                    st->w[w].end = w == m->a - 1 ? e0 : -1;
                }
            }
            i = m->b;
        } else {
            if (find_form(st->text, tlen, &pos, st->w[i].form, &st->w[i].start, &st->w[i].end))
                return as_err_set(err, AS_ERR_INPUT, "%s:%d: form '%s' is not in the sentence text", st->name,
                                  st->w[i].line, QUOTE(st->w[i].form, strlen(st->w[i].form)));
            i++;
        }
    }
    if (out->n == *cap) {
        int nc = *cap ? *cap * 2 : 256;
        cu_sentence *ns = realloc(out->s, (size_t)nc * sizeof *ns);
        if (!ns) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        out->s = ns;
        *cap = nc;
    }
    cu_sentence *s = &out->s[out->n++];
    s->text = st->text;
    s->sent_id = st->sent_id;
    s->line = st->first_line;
    s->n_words = st->nw;
    s->words = as_malloc_array((size_t)st->nw, sizeof *s->words);
    if (!s->words) {
        s->n_words = 0;
        st->text = st->sent_id = NULL;
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    memcpy(s->words, st->w, (size_t)st->nw * sizeof *s->words);
    st->nw = 0; /* ownership of forms moved */
    st->text = st->sent_id = NULL;
    state_reset(st);
    return AS_OK;
}

static as_status parse_word_line(cu_state *st, const char *p, size_t n, int lineno, as_error *err) {
    const char *f[10];
    size_t fl[10];
    int tabs = 0;
    for (size_t i = 0; i < n; i++) tabs += p[i] == '\t';
    if (tabs != 9)
        return as_err_set(err, AS_ERR_INPUT, "%s:%d: expected 10 tab-separated fields, found %d", st->name, lineno,
                          tabs + 1);
    const char *q = p, *e = p + n;
    for (int i = 0; i < 10; i++) {
        const char *tab = i < 9 ? memchr(q, '\t', (size_t)(e - q)) : e;
        f[i] = q;
        fl[i] = (size_t)(tab - q);
        q = tab + 1;
    }
    for (int i = 0; i < 10; i++)
        if (fl[i] == 0) return as_err_set(err, AS_ERR_INPUT, "%s:%d: field %d is empty", st->name, lineno, i + 1);
    if (!st->first_line) st->first_line = lineno;
    const char *dash = memchr(f[0], '-', fl[0]), *dot = memchr(f[0], '.', fl[0]);
    if (dot) {
        if (parse_uint(f[0], (size_t)(dot - f[0])) < 0 || parse_uint(dot + 1, fl[0] - (size_t)(dot - f[0]) - 1) < 1)
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: bad ID '%s'", st->name, lineno, QUOTE(f[0], fl[0]));
        return AS_OK; /* empty node of the enhanced graph */
    }
    if (dash) {
        long a = parse_uint(f[0], (size_t)(dash - f[0])), b = parse_uint(dash + 1, fl[0] - (size_t)(dash - f[0]) - 1);
        if (a < 1 || b <= a || a != st->nw + 1 || b > CU_MAX_WORDS)
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: bad multi-word token range '%s' (next word is %d)", st->name,
                              lineno, QUOTE(f[0], fl[0]), st->nw + 1);
        if (st->nm && st->m[st->nm - 1].b >= a)
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: overlapping multi-word token range", st->name, lineno);
        if (st->nm == st->capm) {
            int nc = st->capm ? st->capm * 2 : 16;
            cu_mwt *nm = realloc(st->m, (size_t)nc * sizeof *nm);
            if (!nm) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            st->m = nm;
            st->capm = nc;
        }
        cu_mwt *m = &st->m[st->nm];
        m->a = (int)a;
        m->b = (int)b;
        m->line = lineno;
        m->no_space = misc_no_space(f[9], fl[9]);
        if (!(m->form = dup_n(f[1], fl[1]))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        st->nm++;
        return AS_OK;
    }
    long id = parse_uint(f[0], fl[0]);
    if (id != st->nw + 1)
        return as_err_set(err, AS_ERR_INPUT, "%s:%d: ID '%s' out of sequence (expected %d)", st->name, lineno,
                          QUOTE(f[0], fl[0]), st->nw + 1);
    if (id > CU_MAX_WORDS)
        return as_err_set(err, AS_ERR_INPUT, "%s:%d: more than %d words in a sentence", st->name, lineno, CU_MAX_WORDS);
    long head = parse_uint(f[6], fl[6]);
    if (head < 0)
        return as_err_set(err, AS_ERR_INPUT, "%s:%d: HEAD '%s' is not a word index", st->name, lineno, QUOTE(f[6], fl[6]));
    if (head == id) return as_err_set(err, AS_ERR_INPUT, "%s:%d: word %ld is its own HEAD", st->name, lineno, id);
    if (fl[7] == 1 && f[7][0] == '_') return as_err_set(err, AS_ERR_INPUT, "%s:%d: DEPREL is '_'", st->name, lineno);
    if (st->nw == st->capw) {
        int nc = st->capw ? st->capw * 2 : 64;
        cu_word *nw = realloc(st->w, (size_t)nc * sizeof *nw);
        if (!nw) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        st->w = nw;
        int *ns = realloc(st->no_space, (size_t)nc * sizeof *ns);
        if (!ns) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        st->no_space = ns;
        st->capw = nc;
    }
    cu_word *w = &st->w[st->nw];
    memset(w, 0, sizeof *w);
    w->form = dup_n(f[1], fl[1]);
    w->deprel = dup_n(f[7], fl[7]);
    w->head = (int)head - 1;
    w->start = w->end = -1;
    w->line = lineno;
    st->no_space[st->nw] = misc_no_space(f[9], fl[9]);
    st->nw++;
    if (!w->form || !w->deprel) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    return AS_OK;
}

as_status cu_parse(const char *name, const char *buf, size_t len, int limit, cu_corpus *out, as_error *err) {
    memset(out, 0, sizeof *out);
    cu_state st = {.name = name};
    int cap = 0, lineno = 0;
    as_status s = AS_OK;
    size_t off = 0;
    while (off < len && (limit <= 0 || out->n < limit)) {
        const char *p = buf + off;
        const char *nl = memchr(p, '\n', len - off);
        size_t n = nl ? (size_t)(nl - p) : len - off;
        off += n + (nl ? 1 : 0);
        lineno++;
        if (n > CU_MAX_LINE) {
            s = as_err_set(err, AS_ERR_INPUT, "%s:%d: line longer than %d bytes", name, lineno, CU_MAX_LINE);
            goto cleanup;
        }
        if (n && p[n - 1] == '\r') n--;
        if (memchr(p, 0, n)) {
            s = as_err_set(err, AS_ERR_INPUT, "%s:%d: NUL byte", name, lineno);
            goto cleanup;
        }
        if (n == 0) {
            if ((s = finish_sentence(&st, out, &cap, err))) goto cleanup;
            continue;
        }
        if (p[0] == '#') {
            if (!st.first_line) st.first_line = lineno;
            const char *k1 = "# text =", *k2 = "# sent_id =";
            char **dst = NULL;
            size_t kl = 0;
            if (n >= strlen(k1) && !memcmp(p, k1, strlen(k1))) dst = &st.text, kl = strlen(k1);
            else if (n >= strlen(k2) && !memcmp(p, k2, strlen(k2))) dst = &st.sent_id, kl = strlen(k2);
            if (dst) {
                const char *v = p + kl;
                size_t vl = n - kl;
                while (vl && *v == ' ') v++, vl--;
                free(*dst);
                if (!(*dst = dup_n(v, vl))) {
                    s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
                    goto cleanup;
                }
            }
            continue;
        }
        if ((s = parse_word_line(&st, p, n, lineno, err))) goto cleanup;
    }
    if (limit <= 0 || out->n < limit) s = finish_sentence(&st, out, &cap, err);
cleanup:
    state_free(&st);
    return s;
}

as_status cu_read(const char *path, int limit, cu_corpus *out, as_error *err) {
    memset(out, 0, sizeof *out);
    char *buf = NULL;
    size_t len = 0;
    as_status s = as_read_file(path, CU_MAX_FILE_BYTES, &buf, &len, err);
    if (s) return s;
    s = cu_parse(path, buf, len, limit, out, err);
    free(buf);
    return s;
}

void cu_token_words(const cu_sentence *s, const int32_t *start, int T, int *word_of_token) {
    for (int t = 0; t < T; t++) {
        word_of_token[t] = -1;
        if (start[t] < 0) continue;
        for (int w = 0; w < s->n_words; w++)
            if (s->words[w].start >= 0 && start[t] >= s->words[w].start && start[t] < s->words[w].end) {
                word_of_token[t] = w;
                break;
            }
    }
}
