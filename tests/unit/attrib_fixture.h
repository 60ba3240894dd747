/* attrib_fixture.h — the fixture the attribution tests (test_attrib.c, test_attrib_mix.c)
 * share: a model from tests/ref/fixtures/models/NAME, its expected.safetensors (the
 * "single" input, encoded), the reference file tests/ref/fixtures/attrib/NAME<FX_REF_SUFFIX>
 * .safetensors, and a max-difference check. Include after cmocka.h with FX_REF_SUFFIX
 * (the reference file's suffix) and FX_WHAT_WIDTH (the label column's width) defined.
 */
#ifndef AS_TEST_ATTRIB_FIXTURE_H
#define AS_TEST_ATTRIB_FIXTURE_H

#include "analysis/attrib.h"
#include "io/safetensors.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#ifndef AS_SOURCE_DIR
#define AS_SOURCE_DIR "."
#endif
#define MODELS AS_SOURCE_DIR "/tests/ref/fixtures/models/"
#define REFS AS_SOURCE_DIR "/tests/ref/fixtures/attrib/"

typedef struct {
    const char *name;
    as_model *m;
    st_file *exp, *ref;
    as_encoding enc;
    int L, H, T;
} fx;

static const st_tensor *tensor(st_file *f, const char *name, as_dtype dt) {
    const st_tensor *t = st_file_find(f, name);
    if (!t) fail_msg("no tensor '%s'", name);
    assert_int_equal(t->dtype, dt);
    return t;
}

static void load(fx *f, const char *name) {
    memset(f, 0, sizeof *f);
    f->name = name;
    char path[512];
    as_error err = {0};
    snprintf(path, sizeof path, MODELS "%s", name);
    if (as_model_load(path, &f->m, &err)) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, MODELS "%s/expected.safetensors", name);
    if (st_file_open(path, &f->exp, &err)) fail_msg("%s", err.msg);
    snprintf(path, sizeof path, REFS "%s" FX_REF_SUFFIX ".safetensors", name);
    if (st_file_open(path, &f->ref, &err)) fail_msg("%s", err.msg);
    const st_tensor *ids = tensor(f->exp, "single.input_ids", DTYPE_I32);
    const st_tensor *tt = tensor(f->exp, "single.token_type_ids", DTYPE_I32);
    /* type ids only for segment embeddings: GPT-2 given type ids adds wte[type id] */
    const int32_t *types = as_model_config(f->m)->type_vocab > 1 ? tt->data : NULL;
    if (as_encoding_from_ids(f->m, ids->data, types, (int)ids->n_elems, &f->enc, &err)) fail_msg("%s", err.msg);
    const st_tensor *a = tensor(f->exp, "single.attentions", DTYPE_F32);
    f->L = (int)a->shape[0], f->H = (int)a->shape[1], f->T = (int)a->shape[2];
}

static void unload(fx *f) {
    as_encoding_free(&f->enc);
    st_file_free(f->exp);
    st_file_free(f->ref);
    as_model_free(f->m);
}

/* max |c - r| (relative: over max |r|) <= tol */
static void compare(const char *what, const float *c, const float *r, size_t n, double tol, int relative) {
    double md = 0.0, mr = 0.0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)c[i] - r[i]));
        mr = fmax(mr, fabs(r[i]));
    }
    double d = relative ? md / mr : md;
    printf("  %-*s max %s diff %.2e (scale %.3g)\n", FX_WHAT_WIDTH, what, relative ? "rel" : "abs", d, mr);
    assert_true(mr > 0.0);
    assert_true(d <= tol);
}

#endif
