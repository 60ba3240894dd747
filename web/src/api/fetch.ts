// fetch.ts — the one fetch every API call goes through: a request the server turns away
// for load (503 "too many concurrent runs" / "responses in progress", 429 "tiles are
// computing", each with Retry-After) is sent again after the delay the server names, until
// RETRY_BUDGET_MS have passed; then the last reply is returned for the caller's check().
// The views fire several requests at once (a map's pooled thumbnails, its scale and the
// head opened large), more than the server admits at a time on a small machine. A request
// refused that way did no work, so repeating it is safe for GET and POST alike. Nothing
// else is retried: network errors and other statuses reach the caller unchanged.

/** Longest a refused request keeps being retried. */
export const RETRY_BUDGET_MS = 30_000;
/** Bounds on one wait: Retry-After is in whole seconds (at least 1 from attnscope). */
const MIN_WAIT_MS = 100;
const MAX_WAIT_MS = 5_000;

/** How long to wait before retrying r, or -1 when r is not a load refusal. */
function retryDelay(r: Response): number {
  if (r.status !== 503 && r.status !== 429) return -1;
  const s = Number(r.headers.get('Retry-After') ?? '1');
  const ms = Number.isFinite(s) ? s * 1000 : 1000;
  return Math.min(MAX_WAIT_MS, Math.max(MIN_WAIT_MS, ms));
}

/** Resolves after ms, or rejects with the signal's reason when it aborts first. */
function sleep(ms: number, signal?: AbortSignal | null): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const id = setTimeout(() => {
      signal?.removeEventListener('abort', stop);
      resolve();
    }, ms);
    const stop = (): void => {
      clearTimeout(id);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', stop, { once: true });
  });
}

/** fetch(url, init), retried while the server answers 503 / 429 within RETRY_BUDGET_MS
 *  (init's body must be a string or absent: it is sent again). */
export async function apiFetch(url: string, init?: RequestInit): Promise<Response> {
  const t0 = Date.now();
  for (;;) {
    const r = await fetch(url, init);
    const wait = retryDelay(r);
    if (wait < 0 || Date.now() - t0 + wait > RETRY_BUDGET_MS) return r;
    await r.body?.cancel();
    await sleep(wait, init?.signal);
  }
}
