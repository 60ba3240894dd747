/* fixture_files.h — a model fixture of tests/ref/fixtures/models and its reference files
 * (expected.safetensors, grads.safetensors, param_grads.safetensors), opened for a unit
 * test; any failure fails the test with the engine's message. Header-only test support. */
#ifndef AS_TEST_FIXTURE_FILES_H
#define AS_TEST_FIXTURE_FILES_H

#include <stdio.h>

#include "attnscope.h"
#include "io/safetensors.h"

typedef struct {
    as_model *m;
    st_file *ex, *gr, *pg; /* expected forward, input/attention gradients, parameter gradients */
} fx_files;

/* Opens fixture `name`: the model and expected.safetensors always, grads.safetensors when
 * grads, param_grads.safetensors when params. */
static inline void fx_open(const char *name, int grads, int params, fx_files *f) {
    char dir[1024], path[1200];
    as_error err = {0};
    snprintf(dir, sizeof dir, "%s/tests/ref/fixtures/models/%s", AS_SOURCE_DIR, name);
    f->m = NULL, f->ex = f->gr = f->pg = NULL;
    if (as_model_load(dir, &f->m, &err)) fail_msg("%s: %s", name, err.msg);
    const char *files[3] = {"expected", grads ? "grads" : NULL, params ? "param_grads" : NULL};
    st_file **dst[3] = {&f->ex, &f->gr, &f->pg};
    for (int i = 0; i < 3; i++) {
        if (!files[i]) continue;
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, files[i]);
        if (st_file_open(path, dst[i], &err)) fail_msg("%s", err.msg);
    }
}

static inline void fx_close(fx_files *f) {
    st_file_free(f->ex);
    st_file_free(f->gr);
    st_file_free(f->pg);
    as_model_free(f->m);
}

#endif
