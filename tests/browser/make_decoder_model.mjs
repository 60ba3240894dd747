// make_decoder_model.mjs — writes a tiny Llama whose heads are set by hand, so that the
// analysis of a causal model has known patterns to label: 2 layers, width 32, 4 query
// heads of 8 sharing 2 key/value heads, vocabulary 32000 (the Llama-2 tokenizer is copied
// in by the caller), RoPE theta 10000, tied embeddings. Every embedding row is small noise
// plus 1 on dim 0 (a constant direction); BOS (id 1) also has 1 on dim 1. Then
//   - layer 0, head 0: a previous-token head. q and k read dim 0 into the RoPE pairs of
//     frequencies 1 and 0.1 (dims f, f + 4), k turned by one position's angle, so
//     q_i . k_j = a^2 x0_i x0_j sum_f cos(w_f (j - i + 1)), largest at j = i - 1;
//   - layer 1, head 0: a sink. q reads dim 0 and k reads dim 1 (BOS) into the slowest
//     pair (frequency 1e-3: almost no turn over the sentence), so every query attends
//     to BOS;
//   - every other head has q = 0 (uniform over the causal prefix); o_proj and the MLPs
//     are zero, so each layer's input is the embedding.
// Usage: node make_decoder_model.mjs DIR. Test support only.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tensorList, writeSafetensors } from './tensors.mjs';

const [dir] = process.argv.slice(2);
if (!dir) throw new Error('usage: node make_decoder_model.mjs DIR');
const L = 2, H = 4, KV = 2, Dh = 8, D = 32, F = 16, V = 32000, BOS = 1;
mkdirSync(dir, { recursive: true });
writeFileSync(join(dir, 'config.json'), JSON.stringify({
  architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: D, intermediate_size: F,
  num_hidden_layers: L, num_attention_heads: H, num_key_value_heads: KV, head_dim: Dh, hidden_act: 'silu',
  max_position_embeddings: 256, rms_norm_eps: 1e-6, rope_theta: 10000.0, tie_word_embeddings: true,
  vocab_size: V, bos_token_id: BOS, eos_token_id: 2, torch_dtype: 'float32',
}, null, 1));
const { tensors, add, rnd, one, zero } = tensorList(11);
const noise = rnd(0.02);
add('model.embed_tokens.weight', [V, D], (i) => {
  const [v, d] = [Math.floor(i / D), i % D];
  return d === 0 ? 1 : d === 1 && v === BOS ? 1 : noise();
});
const a = 2; // q and k scale: the previous key wins by about e^8 over the next best
const freq = (f) => 10000 ** (-(2 * f) / Dh); // HF inv_freq of pair (f, f + Dh/2)
/** A (rows, D) matrix with the entries given as {[row]: [col, value][]}. */
const sparse = (rows, set) => (i) => {
  const [r, c] = [Math.floor(i / D), i % D];
  for (const [cc, v] of set[r] ?? []) if (cc === c) return v;
  return 0;
};
for (let l = 0; l < L; l++) {
  const p = `model.layers.${l}.`;
  let q = {}, k = {};
  if (l === 0) {
    for (const f of [0, 1]) {
      q[f] = [[0, a]];
      k[f] = [[0, a * Math.cos(freq(f))]];
      k[f + Dh / 2] = [[0, a * Math.sin(freq(f))]];
    }
  } else {
    q[Dh - 1] = [[0, 3]];
    k[Dh - 1] = [[1, 3]];
  }
  add(`${p}input_layernorm.weight`, [D], one);
  add(`${p}self_attn.q_proj.weight`, [H * Dh, D], sparse(H * Dh, q)); // head 0 = rows 0..Dh-1
  add(`${p}self_attn.k_proj.weight`, [KV * Dh, D], sparse(KV * Dh, k)); // kv head 0
  add(`${p}self_attn.v_proj.weight`, [KV * Dh, D], rnd(0.2));
  add(`${p}self_attn.o_proj.weight`, [D, H * Dh], zero);
  add(`${p}post_attention_layernorm.weight`, [D], one);
  add(`${p}mlp.gate_proj.weight`, [F, D], rnd(0.1));
  add(`${p}mlp.up_proj.weight`, [F, D], rnd(0.1));
  add(`${p}mlp.down_proj.weight`, [D, F], zero);
}
add('model.norm.weight', [D], one);
writeSafetensors(join(dir, 'model.safetensors'), tensors);
