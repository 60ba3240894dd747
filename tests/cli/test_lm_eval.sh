#!/usr/bin/env bash
# test_lm_eval.sh — `attnscope eval --task lm` and `attnscope generate` on the llama_bytes
# fixture (tests/ref/gen_lm_eval.py: a tiny random Llama whose byte tokenizer has no
# merges, so the packed ids are known without a tokenizer library):
#   - the perplexity of heldout.txt in windows (seq 64 / stride 32, the defaults, and
#     16 / 5), as they are and with a <s> in front of each (--window-start bos), equals
#     exp of PyTorch's mean cross-entropy of the same windows (1e-4 relative), tokens and
#     bytes exactly;
#   - the n-gram baseline printed next to it equals gen_ngram.py's independent Kneser-Ney
#     on the same packing of a training file (orders 2 and 3, 1e-9 relative), and
#     --exclude takes the held-out sentences out of that training stream;
#   - greedy generation gives PyTorch's argmax continuation (ids identical); the npz has
#     the run's arrays plus generated_ids and generation_attentions, whose rows are the
#     final attention's rows; sampling with a seed repeats, other seeds differ;
#     --stop-at-eos stops after the end-of-sequence token;
#   - bad options give one-line errors with exit status 2.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
M=$ROOT/tests/ref/fixtures/models/llama_bytes
EXP=$M/expected.json

check_eval() { # $1: seq, $2: window start of the expected window entry; rest: extra options
  local seq=$1 start=$2; shift 2
  expect 0 "" -- eval --task lm --model "$M" --data "$M/heldout.txt" "$@"
  $PY - "$TMP/out" "$EXP" "$seq" "$start" <<'PY' && ok "eval lm $seq $start: = PyTorch windows" \
    || fail "eval lm $seq $start: $(cat "$TMP/out")"
import json, sys
got = dict(l.split(": ", 1) for l in open(sys.argv[1]).read().split("\n") if ": " in l)
e = json.load(open(sys.argv[2]))
w = [x for x in e["windows"] if x["seq"] == int(sys.argv[3]) and x["window_start"] == sys.argv[4]][0]
assert int(got["tokens"]) == e["tokens"] and int(got["bytes"]) == e["bytes"], got
assert int(got["window"]) == w["seq"] and int(got["stride"]) == w["stride"], got
assert got["window_start"] == w["window_start"], got
for k, g in (("perplexity", "model_perplexity"), ("nll", "model_nll"), ("bits_per_byte", "model_bits_per_byte")):
    r = abs(float(got[g]) - w[k]) / w[k]
    print(k, float(got[g]), w[k], "rel", r)
    assert r < 1e-4, (k, got[g], w[k])
PY
}
check_eval 64 text
check_eval 16 text --seq 16 --stride 5 --threads 1
check_eval 64 bos --window-start bos
check_eval 16 bos --seq 16 --stride 5 --threads 1 --window-start bos

# the n-gram baseline against the Python reference on the same byte packing
cat > "$TMP/train.txt" <<'TXT'
The cat sat on the mat.
The dog sat on the log.
It was a bright cold day in April.

The clocks were striking thirteen.
A cat sat on the old gate and the dog ran past.
Rain fell all day on the quiet town, and the cat watched it.
TXT
printf 'It was a bright cold day in April.\n' > "$TMP/held.txt"
for order in 2 3; do
  for ex in "" "$TMP/held.txt"; do
    expect 0 "" -- eval --task lm --model "$M" --data "$M/heldout.txt" --ngram-train "$TMP/train.txt" \
      --ngram-order $order ${ex:+--exclude "$ex"}
    $PY - "$TMP/out" "$M/heldout.txt" "$TMP/train.txt" "$order" "$ROOT/tests/ref" "$ex" <<'PY' \
      && ok "n-gram order $order${ex:+ with --exclude} = gen_ngram.py" || fail "n-gram order $order $ex: $(cat "$TMP/out")"
import math, sys
sys.path.insert(0, sys.argv[5])
import gen_ngram
got = dict(l.split(": ", 1) for l in open(sys.argv[1]).read().split("\n") if ": " in l)
held = set(open(sys.argv[6]).read().split("\n")) - {""} if sys.argv[6] else set()
def pack(path, drop=()):
    ids, n = [], 0
    for doc in open(path).read().split("\n\n"):
        sents = [s for s in doc.split("\n") if s.strip() and s not in drop]
        if not sents:
            continue
        ids.append(0)
        for i, s in enumerate(sents):
            ids += ([13] if i else []) + [3 + b for b in s.encode()]
    return ids
test, train, order = pack(sys.argv[2]), pack(sys.argv[3], held), int(sys.argv[4])
gen_ngram.V = 259
lm = gen_ngram.KneserNey(train, order)
nll = -sum(math.log(lm.prob(test[max(0, i - order + 1):i], test[i])) for i in range(1, len(test)))
ppl = math.exp(nll / (len(test) - 1))
assert int(got["ngram_train_tokens"]) == len(train), (got["ngram_train_tokens"], len(train))
assert int(got["ngram_held_out_sentences_left_out"]) == len(held), got
r = abs(float(got["ngram_perplexity"]) - ppl) / ppl
print("ngram perplexity", got["ngram_perplexity"], ppl, "rel", r)
assert r < 1e-8, r  # the CLI prints 9 significant digits
PY
  done
done

# greedy generation = PyTorch's argmax continuation; the output files
expect 0 "" -- generate --model "$M" --text "The cat" --max-new 12 --out "$TMP/g.json"
expect 0 "" -- generate --model "$M" --text "The cat" --max-new 12 --out "$TMP/g.npz" --threads 1
$PY - "$TMP/g.json" "$TMP/g.npz" "$EXP" <<'PY' && ok "greedy = PyTorch; json and npz generation arrays" || fail "greedy generation"
import json, sys
import numpy as np
j, z, e = json.load(open(sys.argv[1])), np.load(sys.argv[2]), json.load(open(sys.argv[3]))
P = len(e["prompt_ids"])
assert j["generated_ids"] == e["greedy_ids"], (j["generated_ids"], e["greedy_ids"])
assert list(z["generated_ids"]) == e["greedy_ids"] and int(z["prompt_length"][0]) == P == j["prompt_length"]
assert list(z["input_ids"]) == e["prompt_ids"] + e["greedy_ids"] == j["input_ids"]
A, G = z["attentions"], z["generation_attentions"]
L, H, T = A.shape[0], A.shape[1], A.shape[2]
assert G.shape == (12, L, H, T) and T == P + 12, G.shape
d = max(np.abs(G[s] - A[:, :, P - 1 + s, :]).max() for s in range(12))
print("generation rows vs final attention rows: max diff", d)
assert d < 1e-5
assert np.abs(np.array(j["generation_attentions"]) - G).max() < 1e-6
assert len(j["tokens"]) == T and np.array(j["attentions"]).shape == A.shape
PY
expect 0 "" -- generate --model "$M" --text "The cat" --max-new 12
[ "$(cat "$TMP/out")" = "$($PY -c "import json,sys; e=json.load(open(sys.argv[1])); print(bytes(i-3 for i in e['prompt_ids'][1:]+e['greedy_ids']).decode('utf-8','replace'))" "$EXP")" ] \
  && ok "printed text = prompt + greedy bytes" || fail "printed text: $(od -c "$TMP/out" | head -3)"
for s in 1 1 2 3; do
  expect 0 "" -- generate --model "$M" --text "The cat" --max-new 20 --top-k 50 --temperature 2 --seed $s \
    --out "$TMP/s.json"
  $PY -c "import json,sys; print(json.load(open(sys.argv[1]))['generated_ids'])" "$TMP/s.json" >> "$TMP/samples"
done
[ "$(sed -n 1p "$TMP/samples")" = "$(sed -n 2p "$TMP/samples")" ] && ok "same seed, same sample" \
  || fail "seed 1 twice: $(cat "$TMP/samples")"
[ "$(sort -u "$TMP/samples" | wc -l)" -ge 2 ] && ok "other seeds, other samples" || fail "seeds 1-3 all equal"
# --stop-at-eos: a copy of the fixture whose eos is the second greedy token stops there
mkdir -p "$TMP/eos" && cp "$M"/*.json "$M/model.safetensors" "$TMP/eos/"
$PY -c "import json,sys; p=sys.argv[1]+'/config.json'; c=json.load(open(p)); c['eos_token_id']=json.load(open(sys.argv[2]))['greedy_ids'][1]; json.dump(c,open(p,'w'))" "$TMP/eos" "$EXP"
expect 0 "" -- generate --model "$TMP/eos" --text "The cat" --max-new 12 --stop-at-eos --out "$TMP/eos.npz"
$PY -c "
import json, sys
import numpy as np
z, e = np.load(sys.argv[1]), json.load(open(sys.argv[2]))
assert list(z['generated_ids']) == e['greedy_ids'][:2], z['generated_ids']
assert z['generation_attentions'].shape[0] == 2 and z['generation_attentions'].shape[-1] == z['attentions'].shape[-1]
" "$TMP/eos.npz" "$EXP" && ok "--stop-at-eos stops after EOS (2 tokens), arrays of the final length" || fail "--stop-at-eos"
expect 0 "" -- generate --model "$M" --ids 0,87 --max-new 100
[ "$(grep -c . "$TMP/err")" -le 1 ] && grep -q "positions" "$TMP/err" && ok "stops at the 64 positions with a warning" \
  || fail "no positions warning: $(cat "$TMP/err")"

# bad input: one-line errors, exit 2
FX=$ROOT/tests/ref/fixtures/models
expect 2 "over the model's 64 positions" -- eval --task lm --model "$M" --data "$M/heldout.txt" --seq 65
expect 2 "--stride" -- eval --task lm --model "$M" --data "$M/heldout.txt" --seq 16 --stride 16
expect 2 "--stride" -- eval --task lm --model "$M" --data "$M/heldout.txt" --seq 16 --stride 15 --window-start bos
expect 2 "bad --window-start" -- eval --task lm --model "$M" --data "$M/heldout.txt" --window-start start
expect 2 "--ngram-order" -- eval --task lm --model "$M" --data "$M/heldout.txt" --ngram-train "$TMP/train.txt" --ngram-order 6
expect 2 "--exclude" -- eval --task lm --model "$M" --data "$M/heldout.txt" --exclude "$TMP/held.txt"
expect 2 "missing.txt" -- eval --task lm --model "$M" --data "$TMP/missing.txt"
expect 2 "missing.txt" -- eval --task lm --model "$M" --data "$M/heldout.txt" --ngram-train "$TMP/missing.txt"
expect 2 "no causal-LM head" -- eval --task lm --model "$FX/bert" --data "$M/heldout.txt"
expect 2 "no tokenizer" -- eval --task lm --model "$FX/llama" --data "$M/heldout.txt"
expect 2 "--temperature" -- generate --model "$M" --text "x" --temperature -1
expect 2 "--temperature" -- generate --model "$M" --text "x" --temperature abc
expect 2 "needs a --temperature" -- generate --model "$M" --text "x" --top-k 5 --temperature 0
expect 2 "--top-k" -- generate --model "$M" --text "x" --top-k 0
expect 2 "--max-new" -- generate --model "$M" --text "x" --max-new 0
expect 2 "--capture needs --out" -- generate --model "$M" --text "x" --capture attentions
expect 2 "--capture" -- generate --model "$M" --text "x" --capture nothing --out "$TMP/x.json"
expect 2 "exactly one" -- generate --model "$M"
expect 2 "unknown option" -- generate --model "$M" --text "x" --beam 4
expect 2 "no causal-LM head" -- generate --model "$FX/bert" --text "x"
expect 2 "no room left" -- generate --model "$M" --text "$(printf 'a%.0s' $(seq 1 63))"
expect 2 "over the maximum of 64" -- generate --model "$M" --text "$(printf 'a%.0s' $(seq 1 70))"
expect 2 "cannot create" -- generate --model "$M" --text "x" --max-new 2 --out "$TMP/nodir/x.json"
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
