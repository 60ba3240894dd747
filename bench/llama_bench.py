#!/usr/bin/python3
"""llama_bench.py — the driver of bench/llama_bench.sh: prefill of the random 1B-shaped
Llama (bench/make_llama_checkpoint.py), keeping one layer's attention (LAYER) and the
logits, attnscope (`BIN bench --layer L --capture attn,logits`) against the best PyTorch
configuration found (bench/llama_torch.py), in F32 and in BF16, at each token count.

1. Check (CHECK_T tokens; 0 skips): `attnscope run --layer L --capture attn,logits` on the
   BF16 file against llama_torch.py's float32 forward from the same weights (max abs
   difference of the layer's attention and of the logits).
2. Screen at SCREEN_T (SCREEN_REPEAT forwards after a warm-up): PyTorch float32 in each
   OPENBLAS_NUM_THREADS (1, unset) x OMP_WAIT_POLICY (PASSIVE, ACTIVE) x
   set_num_threads (1, 2) x malloc (default, hugetlb: bench/configs.py); bfloat16 in each
   wait policy x set_num_threads x malloc (its products
   are oneDNN's, which OpenBLAS's threads do not touch); bfloat16-stored weights with
   float32 products once (OpenBLAS unset, PASSIVE, 2 threads). Interop threads stay 1: an
   eager forward of one sequence runs no inter-op work. SCREEN=full screens bench/configs.py's
   32 configurations per dtype instead. Written to bench/out/llama_screen.md.
3. Measure, per T of TOKENS, one process per call, in this order: attnscope F32 (BF16
   file, F32 products), PyTorch float32 (F32 file) in the screen's best float32
   configuration, attnscope --precision bf16, PyTorch bfloat16 in its best configuration
   (and bfloat16-stored weights when BF16W=1, or when the screen found bfloat16 slower
   than float32); REPEAT forwards each after one warm-up (REPEAT_LONG above 1024 tokens,
   where one forward takes half a minute). For T in THROUGHPUT_TOKENS the
   same forwards without capture (`--capture none`: logits only) give tokens/s. At
   F32FILE_TOKENS attnscope F32 also runs on the F32 file. ROUNDS rounds of all of it,
   interleaved; a figure is the median over rounds. Every call, with the share of the
   cores that other processes used meanwhile (others_pct, from /proc/stat):
   bench/out/llama_rounds.txt; the table: bench/out/llama_latest.md.
   With COLD=1 (the default) each attnscope call starts with its checkpoint dropped from
   the page cache (POSIX_FADV_DONTNEED), so that it maps the file as read from disk, as a
   checkpoint is on first use: the kernel then caches it in 2 MiB folios. Otherwise the
   pages are as the previous reader left them (PyTorch's read() leaves mostly 4 KiB ones:
   7-13% slower at 512 tokens); attnscope's line says which (weights_on_2mib_pages).
   PyTorch copies the weights into its own memory, whatever the cache holds.

Settings (environment): BIN, MODEL (bench/out/llama-1b-bf16), MODEL_F32
(bench/out/llama-1b-f32), TOKENS ("512 2048"), LAYER (8), REPEAT (2), REPEAT_LONG (1),
THREADS (attnscope's, 2), SCREEN_T (512), SCREEN_REPEAT (1), SCREEN (short|full),
CHECK_T (32), THROUGHPUT_TOKENS ("512"), F32FILE_TOKENS ("512"), BF16W (auto|0|1), ROUNDS (1),
COLD (1|0).
"""
import os, re, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import configs  # noqa: E402
from configs import num, sh  # noqa: E402

PY = "/usr/bin/python3"
REF = os.path.join(HERE, "llama_torch.py")
OUT = os.path.join(HERE, "out")
T0 = time.time()




def busy_s():
    """CPU seconds all processes have run so far (/proc/stat: user, nice, system, irq,
    softirq, steal; USER_HZ = 100)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) / 100.0


def sh_others(cmd, env=None):
    """sh(cmd), and the share of the machine's cores that other processes used meanwhile
    (CPU time of everything minus that of cmd, over wall time x cores), in %."""
    t0, b0, c0 = time.time(), busy_s(), os.times()
    out = sh(cmd, env)
    t1, b1, c1 = time.time(), busy_s(), os.times()
    own = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    return out, max(0.0, 100.0 * (b1 - b0 - own) / ((t1 - t0) * (os.cpu_count() or 1)))


def say(*a):
    print("[%5.0f s]" % (time.time() - T0), *a, flush=True)


class Bench:
    def __init__(self):
        g = os.environ.get
        self.bin = g("BIN", "./build-bench/attnscope")
        self.model = g("MODEL", os.path.join(OUT, "llama-1b-bf16"))
        self.model_f32 = g("MODEL_F32", os.path.join(OUT, "llama-1b-f32"))
        self.tokens = [int(x) for x in g("TOKENS", "512 2048").split()]
        self.layer = int(g("LAYER", "8"))
        self.repeat = int(g("REPEAT", "2"))
        self.repeat_long = int(g("REPEAT_LONG", "1"))
        self.threads = int(g("THREADS", "2"))
        self.screen_t = int(g("SCREEN_T", "512"))
        self.screen_repeat = int(g("SCREEN_REPEAT", "1"))
        self.screen_full = g("SCREEN", "short") == "full"
        self.check_t = int(g("CHECK_T", "32"))
        self.tput = [int(x) for x in g("THROUGHPUT_TOKENS", "512").split()]
        self.f32file = [int(x) for x in g("F32FILE_TOKENS", "512").split()]
        self.bf16w = g("BF16W", "auto")
        self.rounds = int(g("ROUNDS", "1"))
        self.cold = g("COLD", "1") == "1"
        self.log = open(os.path.join(OUT, "llama_rounds.txt"), "w")

    def attnscope(self, model, T, prec, capture, repeat):
        e = dict(os.environ)
        e.pop("OPENBLAS_CORETYPE", None)
        if self.cold:
            for name in os.listdir(model):
                if name.endswith(".safetensors"):
                    configs.drop_from_page_cache(os.path.join(model, name))
        cmd = [self.bin, "bench", "--model", model, "--tokens", str(T), "--repeat", str(repeat),
               "--threads", str(self.threads), "--precision", prec, "--layer", str(self.layer), "--capture", capture]
        out, others = sh_others(cmd, e)
        line = out.strip().splitlines()[-1] + "  others_pct %.1f" % others
        self.log.write("%s\n  %s\n" % (" ".join(cmd), line))
        self.log.flush()
        return line

    def torch(self, cfg, model, dtype, tokens, threads, capture, repeat):
        cmd = [PY, REF, "--model", model, "--dtype", dtype, "--tokens", ",".join(map(str, tokens)),
               "--threads", ",".join(map(str, threads)), "--interop", str(cfg["interop"]), "--repeat", str(repeat),
               "--layer", str(self.layer), "--capture", capture]
        out, others = sh_others(cmd, configs.env(cfg))
        lines = [l + "  others_pct %.1f" % others for l in out.strip().splitlines()]
        self.log.write("%s  [%s]\n%s\n" % (" ".join(cmd), configs.label(dict(cfg, threads=0))[3:],
                                           "\n".join("  " + l for l in lines)))
        self.log.flush()
        return lines

    def check(self):
        ids = sh([PY, REF, "--model", self.model, "--print-ids", str(self.check_t)]).strip()
        npz = os.path.join(OUT, "llama_check_%d.npz" % self.check_t)
        sh([self.bin, "run", "--model", self.model, "--ids", ids, "--layer", str(self.layer), "--capture",
            "attn,logits", "--format", "npz", "--out", npz, "--quiet"])
        say(sh([PY, REF, "--model", self.model, "--check", str(self.check_t), "--npz", npz, "--layer",
                str(self.layer)]).strip())

    def screen(self):
        """{dtype: {label: median ms at SCREEN_T}}"""
        groups = {"f32": [], "bf16": [], "bf16w": []}
        if self.screen_full:
            for g, ns in configs.process_groups():
                groups["f32"].append((g, ns))
                groups["bf16"].append((g, ns))
        else:
            for m in configs.MALLOC:
                for ob in ("unset", "1"):
                    for w in ("PASSIVE", "ACTIVE"):
                        groups["f32"].append(({"openblas": ob, "wait": w, "interop": 1, "malloc": m}, [2, 1]))
                for w in ("PASSIVE", "ACTIVE"):
                    groups["bf16"].append(({"openblas": "unset", "wait": w, "interop": 1, "malloc": m}, [2, 1]))
        groups["bf16w"].append(({"openblas": "unset", "wait": "PASSIVE", "interop": 1}, [2]))
        res = {}
        for dtype, gs in groups.items():
            model = self.model_f32 if dtype == "f32" else self.model
            for g, ns in gs:
                for line in self.torch(g, model, dtype, [self.screen_t], ns, "attn", self.screen_repeat):
                    lab = configs.label(dict(g, threads=int(num(line, "threads"))))
                    res.setdefault(dtype, {})[lab] = (num(line, "median_ms"), num(line, "load_s"))
                say("screened", dtype, configs.label(dict(g, threads=0))[3:])
        with open(os.path.join(OUT, "llama_screen.md"), "w") as f:
            f.write("Screen at T=%d: median ms of %d prefill(s) after one warm-up, keeping layer %d's attention "
                    "and the logits, per dtype and configuration (threads/interop/OPENBLAS_NUM_THREADS/"
                    "OMP_WAIT_POLICY); load s = the process's weight loading\n\n| dtype | configuration | ms | "
                    "load s |\n|---|---|---|---|\n" % (self.screen_t, self.screen_repeat, self.layer))
            for dtype, d in res.items():
                for lab, (ms, ld) in sorted(d.items(), key=lambda kv: kv[1][0]):
                    f.write("| %s | %s | %.1f | %.1f |\n" % (dtype, lab, ms, ld))
        say("screen:\n" + open(os.path.join(OUT, "llama_screen.md")).read())
        return {dtype: {lab: ms for lab, (ms, _) in d.items()} for dtype, d in res.items()}

    def run(self):
        os.makedirs(OUT, exist_ok=True)
        quiet = os.path.exists("/tmp/bench_quiet")
        say("load average before:", open("/proc/loadavg").read().split()[:3],
            "(/tmp/bench_quiet %s)" % ("present" if quiet else "ABSENT: busy machine"))
        if self.check_t:
            self.check()
        scr = self.screen()
        best = {d: min(scr[d], key=scr[d].get) for d in scr}
        use_bf16w = self.bf16w == "1" or (self.bf16w == "auto" and scr["bf16"][best["bf16"]] > scr["f32"][best["f32"]])
        say("best:", best, "bf16w measured:", use_bf16w)
        rows = {T: {} for T in self.tokens}  # T -> call -> [line per round]
        add = lambda d, k, line: d.setdefault(k, []).append(line)
        for r in range(self.rounds):
            for T in self.tokens:
                rep = self.repeat if T <= 1024 else self.repeat_long
                tp = T in self.tput
                cap = "attn,none" if tp else "attn"
                d = rows[T]
                for prec, tdt in (("f32", "f32"), ("bf16", "bf16")) + ((("bf16", "bf16w"),) if use_bf16w else ()):
                    if tdt != "bf16w":
                        add(d, "a_" + prec, self.attnscope(self.model, T, prec, "attn,logits", rep))
                        say("round %d T %d attnscope %s:" % (r + 1, T, prec), d["a_" + prec][-1])
                        if tp:
                            add(d, "a_" + prec + "_none", self.attnscope(self.model, T, prec, "none", rep))
                            say("round %d T %d attnscope %s no capture:" % (r + 1, T, prec), d["a_" + prec + "_none"][-1])
                    cfg = configs.parse_label(best[tdt])
                    lines = self.torch(cfg, self.model_f32 if tdt == "f32" else self.model, tdt, [T],
                                       [cfg["threads"]], cap, rep)
                    add(d, "t_" + tdt, lines[0])
                    if tp:
                        add(d, "t_" + tdt + "_none", lines[1])
                    say("round %d T %d torch %s (%s):" % (r + 1, T, tdt, best[tdt]), "\n    ".join(lines))
                if T in self.f32file:
                    add(d, "a_f32file", self.attnscope(self.model_f32, T, "f32", "attn,logits", rep))
                    say("round %d T %d attnscope f32 on the F32 file:" % (r + 1, T), d["a_f32file"][-1])
        self.table(rows, best, use_bf16w)
        say("load average after:", open("/proc/loadavg").read().split()[:3])

    def table(self, rows, best, use_bf16w):
        """Per call, the median over rounds of each call's median ms; peak RSS: the largest;
        others: the largest share of the cores other processes used during one of its calls."""
        ms = lambda ls: statistics.median(num(l, "median_ms") for l in ls)
        rss = lambda ls: max(num(l, "peak_rss_mb") for l in ls)
        oth = lambda *lss: max(num(l, "others_pct") for ls in lss for l in ls)
        gf = lambda ls: statistics.median(num(l, "gflops") for l in ls)
        tps = lambda T, ls: "%.0f" % (T / ms(ls) * 1e3) if ls else "-"
        out = ["| T | precision | attnscope ms (GFLOP/s) | PyTorch ms (config) | speed ratio (PyTorch ms / "
               "attnscope ms) | attnscope peak RSS MB | PyTorch peak RSS MB | attnscope tokens/s, no capture "
               "| PyTorch tokens/s, no capture | others' CPU % (max) |", "|---|---|---|---|---|---|---|---|---|---|"]
        for T, d in rows.items():
            for prec, tdt, name in (("f32", "f32", "F32"), ("bf16", "bf16", "BF16")) + \
                    ((("bf16", "bf16w", "BF16 stored, F32 products (PyTorch)"),) if use_bf16w else ()):
                a, t = d["a_" + prec], d["t_" + tdt]
                an, tn = d.get("a_" + prec + "_none", []), d.get("t_" + tdt + "_none", [])
                out.append("| %d | %s | %.1f (%.1f) | %.1f (%s) | **%.2fx** | %.0f | %.0f | %s | %s | %.1f |" % (
                    T, name, ms(a), gf(a), ms(t), best[tdt], ms(t) / ms(a), rss(a), rss(t), tps(T, an), tps(T, tn),
                    oth(a, t, an, tn)))
            if "a_f32file" in d:
                a = d["a_f32file"]
                out.append("| %d | F32, attnscope on the F32 file | %.1f (%.1f) | %.1f (%s) | %.2fx | %.0f | %.0f | - | - "
                           "| %.1f |" % (T, ms(a), gf(a), ms(d["t_f32"]), best["f32"], ms(d["t_f32"]) / ms(a), rss(a),
                                         rss(d["t_f32"]), oth(a)))
        table = "\n".join(out) + "\n"
        with open(os.path.join(OUT, "llama_latest.md"), "w") as f:
            f.write(table)
        print(table)
        print("screen: bench/out/llama_screen.md; calls: bench/out/llama_rounds.txt; table: bench/out/llama_latest.md")


if __name__ == "__main__":
    Bench().run()
