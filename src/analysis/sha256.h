/* sha256.h — SHA-256 (FIPS 180-4) for the digests that identify an analysis run:
 * the model (config + weights + tokenizer files) and the corpus files. The hashing
 * is Nettle's (Debian's libnettle, which runs on the CPU's SHA extensions where it has
 * them); this module adds the streaming of whole files and the hex digest.
 * What it does not: HMAC or any other use; it is not constant-time.
 */
#ifndef AS_SHA256_H
#define AS_SHA256_H

#include "core/core.h"

#include <nettle/sha2.h>
/* nettle/sha2.h names its functions through macros (sha256_init -> nettle_sha256_init,
 * ...); this module keeps its own sha256_* names, so those macros are dropped here and
 * sha256.c calls nettle_sha256_* directly. */
#undef sha256_init
#undef sha256_update
#undef sha256_digest

typedef struct {
    struct sha256_ctx nettle; /* Nettle's state */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
/* Writes the 64-character lowercase hex digest and a NUL into hex (65 bytes). */
void sha256_final_hex(sha256_ctx *c, char hex[65]);
/* Hashes the whole file at path into c. Errors: AS_ERR_INPUT naming the path. */
as_status sha256_file(sha256_ctx *c, const char *path, as_error *err);

#endif
