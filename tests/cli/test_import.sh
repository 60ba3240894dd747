#!/usr/bin/env bash
# attnscope import --attention FILE.npy|npz --tokens FILE.json [--saliency] [--dependencies]
# end to end with the real binary:
#  1. the sentences of tests/ref/fixtures/analysis/import re-exported as PyTorch users
#     would (tests/ref/gen_npz.py: .npz stored and deflated, tokens JSON with
#     special_tokens_mask + word_ids, saliency rows, CoNLL-U or JSON parses) give exactly
#     the tables of `import --dir` on the original folder (whose numbers test_store.c
#     checks against NumPy); re-running is a no-op; other accepted layouts (flat saliency
#     vector, words aligned by spelling, .npy attention) load.
#  2. malformed inputs (truncated / corrupted / float64 / wrong-shape npz, bad JSON,
#     bad word_ids, parse mismatches, option mistakes): exit 2 with one line naming the file;
#     an npz declaring more than the tokens file needs is refused from its shape, and a
#     deflate bomb from its compression ratio, both at a small peak RSS (/usr/bin/time);
#     rows that sum to 2 or 0, entries of 3e38, NaN or < 0 are refused naming the file,
#     layer, head, row and token (an all-zero [PAD] row is accepted); empty and non-ZIP
#     .npz files and a tokens file over the JSON size limit are named as such.
#  3. ../shared/data/bert-base-sst2-attention (skipped when absent) imported file by file
#     equals its --dir import.
# Usage: test_import.sh BINARY. Needs sqlite3 and /usr/bin/python3 (for corrupting copies).
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
F=$ROOT/tests/ref/fixtures/import_files
D0=$ROOT/tests/ref/fixtures/analysis/import
SHARED=$ROOT/../shared/data
need_sqlite3
AGG="head_scores rel_accuracy head_pairs patterns"
# rows of table $2 for run $3 without the run column
rows() { sqlite3 "$1" "SELECT * FROM $2 WHERE run=$3" | cut -d'|' -f2-; }

# ---- 1. files == folder --------------------------------------------------------------
args=()
for t in "$F"/*.tokens.json; do
  n=${t%.tokens.json}
  dep=$n.deps.json; [ -f "$n.conllu" ] && dep=$n.conllu
  args+=(--attention "$n.npz" --tokens "$t" --saliency "$n.saliency.json" --dependencies "$dep")
done
"$BIN" import "${args[@]}" --model-name torch-export --min-rel 3 --quiet --db "$TMP/a.db" || fail "import files"
"$BIN" import --dir "$D0" --min-rel 3 --quiet --db "$TMP/a.db" || fail "import dir"
same=1
for t in $AGG words saliency; do
  [ "$(rows "$TMP/a.db" $t 1 | md5sum)" = "$(rows "$TMP/a.db" $t 2 | md5sum)" ] || { same=0; fail "table $t differs between file and folder import"; }
done
[ "$(sqlite3 "$TMP/a.db" "SELECT sent, pos, text, kind, word FROM tokens WHERE run=1" | md5sum)" = \
  "$(sqlite3 "$TMP/a.db" "SELECT sent, pos, text, kind, word FROM tokens WHERE run=2" | md5sum)" ] || { same=0; fail "tokens differ"; }
r=$(sqlite3 "$TMP/a.db" "SELECT count(*), sum(semantic IS NOT NULL), sum(syntactic > 0) FROM head_scores WHERE run=1; SELECT count(*) FROM rel_accuracy WHERE run=1; SELECT model_name FROM runs WHERE id=1")
[ "$same" = 1 ] && [ "$(echo $r | cut -d' ' -f1)" = "6|6|$(sqlite3 "$TMP/a.db" "SELECT sum(syntactic > 0) FROM head_scores WHERE run=2")" ] \
  && ok "8 sentences from npz (stored + deflated) + tokens/saliency/CoNLL-U/JSON files: every table equals the --dir import ($(echo $r))" \
  || fail "file import: $r"
out=$("$BIN" import "${args[@]}" --model-name torch-export --min-rel 3 --db "$TMP/a.db")
echo "$out" | grep -q "nothing to do" && ok "re-import is a no-op" || fail "re-import: $out"

# other layouts: one sentence, .npy attention, flat saliency of the predicted class,
# words aligned by spelling (no word_ids), no special_tokens_mask
/usr/bin/python3 - "$F/0000" "$TMP/one" <<'PY' || fail "writing the one-sentence variant"
import json, sys, numpy as np
src, dst = sys.argv[1], sys.argv[2]
t = json.load(open(src + ".tokens.json"))
s = json.load(open(src + ".saliency.json"))["saliency"]
np.save(dst + ".npy", np.load(src + ".npz")["attentions"])
json.dump({"tokens": t["tokens"], "sentence": t["text"], "predicted_label": t["prediction"]}, open(dst + ".tokens.json", "w"))
json.dump(s[t["prediction"]], open(dst + ".sal.json", "w"))
PY
"$BIN" import --attention "$TMP/one.npy" --tokens "$TMP/one.tokens.json" --saliency "$TMP/one.sal.json" \
  --dependencies "$F/0000.conllu" --min-rel 1 --quiet --db "$TMP/b.db" || fail "one-sentence import"
"$BIN" import --attention "$F/0000.npz" --tokens "$F/0000.tokens.json" --saliency "$F/0000.saliency.json" \
  --dependencies "$F/0000.conllu" --min-rel 1 --quiet --db "$TMP/b.db" || fail "one-sentence import (full layout)"
for t in sentence_heads rel_counts; do
  [ "$(rows "$TMP/b.db" $t 1 | md5sum)" = "$(rows "$TMP/b.db" $t 2 | md5sum)" ] || fail "one-sentence layouts differ in $t"
done
r=$(sqlite3 "$TMP/b.db" "SELECT count(*) FROM saliency WHERE run=1; SELECT count(*) FROM tokens WHERE run=1 AND word IS NOT NULL; SELECT count(*) FROM sentence_heads WHERE run=1 AND semantic IS NOT NULL")
[ "$(echo $r)" = "11 9 6" ] && ok "npy + flat saliency + spelled-out words: same per-head rows as npz + word_ids (saliency rows, aligned tokens, semantic: $(echo $r))" || fail "one-sentence variant: $(echo $r)"

# ---- 2. malformed inputs ----------------------------------------------------------------
expect2() { # expect2 PATTERN args...: exit 2, one line on stderr containing PATTERN
  local pat=$1; shift
  "$BIN" import "$@" --db "$TMP/x.db" >/dev/null 2>"$TMP/err"; local st=$?
  if [ "$st" = 2 ] && grep -qF -- "$pat" "$TMP/err" && [ "$(wc -l <"$TMP/err")" = 1 ]; then ok "rejected: $(cat "$TMP/err")"; else fail "import $* -> $st: $(cat "$TMP/err")"; fi
}
T0=$F/0000.tokens.json
head -c 1000 "$F/0000.npz" >"$TMP/trunc.npz"
expect2 "trunc.npz: not a .npz archive" --attention "$TMP/trunc.npz" --tokens "$T0"
/usr/bin/python3 -c "import sys; b=bytearray(open(sys.argv[1],'rb').read()); b[300]^=1; open(sys.argv[2],'wb').write(b)" "$F/0000.npz" "$TMP/crc.npz"
expect2 "crc.npz: entry 'attentions.npy': CRC-32 mismatch" --attention "$TMP/crc.npz" --tokens "$T0"
/usr/bin/python3 -c "import sys; b=bytearray(open(sys.argv[1],'rb').read()); i=b.index(b'\x93NUMPY'); b[i+1:i+6]=b'NUMPZ'; open(sys.argv[2],'wb').write(b)" "$F/0000.npz" "$TMP/hdr.npz"
expect2 "hdr.npz: entry 'attentions.npy': CRC-32 mismatch" --attention "$TMP/hdr.npz" --tokens "$T0"
/usr/bin/python3 -c "import sys, zipfile; z=zipfile.ZipFile(sys.argv[1]); w=zipfile.ZipFile(sys.argv[2],'w'); d=bytearray(z.read('attentions.npy')); d[1:6]=b'NUMPZ'; w.writestr('attentions.npy', bytes(d)); w.close()" "$F/0000.npz" "$TMP/magic.npz"
expect2 "magic.npz: attentions.npy: not a .npy file (bad magic)" --attention "$TMP/magic.npz" --tokens "$T0"
/usr/bin/python3 -c "import sys, numpy as np; a=np.load(sys.argv[1])['attentions']; np.savez(sys.argv[2], attentions=a.astype(np.float64)); np.savez(sys.argv[3], attentions=a[:, :, :5, :5]); np.savez(sys.argv[4], a=a, b=a)" \
  "$F/0000.npz" "$TMP/f64.npz" "$TMP/shape.npz" "$TMP/two.npz"
expect2 "f64.npz: attentions.npy: dtype '<f8' is not supported" --attention "$TMP/f64.npz" --tokens "$T0"
expect2 "shape.npz: attention shape must be [2, 3, 11, 11]" --attention "$TMP/shape.npz" --tokens "$T0"
expect2 "two.npz: no array named 'attentions' among its 2 arrays" --attention "$TMP/two.npz" --tokens "$T0"
printf '{"tokens": ["[CLS]",\n "a" "b"]}\n' >"$TMP/bad.json"
expect2 "bad.json:2: invalid JSON" --attention "$F/0000.npz" --tokens "$TMP/bad.json"
sed 's/"word_ids": \[null, 0/"word_ids": [null, 9/' "$T0" >"$TMP/wid.json"
expect2 "wid.json: word_ids[1] is not null or a word index in [0, 6)" --attention "$F/0000.npz" --tokens "$TMP/wid.json" --dependencies "$F/0000.conllu"
sed 's/"special_tokens_mask": \[1,/"special_tokens_mask": [2,/' "$T0" >"$TMP/mask.json"
expect2 "mask.json: special_tokens_mask[0] is not 0 or 1" --attention "$F/0000.npz" --tokens "$TMP/mask.json"
cat "$F/0000.conllu" "$F/0014.conllu" >"$TMP/two.conllu"
expect2 "two.conllu: expected exactly one sentence, found 2" --attention "$F/0000.npz" --tokens "$T0" --dependencies "$TMP/two.conllu"
expect2 "0000.tokens.json: 6 'words' but the parse" --attention "$F/0000.npz" --tokens "$T0" --dependencies "$F/0014.conllu"
echo '[[1, 2]]' >"$TMP/sal.json"
expect2 "sal.json: saliency[0] must hold 11 numbers" --attention "$F/0000.npz" --tokens "$T0" --saliency "$TMP/sal.json"
expect2 "as many --tokens files as --attention files" --attention "$F/0000.npz"
expect2 "once per --attention file" --attention "$F/0000.npz" --tokens "$T0" --attention "$F/0007.npz" --tokens "$F/0007.tokens.json" --saliency "$TMP/sal.json"
expect2 "not both" --dir "$D0" --attention "$F/0000.npz" --tokens "$T0"
expect2 "missing.npz: cannot open" --attention "$TMP/missing.npz" --tokens "$T0"

# ---- 2b. declared sizes, attention values, input sizes -----------------------------------
/usr/bin/python3 - "$F/0000.npz" "$T0" "$TMP" <<'PY'
import json, sys, zipfile, numpy as np
src, tok, out = sys.argv[1:]
a = np.load(src)["attentions"]  # (2, 3, 11, 11)
def savez(name, arr):
    np.savez(out + "/" + name, attentions=arr.astype(np.float32))
# 100 MB declared ([2, 3, 2048, 2048]) in about 13 MB of deflate (ratio about 8:1): the
# shape is refused against the tokens file before anything is inflated
big = np.zeros((2, 3, 2048, 2048), np.float32)
big.reshape(-1)[::8] = np.random.default_rng(1).random(big.size // 8, dtype=np.float32)
np.savez_compressed(out + "/big.npz", attentions=big)
del big
# 25 MB of zeros in about 25 KB: over the compression ratio limit
np.savez_compressed(out + "/bomb.npz", attentions=np.zeros((2, 3, 1024, 1024), np.float32))
b = a.copy(); b[1, 2, 4] = 2.0 / 11; savez("sum2.npz", b)
b = a.copy(); b[0, 1, 3] = 0; savez("zero.npz", b)
b = a.copy(); b[1, 0, 5, 7] = 3e38; savez("huge.npz", b)
b = a.copy(); b[0, 0, 2, 2] = np.nan; savez("nan.npz", b)
b = a.copy(); b[1, 1, 6, 1] = -0.25; b[1, 1, 6, 2] += 0.25; savez("neg.npz", b)
# a [PAD] query whose row is all zeros is accepted; the same zero row of a word is not
t = json.load(open(tok)); t["tokens"][-1] = "[PAD]"; json.dump(t, open(out + "/pad.tokens.json", "w"))
b = a.copy(); b[:, :, 10] = 0; savez("padrow.npz", b)
open(out + "/empty.npz", "wb").close()
open(out + "/text.npz", "w").write("this is not an archive\n")
PY
maxrss() { # maxrss OUTFILE args...: runs BIN import args, prints its peak RSS in KiB
  local o=$1; shift
  /usr/bin/time -f %M -o "$TMP/rss" "$BIN" import "$@" --db "$TMP/x.db" >/dev/null 2>"$o"
  echo $?; cat "$TMP/rss" | tail -1
}
r=($(maxrss "$TMP/err" --attention "$TMP/big.npz" --tokens "$T0"))
if [ "${r[0]}" = 2 ] && grep -qF "big.npz: attention shape must be [2, 3, 11, 11]" "$TMP/err" && [ "${r[1]}" -lt 80000 ]; then
  ok "100 MB array declared in a 13 MB npz refused from its shape at ${r[1]} KiB peak RSS: $(cat "$TMP/err")"
else fail "big.npz: exit ${r[0]}, peak ${r[1]} KiB: $(cat "$TMP/err")"; fi
r=($(maxrss "$TMP/err" --attention "$TMP/bomb.npz" --tokens "$T0"))
if [ "${r[0]}" = 2 ] && grep -qF "over the compression ratio limit of 128:1" "$TMP/err" && [ "${r[1]}" -lt 80000 ]; then
  ok "deflate bomb refused at ${r[1]} KiB peak RSS: $(cat "$TMP/err")"
else fail "bomb.npz: exit ${r[0]}, peak ${r[1]} KiB: $(cat "$TMP/err")"; fi
expect2 "sum2.npz: layer 1, head 2, row 4 (token 'c'): the row sums to 2, not 1 (tolerance 0.005)" --attention "$TMP/sum2.npz" --tokens "$T0"
expect2 "zero.npz: layer 0, head 1, row 3 (token 'a'): the row sums to 0, not 1" --attention "$TMP/zero.npz" --tokens "$T0"
expect2 "huge.npz: layer 1, head 0, row 5 (token '##at'): entry 7 is 3e+38, not a probability in [0, 1]" --attention "$TMP/huge.npz" --tokens "$T0"
expect2 "nan.npz: layer 0, head 0, row 2 (token '##an'): entry 2 is nan" --attention "$TMP/nan.npz" --tokens "$T0"
expect2 "neg.npz: layer 1, head 1, row 6 (token 'f'): entry 1 is -0.25" --attention "$TMP/neg.npz" --tokens "$T0"
expect2 "padrow.npz: layer 0, head 0, row 10 (token '[SEP]'): the row sums to 0" --attention "$TMP/padrow.npz" --tokens "$T0"
"$BIN" import --attention "$TMP/padrow.npz" --tokens "$TMP/pad.tokens.json" --quiet --db "$TMP/pad.db" 2>"$TMP/err" \
  && ok "an all-zero [PAD] row is accepted" || fail "padrow.npz with a [PAD] token: $(cat "$TMP/err")"
expect2 "empty.npz: empty file (0 bytes): not a .npz archive" --attention "$TMP/empty.npz" --tokens "$T0"
expect2 "text.npz: not a .npz (ZIP) archive" --attention "$TMP/text.npz" --tokens "$T0"
truncate -s 65M "$TMP/huge.tokens.json"
expect2 "huge.tokens.json: file is 68157440 bytes, over the limit of 67108864" --attention "$F/0000.npz" --tokens "$TMP/huge.tokens.json"

# ---- 3. real BERT-base attention, file by file -------------------------------------------
D=$SHARED/bert-base-sst2-attention
if [ -d "$D" ]; then
  args=()
  for j in "$D"/*.json; do
    n=${j%.json}; [ -f "$n.attention.npy" ] || continue
    args+=(--attention "$n.attention.npy" --tokens "$j" --saliency "$j" --dependencies "$j")
  done
  "$BIN" import "${args[@]}" --min-rel 20 --quiet --db "$TMP/r.db" 2>"$TMP/warn" || fail "real data file import"
  "$BIN" import --dir "$D" --min-rel 20 --quiet --db "$TMP/r.db" 2>>"$TMP/warn" || fail "real data dir import"
  same=1
  for t in $AGG; do [ "$(rows "$TMP/r.db" $t 1 | md5sum)" = "$(rows "$TMP/r.db" $t 2 | md5sum)" ] || { same=0; fail "real data: $t differs"; }; done
  [ "$same" = 1 ] && ok "real BERT-base data ($(sqlite3 "$TMP/r.db" "SELECT n_total FROM runs WHERE id=1") sentences) imported file by file equals --dir" || true
else
  echo "SKIPPED (part): $D absent (file-by-file import of real BERT-base attention not tested)"
fi

[ "$fails" = 0 ] && echo "all import CLI tests passed" || echo "$fails failure(s)"
[ "$fails" = 0 ]
