#!/usr/bin/env bash
# test_align_analyze.sh — `attnscope analyze --source --target --gold` on an encoder-decoder
# model (tests/cli/align_model.py) over the first pairs of data/align: table encdec_heads
# holds every encoder, decoder and cross-attention head; encoder and decoder statistics
# equal the mean over pairs of `attnscope run --capture stats` (encoder_head_stats,
# decoder_head_stats), cross-attention's entropy, first-token mass and largest weight equal
# a NumPy computation from run's cross_attentions, its AER equals `attnscope align`'s; a
# second analyze does nothing; report and export show the run; a schema version 5
# database is upgraded in place to 6; errors exit 2 with one line.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
need_sqlite3
PY=/usr/bin/python3
D=$ROOT/data/align
M=$TMP/m
$PY "$ROOT/tests/cli/align_model.py" "$M" || { fail "align_model.py"; exit 1; }
N=5
head -n $N "$D/en-de.en" >"$TMP/s.en"; head -n $N "$D/en-de.de" >"$TMP/s.de"; head -n $N "$D/en-de.align" >"$TMP/s.align"
for i in $(seq 1 $N); do
  "$BIN" run --model "$M" --text "$(sed -n "${i}p" "$TMP/s.en")" --target "$(sed -n "${i}p" "$TMP/s.de")" \
    --capture attn,stats --out "$TMP/p$i.npz" || fail "run pair $i"
done
expect 0 "" -- align --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/s.align" --format json --out "$TMP/a.json"
expect 0 "" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/s.align" --db "$TMP/a.db"
sqlite3 -json "$TMP/a.db" "SELECT * FROM encdec_heads ORDER BY kind, layer, head" >"$TMP/rows.json"
$PY - "$TMP" $N <<'PY' && ok "encdec_heads = run's statistics, NumPy cross statistics and align's AER" || fail "encdec_heads values"
import json, sys
import numpy as np
tmp, n = sys.argv[1], int(sys.argv[2])
rows = {(r["kind"], r["layer"], r["head"]): r for r in json.load(open(f"{tmp}/rows.json"))}
assert len(rows) == 2 * 3 + 3 * 3 + 3 * 3, len(rows)
z = [np.load(f"{tmp}/p{i + 1}.npz") for i in range(n)]
cols = ["entropy", "sink", "self", "prev", "next", "dist", "spread", "max"]
for kind, arr in (("encoder", "encoder_head_stats"), ("decoder", "decoder_head_stats")):
    ref = np.mean([zz[arr] for zz in z], axis=0)  # (L, H, 8)
    for (l, h), v in np.ndenumerate(ref[..., 0]):
        r = rows[(kind, l, h)]
        assert r["n_sentences"] == n and r["aer"] is None
        for c, name in enumerate(cols):
            assert abs(r[name] - ref[l, h, c]) < 1e-5, (kind, l, h, name, r[name], ref[l, h, c])
ent, sink, mx = [], [], []
for zz in z:
    A = zz["cross_attentions"].astype(np.float64)  # (L, H, Tt, Ts)
    keep = zz["decoder_attention_mask"] > 0
    A = A[:, :, keep]
    with np.errstate(divide="ignore", invalid="ignore"):
        e = -np.where(A > 0, A * np.log(A), 0).sum(-1)
    ent.append(e.mean(-1)); sink.append(A[..., 0].mean(-1)); mx.append(A.max(-1).mean(-1))
ent, sink, mx = (np.mean(x, axis=0) for x in (ent, sink, mx))
aer = json.load(open(f"{tmp}/a.json"))["aer"]
for l in range(3):
    for h in range(3):
        r = rows[("cross", l, h)]
        assert abs(r["entropy"] - ent[l, h]) < 1e-5 and abs(r["sink"] - sink[l, h]) < 1e-6 and abs(r["max"] - mx[l, h]) < 1e-6, r
        assert r["self"] is None and r["prev"] is None and r["dist"] is None
        assert abs(r["aer"] - aer[l][h]) < 1e-6, (r["aer"], aer[l][h])
        assert abs(1 - (r["hit_sure"] + r["hit_possible"]) / (r["links"] + r["sure"]) - r["aer"]) < 1e-12
PY
expect 0 "" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/s.align" --db "$TMP/a.db"
grep -q "nothing to do" "$TMP/out" && ok "second analyze: nothing to do" || fail "second analyze: $(cat "$TMP/out")"
expect 0 "" -- report --db "$TMP/a.db"
grep -q "^  cross-attention:" "$TMP/out" && grep -q "^    lowest aer " "$TMP/out" && grep -q "^  decoder self-attention:" "$TMP/out" &&
  ok "report: the three kinds and the lowest AER" || fail "report: $(cat "$TMP/out")"
expect 0 "" -- export --db "$TMP/a.db" --out "$TMP/e.json"
$PY -c "
import json, sys; m = json.load(open(sys.argv[1]))['models'][0]; a = json.load(open(sys.argv[2]))['aer']
e = m['encdec_heads']
assert (e['encoder']['layers'], e['decoder']['layers'], e['cross']['layers'], e['cross']['heads']) == (2, 3, 3, 3)
assert all(abs(x - y) < 1e-6 for x, y in zip(e['cross']['columns']['aer'], sum(a, [])))
assert e['encoder']['columns']['aer'] == [None] * 6 and len(e['decoder']['columns']['prev']) == 9
" "$TMP/e.json" "$TMP/a.json" && ok "export: encdec_heads" || fail "export encdec_heads"
# without gold: statistics, no AER; another run in the same database
expect 0 "" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --db "$TMP/a.db" --quiet
[ "$(sqlite3 "$TMP/a.db" "SELECT count(*), count(aer) FROM encdec_heads WHERE run=2")" = "24|0" ] && ok "no gold: no AER" || fail "no gold"
# a schema version 5 database (no encdec_heads) is upgraded in place
cp "$TMP/a.db" "$TMP/v5.db"
sqlite3 "$TMP/v5.db" "DROP TABLE encdec_heads; UPDATE meta SET value='5' WHERE key='schema_version'"
expect 0 "" -- report --db "$TMP/v5.db"
[ "$(sqlite3 "$TMP/v5.db" "SELECT value FROM meta WHERE key='schema_version'; SELECT count(*) FROM encdec_heads")" = "6
0" ] && ok "version 5 upgraded to 6" || fail "upgrade"
# errors
expect 2 "give --source FILE and --target FILE together" -- analyze --model "$M" --source "$TMP/s.en" --db "$TMP/x.db"
expect 2 "--gold needs --source FILE and --target FILE" -- analyze --model "$M" --conllu "$TMP/s.en" --gold "$TMP/s.align" --db "$TMP/x.db"
expect 2 "do not go with --sst2" -- analyze --model "$M" --sst2 "$TMP/s.en" --source "$TMP/s.en" --target "$TMP/s.de" --db "$TMP/x.db"
expect 2 "not an encoder-decoder model" -- analyze --model "$ROOT/tests/ref/fixtures/models/bert" --source "$TMP/s.en" --target "$TMP/s.de" --db "$TMP/x.db"
head -n 3 "$TMP/s.de" >"$TMP/short.de"
expect 2 "has 5 lines but" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/short.de" --db "$TMP/x.db"
sed '2s/$/ 0-40/' "$TMP/s.align" >"$TMP/bad.align"
expect 2 "bad.align:2: pair 7 '0-40': target index 40 is outside" -- analyze --model "$M" --source "$TMP/s.en" --target "$TMP/s.de" --gold "$TMP/bad.align" --db "$TMP/x.db"
exit $((fails > 0))
