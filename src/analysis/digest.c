/* digest.c — what identifies a run: SHA-256 digests of a model folder, of the corpus
 * files and of the files of an import, the canonical JSON of the corpus paths.
 * What it does not: read the files' contents as data (analyze.c, import_read.c).
 */
#include "analysis/runner_internal.h"

#include <string.h>

int an_model_file_wanted(const struct dirent *d) {
    const char *n = d->d_name;
    size_t l = strlen(n);
    if (n[0] == '.') return 0;
    if (l > 12 && !strcmp(n + l - 12, ".safetensors")) return 1;
    return !strcmp(n, "config.json") || !strcmp(n, "model.safetensors.index.json") || !strcmp(n, "vocab.txt") ||
           !strcmp(n, "tokenizer.json") || !strcmp(n, "vocab.json") || !strcmp(n, "merges.txt") ||
           !strcmp(n, "tokenizer_config.json") || !strcmp(n, "special_tokens_map.json");
}

as_status an_digest_dir(const char *dir, int (*filter)(const struct dirent *), char hex[65], as_error *err) {
    struct dirent **list = NULL;
    int n = scandir(dir, &list, filter, alphasort);
    if (n < 0) return as_err_set(err, AS_ERR_INPUT, "%s: cannot list the folder", dir);
    sha256_ctx c;
    sha256_init(&c);
    as_status rc = AS_OK;
    for (int i = 0; i < n; i++) {
        char path[4096];
        if (!rc) rc = as_path_join(path, sizeof path, dir, list[i]->d_name, err);
        if (!rc) {
            sha256_update(&c, list[i]->d_name, strlen(list[i]->d_name) + 1);
            rc = sha256_file(&c, path, err);
        }
        free(list[i]);
    }
    free(list);
    if (!rc) sha256_final_hex(&c, hex);
    return rc;
}

void an_json_escape_path(char *out, size_t cap, const char *s) {
    size_t o = 0;
    for (; s && *s && o + 3 < cap; s++) {
        if (*s == '"' || *s == '\\') out[o++] = '\\';
        out[o++] = (unsigned char)*s < 0x20 ? '?' : *s;
    }
    out[o] = 0;
}

int an_import_json_wanted(const struct dirent *d) {
    size_t l = strlen(d->d_name);
    return d->d_name[0] != '.' && l > 5 && !strcmp(d->d_name + l - 5, ".json");
}

int an_import_npy_wanted(const struct dirent *d) {
    size_t l = strlen(d->d_name);
    return d->d_name[0] != '.' && l > 14 && !strcmp(d->d_name + l - 14, ".attention.npy");
}

as_status an_import_digest(const char *dir, char hex[65], as_error *err) {
    return an_digest_dir(dir, an_import_json_wanted, hex, err);
}

as_status an_digest_files(sha256_ctx *c, const char *tag, const char *const *paths, int n, as_error *err) {
    if (!paths) return AS_OK;
    sha256_update(c, tag, strlen(tag) + 1);
    for (int i = 0; i < n; i++) {
        char num[32];
        snprintf(num, sizeof num, "%d", i);
        sha256_update(c, num, strlen(num) + 1);
        as_status rc = sha256_file(c, paths[i], err);
        if (rc) return rc;
    }
    return AS_OK;
}
