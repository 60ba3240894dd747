#!/usr/bin/python3
"""bench/long_targets.py — the long-context targets (bench/RESULTS.md, "Long context
targets") measured in one command: memory of `attnscope run --capture stats` /
`stats,qkv` and of the server's long run against the formula of docs/engine.md
("Memory of a run"), the dense capture it replaces and PyTorch's eager forward with
output_attentions=True; tile times; then the browser side (bench/long_targets.mjs:
Chromium against the real server). Measures; asserts nothing. Peak RSS is the child
process's ru_maxrss (wait4) for the CLI and PyTorch, VmHWM for the server.

Models (random weights, f32, written under bench/out/ once):
  gpt2   GPT-2 small's shape (12 layers, 12 heads, width 768, F 3072, vocabulary 50257,
         1024 positions), T = 1024;
  llama  a Llama shape chosen to fit this machine's time (--llama-*: default 4 layers x
         16 heads of 64, 4 kv heads, width 1024, F 2048, vocabulary 1000), T = 8192;
  view   32 layers x 32 heads (width 256, Dh 8, F 256, vocabulary 1000): the model
         view's 1,024 thumbnails, on a dense run of --view-tokens (default 512).

  /usr/bin/python3 bench/long_targets.py BUILD/attnscope [--repeat 2] [--threads 2]
     [--only cli,server,torch,browser] [--llama-layers 16 --llama-heads 32 ...]
  (internal) /usr/bin/python3 bench/long_targets.py --torch gpt2|llama T MODEL_DIR
"""
import argparse
import json
import math
import os
import random
import re
import resource
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
MB = 1e6


def write_gpt2(out, L=12, H=12, D=768, V=50257, P=1024, seed=1):
    """GPT-2 small's shape, N(0, 0.02) weights (Conv1D [in, out]), LayerNorms 1 / 0, f32."""
    import numpy as np
    if os.path.exists(os.path.join(out, "config.json")):
        return
    F = 4 * D
    shapes = [("transformer.wte.weight", (V, D), 0.02), ("transformer.wpe.weight", (P, D), 0.01),
              ("transformer.ln_f.weight", (D,), "one"), ("transformer.ln_f.bias", (D,), "zero")]
    for l in range(L):
        b = f"transformer.h.{l}."
        shapes += [(b + "ln_1.weight", (D,), "one"), (b + "ln_1.bias", (D,), "zero"),
                   (b + "attn.c_attn.weight", (D, 3 * D), 0.02), (b + "attn.c_attn.bias", (3 * D,), "zero"),
                   (b + "attn.c_proj.weight", (D, D), 0.02), (b + "attn.c_proj.bias", (D,), "zero"),
                   (b + "ln_2.weight", (D,), "one"), (b + "ln_2.bias", (D,), "zero"),
                   (b + "mlp.c_fc.weight", (D, F), 0.02), (b + "mlp.c_fc.bias", (F,), "zero"),
                   (b + "mlp.c_proj.weight", (F, D), 0.02), (b + "mlp.c_proj.bias", (D,), "zero")]
    header, off = {}, 0
    for name, shape, _ in shapes:
        n = int(np.prod(shape)) * 4
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(seed)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for _, shape, s in shapes:
            x = (np.ones(shape, np.float32) if s == "one" else np.zeros(shape, np.float32) if s == "zero"
                 else rng.standard_normal(shape, np.float32) * s)
            f.write(x.tobytes())
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
           "n_embd": D, "n_head": H, "n_layer": L, "n_inner": None, "n_positions": P, "n_ctx": P, "vocab_size": V,
           "layer_norm_epsilon": 1e-5, "scale_attn_weights": True, "bos_token_id": V - 1, "eos_token_id": V - 1}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def write_llama(out, L, D, H, K, F, V, P):
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_llama_checkpoint.py"), out, "--dtype", "f32",
                        "--layers", str(L), "--width", str(D), "--heads", str(H), "--kv-heads", str(K), "--ff", str(F),
                        "--vocab", str(V), "--positions", str(P)], check=True, stdout=subprocess.DEVNULL)


def shape_of(model):
    c = json.load(open(os.path.join(model, "config.json")))
    if c["model_type"] == "gpt2":
        D = c["n_embd"]
        return dict(L=c["n_layer"], H=c["n_head"], D=D, Dh=D // c["n_head"], F=c["n_inner"] or 4 * D, V=c["vocab_size"],
                    rope=False, K=c["n_head"])
    return dict(L=c["num_hidden_layers"], H=c["num_attention_heads"], D=c["hidden_size"], Dh=c["head_dim"],
                F=c["intermediate_size"], V=c["vocab_size"], rope=True, K=c["num_key_value_heads"])


def formula(model, T, n):
    """docs/engine.md, "Memory of a run", in bytes: weights (the safetensors file), the
    O(T) state of `stats,qkv` (q, k, v, and q, k before RoPE for a rotary model, per query
    head; the forward's workspace; per-thread 64-row scores and probabilities), the dense
    capture's attention + scores, and PyTorch eager output_attentions' kept probabilities."""
    s = shape_of(model)
    L, H, D, Dh, F = s["L"], s["H"], s["D"], s["Dh"], s["F"]
    w = os.path.getsize(os.path.join(model, "model.safetensors"))
    qkv = (5 if s["rope"] else 3) * 4 * L * H * T * Dh
    work = 4 * T * (4 * D + 4 * H * Dh + 2 * F) + 8 * n * 64 * T
    return dict(weights=w, qkv=qkv, work=work, state=qkv + work, dense=2 * 4 * L * H * T * T,
                torch_attn=4 * L * H * T * T)


def ids_for(model, T):
    V = shape_of(model)["V"]
    random.seed(1)
    return [random.randrange(V) for _ in range(T)]


def cli_peak(binary, model, T, capture, threads):
    """(seconds, peak RSS bytes) of `attnscope run --capture CAPTURE --format npz`."""
    tmp = tempfile.mkdtemp(prefix="attnscope-lt-")
    cmd = [binary, "run", "--model", model, "--ids", ",".join(map(str, ids_for(model, T))), "--capture", capture,
           "--format", "npz", "--out", os.path.join(tmp, "o.npz"), "--threads", str(threads)]
    t = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.time() - t
    for f in os.listdir(tmp):
        os.remove(os.path.join(tmp, f))
    os.rmdir(tmp)
    if status != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... --capture {capture}: exit status {status}")
    return dt, ru.ru_maxrss * 1024


def vmhwm(pid, key="VmHWM"):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(key + r":\s+(\d+)", f.read()).group(1)) * 1024


def server(binary, model, T, capture, threads, tiles):
    """Starts `attnscope serve`, posts T ids with CAPTURE, times each tile query of tiles
    [(label, query)]; returns (run seconds, peak after the run, [(label, seconds, bytes)], peak at the end)."""
    srv = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--threads", str(threads)],
                           stdout=subprocess.PIPE, text=True)
    try:
        base = re.search(r"(http://\S+)/", srv.stdout.readline()).group(1) + "/api/v1"
        name = os.path.basename(model.rstrip("/"))
        t = time.time()
        req = urllib.request.Request(base + "/run", data=json.dumps({"model": name, "ids": ids_for(model, T),
                                                                      "capture": capture}).encode(),
                                     headers={"Content-Type": "application/json"})
        run = json.load(urllib.request.urlopen(req, timeout=3600))
        t_run, peak_run = time.time() - t, vmhwm(srv.pid)
        out = []
        for label, q in tiles:
            t = time.time()
            body = urllib.request.urlopen(f"{base}/runs/{run['id']}/tile?{q}", timeout=3600).read()
            out.append((label, time.time() - t, len(body)))
        return t_run, peak_run, out, vmhwm(srv.pid)
    finally:
        srv.terminate()
        srv.wait()


def torch_child(kind, T, model):
    """PyTorch eager forward of MODEL's shape (random weights, f32) keeping every layer's
    attention probabilities (L, H, T, T) as Hugging Face's output_attentions=True does
    (GPT2Attention._attn / LlamaAttention eager: scores, mask, softmax, probabilities
    kept); prints the peak RSS."""
    import torch
    torch.set_num_threads(2)
    torch.manual_seed(0)
    s = shape_of(model)
    L, H, D, Dh, F, V, K = s["L"], s["H"], s["D"], s["Dh"], s["F"], s["V"], s["K"]
    r = lambda *sh: torch.randn(*sh) * 0.02
    ids = torch.tensor(ids_for(model, T))
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    fmin = torch.finfo(torch.float32).min
    kept = []
    with torch.inference_mode():
        emb = r(V, D)
        pos = r(T, D) if kind == "gpt2" else None
        W = [dict(q=r(D, H * Dh), k=r(D, K * Dh), v=r(D, K * Dh), o=r(H * Dh, D), up=r(D, F), down=r(F, D),
                  gate=None if kind == "gpt2" else r(D, F)) for _ in range(L)]  # every weight kept, as a model's
        h = emb[ids]
        if kind == "gpt2":
            h = h + pos
        for w_ in W:
            x = torch.nn.functional.layer_norm(h, (D,)) if kind == "gpt2" else h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5)
            q = (x @ w_["q"]).view(T, H, Dh).transpose(0, 1)
            k = (x @ w_["k"]).view(T, K, Dh).transpose(0, 1).repeat_interleave(H // K, 0)
            v = (x @ w_["v"]).view(T, K, Dh).transpose(0, 1).repeat_interleave(H // K, 0)
            w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(Dh)
            w = torch.where(causal, w, torch.full([], fmin))
            p = torch.softmax(w, dim=-1)
            del w
            kept.append(p)
            h = h + (torch.matmul(p, v).transpose(0, 1).reshape(T, H * Dh) @ w_["o"])
            x = torch.nn.functional.layer_norm(h, (D,)) if kind == "gpt2" else h
            if kind == "gpt2":
                h = h + torch.nn.functional.gelu(x @ w_["up"], approximate="tanh") @ w_["down"]
            else:
                h = h + (torch.nn.functional.silu(x @ w_["gate"]) * (x @ w_["up"])) @ w_["down"]
    print(json.dumps({"peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "kept": sum(p.numel() * 4 for p in kept)}))


def torch_peak(kind, T, model):
    p = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--torch", kind, str(T), model],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
    return json.loads(p.stdout.strip().splitlines()[-1]), None


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--torch":
        torch_child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="cli,server,torch,browser")
    ap.add_argument("--models", default="gpt2,llama")
    for k, v in [("layers", 4), ("heads", 16), ("kv-heads", 4), ("width", 1024), ("ff", 2048), ("vocab", 1000),
                 ("tokens", 8192)]:
        ap.add_argument("--llama-" + k, type=int, default=v)
    ap.add_argument("--view-tokens", type=int, default=512)
    ap.add_argument("--torch-tokens", type=int, default=2048, help="T of the measured PyTorch run of the llama shape")
    a = ap.parse_args()
    only = set(a.only.split(","))
    os.makedirs(OUT, exist_ok=True)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores, --threads {a.threads}, --repeat {a.repeat}")
    gpt2 = os.path.join(OUT, "gpt2-small-random")
    la = a  # the --llama-* options
    llama = os.path.join(OUT, f"llama-long-{la.llama_layers}x{la.llama_heads}-w{la.llama_width}")
    view = os.path.join(OUT, "llama-view-32x32")
    models = []
    if "gpt2" in a.models:
        write_gpt2(gpt2)
        models.append(("gpt2", gpt2, 1024))
    if "llama" in a.models:
        write_llama(llama, la.llama_layers, la.llama_width, la.llama_heads, la.llama_kv_heads, la.llama_ff,
                    la.llama_vocab, la.llama_tokens)
        models.append(("llama", llama, la.llama_tokens))
    for kind, model, T in models:
        f = formula(model, T, a.threads)
        s = shape_of(model)
        print(f"\n## {kind}: {s['L']} layers x {s['H']} heads (kv {s['K']}), width {s['D']}, Dh {s['Dh']}, F {s['F']}, "
              f"vocabulary {s['V']}, T = {T}")
        print(f"formula: weights {f['weights'] / MB:.0f} MB + O(T) state {f['state'] / MB:.0f} MB "
              f"(q/k/v {f['qkv'] / MB:.0f} + workspace {f['work'] / MB:.0f}); target peak < 2 x = "
              f"{2 * (f['weights'] + f['state']) / MB:.0f} MB; dense capture adds {f['dense'] / MB:.0f} MB; "
              f"PyTorch output_attentions keeps {f['torch_attn'] / MB:.0f} MB")
        if "cli" in only:
            caps = ["stats", "stats,qkv"] + (["attn,scores"] if f["dense"] < 4e9 else [])
            for cap in caps:
                for i in range(a.repeat):
                    dt, pk = cli_peak(a.binary, model, T, cap, a.threads)
                    print(f"attnscope run --capture {cap}: {dt:.1f} s, peak RSS {pk / MB:.0f} MB")
        if "server" in only:
            c = T // 2
            s = shape_of(model)
            tiles = [(f"whole head L{l} H{h}, 256 x 256", f"layer={l}&head={h}&n=256")
                     for l, h in [(s["L"] - 1, s["H"] - 1), (0, 0), (s["L"] // 2, 1)]]
            tiles += [("64 x 64 block at full resolution", f"layer=0&head=0&rows={c}-{c + 63}&cols={c - 64}-{c - 1}&n=64"),
                      ("one cell", f"layer=0&head=0&rows={c}&cols=0&n=1"),
                      (f"every head of layer 0 pooled to 16 x 16 ({s['H']} heads)", f"layers=0&heads=0-{s['H'] - 1}&n=16")]
            for i in range(a.repeat):
                t_run, pk_run, out, pk = server(a.binary, model, T, "stats,qkv", a.threads, tiles)
                print(f"server POST /run stats,qkv: {t_run:.1f} s, peak RSS {pk_run / MB:.0f} MB; after the tiles {pk / MB:.0f} MB")
                for label, dt, n in out:
                    print(f"  tile {label}: {dt * 1000:.0f} ms ({n} bytes)")
        if "torch" in only:
            tt = T if kind == "gpt2" or f["torch_attn"] < 6e9 else a.torch_tokens
            fm = formula(model, tt, a.threads)
            r, err = torch_peak(kind, tt, model)
            if r:
                print(f"PyTorch eager output_attentions, T = {tt}: peak RSS {r['peak'] / MB:.0f} MB "
                      f"(kept probabilities {r['kept'] / MB:.0f} MB, formula {fm['torch_attn'] / MB:.0f} MB)")
            else:
                print(f"PyTorch eager, T = {tt}: {err}")
            if tt != T:
                print(f"PyTorch eager output_attentions, T = {T}: not run (does not fit in 24 GiB): kept probabilities "
                      f"alone 4 L H T^2 = {f['torch_attn'] / 1e9:.1f} GB")
    if "browser" in only:
        s = dict(L=32, H=32, D=256, K=32, F=256, V=1000)
        write_llama(view, s["L"], s["D"], s["H"], s["K"], s["F"], s["V"], 1024)
        for kind, model, T in models:
            if kind == "llama":
                print(f"\n## browser: long map on the llama shape, T = {T}")
                subprocess.run(["node", os.path.join(HERE, "long_targets.mjs"), a.binary, model, str(T), view,
                                str(a.view_tokens), str(a.repeat)], check=False)


if __name__ == "__main__":
    main()
