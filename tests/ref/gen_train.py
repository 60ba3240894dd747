#!/usr/bin/python3
"""gen_train.py — PyTorch reference for attnscope's training loop
(tests/unit/test_train.c).

What it does: takes the tiny BERT of gen_backward.py (L=2, H=2, D=16, F=32, V=50,
20 positions, sequence classifier with 3 classes + tied masked-LM head; seed 11),
writes it as tests/ref/fixtures/train/tiny/{config.json, model.safetensors} (F32), then
trains it for 30 steps in float64 with dropout off on 30 seeded random batches
(B = 4, T = 8, [CLS] a [SEP] b [SEP] with segment ids, the last sequence right-padded
by 2, three MLM targets per sequence, one class label per sequence), loss = mean
classifier cross-entropy + mean MLM cross-entropy, with exactly the optimizer of
src/train/optim.c:
  - torch.nn.utils.clip_grad_norm_(max_norm = 1.0) (coefficient 1 / (norm + 1e-6));
  - AdamW (Loshchilov & Hutter 2019) as torch.optim.AdamW: lr 1e-2, betas (0.9, 0.999),
    eps 1e-6, weight decay 0.01 on weight matrices and embeddings only (not biases,
    not LayerNorm parameters);
  - learning rate lr * (s + 1) / 3 for the first 3 steps s, then lr * (30 - s) / 27.
It writes the batches, the 30 losses (before each update) and the final parameters
into tests/ref/fixtures/train/expected.safetensors.

Run (deterministic): /usr/bin/python3 tests/ref/gen_train.py
"""
import json
import os
import shutil
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_backward as gb  # noqa: E402

OUT = os.path.join(HERE, "fixtures", "train")
STEPS, B, T = 30, 4, 8
LR, WD, WARMUP, CLIP, EPS = 1e-2, 0.01, 3, 1.0, 1e-6


def lr_at(s):
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    return LR * (STEPS - s) / (STEPS - WARMUP)


def decayed(name):
    return not (name.endswith(".bias") or "LayerNorm" in name)


def make_batch(s, g):
    ids = torch.randint(5, s.V, (B, T), generator=g)
    tt = torch.zeros(B, T, dtype=torch.long)
    mask = torch.ones(B, T, dtype=torch.long)
    ids[:, 0] = 2
    ids[:, 4] = 3
    ids[:, T - 1] = 3
    tt[:, 5:] = 1
    ids[B - 1, T - 3] = 3
    ids[B - 1, T - 2:] = 0
    mask[B - 1, T - 2:] = 0
    tt[B - 1, T - 2:] = 0
    mlm = torch.full((B, T), -100, dtype=torch.long)
    for b in range(B):
        for t in (1, 3, 5):
            mlm[b, t] = int(ids[b, t])
            ids[b, t] = 4 if t != 3 else ids[b, t]  # [MASK] at 1 and 5, kept at 3
    labels = torch.randint(0, s.C, (B,), generator=g)
    return ids, tt, mask, labels, mlm


def main():
    torch.manual_seed(0)
    s = gb.Spec("bert")
    P32 = gb.make_params(s, 11)
    P = {k: v.to(gb.DT).clone().requires_grad_(True) for k, v in P32.items()}
    m = {k: torch.zeros_like(v) for k, v in P.items()}
    v2 = {k: torch.zeros_like(v) for k, v in P.items()}
    g = torch.Generator().manual_seed(12)
    batches, losses = [], []
    for step in range(STEPS):
        ids, tt, mask, labels, mlm = make_batch(s, g)
        batches.append((ids, tt, mask, labels, mlm))
        for p in P.values():
            p.grad = None
        logits, x, _ = gb.forward(s, P, ids, tt, mask)
        loss_cls = torch.nn.functional.cross_entropy(logits, labels)
        rows = (mlm != -100).nonzero(as_tuple=False)
        ml = gb.mlm_logits(s, P, x[rows[:, 0], rows[:, 1]])
        loss = loss_cls + torch.nn.functional.cross_entropy(ml, mlm[rows[:, 0], rows[:, 1]])
        loss.backward()
        losses.append(float(loss))
        norm = torch.sqrt(sum((p.grad ** 2).sum() for p in P.values()))
        coef = min(1.0, CLIP / (float(norm) + 1e-6))
        lr = lr_at(step)
        t = step + 1
        with torch.no_grad():
            for k, p in P.items():
                gr = p.grad * coef
                if decayed(k):
                    p.mul_(1 - lr * WD)
                m[k].mul_(0.9).add_(gr, alpha=0.1)
                v2[k].mul_(0.999).addcmul_(gr, gr, value=0.001)
                bc1, bc2 = 1 - 0.9 ** t, 1 - 0.999 ** t
                p.sub_(lr / bc1 * m[k] / (v2[k].sqrt() / bc2 ** 0.5 + EPS))
    d = os.path.join(OUT, "tiny")
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    cfg = gb.config(s)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    gb.st_write(os.path.join(d, "model.safetensors"), [(k, v, "F32") for k, v in P32.items()])
    st = []
    for name, i in (("ids", 0), ("type_ids", 1), ("mask", 2), ("cls_labels", 3), ("mlm_labels", 4)):
        st.append(("in." + name, torch.stack([bt[i] for bt in batches]), "I32"))
    st.append(("out.losses", torch.tensor(losses), "F32"))
    st += [("final." + k, v, "F32") for k, v in P.items()]
    gb.st_write(os.path.join(OUT, "expected.safetensors"), st)
    print("losses:", " ".join(f"{x:.5f}" for x in losses))


if __name__ == "__main__":
    main()
