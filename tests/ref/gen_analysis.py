"""gen_analysis.py — NumPy reference for the corpus head scores (src/analysis).

Writes tests/ref/fixtures/analysis/import/NNNN.attention.npy + NNNN.json (a tiny
Dodrio-layout folder: random attention, tokens with multi-piece words, per-class
saliency and a word-level parse) and tests/ref/fixtures/analysis/expected.json with
every per-head aggregate computed independently here in float64 NumPy:
importance and semantic score (Dodrio, Wang et al. 2021, sec. 3.2), syntactic score
with fixed-offset baselines (Clark et al. 2019 sec. 4.2), Clark statistics pooled over
query rows, mean Jensen-Shannon divergence between heads, and pattern labels.
tests/unit/test_store.c imports the folder with `an_import_dir` (min_rel = MIN_REL)
and compares. Run: /usr/bin/python3 tests/ref/gen_analysis.py (deterministic).
"""
import json, os
import numpy as np

ROOT = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(ROOT, "fixtures", "analysis")
IMP = os.path.join(OUT, "import")
L, H, NS, MIN_REL = 2, 3, 8, 3
OFFSETS = [-3, -2, -1, 1, 2]
RELS = ["det", "nsubj", "obj", "amod"]
rng = np.random.default_rng(20240605)

VOCAB = ["the", "cat", "sat", "on", "a", "mat", "dog", "ran", "far", "away", "big", "red", "fox"]


def make_sentence(k):
    W = int(rng.integers(4, 8))
    words = [VOCAB[int(rng.integers(len(VOCAB)))] for _ in range(W - 1)] + ["."]
    # multi-piece words: split some words into two pieces
    tokens, tok_word = ["[CLS]"], [-1]
    for w, form in enumerate(words):
        if len(form) >= 3 and rng.random() < 0.4:
            cut = int(rng.integers(1, len(form)))
            tokens += [form[:cut], "##" + form[cut:]]
            tok_word += [w, w]
        else:
            tokens.append(form)
            tok_word.append(w)
    tokens.append("[SEP]")
    tok_word.append(-1)
    T = len(tokens)
    # a random tree: root among the non-final words, each other word attaches to an earlier-placed one
    order = list(rng.permutation(W - 1))
    parent = [None] * W
    rel = [None] * W
    root = order[0]
    rel[root] = "root"
    placed = [root]
    for w in order[1:]:
        parent[w] = int(placed[int(rng.integers(len(placed)))])
        rel[w] = RELS[int(rng.integers(len(RELS)))]
        placed.append(w)
    parent[W - 1] = int(root)
    rel[W - 1] = "punct"
    # attention: softmax of random logits, with a previous-token bias in head (0, 1)
    logits = rng.normal(0, 2.0, size=(L, H, T, T))
    for i in range(1, T):
        logits[0, 1, i, i - 1] += 4.0
    logits[1, 2, :, T - 1] += 5.0  # a [SEP]-focused head
    A = np.exp(logits - logits.max(-1, keepdims=True))
    A = (A / A.sum(-1, keepdims=True)).astype(np.float32)
    sal = rng.random((2, T)).astype(np.float32)
    pred = int(rng.integers(2))
    doc = {
        "id": k, "sentence": " ".join(words), "label": int(rng.integers(2)), "predicted_label": pred,
        "tokens": tokens,
        "saliency": [{"token": tokens[t], "negative": float(sal[0, t]), "positive": float(sal[1, t])} for t in range(T)],
        "dependencies": {"list": [{"child": w, "parent": parent[w], "relation": rel[w]} for w in range(W)], "words": words},
    }
    return doc, A, np.array(tok_word), sal


def jsd(p, q):
    m = 0.5 * (p + q)
    def H(x):
        x = x[x > 0]
        return -(x * np.log2(x)).sum()
    return max(H(m) - 0.5 * (H(p) + H(q)), 0.0)


def main():
    os.makedirs(IMP, exist_ok=True)
    for f in os.listdir(IMP):
        os.remove(os.path.join(IMP, f))
    LH = L * H
    imp = np.zeros(LH); sem = np.zeros(LH)
    pooled = {k: np.zeros(LH) for k in ["cls", "sep", "punct", "self", "prev", "next", "entropy", "entropy_norm"]}
    w_rows = 0.0; w_pn = 0.0
    js = np.zeros((LH, LH)); rows = 0
    tot, cor, base = {}, {}, {}
    for k in range(NS):
        doc, A, tw, sal = make_sentence(k)
        name = "%04d" % (k * 7)
        np.save(os.path.join(IMP, name + ".attention.npy"), A)
        with open(os.path.join(IMP, name + ".json"), "w") as f:
            json.dump(doc, f)
        T = A.shape[-1]
        Ad = A.astype(np.float64).reshape(LH, T, T)
        kind = np.array(["word"] * T, dtype=object)
        kind[0] = "cls"; kind[T - 1] = "sep"
        for t in range(1, T - 1):
            if doc["tokens"][t] in (".", ","):
                kind[t] = "punct"
        s = sal[doc["predicted_label"]].astype(np.float64)
        for h in range(LH):
            a = Ad[h]
            imp[h] += a.max()
            r = a.sum(0)
            sem[h] += r @ s / (np.linalg.norm(r) * np.linalg.norm(s))
            pooled["cls"][h] += a[:, kind == "cls"].sum()
            pooled["sep"][h] += a[:, kind == "sep"].sum()
            pooled["punct"][h] += a[:, kind == "punct"].sum()
            pooled["self"][h] += np.trace(a)
            pooled["prev"][h] += sum(a[i, i - 1] for i in range(1, T))
            pooled["next"][h] += sum(a[i, i + 1] for i in range(T - 1))
            ent = -(a * np.log(a)).sum(1)
            pooled["entropy"][h] += ent.sum()
            pooled["entropy_norm"][h] += (ent / np.log(T)).sum()
        w_rows += T; w_pn += T - 1
        for i in range(T):
            rows += 1
            for a_ in range(LH):
                for b_ in range(a_ + 1, LH):
                    js[a_, b_] += jsd(Ad[a_, i], Ad[b_, i])
        # syntax (Clark et al. 2019 sec. 4.1 / 4.2)
        words = doc["dependencies"]["words"]; W = len(words)
        par = [None] * W; rl = [None] * W
        for e in doc["dependencies"]["list"]:
            par[e["child"]] = e["parent"]; rl[e["child"]] = e["relation"]
        M = np.zeros((W, T))
        for t in range(T):
            if tw[t] >= 0:
                M[tw[t], t] = 1
        cnt = M.sum(1)
        preds = []
        for h in range(LH):
            Wm = (M @ Ad[h] @ M.T) / cnt[:, None]
            np.fill_diagonal(Wm, -np.inf)
            preds.append(Wm.argmax(1))
        for d in range(W):
            p = par[d]
            if p is None or rl[d] in ("root", "punct"):
                continue
            r = rl[d]
            for key in (r, "all"):
                tot[key] = tot.get(key, 0) + 1
                c = cor.setdefault(key, np.zeros((2, LH), dtype=np.int64))
                b = base.setdefault(key, np.zeros((2, len(OFFSETS)), dtype=np.int64))
                for h in range(LH):
                    c[0, h] += preds[h][d] == p
                    c[1, h] += preds[h][p] == d
                for o, off in enumerate(OFFSETS):
                    b[0, o] += d + off == p
                    b[1, o] += p + off == d
    heads = []
    synt = np.zeros(LH)
    relacc = []
    for r in sorted(tot):
        for dr in range(2):
            bo = int(np.argmax(base[r][dr]))  # first maximum = lowest offset index, as the C code
            bacc = base[r][dr, bo] / tot[r]
            for h in range(LH):
                acc = cor[r][dr, h] / tot[r]
                counted = tot[r] >= MIN_REL and acc > bacc
                if counted:
                    synt[h] = max(synt[h], acc)
                relacc.append({"relation": r, "dir": dr, "layer": h // H, "head": h % H, "n": tot[r],
                               "correct": int(cor[r][dr, h]), "accuracy": acc, "baseline": bacc,
                               "baseline_offset": OFFSETS[bo], "counted": int(counted)})
    for h in range(LH):
        st = {k: v[h] / (w_pn if k in ("prev", "next") else w_rows) for k, v in pooled.items()}
        delim = st["cls"] + st["sep"] + st["punct"]
        sc = [st["next"], st["prev"], st["self"], delim]
        names = ["next-word", "previous-word", "self", "delimiter-focused"]
        best = None
        for i in range(4):
            if sc[i] >= 0.5 and (best is None or sc[i] > sc[best]):
                best = i
        broad = st["entropy_norm"] * (1 - delim)
        if best is not None:
            label, conf = names[best], min(sc[best], 1.0)
        elif broad >= 0.5:
            label, conf = "broad", min(broad, 1.0)
        else:
            mx = max(max(x / 0.5 for x in sc), broad / 0.5)
            label, conf = "other", (0.0 if mx >= 1 else 1 - mx)
        heads.append({"layer": h // H, "head": h % H, "importance": imp[h] / NS, "semantic": sem[h] / NS,
                      "syntactic": synt[h], "statistics": st, "label": label, "confidence": conf})
    pairs = [{"a": a_, "b": b_, "jsd": js[a_, b_] / rows} for a_ in range(LH) for b_ in range(a_ + 1, LH)]
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"L": L, "H": H, "n_sentences": NS, "min_rel": MIN_REL, "heads": heads,
                   "rel_accuracy": relacc, "pairs": pairs}, f, indent=1)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
