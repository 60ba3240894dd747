/* tr_ops.c — kernels of the training pass (see tr_ops.h): sgemm-based linear maps,
 * LayerNorm, activations and their derivatives, cross-entropy and dropout masks. */
#include "train/tr_ops.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void tro_linear_fwd(float *y, const float *x, const float *w, const float *b, int N, int Ni, int No) {
    float beta = 0.0f;
    if (b) {
        for (int n = 0; n < N; n++) memcpy(y + (size_t)n * No, b, (size_t)No * sizeof(float));
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, No, Ni, 1.0f, x, Ni, w, Ni, beta, y, No);
}

void tro_linear_bwd(float *dx, int accum, float *dw, float *db, const float *dy, const float *x,
                    const float *w, const float *ones, int N, int Ni, int No) {
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, Ni, No, 1.0f, dy, No, w, Ni,
                    accum ? 1.0f : 0.0f, dx, Ni);
    if (dw) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, No, Ni, N, 1.0f, dy, No, x, Ni, 1.0f, dw, Ni);
    if (db) cblas_sgemv(CblasRowMajor, CblasTrans, N, No, 1.0f, dy, No, ones, 1, 1.0f, db, 1);
}

void tro_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *g,
                       const float *b, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *r = x + (size_t)n * C;
        float *o = y + (size_t)n * C;
        double m = 0.0, v = 0.0;
        for (int i = 0; i < C; i++) m += r[i];
        m /= C;
        for (int i = 0; i < C; i++) {
            double d = r[i] - m;
            v += d * d;
        }
        v /= C;
        float s = (float)(1.0 / sqrt(v + (double)eps));
        float fm = (float)m;
        mean[n] = fm;
        rstd[n] = s;
        for (int i = 0; i < C; i++) o[i] = (r[i] - fm) * s * g[i] + b[i];
    }
}

void tro_layernorm_bwd(float *dx, float *dg, float *db, const float *dy, const float *x,
                       const float *mean, const float *rstd, const float *g, int N, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *dr = dy + (size_t)n * C, *r = x + (size_t)n * C;
        float *o = dx + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        double sum_dn = 0.0, sum_dnx = 0.0;
        for (int i = 0; i < C; i++) {
            float dn = dr[i] * g[i];
            sum_dn += dn;
            sum_dnx += dn * ((r[i] - m) * s);
        }
        float a = (float)(sum_dn / C), c = (float)(sum_dnx / C);
        for (int i = 0; i < C; i++) {
            float xh = (r[i] - m) * s;
            o[i] = s * (dr[i] * g[i] - a - xh * c);
        }
    }
    if (!dg && !db) return;
    /* parameter gradients: a reduction over rows, parallel over columns */
#pragma omp parallel for schedule(static)
    for (int i = 0; i < C; i++) {
        float sg = 0.0f, sb = 0.0f;
        for (int n = 0; n < N; n++) {
            float d = dy[(size_t)n * C + i];
            sg += d * (x[(size_t)n * C + i] - mean[n]) * rstd[n];
            sb += d;
        }
        if (dg) dg[i] += sg;
        if (db) db[i] += sb;
    }
}

/* gelu(x) = x Phi(x) (Hendrycks & Gimpel 2016), Phi via erf; derivative
 * Phi(x) + x phi(x). gelu_new: 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3),
 * derivative 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi)(1 + 3 * 0.044715 x^2). */
#define TRO_SQRT1_2 0.70710678118654752f
#define TRO_INV_SQRT_2PI 0.39894228040143268f
#define TRO_SQRT_2_PI 0.79788456080286536f

void tro_act_fwd(as_act a, float *y, const float *x, size_t n) {
    ptrdiff_t N = (ptrdiff_t)n;
    switch (a) {
    case ACT_GELU:
#pragma omp parallel for schedule(static)
        for (ptrdiff_t i = 0; i < N; i++) y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * TRO_SQRT1_2));
        break;
    case ACT_GELU_NEW:
#pragma omp parallel for schedule(static)
        for (ptrdiff_t i = 0; i < N; i++) {
            float v = x[i];
            y[i] = 0.5f * v * (1.0f + tanhf(TRO_SQRT_2_PI * (v + 0.044715f * v * v * v)));
        }
        break;
    case ACT_RELU:
        for (ptrdiff_t i = 0; i < N; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    }
}

void tro_act_bwd(as_act a, float *d, const float *x, size_t n) {
    ptrdiff_t N = (ptrdiff_t)n;
    switch (a) {
    case ACT_GELU:
#pragma omp parallel for schedule(static)
        for (ptrdiff_t i = 0; i < N; i++) {
            float v = x[i];
            float cdf = 0.5f * (1.0f + erff(v * TRO_SQRT1_2));
            float pdf = TRO_INV_SQRT_2PI * expf(-0.5f * v * v);
            d[i] *= cdf + v * pdf;
        }
        break;
    case ACT_GELU_NEW:
#pragma omp parallel for schedule(static)
        for (ptrdiff_t i = 0; i < N; i++) {
            float v = x[i];
            float th = tanhf(TRO_SQRT_2_PI * (v + 0.044715f * v * v * v));
            float du = TRO_SQRT_2_PI * (1.0f + 3.0f * 0.044715f * v * v);
            d[i] *= 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
        }
        break;
    case ACT_RELU:
        for (ptrdiff_t i = 0; i < N; i++) d[i] = x[i] > 0.0f ? d[i] : 0.0f;
        break;
    }
}

double tro_xent(float *dlogits, const float *logits, const int32_t *targets, int N, int C,
                float scale) {
    double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * C;
        float *d = dlogits + (size_t)n * C;
        float mx = l[0];
        for (int c = 1; c < C; c++) mx = l[c] > mx ? l[c] : mx;
        double sum = 0.0;
        for (int c = 0; c < C; c++) sum += exp((double)(l[c] - mx));
        double lse = log(sum) + mx;
        total += lse - l[targets[n]];
        for (int c = 0; c < C; c++) d[c] = scale * (float)exp((double)l[c] - lse);
        d[targets[n]] -= scale;
    }
    return total;
}

/* splitmix64 finaliser (Steele et al. 2014) as a counter-based hash: element idx of
 * a site keeps with probability 1 - p, independent of threads and call order. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t tro_drop_key(uint64_t seed, uint32_t site) { return mix64(seed ^ mix64((uint64_t)site + 0x632be59bd9b4e019ULL)); }

int tro_drop_keep_k(uint64_t key, uint64_t idx, float p) {
    uint64_t h = mix64(key + idx * 0x9e3779b97f4a7c15ULL);
    return (float)(h >> 40) * (1.0f / 16777216.0f) >= p; /* uniform [0, 1) with 24 bits */
}

int tr_dropout_keep(uint64_t seed, uint32_t site, uint64_t idx, float p) {
    return tro_drop_keep_k(tro_drop_key(seed, site), idx, p);
}

void tro_dropout(float *x, size_t n, float p, uint64_t seed, uint32_t site) {
    if (p <= 0.0f) return;
    float s = 1.0f / (1.0f - p);
    uint64_t key = tro_drop_key(seed, site);
    ptrdiff_t N = (ptrdiff_t)n;
#pragma omp parallel for schedule(static)
    for (ptrdiff_t i = 0; i < N; i++) x[i] = tro_drop_keep_k(key, (uint64_t)i, p) ? x[i] * s : 0.0f;
}
