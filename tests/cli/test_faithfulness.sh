#!/bin/bash
# test_faithfulness.sh — `attnscope faithfulness`: exit 2 with one-line errors for bad
# options, input and files; on one sentence of models/attnscope-sst2 the JSON's scores
# recomputed with NumPy from its own curves (AOPC, ERASER bins with ceil(b n / 100)
# tokens), the curves' ends, and no special token in any order; over a small SST-2 TSV
# the corpus means equal the means of the per-sentence runs (sentence i's random order
# from seed + i).
# Usage: test_faithfulness.sh path/to/attnscope
set -u
BIN=${1:?usage: test_faithfulness.sh BIN}
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
M=models/attnscope-sst2
PY=/usr/bin/python3
[ -f $M/model.safetensors ] || { echo "SKIPPED: $M is not shipped"; exit 77; }

expect 2 "give exactly one of --text or --ids" -- faithfulness --model $M
expect 2 "--model DIR is required" -- faithfulness --data x.tsv
expect 2 "unknown method 'attention'" -- faithfulness --model $M --text "good" --methods grad,attention
expect 2 "bad --removal 'zero'" -- faithfulness --model $M --text "good" --removal zero
expect 2 "bad --format 'csv'" -- faithfulness --model $M --text "good" --format csv
expect 2 "--limit applies to --data" -- faithfulness --model $M --text "good" --limit 3
expect 2 "bad --limit '0'" -- faithfulness --model $M --data x.tsv --limit 0
expect 2 "give --data or one input" -- faithfulness --model $M --data x.tsv --text "good"
expect 2 "unknown option '--bins'" -- faithfulness --model $M --text "good" --bins 3
expect 2 "no token to remove" -- faithfulness --model $M --ids 2,3
expect 2 "sequence-classifier head" -- faithfulness --model tests/ref/fixtures/models/gpt2 --ids 1,2,3
expect 2 "no_such.tsv" -- faithfulness --model $M --data "$TMP/no_such.tsv"
printf 'sentence\tlabel\ngood film\t1\nbad\tseven\n' >"$TMP/bad.tsv"
expect 2 "bad.tsv:3" -- faithfulness --model $M --data "$TMP/bad.tsv"

check() { # PYTHON ARGS...: prints its last line as ok, or fails
  if $PY - "$@" >"$TMP/py" 2>&1; then ok "$(tail -1 "$TMP/py")"; else fail "$(tail -3 "$TMP/py")"; fi
}

S1="a gripping , funny and quite unforgettable film ."
expect 0 "" -- faithfulness --model $M --text "$S1" --steps 8 --out "$TMP/one.json"
check "$TMP/one.json" <<'EOF'
import json, math, sys
import numpy as np
j = json.load(open(sys.argv[1]))
n, bins = j["tokens"], j["bins"]
assert bins == [1, 5, 10, 20, 50]
toks = j["token_list"]
special = {t["i"] for t in toks if t["special"]}
assert n == len(toks) - len(special) and special == {0, len(toks) - 1}
names = [m["method"] for m in j["methods"]]
assert names == ["grad", "gxi", "ig", "rollout", "flow", "norm", "norm2", "alti", "grad-attn", "random"], names
p = j["probs"][j["predicted"]]
worst = 0.0
for m in j["methods"]:
    d, i = np.array(m["deletion"]), np.array(m["insertion"])
    assert len(d) == n + 1 and len(i) == n + 1
    assert abs(d[0] - p) < 1e-7 and abs(i[n] - p) < 1e-7 and abs(d[n] - j["empty"]) < 1e-7 and abs(i[0] - d[n]) < 1e-9
    assert sorted(m["order"]) == sorted(set(range(len(toks))) - special)
    rel = m["relevance"]
    if m["method"] != "random":  # the order ranks the relevance, ties to the earlier token
        key = sorted(m["order"], key=lambda t: (-rel[t], t))
        assert all(abs(rel[a] - rel[b]) < 1e-6 for a, b in zip(key, m["order"])), m["method"]
    k = [math.ceil(b * n / 100) for b in bins]
    want = {"aopc_deletion": np.mean(d[0] - d), "aopc_insertion": np.mean(i - i[0]),
            "comprehensiveness": np.mean([d[0] - d[x] for x in k]), "sufficiency": np.mean([d[0] - i[x] for x in k])}
    for key, v in want.items():
        worst = max(worst, abs(m[key] - v))
assert worst < 1e-6, worst
print(f"one sentence: {len(names)} methods, {n} removable tokens, scores = NumPy's from the curves (max diff {worst:.1e})")
EOF

printf 'sentence\tlabel\n%s\t1\nthe plot is thin and the jokes fall flat .\t0\nan honest , moving film .\t1\n' "$S1" >"$TMP/three.tsv"
expect 0 "" -- faithfulness --model $M --data "$TMP/three.tsv" --methods grad,rollout,random --seed 5 --format json --out "$TMP/corpus.json"
i=0
while IFS=$'\t' read -r sent label; do
  [ "$sent" = sentence ] && continue
  expect 0 "" -- faithfulness --model $M --text "$sent" --methods grad,rollout,random --seed $((5 + i)) --out "$TMP/s$i.json"
  i=$((i + 1))
done <"$TMP/three.tsv"
check "$TMP/corpus.json" "$TMP/s0.json" "$TMP/s1.json" "$TMP/s2.json" <<'EOF'
import json, sys
import numpy as np
c = json.load(open(sys.argv[1]))
s = [json.load(open(p)) for p in sys.argv[2:]]
assert c["sentences"] == 3 and c["skipped"] == 0
assert abs(c["accuracy"] - np.mean([x["predicted"] == y for x, y in zip(s, [1, 0, 1])])) < 1e-9
for k, m in enumerate(c["methods"]):
    for key in ["aopc_deletion", "aopc_insertion", "comprehensiveness", "sufficiency"]:
        want = np.mean([x["methods"][k][key] for x in s])
        assert abs(m[key] - want) < 1e-6, (m["method"], key, m[key], want)
print(f"corpus of 3: means equal the per-sentence runs ({', '.join(m['method'] for m in c['methods'])})")
EOF

expect 0 "" -- faithfulness --model $M --data "$TMP/three.tsv" --methods grad,random --limit 2
grep -q "^sentences: 2" "$TMP/out" && grep -q "^random " "$TMP/out" && ok "text table with --limit 2" || fail "text table: $(head -c 400 "$TMP/out")"

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all faithfulness CLI tests passed"
