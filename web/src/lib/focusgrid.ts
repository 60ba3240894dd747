// focusgrid.ts — keyboard navigation among the items of a canvas view (heads, tokens,
// glyphs, graph nodes) that components/FocusGrid.svelte lays over the canvas as
// focusable buttons. An item has a box in canvas CSS pixels, a grid position (row, col)
// and the label a screen reader reads. No DOM.

export interface FocusItem {
  x: number;
  y: number;
  w: number;
  h: number;
  row: number;
  col: number;
  /** what a screen reader says for this item, e.g. "layer 2 head 3" */
  label: string;
}

export interface MoveOptions {
  items: FocusItem[];
  /** index of the focused item */
  from: number;
  /** KeyboardEvent.key */
  key: string;
  /** true: the items are one list in index order (every arrow key moves to the previous or next) */
  list?: boolean;
}

/**
 * Index of the item `key` moves the focus to, or -1 when the key is not a move (or there
 * is nothing in that direction). Grid: Left/Right stay in the row, Up/Down go to the
 * nearest row above/below and the item of that row nearest in column; Home/End go to the
 * first/last item.
 */
export function moveFocus(o: MoveOptions): number {
  const { items, from, key } = o;
  const n = items.length;
  if (!n || from < 0 || from >= n) return -1;
  if (key === 'Home') return 0;
  if (key === 'End') return n - 1;
  if (o.list) {
    if (key === 'ArrowRight' || key === 'ArrowDown') return from + 1 < n ? from + 1 : -1;
    if (key === 'ArrowLeft' || key === 'ArrowUp') return from > 0 ? from - 1 : -1;
    return -1;
  }
  const a = items[from];
  let best = -1;
  let bestCost = Infinity;
  items.forEach((b, i) => {
    let cost = Infinity;
    if (key === 'ArrowRight' && b.row === a.row && b.col > a.col) cost = b.col - a.col;
    else if (key === 'ArrowLeft' && b.row === a.row && b.col < a.col) cost = a.col - b.col;
    else if (key === 'ArrowDown' && b.row > a.row) cost = (b.row - a.row) * 1e6 + Math.abs(b.col - a.col);
    else if (key === 'ArrowUp' && b.row < a.row) cost = (a.row - b.row) * 1e6 + Math.abs(b.col - a.col);
    if (cost < bestCost) {
      bestCost = cost;
      best = i;
    }
  });
  return best;
}
