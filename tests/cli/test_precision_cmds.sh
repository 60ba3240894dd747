#!/usr/bin/env bash
# test_precision_cmds.sh — --precision on the commands that run a model besides run, bench
# and the attribution commands: generate, lens, probe, align, analyze and eval (lm,
# patterns; sst2 / mlm refuse it). Each runs at
# f32 and at bf16 on the same input; the bf16 numbers differ from the f32 ones (the option
# reached the model) by little (bounds below, relative to the largest value: BF16 keeps 8
# bits of mantissa, so the random fixtures' products move by ~1e-3..1e-2); analyze keeps a
# bf16 run apart from the f32 one in the database (params "precision":"bf16"); a bad value
# is a one-line usage error with exit 2.
# Usage: test_precision_cmds.sh BINARY. Needs sqlite3 (Debian package sqlite3).
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
FX=$ROOT/tests/ref/fixtures/models
PY=/usr/bin/python3
need_sqlite3
IDS=1,5,7,9,11,13,2,4,6,8

# compare A B KEYS BOUND: the numbers of JSON (or npz) A and B under each key path differ,
# but by at most BOUND of the largest |value|
compare() {
  $PY - "$@" <<'PY'
import json, sys
import numpy as np
a_path, b_path, what, bound = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def load(p):
    if p.endswith(".npz"):
        z = np.load(p)
        n = int(z["prompt_length"].reshape(-1)[0])
        return z["logits"][:n].astype(np.float64)  # the prompt's rows: the same tokens in both runs
    j = json.load(open(p))
    if what == "lens":  # {(layer, id): logit} of each layer's top tokens
        return {(l["layer"], t["id"]): t["logit"] for l in j["layers"] for t in l["top"]}
    if what == "probe":
        return np.array([[h["induction"], h["previous"], h["sink"]] for h in j["heads"]], dtype=np.float64)
    raise SystemExit("unknown kind " + what)
a, b = load(a_path), load(b_path)
if isinstance(a, dict):  # lens: the tokens in both top lists (most of them: the rankings agree)
    both = sorted(set(a) & set(b))
    assert len(both) >= 0.6 * len(a), (len(both), len(a))
    a, b = np.array([a[k] for k in both]), np.array([b[k] for k in both])
assert a.shape == b.shape, (a.shape, b.shape)
d = np.abs(a - b).max() / max(np.abs(a).max(), 1e-30)
print("%s: max |f32 - bf16| / max |f32| = %.2e (bound %g)" % (what, d, bound))
assert 0 < d <= bound, d
PY
}

# ---- generate: the prompt's logits of the final run -----------------------------------
for p in f32 bf16; do
  expect 0 "" -- generate --model "$FX/llama" --ids $IDS --max-new 3 --capture logits --precision $p \
    --out "$TMP/gen-$p.npz" --quiet
done
compare "$TMP/gen-f32.npz" "$TMP/gen-bf16.npz" generate 0.05 && ok "generate --precision bf16: prompt logits close to f32" \
  || fail "generate --precision bf16"

# ---- lens: the logits of the tokens in both runs' top lists, layer by layer ---------------
for p in f32 bf16; do
  expect 0 "" -- lens --model "$FX/llama" --ids $IDS --format json --precision $p
  cp "$TMP/out" "$TMP/lens-$p.json"
done
compare "$TMP/lens-f32.json" "$TMP/lens-bf16.json" lens 0.05 && ok "lens --precision bf16 close to f32" \
  || fail "lens --precision bf16"

# ---- probe: every head's induction / previous / sink mass ------------------------------
for p in f32 bf16; do
  expect 0 "" -- probe --model "$FX/llama" --induction --length 8 --format json --precision $p
  cp "$TMP/out" "$TMP/probe-$p.json"
done
compare "$TMP/probe-f32.json" "$TMP/probe-bf16.json" probe 0.05 && ok "probe --precision bf16 close to f32" \
  || fail "probe --precision bf16"

# ---- align: an encoder-decoder model in bf16 (tests/cli/align_model.py's byte-level BART) --
M=$TMP/align-model
if $PY "$ROOT/tests/cli/align_model.py" "$M" >/dev/null; then
  head -n 4 "$ROOT/data/align/en-de.en" >"$TMP/s.en"
  head -n 4 "$ROOT/data/align/en-de.de" >"$TMP/s.de"
  for p in f32 bf16; do
    expect 0 "" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --format json --precision $p
    cp "$TMP/out" "$TMP/align-$p.json"
  done
  $PY -c "
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
" "$TMP/align-f32.json" "$TMP/align-bf16.json" && ok "align --precision bf16 writes the f32 run's fields" \
    || fail "align --precision bf16"
else
  fail "align_model.py"
fi

# ---- analyze: a bf16 run of its own beside the f32 one ---------------------------------
{ printf 'sentence\tlabel\n'; for i in $(seq 1 6); do
    printf 'it is a good film number %d .\t1\nthe story was not funny at all %d .\t0\n' $i $i; done; } >"$TMP/sst.tsv"
A=(--model "$ROOT/models/demo-bert" --sst2 "$TMP/sst.tsv" --db "$TMP/p.db" --threads 1 --explain 2 --quiet)
expect 0 "" -- analyze "${A[@]}"
expect 0 "" -- analyze "${A[@]}" --precision bf16
expect 0 "" -- analyze "${A[@]}" --precision bf16   # finished: found again, nothing added
runs=$(sqlite3 "$TMP/p.db" "SELECT count(*) FROM runs")
bf=$(sqlite3 "$TMP/p.db" "SELECT count(*) FROM runs WHERE params LIKE '%\"precision\":\"bf16\"%'")
[ "$runs" = 2 ] && [ "$bf" = 1 ] && ok "analyze: the bf16 run is a run of its own" \
  || fail "analyze: $runs runs, $bf with precision bf16"
sqlite3 -separator ' ' "$TMP/p.db" "SELECT a.layer, a.head, a.entropy, b.entropy, a.importance, b.importance
  FROM head_scores a JOIN head_scores b ON a.layer = b.layer AND a.head = b.head
  WHERE a.run = (SELECT id FROM runs WHERE params NOT LIKE '%bf16%') AND b.run = (SELECT id FROM runs WHERE params LIKE '%bf16%')" \
  >"$TMP/heads.txt"
$PY - "$TMP/heads.txt" <<'PY' && ok "analyze --precision bf16: head entropies and importance close to f32" \
  || fail "analyze --precision bf16 head scores"
import sys
import numpy as np
v = np.loadtxt(sys.argv[1], ndmin=2)
assert len(v) > 0
for name, (i, j) in (("entropy", (2, 3)), ("importance", (4, 5))):
    d = np.abs(v[:, i] - v[:, j]).max() / np.abs(v[:, i]).max()
    print("%s: max |f32 - bf16| / max = %.2e over %d heads" % (name, d, len(v)))
    assert 0 < d <= 0.05, (name, d)
PY

# ---- eval: the perplexity of a causal LM (BF16's change of it) and the positional patterns --
LB=$FX/llama_bytes
for p in f32 bf16; do
  expect 0 "" -- eval --task lm --model "$LB" --data "$LB/heldout.txt" --seq 16 --stride 8 --precision $p
  cp "$TMP/out" "$TMP/lm-$p.txt"
  expect 0 "" -- eval --task patterns --model "$ROOT/models/demo-bert" --data "$LB/heldout.txt" --pairs 20 --precision $p
  cp "$TMP/out" "$TMP/pat-$p.txt"
done
$PY - "$TMP/lm-f32.txt" "$TMP/lm-bf16.txt" <<'PY' && ok "eval --task lm --precision bf16: perplexity close to f32"   || fail "eval lm --precision bf16"
import sys
a, b = (dict(l.split(": ", 1) for l in open(p).read().split("\n") if ": " in l) for p in sys.argv[1:])
assert a["tokens"] == b["tokens"], (a, b)
pa, pb = float(a["model_perplexity"]), float(b["model_perplexity"])
print("perplexity f32 %.6g bf16 %.6g" % (pa, pb))
assert 0 < abs(pa - pb) / pa <= 0.01, (pa, pb)
PY
$PY - "$TMP/pat-f32.txt" "$TMP/pat-bf16.txt" <<'PY' && ok "eval --task patterns --precision bf16: head means close to f32"   || fail "eval patterns --precision bf16"
import re, sys
num = lambda p: [float(x) for x in re.findall(r"-?\d+\.\d+", open(p).read())]
a, b = num(sys.argv[1]), num(sys.argv[2])
assert len(a) == len(b) and a, (len(a), len(b))
d = max(abs(x - y) for x, y in zip(a, b))
print("patterns: max |f32 - bf16| = %.2e over %d numbers" % (d, len(a)))
assert 0 < d <= 0.02, d
PY
expect 2 "--precision applies to --task lm and patterns (sst2 runs F32)" -- \
  eval --task sst2 --model "$ROOT/models/demo-bert" --data "$TMP/sst.tsv" --precision bf16

# ---- bad values --------------------------------------------------------------------------
for c in "generate --model $FX/llama --ids $IDS" "lens --model $FX/llama --ids $IDS" \
         "probe --model $FX/llama --induction" "align --model $FX/llama --source x --target y" \
         "analyze --model $FX/llama --sst2 x --db $TMP/x.db" "eval --task lm --model $FX/llama --data x"; do
  # shellcheck disable=SC2086
  expect 2 "--precision must be f32 or bf16, not 'f16'" -- $c --precision f16
done

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
