#!/usr/bin/python3
"""gen_head_attr.py — PyTorch reference for the attribution columns of `attnscope analyze`
(sentence_heads.head_importance / sink_raw / sink_norm / alti and head_scores.
head_importance / head_importance_norm / norm_sink_ratio / alti_contribution;
docs/analysis.md, "Head importance, sink ratio and ALTI share").

What it does: takes the BERT classifier fixture tests/ref/fixtures/models/bert (2 layers x
4 heads, post-LN, 3 classes) with the 112-entry WordPiece vocabulary of
tests/ref/make_analysis_db.sh, and three SST-2 sentences made of whole vocabulary words
(so the WordPiece split is one piece per word), and computes in float64 with the fixture's
reference forward (gen_models.bert_forward):

    y            = logit of the predicted class (the saliency's target)
    head_imp     = |sum_ij A_lh[i, j] dy/dA_lh[i, j]|  = |dy/dξ_lh| at ξ = 1 (Michel et al.
                   2019, eq. 2); checked against a central finite difference of a gate ξ
                   that scales head h's attention probabilities (asserted, printed)
    f_lh(x_j)    = v_lh[j] W_o^h;  fnorm = ||f_lh(x_j)||  (Kobayashi et al. 2020, eq. 6)
    sink_raw     = mean_i sum_{j in S} A[i, j],  S = {[CLS] (position 0), [SEP]}
    sink_norm    = mean_i sum_{j in S} A[i, j] fnorm[j] / sum_j A[i, j] fnorm[j]
    alti         = mean_i of head h's share: components o_h,i = sum_j A_h[i, j] f_h(x_j) and
                   the residual x_i through the post-LN map T_i(z) = γ (z - mean z) / σ(u_i),
                   u_i = x_i + sum_h o_h,i + b_o, x̃_i = LN(u_i); c = max(0, ||x̃_i||_1 -
                   ||x̃_i - T_i(z)||_1) (Ferrando et al. 2022, eq. 9); share = c_h / sum of
                   all H + 1 (the decomposition sum + bias terms = x̃ is asserted)
and the aggregates over the three sentences: head_importance = mean, head_importance_norm
= head_importance / its layer's l2 norm, norm_sink_ratio = sum_s T_s sink_norm / sum_s T_s
sink_raw, alti_contribution = sum_s T_s alti / sum_s T_s.

Writes tests/ref/fixtures/head_attr/: vocab.txt, sst.tsv and expected.json (token texts,
per-sentence and aggregate values), which tests/cli/test_head_attr.sh compares with the
database `attnscope analyze` writes (|diff| <= 1e-5).
What it does not: decoders (no classifier: NULL importance, tested there by
test_analyze_decoder.sh) or imported attention. Run (deterministic):
/usr/bin/python3 tests/ref/gen_head_attr.py
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_grads  # noqa: E402
import gen_models  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "head_attr")
SENTENCES = [("it is a good film .", 1), ("the story was not funny at all .", 0), ("this movie is so bad .", 0)]
FD_STEP = 1e-5

torch.set_num_threads(1)


def vocab():
    """The 112 entries of tests/ref/make_analysis_db.sh's vocab()."""
    v = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    v += [chr(c) for c in range(ord("a"), ord("z") + 1)]
    v += ["##" + chr(c) for c in range(ord("a"), ord("z") + 1)]
    v += (". , ! ? ' - the a an it is was and of to in film movie good bad not this that with for its as but on "
          "one all story funny love like no so be at by more than about his her has have are you from into most "
          "just very work").split()
    return v[:112]


class Gate:
    """Within the block, multiplies head h of layer l's attention probabilities by xi (after
    the softmax, before P·V): bert_forward calls F.softmax once per layer, in order."""

    def __init__(self, l, h, xi):
        self.l, self.h, self.xi = l, h, xi

    def __enter__(self):
        self.orig, calls = F.softmax, [0]

        def softmax(*a, **k):
            out = self.orig(*a, **k)
            if calls[0] == self.l:
                g = torch.ones_like(out)
                g[:, self.h] = self.xi
                out = out * g
            calls[0] += 1
            return out
        F.softmax = softmax

    def __exit__(self, *exc):
        F.softmax = self.orig


def sentence(c, P, ids):
    L, H, D = c["num_hidden_layers"], c["num_attention_heads"], c["hidden_size"]
    Dh, T = D // H, len(ids)
    ids_t = torch.tensor(ids)
    tt = torch.zeros_like(ids_t)
    mask = torch.ones_like(ids_t)
    pre = "bert." if "bert.embeddings.word_embeddings.weight" in P else ""
    E = P[pre + "embeddings.word_embeddings.weight"][ids_t].clone().requires_grad_(True)  # a leaf for autograd
    out = gen_models.bert_forward(P, c, pre, ids_t, tt, mask, word_embeds=E)
    logits = out["logits"][0]
    pred = int(torch.argmax(logits))
    dP = torch.autograd.grad(logits[pred], out["_probs"])
    A = torch.stack([p[0] for p in out["_probs"]]).detach()  # (L, H, T, T)
    dA = torch.stack([g[0] for g in dP])
    imp = (A * dA).sum((-1, -2)).abs()  # (L, H)
    # the gate's finite difference: d logit_pred / d xi_lh at xi = 1
    worst = 0.0
    with torch.no_grad():
        for l in range(L):
            for h in range(H):
                f = []
                for s in (FD_STEP, -FD_STEP):
                    with Gate(l, h, 1.0 + s):
                        f.append(gen_models.bert_forward(P, c, pre, ids_t, tt, mask)["logits"][0, pred].item())
                fd = abs((f[0] - f[1]) / (2 * FD_STEP))
                worst = max(worst, abs(fd - imp[l, h].item()) / max(fd, 1e-12))
    assert worst < 1e-6, worst
    V = out["values"].detach()  # (L, H, T, Dh)
    X = out["hidden_states"].detach()  # (L + 1, T, D): X[l] is layer l's input
    sink = torch.zeros(T, dtype=torch.bool)
    sink[0] = sink[T - 1] = True
    sraw, snorm, alti = (torch.zeros(L, H, dtype=torch.float64) for _ in range(3))
    for l in range(L):
        b = f"{pre}encoder.layer.{l}."
        Wo, bo = P[b + "attention.output.dense.weight"].T, P[b + "attention.output.dense.bias"]
        gam, beta = P[b + "attention.output.LayerNorm.weight"], P[b + "attention.output.LayerNorm.bias"]
        eps = c["layer_norm_eps"]
        Fh = torch.stack([V[l, h] @ Wo[h * Dh:(h + 1) * Dh] for h in range(H)])  # (H, T, D)
        fn = Fh.norm(dim=-1)  # (H, T)
        Al = A[l]
        sraw[l] = Al[:, :, sink].sum(-1).mean(-1)
        W = Al * fn[:, None, :]
        snorm[l] = (W[:, :, sink].sum(-1) / W.sum(-1)).mean(-1)
        O = torch.einsum("hij,hjd->hid", Al, Fh)  # (H, T, D) head outputs
        x = X[l]
        u = x + O.sum(0) + bo
        sd = torch.sqrt(u.var(-1, unbiased=False) + eps)  # (T)
        xt = F.layer_norm(u, (D,), gam, beta, eps)

        def tmap(z):  # (..., T, D) -> the post-LN map at each row
            return gam * (z - z.mean(-1, keepdim=True)) / sd[:, None]
        comps = torch.cat([tmap(O), tmap(x)[None]])  # (H + 1, T, D)
        d = (comps.sum(0) + tmap(bo.expand(T, D)) + beta - xt).abs().max().item()
        assert d < 1e-9, d
        cc = (xt.abs().sum(-1)[None] - (xt[None] - comps).abs().sum(-1)).clamp(min=0)  # (H + 1, T)
        share = cc / cc.sum(0, keepdim=True)
        alti[l] = share[:H].mean(-1)
    return pred, imp, sraw, snorm, alti, worst


def main():
    os.makedirs(OUT, exist_ok=True)
    c, P, _, _ = gen_grads.load("bert")
    P = {k: v.double() for k, v in P.items()}
    voc = vocab()
    with open(os.path.join(OUT, "vocab.txt"), "w") as f:
        f.write("\n".join(voc) + "\n")
    with open(os.path.join(OUT, "sst.tsv"), "w") as f:
        f.write("sentence\tlabel\n")
        for s, y in SENTENCES:
            f.write(f"{s}\t{y}\n")
    index = {t: i for i, t in enumerate(voc)}  # a repeated entry ("a") maps to its last line, as WordPiece loads it
    sents, agg = [], {}
    imps, nw, sr, sn, al = [], 0, 0.0, 0.0, 0.0
    for text, label in SENTENCES:
        toks = ["[CLS]"] + text.split() + ["[SEP]"]
        ids = [index[t] for t in toks]  # every word is one vocabulary entry
        pred, imp, sraw, snorm, alti, fd = sentence(c, P, ids)
        T = len(ids)
        imps.append(imp)
        nw += T
        sr, sn, al = sr + T * sraw, sn + T * snorm, al + T * alti
        sents.append({"text": text, "tokens": toks, "predicted": pred, "head_importance": imp.flatten().tolist(),
                      "sink_raw": sraw.flatten().tolist(), "sink_norm": snorm.flatten().tolist(),
                      "alti": alti.flatten().tolist()})
        print(f"{text!r:38s} T={T:2d} pred {pred}  |dy/dξ| max {imp.max().item():.4f} (gate fd rel {fd:.1e})  "
              f"sink raw {sraw.mean().item():.3f} norm {snorm.mean().item():.3f}  alti {alti.mean().item():.3f}")
    gi = torch.stack(imps).mean(0)  # (L, H)
    agg["head_importance"] = gi.flatten().tolist()
    agg["head_importance_norm"] = (gi / gi.norm(dim=-1, keepdim=True)).flatten().tolist()
    agg["norm_sink_ratio"] = (sn / sr).flatten().tolist()
    agg["alti_contribution"] = (al / nw).flatten().tolist()
    doc = {"generator": "tests/ref/gen_head_attr.py", "model": "tests/ref/fixtures/models/bert",
           "layers": c["num_hidden_layers"], "heads": c["num_attention_heads"], "sentences": sents, "heads_agg": agg}
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("norm_sink_ratio", [round(v, 4) for v in agg["norm_sink_ratio"]])
    print("alti_contribution", [round(v, 4) for v in agg["alti_contribution"]])


if __name__ == "__main__":
    main()
