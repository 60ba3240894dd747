"""gen_faith.py — NumPy reference for the faithfulness metrics (src/analysis/faith.c,
include/attnscope/faith.h; docs/attribution.md, "Faithfulness").

Writes tests/ref/fixtures/faith/expected.json with
  tables:  random deletion / insertion curves (n + 1 probabilities, ins[0] = del[n],
           ins[n] = del[0]) for several n and their AOPC deletion / insertion (Samek et al.
           2017, eq. 12), ERASER comprehensiveness / sufficiency per bin and averaged over
           the bins B = {1, 5, 10, 20, 50} % with n_b = ceil(b n / 100) tokens (DeYoung et
           al. 2020, sec. 4.2; eraserbenchmark metrics.py averages over the bins);
  ranks:   relevance vectors with ties and NaN and a removable mask, and the order
           (highest first, ties to the earlier position, NaN last);
  additive: a constructed classifier p(keep) = sigmoid(b + sum_t w_t keep_t) over T tokens
           (tokens 0 and T - 1 not removable, like [CLS] / [SEP]), its leave-one-out
           relevance p(x) - p(x without t), that order's curves and scores, and the mean
           AOPC deletion / comprehensiveness of all orders' expectation estimated by 20000
           random permutations (the random baseline's expected value).
tests/unit/test_faith.c compares faith_score, faith_rank and faith_curves with it (1e-6).
Run: /usr/bin/python3 tests/ref/gen_faith.py (deterministic; numpy only).
"""
import json, math, os
import numpy as np

ROOT = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(ROOT, "fixtures", "faith")
BINS = [1, 5, 10, 20, 50]


def bin_tokens(n, pct):
    return int(math.ceil(pct * n / 100.0))


def scores(dl, ins):
    n = len(dl) - 1
    aopc_del = float(np.mean(dl[0] - dl))
    aopc_ins = float(np.mean(ins - ins[0]))
    comp_bins = [float(dl[0] - dl[bin_tokens(n, b)]) for b in BINS]
    suff_bins = [float(dl[0] - ins[bin_tokens(n, b)]) for b in BINS]
    return {"aopc_del": aopc_del, "aopc_ins": aopc_ins, "comp": float(np.mean(comp_bins)),
            "suff": float(np.mean(suff_bins)), "comp_bins": comp_bins, "suff_bins": suff_bins}


def rank(rel, removable):
    pos = [t for t in range(len(rel)) if removable[t]]
    # highest first; ties keep the earlier position; NaN last (in position order)
    key = [(1 if math.isnan(rel[t]) else 0, 0.0 if math.isnan(rel[t]) else -rel[t], t) for t in pos]
    return [k[2] for k in sorted(key)]


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def additive_case(rng):
    T = 14
    w = rng.normal(0.0, 1.2, T)
    w[0] = w[-1] = 0.0
    b = 0.3
    removable = [0] + [1] * (T - 2) + [0]

    def p(keep):
        return sigmoid(b + float(np.dot(w, keep)))

    full = np.ones(T)
    loo = []
    for t in range(T):
        k = full.copy()
        k[t] = 0
        loo.append(p(full) - p(k) if removable[t] else 0.0)
    order = rank(loo, removable)
    n = len(order)

    def curves(order):
        dl, ins = [], []
        for k in range(n + 1):
            keep = np.ones(T)
            keep[order[:k]] = 0
            dl.append(p(keep))
            keep = np.array([0.0 if removable[t] else 1.0 for t in range(T)])
            keep[order[:k]] = 1
            ins.append(p(keep))
        return np.array(dl), np.array(ins)

    dl, ins = curves(order)
    pos = [t for t in range(T) if removable[t]]
    rnd = [scores(*curves(list(rng.permutation(pos)))) for _ in range(20000)]
    return {"T": T, "w": w.tolist(), "b": b, "removable": removable, "loo": loo, "order": order,
            "del": dl.tolist(), "ins": ins.tolist(), "scores": scores(dl, ins),
            "random_aopc_del": float(np.mean([r["aopc_del"] for r in rnd])),
            "random_comp": float(np.mean([r["comp"] for r in rnd]))}


def main():
    rng = np.random.default_rng(20250)
    tables = []
    for n in [1, 2, 3, 7, 20, 57, 128]:
        dl = rng.uniform(0.0, 1.0, n + 1)
        ins = rng.uniform(0.0, 1.0, n + 1)
        ins[0], ins[n] = dl[n], dl[0]
        tables.append({"n": n, "del": dl.tolist(), "ins": ins.tolist(), "scores": scores(dl, ins),
                       "bin_tokens": [bin_tokens(n, b) for b in BINS]})
    ranks = []
    for T in [1, 5, 12, 40]:
        rel = rng.integers(-3, 4, T).astype(float) / 2.0  # many ties
        if T > 4:
            rel[2] = float("nan")
            rel[4] = float("nan")
        removable = (rng.uniform(0, 1, T) > 0.2).astype(int).tolist()
        if T > 1:
            removable[0] = 0
        ranks.append({"T": T, "rel": [None if math.isnan(x) else x for x in rel], "removable": removable,
                      "order": rank(list(rel), removable)})
    out = {"bins": BINS, "tables": tables, "ranks": ranks, "additive": additive_case(rng)}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(out, f, indent=0)
        f.write("\n")


if __name__ == "__main__":
    main()
