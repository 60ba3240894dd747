/* safetensors.c — mmap'd, validated reading of safetensors files and sharded
 * checkpoints, and writing of new files.
 *
 * What it does: maps a file read-only, parses its JSON header with jansson and checks
 * every number in it against the file (header length, dtype names, shape x dtype size
 * == byte span, offsets inside the data buffer, no two tensors overlapping); opens a
 * model folder's single file or its index + shards; writes files as HF does (header
 * padded with spaces to a multiple of 8 bytes, data contiguous in the given order).
 * What it does not: convert dtypes, copy tensor data (tensors are views into the
 * mapping), or read files other than safetensors and their index.
 *
 * Format (https://github.com/huggingface/safetensors): u64 little-endian header
 * length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [b, e]},
 * "__metadata__": {str: str}}, then the data buffer; offsets are relative to 8 + N.
 */
#define _DEFAULT_SOURCE /* MADV_HUGEPAGE */
#include "io/safetensors.h"

#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- dtypes ------------------------------------------------------------------ */

typedef struct {
    const char *name;
    as_dtype dtype;
    size_t size;
} st_dtype_info;

/* Every fixed-width dtype of the safetensors spec; the first five are computed with. */
static const st_dtype_info g_dtypes[] = {
    {"F32", DTYPE_F32, 4},       {"F16", DTYPE_F16, 2},      {"BF16", DTYPE_BF16, 2},
    {"I64", DTYPE_I64, 8},       {"I32", DTYPE_I32, 4},      {"F64", DTYPE_OTHER, 8},
    {"I16", DTYPE_OTHER, 2},     {"I8", DTYPE_OTHER, 1},     {"U8", DTYPE_OTHER, 1},
    {"U16", DTYPE_OTHER, 2},     {"U32", DTYPE_OTHER, 4},    {"U64", DTYPE_OTHER, 8},
    {"BOOL", DTYPE_OTHER, 1},    {"F8_E4M3", DTYPE_OTHER, 1}, {"F8_E5M2", DTYPE_OTHER, 1},
    {"F8_E8M0", DTYPE_OTHER, 1}, {"C64", DTYPE_OTHER, 8},
};
#define N_DTYPES ((int)(sizeof g_dtypes / sizeof g_dtypes[0]))

static const st_dtype_info *dtype_by_name(const char *name) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(g_dtypes[i].name, name) == 0) return &g_dtypes[i];
    return NULL;
}

size_t st_dtype_size(as_dtype t) {
    switch (t) {
    case DTYPE_F32: return 4;
    case DTYPE_F16: return 2;
    case DTYPE_BF16: return 2;
    case DTYPE_I64: return 8;
    case DTYPE_I32: return 4;
    default: return 0;
    }
}

size_t st_dtype_name_size(const char *name) {
    const st_dtype_info *d = name ? dtype_by_name(name) : NULL;
    return d ? d->size : 0;
}

/* ---- one file ------------------------------------------------------------------ */

/* Counts the keys of the JSON objects nested `depth` levels deep in s[0..n) (1: the
 * keys of the top-level object), without building anything: a key is a ':' outside
 * strings at that depth. Stops counting at stop. Bounds what the parser will allocate
 * before it runs; syntax is left to the parser (invalid JSON may count anything). */
static size_t json_count_keys(const char *s, size_t n, int depth, size_t stop) {
    size_t keys = 0;
    int d = 0, in_str = 0;
    for (size_t i = 0; i < n && keys < stop; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            d++;
        } else if (c == '}' || c == ']') {
            d--;
        } else if (c == ':' && d == depth) {
            keys++;
        }
    }
    return keys;
}

struct st_file {
    char *path;
    void *map;           /* whole file, PROT_READ, MAP_PRIVATE */
    size_t map_len;
    int n;
    st_tensor *tensors;  /* (n) sorted by name; names owned (strdup) */
    int n_meta;
    char **meta_keys;    /* (n_meta) owned */
    char **meta_vals;    /* (n_meta) owned */
};

/* Per-tensor byte range, used for the overlap check. */
typedef struct {
    uint64_t begin, end;
    const char *name;
} st_span;

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_span(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

void st_file_free(st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_len);
    if (f->tensors)
        for (int i = 0; i < f->n; i++) free((char *)f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->path);
    free(f);
}

/* Reads "__metadata__" (an object of strings) into f. */
static as_status parse_metadata(st_file *f, json_t *meta, as_error *err) {
    if (!json_is_object(meta))
        return as_err_set(err, AS_ERR_INPUT, "%s: header field '__metadata__' is not an object",
                          f->path);
    size_t n = json_object_size(meta);
    f->meta_keys = as_calloc(n, sizeof(char *));
    f->meta_vals = as_calloc(n, sizeof(char *));
    if (!f->meta_keys || !f->meta_vals)
        return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", f->path);
    const char *key;
    json_t *val;
    json_object_foreach(meta, key, val) {
        if (!json_is_string(val))
            return as_err_set(err, AS_ERR_INPUT,
                              "%s: header '__metadata__' value for '%s' is not a string", f->path,
                              key);
        f->meta_keys[f->n_meta] = as_strdup(key);
        f->meta_vals[f->n_meta] = as_strdup(json_string_value(val));
        f->n_meta++;
        if (!f->meta_keys[f->n_meta - 1] || !f->meta_vals[f->n_meta - 1])
            return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", f->path);
    }
    return AS_OK;
}

/* Fills t (name already set) from the header entry e; data_len is the data buffer size.
 * Writes the entry's byte range to *span. */
static as_status parse_entry(const st_file *f, st_tensor *t, json_t *e, const uint8_t *data,
                             uint64_t data_len, st_span *span, as_error *err) {
    const char *p = f->path, *nm = t->name;
    if (!json_is_object(e))
        return as_err_set(err, AS_ERR_INPUT, "%s: header entry for tensor '%s' is not an object",
                          p, nm);
    json_t *jd = json_object_get(e, "dtype");
    json_t *js = json_object_get(e, "shape");
    json_t *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd))
        return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': header field 'dtype' %s", p, nm,
                          jd ? "is not a string" : "missing");
    const st_dtype_info *di = dtype_by_name(json_string_value(jd));
    if (!di)
        return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': unknown dtype '%.32s'", p, nm,
                          json_string_value(jd));
    t->dtype = di->dtype;
    snprintf(t->dtype_name, sizeof t->dtype_name, "%s", di->name);

    if (!json_is_array(js))
        return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': header field 'shape' %s", p, nm,
                          js ? "is not an array" : "missing");
    size_t nd = json_array_size(js);
    if (nd > ST_MAX_DIMS)
        return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': shape has %zu dims, over the limit of %d",
                          p, nm, nd, ST_MAX_DIMS);
    t->ndim = (int)nd;
    uint64_t n_elems = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d))
            return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': shape entry %zu is not an integer",
                              p, nm, i);
        json_int_t v = json_integer_value(d);
        if (v < 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': shape entry %zu is negative (%lld)",
                              p, nm, i, (long long)v);
        t->shape[i] = (int64_t)v;
        if (v != 0 && n_elems > UINT64_MAX / (uint64_t)v)
            return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': shape element count overflows",
                              p, nm);
        n_elems *= (uint64_t)v;
    }
    if (n_elems > SIZE_MAX / di->size)
        return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': shape element count overflows", p, nm);
    uint64_t need = n_elems * di->size;

    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !json_is_integer(json_array_get(jo, 0)) || !json_is_integer(json_array_get(jo, 1)))
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: tensor '%s': header field 'data_offsets' %s", p, nm,
                          jo ? "is not an array of two integers" : "missing");
    json_int_t b = json_integer_value(json_array_get(jo, 0));
    json_int_t en = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || en < 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': negative data_offsets", p, nm);
    if (en < b)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: tensor '%s': data_offsets end %lld before begin %lld", p, nm,
                          (long long)en, (long long)b);
    if ((uint64_t)en > data_len)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: tensor '%s': data_offsets end %lld past the data buffer (%llu bytes)",
                          p, nm, (long long)en, (unsigned long long)data_len);
    uint64_t span_bytes = (uint64_t)en - (uint64_t)b;
    if (span_bytes != need)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: tensor '%s': data_offsets span %llu bytes but shape x dtype %s "
                          "needs %llu",
                          p, nm, (unsigned long long)span_bytes, di->name,
                          (unsigned long long)need);
    t->n_elems = (size_t)n_elems;
    t->nbytes = (size_t)need;
    t->data = data + b;
    span->begin = (uint64_t)b;
    span->end = (uint64_t)en;
    span->name = t->name;
    return AS_OK;
}

as_status st_file_open(const char *path, st_file **out, as_error *err) {
    as_status rc = AS_OK;
    json_t *root = NULL;
    st_span *spans = NULL;
    int fd = -1;
    *out = NULL;
    st_file *f = as_calloc(1, sizeof *f);
    if (!f || !(f->path = as_strdup(path))) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        goto cleanup;
    }
    uint64_t size = 0;
    if ((rc = as_file_open_regular(path, UINT64_MAX, &fd, &size, err)) != AS_OK) goto cleanup;
    if (size < 8) {
        rc = as_err_set(err, AS_ERR_INPUT,
                        "%s: file is %llu bytes, too short for a safetensors header", path,
                        (unsigned long long)size);
        goto cleanup;
    }
    if (size > SIZE_MAX) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: file too large to map", path);
        goto cleanup;
    }
    f->map_len = (size_t)size;
    void *map = mmap(NULL, f->map_len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: mmap failed: %s", path, strerror(errno));
        goto cleanup;
    }
    f->map = map;
#ifdef MADV_HUGEPAGE
    /* advice only (failure is harmless): where the file is read from disk, readahead fills
     * the page cache in 2 MiB folios mapped by one TLB entry each; the products read every
     * weight once per forward, and on 4 KiB pages their TLB misses cost 7-13% of a 1B
     * model's prefill. A file still in the cache from being written keeps its small pages. */
    (void)madvise(map, f->map_len, MADV_HUGEPAGE);
#endif
    const uint8_t *bytes = map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];
    if (hlen > ST_MAX_HEADER_BYTES) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: header length %llu over the limit of %u bytes",
                        path, (unsigned long long)hlen, ST_MAX_HEADER_BYTES);
        goto cleanup;
    }
    if (hlen > size - 8) {
        rc = as_err_set(err, AS_ERR_INPUT,
                        "%s: header length %llu runs past the end of the file (%llu bytes)", path,
                        (unsigned long long)hlen, (unsigned long long)size);
        goto cleanup;
    }
    /* the top level's keys are the tensors and at most one "__metadata__" */
    size_t n_keys = json_count_keys((const char *)bytes + 8, (size_t)hlen, 1,
                                    (size_t)ST_MAX_FILE_TENSORS + 2);
    if (n_keys > (size_t)ST_MAX_FILE_TENSORS + 1) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: header lists more than %d tensors (the limit)",
                        path, ST_MAX_FILE_TENSORS);
        goto cleanup;
    }
    json_error_t jerr;
    root = json_loadb((const char *)bytes + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: invalid header JSON: %s (byte %d)", path,
                        jerr.text, jerr.position);
        goto cleanup;
    }
    if (!json_is_object(root)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: header is not a JSON object", path);
        goto cleanup;
    }
    json_t *meta = json_object_get(root, "__metadata__");
    size_t n = json_object_size(root) - (meta ? 1 : 0);
    if (n > ST_MAX_FILE_TENSORS) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: header lists %zu tensors, over the limit of %d",
                        path, n, ST_MAX_FILE_TENSORS);
        goto cleanup;
    }
    if (meta && (rc = parse_metadata(f, meta, err)) != AS_OK) goto cleanup;
    f->tensors = as_calloc(n, sizeof(st_tensor));
    spans = as_calloc(n, sizeof(st_span));
    if (!f->tensors || !spans) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        goto cleanup;
    }
    const uint8_t *data = bytes + 8 + hlen;
    uint64_t data_len = size - 8 - hlen;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (val == meta) continue;
        st_tensor *t = &f->tensors[f->n];
        if (!(t->name = as_strdup(key))) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
            goto cleanup;
        }
        f->n++;
        rc = parse_entry(f, t, val, data, data_len, &spans[f->n - 1], err);
        if (rc != AS_OK) goto cleanup;
    }
    qsort(spans, n, sizeof *spans, cmp_span);
    for (size_t i = 1; i < n; i++) {
        if (spans[i].begin < spans[i - 1].end) {
            rc = as_err_set(err, AS_ERR_INPUT,
                            "%s: tensors '%s' and '%s' overlap in the data buffer (data_offsets)",
                            path, spans[i - 1].name, spans[i].name);
            goto cleanup;
        }
    }
    qsort(f->tensors, n, sizeof(st_tensor), cmp_tensor_name);

cleanup:
    if (fd >= 0) close(fd);
    json_decref(root);
    free(spans);
    if (rc != AS_OK) {
        st_file_free(f);
        return rc;
    }
    *out = f;
    return AS_OK;
}

int st_file_count(const st_file *f) { return f ? f->n : 0; }

const st_tensor *st_file_tensor(const st_file *f, int i) {
    if (!f || i < 0 || i >= f->n) return NULL;
    return &f->tensors[i];
}

const st_tensor *st_file_find(const st_file *f, const char *name) {
    if (!f || !name || f->n == 0) return NULL;
    st_tensor key = {.name = name};
    return bsearch(&key, f->tensors, (size_t)f->n, sizeof(st_tensor), cmp_tensor_name);
}

const char *st_file_metadata(const st_file *f, const char *key) {
    if (!f || !key) return NULL;
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

/* ---- a model folder ------------------------------------------------------------ */

/* One tensor of a set and the shard it lives in. */
typedef struct {
    const st_tensor *t; /* borrowed from files[file] */
    int file;
} st_set_entry;

struct st_set {
    int n_files;
    st_file **files;      /* (n_files) owned */
    char **shard_names;   /* (n_files) owned; "model.safetensors" for a single file */
    int n;
    st_set_entry *entries; /* (n) all tensors of all files, sorted by name */
};

void st_set_pages(const st_set *s, size_t *resident, size_t *huge) {
    *resident = *huge = 0;
    FILE *fp = fopen("/proc/self/smaps", "r");
    if (!fp) return;
    char line[512];
    int in = 0; /* the current mapping lies inside one of the set's files */
    while (fgets(line, sizeof line, fp)) {
        unsigned long lo, hi;
        unsigned long long kb;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = 0;
            for (int i = 0; i < s->n_files && !in; i++) {
                uintptr_t b = (uintptr_t)s->files[i]->map, e = b + s->files[i]->map_len;
                in = lo >= b && hi <= ((e + 4095) & ~(uintptr_t)4095);
            }
        } else if (in && sscanf(line, "Rss: %llu kB", &kb) == 1) {
            *resident += (size_t)kb * 1024;
        } else if (in && sscanf(line, "FilePmdMapped: %llu kB", &kb) == 1) {
            *huge += (size_t)kb * 1024;
        }
    }
    fclose(fp);
}

void st_release(const void *p, size_t bytes) {
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = ((uintptr_t)p + pg - 1) & ~(pg - 1);
    uintptr_t b = ((uintptr_t)p + bytes) & ~(pg - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED); /* advice: failure leaves them resident */
}

typedef struct {
    const char *tensor;
    const char *shard;
    int shard_idx;
} st_wm_entry;

static int cmp_wm_shard(const void *a, const void *b) {
    return strcmp(((const st_wm_entry *)a)->shard, ((const st_wm_entry *)b)->shard);
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp(((const st_set_entry *)a)->t->name, ((const st_set_entry *)b)->t->name);
}

void st_set_free(st_set *s) {
    if (!s) return;
    for (int i = 0; i < s->n_files; i++) {
        st_file_free(s->files[i]);
        free(s->shard_names[i]);
    }
    free(s->files);
    free(s->shard_names);
    free(s->entries);
    free(s);
}

/* Builds s->entries (all tensors of all files, sorted) and rejects names present in
 * more than one shard. path is the index file, for messages. */
static as_status set_build_index(st_set *s, const char *path, as_error *err) {
    size_t total = 0;
    for (int i = 0; i < s->n_files; i++) total += (size_t)st_file_count(s->files[i]);
    if (total > ST_MAX_TENSORS)
        return as_err_set(err, AS_ERR_INPUT, "%s: shards hold %zu tensors, over the limit of %d",
                          path, total, ST_MAX_TENSORS);
    s->entries = as_calloc(total, sizeof(st_set_entry));
    if (!s->entries) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
    size_t k = 0;
    for (int i = 0; i < s->n_files; i++)
        for (int j = 0; j < st_file_count(s->files[i]); j++) {
            s->entries[k].t = st_file_tensor(s->files[i], j);
            s->entries[k].file = i;
            k++;
        }
    qsort(s->entries, total, sizeof(st_set_entry), cmp_entry_name);
    s->n = (int)total;
    for (size_t t = 1; t < total; t++) {
        if (strcmp(s->entries[t].t->name, s->entries[t - 1].t->name) == 0)
            return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s' appears in shards '%s' and '%s'",
                              path, s->entries[t].t->name, s->shard_names[s->entries[t - 1].file],
                              s->shard_names[s->entries[t].file]);
    }
    return AS_OK;
}

static int shard_name_ok(const char *s) {
    return s[0] != 0 && strchr(s, '/') == NULL && strchr(s, '\\') == NULL &&
           strstr(s, "..") == NULL && strlen(s) < 1024;
}

/* Opens DIR/model.safetensors.index.json (at index_path) and its shards into s. */
static as_status set_open_index(st_set *s, const char *dir, const char *index_path,
                                as_error *err) {
    as_status rc = AS_OK;
    char *text = NULL;
    size_t len = 0;
    json_t *root = NULL;
    st_wm_entry *wm = NULL;
    char shard_path[4096];
    if ((rc = as_read_file(index_path, ST_MAX_INDEX_BYTES, &text, &len, err)) != AS_OK)
        goto cleanup;
    /* weight_map's entries, plus the few keys of "metadata", are the keys at depth 2 */
    if (json_count_keys(text, len, 2, (size_t)ST_MAX_TENSORS + 1025) >
        (size_t)ST_MAX_TENSORS + 1024) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: weight_map lists more than %d tensors (the limit)",
                        index_path, ST_MAX_TENSORS);
        goto cleanup;
    }
    json_error_t jerr;
    root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: invalid JSON: %s (line %d)", index_path, jerr.text,
                        jerr.line);
        goto cleanup;
    }
    json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map)) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: field 'weight_map' %s", index_path,
                        map ? "is not an object" : "missing");
        goto cleanup;
    }
    size_t n = json_object_size(map);
    if (n > ST_MAX_TENSORS) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: weight_map lists %zu tensors, over the limit of %d",
                        index_path, n, ST_MAX_TENSORS);
        goto cleanup;
    }
    wm = as_calloc(n, sizeof *wm);
    if (!wm) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", index_path);
        goto cleanup;
    }
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach(map, key, val) {
        if (!json_is_string(val)) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: weight_map entry for '%s' is not a string",
                            index_path, key);
            goto cleanup;
        }
        const char *shard = json_string_value(val);
        if (!shard_name_ok(shard)) {
            rc = as_err_set(err, AS_ERR_INPUT,
                            "%s: weight_map entry for '%s' names shard '%.200s', which is not a "
                            "plain file name",
                            index_path, key, shard);
            goto cleanup;
        }
        wm[k].tensor = key;
        wm[k].shard = shard;
        k++;
    }
    qsort(wm, n, sizeof *wm, cmp_wm_shard);
    int n_shards = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || strcmp(wm[i].shard, wm[i - 1].shard) != 0) n_shards++;
        wm[i].shard_idx = n_shards - 1;
    }
    if (n_shards > ST_MAX_SHARDS) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: weight_map names %d shards, over the limit of %d",
                        index_path, n_shards, ST_MAX_SHARDS);
        goto cleanup;
    }
    s->files = as_calloc((size_t)n_shards, sizeof(st_file *));
    s->shard_names = as_calloc((size_t)n_shards, sizeof(char *));
    if (!s->files || !s->shard_names) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", index_path);
        goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && wm[i].shard_idx == wm[i - 1].shard_idx) continue;
        int si = wm[i].shard_idx;
        if ((rc = as_path_join(shard_path, sizeof shard_path, dir, wm[i].shard, err)) != AS_OK)
            goto cleanup;
        if (!(s->shard_names[si] = as_strdup(wm[i].shard))) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", index_path);
            goto cleanup;
        }
        s->n_files = si + 1;
        if ((rc = st_file_open(shard_path, &s->files[si], err)) != AS_OK) goto cleanup;
    }
    for (size_t i = 0; i < n; i++) {
        if (!st_file_find(s->files[wm[i].shard_idx], wm[i].tensor)) {
            rc = as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s' is listed in weight_map but not in shard '%s'",
                            index_path, wm[i].tensor, wm[i].shard);
            goto cleanup;
        }
    }
    rc = set_build_index(s, index_path, err);

cleanup:
    free(wm);
    json_decref(root);
    free(text);
    return rc;
}

as_status st_set_open_dir(const char *dir, st_set **out, as_error *err) {
    as_status rc = AS_OK;
    char path[4096];
    *out = NULL;
    st_set *s = as_calloc(1, sizeof *s);
    if (!s) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", dir);
    if ((rc = as_path_join(path, sizeof path, dir, "model.safetensors", err)) != AS_OK)
        goto cleanup;
    if (as_file_exists(path)) {
        s->files = as_calloc(1, sizeof(st_file *));
        s->shard_names = as_calloc(1, sizeof(char *));
        if (!s->files || !s->shard_names || !(s->shard_names[0] = as_strdup("model.safetensors"))) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", dir);
            goto cleanup;
        }
        s->n_files = 1;
        if ((rc = st_file_open(path, &s->files[0], err)) != AS_OK) goto cleanup;
        rc = set_build_index(s, path, err);
        goto cleanup;
    }
    if ((rc = as_path_join(path, sizeof path, dir, "model.safetensors.index.json", err)) != AS_OK)
        goto cleanup;
    if (!as_file_exists(path)) {
        /* name the weights that are there but not read (pickles are code, not data) */
        static const char *const other[] = {"pytorch_model.bin", "pytorch_model.bin.index.json",
                                            "tf_model.h5", "flax_model.msgpack"};
        const char *found = NULL;
        for (size_t i = 0; i < sizeof other / sizeof other[0] && !found; i++)
            if (as_path_join(path, sizeof path, dir, other[i], err) == AS_OK && as_file_exists(path))
                found = other[i];
        if (found)
            rc = as_err_set(err, AS_ERR_INPUT,
                            "%s: no model.safetensors or model.safetensors.index.json (%s is not read: "
                            "convert it to safetensors, e.g. with transformers' save_pretrained)",
                            dir, found);
        else
            rc = as_err_set(err, AS_ERR_INPUT, "%s: no model.safetensors or model.safetensors.index.json",
                            dir);
        goto cleanup;
    }
    rc = set_open_index(s, dir, path, err);

cleanup:
    if (rc != AS_OK) {
        st_set_free(s);
        return rc;
    }
    *out = s;
    return AS_OK;
}

const st_tensor *st_set_find(const st_set *s, const char *name) {
    if (!s || !name || s->n == 0) return NULL;
    st_tensor kt = {.name = name};
    st_set_entry key = {.t = &kt};
    const st_set_entry *hit =
        bsearch(&key, s->entries, (size_t)s->n, sizeof(st_set_entry), cmp_entry_name);
    return hit ? hit->t : NULL;
}

int st_set_count(const st_set *s) { return s ? s->n : 0; }

const st_tensor *st_set_tensor(const st_set *s, int i) {
    if (!s || i < 0 || i >= s->n) return NULL;
    return s->entries[i].t;
}

int st_tensor_aligned(const st_tensor *t) {
    size_t a = st_dtype_name_size(t->dtype_name);
    return a == 0 || (uintptr_t)t->data % a == 0;
}

/* ---- writing --------------------------------------------------------------------- */

static const char *dtype_write_name(const st_tensor *t) {
    switch (t->dtype) {
    case DTYPE_F32: return "F32";
    case DTYPE_F16: return "F16";
    case DTYPE_BF16: return "BF16";
    case DTYPE_I64: return "I64";
    case DTYPE_I32: return "I32";
    default: return dtype_by_name(t->dtype_name) ? t->dtype_name : NULL;
    }
}

/* Builds the header object; sizes[i] receives tensor i's byte size. */
static as_status build_header(const char *path, const st_tensor *tensors, int n, size_t *sizes,
                              json_t **out, as_error *err) {
    json_t *root = json_object();
    if (!root) return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const st_tensor *t = &tensors[i];
        const char *dn = dtype_write_name(t);
        if (!t->name || !dn || t->ndim < 0 || t->ndim > ST_MAX_DIMS) {
            json_decref(root);
            return as_err_set(err, AS_ERR_INPUT, "%s: tensor %d ('%s'): bad name, dtype or ndim",
                              path, i, t->name ? t->name : "(null)");
        }
        if (json_object_get(root, t->name) || strcmp(t->name, "__metadata__") == 0) {
            json_decref(root);
            return as_err_set(err, AS_ERR_INPUT, "%s: tensor name '%s' repeated or reserved", path,
                              t->name);
        }
        size_t elem = st_dtype_name_size(dn), n_el = 1;
        int bad = 0;
        json_t *shape = json_array();
        for (int d = 0; d < t->ndim; d++) {
            int64_t v = t->shape[d];
            if (v < 0 || (v != 0 && n_el > SIZE_MAX / (uint64_t)v)) bad = 1;
            else n_el *= (size_t)v;
            json_array_append_new(shape, json_integer(v));
        }
        if (n_el > SIZE_MAX / elem) bad = 1;
        size_t bytes = bad ? 0 : n_el * elem;
        if (bad || (bytes > 0 && !t->data)) {
            json_decref(shape);
            json_decref(root);
            return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s': bad shape or missing data",
                              path, t->name);
        }
        sizes[i] = bytes;
        json_t *e = json_pack("{s:s, s:o, s:[I, I]}", "dtype", dn, "shape", shape, "data_offsets",
                              (json_int_t)off, (json_int_t)(off + bytes));
        if (!e || json_object_set_new(root, t->name, e) != 0) {
            json_decref(root);
            return as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        }
        off += bytes;
    }
    *out = root;
    return AS_OK;
}

as_status st_write(const char *path, const st_tensor *tensors, int n, as_error *err) {
    as_status rc = AS_OK;
    json_t *root = NULL;
    char *text = NULL;
    FILE *fp = NULL;
    size_t *sizes = NULL;
    ASSERT(n >= 0 && (n == 0 || tensors));
    sizes = as_calloc((size_t)n, sizeof(size_t));
    if (!sizes) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        goto cleanup;
    }
    if ((rc = build_header(path, tensors, n, sizes, &root, err)) != AS_OK) goto cleanup;
    text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!text) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: out of memory", path);
        goto cleanup;
    }
    size_t len = strlen(text);
    size_t padded = (len + 7) & ~(size_t)7; /* HF pads the header with spaces to 8 bytes */
    uint8_t lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    fp = fopen(path, "wb");
    if (!fp) {
        rc = as_err_set(err, AS_ERR_INTERNAL, "%s: cannot create: %s", path, strerror(errno));
        goto cleanup;
    }
    int ok = fwrite(lenbuf, 1, 8, fp) == 8 && fwrite(text, 1, len, fp) == len;
    for (size_t i = len; ok && i < padded; i++) ok = fputc(' ', fp) != EOF;
    for (int i = 0; ok && i < n; i++)
        ok = sizes[i] == 0 || fwrite(tensors[i].data, 1, sizes[i], fp) == sizes[i];
    if (fclose(fp) != 0) ok = 0;
    fp = NULL;
    if (!ok) rc = as_err_set(err, AS_ERR_INTERNAL, "%s: write failed: %s", path, strerror(errno));

cleanup:
    if (fp) fclose(fp);
    free(text);
    json_decref(root);
    free(sizes);
    return rc;
}
