/* params.c — a loaded model made trainable: its weights copied into one writable F32
 * block laid out exactly as its model_grads (model_params_own), so an optimizer runs over
 * two flat arrays of the same length; which floats of that block are weight matrices and
 * tables (decayed by AdamW) and which are biases and norm gains (not); and the block
 * written back as a Hugging Face checkpoint under the tensors' own names, fused tensors
 * (GPT-2's c_attn, Phi-3's qkv_proj and gate_up_proj) reassembled from their views, every
 * other tensor of the source copied as it was (model_params_save).
 * What it does not: optimizers, data, training loops (src/train/lm_train.c).
 */
#include "model/model.h"
#include "io/safetensors.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* ---- owning the weights ---- */

/* Copies map l's weights into g (its layout: (n_out, n_in), Conv1D (n_in, n_out)) and
 * points l at them. */
static void own_lin(lin_t *l, lin_grad *g) {
    if (!g->w) return;
    int rows = l->in_out ? l->n_in : l->n_out, cols = l->in_out ? l->n_out : l->n_in;
    for (int r = 0; r < rows; r++) {
        float *dst = g->w + (size_t)r * cols;
        if (l->w) memcpy(dst, l->w + (size_t)r * l->ldw, (size_t)cols * sizeof(float));
        else
            for (int c = 0; c < cols; c++) dst[c] = as_bf16_to_f32(l->wbf[(size_t)r * l->n_in + c]);
    }
    if (g->b) memcpy(g->b, l->b, (size_t)l->n_out * sizeof(float));
    l->w = g->w;
    l->wbf = NULL;
    l->wpk = NULL;
    l->ldw = cols;
    if (g->b) l->b = g->b;
}

static void own_ln(ln_t *ln, ln_grad *g) {
    if (g->g) {
        memcpy(g->g, ln->g, (size_t)ln->n * sizeof(float));
        ln->g = g->g;
    }
    if (g->b) {
        memcpy(g->b, ln->b, (size_t)ln->n * sizeof(float));
        ln->b = g->b;
    }
}

as_status model_params_own(as_model *m, model_grads *p, as_error *err) {
    as_status s = model_grads_init(m, p, err);
    if (s) return s;
    const as_config *c = &m->cfg;
    size_t VD = (size_t)c->vocab_size * c->d_embed;
    const float *old_wte = m->wte;
    int tied_bf = m->lm_head.wbf && m->lm_head.wbf == m->wte_bf;
    int dec_view = model_lm_head_is_decoder(m);
    if (m->wte) memcpy(p->wte, m->wte, VD * sizeof(float));
    else
        for (size_t i = 0; i < VD; i++) p->wte[i] = as_bf16_to_f32(m->wte_bf[i]);
    m->wte = p->wte;
    m->wte_bf = NULL;
    if (p->wpe) m->wpe = memcpy(p->wpe, m->wpe, (size_t)c->max_pos * c->d_embed * sizeof(float));
    if (p->wtt) m->wtt = memcpy(p->wtt, m->wtt, (size_t)c->type_vocab * c->d_embed * sizeof(float));
    if (m->mlm_decoder == old_wte) m->mlm_decoder = m->wte;
    else if (p->mlm_decoder)
        m->mlm_decoder = memcpy(p->mlm_decoder, m->mlm_decoder, (size_t)c->vocab_size * c->d_model * sizeof(float));
    if (p->mlm_bias) m->mlm_bias = memcpy(p->mlm_bias, m->mlm_bias, (size_t)c->vocab_size * sizeof(float));
    own_ln(&m->ln_emb, &p->ln_emb);
    own_ln(&m->ln_f, &p->ln_f);
    own_ln(&m->mlm_ln, &p->mlm_ln);
    own_lin(&m->emb_proj, &p->emb_proj);
    own_lin(&m->cls_pre, &p->cls_pre);
    own_lin(&m->cls_out, &p->cls_out);
    own_lin(&m->mlm_dense, &p->mlm_dense);
    if (tied_bf) m->lm_head.w = m->wte, m->lm_head.wbf = NULL, m->lm_head.ldw = c->d_model; /* tied: the table */
    else if (dec_view) m->lm_head.w = m->mlm_decoder, m->lm_head.b = m->mlm_bias, m->lm_head.wbf = NULL;
    else own_lin(&m->lm_head, &p->lm_head);
    if (tied_bf || dec_view) m->lm_head.wpk = NULL;
    for (int l = 0; l < c->n_layer; l++) {
        layer_w *w = &m->layers[l];
        layer_grad *g = &p->layers[l];
        own_lin(&w->q, &g->q), own_lin(&w->k, &g->k), own_lin(&w->v, &g->v), own_lin(&w->o, &g->o);
        own_lin(&w->ff1, &g->ff1), own_lin(&w->up, &g->up), own_lin(&w->ff2, &g->ff2);
        own_ln(&w->ln1, &g->ln1), own_ln(&w->ln2, &g->ln2), own_ln(&w->post_attn, &g->post_attn);
        own_ln(&w->post_ff, &g->post_ff), own_ln(&w->q_norm, &g->q_norm), own_ln(&w->k_norm, &g->k_norm);
    }
    m->precision = AS_PRECISION_F32; /* any BF16 copies are stale now */
    return AS_OK;
}

/* ---- which floats decay ---- */

static void mark(const model_grads *p, uint8_t *mask, const float *buf, size_t n) {
    if (buf) memset(mask + (buf - p->block), 1, n);
}

static void mark_lin(const model_grads *p, uint8_t *mask, const lin_t *l, const lin_grad *g) {
    mark(p, mask, g->w, (size_t)l->n_out * l->n_in);
}

void model_params_decay_mask(const as_model *m, const model_grads *p, uint8_t *mask) {
    const as_config *c = &m->cfg;
    memset(mask, 0, p->n);
    mark(p, mask, p->wte, (size_t)c->vocab_size * c->d_embed);
    mark(p, mask, p->wpe, (size_t)c->max_pos * c->d_embed);
    mark(p, mask, p->wtt, (size_t)c->type_vocab * c->d_embed);
    mark(p, mask, p->mlm_decoder, (size_t)c->vocab_size * c->d_model);
    mark_lin(p, mask, &m->emb_proj, &p->emb_proj), mark_lin(p, mask, &m->cls_pre, &p->cls_pre);
    mark_lin(p, mask, &m->cls_out, &p->cls_out), mark_lin(p, mask, &m->mlm_dense, &p->mlm_dense);
    mark_lin(p, mask, &m->lm_head, &p->lm_head);
    for (int l = 0; l < c->n_layer; l++) {
        const layer_w *w = &m->layers[l];
        const layer_grad *g = &p->layers[l];
        const lin_t *ls[] = {&w->q, &w->k, &w->v, &w->o, &w->ff1, &w->up, &w->ff2};
        const lin_grad *gs[] = {&g->q, &g->k, &g->v, &g->o, &g->ff1, &g->up, &g->ff2};
        for (int k = 0; k < 7; k++) mark_lin(p, mask, ls[k], gs[k]);
    }
}

/* ---- saving ---- */

/* Where tensor `name` of the checkpoint lives in the model (a whole buffer, or a view
 * at row / column part_off of it), found by the names the bindings recorded. */
typedef struct {
    const float *data;
    int rows, cols;      /* the buffer's shape */
    int part_off, in_out; /* a view: first row (nn.Linear) or column (Conv1D) of the tensor */
} src_part;

static int bias_of(const char *wname, const char *name) {
    size_t n = strlen(wname);
    return n > 7 && !strcmp(wname + n - 7, ".weight") && !strncmp(wname, name, n - 7) && !strcmp(name + n - 7, ".bias");
}

/* Appends to parts (at most 4) every buffer of map l / its gradient-layout copy g
 * that belongs to tensor `name`. */
static int lin_parts(const lin_t *l, const char *name, src_part *parts, int n) {
    if (!l->wname || !l->w) return n;
    if (!strcmp(l->wname, name) && n < 4)
        parts[n++] = (src_part){l->w, l->in_out ? l->n_in : l->n_out, l->in_out ? l->n_out : l->n_in, l->part_off,
                                l->in_out};
    else if (l->b && bias_of(l->wname, name) && n < 4)
        parts[n++] = (src_part){l->b, l->n_out, 1, l->part_off, 0};
    return n;
}

static int ln_parts(const ln_t *ln, const char *name, src_part *parts, int n) {
    if (ln->gname && !strcmp(ln->gname, name) && n < 4) parts[n++] = (src_part){ln->g, ln->n, 1, 0, 0};
    if (ln->bname && !strcmp(ln->bname, name) && n < 4) parts[n++] = (src_part){ln->b, ln->n, 1, 0, 0};
    return n;
}

static int find_parts(const as_model *m, const char *name, src_part *parts) {
    const as_config *c = &m->cfg;
    int n = 0;
    const lin_t *heads[] = {&m->emb_proj, &m->cls_pre, &m->cls_out, &m->mlm_dense, &m->lm_head};
    for (int i = 0; i < 5; i++) n = lin_parts(heads[i], name, parts, n);
    const ln_t *lns[] = {&m->ln_emb, &m->ln_f, &m->mlm_ln};
    for (int i = 0; i < 3; i++) n = ln_parts(lns[i], name, parts, n);
    for (int l = 0; l < c->n_layer; l++) {
        const layer_w *w = &m->layers[l];
        const lin_t *ls[] = {&w->q, &w->k, &w->v, &w->o, &w->ff1, &w->up, &w->ff2};
        for (int k = 0; k < 7; k++) n = lin_parts(ls[k], name, parts, n);
        const ln_t *ns[] = {&w->ln1, &w->ln2, &w->post_attn, &w->post_ff, &w->q_norm, &w->k_norm};
        for (int k = 0; k < 6; k++) n = ln_parts(ns[k], name, parts, n);
    }
    static const char *const tables[][2] = {
        {"embeddings.word_embeddings.weight", "w"}, {"wte.weight", "w"}, {"embed_tokens.weight", "w"},
        {"embeddings.position_embeddings.weight", "p"}, {"wpe.weight", "p"},
        {"embeddings.token_type_embeddings.weight", "t"}};
    static const char *const mlm_biases[] = {"cls.predictions.bias", "cls.predictions.decoder.bias", "lm_head.bias",
                                             "lm_head.decoder.bias", "vocab_projector.bias"};
    for (size_t i = 0; i < sizeof mlm_biases / sizeof mlm_biases[0] && !n && m->mlm_bias; i++) {
        const char *tn = model_tensor_name(m, mlm_biases[i]);
        if (tn && !strcmp(tn, name)) parts[n++] = (src_part){m->mlm_bias, c->vocab_size, 1, 0, 0};
    }
    for (size_t i = 0; i < sizeof tables / sizeof tables[0] && !n; i++) {
        const char *tn = model_tensor_name(m, tables[i][0]);
        if (!tn || strcmp(tn, name)) continue;
        const float *d = tables[i][1][0] == 'w' ? m->wte : tables[i][1][0] == 'p' ? m->wpe : m->wtt;
        int rows = tables[i][1][0] == 'w' ? c->vocab_size : tables[i][1][0] == 'p' ? c->max_pos : c->type_vocab;
        if (d) parts[n++] = (src_part){d, rows, c->d_embed, 0, 0};
    }
    return n;
}

const float *model_param_data(const as_model *m, const char *name, size_t n) {
    src_part parts[4];
    int np = find_parts(m, name, parts);
    if (np != 1 || parts[0].part_off || (size_t)parts[0].rows * parts[0].cols != n) return NULL;
    return parts[0].data;
}

as_status model_params_save(const as_model *m, const char *src_dir, const char *dir, as_error *err) {
    as_status s = AS_OK;
    int nt = st_set_count(m->st);
    st_tensor *ts = as_calloc((size_t)(nt > 0 ? nt : 1), sizeof *ts);
    float **bufs = as_calloc((size_t)(nt > 0 ? nt : 1), sizeof *bufs);
    char path[4096], from[4096];
    if (!ts || !bufs) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if (mkdir(dir, 0755) && errno != EEXIST) {
        s = as_err_set(err, AS_ERR_INPUT, "%s: cannot create the folder", dir);
        goto cleanup;
    }
    for (int i = 0; i < nt; i++) {
        const st_tensor *t = st_set_tensor(m->st, i);
        size_t n = t->n_elems;
        float *b = bufs[i] = as_malloc_array(n ? n : 1, sizeof(float));
        if (!b) {
            s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        src_part parts[4];
        int np = find_parts(m, t->name, parts);
        int64_t C = t->ndim == 2 ? t->shape[1] : 1;
        if (!np) { /* not bound (an unused head): as stored, in F32 */
            for (size_t k = 0; k < n; k++) {
                const unsigned char *d = (const unsigned char *)t->data;
                uint16_t h = (uint16_t)(d[2 * k] | (d[2 * k + 1] << 8));
                float v;
                if (t->dtype == DTYPE_F32) memcpy(&v, d + 4 * k, 4);
                else v = t->dtype == DTYPE_F16 ? as_f16_to_f32(h) : as_bf16_to_f32(h);
                b[k] = v;
            }
        }
        for (int p = 0; p < np; p++) /* each view into its rows (nn.Linear) or columns (Conv1D) */
            for (int r = 0; r < parts[p].rows; r++)
                for (int c = 0; c < parts[p].cols; c++) {
                    size_t at = parts[p].in_out ? (size_t)r * C + parts[p].part_off + c
                                                : (size_t)(parts[p].part_off + r) * C + c;
                    if (at < n) b[at] = parts[p].data[(size_t)r * parts[p].cols + c];
                }
        ts[i] = *t;
        ts[i].dtype = DTYPE_F32;
        snprintf(ts[i].dtype_name, sizeof ts[i].dtype_name, "F32");
        ts[i].data = b;
        ts[i].nbytes = n * sizeof(float);
    }
    if ((s = as_path_join(path, sizeof path, dir, "model.safetensors", err))) goto cleanup;
    if ((s = st_write(path, ts, nt, err))) goto cleanup;
    /* the configuration and tokenizer files, as they were */
    static const char *const files[] = {"config.json", "tokenizer.json", "tokenizer_config.json",
                                        "special_tokens_map.json", "vocab.txt", "vocab.json", "merges.txt"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        if ((s = as_path_join(from, sizeof from, src_dir, files[i], err)) ||
            (s = as_path_join(path, sizeof path, dir, files[i], err)))
            goto cleanup;
        if (!as_file_exists(from)) continue;
        char *text = NULL;
        size_t len = 0;
        if ((s = as_read_file(from, (size_t)1 << 30, &text, &len, err))) goto cleanup;
        FILE *f = fopen(path, "wb");
        int ok = f && fwrite(text, 1, len, f) == len;
        if (f && fclose(f)) ok = 0;
        free(text);
        if (!ok) {
            s = as_err_set(err, AS_ERR_INTERNAL, "%s: cannot write", path);
            goto cleanup;
        }
    }
cleanup:
    if (bufs)
        for (int i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    free(ts);
    return s;
}
