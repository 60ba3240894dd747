/* npz_read.c — validating .npz (ZIP) reader for float32 arrays (see npz_read.h).
 * Format: PKWARE APPNOTE.TXT 6.3.x, sections 4.3.7 (local header), 4.3.12 (central
 * header), 4.3.14-4.3.16 (ZIP64 end record, locator, end record) and 4.5.3 (ZIP64
 * extra field); deflate is RFC 1951 through zlib's raw inflate, the checksum zlib's
 * crc32_z.
 *
 * Why the ZIP structure is parsed here and not by Debian's libzip (1.7) or minizip
 * (1.1), measured with `bench/npz_zip_libs.sh build-sch` (bench/npz_zip_libs.c): the
 * reader takes untrusted archives (`attnscope import`, fuzzed by tests/fuzz fuzz_import)
 * and must decide from the declared sizes alone, before anything is allocated or
 * inflated, whether the entry fits NPZR_MAX_ENTRY_BYTES and NPZR_MAX_RATIO and whether
 * its .npy header matches the declared size, then inflates straight from the mmap'd
 * file into the array. On hostile archives:
 *   - 1,000,000 entries: refused here at once from the end record (NPZR_MAX_ENTRIES),
 *     3 MB; libzip parses them all first (8.4-11.3 s, 293 MB), minizip walks them (2.2-
 *     4.3 s) before a name can be looked up;
 *   - a duplicated name, bytes after the end record, a local header naming another file:
 *     minizip accepts all three (unzLocateFile takes the first match; the last end-
 *     record signature found wins); libzip with ZIP_CHECKCONS refuses them, but as "File
 *     already exists" / "Zip archive inconsistent", which names neither entry nor field;
 *   - a 64 MiB entry deflated 1027:1: both libraries inflate it (NPZR_MAX_RATIO would be
 *     a check written around them, as here).
 * Speed is no reason either way: the 151 MB attentions entry of a BERT-base capture at
 * 512 tokens reads in 0.34 s here, 0.29 s with libzip, 0.48 s with minizip (best of 3;
 * peak RSS 291 MB here counts the mapped file's pages, 147 MB for the libraries' read
 * copies). Either library would keep these checks and their one-line errors
 * (tests/unit/test_npz_read.c has one archive for each) written around it, so it would
 * add a dependency without removing the parsing code.
 */
#include "io/npz_read.h"

#include "core/file.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#define SIG_LOCAL 0x04034b50u
#define SIG_CENTRAL 0x02014b50u
#define SIG_EOCD 0x06054b50u
#define SIG_EOCD64 0x06064b50u
#define SIG_LOC64 0x07064b50u
#define EOCD_LEN 22
#define LOC64_LEN 20
#define EOCD64_LEN 56
#define CEN_LEN 46
#define LOC_LEN 30
#define U16_SAT 0xFFFFu
#define U32_SAT 0xFFFFFFFFu

static uint32_t rd16(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t rd32(const uint8_t *p) { return rd16(p) | rd16(p + 2) << 16; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }

typedef struct {
    const uint8_t *name; /* points into the archive; not NUL-terminated */
    size_t name_len;
    uint32_t flags, method, crc;
    uint64_t csize, usize, offset;
} cen_entry;

/* Finds the ZIP64 extra block (id 0x0001) in extra[0..len) and fills the saturated
 * fields from it, in the APPNOTE 4.5.3 order. Returns 0, or -1 when the extra field is
 * malformed or lacks a needed value. */
static int zip64_extra(const uint8_t *extra, size_t len, uint64_t *usize, int need_u, uint64_t *csize, int need_c,
                       uint64_t *offset, int need_o) {
    size_t p = 0;
    int found = 0;
    while (p < len) {
        if (len - p < 4) return -1;
        uint32_t id = rd16(extra + p), sz = rd16(extra + p + 2);
        if (sz > len - p - 4) return -1;
        if (id == 0x0001 && !found) {
            found = 1;
            const uint8_t *b = extra + p + 4;
            size_t q = 0;
            if (need_u) {
                if (sz - q < 8) return -1;
                *usize = rd64(b + q);
                q += 8;
            }
            if (need_c) {
                if (sz - q < 8) return -1;
                *csize = rd64(b + q);
                q += 8;
            }
            if (need_o) {
                if (sz - q < 8) return -1;
                *offset = rd64(b + q);
                q += 8;
            }
        }
        p += 4 + (size_t)sz;
    }
    return (need_u || need_c || need_o) && !found ? -1 : 0;
}

#define BAD(...) return as_err_set(err, AS_ERR_INPUT, __VA_ARGS__)

/* Locates and checks the end records: *cd_off, *cd_size, *n_entries and *cd_end (the
 * first byte after which the central directory may not run). */
static as_status find_directory(const char *f, const uint8_t *buf, size_t len, uint64_t *cd_off, uint64_t *cd_size,
                                uint64_t *n_entries, uint64_t *cd_end, as_error *err) {
    if (len < EOCD_LEN) BAD("%s: not a .npz archive (%zu bytes, too short for a ZIP end record)", f, len);
    size_t eocd = 0;
    int found = 0;
    size_t lowest = len - EOCD_LEN > 0xFFFF ? len - EOCD_LEN - 0xFFFF : 0;
    for (size_t p = len - EOCD_LEN + 1; p-- > lowest;) {
        if (rd32(buf + p) == SIG_EOCD && rd16(buf + p + 20) == len - p - EOCD_LEN) {
            eocd = p;
            found = 1;
            break;
        }
    }
    if (!found) BAD("%s: not a .npz archive (no ZIP end-of-central-directory record; truncated?)", f);
    const uint8_t *e = buf + eocd;
    uint32_t disk = rd16(e + 4), cd_disk = rd16(e + 6), n_here = rd16(e + 8), n_all = rd16(e + 10);
    uint64_t size = rd32(e + 12), off = rd32(e + 16);
    *cd_end = eocd;
    if (n_here == U16_SAT || n_all == U16_SAT || size == U32_SAT || off == U32_SAT || disk == U16_SAT ||
        cd_disk == U16_SAT) {
        /* ZIP64: the locator sits right before the end record */
        if (eocd < LOC64_LEN || rd32(buf + eocd - LOC64_LEN) != SIG_LOC64)
            BAD("%s: saturated ZIP end record without a ZIP64 locator", f);
        const uint8_t *l = buf + eocd - LOC64_LEN;
        uint64_t rec = rd64(l + 8);
        if (rd32(l + 4) != 0 || rd32(l + 16) != 1) BAD("%s: multi-disk ZIP64 archives are not supported", f);
        if (rec > eocd - LOC64_LEN || eocd - LOC64_LEN - rec < EOCD64_LEN)
            BAD("%s: ZIP64 end record offset %llu is outside the file", f, (unsigned long long)rec);
        const uint8_t *r = buf + rec;
        if (rd32(r) != SIG_EOCD64) BAD("%s: bad ZIP64 end record signature", f);
        uint64_t rsz = rd64(r + 4);
        if (rsz < EOCD64_LEN - 12 || rsz > eocd - LOC64_LEN - rec - 12) BAD("%s: bad ZIP64 end record size", f);
        disk = rd32(r + 16);
        cd_disk = rd32(r + 20);
        uint64_t h64 = rd64(r + 24), a64 = rd64(r + 32);
        size = rd64(r + 40);
        off = rd64(r + 48);
        if (h64 != a64) BAD("%s: multi-disk ZIP archives are not supported", f);
        *n_entries = a64;
        *cd_end = rec;
    } else {
        if (n_here != n_all) BAD("%s: multi-disk ZIP archives are not supported", f);
        *n_entries = n_all;
    }
    if (disk != 0 || cd_disk != 0) BAD("%s: multi-disk ZIP archives are not supported", f);
    if (*n_entries == 0) BAD("%s: the archive holds no arrays", f);
    if (*n_entries > NPZR_MAX_ENTRIES)
        BAD("%s: %llu entries exceed the limit of %d", f, (unsigned long long)*n_entries, NPZR_MAX_ENTRIES);
    if (off > *cd_end || size > *cd_end - off)
        BAD("%s: central directory (offset %llu, %llu bytes) runs past its end record", f, (unsigned long long)off,
            (unsigned long long)size);
    if (size < (uint64_t)*n_entries * CEN_LEN)
        BAD("%s: central directory of %llu bytes is too small for %llu entries", f, (unsigned long long)size,
            (unsigned long long)*n_entries);
    *cd_off = off;
    *cd_size = size;
    return AS_OK;
}

/* Parses central header number i at *p (advanced past it) into *ce. */
static as_status read_central(const char *f, const uint8_t *buf, uint64_t *p, uint64_t end, uint64_t i,
                              cen_entry *ce, as_error *err) {
    if (end - *p < CEN_LEN) BAD("%s: central directory entry %llu is truncated", f, (unsigned long long)i);
    const uint8_t *c = buf + *p;
    if (rd32(c) != SIG_CENTRAL) BAD("%s: bad central directory signature at entry %llu", f, (unsigned long long)i);
    ce->flags = rd16(c + 8);
    ce->method = rd16(c + 10);
    ce->crc = rd32(c + 16);
    ce->csize = rd32(c + 20);
    ce->usize = rd32(c + 24);
    size_t nl = rd16(c + 28), el = rd16(c + 30), cl = rd16(c + 32);
    uint32_t disk = rd16(c + 34);
    ce->offset = rd32(c + 42);
    if (nl == 0 || nl > NPZR_MAX_NAME)
        BAD("%s: entry %llu has a name of %zu bytes (allowed 1..%d)", f, (unsigned long long)i, nl, NPZR_MAX_NAME);
    if ((uint64_t)(nl + el + cl) > end - *p - CEN_LEN)
        BAD("%s: central directory entry %llu runs past the directory", f, (unsigned long long)i);
    ce->name = c + CEN_LEN;
    ce->name_len = nl;
    if (memchr(ce->name, 0, nl)) BAD("%s: entry %llu has a NUL byte in its name", f, (unsigned long long)i);
    if (zip64_extra(c + CEN_LEN + nl, el, &ce->usize, ce->usize == U32_SAT, &ce->csize, ce->csize == U32_SAT,
                    &ce->offset, ce->offset == U32_SAT))
        BAD("%s: entry '%.*s' has a malformed extra field (ZIP64 sizes)", f, (int)nl, (const char *)ce->name);
    if (disk != 0 && disk != U16_SAT) BAD("%s: multi-disk ZIP archives are not supported", f);
    *p += CEN_LEN + nl + el + cl;
    return AS_OK;
}

/* Inflates into dst[0..cap) and returns the bytes written. *zr: Z_OK when cap bytes
 * were written and the stream goes on, Z_STREAM_END at its end, else a zlib error
 * (Z_BUF_ERROR: no progress possible). With finish, calls inflate on after cap bytes
 * (with no room) until the stream ends or makes no progress. */
static uint64_t inflate_to(z_stream *z, const uint8_t **in, uint64_t *in_left, uint8_t *dst, uint64_t cap, int finish,
                           int *zr) {
    uint64_t done = 0;
    *zr = Z_OK;
    while (*zr == Z_OK && (finish || done < cap)) {
        uInt ci = *in_left > 0x40000000u ? 0x40000000u : (uInt)*in_left;
        uInt co = cap - done > 0x40000000u ? 0x40000000u : (uInt)(cap - done);
        z->next_in = (Bytef *)*in;
        z->avail_in = ci;
        z->next_out = dst + done;
        z->avail_out = co;
        *zr = inflate(z, Z_NO_FLUSH);
        *in += ci - z->avail_in;
        *in_left -= ci - z->avail_in;
        done += co - z->avail_out;
        if (*zr == Z_OK && ci == z->avail_in && co == z->avail_out) *zr = Z_BUF_ERROR; /* no progress */
    }
    return done;
}

/* Checks entry ce's local header, sizes and compression ratio, then its .npy header
 * (inflating only the first NPYR_MAX_PREFIX bytes), so that a hostile declared size is
 * refused before any allocation of that size. With header_only, *out gets the shape
 * only (no data, no CRC check); else the data are inflated straight into out->data
 * and the CRC-32 is checked. */
static as_status read_entry(const char *f, const uint8_t *buf, uint64_t cd_off, const cen_entry *ce, int header_only,
                            npz_raw *raw, npy_array *out, as_error *err) {
    const int nl = (int)ce->name_len;
    const char *nm = (const char *)ce->name;
    if (ce->flags & 0x41) BAD("%s: entry '%.*s' is encrypted", f, nl, nm);
    if (ce->method != 0 && ce->method != 8)
        BAD("%s: entry '%.*s' uses compression method %u (only stored 0 and deflate 8 are supported)", f, nl, nm,
            ce->method);
    if (ce->usize > NPZR_MAX_ENTRY_BYTES)
        BAD("%s: entry '%.*s' is %llu bytes uncompressed, over the limit of %zu", f, nl, nm,
            (unsigned long long)ce->usize, (size_t)NPZR_MAX_ENTRY_BYTES);
    if (ce->method == 0 && ce->csize != ce->usize)
        BAD("%s: stored entry '%.*s' has compressed size %llu != size %llu", f, nl, nm, (unsigned long long)ce->csize,
            (unsigned long long)ce->usize);
    if (ce->method == 8 && ce->usize > NPZR_RATIO_FREE_BYTES && ce->usize / NPZR_MAX_RATIO > ce->csize)
        BAD("%s: entry '%.*s' declares %llu bytes from %llu compressed bytes, over the compression ratio limit of "
            "%d:1",
            f, nl, nm, (unsigned long long)ce->usize, (unsigned long long)ce->csize, NPZR_MAX_RATIO);
    if (ce->offset > cd_off || cd_off - ce->offset < LOC_LEN)
        BAD("%s: entry '%.*s' has its local header outside the data area", f, nl, nm);
    const uint8_t *l = buf + ce->offset;
    if (rd32(l) != SIG_LOCAL) BAD("%s: entry '%.*s': bad local header signature", f, nl, nm);
    uint32_t lflags = rd16(l + 6), lmethod = rd16(l + 8), lcrc = rd32(l + 14);
    uint64_t lc = rd32(l + 18), lu = rd32(l + 22);
    size_t lnl = rd16(l + 26), lel = rd16(l + 28);
    if ((uint64_t)(lnl + lel) > cd_off - ce->offset - LOC_LEN)
        BAD("%s: entry '%.*s': local header runs into the central directory", f, nl, nm);
    if (lnl != ce->name_len || memcmp(l + LOC_LEN, ce->name, lnl))
        BAD("%s: entry '%.*s': local header names another file", f, nl, nm);
    if (lmethod != ce->method) BAD("%s: entry '%.*s': local and central compression methods differ", f, nl, nm);
    if (!(lflags & 0x08)) {
        /* sizes are in the local header (possibly via its ZIP64 block): they must agree */
        if (zip64_extra(l + LOC_LEN + lnl, lel, &lu, lu == U32_SAT, &lc, lc == U32_SAT, NULL, 0))
            BAD("%s: entry '%.*s': malformed local extra field (ZIP64 sizes)", f, nl, nm);
        if (lc != ce->csize || lu != ce->usize || lcrc != ce->crc)
            BAD("%s: entry '%.*s': local header sizes or CRC differ from the central directory", f, nl, nm);
    }
    uint64_t data = ce->offset + LOC_LEN + lnl + lel;
    if (ce->csize > cd_off - data)
        BAD("%s: entry '%.*s': %llu bytes of data run past the end of the data area (truncated?)", f, nl, nm,
            (unsigned long long)ce->csize);
    char what[1300];
    snprintf(what, sizeof what, "%s: %.*s", f, nl, nm);
    /* the .npy header: the first hlen bytes of the entry */
    const uint64_t hlen = ce->usize < NPYR_MAX_PREFIX ? ce->usize : NPYR_MAX_PREFIX;
    uint8_t *hbuf = NULL;
    const uint8_t *hdr = buf + data, *in = buf + data;
    uint64_t in_left = ce->csize, hlen_got = 0;
    z_stream z;
    memset(&z, 0, sizeof z);
    int zr = Z_OK, zopen = 0;
    as_status rc = AS_OK;
    if (ce->method == 8) {
        if (!(hbuf = as_malloc(NPYR_MAX_PREFIX))) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", f);
        if (inflateInit2(&z, -15) != Z_OK) {
            free(hbuf);
            return as_err_set(err, AS_ERR_INTERNAL, "%s: zlib inflateInit2 failed", f);
        }
        zopen = 1;
        hlen_got = inflate_to(&z, &in, &in_left, hbuf, hlen, 0, &zr);
        if (hlen_got < hlen) goto inflate_failed;
        hdr = hbuf;
    } else {
        /* stored: the CRC costs no allocation, so it is checked before the header */
        uint32_t crc = (uint32_t)crc32_z(0L, hdr, (size_t)ce->usize);
        if (crc != ce->crc)
            BAD("%s: entry '%.*s': CRC-32 mismatch (stored %08x, data %08x)", f, nl, nm, ce->crc, crc);
    }
    size_t off, item = 4;
    if ((rc = raw ? npy_parse_header_descr(what, hdr, (size_t)hlen, out, &off, raw->descr, err)
                  : npy_parse_header(what, hdr, (size_t)hlen, out, &off, err)))
        goto cleanup;
    if (raw && !(item = npy_descr_itemsize(raw->descr))) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: dtype '%s' is not read (little-endian numbers and fixed-width strings "
                        "only; no objects or pickles)", what, raw->descr);
        goto cleanup;
    }
    if (raw) raw->itemsize = item;
    if (ce->usize - off != (uint64_t)out->n * item) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: .npy data is %llu bytes but the shape needs %llu", what,
                        (unsigned long long)(ce->usize - off), (unsigned long long)out->n * item);
        goto cleanup;
    }
    if (header_only) goto cleanup;
    const uint64_t nbytes = (uint64_t)out->n * item;
    uint8_t *dst = raw ? (raw->bytes = as_malloc((size_t)(nbytes ? nbytes : 1)))
                       : (uint8_t *)(out->data = as_malloc_array(out->n ? out->n : 1, sizeof(float)));
    if (!dst) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", what);
        goto cleanup;
    } /* '<f4' (or the raw dtype's bytes) as stored, on a little-endian host (npy.c) */
    if (ce->method == 0) {
        memcpy(dst, buf + data + off, (size_t)nbytes);
    } else {
        uint32_t crc = (uint32_t)crc32_z(0L, hbuf, (size_t)hlen);
        uint64_t have = hlen - off; /* data bytes already inflated with the header */
        memcpy(dst, hbuf + off, (size_t)have);
        uint64_t got = inflate_to(&z, &in, &in_left, dst + have, nbytes - have, 1, &zr);
        crc = (uint32_t)crc32_z(crc, dst + have, (size_t)got);
        if (zr != Z_STREAM_END || got != nbytes - have) {
            if (zr == Z_BUF_ERROR && got == nbytes - have && in_left > 0) {
                rc = as_err_set(err, AS_ERR_INPUT, "%s: entry '%.*s' inflates to more than its declared %llu bytes", f,
                                nl, nm, (unsigned long long)ce->usize);
                goto cleanup;
            }
            hlen_got = off + have + got;
            goto inflate_failed;
        }
        if (crc != ce->crc)
            rc = as_err_set(err, AS_ERR_INPUT, "%s: entry '%.*s': CRC-32 mismatch (stored %08x, data %08x)", f, nl,
                            nm, ce->crc, crc);
    }
    goto cleanup;
inflate_failed:
    rc = zr == Z_STREAM_END
             ? as_err_set(err, AS_ERR_INPUT, "%s: entry '%.*s' inflates to %llu bytes, not the declared %llu", f, nl,
                          nm, (unsigned long long)hlen_got, (unsigned long long)ce->usize)
             : as_err_set(err, AS_ERR_INPUT, "%s: entry '%.*s': corrupt or truncated deflate data (%s)", f, nl, nm,
                          zr == Z_BUF_ERROR ? "unexpected end" : z.msg ? z.msg : "zlib error");
cleanup:
    if (zopen) inflateEnd(&z);
    free(hbuf);
    if (rc) {
        npy_array_free(out);
        if (raw) npz_raw_free(raw);
    }
    return rc;
}

/* Parses the archive and reads the chosen entry (see npz_parse_f32), or only its
 * shape when header_only. */
static as_status npz_parse(const char *f, const uint8_t *buf, size_t len, const char *name, int header_only,
                           npz_raw *raw, npy_array *out, as_error *err) {
    memset(out, 0, sizeof *out);
    uint64_t cd_off = 0, cd_size = 0, n = 0, cd_end = 0;
    as_status rc = find_directory(f, buf, len, &cd_off, &cd_size, &n, &cd_end, err);
    if (rc) return rc;
    cen_entry *ents = as_calloc((size_t)n, sizeof *ents);
    if (!ents) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", f);
    uint64_t p = cd_off, end = cd_off + cd_size;
    for (uint64_t i = 0; i < n; i++) {
        if ((rc = read_central(f, buf, &p, end, i, &ents[i], err))) goto cleanup;
        for (uint64_t j = 0; j < i; j++)
            if (ents[j].name_len == ents[i].name_len && !memcmp(ents[j].name, ents[i].name, ents[i].name_len)) {
                rc = as_err_set(err, AS_ERR_INPUT, "%s: entry '%.*s' appears twice", f, (int)ents[i].name_len,
                                (const char *)ents[i].name);
                goto cleanup;
            }
    }
    if (p != end) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: %llu stray bytes after the central directory entries", f,
                        (unsigned long long)(end - p));
        goto cleanup;
    }
    /* pick the entry: name.npy, else "attentions.npy", else the only one */
    const char *want = name ? name : "attentions";
    size_t wl = strlen(want);
    int pick = -1;
    for (uint64_t i = 0; i < n; i++)
        if (ents[i].name_len == wl + 4 && !memcmp(ents[i].name, want, wl) && !memcmp(ents[i].name + wl, ".npy", 4))
            pick = (int)i;
    if (pick < 0 && !name && n == 1) pick = 0;
    if (pick < 0 && raw) {
        raw->absent = 1;
        goto cleanup;
    }
    if (pick < 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: no array named '%s' among its %llu arrays%s", f, want,
                        (unsigned long long)n, name ? "" : " (and more than one array)");
        goto cleanup;
    }
    rc = read_entry(f, buf, cd_off, &ents[pick], header_only, raw, out, err);
cleanup:
    free(ents);
    return rc;
}

as_status npz_parse_f32(const char *f, const uint8_t *buf, size_t len, const char *name, npy_array *out,
                        as_error *err) {
    return npz_parse(f, buf, len, name, 0, NULL, out, err);
}

as_status npz_parse_raw(const char *f, const uint8_t *buf, size_t len, const char *name, npz_raw *out,
                        as_error *err) {
    memset(out, 0, sizeof *out);
    return npz_parse(f, buf, len, name, 0, out, &out->a, err);
}

void npz_raw_free(npz_raw *r) {
    if (!r) return;
    free(r->bytes);
    memset(r, 0, sizeof *r);
}

/* Maps path read-only (at most NPZR_MAX_FILE bytes) and parses it; an empty file is
 * named as such. */
static as_status npz_read(const char *path, const char *name, int header_only, npy_array *out, as_error *err) {
    memset(out, 0, sizeof *out);
    int fd;
    uint64_t size;
    as_status rc = as_file_open_regular(path, NPZR_MAX_FILE, &fd, &size, err);
    if (rc) return rc;
    if (size == 0) {
        close(fd);
        return as_err_set(err, AS_ERR_INPUT, "%s: empty file (0 bytes): not a .npz archive", path);
    }
    size_t len = (size_t)size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return as_err_set(err, AS_ERR_INTERNAL, "%s: mmap failed: %s", path, strerror(errno));
    rc = npz_parse(path, map, len, name, header_only, NULL, out, err);
    munmap(map, len);
    return rc;
}

as_status npz_read_f32(const char *path, const char *name, npy_array *out, as_error *err) {
    return npz_read(path, name, 0, out, err);
}

/* Dispatches path to the .npz reader (header_only or not) or to the .npy one, by its
 * first bytes: a ZIP local header "PK\3\4", or the end record "PK\5\6" of an empty
 * archive. A file that is neither is named as such, not as a bad .npy. */
static as_status npyz_read(const char *path, const char *name, int header_only, npy_array *out, as_error *err) {
    memset(out, 0, sizeof *out);
    FILE *fp;
    as_status rc = as_file_fopen_regular(path, NPZR_MAX_FILE, &fp, NULL, err);
    if (rc) return rc;
    uint8_t magic[6] = {0};
    size_t got = fread(magic, 1, 6, fp);
    fclose(fp);
    if (got >= 4 && (rd32(magic) == SIG_LOCAL || rd32(magic) == SIG_EOCD))
        return npz_read(path, name, header_only, out, err);
    size_t pl = strlen(path);
    int npz_name = pl >= 4 && !strcmp(path + pl - 4, ".npz");
    if (got == 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: empty file (0 bytes): not a %s", path,
                          npz_name ? ".npz archive" : ".npy file or .npz archive");
    if (got < 6 || memcmp(magic, "\x93NUMPY", 6))
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: %s (it starts with neither the ZIP signature PK\\3\\4 nor the .npy magic \\x93NUMPY)",
                          path, npz_name ? "not a .npz (ZIP) archive" : "neither a .npy file nor a .npz archive");
    return header_only ? npy_read_header(path, out, err) : npy_read_f32(path, out, err);
}

as_status npyz_read_f32(const char *path, const char *name, npy_array *out, as_error *err) {
    return npyz_read(path, name, 0, out, err);
}

as_status npyz_read_shape(const char *path, const char *name, npy_array *out, as_error *err) {
    return npyz_read(path, name, 1, out, err);
}
