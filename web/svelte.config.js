// svelte.config.js — TypeScript in <script lang="ts"> via Vite's preprocessor.
import { vitePreprocess } from '@sveltejs/vite-plugin-svelte';

export default { preprocess: vitePreprocess() };
