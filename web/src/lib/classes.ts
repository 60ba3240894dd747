// classes.ts — the name of a classifier class: the model's id2label entry (GET /models,
// `labels`) when it has one, else the class index. No drawing.

/** labels[c] when the model names class c, else c as a number; '' for null. */
export function className(labels: readonly (string | null)[], c: number | null): string {
  if (c === null) return '';
  return labels[c] ?? String(c);
}
