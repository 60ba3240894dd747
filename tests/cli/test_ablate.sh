#!/bin/bash
# test_ablate.sh — `attnscope ablate --model DIR --text|--ids ... --heads L:H,... [--mode
# zero|mean] [--knockout L:i>j,...]` (the intervene command under that name): its text table
# (before, after, change) against tests/ref/gen_intervene.py's PyTorch references: the gpt2
# fixture with heads 0:1 and 1:2 zeroed (next-token log-probabilities), bert with head 1:0
# mean-ablated and two edges knocked out (class probabilities); the same numbers as
# `intervene --format json`; bad input exits 2 with one line naming `ablate`.
# Usage: test_ablate.sh path/to/attnscope
set -u
BIN=${1:?usage: test_ablate.sh BIN}
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
FX=tests/ref/fixtures/models
PY=/usr/bin/python3
ids_of() {
  $PY - "$1" <<'PYEOF'
import json, struct, sys
import numpy as np
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
    t = h["single.input_ids"]; f.seek(base + t["data_offsets"][0])
    print(",".join(str(x) for x in np.frombuffer(f.read(t["data_offsets"][1] - t["data_offsets"][0]), "<i4")))
PYEOF
}
BERT_IDS=$(ids_of $FX/bert/expected.safetensors)
GPT2_IDS=$(ids_of $FX/gpt2/expected.safetensors)

expect 2 "attnscope ablate" -- ablate --model $FX/gpt2 --ids "$GPT2_IDS"
expect 2 "give --heads, --knockout or both" -- ablate --model $FX/gpt2 --ids "$GPT2_IDS"
expect 2 "bad head '0-1'" -- ablate --model $FX/gpt2 --ids "$GPT2_IDS" --heads 0-1
expect 2 "bad --mode 'one'" -- ablate --model $FX/gpt2 --ids "$GPT2_IDS" --heads 0:1 --mode one
expect 2 "bad edge '0:1'" -- ablate --model $FX/gpt2 --ids "$GPT2_IDS" --knockout 0:1
expect 2 "ablated head 0:4 is outside" -- ablate --model $FX/gpt2 --ids "$GPT2_IDS" --heads 0:4
expect 2 "unknown option '--head'" -- ablate --model $FX/gpt2 --ids "$GPT2_IDS" --head 0:1
expect 0 "" -- ablate --help
grep -q "intervene|ablate" "$TMP/out" && ok "ablate --help" || fail "ablate --help: $(head -2 "$TMP/out")"

check() {
  if $PY - "$@" >"$TMP/py" 2>&1; then ok "$(tail -1 "$TMP/py")"; else fail "$(tail -3 "$TMP/py")"; fi
}
REF_PY='
import json, re, struct, sys
import numpy as np
def st(path):
    out = {}
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
        for k, t in h.items():
            if k == "__metadata__": continue
            f.seek(base + t["data_offsets"][0]); b = f.read(t["data_offsets"][1] - t["data_offsets"][0])
            out[k] = np.frombuffer(b, "<f4").reshape(t["shape"])
    return out
ref = st("tests/ref/fixtures/attrib/intervene.safetensors")
'
# gpt2: the text table's "top 4 before" rows: id token before after change
expect 0 "" -- ablate --model $FX/gpt2 --ids "$GPT2_IDS" --heads 0:1,1:2 --top 4
cp "$TMP/out" "$TMP/gpt2.txt"
check "$TMP/gpt2.txt" <<EOF
$REF_PY
lines = open(sys.argv[1]).read().splitlines()
assert lines[0] == "log-probabilities at position 8:", lines[0]
i = lines.index("top 4 before the intervention:")
rows = [l.split() for l in lines[i + 2:i + 6]]
b, a = ref["gpt2.zero.base"], ref["gpt2.zero.after"]
assert [int(r[0]) for r in rows] == list(np.argsort(-b)[:4]), rows
d = 0.0
for r in rows:
    t, before, after, change = int(r[0]), float(r[-3]), float(r[-2]), float(r[-1])
    d = max(d, abs(before - b[t]), abs(after - a[t]), abs(change - (a[t] - b[t])))
assert d < 2e-5, d
assert any(abs(float(r[-1])) > 1e-3 for r in rows), "ablating two heads changes the output"
print(f"gpt2 ablate 0:1,1:2: before / after / change as PyTorch's within {d:.1e} (5 decimals)")
EOF
L=$(( $(echo "$BERT_IDS" | tr ',' '\n' | wc -l) - 1 ))
expect 0 "" -- ablate --model $FX/bert --ids "$BERT_IDS" --heads 1:0 --mode mean --knockout "0:$L>0,1:2:3>1" --renorm
cp "$TMP/out" "$TMP/bert.txt"
check "$TMP/bert.txt" <<EOF
$REF_PY
lines = open(sys.argv[1]).read().splitlines()
assert lines[0].split() == ["class", "before", "after", "change"], lines[0]
rows = [l.split() for l in lines[1:]]
b, a = np.exp(ref["bert.mean_knock.base"]), np.exp(ref["bert.mean_knock.after"])
assert len(rows) == 3, rows
d = max(max(abs(float(r[1]) - b[k]), abs(float(r[2]) - a[k]), abs(float(r[3]) - (a[k] - b[k]))) for k, r in enumerate(rows))
assert d < 2e-5, d
print(f"bert ablate 1:0 mean + knockout: class probabilities before / after / change as PyTorch's within {d:.1e}")
EOF
expect 0 "" -- intervene --model $FX/bert --ids "$BERT_IDS" --heads 1:0 --mode mean --knockout "0:$L>0,1:2:3>1" --renorm
cmp -s "$TMP/out" "$TMP/bert.txt" && ok "ablate prints what intervene prints" || fail "ablate and intervene differ"
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ablate CLI tests passed"
