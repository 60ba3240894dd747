// main.ts — mounts the explorer, or, on a standalone page that carries its data
// (api/embedded.ts: the Python package's notebook views), the embedded views of a run (or
// of several: an encoder-decoder's parts), the embedded head overview of an analysis run or
// an embedded generation.
import { mount } from 'svelte';
import App from './App.svelte';
import Embed from './Embed.svelte';
import EmbedGeneration from './EmbedGeneration.svelte';
import EmbedOverview from './EmbedOverview.svelte';
import { EmbeddedRunData, embeddedBytes, embeddedMeta, embeddedPartBytes } from './api/embedded';

const target = document.getElementById('app');
if (!target) throw new Error('no #app element');
const bytes = embeddedBytes();
const meta = bytes ? embeddedMeta(bytes) : null;
export default !bytes || !meta
  ? mount(App, { target })
  : meta.view === 'overview'
    ? mount(EmbedOverview, { target, props: { meta } })
    : meta.view === 'generation'
      ? mount(EmbedGeneration, { target, props: { bytes, meta } })
      : mount(Embed, { target, props: { parts: [bytes, ...embeddedPartBytes()].map((b) => new EmbeddedRunData(b)) } });
