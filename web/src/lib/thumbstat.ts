// thumbstat.ts — the model view's colouring by a head statistic instead of the attention
// thumbnail: the statistics offered (entropy, sink mass, mean attention distance: the
// forward's means over query rows, GET .../stats or .../thumbs), each head's value and its
// fill in [0, 1] on the heat scale: the value divided by the largest over the model's heads
// (0 stays white; the view prints the range), so the heads compare within the run. No
// drawing.
import type { HeadStats } from '../api/client';

export type ThumbColour = 'attention' | 'entropy' | 'sink' | 'dist';
export const THUMB_COLOURS: readonly ThumbColour[] = ['attention', 'entropy', 'sink', 'dist'];

export interface StatFill {
  name: Exclude<ThumbColour, 'attention'>;
  /** the head's statistic */
  value: (layer: number, head: number) => number;
  /** its fill in [0, 1] */
  fill: (layer: number, head: number) => number;
  /** the smallest and largest over the heads */
  lo: number;
  hi: number;
}

/** The colouring by statistic c of stats, or null when the statistics lack it. */
export function statFill(stats: HeadStats, c: Exclude<ThumbColour, 'attention'>): StatFill | null {
  const k = stats.names.indexOf(c);
  if (k < 0) return null;
  const n = stats.names.length;
  const value = (l: number, h: number): number => stats.data[(l * stats.heads + h) * n + k];
  let lo = Infinity;
  let hi = -Infinity;
  for (let l = 0; l < stats.layers; l++)
    for (let h = 0; h < stats.heads; h++) {
      lo = Math.min(lo, value(l, h));
      hi = Math.max(hi, value(l, h));
    }
  const top = hi > 0 ? hi : 1;
  return { name: c, value, fill: (l, h) => Math.max(0, Math.min(1, value(l, h) / top)), lo, hi };
}
