#!/usr/bin/env bash
# bench/run.sh — attnscope vs the PyTorch reference, same machine, same run:
# one BERT-base forward with full attention capture at 128 and 512 tokens.
# attnscope at 1 and 2 threads; PyTorch in three configurations, all with
# OMP_WAIT_POLICY=PASSIVE and the same OpenBLAS:
#   A: one thread everywhere (torch.set_num_threads(1), OPENBLAS_NUM_THREADS=1)
#   B: torch.set_num_threads(1) with OpenBLAS's default threads (Debian's torch uses
#      the system OpenBLAS, which set_num_threads does not limit)
#   C: torch.set_num_threads(2), OpenBLAS default
# and compared at one thread (A vs attnscope 1t) and at each side's best.
# Prints a markdown table (also bench/out/latest.md). Needs Debian's python3-torch;
# builds the random checkpoint on first use (bench/out/, gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=./build/attnscope
M=bench/out/bert-base-random
REPEAT=${REPEAT:-5}
/usr/bin/python3 bench/make_checkpoint.py
out=bench/out/latest.md
f() { echo "$1" | sed -n "s/.*$2 \([0-9.]*\).*/\1/p"; }
py() { python3 -c "print($1)"; }
{
echo "| tokens | attnscope 1t ms | attnscope 2t ms | torch A ms | torch B ms | torch C ms | 1-thread ratio (A / attnscope 1t) | best ratio (torch best / attnscope best) | attnscope GFLOP/s, % of sgemm peak (1t; 2t) | attnscope peak RSS MB | captured MB | torch peak RSS MB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for T in 128 512; do
  a1=$($BIN bench --model $M --tokens $T --repeat $REPEAT --threads 1 | tail -1)
  a2=$($BIN bench --model $M --tokens $T --repeat $REPEAT --threads 2 | tail -1)
  tA=$(OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_ref.py --model $M --repeat $REPEAT --tokens $T --threads 1)
  tB=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model $M --repeat $REPEAT --tokens $T --threads 1)
  tC=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model $M --repeat $REPEAT --tokens $T --threads 2)
  am1=$(f "$a1" median_ms); am2=$(f "$a2" median_ms)
  tmA=$(f "$tA" median_ms); tmB=$(f "$tB" median_ms); tmC=$(f "$tC" median_ms)
  ab=$(py "min($am1,$am2)"); tb=$(py "min($tmA,$tmB,$tmC)")
  echo "| $T | $am1 | $am2 | $tmA | $tmB | $tmC | $(py "'%.2fx' % ($tmA/$am1)") | $(py "'%.2fx' % ($tb/$ab)") | $(f "$a1" ' gflops') ($(f "$a1" efficiency)%); $(f "$a2" ' gflops') ($(f "$a2" efficiency)%) | $(py "max($(f "$a1" peak_rss_mb),$(f "$a2" peak_rss_mb))") | $(f "$a1" captured_mb) | $(py "max($(f "$tA" peak_rss_mb),$(f "$tB" peak_rss_mb),$(f "$tC" peak_rss_mb))") |"
done
} | tee $out
echo "details: $BIN bench --model $M --tokens N --threads N"
