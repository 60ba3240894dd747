// main.ts — mounts the explorer, or, on a standalone page that carries its run
// (api/embedded.ts: the Python package's notebook views), the embedded views.
import { mount } from 'svelte';
import App from './App.svelte';
import Embed from './Embed.svelte';
import { EmbeddedRunData, embeddedBytes } from './api/embedded';

const target = document.getElementById('app');
if (!target) throw new Error('no #app element');
const bytes = embeddedBytes();
export default bytes ? mount(Embed, { target, props: { data: new EmbeddedRunData(bytes) } }) : mount(App, { target });
