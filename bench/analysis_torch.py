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
ids with the model's vocab.txt; reading them and loading the model are not timed.
Prints sentences/s, and checks its per-head importance / semantic / Clark means against
the database (max abs diff; only when it ran every sentence of the run).

Two implementations of the same computation (--impl):
  tuned  (default) the forward of bench/torch_ref.py (fused QKV, one baddbmm for the
         scores) capturing only what the analysis reads (attentions, logits), under
         torch.inference_mode() for treebank sentences; saliency by torch.autograd.grad
         of the predicted logit with respect to the word embeddings; statistics in
         float64 on whole tensors; the head-pair JSD of all query rows at once, the
         per-head entropies computed once per row and the mixture entropies in float32
         summed in float64 (attnscope's arithmetic), in chunks of rows.
  old    tests/ref/gen_models.py:bert_forward with full capture and the JSD one query
         row at a time in float64.
--limit N runs the first N sentences; --worker I --workers N runs sentences I, I+N, ...
(for N processes side by side; the driver adds their times up as wall time).

    /usr/bin/python3 bench/analysis_torch.py --model DIR --db FILE --threads 1
"""
import argparse, json, math, os, sqlite3, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import gen_models  # noqa: E402
from gen_models import bert_forward, st_read  # noqa: E402
from torch_ref import prepare  # noqa: E402

OFFSETS = [-3, -2, -1, 1, 2]


def jsd_rows(P):
    """P: (LH, T) rows of one query position -> (npairs,) JSD base 2 for a < b."""
    LH = P.shape[0]
    a, b = torch.triu_indices(LH, LH, 1)
    M = 0.5 * (P[a] + P[b])
    h = lambda x: -(torch.where(x > 0, x * torch.log2(x.clamp_min(1e-30)), torch.zeros_like(x))).sum(-1)
    return (h(M) - 0.5 * (h(P[a]) + h(P[b]))).clamp_min(0)


LN2 = math.log(2.0)


def jsd_all(A, pa, pb, chunk_elems=1 << 22):
    """A: (LH, T, T) float64 attention -> (npairs,) float64 sum over query rows of the JSD
    (base 2) of each head pair (pa[i], pb[i]). JSD = H(M) - (H(P_a) + H(P_b)) / 2."""
    LH, T, _ = A.shape
    R = A.transpose(0, 1).float()  # (T rows, LH, T keys)
    hh = -torch.special.xlogy(R, R).sum(-1) / LN2  # (T, LH) per-head entropies
    hp = 0.5 * (hh[:, pa] + hh[:, pb])  # (T, npairs)
    out = torch.zeros(len(pa), dtype=torch.float64)
    step = max(1, chunk_elems // (len(pa) * T))
    for i in range(0, T, step):
        r = R[i:i + step]
        M = r[:, pa].add_(r[:, pb]).mul_(0.5)  # (rows, npairs, T)
        hm = torch.special.xlogy(M, M).sum(-1).div_(-LN2)
        out += (hm - hp[i:i + step]).clamp_min_(0).double().sum(0)
    return out


def tuned_attention(W, c, ids, want_grad):
    """Forward of bench/torch_ref.py:tuned_forward keeping only the attentions
    ((L, H, T, T) stacked) and the logits (C,); with want_grad, also the L1 norm over
    the width of d logit[pred] / d word embedding, (T,). Token types 0, no padding."""
    H, eps, D = c["num_attention_heads"], c["layer_norm_eps"], c["hidden_size"]
    T, Dh = ids.shape[0], D // H
    e = W["wte"][ids]
    if want_grad:
        e.requires_grad_(True)
    h = e + W["wtt"][0] + W["wpe"][:T]
    h = F.layer_norm(h, (D,), *W["ln0"], eps)
    scale = 1.0 / math.sqrt(Dh)
    att = []
    for lw in W["layers"]:
        qkv = torch.addmm(lw["bqkv"], h, lw["wqkv_t"]).view(T, 3, H, Dh).permute(1, 2, 0, 3)
        s = torch.bmm(qkv[0], qkv[1].transpose(1, 2)).mul_(scale)  # mask of zeros (no padding)
        p = torch.softmax(s, -1)
        ctx = torch.bmm(p, qkv[2]).transpose(0, 1).reshape(T, D)
        a = torch.addmm(lw["bo"], ctx, lw["wo_t"])
        a += h
        a = F.layer_norm(a, (D,), *lw["ln1"], eps)
        i = torch.addmm(lw["b1"], a, lw["w1_t"])
        i = F.gelu(i) if want_grad else torch._C._nn.gelu_(i)
        o = torch.addmm(lw["b2"], i, lw["w2_t"])
        o += a
        h = F.layer_norm(o, (D,), *lw["ln2"], eps)
        att.append(p)
    pooled = torch.tanh(torch.addmm(W["bp"], h[:1], W["wp_t"]))
    logits = torch.addmm(W["bc"], pooled, W["wc_t"])[0]
    sal = None
    if want_grad:
        pred = int(logits.argmax())
        (g,) = torch.autograd.grad(logits[pred], e)
        sal = g.abs().sum(-1).double()
    return torch.stack(att).detach(), logits.detach(), sal


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--run", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--interop", type=int, default=1)
    ap.add_argument("--impl", choices=("tuned", "old"), default="tuned")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--worker", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_interop_threads(a.interop)
    torch.set_num_threads(a.threads)
    c = json.load(open(os.path.join(a.model, "config.json")))
    P = st_read(os.path.join(a.model, "model.safetensors"))
    vocab = {w: i for i, w in enumerate(open(os.path.join(a.model, "vocab.txt"), encoding="utf-8").read().split("\n"))}
    db = sqlite3.connect(a.db)
    sents = db.execute("SELECT idx, corpus, n_words FROM sentences WHERE run=? ORDER BY idx", (a.run,)).fetchall()
    n_run = len(sents)
    if a.limit:
        sents = sents[:a.limit]
    sents = sents[a.worker::a.workers]
    toks, words = {}, {}
    for s, pos, text, kind, word in db.execute("SELECT sent, pos, text, kind, word FROM tokens WHERE run=? ORDER BY sent, pos", (a.run,)):
        toks.setdefault(s, []).append((text, kind, -1 if word is None else word))
    for s, i, head, rel in db.execute("SELECT sent, idx, head, deprel FROM words WHERE run=? ORDER BY sent, idx", (a.run,)):
        words.setdefault(s, []).append((-2 if head is None else head, rel))
    unk = vocab["[UNK]"]
    Wt = prepare(P, c)
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
    pa, pb = torch.triu_indices(LH, LH, 1)
    tot, cor, base = {}, {}, {}
    t0 = time.perf_counter()
    for idx, corpus, W in sents:
        tk = toks[idx]
        T = len(tk)
        ids = torch.tensor([vocab.get(t[0], unk) for t in tk])
        kind = [t[1] for t in tk]
        tt = torch.zeros(T, dtype=torch.long); mask = torch.ones(T, dtype=torch.long)
        if a.impl == "tuned":
            if corpus == "sst2":
                A, _, s_vec = tuned_attention(Wt, c, ids, True)
            else:
                with torch.inference_mode():
                    A, _, _ = tuned_attention(Wt, c, ids, False)
                s_vec = None
        elif corpus == "sst2":
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
        km = lambda k: torch.tensor([x == k for x in kind], dtype=torch.bool)
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
        if a.impl == "tuned":
            js += jsd_all(A, pa, pb)
        else:
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
    diff = np.nanmax(np.abs(mine - ref)) if n == n_run else float("nan")
    ref_js = np.array([r[0] for r in db.execute(
        "SELECT jsd FROM head_pairs WHERE run=? ORDER BY a_layer, a_head, b_layer, b_head", (a.run,))])
    djs = float(np.abs((js / max(rows, 1)).numpy() - ref_js).max()) if n == n_run and len(ref_js) == len(js) else float("nan")
    print("torch: %d sentences in %.2f s = %.2f sentences/s threads %d interop %d openblas %s wait %s impl %s "
          "worker %d/%d; max abs diff vs attnscope: per-head means %.2e, head-pair JSD %.2e"
          % (n, dt, n / dt, a.threads, a.interop, os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
             os.environ.get("OMP_WAIT_POLICY", "unset"), a.impl, a.worker, a.workers, diff, djs), flush=True)


if __name__ == "__main__":
    main()
