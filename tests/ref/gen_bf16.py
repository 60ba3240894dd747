#!/usr/bin/python3
"""gen_bf16.py — the reference of models/to_bf16.py's rounding: float32 values (seeded
normals at several scales, halfway cases that round to even up and down, the largest
finite values that round to infinity, subnormals, +-0, +-inf, NaN) and PyTorch's
.to(torch.bfloat16) of each, as raw bits. Writes tests/ref/fixtures/bf16/bf16.npz
(arrays x: float32, bits: uint16). Run with Debian's /usr/bin/python3 + python3-torch.
"""
import os

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "bf16", "bf16.npz")


def main():
    rng = np.random.default_rng(7)
    parts = [rng.standard_normal(400) * s for s in (1e-3, 1.0, 50.0, 1e6)]
    u = lambda v: np.array(v, dtype=np.uint32).view(np.float32)
    halfway = [0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000, 0x3F807FFF, 0x3F808001]  # ties to even / not ties
    edge = [0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F8000, 0x00000001, 0x00008000, 0x80000001, 0x00400000]  # max, subnormals
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], dtype=np.float32)
    x = np.concatenate([p.astype(np.float32) for p in parts] + [u(halfway), u(edge), special]).astype(np.float32)
    bits = torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    np.savez(OUT, x=x, bits=bits)
    print(f"wrote {OUT}: {x.size} values")


if __name__ == "__main__":
    main()
