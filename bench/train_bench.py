#!/usr/bin/python3
"""train_bench.py — the driver of bench/train_bench.sh: training throughput (tokens/s) of
`attnscope pretrain` against the best PyTorch configuration found (bench/train_torch.py)
on the same model, batch and sequence length: L=4 D=128 H=4 F=512 V=8192, B=32, T=64 (or
TRAIN_SHAPE="L D H F 8192 T B"),
15% of the tokens predicted, AdamW + global-norm clipping, dropout off (the shipped
teacher's shape). attnscope trains on real sentence pairs (they fill T nearly always;
its tokens/s counts real tokens only), torch on random full-length ids.

1. Check: 3 steps of AdamW foreach vs loop from the same weights (max abs diff).
2. Screen: the 32 configurations of bench/configs.py (threads, waits, malloc), optimizer "foreach", plus
   "loop" and (where this torch has it) "fused" AdamW in the best screened configuration;
   SCREEN_STEPS steps each after 3 warm-up steps. Written to bench/out/train_screen.md.
3. Rounds: attnscope at 1 and 2 threads, interleaved with the screen's best one-core
   configuration and its two best overall, ROUNDS rounds of STEPS steps. A figure is the
   median over rounds. Workloads: "1 thread" = attnscope --threads 1 against the best
   one-core configuration (set_num_threads(1), OPENBLAS_NUM_THREADS=1); "2 threads" =
   attnscope --threads 2 against the best of every configuration measured.
Every call: bench/out/train_rounds.txt; table: bench/out/train_latest.md.

Settings (environment): BIN, STEPS (30), ROUNDS (3), SCREEN_STEPS (10), AS_DATA
(../shared/data); TRAIN_CORPUS: the pretraining corpus and vocabulary source (default SST-2
train, whose one-sentence documents make short pairs; a corpus of long documents, e.g. the KJV
with a chapter a document, fills T as the PyTorch side's full-length ids do); BIN_B: a second attnscope binary (e.g. the build before a change) run in
the same rounds, with its own rows and ratios ("attnscope-B"); TORCH_CONFIGS: comma-separated
configuration labels (the first the one-core reference) to use instead of the screen;
PRECISION: attnscope's --precision (f32, default, or bf16); TORCH_DTYPES: comma-separated
PyTorch precisions run in the rounds (float32, default, and/or bfloat16 = torch.autocast
mixed precision), each with its own rows (the screen runs float32).
"""
import os, re, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import configs  # noqa: E402

PY = "/usr/bin/python3"
OUT = os.path.join(HERE, "out")
# L D H F V T B: TRAIN_SHAPE="12 768 12 3072 8192 128 8" for a BERT-base-sized model (V stays 8192)
SHAPE = os.environ.get("TRAIN_SHAPE", "4 128 4 512 8192 64 32").split()
if len(SHAPE) != 7 or SHAPE[4] != "8192":
    sys.exit("train_bench: TRAIN_SHAPE is 'L D H F V T B' with V = 8192 (the vocabulary built here)")


def sh(cmd, env=None, check=True):
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode and check:
        sys.exit("train_bench: %s failed (%d):\n%s" % (" ".join(cmd), r.returncode, r.stderr))
    return r


def torch_tps(cfg, steps, optim="foreach", dtype="float32"):
    r = sh([PY, os.path.join(HERE, "train_torch.py")] + SHAPE + [str(steps), str(cfg["threads"]),
           "--interop", str(cfg["interop"]), "--optim", optim, "--dtype", dtype], configs.env(cfg),
           check=optim != "fused")
    if r.returncode:
        return None, r.stderr.strip().splitlines()[-1]
    line = r.stdout.strip().splitlines()[-1]
    return float(line.split()[2]), line


def main():
    bin_ = os.environ.get("BIN", "./build/attnscope")
    steps = int(os.environ.get("STEPS", "30"))
    rounds = int(os.environ.get("ROUNDS", "3"))
    ssteps = int(os.environ.get("SCREEN_STEPS", "10"))
    data = os.environ.get("AS_DATA", os.path.join(HERE, "..", "..", "shared", "data"))
    corpus = os.environ.get("TRAIN_CORPUS", os.path.join(data, "sst2", "train.tsv"))
    precision = os.environ.get("PRECISION", "f32")
    dtypes = [d for d in os.environ.get("TORCH_DTYPES", "float32").split(",") if d]
    os.makedirs(OUT, exist_ok=True)
    tmp = tempfile.mkdtemp()
    load = lambda: " ".join(open("/proc/loadavg").read().split()[:3])
    print("load average before:", load(), flush=True)
    vocab = os.path.join(tmp, "vocab.txt")
    sh([bin_, "vocab", "--corpus", corpus, "--size", "8192", "--out", vocab])
    n = sum(1 for _ in open(vocab, encoding="utf-8"))
    with open(vocab, "a", encoding="utf-8") as f:  # pad to exactly V = 8192 entries
        for i in range(8192 - n):
            f.write("[unused%d]\n" % i)

    def attnscope(threads, binary=bin_):
        e = dict(os.environ)
        e.pop("OPENBLAS_CORETYPE", None)
        e["OMP_NUM_THREADS"] = str(threads)
        r = sh([binary, "pretrain", "--corpus", corpus, "--vocab", vocab,
                "--out", os.path.join(tmp, "m"), "--layers", SHAPE[0], "--width", SHAPE[1], "--heads", SHAPE[2],
                "--ff", SHAPE[3], "--max-len", SHAPE[5], "--seq-len", SHAPE[5], "--batch", SHAPE[6],
                "--steps", str(steps + 3), "--log-every", "1", "--dropout", "0",
                "--threads", str(threads), "--precision", precision], e)
        tps = [float(m.group(1)) for m in re.finditer(r"([0-9.]+) tok/s", r.stderr)]
        tps = tps[-steps:]  # the steps after 3 warm-up steps, as the torch side
        return sum(tps) / len(tps)

    print(sh([PY, os.path.join(HERE, "train_torch.py")] + SHAPE + ["0", "1", "--check"]).stdout.strip(), flush=True)
    bin_b = os.environ.get("BIN_B")
    given = [lab for lab in os.environ.get("TORCH_CONFIGS", "").split(",") if lab]
    screen = {}
    for cfg in configs.grid() if not given else []:
        screen[configs.label(cfg)], _ = torch_tps(cfg, ssteps)
    best = max(screen, key=screen.get) if screen else given[0]
    extra = {}
    for optim in ("loop", "fused") if screen else []:
        extra[optim] = torch_tps(configs.parse_label(best), ssteps, optim)
    with open(os.path.join(OUT, "train_screen.md"), "w") as f:
        f.write("Screen: torch tokens/s over %d steps (after 3 warm-up) per configuration "
                "(threads/interop/OPENBLAS_NUM_THREADS/OMP_WAIT_POLICY; * = one core), AdamW foreach\n\n"
                "| configuration | tokens/s |\n|---|---|\n" % ssteps)
        for lab, v in screen.items():
            f.write("| %s%s | %.0f |\n" % (lab, "*" if configs.one_core(configs.parse_label(lab)) else "", v))
        for optim, (v, line) in extra.items():
            f.write("| %s, AdamW %s | %s |\n" % (best, optim, "%.0f" % v if v else "not available: " + line))
    if screen:
        print(open(os.path.join(OUT, "train_screen.md")).read(), flush=True)
    ranked = sorted(screen, key=screen.get, reverse=True)
    one = [lab for lab in ranked if configs.one_core(configs.parse_label(lab))][0] if screen else given[0]
    chosen = list(dict.fromkeys([one] + ranked[:2])) if screen else given
    optim = "foreach"
    if screen and extra["fused"][0] and extra["fused"][0] > screen[best]:
        optim = "fused"
    res = {}
    with open(os.path.join(OUT, "train_rounds.txt"), "w") as log:
        for r in range(rounds):
            calls = [("attnscope 1t", lambda: attnscope(1)), ("attnscope 2t", lambda: attnscope(2))]
            if bin_b:
                calls += [("attnscope-B 1t", lambda: attnscope(1, bin_b)), ("attnscope-B 2t", lambda: attnscope(2, bin_b))]
            for lab in chosen:
                for dt in dtypes:
                    calls.append(("torch %s %s" % (lab, dt),
                                  lambda lab=lab, dt=dt: torch_tps(configs.parse_label(lab), steps, optim, dt)[0]))
            for name, fn in calls:
                v = fn()
                res.setdefault(name, []).append(v)
                log.write("round %d %s: %.0f tokens/s\n" % (r + 1, name, v))
                log.flush()
            print("round %d done" % (r + 1), flush=True)
    med = {k: statistics.median(v) for k, v in res.items()}
    rows = ["| workload (attnscope --precision %s) | attnscope tokens/s | torch tokens/s (config, dtype) | ratio |"
            % precision, "|---|---|---|---|"]
    for dt in dtypes:
        tone = med["torch %s %s" % (one, dt)]
        tbest_lab = max(chosen, key=lambda lab: med["torch %s %s" % (lab, dt)])
        tbest = med["torch %s %s" % (tbest_lab, dt)]
        rows += ["| 1 thread | %.0f | %.0f (%s, AdamW %s, %s) | **%.2fx** |" % (
                     med["attnscope 1t"], tone, one, optim, dt, med["attnscope 1t"] / tone),
                 "| 2 threads | %.0f | %.0f (%s, AdamW %s, %s) | **%.2fx** |" % (
                     med["attnscope 2t"], tbest, tbest_lab, optim, dt, med["attnscope 2t"] / tbest)]
    tone = med["torch %s %s" % (one, dtypes[0])]
    tbest_lab = max(chosen, key=lambda lab: med["torch %s %s" % (lab, dtypes[0])])
    tbest = med["torch %s %s" % (tbest_lab, dtypes[0])]
    if bin_b:
        rows += ["| 1 thread, B | %.0f | %.0f (%s) | **%.2fx** |" % (med["attnscope-B 1t"], tone, one,
                                                                    med["attnscope-B 1t"] / tone),
                 "| 2 threads, B | %.0f | %.0f (%s) | **%.2fx** |" % (med["attnscope-B 2t"], tbest, tbest_lab,
                                                                     med["attnscope-B 2t"] / tbest)]
    table = "\n".join(rows) + "\n"
    with open(os.path.join(OUT, "train_latest.md"), "w") as f:
        f.write(table)
    print(table)
    print("load average after:", load())
    print("screen: bench/out/train_screen.md; rounds: bench/out/train_rounds.txt; table: bench/out/train_latest.md")


if __name__ == "__main__":
    main()
