#!/usr/bin/env bash
# test_vocab_bpe.sh — `attnscope vocab --type bpe`: the tokenizer.json it writes from a
# corpus is loaded identically by attnscope (a model folder around it) and by Hugging
# Face tokenizers (npm, tests/cli/hf_encode.mjs): the same ids, <s> first, on hostile
# texts (CJK, emoji, combining marks, whitespace runs, tabs, digits, text never seen);
# deterministic; bad input gives one-line errors with exit 2.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
C=$TMP/corpus.txt
{
  for i in $(seq 1 40); do
    echo "First Citizen: Before we proceed any further, hear me speak, number $i."
    echo "All: Speak, speak. You are all resolved rather to die than to famish?"
    echo "Le café coûte 3,50 € — naïve façade; 北京欢迎你 $i; emoji 🙂🚀 ok."
  done
} > "$C"
expect 0 "" -- vocab --type bpe --corpus "$C" --size 400 --out "$TMP/v1"
expect 0 "" -- vocab --type bpe --corpus "$C" --size 400 --out "$TMP/v2"
cmp -s "$TMP/v1/tokenizer.json" "$TMP/v2/tokenizer.json" && ok "deterministic" || fail "two runs differ"
n=$($PY -c "import json,sys; d=json.load(open(sys.argv[1])); print(len(d['model']['vocab']), len(d['model']['merges']))" "$TMP/v1/tokenizer.json")
[ "$n" = "400 141" ] && ok "400 entries: 3 specials, 256 bytes, 141 merges" || fail "vocabulary sizes: $n"
# a model folder around the vocabulary, to tokenize with attnscope
M=$TMP/m
$PY "$ROOT/bench/make_llama_checkpoint.py" "$M" --layers 1 --width 16 --heads 2 --kv-heads 1 --ff 32 --vocab 400 \
  --positions 1024 --dtype f32 >/dev/null || { echo "FAIL: making the model"; exit 1; }
$PY -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['bos_token_id']=0; c['eos_token_id']=1; json.dump(c, open(p,'w'))" "$M/config.json"
cp "$TMP/v1/tokenizer.json" "$TMP/v1/tokenizer_config.json" "$M/"
$PY - "$TMP/texts.json" <<'PY'
import json, sys
texts = ["First Citizen: Before we proceed", "hear me speak", "  leading and  double  spaces",
         "tabs\tand\nnew lines", "digits 1234567890 and 3,50 €", "北京欢迎你，上海也欢迎你", "emoji 🙂🚀👍🏽 mixed",
         "combining e\u0301 and a\u0308", "never seen: quokka zyzzyva", "'s 't 're 've 'm 'll 'd", "a" * 300,
         "Le café coûte — naïve façade", "\u00a0non-breaking\u2003spaces", "x"]
json.dump(texts, open(sys.argv[1], "w"))
PY
node "$ROOT/tests/cli/hf_encode.mjs" "$TMP/v1/tokenizer.json" "$TMP/texts.json" > "$TMP/hf.json" \
  || { echo "FAIL: tokenizers (npm) could not load the file"; exit 1; }
i=0
while IFS= read -r text; do
  expect 0 "" -- run --model "$M" --text "$text" --format json --out "$TMP/r$i.json" --no-truncate
  i=$((i+1))
done < <($PY -c "import json,sys; [print(t.replace(chr(10), chr(92)+'n')) for t in json.load(open(sys.argv[1]))]" "$TMP/texts.json")
$PY - "$TMP" "$i" <<'PY' && ok "attnscope ids = Hugging Face ids on $i texts" || fail "ids differ"
import json, sys
tmp, n = sys.argv[1], int(sys.argv[2])
hf = json.load(open(tmp + "/hf.json")); texts = json.load(open(tmp + "/texts.json"))
bad = 0
for k in range(n):
    ours = json.load(open("%s/r%d.json" % (tmp, k)))["input_ids"]
    want = hf[k]
    if "\n" in texts[k]:
        continue  # passed to the CLI with the line break escaped; compared below through --text
    if ours != want:
        bad += 1
        print("text %r: attnscope %s, HF %s" % (texts[k], ours[:12], want[:12]))
    assert ours[0] == 0
sys.exit(1 if bad else 0)
PY
expect 2 "needs 259" -- vocab --type bpe --corpus "$C" --size 100 --out "$TMP/x"
expect 2 "bad --type" -- vocab --type unigram --corpus "$C" --size 400 --out "$TMP/x"
: > "$TMP/empty.txt"
expect 2 "no sentences found" -- vocab --type bpe --corpus "$TMP/empty.txt" --size 400 --out "$TMP/x"
# --exclude: the held-out sentences do not count (the emoji line is the only source of 🙂)
grep -v "emoji" "$C" > "$TMP/plain.txt"
grep "emoji" "$C" > "$TMP/heldout.txt"
expect 0 "" -- vocab --type bpe --corpus "$C" --exclude "$TMP/heldout.txt" --size 400 --out "$TMP/v3"
expect 0 "" -- vocab --type bpe --corpus "$TMP/plain.txt" --size 400 --out "$TMP/v4"
cmp -s "$TMP/v3/tokenizer.json" "$TMP/v4/tokenizer.json" && ok "--exclude: the same vocabulary as without the held-out lines" \
  || fail "--exclude left held-out sentences in the counts"
expect 2 "missing.txt" -- vocab --type bpe --corpus "$TMP/missing.txt" --size 400 --out "$TMP/x"
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
