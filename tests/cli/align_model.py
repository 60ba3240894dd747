#!/usr/bin/python3
"""align_model.py OUT — a random encoder-decoder model with a byte-level tokenizer for the
alignment tests (test_align.sh, test_align_analyze.sh): bart_tiny of tests/ref/gen_encdec.py
(2 encoder and 3 decoder layers, 3 heads, width 24) with its embeddings grown to 260 tokens
and 160 positions (rows added with a fixed seed) and a byte-level BPE tokenizer.json of the
4 specials and the 256 byte symbols, no merges: every byte is a piece, so every word of more
than one letter has several pieces, a multi-byte UTF-8 letter two, and the space before a
word is a piece of its own. Random weights: its alignments mean nothing. NumPy only."""
import json
import os
import shutil
import struct
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "tests", "ref", "fixtures", "models", "bart_tiny")
V, POS = 260, 160


def read_st(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    out = {}
    for k, v in h.items():
        if k == "__metadata__":
            continue
        o = v["data_offsets"]
        out[k] = np.frombuffer(b[8 + n + o[0]:8 + n + o[1]], np.float32).reshape(v["shape"]).copy()
    return out


def write_st(path, t):
    hdr, off, blobs = {}, 0, []
    for k in sorted(t):
        a = np.ascontiguousarray(t[k], np.float32)
        hdr[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        blobs.append(a.tobytes())
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(11)
    t = read_st(os.path.join(SRC, "model.safetensors"))
    grow = {"model.shared.weight": (V, 0), "final_logits_bias": (V, 1),
            "model.encoder.embed_positions.weight": (POS + 2, 0), "model.decoder.embed_positions.weight": (POS + 2, 0)}
    for k, (n, axis) in grow.items():
        a = t[k]
        shape = list(a.shape)
        shape[axis] = n - a.shape[axis]
        t[k] = np.concatenate([a, (rng.standard_normal(shape) * a.std()).astype(np.float32)], axis=axis)
    write_st(os.path.join(out, "model.safetensors"), t)
    cfg = json.load(open(os.path.join(SRC, "config.json")))
    cfg.update(vocab_size=V, max_position_embeddings=POS)
    json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=1)
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    vocab = {c: i for i, c in enumerate(specials)}
    for b, c in sorted(bytes_to_unicode().items()):
        vocab[c] = 4 + b
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for i, c in enumerate(specials)]
    json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                 "use_regex": True},
               "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                                  "trim_offsets": True, "add_prefix_space": False},
               "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
               "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                         "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                         "merges": []}},
              open(os.path.join(out, "tokenizer.json"), "w"))


if __name__ == "__main__":
    main()
