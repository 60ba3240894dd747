"""install_venv.py — installs the attnscope package into a virtual environment made from
Debian's Python, without PyPI: `make python` runs it.

    /usr/bin/python3 python/install_venv.py VENV --build BUILD [--kernel]

1. `python3 -m venv --system-site-packages VENV` (Debian's python3-venv): the environment
   sees Debian's numpy, ipykernel and nbclient and installs nothing from the network
   (--without-pip: nothing to fetch, nothing to bootstrap).
2. Copies python/attnscope into VENV's site-packages, and the built library
   (BUILD/libattnscope.so) and web front end (BUILD/web-dist) into attnscope/lib/, where
   the package looks first: the environment works without the build folder or
   PYTHONPATH, and `make python` again replaces it.
3. Writes attnscope-VERSION.dist-info (METADATA, INSTALLER, RECORD), so `pip list` shows
   the package and `pip uninstall attnscope` removes it.
4. With --kernel, registers the environment's Python as the Jupyter kernel "attnscope"
   for this user (ipykernel install --user), so any Jupyter offers "Python (attnscope)".

What it does not: build the library (make python builds first), download anything, or
touch files outside VENV (and, with --kernel, the user's Jupyter kernel folder).
Errors: one line naming what is missing, exit status 2.
"""
import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "attnscope")


def fail(msg):
    print("install_venv: %s" % msg, file=sys.stderr)
    sys.exit(2)


def version():
    m = re.search(r'^__version__ = "([^"]+)"', open(os.path.join(PKG, "__init__.py"), encoding="utf-8").read(), re.M)
    if not m:
        fail("%s: no __version__" % os.path.join(PKG, "__init__.py"))
    return m.group(1)


def site_packages(venv):
    """VENV's purelib folder, asked of VENV's own Python."""
    py = os.path.join(venv, "bin", "python")
    out = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail("%s does not run: %s" % (py, out.stderr.strip().splitlines()[-1:] or "?"))
    return out.stdout.strip()


def make_venv(venv):
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py):
        return
    r = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv],
                       capture_output=True, text=True)
    if r.returncode != 0:
        fail("python3 -m venv %s failed (is Debian's python3-venv installed?): %s"
             % (venv, (r.stderr.strip().splitlines() or ["?"])[-1]))


def check_build(build):
    """(library, web front end) of the build folder; fails naming the one missing."""
    lib = os.path.join(build, "libattnscope.so")
    web = os.path.join(build, "web-dist")
    if not os.path.isfile(lib):
        fail("%s not found: build first (make build, or cmake with -DAS_SHARED=ON)" % lib)
    if not os.path.isfile(os.path.join(web, "index.html")):
        fail("%s not found: the web front end is built with cmake -DAS_WEB=ON (the default)" % web)
    return lib, web


def copy_package(lib, web, site):
    dst = os.path.join(site, "attnscope")
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(PKG, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    os.makedirs(os.path.join(dst, "lib"))
    shutil.copy2(lib, os.path.join(dst, "lib", "libattnscope.so"))
    shutil.copytree(web, os.path.join(dst, "lib", "web-dist"))
    return dst


def record_line(site, path):
    data = open(path, "rb").read()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
    return "%s,sha256=%s,%d" % (os.path.relpath(path, site), digest, len(data))


def write_dist_info(site, pkg, ver):
    info = os.path.join(site, "attnscope-%s.dist-info" % ver)
    for old in os.listdir(site):
        if old.startswith("attnscope-") and old.endswith(".dist-info"):
            shutil.rmtree(os.path.join(site, old))
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as f:
        f.write("Metadata-Version: 2.1\nName: attnscope\nVersion: %s\n"
                "Summary: The attnscope engine from Python (ctypes over libattnscope.so) and its views in Jupyter\n"
                "Requires-Python: >=3.9\nRequires-Dist: numpy\n" % ver)
    with open(os.path.join(info, "INSTALLER"), "w", encoding="utf-8") as f:
        f.write("attnscope-install_venv\n")
    lines = []
    for d, _, files in os.walk(pkg):
        lines += [record_line(site, os.path.join(d, n)) for n in sorted(files)]
    lines += [record_line(site, os.path.join(info, n)) for n in ("METADATA", "INSTALLER")]
    lines.append("%s,," % os.path.relpath(os.path.join(info, "RECORD"), site))
    with open(os.path.join(info, "RECORD"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def install_kernel(venv):
    py = os.path.join(venv, "bin", "python")
    r = subprocess.run([py, "-m", "ipykernel", "install", "--user", "--name", "attnscope", "--display-name",
                        "Python (attnscope)"], capture_output=True, text=True)
    if r.returncode != 0:
        fail("registering the Jupyter kernel failed (is Debian's python3-ipykernel installed?): %s"
             % (r.stderr.strip().splitlines() or ["?"])[-1])
    print(r.stdout.strip())


def main():
    ap = argparse.ArgumentParser(description="Install attnscope into a virtual environment (no PyPI).")
    ap.add_argument("venv", help="the environment's folder (created when missing)")
    ap.add_argument("--build", required=True, help="the CMake build folder holding libattnscope.so and web-dist")
    ap.add_argument("--kernel", action="store_true", help="register the Jupyter kernel 'attnscope' for this user")
    a = ap.parse_args()
    venv, build = os.path.abspath(a.venv), os.path.abspath(a.build)
    if not os.path.isdir(build):
        fail("%s: no such build folder" % build)
    lib, web = check_build(build)
    make_venv(venv)
    site = site_packages(venv)
    pkg = copy_package(lib, web, site)
    write_dist_info(site, pkg, version())
    if a.kernel:
        install_kernel(venv)
    print("attnscope %s installed in %s (python: %s)" % (version(), venv, os.path.join(venv, "bin", "python")))


if __name__ == "__main__":
    main()
