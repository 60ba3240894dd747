/* train_args.h — argument helpers shared by the training subcommands (vocab,
 * pretrain, finetune, eval, distill): file lists given as repeated options and/or
 * comma-separated, floats, dtypes. Header-only (static); the lists borrow argv.
 */
#ifndef AS_TRAIN_ARGS_H
#define AS_TRAIN_ARGS_H

#include "cli.h"
#include "attnscope/train.h"

#include <errno.h>
#include <math.h>
#include <string.h>

typedef struct {
    const char *v[DATA_MAX_FILES];
    int n;
    char *owned[DATA_MAX_FILES]; /* split copies */
    int n_owned;
} ta_list;

/* Appends the comma-separated paths in s; -1 when there are too many. */
static inline int ta_list_add(ta_list *l, const char *s) {
    char *c = as_strdup(s);
    if (!c || l->n_owned == DATA_MAX_FILES) {
        free(c);
        return -1;
    }
    l->owned[l->n_owned++] = c;
    for (char *p = strtok(c, ","); p; p = strtok(NULL, ",")) {
        if (l->n == DATA_MAX_FILES) return -1;
        if (*p) l->v[l->n++] = p;
    }
    return 0;
}

static inline void ta_list_free(ta_list *l) {
    for (int i = 0; i < l->n_owned; i++) free(l->owned[i]);
    l->n = l->n_owned = 0;
}

/* Parses a finite float in [lo, hi]; 0 ok, -1 otherwise. */
static inline int ta_float(const char *s, double lo, double hi, float *out) {
    char *e;
    errno = 0;
    double d = strtod(s, &e);
    if (errno || e == s || *e || !isfinite(d) || d < lo || d > hi) return -1;
    *out = (float)d;
    return 0;
}

static inline int ta_dtype(const char *s, as_dtype *out) {
    if (!strcmp(s, "f16")) *out = DTYPE_F16;
    else if (!strcmp(s, "f32")) *out = DTYPE_F32;
    else return -1;
    return 0;
}

/* Option-parsing steps for the training commands' `if / else if` chains over the
 * current option `a` and its value `v`: parse into `o.field`, or set `rc` to a
 * usage error naming the command. Used as `TA_INT("pretrain", "--steps", steps, 1, 100)`. */
#define TA_INT(cmd, name, field, lo, hi)                                                         \
    else if (!strcmp(a, name)) {                                                                 \
        if (cli_parse_int(v, lo, hi, &o.field))                                                  \
            rc = cli_usage_error(cmd, "bad %s '%s': expected an integer in [%d, %d]", name, v, lo, hi); \
    }
#define TA_FLT(cmd, name, field, lo, hi)                                                         \
    else if (!strcmp(a, name)) {                                                                 \
        if (ta_float(v, lo, hi, &o.field))                                                       \
            rc = cli_usage_error(cmd, "bad %s '%s': expected a number in [%g, %g]", name, v, lo, hi); \
    }

/* --precision f32|bf16 into o.precision, and its help line. */
#define TA_PRECISION(cmd)                                                                    \
    else if (!strcmp(a, "--precision")) {                                                    \
        if (as_precision_parse(v, &o.precision))                                             \
            rc = cli_usage_error(cmd, "--precision must be f32 or bf16, not '%s'", v);        \
    }
#define TA_PRECISION_HELP                                                                    \
    "--precision bf16 runs the products (forward, input and weight gradients) in BF16\n"     \
    "with F32 sums against BF16 copies of the F32 weights, rounded again after every\n"     \
    "step; the optimizer, its moments and the saved weights stay F32 (default f32).\n"

#endif
