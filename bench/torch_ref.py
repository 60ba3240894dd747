#!/usr/bin/python3
"""torch_ref.py — the PyTorch reference side of bench/run.sh: one BERT forward with full
capture (queries, keys, values, raw scores, probabilities and hidden states of every
layer, plus the classifier logits), on the same token ids as `attnscope bench` (its
seeded LCG), in eager PyTorch under torch.inference_mode().

Two implementations of the same computation:
  tuned  (default) Hugging Face BERT's eager computation with the copies removed: one
         fused QKV product per layer (torch.addmm on the concatenated [3D, D] weight),
         q/k/v kept as views of that product, scores by one torch.baddbmm (scale and
         additive mask folded in), residual adds and GELU in place on tensors nobody
         captures, F.layer_norm, per-layer captures kept as they are (no final stack).
  old    tests/ref/gen_models.py:bert_forward, the parity fixtures' reference (three
         F.linear per layer, torch.stack of every capture at the end).

Timing: for each --tokens T and each --threads N (torch.set_num_threads, one process),
one warm-up forward, then --repeat timed ones; one line per (T, N):
    T 128 threads 1 interop 1 openblas 1 wait PASSIVE impl tuned median_ms .. min_ms .. peak_rss_mb ..
(peak RSS is the process's so far). --interop sets torch.set_num_interop_threads.
The environment (OPENBLAS_NUM_THREADS, OMP_WAIT_POLICY) is only reported; bench/run.sh
sets it per process.

--check T: runs both implementations once on T tokens and prints the max abs
difference of every captured tensor; with --npz FILE (`attnscope run --ids ... --format
npz` on the ids printed by --print-ids T) also the tuned reference against attnscope.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model DIR --tokens 128,512 --threads 1,2
"""
import argparse, json, math, os, resource, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from gen_models import bert_forward, st_read  # noqa: E402


def bench_ids(T, V):
    """The ids of `attnscope bench --tokens T` (src/cli/cmd_bench.c's LCG)."""
    seed, ids = 12345, []
    for _ in range(T):
        seed = (seed * 1664525 + 1013904223) & 0xFFFFFFFF
        ids.append(5 + (seed >> 8) % (V - 5))
    return torch.tensor(ids)


def prepare(P, c, pre="bert."):
    """Weights regrouped for the tuned forward: per layer the fused [3D, D] QKV weight
    and [3D] bias (concatenated once, outside the timing), the rest borrowed."""
    L = c["num_hidden_layers"]
    g = lambda n: P[pre + n]
    layers = []
    for l in range(L):
        b = "encoder.layer.%d." % l
        w = lambda n: g(b + n + ".weight")
        bi = lambda n: g(b + n + ".bias")
        qkv = ("attention.self.query", "attention.self.key", "attention.self.value")
        layers.append({
            "wqkv_t": torch.cat([w(n) for n in qkv]).t(), "bqkv": torch.cat([bi(n) for n in qkv]),
            "wo_t": w("attention.output.dense").t(), "bo": bi("attention.output.dense"),
            "ln1": (w("attention.output.LayerNorm"), bi("attention.output.LayerNorm")),
            "w1_t": w("intermediate.dense").t(), "b1": bi("intermediate.dense"),
            "w2_t": w("output.dense").t(), "b2": bi("output.dense"),
            "ln2": (w("output.LayerNorm"), bi("output.LayerNorm"))})
    return {"wte": g("embeddings.word_embeddings.weight"), "wpe": g("embeddings.position_embeddings.weight"),
            "wtt": g("embeddings.token_type_embeddings.weight"),
            "ln0": (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias")),
            "layers": layers, "wp_t": g("pooler.dense.weight").t(), "bp": g("pooler.dense.bias"),
            "wc_t": P["classifier.weight"].t(), "bc": P["classifier.bias"]}


def tuned_forward(W, c, ids, tt, mask):
    """BertForSequenceClassification, eval mode, one sequence of T tokens. Returns lists
    per layer: queries, keys, values (H, T, Dh) (views of the fused projection),
    attention_scores and attentions (H, T, T); hidden_states (L+1 tensors of (T, D));
    logits (1, C). Mask semantics of modeling_utils.get_extended_attention_mask."""
    H, eps, D = c["num_attention_heads"], c["layer_norm_eps"], c["hidden_size"]
    T, Dh = ids.shape[0], D // H
    h = F.embedding(ids, W["wte"])
    h += F.embedding(tt, W["wtt"])
    h += W["wpe"][:T]
    h = F.layer_norm(h, (D,), *W["ln0"], eps)
    am = ((1.0 - mask.to(torch.float32)) * torch.finfo(torch.float32).min).view(1, 1, T)
    scale = 1.0 / math.sqrt(Dh)
    out = {k: [] for k in ("queries", "keys", "values", "attention_scores", "attentions")}
    hs = [h]
    for lw in W["layers"]:
        qkv = torch.addmm(lw["bqkv"], h, lw["wqkv_t"]).view(T, 3, H, Dh).permute(1, 2, 0, 3)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (H, T, Dh) views
        s = torch.baddbmm(am, q, k.transpose(1, 2), alpha=scale)
        p = torch.softmax(s, -1)
        ctx = torch.bmm(p, v).transpose(0, 1).reshape(T, D)
        a = torch.addmm(lw["bo"], ctx, lw["wo_t"])
        a += h
        a = F.layer_norm(a, (D,), *lw["ln1"], eps)
        i = torch.addmm(lw["b1"], a, lw["w1_t"])
        torch._C._nn.gelu_(i)  # erf form, as F.gelu
        o = torch.addmm(lw["b2"], i, lw["w2_t"])
        o += a
        h = F.layer_norm(o, (D,), *lw["ln2"], eps)
        for key, val in zip(out, (q, k, v, s, p)):
            out[key].append(val)
        hs.append(h)
    out["hidden_states"] = hs
    pooled = torch.tanh(torch.addmm(W["bp"], h[:1], W["wp_t"]))
    out["logits"] = torch.addmm(W["bc"], pooled, W["wc_t"])
    return out


def maxdiff(x, y):
    x = torch.stack(x) if isinstance(x, list) else x
    y = torch.stack(y) if isinstance(y, list) else y
    return float((x.reshape(y.shape).double() - y.double()).abs().max())


def check(P, W, c, T, npz):
    ids = bench_ids(T, c["vocab_size"])
    tt = torch.zeros(T, dtype=torch.long)
    mask = torch.ones(T, dtype=torch.long)
    with torch.inference_mode():
        new = tuned_forward(W, c, ids, tt, mask)
        old = bert_forward(P, c, "bert.", ids, tt, mask)
    keys = ("attentions", "attention_scores", "queries", "keys", "values", "hidden_states", "logits")
    print("check T %d, tuned vs old reference, max abs diff: %s" % (
        T, "  ".join("%s %.2e" % (k, maxdiff(new[k], old[k])) for k in keys)))
    if npz:
        import numpy as np
        z = np.load(npz)
        if not torch.equal(torch.from_numpy(z["input_ids"].astype("int64")), ids):
            sys.exit("torch_ref: %s was not run on the ids of --print-ids %d" % (npz, T))
        print("check T %d, tuned vs attnscope (%s), max abs diff: %s" % (
            T, os.path.basename(npz),
            "  ".join("%s %.2e" % (k, maxdiff(new[k], torch.from_numpy(z[k]))) for k in keys)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", default="128", help="comma-separated token counts")
    ap.add_argument("--threads", default="1", help="comma-separated torch.set_num_threads values")
    ap.add_argument("--interop", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--impl", choices=("tuned", "old"), default="tuned")
    ap.add_argument("--check", type=int, default=0, metavar="T")
    ap.add_argument("--npz", help="attnscope's npz for --check")
    ap.add_argument("--print-ids", type=int, default=0, metavar="T")
    a = ap.parse_args()
    c = json.load(open(os.path.join(a.model, "config.json")))
    if a.print_ids:
        print(",".join(str(int(x)) for x in bench_ids(a.print_ids, c["vocab_size"])))
        return
    torch.set_num_interop_threads(a.interop)
    P = st_read(os.path.join(a.model, "model.safetensors"))
    W = prepare(P, c)
    if a.check:
        check(P, W, c, a.check, a.npz)
        return
    env = "openblas %s wait %s" % (os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
                                   os.environ.get("OMP_WAIT_POLICY", "unset"))
    for T in (int(x) for x in a.tokens.split(",")):
        ids = bench_ids(T, c["vocab_size"])
        tt = torch.zeros(T, dtype=torch.long)
        mask = torch.ones(T, dtype=torch.long)
        for n in (int(x) for x in a.threads.split(",")):
            torch.set_num_threads(n)
            times = []
            with torch.inference_mode():
                for r in range(a.repeat + 1):
                    t0 = time.perf_counter()
                    if a.impl == "tuned":
                        out = tuned_forward(W, c, ids, tt, mask)
                    else:
                        out = bert_forward(P, c, "bert.", ids, tt, mask)
                    dt = (time.perf_counter() - t0) * 1e3
                    del out
                    if r:
                        times.append(dt)
            times.sort()
            k = len(times)
            med = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            print("T %d threads %d interop %d %s impl %s median_ms %.2f min_ms %.2f peak_rss_mb %.1f torch %s"
                  % (T, n, a.interop, env, a.impl, med, times[0], rss, torch.__version__), flush=True)


if __name__ == "__main__":
    main()
