// embedded.ts — the run data of a standalone page (the Python package's notebook views,
// python/attnscope/views.py): instead of the HTTP API, the page carries one run in a
// <script id="attnscope-data" type="application/octet-stream"> element holding the
// server's binary tensor container (tensor.ts: "ASTB", JSON header, data) in base64;
// a page of several runs (an encoder-decoder's encoder, decoder and cross attention)
// has one more such element per run (class attnscope-data-part), its meta naming the part.
// Its header's meta is EmbeddedMeta; its tensors are attention [L, H, T, T] (f16 or
// f32) and, for the neuron view, q and k [L, H, T, Dh] and scores [L, H, T, T] (f32), and
// for a rotary model q_pre_rope and k_pre_rope [L, H, T, Dh] (f32).
// EmbeddedRunData answers the views' calls (layer, pooled, head, qk) from those bytes,
// decoding one layer or head at a time.
// The attention's entry says "chunks": L when its bytes are not in the container but in
// one <script class="attnscope-layer" data-part=P data-layer=L> element per layer
// (views.py writes the layer shown first before the bundle, the others after it, so the
// view is drawn while the parser is still reading them). watchLayers takes each layer as
// it arrives; a call on a layer not yet arrived waits for it. In a notebook cell, the
// frame holds the bundle only and reads these elements from the notebook's document
// around it (dataRoot). A head overview page (python: overview(db))
// carries no tensor: its meta (EmbeddedOverviewMeta) holds the analysis run and its
// per-head results as the server's /api/v1/db routes give them. A generation page (python:
// generation_view(g)) carries the generate route's container (EmbeddedGenerationMeta). No
// network here.
import { RunData, type HeadQk, type LayerAttention, type PooledAttention } from './client';
import { decodeOne, TENSOR_MAGIC, type Tensor } from './tensor';
import type { DbRun, HeadsResponse } from './dbtypes';
import type { GenerateMeta, RunResponse, TensorEntry, TensorHeader } from './types';

export type EmbeddedView = 'head' | 'model' | 'neuron';

/** meta of the embedded container (written by python/attnscope/views.py). */
export interface EmbeddedMeta {
  run: RunResponse;
  /** the view shown first, and every view the embedded tensors allow */
  view: EmbeddedView;
  views: EmbeddedView[];
  layer: number;
  head: number;
  /** heads shown in the head view (null = all) */
  heads: number[] | null;
  /** pinned query token (-1 = none) */
  token: number;
  /** the factor on q.k of each embedded layer (neuron view) */
  scale: number[];
  /** the absolute layer and head indices of the embedded ones (a subset is renumbered 0..) */
  layer_ids: number[];
  head_ids: number[];
  /** 'en' or 'zh-CN'; null = the browser's language */
  lang: string | null;
  /** the part's name on a page of several (an encoder-decoder's Encoder, Decoder, Cross); null or absent on a page of one */
  part?: string | null;
  /** per embedded layer and head: what the neuron view's q.k needs besides q and k
   *  (the run's block, also in run.block) */
  qk: { kv_group: number[]; window: number[]; rope: boolean; softcap: number };
}

/** meta of an embedded head overview (written by python/attnscope/views.py, overview(db)). */
export interface EmbeddedOverviewMeta {
  view: 'overview';
  /** the database file's base name */
  db: string;
  /** the run as GET /api/v1/db/runs lists it */
  run: DbRun;
  /** its heads as GET /api/v1/db/runs/{id}/heads gives them */
  heads: HeadsResponse;
  /** the head selected first */
  layer: number;
  head: number;
  lang: string | null;
}

/** meta of an embedded generation (python/attnscope/views.py, generation_view(g)): the
 *  generate route's meta (GenerateMeta) and the head shown first; its tensors are the
 *  route's (attention, cross_attention, beam_attention, beam_cross_attention). */
export interface EmbeddedGenerationMeta extends GenerateMeta {
  view: 'generation';
  layer: number;
  head: number;
  lang: string | null;
}

export const EMBED_ELEMENT_ID = 'attnscope-data';

/** Uint8Array.fromBase64 (TC39 "Uint8Array to/from base64"), where the browser has it. */
type FromBase64 = { fromBase64?: (s: string) => Uint8Array };

/** The bytes of an element holding base64. */
function base64Bytes(el: Element): ArrayBuffer {
  const text = (el.textContent ?? '').replace(/\s+/g, '');
  const native = (Uint8Array as unknown as FromBase64).fromBase64;
  if (native) {
    const b = native(text);
    return b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? (b.buffer as ArrayBuffer) : b.slice().buffer;
  }
  const s = atob(text);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out.buffer;
}

/** Where the page's data elements are: the page itself, or, in a notebook cell's frame
 *  (<meta name="attnscope-data-from" content=KEY>), the element KEY of the notebook's
 *  document around the frame (python/attnscope/views.py, cell_html: a srcdoc frame has
 *  the notebook's origin), with the document it is in. */
export function dataRoot(doc: Document = document): { root: Document | Element; doc: Document } {
  const key = doc.querySelector('meta[name="attnscope-data-from"]')?.getAttribute('content');
  const outer = key ? (doc.defaultView?.frameElement?.ownerDocument ?? null) : null;
  const el = key && outer ? outer.getElementById(key) : null;
  return el && outer ? { root: el, doc: outer } : { root: doc, doc };
}

/** The embedded container's bytes, or null when the page has none (server mode). */
export function embeddedBytes(doc: Document = document): ArrayBuffer | null {
  const el = dataRoot(doc).root.querySelector(`#${EMBED_ELEMENT_ID}`);
  if (!el || !el.textContent) return null;
  return base64Bytes(el);
}

/** The containers of the page's further parts (elements .attnscope-data-part, in page
 *  order), each a run like the first: an encoder-decoder's decoder and cross attention. */
export function embeddedPartBytes(doc: Document = document): ArrayBuffer[] {
  return Array.from(dataRoot(doc).root.querySelectorAll(`script.${EMBED_ELEMENT_ID}-part`), base64Bytes);
}

type EmbeddedHeader = Omit<TensorHeader, 'meta'> & { meta: EmbeddedMeta | EmbeddedOverviewMeta | EmbeddedGenerationMeta };

/** The container's header and where its data starts; throws with one line when malformed. */
function parseContainer(buf: ArrayBuffer): { header: EmbeddedHeader; base: number } {
  if (buf.byteLength < 8) throw new Error('embedded data: too short');
  const magic = new TextDecoder().decode(new Uint8Array(buf, 0, 4));
  if (magic !== TENSOR_MAGIC) throw new Error(`embedded data: bad magic ${JSON.stringify(magic)}`);
  const n = new DataView(buf).getUint32(4, true);
  if (8 + n > buf.byteLength) throw new Error('embedded data: header runs past the data');
  return { header: JSON.parse(new TextDecoder().decode(new Uint8Array(buf, 8, n))) as EmbeddedHeader, base: 8 + n };
}

/** The meta of the page's container: a run's views, or a head overview. */
export function embeddedMeta(buf: ArrayBuffer): EmbeddedMeta | EmbeddedOverviewMeta | EmbeddedGenerationMeta {
  return parseContainer(buf).header.meta;
}

/** A tensor entry whose data may be given apart, one page element per index of its first
 *  axis; row_scale: u8 given apart with per-row factors (each element: the float32 factors
 *  of its rows, then its bytes; value = byte * factor). */
type EmbeddedEntry = TensorEntry & { chunks?: number; row_scale?: boolean };

/** Rows [h0, h0 + nh) of one element of a row-scaled u8 tensor (H, X, Y) as (nh, X, Y). */
function decodeRowScaled(b: ArrayBuffer, H: number, X: number, Y: number, h0: number, nh: number): Float32Array {
  if (b.byteLength !== H * X * (4 + Y)) throw new Error(`embedded data: ${b.byteLength} bytes for ${H} x ${X} rows of ${Y} bytes and their factors`);
  const f = new DataView(b, 0, H * X * 4);
  const bytes = new Uint8Array(b, H * X * 4);
  const out = new Float32Array(nh * X * Y);
  for (let r = 0; r < nh * X; r++) {
    const k = h0 * X + r;
    const s = f.getFloat32(4 * k, true);
    for (let j = 0; j < Y; j++) out[r * Y + j] = bytes[k * Y + j] * s;
  }
  return out;
}

/** A run given as bytes: the views read it through the RunData interface. */
export class EmbeddedRunData extends RunData {
  readonly meta: EmbeddedMeta;
  private readonly buf: ArrayBuffer;
  private readonly base: number;
  private readonly entries = new Map<string, EmbeddedEntry>();
  private readonly pooledCache = new Map<number, PooledAttention>();
  /** (L) the attention's per-layer bytes when given apart; null = not arrived yet */
  private readonly layerBytes: (ArrayBuffer | null)[] = [];
  private readonly waiting = new Map<number, (() => void)[]>();
  private readonly listeners: ((loaded: boolean[]) => void)[] = [];

  constructor(buf: ArrayBuffer) {
    const { header, base } = parseContainer(buf);
    const meta = header.meta;
    if (meta.view === 'overview' || meta.view === 'generation') throw new Error(`embedded data: a ${meta.view === 'overview' ? 'head overview' : 'generation'}, not a run`);
    super(meta.run);
    this.meta = meta;
    this.buf = buf;
    this.base = base;
    for (const t of header.tensors) this.entries.set(t.name, t);
    const att = this.entries.get('attention');
    if (!att) throw new Error('embedded data: no attention tensor');
    if (att.chunks !== undefined) {
      if (att.chunks !== att.shape[0]) throw new Error(`embedded data: attention in ${att.chunks} chunks for ${att.shape[0]} layers`);
      for (let l = 0; l < att.chunks; l++) this.layerBytes.push(null);
    }
  }

  /** Which layers' attention has arrived (all true when the container holds it). */
  loaded(): boolean[] {
    const L = this.entries.get('attention')!.shape[0];
    return Array.from({ length: L }, (_, l) => this.layerBytes.length === 0 || this.layerBytes[l] !== null);
  }

  /** Calls f with loaded() now and whenever a layer arrives. */
  onLoaded(f: (loaded: boolean[]) => void): void {
    this.listeners.push(f);
    f(this.loaded());
  }

  /** Layer l's attention bytes, from its page element (nbytes / L of the entry); throws
   *  with one line when the size is wrong. Ignored when the layer is already there. */
  addLayer(l: number, bytes: ArrayBuffer): void {
    const t = this.entries.get('attention')!;
    if (!(l >= 0 && l < this.layerBytes.length) || this.layerBytes[l]) return;
    const want = t.nbytes / t.shape[0];
    if (bytes.byteLength !== want) throw new Error(`embedded data: layer ${l}: ${bytes.byteLength} bytes, not ${want}`);
    this.layerBytes[l] = bytes;
    for (const f of this.waiting.get(l) ?? []) f();
    this.waiting.delete(l);
    const loaded = this.loaded();
    for (const f of this.listeners) f(loaded);
  }

  /** Resolves once layer l's attention is there (at once when it is). */
  private ready(l: number): Promise<void> {
    if (!this.layerBytes.length || l < 0 || l >= this.layerBytes.length || this.layerBytes[l]) return Promise.resolve();
    return new Promise((resolve) => {
      const w = this.waiting.get(l) ?? [];
      w.push(resolve);
      this.waiting.set(l, w);
    });
  }

  /** Decodes [l, h0..h0+nh) of a 4-d tensor (L, H, X, Y) as (nh, X, Y). */
  private slice(name: string, l: number, h0: number, nh: number): Tensor {
    const t = this.entries.get(name);
    if (!t) throw new Error(`${name} is not embedded in this view (python: neuron_view() embeds q, k and scores)`);
    const [L, H, X, Y] = t.shape;
    if (l < 0 || l >= L || h0 < 0 || h0 + nh > H) throw new Error(`layer ${l} head ${h0} is not embedded`);
    const per = t.nbytes / (L * H);
    if (t.chunks !== undefined) {
      const b = this.layerBytes[l];
      if (!b) throw new Error(`layer ${l} has not arrived yet`);
      if (t.row_scale) return { name, shape: [nh, X, Y], data: decodeRowScaled(b, H, X, Y, h0, nh) };
      const entry: TensorEntry = { ...t, shape: [nh, X, Y], offset: h0 * per, nbytes: nh * per };
      return { name, shape: entry.shape, data: decodeOne(b, 0, entry) };
    }
    const entry: TensorEntry = { ...t, shape: [nh, X, Y], offset: t.offset + (l * H + h0) * per, nbytes: nh * per };
    return { name, shape: entry.shape, data: decodeOne(this.buf, this.base, entry) };
  }

  override layer(l: number): Promise<LayerAttention> {
    return this.ready(l).then(() => this.layerNow(l));
  }

  private layerNow(l: number): Promise<LayerAttention> {
    try {
      const H = this.run.sizes.heads;
      const t = this.slice('attention', l, 0, H);
      return Promise.resolve({ layer: l, heads: H, T: this.run.sizes.tokens, data: t.data });
    } catch (e) {
      return Promise.reject(e);
    }
  }

  override head(l: number, h: number): Promise<Float32Array> {
    return this.ready(l).then(() => this.headNow(l, h));
  }

  private headNow(l: number, h: number): Promise<Float32Array> {
    try {
      return Promise.resolve(this.slice('attention', l, h, 1).data);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Max pooling as the server's (src/server/maxpool.c): block i covers tokens
   *  [floor(i*T/P), floor((i+1)*T/P)); P = min(n, T). */
  override pooled(n: number): Promise<PooledAttention> {
    const L = this.run.sizes.layers;
    return Promise.all(Array.from({ length: L }, (_, l) => this.ready(l))).then(() => this.pooledNow(n));
  }

  private pooledNow(n: number): Promise<PooledAttention> {
    const hit = this.pooledCache.get(n);
    if (hit) return Promise.resolve(hit);
    const { layers: L, heads: H, tokens: T } = this.run.sizes;
    const P = Math.min(n, T);
    const start = (i: number): number => Math.floor((i * T) / P);
    const out = new Float32Array(L * H * P * P);
    const col = new Float32Array(T);
    try {
      for (let l = 0; l < L; l++) {
        const a = this.slice('attention', l, 0, H).data;
        for (let h = 0; h < H; h++) {
          const m = a.subarray(h * T * T, (h + 1) * T * T);
          const o = out.subarray((l * H + h) * P * P, (l * H + h + 1) * P * P);
          for (let bi = 0; bi < P; bi++) {
            col.fill(-Infinity);
            for (let i = start(bi); i < start(bi + 1); i++)
              for (let j = 0; j < T; j++) if (m[i * T + j] > col[j]) col[j] = m[i * T + j];
            for (let bj = 0; bj < P; bj++) {
              let v = -Infinity;
              for (let j = start(bj); j < start(bj + 1); j++) if (col[j] > v) v = col[j];
              o[bi * P + bj] = v;
            }
          }
        }
      }
    } catch (e) {
      return Promise.reject(e);
    }
    const r: PooledAttention = { pool: P, layers: L, heads: H, T, data: out };
    this.pooledCache.set(n, r);
    return Promise.resolve(r);
  }

  override qk(l: number, h: number): Promise<HeadQk> {
    return this.ready(l).then(() => this.qkNow(l, h));
  }

  private qkNow(l: number, h: number): Promise<HeadQk> {
    try {
      const { tokens: T, d_head: Dh } = this.run.sizes;
      const one = (name: string): Tensor => {
        const t = this.slice(name, l, h, 1);
        return { name, shape: t.shape.slice(1), data: t.data };
      };
      const b = this.meta.qk;
      const meta = {
        run: this.run.id,
        layer: l,
        head: h,
        tokens: T,
        d_head: Dh,
        scale: this.meta.scale[l],
        kv_group: b.kv_group[h] ?? h,
        window: b.window[l] ?? 0,
        rope: b.rope,
        softcap: b.softcap,
      };
      /* a rotary model's q and k before the rotation, when embedded (the server's q_pre_rope, k_pre_rope) */
      const pre = this.entries.has('q_pre_rope') && this.entries.has('k_pre_rope') ? { qPre: one('q_pre_rope'), kPre: one('k_pre_rope') } : {};
      return Promise.resolve({ meta, q: one('q'), k: one('k'), scores: one('scores'), attention: one('attention'), ...pre });
    } catch (e) {
      return Promise.reject(e);
    }
  }
}

/** Takes each layer element of the page (or of the notebook around its frame: dataRoot)
 *  into runs[part] once the parser is past it (it
 *  has a next sibling; the page's last layer element at DOMContentLoaded), as the parser
 *  adds nodes (a MutationObserver: no global, so a page replaced with document.open
 *  starts afresh), freeing the element's text; exposes loadedLayers (layers arrived, all
 *  parts) and allLayersMs (performance.now() when the last arrived) for the bench and
 *  tests. Errors (a damaged element) go to onerror. */
export function watchLayers(runs: EmbeddedRunData[], onerror: (msg: string) => void, page: Document = document): void {
  const { root, doc } = dataRoot(page);
  const w = window as unknown as { __attnscope?: Record<string, unknown> };
  const total = runs.reduce((n, r) => n + r.loaded().length, 0);
  const done = (): number => runs.reduce((n, r) => n + r.loaded().filter(Boolean).length, 0);
  /* a standalone page frees each element's text once taken; a notebook cell's elements
     stay (the frame is reloaded when the notebook moves or re-attaches the cell) */
  const taken = new WeakSet<Element>();
  const take = (all: boolean): void => {
    for (const el of Array.from(root.querySelectorAll('script.attnscope-layer'))) {
      if (taken.has(el) || (!all && !el.nextSibling)) continue; /* the parser may still be inside it */
      const p = Number((el as HTMLElement).dataset.part);
      const l = Number((el as HTMLElement).dataset.layer);
      try {
        if (runs[p]) runs[p].addLayer(l, base64Bytes(el));
      } catch (e) {
        onerror((e as Error).message);
      }
      if (root === doc) el.remove();
      else taken.add(el);
    }
    const n = done();
    (w.__attnscope ??= {}).loadedLayers = n;
    if (n === total && w.__attnscope.allLayersMs === undefined) w.__attnscope.allLayersMs = performance.now();
  };
  (w.__attnscope ??= {}).allLayersMs = undefined;
  if (doc.readyState !== 'loading') return take(true);
  const mo = new MutationObserver(() => take(false));
  mo.observe(root === doc ? doc.body : root, { childList: true, subtree: true });
  doc.addEventListener('DOMContentLoaded', () => {
    mo.disconnect();
    take(true);
  });
  take(false);
}
