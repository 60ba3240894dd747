#!/usr/bin/env bash
# bench/llama_bench.sh — attnscope vs the best PyTorch configuration found, same machine,
# same run: prefill of the random 1B-shaped Llama (16 layers, D 2048, 32 query / 8
# key-value heads, SwiGLU 8192, vocabulary 32000; bench/make_llama_checkpoint.py), keeping
# layer LAYER's attention and the logits, at each token count of TOKENS (default 512 2048),
# in F32 (attnscope: the BF16 file, F32 products; PyTorch: the F32 copy) and BF16
# (attnscope --precision bf16; PyTorch bfloat16). The driver is bench/llama_bench.py
# (PyTorch side: bench/llama_torch.py): a check against attnscope, a screen of PyTorch's
# thread configurations at SCREEN_T, then one timed call per side, precision and T in each
# of ROUNDS rounds; tokens/s without capture at THROUGHPUT_TOKENS.
# Output: bench/out/llama_latest.md (table), llama_screen.md, llama_rounds.txt (every call).
#   BIN=PATH (default ./build-bench/attnscope)  TOKENS="512 2048"  REPEAT=2  REPEAT_LONG=1
#   LAYER=8  SCREEN_T=512  SCREEN_REPEAT=1  SCREEN=short|full  CHECK_T=32  THROUGHPUT_TOKENS="512"
#   F32FILE_TOKENS="512"  BF16W=auto|0|1  THREADS=2 (attnscope)  ROUNDS=1 (interleaved rounds;
#   each call logs the share of the cores other processes used meanwhile: others_pct)
#   COLD=1 (attnscope maps its checkpoint as read from disk: dropped from the page cache first)
# About 18 minutes on the project's 2-core machine with the defaults (each more round: 7). Needs Debian's
# python3-torch; writes the two checkpoints on first use (bench/out/, gitignored: 2.1 GiB
# BF16 + 4.1 GiB F32).
set -euo pipefail
cd "$(dirname "$0")/.."
export BIN=${BIN:-./build-bench/attnscope}
[ -x "$BIN" ] || { echo "bench/llama_bench.sh: no binary at $BIN (set BIN=...)" >&2; exit 1; }
export MODEL=${MODEL:-bench/out/llama-1b-bf16} MODEL_F32=${MODEL_F32:-bench/out/llama-1b-f32}
[ -f "$MODEL/model.safetensors" ] || /usr/bin/python3 bench/make_llama_checkpoint.py "$MODEL"
[ -f "$MODEL_F32/model.safetensors" ] || /usr/bin/python3 bench/make_llama_checkpoint.py "$MODEL_F32" --dtype f32
exec /usr/bin/python3 bench/llama_bench.py
