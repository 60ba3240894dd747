#!/usr/bin/python3
"""sweep_encoders.py — random-configuration parity sweep of BERT, RoBERTa, DistilBERT and GPT-2.

What it does: draws N random models of the four families (head widths from 4 to 264,
odd widths, 1-3 layers, classifier and masked-LM heads, GPT-2's Conv1D layout, F32 /
F16 / BF16 files), writes each as a Hugging Face folder in a temporary directory, runs
`attnscope run --format npz` on a random input of 1..MAX_T tokens (a sentence pair with
token types for BERT) at 1 or 2 threads, and compares every captured tensor with the
torch re-implementations of tests/ref/gen_models.py (those the committed fixtures come
from). GPT-2 models then generate GEN_NEW greedy tokens: on the key/value cache, with
--full-forward and in torch's loop, compared as sweep_llama.py compares them. One line per
model; exits 1 if any tensor is outside the tolerances or a generation differs.

What it does not: run in `make test` (it needs torch and takes minutes).

Tolerances as tests/ref/sweep_llama.py: attentions 2e-5 absolute, other tensors 2e-4 of
their largest magnitude; past them, attnscope passes when it is no more than twice as far
from the float64 forward as torch's float32 one.

Run:  /usr/bin/python3 tests/ref/sweep_encoders.py BUILD/attnscope [N] [SEED] [MAX_T]
"""
import json
import math
import os
import subprocess
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_models as M  # noqa: E402
from sweep_llama import GEN_NEW, args, report, report_generation  # noqa: E402

KEYS = ("attentions", "queries", "keys", "values", "hidden_states", "logits")


def rand_model(r, seed):
    fam = r.choice(["bert", "bert_mlm", "roberta", "distilbert", "gpt2"])
    H = r.choice([1, 2, 3, 4, 6])
    Dh = r.choice([4, 6, 10, 16, 34, 64, 72, 264])
    D = H * Dh
    L = r.choice([1, 2, 3])
    Fd = r.choice([8, 50, 130, 4 * D])
    V = r.choice([60, 300])
    pos = r.choice([64, 256, 700])
    M.QK_STD = 1.5 / math.sqrt(D)
    init = M.Init(seed)
    if fam in ("bert", "bert_mlm"):
        C = r.choice([2, 3]) if fam == "bert" else 0
        arch = "BertForSequenceClassification" if fam == "bert" else "BertForMaskedLM"
        c = M.bert_config(V, D, H, L, Fd, C, pos=pos, arch=arch)
        pre = "bert." if fam == "bert" else r.choice(["bert.", ""])
        P = M.bert_params(init, c, pre, classifier=fam == "bert", mlm=fam == "bert_mlm", pooler=fam == "bert", C=C)
        fwd = lambda P_, ids, tt: M.bert_forward(P_, c, pre, ids, tt, torch.ones_like(ids),
                                                 head="classifier" if fam == "bert" else "mlm")
        limit = pos
    elif fam == "roberta":
        c = M.bert_config(V, D, H, L, Fd, 2, pos=pos + 2, model_type="roberta", arch="RobertaForSequenceClassification")
        c.update({"bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1, "layer_norm_eps": 1e-5, "type_vocab_size": 1})
        P = M.bert_params(init, c, "roberta.", classifier=True, mlm=False, pooler=False, roberta_head=True, C=2)
        fwd = lambda P_, ids, tt: M.bert_forward(P_, c, "roberta.", ids, tt, torch.ones_like(ids), roberta=True)
        limit = pos
    elif fam == "distilbert":
        c = {"activation": "gelu", "architectures": ["DistilBertForSequenceClassification"], "dim": D,
             "hidden_dim": Fd, "id2label": {"0": "NEGATIVE", "1": "POSITIVE"},
             "label2id": {"NEGATIVE": 0, "POSITIVE": 1}, "max_position_embeddings": pos,
             "model_type": "distilbert", "n_heads": H, "n_layers": L, "pad_token_id": 0,
             "sinusoidal_pos_embds": False, "vocab_size": V, "num_labels": 2}
        P = M.distilbert_params(init, c)
        del c["num_labels"]
        fwd = lambda P_, ids, tt: M.distilbert_forward(P_, c, ids, torch.ones_like(ids))
        limit = pos
    else:
        c = {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "bos_token_id": V - 1,
             "eos_token_id": V - 1, "layer_norm_epsilon": 1e-5, "model_type": "gpt2", "n_ctx": pos, "n_embd": D,
             "n_head": H, "n_inner": r.choice([None, Fd]), "n_layer": L, "n_positions": pos,
             "scale_attn_by_inverse_layer_idx": r.random() < 0.3, "scale_attn_weights": r.random() < 0.8,
             "vocab_size": V}
        P = M.gpt2_params(init, c)
        fwd = lambda P_, ids, tt: M.gpt2_forward(P_, c, ids, torch.ones_like(ids))
        limit = pos
    return fam, c, P, fwd, limit


def main():
    binary, n, seed, max_t, r, tmp = args(300, "sweep_enc_")
    bad = 0
    for i in range(n):
        fam, c, P, fwd, limit = rand_model(r, seed * 1000 + i)
        dtype = r.choice(["F32", "F32", "BF16", "F16"])
        P = M.round_to(P, dtype)
        c["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
        T = r.randint(1, min(max_t, limit))
        V = c["vocab_size"]
        g = torch.Generator().manual_seed(seed * 1000 + i)
        lo = 5 if fam != "gpt2" else 0
        ids = torch.randint(lo, V - 1, (T,), generator=g)
        tt = torch.zeros_like(ids)
        if fam in ("bert", "bert_mlm") and T > 2:
            tt[r.randint(1, T - 1):] = 1
        ref = fwd(P, ids, tt)
        ref64 = fwd({k: v.double() for k, v in P.items()}, ids, tt)
        d = os.path.join(tmp, f"m{i}")
        os.makedirs(d)
        with open(os.path.join(d, "config.json"), "w") as fh:
            json.dump(c, fh)
        M.st_write(os.path.join(d, "model.safetensors"), [(k, P[k], dtype) for k in sorted(P)], {"format": "pt"})
        threads = r.choice([1, 2])
        out = os.path.join(d, "out.npz")
        cmd = [binary, "run", "--model", d, "--ids", ",".join(str(int(x)) for x in ids), "--format", "npz",
               "--out", out, "--threads", str(threads), "--capture", "attn,qkv,hidden,logits"]
        if fam in ("bert", "bert_mlm"):
            cmd += ["--type-ids", ",".join(str(int(x)) for x in tt)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        H = c.get("num_attention_heads", c.get("n_heads", c.get("n_head")))
        D = c.get("hidden_size", c.get("dim", c.get("n_embd")))
        desc = f"{i:3d} {fam:10s} {dtype:4s} T={T:3d} D={D:4d} H={H} Dh={D // H:3d} thr={threads}"
        ok = report(p, out, ref, ref64, KEYS, desc)
        if ok and fam == "gpt2" and T + GEN_NEW <= limit:  # greedy generation on the cache
            ok = report_generation(binary, d, lambda seq: fwd(P, seq, None)["logits"][-1], ids, GEN_NEW, threads)
        bad += not ok
    print(f"{n - bad} of {n} models within tolerance (folders in {tmp})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
