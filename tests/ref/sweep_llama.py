#!/usr/bin/python3
"""sweep_llama.py — random-configuration parity sweep of the decoder LLM family.

What it does: draws N random LLaMA / Mistral / Qwen2 / Qwen3 / Gemma 2 / Gemma 3 / Phi-3
configurations (widths, head counts and GQA ratios, head_dim that is not a multiple of 8
or wider than 256, sliding windows shorter than the input, every RoPE scaling type,
biases, soft-caps, tied heads, F32 / F16 / BF16 storage, with or without the "model."
prefix), writes each as a Hugging Face folder in a temporary directory, runs
`attnscope run --format npz` on a random input of 1..MAX_T tokens at 1 or 2 threads,
and compares every captured tensor with the torch reference of tests/ref/gen_llama.py
(the same definitions the committed fixtures come from). Then greedy generation of
GEN_NEW tokens after that input: `attnscope generate` on its key/value cache and with
--full-forward must pick the same ids, and those of torch's greedy loop (whole forwards)
up to the first step whose top two logits are within GEN_TIE of each other (a near tie
either side may break). Prints one line per model and exits 1 if any tensor is outside
the tolerances below or a generation differs.

What it does not: run in `make test` (it needs torch and takes minutes); the committed
fixtures and test_model_parity are the regression tests. This is the wide net for
shapes the fixtures do not hold.

Tolerances (float32 on both sides, reference in float32 too):
  attentions: 2e-5 absolute; queries / keys / values / hidden states / logits: 2e-4 of
  the tensor's largest magnitude. A tensor outside them is compared with the float64
  forward: it passes when attnscope is no more than twice as far from float64 as torch's
  float32 forward (long, deep inputs with peaked attention drift in float32 on both sides).

Run:  /usr/bin/python3 tests/ref/sweep_llama.py BUILD/attnscope [N] [SEED] [MAX_T]
"""
import json
import os
import random
import subprocess
import sys
import tempfile
import zipfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llama as G  # noqa: E402
from gen_models import Init, round_to, st_write  # noqa: E402

ATTN_TOL = 2e-5
REL_TOL = 2e-4
GEN_NEW = 6
GEN_TIE = 1e-3
KEYS = ("attentions", "queries_pre_rope", "keys_pre_rope", "queries", "keys", "values",
        "hidden_states", "logits")


def rand_config(r):
    fam = r.choice(["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3"])
    arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM",
            "qwen3": "Qwen3ForCausalLM", "gemma2": "Gemma2ForCausalLM",
            "gemma3_text": "Gemma3ForCausalLM", "phi3": "Phi3ForCausalLM"}[fam]
    Hkv = r.choice([1, 1, 2, 3, 4])
    H = Hkv * r.choice([1, 2, 3, 4])
    Dh = r.choice([4, 6, 10, 16, 18, 32, 34, 64, 72, 130, 264]) if fam != "phi3" else None
    D = r.choice([16, 24, 40, 48, 64, 96, 136, 200])
    if fam == "phi3":  # Phi-3 has no head_dim key: hidden / heads, even
        D = H * r.choice([4, 8, 12, 16, 24, 36])
    L = r.choice([1, 2, 3, 4])
    extra = dict(head_dim=Dh, rms_norm_eps=r.choice([1e-6, 1e-5]),
                 rope_theta=r.choice([100.0, 10000.0, 500000.0]),
                 tie_word_embeddings=r.random() < 0.4,
                 max_position_embeddings=r.choice([64, 256, 512]))
    if fam in ("llama", "qwen3", "gemma2", "gemma3_text"):  # Mistral and Phi-3 have fixed biases
        extra["attention_bias"] = r.random() < 0.3
    if fam == "llama":
        extra["mlp_bias"] = r.random() < 0.3
    if fam == "mistral" or (fam == "phi3" and r.random() < 0.5):
        extra["sliding_window"] = r.choice([None, 3, 7, 30])
    if fam in ("qwen2", "qwen3"):
        extra["use_sliding_window"] = r.random() < 0.5
        extra["sliding_window"] = r.choice([4, 13])
        extra["max_window_layers"] = r.choice([0, 1, 2])
    if fam in ("gemma2", "gemma3_text"):
        extra.update(hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=r.choice([16, 24, 100]),
                     sliding_window=r.choice([4, 9, 33]), bos_token_id=2, eos_token_id=1, pad_token_id=0,
                     attn_logit_softcapping=r.choice([None, 5.0, 50.0]),
                     final_logit_softcapping=r.choice([None, 3.0, 30.0]))
        if fam == "gemma3_text":
            extra.update(sliding_window_pattern=r.choice([2, 3, 6]), rope_local_base_freq=r.choice([100.0, 10000.0]))
            if r.random() < 0.3:
                extra["layer_types"] = [r.choice(["sliding_attention", "full_attention"]) for _ in range(L)]
    if fam == "phi3":
        prf = [f for f in (1.0, 0.5, 0.75) if int(D // H * f) % 2 == 0]
        extra.update(partial_rotary_factor=r.choice(prf), pad_token_id=0,
                     original_max_position_embeddings=extra["max_position_embeddings"])
    mp = extra["max_position_embeddings"]
    rt = r.choice(["none", "none", "linear", "dynamic", "llama3", "yarn", "longrope"])
    dim_rot = None
    if rt == "linear":
        extra["rope_scaling"] = {"rope_type": "linear", "factor": r.choice([2.0, 4.0])}
    elif rt == "dynamic" and fam != "gemma3_text":
        extra["rope_scaling"] = {"rope_type": "dynamic", "factor": 3.0}
        extra["max_position_embeddings"] = r.choice([8, 32, mp])
    elif rt == "llama3" and fam in ("llama",):
        extra["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    elif rt == "yarn" and fam in ("llama", "qwen2", "qwen3", "mistral"):
        extra["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    elif rt == "longrope" and fam == "phi3":
        orig = r.choice([8, 24])
        hd = D // H
        dim_rot = int(hd * extra["partial_rotary_factor"]) // 2
        extra.update(original_max_position_embeddings=orig, max_position_embeddings=4 * orig)
        extra["rope_scaling"] = {"type": "longrope",
                                 "short_factor": [round(1 + 0.1 * i, 3) for i in range(dim_rot)],
                                 "long_factor": [round(1 + 0.7 * i, 3) for i in range(dim_rot)]}
    c = G.base_config(fam, arch, V=r.choice([37, 61, 300]), D=D, H=H, Hkv=Hkv, L=L,
                      Fd=r.choice([8, 20, 50, 130]), **extra)
    if fam in ("gemma2", "gemma3_text"):
        c.pop("hidden_act", None)
    if c.get("head_dim") is None:
        c.pop("head_dim", None)
    return c


def npz_load(path):
    out = {}
    with zipfile.ZipFile(path) as z:
        for n in z.namelist():
            with z.open(n) as f:
                out[n[:-4]] = np.lib.format.read_array(f, allow_pickle=False)
    return out


def compare(got, ref, ref64, keys, desc):
    """(ok, ["key diff", ...]) for the tensors keys of attnscope's npz got against the
    float32 reference ref, with the tolerances above; a tensor outside them passes when
    attnscope is no more than twice as far from the float64 forward ref64 as ref is.
    Prints a line naming desc for a tensor missing or misshapen."""
    ok, worst = True, []
    for k in keys:
        if k not in got:
            print(f"{desc}  MISSING {k}")
            ok = False
            continue
        e = ref[k].detach().numpy().astype(np.float64)
        a = got[k].astype(np.float64)
        if a.shape != e.shape:
            print(f"{desc}  SHAPE {k} {a.shape} vs {e.shape}")
            ok = False
            continue
        diff = np.abs(a - e).max() if e.size else 0.0
        scale = 1.0 if k == "attentions" else max(np.abs(e).max(), 1e-30)
        lim = ATTN_TOL if k == "attentions" else REL_TOL
        rel = diff / scale
        worst.append(f"{k[:6]} {rel:.1e}")
        if not rel <= lim:
            e64 = ref64[k].detach().numpy()
            ours, theirs = np.abs(a - e64).max() / scale, np.abs(e - e64).max() / scale
            worst[-1] += f"! (vs f64: ours {ours:.2e}, torch f32 {theirs:.2e})"
            if ours > 2 * theirs:
                ok = False
    return ok, worst


def report(proc, out, ref, ref64, keys, desc):
    """Prints one line for a model: attnscope's exit (proc) and compare() of its npz out.
    Returns True when it ran and every tensor passed."""
    if proc.returncode != 0:
        print(f"{desc}  RUN FAILED rc={proc.returncode}: {proc.stderr.strip()[:300]}", flush=True)
        return False
    ok, worst = compare(npz_load(out), ref, ref64, keys, desc)
    print(f"{desc}  {'ok ' if ok else 'BAD'} {' '.join(worst)}", flush=True)
    return ok


def torch_greedy(last_logits, ids, k):
    """k greedy steps of a reference on whole sequences (last_logits(seq): the last
    position's logits): [(id, top-two margin)]."""
    seq, picks = ids.clone(), []
    for _ in range(k):
        top = torch.topk(last_logits(seq), 2)
        picks.append((int(top.indices[0]), float(top.values[0] - top.values[1])))
        seq = torch.cat([seq, top.indices[:1]])
    return picks


def attnscope_greedy(binary, d, ids, k, threads, full):
    """`attnscope generate`'s k greedy ids after ids (cached, or --full-forward), or the error."""
    out = os.path.join(d, "gen.json")
    cmd = [binary, "generate", "--model", d, "--ids", ",".join(str(int(x)) for x in ids), "--max-new", str(k),
           "--threads", str(threads), "--out", out, "--capture", "logits"] + (["--full-forward"] if full else [])
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, p.stderr.strip()[:300]
    with open(out) as fh:
        return json.load(fh)["generated_ids"], ""


def check_generation(binary, d, last_logits, ids, k, threads):
    """(ok, note): the cached and whole-sequence generations equal, and torch's ids
    (torch_greedy on last_logits) up to a near tie."""
    cached, e1 = attnscope_greedy(binary, d, ids, k, threads, False)
    full, e2 = attnscope_greedy(binary, d, ids, k, threads, True)
    if cached is None or full is None:
        return False, f"generate failed: {e1 or e2}"
    if cached != full:
        return False, f"cache {cached} != full forward {full}"
    for s, (want, margin) in enumerate(torch_greedy(last_logits, ids, k)):
        if cached[s] != want:
            return margin < GEN_TIE, f"gen {s}/{k} (torch's margin {margin:.1e} at step {s})"
    return True, f"gen {k}/{k}"


def report_generation(binary, d, last_logits, ids, k, threads):
    """Prints check_generation's line; True when it passed."""
    ok, note = check_generation(binary, d, last_logits, ids, k, threads)
    print(f"{'':4s}{'ok ' if ok else 'BAD'} {note}", flush=True)
    return ok


def args(default_max_t, prefix):
    """(binary, n, seed, max_t, random.Random(seed), temporary folder) from the command line."""
    a = sys.argv[1:] + [None] * 3
    n, seed = int(a[1] or 30), int(a[2] or 1)
    max_t = int(a[3] or default_max_t)
    return a[0], n, seed, max_t, random.Random(seed), tempfile.mkdtemp(prefix=prefix)


def main():
    binary, n, seed, max_t, r, tmp = args(140, "sweep_llama_")
    bad = 0
    for i in range(n):
        c = rand_config(r)
        Dh = G.head_dim(c)
        D = c["hidden_size"]
        G.QK_STD = 2.0 / D ** 0.5
        G.W_STD = 1.0 / D ** 0.5
        pre = r.choice(["model.", "model.", ""])
        dtype = r.choice(["F32", "F32", "BF16", "F16"])
        P = round_to(G.make_params(Init(seed * 1000 + i), c, pre), dtype)
        c["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
        T = r.randint(1, max_t)
        # the engine's input limit: max_position_embeddings; none with dynamic NTK; for
        # llama3 / yarn at least original_max_position_embeddings x factor
        rs = c.get("rope_scaling") or {}
        kind = rs.get("rope_type", rs.get("type"))
        limit = c["max_position_embeddings"]
        if kind in ("llama3", "yarn"):
            limit = max(limit, int(rs.get("original_max_position_embeddings", limit) * rs["factor"]))
        if kind != "dynamic":
            T = min(T, limit)
        g = torch.Generator().manual_seed(seed * 1000 + i)
        ids = torch.cat([torch.tensor([c["bos_token_id"]]), torch.randint(4, c["vocab_size"], (T - 1,), generator=g)])
        mask = torch.ones_like(ids)
        ref = G.forward(P, c, pre, ids, mask, "lm")
        ref64 = G.forward(P, c, pre, ids, mask, "lm", dtype=torch.float64)
        d = os.path.join(tmp, f"m{i}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(c, fh)
        st_write(os.path.join(d, "model.safetensors"), [(k, P[k], dtype) for k in sorted(P)], {"format": "pt"})
        threads = r.choice([1, 2])
        out = os.path.join(d, "out.npz")
        cmd = [binary, "run", "--model", d, "--ids", ",".join(str(int(x)) for x in ids), "--format", "npz",
               "--out", out, "--threads", str(threads), "--capture", "attn,qkv,hidden,logits"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        desc = (f"{i:3d} {c['model_type']:11s} {dtype:4s} T={T:3d} D={D:3d} H={c['num_attention_heads']}/"
                f"{c['num_key_value_heads']} Dh={Dh:3d} L={c['num_hidden_layers']} thr={threads} "
                f"rope={(c.get('rope_scaling') or {}).get('rope_type', (c.get('rope_scaling') or {}).get('type', '-'))} "
                f"win={c.get('sliding_window') if c.get('use_sliding_window', True) else None} pre={pre or '-'}")
        ok = report(p, out, ref, ref64, KEYS, desc)
        if ok and T + GEN_NEW <= limit:
            last = lambda seq: G.forward(P, c, pre, seq, torch.ones_like(seq), "lm")["logits"][-1]
            ok = report_generation(binary, d, last, ids, GEN_NEW, threads)
        bad += not ok
    print(f"{n - bad} of {n} models within tolerance (folders in {tmp})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
