#!/usr/bin/python3
"""gen_intervene.py — reference outputs of the forward with interventions on its attention
(as_intervention in include/attnscope.h, applied in src/model/encoder.c; iv_compare in
src/analysis/intervene.c; docs/attribution.md "Interventions").

What it does: re-runs the fixtures' own PyTorch forwards (gen_models.py's bert and gpt2,
gen_llama.py's llama_bf16, through gen_grads.make_runner) in float64 with their softmax
wrapped, so that each layer's attention probabilities P (H, T, T) are edited right after
the softmax:
    knockout  P[h, q, k] = 0 for every listed edge of the layer (head -1: every head); with
              renorm, each changed row divided by its new sum
    ablation  zero: P[h] = 0 (so the head's context P V is 0);
              mean: every row of P[h] = the mean of its rows over the real positions (so the
              context is the head's mean context over the input's positions)
which is what the engine does to the context vectors (P V is linear in P). For each case
it writes the log-softmax of the explained row of logits without and with the
intervention: the classifier's one row, the LMs' last position.

Writes tests/ref/fixtures/attrib/intervene.safetensors: <fixture>.<case>.base and
.after F32 (cols,); the cases are listed in CASES (same in tests/unit/test_intervene.c).
What it does not: change the model fixtures. Run: /usr/bin/python3 tests/ref/gen_intervene.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_grads  # noqa: E402
import gen_llama  # noqa: E402
import gen_models  # noqa: E402
from gen_models import st_write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "fixtures", "attrib", "intervene.safetensors")
FIXTURES = ("bert", "gpt2", "llama_bf16")
# name: (heads [(layer, head)], head mode, edges [(layer, head or -1, query, key)], renorm);
# query / key -1 = the last token
CASES = {
    "zero": ([(0, 1), (1, 2)], "zero", [], 0),
    "mean_knock": ([(1, 0)], "mean", [(0, -1, -1, 0), (1, 2, 3, 1)], 1),
    "knock": ([], "zero", [(0, 1, 2, 2), (1, -1, -1, -1), (1, 3, 5, 0)], 0),
}


class SoftmaxEdit:
    """Stands in for torch.nn.functional in a reference module: softmax is followed by the
    edits of the layer it is called for (one call per layer, in order)."""

    def __init__(self, case, T, mask):
        self.heads, self.mode, edges, self.renorm = case
        self.edges = [(l, h, q % T, k % T) for l, h, q, k in edges]
        self.real = mask != 0
        self.layer = 0

    def __getattr__(self, name):
        return getattr(torch.nn.functional, name)

    def softmax(self, s, dim=-1, dtype=None):
        p = torch.nn.functional.softmax(s, dim=dim, dtype=dtype)
        l, self.layer = self.layer, self.layer + 1
        P = p.reshape(p.shape[-3:]).clone()  # (H, T, T)
        rows = set()
        for (el, h, q, k) in self.edges:
            if el != l:
                continue
            for hh in (range(P.shape[0]) if h == -1 else [h]):
                P[hh, q, k] = 0.0
                rows.add((hh, q))
        if self.renorm:
            for hh, q in rows:
                z = P[hh, q].sum()
                if z > 0:
                    P[hh, q] = P[hh, q] / z
        for (el, h) in self.heads:
            if el != l:
                continue
            if self.mode == "zero":
                P[h] = 0.0
            else:
                P[h] = P[h][self.real].mean(0, keepdim=True).expand_as(P[h])
        return P.reshape(p.shape)


def logprobs(c, P, meta, case, ids, tt, mask):
    table, run = gen_grads.make_runner(c, P, meta)
    Pd = {k: v.double() for k, v in P.items()}
    saved = gen_models.F, gen_llama.F
    try:
        if case is not None:
            gen_models.F = gen_llama.F = SoftmaxEdit(case, ids.shape[0], mask)
        with torch.no_grad():
            logits, _ = run(Pd, ids, tt, mask, Pd[table][ids])
    finally:
        gen_models.F, gen_llama.F = saved
    row = logits[0] if meta["logits_head"] == "classifier" else logits[int(torch.nonzero(mask != 0)[-1, 0])]
    return torch.log_softmax(row, -1)


def main():
    out = []
    for name in FIXTURES:
        c, P, exp, meta = gen_grads.load(name)
        ids = exp["single.input_ids"].long()
        mask = exp["single.attention_mask"].long()
        tt = exp["single.token_type_ids"].long()
        base = logprobs(c, P, meta, None, ids, tt, mask)
        for cname, case in CASES.items():
            after = logprobs(c, P, meta, case, ids, tt, mask)
            out += [(f"{name}.{cname}.base", base, "F32"), (f"{name}.{cname}.after", after, "F32")]
            print(f"{name:10s} {cname:10s} max |Δ log p| {(after - base).abs().max().item():.4f} "
                  f"argmax {int(base.argmax())} -> {int(after.argmax())}")
    st_write(OUT, out, {"generator": "tests/ref/gen_intervene.py"})
    print(f"-> {OUT} {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
