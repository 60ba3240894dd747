#!/usr/bin/python3
"""notebook_bench.py — the notebook head view of a BERT-base-shaped run (12 layers x 12
heads, random weights: bench/make_checkpoint.py into bench/out/bert-base-random) at 128
and 512 tokens, beside bertviz's way of carrying the same attention. Measures; asserts
nothing. Figures in bench/RESULTS.md ("Notebook views").

- attnscope: attnscope.head_view(r, html_action="return") (python/attnscope/views.py): the
  web bundle and the run inlined, attention as float16 (default), u8, u8row (bytes scaled
  per query row), or two layers, in base64. Size of the page and the time to build it.
- bertviz's approach: bertviz.head_view builds params = {"attention": [{"name": None,
  "attn": attention.tolist(), "left_text": tokens, "right_text": tokens}], ...} and puts
  json.dumps(params) into its JavaScript (nested JSON lists of every float). This writes
  exactly that JSON for the same float32 attention (one layer at a time, joined as
  json.dumps joins them) and times building it. bertviz's page itself needs require.js and
  d3 from a CDN, so it cannot be drawn offline; OUT_DIR/bertviz{T}.html holds only the
  JSON literal in a <script>, which bench/notebook_view.mjs times the browser parsing
  (a lower bound of bertviz's render).

Usage: ATTNSCOPE_LIB=BUILD/libattnscope.so ATTNSCOPE_WEB=BUILD/web-dist \\
       /usr/bin/python3 bench/notebook_bench.py OUT_DIR [T ...]
then:  node bench/notebook_view.mjs OUT_DIR
SKIP_BERTVIZ=1 writes the attnscope pages only.
"""
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import attnscope  # noqa: E402


def bertviz_json(att, tokens, path):
    """Writes json.dumps(params) of bertviz's head_view for att [L, H, T, T] to path, one
    layer at a time; returns its size in bytes. Same bytes as json.dumps of the whole."""
    head = json.dumps({"attention": [{"name": None, "attn": "@", "left_text": tokens, "right_text": tokens}],
                       "default_filter": "0", "root_div_id": "bertviz-0", "layer": None, "heads": None,
                       "include_layers": list(range(att.shape[0]))})
    pre, post = head.split('"@"')
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        f.write("<!doctype html><html><body><script>\nwindow.__t0 = performance.now();\nconst params = ")
        f.write(pre)
        n += len(pre.encode())
        f.write("[")
        for l in range(att.shape[0]):
            s = (", " if l else "") + json.dumps(att[l].tolist())
            f.write(s)
            n += len(s.encode())
        f.write("]" + post)
        n += 1 + 1 + len(post.encode())
        f.write(";\nwindow.__parsed = { ms: performance.now() - window.__t0, layers: params.attention[0].attn.length };"
                "\n</script></body></html>\n")
    return n


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: notebook_bench.py OUT_DIR [T ...]")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    sizes = [int(t) for t in sys.argv[2:]] or [128, 512]
    m = attnscope.load(os.path.join(HERE, "out", "bert-base-random"))
    rng = np.random.default_rng(0)
    js, css = attnscope.views.web_bundle()
    print("bundle (script + style inlined): %.1f kB" % ((len(js) + len(css)) / 1e3))
    rows = []
    for T in sizes:
        ids = [101] + [int(i) for i in rng.integers(1000, 30000, T - 2)] + [102]
        r = m.run_ids(ids, capture="attn", threads=2)
        toks = [t["piece"] for t in r.tokens]
        for name, kw in (("f16", {}), ("u8", {"dtype": "u8"}), ("u8row", {"dtype": "u8row"}),
                         ("layers=[0, 11]", {"layers": [0, 11]})):
            t0 = time.perf_counter()
            page = attnscope.head_view(r, html_action="return", **kw)
            dt = time.perf_counter() - t0
            fn = "head%d_%s.html" % (T, name.split("=")[0].replace(" ", ""))
            with open(os.path.join(out, fn), "w", encoding="utf-8") as f:
                f.write(page)
            rows.append((T, "attnscope head_view " + name, len(page.encode()), dt, fn))
            if name == "f16":  # the notebook cell's output (View._repr_html_) in a page, as a notebook shows it
                t0 = time.perf_counter()
                cell = "<!doctype html><html><body>\n%s\n</body></html>\n" % attnscope.head_view(r)._repr_html_()
                dt = time.perf_counter() - t0
                with open(os.path.join(out, "cell%d_f16.html" % T), "w", encoding="utf-8") as f:
                    f.write(cell)
                rows.append((T, "notebook cell (View._repr_html_) f16", len(cell.encode()), dt, "cell%d_f16.html" % T))
        if os.environ.get("SKIP_BERTVIZ"):
            del r
            continue
        t0 = time.perf_counter()
        n = bertviz_json(np.asarray(r.attentions), toks, os.path.join(out, "bertviz%d.html" % T))
        rows.append((T, "bertviz JSON (nested lists)", n, time.perf_counter() - t0, "bertviz%d.html" % T))
        del r
    for T, name, n, dt, fn in rows:
        print("T=%-4d %-32s %9.1f MB  built in %6.2f s  %s" % (T, name, n / 1e6, dt, fn))
    with open(os.path.join(out, "sizes.json"), "w") as f:
        json.dump([{"T": T, "what": name, "bytes": n, "build_s": dt, "file": fn} for T, name, n, dt, fn in rows], f,
                  indent=1)


if __name__ == "__main__":
    main()
