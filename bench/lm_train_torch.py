#!/usr/bin/python3
"""lm_train_torch.py — the PyTorch side of bench/lm_train_bench.sh: causal-LM training
steps of a Llama the shape of models/attnscope-lm (6 layers, width 256, 8 query / 2
key-value heads of 32, SwiGLU 768, RMSNorm, RoPE theta 10,000, tied embeddings, vocabulary
8192) on batch x seq windows of random token ids, as `attnscope train-lm` runs them:
mean next-token cross-entropy, backward, global-norm clipping at 1.0, AdamW (0.9, 0.95,
weight decay 0.1). Eager PyTorch written as a careful user would for torch 1.13 (no
scaled_dot_product_attention there): one product for q/k/v and one for gate/up, GQA by
stacking the G query heads of a key/value head (no repeat_kv copy), baddbmm with the
causal mask folded in, softmax, bmm; foreach AdamW and a foreach clip.

Prints one line: threads N wait W opt foreach tokens_per_s X (median of --rounds, each
--steps timed steps after 2 warm-up steps).
    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/lm_train_torch.py --threads 2
"""
import argparse, math, os, statistics, time

import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--seq", type=int, default=256)
ap.add_argument("--steps", type=int, default=5)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--opt", default="foreach", choices=["foreach", "loop"])
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
L, D, H, K, Dh, FF, V = 6, 256, 8, 2, 32, 768, 8192
G = H // K


class Llama(torch.nn.Module):
    def __init__(self):
        super().__init__()
        p = lambda *s: torch.nn.Parameter(torch.randn(*s) * 0.02)
        self.emb = p(V, D)
        self.qkv = torch.nn.ParameterList([p((H + 2 * K) * Dh, D) for _ in range(L)])
        self.o = torch.nn.ParameterList([p(D, H * Dh) for _ in range(L)])
        self.gu = torch.nn.ParameterList([p(2 * FF, D) for _ in range(L)])
        self.down = torch.nn.ParameterList([p(D, FF) for _ in range(L)])
        self.n1 = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(D)) for _ in range(L)])
        self.n2 = torch.nn.ParameterList([torch.nn.Parameter(torch.ones(D)) for _ in range(L)])
        self.nf = torch.nn.Parameter(torch.ones(D))
        inv = 10000.0 ** (-torch.arange(0, Dh, 2).float() / Dh)
        f = torch.outer(torch.arange(a.seq).float(), inv)
        e = torch.cat([f, f], -1)
        self.cos, self.sin = e.cos(), e.sin()
        self.mask = torch.full((a.seq, a.seq), torch.finfo(torch.float32).min).triu(1)

    @staticmethod
    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * w

    def rope(self, x):
        h = x.shape[-1] // 2
        rot = torch.cat([-x[..., h:], x[..., :h]], -1)
        return x * self.cos + rot * self.sin

    def forward(self, ids):
        B, T = ids.shape
        x = self.emb[ids]
        for l in range(L):
            h = self.rms(x, self.n1[l])
            qkv = F.linear(h, self.qkv[l])
            q = qkv[..., : H * Dh].view(B, T, H, Dh).transpose(1, 2)
            k = qkv[..., H * Dh:(H + K) * Dh].view(B, T, K, Dh).transpose(1, 2)
            v = qkv[..., (H + K) * Dh:].view(B, T, K, Dh).transpose(1, 2)
            q, k = self.rope(q), self.rope(k)
            q = q.reshape(B * K, G * T, Dh)  # the G query heads of a kv head, stacked
            k = k.reshape(B * K, T, Dh)
            v = v.reshape(B * K, T, Dh)
            m = self.mask.repeat(G, 1).expand(B * K, G * T, T)
            s = torch.baddbmm(m, q, k.transpose(1, 2), alpha=1.0 / math.sqrt(Dh))
            y = torch.bmm(s.softmax(-1), v).view(B, H, T, Dh).transpose(1, 2).reshape(B, T, H * Dh)
            x = x + F.linear(y, self.o[l])
            gu = F.linear(self.rms(x, self.n2[l]), self.gu[l])
            x = x + F.linear(F.silu(gu[..., :FF]) * gu[..., FF:], self.down[l])
        logits = F.linear(self.rms(x, self.nf), self.emb)
        return F.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))


m = Llama()
params = list(m.parameters())
decay = [p for p in params if p.dim() == 2]
nodecay = [p for p in params if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                        lr=1e-3, betas=(0.9, 0.95), foreach=a.opt == "foreach")
ids = torch.randint(3, V, (a.batch, a.seq))


def step():
    opt.zero_grad(set_to_none=True)
    loss = m(ids)
    loss.backward()
    if a.opt == "foreach":
        grads = [p.grad for p in params]
        total = torch.norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_mul_(grads, float(torch.clamp(1.0 / (total + 1e-6), max=1.0)))
    else:
        torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


for _ in range(2):
    step()
rates = []
for _ in range(a.rounds):
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    rates.append(a.steps * a.batch * a.seq / (time.perf_counter() - t0))
print("threads %d wait %s opt %s tokens_per_s %.0f" % (a.threads, os.environ.get("OMP_WAIT_POLICY", "unset"), a.opt,
                                                       statistics.median(rates)))
