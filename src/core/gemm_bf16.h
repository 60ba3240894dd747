/* gemm_bf16.h — y = x W^T with x (M, K) and W (N, K) both BF16, row-major with K
 * contiguous (Hugging Face's [out, in] linear weights), products summed in F32: the
 * arithmetic of precision bf16. On CPUs with AVX-512 BF16 (vdpbf16ps: 32 products per
 * instruction, twice the F32 FMA rate) a register-blocked kernel; elsewhere the BF16
 * values are widened to F32 in blocks and multiplied by sgemm (same inputs, slower).
 * Also the F32 <-> BF16 conversions (round to nearest even, as torch), plain and transposed.
 * Also dx = dy W with W (K, N) row-major, on the same hardware (interleaved pairs of W's
 * rows packed block by block, as the dot-product instruction reads them), and y = x W^T
 * from W packed once into that layout (the fastest form: the forward's products).
 * Also the F32 forward's products on AVX-512F, on the same tiles: F32 x times BF16 weights
 * (packed once or block by block per call) and F32 x times F32 weights ([out, in] packed
 * per call, [in, out] read in place), each sum in order along K.
 * What it does not: threads (callers split N), other transposed layouts, the backward's
 * F32 products (sgemm, core/gemm_small.c).
 */
#ifndef AS_GEMM_BF16_H
#define AS_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

/* 1 when this CPU runs the AVX-512 BF16 kernel. */
int as_gemm_bf16_native(void);
/* Tests: on = 1 makes as_gemm_bf16_xwt take the widening fallback and the packed products
 * their scalar loops (not thread-safe). */
void as_gemm_bf16_force_fallback(int on);

/* y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n] when bias is non-NULL), m < M, n < N,
 * k < K; leading dimensions in elements. scratch: as_gemm_bf16_scratch(K) floats (the
 * widening fallback's blocks; unused by the native kernel). */
void as_gemm_bf16_xwt(int M, int N, int K, const uint16_t *x, size_t ldx, const uint16_t *w, size_t ldw,
                      const float *bias, float *y, size_t ldy, float *scratch);
size_t as_gemm_bf16_scratch(int K);

/* W (N, K) packed for as_gemm_bf16_xwt_packed: panels of 64 rows of W (the last padded
 * with zeros), each holding, for every pair of K values p, the 64 words W[n][2p] |
 * W[n][2p + 1] << 16 (an odd K's last pair padded with 0): the layout vdpbf16ps multiplies
 * by one broadcast pair of x, so no sum across lanes is needed. Sizes in 32-bit words. */
size_t as_gemm_bf16_packed_words(int N, int K);
void as_gemm_bf16_pack(const uint16_t *w, size_t ldw, int N, int K, uint32_t *pk);
/* y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]) for the columns c0 <= n < c1 (c1 <= W's N),
 * from pk = as_gemm_bf16_pack of W; each output sums its pairs in order along K (the value
 * does not depend on c0, c1 or M). Without the AVX-512 BF16 kernel, scalar loops adding
 * each pair's products as vdpbf16ps does (for tests: pack only where as_gemm_bf16_native). */
void as_gemm_bf16_xwt_packed(int M, int c0, int c1, int K, const uint16_t *x, size_t ldx, const uint32_t *pk,
                             const float *bias, float *y, size_t ldy);

/* 1 when this CPU runs as_gemm_f32_xwt_packed's AVX-512 kernel. */
int as_gemm_f32_packed_native(void);
/* as_gemm_bf16_xwt_packed with F32 x: y[m, n] = sum_k x[m, k] w[n, k] (+ bias[n]) in F32
 * arithmetic, each product a fused multiply-add of x by the BF16 weight widened (exact),
 * in order along K from the bias or 0: the F32 product of a BF16 checkpoint's weights
 * without an F32 copy of them. The same value for any c0, c1, M and on either path
 * (AVX-512F, or scalar fmaf loops). */
void as_gemm_f32_xwt_packed(int M, int c0, int c1, int K, const float *x, size_t ldx, const uint32_t *pk,
                            const float *bias, float *y, size_t ldy);
/* The same product on W (N, K) BF16 row-major as stored (y[m, n] = sum_k x[m, k] w[n, k]
 * (+ bias[n]), n < N): blocks of W packed per call into scratch
 * (as_gemm_f32_xwt_bf16_scratch(K) words), the same values as as_gemm_f32_xwt_packed on W
 * packed whole, bit for bit (scalar fmaf loops without AVX-512F). */
void as_gemm_f32_xwt_bf16(int M, int N, int K, const float *x, size_t ldx, const uint16_t *w, size_t ldw,
                          const float *bias, float *y, size_t ldy, uint32_t *scratch);
size_t as_gemm_f32_xwt_bf16_scratch(int K);
/* y[m, n] = sum_k x[m, k] W[n][k] (+ bias[n]), n < N, in F32 from F32 weights: W (N, K)
 * row-major (in_out = 0, nn.Linear's [out, in]; blocks of 64 rows packed per call into
 * scratch, as_gemm_f32_xwt_scratch(K) floats) or W stored (K, N) (in_out = 1, GPT-2's
 * Conv1D: w[k * ldw + n], read as it lies; scratch unused, may be NULL). One fused
 * multiply-add per product, in order along K from the bias or 0 (so the value does not depend on how a caller splits N),
 * AVX-512F 6 x 64 tiles, or scalar fmaf loops. */
void as_gemm_f32_xwt(int M, int N, int K, const float *x, size_t ldx, const float *w, size_t ldw, int in_out,
                     const float *bias, float *y, size_t ldy, float *scratch);
size_t as_gemm_f32_xwt_scratch(int K);
/* y[m, n] (+)= sum_k x[m, k] w[k, n], m < M, n < N, k < K, with W (K, N) row-major
 * (an [out, in] weight read as is: the input gradient dx = dy W of y = x W^T); products
 * summed in F32 along k in order (each output's sum does not depend on how a caller
 * splits N). accumulate = 0 overwrites y. scratch: as_gemm_bf16_xw_scratch(N) floats
 * (the native kernel's interleaved blocks of W, or the fallback's widened blocks). */
void as_gemm_bf16_xw(int M, int N, int K, const uint16_t *x, size_t ldx, const uint16_t *w, size_t ldw, float *y,
                     size_t ldy, int accumulate, float *scratch);
size_t as_gemm_bf16_xw_scratch(int N);

/* dst[i] = BF16 of src[i] (round to nearest even; NaN stays NaN), i < n. */
void as_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
/* dst[c * ldd + r] = BF16 of src[r * lds + c], r < rows, c < cols: a (rows, cols) F32
 * matrix rounded and transposed into a (cols, rows) BF16 one. */
void as_f32_to_bf16_t(uint16_t *dst, size_t ldd, const float *src, size_t lds, int rows, int cols);
/* dst[i] = src[i] widened to F32 (exact), i < n. */
void as_bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);

#endif
