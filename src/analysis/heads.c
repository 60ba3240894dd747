/* heads.c — per-sentence head scores (see heads.h for the definitions and sources).
 * Pure functions over float arrays: no I/O, no allocation except hd_concentration's
 * small stack buffer bound (Dh <= AS_MAX_DMODEL is checked by the caller's model).
 */
#include "analysis/heads.h"

#include <math.h>
#include <string.h>
#include <utf8proc.h>

const int HD_OFFSETS[HD_N_OFFSETS] = {-3, -2, -1, 1, 2};

static int real(const uint8_t *kind, int i) { return !kind || kind[i] != HK_PAD; }

/* Dodrio (Wang et al. 2021), sec. 3.2 "attention head importance": the confidence of a
 * head on a sentence is the maximum attention weight of the whole matrix. */
double hd_importance(const float *A, int T, const uint8_t *kind) {
    double mx = 0.0;
    for (int i = 0; i < T; i++) {
        if (!real(kind, i)) continue;
        for (int j = 0; j < T; j++)
            if (real(kind, j) && A[(size_t)i * T + j] > mx) mx = A[(size_t)i * T + j];
    }
    return mx;
}

/* Dodrio (Wang et al. 2021), sec. 3.2 "semantic score": cosine similarity between the
 * saliency of the predicted class per token and the attention each token receives,
 * r_j = sum_i A[i,j]. */
double hd_semantic(const float *A, int T, const uint8_t *kind, const float *sal) {
    double dot = 0.0, nr = 0.0, ns = 0.0;
    for (int j = 0; j < T; j++) {
        if (!real(kind, j)) continue;
        double r = 0.0;
        for (int i = 0; i < T; i++)
            if (real(kind, i)) r += A[(size_t)i * T + j];
        dot += r * sal[j];
        nr += r * r;
        ns += (double)sal[j] * sal[j];
    }
    if (nr <= 0.0 || ns <= 0.0) return 0.0;
    return dot / (sqrt(nr) * sqrt(ns));
}

/* Clark et al. 2019, sec. 3 ("Surface-level patterns in attention": relative position,
 * attending to separator tokens, focused vs broad attention = entropy, Fig. 1-4). */
void hd_stats_compute(const float *A, int T, const uint8_t *kind, hd_stats *out) {
    memset(out, 0, sizeof *out);
    int n = 0;
    for (int i = 0; i < T; i++) n += real(kind, i);
    out->n_rows = n;
    if (n == 0) return;
    double lnn = n >= 2 ? log((double)n) : 0.0;
    int n_prev = 0, n_next = 0;
    for (int i = 0; i < T; i++) {
        if (!real(kind, i)) continue;
        const float *row = A + (size_t)i * T;
        double c = 0.0, s = 0.0, p = 0.0, h = 0.0;
        for (int j = 0; j < T; j++) {
            if (!real(kind, j)) continue;
            double a = row[j];
            if (kind[j] == HK_CLS) c += a;
            else if (kind[j] == HK_SEP) s += a;
            else if (kind[j] == HK_PUNCT) p += a;
            if (a > 0.0) h -= a * log(a);
        }
        out->cls += c;
        out->sep += s;
        out->punct += p;
        out->self += row[i];
        out->entropy += h;
        if (lnn > 0.0) out->entropy_norm += h / lnn;
        if (i > 0 && real(kind, i - 1)) {
            out->prev += row[i - 1];
            if (real(kind, 0)) out->first += row[0];
            n_prev++;
        }
        if (i + 1 < T && real(kind, i + 1)) {
            out->next += row[i + 1];
            n_next++;
        }
    }
    out->cls /= n;
    out->sep /= n;
    out->punct /= n;
    out->self /= n;
    out->entropy /= n;
    out->entropy_norm /= n;
    out->prev = n_prev ? out->prev / n_prev : 0.0;
    out->first = n_prev ? out->first / n_prev : 0.0;
    out->next = n_next ? out->next / n_next : 0.0;
}

/* Jensen-Shannon divergence (Lin 1991), base 2; Clark et al. 2019 sec. 6 use it as the
 * distance between heads' attention distributions. */
double hd_jsd(const float *p, const float *q, int n) {
    double hm = 0.0, hp = 0.0, hq = 0.0;
    for (int j = 0; j < n; j++) {
        double a = p[j] > 0.0f ? p[j] : 0.0, b = q[j] > 0.0f ? q[j] : 0.0, m = 0.5 * (a + b);
        if (a > 0.0) hp -= a * log2(a);
        if (b > 0.0) hq -= b * log2(b);
        if (m > 0.0) hm -= m * log2(m);
    }
    double d = hm - 0.5 * (hp + hq);
    return d < 0.0 ? 0.0 : d;
}

/* Clark et al. 2019, sec. 4.1: "to convert token-token attention maps to word-word
 * attention maps ... for attention *to* a split-up word, we sum up the attention weights
 * over its tokens. For attention *from* a split-up word, we take the mean of the
 * attention weights over its tokens." */
void hd_word_attention(const float *A, int T, const int *word, int W, float *Wm) {
    memset(Wm, 0, (size_t)W * W * sizeof *Wm);
    int *cnt = as_calloc((size_t)(W > 0 ? W : 1), sizeof *cnt);
    ASSERT(cnt);
    for (int i = 0; i < T; i++)
        if (word[i] >= 0) cnt[word[i]]++;
    for (int i = 0; i < T; i++) {
        int a = word[i];
        if (a < 0) continue;
        for (int j = 0; j < T; j++) {
            int b = word[j];
            if (b < 0) continue;
            Wm[(size_t)a * W + b] += A[(size_t)i * T + j];
        }
    }
    for (int a = 0; a < W; a++)
        if (cnt[a] > 1)
            for (int b = 0; b < W; b++) Wm[(size_t)a * W + b] /= (float)cnt[a];
    free(cnt);
}

int hd_word_argmax(const float *Wm, int W, int a, const uint8_t *has_piece) {
    int best = -1;
    float bv = 0.0f;
    for (int b = 0; b < W; b++) {
        if (b == a || !has_piece[b]) continue;
        float v = Wm[(size_t)a * W + b];
        if (best < 0 || v > bv) {
            best = b;
            bv = v;
        }
    }
    return best;
}

/* Concentration of a dominant link (docs/analysis.md, "Why: concentration"): the
 * number of head dimensions d, taken by decreasing |q_d k_d|, whose signed sum first
 * reaches 90% of q.k. */
int hd_concentration(const float *q, const float *k, int Dh) {
    enum { MAXD = 1024 };
    if (Dh <= 0 || Dh > MAXD) return 0;
    double c[MAXD], tot = 0.0;
    for (int d = 0; d < Dh; d++) {
        c[d] = (double)q[d] * k[d];
        tot += c[d];
    }
    if (tot <= 0.0) return 0;
    /* insertion sort by |c| descending (Dh is small: 64 in BERT-base) */
    for (int a = 1; a < Dh; a++) {
        double v = c[a];
        int b = a - 1;
        while (b >= 0 && fabs(c[b]) < fabs(v)) {
            c[b + 1] = c[b];
            b--;
        }
        c[b + 1] = v;
    }
    double part = 0.0;
    for (int d = 0; d < Dh; d++) {
        part += c[d];
        if (part >= 0.9 * tot) return d + 1;
    }
    return Dh;
}

const char *hd_pattern_name(hd_pattern p) {
    switch (p) {
    case HP_NEXT: return "next-word";
    case HP_PREV: return "previous-word";
    case HP_SELF: return "self";
    case HP_DELIM: return "delimiter-focused";
    case HP_BROAD: return "broad";
    case HP_INDUCTION: return "induction";
    case HP_SINK: return "sink";
    default: return "other";
    }
}

/* Positional, delimiter and broad labels: Clark et al. 2019 sec. 3. Induction heads:
 * Olsson et al. 2022 (prefix matching on repeated random tokens). Sinks: Xiao et al. 2024
 * ("Efficient Streaming Language Models with Attention Sinks", sec. 3.1: the initial
 * token collects a large share of the attention from the second layer on). */
hd_pattern hd_label(const hd_stats *s, int layer, double induction, double *confidence) {
    const int probed = !isnan(induction);
    double delim = s->cls + s->sep + s->punct;
    /* scores indexed by hd_pattern; 0 for labels that do not apply */
    double sc[HP_N] = {0}, th[HP_N] = {0};
    sc[HP_NEXT] = s->next, sc[HP_PREV] = s->prev, sc[HP_SELF] = s->self;
    sc[HP_DELIM] = probed ? s->sep + s->punct : delim;
    sc[HP_BROAD] = s->entropy_norm * (1.0 - delim);
    th[HP_NEXT] = th[HP_PREV] = th[HP_SELF] = HD_PAT_POS_MIN;
    th[HP_DELIM] = HD_PAT_DELIM_MIN;
    th[HP_BROAD] = HD_PAT_BROAD_MIN;
    if (probed) {
        sc[HP_INDUCTION] = induction;
        th[HP_INDUCTION] = HD_PAT_INDUCTION_MIN;
        sc[HP_SINK] = layer >= HD_PAT_SINK_MIN_LAYER ? s->first : 0.0;
        th[HP_SINK] = HD_PAT_SINK_MIN;
    }
    int best = -1;
    /* induction beats the positional and delimiter labels; against a sink (an induction
       head can rest on BOS where nothing repeats) the higher score wins */
    int sink_wins = sc[HP_SINK] >= th[HP_SINK] && sc[HP_SINK] > sc[HP_INDUCTION];
    if (probed && sc[HP_INDUCTION] >= th[HP_INDUCTION] && !sink_wins) best = HP_INDUCTION;
    /* the positional, delimiter and sink labels compete on their score; broad only when none holds */
    static const hd_pattern compete[] = {HP_NEXT, HP_PREV, HP_SELF, HP_DELIM, HP_SINK};
    for (int k = 0; best != HP_INDUCTION && k < 5; k++) {
        hd_pattern p = compete[k];
        if (th[p] > 0 && sc[p] >= th[p] && (best < 0 || sc[p] > sc[best])) best = p;
    }
    if (best < 0 && sc[HP_BROAD] >= th[HP_BROAD]) best = HP_BROAD;
    if (best >= 0) {
        *confidence = sc[best] > 1.0 ? 1.0 : sc[best];
        return (hd_pattern)best;
    }
    double mx = 0.0;
    for (int p = 0; p < HP_N; p++)
        if (th[p] > 0 && sc[p] / th[p] > mx) mx = sc[p] / th[p];
    *confidence = mx >= 1.0 ? 0.0 : 1.0 - mx;
    return HP_OTHER;
}

int hd_is_punct(const char *text) {
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)text;
    if (p[0] == '#' && p[1] == '#' && p[2]) p += 2;
    while (*p == ' ') p++;
    int n = 0;
    while (*p) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t k = utf8proc_iterate(p, -1, &cp);
        if (k <= 0) return 0;
        p += k;
        if (cp == ' ' && !*p) break;
        utf8proc_category_t c = utf8proc_category(cp);
        if (c < UTF8PROC_CATEGORY_PC || c > UTF8PROC_CATEGORY_PO) return 0;
        n++;
    }
    return n > 0;
}
