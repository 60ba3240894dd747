// make_bart_model.mjs — bart_tiny of tests/ref/gen_encdec.py (random weights, 100 ids) in a
// folder of its own with tests/cli/test_encdec.sh's ten-token byte-level BPE tokenizer.json
// (<s> <pad> </s> <unk> a b Ġ ab Ġb Ġa), so the explorer takes text for it. Used by the
// encoder-decoder browser tests; the weights are a symlink to the committed fixture.
import { copyFileSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const FIX = join(dirname(fileURLToPath(import.meta.url)), '..', 'ref', 'fixtures', 'models');

/** bart_tiny with test_encdec.sh's tokenizer.json (<s> <pad> </s> <unk> a b Ġ ab Ġb Ġa). */
export function writeBart(dir) {
  mkdirSync(dir, { recursive: true });
  copyFileSync(join(FIX, 'bart_tiny', 'config.json'), join(dir, 'config.json'));
  symlinkSync(join(FIX, 'bart_tiny', 'model.safetensors'), join(dir, 'model.safetensors'));
  const vocab = { '<s>': 0, '<pad>': 1, '</s>': 2, '<unk>': 3, a: 4, b: 5, '\u0120': 6, ab: 7, '\u0120b': 8, '\u0120a': 9 };
  const special = Object.entries(vocab).slice(0, 4).map(([content, id]) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  const bl = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true };
  writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify({
    version: '1.0', truncation: null, padding: null, added_tokens: special, normalizer: null, pre_tokenizer: bl,
    post_processor: { type: 'RobertaProcessing', sep: ['</s>', 2], cls: ['<s>', 0], trim_offsets: true, add_prefix_space: false },
    decoder: { ...bl, add_prefix_space: true },
    model: { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '', fuse_unk: false,
      byte_fallback: false, vocab, merges: ['a b', '\u0120 b', '\u0120 a'] },
  }));
  return dir;
}

