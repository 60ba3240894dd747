#!/bin/sh
# train_bench.sh — training throughput of attnscope (`attnscope pretrain`) against the
# PyTorch reference (bench/train_torch.py) on the same model, batch and sequence length,
# in the same run, one after the other. Usage:
#   bench/train_bench.sh [BIN] [THREADS] [STEPS]      (defaults build/attnscope, 2, 30)
# Model: L=4 D=128 H=4 F=512 V=8192, B=32, T=64, dropout off (the shipped teacher's shape).
# attnscope trains on real sentence pairs (pairs fill T nearly always; its tokens/s counts
# real tokens only), torch on random full-length ids; both predict 15% of the tokens.
set -eu
BIN=${1:-build/attnscope}
THREADS=${2:-2}
STEPS=${3:-30}
D=${AS_DATA:-../shared/data}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
export OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$THREADS
load0=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')
"$BIN" vocab --corpus "$D/sst2/train.tsv" --size 8192 --out "$TMP/vocab.txt" >/dev/null
# pad the vocabulary to exactly 8192 entries so both sides have V = 8192
n=$(wc -l < "$TMP/vocab.txt"); i=0
while [ $((n + i)) -lt 8192 ]; do echo "[unused$i]" >> "$TMP/vocab.txt"; i=$((i + 1)); done
"$BIN" pretrain --corpus "$D/sst2/train.tsv" --vocab "$TMP/vocab.txt" --out "$TMP/m" --layers 4 --width 128 \
  --heads 4 --ff 512 --max-len 64 --batch 32 --steps $((STEPS + 3)) --log-every 1 --dropout 0 \
  --threads "$THREADS" 2> "$TMP/log"
# skip 3 warm-up steps like the torch side: mean of the per-step tokens/s of the rest
c=$(grep '^step ' "$TMP/log" | tail -n "$STEPS" | awk '{for(i=1;i<=NF;i++) if($i=="tok/s") s+=$(i-1)} END {printf "%.0f", s/NR}')
t=$(/usr/bin/python3 bench/train_torch.py 4 128 4 512 8192 64 32 "$STEPS" "$THREADS" | awk '{print $3}')
echo "threads $THREADS, L=4 D=128 H=4 F=512 V=8192 B=32 T=64, $STEPS steps"
echo "load average (1, 5, 15 min) before $load0, after $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
echo "attnscope tokens/s $c"
echo "torch     tokens/s $t"
awk -v c="$c" -v t="$t" 'BEGIN {printf "speed-up  %.2fx\n", c / t}'
