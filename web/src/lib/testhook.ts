// testhook.ts — exposes a view's computed data (not its pixels) on window.__attnscope so
// the browser tests can assert on it, e.g. the head view's link list. Read-only by
// convention; nothing in the app reads it back.

type Hooks = Record<string, unknown>;

export function expose(key: string, value: unknown): void {
  const w = window as unknown as { __attnscope?: Hooks };
  (w.__attnscope ??= {})[key] = value;
}
