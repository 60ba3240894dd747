#!/usr/bin/env bash
# test_probe.sh — `attnscope probe --induction`: every head's induction, previous-token and
# sink scores equal the same means computed here from `attnscope run --format npz` on the
# probe's own ids (GPT-2 without BOS, a Llama with BOS, a sliding-window Mistral); the ids
# are BOS + R tokens + the same R again; with an LM head, the next-token loss on each
# copy equals NumPy's log-softmax of the npz logits; bad input gives one-line errors, exit 2.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
FX=$ROOT/tests/ref/fixtures/models
PY=/usr/bin/python3
for f in gpt2 llama mistral_swa; do
  expect 0 "" -- probe --model "$FX/$f" --induction --length 8 --seed 3 --format json
  cp "$TMP/out" "$TMP/$f.json"
  ids=$($PY -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$TMP/$f.json")
  expect 0 "" -- run --model "$FX/$f" --ids "$ids" --capture attn,logits --format npz --out "$TMP/$f.npz"
  $PY - "$TMP/$f.json" "$TMP/$f.npz" <<'PY' && ok "$f: scores equal the npz attention's" || fail "$f: probe scores"
import json, sys
import numpy as np
d = json.load(open(sys.argv[1])); A = np.load(sys.argv[2])["attentions"]
ids, R = d["ids"], d["length"]
bos = len(ids) - 2 * R
assert bos in (0, 1) and ids[bos:bos + R] == ids[bos + R:]
for h in d["heads"]:
    P = A[h["layer"], h["head"]]
    q = [bos + R + k for k in range(1, R)]
    ind = np.mean([P[i, bos + k + 1] for k, i in zip(range(1, R), q)])
    prev = np.mean([P[i, i - 1] for i in q]); sink = np.mean([P[i, 0] for i in q])
    assert abs(ind - h["induction"]) < 1e-5 and abs(prev - h["previous"]) < 1e-5 and abs(sink - h["sink"]) < 1e-5, h
Z = np.load(sys.argv[2])["logits"].astype(np.float64)  # (T, V)
lsm = Z - Z.max(1, keepdims=True); lsm -= np.log(np.exp(lsm).sum(1, keepdims=True))
loss = lambda lo, hi: -np.mean([lsm[p - 1, ids[p]] for p in range(lo, hi)])
assert abs(loss(bos + 1, bos + R) - d["loss_first"]) < 1e-5, (loss(bos + 1, bos + R), d["loss_first"])
assert abs(loss(bos + R + 1, bos + 2 * R) - d["loss_second"]) < 1e-5, (loss(bos + R + 1, bos + 2 * R), d["loss_second"])
PY
done
expect 0 "" -- probe --model "$FX/llama" --induction --length 8 --top 2
[ "$(grep -c '^ *[0-9]' "$TMP/out")" = 2 ] && ok "--top 2 prints two heads" || fail "--top 2: $(cat "$TMP/out")"
expect 2 "say which probe" -- probe --model "$FX/llama"
expect 2 "over the model's" -- probe --model "$FX/gpt2" --induction --length 5000
expect 2 "bad --length" -- probe --model "$FX/gpt2" --induction --length 1
expect 2 "--format" -- probe --model "$FX/gpt2" --induction --format xml
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
