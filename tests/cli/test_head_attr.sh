#!/usr/bin/env bash
# test_head_attr.sh — the attribution columns of `attnscope analyze` against PyTorch
# (tests/ref/gen_head_attr.py -> tests/ref/fixtures/head_attr/expected.json): the BERT
# classifier fixture (2 layers x 4 heads) on three SST-2 sentences.
#  1. sentence_heads.head_importance / sink_raw / sink_norm / alti per sentence and head,
#     and head_scores.head_importance / head_importance_norm / norm_sink_ratio /
#     alti_contribution, within 1e-5 of the reference, for --explain 0 (the saliency's
#     forward gives attention, values and hidden states) and --explain 3 (a forward of its
#     own, the saliency's for the gradient); the tokens are the reference's.
#  2. CoNLL-U sentences (no saliency backward): head_importance NULL, the sink ratio and
#     ALTI share stored.
#  3. `export` writes the four columns per head with the database's values.
# Usage: test_head_attr.sh BINARY. Needs sqlite3 and /usr/bin/python3 (standard library).
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
need_sqlite3
FIX=$ROOT/tests/ref/fixtures/head_attr
M=$TMP/bert-sst
mkdir -p "$M"
cp "$ROOT/tests/ref/fixtures/models/bert/config.json" "$ROOT/tests/ref/fixtures/models/bert/model.safetensors" \
  "$FIX/vocab.txt" "$M/"

compare() { # compare DB: every value against expected.json
  /usr/bin/python3 - "$1" "$FIX/expected.json" <<'PY'
import json, sqlite3, sys
db, exp = sqlite3.connect(sys.argv[1]), json.load(open(sys.argv[2]))
H, TOL, worst = exp["heads"], 1e-5, 0.0
def close(what, got, want):
    global worst
    assert got is not None, f"{what}: NULL, want {want}"
    worst = max(worst, abs(got - want))
    assert abs(got - want) <= TOL, f"{what}: {got} vs reference {want}"
for s, e in enumerate(exp["sentences"]):
    toks = [r[0] for r in db.execute("SELECT text FROM tokens WHERE sent = ? ORDER BY pos", (s,))]
    assert toks == e["tokens"], (toks, e["tokens"])
    assert db.execute("SELECT predicted FROM sentences WHERE idx = ?", (s,)).fetchone()[0] == e["predicted"]
    for col in ("head_importance", "sink_raw", "sink_norm", "alti"):
        rows = db.execute(f"SELECT layer, head, {col} FROM sentence_heads WHERE sent = ? ORDER BY layer, head", (s,))
        for l, h, v in rows:
            close(f"sentence {s} L{l}H{h} {col}", v, e[col][l * H + h])
for col, want in exp["heads_agg"].items():
    for l, h, v in db.execute(f"SELECT layer, head, {col} FROM head_scores ORDER BY layer, head"):
        close(f"head_scores L{l}H{h} {col}", v, want[l * H + h])
print(f"max |diff| {worst:.1e}")
PY
}

for ex in 0 3; do
  if "$BIN" analyze --model "$M" --sst2 "$FIX/sst.tsv" --explain $ex --threads 1 --quiet --db "$TMP/e$ex.db"; then
    if out=$(compare "$TMP/e$ex.db" 2>&1); then ok "--explain $ex: every column within 1e-5 of PyTorch ($out)"
    else fail "--explain $ex: $out"; fi
  else fail "analyze --explain $ex"; fi
done

# ---- 2. CoNLL-U: no backward --------------------------------------------------------------
printf '# text = it is a good film .\n1\tit\tit\tPRON\t_\t_\t5\tnsubj\t_\t_\n2\tis\tbe\tAUX\t_\t_\t5\tcop\t_\t_\n3\ta\ta\tDET\t_\t_\t5\tdet\t_\t_\n4\tgood\tgood\tADJ\t_\t_\t5\tamod\t_\t_\n5\tfilm\tfilm\tNOUN\t_\t_\t0\troot\t_\t_\n6\t.\t.\tPUNCT\t_\t_\t5\tpunct\t_\t_\n\n' >"$TMP/ud.conllu"
"$BIN" analyze --model "$M" --conllu "$TMP/ud.conllu" --threads 1 --quiet --db "$TMP/cu.db" || fail "analyze --conllu"
got=$(sqlite3 "$TMP/cu.db" "SELECT count(*) FROM head_scores WHERE head_importance IS NULL AND head_importance_norm IS NULL
  AND norm_sink_ratio > 0 AND alti_contribution > 0")
[ "$got" = 8 ] && ok "CoNLL-U only: head_importance NULL, sink ratio and ALTI share stored (8 heads)" \
  || fail "CoNLL-U only: $got of 8 heads as expected"

# ---- 3. export ----------------------------------------------------------------------------
"$BIN" export --db "$TMP/e0.db" --out "$TMP/heads.json" || fail "export"
/usr/bin/python3 - "$TMP/heads.json" "$TMP/e0.db" <<'PY' && ok "export: the four columns per head, as stored" || fail "export JSON"
import json, sqlite3, sys
cols = json.load(open(sys.argv[1]))["models"][0]["heads"]["columns"]
db = sqlite3.connect(sys.argv[2])
for c in ("head_importance", "head_importance_norm", "norm_sink_ratio", "alti_contribution"):
    want = [r[0] for r in db.execute(f"SELECT {c} FROM head_scores ORDER BY layer, head")]
    assert len(cols[c]) == 8 and all(abs(a - b) <= 1e-6 * abs(b) for a, b in zip(cols[c], want)), (c, cols[c], want)
PY

[ "$fails" = 0 ] && echo "all head attribution tests passed" || echo "$fails failure(s)"
[ "$fails" = 0 ]
