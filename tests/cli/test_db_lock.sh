#!/usr/bin/env bash
# One writer per analysis database, with the real binary:
#  1. while an `analyze` holds the database, a second `analyze` (same arguments) and an
#     `import` on it exit 2 at once with one line saying another process is writing it
#     (never "database is locked" or a raw "UNIQUE constraint failed"); `report` still
#     reads it; the first finishes with one complete run.
#  2. two `analyze` processes started together: each exits 0 or 2 (with that line), at
#     least one 0, and the database equals the single run's.
#  3. the lock goes with the process: after a SIGKILL the same command resumes at once.
# The first writer is held still with SIGSTOP while the others run; flock(1)
# (util-linux), which takes the same flock(2) lock, checks the lock from outside.
# Usage: test_db_lock.sh BINARY. Needs sqlite3.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
M=$ROOT/models/demo-bert
D0=$ROOT/tests/ref/fixtures/analysis/import
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$TMP"' EXIT
need_sqlite3
{ printf 'sentence\tlabel\n'; for i in $(seq 1 60); do printf 'it is a good film number %d .\t1\nthe story was not funny at all %d .\t0\n' $i $i; done; } >"$TMP/sst.tsv"
ARGS=(--model "$M" --sst2 "$TMP/sst.tsv" --chunk 4 --explain 2 --threads 1 --quiet)
TABLES="runs sentences tokens words saliency sentence_heads chunks rel_totals rel_counts baseline_counts head_scores rel_accuracy head_pairs patterns"
dump() { sqlite3 "$1" ".dump $TABLES" | grep -v '^PRAGMA\|^BEGIN\|^COMMIT\|^CREATE' | sed "s/'[0-9-]* [0-9:]*'/T/g"; }
LOCKMSG="another attnscope process (analyze or import) is writing this database"

"$BIN" analyze "${ARGS[@]}" --db "$TMP/ref.db" || fail "reference analyze"
REF=$(dump "$TMP/ref.db" | md5sum)

# ---- 1. a second writer while the first holds the database -------------------------------
# the first analyze (2,000 sentences) is stopped (SIGSTOP) once it has committed a chunk,
# so the others meet it holding the lock whatever the machine's speed; then continued
{ printf 'sentence\tlabel\n'; for i in $(seq 1 1000); do printf 'it is a good film number %d .\t1\nthe story was not funny at all %d .\t0\n' $i $i; done; } >"$TMP/big.tsv"
"$BIN" analyze --model "$M" --sst2 "$TMP/big.tsv" --chunk 1 --explain 0 --threads 1 --quiet --db "$TMP/a.db" 2>"$TMP/e1" &
pid=$!
held=0
for i in $(seq 1 1000); do
  n=$(sqlite3 "$TMP/a.db" "SELECT n_done FROM runs" 2>/dev/null)
  if [ -n "$n" ] && [ "$n" -ge 1 ]; then kill -STOP $pid && held=1; break; fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.01
done
if [ "$held" = 1 ]; then
  if command -v flock >/dev/null; then
    flock -n "$TMP/a.db" true 2>/dev/null && fail "flock(1) finds the database unlocked" || ok "flock(1) sees the writer's lock"
  else
    echo "SKIPPED: flock(1) missing: the lock is not checked from outside"
  fi
  "$BIN" analyze "${ARGS[@]}" --db "$TMP/a.db" 2>"$TMP/e2"; st=$?
  if [ "$st" = 2 ] && grep -qF "$TMP/a.db: $LOCKMSG" "$TMP/e2" && [ "$(wc -l <"$TMP/e2")" = 1 ]; then
    ok "second analyze while the first runs: exit 2: $(cat "$TMP/e2")"
  else fail "second analyze -> $st: $(cat "$TMP/e2")"; fi
  "$BIN" import --dir "$D0" --quiet --db "$TMP/a.db" 2>"$TMP/e3"; st=$?
  [ "$st" = 2 ] && grep -qF "$LOCKMSG" "$TMP/e3" && ok "import while analyze runs: exit 2" || fail "import while analyze runs -> $st: $(cat "$TMP/e3")"
  timeout 60 "$BIN" report --db "$TMP/a.db" >/dev/null 2>"$TMP/e4" && ok "report reads while analyze writes" || fail "report while analyze writes: $(cat "$TMP/e4")"
  kill -CONT $pid
else
  fail "the first analyze never committed a chunk: $(cat "$TMP/e1")"
fi
wait $pid; st=$?
[ "$st" = 0 ] || fail "first analyze -> $st: $(cat "$TMP/e1")"
r=$(sqlite3 "$TMP/a.db" "SELECT count(*), min(status), min(n_done = n_total) FROM runs; SELECT count(*) FROM sentences")
[ "$(echo $r)" = "1|done|1 2000" ] && ok "the first analyze finished alone: 1 run, done, 2000 sentences" || fail "first analyze's database: $(echo $r)"

# ---- 2. two started together --------------------------------------------------------------
for round in 1 2 3; do
  rm -f "$TMP/b.db"*
  "$BIN" analyze "${ARGS[@]}" --db "$TMP/b.db" 2>"$TMP/f1" & p1=$!
  "$BIN" analyze "${ARGS[@]}" --db "$TMP/b.db" 2>"$TMP/f2" & p2=$!
  wait $p1; s1=$?; wait $p2; s2=$?
  good=1
  for k in 1 2; do
    s=$([ $k = 1 ] && echo $s1 || echo $s2)
    case "$s" in
      0) ;;
      2) grep -qF "$LOCKMSG" "$TMP/f$k" && [ "$(wc -l <"$TMP/f$k")" = 1 ] || good=0;;
      *) good=0;;
    esac
  done
  [ "$s1" = 0 ] || [ "$s2" = 0 ] || good=0
  if [ "$good" = 1 ] && [ "$(dump "$TMP/b.db" | md5sum)" = "$REF" ]; then
    ok "round $round: two analyze processes together: exits $s1 and $s2, database equals the reference"
  else
    fail "round $round: exits $s1 ($(cat "$TMP/f1")) and $s2 ($(cat "$TMP/f2"))"
  fi
done

# ---- 3. SIGKILL releases the lock ------------------------------------------------------------
"$BIN" analyze "${ARGS[@]}" --db "$TMP/c.db" 2>/dev/null & pid=$!
sleep 0.5
kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
"$BIN" analyze "${ARGS[@]}" --db "$TMP/c.db" 2>"$TMP/g" && [ "$(dump "$TMP/c.db" | md5sum)" = "$REF" ] \
  && ok "resumed at once after SIGKILL, database equals the reference" || fail "resume after SIGKILL: $(cat "$TMP/g")"

[ "$fails" = 0 ] && echo "all database lock tests passed" || echo "$fails failure(s)"
[ "$fails" = 0 ]
