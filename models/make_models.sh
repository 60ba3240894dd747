#!/bin/sh
# make_models.sh — reproduces attnscope's shipped models from scratch with the attnscope
# binary (run by `make models`; not part of CI: about 95 minutes on one core for the encoders).
#   models/attnscope-mlm           4-layer BERT masked-LM, pretrained here
#   models/attnscope-sst2          its SST-2 classifier
#   models/attnscope-sst2-student  2-layer distilled student, fine-tuned on SST-2
#   models/attnscope-lm            6-layer Llama causal LM (BF16), trained here with train-lm
#                                  (about 3 hours on one core; `make models-lm` runs it alone)
# Usage: models/make_models.sh [BIN] [WORK_DIR] [PART]   (defaults: build/attnscope,
#        build/models-work, all; PART encoders = the first three, lm = the decoder)
# Data: ../shared/data (corpus/, ud/, sst2/); SST-2 dev and test sentences are removed
# from the pretraining corpus (--exclude), and also UD EWT dev and test from the decoder's.
# Every step is seeded: reruns give the same files (up to floating-point summation order
# of the BLAS build).
set -eu
BIN=${1:-build/attnscope}
WORK=${2:-build/models-work}
PART=${3:-all}
case $PART in all|encoders|lm) ;; *) echo "make_models.sh: PART must be all, encoders or lm, not '$PART'" >&2; exit 2;; esac
D=${AS_DATA:-../shared/data}
THREADS=${THREADS:-1}
export OMP_WAIT_POLICY=PASSIVE
CORPUS=$D/corpus/tinyshakespeare.txt,$D/corpus/rt_snippets.txt,$D/ud/en_ewt-ud-train.conllu,$D/sst2/train.tsv
HELDOUT=$D/sst2/dev.tsv,$D/sst2/test.tsv
mkdir -p "$WORK"

# ---- the encoders ---------------------------------------------------------------------
encoders() {
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
}

# ---- the decoder: models/attnscope-lm ---------------------------------------------------
# A LlamaForCausalLM of 6 layers, width 256, 8 query / 2 key-value heads of 32, SwiGLU 768,
# RoPE theta 10000, tied embeddings, trained on 256-token windows: 2400 steps x 16 x 256
# tokens (9.8 M tokens) of Shakespeare, RT snippets, Austen (every 20th paragraph held
# out), the King James Bible, UD EWT train and SST-2 train sentences, with a byte-level
# BPE of 8192; from step 1600 on, a share of the windows get a span repeated right after
# itself (step 4). A stopped run continues where its last checkpoint (every 100 steps) left
# off: running the script again resumes it, with the same weights as an uninterrupted run.
decoder() {
  LM=$WORK/lm-work
  mkdir -p "$LM"
  # 1. Austen's held-out paragraphs (every 20th), the rest for training
  awk -v RS= -v ORS='\n\n' 'NR%20==0' "$D/corpus/austen.txt" > "$LM/austen-heldout.txt"
  awk -v RS= -v ORS='\n\n' 'NR%20!=0' "$D/corpus/austen.txt" > "$LM/austen-train.txt"
  LM_CORPUS=$D/corpus/tinyshakespeare.txt,$D/corpus/rt_snippets.txt,$LM/austen-train.txt,$D/corpus/kjv.txt
  LM_CORPUS=$LM_CORPUS,$D/ud/en_ewt-ud-train.conllu,$D/sst2/train.tsv
  LM_HELDOUT=$D/sst2/dev.tsv,$D/sst2/test.tsv,$D/ud/en_ewt-ud-dev.conllu,$D/ud/en_ewt-ud-test.conllu

  # 2. byte-level BPE vocabulary, 8192 entries
  "$BIN" vocab --type bpe --corpus "$LM_CORPUS" --exclude "$LM_HELDOUT" --size 8192 --out "$LM/tok"

  # 3. the initial weights: N(0, 0.02), o_proj / down_proj scaled by 1/sqrt(2 L) (GPT-2)
  /usr/bin/python3 bench/make_llama_checkpoint.py "$LM/init" --dtype f32 --layers 6 --width 256 --heads 8 \
    --kv-heads 2 --ff 768 --vocab 8192 --positions 512 --tie --bos 0 --eos 1 --rope-theta 10000 --seed 1 \
    --scaled-residual
  cp "$LM/tok/tokenizer.json" "$LM/tok/tokenizer_config.json" "$LM/init/"

  # 4. causal-LM training, peak lr 1.5e-3 after 100 warmup steps, cosine to 10%, in the
  #    stages the shipped model went through, each resumed from the previous one's
  #    checkpoint (a stage interrupted is resumed too; a finished one is skipped; the
  #    weights do not depend on the thread count):
  #    steps 1-1600 plain on a 2400-step schedule; 1601-2000 with 30% of the windows
  #    holding a repeated span (--repeat-frac); then a 3400-step schedule with 50% repeated
  #    windows, stopped after step 2800. Then the induction-head curriculum on an
  #    8000-step schedule: 2801-3700 on 16-token windows, each holding a span of random
  #    ids repeated (short windows: the copying circuit forms in a few hundred steps
  #    there, not in thousands as on 256 tokens); 3701-4000 the same on 64-token windows
  #    (the circuit reaches 50 tokens back); 4001-4200 256-token windows, half of them
  #    with a repeated span, half of those random; 4201-4400 the same with half of the
  #    windows moved back to their document's BOS (--bos-start); 4401-4500 every window
  #    from a BOS, weight decay 0.3; 4501-4900 a 5300-step schedule (lr 2.3e-4 falling to
  #    1.7e-4), stopped after step 4900, with 30% repeated windows and 60% from a BOS.
  #    (Moving windows to their document's start repeats each document's first window, so
  #    the held-out perplexity rose.) Last, 4901-5600 on a 5600-step schedule (lr 2.0e-4
  #    falling to 1.5e-4): every window at its random offset with BOS as its first token
  #    (--bos-prefix 1: the first-token sink forms on BOS, where prompts start, and the
  #    text stays uniformly sampled), 30% repeated windows, weight decay 0.3.
  lm_stage() { # NAME, then the options of the stage
    name=$1
    shift
    [ -f "$LM/stage-$name.done" ] && return 0
    resume=
    [ -f "$LM/lm/checkpoint/optimizer.safetensors" ] && resume=--resume
    ( "$BIN" train-lm --model "$LM/init" --corpus "$LM_CORPUS" --exclude "$LM_HELDOUT" --out "$LM/lm" \
        --batch 16 --seq 256 --lr 1.5e-3 --warmup 100 --wd 0.1 --clip 1.0 --log-every 10 --save-every 100 \
        --threads "$THREADS" --seed 2026 "$@" $resume
      echo $? > "$LM/lm_train.status" ) | tee -a "$LM/lm_train.log"
    [ "$(cat "$LM/lm_train.status")" = 0 ]
    touch "$LM/stage-$name.done"
  }
  lm_stage plain --steps 2400 --stop-after 1600
  lm_stage repeat30 --steps 2400 --repeat-frac 0.3 --repeat-from 1600 --stop-after 2000
  lm_stage repeat50 --steps 3400 --repeat-frac 0.5 --repeat-from 2000 --stop-after 2800
  lm_stage induct16 --steps 8000 --batch 128 --seq 16 --repeat-frac 1 --repeat-random 1 --stop-after 3700
  lm_stage induct64 --steps 8000 --batch 32 --seq 64 --repeat-frac 1 --repeat-random 1 --stop-after 4000
  lm_stage text256 --steps 8000 --repeat-frac 0.5 --repeat-random 0.5 --stop-after 4200
  lm_stage bos50 --steps 8000 --repeat-frac 0.5 --repeat-random 0.5 --bos-start 0.5 --stop-after 4400
  lm_stage bos100 --steps 8000 --repeat-frac 0.5 --repeat-random 0.5 --bos-start 1 --wd 0.3 --stop-after 4500
  lm_stage recover --steps 5300 --repeat-frac 0.3 --repeat-random 0.5 --bos-start 0.6 --stop-after 4900
  lm_stage sink --steps 5600 --repeat-frac 0.3 --repeat-random 0.5 --bos-prefix 1 --wd 0.3

  # 5. shipped in BF16, with the training log and its curve
  /usr/bin/python3 models/to_bf16.py "$LM/lm" models/attnscope-lm
  cp "$LM/lm_train.log" models/attnscope-lm/train_log.txt
  /usr/bin/python3 bench/train_plot.py "$LM/lm_train.log" models/attnscope-lm/training_curve.svg \
    "attnscope-lm training (Llama L=6, D=256, 8/2 heads, batch 16 x 256 tokens)"

  # 6. its heads and in-context learning for docs/models.md (the checks of the shipped weights)
  "$BIN" probe --model models/attnscope-lm --induction
  bash tests/cli/test_decoder_model.sh "$BIN"
}

if [ "$PART" != lm ]; then encoders; fi
if [ "$PART" != encoders ]; then decoder; fi
