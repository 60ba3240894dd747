/* npz.h — writes .npy arrays and .npz archives (an uncompressed ZIP of .npy files,
 * as numpy.savez writes) readable by numpy.load. Little-endian float32 / int32 /
 * float16, and unicode string arrays. The writer's API is declared in
 * include/attnscope/npy.h (the tools' API); this header adds its testing hook.
 * It does not read npz (io/npz_read.h does).
 */
#ifndef AS_NPZ_H
#define AS_NPZ_H

#include "attnscope/npy.h" /* the writer: npz_open, npz_add, npz_add_strings, npz_close, npy_write */
#include "core/core.h"

/* Testing hook: when on, every entry and the end record use ZIP64 fields, as they
 * must for sizes or offsets >= 4 GiB (which this switches to automatically). */
void npz_force_zip64(npz_writer *w, int on);

#endif
