#!/usr/bin/python3
"""gen_attrib.py — reference values for the attribution methods (src/analysis/attrib.c,
docs/attribution.md): attention rollout and attention flow (Abnar & Zuidema 2020),
norm-based attention (Kobayashi et al. 2020), gradient-weighted attention (Chefer et al.
2021) and head importance (Michel et al. 2019).

What it does: for the model fixtures bert (sequence classifier), gpt2 (LM, Conv1D weights),
llama_bf16 (LM, grouped-query attention, BF16 weights) and bert_noprefix_mlm (masked-LM
head, no name prefix) and their "single" case, reads
the reference attention A (L, H, T, T) and values (L, H, T, Dh) of expected.safetensors
(tests/ref/gen_models.py, gen_llama.py) and computes in float64:

    rollout      Â_l = renorm_rows(0.5 mean_h A_l + 0.5 I), R = Â_L ... Â_1
    flow_raw     F[i, j] = networkx.maximum_flow_value on the DiGraph with nodes (l, x),
                 l = 0..L, edges (l-1, j) -> (l, i) of capacity Â_l[i, j], from (0, j) to (L, i)
    flow         flow_raw with each row divided by its sum (the authors' compute_flows)
    norm         A[l, h, i, j] * || values[l, h, j] W_o^h ||, W_o^h head h's rows of the
                 attention output projection (nn.Linear: W[:, h Dh:(h+1) Dh]^T; Conv1D:
                 W[h Dh:(h+1) Dh, :])
    grad         R = I, R += mean_h (dA ⊙ A)^+ R per layer, dA = dy/dA
    importance   |sum_ij A dA| per (layer, head)

with dy/dA from torch.autograd (float64, the fixture's forward re-run through
tests/ref/gen_grads.py's runners) for y = the explained logit: the classifier's class
`target` (the predicted class: C's default), an LM's (or masked LM's) predicted token at
the last position. grads.safetensors' d_attentions (tests/ref/gen_grads.py: the classifier's class 1,
the LM's sum over positions of target-token logits) give grad_objective /
importance_objective: the classifier's with --target 1, and the formulas alone on the LM's.

Writes tests/ref/fixtures/attrib/<name>.safetensors:
    target, position   I32 (1,)  the logit explained (class or token id, and its row)
    logit              F32 (1,)
    rollout, flow, flow_raw, grad   F32 (T, T)
    norm               F32 (L, H, T, T)
    importance         F32 (L, H)
    d_attentions       F32 (L, H, T, T)   dy/dA of y above
    grad_objective, importance_objective   from grads.safetensors' single.d_attentions
and tests/ref/fixtures/attrib/<name>_layers.safetensors, every layer's map, cumulative
(layers_case; layer l = 0-based):
    rollout_layers     F32 (L, T, T)  Â_l ... Â_0
    flow_layers, flow_raw_layers   F32 (L, T, T)  networkx on the graph of layers 0..l
                       alone, from (0, j) to (l + 1, i), normalised as flow / raw
    grad_layers        F32 (L, T, T)  R_l of grad, the same dA (torch.autograd)
and tests/ref/fixtures/attrib/random_flow.safetensors: random sparse attention
(attentions (L, H, T, T)) with its flow_raw and flow by networkx (random_flow_case), and
random_flow_layers.safetensors: its flow_raw_layers and flow_layers (L, T, T) as above.

What it does not: change the model fixtures; `make fixtures` runs it after gen_grads.py.
Run (deterministic): /usr/bin/python3 tests/ref/gen_attrib.py
"""
import os
import sys

import networkx as nx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_grads  # noqa: E402
from gen_models import st_read, st_write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "attrib")
GENERATOR = "tests/ref/gen_attrib.py"
FIXTURES = ("bert", "gpt2", "llama_bf16", "bert_noprefix_mlm")
CASE = "single"

torch.set_num_threads(1)


def residual_mean(Al):
    """Â (T, T) of one layer's attention (H, T, T)."""
    T = Al.shape[-1]
    a = 0.5 * Al.mean(0) + 0.5 * torch.eye(T, dtype=Al.dtype)
    return a / a.sum(-1, keepdim=True)


def rollout(A):
    R = torch.eye(A.shape[-1], dtype=A.dtype)
    for l in range(A.shape[0]):
        R = residual_mean(A[l]) @ R
    return R


def flow(A):
    L, T = A.shape[0], A.shape[-1]
    G = nx.DiGraph()
    for l in range(L):
        ah = residual_mean(A[l])
        for i in range(T):
            for j in range(T):
                G.add_edge((l, j), (l + 1, i), capacity=float(ah[i, j]))
    raw = torch.zeros(T, T, dtype=torch.float64)
    for i in range(T):
        for j in range(T):
            raw[i, j] = nx.maximum_flow_value(G, (0, j), (L, i))
    z = raw.sum(-1, keepdim=True)
    return raw, torch.where(z > 0, raw / z, torch.zeros_like(raw))


def grad_weighted(A, dA):
    R = torch.eye(A.shape[-1], dtype=A.dtype)
    for l in range(A.shape[0]):
        R = R + (dA[l] * A[l]).clamp(min=0).mean(0) @ R
    return R


def layers_case(name, A, dA):
    """Every layer's cumulative map: layer l from A's (and dA's) layers 0..l alone."""
    L = A.shape[0]
    roll = torch.stack([rollout(A[:l + 1]) for l in range(L)])
    grad = torch.stack([grad_weighted(A[:l + 1], dA[:l + 1]) for l in range(L)])
    fl = [flow(A[:l + 1]) for l in range(L)]
    raw, norm = torch.stack([f[0] for f in fl]), torch.stack([f[1] for f in fl])
    assert (roll[-1] - rollout(A)).abs().max() == 0 and (grad[-1] - grad_weighted(A, dA)).abs().max() == 0
    path = os.path.join(OUT_DIR, f"{name}_layers.safetensors")
    st_write(path, [("rollout_layers", roll, "F32"), ("flow_layers", norm, "F32"), ("flow_raw_layers", raw, "F32"),
                    ("grad_layers", grad, "F32")],
             {"generator": GENERATOR, "case": CASE, "fixture": name})
    print(f"{name + '_layers':12s} L={L} -> {os.path.getsize(path)} bytes")


def importance(A, dA):
    return (A * dA).sum((-1, -2)).abs()


def head_out(P, c, meta, l):
    """W_o of layer l as (H Dh, D): row block h is W_o^h."""
    gen, arch = meta["generator"], meta["arch"]
    if gen == "tests/ref/gen_llama.py":
        return P[f"{meta['prefix']}layers.{l}.self_attn.o_proj.weight"].T
    if arch == "gpt2":
        return P[f"transformer.h.{l}.attn.c_proj.weight"]
    pre = "bert." if "bert.encoder.layer.0.attention.output.dense.weight" in P else ""
    return P[f"{pre}encoder.layer.{l}.attention.output.dense.weight"].T


def norm_based(A, V, P, c, meta):
    L, H, T, Dh = V.shape
    N = torch.zeros_like(A)
    for l in range(L):
        W = head_out(P, c, meta, l).double()
        for h in range(H):
            f = V[l, h] @ W[h * Dh:(h + 1) * Dh]  # (T, D)
            N[l, h] = A[l, h] * f.norm(dim=-1)[None, :]
    return N


def explained_grad(run, P, table, ids, tt, mask, kind):
    """(target, position, logit, dy/dA) in float64 for C's default logit."""
    Pd = {k: v.double() for k, v in P.items()}
    E = Pd[table][ids].clone().requires_grad_(True)  # builds the graph through the probabilities
    logits, probs = run(Pd, ids, tt, mask, E)
    if kind == "classifier":
        pos, row = 0, logits[0]  # bert reads [CLS]
    else:
        pos = int(torch.nonzero(mask != 0)[-1, 0])
        row = logits[pos]
    tgt = int(row.argmax())
    g = torch.autograd.grad(row[tgt], list(probs))
    dA = torch.stack([x.reshape(x.shape[-3:]) for x in g])
    return tgt, pos, float(row[tgt]), dA


def random_flow_case():
    """Random sparse attention (L = 4, H = 2, T = 12, about 70% of the weights 0, rows
    normalised) whose max-flows need augmenting paths through reverse arcs: every raw
    max-flow value by networkx, for the C max-flow alone."""
    g = torch.Generator().manual_seed(77)
    L, H, T = 4, 2, 12
    A = torch.rand(L, H, T, T, generator=g, dtype=torch.float64)
    A = A * (torch.rand(L, H, T, T, generator=g, dtype=torch.float64) < 0.3)
    A[..., 0] += 1e-3  # no empty row
    A = (A / A.sum(-1, keepdim=True)).float()
    raw, fl = flow(A.double())
    path = os.path.join(OUT_DIR, "random_flow.safetensors")
    st_write(path, [("attentions", A, "F32"), ("flow_raw", raw, "F32"), ("flow", fl, "F32")],
             {"generator": GENERATOR, "case": "random sparse attention, seed 77"})
    print(f"random_flow  L={L} H={H} T={T} |flow_raw| max {raw.max().item():.4f} min {raw.min().item():.4f} "
          f"-> {os.path.getsize(path)} bytes")
    fl = [flow(A[:l + 1].double()) for l in range(L)]
    path = os.path.join(OUT_DIR, "random_flow_layers.safetensors")
    st_write(path, [("flow_raw_layers", torch.stack([f[0] for f in fl]), "F32"),
                    ("flow_layers", torch.stack([f[1] for f in fl]), "F32")],
             {"generator": GENERATOR, "case": "random sparse attention, seed 77, every layer"})


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    random_flow_case()
    for name in FIXTURES:
        c, P, exp, meta = gen_grads.load(name)
        table, run = gen_grads.make_runner(c, P, meta)
        grads = st_read(os.path.join(gen_grads.MODELS_DIR, name, "grads.safetensors"))
        ids = exp[f"{CASE}.input_ids"].long()
        mask = exp[f"{CASE}.attention_mask"].long()
        tt = exp[f"{CASE}.token_type_ids"].long()
        kind = meta["logits_head"]
        A = exp[f"{CASE}.attentions"].double()
        V = exp[f"{CASE}.values"].double()
        tgt, pos, logit, dA = explained_grad(run, P, table, ids, tt, mask, kind)
        dA_sum = grads[f"{CASE}.d_attentions"].double()
        if kind == "classifier":  # the same logit as gen_grads.py's objective when it is class 1
            same = int(grads[f"{CASE}.targets"][0]) == tgt
            d = (dA - dA_sum).abs().max().item()
            print(f"{name}: predicted class {tgt}; grads.safetensors explains class "
                  f"{int(grads[f'{CASE}.targets'][0])}; d_attentions diff {d:.1e}")
            assert not same or d < 1e-9
        raw, fl = flow(A)
        # the max-flow cannot exceed the sink's in-capacity (rows of Â sum to 1)
        assert (raw <= 1 + 1e-9).all() and (raw >= 0).all()
        out = [("target", torch.tensor([tgt]), "I32"), ("position", torch.tensor([pos]), "I32"),
               ("logit", torch.tensor([logit]), "F32"),
               ("rollout", rollout(A), "F32"), ("flow", fl, "F32"), ("flow_raw", raw, "F32"),
               ("norm", norm_based(A, V, P, c, meta), "F32"),
               ("grad", grad_weighted(A, dA), "F32"), ("importance", importance(A, dA), "F32"),
               ("d_attentions", dA, "F32"),
               ("grad_objective", grad_weighted(A, dA_sum), "F32"),
               ("importance_objective", importance(A, dA_sum), "F32")]
        path = os.path.join(OUT_DIR, f"{name}.safetensors")
        st_write(path, out, {"generator": GENERATOR, "case": CASE, "fixture": name})
        layers_case(name, A, dA)
        print(f"{name:12s} {kind:10s} T={A.shape[-1]} L={A.shape[0]} H={A.shape[1]} target {tgt} "
              f"at {pos} logit {logit:+.5f}  |flow_raw| max {raw.max().item():.4f}  "
              f"-> {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
