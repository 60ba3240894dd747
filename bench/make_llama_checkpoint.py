"""bench/make_llama_checkpoint.py — a random Llama-shaped checkpoint for the benchmarks
(no pretrained weights can be downloaded here): config.json + model.safetensors in BF16
(or F32) with Hugging Face parameter names. Default: the 1B shape of bench/RESULTS.md
(16 layers, width 2048, 32 query / 8 key-value heads of 64, SwiGLU 8192, vocabulary 32000,
untied LM head), weights N(0, 0.02), norms 1; options for a tied head, the special ids,
RoPE theta, the seed and GPT-2's scaled residual initialisation (a starting point for
`attnscope train-lm`). Written tensor by tensor (numpy only), then dropped from the page
cache (fsync + POSIX_FADV_DONTNEED), so that the first reader takes it from disk as it would
a downloaded checkpoint: the kernel then caches it in 2 MiB folios, where pages cached by the
writer stay 4 KiB ones (a 1B model's prefill from those is 7-13% slower, the weights' TLB
misses).
  /usr/bin/python3 bench/make_llama_checkpoint.py OUT_DIR [--dtype bf16|f32] [--layers N]
     [--width D] [--heads H] [--kv-heads K] [--ff F] [--vocab V] [--positions P] [--tie]
     [--bos ID] [--eos ID] [--rope-theta T] [--seed S] [--std S] [--scaled-residual]
"""
import argparse
import json
import os
import struct

import numpy as np

from configs import drop_from_page_cache


def to_bf16(a):
    """float32 -> bf16 bits, round to nearest even."""
    u = a.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--ff", type=int, default=8192)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--positions", type=int, default=4096)
    ap.add_argument("--tie", action="store_true", help="tie the LM head to the embedding table")
    ap.add_argument("--bos", type=int, default=1)
    ap.add_argument("--eos", type=int, default=2)
    ap.add_argument("--rope-theta", type=float, default=500000.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--std", type=float, default=0.02)
    ap.add_argument("--scaled-residual", action="store_true",
                    help="o_proj and down_proj at std / sqrt(2 layers) (GPT-2's residual scaling)")
    a = ap.parse_args()
    D, H, K, F, V, L = a.width, a.heads, a.kv_heads, a.ff, a.vocab, a.layers
    Dh = D // H
    sd = a.std
    so = sd / (2 * L) ** 0.5 if a.scaled_residual else sd
    shapes = [("model.embed_tokens.weight", (V, D), sd), ("model.norm.weight", (D,), None)]
    if not a.tie:
        shapes.append(("lm_head.weight", (V, D), sd))
    for l in range(L):
        p = f"model.layers.{l}."
        shapes += [(p + "input_layernorm.weight", (D,), None), (p + "post_attention_layernorm.weight", (D,), None),
                   (p + "self_attn.q_proj.weight", (H * Dh, D), sd),
                   (p + "self_attn.k_proj.weight", (K * Dh, D), sd),
                   (p + "self_attn.v_proj.weight", (K * Dh, D), sd),
                   (p + "self_attn.o_proj.weight", (D, H * Dh), so),
                   (p + "mlp.gate_proj.weight", (F, D), sd), (p + "mlp.up_proj.weight", (F, D), sd),
                   (p + "mlp.down_proj.weight", (D, F), so)]
    shapes.sort()
    es = 2 if a.dtype == "bf16" else 4
    header, off = {}, 0
    for name, shape, _ in shapes:
        n = int(np.prod(shape)) * es
        header[name] = {"dtype": "BF16" if es == 2 else "F32", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    header["__metadata__"] = {"format": "pt"}
    hb = json.dumps(header).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    os.makedirs(a.out, exist_ok=True)
    rng = np.random.default_rng(a.seed)
    with open(os.path.join(a.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, shape, std in shapes:
            x = np.ones(shape, np.float32) if std is None else rng.standard_normal(shape, np.float32) * std
            f.write((to_bf16(x) if es == 2 else x).tobytes())
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": H, "num_key_value_heads": K,
           "head_dim": Dh, "vocab_size": V, "max_position_embeddings": a.positions, "rms_norm_eps": 1e-5,
           "rope_theta": a.rope_theta, "hidden_act": "silu", "tie_word_embeddings": a.tie, "bos_token_id": a.bos,
           "eos_token_id": a.eos, "torch_dtype": "bfloat16" if es == 2 else "float32"}
    drop_from_page_cache(os.path.join(a.out, "model.safetensors"))
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    print(f"{a.out}: {sum(int(np.prod(s)) for _, s, _ in shapes) / 1e9:.2f}B parameters, {off / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
