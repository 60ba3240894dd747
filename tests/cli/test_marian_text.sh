#!/bin/bash
# test_marian_text.sh — text in and out of a Marian folder without tokenizer.json
# (vocab.json + source.spm + target.spm): the random marian_tiny weights (101 ids) with the
# SentencePiece models of tests/ref/fixtures/marian_spm and its vocab.json cut to ids below
# 100 ("<pad>" 100, the rest <unk>, as the fixture's ids map). `run --text --target` must
# give the fixture's source ids and the target ids shifted right (decoder_start 100 first);
# `generate --text` must print the generated ids' pieces as text ("▁" as a space, specials
# left out); bad folders (vocab.json without </s>, a truncated source.spm, no target.spm)
# exit 2 with one line.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
FX=$ROOT/tests/ref/fixtures
D=$TMP/marian
make_marian_tiny "$D"
for i in 0 16 19; do
  read -r TEXT < <($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['lines'][int(sys.argv[2])])" \
    "$FX/marian_spm/expected.json" "$i")
  expect 0 "" -- run --model "$D" --text "$TEXT" --target "$TEXT" --capture attn --format json --out "$TMP/r$i.json"
  $PY - "$FX/marian_spm/expected.json" "$i" "$TMP/r$i.json" <<'PY' && ok "line $i: source ids, target ids shifted" || fail "line $i ids"
import json, sys
e, i, r = json.load(open(sys.argv[1])), int(sys.argv[2]), json.load(open(sys.argv[3]))
cut = lambda ids: [x if x < 100 else 1 for x in ids]
src, tgt = cut(e["source"][i]), cut(e["target"][i])
assert r["input_ids"] == src, (r["input_ids"], src)
assert r["decoder_input_ids"] == [100] + tgt[:-1], (r["decoder_input_ids"], tgt)
assert e["source"][i] != e["target"][i]  # the two sides' models differ on this line
PY
done
# generate: the text printed is the generated pieces joined
expect 0 "" -- generate --model "$D" --text "the old house" --max-new 6 --out "$TMP/g.json"
cp "$TMP/out" "$TMP/g.txt"
$PY - "$D/vocab.json" "$TMP/g.json" "$TMP/g.txt" <<'PY' && ok "generate prints the pieces as text" || fail "generate text"
import json, sys
v = {i: p for p, i in json.load(open(sys.argv[1], encoding="utf-8")).items()}
g = json.load(open(sys.argv[2]))
ids = g["decoder_input_ids"]
assert ids[0] == 100 and len(ids) == 7 and g["input_ids"][-1] == 0
want = "".join(v[i].replace("\u2581", " ") for i in ids if i not in (0, 100))
got = open(sys.argv[3], encoding="utf-8").read()
assert got == want + "\n", (got, want)
PY
# bad folders
B=$TMP/bad
mkdir -p "$B"
cp "$D"/* "$B/"
$PY -c "
import json, sys
v = json.load(open(sys.argv[1], encoding='utf-8')); del v['</s>']
json.dump(v, open(sys.argv[1], 'w', encoding='utf-8'))" "$B/vocab.json"
expect 2 'no "</s>" entry' -- run --model "$B" --text "the old house" --target "das Haus"
cp "$D/vocab.json" "$B/"
head -c 3000 "$D/source.spm" >"$B/source.spm"
expect 2 "source.spm" -- run --model "$B" --text "the old house" --target "das Haus"
cp "$D/source.spm" "$B/"
rm "$B/target.spm"
expect 2 "no tokenizer files" -- run --model "$B" --text "the old house" --target "das Haus"
exit $((fails > 0))
