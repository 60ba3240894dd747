#!/usr/bin/python3
"""attrib_torch.py — the reference side of bench/attrib_bench.sh: attribution methods on
the BERT-base-sized random classifier (bench/make_checkpoint.py), on the token ids of
`attnscope bench --tokens T` (its seeded LCG), in PyTorch / networkx, one process.

Modes (each prints `key value` lines that attrib_bench.sh collects):
  --time T      one warm-up, then --repeat rounds of: the forward with full capture
                (bench/torch_ref.py's tuned_forward), rollout (float64 torch, as
                tests/ref/gen_attrib.py) and norm-based attention (Kobayashi et al. 2020:
                A[l, h, i, j] ||v_lh[j] W_o^h||, float32 torch) on that forward's tensors;
                median ms of each and each method's ratio to the forward.
  --flow T      networkx.maximum_flow_value (default flow function, preflow-push) on the
                layered graph of tests/ref/gen_attrib.py for --pairs (output i, input j)
                pairs of one output row i; median seconds per pair and that times T^2 (the
                extrapolated cost of every pair). With --npz FILE (`attnscope attribute
                --method flow --format npz` on the same ids), the max abs difference of
                those pairs' flows normalised over the pairs taken.
  --alti T      the naive ALTI (Ferrando et al. 2022, as mt-upc/transformer-contributions
                computes it): per layer the (T, T, D) tensor of every T_i(x_j) at once,
                post-LN decomposition of attrib_mix.c, F32 (--f64: float64); prints its
                wall and CPU seconds, the T^2 D bytes of one layer's tensor and the
                process's peak RSS. With --npz FILE
                (`attnscope attribute --method alti --format npz`), the max abs difference
                of the aggregated ALTI.
  --check-npz rollout=FILE,norm=FILE   with --time: max abs difference against attnscope.
"""
import argparse, json, os, resource, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from gen_models import st_read  # noqa: E402
from torch_ref import bench_ids, prepare, tuned_forward  # noqa: E402


def residual_mean(Al):
    """Â (T, T) of one layer's attention (H, T, T) (tests/ref/gen_attrib.py)."""
    T = Al.shape[-1]
    a = 0.5 * Al.mean(0) + 0.5 * torch.eye(T, dtype=Al.dtype)
    return a / a.sum(-1, keepdim=True)


def rollout(attn):
    """attn: list of L (H, T, T) float32 -> R (T, T) float64."""
    R = torch.eye(attn[0].shape[-1], dtype=torch.float64)
    for A in attn:
        R = residual_mean(A.double()) @ R
    return R


def head_out(W, l, H):
    """W_o^h (H, Dh, D): head h's rows of the output projection (x W_o^T: wo_t (D, D))."""
    wo_t = W["layers"][l]["wo_t"]
    D = wo_t.shape[0]
    return wo_t.reshape(H, D // H, D)


def norm_based(W, out, H):
    """N (L, H, T, T) = A[l, h, i, j] ||v_lh[j] W_o^h|| (Kobayashi et al. 2020, eq. 6)."""
    N = []
    for l, (A, v) in enumerate(zip(out["attentions"], out["values"])):
        f = torch.bmm(v, head_out(W, l, H))  # (H, T, D)
        N.append(A * f.norm(dim=-1).unsqueeze(1))
    return torch.stack(N)


def load(model):
    c = json.load(open(os.path.join(model, "config.json")))
    P = st_read(os.path.join(model, "model.safetensors"))
    return c, P, prepare(P, c)


def forward(W, c, T):
    ids = bench_ids(T, c["vocab_size"])
    return tuned_forward(W, c, ids, torch.zeros(T, dtype=torch.long), torch.ones(T, dtype=torch.long))


def npz(path, key):
    """Array `key` of attnscope's npz (beside input_ids and the token strings)."""
    return torch.from_numpy(np.load(path)[key])


def mode_time(a, c, W):
    H, T = c["num_attention_heads"], a.time
    names = ("forward", "rollout", "norm")
    ms, cpu = {k: [] for k in names}, {k: [] for k in names}
    with torch.inference_mode():
        for r in range(a.repeat + 1):
            t, p = [time.perf_counter()], [time.process_time()]
            out = forward(W, c, T)
            t.append(time.perf_counter()), p.append(time.process_time())
            R = rollout(out["attentions"])
            t.append(time.perf_counter()), p.append(time.process_time())
            N = norm_based(W, out, H)
            t.append(time.perf_counter()), p.append(time.process_time())
            for k, n in enumerate(names if r else ()):
                ms[n].append((t[k + 1] - t[k]) * 1e3)
                cpu[n].append((p[k + 1] - p[k]) * 1e3)
    med = {k: float(np.median(v)) for k, v in ms.items()}
    cmed = {k: float(np.median(v)) for k, v in cpu.items()}
    print("torch_threads %d" % torch.get_num_threads())
    for k in names:
        print("%s median_ms %.2f  cpu_median_ms %.2f" % (k, med[k], cmed[k]) + ("" if k == "forward" else
              "  of_forward %.1f%%  cpu_of_forward %.1f%%" % (100 * med[k] / med["forward"], 100 * cmed[k] / cmed["forward"])))
    print("rollout+norm of_forward %.1f%%  cpu_of_forward %.1f%%" % (
        100 * (med["rollout"] + med["norm"]) / med["forward"], 100 * (cmed["rollout"] + cmed["norm"]) / cmed["forward"]))
    for item in filter(None, (a.check_npz or "").split(",")):
        name, path = item.split("=", 1)
        ref = R if name == "rollout" else N
        got = npz(path, name)
        print("check %s max_abs_diff %.3g (max %.3g)" % (name, (got.double() - ref.double()).abs().max().item(),
                                                         ref.abs().max().item()))


def mode_flow(a, c, W):
    import networkx as nx
    T = a.flow
    with torch.inference_mode():
        out = forward(W, c, T)
    A = [x.double() for x in out["attentions"]]
    L = len(A)
    G = nx.DiGraph()
    for l in range(L):
        ah = residual_mean(A[l]).numpy()
        for i in range(T):
            for j in range(T):
                G.add_edge((l, j), (l + 1, i), capacity=float(ah[i, j]))
    i = T // 2
    js = np.linspace(0, T - 1, a.pairs).round().astype(int)
    sec, raw = [], []
    for j in js:
        t0 = time.perf_counter()
        raw.append(nx.maximum_flow_value(G, (0, int(j)), (L, i)))
        sec.append(time.perf_counter() - t0)
    per = float(np.median(sec))
    print("flow_graph nodes %d edges %d" % (G.number_of_nodes(), G.number_of_edges()))
    print("networkx_pairs %d  output_row %d  median_s_per_pair %.3f  extrapolated_all_pairs_s %.0f"
          % (len(js), i, per, per * T * T))
    if a.npz:
        F = npz(a.npz, "flow").double()
        got = F[i, js] / F[i, js].sum()
        ref = torch.tensor(raw, dtype=torch.float64)
        print("check flow (row %d, pairs taken, normalised over them) max_abs_diff %.3g" % (i, (got - ref / ref.sum()).abs().max().item()))
        print("networkx raw flows", " ".join("%.6f" % x for x in raw))


def mode_alti(a, c, W):
    """Naive ALTI: per layer C (T, T) from the full (T, T, D) tensor of T_i(x_j)."""
    H, T, eps = c["num_attention_heads"], a.alti, c["layer_norm_eps"]
    dt = torch.float64 if a.f64 else torch.float32
    with torch.inference_mode():
        out = forward(W, c, T)
        t0, p0 = time.perf_counter(), time.process_time()
        R = None
        for l, lw in enumerate(W["layers"]):
            A, v, x = (out[k][l].to(dt) for k in ("attentions", "values", "hidden_states"))
            f = torch.bmm(v, head_out(W, l, H).to(dt))        # (H, T, D) f_h(x_j)
            s = torch.einsum("hij,hjd->ijd", A, f)             # (T, T, D) s_ij: materialised
            s[torch.arange(T), torch.arange(T)] += x           # z_ij = s_ij + δ_ij x_i
            u = s.sum(1) + lw["bo"].to(dt)                     # (T, D)
            g, b = (t.to(dt) for t in lw["ln1"])
            sig = (u.var(-1, unbiased=False, keepdim=True) + eps).sqrt()  # (T, 1)
            Tij = (s - s.mean(-1, keepdim=True)) / sig.unsqueeze(1) * g   # (T, T, D)
            xt = (u - u.mean(-1, keepdim=True)) / sig * g + b              # x̃_i (T, D)
            dist = (xt.unsqueeze(1) - Tij).abs().sum(-1)                  # (T, T)
            Cl = (xt.abs().sum(-1, keepdim=True) - dist).clamp(min=0)
            Cl = Cl / Cl.sum(-1, keepdim=True)
            R = Cl.double() if R is None else Cl.double() @ R
            del s, Tij
        sec, cpu = time.perf_counter() - t0, time.process_time() - p0
    D = c["hidden_size"]
    print("naive_alti %s  s %.2f  cpu_s %.2f  one_layer_T2D_bytes %d (%.0f MB)  peak_rss_mb %.0f"
          % ("f64" if a.f64 else "f32", sec, cpu, T * T * D * (8 if a.f64 else 4), T * T * D * (8 if a.f64 else 4) / 2**20,
             resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    if a.npz:
        got = npz(a.npz, "alti").double()
        print("check alti (aggregated, last layer) max_abs_diff %.3g" % (got[-1] - R).abs().max().item())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--time", type=int, default=0, metavar="T")
    ap.add_argument("--flow", type=int, default=0, metavar="T")
    ap.add_argument("--alti", type=int, default=0, metavar="T")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--npz")
    ap.add_argument("--f64", action="store_true", help="--alti in float64 (the value check)")
    ap.add_argument("--check-npz")
    ap.add_argument("--print-ids", type=int, default=0, metavar="T")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    if a.print_ids:
        c = json.load(open(os.path.join(a.model, "config.json")))
        print(",".join(str(int(x)) for x in bench_ids(a.print_ids, c["vocab_size"])))
        return
    c, P, W = load(a.model)
    del P
    if a.time:
        mode_time(a, c, W)
    if a.flow:
        mode_flow(a, c, W)
    if a.alti:
        mode_alti(a, c, W)


if __name__ == "__main__":
    main()
