// history.ts — writes the explorer's URL state into the browser history so Back and
// Forward walk it: a change the user makes (tab, layer, head, heads, pinned token, run
// input, sentence, analysis run) adds an entry; an automatic change (defaults filled in
// on load, values clamped to a model's size) replaces the current one. Reading the state
// back on popstate is the caller's job (readUrlState).

export type HistoryMode = 'push' | 'replace';

let replaceNext = false;

/** The next URL change replaces the current entry instead of adding one (for automatic changes). */
export function replaceNextUrl(): void {
  replaceNext = true;
}

/**
 * Writes `search` (a "?..." query string) to the location. Adds a history entry with mode
 * 'push' unless replaceNextUrl() was called since the last write; 'replace' never adds one.
 * Returns what was done, or null when the location already holds `search`.
 */
export function writeHistory(search: string, mode: HistoryMode): HistoryMode | null {
  const m: HistoryMode = replaceNext ? 'replace' : mode;
  replaceNext = false;
  if (search === window.location.search) return null;
  if (m === 'push') history.pushState(null, '', search);
  else history.replaceState(null, '', search);
  return m;
}
