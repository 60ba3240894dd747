#!/usr/bin/python3
"""notebook_compress.py — what deflate and smaller encodings would save on the attention a
notebook page embeds: one layer of attention [H, T, T] as float16, u8 (value = byte/255,
the page's dtype="u8") and u8 with a per-row scale (byte * row max / 255, with the row
maxima as float32), each raw and through zlib levels 1 and 6 (what DecompressionStream
('deflate') would undo in the page), with the time Python takes to compress, and the
largest error of each encoding over the whole run. Runs: the shipped models/attnscope-sst2
on a long review (128 tokens, its maximum) and the random BERT-base of bench/make_checkpoint.py
at 128 and 512 tokens. Measures; asserts nothing. Figures in bench/RESULTS.md ("Notebook views").

Usage: ATTNSCOPE_LIB=BUILD/libattnscope.so /usr/bin/python3 bench/notebook_compress.py
"""
import os
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import attnscope  # noqa: E402


def row_u8(a):
    """(bytes [.., T], row maxima [.., 1] float32): a as byte * max / 255 per row."""
    mx = a.max(-1, keepdims=True)
    mx[mx == 0] = 1
    return np.rint(a / mx * 255).astype("u1"), mx.astype("<f4")


def main():
    root = os.path.join(HERE, "..")
    runs = (("attnscope-sst2", os.path.join(root, "models", "attnscope-sst2"), None),
            ("bert-base-random", os.path.join(HERE, "out", "bert-base-random"), 128),
            ("bert-base-random", os.path.join(HERE, "out", "bert-base-random"), 512))
    for name, path, T in runs:
        m = attnscope.load(path)
        if T is None:
            text = " ".join(["the movie was good , but the ending felt rushed and i did not like it ."] * 30)
            r = m.run(text, capture="attn", threads=2)
        else:
            rng = np.random.default_rng(0)
            r = m.run_ids([101] + [int(i) for i in rng.integers(1000, 30000, T - 2)] + [102], capture="attn", threads=2)
        a = np.asarray(r.attentions)
        T = a.shape[2]
        u, mx = row_u8(a[0])
        for enc, b in (("f16", a[0].astype("<f2").tobytes()), ("u8", np.rint(np.clip(a[0], 0, 1) * 255).astype("u1").tobytes()),
                       ("u8 per-row scale", mx.tobytes() + u.tobytes())):
            for lev in (1, 6):
                t0 = time.perf_counter()
                z = zlib.compress(b, lev)
                dt = time.perf_counter() - t0
                print("%-16s T=%-4d layer 0 %-16s %6.2f MB, zlib-%d %6.2f MB: %.2fx (%4.0f ms)" % (
                    name, T, enc, len(b) / 1e6, lev, len(z) / 1e6, len(b) / len(z), 1e3 * dt))
        u, mx = row_u8(a)
        print("%-16s T=%-4d max abs error: f16 %.1e, u8 %.1e, u8 per-row scale %.1e; mean weight %.1e" % (
            name, T, np.abs(a.astype("<f2").astype("f4") - a).max(), np.abs(np.rint(np.clip(a, 0, 1) * 255) / 255 - a).max(),
            np.abs(u * (mx / 255) - a).max(), a.mean()))


if __name__ == "__main__":
    main()
