// gen-api-types.mjs — generates the TypeScript types of the server's API from its JSON
// Schemas: docs/api/api.schema.json -> src/api/types.ts, docs/api/db.schema.json ->
// src/api/dbtypes.ts. `npm run build` runs it first (a file is rewritten only when its
// text changes); `--check` exits 1 instead of writing when a file is stale.
// It understands the subset of JSON Schema those files use (type, enum, const, anyOf,
// $ref, properties/required/additionalProperties, items/prefixItems and the validation
// keywords it ignores) and refuses any other keyword, so nothing in a schema is
// silently left out of the types. tests/api/schema.mjs validates responses against
// the same subset. No dependencies beyond Node.
import { existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const WEB = join(dirname(fileURLToPath(import.meta.url)), '..');
const SCHEMAS = join(WEB, '..', 'docs', 'api');
/** schema file -> generated module (relative to web/src/api) */
const OUTPUTS = { 'api.schema.json': 'types', 'db.schema.json': 'dbtypes' };

const ANNOTATIONS = new Set(['description', 'title', '$comment', 'examples']);
const VALIDATION_ONLY = new Set(['pattern', 'minimum', 'maximum', 'minItems', 'maxItems', 'minLength', 'maxLength']);
const STRUCTURAL = new Set(['type', 'enum', 'const', 'anyOf', '$ref', 'properties', 'required', 'additionalProperties', 'items', 'prefixItems']);
const TOP = new Set(['$schema', '$id', 'title', 'description', '$defs', 'x-routes']);

function fail(where, msg) {
  throw new Error(`gen-api-types: ${where}: ${msg}`);
}

function checkKeywords(s, where) {
  if (typeof s !== 'object' || s === null || Array.isArray(s)) fail(where, 'a schema must be an object');
  for (const k of Object.keys(s))
    if (!ANNOTATIONS.has(k) && !VALIDATION_ONLY.has(k) && !STRUCTURAL.has(k)) fail(where, `unsupported keyword '${k}'`);
}

const lit = (v) => (typeof v === 'string' ? `'${v.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'` : JSON.stringify(v));
const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
const key = (k) => (IDENT.test(k) ? k : lit(k));

/** A JSDoc comment of text at the given indent, or ''. */
function doc(text, indent) {
  if (!text) return '';
  const lines = wrap(String(text).replace(/\*\//g, '*\\/'), 100 - indent.length);
  if (lines.length === 1 && indent.length + lines[0].length < 100) return `${indent}/** ${lines[0]} */\n`;
  return `${indent}/**\n${lines.map((l) => `${indent} * ${l}`.trimEnd()).join('\n')}\n${indent} */\n`;
}

const uniq = (xs) => [...new Set(xs)];
/** Parenthesises a union before [] so that (A | B)[] keeps its meaning. */
const elem = (t) => (/[|&]/.test(t) && !/^\(.*\)$/.test(t) ? `(${t})[]` : `${t}[]`);

class Module {
  constructor(file, schema) {
    this.file = file;
    this.schema = schema;
    this.imports = new Map(); // module -> Set of names
  }

  ref(r, where) {
    const m = /^(?:([\w.-]+\.schema\.json))?#\/\$defs\/(\w+)$/.exec(r);
    if (!m) fail(where, `unsupported $ref '${r}'`);
    const [, file, name] = m;
    if (file && file !== this.file) {
      const other = loadSchema(file);
      if (!other.$defs?.[name]) fail(where, `$ref '${r}': no such definition`);
      if (!OUTPUTS[file]) fail(where, `$ref '${r}': ${file} generates no module`);
      const mod = `./${OUTPUTS[file]}`;
      if (!this.imports.has(mod)) this.imports.set(mod, new Set());
      this.imports.get(mod).add(name);
    } else if (!this.schema.$defs?.[name]) fail(where, `$ref '${r}': no such definition`);
    return name;
  }

  /** The TypeScript type of schema s (inline), at the given indent. */
  ts(s, where, indent = '') {
    checkKeywords(s, where);
    if (s.$ref !== undefined) return this.ref(s.$ref, where);
    if (s.const !== undefined) return lit(s.const);
    if (s.enum !== undefined) return uniq(s.enum.map(lit)).join(' | ');
    if (s.anyOf !== undefined) return uniq(s.anyOf.map((x, i) => this.ts(x, `${where}.anyOf[${i}]`, indent))).join(' | ');
    if (s.type === undefined) fail(where, 'no type, enum, const, anyOf or $ref');
    const types = Array.isArray(s.type) ? s.type : [s.type];
    return uniq(types.map((t) => this.typeOf(t, s, where, indent))).join(' | ');
  }

  typeOf(t, s, where, indent) {
    switch (t) {
      case 'string':
        return 'string';
      case 'integer':
      case 'number':
        return 'number';
      case 'boolean':
        return 'boolean';
      case 'null':
        return 'null';
      case 'array':
        if (s.prefixItems) {
          if (s.minItems !== s.prefixItems.length || s.maxItems !== s.prefixItems.length)
            fail(where, 'prefixItems needs minItems = maxItems = its length (a tuple)');
          return `[${s.prefixItems.map((x, i) => this.ts(x, `${where}.prefixItems[${i}]`, indent)).join(', ')}]`;
        }
        if (!s.items) fail(where, 'an array needs items or prefixItems');
        return elem(this.ts(s.items, `${where}.items`, indent));
      case 'object':
        if (s.properties) return this.objectBody(s, where, indent);
        if (s.additionalProperties && typeof s.additionalProperties === 'object')
          return `Record<string, ${this.ts(s.additionalProperties, `${where}.additionalProperties`, indent)}>`;
        return 'Record<string, unknown>';
      default:
        fail(where, `unknown type '${t}'`);
    }
  }

  objectBody(s, where, indent) {
    if (s.additionalProperties !== undefined && s.additionalProperties !== false)
      fail(where, 'an object with properties must be closed (additionalProperties: false)');
    const req = new Set(s.required ?? []);
    for (const r of req) if (!(r in s.properties)) fail(where, `required '${r}' is not a property`);
    const inner = `${indent}  `;
    let out = '{\n';
    for (const [k, p] of Object.entries(s.properties)) {
      out += doc(p.description, inner);
      out += `${inner}${key(k)}${req.has(k) ? '' : '?'}: ${this.ts(p, `${where}.${k}`, inner)};\n`;
    }
    return `${out}${indent}}`;
  }

  render() {
    const s = this.schema;
    for (const k of Object.keys(s)) if (!TOP.has(k)) fail(this.file, `unsupported top-level keyword '${k}'`);
    let body = '';
    for (const [name, d] of Object.entries(s.$defs ?? {})) {
      const where = `${this.file}#/$defs/${name}`;
      checkKeywords(d, where);
      body += '\n' + doc(d.description, '');
      if (d.type === 'object' && d.properties) body += `export interface ${name} ${this.objectBody(d, where, '')}\n`;
      else body += `export type ${name} = ${this.ts(d, where)};\n`;
    }
    const src = relative(join(WEB, '..'), join(SCHEMAS, this.file));
    let head = `// ${OUTPUTS[this.file]}.ts — GENERATED from ${src} by web/scripts/gen-api-types.mjs\n`;
    head += '// (npm run build runs it). Do not edit: change the schema, which the server is tested\n';
    head += '// against (tests/api/contract.test.mjs).\n';
    for (const line of wrap(s.description ?? '', 88)) head += `// ${line}\n`;
    for (const [mod, names] of this.imports) head += `\nimport type { ${[...names].sort().join(', ')} } from '${mod}';\n`;
    return head + body;
  }
}

function wrap(text, width) {
  const out = [];
  let line = '';
  for (const w of text.split(/\s+/).filter(Boolean)) {
    if (line && line.length + 1 + w.length > width) {
      out.push(line);
      line = w;
    } else line = line ? `${line} ${w}` : w;
  }
  if (line) out.push(line);
  return out;
}

const cache = new Map();
function loadSchema(file) {
  if (!cache.has(file)) cache.set(file, JSON.parse(readFileSync(join(SCHEMAS, file), 'utf8')));
  return cache.get(file);
}

const check = process.argv.includes('--check');
let stale = 0;
for (const [file, mod] of Object.entries(OUTPUTS)) {
  const text = new Module(file, loadSchema(file)).render();
  const out = join(WEB, 'src', 'api', `${mod}.ts`);
  const old = existsSync(out) ? readFileSync(out, 'utf8') : null;
  if (old === text) continue;
  if (check) {
    console.error(`gen-api-types: ${relative(WEB, out)} is not what docs/api/${file} generates (run npm run gen-api)`);
    stale++;
    continue;
  }
  const tmp = `${out}.${process.pid}.tmp`;
  writeFileSync(tmp, text);
  renameSync(tmp, out); // atomic: a concurrent build never reads half a file
  console.log(`gen-api-types: wrote ${relative(WEB, out)}`);
}
process.exit(stale ? 1 : 0);
