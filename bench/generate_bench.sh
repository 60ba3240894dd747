#!/usr/bin/env bash
# bench/generate_bench.sh — greedy generation on the random 1B-shaped Llama
# (bench/make_llama_checkpoint.py): attnscope generate on its key/value cache (and, at
# the first prompt length, with --full-forward: each step the whole sequence) against
# bench/llama_torch.py --generate (eager PyTorch on a preallocated key/value cache) in
# the thread configurations listed, interleaved, ROUNDS rounds; the best call of each.
# Both sides run the ids of `attnscope bench` as the prompt and must produce the same
# first ids (printed). attnscope's time is its own --timing line (load excluded), as
# PyTorch's excludes its load. At f32 attnscope also runs on the F32 file PyTorch reads.
# BEAMS=B (default 1: greedy) times beam search of B beams on both sides instead (attnscope
# generate --beams B; llama_torch.py --beams B: the beams' steps batched, caches reordered
# by index_select); the ids printed are the best hypothesis'.
#   BIN (./build-bench/attnscope)  PROMPTS ("128 512")  NEW (32)  ROUNDS (2)  BEAMS (1)
#   PRECISIONS ("f32 bf16": attnscope f32 products on the BF16 file against PyTorch float32
#   on the F32 file; attnscope --precision bf16 against PyTorch bfloat16)
# About 8 minutes on the project's 2-core machine with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build-bench/attnscope}
PROMPTS=${PROMPTS:-"128 512"}
NEW=${NEW:-32}
ROUNDS=${ROUNDS:-2}
PRECISIONS=${PRECISIONS:-"f32 bf16"}
BEAMS=${BEAMS:-1}
beam_args=()
[ "$BEAMS" -gt 1 ] && beam_args=(--beams "$BEAMS")
MODEL=${MODEL:-bench/out/llama-1b-bf16}
MODEL_F32=${MODEL_F32:-bench/out/llama-1b-f32}
[ -x "$BIN" ] || { echo "bench/generate_bench.sh: no binary at $BIN (set BIN=...)" >&2; exit 1; }
[ -f "$MODEL/model.safetensors" ] || /usr/bin/python3 bench/make_llama_checkpoint.py "$MODEL"
[ -f "$MODEL_F32/model.safetensors" ] || /usr/bin/python3 bench/make_llama_checkpoint.py "$MODEL_F32" --dtype f32
unset OPENBLAS_CORETYPE OMP_NUM_THREADS OPENBLAS_NUM_THREADS GLIBC_TUNABLES
H=glibc.malloc.hugetlb=1
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
first=$(echo "$PROMPTS" | awk '{print $1}')
for r in $(seq 1 "$ROUNDS"); do
  for T in $PROMPTS; do
    ids=$(/usr/bin/python3 bench/llama_torch.py --model "$MODEL" --print-ids "$T")
    for p in $PRECISIONS; do
      tdt=$p
      tmodel=$MODEL_F32
      [ "$p" = bf16 ] && tmodel=$MODEL
      out=$($BIN generate --model "$MODEL" --ids "$ids" --max-new "$NEW" --threads 2 --precision "$p" --timing \
        "${beam_args[@]}" --out /tmp/generate_bench.json --quiet 2>&1 >/dev/null | tail -1)
      first_ids=$(/usr/bin/python3 -c "import json; print(','.join(map(str, json.load(open('/tmp/generate_bench.json'))['generated_ids'][:8])))")
      echo "round $r T $T $p attnscope cache: $out ids $first_ids"
      if [ "$p" = f32 ]; then # the same file as PyTorch's: twice the bytes per step
        out=$($BIN generate --model "$MODEL_F32" --ids "$ids" --max-new "$NEW" --threads 2 --timing --quiet \
          "${beam_args[@]}" 2>&1 >/dev/null | tail -1)
        echo "round $r T $T $p attnscope cache, F32 file: $out"
      fi
      if [ "$T" = "$first" ]; then
        out=$($BIN generate --model "$MODEL" --ids "$ids" --max-new "$NEW" --threads 2 --precision "$p" --timing \
          "${beam_args[@]}" --full-forward --quiet 2>&1 >/dev/null | tail -1)
        echo "round $r T $T $p attnscope full-forward: $out"
      fi
      for cfg in "2 unset PASSIVE $H" "1 unset PASSIVE $H" "2 1 PASSIVE $H" "2 unset ACTIVE $H" "2 unset PASSIVE -"; do
        set -- $cfg
        envs=(OMP_WAIT_POLICY=$3)
        [ "$2" != unset ] && envs+=(OPENBLAS_NUM_THREADS=$2)
        [ "$4" != - ] && envs+=(GLIBC_TUNABLES=$4)
        line=$(env "${envs[@]}" /usr/bin/python3 bench/llama_torch.py --model "$tmodel" --dtype "$tdt" --tokens "$T" \
          --threads "$1" --generate "$NEW" --beams "$BEAMS" --repeat 1 | tail -1)
        echo "round $r T $T $p torch t$1/ob$2/${3:0:1}$([ "$4" != - ] && echo /H): $line"
      done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
