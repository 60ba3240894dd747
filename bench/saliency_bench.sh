#!/usr/bin/env bash
# bench/saliency_bench.sh — gradient saliency of one sentence (forward + backward to the
# word embeddings, `attnscope saliency`'s default method) on the BERT-base-sized random
# classifier, attnscope against the best PyTorch configuration found, at each token
# count of TOKENS (default 32 128 512). The driver is bench/saliency_bench.py: it checks
# the reference's scores against attnscope's, screens the 16 PyTorch thread
# configurations of bench/configs.py (SCREEN_REPEAT calls), then runs attnscope at 1 and
# 2 threads (and BEFORE=PATH, an older build, likewise) interleaved with the screen's
# best one-core and two best configurations, ROUNDS rounds of REPEAT calls.
# Output: bench/out/saliency_latest.md (table), saliency_screen.md, saliency_rounds.txt.
#   BIN=PATH (default ./build/attnscope)  BEFORE=PATH  EXTRA="NAME=PATH ..."  TOKENS="..."  REPEAT=5  ROUNDS=3
#   SCREEN_REPEAT=2  CHECK_T=128
# Needs Debian's python3-torch; builds the random checkpoint on first use (bench/out/,
# gitignored).
set -euo pipefail
cd "$(dirname "$0")/.."
export BIN=${BIN:-./build/attnscope}
[ -x "$BIN" ] || { echo "bench/saliency_bench.sh: no binary at $BIN (set BIN=...)" >&2; exit 1; }
/usr/bin/python3 bench/make_checkpoint.py
exec /usr/bin/python3 bench/saliency_bench.py
