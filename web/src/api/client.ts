// client.ts — typed calls to the attnscope server's /api/v1 routes, with a small
// per-run cache of fetched tensors so switching views does not refetch.
import { decodeTensors, type Tensor } from './tensor';
import type {
  AttentionMeta,
  AttributionMeta,
  AttributionMethod,
  ErrorResponse,
  MlmRequest,
  MlmResponse,
  ModelsResponse,
  QkMeta,
  RunRequest,
  RunResponse,
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

/** The request that makes run r again: its ids, or its text and text_b. */
export function runInput(r: RunResponse): RunRequest {
  return r.ids ? { model: r.model, ids: r.ids } : { model: r.model, text: r.text, text_b: r.text_b };
}

/** Token ids typed as "1, 5, 9" or "1 5 9" (the input of a model without a tokenizer), or
 *  null when s is not such a list. */
export function parseIds(s: string): number[] | null {
  const parts = s.trim().split(/[\s,]+/).filter((x) => x.length);
  if (!parts.length || !parts.every((x) => /^\d+$/.test(x))) return null;
  return parts.map(Number);
}

export async function getModels(): Promise<ModelsResponse> {
  return (await (await check(await fetch(`${BASE}/models`))).json()) as ModelsResponse;
}

export async function postRun(req: RunRequest): Promise<RunResponse> {
  const r = await fetch(`${BASE}/run`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(req),
  });
  return (await (await check(r)).json()) as RunResponse;
}

export async function postMlm(req: MlmRequest): Promise<MlmResponse> {
  const r = await fetch(`${BASE}/mlm`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify(req),
  });
  return (await (await check(r)).json()) as MlmResponse;
}

/** Attention of one layer, all heads: data is (H, T, T), rows = queries. */
export interface LayerAttention {
  layer: number;
  heads: number;
  T: number;
  data: Float32Array;
}

/** Every layer and head max-pooled (GET .../attention?pool=N): data is (L, H, P, P). */
export interface PooledAttention {
  pool: number; // P = min(N, T)
  layers: number;
  heads: number;
  T: number;
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

/** Fetches and caches a run's tensors; re-posts the run when the server evicted it. */
export class RunData {
  private layers = new Map<number, Promise<LayerAttention>>();
  private qks = new Map<string, Promise<HeadQk>>();
  private pools = new Map<number, Promise<PooledAttention>>();
  private heads = new Map<string, Promise<Float32Array>>();
  private attributions = new Map<AttributionMethod, Promise<Attribution>>();
  bytesFetched = 0;

  constructor(
    public run: RunResponse,
    private dtype: 'u8' | 'f16' | 'f32' = 'f16',
  ) {}

  private async fetchBinary(path: string): Promise<ArrayBuffer> {
    let r = await fetch(`${BASE}/runs/${this.run.id}/${path}`);
    if (r.status === 404) {
      this.run = await postRun(runInput(this.run));
      r = await fetch(`${BASE}/runs/${this.run.id}/${path}`);
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
        return { layer: l, heads: t.shape[1], T: t.shape[2], data: t.data };
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
        return { pool: t.shape[2], layers: t.shape[0], heads: t.shape[1], T: d.header.meta.tokens, data: t.data };
      });
      p.catch(() => this.pools.delete(n));
      this.pools.set(n, p);
    }
    return p;
  }

  /** The full (T, T) attention of one head: taken from the layer when that layer was
   *  already fetched (head view), else fetched alone. */
  head(l: number, h: number): Promise<Float32Array> {
    const key = `${l}/${h}`;
    let p = this.heads.get(key);
    if (!p) {
      const layer = this.layers.get(l);
      const T = this.run.sizes.tokens;
      p = layer
        ? layer.then((a) => a.data.subarray(h * T * T, (h + 1) * T * T))
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

  /** One attribution method of the run's input, f32, the logit explained by default (the
   *  predicted class or next token). */
  attribution(method: AttributionMethod): Promise<Attribution> {
    let p = this.attributions.get(method);
    if (!p) {
      p = this.fetchBinary(`attribution?method=${method}&dtype=f32`).then((buf) => {
        const d = decodeTensors<AttributionMeta>(buf);
        const t = d.tensors.get('attribution');
        if (!t) throw new Error('attribution response without an attribution tensor');
        return { meta: d.header.meta, shape: t.shape, data: t.data };
      });
      p.catch(() => this.attributions.delete(method));
      this.attributions.set(method, p);
    }
    return p;
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
