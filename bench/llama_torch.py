#!/usr/bin/python3
"""llama_torch.py — the PyTorch side of bench/llama_bench.sh: one Llama prefill (all T
tokens through every layer, the final norm and the untied LM head), keeping the
attention probabilities of one layer (--layer) and the logits, on the same token ids as
`attnscope bench` (its seeded LCG), in eager PyTorch under torch.inference_mode().

The computation is Hugging Face's LlamaForCausalLM (modeling_llama.py, eager attention),
written the way a careful PyTorch user would write it for one sequence:
  - RMSNorm in float32, the result cast back to the activations' dtype before the weight
    (LlamaRMSNorm);
  - rotary embedding with rotate_half, inv_freq = theta^(-2i/Dh) with theta from
    config.json (LlamaRotaryEmbedding, no scaling), cos/sin computed once per forward;
  - one product for q, k and v (the [Qw + 2 Kw, D] weight concatenated once at load) and
    one for gate and up ([2F, D]); SwiGLU down(silu(gate) * up) with silu and the product
    in place;
  - grouped-query attention without repeat_kv's copy of K and V: the G = H / Hkv query
    heads of a key/value head are stacked as (Hkv, G*T, Dh), and one torch.baddbmm per
    layer gives all scores with the 1/sqrt(Dh) scale and the causal mask (finfo.min above
    the diagonal, as HF) folded in; softmax in float32, cast to the activations' dtype
    (as HF); one bmm with V;
  - residual adds in place (nothing captures the hidden states).
Layer --layer's probabilities (H, T, T) are kept as they are (a view, no copy); logits
(T, V) from the LM head, as HF's prefill.

--dtype:
  f32    float32 weights and activations (OpenBLAS sgemm)
  bf16   bfloat16 weights and activations (torch's CPU bf16 path: oneDNN in 1.13);
         RMSNorm and softmax in float32 as HF
  bf16w  bfloat16-stored weights, float32 activations: each product widens its weight
         (w.float()) on use, the fallback when the bf16 kernels are slow
Weights come from the checkpoint of bench/make_llama_checkpoint.py (BF16 or F32
safetensors; BF16 -> float32 by bits << 16), read with numpy into memory (as
from_pretrained does; the file is not kept mapped).

Timing: for each --tokens T and each --threads N (torch.set_num_threads), one warm-up
forward, then --repeat timed ones; one line per (T, N):
    T 512 threads 2 interop 1 openblas unset wait PASSIVE dtype f32 capture attn median_ms .. min_ms .. peak_rss_mb ..
--capture none keeps only the logits (the tokens/s figure); --capture attn,none times
both in turn (one warm-up each).
--generate N: greedy generation of N tokens after each --tokens prompt on a key/value
cache (forward_kv: the prompt in one forward, then one token per step, as transformers'
generate with a static cache), the best of --repeat: min_ms, tokens/s and the first ids.
With --beams B: transformers' beam search instead (beam_search: the B beams' steps as one
batch, caches reordered by index_select), the best hypothesis' first ids.
--check T --npz FILE: prints the max abs difference of layer --layer's probabilities and
of the logits from `attnscope run --ids (--print-ids T) --layer L --capture attn,logits
--format npz --out FILE`.

    OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/llama_torch.py --model DIR --tokens 512 --threads 2 --layer 8
"""
import argparse, json, math, os, resource, struct, sys, time

import numpy as np
import torch
import torch.nn.functional as F


def bench_ids(T, V):
    """The ids of `attnscope bench --tokens T` (src/cli/cmd_bench.c's LCG)."""
    seed, ids = 12345, []
    for _ in range(T):
        seed = (seed * 1664525 + 1013904223) & 0xFFFFFFFF
        ids.append(5 + (seed >> 8) % (V - 5))
    return torch.tensor(ids)


class Checkpoint:
    """A safetensors file read through numpy: the JSON header parsed here, each tensor read
    (not memory-mapped: the file's pages do not count in this process's RSS) straight into
    its destination."""

    def __init__(self, path):
        self.f = open(path, "rb")
        (n,) = struct.unpack("<Q", self.f.read(8))
        self.header = json.loads(self.f.read(n))
        self.header.pop("__metadata__", None)
        self.base = 8 + n

    def fill(self, name, dst):
        """Reads tensor name into the contiguous torch tensor dst (same number of elements;
        float32 or bfloat16), converting on the way (BF16 -> F32: bits << 16)."""
        info = self.header[name]
        b0, b1 = info["data_offsets"]
        self.f.seek(self.base + b0)
        bf16 = info["dtype"] == "BF16"
        if bf16 == (dst.dtype == torch.bfloat16):  # same storage type: read in place
            buf = dst.view(torch.int16).numpy() if bf16 else dst.numpy()
            self.f.readinto(memoryview(buf.reshape(-1)).cast("B"))
        elif bf16:  # BF16 file -> float32
            tmp = np.empty(dst.numel(), np.uint16)
            self.f.readinto(memoryview(tmp).cast("B"))
            out = dst.numpy().reshape(-1).view(np.uint32)
            out[:] = tmp
            out <<= 16
        else:  # F32 file -> bfloat16 (round to nearest even, torch's conversion)
            tmp = np.empty(dst.numel(), np.float32)
            self.f.readinto(memoryview(tmp).cast("B"))
            dst.copy_(torch.from_numpy(tmp).view(dst.shape))
        assert b1 - b0 == dst.numel() * (2 if bf16 else 4), name
        return dst

    def load(self, names, dtype):
        """The tensors names concatenated along dim 0, in dtype."""
        shapes = [self.header[n]["shape"] for n in names]
        rows = sum(s[0] for s in shapes)
        out = torch.empty([rows] + shapes[0][1:], dtype=dtype)
        r = 0
        for n, s in zip(names, shapes):
            self.fill(n, out[r:r + s[0]])
            r += s[0]
        return out


def load(model, dtype):
    """Weights in the storage dtype of --dtype: per layer the fused qkv and gate/up
    weights, the rest as named."""
    c = json.load(open(os.path.join(model, "config.json")))
    ck = Checkpoint(os.path.join(model, "model.safetensors"))
    wd = torch.float32 if dtype == "f32" else torch.bfloat16
    layers = []
    for l in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % l
        layers.append({
            "ln1": ck.load([p + "input_layernorm.weight"], wd),
            "wqkv": ck.load([p + "self_attn.%s_proj.weight" % x for x in "qkv"], wd),
            "wo": ck.load([p + "self_attn.o_proj.weight"], wd),
            "ln2": ck.load([p + "post_attention_layernorm.weight"], wd),
            "wgu": ck.load([p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"], wd),
            "wd": ck.load([p + "mlp.down_proj.weight"], wd)})
    W = {"wte": ck.load(["model.embed_tokens.weight"], wd), "norm": ck.load(["model.norm.weight"], wd),
         "lm_head": ck.load(["lm_head.weight"], wd), "layers": layers}
    return c, W


def rms_norm(x, w, eps):
    """LlamaRMSNorm: float32 statistics, cast back before the weight."""
    x32 = x.to(torch.float32)
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return w * x32.to(x.dtype)


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def sizes(c, dtype):
    """(H, Hkv, Dh, G, Qw, Kw, Fw, eps, act, lin): the head counts and widths, the
    activations' dtype of --dtype and its linear map."""
    H, Hkv, D = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"]
    Dh = c.get("head_dim") or D // H
    act = torch.float32 if dtype in ("f32", "bf16w") else torch.bfloat16
    lin = (lambda x, w: F.linear(x, w.float())) if dtype == "bf16w" else F.linear
    return H, Hkv, Dh, H // Hkv, H * Dh, Hkv * Dh, c["intermediate_size"], c["rms_norm_eps"], act, lin


def rope_angles(c, Dh, p0, p1):
    """LlamaRotaryEmbedding (default rope type): the angles of positions p0 .. p1 - 1, (p1 - p0, Dh)."""
    inv_freq = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, Dh, 2, dtype=torch.int64).float() / Dh))
    freqs = torch.outer(torch.arange(p0, p1, dtype=torch.float32), inv_freq)
    return torch.cat((freqs, freqs), dim=-1)


def norm_w(w, dtype, act):
    return w.to(act) if dtype == "bf16w" else w


def add_mlp(h, lw, lin, eps, Fw, dtype, act):
    """h += down(silu(gate(x)) * up(x)), x = RMSNorm(h): the SwiGLU sub-layer, in place."""
    x = rms_norm(h, norm_w(lw["ln2"], dtype, act), eps)
    gu = lin(x, lw["wgu"])  # (T, 2F)
    g = F.silu(gu[:, :Fw], inplace=True)
    g *= gu[:, Fw:]
    h += lin(g, lw["wd"])


def forward(W, c, ids, layer, capture, dtype):
    """LlamaForCausalLM prefill of one sequence. Returns (attention probabilities of
    `layer` (H, T, T) or None, logits (T, V))."""
    H, Hkv, Dh, G, Qw, Kw, Fw, eps, act, lin = sizes(c, dtype)
    T = ids.shape[0]
    emb = rope_angles(c, Dh, 0, T)
    cos, sin = emb.cos().to(act), emb.sin().to(act)  # (T, Dh)
    # causal mask, finfo.min above the diagonal, repeated for the G stacked query heads
    mask = torch.full((T, T), torch.finfo(act).min, dtype=act).triu_(1).repeat(G, 1)  # (G*T, T)
    scale = 1.0 / math.sqrt(Dh)
    h = F.embedding(ids, W["wte"]).to(act)
    probs = None
    for l, lw in enumerate(W["layers"]):
        x = rms_norm(h, norm_w(lw["ln1"], dtype, act), eps)
        qkv = lin(x, lw["wqkv"])  # (T, Qw + 2 Kw)
        q = qkv[:, :Qw].view(T, H, Dh).transpose(0, 1)  # (H, T, Dh)
        k = qkv[:, Qw:Qw + Kw].view(T, Hkv, Dh).transpose(0, 1)  # (Hkv, T, Dh)
        v = qkv[:, Qw + Kw:].view(T, Hkv, Dh).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        # query head h reads key/value head h // G (repeat_kv): (Hkv, G*T, Dh)
        s = torch.baddbmm(mask, q.reshape(Hkv, G * T, Dh), k.transpose(1, 2), alpha=scale)
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(act)  # (Hkv, G*T, T)
        ctx = torch.bmm(p, v).view(H, T, Dh).transpose(0, 1).reshape(T, Qw)
        h += lin(ctx, lw["wo"])
        if capture and l == layer:
            probs = p.view(H, T, T)
        add_mlp(h, lw, lin, eps, Fw, dtype, act)
    h = rms_norm(h, norm_w(W["norm"], dtype, act), eps)
    return probs, lin(h, W["lm_head"])


def forward_kv(W, c, ids, pos0, cache, dtype):
    """forward() for the tokens ids at positions pos0 .. pos0 + n - 1 on a key/value cache
    (cache: per layer (K, V), each (Hkv, cap, Dh), preallocated as transformers'
    StaticCache): their keys and values are written at those positions and their queries
    read every key up to their own. Returns the logits of the last token (V)."""
    H, Hkv, Dh, G, Qw, Kw, Fw, eps, act, lin = sizes(c, dtype)
    n = ids.shape[0]
    Tk = pos0 + n
    emb = rope_angles(c, Dh, pos0, Tk)
    cos, sin = emb.cos().to(act), emb.sin().to(act)  # (n, Dh)
    # query i (position pos0 + i) sees keys j <= pos0 + i
    mask = torch.full((n, Tk), torch.finfo(act).min, dtype=act).triu_(pos0 + 1).repeat(G, 1)  # (G*n, Tk)
    scale = 1.0 / math.sqrt(Dh)
    h = F.embedding(ids, W["wte"]).to(act)
    for l, lw in enumerate(W["layers"]):
        x = rms_norm(h, norm_w(lw["ln1"], dtype, act), eps)
        qkv = lin(x, lw["wqkv"])
        q = qkv[:, :Qw].view(n, H, Dh).transpose(0, 1)
        k = qkv[:, Qw:Qw + Kw].view(n, Hkv, Dh).transpose(0, 1)
        v = qkv[:, Qw + Kw:].view(n, Hkv, Dh).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        K, V = cache[l]
        K[:, pos0:Tk] = k * cos + rotate_half(k) * sin
        V[:, pos0:Tk] = v
        s = torch.baddbmm(mask, q.reshape(Hkv, G * n, Dh), K[:, :Tk].transpose(1, 2), alpha=scale)
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(act)
        ctx = torch.bmm(p, V[:, :Tk]).view(H, n, Dh).transpose(0, 1).reshape(n, Qw)
        h += lin(ctx, lw["wo"])
        add_mlp(h, lw, lin, eps, Fw, dtype, act)
    last = rms_norm(h[-1:], norm_w(W["norm"], dtype, act), eps)
    return lin(last, W["lm_head"])[0]


def forward_beams(W, c, ids, pos, cache, dtype):
    """One step of B beams as one batch: ids (B,) at position pos, row b reading beam b's
    cache (per layer (K, V), each (B, Hkv, cap, Dh)); its key and value written at pos.
    Returns the logits (B, V)."""
    H, Hkv, Dh, G, Qw, Kw, Fw, eps, act, lin = sizes(c, dtype)
    B, Tk = ids.shape[0], pos + 1
    emb = rope_angles(c, Dh, pos, Tk)
    cos, sin = emb.cos().to(act), emb.sin().to(act)  # (1, Dh)
    scale = 1.0 / math.sqrt(Dh)
    h = F.embedding(ids, W["wte"]).to(act)
    for l, lw in enumerate(W["layers"]):
        x = rms_norm(h, norm_w(lw["ln1"], dtype, act), eps)
        qkv = lin(x, lw["wqkv"])
        q = qkv[:, :Qw].view(B, Hkv, G, Dh)
        k = qkv[:, Qw:Qw + Kw].view(B, Hkv, Dh)
        K, V = cache[l]
        K[:, :, pos] = k * cos + rotate_half(k) * sin
        V[:, :, pos] = qkv[:, Qw + Kw:].view(B, Hkv, Dh)
        q = q * cos + rotate_half(q) * sin
        s = torch.matmul(q, K[:, :, :Tk].transpose(2, 3)) * scale  # (B, Hkv, G, Tk): every key <= pos
        p = torch.softmax(s, dim=-1, dtype=torch.float32).to(act)
        h += lin(torch.matmul(p, V[:, :, :Tk]).reshape(B, Qw), lw["wo"])
        add_mlp(h, lw, lin, eps, Fw, dtype, act)
    return lin(rms_norm(h, norm_w(W["norm"], dtype, act), eps), W["lm_head"])


def beam_search(W, c, prompt, steps, beams, dtype):
    """transformers' beam search (num_beams = beams, length_penalty 1, early_stopping
    False, batch of one) for at most steps tokens, on key/value caches: the prompt in one
    forward (forward_kv) copied to every beam, then each step every beam's last id as one
    batch (forward_beams), the caches reordered by index_select as _reorder_cache does.
    Returns the best hypothesis' generated ids."""
    H, Hkv, Dh, G, Qw, Kw, Fw, eps, act, lin = sizes(c, dtype)
    P, V = prompt.shape[0], c["vocab_size"]
    cap = P + steps
    eos = c.get("eos_token_id")
    eos = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    one = [(torch.empty(Hkv, cap, Dh, dtype=act), torch.empty(Hkv, cap, Dh, dtype=act)) for _ in W["layers"]]
    logits = forward_kv(W, c, prompt, 0, one, dtype).unsqueeze(0).expand(beams, V)
    cache = [(K.unsqueeze(0).repeat(beams, 1, 1, 1), Vv.unsqueeze(0).repeat(beams, 1, 1, 1)) for K, Vv in one]
    seqs = [[] for _ in range(beams)]
    score = torch.full((beams,), -1e9, dtype=torch.float32)
    score[0] = 0.0
    hyps, keep = [], max(2, 1 + len(eos)) * beams
    for step in range(steps):
        lp = torch.log_softmax(logits.float(), dim=-1) + score[:, None]
        val, idx = torch.topk(lp.reshape(-1), keep)
        parents, toks, nscore = [], [], []
        for r in range(keep):
            b, t = divmod(int(idx[r]), V)
            if t in eos:
                if r < beams:
                    hyps.append((float(val[r]) / (step + 1), seqs[b] + [t]))
                continue
            parents.append(b), toks.append(t), nscore.append(float(val[r]))
            if len(toks) == beams:
                break
        hyps = sorted(hyps, key=lambda x: -x[0])[:beams]
        if len(hyps) == beams and hyps[-1][0] >= float(val[0]) / (step + 1):
            break
        seqs = [seqs[b] + [t] for b, t in zip(parents, toks)]
        score = torch.tensor(nscore, dtype=torch.float32)
        if step + 1 == steps:
            break
        pi = torch.tensor(parents)
        cache = [(K.index_select(0, pi), Vv.index_select(0, pi)) for K, Vv in cache]
        logits = forward_beams(W, c, torch.tensor(toks), P + step, cache, dtype)
    if len(hyps) < beams or step + 1 == steps:
        hyps += [(float(score[b]) / len(seqs[b]), seqs[b]) for b in range(beams)]
    return max(hyps, key=lambda x: x[0])[1]


def timed(fn):
    """(milliseconds, result) of one call of fn."""
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1e3, out


def generate(W, c, prompt, steps, dtype):
    """Greedy continuation of prompt by steps tokens on a key/value cache: the prompt in
    one forward, then one token per step. Returns the generated ids."""
    H, Hkv, Dh, G, Qw, Kw, Fw, eps, act, lin = sizes(c, dtype)
    cap = prompt.shape[0] + steps
    cache = [(torch.empty(Hkv, cap, Dh, dtype=act), torch.empty(Hkv, cap, Dh, dtype=act)) for _ in W["layers"]]
    out, x, pos = [], prompt, 0
    for _ in range(steps):
        logits = forward_kv(W, c, x, pos, cache, dtype)
        pos += x.shape[0]
        nxt = int(torch.argmax(logits))
        out.append(nxt)
        x = torch.tensor([nxt])
    return out


def check(W, c, args):
    T, L = args.check, args.layer
    ids = bench_ids(T, c["vocab_size"])
    z = np.load(args.npz)
    if not np.array_equal(z["input_ids"].astype(np.int64).reshape(-1), ids.numpy()):
        sys.exit("llama_torch: %s was not run on the ids of --print-ids %d" % (args.npz, T))
    with torch.inference_mode():
        p, logits = forward(W, c, ids, L, True, args.dtype)
    a = torch.from_numpy(z["attentions"]).reshape(p.shape)
    lg = torch.from_numpy(z["logits"]).reshape(logits.shape)
    d = lambda x, y: float((x.double() - y.double()).abs().max())
    print("check T %d layer %d dtype %s vs attnscope (%s): attentions max abs diff %.2e  logits max abs diff %.2e "
          "(max |logit| %.2f)" % (T, L, args.dtype, os.path.basename(args.npz), d(p, a), d(logits, lg),
                                   float(lg.abs().max())))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", choices=("f32", "bf16", "bf16w"), default="f32")
    ap.add_argument("--tokens", default="512", help="comma-separated token counts")
    ap.add_argument("--threads", default="1", help="comma-separated torch.set_num_threads values")
    ap.add_argument("--interop", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--layer", type=int, default=0, help="the layer whose attention is kept")
    ap.add_argument("--capture", default="attn", help="attn, none, or both (attn,none) timed in turn")
    ap.add_argument("--check", type=int, default=0, metavar="T")
    ap.add_argument("--npz", help="attnscope's npz for --check")
    ap.add_argument("--print-ids", type=int, default=0, metavar="T")
    ap.add_argument("--generate", type=int, default=0, metavar="N",
                    help="time greedy generation of N tokens after each --tokens prompt (key/value cache)")
    ap.add_argument("--beams", type=int, default=1, metavar="B",
                    help="with --generate: beam search of B beams instead of greedy")
    a = ap.parse_args()
    if a.print_ids:
        c = json.load(open(os.path.join(a.model, "config.json")))
        print(",".join(str(int(x)) for x in bench_ids(a.print_ids, c["vocab_size"])))
        return
    torch.set_num_interop_threads(a.interop)
    t0 = time.perf_counter()
    c, W = load(a.model, a.dtype)
    load_s = time.perf_counter() - t0
    if not 0 <= a.layer < c["num_hidden_layers"]:
        sys.exit("llama_torch: --layer %d is outside the model's %d layers" % (a.layer, c["num_hidden_layers"]))
    if a.check:
        check(W, c, a)
        return
    if a.generate:
        env = "openblas %s wait %s" % (os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
                                       os.environ.get("OMP_WAIT_POLICY", "unset"))
        for T in (int(x) for x in a.tokens.split(",")):
            ids = bench_ids(T, c["vocab_size"])
            for n in (int(x) for x in a.threads.split(",")):
                torch.set_num_threads(n)
                with torch.inference_mode():
                    run = (lambda: beam_search(W, c, ids, a.generate, a.beams, a.dtype)) if a.beams > 1 else \
                        (lambda: generate(W, c, ids, a.generate, a.dtype))
                    calls = [timed(run) for _ in range(a.repeat + 1)]
                best, gen = min(calls[1:], key=lambda x: x[0])  # the first call warms up
                print("T %d generate %d beams %d threads %d interop %d %s dtype %s min_ms %.1f tokens_s %.2f ids %s "
                      "torch %s" % (T, a.generate, a.beams, n, a.interop, env, a.dtype, best,
                                    a.generate / (best * 1e-3), ",".join(map(str, gen[:8])), torch.__version__),
                      flush=True)
        return
    caps = a.capture.split(",")
    if not caps or any(x not in ("attn", "none") for x in caps):
        sys.exit("llama_torch: --capture must be attn, none or attn,none")
    env = "openblas %s wait %s" % (os.environ.get("OPENBLAS_NUM_THREADS", "unset"),
                                   os.environ.get("OMP_WAIT_POLICY", "unset"))
    for T in (int(x) for x in a.tokens.split(",")):
        ids = bench_ids(T, c["vocab_size"])
        for n, cap in ((int(x), cap) for x in a.threads.split(",") for cap in caps):
            torch.set_num_threads(n)
            times = []
            with torch.inference_mode():
                for r in range(a.repeat + 1):
                    t0 = time.perf_counter()
                    out = forward(W, c, ids, a.layer, cap == "attn", a.dtype)
                    dt = (time.perf_counter() - t0) * 1e3
                    del out
                    if r:
                        times.append(dt)
            times.sort()
            k = len(times)
            med = times[k // 2] if k % 2 else 0.5 * (times[k // 2 - 1] + times[k // 2])
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
            print("T %d threads %d interop %d %s dtype %s capture %s median_ms %.2f min_ms %.2f peak_rss_mb %.1f "
                  "load_s %.1f torch %s" % (T, n, a.interop, env, a.dtype, cap, med, times[0], rss, load_s,
                                            torch.__version__), flush=True)


if __name__ == "__main__":
    main()
