// make_long_model.mjs — writes a small random BERT with 512 positions (2 layers,
// 4 heads, width 32) and demo-bert's WordPiece vocabulary into a folder, so the
// browser test can render a 512-token input. Deterministic (seeded).
// Usage: node make_long_model.mjs OUT_DIR
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tensorList, writeSafetensors } from './tensors.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const out = process.argv[2];
if (!out) throw new Error('usage: node make_long_model.mjs OUT_DIR');
// ATTNSCOPE_LONG_LHD="12,12,96" overrides layers, heads, width (for timing BERT-base-sized grids).
const [L, H, D] = (process.env.ATTNSCOPE_LONG_LHD || "2,4,32").split(",").map(Number);
// ATTNSCOPE_LONG_QK="0.05" sets the scale of the query/key weights (default 0.6): small values
// give diffuse attention, where every one of the T x T weights is a visible link.
const QK = Number(process.env.ATTNSCOPE_LONG_QK || 0.6);
const F = 2 * D, P = 512, V = 2000;

const { tensors, add, rnd, one, zero } = tensorList(12345);

add('bert.embeddings.word_embeddings.weight', [V, D], rnd(0.5));
add('bert.embeddings.position_embeddings.weight', [P, D], rnd(0.5));
add('bert.embeddings.token_type_embeddings.weight', [2, D], rnd(0.5));
add('bert.embeddings.LayerNorm.weight', [D], one);
add('bert.embeddings.LayerNorm.bias', [D], zero);
for (let l = 0; l < L; l++) {
  const p = `bert.encoder.layer.${l}.`;
  for (const m of ['query', 'key', 'value']) {
    add(`${p}attention.self.${m}.weight`, [D, D], rnd(m === 'value' ? 0.2 : QK));
    add(`${p}attention.self.${m}.bias`, [D], rnd(0.1));
  }
  add(`${p}attention.output.dense.weight`, [D, D], rnd(0.2));
  add(`${p}attention.output.dense.bias`, [D], zero);
  add(`${p}attention.output.LayerNorm.weight`, [D], one);
  add(`${p}attention.output.LayerNorm.bias`, [D], zero);
  add(`${p}intermediate.dense.weight`, [F, D], rnd(0.2));
  add(`${p}intermediate.dense.bias`, [F], zero);
  add(`${p}output.dense.weight`, [D, F], rnd(0.2));
  add(`${p}output.dense.bias`, [D], zero);
  add(`${p}output.LayerNorm.weight`, [D], one);
  add(`${p}output.LayerNorm.bias`, [D], zero);
}

mkdirSync(out, { recursive: true });
writeSafetensors(join(out, 'model.safetensors'), tensors);
writeFileSync(
  join(out, 'config.json'),
  JSON.stringify({
    architectures: ['BertModel'], model_type: 'bert', hidden_act: 'gelu', hidden_size: D,
    intermediate_size: F, num_attention_heads: H, num_hidden_layers: L, max_position_embeddings: P,
    type_vocab_size: 2, vocab_size: V, layer_norm_eps: 1e-12, pad_token_id: 0,
  }, null, 2),
);
writeFileSync(join(out, 'tokenizer_config.json'), JSON.stringify({ do_lower_case: true, model_max_length: P }));
copyFileSync(join(ROOT, 'models', 'demo-bert', 'vocab.txt'), join(out, 'vocab.txt'));
