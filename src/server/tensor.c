/* tensor.c — writes the binary tensor container described in tensor.h. */
#include "server/tensor.h"

#include <math.h>
#include <string.h>

int srv_tb_dtype_parse(const char *s) {
    if (!s || !strcmp(s, "f16")) return TB_F16;
    if (!strcmp(s, "f32")) return TB_F32;
    if (!strcmp(s, "u8")) return TB_U8;
    return -1;
}

const char *srv_tb_dtype_name(srv_tb_dtype d) {
    return d == TB_F32 ? "f32" : d == TB_F16 ? "f16" : "u8";
}

static size_t elem_size(srv_tb_dtype d) { return d == TB_F32 ? 4 : d == TB_F16 ? 2 : 1; }

static void put_u32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

/* Writes the n floats of t's parts into dst as t->dtype. lo/scale: u8 mapping. */
static void encode(const srv_tb_tensor *t, unsigned char *dst, float lo, float scale) {
    size_t k = 0;
    for (int p = 0; p < t->n_parts; p++) {
        const float *src = t->parts[p];
        for (size_t i = 0; i < t->part_len; i++, k++) {
            float v = src[i];
            if (t->dtype == TB_F32) {
                uint32_t u;
                memcpy(&u, &v, 4);
                put_u32(dst + 4 * k, u);
            } else if (t->dtype == TB_F16) {
                uint16_t h = as_f32_to_f16(v);
                dst[2 * k] = (unsigned char)h;
                dst[2 * k + 1] = (unsigned char)(h >> 8);
            } else {
                float q = scale > 0 && isfinite(v) ? (v - lo) / scale : 0.0f;
                q = q < 0 ? 0 : q > 255 ? 255 : q;
                dst[k] = (unsigned char)lrintf(q);
            }
        }
    }
}

/* min/max over finite values (0, 0 when there are none). */
static void range(const srv_tb_tensor *t, float *lo, float *hi) {
    float a = INFINITY, b = -INFINITY;
    for (int p = 0; p < t->n_parts; p++)
        for (size_t i = 0; i < t->part_len; i++) {
            float v = t->parts[p][i];
            if (!isfinite(v)) continue;
            if (v < a) a = v;
            if (v > b) b = v;
        }
    if (a > b) a = b = 0;
    *lo = a;
    *hi = b;
}

as_status srv_tb_write(const srv_tb_tensor *t, int n, json_t *meta, unsigned char **out,
                       size_t *out_len, as_error *err) {
    ASSERT(n > 0 && n <= SRV_TB_MAX_TENSORS);
    *out = NULL;
    *out_len = 0;
    as_status s = AS_ERR_INTERNAL;
    char *hdr = NULL;
    unsigned char *buf = NULL;
    float lo[SRV_TB_MAX_TENSORS] = {0}, scale[SRV_TB_MAX_TENSORS] = {0};
    json_t *root = json_object(), *arr = json_array();
    if (!root || !arr) goto cleanup;
    json_object_set_new(root, "version", json_integer(1));
    if (meta) json_object_set(root, "meta", meta);
    json_object_set(root, "tensors", arr);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t cnt = as_mul_size((size_t)t[i].n_parts, t[i].part_len);
        size_t nb = as_mul_size(cnt, elem_size(t[i].dtype));
        if (!nb) {
            as_err_set(err, AS_ERR_INTERNAL, "tensor %s: size overflow", t[i].name);
            goto cleanup;
        }
        json_t *o = json_object(), *shape = json_array();
        for (int d = 0; d < t[i].ndim; d++) json_array_append_new(shape, json_integer(t[i].shape[d]));
        json_object_set_new(o, "name", json_string(t[i].name));
        json_object_set_new(o, "dtype", json_string(srv_tb_dtype_name(t[i].dtype)));
        json_object_set_new(o, "shape", shape);
        json_object_set_new(o, "offset", json_integer((json_int_t)off));
        json_object_set_new(o, "nbytes", json_integer((json_int_t)nb));
        if (t[i].dtype == TB_U8) {
            float hi;
            range(&t[i], &lo[i], &hi);
            scale[i] = (hi - lo[i]) / 255.0f;
            json_object_set_new(o, "scale", json_real(scale[i]));
            json_object_set_new(o, "zero", json_real(lo[i]));
        }
        json_array_append_new(arr, o);
        off += (nb + 7) & ~(size_t)7;
    }
    hdr = json_dumps(root, JSON_COMPACT);
    if (!hdr) goto cleanup;
    size_t hlen = strlen(hdr), padded = hlen + ((8 - (8 + hlen) % 8) % 8);
    if (padded > UINT32_MAX || off > SIZE_MAX - 8 - padded) goto cleanup;
    size_t total = 8 + padded + off;
    buf = calloc(1, total);
    if (!buf) goto cleanup;
    memcpy(buf, "ASTB", 4);
    put_u32(buf + 4, (uint32_t)padded);
    memcpy(buf + 8, hdr, hlen);
    memset(buf + 8 + hlen, ' ', padded - hlen);
    size_t o = 8 + padded;
    for (int i = 0; i < n; i++) {
        encode(&t[i], buf + o, lo[i], scale[i]);
        size_t nb = t[i].n_parts * t[i].part_len * elem_size(t[i].dtype);
        o += (nb + 7) & ~(size_t)7;
    }
    *out = buf;
    *out_len = total;
    buf = NULL;
    s = AS_OK;
cleanup:
    if (s && err && !err->msg[0]) as_err_set(err, AS_ERR_INTERNAL, "out of memory building a tensor response");
    free(buf);
    free(hdr);
    json_decref(arr);
    json_decref(root);
    return s;
}
