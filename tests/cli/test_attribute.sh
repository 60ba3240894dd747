#!/bin/bash
# test_attribute.sh — `attnscope attribute`: exit 2 with one-line errors for bad input,
# and the values it writes (JSON and npz) against tests/ref/gen_attrib.py's references on
# the bert (classifier) and gpt2 (LM) fixtures and gen_mixing.py's (norm2, alti: bert,
# gemma2) (read with numpy, no torch); every layer's rollout against NumPy on the attention
# `attnscope run` captures, every layer's flow against networkx's and grad-attn against
# torch.autograd's (the committed <name>_layers references), the last layer the whole
# model's map; ig's --steps against the PyTorch IG reference and its completeness gap
# shrinking with more steps; a text pair
# through a real tokenizer (models/attnscope-sst2) with the class given by its label;
# --precision bf16 close to F32.
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
expect 2 "bad --steps '0'" -- attribute --model $FX/bert --ids "$BERT_IDS" --method ig --steps 0
expect 2 "bad --steps '1025'" -- attribute --model $FX/bert --ids "$BERT_IDS" --method ig --steps 1025
expect 2 "bad --steps 'many'" -- attribute --model $FX/bert --ids "$BERT_IDS" --method ig --steps many
expect 2 "--steps applies to --method ig only" -- attribute --model $FX/bert --ids "$BERT_IDS" --method gxi --steps 8
expect 2 "--steps applies to --method ig only" -- attribute --model $FX/bert --ids "$BERT_IDS" --method rollout --steps 8

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
# rollout, flow, grad-attn: every layer's map beside the whole model's, its last layer
if m in ("rollout", "flow", "grad-attn"):
    lay = np.array(j["layers"]["data"], dtype=np.float32).reshape(j["layers"]["shape"])
    assert j["layers"]["shape"] == [2, 10, 10] and np.array_equal(lay[-1], np.float32(got)), m
else:
    assert "layers" not in j
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
assert sorted(z.files) == sorted(["input_ids", "tokens", "token_text", "grad-attn", "grad-attn_layers", "relevance", "target",
                                  "position", "logit"]), z.files
assert z["grad-attn"].shape == (9, 9) and z["input_ids"].shape == (9,)
assert z["grad-attn_layers"].shape == (3, 9, 9) and np.array_equal(z["grad-attn_layers"][2], z["grad-attn"])
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
assert sorted(z.files) == sorted(["input_ids", "tokens", "token_text", m, m + "_layers", "relevance"]), z.files
assert z["relevance"].shape == (10,) and np.array_equal(z["relevance"], z[m][0])
print(f"bert {m} npz: relevance = row 0 of {m} {z[m].shape}")
EOF
done
# every layer's map (cumulative): rollout against NumPy on the attention attnscope itself
# captures, flow against networkx and grad-attn against torch.autograd (gen_attrib.py's
# <name>_layers references); the last layer is the whole model's map
for fx in bert gpt2; do
  IDS=$(ids_of $FX/$fx/expected.safetensors)
  expect 0 "" -- run --model $FX/$fx --ids "$IDS" --capture attn --format npz --out "$TMP/cap_$fx.npz"
  for m in rollout flow grad-attn; do
    expect 0 "" -- attribute --model $FX/$fx --ids "$IDS" --method $m --format npz --out "$TMP/lay_${fx}_$m.npz" --threads 2
  done
  check "$TMP/cap_$fx.npz" $fx "$TMP/lay_${fx}_rollout.npz" "$TMP/lay_${fx}_flow.npz" "$TMP/lay_${fx}_grad-attn.npz" <<EOF
$REF_PY
A = np.load(sys.argv[1])["attentions"].astype(np.float64); fx = sys.argv[2]
L, H, T = A.shape[0], A.shape[1], A.shape[-1]
R, want = np.eye(T), []
for l in range(L):  # Â_l = renorm_rows(0.5 mean_h A_l + 0.5 I), layer l: Â_l ... Â_0
    a = 0.5 * A[l].mean(0) + 0.5 * np.eye(T); a /= a.sum(-1, keepdims=True)
    R = a @ R; want.append(R)
ref = st(f"tests/ref/fixtures/attrib/{fx}_layers.safetensors")
out = []
for path, m, want_m in ((sys.argv[3], "rollout", np.array(want)), (sys.argv[4], "flow", ref["flow_layers"]),
                        (sys.argv[5], "grad-attn", ref["grad_layers"])):
    z = np.load(path); lay = z[m + "_layers"]
    assert lay.shape == (L, T, T) and np.array_equal(lay[-1], z[m]), (m, lay.shape)
    d = np.abs(lay - want_m).max() / (max(1.0, np.abs(want_m).max()) if m == "grad-attn" else 1.0)
    assert d <= (1e-4 if m == "grad-attn" else 1e-5), (m, d)
    out.append(f"{m} {d:.1e}")
# the flow through one layer is that layer's Â: rollout's first layer
assert np.abs(np.load(sys.argv[4])["flow_layers"][0] - want[0]).max() < 1e-5
print(f"{fx} every layer (L = {L}), max diff: " + ", ".join(out))
EOF
done
# ig --steps: the PyTorch reference at its step count (the "sal" case of
# tests/ref/fixtures/backward/bert, tests/ref/gen_backward.py), and the completeness gap |sum(relevance) - (logit - baseline
# logit)| falls as the steps grow
BW=tests/ref/fixtures/backward/bert
SAL=$($PY - $BW/expected.safetensors <<'PYEOF'
import json, struct, sys
import numpy as np
with open(sys.argv[1], "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n)); base = 8 + n
    def get(k):
        t = h[k]; f.seek(base + t["data_offsets"][0])
        return np.frombuffer(f.read(t["data_offsets"][1] - t["data_offsets"][0]), "<i4")
    print(",".join(map(str, get("sal.ids"))), ",".join(map(str, get("sal.type_ids"))), get("sal.ig_steps")[0])
PYEOF
)
read -r SAL_IDS SAL_TT SAL_STEPS <<<"$SAL"
for n in 2 8 $SAL_STEPS 256; do
  expect 0 "" -- attribute --model $BW --ids "$SAL_IDS" --type-ids "$SAL_TT" --method ig --steps $n --format npz --out "$TMP/ig_$n.npz"
done
expect 0 "" -- attribute --model $BW --ids "$SAL_IDS" --type-ids "$SAL_TT" --method ig --steps 8 --out "$TMP/ig_8.json"
check "$TMP/ig_2.npz" "$TMP/ig_8.npz" "$TMP/ig_$SAL_STEPS.npz" "$TMP/ig_256.npz" "$TMP/ig_8.json" <<EOF
$REF_PY
ref = st("$BW/expected.safetensors")
base = float(ref["sal.logit_base"][0]); gaps = []; d = None
for path in sys.argv[1:5]:
    z = np.load(path)
    assert sorted(z.files) == sorted(["input_ids", "tokens", "token_text", "ig", "relevance", "target", "logit", "steps",
                                      "logit_delta"]), z.files
    delta = float(z["logit"][0]) - base  # f(x) - f(baseline), the baseline logit from PyTorch
    assert abs(float(z["logit_delta"][0]) - delta) < 1e-5, (z["logit_delta"], delta)
    gaps.append((int(z["steps"][0]), abs(float(z["relevance"].astype(np.float64).sum()) - delta)))
    if z["steps"][0] == int(ref["sal.ig_steps"][0]):
        want = ref["sal.ig"]; d = np.abs(z["ig"] - want).max() / np.abs(want).max()
        assert d < 1e-4, d
assert d is not None and all(b[1] < a[1] for a, b in zip(gaps, gaps[1:])), gaps
j = json.load(open(sys.argv[5])); z8 = np.load(sys.argv[2])
assert j["ig"]["steps"] == 8 and abs(j["ig"]["gap"] - gaps[1][1]) < 1e-5 and np.allclose(j["relevance"], z8["ig"], atol=1e-7)
print(f"bert ig: PyTorch reference at {int(ref['sal.ig_steps'][0])} steps within {d:.1e}; completeness gap by steps "
      + ", ".join(f"{s}: {g:.2e}" for s, g in gaps))
EOF
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
extra = ["steps", "logit_delta"] if m == "ig" else []
assert sorted(z.files) == sorted(["input_ids", "tokens", "token_text", m, "relevance", "target", "logit"] + extra), z.files
assert z[m].shape == (10,) and np.array_equal(z[m], z["relevance"])
d = max(np.abs(z["relevance"] - want).max(), np.abs(np.array(j["relevance"]) - want).max(),
        np.abs(np.array(j["data"]) - want).max())
assert d < 1e-6 * max(1.0, np.abs(want).max()), d
assert z["target"][0] == s["target"] == j["target"] and j["method"] == m and j["shape"] == [10]
assert abs(z["logit"][0] - s["logits"][s["target"]]) < 1e-5
print(f"bert {m}: relevance = attnscope saliency's scores (max diff {d:.1e}), target {s['target']}")
EOF
done
# --precision bf16 (BF16 products in the forward and the backward's input gradients):
# saliency scores within 5% of the largest F32 score and not equal to them; attribute
# too; a bad precision is a usage error
expect 0 "" -- saliency --model $FX/bert --ids "$BERT_IDS" --format json --precision bf16
cp "$TMP/out" "$TMP/sal_bf16.json"
expect 0 "" -- attribute --model $FX/bert --ids "$BERT_IDS" --method grad --out "$TMP/salj_bf16.json" --precision bf16
check "$TMP/sal_grad.json" "$TMP/sal_bf16.json" "$TMP/salj_bf16.json" <<EOF
$REF_PY
f = np.array([t["score"] for t in json.load(open(sys.argv[1]))["tokens"]])
b = np.array([t["score"] for t in json.load(open(sys.argv[2]))["tokens"]])
j = np.array(json.load(open(sys.argv[3]))["relevance"])
d = np.abs(b - f).max()
assert 0 < d <= 0.05 * np.abs(f).max(), (d, np.abs(f).max())
assert np.abs(j - b).max() < 1e-6 * np.abs(b).max()
print(f"bert grad at bf16: within {d / np.abs(f).max():.1e} of the largest F32 score; attribute = saliency")
EOF
expect 2 "--precision must be f32 or bf16" -- saliency --model $FX/bert --ids "$BERT_IDS" --precision f16
expect 2 "--precision must be f32 or bf16" -- attribute --model $FX/bert --ids "$BERT_IDS" --method grad --precision x

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all attribute CLI tests passed"
