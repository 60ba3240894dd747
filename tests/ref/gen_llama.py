#!/usr/bin/python3
"""gen_llama.py — numerical reference fixtures for the decoder LLM family (ARCH_LLAMA).

What it does: builds small random (seeded) LLaMA / Mistral / Qwen2 / Qwen3 / Gemma 2 /
Gemma 3 / Phi-3 models with Hugging Face's tensor names, shapes and config.json keys,
writes each as a Hugging Face model folder (config.json + model.safetensors), runs a
torch re-implementation of transformers' eager modeling code on three inputs per
model (one sentence with BOS, a right-padded one, a long one that is longer than every
sliding window) and writes every internal the C engine captures to
expected.safetensors. The formulas are written down in docs/llama_family.md.

Independent cross-checks, before anything is written (all must hold, max diffs printed):
  - RMSNorm (both forms) against the formula in float64;
  - RoPE (rotate_half layout, partial rotary, linear / llama3 / yarn / dynamic / longrope
    frequencies) against complex multiplication in float64 with frequencies computed in
    plain Python;
  - attention probabilities and outputs against a float64 version that masks with
    -inf from an explicit visibility rule (causal, padding, sliding window) and reads
    the key/value head of each query head by index;
  - each layer's output and the logits against the same forward run in float64.

What it does not: use the `transformers` library (not installed here) or write tokenizer
files. Dynamic NTK and LongRoPE frequencies are those of one forward over the case's
length (transformers computes the same for a model's first call; between calls its
dynamic NTK keeps the longest length seen).

Run (deterministic; rewrites the folders it owns in tests/ref/fixtures/models/):
    /usr/bin/python3 tests/ref/gen_llama.py

Sources (transformers main branch, eager attention):
  models/llama/modeling_llama.py    LlamaRMSNorm, LlamaRotaryEmbedding, rotate_half,
      apply_rotary_pos_emb, repeat_kv, eager_attention_forward, LlamaMLP,
      LlamaDecoderLayer, LlamaModel.forward (hidden_states), LlamaForCausalLM
  models/mistral, qwen2, qwen3 (q_norm / k_norm), gemma2 (Gemma2RMSNorm (1 + w), soft-caps,
      query_pre_attn_scalar, post norms, embedding normalizer), gemma3 (local RoPE base,
      sliding_window_pattern), phi3 (qkv_proj / gate_up_proj, partial rotary)
  modeling_rope_utils.py  _compute_default / linear / llama3 / yarn / dynamic_ntk / longrope_parameters,
                          dynamic_rope_update (the length: max(position_ids) + 1)
  models/phi3/configuration_phi3.py  a "type" of "su" or "yarn" is renamed longrope
  masking_utils.py        causal_mask_function, sliding_window_overlay
                          (kv_idx > q_idx - sliding_window), padding_mask_function,
                          eager mask = where(allowed, 0, finfo(float32).min) added to scores
  modeling_layers.GenericForSequenceClassification: score at the last non-pad token
"""
import json
import math
import os
import shutil
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_models import Init, fixture_generator, round_to, st_read, st_write  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "fixtures", "models")
GENERATOR = "tests/ref/gen_llama.py"
FMIN = torch.finfo(torch.float32).min

XCHECK_NORM_TOL = 1e-5
XCHECK_ROPE_TOL = 1e-5
XCHECK_ATTN_TOL = 1e-5   # probabilities and attention outputs vs float64
XCHECK_F64_TOL = 1e-4    # layer outputs / logits of the float32 forward vs float64

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

QK_STD = 0.25   # q/k projections: scores of a few units -> peaked attention
W_STD = 0.15    # other projections
EMB_STD = 0.5


# ---------------------------------------------------------------- config semantics
# What transformers derives from config.json (the C parser, src/io/config.c, does the same).

def family(c):
    t = c["model_type"]
    return dict(
        gemma=t in ("gemma2", "gemma3_text"), gemma2=t == "gemma2", gemma3=t == "gemma3_text",
        qwen2=t == "qwen2", qwen3=t == "qwen3", phi3=t == "phi3", mistral=t == "mistral",
        llama=t == "llama")


def head_dim(c):
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def layer_is_sliding(c, l):
    """Layer type (sliding_attention or not) as the configuration classes derive it."""
    f = family(c)
    if f["mistral"] or f["phi3"]:
        return c.get("sliding_window") is not None
    if f["qwen2"] or f["qwen3"]:
        if not c.get("use_sliding_window", False) or c.get("sliding_window") is None:
            return False
        if c.get("layer_types"):
            return c["layer_types"][l] == "sliding_attention"
        return l >= c.get("max_window_layers", 28)
    if f["gemma"]:
        if c.get("layer_types"):
            return c["layer_types"][l] == "sliding_attention"
        pattern = 2 if f["gemma2"] else c.get("sliding_window_pattern", 6)
        return bool((l + 1) % pattern)
    return False


def window_of(c, l):
    """Sliding window of layer l, or None (Gemma 3 marks a layer type even without one)."""
    return c.get("sliding_window") if layer_is_sliding(c, l) else None


# ---------------------------------------------------------------- RoPE (modeling_rope_utils)

def inv_freq_default(base, dim):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))


def rope_type(c):
    rs = c.get("rope_scaling") or {"rope_type": "default"}
    t = rs.get("rope_type", rs.get("type", "default"))
    if family(c)["phi3"] and rs.get("type") in ("su", "yarn"):  # Phi3Config._rope_scaling_adjustment
        t = "longrope"
    return rs, t


def rope_params(c, l, T):
    """(inv_freq float32 (dim/2,), attention_scaling, dim) for layer l in a forward over T positions."""
    f = family(c)
    dim = int(head_dim(c) * c.get("partial_rotary_factor", 1.0))
    base = c.get("rope_theta", 10000.0)
    rs, t = rope_type(c)
    if f["gemma3"] and layer_is_sliding(c, l):  # rotary_emb_local: default RoPE, local base
        return inv_freq_default(c.get("rope_local_base_freq", 10000.0), dim), 1.0, dim
    if t == "default":
        return inv_freq_default(base, dim), 1.0, dim
    if t == "dynamic":  # seq_len = max(T, max_position_embeddings)
        mp = c["max_position_embeddings"]
        seq = max(T, mp)
        base = base * ((rs["factor"] * seq / mp) - (rs["factor"] - 1)) ** (dim / (dim - 2))
        return inv_freq_default(base, dim), 1.0, dim
    if t == "longrope":
        orig = c.get("original_max_position_embeddings") or rs.get("original_max_position_embeddings") \
            or c["max_position_embeddings"]
        factor = rs.get("factor") or c["max_position_embeddings"] / orig
        att = rs.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        ext = torch.tensor(rs["long_factor"] if T > orig else rs["short_factor"], dtype=torch.float32)
        shape = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
        return 1.0 / (ext * base ** shape), att, dim
    if t == "linear":
        return inv_freq_default(base, dim) / rs["factor"], 1.0, dim
    if t == "llama3":
        inv = inv_freq_default(base, dim)
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wl, high_wl = old / lo, old / hi
        wavelen = 2 * math.pi / inv
        inv_l = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
        medium = ~(wavelen < high_wl) * ~(wavelen > low_wl)
        return torch.where(medium, smoothed, inv_l), 1.0, dim
    if t == "yarn":
        factor = rs["factor"]
        orig = rs.get("original_max_position_embeddings") or c["max_position_embeddings"]
        att = rs.get("attention_factor")
        if att is None:
            att = 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0
        beta_fast = rs.get("beta_fast") or 32
        beta_slow = rs.get("beta_slow") or 1

        def corr_dim(rot):
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

        low = max(math.floor(corr_dim(beta_fast)), 0)
        high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
        if low == high:
            high += 0.001
        pos_freqs = base ** (torch.arange(0, dim, 2).float() / dim)
        extra = 1.0 / pos_freqs
        inter = 1.0 / (factor * pos_freqs)
        ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
        extra_factor = 1 - ramp
        return inter * (1 - extra_factor) + extra * extra_factor, att, dim
    raise ValueError(t)


def rope_cos_sin(c, l, T):
    """LlamaRotaryEmbedding.forward: (T, dim) cos and sin, times attention_scaling."""
    inv, att, dim = rope_params(c, l, T)
    pos = torch.arange(T)
    freqs = (inv[None, :, None].float() @ pos[None, None, :].float()).transpose(1, 2)[0]  # (T, dim/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * att, emb.sin() * att


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """x (H, T, Dh); rotates the first cos.shape[-1] dims (Phi-3's partial rotary), keeps the rest."""
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    return torch.cat([xr * cos[None] + rotate_half(xr) * sin[None], xp], dim=-1)


# ---------------------------------------------------------------- modules

def rms_norm(x, w, eps, add_one):
    # HF upcasts to float32; a float64 forward (gen_grads.py, xcheck_f64) stays in float64
    up = torch.promote_types(x.dtype, torch.float32)
    if add_one:  # Gemma2RMSNorm / Gemma3RMSNorm: float32, times (1 + w)
        xf = x.to(up)
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return (out * (1.0 + w.to(up))).type_as(x)
    xf = x.to(up)  # LlamaRMSNorm
    var = xf.pow(2).mean(-1, keepdim=True)
    return w * (xf * torch.rsqrt(var + eps)).to(x.dtype)


def act_fn(name):
    return {"silu": F.silu, "swish": F.silu,
            "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
            "gelu": F.gelu}[name]


def allowed_mask(c, l, T, mask):
    """(T, T) bool: key j visible to query i (causal, padding, sliding window)."""
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    ok = (j <= i) & (mask[None, :] != 0)
    w = window_of(c, l)
    if w is not None:
        ok = ok & (j > i - w)
    return ok


def forward(P, c, pre, ids, mask, head, dtype=torch.float32, word_embeds=None):
    """The model's forward for one sequence (batch of one), recording every internal.
    P: parameters (float32); pre: "model." or ""; head: "lm" or "classifier".
    word_embeds: (T, D) rows used instead of the embed_tokens lookup (gen_grads.py)."""
    f = family(c)
    P = {k: v.to(dtype) for k, v in P.items()}
    D, H, L = c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"]
    Hkv = c.get("num_key_value_heads") or H
    Dh, T = head_dim(c), ids.shape[0]
    eps = c["rms_norm_eps"]
    add_one = f["gemma"]
    act = act_fn(c["hidden_activation"] if f["gemma"] else c.get("hidden_act", "silu"))
    g = lambda n: P[pre + n]
    opt = lambda n: P.get(pre + n)
    norm = lambda x, n: rms_norm(x, g(n + ".weight"), eps, add_one)
    if f["gemma"]:
        scaling = c["query_pre_attn_scalar"] ** -0.5
    else:
        scaling = Dh ** -0.5
    softcap = c.get("attn_logit_softcapping") if f["gemma"] else None

    h = F.embedding(ids, g("embed_tokens.weight")) if word_embeds is None else word_embeds.to(dtype)
    if f["gemma"]:  # normalizer = tensor(hidden_size ** 0.5, dtype=hidden_states.dtype)
        h = h * torch.tensor(D ** 0.5, dtype=h.dtype)
    rec = {k: [] for k in ("attentions", "attention_scores", "queries_pre_rope", "keys_pre_rope",
                           "queries", "keys", "values", "_attn_out")}
    hs, layer_in = [h], []
    group = H // Hkv
    for l in range(L):
        b = f"layers.{l}."
        lin = lambda x, n: F.linear(x, g(b + n + ".weight"), opt(b + n + ".bias"))
        layer_in.append(h)
        x = norm(h, b + "input_layernorm")
        if f["phi3"]:  # qkv_proj: q | k | v along the output dim
            qkv = lin(x, "self_attn.qkv_proj")
            q = qkv[..., : H * Dh]
            k = qkv[..., H * Dh: H * Dh + Hkv * Dh]
            v = qkv[..., H * Dh + Hkv * Dh:]
        else:
            q, k, v = lin(x, "self_attn.q_proj"), lin(x, "self_attn.k_proj"), lin(x, "self_attn.v_proj")
        q = q.view(T, H, Dh).transpose(0, 1)      # (H, T, Dh)
        k = k.view(T, Hkv, Dh).transpose(0, 1)    # (Hkv, T, Dh)
        v = v.view(T, Hkv, Dh).transpose(0, 1)
        if f["qwen3"] or f["gemma3"]:
            q = norm(q, b + "self_attn.q_norm")
            k = norm(k, b + "self_attn.k_norm")
        q_pre, k_pre = q, k
        cos, sin = rope_cos_sin(c, l, T)
        cos, sin = cos.to(dtype), sin.to(dtype)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        kr = k.repeat_interleave(group, dim=0)    # repeat_kv: query head h reads kv head h // group
        vr = v.repeat_interleave(group, dim=0)
        s = torch.matmul(q, kr.transpose(1, 2)) * scaling
        if softcap:
            s = torch.tanh(s / softcap) * softcap
        am = torch.where(allowed_mask(c, l, T, mask), torch.tensor(0.0, dtype=dtype),
                         torch.tensor(torch.finfo(dtype).min, dtype=dtype))
        s = s + am
        p = F.softmax(s, dim=-1, dtype=dtype)
        o = torch.matmul(p, vr).transpose(0, 1).reshape(T, H * Dh)
        o = lin(o, "self_attn.o_proj")
        if f["gemma"]:
            o = norm(o, b + "post_attention_layernorm")
        h = h + o
        x = norm(h, b + ("pre_feedforward_layernorm" if f["gemma"] else "post_attention_layernorm"))
        if f["phi3"]:
            gate, up = lin(x, "mlp.gate_up_proj").chunk(2, dim=-1)
            m = lin(up * act(gate), "mlp.down_proj")
        else:
            m = lin(act(lin(x, "mlp.gate_proj")) * lin(x, "mlp.up_proj"), "mlp.down_proj")
        if f["gemma"]:
            m = norm(m, b + "post_feedforward_layernorm")
        h = h + m
        for key, val in zip(rec, (p, s, q_pre, k_pre.repeat_interleave(group, dim=0), q, kr, vr,
                                  torch.matmul(p, vr))):
            rec[key].append(val)
        hs.append(h)
    block_out = hs[-1]
    hs[-1] = norm(block_out, "norm")  # HF: the last entry is after the final norm
    out = {k: torch.stack(v) for k, v in rec.items()}
    out["_probs"] = rec["attentions"]  # per layer, in the graph (gen_grads.py)
    out["hidden_states"] = torch.stack(hs)
    out["_layer_in"] = layer_in
    out["_block_out"] = block_out
    final = hs[-1]
    if head == "lm":
        w = P["lm_head.weight"] if "lm_head.weight" in P else g("embed_tokens.weight")
        logits = F.linear(final, w)
        cap = c.get("final_logit_softcapping") if f["gemma"] else None
        if cap:
            logits = torch.tanh(logits / cap) * cap
    else:  # GenericForSequenceClassification: rightmost token that is not pad_token_id
        all_logits = F.linear(final, P["score.weight"])
        pad = c.get("pad_token_id")
        if pad is None:
            last = T - 1
        else:
            non_pad = (ids != pad).to(torch.int32)
            last = int((torch.arange(T, dtype=torch.int32) * non_pad).argmax(-1))
        logits = all_logits[last][None]
        out["_pooled_index"] = last
    out["logits"] = logits
    out["kv_group"] = (torch.arange(H) // group).to(torch.int32)
    return out


# ---------------------------------------------------------------- independent cross-checks

def py_inv_freq(c, l, T):
    """Frequencies in float64 with Python's math, written from the formulas (not the torch code)."""
    f = family(c)
    dim = int(head_dim(c) * c.get("partial_rotary_factor", 1.0))
    base = c.get("rope_theta", 10000.0)
    rs, t = rope_type(c)
    if f["gemma3"] and layer_is_sliding(c, l):
        base, t = c.get("rope_local_base_freq", 10000.0), "default"
    if t == "dynamic" and T > c["max_position_embeddings"]:  # NTK: the base grows with the length
        s_ = rs["factor"] * T / c["max_position_embeddings"] - (rs["factor"] - 1)
        base = base * math.exp(math.log(s_) * dim / (dim - 2))
    inv = [base ** (-(2 * i) / dim) for i in range(dim // 2)]
    att = 1.0
    if t == "longrope":
        orig = c.get("original_max_position_embeddings") or c["max_position_embeddings"]
        fac = c["max_position_embeddings"] / orig
        att = math.sqrt(1 + math.log(fac) / math.log(orig)) if fac > 1 else 1.0
        ext = rs["long_factor"] if T > orig else rs["short_factor"]
        inv = [x / e for x, e in zip(inv, ext)]
    elif t == "linear":
        inv = [x / rs["factor"] for x in inv]
    elif t == "llama3":
        fac, lo, hi, old = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"], \
            rs["original_max_position_embeddings"]
        out = []
        for x in inv:
            wl = 2 * math.pi / x
            if wl < old / hi:
                out.append(x)
            elif wl > old / lo:
                out.append(x / fac)
            else:
                sm = (old / wl - lo) / (hi - lo)
                out.append((1 - sm) * x / fac + sm * x)
        inv = out
    elif t == "yarn":
        fac = rs["factor"]
        orig = rs.get("original_max_position_embeddings") or c["max_position_embeddings"]
        att = rs.get("attention_factor") or (0.1 * math.log(fac) + 1.0)
        cd = lambda r: dim * math.log(orig / (r * 2 * math.pi)) / (2 * math.log(base))
        lo = max(math.floor(cd(rs.get("beta_fast") or 32)), 0)
        hi = min(math.ceil(cd(rs.get("beta_slow") or 1)), dim - 1)
        hi = hi + 0.001 if lo == hi else hi
        out = []
        for i, x in enumerate(inv):
            ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
            out.append(x / fac * ramp + x * (1 - ramp))   # interpolate where ramp = 1
        inv = out
    return inv, att, dim


def xcheck_rope(c, ref, T):
    """queries = RoPE(queries_pre_rope) as complex rotation of pairs (d, d + dim/2)."""
    worst = 0.0
    for l in range(c["num_hidden_layers"]):
        inv, att, dim = py_inv_freq(c, l, T)
        ang = torch.tensor([[p * x for x in inv] for p in range(T)], dtype=torch.float64)  # (T, dim/2)
        rot = torch.polar(torch.full_like(ang, att), ang)
        for pre, post in (("queries_pre_rope", "queries"), ("keys_pre_rope", "keys")):
            x = ref[pre][l].double()                                   # (H, T, Dh)
            z = torch.complex(x[..., : dim // 2], x[..., dim // 2: dim]) * rot[None]
            y = torch.cat([z.real, z.imag, x[..., dim:]], dim=-1)
            worst = max(worst, (y - ref[post][l].double()).abs().max().item())
    return worst


def xcheck_norm(ref, P, c, pre):
    """The final norm of the last block's output against the formula in float64."""
    f = family(c)
    x = ref["_block_out"].double()
    w = P[pre + "norm.weight"].double()
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + c["rms_norm_eps"])
    y = y * ((1 + w) if f["gemma"] else w)
    return (y - ref["hidden_states"][-1].double()).abs().max().item()


def xcheck_attention(c, ref, mask, T):
    """Probabilities and outputs from float64 q, k, v with an explicit visibility rule."""
    worst_p = worst_o = 0.0
    f = family(c)
    H = c["num_attention_heads"]
    Hkv = c.get("num_key_value_heads") or H
    scaling = c["query_pre_attn_scalar"] ** -0.5 if f["gemma"] else head_dim(c) ** -0.5
    cap = c.get("attn_logit_softcapping") if f["gemma"] else None
    for l in range(c["num_hidden_layers"]):
        w = window_of(c, l)
        vis = torch.tensor([[j <= i and mask[j] != 0 and (w is None or i - j < w) for j in range(T)]
                            for i in range(T)])
        for h in range(H):
            kv = h // (H // Hkv)
            assert ref["kv_group"][h].item() == kv
            q = ref["queries"][l, h].double()
            k = ref["keys"][l, h].double()   # already the kv head's keys: compare with head kv's
            assert torch.equal(ref["keys"][l, h], ref["keys"][l, kv * (H // Hkv)])
            s = (q @ k.T) * scaling
            if cap:
                s = cap * torch.tanh(s / cap)
            s = s.masked_fill(~vis, -math.inf)
            p = torch.softmax(s, dim=-1)
            worst_p = max(worst_p, (p - ref["attentions"][l, h].double()).abs().max().item())
            o = p @ ref["values"][l, h].double()
            worst_o = max(worst_o, (o - ref["_attn_out"][l, h].double()).abs().max().item())
            # masked scores are exactly finfo(float32).min, allowed ones are finite
            sc = ref["attention_scores"][l, h]
            assert (sc[~vis] == FMIN).all() and torch.isfinite(sc[vis]).all()
    return worst_p, worst_o


def xcheck_f64(P, c, pre, ids, mask, head, ref):
    r64 = forward(P, c, pre, ids, mask, head, dtype=torch.float64)
    dh = (r64["hidden_states"] - ref["hidden_states"].double()).abs().max().item()
    dl = (r64["logits"] - ref["logits"].double()).abs().max().item()
    return max(dh, dl)


# ---------------------------------------------------------------- models

def base_config(model_type, arch, V=53, D=32, H=4, Hkv=2, L=2, Fd=20, **extra):
    c = {
        "architectures": [arch],
        "attention_dropout": 0.0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": D,
        "initializer_range": 0.02,
        "intermediate_size": Fd,
        "max_position_embeddings": 256,
        "model_type": model_type,
        "num_attention_heads": H,
        "num_hidden_layers": L,
        "num_key_value_heads": Hkv,
        "rms_norm_eps": 1e-6,
        "rope_scaling": None,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "transformers_version": "4.56.0",
        "use_cache": True,
        "vocab_size": V,
    }
    c.update(extra)
    return c


def make_params(init, c, pre, head="lm", C=0):
    f = family(c)
    D, H, L, Fd, V = (c["hidden_size"], c["num_attention_heads"], c["num_hidden_layers"],
                      c["intermediate_size"], c["vocab_size"])
    Hkv = c.get("num_key_value_heads") or H
    Dh = head_dim(c)
    nw = (lambda n: init.normal((n,), 0.1, 0.0)) if f["gemma"] else (lambda n: init.normal((n,), 0.1, 1.0))
    qkv_bias = f["qwen2"] or c.get("attention_bias", False)
    o_bias = c.get("attention_bias", False) and not f["qwen2"]
    mlp_bias = c.get("mlp_bias", False)
    P = {}

    def lin(name, n_out, n_in, std, bias):
        P[name + ".weight"] = init.normal((n_out, n_in), std)
        if bias:
            P[name + ".bias"] = init.normal((n_out,), 0.1)

    P[pre + "embed_tokens.weight"] = init.normal((V, D), EMB_STD)
    for l in range(L):
        b = f"{pre}layers.{l}."
        P[b + "input_layernorm.weight"] = nw(D)
        if f["phi3"]:
            w = torch.cat([init.normal((H * Dh, D), QK_STD), init.normal((Hkv * Dh, D), QK_STD),
                           init.normal((Hkv * Dh, D), W_STD)], dim=0)
            P[b + "self_attn.qkv_proj.weight"] = w
        else:
            lin(b + "self_attn.q_proj", H * Dh, D, QK_STD, qkv_bias)
            lin(b + "self_attn.k_proj", Hkv * Dh, D, QK_STD, qkv_bias)
            lin(b + "self_attn.v_proj", Hkv * Dh, D, W_STD, qkv_bias)
        lin(b + "self_attn.o_proj", D, H * Dh, W_STD, o_bias)
        if f["qwen3"] or f["gemma3"]:
            P[b + "self_attn.q_norm.weight"] = nw(Dh)
            P[b + "self_attn.k_norm.weight"] = nw(Dh)
        P[b + "post_attention_layernorm.weight"] = nw(D)
        if f["gemma"]:
            P[b + "pre_feedforward_layernorm.weight"] = nw(D)
            P[b + "post_feedforward_layernorm.weight"] = nw(D)
        if f["phi3"]:
            P[b + "mlp.gate_up_proj.weight"] = init.normal((2 * Fd, D), W_STD)
        else:
            lin(b + "mlp.gate_proj", Fd, D, W_STD, mlp_bias)
            lin(b + "mlp.up_proj", Fd, D, W_STD, mlp_bias)
        lin(b + "mlp.down_proj", D, Fd, W_STD, mlp_bias)
    P[pre + "norm.weight"] = nw(D)
    if head == "classifier":
        P["score.weight"] = init.normal((C, D), 0.3)
    elif not c.get("tie_word_embeddings", False):
        P["lm_head.weight"] = init.normal((V, D), W_STD)
    return P


def inputs(g, c, T_single=11, T_real_padded=8, n_pad=3, T_long=18):
    """single: BOS + random; padded: BOS + random + pads (mask 0); long: BOS + random.
    Random ids avoid the specials (0..3)."""
    V = c["vocab_size"]
    bos = c["bos_token_id"]
    pad = c.get("pad_token_id")
    if pad is None:
        pad = c["eos_token_id"][0] if isinstance(c["eos_token_id"], list) else c["eos_token_id"]
    r = lambda n: torch.randint(4, V, (n,), generator=g)
    one = torch.tensor
    single = torch.cat([one([bos]), r(T_single - 1)])
    padded = torch.cat([one([bos]), r(T_real_padded - 1), one([pad] * n_pad)])
    pmask = torch.cat([torch.ones(T_real_padded, dtype=torch.long), torch.zeros(n_pad, dtype=torch.long)])
    long = torch.cat([one([bos]), r(T_long - 1)])
    return [("single", single, torch.ones_like(single)), ("padded", padded, pmask),
            ("long", long, torch.ones_like(long))]


def build(name, seed, c, pre="model.", head="lm", C=0, dtype="F32", note=""):
    init = Init(seed)
    P = round_to(make_params(init, c, pre, head, C), dtype)
    c = dict(c)
    c["torch_dtype"] = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype]
    g = torch.Generator().manual_seed(seed + 1)
    cases = []
    for case, ids, mask in inputs(g, c):
        ref = forward(P, c, pre, ids, mask, head)
        cases.append((case, ids, mask, ref))
    return dict(name=name, config=c, params=P, pre=pre, dtype=dtype, cases=cases, head=head, note=note)


def fixtures():
    fx = []
    # LLaMA: GQA 4 query heads / 2 kv heads, Dh 8, untied lm_head
    llama = base_config("llama", "LlamaForCausalLM", attention_bias=False, mlp_bias=False,
                        pretraining_tp=1, head_dim=8)
    fx.append(build("llama", 2001, llama))
    # Llama 3.1 RoPE scaling (all three frequency bands at Dh 8), tied, q/k/v/o and MLP biases,
    # eos given as a list
    l3 = base_config("llama", "LlamaForCausalLM", attention_bias=True, mlp_bias=True,
                     tie_word_embeddings=True, rope_theta=10000.0, eos_token_id=[2, 3],
                     rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 64, "rope_type": "llama3"})
    fx.append(build("llama3_scaled", 2002, l3))
    # Mistral: sliding window 5 on every layer
    mis = base_config("mistral", "MistralForCausalLM", sliding_window=5, head_dim=None)
    fx.append(build("mistral_swa", 2003, mis))
    # Qwen2: q/k/v biases, tied, no "model." prefix (saved from Qwen2Model), sliding window 6
    # from layer max_window_layers = 1 on
    q2 = base_config("qwen2", "Qwen2ForCausalLM", tie_word_embeddings=True, use_sliding_window=True,
                     sliding_window=6, max_window_layers=1, rope_theta=1000000.0,
                     bos_token_id=1, eos_token_id=2)
    fx.append(build("qwen2_noprefix", 2004, q2, pre=""))
    # Qwen3: q/k RMSNorm, explicit head_dim 10 (hidden / heads = 8), MQA (1 kv head)
    q3 = base_config("qwen3", "Qwen3ForCausalLM", Hkv=1, head_dim=10, attention_bias=False,
                     use_sliding_window=False, sliding_window=None, max_window_layers=2)
    fx.append(build("qwen3", 2005, q3))
    # Gemma 2: soft-caps (small enough to bend), query_pre_attn_scalar 20, alternating
    # sliding layers (window 5), post norms, (1 + w) norms, GeGLU tanh, embedding scale, tied
    g2 = base_config("gemma2", "Gemma2ForCausalLM", head_dim=10, hidden_act="gelu_pytorch_tanh",
                     hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=20,
                     attn_logit_softcapping=3.0, final_logit_softcapping=4.0, sliding_window=5,
                     tie_word_embeddings=True, attention_bias=False, bos_token_id=2, eos_token_id=1,
                     pad_token_id=0, cache_implementation="hybrid")
    fx.append(build("gemma2", 2006, g2))
    # Gemma 3: q/k norm, local base 100 on sliding layers, linear scaling (factor 2) on the
    # global ones, sliding_window_pattern 3 over 3 layers (layers 0, 1 slide; 2 is global)
    g3 = base_config("gemma3_text", "Gemma3ForCausalLM", L=3, head_dim=10,
                     hidden_activation="gelu_pytorch_tanh", query_pre_attn_scalar=16,
                     attn_logit_softcapping=None, final_logit_softcapping=None, sliding_window=4,
                     sliding_window_pattern=3, rope_theta=50000.0, rope_local_base_freq=100.0,
                     rope_scaling={"factor": 2.0, "rope_type": "linear"}, tie_word_embeddings=True,
                     attention_bias=False, bos_token_id=2, eos_token_id=1, pad_token_id=0)
    del g3["hidden_act"]
    fx.append(build("gemma3", 2007, g3))
    # Phi-3: fused qkv_proj / gate_up_proj, partial rotary 0.5 (Dh 8 -> 4 rotated dims),
    # sliding window 8 on every layer
    p3 = base_config("phi3", "Phi3ForCausalLM", partial_rotary_factor=0.5,
                     sliding_window=8, original_max_position_embeddings=256, rms_norm_eps=1e-5,
                     pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0)
    fx.append(build("phi3", 2008, p3))
    # YaRN on LLaMA (factor 4 from 64 positions; frequencies between the extremes ramp)
    yc = base_config("llama", "LlamaForCausalLM", max_position_embeddings=256,
                     rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                   "original_max_position_embeddings": 64,
                                   "beta_fast": 32.0, "beta_slow": 1.0})
    fx.append(build("yarn", 2009, yc))
    # Dynamic NTK on LLaMA: max_position_embeddings 12, so the 18-token case runs on a grown
    # base and the 11-token ones on rope_theta; GQA group 3 (6 query heads, 2 kv heads,
    # head_dim 8: 48 != hidden 32)
    dyn = base_config("llama", "LlamaForCausalLM", H=6, Hkv=2, max_position_embeddings=12, head_dim=8,
                      rope_scaling={"rope_type": "dynamic", "factor": 3.0})
    fx.append(build("dynamic", 2011, dyn))
    # LongRoPE on Phi-3 (the "su" name Phi-3 checkpoints were saved with): short factors up to
    # original_max_position_embeddings 12 (11-token cases), long ones past it (18 tokens);
    # attention factor sqrt(1 + ln(48 / 12) / ln 12) from max_position_embeddings 48
    lr = base_config("phi3", "Phi3ForCausalLM", partial_rotary_factor=0.75, H=4, Hkv=4,
                     max_position_embeddings=48, original_max_position_embeddings=12,
                     rms_norm_eps=1e-5, pad_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                     rope_scaling={"type": "su", "short_factor": [1.0, 1.25, 1.5],
                                   "long_factor": [1.5, 3.0, 7.0]})
    fx.append(build("longrope", 2012, lr))
    # the llama weights stored BF16
    fx.append(build("llama_bf16", 2001, llama, dtype="BF16"))
    # LlamaForSequenceClassification: score (3, D), pooled at the last non-pad token
    cls = base_config("llama", "LlamaForSequenceClassification", pad_token_id=0,
                      id2label={"0": "negative", "1": "neutral", "2": "positive"},
                      label2id={"negative": 0, "neutral": 1, "positive": 2})
    fx.append(build("llama_cls", 2010, cls, head="classifier", C=3))
    for f in fx:
        f["config"] = {k: v for k, v in f["config"].items() if not (k == "head_dim" and v is None)}
    return fx


EXPECTED_KEYS = ("attentions", "attention_scores", "queries_pre_rope", "keys_pre_rope", "queries",
                 "keys", "values", "hidden_states", "logits")


def write_fixture(fx):
    d = os.path.join(OUT_DIR, fx["name"])
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(fx["config"], f, indent=2, sort_keys=True)
        f.write("\n")
    names = sorted(fx["params"])
    st_write(os.path.join(d, "model.safetensors"), [(n, fx["params"][n], fx["dtype"]) for n in names],
             {"format": "pt"})
    back = st_read(os.path.join(d, "model.safetensors"))
    for n in names:
        assert torch.equal(back[n], fx["params"][n]), n
    tensors = []
    for case, ids, mask, ref in fx["cases"]:
        tensors += [(f"{case}.input_ids", ids, "I32"),
                    (f"{case}.token_type_ids", torch.zeros_like(ids), "I32"),
                    (f"{case}.attention_mask", mask, "I32"),
                    (f"{case}.kv_group", ref["kv_group"], "I32")]
        tensors += [(f"{case}.{k}", ref[k], "F32") for k in EXPECTED_KEYS]
    c = fx["config"]
    meta = {"arch": "llama", "model_type": c["model_type"], "dtype": fx["dtype"],
            "logits_head": "classifier" if fx["head"] == "classifier" else "lm",
            "prefix": fx["pre"], "cases": ",".join(cc[0] for cc in fx["cases"]),
            "n_layer": c["num_hidden_layers"], "generator": GENERATOR}
    st_write(os.path.join(d, "expected.safetensors"), tensors, meta)


def main():
    fx = fixtures()
    worst = {"norm": 0.0, "rope": 0.0, "prob": 0.0, "out": 0.0, "f64": 0.0}
    for f in fx:
        for case, ids, mask, ref in f["cases"]:
            T = ids.shape[0]
            dn = xcheck_norm(ref, f["params"], f["config"], f["pre"])
            dr = xcheck_rope(f["config"], ref, T)
            dp, do = xcheck_attention(f["config"], ref, mask, T)
            d64 = xcheck_f64(f["params"], f["config"], f["pre"], ids, mask, f["head"], ref)
            for k, v in zip(worst, (dn, dr, dp, do, d64)):
                worst[k] = max(worst[k], v)
            a = ref["attentions"]
            print(f"{f['name'] + '/' + case:24s} T={T:2d} norm {dn:.1e} rope {dr:.1e} "
                  f"attn p {dp:.1e} out {do:.1e} f64 {d64:.1e}  max p {a.max().item():.3f} "
                  f"mean row max {a.max(-1).values.mean().item():.3f}")
    assert worst["norm"] <= XCHECK_NORM_TOL, worst
    assert worst["rope"] <= XCHECK_ROPE_TOL, worst
    assert worst["prob"] <= XCHECK_ATTN_TOL and worst["out"] <= XCHECK_ATTN_TOL, worst
    assert worst["f64"] <= XCHECK_F64_TOL, worst
    os.makedirs(OUT_DIR, exist_ok=True)
    for entry in os.listdir(OUT_DIR):  # only the folders this script wrote
        p = os.path.join(OUT_DIR, entry)
        if os.path.isdir(p) and fixture_generator(p) == GENERATOR:
            shutil.rmtree(p)
    for f in fx:
        write_fixture(f)
    total = 0
    for f in fx:
        d = os.path.join(OUT_DIR, f["name"])
        total += sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d))
    print(f"worst: {worst}")
    print(f"wrote {len(fx)} fixtures to {OUT_DIR}, {total} bytes")


if __name__ == "__main__":
    main()
