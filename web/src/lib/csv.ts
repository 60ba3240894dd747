// csv.ts — RFC 4180 CSV text from rows of cells (quoted when a cell holds a comma, a
// quote, a CR or LF; quotes doubled; CRLF line ends) and its download as a file.

import { download } from './export';

export type Cell = string | number | boolean | null | undefined;

function cell(v: Cell): string {
  if (v === null || v === undefined) return '';
  const s = String(v);
  return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

export function toCsv(header: string[], rows: Cell[][]): string {
  return [header, ...rows].map((r) => r.map(cell).join(',')).join('\r\n') + '\r\n';
}

export function downloadCsv(text: string, filename: string): void {
  download(new Blob([text], { type: 'text/csv;charset=utf-8' }), filename);
}
