#!/usr/bin/python3
"""analysis_bench.py — the driver of bench/analysis_bench.sh: corpus analysis throughput
(forward + gradient saliency on SST-2 + every score), attnscope against the best PyTorch
configuration found (bench/analysis_torch.py), on SST-2 dev and on UD EWT dev
separately, BERT-base-sized random classifier (bench/out/bert-base-random-tok).

attnscope runs `analyze --explain 0 --min-rel 20` (the reference implements the scores,
not the explanation), at 1 and 2 threads, and under `mpirun -n MPI` when MPI > 1; its
time is the command's wall time, which includes loading the model, its SHA-256 digest
and the SQLite writes. Its fixed cost is measured in the same round by the same command
with --limit 1 (one sentence) and subtracted for the "work" figures, since the
reference's timer covers only its sentence loop (loading and reading the database are
not timed there).

Per corpus:
1. Screen: the 32 configurations of bench/configs.py (threads, waits, malloc) (tuned reference) and the
   old reference in one configuration, on the first SCREEN_LIMIT sentences. Written to
   bench/out/analysis_screen_<corpus>.md.
2. Rounds (ROUNDS, default 1): attnscope 1t (writes the database the reference reads),
   2t, mpirun -n MPI, the fixed cost; then the screen's best one-core configuration and
   two best overall, and WORKERS (2) processes of the best one-core configuration with
   OMP_WAIT_POLICY=PASSIVE side by side, each taking every WORKERS-th sentence (time:
   the slowest worker's loop). PASSIVE because libgomp threads of one process that spin
   while idle (ACTIVE) take the core of the other.
   Every call: bench/out/analysis_rounds.txt; table: bench/out/analysis_latest.md.
The reference's per-head means and head-pair JSD are checked against attnscope's
database in every full single-process run (max abs diff printed with each call).

Settings (environment): BIN, LIMIT (sentences per corpus, 0 = all: 872 SST-2, 2,001
EWT), SCREEN_LIMIT (30), ROUNDS (1), MPI (0 = off), WORKERS (2), CORPORA ("sst2 ud"),
PRECISION (attnscope's --precision: f32, or bf16 against the same float32 reference; the
agreement check then shows BF16's error).
"""
import os, re, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import configs  # noqa: E402
from configs import num, sh  # noqa: E402

PY = "/usr/bin/python3"
OUT = os.path.join(HERE, "out")
M = os.path.join(OUT, "bert-base-random-tok")
DATA = os.environ.get("AS_DATA", os.path.join(HERE, "..", "..", "shared", "data"))
CORPUS = {"sst2": ["--sst2", os.path.join(DATA, "sst2", "dev.tsv")],
          "ud": ["--conllu", os.path.join(DATA, "ud", "en_ewt-ud-dev.conllu")]}



def rmdb(db):
    for x in (db, db + "-wal", db + "-shm", db + "-journal"):
        if os.path.exists(x):
            os.remove(x)


def attnscope(bin_, corpus, limit, db, threads=None, mpi=0):
    rmdb(db)
    e = dict(os.environ)
    e.pop("OPENBLAS_CORETYPE", None)
    cmd = [bin_, "analyze", "--model", M] + CORPUS[corpus] + (["--limit", str(limit)] if limit else []) + \
        ["--explain", "0", "--min-rel", "20", "--quiet", "--db", db, "--precision", os.environ.get("PRECISION", "f32")]
    if mpi:
        e["OMPI_MCA_btl_vader_single_copy_mechanism"] = "none"
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-n", str(mpi)] + cmd
    else:
        cmd += ["--threads", str(threads)]
    t0 = time.perf_counter()
    sh(cmd, e)
    return time.perf_counter() - t0


def torch_run(cfg, db, limit, impl="tuned", workers=1):
    base = [PY, os.path.join(HERE, "analysis_torch.py"), "--model", M, "--db", db, "--threads", str(cfg["threads"]),
            "--interop", str(cfg["interop"]), "--impl", impl] + (["--limit", str(limit)] if limit else [])
    ps = [subprocess.Popen(base + ["--worker", str(w), "--workers", str(workers)], env=configs.env(cfg),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(workers)]
    lines = []
    for p in ps:
        out, err = p.communicate()
        if p.returncode:
            sys.exit("analysis_bench: analysis_torch.py failed (%d):\n%s" % (p.returncode, err))
        lines.append(out.strip().splitlines()[-1])
    secs = max(float(re.search(r"in ([0-9.]+) s", l).group(1)) for l in lines)
    n = sum(int(re.search(r"torch: (\d+) sentences", l).group(1)) for l in lines)
    return secs, n, " || ".join(lines)


def main():
    bin_ = os.environ.get("BIN", "./build/attnscope")
    limit = int(os.environ.get("LIMIT", "0"))
    slimit = int(os.environ.get("SCREEN_LIMIT", "30"))
    rounds = int(os.environ.get("ROUNDS", "1"))
    mpi = int(os.environ.get("MPI", "0"))
    workers = int(os.environ.get("WORKERS", "2"))
    corpora = os.environ.get("CORPORA", "sst2 ud").split()
    load = lambda: " ".join(open("/proc/loadavg").read().split()[:3])
    print("load average before:", load(), flush=True)
    rows = ["| corpus | sentences | attnscope 1t s | attnscope 2t s | attnscope mpirun -n %d s | attnscope fixed cost s "
            "| torch one-core best (config) s | torch best single process (config) s | torch %d workers (config) s "
            "| one-core ratio, work (wall) | best ratio, work (wall) |" % (mpi, workers),
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    log = open(os.path.join(OUT, "analysis_rounds.txt"), "w")
    for corpus in corpora:
        db = os.path.join(OUT, "analysis_%s.sqlite" % corpus)
        sdb = os.path.join(OUT, "analysis_%s_screen.sqlite" % corpus)
        attnscope(bin_, corpus, slimit, sdb, threads=2)
        screen = {}
        for cfg in configs.grid():
            secs, n, line = torch_run(cfg, sdb, 0)
            screen[configs.label(cfg)] = secs
            log.write("screen %s %s: %s\n" % (corpus, configs.label(cfg), line))
        old_cfg = {"threads": 1, "interop": 1, "openblas": "1", "wait": "PASSIVE"}
        old_secs, n, line = torch_run(old_cfg, sdb, 0, "old")
        log.write("screen %s old %s: %s\n" % (corpus, configs.label(old_cfg), line))
        log.flush()
        with open(os.path.join(OUT, "analysis_screen_%s.md" % corpus), "w") as f:
            f.write("Screen, %s: the reference's loop time on the first %d sentences per configuration "
                    "(threads/interop/OPENBLAS_NUM_THREADS/OMP_WAIT_POLICY; * = one core)\n\n"
                    "| configuration | s | sentences/s |\n|---|---|---|\n" % (corpus, n))
            for lab, v in screen.items():
                f.write("| %s%s | %.2f | %.2f |\n" % (lab, "*" if configs.one_core(configs.parse_label(lab)) else "",
                                                      v, n / v))
            f.write("| old reference, %s | %.2f | %.2f |\n" % (configs.label(old_cfg), old_secs, n / old_secs))
        print(open(os.path.join(OUT, "analysis_screen_%s.md" % corpus)).read(), flush=True)
        ranked = sorted(screen, key=screen.get)
        one = [lab for lab in ranked if configs.one_core(configs.parse_label(lab))][0]
        wone = [lab for lab in ranked if configs.one_core(configs.parse_label(lab)) and configs.parse_label(lab)["wait"] == "PASSIVE"][0]
        chosen = list(dict.fromkeys([one] + ranked[:2]))
        res, nsent = {}, 0
        for r in range(rounds):
            calls = [("attnscope 1t", lambda: attnscope(bin_, corpus, limit, db, threads=1)),
                     ("attnscope 2t", lambda: attnscope(bin_, corpus, limit, db + ".2t", threads=2))]
            if mpi > 1:
                calls.append(("attnscope mpi", lambda: attnscope(bin_, corpus, limit, db + ".mpi", mpi=mpi)))
            calls.append(("attnscope fixed", lambda: attnscope(bin_, corpus, 1, db + ".fixed", threads=1)))
            for name, fn in calls:
                v = fn()
                res.setdefault(name, []).append(v)
                log.write("round %d %s %s: %.2f s\n" % (r + 1, corpus, name, v))
            nsent = int(subprocess.run(["sqlite3", db, "SELECT COUNT(*) FROM sentences"], stdout=subprocess.PIPE,
                                       text=True).stdout.strip())
            for lab in chosen + ["workers"]:
                cfg = configs.parse_label(wone if lab == "workers" else lab)
                secs, n, line = torch_run(cfg, db, 0, workers=workers if lab == "workers" else 1)
                res.setdefault("torch " + lab, []).append(secs)
                log.write("round %d %s torch %s: %s\n" % (r + 1, corpus, lab, line))
                print(line, flush=True)
            log.flush()
            print("%s round %d done" % (corpus, r + 1), flush=True)
        med = {k: statistics.median(v) for k, v in res.items()}
        fixed = med["attnscope fixed"]
        a_names = ["attnscope 1t", "attnscope 2t"] + (["attnscope mpi"] if mpi > 1 else [])
        a_best = min(med[k] for k in a_names)
        t_one = med["torch " + one]
        t_single = min(chosen, key=lambda lab: med["torch " + lab])
        t_best = min(med["torch " + t_single], med["torch workers"])
        s = lambda v: "%.1f (%.2f/s)" % (v, nsent / v)
        rows.append("| %s | %d | %s | %s | %s | %.1f | %s (%s) | %s (%s) | %s (%s) | %.2fx (%.2fx) | **%.2fx** (%.2fx) |" % (
            corpus, nsent, s(med["attnscope 1t"]), s(med["attnscope 2t"]),
            s(med["attnscope mpi"]) if mpi > 1 else "-", fixed, s(t_one), one, s(med["torch " + t_single]), t_single,
            s(med["torch workers"]), wone, t_one / (med["attnscope 1t"] - fixed), t_one / med["attnscope 1t"],
            t_best / (a_best - fixed), t_best / a_best))
    table = "\n".join(rows) + "\n"
    with open(os.path.join(OUT, "analysis_latest.md"), "w") as f:
        f.write(table)
    print(table)
    print("load average after:", load())
    print("screens: bench/out/analysis_screen_*.md; rounds: bench/out/analysis_rounds.txt; "
          "table: bench/out/analysis_latest.md")


if __name__ == "__main__":
    main()
