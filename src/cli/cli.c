/* cli.c — argument parsing helpers and error reporting shared by subcommands. */
#include "cli.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

int cli_fail(const as_error *err) {
    fprintf(stderr, "attnscope: %s\n", err->msg[0] ? err->msg : "unknown error");
    return err->code ? (int)err->code : 1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "attnscope %s: %s (see attnscope %s --help)\n", cmd, buf, cmd);
    return AS_ERR_INPUT;
}

int cli_parse_int(const char *s, long lo, long hi, int *out) {
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int cli_parse_precision(const char *cmd, const char *v, as_precision *out) {
    if (as_precision_parse(v, out)) return cli_usage_error(cmd, "--precision must be f32 or bf16, not '%s'", v);
    return 0;
}

int cli_load_model(const char *dir, as_precision p, as_model **m) {
    as_error err = {0};
    *m = NULL;
    if (as_model_load(dir, m, &err)) return cli_fail(&err);
    if (as_model_set_precision(*m, p, &err)) {
        as_model_free(*m);
        *m = NULL;
        return cli_fail(&err);
    }
    return 0;
}

int cli_parse_ids(const char *s, int32_t **out, int *n) {
    *out = NULL;
    *n = 0;
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    if (cap > 1000000) return -1;
    int32_t *ids = as_malloc_array(cap, sizeof *ids);
    if (!ids) return -1;
    int k = 0;
    const char *p = s;
    while (*p) {
        while (*p == ' ') p++;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            free(ids);
            return -1;
        }
        ids[k++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') {
            p++;
            if (!*p) {
                free(ids);
                return -1;
            }
        } else if (*p) {
            free(ids);
            return -1;
        }
    }
    if (k == 0) {
        free(ids);
        return -1;
    }
    *out = ids;
    *n = k;
    return 0;
}

const char *cli_value(int argc, char **argv, int *i, const char *cmd) {
    if (*i + 1 >= argc) {
        cli_usage_error(cmd, "option %s needs a value", argv[*i]);
        return NULL;
    }
    (*i)++;
    return argv[*i];
}

int cli_is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

int cli_parse_capture(const char *s, unsigned *what) {
    *what = 0;
    char buf[256];
    if (strlen(s) >= sizeof buf) return -1;
    strcpy(buf, s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (!strcmp(tok, "all")) *what |= CAP_ALL;
        else if (!strcmp(tok, "attn")) *what |= CAP_ATTN;
        else if (!strcmp(tok, "scores")) *what |= CAP_SCORES;
        else if (!strcmp(tok, "qkv")) *what |= CAP_QKV;
        else if (!strcmp(tok, "hidden")) *what |= CAP_HIDDEN;
        else if (!strcmp(tok, "stats")) *what |= CAP_STATS;
        else if (!strcmp(tok, "thumbs")) *what |= CAP_THUMBS;
        else if (!strcmp(tok, "logits")) *what |= CAP_LOGITS;
        else return -1;
    }
    return *what ? 0 : -1;
}

int cli_make_target_encoding(const as_model *m, const char *text, int max_tokens, int truncate, as_encoding *enc) {
    as_error err = {0};
    as_encode_opts eo = {.max_len = max_tokens, .truncate = truncate};
    if (as_encode_target(m, text, &eo, enc, &err)) return cli_fail(&err);
    if (enc->n_warnings) as_warn("%s", enc->warning);
    return 0;
}

int cli_make_encoding(const char *cmd, const as_model *m, const char *text, const char *text_b,
                      const char *ids, const char *type_ids, int max_tokens, int truncate,
                      as_encoding *enc) {
    as_error err = {0};
    int rc = 0;
    int32_t *iv = NULL, *tv = NULL;
    if (text) {
        as_encode_opts eo = {.max_len = max_tokens, .truncate = truncate};
        if (as_encode(m, text, text_b, &eo, enc, &err)) return cli_fail(&err);
        if (enc->n_warnings) as_warn("%s", enc->warning);
        return 0;
    }
    int n = 0, nt = 0;
    if (!ids || cli_parse_ids(ids, &iv, &n)) {
        rc = cli_usage_error(cmd, "bad --ids: expected comma-separated non-negative integers");
    } else if (type_ids && (cli_parse_ids(type_ids, &tv, &nt) || nt != n)) {
        rc = cli_usage_error(cmd, "bad --type-ids: expected %d comma-separated integers", n);
    } else if (as_encoding_from_ids(m, iv, tv, n, enc, &err)) {
        rc = cli_fail(&err);
    }
    free(iv);
    free(tv);
    return rc;
}
