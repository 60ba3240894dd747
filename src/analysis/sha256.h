/* sha256.h — SHA-256 (FIPS 180-4) for the digests that identify an analysis run:
 * the model (config + weights + tokenizer files) and the corpus files.
 * What it does not: HMAC or any other use; it is not constant-time.
 */
#ifndef AS_SHA256_H
#define AS_SHA256_H

#include "core/core.h"

typedef struct {
    uint32_t h[8];
    uint64_t len;    /* bytes hashed so far */
    uint8_t buf[64];
    size_t nbuf;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
/* Writes the 64-character lowercase hex digest and a NUL into hex (65 bytes). */
void sha256_final_hex(sha256_ctx *c, char hex[65]);
/* Tests only: nonzero makes every later block use the portable loop, not SHA-NI. */
extern int sha256_force_portable;
/* Hashes the whole file at path into c. Errors: AS_ERR_INPUT naming the path. */
as_status sha256_file(sha256_ctx *c, const char *path, as_error *err);

#endif
