/* model.c — as_model lifetime (load, free), weight binding helpers shared by the
 * architecture files, tokenization entry points and as_run views. The forward pass
 * itself is in encoder.c; per-architecture weights, embeddings and heads in bert.c,
 * distilbert.c and gpt2.c. */
#include "model/model.h"
#include "core/gemm_bf16.h"
#include "core/pool.h"
#include "io/config.h"

#include <math.h>
#include <string.h>

const char *as_dtype_name(as_dtype t) {
    switch (t) {
    case DTYPE_F32: return "F32";
    case DTYPE_F16: return "F16";
    case DTYPE_BF16: return "BF16";
    case DTYPE_I64: return "I64";
    case DTYPE_I32: return "I32";
    default: return "other";
    }
}

const char *as_arch_name(as_arch a) {
    switch (a) {
    case ARCH_BERT: return "bert";
    case ARCH_ROBERTA: return "roberta";
    case ARCH_DISTILBERT: return "distilbert";
    case ARCH_GPT2: return "gpt2";
    case ARCH_LLAMA: return "llama";
    case ARCH_BART: return "bart";
    case ARCH_T5: return "t5";
    }
    return "unknown";
}

const char *as_act_name(as_act a) {
    switch (a) {
    case ACT_GELU: return "gelu";
    case ACT_GELU_NEW: return "gelu_new";
    case ACT_RELU: return "relu";
    case ACT_SILU: return "silu";
    }
    return "?";
}

const char *as_rope_scale_name(as_rope_scale k) {
    switch (k) {
    case ROPE_SCALE_NONE: return "none";
    case ROPE_SCALE_LINEAR: return "linear";
    case ROPE_SCALE_LLAMA3: return "llama3";
    case ROPE_SCALE_YARN: return "yarn";
    case ROPE_SCALE_DYNAMIC: return "dynamic";
    case ROPE_SCALE_LONGROPE: return "longrope";
    }
    return "?";
}

static const char *arch_prefix(const as_config *c) {
    if (!strcmp(c->model_type, "electra")) return "electra.";
    switch (c->arch) {
    case ARCH_BERT: return "bert.";
    case ARCH_ROBERTA: return "roberta.";
    case ARCH_DISTILBERT: return "distilbert.";
    case ARCH_GPT2: return "transformer.";
    case ARCH_LLAMA: return "model.";
    case ARCH_BART: return "model.";
    case ARCH_T5: return "";
    }
    return "";
}

static const st_tensor *find_any(const as_model *m, const char *name, char *used, size_t cap) {
    char buf[512];
    const st_tensor *t = NULL;
    size_t pl = strlen(m->prefix);
    /* name is relative to the base model; heads pass names starting with '@' to
     * mean "exact name, no prefix". */
    if (name[0] == '@') {
        name++;
        t = st_set_find(m->st, name);
        snprintf(used, cap, "%s", name);
        return t;
    }
    snprintf(buf, sizeof buf, "%s%s", m->prefix, name);
    t = st_set_find(m->st, buf);
    if (t) {
        snprintf(used, cap, "%s", buf);
        return t;
    }
    t = st_set_find(m->st, name);
    snprintf(used, cap, "%s%s", pl ? m->prefix : "", name);
    if (t) snprintf(used, cap, "%s", name);
    return t;
}

as_model *model_decoder_view(as_model *m) {
    const as_config *c = &m->cfg;
    as_model *d = as_calloc(1, sizeof *d);
    if (!d) return NULL;
    m->dec = d;
    d->cfg = *c;
    d->cfg.id2label = NULL; /* owned by m's config */
    d->cfg.num_labels = 0;
    d->cfg.n_layer = c->n_dec_layer;
    d->cfg.n_dec_layer = 0;
    d->cfg.causal = 1;
    d->dir = m->dir;
    d->st = m->st;
    d->prefix = m->prefix;
    d->dtype = m->dtype;
    return d;
}

int model_has(const as_model *m, const char *name) {
    char used[512];
    return find_any(m, name, used, sizeof used) != NULL;
}

static as_status keep_owned(as_model *m, float *p, as_error *err) {
    if (m->n_owned == m->cap_owned) {
        int nc = m->cap_owned ? m->cap_owned * 2 : 64;
        float **n = realloc(m->owned, (size_t)nc * sizeof *n);
        if (!n) {
            free(p);
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory binding weights");
        }
        m->owned = n;
        m->cap_owned = nc;
    }
    m->owned[m->n_owned++] = p;
    return AS_OK;
}

/* Index of the first NaN or infinity of p[0..n), or n when all are finite. Blocks of
 * AS_FINITE_BLOCK values reduce to the largest |x| bit pattern (a vectorised max; an
 * exponent of all ones, 0x7f800000 and up, is infinity or NaN); only a failing block
 * is searched element by element. */
#define AS_FINITE_BLOCK 4096
static size_t first_non_finite(const float *p, size_t n) {
    for (size_t b = 0; b < n; b += AS_FINITE_BLOCK) {
        size_t e = n - b < AS_FINITE_BLOCK ? n : b + AS_FINITE_BLOCK;
        uint32_t mx = 0;
        for (size_t i = b; i < e; i++) {
            uint32_t u;
            memcpy(&u, &p[i], 4);
            u &= 0x7fffffffu;
            mx = u > mx ? u : mx;
        }
        if (mx < 0x7f800000u) continue;
        for (size_t i = b; i < e; i++)
            if (!isfinite(p[i])) return i;
    }
    return n;
}

as_status model_get(as_model *m, const char *name, int64_t d0, int64_t d1, int required,
                    const float **out, as_error *err) {
    char used[512];
    *out = NULL;
    const st_tensor *t = find_any(m, name, used, sizeof used);
    if (!t) {
        if (!required) return AS_OK;
        return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s' missing from the checkpoint",
                          m->dir, used);
    }
    int want_nd = d1 < 0 ? 1 : 2;
    if (t->ndim != want_nd || t->shape[0] != d0 || (want_nd == 2 && t->shape[1] != d1)) {
        char got[128] = "", *g = got;
        for (int i = 0; i < t->ndim && g < got + sizeof got - 24; i++)
            g += snprintf(g, 24, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        if (want_nd == 1)
            return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s' has shape [%s], expected [%lld]",
                              m->dir, t->name, got, (long long)d0);
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: tensor '%s' has shape [%s], expected [%lld, %lld]", m->dir, t->name,
                          got, (long long)d0, (long long)d1);
    }
    size_t n = t->n_elems;
    switch (t->dtype) {
    case DTYPE_F32:
        if (((uintptr_t)t->data & 3) == 0) {
            *out = t->data;
        } else {
            float *p = as_malloc_array(n, sizeof(float));
            if (!p) return as_err_set(err, AS_ERR_INTERNAL, "out of memory for '%s'", t->name);
            memcpy(p, t->data, n * sizeof(float));
            if (keep_owned(m, p, err)) return err->code;
            *out = p;
        }
        break;
    case DTYPE_F16:
    case DTYPE_BF16: {
        float *p = as_malloc_array(n, sizeof(float));
        if (!p) return as_err_set(err, AS_ERR_INTERNAL, "out of memory for '%s'", t->name);
        const unsigned char *src = t->data;
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(src[2 * i] | (src[2 * i + 1] << 8));
            p[i] = t->dtype == DTYPE_F16 ? as_f16_to_f32(h) : as_bf16_to_f32(h);
        }
        if (keep_owned(m, p, err)) return err->code;
        *out = p;
        break;
    }
    default:
        return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s' has dtype %s, expected F32, F16 or BF16",
                          m->dir, t->name, t->dtype_name);
    }
    size_t bad = first_non_finite(*out, n);
    if (bad < n)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: tensor '%s' holds a non-finite value (%s at element %zu of %zu): the "
                          "checkpoint is damaged",
                          m->dir, t->name, isnan((*out)[bad]) ? "NaN" : "infinity", bad, n);
    if (m->n_params == 0 || t->dtype != DTYPE_F32 || m->dtype == DTYPE_F32) m->dtype = t->dtype;
    m->n_params += n;
    return AS_OK;
}

/* The BF16 matrix `name` (d0, d1) borrowed from the mapping when the model keeps BF16
 * weights (m->keep_bf16) and the tensor is BF16 and 2-byte aligned: *out set (NULL when
 * not applicable, and the caller converts it through model_get). Non-finite values are
 * refused as model_get refuses them. */
as_status model_get_bf16(as_model *m, const char *name, int64_t d0, int64_t d1, const uint16_t **out,
                         as_error *err) {
    char used[512];
    *out = NULL;
    const st_tensor *t = m->keep_bf16 ? find_any(m, name, used, sizeof used) : NULL;
    if (!t || t->dtype != DTYPE_BF16 || ((uintptr_t)t->data & 1) || t->ndim != 2 || t->shape[0] != d0 ||
        t->shape[1] != d1)
        return AS_OK;
    const uint16_t *p = t->data;
    for (size_t i = 0; i < t->n_elems; i++)
        if ((p[i] & 0x7f80u) == 0x7f80u) /* exponent all ones: infinity or NaN */
            return as_err_set(err, AS_ERR_INPUT,
                              "%s: tensor '%s' holds a non-finite value (%s at element %zu of %zu): the "
                              "checkpoint is damaged",
                              m->dir, t->name, (p[i] & 0x7fu) ? "NaN" : "infinity", i, t->n_elems);
    if (m->n_params == 0 || m->dtype == DTYPE_F32) m->dtype = DTYPE_BF16;
    m->n_params += t->n_elems;
    *out = p;
    return AS_OK;
}

const char *model_tensor_name(const as_model *m, const char *name) {
    char used[512];
    const st_tensor *t = find_any(m, name, used, sizeof used);
    return t ? t->name : NULL;
}

as_status model_get_lin(as_model *m, const char *base, int n_in, int n_out, int in_out,
                        int bias_required, lin_t *out, as_error *err) {
    char name[512];
    memset(out, 0, sizeof *out);
    snprintf(name, sizeof name, "%s.weight", base);
    as_status s = in_out ? AS_OK : model_get_bf16(m, name, n_out, n_in, &out->wbf, err);
    if (!s && !out->wbf)
        s = in_out ? model_get(m, name, n_in, n_out, 1, &out->w, err) : model_get(m, name, n_out, n_in, 1, &out->w, err);
    if (s) return s;
    out->wname = model_tensor_name(m, name);
    snprintf(name, sizeof name, "%s.bias", base);
    if ((s = model_get(m, name, n_out, -1, bias_required, &out->b, err))) return s;
    out->n_in = n_in;
    out->n_out = n_out;
    out->in_out = in_out;
    out->ldw = in_out ? n_out : n_in;
    return AS_OK;
}

as_status model_classes_from(as_model *m, const char *name, as_error *err) {
    const st_tensor *t = st_set_find(m->st, name);
    if (!t || t->ndim != 2 || t->shape[0] <= 0 || t->shape[0] > AS_MAX_LABELS)
        return as_err_set(err, AS_ERR_INPUT, "%s: tensor '%s' is not a [classes, width] matrix", m->dir, name);
    int C = (int)t->shape[0];
    if (m->cfg.num_labels > 0 && m->cfg.num_labels != C)
        return as_err_set(err, AS_ERR_INPUT, "%s: config.json has %d labels but '%s' has %d rows", m->dir,
                          m->cfg.num_labels, name, C);
    m->cfg.num_labels = C;
    return AS_OK;
}

as_status model_get_ln(as_model *m, const char *base, int n, const char *gname,
                       const char *bname, ln_t *out, as_error *err) {
    char name[512];
    as_status s;
    snprintf(name, sizeof name, "%s.%s", base, gname);
    if ((s = model_get(m, name, n, -1, 1, &out->g, err))) return s;
    out->gname = model_tensor_name(m, name);
    snprintf(name, sizeof name, "%s.%s", base, bname);
    if ((s = model_get(m, name, n, -1, 1, &out->b, err))) return s;
    out->bname = model_tensor_name(m, name);
    out->n = n;
    return AS_OK;
}

/* The mean row of a (rows, cols) table, F32 (tab) or BF16 (tab_bf); sums in double. */
static float *mean_of(const float *tab, const uint16_t *tab_bf, int rows, int cols) {
    float *mu = as_calloc((size_t)cols, sizeof(float));
    double *acc = as_calloc((size_t)cols, sizeof(double));
    if (mu && acc) {
        for (int r = 0; r < rows; r++)
            for (int c = 0; c < cols; c++) {
                size_t i = (size_t)r * cols + c;
                acc[c] += tab ? tab[i] : as_bf16_to_f32(tab_bf[i]);
            }
        for (int c = 0; c < cols; c++) mu[c] = (float)(acc[c] / rows);
    } else {
        free(mu);
        mu = NULL;
    }
    free(acc);
    return mu;
}

/* Mean rows of the embedding tables, for ablation (as_ablate). */
static as_status mean_rows(as_model *m, as_error *err) {
    int De = m->cfg.d_embed;
    m->mean_wte = mean_of(m->wte, m->wte_bf, m->cfg.vocab_size, De);
    if (m->wpe) m->mean_wpe = mean_of(m->wpe, NULL, m->cfg.max_pos, De);
    if (m->wtt) m->mean_wtt = mean_of(m->wtt, NULL, m->cfg.type_vocab, De);
    if (!m->mean_wte || (m->wpe && !m->mean_wpe) || (m->wtt && !m->mean_wtt))
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    return AS_OK;
}

const float *model_emb_word(const as_model *m, const emb_in *in, int t) {
    if (in->word) return in->word + (size_t)t * m->cfg.d_embed;
    if (in->ablate & ABLATE_TOKEN) return m->mean_wte;
    return m->wte + (size_t)in->enc->ids[t] * m->cfg.d_embed;
}

const float *model_emb_pos(const as_model *m, unsigned ablate, int pos) {
    if (ablate & ABLATE_POSITION) return m->mean_wpe;
    return m->wpe + (size_t)pos * m->cfg.d_embed;
}

int model_type_id_limit(const as_model *m, int given) {
    if (m->cfg.arch == ARCH_GPT2 && given) return m->cfg.vocab_size; /* wte rows */
    return m->cfg.type_vocab > 0 ? m->cfg.type_vocab : 1;
}

const float *model_emb_type(const as_model *m, const as_encoding *enc, unsigned ablate, int t) {
    if (m->cfg.arch == ARCH_GPT2 && enc->type_ids_given && enc->type_ids) {
        /* HF GPT2Model: token_type_embeds = wte(token_type_ids) when they are passed */
        if (ablate & ABLATE_SEGMENT) return m->mean_wte;
        return m->wte + (size_t)enc->type_ids[t] * m->cfg.d_embed;
    }
    if (!m->wtt) return NULL;
    if (ablate & ABLATE_SEGMENT) return m->mean_wtt;
    return m->wtt + (size_t)(enc->type_ids ? enc->type_ids[t] : 0) * m->cfg.d_embed;
}

as_status as_model_load(const char *dir, as_model **out, as_error *err) {
    as_status s = AS_OK;
    *out = NULL;
    as_model *m = as_calloc(1, sizeof *m);
    if (!m) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    m->dir = as_strdup(dir);
    if (!m->dir) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if ((s = as_config_load_dir(dir, &m->cfg, err))) goto cleanup;
    if ((s = st_set_open_dir(dir, &m->st, err))) goto cleanup;
    /* Which prefix does this file use? Probe a tensor every layout has. */
    m->prefix = arch_prefix(&m->cfg);
    {
        const char *probe = m->cfg.arch == ARCH_GPT2    ? "wte.weight"
                            : m->cfg.arch == ARCH_LLAMA ? "embed_tokens.weight"
                            : m->cfg.arch == ARCH_BART  ? "encoder.layers.0.fc1.weight"
                            : m->cfg.arch == ARCH_T5    ? "encoder.block.0.layer.0.SelfAttention.q.weight"
                                                        : "embeddings.word_embeddings.weight";
        /* the family's prefix; Gemma 3's multimodal checkpoints nest the text model as
           language_model.model. (transformers < 4.52) or model.language_model. */
        const char *cands[] = {m->prefix, "language_model.model.", "model.language_model.", ""};
        int nc = m->cfg.arch == ARCH_LLAMA ? 4 : 1;
        char buf[256];
        for (int i = 0; i < nc; i++) {
            snprintf(buf, sizeof buf, "%s%s", cands[i], probe);
            if (st_set_find(m->st, buf)) break;
            m->prefix = i + 1 < nc ? cands[i + 1] : "";
        }
        snprintf(buf, sizeof buf, "%s%s", m->prefix, probe);
        if (!st_set_find(m->st, buf)) m->prefix = "";
    }
    switch (m->cfg.arch) {
    case ARCH_BERT:
    case ARCH_ROBERTA: s = bert_bind(m, err); break;
    case ARCH_DISTILBERT: s = distilbert_bind(m, err); break;
    case ARCH_GPT2: s = gpt2_bind(m, err); break;
    case ARCH_LLAMA: s = llama_bind(m, err); break;
    case ARCH_BART: s = bart_bind(m, err); break;
    case ARCH_T5: s = t5_bind(m, err); break;
    }
    if (s) goto cleanup;
    if ((s = mean_rows(m, err))) goto cleanup;
    if (m->dec && (s = mean_rows(m->dec, err))) goto cleanup;
    {
        char p1[4096], p2[4096], p3[4096], p4[4096], p5[4096], p6[4096];
        if ((s = as_path_join(p1, sizeof p1, dir, "tokenizer.json", err))) goto cleanup;
        if ((s = as_path_join(p2, sizeof p2, dir, "vocab.txt", err))) goto cleanup;
        if ((s = as_path_join(p3, sizeof p3, dir, "vocab.json", err))) goto cleanup;
        if ((s = as_path_join(p4, sizeof p4, dir, "merges.txt", err))) goto cleanup;
        if ((s = as_path_join(p5, sizeof p5, dir, "spiece.model", err))) goto cleanup;
        if ((s = as_path_join(p6, sizeof p6, dir, "source.spm", err))) goto cleanup; /* Marian, with vocab.json */
        if (as_file_exists(p1) || as_file_exists(p2) || (as_file_exists(p3) && as_file_exists(p4)) ||
            as_file_exists(p5) || (as_file_exists(p3) && as_file_exists(p6))) {
            int unsup = 0;
            if ((s = tok_load_dir(dir, &m->cfg, &m->tok, &unsup, err))) {
                if (!unsup) goto cleanup;
                /* weights without a usable tokenizer still run on token ids */
                snprintf(m->tok_unsupported, sizeof m->tok_unsupported, "%s",
                         err ? err->msg : "tokenizer not supported");
                as_warn("%s; the model runs on token ids only (--ids)", m->tok_unsupported);
                s = AS_OK;
                if (err) {
                    err->code = AS_OK;
                    err->msg[0] = '\0';
                }
            } else if (tok_n_vocab(m->tok) > m->cfg.vocab_size)
                as_warn("%s: tokenizer has %d tokens but the model's vocab_size is %d", dir,
                        tok_n_vocab(m->tok), m->cfg.vocab_size);
        }
    }
    *out = m;
    return AS_OK;
cleanup:
    as_model_free(m);
    return s;
}

void as_model_free(as_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    free(m->mean_wte);
    free(m->mean_wpe);
    free(m->mean_wtt);
    free(m->rope_inv_freq);
    bart_free_dec(m->dec);
    tok_free(m->tok);
    st_set_free(m->st);
    as_config_clear(&m->cfg);
    free(m->dir);
    free(m);
}

const as_config *as_model_config(const as_model *m) { return &m->cfg; }
unsigned as_model_heads(const as_model *m) { return m->heads; }
as_dtype as_model_dtype(const as_model *m) { return m->dtype; }
void as_model_weight_pages(const as_model *m, size_t *resident, size_t *huge) {
    if (m->st) st_set_pages(m->st, resident, huge);
    else *resident = *huge = 0;
}

int as_cpu_bf16(void) { return as_gemm_bf16_native(); }
as_precision as_model_precision(const as_model *m) { return m->precision; }
const char *as_precision_name(as_precision p) { return p == AS_PRECISION_BF16 ? "bf16" : "f32"; }
int as_precision_parse(const char *s, as_precision *out) {
    if (!strcmp(s, "f32")) *out = AS_PRECISION_F32;
    else if (!strcmp(s, "bf16")) *out = AS_PRECISION_BF16;
    else return -1;
    return 0;
}

/* dst (n_out, n_in) = l's F32 weights rounded to BF16 (Conv1D's [in, out] transposed). */
static void lin_round_bf16(const lin_t *l, uint16_t *dst) {
    if (l->in_out) {
        as_f32_to_bf16_t(dst, (size_t)l->n_in, l->w, (size_t)l->ldw, l->n_in, l->n_out);
        return;
    }
    for (int j = 0; j < l->n_out; j++)
        as_f32_to_bf16_n(dst + (size_t)j * l->n_in, l->w + (size_t)j * l->ldw, (size_t)l->n_in);
}

/* Readies l for precision bf16 (its buffers: lin_bf16_alloc, on the calling thread; their
 * contents: lin_bf16_fill, on the pool): F32 weights get a BF16 copy (rows n_out x n_in;
 * GPT-2's Conv1D [in, out] layout transposed), owned by m; then, where the CPU has the
 * AVX-512 BF16 kernel, the BF16 weights are packed for the forward's products
 * (as_gemm_bf16_pack: no sums across lanes, 3-17% faster than the in-place kernel,
 * bench/gemm_bf16_bench.c), also owned by m. BF16 weights read in place from the
 * checkpoint give their mapped pages back once packed (st_release), so the packing does not
 * double the resident weights; the rarer readers of wbf (the backward, head outputs) map
 * them again when they read. */
typedef struct {
    lin_t *l;
    int round, release; /* fill: round w into wbf; give wbf's mapped pages back after packing */
} lin_bf16_job;

/* Allocates what l lacks at bf16 and describes the filling in *job (job->l NULL: nothing
 * to fill). On an error, job still describes what was allocated (a BF16 copy to round). */
static as_status lin_bf16_alloc(as_model *m, lin_t *l, lin_bf16_job *job, as_error *err) {
    *job = (lin_bf16_job){0};
    if (l->wpk || !lin_has(l)) return AS_OK;
    int in_place = l->wbf && !l->w;
    if (!l->wbf) {
        size_t n = (size_t)l->n_out * l->n_in;
        uint16_t *b = as_malloc_large((n + 1) / 2, sizeof(float)); /* owned as floats */
        if (!b) return as_err_set(err, AS_ERR_INTERNAL, "out of memory converting weights to bf16");
        if (keep_owned(m, (float *)b, err)) return err->code; /* it freed b */
        l->wbf = b;
        *job = (lin_bf16_job){l, 1, 0};
    }
    if (!as_gemm_bf16_native()) return AS_OK;
    uint32_t *pk = as_malloc_large(as_gemm_bf16_packed_words(l->n_out, l->n_in), sizeof(uint32_t));
    if (!pk) return as_err_set(err, AS_ERR_INTERNAL, "out of memory packing weights for bf16");
    if (keep_owned(m, (float *)pk, err)) return err->code; /* it freed pk */
    l->wpk = pk;
    *job = (lin_bf16_job){l, job->round, in_place};
    return AS_OK;
}

/* ctx: the jobs (lin_bf16_job *); job i's copy rounded, packed, its pages given back. */
static void lin_bf16_fill(void *ctx, int i, int tid) {
    (void)tid;
    const lin_bf16_job *j = (const lin_bf16_job *)ctx + i;
    const lin_t *l = j->l;
    if (j->round) lin_round_bf16(l, (uint16_t *)l->wbf);
    if (l->wpk) as_gemm_bf16_pack(l->wbf, (size_t)l->n_in, l->n_out, l->n_in, (uint32_t *)l->wpk);
    if (j->release) st_release(l->wbf, (size_t)l->n_out * l->n_in * sizeof(uint16_t));
}

/* The linear maps of stack s (heads, then each layer's) into out, which holds
 * STACK_LINS_MAX(s) pointers; the count. The (tied) decoder of a masked-LM head becomes a
 * linear map over its table first (lm_head; model_grads gives it no slot of its own). */
#define STACK_LINS_MAX(s_) (5 + 11 * (size_t)(s_)->cfg.n_layer)
static size_t stack_lins(as_model *s_, lin_t **out) {
    int D = s_->cfg.d_model;
    if (!lin_has(&s_->lm_head) && s_->mlm_decoder) /* the (tied) decoder as a linear map */
        s_->lm_head = (lin_t){.w = s_->mlm_decoder, .b = s_->mlm_bias, .n_in = D, .n_out = s_->cfg.vocab_size, .ldw = D};
    size_t n = 0;
    lin_t *heads[] = {&s_->emb_proj, &s_->cls_pre, &s_->cls_out, &s_->mlm_dense, &s_->lm_head};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) out[n++] = heads[i];
    for (int l = 0; l < s_->cfg.n_layer; l++) {
        layer_w *w = &s_->layers[l];
        lin_t *ls[] = {&w->q, &w->k, &w->v, &w->o, &w->ff1, &w->up, &w->ff2, &w->cq, &w->ck, &w->cv, &w->co};
        for (size_t i = 0; i < sizeof ls / sizeof ls[0]; i++) out[n++] = ls[i];
    }
    return n;
}

/* BF16 copies and packed weights of the linear maps of stack s (m itself, or an
 * encoder-decoder model's decoder), owned by m: allocated in order, filled by the maps
 * on all cores. */
static as_status stack_to_bf16(as_model *m, as_model *s_, as_error *err) {
    lin_t **ls = as_malloc_array(STACK_LINS_MAX(s_), sizeof *ls);
    lin_bf16_job *jobs = as_malloc_array(STACK_LINS_MAX(s_), sizeof *jobs);
    as_status s = AS_OK;
    if (!ls || !jobs) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory converting weights to bf16");
        goto cleanup;
    }
    size_t n = stack_lins(s_, ls), n_jobs = 0;
    for (size_t i = 0; i < n && !s; i++) {
        s = lin_bf16_alloc(m, ls[i], &jobs[n_jobs], err);
        if (jobs[n_jobs].l) n_jobs++;
    }
    /* the maps allocated before a failure are filled too: each map stays consistent */
    as_parallel_for((int)n_jobs, as_n_cores(), lin_bf16_fill, jobs);
cleanup:
    free(ls);
    free(jobs);
    return s;
}

/* ---- BF16 copies after the F32 weights change ---- */

/* F32 weights with a BF16 copy (owned by the model) rounded and packed again
 * (lin_bf16_fill). */
as_status model_params_round_bf16(as_model *m, int threads, as_error *err) {
    if (m->precision != AS_PRECISION_BF16) return AS_OK;
    as_model *stacks[2] = {m, m->dec};
    for (int k = 0; k < 2 && stacks[k]; k++) {
        lin_t **ls = as_malloc_array(STACK_LINS_MAX(stacks[k]), sizeof *ls);
        lin_bf16_job *jobs = as_malloc_array(STACK_LINS_MAX(stacks[k]), sizeof *jobs);
        if (!ls || !jobs) {
            free(ls);
            free(jobs);
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory rounding weights to bf16");
        }
        size_t n = stack_lins(stacks[k], ls), kept = 0;
        for (size_t i = 0; i < n; i++)
            if (ls[i]->w && ls[i]->wbf) jobs[kept++] = (lin_bf16_job){ls[i], 1, 0};
        as_parallel_for((int)kept, threads > 0 ? threads : as_n_cores(), lin_bf16_fill, jobs);
        free(ls);
        free(jobs);
    }
    return AS_OK;
}

as_status as_model_set_precision(as_model *m, as_precision p, as_error *err) {
    if (p != AS_PRECISION_F32 && p != AS_PRECISION_BF16)
        return as_err_set(err, AS_ERR_INPUT, "unknown precision %d", (int)p);
    if (p == AS_PRECISION_BF16) {
        as_status s;
        if ((s = stack_to_bf16(m, m, err))) return s;
        if (m->dec && (s = stack_to_bf16(m, m->dec, err))) return s;
    }
    m->precision = p;
    if (m->dec) m->dec->precision = p;
    return AS_OK;
}
size_t as_model_n_params(const as_model *m) { return m->n_params; }
const char *as_model_dir(const as_model *m) { return m->dir; }
int as_model_has_tokenizer(const as_model *m) { return m->tok != NULL; }
const char *as_model_tokenizer_problem(const as_model *m) {
    return m->tok_unsupported[0] ? m->tok_unsupported : NULL;
}

char *as_model_token_text(const as_model *m, int32_t id) {
    if (m->tok) return tok_piece_display(m->tok, id);
    char buf[32];
    snprintf(buf, sizeof buf, "[%d]", (int)id);
    return as_strdup(buf);
}

/* Longest input the position table allows. */
int as_model_max_tokens(const as_model *m) {
    int n = m->cfg.max_pos - m->pos_offset;
    return n < 0 ? 0 : n;
}

as_status as_encode(const as_model *m, const char *text_a, const char *text_b,
                    const as_encode_opts *opts, as_encoding *out, as_error *err) {
    memset(out, 0, sizeof *out);
    if (!m->tok && m->tok_unsupported[0])
        return as_err_set(err, AS_ERR_INPUT, "%s; give token ids instead (--ids)", m->tok_unsupported);
    if (!m->tok)
        return as_err_set(err, AS_ERR_INPUT,
                          "%s: no tokenizer files (tokenizer.json, vocab.txt, vocab.json + merges.txt, vocab.json + "
                          "source.spm + target.spm or spiece.model); use --ids",
                          m->dir);
    int max = as_model_max_tokens(m);
    if (opts && opts->max_len > 0 && opts->max_len < max) max = opts->max_len;
    as_status rc = tok_encode(m->tok, text_a, text_b, max, opts ? opts->truncate : 1, out, err);
    if (rc == AS_OK && m->cfg.type_vocab <= 1) /* no segment embeddings: HF passes none */
        for (int i = 0; i < out->n; i++) out->type_ids[i] = 0;
    return rc;
}

as_status as_encode_target(const as_model *m, const char *text, const as_encode_opts *opts, as_encoding *out,
                           as_error *err) {
    memset(out, 0, sizeof *out);
    if (!m->tok) return as_encode(m, text, NULL, opts, out, err); /* its error */
    int max = as_model_max_tokens(m);
    if (opts && opts->max_len > 0 && opts->max_len < max) max = opts->max_len;
    as_status rc = tok_encode_target(m->tok, text, max, opts ? opts->truncate : 1, out, err);
    if (rc == AS_OK && m->cfg.type_vocab <= 1)
        for (int i = 0; i < out->n; i++) out->type_ids[i] = 0;
    return rc;
}

as_status as_encoding_from_ids(const as_model *m, const int32_t *ids, const int32_t *type_ids,
                               int n, as_encoding *out, as_error *err) {
    memset(out, 0, sizeof *out);
    int max = as_model_max_tokens(m);
    if (n <= 0) return as_err_set(err, AS_ERR_INPUT, "no token ids given");
    if (n > max)
        return as_err_set(err, AS_ERR_INPUT, "%d token ids, but the model takes at most %d", n, max);
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->cfg.vocab_size)
            return as_err_set(err, AS_ERR_INPUT, "token id %d at position %d is outside the vocabulary [0, %d)",
                              (int)ids[i], i, m->cfg.vocab_size);
        int tt = type_ids ? type_ids[i] : 0, ntypes = model_type_id_limit(m, type_ids != NULL);
        if (tt < 0 || tt >= ntypes)
            return as_err_set(err, AS_ERR_INPUT, "token type id %d at position %d is outside [0, %d)", tt, i,
                              ntypes);
    }
    size_t un = (size_t)n;
    out->n = n;
    out->type_ids_given = type_ids != NULL;
    out->ids = as_malloc_array(un, sizeof(int32_t));
    out->type_ids = as_malloc_array(un, sizeof(int32_t));
    out->mask = as_malloc_array(un, sizeof(int32_t));
    out->start = as_malloc_array(un, sizeof(int32_t));
    out->end = as_malloc_array(un, sizeof(int32_t));
    out->seq = as_malloc_array(un, 1);
    out->pieces = as_calloc(un, sizeof(char *));
    if (!out->ids || !out->type_ids || !out->mask || !out->start || !out->end || !out->seq || !out->pieces) {
        as_encoding_free(out);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        out->ids[i] = ids[i];
        out->type_ids[i] = type_ids ? type_ids[i] : 0;
        out->mask[i] = 1;
        out->start[i] = out->end[i] = -1;
        out->seq[i] = (int8_t)(type_ids ? (type_ids[i] ? 1 : 0) : 0);
        const char *p = m->tok ? tok_id_to_piece(m->tok, ids[i]) : NULL;
        char buf[32];
        if (!p) {
            snprintf(buf, sizeof buf, "[%d]", (int)ids[i]);
            p = buf;
        }
        out->pieces[i] = as_strdup(p);
        if (!out->pieces[i]) {
            as_encoding_free(out);
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        }
    }
    return AS_OK;
}

static const float *run_view(const as_run *r, const float *base, int l, int h, size_t per) {
    if (!r || !base) return NULL;
    if (l < r->layer_lo || l >= r->layer_lo + r->n_lay || h < r->head_lo || h >= r->head_lo + r->n_hd)
        return NULL;
    size_t idx = (size_t)(l - r->layer_lo) * (size_t)r->n_hd + (size_t)(h - r->head_lo);
    return base + idx * per;
}

/* Keys per attention row: the source's tokens in a cross-attention run, else T. */
static size_t run_keys(const as_run *r) { return (size_t)(r->Tk > 0 ? r->Tk : r->T); }
const float *as_run_attn(const as_run *r, int l, int h) {
    return r ? run_view(r, r->attn, l, h, (size_t)r->T * run_keys(r)) : NULL;
}
const float *as_run_scores(const as_run *r, int l, int h) {
    return r ? run_view(r, r->scores, l, h, (size_t)r->T * run_keys(r)) : NULL;
}
const float *as_run_q(const as_run *r, int l, int h) {
    return r ? run_view(r, r->q, l, h, (size_t)r->T * r->Dh) : NULL;
}
const float *as_run_k(const as_run *r, int l, int h) {
    return r ? run_view(r, r->k, l, h, run_keys(r) * r->Dh) : NULL;
}
const float *as_run_v(const as_run *r, int l, int h) {
    return r ? run_view(r, r->v, l, h, run_keys(r) * r->Dh) : NULL;
}

void as_run_free(as_run *r) {
    if (!r) return;
    as_large_put(r->block_, r->block_cap_); /* every captured tensor lives in it */
    as_run_free(r->dec);
    as_run_free(r->cross);
    free(r);
}
