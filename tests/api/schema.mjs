// schema.mjs — a small JSON Schema validator for the API contract (docs/api/*.schema.json):
// the subset those files use and web/scripts/gen-api-types.mjs turns into TypeScript
// (type, enum, const, anyOf, $ref within or across the files, properties, required,
// additionalProperties, items, prefixItems, minItems, maxItems, pattern, minimum,
// maximum, minLength, maxLength). Any other keyword is an error, so a schema cannot
// say something that neither the generator nor this validator checks. Test support only.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const ANNOTATIONS = new Set(['description', 'title', '$comment', 'examples']);
const KNOWN = new Set([
  'type', 'enum', 'const', 'anyOf', '$ref', 'properties', 'required', 'additionalProperties', 'items', 'prefixItems',
  'minItems', 'maxItems', 'pattern', 'minimum', 'maximum', 'minLength', 'maxLength',
]);

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const typeOk = {
  string: (v) => typeof v === 'string',
  number: (v) => typeof v === 'number' && Number.isFinite(v),
  integer: (v) => Number.isInteger(v),
  boolean: (v) => typeof v === 'boolean',
  null: (v) => v === null,
  array: (v) => Array.isArray(v),
  object: (v) => typeof v === 'object' && v !== null && !Array.isArray(v),
};

/** The schemas of a folder (docs/api), by file name; validates values against their $defs. */
export class SchemaSet {
  constructor(dir, files) {
    this.files = new Map(files.map((f) => [f, JSON.parse(readFileSync(join(dir, f), 'utf8'))]));
  }

  def(file, name) {
    const d = this.files.get(file)?.$defs?.[name];
    if (!d) throw new Error(`schema: no definition ${file}#/$defs/${name}`);
    return d;
  }

  resolve(file, ref) {
    const m = /^(?:([\w.-]+\.schema\.json))?#\/\$defs\/(\w+)$/.exec(ref);
    if (!m) throw new Error(`schema ${file}: unsupported $ref '${ref}'`);
    const f = m[1] ?? file;
    return { file: f, schema: this.def(f, m[2]) };
  }

  /** Errors of value against file#/$defs/name: [] when it conforms; each names the JSON path. */
  validate(file, name, value) {
    const errs = [];
    this.check(file, this.def(file, name), value, name, errs);
    return errs;
  }

  check(file, s, v, path, errs) {
    for (const k of Object.keys(s))
      if (!KNOWN.has(k) && !ANNOTATIONS.has(k)) throw new Error(`schema ${file} at ${path}: unsupported keyword '${k}'`);
    const n0 = errs.length;
    if (s.$ref !== undefined) {
      const r = this.resolve(file, s.$ref);
      this.check(r.file, r.schema, v, path, errs);
    }
    if (s.const !== undefined && !same(s.const, v)) errs.push(`${path}: ${JSON.stringify(v)} is not ${JSON.stringify(s.const)}`);
    if (s.enum !== undefined && !s.enum.some((e) => same(e, v)))
      errs.push(`${path}: ${JSON.stringify(v)} is not one of ${JSON.stringify(s.enum)}`);
    if (s.anyOf !== undefined) {
      const ok = s.anyOf.some((x) => {
        const e = [];
        this.check(file, x, v, path, e);
        return e.length === 0;
      });
      if (!ok) errs.push(`${path}: ${JSON.stringify(v)?.slice(0, 80)} matches none of anyOf`);
    }
    if (s.type !== undefined) {
      const types = Array.isArray(s.type) ? s.type : [s.type];
      if (!types.some((t) => typeOk[t]?.(v))) {
        errs.push(`${path}: expected ${types.join(' or ')}, got ${v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v} ${JSON.stringify(v)?.slice(0, 80)}`);
        return;
      }
    }
    if (errs.length > n0) return;
    if (typeof v === 'string') {
      if (s.pattern !== undefined && !new RegExp(s.pattern, 'u').test(v)) errs.push(`${path}: ${JSON.stringify(v)} does not match ${s.pattern}`);
      if (s.minLength !== undefined && [...v].length < s.minLength) errs.push(`${path}: shorter than ${s.minLength}`);
      if (s.maxLength !== undefined && [...v].length > s.maxLength) errs.push(`${path}: longer than ${s.maxLength}`);
    }
    if (typeof v === 'number') {
      if (s.minimum !== undefined && v < s.minimum) errs.push(`${path}: ${v} < minimum ${s.minimum}`);
      if (s.maximum !== undefined && v > s.maximum) errs.push(`${path}: ${v} > maximum ${s.maximum}`);
    }
    if (Array.isArray(v)) {
      if (s.minItems !== undefined && v.length < s.minItems) errs.push(`${path}: ${v.length} items < minItems ${s.minItems}`);
      if (s.maxItems !== undefined && v.length > s.maxItems) errs.push(`${path}: ${v.length} items > maxItems ${s.maxItems}`);
      const pre = s.prefixItems ?? [];
      pre.forEach((x, i) => i < v.length && this.check(file, x, v[i], `${path}[${i}]`, errs));
      if (s.items !== undefined) for (let i = pre.length; i < v.length; i++) this.check(file, s.items, v[i], `${path}[${i}]`, errs);
    }
    if (typeOk.object(v)) {
      const props = s.properties ?? {};
      for (const r of s.required ?? []) if (!(r in v)) errs.push(`${path}: missing required field '${r}'`);
      for (const [k, x] of Object.entries(v)) {
        if (k in props) this.check(file, props[k], x, `${path}.${k}`, errs);
        else if (s.additionalProperties === false) errs.push(`${path}: unknown field '${k}'`);
        else if (typeof s.additionalProperties === 'object') this.check(file, s.additionalProperties, x, `${path}.${k}`, errs);
      }
    }
  }

  /** Paths of object schemas with properties that are not closed (additionalProperties: false). */
  openObjects() {
    const out = [];
    const walk = (s, path) => {
      if (typeof s !== 'object' || s === null) return;
      if (Array.isArray(s)) return s.forEach((x, i) => walk(x, `${path}[${i}]`));
      if (s.properties && s.additionalProperties !== false) out.push(path);
      for (const [k, x] of Object.entries(s)) if (k !== 'examples' && k !== 'const' && k !== 'enum') walk(x, `${path}.${k}`);
    };
    for (const [f, s] of this.files) walk(s.$defs, `${f}#/$defs`);
    return out;
  }
}

/** Parses a binary tensor container (docs/server.md): { header, bodyBytes } or throws. */
export function tensorHeader(buf) {
  const b = Buffer.from(buf);
  if (b.length < 8 || b.toString('latin1', 0, 4) !== 'ASTB') throw new Error('tensor response: bad magic');
  const n = b.readUInt32LE(4);
  if ((8 + n) % 8 !== 0 || 8 + n > b.length) throw new Error(`tensor response: header length ${n}`);
  return { header: JSON.parse(b.toString('utf8', 8, 8 + n)), dataBytes: b.length - 8 - n };
}
