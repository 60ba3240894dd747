#!/usr/bin/python3
"""gen_grads.py — autograd reference gradients for the engine's backward pass (saliency
with respect to the input word embeddings, gradient-weighted attention).

What it does: for every model fixture in tests/ref/fixtures/models/ (written by
gen_models.py and gen_llama.py), loads the weights from model.safetensors (F16/BF16
fixtures: the stored rounded values, widened to float32) and the "single" and "padded"
cases' inputs from expected.safetensors, re-runs the reference forward of the script
that wrote the fixture with the looked-up word-embedding rows as a leaf tensor

    E (T, De) = word_embedding_table[input_ids]

fed where the forward does the lookup (position / token-type embeddings, LayerNorm,
Gemma's sqrt(D) scaling etc. follow as in the forward), and writes with torch.autograd,
in float64 (weights and E widened to float64), into <fixture>/grads.safetensors:

    {case}.targets        I32 (1,) class, or (T,) target token per position
    {case}.objective      F32 (1,)      value of the objective (OBJECTIVE below)
    {case}.d_word_embeds  F32 (T, De)   d objective / d E
    {case}.d_attentions   F32 (L, H, T, T)  d objective / d P for each layer's attention
                          probabilities P as multiplied with V (per query head; rows =
                          queries; masked entries included: d/dP[i, j] = dctx_i . v_j)

The gradient is with respect to E only: a tied output head (BERT MLM decoder, GPT-2,
tied LLaMA-family heads) keeps reading the embedding table as a constant.

Self-checks (asserted, numbers printed):
  - the float32 forward's logits equal expected.safetensors' logits within
    1e-5 * max(1, max |logit|) (the same model runs; this machine's float32 rounding
    differs from the one that wrote the fixtures by up to ~1e-6 relative);
  - central finite differences in float64 (step 1e-4) against autograd, relative error
    < 1e-5: on random entries of E, and on random entries of P (plus the masked entry
    with the largest gradient) by adding the step to P after the softmax, before P·V;
  - the float32 gradient against the float64 one (the reference's own noise), printed.

What it does not: change model.safetensors or expected.safetensors, or cover the
"pair", "typed" and "long" cases. gen_models.py / gen_llama.py remove whole fixture
folders (grads.safetensors included) when they rewrite them; `make fixtures` runs this
script after them.

Run (deterministic): /usr/bin/python3 tests/ref/gen_grads.py
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llama  # noqa: E402
import gen_models  # noqa: E402
from gen_models import st_read, st_write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS_DIR = os.path.join(HERE, "fixtures", "models")
GENERATOR = "tests/ref/gen_grads.py"
CASES = ("single", "padded")
OBJECTIVE = ("classifier logits (1, C): logits[0, k] with k = 1 if C > 1 else 0; "
             "LM / MLM logits (T, V): sum over t with attention_mask[t] = 1 of logits[t, target[t]], "
             "target[t] = (input_ids[t] * 7 + 3) % V")

LOGITS_TOL = 1e-5      # float32 forward vs expected.safetensors, max|diff| / max(1, max|logit|)
FD_STEP = 1e-4         # central differences, float64
FD_TOL = 1e-5          # relative error of the finite difference vs autograd
FD_ENTRIES = 6         # random entries per case, of E (rows with mask 1) and of P each

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)


def st_meta(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return json.loads(f.read(n)).get("__metadata__", {})


def load(name):
    d = os.path.join(MODELS_DIR, name)
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    P = {k: v.to(torch.float32) for k, v in st_read(os.path.join(d, "model.safetensors")).items()}
    exp_path = os.path.join(d, "expected.safetensors")
    return c, P, st_read(exp_path), st_meta(exp_path)


def make_runner(c, P, meta):
    """(table name, run(P, ids, tt, mask, E) -> (logits, [P per layer])) for the fixture's
    forward. tt (token_type_ids) is read by the BERT family only (zeros elsewhere)."""
    gen, arch = meta["generator"], meta["arch"]
    if gen == "tests/ref/gen_llama.py":
        pre, head = meta["prefix"], meta["logits_head"]

        def run(Pd, ids, tt, mask, E):
            out = gen_llama.forward(Pd, c, pre, ids, mask, head, dtype=E.dtype, word_embeds=E)
            return out["logits"], out["_probs"]
        return pre + "embed_tokens.weight", run
    assert gen == "tests/ref/gen_models.py", gen
    if arch == "gpt2":
        def run(Pd, ids, tt, mask, E):
            out = gen_models.gpt2_forward(Pd, c, ids, mask, word_embeds=E)
            return out["logits"], out["_probs"]
        return "transformer.wte.weight", run
    if arch == "distilbert":
        def run(Pd, ids, tt, mask, E):
            out = gen_models.distilbert_forward(Pd, c, ids, mask, word_embeds=E)
            return out["logits"], out["_probs"]
        return "distilbert.embeddings.word_embeddings.weight", run
    roberta = arch == "roberta"
    electra = c["model_type"] == "electra"
    pre = {"roberta": "roberta.", "electra": "electra."}.get(c["model_type"], "")
    if not pre and "bert.embeddings.word_embeddings.weight" in P:
        pre = "bert."
    head = meta["logits_head"]  # classifier or mlm

    def run(Pd, ids, tt, mask, E):
        out = gen_models.bert_forward(Pd, c, pre, ids, tt, mask, roberta=roberta, head=head,
                                      electra=electra, word_embeds=E)
        return out["logits"], out["_probs"]
    return pre + "embeddings.word_embeddings.weight", run


def targets_of(kind, n_out, ids):
    """kind "classifier": the class (1 if C > 1 else 0); "lm" / "mlm": (ids * 7 + 3) % V."""
    if kind == "classifier":
        return torch.tensor([1 if n_out > 1 else 0], dtype=torch.long)
    return (ids * 7 + 3) % n_out


def objective(logits, tgt, kind, mask):
    if kind == "classifier":
        return logits[0, tgt[0]]
    picked = logits.gather(1, tgt[:, None])[:, 0]
    return (picked * (mask != 0).to(picked.dtype)).sum()


def grads(run, P, table, ids, tt, mask, kind, dtype):
    """objective, d/dE (T, De), d/dP (L, H, T, T), logits, targets; all in dtype."""
    Pd = {k: v.to(dtype) for k, v in P.items()}
    E = Pd[table][ids].clone().requires_grad_(True)
    logits, probs = run(Pd, ids, tt, mask, E)
    if kind == "classifier":
        assert logits.shape[0] == 1
    else:
        assert logits.shape[0] == len(ids)
    tgt = targets_of(kind, logits.shape[-1], ids)
    obj = objective(logits, tgt, kind, mask)
    g = torch.autograd.grad(obj, [E] + list(probs))
    dP = torch.stack([x.reshape(x.shape[-3:]) for x in g[1:]])  # (L, H, T, T)
    return obj.detach(), g[0].detach(), dP.detach(), logits.detach(), tgt


def fd_check(run, P, table, ids, tt, mask, tgt, kind, dE, gen):
    """Central differences in float64 on FD_ENTRIES random entries of E (rows with mask 1)."""
    Pd = {k: v.to(torch.float64) for k, v in P.items()}
    E0 = Pd[table][ids].clone()
    rows = torch.nonzero(mask != 0)[:, 0]
    worst = 0.0
    with torch.no_grad():
        for _ in range(FD_ENTRIES):
            t = rows[torch.randint(len(rows), (1,), generator=gen)].item()
            j = torch.randint(E0.shape[1], (1,), generator=gen).item()
            f = []
            for s in (FD_STEP, -FD_STEP):
                E = E0.clone()
                E[t, j] += s
                logits, _ = run(Pd, ids, tt, mask, E)
                f.append(objective(logits, tgt, kind, mask).item())
            fd = (f[0] - f[1]) / (2 * FD_STEP)
            ad = dE[t, j].item()
            den = max(abs(fd), abs(ad))
            rel = abs(fd - ad) / den if den > 0 else 0.0
            worst = max(worst, rel)
    return worst


class NudgeProbs:
    """Within the block, adds delta to entry (h, i, j) of the attention probabilities of
    layer l, after the softmax and before P·V: the forwards call F.softmax once per layer
    (only there), so the l-th call is layer l's."""

    def __init__(self, l, h, i, j, delta):
        self.at, self.delta = (l, h, i, j), delta

    def __enter__(self):
        self.orig, calls = F.softmax, [0]

        def softmax(*a, **k):
            out = self.orig(*a, **k)
            l, h, i, j = self.at
            if calls[0] == l:
                d = torch.zeros_like(out)
                d.reshape(out.shape[-3:])[h, i, j] = self.delta
                out = out + d
            calls[0] += 1
            return out
        F.softmax = softmax

    def __exit__(self, *exc):
        F.softmax = self.orig


def fd_check_probs(run, P, table, ids, tt, mask, tgt, kind, dP, gen):
    """Central differences in float64 on entries of the attention probabilities (as used
    in P·V) against autograd: FD_ENTRIES random ones plus the masked entry (a key the
    query cannot see) with the largest |gradient|, where the case has one."""
    Pd = {k: v.to(torch.float64) for k, v in P.items()}
    E = Pd[table][ids].clone()
    L, H, T, _ = dP.shape
    at = [tuple(torch.randint(n, (1,), generator=gen).item() for n in (L, H, T, T))
          for _ in range(FD_ENTRIES)]
    with torch.no_grad():
        _, probs = run(Pd, ids, tt, mask, E)
    zero = torch.stack([x.reshape(x.shape[-3:]) for x in probs]) == 0  # masked: P exactly 0
    if zero.any():
        g = torch.where(zero, dP.abs(), torch.zeros_like(dP))
        at.append(tuple(int(x) for x in torch.nonzero(g == g.max())[0]))
    worst = 0.0
    with torch.no_grad():
        for e in at:
            f = []
            for s in (FD_STEP, -FD_STEP):
                with NudgeProbs(*e, s):
                    logits, _ = run(Pd, ids, tt, mask, E)
                f.append(objective(logits, tgt, kind, mask).item())
            fd = (f[0] - f[1]) / (2 * FD_STEP)
            ad = dP[e].item()
            den = max(abs(fd), abs(ad))
            worst = max(worst, abs(fd - ad) / den if den > 0 else 0.0)
    return worst, bool(zero.any())


def fixture_names():
    out = []
    for name in sorted(os.listdir(MODELS_DIR)):
        p = os.path.join(MODELS_DIR, name, "expected.safetensors")
        if os.path.exists(p) and st_meta(p).get("generator") in ("tests/ref/gen_models.py",
                                                                  "tests/ref/gen_llama.py"):
            out.append(name)
    return out


def main():
    gen = torch.Generator().manual_seed(4242)
    total = 0
    worst = {"logits": 0.0, "fd": 0.0, "fdp": 0.0, "f32": 0.0}
    for name in fixture_names():
        c, P, exp, meta = load(name)
        table, run = make_runner(c, P, meta)
        tensors = []
        for case in CASES:
            ids = exp[f"{case}.input_ids"].long()
            mask = exp[f"{case}.attention_mask"].long()
            tt = exp[f"{case}.token_type_ids"].long()
            kind = meta["logits_head"]
            o32, dE32, dP32, lg32, tgt = grads(run, P, table, ids, tt, mask, kind, torch.float32)
            want = exp[f"{case}.logits"]
            # scaled by the logits' size: float32 rounding differs between BLAS builds
            # (the stored MLM logits reach 18.5, where the unchanged forward differs by 1.9e-5)
            dl = (lg32 - want).abs().max().item() / max(1.0, want.abs().max().item())
            assert lg32.shape == want.shape and dl <= LOGITS_TOL, (name, case, dl)
            o64, dE64, dP64, _, _ = grads(run, P, table, ids, tt, mask, kind, torch.float64)
            fd = fd_check(run, P, table, ids, tt, mask, tgt, kind, dE64, gen)
            fdp, masked = fd_check_probs(run, P, table, ids, tt, mask, tgt, kind, dP64, gen)
            assert fd < FD_TOL and fdp < FD_TOL, (name, case, fd, fdp)
            # float32 vs float64: max |diff| relative to the largest float64 magnitude
            nE = (dE32.double() - dE64).abs().max().item() / dE64.abs().max().item()
            nP = (dP32.double() - dP64).abs().max().item() / dP64.abs().max().item()
            L, H, T = dP64.shape[0], dP64.shape[1], dP64.shape[2]
            assert dE64.shape == (T, P[table].shape[1]) and dP64.shape == (L, H, T, T)
            assert L == int(meta["n_layer"]) and T == len(ids)
            for k, v in zip(worst, (dl, fd, fdp, max(nE, nP))):
                worst[k] = max(worst[k], v)
            print(f"{name + '/' + case:26s} {kind:10s} T={T:2d} L={L} H={H} De={dE64.shape[1]:2d} "
                  f"obj {o64.item():+10.5f}  |dE|max {dE64.abs().max().item():.3e} "
                  f"|dP|max {dP64.abs().max().item():.3e}  logits {dl:.1e}  fd rel E {fd:.1e} "
                  f"P {fdp:.1e}{'m' if masked else ' '} "
                  f"f32 noise dE {nE:.1e} dP {nP:.1e}")
            tensors += [(f"{case}.targets", tgt, "I32"),
                        (f"{case}.objective", o64.reshape(1), "F32"),
                        (f"{case}.d_word_embeds", dE64, "F32"),
                        (f"{case}.d_attentions", dP64, "F32")]
        path = os.path.join(MODELS_DIR, name, "grads.safetensors")
        st_write(path, tensors, {"generator": GENERATOR, "objective": OBJECTIVE})
        total += os.path.getsize(path)
    print(f"worst: logits {worst['logits']:.1e}  fd rel E {worst['fd']:.1e} P {worst['fdp']:.1e}  "
          f"f32 vs f64 (relative to max) {worst['f32']:.1e}")
    print(f"wrote grads.safetensors into {len(fixture_names())} fixtures, {total} bytes")
    assert total < 1_500_000


if __name__ == "__main__":
    main()
