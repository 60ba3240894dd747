#!/usr/bin/env bash
# Input files that are not regular files, and damaged input files, with the real binary:
#  1. a FIFO (no writer), /dev/zero or a directory given as any input file (config.json,
#     vocab.txt, tokenizer.json, model.safetensors, --sst2, --conllu, --data, --tokens,
#     --attention, --corpus) exits 2 at once with "PATH: not a regular file" (each run is
#     under `timeout 10`, so a loader that waits on the FIFO fails instead of hanging).
#  2. a checkpoint with a NaN or infinity in one weight (F32, F16, BF16 bit patterns
#     patched into a copy of a fixture model) is refused at load, naming the tensor; finite
#     weights whose classifier logits overflow print no prediction and exit 2.
# Usage: test_loaders.sh BINARY
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
EXPECT_TIMEOUT=10 # a loader that waits on a FIFO fails in 10 s instead of hanging
M=$ROOT/models/demo-bert
F=$ROOT/tests/ref/fixtures/import_files

# ---- 1. not regular files ---------------------------------------------------------------
mkfifo "$TMP/fifo"
# model_with FILE KIND: a copy of the demo model whose FILE is a FIFO, /dev/zero or a folder
model_with() {
  local d=$TMP/m-$1-$2
  mkdir -p "$d" && cp "$M"/* "$d"/ && rm -f "$d/$1"
  case $2 in
    fifo) mkfifo "$d/$1" ;;
    zero) ln -s /dev/zero "$d/$1" ;;
    dir) mkdir "$d/$1" ;;
  esac
  echo "$d"
}
for kind in fifo zero dir; do
  for file in config.json vocab.txt tokenizer_config.json model.safetensors; do
    d=$(model_with $file $kind)
    expect 2 "$file: not a regular file" -- run --model "$d" --text "the cat"
  done
done
# tokenizer.json: a copy of the BPE fixture model
d=$TMP/m-tokjson && mkdir -p "$d" && cp "$ROOT"/tests/ref/fixtures/models/gpt2/{config.json,model.safetensors} "$d"/
mkfifo "$d/tokenizer.json"
expect 2 "tokenizer.json: not a regular file" -- run --model "$d" --text "the cat"
expect 2 "not a regular file" -- info --model "$d"

printf 'sentence\tlabel\na good film .\t1\n' >"$TMP/s.tsv"
for p in "$TMP/fifo" /dev/zero "$TMP"; do
  expect 2 "$p: not a regular file" -- analyze --model "$M" --sst2 "$p" --db "$TMP/a.db" --quiet
  expect 2 "$p: not a regular file" -- analyze --model "$M" --conllu "$p" --db "$TMP/a.db" --quiet
  expect 2 "$p: not a regular file" -- eval --model "$ROOT/models/attnscope-sst2" --task sst2 --data "$p"
  expect 2 "$p: not a regular file" -- vocab --corpus "$p" --size 100 --out "$TMP/v.txt"
  expect 2 "$p: not a regular file" -- import --attention "$F/0000.npz" --tokens "$p" --db "$TMP/i.db" --quiet
  expect 2 "$p: not a regular file" -- import --attention "$p" --tokens "$F/0000.tokens.json" --db "$TMP/i.db" --quiet
  expect 2 "$p: not a regular file" -- import --attention "$F/0000.npz" --tokens "$F/0000.tokens.json" --saliency "$p" --db "$TMP/i.db" --quiet
  # the analysis database itself
  expect 2 "$p: not a regular file" -- analyze --model "$M" --sst2 "$TMP/s.tsv" --db "$p" --quiet
  expect 2 "$p: not a regular file" -- report --db "$p"
  expect 2 "$p: not a regular file" -- export --db "$p" --out "$TMP/h.json"
  expect 2 "$p: not a regular file" -- serve --model "$M" --db "$p" --port 0
done

# ---- 2. non-finite weights -----------------------------------------------------------------
# patch DIR TENSOR INDEX HEX: writes the little-endian element bytes HEX (4 or 2 bytes,
# by the tensor's dtype) over element INDEX of TENSOR (every element when INDEX is all)
patch() {
  /usr/bin/python3 - "$@" <<'PY' || { echo "FAIL: patching $1"; fails=$((fails+1)); }
import json, struct, sys
d, name, idx, val = sys.argv[1:5]
p = d + "/model.safetensors"
b = bytearray(open(p, "rb").read())
n = struct.unpack("<Q", b[:8])[0]
e = json.loads(b[8:8 + n])[name]
size = {"F32": 4, "F16": 2, "BF16": 2}[e["dtype"]]
v = bytes.fromhex(val)
assert len(v) == size
lo, hi = e["data_offsets"]
for i in (range((hi - lo) // size) if idx == "all" else [int(idx)]):
    o = 8 + n + lo + i * size
    b[o:o + size] = v
open(p, "wb").write(bytes(b))
PY
}
FX=$ROOT/tests/ref/fixtures/models
fixture_copy() { rm -rf "$TMP/$2" && mkdir -p "$TMP/$2" && cp "$FX/$1"/config.json "$FX/$1"/model.safetensors "$TMP/$2"/ && echo "$TMP/$2"; }
d=$(fixture_copy bert nan32) && patch "$d" bert.encoder.layer.1.attention.self.query.weight 5 0000c07f
expect 2 "tensor 'bert.encoder.layer.1.attention.self.query.weight' holds a non-finite value (NaN at element 5" -- run --model "$d" --ids 2,5,6,3
expect 2 "query.weight' holds a non-finite value" -- info --model "$d"
d=$(fixture_copy bert inf32) && patch "$d" classifier.bias 2 000080ff
expect 2 "tensor 'classifier.bias' holds a non-finite value (infinity at element 2 of 3)" -- run --model "$d" --ids 2,5,6,3
d=$(fixture_copy bert_f16 nan16) && patch "$d" bert.embeddings.word_embeddings.weight 40 007e
expect 2 "tensor 'bert.embeddings.word_embeddings.weight' holds a non-finite value (NaN at element 40" -- run --model "$d" --ids 2,5,6,3
d=$(fixture_copy bert_bf16 infbf16) && patch "$d" bert.pooler.dense.weight 0 807f
expect 2 "tensor 'bert.pooler.dense.weight' holds a non-finite value (infinity at element 0" -- run --model "$d" --ids 2,5,6,3
# finite but huge classifier weights: the logits overflow to infinity / NaN
d=$(fixture_copy bert overflow) && patch "$d" classifier.weight all ffff7f7f
expect 2 "classifier logits are not finite" -- run --model "$d" --ids 2,5,6,3
if grep -q "classifier logits:.*->" "$TMP/out"; then echo "FAIL: a prediction was printed from non-finite logits: $(cat "$TMP/out")"; fails=$((fails+1)); fi
grep -q "not finite (NaN or infinity): no prediction" "$TMP/out" || { echo "FAIL: the summary does not say the logits are not finite"; fails=$((fails+1)); }
# the unpatched fixture runs and predicts
d=$(fixture_copy bert clean)
expect 0 "" -- run --model "$d" --ids 2,5,6,3
grep -q "classifier logits: .* -> " "$TMP/out" || { echo "FAIL: no prediction from the clean fixture: $(cat "$TMP/out")"; fails=$((fails+1)); }

if [ "$fails" -ne 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "all loader checks passed"
