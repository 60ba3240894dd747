#!/usr/bin/env bash
# bench/run.sh — attnscope vs the best PyTorch configuration found, same machine, same
# run: one BERT-base forward with full attention capture (attentions, scores, q/k/v,
# hidden states, logits) at each token count of TOKENS (default 64 128 256 384 512 768
# 1024; the random checkpoint of bench/make_checkpoint.py has 1024 positions).
# The driver is bench/forward_bench.py: it checks the tuned reference against the old
# one and against attnscope (max abs diff), screens the 32 PyTorch configurations
# of bench/configs.py (threads, waits, malloc) at every T (SCREEN_REPEAT forwards), then runs attnscope at 1 and 2
# threads interleaved with the screen's best one-core and two best configurations,
# ROUNDS rounds of REPEAT forwards. Output: bench/out/latest.md (table),
# bench/out/screen.md (every configuration), bench/out/rounds.txt (every call).
#   BIN=PATH (default ./build/attnscope)  TOKENS="..."  REPEAT=5  ROUNDS=3  SCREEN_REPEAT=2  CHECK_T=128
#   PRECISION=f32|bf16 (attnscope's --precision; PyTorch float32)
# Needs Debian's python3-torch; builds the random checkpoint on first use (bench/out/,
# gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."
export BIN=${BIN:-./build/attnscope}
[ -x "$BIN" ] || { echo "bench/run.sh: no binary at $BIN (set BIN=...)" >&2; exit 1; }
/usr/bin/python3 bench/make_checkpoint.py
exec /usr/bin/python3 bench/forward_bench.py
