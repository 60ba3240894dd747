/* sha256.c — SHA-256 as specified in FIPS 180-4, sections 4.1.2, 4.2.2, 5.1.1, 6.2.
 * On x86-64 CPUs with the SHA extensions (Intel SHA-NI, AMD Zen) the compression runs
 * on them (sha256rnds2 / sha256msg1 / sha256msg2, as in Intel's "New Instructions
 * Supporting the Secure Hash Algorithm on Intel Architecture Processors", 2013), about
 * 5x the portable loop; the portable loop is used otherwise. Both are tested on the
 * FIPS 180-2 vectors (tests/unit/test_sha256.c). */
#include "analysis/sha256.h"
#include "core/file.h"

#include <errno.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define SHA_X86 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void block_portable(sha256_ctx *c, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = c->h[0], b = c->h[1], cc = c->h[2], d = c->h[3], e = c->h[4], f = c->h[5], g = c->h[6], h = c->h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = h + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & cc) ^ (b & cc));
        h = g;
        g = f;
        f = e;
        e = d + t1;
        d = cc;
        cc = b;
        b = a;
        a = t1 + t2;
    }
    c->h[0] += a; c->h[1] += b; c->h[2] += cc; c->h[3] += d;
    c->h[4] += e; c->h[5] += f; c->h[6] += g; c->h[7] += h;
}

#ifdef SHA_X86
/* One 64-byte block with the SHA extensions. The state is kept as the two vectors
 * the instructions use, ABEF and CDGH; W_g (words 4g..4g+3 of the message schedule) for
 * g >= 4 is msg2(msg1(W_g-4, W_g-3) + W[4g-7..4g-4], W_g-1). */
__attribute__((target("sha,sse4.1,ssse3"))) static void block_shani(sha256_ctx *c, const uint8_t *p) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i t = _mm_loadu_si128((const __m128i *)(const void *)&c->h[0]);  /* DCBA */
    __m128i s1 = _mm_loadu_si128((const __m128i *)(const void *)&c->h[4]); /* HGFE */
    t = _mm_shuffle_epi32(t, 0xB1);                                        /* CDAB */
    s1 = _mm_shuffle_epi32(s1, 0x1B);                                      /* EFGH */
    __m128i s0 = _mm_alignr_epi8(t, s1, 8);                                /* ABEF */
    s1 = _mm_blend_epi16(s1, t, 0xF0);                                     /* CDGH */
    __m128i abef = s0, cdgh = s1, w[4];
    for (int g = 0; g < 16; g++) {
        __m128i wg;
        if (g < 4) {
            wg = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(const void *)(p + 16 * g)), bswap);
        } else {
            __m128i a = _mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]);    /* W_g-4 + s0(W_g-3) */
            a = _mm_add_epi32(a, _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
            wg = _mm_sha256msg2_epu32(a, w[(g + 3) & 3]);
        }
        w[g & 3] = wg;
        __m128i m = _mm_add_epi32(wg, _mm_loadu_si128((const __m128i *)(const void *)&K[4 * g]));
        s1 = _mm_sha256rnds2_epu32(s1, s0, m);
        s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
    }
    s0 = _mm_add_epi32(s0, abef);
    s1 = _mm_add_epi32(s1, cdgh);
    t = _mm_shuffle_epi32(s0, 0x1B);   /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);  /* DCHG */
    s0 = _mm_blend_epi16(t, s1, 0xF0); /* DCBA */
    s1 = _mm_alignr_epi8(s1, t, 8);    /* HGFE */
    _mm_storeu_si128((__m128i *)(void *)&c->h[0], s0);
    _mm_storeu_si128((__m128i *)(void *)&c->h[4], s1);
}
#endif

int sha256_force_portable = 0;

static void block(sha256_ctx *c, const uint8_t *p) {
#ifdef SHA_X86
    if (!sha256_force_portable && __builtin_cpu_supports("sha") && __builtin_cpu_supports("sse4.1")) {
        block_shani(c, p);
        return;
    }
#endif
    block_portable(c, p);
}

void sha256_init(sha256_ctx *c) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, H0, sizeof H0);
    c->len = 0;
    c->nbuf = 0;
}

void sha256_update(sha256_ctx *c, const void *data, size_t n) {
    const uint8_t *p = data;
    c->len += n;
    while (n) {
        if (c->nbuf == 0 && n >= 64) {
            block(c, p);
            p += 64;
            n -= 64;
            continue;
        }
        size_t k = 64 - c->nbuf < n ? 64 - c->nbuf : n;
        memcpy(c->buf + c->nbuf, p, k);
        c->nbuf += k;
        p += k;
        n -= k;
        if (c->nbuf == 64) {
            block(c, c->buf);
            c->nbuf = 0;
        }
    }
}

void sha256_final_hex(sha256_ctx *c, char hex[65]) {
    uint64_t bits = c->len * 8;
    uint8_t pad = 0x80;
    sha256_update(c, &pad, 1);
    uint8_t z = 0;
    while (c->nbuf != 56) sha256_update(c, &z, 1);
    uint8_t L[8];
    for (int i = 0; i < 8; i++) L[i] = (uint8_t)(bits >> (56 - 8 * i));
    sha256_update(c, L, 8);
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", c->h[i]);
}

as_status sha256_file(sha256_ctx *c, const char *path, as_error *err) {
    FILE *f;
    as_status rc = as_file_fopen_regular(path, UINT64_MAX, &f, NULL, err);
    if (rc) return rc;
    uint8_t *buf = as_malloc(1 << 20);
    if (!buf) {
        fclose(f);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    size_t k;
    while ((k = fread(buf, 1, 1 << 20, f)) > 0) sha256_update(c, buf, k);
    int bad = ferror(f);
    free(buf);
    fclose(f);
    if (bad) return as_err_set(err, AS_ERR_INPUT, "%s: read error", path);
    return AS_OK;
}
