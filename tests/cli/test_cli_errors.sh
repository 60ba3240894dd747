#!/usr/bin/env bash
# CLI exit statuses and one-line errors of the real binary (bad input -> 2 with a
# message naming what is wrong; success -> 0). Usage: test_cli_errors.sh BINARY
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
M=$ROOT/models/demo-bert
expect 0 "" -- --help
expect 0 "" -- run --help
expect 0 "" -- info --help
expect 0 "" -- bench --help
expect 2 "bad --layer" -- bench --model "$M" --tokens 4 --layer x
expect 2 "over the model's" -- bench --model "$M" --tokens 4 --layer 7
expect 2 "--capture must be" -- bench --model "$M" --tokens 4 --capture attn,bogus
expect 0 "" -- bench --model "$M" --tokens 4 --repeat 1 --layer 1 --capture attn,logits
grep -q "median_ms" "$TMP/out" || { echo "FAIL: bench --layer 1 printed no timing: $(cat "$TMP/out")"; fails=$((fails+1)); }
expect 2 "is not one of rollout" -- bench --model "$M" --tokens 4 --attrib rollout,grad
expect 2 "not with --saliency" -- bench --model "$M" --tokens 4 --attrib norm --capture attn
expect 0 "" -- bench --model "$M" --tokens 6 --repeat 1 --attrib rollout,flow,norm,norm2,alti
for meth in rollout flow norm norm2 alti; do
    grep -q "^attrib $meth  median_ms .* cpu_of_forward" "$TMP/out" ||
        { echo "FAIL: bench --attrib printed no $meth line: $(cat "$TMP/out")"; fails=$((fails+1)); }
done
expect 2 "unknown command" -- frobnicate
expect 2 "required" -- run --text hi
expect 2 "exactly one" -- run --model "$M"
expect 2 "config.json" -- run --model "$TMP/nowhere" --text hi
expect 2 "unknown option" -- run --model "$M" --text hi --bogus
expect 2 "needs a value" -- run --model "$M" --text
expect 2 "empty" -- run --model "$M" --text ""
expect 2 "bad --layer" -- run --model "$M" --text hi --layer x
expect 2 "layer 7 is out of range" -- run --model "$M" --text hi --layer 7
expect 2 "head 9 is out of range" -- run --model "$M" --text hi --head 9
expect 2 "outside the vocabulary" -- run --model "$M" --ids 1,2,999999
expect 2 "bad --ids" -- run --model "$M" --ids 1,,2
expect 2 "json or npz" -- run --model "$M" --text hi --format xml
expect 2 "needs --out" -- run --model "$M" --text hi --format npz
expect 2 "tokens" -- run --model "$M" --text "$(printf 'word %.0s' $(seq 1 300))" --no-truncate
expect 0 "" -- run --model "$M" --text "$(printf 'word %.0s' $(seq 1 300))" --quiet
expect 0 "" -- run --model "$M" --text "the king is dead" --text-b "long live the king"
expect 0 "" -- run --model "$M" --text $'bad \xff\xfe utf8' --quiet
# a sentence pair on a model without segment embeddings (DistilBERT) whose WordPiece
# tokenizer gives sentence B type id 1: the ids are zeroed as Hugging Face does (was an
# "out of range" error), and B's tokens still belong to sentence B (segment 1; the
# specials [CLS], [SEP] belong to the sentence before them)
FIXD=$ROOT/tests/ref/fixtures/models/distilbert
mkdir -p "$TMP/distil" && cp "$FIXD/config.json" "$FIXD/model.safetensors" "$TMP/distil/"
{ printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]'; for c in {a..z}; do echo "$c"; done
  for i in $(seq 37 111); do echo "w$i"; done; } >"$TMP/distil/vocab.txt"
expect 0 "" -- run --model "$TMP/distil" --text "a b c" --text-b "d e" --format json --out "$TMP/pair.json"
if python3 -c "import json,sys; t=json.load(open(sys.argv[1]))['tokens']; sys.exit(0 if [x['type_id'] for x in t]==[0]*8 and [x['segment'] for x in t]==[0,0,0,0,0,1,1,1] and [x['special'] for x in t]==[True,False,False,False,True,False,False,True] else 1)" "$TMP/pair.json"; then
  echo "ok: DistilBERT pair: type ids 0, sentences A/B kept"
else
  echo "FAIL: DistilBERT pair tokens: $(head -c 600 "$TMP/pair.json")"; fails=$((fails+1))
fi
expect 0 "" -- info --model "$M"
grep -q "^scores: *q.k / sqrt(head width)$" "$TMP/out" || { echo "FAIL: info's scores line: $(cat "$TMP/out")"; fails=$((fails+1)); }
expect 0 "" -- info --model "$ROOT/tests/ref/fixtures/models/gpt2_scaling"
grep -q "^scores: *q.k / (layer + 1)$" "$TMP/out" || { echo "FAIL: info of gpt2_scaling: $(cat "$TMP/out")"; fails=$((fails+1)); }
# run's JSON states each captured layer's factor: 1, 1/2, 1/3 there; 1/sqrt(16) for demo-bert
expect 0 "" -- run --model "$ROOT/tests/ref/fixtures/models/gpt2_scaling" --ids 1,2,3 --format json --out "$TMP/g.json" --quiet
expect 0 "" -- run --model "$M" --text "a b" --layer 1 --format json --out "$TMP/b.json" --quiet
if python3 -c "
import json, sys
g = json.load(open(sys.argv[1]))['score_scale']; b = json.load(open(sys.argv[2]))['score_scale']
ok = len(g) == 3 and all(abs(x - 1 / (l + 1)) < 1e-6 for l, x in enumerate(g)) and b == [0.25]
sys.exit(0 if ok else 1)" "$TMP/g.json" "$TMP/b.json"; then
  echo "ok: score_scale in run's JSON"
else
  echo "FAIL: score_scale: $(grep -o '"score_scale":[^]]*' "$TMP/g.json" "$TMP/b.json")"; fails=$((fails+1))
fi
# a WordLevel tokenizer is not implemented: the model still runs on token ids, and text
# gets an error that says so
mkdir -p "$TMP/ug" && cp "$M/config.json" "$M/model.safetensors" "$TMP/ug/"
printf '%s' '{"model":{"type":"WordLevel","vocab":{"<unk>":0,"a":1},"unk_token":"<unk>"}}' > "$TMP/ug/tokenizer.json"
expect 0 "" -- run --model "$TMP/ug" --ids 2,5,3
grep -q "unsupported model type \"WordLevel\".*token ids only" "$TMP/err" || { echo "FAIL: no warning for the WordLevel tokenizer: $(cat "$TMP/err")"; fails=$((fails+1)); }
expect 2 'unsupported model type "WordLevel" (WordPiece, BPE or Unigram); give token ids instead (--ids)' -- run --model "$TMP/ug" --text "a b"
expect 0 "" -- info --model "$TMP/ug"
grep -q '^tokenizer: *not used (.*"WordLevel".*; use --ids)$' "$TMP/out" || { echo "FAIL: info of the WordLevel folder: $(cat "$TMP/out")"; fails=$((fails+1)); }
# relative position embeddings are refused by name, not run as absolute ones
mkdir -p "$TMP/rel" && cp "$M"/* "$TMP/rel/"
sed -i 's/^{/{"position_embedding_type": "relative_key", /' "$TMP/rel/config.json"
expect 2 "position_embedding_type' = 'relative_key' is not supported" -- run --model "$TMP/rel" --text "a"
expect 0 "" -- run --model "$M" --text "to be or not to be" --format json --out "$TMP/o.json"
expect 0 "" -- run --model "$M" --text "to be or not to be" --out "$TMP/o.npz" --layer 1 --head 2
# a corrupt checkpoint: header length past the end of the file
mkdir -p "$TMP/bad"; cp "$M/config.json" "$M/vocab.txt" "$TMP/bad/"
printf '\xff\xff\xff\x00\x00\x00\x00\x00{}' > "$TMP/bad/model.safetensors"
expect 2 "model.safetensors" -- run --model "$TMP/bad" --text hi
# truncated weights file
head -c 5000 "$M/model.safetensors" > "$TMP/bad/model.safetensors"
expect 2 "model.safetensors" -- info --model "$TMP/bad"
# the JSON written above parses and has the expected shapes
if command -v python3 >/dev/null; then
  python3 - "$TMP/o.json" <<'PY' || { echo "FAIL: json output"; fails=$((fails+1)); }
import json, sys
d = json.load(open(sys.argv[1]))
T = len(d["tokens"])
assert T == len(d["input_ids"]) == 8, T   # [CLS] to be or not to be [SEP]
a = d["attentions"]
assert len(a) == 2 and len(a[0]) == 4 and len(a[0][0]) == T and len(a[0][0][0]) == T
for row in a[1][3]:
    assert abs(sum(row) - 1) < 1e-5
assert len(d["hidden_states"]) == 3 and len(d["queries"][0][0][0]) == 16
print("ok: json output shapes")
PY
fi
# the npz written above: Hugging Face-style names, tokens as unicode, one layer/head
if /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
  /usr/bin/python3 - "$TMP/o.npz" <<'PY' || { echo "FAIL: npz output"; fails=$((fails+1)); }
import sys
import numpy as np
d = np.load(sys.argv[1])
assert d["tokens"].tolist() == ["[CLS]", "to", "be", "or", "not", "to", "be", "[SEP]"], d["tokens"]
assert d["attentions"].shape == (1, 1, 8, 8) and d["layers"].tolist() == [1] and d["heads"].tolist() == [2]
assert np.allclose(d["attentions"].sum(-1), 1, atol=1e-5)
assert d["hidden_states"].shape == (3, 8, 64) and d["queries"].shape == (1, 1, 8, 16)
assert d["offsets"].tolist()[:3] == [[-1, -1], [0, 2], [3, 5]]
print("ok: npz output")
PY
else
  echo "FAIL: npz check needs /usr/bin/python3 with numpy (make deps installs python3-numpy)"; fails=$((fails+1))
fi
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all CLI checks passed"
