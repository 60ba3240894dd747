"""configs.py — the PyTorch thread configurations every benchmark driver searches
(bench/forward_bench.py, bench/analysis_bench.sh, bench/train_bench.sh), and the
environment of the process that runs each one.

A configuration is (threads, interop, openblas, wait, malloc):
  threads   torch.set_num_threads: 1 or 2 (torch's own OpenMP pool)
  interop   torch.set_num_interop_threads: 1 or 2
  openblas  OPENBLAS_NUM_THREADS: "1", or "unset" (OpenBLAS's default, one thread per
            core; Debian's torch calls the system OpenBLAS, whose pthread pool
            set_num_threads does not limit)
  wait      OMP_WAIT_POLICY: PASSIVE or ACTIVE
  malloc    "default", or "hugetlb": GLIBC_TUNABLES=glibc.malloc.hugetlb=1 (glibc >= 2.35
            marks malloc's large blocks for transparent huge pages, which this torch's
            allocator does not ask for itself; on a KVM guest, where a TLB miss walks two
            page tables, BERT-base training runs up to 1.6x faster with it)
A label is "t1/i1/ob1/P", with "/H" appended for malloc "hugetlb".
OPENBLAS_CORETYPE is removed from every environment (OpenBLAS picks its kernels for the
CPU it detects) and OMP_NUM_THREADS too (set_num_threads decides).
A configuration uses one core when threads == 1 and openblas == "1".
Also the drivers' shared helpers: sh, num, drop_from_page_cache.
"""
import itertools
import os

THREADS = (1, 2)
INTEROP = (1, 2)
OPENBLAS = ("1", "unset")
WAIT = ("PASSIVE", "ACTIVE")
MALLOC = ("default", "hugetlb")
HUGETLB = "glibc.malloc.hugetlb=1"


def grid():
    """Every configuration, as dicts, in a fixed order."""
    for malloc, ob, wait, interop, n in itertools.product(MALLOC, OPENBLAS, WAIT, INTEROP, THREADS):
        yield {"threads": n, "interop": interop, "openblas": ob, "wait": wait, "malloc": malloc}


def one_core(cfg):
    return cfg["threads"] == 1 and cfg["openblas"] == "1"


def label(cfg):
    return "t%d/i%d/ob%s/%s%s" % (cfg["threads"], cfg["interop"], cfg["openblas"], cfg["wait"][0],
                                  "/H" if cfg.get("malloc") == "hugetlb" else "")


def parse_label(s):
    t, i, ob, w, *h = s.split("/")
    return {"threads": int(t[1:]), "interop": int(i[1:]), "openblas": ob[2:],
            "wait": "PASSIVE" if w == "P" else "ACTIVE", "malloc": "hugetlb" if h == ["H"] else "default"}


def env(cfg):
    """The environment of a process that runs cfg (torch threads are set in-process)."""
    e = dict(os.environ)
    for k in ("OPENBLAS_CORETYPE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "GLIBC_TUNABLES"):
        e.pop(k, None)
    if cfg.get("malloc") == "hugetlb":
        e["GLIBC_TUNABLES"] = HUGETLB
    if cfg["openblas"] != "unset":
        e["OPENBLAS_NUM_THREADS"] = cfg["openblas"]
    e["OMP_WAIT_POLICY"] = cfg["wait"]
    return e


def process_groups():
    """The configurations grouped by process environment + interop (both fixed per
    process); each group lists the torch thread counts one process times in turn."""
    groups = {}
    for cfg in grid():
        key = (cfg["openblas"], cfg["wait"], cfg["interop"], cfg["malloc"])
        groups.setdefault(key, []).append(cfg["threads"])
    for (ob, wait, interop, malloc), ns in groups.items():
        yield {"openblas": ob, "wait": wait, "interop": interop, "malloc": malloc}, ns


def sh(cmd, env=None):
    """stdout of cmd; exits naming the calling script, the command and its stderr when it fails."""
    import subprocess
    import sys
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode:
        sys.exit("%s: %s failed (%d):\n%s" % (os.path.basename(sys.argv[0]).rsplit(".", 1)[0], " ".join(cmd),
                                               r.returncode, r.stderr))
    return r.stdout


def num(line, key):
    """The number after `key ` in a line of `attnscope bench` output (a trailing % dropped); nan when absent."""
    import re
    m = re.search(r"\b%s (\S+)" % key, line)
    return float(m.group(1).rstrip("%")) if m else float("nan")


def drop_from_page_cache(path):
    """Writes path's dirty pages and drops its pages from the page cache (those no process
    maps), so that the next reader takes the file from disk, as a checkpoint is read on
    first use: the kernel then caches it in 2 MiB folios, where pages cached by a writer
    or by read() stay 4 KiB ones (a 1B model's prefill from those is 7-13% slower)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
