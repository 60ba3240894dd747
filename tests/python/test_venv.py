#!/usr/bin/python3
"""test_venv.py — `make python`'s installer (python/install_venv.py) into a fresh virtual
environment, then the package used from that environment alone: no PYTHONPATH, no
ATTNSCOPE_LIB / ATTNSCOPE_WEB, run from another folder. Checks that attnscope is imported
from the environment's site-packages with its own copy of libattnscope.so and of the web
front end; that a run of the shipped model equals `attnscope run --format npz` bit for
bit; that pip (Debian's, through the system site-packages) lists the package; that a
notebook cell runs in a kernel of the environment's Python (nbclient, Debian's
ipykernel) and shows a head view; that a second install replaces the first and --kernel
registers the environment's Python as the Jupyter kernel "attnscope"; and that the
installer refuses a build folder without the library with one line and exit status 2.

Usage: ATTNSCOPE_BIN=build/attnscope ATTNSCOPE_LIB=build/libattnscope.so \
       ATTNSCOPE_WEB=build/web-dist /usr/bin/python3 tests/python/test_venv.py
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("ATTNSCOPE_BIN", os.path.join(ROOT, "build", "attnscope"))
LIB = os.environ.get("ATTNSCOPE_LIB", os.path.join(ROOT, "build", "libattnscope.so"))
BUILD = os.path.dirname(os.path.abspath(LIB))
INSTALL = os.path.join(ROOT, "python", "install_venv.py")
SST2 = os.path.join(ROOT, "models", "attnscope-sst2")
TEXT, TEXT_B = "the movie was surprisingly good .", "i would watch it again ."

# what the environment's Python runs: the package from the environment, a run saved as npz
PROBE = r"""
import json, os, sys
import attnscope
m = attnscope.load(sys.argv[1])
r = m.run(sys.argv[2], text_b=sys.argv[3])
r.save_npz(os.path.join(sys.argv[4], "py.npz"))
from attnscope import views
json.dump({"file": attnscope.__file__, "lib": attnscope.library_path(), "web": views.find_web_dist(),
           "prefix": sys.prefix, "shape": list(r.attentions.shape)}, open(os.path.join(sys.argv[4], "where.json"), "w"))
"""


def clean_env():
    """The environment of a notebook user: none of the build's variables."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNSCOPE_LIB", "ATTNSCOPE_WEB", "PYTHONPATH")}
    env.update(OMP_NUM_THREADS="2", PYDEVD_DISABLE_FILE_VALIDATION="1")
    return env


class TestVenv(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.venv = os.path.join(cls.tmp.name, "venv")
        cls.py = os.path.join(cls.venv, "bin", "python")
        cls.install = subprocess.run(["/usr/bin/python3", INSTALL, cls.venv, "--build", BUILD],
                                     capture_output=True, text=True, timeout=300)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def venv_run(self, *args, **kw):
        return subprocess.run([self.py, *args], capture_output=True, text=True, timeout=600, env=clean_env(),
                              cwd=self.tmp.name, **kw)

    def test_1_installed_package_runs_a_model(self):
        self.assertEqual(self.install.returncode, 0, self.install.stderr)
        self.assertIn("attnscope", self.install.stdout)
        out = os.path.join(self.tmp.name, "out")
        os.makedirs(out, exist_ok=True)
        p = self.venv_run("-c", PROBE, SST2, TEXT, TEXT_B, out)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(out, "where.json")) as f:
            where = json.load(f)
        site = os.path.realpath(self.venv)
        for k in ("file", "lib", "web"):
            self.assertTrue(os.path.realpath(where[k]).startswith(site + os.sep), "%s %s is not in the venv" % (k, where[k]))
        self.assertEqual(os.path.realpath(where["prefix"]), site)
        self.assertEqual(where["shape"][:2], [4, 4])
        ref = os.path.join(out, "cli.npz")
        c = subprocess.run([BIN, "run", "--model", SST2, "--text", TEXT, "--text-b", TEXT_B, "--format", "npz",
                            "--out", ref, "--quiet"], capture_output=True, text=True, timeout=300)
        self.assertEqual(c.returncode, 0, c.stderr)
        with np.load(ref) as a, np.load(os.path.join(out, "py.npz")) as b:
            self.assertEqual(sorted(a.files), sorted(b.files))
            for k in a.files:
                self.assertTrue(np.array_equal(a[k], b[k]), "%s differs from the CLI's" % k)
            self.assertEqual(list(a["attentions"].shape), where["shape"])

    def test_2_pip_lists_it(self):
        p = self.venv_run("-m", "pip", "show", "attnscope")
        if p.returncode != 0 and "No module named pip" in p.stderr:
            self.skipTest("SKIPPED: Debian's python3-pip is not installed")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("Name: attnscope", p.stdout)
        self.assertIn("Location: " + os.path.dirname(os.path.dirname(where_pkg(self))), p.stdout)

    def test_3_notebook_kernel_of_the_venv(self):
        import nbformat
        from nbclient import NotebookClient
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell("import sys, attnscope\nprint(sys.prefix)"),
                    nbformat.v4.new_code_cell("m = attnscope.load(%r)\nr = m.run(%r)\nattnscope.head_view(r, layer=1)"
                                              % (SST2, TEXT))]
        with tempfile.TemporaryDirectory() as d:
            spec = os.path.join(d, "kernels", "venv-test")
            os.makedirs(spec)
            with open(os.path.join(spec, "kernel.json"), "w") as f:
                json.dump({"argv": [self.py, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                           "display_name": "venv test", "language": "python"}, f)
            env = clean_env()
            env["JUPYTER_PATH"] = d
            old = dict(os.environ)
            os.environ.clear()
            os.environ.update(env)
            try:
                NotebookClient(nb, timeout=300, kernel_name="venv-test",
                               resources={"metadata": {"path": self.tmp.name}}).execute()
            finally:
                os.environ.clear()
                os.environ.update(old)
        out0 = "".join(o.get("text", "") for o in nb.cells[0].outputs)
        self.assertEqual(os.path.realpath(out0.strip()), os.path.realpath(self.venv))
        html = [o["data"]["text/html"] for o in nb.cells[1].outputs if "text/html" in o.get("data", {})]
        self.assertEqual(len(html), 1, nb.cells[1].outputs)
        self.assertTrue(html[0].startswith('<div class="attnscope-cell" id="attnscope-'))
        self.assertIn("attnscope-data", html[0])

    def test_4_reinstall_kernel_and_bad_build(self):
        home = os.path.join(self.tmp.name, "home")  # --kernel registers for this user: a home of the test's own
        env = dict(clean_env(), HOME=home)
        env.pop("JUPYTER_DATA_DIR", None)
        p = subprocess.run(["/usr/bin/python3", INSTALL, self.venv, "--build", BUILD, "--kernel"], capture_output=True,
                           text=True, timeout=300, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(os.path.join(home, ".local", "share", "jupyter", "kernels", "attnscope", "kernel.json")) as f:
            spec = json.load(f)
        self.assertEqual((spec["argv"][0], spec["display_name"]), (self.py, "Python (attnscope)"))
        infos = [n for n in os.listdir(os.path.dirname(where_pkg(self))) if n.startswith("attnscope-")]
        self.assertEqual(len(infos), 1, infos)
        with tempfile.TemporaryDirectory() as empty:
            p = subprocess.run(["/usr/bin/python3", INSTALL, os.path.join(empty, "v"), "--build", empty],
                               capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("libattnscope.so not found", p.stderr)


def where_pkg(t):
    """The installed package's folder in t's environment."""
    p = t.venv_run("-c", "import attnscope, os; print(os.path.dirname(attnscope.__file__))")
    t.assertEqual(p.returncode, 0, p.stderr)
    return p.stdout.strip()


if __name__ == "__main__":
    unittest.main(verbosity=2)
