#!/usr/bin/python3
"""saliency_bench.py — the driver of bench/saliency_bench.sh: gradient saliency of one
sentence on the BERT-base-sized random classifier (bench/make_checkpoint.py), attnscope
(`BIN bench --saliency`: sal_compute in-process, median of REPEAT after a warm-up)
against the best PyTorch configuration found (bench/saliency_torch.py: forward +
torch.autograd.grad to the word embeddings), for each token count.

1. Check: the reference's scores and logits against `attnscope saliency --ids ...
   --format json` on the same ids, at CHECK_T tokens.
2. Screen: every configuration of bench/configs.py (32), SCREEN_REPEAT calls each at
   every T. Written to bench/out/saliency_screen.md.
3. Rounds: per T, the screen's best one-core configuration and its two best
   configurations overall run interleaved with attnscope at 1 and 2 threads (and, with
   BEFORE=PATH, another attnscope build at 1 and 2 threads: the code before a change;
   EXTRA="NAME=PATH ..." more builds, each a column pair NAME 1t / 2t),
   ROUNDS rounds of REPEAT calls, one process per call. A figure is the median over
   rounds of each call's median; the PyTorch figure is the lowest of the configurations
   measured in the rounds. Every call: bench/out/saliency_rounds.txt; the table:
   bench/out/saliency_latest.md.

Settings (environment): BIN, BEFORE (unset), EXTRA (unset), TOKENS ("32 128 512"), REPEAT (5), ROUNDS
(3), SCREEN_REPEAT (2), CHECK_T (128; 0 skips the check), PRECISION (attnscope's --precision:
f32 or bf16; default f32), TORCH_DTYPE (PyTorch's: float32 or bfloat16; default float32).
The check runs at those precisions too.
"""
import os, re, statistics, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import configs  # noqa: E402
from configs import num, sh  # noqa: E402

PY = "/usr/bin/python3"
REF = os.path.join(HERE, "saliency_torch.py")
M = os.path.join(HERE, "out", "bert-base-random")
OUT = os.path.join(HERE, "out")




PRECISION = os.environ.get("PRECISION", "f32")
TORCH_DTYPE = os.environ.get("TORCH_DTYPE", "float32")
PREC_ARGS = ["--precision", PRECISION] if PRECISION != "f32" else []  # older builds lack the option


def attnscope(bin_, T, n, repeat):
    e = dict(os.environ)
    e.pop("OPENBLAS_CORETYPE", None)
    e["OMP_WAIT_POLICY"] = "PASSIVE"  # only an older build with OpenMP reads it
    return sh([bin_, "bench", "--saliency", "--model", M, "--tokens", str(T), "--repeat", str(repeat),
               "--threads", str(n)] + PREC_ARGS, e).strip().splitlines()[-1]


def torch_run(cfg, tokens, threads, repeat):
    return sh([PY, REF, "--model", M, "--tokens", ",".join(map(str, tokens)),
               "--threads", ",".join(map(str, threads)), "--interop", str(cfg["interop"]),
               "--repeat", str(repeat), "--dtype", TORCH_DTYPE], configs.env(cfg)).strip().splitlines()


def main():
    bin_ = os.environ.get("BIN", "./build/attnscope")
    others = ([("before", os.environ["BEFORE"])] if os.environ.get("BEFORE") else []) + [
        tuple(x.split("=", 1)) for x in os.environ.get("EXTRA", "").split()]
    tokens = [int(x) for x in os.environ.get("TOKENS", "32 128 512").split()]
    repeat = int(os.environ.get("REPEAT", "5"))
    rounds = int(os.environ.get("ROUNDS", "3"))
    srepeat = int(os.environ.get("SCREEN_REPEAT", "2"))
    check_t = int(os.environ.get("CHECK_T", "128"))
    os.makedirs(OUT, exist_ok=True)
    load = lambda: open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else "?"
    print("load average before:", " ".join(load()), flush=True)

    if check_t:
        ids = sh([PY, REF, "--model", M, "--print-ids", str(check_t)]).strip()
        js = os.path.join(OUT, "saliency_check_%d.json" % check_t)
        with open(js, "w") as f:
            f.write(sh([bin_, "saliency", "--model", M, "--ids", ids, "--format", "json"] + PREC_ARGS))
        print("attnscope %s, PyTorch %s:" % (PRECISION, TORCH_DTYPE),
              sh([PY, REF, "--model", M, "--check", str(check_t), "--json", js, "--dtype", TORCH_DTYPE]).strip(),
              flush=True)

    # 2. screen
    screen = {}  # label -> {T: median}
    for g, ns in configs.process_groups():
        for line in torch_run(g, tokens, ns, srepeat):
            cfg = dict(g, threads=int(num(line, "threads")))
            screen.setdefault(configs.label(cfg), {})[int(num(line, "T"))] = num(line, "median_ms")
        print("screened", configs.label(dict(g, threads=0)).replace("t0/", ""), flush=True)
    with open(os.path.join(OUT, "saliency_screen.md"), "w") as f:
        f.write("Screen: median ms of %d saliency calls (after one warm-up) per configuration "
                "(threads/interop/OPENBLAS_NUM_THREADS/OMP_WAIT_POLICY); * = one core\n\n" % srepeat)
        f.write("| configuration | " + " | ".join("T=%d" % T for T in tokens) + " |\n")
        f.write("|---|" + "---|" * len(tokens) + "\n")
        for lab, row in screen.items():
            star = "*" if configs.one_core(configs.parse_label(lab)) else ""
            f.write("| %s%s | %s |\n" % (lab, star, " | ".join("%.1f" % row[T] for T in tokens)))
    print(open(os.path.join(OUT, "saliency_screen.md")).read(), flush=True)

    chosen = {}
    for T in tokens:
        ranked = sorted(screen, key=lambda lab: screen[lab][T])
        one = [lab for lab in ranked if configs.one_core(configs.parse_label(lab))][0]
        chosen[T] = list(dict.fromkeys([one] + ranked[:2]))

    # 3. rounds
    res = {T: {} for T in tokens}  # T -> name -> [lines]
    with open(os.path.join(OUT, "saliency_rounds.txt"), "w") as log:
        for r in range(rounds):
            for T in tokens:
                calls = [("attnscope 1t", lambda: attnscope(bin_, T, 1, repeat)),
                         ("attnscope 2t", lambda: attnscope(bin_, T, 2, repeat))]
                for oname, opath in others:
                    calls += [("%s 1t" % oname, lambda p=opath: attnscope(p, T, 1, repeat)),
                              ("%s 2t" % oname, lambda p=opath: attnscope(p, T, 2, repeat))]
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
    head = ("| tokens | attnscope 1t ms | attnscope 2t ms | " + "".join("%s 1t ms | %s 2t ms | " % (o, o) for o, _ in others) +
            "torch one-core best (config) ms | torch best (config) ms | one-core ratio | best ratio "
            "| attnscope GFLOP/s 1t; 2t | attnscope % of sgemm peak 1t; 2t | attnscope peak RSS MB "
            "| torch peak RSS MB |")
    rows = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for T in tokens:
        d = res[T]
        a1, a2 = med(d["attnscope 1t"]), med(d["attnscope 2t"])
        tm = {lab: med(d["torch " + lab]) for lab in chosen[T]}
        one = min((lab for lab in tm if configs.one_core(configs.parse_label(lab))), key=tm.get)
        best = min(tm, key=tm.get)
        rss_t = max(num(l, "peak_rss_mb") for lab in tm for l in d["torch " + lab])
        rss_a = max(num(l, "peak_rss_mb") for k in ("attnscope 1t", "attnscope 2t") for l in d[k])
        bf = "".join("%.1f | %.1f | " % (med(d["%s 1t" % o]), med(d["%s 2t" % o])) for o, _ in others)
        rows.append("| %d | %.1f | %.1f | %s%.1f (%s) | %.1f (%s) | %.2fx | **%.2fx** | %.1f; %.1f | %.0f%%; %.0f%% "
                    "| %.1f | %.1f |" % (
                        T, a1, a2, bf, tm[one], one, tm[best], best, tm[one] / a1, tm[best] / min(a1, a2),
                        med(d["attnscope 1t"], "gflops"), med(d["attnscope 2t"], "gflops"),
                        med(d["attnscope 1t"], "efficiency"), med(d["attnscope 2t"], "efficiency"), rss_a, rss_t))
    table = "\n".join(rows) + "\n"
    with open(os.path.join(OUT, "saliency_latest.md"), "w") as f:
        f.write(table)
    print(table)
    print("load average after:", " ".join(load()))
    print("screen: bench/out/saliency_screen.md; rounds: bench/out/saliency_rounds.txt; "
          "table: bench/out/saliency_latest.md")


if __name__ == "__main__":
    main()
