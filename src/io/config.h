/* config.h — parses a Hugging Face config.json into an as_config for the
 * architectures attnscope runs (bert / electra / roberta / distilbert / gpt2), with
 * every size checked against the AS_MAX_* limits. It does not look at weights.
 */
#ifndef AS_CONFIG_H
#define AS_CONFIG_H

#include "core/core.h"

#define CFG_MAX_BYTES (4u * 1024u * 1024u)

/* Parses the JSON text (len bytes) of a config; path is used in messages only.
 * Fills *out (free with as_config_clear). Errors: AS_ERR_INPUT for invalid JSON,
 * a missing or wrong-typed required field, an unsupported model_type, a value out
 * of the named limits (e.g. hidden_size not divisible by num_attention_heads). */
as_status as_config_parse(const char *json, size_t len, const char *path, as_config *out,
                          as_error *err);
/* Reads and parses DIR/config.json. */
as_status as_config_load_dir(const char *dir, as_config *out, as_error *err);
void as_config_clear(as_config *c);

#endif
