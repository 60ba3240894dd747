// sparkline.ts — the points of a small line chart of values in a fixed range (the
// faithfulness panel's deletion curves: probabilities in [0, 1]), as an SVG polyline's
// `points` attribute. It draws nothing itself and knows nothing about the data's meaning.

export interface SparklineOptions {
  /** the values, left to right (at least one) */
  values: readonly number[];
  width: number;
  height: number;
  /** the value at the bottom edge (default 0) */
  lo?: number;
  /** the value at the top edge (default 1) */
  hi?: number;
  /** blank margin inside each edge, in pixels (default 1) */
  pad?: number;
}

/** "x,y x,y ..." with x spread evenly over the width and y = hi at the top; values outside
 *  [lo, hi] are clamped, a single value is a flat line across. */
export function sparklinePoints(o: SparklineOptions): string {
  const lo = o.lo ?? 0, hi = o.hi ?? 1, pad = o.pad ?? 1;
  const n = o.values.length;
  const w = Math.max(0, o.width - 2 * pad), h = Math.max(0, o.height - 2 * pad);
  const y = (v: number) => {
    const f = hi > lo ? (Math.min(hi, Math.max(lo, v)) - lo) / (hi - lo) : 0;
    return (pad + (1 - f) * h).toFixed(2);
  };
  if (n === 1) return `${pad},${y(o.values[0])} ${pad + w},${y(o.values[0])}`;
  return o.values.map((v, i) => `${(pad + (i * w) / (n - 1)).toFixed(2)},${y(v)}`).join(' ');
}
