#!/usr/bin/python3
"""train_torch.py — the PyTorch reference for attnscope's training throughput
(bench/train_bench.sh): the same post-LN BERT masked-LM (Hugging Face BertForMaskedLM's
computation, erf GELU, tied decoder, MLM head only on the masked rows as attnscope runs
it), the same batch (B sequences of T tokens, 15% predicted, two segments), AdamW with
global-norm clipping, dropout off, float32. One fused QKV product per layer, scores by
one torch.baddbmm (scale and mask folded in).

--optim picks the optimizer step: "foreach" (torch.optim.AdamW(foreach=True) and the
global norm and clipping by torch._foreach_norm / torch._foreach_mul_, the same
arithmetic as torch.nn.utils.clip_grad_norm_), "loop" (AdamW(foreach=False) and
clip_grad_norm_), or "fused" (AdamW(fused=True), only where this torch version has it
on the CPU). --dtype bfloat16 runs the forward and the loss under
torch.autocast("cpu", dtype=torch.bfloat16) (mixed precision: BF16 products in the
forward and backward, F32 weights, norms and optimizer; LayerNorm inputs are cast to F32,
as newer torch's autocast does itself), float32 (default) without. Prints one line:
    torch tokens/s N threads N interop N openblas X wait X optim X dtype X
--check: trains 3 steps with "loop" and 3 with "foreach" from the same weights and
prints the max abs difference of the parameters.

Usage: /usr/bin/python3 bench/train_torch.py L D H F V T B STEPS THREADS [--interop N]
       [--optim foreach|loop|fused] [--dtype float32|bfloat16] [--check]
"""
import argparse
import inspect
import math
import os
import sys
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("dims", type=int, nargs=9)
ap.add_argument("--interop", type=int, default=1)
ap.add_argument("--optim", choices=("foreach", "loop", "fused"), default="foreach")
ap.add_argument("--check", action="store_true")
ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
args = ap.parse_args()
L, D, H, F, V, T, B, STEPS, THREADS = args.dims
torch.set_num_interop_threads(args.interop)
torch.set_num_threads(THREADS)
torch.manual_seed(0)
Dh = D // H


def lin(o, i):
    return torch.nn.Linear(i, o)


class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.o, self.f1, self.f2 = lin(3 * D, D), lin(D, D), lin(F, D), lin(D, F)
        self.ln1, self.ln2 = torch.nn.LayerNorm(D, eps=1e-12), torch.nn.LayerNorm(D, eps=1e-12)

    def forward(self, x, ext):
        q, k, v = self.qkv(x).view(B, T, 3, H, Dh).permute(2, 0, 3, 1, 4)
        s = torch.baddbmm(ext, q.reshape(B * H, T, Dh), k.reshape(B * H, T, Dh).transpose(1, 2),
                          alpha=1.0 / math.sqrt(Dh))
        p = torch.softmax(s, dim=-1)
        ctx = torch.bmm(p, v.reshape(B * H, T, Dh)).view(B, H, T, Dh).permute(0, 2, 1, 3).reshape(B, T, D)
        x = self.ln1((self.o(ctx) + x).float())  # .float(): the norms in F32 under autocast
        return self.ln2((self.f2(torch.nn.functional.gelu(self.f1(x))) + x).float())


class Bert(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe, self.wtt = torch.nn.Embedding(V, D), torch.nn.Embedding(T, D), torch.nn.Embedding(2, D)
        self.ln = torch.nn.LayerNorm(D, eps=1e-12)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(L))
        self.mw, self.mln = lin(D, D), torch.nn.LayerNorm(D, eps=1e-12)
        self.mb = torch.nn.Parameter(torch.zeros(V))

    def forward(self, ids, tt, mask, rows, tgt):
        x = self.ln(self.wte(ids) + self.wpe(torch.arange(T))[None] + self.wtt(tt))
        ext = ((1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min).expand(B, H, 1, T)
        ext = ext.reshape(B * H, 1, T)
        for layer in self.layers:
            x = layer(x, ext)
        h = x.reshape(B * T, D)[rows]
        z = self.mln(torch.nn.functional.gelu(self.mw(h)).float()) @ self.wte.weight.T + self.mb
        return torch.nn.functional.cross_entropy(z, tgt)


def make_opt(m, kind):
    if kind == "fused":
        if "fused" not in inspect.signature(torch.optim.AdamW).parameters:
            sys.exit("train_torch: torch %s has no fused AdamW" % torch.__version__)
        return torch.optim.AdamW(m.parameters(), lr=5e-4, eps=1e-6, weight_decay=0.01, fused=True)
    return torch.optim.AdamW(m.parameters(), lr=5e-4, eps=1e-6, weight_decay=0.01, foreach=kind == "foreach")


def clip(params, kind, max_norm=1.0):
    if kind == "loop":
        torch.nn.utils.clip_grad_norm_(params, max_norm)
        return
    grads = [p.grad for p in params if p.grad is not None]
    total = torch.norm(torch.stack(torch._foreach_norm(grads)))
    coef = float(torch.clamp(max_norm / (total + 1e-6), max=1.0))
    torch._foreach_mul_(grads, coef)


ids = torch.randint(5, V, (B, T))
tt = torch.zeros(B, T, dtype=torch.long)
tt[:, T // 2:] = 1
mask = torch.ones(B, T, dtype=torch.long)
rows = torch.randperm(B * T)[: int(0.15 * B * T)]
tgt = torch.randint(5, V, (len(rows),))


def train(m, kind, steps):
    opt = make_opt(m, kind)
    params = list(m.parameters())

    def step():
        opt.zero_grad(set_to_none=True)
        if args.dtype == "bfloat16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = m(ids, tt, mask, rows, tgt)
        else:
            loss = m(ids, tt, mask, rows, tgt)
        loss.backward()
        clip(params, kind)
        opt.step()
    for _ in range(3):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - t0


m = Bert()
if args.check:
    import copy
    m2 = copy.deepcopy(m)
    train(m, "loop", 0)
    train(m2, "foreach", 0)
    d = max(float((a - b).abs().max()) for a, b in zip(m.parameters(), m2.parameters()))
    print("check: parameters after 3 steps, AdamW foreach vs loop, max abs diff %.2e" % d)
    sys.exit(0)
dt = train(m, args.optim, STEPS)
print("torch tokens/s %.0f threads %d interop %d openblas %s wait %s optim %s dtype %s" % (
    B * T * STEPS / dt, THREADS, args.interop, os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
    os.environ.get("OMP_WAIT_POLICY", "unset"), args.optim, args.dtype))
