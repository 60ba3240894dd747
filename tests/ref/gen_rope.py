#!/usr/bin/python3
"""gen_rope.py — RoPE frequencies and cos / sin tables at long positions, as transformers
computes them, for the rotary settings of real checkpoints.

What it does: for each configuration below (the rope settings of Llama 2, Llama 3.1,
Qwen2.5 with YaRN, Qwen3, Mistral, Gemma 2, Gemma 3's global and local layers, Phi-3.5's
LongRoPE below and past its original length, Phi-4-mini's partial rotary, dynamic NTK
past max_position_embeddings, and an odd head width) computes, with the definitions of
tests/ref/gen_llama.py (transformers' modeling_rope_utils in float32), the inverse
frequencies, the attention factor and the cos / sin rows at positions up to 65,535.
Writes tests/ref/fixtures/rope_tables.safetensors: per entry i, "i.inv" [R/2] F32,
"i.pos" [P] I32, "i.cos" / "i.sin" [P, R/2] F32 (the factor applied); metadata "n",
"i.config" (config.json text), "i.local" (1: Gemma 3's sliding-layer table), "i.T"
(the forward's length, which picks dynamic NTK's base and LongRoPE's factors).

What it does not: run a model (test_model_parity's fixtures do, at short lengths).

Run (deterministic): /usr/bin/python3 tests/ref/gen_rope.py
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_llama as G  # noqa: E402
from gen_models import st_write  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "rope_tables.safetensors")
POSITIONS = [0, 1, 2, 3, 100, 1000, 4095, 4096, 4097, 8191, 16384, 32767, 65535]


def cfg(model_type, D, H, Hkv, **extra):
    c = {"model_type": model_type, "hidden_size": D, "num_attention_heads": H, "num_key_value_heads": Hkv,
         "num_hidden_layers": 6, "intermediate_size": 64, "vocab_size": 32064, "rms_norm_eps": 1e-6,
         "max_position_embeddings": 131072, "rope_theta": 10000.0}
    c.update(extra)
    return c


def entries():
    phi_short = [1.0 + 0.02 * i for i in range(48)]
    phi_long = [1.0 + 1.1 * i for i in range(48)]
    phi4_long = [1.0 + 0.9 * i for i in range(48)]
    e = [
        ("llama2", cfg("llama", 4096, 32, 32, max_position_embeddings=4096), 0, 4096),
        ("llama3.1", cfg("llama", 4096, 32, 8, rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}), 0, 65536),
        ("qwen2.5-yarn", cfg("qwen2", 3584, 28, 4, max_position_embeddings=32768, rope_theta=1000000.0,
                             rope_scaling={"type": "yarn", "factor": 4.0,
                                           "original_max_position_embeddings": 32768}), 0, 65536),
        ("qwen3", cfg("qwen3", 1024, 16, 8, head_dim=128, rope_theta=1000000.0, max_position_embeddings=40960),
         0, 40960),
        ("mistral", cfg("mistral", 4096, 32, 8, rope_theta=1000000.0, max_position_embeddings=32768), 0, 32768),
        ("gemma2", cfg("gemma2", 2304, 8, 4, head_dim=256, max_position_embeddings=8192, query_pre_attn_scalar=256,
                       sliding_window=4096), 0, 8192),
        ("gemma3-global", cfg("gemma3_text", 2560, 8, 4, head_dim=256, rope_theta=1000000.0,
                              rope_local_base_freq=10000.0, sliding_window=1024, query_pre_attn_scalar=256,
                              rope_scaling={"rope_type": "linear", "factor": 8.0}), 0, 65536),
        ("gemma3-local", cfg("gemma3_text", 2560, 8, 4, head_dim=256, rope_theta=1000000.0,
                             rope_local_base_freq=10000.0, sliding_window=1024, query_pre_attn_scalar=256,
                             rope_scaling={"rope_type": "linear", "factor": 8.0}), 1, 65536),
        ("phi3.5-short", cfg("phi3", 3072, 32, 32, original_max_position_embeddings=4096,
                             rope_scaling={"type": "longrope", "short_factor": phi_short,
                                           "long_factor": phi_long}), 0, 4096),
        ("phi3.5-long", cfg("phi3", 3072, 32, 32, original_max_position_embeddings=4096,
                            rope_scaling={"type": "longrope", "short_factor": phi_short,
                                          "long_factor": phi_long}), 0, 65536),
        ("phi4-mini-partial", cfg("phi3", 3072, 24, 8, partial_rotary_factor=0.75, original_max_position_embeddings=4096,
                                  rope_scaling={"type": "longrope", "short_factor": phi_short,
                                                "long_factor": phi4_long}), 0, 65536),
        ("dynamic", cfg("llama", 2048, 32, 8, max_position_embeddings=2048,
                        rope_scaling={"rope_type": "dynamic", "factor": 2.0}), 0, 8192),
        ("odd-head", cfg("llama", 136, 4, 2, head_dim=34, max_position_embeddings=65536), 0, 65536),
    ]
    return e


def main():
    tensors, meta = [], {"generator": "tests/ref/gen_rope.py"}
    ents = entries()
    for i, (name, c, local, T) in enumerate(ents):
        layer = 0 if local else 5  # Gemma 3 (pattern 6): layer 0 slides, layer 5 is global
        inv, att, dim = G.rope_params(c, layer, T)
        cos, sin = G.rope_cos_sin(c, layer, T)
        pos = [p for p in POSITIONS if p < T]
        half = dim // 2
        tensors += [(f"{i}.inv", inv.float(), "F32"), (f"{i}.pos", torch.tensor(pos, dtype=torch.int32), "I32"),
                    (f"{i}.cos", cos[pos, :half].contiguous(), "F32"), (f"{i}.sin", sin[pos, :half].contiguous(), "F32")]
        meta[f"{i}.config"] = json.dumps(c)
        meta[f"{i}.local"] = str(local)
        meta[f"{i}.T"] = str(T)
        meta[f"{i}.name"] = name
        print(f"{name:18s} R={dim:3d} T={T:5d} attention factor {att:.6f}")
    meta["n"] = str(len(ents))
    st_write(OUT, tensors, meta)
    print(f"wrote {OUT}, {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
