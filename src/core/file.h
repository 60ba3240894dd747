/* file.h — untrusted input files, shared by every loader: opening them for reading,
 * and quoting their bytes in error messages.
 * Opens without blocking (a FIFO with no writer is refused, not waited on), refuses
 * anything that is not a regular file (FIFOs, /dev/zero and other devices,
 * directories, sockets), and checks the size against the caller's named limit before
 * anything is read. It does not read or parse the file (see as_read_file, st_file_open).
 */
#ifndef AS_CORE_FILE_H
#define AS_CORE_FILE_H

#include "core.h"

/* Opens path read-only. Errors (AS_ERR_INPUT, one line naming the path):
 * "PATH: cannot open: REASON", "PATH: not a regular file",
 * "PATH: file is N bytes, over the limit of MAX". On success *fd is an open descriptor
 * in blocking mode, owned by the caller (close), and *size the file's size in bytes. */
as_status as_file_open_regular(const char *path, uint64_t max_bytes, int *fd, uint64_t *size,
                               as_error *err);

/* as_file_open_regular as a stdio stream, owned by the caller (fclose). */
as_status as_file_fopen_regular(const char *path, uint64_t max_bytes, FILE **f, uint64_t *size,
                                as_error *err);

/* Writes s[0..n) into dst (cap bytes, NUL-terminated) for quoting in a message:
 * printable ASCII and well-formed UTF-8 characters that show as themselves (words in
 * any script) as they are; every other byte (control characters, C1 controls, Unicode
 * spaces other than ' ', a byte-order mark or other invisible format character,
 * invalid UTF-8, binary data) as
 * \xNN, so a message never carries raw control bytes or hides what is in the file.
 * Truncated with "..." when it does not fit. Returns dst. */
char *as_quote_bytes(char *dst, size_t cap, const char *s, size_t n);

#endif
