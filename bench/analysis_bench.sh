#!/usr/bin/env bash
# bench/analysis_bench.sh — corpus analysis throughput, attnscope vs the PyTorch
# reference, same machine, same run: forward + gradient saliency (SST-2) + every score
# on a BERT-base-sized random classifier (bench/make_checkpoint.py; the tokenizer files of
# ../shared/data/bert-base-uncased are copied next to it) over SST-2 dev and UD EWT dev.
#   LIMIT=N   sentences per corpus (default: all, 872 + 2,001)
#   THREADS=N threads for both sides (default 2)
#   MPI=N     also time `mpirun -n N attnscope analyze` (default: off)
# attnscope runs with --explain 0 (no q/k concentration, no ablation reruns): the
# reference implements the scores, not the explanation. Then times the whole default
# analysis (with explanation) of models/attnscope-sst2 when it exists.
# Usage: bash bench/analysis_bench.sh [BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-./build/attnscope}
DATA=../shared/data
SRC=bench/out/bert-base-random
M=bench/out/bert-base-random-tok
LIMIT=${LIMIT:-0}
THREADS=${THREADS:-2}
# idle OpenMP threads sleep instead of spinning while OpenBLAS works (both sides)
export OMP_WAIT_POLICY=PASSIVE
/usr/bin/python3 bench/make_checkpoint.py >/dev/null
mkdir -p "$M"
for f in config.json model.safetensors; do ln -sf "$(pwd)/$SRC/$f" "$M/$f"; done
cp "$DATA/bert-base-uncased/vocab.txt" "$DATA/bert-base-uncased/tokenizer.json" "$DATA/bert-base-uncased/tokenizer_config.json" "$M/"
lim=(); [ "$LIMIT" -gt 0 ] && lim=(--limit "$LIMIT")
DB=bench/out/analysis_bench.sqlite
rm -f "$DB" "$DB-wal" "$DB-shm"
t0=$(date +%s.%N)
"$BIN" analyze --model "$M" --sst2 "$DATA/sst2/dev.tsv" --conllu "$DATA/ud/en_ewt-ud-dev.conllu" "${lim[@]}" \
  --explain 0 --min-rel 20 --threads "$THREADS" --quiet --db "$DB"
t1=$(date +%s.%N)
n=$(sqlite3 "$DB" "SELECT n_total FROM runs WHERE id=1")
echo "attnscope: $n sentences in $(python3 -c "print('%.1f' % ($t1-$t0))") s = $(python3 -c "print('%.2f' % ($n/($t1-$t0)))") sentences/s (threads $THREADS)"
if [ "${MPI:-0}" -gt 1 ] && command -v mpirun >/dev/null; then
  rm -f "$DB.mpi"*
  t0=$(date +%s.%N)
  OMPI_MCA_btl_vader_single_copy_mechanism=none mpirun --allow-run-as-root --oversubscribe --bind-to none -n "$MPI" \
    "$BIN" analyze --model "$M" --sst2 "$DATA/sst2/dev.tsv" --conllu "$DATA/ud/en_ewt-ud-dev.conllu" "${lim[@]}" \
    --explain 0 --min-rel 20 --quiet --db "$DB.mpi"
  t1=$(date +%s.%N)
  echo "attnscope mpirun -n $MPI: $n sentences in $(python3 -c "print('%.1f' % ($t1-$t0))") s = $(python3 -c "print('%.2f' % ($n/($t1-$t0)))") sentences/s"
fi
/usr/bin/python3 bench/analysis_torch.py --model "$M" --db "$DB" --threads "$THREADS"
if [ -d models/attnscope-sst2 ]; then
  D2=bench/out/analysis_default.sqlite
  rm -f "$D2" "$D2-wal" "$D2-shm"
  t0=$(date +%s.%N)
  "$BIN" analyze --model models/attnscope-sst2 --sst2 "$DATA/sst2/dev.tsv" --conllu "$DATA/ud/en_ewt-ud-dev.conllu" \
    --threads "$THREADS" --quiet --db "$D2"
  t1=$(date +%s.%N)
  echo "default model models/attnscope-sst2: whole analysis ($(sqlite3 "$D2" "SELECT n_total FROM runs") sentences, explain 64) in $(python3 -c "print('%.1f' % ($t1-$t0))") s"
fi
