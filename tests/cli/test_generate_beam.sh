#!/bin/bash
# test_generate_beam.sh — `attnscope generate --beams N` against the torch beam search of
# tests/ref/gen_beam.py (fixture tests/ref/fixtures/beam/beam.json): for every case (BART-
# and T5-shaped encoder-decoders and a Llama causal LM, random odd-sized models; forced
# bos/eos, an eos list, bad_words_ids, length penalties 2, 0.5, -0.5, early stopping) the returned
# sequences must be identical, their scores within 1e-5 (sums of log-probabilities 5e-5), and
# every generated token's self- and cross-attention rows within 1e-5; the best
# hypothesis' generated_ids / generation_* arrays are its rows and the npz's run is the
# forward over it. Also the JSON output, and bad options (exit 2, one line).
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
FX=$ROOT/tests/ref/fixtures
CASES=$FX/beam/beam.json
$PY -c "import numpy" 2>/dev/null || { echo "SKIPPED: numpy missing for /usr/bin/python3"; exit 77; }

# one line per case: name, model folder, config overrides (JSON), prompt, options
$PY - "$CASES" >"$TMP/cases" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    opts = f"--beams {c['beams']} --max-new {c['max_new']} --length-penalty {c['length_penalty']!r}" \
           f" --num-return {c['num_return']}" + (" --early-stopping" if c["early_stopping"] else "")
    print(c["name"], c["model"], json.dumps(c["config"], separators=(",", ":")),
          ",".join(map(str, c["prompt"])), opts, sep="\t")
PY
[ -s "$TMP/cases" ] || fail "no cases read from $CASES"
while IFS=$'\t' read -r name model over prompt opts; do
  d=$TMP/m-$name
  mkdir -p "$d"
  cp "$FX/models/$model/model.safetensors" "$d/"
  $PY -c "
import json, sys
c = json.load(open(sys.argv[1])); c.update(json.loads(sys.argv[2]))
json.dump(c, open(sys.argv[3], 'w'))" "$FX/models/$model/config.json" "$over" "$d/config.json"
  # shellcheck disable=SC2086
  expect 0 "" -- generate --model "$d" --ids "$prompt" $opts --capture attn,logits --out "$TMP/$name.npz"
  $PY - "$CASES" "$name" "$TMP/$name.npz" <<'PY' && ok "$name: sequences, scores and rows = torch" || fail "$name: parity"
import json, sys
import numpy as np
case = next(c for c in json.load(open(sys.argv[1]))["cases"] if c["name"] == sys.argv[2])
z = np.load(sys.argv[3])
hyps, pl = case["hypotheses"], case["prompt_length"]
R = len(hyps)
seqs, lens = z["beam_sequences"], z["beam_lengths"]
assert seqs.shape[0] == R and list(lens) == [len(h["ids"]) for h in hyps], (lens, [h["ids"] for h in hyps])
for r, h in enumerate(hyps):
    assert list(seqs[r, :lens[r]]) == h["ids"], (r, list(seqs[r, :lens[r]]), h["ids"])
    assert (seqs[r, lens[r]:] == -1).all()
ds = np.abs(z["beam_scores"].astype(np.float64) - [h["score"] for h in hyps]).max()
dl = np.abs(z["beam_sum_logprobs"].astype(np.float64) - [h["sum_logprobs"] for h in hyps]).max()
assert ds <= 1e-5 and dl <= 5e-5, (ds, dl)  # sums: up to 12 steps of float32 log-probabilities
kinds = [("beam_attentions", "self_rows")] + ([("beam_cross_attentions", "cross_rows")] if case["encoder_decoder"] else [])
worst = 0.0
for arr, key in kinds:
    a = z[arr]
    Smax = max(len(h["ids"]) for h in hyps) - pl
    assert a.shape[0] == R and a.shape[1] == Smax, (arr, a.shape)
    for r, h in enumerate(hyps):
        ref = np.array(h[key], dtype=np.float64)  # (S, L, H, K)
        S, K = ref.shape[0], ref.shape[3]
        worst = max(worst, float(np.abs(a[r, :S, :, :, :K] - ref).max()))
        assert not a[r, S:].any() and not a[r, :, :, :, K:].any(), (arr, r, "padding is not zero")
assert worst <= 1e-5, worst
# the best hypothesis is the npz's run: its ids, generated ids and per-step rows
best = hyps[0]["ids"]
seq = z["decoder_input_ids"] if case["encoder_decoder"] else z["input_ids"]
assert list(seq) == best and int(z["prompt_length"]) == pl and list(z["generated_ids"]) == best[pl:]
g = z["generation_attentions"]
assert np.abs(g - np.array(hyps[0]["self_rows"])).max() <= 1e-5
if case["encoder_decoder"]:
    assert np.abs(z["generation_cross_attentions"] - np.array(hyps[0]["cross_rows"])).max() <= 1e-5
    assert np.abs(g - z["decoder_attentions"][:, :, pl - 1:len(best) - 1, :].transpose(2, 0, 1, 3)).max() <= 1e-6
print(f"{sys.argv[2]}: {R} sequences equal, scores {ds:.1e}, log-prob sums {dl:.1e}, rows {worst:.1e}")
PY
done <"$TMP/cases"

# JSON: the same arrays as nested lists, and the beam settings
B=$FX/models/bart_tiny
expect 0 "" -- generate --model "$B" --ids 0,17,45,9,88,23,2 --beams 3 --max-new 4 --num-return 2 --out "$TMP/b.json"
expect 0 "" -- generate --model "$B" --ids 0,17,45,9,88,23,2 --beams 3 --max-new 4 --num-return 2 --out "$TMP/b.npz"
$PY - "$TMP/b.json" "$TMP/b.npz" <<'PY' && ok "JSON = npz (beam arrays and settings)" || fail "beam JSON"
import json, sys
import numpy as np
d, z = json.load(open(sys.argv[1])), np.load(sys.argv[2])
assert d["beams"] == 3 and d["length_penalty"] == 1.0 and d["early_stopping"] is False and d["num_return"] == 2
for k in ("beam_sequences", "beam_lengths"):
    assert np.array_equal(np.array(d[k]), z[k]), k
for k in ("beam_scores", "beam_sum_logprobs", "beam_attentions", "beam_cross_attentions", "generation_attentions",
          "generation_cross_attentions"):
    assert np.abs(np.array(d[k], dtype=np.float64) - z[k]).max() <= 1e-6, k
PY
# stdout: one line per returned hypothesis
expect 0 "" -- generate --model "$B" --ids 0,17,45,9,88,23,2 --beams 3 --max-new 4 --num-return 3
[ "$(wc -l <"$TMP/out")" = 3 ] && ok "three hypotheses, three lines" || fail "stdout lines: $(cat "$TMP/out")"

# bad options: exit 2, one line
expect 2 "bad --beams" -- generate --model "$B" --ids 0,2 --beams 0
expect 2 "bad --beams" -- generate --model "$B" --ids 0,2 --beams 17
expect 2 "bad --num-return" -- generate --model "$B" --ids 0,2 --beams 2 --num-return 3
expect 2 "bad --length-penalty" -- generate --model "$B" --ids 0,2 --beams 2 --length-penalty nan
expect 2 "bad --length-penalty" -- generate --model "$B" --ids 0,2 --beams 2 --length-penalty 1e9
expect 2 "need --beams" -- generate --model "$B" --ids 0,2 --early-stopping
expect 2 "need --beams" -- generate --model "$B" --ids 0,2 --num-return 1
expect 2 "need --beams" -- generate --model "$B" --ids 0,2 --length-penalty 2
expect 2 "does not sample" -- generate --model "$B" --ids 0,2 --beams 2 --temperature 0.7
expect 2 "does not sample" -- generate --model "$B" --ids 0,2 --beams 2 --top-k 5 --temperature 1
# bad_words_ids the configuration cannot hold: the model loads, beam search refuses it by name
mkdir -p "$TMP/badw"
cp "$B/model.safetensors" "$TMP/badw/"
$PY -c "
import json, sys
c = json.load(open(sys.argv[1])); c['bad_words_ids'] = [[5, 500]]
json.dump(c, open(sys.argv[2], 'w'))" "$B/config.json" "$TMP/badw/config.json"
expect 0 "" -- generate --model "$TMP/badw" --ids 0,17,2 --max-new 2
expect 2 "bad_words_ids" -- generate --model "$TMP/badw" --ids 0,17,2 --max-new 2 --beams 2
exit $((fails > 0))
