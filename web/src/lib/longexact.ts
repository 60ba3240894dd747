// longexact.ts — the exact weight of the (query, key) under the long map's pointer when a
// pixel covers many cells. One request fetches a segment of the query's row: EXACT_KEYS
// keys around the key, at full resolution (GET .../tile?rows=q-q&cols=a-b&n=b-a+1, one
// softmax row recomputed from the run's q and k, O(T · Dh), with the same exclude list
// as the map so the sink-excluded renormalisation holds), so moving along the row is
// answered from the segments kept here. A request is sent at once; asking for another
// segment aborts the one in flight (only the latest cell under the pointer matters).
// It does not draw, and does not serve the full-resolution case (the map's tile is
// then the weights themselves).
import { check, type RunData } from '../api/client';
import { apiFetch } from '../api/fetch';
import { decodeTensors } from '../api/tensor';
import type { TileMeta } from '../api/types';

/** Keys per fetched row segment (the tile route's largest n: one cell per key). */
export const EXACT_KEYS = 256;
/** Row segments kept (each EXACT_KEYS floats: 512 KiB in all). */
const SEGMENTS = 512;

/** One cell of one head, with the keys left out of its row (the map's exclude list). */
export interface ExactCell {
  layer: number;
  head: number;
  query: number;
  key: number;
  exclude: number[];
}

/** The segment [c0, c1) of EXACT_KEYS keys holding key, aligned to EXACT_KEYS, of K keys. */
export function segmentOf(key: number, K: number): [number, number] {
  const c0 = Math.floor(key / EXACT_KEYS) * EXACT_KEYS;
  return [c0, Math.min(K, c0 + EXACT_KEYS)];
}

/** The exact weights of one long run's cells, fetched per row segment and kept (LRU). */
export class ExactRows {
  private segs = new Map<string, Float32Array>();
  private flying: { id: string; ctl: AbortController; p: Promise<Float32Array | null> } | null = null;

  constructor(
    private data: RunData,
    private K: number,
  ) {}

  private id(c: ExactCell): string {
    return `${c.layer}/${c.head}/${c.exclude.join(',')}/${c.query}/${segmentOf(c.key, this.K)[0]}`;
  }

  /** c's weight when its segment is kept, else undefined. */
  lookup(c: ExactCell): number | undefined {
    const s = this.segs.get(this.id(c));
    return s ? s[c.key - segmentOf(c.key, this.K)[0]] : undefined;
  }

  /** c's weight: its segment fetched now (or the same request already in flight); null
   *  when a later call aborted it. Another segment in flight is aborted. */
  async fetch(c: ExactCell): Promise<number | null> {
    const id = this.id(c), [c0] = segmentOf(c.key, this.K);
    const kept = this.segs.get(id);
    if (kept) return kept[c.key - c0];
    if (!this.flying || this.flying.id !== id) {
      this.flying?.ctl.abort();
      const ctl = new AbortController();
      this.flying = { id, ctl, p: this.segment(c, ctl.signal) };
    }
    const mine = this.flying;
    const s = await mine.p.finally(() => {
      if (this.flying === mine) this.flying = null;
    });
    return s ? s[c.key - c0] : null;
  }

  /** Fetches c's row segment (null when aborted) and keeps it. */
  private async segment(c: ExactCell, signal: AbortSignal): Promise<Float32Array | null> {
    const [c0, c1] = segmentOf(c.key, this.K);
    const path = `tile?layer=${c.layer}&head=${c.head}&rows=${c.query}-${c.query}&cols=${c0}-${c1 - 1}&n=${c1 - c0}` +
      (c.exclude.length ? `&exclude=${c.exclude.join(',')}` : '');
    try {
      const r = await apiFetch(`/api/v1/runs/${this.data.run.id}/${path}`, { signal });
      /* evicted from the server's run cache: RunData's tile makes the run again */
      const mx =
        r.status === 404
          ? (await this.data.tile({ layer: c.layer, head: c.head, r0: c.query, r1: c.query + 1, c0, c1, n: c1 - c0, exclude: c.exclude })).max
          : decodeTensors<TileMeta>(await (await check(r)).arrayBuffer()).tensors.get('max')?.data;
      if (!mx || mx.length !== c1 - c0) throw new Error('tile response without its row segment');
      this.segs.set(this.id(c), mx);
      while (this.segs.size > SEGMENTS) this.segs.delete(this.segs.keys().next().value as string);
      return mx;
    } catch (e) {
      if (signal.aborted) return null;
      throw e;
    }
  }
}
