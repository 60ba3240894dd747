/* tensor.c — writes the binary tensor container described in tensor.h. */
#include "tensor.h"

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

static const float *part_of(const srv_tb_tensor *t, int p) {
    return t->part_fn ? t->part_fn(t->part_ctx, p) : t->parts[p];
}

/* Writes one element as t->dtype (elem_size bytes, little-endian). lo/scale: u8 mapping. */
static void encode_one(srv_tb_dtype dt, float v, float lo, float scale, unsigned char *dst) {
    if (dt == TB_F32) {
        uint32_t u;
        memcpy(&u, &v, 4);
        put_u32(dst, u);
    } else if (dt == TB_F16) {
        uint16_t h = as_f32_to_f16(v);
        dst[0] = (unsigned char)h;
        dst[1] = (unsigned char)(h >> 8);
    } else {
        float q = scale > 0 && isfinite(v) ? (v - lo) / scale : 0.0f;
        q = q < 0 ? 0 : q > 255 ? 255 : q;
        dst[0] = (unsigned char)lrintf(q);
    }
}

/* min/max over finite values (0, 0 when there are none). */
static void range(const srv_tb_tensor *t, float *lo, float *hi) {
    float a = INFINITY, b = -INFINITY;
    for (int p = 0; p < t->n_parts; p++) {
        const float *src = part_of(t, p);
        for (size_t i = 0; i < t->part_len; i++) {
            float v = src[i];
            if (!isfinite(v)) continue;
            if (v < a) a = v;
            if (v > b) b = v;
        }
    }
    if (a > b) a = b = 0;
    *lo = a;
    *hi = b;
}

static size_t pad8(size_t n) { return (n + 7) & ~(size_t)7; }

void srv_tb_plan_free(srv_tb_plan *p) {
    if (!p) return;
    free(p->head);
    memset(p, 0, sizeof *p);
}

as_status srv_tb_plan_init(srv_tb_plan *p, const srv_tb_tensor *t, int n, json_t *meta, as_error *err) {
    AS_ASSERT(n > 0 && n <= SRV_TB_MAX_TENSORS);
    memset(p, 0, sizeof *p);
    p->t = t;
    p->n = n;
    as_status s = AS_ERR_INTERNAL;
    char *hdr = NULL;
    json_t *root = json_object(), *arr = json_array();
    if (!root || !arr) goto cleanup;
    json_object_set_new(root, "version", json_integer(1));
    if (meta) json_object_set(root, "meta", meta);
    json_object_set(root, "tensors", arr);
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t cnt = as_mul_size((size_t)t[i].n_parts, t[i].part_len);
        size_t nb = as_mul_size(cnt, elem_size(t[i].dtype));
        if (!nb || nb > SIZE_MAX / 2 - off) {
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
            range(&t[i], &p->lo[i], &hi);
            p->scale[i] = (hi - p->lo[i]) / 255.0f;
            json_object_set_new(o, "scale", json_real(p->scale[i]));
            json_object_set_new(o, "zero", json_real(p->lo[i]));
        }
        json_array_append_new(arr, o);
        p->off[i] = off;
        p->nbytes[i] = nb;
        off += pad8(nb);
    }
    hdr = json_dumps(root, JSON_COMPACT);
    if (!hdr) goto cleanup;
    size_t hlen = strlen(hdr), padded = hlen + ((8 - (8 + hlen) % 8) % 8);
    if (padded > UINT32_MAX || off > SIZE_MAX - 8 - padded) goto cleanup;
    p->head_len = 8 + padded;
    p->head = malloc(p->head_len);
    if (!p->head) goto cleanup;
    memcpy(p->head, "ASTB", 4);
    put_u32(p->head + 4, (uint32_t)padded);
    memcpy(p->head + 8, hdr, hlen);
    memset(p->head + 8 + hlen, ' ', padded - hlen);
    p->total = p->head_len + off;
    s = AS_OK;
cleanup:
    if (s) {
        if (err && !err->msg[0]) as_err_set(err, AS_ERR_INTERNAL, "out of memory building a tensor response");
        srv_tb_plan_free(p);
    }
    free(hdr);
    json_decref(arr);
    json_decref(root);
    return s;
}

size_t srv_tb_plan_read(const srv_tb_plan *p, size_t pos, unsigned char *buf, size_t max) {
    size_t w = 0;
    while (w < max && pos < p->total) {
        if (pos < p->head_len) { /* the header */
            size_t k = p->head_len - pos < max - w ? p->head_len - pos : max - w;
            memcpy(buf + w, p->head + pos, k);
            w += k;
            pos += k;
            continue;
        }
        size_t rel = pos - p->head_len;
        int i = 0;
        while (i + 1 < p->n && rel >= p->off[i + 1]) i++;
        const srv_tb_tensor *t = &p->t[i];
        size_t in = rel - p->off[i];
        if (in >= p->nbytes[i]) { /* zero padding up to the next 8-byte boundary */
            size_t end = pad8(p->nbytes[i]), k = end - in < max - w ? end - in : max - w;
            memset(buf + w, 0, k);
            w += k;
            pos += k;
            continue;
        }
        size_t es = elem_size(t->dtype), e = in / es, b = in % es;
        int part = (int)(e / t->part_len);
        size_t idx = e % t->part_len;
        const float *src = part_of(t, part);
        for (; idx < t->part_len && w < max; idx++) {
            if (b == 0 && max - w >= es) { /* a whole element */
                encode_one(t->dtype, src[idx], p->lo[i], p->scale[i], buf + w);
                w += es;
                pos += es;
                continue;
            }
            unsigned char tmp[4]; /* an element split by the end of buf or begun by the previous call */
            encode_one(t->dtype, src[idx], p->lo[i], p->scale[i], tmp);
            size_t k = es - b < max - w ? es - b : max - w;
            memcpy(buf + w, tmp + b, k);
            w += k;
            pos += k;
            if (b + k < es) break;
            b = 0;
        }
    }
    return w;
}

as_status srv_tb_write(const srv_tb_tensor *t, int n, json_t *meta, unsigned char **out,
                       size_t *out_len, as_error *err) {
    *out = NULL;
    *out_len = 0;
    srv_tb_plan p;
    as_status s = srv_tb_plan_init(&p, t, n, meta, err);
    if (s) return s;
    unsigned char *buf = malloc(p.total);
    if (!buf) {
        srv_tb_plan_free(&p);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory building a tensor response");
    }
    size_t got = srv_tb_plan_read(&p, 0, buf, p.total);
    AS_ASSERT(got == p.total);
    *out = buf;
    *out_len = p.total;
    srv_tb_plan_free(&p);
    return AS_OK;
}
