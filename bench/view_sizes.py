#!/usr/bin/python3
"""view_sizes.py — size and build time of the Python package's standalone view pages
(python/attnscope/views.py) for a BERT-base-shaped run (12 layers x 12 heads, random
weights: bench/make_checkpoint.py) at 128 and 512 tokens. The figures are in
python/README.md ("Sizes").
Usage: ATTNSCOPE_LIB=build/libattnscope.so /usr/bin/python3 bench/view_sizes.py [OUT_DIR]
(OUT_DIR: also save each head view page there, to time its drawing in a browser)."""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import attnscope  # noqa: E402

m = attnscope.load(os.path.join(HERE, "out", "bert-base-random"))
rng = np.random.default_rng(0)
out = sys.argv[1] if len(sys.argv) > 1 else None
for T in (128, 512):
    ids = [101] + [int(i) for i in rng.integers(1000, 30000, T - 2)] + [102]
    r = m.run_ids(ids, threads=2)
    for name, kw in (("head_view", {}), ("model_view", {}), ("head_view dtype=u8", {"dtype": "u8"}),
                     ("head_view layers=[0, 11]", {"layers": [0, 11]}),
                     ("neuron_view", {}), ("neuron_view layers=all", {"layers": range(12)})):
        f = getattr(attnscope, name.split()[0])
        t0 = time.time()
        page = f(r, html_action="return", **kw)
        print("T=%d %-24s %7.1f MB  built in %.2f s" % (T, name, len(page.encode()) / 1e6, time.time() - t0))
    if out:
        attnscope.head_view(r).save(os.path.join(out, "head%d.html" % T))
