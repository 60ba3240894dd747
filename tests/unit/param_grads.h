/* param_grads.h — comparison of a model's parameter gradients (model_grads) with a
 * reference safetensors file of gradients under the checkpoint's tensor names, through
 * the names the bindings recorded (lin_t.wname, ln_t.gname/bname); fused views as slices
 * of their tensor. Tolerance: tol (2e-4 unless set) x max(the tensor's largest
 * |reference|, 1e-3 x the model's). Header-only test support (needs cmocka.h, model/model.h, io/safetensors.h). */
#ifndef AS_TEST_PARAM_GRADS_H
#define AS_TEST_PARAM_GRADS_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *copy_data(const st_tensor *t) {
    void *p = malloc(t->nbytes ? t->nbytes : 1);
    assert_non_null(p);
    memcpy(p, t->data, t->nbytes);
    return p;
}

static double max_abs(const float *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fabs(a[i]) > m ? fabs(a[i]) : m;
    return m;
}

typedef struct {
    const st_file *ref;
    double scale;           /* the largest |reference gradient| of the model */
    double tol;             /* relative tolerance; 0 = 2e-4 */
    int bad, checked;
    char seen[256][160];     /* reference tensors compared */
    int n_seen;
} pg_check;

/* Prefix of the reference's names ("grad." in gen_backward.py's files; "" otherwise). */
static const char *pc_prefix = "";

static void pg_mark(pg_check *pc, const char *name) {
    for (int i = 0; i < pc->n_seen; i++)
        if (!strcmp(pc->seen[i], name)) return;
    if (pc->n_seen < 256) snprintf(pc->seen[pc->n_seen++], sizeof pc->seen[0], "%.159s", name);
}

/* ours (rows x cols, row-major) against rows [r0, r0 + rows) and columns [c0, c0 + cols)
 * of reference tensor `name` (R x C; 1-D: C = 1). */
static void cmp_block(pg_check *pc, const char *name, const float *ours, int rows, int cols, int r0, int c0) {
    if (!name || !ours) return;
    char full[160];
    if (*pc_prefix && strncmp(name, pc_prefix, strlen(pc_prefix))) {
        snprintf(full, sizeof full, "%s%s", pc_prefix, name);
        name = full;
    }
    const st_tensor *t = st_file_find(pc->ref, name);
    if (!t) {
        printf("  %s: no reference gradient\n", name);
        pc->bad++;
        return;
    }
    int64_t C = t->ndim == 2 ? t->shape[1] : 1;
    float *e = copy_data(t);
    double d = 0.0, mx = 0.0;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            double ref = e[(size_t)(r0 + r) * C + c0 + c];
            mx = fmax(mx, fabs(ref));
            d = fmax(d, fabs(ref - ours[(size_t)r * cols + c]));
        }
    double tol = (pc->tol > 0 ? pc->tol : 2e-4) * fmax(mx, 1e-3 * pc->scale);
    if (!(d <= tol)) {
        printf("  %s [%d:%d, %d:%d]: max|diff| %.2e of %.2e  FAIL\n", name, r0, r0 + rows, c0, c0 + cols, d, mx);
        pc->bad++;
    }
    pc->checked++;
    pg_mark(pc, name);
    free(e);
}

static void bias_name(const char *wname, char *out, size_t cap) {
    snprintf(out, cap, "%s", wname);
    char *p = strstr(out, ".weight");
    if (p && p[7] == 0) snprintf(p, cap - (size_t)(p - out), ".bias");
}

static void cmp_lin(pg_check *pc, const lin_t *l, const lin_grad *g) {
    if (!l->wname || !g->w) return;
    if (l->in_out) cmp_block(pc, l->wname, g->w, l->n_in, l->n_out, 0, l->part_off);
    else cmp_block(pc, l->wname, g->w, l->n_out, l->n_in, l->part_off, 0);
    if (g->b) {
        char bn[128];
        bias_name(l->wname, bn, sizeof bn);
        cmp_block(pc, bn, g->b, l->n_out, 1, l->part_off, 0);
    }
}

static void cmp_ln(pg_check *pc, const ln_t *ln, const ln_grad *g) {
    if (ln->gname) cmp_block(pc, ln->gname, g->g, ln->n, 1, 0, 0);
    if (ln->bname) cmp_block(pc, ln->bname, g->b, ln->n, 1, 0, 0);
}

#endif
