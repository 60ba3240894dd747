#!/usr/bin/python3
"""gen_ngram.py — an independent Python reference for attnscope's n-gram baseline
(src/train/ngram.c, tested by tests/unit/test_ngram.c).

What it does: draws a seeded token stream (phrases of a small vocabulary repeated with
noise, so n-grams up to order 5 recur) for training and another for testing (with ids
the training stream never has), estimates interpolated modified Kneser-Ney models of
orders 1 to 5 on the training stream with plain dictionaries, straight from the formulas
of Chen & Goodman 1998 (TR-10-98, sec. 3, eq. 26 for the three discounts), and writes
tests/ref/fixtures/ngram/ngram.json: the streams, each order's discounts, summed
negative log-likelihood and perplexity on the test stream, and some single
probabilities.

The model (the same as include/attnscope/ngram.h states):
  p_0(w) = 1 / V; p_k(w | h) = [max(c_k(hw) - D_k(c_k(hw)), 0) + gamma_k(h) p_{k-1}(w | h')]
  / sum_v c_k(hv), or p_{k-1}(w | h') when h has no continuation; c_k = raw counts at the
  top order, continuation counts (distinct left neighbours) below; D_k from the counts of
  counts n1..n4 of order k, a single Ney discount n1 / (n1 + 2 n2) when n3 or n4 is 0,
  0.5 when n1 or n2 is 0, each clamped to [0.01, j]. Token i of the test stream (i >= 1) is predicted from the up to
  order - 1 tokens before it.

What it does not: use any n-gram library (none is installed here); it shares no code
with the C implementation.

Run (deterministic): /usr/bin/python3 tests/ref/gen_ngram.py
"""
import json
import math
import os
import random
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "ngram", "ngram.json")
V = 40          # ids 0..39; training uses 0..34 only
TRAIN_LEN = 4000
TEST_LEN = 600
MIN_DISCOUNT = 0.01


def draw_stream(rng, n, phrases, extra_ids):
    out = []
    while len(out) < n:
        ph = phrases[min(int(rng.paretovariate(1.2)) - 1, len(phrases) - 1)]
        for t in ph:
            r = rng.random()
            if r < 0.08:
                t = rng.randrange(35)
            elif r < 0.08 + extra_ids:
                t = rng.randrange(35, V)
            out.append(t)
    return out[:n]


class KneserNey:
    def __init__(self, stream, order):
        self.order = order
        self.c = {order: Counter(tuple(stream[i - order + 1:i + 1]) for i in range(order - 1, len(stream)))}
        for k in range(order - 1, 0, -1):
            self.c[k] = Counter(g[1:] for g in self.c[k + 1])  # each distinct (k+1)-gram: one left neighbour
        self.D = {}
        self.tot = {}
        self.nj = {}
        for k in range(1, order + 1):
            coc = Counter(self.c[k].values())
            n1, n2, n3, n4 = (coc.get(j, 0) for j in (1, 2, 3, 4))
            if 0 not in (n1, n2, n3, n4):
                y = n1 / (n1 + 2 * n2)
                raw = (1 - 2 * y * n2 / n1, 2 - 3 * y * n3 / n2, 3 - 4 * y * n4 / n3)
            elif n1 > 0 and n2 > 0:
                raw = (n1 / (n1 + 2 * n2),) * 3
            else:
                raw = (0.5, 0.5, 0.5)
            d = tuple(min(max(v, MIN_DISCOUNT), j + 1) for j, v in enumerate(raw))
            self.D[k] = d
            tot, nj = defaultdict(int), defaultdict(lambda: [0, 0, 0])
            for g, cnt in self.c[k].items():
                tot[g[:-1]] += cnt
                nj[g[:-1]][min(cnt, 3) - 1] += 1
            self.tot[k], self.nj[k] = tot, nj

    def prob(self, h, w):
        """p(w | h), h the tuple of preceding tokens (only its last order - 1 are used)."""
        h = tuple(h[len(h) - min(len(h), self.order - 1):])
        return self._p(len(h) + 1, h, w)

    def _p(self, k, h, w):
        if k == 0:
            return 1.0 / V
        lower = self._p(k - 1, h[1:], w)
        total = self.tot[k].get(h, 0)
        if total == 0:
            return lower
        cnt = self.c[k].get(h + (w,), 0)
        d = self.D[k]
        disc = d[min(cnt, 3) - 1] if cnt else 0.0
        gamma = sum(dj * nj for dj, nj in zip(d, self.nj[k][h]))
        return (max(cnt - disc, 0.0) + gamma * lower) / total


def main():
    rng = random.Random(20261201)
    phrases = [[rng.randrange(35) for _ in range(rng.randint(3, 8))] for _ in range(30)]
    train = draw_stream(rng, TRAIN_LEN, phrases, 0.0)
    test = draw_stream(rng, TEST_LEN, phrases, 0.02)
    orders = {}
    probs = []
    for order in range(1, 6):
        lm = KneserNey(train, order)
        nll = 0.0
        for i in range(1, len(test)):
            nll -= math.log(lm.prob(test[max(0, i - order + 1):i], test[i]))
        orders[str(order)] = {"nll_sum": nll, "perplexity": math.exp(nll / (len(test) - 1)),
                              "discounts": [list(lm.D[k]) for k in range(1, order + 1)]}
        for i in (1, 2, 7, 50, 333):
            ctx = test[max(0, i - order + 1):i]
            probs.append({"order": order, "ctx": ctx, "w": test[i], "p": lm.prob(ctx, test[i])})
        for ctx in ([], test[:order - 1], train[10:10 + order - 1]):
            s = sum(lm.prob(ctx, w) for w in range(V))
            assert abs(s - 1.0) < 1e-12, (order, ctx, s)  # the reference sums to 1 as well
        print(f"order {order}: perplexity {orders[str(order)]['perplexity']:.6f}  discounts {lm.D[order]}")
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"generator": "tests/ref/gen_ngram.py", "vocab": V, "train": train, "test": test,
                   "orders": orders, "probs": probs}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
