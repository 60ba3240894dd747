#!/usr/bin/python3
"""function_length.py — lists the C functions longer than a number of lines.

Usage: function_length.py [--max N] [--fail] PATH...  (files or folders of .c files;
default N = 120). Prints "LINES FILE:LINE NAME", longest first. With --fail, exits 1
when it printed anything (ctest function_length runs it on src/analysis).
A function is counted from the line of its name to its closing brace in column 0, as
clang-format lays the tree out; a table-driven function (a long initializer, not a
long body) would be listed too and is judged by reading it.
"""
import os
import re
import sys

START = re.compile(r"^[A-Za-z_][\w\s\*]*?\b(\w+)\s*\(")


def functions(path):
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    i = 0
    while i < len(lines):
        m = START.match(lines[i])
        head = lines[i].split("(")[0]
        if m and not lines[i].rstrip().endswith(";") and "=" not in head and not head.startswith(("typedef", "struct", "#")):
            j = i
            while j < len(lines) and "{" not in lines[j] and not lines[j].rstrip().endswith(";"):
                j += 1
            if j < len(lines) and lines[j].rstrip().endswith("{"):
                k = j + 1
                while k < len(lines) and lines[k] != "}":
                    k += 1
                yield m.group(1), i + 1, k - i + 1
                i = k + 1
                continue
        i += 1


def main(argv):
    limit, fail, paths = 120, False, []
    it = iter(argv)
    for a in it:
        if a == "--max":
            limit = int(next(it))
        elif a == "--fail":
            fail = True
        else:
            paths.append(a)
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(os.path.join(d, f) for d, _, fs in os.walk(p) for f in fs if f.endswith(".c"))
        else:
            files.append(p)
    long = sorted(((n, f, line, name) for f in files for name, line, n in functions(f) if n > limit), reverse=True)
    for n, f, line, name in long:
        print(f"{n:5d} {f}:{line} {name}")
    return 1 if fail and long else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
