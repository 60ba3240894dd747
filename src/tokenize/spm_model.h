/* spm_model.h — reads a SentencePiece model file (spiece.model: sentencepiece_model.proto's
 * ModelProto in protobuf wire format): the pieces with their scores and types, the
 * trainer's model type and unk id, and the normalizer spec (precompiled_charsmap,
 * add_dummy_prefix, remove_extra_whitespaces). Every length and count is checked against
 * the file and named limits. It does not build a tokenizer (tokenizer.c does, as
 * transformers' T5 converter would) or read SentencePiece's other fields.
 * Internal to the tokenize module.
 */
#ifndef AS_SPM_MODEL_H
#define AS_SPM_MODEL_H

#include "core/core.h"

/* sentencepiece_model.proto SentencePiece.Type */
enum { TOK_PIECE_NORMAL = 1, TOK_PIECE_UNKNOWN = 2, TOK_PIECE_CONTROL = 3, TOK_PIECE_USER = 4,
       TOK_PIECE_UNUSED = 5, TOK_PIECE_BYTE = 6 };

typedef struct {
    int n;              /* pieces */
    char **piece;       /* (n) owned, NUL-terminated UTF-8 */
    size_t *len;        /* (n) bytes */
    double *score;      /* (n) */
    int *type;          /* (n) TOK_PIECE_* */
    int model_type;     /* TrainerSpec.model_type: 1 unigram, 2 bpe, 3 word, 4 char */
    int64_t unk_id;     /* TrainerSpec.unk_id (default 0) */
    unsigned char *charsmap; /* (charsmap_n) NormalizerSpec.precompiled_charsmap, owned; NULL when none */
    size_t charsmap_n;
    int add_dummy_prefix, remove_extra_whitespaces; /* defaults 1 */
} tok_spm_proto;

/* Reads path into *out (zeroed first). Errors: AS_ERR_INPUT naming the file for a file
 * over TOK_MAX_FILE_BYTES, a malformed protobuf (a varint or length past the end), a
 * piece that is not UTF-8 or over TOK_UNIGRAM_MAX_PIECE_BYTES, no pieces or more than
 * AS_MAX_VOCAB; AS_ERR_INTERNAL when out of memory. *out is freed on error. */
as_status tok_spm_proto_read(const char *path, tok_spm_proto *out, as_error *err);
void tok_spm_proto_free(tok_spm_proto *p);

#endif
