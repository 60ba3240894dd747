#!/usr/bin/env bash
# test_analyze_topk.sh — `attnscope analyze --topk [K]` with the real binary: a bad K
# (0, 65, not a number, negative) exits 2 with one line naming --topk; --topk alone
# stores K = 8 for every (sentence, layer, head) of models/attnscope-sst2 on a small
# CoNLL-U corpus (rows of 8 * 8 + 4 bytes per token), is part of the run's identity
# (params "topk"), is a no-op when run again, and `report` prints the kept mass per layer
# (non-decreasing in k, at most 1), or exits 2 with one line for a damaged row; a run
# without --topk stores no top-k rows.
# The stored values themselves are checked in tests/unit/test_topk.c.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
need_sqlite3
M=$ROOT/models/attnscope-sst2
CU=$TMP/ud.conllu
for i in 1 2 3 4 5; do
  printf '# text = The cat sat %d.\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_\n3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\t_\n4\t%d\t%d\tNUM\tCD\t_\t3\tobj\t_\tSpaceAfter=No\n5\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_\n\n' $i $i $i
done >"$CU"
A=(--model "$M" --conllu "$CU" --threads 1 --min-rel 1 --quiet)

for k in 0 65 abc -3 1.5; do
  expect 2 "bad --topk '$k'" -- analyze "${A[@]}" --db "$TMP/bad.db" --topk "$k"
done
[ ! -s "$TMP/bad.db" ] && ok "no database written for a bad --topk" || fail "a bad --topk wrote $TMP/bad.db"

expect 0 "" -- analyze "${A[@]}" --topk --db "$TMP/t.db"
L=$(sqlite3 "$TMP/t.db" "SELECT n_layer FROM runs"); H=$(sqlite3 "$TMP/t.db" "SELECT n_head FROM runs")
got=$(sqlite3 "$TMP/t.db" "SELECT count(*), min(k), max(k), sum(length(rows) = n_query * (8 * 8 + 4)) FROM topk")
[ "$got" = "$((5 * L * H))|8|8|$((5 * L * H))" ] && ok "--topk alone: k = 8 for every sentence, layer and head ($got)" \
  || fail "topk rows: $got, want $((5 * L * H))|8|8|$((5 * L * H))"
sqlite3 "$TMP/t.db" "SELECT params FROM runs" | grep -q '"topk":8' && ok "params name topk" || fail "params lack topk"
# the token count of each stored head equals the sentence's
bad=$(sqlite3 "$TMP/t.db" "SELECT count(*) FROM topk t JOIN sentences s ON s.run = t.run AND s.idx = t.sent WHERE t.n_query != s.n_tokens")
[ "$bad" = 0 ] && ok "n_query = n_tokens" || fail "$bad top-k rows with another token count"
"$BIN" analyze "${A[@]}" --topk --db "$TMP/t.db" >"$TMP/again" 2>&1
[ "$(sqlite3 "$TMP/t.db" "SELECT count(*) FROM runs")" = 1 ] && ok "same --topk again: same run" || fail "a second run was made"

"$BIN" report --db "$TMP/t.db" >"$TMP/report" || fail "report"
if grep -q "top-k kept mass (k = 8 stored" "$TMP/report"; then ok "report prints the kept mass"; else fail "report: $(cat "$TMP/report")"; fi
rows=$(awk '/top-k kept mass/{f=1; getline; next} f && NF==5 {print} f && NF!=5 {f=0}' "$TMP/report")
n=$(printf '%s\n' "$rows" | grep -c .)
[ "$n" = "$L" ] && ok "kept mass for each of the $L layers" || fail "kept-mass rows: '$rows'"
printf '%s\n' "$rows" | awk '{ for (i = 3; i <= NF; i++) if ($i + 1e-9 < $(i-1)) bad = 1; if ($NF > 1.0000001 || $2 <= 0) bad = 1 } END { exit bad }' \
  && ok "kept mass grows with k, within (0, 1]" || fail "kept mass not monotone: $rows"

cp "$TMP/t.db" "$TMP/damaged.db"
sqlite3 "$TMP/damaged.db" "UPDATE topk SET rows = x'0011' WHERE sent = 1 AND layer = 0 AND head = 0"
expect 2 "damaged database" -- report --db "$TMP/damaged.db"

expect 0 "" -- analyze "${A[@]}" --db "$TMP/t.db"
[ "$(sqlite3 "$TMP/t.db" "SELECT count(DISTINCT run) FROM topk")" = 1 ] && ok "a run without --topk stores none" \
  || fail "top-k rows of the run without --topk"
[ $fails = 0 ] || exit 1
