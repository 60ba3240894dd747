// harness.mjs — what the browser tests share: starting the real `attnscope serve` on an
// ephemeral loopback port and reading the URL it prints, opening Chromium, and reading a
// reply (JSON or binary tensors). Test support only.
import { spawn } from 'node:child_process';

// Starts `BIN serve --port 0 --threads 2 ...args`; resolves {p, url} once the server
// prints "listening on http://127.0.0.1:PORT/", rejects if it exits first or has not
// started within 60 s. The caller kills p.
export function startServer(bin, args) {
  return new Promise((resolve, reject) => {
    const p = spawn(bin, ['serve', '--port', '0', '--threads', '2', ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    const t = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 60_000);
    p.stdout.on('data', (d) => {
      out += d;
      const m = /listening on (http:\/\/127\.0\.0\.1:\d+)\//.exec(out);
      if (m) {
        clearTimeout(t);
        resolve({ p, url: m[1] });
      }
    });
    p.on('exit', (c) => reject(new Error(`server exited ${c}: ${out}`)));
  });
}

// Debian's Chromium, headless, with the flags every browser test uses (no sandbox, GPU,
// QUIC, first-run, background networking, component updates or sync).
export const CHROMIUM = {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync'],
};

// Stops a server started by startServer with SIGTERM; resolves to its exit code.
export function stopServer(p) {
  const done = new Promise((r) => p.on('exit', (code) => r(code)));
  p.kill('SIGTERM');
  return done;
}

// A persistent Chromium context in profileDir (English UI, scale 1, the given viewport
// height and extra context options) and its first page, with a 60 s default timeout
// (generous: CI machines may be loaded; every wait still has a bound) and page errors
// logged. Resolves {browser, page}; the caller closes browser.
export async function openBrowser(chromium, profileDir, { height = 1000, ...extra } = {}) {
  const browser = await chromium.launchPersistentContext(profileDir, {
    ...CHROMIUM,
    viewport: { width: 1400, height },
    deviceScaleFactor: 1,
    locale: 'en-US', // the English UI the tests read, whatever the machine's language
    ...extra,
  });
  const page = browser.pages()[0] ?? (await browser.newPage());
  page.setDefaultTimeout(60_000);
  page.on('pageerror', (e) => console.log('pageerror:', e.message));
  return { browser, page };
}

// The body of a server reply: parsed JSON, or a binary tensor reply ("ASTB", u32 header
// length, JSON header, data) as {meta, <tensor name>: Float32Array} (f32 tensors only).
export async function replyBody(r) {
  if (r.headers.get('content-type').startsWith('application/json')) return r.json();
  const buf = Buffer.from(await r.arrayBuffer());
  const n = buf.readUInt32LE(4);
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8'));
  const out = { meta: header.meta };
  for (const t of header.tensors) {
    const b = buf.subarray(8 + n + t.offset, 8 + n + t.offset + t.nbytes);
    out[t.name] = new Float32Array(b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength));
  }
  return out;
}
