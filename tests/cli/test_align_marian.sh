#!/usr/bin/env bash
# test_align_marian.sh — `attnscope align` and `analyze --source --target` on a Marian folder
# without tokenizer.json (vocab.json + source.spm + target.spm, as test_marian_text.sh
# builds it from the random marian_tiny weights): the source is tokenized with source.spm,
# the target with target.spm (pairs where the two models cut differently). align's AER of
# every layer, head and head mean and each sentence's alignment equal a NumPy
# re-computation from `attnscope run --text --target`'s cross_attentions and token offsets
# (the target's tokens: the decoder's input shifted back, the end token last); analyze
# stores every encoder, decoder and cross head in encdec_heads, the cross heads' AER equal
# to align's.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
need_sqlite3
PY=/usr/bin/python3
FX=$ROOT/tests/ref/fixtures
D=$TMP/marian
make_marian_tiny "$D"
printf '%s\n' "the old house" "Straße und Fuß" "café naïve résumé" "Hello world" >"$TMP/s.src"
printf '%s\n' "Übung macht den Meister" "the old house" "Hello world" "café naïve résumé" >"$TMP/s.tgt"
printf '%s\n' "0-0 1-1 2?3" "0-0 1?1 2-2" "0-0 2-1" "0-0 1-1 1?2" >"$TMP/s.gold"
N=4
for i in $(seq 1 $N); do
  "$BIN" run --model "$D" --text "$(sed -n "${i}p" "$TMP/s.src")" --target "$(sed -n "${i}p" "$TMP/s.tgt")" \
    --capture attn --format json --out "$TMP/p$i.json" || fail "run pair $i"
done
expect 0 "" -- align --model "$D" --source "$TMP/s.src" --target "$TMP/s.tgt" --gold "$TMP/s.gold" --format json \
  --out "$TMP/a.json"
AS_CLI_TESTS="$ROOT/tests/cli" $PY - "$TMP" $N "$FX/marian_spm/expected.json" <<'PY' && ok "align on Marian: AER per head and head mean, alignments = NumPy" || fail "align on Marian vs NumPy"
import json, os, sys
import numpy as np
sys.path.insert(0, os.environ["AS_CLI_TESTS"])
from align_ref import aer as aer_of, score_pair, words
tmp, n = sys.argv[1], int(sys.argv[2])
out = json.load(open(f"{tmp}/a.json"))
e = json.load(open(sys.argv[3]))
# the two SentencePiece models cut these lines differently: the target side is target.spm's
for line in ("Straße und Fuß", "café naïve résumé"):
    i = e["lines"].index(line)
    assert e["source"][i] != e["target"][i], line

src = open(f"{tmp}/s.src", encoding="utf-8").read().splitlines()
tgt = open(f"{tmp}/s.tgt", encoding="utf-8").read().splitlines()
gold = open(f"{tmp}/s.gold").read().splitlines()
L, H = 3, 3
cnt = np.zeros((L, H + 1, 4))
aligns = {}
for k in range(n):
    p = json.load(open(f"{tmp}/p{k + 1}.json", encoding="utf-8"))
    A = np.array(p["cross_attentions"], np.float64)  # (L, H, Tt, Ts)
    sw, Ws = words(src[k], p["tokens"])
    # the target's tokens: the decoder's input without its start token, then the end token
    dec = p["decoder_tokens"]
    assert p["decoder_input_ids"][0] == 100 and dec[-1]["end"] <= len(tgt[k].encode())
    lw, Wt = words(tgt[k], dec[1:] + [{"start": -1, "end": -1}])
    assert A.shape[2] == len(lw) and A.shape[3] == len(sw), (A.shape, len(lw), len(sw))
    score_pair(A, sw, Ws, lw, Wt, gold[k], cnt, aligns, k)
aer = aer_of(cnt)
assert out["model_type"] == "marian" and out["pairs"] == n
assert np.abs(np.array(out["aer"]) - aer[:, :H]).max() < 1e-5, (out["aer"], aer)
assert np.abs(np.array(out["aer_mean"]) - aer[:, H]).max() < 1e-5, (out["aer_mean"], aer[:, H])
sl, sh = out["selected"]["layer"], out["selected"]["head"]
for k, s in enumerate(out["sentences"]):
    assert s["alignment"] == aligns[(k, sl, sh)], (k, s["alignment"], aligns[(k, sl, sh)])
    assert s["source_words"] == len(src[k].split()) and s["target_words"] == len(tgt[k].split())
json.dump(aer[:, :H].tolist(), open(f"{tmp}/aer.json", "w"))
PY
expect 0 "" -- analyze --model "$D" --source "$TMP/s.src" --target "$TMP/s.tgt" --gold "$TMP/s.gold" --db "$TMP/a.db"
sqlite3 -json "$TMP/a.db" "SELECT kind, layer, head, n_sentences, aer FROM encdec_heads ORDER BY kind, layer, head" \
  >"$TMP/rows.json"
$PY - "$TMP" $N <<'PY' && ok "analyze on Marian: encdec_heads holds every head, cross AER = align's" || fail "analyze on Marian"
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
rows = {(r["kind"], r["layer"], r["head"]): r for r in json.load(open(f"{tmp}/rows.json"))}
assert len(rows) == 2 * 3 + 3 * 3 + 3 * 3, len(rows)
aer = json.load(open(f"{tmp}/aer.json"))
for l in range(3):
    for h in range(3):
        r = rows[("cross", l, h)]
        assert r["n_sentences"] == n and abs(r["aer"] - aer[l][h]) < 1e-5, (l, h, r, aer[l][h])
        assert rows[("decoder", l, h)]["aer"] is None
PY
exit $((fails > 0))
