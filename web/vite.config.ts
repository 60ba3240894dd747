// vite.config.ts — builds the explorer into dist/ (or --outDir) as a few hashed
// files under /assets/, which the attnscope binary embeds. No CDN, no source maps.
import { defineConfig } from 'vite';
import { svelte } from '@sveltejs/vite-plugin-svelte';

export default defineConfig({
  plugins: [svelte()],
  base: '/',
  build: {
    sourcemap: false,
    assetsInlineLimit: 0,
    chunkSizeWarningLimit: 1000,
  },
  server: {
    proxy: { '/api': 'http://127.0.0.1:8080' },
  },
});
