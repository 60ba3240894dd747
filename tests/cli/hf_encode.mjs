// hf_encode.mjs — encodes each line of a JSON list of texts with Hugging Face tokenizers
// (npm `tokenizers`, installed in tests/ref by make node-deps) from a tokenizer.json, with
// the special tokens its template adds; prints one JSON list of id lists. Test support.
// Usage: node hf_encode.mjs TOKENIZER.json TEXTS.json
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(HERE, '..', 'ref', 'package.json'));
const tk = require('tokenizers');
const [file, textsFile] = process.argv.slice(2);
const t = tk.Tokenizer.fromFile(file);
const out = [];
for (const text of JSON.parse(fs.readFileSync(textsFile, 'utf8'))) {
  const e = await t.encode(text, null, { addSpecialTokens: true });
  out.push(e.getIds());
}
console.log(JSON.stringify(out));
