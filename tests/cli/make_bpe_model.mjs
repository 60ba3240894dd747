// make_bpe_model.mjs — writes a tiny random GPT-2 (GPT2LMHeadModel names, lm_head tied
// to wte) whose vocabulary fits a given byte-level BPE tokenizer folder, and copies that
// folder's tokenizer.json and tokenizer_config.json next to it: a model folder that
// tokenizes exactly as the real tokenizer (e.g. Llama-3's from tests/ref/node_modules),
// for the CLI tests of tokenization and JSON output. 1 layer, 2 heads, width 8, 64
// positions. Deterministic (seeded); test support only, nothing committed.
// Usage: node make_bpe_model.mjs OUT_DIR TOKENIZER_DIR VOCAB_SIZE
import { copyFileSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const { tensorList, writeSafetensors } = await import(join(HERE, '..', 'browser', 'tensors.mjs'));
const [out, tokDir, vocabArg] = process.argv.slice(2);
if (!out || !tokDir || !vocabArg) throw new Error('usage: node make_bpe_model.mjs OUT_DIR TOKENIZER_DIR VOCAB_SIZE');
const L = 1, H = 2, D = 8, F = 4 * D, P = 64, V = Number(vocabArg);

const { tensors, add, rnd, one, zero } = tensorList(7);
add('transformer.wte.weight', [V, D], rnd(0.5));
add('transformer.wpe.weight', [P, D], rnd(0.3));
for (let l = 0; l < L; l++) {
  const p = `transformer.h.${l}.`;
  add(`${p}ln_1.weight`, [D], one);
  add(`${p}ln_1.bias`, [D], zero);
  add(`${p}attn.c_attn.weight`, [D, 3 * D], rnd(0.6));
  add(`${p}attn.c_attn.bias`, [3 * D], rnd(0.1));
  add(`${p}attn.c_proj.weight`, [D, D], rnd(0.2));
  add(`${p}attn.c_proj.bias`, [D], zero);
  add(`${p}ln_2.weight`, [D], one);
  add(`${p}ln_2.bias`, [D], zero);
  add(`${p}mlp.c_fc.weight`, [D, F], rnd(0.2));
  add(`${p}mlp.c_fc.bias`, [F], zero);
  add(`${p}mlp.c_proj.weight`, [F, D], rnd(0.2));
  add(`${p}mlp.c_proj.bias`, [D], zero);
}
add('transformer.ln_f.weight', [D], one);
add('transformer.ln_f.bias', [D], zero);

mkdirSync(out, { recursive: true });
writeSafetensors(join(out, 'model.safetensors'), tensors);
writeFileSync(join(out, 'config.json'), JSON.stringify({
  architectures: ['GPT2LMHeadModel'], model_type: 'gpt2', activation_function: 'gelu_new',
  n_embd: D, n_head: H, n_layer: L, n_inner: null, n_positions: P, n_ctx: P, vocab_size: V,
  layer_norm_epsilon: 1e-5,
}, null, 2));
for (const f of ['tokenizer.json', 'tokenizer_config.json'])
  if (existsSync(join(tokDir, f))) copyFileSync(join(tokDir, f), join(out, f));
