import { defineConfig } from "vite";

// The gateway serves dist/ (embedded by embed.go): index.html at / and the
// content-hashed files under /assets/. base "./" keeps every URL relative,
// so the console also works under a path prefix (an Ingress).
export default defineConfig({
  base: "./",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
    modulePreload: { polyfill: false },
    assetsInlineLimit: 0,
    sourcemap: false,
  },
  server: {
    // `npm run dev` against a running gateway (make dev).
    proxy: { "/v1": "http://127.0.0.1:8080" },
  },
});
