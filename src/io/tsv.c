/* tsv.c — SST-2 TSV reader (see tsv.h). */
#include "io/tsv.h"

#include "core/file.h"

#include <string.h>

void tsv_corpus_free(tsv_corpus *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) free(c->rows[i].text);
    free(c->rows);
    c->rows = NULL;
    c->n = 0;
}

as_status tsv_parse_sst2(const char *name, const char *buf, size_t len, int limit, tsv_corpus *out,
                         as_error *err) {
    memset(out, 0, sizeof *out);
    int cap = 0, lineno = 0, header = 0;
    size_t off = 0;
    if (len >= 3 && !memcmp(buf, "\xEF\xBB\xBF", 3)) off = 3; /* a UTF-8 byte-order mark */
    if (len >= 2 && (!memcmp(buf, "\xFF\xFE", 2) || !memcmp(buf, "\xFE\xFF", 2)))
        return as_err_set(err, AS_ERR_INPUT, "%s: UTF-16 text (byte-order mark %s); expected UTF-8", name,
                          buf[0] == '\xFF' ? "FF FE" : "FE FF");
    char q[256];
    while (off < len && (limit <= 0 || out->n < limit)) {
        const char *p = buf + off;
        const char *nl = memchr(p, '\n', len - off);
        size_t n = nl ? (size_t)(nl - p) : len - off;
        off += n + (nl ? 1 : 0);
        lineno++;
        if (n > TSV_MAX_LINE)
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: line longer than %d bytes", name, lineno, TSV_MAX_LINE);
        if (n && p[n - 1] == '\r') n--;
        if (memchr(p, 0, n))
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: NUL byte (binary data, not a TSV text file)", name,
                              lineno);
        if (!header) {
            if (n != 14 || memcmp(p, "sentence\tlabel", 14))
                return as_err_set(err, AS_ERR_INPUT, "%s:%d: expected the header 'sentence<TAB>label', found '%s'",
                                  name, lineno, as_quote_bytes(q, 80, p, n));
            header = 1;
            continue;
        }
        if (n == 0) continue;
        const char *tab = memchr(p, '\t', n);
        if (!tab || memchr(tab + 1, '\t', n - (size_t)(tab - p) - 1))
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: expected 2 tab-separated fields (sentence, label)", name,
                              lineno);
        size_t sl = (size_t)(tab - p), ll = n - sl - 1;
        long lab = 0;
        if (ll == 0 || ll > 4) lab = -1;
        for (size_t i = 0; i < ll && lab >= 0; i++)
            lab = (tab[1 + i] >= '0' && tab[1 + i] <= '9') ? lab * 10 + (tab[1 + i] - '0') : -1;
        if (lab < 0 || lab >= AS_MAX_LABELS)
            return as_err_set(err, AS_ERR_INPUT, "%s:%d: label '%s' is not an integer in [0, %d)", name, lineno,
                              as_quote_bytes(q, 48, tab + 1, ll), AS_MAX_LABELS);
        int blank = 1;
        for (size_t i = 0; i < sl; i++)
            if (p[i] != ' ' && p[i] != '\t') blank = 0;
        if (blank) return as_err_set(err, AS_ERR_INPUT, "%s:%d: empty sentence", name, lineno);
        if (out->n == cap) {
            int nc = cap ? cap * 2 : 256;
            tsv_row *nr = realloc(out->rows, (size_t)nc * sizeof *nr);
            if (!nr) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            out->rows = nr;
            cap = nc;
        }
        tsv_row *r = &out->rows[out->n];
        if (!(r->text = as_malloc(sl + 1))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        memcpy(r->text, p, sl);
        r->text[sl] = 0;
        r->label = (int)lab;
        r->line = lineno;
        out->n++;
    }
    if (!header) return as_err_set(err, AS_ERR_INPUT, "%s: empty file (expected the header 'sentence<TAB>label')", name);
    return AS_OK;
}

as_status tsv_read_sst2(const char *path, int limit, tsv_corpus *out, as_error *err) {
    memset(out, 0, sizeof *out);
    char *buf = NULL;
    size_t len = 0;
    as_status s = as_read_file(path, TSV_MAX_FILE_BYTES, &buf, &len, err);
    if (s) return s;
    s = tsv_parse_sst2(path, buf, len, limit, out, err);
    free(buf);
    return s;
}
