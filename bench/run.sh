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
# Timings on this VM drift by +-20% from one call to the next, so the five
# configurations run interleaved, ROUNDS times (default 3), each call timing REPEAT
# forwards (default 5) after a warm-up; a configuration's figure is the median of its
# rounds' medians; TOKENS (default "128 512") the input lengths. Prints a markdown table
# (also bench/out/latest.md) and every round (bench/out/rounds.txt). Needs Debian's
# python3-torch; builds the random checkpoint on first use (bench/out/, gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build/attnscope}
M=bench/out/bert-base-random
REPEAT=${REPEAT:-5}
ROUNDS=${ROUNDS:-3}
/usr/bin/python3 bench/make_checkpoint.py
out=bench/out/latest.md
rounds=bench/out/rounds.txt
: > $rounds
f() { echo "$1" | sed -n "s/.*$2 \([0-9.]*\).*/\1/p"; }
py() { python3 -c "print($1)"; }
med() { python3 -c "import statistics,sys; print('%.2f' % statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
{
echo "| tokens | attnscope 1t ms | attnscope 2t ms | torch A ms | torch B ms | torch C ms | 1-thread ratio (A / attnscope 1t) | best ratio (torch best / attnscope best) | attnscope % of sgemm peak (1t; 2t) | attnscope peak RSS MB | captured MB | torch peak RSS MB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
for T in ${TOKENS:-128 512}; do
  m1=(); m2=(); mA=(); mB=(); mC=(); e1=(); e2=(); rss=0; rssT=0; cap=0
  for r in $(seq "$ROUNDS"); do
    a1=$($BIN bench --model $M --tokens $T --repeat $REPEAT --threads 1 | tail -1)
    a2=$($BIN bench --model $M --tokens $T --repeat $REPEAT --threads 2 | tail -1)
    tA=$(OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_ref.py --model $M --repeat $REPEAT --tokens $T --threads 1)
    tB=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model $M --repeat $REPEAT --tokens $T --threads 1)
    tC=$(OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model $M --repeat $REPEAT --tokens $T --threads 2)
    printf 'T=%s round %s\n  attnscope 1t: %s\n  attnscope 2t: %s\n  torch A: %s\n  torch B: %s\n  torch C: %s\n' \
      "$T" "$r" "$a1" "$a2" "$tA" "$tB" "$tC" >> $rounds
    m1+=("$(f "$a1" median_ms)"); m2+=("$(f "$a2" median_ms)")
    mA+=("$(f "$tA" median_ms)"); mB+=("$(f "$tB" median_ms)"); mC+=("$(f "$tC" median_ms)")
    e1+=("$(f "$a1" efficiency)"); e2+=("$(f "$a2" efficiency)")
    rss=$(py "max($rss,$(f "$a1" peak_rss_mb),$(f "$a2" peak_rss_mb))"); cap=$(f "$a1" captured_mb)
    rssT=$(py "max($rssT,$(f "$tA" peak_rss_mb),$(f "$tB" peak_rss_mb),$(f "$tC" peak_rss_mb))")
  done
  am1=$(med "${m1[@]}"); am2=$(med "${m2[@]}"); tmA=$(med "${mA[@]}"); tmB=$(med "${mB[@]}"); tmC=$(med "${mC[@]}")
  ab=$(py "min($am1,$am2)"); tb=$(py "min($tmA,$tmB,$tmC)")
  echo "| $T | $am1 | $am2 | $tmA | $tmB | $tmC | $(py "'%.2fx' % ($tmA/$am1)") | $(py "'%.2fx' % ($tb/$ab)") | $(med "${e1[@]}")%; $(med "${e2[@]}")% | $rss | $cap | $rssT |"
done
} | tee $out
echo "rounds: $rounds; details: $BIN bench --model $M --tokens N --threads N"
