#!/bin/bash
# test_attribute.sh — `attnscope attribute`: exit 2 with one-line errors for bad input,
# and the values it writes (JSON and npz) against tests/ref/gen_attrib.py's references on
# the bert (classifier) and gpt2 (LM) fixtures and gen_mixing.py's (norm2, alti: bert,
# gemma2) (read with numpy, no torch); a text pair
# through a real tokenizer (models/attnscope-sst2) with the class given by its label.
# Usage: test_attribute.sh path/to/attnscope
set -u
BIN=${1:?usage: test_attribute.sh BIN}
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
FX=tests/ref/fixtures/models
PY=/usr/bin/python3
# the fixture's "single" ids (safetensors read with numpy)
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

expect 2 "--method is required" -- attribute --model $FX/bert --ids "$BERT_IDS"
expect 2 "bad --method 'attention'" -- attribute --model $FX/bert --ids "$BERT_IDS" --method attention
expect 2 "exactly one of --text or --ids" -- attribute --model $FX/bert --method rollout
expect 2 "apply to --method grad-attn, grad, gxi, ig and importance only" -- attribute --model $FX/bert --ids "$BERT_IDS" --method rollout --target 1
expect 2 "--format npz needs --out" -- attribute --model $FX/bert --ids "$BERT_IDS" --method flow --format npz
expect 2 "bad --format 'csv'" -- attribute --model $FX/bert --ids "$BERT_IDS" --method flow --format csv
expect 2 "position applies to LM" -- attribute --model $FX/bert --ids "$BERT_IDS" --method grad-attn --position 2
expect 2 "--position applies to --method grad-attn and importance only" -- attribute --model $FX/bert --ids "$BERT_IDS" --method gxi --position 2
expect 2 "bad --method 'grad_attn'" -- attribute --model $FX/bert --ids "$BERT_IDS" --method grad_attn
expect 2 "classifier" -- attribute --model $FX/gpt2 --ids "$GPT2_IDS" --method ig
expect 2 "target 3 out of range" -- attribute --model $FX/bert --ids "$BERT_IDS" --method importance --target 3
expect 2 "bad --target 'POSITIVE'" -- attribute --model $FX/bert --ids "$BERT_IDS" --method grad-attn --target POSITIVE
expect 2 "position 9 out of range" -- attribute --model $FX/gpt2 --ids "$GPT2_IDS" --method grad-attn --position 9
expect 2 "bad --position '-1'" -- attribute --model $FX/gpt2 --ids "$GPT2_IDS" --method grad-attn --position -1
expect 2 "no_such_model" -- attribute --model $TMP/no_such_model --ids 1,2 --method rollout

check() { # FILE  PYTHON: compares what attribute wrote with the reference
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
            out[k] = np.frombuffer(b, {"F32": "<f4", "I32": "<i4"}[t["dtype"]]).reshape(t["shape"])
    return out
'
for m in rollout flow norm grad-attn importance; do
  expect 0 "" -- attribute --model $FX/bert --ids "$BERT_IDS" --method $m --out "$TMP/bert_$m.json"
  check "$TMP/bert_$m.json" $m <<EOF
$REF_PY
j = json.load(open(sys.argv[1])); m = sys.argv[2]
ref = st("tests/ref/fixtures/attrib/bert.safetensors")[m.replace("grad-attn", "grad")]
got = np.array(j["data"], dtype=np.float64).reshape(j["shape"])
assert j["method"] == m and list(got.shape) == list(ref.shape), (j["shape"], ref.shape)
assert len(j["tokens"]) == 10 and j["tokens"][0]["id"] == 2
d = np.abs(got - ref).max() / max(1.0, np.abs(ref).max())
assert d < 1e-4, d
if m in ("grad-attn", "importance"):
    assert j["target"] == 0 and j["position"] == 0, (j["target"], j["position"])
else:
    assert "target" not in j
# relevance: the row of [CLS] (the token the classifier reads) of the whole model's map;
# norm: the last layer's summed over heads; importance has none
if m == "importance":
    assert "relevance" not in j
else:
    rel = np.array(j["relevance"]); want = got[-1].sum(0)[0] if m == "norm" else got[0]
    assert rel.shape == (10,) and np.abs(rel - want).max() < 1e-6 * max(1.0, np.abs(want).max()), (rel, want)
print(f"bert {m} JSON: shape {j['shape']}, max diff {d:.1e}")
EOF
done
expect 0 "" -- attribute --model $FX/gpt2 --ids "$GPT2_IDS" --method grad-attn --format npz --out "$TMP/g.npz" --threads 2
check "$TMP/g.npz" <<EOF
$REF_PY
z = np.load(sys.argv[1]); ref = st("tests/ref/fixtures/attrib/gpt2.safetensors")
assert sorted(z.files) == sorted(["input_ids", "tokens", "token_text", "grad-attn", "relevance", "target", "position", "logit"]), z.files
assert z["grad-attn"].shape == (9, 9) and z["input_ids"].shape == (9,)
d = np.abs(z["grad-attn"] - ref["grad"]).max()
assert np.array_equal(z["relevance"], z["grad-attn"][8]), "relevance is the row of the LM's position"
assert d < 1e-4 and z["target"][0] == ref["target"][0] and z["position"][0] == 8, (d, z["target"], z["position"])
assert abs(z["logit"][0] - ref["logit"][0]) < 1e-4
print(f"gpt2 grad npz: target {z['target'][0]} at {z['position'][0]}, max diff {d:.1e}")
EOF
# an explicit target token and position of the LM
expect 0 "" -- attribute --model $FX/gpt2 --ids "$GPT2_IDS" --method importance --target 5 --position 3
cp "$TMP/out" "$TMP/imp.json"
check "$TMP/imp.json" <<EOF
$REF_PY
j = json.load(open(sys.argv[1]))
assert j["target"] == 5 and j["position"] == 3 and j["shape"] == [3, 4], j
print("gpt2 importance of token 5 at position 3: shape", j["shape"])
EOF
# norm2 and ALTI (tests/ref/gen_mixing.py): npz of the post-LN bert, JSON of Gemma 2's block
expect 0 "" -- attribute --model $FX/bert --ids "$BERT_IDS" --method alti --format npz --out "$TMP/alti.npz"
check "$TMP/alti.npz" <<EOF
$REF_PY
z = np.load(sys.argv[1]); ref = st("tests/ref/fixtures/attrib/bert_mix.safetensors")["alti"]
assert sorted(z.files) == sorted(["input_ids", "tokens", "token_text", "alti", "relevance"]), z.files
assert z["alti"].shape == (2, 10, 10)
assert np.array_equal(z["relevance"], z["alti"][1, 0]), "relevance is [CLS]'s row of the last cumulative layer"
d = np.abs(z["alti"] - ref).max()
assert d < 1e-5 and np.abs(z["alti"].sum(-1) - 1).max() < 1e-5, d
print(f"bert alti npz: (2, 10, 10), rows sum to 1, max diff {d:.1e}")
EOF
GEMMA_IDS=$(ids_of $FX/gemma2/expected.safetensors)
expect 0 "" -- attribute --model $FX/gemma2 --ids "$GEMMA_IDS" --method norm2 --out "$TMP/n2.json"
check "$TMP/n2.json" <<EOF
$REF_PY
j = json.load(open(sys.argv[1])); ref = st("tests/ref/fixtures/attrib/gemma2_mix.safetensors")["norm2"]
got = np.array(j["data"]).reshape(j["shape"])
assert j["method"] == "norm2" and j["shape"] == [2, 11, 11] and "target" not in j
assert np.abs(np.array(j["relevance"]) - got[1, 10]).max() < 1e-6 * np.abs(got).max(), "the last token's row"
d = np.abs(got - ref).max() / np.abs(ref).max()
assert d < 1e-4, d
print(f"gemma2 norm2 JSON: {j['shape']}, max rel diff {d:.1e}")
EOF
expect 2 "apply to --method grad-attn, grad, gxi, ig and importance only" -- attribute --model $FX/bert --ids "$BERT_IDS" --method alti --position 1
# text (a pair) through the model's tokenizer, the class by its label name
expect 0 "" -- attribute --model models/attnscope-sst2 --text "the movie was not good ." --text-b "but the actors were great ." \
  --method grad-attn --target POSITIVE --out "$TMP/sst.json"
check "$TMP/sst.json" <<EOF
$REF_PY
j = json.load(open(sys.argv[1])); T = len(j["tokens"])
assert j["target"] == 1 and j["position"] == 0 and j["shape"] == [T, T], (j["target"], j["shape"], T)
assert j["tokens"][0]["piece"] == "[CLS]" and any(t["segment"] == 1 for t in j["tokens"])
print(f"attnscope-sst2 grad of POSITIVE on a text pair: {T} x {T}")
EOF
# rollout and flow npz: relevance is [CLS]'s row of the map in the same file
for m in rollout flow; do
  expect 0 "" -- attribute --model $FX/bert --ids "$BERT_IDS" --method $m --format npz --out "$TMP/$m.npz"
  check "$TMP/$m.npz" $m <<EOF
$REF_PY
z = np.load(sys.argv[1]); m = sys.argv[2]
assert sorted(z.files) == sorted(["input_ids", "tokens", "token_text", m, "relevance"]), z.files
assert z["relevance"].shape == (10,) and np.array_equal(z["relevance"], z[m][0])
print(f"bert {m} npz: relevance = row 0 of {m} {z[m].shape}")
EOF
done
# gradient saliency: the same scores as `attnscope saliency` on the same input (npz and JSON)
for m in grad gxi ig; do
  expect 0 "" -- saliency --model $FX/bert --ids "$BERT_IDS" --method $m --format json
  cp "$TMP/out" "$TMP/sal_$m.json"
  expect 0 "" -- attribute --model $FX/bert --ids "$BERT_IDS" --method $m --format npz --out "$TMP/sal_$m.npz"
  expect 0 "" -- attribute --model $FX/bert --ids "$BERT_IDS" --method $m --out "$TMP/salj_$m.json"
  check "$TMP/sal_$m.npz" "$TMP/sal_$m.json" "$TMP/salj_$m.json" $m <<EOF
$REF_PY
z = np.load(sys.argv[1]); s = json.load(open(sys.argv[2])); j = json.load(open(sys.argv[3])); m = sys.argv[4]
want = np.array([t["score"] for t in s["tokens"]])
assert sorted(z.files) == sorted(["input_ids", "tokens", "token_text", m, "relevance", "target", "logit"]), z.files
assert z[m].shape == (10,) and np.array_equal(z[m], z["relevance"])
d = max(np.abs(z["relevance"] - want).max(), np.abs(np.array(j["relevance"]) - want).max(),
        np.abs(np.array(j["data"]) - want).max())
assert d < 1e-6 * max(1.0, np.abs(want).max()), d
assert z["target"][0] == s["target"] == j["target"] and j["method"] == m and j["shape"] == [10]
assert abs(z["logit"][0] - s["logits"][s["target"]]) < 1e-5
print(f"bert {m}: relevance = attnscope saliency's scores (max diff {d:.1e}), target {s['target']}")
EOF
done
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all attribute CLI tests passed"
