#!/usr/bin/env bash
# bench/attrib_bench.sh — attribution methods on the BERT-base-sized random classifier
# (bench/make_checkpoint.py), attnscope beside the PyTorch / networkx reference
# (bench/attrib_torch.py), one thread each. Three measurements (docs/attribution.md):
#  1. T = 128: the forward with full capture and, on its run, rollout, norm (and flow);
#     ROUNDS rounds, each `attnscope bench --attrib rollout,norm,flow` then the
#     reference's forward + rollout + norm (attrib_torch.py --time), interleaved; each
#     side's ratios come from its own process (same forward, same machine state).
#  2. flow at T = 128: attnscope's every (output, input) pair (in 1.) against networkx's
#     maximum_flow_value on PAIRS pairs of one output row, extrapolated to T^2 pairs; the
#     pairs' flows checked against `attnscope attribute --method flow`'s npz.
#  3. ALTI at T = ALTI_T (512): `attnscope bench --attrib alti --repeat 1` and the forward
#     alone under /usr/bin/time -v (peak RSS: ALTI's extra memory), against the naive
#     reference that materialises one layer's (T, T, D) at a time (attrib_torch.py --alti);
#     the values checked at T = 128 against `attnscope attribute --method alti`'s npz.
# Output: bench/out/attrib_latest.txt (every line of every process, with `uptime` before
# each round: the machine is shared).
#   BIN=PATH (default ./build/attnscope)  ROUNDS=3  REPEAT=3  PAIRS=4  ALTI_T=512  THREADS=1
# Needs Debian's python3-torch and python3-networkx; builds the checkpoint on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build/attnscope}
ROUNDS=${ROUNDS:-3} REPEAT=${REPEAT:-3} PAIRS=${PAIRS:-4} ALTI_T=${ALTI_T:-512} THREADS=${THREADS:-1}
[ -x "$BIN" ] || { echo "bench/attrib_bench.sh: no binary at $BIN (set BIN=...)" >&2; exit 1; }
/usr/bin/python3 bench/make_checkpoint.py
M=bench/out/bert-base-random
OUT=bench/out/attrib_latest.txt
PY="/usr/bin/python3 bench/attrib_torch.py --model $M --threads $THREADS"
export OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS
: >"$OUT"
log() { tee -a "$OUT"; }
ids128=$($PY --print-ids 128)
echo "== $(date -u)  $(getconf _NPROCESSORS_ONLN) cores  BIN=$BIN  threads $THREADS" | log
$BIN attribute --model $M --ids "$ids128" --method rollout --format npz --out bench/out/attrib_rollout.npz --threads "$THREADS"
$BIN attribute --model $M --ids "$ids128" --method norm --format npz --out bench/out/attrib_norm.npz --threads "$THREADS"
$BIN attribute --model $M --ids "$ids128" --method flow --format npz --out bench/out/attrib_flow.npz --threads "$THREADS"
for r in $(seq 1 "$ROUNDS"); do
    echo "== round $r  $(uptime)" | log
    $BIN bench --model $M --tokens 128 --repeat "$REPEAT" --threads "$THREADS" --attrib rollout,norm,flow | log
    chk=""
    [ "$r" = 1 ] && chk="--check-npz rollout=bench/out/attrib_rollout.npz,norm=bench/out/attrib_norm.npz"
    $PY --time 128 --repeat "$REPEAT" $chk | log
done
NCPU=$(getconf _NPROCESSORS_ONLN)
echo "== flow on $NCPU threads  $(uptime)" | log
OPENBLAS_NUM_THREADS=$NCPU $BIN bench --model $M --tokens 128 --repeat "$REPEAT" --threads "$NCPU" --attrib flow | log
echo "== networkx flow  $(uptime)" | log
$PY --flow 128 --pairs "$PAIRS" --npz bench/out/attrib_flow.npz | log
echo "== ALTI T=$ALTI_T  $(uptime)" | log
rss_run() { # runs "$@" under /usr/bin/time -v: its stdout, then its peak RSS
    /usr/bin/time -v "$@" >bench/out/attrib_run.txt 2>bench/out/attrib_time.txt
    cat bench/out/attrib_run.txt
    sed -n 's/.*Maximum resident set size (kbytes): /peak_rss_kb /p' bench/out/attrib_time.txt
}
echo "forward alone:" | log
rss_run $BIN bench --model $M --tokens "$ALTI_T" --repeat 1 --threads "$THREADS" | log
echo "forward + alti:" | log
rss_run $BIN bench --model $M --tokens "$ALTI_T" --repeat 1 --threads "$THREADS" --attrib alti | log
echo "reference (naive, one layer's (T, T, D) at a time):" | log
rss_run $PY --alti "$ALTI_T" | log
echo "values at T = 128 (attnscope attribute --method alti against the naive reference):" | log
$BIN attribute --model $M --ids "$ids128" --method alti --format npz --out bench/out/attrib_alti.npz --threads "$THREADS"
$PY --alti 128 --f64 --npz bench/out/attrib_alti.npz | log
echo "wrote $OUT"
