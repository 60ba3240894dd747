/* core.c — error reporting, allocation, logging, file reading and half-precision
 * conversion shared by every module. No model or format knowledge here. */
#define _POSIX_C_SOURCE 200809L
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#include "core.h"
#include "file.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int g_quiet = 0;

/* Error messages quote input (file names, JSON parser context, text): every ASCII
 * control character (line breaks, vertical tab, form feed, escape, ...) becomes a space,
 * so a message stays one line on a terminal and in a log. */
static void one_line(char *s) {
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = ' ';
}

as_status as_err_set(as_error *err, as_status code, const char *fmt, ...) {
    if (!err) return code;
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    one_line(err->msg);
    return code;
}

as_status as_err_prefix(as_error *err, const char *fmt, ...) {
    if (!err) return AS_ERR_INTERNAL;
    char pre[AS_ERR_MSG_MAX], old[AS_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err->msg, sizeof old);
    size_t np = strlen(pre), no = strnlen(old, sizeof old - 1), cap = sizeof err->msg - 1;
    if (np > cap) np = cap;
    memcpy(err->msg, pre, np);
    size_t at = np;
    for (const char *sep = ": "; *sep && at < cap; sep++) err->msg[at++] = *sep;
    if (no > cap - at) no = cap - at;
    memcpy(err->msg + at, old, no);
    err->msg[at + no] = 0;
    one_line(err->msg);
    return err->code;
}

void as_err_clear(as_error *err) {
    if (!err) return;
    err->code = AS_OK;
    err->msg[0] = 0;
}

void as_set_quiet(int quiet) { g_quiet = quiet; }

void as_warn(const char *fmt, ...) {
    if (g_quiet) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    one_line(buf);
    fprintf(stderr, "attnscope: warning: %s\n", buf);
}

void *as_malloc(size_t n) { return malloc(n ? n : 1); }
void *as_calloc(size_t n, size_t size) { return calloc(n ? n : 1, size ? size : 1); }

size_t as_mul_size(size_t a, size_t b) {
    if (a != 0 && b > SIZE_MAX / a) return 0;
    return a * b;
}

void *as_malloc_array(size_t n, size_t size) {
    if (n && size > SIZE_MAX / n) return NULL;
    return as_malloc(n * size);
}

#define AS_HUGE_PAGE ((size_t)2 << 20)

void *as_malloc_large(size_t n, size_t size) {
    if (n && size > SIZE_MAX / n) return NULL;
    size_t bytes = n * size;
    if (bytes < 2 * AS_HUGE_PAGE) return as_malloc(bytes);
    void *p = NULL;
    if (posix_memalign(&p, AS_HUGE_PAGE, bytes) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes & ~(AS_HUGE_PAGE - 1), MADV_HUGEPAGE); /* advice only: failure is harmless */
#endif
    return p;
}

void *as_calloc_large(size_t n, size_t size) {
    void *p = as_malloc_large(n, size);
    if (p) memset(p, 0, n * size);
    return p;
}

#if defined(__SANITIZE_ADDRESS__)
#define AS_LARGE_KEEP 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AS_LARGE_KEEP 0
#endif
#endif
#ifndef AS_LARGE_KEEP
#define AS_LARGE_KEEP AS_LARGE_CACHE_N
#endif

static struct {
    pthread_mutex_t mu;
    void *p[AS_LARGE_CACHE_N];
    size_t cap[AS_LARGE_CACHE_N]; /* 0: empty slot */
} g_large = {.mu = PTHREAD_MUTEX_INITIALIZER};

void *as_large_get(size_t bytes, size_t *cap) {
    if (!bytes) bytes = 1;
    void *p = NULL;
    int best = -1;
    pthread_mutex_lock(&g_large.mu);
    for (int i = 0; i < AS_LARGE_CACHE_N; i++)
        if (g_large.cap[i] >= bytes && g_large.cap[i] / 2 <= bytes &&
            (best < 0 || g_large.cap[i] < g_large.cap[best]))
            best = i;
    if (best >= 0) {
        p = g_large.p[best];
        *cap = g_large.cap[best];
        g_large.p[best] = NULL;
        g_large.cap[best] = 0;
    }
    pthread_mutex_unlock(&g_large.mu);
    if (p) return p;
    p = as_malloc_large(bytes, 1);
    *cap = p ? bytes : 0;
    return p;
}

void as_large_put(void *p, size_t cap) {
    if (!p) return;
    void *evict[AS_LARGE_CACHE_N] = {0};
    if (AS_LARGE_KEEP > 0) {
        pthread_mutex_lock(&g_large.mu);
        /* Make room: drop kept buffers, smallest first, until this one fits in a free
         * slot and in AS_LARGE_CACHE_BYTES -- or nothing else is kept (a buffer larger
         * than the budget is kept alone, so a forward of any size reuses its memory). */
        for (;;) {
            size_t total = cap;
            int slot = -1, smallest = -1;
            for (int i = 0; i < AS_LARGE_KEEP; i++) {
                total += g_large.cap[i];
                if (!g_large.cap[i]) {
                    if (slot < 0) slot = i;
                } else if (smallest < 0 || g_large.cap[i] < g_large.cap[smallest]) {
                    smallest = i;
                }
            }
            if (slot >= 0 && (total <= AS_LARGE_CACHE_BYTES || smallest < 0)) {
                g_large.p[slot] = p;
                g_large.cap[slot] = cap;
                p = NULL;
                break;
            }
            evict[smallest] = g_large.p[smallest];
            g_large.p[smallest] = NULL;
            g_large.cap[smallest] = 0;
        }
        pthread_mutex_unlock(&g_large.mu);
    }
    for (int i = 0; i < AS_LARGE_CACHE_N; i++) free(evict[i]);
    free(p);
}

int as_large_reuses(void) { return AS_LARGE_KEEP > 0; }

char *as_strdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

int as_utf8_seq_len(const unsigned char *s, size_t n) {
    if (!n) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || (size_t)len > n) return 0;
    uint32_t v = c & (0x7Fu >> len);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[k] & 0x3Fu);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    return len;
}

size_t as_utf8_bad_len(const unsigned char *s, size_t n) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF;
    int need;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return 1;
    size_t k = 1;
    for (int i = 0; i < need && k < n && s[k] >= lo && s[k] <= hi; i++, k++) lo = 0x80, hi = 0xBF;
    return k;
}

char *as_utf8_clean(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s);
    char *out = as_malloc_array(n + 1, 3); /* each bad byte grows to 3 */
    if (!out) return NULL;
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int len = as_utf8_seq_len(p + i, n - i);
        if (len) {
            memcpy(out + o, p + i, (size_t)len);
            o += (size_t)len;
            i += (size_t)len;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += as_utf8_bad_len(p + i, n - i);
        }
    }
    out[o] = 0;
    return out;
}

int as_json_null_big_ints(char *buf, size_t n) {
    int count = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = buf[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') {
            in_str = 1;
            continue;
        }
        if (c != '-' && (c < '0' || c > '9')) continue;
        size_t j = i + (c == '-'), d0 = j;
        while (j < n && buf[j] >= '0' && buf[j] <= '9') j++;
        size_t nd = j - d0;
        int is_int = nd > 0 && !(j < n && (buf[j] == '.' || buf[j] == 'e' || buf[j] == 'E'));
        const char *lim = c == '-' ? "9223372036854775808" : "9223372036854775807";
        int big = is_int && (nd > 19 || (nd == 19 && memcmp(buf + d0, lim, 19) > 0));
        if (big) {
            memcpy(buf + i, "null", 4);
            memset(buf + i + 4, ' ', j - i - 4);
            count++;
        }
        i = j - 1;
        while (i + 1 < n && (buf[i + 1] == '.' || buf[i + 1] == 'e' || buf[i + 1] == 'E' ||
                             buf[i + 1] == '+' || buf[i + 1] == '-' ||
                             (buf[i + 1] >= '0' && buf[i + 1] <= '9')))
            i++; /* rest of a float literal */
    }
    return count;
}

as_status as_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len,
                       as_error *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    FILE *f;
    uint64_t size;
    as_status rc = as_file_fopen_regular(path, max_bytes, &f, &size, err);
    if (rc) return rc;
    size_t n = (size_t)size;
    char *buf = as_malloc(n + 1);
    if (!buf) {
        fclose(f);
        return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
    }
    if (n && fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        return as_err_set(err, AS_ERR_INPUT, "%s: short read", path);
    }
    fclose(f);
    buf[n] = 0;
    *out = buf;
    if (out_len) *out_len = n;
    return AS_OK;
}

as_status as_path_join(char *buf, size_t cap, const char *dir, const char *name, as_error *err) {
    int n = snprintf(buf, cap, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= cap)
        return as_err_set(err, AS_ERR_INPUT, "path too long: %s/%s", dir, name);
    return AS_OK;
}

int as_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

float as_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: value = man * 2^-24 */
            float v = (float)man * 5.9604644775390625e-8f;
            return (h & 0x8000) ? -v : v;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float as_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t as_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff);
    uint32_t man = x & 0x7fffff;
    if (exp == 255) return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
    int32_t e = exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00);
    if (e <= 0) { /* subnormal or zero, round to nearest even */
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = 1u << (shift - 1);
        uint32_t r = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++; /* may carry into exponent: fine */
    return (uint16_t)(sign | r);
}

uint16_t as_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000) return (uint16_t)((x >> 16) | 0x40); /* NaN */
    uint32_t lsb = (x >> 16) & 1;
    x += 0x7fff + lsb;
    return (uint16_t)(x >> 16);
}

int as_n_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

double as_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
