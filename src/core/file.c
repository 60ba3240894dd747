/* file.c — untrusted input files: non-blocking open, regular files only, size checked
 * against a caller's limit; quoting of their bytes in messages. See file.h. */
#include "file.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

as_status as_file_open_regular(const char *path, uint64_t max_bytes, int *fd, uint64_t *size,
                               as_error *err) {
    *fd = -1;
    if (size) *size = 0;
    /* O_NONBLOCK: open() of a FIFO with no writer returns at once instead of waiting for
     * one; the descriptor is refused below before anything is read from it. */
    int d = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (d < 0) return as_err_set(err, AS_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(d, &st) != 0) {
        int e = errno;
        close(d);
        return as_err_set(err, AS_ERR_INPUT, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(d);
        return as_err_set(err, AS_ERR_INPUT, "%s: not a regular file", path);
    }
    if (st.st_size < 0 || (uint64_t)st.st_size > max_bytes) {
        close(d);
        return as_err_set(err, AS_ERR_INPUT, "%s: file is %lld bytes, over the limit of %llu",
                          path, (long long)st.st_size, (unsigned long long)max_bytes);
    }
    int fl = fcntl(d, F_GETFL);
    if (fl < 0 || fcntl(d, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(d);
        return as_err_set(err, AS_ERR_INPUT, "%s: cannot open: %s", path, strerror(e));
    }
    *fd = d;
    if (size) *size = (uint64_t)st.st_size;
    return AS_OK;
}

as_status as_file_fopen_regular(const char *path, uint64_t max_bytes, FILE **f, uint64_t *size,
                                as_error *err) {
    *f = NULL;
    int d;
    as_status rc = as_file_open_regular(path, max_bytes, &d, size, err);
    if (rc) return rc;
    *f = fdopen(d, "rb");
    if (!*f) {
        int e = errno;
        close(d);
        return as_err_set(err, AS_ERR_INTERNAL, "%s: cannot open: %s", path, strerror(e));
    }
    return AS_OK;
}

/* 1 for the code points of a well-formed multi-byte sequence that show as themselves:
 * not C1 controls, and not what a reader could not tell apart from a space or from
 * nothing (no-break and other Unicode spaces, the soft hyphen, zero-width and
 * direction marks, line/paragraph separators, the byte-order mark). */
static int shows_as_itself(uint32_t cp) {
    if (cp <= 0xA0 || cp == 0xAD || cp == 0x1680 || cp == 0x202F || cp == 0x205F || cp == 0x3000) return 0;
    if (cp >= 0x2000 && cp <= 0x200A) return 0; /* spaces that look like ' ' */
    if ((cp >= 0x200B && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202E) || (cp >= 0x2060 && cp <= 0x2064)) return 0;
    return cp != 0xFEFF && !(cp >= 0xFFF9 && cp <= 0xFFFB);
}

char *as_quote_bytes(char *dst, size_t cap, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (cap == 0) return dst;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const unsigned char *p = (const unsigned char *)s + i;
        size_t len = 1;
        int plain = p[0] >= 0x20 && p[0] < 0x7f;
        if (!plain && p[0] >= 0x80) {
            int k = as_utf8_seq_len(p, n - i);
            if (k > 1) {
                uint32_t cp = p[0] & (0x7Fu >> k);
                for (int j = 1; j < k; j++) cp = (cp << 6) | (p[j] & 0x3Fu);
                if (shows_as_itself(cp)) plain = 1, len = (size_t)k;
            }
        }
        size_t need = plain ? len : 4;
        if (o + need + 4 > cap) { /* room for "..." and the NUL */
            if (o + 4 <= cap) {
                memcpy(dst + o, "...", 3);
                o += 3;
            }
            break;
        }
        if (plain) {
            memcpy(dst + o, p, len);
            o += len;
        } else {
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[p[0] >> 4];
            dst[o++] = hex[p[0] & 15];
        }
        i += len;
    }
    dst[o < cap ? o : cap - 1] = 0;
    return dst;
}
