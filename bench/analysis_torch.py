#!/usr/bin/python3
"""analysis_torch.py — the PyTorch reference side of bench/analysis_bench.sh: the corpus
analysis pipeline of `attnscope analyze --explain 0` per sentence, in PyTorch:
forward with attention capture (tests/ref/gen_models.py:bert_forward, the parity
fixtures' eager BERT), gradient saliency of the predicted class (L1 of d logit /
d word embedding, on SST-2 sentences), and every score of docs/analysis.md: importance,
semantic cosine, Clark statistics, head-pair JSD per query row, word-level attention
and predicted parents in both directions, fixed-offset baselines.

To run the same sentences with the same tokens, it reads the tokenization, token kinds,
word alignment and parses from the database attnscope wrote (`--db`), mapping pieces to
ids with the model's vocab.txt; reading them is not timed. Prints sentences/s, and
checks its per-head importance / semantic / Clark means against the database
(max abs diff).

    /usr/bin/python3 bench/analysis_torch.py --model DIR --db FILE --threads 2
"""
import argparse, json, math, os, sqlite3, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import gen_models  # noqa: E402
from gen_models import bert_forward, st_read  # noqa: E402

OFFSETS = [-3, -2, -1, 1, 2]


def jsd_rows(P):
    """P: (LH, T) rows of one query position -> (npairs,) JSD base 2 for a < b."""
    LH = P.shape[0]
    a, b = torch.triu_indices(LH, LH, 1)
    M = 0.5 * (P[a] + P[b])
    h = lambda x: -(torch.where(x > 0, x * torch.log2(x.clamp_min(1e-30)), torch.zeros_like(x))).sum(-1)
    return (h(M) - 0.5 * (h(P[a]) + h(P[b]))).clamp_min(0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    c = json.load(open(os.path.join(a.model, "config.json")))
    P = st_read(os.path.join(a.model, "model.safetensors"))
    vocab = {w: i for i, w in enumerate(open(os.path.join(a.model, "vocab.txt"), encoding="utf-8").read().split("\n"))}
    db = sqlite3.connect(a.db)
    sents = db.execute("SELECT idx, corpus, n_words FROM sentences WHERE run=? ORDER BY idx", (a.run,)).fetchall()
    toks, words = {}, {}
    for s, pos, text, kind, word in db.execute("SELECT sent, pos, text, kind, word FROM tokens WHERE run=? ORDER BY sent, pos", (a.run,)):
        toks.setdefault(s, []).append((text, kind, -1 if word is None else word))
    for s, i, head, rel in db.execute("SELECT sent, idx, head, deprel FROM words WHERE run=? ORDER BY sent, idx", (a.run,)):
        words.setdefault(s, []).append((-2 if head is None else head, rel))
    unk = vocab["[UNK]"]
    WE = P["bert.embeddings.word_embeddings.weight"]
    orig_emb = F.embedding
    cap = {}

    def emb_hook(inp, w, *r, **k):  # word embeddings become a leaf to take d logit / d embedding
        out = orig_emb(inp, w, *r, **k)
        if w is WE:
            out = out.detach().requires_grad_(True)
            cap["e"] = out
        return out
    gen_models.F.embedding = emb_hook
    L, H = c["num_hidden_layers"], c["num_attention_heads"]
    LH = L * H
    imp = torch.zeros(LH, dtype=torch.float64); sem = torch.zeros(LH, dtype=torch.float64); nsem = 0
    stats = torch.zeros(8, LH, dtype=torch.float64); w_rows = 0.0; w_pn = 0.0
    js = torch.zeros(LH * (LH - 1) // 2, dtype=torch.float64); rows = 0
    tot, cor, base = {}, {}, {}
    t0 = time.perf_counter()
    for idx, corpus, W in sents:
        tk = toks[idx]
        T = len(tk)
        ids = torch.tensor([vocab.get(t[0], unk) for t in tk])
        kind = [t[1] for t in tk]
        tt = torch.zeros(T, dtype=torch.long); mask = torch.ones(T, dtype=torch.long)
        if corpus == "sst2":
            out = bert_forward(P, c, "bert.", ids, tt, mask)
            logits = out["logits"][0]
            pred = int(logits.argmax())
            logits[pred].backward()
            s_vec = cap["e"].grad[0].abs().sum(-1).double()
            A = out["attentions"].detach()
        else:
            with torch.no_grad():
                A = bert_forward(P, c, "bert.", ids, tt, mask)["attentions"]
            s_vec = None
        A = A.reshape(LH, T, T).double()
        # importance, semantic (Dodrio sec. 3.2)
        imp += A.amax((1, 2))
        if s_vec is not None:
            r = A.sum(1)
            sem += (r @ s_vec) / (r.norm(dim=1) * s_vec.norm())
            nsem += 1
        # Clark et al. sec. 3 statistics, pooled over rows
        km = lambda k: torch.tensor([x == k for x in kind])
        stats[0] += A[:, :, km("cls")].sum((1, 2))
        stats[1] += A[:, :, km("sep")].sum((1, 2))
        stats[2] += A[:, :, km("punct")].sum((1, 2))
        stats[3] += A.diagonal(0, 1, 2).sum(1)
        stats[4] += A.diagonal(-1, 1, 2).sum(1)
        stats[5] += A.diagonal(1, 1, 2).sum(1)
        ent = -(torch.where(A > 0, A * torch.log(A.clamp_min(1e-300)), torch.zeros_like(A))).sum(2)
        stats[6] += ent.sum(1)
        stats[7] += (ent / math.log(T)).sum(1) if T > 1 else 0
        w_rows += T; w_pn += T - 1
        # head-pair JSD per query row (Clark sec. 6)
        for i in range(T):
            js += jsd_rows(A[:, i, :])
        rows += T
        # syntax (Clark sec. 4): word-level attention, predicted word, both directions
        if W:
            wd = words[idx]
            M = torch.zeros(W, T, dtype=torch.float64)
            for t, x in enumerate(tk):
                if x[2] >= 0:
                    M[x[2], t] = 1
            cnt = M.sum(1)
            has = cnt > 0
            Wm = (M @ A @ M.T) / cnt.clamp_min(1)[:, None]
            Wm[:, torch.arange(W), torch.arange(W)] = -math.inf
            Wm[:, :, ~has] = -math.inf
            pred_w = Wm.argmax(2)  # (LH, W)
            for d, (p, rl) in enumerate(wd):
                if p < 0 or rl in ("root", "punct") or rl.startswith(("root:", "punct:")) or not has[d] or not has[p]:
                    continue
                for key in (rl, "all"):
                    tot[key] = tot.get(key, 0) + 1
                    cc = cor.setdefault(key, torch.zeros(2, LH, dtype=torch.long))
                    cc[0] += pred_w[:, d] == p
                    cc[1] += pred_w[:, p] == d
                    bb = base.setdefault(key, [[0] * 5, [0] * 5])
                    for o, k in enumerate(OFFSETS):
                        bb[0][o] += d + k == p
                        bb[1][o] += p + k == d
    dt = time.perf_counter() - t0
    n = len(sents)
    # check against attnscope's aggregates
    ref = db.execute("SELECT importance, semantic, cls, sep, punct, self, prev, next, entropy, entropy_norm FROM head_scores WHERE run=? ORDER BY layer, head", (a.run,)).fetchall()
    ref = np.array([[np.nan if v is None else v for v in r] for r in ref])
    mine = np.stack([(imp / n).numpy(), (sem / max(nsem, 1)).numpy() if nsem else np.full(LH, np.nan)]
                    + [(stats[k] / (w_pn if k in (4, 5) else w_rows)).numpy() for k in range(8)], 1)
    diff = np.nanmax(np.abs(mine - ref))
    print("torch: %d sentences in %.1f s = %.2f sentences/s (threads %d); max abs diff of per-head means vs attnscope %.2e"
          % (n, dt, n / dt, a.threads, diff))


if __name__ == "__main__":
    main()
