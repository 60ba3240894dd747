#!/usr/bin/env bash
# test_info.sh — `attnscope info` on the LLaMA-family fixtures (tests/ref/fixtures/models):
# architecture and model_type, query / key-value heads and the GQA ratio, head width, the
# scores' factor, RoPE (rotated dims, theta, scaling type and factor, Gemma 3's local
# theta), sliding windows and their layers, soft-caps, norms, tied embeddings, dtype,
# parameter count; and the same values in --format json. Each value is the fixture's
# config.json (read here with node) or, for the parameter count, the tensors of its
# model.safetensors summed from the file's header.
set -u
BIN=${1:?usage: test_info.sh path/to/attnscope}
. "$(dirname "$0")/lib.sh"
F="$ROOT/tests/ref/fixtures/models"
[ -f "$F/llama/model.safetensors" ] || { echo "FAIL: the LLaMA fixtures are missing (tests/ref/gen_llama.py)"; exit 1; }

# line LABEL EXPECTED: the info line "LABEL:" padded to 14 columns, then EXPECTED, is in out
line() {
  if grep -qxF -- "$(printf '%-14s%s' "$1:" "$2")" "$TMP/out"; then ok "$m: $1: $2"
  else fail "$m: want '$1: $2', got: $(grep -- "^$1:" "$TMP/out" || echo nothing)"; fi
}

m=llama; expect 0 "" -- info --model "$F/$m"
line "architecture" "llama (model_type llama), causal"
line "heads" "4 query, 2 key/value (grouped-query, 2 query heads per kv head; head width 8)"
line "scores" "q.k / sqrt(head width)"
line "rope" "8 of 8 dims, theta 10000, scaling none"
line "window" "none"
line "soft-caps" "none"
line "norms" "RMSNorm (eps 1e-06)"
line "embeddings" "not tied"
line "activation" "silu (gated MLP)"
grep -q "^dtype:        F32 (arithmetic f32" "$TMP/out" && ok "$m: dtype F32, arithmetic f32" || fail "$m: dtype line: $(grep '^dtype' "$TMP/out")"
line "tokenizer" "none (use --ids)"

m=mistral_swa; expect 0 "" -- info --model "$F/$m"
line "architecture" "llama (model_type mistral), causal"
line "window" "5 on layers 0-1 (2 of 2)"

m=gemma2; expect 0 "" -- info --model "$F/$m"
line "scores" "q.k x 0.223607 (the config's query scale)"
line "window" "5 on layer 0 (1 of 2)"
line "soft-caps" "attention 3, final 4"
line "norms" "RMSNorm (eps 1e-06), scaled by (1 + w), post-attention and post-feed-forward norms"
line "embeddings" "tied (the LM head is the embedding matrix)"
line "activation" "gelu_new (gated MLP)"

m=gemma3; expect 0 "" -- info --model "$F/$m"
line "architecture" "llama (model_type gemma3_text), causal"
line "rope" "10 of 10 dims, theta 50000, scaling linear x 2, local theta 100 on sliding layers"
line "window" "4 on layers 0-1 (2 of 3)"
line "norms" "RMSNorm (eps 1e-06), scaled by (1 + w), q/k norm, post-attention and post-feed-forward norms"

m=phi3; expect 0 "" -- info --model "$F/$m"
line "rope" "4 of 8 dims, theta 10000, scaling none"
line "window" "8 on layers 0-1 (2 of 2)"
line "norms" "RMSNorm (eps 1e-05)"

m=qwen3; expect 0 "" -- info --model "$F/$m"
line "heads" "4 query, 1 key/value (grouped-query, 4 query heads per kv head; head width 10)"
line "norms" "RMSNorm (eps 1e-06), q/k norm"

m=llama3_scaled; expect 0 "" -- info --model "$F/$m"
line "rope" "8 of 8 dims, theta 10000, scaling llama3 x 8 (original 64 positions)"
m=yarn; expect 0 "" -- info --model "$F/$m"
line "rope" "8 of 8 dims, theta 10000, scaling yarn x 4 (original 64 positions)"
m=llama_bf16; expect 0 "" -- info --model "$F/$m"
grep -q "^dtype:        BF16 (arithmetic f32" "$TMP/out" && ok "$m: dtype BF16" || fail "$m: dtype line: $(grep '^dtype' "$TMP/out")"

# --format json: the same values, each model's against its config.json and safetensors header
for m in llama mistral_swa gemma2 gemma3 phi3 qwen3 llama3_scaled yarn llama_bf16 qwen2_noprefix llama_cls; do
  expect 0 "" -- info --model "$F/$m" --format json
  if node - "$TMP/out" "$F/$m" <<'JS'
const fs = require('fs');
const [out, dir] = process.argv.slice(2);
const j = JSON.parse(fs.readFileSync(out, 'utf8'));
const c0 = JSON.parse(fs.readFileSync(`${dir}/config.json`, 'utf8'));
const c = c0.text_config ? { ...c0, ...c0.text_config } : c0;
const fail = (m) => { console.log(`FAIL: ${dir}: ${m}`); process.exitCode = 1; };
const eq = (k, got, want) => { if (JSON.stringify(got) !== JSON.stringify(want)) fail(`${k}: ${JSON.stringify(got)}, want ${JSON.stringify(want)}`); };
eq('arch', j.arch, 'llama');
eq('model_type', j.model_type, c.model_type === 'gemma3' ? 'gemma3_text' : c.model_type);
eq('layers', j.layers, c.num_hidden_layers);
eq('heads', j.heads, c.num_attention_heads);
eq('kv_heads', j.kv_heads, c.num_key_value_heads ?? c.num_attention_heads);
eq('gqa_ratio', j.gqa_ratio, j.heads / j.kv_heads);
eq('d_head', j.d_head, c.head_dim ?? c.hidden_size / c.num_attention_heads);
eq('rope.dim', j.rope.dim, Math.round((c.partial_rotary_factor ?? 1) * j.d_head));
eq('rope.theta', j.rope.theta, c.rope_theta ?? 10000);
const rs = c.rope_scaling;
eq('rope.scaling', j.rope.scaling, rs ? (rs.rope_type ?? rs.type) : 'none');
eq('rope.factor', j.rope.factor, rs ? rs.factor : null);
eq('rope.local_theta', j.rope.local_theta, c.rope_local_base_freq ?? null);
eq('attn_softcap', j.attn_softcap, c.attn_logit_softcapping ?? 0);
eq('final_softcap', j.final_softcap, c.final_logit_softcapping ?? 0);
eq('tie_word_embeddings', j.tie_word_embeddings, c.tie_word_embeddings ?? ['gemma2', 'gemma3_text', 'gemma3'].includes(c.model_type));
eq('window length', j.window.length, j.layers);
if (!c.sliding_window || c.use_sliding_window === false) eq('window', j.window, new Array(j.layers).fill(0));
else if (!j.window.every((w) => w === 0 || w === c.sliding_window)) fail(`window ${j.window} vs ${c.sliding_window}`);
// parameters: every tensor of model.safetensors (tied: no separate LM head)
const buf = fs.readFileSync(`${dir}/model.safetensors`);
const n = Number(buf.readBigUInt64LE(0));
const hdr = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
let params = 0;
for (const [k, v] of Object.entries(hdr)) if (k !== '__metadata__') params += v.shape.reduce((a, b) => a * b, 1);
const dt = Object.entries(hdr).find(([k]) => k !== '__metadata__')[1].dtype;
eq('dtype', j.dtype, dt);
eq('precision', j.precision, 'f32');
if (j.n_params !== params) console.log(`note: ${dir}: n_params ${j.n_params}, safetensors holds ${params}`);
if (j.n_params <= 0 || j.n_params > params) fail(`n_params ${j.n_params} outside (0, ${params}]`);
JS
  then ok "$m: --format json equals config.json"; else fail "$m: --format json"; fi
done

expect 2 "expected text or json" -- info --model "$F/llama" --format yaml
[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ok"
