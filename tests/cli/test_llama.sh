#!/usr/bin/env bash
# test_llama.sh — `attnscope run` on the LLaMA-family fixtures (tests/ref/fixtures/models,
# written by tests/ref/gen_llama.py): every family runs and writes its grouped-query
# layout (kv_group) and pre-RoPE queries/keys; the npz holds the same values as the
# JSON; --precision bf16 runs and stays close to F32; and bad checkpoints of the
# family give a one-line error naming what is wrong with exit 2 (sizes that do not match
# the tensors, an unknown rope_scaling type, a truncated file, a shard index naming a
# missing shard or a file outside the folder, NaN in BF16 weights, a bad precision).
set -u
BIN=$1
. "$(dirname "$0")/lib.sh"
FX=$ROOT/tests/ref/fixtures/models
PY=/usr/bin/python3
IDS=1,5,7,9,11,13,2,4,6,8,10,12

# every family runs; kv_group as the config says; q/k before RoPE present
for f in llama llama3_scaled llama_bf16 llama_cls mistral_swa qwen2_noprefix qwen3 gemma2 gemma3 phi3 yarn dynamic longrope; do
  expect 0 "" -- run --model "$FX/$f" --ids $IDS --format json --out "$TMP/$f.json"
  $PY - "$FX/$f/config.json" "$TMP/$f.json" <<'PY' && ok "$f: kv_group and pre-RoPE arrays" || fail "$f: JSON output"
import json, sys
c = json.load(open(sys.argv[1])); c = c.get("text_config", c)
d = json.load(open(sys.argv[2]))
H = c["num_attention_heads"]; K = c.get("num_key_value_heads") or H
assert d["kv_group"] == [h // (H // K) for h in range(H)], d["kv_group"]
T = len(d["input_ids"])
for k in ("queries_pre_rope", "keys_pre_rope"):
    a = d[k]
    assert len(a) == c["num_hidden_layers"] and len(a[0]) == H and len(a[0][0]) == T, k
# keys of query heads in one group are the same vectors
if K < H:
    assert d["keys"][0][0] == d["keys"][0][H // K - 1]
PY
done

# npz = JSON, for a GQA model with RoPE; bf16 precision within 0.05 of F32 attention
expect 0 "" -- run --model "$FX/qwen3" --ids $IDS --format npz --out "$TMP/q.npz"
expect 0 "" -- run --model "$FX/qwen3" --ids $IDS --format npz --out "$TMP/qb.npz" --precision bf16
$PY - "$TMP/qwen3.json" "$TMP/q.npz" "$TMP/qb.npz" <<'PY' && ok "npz equals JSON; bf16 close to f32" || fail "npz/JSON/bf16 comparison"
import json, sys
import numpy as np
d = json.load(open(sys.argv[1])); z = np.load(sys.argv[2]); b = np.load(sys.argv[3])
for k in ("attentions", "queries", "keys", "queries_pre_rope", "keys_pre_rope", "logits"):
    assert np.allclose(z[k], np.array(d[k], dtype=np.float32), atol=1e-6), k
assert list(z["kv_group"]) == d["kv_group"]
diff = np.abs(b["attentions"] - z["attentions"]).max()
assert 0 < diff < 0.05, diff
PY

# Gemma 3's multimodal layout: config.json's text_config, weights under language_model.model.
# (and model.language_model.): the same forward as the text-only folder
for pre in language_model.model. model.language_model.; do
  rm -rf "$TMP/g3m"; mkdir -p "$TMP/g3m"
  $PY - "$FX/gemma3" "$TMP/g3m" "$pre" <<'PY'
import json, struct, sys
src, dst, pre = sys.argv[1:4]
c = json.load(open(src + "/config.json"))
json.dump({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": c},
          open(dst + "/config.json", "w"))
b = open(src + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
h2 = {(k if k == "__metadata__" else pre + k[len("model."):] if k.startswith("model.") else k): v for k, v in h.items()}
hb = json.dumps(h2).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
open(dst + "/model.safetensors", "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
PY
  expect 0 "" -- run --model "$TMP/g3m" --ids $IDS --format json --out "$TMP/g3m.json"
  $PY -c "import json,sys; a=json.load(open(sys.argv[1])); b=json.load(open(sys.argv[2])); assert a['attentions']==b['attentions'] and a['logits']==b['logits']" \
    "$TMP/gemma3.json" "$TMP/g3m.json" && ok "gemma3 multimodal layout ($pre) = text-only" || fail "gemma3 multimodal layout ($pre)"
done

# BF16 weights read in place, fused projections included (Phi-3's qkv_proj and gate_up_proj
# as row views): the same forward as an F32 copy of the same BF16-rounded values
for f in phi3 qwen3 gemma2; do
  for dt in bf16 f32; do
    rm -rf "$TMP/$f-$dt"; mkdir -p "$TMP/$f-$dt"; cp "$FX/$f/config.json" "$TMP/$f-$dt/"
    $PY - "$FX/$f/model.safetensors" "$TMP/$f-$dt/model.safetensors" "$dt" <<'PY'
import json, struct, sys
import numpy as np
src, dst, dt = sys.argv[1:4]
b = open(src, "rb").read()
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n]); out, hdr, off = [], {}, 0
for k in sorted(x for x in h if x != "__metadata__"):
    v = h[k]; a = np.frombuffer(b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]], dtype=np.float32)
    u = a.view(np.uint32); r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    data = r.tobytes() if dt == "bf16" else (r.astype(np.uint32) << 16).view(np.float32).tobytes()
    hdr[k] = {"dtype": "BF16" if dt == "bf16" else "F32", "shape": v["shape"], "data_offsets": [off, off + len(data)]}
    out.append(data); off += len(data)
hb = json.dumps(hdr).encode(); hb += b" " * ((8 - len(hb) % 8) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hb)) + hb + b"".join(out))
PY
    expect 0 "" -- run --model "$TMP/$f-$dt" --ids $IDS --format npz --out "$TMP/$f-$dt.npz"
  done
  $PY -c "
import sys, numpy as np
a = np.load(sys.argv[1]); b = np.load(sys.argv[2])
for k in ('attentions', 'hidden_states', 'logits'):
    d = np.abs(a[k] - b[k]).max(); assert d <= 1e-5, (k, d)
" "$TMP/$f-bf16.npz" "$TMP/$f-f32.npz" && ok "$f: BF16 in place = F32 copy" || fail "$f: BF16 in place differs from the F32 copy"
done

# bad input
mk() { rm -rf "$TMP/bad"; mkdir -p "$TMP/bad"; cp "$FX/llama/config.json" "$FX/llama/model.safetensors" "$TMP/bad/"; }
cfg() { $PY -c "import json,sys; c=json.load(open(sys.argv[1])); exec(sys.argv[2]); json.dump(c,open(sys.argv[1],'w'))" "$TMP/bad/config.json" "$1"; }
mk; cfg "c['num_key_value_heads']=4"
expect 2 "k_proj.weight' has shape" -- run --model "$TMP/bad" --ids $IDS
mk; cfg "c['rope_scaling']={'rope_type':'longrope','factor':2.0}"
expect 2 "'rope_scaling.short_factor' missing" -- run --model "$TMP/bad" --ids $IDS
mk; cfg "c['rope_scaling']={'rope_type':'longrope','short_factor':[1,1,1,1],'long_factor':[1,1,1]}"
expect 2 "'rope_scaling.long_factor' must be a list of 4 numbers" -- run --model "$TMP/bad" --ids $IDS
mk; cfg "c['rope_scaling']={'rope_type':'ntk-by-parts','factor':2.0}"
expect 2 "'ntk-by-parts' is not supported" -- run --model "$TMP/bad" --ids $IDS
# dynamic NTK scaling runs past max_position_embeddings (the dynamic fixture's is 12); info names it
LONG_IDS=$(seq -s, 5 24)
expect 0 "" -- run --model "$FX/dynamic" --ids "$LONG_IDS" --format npz --out "$TMP/dynamic.npz"
for f in "dynamic:scaling dynamic x 3 (base grows past 12 positions)" \
         "longrope:scaling longrope x 4 (long factors past 12 positions, cos/sin x 1.2"; do
  expect 0 "" -- info --model "$FX/${f%%:*}"
  grep -qF "${f#*:}" "$TMP/out" && ok "info: ${f#*:}" || fail "info lacks '${f#*:}': $(grep rope "$TMP/out")"
done
expect 0 "" -- info --model "$FX/longrope" --format json
cp "$TMP/out" "$TMP/info-longrope.json"
expect 0 "" -- info --model "$FX/dynamic" --format json
$PY - "$TMP/info-longrope.json" "$TMP/out" <<'PY' && ok "info --format json: the length-dependent scalings" || fail "info JSON rope"
import json, math, sys
lr, dy = (json.load(open(p))["rope"] for p in sys.argv[1:])
assert lr["scaling"] == "longrope" and lr["original_max_position_embeddings"] == 12 and lr["factor"] == 4, lr
assert abs(lr["attention_factor"] - math.sqrt(1 + math.log(4) / math.log(12))) < 1e-6, lr
assert dy["scaling"] == "dynamic" and dy["max_position_embeddings"] == 12 and dy["factor"] == 3, dy
assert "original_max_position_embeddings" not in dy, dy
PY
mk; head -c 5000 "$FX/llama/model.safetensors" > "$TMP/bad/model.safetensors"
expect 2 "model.safetensors" -- run --model "$TMP/bad" --ids $IDS
mk; rm "$TMP/bad/model.safetensors"
echo '{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}' \
  > "$TMP/bad/model.safetensors.index.json"
expect 2 "model-00001-of-00002.safetensors" -- run --model "$TMP/bad" --ids $IDS
echo '{"metadata": {}, "weight_map": {"model.embed_tokens.weight": "../outside.safetensors"}}' \
  > "$TMP/bad/model.safetensors.index.json"
expect 2 "outside" -- run --model "$TMP/bad" --ids $IDS
# a NaN in a BF16 matrix read in place
rm -rf "$TMP/bad"; mkdir -p "$TMP/bad"; cp "$FX/llama_bf16/config.json" "$TMP/bad/"
$PY - "$FX/llama_bf16/model.safetensors" "$TMP/bad/model.safetensors" <<'PY'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
t = h["model.layers.1.mlp.up_proj.weight"]; o = 8 + n + t["data_offsets"][0] + 2 * 5
b[o:o + 2] = struct.pack("<H", 0x7fc0)
open(sys.argv[2], "wb").write(b)
PY
expect 2 "up_proj.weight' holds a non-finite value (NaN" -- run --model "$TMP/bad" --ids $IDS
expect 2 "precision" -- run --model "$FX/llama" --ids $IDS --precision f16

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
