#!/usr/bin/python3
"""saliency_torch.py — the PyTorch reference side of bench/saliency_bench.sh: gradient
saliency of a BERT sequence classifier's predicted class (what `attnscope saliency` and
`attnscope bench --saliency` compute): the forward, then torch.autograd.grad of the
predicted logit with respect to the word embeddings, and the L1 norm of each token's
gradient. Same token ids as `attnscope bench` (its seeded LCG), token types 0, no
padding.

The forward is bench/torch_ref.py's tuned one (one fused QKV product per layer by
torch.addmm on the concatenated [3D, D] weight, built once before timing; q/k/v as views;
F.layer_norm), keeping nothing but what autograd needs: no captures, no in-place GELU
(autograd saves its input). autograd.grad with inputs=[the embeddings] computes only the
gradients that lead there (no weight gradients), as attnscope's backward does.

Timing: for each --tokens T and each --threads N (torch.set_num_threads, one process),
one warm-up, then --repeat timed calls; one line per (T, N):
    T 128 threads 1 interop 1 openblas 1 wait PASSIVE impl saliency median_ms .. min_ms .. peak_rss_mb ..
The environment (OPENBLAS_NUM_THREADS, OMP_WAIT_POLICY) is only reported; the driver
(bench/saliency_bench.py) sets it per process.

--dtype bfloat16: the weights cast to bfloat16 once and the whole computation in it
(CPU matmuls through oneDNN's BF16 kernels where the CPU has them), the precision of
`attnscope bench --saliency --precision bf16`; default float32.

--check T --json FILE: the scores and logits against `attnscope saliency --ids ...
--format json` on the ids of --print-ids T (max abs and max relative difference).

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/saliency_torch.py --model DIR --tokens 128,512 --threads 1,2
"""
import argparse, json, math, os, resource, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from gen_models import st_read  # noqa: E402
from torch_ref import bench_ids, prepare  # noqa: E402


def saliency(W, c, ids):
    """(scores (T,), logits (C,)): L1 over the width of d logit[pred] / d word embedding."""
    H, eps, D = c["num_attention_heads"], c["layer_norm_eps"], c["hidden_size"]
    T, Dh = ids.shape[0], D // H
    e = W["wte"][ids].requires_grad_(True)
    h = e + W["wtt"][0] + W["wpe"][:T]
    h = F.layer_norm(h, (D,), *W["ln0"], eps)
    scale = 1.0 / math.sqrt(Dh)
    for lw in W["layers"]:
        qkv = torch.addmm(lw["bqkv"], h, lw["wqkv_t"]).view(T, 3, H, Dh).permute(1, 2, 0, 3)
        s = torch.bmm(qkv[0], qkv[1].transpose(1, 2)).mul_(scale)  # no padding: no mask
        p = torch.softmax(s, -1)
        ctx = torch.bmm(p, qkv[2]).transpose(0, 1).reshape(T, D)
        a = torch.addmm(lw["bo"], ctx, lw["wo_t"])
        a += h
        a = F.layer_norm(a, (D,), *lw["ln1"], eps)
        i = F.gelu(torch.addmm(lw["b1"], a, lw["w1_t"]))
        o = torch.addmm(lw["b2"], i, lw["w2_t"])
        o += a
        h = F.layer_norm(o, (D,), *lw["ln2"], eps)
    pooled = torch.tanh(torch.addmm(W["bp"], h[:1], W["wp_t"]))
    logits = torch.addmm(W["bc"], pooled, W["wc_t"])[0]
    pred = int(logits.argmax())
    (g,) = torch.autograd.grad(logits[pred], e)
    return g.abs().sum(-1), logits.detach()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", default="128", help="comma-separated token counts")
    ap.add_argument("--threads", default="1", help="comma-separated torch.set_num_threads values")
    ap.add_argument("--interop", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--check", type=int, default=0, metavar="T")
    ap.add_argument("--json", help="attnscope saliency's JSON for --check")
    ap.add_argument("--print-ids", type=int, default=0, metavar="T")
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    a = ap.parse_args()
    c = json.load(open(os.path.join(a.model, "config.json")))
    if a.print_ids:
        print(",".join(str(int(x)) for x in bench_ids(a.print_ids, c["vocab_size"])))
        return
    torch.set_num_interop_threads(a.interop)
    W = prepare(st_read(os.path.join(a.model, "model.safetensors")), c)
    if a.dtype == "bfloat16":
        cast = lambda v: (v.to(torch.bfloat16) if isinstance(v, torch.Tensor) else
                          tuple(cast(x) for x in v) if isinstance(v, tuple) else
                          [cast(x) for x in v] if isinstance(v, list) else {k: cast(x) for k, x in v.items()})
        W = cast(W)  # .to keeps the strides: the transposed weights stay [out, in] in memory
    if a.check:
        sc, lg = saliency(W, c, bench_ids(a.check, c["vocab_size"]))
        j = json.load(open(a.json))
        mine = torch.tensor([t["score"] for t in j["tokens"]], dtype=torch.float64)
        d = float((mine - sc.double()).abs().max())
        print("check T %d, saliency scores vs attnscope: max abs diff %.2e (max score %.3g, rel %.2e), "
              "logits %.2e" % (a.check, d, float(sc.abs().max()), d / float(sc.abs().max()),
                               float((torch.tensor(j["logits"]) - lg).abs().max())))
        return
    env = "dtype %s openblas %s wait %s" % (a.dtype, os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
                                   os.environ.get("OMP_WAIT_POLICY", "unset"))
    for T in (int(x) for x in a.tokens.split(",")):
        ids = bench_ids(T, c["vocab_size"])
        for n in (int(x) for x in a.threads.split(",")):
            torch.set_num_threads(n)
            times = []
            for r in range(a.repeat + 1):
                t0 = time.perf_counter()
                out = saliency(W, c, ids)
                dt = (time.perf_counter() - t0) * 1e3
                del out
                if r:
                    times.append(dt)
            times.sort()
            k = len(times)
            med = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            print("T %d threads %d interop %d %s impl saliency median_ms %.2f min_ms %.2f peak_rss_mb %.1f torch %s"
                  % (T, n, a.interop, env, med, times[0], rss, torch.__version__), flush=True)


if __name__ == "__main__":
    main()
