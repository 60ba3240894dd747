// shapes.ts — access to the Painter's circle and polyline (both built-in painters have
// them; painter wrappers may not), and curve sampling for arcs. No D3, no DOM.
import type { Painter } from './painter';

export interface Shapes {
  circle(x: number, y: number, r: number, fill: string, alpha?: number, stroke?: string): void;
  polyline(pts: ArrayLike<number>, color: string, alpha: number, width: number): void;
}

/** The painter's shape methods; falls back to squares / segments for wrappers without them. */
export function shapes(p: Painter): Shapes {
  return {
    circle: (x, y, r, fill, alpha = 1, stroke) => {
      if (p.circle) p.circle(x, y, r, fill, alpha, stroke);
      else p.rect(x - r, y - r, 2 * r, 2 * r, fill, alpha);
    },
    polyline: (pts, color, alpha, width) => {
      if (p.polyline) return p.polyline(pts, color, alpha, width);
      const n = pts.length / 2 - 1;
      const seg = new Float32Array(4 * Math.max(0, n));
      for (let i = 0; i < n; i++) seg.set([pts[2 * i], pts[2 * i + 1], pts[2 * i + 2], pts[2 * i + 3]], 4 * i);
      p.lines(seg, n, color, alpha, width);
    },
  };
}

/** Points of a quadratic Bezier from (x1, y1) to (x2, y2) through control (cx, cy). */
export function quadPoints(x1: number, y1: number, cx: number, cy: number, x2: number, y2: number, n = 20): Float32Array {
  const out = new Float32Array(2 * (n + 1));
  for (let i = 0; i <= n; i++) {
    const t = i / n;
    const u = 1 - t;
    out[2 * i] = u * u * x1 + 2 * u * t * cx + t * t * x2;
    out[2 * i + 1] = u * u * y1 + 2 * u * t * cy + t * t * y2;
  }
  return out;
}
