// make_decoder_model.mjs — writes a tiny Llama whose heads are set by hand, so that the
// analysis of a causal model has known patterns to label: 2 layers, width 64, 4 query
// heads of 32 sharing 2 key/value heads, vocabulary 32000 (the Llama-2 tokenizer is copied
// in by the caller), RoPE theta 1e8 (pair f of a head turns by 10^(-f/2) rad per
// position: pairs f >= 5 barely turn over 100 tokens), tied embeddings. Residual layout:
// dim 0 = 1 for every token (a constant direction), dim 1 = 1 for BOS (id 1), dims 2..23
// the token's identity (hashed signs x 0.3; none for BOS), dims 24..45 the previous
// token's identity (written by layer 0). Then
//   - L0H0, a previous-token head: q and k read dim 0 into the pairs of frequencies 1,
//     0.1 and 0.01, k turned by one position's angle, so q_i . k_j grows with
//     sum_f cos(w_f (j - i + 1)), largest at j = i - 1; its values (the identity) go to
//     dims 24..45;
//   - L1H0, a sink: q reads dim 0 and k reads dim 1 (BOS) into the slowest pair;
//   - L1H2, an induction head: q reads the token's identity and k the previous token's
//     into the slow pairs f = 5..15, so the query attends to the key whose previous
//     token is the query's own token: the token after its last occurrence;
//   - every other head has q = 0 (uniform over the causal prefix); the MLPs and layer 1's
//     o_proj are zero.
// Usage: node make_decoder_model.mjs DIR. Test support only.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tensorList, writeSafetensors } from './tensors.mjs';

const [dir] = process.argv.slice(2);
if (!dir) throw new Error('usage: node make_decoder_model.mjs DIR');
const L = 2, H = 4, KV = 2, Dh = 32, D = 64, F = 16, V = 32000, BOS = 1, THETA = 1e8;
const ID = 2, PREV = 24, NID = 22; // residual dims of the identity and of the previous token's
mkdirSync(dir, { recursive: true });
writeFileSync(join(dir, 'config.json'), JSON.stringify({
  architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: D, intermediate_size: F,
  num_hidden_layers: L, num_attention_heads: H, num_key_value_heads: KV, head_dim: Dh, hidden_act: 'silu',
  max_position_embeddings: 256, rms_norm_eps: 1e-6, rope_theta: THETA, tie_word_embeddings: true,
  vocab_size: V, bos_token_id: BOS, eos_token_id: 2, torch_dtype: 'float32',
}, null, 1));
const { tensors, add, rnd, zero } = tensorList(11);

/** A seeded sign (+1 / -1) for token v and identity dim d (a 32-bit integer hash). */
function sign(v, d) {
  let h = Math.imul(v ^ (d << 16), 0x9e3779b1);
  h ^= h >>> 15;
  h = Math.imul(h, 0x85ebca77);
  h ^= h >>> 13;
  return h & 1 ? 1 : -1;
}
add('model.embed_tokens.weight', [V, D], (i) => {
  const [v, d] = [Math.floor(i / D), i % D];
  if (d === 0) return 1;
  if (d === 1) return v === BOS ? 1 : 0;
  if (d >= ID && d < ID + NID && v !== BOS) return 0.3 * sign(v, d - ID);
  return 0;
});
const freq = (f) => THETA ** (-(2 * f) / Dh); // HF inv_freq of pair (f, f + Dh/2)
/** A (rows, cols) matrix from entries [row, col, value]. */
const matrix = (cols, entries) => {
  const m = new Map(entries.map(([r, c, v]) => [r * cols + c, v]));
  return (i) => m.get(i) ?? 0;
};
/** The head dims of the slow pairs f = 5..15 (both halves), NID of them. */
const slow = [];
for (let f = 5; f < Dh / 2; f++) slow.push(f, f + Dh / 2);

for (let l = 0; l < L; l++) {
  const p = `model.layers.${l}.`;
  const q = [], k = [], v = [], o = [];
  if (l === 0) {
    const a = 3.5; // the previous key wins by about e^9 over the next best
    for (const f of [0, 2, 4]) {
      q.push([f, 0, a]);
      k.push([f, 0, a * Math.cos(freq(f))], [f + Dh / 2, 0, a * Math.sin(freq(f))]);
    }
    for (let d = 0; d < NID; d++) {
      v.push([d, ID + d, 1]); // kv head 0's values: the identity
      o.push([PREV + d, d, 0.216]); // head 0's output -> the previous-token dims (raw scale 0.3)
    }
  } else {
    q.push([Dh - 1, 0, 3]); // head 0: the sink
    k.push([Dh - 1, 1, 3]);
    slow.forEach((hd, n) => {
      q.push([2 * Dh + hd, ID + n, 2.5]); // head 2 (rows 64..95): the token's identity
      k.push([Dh + hd, PREV + n, 2.5]); // kv head 1 (rows 32..63): the previous token's
    });
  }
  add(`${p}input_layernorm.weight`, [D], () => 1);
  add(`${p}self_attn.q_proj.weight`, [H * Dh, D], matrix(D, q));
  add(`${p}self_attn.k_proj.weight`, [KV * Dh, D], matrix(D, k));
  add(`${p}self_attn.v_proj.weight`, [KV * Dh, D], l === 0 ? matrix(D, v) : rnd(0.2));
  add(`${p}self_attn.o_proj.weight`, [D, H * Dh], matrix(H * Dh, o));
  add(`${p}post_attention_layernorm.weight`, [D], () => 1);
  add(`${p}mlp.gate_proj.weight`, [F, D], rnd(0.1));
  add(`${p}mlp.up_proj.weight`, [F, D], rnd(0.1));
  add(`${p}mlp.down_proj.weight`, [D, F], zero);
}
add('model.norm.weight', [D], () => 1);
writeSafetensors(join(dir, 'model.safetensors'), tensors);
