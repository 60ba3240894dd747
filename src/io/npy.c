/* npy.c — validating float32 .npy reader (see npy.h). The format: NEP 1,
 * "A Simple File Format for NumPy Arrays", and numpy/lib/format.py (read_array_header).
 */
#include "io/npy.h"

#include "core/file.h"

#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "npy.c copies little-endian float32 data as is: big-endian hosts need a byte swap"
#endif

#define NPYR_MAX_FILE (((size_t)NPYR_MAX_ELEMS) * 4 + NPYR_MAX_HEADER + 16)

void npy_array_free(npy_array *a) {
    if (!a) return;
    free(a->data);
    memset(a, 0, sizeof *a);
}

typedef struct {
    const char *p, *e;
} cur;

static void ws(cur *c) {
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n')) c->p++;
}

static int eat(cur *c, char ch) {
    ws(c);
    if (c->p < c->e && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string literal without escapes into buf. */
static int str_lit(cur *c, char *buf, size_t cap) {
    ws(c);
    if (c->p >= c->e || (*c->p != '\'' && *c->p != '"')) return -1;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->e && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= cap) return -1;
        buf[n++] = *c->p++;
    }
    if (c->p >= c->e) return -1;
    c->p++;
    buf[n] = 0;
    return 0;
}

static int word(cur *c, const char *w) {
    ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->e - c->p) >= n && !memcmp(c->p, w, n)) {
        c->p += n;
        return 1;
    }
    return 0;
}

/* The header parser: descr must be '<f4' when descr_out is NULL, else it is copied out
 * as written (the caller checks it). */
static as_status parse_header(const char *name, const uint8_t *buf, size_t len, npy_array *out, size_t *data_off,
                              char *descr_out, as_error *err) {
    memset(out, 0, sizeof *out);
    *data_off = 0;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6))
        return as_err_set(err, AS_ERR_INPUT, "%s: not a .npy file (bad magic)", name);
    int major = buf[6], minor = buf[7];
    size_t hl, off;
    if (major == 1 && minor == 0) {
        hl = (size_t)buf[8] | (size_t)buf[9] << 8;
        off = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (len < 12) return as_err_set(err, AS_ERR_INPUT, "%s: truncated .npy header", name);
        hl = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        off = 12;
    } else {
        return as_err_set(err, AS_ERR_INPUT, "%s: unsupported .npy version %d.%d", name, major, minor);
    }
    if (hl > NPYR_MAX_HEADER)
        return as_err_set(err, AS_ERR_INPUT, "%s: .npy header of %zu bytes exceeds %d", name, hl, NPYR_MAX_HEADER);
    if (hl > len - off) return as_err_set(err, AS_ERR_INPUT, "%s: .npy header runs past the end of the file", name);
    cur c = {(const char *)buf + off, (const char *)buf + off + hl};
    if (hl == 0 || c.e[-1] != '\n') return as_err_set(err, AS_ERR_INPUT, "%s: .npy header does not end with a newline", name);
    if (memchr(c.p, 0, hl)) return as_err_set(err, AS_ERR_INPUT, "%s: NUL byte in the .npy header", name);
    int have_descr = 0, have_fo = 0, have_shape = 0;
    if (!eat(&c, '{')) return as_err_set(err, AS_ERR_INPUT, "%s: .npy header is not a dict", name);
    while (!eat(&c, '}')) {
        char key[32], val[32];
        if (str_lit(&c, key, sizeof key) || !eat(&c, ':'))
            return as_err_set(err, AS_ERR_INPUT, "%s: malformed .npy header dict", name);
        if (!strcmp(key, "descr")) {
            if (have_descr++) return as_err_set(err, AS_ERR_INPUT, "%s: repeated key 'descr' in .npy header", name);
            if (str_lit(&c, val, sizeof val)) return as_err_set(err, AS_ERR_INPUT, "%s: malformed 'descr' in .npy header", name);
            if (descr_out) snprintf(descr_out, NPYR_MAX_DESCR, "%s", val);
            else if (strcmp(val, "<f4"))
                return as_err_set(err, AS_ERR_INPUT, "%s: dtype '%s' is not supported (expected '<f4', float32 little-endian)", name, val);
        } else if (!strcmp(key, "fortran_order")) {
            if (have_fo++) return as_err_set(err, AS_ERR_INPUT, "%s: repeated key 'fortran_order' in .npy header", name);
            if (word(&c, "True")) return as_err_set(err, AS_ERR_INPUT, "%s: Fortran-order arrays are not supported", name);
            if (!word(&c, "False")) return as_err_set(err, AS_ERR_INPUT, "%s: malformed 'fortran_order' in .npy header", name);
        } else if (!strcmp(key, "shape")) {
            if (have_shape++) return as_err_set(err, AS_ERR_INPUT, "%s: repeated key 'shape' in .npy header", name);
            if (!eat(&c, '(')) return as_err_set(err, AS_ERR_INPUT, "%s: malformed 'shape' in .npy header", name);
            while (!eat(&c, ')')) {
                ws(&c);
                int64_t v = 0;
                int digits = 0;
                while (c.p < c.e && *c.p >= '0' && *c.p <= '9') {
                    v = v * 10 + (*c.p++ - '0');
                    if (++digits > 12) return as_err_set(err, AS_ERR_INPUT, "%s: dimension too large in .npy shape", name);
                }
                if (!digits) return as_err_set(err, AS_ERR_INPUT, "%s: malformed 'shape' in .npy header", name);
                if (out->ndim == NPYR_MAX_DIMS)
                    return as_err_set(err, AS_ERR_INPUT, "%s: more than %d dimensions in .npy shape", name, NPYR_MAX_DIMS);
                out->shape[out->ndim++] = v;
                if (!eat(&c, ',')) {
                    if (!eat(&c, ')')) return as_err_set(err, AS_ERR_INPUT, "%s: malformed 'shape' in .npy header", name);
                    break;
                }
            }
        } else {
            return as_err_set(err, AS_ERR_INPUT, "%s: unexpected key '%s' in .npy header", name, key);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}')) return as_err_set(err, AS_ERR_INPUT, "%s: malformed .npy header dict", name);
            break;
        }
    }
    ws(&c);
    if (c.p != c.e) return as_err_set(err, AS_ERR_INPUT, "%s: trailing bytes after the .npy header dict", name);
    if (!have_descr || !have_fo || !have_shape)
        return as_err_set(err, AS_ERR_INPUT, "%s: .npy header lacks '%s'", name,
                          !have_descr ? "descr" : !have_fo ? "fortran_order" : "shape");
    int64_t n = 1;
    for (int d = 0; d < out->ndim; d++) {
        if (out->shape[d] > NPYR_MAX_ELEMS || (out->shape[d] && n > NPYR_MAX_ELEMS / out->shape[d]))
            return as_err_set(err, AS_ERR_INPUT, "%s: .npy array has more than %lld elements", name, (long long)NPYR_MAX_ELEMS);
        n *= out->shape[d];
    }
    out->n = (size_t)n;
    *data_off = off + hl;
    return AS_OK;
}

as_status npy_parse_header(const char *name, const uint8_t *buf, size_t len, npy_array *out, size_t *data_off,
                           as_error *err) {
    return parse_header(name, buf, len, out, data_off, NULL, err);
}

as_status npy_parse_header_descr(const char *name, const uint8_t *buf, size_t len, npy_array *out,
                                 size_t *data_off, char descr[NPYR_MAX_DESCR], as_error *err) {
    descr[0] = 0;
    return parse_header(name, buf, len, out, data_off, descr, err);
}

size_t npy_descr_itemsize(const char *descr) {
    static const char *const fixed[] = {"<f4", "<f2", "<f8", "<i4", "<i8", "|i1", "|u1", "|b1", "<u4", "<u8", "<i2", "<u2"};
    static const size_t fsize[] = {4, 2, 8, 4, 8, 1, 1, 1, 4, 8, 2, 2};
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (!strcmp(descr, fixed[i])) return fsize[i];
    /* '<U n' (n UCS-4 code points) and '|S n' (n bytes): n decimal, 1..NPYR_MAX_STR */
    int ucs = !strncmp(descr, "<U", 2);
    if (!ucs && strncmp(descr, "|S", 2)) return 0;
    const char *d = descr + 2;
    size_t n = strspn(d, "0123456789");
    if (n == 0 || n > 6 || d[n] || d[0] == '0') return 0;
    long v = strtol(d, NULL, 10);
    if (v < 1 || v > NPYR_MAX_STR) return 0;
    return (size_t)v * (ucs ? 4u : 1u);
}

as_status npy_parse_f32(const char *name, const uint8_t *buf, size_t len, npy_array *out, as_error *err) {
    size_t data;
    as_status rc = npy_parse_header(name, buf, len, out, &data, err);
    if (rc) return rc;
    int64_t n = (int64_t)out->n;
    if ((uint64_t)(len - data) != (uint64_t)n * 4u)
        return as_err_set(err, AS_ERR_INPUT, "%s: .npy data is %zu bytes but the shape needs %lld", name, len - data,
                          (long long)n * 4);
    out->data = as_malloc_array(out->n ? out->n : 1, sizeof(float));
    if (!out->data) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    memcpy(out->data, buf + data, out->n * sizeof(float)); /* '<f4' on a little-endian host (#error above) */
    return AS_OK;
}

as_status npy_read_f32(const char *path, npy_array *out, as_error *err) {
    memset(out, 0, sizeof *out);
    char *buf = NULL;
    size_t len = 0;
    as_status s = as_read_file(path, NPYR_MAX_FILE, &buf, &len, err);
    if (s) return s;
    s = npy_parse_f32(path, (const uint8_t *)buf, len, out, err);
    if (s) npy_array_free(out);
    free(buf);
    return s;
}

as_status npy_read_header(const char *path, npy_array *out, as_error *err) {
    memset(out, 0, sizeof *out);
    FILE *f;
    uint64_t size;
    as_status rc = as_file_fopen_regular(path, NPYR_MAX_FILE, &f, &size, err);
    if (rc) return rc;
    uint8_t *buf = as_malloc(NPYR_MAX_PREFIX);
    if (!buf) {
        fclose(f);
        return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
    }
    size_t got = fread(buf, 1, NPYR_MAX_PREFIX, f);
    fclose(f);
    size_t off;
    rc = npy_parse_header(path, buf, got, out, &off, err);
    free(buf);
    if (rc) return rc;
    if (size < off || size - off != (uint64_t)out->n * 4u) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: .npy data is %llu bytes but the shape needs %llu", path,
                        (unsigned long long)(size < off ? 0 : size - off), (unsigned long long)out->n * 4u);
        memset(out, 0, sizeof *out);
    }
    return rc;
}
