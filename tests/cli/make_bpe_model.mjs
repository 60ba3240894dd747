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
const { addGpt2, tensorList, writeSafetensors } = await import(join(HERE, '..', 'browser', 'tensors.mjs'));
const [out, tokDir, vocabArg] = process.argv.slice(2);
if (!out || !tokDir || !vocabArg) throw new Error('usage: node make_bpe_model.mjs OUT_DIR TOKENIZER_DIR VOCAB_SIZE');
const L = 1, H = 2, D = 8, P = 64, V = Number(vocabArg);

const list = tensorList(7);
addGpt2(list, { L, D, V, P, qkv: 0.6 });
const { tensors } = list;

mkdirSync(out, { recursive: true });
writeSafetensors(join(out, 'model.safetensors'), tensors);
writeFileSync(join(out, 'config.json'), JSON.stringify({
  architectures: ['GPT2LMHeadModel'], model_type: 'gpt2', activation_function: 'gelu_new',
  n_embd: D, n_head: H, n_layer: L, n_inner: null, n_positions: P, n_ctx: P, vocab_size: V,
  layer_norm_epsilon: 1e-5,
}, null, 2));
for (const f of ['tokenizer.json', 'tokenizer_config.json'])
  if (existsSync(join(tokDir, f))) copyFileSync(join(tokDir, f), join(out, f));
