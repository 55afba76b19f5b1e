// Builds the console into the Python package, where the daemon serves it at /console/.
import { defineConfig } from 'vite';
import { svelte } from '@sveltejs/vite-plugin-svelte';

export default defineConfig({
  base: '/console/',
  plugins: [
    svelte({
      // Props copied into local state on purpose (forms start from the current values).
      onwarn: (warning, handler) => warning.code !== 'state_referenced_locally' && handler(warning),
    }),
  ],
  build: {
    outDir: '../src/corral/console/static',
    emptyOutDir: true,
    chunkSizeWarningLimit: 1024,
  },
});
