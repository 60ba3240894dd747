"""align_ref.py — the NumPy reference of `attnscope align` that test_align.sh and
test_align_marian.sh check it against: each token's word, the word-level alignment a head
gives (a target word's row of word-pooled cross-attention, argmax over the source words) and
the alignment error rate against sure ("a-b") and possible ("a?b") gold links (Och & Ney
2003). Imported by the tests' Python blocks (sys.path holds tests/cli); test support only."""
import numpy as np


def words(text, toks):
    """The word of each token (-1: none): the word holding its first non-blank byte, for blanks
    the next one; special tokens and tokens without offsets have none. Also the word count."""
    b = text.encode()
    wid, w, inw = [], -1, False
    for c in b:
        if c in b" \t":
            wid.append(-1); inw = False
        else:
            if not inw: w += 1
            wid.append(w); inw = True
    res = []
    for t in toks:
        s, en = t["start"], t["end"]
        if s < 0 or t.get("special"): res.append(-1); continue
        i = s
        while i < en and wid[i] < 0: i += 1
        if i == en:
            while i < len(b) and wid[i] < 0: i += 1
        res.append(wid[i] if i < len(b) else -1)
    return res, w + 1


def score_pair(A, sw, Ws, rw, Wt, gold, cnt, aligns, k):
    """Adds pair k's counts (|A|, |S|, |A & S|, |A & P|) of every head and the head mean to cnt
    (L, H + 1, 4) and its alignments ("a-b ...") to aligns[(k, l, h)]. A (L, H, rows, Ts): the
    pair's cross-attention; sw / rw: the source / row tokens' words (words()), Ws / Wt the word
    counts; gold: the pair's gold line."""
    L, H = A.shape[:2]
    G = {}
    for g in gold.split():
        sep = "-" if "-" in g else "?"
        a, b = map(int, g.split(sep)); G[(a, b)] = G.get((a, b), False) or sep == "-"
    S = {x for x, s in G.items() if s}
    for l in range(L):
        for h in range(H + 1):
            Ah = A[l, h] if h < H else A[l].mean(0)
            Wm = np.zeros((Wt, Ws))
            for b in range(Wt):
                r = [i for i in range(len(rw)) if rw[i] == b]
                for a in range(Ws):
                    c = [j for j in range(len(sw)) if sw[j] == a]
                    if r and c: Wm[b, a] = Ah[np.ix_(r, c)].sum(1).mean()
            has = [a for a in range(Ws) if a in sw]
            best = [has[int(np.argmax(Wm[b, has]))] if b in rw else -1 for b in range(Wt)]
            Aset = {(a, b) for b, a in enumerate(best) if a >= 0}
            cnt[l, h] += [len(Aset), len(S), len(Aset & S), len(Aset & set(G))]
            aligns[(k, l, h)] = " ".join(f"{a}-{b}" for b, a in enumerate(best) if a >= 0)


def aer(cnt):
    """AER = 1 - (|A & S| + |A & P|) / (|A| + |S|) of summed counts (..., 4)."""
    return 1 - (cnt[..., 2] + cnt[..., 3]) / (cnt[..., 0] + cnt[..., 1])
