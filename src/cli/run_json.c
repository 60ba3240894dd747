/* run_json.c — the JSON file of a run (`attnscope run --format json`, `attnscope
 * generate --out FILE.json`): the model's sizes, the tokens in the server's format
 * (as_tokens_json), the input arrays and every captured tensor as nested arrays, floats
 * written %.9g (streamed, never built in memory). It does not run the model.
 */
#include "cli.h"

#include <math.h>
#include <string.h>

/* Writes s as a JSON string; bytes that are not well-formed UTF-8 are written as
 * U+FFFD, so the output is always valid UTF-8. */
void cli_json_str(FILE *f, const char *s) {
    char *clean = as_utf8_clean(s);
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(clean ? clean : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", f);
        else if (*p == '\t') fputs("\\t", f);
        else if (*p == '\r') fputs("\\r", f);
        else if (*p < 0x20) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
    free(clean);
}

static void json_num(FILE *f, float v) {
    if (isnan(v)) fputs("null", f);
    else if (isinf(v)) fputs(v > 0 ? "3.4028235e38" : "-3.4028235e38", f);
    else fprintf(f, "%.9g", (double)v);
}

/* Writes data as nested arrays of the given shape. */
void cli_json_tensor(FILE *f, const float *data, int ndim, const int64_t *shape) {
    if (ndim == 1) {
        fputc('[', f);
        for (int64_t i = 0; i < shape[0]; i++) {
            if (i) fputc(',', f);
            json_num(f, data[i]);
        }
        fputc(']', f);
        return;
    }
    size_t inner = 1;
    for (int d = 1; d < ndim; d++) inner *= (size_t)shape[d];
    fputc('[', f);
    for (int64_t i = 0; i < shape[0]; i++) {
        if (i) fputs(",\n", f);
        cli_json_tensor(f, data + (size_t)i * inner, ndim - 1, shape + 1);
    }
    fputc(']', f);
}

void cli_json_seq2seq(FILE *f, const as_model *m, const as_encoding *tgt) {
    char *tokens = as_tokens_json(m, tgt);
    fprintf(f, ",\n\"decoder_layers\":%d,\n\"decoder_tokens\":%s", as_model_config(m)->n_dec_layer,
            tokens ? tokens : "null");
    free(tokens);
    fputs(",\n\"decoder_input_ids\":", f);
    cli_json_ints(f, tgt->ids, tgt->n);
    fputs(",\n\"decoder_attention_mask\":", f);
    cli_json_ints(f, tgt->mask, tgt->n);
}

void cli_json_ints(FILE *f, const int32_t *v, int n) {
    fputc('[', f);
    for (int i = 0; i < n; i++) fprintf(f, "%s%d", i ? "," : "", (int)v[i]);
    fputc(']', f);
}

int cli_write_run_json(FILE *f, const as_model *m, const as_encoding *enc, const as_run *r,
                       void (*more)(FILE *f, void *ctx), void *ctx) {
    char *tokens = as_tokens_json(m, enc);
    if (!tokens) return -1;
    const as_config *c = as_model_config(m);
    fprintf(f, "{\"version\":\"%s\",\"model\":", AS_VERSION);
    cli_json_str(f, as_model_dir(m));
    fprintf(f, ",\"arch\":\"%s\",\"layers\":%d,\"heads\":%d,\"d_model\":%d,\"d_head\":%d,",
            as_arch_name(c->arch), c->n_layer, c->n_head, c->d_model, c->d_head);
    fprintf(f, "\"captured\":{\"layer_lo\":%d,\"n_layers\":%d,\"head_lo\":%d,\"n_heads\":%d,\"layers_run\":%d},\n",
            r->layer_lo, r->n_lay, r->head_lo, r->n_hd, r->n_run);
    fputs("\"tokens\":", f);
    fputs(tokens, f);
    fputs(",\n\"input_ids\":", f);
    cli_json_ints(f, enc->ids, enc->n);
    fputs(",\n\"token_type_ids\":", f);
    cli_json_ints(f, enc->type_ids, enc->n);
    fputs(",\n\"attention_mask\":", f);
    cli_json_ints(f, enc->mask, enc->n);
    fputs(",\n\"score_scale\":[", f); /* the factor on q.k of each captured layer */
    for (int i = 0; i < r->n_lay; i++) {
        if (i) fputc(',', f);
        json_num(f, as_attn_scale(c, r->layer_lo + i));
    }
    fputs("],\n\"kv_group\":[", f); /* the key/value head each captured query head reads */
    for (int i = 0; i < r->n_hd; i++) fprintf(f, "%s%d", i ? "," : "", as_run_kv_group(r, r->head_lo + i));
    fputc(']', f);
    as_run_array arr[AS_RUN_MAX_ARRAYS]; /* an encoder-decoder run's under encoder_/decoder_/cross_ names */
    int n_arr = as_run_all_arrays(r, arr);
    for (int i = 0; i < n_arr; i++) {
        if (!arr[i].data) continue;
        fprintf(f, ",\n\"%s\":", arr[i].name);
        cli_json_tensor(f, arr[i].data, arr[i].ndim, arr[i].shape);
    }
    if (more) more(f, ctx);
    fputs("}\n", f);
    free(tokens);
    return 0;
}
