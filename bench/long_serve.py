"""bench/long_serve.py — the server on one long input: time and peak memory of a run
captured as stats,qkv (no T x T) and of attention tiles recomputed from q and k.
Writes a random Llama-shaped checkpoint (bench/make_llama_checkpoint.py) unless --model is
given, starts `attnscope serve --threads N`, posts T random ids, then asks for the whole
head pooled to 128 x 128 (with and without the first key), a 64 x 64 block at full
resolution and one cell, and prints each time and the server's peak RSS (VmHWM) before
and after the tiles. Measures; asserts nothing.
  /usr/bin/python3 bench/long_serve.py BUILD/attnscope [--tokens 8192] [--threads 2]
     [--model DIR] [--layers 4 --width 256 --heads 8 --kv-heads 2 --ff 512 --vocab 1000]
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import urllib.request


def rss_mb(pid, key="VmHWM"):
    """VmHWM: the peak resident set; VmRSS: the current one."""
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(key + r":\s+(\d+)", f.read()).group(1)) / 1024


def rss_peak_mb(pid):
    return rss_mb(pid)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model")
    for k, v in [("layers", 4), ("width", 256), ("heads", 8), ("kv-heads", 2), ("ff", 512), ("vocab", 1000)]:
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="attnscope-long-")
    model = a.model
    if not model:
        model = os.path.join(tmp, "llama-long")
        subprocess.run([sys.executable, os.path.join(os.path.dirname(__file__), "make_llama_checkpoint.py"), model,
                        "--dtype", "f32", "--layers", str(a.layers), "--width", str(a.width), "--heads", str(a.heads),
                        "--kv-heads", str(a.kv_heads), "--ff", str(a.ff), "--vocab", str(a.vocab), "--positions",
                        str(a.tokens)], check=True, stdout=subprocess.DEVNULL)
    srv = subprocess.Popen([a.binary, "serve", "--model", model, "--port", "0", "--threads", str(a.threads)],
                           stdout=subprocess.PIPE, text=True)
    try:
        base = re.search(r"(http://\S+)/", srv.stdout.readline()).group(1) + "/api/v1"
        name = os.path.basename(model.rstrip("/"))
        vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
        random.seed(1)
        ids = [random.randrange(vocab) for _ in range(a.tokens)]
        print(f"idle server: peak RSS {rss_peak_mb(srv.pid):.0f} MB")
        t = time.time()
        req = urllib.request.Request(base + "/run", data=json.dumps({"model": name, "ids": ids}).encode(),
                                     headers={"Content-Type": "application/json"})
        run = json.load(urllib.request.urlopen(req))
        print(f"POST /run, {a.tokens} tokens: {time.time() - t:.2f} s, capture {run['capture']}, "
              f"peak RSS {rss_peak_mb(srv.pid):.0f} MB, RSS after it {rss_mb(srv.pid, 'VmRSS'):.0f} MB")
        L, H, T = run["sizes"]["layers"], run["sizes"]["heads"], a.tokens
        c = T // 2
        for what, q in [("whole head, 128 x 128", "n=128"), ("whole head, 128 x 128, first key excluded", "n=128&exclude=0"),
                        ("64 x 64 block at full resolution", f"rows={c}-{c + 63}&cols={c - 64}-{c - 1}&n=64"),
                        ("one cell", f"rows={c}&cols=0&n=1")]:
            t = time.time()
            body = urllib.request.urlopen(f"{base}/runs/{run['id']}/tile?layer={L - 1}&head={H - 1}&{q}").read()
            print(f"tile, {what}: {time.time() - t:.3f} s, {len(body)} bytes, peak RSS {rss_peak_mb(srv.pid):.0f} MB, "
                  f"RSS {rss_mb(srv.pid, 'VmRSS'):.0f} MB")
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
