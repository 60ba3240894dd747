#!/usr/bin/env bash
# MPI scale-out of attnscope analyze: `mpirun -n N attnscope analyze ...` must write exactly
# the database a single process writes (every table compared with `sqlite3 .dump`; only
# the runs' timestamps may differ).
#  1. demo model, SST-2 + CoNLL-U, explained sentences on both ranks: -n 2 and -n 3
#     (uneven split, chunks not a multiple of the ranks) == single process.
#  2. classifier model (gradient saliency, semantic scores) under -n 2 == single process.
#  3. resume: a single-process run killed with SIGKILL mid-corpus, resumed under
#     mpirun -n 2, == the uninterrupted run; a finished run is a no-op under MPI too.
#  4. a malformed corpus under mpirun: exit 2 and the one-line message, printed once.
# Skips (exit 0 with a message) when mpirun is absent or the binary was built without MPI.
# Usage: test_mpi.sh BINARY. Needs sqlite3.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
SHARED=$ROOT/../shared/data
M=$ROOT/models/demo-bert
command -v mpirun >/dev/null || { echo "SKIPPED: mpirun not found (make deps installs openmpi-bin libopenmpi-dev; then rebuild)"; exit 77; }
"$BIN" analyze --help | grep -q "MPI enabled" || { echo "SKIPPED: $BIN was built without MPI (CMake did not find it)"; exit 77; }
need_sqlite3
# OpenMPI in containers, as root: shared-memory transport without single-copy (no CMA/ptrace)
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader OMPI_MCA_rmaps_base_oversubscribe=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)
# an ASan build: OpenMPI's own allocations live until exit; suppress those only
# (full unwinding: OpenMPI's frames have no frame pointers, and suppressions match any frame)
export LSAN_OPTIONS="suppressions=$ROOT/tests/cli/lsan_mpi.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
export ASAN_OPTIONS="fast_unwind_on_malloc=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

if [ -f "$SHARED/sst2/dev.tsv" ] && [ -f "$SHARED/ud/en_ewt-ud-dev.conllu" ]; then
  SST=$SHARED/sst2/dev.tsv; CU=$SHARED/ud/en_ewt-ud-dev.conllu
else
  echo "note: ../shared/data absent: using a small built-in corpus"
  SST=$TMP/sst.tsv; CU=$TMP/ud.conllu
  { printf 'sentence\tlabel\n'; for i in $(seq 1 200); do printf 'it is a good film number %d .\t1\nthe story was not funny at all %d .\t0\n' $i $i; done; } >"$SST"
  for i in $(seq 1 200); do printf '# text = The cat didn'"'"'t sit %d.\n1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\tcat\tNOUN\tNN\t_\t5\tnsubj\t_\t_\n3-4\tdidn'"'"'t\t_\t_\t_\t_\t_\t_\t_\t_\n3\tdid\tdo\tAUX\tVBD\t_\t5\taux\t_\t_\n4\tn'"'"'t\tnot\tPART\tRB\t_\t5\tadvmod\t_\t_\n5\tsit\tsit\tVERB\tVB\t_\t0\troot\t_\t_\n6\t%d\t%d\tNUM\tCD\t_\t5\tobj\t_\tSpaceAfter=No\n7\t.\t.\tPUNCT\t.\t_\t5\tpunct\t_\t_\n\n' $i $i $i; done >"$CU"
fi
TABLES="sentences tokens words saliency sentence_heads chunks rel_totals rel_counts baseline_counts head_scores rel_accuracy head_pairs patterns"
dump() { sqlite3 "$1" ".dump $TABLES" | grep -v '^PRAGMA\|^BEGIN\|^COMMIT\|^CREATE'
         sqlite3 "$1" "SELECT id, model_name, model_digest, arch, n_layer, n_head, d_head, corpus, corpus_digest, params, version, n_total, n_done, status FROM runs"; }
same() { # same A.db B.db WHAT
  if [ "$(dump "$1" | md5sum)" = "$(dump "$2" | md5sum)" ]; then ok "$3: identical databases ($(dump "$1" | wc -l) rows)"
  else fail "$3: databases differ"; diff <(dump "$1") <(dump "$2") | head -4; fi
}

# ---- 1. demo model, -n 2 and -n 3 ------------------------------------------------------
ARGS=(--model "$M" --sst2 "$SST" --conllu "$CU" --limit 30 --chunk 4 --explain 7 --min-rel 5)
"$BIN" analyze "${ARGS[@]}" --threads 1 --quiet --db "$TMP/one.db" || fail "single-process analyze"
out=$("${MPIRUN[@]}" -n 2 "$BIN" analyze "${ARGS[@]}" --db "$TMP/two.db" 2>&1) || fail "mpirun -n 2 analyze: $out"
[ "$(echo "$out" | grep -c 'run 1 done: 60 sentences')" = 1 ] && ok "mpirun -n 2: rank 0 reports once: $out" || fail "mpirun -n 2 output: $out"
same "$TMP/one.db" "$TMP/two.db" "60 sentences, 2 ranks vs 1 process"
"${MPIRUN[@]}" -n 3 "$BIN" analyze "${ARGS[@]}" --quiet --db "$TMP/three.db" || fail "mpirun -n 3 analyze"
same "$TMP/one.db" "$TMP/three.db" "60 sentences, 3 ranks vs 1 process"

# ---- 2. classifier model: saliency + semantic scores -----------------------------------
C=$TMP/clsmodel; mkdir -p "$C"
cp "$ROOT/tests/ref/fixtures/models/bert/config.json" "$ROOT/tests/ref/fixtures/models/bert/model.safetensors" "$C/"
{ printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]'; for c in {a..z}; do echo "$c"; done; for c in {a..z}; do echo "##$c"; done
  printf '%s\n' . , '!' '?' "'" - the a an it is was and of to in film movie good bad not this that with for its as but on one all story funny love like no so be at by more than about his her has have are you from into most just very work
} | head -112 >"$C/vocab.txt"
CARGS=(--model "$C" --sst2 "$SST" --conllu "$CU" --limit 9 --chunk 5 --explain 3 --min-rel 3)
"$BIN" analyze "${CARGS[@]}" --threads 1 --quiet --db "$TMP/c1.db" || fail "single-process classifier analyze"
"${MPIRUN[@]}" -n 2 "$BIN" analyze "${CARGS[@]}" --quiet --db "$TMP/c2.db" || fail "mpirun classifier analyze"
r=$(sqlite3 "$TMP/c2.db" "SELECT count(*) FROM saliency; SELECT min(n_semantic) FROM head_scores")
[ "$(echo $r | cut -d' ' -f2)" = 9 ] && ok "classifier under MPI: saliency rows and semantic scores over the 9 SST-2 sentences ($(echo $r))" || fail "classifier: $r"
same "$TMP/c1.db" "$TMP/c2.db" "classifier model, 2 ranks vs 1 process"

# ---- 3. resume under MPI -----------------------------------------------------------------
RARGS=(--model "$M" --sst2 "$SST" --conllu "$CU" --limit 200 --chunk 8 --explain 4 --min-rel 5)
"$BIN" analyze "${RARGS[@]}" --threads 1 --quiet --db "$TMP/full.db" || fail "uninterrupted run"
"$BIN" analyze "${RARGS[@]}" --threads 1 --quiet --db "$TMP/kill.db" &
pid=$!
st=""
for _ in $(seq 1 400); do
  st=$(sqlite3 "$TMP/kill.db" "SELECT n_done FROM runs" 2>/dev/null)
  [ -n "$st" ] && [ "$st" -ge 24 ] && break
  sleep 0.02
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
st=$(sqlite3 "$TMP/kill.db" "SELECT status || ' ' || n_done FROM runs")
case "$st" in "running "[1-9]*) ok "single-process run killed mid-corpus ($st of $(sqlite3 "$TMP/full.db" "SELECT n_total FROM runs"))";;
  *) fail "kill did not land mid-corpus: $st";; esac
out=$("${MPIRUN[@]}" -n 2 "$BIN" analyze "${RARGS[@]}" --db "$TMP/kill.db" 2>&1) || fail "resume under mpirun: $out"
echo "  $out"
same "$TMP/full.db" "$TMP/kill.db" "killed single-process run resumed by 2 ranks vs uninterrupted"
before=$(dump "$TMP/kill.db" | md5sum)
out=$("${MPIRUN[@]}" -n 2 "$BIN" analyze "${RARGS[@]}" --db "$TMP/kill.db" 2>&1)
if echo "$out" | grep -q "nothing to do" && [ "$before" = "$(dump "$TMP/kill.db" | md5sum)" ]; then ok "finished run under mpirun is a no-op"; else fail "re-run under MPI: $out"; fi

# ---- 4. malformed corpus under mpirun ------------------------------------------------------
printf '# text = a b\n1\ta\ta\tX\tX\t_\t0\troot\t_\t_\n2\tb\tb\tX\tX\t_\t7\tdep\t_\t_\n\n' >"$TMP/bad.conllu"
"${MPIRUN[@]}" -n 2 "$BIN" analyze --model "$M" --conllu "$TMP/bad.conllu" --db "$TMP/x.db" >"$TMP/out" 2>&1; st=$?
n=$(grep -c "bad.conllu:3: HEAD 7 is beyond" "$TMP/out")
[ "$st" != 0 ] && [ "$n" = 1 ] && ok "malformed CoNLL-U under mpirun: exit $st, message printed once" || { fail "malformed under MPI: exit $st, $n messages"; cat "$TMP/out"; }

[ "$fails" = 0 ] && echo "all MPI tests passed" || echo "$fails failure(s)"
[ "$fails" = 0 ]
