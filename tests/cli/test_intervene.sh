#!/bin/bash
# test_intervene.sh — `attnscope intervene`: exit 2 with one-line errors for bad input, and
# its JSON against tests/ref/gen_intervene.py's PyTorch references (read with numpy): the
# gpt2 fixture with heads 0:1 and 1:2 zeroed (next-token log-probabilities before and after,
# top k and the target), bert with a head mean-ablated and two edges knocked out and
# renormalised (class probabilities); a text through a real tokenizer (attnscope-sst2).
# Usage: test_intervene.sh path/to/attnscope
set -u
BIN=${1:?usage: test_intervene.sh BIN}
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

expect 2 "give --heads, --knockout or both" -- intervene --model $FX/gpt2 --ids "$GPT2_IDS"
expect 2 "bad head '1'" -- intervene --model $FX/gpt2 --ids "$GPT2_IDS" --heads 1
expect 2 "bad edge '1:2'" -- intervene --model $FX/gpt2 --ids "$GPT2_IDS" --knockout 1:2
expect 2 "bad --mode 'half'" -- intervene --model $FX/gpt2 --ids "$GPT2_IDS" --heads 0:1 --mode half
expect 2 "ablated head 3:0 is outside layers 0..2" -- intervene --model $FX/gpt2 --ids "$GPT2_IDS" --heads 3:0
expect 2 "edge 9>0 is outside the 9 tokens" -- intervene --model $FX/gpt2 --ids "$GPT2_IDS" --knockout "0:9>0"
expect 2 "position 9 out of range" -- intervene --model $FX/gpt2 --ids "$GPT2_IDS" --heads 0:1 --position 9
expect 2 "--target 116 is outside the vocabulary" -- intervene --model $FX/gpt2 --ids "$GPT2_IDS" --heads 0:1 --target 116
expect 2 "position applies to LM" -- intervene --model $FX/bert --ids "$BERT_IDS" --heads 0:1 --position 1
expect 2 "no_such_model" -- intervene --model $TMP/no_such_model --ids 1,2 --heads 0:0

check() {
  if $PY - "$@" >"$TMP/py" 2>&1; then ok "$(tail -1 "$TMP/py")"; else fail "$(tail -3 "$TMP/py")"; fi
}
REF_PY='
import json, struct, sys
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
expect 0 "" -- intervene --model $FX/gpt2 --ids "$GPT2_IDS" --heads 0:1,1:2 --top 4 --format json
cp "$TMP/out" "$TMP/gpt2.json"
check "$TMP/gpt2.json" <<EOF
$REF_PY
j = json.load(open(sys.argv[1])); b, a = ref["gpt2.zero.base"], ref["gpt2.zero.after"]
assert j["kind"] == "lm" and j["position"] == 8 and len(j["top_before"]) == 4 and len(j["top_after"]) == 4
assert [t["id"] for t in j["top_before"]] == list(np.argsort(-b)[:4]), j["top_before"]
assert [t["id"] for t in j["top_after"]] == list(np.argsort(-a)[:4]), j["top_after"]
d = max(max(abs(t["before"] - b[t["id"]]), abs(t["after"] - a[t["id"]])) for t in j["top_before"] + j["top_after"] + [j["target"]])
assert j["target"]["id"] == int(np.argmax(b)) and d < 1e-5, d
print(f"gpt2 heads 0:1,1:2 zeroed: top 4 before / after and the target as PyTorch's within {d:.1e}")
EOF
L=$(( $(echo "$BERT_IDS" | tr ',' '\n' | wc -l) - 1 ))
expect 0 "" -- intervene --model $FX/bert --ids "$BERT_IDS" --heads 1:0 --mode mean --knockout "0:$L>0,1:2:3>1" --renorm --format json
cp "$TMP/out" "$TMP/bert.json"
check "$TMP/bert.json" <<EOF
$REF_PY
j = json.load(open(sys.argv[1])); b, a = np.exp(ref["bert.mean_knock.base"]), np.exp(ref["bert.mean_knock.after"])
assert j["kind"] == "classifier" and j["position"] == 0 and len(j["classes"]) == 3
d = max(max(abs(c["before"] - b[c["index"]]), abs(c["after"] - a[c["index"]])) for c in j["classes"])
assert d < 1e-5 and abs(sum(c["after"] for c in j["classes"]) - 1) < 1e-5, d
print(f"bert mean ablation + renormalised knockout: class probabilities as PyTorch's within {d:.1e}")
EOF
expect 0 "" -- intervene --model models/attnscope-sst2 --text "a good film ." --heads 3:0,3:1,3:2,3:3
grep -q "POSITIVE" "$TMP/out" && grep -q "before" "$TMP/out" && ok "attnscope-sst2 text table: $(grep POSITIVE "$TMP/out")" \
  || fail "attnscope-sst2 text table: $(cat "$TMP/out")"
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all intervene CLI tests passed"
