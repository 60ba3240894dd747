/* tsv.h — reads GLUE SST-2 style TSV files: a header line "sentence<TAB>label", then one
 * "sentence<TAB>label" row per line (label a non-negative integer < AS_MAX_LABELS).
 *
 * What it does: validates the header, the field count, the label and that the sentence
 * is not blank; tolerates CRLF line ends, a missing final newline and a UTF-8 byte-order
 * mark; skips empty lines. Malformed input is AS_ERR_INPUT "path:line: what", quoting
 * the file's bytes with every non-printable or non-ASCII byte as \xNN.
 * What it does not: quoting (GLUE's TSVs have none), other column orders (the unlabeled
 * test split "index<TAB>sentence" is rejected by its header).
 */
#ifndef AS_TSV_H
#define AS_TSV_H

#include "core/core.h"

#define TSV_MAX_FILE_BYTES ((size_t)1 << 30)
#define TSV_MAX_LINE 65536

typedef struct {
    char *text; /* owned */
    int label;
    int line;   /* 1-based line in the file */
} tsv_row;

typedef struct {
    int n;
    tsv_row *rows; /* (n) owned */
} tsv_corpus;

/* Reads up to limit rows (limit <= 0: all) into *out (tsv_corpus_free, also after an
 * error). */
as_status tsv_read_sst2(const char *path, int limit, tsv_corpus *out, as_error *err);
as_status tsv_parse_sst2(const char *name, const char *buf, size_t len, int limit, tsv_corpus *out,
                         as_error *err);
void tsv_corpus_free(tsv_corpus *c);

#endif
