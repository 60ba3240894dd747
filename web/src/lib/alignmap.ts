// alignmap.ts — the alignment view's matrix: one cross-attention head (or a layer's head
// mean) as a canvas heat map, target tokens as rows (each the decoder position that
// predicts it), source tokens as columns (labels written upwards), each row's strongest
// source token outlined and dotted (its argmax), a colour legend. Special tokens' columns
// are drawn but never marked. What it does not: fetch, compute alignments (lib/align.ts)
// or keep state (views/AlignView.svelte).
import { t } from './i18n';

export interface AlignMapOptions {
  rowLabels: string[]; // (Tt)
  colLabels: string[]; // (Ts)
  A: ArrayLike<number>; // (Tt, Ts) row-major
  marks: number[]; // (Tt) the argmax column of each row, -1 = none
  heat: (v: number) => [number, number, number];
  cell: number; // px per token
  title: string;
}

export interface AlignLayout {
  left: number;
  top: number;
  cell: number;
  width: number;
  height: number;
}

const LEGEND_W = 120;

export function alignLayout(o: Pick<AlignMapOptions, 'rowLabels' | 'colLabels' | 'cell'>): AlignLayout {
  const left = 110;
  const top = 110;
  return { left, top, cell: o.cell, width: left + o.colLabels.length * o.cell + 24 + LEGEND_W, height: top + o.rowLabels.length * o.cell + 10 };
}

/** The (row, column) under canvas point (x, y), or null. */
export function alignHit(L: AlignLayout, Tt: number, Ts: number, x: number, y: number): { row: number; col: number } | null {
  const col = Math.floor((x - L.left) / L.cell);
  const row = Math.floor((y - L.top) / L.cell);
  return row >= 0 && row < Tt && col >= 0 && col < Ts ? { row, col } : null;
}

export function drawAlignMap(ctx: CanvasRenderingContext2D, o: AlignMapOptions): AlignLayout {
  const L = alignLayout(o);
  const Tt = o.rowLabels.length;
  const Ts = o.colLabels.length;
  ctx.clearRect(0, 0, L.width, L.height);
  ctx.fillStyle = '#222';
  ctx.font = 'bold 12px sans-serif';
  ctx.textAlign = 'left';
  ctx.textBaseline = 'alphabetic';
  ctx.fillText(o.title, 4, 14);
  const img = ctx.createImageData(Math.max(1, Ts), Math.max(1, Tt));
  for (let i = 0; i < Tt; i++)
    for (let j = 0; j < Ts; j++) {
      const [r, g, b] = o.heat(o.A[i * Ts + j]);
      const k = (i * Ts + j) * 4;
      img.data[k] = r;
      img.data[k + 1] = g;
      img.data[k + 2] = b;
      img.data[k + 3] = 255;
    }
  const off = document.createElement('canvas');
  off.width = Math.max(1, Ts);
  off.height = Math.max(1, Tt);
  off.getContext('2d')?.putImageData(img, 0, 0);
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, L.left, L.top, Ts * L.cell, Tt * L.cell);
  const font = Math.max(9, Math.min(12, Math.floor(L.cell) - 2));
  ctx.font = `${font}px sans-serif`;
  ctx.fillStyle = '#222';
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  o.rowLabels.forEach((s, i) => ctx.fillText(s, L.left - 4, L.top + (i + 0.5) * L.cell));
  ctx.save();
  ctx.textAlign = 'left';
  o.colLabels.forEach((s, j) => {
    ctx.save();
    ctx.translate(L.left + (j + 0.5) * L.cell, L.top - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.fillText(s, 0, 0);
    ctx.restore();
  });
  ctx.restore();
  ctx.strokeStyle = '#d62728';
  ctx.fillStyle = '#d62728';
  ctx.lineWidth = 2;
  o.marks.forEach((j, i) => {
    if (j < 0) return;
    const x = L.left + j * L.cell;
    const y = L.top + i * L.cell;
    ctx.strokeRect(x + 1, y + 1, L.cell - 2, L.cell - 2);
    ctx.beginPath();
    ctx.arc(x + L.cell / 2, y + L.cell / 2, Math.max(1.5, L.cell / 8), 0, 2 * Math.PI);
    ctx.fill();
  });
  const lx = L.left + Ts * L.cell + 24;
  const lh = Math.max(40, Math.min(160, Tt * L.cell));
  for (let k = 0; k < lh; k++) {
    const [r, g, b] = o.heat(1 - k / (lh - 1));
    ctx.fillStyle = `rgb(${r},${g},${b})`;
    ctx.fillRect(lx, L.top + k, 12, 1);
  }
  ctx.fillStyle = '#222';
  ctx.textAlign = 'left';
  ctx.textBaseline = 'middle';
  ctx.font = '10px sans-serif';
  ctx.fillText('1', lx + 16, L.top + 4);
  ctx.fillText('0', lx + 16, L.top + lh - 4);
  ctx.fillText(t('align.argmax'), lx, L.top + lh + 14);
  return L;
}
