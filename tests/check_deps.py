#!/usr/bin/python3
"""check_deps.py — proves that `make deps` installed everything the tests use.

Run with Debian's /usr/bin/python3 right after `make deps` (`.ci/run` and `make test` do).
It does not install anything; it fails (exit 1) with one line per missing piece, naming
the Debian or npm package to add to the Makefile.

What it checks:
- every command in COMMANDS exists (the test scripts call them);
- every Python module imported by a test is importable with /usr/bin/python3: the
  imports are read (with the ast module) from tests/**/*.py and from the Python
  snippets embedded in the shell and C tests (`python3 -c '...'` strings and
  `<<'PY'` here-documents), so a new import in a test is checked without editing
  this file;
- the modules in PY_RUNTIME (needed without an import: the notebook test's kernel), and
  the project's own package python/attnscope, imported with python/ on the path;
- every bare npm package imported by the browser tests and the reference generators
  resolves from that folder's node_modules.

What it does not check: the fixture generators tests/ref/gen_*.py and bench/ need
python3-torch, which `make fixtures` and `make bench` install (not needed by tests).
"""
import ast
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# command -> Debian package that provides it
COMMANDS = {
    "cmake": "cmake", "cc": "build-essential", "make": "build-essential",
    "ctest": "cmake", "pkg-config": "pkg-config", "sqlite3": "sqlite3",
    "mpirun": "openmpi-bin", "chromium": "chromium", "node": "nodejs", "npm": "npm",
    "timeout": "coreutils", "mkfifo": "coreutils", "realpath": "coreutils",
    "flock": "util-linux",
    "/usr/bin/python3": "python3",
}
# Python module -> Debian package (for the message)
PY_PACKAGES = {"numpy": "python3-numpy", "torch": "python3-torch",
               "networkx": "python3-networkx", "sentencepiece": "python3-sentencepiece",
               "nbformat": "python3-nbformat", "nbclient": "python3-nbclient",
               "ipykernel": "python3-ipykernel", "jupyter_client": "python3-jupyter-client",
               "pip": "python3-pip", "ensurepip": "python3-venv", "nbconvert": "python3-nbconvert"}
# modules a test needs without importing them: the kernel tests/python/test_notebook.py starts
PY_RUNTIME = {"ipykernel": "tests/python/test_notebook.py", "pip": "tests/python/test_venv.py",
              "ensurepip": "tests/python/test_venv.py", "nbconvert": "tests/browser/notebook.test.mjs",
              "nbclient": "tests/browser/notebook.test.mjs"}
# the project's own package (python/attnscope): importable with python/ on the path
PY_LOCAL_PATH = os.path.join(ROOT, "python")
# generators and references that `make fixtures` / `make bench` run, not the tests
PY_EXCLUDE_DIRS = ("tests/ref",)
NODE_DIRS = ("tests/browser", "tests/ref")

SNIPPET_C = re.compile(r"""python3?\s+-c\s+(['"])(.*?)(?<!\\)\1""", re.S)
HEREDOC = re.compile(r"<<-?\s*'?(PY|PYTHON|EOF)'?\s*\n(.*?)\n\s*\1\s*$", re.S | re.M)
NODE_IMPORT = re.compile(r"""(?:^|\n)\s*import\s[^'"]*?from\s+['"]([^'"./][^'"]*)['"]"""
                         r"""|require\(\s*['"]([^'"./][^'"]*)['"]\s*\)""")


def modules_of(code):
    """Top-level module names imported by a Python source (empty if it does not parse)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_files(exts):
    for base, dirs, files in os.walk(os.path.join(ROOT, "tests")):
        dirs[:] = [d for d in dirs if d not in ("node_modules", "fixtures", "__pycache__")]
        rel = os.path.relpath(base, ROOT)
        for f in files:
            if f.endswith(exts):
                yield rel, os.path.join(base, f)


def python_imports():
    """{module: first test file that imports it}, local test modules excluded."""
    found, local = {}, set()
    for rel, path in test_files((".py", ".sh", ".c", ".h")):
        local.add(os.path.splitext(os.path.basename(path))[0])
        if rel.startswith(PY_EXCLUDE_DIRS):
            continue
        text = open(path, encoding="utf-8", errors="replace").read()
        if path.endswith(".py"):
            chunks = [text]
        else:
            chunks = [m.group(2).replace("\\n", "\n") for m in SNIPPET_C.finditer(text)]
            chunks += [m.group(2) for m in HEREDOC.finditer(text)]
        for chunk in chunks:
            for mod in modules_of(chunk):
                found.setdefault(mod, os.path.relpath(path, ROOT))
    return {m: f for m, f in found.items() if m not in local}


def main():
    problems = []
    for cmd, pkg in COMMANDS.items():
        if not (os.access(cmd, os.X_OK) if cmd.startswith("/") else shutil.which(cmd)):
            problems.append(f"command '{cmd}' not found (Debian package {pkg})")

    mods = python_imports()
    for mod, by in PY_RUNTIME.items():
        mods.setdefault(mod, by)
    env = dict(os.environ, PYTHONPATH=PY_LOCAL_PATH)
    for mod in sorted(mods):
        r = subprocess.run(["/usr/bin/python3", "-c", f"import {mod}"],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0:
            pkg = PY_PACKAGES.get(mod, "python3-" + mod.lower())
            problems.append(f"Python module '{mod}' (imported by {mods[mod]}) is not importable "
                            f"with /usr/bin/python3 (Debian package {pkg})")

    n_node = 0
    for d in NODE_DIRS:
        base = os.path.join(ROOT, d)
        for f in sorted(os.listdir(base)):
            if not f.endswith((".mjs", ".js")):
                continue
            text = open(os.path.join(base, f), encoding="utf-8").read()
            for m in NODE_IMPORT.finditer(text):
                spec = m.group(1) or m.group(2)
                if spec.startswith("node:"):
                    continue
                parts = spec.split("/")
                pkg = "/".join(parts[:2]) if spec.startswith("@") else parts[0]
                n_node += 1
                if not os.path.isfile(os.path.join(base, "node_modules", pkg, "package.json")):
                    problems.append(f"npm package '{pkg}' (imported by {d}/{f}) is not installed "
                                    f"in {d}/node_modules (add it to {d}/package.json; "
                                    f"the Makefile's node-deps runs npm ci there)")

    for p in problems:
        print("check_deps: " + p)
    if problems:
        print(f"check_deps: {len(problems)} missing; `make deps node-deps` must install them")
        return 1
    print(f"check_deps: ok ({len(COMMANDS)} commands, {len(mods)} Python modules: "
          f"{', '.join(sorted(mods))}; {n_node} npm imports)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
