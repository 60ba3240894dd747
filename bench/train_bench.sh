#!/bin/sh
# train_bench.sh — training throughput of `attnscope pretrain` against the best PyTorch
# configuration found (bench/train_torch.py), same model, batch and sequence length, same
# run; the driver is bench/train_bench.py (check, screen of 32 configurations,
# interleaved rounds; workloads 1 thread and 2 threads).
#   BIN=PATH (default build/attnscope; also the first argument)  STEPS=30  ROUNDS=3  SCREEN_STEPS=10
# Output: bench/out/train_latest.md, train_screen.md, train_rounds.txt.
set -eu
cd "$(dirname "$0")/.."
BIN=${1:-${BIN:-build/attnscope}}
[ -x "$BIN" ] || { echo "bench/train_bench.sh: no binary at $BIN (set BIN=...)" >&2; exit 1; }
export BIN
exec /usr/bin/python3 bench/train_bench.py
