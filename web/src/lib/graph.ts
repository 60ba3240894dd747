// graph.ts — Dodrio's semantic attention graph: a sentence's tokens as nodes, sized and
// coloured by gradient saliency for one class, and one head's attention links above a
// threshold as edges (query -> key, opacity and width by weight). Three layouts:
// force-directed (d3-force: links pull by weight, nodes repel and do not overlap),
// radial (tokens in order on a circle) and grid (rows in reading order). Drawing goes
// through a Painter.
import { forceCenter, forceCollide, forceLink, forceManyBody, forceSimulation, type SimulationNodeDatum } from 'd3-force';
import { scaleLinear, scaleSqrt } from 'd3-scale';
import type { Painter } from './painter';
import { shapes } from './shapes';

export type GraphLayoutKind = 'force' | 'radial' | 'grid';

export interface GraphEdge {
  source: number; // query token
  target: number; // key token
  weight: number;
}

/** Edges of a (T, T) attention matrix above threshold, self links left out. */
export function graphEdges(att: Float32Array, T: number, threshold: number): GraphEdge[] {
  const out: GraphEdge[] = [];
  for (let i = 0; i < T; i++)
    for (let j = 0; j < T; j++) {
      const w = att[i * T + j];
      if (i !== j && w >= threshold) out.push({ source: i, target: j, weight: w });
    }
  return out;
}

export interface GraphLayoutOptions {
  kind: GraphLayoutKind;
  T: number;
  edges: GraphEdge[];
  width: number;
  height: number;
}

interface Node extends SimulationNodeDatum {
  i: number;
}

/** Positions (x, y) of every token, inside [0, width] x [0, height]. */
export function graphLayout(o: GraphLayoutOptions): Float32Array {
  const pos = new Float32Array(2 * o.T);
  const cx = o.width / 2;
  const cy = o.height / 2;
  if (o.kind === 'radial') {
    const r = Math.min(o.width, o.height) / 2 - 60;
    for (let i = 0; i < o.T; i++) {
      const a = -Math.PI / 2 + (2 * Math.PI * i) / o.T;
      pos[2 * i] = cx + r * Math.cos(a);
      pos[2 * i + 1] = cy + r * Math.sin(a);
    }
  } else if (o.kind === 'grid') {
    const cols = Math.ceil(Math.sqrt(o.T * (o.width / o.height)));
    const rows = Math.ceil(o.T / cols);
    for (let i = 0; i < o.T; i++) {
      pos[2 * i] = 50 + ((i % cols) + 0.5) * ((o.width - 100) / cols);
      pos[2 * i + 1] = 40 + (Math.floor(i / cols) + 0.5) * ((o.height - 80) / rows);
    }
  } else {
    const nodes: Node[] = Array.from({ length: o.T }, (_, i) => ({ i }));
    const links = o.edges.map((e) => ({ source: e.source, target: e.target, weight: e.weight }));
    const sim = forceSimulation(nodes)
      .force('link', forceLink(links).distance(60).strength((l) => 0.05 + 0.9 * (l as { weight: number }).weight))
      .force('charge', forceManyBody().strength(-120))
      .force('collide', forceCollide(18))
      .force('center', forceCenter(cx, cy))
      .stop();
    for (let k = 0; k < 300; k++) sim.tick();
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    for (const n of nodes) {
      x0 = Math.min(x0, n.x ?? 0); x1 = Math.max(x1, n.x ?? 0);
      y0 = Math.min(y0, n.y ?? 0); y1 = Math.max(y1, n.y ?? 0);
    }
    const sx = scaleLinear().domain([x0, x1 > x0 ? x1 : x0 + 1]).range([50, o.width - 50]);
    const sy = scaleLinear().domain([y0, y1 > y0 ? y1 : y0 + 1]).range([40, o.height - 40]);
    nodes.forEach((n) => {
      pos[2 * n.i] = sx(n.x ?? 0);
      pos[2 * n.i + 1] = sy(n.y ?? 0);
    });
  }
  return pos;
}

/** A hue per class (class 0 red, 1 blue, then others). */
export function classHue(c: number): number {
  return [0, 215, 130, 40, 280][c % 5];
}

export interface GraphDrawOptions {
  labels: string[];
  pos: Float32Array;
  edges: GraphEdge[];
  /** (T) saliency of the chosen class, or null */
  saliency: number[] | null;
  cls: number;
  width: number;
  height: number;
  title?: string;
}

export function drawGraph(p: Painter, o: GraphDrawOptions): void {
  const sp = shapes(p);
  if (o.title) p.text(10, 12, o.title, { size: 12, weight: 'bold' });
  const seg = new Float32Array(4);
  for (const e of o.edges) {
    seg[0] = o.pos[2 * e.source];
    seg[1] = o.pos[2 * e.source + 1];
    seg[2] = o.pos[2 * e.target];
    seg[3] = o.pos[2 * e.target + 1];
    p.lines(seg, 1, '#444', Math.min(1, 0.15 + e.weight), 0.5 + 3 * e.weight);
  }
  const sal = o.saliency;
  const smax = sal ? Math.max(1e-12, ...sal.map(Math.abs)) : 1;
  const rad = scaleSqrt().domain([0, smax]).range([5, 18]).clamp(true);
  const hue = classHue(o.cls);
  o.labels.forEach((t, i) => {
    const s = sal ? Math.abs(sal[i]) : 0;
    const light = sal ? 88 - 48 * (s / smax) : 80;
    sp.circle(o.pos[2 * i], o.pos[2 * i + 1], sal ? rad(s) : 7, `hsl(${hue}, ${sal ? 70 : 0}%, ${light.toFixed(1)}%)`, 1, '#555');
    p.text(o.pos[2 * i] + (sal ? rad(s) : 7) + 3, o.pos[2 * i + 1], t, { size: 11, color: '#222' });
  });
}
