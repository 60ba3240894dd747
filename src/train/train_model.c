/* train_model.c — the parameter / gradient arenas of a trainable encoder: config
 * checks, Hugging Face-style random initialisation, copying from a loaded as_model (or
 * viewing its embeddings and layer matrices in place, for a model that is only run),
 * Hugging Face tensor names for each architecture, and saving a model folder
 * (config.json + model.safetensors) that as_model_load reads back.
 * It does not run the model (train_forward.c) or optimise it.
 */
#include "train/train.h"
#include "model/model.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

/* ---- arena layout ---- */

enum { INIT_NORMAL = 0, INIT_ZERO, INIT_ONE };

/* The tensors of p in arena order; init kind of each. */
static void fields(train_params *p, float **out[TRAIN_N_TENSORS]) {
    float **f[TRAIN_N_TENSORS] = {&p->wte,   &p->wpe,    &p->wtt,    &p->ln_e_g,   &p->ln_e_b,   &p->qkv_w, &p->qkv_b,
                               &p->o_w,   &p->o_b,    &p->ln1_g,  &p->ln1_b,    &p->f1_w,     &p->f1_b,  &p->f2_w,
                               &p->f2_b,  &p->ln2_g,  &p->ln2_b,  &p->pool_w,   &p->pool_b,   &p->cls_w, &p->cls_b,
                               &p->mlm_w, &p->mlm_b,  &p->mlm_ln_g, &p->mlm_ln_b, &p->mlm_bias};
    memcpy(out, f, sizeof f);
}

static const int init_kind[TRAIN_N_TENSORS] = {
    INIT_NORMAL, INIT_NORMAL, INIT_NORMAL, INIT_ONE,  INIT_ZERO,   INIT_NORMAL, INIT_ZERO, INIT_NORMAL, INIT_ZERO,
    INIT_ONE,    INIT_ZERO,   INIT_NORMAL, INIT_ZERO, INIT_NORMAL, INIT_ZERO,   INIT_ONE,  INIT_ZERO,   INIT_NORMAL,
    INIT_ZERO,   INIT_NORMAL, INIT_ZERO,   INIT_NORMAL, INIT_ZERO, INIT_ONE,    INIT_ZERO, INIT_ZERO};

static void tensor_sizes(const train_config *c, size_t s[TRAIN_N_TENSORS]) {
    size_t L = (size_t)c->n_layer, D = (size_t)c->d_model, F = (size_t)c->d_ff, V = (size_t)c->vocab_size;
    size_t C = (size_t)c->num_labels, cls = c->num_labels > 0, mlm = c->mlm != 0;
    size_t v[TRAIN_N_TENSORS] = {V * D,     (size_t)c->max_pos * D, (size_t)c->type_vocab * D, D, D,
                              L * 3 * D * D, L * 3 * D, L * D * D, L * D, L * D, L * D, L * F * D, L * F, L * D * F,
                              L * D, L * D, L * D, cls * D * D, cls * D, C * D, C,
                              mlm * D * D, mlm * D, mlm * D, mlm * D, mlm * V};
    memcpy(s, v, sizeof v);
}

as_status train_config_check(const train_config *c, as_error *err) {
    if (c->arch != ARCH_BERT && c->arch != ARCH_ROBERTA && c->arch != ARCH_DISTILBERT)
        return as_err_set(err, AS_ERR_INPUT, "training supports bert, roberta and distilbert, not %s",
                          as_arch_name(c->arch));
    if (c->n_layer < 1 || c->n_layer > AS_MAX_LAYERS)
        return as_err_set(err, AS_ERR_INPUT, "layers %d out of range [1, %d]", c->n_layer, AS_MAX_LAYERS);
    if (c->n_head < 1 || c->n_head > AS_MAX_HEADS)
        return as_err_set(err, AS_ERR_INPUT, "heads %d out of range [1, %d]", c->n_head, AS_MAX_HEADS);
    if (c->d_model < 1 || c->d_model > AS_MAX_DMODEL || c->d_model % c->n_head)
        return as_err_set(err, AS_ERR_INPUT, "width %d out of range [1, %d] or not divisible by %d heads",
                          c->d_model, AS_MAX_DMODEL, c->n_head);
    if (c->d_ff < 1 || c->d_ff > 4 * AS_MAX_DMODEL)
        return as_err_set(err, AS_ERR_INPUT, "feed-forward width %d out of range [1, %d]", c->d_ff, 4 * AS_MAX_DMODEL);
    if (c->vocab_size < 1 || c->vocab_size > AS_MAX_VOCAB)
        return as_err_set(err, AS_ERR_INPUT, "vocabulary %d out of range [1, %d]", c->vocab_size, AS_MAX_VOCAB);
    if (c->max_pos < 1 || c->max_pos > AS_MAX_POSITIONS || c->pos_offset < 0 || c->pos_offset >= c->max_pos)
        return as_err_set(err, AS_ERR_INPUT, "positions %d (offset %d) out of range [1, %d]", c->max_pos,
                          c->pos_offset, AS_MAX_POSITIONS);
    if (c->type_vocab < 0 || c->type_vocab > AS_MAX_POSITIONS || (c->arch == ARCH_DISTILBERT && c->type_vocab))
        return as_err_set(err, AS_ERR_INPUT, "token types %d out of range", c->type_vocab);
    if (c->num_labels < 0 || c->num_labels > AS_MAX_LABELS)
        return as_err_set(err, AS_ERR_INPUT, "classes %d out of range [0, %d]", c->num_labels, AS_MAX_LABELS);
    if (c->pad_token_id < -1 || c->pad_token_id >= c->vocab_size)
        return as_err_set(err, AS_ERR_INPUT, "pad_token_id %d outside the vocabulary", c->pad_token_id);
    if (c->arch == ARCH_ROBERTA && (c->pad_token_id < 0 || c->pos_offset != c->pad_token_id + 1))
        return as_err_set(err, AS_ERR_INPUT, "RoBERTa needs pad_token_id >= 0 and positions offset pad + 1");
    if (!(c->ln_eps > 0.0f && c->ln_eps < 1.0f))
        return as_err_set(err, AS_ERR_INPUT, "layer_norm_eps %g out of range (0, 1)", c->ln_eps);
    if (c->cls_act != TRAIN_CLS_TANH && c->cls_act != TRAIN_CLS_RELU)
        return as_err_set(err, AS_ERR_INPUT, "unknown classifier activation %d", (int)c->cls_act);
    /* the whole arena must be addressable */
    size_t s[TRAIN_N_TENSORS], total = 0;
    tensor_sizes(c, s);
    for (int i = 0; i < TRAIN_N_TENSORS; i++) total += s[i];
    if (total > ((size_t)1 << 34)) return as_err_set(err, AS_ERR_INPUT, "model of %zu parameters is too large", total);
    return AS_OK;
}

/* The tensors a borrowed model reads in place from the as_model (arena order): the
 * three embedding tables and the layer matrices; everything else is copied. */
static const int borrowed_tensor[TRAIN_N_TENSORS] = {1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0,
                                                     1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

/* Binds p to consecutive tensors of mem, leaving the borrowed ones NULL when borrow. */
static void bind(train_params *p, float *mem, const size_t s[TRAIN_N_TENSORS], int borrow) {
    float **f[TRAIN_N_TENSORS];
    memset(p, 0, sizeof *p);
    fields(p, f);
    for (int i = 0; i < TRAIN_N_TENSORS; i++) {
        if (borrow && borrowed_tensor[i]) continue;
        *f[i] = s[i] ? mem : NULL;
        mem += s[i];
    }
}

void train_model_bind_layers(train_model *m) {
    size_t D = (size_t)m->cfg.d_model, F = (size_t)m->cfg.d_ff;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        size_t L = (size_t)l;
        const float *q = m->params.qkv_w + L * 3 * D * D;
        train_layer_w w = {q, q + D * D, q + 2 * D * D, m->params.o_w + L * D * D, m->params.f1_w + L * F * D,
                           m->params.f2_w + L * D * F};
        m->lw[l] = w;
    }
}

/* borrow: the arena holds only the tensors not borrowed; the caller points the rest
 * (params.wte, wpe, wtt and lw) at the source. */
static as_status alloc_model(const train_config *cfg, int with_grads, int borrow, train_model **out, as_error *err) {
    as_status s;
    *out = NULL;
    if ((s = train_config_check(cfg, err))) return s;
    ASSERT(!(borrow && with_grads));
    train_model *m = as_calloc(1, sizeof *m);
    if (!m) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    m->cfg = *cfg;
    m->borrowed = borrow != 0;
    tensor_sizes(cfg, m->sizes);
    size_t own = 0;
    for (int i = 0; i < TRAIN_N_TENSORS; i++) {
        m->n_params += m->sizes[i];
        own += borrow && borrowed_tensor[i] ? 0 : m->sizes[i];
    }
    m->params_mem = as_calloc(own ? own : 1, sizeof(float));
    m->lw = as_calloc((size_t)cfg->n_layer, sizeof *m->lw);
    if (with_grads) m->grads_mem = as_calloc(m->n_params, sizeof(float));
    if (!m->params_mem || !m->lw || (with_grads && !m->grads_mem)) {
        size_t np = m->n_params;
        train_model_free(m);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory for %zu parameters", np);
    }
    bind(&m->params, m->params_mem, m->sizes, borrow);
    if (!borrow) train_model_bind_layers(m);
    if (with_grads) bind(&m->grads, m->grads_mem, m->sizes, 0);
    *out = m;
    return AS_OK;
}

double train_init_std(const train_config *c) { return c->init_range > 0 ? c->init_range : 0.02; }

/* splitmix64 stream + Box-Muller normals, for initialisation. */
typedef struct {
    uint64_t s;
} init_rng;

static uint64_t rng_next(init_rng *r) {
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double rng_uniform(init_rng *r) { return ((double)(rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static void init_tensor(float *x, size_t n, int kind, double std, init_rng *r) {
    if (kind == INIT_ZERO) {
        memset(x, 0, n * sizeof(float));
        return;
    }
    if (kind == INIT_ONE) {
        for (size_t i = 0; i < n; i++) x[i] = 1.0f;
        return;
    }
    for (size_t i = 0; i < n; i += 2) { /* Box & Muller 1958 */
        double u1 = rng_uniform(r), u2 = rng_uniform(r);
        double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
        x[i] = (float)(std * rad * cos(th));
        if (i + 1 < n) x[i + 1] = (float)(std * rad * sin(th));
    }
}

/* Initialises tensors [lo, hi) of the arena (arena order) as Hugging Face's
 * _init_weights does; padding rows of the embeddings set to 0. */
static void init_range(train_model *m, uint64_t seed, int lo, int hi) {
    init_rng r = {seed * 0x2545f4914f6cdd1dULL + 0x1234567ULL};
    float **f[TRAIN_N_TENSORS];
    fields(&m->params, f);
    const train_config *c = &m->cfg;
    for (int i = lo; i < hi; i++)
        if (m->sizes[i]) init_tensor(*f[i], m->sizes[i], init_kind[i], train_init_std(c), &r);
    size_t D = (size_t)c->d_model;
    if (lo == 0 && c->pad_token_id >= 0) {
        memset(m->params.wte + (size_t)c->pad_token_id * D, 0, D * sizeof(float));
        if (c->arch == ARCH_ROBERTA) memset(m->params.wpe + (size_t)c->pad_token_id * D, 0, D * sizeof(float));
    }
}

enum { T_POOL_W = 17, T_CLS_B = 20, T_MLM_W = 21, T_MLM_BIAS = 25 };

as_status train_model_init(const train_config *cfg, uint64_t seed, int with_grads, train_model **out, as_error *err) {
    as_status s = alloc_model(cfg, with_grads, 0, out, err);
    if (s) return s;
    init_range(*out, seed, 0, TRAIN_N_TENSORS);
    return AS_OK;
}

void train_model_init_sinusoidal_positions(train_model *m) {
    int P = m->cfg.max_pos, D = m->cfg.d_model;
    double scale = train_init_std(&m->cfg) * sqrt(2.0); /* a sinusoid's RMS is 1/sqrt(2) */
    for (int p = 0; p < P; p++) {
        int pos = p - m->cfg.pos_offset; /* RoBERTa: rows before the offset are unused */
        float *row = m->params.wpe + (size_t)p * (size_t)D;
        for (int i = 0; i < D; i++) {
            double freq = pow(10000.0, -(double)(i - i % 2) / (double)D);
            row[i] = pos < 0 ? 0.0f : (float)(scale * (i % 2 ? cos(pos * freq) : sin(pos * freq)));
        }
    }
}

void train_model_free(train_model *m) {
    if (!m) return;
    if (m->labels)
        for (int i = 0; i < m->cfg.num_labels; i++) free(m->labels[i]);
    free(m->labels);
    free(m->params_mem);
    free(m->grads_mem);
    free(m->lw);
    free(m);
}

void train_zero_grad(train_model *m) {
    if (m && m->grads_mem) memset(m->grads_mem, 0, m->n_params * sizeof(float));
}

/* ---- from a loaded model ---- */

static void copy_bias(float *b, const lin_t *l) {
    if (l->b) memcpy(b, l->b, (size_t)l->n_out * sizeof(float));
    else memset(b, 0, (size_t)l->n_out * sizeof(float));
}

static void copy_lin(float *w, float *b, const lin_t *l) {
    ASSERT(!l->in_out && l->ldw == l->n_in);
    memcpy(w, l->w, (size_t)l->n_out * l->n_in * sizeof(float));
    copy_bias(b, l);
}

static void copy_ln(float *g, float *b, const ln_t *ln) {
    memcpy(g, ln->g, (size_t)ln->n * sizeof(float));
    memcpy(b, ln->b, (size_t)ln->n * sizeof(float));
}

as_status train_model_from_as(const as_model *am, const train_from_as_opts *o, train_model **out, as_error *err) {
    as_status s;
    *out = NULL;
    train_from_as_opts def = TRAIN_FROM_AS_DEFAULTS;
    if (!o) o = &def;
    const as_config *ac = &am->cfg;
    if (ac->arch == ARCH_GPT2 || !strcmp(ac->model_type, "electra") || ac->d_embed != ac->d_model || am->pre_ln)
        return as_err_set(err, AS_ERR_INPUT, "%s: training supports bert, roberta and distilbert models, not %s",
                          am->dir, ac->model_type);
    if (ac->causal)
        return as_err_set(err, AS_ERR_INPUT, "%s: training supports encoders, not decoders (is_decoder is true)",
                          am->dir);
    if (o->borrow && o->with_grads)
        return as_err_set(err, AS_ERR_INPUT, "%s: a model whose weights are borrowed has no gradients", am->dir);
    for (int l = 0; l < ac->n_layer; l++) {
        const layer_w *w = &am->layers[l];
        if (!w->q.w || !w->k.w || !w->v.w || !w->o.w || !w->ff1.w || !w->ff2.w)
            return as_err_set(err, AS_ERR_INPUT, "%s: layer %d holds its weights in BF16 only; training reads float32",
                              am->dir, l);
    }
    int has_cls = (am->heads & HEAD_CLASSIFIER) != 0, has_mlm = (am->heads & HEAD_MLM) != 0;
    if (has_cls && am->cls_pre_act != CLS_ACT_TANH && am->cls_pre_act != CLS_ACT_RELU)
        return as_err_set(err, AS_ERR_INPUT, "%s: classifier activation not supported for training", am->dir);
    int D = ac->d_model, V = ac->vocab_size;
    if (has_mlm && am->mlm_decoder != am->wte &&
        memcmp(am->mlm_decoder, am->wte, (size_t)V * D * sizeof(float)) != 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: the MLM decoder is not tied to the word embeddings", am->dir);
    train_config c = {0};
    c.arch = ac->arch;
    c.n_layer = ac->n_layer;
    c.n_head = ac->n_head;
    c.d_model = D;
    c.d_ff = ac->d_ff;
    c.vocab_size = V;
    c.max_pos = ac->max_pos;
    c.type_vocab = am->wtt ? ac->type_vocab : 0;
    c.ln_eps = ac->ln_eps;
    c.act = ac->act;
    c.mlm_act = has_mlm ? am->mlm_act : (ac->arch == ARCH_ROBERTA ? ACT_GELU : ac->act);
    c.cls_act = ac->arch == ARCH_DISTILBERT ? TRAIN_CLS_RELU : TRAIN_CLS_TANH;
    if (has_cls) c.cls_act = am->cls_pre_act == CLS_ACT_RELU ? TRAIN_CLS_RELU : TRAIN_CLS_TANH;
    c.pad_token_id = ac->pad_token_id;
    c.pos_offset = am->pos_offset;
    int C_have = has_cls ? am->cls_out.n_out : 0;
    int keep_cls = has_cls && (o->num_labels < 0 || o->num_labels == C_have);
    c.num_labels = o->num_labels < 0 ? C_have : o->num_labels;
    int keep_mlm = has_mlm && o->mlm != 0;
    c.mlm = o->mlm < 0 ? has_mlm : o->mlm != 0;
    train_model *m = NULL;
    if ((s = alloc_model(&c, o->with_grads, o->borrow, &m, err))) return as_err_prefix(err, "%s", am->dir);
    train_params *p = &m->params;
    size_t Dz = (size_t)D;
    if (o->borrow) { /* read-only views of the loaded model's (mmap'd or converted) tensors */
        p->wte = (float *)am->wte;
        p->wpe = (float *)am->wpe;
        p->wtt = c.type_vocab ? (float *)am->wtt : NULL;
    } else {
        memcpy(p->wte, am->wte, (size_t)V * Dz * sizeof(float));
        memcpy(p->wpe, am->wpe, (size_t)c.max_pos * Dz * sizeof(float));
        if (p->wtt) memcpy(p->wtt, am->wtt, (size_t)c.type_vocab * Dz * sizeof(float));
    }
    copy_ln(p->ln_e_g, p->ln_e_b, &am->ln_emb);
    for (int l = 0; l < c.n_layer; l++) {
        const layer_w *w = &am->layers[l];
        size_t L = (size_t)l, F = (size_t)c.d_ff;
        float *qb = p->qkv_b + L * 3 * Dz;
        if (o->borrow) {
            const lin_t *ls[6] = {&w->q, &w->k, &w->v, &w->o, &w->ff1, &w->ff2};
            for (int i = 0; i < 6; i++) ASSERT(!ls[i]->in_out && ls[i]->ldw == ls[i]->n_in);
            train_layer_w v = {w->q.w, w->k.w, w->v.w, w->o.w, w->ff1.w, w->ff2.w};
            m->lw[l] = v;
            copy_bias(qb, &w->q);
            copy_bias(qb + Dz, &w->k);
            copy_bias(qb + 2 * Dz, &w->v);
            copy_bias(p->o_b + L * Dz, &w->o);
            copy_bias(p->f1_b + L * F, &w->ff1);
            copy_bias(p->f2_b + L * Dz, &w->ff2);
        } else {
            float *qw = p->qkv_w + L * 3 * Dz * Dz;
            copy_lin(qw, qb, &w->q);
            copy_lin(qw + Dz * Dz, qb + Dz, &w->k);
            copy_lin(qw + 2 * Dz * Dz, qb + 2 * Dz, &w->v);
            copy_lin(p->o_w + L * Dz * Dz, p->o_b + L * Dz, &w->o);
            copy_lin(p->f1_w + L * F * Dz, p->f1_b + L * F, &w->ff1);
            copy_lin(p->f2_w + L * Dz * F, p->f2_b + L * Dz, &w->ff2);
        }
        copy_ln(p->ln1_g + L * Dz, p->ln1_b + L * Dz, &w->ln1);
        copy_ln(p->ln2_g + L * Dz, p->ln2_b + L * Dz, &w->ln2);
    }
    if (c.num_labels > 0) {
        if (keep_cls) {
            copy_lin(p->pool_w, p->pool_b, &am->cls_pre);
            copy_lin(p->cls_w, p->cls_b, &am->cls_out);
        } else {
            init_range(m, o->seed, T_POOL_W, T_CLS_B + 1);
        }
        if (ac->id2label && ac->num_labels == c.num_labels) {
            m->labels = as_calloc((size_t)c.num_labels, sizeof(char *));
            for (int i = 0; m->labels && i < c.num_labels; i++) {
                m->labels[i] = as_strdup(ac->id2label[i] ? ac->id2label[i] : "");
                if (!m->labels[i]) {
                    train_model_free(m);
                    return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
                }
            }
            if (!m->labels) {
                train_model_free(m);
                return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            }
        }
    }
    if (c.mlm) {
        if (keep_mlm) {
            copy_lin(p->mlm_w, p->mlm_b, &am->mlm_dense);
            copy_ln(p->mlm_ln_g, p->mlm_ln_b, &am->mlm_ln);
            if (am->mlm_bias) memcpy(p->mlm_bias, am->mlm_bias, (size_t)V * sizeof(float));
        } else {
            init_range(m, o->seed + 1, T_MLM_W, T_MLM_BIAS + 1);
        }
    }
    *out = m;
    return AS_OK;
}

/* ---- Hugging Face names ---- */

typedef struct {
    train_named *out;
    int n, cap;
} named_list;

static void add(named_list *l, const char *name, const float *data, int64_t d0, int64_t d1) {
    if (!data) return;
    if (l->n < l->cap) {
        train_named *t = &l->out[l->n];
        size_t len = strlen(name);
        ASSERT(len < sizeof t->name); /* the longest HF name here is under 64 bytes */
        memcpy(t->name, name, len + 1);
        t->data = data;
        t->ndim = d1 < 0 ? 1 : 2;
        t->shape[0] = d0;
        t->shape[1] = d1 < 0 ? 0 : d1;
        t->n = (size_t)d0 * (size_t)(d1 < 0 ? 1 : d1);
    }
    l->n++;
}

/* base.weight (n_out, n_in) and base.bias (n_out); LayerNorms pass n_in = -1. */
static void add_lin(named_list *l, const char *base, const float *w, const float *b, int n_out, int n_in) {
    char name[128];
    snprintf(name, sizeof name, "%s.weight", base);
    add(l, name, w, n_out, n_in);
    snprintf(name, sizeof name, "%s.bias", base);
    add(l, name, b, n_out, -1);
}

static void add_ln(named_list *l, const char *base, const float *g, const float *b, int n) {
    add_lin(l, base, g, b, n, -1);
}

int train_model_named(const train_model *m, int which, train_named *out, int cap) {
    const train_config *c = &m->cfg;
    const train_params *p = which ? &m->grads : &m->params;
    if (which && !m->grads_mem) return 0;
    named_list l = {out, 0, cap};
    int D = c->d_model, F = c->d_ff, V = c->vocab_size;
    int dist = c->arch == ARCH_DISTILBERT, rob = c->arch == ARCH_ROBERTA;
    const char *pre = dist ? "distilbert." : rob ? "roberta." : "bert.";
    char b[64], n2[96];
    snprintf(b, sizeof b, "%sembeddings.word_embeddings.weight", pre);
    add(&l, b, p->wte, V, D);
    snprintf(b, sizeof b, "%sembeddings.position_embeddings.weight", pre);
    add(&l, b, p->wpe, c->max_pos, D);
    snprintf(b, sizeof b, "%sembeddings.token_type_embeddings.weight", pre);
    add(&l, b, p->wtt, c->type_vocab, D);
    snprintf(b, sizeof b, "%sembeddings.LayerNorm", pre);
    add_ln(&l, b, p->ln_e_g, p->ln_e_b, D);
    size_t Dz = (size_t)D, Fz = (size_t)F;
    for (int i = 0; i < c->n_layer; i++) {
        size_t L = (size_t)i;
        /* parameters: the views (a borrowed model has no qkv_w block); gradients: the arena */
        const float *qw = which ? p->qkv_w + L * 3 * Dz * Dz : NULL, *qb = p->qkv_b + L * 3 * Dz;
        const float *lwq[3] = {which ? qw : m->lw[i].q, which ? qw + Dz * Dz : m->lw[i].k,
                               which ? qw + 2 * Dz * Dz : m->lw[i].v};
        const char *sub[] = {dist ? "attention.q_lin" : "attention.self.query",
                             dist ? "attention.k_lin" : "attention.self.key",
                             dist ? "attention.v_lin" : "attention.self.value"};
        snprintf(b, sizeof b, "%s%s.layer.%d.", pre, dist ? "transformer" : "encoder", i);
        for (int k = 0; k < 3; k++) {
            snprintf(n2, sizeof n2, "%s%s", b, sub[k]);
            add_lin(&l, n2, lwq[k], qb + (size_t)k * Dz, D, D);
        }
        snprintf(n2, sizeof n2, "%s%s", b, dist ? "attention.out_lin" : "attention.output.dense");
        add_lin(&l, n2, which ? p->o_w + L * Dz * Dz : m->lw[i].o, p->o_b + L * Dz, D, D);
        snprintf(n2, sizeof n2, "%s%s", b, dist ? "sa_layer_norm" : "attention.output.LayerNorm");
        add_ln(&l, n2, p->ln1_g + L * Dz, p->ln1_b + L * Dz, D);
        snprintf(n2, sizeof n2, "%s%s", b, dist ? "ffn.lin1" : "intermediate.dense");
        add_lin(&l, n2, which ? p->f1_w + L * Fz * Dz : m->lw[i].f1, p->f1_b + L * Fz, F, D);
        snprintf(n2, sizeof n2, "%s%s", b, dist ? "ffn.lin2" : "output.dense");
        add_lin(&l, n2, which ? p->f2_w + L * Dz * Fz : m->lw[i].f2, p->f2_b + L * Dz, D, F);
        snprintf(n2, sizeof n2, "%s%s", b, dist ? "output_layer_norm" : "output.LayerNorm");
        add_ln(&l, n2, p->ln2_g + L * Dz, p->ln2_b + L * Dz, D);
    }
    if (c->num_labels > 0) {
        int C = c->num_labels;
        if (dist) {
            add_lin(&l, "pre_classifier", p->pool_w, p->pool_b, D, D);
            add_lin(&l, "classifier", p->cls_w, p->cls_b, C, D);
        } else if (rob) {
            add_lin(&l, "classifier.dense", p->pool_w, p->pool_b, D, D);
            add_lin(&l, "classifier.out_proj", p->cls_w, p->cls_b, C, D);
        } else {
            add_lin(&l, "bert.pooler.dense", p->pool_w, p->pool_b, D, D);
            add_lin(&l, "classifier", p->cls_w, p->cls_b, C, D);
        }
    }
    if (c->mlm) {
        if (dist) {
            add_lin(&l, "vocab_transform", p->mlm_w, p->mlm_b, D, D);
            add_ln(&l, "vocab_layer_norm", p->mlm_ln_g, p->mlm_ln_b, D);
            add(&l, "vocab_projector.bias", p->mlm_bias, V, -1);
        } else if (rob) {
            add_lin(&l, "lm_head.dense", p->mlm_w, p->mlm_b, D, D);
            add_ln(&l, "lm_head.layer_norm", p->mlm_ln_g, p->mlm_ln_b, D);
            add(&l, "lm_head.bias", p->mlm_bias, V, -1);
        } else {
            add_lin(&l, "cls.predictions.transform.dense", p->mlm_w, p->mlm_b, D, D);
            add_ln(&l, "cls.predictions.transform.LayerNorm", p->mlm_ln_g, p->mlm_ln_b, D);
            add(&l, "cls.predictions.bias", p->mlm_bias, V, -1);
        }
    }
    return l.n <= cap ? l.n : -1;
}

/* ---- saving ---- */

static json_t *config_json(const train_model *m, as_dtype dtype) {
    const train_config *c = &m->cfg;
    json_t *j = json_object(), *archs = json_array();
    int dist = c->arch == ARCH_DISTILBERT, rob = c->arch == ARCH_ROBERTA;
    const char *cls = dist ? "DistilBert" : rob ? "Roberta" : "Bert";
    char name[64];
    if (c->mlm) {
        snprintf(name, sizeof name, "%sForMaskedLM", cls);
        json_array_append_new(archs, json_string(name));
    }
    if (c->num_labels > 0) {
        snprintf(name, sizeof name, "%sForSequenceClassification", cls);
        json_array_append_new(archs, json_string(name));
    }
    json_object_set_new(j, "architectures", archs);
    json_object_set_new(j, "model_type", json_string(dist ? "distilbert" : rob ? "roberta" : "bert"));
    if (dist) {
        json_object_set_new(j, "n_layers", json_integer(c->n_layer));
        json_object_set_new(j, "n_heads", json_integer(c->n_head));
        json_object_set_new(j, "dim", json_integer(c->d_model));
        json_object_set_new(j, "hidden_dim", json_integer(c->d_ff));
        json_object_set_new(j, "activation", json_string(as_act_name(c->act)));
        json_object_set_new(j, "dropout", json_real(0.1));
        json_object_set_new(j, "attention_dropout", json_real(0.1));
        json_object_set_new(j, "seq_classif_dropout", json_real(0.2));
        json_object_set_new(j, "sinusoidal_pos_embds", json_false());
        json_object_set_new(j, "tie_weights_", json_true());
    } else {
        json_object_set_new(j, "num_hidden_layers", json_integer(c->n_layer));
        json_object_set_new(j, "num_attention_heads", json_integer(c->n_head));
        json_object_set_new(j, "hidden_size", json_integer(c->d_model));
        json_object_set_new(j, "intermediate_size", json_integer(c->d_ff));
        json_object_set_new(j, "hidden_act", json_string(as_act_name(c->act)));
        json_object_set_new(j, "hidden_dropout_prob", json_real(0.1));
        json_object_set_new(j, "attention_probs_dropout_prob", json_real(0.1));
        json_object_set_new(j, "type_vocab_size", json_integer(c->type_vocab));
        json_object_set_new(j, "layer_norm_eps", json_real(c->ln_eps));
        json_object_set_new(j, "initializer_range", json_real(train_init_std(c)));
        json_object_set_new(j, "position_embedding_type", json_string("absolute"));
    }
    json_object_set_new(j, "max_position_embeddings", json_integer(c->max_pos));
    json_object_set_new(j, "vocab_size", json_integer(c->vocab_size));
    if (c->pad_token_id >= 0) json_object_set_new(j, "pad_token_id", json_integer(c->pad_token_id));
    if (c->num_labels > 0) {
        json_t *i2l = json_object(), *l2i = json_object();
        for (int i = 0; i < c->num_labels; i++) {
            char key[16], def[32];
            snprintf(key, sizeof key, "%d", i);
            snprintf(def, sizeof def, "LABEL_%d", i);
            const char *lab = m->labels && m->labels[i] && m->labels[i][0] ? m->labels[i] : def;
            json_object_set_new(i2l, key, json_string(lab));
            json_object_set_new(l2i, lab, json_integer(i));
        }
        json_object_set_new(j, "id2label", i2l);
        json_object_set_new(j, "label2id", l2i);
    }
    json_object_set_new(j, "torch_dtype", json_string(dtype == DTYPE_F16 ? "float16" : "float32"));
    return j;
}

static as_status ensure_dir(const char *dir, as_error *err) {
    struct stat st;
    if (stat(dir, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return AS_OK;
        return as_err_set(err, AS_ERR_INPUT, "%s: exists and is not a directory", dir);
    }
    if (mkdir(dir, 0755) != 0) return as_err_set(err, AS_ERR_INTERNAL, "%s: cannot create: %s", dir, strerror(errno));
    return AS_OK;
}

as_status train_model_save(const train_model *m, const char *dir, as_dtype dtype, as_error *err) {
    as_status s;
    if (dtype != DTYPE_F32 && dtype != DTYPE_F16)
        return as_err_set(err, AS_ERR_INPUT, "%s: weights can be saved as F32 or F16, not %s", dir, as_dtype_name(dtype));
    if ((s = ensure_dir(dir, err))) return s;
    char path[4096];
    train_named *nv = NULL;
    st_tensor *ts = NULL;
    uint16_t **half = NULL;
    int n = 0;
    json_t *cj = config_json(m, dtype);
    if ((s = as_path_join(path, sizeof path, dir, "config.json", err))) goto cleanup;
    if (!cj || json_dump_file(cj, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
        s = as_err_set(err, AS_ERR_INTERNAL, "%s: cannot write", path);
        goto cleanup;
    }
    nv = as_malloc_array(TRAIN_MAX_NAMED, sizeof *nv);
    if (!nv) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    n = train_model_named(m, 0, nv, TRAIN_MAX_NAMED);
    ASSERT(n > 0);
    ts = as_calloc((size_t)n, sizeof *ts);
    half = as_calloc((size_t)n, sizeof *half);
    if (!ts || !half) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (int i = 0; i < n; i++) {
        st_tensor *t = &ts[i];
        t->name = nv[i].name;
        t->ndim = nv[i].ndim;
        t->shape[0] = nv[i].shape[0];
        t->shape[1] = nv[i].shape[1];
        t->n_elems = nv[i].n;
        t->dtype = dtype;
        snprintf(t->dtype_name, sizeof t->dtype_name, "%s", as_dtype_name(dtype));
        if (dtype == DTYPE_F32) {
            t->data = nv[i].data;
            t->nbytes = nv[i].n * sizeof(float);
        } else {
            half[i] = as_malloc_array(nv[i].n, sizeof(uint16_t));
            if (!half[i]) {
                s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
                goto cleanup;
            }
            for (size_t k = 0; k < nv[i].n; k++) half[i][k] = as_f32_to_f16(nv[i].data[k]);
            t->data = half[i];
            t->nbytes = nv[i].n * sizeof(uint16_t);
        }
    }
    if ((s = as_path_join(path, sizeof path, dir, "model.safetensors", err))) goto cleanup;
    s = st_write(path, ts, n, err);
cleanup:
    if (half)
        for (int i = 0; i < n; i++) free(half[i]);
    free(half);
    free(ts);
    free(nv);
    json_decref(cj);
    return s;
}

as_status train_copy_tokenizer(const char *src_dir, const char *dst_dir, as_error *err) {
    static const char *names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                  "vocab.txt",      "vocab.json",            "merges.txt"};
    as_status s;
    if ((s = ensure_dir(dst_dir, err))) return s;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char src[4096], dst[4096];
        if ((s = as_path_join(src, sizeof src, src_dir, names[i], err))) return s;
        if ((s = as_path_join(dst, sizeof dst, dst_dir, names[i], err))) return s;
        if (!as_file_exists(src)) continue;
        char *buf = NULL;
        size_t len = 0;
        if ((s = as_read_file(src, 256u * 1024u * 1024u, &buf, &len, err))) return s;
        FILE *f = fopen(dst, "wb");
        int ok = f && fwrite(buf, 1, len, f) == len;
        if (f && fclose(f) != 0) ok = 0;
        free(buf);
        if (!ok) return as_err_set(err, AS_ERR_INTERNAL, "%s: cannot write", dst);
    }
    return AS_OK;
}
