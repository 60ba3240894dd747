#!/usr/bin/python3
"""gen_align.py — NumPy reference of word alignment from cross-attention
(src/analysis/align.c, docs/analysis.md "Word alignment") for tests/unit/test_align.c.

Writes tests/ref/fixtures/align/align.json with two cases:
  random:    a random (L=2, H=3, Tt=9, Ts=8) cross-attention (rows softmax-normalised,
             float32), source pieces -> words with special tokens (-1) and a word without
             pieces, target label pieces -> words, both row shifts (0: the row predicting
             a token, 1: the row reading it);
  bart_tiny: the first input's cross_attentions of the torch reference
             (tests/ref/fixtures/models/bart_tiny/expected.safetensors, c0: source ids
             and decoder ids given) with word maps over its pieces,
and for each: the word matrices Wm (L, H + 1, Wt, Ws) (head mean at index H), the argmax
alignment (L, H + 1, Wt), |A|, |S|, |A∩S|, |A∩P| and AER against a gold Pharaoh line.
Run: /usr/bin/python3 tests/ref/gen_align.py (NumPy only).
"""
import json
import os
import struct

import numpy as np

ROOT = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(ROOT, "fixtures", "align")


def word_matrix(A, row_word, Wt, src_word, Ws):
    """Wm[b, a] = mean over rows of target word b of the sum over source pieces of word a."""
    Wm = np.zeros((Wt, Ws))
    for b in range(Wt):
        rows = [i for i, w in enumerate(row_word) if w == b]
        for a in range(Ws):
            cols = [j for j, w in enumerate(src_word) if w == a]
            if rows and cols:
                Wm[b, a] = A[np.ix_(rows, cols)].astype(np.float64).sum(axis=1).mean()
    return Wm


def argmax(Wm, row_word, src_word):
    Wt, Ws = Wm.shape
    has_src = [a for a in range(Ws) if a in src_word]
    best = []
    for b in range(Wt):
        if b not in row_word or not has_src:
            best.append(-1)
            continue
        v = Wm[b, has_src]
        best.append(int(has_src[int(np.argmax(v))]))  # first maximum: the lowest index
    return best


def parse_gold(line):
    links = {}
    for p in line.split():
        sep = "-" if "-" in p else ("?" if "?" in p else "p")
        i, j = p.split(sep)
        key = (int(i), int(j))
        links[key] = links.get(key, False) or sep == "-"
    return links


def score(best, gold):
    A = {(a, b) for b, a in enumerate(best) if a >= 0}
    S = {k for k, s in gold.items() if s}
    P = set(gold)
    c = [len(A), len(S), len(A & S), len(A & P)]
    aer = 1.0 - (c[2] + c[3]) / (c[0] + c[1])
    return c, aer


def shift_rows(label_word, shift):
    return [label_word[i - shift] if i - shift >= 0 else -1 for i in range(len(label_word))]


def case(name, A, src_word, Ws, label_word, Wt, gold_line, shift):
    L, H, Tt, Ts = A.shape
    row_word = shift_rows(label_word, shift)
    gold = parse_gold(gold_line)
    Wm_all, best_all, counts, aers = [], [], [], []
    for l in range(L):
        mean = A[l].astype(np.float64).mean(axis=0)
        for h in range(H + 1):
            Ah = A[l, h] if h < H else mean
            Wm = word_matrix(Ah, row_word, Wt, src_word, Ws)
            best = argmax(Wm, row_word, src_word)
            c, aer = score(best, gold)
            Wm_all.append(Wm.ravel().tolist())
            best_all.append(best)
            counts.append(c)
            aers.append(aer)
    return {"name": name, "L": L, "H": H, "Tt": Tt, "Ts": Ts, "attn": [float(x) for x in A.ravel()],
            "src_word": src_word, "Ws": Ws, "label_word": label_word, "Wt": Wt, "shift": shift,
            "row_word": row_word, "gold": gold_line, "Wm": Wm_all, "best": best_all, "counts": counts, "aer": aers}


def safetensors(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])

    def get(k):
        v = h[k]
        dt = np.int32 if v["dtype"] == "I32" else np.float32
        o = v["data_offsets"]
        return np.frombuffer(b[8 + n + o[0]:8 + n + o[1]], dt).reshape(v["shape"])
    return get


def main():
    rng = np.random.default_rng(7)
    L, H, Tt, Ts = 2, 3, 9, 8
    x = rng.normal(size=(L, H, Tt, Ts)) * 2.0
    A = np.exp(x - x.max(-1, keepdims=True))
    A = (A / A.sum(-1, keepdims=True)).astype(np.float32)
    src_word = [-1, 0, 0, 1, 2, 2, 2, -1]  # <s> w0 w0 w1 w2 w2 w2 </s>; word 3 has no piece
    label_word = [0, 1, 1, 2, 3, 3, 3, 4, -1]  # the target's pieces; word 5 has no piece
    gold = "0-0 1-1 2?1 1-2 3-3 0?4 2-4 1p5 2-2 2-2"
    cases = [case("random_shift0", A, src_word, 4, label_word, 6, gold, 0),
             case("random_shift1", A, src_word, 4, label_word, 6, gold, 1)]
    get = safetensors(os.path.join(ROOT, "fixtures", "models", "bart_tiny", "expected.safetensors"))
    cross = get("c0.cross_attentions")  # (3, 3, 5, 7)
    c = case("bart_tiny", cross, [-1, 0, 0, 1, 2, 2, -1], 3, [-1, 0, 1, 1, 2], 3, "0-0 1-1 2-2 2?1", 0)
    c["src_ids"] = [int(v) for v in get("c0.src_ids")]
    c["tgt_ids"] = [int(v) for v in get("c0.tgt_ids")]
    cases.append(c)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "align.json"), "w") as f:
        json.dump({"cases": cases}, f, separators=(",", ":"))


if __name__ == "__main__":
    main()
