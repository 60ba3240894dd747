// make_llama_model.mjs — writes a random Llama (Hugging Face names, F32 safetensors, no
// tokenizer: it takes ids) into a folder: by default 32 layers × 32 query heads sharing 8
// key/value heads (grouped-query), head width 4, width 64, 512 positions, vocabulary 64,
// tied embeddings, a sliding window of 16 on every layer (Mistral-style), so the model
// view can be checked at LLaMA-7B's head count; POSITIONS and WINDOW (0: none) change the
// last two (the long map's test: 2048 positions, no window). Usage:
//   node make_llama_model.mjs DIR [LAYERS HEADS KV_HEADS [POSITIONS [WINDOW]]]
// Test support only.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tensorList, writeSafetensors } from './tensors.mjs';

const [dir, L = '32', H = '32', KV = '8', POS = '512', WIN = '16'] = process.argv.slice(2);
if (!dir) throw new Error('usage: node make_llama_model.mjs DIR [LAYERS HEADS KV_HEADS [POSITIONS [WINDOW]]]');
const nL = +L, nH = +H, nKV = +KV, Dh = 4, D = 64, F = 32, V = 64;
mkdirSync(dir, { recursive: true });
writeFileSync(join(dir, 'config.json'), JSON.stringify({
  architectures: ['MistralForCausalLM'], model_type: 'mistral', hidden_size: D, intermediate_size: F,
  num_hidden_layers: nL, num_attention_heads: nH, num_key_value_heads: nKV, head_dim: Dh, hidden_act: 'silu',
  max_position_embeddings: +POS, rms_norm_eps: 1e-6, rope_theta: 10000.0, sliding_window: +WIN > 0 ? +WIN : null,
  tie_word_embeddings: true, vocab_size: V, bos_token_id: 1, eos_token_id: 2, torch_dtype: 'float32',
}, null, 1));
const { tensors, add, rnd, one } = tensorList(7);
add('model.embed_tokens.weight', [V, D], rnd(0.5));
for (let l = 0; l < nL; l++) {
  const p = `model.layers.${l}.`;
  add(`${p}input_layernorm.weight`, [D], one);
  add(`${p}self_attn.q_proj.weight`, [nH * Dh, D], rnd(0.4));
  add(`${p}self_attn.k_proj.weight`, [nKV * Dh, D], rnd(0.4));
  add(`${p}self_attn.v_proj.weight`, [nKV * Dh, D], rnd(0.2));
  add(`${p}self_attn.o_proj.weight`, [D, nH * Dh], rnd(0.05));
  add(`${p}post_attention_layernorm.weight`, [D], one);
  add(`${p}mlp.gate_proj.weight`, [F, D], rnd(0.1));
  add(`${p}mlp.up_proj.weight`, [F, D], rnd(0.1));
  add(`${p}mlp.down_proj.weight`, [D, F], rnd(0.05));
}
add('model.norm.weight', [D], one);
writeSafetensors(join(dir, 'model.safetensors'), tensors);
