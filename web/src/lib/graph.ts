// graph.ts — Dodrio's semantic attention graph: a sentence's tokens as nodes, sized and
// coloured by gradient saliency for one class, and one head's attention links above a
// threshold as directed edges (query -> key, with an arrowhead; opacity and width by
// weight). Three layouts: force-directed (d3-force: links pull by weight, nodes repel,
// and a collision force on each node's box, circle plus label, keeps nodes and labels
// apart; nodes can be dragged while the simulation runs), radial (tokens in order on a
// circle) and grid (rows in reading order). Hovering or focusing a node highlights its
// edges (outgoing orange, incoming blue) and its neighbours. A legend under the graph
// says what size, colour and edges mean. Drawing goes through a Painter.
import { forceLink, forceManyBody, forceSimulation, forceX, forceY, type Simulation, type SimulationNodeDatum } from 'd3-force';
import { scaleSqrt } from 'd3-scale';
import { t } from './i18n';
import { FONT, type Painter } from './painter';
import { shapes } from './shapes';

export type GraphLayoutKind = 'force' | 'radial' | 'grid';

export interface GraphEdge {
  source: number; // query token
  target: number; // key token
  weight: number;
}

/** The texts the graph draws, in the current UI language. */
export const GRAPH_TEXT = {
  legendSize: (cls: string): string => t('graph.legendSize', { cls }),
  get legendNoSaliency(): string {
    return t('graph.legendNoSaliency');
  },
  get legendEdges(): string {
    return t('graph.legendEdges');
  },
  get legendHover(): string {
    return t('graph.legendHover');
  },
};

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

const LABEL_SIZE = 11; // px
const LABEL_GAP = 3; // between a circle and its label
const PAD = 3; // between two node boxes

/** The radius of every node: sqrt scale of |saliency| over the sentence, or 7 without saliency. */
export function nodeRadii(saliency: number[] | null, T: number): Float32Array {
  const out = new Float32Array(T).fill(7);
  if (!saliency) return out;
  const smax = Math.max(1e-12, ...saliency.map(Math.abs));
  const rad = scaleSqrt().domain([0, smax]).range([5, 18]).clamp(true);
  for (let i = 0; i < T; i++) out[i] = rad(Math.abs(saliency[i] ?? 0));
  return out;
}

let measureCtx: CanvasRenderingContext2D | null = null;

/** Width in px of each label as drawn (bold, the wider of the two weights used). */
export function labelWidths(labels: string[]): Float32Array {
  measureCtx ??= document.createElement('canvas').getContext('2d');
  const out = new Float32Array(labels.length);
  if (!measureCtx) return out.map((_, i) => labels[i].length * 7);
  measureCtx.font = `bold ${LABEL_SIZE}px ${FONT}`;
  labels.forEach((s, i) => (out[i] = Math.ceil(measureCtx!.measureText(s).width)));
  return out;
}

/** Box of node i (x0, y0, x1, y1): its circle and the label to its right. */
export function nodeBox(pos: ArrayLike<number>, radii: ArrayLike<number>, widths: ArrayLike<number>, i: number): [number, number, number, number] {
  const x = pos[2 * i];
  const y = pos[2 * i + 1];
  const r = radii[i];
  const hh = Math.max(r, LABEL_SIZE / 2 + 2);
  return [x - r, y - hh, x + r + LABEL_GAP + widths[i], y + hh];
}

export interface GraphLayoutOptions {
  kind: GraphLayoutKind;
  T: number;
  edges: GraphEdge[];
  width: number;
  height: number;
  /** (T) node radii (nodeRadii) */
  radii: Float32Array;
  /** (T) label widths in px (labelWidths) */
  labelW: Float32Array;
}

interface Node extends SimulationNodeDatum {
  i: number;
}

/** Keeps node i's box inside [0, width] x [0, height] (as far as it fits). */
function clampNode(n: { x?: number; y?: number }, r: number, lw: number, o: GraphLayoutOptions): void {
  const hh = Math.max(r, LABEL_SIZE / 2 + 2);
  n.x = Math.max(r + 4, Math.min(o.width - r - LABEL_GAP - lw - 4, n.x ?? 0));
  n.y = Math.max(hh + 4, Math.min(o.height - hh - 4, n.y ?? 0));
}

/** The box (circle plus label, as nodeBox) of a simulation node at its current position. */
function boxOf(n: Node, o: GraphLayoutOptions): [number, number, number, number] {
  return nodeBox([n.x ?? 0, n.y ?? 0], [o.radii[n.i]], [o.labelW[n.i]], 0);
}

/**
 * Calls push(na, nb, axis, d, s) for every pair of nodes whose boxes overlap, PAD
 * included: axis is the one of least overlap, d the overlap along it and s the side na
 * goes to (-1 or 1; on x by the boxes' centres). Returns whether any pair overlapped.
 */
function forOverlaps(
  nodes: Node[],
  o: GraphLayoutOptions,
  push: (na: Node, nb: Node, axis: 'x' | 'y', d: number, s: number) => void,
): boolean {
  let any = false;
  for (let a = 0; a < nodes.length; a++)
    for (let b = a + 1; b < nodes.length; b++) {
      const A = boxOf(nodes[a], o); // current positions: push may have moved them
      const B = boxOf(nodes[b], o);
      const ox = Math.min(A[2], B[2]) - Math.max(A[0], B[0]) + PAD;
      const oy = Math.min(A[3], B[3]) - Math.max(A[1], B[1]) + PAD;
      if (ox <= 0 || oy <= 0) continue;
      any = true;
      if (ox < oy) push(nodes[a], nodes[b], 'x', ox, A[0] + A[2] < B[0] + B[2] ? -1 : 1);
      else push(nodes[a], nodes[b], 'y', oy, A[1] + A[3] < B[1] + B[3] ? -1 : 1);
    }
  return any;
}

/**
 * A d3-force that pushes apart nodes whose boxes overlap, along the axis of least
 * overlap, through their velocities.
 */
function boxCollide(nodes: Node[], o: GraphLayoutOptions, strength = 0.6): () => void {
  return () => {
    forOverlaps(nodes, o, (na, nb, axis, d, s) => {
      const v = axis === 'x' ? 'vx' : 'vy';
      na[v] = (na[v] ?? 0) + (s * d * strength) / 2;
      nb[v] = (nb[v] ?? 0) - (s * d * strength) / 2;
    });
  };
}

/**
 * Moves nodes apart until no two boxes overlap (or `rounds` passes are done), keeping
 * fixed nodes (fx set) where they are and every node inside the canvas.
 */
function separate(nodes: Node[], o: GraphLayoutOptions, rounds = 400): void {
  for (let k = 0; k < rounds; k++) {
    const moved = forOverlaps(nodes, o, (na, nb, axis, d, s) => {
      const fa = na.fx != null ? 0 : nb.fx != null ? 1 : 0.5;
      na[axis] = (na[axis] ?? 0) + s * (d + 0.5) * fa;
      nb[axis] = (nb[axis] ?? 0) - s * (d + 0.5) * (1 - fa);
      clampNode(na, o.radii[na.i], o.labelW[na.i], o);
      clampNode(nb, o.radii[nb.i], o.labelW[nb.i], o);
    });
    if (!moved) return;
  }
}

/**
 * A graph layout whose nodes can be dragged. The force layout runs 300 ticks at once,
 * then its boxes are separated; dragging pins the node under the pointer and restarts
 * the simulation (d3-timer), calling `ontick` with the new positions each tick. The
 * radial and grid layouts move only the dragged node. Call stop() before dropping it.
 */
export class GraphLayout {
  private nodes: Node[];
  private sim: Simulation<Node, undefined> | null = null;
  /** (2T) x, y of every node inside [0, width] x [0, height] */
  pos: Float32Array;

  constructor(
    private o: GraphLayoutOptions,
    private ontick: (pos: Float32Array) => void = () => {},
  ) {
    this.nodes = Array.from({ length: o.T }, (_, i) => ({ i }));
    this.pos = new Float32Array(2 * o.T);
    const cx = o.width / 2;
    const cy = o.height / 2;
    if (o.kind === 'radial') {
      const r = Math.min(o.width, o.height) / 2 - 60;
      this.nodes.forEach((n, i) => {
        const a = -Math.PI / 2 + (2 * Math.PI * i) / o.T;
        n.x = cx + r * Math.cos(a);
        n.y = cy + r * Math.sin(a);
      });
    } else if (o.kind === 'grid') {
      const cols = Math.ceil(Math.sqrt(o.T * (o.width / o.height)));
      const rows = Math.ceil(o.T / cols);
      this.nodes.forEach((n, i) => {
        n.x = 50 + ((i % cols) + 0.5) * ((o.width - 100) / cols);
        n.y = 40 + (Math.floor(i / cols) + 0.5) * ((o.height - 80) / rows);
      });
    } else {
      const links = o.edges.map((e) => ({ source: e.source, target: e.target, weight: e.weight }));
      this.sim = forceSimulation(this.nodes)
        .force('link', forceLink<Node, (typeof links)[number]>(links).distance(70).strength((l) => 0.05 + 0.9 * l.weight))
        .force('charge', forceManyBody().strength(-160))
        .force('x', forceX<Node>(cx).strength(0.06))
        .force('y', forceY<Node>(cy).strength(0.08))
        .force('box', boxCollide(this.nodes, o))
        .stop();
      for (let k = 0; k < 300; k++) {
        this.sim.tick();
        this.nodes.forEach((n) => clampNode(n, o.radii[n.i], o.labelW[n.i], o));
      }
      separate(this.nodes, o);
      this.sim.on('tick', () => {
        this.nodes.forEach((n) => clampNode(n, o.radii[n.i], o.labelW[n.i], o));
        this.ontick(this.copy());
      });
      this.sim.on('end', () => {
        separate(this.nodes, o);
        this.ontick(this.copy());
      });
    }
    this.pos = this.copy();
  }

  private copy(): Float32Array {
    this.nodes.forEach((n) => {
      this.pos[2 * n.i] = n.x ?? 0;
      this.pos[2 * n.i + 1] = n.y ?? 0;
    });
    return Float32Array.from(this.pos);
  }

  /** Moves node i to (x, y) and pins it there (phase 'start' and 'move'); 'end' lets the layout settle. */
  drag(i: number, x: number, y: number, phase: 'start' | 'move' | 'end'): void {
    const n = this.nodes[i];
    if (!n) return;
    n.x = n.fx = x;
    n.y = n.fy = y;
    clampNode(n, this.o.radii[i], this.o.labelW[i], this.o);
    n.fx = n.x;
    n.fy = n.y;
    if (this.sim) {
      if (phase === 'start') this.sim.alphaTarget(0.3).restart();
      if (phase === 'end') this.sim.alphaTarget(0);
      return;
    }
    if (phase === 'end') separate(this.nodes, this.o);
    this.ontick(this.copy());
  }

  stop(): void {
    this.sim?.stop();
    this.sim?.on('tick', null).on('end', null);
  }
}

/** The node whose box contains (x, y), or -1. */
export function hitNode(pos: Float32Array, radii: Float32Array, widths: Float32Array, x: number, y: number): number {
  for (let i = radii.length - 1; i >= 0; i--) {
    const [x0, y0, x1, y1] = nodeBox(pos, radii, widths, i);
    if (x >= x0 && x <= x1 && y >= y0 && y <= y1) return i;
  }
  return -1;
}

/** A hue per class (class 0 red, 1 blue, then others). */
export function classHue(c: number): number {
  return [0, 215, 130, 40, 280][c % 5];
}

/** Height of the legend drawn under the graph. */
export const GRAPH_LEGEND_H = 64;

export interface GraphDrawOptions {
  labels: string[];
  pos: Float32Array;
  edges: GraphEdge[];
  /** (T) saliency of the chosen class, or null */
  saliency: number[] | null;
  cls: number;
  /** the class's name for the legend (defaults to its index) */
  clsName?: string;
  /** (T) node radii (nodeRadii) */
  radii: Float32Array;
  /** the hovered, focused or pinned node whose edges and neighbours are highlighted, or -1 */
  focus: number;
  width: number;
  /** height of the graph; the legend is drawn below it */
  height: number;
  title?: string;
}

const OUT_COLOR = '#e6550d'; // edges from the focused token (it attends to)
const IN_COLOR = '#3182bd'; // edges to the focused token (attended to by)

/** An arrow from node a to node b, stopping at b's circle, with a two-stroke head. */
function arrow(p: Painter, o: GraphDrawOptions, e: GraphEdge, color: string, alpha: number): void {
  const x1 = o.pos[2 * e.source];
  const y1 = o.pos[2 * e.source + 1];
  const x2 = o.pos[2 * e.target];
  const y2 = o.pos[2 * e.target + 1];
  const d = Math.hypot(x2 - x1, y2 - y1);
  if (d < 1) return;
  const ux = (x2 - x1) / d;
  const uy = (y2 - y1) / d;
  const tx = x2 - ux * (o.radii[e.target] + 2);
  const ty = y2 - uy * (o.radii[e.target] + 2);
  const w = 0.5 + 3 * e.weight;
  const head = 5 + 2 * w;
  const seg = new Float32Array([
    x1 + ux * o.radii[e.source], y1 + uy * o.radii[e.source], tx, ty,
    tx, ty, tx - head * (ux * 0.87 - uy * 0.5), ty - head * (uy * 0.87 + ux * 0.5),
    tx, ty, tx - head * (ux * 0.87 + uy * 0.5), ty - head * (uy * 0.87 - ux * 0.5),
  ]);
  p.lines(seg, 3, color, alpha, w);
}

/** Points of a closed circle outline. */
function ring(x: number, y: number, r: number, n = 32): Float32Array {
  const out = new Float32Array(2 * (n + 1));
  for (let k = 0; k <= n; k++) {
    out[2 * k] = x + r * Math.cos((2 * Math.PI * k) / n);
    out[2 * k + 1] = y + r * Math.sin((2 * Math.PI * k) / n);
  }
  return out;
}

export function drawGraph(p: Painter, o: GraphDrawOptions): void {
  const sp = shapes(p);
  if (o.title) p.text(10, 12, o.title, { size: 12, weight: 'bold' });
  const f = o.focus;
  const near = new Set<number>();
  for (const e of o.edges) {
    const touches = f >= 0 && (e.source === f || e.target === f);
    if (touches) near.add(e.source === f ? e.target : e.source);
    if (f >= 0 && !touches) arrow(p, o, e, '#999', 0.12);
  }
  for (const e of o.edges) {
    if (f < 0) arrow(p, o, e, '#444', Math.min(1, 0.15 + e.weight));
    else if (e.source === f) arrow(p, o, e, OUT_COLOR, Math.min(1, 0.35 + e.weight));
    else if (e.target === f) arrow(p, o, e, IN_COLOR, Math.min(1, 0.35 + e.weight));
  }
  const sal = o.saliency;
  const smax = sal ? Math.max(1e-12, ...sal.map(Math.abs)) : 1;
  const hue = classHue(o.cls);
  const fill = (s: number): string => `hsl(${hue}, ${sal ? 70 : 0}%, ${(sal ? 88 - 48 * (s / smax) : 80).toFixed(1)}%)`;
  o.labels.forEach((t, i) => {
    const x = o.pos[2 * i];
    const y = o.pos[2 * i + 1];
    const r = o.radii[i];
    const on = f < 0 || i === f || near.has(i);
    sp.circle(x, y, r, fill(sal ? Math.abs(sal[i]) : 0), on ? 1 : 0.3, i === f ? '#111' : on ? '#555' : '#bbb');
    if (i === f) sp.polyline(ring(x, y, r + 3), '#111', 1, 1.5);
    p.text(x + r + LABEL_GAP, y, t, { size: LABEL_SIZE, color: on ? '#222' : '#aaa', weight: f >= 0 && on ? 'bold' : 'normal' });
  });
  drawGraphLegend(p, o, fill, smax);
}

/** Under the graph: three sample nodes with their |saliency|, and what the arrows mean. */
function drawGraphLegend(p: Painter, o: GraphDrawOptions, fill: (s: number) => string, smax: number): void {
  const sp = shapes(p);
  const y = o.height + 14;
  p.line(0, o.height + 2, o.width, o.height + 2, '#ddd', 1, 1);
  const cls = o.clsName ?? String(o.cls);
  p.text(10, y, o.saliency ? GRAPH_TEXT.legendSize(cls) : GRAPH_TEXT.legendNoSaliency, { size: 11, color: '#444' });
  if (o.saliency) {
    const rad = scaleSqrt().domain([0, smax]).range([5, 18]).clamp(true);
    let x = Math.max(340, o.width - 300);
    for (const s of [0.1 * smax, 0.5 * smax, smax]) {
      sp.circle(x, y + 12, rad(s), fill(s), 1, '#555');
      p.text(x + rad(s) + 4, y + 12, s.toPrecision(2), { size: 10, color: '#444' });
      x += 2 * rad(s) + 50;
    }
  }
  p.text(10, y + 22, GRAPH_TEXT.legendEdges, { size: 11, color: '#444' });
  p.text(10, y + 40, GRAPH_TEXT.legendHover, { size: 11, color: '#444' });
}
