// make_synthetic_import.mjs — writes a tiny `attnscope import --dir` folder with 12 x 12
// heads (the BERT-base shape), for the overview benchmark when ../shared/data is absent
// and for the --import-dir tests (test_server_db.c, dodrio.test.mjs): 4 sentences of
// random row-normalised attention (float32 .npy) + token JSON with two-class saliency
// and a word-level parse (every word's parent is the next word, det / nsubj alternating,
// the second-to-last word is the root, the final "." is punct), so the dependency view
// has arcs to mark. Deterministic (seeded).
// Usage: node make_synthetic_import.mjs OUT_DIR
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const out = process.argv[2];
if (!out) throw new Error('usage: node make_synthetic_import.mjs OUT_DIR');
mkdirSync(out, { recursive: true });
const L = 12, H = 12;
let seed = 7;
const rand = () => ((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32);
const sentences = ['the film was good .', 'a story about love and work .', 'it is not bad at all .', 'the movie has one funny story .'];
sentences.forEach((s, n) => {
  const tokens = ['[CLS]', ...s.split(' '), '[SEP]'];
  const T = tokens.length;
  const a = new Float32Array(L * H * T * T);
  for (let lh = 0; lh < L * H; lh++)
    for (let i = 0; i < T; i++) {
      let sum = 0;
      const base = (lh * T + i) * T;
      for (let j = 0; j < T; j++) sum += a[base + j] = rand() ** 3 + (lh % 5 === 0 && j === Math.min(T - 1, i + 1) ? 4 : 0);
      for (let j = 0; j < T; j++) a[base + j] /= sum;
    }
  let hdr = `{'descr': '<f4', 'fortran_order': False, 'shape': (${L}, ${H}, ${T}, ${T}), }`;
  while ((10 + hdr.length + 1) % 64) hdr += ' ';
  hdr += '\n';
  const pre = Buffer.alloc(10);
  pre.write('\x93NUMPY', 0, 'latin1');
  pre[6] = 1;
  pre[7] = 0;
  pre.writeUInt16LE(hdr.length, 8);
  const name = String(n).padStart(4, '0');
  writeFileSync(join(out, `${name}.attention.npy`), Buffer.concat([pre, Buffer.from(hdr, 'latin1'), Buffer.from(a.buffer)]));
  const saliency = tokens.map((t) => ({ token: t, negative: rand(), positive: rand() }));
  const words = s.split(' ');
  const W = words.length;
  const list = words.map((_, w) =>
    w === W - 2 ? { child: w, parent: null, relation: 'root' }
      : w === W - 1 ? { child: w, parent: W - 2, relation: 'punct' }
        : { child: w, parent: w + 1, relation: w % 2 ? 'nsubj' : 'det' },
  );
  const dependencies = { words, list };
  writeFileSync(join(out, `${name}.json`), JSON.stringify({ id: n, sentence: s, label: n % 2, predicted_label: n % 2, tokens, saliency, dependencies }));
});
