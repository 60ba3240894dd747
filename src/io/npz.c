/* npz.c — writes .npy files and .npz archives that numpy.load reads.
 *
 * What it does: formats the .npy v1.0 header (NEP 1, numpy/lib/format.py: magic
 * "\x93NUMPY", version 1.0, u16 header length, a Python dict literal padded with
 * spaces and ended with '\n' so the data starts on a 64-byte boundary) and writes
 * .npz files as uncompressed (STORED) ZIP archives of name.npy entries, with local
 * headers, a central directory and the end record, switching to ZIP64 fields when a
 * size or offset does not fit 32 bits (PKWARE APPNOTE.TXT 6.3, sections 4.3 and
 * 4.5.3). Each array is streamed straight to the file: its CRC-32 (zlib's crc32_z) is
 * computed over the caller's buffer first, so no seeking back and no copy of the
 * archive in memory.
 * What it does not: read npy/npz, compress, or write big-endian / Fortran-order data.
 *
 * Why the ZIP container is written here and not by Debian's libzip (1.7) or minizip
 * (1.1), measured with `bench/npz_zip_libs.sh build-sch` (bench/npz_zip_libs.c; best of
 * 3 runs, 2-core AMD EPYC, shared disk) on a BERT-base capture at 512 tokens (379 MB of
 * float32: attentions, scores, q/k/v, hidden states), STORED:
 *   own 0.37 s, peak RSS 364 MB (the arrays themselves; each is written at once);
 *   minizip 0.83 s, 364 MB (streams too, through its 64 KiB buffer);
 *   libzip 0.86 s, 366 MB with a callback source that reads the caller's arrays, which
 *   must then all stay alive until zip_close (it writes every entry there, into a
 *   temporary file it renames); 2.29 s and 728 MB with zip_source_buffer copies.
 * Both libraries write archives numpy.load reads, and minizip a valid 5.4 GB ZIP64 one
 * (BIG=1: 42 s against 28 s here). What they cannot do is npz_force_zip64: ZIP64 fields
 * in every local and central header, saturated end-record fields, a ZIP64 end record
 * and locator, on a small file. minizip writes the ZIP64 end record only when the
 * central directory starts at or beyond 4 GiB or holds 65,535 entries (zipClose), and
 * libzip forces ZIP64 only through an internal flag (ZIP_FL_FORCE_ZIP64, zipint.h).
 * tests/unit/test_npz.c pins that layout and test_npz_read.c reads it to test the
 * reader's ZIP64 path; with a library each run of them would write 4 GiB or more. What
 * is left here is the formatting of the headers; the checksum is zlib's (crc32_z, which
 * replaced a slicing-by-8 table here: 2646 / 4257 / 2955 MB/s against 1906 / 2472 /
 * 2197 MB/s, 256 MiB in 1 MiB calls, best of 5, three runs on the 2-core AMD EPYC).
 */
#include "io/npz.h"

#include <errno.h>
#include <string.h>
#include <zlib.h>

#define NPZ_MAX_NAME 200
#define NPY_MAX_DIMS 32
#define ZIP_U32_MAX 0xFFFFFFFFu
#define ZIP_DOS_DATE 0x0021 /* 1980-01-01: fixed, so archives are reproducible */

/* ---- CRC-32 of the entries: zlib's (IEEE 802.3, the one ZIP uses) ---------------- */

/* Continues crc (0 to start) over n bytes of p. */
static uint32_t crc32_update(uint32_t crc, const void *p, size_t n) { return (uint32_t)crc32_z(crc, p, n); }

/* ---- little-endian byte buffer ---------------------------------------------------- */

typedef struct {
    uint8_t b[512];
    size_t n;
} le_buf;

static void put16(le_buf *o, uint32_t v) {
    o->b[o->n++] = (uint8_t)v;
    o->b[o->n++] = (uint8_t)(v >> 8);
}
static void put32(le_buf *o, uint32_t v) {
    put16(o, v & 0xffff);
    put16(o, v >> 16);
}
static void put64(le_buf *o, uint64_t v) {
    put32(o, (uint32_t)v);
    put32(o, (uint32_t)(v >> 32));
}
static void put_bytes(le_buf *o, const void *p, size_t n) {
    memcpy(o->b + o->n, p, n);
    o->n += n;
}

static int host_is_little_endian(void) {
    uint16_t x = 1;
    uint8_t b;
    memcpy(&b, &x, 1);
    return b == 1;
}

/* ---- .npy header ------------------------------------------------------------------ */

static size_t npy_elem_size(npy_type t) { return t == NPY_F16 ? 2 : 4; }

static const char *npy_descr(npy_type t) {
    switch (t) {
    case NPY_F32: return "<f4";
    case NPY_I32: return "<i4";
    case NPY_F16: return "<f2";
    }
    return NULL;
}

/* Validates type/shape and computes the data size in *nbytes. what names the
 * file or array for messages. */
static as_status npy_check(const char *what, const char *descr, size_t elem, const void *data,
                           int ndim, const int64_t *shape, size_t *nbytes, as_error *err) {
    if (!descr) return as_err_set(err, AS_ERR_INPUT, "%s: unknown npy type", what);
    if (ndim < 0 || ndim > NPY_MAX_DIMS || (ndim > 0 && !shape))
        return as_err_set(err, AS_ERR_INPUT, "%s: ndim %d out of range [0, %d]", what, ndim,
                          NPY_MAX_DIMS);
    size_t n = elem;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (uint64_t)shape[i] > SIZE_MAX ||
            (shape[i] != 0 && n > SIZE_MAX / (size_t)shape[i]))
            return as_err_set(err, AS_ERR_INPUT, "%s: bad shape entry %d (%lld)", what, i,
                              (long long)shape[i]);
        n *= (size_t)shape[i];
    }
    if (n > 0 && !data) return as_err_set(err, AS_ERR_INPUT, "%s: data is NULL", what);
    *nbytes = n;
    return AS_OK;
}

/* Writes magic + version + header length + padded dict into buf (cap >= 2048);
 * returns the total length, a multiple of 64. */
static size_t npy_header(const char *descr, int ndim, const int64_t *shape, char *buf, size_t cap) {
    char dict[1536];
    char dims[1200];
    size_t d = 0;
    dims[d++] = '(';
    for (int i = 0; i < ndim; i++)
        d += (size_t)snprintf(dims + d, sizeof dims - d, i ? ", %lld" : "%lld",
                              (long long)shape[i]);
    if (ndim == 1) dims[d++] = ',';
    dims[d++] = ')';
    dims[d] = 0;
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      descr, dims);
    ASSERT(dl > 0 && (size_t)dl < sizeof dict);
    size_t pad = (64 - (10 + (size_t)dl + 1) % 64) % 64;
    size_t hlen = (size_t)dl + pad + 1;
    ASSERT(10 + hlen <= cap && hlen <= 0xffff);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    memcpy(buf + 10, dict, (size_t)dl);
    memset(buf + 10 + dl, ' ', pad);
    buf[10 + hlen - 1] = '\n';
    return 10 + hlen;
}

as_status npy_write(const char *path, npy_type type, const void *data, int ndim,
                    const int64_t *shape, as_error *err) {
    char hdr[2048];
    size_t nbytes;
    as_status rc = npy_check(path, npy_descr(type), npy_elem_size(type), data, ndim, shape, &nbytes, err);
    if (rc != AS_OK) return rc;
    if (!host_is_little_endian())
        return as_err_set(err, AS_ERR_INTERNAL, "%s: big-endian hosts are not supported", path);
    size_t hl = npy_header(npy_descr(type), ndim, shape, hdr, sizeof hdr);
    FILE *f = fopen(path, "wb");
    if (!f) return as_err_set(err, AS_ERR_INPUT, "%s: cannot create: %s", path, strerror(errno));
    int ok = fwrite(hdr, 1, hl, f) == hl && (nbytes == 0 || fwrite(data, 1, nbytes, f) == nbytes);
    if (fclose(f) != 0) ok = 0;
    if (!ok) return as_err_set(err, AS_ERR_INTERNAL, "%s: write failed: %s", path, strerror(errno));
    return AS_OK;
}

/* ---- .npz writer ------------------------------------------------------------------- */

typedef struct {
    char name[NPZ_MAX_NAME + 5]; /* "name.npy" */
    uint64_t offset;             /* of the local file header */
    uint64_t size;               /* stored == uncompressed bytes */
    uint32_t crc;
    int zip64;                   /* local header carries a ZIP64 extra field */
} npz_entry;

struct npz_writer {
    FILE *f;
    char *path;
    uint64_t pos;                 /* bytes written so far */
    int n;
    npz_entry e[NPZ_MAX_ARRAYS];
    int failed;                   /* a write failed: npz_close reports it */
    int force_zip64;
};

static int name_is_ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return 0;
    return 1;
}

static int w_write(npz_writer *w, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, w->f) != n) {
        w->failed = 1;
        return 0;
    }
    w->pos += n;
    return 1;
}

as_status npz_open(const char *path, npz_writer **out, as_error *err) {
    *out = NULL;
    if (!host_is_little_endian())
        return as_err_set(err, AS_ERR_INTERNAL, "%s: big-endian hosts are not supported", path);
    npz_writer *w = as_calloc(1, sizeof *w);
    if (!w || !(w->path = as_strdup(path))) {
        free(w);
        return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
    }
    w->f = fopen(path, "wb");
    if (!w->f) {
        as_status rc = as_err_set(err, AS_ERR_INPUT, "%s: cannot create: %s", path, strerror(errno));
        free(w->path);
        free(w);
        return rc;
    }
    *out = w;
    return AS_OK;
}

void npz_force_zip64(npz_writer *w, int on) {
    if (w) w->force_zip64 = on;
}

/* npz_add with an explicit numpy descr ("<f4", "<U12") and element size. */
static as_status npz_add_raw(npz_writer *w, const char *name, const char *descr, size_t elem,
                             const void *data, int ndim, const int64_t *shape, as_error *err) {
    ASSERT(w && name);
    if (w->failed)
        return as_err_set(err, AS_ERR_INTERNAL, "%s: an earlier write failed", w->path);
    size_t nl = strlen(name);
    if (nl == 0 || nl > NPZ_MAX_NAME || strchr(name, '/') || strchr(name, '\\'))
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: array name '%.*s' must be 1..%d characters without '/' or '\\'",
                          w->path, NPZ_MAX_NAME, name, NPZ_MAX_NAME);
    if (w->n >= NPZ_MAX_ARRAYS)
        return as_err_set(err, AS_ERR_INPUT, "%s: more than %d arrays", w->path, NPZ_MAX_ARRAYS);
    npz_entry *e = &w->e[w->n];
    snprintf(e->name, sizeof e->name, "%s.npy", name);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, e->name) == 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: array name '%s' repeated", w->path, name);
    size_t nbytes;
    char what[NPZ_MAX_NAME + 8];
    snprintf(what, sizeof what, "array '%s'", name);
    as_status rc = npy_check(what, descr, elem, data, ndim, shape, &nbytes, err);
    if (rc != AS_OK) return rc;

    char hdr[2048];
    size_t hl = npy_header(descr, ndim, shape, hdr, sizeof hdr);
    if (nbytes > UINT64_MAX - hl)
        return as_err_set(err, AS_ERR_INPUT, "%s: array '%s' too large", w->path, name);
    e->size = (uint64_t)hl + nbytes;
    e->crc = crc32_update(crc32_update(0, hdr, hl), data, nbytes);
    e->offset = w->pos;
    e->zip64 = w->force_zip64 || e->size >= ZIP_U32_MAX;

    le_buf lh = {.n = 0};
    size_t enl = strlen(e->name);
    put32(&lh, 0x04034b50);
    put16(&lh, e->zip64 ? 45 : 20);              /* version needed */
    put16(&lh, name_is_ascii(e->name) ? 0 : 0x800); /* bit 11: UTF-8 name */
    put16(&lh, 0);                               /* method: stored */
    put16(&lh, 0);                               /* time */
    put16(&lh, ZIP_DOS_DATE);
    put32(&lh, e->crc);
    put32(&lh, e->zip64 ? ZIP_U32_MAX : (uint32_t)e->size); /* compressed */
    put32(&lh, e->zip64 ? ZIP_U32_MAX : (uint32_t)e->size); /* uncompressed */
    put16(&lh, (uint32_t)enl);
    put16(&lh, e->zip64 ? 20 : 0);
    put_bytes(&lh, e->name, enl);
    if (e->zip64) {
        put16(&lh, 0x0001);
        put16(&lh, 16);
        put64(&lh, e->size); /* uncompressed, then compressed (APPNOTE 4.5.3) */
        put64(&lh, e->size);
    }
    if (!w_write(w, lh.b, lh.n) || !w_write(w, hdr, hl) || !w_write(w, data, nbytes))
        return as_err_set(err, AS_ERR_INTERNAL, "%s: write failed: %s", w->path, strerror(errno));
    w->n++;
    return AS_OK;
}

as_status npz_add(npz_writer *w, const char *name, npy_type type, const void *data, int ndim,
                  const int64_t *shape, as_error *err) {
    return npz_add_raw(w, name, npy_descr(type), npy_elem_size(type), data, ndim, shape, err);
}

/* Decodes one UTF-8 sequence at s (n bytes left) into *cp; returns its length. An
 * ill-formed sequence's maximal subpart decodes as one U+FFFD (as_utf8_seq_len). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    int len = as_utf8_seq_len(s, n);
    if (!len) {
        *cp = 0xfffd;
        return as_utf8_bad_len(s, n);
    }
    static const unsigned char mask[5] = {0, 0x7f, 0x1f, 0x0f, 0x07};
    uint32_t v = s[0] & mask[len];
    for (int i = 1; i < len; i++) v = (v << 6) | (s[i] & 0x3fu);
    *cp = v;
    return (size_t)len;
}

as_status npz_add_strings(npz_writer *w, const char *name, const char *const *strs, int n,
                          as_error *err) {
    ASSERT(w && name && n >= 0);
    size_t width = 1; /* numpy's '<U0' is awkward; at least one code point */
    for (int i = 0; i < n; i++) {
        const unsigned char *p = (const unsigned char *)(strs[i] ? strs[i] : "");
        size_t len = strlen((const char *)p), k = 0;
        for (size_t at = 0; at < len; k++) {
            uint32_t cp;
            at += utf8_decode(p + at, len - at, &cp);
        }
        if (k > width) width = k;
    }
    if (width > NPZ_MAX_STRING)
        return as_err_set(err, AS_ERR_INPUT, "%s: a string of array '%s' is over %d characters", w->path,
                          name, NPZ_MAX_STRING);
    uint32_t *buf = as_calloc((size_t)(n ? n : 1) * width, sizeof(uint32_t));
    if (!buf) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int i = 0; i < n; i++) {
        const unsigned char *p = (const unsigned char *)(strs[i] ? strs[i] : "");
        size_t len = strlen((const char *)p), k = 0;
        for (size_t at = 0; at < len; k++) {
            uint32_t cp;
            at += utf8_decode(p + at, len - at, &cp);
            buf[(size_t)i * width + k] = cp; /* little-endian host checked at npz_open */
        }
    }
    char descr[24];
    snprintf(descr, sizeof descr, "<U%zu", width);
    int64_t shape[1] = {n};
    as_status rc = npz_add_raw(w, name, descr, 4 * width, buf, 1, shape, err);
    free(buf);
    return rc;
}

void npz_abort(npz_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    free(w->path);
    free(w);
}

/* Writes the central directory entry for e. */
static int write_cd_entry(npz_writer *w, const npz_entry *e) {
    int big_size = w->force_zip64 || e->size >= ZIP_U32_MAX;
    int big_off = w->force_zip64 || e->offset >= ZIP_U32_MAX;
    size_t enl = strlen(e->name);
    uint32_t extra = (uint32_t)((big_size ? 16 : 0) + (big_off ? 8 : 0));
    le_buf b = {.n = 0};
    put32(&b, 0x02014b50);
    put16(&b, (3u << 8) | 45); /* made by: unix, 4.5 */
    put16(&b, (big_size || big_off || e->zip64) ? 45 : 20);
    put16(&b, name_is_ascii(e->name) ? 0 : 0x800);
    put16(&b, 0);
    put16(&b, 0);
    put16(&b, ZIP_DOS_DATE);
    put32(&b, e->crc);
    put32(&b, big_size ? ZIP_U32_MAX : (uint32_t)e->size);
    put32(&b, big_size ? ZIP_U32_MAX : (uint32_t)e->size);
    put16(&b, (uint32_t)enl);
    put16(&b, extra ? extra + 4 : 0);
    put16(&b, 0);                 /* comment */
    put16(&b, 0);                 /* disk */
    put16(&b, 0);                 /* internal attributes */
    put32(&b, 0100644u << 16);    /* external: regular file rw-r--r-- */
    put32(&b, big_off ? ZIP_U32_MAX : (uint32_t)e->offset);
    put_bytes(&b, e->name, enl);
    if (extra) {
        put16(&b, 0x0001);
        put16(&b, extra);
        if (big_size) {
            put64(&b, e->size);
            put64(&b, e->size);
        }
        if (big_off) put64(&b, e->offset);
    }
    return w_write(w, b.b, b.n);
}

/* Writes the central directory and the end records (ZIP64 ones when needed or forced)
 * and closes the file. Returns 0 on a write failure. */
static int write_directory(npz_writer *w) {
    uint64_t cd_off = w->pos;
    for (int i = 0; i < w->n; i++)
        if (!write_cd_entry(w, &w->e[i])) return 0;
    uint64_t cd_size = w->pos - cd_off;
    int z64 = w->force_zip64 || cd_off >= ZIP_U32_MAX || cd_size >= ZIP_U32_MAX;
    le_buf b = {.n = 0};
    if (z64) {
        uint64_t z64_off = w->pos;
        put32(&b, 0x06064b50); /* ZIP64 end of central directory record */
        put64(&b, 44);
        put16(&b, (3u << 8) | 45);
        put16(&b, 45);
        put32(&b, 0);
        put32(&b, 0);
        put64(&b, (uint64_t)w->n);
        put64(&b, (uint64_t)w->n);
        put64(&b, cd_size);
        put64(&b, cd_off);
        put32(&b, 0x07064b50); /* ZIP64 end of central directory locator */
        put32(&b, 0);
        put64(&b, z64_off);
        put32(&b, 1);
    }
    put32(&b, 0x06054b50);
    put16(&b, 0);
    put16(&b, 0);
    put16(&b, (uint32_t)w->n);
    put16(&b, (uint32_t)w->n);
    put32(&b, z64 ? ZIP_U32_MAX : (uint32_t)cd_size);
    put32(&b, z64 ? ZIP_U32_MAX : (uint32_t)cd_off);
    put16(&b, 0);
    if (!w_write(w, b.b, b.n)) return 0;
    int closed = fclose(w->f);
    w->f = NULL;
    return closed == 0;
}

as_status npz_close(npz_writer *w, as_error *err) {
    ASSERT(w);
    as_status rc = AS_OK;
    if (w->failed)
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: an earlier write failed", w->path);
    else if (!write_directory(w))
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: write failed: %s", w->path, strerror(errno));
    npz_abort(w);
    return rc;
}
