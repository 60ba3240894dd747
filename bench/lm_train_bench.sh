#!/bin/sh
# lm_train_bench.sh — causal-LM training tokens/s of `attnscope train-lm` against the
# PyTorch reference (bench/lm_train_torch.py) on the same model shape (models/attnscope-lm:
# Llama, 6 layers, width 256, 8/2 heads, SwiGLU 768, tied, vocabulary 8192), batch 16 x 256
# tokens, AdamW + clipping, in the same run: for each thread count, ROUNDS interleaved
# rounds of attnscope then PyTorch (OMP_WAIT_POLICY PASSIVE and ACTIVE, foreach AdamW).
# attnscope's figure is train-lm's own tokens/s over STEPS steps (timed from the first
# step, after loading and tokenizing); PyTorch's the median over TORCH_ROUNDS rounds of STEPS steps
# after 2 warm-up steps.
# Usage: sh bench/lm_train_bench.sh [BIN]   (env: THREADS="1 2", STEPS=8, ROUNDS=2, TORCH_ROUNDS=3)
set -eu
BIN=${1:-build/attnscope}
THREADS=${THREADS:-"1 2"}
STEPS=${STEPS:-8}
ROUNDS=${ROUNDS:-2}
OUT=bench/out/lm-train
mkdir -p "$OUT"
if [ ! -f "$OUT/init/model.safetensors" ]; then
  /usr/bin/python3 bench/make_llama_checkpoint.py "$OUT/init" --dtype f32 --layers 6 --width 256 --heads 8 \
    --kv-heads 2 --ff 768 --vocab 8192 --positions 512 --tie --bos 0 --eos 1 --rope-theta 10000 --seed 1 \
    --scaled-residual >/dev/null
  cp models/attnscope-lm/tokenizer.json models/attnscope-lm/tokenizer_config.json "$OUT/init/"
fi
CORPUS=${CORPUS:-../shared/data/corpus/tinyshakespeare.txt}
for t in $THREADS; do
  for r in $(seq 1 "$ROUNDS"); do
    a=$("$BIN" train-lm --model "$OUT/init" --corpus "$CORPUS" --out "$OUT/o" --steps "$STEPS" --batch 16 \
        --seq 256 --threads "$t" --log-every 1000 | grep "^step $STEPS/" | sed 's/.* \([0-9]*\) tokens\/s/\1/')
    echo "threads $t round $r attnscope tokens_per_s $a"
    for w in PASSIVE ACTIVE; do
      OMP_WAIT_POLICY=$w /usr/bin/python3 bench/lm_train_torch.py --threads "$t" --steps "$STEPS" --rounds "${TORCH_ROUNDS:-3}" | sed "s/^/round $r torch /"
    done
  done
done
