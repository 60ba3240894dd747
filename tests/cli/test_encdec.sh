#!/usr/bin/env bash
# test_encdec.sh — `attnscope run` on encoder-decoder models (bart_tiny, mbart_tiny,
# marian_tiny, t5_tiny, mt5_tiny of tests/ref/gen_encdec.py): --ids with --target-ids writes
# the three attention kinds in npz (encoder_/decoder_/cross_ arrays, shapes, values equal to
# the torch reference's expected.safetensors within 1e-5) and in JSON (the same arrays and
# the decoder's tokens); a BERT run's npz keeps its plain names; errors: no target for an
# encoder-decoder model, a target for another model, both target options, a target id out
# of range, a layer only the decoder has; --target text (a ten-token byte-level BPE
# tokenizer.json written here) encoded and shifted right; `generate` (greedy, from
# decoder_start_token_id or --target-ids, per-step cross-attention rows, the config's
# forced_bos/forced_eos_token_id and eos_token_id list applied as Hugging Face's generate
# applies them in greedy and sampled steps); `info` shows the decoder and T5's buckets.
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
FX=$ROOT/tests/ref/fixtures/models
PY=/usr/bin/python3
SRC=0,17,45,9,88,23,2
TGT=2,0,31,64,7
for f in bart_tiny mbart_tiny marian_tiny t5_tiny mt5_tiny; do
  expect 0 "" -- run --model "$FX/$f" --ids $SRC --target-ids $TGT --out "$TMP/$f.npz"
  expect 0 "" -- run --model "$FX/$f" --ids $SRC --target-ids $TGT --capture attn,logits --format json --out "$TMP/$f.json"
  $PY - "$FX/$f" "$TMP/$f.npz" "$TMP/$f.json" <<'PY' && ok "$f: npz and JSON hold the three kinds, equal to the torch reference" || fail "$f: arrays"
import json, struct, sys
import numpy as np
d, z, j = sys.argv[1], np.load(sys.argv[2]), json.load(open(sys.argv[3]))
dh = 10 if "t5" in d.rsplit("/", 1)[-1] else 8
b = open(d + "/expected.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
def t(k):
    v = h["c0." + k]; dt = np.int32 if v["dtype"] == "I32" else np.float32
    return np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dt).reshape(v["shape"])
shapes = {"encoder_attentions": (2, 3, 7, 7), "decoder_attentions": (3, 3, 5, 5), "cross_attentions": (3, 3, 5, 7),
          "cross_queries": (3, 3, 5, dh), "cross_keys": (3, 3, 7, dh), "encoder_hidden_states": (3, 7, 24),
          "decoder_hidden_states": (4, 5, 24), "logits": (5, 101)}
for k, s in shapes.items():
    assert z[k].shape == s, (k, z[k].shape)
for k in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
    assert np.abs(z[k] - t(k)).max() <= 1e-5, k
    assert np.abs(np.array(j[k], np.float32) - t(k)).max() <= 1e-5, k
lg = t("logits")
assert np.abs(z["logits"] - lg).max() <= 1e-4 * np.abs(lg).max()
assert list(z["decoder_input_ids"]) == [2, 0, 31, 64, 7] and j["decoder_input_ids"] == [2, 0, 31, 64, 7]
assert list(z["input_ids"]) == [0, 17, 45, 9, 88, 23, 2]
assert j["decoder_layers"] == 3 and len(j["decoder_tokens"]) == 5
assert "attentions" not in z.files and "attentions" not in j
PY
done
expect 0 "" -- run --model "$FX/bart_tiny" --ids $SRC --target-ids $TGT
grep -q "strongest cross-attention links" "$TMP/out" && ok "summary prints cross-attention links" || fail "summary"
expect 0 "" -- run --model "$FX/bert" --ids 2,7,9,3 --out "$TMP/bert.npz"
$PY -c "
import numpy as np, sys; z = np.load(sys.argv[1])
assert 'attentions' in z.files and not any(k.startswith(('encoder_', 'decoder_', 'cross_')) for k in z.files)
" "$TMP/bert.npz" && ok "encoder-only npz keeps its names" || fail "bert npz names"
expect 2 "encoder-decoder model (bart): give the decoder input" -- run --model "$FX/bart_tiny" --ids $SRC
expect 2 "not an encoder-decoder model" -- run --model "$FX/bert" --ids 2,7,9,3 --target-ids 2,0
expect 2 "at most one of --target" -- run --model "$FX/bart_tiny" --ids $SRC --target-ids 2 --target x
expect 2 "outside the vocabulary" -- run --model "$FX/bart_tiny" --ids $SRC --target-ids 2,0,500
expect 2 "layer 2 is out of range" -- run --model "$FX/bart_tiny" --ids $SRC --target-ids $TGT --layer 2
# --target text: bart_tiny with a byte-level BPE tokenizer.json of ten tokens; the target's
# encoding <s> b a Ġ ab </s> shifted right: decoder_start_token_id (2) first, </s> dropped
mkdir -p "$TMP/tok" && cp "$FX/bart_tiny/config.json" "$TMP/tok/" && ln -s "$FX/bart_tiny/model.safetensors" "$TMP/tok/"
$PY - "$TMP/tok/tokenizer.json" <<'PY'
import json, sys
vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4, "b": 5, "\u0120": 6, "ab": 7, "\u0120b": 8, "\u0120a": 9}
special = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
            "special": True} for c, i in list(vocab.items())[:4]]
json.dump({"version": "1.0", "truncation": None, "padding": None, "added_tokens": special, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                              "trim_offsets": True, "add_prefix_space": False},
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                     "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                     "merges": ["a b", "\u0120 b", "\u0120 a"]}}, open(sys.argv[1], "w"))
PY
expect 0 "" -- run --model "$TMP/tok" --text "ab ba" --target "ba ab" --capture logits --format json
$PY -c "
import json, sys; d = json.load(open(sys.argv[1]))
assert d['input_ids'] == [0, 7, 8, 4, 2], d['input_ids']
assert d['decoder_input_ids'] == [2, 0, 5, 4, 6, 7], d['decoder_input_ids']
assert [t['piece'] for t in d['decoder_tokens']] == ['</s>', '<s>', 'b', 'a', '\u0120', 'ab']
" "$TMP/out" && ok "--target text: encoded, then shifted right" || fail "--target text"
# generate: greedy decoding from decoder_start_token_id as Hugging Face's generate runs it
# with the config's logits processors (as beam search): each new token is the argmax of the
# final run's logits at the position before it, except the last of max length, which is
# forced_eos_token_id (BartConfig's default 2; T5 has none); each step's cross-attention
# rows are the final run's rows of that position (causal decoder: later tokens change
# nothing before)
for f in bart_tiny t5_tiny; do
  expect 0 "" -- generate --model "$FX/$f" --ids $SRC --max-new 5 --capture attn,logits --out "$TMP/g-$f.npz"
  $PY - "$TMP/g-$f.npz" "$f" <<'PY' && ok "$f: generate = argmax of the final run (forced eos last), cross rows equal it" || fail "$f: generate"
import sys
import numpy as np
z = np.load(sys.argv[1])
d, L, p = z["decoder_input_ids"], z["logits"], int(z["prompt_length"])
assert p == 1 and len(d) == 6 and list(d[1:]) == list(z["generated_ids"])
assert all(int(L[i].argmax()) == int(d[i + 1]) for i in range(len(d) - 2))
if sys.argv[2] == "bart_tiny":
    assert int(d[-1]) == 2 and int(L[-2].argmax()) != 2, (d, L[-2].argmax())  # forced, not the argmax
else:
    assert int(L[-2].argmax()) == int(d[-1])
g, ca = z["generation_cross_attentions"], z["cross_attentions"]
assert g.shape == (5, 3, 3, 7), g.shape
assert max(float(np.abs(g[s] - ca[:, :, p - 1 + s, :]).max()) for s in range(5)) <= 1e-6
PY
done
# the config's generation settings in greedy and sampled steps (Hugging Face's
# ForcedBOSTokenLogitsProcessor at the first generated position, ForcedEOSTokenLogitsProcessor
# at the last of max length, a stop at any id of an eos_token_id list): bart_tiny with
# forced_bos_token_id 7; a second eos id: the token the unstopped greedy run generates after 7
B=$TMP/bart_forced
mkdir -p "$B" && cp "$FX/bart_tiny/model.safetensors" "$B/"
$PY - "$FX/bart_tiny/config.json" "$B/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["forced_bos_token_id"] = 7
json.dump(c, open(sys.argv[2], "w"))
PY
expect 0 "" -- generate --model "$B" --ids $SRC --max-new 6 --capture logits --out "$TMP/gf.npz"
expect 0 "" -- generate --model "$B" --ids $SRC --max-new 6 --temperature 1.5 --seed 3 --out "$TMP/gs.json"
X=$($PY - "$TMP/gf.npz" "$TMP/gs.json" <<'PY'
import json, sys
import numpy as np
z, s = np.load(sys.argv[1]), json.load(open(sys.argv[2]))
d, L = [int(x) for x in z["decoder_input_ids"]], z["logits"]
assert len(d) == 7 and d[1] == 7 and d[-1] == 2, d
assert int(L[0].argmax()) != 7, "forced, not the argmax"
assert all(int(L[i].argmax()) == d[i + 1] for i in range(1, 5)), d
g = s["decoder_input_ids"]
assert len(g) == 7 and g[1] == 7 and g[-1] == 2, g  # sampled: the same forced tokens
assert d[2] not in (7, 2), d
print(d[2])
PY
) && ok "generate: forced_bos_token_id first, forced eos last (greedy and sampled)" || fail "generate forced tokens"
$PY - "$B/config.json" "$X" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["eos_token_id"] = [2, int(sys.argv[2])]
json.dump(c, open(sys.argv[1], "w"))
PY
expect 0 "" -- generate --model "$B" --ids $SRC --max-new 6 --stop-at-eos --out "$TMP/ge.json"
$PY -c "
import json, sys
import numpy as np
d = json.load(open(sys.argv[1]))['decoder_input_ids']
full = [int(x) for x in np.load(sys.argv[2])['decoder_input_ids']]
assert d == full[:3], (d, full)
" "$TMP/ge.json" "$TMP/gf.npz" && ok "generate --stop-at-eos stops at the second id of an eos_token_id list" || fail "eos list"
expect 2 "no decoder_start_token_id" -- generate --model "$FX/mbart_tiny" --ids $SRC --max-new 2
expect 0 "" -- generate --model "$FX/mbart_tiny" --ids $SRC --max-new 2 --target-ids 2,40 --out "$TMP/g.json"
$PY -c "
import json, sys; d = json.load(open(sys.argv[1]))
assert d['decoder_input_ids'][:2] == [2, 40] and len(d['decoder_input_ids']) == 4 and d['prompt_length'] == 2
assert len(d['generation_cross_attentions']) == 2 and len(d['generation_cross_attentions'][0][0][0]) == 7
" "$TMP/g.json" && ok "generate --target-ids: the decoder's prefix" || fail "generate --target-ids"
expect 2 "not an encoder-decoder model" -- generate --model "$FX/gpt2" --ids 1,2,3 --max-new 2 --target-ids 2
expect 0 "" -- info --model "$FX/t5_tiny"
grep -q "^decoder:      3 layers (causal self-attention, cross-attention to the encoder, feed-forward; pre-norm)" "$TMP/out" &&
  grep -q "^relative:     10 position buckets up to distance 12" "$TMP/out" && ok "info: t5 decoder and buckets" || fail "info t5"
expect 0 "" -- info --model "$FX/bart_tiny" --format json
$PY -c "
import json, sys; d = json.load(open(sys.argv[1]))
assert d['decoder_layers'] == 3 and d['relative_attention'] is None and d['layers'] == 2
" "$TMP/out" && ok "info --format json: decoder_layers" || fail "info json"
exit $((fails > 0))
