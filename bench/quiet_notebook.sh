#!/bin/sh
# bench/quiet_notebook.sh — the notebook head view pages at 128 and 512 tokens
# (bench/notebook_bench.py, attnscope pages only) timed in Chromium, 5 rounds
# (bench/notebook_view.mjs). B = the build folder (libattnscope.so, web-dist).
cd "$(dirname "$0")/.."
B=${B:-./build}
rm -rf ${OUT:-bench/out/notebook_quiet} && mkdir -p ${OUT:-bench/out/notebook_quiet}
SKIP_BERTVIZ=1 ATTNSCOPE_LIB=$B/libattnscope.so ATTNSCOPE_WEB=$B/web-dist /usr/bin/python3 bench/notebook_bench.py ${OUT:-bench/out/notebook_quiet} 128 512
echo "== load $(cut -d' ' -f1 /proc/loadavg)"
ONLY='head(128|512)_f16|cell' node bench/notebook_view.mjs ${OUT:-bench/out/notebook_quiet} 5
