/* imports.c — the attention of imported runs, read from their import folders
 * (see imports.h and docs/views.md, "Imported runs").
 * What it does not: match runs to folders by path (paths move; the digest does not),
 * cache the arrays (a BERT-base sentence is ~2 MB and read in a few ms), or write.
 */
#include "imports.h"
#include "attnscope/analysis.h" /* an_import_digest */


#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The corpus digest `attnscope import` stored for dir, with --import-dir in messages. */
static as_status json_digest(const char *dir, char hex[65], as_error *err) {
    as_status rc = an_import_digest(dir, hex, err);
    if (rc) as_err_prefix(err, "--import-dir");
    return rc;
}

as_status srv_imports_init(const char *const *specs, int n, srv_imports *out, as_error *err) {
    memset(out, 0, sizeof *out);
    if (n <= 0) return AS_OK;
    if (n > SRV_MAX_IMPORT_DIRS)
        return as_err_set(err, AS_ERR_INPUT, "serve: at most %d --import-dir options", SRV_MAX_IMPORT_DIRS);
    out->dirs = calloc((size_t)n, sizeof *out->dirs);
    if (!out->dirs) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int i = 0; i < n; i++) {
        srv_import *im = &out->dirs[i];
        const char *s = specs[i], *dir = s;
        size_t digits = strspn(s, "0123456789");
        if (digits > 0 && s[digits] == '=') { /* RUN=DIR */
            if (digits > 18) return as_err_set(err, AS_ERR_INPUT, "--import-dir %s: run id too long", s);
            for (size_t k = 0; k < digits; k++) im->run = im->run * 10 + (s[k] - '0');
            if (im->run <= 0) return as_err_set(err, AS_ERR_INPUT, "--import-dir %s: run ids start at 1", s);
            dir = s + digits + 1;
        }
        struct stat st;
        if (!*dir || stat(dir, &st) || !S_ISDIR(st.st_mode))
            return as_err_set(err, AS_ERR_INPUT, "--import-dir %s: not a folder", dir);
        if (strlen(dir) >= sizeof im->dir) return as_err_set(err, AS_ERR_INPUT, "--import-dir %s: path too long", dir);
        snprintf(im->dir, sizeof im->dir, "%s", dir);
        out->n++;
        as_status rc = json_digest(dir, im->digest, err);
        if (rc) return rc;
    }
    return AS_OK;
}

void srv_imports_free(srv_imports *im) {
    if (!im) return;
    free(im->dirs);
    memset(im, 0, sizeof *im);
}

int srv_imports_find(const srv_imports *im, int64_t run, const char *corpus_digest) {
    for (int i = 0; i < im->n; i++)
        if (im->dirs[i].run == run) return i;
    for (int i = 0; corpus_digest && i < im->n; i++)
        if (!im->dirs[i].run && !strcmp(im->dirs[i].digest, corpus_digest)) return i;
    return -1;
}

as_status srv_imports_read(const srv_import *dir, const char *source, int L, int H, int T, npy_array *out,
                           as_error *err) {
    memset(out, 0, sizeof *out);
    size_t sl = source ? strlen(source) : 0;
    /* the stored source must be a plain NNNN.json name: never a path out of the folder */
    if (sl <= 5 || sl > 512 || strcmp(source + sl - 5, ".json") || strchr(source, '/') || source[0] == '.')
        return as_err_set(err, AS_ERR_INPUT, "import folder %s: stored source '%s' is not a NNNN.json file name",
                          dir->dir, source ? source : "(null)");
    if (L < 1 || L > AS_MAX_LAYERS || H < 1 || H > AS_MAX_HEADS || T < 1 || T > AS_MAX_POSITIONS)
        return as_err_set(err, AS_ERR_INPUT, "import folder %s: run has %d layers, %d heads, %d tokens", dir->dir, L, H, T);
    char name[600], path[2048];
    snprintf(name, sizeof name, "%.*s.attention.npy", (int)(sl - 5), source);
    as_status rc = as_path_join(path, sizeof path, dir->dir, name, err);
    if (rc) return rc;
    /* size first, so a stray huge file is never read: header (<= NPYR_MAX_HEADER + 12) + data */
    const uint64_t want = (uint64_t)L * (uint64_t)H * (uint64_t)T * (uint64_t)T;
    struct stat st;
    if (stat(path, &st) || !S_ISREG(st.st_mode))
        return as_err_set(err, AS_ERR_INPUT, "%s: missing (the import folder does not hold this sentence)", path);
    if ((uint64_t)st.st_size < 4 * want || (uint64_t)st.st_size > 4 * want + NPYR_MAX_HEADER + 12)
        return as_err_set(err, AS_ERR_INPUT, "%s: %lld bytes, not a float32 [%d, %d, %d, %d] array", path,
                          (long long)st.st_size, L, H, T, T);
    if ((rc = npy_read_f32(path, out, err))) return rc;
    if (out->ndim != 4 || out->shape[0] != L || out->shape[1] != H || out->shape[2] != T || out->shape[3] != T) {
        npy_array_free(out);
        return as_err_set(err, AS_ERR_INPUT, "%s: attention shape must be [%d, %d, %d, %d] (layers, heads, tokens, tokens)",
                          path, L, H, T, T);
    }
    for (size_t i = 0; i < out->n; i++)
        if (!isfinite(out->data[i]) || out->data[i] < 0.0f) {
            npy_array_free(out);
            return as_err_set(err, AS_ERR_INPUT, "%s: attention entry %zu is negative or not finite", path, i);
        }
    return AS_OK;
}
