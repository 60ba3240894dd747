/* head_out.c — one head's rows of a layer's attention output projection as an F32
 * (Dh, D) matrix, and their Gram matrix (see head_out.h). Reads the bound weight views
 * (model.h lin_t).
 */
#include "model/head_out.h"

#include <cblas.h>
#include <string.h>

static float bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void model_head_out(const as_model *m, int l, int h, float *w) {
    const as_config *c = &m->cfg;
    AS_ASSERT(l >= 0 && l < c->n_layer && h >= 0 && h < c->n_head);
    const lin_t *o = &m->layers[l].o;
    const int D = o->n_out, Dh = c->d_head, n_in = o->n_in;
    AS_ASSERT(n_in == c->n_head * Dh);
    for (int r = 0; r < Dh; r++) {
        const int col = h * Dh + r; /* the input column of o that head h's dimension r feeds */
        float *dst = w + (size_t)r * D;
        if (o->in_out) { /* Conv1D: w (n_in, ldw), row col is W_o^h[r] */
            AS_ASSERT(o->w);
            memcpy(dst, o->w + (size_t)col * o->ldw, (size_t)D * sizeof(float));
        } else if (o->w) { /* nn.Linear: w (D, n_in) */
            for (int d = 0; d < D; d++) dst[d] = o->w[(size_t)d * n_in + col];
        } else {
            AS_ASSERT(o->wbf);
            for (int d = 0; d < D; d++) dst[d] = bf16_value(o->wbf[(size_t)d * n_in + col]);
        }
    }
}

void model_head_out_mul(const as_model *m, int l, int h, const float *X, int T, size_t ldx, float *Y, size_t ldy,
                        float *scratch) {
    const as_config *c = &m->cfg;
    AS_ASSERT(l >= 0 && l < c->n_layer && h >= 0 && h < c->n_head);
    const lin_t *o = &m->layers[l].o;
    const int D = o->n_out, Dh = c->d_head, n_in = o->n_in;
    AS_ASSERT(n_in == c->n_head * Dh);
    if (o->in_out && o->w) /* Conv1D: rows h Dh .. of w (n_in, ldw) */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, Dh, 1.0f, X, (int)ldx,
                    o->w + (size_t)h * Dh * o->ldw, o->ldw, 0.0f, Y, (int)ldy);
    else if (o->w) /* nn.Linear: columns h Dh .. of w (D, n_in), transposed */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, D, Dh, 1.0f, X, (int)ldx, o->w + (size_t)h * Dh, n_in,
                    0.0f, Y, (int)ldy);
    else {
        model_head_out(m, l, h, scratch);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, D, Dh, 1.0f, X, (int)ldx, scratch, D, 0.0f, Y,
                    (int)ldy);
    }
}

void model_head_out_gram(const as_model *m, int l, int h, float *scratch, float *G) {
    const as_config *c = &m->cfg;
    AS_ASSERT(l >= 0 && l < c->n_layer && h >= 0 && h < c->n_head);
    const lin_t *o = &m->layers[l].o;
    const int D = o->n_out, Dh = c->d_head, n_in = o->n_in;
    AS_ASSERT(n_in == c->n_head * Dh);
    if (o->in_out) { /* Conv1D: rows h Dh .. of w (n_in, ldw) are W_o^h (Dh, D) */
        AS_ASSERT(o->w);
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, Dh, D, 1.0f, o->w + (size_t)h * Dh * o->ldw, o->ldw,
                    0.0f, G, Dh);
    } else if (o->w) { /* nn.Linear: columns h Dh .. of w (D, n_in) are W_o^h^T (D, Dh) */
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, Dh, D, 1.0f, o->w + (size_t)h * Dh, n_in, 0.0f, G, Dh);
    } else {
        model_head_out(m, l, h, scratch);
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, Dh, D, 1.0f, scratch, D, 0.0f, G, Dh);
    }
    for (int a = 0; a < Dh; a++) /* the lower triangle from the upper */
        for (int b = 0; b < a; b++) G[(size_t)a * Dh + b] = G[(size_t)b * Dh + a];
}
