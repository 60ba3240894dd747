// frame.ts — a standalone page inside a notebook's <iframe srcdoc> (same origin) makes its
// frame as tall as its content, following resizes. Outside a frame, or in a frame of
// another origin, it does nothing. No drawing here.

/** Starts following the content's height; returns the function that stops it. */
export function fitFrame(): () => void {
  let frame: HTMLElement | null = null;
  try {
    frame = window.frameElement as HTMLElement | null;
  } catch {
    frame = null; /* another origin: the frame keeps its height */
  }
  if (!frame) return () => {};
  const el = frame;
  const fit = (): void => {
    el.style.height = `${document.documentElement.scrollHeight + 4}px`;
  };
  const ro = new ResizeObserver(fit);
  ro.observe(document.body);
  return () => ro.disconnect();
}
