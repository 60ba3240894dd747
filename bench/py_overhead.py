#!/usr/bin/python3
"""py_overhead.py — what the Python package adds to a forward: Model.run(text) (tokenize,
forward, the Result with a numpy view per captured array, freeing) against the same C
calls made bare through ctypes in the same process (as_encode, as_forward, as_run_free,
as_encoding_free: the engine's own time), interleaved, on the shipped model
(models/attnscope-sst2, 4 layers x 4 heads) at a short and a 128-token input, capturing
"all" (one view per array) and "attn" (one array). The overhead is the difference of
the medians. Measures; asserts nothing. Figures in bench/RESULTS.md ("Python package").

Usage: ATTNSCOPE_LIB=BUILD/libattnscope.so /usr/bin/python3 bench/py_overhead.py [ROUNDS]
"""
import ctypes
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import attnscope  # noqa: E402
from attnscope import _lib, core  # noqa: E402


def bare(m, text, what):
    """The C calls of one run, through ctypes, nothing else."""
    lib = _lib.lib()
    enc, err = _lib.new(_lib.Encoding), _lib.new(_lib.Error)
    opts = _lib.new(_lib.EncodeOpts, max_len=0, truncate=1)
    spec = _lib.new(_lib.CaptureSpec, what=what, layer=-1, head=-1, threads=1, ablate=0)
    run = ctypes.c_void_p()
    t0 = time.perf_counter()
    assert lib.as_encode(m._ptr, text.encode(), None, ctypes.byref(opts), ctypes.byref(enc), ctypes.byref(err)) == 0
    assert lib.as_forward(m._ptr, ctypes.byref(enc), ctypes.byref(spec), ctypes.byref(run), ctypes.byref(err)) == 0
    lib.as_run_free(run)
    lib.as_encoding_free(ctypes.byref(enc))
    return time.perf_counter() - t0


def package(m, text, capture):
    t0 = time.perf_counter()
    r = m.run(text, capture=capture, threads=1)
    n = sum(getattr(r, k) is not None for k in r._names)
    del r
    return time.perf_counter() - t0, n


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    attnscope.set_quiet(True)
    m = attnscope.load(os.path.join(HERE, "..", "models", "attnscope-sst2"))
    texts = {"short": "the movie was good .",
             "128 tokens": " ".join(["the movie was surprisingly good , and i would watch it again ."] * 9)}
    print("load average: %.1f %.1f %.1f" % os.getloadavg())
    for label, text in texts.items():
        T = len(m.tokenize(text))
        for capture in ("all", "attn"):
            what = core._parse_capture(capture)
            cs, ps, n = [], [], 0
            for _ in range(10):  # warm up both paths
                bare(m, text, what)
                package(m, text, capture)
            for _ in range(rounds):
                cs.append(bare(m, text, what))
                p, n = package(m, text, capture)
                ps.append(p)
            c, p = statistics.median(cs), statistics.median(ps)
            print("%-10s T=%-3d capture=%-4s arrays=%-2d C calls %7.3f ms  Model.run %7.3f ms  overhead %6.3f ms "
                  "(%.1f us per array)  ratio %.3f" % (label, T, capture, n, c * 1e3, p * 1e3, (p - c) * 1e3,
                                                      (p - c) * 1e6 / max(n, 1), p / c))


if __name__ == "__main__":
    main()
