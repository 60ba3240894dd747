/* import.c — an_import_dir and an_import_files: the sentences of `attnscope import`,
 * produced from a folder of NAME.json + NAME.attention.npy (Dodrio's layout) or from
 * files given one set per sentence (attention from any framework), scored like an
 * analyzed model in a run whose source is 'import'.
 * What it does not: parse the formats (import_read.c) or score sentences (records.c).
 */
#include "analysis/runner_internal.h"

#include <string.h>

static as_status im_produce(void *u_, int idx, int explain, an_sent *s, as_error *err) {
    im_user *u = u_;
    as_status rc;
    char jpath[4096], npath[4096], base[1024];
    const char *jn = u->names[idx];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(jn) - 5), jn);
    if ((rc = as_path_join(jpath, sizeof jpath, u->dir, jn, err))) return rc;
    char nn[1100];
    snprintf(nn, sizeof nn, "%s.attention.npy", base);
    if ((rc = as_path_join(npath, sizeof npath, u->dir, nn, err))) return rc;
    snprintf(u->src, sizeof u->src, "%s", jn);
    if ((rc = an_im_load_json(jpath, &u->j, err))) return rc;
    json_t *j = u->j;
    const char *sentence = json_string_value(json_object_get(j, "sentence"));
    json_t *toks = json_object_get(j, "tokens"), *sal = json_object_get(j, "saliency");
    json_t *lab = json_object_get(j, "label"), *pred = json_object_get(j, "predicted_label");
    if (!json_is_object(j)) IM_FAIL("%s: expected a JSON object", jpath);
    if (!sentence) IM_FAIL("%s: field 'sentence' missing or not a string", jpath);
    if (!json_is_array(toks) || json_array_size(toks) == 0) IM_FAIL("%s: field 'tokens' missing or not a non-empty array", jpath);
    const int T = (int)json_array_size(toks);
    if (T > AS_MAX_POSITIONS) IM_FAIL("%s: %d tokens exceed %d", jpath, T, AS_MAX_POSITIONS);
    if ((rc = an_im_tokens(u, jpath, toks, NULL, err))) return rc;
    if ((rc = an_im_read_attention(u, npath, T, err)) || (rc = an_im_check_values(u, npath, T, err))) return rc;
    s->label = json_is_integer(lab) ? (int)json_integer_value(lab) : -1;
    s->predicted = json_is_integer(pred) ? (int)json_integer_value(pred) : -1;
    if (sal && (rc = an_im_saliency(u, jpath, sal, T, s, err))) return rc;
    json_t *deps = json_object_get(j, "dependencies");
    if (deps) {
        int W = 0;
        if ((rc = an_im_deps_json(u, jpath, deps, T, &W, err))) return rc;
        if (an_im_align_pieces(u->tok_text, u->kind, T, u->form, W, u->word) == 0)
            an_im_set_words(u, s, W);
        else
            as_warn("%s: tokens do not spell the parse's words; no syntactic counts for this sentence", jpath);
    }
    s->corpus = "import";
    s->source = u->src;
    s->text = sentence;
    s->T = T;
    s->tok_text = u->tok_text;
    s->kind = u->kind;
    s->attn = u->a.data;
    (void)explain;
    return AS_OK;
fail:
    return rc;
}

/* Tokens to the W words of the parse: by 'word_ids' when given (T entries, null or a
 * word index), else by spelling; a sentence whose tokens do not spell its words gets a
 * warning and no words. */
static as_status if_align(im_user *u, an_sent *s, json_t *wids, int T, int W, const char *tpath, as_error *err) {
    as_status rc = AS_OK;
    if (wids) {
        for (int t = 0; t < T; t++) {
            json_t *v = json_array_get(wids, (size_t)t);
            if (json_is_null(v)) {
                u->word[t] = -1;
                continue;
            }
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= W)
                IM_FAIL("%s: word_ids[%d] is not null or a word index in [0, %d)", tpath, t, W);
            u->word[t] = (int)json_integer_value(v);
        }
        an_im_set_words(u, s, W);
    } else if (an_im_align_pieces(u->tok_text, u->kind, T, u->form, W, u->word) == 0) {
        an_im_set_words(u, s, W);
    } else {
        as_warn("%s: tokens do not spell the parse's words (give 'word_ids'); no syntactic counts for this sentence",
                tpath);
    }
    return AS_OK;
fail:
    return rc;
}

/* One sentence of `import --attention A --tokens T [--saliency S] [--dependencies D]`. */
static as_status if_produce(void *u_, int idx, int explain, an_sent *s, as_error *err) {
    im_user *u = u_;
    const an_import_files_opts *f = u->f;
    const char *tpath = f->tokens[idx], *apath = f->attention[idx];
    as_status rc;
    (void)explain;
    snprintf(u->src, sizeof u->src, "%s", tpath);
    if ((rc = an_im_load_json(tpath, &u->j, err))) return rc;
    json_t *j = u->j;
    if (!json_is_object(j)) IM_FAIL("%s: expected a JSON object", tpath);
    json_t *toks = json_object_get(j, "tokens"), *text = json_object_get(j, "text");
    if (!text) text = json_object_get(j, "sentence");
    json_t *lab = json_object_get(j, "label"), *pred = json_object_get(j, "prediction");
    if (!pred) pred = json_object_get(j, "predicted_label");
    if (!json_is_array(toks) || json_array_size(toks) == 0) IM_FAIL("%s: field 'tokens' missing or not a non-empty array", tpath);
    const int T = (int)json_array_size(toks);
    if (T > AS_MAX_POSITIONS) IM_FAIL("%s: %d tokens exceed %d", tpath, T, AS_MAX_POSITIONS);
    if (text && !json_is_string(text)) IM_FAIL("%s: field 'text' is not a string", tpath);
    if (lab && !json_is_null(lab) && !(json_is_integer(lab) && json_integer_value(lab) >= 0 && json_integer_value(lab) < AS_MAX_LABELS))
        IM_FAIL("%s: field 'label' is not an integer in [0, %d)", tpath, AS_MAX_LABELS);
    if (pred && !json_is_null(pred) && !(json_is_integer(pred) && json_integer_value(pred) >= 0 && json_integer_value(pred) < AS_MAX_LABELS))
        IM_FAIL("%s: field 'prediction' is not an integer in [0, %d)", tpath, AS_MAX_LABELS);
    if ((rc = an_im_tokens(u, tpath, toks, json_object_get(j, "special_tokens_mask"), err))) return rc;
    if ((rc = an_im_read_attention(u, apath, T, err)) || (rc = an_im_check_values(u, apath, T, err))) return rc;
    s->label = json_is_integer(lab) ? (int)json_integer_value(lab) : -1;
    s->predicted = json_is_integer(pred) ? (int)json_integer_value(pred) : -1;
    if (f->saliency) {
        const char *spath = f->saliency[idx];
        if ((rc = an_im_load_json(spath, &u->jsal, err))) return rc;
        json_t *sal = json_is_object(u->jsal) ? json_object_get(u->jsal, "saliency") : u->jsal;
        if (!sal) IM_FAIL("%s: expected an array or an object with a 'saliency' array", spath);
        if ((rc = an_im_saliency(u, spath, sal, T, s, err))) return rc;
    }
    json_t *words = json_object_get(j, "words"), *wids = json_object_get(j, "word_ids");
    if (words && !json_is_array(words)) IM_FAIL("%s: field 'words' is not an array of strings", tpath);
    if (wids && (!json_is_array(wids) || (int)json_array_size(wids) != T))
        IM_FAIL("%s: field 'word_ids' must be an array of %d entries (null or a word index)", tpath, T);
    int W = -1;
    if (f->dependencies) {
        const char *dpath = f->dependencies[idx];
        size_t dl = strlen(dpath);
        if (dl > 7 && !strcmp(dpath + dl - 7, ".conllu")) {
            if ((rc = cu_read(dpath, 0, &u->cu, err))) return rc;
            if (u->cu.n != 1) IM_FAIL("%s: expected exactly one sentence, found %d", dpath, u->cu.n);
            const cu_sentence *cs = &u->cu.s[0];
            W = cs->n_words;
            if ((rc = an_im_words_alloc(u, T, W, err))) return rc;
            for (int w = 0; w < W; w++) {
                u->form[w] = cs->words[w].form;
                u->parent[w] = cs->words[w].head;
                u->rel[w] = cs->words[w].deprel;
            }
            if (!text) text = json_string(cs->text), json_object_set_new(j, "text", text);
        } else {
            if ((rc = an_im_load_json(dpath, &u->jdep, err))) return rc;
            json_t *deps = json_object_get(u->jdep, "dependencies");
            if ((rc = an_im_deps_json(u, dpath, deps ? deps : u->jdep, T, &W, err))) return rc;
        }
        if (words && (int)json_array_size(words) != W)
            IM_FAIL("%s: %d 'words' but the parse %s has %d", tpath, (int)json_array_size(words), dpath, W);
    } else if (words) {
        /* words without a parse: the alignment is stored, no syntactic counts */
        W = (int)json_array_size(words);
        if (W > T) IM_FAIL("%s: %d words but only %d tokens", tpath, W, T);
        if ((rc = an_im_words_alloc(u, T, W, err))) return rc;
        for (int w = 0; w < W; w++)
            if (!(u->form[w] = (char *)json_string_value(json_array_get(words, (size_t)w))))
                IM_FAIL("%s: words[%d] is not a string", tpath, w);
    }
    if (W >= 0 && (rc = if_align(u, s, wids, T, W, tpath, err))) return rc;
    s->corpus = "import";
    s->source = u->src;
    s->text = text ? json_string_value(text) : "";
    s->T = T;
    s->tok_text = u->tok_text;
    s->kind = u->kind;
    s->attn = u->a.data;
    return AS_OK;
fail:
    return rc;
}

/* Opens the store, begins (or resumes) the import run identified by name, digests
 * and corpus description, and scores every sentence that pf produces. layout goes
 * into the run's parameters ("import" or "import-files"); the run's source is
 * STORE_SOURCE_IMPORT. */
static as_status im_store_run(const char *db_path, const an_opts *o, const char *layout, const char *name,
                              const char *mdig, const char *corpus, const char *cdig, im_user *u, produce_fn pf,
                              as_error *err) {
    char params[256];
    store st = {0};
    an_ctx c;
    memset(&c, 0, sizeof c);
    int chunk = o->chunk > 0 ? o->chunk : AN_DEFAULT_CHUNK;
    int min_rel = o->min_rel > 0 ? o->min_rel : AN_DEFAULT_MIN_REL;
    snprintf(params, sizeof params, "{\"chunk\":%d,\"limit\":%d,\"min_rel\":%d,\"source\":\"%s\"}", chunk,
             o->limit, min_rel, layout);
    run_key k = {.model_name = name, .model_digest = mdig, .arch = "imported", .corpus = corpus, .corpus_digest = cdig,
                 .params = params, .source = STORE_SOURCE_IMPORT, .L = u->L, .H = u->H, .Dh = 0, .n_total = u->n};
    int64_t run;
    int n_done, done;
    as_status rc;
    if ((rc = store_open(db_path, 1, &st, err))) goto cleanup;
    if ((rc = an_run_begin(&st, &k, &run, &n_done, &done, err))) goto cleanup;
    if ((rc = an_ctx_init(&c, &st, run, u->L, u->H, 0, err))) goto cleanup;
    c.chunk = chunk;
    c.explain = 0;
    c.min_rel = min_rel;
    c.progress = o->progress;
    c.threads = o->threads;
    c.n_total = k.n_total;
    rc = an_finish_run(&c, &st, n_done, done, pf, an_im_release, u, o, "import", err);
cleanup:
    an_ctx_free(&c);
    store_close(&st);
    return rc;
}

as_status an_import_dir(const char *db_path, const char *dir, const an_opts *o, as_error *err) {
    as_status rc = AS_OK;
    im_user u;
    memset(&u, 0, sizeof u);
    u.dir = dir;
    struct dirent **list = NULL;
    int n = scandir(dir, &list, an_import_json_wanted, alphasort);
    if (n < 0) return as_err_set(err, AS_ERR_INPUT, "%s: cannot list the folder", dir);
    u.names = as_calloc((size_t)(n ? n : 1), sizeof *u.names);
    for (int i = 0; i < n; i++) {
        if (u.names && (o->limit <= 0 || u.n < o->limit)) {
            char npath[4096], nn[1100];
            snprintf(nn, sizeof nn, "%.*s.attention.npy", (int)(strlen(list[i]->d_name) - 5), list[i]->d_name);
            as_error e2;
            if (!as_path_join(npath, sizeof npath, dir, nn, &e2) && as_file_exists(npath))
                u.names[u.n++] = as_strdup(list[i]->d_name);
        }
        free(list[i]);
    }
    free(list);
    if (!u.names) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (u.n == 0) {
        rc = as_err_set(err, AS_ERR_INPUT, "%s: no NNNN.json + NNNN.attention.npy pairs", dir);
        goto cleanup;
    }
    {
        /* sizes from the first attention file */
        char npath[4096], nn[1100];
        snprintf(nn, sizeof nn, "%.*s.attention.npy", (int)(strlen(u.names[0]) - 5), u.names[0]);
        if ((rc = as_path_join(npath, sizeof npath, dir, nn, err)) || (rc = an_im_sizes(npath, &u, err))) goto cleanup;
    }
    char mdig[65], cdig[65], corpus[1200], name[1200], pd[1100];
    if ((rc = an_digest_dir(dir, an_import_npy_wanted, mdig, err)) || (rc = an_digest_dir(dir, an_import_json_wanted, cdig, err)))
        goto cleanup;
    an_json_escape_path(pd, sizeof pd, dir);
    snprintf(corpus, sizeof corpus, "{\"import\":\"%s\"}", pd);
    snprintf(name, sizeof name, "import:%s", dir);
    rc = im_store_run(db_path, o, "import", name, mdig, corpus, cdig, &u, im_produce, err);
cleanup:
    an_im_release(&u);
    for (int i = 0; i < u.n; i++) free(u.names[i]);
    free(u.names);
    return rc;
}

as_status an_import_files(const char *db_path, const an_import_files_opts *f, const an_opts *o, as_error *err) {
    as_status rc = AS_OK;
    im_user u;
    memset(&u, 0, sizeof u);
    u.f = f;
    u.n = o->limit > 0 && o->limit < f->n ? o->limit : f->n;
    if (u.n <= 0) return as_err_set(err, AS_ERR_INPUT, "give --attention FILE and --tokens FILE");
    if ((rc = an_im_sizes(f->attention[0], &u, err))) return rc;
    char mdig[65], cdig[65], corpus[2600], name[1200], p1[1100];
    sha256_ctx hc;
    sha256_init(&hc);
    if ((rc = an_digest_files(&hc, "attention", f->attention, u.n, err))) return rc;
    sha256_final_hex(&hc, mdig);
    sha256_init(&hc);
    if ((rc = an_digest_files(&hc, "tokens", f->tokens, u.n, err)) ||
        (rc = an_digest_files(&hc, "saliency", f->saliency, u.n, err)) ||
        (rc = an_digest_files(&hc, "dependencies", f->dependencies, u.n, err)))
        return rc;
    sha256_final_hex(&hc, cdig);
    an_json_escape_path(p1, sizeof p1, f->tokens[0]);
    snprintf(corpus, sizeof corpus, "{\"import_files\":%d,\"first_tokens\":\"%s\",\"saliency\":%s,\"dependencies\":%s}",
             u.n, p1, f->saliency ? "true" : "false", f->dependencies ? "true" : "false");
    if (f->model_name) snprintf(name, sizeof name, "%s", f->model_name);
    else snprintf(name, sizeof name, "import:%s", f->attention[0]);
    rc = im_store_run(db_path, o, "import-files", name, mdig, corpus, cdig, &u, if_produce, err);
    an_im_release(&u);
    return rc;
}
