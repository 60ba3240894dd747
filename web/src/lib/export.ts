// export.ts — saves what a view draws as SVG or as PNG at publication resolution
// (3× by default), by replaying the view's drawing through a Painter.
import { CanvasPainter, SvgPainter, type Painter } from './painter';

export interface Scene {
  width: number;
  height: number;
  draw: (p: Painter) => void;
}

/** Saves blob as a file named filename through a temporary link. */
export function download(blob: Blob, filename: string): void {
  const url = URL.createObjectURL(blob);
  const a = document.createElement('a');
  a.href = url;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

export function sceneToSvg(s: Scene): string {
  const p = new SvgPainter(Math.ceil(s.width), Math.ceil(s.height));
  s.draw(p);
  return p.toString();
}

export function exportSvg(s: Scene, filename: string): void {
  download(new Blob([sceneToSvg(s)], { type: 'image/svg+xml' }), filename);
}

export function sceneToCanvas(s: Scene, scale: number): HTMLCanvasElement {
  const c = document.createElement('canvas');
  c.width = Math.ceil(s.width * scale);
  c.height = Math.ceil(s.height * scale);
  const ctx = c.getContext('2d');
  if (!ctx) throw new Error('no 2d canvas');
  ctx.setTransform(scale, 0, 0, scale, 0, 0);
  ctx.fillStyle = '#fff';
  ctx.fillRect(0, 0, s.width, s.height);
  s.draw(new CanvasPainter(ctx));
  return c;
}

export async function exportPng(s: Scene, filename: string, scale = 3): Promise<void> {
  // Browsers cap canvas area (Chromium: 16384 px a side): scale down for very tall views.
  const k = Math.min(scale, 16000 / Math.max(s.width, s.height));
  const c = sceneToCanvas(s, k);
  const blob = await new Promise<Blob | null>((res) => c.toBlob(res, 'image/png'));
  if (!blob) throw new Error('PNG encoding failed');
  download(blob, filename);
}
