#!/bin/sh
# make_models.sh — reproduces attnscope's shipped models from scratch with the attnscope
# binary (run by `make models`; not part of CI: about 95 minutes on one core).
#   models/attnscope-mlm           4-layer BERT masked-LM, pretrained here
#   models/attnscope-sst2          its SST-2 classifier
#   models/attnscope-sst2-student  2-layer distilled student, fine-tuned on SST-2
# Usage: models/make_models.sh [BIN] [WORK_DIR]   (defaults: build/attnscope, build/models-work)
# Data: ../shared/data (corpus/, ud/, sst2/); SST-2 dev and test sentences are removed
# from the pretraining corpus (--exclude). Every step is seeded: reruns give the same files
# (up to floating-point summation order of the BLAS build).
set -eu
BIN=${1:-build/attnscope}
WORK=${2:-build/models-work}
D=${AS_DATA:-../shared/data}
THREADS=${THREADS:-1}
export OMP_WAIT_POLICY=PASSIVE
CORPUS=$D/corpus/tinyshakespeare.txt,$D/corpus/rt_snippets.txt,$D/ud/en_ewt-ud-train.conllu,$D/sst2/train.tsv
HELDOUT=$D/sst2/dev.tsv,$D/sst2/test.tsv
mkdir -p "$WORK"

# 1. WordPiece vocabulary, 8192 entries (characters seen < 5 times left out)
"$BIN" vocab --corpus "$CORPUS" --exclude "$HELDOUT" --size 8192 --min-char-count 5 --out "$WORK/vocab.txt"

# 2. masked-LM pretraining: 16000 steps x 16 pairs x 64 tokens (16.4 M tokens), peak lr 1e-3,
#    dropout off (compute-bound regime, as in Geiping & Goldstein 2023 "Cramming"); weights
#    N(0, 0.06) and sinusoidal starting positions, so that attention leaves the uniform
#    plateau early; ~70 min on one core
"$BIN" pretrain --corpus "$CORPUS" --exclude "$HELDOUT" --vocab "$WORK/vocab.txt" --out "$WORK/mlm" \
  --layers 4 --width 128 --heads 4 --ff 512 --max-len 128 --seq-len 64 --batch 16 --steps 16000 \
  --lr 1e-3 --dropout 0 --init-range 0.06 --pos-init sinusoidal --save-every 1000 --log-every 50 \
  --threads "$THREADS" --seed 1234

# 3. SST-2 classifier: 2 epochs over the 67k training phrases, best dev epoch kept
"$BIN" finetune --task sst2 --model "$WORK/mlm" --train "$D/sst2/train.tsv" --dev "$D/sst2/dev.tsv" \
  --out "$WORK/sst2" --epochs 2 --batch 32 --lr 1e-4 --dropout 0.1 --threads "$THREADS" --seed 42

# 4. distilled 2-layer student, then its SST-2 classifier
"$BIN" distill --teacher "$WORK/mlm" --corpus "$CORPUS" --exclude "$HELDOUT" --out "$WORK/student-mlm" \
  --steps 600 --batch 32 --max-len 64 --lr 5e-4 --threads "$THREADS" --seed 99
"$BIN" finetune --task sst2 --model "$WORK/student-mlm" --train "$D/sst2/train.tsv" --dev "$D/sst2/dev.tsv" \
  --out "$WORK/sst2-student" --epochs 2 --batch 32 --lr 1e-4 --dropout 0.1 --threads "$THREADS" --seed 42

# 5. copy the shipped files (F16 weights, config, tokenizer) into models/
for pair in mlm:attnscope-mlm sst2:attnscope-sst2 sst2-student:attnscope-sst2-student; do
  src=$WORK/${pair%%:*}; dst=models/${pair#*:}
  mkdir -p "$dst"
  cp "$src/config.json" "$src/model.safetensors" "$src/vocab.txt" "$src/tokenizer_config.json" \
     "$src/tokenizer.json" "$dst/"
done
cp "$WORK/mlm/train_log.tsv" models/attnscope-mlm/train_log.tsv
/usr/bin/python3 bench/train_plot.py models/attnscope-mlm/train_log.tsv models/attnscope-mlm/training_curve.svg \
  "attnscope-mlm pretraining (L=4, D=128, batch 16 x 64 tokens)" || true

# 6. metrics for docs/models.md
"$BIN" eval --model models/attnscope-sst2 --task sst2 --data "$D/sst2/dev.tsv"
"$BIN" eval --model models/attnscope-sst2-student --task sst2 --data "$D/sst2/dev.tsv"
"$BIN" eval --model models/attnscope-mlm --task mlm --data "$D/ud/en_ewt-ud-dev.conllu"
"$BIN" eval --model models/attnscope-mlm --task patterns --data "$D/ud/en_ewt-ud-dev.conllu"
