#!/usr/bin/env bash
# make_analysis_db.sh — writes a small real analysis database for the server and browser
# tests of the Dodrio views: two tiny SST-2 classifiers built from the committed
# fixtures (tests/ref/fixtures/models/bert and .../distilbert, with a 112-entry WordPiece
# vocabulary written here), analysed by the real `attnscope analyze` on a small built-in
# SST-2 TSV + CoNLL-U corpus into one database. Deterministic. Takes a few seconds.
# Usage: make_analysis_db.sh BINARY OUT_DIR
#   OUT_DIR/bert-sst/      classifier (2 layers x 4 heads, 64 positions)   -> run 1
#   OUT_DIR/distil-sst/    DistilBERT classifier (2 x 4)                    -> run 2 (with --topk 4)
#   OUT_DIR/sst.tsv, OUT_DIR/ud.conllu, OUT_DIR/analysis.sqlite
# The last SST-2 sentence is long enough to be truncated to 64 tokens (the graph benchmark).
set -eu
BIN=$1
OUT=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FIX=$ROOT/tests/ref/fixtures/models
mkdir -p "$OUT"
vocab() {
  { printf '%s\n' '[PAD]' '[UNK]' '[CLS]' '[SEP]' '[MASK]'; for c in {a..z}; do echo "$c"; done; for c in {a..z}; do echo "##$c"; done
    printf '%s\n' . , '!' '?' "'" - the a an it is was and of to in film movie good bad not this that with for its as but on one all story funny love like no so be at by more than about his her has have are you from into most just very work
  } | head -112
}
for m in bert:bert-sst distilbert:distil-sst; do
  src=${m%%:*}; dst=$OUT/${m##*:}
  mkdir -p "$dst"
  cp "$FIX/$src/config.json" "$FIX/$src/model.safetensors" "$dst/"
  vocab >"$dst/vocab.txt"
done
{
  printf 'sentence\tlabel\n'
  printf 'it is a good film .\t1\nthe story was not funny .\t0\na very funny movie with love .\t1\nthis is a bad film .\t0\n'
  printf 'the film was just about good .\t1\nno story and no love .\t0\nit has most of the work .\t1\nthis movie is so bad .\t0\n'
  printf 'a story about love and film , funny and good , with one of the most funny and good story lines in this film about work that is very good and not bad at all , like the best work of his and her story of love , funny and very good , it is so good .\t1\n'
} >"$OUT/sst.tsv"
: >"$OUT/ud.conllu"
i=0
for s in "The:film:was:good" "The:story:is:bad" "A:movie:was:funny" "The:film:has:love" "A:story:was:not" "The:work:is:good"; do
  i=$((i+1))
  IFS=: read -r w1 w2 w3 w4 <<<"$s"
  printf '# text = %s %s %s %s.\n' "$w1" "$w2" "$w3" "$w4" >>"$OUT/ud.conllu"
  printf '1\t%s\t_\tDET\t_\t_\t2\tdet\t_\t_\n2\t%s\t_\tNOUN\t_\t_\t4\tnsubj\t_\t_\n3\t%s\t_\tAUX\t_\t_\t4\tcop\t_\t_\n4\t%s\t_\tADJ\t_\t_\t0\troot\t_\tSpaceAfter=No\n5\t.\t_\tPUNCT\t_\t_\t4\tpunct\t_\t_\n\n' \
    "$w1" "$w2" "$w3" "$w4" >>"$OUT/ud.conllu"
done
rm -f "$OUT/analysis.sqlite" "$OUT/analysis.sqlite-wal" "$OUT/analysis.sqlite-shm"
for m in bert-sst distil-sst; do
  "$BIN" analyze --model "$OUT/$m" --sst2 "$OUT/sst.tsv" --conllu "$OUT/ud.conllu" --db "$OUT/analysis.sqlite" \
    --chunk 4 --explain 4 --min-rel 2 --threads 1 --quiet $([ $m = distil-sst ] && echo --topk 4)
done
