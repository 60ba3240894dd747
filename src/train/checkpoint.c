/* checkpoint.c — optimizer state next to a Hugging Face checkpoint folder, so that
 * `attnscope pretrain --resume` continues bit-for-bit: DIR/trainer_state.bin holds
 *   "ASTRST01" | u64 n | i64 step | u64 seed | f32 m[n] | f32 v[n]   (little-endian)
 * and DIR's config.json + model.safetensors (F32) hold the weights. Also loads a
 * folder as a trainable model. It does not decide when to save (the loops do).
 */
#include "train/trainer.h"
#include "core/file.h"

#include <errno.h>
#include <string.h>

#define STATE_MAGIC "ASTRST01"

as_status checkpoint_state_save(const char *dir, const trainop_adamw *o, uint64_t seed, as_error *err) {
    char path[4096], tmp[4200];
    as_status rc = as_path_join(path, sizeof path, dir, "trainer_state.bin", err);
    if (rc) return rc;
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return as_err_set(err, AS_ERR_INTERNAL, "%s: cannot write: %s", tmp, strerror(errno));
    uint64_t n = o->n;
    int64_t step = o->step;
    int ok = fwrite(STATE_MAGIC, 1, 8, f) == 8 && fwrite(&n, 8, 1, f) == 1 && fwrite(&step, 8, 1, f) == 1 &&
             fwrite(&seed, 8, 1, f) == 1 && fwrite(o->m, sizeof(float), o->n, f) == o->n &&
             fwrite(o->v, sizeof(float), o->n, f) == o->n;
    if (fclose(f)) ok = 0;
    if (!ok || rename(tmp, path)) {
        remove(tmp);
        return as_err_set(err, AS_ERR_INTERNAL, "%s: write failed", path);
    }
    return AS_OK;
}

as_status checkpoint_state_load(const char *dir, trainop_adamw *o, uint64_t *seed, as_error *err) {
    char path[4096];
    as_status rc = as_path_join(path, sizeof path, dir, "trainer_state.bin", err);
    if (rc) return rc;
    FILE *f;
    if ((rc = as_file_fopen_regular(path, UINT64_MAX, &f, NULL, err))) return rc;
    char magic[8];
    uint64_t n = 0;
    int64_t step = 0;
    rc = AS_OK;
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, STATE_MAGIC, 8))
        rc = as_err_set(err, AS_ERR_INPUT, "%s: not an attnscope trainer state (bad magic)", path);
    else if (fread(&n, 8, 1, f) != 1 || fread(&step, 8, 1, f) != 1 || fread(seed, 8, 1, f) != 1)
        rc = as_err_set(err, AS_ERR_INPUT, "%s: truncated header", path);
    else if (n != o->n)
        rc = as_err_set(err, AS_ERR_INPUT, "%s: state for %llu parameters, the model has %zu", path,
                        (unsigned long long)n, o->n);
    else if (step < 0)
        rc = as_err_set(err, AS_ERR_INPUT, "%s: negative step", path);
    else if (fread(o->m, sizeof(float), o->n, f) != o->n || fread(o->v, sizeof(float), o->n, f) != o->n)
        rc = as_err_set(err, AS_ERR_INPUT, "%s: truncated moments", path);
    else if (fgetc(f) != EOF)
        rc = as_err_set(err, AS_ERR_INPUT, "%s: trailing bytes", path);
    fclose(f);
    if (!rc) o->step = step;
    return rc;
}

as_status trainable_load(const char *dir, trainable *t, as_error *err) {
    memset(t, 0, sizeof *t);
    train_config c;
    as_status s = as_model_load(dir, &t->m, err);
    if (s || (s = bert_ckpt_config(t->m, &c, err)) || (s = model_params_own(t->m, &t->p, err)) ||
        (s = model_grads_init(t->m, &t->g, err)))
        goto fail;
    t->decay = as_malloc_large(t->p.n ? t->p.n : 1, 1);
    if (!t->decay) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory for %zu parameters", t->p.n);
        goto fail;
    }
    model_params_decay_mask(t->m, &t->p, t->decay);
    return AS_OK;
fail:
    trainable_free(t);
    return s;
}

void trainable_free(trainable *t) {
    if (!t) return;
    as_model_free(t->m); /* before the weights its views point into */
    model_grads_free(&t->p);
    model_grads_free(&t->g);
    grad_groups_free(&t->gg);
    free(t->decay);
    memset(t, 0, sizeof *t);
}
