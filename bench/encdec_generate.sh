#!/usr/bin/env bash
# bench/encdec_generate.sh — greedy generation with an encoder-decoder model: the random
# BART-base-shaped checkpoint of bench/encdec_bench.py (6 + 6 layers, D 768, vocabulary
# 50,265), NEW decoder tokens after decoder_start_token_id from the SRC source ids of
# `attnscope bench`. attnscope generate (the encoder once, the decoder on a key/value
# cache; and --full-forward: each step a whole forward of both stacks) against
# bench/encdec_torch.py --generate (eager PyTorch: the encoder once, cross keys and values
# once, the decoder on a cache, as transformers' generate) in the thread configurations
# listed, interleaved, ROUNDS rounds. Both sides print their first ids (they must agree).
# attnscope's time is its --timing line (load excluded), as PyTorch's excludes its load.
#   BIN (./build-bench/attnscope)  SRC (64)  NEW (32)  ROUNDS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-./build-bench/attnscope}
SRC=${SRC:-64}
NEW=${NEW:-32}
ROUNDS=${ROUNDS:-2}
MODEL=bench/out/bart-base-random
[ -x "$BIN" ] || { echo "bench/encdec_generate.sh: no binary at $BIN (set BIN=...)" >&2; exit 1; }
[ -f "$MODEL/model.safetensors" ] || (cd bench && /usr/bin/python3 -c "import encdec_bench; encdec_bench.make_model()")
unset OPENBLAS_CORETYPE OMP_NUM_THREADS OPENBLAS_NUM_THREADS GLIBC_TUNABLES
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
ids=$(/usr/bin/python3 bench/encdec_torch.py --model "$MODEL" --tokens "$SRC" --target-tokens 1 --print-ids | cut -d';' -f1)
for r in $(seq 1 "$ROUNDS"); do
  for mode in cache full; do
    extra=()
    [ "$mode" = full ] && extra=(--full-forward)
    out=$($BIN generate --model "$MODEL" --ids "$ids" --max-new "$NEW" --threads 2 --timing "${extra[@]}" \
      --out /tmp/encdec_generate.json --quiet 2>&1 >/dev/null | tail -1)
    first=$(/usr/bin/python3 -c "import json; print(','.join(map(str, json.load(open('/tmp/encdec_generate.json'))['generated_ids'][:8])))")
    echo "round $r attnscope $mode: $out ids $first"
  done
  for cfg in "2 unset PASSIVE" "1 unset PASSIVE" "2 1 PASSIVE" "2 unset ACTIVE"; do
    set -- $cfg
    envs=(OMP_WAIT_POLICY=$3)
    [ "$2" != unset ] && envs+=(OPENBLAS_NUM_THREADS=$2)
    line=$(env "${envs[@]}" /usr/bin/python3 bench/encdec_torch.py --model "$MODEL" --tokens "$SRC" \
      --generate "$NEW" --threads "$1" --repeat 1 | tail -1)
    echo "round $r torch t$1/ob$2/${3:0:1}: $line"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
