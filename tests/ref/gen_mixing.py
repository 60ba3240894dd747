#!/usr/bin/python3
"""gen_mixing.py — reference values for the block-level mixing methods of
src/analysis/attrib_mix.c (docs/attribution.md): the residual- and norm-aware norm-based
attention of Kobayashi et al. 2021 ("norm2") and ALTI (Ferrando et al. 2022) with its
aggregation across layers.

What it does: for the model fixtures bert (post-LN, BERT names), distilbert (post-LN,
DistilBERT names), gpt2 (pre-LN, Conv1D weights, biases), llama_bf16 (pre-RMSNorm,
grouped-query attention, BF16 weights, no biases) and gemma2 (pre-RMSNorm with a
post-attention RMSNorm scaled by 1 + w, head width 10 with model width 32), case "single",
reads the reference attention A (L, H, T, T), values V (L, H, T, Dh) and hidden states
X (the input of every layer) of expected.safetensors (tests/ref/gen_models.py,
gen_llama.py) and the checkpoint's weights, and computes in float64, per layer:

    f_h(x_j) = V[h, j] W_o^h,  s_ij = sum_h A[h, i, j] f_h(x_j)          (T, T, D)
    post-LN:      z_ij = s_ij + δ_ij x_i,  u_i = sum_j z_ij + b_o,
                  T_i(x_j) = γ (z_ij - mean z_ij) / sqrt(var u_i + eps)
                  x̃_i = LayerNorm(u_i) (the block's output)
    pre-norm:     T_i(x_j) = s_ij + δ_ij x_i,  x̃_i = x_i + sum_j s_ij + b_o
    Gemma 2:      a_i = sum_j s_ij (+ b_o),  T_i(x_j) = (1 + w) s_ij / rms(a_i) + δ_ij x_i,
                  x̃_i = x_i + RMSNorm(a_i)

    norm2[l, i, j]      = ||T_i(x_j)||_2                 (Kobayashi et al. 2021)
    alti_layer[l, i, j] = max(0, ||x̃_i||_1 - ||x̃_i - T_i(x_j)||_1), rows / their sums
    alti[l]             = alti_layer[l] @ ... @ alti_layer[0]   (Ferrando et al. 2022)

and, per head (attr_head_mixing, the analysis's columns):

    fnorm[l, h, j]      = ||f_h(x_j)||                   (Kobayashi et al. 2020, eq. 6)
    head_share[l, h, i] = c_h / sum of all H + 1 c's, the components being the head
                          outputs o_h,i = sum_j A[h, i, j] f_h(x_j) and the residual x_i,
                          each through the block's map at row i (post-LN: γ (z - mean z) /
                          σ(u_i); Gemma 2: (1 + w) z / rms(a_i) for the heads; pre-norm:
                          the identity), c = max(0, ||x̃_i||_1 - ||x̃_i - T_i(z)||_1)

and asserts that the decomposition is exact (sum_j T_i(x_j) + the bias terms = x̃_i) and
that x̃ is the model's: the next layer's input computed from x̃ through the fixture's
feed-forward half equals the reference hidden state (every layer but the last, whose
hidden state HF returns after the final norm).

Writes tests/ref/fixtures/attrib/<name>_mix.safetensors: norm2, alti_layer, alti F32
(L, T, T); fnorm, head_share F32 (L, H, T).
What it does not: change the model fixtures. Run (deterministic):
/usr/bin/python3 tests/ref/gen_mixing.py
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_grads  # noqa: E402
from gen_models import st_write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "attrib")
GENERATOR = "tests/ref/gen_mixing.py"
FIXTURES = ("bert", "distilbert", "gpt2", "llama_bf16", "gemma2")
CASE = "single"


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rms(x, w, eps, add_one):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * ((1.0 if add_one else 0.0) + w)


class Block:
    """Layer l's weights as (kind, W_o (H Dh, D), b_o, gain, beta, eps, add_one, mlp(x̃) -> next input)."""

    def __init__(self, c, P, meta, l):
        g = lambda n: P[n].double() if n in P else None  # noqa: E731
        gen, arch = meta["generator"], meta["arch"]
        self.add_one = False
        if gen == "tests/ref/gen_llama.py":
            b = f"{meta['prefix']}layers.{l}."
            self.Wo, self.bo = g(b + "self_attn.o_proj.weight").T, g(b + "self_attn.o_proj.bias")
            self.eps = c["rms_norm_eps"]
            gemma = c["model_type"] in ("gemma2", "gemma3")
            self.kind = "pre_postnorm" if gemma else "pre"
            self.add_one = gemma
            self.gain = g(b + "post_attention_layernorm.weight") if gemma else None
            self.beta = None
            n2 = b + ("pre_feedforward_layernorm" if gemma else "post_attention_layernorm") + ".weight"

            def mlp(xt):
                x = rms(xt, g(n2), self.eps, gemma)
                act = gelu_tanh if gemma else F.silu
                m = (act(x @ g(b + "mlp.gate_proj.weight").T) * (x @ g(b + "mlp.up_proj.weight").T)) \
                    @ g(b + "mlp.down_proj.weight").T
                if gemma:
                    m = rms(m, g(b + "post_feedforward_layernorm.weight"), self.eps, True)
                return xt + m
        elif arch == "gpt2":
            b = f"transformer.h.{l}."
            self.Wo, self.bo = g(b + "attn.c_proj.weight"), g(b + "attn.c_proj.bias")
            self.kind, self.gain, self.beta, self.eps = "pre", None, None, c["layer_norm_epsilon"]

            def mlp(xt):
                x = F.layer_norm(xt, xt.shape[-1:], g(b + "ln_2.weight"), g(b + "ln_2.bias"), self.eps)
                return xt + gelu_tanh(x @ g(b + "mlp.c_fc.weight") + g(b + "mlp.c_fc.bias")) \
                    @ g(b + "mlp.c_proj.weight") + g(b + "mlp.c_proj.bias")
        elif arch == "distilbert":
            b = f"distilbert.transformer.layer.{l}."
            self.Wo, self.bo = g(b + "attention.out_lin.weight").T, g(b + "attention.out_lin.bias")
            self.kind, self.eps = "post", 1e-12
            self.gain, self.beta = g(b + "sa_layer_norm.weight"), g(b + "sa_layer_norm.bias")

            def mlp(xt):
                m = F.gelu(xt @ g(b + "ffn.lin1.weight").T + g(b + "ffn.lin1.bias")) @ g(b + "ffn.lin2.weight").T \
                    + g(b + "ffn.lin2.bias")
                return F.layer_norm(m + xt, xt.shape[-1:], g(b + "output_layer_norm.weight"),
                                    g(b + "output_layer_norm.bias"), self.eps)
        else:
            pre = "bert." if "bert.encoder.layer.0.attention.output.dense.weight" in P else ""
            b = f"{pre}encoder.layer.{l}."
            self.Wo, self.bo = g(b + "attention.output.dense.weight").T, g(b + "attention.output.dense.bias")
            self.kind, self.eps = "post", c["layer_norm_eps"]
            self.gain, self.beta = g(b + "attention.output.LayerNorm.weight"), g(b + "attention.output.LayerNorm.bias")

            def mlp(xt):
                m = F.gelu(xt @ g(b + "intermediate.dense.weight").T + g(b + "intermediate.dense.bias")) \
                    @ g(b + "output.dense.weight").T + g(b + "output.dense.bias")
                return F.layer_norm(m + xt, xt.shape[-1:], g(b + "output.LayerNorm.weight"),
                                    g(b + "output.LayerNorm.bias"), self.eps)
        self.mlp = mlp


def decompose(blk, A, V, X):
    """(Tv (T, T, D) = T_i(x_j), x̃ (T, D)) for one layer: A (H, T, T), V (H, T, Dh), X (T, D)."""
    H, T, Dh = V.shape
    D = X.shape[-1]
    Fh = torch.stack([V[h] @ blk.Wo[h * Dh:(h + 1) * Dh] for h in range(H)])  # (H, T, D)
    S = torch.einsum("hij,hjd->ijd", A, Fh)  # s_ij
    bo = blk.bo if blk.bo is not None else torch.zeros(D, dtype=X.dtype)
    eye = torch.eye(T, dtype=X.dtype)[:, :, None]
    if blk.kind == "post":
        Z = S + eye * X[:, None, :]
        u = Z.sum(1) + bo
        sd = torch.sqrt(u.var(-1, unbiased=False) + blk.eps)  # (T)
        Tv = blk.gain * (Z - Z.mean(-1, keepdim=True)) / sd[:, None, None]
        xt = F.layer_norm(u, (D,), blk.gain, blk.beta, blk.eps)
        bias = blk.gain * (bo - bo.mean()) / sd[:, None] + blk.beta
    elif blk.kind == "pre":
        Tv = S + eye * X[:, None, :]
        xt = X + S.sum(1) + bo
        bias = bo.expand(T, D)
    else:
        a = S.sum(1) + bo
        r = torch.sqrt((a * a).mean(-1) + blk.eps)
        gg = (1.0 if blk.add_one else 0.0) + blk.gain
        Tv = gg * S / r[:, None, None] + eye * X[:, None, :]
        xt = X + rms(a, blk.gain, blk.eps, blk.add_one)
        bias = gg * bo / r[:, None]
    d = (Tv.sum(1) + bias - xt).abs().max().item()
    assert d < 1e-9, f"decomposition off by {d}"
    # by head: o_h,i through the same map (post-LN: centred and scaled; Gemma: scaled)
    O = torch.einsum("hij,hjd->hid", A, Fh)  # (H, T, D)
    if blk.kind == "post":
        heads_t = blk.gain * (O - O.mean(-1, keepdim=True)) / sd[:, None]
        resid = blk.gain * (X - X.mean(-1, keepdim=True)) / sd[:, None]
    elif blk.kind == "pre":
        heads_t, resid = O, X
    else:
        heads_t, resid = gg * O / r[:, None], X
    d = (heads_t.sum(0) + resid + bias - xt).abs().max().item()
    assert d < 1e-9, f"head decomposition off by {d}"
    comps = torch.cat([heads_t, resid[None]])  # (H + 1, T, D)
    c = (xt.abs().sum(-1)[None] - (xt[None] - comps).abs().sum(-1)).clamp(min=0)
    z = c.sum(0, keepdim=True)
    share = torch.where(z > 0, c / z, torch.zeros_like(c))[:H]  # (H, T)
    return Tv, xt, Fh.norm(dim=-1), share


def alti_layer(Tv, xt):
    l1 = xt.abs().sum(-1)  # (T)
    dist = (xt[:, None, :] - Tv).abs().sum(-1)  # (T, T)
    c = (l1[:, None] - dist).clamp(min=0)
    z = c.sum(-1, keepdim=True)
    return torch.where(z > 0, c / z, torch.zeros_like(c))


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    for name in FIXTURES:
        c, P, exp, meta = gen_grads.load(name)
        A = exp[f"{CASE}.attentions"].double()
        V = exp[f"{CASE}.values"].double()
        X = exp[f"{CASE}.hidden_states"].double()
        L, H, T, _ = A.shape
        N2 = torch.zeros(L, T, T, dtype=torch.float64)
        C = torch.zeros_like(N2)
        R = torch.zeros_like(N2)
        FN = torch.zeros(L, H, T, dtype=torch.float64)
        HS = torch.zeros_like(FN)
        worst = 0.0
        for l in range(L):
            blk = Block(c, P, meta, l)
            Tv, xt, FN[l], HS[l] = decompose(blk, A[l], V[l], X[l])
            if l + 1 < L:  # x̃ is the model's: the feed-forward half of it gives the next input
                worst = max(worst, (blk.mlp(xt) - X[l + 1]).abs().max().item())
            N2[l] = Tv.norm(dim=-1)
            C[l] = alti_layer(Tv, xt)
            R[l] = C[l] if l == 0 else C[l] @ R[l - 1]
        assert worst < 1e-4, f"{name}: x̃ through the MLP differs from the next hidden state by {worst}"
        assert ((C.sum(-1) - 1).abs() < 1e-9).all() and ((R.sum(-1) - 1).abs() < 1e-9).all()
        path = os.path.join(OUT_DIR, f"{name}_mix.safetensors")
        st_write(path, [("norm2", N2, "F32"), ("alti_layer", C, "F32"), ("alti", R, "F32"), ("fnorm", FN, "F32"),
                        ("head_share", HS, "F32")],
                 {"generator": GENERATOR, "case": CASE, "fixture": name})
        print(f"{name:11s} L={L} H={H} T={T}  next hidden from x̃ within {worst:.1e}  "
              f"norm2 max {N2.max().item():.4f}  alti diag {R[-1].diagonal().mean().item():.4f}  "
              f"-> {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
