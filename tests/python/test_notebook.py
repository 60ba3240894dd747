#!/usr/bin/python3
"""test_notebook.py — the example notebook python/examples/views.ipynb executed headless:
nbclient starts an ipykernel (Debian's python3-ipykernel, run by /usr/bin/python3 through
a kernel spec of its own) and runs its cells, which load a model, run a sentence pair and
show attnscope.head_view, model_view, neuron_view and the bertviz drop-in's head_view.
Each view's HTML output must hold the inlined web bundle (the exact script of
<build>/web-dist) and the embedded run, and no reference to another origin (no http(s)://
or // src/href).

Usage: ATTNSCOPE_LIB=build/libattnscope.so /usr/bin/python3 tests/python/test_notebook.py
"""
import html
import json
import os
import re
import sys
import tempfile
import unittest

import nbformat
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
from attnscope import views  # noqa: E402

NOTEBOOK = os.path.join(ROOT, "python", "examples", "views.ipynb")
EXTERNAL = re.compile(r"<(script|link|img|iframe)\b[^>]*\b(src|href)\s*=\s*[\"']?(https?:)?//", re.I)


class TestNotebook(unittest.TestCase):
    def test_views_in_a_kernel(self):
        nb = nbformat.read(NOTEBOOK, as_version=4)
        self.assertTrue(all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"),
                        "the example notebook is committed without outputs")
        with tempfile.TemporaryDirectory() as d:
            # the kernel is Debian's /usr/bin/python3 (ipykernel), whatever kernels the user has
            spec = os.path.join(d, "kernels", "attnscope-test")
            os.makedirs(spec)
            with open(os.path.join(spec, "kernel.json"), "w") as f:
                json.dump({"argv": ["/usr/bin/python3", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                           "display_name": "attnscope test", "language": "python"}, f)
            os.environ["JUPYTER_PATH"] = d
            NotebookClient(nb, timeout=300, kernel_name="attnscope-test",
                           resources={"metadata": {"path": os.path.dirname(NOTEBOOK)}}).execute()
        nb.cells = [c for c in nb.cells if c.cell_type == "code"]
        for c in nb.cells:
            errs = [o for o in c.outputs if o.output_type == "error"]
            self.assertEqual(errs, [], "cell failed: %s" % c.source)
        self.assertEqual(nb.cells[1].outputs[0]["data"]["text/plain"], "(4, 4, 12, 12)")
        js, css = views.web_bundle()
        for c in nb.cells[2:]:  # the views: head, model, neuron, bertviz's head view
            with self.subTest(cell=c.source):
                out = [o for o in c.outputs if "text/html" in o.get("data", {})]
                self.assertEqual(len(out), 1, "one HTML output")
                frame = out[0]["data"]["text/html"]
                # the frame holds the bundle; the run's elements are beside it, in the notebook's document
                self.assertTrue(frame.startswith('<div class="attnscope-cell" id="attnscope-'))
                self.assertIsNone(EXTERNAL.search(frame))
                page = html.unescape(re.search(r'<iframe srcdoc="([^"]*)"', frame).group(1))
                self.assertIn(js, page, "the inlined bundle")
                self.assertIn(css, page)
                key = re.match(r'<div class="attnscope-cell" id="([^"]+)"', frame).group(1)
                self.assertIn('<meta name="attnscope-data-from" content="%s">' % key, page)
                self.assertRegex(frame, r'<script id="attnscope-data" type="application/octet-stream">'
                                        r'[A-Za-z0-9+/=]{100,}</script>')
                self.assertIsNone(EXTERNAL.search(page), "a reference to another origin")
                self.assertNotRegex(page, r"<script[^>]*\ssrc=|<link[^>]*\shref=", "a script or style not inlined")


if __name__ == "__main__":
    unittest.main(verbosity=2)
