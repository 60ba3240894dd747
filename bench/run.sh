#!/usr/bin/env bash
# bench/run.sh — attnscope vs the PyTorch reference, same machine, same run:
# one BERT-base forward with full attention capture at 128 and 512 tokens, 1 and 2
# threads; PyTorch at its best configuration (1 or 2 threads, OMP_WAIT_POLICY=PASSIVE,
# the same OpenBLAS environment). Prints a markdown table with the ratios; also
# written to bench/out/latest.md. Needs Debian's python3-torch; builds the random
# checkpoint on first use (bench/out/, gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=./build/attnscope
M=bench/out/bert-base-random
REPEAT=${REPEAT:-5}
/usr/bin/python3 bench/make_checkpoint.py
out=bench/out/latest.md
{
echo "| tokens | attnscope 1t ms | attnscope 2t ms | torch 1t ms | torch 2t ms | torch best / attnscope best | attnscope GFLOP/s (eff. vs sgemm peak) | attnscope peak RSS MB | captured MB | torch peak RSS MB |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for T in 128 512; do
  a1=$($BIN bench --model $M --tokens $T --repeat $REPEAT --threads 1 | tail -1)
  a2=$($BIN bench --model $M --tokens $T --repeat $REPEAT --threads 2 | tail -1)
  t1=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model $M --tokens $T --threads 1 --repeat $REPEAT)
  t2=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model $M --tokens $T --threads 2 --repeat $REPEAT)
  f() { echo "$1" | sed -n "s/.*$2 \([0-9.]*\).*/\1/p"; }
  am1=$(f "$a1" median_ms); am2=$(f "$a2" median_ms); tm1=$(f "$t1" median_ms); tm2=$(f "$t2" median_ms)
  ab=$(python3 -c "print(min($am1,$am2))"); tb=$(python3 -c "print(min($tm1,$tm2))")
  best=$( [ "$(python3 -c "print(int($am1<=$am2))")" = 1 ] && echo "$a1" || echo "$a2")
  echo "| $T | $am1 | $am2 | $tm1 | $tm2 | $(python3 -c "print('%.2fx' % ($tb/$ab))") | $(f "$best" ' gflops') ($(f "$best" efficiency)%) | $(python3 -c "print(max($(f "$a1" peak_rss_mb),$(f "$a2" peak_rss_mb)))") | $(f "$a1" captured_mb) | $(python3 -c "print(max($(f "$t1" peak_rss_mb),$(f "$t2" peak_rss_mb)))") |"
done
} | tee $out
echo "sgemm peak and details: $BIN bench --model $M --tokens N --threads N"
