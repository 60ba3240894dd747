/* analyze.c — an_analyze: the sentences of `attnscope analyze`, produced by running the
 * model on the SST-2 TSV and / or CoNLL-U corpus (forward with attention, value and
 * hidden-state capture, from which each head's value norms and ALTI shares come;
 * gradient saliency on SST-2 sentences when the model has a trainable classifier head,
 * whose one backward also gives each head's gradient importance;
 * q/k capture and three embedding-ablated forwards on the first `explain` sentences),
 * the induction probe of a causal model (an_induction_probe, once per run, before it is
 * finalized), each head's top-k keys per query with --topk (topk.c, from q and k
 * captured by the same forward), and the run's identity (model and corpus digests,
 * parameters).
 * What it does not: score or store sentences (records.c, chunks.c, drive.c).
 */
#include "analysis/runner_internal.h"

#include "analysis/attrib.h"
#include "analysis/saliency.h"
#include "io/tsv.h"

#include <string.h>

typedef struct {
    as_model *m;
    int sal_ok; /* the model has a classifier head: SST-2 sentences get their saliency */
    int threads, L, H, Dh, has_types;
    int topk_k;      /* k of the stored top-k rows, 0 = none */
    tsv_corpus tsv;
    cu_corpus cu;
    const char *sst_path, *cu_path;
    double *induction; /* (L, H) the induction probe's scores of a causal model, or NULL */
    /* owned by the current sentence */
    as_encoding enc;
    as_run *run, *abl[3];
    as_run *sal_run; /* the saliency's forward (attention; values and hidden states when it replaces the engine's) */
    float *d_attn;   /* (L, H, T, T) the saliency backward's attention gradient */
    float *head_imp; /* (L, H) |dy/dξ| of each head (Michel et al. 2019) from d_attn */
    float *fnorm;    /* (L, H, T) ||f_lh(x_j)|| */
    float *alti;     /* (L, H, T) each head's ALTI share of the block output per query */
    uint8_t *topk;   /* (L, H, T, AN_TOPK_ROW_BYTES(topk_k)) the sentence's top-k rows, or NULL */
    sal_result sal;
    int have_sal;
    char **tok_text;
    uint8_t *kind;
    int *word;
    int *parent;
    char **rel, **form;
    char src[1200];
} az_user;

static void az_release(void *u_) {
    az_user *u = u_;
    for (int t = 0; u->tok_text && t < u->enc.n; t++) free(u->tok_text[t]);
    free(u->tok_text);
    u->tok_text = NULL;
    free(u->kind);
    u->kind = NULL;
    free(u->word);
    u->word = NULL;
    free(u->parent);
    u->parent = NULL;
    free(u->rel);
    u->rel = NULL;
    free(u->form);
    u->form = NULL;
    as_run_free(u->run);
    u->run = NULL;
    as_run_free(u->sal_run);
    u->sal_run = NULL;
    free(u->d_attn);
    u->d_attn = NULL;
    free(u->head_imp);
    u->head_imp = NULL;
    free(u->fnorm);
    u->fnorm = NULL;
    free(u->alti);
    u->alti = NULL;
    free(u->topk);
    u->topk = NULL;
    for (int a = 0; a < 3; a++) {
        as_run_free(u->abl[a]);
        u->abl[a] = NULL;
    }
    if (u->have_sal) sal_result_free(&u->sal);
    u->have_sal = 0;
    as_encoding_free(&u->enc);
    memset(&u->enc, 0, sizeof u->enc);
}

/* The sentence's top-k rows of every layer and head into u->topk, from the q and k its
 * forward captured (one head's block of rows at a time, never L x H x T x T). */
static as_status az_topk(az_user *u, an_sent *s, as_error *err) {
    const int T = u->enc.n;
    const size_t per = (size_t)T * AN_TOPK_ROW_BYTES(u->topk_k);
    u->topk = as_malloc_array(as_mul_size((size_t)u->L * u->H, (size_t)T), AN_TOPK_ROW_BYTES(u->topk_k));
    if (!u->topk) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int l = 0; l < u->L; l++)
        for (int h = 0; h < u->H; h++) {
            as_status rc = an_topk_head(u->m, u->run, l, h, u->topk_k, u->topk + ((size_t)l * u->H + h) * per, err);
            if (rc) return rc;
        }
    s->topk_k = u->topk_k;
    s->topk = u->topk;
    return AS_OK;
}

/* Each head's value norms and ALTI shares (attr_head_mixing) from run r of the sentence,
 * into s; nothing when r holds no values or hidden states. */
static as_status az_mixing(az_user *u, const as_run *r, an_sent *s, as_error *err) {
    if (!r->v || !r->hidden) return AS_OK;
    const size_t n = as_mul_size((size_t)u->L * u->H, (size_t)r->T);
    u->fnorm = as_malloc_array(n, sizeof(float));
    u->alti = as_malloc_array(n, sizeof(float));
    if (!u->fnorm || !u->alti) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    as_status rc = attr_head_mixing(u->m, r, u->threads > 0 ? u->threads : as_n_cores(), u->fnorm, u->alti, err);
    if (rc) return as_err_prefix(err, "%s", u->src);
    s->fnorm = u->fnorm;
    s->alti_share = u->alti;
    return AS_OK;
}

static as_status az_produce(void *u_, int idx, int explain, an_sent *s, as_error *err) {
    az_user *u = u_;
    int is_sst = idx < u->tsv.n;
    const cu_sentence *cs = is_sst ? NULL : &u->cu.s[idx - u->tsv.n];
    const char *text = is_sst ? u->tsv.rows[idx].text : cs->text;
    snprintf(u->src, sizeof u->src, "%s:%d", is_sst ? u->sst_path : u->cu_path, is_sst ? u->tsv.rows[idx].line : cs->line);
    as_encode_opts eo = {.max_len = 0, .truncate = 1};
    as_status rc = as_encode(u->m, text, NULL, &eo, &u->enc, err);
    if (rc) return as_err_prefix(err, "%s", u->src);
    const int T = u->enc.n;
    /* SST-2 sentences without the explanation: the saliency's forward (the same forward)
       gives the attention, values and hidden states, so no second forward runs */
    int reuse = is_sst && u->sal_ok && !explain && !u->topk_k;
    if (!reuse) {
        as_capture_spec spec = {.what = CAP_ATTN | CAP_QKV | CAP_HIDDEN, .layer = -1, .head = -1, .threads = u->threads};
        if ((rc = as_forward(u->m, &u->enc, &spec, &u->run, err))) return as_err_prefix(err, "%s", u->src);
    }
    if (u->topk_k && (rc = az_topk(u, s, err))) return as_err_prefix(err, "%s", u->src);
    u->tok_text = as_calloc((size_t)T, sizeof *u->tok_text);
    u->kind = as_malloc((size_t)T);
    if (!u->tok_text || !u->kind) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int t = 0; t < T; t++) {
        u->tok_text[t] = as_model_token_text(u->m, u->enc.ids[t]);
        if (!u->tok_text[t] && !(u->tok_text[t] = as_strdup("?"))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        if (!u->enc.mask[t]) u->kind[t] = HK_PAD;
        else if (u->enc.seq[t] < 0) u->kind[t] = t == 0 ? HK_CLS : HK_SEP;
        else u->kind[t] = hd_is_punct(u->tok_text[t]) ? HK_PUNCT : HK_WORD;
    }
    if (explain) {
        static const unsigned comp[3] = {ABLATE_TOKEN, ABLATE_POSITION, ABLATE_SEGMENT};
        for (int a = 0; a < 3; a++) {
            if (comp[a] == ABLATE_SEGMENT && !u->has_types) continue;
            as_capture_spec sa = {.what = CAP_ATTN, .layer = -1, .head = -1, .threads = u->threads, .ablate = comp[a]};
            if ((rc = as_forward(u->m, &u->enc, &sa, &u->abl[a], err))) return as_err_prefix(err, "%s", u->src);
            s->abl[a] = u->abl[a]->attn;
        }
        s->q = u->run->q;
        s->k = u->run->k;
    }
    if (is_sst && u->sal_ok) {
        /* the saliency's one backward also gives dy/dA, hence each head's importance */
        u->d_attn = as_malloc_array(as_mul_size((size_t)u->L * u->H, (size_t)T * T), sizeof(float));
        u->head_imp = as_malloc_array((size_t)u->L * u->H, sizeof(float));
        if (!u->d_attn || !u->head_imp) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        sal_opts so = {.method = SAL_GRAD, .target = -1, .steps = 0, .threads = u->threads};
        sal_extra sx = {.capture = reuse ? CAP_QKV | CAP_HIDDEN : 0, .d_attn = u->d_attn, .run = &u->sal_run};
        if ((rc = sal_compute_extra(u->m, &u->enc, &so, &sx, &u->sal, err))) return as_err_prefix(err, "%s", u->src);
        u->have_sal = 1;
        attr_head_importance(u->sal_run->attn, u->d_attn, u->L, u->H, T, u->head_imp);
        s->head_imp = u->head_imp;
        s->sal = u->sal.scores;
        s->sal_all = u->sal.scores;
        s->n_sal_cls = 1;
        s->sal_first_class = u->sal.predicted;
        s->predicted = u->sal.predicted;
    } else {
        s->predicted = -1;
    }
    if (cs) {
        const int W = cs->n_words;
        u->word = as_malloc_array((size_t)T, sizeof *u->word);
        u->parent = as_malloc_array((size_t)W, sizeof *u->parent);
        u->rel = as_malloc_array((size_t)W, sizeof *u->rel);
        u->form = as_malloc_array((size_t)W, sizeof *u->form);
        int32_t *st = as_malloc_array((size_t)T, sizeof *st);
        if (!u->word || !u->parent || !u->rel || !u->form || !st) {
            free(st);
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        }
        /* a byte-level BPE piece may start with the space before its word: skip it */
        for (int t = 0; t < T; t++) {
            st[t] = u->enc.start[t];
            while (st[t] >= 0 && st[t] < u->enc.end[t] && (text[st[t]] == ' ' || text[st[t]] == '\t')) st[t]++;
        }
        cu_token_words(cs, st, T, u->word);
        free(st);
        for (int w = 0; w < W; w++) {
            u->parent[w] = cs->words[w].head;
            u->rel[w] = cs->words[w].deprel;
            u->form[w] = cs->words[w].form;
        }
        s->W = W;
        s->word = u->word;
        s->parent = u->parent;
        s->rel = u->rel;
        s->word_form = u->form;
    }
    s->corpus = is_sst ? "sst2" : "conllu";
    s->source = u->src;
    s->text = text;
    s->label = is_sst ? u->tsv.rows[idx].label : -1;
    s->truncated = u->enc.n_warnings > 0;
    s->T = T;
    s->tok_text = u->tok_text;
    s->start = u->enc.start;
    s->end = u->enc.end;
    s->kind = u->kind;
    s->attn = reuse ? u->sal_run->attn : u->run->attn;
    return az_mixing(u, reuse ? u->sal_run : u->run, s, err);
}

/* Reads the corpora and loads the model into u (every MPI rank does). */
static as_status az_setup(az_user *u, const an_opts *o, as_error *err) {
    as_status rc;
    u->sst_path = o->sst2;
    u->cu_path = o->conllu;
    u->threads = o->threads;
    if (o->topk < 0 || o->topk > AN_TOPK_MAX)
        return as_err_set(err, AS_ERR_INPUT, "top-k: k = %d, expected 1..%d", o->topk, AN_TOPK_MAX);
    u->topk_k = o->topk;
    if (o->sst2 && (rc = tsv_read_sst2(o->sst2, o->limit, &u->tsv, err))) return rc;
    if (o->conllu && (rc = cu_read(o->conllu, o->limit, &u->cu, err))) return rc;
    if ((rc = as_model_load(o->model_dir, &u->m, err)) || (rc = as_model_set_precision(u->m, o->precision, err)))
        return rc;
    const as_config *cfg = as_model_config(u->m);
    if (!as_model_has_tokenizer(u->m))
        return as_err_set(err, AS_ERR_INPUT, "%s: no tokenizer files (vocab.txt / tokenizer.json): analyze tokenizes text",
                          o->model_dir);
    u->L = cfg->n_layer;
    u->H = cfg->n_head;
    u->Dh = cfg->d_head;
    u->has_types = cfg->type_vocab > 0;
    u->sal_ok = u->tsv.n && (as_model_heads(u->m) & HEAD_CLASSIFIER);
    if (u->tsv.n + u->cu.n == 0) return as_err_set(err, AS_ERR_INPUT, "the corpora hold no sentences");
    return AS_OK;
}

/* Rank 0 of a causal model: every head's induction probe score into u->induction, on
 * AN_PROBE_LENGTH random tokens (fewer when the model's positions do not hold twice as
 * many). Deterministic (seeded), so a resumed run stores the same scores. */
static as_status az_probe(az_user *u, as_error *err) {
    const as_config *cfg = as_model_config(u->m);
    if (!cfg->causal) return AS_OK;
    int R = AN_PROBE_LENGTH, room = (as_model_max_tokens(u->m) - (cfg->bos_token_id >= 0)) / 2;
    if (R > room) R = room;
    if (R < 2) return AS_OK;
    an_probe_result pr;
    as_status rc = an_induction_probe(u->m, R, AN_PROBE_SEED, u->threads, &pr, err);
    if (rc) return rc;
    u->induction = as_malloc_array((size_t)u->L * u->H, sizeof *u->induction);
    if (!u->induction) rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    for (int lh = 0; !rc && lh < u->L * u->H; lh++) u->induction[lh] = pr.heads[lh].induction;
    an_probe_result_free(&pr);
    return rc;
}

/* Rank 0: the run's identity, the database, and the run found or created in it. */
static as_status az_begin(az_user *u, const char *db_path, const an_opts *o, store *st, an_ctx *c, int *n_done,
                          int *done, as_error *err) {
    char mdig[65], cdig[65], corpus[2600], params[256], p1[1200], p2[1200];
    as_status rc;
    if ((rc = an_digest_dir(o->model_dir, an_model_file_wanted, mdig, err))) return rc;
    sha256_ctx hc;
    sha256_init(&hc);
    if (o->sst2) {
        sha256_update(&hc, "sst2", 5);
        if ((rc = sha256_file(&hc, o->sst2, err))) return rc;
    }
    if (o->conllu) {
        sha256_update(&hc, "conllu", 7);
        if ((rc = sha256_file(&hc, o->conllu, err))) return rc;
    }
    sha256_final_hex(&hc, cdig);
    an_json_escape_path(p1, sizeof p1, o->sst2);
    an_json_escape_path(p2, sizeof p2, o->conllu);
    snprintf(corpus, sizeof corpus, "{\"sst2\":\"%s\",\"conllu\":\"%s\"}", p1, p2);
    int chunk = o->chunk > 0 ? o->chunk : AN_DEFAULT_CHUNK;
    int explain = o->explain >= 0 ? o->explain : AN_DEFAULT_EXPLAIN;
    int min_rel = o->min_rel > 0 ? o->min_rel : AN_DEFAULT_MIN_REL;
    snprintf(params, sizeof params,
             "{\"chunk\":%d,\"explain\":%d,\"limit\":%d,\"min_rel\":%d,\"saliency\":\"grad\",\"source\":\"analyze\"}", chunk,
             explain, o->limit, min_rel);
    /* top-k and BF16 are part of the run's identity only when asked for, so earlier runs keep theirs */
    if (o->topk) snprintf(params + strlen(params) - 1, sizeof params - strlen(params) + 1, ",\"topk\":%d}", o->topk);
    if (o->precision == AS_PRECISION_BF16)
        snprintf(params + strlen(params) - 1, sizeof params - strlen(params) + 1, ",\"precision\":\"bf16\"}");
    run_key k = {.model_name = o->model_dir, .model_digest = mdig, .arch = as_arch_name(as_model_config(u->m)->arch),
                 .corpus = corpus, .corpus_digest = cdig, .params = params, .source = STORE_SOURCE_ANALYZE,
                 .L = u->L, .H = u->H, .Dh = u->Dh, .n_total = u->tsv.n + u->cu.n};
    if ((rc = store_open(db_path, 1, st, err))) return rc;
    int64_t run;
    if ((rc = an_run_begin(st, &k, &run, n_done, done, err))) return rc;
    return an_ctx_init(c, st, run, u->L, u->H, u->Dh, err);
}

as_status an_analyze(const char *db_path, const an_opts *o, as_error *err) {
    as_status rc = AS_OK;
    az_user u;
    memset(&u, 0, sizeof u);
    store st = {0};
    an_ctx c;
    memset(&c, 0, sizeof c);
    int rank, size, n_done = 0, done = 0;
    if (o->source || o->target) {
        if (o->sst2 || o->conllu)
            return as_err_set(err, AS_ERR_INPUT, "--source / --target do not go with --sst2 / --conllu");
        an_mpi_rank(&rank, &size);
        return rank > 0 ? AS_OK : an_analyze_encdec(db_path, o, err); /* one process writes it */
    }
    if (o->gold) return as_err_set(err, AS_ERR_INPUT, "--gold needs --source FILE and --target FILE");
    an_mpi_rank(&rank, &size);
    if (!o->sst2 && !o->conllu) return as_err_set(err, AS_ERR_INPUT, "give --sst2 FILE and/or --conllu FILE");
    /* Under MPI every rank reads the corpora and loads the model; rank 0 alone owns the
     * database. Setup errors are agreed on before anyone goes further. */
    rc = an_mpi_agree(rank, size, az_setup(&u, o, err), err);
    if (rc) goto cleanup;
    if (rank == 0) rc = az_begin(&u, db_path, o, &st, &c, &n_done, &done, err);
    rc = an_mpi_sync(rank, size, rc, &n_done, &done, err);
    if (!rc && rank > 0) rc = an_ctx_init(&c, NULL, 0, u.L, u.H, u.Dh, err);
    if (rc) goto cleanup;
    c.rank = rank;
    c.size = size;
    c.threads = o->threads;
    c.chunk = o->chunk > 0 ? o->chunk : AN_DEFAULT_CHUNK;
    c.explain = o->explain >= 0 ? o->explain : AN_DEFAULT_EXPLAIN;
    c.n_total = u.tsv.n + u.cu.n;
    if (rank > 0) { /* score this rank's sentences and send them to rank 0 */
        if (!done) rc = an_drive_worker(&c, n_done, az_produce, az_release, &u, err);
        goto cleanup;
    }
    c.min_rel = o->min_rel > 0 ? o->min_rel : AN_DEFAULT_MIN_REL;
    c.progress = o->progress;
    if (!done && (rc = az_probe(&u, err))) goto cleanup;
    c.induction = u.induction;
    rc = an_finish_run(&c, &st, n_done, done, az_produce, az_release, &u, o, "analyze", err);
cleanup:
    az_release(&u);
    an_ctx_free(&c);
    store_close(&st);
    as_model_free(u.m);
    free(u.induction);
    tsv_corpus_free(&u.tsv);
    cu_corpus_free(&u.cu);
    return rc;
}
