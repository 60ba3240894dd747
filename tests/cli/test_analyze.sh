#!/usr/bin/env bash
# attnscope analyze / report / export / import end to end with the real binary.
#  1. kill/resume: an uninterrupted run vs a run killed with SIGKILL after short random
#     delays several times and resumed; every stored table (sentences, tokens, words,
#     saliency, per-sentence-per-head scores, chunk accumulators, relation counts, and
#     the aggregates) must be byte-identical in `sqlite3 .dump`; a finished run is a no-op.
#  2. a classifier model (the tests/ref bert fixture + a small vocab.txt written here):
#     semantic scores exist for every head over the SST-2 sentences only; two models
#     share one database; report and export show both.
#  3. malformed CoNLL-U / TSV / options: exit 2 with one line naming file and line.
#  4. import of ../shared/data/bert-base-sst2-attention (skipped when absent): the
#     known BERT-base heads (Clark et al. 2019) come out: L7H10 determiner head,
#     L2H0 next-word head.
# Usage: test_analyze.sh BINARY. Needs sqlite3 (Debian package sqlite3). CPU: --threads 1.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
SHARED=$ROOT/../shared/data
M=$ROOT/models/demo-bert
need_sqlite3

# corpora: from ../shared when present, else small ones written here
if [ -f "$SHARED/sst2/dev.tsv" ] && [ -f "$SHARED/ud/en_ewt-ud-dev.conllu" ]; then
  SST=$SHARED/sst2/dev.tsv; CU=$SHARED/ud/en_ewt-ud-dev.conllu
else
  echo "note: ../shared/data absent: using a small built-in corpus"
  SST=$TMP/sst.tsv; CU=$TMP/ud.conllu
  { printf 'sentence\tlabel\n'; for i in $(seq 1 30); do printf 'it is a good film number %d .\t1\nthe story was not funny at all %d .\t0\n' $i $i; done; } >"$SST"
  for i in $(seq 1 30); do printf '# text = The cat didn'"'"'t sit %d.\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t5\tnsubj\t_\t_\n3-4\tdidn'"'"'t\t_\t_\t_\t_\t_\t_\t_\t_\n3\tdid\tdo\tAUX\tVBD\t_\t5\taux\t_\t_\n4\tn'"'"'t\tnot\tPART\tRB\t_\t5\tadvmod\t_\t_\n5\tsit\tsit\tVERB\tVB\t_\t0\troot\t_\t_\n6\t%d\t%d\tNUM\tCD\t_\t5\tobj\t_\tSpaceAfter=No\n7\t.\t.\tPUNCT\t.\t_\t5\tpunct\t_\t_\n\n' $i $i $i; done >"$CU"
fi
ARGS=(--model "$M" --sst2 "$SST" --conllu "$CU" --limit 40 --chunk 4 --explain 6 --min-rel 5 --threads 1)
TABLES="sentences tokens words saliency sentence_heads chunks rel_totals rel_counts baseline_counts head_scores rel_accuracy head_pairs patterns"
dump() { sqlite3 "$1" ".dump $TABLES" | grep -v '^PRAGMA\|^BEGIN\|^COMMIT\|^CREATE'; }

# ---- 1. kill / resume -------------------------------------------------------------------
if "$BIN" analyze "${ARGS[@]}" --quiet --db "$TMP/ref.db"; then ok "uninterrupted analyze"; else fail "uninterrupted analyze"; fi
# kill -9 as soon as the run has committed progress past the previous kill's (polling
# the database), until three kills have landed mid-corpus (at most 24 runs); a run that
# finished between two polls starts over on a fresh database
total=$(sqlite3 "$TMP/ref.db" "SELECT n_total FROM runs")
kills=0; midway=0; done_n=0
for round in $(seq 1 24); do
  "$BIN" analyze "${ARGS[@]}" --quiet --db "$TMP/kill.db" &
  pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    n=$(sqlite3 "$TMP/kill.db" "SELECT n_done FROM runs WHERE status = 'running'" 2>/dev/null)
    if [ -n "$n" ] && [ "$n" -gt "$done_n" ] && [ "$n" -lt "$total" ]; then
      kill -9 "$pid" 2>/dev/null && kills=$((kills+1))
      break
    fi
    sleep 0.002
  done
  wait "$pid" 2>/dev/null
  st=$(sqlite3 "$TMP/kill.db" "SELECT status || ' ' || n_done FROM runs" 2>/dev/null)
  echo "  round $round: ${st:-no run yet}"
  case "$st" in
    "running "[1-9]*) if [ "${st#running }" -gt "$done_n" ]; then midway=$((midway+1)); done_n=${st#running }; fi;;
    done*) if [ "$midway" -ge 2 ]; then break; fi
           rm -f "$TMP/kill.db"*; midway=0; done_n=0; kills=0;;
  esac
  [ "$midway" -ge 3 ] && break
done
if "$BIN" analyze "${ARGS[@]}" --quiet --db "$TMP/kill.db"; then ok "resumed analyze after $kills kills ($midway mid-corpus)"; else fail "resume"; fi
[ "$midway" -ge 2 ] || fail "only $midway kills landed mid-corpus"
if [ "$(dump "$TMP/ref.db" | md5sum)" = "$(dump "$TMP/kill.db" | md5sum)" ]; then
  ok "killed+resumed database identical to the uninterrupted one ($(dump "$TMP/ref.db" | wc -l) rows)"
else
  fail "killed+resumed database differs"; diff <(dump "$TMP/ref.db") <(dump "$TMP/kill.db") | head -5
fi
n=$(sqlite3 "$TMP/kill.db" "SELECT count(*) FROM sentence_heads")
want=$(( $(sqlite3 "$TMP/ref.db" "SELECT n_total FROM runs") * 8 ))
[ "$n" = "$want" ] && ok "sentence_heads rows: $n = sentences x 8 heads" || fail "sentence_heads rows $n, want $want"
before=$(dump "$TMP/kill.db" | md5sum)
out=$("$BIN" analyze "${ARGS[@]}" --db "$TMP/kill.db")
if echo "$out" | grep -q "nothing to do" && [ "$before" = "$(dump "$TMP/kill.db" | md5sum)" ]; then ok "finished run is a no-op"; else fail "re-run of a finished analysis changed something: $out"; fi

# ---- 2. classifier model: semantic score; two models in one db -------------------------
C=$TMP/clsmodel; mkdir -p "$C"
cp "$ROOT/tests/ref/fixtures/models/bert/config.json" "$ROOT/tests/ref/fixtures/models/bert/model.safetensors" "$C/"
{ printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]'; for c in {a..z}; do echo "$c"; done; for c in {a..z}; do echo "##$c"; done
  printf '%s\n' . , '!' '?' "'" - the a an it is was and of to in film movie good bad not this that with for its as but on one all story funny love like no so be at by more than about his her has have are you from into most just very work
} | head -112 >"$C/vocab.txt"
if "$BIN" analyze --model "$C" --sst2 "$SST" --conllu "$CU" --limit 6 --threads 1 --quiet --db "$TMP/ref.db"; then ok "analyze classifier model into the same db"; else fail "analyze classifier model"; fi
r=$(sqlite3 "$TMP/ref.db" "SELECT count(*), min(n_semantic), max(n_semantic), min(semantic) > 0 FROM head_scores WHERE run=2")
[ "$r" = "8|6|6|1" ] && ok "semantic score on all 8 heads over the 6 SST-2 sentences" || fail "semantic: $r"
# --explain 0: SST-2 sentences take their attention from the saliency forward (training
# code) instead of a second engine forward; the head scores must agree with the explained run
"$BIN" analyze --model "$C" --sst2 "$SST" --conllu "$CU" --limit 6 --explain 0 --threads 1 --quiet --db "$TMP/reuse.db" || fail "analyze --explain 0"
sqlite3 "$TMP/reuse.db" "ATTACH '$TMP/ref.db' AS r; SELECT max(max(abs(a.importance - b.importance), abs(a.semantic - b.semantic), abs(a.cls - b.cls), abs(a.sep - b.sep), abs(a.prev - b.prev), abs(a.next - b.next), abs(a.entropy - b.entropy))), count(*) FROM head_scores a JOIN r.head_scores b ON b.run = 2 AND a.layer = b.layer AND a.head = b.head WHERE a.run = 1" >"$TMP/reuse.txt"
d=$(cut -d'|' -f1 "$TMP/reuse.txt"); n=$(cut -d'|' -f2 "$TMP/reuse.txt")
[ "$n" = 8 ] && python3 -c "import sys; sys.exit(0 if float('$d') < 1e-5 else 1)" && ok "--explain 0 (attention from the saliency forward) = engine forward: max diff $d over 8 heads" || fail "--explain 0 differs: $(cat "$TMP/reuse.txt")"
r=$(sqlite3 "$TMP/ref.db" "SELECT count(*) FROM saliency WHERE run=2 AND sent < 6; SELECT count(*) FROM saliency WHERE run=2 AND sent >= 6; SELECT count(*) FROM head_scores WHERE run=1 AND semantic IS NOT NULL")
[ "$(echo $r)" = "$(sqlite3 "$TMP/ref.db" "SELECT sum(n_tokens) FROM sentences WHERE run=2 AND idx < 6") 0 0" ] && ok "saliency stored for SST-2 tokens only; none for the MLM-only model" || fail "saliency rows: $r"
"$BIN" report --db "$TMP/ref.db" >"$TMP/report.txt" 2>&1 || fail "report"
grep -q "^run 1: .*demo-bert" "$TMP/report.txt" && grep -q "^run 2: .*clsmodel" "$TMP/report.txt" && grep -q "top semantic .*L[01]H[0-3] 0\." "$TMP/report.txt" \
  && ok "report lists both models and top semantic heads" || { fail "report"; cat "$TMP/report.txt"; }
"$BIN" export --db "$TMP/ref.db" --out "$TMP/heads.json" || fail "export"
/usr/bin/python3 - "$TMP/heads.json" <<'PY' && ok "export JSON: 2 models x 8 heads with every documented field" || fail "export JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["format"] == "attnscope-heads" and j["format_version"] == 2 and len(j["models"]) == 2
for m in j["models"]:
    hd, LH = m["heads"], m["n_layer"] * m["n_head"]
    assert LH == 8 and hd["n_scored"] == 8 and (hd["layers"], hd["heads"]) == (m["n_layer"], m["n_head"]) and len(m["head_jsd"]) == 8
    for k in ("semantic", "importance", "syntactic", "cls", "sep", "punct", "self", "prev", "next", "entropy", "entropy_norm", "pattern", "confidence", "abl_token"):
        assert len(hd["columns"][k]) == LH, k
    assert all(x in ("next-word", "previous-word", "self", "delimiter-focused", "broad", "other") for x in hd["columns"]["pattern"])
    assert m["relations"] and all(len(r[d]["accuracy"]) == LH for r in m["relations"].values() for d in r if d != "n")
assert all(x is None for x in j["models"][0]["heads"]["columns"]["semantic"])
assert all(0 < x <= 1 for x in j["models"][1]["heads"]["columns"]["semantic"])
PY

# ---- 3. malformed inputs ----------------------------------------------------------------
expect2() { # expect2 PATTERN args...: exit 2, one line on stderr containing PATTERN
  local pat=$1; shift
  "$BIN" "$@" >/dev/null 2>"$TMP/err"; local st=$?
  if [ "$st" = 2 ] && grep -q -- "$pat" "$TMP/err" && [ "$(wc -l <"$TMP/err")" = 1 ]; then ok "$pat"; else fail "attnscope $* -> $st: $(cat "$TMP/err")"; fi
}
printf '# text = a b\n1\ta\ta\tX\tX\t_\t0\troot\t_\t_\n2\tb\tb\tX\tX\t_\t1\n' >"$TMP/bad1.conllu"
expect2 "bad1.conllu:3: expected 10 tab-separated fields" analyze --model "$M" --conllu "$TMP/bad1.conllu" --db "$TMP/x.db"
printf '# text = a b\n1\ta\ta\tX\tX\t_\t0\troot\t_\t_\n2\tb\tb\tX\tX\t_\t7\tdep\t_\t_\n\n' >"$TMP/bad2.conllu"
expect2 "bad2.conllu:3: HEAD 7 is beyond" analyze --model "$M" --conllu "$TMP/bad2.conllu" --db "$TMP/x.db"
printf 'sentence\tlabel\ngood\t1\nbad\tx\n' >"$TMP/bad.tsv"
expect2 "bad.tsv:3: label 'x'" analyze --model "$M" --sst2 "$TMP/bad.tsv" --db "$TMP/x.db"
expect2 "sentence<TAB>label" analyze --model "$M" --sst2 "$CU" --db "$TMP/x.db"
expect2 "give --sst2" analyze --model "$M" --db "$TMP/x.db"
expect2 "--db FILE is required" report
expect2 "cannot open database" report --db "$TMP/none.db"

# ---- 4. import of real BERT-base attention ------------------------------------------
D=$SHARED/bert-base-sst2-attention
if [ -d "$D" ]; then
  "$BIN" import --dir "$D" --db "$TMP/imp.db" --min-rel 20 --quiet || fail "import"
  r=$(sqlite3 "$TMP/imp.db" "SELECT label FROM patterns WHERE layer=2 AND head=0; SELECT relation || ' ' || dir FROM rel_accuracy WHERE layer=7 AND head=10 AND relation='det' AND counted=1 AND accuracy > 0.85")
  [ "$(echo $r)" = "next-word det 0" ] && ok "import: L2H0 next-word, L7H10 determiner->noun head (Clark et al. 2019 head 8-11)" || fail "import heads: $r"
else
  echo "SKIPPED (part): $D absent (import of real BERT-base attention not tested)"
fi

[ "$fails" = 0 ] && echo "all analyze CLI tests passed" || echo "$fails failure(s)"
[ "$fails" = 0 ]
