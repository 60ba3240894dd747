#!/usr/bin/python3
"""encdec_torch.py — the PyTorch reference of bench/encdec_bench.py: one BART forward
(encoder on N source tokens, decoder on M decoder tokens, LM logits) keeping what
`attnscope bench` captures for an encoder-decoder model: every layer's attention
probabilities and scores, q, k and v of the encoder's and the decoder's self-attention and
of the cross-attention, both stacks' hidden states and the logits. Written the way a
careful PyTorch user would: inference_mode, one fused QKV (self) and KV (cross) product
per layer with the weights concatenated before timing, scores from one baddbmm with the
scale and the additive mask folded in, F.layer_norm / F.gelu, captures kept per layer
(no final stack). Semantics as tests/ref/gen_encdec.py (post-norm BART).

Usage (one process = one torch thread configuration; the driver sets the environment):
  encdec_torch.py --model DIR --tokens N --target-tokens M --threads 1,2 --interop 1 --repeat R
      prints one line per thread count: T N M M threads t median_ms x min_ms y peak_rss_mb z
  encdec_torch.py --model DIR --tokens N --target-tokens M --print-ids     source ids; decoder ids
  encdec_torch.py --model DIR --tokens N --target-tokens M --check NPZ     max diffs vs `attnscope run`
  encdec_torch.py --model DIR --tokens N --generate G --threads 1,2 --repeat R
      greedy generation of G decoder tokens on caches (generate()): min_ms, tokens/s, first ids
The ids are `attnscope bench`'s: its LCG (seed 12345), N source ids then M decoder ids.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
from gen_models import st_read  # noqa: E402


def bench_ids(V, n):
    """attnscope bench's token ids: 5 + (seed >> 8) % (V - 5), seed = seed * 1664525 + 1013904223."""
    seed, out = 12345, []
    for _ in range(n):
        seed = (seed * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append(5 + (seed >> 8) % (V - 5))
    return out


def prepare(P, c):
    """Fused weights, built once before timing."""
    g = lambda k: P[k] if k in P else P["model." + k]  # noqa: E731
    W = {"shared": g("model.shared.weight") if "model.shared.weight" in P else P["shared.weight"],
         "bias": P.get("final_logits_bias", torch.zeros(1, c["vocab_size"]))[0]}
    for st, L in (("encoder", c["encoder_layers"]), ("decoder", c["decoder_layers"])):
        W[st + ".pos"] = g(f"{st}.embed_positions.weight")
        W[st + ".ln_emb"] = (g(f"{st}.layernorm_embedding.weight"), g(f"{st}.layernorm_embedding.bias"))
        for l in range(L):
            p = f"{st}.layers.{l}."
            a = p + "self_attn."
            W[p + "qkv"] = (torch.cat([g(a + x + "_proj.weight") for x in "qkv"]),
                            torch.cat([g(a + x + "_proj.bias") for x in "qkv"]))
            W[p + "o"] = (g(a + "out_proj.weight"), g(a + "out_proj.bias"))
            for n in ("self_attn_layer_norm", "final_layer_norm", "encoder_attn_layer_norm"):
                if p + n + ".weight" in P or "model." + p + n + ".weight" in P:
                    W[p + n] = (g(p + n + ".weight"), g(p + n + ".bias"))
            W[p + "fc1"] = (g(p + "fc1.weight"), g(p + "fc1.bias"))
            W[p + "fc2"] = (g(p + "fc2.weight"), g(p + "fc2.bias"))
            if st == "decoder":
                a = p + "encoder_attn."
                W[p + "cq"] = (g(a + "q_proj.weight"), g(a + "q_proj.bias"))
                W[p + "ckv"] = (torch.cat([g(a + x + "_proj.weight") for x in "kv"]),
                                torch.cat([g(a + x + "_proj.bias") for x in "kv"]))
                W[p + "co"] = (g(a + "out_proj.weight"), g(a + "out_proj.bias"))
    return W


def attend(q, k, v, mask, H, scale, caps):
    """q (Tq, D), k, v (Tk, D) views -> context (Tq, D); keeps scores, probabilities, q, k, v."""
    Tq, D = q.shape
    Tk, Dh = k.shape[0], D // H
    qh = q.reshape(Tq, H, Dh).transpose(0, 1)
    kh = k.reshape(Tk, H, Dh).transpose(0, 1)
    vh = v.reshape(Tk, H, Dh).transpose(0, 1)
    s = torch.baddbmm(mask, qh, kh.transpose(1, 2), alpha=scale)
    p = torch.softmax(s, dim=-1)
    caps.append((s, p, qh, kh, vh))
    return torch.bmm(p, vh).transpose(0, 1).reshape(Tq, D)


def forward(W, c, src, tgt):
    D, H = c["d_model"], c["encoder_attention_heads"]
    scale, eps = (D // H) ** -0.5, 1e-5
    Ts, Tt = src.shape[0], tgt.shape[0]
    fmin = torch.finfo(torch.float32).min
    no_mask = torch.zeros(1, 1, 1)
    causal = torch.triu(torch.full((Tt, Tt), fmin), diagonal=1)[None]
    caps = {"enc": [], "dec": [], "cross": [], "eh": [], "dh": []}

    def stack(st, ids, L, mask, mem):
        x = W["shared"][ids] + W[st + ".pos"][torch.arange(ids.shape[0]) + 2]
        x = F.layer_norm(x, (D,), *W[st + ".ln_emb"], eps)
        hs = caps["eh" if st == "encoder" else "dh"]
        hs.append(x)
        for l in range(L):
            p = f"{st}.layers.{l}."
            qkv = F.linear(x, *W[p + "qkv"])
            ctx = attend(qkv[:, :D], qkv[:, D:2 * D], qkv[:, 2 * D:], mask, H, scale,
                         caps["enc" if st == "encoder" else "dec"])
            x = F.layer_norm(x + F.linear(ctx, *W[p + "o"]), (D,), *W[p + "self_attn_layer_norm"], eps)
            if mem is not None:
                kv = F.linear(mem, *W[p + "ckv"])
                ctx = attend(F.linear(x, *W[p + "cq"]), kv[:, :D], kv[:, D:], no_mask, H, scale, caps["cross"])
                x = F.layer_norm(x + F.linear(ctx, *W[p + "co"]), (D,), *W[p + "encoder_attn_layer_norm"], eps)
            h = F.gelu(F.linear(x, *W[p + "fc1"]))
            x = F.layer_norm(x + F.linear(h, *W[p + "fc2"]), (D,), *W[p + "final_layer_norm"], eps)
            hs.append(x)
        return x

    mem = stack("encoder", src, c["encoder_layers"], no_mask, None)
    y = stack("decoder", tgt, c["decoder_layers"], causal, mem)
    return F.linear(y, W["shared"], W["bias"]), caps


def generate(W, c, src, steps):
    """Greedy generation of steps decoder tokens after decoder_start_token_id, as
    transformers' generate with a cache: the encoder once (forward's encoder stack), every
    decoder layer's cross keys and values projected from its output once, then one token
    per step whose self-attention reads the layer's cached keys and values. Returns the ids."""
    D, H, L = c["d_model"], c["decoder_attention_heads"], c["decoder_layers"]
    Dh, eps = D // H, 1e-5
    _, caps = forward(W, c, src, torch.tensor([c["decoder_start_token_id"]]))
    mem = caps["eh"][-1]  # the encoder's output (Ts, D)
    Ts = mem.shape[0]
    cross = []
    for l in range(L):
        kv = F.linear(mem, *W[f"decoder.layers.{l}.ckv"])
        cross.append((kv[:, :D].reshape(Ts, H, Dh).transpose(0, 1), kv[:, D:].reshape(Ts, H, Dh).transpose(0, 1)))
    K, V = torch.empty(L, H, steps, Dh), torch.empty(L, H, steps, Dh)
    tok, out = c["decoder_start_token_id"], []
    for pos in range(steps):
        x = W["shared"][tok][None] + W["decoder.pos"][pos + 2][None]
        x = F.layer_norm(x, (D,), *W["decoder.ln_emb"], eps)
        for l in range(L):
            p = f"decoder.layers.{l}."
            qkv = F.linear(x, *W[p + "qkv"])
            K[l, :, pos] = qkv[0, D:2 * D].view(H, Dh)
            V[l, :, pos] = qkv[0, 2 * D:].view(H, Dh)
            q = qkv[:, :D].view(H, 1, Dh)
            a = torch.softmax(torch.bmm(q, K[l, :, :pos + 1].transpose(1, 2)) * Dh ** -0.5, dim=-1)
            ctx = torch.bmm(a, V[l, :, :pos + 1]).reshape(1, D)
            x = F.layer_norm(x + F.linear(ctx, *W[p + "o"]), (D,), *W[p + "self_attn_layer_norm"], eps)
            q = F.linear(x, *W[p + "cq"]).view(H, 1, Dh)
            a = torch.softmax(torch.bmm(q, cross[l][0].transpose(1, 2)) * Dh ** -0.5, dim=-1)
            ctx = torch.bmm(a, cross[l][1]).reshape(1, D)
            x = F.layer_norm(x + F.linear(ctx, *W[p + "co"]), (D,), *W[p + "encoder_attn_layer_norm"], eps)
            h = F.gelu(F.linear(x, *W[p + "fc1"]))
            x = F.layer_norm(x + F.linear(h, *W[p + "fc2"]), (D,), *W[p + "final_layer_norm"], eps)
        tok = int(torch.argmax(F.linear(x[0], W["shared"], W["bias"])))
        out.append(tok)
    return out


def timings(fn, repeat):
    """(milliseconds of repeat calls of fn after one warm-up call, the last call's result);
    each result is dropped before the next call, so two are never held at once."""
    ms, out = [], None
    for r in range(repeat + 1):
        out = None
        t0 = time.perf_counter()
        out = fn()
        if r:
            ms.append((time.perf_counter() - t0) * 1e3)
    return ms, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--target-tokens", type=int, default=128)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--interop", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--print-ids", action="store_true")
    ap.add_argument("--check")
    ap.add_argument("--generate", type=int, default=0, metavar="N",
                    help="time greedy generation of N decoder tokens after --tokens source ids (caches)")
    a = ap.parse_args()
    torch.set_num_interop_threads(a.interop)
    c = json.load(open(os.path.join(a.model, "config.json")))
    ids = bench_ids(c["vocab_size"], a.tokens + a.target_tokens)
    if a.print_ids:
        print(",".join(map(str, ids[:a.tokens])) + ";" + ",".join(map(str, ids[a.tokens:])))
        return
    W = prepare(st_read(os.path.join(a.model, "model.safetensors")), c)
    src, tgt = torch.tensor(ids[:a.tokens]), torch.tensor(ids[a.tokens:])
    if a.check:
        import numpy as np
        z = np.load(a.check)
        torch.set_num_threads(1)
        with torch.inference_mode():
            logits, caps = forward(W, c, src, tgt)
        d = lambda k, t: float(np.abs(z[k] - t.numpy()).max())  # noqa: E731
        att = lambda kind: torch.stack([x[1] for x in caps[kind]])  # noqa: E731
        rel = d("logits", logits) / float(logits.abs().max())
        print("check: max|diff| encoder_attentions %.2e decoder_attentions %.2e cross_attentions %.2e; "
              "logits %.2e relative" % (d("encoder_attentions", att("enc")), d("decoder_attentions", att("dec")),
                                        d("cross_attentions", att("cross")), rel))
        return
    if a.generate:
        for n in [int(x) for x in a.threads.split(",")]:
            torch.set_num_threads(n)
            with torch.inference_mode():
                ms, gen = timings(lambda: generate(W, c, src, a.generate), a.repeat)
            print("T %d generate %d threads %d min_ms %.1f tokens_s %.2f ids %s"
                  % (a.tokens, a.generate, n, min(ms), a.generate / (min(ms) * 1e-3), ",".join(map(str, gen[:8]))),
                  flush=True)
        return
    for n in [int(x) for x in a.threads.split(",")]:
        torch.set_num_threads(n)
        with torch.inference_mode():
            ms, _ = timings(lambda: forward(W, c, src, tgt), a.repeat)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print("T %d M %d threads %d median_ms %.2f min_ms %.2f peak_rss_mb %.1f"
              % (a.tokens, a.target_tokens, n, statistics.median(ms), min(ms), rss), flush=True)


if __name__ == "__main__":
    main()
