/* npz_zip_libs.c — the measurement behind keeping attnscope's own ZIP code in
 * src/io/npz.c and src/io/npz_read.c instead of Debian's libzip (1.7) or minizip (1.1).
 * Run by bench/npz_zip_libs.sh, which builds it against the library and prints:
 *   write-{own,minizip,libzip,libzip-copy} PATH  a BERT-base capture at 512 tokens
 *       (attentions and scores 12x12x512x512, q/k/v 12x12x512x64, hidden 13x512x768;
 *       379 MB of float32) as STORED .npz; BIG=1: five 1 GiB arrays (a 5.4 GB zip64
 *       archive); seconds and peak RSS;
 *   read-{own,minizip,libzip} PATH  the attentions entry; seconds and peak RSS;
 *   hostile FILES...  what libzip (ZIP_CHECKCONS) and minizip do with each archive;
 *   many {libzip,minizip} PATH  opening an archive of 1,000,000 entries.
 * Not part of the tests or of `make bench` (needs libzip-dev and libminizip-dev).
 */
#include "io/npz.h"
#include "io/npz_read.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <zip.h>
#include <minizip/zip.h>
#include <minizip/unzip.h>

typedef struct { const char *name; int nd; int64_t sh[4]; float *p; size_t n; } arr;
static arr A[] = {
    {"attentions", 4, {12, 12, 512, 512}, NULL, 0}, {"attention_scores", 4, {12, 12, 512, 512}, NULL, 0},
    {"queries", 4, {12, 12, 512, 64}, NULL, 0}, {"keys", 4, {12, 12, 512, 64}, NULL, 0}, {"values", 4, {12, 12, 512, 64}, NULL, 0},
    {"hidden_states", 3, {13, 512, 768}, NULL, 0},
};
#define NA 6
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static long rss_mb(void) { struct rusage u; getrusage(RUSAGE_SELF, &u); return u.ru_maxrss / 1024; }

/* the .npy v1.0 header of a, 128 bytes (so the data is 64-aligned) */
static size_t npy_header(const arr *a, char *h) {
    char shape[128];
    if (a->nd == 4) snprintf(shape, sizeof shape, "(%lld, %lld, %lld, %lld)", (long long)a->sh[0], (long long)a->sh[1], (long long)a->sh[2], (long long)a->sh[3]);
    else snprintf(shape, sizeof shape, "(%lld, %lld, %lld)", (long long)a->sh[0], (long long)a->sh[1], (long long)a->sh[2]);
    char d[119];
    int n = snprintf(d, sizeof d, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape);
    memset(d + n, 0x20, 118 - n); d[117] = 0x0a; d[118] = 0;
    memcpy(h, "\x93NUMPY\x01\x00", 8); h[8] = 118; h[9] = 0; memcpy(h + 10, d, 118);
    return 128;
}

typedef struct { const arr *a; char h[128]; size_t pos; } src_state;
/* libzip source callback: header then the caller's array, no copy */
static zip_int64_t src_cb(void *ud, void *data, zip_uint64_t len, zip_source_cmd_t cmd) {
    src_state *s = ud;
    size_t total = 128 + s->a->n * 4;
    switch (cmd) {
    case ZIP_SOURCE_OPEN: s->pos = 0; return 0;
    case ZIP_SOURCE_READ: {
        size_t k = 0;
        while (k < len && s->pos < total) {
            if (s->pos < 128) { size_t m = 128 - s->pos; if (m > len - k) m = len - k; memcpy((char *)data + k, s->h + s->pos, m); k += m; s->pos += m; }
            else { size_t m = total - s->pos; if (m > len - k) m = len - k; memcpy((char *)data + k, (char *)s->a->p + (s->pos - 128), m); k += m; s->pos += m; }
        }
        return (zip_int64_t)k;
    }
    case ZIP_SOURCE_CLOSE: return 0;
    case ZIP_SOURCE_STAT: { zip_stat_t *st = data; zip_stat_init(st); st->size = total; st->valid |= ZIP_STAT_SIZE; return sizeof *st; }
    case ZIP_SOURCE_ERROR: return zip_error_to_data(NULL, data, len);
    case ZIP_SOURCE_FREE: return 0;
    case ZIP_SOURCE_SUPPORTS: return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
    default: return -1;
    }
}

static arr BIG[] = {
    {"a0", 4, {1, 1, 16384, 16384}, NULL, 0}, {"a1", 4, {1, 1, 16384, 16384}, NULL, 0}, {"a2", 4, {1, 1, 16384, 16384}, NULL, 0},
    {"a3", 4, {1, 1, 16384, 16384}, NULL, 0}, {"attentions", 4, {1, 1, 16384, 16384}, NULL, 0}, {"tail", 4, {1, 1, 2, 2}, NULL, 0},
};
static int bench(const char *mode, const char *path) {
    if (getenv("BIG")) memcpy(A, BIG, sizeof A);
    double t0;
    if (!strncmp(mode, "write", 5)) {
        size_t tot = 0;
        for (int i = 0; i < NA; i++) {
            A[i].n = 1; for (int d = 0; d < A[i].nd; d++) A[i].n *= A[i].sh[d];
            A[i].p = malloc(A[i].n * 4);
            for (size_t j = 0; j < A[i].n; j++) A[i].p[j] = (float)((j * 2654435761u) % 1000003) / 1000003.0f;
            tot += A[i].n * 4;
        }
        long base = rss_mb();
        t0 = now();
        if (!strcmp(mode, "write-own")) {
            npz_writer *w; as_error e = {0};
            if (npz_open(path, &w, &e)) return 1;
            for (int i = 0; i < NA; i++) if (npz_add(w, A[i].name, NPY_F32, A[i].p, A[i].nd, A[i].sh, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
            if (npz_close(w, &e)) return 1;
        } else if (!strcmp(mode, "write-minizip")) {
            zipFile z = zipOpen64(path, APPEND_STATUS_CREATE);
            for (int i = 0; i < NA; i++) {
                char nm[64], h[128]; snprintf(nm, sizeof nm, "%s.npy", A[i].name);
                zip_fileinfo zi = {0};
                if (zipOpenNewFileInZip64(z, nm, &zi, NULL, 0, NULL, 0, NULL, 0, 0, 1) != ZIP_OK) return 1;
                npy_header(&A[i], h);
                zipWriteInFileInZip(z, h, 128);
                for (size_t off = 0; off < A[i].n * 4; off += 1u << 30) {
                    size_t m = A[i].n * 4 - off; if (m > 1u << 30) m = 1u << 30;
                    if (zipWriteInFileInZip(z, (char *)A[i].p + off, (unsigned)m) != ZIP_OK) return 1;
                }
                zipCloseFileInZip(z);
            }
            if (zipClose(z, NULL) != ZIP_OK) return 1;
        } else if (!strcmp(mode, "write-libzip") || !strcmp(mode, "write-libzip-copy")) {
            int ze; zip_t *z = zip_open(path, ZIP_CREATE | ZIP_TRUNCATE, &ze);
            static src_state st[NA];
            for (int i = 0; i < NA; i++) {
                char nm[64]; snprintf(nm, sizeof nm, "%s.npy", A[i].name);
                zip_source_t *s;
                if (!strcmp(mode, "write-libzip")) {
                    st[i].a = &A[i]; npy_header(&A[i], st[i].h);
                    s = zip_source_function(z, src_cb, &st[i]);
                } else {
                    char *b = malloc(128 + A[i].n * 4); npy_header(&A[i], b); memcpy(b + 128, A[i].p, A[i].n * 4);
                    s = zip_source_buffer(z, b, 128 + A[i].n * 4, 1);
                }
                zip_int64_t idx = zip_file_add(z, nm, s, ZIP_FL_ENC_UTF_8);
                if (idx < 0) return 1;
                zip_set_file_compression(z, idx, ZIP_CM_STORE, 0);
            }
            if (zip_close(z) != 0) { fprintf(stderr, "zip_close: %s\n", zip_strerror(z)); return 1; }
        }
        double t = now() - t0;
        printf("%-18s %6.0f MB  %.3f s  %6.0f MB/s  peak RSS %ld MB (arrays %ld MB)\n", mode, tot / 1e6, t, tot / 1e6 / t, rss_mb(), base);
    } else {
        size_t n = 0;
        t0 = now();
        if (!strcmp(mode, "read-own")) {
            npy_array a; as_error e = {0};
            if (npz_read_f32(path, "attentions", &a, &e)) { fprintf(stderr, "%s\n", e.msg); return 1; }
            n = 1; for (int d = 0; d < a.ndim; d++) n *= a.shape[d];
            npy_array_free(&a);
        } else if (!strcmp(mode, "read-minizip")) {
            unzFile u = unzOpen64(path);
            if (!u || unzLocateFile(u, "attentions.npy", 1) != UNZ_OK) return 1;
            unz_file_info64 fi; unzGetCurrentFileInfo64(u, &fi, NULL, 0, NULL, 0, NULL, 0);
            char *b = malloc(fi.uncompressed_size);
            unzOpenCurrentFile(u);
            size_t k = 0; int r;
            while ((r = unzReadCurrentFile(u, b + k, (unsigned)(fi.uncompressed_size - k > (1u << 30) ? 1u << 30 : fi.uncompressed_size - k))) > 0) k += r;
            if (unzCloseCurrentFile(u) != UNZ_OK) return 1; /* CRC checked here */
            unzClose(u); n = (k - 128) / 4; free(b);
        } else if (!strcmp(mode, "read-libzip")) {
            int ze; zip_t *z = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
            if (!z) { fprintf(stderr, "zip_open %d\n", ze); return 1; }
            zip_stat_t st; zip_stat(z, "attentions.npy", 0, &st);
            char *b = malloc(st.size);
            zip_file_t *f = zip_fopen(z, "attentions.npy", 0);
            zip_int64_t k = zip_fread(f, b, st.size);
            if (k != (zip_int64_t)st.size || zip_fclose(f)) return 1;
            zip_close(z); n = (st.size - 128) / 4; free(b);
        }
        double t = now() - t0;
        printf("%-18s %6.0f MB  %.3f s  %6.0f MB/s  peak RSS %ld MB\n", mode, n * 4 / 1e6, t, n * 4 / 1e6 / t, rss_mb());
    }
    return 0;
}

static int hostile(int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        const char *p = argv[i];
        int ze; zip_t *z = zip_open(p, ZIP_RDONLY | ZIP_CHECKCONS, &ze);
        char lz[200];
        if (!z) { zip_error_t e; zip_error_init_with_code(&e, ze); snprintf(lz, sizeof lz, "refused at open: %s", zip_error_strerror(&e)); }
        else {
            zip_stat_t st; zip_int64_t n = zip_get_num_entries(z, 0);
            zip_stat(z, "attentions.npy", 0, &st);
            zip_file_t *f = zip_fopen(z, "attentions.npy", 0);
            char *b = malloc(st.size + 1); zip_int64_t k = f ? zip_fread(f, b, st.size) : -1;
            int c = f ? zip_fclose(f) : -1;
            snprintf(lz, sizeof lz, "%s (entries %lld, size %llu comp %llu, read %lld, %s)", (k == (zip_int64_t)st.size && !c) ? "ACCEPTED" : "refused at read", (long long)n, (unsigned long long)st.size, (unsigned long long)st.comp_size, (long long)k, zip_strerror(z));
            if (k > 24 && !strncmp(b + 1, "NUMPY", 5)) { float v; memcpy(&v, b + k - 4, 4); snprintf(lz + strlen(lz), sizeof lz - strlen(lz), " last=%g", v); }
            free(b); zip_close(z);
        }
        char mz[200];
        unzFile u = unzOpen64(p);
        if (!u) snprintf(mz, sizeof mz, "refused at open");
        else if (unzLocateFile(u, "attentions.npy", 1) != UNZ_OK) snprintf(mz, sizeof mz, "refused at locate");
        else {
            unz_file_info64 fi; unzGetCurrentFileInfo64(u, &fi, NULL, 0, NULL, 0, NULL, 0);
            char *b = malloc(fi.uncompressed_size + 1); int r = unzOpenCurrentFile(u), k = 0, m;
            if (r == UNZ_OK) while ((m = unzReadCurrentFile(u, b + k, (unsigned)(fi.uncompressed_size - k))) > 0) k += m; else m = r;
            int c = unzCloseCurrentFile(u);
            snprintf(mz, sizeof mz, "%s (size %llu, read %d, last %d, close %d)", (m == 0 && c == UNZ_OK && (unsigned)k == fi.uncompressed_size) ? "ACCEPTED" : "refused at read", (unsigned long long)fi.uncompressed_size, k, m, c);
            if (k > 24 && !strncmp(b + 1, "NUMPY", 5)) { float v; memcpy(&v, b + k - 4, 4); snprintf(mz + strlen(mz), sizeof mz - strlen(mz), " last=%g", v); }
            free(b); unzClose(u);
        }
        const char *base = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
        printf("%-16s libzip:  %s\n%-16s minizip: %s\n", base, lz, "", mz);
    }
    return 0;
}

static int many(const char *lib, const char *path) {
    struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
    long long n = -1;
    if (!strcmp(lib, "libzip")) { int e; zip_t *z = zip_open(path, ZIP_RDONLY | ZIP_CHECKCONS, &e); n = z ? zip_get_num_entries(z, 0) : -e; }
    else { unzFile u = unzOpen64(path); unz_global_info64 g; unzGetGlobalInfo64(u, &g); n = g.number_entry; unzLocateFile(u, "attentions.npy", 1); }
    clock_gettime(CLOCK_MONOTONIC, &b);
    struct rusage r; getrusage(RUSAGE_SELF, &r);
    printf("%s: %lld entries, open %.3f s, peak RSS %ld MB\n", lib, n, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) * 1e-9, r.ru_maxrss / 1024);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: npz_zip_libs write-own|write-minizip|write-libzip|write-libzip-copy|read-own|read-minizip|read-libzip PATH | hostile FILES... | many libzip|minizip PATH\n");
        return 2;
    }
    if (!strcmp(argv[1], "hostile")) return hostile(argc - 2, argv + 2);
    if (!strcmp(argv[1], "many")) return argc < 4 ? 2 : many(argv[2], argv[3]);
    return bench(argv[1], argv[2]);
}
