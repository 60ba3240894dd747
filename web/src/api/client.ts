// client.ts — typed calls to the attnscope server's /api/v1 routes, with a small
// per-run cache of fetched tensors so switching views does not refetch.
import { apiFetch } from './fetch';
import { decodeTensors, type Tensor } from './tensor';
import type {
  AttentionKind,
  AttentionMeta,
  AttributionMeta,
  AttributionMethod,
  InterveneResponse,
  ErrorResponse,
  LensResponse,
  MapsMeta,
  MapsMethod,
  FaithfulnessResponse,
  MlmRequest,
  MlmResponse,
  ModelsResponse,
  QkMeta,
  RunRequest,
  RunResponse,
  StatsMeta,
  ThumbsMeta,
  TileMeta,
  Token,
} from './types';

const BASE = '/api/v1';

export class ApiError extends Error {
  constructor(
    public status: number,
    message: string,
  ) {
    super(message);
  }
}

/** r itself when it is 2xx; otherwise throws ApiError with the server's one-line
 * `error` message (or the status line when the body is not JSON). */
export async function check(r: Response): Promise<Response> {
  if (r.ok) return r;
  let msg = `${r.status} ${r.statusText}`;
  try {
    const body = (await r.json()) as ErrorResponse;
    if (body && typeof body.error === 'string') msg = body.error;
  } catch {
    /* not JSON: keep the status line */
  }
  throw new ApiError(r.status, msg);
}

/** The request that makes run r again: its ids, or its text and text_b (and an
 *  encoder-decoder run's target, or its decoder input ids). */
export function runInput(r: RunResponse): RunRequest {
  const q: RunRequest = r.ids ? { model: r.model, ids: r.ids } : { model: r.model, text: r.text, text_b: r.text_b };
  if (r.decoder) {
    if (r.decoder.target !== null) q.target = r.decoder.target;
    else q.target_ids = r.decoder.input_ids;
  }
  return q;
}

/** What the views of one attention kind of run r see (GET .../attention?kind=): the run
 *  with that kind's query tokens, layers and block, and its keys' tokens. encoder (and
 *  every single-stack run): the run itself; decoder: the decoder's tokens and causal block;
 *  cross: the decoder's tokens as queries (rows), the encoder's (the source) as keys. */
export function kindRun(r: RunResponse, kind: AttentionKind): { run: RunResponse; keyTokens: Token[] } {
  const d = r.decoder;
  if (kind === 'encoder' || !d) return { run: r, keyTokens: r.tokens };
  const run: RunResponse = { ...r, causal: kind === 'decoder', tokens: d.tokens, block: kind === 'decoder' ? d.block : d.cross_block,
    sizes: { ...r.sizes, tokens: d.tokens.length, layers: d.layers } };
  return { run, keyTokens: kind === 'decoder' ? d.tokens : r.tokens };
}

/** Token ids typed as "1, 5, 9" or "1 5 9" (the input of a model without a tokenizer), or
 *  null when s is not such a list. */
export function parseIds(s: string): number[] | null {
  const parts = s.trim().split(/[\s,]+/).filter((x) => x.length);
  if (!parts.length || !parts.every((x) => /^\d+$/.test(x))) return null;
  return parts.map(Number);
}

export async function getModels(): Promise<ModelsResponse> {
  return (await (await check(await apiFetch(`${BASE}/models`))).json()) as ModelsResponse;
}

export async function postRun(req: RunRequest): Promise<RunResponse> {
  const r = await apiFetch(`${BASE}/run`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(req),
  });
  return (await (await check(r)).json()) as RunResponse;
}

export async function postMlm(req: MlmRequest): Promise<MlmResponse> {
  const r = await apiFetch(`${BASE}/mlm`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(req),
  });
  return (await (await check(r)).json()) as MlmResponse;
}

/** Attention of one layer, all heads: data is (H, T, K), rows = queries, K keys (= T
 *  except cross-attention, whose keys are the source's tokens). */
export interface LayerAttention {
  layer: number;
  heads: number;
  T: number;
  K?: number; // absent: T
  data: Float32Array;
}

/** Every layer and head max-pooled (GET .../attention?pool=N): data is (L, H, P, Pk);
 *  Pk = P except cross-attention (min(N, K)). */
export interface PooledAttention {
  pool: number; // P = min(N, T)
  poolKeys?: number; // Pk = min(N, K); absent: P
  layers: number;
  heads: number;
  T: number;
  K?: number; // absent: T
  data: Float32Array;
}

export interface HeadQk {
  meta: QkMeta;
  q: Tensor; // (T, Dh)
  k: Tensor; // (T, Dh)
  scores: Tensor; // (T, T)
  attention: Tensor; // (T, T)
  /** a rotary model's q and k before the rotation (meta.rope), else absent */
  qPre?: Tensor; // (T, Dh)
  kPre?: Tensor; // (T, Dh)
}

/** An attribution of the run's input (GET .../attribution, docs/attribution.md): data is
 *  (T, T) for rollout, flow and grad (rows = output tokens), (L, H, T, T) for norm, (L, H)
 *  for importance. */
export interface Attribution {
  meta: AttributionMeta;
  shape: number[];
  data: Float32Array;
}

/** An attribution method's maps in the attention route's layout (GET .../maps): data is
 *  (nl, nh, S, S); nh = 1 for per-layer methods, nl = nh = 1 for whole-model ones (meta.per). */
export interface Maps {
  meta: MapsMeta;
  shape: number[];
  data: Float32Array;
}

/** The logit explained by a gradient method: a class or token id at a position (-1: the
 *  server's default, the predicted class or next token). */
export interface Target {
  target: number;
  position: number;
}

/** A block of one head's attention (GET .../tile): rows [r0, r1) × keys [c0, c1) pooled to
 *  pr × pc cells, each the largest (max) and the mean weight of its block; at full
 *  resolution (pr = r1 - r0, pc = c1 - c0) each cell is one weight. */
export interface Tile {
  layer: number;
  head: number;
  r0: number;
  r1: number;
  c0: number;
  c1: number;
  pr: number;
  pc: number;
  exclude: number[];
  max: Float32Array; // (pr, pc)
  mean: Float32Array; // (pr, pc)
}

export interface TileQuery {
  layer: number;
  head: number;
  r0: number; // rows [r0, r1)
  r1: number;
  c0: number; // keys [c0, c1)
  c1: number;
  n: number; // at most n × n cells (1..256)
  exclude: number[]; // keys left out, rows renormalised (the sink: [0])
}

/** The per-head statistics of the forward (GET .../stats): data is (L, H, names.length). */
export interface HeadStats {
  names: string[];
  layers: number;
  heads: number;
  data: Float32Array;
}

/** The query of a Target: nothing for the defaults. */
function targetQuery(tg: Target): string {
  return (tg.target >= 0 ? `&target=${tg.target}` : '') + (tg.position >= 0 ? `&position=${tg.position}` : '');
}

/** Tiles kept per run (the last ones asked for: panning back is free). */
const TILE_CACHE = 48;

/** Fetches and caches a run's tensors; re-posts the run when the server evicted it. */
export class RunData {
  private layers = new Map<number, Promise<LayerAttention>>();
  private qks = new Map<string, Promise<HeadQk>>();
  private pools = new Map<number, Promise<PooledAttention>>();
  private heads = new Map<string, Promise<Float32Array>>();
  private attributions = new Map<string, Promise<Attribution>>();
  private mapsCache = new Map<string, Promise<Maps>>();
  private tiles = new Map<string, Promise<Tile>>();
  private statsP: Promise<HeadStats> | null = null;
  private thumbsP: Promise<PooledAttention & { stats: HeadStats }> | null = null;
  private faithP: Promise<FaithfulnessResponse> | null = null;
  bytesFetched = 0;
  /** the attention kind this RunData serves (encoder-decoder runs; 'encoder' otherwise) */
  kind: AttentionKind = 'encoder';
  /** the keys' tokens: run.tokens, except cross-attention's (the source's) */
  keyTokens: Token[];
  /** the run as posted (run is its kind's view, kindRun) */
  root: RunResponse;
  private kinds = new Map<AttentionKind, RunData>();

  constructor(
    public run: RunResponse,
    private dtype: 'u8' | 'f16' | 'f32' = 'f16',
  ) {
    this.root = run;
    this.keyTokens = run.tokens;
  }

  /** The RunData of one attention kind of this run (kept: its tensors stay cached); this
   *  one for 'encoder' and for runs that are not encoder-decoder. */
  forKind(kind: AttentionKind): RunData {
    if (kind === this.kind || !this.root.decoder) return this;
    let d = this.kinds.get(kind);
    if (!d) {
      const v = kindRun(this.root, kind);
      d = new RunData(v.run, this.dtype);
      d.root = this.root;
      d.kind = kind;
      d.keyTokens = v.keyTokens;
      d.kinds = this.kinds;
      this.kinds.set(this.kind, this);
      this.kinds.set(kind, d);
    }
    return d;
  }

  /** Keys per attention row: the source's tokens in cross-attention, else T. */
  get K(): number {
    return this.keyTokens.length;
  }

  private async fetchBinary(path: string): Promise<ArrayBuffer> {
    const q = this.kind === 'encoder' ? path : `${path}${path.includes('?') ? '&' : '?'}kind=${this.kind}`;
    let r = await apiFetch(`${BASE}/runs/${this.run.id}/${q}`);
    if (r.status === 404) {
      /* evicted from the server's run cache: made again (an imported sentence from its database) */
      const src = this.root.source;
      this.root =
        src?.layout === 'import' && src.db_run !== undefined
          ? ((await (await check(await apiFetch(`${BASE}/db/runs/${src.db_run}/sentences/${src.sent ?? 0}/run`))).json()) as RunResponse)
          : await postRun(runInput(this.root));
      this.run = { ...kindRun(this.root, this.kind).run };
      r = await apiFetch(`${BASE}/runs/${this.run.id}/${q}`);
    }
    const buf = await (await check(r)).arrayBuffer();
    this.bytesFetched += buf.byteLength;
    return buf;
  }

  layer(l: number): Promise<LayerAttention> {
    let p = this.layers.get(l);
    if (!p) {
      const H = this.run.sizes.heads;
      p = this.fetchBinary(`attention?layers=${l}&heads=0-${H - 1}&dtype=${this.dtype}`).then((buf) => {
        const d = decodeTensors<AttentionMeta>(buf);
        const t = d.tensors.get('attention');
        if (!t) throw new Error('attention response without an attention tensor');
        return { layer: l, heads: t.shape[1], T: t.shape[2], K: t.shape[3], data: t.data };
      });
      p.catch(() => this.layers.delete(l));
      this.layers.set(l, p);
    }
    return p;
  }

  /** All layers and heads max-pooled to at most n × n: one request for the model view's
   *  thumbnails (12 × 12 heads at n = 64: 1.2 MB). f16, not u8: u8 steps of 1/255 tie the
   *  near-uniform rows of diffuse heads (weights ~1/T), and lines mode's argmax would then
   *  point at the first block instead of the strongest key. */
  pooled(n: number): Promise<PooledAttention> {
    let p = this.pools.get(n);
    if (!p) {
      p = this.fetchBinary(`attention?pool=${n}&dtype=f16`).then((buf) => {
        const d = decodeTensors<AttentionMeta>(buf);
        const t = d.tensors.get('attention');
        if (!t || d.header.meta.pool === undefined) throw new Error('pooled attention response without pool');
        const m = d.header.meta;
        return { pool: t.shape[2], poolKeys: t.shape[3], layers: t.shape[0], heads: t.shape[1], T: m.tokens, K: m.keys ?? m.tokens, data: t.data };
      });
      p.catch(() => this.pools.delete(n));
      this.pools.set(n, p);
    }
    return p;
  }

  /** The full (T, K) attention of one head: taken from the layer when that layer was
   *  already fetched (head view), else fetched alone. */
  head(l: number, h: number): Promise<Float32Array> {
    const key = `${l}/${h}`;
    let p = this.heads.get(key);
    if (!p) {
      const layer = this.layers.get(l);
      const TK = this.run.sizes.tokens * this.K;
      p = layer
        ? layer.then((a) => a.data.subarray(h * TK, (h + 1) * TK))
        : this.fetchBinary(`attention?layers=${l}&heads=${h}&dtype=${this.dtype}`).then((buf) => {
            const t = decodeTensors<AttentionMeta>(buf).tensors.get('attention');
            if (!t) throw new Error('attention response without an attention tensor');
            return t.data;
          });
      p.catch(() => this.heads.delete(key));
      this.heads.set(key, p);
    }
    return p;
  }

  /** One attribution method of the run's input, f32, explaining tg's logit (default: the
   *  predicted class or next token). */
  attribution(method: AttributionMethod, tg: Target = { target: -1, position: -1 }): Promise<Attribution> {
    const path = `attribution?method=${method}&dtype=f32${targetQuery(tg)}`;
    let p = this.attributions.get(path);
    if (!p) {
      p = this.fetchBinary(path).then((buf) => {
        const d = decodeTensors<AttributionMeta>(buf);
        const t = d.tensors.get('attribution');
        if (!t) throw new Error('attribution response without an attribution tensor');
        return { meta: d.header.meta, shape: t.shape, data: t.data };
      });
      p.catch(() => this.attributions.delete(path));
      this.attributions.set(path, p);
    }
    return p;
  }

  /** An attribution method's maps (GET .../maps): layers / heads ranges ("a" or "a-b"; all
   *  when absent), max-pooled to at most pool × pool when given; f32 unless dtype says. */
  maps(method: MapsMethod, q: { layers?: string; heads?: string; pool?: number; dtype?: 'f32' | 'f16'; tg?: Target } = {}): Promise<Maps> {
    const path = `maps?method=${method}&dtype=${q.dtype ?? 'f32'}` + (q.layers !== undefined ? `&layers=${q.layers}` : '') +
      (q.heads !== undefined ? `&heads=${q.heads}` : '') + (q.pool ? `&pool=${q.pool}` : '') + (q.tg ? targetQuery(q.tg) : '');
    let p = this.mapsCache.get(path);
    if (!p) {
      p = this.fetchBinary(path).then((buf) => {
        const d = decodeTensors<MapsMeta>(buf);
        const t = d.tensors.get('maps');
        if (!t) throw new Error('maps response without a maps tensor');
        return { meta: d.header.meta, shape: t.shape, data: t.data };
      });
      p.catch(() => this.mapsCache.delete(path));
      this.mapsCache.set(path, p);
    }
    return p;
  }

  /** The logit lens at position (-1: the last token): each layer's top tokens (GET .../lens). */
  async lens(position: number, top: number): Promise<LensResponse> {
    const buf = await this.fetchBinary(`lens?top=${top}${position >= 0 ? `&position=${position}` : ''}`);
    return JSON.parse(new TextDecoder().decode(buf)) as LensResponse;
  }

  /** The output with heads ablated and / or attention edges knocked out beside the original
   *  (GET .../intervene; not cached: every intervention is new). */
  async intervene(q: { heads: string; knockout: string; mode: 'zero' | 'mean'; renorm: boolean }): Promise<InterveneResponse> {
    const p = new URLSearchParams();
    if (q.heads) p.set('heads', q.heads);
    if (q.knockout) p.set('knockout', q.knockout);
    p.set('mode', q.mode);
    p.set('renorm', q.renorm ? '1' : '0');
    const buf = await this.fetchBinary(`intervene?${p.toString()}`);
    return JSON.parse(new TextDecoder().decode(buf)) as InterveneResponse;
  }

  /** How faithful each per-token attribution method is on the run's input (GET
   *  .../faithfulness, docs/attribution.md "Faithfulness"): every method, fetched once. */
  faithfulness(): Promise<FaithfulnessResponse> {
    if (!this.faithP) {
      this.faithP = this.fetchBinary('faithfulness').then((buf) => JSON.parse(new TextDecoder().decode(buf)) as FaithfulnessResponse);
      this.faithP.catch(() => (this.faithP = null));
    }
    return this.faithP;
  }

  /** Whether the run kept no T × T attention (a long input): only tiles and stats serve it. */
  get isLong(): boolean {
    return this.run.capture === 'stats,qkv';
  }

  /** A pooled block of one head's attention, f32; the last TILE_CACHE are kept. */
  tile(q: TileQuery): Promise<Tile> {
    const path = `tile?layer=${q.layer}&head=${q.head}&rows=${q.r0}-${q.r1 - 1}&cols=${q.c0}-${q.c1 - 1}&n=${q.n}` +
      (q.exclude.length ? `&exclude=${q.exclude.join(',')}` : '');
    let p = this.tiles.get(path);
    if (p) {
      this.tiles.delete(path); /* most recent last */
      this.tiles.set(path, p);
      return p;
    }
    p = this.fetchBinary(path).then((buf) => {
      const d = decodeTensors<TileMeta>(buf);
      const mx = d.tensors.get('max'), mean = d.tensors.get('mean'), m = d.header.meta;
      if (!mx || !mean) throw new Error('tile response without max and mean');
      return { layer: m.layer, head: m.head, r0: m.rows[0], r1: m.rows[1] + 1, c0: m.cols[0], c1: m.cols[1] + 1,
        pr: m.pool[0], pc: m.pool[1], exclude: m.exclude, max: mx.data, mean: mean.data };
    });
    p.catch(() => this.tiles.delete(path));
    this.tiles.set(path, p);
    while (this.tiles.size > TILE_CACHE) this.tiles.delete(this.tiles.keys().next().value as string);
    return p;
  }

  /** Every head's statistics (entropy, sink mass, ...), computed in the forward. */
  stats(): Promise<HeadStats> {
    if (!this.statsP) {
      const p = this.fetchBinary('stats').then((buf) => {
        const d = decodeTensors<StatsMeta>(buf);
        const t = d.tensors.get('head_stats');
        if (!t) throw new Error('stats response without head_stats');
        return { names: d.header.meta.stats, layers: t.shape[0], heads: t.shape[1], data: t.data };
      });
      p.catch(() => (this.statsP = null));
      this.statsP = p;
    }
    return this.statsP;
  }

  /** The model view of a long run in one request (GET .../thumbs?op=max): every head's
   *  thumbnail the forward max-pooled to (P, P), P = min(64, T), with the statistics. f16,
   *  as pooled(). */
  thumbs(): Promise<PooledAttention & { stats: HeadStats }> {
    if (!this.thumbsP) {
      const p = this.fetchBinary('thumbs?op=max&dtype=f16').then((buf) => {
        const d = decodeTensors<ThumbsMeta>(buf);
        const mx = d.tensors.get('max'), st = d.tensors.get('head_stats'), m = d.header.meta;
        if (!mx || !st) throw new Error('thumbs response without max and head_stats');
        const stats = { names: m.stats, layers: st.shape[0], heads: st.shape[1], data: st.data };
        return { pool: m.pool, layers: mx.shape[0], heads: mx.shape[1], T: m.tokens, data: mx.data, stats };
      });
      p.catch(() => (this.thumbsP = null));
      this.thumbsP = p;
    }
    return this.thumbsP;
  }

  qk(l: number, h: number): Promise<HeadQk> {
    const key = `${l}/${h}`;
    let p = this.qks.get(key);
    if (!p) {
      p = this.fetchBinary(`qk?layer=${l}&head=${h}`).then((buf) => {
        const d = decodeTensors<QkMeta>(buf);
        const get = (n: string): Tensor => {
          const t = d.tensors.get(n);
          if (!t) throw new Error(`qk response without ${n}`);
          return t;
        };
        const pre = d.tensors.get('q_pre_rope') && d.tensors.get('k_pre_rope') ? { qPre: get('q_pre_rope'), kPre: get('k_pre_rope') } : {};
        return { meta: d.header.meta, q: get('q'), k: get('k'), scores: get('scores'), attention: get('attention'), ...pre };
      });
      p.catch(() => this.qks.delete(key));
      this.qks.set(key, p);
    }
    return p;
  }
}
