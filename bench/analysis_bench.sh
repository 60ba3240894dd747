#!/usr/bin/env bash
# bench/analysis_bench.sh — corpus analysis throughput (forward + gradient saliency on
# SST-2 + every score), attnscope against the best PyTorch configuration found, on SST-2
# dev and on UD EWT dev separately, BERT-base-sized random classifier
# (bench/make_checkpoint.py; the tokenizer files of ../shared/data/bert-base-uncased are
# copied next to it). The driver is bench/analysis_bench.py (screen of 32 thread
# configurations per corpus, rounds, agreement check). Then times the whole default
# analysis (with explanation) of models/attnscope-sst2 when it exists.
#   BIN=PATH (default ./build/attnscope; also the first argument)  LIMIT=N (per corpus, 0 = all)
#   SCREEN_LIMIT=30  ROUNDS=1  MPI=N (mpirun -n N, default 0 = off)  WORKERS=2  CORPORA="sst2 ud"
#   DEFAULT_MODEL=1 (0 skips the default model's timing)  THREADS=2 (its --threads)
#   PRECISION=f32|bf16 (attnscope's --precision; the reference stays float32)
# Output: bench/out/analysis_latest.md, analysis_screen_<corpus>.md, analysis_rounds.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
export BIN=${1:-${BIN:-./build/attnscope}}
[ -x "$BIN" ] || { echo "bench/analysis_bench.sh: no binary at $BIN (set BIN=...)" >&2; exit 1; }
DATA=../shared/data
SRC=bench/out/bert-base-random
M=bench/out/bert-base-random-tok
/usr/bin/python3 bench/make_checkpoint.py >/dev/null
mkdir -p "$M"
for f in config.json model.safetensors; do ln -sf "$(pwd)/$SRC/$f" "$M/$f"; done
cp "$DATA/bert-base-uncased/vocab.txt" "$DATA/bert-base-uncased/tokenizer.json" "$DATA/bert-base-uncased/tokenizer_config.json" "$M/"
/usr/bin/python3 bench/analysis_bench.py
if [ "${DEFAULT_MODEL:-1}" = 1 ] && [ -d models/attnscope-sst2 ]; then
  D2=bench/out/analysis_default.sqlite
  rm -f "$D2" "$D2-wal" "$D2-shm"
  t0=$(date +%s.%N)
  "$BIN" analyze --model models/attnscope-sst2 --sst2 "$DATA/sst2/dev.tsv" --conllu "$DATA/ud/en_ewt-ud-dev.conllu" \
    --threads "${THREADS:-2}" --quiet --db "$D2"
  t1=$(date +%s.%N)
  echo "default model models/attnscope-sst2: whole analysis ($(sqlite3 "$D2" "SELECT n_total FROM runs") sentences, explain 64, threads ${THREADS:-2}) in $(python3 -c "print('%.1f' % ($t1-$t0))") s"
fi
