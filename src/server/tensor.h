/* tensor.h — the binary tensor container the server sends to the browser: a magic,
 * a length-prefixed JSON header naming each tensor's shape, dtype and byte range,
 * then the little-endian data. Writes float32, float16 or uint8 (affine-quantized)
 * from float32 sources, whole (srv_tb_write) or as any byte range on demand
 * (srv_tb_plan, for streamed responses). It does not know about HTTP, runs or models.
 *
 * Layout (all integers little-endian; see docs/server.md):
 *   bytes 0..3   "ASTB"
 *   bytes 4..7   uint32 N = header length in bytes
 *   bytes 8..8+N JSON header, space-padded so that 8 + N is a multiple of 8:
 *                {"version":1,"meta":{...},"tensors":[{"name":"attention","dtype":"f16",
 *                 "shape":[2,4,12,12],"offset":0,"nbytes":2304}, ...]}
 *                u8 tensors add "scale" and "zero": value = zero + scale * byte.
 *   then the data blob; each tensor starts at 8 + N + offset, offsets are 8-aligned.
 */
#ifndef AS_SRV_TENSOR_H
#define AS_SRV_TENSOR_H

#include "attnscope.h"

#include <stdio.h>
#include <stdlib.h>

#include <jansson.h>

#define SRV_TB_MAX_TENSORS 8
#define SRV_TB_MAX_DIMS 5

typedef enum { TB_F32 = 0, TB_F16, TB_U8 } srv_tb_dtype;

typedef struct {
    const char *name;        /* borrowed, must outlive srv_tb_write */
    srv_tb_dtype dtype;
    int ndim;
    int64_t shape[SRV_TB_MAX_DIMS];
    /* Source: the tensor is the concatenation of n_parts contiguous float32 blocks,
     * each of part_len floats (so (L, H) slices of a run can be gathered). */
    const float *const *parts; /* (n_parts) borrowed */
    int n_parts;
    size_t part_len;
    /* Optional, replaces parts: returns part p's part_len floats (borrowed, valid
     * until the next call with the same ctx). */
    const float *(*part_fn)(void *ctx, int p);
    void *part_ctx;
} srv_tb_tensor;

/* The container's layout for a set of tensors, to produce its bytes in any order. */
typedef struct {
    const srv_tb_tensor *t; /* (n) borrowed: must outlive the plan */
    int n;
    unsigned char *head;    /* (head_len) owned: magic, length and padded JSON header */
    size_t head_len;
    size_t off[SRV_TB_MAX_TENSORS];    /* data offset of each tensor, from the end of head */
    size_t nbytes[SRV_TB_MAX_TENSORS];
    float lo[SRV_TB_MAX_TENSORS], scale[SRV_TB_MAX_TENSORS]; /* u8 mapping */
    size_t total;           /* bytes of the whole container */
} srv_tb_plan;

/* Parses "f32" / "f16" / "u8"; -1 when unknown. */
int srv_tb_dtype_parse(const char *s);
const char *srv_tb_dtype_name(srv_tb_dtype d);

/* Builds the container for n tensors with an optional meta object (borrowed; may be
 * NULL). *out is malloc'd and owned by the caller (free()). Errors: AS_ERR_INTERNAL
 * on allocation failure or a size overflow. u8 quantization maps [min, max] of the
 * tensor linearly onto 0..255 (round to nearest); NaN becomes zero. */
as_status srv_tb_write(const srv_tb_tensor *t, int n, json_t *meta, unsigned char **out,
                       size_t *out_len, as_error *err);

/* Lays out the container of n tensors (t borrowed by the plan; meta borrowed, may be
 * NULL) without writing the data: reads every source once for u8 ranges. Errors as
 * srv_tb_write. Release with srv_tb_plan_free (a no-op on a zeroed plan). */
as_status srv_tb_plan_init(srv_tb_plan *p, const srv_tb_tensor *t, int n, json_t *meta, as_error *err);
/* Writes the container's bytes [pos, pos + max) (clipped at total) into buf; returns
 * the count written, 0 at or after the end. */
size_t srv_tb_plan_read(const srv_tb_plan *p, size_t pos, unsigned char *buf, size_t max);
void srv_tb_plan_free(srv_tb_plan *p);

#endif
