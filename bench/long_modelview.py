#!/usr/bin/python3
"""bench/long_modelview.py — the model view of a long run (bench/RESULTS.md, "Model view of
a long run"): what the forward's thumbnails (CAP_THUMBS) cost, and the 1,024-head model
view from one request in Chromium.

  cli      `attnscope run --capture stats` against `--capture stats,thumbs` (npz out, so
           both keep the same statistics), interleaved, --repeat times: wall and CPU
           seconds (the child's user + system, wait4) and peak RSS; the thumbnails'
           formula 8 L H S^2 bytes (max and mean, f32, S = min(T, 64));
  browser  the real server (nice 10; its forward keeps q, k, v, the statistics and the
           thumbnails: stats,qkv): POST /run of the ids (the forward's time, the server's
           peak RSS), then bench/long_modelview.mjs: the page with the ids (the run found in
           the cache), the time from the thumbs request to the grid drawn.

The model: a random Llama of --layers x --heads (default 32 x 32 query heads, 8 kv heads),
head dim 16, width 512, F 512, vocabulary 1000, 8192 positions, f32 (a narrow head and a
small width so that one forward at 4096 tokens takes minutes on two cores; the attention's
T^2 work per head is what the thumbnails add to). Every child runs at nice 10.

  /usr/bin/python3 bench/long_modelview.py BUILD/attnscope [--tokens 4096] [--repeat 1]
     [--only cli,browser] [--threads 2]
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

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
MB = 1e6


def run_cli(binary, model, ids, capture, threads):
    """(wall s, CPU s, peak RSS bytes) of `nice -n 10 attnscope run --capture CAPTURE --format npz`."""
    tmp = tempfile.mkdtemp(prefix="attnscope-mv-")
    out = os.path.join(tmp, "o.npz")
    cmd = ["nice", "-n", "10", binary, "run", "--model", model, "--ids", ",".join(map(str, ids)), "--capture", capture,
           "--format", "npz", "--out", out, "--threads", str(threads)]
    t = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    _, status, ru = os.wait4(p.pid, 0)
    dt = time.time() - t
    if os.path.exists(out):
        os.remove(out)
    os.rmdir(tmp)
    if status != 0:
        raise RuntimeError(f"--capture {capture}: exit status {status}")
    return dt, ru.ru_utime + ru.ru_stime, ru.ru_maxrss * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="cli,browser")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--heads", type=int, default=32)
    a = ap.parse_args()
    only = set(a.only.split(","))
    os.makedirs(OUT, exist_ok=True)
    L, H, T = a.layers, a.heads, a.tokens
    model = os.path.join(OUT, f"llama-mv-{L}x{H}-dh16")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run(["nice", "-n", "10", sys.executable, os.path.join(HERE, "make_llama_checkpoint.py"), model,
                        "--dtype", "f32", "--layers", str(L), "--width", str(16 * H), "--heads", str(H), "--kv-heads",
                        str(max(1, H // 4)), "--ff", "512", "--vocab", "1000", "--positions", "8192"],
                       check=True, stdout=subprocess.DEVNULL)
    S = min(T, 64)
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores, --threads {a.threads}, "
          f"{L} x {H} heads (Dh 16, width {16 * H}), T = {T}; thumbnails 8 L H S^2 = {8 * L * H * S * S / MB:.1f} MB")
    if "cli" in only:
        random.seed(1)
        ids = [random.randrange(1000) for _ in range(T)]
        for i in range(a.repeat):
            for cap in ["stats", "stats,thumbs"]:
                dt, cpu, pk = run_cli(a.binary, model, ids, cap, a.threads)
                print(f"attnscope run --capture {cap}: {dt:.1f} s wall, {cpu:.1f} s CPU, peak RSS {pk / MB:.0f} MB "
                      f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    if "browser" in only:
        srv = subprocess.Popen(["nice", "-n", "10", a.binary, "serve", "--model", model, "--port", "0", "--threads",
                                str(a.threads)], stdout=subprocess.PIPE, text=True)
        try:
            url = re.search(r"(http://\S+)/", srv.stdout.readline()).group(1)
            ids = [(i * 7919 + 13) % 1000 for i in range(T)]  # long_modelview.mjs's
            t = time.time()
            req = urllib.request.Request(url + "/api/v1/run", data=json.dumps({"model": os.path.basename(model),
                                         "ids": ids}).encode(), headers={"Content-Type": "application/json"})
            run = json.load(urllib.request.urlopen(req, timeout=7200))
            with open(f"/proc/{srv.pid}/status") as f:
                hwm = int(re.search(r"VmHWM:\s+(\d+)", f.read()).group(1)) * 1024
            print(f"server POST /run ({run['capture']}, T = {T}): {time.time() - t:.0f} s, peak RSS {hwm / MB:.0f} MB "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
            subprocess.run(["node", os.path.join(HERE, "long_modelview.mjs"), a.binary, model, str(T),
                            str(max(2, a.repeat)), url, str(srv.pid)], check=False)
        finally:
            srv.terminate()


if __name__ == "__main__":
    main()
