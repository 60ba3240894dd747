#!/bin/sh
# bench/quiet_bf16_bert.sh — BERT-base (bench/make_checkpoint.py), 128 tokens, forward with full
# capture: attnscope BF16 and F32 on 2 threads against bench/torch_ref.py in the three best
# F32 configurations of the screens (glibc malloc on huge pages: bench/configs.py's "/H"),
# interleaved, ROUNDS rounds (default 3) of REPEAT forwards each (default 11, the median
# kept); then attention flow for every (output, input) pair on 2 threads
# (attnscope bench --attrib flow). Run on a quiet machine.
BIN=${BIN:-./build/attnscope}
M=bench/out/bert-base-random
H=glibc.malloc.hugetlb=1
REPEAT=${REPEAT:-11} # forwards per call (median)
ROUNDS=${ROUNDS:-3}
cd "$(dirname "$0")/.."
unset OPENBLAS_CORETYPE # OpenBLAS picks its kernels by CPU, as on a user's machine
for r in $(seq 1 "$ROUNDS"); do
  echo "== round $r load $(cut -d' ' -f1 /proc/loadavg)"
  $BIN bench --model $M --tokens 128 --threads 2 --precision bf16 --repeat $REPEAT 2>&1 | grep -iE "median|ms" | head -2 | sed 's/^/bf16: /'
  $BIN bench --model $M --tokens 128 --threads 2 --repeat $REPEAT 2>&1 | grep -iE "median|ms" | head -2 | sed 's/^/f32: /'
  GLIBC_TUNABLES=$H OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model $M --tokens 128 --threads 1 --interop 2 --repeat $REPEAT 2>&1 | tail -1 | sed 's/^/torch t1i2P\/H: /'
  GLIBC_TUNABLES=$H OMP_WAIT_POLICY=ACTIVE /usr/bin/python3 bench/torch_ref.py --model $M --tokens 128 --threads 1 --interop 2 --repeat $REPEAT 2>&1 | tail -1 | sed 's/^/torch t1i2A\/H: /'
  GLIBC_TUNABLES=$H OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 bench/torch_ref.py --model $M --tokens 128 --threads 2 --interop 1 --repeat $REPEAT 2>&1 | tail -1 | sed 's/^/torch t2i1P\/H: /'
done
echo "== flow, 2 threads, load $(cut -d' ' -f1 /proc/loadavg)"
OPENBLAS_NUM_THREADS=2 $BIN bench --model $M --tokens 128 --repeat 3 --threads 2 --attrib flow 2>&1 | tail -4
