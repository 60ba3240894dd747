/* analyze_encdec.c — `attnscope analyze --source FILE --target FILE [--gold FILE]`: the
 * per-head statistics of an encoder-decoder model's three kinds of attention (encoder
 * self-attention, decoder self-attention, cross-attention) over a parallel corpus, and
 * with gold alignments the alignment error rate of every cross-attention head
 * (attnscope/align.h), into table encdec_heads of the analysis database; with --topk, each
 * pair's cross-attention top-k (target rows over source keys, from the dense rows:
 * an_topk_dense) into table topk_cross, one transaction per pair.
 * Encoder and decoder statistics are the forward's own (CAP_STATS: entropy, first-token
 * mass, self / previous / next mass, mean distance, spread, largest weight per real query
 * row); cross-attention gets entropy, the mass on the first source token and the largest
 * weight (self / previous / next and distances between a target and a source position
 * mean nothing: NULL). Each is the mean over sentences of the per-sentence mean over
 * rows. The run is written in one transaction when every pair has run (a run that was
 * interrupted starts again; a finished one is not redone).
 * What it does not: the encoder-only runner's tables (sentence rows, Dodrio scores,
 * relations, patterns), resuming mid-corpus, MPI (under mpirun, rank 0 alone runs it).
 */
#include "analysis/runner_internal.h"

#include "attnscope/align.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ED_ENC = 0, ED_DEC, ED_CROSS, ED_KINDS };
static const char *const ED_KIND[ED_KINDS] = {"encoder", "decoder", "cross"};

typedef struct {
    as_model *m;
    const an_opts *o;
    int Le, Ld, H, n;
    char **src, **tgt, **gold;
    int ns, nt, ng;
    double *sum[ED_KINDS]; /* (L of the kind, H, AS_HEAD_N_STATS) sums over sentences */
    al_counts *cnt;        /* (Ld, H + 1) */
    int32_t *best;         /* scratch (Ld, H + 1, Wt) */
    store *st;             /* the open database (top-k rows are written per pair) */
    int64_t run;
    sqlite3_stmt *ins_topk; /* INSERT into topk_cross, with --topk */
    uint8_t *topk;         /* scratch (Tt, AN_TOPK_ROW_BYTES(k)) */
} ed_state;

/* Cross-attention statistics of one run (Tt rows over Ts keys; real rows: the decoder
 * mask) added to sum (Ld, H, AS_HEAD_N_STATS): entropy, first-key mass, largest weight. */
static void ed_cross_stats(const as_run *x, double *sum) {
    const int Tt = x->T, Ts = x->Tk;
    for (int lh = 0; lh < x->n_lay * x->n_hd; lh++) {
        double ent = 0, sink = 0, mx = 0;
        int n = 0;
        for (int i = 0; i < Tt; i++) {
            if (!x->attention_mask[i]) continue;
            const float *p = x->attn + ((size_t)lh * Tt + i) * Ts;
            double e = 0, m = 0;
            for (int j = 0; j < Ts; j++) {
                if (p[j] > 0) e -= (double)p[j] * log((double)p[j]);
                m = p[j] > m ? p[j] : m;
            }
            ent += e, sink += p[0], mx += m, n++;
        }
        double *s = sum + (size_t)lh * AS_HEAD_N_STATS;
        if (!n) continue;
        s[AS_HEAD_STAT_ENTROPY] += ent / n;
        s[AS_HEAD_STAT_SINK] += sink / n;
        s[AS_HEAD_STAT_MAX] += mx / n;
    }
}

/* Writes pair `sent`'s cross-attention top-k (x: Tt rows over Ts keys per layer and head)
 * into topk_cross, in one transaction. */
static as_status ed_topk(ed_state *e, int sent, const as_run *x, as_error *err) {
    const int Tt = x->T, Ts = x->Tk, k = e->o->topk;
    const size_t bytes = (size_t)Tt * AN_TOPK_ROW_BYTES(k);
    uint8_t *buf = realloc(e->topk, bytes);
    if (!buf) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    e->topk = buf;
    as_status rc = store_exec(e->st, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    for (int l = 0; l < x->n_lay && !rc; l++)
        for (int h = 0; h < x->n_hd && !rc; h++) {
            an_topk_dense(x->attn + ((size_t)l * x->n_hd + h) * (size_t)Tt * Ts, Tt, Ts, k, buf);
            sqlite3_stmt *q = e->ins_topk;
            store_set_int(q, "run", e->run);
            store_set_int(q, "sent", sent);
            store_set_int(q, "layer", l);
            store_set_int(q, "head", h);
            store_set_int(q, "k", k);
            store_set_int(q, "n_query", Tt);
            store_set_int(q, "n_key", Ts);
            store_set_blob(q, "rows", buf, bytes);
            rc = store_step_done(e->st, q, err);
        }
    if (!rc) return store_exec(e->st, "COMMIT", err);
    store_exec(e->st, "ROLLBACK", &(as_error){0});
    return rc;
}

/* Runs pair k and adds its statistics and AER counts. */
static as_status ed_pair(ed_state *e, int k, as_error *err) {
    as_encoding se = {0}, te = {0}, de = {0};
    as_run *r = NULL;
    int *sw = NULL, *lw = NULL, *rw = NULL, Ws = 0, Wt = 0;
    const char *where = e->o->source;
    as_encode_opts eo = {.max_len = 0, .truncate = 1};
    as_status rc = as_encode(e->m, e->src[k], NULL, &eo, &se, err);
    if (!rc) where = e->o->target;
    if (!rc) rc = as_encode_target(e->m, e->tgt[k], &eo, &te, err);
    if (!rc) rc = as_seq2seq_shift_target(e->m, &te, &de, err);
    as_capture_spec spec = {.what = CAP_STATS | CAP_ATTN, .layer = -1, .head = -1, .threads = e->o->threads};
    if (!rc) where = e->o->source;
    if (!rc) rc = as_forward_seq2seq(e->m, &se, &de, &spec, &r, err);
    if (rc) {
        as_err_prefix(err, "%s:%d", where, k + 1);
        goto cleanup;
    }
    const as_run *kinds[2] = {r, r->dec};
    for (int kd = 0; kd < 2; kd++)
        for (size_t x = 0; x < (size_t)kinds[kd]->n_lay * e->H * AS_HEAD_N_STATS; x++)
            e->sum[kd][x] += kinds[kd]->head_stats[x];
    ed_cross_stats(r->cross, e->sum[ED_CROSS]);
    if (e->o->topk && (rc = ed_topk(e, k, r->cross, err))) goto cleanup;
    if (e->gold) {
        sw = as_malloc_array((size_t)se.n, sizeof *sw);
        lw = as_malloc_array((size_t)te.n, sizeof *lw);
        rw = as_malloc_array((size_t)te.n, sizeof *rw);
        if (!sw || !lw || !rw) {
            rc = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
        if ((rc = al_token_words(&se, e->src[k], sw, &Ws, err))) {
            as_err_prefix(err, "%s:%d", e->o->source, k + 1);
            goto cleanup;
        }
        if ((rc = al_token_words(&te, e->tgt[k], lw, &Wt, err))) {
            as_err_prefix(err, "%s:%d", e->o->target, k + 1);
            goto cleanup;
        }
        al_target_rows(lw, te.n, 0, rw);
        al_links g = {0};
        if ((rc = al_parse_line(e->o->gold, k + 1, e->gold[k], Ws, Wt, &g, err))) goto cleanup;
        if (!(rc = al_align_run(r->cross, rw, Wt, sw, Ws, e->best, err)))
            for (int x = 0; x < e->Ld * (e->H + 1); x++) al_count(e->best + (size_t)x * Wt, Wt, &g, &e->cnt[x]);
        al_links_free(&g);
    }
cleanup:
    as_run_free(r);
    as_encoding_free(&se);
    as_encoding_free(&te);
    as_encoding_free(&de);
    free(sw);
    free(lw);
    free(rw);
    return rc;
}

/* Writes the run's encdec_heads rows and marks it done, in one transaction. */
static as_status ed_store(ed_state *e, store *st, int64_t run, as_error *err) {
    sqlite3_stmt *q = NULL;
    char sql[160];
    as_status rc = store_exec(st, "BEGIN IMMEDIATE", err);
    if (rc) return rc;
    snprintf(sql, sizeof sql, "DELETE FROM encdec_heads WHERE run=%lld", (long long)run);
    if ((rc = store_exec(st, sql, err)) || (rc = store_prepare_insert(st, "encdec_heads", NULL, &q, err))) goto fail;
    static const struct {
        const char *col;
        int stat;
    } COLS[] = {{"entropy", AS_HEAD_STAT_ENTROPY}, {"sink", AS_HEAD_STAT_SINK}, {"self", AS_HEAD_STAT_SELF},
                {"prev", AS_HEAD_STAT_PREV},       {"next", AS_HEAD_STAT_NEXT}, {"dist", AS_HEAD_STAT_DIST},
                {"spread", AS_HEAD_STAT_SPREAD},   {"max", AS_HEAD_STAT_MAX}};
    for (int kd = 0; kd < ED_KINDS; kd++) {
        int L = kd == ED_ENC ? e->Le : e->Ld;
        for (int l = 0; l < L; l++)
            for (int h = 0; h < e->H; h++) {
                const double *s = e->sum[kd] + ((size_t)l * e->H + h) * AS_HEAD_N_STATS;
                store_set_int(q, "run", run);
                store_set_text(q, "kind", ED_KIND[kd]);
                store_set_int(q, "layer", l);
                store_set_int(q, "head", h);
                store_set_int(q, "n_sentences", e->n);
                for (size_t c = 0; c < sizeof COLS / sizeof *COLS; c++) {
                    int pos = COLS[c].stat != AS_HEAD_STAT_ENTROPY && COLS[c].stat != AS_HEAD_STAT_SINK &&
                              COLS[c].stat != AS_HEAD_STAT_MAX;
                    store_set_real(q, COLS[c].col, kd == ED_CROSS && pos ? NAN : s[COLS[c].stat] / e->n);
                }
                if (kd == ED_CROSS && e->gold) {
                    const al_counts *c = &e->cnt[(size_t)l * (e->H + 1) + h];
                    store_set_real(q, "aer", al_aer(c));
                    store_set_int(q, "links", c->a);
                    store_set_int(q, "sure", c->s);
                    store_set_int(q, "hit_sure", c->a_s);
                    store_set_int(q, "hit_possible", c->a_p);
                }
                if ((rc = store_step_done(st, q, err))) goto fail;
            }
    }
    snprintf(sql, sizeof sql, "UPDATE runs SET n_done=%d, status='done', finished=datetime('now') WHERE id=%lld", e->n,
             (long long)run);
    if ((rc = store_exec(st, sql, err)) || (rc = store_exec(st, "COMMIT", err))) goto fail;
    sqlite3_finalize(q);
    return AS_OK;
fail:
    sqlite3_finalize(q);
    store_exec(st, "ROLLBACK", &(as_error){0});
    return rc;
}

/* The run's identity: model digest, the digest of the source, target and gold files, the
 * parameters; found or created in st. */
static as_status ed_begin(ed_state *e, const char *db_path, store *st, int64_t *run, int *done, as_error *err) {
    const an_opts *o = e->o;
    char mdig[65], cdig[65], corpus[3700], params[200], p[3][1200], topk[24] = "";
    as_status rc = an_digest_dir(o->model_dir, an_model_file_wanted, mdig, err);
    if (rc) return rc;
    sha256_ctx hc;
    sha256_init(&hc);
    const char *files[3] = {o->source, o->target, o->gold};
    static const char *const tags[3] = {"source", "target", "gold"};
    for (int i = 0; i < 3; i++) {
        an_json_escape_path(p[i], sizeof p[i], files[i] ? files[i] : "");
        if (files[i] && (rc = an_digest_files(&hc, tags[i], &files[i], 1, err))) return rc;
    }
    sha256_final_hex(&hc, cdig);
    snprintf(corpus, sizeof corpus, "{\"source\":\"%s\",\"target\":\"%s\",\"gold\":\"%s\"}", p[0], p[1], p[2]);
    if (o->topk) snprintf(topk, sizeof topk, ",\"topk\":%d", o->topk); /* absent without: older runs' identity */
    snprintf(params, sizeof params, "{\"kind\":\"encdec\",\"decoder_layers\":%d,\"limit\":%d,\"rows\":\"predict\"%s%s}",
             e->Ld, o->limit, topk, o->precision == AS_PRECISION_BF16 ? ",\"precision\":\"bf16\"" : "");
    const as_config *c = as_model_config(e->m);
    run_key k = {.model_name = o->model_dir, .model_digest = mdig, .arch = as_arch_name(c->arch), .corpus = corpus,
                 .corpus_digest = cdig, .params = params, .source = STORE_SOURCE_ANALYZE, .L = e->Le, .H = e->H,
                 .Dh = c->d_head, .n_total = e->n};
    if ((rc = store_open(db_path, 1, st, err))) return rc;
    int n_done;
    return an_run_begin(st, &k, run, &n_done, done, err);
}

/* Reads the corpus files, loads and checks the model, allocates the sums. */
static as_status ed_setup(ed_state *e, as_error *err) {
    const an_opts *o = e->o;
    as_status rc;
    if (!o->source || !o->target) return as_err_set(err, AS_ERR_INPUT, "give --source FILE and --target FILE together");
    if ((rc = al_read_lines(o->source, &e->src, &e->ns, err)) || (rc = al_read_lines(o->target, &e->tgt, &e->nt, err)) ||
        (o->gold && (rc = al_read_lines(o->gold, &e->gold, &e->ng, err))))
        return rc;
    if (e->ns != e->nt) return as_err_set(err, AS_ERR_INPUT, "%s has %d lines but %s has %d", o->source, e->ns, o->target, e->nt);
    if (o->gold && e->ng != e->ns)
        return as_err_set(err, AS_ERR_INPUT, "%s has %d lines but %s has %d", o->gold, e->ng, o->source, e->ns);
    if (!e->ns) return as_err_set(err, AS_ERR_INPUT, "%s has no lines", o->source);
    e->n = o->limit > 0 && o->limit < e->ns ? o->limit : e->ns;
    if ((rc = as_model_load(o->model_dir, &e->m, err)) || (rc = as_model_set_precision(e->m, o->precision, err)))
        return rc;
    const as_config *c = as_model_config(e->m);
    if (!c->n_dec_layer)
        return as_err_set(err, AS_ERR_INPUT, "%s is not an encoder-decoder model (%s): --source / --target need one",
                          o->model_dir, c->model_type);
    if (!as_model_has_tokenizer(e->m))
        return as_err_set(err, AS_ERR_INPUT, "%s has no tokenizer that loads: --source / --target are text", o->model_dir);
    e->Le = c->n_layer, e->Ld = c->n_dec_layer, e->H = c->n_head;
    for (int kd = 0; kd < ED_KINDS; kd++)
        if (!(e->sum[kd] = as_calloc((size_t)(kd == ED_ENC ? e->Le : e->Ld) * e->H * AS_HEAD_N_STATS, sizeof(double))))
            return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    e->cnt = as_calloc((size_t)e->Ld * (e->H + 1), sizeof *e->cnt);
    e->best = as_malloc_array((size_t)e->Ld * (e->H + 1), AL_MAX_WORDS * sizeof *e->best);
    if (!e->cnt || !e->best) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    return AS_OK;
}

as_status an_analyze_encdec(const char *db_path, const an_opts *o, as_error *err) {
    ed_state e = {.o = o};
    store st = {0};
    int64_t run = 0;
    int done = 0;
    as_status rc = ed_setup(&e, err);
    if (!rc) rc = ed_begin(&e, db_path, &st, &run, &done, err);
    if (rc) goto cleanup;
    if (done) {
        if (!o->quiet) printf("analyze: run %lld of %s is complete: nothing to do\n", (long long)run, db_path);
        goto cleanup;
    }
    e.st = &st;
    e.run = run;
    if (o->topk) {
        char sql[80]; /* the rows of an interrupted run are written again */
        snprintf(sql, sizeof sql, "DELETE FROM topk_cross WHERE run=%lld", (long long)run);
        if ((rc = store_exec(&st, sql, err)) || (rc = store_prepare_insert(&st, "topk_cross", NULL, &e.ins_topk, err)))
            goto cleanup;
    }
    double t0 = as_now();
    for (int k = 0; k < e.n && !rc; k++) {
        rc = ed_pair(&e, k, err);
        if (o->progress) fprintf(stderr, "\ranalyze: %d/%d sentence pairs", k + 1, e.n);
    }
    if (o->progress) fprintf(stderr, "\n");
    if (!rc) rc = ed_store(&e, &st, run, err);
    if (!rc && !o->quiet)
        printf("analyze: run %lld: %d sentence pairs of %s, encoder, decoder and cross-attention heads%s in %.1f s -> %s\n",
               (long long)run, e.n, o->model_dir, o->gold ? " with AER" : "", as_now() - t0, db_path);
cleanup:
    sqlite3_finalize(e.ins_topk);
    free(e.topk);
    store_close(&st);
    as_model_free(e.m);
    for (int kd = 0; kd < ED_KINDS; kd++) free(e.sum[kd]);
    free(e.cnt);
    free(e.best);
    al_lines_free(e.src, e.ns);
    al_lines_free(e.tgt, e.nt);
    al_lines_free(e.gold, e.ng);
    return rc;
}
