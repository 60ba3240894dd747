/* config.h — parses a Hugging Face config.json into an as_config for the
 * architectures attnscope runs (bert / electra / roberta / distilbert / gpt2, and the
 * decoder LLM family llama / mistral / qwen2 / qwen3 / gemma2 / gemma3 / phi3), with
 * every size checked against the AS_MAX_* limits. It does not look at weights.
 */
#ifndef AS_CONFIG_H
#define AS_CONFIG_H

#include "core/core.h"

#include <jansson.h>

#define CFG_MAX_BYTES (4u * 1024u * 1024u)

/* Parses the JSON text (len bytes) of a config; path is used in messages only.
 * Fills *out (free with as_config_clear). Errors: AS_ERR_INPUT for invalid JSON,
 * a missing or wrong-typed required field, an unsupported model_type, a value out
 * of the named limits (e.g. hidden_size not divisible by num_attention_heads). */
as_status as_config_parse(const char *json, size_t len, const char *path, as_config *out,
                          as_error *err);
/* json_loadb for the JSON files of a Hugging Face folder (config.json, tokenizer.json,
 * tokenizer_config.json): when jansson refuses an integer beyond int64 (transformers
 * writes "model_max_length": 1000000000000000019884624838656 for "no limit"), parses
 * again with such integers read as null (as_json_null_big_ints on a copy). Returns the
 * new reference, or NULL with je filled. Only reads buf. */
json_t *as_json_loadb_hf(const char *buf, size_t len, size_t flags, json_error_t *je);

/* Reads and parses DIR/config.json. */
as_status as_config_load_dir(const char *dir, as_config *out, as_error *err);
void as_config_clear(as_config *c);

#endif
