#!/usr/bin/env bash
# SentencePiece Unigram tokenizers through the CLI: tiny GPT-2 folders carrying the T5-,
# XLM-R- and ALBERT-style tokenizer.json files of tests/ref/unigram_tokenizers.py (over the
# committed Unigram model with the nmt_nfkc precompiled_charsmap), and one carrying only
# that model's spiece.model with a T5Tokenizer tokenizer_config.json. For a hostile text set
# (accents, full-width and compatibility characters the charsmap rewrites, CJK, emoji,
# space runs, tabs and newlines, digits, characters outside the vocabulary, a longer text),
# `run --format json` must give the ids the Hugging Face `tokenizers` library gives
# (tests/cli/hf_encode.mjs over npm `tokenizers`, installed by `make node-deps`), the
# template's specials marked special, vocabulary pieces, readable text ("▁the" -> " the")
# and byte offsets inside the text; a damaged charsmap is a one-line error with exit
# status 2.
# Usage: test_unigram_encoding.sh BINARY
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
[ -d "$ROOT/tests/ref/node_modules/tokenizers" ] || { echo "FAIL: npm tokenizers missing (make node-deps installs it)"; exit 1; }
$PY "$ROOT/tests/ref/unigram_tokenizers.py" --variants "$ROOT/tests/ref/fixtures/unigram/tokenizer.json" "$TMP/v" ||
  { echo "FAIL: making the tokenizer variants"; exit 1; }

$PY - "$TMP/texts.json" <<'PY'
import json, sys
texts = ["Hello world", "  two  spaces   here ", "caf\u00e9 na\u00efve r\u00e9sum\u00e9", "e\u0301 composed",
         "\ufb01 ligature \u2460 \uff21\uff22\uff23 \uff76\uff9e \u337b \u2122 \u00bd", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059\u3002",
         "\U0001F600 emoji \U0001F44D\U0001F3FD", "tab\there\nnewline\r\nend", "\u0130stanbul \u00df",
         "``quoted''", "digits 1234567890 3.14", "unknown \U00020000\U00020001 \u10fffe x", "\u3000ideo\u00a0nbsp",
         "<s> literal </s> and <unk>", "The quick brown fox jumps over the lazy dog. " * 3]
json.dump(texts, open(sys.argv[1], "w"))
PY

for v in t5 xlmr albert spiece; do
  node "$ROOT/tests/cli/make_bpe_model.mjs" "$TMP/m-$v" "$TMP/v/$v" 3010 >/dev/null || { fail "making the $v model"; continue; }
  ref=$TMP/v/$v/tokenizer.json
  if [ "$v" = spiece ]; then # spiece.model only: against the file transformers' T5 converter writes
    cp "$TMP/v/spiece/spiece.model" "$TMP/m-$v/" && ref=$TMP/v/spiece_json/tokenizer.json
  fi
  node "$ROOT/tests/cli/hf_encode.mjs" "$ref" "$TMP/texts.json" > "$TMP/hf-$v.json" ||
    { fail "hf_encode $v"; continue; }
  n=$($PY -c "import json,sys; print(len(json.load(open(sys.argv[1]))))" "$TMP/texts.json")
  good=0
  for ((i = 0; i < n; i++)); do
    text=$($PY -c "import json,sys; sys.stdout.write(json.load(open(sys.argv[1]))[int(sys.argv[2])])" "$TMP/texts.json" "$i")
    if ! "$BIN" run --model "$TMP/m-$v" --text "$text" --format json --out "$TMP/o.json" 2>"$TMP/err"; then
      fail "$v text $i: $(cat "$TMP/err")"; continue
    fi
    if $PY - "$TMP/o.json" "$TMP/hf-$v.json" "$i" "$text" "$v" <<'PY'
import json, sys
o = json.loads(open(sys.argv[1], "rb").read().decode("utf-8"))
want = json.load(open(sys.argv[2]))[int(sys.argv[3])]
text, v = sys.argv[4].encode(), sys.argv[5]
toks = o["tokens"]
got = [t["id"] for t in toks]
assert got == want, (got, want)
specials = {"t5": ["</s>"], "spiece": ["</s>"], "xlmr": ["<s>", "</s>"], "albert": ["[CLS]", "[SEP]"]}[v]
assert [t["piece"] for t in toks if t["special"]] == specials, toks
for t in toks:
    if t["special"]:
        continue
    assert 0 <= t["start"] <= t["end"] <= len(text), t
    if t["piece"].startswith("\u2581"):
        assert t["text"] == " " + t["piece"][1:], t
PY
    then good=$((good + 1)); else fail "$v text $i: ids, specials or offsets differ from HF tokenizers"; fi
  done
  [ "$good" = "$n" ] && ok "$v: $n texts, ids equal to HF tokenizers, specials, pieces, readable text, offsets"
done

# a damaged charsmap (its trie size past the end) is one line naming the field, exit 2
$PY - "$TMP/m-t5/tokenizer.json" <<'PY'
import base64, json, struct, sys
j = json.load(open(sys.argv[1]))
pc = j["normalizer"]["normalizers"][0]
raw = base64.b64decode(pc["precompiled_charsmap"])
pc["precompiled_charsmap"] = base64.b64encode(struct.pack("<I", len(raw) * 2) + raw[4:]).decode()
json.dump(j, open(sys.argv[1], "w"))
PY
expect 2 "precompiled_charsmap: trie size" -- run --model "$TMP/m-t5" --text "Hello"

[ "$fails" = 0 ] && echo "all Unigram encoding checks passed" || echo "$fails Unigram encoding check(s) FAILED"
exit $((fails > 0))
