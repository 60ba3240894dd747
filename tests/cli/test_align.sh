#!/usr/bin/env bash
# test_align.sh — `attnscope align` on a random encoder-decoder model with a byte-level
# tokenizer (tests/cli/align_model.py: bart_tiny's weights, every byte a piece) over the
# English-German gold set of data/align: the JSON's AER of every layer, head and head mean,
# its best head and each sentence's alignment equal a NumPy re-computation from
# `attnscope run`'s cross_attentions and token offsets (target rows: the positions
# predicting the target's tokens, and with --rows input the positions reading them); the
# text table; alignments without gold; errors (exit 2, one line): mismatched line counts,
# a gold pair outside its sentence (file, line and pair named), a model that is not
# encoder-decoder, one without a tokenizer, bad options.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
D=$ROOT/data/align
M=$TMP/m
FX=$ROOT/tests/ref/fixtures/models
$PY "$ROOT/tests/cli/align_model.py" "$M" || { fail "align_model.py"; exit 1; }
N=6
head -n $N "$D/en-de.en" >"$TMP/s.en"
head -n $N "$D/en-de.de" >"$TMP/s.de"
head -n $N "$D/en-de.align" >"$TMP/s.align"
# the reference's inputs: each pair's cross-attention and source tokens, and the target's
# own tokens (encoded as a source: the same tokenizer, the same specials)
for i in $(seq 1 $N); do
  s=$(sed -n "${i}p" "$TMP/s.en"); t=$(sed -n "${i}p" "$TMP/s.de")
  "$BIN" run --model "$M" --text "$s" --target "$t" --capture attn --format json --out "$TMP/p$i.json" &&
    "$BIN" run --model "$M" --text "$t" --target "$t" --capture attn --format json --out "$TMP/t$i.json" ||
    fail "run pair $i"
done
for rows in predict input; do
  expect 0 "" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/s.align" --format json \
    --rows $rows --out "$TMP/a-$rows.json"
  AS_CLI_TESTS="$ROOT/tests/cli" $PY - "$TMP" $N $rows <<'PY' && ok "align --rows $rows: AER per head and head mean, best head, alignments = NumPy" || fail "align --rows $rows vs NumPy"
import json, os, sys
import numpy as np
sys.path.insert(0, os.environ["AS_CLI_TESTS"])
from align_ref import aer as aer_of, score_pair, words
tmp, n, rows = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = json.load(open(f"{tmp}/a-{rows}.json"))

src = open(f"{tmp}/s.en").read().splitlines()
tgt = open(f"{tmp}/s.de").read().splitlines()
gold = open(f"{tmp}/s.align").read().splitlines()
L, H = 3, 3
cnt = np.zeros((L, H + 1, 4))
aligns = {}
for k in range(n):
    p = json.load(open(f"{tmp}/p{k + 1}.json")); t = json.load(open(f"{tmp}/t{k + 1}.json"))
    A = np.array(p["cross_attentions"], np.float64)  # (L, H, Tt, Ts)
    sw, Ws = words(src[k], p["tokens"])
    lw, Wt = words(tgt[k], t["tokens"])
    shift = 1 if rows == "input" else 0
    rw = [lw[i - shift] if i - shift >= 0 else -1 for i in range(len(lw))]
    assert A.shape[2] == len(rw) and A.shape[3] == len(sw)
    score_pair(A, sw, Ws, rw, Wt, gold[k], cnt, aligns, k)
aer = aer_of(cnt)
got = np.array(out["aer"]); got_mean = np.array(out["aer_mean"])
assert np.abs(got - aer[:, :H]).max() < 1e-5, (got, aer)
assert np.abs(got_mean - aer[:, H]).max() < 1e-5, (got_mean, aer[:, H])
bl, bh = np.unravel_index(np.argmin(aer[:, :H]), (L, H))
assert (out["best"]["layer"], out["best"]["head"]) == (bl, bh), out["best"]
assert out["selected"] == {"layer": int(bl), "head": int(bh)}
assert out["pairs"] == n and out["rows"] == rows and out["gold"]["sure"] + out["gold"]["possible"] == sum(len(g.split()) for g in gold)
for k, s in enumerate(out["sentences"]):
    assert s["alignment"] == aligns[(k, bl, bh)], (k, s["alignment"], aligns[(k, bl, bh)])
    assert s["source_words"] == len(src[k].split()) and s["target_words"] == len(tgt[k].split())
print("AER", aer.round(3).tolist())
PY
done
cmp -s "$TMP/a-predict.json" "$TMP/a-input.json" && fail "--rows input changes nothing" || ok "--rows input differs from predict"
# the whole gold set: text table
expect 0 "" -- align --model "$M" --source "$D/en-de.en" --target "$D/en-de.de" --gold "$D/en-de.align"
grep -q "48 sentence pairs" "$TMP/out" && grep -q "323 sure, 56 possible links" "$TMP/out" &&
  grep -qE "^    2  0\.[0-9]{3}  0\.[0-9]{3}  0\.[0-9]{3}  0\.[0-9]{3}$" "$TMP/out" && grep -q "^best head: layer" "$TMP/out" &&
  ok "text: the AER table of the 48 pairs" || fail "text table: $(cat "$TMP/out")"
# without gold: one Pharaoh line per pair, layer 1 (penultimate) head mean by default, or the head asked for
expect 0 "" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de"
[ "$(grep -cE '^[0-9]+	([0-9]+-[0-9]+ ?)+$' "$TMP/out")" = $N ] && grep -q "layer 1, head mean" "$TMP/out" &&
  ok "no gold: one alignment per pair" || fail "no gold: $(cat "$TMP/out")"
expect 0 "" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/s.align" --layer 2 --head mean --format json
$PY -c "
import json, sys; d = json.load(open(sys.argv[1])); a = json.load(open(sys.argv[2]))
assert d['selected'] == {'layer': 2, 'head': 'mean'}
assert d['aer'] == a['aer'] and d['aer_mean'] == a['aer_mean']
assert all(0 <= s['aer'] <= 1 for s in d['sentences'])
" "$TMP/out" "$TMP/a-predict.json" && ok "--layer 2 --head mean" || fail "--layer/--head"
# errors
head -n 5 "$TMP/s.de" >"$TMP/short.de"
expect 2 "has 6 lines but" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/short.de"
sed '3s/$/ 4-9/' "$TMP/s.align" >"$TMP/bad.align"
expect 2 "bad.align:3: pair 7 '4-9': target index 9 is outside the target sentence's 5 words" -- \
  align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/bad.align"
sed '2s/.*/0-0 1=1/' "$TMP/s.align" >"$TMP/bad2.align"
expect 2 "bad2.align:2: pair 2 '1=1': expected I-J" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/bad2.align"
printf 'a b\n\n' >"$TMP/empty.en"; printf 'x\ny\n' >"$TMP/two.de"
expect 2 "empty.en:2" -- align --model "$M" --source "$TMP/empty.en" --target "$TMP/two.de"
expect 2 "not an encoder-decoder model" -- align --model "$FX/bert" --source "$TMP/s.en" --target "$TMP/s.de"
expect 2 "has no tokenizer" -- align --model "$FX/bart_tiny" --source "$TMP/s.en" --target "$TMP/s.de"
expect 2 "outside the decoder's 3 layers x 3 heads" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --layer 3 --head 0
expect 2 "give --layer and --head together" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --layer 1
expect 2 "--format must be text or json" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --format xml
expect 2 "--rows must be predict or input" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --rows x
expect 2 "are required" -- align --model "$M" --source "$TMP/s.en"
expect 2 "nope.en" -- align --model "$M" --source "$TMP/nope.en" --target "$TMP/s.de"
expect 2 "not a regular file" -- align --model "$M" --source /dev/zero --target "$TMP/s.de"
exit $((fails > 0))
