// make_gpt2_model.mjs — writes a small random causal GPT-2 (GPT2LMHeadModel names:
// transformer.wte/wpe/h.N.{ln_1,attn.c_attn,attn.c_proj,ln_2,mlp.c_fc,mlp.c_proj}/ln_f,
// Conv1D weights stored [in, out]; lm_head tied to wte, so not stored) with the
// committed GPT-2-style byte-level BPE of tests/ref/fixtures/bpe_gpt2 (2000 tokens,
// <|endoftext|> = 1999) into a folder, for the causal-model tests of the server
// (tests/unit/test_server.c) and the browser (explorer.test.mjs). 2 layers (or LAYERS),
// 4 heads, width 32, 128 positions. Deterministic (seeded). Nothing here is committed as a
// binary.
// Usage: node make_gpt2_model.mjs OUT_DIR [LAYERS]
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { addGpt2, tensorList, writeSafetensors } from './tensors.mjs';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const TOK = join(ROOT, 'tests', 'ref', 'fixtures', 'bpe_gpt2');
const out = process.argv[2];
const L = Number(process.argv[3] ?? 2), H = 4, D = 32, P = 128, V = 2000, EOT = 1999;
if (!out || !(Number.isInteger(L) && L >= 1)) throw new Error('usage: node make_gpt2_model.mjs OUT_DIR [LAYERS]');

const list = tensorList(2024);
addGpt2(list, { L, D, V, P });
const { tensors } = list;

mkdirSync(out, { recursive: true });
writeSafetensors(join(out, 'model.safetensors'), tensors);
writeFileSync(
  join(out, 'config.json'),
  JSON.stringify({
    architectures: ['GPT2LMHeadModel'], model_type: 'gpt2', activation_function: 'gelu_new',
    n_embd: D, n_head: H, n_layer: L, n_inner: null, n_positions: P, n_ctx: P, vocab_size: V,
    layer_norm_epsilon: 1e-5, bos_token_id: EOT, eos_token_id: EOT, scale_attn_weights: true,
    // as Mistral's GPT-2 runs: layer l's scores are also divided by l + 1 (the neuron view says so)
    scale_attn_by_inverse_layer_idx: true,
  }, null, 2),
);
for (const f of ['vocab.json', 'merges.txt', 'tokenizer.json']) copyFileSync(join(TOK, f), join(out, f));
