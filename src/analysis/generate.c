/* generate.c — autoregressive generation on the one forward (attnscope/generate.h): for
 * decoder-only models a key/value cache (model_forward_step: the prompt once, then one
 * token per step), for encoder-decoder models the source through the encoder once and a
 * cache of the decoder's (model_s2s_step), else (full_forward, or a RoPE that follows the
 * length) each step a whole as_forward / as_forward_seq2seq of the sequence so far; the
 * next id picked from the last position's logits, and optionally every head's attention
 * row of that position kept. It does not tokenize, print or write files (the CLI's
 * generate command and the server's generate route do).
 */
#include "attnscope/generate.h"
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64 (Steele, Lea and Flood 2014, "Fast splittable pseudorandom number generators") */
static uint64_t gen_splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct {
    float logit;
    int id;
} gen_cand;

/* descending logit, then ascending id */
static int gen_cmp(const void *a, const void *b) {
    const gen_cand *x = a, *y = b;
    return x->logit > y->logit ? -1 : x->logit < y->logit ? 1 : (x->id > y->id) - (x->id < y->id);
}

/* The next id from one row of V logits: argmax at temperature 0, else a draw from the
 * top-k (k <= 0: all) softmax at that temperature; order (V) is scratch. */
static int gen_pick(const float *logits, int V, const gen_opts *o, uint64_t *rng, gen_cand *order) {
    if (o->temperature == 0.0) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        return best;
    }
    int k = o->top_k > 0 && o->top_k < V ? o->top_k : V;
    for (int v = 0; v < V; v++) order[v] = (gen_cand){logits[v], v};
    qsort(order, (size_t)V, sizeof *order, gen_cmp);
    double z = 0.0, mx = order[0].logit;
    for (int i = 0; i < k; i++) z += exp(((double)order[i].logit - mx) / o->temperature);
    double u = (double)(gen_splitmix(rng) >> 11) * 0x1.0p-53 * z, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += exp(((double)order[i].logit - mx) / o->temperature);
        if (u < acc) return order[i].id;
    }
    return order[k - 1].id;
}

int gen_is_eos(const as_config *c, int id) {
    for (int i = 0; i < c->n_eos_ids; i++)
        if (c->eos_ids[i] == id) return 1;
    return 0;
}

/* Hugging Face generate's configured logits processors (logits_process.py), in its order. */

/* NoBadWordsLogitsProcessor (a SequenceBiasLogitsProcessor of -inf): the last id of each
 * bad_words_ids sequence is -inf in row when the sequence's other ids end ids[0..cur)
 * (a single id: always; a sequence longer than cur: never); a sequence that is just an
 * end-of-sequence id is left out, as transformers filters it. */
static void gen_ban_bad_words(const as_config *c, const int32_t *ids, int cur, float *row) {
    for (int w = 0; w < c->n_bad_words; w++) {
        int k = c->bad_word_len[w];
        const int32_t *b = c->bad_words[w];
        if (k == 1 && gen_is_eos(c, b[0])) continue;
        if (k > cur || (k > 1 && memcmp(ids + cur - (k - 1), b, (size_t)(k - 1) * sizeof(int32_t)))) continue;
        row[b[k - 1]] = -INFINITY;
    }
}

/* Only `id` allowed: 0 there, -inf elsewhere (the forced-token processors). */
static void gen_force_row(float *row, int V, int id) {
    for (int v = 0; v < V; v++) row[v] = v == id ? 0.0f : -INFINITY;
}

void gen_process_logits(const as_config *c, const int32_t *ids, int cur, int max_len, float *row) {
    gen_ban_bad_words(c, ids, cur, row);
    if (cur == 1 && c->forced_bos_token_id >= 0) gen_force_row(row, c->vocab_size, c->forced_bos_token_id);
    if (cur == max_len - 1 && c->forced_eos_token_id >= 0) gen_force_row(row, c->vocab_size, c->forced_eos_token_id);
}

/* The step's distribution, softmax of the processed logits row (V): the chosen id's
 * probability into g->probs and, with g->top, the most probable ids (descending, ties by
 * lower id) into g->top_ids / top_probs. Sums in double. */
static void gen_keep_probs(const float *row, int V, int next, gen_result *g) {
    float mx = row[0];
    for (int v = 1; v < V; v++) mx = row[v] > mx ? row[v] : mx;
    double z = 0.0;
    for (int v = 0; v < V; v++) z += exp((double)row[v] - mx);
    g->probs[g->steps] = (float)(exp((double)row[next] - mx) / z);
    int k = g->top < V ? g->top : V, n = 0;
    int32_t *ids = g->top_ids ? g->top_ids + (size_t)g->steps * g->top : NULL;
    float *p = g->top_ids ? g->top_probs + (size_t)g->steps * g->top : NULL;
    for (int v = 0; ids && v < V; v++) { /* insertion into the k best so far */
        if (n == k && !(row[v] > row[ids[k - 1]])) continue;
        int i = n < k ? n++ : k - 1;
        while (i > 0 && row[v] > row[ids[i - 1]]) {
            ids[i] = ids[i - 1];
            i--;
        }
        ids[i] = v;
    }
    for (int i = 0; ids && i < g->top; i++) {
        if (i >= n) { /* a vocabulary smaller than top: the rest -1, probability 0 */
            ids[i] = -1, p[i] = 0.0f;
            continue;
        }
        p[i] = (float)(exp((double)row[ids[i]] - mx) / z);
    }
}

/* Picks the next id from row (the last position's logits), appends it and, when the
 * steps record rows, copies the step's rows of kr keys into g->rows (stride K): layer l's
 * head h's from at + (l H + h) hs. Lowers *cap at an end-of-sequence id with stop_eos. */
static void gen_take(const as_config *c, const gen_opts *o, int K, int max_len, float *row, gen_cand *order,
                     uint64_t *rng, const float *at, int kr, size_t hs, gen_result *g, int *cap) {
    int V = c->vocab_size;
    gen_process_logits(c, g->ids, g->T, max_len, row);
    int next = gen_pick(row, V, o, rng, order);
    if (g->probs) gen_keep_probs(row, V, next, g);
    for (int l = 0; g->rows && l < g->L; l++)
        for (int h = 0; h < g->H; h++)
            memcpy(g->rows + (((size_t)g->steps * g->L + l) * g->H + h) * K, at + ((size_t)l * g->H + h) * hs,
                   (size_t)kr * sizeof(float));
    g->gen[g->steps++] = g->ids[g->T++] = next;
    if (o->stop_eos && gen_is_eos(c, next)) *cap = g->T;
}

/* The steps on caches: the prompt (an encoder-decoder model: the decoder's start ids, its
 * source through the encoder once) in one step, then each new id. The rows kept are the
 * self-attention's of a decoder-only model (keys: every position so far, stride cap) or an
 * encoder-decoder model's cross-attention's (keys: the source's g->K tokens). */
static as_status gen_loop_cached(const as_model *m, const as_encoding *src, const gen_opts *o, int cap, gen_result *g,
                                 float *row, gen_cand *order, as_error *err) {
    const as_config *c = as_model_config(m);
    int max_len = cap, K = src ? g->K : cap;
    uint64_t rng = o->seed;
    model_kv kv = {0};
    model_s2s_kv x = {0};
    model_kv *self = src ? &x.self : &kv; /* the positions through the model so far */
    as_status s = src ? model_s2s_kv_init(m, src, cap, o->threads, &x, err) : model_kv_init(m, cap, &kv, err);
    if (s) return s;
    /* zeroed: a decoder layer without cross-attention leaves its rows 0 */
    float *at = g->rows ? as_calloc(as_mul_size((size_t)g->L * g->H, (size_t)K), sizeof(float)) : NULL;
    if (g->rows && !at) s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    while (!s && g->T < cap) {
        int first = self->n, n = g->T - first; /* the ids not yet through the model */
        s = src ? model_s2s_step(m, &x, g->ids + first, n, o->threads, row, at, err)
                : model_forward_step(m, &kv, g->ids + first, n, o->threads, row, at, err);
        int kr = src ? K : self->n; /* keys of this step's rows */
        if (!s) gen_take(c, o, K, max_len, row, order, &rng, at, kr, (size_t)kr, g, &cap);
    }
    free(at);
    model_kv_free(&kv);
    model_s2s_kv_free(&x);
    return s;
}

/* Runs the steps: g->ids grows from g->T = prompt_len up to cap tokens. Rows are laid
 * out (steps, L, H, K) with K = cap for causal models until the end. */
static as_status gen_loop(const as_model *m, const as_encoding *src, const gen_opts *o, int cap, gen_result *g,
                          as_error *err) {
    const as_config *c = as_model_config(m);
    int V = c->vocab_size, K = src ? g->K : cap, max_len = cap;
    uint64_t rng = o->seed;
    gen_cand *order = as_malloc_array((size_t)V, sizeof *order);
    float *row = as_malloc_array((size_t)V, sizeof *row); /* (V) the last position's processed logits */
    if (!order || !row) {
        free(order);
        free(row);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    as_status s = AS_OK;
    if (!o->full_forward && (src ? model_s2s_kv_supported(m) : model_kv_supported(m))) {
        s = gen_loop_cached(m, src, o, cap, g, row, order, err);
        g->cached = 1;
        cap = g->T; /* done */
    }
    while (!s && g->T < cap) {
        as_encoding enc = {0};
        as_run *r = NULL;
        as_capture_spec spec = {.what = CAP_LOGITS | (g->rows ? CAP_ATTN : 0u), .layer = -1, .head = -1,
                                .threads = o->threads};
        if (!(s = as_encoding_from_ids(m, g->ids, NULL, g->T, &enc, err)) &&
            !(s = src ? as_forward_seq2seq(m, src, &enc, &spec, &r, err) : as_forward(m, &enc, &spec, &r, err))) {
            /* encoder-decoder: the logits are the decoder's, the rows the cross-attention's */
            const as_run *lr = src ? r->dec : r, *ar = src ? r->cross : r;
            int T = g->T, kr = src ? g->K : T;
            memcpy(row, lr->logits + (size_t)(T - 1) * V, (size_t)V * sizeof *row);
            /* the last position's row of every head: rows of (T, kr), heads T kr apart */
            const float *at = g->rows ? as_run_attn(ar, 0, 0) + (size_t)(T - 1) * kr : NULL;
            gen_take(c, o, K, max_len, row, order, &rng, at, kr, (size_t)T * kr, g, &cap);
        }
        as_run_free(r);
        as_encoding_free(&enc);
    }
    free(order);
    free(row);
    return s;
}

as_status gen_generate(const as_model *m, const as_encoding *src, const int32_t *prompt, int n, const gen_opts *o,
                       gen_result *out, as_error *err) {
    memset(out, 0, sizeof *out);
    const as_config *c = as_model_config(m);
    if (!(as_model_heads(m) & HEAD_LM))
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no causal-LM head to generate with", as_model_dir(m));
    int max = as_model_max_tokens(m);
    if (n < 1) return as_err_set(err, AS_ERR_INPUT, "the prompt is empty");
    if (n >= max)
        return as_err_set(err, AS_ERR_INPUT, "the prompt has %d tokens: no room left in the model's %d positions", n,
                          max);
    AS_ASSERT(o->max_new >= 1);
    int cap = o->max_new < max - n ? n + o->max_new : max;
    gen_result *g = out;
    g->prompt_len = g->T = n;
    g->L = c->n_dec_layer ? c->n_dec_layer : c->n_layer;
    g->H = c->n_head;
    g->K = src ? src->n : cap;
    g->ids = as_malloc_array((size_t)cap, sizeof(int32_t));
    g->gen = as_malloc_array((size_t)cap, sizeof(int32_t));
    size_t rows = as_mul_size(as_mul_size((size_t)(cap - n), (size_t)g->L * g->H), (size_t)g->K);
    if (o->rows) g->rows = rows ? as_calloc(rows, sizeof(float)) : NULL;
    AS_ASSERT(o->top >= 0 && o->top <= GEN_MAX_TOP);
    if (o->probs || o->top) g->probs = as_malloc_array((size_t)cap, sizeof(float));
    if ((g->top = o->top)) {
        g->top_ids = as_malloc_array((size_t)cap * o->top, sizeof(int32_t));
        g->top_probs = as_malloc_array((size_t)cap * o->top, sizeof(float));
    }
    if (!g->ids || !g->gen || (o->rows && !g->rows) || ((o->probs || o->top) && !g->probs) || (o->top && (!g->top_ids || !g->top_probs))) {
        gen_result_free(g);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    memcpy(g->ids, prompt, (size_t)n * sizeof(int32_t));
    as_status s = gen_loop(m, src, o, cap, g, err);
    if (s) {
        gen_result_free(g);
        return s;
    }
    if (g->rows && !src && g->T < cap) /* stopped early: rows of the final length */
        for (size_t i = 0; i < (size_t)g->steps * g->L * g->H; i++)
            memmove(g->rows + i * (size_t)g->T, g->rows + i * (size_t)cap, (size_t)g->T * sizeof(float));
    if (!src) g->K = g->T;
    return AS_OK;
}

as_status gen_sequence_rows(const as_model *m, const as_encoding *src, const int32_t *ids, int T, int pl, int threads,
                            float *rows, size_t ld, float *xrows, as_error *err) {
    const as_config *c = as_model_config(m);
    int L = c->n_dec_layer ? c->n_dec_layer : c->n_layer, H = c->n_head, Ts = src ? src->n : 0;
    AS_ASSERT(pl >= 1 && pl <= T && ld >= (size_t)T);
    as_encoding enc = {0};
    as_run *run = NULL;
    as_capture_spec spec = {.what = CAP_ATTN, .layer = -1, .head = -1, .threads = threads};
    as_status s = as_encoding_from_ids(m, ids, NULL, T, &enc, err);
    if (!s) s = src ? as_forward_seq2seq(m, src, &enc, &spec, &run, err) : as_forward(m, &enc, &spec, &run, err);
    for (int st = 0; !s && st < T - pl; st++) {
        size_t p = (size_t)(pl - 1 + st);
        for (int l = 0; l < L; l++)
            for (int h = 0; h < H; h++) {
                size_t at = ((size_t)st * L + l) * H + h;
                const float *sa = as_run_attn(src ? run->dec : run, l, h); /* (T, T) */
                memcpy(rows + at * ld, sa + p * T, (size_t)T * sizeof(float));
                if (src && xrows) /* (T, Ts) */
                    memcpy(xrows + at * Ts, as_run_attn(run->cross, l, h) + p * Ts, (size_t)Ts * sizeof(float));
            }
    }
    as_run_free(run);
    as_encoding_free(&enc);
    return s;
}

void gen_result_free(gen_result *g) {
    if (!g) return;
    free(g->ids);
    free(g->gen);
    free(g->rows);
    free(g->probs);
    free(g->top_ids);
    free(g->top_probs);
    memset(g, 0, sizeof *g);
}
