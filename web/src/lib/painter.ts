// painter.ts — one drawing interface with two back ends: a canvas (on screen and
// PNG export) and an SVG string (SVG export). Views draw through it so the exported
// figure is exactly what is on screen. No D3, no DOM beyond the canvas given.

export interface TextStyle {
  size?: number;
  color?: string;
  align?: 'left' | 'right' | 'center';
  weight?: 'normal' | 'bold';
  font?: string;
  /** rotation in degrees around (x, y), clockwise (e.g. -90: reads upwards) */
  rotate?: number;
}

/** Values in [0, 1] or any range; colour maps a value to an rgb triple. */
export interface MatrixImage {
  cols: number;
  rows: number;
  values: ArrayLike<number>;
  color: (v: number) => [number, number, number];
}

export interface Painter {
  readonly kind: 'canvas' | 'svg';
  line(x1: number, y1: number, x2: number, y2: number, color: string, alpha: number, width: number): void;
  /** Many segments at once: seg holds x1, y1, x2, y2 for each. */
  lines(seg: ArrayLike<number>, n: number, color: string, alpha: number, width: number): void;
  rect(x: number, y: number, w: number, h: number, color: string, alpha?: number): void;
  strokeRect(x: number, y: number, w: number, h: number, color: string, width: number): void;
  text(x: number, y: number, s: string, style?: TextStyle): void;
  /** Draws a matrix as an image scaled into the box, one pixel per cell before scaling. */
  matrix(x: number, y: number, w: number, h: number, m: MatrixImage): void;
  // Dodrio views: optional so painter wrappers need not forward them; both
  // built-in painters implement them (lib/shapes.ts checks).
  /** A filled circle, with an optional outline. */
  circle?(x: number, y: number, r: number, fill: string, alpha?: number, stroke?: string): void;
  /** An open polyline through pts (x0, y0, x1, y1, ...). */
  polyline?(pts: ArrayLike<number>, color: string, alpha: number, width: number): void;
}

/** The drawing font: the system's sans-serif, with Simplified Chinese fonts for the zh-CN UI's characters. */
export const FONT = 'system-ui, -apple-system, "Segoe UI", Roboto, "PingFang SC", "Microsoft YaHei", "Noto Sans CJK SC", "Source Han Sans SC", sans-serif';

function matrixCanvas(m: MatrixImage): HTMLCanvasElement {
  const c = document.createElement('canvas');
  c.width = Math.max(1, m.cols);
  c.height = Math.max(1, m.rows);
  const ctx = c.getContext('2d');
  if (!ctx) return c;
  const img = ctx.createImageData(c.width, c.height);
  const n = m.cols * m.rows;
  for (let i = 0; i < n; i++) {
    const [r, g, b] = m.color(m.values[i]);
    img.data[4 * i] = r;
    img.data[4 * i + 1] = g;
    img.data[4 * i + 2] = b;
    img.data[4 * i + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
  return c;
}

export class CanvasPainter implements Painter {
  readonly kind = 'canvas';
  constructor(private ctx: CanvasRenderingContext2D) {}

  line(x1: number, y1: number, x2: number, y2: number, color: string, alpha: number, width: number): void {
    const c = this.ctx;
    c.globalAlpha = alpha;
    c.strokeStyle = color;
    c.lineWidth = width;
    c.beginPath();
    c.moveTo(x1, y1);
    c.lineTo(x2, y2);
    c.stroke();
    c.globalAlpha = 1;
  }
  lines(seg: ArrayLike<number>, n: number, color: string, alpha: number, width: number): void {
    if (n <= 0) return;
    const c = this.ctx;
    c.globalAlpha = alpha;
    c.strokeStyle = color;
    c.lineWidth = width;
    c.beginPath();
    for (let i = 0; i < n; i++) {
      c.moveTo(seg[4 * i], seg[4 * i + 1]);
      c.lineTo(seg[4 * i + 2], seg[4 * i + 3]);
    }
    c.stroke();
    c.globalAlpha = 1;
  }
  rect(x: number, y: number, w: number, h: number, color: string, alpha = 1): void {
    this.ctx.globalAlpha = alpha;
    this.ctx.fillStyle = color;
    this.ctx.fillRect(x, y, w, h);
    this.ctx.globalAlpha = 1;
  }
  strokeRect(x: number, y: number, w: number, h: number, color: string, width: number): void {
    this.ctx.strokeStyle = color;
    this.ctx.lineWidth = width;
    this.ctx.strokeRect(x, y, w, h);
  }
  text(x: number, y: number, s: string, st: TextStyle = {}): void {
    const c = this.ctx;
    c.font = `${st.weight ?? 'normal'} ${st.size ?? 12}px ${st.font ?? FONT}`;
    c.fillStyle = st.color ?? '#222';
    c.textAlign = st.align ?? 'left';
    c.textBaseline = 'middle';
    if (!st.rotate) {
      c.fillText(s, x, y);
      return;
    }
    c.save();
    c.translate(x, y);
    c.rotate((st.rotate * Math.PI) / 180);
    c.fillText(s, 0, 0);
    c.restore();
  }
  circle(x: number, y: number, r: number, fill: string, alpha = 1, stroke?: string): void {
    const c = this.ctx;
    c.globalAlpha = alpha;
    c.fillStyle = fill;
    c.beginPath();
    c.arc(x, y, r, 0, 2 * Math.PI);
    c.fill();
    c.globalAlpha = 1;
    if (stroke) {
      c.strokeStyle = stroke;
      c.lineWidth = 1;
      c.stroke();
    }
  }
  polyline(pts: ArrayLike<number>, color: string, alpha: number, width: number): void {
    if (pts.length < 4) return;
    const c = this.ctx;
    c.globalAlpha = alpha;
    c.strokeStyle = color;
    c.lineWidth = width;
    c.beginPath();
    c.moveTo(pts[0], pts[1]);
    for (let i = 2; i + 1 < pts.length; i += 2) c.lineTo(pts[i], pts[i + 1]);
    c.stroke();
    c.globalAlpha = 1;
  }
  matrix(x: number, y: number, w: number, h: number, m: MatrixImage): void {
    const src = matrixCanvas(m);
    this.ctx.imageSmoothingEnabled = false;
    this.ctx.drawImage(src, x, y, w, h);
  }
}

function esc(s: string): string {
  return s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}
const n2 = (v: number): string => (Math.round(v * 100) / 100).toString();

export class SvgPainter implements Painter {
  readonly kind = 'svg';
  private parts: string[] = [];
  constructor(
    private width: number,
    private height: number,
  ) {}

  line(x1: number, y1: number, x2: number, y2: number, color: string, alpha: number, width: number): void {
    this.parts.push(
      `<line x1="${n2(x1)}" y1="${n2(y1)}" x2="${n2(x2)}" y2="${n2(y2)}" stroke="${color}" stroke-opacity="${n2(alpha)}" stroke-width="${n2(width)}"/>`,
    );
  }
  lines(seg: ArrayLike<number>, n: number, color: string, alpha: number, width: number): void {
    if (n <= 0) return;
    const d: string[] = [];
    for (let i = 0; i < n; i++)
      d.push(`M${n2(seg[4 * i])} ${n2(seg[4 * i + 1])}L${n2(seg[4 * i + 2])} ${n2(seg[4 * i + 3])}`);
    this.parts.push(
      `<path d="${d.join('')}" fill="none" stroke="${color}" stroke-opacity="${n2(alpha)}" stroke-width="${n2(width)}"/>`,
    );
  }
  rect(x: number, y: number, w: number, h: number, color: string, alpha = 1): void {
    this.parts.push(
      `<rect x="${n2(x)}" y="${n2(y)}" width="${n2(w)}" height="${n2(h)}" fill="${color}"${alpha < 1 ? ` fill-opacity="${n2(alpha)}"` : ''}/>`,
    );
  }
  strokeRect(x: number, y: number, w: number, h: number, color: string, width: number): void {
    this.parts.push(
      `<rect x="${n2(x)}" y="${n2(y)}" width="${n2(w)}" height="${n2(h)}" fill="none" stroke="${color}" stroke-width="${n2(width)}"/>`,
    );
  }
  text(x: number, y: number, s: string, st: TextStyle = {}): void {
    const anchor = st.align === 'right' ? 'end' : st.align === 'center' ? 'middle' : 'start';
    this.parts.push(
      `<text x="${n2(x)}" y="${n2(y)}" font-size="${st.size ?? 12}" font-weight="${st.weight ?? 'normal'}" fill="${st.color ?? '#222'}" text-anchor="${anchor}" dominant-baseline="middle"${st.rotate ? ` transform="rotate(${n2(st.rotate)} ${n2(x)} ${n2(y)})"` : ''}>${esc(s)}</text>`,
    );
  }
  circle(x: number, y: number, r: number, fill: string, alpha = 1, stroke?: string): void {
    this.parts.push(
      `<circle cx="${n2(x)}" cy="${n2(y)}" r="${n2(r)}" fill="${fill}"${alpha < 1 ? ` fill-opacity="${n2(alpha)}"` : ''}${stroke ? ` stroke="${stroke}"` : ''}/>`,
    );
  }
  polyline(pts: ArrayLike<number>, color: string, alpha: number, width: number): void {
    if (pts.length < 4) return;
    const xy: string[] = [];
    for (let i = 0; i + 1 < pts.length; i += 2) xy.push(`${n2(pts[i])},${n2(pts[i + 1])}`);
    this.parts.push(
      `<polyline points="${xy.join(' ')}" fill="none" stroke="${color}" stroke-opacity="${n2(alpha)}" stroke-width="${n2(width)}"/>`,
    );
  }
  matrix(x: number, y: number, w: number, h: number, m: MatrixImage): void {
    const url = matrixCanvas(m).toDataURL('image/png');
    this.parts.push(
      `<image x="${n2(x)}" y="${n2(y)}" width="${n2(w)}" height="${n2(h)}" preserveAspectRatio="none" style="image-rendering:pixelated" href="${url}"/>`,
    );
  }
  toString(): string {
    return (
      `<?xml version="1.0" encoding="UTF-8"?>\n` +
      `<svg xmlns="http://www.w3.org/2000/svg" width="${this.width}" height="${this.height}" viewBox="0 0 ${this.width} ${this.height}" font-family='${FONT}'>` +
      `<rect width="100%" height="100%" fill="#fff"/>` +
      this.parts.join('') +
      `</svg>\n`
    );
  }
}
