/* attrib.c — attention rollout, attention flow (Dinic's max-flow), norm-based attention,
 * gradient-weighted attention and head importance on one input (formulas and sources in
 * attrib.h, costs in docs/attribution.md). attr_compute runs the model's one forward
 * (model/encoder.c) and, for the gradient methods, its backward (model/backward.c) on the
 * loaded weights; the formulas take the captured tensors.
 * What it does not: keep the forward's run, or average over inputs.
 */
#include "analysis/attrib.h"
#include "core/pool.h"
#include "model/head_out.h"
#include "model/model.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

const char *attr_method_name(attr_method m) {
    switch (m) {
    case ATTR_ROLLOUT: return "rollout";
    case ATTR_FLOW: return "flow";
    case ATTR_NORM: return "norm";
    case ATTR_GRAD: return "grad";
    case ATTR_IMPORTANCE: return "importance";
    case ATTR_NORM2: return "norm2";
    case ATTR_ALTI: return "alti";
    }
    return "?";
}

int attr_method_parse(const char *s, attr_method *out) {
    static const attr_method all[] = {ATTR_ROLLOUT, ATTR_FLOW, ATTR_NORM, ATTR_GRAD, ATTR_IMPORTANCE, ATTR_NORM2, ATTR_ALTI};
    if (!strcmp(s, "grad-attn")) { /* the spec's name of gradient-weighted attention */
        *out = ATTR_GRAD;
        return 0;
    }
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, attr_method_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return -1;
}

void attr_result_free(attr_result *r) {
    if (!r) return;
    free(r->data);
    memset(r, 0, sizeof *r);
}

/* ---- the formulas on given tensors ------------------------------------------------ */

/* Â (T, T) of layer A_l (H, T, T): 0.5 mean_h A + 0.5 I, rows renormalised to sum 1
 * (Abnar & Zuidema 2020, sec. 3: "we add the identity matrix ... and re-normalize"). */
static void residual_mean(const float *Al, int H, int T, double *Ah) {
    const size_t TT = (size_t)T * T;
    for (size_t e = 0; e < TT; e++) {
        double s = 0.0;
        for (int h = 0; h < H; h++) s += Al[h * TT + e];
        Ah[e] = 0.5 * s / H;
    }
    for (int i = 0; i < T; i++) {
        double *row = Ah + (size_t)i * T, z = 0.0;
        row[i] += 0.5;
        for (int j = 0; j < T; j++) z += row[j];
        for (int j = 0; j < T; j++) row[j] /= z;
    }
}

/* R (T, T) = M R (+ R when add): one dgemm through tmp (T, T). */
static void left_multiply(const double *M, double *R, double *tmp, int T, int add) {
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, T, T, 1.0, M, T, R, T, 0.0, tmp, T);
    const size_t TT = (size_t)T * T;
    for (size_t e = 0; e < TT; e++) R[e] = add ? R[e] + tmp[e] : tmp[e];
}

static void identity(double *R, int T) {
    memset(R, 0, (size_t)T * T * sizeof(double));
    for (int i = 0; i < T; i++) R[(size_t)i * T + i] = 1.0;
}

static void to_float(const double *x, size_t n, float *y) {
    for (size_t e = 0; e < n; e++) y[e] = (float)x[e];
}

/* The rollout of A (L, H, T, T) into R: (T, T) after the last layer, or with every_layer
 * (L, T, T), layer l's the product up to it. */
static as_status rollout(const float *A, int L, int H, int T, int every_layer, float *R, as_error *err) {
    const size_t TT = (size_t)T * T;
    double *Ah = as_malloc_array(3 * TT, sizeof(double));
    if (!Ah) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    double *Rd = Ah + TT, *tmp = Rd + TT;
    identity(Rd, T);
    for (int l = 0; l < L; l++) { /* R = Â_l R: Â_L ... Â_1 after the last layer */
        residual_mean(A + (size_t)l * H * TT, H, T, Ah);
        left_multiply(Ah, Rd, tmp, T, 0);
        if (every_layer) to_float(Rd, TT, R + (size_t)l * TT);
    }
    if (!every_layer) to_float(Rd, TT, R);
    free(Ah);
    return AS_OK;
}

as_status attr_rollout(const float *A, int L, int H, int T, float *R, as_error *err) {
    return rollout(A, L, H, T, 0, R, err);
}

as_status attr_rollout_layers(const float *A, int L, int H, int T, float *R, as_error *err) {
    return rollout(A, L, H, T, 1, R, err);
}

/* Gradient-weighted attention of A and dA into R: (T, T) after the last layer, or with
 * every_layer (L, T, T), layer l's the propagation through layers 0..l. */
static as_status grad_weighted(const float *A, const float *dA, int L, int H, int T, int every_layer, float *R,
                               as_error *err) {
    const size_t TT = (size_t)T * T;
    double *Ab = as_malloc_array(3 * TT, sizeof(double));
    if (!Ab) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    double *Rd = Ab + TT, *tmp = Rd + TT;
    identity(Rd, T);
    for (int l = 0; l < L; l++) {
        const float *a = A + (size_t)l * H * TT, *g = dA + (size_t)l * H * TT;
        for (size_t e = 0; e < TT; e++) { /* Ā = mean_h (dA ⊙ A)^+ (Chefer et al. 2021, eq. 5) */
            double s = 0.0;
            for (int h = 0; h < H; h++) {
                double p = (double)g[h * TT + e] * a[h * TT + e];
                s += p > 0.0 ? p : 0.0;
            }
            Ab[e] = s / H;
        }
        left_multiply(Ab, Rd, tmp, T, 1); /* R = R + Ā R (eq. 6) */
        if (every_layer) to_float(Rd, TT, R + (size_t)l * TT);
    }
    if (!every_layer) to_float(Rd, TT, R);
    free(Ab);
    return AS_OK;
}

as_status attr_grad_weighted(const float *A, const float *dA, int L, int H, int T, float *R, as_error *err) {
    return grad_weighted(A, dA, L, H, T, 0, R, err);
}

as_status attr_grad_weighted_layers(const float *A, const float *dA, int L, int H, int T, float *R, as_error *err) {
    return grad_weighted(A, dA, L, H, T, 1, R, err);
}

void attr_head_importance(const float *A, const float *dA, int L, int H, int T, float *imp) {
    const size_t TT = (size_t)T * T;
    for (size_t lh = 0; lh < (size_t)L * H; lh++) {
        const float *a = A + lh * TT, *g = dA + lh * TT;
        double s = 0.0;
        for (size_t e = 0; e < TT; e++) s += (double)a[e] * g[e];
        imp[lh] = (float)fabs(s); /* |dy/dξ| = |sum_ij A_ij dy/dA_ij| (Michel et al. 2019, eq. 2) */
    }
}

void attr_norm_apply(const float *A, const float *fnorm, int L, int H, int T, float *N) {
    for (size_t lh = 0; lh < (size_t)L * H; lh++) {
        const float *f = fnorm + lh * T;
        for (int i = 0; i < T; i++) {
            const size_t row = (lh * T + i) * T;
            for (int j = 0; j < T; j++) N[row + j] = A[row + j] * f[j]; /* A >= 0: ||A f|| = A ||f|| */
        }
    }
}

/* ---- attention flow: Dinic's algorithm on the dense layered graph ---------------------
 * Nodes (l, x), l = 0..L, id l T + x. Edge e = (l T + i) T + j, l < L, goes (l, j) -> (l + 1, i)
 * with capacity cap[e] = Â_{l+1}[i, j]. Arc k of node (l, x): k < T the edge to (l + 1, k)
 * (residual cap - flow, kept transposed in res so that a node's arcs are contiguous), k >= T
 * the reverse of the edge from (l - 1, k - T) (residual flow). */

#define FLOW_EPS 1e-12 /* residuals at or below this are saturated (capacities are <= 1) */

typedef struct {
    int L, T;
    const double *cap; /* (L, T, T) */
    double *capT;      /* (L, T, T) cap transposed: capT[(l T + j) T + i] = cap[(l T + i) T + j] */
    double *out_cap;   /* (T) capacity out of input node (0, j): a cut */
    double *in_cap;    /* (T) capacity into output node (L, i): a cut */
} flow_graph;

typedef struct {
    double *flow;    /* (L, T, T) like cap */
    double *res;     /* (L, T, T) capT - flow transposed: the forward arcs' residuals */
    int *level;      /* ((L + 1) T) BFS level, -1 unreached or dead (first phase: 1 alive, 0 dead) */
    int *arc;        /* ((L + 1) T) current arc, 0..2T (first phase: 0..T, from the diagonal) */
    int *queue;      /* ((L + 1) T) BFS queue, then the augmenting path (first phase: its tokens) */
    double *row;     /* (T) one row of flow values */
    size_t *touched; /* forward arcs (indices into res) whose residual changed, to reset;
                        overflow = reset all */
    uint64_t *mark;  /* (L T T bits) the arcs in touched */
    size_t n_touched, cap_touched;
    int overflow;
} flow_work;

/* Records forward arc a (an index into res) as changed, once. */
static inline void flow_touch(flow_work *w, size_t a) {
    const uint64_t bit = (uint64_t)1 << (a & 63);
    if (w->mark[a >> 6] & bit) return;
    w->mark[a >> 6] |= bit;
    if (w->n_touched < w->cap_touched) w->touched[w->n_touched++] = a;
    else w->overflow = 1;
}

/* The edge (index into cap / flow) of forward arc a = (l T + x) T + k: (l T + k) T + x. */
static inline size_t flow_edge_of(size_t a, int T) {
    const size_t TT = (size_t)T * T, l = a / TT, x = a / T % T, k = a % T;
    return (l * T + k) * T + x;
}

/* Residual of arc k of node (l, x); *u its head, *e its edge (index into cap / flow),
 * *dir +1 forward / -1 reverse. -1 when the arc does not exist. */
static inline double arc_residual(const flow_graph *g, const flow_work *w, int l, int x, int k, int *u,
                                  size_t *e, int *dir) {
    const int T = g->T;
    if (k < T) {
        if (l == g->L) return -1.0;
        *u = (l + 1) * T + k;
        *e = ((size_t)l * T + k) * T + x;
        *dir = 1;
        return w->res[((size_t)l * T + x) * T + k];
    }
    if (l == 0) return -1.0;
    *u = (l - 1) * T + (k - T);
    *e = ((size_t)(l - 1) * T + x) * T + (k - T);
    *dir = -1;
    return w->flow[*e];
}

/* Levels from s; 1 when t is reached. Nodes at t's level or beyond are not expanded. */
static int flow_bfs(const flow_graph *g, flow_work *w, int s, int t) {
    const int N = (g->L + 1) * g->T, T = g->T, L = g->L;
    for (int v = 0; v < N; v++) w->level[v] = -1;
    int head = 0, tail = 0;
    w->level[s] = 0;
    w->queue[tail++] = s;
    while (head < tail) {
        const int v = w->queue[head++], l = v / T, x = v - l * T, next = w->level[v] + 1;
        if (w->level[t] >= 0 && w->level[v] >= w->level[t]) break;
        if (l < L) { /* forward arcs: contiguous residuals */
            const double *r = w->res + ((size_t)l * T + x) * T;
            int *lv = w->level + (l + 1) * T;
            for (int k = 0; k < T; k++)
                if (r[k] > FLOW_EPS && lv[k] < 0) {
                    lv[k] = next;
                    w->queue[tail++] = (l + 1) * T + k;
                }
        }
        if (l > 0) { /* reverse arcs: the flow into (l, x) from layer l - 1 */
            const double *f = w->flow + ((size_t)(l - 1) * T + x) * T;
            int *lv = w->level + (l - 1) * T;
            for (int k = 0; k < T; k++)
                if (f[k] > FLOW_EPS && lv[k] < 0) {
                    lv[k] = next;
                    w->queue[tail++] = (l - 1) * T + k;
                }
        }
    }
    return w->level[t] >= 0;
}

/* Adds b along the path queue[0..depth] (arcs at each node's current arc). */
static void flow_augment(const flow_graph *g, flow_work *w, int depth, double b) {
    const int T = g->T;
    for (int d = 0; d < depth; d++) {
        const int v = w->queue[d], l = v / T, x = v - l * T;
        int u, dir = 0;
        size_t e = 0;
        arc_residual(g, w, l, x, w->arc[v], &u, &e, &dir);
        w->flow[e] += dir * b;
        const size_t le = e / ((size_t)T * T), i = e / T % T, j = e % T; /* e = (le T + i) T + j */
        flow_touch(w, (le * T + j) * T + i);
        w->res[(le * T + j) * T + i] = g->cap[e] - w->flow[e];
    }
}

/* The next arc of node v = (l, x) from its current arc on (w->arc[v] moves there) whose
 * residual is positive and whose head u (returned; -1 when none is left) is one level
 * further: the forward arcs' residuals and the reverse arcs' flows are contiguous rows. */
static inline int flow_next_arc(const flow_graph *g, flow_work *w, int v, int l, int x) {
    const int T = g->T, want = w->level[v] + 1;
    int k = w->arc[v];
    if (k < T && l < g->L) {
        const double *r = w->res + ((size_t)l * T + x) * T;
        const int *lv = w->level + (l + 1) * T;
        for (; k < T; k++)
            if (lv[k] == want && r[k] > FLOW_EPS) {
                w->arc[v] = k;
                return (l + 1) * T + k;
            }
    }
    if (k < T) k = T;
    if (l > 0) {
        const double *f = w->flow + ((size_t)(l - 1) * T + x) * T;
        const int *lv = w->level + (l - 1) * T;
        for (; k < 2 * T; k++)
            if (lv[k - T] == want && f[k - T] > FLOW_EPS) {
                w->arc[v] = k;
                return (l - 1) * T + k - T;
            }
    }
    w->arc[v] = 2 * T;
    return -1;
}

/* A blocking flow in the level graph (the phases after the first), by advance / retreat
 * with current arcs, or less: it stops once `need` has been sent. */
static double flow_blocking(const flow_graph *g, flow_work *w, int s, int t, double need) {
    const int N = (g->L + 1) * g->T, T = g->T;
    for (int v = 0; v < N; v++) w->arc[v] = 0;
    double total = 0.0;
    int depth = 0;
    w->queue[0] = s;
    for (;;) {
        const int v = w->queue[depth], l = v / T, x = v - l * T;
        int u, dir;
        size_t e;
        if (v == t) {
            double b = INFINITY;
            for (int d = 0; d < depth; d++) {
                const int p = w->queue[d], pl = p / T;
                double r = arc_residual(g, w, pl, p - pl * T, w->arc[p], &u, &e, &dir);
                b = r < b ? r : b;
            }
            flow_augment(g, w, depth, b);
            total += b;
            if (total >= need) break; /* a cut's capacity is reached: no path can add more */
            depth = 0;
            continue;
        }
        if ((u = flow_next_arc(g, w, v, l, x)) >= 0) {
            w->queue[++depth] = u;
            continue;
        }
        if (depth == 0) break;
        w->level[v] = -1; /* a dead end for this phase */
        depth--;
        w->arc[w->queue[depth]]++;
    }
    return total;
}

/* The first phase from input token j to output token i, or less: it stops once `need` has
 * been sent. With no flow yet every shortest path goes forward one layer per arc, so the
 * levels are the layers and a path is one token per layer, px[0] = j .. px[L] = i: a DFS
 * over the forward arcs only (w->level: 1 alive, 0 a dead end; w->arc the current arcs),
 * that after each augmentation retreats to the tail of the path's first saturated arc.
 * Node (l, x) tries its arcs from the diagonal on, x, x + 1, .., x - 1 (mod T): the
 * diagonal's capacity is at least 1/2 (Â's added identity), so paths follow a token and
 * saturate the small arcs at the ends rather than the middle (about 2.6x fewer paths on
 * a random BERT-base than in index order).
 * Updates the residuals alone (an edge's flow is its capacity minus its residual; the
 * caller fills w->flow from them when a later phase needs the reverse arcs). */
static double flow_forward(const flow_graph *g, flow_work *w, int j, int i, double need) {
    const int T = g->T, L = g->L, N = (L + 1) * T;
    int *alive = w->level, *cur = w->arc, *px = w->queue;
    for (int v = 0; v < N; v++) {
        alive[v] = v < L * T || v == L * T + i;
        cur[v] = 0;
    }
    double total = 0.0;
    int d = 0;
    px[0] = j;
    for (;;) {
        if (d == L) { /* px is a path: augment by its bottleneck */
            double b = INFINITY;
            int first = 0;
            for (int k = 0; k < L; k++) {
                const double r = w->res[((size_t)k * T + px[k]) * T + px[k + 1]];
                if (r < b) b = r, first = k;
            }
            for (int k = 0; k < L; k++) {
                const size_t a = ((size_t)k * T + px[k]) * T + px[k + 1]; /* (k, px[k]) -> (k + 1, px[k + 1]) */
                flow_touch(w, a);
                w->res[a] = k == first ? 0.0 : w->res[a] - b;
            }
            total += b;
            if (total >= need) break; /* a cut's capacity is reached: no path can add more */
            d = first;
            continue;
        }
        const int x = px[d], v = d * T + x;
        const double *r = w->res + ((size_t)d * T + x) * T;
        const int *al = alive + (d + 1) * T;
        int c = cur[v], k = 0; /* arc c is to token (x + c) mod T: the diagonal (>= 1/2) first */
        if (d == L - 1) { /* the sink is layer L's only node */
            c = c <= (i - x + T) % T && r[i] > FLOW_EPS ? (i - x + T) % T : T;
            k = i;
        } else {
            for (k = x + c < T ? x + c : x + c - T; c < T; c++, k = k + 1 < T ? k + 1 : 0)
                if (al[k] && r[k] > FLOW_EPS) break;
        }
        cur[v] = c;
        if (c < T) {
            px[++d] = k;
            continue;
        }
        alive[v] = 0;
        if (d == 0) break;
        d--;
    }
    return total;
}

/* Max-flow from input token j to output token i. The first phase's levels are the layers
 * (with no flow yet, every shortest path goes forward one layer per arc), so it needs no
 * BFS; the phases stop once the flow reaches a cut's capacity (all that leaves the source
 * or enters the sink), or no augmenting path is left. */
static double flow_max(const flow_graph *g, flow_work *w, int j, int i) {
    const int T = g->T, L = g->L, s = j, t = L * T + i;
    const double bound = fmin(g->out_cap[j], g->in_cap[i]) - FLOW_EPS;
    const size_t E = (size_t)L * T * T;
    double f = flow_forward(g, w, j, i, bound);
    const int later = f < bound; /* later phases use the reverse arcs: w->flow from the residuals */
    if (later && w->overflow) {
        for (size_t a = 0; a < E; a++) w->flow[flow_edge_of(a, T)] = g->capT[a] - w->res[a];
    } else if (later) {
        for (size_t k = 0; k < w->n_touched; k++) {
            const size_t a = w->touched[k];
            w->flow[flow_edge_of(a, T)] = g->capT[a] - w->res[a];
        }
    }
    while (f < bound && flow_bfs(g, w, s, t)) f += flow_blocking(g, w, s, t, bound - f);
    if (w->overflow) {
        if (later) memset(w->flow, 0, E * sizeof(double));
        memcpy(w->res, g->capT, E * sizeof(double));
        memset(w->mark, 0, (E + 63) / 64 * sizeof(uint64_t));
    } else {
        for (size_t k = 0; k < w->n_touched; k++) {
            const size_t a = w->touched[k];
            w->res[a] = g->capT[a];
            w->mark[a >> 6] &= ~((uint64_t)1 << (a & 63));
            if (later) w->flow[flow_edge_of(a, T)] = 0.0;
        }
    }
    w->n_touched = 0;
    w->overflow = 0;
    return f;
}

static void flow_work_free(flow_work *w) {
    if (!w) return;
    free(w->flow);
    free(w->res);
    free(w->level);
    free(w->arc);
    free(w->queue);
    free(w->row);
    free(w->touched);
    free(w->mark);
}

static int flow_work_init(flow_work *w, const flow_graph *g) {
    memset(w, 0, sizeof *w);
    const int L = g->L, T = g->T;
    const size_t E = (size_t)L * T * T, N = (size_t)(L + 1) * T;
    w->flow = as_calloc(E, sizeof(double));
    w->res = as_malloc_array(E, sizeof(double));
    if (w->res) memcpy(w->res, g->capT, E * sizeof(double));
    w->level = as_malloc_array(N, sizeof(int));
    w->arc = as_malloc_array(N, sizeof(int));
    w->queue = as_malloc_array(N, sizeof(int));
    w->row = as_malloc_array((size_t)T, sizeof(double));
    w->cap_touched = E < 65536 ? E : 65536;
    w->touched = as_malloc_array(w->cap_touched, sizeof(size_t));
    w->mark = as_calloc((E + 63) / 64, sizeof(uint64_t));
    if (w->flow && w->res && w->level && w->arc && w->queue && w->row && w->touched && w->mark) return 0;
    flow_work_free(w);
    return -1;
}

static void flow_graph_free(flow_graph *g) {
    free((void *)g->cap);
    free(g->capT);
    free(g->out_cap);
    free(g->in_cap);
}

/* The capacities of A (L, H, T, T): Â of every layer, transposed, and the cuts around each
 * input and output node. -1 when out of memory (g freed). */
static int flow_graph_init(flow_graph *g, const float *A, int L, int H, int T) {
    const size_t TT = (size_t)T * T;
    double *cap = as_malloc_array((size_t)L * TT, sizeof(double));
    *g = (flow_graph){L, T, cap, as_malloc_array((size_t)L * TT, sizeof(double)), as_calloc((size_t)T, sizeof(double)),
                      as_calloc((size_t)T, sizeof(double))};
    if (!cap || !g->capT || !g->out_cap || !g->in_cap) {
        flow_graph_free(g);
        return -1;
    }
    for (int l = 0; l < L; l++) {
        residual_mean(A + (size_t)l * H * TT, H, T, cap + l * TT);
        for (int i = 0; i < T; i++)
            for (int j = 0; j < T; j++) g->capT[l * TT + (size_t)j * T + i] = cap[l * TT + (size_t)i * T + j];
    }
    for (int i = 0; i < T; i++)
        for (int j = 0; j < T; j++) {
            g->out_cap[j] += cap[(size_t)i * T + j];                    /* (0, j) -> layer 1 */
            g->in_cap[i] += cap[(size_t)(L - 1) * TT + (size_t)i * T + j]; /* layer L - 1 -> (L, i) */
        }
    return 0;
}

double attr_flow_value(const float *A, int L, int H, int T, int j, int i) {
    flow_graph g;
    flow_work w;
    double f = -1.0;
    if (flow_graph_init(&g, A, L, H, T)) return f;
    if (!flow_work_init(&w, &g)) {
        f = flow_max(&g, &w, j, i);
        flow_work_free(&w);
    }
    flow_graph_free(&g);
    return f;
}

typedef struct {
    const flow_graph *g;
    flow_work *w; /* (threads) */
    float *F;     /* (T, T) */
} flow_job;

/* Task i: row i of F, the flows from every input token into output token i, normalised. */
static void flow_row(void *ctx, int i, int tid) {
    flow_job *job = ctx;
    const int T = job->g->T;
    double *row = job->w[tid].row, z = 0.0;
    for (int j = 0; j < T; j++) z += row[j] = flow_max(job->g, &job->w[tid], j, i);
    for (int j = 0; j < T; j++) job->F[(size_t)i * T + j] = z > 0.0 ? (float)(row[j] / z) : 0.0f;
}

as_status attr_flow(const float *A, int L, int H, int T, int threads, float *F, as_error *err) {
    if (T > ATTR_FLOW_MAX_T)
        return as_err_set(err, AS_ERR_INPUT, "attention flow takes at most %d tokens, the input has %d",
                          ATTR_FLOW_MAX_T, T);
    if (threads < 1) threads = 1;
    if (threads > T) threads = T;
    flow_graph g;
    if (flow_graph_init(&g, A, L, H, T)) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    flow_work *w = as_calloc((size_t)threads, sizeof(flow_work));
    int made = 0;
    as_status s = AS_OK;
    if (!w) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    for (; made < threads; made++)
        if (flow_work_init(&w[made], &g)) {
            s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
            goto cleanup;
        }
    flow_job job = {&g, w, F};
    as_parallel_for(T, threads, flow_row, &job);
cleanup:
    for (int k = 0; k < made; k++) flow_work_free(&w[k]);
    free(w);
    flow_graph_free(&g);
    return s;
}

as_status attr_flow_layers(const float *A, int L, int H, int T, int threads, float *F, as_error *err) {
    const size_t TT = (size_t)T * T;
    as_status s = AS_OK;
    /* layer l's graph is the first l + 1 layers of A (a prefix of the (L, H, T, T) array) */
    for (int l = 0; l < L && !s; l++) s = attr_flow(A, l + 1, H, T, threads, F + (size_t)l * TT, err);
    return s;
}

/* ---- attr_compute: the model's forward (and backward) ------------------------------- */

/* 1 for the methods with a (T, T) whole-model map that attr_opts.layers gives per layer. */
static int has_layers(attr_method m) { return m == ATTR_ROLLOUT || m == ATTR_FLOW || m == ATTR_GRAD; }

/* Checks what does not need a forward; *grad = 1 for the gradient methods. */
static as_status check_request(const as_model *m, const as_encoding *enc, const attr_opts *o, int *grad,
                               as_error *err) {
    if (!enc || enc->n <= 0 || !enc->ids) return as_err_set(err, AS_ERR_INPUT, "empty input: no tokens");
    if ((unsigned)o->method > ATTR_ALTI)
        return as_err_set(err, AS_ERR_INPUT, "unknown attribution method %d", (int)o->method);
    *grad = o->method == ATTR_GRAD || o->method == ATTR_IMPORTANCE;
    if (!*grad && (o->target != -1 || o->position != -1))
        return as_err_set(err, AS_ERR_INPUT, "%s explains no prediction: target and position do not apply",
                          attr_method_name(o->method));
    if (o->layers && !has_layers(o->method))
        return as_err_set(err, AS_ERR_INPUT, "%s: every layer's result (layers) is an option of rollout, flow and grad",
                          attr_method_name(o->method));
    if (o->method == ATTR_FLOW && enc->n > ATTR_FLOW_MAX_T)
        return as_err_set(err, AS_ERR_INPUT, "attention flow takes at most %d tokens, the input has %d",
                          ATTR_FLOW_MAX_T, enc->n);
    if (*grad && !(as_model_heads(m) & (HEAD_CLASSIFIER | HEAD_MLM | HEAD_LM)))
        return as_err_set(err, AS_ERR_INPUT, "%s: the model has no task head whose logit %s could explain",
                          as_model_dir(m), attr_method_name(o->method));
    if (o->target < -1 || o->position < -1)
        return as_err_set(err, AS_ERR_INPUT, "target %d / position %d: expected -1 or an index", o->target,
                          o->position);
    return AS_OK;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

static int last_real_token(const as_encoding *enc) {
    for (int t = enc->n - 1; t >= 0; t--)
        if (!enc->mask || enc->mask[t]) return t;
    return enc->n - 1;
}

as_status attr_relevance(const as_model *m, const as_encoding *enc, const attr_result *r, float *rel,
                         as_error *err) {
    const int T = r->T;
    if (r->method == ATTR_IMPORTANCE || T != enc->n)
        return as_err_set(err, AS_ERR_INPUT, "%s has no per-token relevance", attr_method_name(r->method));
    int pos = r->position;
    if (pos < 0) /* the token a classifier's head reads, else the last real token (LM / MLM) */
        pos = (m->heads & HEAD_CLASSIFIER) && !m->cls_last_token ? 0 : last_real_token(enc);
    const float *row;
    if (r->ndim == 4) { /* norm (L, H, T, T): layer L - 1, summed over heads */
        for (int j = 0; j < T; j++) rel[j] = 0.0f;
        for (int h = 0; h < r->H; h++) {
            row = r->data + (((size_t)(r->L - 1) * r->H + h) * T + pos) * T;
            for (int j = 0; j < T; j++) rel[j] += row[j];
        }
    } else { /* (L, T, T): the last layer's (cumulative for alti), or (T, T) */
        row = r->data + ((r->ndim == 3 ? (size_t)(r->L - 1) * T : 0) + pos) * T;
        memcpy(rel, row, (size_t)T * sizeof(float));
    }
    return AS_OK;
}

/* Picks the logit to explain from r's logits: out->target, out->position, out->logit, and
 * dl (logits-shaped) one-hot there. Errors: target / position out of range. */
static as_status pick_logit(const as_model *m, const as_encoding *enc, const attr_opts *o, const as_run *r,
                            attr_result *out, float *dl, as_error *err) {
    const int rows = r->logits_rows, cols = r->logits_cols, T = enc->n;
    int pos;
    if (rows == 1) { /* a sequence classifier: the row is the token its head reads */
        if (o->position != -1)
            return as_err_set(err, AS_ERR_INPUT, "position %d: a sequence classifier explains the whole input; "
                              "position applies to LM / masked-LM heads", o->position);
        pos = m->cls_last_token ? last_real_token(enc) : 0;
    } else {
        pos = o->position == -1 ? last_real_token(enc) : o->position;
        if (pos >= T) return as_err_set(err, AS_ERR_INPUT, "position %d out of range [0, %d)", pos, T);
    }
    const float *lg = r->logits + (size_t)(rows == 1 ? 0 : pos) * cols;
    int target = o->target == -1 ? argmax(lg, cols) : o->target;
    if (target >= cols)
        return as_err_set(err, AS_ERR_INPUT, "target %d out of range [0, %d) (%s)", target, cols,
                          rows == 1 ? "classes" : "vocabulary");
    dl[(size_t)(rows == 1 ? 0 : pos) * cols + target] = 1.0f;
    out->target = target;
    out->position = pos;
    out->logit = lg[target];
    return AS_OK;
}

/* grad / importance: the forward with a tape, the backward of one logit to the attention. */
static as_status compute_grad(const as_model *m, const as_encoding *enc, const attr_opts *o, attr_result *out,
                              as_error *err) {
    const as_config *c = as_model_config(m);
    const int L = c->n_layer, H = c->n_head, T = enc->n;
    const size_t n = (size_t)L * H * T * T;
    model_tape tp = {0};
    as_run *r = NULL;
    float *dl = NULL, *dA = as_malloc_array(n, sizeof(float));
    as_capture_spec spec = {.what = CAP_ATTN | CAP_LOGITS, .layer = -1, .head = -1, .threads = o->threads};
    as_status s = dA ? model_tape_init(m, T, &tp, err) : as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (s || (s = model_forward(m, enc, &spec, NULL, &tp, &r, err))) goto cleanup;
    if (!r->logits) {
        s = as_err_set(err, AS_ERR_INPUT, "%s: the model computed no logits to explain", as_model_dir(m));
        goto cleanup;
    }
    if (!(dl = as_calloc((size_t)r->logits_rows * r->logits_cols, sizeof(float)))) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        goto cleanup;
    }
    if ((s = pick_logit(m, enc, o, r, out, dl, err))) goto cleanup;
    if ((s = model_backward(m, enc, NULL, &tp, r, dl, o->threads, NULL, dA, err))) goto cleanup;
    if (o->method == ATTR_GRAD) s = grad_weighted(r->attn, dA, L, H, T, o->layers, out->data, err);
    else attr_head_importance(r->attn, dA, L, H, T, out->data);
cleanup:
    as_run_free(r);
    model_tape_free(&tp);
    free(dl);
    free(dA);
    return s;
}

/* fnorm (L, H, T) = ||v_lh[j] W_o^h|| from the run's v (Kobayashi et al. 2020, eq. 6),
 * through the head's Gram matrix G = W_o^h W_o^h^T (Dh, Dh): ||v W||^2 = v G v^T, so a
 * head costs Dh^2 D (G, one ssyrk) + T Dh^2 (v G) multiply-adds rather than the T Dh D of
 * forming every f(x_j) = v_j W_o^h (3x fewer at BERT-base, T = 128; F32 weights read in
 * place, model_head_out_gram). The quadratic form
 * is summed in double; G and v G are F32 (measured against the direct norms in
 * tests/unit/test_attrib.c's references: well within their 1e-4 relative). */
static as_status value_norms(const as_model *m, const as_run *r, float *fnorm, as_error *err) {
    const int L = r->L, H = r->H, T = r->T, Dh = r->Dh, D = r->D;
    float *wo = as_malloc_array((size_t)Dh * D, sizeof(float)), *G = as_malloc_array((size_t)Dh * Dh, sizeof(float));
    float *vg = as_malloc_array((size_t)T * Dh, sizeof(float));
    if (!wo || !G || !vg) {
        free(wo);
        free(G);
        free(vg);
        return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    }
    for (int l = 0; l < L; l++)
        for (int h = 0; h < H; h++) {
            const float *v = as_run_v(r, l, h); /* (T, Dh) */
            model_head_out_gram(m, l, h, wo, G);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, Dh, Dh, 1.0f, v, Dh, G, Dh, 0.0f, vg, Dh);
            for (int j = 0; j < T; j++) {
                double s = 0.0;
                for (int d = 0; d < Dh; d++) s += (double)vg[(size_t)j * Dh + d] * v[(size_t)j * Dh + d];
                fnorm[((size_t)l * H + h) * T + j] = (float)sqrt(s > 0.0 ? s : 0.0);
            }
        }
    free(wo);
    free(G);
    free(vg);
    return AS_OK;
}

/* 1 for the methods that read the hidden states (the block's residual). */
static int needs_hidden(attr_method m) { return m == ATTR_NORM2 || m == ATTR_ALTI; }

/* rollout / flow / norm / norm2 / alti of run r, which holds every layer's and head's
 * attention (and v for norm, v and the hidden states for norm2 and alti), into out (sized). */
static as_status from_run(const as_model *m, const as_run *r, const attr_opts *o, attr_result *out, as_error *err) {
    const int L = out->L, H = out->H, T = out->T, threads = o->threads > 0 ? o->threads : as_n_cores();
    float *fnorm = NULL;
    as_status s = AS_OK;
    if (o->method == ATTR_ROLLOUT) {
        s = rollout(r->attn, L, H, T, o->layers, out->data, err);
    } else if (o->method == ATTR_FLOW) {
        s = (o->layers ? attr_flow_layers : attr_flow)(r->attn, L, H, T, threads, out->data, err);
    } else if (o->method == ATTR_NORM2) {
        s = attr_mixing(m, r, threads, out->data, NULL, err);
    } else if (o->method == ATTR_ALTI) {
        if (!(s = attr_mixing(m, r, threads, NULL, out->data, err))) s = attr_alti_aggregate(out->data, L, T, err);
    } else if (!(fnorm = as_malloc_array((size_t)L * H * T, sizeof(float)))) {
        s = as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    } else if (!(s = value_norms(m, r, fnorm, err))) {
        attr_norm_apply(r->attn, fnorm, L, H, T, out->data);
    }
    free(fnorm);
    return s;
}

/* rollout / flow / norm / norm2 / alti: one forward capturing the attention (and v, and
 * the hidden states, as the method needs). */
static as_status compute_plain(const as_model *m, const as_encoding *enc, const attr_opts *o, attr_result *out,
                               as_error *err) {
    unsigned what = CAP_ATTN;
    if (o->method == ATTR_NORM || needs_hidden(o->method)) what |= CAP_QKV;
    if (needs_hidden(o->method)) what |= CAP_HIDDEN;
    as_capture_spec spec = {.what = what, .layer = -1, .head = -1, .threads = o->threads};
    as_run *r = NULL;
    as_status s = as_forward(m, enc, &spec, &r, err);
    if (!s) s = from_run(m, r, o, out, err);
    as_run_free(r);
    return s;
}

/* *out with o's method, sizes, shape and zeroed data for T tokens of m. */
static as_status result_init(const as_model *m, const attr_opts *o, int T, attr_result *out, as_error *err) {
    const attr_method method = o->method;
    const as_config *c = as_model_config(m);
    const int L = c->n_layer, H = c->n_head;
    *out = (attr_result){.method = method, .T = T, .L = L, .H = H, .target = -1, .position = -1};
    if (method == ATTR_NORM) {
        out->ndim = 4;
        out->shape[0] = L, out->shape[1] = H, out->shape[2] = T, out->shape[3] = T;
    } else if (method == ATTR_IMPORTANCE) {
        out->ndim = 2;
        out->shape[0] = L, out->shape[1] = H;
    } else if (needs_hidden(method) || (has_layers(method) && o->layers)) {
        out->ndim = 3;
        out->shape[0] = L, out->shape[1] = T, out->shape[2] = T;
    } else {
        out->ndim = 2;
        out->shape[0] = T, out->shape[1] = T;
    }
    size_t n = 1;
    for (int d = 0; d < out->ndim; d++) n = as_mul_size(n, (size_t)out->shape[d]);
    if (!n || !(out->data = as_calloc(n, sizeof(float)))) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    return AS_OK;
}

as_status attr_compute(const as_model *m, const as_encoding *enc, const attr_opts *o, attr_result *out,
                       as_error *err) {
    memset(out, 0, sizeof *out);
    int grad = 0;
    as_status s = check_request(m, enc, o, &grad, err);
    if (s || (s = result_init(m, o, enc->n, out, err))) return s;
    s = grad ? compute_grad(m, enc, o, out, err) : compute_plain(m, enc, o, out, err);
    if (s) attr_result_free(out);
    return s;
}

as_status attr_compute_run(const as_model *m, const as_encoding *enc, const as_run *r, const attr_opts *o,
                           attr_result *out, as_error *err) {
    memset(out, 0, sizeof *out);
    int grad = 0;
    as_status s = check_request(m, enc, o, &grad, err);
    if (s) return s;
    const as_config *c = as_model_config(m);
    if (grad || (needs_hidden(o->method) && (!r->hidden || !r->v || r->n_run < r->L)))
        return attr_compute(m, enc, o, out, err);
    if (r->T != enc->n || r->L != c->n_layer || r->H != c->n_head || !r->attn || r->layer_lo != 0 ||
        r->n_lay != r->L || r->head_lo != 0 || r->n_hd != r->H || (o->method == ATTR_NORM && !r->v))
        return as_err_set(err, AS_ERR_INPUT, "%s needs a run of this input with every layer's and head's attention%s",
                          attr_method_name(o->method), o->method == ATTR_NORM ? " and values" : "");
    if ((s = result_init(m, o, enc->n, out, err))) return s;
    if ((s = from_run(m, r, o, out, err))) attr_result_free(out);
    return s;
}
