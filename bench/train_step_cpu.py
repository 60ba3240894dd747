#!/usr/bin/python3
"""train_step_cpu.py — CPU seconds per training step of `attnscope pretrain` at
bench/train_bench.sh's shape (L=4 D=128 H=4 F=512 V=8192, batch 32 x 64 tokens, dropout
off): the process's utime + stime read from /proc/PID/stat at each step's log line,
averaged over the steps after WARM. CPU time, unlike tokens/s, barely moves with the
machine's load, so two builds compare on a busy machine; wall-clock speed it does not give.

Usage: train_step_cpu.py BIN [BIN ...]   environment: THREADS (1), STEPS (23), WARM (3),
ROUNDS (2), AS_DATA (../shared/data). The binaries run interleaved, ROUNDS times each.
"""
import os, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def step_cpu(binary, corpus, vocab, out, threads, steps, warm):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("OPENBLAS_CORETYPE", None)
    p = subprocess.Popen([binary, "pretrain", "--corpus", corpus, "--vocab", vocab, "--out", out, "--layers", "4",
                          "--width", "128", "--heads", "4", "--ff", "512", "--max-len", "64", "--batch", "32",
                          "--steps", str(steps), "--log-every", "1", "--dropout", "0", "--threads", str(threads)],
                         stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, env=env, text=True)
    tick, marks = os.sysconf("SC_CLK_TCK"), {}
    for line in p.stderr:
        if line.startswith("step "):
            f = open("/proc/%d/stat" % p.pid).read().rsplit(")", 1)[1].split()
            marks[int(line.split()[1].split("/")[0])] = (int(f[11]) + int(f[12])) / tick
    if p.wait() or steps not in marks or warm not in marks:
        sys.exit("train_step_cpu: %s pretrain failed" % binary)
    return (marks[steps] - marks[warm]) / (steps - warm)


def main():
    bins = sys.argv[1:]
    if not bins:
        sys.exit(__doc__)
    threads, steps = int(os.environ.get("THREADS", "1")), int(os.environ.get("STEPS", "23"))
    warm, rounds = int(os.environ.get("WARM", "3")), int(os.environ.get("ROUNDS", "2"))
    data = os.environ.get("AS_DATA", os.path.join(HERE, "..", "..", "shared", "data"))
    corpus, tmp = os.path.join(data, "sst2", "train.tsv"), tempfile.mkdtemp()
    vocab = os.path.join(tmp, "vocab.txt")
    subprocess.run([bins[0], "vocab", "--corpus", corpus, "--size", "8192", "--out", vocab], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    n = sum(1 for _ in open(vocab, encoding="utf-8"))
    with open(vocab, "a", encoding="utf-8") as f:  # pad to exactly V = 8192 entries
        f.write("".join("[unused%d]\n" % i for i in range(8192 - n)))
    load = lambda: " ".join(open("/proc/loadavg").read().split()[:3])
    print("load average before: %s; %d thread(s), steps %d..%d" % (load(), threads, warm, steps), flush=True)
    res = {b: [] for b in bins}
    for r in range(rounds):
        for b in (bins if r % 2 == 0 else bins[::-1]):  # alternate the order between rounds
            res[b].append(step_cpu(b, corpus, vocab, os.path.join(tmp, "m"), threads, steps, warm))
            print("round %d %s: %.4f s/step" % (r + 1, b, res[b][-1]), flush=True)
    for b in bins:
        v = sorted(res[b])
        print("%s: median %.4f s/step CPU (min %.4f, max %.4f)" % (b, v[len(v) // 2], v[0], v[-1]))
    print("load average after:", load())


if __name__ == "__main__":
    main()
