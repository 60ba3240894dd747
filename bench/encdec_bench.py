#!/usr/bin/python3
"""encdec_bench.py — an encoder-decoder forward with capture, attnscope (`BIN bench
--target-tokens`) against its PyTorch reference (bench/encdec_torch.py) in the same run,
on a BART-base-shaped model with random weights (6 + 6 layers, width 768, 12 heads,
feed-forward 3072, vocabulary 50265; written once to bench/out/bart-base-random, 558 MB,
gitignored) at N source and M decoder tokens (default 128 / 128).

1. Check: `attnscope run --capture attn,logits` on the bench's ids against the reference
   (max abs diff of the three attentions, logits relative).
2. Screen: the reference in eight configurations (torch threads 1 or 2 x
   OPENBLAS_NUM_THREADS 1 or unset x glibc malloc as it is or on huge pages; interop 1,
   OMP_WAIT_POLICY PASSIVE: a reduced grid of bench/configs.py), SCREEN_REPEAT forwards each.
3. Rounds: ROUNDS rounds, each calling attnscope at 1 and 2 threads and the screen's best
   one-core and best overall configurations, REPEAT forwards per call (one process per
   call, interleaved). A figure is the median over rounds of each call's median. The
   table goes to stdout and bench/out/encdec_latest.md; every call to
   bench/out/encdec_rounds.txt.

Settings (environment): BIN (./build/attnscope), N (128), M (128), REPEAT (5), ROUNDS (3),
SCREEN_REPEAT (2). Measures, never asserts.
"""
import json
import multiprocessing
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "ref"))
import configs  # noqa: E402
from configs import num, sh  # noqa: E402

PY = "/usr/bin/python3"
REF = os.path.join(HERE, "encdec_torch.py")
OUT = os.path.join(HERE, "out")
M_DIR = os.path.join(OUT, "bart-base-random")
CONFIG = {"model_type": "bart", "architectures": ["BartForConditionalGeneration"], "vocab_size": 50265,
          "d_model": 768, "encoder_layers": 6, "decoder_layers": 6, "encoder_attention_heads": 12,
          "decoder_attention_heads": 12, "encoder_ffn_dim": 3072, "decoder_ffn_dim": 3072,
          "max_position_embeddings": 1024, "activation_function": "gelu", "scale_embedding": False,
          "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2,
          "is_encoder_decoder": True, "tie_word_embeddings": True}


def make_model():
    """BART-base's shapes, random weights (std 0.02, norms 1 / 0), F32, HF names."""
    if os.path.exists(os.path.join(M_DIR, "model.safetensors")):
        return
    import torch
    from gen_models import st_write
    c, g = CONFIG, torch.Generator().manual_seed(0)
    D, Fd, V, P = c["d_model"], c["encoder_ffn_dim"], c["vocab_size"], c["max_position_embeddings"] + 2
    r = lambda *s: torch.randn(*s, generator=g) * 0.02  # noqa: E731
    t = {"model.shared.weight": r(V, D), "final_logits_bias": torch.zeros(1, V)}
    for st in ("encoder", "decoder"):
        p = "model.%s." % st
        t[p + "embed_positions.weight"] = r(P, D)
        t[p + "layernorm_embedding.weight"], t[p + "layernorm_embedding.bias"] = torch.ones(D), torch.zeros(D)
        for l in range(6):
            lp = p + "layers.%d." % l
            for a in ["self_attn"] + (["encoder_attn"] if st == "decoder" else []):
                for x in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    t[lp + a + "." + x + ".weight"], t[lp + a + "." + x + ".bias"] = r(D, D), r(D)
                n = "self_attn_layer_norm" if a == "self_attn" else "encoder_attn_layer_norm"
                t[lp + n + ".weight"], t[lp + n + ".bias"] = torch.ones(D), torch.zeros(D)
            t[lp + "fc1.weight"], t[lp + "fc1.bias"] = r(Fd, D), r(Fd)
            t[lp + "fc2.weight"], t[lp + "fc2.bias"] = r(D, Fd), r(D)
            t[lp + "final_layer_norm.weight"], t[lp + "final_layer_norm.bias"] = torch.ones(D), torch.zeros(D)
    os.makedirs(M_DIR, exist_ok=True)
    st_write(os.path.join(M_DIR, "model.safetensors"), [(k, t[k], "F32") for k in sorted(t)], {"format": "pt"})
    json.dump(c, open(os.path.join(M_DIR, "config.json"), "w"), indent=2)


def attnscope(bin_, n_src, n_dec, threads, repeat):
    e = dict(os.environ)
    e.pop("OPENBLAS_CORETYPE", None)
    return sh([bin_, "bench", "--model", M_DIR, "--tokens", str(n_src), "--target-tokens", str(n_dec),
               "--repeat", str(repeat), "--threads", str(threads)], e).strip().splitlines()[-1]


def torch_run(cfg, n_src, n_dec, threads, repeat):
    return sh([PY, REF, "--model", M_DIR, "--tokens", str(n_src), "--target-tokens", str(n_dec), "--threads",
               ",".join(map(str, threads)), "--interop", str(cfg["interop"]), "--repeat", str(repeat)],
              configs.env(cfg)).strip().splitlines()


def main():
    bin_ = os.environ.get("BIN", "./build/attnscope")
    n_src, n_dec = int(os.environ.get("N", "128")), int(os.environ.get("M", "128"))
    repeat, rounds = int(os.environ.get("REPEAT", "5")), int(os.environ.get("ROUNDS", "3"))
    srepeat = int(os.environ.get("SCREEN_REPEAT", "2"))
    os.makedirs(OUT, exist_ok=True)
    # in a child: the calls below report peak RSS, and Linux carries a process's largest RSS
    # across fork and exec, so this driver must not hold the model it writes
    maker = multiprocessing.Process(target=make_model)
    maker.start()
    maker.join()
    if maker.exitcode != 0:
        sys.exit("encdec_bench: writing %s failed" % M_DIR)
    print("load average before:", open("/proc/loadavg").read().strip(), flush=True)
    src, dec = sh([PY, REF, "--model", M_DIR, "--tokens", str(n_src), "--target-tokens", str(n_dec),
                   "--print-ids"]).strip().split(";")
    npz = os.path.join(OUT, "encdec_check.npz")
    sh([bin_, "run", "--model", M_DIR, "--ids", src, "--target-ids", dec, "--capture", "attn,logits", "--out", npz,
        "--quiet"])
    print(sh([PY, REF, "--model", M_DIR, "--tokens", str(n_src), "--target-tokens", str(n_dec), "--check",
              npz]).strip(), flush=True)
    screen = {}
    for malloc, ob in ((m, o) for m in configs.MALLOC for o in ("1", "unset")):
        g = {"threads": 0, "interop": 1, "openblas": ob, "wait": "PASSIVE", "malloc": malloc}
        for line in torch_run(g, n_src, n_dec, [1, 2], srepeat):
            screen[configs.label(dict(g, threads=int(num(line, "threads"))))] = num(line, "median_ms")
    print("screen (median ms):", ", ".join("%s %.1f" % kv for kv in screen.items()), flush=True)
    ranked = sorted(screen, key=screen.get)
    one = [lab for lab in ranked if configs.one_core(configs.parse_label(lab))][0]
    chosen = list(dict.fromkeys([one, ranked[0]]))
    res = {}
    with open(os.path.join(OUT, "encdec_rounds.txt"), "w") as log:
        for r in range(rounds):
            calls = [("attnscope 1t", lambda: attnscope(bin_, n_src, n_dec, 1, repeat)),
                     ("attnscope 2t", lambda: attnscope(bin_, n_src, n_dec, 2, repeat))]
            for lab in chosen:
                cfg = configs.parse_label(lab)
                calls.append(("torch " + lab,
                              lambda cfg=cfg: torch_run(cfg, n_src, n_dec, [cfg["threads"]], repeat)[-1]))
            for name, fn in calls:
                line = fn()
                res.setdefault(name, []).append(line)
                log.write("round %d %s: %s\n" % (r + 1, name, line))
                log.flush()
            print("round %d done" % (r + 1), flush=True)
    med = lambda name: statistics.median(num(l, "median_ms") for l in res[name])  # noqa: E731
    a1, a2 = med("attnscope 1t"), med("attnscope 2t")
    t1, tb = med("torch " + one), min(med("torch " + lab) for lab in chosen)
    best = min(chosen, key=lambda lab: med("torch " + lab))
    rss = lambda name: max(num(l, "peak_rss_mb") for l in res[name])  # noqa: E731
    rows = ["| N / M tokens | attnscope 1t ms | attnscope 2t ms | torch one-core (%s) ms | torch best (%s) ms "
            "| one-core ratio (torch / attnscope 1t) | best ratio (torch best / attnscope best) "
            "| attnscope peak RSS MB | torch peak RSS MB |" % (one, best),
            "|---|---|---|---|---|---|---|---|---|",
            "| %d / %d | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2fx | %.0f | %.0f |"
            % (n_src, n_dec, a1, a2, t1, tb, t1 / a1, tb / min(a1, a2), max(rss("attnscope 1t"), rss("attnscope 2t")),
               max(rss("torch " + lab) for lab in chosen))]
    text = "\n".join(rows) + "\n"
    open(os.path.join(OUT, "encdec_latest.md"), "w").write(text)
    print(text)
    print("load average after:", open("/proc/loadavg").read().strip())


if __name__ == "__main__":
    main()
