#!/usr/bin/env bash
# gemm_bf16_bench.sh — builds and runs bench/gemm_bf16_bench.c (the BF16 products of
# src/core/gemm_bf16.c against OpenBLAS sgemm, one thread, weights cold and unaligned)
# against BUILD_DIR's library. Prints a Markdown table of GFLOP/s.
# Usage: bench/gemm_bf16_bench.sh BUILD_DIR (a Release build, e.g. build-lead).
set -eu
B=${1:?usage: gemm_bf16_bench.sh BUILD_DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cc -O2 -std=gnu11 -Wall -Wextra -I"$ROOT/src" -I"$ROOT/include" "$ROOT/bench/gemm_bf16_bench.c" "$B/libattnscope.a" \
  -lopenblas -lm -lpthread -o "$T/gb"
env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS=1 "$T/gb"
