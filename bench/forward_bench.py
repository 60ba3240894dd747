#!/usr/bin/python3
"""forward_bench.py — the driver of bench/run.sh: one BERT-base forward with full
attention capture, attnscope (`BIN bench`) against the best PyTorch configuration found
(bench/torch_ref.py), for each token count.

1. Check: the tuned reference against the old one and against `attnscope run` on the
   same ids (max abs diff of every captured tensor), at CHECK_T tokens.
2. Screen: every configuration of bench/configs.py (threads x interop x
   OPENBLAS_NUM_THREADS x OMP_WAIT_POLICY x malloc, 32) and the old reference in one
   configuration, SCREEN_REPEAT forwards each at every T. Written to
   bench/out/screen.md (median ms of every configuration at every T).
3. Rounds: per T, the screen's best one-core configuration and its two best
   configurations overall run interleaved with attnscope at 1 and 2 threads, ROUNDS
   rounds of REPEAT forwards (one process per call). A figure is the median over rounds
   of each call's median; the best PyTorch figure is the lowest of the configurations
   measured in the rounds. Every call: bench/out/rounds.txt; the table:
   bench/out/latest.md.

Settings (environment): BIN, TOKENS ("64 128 256 384 512 768 1024"), REPEAT (5),
ROUNDS (3), SCREEN_REPEAT (2), CHECK_T (128; 0 skips the check), PRECISION (attnscope's
--precision: f32, the default, or bf16; PyTorch stays float32, the reference's precision).
"""
import os, re, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import configs  # noqa: E402
from configs import num, sh  # noqa: E402

PY = "/usr/bin/python3"
REF = os.path.join(HERE, "torch_ref.py")
M = os.path.join(HERE, "out", "bert-base-random")
OUT = os.path.join(HERE, "out")




def attnscope(bin_, T, n, repeat):
    e = dict(os.environ)
    e.pop("OPENBLAS_CORETYPE", None)
    prec = os.environ.get("PRECISION", "f32")
    return sh([bin_, "bench", "--model", M, "--tokens", str(T), "--repeat", str(repeat), "--threads", str(n),
               "--precision", prec], e).strip().splitlines()[-1]


def torch_run(cfg, tokens, threads, repeat, impl="tuned"):
    return sh([PY, REF, "--model", M, "--tokens", ",".join(map(str, tokens)),
               "--threads", ",".join(map(str, threads)), "--interop", str(cfg["interop"]),
               "--repeat", str(repeat), "--impl", impl], configs.env(cfg)).strip().splitlines()


def main():
    bin_ = os.environ.get("BIN", "./build/attnscope")
    tokens = [int(x) for x in os.environ.get("TOKENS", "64 128 256 384 512 768 1024").split()]
    repeat = int(os.environ.get("REPEAT", "5"))
    rounds = int(os.environ.get("ROUNDS", "3"))
    srepeat = int(os.environ.get("SCREEN_REPEAT", "2"))
    check_t = int(os.environ.get("CHECK_T", "128"))
    os.makedirs(OUT, exist_ok=True)
    load = lambda: open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else "?"
    print("load average before:", " ".join(load()), flush=True)

    if check_t:
        ids = sh([PY, REF, "--model", M, "--print-ids", str(check_t)]).strip()
        npz = os.path.join(OUT, "check_%d.npz" % check_t)
        sh([bin_, "run", "--model", M, "--ids", ids, "--format", "npz", "--out", npz, "--quiet"])
        print(sh([PY, REF, "--model", M, "--check", str(check_t), "--npz", npz]).strip(), flush=True)

    # 2. screen
    screen = {}  # label -> {T: median}
    for g, ns in configs.process_groups():
        for line in torch_run(g, tokens, ns, srepeat):
            cfg = dict(g, threads=int(num(line, "threads")))
            screen.setdefault(configs.label(cfg), {})[int(num(line, "T"))] = num(line, "median_ms")
        print("screened", configs.label(dict(g, threads=0)).replace("t0/", ""), flush=True)
    old_cfg = {"threads": 1, "interop": 1, "openblas": "unset", "wait": "PASSIVE"}
    old = {int(num(l, "T")): num(l, "median_ms") for l in torch_run(old_cfg, tokens, [1], srepeat, "old")}
    with open(os.path.join(OUT, "screen.md"), "w") as f:
        f.write("Screen: median ms of %d forwards (after one warm-up) per configuration "
                "(threads/interop/OPENBLAS_NUM_THREADS/OMP_WAIT_POLICY); * = one core\n\n" % srepeat)
        f.write("| configuration | " + " | ".join("T=%d" % T for T in tokens) + " |\n")
        f.write("|---|" + "---|" * len(tokens) + "\n")
        for lab, row in screen.items():
            star = "*" if configs.one_core(configs.parse_label(lab)) else ""
            f.write("| %s%s | %s |\n" % (lab, star, " | ".join("%.1f" % row[T] for T in tokens)))
        f.write("| old reference, %s | %s |\n" % (configs.label(old_cfg), " | ".join("%.1f" % old[T] for T in tokens)))
    print(open(os.path.join(OUT, "screen.md")).read(), flush=True)

    chosen = {}
    for T in tokens:
        ranked = sorted(screen, key=lambda lab: screen[lab][T])
        one = [lab for lab in ranked if configs.one_core(configs.parse_label(lab))][0]
        chosen[T] = list(dict.fromkeys([one] + ranked[:2]))

    # 3. rounds
    res = {T: {} for T in tokens}  # T -> name -> [lines]
    with open(os.path.join(OUT, "rounds.txt"), "w") as log:
        for r in range(rounds):
            for T in tokens:
                calls = [("attnscope 1t", lambda: attnscope(bin_, T, 1, repeat)),
                         ("attnscope 2t", lambda: attnscope(bin_, T, 2, repeat))]
                for lab in chosen[T]:
                    cfg = configs.parse_label(lab)
                    calls.append(("torch " + lab, lambda cfg=cfg: torch_run(cfg, [T], [cfg["threads"]], repeat)[-1]))
                for name, fn in calls:
                    line = fn()
                    res[T].setdefault(name, []).append(line)
                    log.write("round %d T %d %s: %s\n" % (r + 1, T, name, line))
                    log.flush()
            print("round %d done" % (r + 1), flush=True)

    med = lambda lines, key="median_ms": statistics.median(num(l, key) for l in lines)
    rows = ["| tokens | attnscope 1t ms | attnscope 2t ms | torch one-core best (config) ms "
            "| torch best (config) ms | one-core ratio | best ratio | attnscope GFLOP/s 1t; 2t "
            "| attnscope % of sgemm peak 1t; 2t | attnscope peak RSS MB | captured MB | torch peak RSS MB |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for T in tokens:
        d = res[T]
        a1, a2 = med(d["attnscope 1t"]), med(d["attnscope 2t"])
        tm = {lab: med(d["torch " + lab]) for lab in chosen[T]}
        one = min((lab for lab in tm if configs.one_core(configs.parse_label(lab))), key=tm.get)
        best = min(tm, key=tm.get)
        rss_t = max(num(l, "peak_rss_mb") for lab in tm for l in d["torch " + lab])
        rss_a = max(num(l, "peak_rss_mb") for k in ("attnscope 1t", "attnscope 2t") for l in d[k])
        rows.append("| %d | %.1f | %.1f | %.1f (%s) | %.1f (%s) | %.2fx | **%.2fx** | %.1f; %.1f | %.0f%%; %.0f%% "
                    "| %.1f | %.1f | %.1f |" % (
                        T, a1, a2, tm[one], one, tm[best], best, tm[one] / a1, tm[best] / min(a1, a2),
                        med(d["attnscope 1t"], "gflops"), med(d["attnscope 2t"], "gflops"),
                        med(d["attnscope 1t"], "efficiency"), med(d["attnscope 2t"], "efficiency"),
                        rss_a, num(d["attnscope 1t"][0], "captured_mb"), rss_t))
    table = "\n".join(rows) + "\n"
    with open(os.path.join(OUT, "latest.md"), "w") as f:
        f.write(table)
    print(table)
    print("load average after:", " ".join(load()))
    print("screen: bench/out/screen.md; rounds: bench/out/rounds.txt; table: bench/out/latest.md")


if __name__ == "__main__":
    main()
