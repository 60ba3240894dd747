"""bench/tile_bench.py — the long map's tiles, recomputed from q and k, against PyTorch
computing the same tiles from the same q and k, in one run.

Writes a random Llama-shaped checkpoint (bench/make_llama_checkpoint.py), takes its
post-RoPE queries and keys at T tokens from `attnscope run --capture qkv --format npz`,
then for each binary given (e.g. a build before and after a change) starts `attnscope
serve --threads N`, posts the same ids (capture stats,qkv: no T x T kept) and times, for
every head of the last layer, the whole head pooled to 128 x 128 (max and mean) and a
64 x 64 block at full resolution (median over the heads and REPS rounds). PyTorch
(torch.set_num_threads(N), float32) computes the same tiles the way a PyTorch tool would
without materialising T x T: softmax(q_block k^T * scale, causal) 64 query rows at a time,
then the block max and mean with the same block boundaries; its tiles are compared with
the server's (max abs diff). Prints each time and the ratio attnscope / PyTorch; asserts
nothing.
  /usr/bin/python3 bench/tile_bench.py BIN [BIN2 ...] [--labels a,b] [--tokens 4096]
     [--threads 1] [--reps 3]
"""
import argparse
import json
import math
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import torch


def tb_tensors(body):
    """The tensors of a binary tensor response ("ASTB", u32 header length, JSON header)."""
    assert body[:4] == b"ASTB"
    n = struct.unpack("<I", body[4:8])[0]
    hdr = json.loads(body[8:8 + n])
    out = {}
    for t in hdr["tensors"]:
        assert t["dtype"] == "f32"
        a = np.frombuffer(body, dtype=np.float32, count=t["nbytes"] // 4, offset=8 + n + t["offset"])
        out[t["name"]] = a.reshape(t["shape"])
    return out


def starts(n, p):
    return [b * n // p for b in range(p + 1)]


def torch_tile(q, k, scale, r0, r1, c0, c1, n):
    """Max and mean pooled tile of rows [r0, r1) x cols [c0, c1), causal softmax rows,
    computed 64 query rows at a time and pooled with index_reduce / index_add (no Python
    loop over cells)."""
    R, C = r1 - r0, c1 - c0
    pr, pc = min(n, R), min(n, C)
    rb, cb = starts(R, pr), starts(C, pc)
    rbi = torch.tensor([b for b in range(pr) for _ in range(rb[b + 1] - rb[b])])  # row -> row block
    cbi = torch.tensor([b for b in range(pc) for _ in range(cb[b + 1] - cb[b])])  # col -> col block
    T = k.shape[0]
    cols = torch.arange(T)
    rmax = torch.full((pr, C), -math.inf)
    rsum = torch.zeros(pr, C, dtype=torch.float64)
    for s in range(r0, r1, 64):
        e = min(s + 64, r1)
        sc = (q[s:e] @ k.T) * scale
        sc = sc.masked_fill(cols[None, :] > torch.arange(s, e)[:, None], float("-inf"))
        p = torch.softmax(sc, dim=-1)[:, c0:c1]
        idx = rbi[s - r0:e - r0]
        rmax.index_reduce_(0, idx, p, "amax")
        rsum.index_add_(0, idx, p.double())
    mx = torch.full((pr, pc), -math.inf).index_reduce_(1, cbi, rmax, "amax")
    sm = torch.zeros(pr, pc, dtype=torch.float64).index_add_(1, cbi, rsum)
    cnt = torch.tensor([rb[b + 1] - rb[b] for b in range(pr)], dtype=torch.float64)[:, None] * \
        torch.tensor([cb[b + 1] - cb[b] for b in range(pc)], dtype=torch.float64)[None, :]
    return mx, (sm / cnt).float()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--labels")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    labels = a.labels.split(",") if a.labels else a.binaries
    torch.set_num_threads(a.threads)
    tmp = tempfile.mkdtemp(prefix="attnscope-tiles-")
    model = os.path.join(tmp, "llama-tiles")
    subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "make_llama_checkpoint.py"), model,
                    "--dtype", "f32", "--layers", "2", "--width", "256", "--heads", "8", "--kv-heads", "2", "--ff",
                    "512", "--vocab", "1000", "--positions", str(a.tokens)], check=True, stdout=subprocess.DEVNULL)
    random.seed(1)
    T = a.tokens
    ids = [random.randrange(1000) for _ in range(T)]
    npz = os.path.join(tmp, "qk.npz")
    subprocess.run([a.binaries[0], "run", "--model", model, "--ids", ",".join(map(str, ids)), "--capture", "qkv",
                    "--format", "npz", "--out", npz, "--threads", str(a.threads), "--quiet"], check=True)
    z = np.load(npz)
    Q, K, scale = z["queries"], z["keys"], float(z["score_scale"][-1])
    L, H = Q.shape[0], Q.shape[1]
    c = T // 2
    cases = [("whole head, 128 x 128", dict(r0=0, r1=T, c0=0, c1=T, n=128)),
             ("64 x 64 block at full resolution", dict(r0=c, r1=c + 64, c0=c - 64, c1=c, n=64))]
    torch_t, torch_tiles = {}, {}
    for name, cs in cases:
        ts = []
        for rep in range(a.reps):
            for h in range(H):
                q, k = torch.from_numpy(Q[L - 1, h]), torch.from_numpy(K[L - 1, h])
                t = time.perf_counter()
                torch_tiles[(name, h)] = torch_tile(q, k, scale, **cs)
                ts.append(time.perf_counter() - t)
        torch_t[name] = statistics.median(ts)
    print(f"T = {T}, {H} heads of the last layer, Dh = {Q.shape[3]}, {a.threads} thread(s), "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for label, binary in zip(labels, a.binaries):
        srv = subprocess.Popen([binary, "serve", "--model", model, "--port", "0", "--threads", str(a.threads)],
                               stdout=subprocess.PIPE, text=True)
        try:
            base = re.search(r"(http://\S+)/", srv.stdout.readline()).group(1) + "/api/v1"
            req = urllib.request.Request(base + "/run", data=json.dumps({"model": "llama-tiles", "ids": ids,
                                                                         "capture": "stats,qkv"}).encode(),
                                         headers={"Content-Type": "application/json"})
            run = json.load(urllib.request.urlopen(req))
            for name, cs in cases:
                ts, diff = [], 0.0
                for rep in range(a.reps):
                    for h in range(H):
                        q = (f"layer={L - 1}&head={h}&rows={cs['r0']}-{cs['r1'] - 1}&cols={cs['c0']}-{cs['c1'] - 1}"
                             f"&n={cs['n']}")
                        t = time.perf_counter()
                        body = urllib.request.urlopen(f"{base}/runs/{run['id']}/tile?{q}").read()
                        ts.append(time.perf_counter() - t)
                        got = tb_tensors(body)
                        mx, mean = torch_tiles[(name, h)]
                        diff = max(diff, float(np.abs(got["max"] - mx.numpy()).max()),
                                   float(np.abs(got["mean"] - mean.numpy()).max()))
                ct = statistics.median(ts)
                print(f"{label}: tile, {name}: attnscope {ct * 1e3:.1f} ms, PyTorch {torch_t[name] * 1e3:.1f} ms, "
                      f"ratio {ct / torch_t[name]:.2f} (max |diff| {diff:.1e})")
        finally:
            srv.terminate()
            srv.wait()


if __name__ == "__main__":
    main()
