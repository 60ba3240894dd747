#!/usr/bin/python3
"""gen_encdec.py — numerical reference fixtures for the encoder-decoder family (ARCH_BART).

What it does: builds small random (seeded) BART, mBART, Marian, T5 and mT5 models with
Hugging Face's tensor names, shapes and config.json keys (odd shapes: width 24, 3 heads,
feed-forward 40, vocabulary 101, 2 encoder and 3 decoder layers; T5 heads of width 10, so
H * d_kv = 30 is not the width, and 10 relative position buckets up to distance 12), writes each as a model folder
(config.json + model.safetensors) under tests/ref/fixtures/models/, runs a torch
re-implementation of transformers' eager modeling code on two inputs per model (a source
and a teacher-forced decoder input; the second source ends in two padding tokens) and
writes every internal the C engine captures to expected.safetensors:
  c{i}.src_ids, c{i}.src_mask (Ts), c{i}.tgt_ids (Tt)            I32
  c{i}.encoder_attentions (Le, H, Ts, Ts), c{i}.decoder_attentions (Ld, H, Tt, Tt),
  c{i}.cross_attentions (Ld, H, Tt, Ts), c{i}.cross_queries (Ld, H, Tt, Dh),
  c{i}.cross_keys / c{i}.cross_values (Ld, H, Ts, Dh), c{i}.encoder_hidden_states
  (Le + 1, Ts, D), c{i}.decoder_hidden_states (Ld + 1, Tt, D), c{i}.logits (Tt, V)  F32
Queries are captured before the 1/sqrt(Dh) scaling (the engine's convention).

Independent cross-check before anything is written: the same forward in float64 (max
diffs printed; attentions within 1e-5, logits within 1e-4 relative).

What it does not: use the `transformers` library (not installed here), write tokenizer
files (the C test runs on ids).

Run (deterministic; rewrites the folders it owns):
    /usr/bin/python3 tests/ref/gen_encdec.py

Sources (transformers main branch, eager attention):
  models/bart/modeling_bart.py     BartLearnedPositionalEmbedding (offset 2),
      BartScaledWordEmbedding (embed_scale = sqrt(d_model) when scale_embedding),
      BartAttention / eager_attention_forward (scores q.k * head_dim^-0.5 + additive mask of
      finfo.min), BartEncoderLayer / BartDecoderLayer (post-norm: self-attention, add,
      self_attn_layer_norm; encoder_attn, add, encoder_attn_layer_norm; fc2(act(fc1)), add,
      final_layer_norm), layernorm_embedding, BartForConditionalGeneration (lm_head tied to
      shared, + final_logits_bias)
  models/mbart/modeling_mbart.py   the same layers in pre-norm order, encoder.layer_norm and
      decoder.layer_norm after the last layer (also in the last hidden state)
  models/marian/modeling_marian.py MarianSinusoidalPositionalEmbedding (sin in the first
      half, cos in the second), no layernorm_embedding, post-norm
  models/t5/modeling_t5.py         T5LayerNorm (RMS, no bias), T5Attention (no q.k scaling,
      _relative_position_bucket, compute_bias in the first layer of each stack, shared),
      T5DenseActDense / T5DenseGatedActDense, T5Stack (final_layer_norm), T5ForConditionalGeneration
      (tied head: sequence_output * d_model^-0.5); configuration_t5.py feed_forward_proj
      ("gated-gelu" = gelu_new); models/mt5 the same modules
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_models import Init, st_read, st_write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "models")
GENERATOR = "tests/ref/gen_encdec.py"

XCHECK_ATTN_TOL = 1e-5
XCHECK_LOGITS_REL = 1e-4

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

V, D, H, FF, LE, LD, POS = 101, 24, 3, 40, 2, 3, 32
DKV, NB, MAXD = 10, 10, 12  # T5: head width, relative position buckets, max distance


def config(kind):
    if kind in ("t5", "mt5"):
        return {
            "model_type": kind, "architectures": ["T5ForConditionalGeneration" if kind == "t5" else
                                                  "MT5ForConditionalGeneration"],
            "vocab_size": V, "d_model": D, "d_kv": DKV, "d_ff": FF, "num_layers": LE, "num_decoder_layers": LD,
            "num_heads": H, "relative_attention_num_buckets": NB, "relative_attention_max_distance": MAXD,
            "layer_norm_epsilon": 1e-6, "dropout_rate": 0.1, "is_encoder_decoder": True, "pad_token_id": 0,
            "eos_token_id": 1, "decoder_start_token_id": 0,
            "feed_forward_proj": "relu" if kind == "t5" else "gated-gelu",
            "tie_word_embeddings": kind == "t5",
        }
    c = {
        "model_type": kind,
        "architectures": [{"bart": "BartForConditionalGeneration", "mbart": "MBartForConditionalGeneration",
                           "marian": "MarianMTModel"}[kind]],
        "vocab_size": V, "d_model": D, "encoder_layers": LE, "decoder_layers": LD,
        "encoder_attention_heads": H, "decoder_attention_heads": H, "encoder_ffn_dim": FF,
        "decoder_ffn_dim": FF, "max_position_embeddings": POS, "is_encoder_decoder": True,
        "dropout": 0.1, "attention_dropout": 0.0, "init_std": 0.02,
    }
    if kind == "bart":
        c.update(activation_function="gelu", scale_embedding=False, pad_token_id=1, bos_token_id=0,
                 eos_token_id=2, decoder_start_token_id=2, tie_word_embeddings=True)
    elif kind == "mbart":
        c.update(activation_function="relu", scale_embedding=True, pad_token_id=1, bos_token_id=0,
                 eos_token_id=2, tie_word_embeddings=False)
    else:
        c.update(activation_function="swish", scale_embedding=True, pad_token_id=100, eos_token_id=0,
                 decoder_start_token_id=100, tie_word_embeddings=True, share_encoder_decoder_embeddings=True,
                 decoder_vocab_size=V)
    return c


def make_t5_params(kind, seed):
    ini = Init(seed)
    P = {"shared.weight": ini.normal((V, D), 1.0)}
    Qw = H * DKV
    for st, L in (("encoder", LE), ("decoder", LD)):
        P[f"{st}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"] = ini.normal((NB, H), 1.0)
        P[f"{st}.final_layer_norm.weight"] = ini.normal((D,), 0.1, 1.0)
        subs = [("layer.0.SelfAttention", "layer.0.layer_norm")]
        if st == "decoder":
            subs.append(("layer.1.EncDecAttention", "layer.1.layer_norm"))
        ff = 2 if st == "decoder" else 1
        for l in range(L):
            b = f"{st}.block.{l}."
            for att, lnn in subs:
                for pr, n_out, n_in, std in (("q", Qw, D, 0.12), ("k", Qw, D, 0.12), ("v", Qw, D, None),
                                             ("o", D, Qw, None)):
                    P[b + f"{att}.{pr}.weight"] = ini.normal((n_out, n_in), std or 1.0 / math.sqrt(n_in))
                P[b + lnn + ".weight"] = ini.normal((D,), 0.1, 1.0)
            names = ["wi_0", "wi_1"] if kind == "mt5" else ["wi"]
            for nm in names:
                P[b + f"layer.{ff}.DenseReluDense.{nm}.weight"] = ini.normal((FF, D), 1.0 / math.sqrt(D))
            P[b + f"layer.{ff}.DenseReluDense.wo.weight"] = ini.normal((D, FF), 1.0 / math.sqrt(FF))
            P[b + f"layer.{ff}.layer_norm.weight"] = ini.normal((D,), 0.1, 1.0)
    if kind == "mt5":
        P["lm_head.weight"] = ini.normal((V, D), 0.3)
    return P


def make_params(kind, seed):
    if kind in ("t5", "mt5"):
        return make_t5_params(kind, seed)
    ini = Init(seed)
    P = {}
    P["model.shared.weight"] = ini.normal((V, D), 0.5)
    for st, L in (("encoder", LE), ("decoder", LD)):
        pre = f"model.{st}."
        if kind != "marian":
            P[pre + "embed_positions.weight"] = ini.normal((POS + 2, D), 0.3)
            P[pre + "layernorm_embedding.weight"] = ini.normal((D,), 0.1, 1.0)
            P[pre + "layernorm_embedding.bias"] = ini.normal((D,), 0.1)
        if kind == "mbart":
            P[pre + "layer_norm.weight"] = ini.normal((D,), 0.1, 1.0)
            P[pre + "layer_norm.bias"] = ini.normal((D,), 0.1)
        subs = ["self_attn"] + (["encoder_attn"] if st == "decoder" else [])
        for l in range(L):
            lp = f"{pre}layers.{l}."
            for sa in subs:
                for pr in ("q_proj", "k_proj"):
                    ini.linear(P, lp + f"{sa}.{pr}", D, D, std=0.45)
                    P[lp + f"{sa}.{pr}.bias"] = ini.normal((D,), 0.1)
                for pr in ("v_proj", "out_proj"):
                    ini.linear(P, lp + f"{sa}.{pr}", D, D)
                    P[lp + f"{sa}.{pr}.bias"] = ini.normal((D,), 0.1)
                ln = "self_attn_layer_norm" if sa == "self_attn" else "encoder_attn_layer_norm"
                P[lp + ln + ".weight"] = ini.normal((D,), 0.1, 1.0)
                P[lp + ln + ".bias"] = ini.normal((D,), 0.1)
            ini.linear(P, lp + "fc1", FF, D)
            P[lp + "fc1.bias"] = ini.normal((FF,), 0.1)
            ini.linear(P, lp + "fc2", D, FF)
            P[lp + "fc2.bias"] = ini.normal((D,), 0.1)
            P[lp + "final_layer_norm.weight"] = ini.normal((D,), 0.1, 1.0)
            P[lp + "final_layer_norm.bias"] = ini.normal((D,), 0.1)
    P["final_logits_bias"] = ini.normal((1, V), 0.2)
    if kind == "mbart":
        P["lm_head.weight"] = ini.normal((V, D), 0.3)
    return P


def sinusoids(n_pos, dim, dtype):
    """MarianSinusoidalPositionalEmbedding._init_weight (numpy float64, then the table's dtype)."""
    out = torch.zeros(n_pos, dim, dtype=torch.float64)
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    enc = torch.tensor([[pos / math.pow(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)],
                       dtype=torch.float64)
    out[:, 0:sentinel] = torch.sin(enc[:, 0::2])
    out[:, sentinel:] = torch.cos(enc[:, 1::2])
    return out.to(torch.float32).to(dtype)


def act(name):
    return {"gelu": lambda x: F.gelu(x), "relu": F.relu, "swish": F.silu}[name]


def lin(P, base, x):
    return x @ P[base + ".weight"].T + P[base + ".bias"]


def ln(P, base, x):
    return F.layer_norm(x, (D,), P[base + ".weight"], P[base + ".bias"], 1e-5)


def attention(P, base, xq, xkv, add_mask, out):
    """eager_attention_forward: q, k, v per head; scores * Dh^-0.5 + mask; softmax; P V."""
    Dh = D // H
    Tq, Tk = xq.shape[0], xkv.shape[0]
    q = lin(P, base + ".q_proj", xq).view(Tq, H, Dh).transpose(0, 1)
    k = lin(P, base + ".k_proj", xkv).view(Tk, H, Dh).transpose(0, 1)
    v = lin(P, base + ".v_proj", xkv).view(Tk, H, Dh).transpose(0, 1)
    s = (q @ k.transpose(1, 2)) * Dh ** -0.5 + add_mask
    p = torch.softmax(s, dim=-1)
    ctx = (p @ v).transpose(0, 1).reshape(Tq, D)
    out.append(dict(attn=p, q=q, k=k, v=v))
    return lin(P, base + ".out_proj", ctx)


def layer(P, kind, lp, x, mask, mem=None, mem_mask=None, caps=None, xcaps=None):
    a = act(config(kind)["activation_function"])
    if kind == "mbart":  # pre-norm
        x = x + attention(P, lp + "self_attn", ln(P, lp + "self_attn_layer_norm", x),
                          ln(P, lp + "self_attn_layer_norm", x), mask, caps)
        if mem is not None:
            x = x + attention(P, lp + "encoder_attn", ln(P, lp + "encoder_attn_layer_norm", x), mem, mem_mask, xcaps)
        h = ln(P, lp + "final_layer_norm", x)
        return x + lin(P, lp + "fc2", a(lin(P, lp + "fc1", h)))
    x = ln(P, lp + "self_attn_layer_norm", x + attention(P, lp + "self_attn", x, x, mask, caps))
    if mem is not None:
        x = ln(P, lp + "encoder_attn_layer_norm", x + attention(P, lp + "encoder_attn", x, mem, mem_mask, xcaps))
    return ln(P, lp + "final_layer_norm", x + lin(P, lp + "fc2", a(lin(P, lp + "fc1", x))))


def embed(P, kind, st, ids, dtype):
    c = config(kind)
    scale = math.sqrt(D) if c["scale_embedding"] else 1.0
    x = P["model.shared.weight"][ids] * scale
    T = ids.shape[0]
    if kind == "marian":
        return x + sinusoids(POS, D, dtype)[torch.arange(T)]
    x = x + P[f"model.{st}.embed_positions.weight"][torch.arange(T) + 2]
    return ln(P, f"model.{st}.layernorm_embedding", x)


def t5_rms(P, base, x):
    """T5LayerNorm: weight * x / sqrt(mean(x^2) + eps) (float32 variance)."""
    var = x.pow(2).mean(-1, keepdim=True)
    return P[base + ".weight"] * (x * torch.rsqrt(var + 1e-6))


def t5_bucket(rel, bidirectional, nb, maxd):
    """T5Attention._relative_position_bucket."""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        nb //= 2
        buckets += (rel > 0).to(torch.long) * nb
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = nb // 2
    small = rel < max_exact
    large = max_exact + (torch.log(rel.float() / max_exact) / math.log(maxd / max_exact)
                         * (nb - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, nb - 1))
    return buckets + torch.where(small, rel, large)


def t5_bias(P, st, T, bidirectional):
    """compute_bias: (H, T, T) from the first layer's table."""
    pos = torch.arange(T)
    b = t5_bucket(pos[None, :] - pos[:, None], bidirectional, NB, MAXD)
    return P[f"{st}.block.0.layer.0.SelfAttention.relative_attention_bias.weight"][b].permute(2, 0, 1)


def t5_attention(P, base, xq, xkv, add, out):
    Tq, Tk = xq.shape[0], xkv.shape[0]
    q = (xq @ P[base + ".q.weight"].T).view(Tq, H, DKV).transpose(0, 1)
    k = (xkv @ P[base + ".k.weight"].T).view(Tk, H, DKV).transpose(0, 1)
    v = (xkv @ P[base + ".v.weight"].T).view(Tk, H, DKV).transpose(0, 1)
    p = torch.softmax(q @ k.transpose(1, 2) + add, dim=-1)  # no 1/sqrt(d) in T5
    out.append(dict(attn=p, q=q, k=k, v=v))
    return (p @ v).transpose(0, 1).reshape(Tq, H * DKV) @ P[base + ".o.weight"].T


def t5_ff(P, kind, b, x):
    if kind == "mt5":  # gated-gelu: gelu_new(wi_0 x) * wi_1 x
        h = F.gelu(x @ P[b + ".wi_0.weight"].T, approximate="tanh") * (x @ P[b + ".wi_1.weight"].T)
    else:
        h = F.relu(x @ P[b + ".wi.weight"].T)
    return h @ P[b + ".wo.weight"].T


def t5_forward(P, kind, src, src_mask, tgt, dtype):
    P = {k: v.to(dtype) for k, v in P.items()}
    fmin = torch.finfo(torch.float32).min
    Ts, Tt = src.shape[0], tgt.shape[0]
    key_mask = torch.where(src_mask.bool(), 0.0, fmin).to(dtype)[None, None, :]
    causal = torch.triu(torch.full((Tt, Tt), fmin, dtype=dtype), diagonal=1)[None]
    out = {"enc": [], "dec": [], "cross": []}
    enc_bias = t5_bias(P, "encoder", Ts, True) + key_mask
    dec_bias = t5_bias(P, "decoder", Tt, False) + causal
    x = P["shared.weight"][src]
    eh = [x]
    for l in range(LE):
        b = f"encoder.block.{l}."
        h = t5_rms(P, b + "layer.0.layer_norm", x)
        x = x + t5_attention(P, b + "layer.0.SelfAttention", h, h, enc_bias, out["enc"])
        x = x + t5_ff(P, kind, b + "layer.1.DenseReluDense", t5_rms(P, b + "layer.1.layer_norm", x))
        if l == LE - 1:
            x = t5_rms(P, "encoder.final_layer_norm", x)
        eh.append(x)
    mem = x
    y = P["shared.weight"][tgt]
    dh = [y]
    for l in range(LD):
        b = f"decoder.block.{l}."
        h = t5_rms(P, b + "layer.0.layer_norm", y)
        y = y + t5_attention(P, b + "layer.0.SelfAttention", h, h, dec_bias, out["dec"])
        y = y + t5_attention(P, b + "layer.1.EncDecAttention", t5_rms(P, b + "layer.1.layer_norm", y), mem,
                             key_mask, out["cross"])
        y = y + t5_ff(P, kind, b + "layer.2.DenseReluDense", t5_rms(P, b + "layer.2.layer_norm", y))
        if l == LD - 1:
            y = t5_rms(P, "decoder.final_layer_norm", y)
        dh.append(y)
    if kind == "t5":  # tied: sequence_output * d_model^-0.5, then shared^T
        logits = (y * D ** -0.5) @ P["shared.weight"].T
    else:
        logits = y @ P["lm_head.weight"].T
    return out, eh, dh, logits


def forward(P, kind, src, src_mask, tgt, dtype=torch.float32):
    if kind in ("t5", "mt5"):
        out, eh, dh, logits = t5_forward(P, kind, src, src_mask, tgt, dtype)
        return outputs(out, eh, dh, logits)
    P = {k: v.to(dtype) for k, v in P.items()}
    fmin = torch.finfo(torch.float32).min  # HF: finfo(float32).min; the float64 check uses the same
    Ts, Tt = src.shape[0], tgt.shape[0]
    key_mask = torch.where(src_mask.bool(), 0.0, fmin).to(dtype)[None, None, :]  # (1, 1, Ts)
    causal = torch.triu(torch.full((Tt, Tt), fmin, dtype=dtype), diagonal=1)[None]
    out = {"enc": [], "dec": [], "cross": []}
    x = embed(P, kind, "encoder", src, dtype)
    eh = [x]
    for l in range(LE):
        x = layer(P, kind, f"model.encoder.layers.{l}.", x, key_mask, caps=out["enc"])
        if kind == "mbart" and l == LE - 1:
            x = ln(P, "model.encoder.layer_norm", x)
        eh.append(x)
    mem = x
    y = embed(P, kind, "decoder", tgt, dtype)
    dh = [y]
    for l in range(LD):
        y = layer(P, kind, f"model.decoder.layers.{l}.", y, causal, mem, key_mask, out["dec"], out["cross"])
        if kind == "mbart" and l == LD - 1:
            y = ln(P, "model.decoder.layer_norm", y)
        dh.append(y)
    head = P["lm_head.weight"] if "lm_head.weight" in P else P["model.shared.weight"]
    logits = y @ head.T + P["final_logits_bias"][0]
    return outputs(out, eh, dh, logits)


def outputs(out, eh, dh, logits):
    stack = lambda caps, k: torch.stack([c[k] for c in caps])  # noqa: E731
    return {
        "encoder_attentions": stack(out["enc"], "attn"), "decoder_attentions": stack(out["dec"], "attn"),
        "cross_attentions": stack(out["cross"], "attn"), "cross_queries": stack(out["cross"], "q"),
        "cross_keys": stack(out["cross"], "k"), "cross_values": stack(out["cross"], "v"),
        "encoder_hidden_states": torch.stack(eh), "decoder_hidden_states": torch.stack(dh), "logits": logits,
    }


CASES = [
    # source ids, source mask, decoder input ids
    ([0, 17, 45, 9, 88, 23, 2], [1] * 7, [2, 0, 31, 64, 7]),
    ([0, 5, 77, 12, 3, 96, 2, 1, 1], [1] * 7 + [0, 0], [2, 0, 14, 52, 90, 33]),
    # longer (T5 only): relative positions past max_distance, so every bucket kind is used
    ([40 + i for i in range(17)], [1] * 15 + [0, 0], [0] + [60 + i for i in range(13)]),
]


def main():
    for i, kind in enumerate(("bart", "mbart", "marian", "t5", "mt5")):
        name = f"{kind}_tiny"
        P = make_params(kind, 2001 + i)
        d = os.path.join(OUT_DIR, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config(kind), f, indent=2, sort_keys=True)
            f.write("\n")
        names = sorted(P)
        st_write(os.path.join(d, "model.safetensors"), [(n, P[n], "F32") for n in names], {"format": "pt"})
        back = st_read(os.path.join(d, "model.safetensors"))
        assert all(torch.equal(back[n], P[n]) for n in names)
        tensors = []
        cases = CASES if kind in ("t5", "mt5") else CASES[:2]
        for ci, (src, sm, tgt) in enumerate(cases):
            src_t, sm_t, tgt_t = torch.tensor(src), torch.tensor(sm), torch.tensor(tgt)
            pad = {"marian": 100, "t5": 0, "mt5": 0}.get(kind, 1)
            src_t = torch.where(sm_t.bool(), src_t, torch.tensor(pad))
            with torch.no_grad():
                ref = forward(P, kind, src_t, sm_t, tgt_t)
                r64 = forward(P, kind, src_t, sm_t, tgt_t, torch.float64)
            da = max((ref[k].double() - r64[k]).abs().max().item()
                     for k in ("encoder_attentions", "decoder_attentions", "cross_attentions"))
            dl = ((ref["logits"].double() - r64["logits"]).abs().max() / r64["logits"].abs().max()).item()
            print(f"{name} case {ci}: float32 vs float64: attentions {da:.2e}, logits {dl:.2e} relative")
            assert da < XCHECK_ATTN_TOL and dl < XCHECK_LOGITS_REL
            p = f"c{ci}."
            tensors += [(p + "src_ids", src_t, "I32"), (p + "src_mask", sm_t, "I32"), (p + "tgt_ids", tgt_t, "I32")]
            tensors += [(p + k, ref[k], "F32") for k in sorted(ref)]
        meta = {"cases": str(len(cases)), "generator": GENERATOR, "kind": kind}
        st_write(os.path.join(d, "expected.safetensors"), tensors, meta)
        print(f"wrote {d}")


if __name__ == "__main__":
    main()
