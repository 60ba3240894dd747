#!/usr/bin/env bash
# test_lens.sh — `attnscope lens` (the logit lens): at the last layer the lens is the
# model's own logits (`run --format npz`); at every earlier layer it equals the hidden
# state of the npz through the final norm and the LM head computed here with numpy from
# model.safetensors (Llama: RMSNorm, untied lm_head; GPT-2: LayerNorm, head tied to wte);
# a masked-LM head's last layer equals its logits; bad input gives one-line errors.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
FX=$ROOT/tests/ref/fixtures/models
PY=/usr/bin/python3
IDS=1,5,7,9,11,13,17
for f in llama gpt2 bert_noprefix_mlm; do
  expect 0 "" -- lens --model "$FX/$f" --ids $IDS --position 4 --top 3 --format json
  cp "$TMP/out" "$TMP/$f.json"
  expect 0 "" -- run --model "$FX/$f" --ids $IDS --capture hidden,logits --format npz --out "$TMP/$f.npz"
  $PY - "$FX/$f" "$TMP/$f.json" "$TMP/$f.npz" "$f" <<'PY' && ok "$f: lens = head(norm(hidden)) at every layer" || fail "$f: lens"
import json, struct, sys
import numpy as np
d, lens, npz, name = sys.argv[1], json.load(open(sys.argv[2])), np.load(sys.argv[3]), sys.argv[4]
b = open(d + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
def t(k):
    v = h[k]; return np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], np.float32).reshape(v["shape"])
c = json.load(open(d + "/config.json"))
H, P = npz["hidden_states"], lens["position"]
L = H.shape[0] - 1
assert len(lens["layers"]) == L + 1
for e in lens["layers"]:
    l = e["layer"]
    if l == L:
        want = npz["logits"][P]
    elif name == "llama":
        x = H[l, P].astype(np.float64)
        x = x / np.sqrt((x * x).mean() + c["rms_norm_eps"]) * t("model.norm.weight")
        want = t("lm_head.weight") @ x
    elif name == "gpt2":
        x = H[l, P].astype(np.float64); mu = x.mean(); var = ((x - mu) ** 2).mean()
        x = (x - mu) / np.sqrt(var + c.get("layer_norm_epsilon", 1e-5)) * t("transformer.ln_f.weight") + t("transformer.ln_f.bias")
        want = t("transformer.wte.weight") @ x
    else:
        continue  # the masked-LM transform is checked through the last layer
    top = np.argsort(-want, kind="stable")[:3]
    got = [x["id"] for x in e["top"]]
    assert list(top) == got, (l, list(top), got)
    assert max(abs(x["logit"] - want[x["id"]]) for x in e["top"]) < 1e-4, l
    p = np.exp(want - want.max()); p /= p.sum()
    assert abs(e["top"][0]["prob"] - p[top[0]]) < 1e-5
PY
done
expect 0 "" -- lens --model "$FX/gemma2" --ids $IDS
[ "$(grep -c '^ *[0-9]*:' "$TMP/out")" = 3 ] && ok "gemma2: a line per layer (0..2)" || fail "gemma2 lines: $(cat "$TMP/out")"
expect 2 "no language-model head" -- lens --model "$FX/llama_cls" --ids $IDS
expect 2 "past the input" -- lens --model "$FX/llama" --ids $IDS --position 7
expect 2 "exactly one" -- lens --model "$FX/llama"
expect 2 "--format" -- lens --model "$FX/llama" --ids $IDS --format xml
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
