/* bert_ckpt.c — the BERT family's Hugging Face folders for training (see bert_ckpt.h):
 * config checks, the tensors of a config under their Hugging Face names in the order
 * BertModel / RobertaModel / DistilBertModel define them, Hugging Face-style
 * initialisation of what a source model lacks, config.json, and the writer.
 */
#include "train/bert_ckpt.h"
#include "io/safetensors.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    double D = c->d_model, total = (c->vocab_size + c->max_pos + c->type_vocab) * D +
                                   c->n_layer * (4 * D * D + 2 * D * (double)c->d_ff);
    if (total > (double)((size_t)1 << 34)) return as_err_set(err, AS_ERR_INPUT, "model of %.0f parameters is too large", total);
    return AS_OK;
}

double train_init_std(const train_config *c) { return c->init_range > 0 ? c->init_range : 0.02; }

as_status bert_ckpt_config(const as_model *am, train_config *c, as_error *err) {
    const as_config *ac = &am->cfg;
    if ((ac->arch != ARCH_BERT && ac->arch != ARCH_ROBERTA && ac->arch != ARCH_DISTILBERT) ||
        !strcmp(ac->model_type, "electra") || ac->d_embed != ac->d_model || am->pre_ln)
        return as_err_set(err, AS_ERR_INPUT, "%s: training supports bert, roberta and distilbert models, not %s",
                          am->dir, ac->model_type);
    if (ac->causal)
        return as_err_set(err, AS_ERR_INPUT, "%s: training supports encoders, not decoders (is_decoder is true)",
                          am->dir);
    for (int l = 0; l < ac->n_layer; l++) {
        const layer_w *w = &am->layers[l];
        if (!w->q.w || !w->k.w || !w->v.w || !w->o.w || !w->ff1.w || !w->ff2.w)
            return as_err_set(err, AS_ERR_INPUT, "%s: layer %d holds its weights in BF16 only; training reads float32",
                              am->dir, l);
    }
    int has_cls = (am->heads & HEAD_CLASSIFIER) != 0, has_mlm = (am->heads & HEAD_MLM) != 0;
    if (has_cls && (!lin_has(&am->cls_pre) || (am->cls_pre_act != CLS_ACT_TANH && am->cls_pre_act != CLS_ACT_RELU)))
        return as_err_set(err, AS_ERR_INPUT, "%s: classifier activation not supported for training", am->dir);
    int D = ac->d_model, V = ac->vocab_size;
    if (has_mlm && am->mlm_decoder != am->wte &&
        memcmp(am->mlm_decoder, am->wte, (size_t)V * D * sizeof(float)) != 0)
        return as_err_set(err, AS_ERR_INPUT, "%s: the MLM decoder is not tied to the word embeddings", am->dir);
    memset(c, 0, sizeof *c);
    c->arch = ac->arch;
    c->n_layer = ac->n_layer;
    c->n_head = ac->n_head;
    c->d_model = D;
    c->d_ff = ac->d_ff;
    c->vocab_size = V;
    c->max_pos = ac->max_pos;
    c->type_vocab = am->wtt ? ac->type_vocab : 0;
    c->ln_eps = ac->ln_eps;
    c->act = ac->act;
    c->mlm_act = has_mlm ? am->mlm_act : (ac->arch == ARCH_ROBERTA ? ACT_GELU : ac->act);
    c->cls_act = ac->arch == ARCH_DISTILBERT ? TRAIN_CLS_RELU : TRAIN_CLS_TANH;
    if (has_cls) c->cls_act = am->cls_pre_act == CLS_ACT_RELU ? TRAIN_CLS_RELU : TRAIN_CLS_TANH;
    c->pad_token_id = ac->pad_token_id;
    c->pos_offset = am->pos_offset;
    c->num_labels = has_cls ? am->cls_out.n_out : 0;
    c->mlm = has_mlm;
    return train_config_check(c, err);
}

/* ---- the tensors of a config ---- */

enum { INIT_NORMAL = 0, INIT_ZERO, INIT_ONE };

typedef struct {
    char name[192];
    int64_t d0, d1;   /* d1 = 0: 1-D */
    int init;         /* INIT_* */
    int layer;        /* the layer it belongs to, or -1 */
    int what;         /* 'w' word, 'p' positions, else 0: for the padding rows */
} tensor_spec;

typedef struct {
    tensor_spec *t;
    int n, cap;
} spec_list;

static void add(spec_list *l, const char *name, int64_t d0, int64_t d1, int init, int layer, int what) {
    if (l->n < l->cap) {
        tensor_spec *t = &l->t[l->n];
        snprintf(t->name, sizeof t->name, "%s", name);
        t->d0 = d0, t->d1 = d1, t->init = init, t->layer = layer, t->what = what;
    }
    l->n++;
}

/* base.weight (n_out, n_in) and base.bias; LayerNorms (n_in 0) weight 1, bias 0. */
static void add_lin(spec_list *l, const char *base, int n_out, int n_in, int layer) {
    char name[176];
    snprintf(name, sizeof name, "%s.weight", base);
    add(l, name, n_out, n_in, n_in ? INIT_NORMAL : INIT_ONE, layer, 0);
    snprintf(name, sizeof name, "%s.bias", base);
    add(l, name, n_out, 0, INIT_ZERO, layer, 0);
}

#define MAX_TENSORS (16 * AS_MAX_LAYERS + 32)

/* The tensors of c (Hugging Face names of BertFor* / RobertaFor* / DistilBertFor*), with
 * layer l's names built with layer index lname[l] (NULL: l). Returns the count. */
static int tensor_list(const train_config *c, const int *lname, tensor_spec *out) {
    spec_list l = {out, 0, MAX_TENSORS};
    int D = c->d_model, F = c->d_ff, V = c->vocab_size;
    int dist = c->arch == ARCH_DISTILBERT, rob = c->arch == ARCH_ROBERTA;
    const char *pre = dist ? "distilbert." : rob ? "roberta." : "bert.";
    char b[128], n2[160];
    snprintf(b, sizeof b, "%sembeddings.word_embeddings.weight", pre);
    add(&l, b, V, D, INIT_NORMAL, -1, 'w');
    snprintf(b, sizeof b, "%sembeddings.position_embeddings.weight", pre);
    add(&l, b, c->max_pos, D, INIT_NORMAL, -1, 'p');
    if (c->type_vocab) {
        snprintf(b, sizeof b, "%sembeddings.token_type_embeddings.weight", pre);
        add(&l, b, c->type_vocab, D, INIT_NORMAL, -1, 0);
    }
    snprintf(b, sizeof b, "%sembeddings.LayerNorm", pre);
    add_lin(&l, b, D, 0, -1);
    for (int i = 0; i < c->n_layer; i++) {
        snprintf(b, sizeof b, "%s%s.layer.%d.", pre, dist ? "transformer" : "encoder", lname ? lname[i] : i);
        static const char *const bert_sub[] = {"attention.self.query", "attention.self.key", "attention.self.value",
                                               "attention.output.dense", "attention.output.LayerNorm",
                                               "intermediate.dense", "output.dense", "output.LayerNorm"};
        static const char *const dist_sub[] = {"attention.q_lin", "attention.k_lin", "attention.v_lin",
                                               "attention.out_lin", "sa_layer_norm", "ffn.lin1", "ffn.lin2",
                                               "output_layer_norm"};
        const int outs[] = {D, D, D, D, D, F, D, D}, ins[] = {D, D, D, D, 0, D, F, 0};
        for (int k = 0; k < 8; k++) {
            snprintf(n2, sizeof n2, "%s%s", b, dist ? dist_sub[k] : bert_sub[k]);
            add_lin(&l, n2, outs[k], ins[k], i);
        }
    }
    if (c->num_labels > 0) {
        int C = c->num_labels;
        add_lin(&l, dist ? "pre_classifier" : rob ? "classifier.dense" : "bert.pooler.dense", D, D, -1);
        add_lin(&l, rob ? "classifier.out_proj" : "classifier", C, D, -1);
    }
    if (c->mlm) {
        add_lin(&l, dist ? "vocab_transform" : rob ? "lm_head.dense" : "cls.predictions.transform.dense", D, D, -1);
        add_lin(&l, dist ? "vocab_layer_norm" : rob ? "lm_head.layer_norm" : "cls.predictions.transform.LayerNorm", D, 0,
                -1);
        add(&l, dist ? "vocab_projector.bias" : rob ? "lm_head.bias" : "cls.predictions.bias", V, 0, INIT_ZERO, -1, 0);
    }
    return l.n;
}

/* ---- initialisation: splitmix64 stream + Box-Muller normals ---- */

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
    for (size_t i = 0; kind != INIT_NORMAL && i < n; i++) x[i] = kind == INIT_ONE ? 1.0f : 0.0f;
    for (size_t i = 0; kind == INIT_NORMAL && i < n; i += 2) { /* Box & Muller 1958 */
        double u1 = rng_uniform(r), u2 = rng_uniform(r);
        double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
        x[i] = (float)(std * rad * cos(th));
        if (i + 1 < n) x[i + 1] = (float)(std * rad * sin(th));
    }
}

static void sinusoids(const train_config *c, float *wpe) {
    int P = c->max_pos, D = c->d_model;
    double scale = train_init_std(c) * sqrt(2.0); /* a sinusoid's RMS is 1/sqrt(2) */
    for (int p = 0; p < P; p++) {
        int pos = p - c->pos_offset; /* RoBERTa: rows before the offset are unused */
        float *row = wpe + (size_t)p * D;
        for (int i = 0; i < D; i++) {
            double freq = pow(10000.0, -(double)(i - i % 2) / (double)D);
            row[i] = pos < 0 ? 0.0f : (float)(scale * (i % 2 ? cos(pos * freq) : sin(pos * freq)));
        }
    }
}

/* ---- config.json ---- */

static json_t *config_json(const train_config *c, char *const *labels, as_dtype dtype) {
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
            const char *lab = labels && labels[i] && labels[i][0] ? labels[i] : def;
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

/* ---- the writer ---- */

/* The F32 values of tensor t: from the source (its layer per layer_of), else initialised. */
static as_status tensor_values(const train_config *c, const bert_ckpt_opts *o, const tensor_spec *t,
                               const tensor_spec *src_t, float *x, init_rng *r) {
    size_t n = (size_t)t->d0 * (size_t)(t->d1 ? t->d1 : 1);
    const float *have = o->src ? model_param_data(o->src, src_t->name, n) : NULL;
    if (have) {
        memcpy(x, have, n * sizeof(float));
        return AS_OK;
    }
    init_tensor(x, n, t->init, train_init_std(c), r);
    if (t->what == 'p' && o->sinusoidal) sinusoids(c, x);
    if (t->what && c->pad_token_id >= 0 && (t->what == 'w' || c->arch == ARCH_ROBERTA) && c->pad_token_id < t->d0)
        memset(x + (size_t)c->pad_token_id * t->d1, 0, (size_t)t->d1 * sizeof(float));
    return AS_OK;
}

as_status bert_ckpt_write(const char *dir, const train_config *c, const bert_ckpt_opts *o, as_error *err) {
    as_status s;
    if (o->dtype != DTYPE_F32 && o->dtype != DTYPE_F16)
        return as_err_set(err, AS_ERR_INPUT, "%s: weights can be saved as F32 or F16, not %s", dir,
                          as_dtype_name(o->dtype));
    if ((s = train_config_check(c, err)) || (s = ensure_dir(dir, err))) return s;
    char path[4096];
    tensor_spec *ts = as_malloc_array(2 * MAX_TENSORS, sizeof *ts), *src_ts = ts ? ts + MAX_TENSORS : NULL;
    st_tensor *st = as_calloc(MAX_TENSORS, sizeof *st);
    void **data = as_calloc(MAX_TENSORS, sizeof *data);
    float *x = NULL;
    json_t *cj = NULL;
    int n = 0;
    if (!ts || !st || !data) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    n = tensor_list(c, NULL, ts);
    ASSERT(n <= MAX_TENSORS && tensor_list(c, o->layer_of, src_ts) == n);
    char *const *labels = o->labels;
    const as_config *sc = o->src ? as_model_config(o->src) : NULL;
    if (!labels && sc && sc->id2label && sc->num_labels == c->num_labels) labels = sc->id2label;
    init_rng r = {o->seed * 0x2545f4914f6cdd1dULL + 0x1234567ULL};
    for (int i = 0; i < n; i++) {
        size_t ne = (size_t)ts[i].d0 * (size_t)(ts[i].d1 ? ts[i].d1 : 1);
        x = as_malloc_large(ne, sizeof(float));
        if (!x) {
            s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        tensor_values(c, o, &ts[i], &src_ts[i], x, &r);
        st_tensor *t = &st[i];
        t->name = ts[i].name;
        t->ndim = ts[i].d1 ? 2 : 1;
        t->shape[0] = ts[i].d0;
        t->shape[1] = ts[i].d1;
        t->n_elems = ne;
        t->dtype = o->dtype;
        snprintf(t->dtype_name, sizeof t->dtype_name, "%s", as_dtype_name(o->dtype));
        if (o->dtype == DTYPE_F32) {
            data[i] = x;
            t->nbytes = ne * sizeof(float);
        } else {
            uint16_t *h = as_malloc_large(ne, sizeof(uint16_t));
            if (!h) {
                s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
                goto cleanup;
            }
            for (size_t k = 0; k < ne; k++) h[k] = as_f32_to_f16(x[k]);
            free(x);
            data[i] = h;
            t->nbytes = ne * sizeof(uint16_t);
        }
        x = NULL;
        t->data = data[i];
    }
    cj = config_json(c, labels, o->dtype);
    if ((s = as_path_join(path, sizeof path, dir, "config.json", err))) goto cleanup;
    if (!cj || json_dump_file(cj, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
        s = as_err_set(err, AS_ERR_INTERNAL, "%s: cannot write", path);
        goto cleanup;
    }
    if ((s = as_path_join(path, sizeof path, dir, "model.safetensors", err))) goto cleanup;
    unlink(path); /* a model mapped from it keeps the old file */
    s = st_write(path, st, n, err);
cleanup:
    for (int i = 0; data && i < n; i++) free(data[i]);
    free(x);
    free(data);
    free(st);
    free(ts);
    json_decref(cj);
    return s;
}

static const char *const tok_files[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "vocab.txt",      "vocab.json",            "merges.txt"};

as_status train_copy_tokenizer(const char *src_dir, const char *dst_dir, as_error *err) {
    as_status s;
    if ((s = ensure_dir(dst_dir, err))) return s;
    for (size_t i = 0; i < sizeof tok_files / sizeof tok_files[0]; i++) {
        char src[4096], dst[4096];
        if ((s = as_path_join(src, sizeof src, src_dir, tok_files[i], err))) return s;
        if ((s = as_path_join(dst, sizeof dst, dst_dir, tok_files[i], err))) return s;
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

void bert_ckpt_remove(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/config.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    for (size_t i = 0; i < sizeof tok_files / sizeof tok_files[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, tok_files[i]);
        unlink(p);
    }
    rmdir(dir);
}
