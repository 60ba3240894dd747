#!/usr/bin/env bash
# CLI of the training subcommands (vocab, pretrain, finetune, eval, distill): bad
# arguments, bad configurations and unreadable corpora exit 2 with a one-line error
# naming the problem; a tiny vocab -> pretrain -> finetune -> eval chain runs (seconds).
# Usage: test_train_cli.sh BINARY
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
# a small corpus and labelled TSVs
for i in $(seq 1 60); do
  echo "the film was good and the actors were great number $i ."
  echo "a bad movie with a dull story , it was not good ."
  [ $((i % 10)) = 0 ] && echo
done > "$TMP/c.txt"
{ echo -e "sentence\tlabel"; for i in $(seq 1 40); do echo -e "a good and great film\t1"; echo -e "a bad and dull movie\t0"; done; } > "$TMP/t.tsv"
printf 'index\tsentence\n0\ta dull story\n' > "$TMP/test.tsv"
printf 'text\tlabel\na dull story\t0\n' > "$TMP/bad.tsv"

expect 0 "" -- vocab --help
expect 0 "" -- pretrain --help
expect 0 "" -- finetune --help
expect 0 "" -- eval --help
expect 0 "" -- distill --help
expect 2 "required" -- vocab --corpus "$TMP/c.txt"
expect 2 "bad --size" -- vocab --corpus "$TMP/c.txt" --size 10 --out "$TMP/v.txt"
expect 2 "nowhere.txt" -- vocab --corpus "$TMP/nowhere.txt" --size 100 --out "$TMP/v.txt"
expect 2 "header" -- vocab --corpus "$TMP/c.txt" --exclude "$TMP/bad.tsv" --size 100 --out "$TMP/v.txt"
expect 0 "" -- vocab --corpus "$TMP/c.txt" --exclude "$TMP/test.tsv" --size 100 --out "$TMP/v.txt"
P="--corpus $TMP/c.txt --vocab $TMP/v.txt --out $TMP/m --layers 2 --width 16 --heads 2 --ff 32 --max-len 32 --batch 4 --threads 1"
expect 2 "not divisible" -- pretrain $P --heads 3 --steps 2
expect 2 "bad --lr" -- pretrain $P --lr -1
expect 2 "unknown option" -- pretrain $P --bogus 1
expect 2 "nowhere.txt" -- pretrain $P --corpus "$TMP/nowhere.txt" --steps 2
expect 2 "--resume" -- pretrain $P --steps 2 --resume
expect 2 "bad --pos-init" -- pretrain $P --steps 2 --pos-init learned
expect 2 "bad --init-range" -- pretrain $P --steps 2 --init-range 0
# sinusoidal start at --init-range 0.05: after 1 step at lr 1e-8 the position table is
# still 0.05 * sqrt(2) * sin/cos(p / 10000^(2i/D)), and config.json records the range
expect 0 "" -- pretrain $P --steps 1 --lr 1e-8 --dtype f32 --out "$TMP/sin" --pos-init sinusoidal --init-range 0.05
/usr/bin/python3 - "$TMP/sin" <<'PY' || { echo "FAIL: sinusoidal position embeddings"; fails=$((fails+1)); }
import json, math, struct, sys
d = sys.argv[1]
cfg = json.load(open(d + "/config.json"))
assert abs(cfg["initializer_range"] - 0.05) < 1e-9, cfg["initializer_range"]
raw = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n])
name = [k for k in hdr if k.endswith("position_embeddings.weight")][0]
t = hdr[name]; P, D = t["shape"]; a, b = t["data_offsets"]
w = struct.unpack("<%df" % (P * D), raw[8 + n + a:8 + n + b])
err = max(abs(w[p * D + i] - 0.05 * math.sqrt(2) * (math.cos if i % 2 else math.sin)(p / 10000 ** ((i - i % 2) / D)))
          for p in range(P) for i in range(D))
assert err < 1e-5, err
PY
expect 0 "" -- pretrain $P --steps 6 --save-every 3 --dtype f32
# --precision bf16 (BF16 products, F32 master weights): 40 seeded steps follow F32's loss
# curve (train_log.tsv) within 3% and change the weights; finetune and distill take it too
expect 2 "--precision must be f32 or bf16" -- pretrain $P --steps 2 --precision f16
for p in f32 bf16; do
  expect 0 "" -- pretrain $P --width 32 --ff 64 --steps 40 --log-every 5 --dropout 0 --dtype f32 --out "$TMP/p_$p" --precision $p
done
/usr/bin/python3 - "$TMP/p_f32/train_log.tsv" "$TMP/p_bf16/train_log.tsv" <<'PY' || { echo "FAIL: bf16 pretraining curve"; fails=$((fails+1)); }
import sys
curve = lambda f: [float(l.split("\t")[1]) for l in open(f).read().splitlines()[1:]]
a, b = curve(sys.argv[1]), curve(sys.argv[2])
gap = max(abs(x - y) for x, y in zip(a, b))
print("pretrain bf16: loss %.4f -> %.4f, F32 %.4f -> %.4f, largest gap %.4f" % (b[0], b[-1], a[0], a[-1], gap))
assert len(a) == len(b) == 8 and gap <= 0.03 * a[0] and b[-1] < b[0] and a != b
PY
cmp -s "$TMP/p_f32/model.safetensors" "$TMP/p_bf16/model.safetensors" && { echo "FAIL: bf16 gave F32's weights"; fails=$((fails+1)); }
expect 0 "" -- eval --model "$TMP/m" --task mlm --data "$TMP/c.txt" --batches 2 --batch 4 --max-len 32
grep -q "^mlm_accuracy: 0\.[0-9]\{4\}$" "$TMP/out" || { echo "FAIL: mlm eval output"; fails=$((fails+1)); }
expect 0 "" -- eval --model "$TMP/m" --task patterns --data "$TMP/c.txt" --pairs 5
grep -q "^strongest next token head: layer [0-9]* head [0-9]* (0\.[0-9]*)$" "$TMP/out" || { echo "FAIL: patterns output"; fails=$((fails+1)); }
expect 2 "no sequence-classification head" -- eval --model "$TMP/m" --task sst2 --data "$TMP/t.tsv"
expect 2 "unknown --task" -- eval --model "$TMP/m" --task qnli --data "$TMP/t.tsv"
expect 2 "unknown task" -- finetune --task qnli --model "$TMP/m" --train "$TMP/t.tsv" --dev "$TMP/t.tsv" --out "$TMP/f"
expect 0 "" -- finetune --task sst2 --model "$TMP/m" --train "$TMP/t.tsv" --dev "$TMP/t.tsv" --out "$TMP/f" --epochs 1 --batch 8 --threads 1
expect 0 "" -- finetune --task sst2 --model "$TMP/m" --train "$TMP/t.tsv" --dev "$TMP/t.tsv" --out "$TMP/fb" --epochs 1 --batch 8 --threads 1 --precision bf16
expect 0 "" -- eval --model "$TMP/fb" --task sst2 --data "$TMP/t.tsv"
expect 0 "" -- eval --model "$TMP/f" --task sst2 --data "$TMP/t.tsv"
tail -n 1 "$TMP/out" | grep -q "^accuracy: [01]\.[0-9]\{4\}$" || { echo "FAIL: eval's last line: $(tail -n 1 "$TMP/out")"; fails=$((fails+1)); }
grep -q '"POSITIVE"' "$TMP/f/config.json" || { echo "FAIL: id2label"; fails=$((fails+1)); }
expect 2 "header" -- eval --model "$TMP/f" --task sst2 --data "$TMP/test.tsv"
expect 0 "" -- distill --teacher "$TMP/m" --corpus "$TMP/c.txt" --out "$TMP/s" --steps 2 --batch 4 --max-len 32 --threads 1
expect 0 "" -- distill --teacher "$TMP/m" --corpus "$TMP/c.txt" --out "$TMP/sb" --steps 2 --batch 4 --max-len 32 --threads 1 --precision bf16
expect 2 "at least\|>= 2 layers\|masked-LM" -- distill --teacher "$TMP/f" --corpus "$TMP/c.txt" --out "$TMP/s2" --steps 2
# a decoder (is_decoder: true, causal attention) is not trained as an encoder
mkdir -p "$TMP/dec" && cp "$TMP/f"/* "$TMP/dec/"
sed -i 's/^{/{"is_decoder": true, /' "$TMP/dec/config.json"
expect 0 "" -- run --model "$TMP/dec" --text "a good film" --quiet
expect 2 "not decoders" -- finetune --task sst2 --model "$TMP/dec" --train "$TMP/t.tsv" --dev "$TMP/t.tsv" --out "$TMP/f2" --epochs 1
# saliency runs the one forward and its backward, causal attention included
expect 0 "" -- saliency --model "$TMP/dec" --text "a good film"
# and a masked-LM's head in a decoder predicts the next token: a causal LM, not a masked LM
mkdir -p "$TMP/dec2" && cp "$TMP/m"/* "$TMP/dec2/" 2>/dev/null
sed -i 's/^{/{"is_decoder": true, /' "$TMP/dec2/config.json"
expect 0 "" -- info --model "$TMP/dec2"
grep -q "^task heads: *causal-lm$" "$TMP/out" || { echo "FAIL: decoder heads: $(cat "$TMP/out")"; fails=$((fails+1)); }
expect 0 "" -- info --model "$TMP/m"
grep -q "^task heads: *masked-lm$" "$TMP/out" || { echo "FAIL: encoder heads: $(cat "$TMP/out")"; fails=$((fails+1)); }
echo "$fails failure(s)"
[ "$fails" = 0 ]
