#!/usr/bin/python3
"""to_bf16.py — copies a Hugging Face model folder written by `attnscope train-lm` (F32
model.safetensors, config.json, tokenizer.json, tokenizer_config.json) to OUT with the
floating-point tensors in BF16 (round to nearest even; F32 NaN stays NaN) and config.json's
torch_dtype "bfloat16". Tensor names, shapes and order are kept; the safetensors header
keeps the input's __metadata__. numpy only (no torch needed).

Usage: /usr/bin/python3 models/to_bf16.py IN_DIR OUT_DIR
What it does not: other dtypes than F32 / BF16 / F16 (refused), sharded checkpoints.
"""
import json
import os
import shutil
import struct
import sys

import numpy as np

MAX_HEADER = 100 << 20  # a safetensors header larger than this is refused


def to_bf16(a):
    """float32 -> bf16 bits, round to nearest even (NaN kept quiet)."""
    u = a.astype(np.float32).view(np.uint32)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def convert(src, dst):
    with open(src, "rb") as f:
        data = f.read()
    if len(data) < 8:
        sys.exit(f"{src}: not a safetensors file (too short)")
    n = struct.unpack("<Q", data[:8])[0]
    if n > MAX_HEADER or 8 + n > len(data):
        sys.exit(f"{src}: header of {n} bytes does not fit the file")
    head = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out_head, chunks, off = {}, [], 0
    if "__metadata__" in head:
        out_head["__metadata__"] = head.pop("__metadata__")
    for name, t in head.items():
        a, b = t["data_offsets"]
        if not 0 <= a <= b <= len(body):
            sys.exit(f"{src}: tensor {name}: data offsets {a}..{b} outside the file")
        raw = body[a:b]
        if t["dtype"] == "F32":
            raw = to_bf16(np.frombuffer(raw, dtype="<f4")).astype("<u2").tobytes()
            dtype = "BF16"
        elif t["dtype"] in ("BF16", "F16"):
            dtype = t["dtype"]
        else:
            sys.exit(f"{src}: tensor {name}: dtype {t['dtype']} is not converted")
        out_head[name] = {"dtype": dtype, "shape": t["shape"], "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(out_head, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for c in chunks:
            f.write(c)


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-3])
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    convert(os.path.join(src, "model.safetensors"), os.path.join(dst, "model.safetensors"))
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    cfg["torch_dtype"] = "bfloat16"
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(src, name), os.path.join(dst, name))


if __name__ == "__main__":
    main()
