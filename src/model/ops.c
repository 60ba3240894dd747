/* ops.c — element-wise and row operations, forward next to backward (see ops.h).
 *
 * Vectorisation: the loops use the branch-free exp/erf/tanh of core/fastmath.h so that
 * GCC vectorises them; the compute-bound ones (GELU and its derivative, softmax) are
 * compiled twice, for the baseline ISA and AVX2 + FMA (AS_KERNEL_* in fastmath.h).
 */
#include "model/ops.h"

#include "core/fastmath.h"

#include <float.h>
#include <math.h>
#include <string.h>

#define OPS_SQRT1_2 0.70710678118654752f
#define OPS_INV_SQRT_2PI 0.39894228040143268f
#define OPS_SQRT_2_PI 0.79788456080286536f

/* ---- LayerNorm ---- */

void op_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *g, const float *b, int N,
                      int C, float eps) {
    for (int n = 0; n < N; n++) {
        const float *r = x + (size_t)n * C;
        float *o = y + (size_t)n * C;
        float m = 0.0f, v = 0.0f;
#pragma omp simd reduction(+ : m)
        for (int i = 0; i < C; i++) m += r[i];
        m /= (float)C;
#pragma omp simd reduction(+ : v)
        for (int i = 0; i < C; i++) v += (r[i] - m) * (r[i] - m);
        v /= (float)C;
        float s = (float)(1.0 / sqrt((double)v + (double)eps));
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = s;
        for (int i = 0; i < C; i++) o[i] = (r[i] - m) * s * g[i] + b[i];
    }
}

void op_layernorm_dx(float *dx, const float *dy, const float *x, const float *mean, const float *rstd,
                     const float *g, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *dr = dy + (size_t)n * C, *r = x + (size_t)n * C;
        float *o = dx + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        float sum_dn = 0.0f, sum_dnx = 0.0f;
#pragma omp simd reduction(+ : sum_dn, sum_dnx)
        for (int i = 0; i < C; i++) {
            float dn = dr[i] * g[i];
            sum_dn += dn;
            sum_dnx += dn * ((r[i] - m) * s);
        }
        float a = sum_dn / (float)C, c = sum_dnx / (float)C;
        for (int i = 0; i < C; i++) o[i] = s * (dr[i] * g[i] - a - (r[i] - m) * s * c);
    }
}

void op_layernorm_dparams(float *dg, float *db, const float *dy, const float *x, const float *mean,
                          const float *rstd, int N, int C, int c0, int c1) {
    for (int n = 0; n < N; n++) {
        const float *dr = dy + (size_t)n * C, *r = x + (size_t)n * C;
        float m = mean[n], s = rstd[n];
        if (dg)
            for (int i = c0; i < c1; i++) dg[i] += dr[i] * ((r[i] - m) * s);
        if (db)
            for (int i = c0; i < c1; i++) db[i] += dr[i];
    }
}

/* ---- RMSNorm ---- */

void op_rmsnorm_fwd(float *y, float *rstd, const float *x, const float *g, int N, int C, float eps, int add_one) {
    float one = add_one ? 1.0f : 0.0f;
    for (int n = 0; n < N; n++) {
        const float *r = x + (size_t)n * C;
        float *o = y + (size_t)n * C;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < C; i++) ss += r[i] * r[i];
        float s = 1.0f / sqrtf(ss / (float)C + eps);
        if (rstd) rstd[n] = s;
        for (int i = 0; i < C; i++) o[i] = (r[i] * s) * (one + g[i]);
    }
}

void op_rmsnorm_dx(float *dx, const float *dy, const float *x, const float *rstd, const float *g, int N, int C,
                   int add_one) {
    float one = add_one ? 1.0f : 0.0f;
    for (int n = 0; n < N; n++) {
        const float *dr = dy + (size_t)n * C, *r = x + (size_t)n * C;
        float *o = dx + (size_t)n * C;
        float s = rstd[n], sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int i = 0; i < C; i++) sum += dr[i] * (one + g[i]) * (r[i] * s);
        float c = sum / (float)C;
        for (int i = 0; i < C; i++) o[i] = s * (dr[i] * (one + g[i]) - r[i] * s * c);
    }
}

void op_rmsnorm_dg(float *dg, const float *dy, const float *x, const float *rstd, int N, int C, int c0, int c1) {
    for (int n = 0; n < N; n++) {
        const float *dr = dy + (size_t)n * C, *r = x + (size_t)n * C;
        float s = rstd[n];
        for (int i = c0; i < c1; i++) dg[i] += dr[i] * (r[i] * s);
    }
}

/* ---- activations ---- */

/* gelu(x) = x Phi(x) (Hendrycks & Gimpel 2016), Phi(x) = (1 + erf(x / sqrt 2)) / 2;
 * derivative Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi), where
 * exp(-x^2 / 2) = exp(-u^2) at u = x / sqrt 2 is also the exponential inside erf(u)
 * (Abramowitz & Stegun 7.1.26), so one exp serves both terms. */
AS_KERNEL_BODY void gelu_fwd_body(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = 0.5f * x[i] * (1.0f + as_fast_erff(x[i] * OPS_SQRT1_2));
}

AS_KERNEL_BODY void gelu_bwd_body(float *d, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i], u = v * OPS_SQRT1_2;
        float e = as_fast_expf(-u * u);
        float cdf = 0.5f * (1.0f + as_fast_erff_e(u, e));
        d[i] *= cdf + v * (OPS_INV_SQRT_2PI * e);
    }
}

/* gelu_new: 0.5 x (1 + tanh(u)), u = sqrt(2/pi)(x + 0.044715 x^3), derivative
 * 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi)(1 + 3 * 0.044715 x^2). */
AS_KERNEL_BODY void gelu_tanh_fwd_body(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = 0.5f * v * (1.0f + as_fast_tanhf(OPS_SQRT_2_PI * (v + 0.044715f * v * v * v)));
    }
}

AS_KERNEL_BODY void gelu_tanh_bwd_body(float *d, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float th = as_fast_tanhf(OPS_SQRT_2_PI * (v + 0.044715f * v * v * v));
        float du = OPS_SQRT_2_PI * (1.0f + 3.0f * 0.044715f * v * v);
        d[i] *= 0.5f * (1.0f + th) + 0.5f * v * (1.0f - th * th) * du;
    }
}

/* silu(x) = x sigmoid(x) (Elfwing et al. 2018); silu' = s (1 + x (1 - s)), s = sigmoid(x). */
AS_KERNEL_BODY void silu_fwd_body(float *y, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + as_fast_expf(-x[i]));
}

AS_KERNEL_BODY void silu_bwd_body(float *d, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + as_fast_expf(-x[i]));
        d[i] *= s * (1.0f + x[i] * (1.0f - s));
    }
}

/* gelu and its derivative from one exp per element (the backward needs both). */
AS_KERNEL_BODY void gelu_fwd_deriv_body(float *y, float *dd, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float v = x[i], u = v * OPS_SQRT1_2;
        float e = as_fast_expf(-u * u);
        float cdf = 0.5f * (1.0f + as_fast_erff_e(u, e));
        y[i] = v * cdf;
        dd[i] = cdf + v * (OPS_INV_SQRT_2PI * e);
    }
}

AS_KERNEL_SIMD(gelu_fwd_deriv, (float *y, float *dd, const float *x, size_t n), (y, dd, x, n))
AS_KERNEL_SIMD(gelu_fwd, (float *y, const float *x, size_t n), (y, x, n))
AS_KERNEL_SIMD(gelu_bwd, (float *d, const float *x, size_t n), (d, x, n))
AS_KERNEL_SIMD(gelu_tanh_fwd, (float *y, const float *x, size_t n), (y, x, n))
AS_KERNEL_SIMD(gelu_tanh_bwd, (float *d, const float *x, size_t n), (d, x, n))
AS_KERNEL_SIMD(silu_fwd, (float *y, const float *x, size_t n), (y, x, n))
AS_KERNEL_SIMD(silu_bwd, (float *d, const float *x, size_t n), (d, x, n))

void op_act_fwd(as_act a, float *y, const float *x, size_t n) {
    switch (a) {
    case ACT_GELU: AS_KERNEL_RUN(gelu_fwd, y, x, n); break;
    case ACT_GELU_NEW: AS_KERNEL_RUN(gelu_tanh_fwd, y, x, n); break;
    case ACT_SILU: AS_KERNEL_RUN(silu_fwd, y, x, n); break;
    case ACT_RELU:
        for (size_t i = 0; i < n; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    }
}

void op_act_fwd_deriv(as_act a, float *y, float *dd, const float *x, size_t n) {
    if (a == ACT_GELU) {
        AS_KERNEL_RUN(gelu_fwd_deriv, y, dd, x, n);
        return;
    }
    op_act_fwd(a, y, x, n);
    for (size_t i = 0; i < n; i++) dd[i] = 1.0f;
    op_act_bwd(a, dd, x, n);
}

void op_act_bwd(as_act a, float *d, const float *x, size_t n) {
    switch (a) {
    case ACT_GELU: AS_KERNEL_RUN(gelu_bwd, d, x, n); break;
    case ACT_GELU_NEW: AS_KERNEL_RUN(gelu_tanh_bwd, d, x, n); break;
    case ACT_SILU: AS_KERNEL_RUN(silu_bwd, d, x, n); break;
    case ACT_RELU:
        for (size_t i = 0; i < n; i++) d[i] = x[i] > 0.0f ? d[i] : 0.0f;
        break;
    }
}

/* in blocks of 256 so that act(gate) stays in a stack buffer */
void op_glu_fwd(as_act a, float *y, const float *gate, const float *up, size_t n) {
    float buf[256];
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        size_t m = n - i0 < 256 ? n - i0 : 256;
        op_act_fwd(a, buf, gate + i0, m);
        for (size_t i = 0; i < m; i++) y[i0 + i] = buf[i] * up[i0 + i];
    }
}

void op_glu_bwd(as_act a, float *dgate, float *dup, const float *dy, const float *gate, const float *up, size_t n) {
    float buf[256];
    for (size_t i0 = 0; i0 < n; i0 += 256) {
        size_t m = n - i0 < 256 ? n - i0 : 256;
        op_act_fwd(a, buf, gate + i0, m);
        for (size_t i = 0; i < m; i++) {
            float g = dy[i0 + i];
            dup[i0 + i] = g * buf[i];
            buf[i] = g * up[i0 + i];
        }
        op_act_bwd(a, buf, gate + i0, m);
        memcpy(dgate + i0, buf, m * sizeof(float));
    }
}

/* ---- softmax ---- */

AS_KERNEL_BODY void softmax_body(float *s, const int32_t *keep, int N, int C) {
    for (int n = 0; n < N; n++) {
        float *r = s + (size_t)n * C;
        float mx = -FLT_MAX;
        int kept = C;
        if (keep) {
            kept = 0;
            for (int c = 0; c < C; c++) kept += keep[c] != 0;
#pragma omp simd reduction(max : mx)
            for (int c = 0; c < C; c++) {
                float v = keep[c] ? r[c] : -FLT_MAX;
                mx = v > mx ? v : mx;
            }
        } else {
#pragma omp simd reduction(max : mx)
            for (int c = 0; c < C; c++) mx = r[c] > mx ? r[c] : mx;
        }
        float sum = 0.0f;
        if (keep) {
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < C; c++) {
                float e = keep[c] ? as_fast_expf(r[c] - mx) : 0.0f;
                r[c] = e;
                sum += e;
            }
        } else {
#pragma omp simd reduction(+ : sum)
            for (int c = 0; c < C; c++) {
                float e = as_fast_expf(r[c] - mx);
                r[c] = e;
                sum += e;
            }
        }
        float inv = kept > 0 && sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int c = 0; c < C; c++) r[c] *= inv;
    }
}
AS_KERNEL_SIMD(softmax, (float *s, const int32_t *keep, int N, int C), (s, keep, N, C))

void op_softmax_rows(float *s, const int32_t *keep, int N, int C) { AS_KERNEL_RUN(softmax, s, keep, N, C); }

/* ---- rotary position embedding ---- */

void op_rope_table(float *cs, int p0, int dp, int T, int still, const float *inv_freq, int R, float mscale) {
    int half = R / 2;
    for (int t = 0; t < T; t++) {
        float *c = cs + (size_t)t * R, *s = c + half;
        for (int i = 0; i < half; i++) {
            /* HF: freqs = pos * inv_freq in float32, then cos/sin of that float */
            float ang = (float)(still ? 0 : p0 + dp * t) * inv_freq[i];
            c[i] = cosf(ang) * mscale;
            s[i] = sinf(ang) * mscale;
        }
    }
}

void op_rope_fwd(float *x, int T, size_t ld, int nh, int Dh, int R, const float *cs) {
    int half = R / 2;
    for (int t = 0; t < T; t++) {
        const float *c = cs + (size_t)t * R, *s = c + half;
        for (int h = 0; h < nh; h++) {
            float *v = x + (size_t)t * ld + (size_t)h * Dh;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * c[i] - b * s[i];
                v[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

void op_rope_bwd(float *dx, int T, size_t ld, int nh, int Dh, int R, const float *cs) {
    int half = R / 2;
    for (int t = 0; t < T; t++) {
        const float *c = cs + (size_t)t * R, *s = c + half;
        for (int h = 0; h < nh; h++) {
            float *v = dx + (size_t)t * ld + (size_t)h * Dh;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half];
                v[i] = a * c[i] + b * s[i];
                v[i + half] = b * c[i] - a * s[i];
            }
        }
    }
}

/* ---- dropout masks ---- */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t op_drop_key(uint64_t seed, uint32_t site) { return mix64(seed ^ mix64((uint64_t)site + 0x632be59bd9b4e019ULL)); }

int op_drop_keep(uint64_t key, uint64_t idx, float p) {
    uint64_t h = mix64(key + idx * 0x9e3779b97f4a7c15ULL);
    return (float)(h >> 40) * (1.0f / 16777216.0f) >= p; /* uniform [0, 1) with 24 bits */
}

void op_drop_mask(float *mask, size_t i0, size_t n, uint64_t key, float p) {
    float s = 1.0f / (1.0f - p);
    for (size_t i = 0; i < n; i++) mask[i] = op_drop_keep(key, (uint64_t)(i0 + i), p) ? s : 0.0f;
}

void op_mul(float *y, const float *m, size_t n) {
    for (size_t i = 0; i < n; i++) y[i] *= m[i];
}
