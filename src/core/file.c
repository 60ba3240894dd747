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

char *as_quote_bytes(char *dst, size_t cap, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    if (cap == 0) return dst;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int plain = c >= 0x20 && c < 0x7f;
        size_t need = plain ? 1 : 4;
        if (o + need + 4 > cap) { /* room for "..." and the NUL */
            if (o + 4 <= cap) {
                memcpy(dst + o, "...", 3);
                o += 3;
            }
            break;
        }
        if (plain) {
            dst[o++] = (char)c;
        } else {
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[c >> 4];
            dst[o++] = hex[c & 15];
        }
    }
    dst[o < cap ? o : cap - 1] = 0;
    return dst;
}
