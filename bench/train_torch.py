#!/usr/bin/python3
"""train_torch.py — the PyTorch reference for attnscope's training throughput
(bench/train_bench.sh): the same post-LN BERT masked-LM (Hugging Face BertForMaskedLM's
computation, erf GELU, tied decoder, MLM head only on the masked rows as attnscope runs
it), the same batch (B sequences of T tokens, 15% predicted, two segments), AdamW with
global-norm clipping, dropout off, float32. Prints one line: "torch tokens/s N".

Usage: /usr/bin/python3 bench/train_torch.py L D H F V T B STEPS THREADS
"""
import math
import sys
import time

import torch

L, D, H, F, V, T, B, STEPS, THREADS = (int(x) for x in sys.argv[1:10])
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
        p = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(Dh) + ext, dim=-1)
        ctx = (p @ v).permute(0, 2, 1, 3).reshape(B, T, D)
        x = self.ln1(self.o(ctx) + x)
        return self.ln2(self.f2(torch.nn.functional.gelu(self.f1(x))) + x)


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
        ext = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, ext)
        h = x.reshape(B * T, D)[rows]
        z = self.mln(torch.nn.functional.gelu(self.mw(h))) @ self.wte.weight.T + self.mb
        return torch.nn.functional.cross_entropy(z, tgt)


m = Bert()
opt = torch.optim.AdamW(m.parameters(), lr=5e-4, eps=1e-6, weight_decay=0.01)
ids = torch.randint(5, V, (B, T))
tt = torch.zeros(B, T, dtype=torch.long)
tt[:, T // 2:] = 1
mask = torch.ones(B, T, dtype=torch.long)
rows = torch.randperm(B * T)[: int(0.15 * B * T)]
tgt = torch.randint(5, V, (len(rows),))


def step():
    opt.zero_grad(set_to_none=True)
    loss = m(ids, tt, mask, rows, tgt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()


for _ in range(3):
    step()
t0 = time.perf_counter()
for _ in range(STEPS):
    step()
dt = time.perf_counter() - t0
print(f"torch tokens/s {B * T * STEPS / dt:.0f}")
